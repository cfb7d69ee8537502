"""The vector backfill thread: vectors for chunks that have none, once a model is there.

It waits for the model (it may load late, or only after a retry), attaches the vector table
(through the model migration if the index holds another model's vectors; again when the configured
model loads after a fallback answered in its place), then embeds what is pending, yielding the CPU
to a large sweep's parsing. It builds the ANN index as soon as the table is large, and while
nothing waits for a vector it compacts the tables after a write burst and trains the index again
once the table has grown enough.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

from sidecar.config import Config
from sidecar.contracts.errors import (
    EmbedderError,
    IndexBuildStoppedError,
    RetiringModelError,
    StoreError,
    is_disk_full,
    is_passing_fault,
)
from sidecar.index.activity import Activity
from sidecar.index.migration import attach
from sidecar.index.problems import Problems
from sidecar.index.repair import Repair
from sidecar.index.vector_embed import WRITE_RUN
from sidecar.index.vectoring import Vectoring
from sidecar.index.vectortables import tidy_paused
from sidecar.model.embedder import Embedder, EmbedderSlot
from sidecar.runtime import heap
from sidecar.runtime.backoff import Backoff
from sidecar.stores.space import fault_words

log = logging.getLogger(__name__)

# Compact the vector table a minute after the last write: after a burst of memory writes the
# table held ~900 versions and ~500 fragments until the hourly optimize (bench/soak.py).
COMPACT_AFTER_QUIET_S = 60.0
# How often at most the embedding memory writes did themselves is logged (``vectors_embedded``).
WRITES_LOGGED_EVERY_S = 60.0
# A failed batch of vectors is tried again after 5 s, 10 s, ... up to a minute (its vectors are
# kept for the retry, see Vectoring._stash).
EMBED_RETRY = Backoff(base=5.0, cap=60.0)
# Attaching the vector tables (at start, at a model switch) is tried again after 5 s, 10 s, ...
# up to 5 min: a full disk or a locked manifest passes; a thread that gave up left vector search
# off until a restart.
ATTACH_RETRY = Backoff(base=5.0, cap=300.0)
# A switch that failed to begin this many times while the retiring table serves is tried again
# beside the embedding, not before it: the retiring model embeds what was left to the switch
# (those chunks had no vector from either model for as long as the switch could not begin).
SWITCH_BEGIN_TRIES = 3
# A retiring model whose files are there but fail to load is given up on after this many failed
# loads, the first at least this long ago: a load that fails for a passing reason (memory short
# while the new model is loaded too, a busy disk) works again within minutes, while files broken
# for good fail at every try, and vector search is off for as long as it is tried (nothing
# serves). At ATTACH_RETRY's waits (5 s doubling to 5 min) twelve tries take about half an
# hour; the hour bounds it. Then its table is moved aside (a copy kept) and the new model's fills.
RETIRING_MODEL_TRIES = 12
RETIRING_MODEL_GIVE_UP_S = 3600.0


class Backfill:
    """Embeds pending chunks until ``stop`` is set."""

    def __init__(
        self,
        cfg: Config,
        slot: EmbedderSlot,
        vectors: Vectoring,
        repair: Repair,
        *,
        problems: Problems,
        activity: Activity,
        stop: threading.Event,
    ) -> None:
        self.cfg = cfg
        self.slot = slot
        self.vectors = vectors
        self.repair = repair
        self.problems = problems
        self.activity = activity
        self.stop = stop
        self._ann_checked = 0.0
        self._ann_failed = float("-inf")  # monotonic: a failed build is tried again a minute later
        # The idle upkeep's index build (a retrain: minutes at 60-100 k rows) runs in a thread of
        # its own, so a note edited meanwhile gets its vector at once; appends go on during the
        # child's build, and compaction waits for it (VectorStore._building).
        self._retrain: threading.Thread | None = None
        # A switch put off after failing to begin: when it is tried again, and its failures.
        self._switch_retry_at: float | None = None
        self._switch_failures = 0
        # Failed loads of the retiring model in a row, and when the first was (monotonic).
        self._retiring_failures = 0
        self._retiring_failing_since: float | None = None

    def run(self) -> None:
        try:
            self._run()
        finally:
            # On every way out, a switch's attach cut short by the stop too. Its child was ended
            # first (stop_builds): a bounded wait, as for the thread itself.
            self.wait_for_retrain(30)

    def _run(self) -> None:
        # Wait for a model: it may load late (first start) or only after a retry.
        while self.slot.model is None:
            # Poll fast while the model loads, so vectors serve right after it is there.
            if self.stop.wait(0.05 if self.slot.state in ("idle", "loading") else 0.5):
                return
        attached = self.slot.model
        if not self._attach(attached):
            return
        self._ann_checked = 0.0
        busy = False
        since = self.vectors.counts()  # the burst's start: its texts are logged at its end
        # The memory writes' own embedding, logged at most once a minute (a line per write would
        # flood the log of an agent that writes in a loop) and at the end.
        writes, writes_at = self.vectors.counts(WRITE_RUN), time.monotonic()
        failures = 0
        act = self.activity
        try:
            while not self.stop.is_set():
                if time.monotonic() - writes_at >= WRITES_LOGGED_EVERY_S:
                    self.vectors.log_embedded(writes, "memory writes", WRITE_RUN)
                    writes, writes_at = self.vectors.counts(WRITE_RUN), time.monotonic()
                model = self.slot.model
                if model is not None and model is not attached:
                    # The configured model loaded at a retry while a fallback answered: the switch
                    # to it starts (the fallback's table serves until the new one is whole).
                    attached = model
                    self._switch_retry_at, self._switch_failures = None, 0
                    if not self._attach(model):
                        return
                elif self._switch_retry_due() and not self._attach(attached):
                    return
                # Keyword search first: while a large sweep runs (a cold start, a new vault) the CPU
                # goes to parsing; memory writes still embed at once on their own path.
                if (
                    act.phase in ("scanning", "indexing")
                    and act.total - act.done > self.cfg.index.batch_files
                ):
                    self.stop.wait(0.2)
                    continue
                try:
                    stored = self.vectors.embed_pending(stop=self.stop)
                    busy = busy or stored > 0
                    if stored and self._ann_retry_ok() and self.vectors.first_index_due():
                        # At once, not when the queue is empty: past EXACT_MAX_ROWS there is no copy
                        # in memory any more and every search would scan the table unindexed until
                        # then (an hour or more of a long first embedding). Embedding waits for the
                        # build: about a minute at 20 k rows (IVF_PQ, 62-67 s measured on 2 cores);
                        # status says meanwhile that new vectors wait.
                        self._build_ann()
                    failures = 0
                    self.problems.clear("embedding")
                except Exception as exc:  # ours, or e.g. sqlite "disk is full" while flagging vectors
                    failures += 1
                    self._embed_failed(exc, EMBED_RETRY.delay(failures))
                    continue
                if stored == 0:
                    if busy:
                        busy = False
                        self.vectors.log_embedded(since, "backfill")
                        heap.trim()  # an embedding burst is over: give its buffers back
                    since = self.vectors.counts()
                    self._upkeep()
                    self.vectors.wait_for_writes(1.0)
        finally:
            # A run cut by a stop or a restart (hours of a first index or a switch) counts too.
            if busy:
                self.vectors.log_embedded(since, "backfill")
            self.vectors.log_embedded(writes, "memory writes", WRITE_RUN)

    def _embed_failed(self, exc: Exception, delay: float) -> None:
        if is_disk_full(exc):
            log.error("embedding_failed reason=disk full error=%s retry_in=%.0fs", exc, delay)
            why = f"the disk of {self.cfg.index_dir} is full ({exc})"
        elif isinstance(exc, (StoreError, EmbedderError, sqlite3.Error)):
            # SQLite's "disk I/O error" for a write refused for want of permission: said so.
            why = fault_words(exc, self.cfg.index_dir / "manifest.sqlite")
            log.error("embedding_failed error=%s retry_in=%.0fs", _with_engine_words(why, exc), delay)
        else:  # unexpected: keep the traceback
            why = f"{type(exc).__name__}: {exc}"
            log.error("embedding_crashed error=%s retry_in=%.0fs", why, delay, exc_info=exc)
        self.problems.report("embedding", f"storing vectors failed: {why} (retrying in {delay:.0f} s)")
        self.stop.wait(delay)

    def _attach(self, model: Embedder) -> bool:
        """Serve vectors (at start, at a switch), tried again with a growing wait until it works;
        False only when the daemon stops. A table that cannot be attached is checked and, if it
        cannot be read, replaced (it would fail the same way after every restart); a full disk or
        a manifest that cannot be written is a fault that passes, reported and waited out."""
        failures = self._switch_failures
        while not self.stop.is_set():
            try:
                self._attach_once(model)
            except Exception as exc:  # never ends the thread: vector search would stay off
                failures += 1
                if isinstance(exc, RetiringModelError):
                    self._retiring_failures += 1
                    if self._retiring_failing_since is None:
                        self._retiring_failing_since = time.monotonic()
                delay = ATTACH_RETRY.delay(failures)
                self._attach_failed(exc, delay, model)
                if failures >= SWITCH_BEGIN_TRIES and self._retiring_serves(model):
                    self._put_off_switch(model, failures, delay)
                    return True
                if self.stop.wait(delay):
                    return False
                continue
            self._switch_retry_at, self._switch_failures = None, 0
            self._retiring_failures, self._retiring_failing_since = 0, None
            self.problems.clear("vectors")
            heap.trim()  # the reconcile's id sets are garbage now
            return True
        return False

    def _switch_retry_due(self) -> bool:
        return self._switch_retry_at is not None and time.monotonic() >= self._switch_retry_at

    def _retiring_serves(self, model: Embedder) -> bool:
        """Another model's table serves and the switch to ``model`` has not begun."""
        stores = self.vectors.stores
        return stores.serving is not None and stores.serving.model is not model and stores.building is None

    def _put_off_switch(self, model: Embedder, failures: int, delay: float) -> None:
        """The switch could not begin: the serving model embeds meanwhile, the chunks left to
        the switch with the rest, and the switch is tried again after ``delay``."""
        with self.vectors.stores.write_lock:
            released = self.vectors.manifest.release_next_only()
        if self._switch_retry_at is None or released:
            log.warning(
                "vectors_switch_put_off to=%s tries=%d chunks_released=%d retry_in=%.0fs "
                "(the serving model embeds meanwhile)",
                model.model_id, failures, released, delay,
            )  # fmt: skip
        self._switch_failures = failures
        self._switch_retry_at = time.monotonic() + delay

    def _give_up_retiring(self) -> str | None:
        """How long the retiring model failed to load, in words, once it is given up on."""
        since = self._retiring_failing_since
        if since is None or self._retiring_failures < RETIRING_MODEL_TRIES:
            return None
        minutes = (time.monotonic() - since) / 60
        if minutes * 60 < RETIRING_MODEL_GIVE_UP_S:
            return None
        return f"{self._retiring_failures} times over {minutes:.0f} minutes"

    def _attach_once(self, model: Embedder) -> None:
        try:
            attach(self.cfg, self.vectors, model, self.problems, give_up=self._give_up_retiring())
        except StoreError as exc:
            if is_passing_fault(exc):  # a full disk, a permission denied: no damage to repair
                raise
            log.error("vectors_unavailable error=%s", exc)
            self.repair.repair_vectors(f"attaching failed: {exc}")
            # Once more over the repaired table (a switch, too, begins only then); a failure
            # again waits for the next try.
            attach(self.cfg, self.vectors, model, self.problems, give_up=self._give_up_retiring())

    def _attach_failed(self, exc: Exception, delay: float, model: Embedder) -> None:
        serving = self.vectors.stores.serving
        if serving is None:
            meanwhile = "vector search is off meanwhile (keyword results only)"
        elif serving.model is model:
            meanwhile = f"searches keep using {serving.model.model_id}'s vectors"
        else:  # a switch whose new table cannot be made yet: the old one serves, nothing is lost
            meanwhile = (
                f"searches keep using {serving.model.model_id}'s vectors; the switch to "
                f"{model.model_id} starts once this works"
            )
        if isinstance(exc, RetiringModelError):
            # the model loaded and only its table would not open (no file handles left), or not
            tries = "tries to open its table" if isinstance(exc.__cause__, StoreError) else "failed loads"
            meanwhile += (
                f"; after {RETIRING_MODEL_TRIES} {tries} over {RETIRING_MODEL_GIVE_UP_S / 3600:.0f} h "
                f"it is given up on: its vectors are moved aside (a copy kept 30 days) and "
                f"{model.model_id} computes them anew"
            )
        if is_disk_full(exc):
            why = f"the disk of {self.cfg.index_dir} is full ({exc})"
            log.error("vectors_unavailable reason=disk full error=%s retry_in=%.0fs", exc, delay)
        elif isinstance(exc, (StoreError, EmbedderError, OSError, sqlite3.Error)):
            why = fault_words(exc, self.cfg.index_dir / "manifest.sqlite")
            log.error("vectors_unavailable error=%s retry_in=%.0fs", _with_engine_words(why, exc), delay)
        else:  # unexpected: keep the traceback
            why = f"{type(exc).__name__}: {exc}"
            log.error("vectors_attach_crashed error=%s retry_in=%.0fs", why, delay, exc_info=exc)
        self.problems.report(
            "vectors", f"the vector table cannot be opened: {why}; {meanwhile} (retrying in {delay:.0f} s)"
        )

    def _upkeep(self) -> None:
        """While nothing waits for a vector: drop a table a switch retired, compact after a write
        burst, build the ANN index."""
        self.vectors.drop_retired()
        try:
            if self.vectors.compact_if_quiet(COMPACT_AFTER_QUIET_S):
                heap.trim()
        except StoreError as exc:
            log.error("vectors_compact_failed error=%s", exc)
        if time.monotonic() - self._ann_checked > 60:
            self._ann_checked = time.monotonic()
            tidy_paused(self.vectors, self.cfg.index_dir / "vectors")
            self._start_retrain()

    def _start_retrain(self) -> None:
        """Build the index in the background if it is due, trained again once the table has grown
        (started only while nothing waits for a vector; embedding goes on meanwhile)."""
        if self.stop.is_set() or (self._retrain is not None and self._retrain.is_alive()):
            return
        if not self.vectors.ann_build_due(retrain=True):
            return
        self._retrain = threading.Thread(
            target=self._build_ann, kwargs={"retrain": True}, name="ann-retrain", daemon=True
        )
        self._retrain.start()

    def wait_for_retrain(self, timeout: float | None = None) -> None:
        if self._retrain is not None:
            self._retrain.join(timeout)

    def _build_ann(self, *, retrain: bool = False) -> None:
        """Build the ANN index if it is due; ``retrain`` (only while nothing waits for a vector):
        also train it again once the table has grown enough. Searches go on meanwhile."""
        waits = not retrain  # called from the embedding loop itself, not the upkeep's thread
        self.vectors.embedding_waits_for_index = waits
        try:
            if self.vectors.ensure_ann(retrain=retrain):
                heap.trim()  # the build's buffers (hundreds of MB at 100 k vectors)
        except IndexBuildStoppedError:
            pass  # ended on purpose (the stop, its table emptied or dropped): logged, not a failure
        except StoreError as exc:
            if self.stop.is_set():  # the build was ended because the daemon stops
                log.info("vector_index_build_stopped error=%s", exc)
            else:
                log.error("vector_index_failed error=%s", exc)
            self._ann_failed = time.monotonic()
        finally:
            if waits:
                self.vectors.embedding_waits_for_index = False

    def _ann_retry_ok(self) -> bool:
        """A build that failed is not tried again after every batch of vectors."""
        return time.monotonic() - self._ann_failed > 60


def _with_engine_words(why: str, exc: BaseException) -> str:
    """``why`` for the log, with the engine's own words when ``why`` replaced them."""
    return why if why == str(exc) else f"{why} ({exc})"
