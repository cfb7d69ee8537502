"""What an inbox write answers and refuses: the errors of a memory write, what a write or a delete
returns (``Written``, ``Deleted``), and the checks of an agent's name and a note's slug. Its own
module because the memory ops and the read-only daemon name them without the inbox's machinery
(:mod:`sidecar.memory.inbox`). Imports config, errors, printable and sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar.config import agent_name_problem, valid_agent
from sidecar.contracts.errors import SourceError, StorageError
from sidecar.contracts.printable import quoted
from sidecar.vault.notenames import SLUG_RE


class MemoryWriteError(SourceError):
    """A memory write was refused (bad slug, too large, bad front matter)."""

    code = "bad_memory_write"


class InboxFullError(MemoryWriteError):
    """The agent's notes together would pass ``memory.maxInboxBytes``."""

    code = "inbox_full"


# A write refused for the note that is there, not for what was sent (the sender's values are
# fine: the CLI exits 7 for these, 2 for a bad_memory_write).
class MemoryConflictError(MemoryWriteError):
    """The note changed while the write was made: read it again and retry."""

    code = "conflict"


class MemoryBeingSavedError(MemoryConflictError):
    """Another program is saving the note right now (emptied a moment ago, or still changing):
    what is there is no whole text to keep or replace; try again in a moment."""


class MemoryUnreadableError(MemoryWriteError):
    """The note there cannot be read as a write needs it (its front matter, its size)."""

    code = "unreadable"


# Refused for what lies under the note's name, as an inbox that is a link is (``forbidden``, the
# CLI exits 7): no text of the inbox's own is there to read, keep or edit.
class MemoryRefusedError(MemoryWriteError):
    """The note's name is a symbolic link or another non-file placed in the inbox."""

    code = "forbidden"


class InboxGoneError(StorageError):
    """An agent's inbox is gone while the index holds its notes: not made anew by a write."""


class ChangeUnderWayError(StorageError):
    """A change of a note refused: an earlier one given up on (its inbox's share hangs) still
    runs and keeps the note's lock. Nothing was done."""


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
    trash: Path | None  # where the note's text now lies; None: it held none (``removed``)
    audit_error: str | None = None  # as for Written
    trash_dropped: tuple[str, ...] = ()  # as for Written
    removed: str | None = None  # what was removed in place of a note: "a symbolic link", …


def check_agent(agent: str | None) -> str:
    if agent is None:
        raise MemoryWriteError("this operation needs an agent name (the 'agent' field of the request)")
    if not valid_agent(agent):
        raise MemoryWriteError(agent_name_problem(agent))
    return agent


def check_slug(slug: Any) -> str:
    if slug is None:
        raise MemoryWriteError("'slug' is missing: name the note, e.g. 'nas-backup-setup'")
    if not isinstance(slug, str) or not SLUG_RE.fullmatch(slug):
        raise MemoryWriteError(
            f"invalid slug {quoted(slug)}: use 1-128 characters a-z, 0-9, '_' and '-', starting with a "
            "letter or digit (no folders, no extension), e.g. 'nas-backup-setup'"
        )
    return slug
