"""Which vectors to serve at start, and the switch to a new model without losing vector search.

If the index holds another model's vectors, those keep serving (queried with that model) while
the new model's table is filled, as long as the old model can still be loaded; else vectors are
recomputed and search is keyword-only for chunks without one meanwhile. A configured model that
cannot be loaded at all leaves the serving table's model answering in its place
(:func:`serving_model`); once the configured one loads, the switch to it runs as above.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from sidecar.config import Config, model_settings
from sidecar.contracts.errors import DiskFullError, EmbedderError, StoreError, is_disk_full
from sidecar.index.problems import Problems
from sidecar.index.vectoring import Vectoring
from sidecar.index.vectortables import tidy
from sidecar.model.embedder import Embedder, load_model, model_name
from sidecar.stores.lifecycle import open_vectors
from sidecar.stores.vectors import VectorStore, table_model, table_name

log = logging.getLogger(__name__)


def attach(cfg: Config, vectors: Vectoring, model: Embedder, problems: Problems | None = None) -> None:
    """Serve vectors of ``model``; if the index holds another model's vectors, keep serving those
    (queried with that model) while the new table is built, as long as the old model can be loaded.

    The old table serves before the new one is created: creating it can fail (a full disk raises
    DiskFullError, for the caller to try again), and searches keep the old vectors meanwhile."""
    old_name = vectors.serving_table()
    if old_name and old_name != table_name(model.model_id, model.dim, model.pooling):
        # Attached already when a fallback answered until the configured one loaded, or at an
        # earlier try that failed: that table and model go on serving, the old model is not
        # loaded a second time.
        previous = _attached(vectors, old_name) or open_previous(cfg, old_name)
        if previous is not None:
            if vectors.stores.serving is None:
                vectors.attach(*previous)
            new = open_vectors(cfg, model.model_id, model.dim, model.pooling, problems)
            vectors.begin_migration(previous[0], previous[1], new, model)
            tidy(vectors, cfg.index_dir / "vectors")
            return
        log.warning(
            "vectors_rebuild table=%s reason=the previous model cannot be loaded; vectors are recomputed "
            "and search is keyword-only for chunks without one meanwhile",
            table_name(model.model_id, model.dim, model.pooling),
        )
    vectors.attach(open_vectors(cfg, model.model_id, model.dim, model.pooling, problems), model)
    tidy(vectors, cfg.index_dir / "vectors")


def _attached(vectors: Vectoring, table: str) -> tuple[VectorStore, Embedder] | None:
    serving = vectors.stores.serving
    if serving is None or serving.store.name != table:
        return None
    return serving.store, serving.model


def serving_model(cfg: Config, vectors: Vectoring) -> Embedder | None:
    """The model of the index's serving table, if it can still be loaded: what answers when the
    configured model cannot be (that table is whole, so search stays whole and new notes get
    vectors in it); None for an index without vectors."""
    table = vectors.serving_table()
    try:
        previous = open_previous(cfg, table) if table else None
    except DiskFullError as exc:  # not loadable now; the model retry (embedder.retryMinutes) asks again
        log.info("previous_model_unavailable table=%s error=%s", table, exc)
        return None
    return previous[1] if previous is not None else None


def open_previous(cfg: Config, table: str) -> tuple[VectorStore, Embedder] | None:
    """The serving table of the previous model and that model, if both can still be opened."""
    try:
        found = table_model(cfg.index_dir / "vectors", table)
        if found is None:
            return None
        model_id, dim, pooling = found
        # The previous model with its own settings (prefixes, languages), not the new one's.
        old_ecfg = replace(model_settings(cfg.embedder, model_name(model_id)), path=None, pooling=pooling)
        old_cfg = replace(cfg, embedder=old_ecfg)
        old_model = load_model(old_cfg)
        if old_model.model_id != model_id:
            return None
        return VectorStore(cfg.index_dir / "vectors", model_id, dim, pooling), old_model
    except (EmbedderError, StoreError, OSError, ValueError) as exc:
        if is_disk_full(exc):  # not gone, only not loadable now: its vectors must not be given up
            raise DiskFullError(f"the previous model's table {table} cannot be opened: {exc}") from exc
        log.info("previous_model_unavailable table=%s error=%s", table, exc)
        return None
