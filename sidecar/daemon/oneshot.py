"""`sidecar index` when no daemon runs: this process is the one writer until it is done."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sidecar.config import Config
from sidecar.daemon.compose import Parts, build
from sidecar.daemon.process import INDEX_RUN, load_embedder, lock_and_tighten, make_private, record_counting
from sidecar.index.migration import attach, serving_model
from sidecar.model.embedder import EmbedderSlot
from sidecar.runtime.release import build_id


def index_once(
    cfg: Config,
    *,
    rebuild: bool,
    progress: Callable[[str, int, int], None] | None = None,
    confirm: frozenset[str] = frozenset(),
    waiting: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """`sidecar index` with no daemon running: this process is the one writer until it is done.
    ``waiting`` is told, about once a second, of a note whose read has not answered for a second
    or more (``Supervisor.describe_waiting``); the summary's ``offline`` lists the roots that
    could not be read (name, error), kept as indexed."""
    build_id()  # the code this run imported, before any wait (``Daemon``'s)
    make_private(cfg)
    lock = lock_and_tighten(cfg, by=INDEX_RUN)  # the lock first: refused, it changes nothing
    slot = EmbedderSlot()
    try:
        parts = build(cfg, slot, replace_newer=rebuild)  # a newer version's index replaced on purpose only
    except BaseException:
        lock.release()  # refused (a newer index) or failed: the next run or daemon may lock it
        raise
    manifest, vectors, indexer = parts.stores.manifest, parts.vectors, parts.indexer
    if waiting is not None:
        supervisor = parts.supervisor

        def beat() -> None:
            w = supervisor.describe_waiting()
            if w is not None:
                waiting(w)

        supervisor.beat = beat
    try:
        load_embedder(cfg, slot, lambda: serving_model(cfg, vectors), parts.problems)
        indexer.finish_interrupted()
        indexer.reread_if_written_elsewhere()
        indexer.reparse_if_chunking_changed()
        indexer.reread_canvases_if_read_differently()
        indexer.reread_drawings_if_read_differently()
        indexer.reread_link_aliases_if_read_differently()
        indexer.reread_property_names_if_read_differently()
        record_counting(cfg, slot, indexer)
        if slot.model is not None:
            attach(cfg, vectors, slot.model, parts.problems)
        if rebuild:
            # No sweep ran in this process: what cannot be read is not known until it is listed.
            indexer.changes.list_unreadable()
            # A listing given up on that answers after all is a slow share: listed again with the
            # whole-scan bound (a rebuild refused for it was refused on every run).
            slow = parts.supervisor.await_given_up()
            if slow:
                indexer.changes.list_unreadable(only=frozenset(slow))
            indexer.refuse_rebuild(confirm)  # the vault's share away: its notes would leave the index
            indexer.clear()
        report = (lambda a: progress(a.phase, a.done, a.total)) if progress else None
        summary = indexer.sweep(progress=report, confirm_deletions=confirm, retry_all=True)
        _finish(parts, progress)
        # A listing given up on: waited for only now, the other roots' notes indexed and embedded
        # first (a wait cut short leaves just that root to the next run). Should it answer, the
        # share is slow (remembered): its root is swept again with the whole-scan bound, not left
        # offline until the next run, which gave up at the same listing.
        slow = parts.supervisor.await_given_up()
        if slow:
            again = indexer.sweep(only=frozenset(slow), progress=report, confirm_deletions=confirm)
            summary = {k: v + again.get(k, 0) for k, v in summary.items()}
            _finish(parts, progress)
        counts = manifest.counts()
        return {
            **summary,
            "files": counts["files"],
            "chunks": counts["chunks"],
            # With the model off by configuration no chunk waits for a vector: none will come
            # (as health says it; every chunk counted read like a backlog never worked off).
            "pending_vectors": manifest.pending_count() if cfg.embedder.enabled else 0,
            # A rebuild that could not read every note back (``Indexer._restore_aside``).
            "rebuild_unfinished": (parts.problems.active_in("rebuild") or {}).get("error"),
            "offline": [
                {"name": st.name, "error": st.error} for st in parts.supervisor.roots.values() if st.offline
            ],
            # Agents' inboxes refused (a symbolic link, another user's folder): their notes left.
            "refused_inboxes": indexer.changes.refused.summary(),
        }
    finally:
        parts.stores.close()
        lock.release()


def _finish(parts: Parts, progress: Callable[[str, int, int], None] | None) -> None:
    """The links of unchanged notes after an upgrade, as the daemon reads them after its first
    sweep (an index kept up by `sidecar index` alone never had them read), then the vectors. A
    root away (or a read that hangs) leaves the rest to the next run or the daemon."""
    indexer, manifest, vectors = parts.indexer, parts.stores.manifest, parts.vectors
    while indexer.links_due() and (lp := indexer.links.progress) is not None:
        if progress:
            progress("links", lp.done, lp.total)
        if not indexer.reread_links():
            break
    total = manifest.chunk_count()
    since = vectors.counts()
    try:
        while vectors.embed_pending() > 0:
            if progress:
                progress("embedding", total - manifest.pending_count(), total)
    finally:  # cut by Ctrl-C or a failure: what was embedded until then is said too
        vectors.log_embedded(since, "index")
