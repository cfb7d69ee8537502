"""What cannot be read, a mixin of ``ChangeFinder`` (``diff``): the folders a listing could not
read and the notes whose read failed (kept as indexed, or not in the index), named in status and
problems until they read, vanish or their root goes; looked at again, bounded, before a rebuild
forgets every note (a rebuild is refused for them). An error reading a note or folder is no
evidence that its notes are gone: the key marks here (``kept_by``) keep them. Its own module
because it is what a sweep could not see, not what changed; the state it works on is the
``ChangeFinder``'s own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sidecar.config import Config
from sidecar.index.problems import Problems
from sidecar.index.retries import _Stamp
from sidecar.stores.manifest import Manifest
from sidecar.vault.note_text import read_refusal
from sidecar.vault.sources import NoteFile, Root, Skipped, inbox_root, vault_roots
from sidecar.vault.supervisor import RootUnreachable, Supervisor
from sidecar.vault.timeout import run_with_timeout

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.index.diff")


# The clock of the rebuild's note check (a test moves it on instead of waiting).
_clock = time.monotonic


class UnreadableNotes:
    """The unreadable folders and notes of a ``ChangeFinder`` (which sets the state below)."""

    cfg: Config
    manifest: Manifest
    supervisor: Supervisor
    problems: Problems
    _unreadable: dict[str, str]
    _listed_unreadable: dict[str, list[str]]
    _causes: dict[str, str]
    _unread_notes: dict[tuple[str, str], str]
    _never_read: dict[tuple[str, str], str]
    _retry: dict[tuple[str, str], tuple[int, int, _Stamp]]
    _reopening: threading.Lock
    _reopen_stuck: threading.Thread | None

    if TYPE_CHECKING:  # the change finder's own (``ChangeFinder``, ``ReadRetries``)

        def roots(self) -> list[Root]: ...

        def failed_read(self, root: Root, path: Path, stamp: _Stamp) -> bool: ...

    def kept_unreadable(self, root: Root, path: Path, why: str, stamp: _Stamp) -> bool:
        """An indexed note whose read failed was kept as it was: counted and named as
        unreadable (it was kept without a word in status, and its later edits went unread).
        True: its first failure in a row (``failed_read``)."""
        self._unread_notes[(root.name, str(path))] = why
        self._say_unreadable(root.name)
        return self.failed_read(root, path, stamp)

    def not_read(self, root: Root, path: Path, why: str, stamp: _Stamp) -> bool:
        """A note not in the index whose read failed: named in status as not indexed, with why.
        True: its first failure in a row (``failed_read``)."""
        self._never_read[(root.name, str(path))] = why
        self._say_unreadable(root.name)
        return self.failed_read(root, path, stamp)

    def put_back(self, keys: Collection[str]) -> None:
        """Notes a rebuild could not read, put back as indexed before it: kept unreadable now,
        no longer "not in the index"."""
        by_name = {r.name: r for r in vault_roots(self.cfg)}
        wanted, names = set(keys), set()
        for (name, where), why in list(self._never_read.items()):
            root = inbox_root(self.cfg, name.removeprefix("memory/")) if name.startswith("memory/") else None
            root = root or by_name.get(name)
            path = Path(where)
            if root is None or not path.is_relative_to(root.path):
                continue
            if root.key_of(path.relative_to(root.path).as_posix()) in wanted:
                del self._never_read[(name, where)]
                self._unread_notes[(name, where)] = why
                names.add(name)
        for name in names:
            self._say_unreadable(name)

    def read_again(self, notes: Iterable[NoteFile]) -> None:
        """These notes were read (or found unchanged): no longer unreadable."""
        names: set[str] = set()
        for n in notes:
            where = (n.root.name, str(n.path))
            kept, never = self._unread_notes.pop(where, None), self._never_read.pop(where, None)
            if kept is not None or never is not None:
                names.add(n.root.name)
            if self._retry.pop(where, None) is not None:
                log.warning("file_readable_again path=%s", n.path)
        for name in names:
            self._say_unreadable(name)

    def list_unreadable(self, only: Collection[str] | None = None) -> None:
        """List every root once to record what cannot be read, as a sweep does: `sidecar index
        --rebuild` without a daemon has no sweep of its own before it clears the index, and
        would drop the notes of a folder of mode 000. Each indexed note is opened too (its first
        byte read): a note of mode 000 is listed like any other, and the rebuild dropped it where
        the daemon, whose sweep had failed to read it, refused (within a time budget, see
        _probe_indexed). A root that cannot be listed is marked offline, as a sweep marks it;
        ``only`` lists those roots again (a slow share's, after its first listing was given up
        on): one that answers now is online."""
        for root in self.roots():
            if only is not None and root.name not in only:
                continue
            try:
                found = self.supervisor.list_root(root)
            except RootUnreachable as exc:
                self.supervisor.unreachable(root, exc)
                continue
            if only is not None:
                self.supervisor.mark_online(root)
            self._unreadable_prefixes(root, [s for s in found if isinstance(s, Skipped)])
            self._probe_indexed(root, [n for n in found if isinstance(n, NoteFile)])

    def _probe_indexed(self, root: Root, notes: list[NoteFile]) -> None:
        """Record the indexed ``notes`` that cannot be read now as kept unreadable (what a sweep
        that failed to read them records). Bounded: the notes are opened one after another for at
        most half the scan timeout, and a large vault on a slow share (50,000 notes at 10 ms each)
        takes longer; then the rest go unchecked, the log says so, and the rebuild runs as it did
        before this check. The check never refuses a rebuild for slowness alone (a share that
        works but is slow is no unreadable note), nor marks the root offline: its listing answered."""
        states = self.manifest.file_states_of([n.key for n in notes])
        indexed = [n for n in notes if n.key in states]
        timeout = self.cfg.watch.scan_timeout_seconds
        deadline = _clock() + timeout / 2

        def probe() -> tuple[list[tuple[NoteFile, str]], int]:
            failed: list[tuple[NoteFile, str]] = []
            for checked, note in enumerate(indexed):
                if _clock() >= deadline:
                    return failed, checked
                if (why := read_refusal(note.path)) is not None:
                    failed.append((note, why))
            return failed, len(indexed)

        done, stuck = run_with_timeout(probe, timeout, root.name, self.supervisor.beat)
        if stuck is not None or done is None:
            # One note's open or read did not return in the whole timeout: the rebuild runs as it
            # did before this check (the root's listing answered; the rebuild's sweep meets the note).
            log.warning(
                "rebuild_check_incomplete root=%s checked=some of=%d reason=a note did not answer in %.0f s",
                root.name,
                len(indexed),
                timeout,
            )
            return
        failed, checked = done
        if checked < len(indexed):
            log.warning(
                "rebuild_check_incomplete root=%s checked=%d of=%d reason=half of watch.scanTimeoutSeconds "
                "(%.0f s) spent; the rest are read by the rebuild",
                root.name,
                checked,
                len(indexed),
                timeout,
            )
        for note, why in failed:
            log.warning("file_unreadable path=%s reason=%s", note.path, why)
            self.kept_unreadable(root, note.path, why, (note.mtime_ns, note.size, note.ctime_ns))

    def _listed_unreadable_roots(self) -> list[tuple[Root | None, list[str]]]:
        """The unreadable folders and notes recorded, with their root (None: no longer one)."""
        by_name = {r.name: r for r in vault_roots(self.cfg)}
        return [
            (
                inbox_root(self.cfg, name.removeprefix("memory/"))
                if name.startswith("memory/")
                else by_name.get(name),
                list(paths),
            )
            for name, paths in list(self._listed_unreadable.items())
        ]

    def unreadable_indexed(self, away: Collection[str] = (), *, reopen: bool = True) -> list[str]:
        """The folders (and notes) recorded as unreadable now that hold notes indexed: a rebuild
        forgets every note first, and theirs could not be read back (status says they are kept).
        They are looked at again first (``_still_unread``: a note opened, a folder listed): one
        that reads now, or is gone, is not named (a note waits in its backoff, a folder for the
        next full sweep, or its share healed with no event: `sidecar index` without a daemon lists
        every root before its check, and a running daemon named them as its last sweep saw them).
        ``away``: roots judged unreachable now (named as recorded, not looked at); ``reopen``
        False: none is looked at (what the last sweep recorded)."""
        names = {r.name for r in vault_roots(self.cfg)}
        # Only indexed notes are kept unreadable.
        notes = sorted((n, p) for (n, p) in list(self._unread_notes) if n in names or n.startswith("memory/"))
        listed: list[tuple[str, str]] = []
        for root, paths in self._listed_unreadable_roots():
            for where in paths:
                path = Path(where)
                if root is None or not path.is_relative_to(root.path):
                    continue
                rel = path.relative_to(root.path).as_posix()
                if self.manifest.has_files(_prefix(root, rel)) or self.manifest.file_states_of(
                    [root.key_of(rel)]
                ):
                    listed.append((root.name, where))
        noted = {p for _n, p in notes}
        listed = [(n, p) for n, p in listed if p not in noted]
        return sorted(set(self._still_unread(notes, listed, away, reopen=reopen)))

    def _still_unread(
        self,
        notes: list[tuple[str, str]],
        listed: list[tuple[str, str]],
        away: Collection[str],
        *,
        reopen: bool,
    ) -> list[str]:
        """Of the recorded ``notes`` kept unreadable and the folders (or files) ``listed`` as
        unreadable (root name, path), those that fail now: a note opened and a byte read, a folder
        listed. Bounded by ``watch.probeTimeoutSeconds`` (a request's thread asks: the scan
        timeout held the `index` request, and the memory writes behind it, for minutes), with one
        thread at most: a share that does not answer, a root judged away (``away``, offline, a
        call on it still hanging) or an earlier re-check still hanging leave them named as
        recorded. Nothing recorded is changed (the sweeps find what changed)."""
        recorded = [(n, p, False) for n, p in notes] + [(n, p, True) for n, p in listed]
        if not reopen:
            return [p for _n, p, _f in recorded]
        kept = [p for n, p, _f in recorded if n in away or self._away(n)]
        asked = [(n, p, folder) for n, p, folder in recorded if not (n in away or self._away(n))]
        ask = [(p, folder) for _n, p, folder in asked]
        if not ask:
            return kept
        timeout = self.cfg.watch.probe_timeout_seconds
        if not self._reopening.acquire(timeout=timeout):  # another's, bounded the same
            return kept + [p for p, _f in ask]
        try:
            if self._reopen_stuck is not None and self._reopen_stuck.is_alive():
                return kept + [p for p, _f in ask]
            deadline = _clock() + timeout
            now: list[tuple[str, str, float]] = []  # the root, the call and when it began

            def probe() -> list[str]:
                failing: list[str] = []
                for i, (name, where, folder) in enumerate(asked):
                    if _clock() >= deadline:  # many on a slow share: the rest as recorded
                        return failing + [p for p, _f in ask[i:]]
                    now[:] = [(name, f"{'listing' if folder else 'reading'} {where}", time.monotonic())]
                    if (_listing_refusal if folder else read_refusal)(Path(where)) is not None:
                        failing.append(where)
                now.clear()
                return failing

            done, self._reopen_stuck = run_with_timeout(probe, timeout, "unreadable notes")
        finally:
            self._reopening.release()
        if done is None:
            log.warning("unreadable_recheck_hung notes=%d timeout=%gs", len(ask), timeout)
            stuck, call = self._reopen_stuck, list(now)
            if stuck is not None and call:
                # Its root hangs as when a sweep's read does (judged once the probe timeout has
                # passed since that call began: a slow share's call may still answer).
                name, what, since = call[0]
                self.supervisor.read_hangs(name, what, stuck, since)
            return kept + [p for p, _f in ask]
        return kept + done

    def _away(self, name: str) -> bool:
        """Whether the root ``name`` is offline, or a call on it (or the folder it lies in)
        still hangs: an open of its notes fails or hangs too."""
        st = self.supervisor.roots.get(name)
        if st is not None and (st.offline or st.hanging is not None):
            return True
        root = next((r for r in vault_roots(self.cfg) if r.name == name), None)
        return root is not None and self.supervisor.stuck_within(root) is not None

    def unreadable_keys(self) -> tuple[str, ...]:
        """The keys and key prefixes of the notes and folders recorded as unreadable now (their
        notes' absence from a listing is no evidence that they are gone; matched by ``kept_by``)."""
        out: list[str] = []
        for root, paths in self._listed_unreadable_roots():
            for where in paths:
                path = Path(where)
                if root is not None and path.is_relative_to(root.path):
                    rel = path.relative_to(root.path).as_posix()
                    out += [root.key_of(rel), _prefix(root, rel)]
        return tuple(out)

    def _unreadable_prefixes(self, root: Root, skipped: Sequence[Skipped]) -> tuple[str, ...]:
        """Key prefixes (and keys) under folders and files that could not be read; reported."""
        unread = _unreadable(root, skipped)
        self.supervisor.status(root)  # there for ``_say_unreadable``
        self._listed_unreadable[root.name] = [str(path) for path, _ in unread]
        self._causes.update(_causes(skipped))
        self._say_unreadable(root.name)
        return tuple(key for _, key in unread)

    def _unread_gone(self, root: Root, vanished: tuple[str, ...]) -> None:
        """Notes whose read failed that are gone now (at or below ``vanished``): no longer named,
        those never read too (named "not in the index" until the next full sweep)."""
        if not any(_at_or_below(k, root.name, vanished) for k in (*self._unread_notes, *self._never_read)):
            return
        self._unread_notes = {
            k: v for k, v in self._unread_notes.items() if not _at_or_below(k, root.name, vanished)
        }
        self._never_read = {
            k: v for k, v in self._never_read.items() if not _at_or_below(k, root.name, vanished)
        }
        self._retry = {k: v for k, v in self._retry.items() if not _at_or_below(k, root.name, vanished)}
        self._say_unreadable(root.name)

    def _unreadable_seen(
        self, root: Root, found: Sequence[NoteFile | Skipped], looked: Sequence[str]
    ) -> None:
        """What the events' look found unreadable, and what it read again (a folder walked, a
        path gone), into what status says of ``root``: a folder made unreadable or readable again
        shows at once, not at the next full sweep."""
        wheres = tuple(str(root.path / rel) for rel in looked)
        was = self._listed_unreadable.get(root.name, [])
        now = [p for p in was if not any(p == w or p.startswith(w + "/") for w in wheres)]
        now += [str(path) for path, _ in _unreadable(root, found) if str(path) not in now]
        self._causes.update(_causes(found))
        if now != was:
            self._listed_unreadable[root.name] = now
            self._say_unreadable(root.name)

    def _say_unreadable(self, name: str) -> None:
        """The folders and notes of root ``name`` that cannot be read, in its status and problems:
        those its listing could not read, and the notes kept because their read failed."""
        paths = self._listed_unreadable.get(name, []) + [p for (n, p) in self._unread_notes if n == name]
        never = sorted(p for (n, p) in self._never_read if n == name)
        status = self.supervisor.roots.get(name)
        if status is not None:
            status.unreadable = paths + never
        listed = {p for ps in self._listed_unreadable.values() for p in ps}
        self._causes = {p: c for p, c in self._causes.items() if p in listed}
        said: list[str] = []
        if paths:
            # The system's words for the first (an I/O error, no permission), as a failed read says them.
            why = self._causes.get(paths[0]) or self._unread_notes.get((name, paths[0]), "")
            if why.startswith("unreadable (") and why.endswith(")"):
                why = why[len("unreadable (") : -1]
            said.append(
                f"{len(paths)} folder(s) or note(s) of {name} cannot be read ({paths[0]}"
                f"{f': {why}' if why else ''}{', ...' if len(paths) > 1 else ''}); "
                "their notes stay in the index as they were"
            )
        if never:
            why = self._never_read[(name, never[0])]
            said.append(
                f"{len(never)} note(s) of {name} are not in the index: their read failed ({never[0]}: {why}"
                f"{', ...' if len(never) > 1 else ''}); later sweeps read them again until they read"
            )
        if said:
            self._unreadable[name] = "; ".join(said)
        else:
            self._unreadable.pop(name, None)
        self._report_unreadable()

    def _report_unreadable(self) -> None:
        if self._unreadable:
            self.problems.report("unreadable", "; ".join(self._unreadable.values()))
        else:
            self.problems.clear("unreadable")


def _listing_refusal(path: Path) -> str | None:
    """Why a folder recorded as unreadable still cannot be listed (or, a file, opened), or None:
    it lists now, or is gone (the sweep's to find)."""
    try:
        with os.scandir(path) as it:
            next(it, None)
    except NotADirectoryError:  # a note whose stat failed in its listing
        return read_refusal(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    return None


def _causes(found: Sequence[NoteFile | Skipped]) -> dict[str, str]:
    """Why each folder or note a listing could not read failed, by path."""
    return {str(s.path): s.cause for s in found if isinstance(s, Skipped) and s.cause}


def kept_by(key: str, marks: tuple[str, ...]) -> bool:
    """Whether ``key`` is one of ``marks`` (a note's key) or lies under one ending in "/" (a
    folder's key prefix): whole path parts only, "vault/a" keeps neither "vault/ab" nor
    "vault/a/b" (a note deleted beside an unreadable one was kept for as long as it stayed so)."""
    return any(key == m or (m.endswith("/") and key.startswith(m)) for m in marks)


def _prefix(root: Root, rel: str) -> str:
    """The key prefix of the notes below the folder ``rel`` of ``root``."""
    return root.key_of(rel + "/x")[:-1]


def _unreadable(root: Root, found: Sequence[NoteFile | Skipped]) -> list[tuple[Path, str]]:
    """The notes and folders a listing or walk could not read, each with its key (a note) or key
    prefix (a folder): an error reading them is no evidence that their notes are gone."""
    out: list[tuple[Path, str]] = []
    for s in found:
        if isinstance(s, Skipped) and s.reason in ("unreadable", "unreadable folder"):
            with contextlib.suppress(ValueError):
                rel = s.path.relative_to(root.path).as_posix()
                out.append((s.path, root.key_of(rel) if s.reason == "unreadable" else _prefix(root, rel)))
    return out


def _at_or_below(key: tuple[str, str], root_name: str, wheres: tuple[str, ...]) -> bool:
    """Whether a skip key lies at or below one of the paths ``wheres`` of the root."""
    return key[0] == root_name and any(key[1] == w or key[1].startswith(w + "/") for w in wheres)
