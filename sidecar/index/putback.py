"""The put-back list, a mixin of ``Indexer`` (``indexer``): after a rebuild's first whole sweep,
the notes indexed before it that it could not judge (their share away, their read failed, a
folder unreadable) are put back from the rebuild's copy as they were, kept by key in the manifest
and said in status until each is read again. Its own module because it runs once per rebuild and
its list lives beside the sweeps that read it down; the state it works on is the ``Indexer``'s own.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sidecar.config import Config
from sidecar.contracts.errors import PassingFaultError
from sidecar.index.diff import ChangeFinder, Diff
from sidecar.index.problems import Problems
from sidecar.index.unreadable import kept_by
from sidecar.index.writes import Writer
from sidecar.runtime.foreground import FOREGROUND
from sidecar.stores.manifest import Manifest
from sidecar.vault.sources import (
    Asking,
    Root,
    asked,
    inbox_refusal,
    inbox_root,
    vault_roots,
)
from sidecar.vault.supervisor import RootUnreachable, Supervisor

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.index.indexer")


class PutBack:
    """The notes a rebuild put back, of an ``Indexer`` (which sets the state below)."""

    cfg: Config
    manifest: Manifest
    supervisor: Supervisor
    problems: Problems
    changes: ChangeFinder
    writer: Writer
    _aside: bool
    _put_back: set[str]
    _put_back_unsaved: bool
    _put_back_lock: threading.RLock

    if TYPE_CHECKING:  # the indexer's own (``Exclusions``, ``RebuildRefusal``)

        def excluded_by(self, key: str) -> str | None: ...

        def _vault_away(self) -> bool: ...

    def _restore_aside(self) -> None:
        """After a rebuild's full sweep (or the first of a start after one was cut short): the
        notes indexed before it that it could not judge (``_to_put_back``) are put back as they
        were and read again by the next sweeps (was: left out of the index for as long as their
        share was away, while status said its notes were kept as last indexed). Said in status
        until they are read; a rebuild that put nothing back clears what an earlier one said."""
        if not self._aside:
            return
        try:
            wanted = self._to_put_back(self.manifest.aside_candidates())
            back = self.writer.restore_aside(wanted, kept_as=_PUT_BACK)  # their keys kept with them
        except sqlite3.Error as exc:
            if _passing(exc):
                # A full disk, an I/O error, a lock: the copy stays and the next whole sweep
                # puts it back (was: dropped, and with it every note the rebuild could not read).
                raise
            # A copy that cannot be put back (one written by another version): dropped, else
            # every later sweep tried it again; the rebuild's own reads stand.
            log.exception("rebuild_aside_dropped error=%s", exc)
            self.manifest.drop_aside()
            back = []
            self._keep_put_back(set())
        self._aside = False
        self._give_back_aside()
        with self._put_back_lock:  # their row written with them (``kept_as``)
            self._put_back, self._put_back_unsaved = set(back), False
        if back:
            log.warning("rebuild_kept_unread count=%d first=%s", len(back), back[0])
            self.changes.put_back(back)
        if not back:
            self.problems.clear("rebuild")

    def _give_back_aside(self) -> None:
        """The pages the rebuild's copy took, back to the disk now it is dropped (was: the manifest
        kept about twice its size until the next start or the daily housekeeping). A step at a
        time (``Manifest.give_back``), searches in flight served between steps; under its rule,
        so a small copy (under 8 MB) stays as free pages to reuse. A failure costs nothing but
        the space, given back later."""
        try:
            self.manifest.give_back(between=lambda: FOREGROUND.yield_to(_GIVE_BACK_YIELD_S))
        except sqlite3.Error as exc:  # a full disk, a busy file: the next start or day tries again
            log.warning("manifest_give_back_failed error=%s", exc)

    def _keep_put_back(self, keys: set[str], *, save: bool = True) -> None:
        """The notes a rebuild put back and not read since, here and in the manifest. ``save``
        False (a batch of file events, a memory write): kept here only, the row written at the
        next whole sweep or once none is left. It is one JSON row of every key, rewritten whole:
        20,000 keys are about 1 MB and 30 ms of writing at each note read back. A row left behind
        by a kill names notes read since: the start's whole sweep looks each up (``_say_put_back``)."""
        with self._put_back_lock:
            self._put_back_unsaved = self._put_back_unsaved or keys != self._put_back
            self._put_back = keys
            if self._put_back_unsaved and (save or not keys):
                self.manifest.set_meta(_PUT_BACK, json.dumps(sorted(keys)) if keys else "")
                self._put_back_unsaved = False

    def _read_back(self, read: Collection[str], *, save: bool = False) -> bool:
        """These notes were read (or left the index) since a rebuild put them back: no longer
        kept as unread. Whether any of them was."""
        with self._put_back_lock:
            before = self._put_back
            self._keep_put_back(before.difference(read), save=save)
            return len(self._put_back) < len(before)

    def _to_put_back(self, candidates: Sequence[tuple[str, str, bool]]) -> list[str]:
        """Of the notes a rebuild did not read back, those it could not judge: their read failed,
        they lie under a folder its listing could not read, or their root fails now what makes a
        rebuild refuse (offline, the vault missing, empty or not the mount it was). A note whose
        file is gone from a root that passes was deleted or moved: it stays out, as a sweep
        removes it. Never put back: a note a rule leaves out now, one of a root no longer set."""
        if not candidates:
            return []
        configured = {r.name: r for r in vault_roots(self.cfg)}
        unjudged = self._unjudged_roots()
        unread_keys = self.changes.unreadable_keys()
        refused: dict[str, str | None] = {}  # inbox -> why it is refused (asked once each)
        dropped: dict[str, tuple[str, int]] = {}  # refused inbox -> its agent, notes not put back
        out: list[str] = []
        looked: dict[str, tuple[Root, list[tuple[str, str]]]] = {}  # root -> notes whose file is looked up
        for key, rel, failed in candidates:
            name = key.rsplit("/", 1)[0] if key.startswith("memory/") else key.split("/", 1)[0]
            memory = name.startswith("memory/")
            root = inbox_root(self.cfg, name.split("/", 1)[1]) if memory else configured.get(name)
            if root is None or self.excluded_by(key) is not None:
                continue
            # Once one inbox's look hangs, the agents folder's share does: the other inboxes in it
            # are not asked (each look cost a probe timeout and a stuck thread), their notes put back.
            held = name in unjudged or (memory and ("memory" in unjudged or _HUNG in refused.values()))
            if memory and not held:
                # Not put back: a refused inbox is neither read nor served (a sweep drops its
                # notes); put back, its notes were served and said "not read back" until the next
                # sweep removed them. Said in the log as a sweep's drops (inbox_refused_dropped,
                # one line per refused folder); status names the inbox as skipped.
                if name not in refused:
                    refused[name] = self._refusal(root)
                if refused[name] == _HUNG:
                    held = True  # its look hangs: no evidence, put back as the share's notes are
                elif refused[name] is not None:
                    dropped[name] = (root.agent, dropped.get(name, ("", 0))[1] + 1)
                    continue
            if failed or held or kept_by(key, unread_keys):
                out.append(key)
            else:
                looked.setdefault(name, (root, []))[1].append((key, rel))
        for root, notes in looked.values():
            if root.source == "memory" and (_HUNG in refused.values() or "memory" in unjudged):
                out += [key for key, _rel in notes]  # the agents folder's share hangs: not asked
                continue
            kept, hung = self._not_gone(root, notes)
            out += kept
            if hung and root.source == "memory":
                unjudged.add("memory")  # as for a look at whether an inbox is refused
        if dropped:  # they left the index: counted and logged as a sweep's drops (one event)
            for name, (agent, n) in dropped.items():
                self.changes.refused.listed(name, agent, refused[name], n)
            self.changes.refused.tell()
            self.changes.refused.save()
        return out

    def _refusal(self, root: Root) -> str | None:
        """Why the inbox ``root`` is refused (``inbox_refusal``), asked as a sweep's call is
        (``Supervisor.bounded``): ``_HUNG`` when it hangs (the inbox is then marked hanging)."""

        def look(asking: Asking) -> str | None:
            with asked(asking, "stat", "."):
                return inbox_refusal(root)

        try:
            return self.supervisor.bounded(root, look)
        except RootUnreachable as exc:
            log.warning("rebuild_put_back_unjudged root=%s reason=%s", root.name, exc)
            return _HUNG

    def _not_gone(self, root: Root, notes: Sequence[tuple[str, str]]) -> tuple[list[str], bool]:
        """The keys of ``notes`` (key, path in ``root``) whose file is not known to be gone, looked
        up as a sweep's calls are (``Supervisor.bounded``): one that hangs marks the root hanging,
        and then every note of it is put back (a look-up that timed out is no deleted note);
        and whether the look-up hung."""

        def look(asking: Asking) -> list[str]:
            kept = []
            for key, rel in notes:
                with asked(asking, "stat", rel):
                    if not _gone(root.path / rel):
                        kept.append(key)
            return kept

        try:
            return self.supervisor.bounded(root, look), False
        except RootUnreachable as exc:
            log.warning("rebuild_put_back_unjudged root=%s notes=%d reason=%s", root.name, len(notes), exc)
            return [key for key, _rel in notes], True

    def _unjudged_roots(self) -> set[str]:
        """Roots whose notes' absence says nothing now (``memory``: every agent's inbox, while
        the home is held): those offline or hanging, the vault and its wiki when the vault is
        missing, empty, unmounted or another device (asked with the probe timeout)."""
        out = {st.name for st in list(self.supervisor.roots.values()) if st.offline or st.hanging is not None}
        if self.cfg.vault.path is not None and "vault" not in out and self._vault_away():
            out.add("vault")
        if "vault" in out:
            out.add("wiki")
        if self.supervisor.home.problem() is not None:
            out.add("memory")
        return out

    def _say_put_back(self, batch: Diff | None) -> None:
        """What status says of the notes a rebuild put back, until each is read. Only the notes
        of ``batch`` (an event sweep's) are looked up: every put-back note was, at each sweep, a
        second per sweep with tens of thousands of them. None: a whole sweep's (the start's, a
        rescan's), which looks at all of them (its listing costs as much), also those read or
        removed outside a sweep (a memory write)."""
        if not self._put_back:
            return
        if batch is None:
            asked = self._put_back
        else:
            touched = {n.key for n in batch.work} | set(batch.gone) | set(batch.moves)
            asked = touched & self._put_back
        read: set[str] = set()
        if asked:
            states = self.manifest.file_states_of(sorted(asked))
            read = {k for k in asked if k not in states or states[k].size != -1}
        self._read_back(read, save=batch is None)
        self._say_rebuild()

    def _say_rebuild(self) -> None:
        """What status says of the notes a rebuild put back that are not read yet."""
        put_back = self._put_back
        if not put_back:
            self.problems.clear("rebuild")
            return
        roots = sorted({k.split("/", 1)[0] for k in put_back})
        self.problems.report(
            "rebuild",
            f"the rebuild could not read {len(put_back)} note(s) of {', '.join(roots)} "
            f"(e.g. {min(put_back)}): its share went away during it, they vanished, or "
            "their read failed. "
            "They are kept as indexed before the rebuild and read again once they can be; the "
            "rebuild finishes then",
        )


_PUT_BACK = "rebuild_put_back"  # meta: the keys ``_put_back`` holds, as JSON


# A step of giving back the rebuild copy's pages waits at most this long for searches in flight.
_GIVE_BACK_YIELD_S = 0.5


# SQLite's result codes of a fault that passes: busy, locked, out of memory, read-only,
# interrupted, an I/O error, the disk full, a file that cannot be opened now.
_PASSING_SQLITE = frozenset({5, 6, 7, 8, 9, 10, 13, 14})


def _passing(exc: sqlite3.Error) -> bool:
    """Whether a database error is a fault that passes, not the form of what was read."""
    if isinstance(exc, PassingFaultError):  # the stores closed by a stop: no code, no SQLite words
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _PASSING_SQLITE
    text = str(exc)
    return any(w in text for w in ("disk is full", "disk I/O error", "database is locked", "readonly"))


# ``_refusal``'s answer for an inbox whose look did not answer (no refusal, no evidence).
_HUNG = "\0hung"


def _gone(path: Path) -> bool:
    """Whether a note's file is gone (an error other than its absence says nothing)."""
    try:
        path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False
