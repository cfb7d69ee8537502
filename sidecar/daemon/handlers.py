"""One function per protocol op. Parameters are validated here (those search and recall share:
``searchparams``); errors are raised as typed SidecarErrors and the server turns them into error
responses; search results become replies through ``sidecar.contracts.wire_json``. The note a reference
names: ``naming``; whether a link's heading or block is in its note: ``anchors``. The ops are cut
by family into mixins of ``Handlers``: ``health_op`` (health), ``search_ops`` (search, recall,
why), ``note_ops`` (get, related, outline); here the dispatch and the admin ops (reload, index).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar.config import Config, agent_name_problem, valid_agent
from sidecar.contracts.errors import ProtocolError
from sidecar.contracts.printable import quoted
from sidecar.contracts.protocol import Request, check_known, param_bool, param_opt_str
from sidecar.daemon import limits
from sidecar.daemon.health_op import HealthOp
from sidecar.daemon.note_ops import NoteOps
from sidecar.daemon.search_ops import SearchOps
from sidecar.index.indexer import Indexer
from sidecar.index.problems import Problems
from sidecar.index.vectoring import Vectoring
from sidecar.memory.ops import MemoryOps
from sidecar.model.embedder import EmbedderSlot
from sidecar.search.retrieval import Retriever
from sidecar.stores.manifest import Manifest
from sidecar.vault.supervisor import Supervisor
from sidecar.vault.swept_roots import roots as note_roots
from sidecar.vault.timeout import SharedProbes


@dataclass
class ServiceState:
    started: float
    queue_depth: Callable[[], int]
    # Queues a sweep; returns the request's number (``index.asked_done``), or None where requests
    # are not numbered (a read-only index answers the op with an error first).
    request_sweep: Callable[[bool, frozenset[str] | None, frozenset[str]], int | None]
    watched: Callable[[], list[Path]]
    reload: Callable[[], dict[str, Any]]
    # (changes applied, changes known) while file changes wait or are being applied, else None.
    catching_up: Callable[[], tuple[int, int, int] | None] = lambda: None
    # The highest number of an `index` request whose sweep has ended (the daemon's own sweeps
    # are not numbered).
    asked_done: Callable[[], int] = lambda: 0
    # Whether a rebuild was asked and its sweep has not ended.
    rebuilding: Callable[[], bool] = lambda: False
    # Whether that rebuild still waits in the queue (it has not emptied the index yet).
    rebuild_queued: Callable[[], bool] = lambda: False
    # The start by a clock no step of the wall clock moves, and that clock: the uptime (by the
    # wall clock a step back made it negative, a step ahead days long).
    started_steady: float = field(default_factory=time.monotonic)
    steady: Callable[[], float] = time.monotonic

    def uptime(self) -> float:
        """Seconds since the start, by the steady clock."""
        return max(self.steady() - self.started_steady, 0.0)


class Handlers(HealthOp, SearchOps, NoteOps):
    def __init__(
        self,
        cfg: Config,
        *,
        indexer: Indexer,
        manifest: Manifest,
        supervisor: Supervisor,
        vectors: Vectoring,
        problems: Problems,
        retriever: Retriever,
        slot: EmbedderSlot,
        service: ServiceState,
        memory: MemoryOps,
    ) -> None:
        self.cfg = cfg
        self.indexer = indexer
        self.manifest = manifest
        self.supervisor = supervisor
        self.vectors = vectors
        self.problems = problems
        self.retriever = retriever
        self.slot = slot
        self.service = service
        self.memory = memory
        # The index limits' figures of health, each kept a second (a scan of the queue each).
        self.limits = limits.Limits(manifest)
        # A call on a note's file that still hangs, per root (see _on_disk).
        self._hanging = SharedProbes()
        # The same for the reads of linked notes ``get`` makes for their anchors, kept apart: one
        # slow there (a note on a slow share) leaves the share's own reads alone.
        self._anchors_hanging = SharedProbes()
        self.anchor_clock: Callable[[], float] = time.monotonic  # tests move it on
        self._ops: dict[str, Callable[[Request], dict[str, Any]]] = {
            "health": self.health,
            "search": self.search,
            "recall": self.recall,
            "why": self.why,
            "get": self.get,
            "related": self.related,
            "index": self.index,
            "outline": self.outline,
            "reload": self.reload,
            **memory.ops(),
        }

    def dispatch(self, req: Request) -> dict[str, Any]:
        handler = self._ops.get(req.op)
        if handler is None:
            raise ProtocolError(f"unknown op {quoted(req.op)}; known ops: {', '.join(sorted(self._ops))}")
        if req.agent is not None and not valid_agent(req.agent):
            raise ProtocolError(agent_name_problem(req.agent))
        return handler(req)

    # --- ops -------------------------------------------------------------------------------

    def reload(self, req: Request) -> dict[str, Any]:
        check_known(req.params, ())
        return self.service.reload()

    def index(self, req: Request) -> dict[str, Any]:
        p = req.params
        check_known(p, ("rebuild", "confirmDeletions"))
        rebuild = param_bool(p, "rebuild", default=False)
        confirm = param_opt_str(p, "confirmDeletions", max_len=200)
        # Every root a sweep would read (the agents' inboxes too), and those it has seen.
        known = {r.name for r in note_roots(self.cfg)} | set(self.supervisor.roots)
        if confirm is not None and confirm not in known:
            raise ProtocolError(
                f"unknown root {quoted(confirm)}; roots: {', '.join(sorted(known)) or 'none yet'}"
            )
        if rebuild:
            # A root offline or its mass deletion held (unless confirmed here): its notes would
            # leave the index.
            self.indexer.refuse_rebuild([confirm] if confirm else [])
        sweeps = self.indexer.activity.sweeps
        ticket = self.service.request_sweep(rebuild, None, frozenset([confirm]) if confirm else frozenset())
        out: dict[str, Any] = {"queued": True, "rebuild": rebuild, "sweeps": sweeps}
        if ticket is not None:  # done once health's index.asked_done reaches it
            out["ticket"] = ticket
        return out
