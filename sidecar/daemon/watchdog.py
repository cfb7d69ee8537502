"""Liveness for systemd: heartbeats of the event loop and the indexer thread, STATUS= and WATCHDOG=1.

WATCHDOG=1 is sent only while both beat: the event loop once a second, the indexer thread between
jobs and after every batch of a sweep (and while it waits for a slow share). STATUS= is one line of
what the daemon does right now, for ``systemctl status``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from sidecar.config import Config
from sidecar.index.activity import Activity
from sidecar.index.vectoring import Vectoring
from sidecar.runtime.notify import Notifier
from sidecar.stores.manifest import Manifest
from sidecar.vault.supervisor import Supervisor

log = logging.getLogger(__name__)


class Watchdog:
    """The two heartbeats and what they tell systemd."""

    def __init__(self, cfg: Config, notifier: Notifier) -> None:
        self.cfg = cfg
        self.notifier = notifier
        self.loop_beat = self.indexer_beat = time.monotonic()

    def indexer_alive(self, _activity: object = None) -> None:
        self.indexer_beat = time.monotonic()

    async def beat(self) -> None:
        """Proves the event loop turns; the watchdog pings only while it does."""
        while True:
            self.loop_beat = time.monotonic()
            await asyncio.sleep(1.0)

    def notify(self, status: Callable[[], str]) -> None:
        """STATUS= for `systemctl status`, and WATCHDOG=1 when the loop and the indexer are alive."""
        if not self.notifier.enabled:
            return
        try:
            self.notifier.send(f"STATUS={status()}")
        except Exception as exc:  # e.g. the manifest busy: the line is skipped, not the ping
            log.warning("watchdog_status_failed error=%r", exc)
        if self.cfg.watchdog_usec:
            now = time.monotonic()
            limit = self.cfg.watchdog_usec / 1e6
            loop_ok = now - self.loop_beat < limit / 2
            # The indexer thread beats between jobs and after every batch of a sweep.
            indexer_ok = now - self.indexer_beat < max(limit, 300.0)
            if loop_ok and indexer_ok:
                self.notifier.send("WATCHDOG=1")
            else:
                log.error("watchdog_missed event_loop_ok=%s indexer_ok=%s", loop_ok, indexer_ok)


def status_line(
    act: Activity,
    supervisor: Supervisor,
    manifest: Manifest,
    embedder_state: str,
    vectors: Vectoring | None = None,
) -> str:
    """One line for `systemctl status`: what the daemon is doing right now."""
    offline = [st.name for st in supervisor.roots.values() if st.offline]
    if not act.first_sweep_done:  # before the first sweep's end (also while it is still starting)
        text = f"building {act.done:,}/{act.total:,} notes"
    else:
        counts = manifest.counts()
        pending = manifest.pending_count()
        keys = vectors.stores.continuous() if vectors is not None else {}
        # Not the chunks the last indexing of a note written continuously added: no backlog.
        ok = embedder_state == "ok"  # else every waiting chunk counts (none gets a vector)
        pending -= min(pending, manifest.pending_count_of(keys)) if pending and keys and ok else 0
        text = f"ready: {counts['files']:,} notes, {counts['chunks']:,} chunks"
        if pending and embedder_state == "ok":
            text += f", {pending:,} waiting for vectors"
        elif embedder_state == "off":
            text += ", keyword search only (vectors off)"
        elif embedder_state != "ok":
            text += f", keyword search only (model {embedder_state})"
        if keys:  # beside what the model's state says, never instead of it
            text += f", {len(keys):,} note{'' if len(keys) == 1 else 's'} written continuously"
        if vectors is not None and vectors.stores.building is not None:
            waiting = manifest.pending_count("has_next")
            text += f"; model switch: {waiting:,} chunks wait for the new model's vectors"
            if left := manifest.left_to_switch():
                text += f" ({left:,} found by keywords only until it ends)"
    if offline:
        text += f"; offline: {', '.join(offline)}"
    asked = supervisor.describe_waiting()
    if asked:  # a share that hangs: `systemctl status` said "ready" for as long as it hung
        what = {"listing": "the listing of", "stat": "the stat of"}.get(asked["call"], "the read of")
        text += f"; waiting {asked['seconds']:.0f} s for {asked['root']} to answer {what} {asked['path']}"
        if asked.get("slow"):  # not given up after probeTimeoutSeconds: it answered late before
            text += f" (a slow share: up to {asked['timeout_seconds']:.0f} s)"
    return text
