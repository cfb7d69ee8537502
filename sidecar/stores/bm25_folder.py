"""One Tantivy index in one folder (``Folder``): its writer, its searcher, the checks that find
its files damaged under the running daemon; and what is read from an index's files without
opening it (its documents, its layout)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import struct
import threading
import time
import zlib
from collections.abc import Collection, Iterator
from pathlib import Path

import tantivy

from sidecar.contracts.errors import (
    DaemonRunningError,
    DiskFullError,
    IndexNotOpenError,
    PassingFaultError,
    PermissionDeniedError,
    StoreError,
    StoreNewerError,
    StoreOutdatedError,
    engine_message,
    read_error_class,
    says_damage,
    store_error_class,
)
from sidecar.stores.bm25_text import all_analyzers
from sidecar.stores.space import denied_at
from sidecar.stores.versions import BM25_LAYOUT, bm25_layout

log = logging.getLogger(__name__)

WRITER_HEAP = 64_000_000  # what a writer holds before it flushes a segment to disk
_WRITER_HEAP = WRITER_HEAP
_COPY_MARGIN = 1.5  # a second copy of an index: its size and its segments before their merges
_LOW_DISK = 2 * _WRITER_HEAP  # less free than two writer flushes: a failed write likely met a full disk


def engine_failure(exc: BaseException) -> bool:
    """Tantivy's errors on damaged files: raised ones, and its panics, which pyo3 turns into a
    ``PanicException`` that derives from BaseException (an ``except Exception`` lets it through)."""
    return isinstance(exc, (ValueError, OSError, RuntimeError)) or type(exc).__name__ == "PanicException"


@contextlib.contextmanager
def engine(what: str, path: Path | None = None) -> Iterator[None]:
    """Tantivy's failures (raised or panicking) as a StoreError naming ``what`` was done (on the
    index in ``path``, when given)."""
    try:
        yield
    except StoreError:
        raise
    except BaseException as exc:
        if not engine_failure(exc):
            raise
        # A full disk, a permission denied or no file handles left is a fault that passes
        # (PassingFaultError): taken for damage, a search or a commit that met it had the index
        # moved aside and refilled.
        kind = store_error_class(exc)
        # Tantivy names no path and not always the OS's words: the folder is asked before its
        # failure may be taken for damage, unless Tantivy said plainly it is damage.
        asked = path is not None and kind in (StoreError, PermissionDeniedError) and not says_damage(exc)
        denied = denied_at(path) if asked and path is not None else None
        if denied is not None:
            raise PermissionDeniedError(f"BM25 {what} failed: {denied}") from exc
        raise kind(f"BM25 {what} failed: {engine_message(exc)}") from exc


def leftover_met(exc: BaseException) -> bool:
    """Whether a commit failed on a file a cut commit left under the name it writes (removed by
    then: ``Folder.recover_writer``): no damage, the retry commits."""
    return "FileAlreadyExists" in str(exc)


def low_disk(path: Path) -> int | None:
    """The bytes free on ``path``'s disk when fewer than two writer flushes need, else None."""
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return None
    return free if free < _LOW_DISK else None


def free_space(path: Path) -> int | None:
    """The bytes free on ``path``'s disk; None when it cannot be told."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def folder_size(path: Path) -> int:
    """The bytes of the files under ``path``."""
    size = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # removed meanwhile (a merge)
                size += os.stat(os.path.join(folder, name)).st_size
    return size


def copy_room(size: int) -> int:
    """The bytes free a second copy of an index of ``size`` bytes needs beside it (a refill
    beside, a rewrite in place before its commit): its size with a margin (a new index's
    segments before their merges), plus a writer's flush."""
    return int(size * _COPY_MARGIN) + WRITER_HEAP


def disk_hint(path: Path) -> str:
    """What a failed write most likely met, when the disk says so: Tantivy's own message after a
    worker died ("an index writer was killed") no longer names the full disk."""
    free = low_disk(path)
    return "" if free is None else f" (only {free / 1e6:.1f} MB free on the index's disk: full?)"


def _failed_open(path: Path, exc: BaseException) -> StoreError:
    """An index that could not be opened or made: a full disk (its message says so, or the disk
    is all but full) is a fault that passes, anything else damage. A full disk taken for damage
    moved an agent's new index aside, then the whole keyword index, and refilled it on the full
    disk."""
    kind = DiskFullError if low_disk(path) is not None else store_error_class(exc)
    if (kind is StoreError or kind is PermissionDeniedError) and not says_damage(exc):
        denied = denied_at(path)
        if denied is not None:
            return PermissionDeniedError(f"BM25 index cannot be opened: {denied}")
    return kind(f"BM25 index {path} cannot be opened: {engine_message(exc)}")


REOPEN_EVERY = 500  # commits between openings anew of a keyword index (see Folder._reopen)
# Commits in a row that fail on a leftover file (``leftover_met``) before the index is given up
# as stuck: one the cleanup cannot remove (a folder in its place, a share that refuses) failed
# every later commit for good. Moved aside and refilled from the manifest then, as when damaged.
STUCK_AFTER = 3


class _Looks(threading.local):
    """The searcher each folder gave this thread's current look (``one_look``), and what the
    look's reads counted or analysed (``memo``); none outside a look."""

    searchers: dict[int, tuple[Folder, tantivy.Searcher]] | None = None
    memo: dict[tuple[object, ...], object] | None = None


_LOOKS = _Looks()


@contextlib.contextmanager
def one_look() -> Iterator[dict[tuple[object, ...], object]]:
    """One search's reads of every folder from the searcher its first read got: a search asked
    for a folder's searcher 30-odd times, a stat of meta.json each (5 ms of a search on busy
    cores), and counted the same words again. A commit or merge that ends meanwhile is seen by the
    next search, as one ending just after this one. Yields the look's memo (a read's results by
    its arguments: valid while the same searchers are used, so only within the look). Nested
    looks are one look; another thread's reads are not pinned."""
    if _LOOKS.searchers is not None and _LOOKS.memo is not None:
        yield _LOOKS.memo
        return
    _LOOKS.searchers, _LOOKS.memo = {}, {}
    try:
        yield _LOOKS.memo
    finally:
        _LOOKS.searchers = _LOOKS.memo = None


def look_memo() -> dict[tuple[object, ...], object] | None:
    """The current look's memo on this thread (None outside ``one_look``)."""
    return _LOOKS.memo


class Folder:
    """One Tantivy index in one folder: its writer and its current searcher.

    A ``lazy`` folder (an agent's inbox) holds its writer only from a change to its commit: a
    writer costs 2 MB and six threads, and an inbox is written now and then (twenty agents' open
    writers held 107 MB and 336 threads)."""

    _searcher: tantivy.Searcher  # see ``searcher``

    def __init__(
        self,
        path: Path,
        schema: tantivy.Schema,
        *,
        lazy: bool = False,
        read_only: bool = False,
        layout: int = BM25_LAYOUT,
    ) -> None:
        self.path = path
        self.layout = layout  # whose analyzers read it (an older one's while an upgrade refills)
        self.read_only = read_only  # readers only, nothing made (its disk is full): never a writer
        if read_only and not (path / "meta.json").is_file():
            raise StoreError(f"BM25 index {path} does not exist (nothing is made while read-only)")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file where the folder belongs: moved aside like a damaged store
            raise store_error_class(exc)(f"BM25 index {path} cannot be made: {exc.strerror or exc}") from exc
        self.schema = schema
        self.lazy = lazy or read_only
        self.commits = 0
        self.leftover_failures = 0  # commits in a row that failed on a leftover file
        self.leftover_error = ""  # the last of those failures
        self.unremovable = ""  # a leftover the last cleanup could not remove, and why
        self.dirty = False  # documents added or deleted since the last commit
        # Closed (``close``): its writer ended, no change is taken or committed any more. A write
        # racing the close (a lost index, a stop with a worker still running) must fail, not
        # commit nothing and have its notes marked indexed.
        self.closed = False
        # Each segment file of the searcher as first seen (size, mtime, inode), and the folder's
        # (device, inode): see ``damage``.
        self._files: dict[str, tuple[int, int, int]] = {}
        self._where: tuple[int, int] | None = None
        # meta.json's (mtime, size, inode) when the searcher was made (None: not known): see searcher
        self._meta_seen: tuple[int, int, int] | None = None
        try:
            self.index, self._writer, self.searcher = self._open()
        except BaseException as exc:
            if not engine_failure(exc):
                raise
            if "schema does not match" in str(exc):
                raise StoreOutdatedError(f"BM25 index {path} has the fields of another version") from exc
            if "LockBusy" in str(exc):
                # Another process writes this index (a daemon whose lock file was removed): in
                # use, not damaged. Moved aside as broken, the running daemon's index was lost.
                raise DaemonRunningError(
                    f"the keyword index {path} is in use by another process (another sidecar daemon "
                    "on this home?); not opened"
                ) from exc
            raise _failed_open(path, exc) from exc
        self._note_files()

    def _open(self) -> tuple[tantivy.Index, tantivy.IndexWriter | None, tantivy.Searcher]:
        index = tantivy.Index(self.schema, path=str(self.path), reuse=True)
        for name, analyzer in all_analyzers(self.layout).items():
            index.register_tokenizer(name, analyzer)
        index.reload()
        searcher = index.searcher()
        # Leftovers go once the index opened (its segments read), before its writer exists (see
        # ``remove_unreferenced``): an open that fails (an older meta.json copied back) moves the
        # folder aside with every file in it, the newer segments a person may want back too.
        if not self.lazy:
            self._clean()
        writer = None if self.lazy else index.writer(heap_size=_WRITER_HEAP, num_threads=1)
        return index, writer, searcher

    @property
    def writer(self) -> tantivy.IndexWriter:
        return self._writer_opened()

    def _writer_opened(self, *, cleaned: bool = False) -> tantivy.IndexWriter:
        """The writer, opened when none is (``cleaned``: the leftovers were just removed)."""
        if self.closed:
            raise IndexNotOpenError(f"BM25 index {self.path} is closed: no change is taken")
        if self.read_only:  # a writer takes the lock file and writes meta.json at its commit
            raise DiskFullError(f"BM25 index {self.path} is open read-only (its disk is full)")
        if self._writer is None:
            # A lazy folder's leftovers go as its writer opens: opened for a search (a person's
            # search opens hundreds of inboxes), it writes nothing.
            if not cleaned:
                self._clean()
            with engine("writer", self.path):
                self._writer = self.index.writer(heap_size=_WRITER_HEAP, num_threads=1)
        return self._writer

    def _release(self) -> None:
        """A lazy folder's writer ended (its merges finished, the index lock released)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                with engine("merge wait", self.path):
                    writer.wait_merging_threads()
            except StoreError as exc:
                log.debug("bm25_close %s", exc)

    def _reopen(self) -> None:
        """The index opened anew: Tantivy's directory keeps the path of every segment file it
        ever opened, deleted ones too (about 1 KB a commit, never given back: a note written to
        every second cost 250 MB a day); a fresh one holds only the live files'. Searches keep
        the searcher they hold; the new one is swapped in whole."""
        try:
            with engine("reopen", self.path):
                if self._writer is not None:
                    self._writer.wait_merging_threads()  # ends the writer: releases the index lock
                    self._writer = None
                index, writer, searcher = self._open()
        except StoreError as exc:
            log.warning("bm25_reopen_failed path=%s error=%s", self.path, exc)
            self.recover_writer()  # a writer on the index as it was
            return
        self.index, self._writer, self.searcher = index, writer, searcher
        self._note_files()

    @property
    def searcher(self) -> tantivy.Searcher:
        """The searcher of the index as its files are now. A commit starts Tantivy's merges in
        the background; one that ends after the reload that followed the commit writes a new
        meta.json (deleted documents dropped: other counts for BM25's statistics), which a fresh
        start reads. Kept, the daemon answered with the counts before the merge until its next
        commit, a restart with those after it. A folder that keeps its writer is reloaded when
        its meta.json changed since (a stat per look); a lazy one's merges end before its reload
        (its writer ends at each commit)."""
        pinned = _LOOKS.searchers
        if pinned is not None:
            # Keyed by the folder's id, the folder kept with it: no other folder gets its id
            # while the look lasts.
            held = pinned.get(id(self))
            if held is not None:
                return held[1]
            searcher = self._current_searcher()
            pinned[id(self)] = (self, searcher)
            return searcher
        return self._current_searcher()

    @searcher.setter
    def searcher(self, searcher: tantivy.Searcher) -> None:
        # Stamped before the reload that made ``searcher`` would be exact; unknown here, the next
        # look stats meta.json and reloads once more at most.
        self._searcher, self._meta_seen = searcher, None

    def _current_searcher(self) -> tantivy.Searcher:
        """``searcher`` outside a look: meta.json looked at."""
        searcher = self._searcher
        if self.lazy or self.closed:
            return searcher
        stamp = _meta_stamp(self.path)
        if stamp is None or stamp == self._meta_seen:
            return searcher
        try:
            with engine("reload", self.path):
                self.index.reload()
                searcher = self.index.searcher()
        except StoreError as exc:
            # The searcher it has answers; tried again when meta.json changes (a commit's reload
            # says a lasting fault), not at every look.
            self._meta_seen = stamp
            log.warning("bm25_reload_failed path=%s error=%s", self.path, exc)
            return searcher
        self._searcher, self._meta_seen = searcher, stamp
        self._note_files()
        log.debug("bm25_reloaded path=%s reason=meta.json changed (a merge ended)", self.path)
        return searcher

    def _note_files(self) -> None:
        """Remember the segment files the searcher reads, each as first seen: Tantivy never
        changes one once written (a change makes new files), so one that differs later was
        truncated or overwritten under the running daemon."""
        seen: dict[str, tuple[int, int, int]] = {}
        try:
            st = os.stat(self.path)
        except OSError:
            return
        self._where = st.st_dev, st.st_ino
        for name in _segment_files(self.path):
            kept = self._files.get(name)
            if kept is None:
                try:
                    st = os.stat(self.path / name)
                except OSError:
                    continue
                kept = st.st_size, st.st_mtime_ns, st.st_ino
            seen[name] = kept
        self._files = seen

    def damage(self) -> str | None:
        """What is wrong with a segment file the searcher reads (gone, truncated, overwritten),
        or None. A truncated term dictionary answered every search with nothing and no error
        until a restart opened it (and failed). Asked with the index's write lock held, so that
        no commit or merge changes the files meanwhile. A folder gone or replaced is none: the
        home's share unmounted (the lock keeper says so); moved aside and refilled, the inbox
        would be made anew on the bare mount point. A PassingFaultError when a file must be read
        and cannot be for a fault that passes (no file handle left, EIO, ESTALE, EACCES: not
        known, not damage)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        if (st.st_dev, st.st_ino) != self._where:
            return None
        for name, kept in list(self._files.items()):
            why, now = _changed(self.path / name, kept)
            if why is not None:
                return f"its file {name} {why}"
            self._files[name] = now  # the same bytes under a new stat: checked once
        return None

    def _clean(self, *, dropped: bool = False) -> None:
        """The files no commit references removed (see ``remove_unreferenced``); with no writer
        of ours open. The files the searcher was opened on stay (a merge since may have left
        them out of meta.json). ``dropped``: after changes were dropped on purpose (a rollback,
        a close), whose segment they are: said at info, not blamed on a commit cut short."""
        refused: list[str] = []
        removed = remove_unreferenced(self.path, keep=self._files, refused=refused)
        self.unremovable = refused[0] if refused else ""
        if refused:  # one line, not one a file: the cleanup runs after every failed commit
            log.warning(
                "bm25_leftovers_not_removed path=%s files=%d e.g.=%s", self.path, len(refused), refused[0]
            )
        if removed and dropped:
            log.info(
                "bm25_uncommitted_dropped path=%s files=%d (changes not committed, rolled back on "
                "purpose; redone from the index's records)",
                self.path,
                len(removed),
            )
        elif removed:
            log.warning(
                "bm25_leftovers_removed path=%s files=%d e.g.=%s", self.path, len(removed), sorted(removed)[0]
            )

    def recover_writer(self, *, deliberate: bool = False) -> None:
        """After a failed write or commit: drop the uncommitted documents (the manifest still
        marks those notes as being indexed, so the next sweep redoes them), remove the files the
        failure left (a cut commit's segment and delete files: a rollback keeps them, and one
        with the name the next commit takes failed every commit with FileAlreadyExists, each
        leaving six more files), and keep a usable writer. ``deliberate``: a rollback asked for
        (a refill cut by a stop), no failure: the files its changes left are said at info
        (``bm25_uncommitted_dropped``), not as a commit cut short. Nothing on a closed folder:
        its writer ended with the close."""
        self.dirty = False
        if self.closed:
            return
        if self._writer is not None:
            with contextlib.suppress(StoreError), engine("rollback"):
                self._writer.rollback()
        self._release()  # ends the writer: its merges done, the index lock released
        self._clean(dropped=deliberate)
        if self.lazy:
            return  # the next change opens a fresh writer
        try:
            self._writer_opened(cleaned=True)  # a new writer, opened now (on the folder cleaned)
        except StoreError as exc:
            log.error("bm25_writer_unavailable error=%s", exc)

    def commit(self) -> None:
        if not self.dirty:  # nothing to publish (an inbox no write touched)
            return
        try:
            with engine("commit", self.path):  # disk full, read-only folder, damaged segments
                self.writer.commit()
        except StoreError as exc:
            self.recover_writer()  # its cleanup says whether a leftover could not be removed
            # Counted only when the cleanup refused a file: one skipped (another reader held
            # the meta lock, the name kept for the searcher) proves nothing, and 3 such failures
            # had a healthy index refilled whole.
            if leftover_met(exc) and self.unremovable:
                self.leftover_failures += 1
                self.leftover_error = engine_message(exc)
            else:
                self.leftover_failures = 0
            raise
        self.leftover_failures = 0
        if self.lazy:
            self._release()
        stamp = _meta_stamp(self.path)  # before the reload: a merge ending after it is seen
        with engine("reload", self.path):
            self.index.reload()
            self._searcher, self._meta_seen = self.index.searcher(), stamp
        self._note_files()
        self.dirty = False
        self.commits += 1
        if self.commits % REOPEN_EVERY == 0:
            self._reopen()

    def stuck(self) -> str | None:
        """Why no commit will work until the index is made anew: ``STUCK_AFTER`` commits in a row
        failed on a leftover file the cleanup could not remove; None otherwise."""
        if self.leftover_failures < STUCK_AFTER:
            return None
        left = f"; not removed: {self.unremovable}" if self.unremovable else ""
        return (
            f"{self.leftover_failures} commits in a row of the keyword index {self.path} failed on "
            f"a file a commit cut short left there, which could not be removed ({self.leftover_error}{left})"
        )

    def close(self, *, removed: bool = False) -> None:
        """Its writer ended, its locks released. ``removed``: the folder is deleted next, changes
        not committed with it (nothing to drop, nothing written again for it)."""
        self.closed = True
        if self.read_only:
            # Its readers map the segment files: let go now (the daemon goes on writing the same
            # folder, whose merges delete those files; a map kept their space on a disk that ran full).
            self.__dict__.pop("_searcher", None)
            self.__dict__.pop("index", None)
            return
        if self._writer is None:
            return
        try:
            with engine("close", self.path):
                self._writer.wait_merging_threads()
        except StoreError as exc:  # a failed writer: nothing more to flush
            log.debug("bm25_close %s", exc)
        finally:
            # Dropped also when its end raised (an interrupt): kept, it held the index's lock, and
            # the reopen in this process took the index for another daemon's, at every try.
            self._writer = None
        if self.dirty and not removed:
            self._drop_uncommitted()

    def _drop_uncommitted(self) -> None:
        """After the writer ended at a close with changes not committed (a sweep or a refill cut
        by the stop; they are redone from the manifest): the segment Tantivy wrote for them as
        its writer ended removed. No commit ever references it: every clean stop during a sweep
        left such files, and the next start removed them with a warning that blamed a commit
        cut short. ``dirty`` stays: those changes were not committed (a commit now raises).
        Never raises: a close that failed here left the other folders' writers open, holding
        their locks (a reopen in this process found the index in use), and a lost index was
        never marked so; a file left is removed at the next open."""
        try:
            dropped = remove_unreferenced(self.path, keep=self._files)
        except OSError as exc:  # a share's fault (ESTALE, EIO, EACCES)
            log.warning("bm25_uncommitted_not_dropped path=%s error=%s", self.path, exc.strerror or exc)
            return
        if dropped:
            log.info(
                "bm25_uncommitted_dropped path=%s files=%d (changes not committed before the close; "
                "redone from the index's records)",
                self.path,
                len(dropped),
            )


def segment_counts(folder: Path) -> tuple[int, int]:
    """(deleted, all) documents of an index as its last commit left them, read from its meta.json
    (no index is opened to count); (0, 0) for an index never committed."""
    try:
        segments = json.loads((folder / "meta.json").read_text(encoding="utf-8"))["segments"]
    except FileNotFoundError:
        return 0, 0
    except (OSError, ValueError, KeyError, TypeError) as exc:
        # No file handles left, a share's fault: one that passes (PassingFaultError), not an
        # unreadable index.
        kind = read_error_class(exc) if isinstance(exc, OSError) else StoreError
        raise kind(f"BM25 index {folder} cannot be read: {engine_message(exc)}") from exc
    deleted = total = 0
    for seg in segments:
        total += int(seg.get("max_doc", 0))
        deleted += int((seg.get("deletes") or {}).get("num_deleted_docs", 0))
    return deleted, total


# The name part of an inbox folder being removed (an agent's name has no dot).
REMOVED_MARK = ".removed-"


def remove_folder(folder: Path) -> None:
    """An inbox's folder removed: renamed first to a name no agent has, so that a removal cut
    short (a crash, a file that would not go) leaves no part of an index that the next start
    opens as the agent's (it is removed then); in place when it cannot be renamed."""
    gone = folder.with_name(f"{folder.name}{REMOVED_MARK}{time.time_ns()}")
    try:
        folder.rename(gone)
    except FileNotFoundError:
        return
    except OSError:
        gone = folder
    shutil.rmtree(gone, ignore_errors=True)


# A Tantivy segment's file: its id, then a component (``idx``, ``term`` ...) or ``<opstamp>.del``.
_SEGMENT_FILE = re.compile(r"([0-9a-f]{32})\.(?:(\d+)\.del|[a-z]+)")


def remove_unreferenced(
    folder: Path, keep: Collection[str] = (), refused: list[str] | None = None
) -> list[str]:
    """The segment files in an index folder that its meta.json does not reference, removed (their
    names): a commit cut short (a full disk, a hard stop) leaves its new segments and delete
    files, which Tantivy removes only after a commit that works. A writer opened after a restart
    takes meta.json's opstamp again, comes to the same delete file names, and failed every commit
    with FileAlreadyExists. A referenced segment's delete files of other opstamps go too.

    Only with the index's writer lock free (no writer of this process or another: what looks
    unreferenced may be its segment being written), taken meanwhile; meta.json, Tantivy's own
    files and anything not named like a segment file stay. Nothing goes when meta.json is missing
    or unreadable (the open says so), nor the names in ``keep``. ``refused`` is told each file
    that could not be removed, and why."""
    # A new index (or none): nothing to compare with. Not Path.is_file, which re-raises what is
    # not "missing" (ESTALE, EIO, EACCES): a share's fault here left a close half done.
    if not os.path.isfile(folder / "meta.json"):
        return []
    with _writer_lock(folder) as held, _writer_lock(folder, _META_LOCK, wait=2.0) as meta_held:
        # The meta lock too: a reader holds it from reading meta.json until its segment files are
        # open (Tantivy's own cleanup takes it as well).
        if not (held and meta_held):
            return []
        removed = []
        for name in _unreferenced(folder):
            if name in keep:
                continue
            try:
                (folder / name).unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:  # left: a later commit that meets it fails (see ``Folder.stuck``)
                if refused is not None:
                    refused.append(f"{name}: {exc.strerror or exc}")
                continue
            removed.append(name)
        return removed


def _live_segments(folder: Path) -> dict[str, str | None]:
    """Each segment meta.json names (its id without dashes) and the opstamp of its delete file
    (None: it has none)."""
    out: dict[str, str | None] = {}
    for seg in json.loads((folder / "meta.json").read_text(encoding="utf-8"))["segments"]:
        deletes = seg.get("deletes")
        out[str(seg["segment_id"]).replace("-", "")] = str(deletes["opstamp"]) if deletes else None
    return out


def _referenced(m: re.Match[str], live: dict[str, str | None]) -> bool:
    """Whether the segment file ``m`` matched is one the segments ``live`` reference."""
    seg, opstamp = m.group(1), m.group(2)
    return seg in live and (opstamp is None or opstamp == live[seg])


def _unreferenced(folder: Path) -> list[str]:
    """The files of ``folder`` named like a segment's that its meta.json does not reference
    (none when it cannot be read)."""
    try:
        live = _live_segments(folder)
        names = os.listdir(folder)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    return [n for n in names if (m := _SEGMENT_FILE.fullmatch(n)) is not None and not _referenced(m, live)]


_WRITER_LOCK = ".tantivy-writer.lock"
_META_LOCK = ".tantivy-meta.lock"


@contextlib.contextmanager
def _writer_lock(folder: Path, name: str = _WRITER_LOCK, wait: float = 0.0) -> Iterator[bool]:
    """One of Tantivy's lock files of an index held (flock, as Tantivy takes it), asked for up
    to ``wait`` seconds; whether it could be: False while another holds it."""
    try:
        fd = os.open(folder / name, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield False
        return
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.01)
        yield True
    finally:
        os.close(fd)  # the lock goes with it


def _changed(path: Path, kept: tuple[int, int, int]) -> tuple[str | None, tuple[int, int, int]]:
    """How the file at ``path`` differs from ``kept`` (size, mtime, inode), or None; and its stat
    now. A file with its size and a new mtime or inode (touched, copied back from a backup, a sync
    tool's rewrite of the same bytes) is damage only if its bytes fail Tantivy's own checksum:
    taken for overwritten, the inbox was moved aside and refilled, and the answer said "damaged"."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "was deleted", kept
    except OSError as exc:
        _raise_passing(path, exc)  # a share's hiccup is no damage: asked again by a later search
        return f"cannot be read: {exc.strerror or exc}", kept
    now = st.st_size, st.st_mtime_ns, st.st_ino
    if st.st_size != kept[0]:
        return f"was cut short or grown ({st.st_size} bytes, was {kept[0]})", kept
    if now[1:] != kept[1:] and not _checksum_holds(path):
        return "was overwritten", kept
    return None, now


# Every file of a Tantivy segment ends in a footer: its JSON (with the CRC32 of the bytes before
# it), the JSON's length and this number, both u32 little-endian.
_FOOTER_MAGIC = 1337
_FOOTER_MOST = 4096  # a footer's JSON is about 90 bytes


def _raise_passing(path: Path, exc: OSError) -> None:
    """A fault that passes (no file handles left, EIO, ESTALE, EACCES: ``is_passing_fault``, as
    for a failed commit) raised as one; anything else returns (what the file holds is wrong)."""
    kind = read_error_class(exc)
    if issubclass(kind, PassingFaultError):
        raise kind(f"BM25 index file {path} cannot be read: {exc.strerror or exc}") from exc


def _checksum_holds(path: Path) -> bool:
    """Whether a segment file's bytes match the checksum in its footer (read whole: an inbox's
    files are small, and only a file whose stat changed is read)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        _raise_passing(path, exc)  # its bytes unknown, not wrong: asked again by a later search
        return False
    if len(data) < 8:
        return False
    size, magic = struct.unpack("<II", data[-8:])
    if magic != _FOOTER_MAGIC or size > min(_FOOTER_MOST, len(data) - 8):
        return False
    try:
        footer = json.loads(data[-8 - size : -8])
        crc = footer["crc"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(crc, int) and zlib.crc32(data[: -8 - size]) == crc


def _meta_stamp(folder: Path) -> tuple[int, int, int] | None:
    """meta.json's (mtime, size, inode): Tantivy writes it anew (a rename) at every commit and at
    the end of every merge. None when it cannot be read (the searcher's own use says why)."""
    try:
        st = os.stat(folder / "meta.json")
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def _segment_files(folder: Path) -> list[str]:
    """The files of the segments an index's last commit names (none when unreadable: the open or
    the search that reads it says so); not a delete file of another opstamp than its."""
    try:
        live = _live_segments(folder)
        names = os.listdir(folder)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    return [n for n in names if (m := _SEGMENT_FILE.fullmatch(n)) is not None and _referenced(m, live)]


def live_docs(folder: Path) -> int:
    """Documents of an index as its last commit left them."""
    deleted, total = segment_counts(folder)
    return total - deleted


def subfolders(folder: Path) -> list[Path]:
    """The folders in ``folder`` (none when it is missing or cannot be listed)."""
    try:
        return [p for p in folder.iterdir() if p.is_dir()]
    except OSError:
        return []


def check_layout(path: Path, layout: int = BM25_LAYOUT) -> None:
    """A keyword index of a newer layout (written by a newer sidecar: a downgrade) is refused, not
    replaced: the newer version finds it again after a re-upgrade (it was taken for an older one
    by its fields, deleted and rebuilt). One of an older layout than ``layout`` is outdated: read
    while it is refilled in a side folder (``index.upgrade``), or replaced when this version
    cannot read it at all (derived data)."""
    found = bm25_layout(path)
    if found is None or found == layout:
        return
    if found < layout:
        raise StoreOutdatedError(f"BM25 index {path} has layout {found}, this version writes {layout}")
    if found <= BM25_LAYOUT:  # asked to read it as an older layout: none of ours
        raise StoreOutdatedError(f"BM25 index {path} has layout {found}, not {layout}")
    raise StoreNewerError(
        f"the keyword index {path} was written by a newer sidecar (layout {found}; this version "
        f"reads up to {BM25_LAYOUT}): sidecar was downgraded? Nothing was deleted. Start the newer "
        "version again, or run `sidecar index --rebuild` on purpose to have this version build a "
        "new index from the notes"
    )
