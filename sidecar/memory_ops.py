"""Protocol ops for agents' memory: list, write, edit, delete.

Writes go through :mod:`sidecar.inbox` (own inbox only, atomic, redacted, audited) and are indexed
synchronously, so a note is searchable when the call returns. Before a write, near-duplicates in
the agent's inbox and the wiki are looked up by vector similarity. Imports inbox, indexer, sources.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sqlite3
from typing import Any

from sidecar.config import Config
from sidecar.embedder import EmbedderSlot
from sidecar.errors import EmbedderError, ProtocolError, SidecarError, StorageError, StoreError
from sidecar.inbox import Inboxes, check_agent, check_slug, split_front_matter
from sidecar.indexer import Indexer
from sidecar.protocol import Request, check_known, param_int, param_opt_str, param_str
from sidecar.sources import SOURCES, Root, agent_inbox, public_reference

log = logging.getLogger(__name__)

MAX_LIST = 1000


class DuplicateError(SidecarError):
    """A write was refused because a near-identical note exists (memory.write.onDuplicate: reject)."""

    code = "duplicate"


class MemoryOps:
    def __init__(self, cfg: Config, inboxes: Inboxes, indexer: Indexer, slot: EmbedderSlot) -> None:
        self.cfg = cfg
        self.inboxes = inboxes
        self.indexer = indexer
        self.slot = slot

    def ops(self) -> dict[str, Any]:
        return {"list": self.list, "write": self.write, "edit": self.edit, "delete": self.delete}

    # --- writes --------------------------------------------------------------------------

    def write(self, req: Request) -> dict[str, Any]:
        return self._write(req, must_exist=False)

    def edit(self, req: Request) -> dict[str, Any]:
        return self._write(req, must_exist=True)

    def _write(self, req: Request, *, must_exist: bool) -> dict[str, Any]:
        p = req.params
        check_known(p, ("slug", "content", "frontmatter"))
        agent = check_agent(req.agent)
        slug = check_slug(p.get("slug"))
        content = param_str(p, "content", max_len=self.cfg.server.max_frame_bytes)  # size: inbox checks bytes
        front_matter = p.get("frontmatter")
        self.inboxes.path_of(agent, slug)  # validates before any similarity work
        duplicates = self._near_duplicates(agent, slug, split_front_matter(content)[1])
        if duplicates and not must_exist and self.cfg.memory.write.on_duplicate == "reject":
            best = duplicates[0]
            raise DuplicateError(
                f"not written: {best['reference']} is {best['similarity']:.0%} similar "
                f"(threshold {self.cfg.memory.write.duplicate_threshold:.0%}); update that note with "
                "edit instead, or write something that differs"
            )
        problems = self.indexer.stores.problems
        try:
            written = self.inboxes.write(agent, slug, content, front_matter, must_exist=must_exist)
        except OSError as exc:  # disk full, read-only inbox: the old note (if any) is untouched
            problems.report("memory_write", f"writing to the {agent} inbox failed: {exc}")
            raise StorageError(f"not written: {exc.strerror or exc}; the inbox is unchanged") from exc
        problems.clear("memory_write")
        root = Root("memory", agent_inbox(self.cfg, agent), agent=agent)
        warning = None
        try:
            key = self.indexer.index_now(root, written.path, (written.data, written.mtime_ns))
        except (StoreError, EmbedderError, OSError, sqlite3.Error) as exc:
            # The note is safely on disk; the index catches up once it can be written again.
            log.error("memory_index_failed agent=%s slug=%s error=%s", agent, slug, exc)
            problems.report("index", f"indexing a memory write failed: {exc}")
            key = root.key_of_path(written.path)
            warning = f"saved, but not searchable yet: the index cannot be written ({exc})"
        log.info(
            "memory_%s agent=%s slug=%s bytes=%d",
            "edit" if must_exist else "write",
            agent,
            slug,
            written.size,
        )
        out: dict[str, Any] = {
            "reference": public_reference(key, agent),
            "created": written.created,
            "bytes": written.size,
            "redacted": written.redacted,
            "duplicates": duplicates if duplicates is not None else [],
            "searchable": warning is None,
        }
        if warning:
            out["warning"] = warning
        if duplicates is None:
            out["duplicatesChecked"] = False  # no model yet: similarity could not be computed
        return out

    def _near_duplicates(self, agent: str, slug: str, body: str) -> list[dict[str, Any]] | None:
        """Notes in the agent's inbox or the wiki whose chunks are at least threshold-similar."""
        serving = self.indexer.stores.serving
        if serving is None:
            return None  # no model yet: similarity cannot be computed
        model, vectors = serving.model, serving.store
        if not body.strip():
            return []
        try:
            vec = model.embed_passages([body])[0]
            hits = vectors.search(vec, 20, ("memory", "wiki"), agent)
        except (EmbedderError, StoreError) as exc:
            log.warning("duplicate_check_failed error=%s", exc)
            return None
        threshold = self.cfg.memory.write.duplicate_threshold
        views = self.indexer.stores.manifest.views([cid for cid, sim, _ in hits if sim >= threshold])
        own = f"memory/{agent}/{slug}"
        best: dict[str, float] = {}
        for cid, sim, _ in hits:
            view = views.get(cid)
            if view is None or view.key == own:
                continue
            best[view.key] = max(best.get(view.key, 0.0), sim)
        return [
            {"reference": public_reference(k, agent), "similarity": round(s, 4)}
            for k, s in sorted(best.items(), key=lambda kv: -kv[1])
        ]

    def delete(self, req: Request) -> dict[str, Any]:
        p = req.params
        check_known(p, ("slug",))
        agent = check_agent(req.agent)
        slug = check_slug(p.get("slug"))
        moved = self.inboxes.delete(agent, slug)
        key = f"memory/{agent}/{slug}"
        if key in self.indexer.stores.manifest.file_states(key):
            self.indexer.delete([key])
        if moved is None:
            return {
                "deleted": False,
                "reference": f"memory/{slug}",
                "message": "no such note (nothing to do)",
            }
        log.info("memory_delete agent=%s slug=%s", agent, slug)
        return {"deleted": True, "reference": f"memory/{slug}", "trash": str(moved)}

    # --- listing -------------------------------------------------------------------------

    def list(self, req: Request) -> dict[str, Any]:
        p = req.params
        check_known(p, ("source", "tag", "pathPrefix", "limit"))
        agent = check_agent(req.agent)
        source = param_opt_str(p, "source") or "memory"
        if source not in SOURCES:
            raise ProtocolError(f"'source' must be one of {', '.join(SOURCES)}")
        tag = (param_opt_str(p, "tag", max_len=200) or "").lstrip("#").lower() or None
        prefix = param_opt_str(p, "pathPrefix", max_len=1000) or ""
        limit = param_int(p, "limit", default=200, lo=1, hi=MAX_LIST)
        if source == "memory":
            where, args = "key >= ? AND key < ?", [f"memory/{agent}/", f"memory/{agent}/\uffff"]
        else:
            where, args = "source = ?", [source]
        notes = []
        for key, src, _owner, title, tags_json, mtime_ns, chunks in self.indexer.stores.manifest.list_files(
            where, args
        ):
            reference = public_reference(key, agent)
            path = reference.split("/", 1)[1]
            tags = json.loads(tags_json)
            if prefix and not path.startswith(prefix.lstrip("/")):
                continue
            if tag and not any(t == tag or t.startswith(tag + "/") for t in tags):
                continue
            notes.append(
                {
                    "reference": reference,
                    "source": src,
                    "title": title,
                    "tags": tags,
                    "modified": dt.datetime.fromtimestamp(mtime_ns / 1e9)
                    .astimezone()
                    .isoformat(timespec="seconds"),
                    "chunks": chunks,
                }
            )
        return {"notes": notes[:limit], "total": len(notes), "truncated": len(notes) > limit}
