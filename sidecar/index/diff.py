"""What a sweep has to do: compare the roots (or the changed paths of file events) with the manifest.

A full sweep lists a root through the supervisor (bounded by its timeouts) and diffs it with the
manifest: notes to (re)index, keys gone, skip reasons. An unreadable folder is no evidence that its
notes are gone, and deletions pass the supervisor's mass-deletion guard, which counts only
notes not found elsewhere: every root of a sweep is listed before any root's deletions are
decided, so a note moved to another key (in any root) is told from a loss. Changed paths from file
events are looked at one by one (a stat each; a folder is walked and compared with its indexed
notes; a vanished path takes the notes below it too), never the rest of their root; a root that
changed as a whole, is offline, or loses many notes at once gets a full sweep.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sidecar.config import Config
from sidecar.index.bursts import Bursts
from sidecar.index.moves import MoveFinder
from sidecar.index.problems import Problems
from sidecar.index.refused import RefusedInboxes
from sidecar.index.skips import SkipReport
from sidecar.index.spellings import CaseSpellings, _Sibling, _twin_names
from sidecar.stores.manifest import FileState, Manifest
from sidecar.vault.homeguard import held
from sidecar.vault.sources import (
    CANVAS_TWIN_REASON,
    LINK_REASON,
    NOTE_SUFFIXES,
    TOO_LARGE,
    TWIN_REASON,
    Asking,
    NoteFile,
    Root,
    Skipped,
    asked,
    inbox_root,
    is_note_name,
    kind_skipped,
    link_refusal,
    name_refusal,
    read_refusal,
    real_path,
    refusal_of,
    roots,
    scan,
    twin_reason,
    unreadable_skip,
    vault_roots,
)
from sidecar.vault.supervisor import RootUnreachable, StopCut, Supervisor
from sidecar.vault.timeout import run_with_timeout

log = logging.getLogger(__name__)

# The clock of the rebuild's note check (a test moves it on instead of waiting).
_clock = time.monotonic


# File events may delete this many notes of a root within the window at once; beyond that, a
# full sweep of the root decides (an emptied mount point sends an event per vanished file).
EVENT_DELETIONS_MAX = 4
EVENT_DELETION_WINDOW_S = 60.0

_SETTLED = ("indexed", "skipped")
# The longest a note whose reads keep failing waits for its next read (``ChangeFinder.failed_read``).
RETRY_MOST_HOURS = 6.0
# The meta row keeping ``ChangeFinder._retry``'s failures across restarts, as JSON rows: root
# name, path, failures in a row.
_RETRIES = "read_retries"
# A loaded count of failures is cut to this: its wait is at the cap (RETRY_MOST_HOURS) already.
_RETRY_MOST_FAILURES = 32
_Where = tuple[str, str]  # (root name, path) of a note
_Stamp = tuple[int, int, int]  # mtime, size and ctime of a note whose read failed


@dataclass
class Diff:
    """What one sweep found: notes to (re)index, keys to delete, skip reasons."""

    work: list[NoteFile] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    unchanged: int = 0
    # Unchanged notes whose ctime, device or inode the manifest lacks: (key, mtime, size, ctime,
    # dev, ino, birth time).
    stamps: list[tuple[str, int, int, int, int, int, int]] = field(default_factory=list)
    # The notes a rule leaves out, where this sweep looked (links.set_excluded): a root listed
    # whole or a folder walked (a key prefix, ending in "/"), or one changed path (its key) ->
    # the excluded notes found there, {key: rule}.
    excluded: dict[str, dict[str, str]] = field(default_factory=dict)
    # Those that file events' paths found, with their stat: where a root this sweep lists in
    # full (the wiki, its folder moved into an excluded one of the vault) may find its notes.
    left_out: list[NoteFile] = field(default_factory=list)
    # (device, inode) of excluded files with other links: a hard-linked backup of indexed notes
    # (``Manifest.forget_ids``).
    linked: set[tuple[int, int]] = field(default_factory=set)
    # Moves found: the old key of a note -> its new key (``gone`` holds the old ones). The old
    # entry leaves once the new one is written, batch by batch: left to the sweep's end, a renamed
    # folder's every note was found twice for as long as the whole folder took to read.
    moves: dict[str, str] = field(default_factory=dict)
    # Notes in ``work`` only because the index marked them to be cut again (chunking settings, the
    # model or the chunker changed; ``Manifest.reread_all``): their files did not change.
    recut: int = 0


@dataclass
class _Listing:
    """A root as a full sweep listed it: its notes, its manifest entries, the keys not found."""

    root: Root
    notes: list[NoteFile]
    known: dict[str, FileState]
    missing: list[str]
    started: float
    excluded: list[NoteFile] = field(default_factory=list)  # notes there that a rule leaves out


class ChangeFinder(MoveFinder, CaseSpellings, SkipReport):
    """Finds what changed in the roots; remembers what it already reported and recent event deletions."""

    def __init__(
        self,
        cfg: Config,
        manifest: Manifest,
        supervisor: Supervisor,
        problems: Problems,
        excluded_by: Callable[[str], str | None],
    ) -> None:
        self.cfg = cfg
        self.manifest = manifest
        self.supervisor = supervisor
        self.problems = problems
        self.excluded_by = excluded_by
        self._unreadable: dict[str, str] = {}  # root name -> what cannot be read there
        self._listed_unreadable: dict[str, list[str]] = {}  # root name -> what its listing could not read
        self._causes: dict[str, str] = {}  # path -> why its listing or stat failed ("Input/output error")
        # Indexed notes whose read failed (no permission, I/O error), kept as they were, by (root
        # name, path): counted and named as unreadable until they are read, vanish or their root goes.
        self._unread_notes: dict[tuple[str, str], str] = {}
        # Notes not in the index because their read failed, by (root name, path): the manifest
        # keeps them as not read (``records.file_record``), every sweep reads them again, and
        # status names them until they read, vanish or their root goes.
        self._never_read: dict[tuple[str, str], str] = {}
        # Notes whose read failed, by (root name, path): (failures in a row, the full sweep it is
        # tried again at, its mtime and size then). A note that stays unreadable (an EIO, a file
        # of mode 000) was read, paid a read timeout and logged a warning at every sweep for good:
        # tried again after 1, 2, 4... full sweeps, up to about RETRY_MOST_HOURS; at once on a
        # file event or a change of its stat.
        # Their failures are kept in the manifest (``save_retries``): each restart began the
        # backoff anew and warned again.
        self._retry: dict[tuple[str, str], tuple[int, int, _Stamp]] = {}
        self.full_sweeps = 0  # full listings so far (``diff_roots``)
        self.retry_waiting = 0  # failed notes the last full sweep left for later
        self._event_deletions: dict[str, list[float]] = {}  # root name -> times of recent ones
        # Every deletion applied without a hold, by root (file events' and judgments'): counted
        # with the next judgment within EVENT_DELETION_WINDOW_S.
        self._deleted: dict[str, list[float]] = {}
        # The keys a mass hold holds, by root: an event naming them again (a folder walked) neither
        # waits nor sweeps for them (they were counted as waiting beside the hold).
        self._held: dict[str, set[str]] = {}
        # A root's deletions beyond the few applied at once wait for its file events to go quiet
        # and are judged whole (the index loop tells it the events, and asks for the sweeps).
        self.bursts = Bursts(cfg.index.mass_deletion_quiet_seconds)
        self._skips_named: set[tuple[str, str]] = set()  # (path, reason) already in the log
        # Files left out now, by (root name, path): full sweeps set a root's, events each path's.
        self._skips: dict[tuple[str, str], str] = {}
        self._too_long_named: list[str] = []  # the folders the last path_too_long line named
        self._skip_sizes: dict[tuple[str, str], int] = {}  # their bytes, of those too large
        self._retry_saved = self._load_retries()
        # The re-open of the notes kept unreadable before a rebuild's refusal (``_still_unread``):
        # one at a time, and none while the last one's thread still hangs on a share.
        self._reopening = threading.Lock()
        self._reopen_stuck: threading.Thread | None = None
        self._retry_all = False  # the sweep under way reads the notes waiting their turn too
        # Agents' inboxes refused now (a symlink, another user's folder) and the notes of each that
        # left the index since it was refused: said in a problem while it stays refused.
        self.refused = RefusedInboxes(cfg.agents_dir, problems, self.manifest)

    def _load_retries(self) -> dict[_Where, int]:
        """``_retry``'s failures in a row as the last process saved them, for the notes of roots
        configured now. Only the backoff is kept: each such note is read again by this start's
        first full sweep (a restart is a way out for a share that healed without a change of the
        note), and a failure then is its next in a row (no new warning, a longer wait). Never
        named unreadable from a row: a note that reads now, or is gone, is no unreadable note
        (a rebuild was refused for it). A row that cannot be read is dropped."""
        names = {r.name for r in vault_roots(self.cfg)}
        try:
            for name, where, failures in json.loads(self.manifest.get_meta(_RETRIES) or "[]"):
                if str(name) in names or str(name).startswith("memory/"):
                    # Turn 1: this start's first full sweep. A count past the cap waits no longer.
                    count = min(max(int(failures), 1), _RETRY_MOST_FAILURES)
                    self._retry[(str(name), str(where))] = (count, 1, (0, 0, 0))
        except (ValueError, TypeError) as exc:  # another shape: forgotten, as before it was kept
            log.warning("read_retries_dropped error=%s", exc)
            self._retry = {}
        return self._saved_retries()

    def _saved_retries(self) -> dict[_Where, int]:
        """What ``save_retries`` keeps of ``_retry``: the failures in a row of each note."""
        return {where: failures for where, (failures, _turn, _stamp) in self._retry.items()}

    def save_retries(self) -> None:
        """Keep ``_retry``'s failures in the manifest when they changed (after a sweep). A failed
        write keeps them for the next."""
        now = self._saved_retries()
        if now == self._retry_saved:
            return
        rows = [[name, where, failures] for (name, where), failures in sorted(now.items())]
        try:
            self.manifest.set_meta(_RETRIES, json.dumps(rows) if rows else "")
        except sqlite3.Error as exc:
            log.warning("read_retries_not_saved error=%s", exc)
            return
        self._retry_saved = now

    def skip_counts(self) -> dict[str, int]:
        """Files left out now, by reason (what `status` lists as skipped)."""
        out: dict[str, int] = {}
        for reason in self._skips.values():
            out[reason] = out.get(reason, 0) + 1
        if self._unread_notes:
            out["unreadable"] = out.get("unreadable", 0) + len(self._unread_notes)
        return out

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

    def failed_read(self, root: Root, path: Path, stamp: _Stamp) -> bool:
        """A read of a note (of mtime, size and ctime ``stamp``) failed: it is tried again after
        twice as many full sweeps as the last time (1, 2, 4, ...; at most about RETRY_MOST_HOURS),
        or once its stat changes (a chmod that makes it readable moves its ctime: a restart, or
        `sidecar index` with no events told, read it at once). True: the first failure in a row,
        the one worth a warning."""
        where = (root.name, str(path))
        failures = self._retry.get(where, (0, 0, stamp))[0] + 1
        most = max(1, int(RETRY_MOST_HOURS * 60 / self.cfg.index.rescan_minutes))
        self._retry[where] = (failures, self.full_sweeps + min(2 ** (failures - 1), most), stamp)
        return failures == 1

    def _retry_later(self, n: NoteFile) -> bool:
        """Whether a note whose read failed, unchanged since, waits for a later full sweep."""
        failed = self._retry.get((n.root.name, str(n.path)))
        stamp = (n.mtime_ns, n.size, n.ctime_ns)
        return failed is not None and self.full_sweeps < failed[1] and failed[2] == stamp

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
        ask = [(p, folder) for n, p, folder in recorded if not (n in away or self._away(n))]
        if not ask:
            return kept
        timeout = self.cfg.watch.probe_timeout_seconds
        if not self._reopening.acquire(timeout=timeout):  # another's, bounded the same
            return kept + [p for p, _f in ask]
        try:
            if self._reopen_stuck is not None and self._reopen_stuck.is_alive():
                return kept + [p for p, _f in ask]
            deadline = _clock() + timeout

            def probe() -> list[str]:
                failing: list[str] = []
                for i, (where, folder) in enumerate(ask):
                    if _clock() >= deadline:  # many on a slow share: the rest as recorded
                        return failing + [p for p, _f in ask[i:]]
                    if (_listing_refusal if folder else read_refusal)(Path(where)) is not None:
                        failing.append(where)
                return failing

            done, self._reopen_stuck = run_with_timeout(probe, timeout, "unreadable notes")
        finally:
            self._reopening.release()
        if done is None:
            log.warning("unreadable_recheck_hung notes=%d timeout=%.0fs", len(ask), timeout)
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

    def keep_roots(self, names: Collection[str]) -> None:
        """Forget what is kept of roots no longer swept (an agent's inbox emptied or removed, a
        root taken out of the configuration): their skips were counted in status for as long as
        it ran, and an entry per agent that ever wrote stayed for good."""
        self._skips = {k: v for k, v in self._skips.items() if k[0] in names}
        self._event_deletions = {k: v for k, v in self._event_deletions.items() if k in names}
        self._deleted = {k: v for k, v in self._deleted.items() if k in names}
        self._held = {k: v for k, v in self._held.items() if k in names}
        self._unread_notes = {k: v for k, v in self._unread_notes.items() if k[0] in names}
        self._never_read = {k: v for k, v in self._never_read.items() if k[0] in names}
        self._retry = {k: v for k, v in self._retry.items() if k[0] in names}
        self._listed_unreadable = {k: v for k, v in self._listed_unreadable.items() if k in names}
        if any(k not in names for k in self._unreadable):
            self._unreadable = {k: v for k, v in self._unreadable.items() if k in names}
            self._report_unreadable()

    def roots(self) -> list[Root]:
        """The roots to sweep: those of ``sources.roots`` (inboxes with notes), plus the inboxes
        of agents still in the index whose notes or folder are gone, until their entries are.
        While the home's agents folder is gone or replaced (its share unmounted), what is there
        is not listed: the indexed agents' inboxes are unreachable roots (nothing deleted)."""
        guard = self.supervisor.home
        if guard.record_error is None:
            self.problems.clear("home", subject="record")
        else:  # only a log line, it went unnoticed (a service sandbox that cannot write it)
            self.problems.report(
                "home",
                f"the home's identity cannot be recorded ({guard.record_error}): a restart while "
                "its share is not mounted would take the bare mount point for the home",
                subject="record",
            )
        why = guard.problem()
        if why is None:
            self.problems.clear("home")
            out = roots(self.cfg)
        else:
            self.problems.report("home", held(why))
            out = vault_roots(self.cfg)
        present = {r.agent for r in out if r.source == "memory"}
        indexed = set(self.manifest.memory_agents())
        out.extend(inbox_root(self.cfg, a) for a in sorted(indexed - present))
        if why is None:  # a refused inbox not listed while the home is away is not known gone
            self.forget_inboxes({r.name for r in out})
        return out

    def diff_roots(
        self,
        roots: Sequence[Root],
        diff: Diff,
        confirm: Collection[str] = (),
        excluded: dict[str, int] | None = None,
        *,
        retry_all: bool = False,
    ) -> None:
        """Scan the roots and add what changed and what is gone to ``diff``. ``retry_all``: the
        notes whose read failed are read now, also those waiting their turn (a sweep asked for).

        Every root is listed before any root's deletions are decided: a note moved from one root
        to another (the vault into its wiki) vanishes from the one and appears in the other, and
        the guard must know the new keys of all of them, whatever the order (``diff.work``
        already holds those that file events found). The vault is decided before its wiki,
        whose guard asks whether the vault around it is there."""
        self.full_sweeps += 1
        self.retry_waiting = 0
        self._retry_all = retry_all
        listings = [x for r in roots if (x := self._list(r, diff, excluded)) is not None]
        self.refused.tell()
        self.refused.save()
        alien: set[str] = set()  # roots whose folder is not the share now: no evidence of moves
        for listing in sorted(listings, key=lambda x: x.root.within is not None):
            if not self._decide(listing, listings, diff, listing.root.name in confirm, alien):
                alien.add(listing.root.name)

    def _list(self, root: Root, diff: Diff, excluded: dict[str, int] | None) -> _Listing | None:
        """List a root and compare it with the manifest (None: unreachable, marked offline)."""
        supervisor = self.supervisor
        status = supervisor.status(root)
        t0 = time.time()
        try:
            found = supervisor.list_root(root)
        except RootUnreachable as exc:
            supervisor.unreachable(root, exc)
            status.waiting_deletions = 0  # nothing judged, nothing deleted: the retry looks again
            self.bursts.judged(root.name)
            return None
        notes = [f for f in found if isinstance(f, NoteFile)]
        prefix = root.key_of("x")[:-1]  # "vault/", "wiki/", "memory/<agent>/"
        known = self.manifest.file_states(prefix)
        notes, left_out = self._without_excluded(
            root, notes, known, diff, {} if excluded is None else excluded
        )
        diff.linked.update(n.shared for n in left_out if n.shared[1])
        skipped = [s for s in found if isinstance(s, Skipped)]
        self._skips = {k: v for k, v in self._skips.items() if k[0] != root.name}
        for s in skipped:
            diff.skipped[s.reason] = diff.skipped.get(s.reason, 0) + 1
            self._skipped(root, s)
        status.seen, status.skipped = len(notes), len(skipped)
        seen = {n.key for n in notes}
        listed = {str(n.path) for n in notes}  # an unreadable note that vanished is no longer one
        self._unread_notes = {
            k: v for k, v in self._unread_notes.items() if k[0] != root.name or k[1] in listed
        }
        self._never_read = {k: v for k, v in self._never_read.items() if k[0] != root.name or k[1] in listed}
        self._retry = {k: v for k, v in self._retry.items() if k[0] != root.name or k[1] in listed}
        # An error reading a folder (or a file's stat) is no evidence that its notes are gone.
        kept = self._unreadable_prefixes(root, skipped)
        missing = [k for k in known if k not in seen and not kept_by(k, kept)]
        if root.source == "memory":
            self._inbox_refused(root, skipped, len(missing))
        return _Listing(root, notes, known, missing, t0, left_out)

    def _inbox_refused(self, root: Root, skipped: Sequence[Skipped], missing: int) -> None:
        """An agent's inbox that its scan refused (a symbolic link, another user's folder: its only
        skip is the inbox itself) is neither read nor served: its indexed notes leave the index
        (``missing``, a memory root is never held). Said as a problem (``diff_roots`` tells them
        once every root is listed, one per refused folder), not only counted among the skipped
        files: the agent's memory is no longer found. Cleared once the inbox is read."""
        why = next((s.reason for s in skipped if s.path == root.path), None)
        self.refused.listed(root.name, root.agent, why, missing)

    def forget_inboxes(self, names: Collection[str]) -> None:
        """The refused inboxes no longer among the roots ``names`` (removed): their problem goes."""
        self.refused.forget(names)
        self.refused.tell()

    def _decide(
        self, listing: _Listing, listings: Sequence[_Listing], diff: Diff, confirm: bool, alien: set[str]
    ) -> bool:
        """A listed root's deletions through the guard, and its work; False if what is there
        now is not the share (the root is left alone)."""
        supervisor = self.supervisor
        root, notes, known, missing = listing.root, listing.notes, listing.known, listing.missing
        moved: set[str] = set()
        away: set[str] = set()
        copies = 0
        # Deletions applied a moment ago by file events or an earlier judgment count with these
        # (one deletion in several bursts or batches is judged as one), unless confirmed.
        applied = len(_recent(self._deleted, root)) if missing and not confirm else 0
        # A root whose deletions and new notes still come (``index.bursts``; a held root is held
        # already: its retry judges it at once, or it was swept whole every second while busy).
        settling = (
            bool(missing)
            and not confirm
            and supervisor.status(root).hold_kind is None
            and self.bursts.busy(root.name)
        )
        # Moves are looked for whatever the count (and while the root settles): a folder renamed
        # is applied at once, each old entry with its new one. Looked for only where the guard
        # could hold, a rename of a tenth of a vault was none once the listing outlasted the
        # root's quiet time: every note read again, both copies found until the sweep's end.
        if missing:
            left_out = self._left_out(listings, alien, diff.left_out)
            moved, away = self._moves(listing, listings, alien, diff, left_out)
            copies = self._excluded_copies(listing, left_out, moved)
        was_held = supervisor.status(root).hold_kind is not None
        hold = supervisor.hold_deletions(
            root,
            len(known),
            len(missing),
            len(notes),
            confirm,
            moved=len(moved),
            moved_away=len(away),
            copies=copies,
            arrived=max(0, sum(1 for n in notes if n.key not in known) - (len(moved) - len(away))),
            applied=applied,
            settling=settling,
        )
        if hold == "wait":  # only the loss no move explains waits: the moves are applied below
            self._wait(root, set(missing) - moved, whole=True)
        else:
            self._judged(root, hold, len(missing))
        if hold == "mass":
            self._held[root.name] = set(missing) - moved
        else:
            self._held.pop(root.name, None)
        if hold is None:
            supervisor.mark_online(root)
            self._event_deletions.pop(root.name, None)  # judged: a few may go at once again
            if confirm or was_held:
                self._deleted.pop(root.name, None)  # a hold ended: no burst goes on
            else:  # moves are no loss: not counted with the next judgment
                lost = len(set(missing) - moved)
                self._deleted[root.name] = _recent(self._deleted, root) + [time.monotonic()] * lost
            diff.gone.extend(missing)
        elif hold in ("mass", "wait"):
            diff.gone.extend(k for k in missing if k in moved)  # moves are no loss: at once
        status = supervisor.status(root)
        status.last_sweep, status.last_sweep_seconds = time.time(), time.time() - listing.started
        if hold == "wait" and status.offline and status.hold_kind != "mass":
            supervisor.mark_online(root)  # reachable and on its mount: only its deletions wait
        if hold not in (None, "mass", "wait"):
            return False  # what is there now is not the share: leave the root alone while it stays so
        waiting = self.retry_waiting
        self._add_work(notes, known, diff, full=True)
        if self.retry_waiting > waiting:
            log.info("unreadable_waiting root=%s count=%d", root.name, self.retry_waiting - waiting)
        return True

    def _add_work(
        self, notes: Sequence[NoteFile], known: dict[str, FileState], diff: Diff, *, full: bool = False
    ) -> None:
        """``full``: a full sweep's listing (a note whose read failed waits its turn there; a
        file event's look reads it at once)."""
        for n in notes:
            st = known.get(n.key)
            # No record: a rebuild emptied the index, which reads every note (one waiting its
            # turn was put back unread, and the rebuild said unfinished for hours).
            if full and st is not None and not self._retry_all and self._retry_later(n):
                self.retry_waiting += 1
                diff.unchanged += 1
            elif st is None or (st.mtime_ns, st.size) != (n.mtime_ns, n.size) or st.state not in _SETTLED:
                diff.work.append(n)
                # Marked to be cut again (size -1), its file unchanged; a failed read is marked
                # so too, but is no indexed note.
                if st is not None and st.size == -1 and st.mtime_ns == n.mtime_ns and st.state == "indexed":
                    diff.recut += 1
            elif (n.root.name, str(n.path)) in self._unread_notes or (
                n.root.name,
                str(n.path),
            ) in self._retry:
                # Kept as indexed after a failed read (in this process, or before a restart): tried
                # again until it reads (a folder made readable again changes no stat of its notes).
                diff.work.append(n)
            elif st.ctime_ns and n.ctime_ns and st.ctime_ns != n.ctime_ns:
                # Same size and mtime, yet changed (mtime set back by a tool, a clock too coarse
                # for two saves): read again; equal bytes only update the stat.
                diff.work.append(n)
            else:
                diff.unchanged += 1
                if (not st.ctime_ns and n.ctime_ns) or (st.dev, st.ino) != (n.dev, n.ino):
                    born = n.born()  # a statx, for these few only: none in a sweep of unchanged notes
                    diff.stamps.append((n.key, n.mtime_ns, n.size, n.ctime_ns, n.dev, n.ino, born))

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

    def diff_paths(self, paths: Collection[str], candidates: Sequence[Root], diff: Diff) -> list[Root]:
        """Look at changed paths only (a stat each; a new or changed folder is walked); return
        the roots that need a full sweep instead (offline, a root itself changed, many deletions)."""
        by_root: dict[Root, set[str]] = {}
        escalate: list[Root] = []
        # Longest path first: a path in the wiki belongs to the wiki, not to the vault around it.
        ordered = sorted(candidates, key=lambda r: len(str(r.path)), reverse=True)
        for raw in paths:
            path = Path(raw)
            # A folder that holds a whole root (a new agent's folder moved in, the wiki's parent):
            # that root is swept in full.
            escalate.extend(
                r for r in ordered if r.path != path and r.path.is_relative_to(path) and r not in escalate
            )
            root = next((r for r in ordered if path == r.path or path.is_relative_to(r.path)), None)
            if root is None:
                continue
            rel = path.relative_to(root.path).as_posix()
            if rel == ".":
                rel = ""
            if root.exclude and (rel == root.exclude or rel.startswith(root.exclude + "/")):
                continue  # the wiki inside the vault: its own root
            if any(p.startswith(".") for p in rel.split("/")) or (root.source == "memory" and "/" in rel):
                continue
            st = self.supervisor.status(root)
            # Offline (unreachable, not the share): a full sweep looks again. A held mass deletion
            # leaves the root readable: its changed paths are looked at (deletions stay held).
            if not rel or (st.offline and st.hold_kind != "mass"):
                if root not in escalate:
                    escalate.append(root)
                continue
            by_root.setdefault(root, set()).add(rel)
        for root, rels in by_root.items():
            if root not in escalate and not self._diff_group(root, rels, diff):
                escalate.append(root)
        return escalate

    def _diff_group(self, root: Root, rels: set[str], diff: Diff) -> bool:
        """Changed paths of one root into ``diff``; False if the root needs a full sweep instead."""
        try:
            found, gone, walked = self.supervisor.bounded(
                root, functools.partial(self._look, root, sorted(rels))
            )
        except StopCut:  # the daemon stops: nothing applied, the next start's sweep looks
            return True
        except (RootUnreachable, _RootRefused):
            # The full sweep marks it offline with the reason; a refused root (an inbox made a
            # link or another user's, a wiki linked out) is swept whole now too, as a plain
            # root's events are applied now: a refused inbox's notes leave the index at once, not
            # at the next full sweep, and none is read through the link.
            return False
        notes = [f for f in found if isinstance(f, NoteFile)]
        manifest = self.manifest
        missing: set[str] = set()
        if gone or walked:  # what lay there is no longer left out either (one pass, however many
            # went); what a walk left out now is counted again below
            wheres = tuple(str(root.path / rel) for rel in gone + walked)
            self._skips = {k: v for k, v in self._skips.items() if not _at_or_below(k, root.name, wheres)}
            # Unreadable notes that went (a walk may leave one in place: unchanged, not read again)
            self._unread_gone(root, tuple(str(root.path / rel) for rel in gone))
        for rel in gone:
            if rel.lower().endswith(NOTE_SUFFIXES):
                key = root.key_of(rel)
                if manifest.rel_of(key) in (None, rel):  # not when its key's file is a twin
                    missing.update(manifest.file_states_of([key]))
            # A vanished path may have been a folder (even one named "x.md"): its notes went
            # with it, with no event of their own when it was moved away.
            missing.update(manifest.file_states(_prefix(root, rel)))
        if walked:
            # A walked folder holds what the walk found, nothing else: a folder put in the place
            # of another of the same name (renamed away: no event for its notes) leaves the old
            # one's notes behind. Notes below what could not be read are kept, as a sweep does.
            kept = tuple(key for _, key in _unreadable(root, found))
            for rel in walked:
                missing.update(k for k in manifest.file_states(_prefix(root, rel)) if not kept_by(k, kept))
                if rel.lower().endswith(NOTE_SUFFIXES) and manifest.rel_of(key := root.key_of(rel)) == rel:
                    # A folder now where a note of its name was ("x.md" deleted, a folder "x.md"
                    # made): the note is gone, not only till the next full sweep.
                    missing.update(manifest.file_states_of([key]))
        for n in notes:
            self._skips.pop((root.name, str(n.path)), None)
        self._unreadable_seen(root, found, gone + walked)
        seen = notes
        notes, excluded = self._excluded_seen(root, notes, missing, gone=gone, walked=walked)
        kept_keys = {n.key for n in notes}
        left_out = [n for n in seen if n.key not in kept_keys]
        for s in found:
            if not isinstance(s, Skipped):
                continue
            diff.skipped[s.reason] = diff.skipped.get(s.reason, 0) + 1
            self._skipped(root, s)
            if s.reason not in _KEPT_WHEN_SKIPPED and is_note_name(s.path.name, root.source):
                # Now left out (grown too large, ...): its old text must not be found any more,
                # as a full sweep would remove it.
                with contextlib.suppress(ValueError):
                    missing.update(
                        manifest.file_states_of([root.key_of(s.path.relative_to(root.path).as_posix())])
                    )
        missing -= {n.key for n in notes}
        states = manifest.file_states_of([n.key for n in notes])
        # A move is no loss, whatever its size: a folder renamed (its old and new paths are one
        # batch of events) is applied now, each old entry with its new one; only the deletions
        # no move explains count toward the few applied at once (past them, a full sweep took
        # the rename for a loss whenever its listing outlasted the root's quiet time).
        # Whether the root's deletions may go ahead, probed once for the group (a listing of the
        # root under the probe timeout: slow on a share), when the moves or the deletions ask.
        deletable = functools.cache(functools.partial(self.supervisor.deletable, root))
        moved = self._event_moves(
            root, missing - self._held.get(root.name, set()), notes, states, diff, deletable=deletable
        )
        applied = self._event_deletions_of(root, notes, missing - moved, states, deletable)
        if applied is None:
            for key in moved:  # the full sweep of the root finds them again
                diff.moves.pop(key, None)
            return False
        diff.gone.extend(sorted(applied | moved))
        diff.excluded.update(excluded)
        diff.left_out.extend(left_out)
        diff.linked.update(n.shared for n in left_out if n.shared[1])
        self._add_work(notes, states, diff)
        return True

    def _event_deletions_of(
        self,
        root: Root,
        notes: list[NoteFile],
        missing: set[str],
        states: Collection[str],
        deletable: Callable[[], bool],
    ) -> set[str] | None:
        """The deletions file events found in ``root`` that are applied now (those that wait are
        handed to ``bursts``), or None: the root needs a full sweep instead. ``states``: the
        manifest's entries of ``notes``."""
        back = self.bursts.keys(root.name) & {n.key for n in notes}
        # A burst is made of deletions and new notes (a note that came back among them): an
        # edited note's saves (a hot note's, an editor's) do not keep its root busy.
        arrived = bool(back) or any(n.key not in states for n in notes)
        if (missing or arrived) and root.source != "memory":
            self.bursts.heard(root.name)
        if back:
            self.bursts.wait(root.name, (), back=back)
        missing = missing - self._held.get(root.name, set())  # held already: stay held, never "waiting"
        if not missing:
            return missing
        verdict = self._event_verdict(root, len(missing), arrived, deletable)
        if verdict == "sweep":
            return None
        if verdict == "wait":  # judged whole once the root's events go quiet; the rest goes on
            self._wait(root, missing)
            return set()
        return missing

    def _excluded_seen(
        self,
        root: Root,
        notes: list[NoteFile],
        missing: set[str],
        *,
        gone: Sequence[str],
        walked: Sequence[str],
    ) -> tuple[list[NoteFile], dict[str, dict[str, str]]]:
        """The notes of changed paths that no rule leaves out, and the excluded ones where the
        events looked, for ``Diff.excluded`` (a note made, moved or deleted in an excluded folder
        is a link target, or none, at once: only full sweeps recorded them, and links to such a
        note waited for the next one). An indexed one (a rule changed) is ``missing``."""
        if root.source == "memory":
            return notes, {}
        kept: list[NoteFile] = []
        rules: dict[str, str] = {}
        for n in notes:
            rule = self.excluded_by(n.key)
            if rule is None:
                kept.append(n)
            else:
                rules[n.key] = rule
        missing.update(self.manifest.file_states_of(list(rules)))
        folders = {_prefix(root, rel) for rel in [*gone, *walked]}
        files = {root.key_of(rel) for rel in gone if rel.lower().endswith(NOTE_SUFFIXES)}
        excluded: dict[str, dict[str, str]] = {scope: {} for scope in [*folders, *files]}
        for key, rule in rules.items():
            # Each folder the note lies in by its key's "/"s: a checkout of thousands of paths
            # is not every note against every path.
            below = [key[: i + 1] for i, c in enumerate(key) if c == "/" and key[: i + 1] in folders]
            for scope in below:
                excluded[scope][key] = rule
            if key in files or not below:
                excluded[key] = {key: rule}  # a changed file of its own
        return kept, excluded

    def _look(
        self, root: Root, rels: Sequence[str], asking: Asking
    ) -> tuple[list[NoteFile | Skipped], list[str], list[str]]:
        """Stat each changed path of a root: (notes and skipped files found, relative paths gone,
        folders walked whole). ``asking`` is told of each stat and listing (the supervisor gives
        up on one that hangs, as in a sweep)."""
        found: list[NoteFile | Skipped] = []
        walked: list[str] = []
        max_bytes = self.cfg.index.max_file_bytes
        refusal, base = _resolved(root, asking)
        if refusal is not None:  # an inbox made a link, a wiki linked out: its sweep decides
            raise _RootRefused(refusal)
        folders: dict[Path, bool] = {}  # folder -> a link (or no answer): each asked once a batch
        gone, todo = self._other_spellings(root, rels, asking)
        looked = set(todo) | set(rels)
        keys: dict[str, Path] = {}  # key -> the file of the note found for it
        walked_files: set[Path] = set()
        for rel in todo:  # grows by the twins of deleted notes
            path = root.path / rel
            # File events come through folder symlinks too (the watch follows them): a path
            # below one is never a note of this root, as a scan never descends into one.
            if _below_a_link(root.path, rel, folders, asking):
                continue
            try:
                st = _lstat(path, rel, asking)
            except FileNotFoundError:
                gone.append(rel)
                # "Note.MD" beside a deleted "Note.md" owns the key now, and has no event.
                twins = sorted(t for t in _twin_names(rel) if t not in looked and _lexists(root, t, asking))
                todo.extend(twins)
                looked.update(twins)
                continue
            except OSError:
                continue  # unreadable: kept as it is; the next full sweep reports it
            if stat.S_ISDIR(st.st_mode):
                if root.source != "memory":
                    try:
                        listed = list(scan(root, max_bytes, start=rel, asking=asking))
                    except OSError as exc:
                        # Not listed: nothing known of what it holds, kept as it is. Said now (a
                        # chmod 000 is an event for the folder): status showed no problem until
                        # the next full sweep, index.rescanMinutes later.
                        found.extend(_unlisted(path, exc))
                        continue
                    found.extend(listed)
                    walked.append(rel)
                    for n in listed:
                        if isinstance(n, NoteFile):
                            keys.setdefault(n.key, n.path)
                            walked_files.add(n.path)
                continue
            with asked(asking, "stat", rel):  # a link's target resolved and stat'ed
                got = _file(root, path, rel, st, base=base, max_bytes=max_bytes)
            if isinstance(got, NoteFile):
                owner = keys.setdefault(got.key, got.path)
                if owner == got.path and got.path in walked_files:
                    continue  # found by the walk of its folder already
                if owner != got.path:  # "Note.MD" and "Note.Md" left: one key, the first the note
                    got = Skipped(path, TWIN_REASON)
            if got is not None:
                found.append(got)
        return found, gone, walked

    def _event_verdict(self, root: Root, count: int, arrived: bool, deletable: Callable[[], bool]) -> str:
        """What becomes of deletions seen by events: ``apply`` (at once: only a few at a time, on a
        root that is where it was and not empty, with none waiting), ``sweep`` (a full sweep of the
        root and its guard now: it applies at once the moves it finds and what they explain, and
        lets only the loss left wait while the root is busy; the root is not what it was) or
        ``wait`` (deletions of a root whose deletions wait already, in a batch with no new note
        that could be a move's other half; or of a held root: judged whole once it is quiet,
        ``index.bursts``, not listed whole at every batch of an ``rm -r``)."""
        if root.source == "memory":
            self._applied(root, count)
            return "apply"
        ok = deletable()
        waiting = self.bursts.waiting(root.name) > 0
        if ok and not waiting and len(_recent(self._event_deletions, root)) + count <= EVENT_DELETIONS_MAX:
            self._applied(root, count)
            return "apply"
        st = self.supervisor.status(root)
        held = st.offline and st.hold_kind == "mass"
        if (held or (ok and waiting and not arrived)) and self.bursts.busy(root.name):
            return "wait"
        return "sweep"

    def _wait(self, root: Root, keys: Collection[str], whole: bool = False) -> None:
        """These deletions of the root wait for its events to go quiet (said once); ``whole``: a
        full sweep's, all that wait now."""
        st = self.supervisor.status(root)
        self.bursts.wait(root.name, keys, whole=whole)
        count = self.bursts.waiting(root.name)
        if not st.waiting_deletions:
            log.info(
                "deletions_waiting root=%s count=%d until=no deletion or new note for %.1fs",
                root.name, count, self.bursts.quiet_s,
            )  # fmt: skip
        st.waiting_deletions = count

    def _judged(self, root: Root, hold: str | None, count: int) -> None:
        """A full sweep judged the root's deletions: those that waited are said in the log."""
        self.bursts.judged(root.name)
        st = self.supervisor.status(root)
        if st.waiting_deletions:
            log.info("deletions_judged root=%s missing=%d hold=%s", root.name, count, hold or "-")
        st.waiting_deletions = 0

    def _applied(self, root: Root, count: int) -> None:
        """``count`` deletions of the root applied now by file events: a few a minute go at once,
        and the next judgment counts them."""
        now = time.monotonic()
        for times in (self._event_deletions, self._deleted):
            times[root.name] = _recent(times, root) + [now] * count

    def _without_excluded(
        self,
        root: Root,
        notes: list[NoteFile],
        states: dict[str, FileState],
        diff: Diff,
        counts: dict[str, int],
    ) -> tuple[list[NoteFile], list[NoteFile]]:
        """The notes kept, and those a rule leaves out; indexed ones of the latter are deleted at
        once (a rule is no vanished mount, so the mass-deletion guard does not hold them)."""
        if root.source == "memory":
            return notes, []
        kept: list[NoteFile] = []
        dropped: list[NoteFile] = []
        prefix = root.key_of("x")[:-1]
        # Kept as link targets (notes.links.set_excluded), whichever rule it is: Obsidian's
        # Excluded files hide a note from search, not from links; index.exclude is sidecar's own
        # word for the same and is treated alike (``get`` reads either by its path already; an
        # excluded note is named, never searched). Only what the walk of a root found: never a
        # path outside the vault or the wiki.
        left_out = diff.excluded.setdefault(prefix, {})
        for n in notes:
            rule = self.excluded_by(n.key)
            if rule is None:
                kept.append(n)
            else:
                counts[rule] = counts.get(rule, 0) + 1
                left_out[n.key] = rule
                dropped.append(n)
        for key in [k for k in states if k.startswith(prefix) and self.excluded_by(k) is not None]:
            diff.gone.append(key)
            del states[key]
        return kept, dropped


# Skipped for a reason that says nothing about the note's text: its indexed text stays.
# Skips that leave the note's entry as it is: a file that cannot be read now, and a twin
# (Note.MD beside Note.md), whose key is its sibling's note.
_KEPT_WHEN_SKIPPED = frozenset({"unreadable", "unreadable folder", TWIN_REASON, CANVAS_TWIN_REASON})


class _RootRefused(Exception):  # noqa: N818 - a reason to sweep the root whole, not a failure
    """A file event's root is refused as a whole (``refusal_of``)."""


def _file(  # noqa: PLR0911 - one return per kind of file
    root: Root, path: Path, rel: str, st: os.stat_result, *, base: Path, max_bytes: int
) -> NoteFile | Skipped | None:
    """A changed path of ``root`` that is no folder: a note, a skip, or None (no note)."""
    linked = stat.S_ISLNK(st.st_mode)
    if linked:  # followed only where a scan follows it
        why = LINK_REASON if root.source == "memory" else None
        try:
            why = why or link_refusal(root, path, base)
            st = os.stat(path)
        except (OSError, RuntimeError):
            # A link to nothing, or a loop: counted as a scan counts it (not until the next
            # full sweep).
            return Skipped(path, "broken symlink") if is_note_name(path.name, root.source) else None
        if why is not None:
            return Skipped(path, why)
    if not is_note_name(path.name, root.source):
        return kind_skipped(root, path, st)
    if not stat.S_ISREG(st.st_mode):  # a pipe or device named like a note: counted, as a scan does
        return Skipped(path, "not a regular file")
    why = name_refusal(root, path.name)
    if why is not None:
        return Skipped(path, why)
    twin = twin_reason(path.name, _Sibling(path))
    if twin is not None:
        return Skipped(path, twin)
    if st.st_size > max_bytes:
        return Skipped(path, TOO_LARGE, st.st_size)
    return NoteFile.of(root.key_of(rel), root, path, rel, st, linked=linked)


def _resolved(root: Root, asking: Asking) -> tuple[str | None, Path]:
    """Why the root may not be read (``refusal_of``) and its real path: look-ups on the share,
    ``asking`` told of them as of a stat of the root."""
    with asked(asking, "stat", "."):
        refusal = refusal_of(root)
        return refusal, real_path(root.path) if refusal is None else root.path  # refused: not resolved


def _lstat(path: Path, rel: str, asking: Asking) -> os.stat_result:
    """The lstat of a changed path, ``asking`` told of it (a hung share is given up on there)."""
    asking.ask("stat", rel)
    try:
        return os.lstat(path)
    finally:
        asking.answered()


def _unlisted(folder: Path, exc: OSError) -> list[Skipped]:
    """What a folder whose listing failed is: unreadable (no permission, an I/O error), its
    path too long, or nothing when it was renamed, removed or replaced by a file since its stat
    (a sync tool's flap; the event of its going or of what took its place follows)."""
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return []
    return [unreadable_skip(folder, exc, "unreadable folder")]


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


def _recent(times: dict[str, list[float]], root: Root) -> list[float]:
    """The times of ``root`` in ``times`` within ``EVENT_DELETION_WINDOW_S``."""
    now = time.monotonic()
    return [t for t in times.get(root.name, []) if now - t < EVENT_DELETION_WINDOW_S]


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


def _lexists(root: Root, rel: str, asking: Asking) -> bool:
    """Whether a path of the root exists (a link to nothing too), ``asking`` told of the look-up."""
    with asked(asking, "stat", rel):
        return os.path.lexists(root.path / rel)


def _below_a_link(top: Path, rel: str, known: dict[Path, bool], asking: Asking) -> bool:
    """Whether a folder between ``top`` and ``rel``'s last part is a symlink (or cannot be told);
    ``known`` keeps each folder's answer for the batch (a checkout of thousands of files). Each
    look-up is asked as a stat: a hung share is given up on there, not waited for."""
    folder = top
    parts = rel.split("/")[:-1]
    for i, part in enumerate(parts):
        folder = folder / part
        if folder not in known:
            try:
                with asked(asking, "stat", "/".join(parts[: i + 1])):
                    known[folder] = stat.S_ISLNK(os.lstat(folder).st_mode)
            except FileNotFoundError:
                return False  # gone: the path's own lstat says so
            except OSError:
                known[folder] = True
        if known[folder]:
            return True
    return False
