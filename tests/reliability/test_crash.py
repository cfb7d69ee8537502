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


@pytest.mark.timeout(1800)  # six daemon starts with the real model (a busy machine: minutes each)
def test_kill_during_memory_writes_and_compaction(daemon_factory: Any, tmp_path: Path) -> None:
    """Five kills while a writer stores notes without pause and LanceDB compacts after every third
    write: each acknowledged note is on disk with its content and searchable after the restart,
    and the stores agree with each other. Each kill lands at a random moment after the round's
    first acknowledged write: timed from the start alone, on a busy machine (load 15-30) every
    kill landed before the first write was answered, no write was acknowledged, and the test
    failed without having tested anything."""
    vault = tmp_path / "vault"
    make_notes(vault, 60)
    # Crash consistency, not ranking, is under test: the faster real model (3x) embeds the writes.
    d: DaemonProcess = daemon_factory(
        vault, env={"SIDECAR_INDEX_OPTIMIZE_EVERY_WRITES": "3", "SIDECAR_EMBEDDER_MODEL": "all-MiniLM-L6-v2"}
    )
    rng = random.Random(5)
    writer = AckedWriter(d, "crash")
    cuts = 0  # kills that cut a write short (the moment under test)
    for _ in range(5):
        d.start(wait=None)
        d.wait_for(lambda h: h["index"]["sweeps"] >= 1, timeout=300)
        with writer.running() as answered:
            # A bound against a hang only: on a busy machine a write takes seconds.
            assert answered.wait(600), f"no write acknowledged:\n{d.log.read_text()[-3000:]}"
            time.sleep(rng.uniform(0.3, 2.0))  # a random moment of the writes: the kill lands there
            killed = time.monotonic()
            d.stop(signal.SIGKILL)
        cuts += writer.in_flight(killed)
    assert len(writer.acked) >= 5
    assert cuts >= 1, "no kill landed while a write was in flight"
    d.start(wait=None)
    d.wait_for(lambda h: h["index"]["state"] == "ready" and h["index"]["pending_vectors"] == 0, timeout=600)
    assert writer.damaged() == (set(), set())
    for slug in writer.acked:
        hits = d.call("search", {"query": writer.token(slug), "source": "memory"}, agent="crash")["hits"]
        # Searchable, and first: the token is a rare word, so it outranks near-identical notes
        # that the vector arm cannot tell apart (search.rareTerm*).
        assert hits[0]["reference"] == f"memory/{slug}", (slug, [h["reference"] for h in hits[:3]])
    assert d.stop() == 0
    ids, bm25_ids, vec_ids = store_ids(d.home)
    assert ids == bm25_ids == vec_ids
