"""One function per protocol op. Parameters are validated here; errors are raised as typed
SidecarErrors and the server turns them into error responses. Imports retrieval, indexer, sources.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar import __version__
from sidecar.config import Config, valid_agent
from sidecar.embedder import EmbedderSlot, approx_token_count
from sidecar.errors import NotFoundError, ProtocolError, SourceError
from sidecar.indexer import Indexer
from sidecar.memory_ops import MemoryOps
from sidecar.protocol import (
    PROTOCOL_VERSION,
    Request,
    check_known,
    param_bool,
    param_float,
    param_int,
    param_opt_str,
    param_str,
)
from sidecar.query import Filters
from sidecar.retrieval import Retriever, SearchRequest, SearchResult
from sidecar.sources import (
    SOURCES,
    NoteUnreadable,
    key_for_reference,
    path_for_key,
    public_reference,
    read_note,
)

MAX_QUERY_CHARS = 4000
# Filters and options shared by `search` and `recall`.
_SEARCH_PARAMS = ("limit", "minScore", "source", "tag", "pathPrefix", "since", "until", "preview")


@dataclass
class ServiceState:
    started: float
    queue_depth: Callable[[], int]
    request_sweep: Callable[[bool, frozenset[str] | None, frozenset[str]], None]
    watched: Callable[[], list[Path]]
    reload: Callable[[], dict[str, Any]]


class Handlers:
    def __init__(
        self,
        cfg: Config,
        *,
        indexer: Indexer,
        retriever: Retriever,
        slot: EmbedderSlot,
        service: ServiceState,
        memory: MemoryOps,
    ) -> None:
        self.cfg = cfg
        self.indexer = indexer
        self.retriever = retriever
        self.slot = slot
        self.service = service
        self._ops: dict[str, Callable[[Request], dict[str, Any]]] = {
            "health": self.health,
            "search": self.search,
            "recall": self.recall,
            "why": self.why,
            "get": self.get,
            "index": self.index,
            "reload": self.reload,
            **memory.ops(),
        }

    def dispatch(self, req: Request) -> dict[str, Any]:
        handler = self._ops.get(req.op)
        if handler is None:
            raise ProtocolError(f"unknown op {req.op!r}; known ops: {', '.join(sorted(self._ops))}")
        if req.agent is not None and not valid_agent(req.agent):
            raise ProtocolError(f"invalid agent name {req.agent!r}: use a-z, 0-9, '_' and '-' (max 64)")
        return handler(req)

    # --- ops -------------------------------------------------------------------------------

    def health(self, req: Request) -> dict[str, Any]:
        check_known(req.params, ())
        act = self.indexer.activity
        counts = self.indexer.counts()
        pending = self.indexer.stores.manifest.pending_count()
        embedder = self.slot.describe()
        state = self.indexer.index_state(pending, embedder["state"])
        vec = self.indexer.vectors
        rate = vec.embedded / vec.embed_seconds if vec.embed_seconds > 0 else None
        return {
            "version": __version__,
            "protocol": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "started": self.service.started,
            "uptime_seconds": round(time.time() - self.service.started, 1),
            "embedder": embedder,
            "index": {
                "state": state,
                "phase": act.phase,
                "progress": {"done": act.done, "total": act.total},
                "files": counts["files"],
                "chunks": counts["chunks"],
                "pending_vectors": pending,
                "embed_rate_chunks_per_second": round(rate, 2) if rate else None,
                "by_source": counts["by_source"],
                "by_agent": counts["by_agent"],
                "skipped": {**act.scan_skipped, **{k or "unknown": v for k, v in counts["skipped"].items()}},
                "sweeps": act.sweeps,
            },
            "roots": self.indexer.supervisor.describe(self._watched),
            "vectors": vec.describe(),
            "problems": self.indexer.stores.problems.describe(),
            "queue": {"depth": self.service.queue_depth()},
            "socket": str(self.cfg.socket_path),
            "home": str(self.cfg.home),
            "vault": str(self.cfg.vault.path) if self.cfg.vault.path else None,
        }

    def _watched(self, path: str) -> bool:
        """Whether a live file watch covers this root (else it is only swept)."""
        return any(Path(path).is_relative_to(w) for w in self.service.watched())

    def _request(self, p: dict[str, Any], agent: str | None, text_param: str, limit: int) -> SearchRequest:
        """The search parameters shared by search and recall, validated."""
        query = param_str(p, text_param, max_len=MAX_QUERY_CHARS)
        if "\0" in query:
            raise ProtocolError(f"'{text_param}' contains a NUL byte")
        limit = param_int(p, "limit", default=limit, lo=1, hi=200)
        min_score = param_float(p, "minScore", default=self.cfg.search.min_score, lo=0.0, hi=100.0)
        source = p.get("source")
        sources: tuple[str, ...] | None
        if source is None:
            sources = None
        elif isinstance(source, str) and source in SOURCES:
            sources = (source,)
        elif isinstance(source, list) and source and all(isinstance(s, str) and s in SOURCES for s in source):
            sources = tuple(dict.fromkeys(source))
        else:
            raise ProtocolError(f"'source' must be one of {', '.join(SOURCES)} or a list of them")
        tag = param_opt_str(p, "tag", max_len=200)
        filters = Filters(
            tags=(tag.lstrip("#").lower(),) if tag else (),
            path_prefix=param_opt_str(p, "pathPrefix", max_len=1000),
            since=_date(p, "since"),
            until=_date(p, "until"),
        )
        return SearchRequest(query, limit, min_score, sources, agent, filters)

    def search(self, req: Request) -> dict[str, Any]:
        p = req.params
        check_known(p, ("query", *_SEARCH_PARAMS))
        result = self.retriever.search(self._request(p, req.agent, "query", self.cfg.search.limit))
        return _hits_reply(result, p, {})

    def why(self, req: Request) -> dict[str, Any]:
        """Explain a note's place (or absence) in the results of a query."""
        p = req.params
        check_known(p, ("reference", "query"))
        key = key_for_reference(param_str(p, "reference", max_len=2000), req.agent)
        out = self.retriever.explain(key, param_str(p, "query", max_len=MAX_QUERY_CHARS), req.agent)
        if not out["indexed"]:
            state = self.indexer.stores.manifest.file_states(key).get(key)
            try:
                path_for_key(self.cfg, key)
                exists = True
            except SourceError:
                exists = False
            out["exists"] = exists
            if state is not None and state.state == "skipped":
                out["reason"] = "the file was skipped when indexing (see `file_skipped` in the log)"
            elif exists:
                out["reason"] = "the file exists but is not indexed yet (a sweep will pick it up)"
            else:
                out["reason"] = "no such note in the vault, wiki or this agent's memory"
        return out

    def recall(self, req: Request) -> dict[str, Any]:
        """Auto-injection: the current message (previous turns blended in) -> a context block."""
        p = req.params
        check_known(p, ("message", "history", *_SEARCH_PARAMS))
        history = p.get("history", [])
        if (
            not isinstance(history, list)
            or not all(isinstance(t, str) for t in history)
            or len(history) > 100
        ):
            raise ProtocolError(
                "'history' must be a list of at most 100 strings (previous turns, oldest first)"
            )
        search = self._request(p, req.agent, "message", self.cfg.recall.limit)
        model = self.slot.model
        count = model.count_tokens if model is not None else approx_token_count
        result, block = self.retriever.recall(search.query, history, search, count)
        return _hits_reply(result, p, {"context": block})

    def get(self, req: Request) -> dict[str, Any]:
        p = req.params
        check_known(p, ("reference",))
        reference = param_str(p, "reference", max_len=2000)
        key = key_for_reference(reference, req.agent)
        _root, path = path_for_key(self.cfg, key)
        try:
            _data, text = read_note(path, self.cfg.index.max_file_bytes)
        except FileNotFoundError as exc:
            raise NotFoundError(f"no note {reference!r}") from exc
        except NoteUnreadable as exc:
            raise SourceError(f"{reference!r} cannot be read: {exc.reason}") from exc
        chunks = self.indexer.stores.manifest.chunks_of(key)
        title = chunks[0].title if chunks else path.stem
        return {
            "reference": public_reference(key, req.agent),
            "source": key.split("/", 1)[0],
            "title": title,
            "text": text,
            "lines": text.count("\n") + 1,
            "indexed": bool(chunks),
        }

    def reload(self, req: Request) -> dict[str, Any]:
        check_known(req.params, ())
        return self.service.reload()

    def index(self, req: Request) -> dict[str, Any]:
        p = req.params
        check_known(p, ("rebuild", "confirmDeletions"))
        rebuild = param_bool(p, "rebuild", default=False)
        confirm = param_opt_str(p, "confirmDeletions", max_len=200)
        known = set(self.indexer.supervisor.roots)
        if confirm is not None and confirm not in known:
            raise ProtocolError(f"unknown root {confirm!r}; roots: {', '.join(sorted(known)) or 'none yet'}")
        self.service.request_sweep(rebuild, None, frozenset([confirm]) if confirm else frozenset())
        return {"queued": True, "rebuild": rebuild, "sweeps": self.indexer.activity.sweeps}


def _hits_reply(result: SearchResult, p: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"hits": result.hits, **extra}
    if result.degraded:
        out["degraded"] = result.degraded
    if param_bool(p, "preview", default=False):
        out["analysis"] = result.analysis
    return out


_ISO_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _date(p: dict[str, Any], name: str) -> str | None:
    value = param_opt_str(p, name, max_len=10)
    if value is not None and not _ISO_DAY.match(value):
        raise ProtocolError(f"'{name}' must be a date like 2026-09-01")
    return value
