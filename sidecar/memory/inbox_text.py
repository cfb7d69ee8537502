"""A memory note's text, a mixin of ``Inboxes`` (:mod:`sidecar.memory.inbox`): what is sent is
checked (its size, its front matter), rendered with the managed keys and redacted before anything
reaches disk; a kept text is read without its stamp. Its own module because it is what a note
holds, not where it lies; the state it works on is the ``Inboxes``' config.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sidecar.config import Config
from sidecar.memory.inbox_types import MemoryUnreadableError, MemoryWriteError
from sidecar.notes.frontmatter import (
    dump_front_matter,
    front_matter_problem,
    is_name_property,
    parse_front_matter,
    split_front_matter,
)
from sidecar.notes.redact import redact_entry, redact_written


def _now() -> str:
    return dt.datetime.now().astimezone().isoformat(timespec="seconds")


def _plain(value: Any) -> Any:
    """YAML gives dates as date objects; keep them as the ISO text the user wrote."""
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return value


class NoteText:
    """The checks and rendering of a note's text, for ``Inboxes`` (which sets ``cfg``)."""

    cfg: Config

    def _check_content(self, content: Any, front_matter: Any) -> None:
        if not isinstance(content, str):
            raise MemoryWriteError("'content' must be text")
        if "\0" in content:
            raise MemoryWriteError("'content' contains a NUL byte")
        problem = front_matter_problem(content)
        if problem is not None:  # it would be stored as body text, its keys lost to every reader
            raise MemoryWriteError(
                f"the front matter at the top of 'content' cannot be read ({problem}): fix it, or "
                "give the keys as 'frontmatter'; text that opens with a '---' rule and has no front "
                "matter: put an empty block ('---' and '---' lines) before it"
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

    def _sized(
        self, meta: dict[str, Any], body: str, content: str, *, edit_of: dict[str, Any] | None
    ) -> tuple[str, dict[str, int]]:
        """The note's text as written, within ``memory.maxNoteBytes``. An edit that fails for what
        the note there holds (its own large front matter), not for what was sent, is no malformed
        request: unreadable (the CLI exits 7, not 2)."""
        theirs = MemoryUnreadableError if edit_of else MemoryWriteError
        try:
            text, counts = self._render(meta, body)
        except MemoryWriteError as exc:
            raise theirs(str(exc)) from exc
        size, limit = len(text.encode("utf-8")), self.cfg.memory.max_note_bytes
        if size > limit:
            sent = len(content.encode("utf-8")) > limit
            raise (MemoryWriteError if sent else theirs)(
                f"the note would be {size:,} bytes; the limit is {limit:,} "
                "(memory.maxNoteBytes): split it into several notes"
            )
        return text, counts

    def _render(self, meta: dict[str, Any], body: str) -> tuple[str, dict[str, int]]:
        counts: dict[str, int] = {}
        if self.cfg.memory.redact_secrets:
            body = _redact_into(body, counts)
            meta = _redact_values(meta, counts)
        dumped = dump_front_matter(meta)
        # What the reader would refuse (larger than it reads, too many nodes) must not be written:
        # the note's keys would be lost to every reader and to the next edit.
        _, problem = parse_front_matter(dumped)
        if problem is not None:
            raise MemoryWriteError(f"the front matter cannot be stored: {problem}; keep it small")
        body = body.lstrip("\n")
        return f"---\n{dumped}---\n{body if body.endswith(chr(10)) or not body else body + chr(10)}", counts


def _unstamped_bytes(data: bytes) -> bytes:
    """``data`` without the ``updated:`` lines of its leading front matter (all of it when it has
    none: then only the very same bytes are the same text)."""
    lines = data.splitlines(keepends=True)
    if not lines or lines[0].rstrip(b"\r\n") != b"---":
        return data
    for end in range(1, len(lines)):
        if lines[end].rstrip(b"\r\n") in (b"---", b"..."):
            head = [line for line in lines[1:end] if not line.startswith(b"updated:")]
            return b"".join([lines[0], *head, *lines[end:]])
    return data


def _unstamped(text: str) -> tuple[dict[str, Any], str]:
    meta, body = split_front_matter(text)
    return {k: v for k, v in meta.items() if k != "updated"}, body


def _names_as_text(front_matter: dict[str, Any] | None) -> dict[str, Any] | None:
    """The names an agent gives (``aliases``, ``tags``, ``title``, any case) as the text it
    sent: a number is written as its text, quoted (``aliases: [7]`` names the note "7", which
    every reader reads alike). A yes/no is refused: JSON ``true`` is no name an agent means (the
    text "true" is sent as text)."""
    if front_matter is None:
        return None

    def text(key: str, value: Any, depth: int) -> Any:
        if isinstance(value, bool):
            raise MemoryWriteError(
                f"'frontmatter' {key!r} holds {json.dumps(value)}, a yes/no, not a name: send a "
                f'name as text (["{json.dumps(value)}"] for the name "{json.dumps(value)}")'
            )
        if isinstance(value, int | float):
            return str(value)
        if isinstance(value, list) and depth > 0:  # a link written as a list: [[Bar]]
            return [text(key, item, depth - 1) for item in value]
        return value

    return {k: text(k, v, 2) if is_name_property(k) else v for k, v in front_matter.items()}


def _redact_into(text: str, counts: dict[str, int], key: str | None = None) -> str:
    clean, found = redact_written(text) if key is None else redact_entry(key, text)
    for kind, n in found.items():
        counts[kind] = counts.get(kind, 0) + n
    return clean


def _redact_values(value: Any, counts: dict[str, int], key: str | None = None) -> Any:
    """Redact every value inside front matter, each read with its key (``password: …``); keys
    are names, not secrets. A number under a secret's key (``password: 12345678``) is read as text."""
    if isinstance(value, dict):
        return {k: _redact_values(v, counts, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact_values(v, counts, key) for v in value]
    if isinstance(value, str):
        clean = _redact_into(value, counts, key)
        return value if clean == value else clean  # a Written value stays as written
    if isinstance(value, int | float) and not isinstance(value, bool) and key is not None:
        clean = _redact_into(str(value), counts, key)
        return value if clean == str(value) else clean
    return value
