"""A vector table's ANN index: when one is due (first at a row threshold, again as the table
doubles), building it in a child process (``sidecar.stores.annbuild``), ending a build on a clear,
a drop or a stop, and the record of the rows it was trained on. A part of ``VectorStore``, which
owns the table, its lock and its row count. Imports ``errors``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sidecar.contracts.errors import (
    IndexBuildInterruptedError,
    IndexBuildStoppedError,
    StoreError,
    engine_message,
    is_disk_full,
)
from sidecar.runtime.orphan import child_env

log = logging.getLogger(__name__)

BUILD_TIMEOUT_S = 6 * 3600  # IVF_PQ took 71 s at 94 k vectors on 2 cores; generous for millions
# The index is trained again (at an idle moment) once the table holds this many times the rows
# it was trained on. LanceDB's optimize files later rows under the centroids and codebooks of
# the first training, whose sample (the first rows embedded: memory, wiki, newest notes) need not
# look like the rest (BENCHMARKS.md, "Training the index again"). Doubling keeps the rebuilds to a
# handful over a table's life: 20 k, 40 k, 80 k, ...
RETRAIN_GROWTH = 2.0
# How many rows the index was trained on, kept inside the table's folder (LanceDB ignores other
# files there, and the record goes wherever the table goes: dropped, moved aside by a repair).
# LanceDB's own index statistics count the rows optimize folded in too, so they cannot tell.
ANN_RECORD = "sidecar-ann.json"
# A clear or a drop ends the index build running on the table and waits this long for it (the
# child is terminated: it goes at once unless the machine stalls).
END_BUILD_WAIT_S = 10.0
# A retrain that failed is tried again once the table has doubled past the rows it failed at, or
# after this long: a failure that will not repeat (memory freed since, a library upgraded) must
# not hold the index at its old training for good.
RETRAIN_FAILURE_KEPT_S = 7 * 86400.0


# The ANN index kinds (config search.annIndex): how lancedb's list_indices names each, how to
# build it, and how many times the limit it fetches to re-rank with the stored float vectors
# (refine_factor; None: the index's own distances are used). Measured at 94 k chunks with 65
# real queries, top 60 (BENCHMARKS.md): see VectorStore.ensure_ann.
ANN_KINDS: dict[str, tuple[str, Any, int | None]] = {
    "ivf_pq": (
        "IvfPq",
        lambda dim: _index().IvfPq(distance_type="cosine", num_sub_vectors=_sub_vectors(dim)),
        2,
    ),
    "ivf_sq": ("IvfSq", lambda dim: _index().IvfSq(distance_type="cosine"), None),
    "ivf_rq": ("IvfRq", lambda dim: _index().IvfRq(distance_type="cosine"), 4),
    "ivf_hnsw_sq": ("IvfHnswSq", lambda dim: _index().IvfHnswSq(distance_type="cosine"), None),
}


def _index() -> Any:
    import lancedb.index

    return lancedb.index


def _sub_vectors(dim: int) -> int:
    """PQ codes of one byte per 4 dimensions (96 for 384): with a 2x re-rank the top 10 matched
    exact search; 48 lost a tenth of the top 60."""
    for n in (dim // 4, dim // 8, dim // 16):
        if n and dim % n == 0:
            return n
    return 1


class AnnIndexing:
    """The ANN index of one table; mixed into ``VectorStore``, which sets the state below."""

    name: str
    path: Path
    dim: int
    ann_kind: str
    ann_threshold: int
    nprobes: int
    indexed: bool
    closed: bool
    closed_for_stop: bool
    trained_rows: int | None
    retrain_failed_rows: int | None
    retrain_failed_at: float | None
    build_running: dict[str, Any] | None
    last_build_seconds: float | None
    _table: Any
    _lock: threading.Condition
    _child_lock: threading.Lock
    _child: subprocess.Popen[str] | None
    _building: bool
    _stopped: bool
    _ending: bool
    _epoch: int
    _epoch_why: str

    if TYPE_CHECKING:

        def _wrap(self, what: str, fn: Any) -> Any: ...

        def _row_count(self) -> int: ...

    def _drop_indices(self) -> None:
        """Every index of the table goes (the caller holds the lock)."""
        for index in self._wrap("indices", self._table.list_indices):
            self._wrap("drop index", lambda n=index.name: self._table.drop_index(n))

    def _forget_index(self) -> None:
        """No index and no record (the caller holds the lock)."""
        self.indexed = False
        self.trained_rows = self.retrain_failed_rows = self.retrain_failed_at = None
        try:
            self._record_path().unlink(missing_ok=True)
        except OSError as exc:  # the index is gone: a stale record is not read without one
            log.warning("vector_index_record_failed table=%s error=%s", self.name, exc)

    def _end_build(self, why: str) -> bool:
        """End the index build running on this table (its child terminated) and wait for it, at
        most ``END_BUILD_WAIT_S``; True if none runs now. The caller holds the lock (released
        while waiting) and resets ``_ending`` when done: no build starts until then."""
        self._ending = True
        self._epoch += 1  # a build begun before is not recorded, even if it ends after the wait
        self._epoch_why = why
        for signal_child in ("terminate", "kill"):  # a child that ignores the first goes with the second
            with self._child_lock:
                child = self._child
            if child is not None and child.poll() is None:
                getattr(child, signal_child)()
            if self._lock.wait_for(lambda: not self._building, END_BUILD_WAIT_S):
                return True
        # Still running (its thread is stuck, or the machine stalls): an index it commits after
        # this is dropped when it ends (``_build_ended``), the epoch has moved on.
        log.warning(
            "vector_index_build_not_ended table=%s reason=%s waited_s=%.0f",
            self.name,
            why,
            2 * END_BUILD_WAIT_S,
        )
        return False

    def tune(self, ann_kind: str, nprobes: int, ann_threshold: int) -> None:
        """Apply reloaded search settings; another kind is built by the next ``ensure_ann``."""
        self.nprobes, self.ann_threshold = nprobes, ann_threshold
        if ann_kind != self.ann_kind:
            self.ann_kind = ann_kind
            self.indexed = False  # searches keep using the old index until the new one is built

    @property
    def _ann_type(self) -> str:
        return str(ANN_KINDS[self.ann_kind][0])

    @property
    def _refine(self) -> int | None:
        return ANN_KINDS[self.ann_kind][2]

    def _index_kinds(self) -> set[str]:
        """Kinds of the table's indices as lancedb names them (``IvfPq``, ...)."""
        return {str(i.index_type) for i in self._wrap("indices", self._table.list_indices)}

    def ann_due(self, *, retrain: bool = True) -> str | None:
        """Why an index build is due now: ``threshold`` (no index of the configured kind yet and
        ``ann_threshold`` rows reached), ``grown`` (``retrain``, and the table holds
        ``RETRAIN_GROWTH`` times the rows the index was trained on), else None. Cheap: the row
        count kept between writes, no LanceDB call while it is current.

        An index without a record (built before the record was kept) counts as trained at the
        threshold: that is where the earlier versions built it, at the first idle moment past it."""
        if self.closed or self.ann_threshold <= 0 or (self.indexed and not retrain):
            return None
        rows = self._row_count()
        if not self.indexed:
            return "threshold" if rows >= self.ann_threshold else None
        if retrain and rows >= self._retrain_at():
            return "grown"
        return None

    def _retrain_at(self) -> int:
        """Row count from which the index is trained again: ``RETRAIN_GROWTH`` times the rows it
        was trained on, or past the rows at which a retrain failed."""
        trained = self.trained_rows or self.ann_threshold
        failed = self.retrain_failed_rows or 0
        if self.retrain_failed_at is None or time.time() - self.retrain_failed_at > RETRAIN_FAILURE_KEPT_S:
            failed = 0
        return int(RETRAIN_GROWTH * max(trained, failed))

    def ensure_ann(self, *, retrain: bool = False) -> bool:
        """Build the configured index once the table is large enough, and with ``retrain`` build
        it again once the table has grown ``RETRAIN_GROWTH`` times past the rows it was trained on;
        True if one exists.

        Measured at 94 k chunks with 65 real queries, top 60 (``bench/ann.py``, BENCHMARKS.md):
        IVF_PQ (96-byte codes, 2x re-ranked) built in 71 s, 13 MB cached, 6.1 ms, 100 % of the
        exact top 10; IVF_SQ 2.4 s, 32 MB, 3.8 ms, 99.8 %; IVF_HNSW_SQ 14 s, 51 MB, 2.6 ms,
        89.8 %. An index of another kind (IVF_FLAT of 0.1, IVF_HNSW_SQ of 0.2) is replaced.
        Below the threshold an exact scan is fast enough. While an index is trained again,
        searches go on with the old one: the child commits the new index in one version, and
        this process moves to it only afterwards (``checkout_latest``).
        """
        if self.indexed and self.ann_due(retrain=retrain) is None:
            return True
        with self._lock:
            if self.closed:
                return False
            # another thread's build (the upkeep's retrain, the optimize), or a clear ending one
            if self._building or self._ending:
                return self.indexed
            kinds = self._index_kinds()
            rows = int(self._table.count_rows())
            trained = self.trained_rows
            if self._ann_type in kinds:
                self.indexed = True
            reason = self._build_reason(kinds, rows, retrain=retrain)
            if reason is None:
                return self.indexed
            self._building = True
            self.build_running = {"reason": reason, "rows": rows, "since": time.time()}
            epoch = self._epoch
        # Outside the lock and in a child process (sidecar.stores.annbuild): a build takes a
        # minute and hundreds of MB at 100 k vectors (IVF_PQ), and writes must not wait for it (a
        # memory write embeds and stores at once). Rows added meanwhile are searched exactly until
        # compaction folds them into the index.
        t0 = time.perf_counter()
        built, failure = False, None
        try:
            try:
                self.build_index()
                built = self._built()
            except StoreError as exc:
                failure = exc
        finally:
            passing = failure is not None and (
                isinstance(failure, IndexBuildInterruptedError) or is_disk_full(failure)
            )
            ended = self._build_ended(epoch, reason, rows, built=built, keep_failure=not passing)
        if ended is not None:
            self._log_ended(reason, rows, ended)
            message = str(failure or f"vector index build for {self.name} ended: {ended}")
            raise IndexBuildStoppedError(message) from failure
        if failure is not None or not built:
            if reason == "grown":
                log.warning(
                    "vector_index_retrain_deferred table=%s rows=%d retry_at_rows=%d",
                    self.name,
                    rows,
                    self._retrain_at(),
                )
            if failure is not None:
                raise failure
            raise StoreError(f"vector index build left no {self._ann_type} index on {self.name}")
        self.last_build_seconds = round(time.perf_counter() - t0, 1)
        log.info(
            "vector_index_built table=%s kind=%s reason=%s rows=%d trained_before=%s replaced=%s "
            "seconds=%.1f",
            self.name,
            self._ann_type,
            reason,
            rows,
            trained if reason == "grown" else None,
            ",".join(sorted(kinds)) or None,
            time.perf_counter() - t0,
        )
        return True

    def _built(self) -> bool:
        """After the child's build: this process moves to the version it committed; True if it
        holds an index of the configured kind."""
        if self.closed:  # replaced meanwhile: the build was ended, nothing to look at
            return False
        self._wrap("checkout", self._table.checkout_latest)
        return self._ann_type in self._index_kinds()

    def _build_ended(
        self, epoch: int, reason: str, rows: int, *, built: bool, keep_failure: bool = True
    ) -> str | None:
        """A build is over: record it (trained on ``rows``, or a retrain that failed there; that
        failure in the record too with ``keep_failure``), under the lock so that a clear cannot
        come between; why it was ended on purpose, if it was (then nothing is recorded: it did
        not fail)."""
        with self._lock:
            self._building = False
            self.build_running = None
            if epoch != self._epoch:
                ended: str | None = self._epoch_why
            elif self.closed:
                ended = "stopped" if self.closed_for_stop else "table replaced"
            elif self._stopped and not built:  # one that finished before the stop counts
                ended = "stopped"
            else:
                ended = None
            if epoch != self._epoch and built:
                self._drop_late_index()
            if ended is None and built:
                self.indexed, self.trained_rows, self.retrain_failed_rows = True, rows, None
                self.retrain_failed_at = None
                self._write_record(rows, None, None)
            elif ended is None and reason == "grown":
                self.retrain_failed_rows, self.retrain_failed_at = rows, time.time()
                if keep_failure:
                    self._write_record(self.trained_rows, rows, self.retrain_failed_at)
            self._lock.notify_all()
        return ended

    def _drop_late_index(self) -> None:
        """A build the clear could not end committed its index afterwards: trained on rows the
        clear deleted, it goes (the caller holds the lock; the refilled table gets its first index
        at the threshold)."""
        try:
            self._drop_indices()
        except StoreError as exc:
            log.warning("vector_index_late_drop_failed table=%s error=%s", self.name, exc)
        self._forget_index()

    def _log_ended(self, reason: str, rows: int, why: str) -> None:
        if reason == "grown":  # the old index serves on; the next start or doubling trains again
            log.info("vector_index_retrain_stopped table=%s rows=%d reason=%s", self.name, rows, why)
        else:
            log.info("vector_index_build_stopped table=%s rows=%d reason=%s", self.name, rows, why)

    def _build_reason(self, kinds: set[str], rows: int, *, retrain: bool) -> str | None:
        """``ann_due``'s answer from the table itself (its index kinds and row count)."""
        if self.ann_threshold <= 0:
            return None
        if self._ann_type in kinds:
            grown = retrain and rows >= self._retrain_at()
            return "grown" if grown else None
        if rows < self.ann_threshold:
            return None
        return "kind" if kinds else "threshold"

    def _record_path(self) -> Path:
        return self.path / f"{self.name}.lance" / ANN_RECORD

    def _read_record(self) -> tuple[int | None, int | None, float | None]:
        """(rows the table's index was trained on, rows at which a retrain of it failed, when it
        failed), if it has an index and its record names the configured kind; None where not
        known. A failure without its time counts as none: it is tried again."""
        if not self.indexed:
            return None, None, None
        try:
            record = json.loads(self._record_path().read_text(encoding="utf-8"))
            if record.get("kind") != self._ann_type:
                return None, None, None
            counts = record.get("rows"), record.get("failed_rows")
            failed_at = record.get("failed_at")
        except (OSError, ValueError, AttributeError):
            return None, None, None
        rows, failed = (n if isinstance(n, int) and n > 0 else None for n in counts)
        if failed is None or not isinstance(failed_at, int | float):
            return rows, None, None
        return rows, failed, float(failed_at)

    def _write_record(self, rows: int | None, failed: int | None, failed_at: float | None) -> None:
        """Keep the trained row count (and a failed retrain's) for the next start (written whole,
        then renamed). A record that cannot be written costs one more training after a restart,
        nothing else."""
        path = self._record_path()
        tmp = path.with_name(path.name + ".tmp")
        record: dict[str, Any] = {"kind": self._ann_type, "rows": rows}
        if failed is not None:
            record["failed_rows"], record["failed_at"] = failed, round(failed_at or time.time())
        try:
            tmp.write_text(json.dumps(record), encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("vector_index_record_failed table=%s error=%s", self.name, exc)

    def build_index(self) -> None:
        """Run ``sidecar.stores.annbuild`` for this table; StoreError with its last words."""
        cmd = self._build_command()
        with self._child_lock:  # ``stop_build``, ``_end_build`` see this child or keep it from starting
            if self._stopped or self._ending:
                why = "the daemon stops" if self._stopped else self._epoch_why
                raise StoreError(f"vector index build for {self.name} not started: {why}")
            try:
                # Our own interpreter and module, arguments from our own config: no shell.
                child = subprocess.Popen(  # noqa: S603
                    cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=child_env()
                )
            except OSError as exc:
                raise StoreError(f"vector index build for {self.name} failed: {engine_message(exc)}") from exc
            self._child = child
        try:
            _, err = child.communicate(timeout=BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            child.kill()
            child.communicate()
            raise IndexBuildInterruptedError(
                f"vector index build for {self.name} failed: {engine_message(exc)}"
            ) from exc
        finally:
            self._child = None
        if child.returncode != 0:
            last = (err.strip().splitlines() or ["no output"])[-1]
            # Killed by a signal (the kernel's out-of-memory killer): may not happen next time.
            error = IndexBuildInterruptedError if child.returncode < 0 else StoreError
            raise error(f"vector index build for {self.name} failed ({child.returncode}): {last}")

    def _build_command(self) -> list[str]:
        args = [str(self.path), self.name, self.ann_kind, str(self.dim)]
        return [sys.executable, "-m", "sidecar.stores.annbuild", *args]

    def stop_build(self) -> None:
        """End a running index build and start none after it (the daemon is stopping); the next
        start builds again."""
        with self._child_lock:
            self._stopped = True
            child = self._child
        if child is not None and child.poll() is None:
            child.terminate()
