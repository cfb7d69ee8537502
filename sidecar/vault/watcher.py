"""File events (watchfiles) that trigger indexing soon after a save.

Each batch of changes hands its paths to the indexer, which looks at those paths only (a stat each;
a new folder is walked), never at the rest of their root: a memory write does not walk a vault on a
share. What events miss (edits made on other machines of a network share, files in freshly created
nested folders, a watch that died) arrives with the scheduled full sweeps and the polling of network
roots; a watched folder that was replaced, mounted or unmounted restarts the watch and asks for a
full sweep (an empty set of paths), and so do lost events (``events_lost``: a queue overflow that
left folders made meanwhile unwatched, told by the index loop). Editor temp files, dot-folders and
attachments (no counted kind) are filtered out, but not folders named with a dot ("Node.js"): one that appears
is walked, one deleted or moved away (or a file that may have been one) is named, once for a whole
deleted tree. A folder whose name is not valid UTF-8 makes the recursive watch fail ("Unable to
decode path"): the watcher then watches every other folder one by one (not recursively), restarting
when a folder appears and looking at that folder again once the new watch runs, so events keep
flowing for the rest of the tree. So does a tree holding a folder symlink: the recursive watch would
follow it out of the vault. Obsidian's settings that decide what is indexed are events in either
mode (folder by folder, their own folders are watched). A watch that ran out of the system's inotify
watches (``fs.inotify.max_user_watches``) covers only part of the tree, and watchfiles says
nothing of it: each new watch is probed (and probed again once a minute: watches used up later
leave a folder made from then on without events), and while the limit is used up the watcher says
so (``partial``; the roots are then polled like a share's) and watches again once the limit
changes or watches are given back.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import stat
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from time import monotonic

import watchfiles

from sidecar.runtime.backoff import Backoff
from sidecar.vault import watch_walk
from sidecar.vault.confine import printable
from sidecar.vault.notenames import NOTE_SUFFIXES
from sidecar.vault.timeout import NoAnswer, SharedProbes, bounded_call, bounded_stat
from sidecar.vault.watch_filter import (
    NoteFilter,
    _in_settings,
    _other_kind,
    obsidian_setting,
    settings_folders,
)
from sidecar.vault.watch_walk import (
    MAX_FLAT_FOLDERS,
    AskWalk,
    Walked,
    _around,
    _Behind,
    _Looks,
    _walk_noting,
    bounded_walk,
)

log = logging.getLogger(__name__)

# The clock (``monotonic``) and the folder look (``watch_walk._is_real_folder``) go by names of
# their own here: a test patching ``time`` or ``_is_real_folder`` on this module, meaning the
# walks' (which moved to ``watch_walk``), fails loudly instead of reaching nothing.

# A watch that fails is started again after 5 s, 10 s, 20 s ... up to 5 min.
RETRY = Backoff(base=5.0, cap=300.0)
# While no watched folder exists (a share not mounted yet), look again this often.
_ABSENT_POLL_S = 30.0
# How often the watched folders' identity is compared (a stat of each; not once per event batch,
# or every memory write would stat the vault's share).
_IDENTITY_EVERY_S = 5.0
# A folder whose walk answered late again and again: the watch starts again for it after 5 s,
# 10 s, 20 s ... up to 5 min.
_LATE_BASE_S = 5.0
_LATE_CAP_S = 300.0
_UNDECODABLE = "Unable to decode path"
WATCH_LIMIT_FILE = Path("/proc/sys/fs/inotify/max_user_watches")
_IN_CLOEXEC = 0o2000000
# While the inotify watches are used up: how often to ask whether some were given back (seconds).
_ROOM_PROBE_S = 60.0
_IN_ATTRIB = 0x4


def watch_limit() -> int | None:
    """The system's inotify watch limit per user (None where there is none to read: not Linux)."""
    try:
        return int(WATCH_LIMIT_FILE.read_text().strip())
    except (OSError, ValueError):
        return None


def watches_used_up(path: Path) -> bool:
    """Whether one more inotify watch (on ``path``) is refused for want of watches (ENOSPC): the
    recursive watch before it then ran out on the way. watchfiles, told to pass over folders it
    may not read, passes over this refusal too: 600 watches for 1,531 folders, no error, and
    status said "events" while most of the vault had none (checked on a real kernel)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(_IN_CLOEXEC)
    except (OSError, AttributeError):
        return False
    if fd < 0:  # no inotify instance left (max_user_instances): the watch itself says so
        return False
    try:
        refused = libc.inotify_add_watch(fd, os.fsencode(path), _IN_ATTRIB) < 0
        return refused and ctypes.get_errno() == errno.ENOSPC
    finally:
        os.close(fd)


def _covered(changes: set[tuple[watchfiles.Change, str]]) -> set[tuple[watchfiles.Change, str]]:
    """The batch without deletions of non-notes whose folder the batch deleted too: the folder's
    key prefix covers them (an `rm -rf` of a tree of attachments is one path to look at, not
    one per file). Notes stay, each one named as gone."""
    deleted = {p for change, p in changes if change == watchfiles.Change.deleted}
    return {
        (change, p)
        for change, p in changes
        if change != watchfiles.Change.deleted
        or p.lower().endswith(NOTE_SUFFIXES)
        or os.path.dirname(p) not in deleted
    }


def watch_step(debounce_ms: int) -> int:
    """How often (ms) the watch wakes to look for changes and the stop event: a batch is handed
    on once a step passes with no new change (at most ``debounce_ms`` after its first). Half the
    debounce, 10-250 ms: at the former 50 ms an idle daemon woke 20 times a second for this
    alone (6.7 at 150 ms for the default 300 ms debounce); a change waits <= 150 ms longer."""
    return max(10, min(debounce_ms // 2, 250))


class Watcher:
    """Watch the given folders until ``stop`` is set; call ``on_change`` after each debounced batch
    with its paths and those of them the batch only deleted (a rename's old name too)."""

    def __init__(
        self,
        paths: Sequence[Path],
        on_change: Callable[[set[str], frozenset[str]], None],
        stop: threading.Event,
        debounce_ms: int = 300,
        probe_timeout: float = 5.0,
        *,
        stat: Callable[[Path], os.stat_result] | None = None,
        walk: AskWalk | None = None,
        walk_timeout: float = 600.0,
        slow: Callable[[Path], bool] | None = None,
    ) -> None:
        self.paths = list(paths)
        self.on_change = on_change
        self.stop = stop
        self.debounce_ms = debounce_ms
        self.watching: list[Path] = []
        self.flat = False  # watching folder by folder (a name that does not decode was met)
        self.linked = False  # watching folder by folder (the tree holds a folder symlink)
        # Folders the last watch went around (an agent's folder whose inbox hangs), each with
        # the thread still in a call there: watched again once it answers.
        self.left_out: dict[Path, threading.Thread] = {}
        self.retry = RETRY
        self.probe_timeout = probe_timeout
        self._stuck = SharedProbes()  # a stat of a watched folder that still hangs
        # How a watched folder's stat is asked: the daemon's supervisor's (a hang marks the roots
        # in it hanging); by default bounded here alone.
        self._ask_stat = stat or (lambda p: bounded_stat(p, self.probe_timeout, self._stuck, "watch"))
        # How a watched folder is walked when a watch is set up, each call with a deadline: the
        # daemon's supervisor's (a hang marks the roots in it hanging); by default bounded here.
        self._walk_stuck: dict[Path, threading.Thread] = {}
        # Each folder whose walk answered late more than once in a row (a slow share, not a hung
        # one: left out again at each walk): how many times, and when the watch last started
        # again for it. The next start waits 5 s, 10 s, ... up to 5 min (at each answer it
        # started again, with a sweep of every root, and left it out again: a loop).
        self._late: dict[Path, tuple[int, float]] = {}
        # Whether a watched folder (or an agent's folder in one) is on a share learnt slow: the
        # daemon's supervisor's word, asked again each time it is said (a slow share may turn
        # hung). Such a watched folder (the vault) is walked on a thread of its own (``_Behind``)
        # while the watch of the others is set up without it: waited for in line, its walk held
        # every root's events, up to watch.scanTimeoutSeconds, at each set-up of the watch.
        self._slow: Callable[[Path], bool] = slow or (lambda _path: False)
        self._behind: dict[Path, _Behind] = {}
        # A watched folder whose watch was set up from such a walk's answer, which had ended
        # before (``_stale``): a folder made in between is in no folder-by-folder watch, so it
        # is walked again on a thread of its own once the watch runs (``_checks``), and the
        # watch starts again with what that walk found new (``_checked``).
        self._stale: set[Path] = set()
        self._checks: dict[Path, _Behind] = {}
        # What the last set-up left out, as said (``_say_left_out``): gone around, failed, behind.
        self._said: tuple[list[Path], list[Path], list[Path]] = ([], [], [])
        self._ask_walk: AskWalk = walk or (
            lambda p, fn: bounded_walk(p, fn, self.probe_timeout, self._walk_stuck, walk_timeout)
        )
        # New folders that restarted a folder-by-folder watch: looked at again once the next
        # watch is set up (files written into them before it existed got no event).
        self._recheck: set[str] = set()
        # A sweep of every root asked for once the next watch runs (what changed before it was
        # set up had no event).
        self._catch_up = False
        self._stuck_looks = SharedProbes()  # a look at a batch's paths that still hangs
        # A folder-by-folder watch's look at new paths, each call bounded on its own; the paths
        # (and the folders to walk) it has not answered yet, looked at again at the next turn.
        self._looks = _Looks(probe_timeout, stop)
        self._unlooked: set[str] = set()
        self._unwalked: set[str] = set()
        # Why file events were lost (``events_lost``): the watch is built again at its next turn.
        self._lost: str | None = None
        # Why the watch covers only part of the folders (the inotify limit used up), or None; told
        # to ``on_partial`` as it changes. The limit it was seen with: a watch is tried again once
        # it changes (the user raised it).
        self.partial: str | None = None
        self.on_partial: Callable[[str | None], None] = lambda _why: None
        # Why folders are left out of the watch (a call in them hangs), or None; told to
        # ``on_left_out`` as it changes: status says the watch is partial meanwhile.
        self.left_out_why: str | None = None
        self.on_left_out: Callable[[str | None], None] = lambda _why: None
        # Each watched folder the walk went around a folder in, with the folders in it that are
        # watched (its own folders but those left out and those holding one).
        self._around: dict[Path, list[Path]] = {}
        self._limit_seen: int | None = None
        self._probed = 0.0  # when the limit was last probed (monotonic)

    def covered(self) -> list[Path]:
        """The folders whose every change file events tell: none while the watch covers only
        part of them (those roots are polled, and a sweep's finds there are no lost events). A
        watched folder the walk went around a folder in (an agent's inbox that hangs) is not
        covered whole: only its folders that are watched are (the agents folder counted as
        covered said the left-out inbox had events, and took a sweep's finds there for lost
        ones)."""
        if self.partial is not None:
            return []
        around = self._around
        return [f for w in self.watching for f in around.get(w, [w])]

    def events_lost(self, why: str) -> None:
        """File events never came (a sweep found notes none told): the kernel's queue overflowed
        in a burst, and a folder made or renamed then got no watch, deaf for good. watchfiles
        drops notify's sign of it (a rescan event without a path), so the index loop tells. The
        watch is built again within a few seconds (``rust_timeout``) and a sweep of every root
        follows once it runs (what changed meanwhile had no event)."""
        self._lost = why

    def _stat(self, path: Path) -> os.stat_result | None:
        """A watched folder's stat with a deadline: None when it fails or hangs (a share that is
        down). A hung one is not asked again until its first call returns, and the events of the
        other folders go on meanwhile."""
        try:
            return self._ask_stat(path)
        except (OSError, NoAnswer):
            return None

    def _files_dropped(self, batch: set[tuple[watchfiles.Change, str]]) -> set[tuple[watchfiles.Change, str]]:
        """The batch without the added paths of other kinds of file that are no folder (asked in
        one call with a deadline: on a share that hangs the one watcher thread, which carries
        the inboxes' events too, must not wait; unanswered, they stay for the indexer's look)."""
        asked = [
            p
            for change, p in batch
            if change == watchfiles.Change.added
            and _other_kind(os.path.basename(p))
            and not any(obsidian_setting(p, root) for root in self.watching)  # saved by a rename
        ]
        if not asked:
            return batch
        try:
            folders = bounded_call(
                lambda: {p for p in asked if watch_walk._is_real_folder(p)},
                self.probe_timeout,
                self._stuck_looks,
                "added",
                "watch-added",
            )
        except NoAnswer:
            return batch
        files = set(asked) - folders
        return {(change, p) for change, p in batch if change != watchfiles.Change.added or p not in files}

    def run(self) -> None:
        failures = 0
        while not self.stop.is_set():
            existing = [p for p in self.paths if _is_folder(self._stat(p))]
            if not existing:
                self.stop.wait(_ABSENT_POLL_S)
                continue
            self.watching = existing
            try:
                self._watch(existing)
                failures = 0
            except (OSError, RuntimeError) as exc:  # watchfiles raises RuntimeError for backend errors
                if _UNDECODABLE in str(exc):
                    # Not a failure to back off from: watch around the name, sweep for what was missed.
                    log.warning(
                        "watcher_undecodable_path error=%s; watching folder by folder", printable(exc)
                    )
                    self.flat = True
                    # Swept once the folder-by-folder watch runs: asked now, the sweep could run
                    # before a note written while the folders were walked, which had no event.
                    self._catch_up = True
                    self.stop.wait(1.0)
                    continue
                failures += 1
                delay = self.retry.delay(failures)
                log.warning("watcher_retry paths=%s error=%s retry_in=%.0fs", existing, exc, delay)
                self.watching = []
                self.stop.wait(delay)

    def _identity(self) -> list[tuple[str, int, int] | None]:
        """(path, device, inode) of each watched folder: a recreated or remounted folder differs."""
        out: list[tuple[str, int, int] | None] = []
        for p in self.paths:
            st = self._stat(p)
            out.append((str(p), st.st_dev, st.st_ino) if st is not None and _is_folder(st) else None)
        return out

    def _watch(self, existing: list[Path]) -> None:
        # A recursive watch follows folder symlinks (notify sets watches through them, out of the
        # vault: `r -> /` meant thousands, /proc included) though their notes are never indexed:
        # with such a link inside, the watch goes folder by folder, links left out, until the
        # link is gone (asked again at every start of the watch).
        if self._lost is not None:
            log.warning("watch_restarted reason=events lost: %s", self._lost)
            self._lost = None
            self._catch_up = True
        walked, existing, linked = self._walked(existing)
        self.watching = existing
        linked = linked and len(walked) < MAX_FLAT_FOLDERS
        if linked and not self.linked and not self.left_out:
            log.info("watcher_flat reason=a folder symlink inside (never followed)")
        self.linked = linked
        flat = self.flat or linked
        # The walk leaves dot-folders out: Obsidian's settings are watched in their own folders
        # (a recursive watch covers them), or an edit of Excluded files waited for a full sweep.
        settings = settings_folders(existing) if flat else []
        folders = walked + settings if flat else existing
        known = {str(f) for f in folders}
        log.info(
            "watcher_started paths=%s%s",
            ",".join(map(str, existing)),
            f" folders={len(folders)} (one by one)" if flat else "",
        )
        identity = self._identity()
        checked = monotonic()
        first = True
        for batch in watchfiles.watch(
            *folders,
            recursive=not flat,
            watch_filter=NoteFilter(existing),
            debounce=self.debounce_ms,
            step=watch_step(self.debounce_ms),
            stop_event=self.stop,
            rust_timeout=5000,
            yield_on_timeout=True,
            raise_interrupt=False,
            ignore_permission_denied=True,
        ):
            # The first yield comes once this watch is set up: the folders that restarted it
            # are walked again, for what was written into them before (no event for that).
            again, self._recheck = self._recheck, set()
            if first:
                first = False
                self._check_limit(existing)
                self._start_checks(flat)
            if self._catch_up:
                self._catch_up = False
                self.on_change(set(), frozenset())
            changes: set[tuple[watchfiles.Change, str]] = set()
            if batch or again:
                changes = _covered(self._files_dropped(batch))
                log.debug("watcher_changes count=%d", len(changes))
                self.on_change({p for _, p in changes} | again, _gone(changes))
            # A turn without events too looks again at what the last look left unanswered.
            if flat and (batch or again or self._unlooked or self._unwalked):
                new = self._new_in(changes, known, again, existing)
                if new:
                    # A new folder, or one deleted and made again (its old watch died with it):
                    # watch it too (the walk of its event covers the notes there now).
                    self._recheck = new
                    return
            if self._lost is not None:
                return
            # inotify dies silently when a watched folder is deleted, recreated or remounted:
            # compare device and inode now and then and start a new watch (and a catch-up sweep).
            if monotonic() - checked < _IDENTITY_EVERY_S:
                continue
            checked = monotonic()
            if self._restarts(existing, identity, known, flat):
                return

    def _restarts(
        self, existing: list[Path], identity: list[tuple[str, int, int] | None], known: set[str], flat: bool
    ) -> bool:
        """Whether the running watch starts again now (said, with what it sweeps then): a watched
        folder replaced, folders made before it was set up from an earlier walk, a walk left out
        that answered, inotify watches to spare again. Probes for watches used up meanwhile."""
        if self._identity() != identity:
            log.info("watcher_restart reason=a watched folder was replaced, mounted or unmounted")
            self.on_change(set(), frozenset())
            return True
        made = self._checked(known) if flat else set()
        if made:
            log.info(
                "watcher_restart reason=%d folders made before the watch was set up from an earlier walk",
                len(made),
            )
            self._recheck = made  # told, and walked, once the next watch runs
            self._catch_up = True  # every root: each watch was down during the restart (below)
            return True
        answered = self._walk_answered()
        if answered:
            # Every root is swept once the next watch runs, not only the answered folder's: a
            # restart takes every watch down, and the next set-up adds the vault's tree before
            # the agents folder (seconds on a big local tree, minutes on a slow share), so a
            # note written into an inbox meanwhile has no event either.
            log.info("watcher_restart reason=%s", answered)
            self._catch_up = True
            return True
        if self.partial is not None and self._room_again(existing[0]):
            log.info("watcher_restart reason=inotify watches to spare again")
            self._catch_up = True  # what the polls have not found yet
            return True
        if self.partial is None and monotonic() - self._probed >= _ROOM_PROBE_S:
            # Watches used up after this watch was set up (other programs took them, or it
            # grew into new folders): a folder made from then on gets none, silently. Probed
            # once a minute; the roots are polled until there is room again.
            self._check_limit(existing)
        return False

    def _walked(self, existing: list[Path]) -> tuple[list[Path], list[Path], bool]:
        """The folders under the watched ones (``_walk``, each asked with a deadline per call):
        the folders found, the watched folders that answered, and whether a folder symlink was
        met. A watched folder whose walk does not answer (a share that hangs) is left out of
        this watch whole, never watched in part, and the others keep their events: the watch
        starts again once it answers (``_walk_answered``, or its stat's identity changes)."""
        walked: list[Path] = []
        answered: list[Path] = []
        linked = False
        self.left_out = {}
        self._walk_stuck = {p: t for p, t in self._walk_stuck.items() if t.is_alive()}
        self._stale = set()
        # A check of a folder not watched now ends with no use: dropped (one still in its call
        # for a folder walked now is taken as that folder's walk, ``_walk_of``).
        self._checks = {p: c for p, c in self._checks.items() if p in existing}
        partial: list[Path] = []  # the watched folders whose walk went around a folder in them
        behind: list[Path] = []  # on a slow share, walked on a thread of their own meanwhile
        for path in existing:
            limit = MAX_FLAT_FOLDERS - len(walked)
            left: dict[Path, threading.Thread] = {}
            try:
                got = self._walk_of(path, limit, left)
            except NoAnswer as exc:
                if exc.stuck is not None and exc.stuck.is_alive():
                    self._walk_stuck[path] = exc.stuck
                log.error(
                    "watcher_walk_hung path=%s error=%s: left out of the watch until it answers", path, exc
                )
                continue
            if got is None:
                behind.append(path)
                continue
            found, link = got
            self._walk_stuck.update(left)  # the watch starts again once one of them answers
            if left:
                partial.append(path)
                self.left_out.update(left)
            walked += found
            answered.append(path)
            linked = linked or link
        if partial and len(walked) >= MAX_FLAT_FOLDERS:
            # Too many folders to watch one by one, and a recursive watch would ask the folders
            # left out (and hang in them): the watched folders holding one wait whole, as before.
            log.error(
                "watcher_walk_hung paths=%s: a folder in them hangs and too many folders to watch "
                "one by one: left out of the watch until it answers",
                ",".join(map(str, partial)),
            )
            answered = [p for p in answered if p not in partial]
            walked = [f for f in walked if not any(f == p or f.is_relative_to(p) for p in partial)]
            self.left_out = {}
        for path in partial if self.left_out else ():
            log.warning(
                "watcher_partial path=%s left_out=%s: a folder in it hangs; the rest keeps its events",
                path,
                ",".join(str(f) for f in sorted(self.left_out) if f.is_relative_to(path)),
            )
        self._around = {p: _around(p, walked, list(self.left_out)) for p in partial if self.left_out}
        self._late = {p: v for p, v in self._late.items() if p in self._walk_stuck}  # walked: no longer late
        failed = [p for p in existing if p not in answered and p not in behind]
        self._said = (sorted(self.left_out), failed, behind)
        self._say_left_out(*self._said)
        if not answered:
            # Nothing to watch now: retried with backoff (the scheduled sweeps go on meanwhile).
            raise OSError(errno.ETIMEDOUT, "no watched folder answered its walk (hung share?)")
        return walked, answered, linked

    def _new_in(
        self,
        changes: set[tuple[watchfiles.Change, str]],
        known: set[str],
        again: set[str],
        existing: list[Path],
    ) -> set[str]:
        """The folders a folder-by-folder watch does not cover yet (``_new_folders``), looked at
        by a thread of their own (``_Looks``): each stat and listing is waited for on its own,
        up to the probe timeout, not their sum (a large batch on a quick share, or a slow share,
        answers). What is not answered yet (a call that hangs, or still under way) is looked at
        again at the next turn of the watch, and its answer, come meanwhile, used then: only those
        paths are kept, never told to the index again (they were told once); a new folder of a
        slow share is watched a turn later."""
        asked = {p for change, p in changes if p not in known or change == watchfiles.Change.added}
        asked |= self._unlooked
        walks = set(again) | self._unwalked if len(known) < MAX_FLAT_FOLDERS else set()
        walks = {p for p in walks if not _in_settings(p, existing)}
        keys = [("real", p) for p in sorted(asked)] + [("walk", p) for p in sorted(walks)]
        got = self._looks.ask(keys) if keys else {}
        new = {p for p in asked if got.get(("real", p)) is True}
        for p in walks:
            under = got.get(("walk", p))
            if isinstance(under, list):
                new.update(f for f in under if f not in known)
        unlooked = {p for p in asked if ("real", p) not in got}
        unwalked = {p for p in walks if ("walk", p) not in got}
        if (unlooked - self._unlooked) or (unwalked - self._unwalked):  # said once, not at each turn
            log.warning(
                "watcher_look_hung what=new folders call=%s count=%d: looked at again at the next turn",
                self._looks.waiting_on(),
                len(unlooked) + len(unwalked),
            )
        self._unlooked, self._unwalked = unlooked, unwalked
        if any(_in_settings(p, existing) for p in {p for _, p in changes} | again):
            # A folder of the settings made (a link to one too), or made inside one while the
            # watch restarted: watched from the next watch on.
            new |= {str(f) for f in settings_folders(existing)} - known
        return new

    def _walk_of(self, path: Path, limit: int, left: dict[Path, threading.Thread]) -> Walked | None:
        """The walk of the watched folder ``path`` for this set-up of the watch: asked now, or the
        answer of its walk on a thread of its own (``_Behind``) that ended since the last set-up;
        None while a folder on a share learnt slow is walked so (it is left out of this watch,
        and the watch starts again once that walk answered: ``_walk_answered``). Raises NoAnswer
        (OSError) as the walk does."""
        ready = self._behind.pop(path, None)
        check = self._checks.pop(path, None)
        if ready is None and check is not None and (self._slow(path) or not check.thread.is_alive()):
            ready = check  # the walk of it under way, or just ended: no second walk beside it
        if ready is not None and not ready.thread.is_alive():
            left.update(ready.left)
            if ready.error is not None:
                raise ready.error
            # Walked before this set-up: a folder made since is walked for once the watch runs.
            self._stale.add(path)
            return ready.answer
        if ready is None and not self._slow(path):
            return self._ask_walk(path, functools.partial(_walk_noting, path, limit, left))
        if ready is None:
            ready = _Behind(self._ask_walk, path, limit)
            log.warning(
                "watcher_walk_behind path=%s: a slow share, walked on a thread of its own; the other "
                "folders keep their events meanwhile",
                path,
            )
        self._behind[path] = ready
        self._walk_stuck[path] = ready.thread  # the watch starts again once it answers
        return None

    def _say_left_out(self, around: list[Path], failed: list[Path], behind: Sequence[Path] = ()) -> None:
        """Tell ``on_left_out`` why folders are left out of the watch, as it changes: ``around``,
        the folders a walk went around (a call there did not answer in time), ``failed``, the
        watched folders whose walk did not answer, and ``behind``, those on a share learnt slow
        whose walk runs on a thread of its own. Slow and hung are said apart: a slow share said
        "hangs (hung share?)" sent the user looking for an outage that was none. A folder is said
        slow only while its calls answer: one gone around on a share the supervisor holds slow
        now, or one walked behind; a walk that failed, or a share once late that hangs now, or
        one the supervisor has since marked hanging (no longer slow), is said to hang."""
        slow = [p for p in around if self._slow(p)] + [p for p in behind if self._slow(p)]
        hung = [p for p in [*around, *failed, *behind] if p not in slow]
        parts = []
        if hung:
            parts.append(
                "file events do not cover "
                + ", ".join(map(str, hung))
                + ": a call there hangs (hung share?); their notes are found by the sweeps meanwhile, "
                "the other folders keep their events, and the watch takes them in again once it answers"
            )
        if slow:
            parts.append(
                "file events do not cover "
                + ", ".join(map(str, slow))
                + " yet: a slow share, not a hung one (its calls answer, later than "
                "watch.probeTimeoutSeconds); their notes are found by the sweeps meanwhile, the other "
                "folders keep their events, and the watch takes them in once their walk has answered"
            )
        why = "; ".join(parts) or None
        if why != self.left_out_why:
            self.left_out_why = why
            self.on_left_out(why)

    def _walk_answered(self) -> str | None:
        """Whether a walk given up on (its folder left out of the watch) has answered since: why
        the watch starts again, or None. A
        walk on a thread of its own (``_Behind``) that ended in an error answered nothing: its
        folder is said to hang from then on, and the watch starts again only once the call it
        hangs in answers (no restart, no sweep now: the watch is the same as before)."""
        now = monotonic()
        due: str | None = None
        for p in [p for p, t in self._walk_stuck.items() if not t.is_alive()]:
            ended = self._behind.get(p)
            if ended is not None and ended.thread is self._walk_stuck[p] and ended.error is not None:
                self._behind_failed(p, ended)
                continue
            times, last = self._late.get(p, (0, 0.0))
            if times and now - last < min(_LATE_CAP_S, _LATE_BASE_S * 2 ** (times - 1)):
                continue  # answered late again: the watch starts again for it later, not at once
            if ended is not None and ended.thread is self._walk_stuck.get(p):
                due = "the walk of a folder on a slow share, on a thread of its own, answered"
            else:
                due = due or "a watched folder whose walk hung answers again"
            del self._walk_stuck[p]
            self._late[p] = (times + 1, now)
        return due

    def _start_checks(self, flat: bool) -> None:
        """Once a watch runs: each watched folder it was set up for from an earlier walk's answer
        (``_stale``) is walked again on a thread of its own, for the folders made between that
        walk and this watch (no event told them). Only a folder-by-folder watch needs it: a
        recursive one covers every folder under its watched folders."""
        stale, self._stale = self._stale, set()
        for path in sorted(stale) if flat else ():
            self._checks[path] = _Behind(self._ask_walk, path, MAX_FLAT_FOLDERS)

    def _checked(self, known: set[str]) -> set[str]:
        """The folders the checks that ended found and this watch does not cover (``known``):
        made after the walk the watch was set up from. That check's answer is the next set-up's
        walk of its folder (``_behind``: not walked a third time). A check that failed changes
        nothing: the watch stays, and the supervisor has said the share hangs."""
        made: set[str] = set()
        for path, check in list(self._checks.items()):
            if check.thread.is_alive():
                continue
            del self._checks[path]
            if check.error is not None or check.answer is None:
                log.warning(
                    "watcher_check_failed path=%s error=%s: the watch stays as it is", path, check.error
                )
                continue
            new = {str(f) for f in check.answer[0]} - known
            if new:
                self._behind[path] = check
                made |= new
        return made

    def _behind_failed(self, path: Path, ended: _Behind) -> None:
        """A walk on a thread of its own that ended in an error: its folder hangs (or fails), so
        it is said so now, not slow, and waited for as an inline walk that hung is."""
        del self._behind[path]
        stuck = getattr(ended.error, "stuck", None)
        if isinstance(stuck, threading.Thread) and stuck.is_alive():
            self._walk_stuck[path] = stuck  # the watch starts again once that call answers
        else:
            del self._walk_stuck[path]
        log.error(
            "watcher_walk_hung path=%s error=%s: its walk on a thread of its own failed; left out of "
            "the watch until it answers",
            path,
            ended.error,
        )
        around, failed, behind = self._said
        self._said = (around, [*failed, path], [p for p in behind if p != path])
        self._say_left_out(*self._said)

    def _room_again(self, path: Path) -> bool:
        """While the limit is used up: whether a new watch may cover every folder now, because the
        limit changed (asked every few seconds) or watches were given back (another program
        ended; probed once a minute: each try builds the whole watch again)."""
        if watch_limit() != self._limit_seen:
            return True
        now = monotonic()
        if now - self._probed < _ROOM_PROBE_S:
            return False
        self._probed = now
        return not watches_used_up(path)

    def _check_limit(self, existing: list[Path]) -> None:
        """Whether the watch just set up ran out of inotify watches; said as it changes."""
        limit = self._limit_seen = watch_limit()
        self._probed = monotonic()
        why = None
        if watches_used_up(existing[0]):
            shown = f"{limit:,}" if limit is not None else "its"
            # Used up by this watch or by other programs (editors, sync clients): either way a
            # folder beyond the limit, or one made from now on, gets no file events.
            why = (
                f"file events may not cover every watched folder: the system's limit of {shown} "
                "inotify watches (fs.inotify.max_user_watches) is used up, by this watch or other "
                "programs; these roots are polled meanwhile. Raise it: sudo sysctl "
                "fs.inotify.max_user_watches=524288 (and put the same line in "
                "/etc/sysctl.d/90-inotify.conf); the watch starts again by itself once watches are free"
            )
        if why == self.partial:
            return
        if why is not None:
            log.warning("watcher_limit_reached limit=%s paths=%s", limit, ",".join(map(str, existing)))
        else:
            log.info("watcher_limit_ok (every folder is watched again)")
        self.partial = why
        self.on_partial(why)


def _gone(changes: set[tuple[watchfiles.Change, str]]) -> frozenset[str]:
    """Paths the batch deleted and did not write again (an editor's save that replaces the file
    reports deleted and added: not gone). The batch is a set, so order cannot tell."""
    deleted = {p for change, p in changes if change == watchfiles.Change.deleted}
    return frozenset(deleted - {p for change, p in changes if change != watchfiles.Change.deleted})


def _is_folder(st: os.stat_result | None) -> bool:
    return st is not None and stat.S_ISDIR(st.st_mode)
