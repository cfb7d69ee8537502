"""Files -> chunks -> stores: the write path's one entry, driven by one thread.

A sweep asks the change finder what changed (a full listing of the roots, or only the paths of
file events), deletes what is gone and indexes the rest in batches through the write protocol
(manifest marks ``indexing``, BM25 commits, then the manifest records ``indexed``); a crash at
any point is redone by the next start. Memory writes index their note synchronously, vectors
included. The first sweep of a start checks BM25 against the manifest and resolves every link.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sidecar.config import Config
from sidecar.contracts.errors import SidecarError, StorageError, UnreadableError
from sidecar.contracts.printable import few_names
from sidecar.contracts.wire import memory_agent
from sidecar.index.diff import ChangeFinder, Diff, kept_by
from sidecar.index.linkreread import LinkReread
from sidecar.index.moves import ctime_is_evidence, unchanged_move
from sidecar.index.problems import Problems
from sidecar.index.records import Drafted, Prepared, as_held, draft, finish, unread
from sidecar.index.refused import log_refused, rebuild_said
from sidecar.index.repair import check_bm25, refill_new_bm25, remove_idle_inboxes
from sidecar.index.summary import ActivitySummary
from sidecar.index.upgrade import upgrade_bm25
from sidecar.index.vectoring import Stores, Vectoring
from sidecar.index.writes import Writer
from sidecar.model.embedder import EmbedderSlot, approx_token_count
from sidecar.notes.chunking import (
    CHUNKER_VERSION,
    DRAWING_READER_VERSION,
    LINK_ALIAS_READER_VERSION,
    PROPERTY_NAME_READER_VERSION,
)
from sidecar.notes.links import written_links
from sidecar.runtime.foreground import FOREGROUND
from sidecar.runtime.pace import SWEEP, Pace
from sidecar.runtime.release import WRITERS_META, record_writer
from sidecar.stores.manifest import FileState
from sidecar.stores.vectors import holds_model, table_prefix
from sidecar.vault.canvas import CANVAS_READER_VERSION, CANVAS_SUFFIX
from sidecar.vault.dailynotes import DailyNoteFormats
from sidecar.vault.ignore import IgnoreRules
from sidecar.vault.sources import (
    NoteFile,
    Root,
    inbox_refusal,
    inbox_root,
    inboxes_in_use,
    path_for_key,
    stamp_ns,
    vault_roots,
)
from sidecar.vault.supervisor import RootUnreachable, Supervisor
from sidecar.vault.timeout import NoAnswer, run_with_timeout
from sidecar.vault.weekstart import WeekStart

log = logging.getLogger(__name__)

# The manifest's meta row holding Obsidian's Excluded files as last read (``IgnoreRules.kept``).
_OBSIDIAN_RULES = "obsidian_rules"

# How long chunking waits for the model's tokenizer, once (a first start's conversion publishes it
# in about a second; a model that is slow to come is not waited for twice).
TOKENIZER_WAIT_S = 60.0
# A sweep's pace is taken over this many batches of index.batchFiles notes (a few minutes' worth
# on a busy host: the pace of a folder of long notes does not stand for the vault).
SWEEP_PACE_BATCHES = 32


@dataclass
class Activity:
    """What the indexer is doing now, for health and progress bars."""

    phase: str = "starting"  # starting | scanning | indexing | embedding | idle
    done: int = 0
    total: int = 0
    started: float = field(default_factory=time.time)
    sweeps: int = 0
    first_sweep_done: bool = False
    ready_once: bool = False
    scan_skipped: dict[str, int] = field(default_factory=dict)
    excluded: dict[str, int] = field(default_factory=dict)  # rule -> notes it leaves out
    # Notes this sweep found deleted or moved away, still indexed until its new notes are in, by
    # source (``vault``, ``wiki``, ``memory``).
    leaving: dict[str, int] = field(default_factory=dict)
    # Notes of this sweep read only to be cut again, their files unchanged (``Diff.recut``).
    recut: int = 0
    # Notes of this sweep's batches not read: their root went offline (a hung share) or their
    # read failed. Counted in ``done`` (their batch is), not in ``notes_read``.
    not_read: int = 0
    # Since when notes wait to be cut for the model's tokenizer (loaded or converted on a first
    # start; at most TOKENIZER_WAIT_S), else None: status says why "indexing 0/3" stands still.
    tokenizer_wait_since: float | None = None
    # Notes written per second over the sweep's last batches: status' estimate of its time left.
    pace: Pace = field(default_factory=lambda: Pace(SWEEP_PACE_BATCHES, SWEEP))
    clock: Callable[[], float] = field(default=time.monotonic, repr=False)  # the pace's; tests pin it
    _step_at: float = 0.0  # when the last batch was counted

    def begin(self) -> None:
        """A sweep begins: counts and pace from nothing."""
        self.phase, self.done, self.total, self.started = "scanning", 0, 0, time.time()
        self.leaving, self.recut, self.not_read = {}, 0, 0
        self.pace.clear()

    def indexing(self, total: int) -> None:
        """Its changes found: ``total`` to write, the pace counted from now."""
        self.phase, self.total = "indexing", total
        self._step_at = self.clock()

    def notes_read(self) -> int:
        """This sweep's notes done and read (``done`` without ``not_read``): a search's "N of M
        notes read so far" on a first index (it said "926 of 926" with 319 behind a hung note)."""
        return max(self.done - self.not_read, 0)

    def written(self, notes: int) -> None:
        """A batch of ``notes`` written: counted, with its time into the pace."""
        now = self.clock()
        self.done += notes
        self.pace.add(notes, now - self._step_at)
        self._step_at = now


class Indexer:
    """Owns the write path. One thread calls sweep/index/delete; another may embed pending vectors."""

    def __init__(
        self,
        cfg: Config,
        stores: Stores,
        slot: EmbedderSlot,
        *,
        vectors: Vectoring,
        supervisor: Supervisor,
        problems: Problems,
    ) -> None:
        self.cfg = cfg
        self.stores = stores
        self.manifest = stores.manifest
        self.slot = slot
        self.activity = Activity()
        # Whether a full sweep has ever completed into this index (kept across restarts): a
        # restart's first sweep only catches up, every note read before is found meanwhile.
        swept = self.manifest.get_meta("swept")
        if swept is None:
            # No row: a new index ("" marks it, until its first whole sweep), or one made before
            # the row existed, which holds what its sweeps read (read as new, it said "still being
            # built" for as long as a root stayed offline or held: hours after an upgrade).
            swept = "1" if self.manifest.indexed_chunk_count() else ""
            self.manifest.set_meta("swept", swept)
        self._swept = swept == "1"
        # Whether this process checked the row mark against the rows (``_rows_renumbered``):
        # done before it moves the mark, or its own deletes at start hid another release's.
        self._rows_checked = False
        self._read_whole: set[str] = set()  # roots read to the end while not ``_swept``
        self.vectors = vectors
        self.supervisor = supervisor
        self.leftover: frozenset[str] | None = None  # paths a failed sweep scanned but did not write
        self._gone_left: list[str] = []  # keys a failed sweep could not delete
        # A rebuild's copy of the notes indexed before it (``Manifest.set_aside``), put back for
        # those it did not read once its first full sweep ends; then the keys put back, until read.
        self._aside = self.manifest.has_aside()
        # Kept in the manifest too: a restart lost them, and with them "rebuild not finished".
        self._put_back: set[str] = set(json.loads(self.manifest.get_meta(_PUT_BACK) or "[]"))
        # ``_put_back`` changed since its row was written (``_keep_put_back``); the lock: a
        # memory write reads one back from a request's thread while a sweep reads others.
        self._put_back_unsaved = False
        self._put_back_lock = threading.RLock()
        self.ignore = IgnoreRules(
            cfg.index.exclude,
            cfg.vault.path,
            cfg.index.obsidian_excludes,
            templates=cfg.index.obsidian_templates,
        )
        # Obsidian's rules as a run before read them: in force at a start while their file is
        # missing (``IgnoreRules.resume``), and written again whenever what is read changes.
        self._rules_kept = self.manifest.get_meta(_OBSIDIAN_RULES)
        self._ignore_stuck: threading.Thread | None = None  # a read of Obsidian's settings that hangs
        self.daily_formats = DailyNoteFormats(cfg.vault.path)
        with contextlib.suppress(ValueError, AttributeError):
            kept = json.loads(self._rules_kept or "{}")
            self.ignore.resume(kept)
            # The daily-note formats as well: a start while the share is away dates notes by them.
            if kept.get("vault") == str(cfg.vault.path):
                self.daily_formats.resume(kept.get("daily_notes"))
                self.manifest.day_formats = self.daily_formats.formats()
        self.week_start = WeekStart(
            cfg.vault.path, cfg.system_locale
        )  # time phrases' weeks (Calendar plugin)
        self.problems = problems
        self.changes = ChangeFinder(cfg, stores.manifest, supervisor, problems, self.excluded_by)
        self.writer = Writer(stores, vectors, cfg.vault.wiki_subfolder, self.excluded_by, self.file_exists)
        self.links = LinkReread(self.manifest, self.writer, cfg.index.max_file_bytes)
        # The moved notes of the batch being written that are not read again (``_held_moves``).
        self._held: dict[str, Prepared] = {}
        # Paths saved while a long sweep runs, and where to give back those it cannot take (set
        # by the index loop; see ``_index_hot``).
        self.hot_paths: Callable[[], frozenset[str]] | None = None
        self.hot_back: Callable[[set[str]], None] | None = None
        self._deferred: set[str] = set()
        self._hot_written: set[str] = set()  # keys written from file events during this sweep
        # Excluded notes recorded from file events during this sweep (``Diff.excluded``): newer
        # than its listing, which would otherwise drop a note made meanwhile as a link target.
        self._hot_excluded: dict[str, dict[str, str]] = {}
        # What each note of a batch cost to read, cut and write, by path (set by the index loop:
        # a note that is costly to index waits before it is indexed again).
        # Told with them: path -> (key, chunks the write added) of the notes written.
        self.on_indexed: Callable[[dict[str, float], dict[str, tuple[str, int]]], None] | None = None
        self.on_cleared: Callable[[], None] | None = None  # told of a rebuild's ``clear``
        self.summary = ActivitySummary()
        # The keys a sweep's batches wrote (``index_files`` adds them on the sweep's own thread;
        # a memory write indexed meanwhile on another thread is none of that sweep's).
        self._wrote = threading.local()
        # The notes the last sweep found new or changed by listing a local root whole, with
        # their mtime: what the file events should have told (``IndexLoop``'s check for lost events).
        self.found_by_listing: list[tuple[str, int]] = []
        self._waited_for_tokenizer = False
        self._tokenizer_wait = 0.0  # seconds the one wait for the model's tokenizer took

    def set_excludes(self, patterns: Sequence[str], obsidian: bool, templates: bool = True) -> str | None:
        """New exclusion rules (config reload): the keys that changed ("index.exclude",
        "index.obsidianExcludes", "index.obsidianTemplates", or Obsidian's "Excluded files", read
        again now: an edit there waited for a full sweep), comma-separated, else None."""
        was = (self.ignore.patterns, self.ignore.obsidian, self.ignore.templates)
        now = (tuple(patterns), obsidian, templates)
        if now == was:
            before = self.ignore.rules()
            self._refresh_ignore()  # with the probe timeout, as a sweep reads them: a share may hang
            return "Obsidian excluded files" if self.ignore.rules() != before else None
        rules = IgnoreRules(patterns, self.cfg.vault.path, obsidian, self.ignore.clock, templates)
        rules.carry_over(self.ignore)
        self.ignore = rules
        self.problems.clear("obsidian_settings")  # said again by the read below if still true
        # Obsidian's settings read anew now, not at the next sweep: rules turned on by the reload
        # (or an app.json edited with it) are in force when the removal that follows asks them.
        self._refresh_ignore()
        keys = ("index.exclude", "index.obsidianExcludes", "index.obsidianTemplates")
        return ",".join(k for k, a, b in zip(keys, was, now, strict=True) if a != b)

    def remove_excluded_at_start(self) -> int:
        """At a start: Obsidian's settings read (an edit made while the daemon was stopped: the
        rules a run before kept are in force until then), and the notes every rule leaves out
        removed before the first sweep writes. How many notes."""
        self._refresh_ignore()  # with the probe timeout: a share may hang
        return self.remove_excluded()

    def reread_obsidian_rules(self) -> int:
        """Obsidian's settings changed (a file event): read them now and remove the notes they
        newly leave out, as a reload does. Read only when a sweep started, a folder excluded in
        Obsidian during a long sweep was written by it and searchable for up to two sweeps. How
        many notes left."""
        rules = self.ignore
        if self.set_excludes(rules.patterns, rules.obsidian, rules.templates) is None:
            return 0
        return self.remove_excluded()

    def remove_excluded(self) -> int:
        """Remove from every store the notes the rules leave out now (a reload changed them), at
        once: left to the sweep the reload asks for, a private folder excluded during a long sweep
        stayed searchable until that sweep had ended and the next one ran. Every batch asks the
        rules while it holds the write lock (``Writer``): once the lock was free after the change,
        a batch that asked before is committed (and listed here), any later one leaves the notes
        out. How many notes."""
        with self.stores.write_lock:
            pass  # not held while every key is matched (seconds in a large vault)
        keys = [
            k
            for prefix in ("vault/", "wiki/")
            for k in self.manifest.file_states(prefix)
            if self.excluded_by(k) is not None
        ]
        try:
            self.delete(keys)
        except Exception as exc:  # said in status until a full sweep (or a removal) takes them out
            self.problems.report(
                "exclusions",
                f"{len(keys)} notes the rules now leave out could not be removed from the index yet "
                f"({exc}); the next sweep removes them, until then search may still find them",
            )
            raise
        self.problems.clear("exclusions")
        if keys:
            log.info("excluded_notes_removed count=%d", len(keys))
        return len(keys)

    def file_exists(self, key: str, rel: str | None) -> bool:
        """Whether the file of the note ``key`` (``rel``: the file name the index recorded) is
        there, by the rules a get reads it by."""
        try:
            return path_for_key(self.cfg, key, rel)[1].is_file()
        except (SidecarError, ValueError, OSError):
            return False

    def excluded_by(self, key: str) -> str | None:
        """The rule that leaves this note out of the index, or None."""
        return self.ignore.match_key(key, self.cfg.vault.wiki_subfolder)

    def _count_tokens(self, texts: Sequence[str]) -> list[int]:
        count = self.slot.counter()
        if count is None and not self._waited_for_tokenizer:
            # Once: a tokenizer that does not come within the bound is not waited for again
            # (sizes are then estimated, as without a model).
            started = time.perf_counter()
            self.activity.tokenizer_wait_since = time.time()
            try:
                self.slot.wait_countable(TOKENIZER_WAIT_S)
            finally:
                self.activity.tokenizer_wait_since = None
            self._waited_for_tokenizer = True
            self._tokenizer_wait = time.perf_counter() - started
            count = self.slot.counter()  # None: loading failed or is still under way
        return count(texts) if count is not None else approx_token_count(texts)

    def sweep(
        self,
        only: Collection[str] | None = None,
        progress: Callable[[Activity], None] | None = None,
        stop: threading.Event | None = None,
        confirm_deletions: Collection[str] = (),
        paths: Collection[str] = (),
        *,
        retry_all: bool = False,
    ) -> dict[str, int]:
        """Compare roots (all, or those named in ``only``) with the manifest; index what changed,
        remove what is gone. ``paths`` (from file events) are looked at one by one, without walking
        their roots. ``confirm_deletions`` names roots whose mass deletion the user confirmed.
        ``retry_all``: notes whose read failed are read now, not at their turn (`sidecar index`)."""
        self._before_sweep()
        act = self.activity
        act.begin()
        if not act.first_sweep_done:
            upgrade_bm25(self.stores, stop)  # an older layout's index answers meanwhile
            refill_new_bm25(self.stores, stop)
        self.stores.bm25.close_idle()  # the inboxes a person's search kept open, once it is a while ago
        remove_idle_inboxes(self.stores, self.cfg.memory.index_idle_days)
        # A removal of excluded notes failing after this sweep read its rules stays said.
        diff, mark = Diff(), self.problems.mark()
        self._hot_excluded, self.writer.left_out = {}, {}
        self.writer.defer_links = not act.first_sweep_done
        excluded: dict[str, int] = {}
        every = self.changes.roots()
        names = {r.name for r in every}
        self.supervisor.keep_memory_roots(names)  # inboxes emptied or removed meanwhile
        chosen = [r for r in every if only is None or r.name in only]
        listed = list(chosen)  # walked whole (the roots of ``paths`` are only looked at there)
        if paths:
            rest = [r for r in every if r not in chosen]
            chosen += [r for r in self.changes.diff_paths(paths, rest, diff) if r not in chosen]
        self.supervisor.classify(chosen)
        if only is None:
            self.changes.keep_roots(names)
        if not paths:  # Obsidian's settings are read on full sweeps: a memory write touches no vault file
            self._refresh_ignore()
        self.changes.diff_roots(chosen, diff, confirm_deletions, excluded, retry_all=retry_all)
        self._say_skipped()
        if only is None:
            act.excluded = excluded
        if diff.stamps:
            self.manifest.stamp(diff.stamps)
        self._forget_linked(diff.linked)
        # A moved note is one change (its new key read, its old one removed with it), not two.
        moves = _moves_applied(diff)
        act.indexing(len(diff.work) + len(diff.gone) - len(moves))
        act.leaving, act.recut = {}, diff.recut
        self.found_by_listing = self._found_by_listing(diff, listed)
        changed, wrote = self._apply(diff, moves, every if not paths else None, progress, stop)
        self._retire_emptied(diff.gone, names)
        self._record_excluded(diff, every, mark if only is None and not paths else None)
        if not act.first_sweep_done:
            self._first_sweep_ends(only is None and not paths, stop)
        act.sweeps += 1
        act.first_sweep_done = act.first_sweep_done or only is None or bool(chosen)
        if not self._swept:
            self._count_read_whole(listed, names, stop)
        act.phase = "idle"
        self._after_sweep(None if only is None and not paths else diff)
        return self._sweep_done(diff, changed, wrote, chosen, bool(paths))

    def _before_sweep(self) -> None:
        self._rows_renumbered()  # before this process writes a row
        if self._gone_left:  # a failed sweep's deletions (disk full): raises again until they go
            self.delete(self._gone_left)
            self._gone_left = []

    def _after_sweep(self, batch: Diff | None) -> None:
        """What status says of notes a rebuild put back; after a whole sweep (``batch`` None),
        the latest note row written, recorded."""
        self._say_put_back(batch)
        if batch is None:
            self._whole_sweep_written()
        else:  # a note written anew from a file event takes a new row: the mark's may be gone
            self._row_mark_kept()

    def _say_skipped(self) -> None:
        """The files this sweep left out, by reason, for status; a folder whose notes' paths
        grew too long named in a PROBLEM."""
        self.activity.scan_skipped = self.changes.skip_counts()
        self.changes.say_too_long()

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
        for key, rel, failed in candidates:
            name = key.rsplit("/", 1)[0] if key.startswith("memory/") else key.split("/", 1)[0]
            memory = name.startswith("memory/")
            root = inbox_root(self.cfg, name.split("/", 1)[1]) if memory else configured.get(name)
            if root is None or self.excluded_by(key) is not None:
                continue
            held = name in unjudged or (memory and "memory" in unjudged)
            if memory and not held:
                # Not put back: a refused inbox is neither read nor served (a sweep drops its
                # notes); put back, its notes were served and said "not read back" until the next
                # sweep removed them. Said in the log (one line per refused folder, as a sweep's
                # inbox_refused_dropped); status names the inbox as skipped.
                if name not in refused:
                    refused[name] = inbox_refusal(root)
                if refused[name] is not None:
                    dropped[name] = (root.agent, dropped.get(name, ("", 0))[1] + 1)
                    continue
            if failed or held or kept_by(key, unread_keys) or not _gone(root.path / rel):
                out.append(key)
        said = {name.split("/", 1)[1]: why for name, why in refused.items() if why is not None}
        log_refused("rebuild_inbox_refused", self.cfg.agents_dir, said)  # one line per refused folder
        if dropped:  # they left the index: counted as a sweep counts the notes it drops
            for name, (agent, n) in dropped.items():
                self.changes.refused.listed(name, agent, refused[name], n)
            self.changes.refused.tell()
            self.changes.refused.save()
        return out

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

    def _sweep_done(
        self, diff: Diff, changed: int, wrote: Sequence[str], chosen: list[Root], paths: bool
    ) -> dict[str, int]:
        """The sweep's counts, logged; the read retries kept for a restart."""
        self.changes.save_retries()
        summary = {
            "changed": changed,
            "deleted": len(diff.gone),
            "unchanged": diff.unchanged,
            "skipped": sum(diff.skipped.values()),
        }
        seconds = time.time() - self.activity.started
        # File events that only wrote notes are summed into one line a minute (``index_activity``);
        # a walk of a root, a deletion or a skip keeps its own line.
        quiet = paths and not chosen and not diff.gone and not diff.skipped
        if quiet and changed:
            # The notes written, not every note looked at (``notes`` exceeded ``changes``).
            self.summary.add(changed, wrote, seconds)
        log.log(
            logging.INFO if not quiet and (chosen or changed or diff.gone) else logging.DEBUG,
            "sweep_done changed=%d deleted=%d unchanged=%d skipped=%d seconds=%.2f roots=%s moved=%d",
            *summary.values(),
            seconds,
            ",".join(r.name for r in chosen) or "-",
            len(diff.moves),
        )
        return summary

    def _found_by_listing(self, diff: Diff, listed: list[Root]) -> list[tuple[str, int]]:
        """The notes to index that a listing of a local root found (a share's own edits have no event)."""
        return [
            (str(n.path), n.mtime_ns)
            for n in diff.work
            if n.root in listed and not self.supervisor.status(n.root).network
        ]

    def _apply(
        self,
        diff: Diff,
        moves: dict[str, str],
        every: Sequence[Root] | None,
        progress: Callable[[Activity], None] | None,
        stop: threading.Event | None,
    ) -> tuple[int, list[str]]:
        """Write a sweep's changes batch by batch (``every``: the roots, when notes saved meanwhile
        are taken between batches), then its deletions; how many notes were written, and their
        keys. ``moves``: new
        key -> old key of the notes moved (``_moves_applied``): each old entry leaves as soon as its
        new one is written."""
        act = self.activity
        self.leftover = None
        changed = 0
        wrote: list[str] = []
        batch = self.cfg.index.batch_files
        gone = list(diff.gone)
        # Moved notes whose new key an earlier sweep wrote already: nothing to wait for.
        waiting = [k for k in gone if k in diff.moves and diff.moves[k] not in moves]
        if waiting:
            indexed = self.manifest.file_states_of([diff.moves[k] for k in waiting])
            before = [k for k in waiting if (st := indexed.get(diff.moves[k])) and st.state == "indexed"]
            self._delete_moved(before, gone)
            act.done += len(before)
        for start in range(0, len(diff.work), batch):
            if stop is not None and stop.is_set():
                break
            part = diff.work[start : start + batch]
            try:
                changed += self._write_batch(part, moves, wrote)
                # Deletions after the new notes (deleted first, 6,668 moved notes were missing for
                # up to 28 s), but a moved note's old entry with its new one, not at the end.
                self._delete_moved(self._moved_written(part, moves), gone)
            except BaseException:
                # Scanned, not written (disk full ...): a retry needs only these paths, not a walk.
                left = {str(n.path) for n in diff.work[start:]}
                # Moved notes whose new entry is not written keep their old one (removed, they were
                # found under neither path until the retry): the retry looks at both paths again.
                unwritten = set(moves.values()) & set(gone)
                roots = every or self.changes.roots()
                if unwritten:
                    left |= self._paths_of(sorted(unwritten), roots)
                try:  # gone notes leave now if they can
                    self.delete([k for k in self._still_gone(gone) if k not in unwritten])
                except Exception:
                    # ... else first thing in the retry (a deletion needs disk too: left to the
                    # next full sweep, a deleted or newly excluded note was found for up to
                    # index.rescanMinutes), whose look at their paths reads a note back meanwhile.
                    self._gone_left = [k for k in self._still_gone(gone) if k not in unwritten]
                    left |= self._paths_of(gone, roots)
                self.leftover = frozenset(left)
                raise
            act.written(len(part))
            if progress is not None:
                progress(act)
            if every is not None:
                self._index_hot(stop)
        # The rest of the deletions after the new notes: a note deleted, and a move whose new
        # note was not written (unreadable, a share that hangs) leaves with the sweep as before;
        # not when the sweep was stopped before its batch: that note would be found under neither
        # path until the next sweep (which finds the move again).
        if gone:
            doomed = self._still_gone(gone)
            if stop is not None and stop.is_set():
                unwritten = set(moves.values())
                doomed = [k for k in doomed if k not in unwritten]
            self.delete(doomed)
            act.done = min(act.total, act.done + len(gone))
        act.leaving = {}
        if self._deferred and self.hot_back is not None:
            self.hot_back(set(self._deferred))  # looked at again after this sweep, with their roots
        self._deferred.clear()
        self._hot_written.clear()
        act.scan_skipped = self.changes.skip_counts()  # with the notes whose read failed now
        return changed, wrote

    def _write_batch(
        self, part: Sequence[NoteFile], moves: dict[str, str], wrote: list[str] | None = None
    ) -> int:
        """``index_files`` of a sweep's batch: each moved note's old entry leaves every answer in
        the transaction that records its new one (status counted both, answers found both, until
        its removal), not one a note saved again meanwhile wrote back (a move undone between
        batches). ``wrote`` gets the keys of the notes written."""
        self.writer.replacing = {
            n.key: moves[n.key] for n in part if n.key in moves and moves[n.key] not in self._hot_written
        }
        self._wrote.keys = wrote
        try:
            self._held = self._held_moves(part)
            return self.index_files(part)
        finally:
            self.writer.replacing = {}
            self._held = {}
            self._wrote.keys = None

    def _held_moves(self, notes: Sequence[NoteFile]) -> dict[str, Prepared]:
        """The moved notes of a batch (``Writer.replacing``) whose file is the one indexed under
        their old key, unwritten since (``moves.unchanged_move``), as that entry holds them: not
        read again (a folder renamed on a share read every note under it, each a round trip).
        None while the links of unchanged notes are read again (that pass goes by key, and a
        new key before its cursor would keep the old reader's links)."""
        replacing = self.writer.replacing
        if not replacing or self.links.due:
            return {}
        olds = self.manifest.file_states_of([replacing[n.key] for n in notes if n.key in replacing])
        out: dict[str, Prepared] = {}
        for n in notes:
            old = replacing.get(n.key)
            st = olds.get(old) if old is not None else None
            if old is None or st is None or not unchanged_move(old, st, n):
                continue
            if not ctime_is_evidence(self.supervisor.status(n.root).fs_type):
                continue
            held = self.manifest.held_note(old)
            if held is not None:
                out[n.key] = as_held(n, st.hash, held, written_links(self.manifest.read, old))
        if out:
            log.info("moved_notes_not_read count=%d", len(out))
        return out

    def _moved_written(self, part: Sequence[NoteFile], moves: dict[str, str]) -> list[str]:
        """The old keys of the notes of ``part`` that were moved and whose new entry is written."""
        new = [n.key for n in part if n.key in moves]
        if not new:
            return []
        states = self.manifest.file_states_of(new)
        return [moves[k] for k in new if k in states and states[k].state == "indexed"]

    def _delete_moved(self, old: list[str], gone: list[str]) -> None:
        """Remove moved notes' old entries now (their new ones are indexed), out of ``gone``.
        From the deletion's first step no answer shows them (``deleting``) and ``files`` no longer
        counts them; ``leaving`` says how many are being removed."""
        pending = set(gone)
        old = [k for k in self._still_gone(old) if k in pending]
        if not old:
            return
        self.activity.leaving = dict(Counter(k.split("/", 1)[0] for k in old))
        try:
            self.writer.retire(old)  # no answer shows them from now on
            self.delete(old)
        finally:
            self.activity.leaving = {}
        left = set(old)
        gone[:] = [k for k in gone if k not in left]

    def _count_read_whole(
        self, listed: Sequence[Root], names: set[str], stop: threading.Event | None
    ) -> None:
        """Count the roots this sweep listed and wrote to the end into a new or rebuilt index;
        once every root is, the index holds every note (``swept``, kept across restarts). A sweep
        that a stop or a failed batch cut short, or whose root went offline, read only part of
        it: "ready" then, with most notes unread, made empty answers look final."""
        if (stop is not None and stop.is_set()) or self.leftover is not None:
            return
        self._read_whole.update(r.name for r in listed if not self.supervisor.status(r).offline)
        if names <= self._read_whole:
            self.manifest.set_meta("swept", "1")
            self._swept = True

    def _retire_emptied(self, gone: Sequence[str], names: set[str]) -> None:
        """Inboxes whose last entries this sweep deleted and that hold no note are no roots any
        more: their status goes now, not with the next sweep."""
        agents = sorted({a for k in gone if (a := memory_agent(k)) is not None})
        empty = [a for a in agents if not self.manifest.file_states(f"memory/{a}/")]
        kept = set(inboxes_in_use(self.cfg, empty))
        retired = {f"memory/{a}" for a in empty if a not in kept}
        if retired:
            self.supervisor.keep_memory_roots(names - retired)
            self.changes.keep_roots(names - retired)

    def _paths_of(self, keys: Sequence[str], roots: Sequence[Root]) -> set[str]:
        """Where the notes of ``keys`` lay (their roots' paths and the file names the index
        recorded): a retry of these paths finds them gone and deletes them."""
        by_name = {r.name: r for r in roots}
        out: set[str] = set()
        for key in keys:
            rel = self.manifest.rel_of(key)
            source, rest = key.split("/", 1)
            name = f"memory/{rest.split('/', 1)[0]}" if source == "memory" else source
            root = by_name.get(name)
            if root is not None and rel is not None:
                out.add(str(root.path / rel))
        return out

    def _still_gone(self, gone: Sequence[str]) -> list[str]:
        """The sweep's deletions but the notes a file event brought back meanwhile (indexed
        between its batches: deleting them now would lose them until the next full sweep)."""
        return [k for k in gone if k not in self._hot_written]

    def _index_hot(self, stop: threading.Event | None = None) -> None:
        """Between the batches of a full sweep: the notes saved since it began, so each is
        searchable within a batch's time, not at the end of a sweep of minutes. Paths whose root
        needs a full sweep of its own are given back as they came."""
        if self.hot_paths is None:
            return
        hot = self.hot_paths()
        if not hot:
            return
        diff = Diff()
        try:
            # The roots as they are now: an agent's inbox that was empty when the sweep began (no
            # root then) may hold the note just saved; matched against ``every``, it was dropped.
            if self.changes.diff_paths(hot, self.changes.roots(), diff):
                self._deferred |= hot  # a root needs a full look: given back when this sweep ends
            self._write_hot(diff, stop)
            self._record_excluded(diff, None)
        except BaseException:
            if self.hot_back is not None:  # taken off the queue: not to be lost with the sweep
                self.hot_back(set(hot) | self._deferred)
                self._deferred.clear()
            raise
        log.debug("hot_paths paths=%d indexed=%d deleted=%d", len(hot), len(diff.work), len(diff.gone))

    def _write_hot(self, diff: Diff, stop: threading.Event | None = None) -> None:
        """The file events' changes taken between a sweep's batches, written in batches as a sweep
        writes them: a folder renamed mid-sweep (moves of any count) keeps each note's old entry
        until its new one is written (its old entries deleted first and all read in one call, the
        notes were found under neither path for the whole read); the other deletions after.
        ``stop`` set (the daemon stops) ends it between two batches (a stop waited for every
        batch of a folder of thousands renamed): the rest is given back, and the next start's
        sweep finds it anyway."""
        moves = _moves_applied(diff)
        gone = list(diff.gone)
        batch = self.cfg.index.batch_files
        for start in range(0, len(diff.work), batch):
            if stop is not None and stop.is_set():
                left = diff.work[start:]
                # Nothing more is deleted either: a moved note whose new entry is not written keeps
                # its old one (found under neither path until the next start, else).
                self._deferred |= {str(n.path) for n in left} | self._paths_of(gone, self.changes.roots())
                log.info(
                    "hot_paths_stopped written=%d of=%d (the rest is looked at again)", start, len(diff.work)
                )
                return
            part = diff.work[start : start + batch]
            self._write_batch(part, moves)
            self._hot_written.update(n.key for n in part)
            self._delete_moved(self._moved_written(part, moves), gone)
        if gone:  # newer than the sweep's listing: deleted even if an earlier event wrote them
            self.delete(gone)

    def _record_excluded(self, diff: Diff, every: Sequence[Root] | None, whole: int | None = None) -> None:
        """The excluded notes a sweep found, as link targets (notes.links.set_excluded); ``every``:
        the roots of a sweep, None for the file events taken between its batches, whose findings
        are applied again after the sweep's own (newer than its listing). ``whole``: the problems'
        mark at the start of a full sweep, which removed every excluded note it found."""
        if whole is not None:
            self.problems.clear("exclusions", since=whole)
            for rules in self.writer.left_out.values():  # listed before a reload excluded them
                for rule in rules.values():
                    self.activity.excluded[rule] = self.activity.excluded.get(rule, 0) + 1
        if every is None:
            _after(self._hot_excluded, diff.excluded)
        else:
            _after(self._hot_excluded, self.writer.left_out)
            _after(diff.excluded, self._hot_excluded)
            self._hot_excluded = {}
        if diff.excluded:
            roots = self.changes.roots() if every is None else every
            self.writer.set_excluded(diff.excluded, {r.source for r in roots if r.source != "memory"})

    def _refresh_ignore(self) -> None:
        """Re-read Obsidian's settings (``_read_obsidian_settings``); what was read kept in the
        manifest and its trouble said in status."""
        if self._read_obsidian_settings():
            self._keep_rules()

    def _read_obsidian_settings(self) -> bool:
        """Re-read Obsidian's settings, a file of the vault, with the probe timeout: on a share
        that hangs the rules in force stay (the vault's own listing then reports the share), and
        no second read is started while the first still hangs. Whether the read ended."""
        if self._ignore_stuck is not None and self._ignore_stuck.is_alive():
            return False
        vault = self.cfg.vault.path
        status = self.supervisor.roots.get("vault")
        if vault is None or (status is not None and status.hanging is not None):
            return False  # the vault's own call still hangs: its rules in force stay
        timeout, beat = self.cfg.watch.probe_timeout_seconds, self.supervisor.beat
        formats, self._ignore_stuck = run_with_timeout(self._read_settings, timeout, "settings", beat)
        if self._ignore_stuck is not None:
            # Said, not only waited out: a new Excluded files rule went unapplied without a word.
            # Cleared by the first read that ends (``_keep_rules``).
            log.error("obsidian_settings_hung path=%s timeout=%.0fs", vault / ".obsidian", timeout)
            self.problems.report(
                "obsidian_settings",
                f"reading Obsidian's settings in {vault / '.obsidian'} did not answer within {timeout:.0f} s "
                "(hung share?); the rules read before stay until it answers",
            )
        if formats is None:
            return False  # past the timeout: the rules in force stay
        # Dates are read from the names when a search asks (nothing stored to redo): a format
        # set or changed in Obsidian dates the notes indexed before at once.
        self.manifest.day_formats = formats
        return True

    def _keep_rules(self) -> None:
        """Obsidian's rules as read, into the manifest when they changed; their trouble to status."""
        kept = self.ignore.kept() or {"vault": str(self.cfg.vault.path)}
        kept["daily_notes"] = self.daily_formats.kept()
        text = json.dumps(kept, ensure_ascii=False)
        if text != self._rules_kept:
            self.manifest.set_meta(_OBSIDIAN_RULES, text)
            self._rules_kept = text
        # Excluded files and the daily-note settings are one area: both are Obsidian's settings.
        trouble = "; ".join(t for t in (self.ignore.trouble, self.daily_formats.trouble) if t) or None
        if trouble is not None:
            self.problems.report("obsidian_settings", trouble)
        else:
            self.problems.clear("obsidian_settings")

    def _read_settings(self) -> tuple[tuple[str, str], ...] | None:
        """Obsidian's settings this index follows: Excluded files, the daily-note formats and the
        week start searches read weeks by; None (the settings in force stay) while the vault is not
        there: a bare mount point has no .obsidian, and reading it as "no settings" forgot the
        daily-note format for the whole outage (the notes stay searchable, their dates went)."""
        if self.supervisor.vault_not_there():
            return None
        self.ignore.refresh()
        self.week_start.refresh()
        return self.daily_formats.refresh()

    def index_files(self, notes: Sequence[NoteFile], data: dict[str, bytes] | None = None) -> int:
        """Read (or take from ``data``, by key), chunk and write a batch of notes; returns how many
        changed content. Notes a rule excludes are dropped here too, so events cannot bring them
        back."""
        notes = [n for n in notes if n.root.source == "memory" or self.excluded_by(n.key) is None]
        states = self.manifest.file_states_of([n.key for n in notes])
        prepared: list[Prepared] = []
        spent: dict[str, float] = {}  # path -> seconds its reading and cutting took
        hung: set[str] = set()  # roots whose read did not answer: not asked again in this batch
        read: list[NoteFile] = []  # notes read (or left out for what they hold): not unreadable now
        no_answer: set[str] = set()  # paths whose read did not answer: the wait is no cost of the note

        def known(note: NoteFile) -> str | None:
            st = states.get(note.key)
            return st.hash if st is not None and st.state == "indexed" else None

        def bounded(note: NoteFile, fn: Callable[[], tuple[bytes, str]]) -> tuple[bytes, str]:
            return self.supervisor.read(note.root, note.rel, fn)

        def drafted(note: NoteFile) -> Prepared | Drafted | None:
            if note.root.name in hung:
                return None  # not read: looked at again once the root answers
            with _timed(spent, str(note.path)):
                try:
                    return self._held.get(note.key) or draft(
                        note, known(note), (data or {}).get(note.key), self.cfg.index.max_file_bytes, bounded
                    )
                except RootUnreachable as exc:
                    # The share hangs on this note's open or read (a listing that answers says
                    # nothing of that): the root goes offline and is retried as a hung listing
                    # is; its other notes wait, the other roots' are read on.
                    hung.add(note.root.name)
                    no_answer.add(str(note.path))
                    self.supervisor.unreachable(note.root, exc)
                    return None

        # Chunk sizes are counted with the model's tokenizer. While it still loads (a first start
        # converts the model beside the first sweep), notes are read and parsed ahead and cut
        # once it is there (or loading failed), instead of the whole sweep waiting for it.
        ahead: list[Prepared | Drafted | None] = []
        for note in notes:
            ahead.append(drafted(note))
            if self.slot.wait_countable(0):
                break
        for i, note in enumerate(notes):
            d = ahead[i] if i < len(ahead) else drafted(note)
            waited = self._tokenizer_wait
            with _timed(spent, str(note.path)):
                p = finish(self.cfg, d, self._count_tokens) if isinstance(d, Drafted) else d
            # The first start's wait for the model is not what this note costs to cut.
            spent[str(note.path)] -= self._tokenizer_wait - waited
            if p is None or unread(p.skip_reason):  # its root offline, or its read failed
                self.activity.not_read += 1
                if p is None or self._read_failed(
                    note, str(p.skip_reason), states.get(note.key), known(note)
                ):
                    continue
            else:
                read.append(note)
            if p.parsed is None and p.skip_reason is None:
                self.manifest.touch(note.key, note.mtime_ns, note.size, note.ctime_ns, note.ids())
                continue
            prepared.append(p)
        self.changes.read_again(read)
        if prepared:
            started = time.perf_counter()
            mark = self.problems.mark()
            self.writer.write(prepared)
            _share(spent, prepared, time.perf_counter() - started)
            # Written: the index can be updated again. Said now, not at the end of a catch-up that
            # may take minutes ("disk is full" stood beside moving progress); not a failure
            # reported meanwhile (a memory write's).
            self.problems.clear("index", since=mark)
        for path in no_answer:
            spent.pop(path, None)
        self._record_written(prepared)
        written = {str(p.note.path): (p.note.key, self.writer.added.pop(p.note.key, 0)) for p in prepared}
        if self.on_indexed is not None and spent:
            self.on_indexed(spent, written)
        return len(prepared)

    def _record_written(self, prepared: Sequence[Prepared]) -> None:
        if (keys := getattr(self._wrote, "keys", None)) is not None:
            keys.extend(p.note.key for p in prepared)

    def _read_failed(self, note: NoteFile, why: str, st: FileState | None, indexed: str | None) -> bool:
        """A note whose read failed: an indexed one is kept as it was (True: nothing to write);
        one not in the index is named as such and written as not read (``records.file_record``),
        which the next sweep reads again."""
        if indexed is not None:
            self._keep_unreadable(note, why, st)
            return True
        if self.changes.not_read(note.root, note.path, why, (note.mtime_ns, note.size, note.ctime_ns)):
            log.warning("file_unread path=%s reason=%s", note.path, why)
        return False

    def _keep_unreadable(self, note: NoteFile, why: str, st: FileState | None) -> None:
        """An indexed note that cannot be read now: a read error is no evidence the note changed,
        so what is indexed is kept, and said (status counts and names it)."""
        if self.changes.kept_unreadable(
            note.root, note.path, why, (note.mtime_ns, note.size, note.ctime_ns)
        ):  # later failures: counted at INFO
            log.warning("file_kept path=%s reason=%s", note.path, why)
        else:
            log.info("file_kept path=%s reason=%s", note.path, why)
        if st is not None and (st.mtime_ns, st.size) == (note.mtime_ns, note.size):
            # Only its status changed (a chmod that made it unreadable): remember that, or every
            # sweep reads it again. A changed mtime or size stays unrecorded, so the new text is
            # read once the note can be read.
            self.manifest.touch(note.key, note.mtime_ns, note.size, note.ctime_ns, note.ids())

    def _forget_linked(self, ids: set[tuple[int, int]]) -> None:
        """A hard-linked backup of notes in an excluded folder: once the notes are deleted it has
        one link and their ids, and would pass for them moved there. Their ids are forgotten."""
        forgotten = self.manifest.forget_ids(ids) if ids else []
        if forgotten:
            log.info("notes_hard_linked count=%d into=excluded folder ids=forgotten", len(forgotten))

    def delete(self, keys: Sequence[str]) -> None:
        """Remove notes from every store (intent first, so a crash mid-way is redone). Every
        delete passes here (a sweep's, an exclusion's at start or reload, a memory's, a redone
        one), so the row mark comes down with it (a few reads by row number)."""
        self._rows_renumbered()  # before this process deletes a row: its own is not another's
        self.writer.delete(keys)
        if keys:
            self._row_mark_kept()
        if self._read_back(keys):  # a note a rebuild put back, gone now (a memory delete)
            self._say_rebuild()

    def finish_interrupted(self) -> None:
        """Redo deletions a crash interrupted (interrupted indexing is redone by the next sweep)."""
        pending = self.manifest.keys_in_state("deleting")
        if pending:
            log.info("reconcile_deletions count=%d", len(pending))
            self.delete(pending)

    @property
    def reading_first_time(self) -> bool:
        """Whether notes are being read into an index that never held them all (a new or rebuilt
        index): searches then miss the notes not read yet."""
        return not self._swept

    def reparse_if_chunking_changed(self) -> None:
        """Notes cut by another chunker version, other chunking settings or another model's
        tokenizer are read and cut again by the next sweep (chunks whose embed text stays the same
        keep their vectors; the rest are embedded again in the background), so the index
        converges on today's chunking."""
        # Chunk sizes are counted in the model's own tokens (words when no model runs): a model
        # switch re-cuts too, or chunks cut to e5's 200 tokens ran past MiniLM's 256 and their
        # tails were never embedded (the re-cut chunks go to the new model's table only:
        # ``Writer._recut_for_switch``).
        counted = self.cfg.embedder.model if self.cfg.embedder.enabled else "words"
        want = self._chunking(counted)
        have = self.manifest.get_meta("chunker")
        # A switch to this model follows once it loads (``Writer.switch_due``): cut for another
        # model, or a switch under way before the stop.
        self.writer.switch_due = self._switch_due(have, counted)
        if have == want:
            return
        notes = self.manifest.reread_all()  # none in a new index
        if notes:
            log.info("index_rechunk notes=%d old=%s new=%s", notes, have or "unrecorded", want)
        self.manifest.set_meta("chunker", want)

    def _switch_due(self, have: str | None, counted: str) -> bool:
        """Whether a switch to the configured model follows once it loads: the notes were cut
        for another model's tokens, the serving table is another model's, or a switch was under
        way when the daemon stopped."""
        table = self.manifest.get_meta("vector_table")
        if not self.cfg.embedder.enabled or not table:
            return False
        cut_for_another = have is not None and have != "" and have.rpartition(":")[2] != counted
        # The table another model's (a stop or a kill after a start's re-cut recorded the new
        # chunker, before the switch began: the chunker then says nothing of it).
        if cut_for_another or self.manifest.get_meta("vector_table_next"):
            return True
        # The model the table's own metadata names, exactly: by the name's prefix, e5's was taken
        # for e5-small's (a table that cannot be read here is judged by its name, as before).
        same = holds_model(self.cfg.index_dir / "vectors", table, counted)
        return not (table.startswith(table_prefix(counted)) if same is None else same)

    def reread_canvases_if_read_differently(self) -> None:
        """Canvases indexed by another Canvas reader are read again by the next sweep (their
        bytes are as they were, so no sweep would): a first card opening with "---" stayed the
        canvas's front matter until it was edited. Vectors of chunks whose text stays are kept."""
        reread = functools.partial(self.manifest.reread_suffix, CANVAS_SUFFIX)
        self._reread_once("canvas_reader", CANVAS_READER_VERSION, reread, "canvas_reread")

    def reread_drawings_if_read_differently(self) -> None:
        """Excalidraw drawings indexed by another drawing reader are read again by the next sweep
        (their bytes are as they were): the elements' ids were words of the drawing. Only they
        are read again, not every note as a chunker change does (a whole vault on a share)."""
        reread = self.manifest.reread_drawings
        self._reread_once("drawing_reader", DRAWING_READER_VERSION, reread, "drawing_reread")

    def reread_link_aliases_if_read_differently(self) -> None:
        """Notes whose aliases hold a wiki-link written unquoted (``aliases: [[Bar]]``, a list in a
        list as YAML reads it) are read again by the next sweep when the way such aliases are read
        changes (their bytes are as they were): the alias was none, and their first chunks did not
        name it. Only they are read again, not every note as a chunker change does."""
        reread = self.manifest.reread_link_aliases
        self._reread_once("link_alias_reader", LINK_ALIAS_READER_VERSION, reread, "link_alias_reread")

    def reread_if_written_elsewhere(self) -> None:
        """Notes written into the index after this reader's last whole sweep are read again by
        the next sweep: a release reading notes otherwise, run on the index meanwhile (a
        downgrade and back), wrote them its own way (``aliases: [010]`` as 8) and knows none of
        the rows that say a one-time re-read was done, so they kept its reading for good. Each
        reader keeps its own mark (``_written_until``): one shared mark was moved past those
        writes by the other release's own whole sweep. Notes this reader wrote from file events
        after its last whole sweep are read again too (a restart): cost only, no text is
        embedded again (its vector is found by its text)."""
        self._rows_renumbered()
        since = _finite(self.manifest.get_meta(_written_until()))
        row = _finite(self.manifest.get_meta(_written_until(ROW_MARK)))
        if since is None and row is None:  # none yet (this reader's first start), or not a mark
            return
        # Both marks: a note's row written since is above the row mark whatever the wall clock
        # said (a whole sweep under a clock set ahead recorded a time in the future, a release run
        # under a clock set back wrote times below the mark). Rows numbered anew at or below the
        # row mark were found above (``_rows_renumbered``).
        notes = self.manifest.reread_written_after(
            since if since is not None else math.inf, int(row) if row is not None else None
        )
        if notes:
            log.info("notes_written_since_reread notes=%d", notes)

    def _rows_renumbered(self) -> None:
        """Once per process, before it moves the row mark: rows numbered anew at or below the
        mark elsewhere (another release's rebuild numbers them from 1; its deletes of the newest
        rows gave their numbers to its next writes) read every note again once, as no row tells
        which it wrote (no text is embedded again: its vector is found by its text). A new row
        takes the number after the latest, so the row at the mark, as recorded with it (its key
        and time), still there proves no number at or below it was given again; missing or
        another, or every row below the mark, they were. This release moves the mark down with
        its own deletes and writes (``_row_mark_kept``), so that means rows written elsewhere."""
        if self._rows_checked:
            return
        self._rows_checked = True
        row = _finite(self.manifest.get_meta(_written_until(ROW_MARK)))
        if row is None or row < 1 or self._mark_row_recorded(int(row)):
            return
        notes = self.manifest.reread_all()
        self._set_row_mark(self.manifest.last_row_up_to(int(row)))
        log.info("notes_renumbered_reread notes=%d", notes)

    def _mark_row_recorded(self, row: int) -> bool:
        """Whether the row at the mark is the one recorded with it (a mark without a record: by
        its being there). One read by row number."""
        note = self.manifest.row_note(row)
        recorded = self.manifest.get_meta(_written_until(ROW_NOTE))
        try:
            return note is not None and (not recorded or json.loads(recorded) == note)
        except ValueError:  # a hand edit: the row there stands
            return note is not None

    def _row_mark_kept(self) -> None:
        """The row mark moved down to the latest row below it when this process removed the row
        at the mark (a delete, the note written anew from a file event, an exclusion at start or
        reload): a new row takes the number after the latest, so with every row below the mark
        another release's next write got a number at or below it and was never read again, and
        at start a missing row at the mark is taken for rows written elsewhere."""
        self._rows_renumbered()
        row = _finite(self.manifest.get_meta(_written_until(ROW_MARK)))
        if row is not None and row >= 1 and not self._mark_row_recorded(int(row)):
            self._set_row_mark(self.manifest.last_row_up_to(int(row)))

    def _set_row_mark(self, row: int) -> None:
        """The row mark and the note row there (key and time), in one transaction."""
        note = self.manifest.row_note(row)
        marks = {
            _written_until(ROW_MARK): repr(row),
            _written_until(ROW_NOTE): json.dumps(note) if note else "",
        }
        with self.manifest.transaction() as db:
            self.manifest.set_meta_in(db, marks)

    def _whole_sweep_written(self) -> None:
        """Recorded after a whole sweep: the latest note row written, by its time and by its
        row (``reread_if_written_elsewhere``)."""
        self._rows_renumbered()
        written = self.manifest.last_written()
        if written and self.manifest.get_meta(_written_until()) != repr(written):
            self.manifest.set_meta(_written_until(), repr(written))
        latest = self.manifest.last_row()
        if latest and self.manifest.get_meta(_written_until(ROW_MARK)) != repr(latest):
            self._set_row_mark(latest)

    def reread_property_names_if_read_differently(self) -> None:
        """Notes whose aliases, tags or title YAML read as a number, a yes/no or a time
        (``aliases: [010]`` named the note "8") are read again by the next sweep when the way
        such names are read changes (their bytes are as they were). Only they are read again."""
        version, reread = PROPERTY_NAME_READER_VERSION, self.manifest.reread_typed_names
        self._reread_once("property_name_reader", version, reread, "property_name_reread")

    def _reread_once(self, row: str, version: int, reread: Callable[[], int], event: str) -> None:
        """Mark the notes ``reread`` picks to be read again by the next sweep once the meta
        ``row`` is not ``version`` (a reader that changed); marked before the row is written: a
        crash between the two redoes it. ``event``: the log line's name."""
        want = str(version)
        have = self.manifest.get_meta(row)
        if have == want:
            return
        notes = reread()
        if notes:
            log.info("%s notes=%d old=%s new=%s", event, notes, have or "1", want)
        self.manifest.set_meta(row, want)

    def _chunking(self, counted: str) -> str:
        chunking = self.cfg.chunking
        return f"{CHUNKER_VERSION}:{chunking.max_tokens}:{chunking.overlap}:{counted}"

    def counted_with(self, counted: str) -> None:
        """The tokenizer that cuts notes is not the configured model's (it failed to load: another
        model answers in its place, or words are counted): recorded as such, so the next start
        with the configured model cuts the notes again."""
        if self.manifest.get_meta("chunker") != self._chunking(counted):
            self.manifest.set_meta("chunker", self._chunking(counted))
            log.info("index_chunking_recorded counted=%s", counted)

    def links_due(self) -> bool:
        """Whether the link pass has a batch to run now: not while every root with notes left is
        offline or a read of it hangs (the pass waits for those rather than leave their notes to
        be read whole; the other roots go on)."""
        return self.links.due and not self.links.waits_for(self.changes.roots(), self._away)

    def _away(self, root: Root) -> bool:
        status = self.supervisor.status(root)
        # The wiki while a call on the vault around it hangs: its reads are refused at once.
        return status.offline or status.hanging is not None or self.supervisor.stuck_within(root) is not None

    def reread_links(self) -> bool:
        """One batch of the pass that reads the links of unchanged notes again after an upgrade
        (``index.linkreread``); the index loop runs it between sweeps, after a start's first, and
        `sidecar index` without a daemon after its sweep. Whether the pass moved on."""
        supervisor = self.supervisor
        return self.links.step(
            self.changes.roots(),
            self._away,
            lambda note, fn: supervisor.read(note.root, note.rel, fn),
        )

    def _vault_away(self) -> bool:
        """The vault's folder is missing, empty, not the mount it was on, or does not answer
        within the probe timeout. One probe at a time (``Supervisor.probes``): a caller beside one
        under way reads its answer; one that times out marks the vault hanging, and while it
        hangs the vault is away at once, with no other thread left behind."""
        try:
            return self.supervisor.ask_vault_not_there()
        except (NoAnswer, OSError):
            return True

    def unreachable_roots(self) -> dict[str, str]:
        """Roots with notes indexed that a sweep cannot read now, with why (an offline root with
        none has nothing a rebuild could lose): those offline (a mass deletion held is not:
        its folder is there) and the vault when its folder is missing, empty or not the mount it
        was on (a share unmounted since the last sweep), asked with the probe timeout."""
        out = {
            st.name: st.error or "offline"
            for st in list(self.supervisor.roots.values())
            if st.offline and st.hold_kind != "mass" and self.manifest.has_notes(f"{st.name}/")
        }
        if self.cfg.vault.path is not None and "vault" not in out and self.manifest.has_notes("vault/"):
            vault = self.supervisor.roots.get("vault")
            # A call on the vault still hanging: not asked again (one more stuck thread each time).
            if (vault is not None and vault.hanging is not None) or self._vault_away():
                out["vault"] = f"{self.cfg.vault.path} is missing, empty, unmounted or does not answer"
        return out

    def refuse_rebuild(self, confirmed: Collection[str] = (), *, recorded: bool = False) -> None:
        """Raise UnreadableError when a root that has notes indexed cannot be read now, or a
        folder (or note) with notes indexed is recorded unreadable (no permission, an I/O error):
        a rebuild forgets every note first and reads them again, so it emptied an unmounted vault
        (and its wiki) from the index for the whole outage, and dropped the notes of a folder of
        mode 000 while status said they stay, where a sweep keeps them as indexed. ``recorded``:
        the notes kept unreadable are taken as the last sweep recorded them, none opened (the
        check after each whole sweep of a refusal at the rebuild's turn)."""
        short = self.manifest.aside_room()
        if short is not None:  # nothing changed: a request's error (exit 7), no broken index
            raise StorageError(short)
        gone = self.unreachable_roots()
        folders = self.changes.unreadable_indexed(gone, reopen=not recorded)
        refused = self.refused_inboxes()
        if not gone and not folders and not refused:
            self.refuse_held(confirmed)
            return
        what: list[str] = []
        then: list[str] = []
        if gone:
            said = "; ".join(f"{name}: {why}" for name, why in sorted(gone.items()))
            what.append(f"{', '.join(sorted(gone))} cannot be read now ({said})")
            then.append("mount the share (`sidecar status` shows when it is back)")
        if folders:
            named = few_names(folders)
            what.append(
                f"{named} cannot be read now (unreadable, with notes indexed: no permission or an I/O error)"
            )
            then.append(
                "make them readable to the user sidecar runs as (e.g. `chmod u+r` a note, `chmod u+rx` "
                "a folder; `sidecar status` shows while they are not)"
            )
        if refused:
            inboxes, told = rebuild_said(self.cfg.agents_dir, refused)
            what += inboxes
            then += told
        then[0] = then[0][:1].upper() + then[0][1:]
        kept = " and keeps those notes as indexed" if gone or folders else ""
        message = (
            f"not rebuilt: {'; '.join(what)}. A rebuild reads every note again, and notes that cannot "
            "be read would be gone from the index until they can. Nothing was changed. "
            f"{' and '.join(then)} and run `sidecar index --rebuild` again; `sidecar index` updates "
            f"the rest now{kept}."
        )
        if refused:
            # No sweep reads a refused inbox: its notes leave the index with the next one anyway.
            message += (
                " A refused inbox is neither read nor served: `sidecar index` removes its notes from "
                "the index (read again once it is your folder again), and the rebuild runs after that."
            )
        if folders:
            # The way past the refusal when those notes are to leave the index.
            message += (
                " To rebuild without them, move them out of the vault (or delete them) and run "
                "`sidecar index` first: their notes leave the index, and the rebuild runs."
            )
        if gone:
            message = (
                message[:-1]
                + ". If you emptied it on purpose, "
                + " and ".join(f"`sidecar index --confirm-deletions {name}`" for name in sorted(gone))
                + " removes its notes from the index; a rebuild runs after that"
            )
        raise UnreadableError(message)

    def refused_inboxes(self) -> dict[str, str]:
        """Agents with notes indexed whose inbox is refused now (a symbolic link, not a folder,
        another user's), with why: a rebuild would drop their notes, not read back (a sweep drops
        them too, its skipped files say why). None while the home is held (its inboxes are offline)."""
        if self.supervisor.home.problem() is not None:
            return {}
        found = {a: inbox_refusal(inbox_root(self.cfg, a)) for a in self.manifest.memory_agents()}
        return {agent: why for agent, why in found.items() if why is not None}

    def refuse_held(self, confirmed: Collection[str]) -> None:
        """Raise UnreadableError while a root's mass deletion is held (unless the same request
        confirms it): the rebuild forgets every note and puts back only those it could not judge,
        so the notes the hold keeps (vanished at once, waiting for the clock or a confirmation)
        left the index unconfirmed. Asked at the request and again at the rebuild's turn (a sweep
        it waited behind may begin a hold)."""
        held = self._held_roots(confirmed)
        if not held:
            return
        said = ", ".join(f"{n} notes of {name}" if n else f"the notes of {name}" for name, n in held)
        raise UnreadableError(
            f"not rebuilt: the removal of {said} is held (they vanished at once). A rebuild "
            "would drop them without the confirmation the hold waits for. Nothing was changed. Bring "
            "them back, wait for the hold to end (`sidecar status` shows when), or confirm it with "
            + " and ".join(f"`sidecar index --confirm-deletions {name}`" for name, _ in held)
            + "; then run `sidecar index --rebuild` again"
            + (
                f" (`sidecar index --rebuild --confirm-deletions {held[0][0]}` does both)."
                if len(held) == 1
                else "."
            )
        )

    def _held_roots(self, confirmed: Collection[str]) -> list[tuple[str, int | None]]:
        """The roots whose mass deletion is held, with how many notes (None: not known here). A
        root not judged by this process yet (a restart's first sweep to come, `sidecar index`
        without a daemon) by the hold saved with its state (was: the hold of a running daemon
        only, and a rebuild then dropped the held notes unconfirmed)."""
        roots = dict(self.supervisor.roots)
        configured = {r.name for r in vault_roots(self.cfg)}  # an agent's inbox is never held
        saved = {row[len("root:") :] for row in self.manifest.meta_names("root:")} & configured
        held: list[tuple[str, int | None]] = []
        for name in sorted((set(roots) | saved) - set(confirmed)):
            st = roots.get(name)
            if st is not None and st.last_sweep is not None:  # judged here: what it said holds
                if st.hold_kind == "mass" and st.held_deletions:
                    held.append((name, st.held_deletions))
            elif _saved_hold(self.manifest.get_meta(f"root:{name}")) == "mass":
                held.append((name, None))
        return held

    def clear(self, begun: Callable[[], None] | None = None) -> None:
        """Forget everything indexed (for a rebuild); the next sweep reads every note again.
        ``begun``: told once the manifest is emptied (its copy kept), also when the keyword index
        or the vectors fail after that: the rebuild has begun, and is not to be asked again."""

        def emptied() -> None:
            # In memory only (nothing here can fail): the copy is put back by this process's
            # next whole sweep, which counts as a first one again.
            self._aside = True
            self._rows_checked = True  # every row is this release's now: none to check
            self._put_back, self._put_back_unsaved = set(), False  # its row emptied with the index
            self._swept = False
            self._read_whole.clear()
            self.activity.first_sweep_done = self.activity.ready_once = False
            if self.on_cleared is not None:
                self.on_cleared()
            if begun is not None:
                begun()

        # The rows that describe the emptied index are written with its emptying.
        # The notes are read anew by this release alone: a newer one that wrote before is past.
        writers = record_writer(self.manifest.get_meta(WRITERS_META), rebuilt=True)
        meta = {_PUT_BACK: "", "swept": "", WRITERS_META: writers}
        self.writer.clear(meta, emptied)
        self.links.finish()  # every note is read again, by today's reader
        log.info("index_cleared reason=rebuild requested")

    def index_now(self, root: Root, path: Path, written: tuple[bytes, int, int] | None = None) -> str:
        """Index one note synchronously, vectors included (memory writes are searchable on return).
        ``written``: the bytes, mtime and ctime just written, indexed as they are (no second read)."""
        rel = path.relative_to(root.path).as_posix()
        key = root.key_of(rel)
        self._rows_renumbered()  # before this process writes a row
        if written is not None:
            data, mtime_ns, ctime_ns = written
            note = NoteFile(key, root, path, rel, stamp_ns(mtime_ns), len(data), stamp_ns(ctime_ns))
            self.index_files([note], {key: data})
        else:
            st = path.stat()
            note = NoteFile.of(key, root, path, rel, st)
            self.index_files([note])
        self._row_mark_kept()  # the note's row written anew: the mark's may be gone
        self.vectors.embed_key(note.key)
        if self._read_back({note.key}):  # a note a rebuild put back, read now: not said unread
            self._say_rebuild()
        return note.key

    def _first_sweep_ends(self, whole: bool, stop: threading.Event | None) -> None:
        """BM25 checked against the manifest, every link resolved; after a sweep of every root
        not cut short, the vectors a lost manifest's rebuild names again are kept, the others
        dropped (``Vectoring.settle``). A rebuild's notes not read back are put back first, not
        after a sweep stopped partway (the daemon stops): those it had not reached were put back
        at the stop, a long write then, and said not read for a share gone away; the copy stays
        for the next start's first sweep."""
        if whole and not (stop is not None and stop.is_set()):
            self._restore_aside()
        check_bm25(self.stores, stop)
        self.writer.defer_links = False
        self.writer.resolve_all_links()
        if whole and not (stop is not None and stop.is_set()):
            self.vectors.settle()

    def index_state(self, pending_vectors: int, embedder_state: str) -> str:
        """``building`` until the first sweep is done and no chunk waits for a vector it can get."""
        act = self.activity
        attached = self.stores.serving is not None
        waiting = embedder_state in ("idle", "loading") or (
            embedder_state == "ok" and (pending_vectors > 0 or not attached)
        )
        if act.first_sweep_done and not waiting:
            act.ready_once = True  # later edits queue a few vectors without flipping back to building
        return "ready" if act.ready_once else "building"


_PUT_BACK = "rebuild_put_back"  # meta: the keys ``_put_back`` holds, as JSON


ROW_MARK = "row"  # ``_written_until``'s kind of the mark by row
ROW_NOTE = "row_note"  # ``_written_until``'s kind of the note row at the row mark: [key, indexed_at]


def _written_until(kind: str = "") -> str:
    """The meta row of this reader's mark: the latest note row at its last whole sweep (repr of
    its ``indexed_at``; ``kind`` ROW_MARK: of its rowid, ROW_NOTE: its key and time), named by
    every version of how notes are read, so another release keeps its own."""
    readers = (CHUNKER_VERSION, CANVAS_READER_VERSION, DRAWING_READER_VERSION, LINK_ALIAS_READER_VERSION)
    name = "written_until" + (f"_{kind}" if kind else "")
    return f"{name}:" + ".".join(str(v) for v in (*readers, PROPERTY_NAME_READER_VERSION))


def _finite(value: str | None) -> float | None:
    """A mark's number; None when there is none or it is no finite number (another version's
    form, a hand edit: ignored, and the next whole sweep writes it anew)."""
    try:
        number = float(value) if value else math.nan
    except ValueError:
        return None
    return number if math.isfinite(number) else None


# A step of giving back the rebuild copy's pages waits at most this long for searches in flight.
_GIVE_BACK_YIELD_S = 0.5


# SQLite's result codes of a fault that passes: busy, locked, out of memory, read-only,
# interrupted, an I/O error, the disk full, a file that cannot be opened now.
_PASSING_SQLITE = frozenset({5, 6, 7, 8, 9, 10, 13, 14})


def _passing(exc: sqlite3.Error) -> bool:
    """Whether a database error is a fault that passes, not the form of what was read."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _PASSING_SQLITE
    text = str(exc)
    return any(w in text for w in ("disk is full", "disk I/O error", "database is locked", "readonly"))


def _saved_hold(raw: str | None) -> str | None:
    """The kind of hold a root's saved state names (``Supervisor``'s meta row), else None."""
    try:
        memo = json.loads(raw) if raw else {}
    except ValueError:
        return None
    hold = memo.get("hold") if isinstance(memo, dict) else None
    kind = hold.get("kind") if isinstance(hold, dict) else None
    return kind if isinstance(kind, str) else None


def _gone(path: Path) -> bool:
    """Whether a note's file is gone (an error other than its absence says nothing)."""
    try:
        path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return False


def _moves_applied(diff: Diff) -> dict[str, str]:
    """New key -> old key of the moves whose old key this sweep deletes and whose new note it
    reads (``Diff.moves``)."""
    gone = set(diff.gone)
    work = {n.key for n in diff.work}
    return {new: old for old, new in diff.moves.items() if old in gone and new in work}


def _after(scopes: dict[str, dict[str, str]], later: dict[str, dict[str, str]]) -> None:
    """``later``'s scopes of ``Diff.excluded`` into ``scopes``, after theirs (applied in order)."""
    for scope, found in later.items():
        scopes.pop(scope, None)
        scopes[scope] = found


@contextlib.contextmanager
def _timed(spent: dict[str, float], path: str) -> Iterator[None]:
    """Add the seconds the block takes to ``spent[path]``."""
    started = time.perf_counter()
    try:
        yield
    finally:
        spent[path] = spent.get(path, 0.0) + time.perf_counter() - started


def _share(spent: dict[str, float], prepared: Sequence[Prepared], seconds: float) -> None:
    """A batch's write time, shared among its notes by size (a note's keyword documents and
    chunk rows grow with its text)."""
    total = sum(max(p.note.size, 1) for p in prepared)
    for p in prepared:
        path = str(p.note.path)
        spent[path] = spent.get(path, 0.0) + seconds * max(p.note.size, 1) / total
