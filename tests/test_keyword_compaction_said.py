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
    from sidecar.index import beside
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    monkeypatch.setattr(beside, "SWAP_NOTES", 5)
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
    assert stores.manifest.reread_waiting() == {}
    assert compact_bm25(stores) is True and fills == [1]
    assert _agrees(stores)


def _recut_marked(s: Any, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every note marked to be cut again, with a fifth of the index deleted (the compaction due)
    and few notes (``beside.SWAP_NOTES``) taken for many."""
    from sidecar.index import beside

    _delete(s, 0, 12)
    monkeypatch.setattr(beside, "SWAP_NOTES", 5)
    return int(s.harness.stores.manifest.reread_all())


def test_notes_of_an_offline_root_do_not_hold_a_compaction_back(
    large: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The notes marked to be cut again while their root is offline (a share unmounted: its
    deletions held) cannot be cut until it is back. Counted, they held the compaction back at
    every run, hours or weeks, and status blamed a model switch; now only the notes the sweep
    can cut count."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index.repair import compact_bm25

    s = large
    stores = s.harness.stores
    _recut_marked(s, monkeypatch)
    shares = s.cfg.vault.path.parent / "away"
    shares.mkdir()
    for note in s.cfg.vault.path.rglob("*.md"):  # the share's mount point left empty
        note.rename(shares / f"{len(list(shares.iterdir()))}.md")
    s.harness.sweep()
    assert "vault" in stores.roots_away(), "the emptied vault is not held offline"
    assert stores.manifest.reread_waiting().get("vault", 0) > 5
    with caplog.at_level("INFO"):
        assert compact_bm25(stores) is True  # the vault's notes are not waited for
    assert not [r for r in caplog.records if "bm25_compact_skipped" in r.message]
    health = s.call("health")
    assert health["index"]["keyword_compaction_last"]["outcome"] == "compacted"
    status = render_status(health)
    assert "model switch" not in status and "keyword index last rewritten beside the live one" in status


def test_a_compaction_goes_ahead_once_the_notes_to_cut_stop_falling(
    large: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Notes marked to be cut again that the sweep does not cut (their read fails, a root the
    daemon does not know as away) hold the compaction back one run, not for good: a run that
    finds no fewer of them than the last goes ahead, and says why."""
    from sidecar.index.repair import compact_bm25

    s = large
    stores = s.harness.stores
    _recut_marked(s, monkeypatch)
    assert compact_bm25(stores) is False  # the sweep may be cutting them: waited for
    assert stores.keyword_compaction_last is not None
    outcome, reason, _ = stores.keyword_compaction_last
    assert outcome == "skipped" and "notes wait to be cut again by the sweep" in reason
    with caplog.at_level("INFO"):
        assert compact_bm25(stores) is True  # none cut since: not waited for again
    assert [r for r in caplog.records if "bm25_compact_recut_stalled part=vault" in r.message]
    assert stores.keyword_compaction_last[0] == "compacted"


def test_status_says_deleted_documents_weigh_only_while_they_do(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction skipped (another refill beside runs), then a rebuild drops the deleted
    documents: status said for as long as the daemon ran that they weighed in the scores. Now
    health tells how many are deleted now and whether the rewrite is still due, and says nothing
    of the skipped run once the index it was about is rebuilt."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index.repair import compact_bm25, rebuild_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    assert stores.beside_lock.acquire(blocking=False)
    try:
        assert compact_bm25(stores) is False  # skipped: the side folder is another refill's
    finally:
        stores.beside_lock.release()
    deleted = stores.bm25.deleted_docs()[0]
    last = s.call("health")["index"]["keyword_compaction_last"]
    assert last["outcome"] == "skipped" and last["due_now"] is True and last["deleted_now"] == deleted
    weigh = f"its {deleted:,} deleted documents weigh in its scores until a later run rewrites it"
    assert weigh in render_status(s.call("health"))
    rebuild_bm25(stores)
    stores.bm25.commit()
    assert stores.bm25.deleted_docs()[0] == 0
    assert s.call("health")["index"]["keyword_compaction_last"] is None
    status = render_status(s.call("health"))
    assert "weigh in its scores" not in status and "keyword index rewrite" not in status
