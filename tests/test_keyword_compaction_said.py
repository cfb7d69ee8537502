"""What health and ``sidecar status`` say of a large vault's keyword compaction beside the live
index (``repair.compact_bm25`` -> ``index.beside``): each phase while it runs, nothing once it
ended (a step left running at a stop tells no more), and what came of the last run that found it
due (compacted, or skipped and why: another refill holds the side folder, notes wait to be cut
again)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests import test_keyword_compaction_beside as beside_tests
from tests.conftest import write

large = beside_tests.large  # the small vault taken for a large one, alpha's memory too
_delete, _dropped, _agrees = beside_tests._delete, beside_tests._dropped, beside_tests._agrees


def test_health_and_status_say_each_phase_of_a_compaction_beside(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the copy is filled, while the notes written meanwhile are added to it, and while it
    is swapped in, health says the phase and its counts and status says it in words."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index import beside
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    real_fill, real_cu = beside.fill_bm25, beside.catch_up
    seen: list[tuple[Any, str]] = []

    def health() -> None:  # from the step's thread, through the daemon's handlers
        h = s.call("health")
        seen.append((h["index"]["keyword_compaction"], render_status(h)))

    def fill(index: Any, manifest: Any, stop: Any = None, progress: Any = None) -> None:
        real_fill(index, manifest, stop, progress)
        health()
        for i in (20, 21):  # written meanwhile: caught up with no lock held
            write(s.cfg.vault.path / f"Log/Note{i}.md", f"# Note {i}\n\nEdited now, zqlate{i}.\n")
        beside_tests._threaded(s.harness.sweep)

    def cu(new: Any, manifest: Any, keys: Any, *, everything: bool, stop: Any = None) -> None:
        health()
        real_cu(new, manifest, keys, everything=everything, stop=stop)
        if not beside_tests._write_lock_held(stores):  # one more written before the swap
            write(s.cfg.vault.path / "Log/Note22.md", "# Note 22\n\nEdited last, zqlast.\n")
            beside_tests._threaded(s.harness.sweep)

    monkeypatch.setattr(beside, "fill_bm25", fill)
    monkeypatch.setattr(beside, "catch_up", cu)
    assert compact_bm25(stores) is True
    total = stores.manifest.indexed_chunk_count()
    phases = [state for state, _ in seen]
    assert phases == [
        {"phase": "filling", "done": total, "total": total},
        {"phase": "catching up", "done": 0, "total": 2},
        {"phase": "swapping", "done": 0, "total": 1},
    ]
    said = [status for _, status in seen]
    assert f"rewriting the keyword index beside the live one ({total:,} of {total:,} chunks)" in said[0]
    assert "rewriting the keyword index beside the live one (adding the 2 notes written meanwhile)" in said[1]
    assert (
        "rewriting the keyword index beside the live one (swapping it in, the 1 note written meanwhile "
        "added first); searches answer from the live index, writes are slower meanwhile" in said[2]
    )
    assert stores.bm25.search("zqlast", 5) and _agrees(stores)


def test_a_step_left_running_at_a_stop_tells_health_nothing_more(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fill's step goes on in its thread after a stop ended the compaction and cleared what
    health says; its progress, told as its batch ends, is not said: health said a compaction ran
    that had ended (until the next one's phase, an hour on)."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index.repair import compact_bm25
    from sidecar.stores.bm25 import Bm25Index

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    old = stores.bm25
    stop, gate = threading.Event(), threading.Event()
    real_add = Bm25Index.add

    def add(self: Any, docs: Any) -> None:
        if self is not old and not gate.is_set():  # the fill's batch: the stop asked as it is added
            stop.set()
            gate.wait(60)
        real_add(self, docs)

    monkeypatch.setattr(Bm25Index, "add", add)
    assert compact_bm25(stores, stop) is False
    assert stores.keyword_compaction is None
    gate.set()  # the batch ends: the fill tells its progress, then sees the stop
    _dropped(stores)
    health = s.call("health")
    assert health["index"]["keyword_compaction"] is None
    assert health["index"]["keyword_compaction_last"]["outcome"] == "stopped"
    status = render_status(health)
    assert "rewriting the keyword index" not in status
    assert "keyword index rewrite stopped " in status and "the daemon stopped" in status
    assert stores.bm25 is old and _agrees(stores)


def test_a_compaction_skipped_for_another_refill_is_logged_and_said(
    large: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A compaction due while another refill beside holds the side folder (an upgrade's, or a
    stopped one whose step still ends) is skipped with a logged reason, and health and status say
    so; it returned False without a word, hour after hour."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    assert stores.beside_lock.acquire(blocking=False)  # another refill's
    try:
        with caplog.at_level("INFO"):
            assert compact_bm25(stores) is False
    finally:
        stores.beside_lock.release()
    skipped = [r for r in caplog.records if "bm25_compact_skipped" in r.message]
    assert len(skipped) == 1 and skipped[0].levelname == "INFO"
    assert "part=vault reason=busy" in skipped[0].message
    health = s.call("health")
    last = health["index"]["keyword_compaction_last"]
    assert (
        last["outcome"] == "skipped" and "another refill of the keyword index beside runs" in last["reason"]
    )
    assert "keyword index rewrite skipped " in render_status(health)
    assert compact_bm25(stores) is True  # the next run does it
    last = s.call("health")["index"]["keyword_compaction_last"]
    assert last["outcome"] == "compacted"
    status = render_status(s.call("health"))
    assert (
        "keyword index last rewritten beside the live one " in status
        and "deleted documents dropped" in status
    )


def test_a_compaction_waits_while_notes_wait_to_be_cut_again(
    large: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A model switch (or a new chunking) marks every note to be cut again; the sweep does it,
    hours on a network share, and each note cut again deletes its old documents. The compaction
    then came due and every hourly run filled a whole second index, only to give way to the
    notes cut meanwhile. Now it is skipped, logged, while more than a few hundred notes wait, and
    runs once the sweep has cut them."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index import beside, repair
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    monkeypatch.setattr(repair, "_RECUT_NOTES", 5, raising=False)  # (raising: so it fails on main)
    real_fill = beside.fill_bm25
    fills: list[int] = []

    def fill(index: Any, manifest: Any, stop: Any = None, progress: Any = None) -> None:
        fills.append(1)
        real_fill(index, manifest, stop, progress)

    monkeypatch.setattr(beside, "fill_bm25", fill)
    waiting = stores.manifest.reread_all()  # as a switch to a model with another tokenizer does
    assert waiting > 5
    with caplog.at_level("INFO"):
        assert compact_bm25(stores) is False
    assert fills == [], "a whole index was filled while every note waited to be cut again"
    skipped = [r.message for r in caplog.records if "bm25_compact_skipped" in r.message]
    assert skipped and "part=vault reason=recut" in skipped[0]
    health = s.call("health")
    last = health["index"]["keyword_compaction_last"]
    assert last["outcome"] == "skipped" and f"{waiting:,} notes wait to be cut again" in last["reason"]
    status = render_status(health)
    assert "keyword index rewrite skipped " in status and f"{waiting:,} notes wait to be cut again" in status
    s.harness.sweep()  # the notes cut again
    assert stores.manifest.reread_waiting() == 0
    assert compact_bm25(stores) is True and fills == [1]
    assert _agrees(stores)
