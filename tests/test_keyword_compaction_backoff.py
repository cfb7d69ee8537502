"""A large vault's keyword compaction over time (``repair.compact_bm25``): after it gave way to
the notes written meanwhile (a busy vault) the next runs back off, said in health and status;
what status says of the last run goes once the index it is about was rebuilt, and follows the
index's deletions after a rewrite."""

from __future__ import annotations

import json
import shutil
import time
from typing import Any

import pytest

from sidecar.clients.foreground import duration
from sidecar.runtime.steadyclock import steady_reading
from tests import test_keyword_compaction_beside as beside_tests
from tests.conftest import write

large = beside_tests.large  # the small vault taken for a large one, alpha's memory too
_delete, _dropped, _agrees = beside_tests._delete, beside_tests._dropped, beside_tests._agrees


class _Busy:
    """Notes written again by another thread during each fill and each catch-up with no lock
    held (``beside.SWAP_NOTES`` set low): every compaction falls behind and gives way while
    ``on``. ``fills``: the whole fills begun."""

    def __init__(self, s: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        from sidecar.index import beside

        self.s, self.on, self.fills, self.edits = s, True, 0, 0
        monkeypatch.setattr(beside, "SWAP_NOTES", 2)
        real_fill, real_cu = beside.fill_bm25, beside.catch_up
        stores = s.harness.stores

        def fill(index: Any, manifest: Any, stop: Any = None, progress: Any = None) -> None:
            self.fills += 1
            real_fill(index, manifest, stop, progress)
            self._write()

        def cu(new: Any, manifest: Any, keys: Any, *, everything: bool, stop: Any = None) -> None:
            real_cu(new, manifest, keys, everything=everything, stop=stop)
            if not beside_tests._write_lock_held(stores):  # the unlocked passes only
                self._write()

        monkeypatch.setattr(beside, "fill_bm25", fill)
        monkeypatch.setattr(beside, "catch_up", cu)

    def _write(self) -> None:
        if not self.on:
            return
        n, self.edits = self.edits, self.edits + 1

        def busy() -> None:
            for i in (20, 21, 22):
                write(self.s.cfg.vault.path / f"Log/Note{i}.md", f"# Note {i}\n\nEdit {n}, zqedit{n}x{i}.\n")
            self.s.harness.sweep()

        beside_tests._threaded(busy)


def test_a_compaction_that_gave_way_to_a_busy_vault_backs_off(
    large: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A vault written to faster than a compaction catches up (a sync, a checkout, a large
    sweep): each run filled a whole copy of the index and gave way, every hour for as long as it
    lasted. Now the runs after a give-way skip it, more of them at each give-way in a row (1, 3,
    then 7), logged and said in health and status; once it gets through, it no longer backs off."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index import repair
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    busy = _Busy(s, monkeypatch)
    now = [1000.0]
    monkeypatch.setattr(repair, "_age_clock", lambda: now[0])
    assert compact_bm25(stores) is False  # filled, then gave way to the notes written meanwhile
    _dropped(stores)
    assert busy.fills == 1 and stores.keyword_compaction_last is not None
    assert stores.keyword_compaction_last[0] == "gave way"
    now[0] += 300.0  # five minutes after: the next run (skipped) and the one after it (tried) to come
    health = s.call("health")
    backoff = health["index"]["keyword_compaction_last"]["backoff"]
    every = s.cfg.index.optimize_minutes * 60
    assert backoff == {"gave_way": 1, "runs_to_skip": 1, "next_try_seconds": round(2 * every - 300)}
    assert f"it gave way once in a row, next try in about {duration(2 * every - 300)}" in render_status(
        health
    )
    with caplog.at_level("INFO"):
        assert compact_bm25(stores) is False  # backs off: no fill
    assert busy.fills == 1, "the run after a give-way filled a whole copy again"
    skipped = [r.message for r in caplog.records if "bm25_compact_skipped" in r.message]
    assert skipped and "part=vault reason=backoff" in skipped[0]
    last = s.call("health")["index"]["keyword_compaction_last"]
    assert last["outcome"] == "skipped" and "backing off after it gave way once in a row" in last["reason"]
    assert "the next run tries again" in last["reason"]
    last = s.call("health")["index"]["keyword_compaction_last"]
    assert last["backoff"]["next_try_seconds"] == round(every)  # the skip just now: one run on
    status = render_status(s.call("health"))
    assert "keyword index rewrite skipped " in status and "backing off after it gave way" in status
    assert status.count("gave way") == 1, "the give-ways said twice on one line"
    runs = [compact_bm25(stores) for _ in range(4)]  # tried (gave way again), then 3 skipped
    _dropped(stores)
    assert runs == [False] * 4 and busy.fills == 2
    assert stores.keyword_backoff == (2, 0)
    busy.on = False  # the vault calmed down
    assert compact_bm25(stores) is True and busy.fills == 3
    assert stores.keyword_backoff is None and _agrees(stores)
    last = s.call("health")["index"]["keyword_compaction_last"]
    assert last["outcome"] == "compacted" and last["backoff"] is None


def test_the_back_off_grows_to_its_bound_and_ends_when_nothing_is_due(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Give-ways in a row skip 1, 3, then at most ``BACKOFF_MAX_RUNS`` runs; a run that finds
    the compaction no longer due (a rebuild dropped the deleted documents) ends the back-off."""
    from sidecar.index import repair
    from sidecar.index.repair import compact_bm25, rebuild_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    busy = _Busy(s, monkeypatch)
    skipped: list[int] = []
    for _ in range(3):
        assert compact_bm25(stores) is False
        _dropped(stores)
        assert stores.keyword_backoff is not None
        skipped.append(stores.keyword_backoff[1])
        for _ in range(skipped[-1]):
            assert compact_bm25(stores) is False
    assert skipped == [1, 3, repair.BACKOFF_MAX_RUNS] and busy.fills == 3
    rebuild_bm25(stores)
    assert compact_bm25(stores) is False  # nothing due
    assert stores.keyword_backoff is None


def test_the_last_rewrite_said_follows_the_index_and_goes_with_it(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Status said "keyword index last rewritten ... ago" as it was right after the rewrite until
    a restart: weeks, the index long written to, rebuilt or repaired since. Now its age is the
    daemon's own (no wall clock set back bends it), it says the documents deleted since and when
    the rewrite is due again, and it goes once a rebuild refilled the index."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index import repair
    from sidecar.index.repair import compact_bm25, rebuild_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    assert compact_bm25(stores) is True
    real_clock = repair._age_clock
    monkeypatch.setattr(repair, "_age_clock", lambda: real_clock() + 7200.0)  # two hours on
    monkeypatch.setattr(repair.time, "time", lambda: 0.0)  # the wall clock set far back
    status = render_status(s.call("health"))
    assert "keyword index last rewritten beside the live one 2h 0m ago: " in status
    assert "deleted since" not in status
    _delete(s, 12, 14)  # two notes deleted since: their documents too
    last = s.call("health")["index"]["keyword_compaction_last"]
    assert last["deleted_now"] > 0 and last["due_now"] is False
    status = render_status(s.call("health"))
    assert f"; {last['deleted_now']:,} documents deleted since" in status
    for i in range(14, 30):  # edited: their old documents deleted, a fifth of the index again
        write(s.cfg.vault.path / f"Log/Note{i}.md", f"# Note {i}\n\nThe lantern {i} again, zqnew{i}.\n")
    s.harness.sweep()
    status = render_status(s.call("health"))
    assert "documents deleted since, due again (the next run rewrites it)" in status
    rebuild_bm25(stores)  # what the rewrite said is of an index no longer there
    health = s.call("health")
    assert health["index"]["keyword_compaction_last"] is None
    assert "keyword index last rewritten" not in render_status(health)


@pytest.mark.parametrize("why", ["rebuild", "replaced"])
def test_a_give_way_to_a_rebuild_or_a_repair_starts_no_back_off(large: Any, why: str) -> None:
    """A refill beside that gave way to a rebuild (the index emptied meanwhile) or a repair (it
    was replaced) wasted no fill on a busy vault: the next run must not skip the rewrite."""
    from sidecar.index import repair

    stores = large.harness.stores
    repair._given_up(stores, why)
    assert stores.keyword_compaction_last is not None and stores.keyword_compaction_last[0] == "gave way"
    assert stores.keyword_backoff is None
    repair._given_up(stores, "behind")  # the give-way to a busy vault: backs off
    assert stores.keyword_backoff == (1, 1)


@pytest.mark.skipif(
    steady_reading()[0].startswith("run:"), reason="no clock counting suspends here (CLOCK_BOOTTIME, Linux)"
)
def test_the_last_rewrite_s_age_counts_the_time_the_machine_slept(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The monotonic clock stops while a laptop sleeps: a rewrite made before a night's sleep
    was said "0s ago" in the morning. The age is read on CLOCK_BOOTTIME, which counts it (the
    sleep here: that clock moved on 8 hours, the monotonic one did not)."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index.repair import compact_bm25
    from sidecar.runtime import steadyclock

    s = large
    _delete(s, 0, 12)
    assert compact_bm25(s.harness.stores) is True
    real = time.clock_gettime
    slept = 8 * 3600.0
    monkeypatch.setattr(
        steadyclock.time,
        "clock_gettime",
        lambda clock: real(clock) + (slept if clock == time.CLOCK_BOOTTIME else 0.0),
    )
    last = s.call("health")["index"]["keyword_compaction_last"]
    assert last["age_seconds"] >= slept
    assert "keyword index last rewritten beside the live one 8h 0m ago" in render_status(s.call("health"))


def test_status_after_a_failed_run_says_the_earlier_give_ways_not_in_a_row() -> None:
    """A run that failed after give-ways neither gave way nor skipped: status said "it gave way 3
    times in a row" of it, as if the failure were one more."""
    from sidecar.clients.cli_render import _compaction_last_said

    last = {
        "outcome": "failed",
        "reason": "disk error",
        "at": 0.0,
        "age_seconds": 300.0,
        "deleted_now": 9,
        "due_now": True,
        "backoff": {"gave_way": 3, "runs_to_skip": 0, "next_try_seconds": 3300},
    }
    line = _compaction_last_said(last)
    assert "in a row" not in line
    assert "it had given way 3 times before, next try in about 55m 0s" in line


def test_the_back_off_outlives_a_restart(
    large: Any, serve_in_process: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The back-off lived in memory: a daemon restarted daily (a login's service start, an
    upgrade) on a vault that never calms down filled a whole copy at the first due run of every
    start. Kept in the index's manifest, the run after a restart still skips it, and the one after
    that tries."""
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    busy = _Busy(s, monkeypatch)
    assert compact_bm25(s.harness.stores) is False  # gave way to the notes written meanwhile
    _dropped(s.harness.stores)
    assert s.harness.stores.keyword_backoff == (1, 1) and busy.fills == 1
    s.close()
    s.harness.close()
    with caplog.at_level("INFO"):
        again = serve_in_process()  # a restart over the same home
    stores = again.harness.stores
    assert stores.keyword_backoff == (1, 1), "the restart forgot the back-off"
    assert "bm25_compact_backoff_resumed gave_way=1 runs_to_skip=1" in caplog.text
    busy.s = again
    assert compact_bm25(stores) is False and busy.fills == 1, "the first run after a restart filled a copy"
    assert stores.keyword_backoff == (1, 0)
    busy.on = False
    assert compact_bm25(stores) is True and busy.fills == 2  # the run after it tries, and gets through
    again.close()
    again.harness.close()
    assert serve_in_process().harness.stores.keyword_backoff is None  # ended: no back-off resumed


@pytest.mark.parametrize("damaged", ["{not json", '{"gave_way": "1", "runs_to_skip": 1}'])
def test_a_damaged_back_off_record_is_ignored_and_said(
    large: Any, serve_in_process: Any, caplog: pytest.LogCaptureFixture, damaged: str
) -> None:
    """A back-off record that cannot be read (damaged, written otherwise) does not stop the start
    or skip a rewrite for ever: it is logged, dropped, and the first due run tries the rewrite."""
    from sidecar.index.repair import BACKOFF_META, compact_bm25

    s = large
    _delete(s, 0, 12)
    s.harness.stores.manifest.set_meta(BACKOFF_META, damaged)
    s.close()
    s.harness.close()
    with caplog.at_level("INFO"):
        again = serve_in_process()
    assert "bm25_compact_backoff_ignored" in caplog.text
    stores = again.harness.stores
    assert stores.keyword_backoff is None and stores.manifest.get_meta(BACKOFF_META) is None
    assert compact_bm25(stores) is True


def test_status_says_a_rewrite_given_up_is_no_longer_due_once_the_index_outgrew_its_deletions(
    large: Any,
) -> None:
    """After a run that did not rewrite the index (here: it gave way), the notes written since
    can make its deleted documents too small a share to be due: status said they weigh in its
    scores until a later run rewrites it, a rewrite that will not come. It says "no longer due"."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index import repair

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    repair._given_up(stores, "behind")
    status = render_status(s.call("health"))
    assert "keyword index rewrite given up " in status and "deleted documents weigh in its scores" in status
    for i in range(100, 200):  # the vault grew: its deletions under a fifth of it
        write(s.cfg.vault.path / f"More/Note{i}.md", f"# More {i}\n\nThe mill {i} by the river, zqm{i}.\n")
    s.harness.sweep()
    last = s.call("health")["index"]["keyword_compaction_last"]
    assert last["outcome"] == "gave way" and last["due_now"] is False and last["deleted_now"] > 0
    status = render_status(s.call("health"))
    assert f"; no longer due ({last['deleted_now']:,} deleted documents now)" in status
    assert "weigh in its scores" not in status


def test_a_rewrite_in_place_replaces_what_status_said_of_the_last_one_beside(
    large: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large vault's index rewritten beside, then (shrunk) rewritten in place: status went on
    saying "last rewritten beside the live one" of the first, the documents deleted since counted
    from it. The rewrite in place is said instead."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index import repair
    from sidecar.index.repair import compact_bm25

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    assert compact_bm25(stores) is True
    assert "keyword index last rewritten beside the live one " in render_status(s.call("health"))
    _delete(s, 12, 14)
    monkeypatch.setattr(repair, "_SHARED_SMALL", 10_000)  # small now: rewritten in place
    index = stores.bm25
    assert compact_bm25(stores) is True and stores.bm25 is index and index.deleted_docs()[0] == 0
    last = s.call("health")["index"]["keyword_compaction_last"]
    assert last["outcome"] == "compacted in place" and last["deleted_now"] == 0
    status = render_status(s.call("health"))
    assert "keyword index last rewritten in place " in status and "beside" not in status
    _delete(s, 14, 16)
    assert compact_bm25(stores) is True  # routine now: the shrink was said once
    assert s.call("health")["index"]["keyword_compaction_last"] is None
    assert "keyword index" not in render_status(s.call("health"))


def test_a_small_vault_s_routine_rewrite_in_place_puts_nothing_on_record(serve_in_process: Any) -> None:
    """A small vault's index is rewritten in place at any deleted document, so after ordinary
    edits: said in status, every small vault showed for good a "last rewritten in place … due
    again" line that read as a chore pending. Nothing is on record, as before."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index.repair import compact_bm25

    s = serve_in_process()
    try:
        vault = s.cfg.vault.path
        for i in range(30):
            write(vault / f"N{i}.md", f"# N{i}\n\nNote {i} about the mill.\n")
        s.harness.sweep()
        write(vault / "N3.md", "# N3\n\nNote 3 about the mill, edited.\n")
        s.harness.sweep()
        assert s.harness.stores.bm25.deleted_docs()[0] > 0
        assert compact_bm25(s.harness.stores) is True
        write(vault / "N4.md", "# N4\n\nNote 4 edited.\n")
        s.harness.sweep()
        health = s.call("health")
        assert health["index"]["keyword_compaction_last"] is None
        assert "keyword index" not in render_status(health)
    finally:
        s.close()
        s.harness.close()


def test_a_back_off_kept_for_a_replaced_keyword_index_is_not_resumed(
    large: Any, serve_in_process: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The kept back-off is of one keyword index: a repair (the index moved aside, a fresh one
    filled) ends it, and a record kept for another index (one replaced while a version that keeps
    none ran) is not resumed at a start, where it skipped up to 7 due runs of an index it was not
    about (health, showing no record of a replaced index, said nothing of why). A record about
    another index is nothing wrong: said at info, not as a damaged record."""
    from sidecar.index import repair
    from sidecar.index.repair import BACKOFF_META

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    repair._given_up(stores, "behind")
    assert stores.keyword_backoff == (1, 1) and stores.manifest.get_meta(BACKOFF_META) is not None
    s.harness.repair.repair_bm25("a test's damage")
    assert stores.keyword_backoff is None and stores.manifest.get_meta(BACKOFF_META) is None
    repair._given_up(stores, "behind")
    kept = json.loads(stores.manifest.get_meta(BACKOFF_META) or "{}")
    stores.manifest.set_meta(BACKOFF_META, json.dumps({**kept, "index": "another"}))  # another index's
    s.close()
    s.harness.close()
    with caplog.at_level("INFO"):
        again = serve_in_process()
    said = [r for r in caplog.records if r.message.startswith("bm25_compact_backoff_ignored")]
    assert said and "about another keyword index" in said[0].message
    assert said[0].levelname == "INFO" and "damaged" not in said[0].message
    assert again.harness.stores.keyword_backoff is None  # the first due run tries
    assert again.harness.stores.manifest.get_meta(BACKOFF_META) is None


def test_a_back_off_goes_with_its_keyword_index_folder(
    large: Any, serve_in_process: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The back-off named its keyword index by the folder's device and inode numbers, which
    change for the same index when the home is copied or restored, or on a share remounted: the
    back-off was dropped at every such start (a whole copy filled at the first due run) and a
    healthy record logged as damaged. It names a random id kept in the folder now: a copied home
    keeps its back-off; a folder made anew (removed while stopped) has no id, and the record is
    ignored at info."""
    from sidecar.index import repair
    from sidecar.index.repair import INDEX_ID_FILE

    s = large
    _delete(s, 0, 12)
    stores = s.harness.stores
    repair._given_up(stores, "behind")
    assert (stores.bm25.path / INDEX_ID_FILE).is_file()
    home = stores.bm25.path.parent.parent
    s.close()
    s.harness.close()
    home.rename(home.with_name("home.old"))
    shutil.copytree(home.with_name("home.old"), home, symlinks=True)  # every inode new
    with caplog.at_level("INFO"):
        again = serve_in_process()
    assert again.harness.stores.keyword_backoff == (1, 1), "the same index's back-off was dropped"
    assert "bm25_compact_backoff_resumed gave_way=1 runs_to_skip=1" in caplog.text
    path = again.harness.stores.bm25.path
    again.close()
    again.harness.close()
    shutil.rmtree(path)  # the keyword index removed while stopped: filled anew at the start
    caplog.clear()
    with caplog.at_level("INFO"):
        last = serve_in_process()
    assert last.harness.stores.keyword_backoff is None, "a back-off of the removed index resumed"
    said = [r for r in caplog.records if r.message.startswith("bm25_compact_backoff_ignored")]
    assert said and said[0].levelname == "INFO" and "no id" in said[0].message
