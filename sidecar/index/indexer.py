"""Files -> chunks -> stores: the write path's one entry, driven by one thread.

A sweep asks the change finder what changed (a full listing of the roots, or only the paths of
file events), deletes what is gone and indexes the rest in batches through the write protocol
(manifest marks ``indexing``, BM25 commits, then the manifest records ``indexed``); a crash at
any point is redone by the next start. Memory writes index their note synchronously, vectors
included. The first sweep of a start checks BM25 against the manifest and resolves every link.
The write path is cut by what its parts do into mixins of ``Indexer``: ``batches`` (a sweep's
batches, moves and deletions in order), ``deletes`` (every removal), ``putback`` (the notes a
rebuild put back), ``rebuild_refusal`` (whether a rebuild may run), ``exclusions`` (the rules and
Obsidian's settings), ``rowmarks`` (notes another release wrote), ``rereads`` (a reader changed);
``activity`` holds what it is doing now. Here: the sweep, a batch's reads and writes, memory
writes' one note, the rebuild's emptying and the index state.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path

from sidecar.config import Config
from sidecar.contracts.errors import SidecarError
from sidecar.index.activity import Activity
from sidecar.index.batches import Batches, _moves_applied
from sidecar.index.deletes import Deletes
from sidecar.index.diff import ChangeFinder, Diff
from sidecar.index.exclusions import _OBSIDIAN_RULES, Exclusions
from sidecar.index.linkreread import LinkReread
from sidecar.index.problems import Problems
from sidecar.index.putback import _PUT_BACK, PutBack
from sidecar.index.rebuild_refusal import RebuildRefusal
from sidecar.index.records import Drafted, Prepared, draft, finish, unread
from sidecar.index.repair import check_bm25, refill_new_bm25, remove_idle_inboxes
from sidecar.index.rereads import Rereads
from sidecar.index.rowmarks import RowMarks
from sidecar.index.summary import ActivitySummary
from sidecar.index.upgrade import upgrade_bm25
from sidecar.index.vectoring import Stores, Vectoring
from sidecar.index.writes import Writer
from sidecar.model.embedder import EmbedderSlot, approx_token_count
from sidecar.runtime.release import WRITERS_META, record_writer
from sidecar.stores.manifest_rows import FileState
from sidecar.vault.dailynotes import DailyNoteFormats
from sidecar.vault.ignore import IgnoreRules
from sidecar.vault.references import path_for_key
from sidecar.vault.sources import NoteFile, Root, stamp_ns
from sidecar.vault.supervisor import RootUnreachable, Supervisor
from sidecar.vault.weekstart import WeekStart

log = logging.getLogger(__name__)

# How long chunking waits for the model's tokenizer, once (a first start's conversion publishes it
# in about a second; a model that is slow to come is not waited for twice).
TOKENIZER_WAIT_S = 60.0


class Indexer(Batches, Deletes, PutBack, RebuildRefusal, Exclusions, RowMarks, Rereads):
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
        stores.roots_away = self.roots_away  # a compaction does not wait for their notes' cut
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

    def file_exists(self, key: str, rel: str | None) -> bool:
        """Whether the file of the note ``key`` (``rel``: the file name the index recorded) is
        there, by the rules a get reads it by."""
        try:
            return path_for_key(self.cfg, key, rel)[1].is_file()
        except (SidecarError, ValueError, OSError):
            return False

    def _count_tokens(self, texts: Sequence[str]) -> list[int]:
        count = self.slot.counter()
        if count is None and not self._waited_for_tokenizer:
            # Once: a tokenizer that does not come within the bound is not waited for again
            # (sizes are then estimated, as without a model).
            started = time.perf_counter()
            self.activity.tokenizer_wait_since = self.activity.clock()
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
        whole = only is None and not paths
        if not act.first_sweep_done:
            self._first_sweep_ends(whole, stop)
        act.sweeps += 1
        # Only a sweep of every root ends the first: one of file events' paths or of a few roots
        # (a share's poll, taken before the start's own sweep) left the other roots' notes unread,
        # and health said idle and ready over them (the daemon queues a sweep of every root at
        # its start, and retries a failed first one whole).
        act.first_sweep_done = act.first_sweep_done or whole
        if not self._swept:
            self._count_read_whole(listed, names, stop)
        # Said last: a client that reads "idle" first finds every count of this sweep written.
        act.ended()
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
        # The steady clock: a wall clock stepped during the sweep (an NTP step, a resume) made it days long.
        seconds = self.activity.clock() - self.activity.started
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

    @property
    def reading_first_time(self) -> bool:
        """Whether notes are being read into an index that never held them all (a new or rebuilt
        index): searches then miss the notes not read yet."""
        return not self._swept

    def links_due(self) -> bool:
        """Whether the link pass has a batch to run now: not while every root with notes left is
        offline or a read of it hangs (the pass waits for those rather than leave their notes to
        be read whole; the other roots go on)."""
        return self.links.due and not self.links.waits_for(self.changes.roots(), self._away)

    def roots_away(self) -> set[str]:
        """The names of the roots whose notes are not read now: offline (deletions held too) or
        a call on them hanging. Asked from the schedule's thread: the roots' states as they are,
        no listing."""
        states = dict(self.supervisor.roots)
        return {name for name, st in states.items() if st.offline or st.hanging is not None}

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

    def index_state(self, pending_vectors: int, embedder_state: str, first_done: bool) -> str:
        """``building`` until the first sweep is done and no chunk waits for a vector it can get.
        ``first_done``: whether it was, as read before ``pending_vectors`` (no default: read
        after, a first sweep that ended in between made "ready" for good over chunks it wrote)."""
        act = self.activity
        attached = self.stores.serving is not None
        waiting = embedder_state in ("idle", "loading") or (
            embedder_state == "ok" and (pending_vectors > 0 or not attached)
        )
        if first_done and not waiting:
            act.ready_once = True  # later edits queue a few vectors without flipping back to building
        return "ready" if act.ready_once else "building"


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
