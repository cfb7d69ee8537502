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

import numpy as np

from sidecar.config import Config, model_settings
from sidecar.contracts.errors import (
    DiskFullError,
    EmbedderError,
    PassingFaultError,
    RetiringModelError,
    StoreError,
    is_disk_full,
    says_damage,
    store_error_class,
)
from sidecar.index.problems import Problems
from sidecar.index.vectoring import Vectoring
from sidecar.index.vectortables import set_aside, tidy
from sidecar.model.embedder import Embedder, load_model, model_name
from sidecar.model.locate import resolve_model
from sidecar.stores.embedtext import joined_embed_text
from sidecar.stores.lifecycle import open_vectors
from sidecar.stores.vectors import VectorStore, table_model, table_name

log = logging.getLogger(__name__)


def attach(
    cfg: Config,
    vectors: Vectoring,
    model: Embedder,
    problems: Problems | None = None,
    *,
    give_up: str | None = None,
) -> None:
    """Serve vectors of ``model``; if the index holds another model's vectors, keep serving those
    (queried with that model) while the new table is built, as long as the old model can be loaded.

    The old table serves before the new one is created: creating it can fail (a full disk raises
    DiskFullError, for the caller to try again), and searches keep the old vectors meanwhile.

    A retiring model whose files are there but fail to load raises RetiringModelError (tried
    again); ``give_up`` (how long it failed, in words) ends that: its table is moved aside, a copy
    kept, and the switch goes on as if the model were gone."""
    old_name = vectors.serving_table()
    if old_name and old_name != table_name(model.model_id, model.dim, model.pooling):
        # Attached already when a fallback answered until the configured one loaded, or at an
        # earlier try that failed: that table and model go on serving, the old model is not
        # loaded a second time.
        failed: RetiringModelError | None = None
        unopened: list[str] = []  # why the previous table failed to open though its model loads
        try:
            previous = _attached(vectors, old_name) or open_previous(cfg, old_name, unopened=unopened)
        except RetiringModelError as exc:
            if give_up is None:
                raise
            previous, failed = None, exc
        if previous is not None:
            if vectors.stores.serving is None:
                vectors.attach(*previous, switching=True)
            new = open_vectors(cfg, model.model_id, model.dim, model.pooling, problems)
            vectors.begin_migration(previous[0], previous[1], new, model)
            tidy(vectors, cfg.index_dir / "vectors")
            return
        carried = carry_over(cfg, vectors, old_name, model, problems)
        if failed is not None:
            table = isinstance(failed.__cause__, StoreError)  # the model loaded, its table did not open
            _give_up(
                cfg,
                old_name,
                model,
                f"{give_up} ({failed.__cause__ or failed})",
                problems,
                table_failed=table,
            )
        if carried is not None:
            vectors.attach(carried, model)
            tidy(vectors, cfg.index_dir / "vectors")  # the old table goes: nothing refers to it
            return
        # Every vector of the index, neither used nor copied: kept aside, never dropped as unused
        # (its model may come back, its store be mended).
        _keep_aside(cfg, old_name, model, unopened[0] if unopened else None, problems)
        log.warning(
            "vectors_rebuild table=%s reason=the previous model cannot be loaded; vectors are recomputed "
            "and search is keyword-only for chunks without one meanwhile",
            table_name(model.model_id, model.dim, model.pooling),
        )
    vectors.attach(open_vectors(cfg, model.model_id, model.dim, model.pooling, problems), model)
    tidy(vectors, cfg.index_dir / "vectors")


def _keep_aside(
    cfg: Config, table: str, model: Embedder, damage: str | None, problems: Problems | None
) -> None:
    """The previous serving table, which neither serves through the switch nor was copied into
    ``model``'s, moved aside for 30 days: as a retired model's vectors when its model is gone (a
    switch asked for: no damage), as a damaged copy when its store failed to open (``damage``)
    though its model loads; that is a problem too, as every vector is recomputed."""
    aside = set_aside(cfg.index_dir / "vectors", table, retired=damage is None)
    if aside is None:
        return
    log.warning(
        "vectors_set_aside table=%s moved_to=%s reason=%s (kept 30 days, not dropped)",
        table, aside,
        f"the previous model's vectors, not used by {model.model_id}: its model is gone"
        if damage is None
        else f"the previous model's vectors could not be opened ({damage})",
    )  # fmt: skip
    if damage is not None and problems is not None:
        problems.note(
            "stores",
            f"the previous model's vectors ({table}) could not be opened ({damage}) though the "
            f"model loads: moved to {aside.name} (kept 30 days); {model.model_id} computes the "
            "vectors anew, keyword-only search for notes without one meanwhile",
            subject="vectors",
        )


def _give_up(
    cfg: Config,
    table: str,
    model: Embedder,
    why: str,
    problems: Problems | None,
    *,
    table_failed: bool = False,
) -> None:
    """The retiring model's table moved aside (kept like a damaged table's copy), never dropped:
    its model may be mended or put back, and its vectors with it. ``table_failed``: the model
    loaded, its table failed to open (not the model to load)."""
    failed = (
        "the previous model's table failed to open" if table_failed else "the previous model failed to load"
    )
    aside = set_aside(cfg.index_dir / "vectors", table)
    where = f"moved to {aside.name} (kept 30 days)" if aside is not None else "not found"
    log.warning(
        "vectors_previous_model_given_up table=%s moved_to=%s reason=%s; %s computes the vectors anew",
        table, aside, why, model.model_id,
    )  # fmt: skip
    if problems is not None:
        problems.note(
            "stores",
            f"{failed} {why}: it was given up on, its vectors ({table}) "
            f"{where}; {model.model_id} computes the vectors anew, keyword-only search for notes "
            "without one meanwhile",
            subject="vectors",
        )


def carry_over(
    cfg: Config, vectors: Vectoring, old_name: str, model: Embedder, problems: Problems | None = None
) -> VectorStore | None:
    """The serving table's vectors copied into ``model``'s table, when they are ``model``'s own:
    the same model name, dimension and pooling under another id (a new conversion of the same
    weights: another graph file, another onnxruntime), and ``model`` computes the same vectors
    for a sample of the stored chunks. An upgrade removed the earlier conversion, the previous
    model could not be loaded, and every chunk was embedded again, keyword-only meanwhile. None
    when they are not (then they are recomputed)."""
    folder = cfg.index_dir / "vectors"
    try:
        found = table_model(folder, old_name)
    except (StoreError, OSError, ValueError, RuntimeError) as exc:  # kept aside by ``tidy``
        log.info("vectors_not_carried table=%s reason=its model cannot be read (%s)", old_name, exc)
        return None
    if found is None:
        return None
    old_id, dim, pooling = found
    if model_name(old_id) != model_name(model.model_id) or (dim, pooling) != (model.dim, model.pooling):
        return None
    try:
        old = VectorStore(folder, old_id, dim, pooling)
    except StoreError as exc:  # kept aside by ``attach``
        log.info("vectors_not_carried table=%s reason=it cannot be opened (%s)", old_name, exc)
        return None
    lowest = _agreement(vectors, old, model)
    if lowest is None or lowest < SAME_VECTORS_MIN_COSINE:
        old.close()
        log.info(
            "vectors_not_carried table=%s reason=%s",
            old_name,
            "no stored vector to compare" if lowest is None else f"sample cosine {lowest:.4f}",
        )
        return None
    new = open_vectors(cfg, model.model_id, model.dim, model.pooling, problems)
    if new.count():
        new.clear()  # a copy cut short (a full disk, a stop) is made again whole
    copied = 0
    try:
        for rows, vecs in old.readable_rows().batches():
            new.add(rows, vecs)
            copied += len(rows)
    finally:
        old.close()  # dropped by ``tidy`` once the new table serves
    log.info(
        "vectors_carried_over from=%s to=%s vectors=%d sample_cosine=%.4f "
        "(the same model's vectors: nothing is embedded again)",
        old_name, new.name, copied, lowest,
    )  # fmt: skip
    return new


# Vectors of another conversion of the same model are kept when every sampled chunk's vector
# agrees this closely with the new conversion's: the bar each conversion itself passes against
# the model's reference vectors (a wrong layout or tokenizer lands far below).
SAME_VECTORS_MIN_COSINE = 0.99
_SAMPLE = 32  # chunks compared: a fraction of a second of the model
# and the longest chunks besides: a conversion that cuts long texts otherwise (another maximum
# length, another truncation) agrees on short chunks and differs only on those
_SAMPLE_LONGEST = 8


def _agreement(vectors: Vectoring, old: VectorStore, model: Embedder) -> float | None:
    """The lowest cosine between stored vectors of a sample of chunks and ``model``'s vectors
    for the same texts, or None without any stored vector. Spread over the index by text hash,
    and the longest chunks."""
    where = "FROM chunks WHERE has_vector = 1 AND embed_hash != ''"
    columns = "chunk_id, embed_text, text, embed_from"
    spread = vectors.manifest.read(f"SELECT {columns} {where} ORDER BY embed_hash LIMIT ?", (_SAMPLE,))
    # The model's text is the head (embed_text) and the text from embed_from on (stores.embedtext).
    length = "length(embed_text) + coalesce(length(text) - embed_from, 0)"
    longest = vectors.manifest.read(
        f"SELECT {columns} {where} ORDER BY {length} DESC LIMIT ?", (_SAMPLE_LONGEST,)
    )
    sample = list({i: joined_embed_text(e, t, start) for i, e, t, start in spread + longest}.items())
    stored = old.vectors_of([cid for cid, _ in sample])
    pairs = [(stored[cid], text) for cid, text in sample if cid in stored]
    if not pairs:
        return None
    fresh = np.asarray(model.embed_passages([text for _, text in pairs]), dtype=np.float32)
    want = np.stack([vec for vec, _ in pairs]).astype(np.float32)
    norms = np.linalg.norm(want, axis=1) * np.linalg.norm(fresh, axis=1)
    return float(np.min(np.sum(want * fresh, axis=1) / np.maximum(norms, 1e-12)))


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
    except (DiskFullError, EmbedderError) as exc:  # not loadable now; the model retry asks again
        log.info("previous_model_unavailable table=%s error=%s", table, exc)
        return None
    return previous[1] if previous is not None else None


def open_previous(
    cfg: Config, table: str, *, unopened: list[str] | None = None
) -> tuple[VectorStore, Embedder] | None:
    """The serving table of the previous model and that model, if both can still be opened.
    A model whose files are there but fail to load now (memory, a busy disk) raises
    RetiringModelError: it is tried again later, its table kept (given up on after a while).
    Taken for gone, its table, every vector, was dropped for one failed load. None when not;
    ``unopened`` gets why when it is the table that fails (damage), not its model (gone): a
    failure of the model's settings or load never counts against its table (a ValueError of the
    settings moved a sound table aside as damaged)."""
    try:
        found = table_model(cfg.index_dir / "vectors", table)
    except (StoreError, OSError, ValueError, RuntimeError) as exc:
        _table_failed(table, exc, unopened)
        return None
    if found is None or not found[0]:  # no model known: damage, not a gone model
        if unopened is not None:
            unopened.append("its metadata names no model")
        return None
    model_id, dim, pooling = found
    try:
        # The previous model with its own settings (prefixes, languages), not the new one's.
        old_ecfg = replace(model_settings(cfg.embedder, model_name(model_id)), path=None, pooling=pooling)
    except ValueError as exc:
        # A setting of the configuration (a typo fixed a day later), neither the model's files nor
        # its table: kept and tried again, as a model that fails to load with its files there.
        raise RetiringModelError(
            f"the previous model {model_name(model_id)}'s settings cannot be used ({exc}); its "
            f"vectors ({table}) are kept and it is tried again"
        ) from exc
    old_cfg = None
    try:
        old_cfg = replace(cfg, embedder=old_ecfg)
        old_model = load_model(old_cfg)
    except RetiringModelError:
        raise
    except (EmbedderError, OSError, ValueError) as exc:
        if is_disk_full(exc):  # not gone, only not loadable now: its vectors must not be given up
            raise DiskFullError(f"the previous model's table {table} cannot be opened: {exc}") from exc
        if isinstance(exc, EmbedderError) and old_cfg is not None and _files_present(old_cfg):
            log.warning("previous_model_failed table=%s error=%s (its table is kept)", table, exc)
            raise RetiringModelError(
                f"the previous model {old_cfg.embedder.model} failed to load ({exc}); its vectors "
                f"({table}) are kept and it is tried again"
            ) from exc
        log.info("previous_model_unavailable table=%s error=%s", table, exc)
        return None  # the model's, not the table's: never said to be its damage
    if old_model.model_id != model_id:
        return None
    try:
        return _open_retiring(cfg, table, model_id, dim, pooling), old_model
    except (StoreError, OSError, ValueError) as exc:
        _table_failed(table, exc, unopened)
        return None


def _table_failed(table: str, exc: BaseException, unopened: list[str] | None) -> None:
    """The previous table itself failed to open: a full disk is raised (tried again), as is any
    fault that passes the engine does not call damage (a permission denied, no file handles left:
    RetiringModelError, its table kept); anything else is the table's damage (``unopened`` gets
    why)."""
    if is_disk_full(exc):
        raise DiskFullError(f"the previous model's table {table} cannot be opened: {exc}") from exc
    kind = store_error_class(exc)
    if not says_damage(exc) and issubclass(kind, PassingFaultError):
        log.warning("previous_table_failed table=%s error=%s (it is kept)", table, exc)
        # A StoreError as the cause: a give-up says the table failed, not the model.
        cause = exc if isinstance(exc, StoreError) else kind(f"vector table {table} cannot be opened: {exc}")
        raise RetiringModelError(
            f"the previous model's table {table} cannot be opened now ({exc}); its vectors are "
            "kept and it is tried again"
        ) from cause
    if unopened is not None:
        unopened.append(str(exc))
    log.info("previous_model_unavailable table=%s error=%s", table, exc)


def _open_retiring(cfg: Config, table: str, model_id: str, dim: int, pooling: str) -> VectorStore:
    """The previous model's table, its model loaded. A fault that passes (no file handles left,
    an I/O error) raises RetiringModelError: tried again, its table kept. Any other failure is
    raised as it is: the switch goes on as if the model were gone, the table kept aside."""
    try:
        return VectorStore(cfg.index_dir / "vectors", model_id, dim, pooling)
    except PassingFaultError as exc:
        if is_disk_full(exc):
            raise
        log.warning("previous_table_failed table=%s error=%s (it is kept)", table, exc)
        raise RetiringModelError(
            f"the previous model's table {table} cannot be opened now ({exc}); its vectors are "
            "kept and it is tried again"
        ) from exc
    except StoreError as exc:
        log.warning("previous_table_unopenable table=%s error=%s (it is moved aside)", table, exc)
        raise


def _files_present(cfg: Config) -> bool:
    """Whether the model's files are found (a model that failed to load is not gone then)."""
    try:
        resolve_model(cfg)
    except (EmbedderError, OSError, ValueError):
        return False
    return True
