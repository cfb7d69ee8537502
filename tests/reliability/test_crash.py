"""SIGKILL while an agent writes and while LanceDB compacts: every acknowledged write survives.

The 20-moment kill test of indexing lives in tests/test_sync.py; bench/chaos.py runs this one 30
times over a larger vault (RELIABILITY.md).
"""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_notes, store_ids
from tests.daemon_process import DaemonProcess
from tests.reliability.writer import AckedWriter

pytestmark = pytest.mark.model


@pytest.mark.timeout(3600)  # 6-13 daemon starts with the real model (a busy machine: minutes each)
def test_kill_during_memory_writes_and_compaction(daemon_factory: Any, tmp_path: Path) -> None:
    """Kills while a writer stores notes without pause and LanceDB compacts after every third
    write: each acknowledged note is on disk with its content and searchable after the restart,
    and the stores agree with each other. Each kill lands at a random moment from the start of a
    random one of the round's first four writes (the first one right after a restart included):
    for half of them up to twice as long as a write took last (during the write, or just after
    its acknowledgement), for the other half within 0.3 s (just after the previous write's
    acknowledgement), so the moments scale to what a write costs on this machine. Rounds go on
    until 5 writes were acknowledged (at least 5 kills, at most 12): a busy machine gets more
    rounds, not a failure."""
    vault = tmp_path / "vault"
    make_notes(vault, 60)
    # Crash consistency, not ranking, is under test: the faster real model (3x) embeds the writes.
    d: DaemonProcess = daemon_factory(
        vault, env={"SIDECAR_INDEX_OPTIMIZE_EVERY_WRITES": "3", "SIDECAR_EMBEDDER_MODEL": "all-MiniLM-L6-v2"}
    )
    rng = random.Random(5)
    writer = AckedWriter(d, "crash")
    kills: list[tuple[bool, float | None]] = []  # per kill: a write cut short, seconds since an ack
    while len(kills) < 5 or (len(writer.acked) < 5 and len(kills) < 12):
        d.start(wait=None)
        # Bounds against a hang only (a busy machine: a sweep takes a minute, a write seconds).
        d.wait_for(lambda h: h["index"]["first_sweep_done"], timeout=300)
        with writer.running() as writes:
            first = writes.started(rng.randrange(4), timeout=600)
            assert first is not None, f"no write sent:\n{d.log.read_text()[-3000:]}"
            # Half the kills spread over the write and the next, half within 0.3 s of the write's
            # start: just after the previous write's acknowledgement (the writer sends at once),
            # where a daemon that answered before the note was in place loses it, at any load.
            spread = 2.0 * writer.last_took if rng.random() < 0.5 else min(0.3, 2.0 * writer.last_took)
            time.sleep(max(0.0, first.sent + rng.uniform(0.0, spread) - time.monotonic()))
            killed = time.monotonic()
            d.stop(signal.SIGKILL)
        kills.append((writes.cut_at(killed) is not None, writes.since_ack(killed)))
    assert len(writer.acked) >= 5, f"{len(writer.acked)} writes acknowledged in {len(kills)} rounds"
    # A restart after a write torn mid-way (its temp file left, its indexing half done) was
    # exercised. Kills just after an acknowledgement are not asserted (their share depends on
    # the load); a daemon that answered before the note was in place is caught by damaged().
    assert any(cut for cut, _ in kills), f"no kill cut a write in flight: {kills}"
    d.start(wait=None)
    d.wait_for(lambda h: h["index"]["state"] == "ready" and h["index"]["pending_vectors"] == 0, timeout=600)
    assert writer.damaged() == (set(), set()), kills
    for slug in writer.acked:
        hits = d.call("search", {"query": writer.token(slug), "source": "memory"}, agent="crash")["hits"]
        # Searchable, and first: the token is a rare word, so it outranks near-identical notes
        # that the vector arm cannot tell apart (search.rareTerm*).
        assert hits[0]["reference"] == f"memory/{slug}", (slug, [h["reference"] for h in hits[:3]])
    assert d.stop() == 0
    ids, bm25_ids, vec_ids = store_ids(d.home)
    assert ids == bm25_ids == vec_ids
