"""An agent's memory inbox: write, edit, delete, with an audit log; replaced and deleted texts are
kept in the inbox's .trash folder.

The path is always built from a validated slug, never taken from the client. Confinement is by
construction: ``agents/``, ``agents/<agent>/`` and its ``memory/`` are created 0700 by the daemon
and, before every write, opened one level at a time without following symlinks and checked to be
this user's folders (:mod:`sidecar.vault.confine`); the note is read, written and renamed relative to
the inbox's own descriptor, so a folder swapped for a link mid-write cannot redirect it, and a
note that is a symlink is refused. Writes are atomic (temp file, fsync, rename, fsync of the
folder) and serialised per note; ``created`` and ``updated`` are managed in the front matter,
every other key is kept as given; secrets are redacted before anything reaches disk. Imports
config, confine, sources, frontmatter, redact, errors.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sidecar.config import Config, valid_agent
from sidecar.contracts.errors import NotFoundError, SourceError
from sidecar.notes.frontmatter import front_matter_problem, parse_front_matter, split_front_matter
from sidecar.notes.redact import redact
from sidecar.vault.confine import NotRegularError, open_private_dir, open_regular, private_dirs, read_fd
from sidecar.vault.sources import SLUG_RE, agent_inbox, is_note_name

_MANAGED = ("created", "updated")
_KEPT = re.compile(r"^[a-z0-9][a-z0-9_-]*--(\d{8}T\d{12})\.md$")  # <slug>--<time>.md in .trash
_TEMP = re.compile(r"^\.[a-z0-9][a-z0-9_-]*\.[0-9a-f]{8}\.tmp$")  # write_in's temp files, no one else's

log = logging.getLogger(__name__)


class MemoryWriteError(SourceError):
    """A memory write was refused (bad slug, too large, bad front matter)."""

    code = "bad_memory_write"


class InboxFullError(MemoryWriteError):
    """The agent's notes together would pass ``memory.maxInboxBytes``."""

    code = "inbox_full"


@dataclass(frozen=True)
class Written:
    slug: str
    path: Path
    created: bool  # a new note (not a replacement)
    redacted: dict[str, int] = field(default_factory=dict)
    sha256: str = ""
    size: int = 0
    data: bytes = b""  # what was written (indexed as is, never read back through the path)
    mtime_ns: int = 0
    previous: Path | None = None  # where the replaced text was kept (in .trash), if any
    audit_error: str | None = None  # the change is made, but its audit line could not be appended
    ctime_ns: int = 0  # kept in the manifest: a hand edit that keeps size and mtime is still seen
    trash_dropped: tuple[str, ...] = ()  # older texts .trash let go to stay under its cap


@dataclass(frozen=True)
class Deleted:
    trash: Path  # where the note's text now lies
    audit_error: str | None = None  # as for Written
    trash_dropped: tuple[str, ...] = ()  # as for Written


def check_agent(agent: str | None) -> str:
    if agent is None:
        raise MemoryWriteError("this operation needs an agent name (the 'agent' field of the request)")
    if not valid_agent(agent):
        raise MemoryWriteError(f"invalid agent name {agent!r}: use a-z, 0-9, '_' and '-' (max 64)")
    return agent


def check_slug(slug: Any) -> str:
    if slug is None:
        raise MemoryWriteError("'slug' is missing: name the note, e.g. 'nas-backup-setup'")
    if not isinstance(slug, str) or not SLUG_RE.fullmatch(slug):
        raise MemoryWriteError(
            f"invalid slug {slug!r}: use 1-128 characters a-z, 0-9, '_' and '-', starting with a letter or "
            "digit (no folders, no extension), e.g. 'nas-backup-setup'"
        )
    return slug


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
        self._locks: dict[tuple[str, str], threading.RLock] = {}
        self._guard = threading.Lock()
        self._audit_lock = threading.Lock()

    def path_of(self, agent: str, slug: str) -> Path:
        """Where the note lives; refuses at once an inbox that is not a private folder."""
        inbox = agent_inbox(self.cfg, check_agent(agent))
        path = inbox / f"{check_slug(slug)}.md"
        with contextlib.suppress(FileNotFoundError), self._dirs(agent, create=False):
            pass
        return path

    @contextlib.contextmanager
    def _dirs(self, agent: str, *, create: bool) -> Iterator[tuple[int, int]]:
        """Descriptors of ``agents/<agent>/`` and its inbox, each checked (see the module doc)."""
        agents = self.cfg.agents_dir
        parts = [agents.name, agent, "memory"]
        what = f"the inbox of {agent!r}"
        with private_dirs(agents.parent, parts, create=create, what=what) as fds:
            yield fds[1], fds[2]

    @contextlib.contextmanager
    def locked(self, agent: str, slug: str) -> Iterator[None]:
        """The note's lock: held by the inbox's own changes, and by a caller around a change and
        its index update, so a delete cannot fall between a write's file and its index entry
        (which left an index entry without a file). Re-entrant."""
        with self._guard:
            lock = self._locks.setdefault((agent, slug), threading.RLock())
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
        name = path.name
        self._check_content(content, front_matter)
        with self.locked(agent, slug), self._dirs(agent, create=True) as (agent_fd, inbox_fd):
            for _attempt in range(_READ_ATTEMPTS):
                old, seen = _read_existing(inbox_fd, name, slug)
                if _state(inbox_fd, name) == seen:
                    break
                # Saved by someone else (an editor writing in place) while it was read: what was
                # read may be half of it; read again rather than keep a torn copy as "previous".
            else:
                raise MemoryWriteError(
                    f"{slug!r} kept changing while it was read (is it being edited elsewhere?); "
                    "nothing was written: try again"
                )
            existing: dict[str, Any] = {}
            if old is not None:
                old_text = old.decode("utf-8", errors="replace")
                problem = front_matter_problem(old_text) if must_exist else None
                if problem is not None:  # an edit keeps the keys: it cannot when it cannot read them
                    raise MemoryWriteError(
                        f"the front matter of {slug!r} cannot be read ({problem}): fix it, or replace "
                        "the whole note with memory_write"
                    )
                existing, _old_body = split_front_matter(old_text)
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
            self._check_room(inbox_fd, name, len(data) - (len(old) if old is not None else 0))
            # The text being replaced stays recoverable, as a deleted note does (a rewrite that
            # changes only the 'updated' stamp keeps nothing: there is nothing to lose).
            previous = None
            if old is not None and _unstamped(old.decode("utf-8", errors="replace")) != _unstamped(text):
                previous = path.parent / ".trash" / self._keep(inbox_fd, slug, old)
            if _state(inbox_fd, name) != seen:
                # Changed since it was read (the window is the rendering and the .trash copy):
                # replacing it now would lose that change; the copy kept of the old text goes.
                if previous is not None:
                    with contextlib.closing(_Fd(_trash_dir(inbox_fd))) as trash:
                        os.unlink(previous.name, dir_fd=trash.fd)
                raise MemoryWriteError(
                    f"{slug!r} was changed by someone else while this edit was prepared; nothing "
                    "was written: read it again and retry"
                )
            mtime_ns, ctime_ns = write_in(inbox_fd, name, data)
            dropped: tuple[str, ...] = ()
            if previous is not None:  # only now: a write that fails must not have cost older texts
                try:
                    with contextlib.closing(_Fd(_trash_dir(inbox_fd))) as trash:
                        dropped = self._cap_trash(trash.fd, previous.name)
                except (OSError, SourceError) as exc:  # housekeeping: the write is made
                    log.warning("memory_trash_cap_failed error=%s", exc)
            digest = hashlib.sha256(data).hexdigest()
            audit_error = self._audit(agent_fd, "edit" if must_exist else "write", slug, digest, len(data))
        return Written(
            slug,
            path,
            old is None,
            counts,
            digest,
            len(data),
            data,
            mtime_ns,
            previous,
            audit_error,
            ctime_ns,
            dropped,
        )

    def _keep(self, inbox_fd: int, slug: str, old: bytes) -> str:
        """Put the replaced text in ``.trash/<slug>--<time>.md`` through the inbox's descriptor
        (the caller holds the note's lock; it caps .trash once its write is made); returns the
        file name."""
        target = f"{slug}--{dt.datetime.now().strftime('%Y%m%dT%H%M%S%f')}.md"
        with contextlib.closing(_Fd(_trash_dir(inbox_fd))) as trash:
            write_in(trash.fd, target, old)
        return target

    def _check_room(self, inbox_fd: int, name: str, growth: int) -> None:
        """Refuse a write that takes the inbox's notes past ``memory.maxInboxBytes`` (an agent in
        a loop would otherwise fill the disk the index shares). Writes of other notes running at
        the same time may pass it by a note each."""
        limit = self.cfg.memory.max_inbox_bytes
        if limit <= 0 or growth <= 0:
            return  # a note that shrinks or keeps its size is always let through
        used = _notes_bytes(inbox_fd)
        if used + growth > limit:
            raise InboxFullError(
                f"the inbox is full: its notes hold {used:,} bytes, {name} would add {growth:,}, the "
                f"limit is {limit:,} (memory.maxInboxBytes): delete notes you no longer need, or "
                "merge them with memory_edit"
            )

    def _cap_trash(self, trash_fd: int, newest: str) -> tuple[str, ...]:
        """Remove the oldest kept texts while .trash holds more than ``memory.maxTrashBytes``
        (``newest``, the one just kept, stays): rewrites in a loop would fill the disk within
        ``memory.trashDays``. Returns the names removed: the reply says which texts are gone."""
        limit = self.cfg.memory.max_trash_bytes
        if limit <= 0:
            return ()
        kept: list[tuple[str, str, int]] = []  # (time in the name, name, size)
        total = 0
        removed: list[str] = []
        try:  # housekeeping: the change it follows is made and must be reported as made
            for name, size in _file_sizes(trash_fd):
                m = _KEPT.match(name)
                if m is not None:
                    total += size
                    if name != newest:
                        kept.append((m.group(1), name, size))
            kept.sort()
            for _when, name, size in kept:
                if total <= limit:
                    break
                with contextlib.suppress(FileNotFoundError):  # another writer's cap took it
                    os.unlink(name, dir_fd=trash_fd)
                    removed.append(name)
                total -= size
        except OSError as exc:
            log.warning("memory_trash_cap_failed error=%s", exc)
        if removed:
            log.info("memory_trash_capped removed=%d limit_bytes=%d", len(removed), limit)
        return tuple(removed)

    def _check_content(self, content: Any, front_matter: Any) -> None:
        if not isinstance(content, str):
            raise MemoryWriteError("'content' must be text")
        if "\0" in content:
            raise MemoryWriteError("'content' contains a NUL byte")
        problem = front_matter_problem(content)
        if problem is not None:  # it would be stored as body text, its keys lost to every reader
            raise MemoryWriteError(
                f"the front matter at the top of 'content' cannot be read ({problem}): fix it, or "
                "give the keys as 'frontmatter'"
            )
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
        # What the reader would refuse (larger than it reads, too many nodes) must not be written:
        # the note's keys would be lost to every reader and to the next edit.
        _, problem = parse_front_matter(dumped)
        if problem is not None:
            raise MemoryWriteError(f"the front matter cannot be stored: {problem}; keep it small")
        body = body.lstrip("\n")
        return f"---\n{dumped}---\n{body if body.endswith(chr(10)) or not body else body + chr(10)}", counts

    def delete(self, agent: str, slug: str) -> Deleted | None:
        """Move the note to ``<inbox>/.trash/<slug>--<time>.md``; None if there was nothing to delete."""
        path = self.path_of(agent, slug)
        name = path.name
        with self.locked(agent, slug), self._dirs(agent, create=True) as (agent_fd, inbox_fd):
            try:
                st = os.stat(name, dir_fd=inbox_fd, follow_symlinks=False)
            except FileNotFoundError:
                return None
            data = b""
            if stat.S_ISREG(st.st_mode):  # a symlink or pipe is moved, never opened
                with contextlib.suppress(OSError):
                    data = read_fd(open_regular(name, dir_fd=inbox_fd, follow=False), st.st_size + 1)
            with contextlib.closing(_Fd(_trash_dir(inbox_fd))) as trash:
                stamp = dt.datetime.now().strftime("%Y%m%dT%H%M%S%f")
                target = f"{slug}--{stamp}.md"
                os.replace(name, target, src_dir_fd=inbox_fd, dst_dir_fd=trash.fd)
                os.fsync(trash.fd)
                dropped = self._cap_trash(trash.fd, target)
            os.fsync(inbox_fd)
            audit_error = self._audit(agent_fd, "delete", slug, hashlib.sha256(data).hexdigest(), len(data))
        return Deleted(path.parent / ".trash" / target, audit_error, dropped)

    def _audit(self, agent_fd: int, op: str, slug: str, digest: str, size: int) -> str | None:
        """Append one JSON line to the agent's audit log (append-only, never rewritten). Called
        after the change is made: a line that cannot be appended (disk full, an immutable log)
        is returned as the reason, for the caller to report beside the change, never as if the
        change had failed."""
        line = json.dumps({"time": _now(), "op": op, "slug": slug, "sha256": digest, "bytes": size}) + "\n"
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        try:
            # One lock for the rotation: two writers rotating at once would put the fresh log
            # over the generation just kept.
            with self._audit_lock:
                fd = os.open("audit.log", flags, 0o600, dir_fd=agent_fd)
                try:
                    st = os.fstat(fd)
                    if not stat.S_ISREG(st.st_mode):
                        return "the audit log is not a regular file"
                    if st.st_size >= _AUDIT_ROTATE_BYTES:
                        # One earlier generation is kept (audit.log.1): bounded over the years.
                        os.replace("audit.log", "audit.log.1", src_dir_fd=agent_fd, dst_dir_fd=agent_fd)
                        fresh = os.open("audit.log", flags, 0o600, dir_fd=agent_fd)
                        os.close(fd)
                        fd = fresh
                    os.write(fd, line.encode("utf-8"))
                    os.fsync(fd)
                finally:
                    os.close(fd)
        except OSError as exc:
            log.error("memory_audit_failed op=%s slug=%s error=%s", op, slug, exc)
            return exc.strerror or str(exc)
        return None

    def _agent_names(self) -> list[str]:
        """The agents with a folder in the home (names the protocol accepts)."""
        try:
            return [a for a in sorted(os.listdir(self.cfg.agents_dir)) if valid_agent(a)]
        except OSError:
            return []

    def usage(self, agent: str) -> dict[str, int]:
        """What the agent's inbox holds against its limits (zeros before its first note)."""
        notes = used = trash = 0
        try:
            with self._dirs(check_agent(agent), create=False) as (_agent_fd, inbox_fd):
                for _name, size in _note_sizes(inbox_fd):
                    notes += 1
                    used += size
                with (
                    contextlib.suppress(FileNotFoundError),
                    contextlib.closing(_Fd(_trash_dir(inbox_fd, create=False))) as kept,
                ):
                    # What the cap counts: sidecar's kept texts (a file of the user's is not).
                    trash = sum(size for name, size in _file_sizes(kept.fd) if _KEPT.match(name))
        except FileNotFoundError:
            pass
        limits = self.cfg.memory
        return {
            "notes": notes,
            "bytes": used,
            "max_bytes": limits.max_inbox_bytes,
            "trash_bytes": trash,
            "max_trash_bytes": limits.max_trash_bytes,
        }

    def prune_trash(self, now: float | None = None) -> int:
        """Remove texts kept in the inboxes' .trash longer than ``memory.trashDays`` (their age is
        the time in their name, as written by this daemon; other files are left alone). An agent
        in a loop of rewrites would otherwise fill the disk the index shares over the years."""
        days = self.cfg.memory.trash_days
        if days <= 0:
            return 0
        cutoff = dt.datetime.fromtimestamp((now or time.time()) - days * 86_400)
        removed = 0
        for agent in self._agent_names():
            count = 0
            try:
                with self._dirs(agent, create=False) as (_agent_fd, inbox_fd):
                    try:
                        trash = _trash_dir(inbox_fd, create=False)
                    except FileNotFoundError:
                        continue
                    with contextlib.closing(_Fd(trash)):
                        for name in os.listdir(trash):
                            if _kept_before(name, cutoff):
                                with contextlib.suppress(OSError):  # gone, or a folder so named
                                    os.unlink(name, dir_fd=trash)
                                    count += 1
            except (OSError, SourceError):
                pass  # no inbox, or not a private one; what was removed is still counted
            if count:
                log.info("memory_trash_pruned agent=%s removed=%d older_than_days=%d", agent, count, days)
            removed += count
        return removed

    def clean_temp(self) -> int:
        """Remove temp files a killed write left in the inboxes (at start, before any write)."""
        removed = 0
        for agent in self._agent_names():
            try:
                with self._dirs(agent, create=False) as (_agent_fd, inbox_fd):
                    for name in os.listdir(inbox_fd):
                        if _TEMP.match(name):
                            os.unlink(name, dir_fd=inbox_fd)
                            removed += 1
                            log.info("inbox_temp_removed agent=%s file=%s", agent, name)
            except (OSError, SourceError):
                continue  # no inbox, or not a private one (never written to either)
        return removed


class _Fd:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        os.close(self.fd)


def _file_sizes(dir_fd: int) -> Iterator[tuple[str, int]]:
    """(name, size) of the regular files of a folder (not its folders or links)."""
    with os.scandir(dir_fd) as entries:
        for e in entries:
            with contextlib.suppress(OSError):  # gone meanwhile
                if e.is_file(follow_symlinks=False):
                    yield e.name, e.stat(follow_symlinks=False).st_size


def _note_sizes(inbox_fd: int) -> Iterator[tuple[str, int]]:
    """(name, size) of the inbox's notes: the files memory list shows as its notes (a hidden
    '.x.md', a sync-conflict copy or a link is none: status counted them while list did not)."""
    return ((name, size) for name, size in _file_sizes(inbox_fd) if is_note_name(name))


def _notes_bytes(inbox_fd: int) -> int:
    """The size of the inbox's notes together."""
    return sum(size for _name, size in _note_sizes(inbox_fd))


def _trash_dir(inbox_fd: int, *, create: bool = True) -> int:
    return open_private_dir(inbox_fd, ".trash", create=create, what="the trash folder")


def _kept_before(name: str, cutoff: dt.datetime) -> bool:
    """Whether ``name`` is a text kept in .trash by this daemon before ``cutoff``."""
    m = _KEPT.match(name)
    if m is None:
        return False
    try:
        return dt.datetime.strptime(m.group(1), "%Y%m%dT%H%M%S%f") < cutoff
    except ValueError:  # digits that are no date: not ours to remove
        return False


_READ_ATTEMPTS = 3
_AUDIT_ROTATE_BYTES = 8 << 20  # about 50,000 changes per generation
_MAX_EXISTING = 1 << 26  # the largest note an edit or a replacement reads (and keeps in .trash)
# (inode, size, mtime, ctime in ns) of a note, None when there is none: ctime moves with any save,
# even one of the same size within a coarse clock's tick.
_State = tuple[int, int, int, int] | None


def _state(inbox_fd: int, name: str) -> _State:
    try:
        st = os.stat(name, dir_fd=inbox_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _read_existing(inbox_fd: int, name: str, slug: str) -> tuple[bytes | None, _State]:
    """The current bytes of a note and its state when read (None, None if there is none); a
    symlink or pipe is refused."""
    try:
        fd = open_regular(name, dir_fd=inbox_fd, follow=False)
    except FileNotFoundError:
        return None, None
    except NotRegularError as exc:
        raise SourceError(f"memory note {slug!r} is {exc.strerror}; refused") from exc
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    data = read_fd(fd, _MAX_EXISTING + 1)
    if len(data) > _MAX_EXISTING:  # its copy in .trash would be cut: the note would be lost in part
        raise MemoryWriteError(
            f"memory note {slug!r} is larger than {_MAX_EXISTING >> 20} MiB (placed by hand?): sidecar "
            "does not replace it; move it out of the inbox first"
        )
    return data, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def write_in(dir_fd: int, name: str, data: bytes) -> tuple[int, int]:
    """Atomic write of ``name`` inside the folder ``dir_fd``: a new temp file (O_EXCL, no
    symlink followed), fsync, rename within the same descriptor, fsync of the folder. Returns
    the written file's (mtime, ctime) in ns, taken through its descriptor after the rename (the
    rename moves ctime; a stat by name could see a file put there since)."""
    stem = name[:-3] if name.endswith(".md") else name
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        tmp = f".{stem}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
            break
        except FileExistsError:
            continue
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            st = os.fstat(fd)
        finally:
            os.close(fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)
    return st.st_mtime_ns, st.st_ctime_ns


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
