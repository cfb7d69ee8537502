"""An agent's memory inbox: write, edit, delete, with an audit log; replaced and deleted texts are
kept in the inbox's .trash folder.

The path is always built from a validated slug, never taken from the client; writes are atomic
(temp file in the inbox, fsync, rename, fsync of the folder) and serialised per note; ``created``
and ``updated`` are managed in the front matter, every other key is kept as given; secrets are
redacted before anything reaches disk. Imports config, sources, redact, errors.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sidecar.config import Config, valid_agent
from sidecar.errors import NotFoundError, SourceError
from sidecar.redact import redact
from sidecar.sources import SLUG_RE, agent_inbox

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)?---[ \t]*(?:\n|\Z)", re.S)
_MANAGED = ("created", "updated")


class MemoryWriteError(SourceError):
    """A memory write was refused (bad slug, too large, bad front matter)."""

    code = "bad_memory_write"


@dataclass(frozen=True)
class Written:
    slug: str
    path: Path
    created: bool  # a new note (not a replacement)
    redacted: dict[str, int] = field(default_factory=dict)
    sha256: str = ""
    size: int = 0
    previous: Path | None = None  # where the replaced text was kept (in .trash), if any


def check_agent(agent: str | None) -> str:
    if agent is None:
        raise MemoryWriteError("this operation needs an agent name (the 'agent' field of the request)")
    if not valid_agent(agent):
        raise MemoryWriteError(f"invalid agent name {agent!r}: use a-z, 0-9, '_' and '-' (max 64)")
    return agent


def check_slug(slug: Any) -> str:
    if not isinstance(slug, str) or not SLUG_RE.fullmatch(slug):
        raise MemoryWriteError(
            f"invalid slug {slug!r}: use 1-128 characters a-z, 0-9, '_' and '-', starting with a letter or "
            "digit (no folders, no extension), e.g. 'nas-backup-setup'"
        )
    return slug


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """Front matter of a note as a dict (empty when absent or broken) and the body."""
    m = _FRONT_MATTER.match(text)
    if not m:
        return {}, text
    try:
        data = yaml.safe_load(m.group(1) or "")
    except yaml.YAMLError:
        return {}, text  # keep a broken block as body rather than lose it
    return (data if isinstance(data, dict) else {}), text[m.end() :]


def _now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


def _plain(value: Any) -> Any:
    """YAML gives dates as date objects; keep them as the ISO text the user wrote."""
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return value


class Inboxes:
    """Memory writes for every agent of one home; one lock per note serialises writers."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def path_of(self, agent: str, slug: str) -> Path:
        inbox = agent_inbox(self.cfg, check_agent(agent))
        path = inbox / f"{check_slug(slug)}.md"
        # Built from a validated slug it cannot escape, but the inbox itself could be a symlink.
        if inbox.exists() and not path.parent.resolve().is_relative_to(self.cfg.agents_dir.resolve()):
            raise SourceError(f"the inbox of {agent!r} resolves outside {self.cfg.agents_dir}; refused")
        return path

    @contextlib.contextmanager
    def _lock(self, agent: str, slug: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault((agent, slug), threading.Lock())
        with lock:
            yield

    def write(
        self,
        agent: str,
        slug: str,
        content: str,
        front_matter: dict[str, Any] | None,
        *,
        must_exist: bool,
    ) -> Written:
        """Create or replace (``must_exist=False``) or edit (``must_exist=True``) a memory note."""
        path = self.path_of(agent, slug)
        self._check_content(content, front_matter)
        with self._lock(agent, slug):
            existing: dict[str, Any] = {}
            if path.exists():
                existing, _old_body = split_front_matter(path.read_text(encoding="utf-8", errors="replace"))
            elif must_exist:
                raise NotFoundError(f"no memory note {slug!r} to edit; use memory_write to create it")
            inline, body = split_front_matter(content)
            meta: dict[str, Any] = dict(existing) if must_exist else {}
            meta.update({k: _plain(v) for k, v in inline.items()})
            meta.update(front_matter or {})
            for key in _MANAGED:
                meta.pop(key, None)
            meta["created"] = _plain(existing.get("created")) or _now()
            meta["updated"] = _now()
            text, counts = self._render(meta, body)
            data = text.encode("utf-8")
            if len(data) > self.cfg.memory.max_note_bytes:
                raise MemoryWriteError(
                    f"the note would be {len(data):,} bytes; the limit is {self.cfg.memory.max_note_bytes:,} "
                    "(memory.maxNoteBytes): split it into several notes"
                )
            created = not path.exists()
            # The text being replaced stays recoverable, as a deleted note does (a rewrite that
            # changes only the 'updated' stamp keeps nothing: there is nothing to lose).
            previous = None
            if not created and _unstamped(path.read_text(encoding="utf-8", errors="replace")) != _unstamped(
                text
            ):
                previous = self._keep(agent, slug, path)
            atomic_write(path, data)
            digest = hashlib.sha256(data).hexdigest()
            self.audit(agent, "edit" if must_exist else "write", slug, digest, len(data))
        return Written(slug, path, created, counts, digest, len(data), previous)

    def _keep(self, agent: str, slug: str, path: Path) -> Path:
        """Copy the current text of a note to ``.trash/<slug>--<time>.md`` (caller holds the lock)."""
        trash = path.parent / ".trash"
        trash.mkdir(mode=0o700, exist_ok=True)
        target = trash / f"{slug}--{dt.datetime.now().strftime('%Y%m%dT%H%M%S%f')}.md"
        atomic_write(target, path.read_bytes())
        return target

    def _check_content(self, content: Any, front_matter: Any) -> None:
        if not isinstance(content, str):
            raise MemoryWriteError("'content' must be text")
        if "\0" in content:
            raise MemoryWriteError("'content' contains a NUL byte")
        if len(content.encode("utf-8")) > self.cfg.memory.max_note_bytes:
            raise MemoryWriteError(
                f"'content' is larger than {self.cfg.memory.max_note_bytes:,} bytes (memory.maxNoteBytes)"
            )
        if front_matter is not None:
            if not isinstance(front_matter, dict) or not all(isinstance(k, str) for k in front_matter):
                raise MemoryWriteError("'frontmatter' must be an object with text keys")
            try:
                json.dumps(front_matter)
            except (TypeError, ValueError) as exc:
                raise MemoryWriteError(f"'frontmatter' is not plain data: {exc}") from exc

    def _render(self, meta: dict[str, Any], body: str) -> tuple[str, dict[str, int]]:
        counts: dict[str, int] = {}
        if self.cfg.memory.redact_secrets:
            body = _redact_into(body, counts)
            meta = _redact_values(meta, counts)
        dumped = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
        body = body.lstrip("\n")
        return f"---\n{dumped}---\n{body if body.endswith(chr(10)) or not body else body + chr(10)}", counts

    def delete(self, agent: str, slug: str) -> Path | None:
        """Move the note to ``<inbox>/.trash/<slug>--<time>.md``; None if there was nothing to delete."""
        path = self.path_of(agent, slug)
        with self._lock(agent, slug):
            if not path.exists():
                return None
            trash = path.parent / ".trash"
            trash.mkdir(mode=0o700, exist_ok=True)
            stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S%f")
            target = trash / f"{slug}--{stamp}.md"
            data = path.read_bytes()
            os.replace(path, target)
            _fsync_dir(path.parent)
            self.audit(agent, "delete", slug, hashlib.sha256(data).hexdigest(), len(data))
        return target

    def audit(self, agent: str, op: str, slug: str, digest: str, size: int) -> None:
        """Append one JSON line to the agent's audit log (append-only, never rewritten)."""
        log_path = self.cfg.agents_dir / agent / "audit.log"
        line = json.dumps({"time": _now(), "op": op, "slug": slug, "sha256": digest, "bytes": size}) + "\n"
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)


def _unstamped(text: str) -> tuple[dict[str, Any], str]:
    meta, body = split_front_matter(text)
    return {k: v for k, v in meta.items() if k != "updated"}, body


def _redact_into(text: str, counts: dict[str, int]) -> str:
    clean, found = redact(text)
    for kind, n in found.items():
        counts[kind] = counts.get(kind, 0) + n
    return clean


def _redact_values(value: Any, counts: dict[str, int]) -> Any:
    """Redact every string inside front matter values (keys are names, not secrets)."""
    if isinstance(value, str):
        return _redact_into(value, counts)
    if isinstance(value, dict):
        return {k: _redact_values(v, counts) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_values(v, counts) for v in value]
    return value


def atomic_write(path: Path, data: bytes) -> None:
    """Temp file in the same folder, fsync, rename over the target, fsync the folder."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
