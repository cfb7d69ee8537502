"""Vectors in LanceDB: the semantic arm. One table per model (id, dimension, pooling), so
vectors of different models never mix. Rows hold the chunk id, key, source, agent and vector;
the chunk text lives in the manifest. Imports ``errors``; its parts ``vector_index`` (the ANN
index) and ``centre`` (the table's centre, for hubness).
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sidecar.contracts.errors import (
    StoreError,
    StoresClosedError,
    engine_message,
    store_error_class,
)
from sidecar.stores import closing, vector_index
from sidecar.stores.centre import Centre, centre_path, forget_centre, read_centre, write_centre
from sidecar.stores.salvage import Salvage
from sidecar.stores.vector_index import AnnIndexing

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

# Without compaction, thousands of small updates leave thousands of fragments and queries slow
# down tenfold (measured): compact after this many writes.
OPTIMIZE_EVERY = 100
# Old versions are dropped by optimize; a short grace keeps LanceDB from warning that a reader of
# an older version could fail (this process is the only reader, but the margin costs nothing).
_KEEP_VERSIONS = timedelta(seconds=30)


def lancedb_module() -> Any:
    """lancedb, imported on first use: its import takes about a second (its REST client's models),
    which a daemon's start should not wait for before keyword indexing can begin (``warm``)."""
    import lancedb

    return lancedb


def warm() -> None:
    """Import lancedb ahead of its first use (the daemon does this in a thread of its own while the
    first sweep runs, so a model that is ready finds its table's library loaded)."""
    lancedb_module()


# LanceDB's caches with bounds: the metadata cache otherwise keeps the manifests and deletion
# files of every version a long run of memory writes creates. bench/soak.py, first burst of
# 1,700 memory writes: +86 MB settled RSS with 64 MB, +39 MB with 16 MB; 10k-note serving
# latency unchanged (13.0 ms p50). The index cache needs ~13 MB at 94 k vectors with IVF_PQ.
INDEX_CACHE = 256 << 20
METADATA_CACHE = 16 << 20
# The table's centre (for hubness) from this many sampled rows (~1.5 MB at 384 dims), and not
# below this many rows: a handful of notes has no meaningful centre.
CENTROID_SAMPLE = 4096
CENTROID_MIN_ROWS = 200
# The churn counted against the centre is written with it once it grew by this share of the
# centre's rows (1/100: a tenth of what takes the centre again), else at a compaction or a stop.
CENTRE_UNSAVED_SHARE = 100
# Up to this many rows and without an ANN index, a query is answered from a copy of the vectors
# in memory (1.5 KB a row at 384 dims, 30 MB at the most) instead of by a LanceDB query, whose
# fixed cost alone was 6 ms a query, 10 ms at 4,001 rows (numpy: 0.2 ms). Cosines agree with
# LanceDB's to one float32 step. The copy is read once; each write of this process then changes
# it as it changes the table (rows appended, rows dropped), so no search reads the table again:
# under a load of memory writes that read (one LanceDB scan over a fragment per write) was most
# of a slow search's time (10-150 ms, bench/chaos.py --only mixed).
EXACT_MAX_ROWS = 20_000


@dataclass(frozen=True)
class _Exact:
    """The table in memory, as of one write generation (rows in the table's order)."""

    generation: int
    ids: list[str]
    vectors: np.ndarray[Any, Any]  # float32, one row per chunk
    norms: np.ndarray[Any, Any]
    sources: np.ndarray[Any, Any]
    agents: np.ndarray[Any, Any]
    keys: list[str]

    def appended(self, rows: Sequence[tuple[str, str, str, str]], vectors: np.ndarray[Any, Any]) -> _Exact:
        """This copy with rows added at the end, as LanceDB's add appends them."""
        return _Exact(
            self.generation,
            self.ids + [r[0] for r in rows],
            np.concatenate([self.vectors, vectors]),
            np.concatenate([self.norms, _norms(vectors)]),
            np.concatenate([self.sources, np.asarray([r[2] for r in rows], dtype=str)]),
            np.concatenate([self.agents, np.asarray([r[3] for r in rows], dtype=str)]),
            self.keys + [r[1] for r in rows],
        )

    def without(self, column: str, values: Sequence[str]) -> _Exact:
        """This copy without the rows whose ``chunk_id`` or ``key`` is one of ``values``."""
        drop = set(values)
        names = self.ids if column == "chunk_id" else self.keys
        keep = np.fromiter((n not in drop for n in names), dtype=bool, count=len(names))
        if keep.all():
            return self
        rows = np.flatnonzero(keep).tolist()
        return _Exact(
            self.generation,
            [self.ids[r] for r in rows],
            self.vectors[keep],
            self.norms[keep],
            self.sources[keep],
            self.agents[keep],
            [self.keys[r] for r in rows],
        )


class VectorsClosedError(StoresClosedError):
    """A call on a vector table after the stop closed it (``VectorStore.close``): refused before
    it reaches LanceDB; answered ``busy``."""


class _Closed:
    """What a closed handle holds in place of LanceDB's connection and table: every use raises the
    stop's error (a search that took the handle before the close gets ``busy``, never a None)."""

    def __init__(self, error: StoresClosedError) -> None:
        self._error = error

    def __getattr__(self, name: str) -> Any:
        raise self._error


def _schema(model_id: str, dim: int, pooling: str) -> pa.Schema:
    """The table's schema. pyarrow is imported here and in ``add``, where vectors are used: a
    keyword-only daemon opens no table and so never loads it."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("chunk_id", pa.string()),
            pa.field("key", pa.string()),
            pa.field("source", pa.string()),
            pa.field("agent", pa.string()),
            pa.field("vector", pa.list_(pa.float32(), dim)),
        ],
        metadata={"model": model_id, "dim": str(dim), "pooling": pooling},
    )


def _norms(vectors: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    norms: np.ndarray[Any, Any] = np.sqrt(np.einsum("ij,ij->i", vectors, vectors, dtype=np.float32))
    return norms


def _empty_copy(dim: int) -> _Exact:
    none = np.zeros(0, dtype=str)
    return _Exact(0, [], np.zeros((0, dim), dtype=np.float32), np.zeros(0, dtype=np.float32), none, none, [])


def table_name(model_id: str, dim: int, pooling: str) -> str:
    return f"vectors_{_safe(model_id)}_{dim}_{pooling}"


def table_prefix(model: str) -> str:
    """How the names of a model's tables begin (``model``: its name, without the digest)."""
    return f"vectors_{_safe(model)}_"


def _safe(model_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", model_id).strip("_").lower()


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _in_list(column: str, values: Sequence[str]) -> str:
    return f"{column} IN ({', '.join(_quote(v) for v in values)})"


class VectorStore(AnnIndexing):
    """One LanceDB table for one model; thread-safe writes, concurrent reads."""

    retrain_failed_at: float | None = None  # when ``retrain_failed_rows`` failed (see __init__)
    _centre: Centre | None  # the table's centre for hubness (see __init__)

    def __init__(
        self,
        path: Path,
        model_id: str,
        dim: int,
        pooling: str,
        *,
        optimize_every: int = OPTIMIZE_EVERY,
        ann_threshold: int = 20_000,
        nprobes: int = 12,
        ann_kind: str = "ivf_pq",
    ) -> None:
        self.optimize_every = optimize_every
        self.ann_threshold = ann_threshold
        self.nprobes = nprobes
        self.ann_kind = ann_kind
        self.indexed = False
        self.path = path
        self.model_id = model_id
        self.dim = dim
        self.name = table_name(model_id, dim, pooling)
        # The writes' lock; a Condition, notified whenever an index build ends (``_end_build``).
        self._lock = threading.Condition(threading.Lock())
        self._writes = 0
        self._last_write = 0.0  # monotonic
        # When the version a compaction replaced is older than _KEEP_VERSIONS, so a cleanup pass
        # can drop it (monotonic; None: none due).
        self._cleanup_at: float | None = None
        self._building = False  # an index build runs outside the lock; compaction waits for it
        # Set by ``close`` when the table is replaced (a repair): another table may stand at the
        # same path, and this handle's writes would land in it naming this one's data files. And
        # by the stop's close (``closed_for_stop`` too): the index lock is released next, and
        # another daemon may write the table then.
        self.closed = self.closed_for_stop = False
        self._child: subprocess.Popen[str] | None = None
        # Set by ``stop_build`` (the daemon stops): no build child is started after it. A retrain
        # the idle upkeep began a moment after the stop ended the running ones ran on, and the
        # stop waited for it past its bound.
        self._stopped = False
        self._child_lock = threading.Lock()
        # A clear or a drop ends the running build (``_end_build``): none starts while it runs,
        # and one begun before it (trained on rows that are gone) is not recorded, even if it
        # ends only later.
        self._ending, self._epoch, self._epoch_why = False, 0, ""
        # The table's centre (``centroid``), whether this open read the kept one yet, and the
        # churn its record holds (the count in memory runs ahead of it: ``_count_churn``)
        self._centre, self._centre_read, self._centre_saved = None, False, 0
        # Row count for the centroid check, kept between writes: count_rows on every query cost a
        # round trip through lancedb's event loop. ``_generation`` counts writes, so a count read
        # while a write lands is not kept.
        self._rows: int | None = None
        self._generation = 0
        self._rows_lock = threading.Lock()
        self._exact: _Exact | None = None
        # One reader fills the copy, one search takes the centre; the others wait for it.
        self._exact_lock, self._centre_lock = threading.Lock(), threading.Lock()
        # Rows the index was trained on (None: no index, or built by a version that kept no
        # record; see ``ann_due``).
        self.trained_rows: int | None = None
        # Rows at which a retrain last failed, and when (epoch seconds): the next one waits until
        # the table has grown RETRAIN_GROWTH times past them or RETRAIN_FAILURE_KEPT_S went by,
        # not for the next idle minute (the old index serves meanwhile). Kept in the record too
        # (one that fails every time is not tried again at every restart), unless its cause
        # passes (the child killed, the time limit, a full disk): the next start tries again.
        self.retrain_failed_rows: int | None = None
        # An index build running now: {"reason", "rows", "since" (epoch)}; and the last one's
        # length in seconds. Shown by status (vectors wait while a first index is built).
        self.build_running: dict[str, Any] | None = None
        self.last_build_seconds: float | None = None
        self.schema = _schema(model_id, dim, pooling)
        try:
            path.mkdir(parents=True, exist_ok=True)
            lancedb = lancedb_module()
            session = lancedb.Session(
                index_cache_size_bytes=INDEX_CACHE, metadata_cache_size_bytes=METADATA_CACHE
            )
            self._db = lancedb.connect(str(path), session=session)
            existing = self._db.list_tables().tables
            if self.name in existing:
                self._table = self._db.open_table(self.name)
                self._check_schema()
                # Probes and re-ranking apply from the first search, not from the first idle tick.
                self.indexed = self._ann_type in self._index_kinds()
                self.trained_rows, self.retrain_failed_rows, self.retrain_failed_at = self._read_record()
            else:
                self._table = self._create()
                self.created = True
                return
        except StoreError:
            raise
        except (OSError, ValueError, RuntimeError) as exc:
            raise store_error_class(exc)(
                f"vector table {self.name} in {path} cannot be opened: {engine_message(exc)}"
            ) from exc
        self.created = False

    def _create(self) -> Any:
        """The new, empty table; a create that fails (a full disk) leaves no folder behind, which
        the next start would take for a damaged table and move aside."""
        folder = self.path / f"{self.name}.lance"
        existed = folder.exists()
        try:
            return self._db.create_table(self.name, schema=self.schema)
        except BaseException:
            if not existed:
                shutil.rmtree(folder, ignore_errors=True)
            raise

    def _check_schema(self) -> None:
        meta = self._table.schema.metadata or {}
        got_model = meta.get(b"model", b"").decode()
        got_dim = meta.get(b"dim", b"0").decode()
        vector_type = self._table.schema.field("vector").type
        if (
            got_model != self.model_id
            or got_dim != str(self.dim)
            or vector_type != self.schema.field("vector").type
        ):
            raise StoreError(
                f"vector table {self.name} records model {got_model!r} dim {got_dim}, expected "
                f"{self.model_id!r} dim {self.dim}"
            )
        self._table.count_rows()  # touches the manifest: a corrupt table fails here, not mid-query

    def add(self, rows: Sequence[tuple[str, str, str, str]], vectors: np.ndarray[Any, Any]) -> None:
        """Rows of (chunk_id, key, source, agent) with their vectors."""
        if not rows:
            return
        import pyarrow as pa

        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).ravel())
        data = pa.table(
            {
                "chunk_id": [r[0] for r in rows],
                "key": [r[1] for r in rows],
                "source": [r[2] for r in rows],
                "agent": [r[3] for r in rows],
                "vector": pa.FixedSizeListArray.from_arrays(flat, self.dim),
            },
            schema=self.schema,
        )
        vecs = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(rows), self.dim)
        with self._lock:
            self._write("add", lambda: self._table.add(data), lambda e: e.appended(rows, vecs))
            self._count_churn(len(rows))
            self._count_write()

    def delete_ids(self, chunk_ids: Sequence[str]) -> None:
        self._delete("chunk_id", chunk_ids)

    def delete_keys(self, keys: Sequence[str]) -> None:
        self._delete("key", keys)

    def _delete(self, column: str, values: Sequence[str]) -> None:
        if not values:
            return
        with self._lock:
            # The rows deleted count against the centre (``centroid``). A failed part leaves them
            # uncounted: the net change of the row count still does (``Centre.stale``).
            before = self._row_count()
            for start in range(0, len(values), 200):
                part = values[start : start + 200]
                where = _in_list(column, part)
                self._write(
                    "delete",
                    lambda w=where: self._table.delete(w),
                    lambda e, c=column, p=part: e.without(c, p),
                )
                self._count_write()
            self._count_churn(before - self._row_count())

    def clear(self) -> None:
        """Remove every row (a rebuild, a model switch's table made again). The table is as new:
        a build running over the old rows is ended, and the index and its record go, so the
        refilled table gets its first index at ``ann_threshold`` and is trained again as it
        doubles from there. (Kept, the old index counted as trained on the old row count: none
        was trained again until the refilled table had doubled past it.)"""
        with self._lock:
            self._check_open("clear")
            try:
                self._end_build("table emptied")
                self._write("clear", lambda: self._table.delete("true"), lambda _e: _empty_copy(self.dim))
                try:
                    self._drop_indices()  # kept, it would hold none of the new rows
                finally:  # the rows are gone: the record of the index trained on them goes too
                    self._forget_index()
                    # and their centre: the refilled rows' own is taken at the first search
                    with self._centre_lock:
                        self._centre, self._centre_read, self._centre_saved = None, True, 0
                        forget_centre(self._centre_path(), self.name)
            finally:
                self._ending = False
            self._count_write()

    def close(self, *, stopping: bool = False, wait: float | None = None) -> bool:
        """This handle writes no more: its table is being replaced (a repair moves it aside and
        makes a new one at the same path). Waits for a write or compaction through it that runs.
        A write through the handle after it (a batch computed for the old table) would commit a
        version of the new table that names the old table's data files, which every read of the
        new table then fails on ("Not found"): it raises instead, and compaction and index builds
        through it do nothing.

        ``stopping`` (the process exits next, the index lock is released before): closed at once
        for every write that takes the lock from now on (refused ``VectorsClosedError``, busy), a
        write under way waited for ``CLOSE_WAIT_S`` at most (a hung disk must not hang the stop),
        then LanceDB's connection and table let go: a search after it is refused too. False when
        a write under way or an index build's child did not end within that wait: it may still
        land, so the stop keeps the index locked until the process exits (which ends both).
        ``wait``: the stop's wait instead of ``CLOSE_WAIT_S`` (less once the stop's time runs out)."""
        self.stop_build()
        if not stopping:
            with self._lock:
                self.closed = True
            return True
        bound = closing.CLOSE_WAIT_S if wait is None else wait
        deadline = time.monotonic() + bound
        # The churn counted since the centre's record was written, kept first (refused once
        # closed) in the same bound: a search taking the centre holds its lock over a LanceDB
        # read, and one hung on a disk hung the stop. Not kept, the next start counts that churn
        # again (as after a kill); its holder may still write the centre's file, so the lock is
        # kept until the process exits (False) as for a write.
        centre_kept = self.keep_centre(wait=bound)
        # Set before the wait: the write under way is the last one (a write looks under the lock).
        self.closed_for_stop = self.closed = True
        if not self._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            log.warning("vectors_close_waits table=%s (a write under way did not end in time)", self.name)
            return False
        try:
            self._let_go()
        finally:
            self._lock.release()
        return self._build_child_ended(max(0.0, deadline - time.monotonic())) and centre_kept

    def _let_go(self) -> None:
        """LanceDB's handles dropped (the caller holds the lock): each later use raises."""
        error = self._stop_error("use")
        db, self._db, self._table = self._db, _Closed(error), _Closed(error)
        try:
            db.close()
        except (OSError, ValueError, RuntimeError) as exc:  # let go all the same
            log.debug("vectors_close table=%s error=%s", self.name, exc)

    def _build_child_ended(self, wait: float) -> bool:
        """Whether no index build's child runs (``stop_build`` ended it; waited ``wait`` at most):
        a child still running may commit its index into the table."""
        with self._child_lock:
            child = self._child
        if child is None:
            return True
        try:
            child.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            log.warning("vectors_close_waits table=%s (an index build did not end in time)", self.name)
            return False
        return True

    def _stop_error(self, what: str) -> VectorsClosedError:
        return VectorsClosedError(
            f"vector {what} on {self.name} refused: the vector table is closed (the daemon is stopping)"
        )

    def _check_open(self, what: str) -> None:
        """Raise if the handle was closed (the caller holds the lock)."""
        if self.closed_for_stop:
            raise self._stop_error(what)
        if self.closed:
            raise StoreError(
                f"vector {what} on {self.name} refused: that table was replaced, and this handle of "
                "the old one would write into the new one"
            )

    def drop(self) -> None:
        """Remove this table (after a newer model's table took over). An index build running on
        it (a retrain begun before the switch) is ended first: dropped under it, it failed."""
        with self._lock:
            self._check_open("drop")
            try:
                if not self._end_build("table dropped"):
                    raise StoreError(
                        f"vector table {self.name} not dropped yet: its index build did not end "
                        f"within {2 * vector_index.END_BUILD_WAIT_S:.0f} s"
                    )
                self._wrap("drop", lambda: self._db.drop_table(self.name))
            finally:
                self._ending = False

    def ids(self) -> set[str]:
        """Every chunk id in the table (one column read; used by the start-up reconcile)."""
        return set(self.id_list())

    def id_list(self) -> list[str]:
        """The chunk id of every row, repeats included (a repeat means a doubled vector)."""
        table = self._wrap("scan", lambda: self._table.search().select(["chunk_id"]).limit(None).to_arrow())
        return list(table.column("chunk_id").to_pylist())

    def vectors_of(self, chunk_ids: Sequence[str]) -> dict[str, np.ndarray[Any, Any]]:
        """The stored vectors of some chunks (for explanations)."""
        if not chunk_ids:
            return {}
        table = self._wrap(
            "read",
            lambda: (
                self._table.search()
                .where(_in_list("chunk_id", list(chunk_ids)))
                .select(["chunk_id", "vector"])
                .limit(len(chunk_ids))
                .to_arrow()
            ),
        )
        flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        vectors = np.asarray(flat, dtype=np.float32).reshape(-1, self.dim)
        return dict(zip(table.column("chunk_id").to_pylist(), vectors, strict=True))

    def readable_rows(self, batch: int = 5000) -> Salvage[tuple[list[tuple[str, str, str, str]], Any]]:
        """The rows that can be read, in batches of (rows, vectors) as ``add`` takes them, past
        unreadable runs (a truncated data file: see ``stores.salvage``)."""
        columns = ["chunk_id", "key", "source", "agent", "vector"]

        def read(lo: int, hi: int) -> tuple[list[tuple[str, str, str, str]], Any] | None:
            try:
                got = self._table.take_offsets(list(range(lo, hi))).select(columns).to_arrow()
            except (OSError, ValueError, RuntimeError) as exc:
                log.debug("vectors_unreadable table=%s rows=%d-%d error=%s", self.name, lo, hi, exc)
                return None
            rows = list(
                zip(*(got.column(c).to_pylist() for c in ("chunk_id", "key", "source", "agent")), strict=True)
            )
            flat = got.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            return rows, np.asarray(flat, dtype=np.float32).reshape(-1, self.dim)

        return Salvage(self.count(), read, batch)

    def verify(self) -> None:
        """Read the whole table once (every id, every vector by a flat scan); StoreError if any
        part cannot be read. Opening only reads the manifest: a truncated data file passes it and
        then fails every search."""
        probe = np.random.default_rng(0).standard_normal(self.dim).astype(np.float32)
        self.id_list()
        query: Any = self._table.search(probe)  # a vector query (see search)
        self._wrap("verify", query.distance_type("cosine").bypass_vector_index().limit(1).to_arrow)

    def version(self) -> int:
        return int(self._wrap("version", lambda: self._table.version))

    def files_signature(self) -> str:
        """Name, size and mtime of the table's data and index files, digested: a file truncated,
        overwritten or deleted while the daemon was stopped changes it (the table's version does
        not, and the table still opens)."""
        folder = self.path / f"{self.name}.lance"
        digest = hashlib.sha256()
        for part in ("data", "_indices"):
            for file in sorted((folder / part).rglob("*")):
                try:
                    st = file.stat()
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    digest.update(f"{file.relative_to(folder)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return digest.hexdigest()[:16]

    def count(self) -> int:
        return int(self._wrap("count", self._table.count_rows))

    def _row_count(self) -> int:
        """``count``, read again only after a write of this process (the only writer)."""
        rows = self._rows
        if rows is None:
            generation = self._generation
            rows = self.count()
            with self._rows_lock:
                if generation == self._generation:
                    self._rows = rows
        return rows

    def search(
        self,
        vector: np.ndarray[Any, Any],
        limit: int,
        sources: Sequence[str] | None = None,
        agent_scope: str | None = None,
    ) -> list[tuple[str, float, float]]:
        """(chunk_id, cosine similarity, hubness), best first; same filters as the BM25 arm.

        Hubness is how much closer than average a chunk lies to the centre of the whole table
        (``centroid``): a chunk about everything a little (a command list, an index page) is near
        every query, and ranking can discount it. 0 while the table is too small to tell."""
        if self.closed_for_stop:
            raise self._stop_error("search")
        centre = self.centroid()
        exact = self._exact_copy()
        if exact is not None:
            return self._search_exact(exact, vector, limit, sources=sources, agent=agent_scope, centre=centre)
        filters = []
        if sources:
            filters.append(_in_list("source", list(sources)))
        if agent_scope is not None:
            filters.append(f"(source IN ('vault', 'wiki') OR agent = {_quote(agent_scope)})")
        # lancedb types search() as the base builder; with a vector it is a vector query.
        query: Any = self._table.search(vector.astype(np.float32))
        query = query.distance_type("cosine").limit(limit)
        if self.indexed:
            query = query.nprobes(self.nprobes)
            if self._refine:
                query = query.refine_factor(self._refine)
        query = query.select(["chunk_id", "_distance"] + (["vector"] if centre is not None else []))
        if filters:
            query = query.where(" AND ".join(filters), prefilter=True)
        table = self._wrap("search", query.to_arrow)
        ids = table.column("chunk_id").to_pylist()
        dists = table.column("_distance").to_pylist()
        hubs = [0.0] * len(ids)
        if centre is not None and ids:
            flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
            rows = np.asarray(flat, dtype=np.float32).reshape(-1, self.dim)
            hubs = (rows @ centre - float(centre @ centre)).tolist()
        return [(i, 1.0 - float(d), float(h)) for i, d, h in zip(ids, dists, hubs, strict=True)]

    def _exact_copy(self) -> _Exact | None:
        """The in-memory copy for an exact search (read when there is none, kept in step by the
        writes); None when the table has an ANN index or too many rows for one."""
        if self.indexed:
            self._exact = None  # the index answers now: writes stop keeping a copy
            return None
        exact = self._exact
        if exact is not None and exact.generation == self._generation:
            return exact
        if self._row_count() > EXACT_MAX_ROWS:
            self._exact = None
            return None
        with self._exact_lock:
            exact = self._exact
            if exact is not None and exact.generation == self._generation:
                return exact
            generation = self._generation  # a write landing during the read makes it stale at once
            exact = self._read_copy(generation)
            with self._rows_lock:
                if generation == self._generation:  # else a write landed meanwhile: its copy stands
                    self._exact = exact
                    self._rows = len(exact.ids) if exact is not None else self._rows
            return exact

    def _read_copy(self, generation: int) -> _Exact | None:
        """The whole table read into memory (None above ``EXACT_MAX_ROWS`` rows)."""
        table = self._wrap(
            "scan",
            lambda: (
                self._table.search()
                .select(["chunk_id", "key", "source", "agent", "vector"])
                .limit(None)
                .to_arrow()
            ),
        )
        if table.num_rows > EXACT_MAX_ROWS:
            return None
        flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        vectors = np.ascontiguousarray(np.asarray(flat, dtype=np.float32).reshape(-1, self.dim))
        return _Exact(
            generation,
            table.column("chunk_id").to_pylist(),
            vectors,
            _norms(vectors),
            np.asarray(table.column("source").to_pylist(), dtype=str),
            np.asarray(table.column("agent").to_pylist(), dtype=str),
            table.column("key").to_pylist(),
        )

    def _search_exact(
        self,
        exact: _Exact,
        vector: np.ndarray[Any, Any],
        limit: int,
        *,
        sources: Sequence[str] | None,
        agent: str | None,
        centre: np.ndarray[Any, Any] | None,
    ) -> list[tuple[str, float, float]]:
        """``search`` over the in-memory copy: LanceDB's cosine distance, in float32."""
        rows = np.arange(len(exact.ids))
        matrix, norms = exact.vectors, exact.norms
        keep = np.ones(len(rows), dtype=bool)
        if sources:
            keep &= np.isin(exact.sources, list(sources))
        if agent is not None:
            keep &= np.isin(exact.sources, ["vault", "wiki"]) | (exact.agents == agent)
        if not keep.all():  # a copy of the rows that pass, only when some do not
            rows = rows[keep]
            matrix, norms = matrix[rows], norms[rows]
        if not len(rows) or limit <= 0:
            return []
        query = np.asarray(vector, dtype=np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            # einsum, not BLAS: OpenBLAS spreads this product over threads that, on a busy
            # machine, wait for the cores (11 ms against 1.2 ms single-threaded at 4,001 rows).
            sims = np.einsum("ij,j->i", matrix, query) / (norms * np.float32(np.linalg.norm(query)))
        dists = np.nan_to_num(np.float32(1.0) - sims.astype(np.float32), nan=2.0)
        if len(rows) > limit:  # the nearest ``limit``, then in order (ties: table order)
            part = np.argpartition(dists, limit - 1)[:limit]
            top = part[np.lexsort((part, dists[part]))]
        else:
            top = np.lexsort((np.arange(len(rows)), dists))
        chosen = rows[top]
        hubs = [0.0] * len(chosen)
        if centre is not None:
            hubs = (exact.vectors[chosen] @ centre - float(centre @ centre)).tolist()
        return [
            (exact.ids[r], 1.0 - float(d), float(h))
            for r, d, h in zip(chosen.tolist(), dists[top].tolist(), hubs, strict=True)
        ]

    def centroid(self) -> np.ndarray[Any, Any] | None:
        """Mean of (a sample of) the stored vectors, kept until rows added and deleted since
        reach a tenth of it (``Centre.stale``); None below ``CENTROID_MIN_ROWS`` rows, where a
        mean says little. Kept with the table, its churn too (``stores.centre``): a fresh start
        uses the centre the last one took and counts on from there, so the same index gives the
        same hubness in whatever process serves it."""
        count = self._row_count()
        if count < CENTROID_MIN_ROWS:
            return None
        kept = self._centre
        if kept is not None and not kept.stale(count):
            return kept.mean
        with self._centre_lock:  # one search takes and writes it, the others wait for it
            self._read_centre()
            kept = self._centre
            if kept is not None and not kept.stale(count):
                return kept.mean
            mean = self._sampled_mean(count)
            if mean is None:
                return None
            mean.setflags(write=False)
            self._centre = Centre(count, 0, mean)
            self._save_centre()  # a new mean is kept at once: a restart serves this one
            return mean

    def _read_centre(self) -> None:
        """The kept centre, once per open; the caller holds ``_centre_lock``."""
        if not self._centre_read:
            self._centre = read_centre(self._centre_path(), self.dim)
            self._centre_read = True
            self._centre_saved = self._centre.churn if self._centre is not None else 0

    def _count_churn(self, rows: int) -> None:
        """Rows added or deleted count against the centre (the caller holds the write lock). The
        count is kept in memory and written with the centre only once it has grown by
        ``CENTRE_UNSAVED_SHARE`` of the centre's rows since it was last written, when it makes
        the centre due, at a compaction and when the stores close (``keep_centre``): a record
        written at every write cost 10-15 ms of each memory write under load for a count only.
        A kill -9 thus loses less than a hundredth of the rows' churn (a tenth of what takes the
        centre again): the next process serves the same centre and takes it again at most that
        much later (after 11 % of the rows turned over instead of 10 %)."""
        if rows <= 0:
            return
        with self._centre_lock:
            self._read_centre()
            kept = self._centre
            if kept is None or 10 * kept.churn >= kept.rows:
                return  # due anyway: taken again at the next search
            self._centre = counted = replace(kept, churn=kept.churn + rows)
            due = 10 * counted.churn >= counted.rows
            if due or CENTRE_UNSAVED_SHARE * (counted.churn - self._centre_saved) >= counted.rows:
                self._save_centre()

    def keep_centre(self, wait: float = -1) -> bool:
        """Write the churn counted since the record was last written (a compaction, the stores'
        close, the stop's ``close``). Not at a replacing ``close``: that handle's table is being
        replaced, and the fresh handle at the same path keeps its own record. ``wait``: seconds
        at most for the centre's lock (a search taking the centre holds it over a LanceDB read);
        False when it was not had then (nothing written; logged)."""
        if not self._centre_lock.acquire(timeout=wait):
            log.warning(
                "vector_centre_not_kept table=%s (a search taking the centre did not end in time: "
                "the churn since its last record is counted again at the next start)",
                self.name,
            )
            return False
        try:
            if self._centre is not None and self._centre.churn != self._centre_saved:
                self._save_centre()
        finally:
            self._centre_lock.release()
        return True

    def _save_centre(self) -> None:
        """The centre and its churn written (the caller holds ``_centre_lock``); not after the
        stop's close (another daemon may hold the index then)."""
        assert self._centre is not None
        if self.closed_for_stop:
            return
        write_centre(self._centre_path(), self._centre, self.name)
        self._centre_saved = self._centre.churn

    def _sampled_mean(self, count: int) -> np.ndarray[Any, Any] | None:
        """The mean of ``CENTROID_SAMPLE`` rows at most, chosen by the row count."""
        take = np.random.default_rng(count).choice(count, min(count, CENTROID_SAMPLE), replace=False)
        offsets = sorted(take.tolist())
        table = self._wrap("sample", lambda: self._table.take_offsets(offsets).select(["vector"]).to_arrow())
        flat = table.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        rows = np.asarray(flat, dtype=np.float32).reshape(-1, self.dim)
        return rows.mean(axis=0) if len(rows) else None

    def _centre_path(self) -> Path:
        return centre_path(self.path / f"{self.name}.lance")

    def optimize(self) -> None:
        """Compact fragments and drop old versions (this process is the only reader and writer)."""
        with self._lock:
            if self._building or self.closed:
                return  # compaction would rewrite the fragments the build reads; next time
            self._compact()
        log.info("vectors_optimized table=%s", self.name)

    def compact_if_quiet(self, quiet_seconds: float) -> bool:
        """Compact once writes have paused: a burst of memory writes otherwise leaves hundreds of
        versions and fragments (and their cached metadata) until the next scheduled optimize."""
        with self._lock:
            if self._building or self.closed:
                return False
            if not self._writes or time.monotonic() - self._last_write < quiet_seconds:
                return self._cleanup_if_due()
            self._compact()
        log.info("vectors_compacted table=%s reason=writes paused", self.name)
        return True

    def _cleanup_if_due(self) -> bool:
        """Drop the versions the last compaction left, once older than the grace: its own cleanup
        ran before the version its compaction made aged, and the folder stayed about twice the
        table's size until the next scheduled optimize (up to an hour). Only while nothing was
        written since: LanceDB (without pylance) has no cleanup apart from ``optimize``, which
        then compacts nothing and so only cleans; after new writes it would compact mid-burst
        under the lock, so it waits for the quiet compaction, which cleans too. The caller holds
        the lock."""
        if self._cleanup_at is None or time.monotonic() < self._cleanup_at or self._writes:
            return False
        self._cleanup_at = None
        self._wrap("optimize", lambda: self._table.optimize(cleanup_older_than=_KEEP_VERSIONS))
        log.info("vectors_cleaned table=%s reason=replaced version aged", self.name)
        return True

    def _count_write(self) -> None:
        self._writes += 1
        self._last_write = time.monotonic()
        if (
            self.optimize_every
            and self._writes >= self.optimize_every
            and not self._building
            and not self.closed
        ):
            self._compact()

    def _compact(self) -> None:
        """Compaction and old-version cleanup, and the churn counted since the centre was kept
        (every ``optimize_every`` writes, and once writes paused); the caller holds the lock."""
        self.keep_centre()
        self._wrap("optimize", lambda: self._table.optimize(cleanup_older_than=_KEEP_VERSIONS))
        self._writes = 0
        self._cleanup_at = time.monotonic() + _KEEP_VERSIONS.total_seconds() + 1.0

    def _write(self, what: str, fn: Any, change: Any = None) -> Any:
        """A write that changes the rows; the caller holds the lock. ``change`` makes the same
        change to the in-memory copy, which (and the row count) is then still current; a write
        that failed, even half-way (rows may have landed), drops both, so they are read again."""
        self._check_open(what)
        exact = self._exact
        current = exact if exact is not None and exact.generation == self._generation else None
        try:
            out = self._wrap(what, fn)
        except BaseException:
            self._changed(None)
            raise
        after = None
        try:
            if change is not None and current is not None:
                after = change(current)
        finally:
            self._changed(after if after is not None and len(after.ids) <= EXACT_MAX_ROWS else None)
        return out

    def _changed(self, exact: _Exact | None) -> None:
        """A write landed: the next generation, with its copy (None: read it again if needed)."""
        with self._rows_lock:
            self._generation += 1
            self._exact = replace(exact, generation=self._generation) if exact is not None else None
            self._rows = len(exact.ids) if exact is not None else None

    def _wrap(self, what: str, fn: Any) -> Any:
        try:
            return fn()
        except (OSError, ValueError, RuntimeError) as exc:
            raise store_error_class(exc)(
                f"vector {what} failed on {self.name}: {engine_message(exc)}"
            ) from exc


def table_names(path: Path) -> list[str]:
    """The vector tables in the folder ``path`` (one per model that was configured)."""
    if not path.is_dir():
        return []
    try:
        names = lancedb_module().connect(str(path)).list_tables().tables
    except (OSError, ValueError, RuntimeError) as exc:
        raise store_error_class(exc)(
            f"the vector tables in {path} cannot be listed: {engine_message(exc)}"
        ) from exc
    return sorted(str(n) for n in names if str(n).startswith("vectors_"))


def drop_table(path: Path, table: str) -> None:
    """Remove a table of the folder ``path`` that is not open (gone already: nothing to do)."""
    try:
        lancedb_module().connect(str(path)).drop_table(table, ignore_missing=True)
    except (OSError, ValueError, RuntimeError) as exc:
        raise store_error_class(exc)(
            f"vector table {table} in {path} cannot be dropped: {engine_message(exc)}"
        ) from exc


def holds_model(path: Path, table: str, model: str) -> bool | None:
    """Whether the table ``table`` of ``path`` holds vectors of the model named ``model`` (its
    name, without the digest), as the table's own metadata records it: a name's prefix does not
    tell ``e5`` from ``e5-small``. None when the table is missing or cannot be read."""
    try:
        found = table_model(path, table)
    except (StoreError, OSError, ValueError, RuntimeError):
        return None
    if found is None or not found[0]:
        return None
    return found[0].split("@", 1)[0] == model


def table_model(path: Path, table: str) -> tuple[str, int, str] | None:
    """(model id, dimension, pooling) that an existing table of ``path`` was written with, or None."""
    db = lancedb_module().connect(str(path))
    if table not in db.list_tables().tables:
        return None
    meta = db.open_table(table).schema.metadata or {}
    model_id = meta.get(b"model", b"").decode()
    return model_id, int(meta.get(b"dim", b"0")), meta.get(b"pooling", b"mean").decode()
