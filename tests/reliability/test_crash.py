"""SIGKILL while an agent writes and while LanceDB compacts: every acknowledged write survives.

The 20-moment kill test of indexing lives in tests/test_sync.py; bench/chaos.py runs this one 30
times over a larger vault (RELIABILITY.md).
"""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonProcess, make_notes, store_ids

pytestmark = pytest.mark.model


def test_kill_during_memory_writes_and_compaction(daemon_factory: Any, tmp_path: Path) -> None:
    """Five kills while a writer stores notes without pause and LanceDB compacts after every third
    write: each acknowledged note is on disk with its content and searchable after the restart,
    and the stores agree with each other."""
    vault = tmp_path / "vault"
    make_notes(vault, 60)
    d: DaemonProcess = daemon_factory(vault, env={"SIDECAR_INDEX_OPTIMIZE_EVERY_WRITES": "3"})
    rng = random.Random(5)
    acked: dict[str, str] = {}
    counter = 0
    for _ in range(5):
        d.start(wait=None)
        d.wait_for(lambda h: h["index"]["sweeps"] >= 1, timeout=60)
        stop = threading.Event()

        def writer(stop: threading.Event = stop) -> None:
            nonlocal counter
            while not stop.is_set():
                slug = f"n{counter}"
                body = f"# N {counter}\n\nCrash token qk{counter}z.\n"
                counter += 1
                try:
                    d.call("write", {"slug": slug, "content": body}, agent="crash")
                    acked[slug] = body
                except Exception:  # not acknowledged: the kill landed first
                    return

        t = threading.Thread(target=writer)
        t.start()
        time.sleep(rng.uniform(0.3, 2.0))
        d.stop(signal.SIGKILL)
        stop.set()
        t.join()
    assert len(acked) >= 5
    d.start(wait=None)
    d.wait_for(lambda h: h["index"]["state"] == "ready" and h["index"]["pending_vectors"] == 0, timeout=120)
    inbox = d.home / "agents" / "crash" / "memory"
    for slug, body in acked.items():
        assert body.split("\n\n", 1)[1] in (inbox / f"{slug}.md").read_text(encoding="utf-8"), slug
        token = body.split("token ", 1)[1].split(".")[0]
        hits = d.call("search", {"query": token, "source": "memory"}, agent="crash")["hits"]
        # Searchable, and first: the token is a rare word, so it outranks near-identical notes
        # that the vector arm cannot tell apart (search.rareTerm*).
        assert hits[0]["reference"] == f"memory/{slug}", (slug, [h["reference"] for h in hits[:3]])
    assert d.stop() == 0
    ids, bm25_ids, vec_ids = store_ids(d.home)
    assert ids == bm25_ids == vec_ids
