"""The daemon's socket loop and handlers in the test process: a real ``Server`` on a real Unix
socket, the real ``Handlers`` over real stores, no subprocess, no worker threads.

For tests of an op or of the socket loop: they start in milliseconds and fail with the server's
own traceback. The index op sweeps at once (in the request) instead of queueing a sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from sidecar.clients.client import Client
from sidecar.config import Config
from sidecar.daemon.compose import Parts, build_handlers, build_server
from sidecar.daemon.handlers import ServiceState
from sidecar.daemon.server import bind_socket
from sidecar.index.indexer import Indexer
from sidecar.index.problems import Problems
from sidecar.index.repair import Repair
from sidecar.index.vectoring import Stores as IndexStores
from sidecar.index.vectoring import Vectoring
from sidecar.memory.inbox import Inboxes
from sidecar.model.embedder import EmbedderSlot
from sidecar.vault.supervisor import Supervisor


class Stores(Protocol):
    """What the server needs of the tests' Harness (real stores, an indexer, the model slot)."""

    cfg: Config
    slot: EmbedderSlot
    problems: Problems
    stores: IndexStores
    vectors: Vectoring
    supervisor: Supervisor
    indexer: Indexer
    repair: Repair

    def sweep(self) -> dict[str, int]: ...


class InProcessServer:
    """Serves ``harness``'s stores on ``harness.cfg.socket_path`` until ``close``."""

    def __init__(self, harness: Stores) -> None:
        cfg = self.cfg = harness.cfg
        self.harness = harness
        self.sweeps: list[tuple[bool, frozenset[str] | None, frozenset[str]]] = []  # index op calls
        cfg.agents_dir.mkdir(parents=True, exist_ok=True)
        service = ServiceState(
            started=time.time(),
            queue_depth=lambda: 0,
            request_sweep=self._sweep,
            watched=list,
            reload=lambda: {"reloaded": False, "changed": []},
        )
        parts = Parts(
            harness.problems,
            harness.stores,
            harness.vectors,
            harness.supervisor,
            harness.indexer,
            harness.repair,
        )
        # The daemon's own composition: the same handlers over the same parts, the same limits.
        self.handlers = build_handlers(
            cfg, parts, harness.slot, service, Inboxes(cfg, home=harness.supervisor.home)
        )
        self.server = build_server(cfg, self.handlers)
        self.listener = bind_socket(cfg.socket_path)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._serving = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="in-process-server", daemon=True)
        self._thread.start()
        if not self._serving.wait(10):
            raise AssertionError("the in-process server did not start")

    @property
    def socket(self) -> Path:
        return self.cfg.socket_path

    def _sweep(self, rebuild: bool, roots: frozenset[str] | None, confirm: frozenset[str]) -> None:
        self.sweeps.append((rebuild, roots, confirm))
        if rebuild:
            self.harness.indexer.clear()
        self.harness.sweep()

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._serving.set()
            await self.server.serve(self.listener, self._stop)

        try:
            # asyncio.run ends the connections still open (cancels their tasks) before it returns.
            asyncio.run(main())
        except BaseException as exc:  # handed to close(), which fails the test with it
            self._error = exc
            self._serving.set()

    def client(self, agent: str | None = None, timeout: float = 30.0) -> Client:
        return Client(self.cfg.socket_path, agent=agent, timeout=timeout)

    def call(self, op: str, params: dict[str, Any] | None = None, agent: str | None = None) -> dict[str, Any]:
        with self.client(agent) as c:
            return c.call(op, params)

    def ask_stop(self) -> None:
        """Begin the stop, as SIGTERM does, without waiting for it (``close`` waits)."""
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop ended on its own
                self._loop.call_soon_threadsafe(self._stop.set)

    def close(self) -> None:
        """Stop serving (open connections are closed), remove the socket, re-raise a loop crash."""
        self.ask_stop()
        self._thread.join(15)
        self.listener.close()
        self.cfg.socket_path.unlink(missing_ok=True)
        if self._thread.is_alive():
            raise AssertionError("the in-process server did not stop within 15 s")
        if self._error is not None:
            raise self._error
