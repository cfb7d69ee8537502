"""Vectors of deleted chunks kept by text: a note rewritten over and over (a log a plugin appends
to) keeps those of its last few edits only, and cannot push out those of notes that left the index."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.index import vector_rows
from sidecar.index.vector_rows import EDITS_KEPT_PER_NOTE
from sidecar.stores.manifest import Manifest
from tests.conftest import FakeEmbedder, Harness, write

EDITS = 30  # a note re-indexed every minute for half an hour


def _log(vault: Path, edit: int) -> None:
    """The log note as a plugin leaves it after ``edit``: every section's text changes."""
    sections = [
        f"## Run {edit}.{j}\n\nsync pass {edit} step {j} moved file{edit * 7 + j}.md\n" for j in range(3)
    ]
    write(vault / "Log.md", "# Sync log\n\n" + "\n".join(sections))


@pytest.mark.parametrize("cap", [20, 12])
def test_a_note_edited_all_day_keeps_the_vectors_of_notes_that_left(
    make_cfg: Any, vault: Path, cap: int
) -> None:
    """Edits of one note (a clock stepped a minute per edit) keep the replaced chunks' vectors of
    its last few edits only: the vectors of a folder deleted before stay kept, and the folder
    restored is not embedded again. Measured: before, the log's rows filled the whole budget
    (20 of 20, the folder's 10 all pushed out); now they are those of its last 3 edits (9), and
    with a budget too small for both (12) the edits' go first."""
    folder = [
        write(vault / "Moved" / f"m{i}.md", f"# Place {i}\n\nThe ferry to island {i} leaves at dawn.\n")
        for i in range(10)
    ]
    _log(vault, 0)
    h = Harness(make_cfg(vault, **{"index.keepDeletedVectorsMax": cap}), FakeEmbedder())
    try:
        now = [1_000_000.0]
        h.vectors.clock = lambda: now[0]
        h.sweep()
        saved = {p: p.read_bytes() for p in folder}
        for p in folder:
            p.unlink()
        h.indexer.sweep(confirm_deletions={"vault"})
        manifest = h.stores.manifest
        assert manifest.kept_count() == 10
        per_edit = set()
        for edit in range(1, EDITS + 1):
            now[0] += 60.0
            before = manifest.chunk_ids("vault/Log")
            _log(vault, edit)
            h.sweep()
            per_edit.add(len(before - manifest.chunk_ids("vault/Log")))
        assert per_edit and min(per_edit) > 0  # every edit replaced chunks
        model = h.slot.model
        assert isinstance(model, FakeEmbedder)
        model.embedded.clear()
        for p, data in saved.items():
            p.write_bytes(data)
        h.sweep()
        assert not [t for t in model.embedded if "ferry" in t]
        assert manifest.kept_count("vault/Log") <= EDITS_KEPT_PER_NOTE * max(per_edit)
        assert manifest.kept_count() <= cap
    finally:
        h.close()


def test_the_last_edit_undone_is_not_embedded_again(make_cfg: Any, vault: Path) -> None:
    """An edit undone (the note's text as before) takes the replaced chunks' kept vectors."""
    _log(vault, 0)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        first = (vault / "Log.md").read_bytes()
        _log(vault, 1)
        h.sweep()
        model = h.slot.model
        assert isinstance(model, FakeEmbedder)
        model.embedded.clear()
        (vault / "Log.md").write_bytes(first)
        h.sweep()
        assert model.embedded == []
    finally:
        h.close()


def test_rows_kept_before_the_note_column_count_as_notes_that_left(tmp_path: Path) -> None:
    """A manifest whose kept vectors predate the note column gets it; its rows keep the budget of
    notes that left the index."""
    path = tmp_path / "manifest.sqlite"
    Manifest(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX kept_by_note")
    db.execute("ALTER TABLE kept_vectors DROP COLUMN note")
    db.execute("INSERT INTO kept_vectors VALUES ('t', 'h1', x'00', 1.0)")
    db.commit()
    db.close()
    m = Manifest(path)
    try:
        assert m.kept_count("") == 1
        m.keep_vectors("t", [("h2", b"\0", "vault/Log")], 2.0)
        assert m.kept_count("vault/Log") == 1
    finally:
        m.close()


def test_pruning_a_notes_edits_reads_the_note_index_not_the_whole_table(tmp_path: Path) -> None:
    """prune_edits runs per edited note under the write lock: each of its reads of the kept table
    must go through kept_by_note (a partial index, used only when the query implies note != '')."""
    m = Manifest(tmp_path / "manifest.sqlite")
    try:
        m.keep_vectors("t", [(f"h{i}", b"\0", "vault/Log" if i % 2 else "") for i in range(20)], 1.0)
        statements: list[str] = []
        m._db.set_trace_callback(statements.append)
        m.prune_edits("t", ["vault/Log"], EDITS_KEPT_PER_NOTE)
        m._db.set_trace_callback(None)
        deletes = [s for s in statements if s.lstrip().upper().startswith("DELETE")]
        assert deletes
        for sql in deletes:
            plan = [row[-1] for row in m._db.execute("EXPLAIN QUERY PLAN " + sql).fetchall()]
            on_kept = [p for p in plan if "kept_vectors" in p]
            assert on_kept and all("kept_by_note" in p for p in on_kept), plan
    finally:
        m.close()


def test_finding_a_vector_to_share_reads_the_text_index_not_the_whole_table(tmp_path: Path) -> None:
    """vector_donors runs for every backfill batch and every memory write's chunks: it must go
    through chunks_by_text (a partial index, used only when the query implies embed_hash != '')."""
    from sidecar.stores.embedtext import embed_hash
    from sidecar.stores.manifest_rows import ChunkRecord, FileRecord

    m = Manifest(tmp_path / "manifest.sqlite")
    try:
        record = FileRecord("vault/A.md", "vault", "", "A.md", 1, 10, "h", "indexed")
        chunks = [
            ChunkRecord(f"c{i}", record.key, i, f"t{i}", (), i, i, f"A\nt{i}", 3, embed_hash(f"A\nt{i}"))
            for i in range(5)
        ]
        with m.transaction() as db:
            m.commit_file(record, chunks, db)
        m._db.execute("UPDATE chunks SET has_vector = 1")
        statements: list[str] = []
        m._db.set_trace_callback(statements.append)
        assert m.vector_donors([chunks[1].embed_hash, "nothing"]) == {chunks[1].embed_hash: "c1"}
        m._db.set_trace_callback(None)
        selects = [s for s in statements if "FROM chunks" in s]
        assert selects
        for sql in selects:
            plan = [row[-1] for row in m._db.execute("EXPLAIN QUERY PLAN " + sql).fetchall()]
            assert any("chunks_by_text" in p for p in plan), plan
    finally:
        m.close()


class _Rebooted:
    """The ``time`` module as ``sidecar.index.vectoring`` sees it after a reboot: the counter
    since boot starts again from 0 (the wall clock goes on)."""

    def __init__(self) -> None:
        self._booted = time.perf_counter()

    def perf_counter(self) -> float:
        return time.perf_counter() - self._booted

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)


def _folder(vault: Path, name: str, word: str) -> dict[Path, bytes]:
    paths = [
        write(vault / name / f"{word}{i}.md", f"# {word} {i}\n\nThe {word} of hill {i} opens at noon.\n")
        for i in range(10)
    ]
    return {p: p.read_bytes() for p in paths}


def _delete(h: Harness, folder: dict[Path, bytes]) -> None:
    for p in folder:
        p.unlink()
    h.indexer.sweep(confirm_deletions={"vault"})


def _back_not_embedded(h: Harness, folder: dict[Path, bytes], word: str) -> None:
    """The deleted ``folder`` put back and swept: none of its notes (all say ``word``) embedded
    again, their kept vectors taken instead."""
    model = h.slot.model
    assert isinstance(model, FakeEmbedder)
    model.embedded.clear()
    for p, data in folder.items():
        p.write_bytes(data)
    h.sweep()
    assert not [t for t in model.embedded if word in t], f"the {word} notes were embedded again"


def test_vectors_kept_after_a_reboot_are_not_pushed_out_by_older_ones(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder deleted after a reboot keeps its vectors ahead of one deleted before it. The kept
    vectors were stamped with a counter since boot (the batch timer had replaced the wall clock):
    after a reboot the new ones counted as the oldest, the budget pushed them out and kept the
    older folder's, and the folder restored was embedded again in full."""
    before = _folder(vault, "Before", "market")
    after = _folder(vault, "After", "ferry")
    cfg = make_cfg(vault, **{"index.keepDeletedVectorsMax": 10})
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        _delete(h, before)
        assert h.stores.manifest.kept_count() == 10
    finally:
        h.close()
    monkeypatch.setattr("sidecar.index.vectoring.time", _Rebooted())
    h = Harness(cfg, FakeEmbedder())
    try:
        _delete(h, after)
        assert h.stores.manifest.kept_count() == 10
        _back_not_embedded(h, after, "ferry")
    finally:
        h.close()


def _stamps(h: Harness) -> dict[str, float]:
    return dict(h.stores.manifest._query("SELECT embed_hash, kept_at FROM kept_vectors"))


def test_vectors_an_older_version_kept_count_as_kept_at_the_upgrade(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows an older version stamped with seconds since boot are stamped with the wall clock at
    the next start: compared with the wall clock they were years old, and the first prune after
    the upgrade dropped every one (a folder deleted the day before was embedded again). They keep
    their order and the time between them. Rows the wall clock stamped are left as they are: a
    folder deleted 8 days before is pruned by the next deletion (restamped at every start, kept
    vectors never aged out of a daemon restarted once a week)."""
    folder = _folder(vault, "Moved", "ferry")
    old = _folder(vault, "Old", "market")
    other = write(vault / "Other.md", "# Other\n\nA note deleted after the upgrade.\n")
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        _delete(h, old)
        walled = set(_stamps(h))
        _delete(h, folder)
        week_ago = time.time() - 8 * 86400
        with h.stores.manifest.transaction() as db:  # an hour apart, from three days since boot
            db.execute("UPDATE kept_vectors SET kept_at = ? + rowid * 3600", (3 * 86400.0,))
            db.executemany(
                "UPDATE kept_vectors SET kept_at = ? WHERE embed_hash = ?", [(week_ago, k) for k in walled]
            )
            db.execute("INSERT INTO kept_later(chunk_id, embed_hash, kept_at) VALUES ('c', 'h', 86400.0)")
        before = _stamps(h)
    finally:
        h.close()
    counted = sorted(set(before) - walled, key=before.__getitem__)
    assert len(walled) == 10 and len(counted) == 10
    started = time.time()
    caplog.set_level("INFO", logger="sidecar")
    h = Harness(cfg, FakeEmbedder())
    try:
        manifest = h.stores.manifest
        after = _stamps(h)
        assert {k: after[k] for k in walled} == dict.fromkeys(walled, week_ago)
        [(later,)] = manifest._query("SELECT kept_at FROM kept_later")
        stamps = [after[k] for k in counted]
        assert started <= stamps[-1] <= time.time()
        assert stamps == sorted(stamps) and len(set(stamps)) == 10
        for k in counted:  # the time between them as it was (three days fit in half the week)
            assert after[k] - stamps[-1] == pytest.approx(before[k] - before[counted[-1]])
        assert later - stamps[-1] == pytest.approx(86400.0 - before[counted[-1]])
        assert "vectors_kept_restamped rows=11 " in caplog.text
        other.unlink()
        h.indexer.sweep(confirm_deletions={"vault"})  # a deletion prunes the kept vectors by age
        assert not walled & set(_stamps(h))
        _back_not_embedded(h, folder, "ferry")
    finally:
        h.close()


def test_vectors_kept_over_a_long_uptime_keep_their_order_in_half_the_week(
    make_cfg: Any, vault: Path
) -> None:
    """Seconds since boot that span more than half the week are squeezed into it, in their order:
    each restamped row stays at least half a week, the newest a whole one."""
    folder = _folder(vault, "Moved", "ferry")
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        _delete(h, folder)
        with h.stores.manifest.transaction() as db:  # ten days apart: ninety days of uptime
            db.execute("UPDATE kept_vectors SET kept_at = rowid * 10 * 86400.0")
        before = _stamps(h)
    finally:
        h.close()
    order = sorted(before, key=before.__getitem__)
    started = time.time()
    h = Harness(cfg, FakeEmbedder())
    try:
        after = _stamps(h)
        stamps = [after[k] for k in order]
        assert stamps == sorted(stamps) and len(set(stamps)) == 10
        assert started <= stamps[-1] <= time.time()
        assert stamps[-1] - stamps[0] == pytest.approx(h.vectors.keep_seconds / 2)
    finally:
        h.close()


def test_vectors_kept_while_the_clock_was_ahead_do_not_push_out_newer_ones(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Rows stamped while the wall clock was set ahead (then corrected) count as kept at the next
    start: else no age cut-off reached them, the cap kept them ahead of every newer deletion, and
    a folder deleted and restored since was embedded again in full. A stamp less than a day ahead
    (clocks of two machines a little apart) is left as it is."""
    ahead = _folder(vault, "Ahead", "market")
    after = _folder(vault, "After", "ferry")
    cfg = make_cfg(vault, **{"index.keepDeletedVectorsMax": 10})
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        _delete(h, ahead)
        soon = time.time() + 3600
        with h.stores.manifest.transaction() as db:
            db.execute("UPDATE kept_vectors SET kept_at = ?", (time.time() + 30 * 86400,))
            db.execute("INSERT INTO kept_later(chunk_id, embed_hash, kept_at) VALUES ('c', 'h', ?)", (soon,))
    finally:
        h.close()
    started = time.time()
    caplog.set_level("INFO", logger="sidecar")
    h = Harness(cfg, FakeEmbedder())
    try:
        manifest = h.stores.manifest
        assert all(started <= at <= time.time() for at in _stamps(h).values())
        assert manifest._query("SELECT kept_at FROM kept_later") == [(soon,)]
        assert "vectors_kept_restamped rows=10 (stamped more than a day ahead" in caplog.text
        _delete(h, after)
        assert manifest.kept_count() == 10
        _back_not_embedded(h, after, "ferry")
    finally:
        h.close()


def test_a_folder_deleted_while_the_clock_is_set_back_keeps_its_vectors_ahead_of_older_ones(
    make_cfg: Any, vault: Path
) -> None:
    """The wall clock set back under a running daemon (a board without a clock battery booting
    in 2000 until NTP steps it, a wrong manual setting): a folder deleted meanwhile was stamped as
    decades older than the vectors kept before it, the cap pushed it out first, and restored it
    was embedded again in full. It is stamped just after the newest kept vector now."""
    before = _folder(vault, "Before", "market")
    after = _folder(vault, "After", "ferry")
    h = Harness(make_cfg(vault, **{"index.keepDeletedVectorsMax": 10}), FakeEmbedder())
    try:
        h.sweep()
        _delete(h, before)
        newest = max(_stamps(h).values())
        h.vectors.clock = lambda: 946_684_800.0  # 2000-01-01
        _delete(h, after)
        stamps = _stamps(h)
        assert len(stamps) == 10 and all(at > newest for at in stamps.values())
        _back_not_embedded(h, after, "ferry")
    finally:
        h.close()


def test_a_start_with_the_wall_clock_not_set_yet_restamps_nothing(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A start while the wall clock is still in 2000 (not set yet): every kept vector is "more
    than a day ahead" of it, and restamped to it they were pruned by age once NTP stepped the
    clock forward. They keep their stamps, and it is logged."""
    from sidecar.index import vector_rows

    folder = _folder(vault, "Gone", "market")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        _delete(h, folder)
        kept = _stamps(h)
        assert len(kept) == 10
        h.vectors.clock = lambda: vector_rows.WALL_CLOCK_FLOOR - 25 * 365 * 86400.0
        caplog.set_level("WARNING", logger="sidecar")
        h.vectors.mend_kept_times()
        assert _stamps(h) == kept
        assert "vectors_kept_not_restamped reason=the wall clock says 2000-" in caplog.text
    finally:
        h.close()


def test_a_clock_set_ahead_then_corrected_under_the_daemon_leaves_no_stamp_in_the_future(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The wall clock set a month ahead, then corrected, while the daemon runs: the rows kept
    meanwhile, and every keep after them (stamped just after the newest), stayed a month in the
    future until a restart, no age cut-off reaching them. They count as kept at the correction,
    are still there to take while the user may want them, and age out after that."""
    ahead = _folder(vault, "Ahead", "market")
    after = _folder(vault, "After", "ferry")
    late = write(vault / "Late.md", "# Late\n\nA note deleted a week later.\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        real = time.time()
        now = [real + 30 * 86400.0]  # a month ahead
        h.vectors.clock = lambda: now[0]
        _delete(h, ahead)
        now[0] = real  # corrected (NTP)
        caplog.set_level("INFO", logger="sidecar")
        _delete(h, after)
        stamps = _stamps(h)
        assert len(stamps) == 20 and all(at <= real + 1.0 for at in stamps.values())
        assert "vectors_kept_restamped rows=10 (stamped more than a day ahead" in caplog.text
        _back_not_embedded(h, after, "ferry")  # kept: taken instead of the model
        now[0] = real + h.vectors.keep_seconds + 86400.0  # past the keeping time
        late.unlink()
        h.indexer.sweep(confirm_deletions={"vault"})  # a deletion prunes the kept vectors by age
        assert len(_stamps(h)) == 1, "rows kept under a clock set ahead were kept beyond their time"
    finally:
        h.close()


def test_vectors_kept_while_the_clock_read_2000_survive_its_correction(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A board without a clock battery boots in 2000 and a folder is deleted before NTP sets
    the clock, nothing kept before it: its rows were stamped 2000, and the first deletion after
    the step forward pruned them all by age (restored, the folder was embedded again in full).
    They count as kept at the correction, in their order."""
    gone = _folder(vault, "Gone", "ferry")
    other = write(vault / "Other.md", "# Other\n\nA note deleted after the clock was set.\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        now = [946_684_800.0]  # 2000-01-01: not set yet
        h.vectors.clock = lambda: now[0]
        _delete(h, gone)
        assert set(_stamps(h).values()) == {946_684_800.0}
        now[0] = time.time()  # NTP stepped it
        caplog.set_level("INFO", logger="sidecar")
        other.unlink()
        h.indexer.sweep(confirm_deletions={"vault"})  # a deletion prunes the kept vectors by age
        stamps = _stamps(h)
        assert len(stamps) == 11 and all(at >= now[0] - 1.0 for at in stamps.values())
        assert "vectors_kept_restamped rows=10 (stamped by no wall clock" in caplog.text
        _back_not_embedded(h, gone, "ferry")
    finally:
        h.close()


def test_vectors_kept_before_a_clock_set_back_survive_its_correction(make_cfg: Any, vault: Path) -> None:
    """The wall clock set a month back under a running daemon (a restored VM, a wrong manual
    setting), then corrected: the rows kept before the step are stamped right, not ahead. Counted
    as kept at the clock behind, they looked a month old once NTP set it forward, and the next
    deletion pruned them: a folder put back was embedded again in full. Only a step forward this
    process saw marks rows as stamped ahead."""
    gone = _folder(vault, "Gone", "ferry")
    one = write(vault / "One.md", "# One\n\nA note deleted while the clock is behind.\n")
    two = write(vault / "Two.md", "# Two\n\nA note deleted after the correction.\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        real = time.time()
        now = [real]
        h.vectors.clock = lambda: now[0]
        _delete(h, gone)  # kept at the true time
        now[0] = real - 30 * 86400.0  # a month back
        one.unlink()
        h.indexer.sweep(confirm_deletions={"vault"})
        now[0] = real + 3600.0  # NTP corrects it, an hour later
        two.unlink()
        h.indexer.sweep(confirm_deletions={"vault"})  # a deletion prunes the kept vectors by age
        assert len(_stamps(h)) == 12, "vectors kept before the step back were pruned at its correction"
        _back_not_embedded(h, gone, "ferry")
    finally:
        h.close()


DAY = 86400.0


def _two_clocks(h: Harness, monkeypatch: pytest.MonkeyPatch) -> tuple[float, list[float], list[float]]:
    """The wall clock and the one that counts no step (``steady_reading``), both set by the test;
    the process as if built at the true time."""
    real = time.time()
    wall, steady = [real], [1000.0]
    h.vectors.clock = lambda: wall[0]
    monkeypatch.setattr(vector_rows, "_steady", lambda: steady[0])
    h.vectors._lead_top = None
    h.vectors._jumps = []
    h.vectors._seen_ahead(wall[0])
    return real, wall, steady


@pytest.mark.parametrize("steady_counts_sleep", [True, False], ids=["boottime", "stops_in_sleep"])
def test_vectors_kept_after_a_long_sleep_survive_a_clock_set_back_and_corrected(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, steady_counts_sleep: bool
) -> None:
    """A week asleep, then the clock wrongly set back a month and corrected. Where the other clock
    stops in a sleep (the monotonic fallback on macOS, a VM whose clocks stop while the host
    sleeps), the wake is a jump of the wall clock ahead of it: taken alone for a clock set ahead,
    the rows kept since the wake were restamped to the clock set back, pruned as a month old at
    its correction, and a folder put back was embedded again. Only a jump undone mends."""
    before, one = _folder(vault, "Before", "ferry"), _folder(vault, "One", "market")
    two = _folder(vault, "Two", "mill")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        _real, wall, steady = _two_clocks(h, monkeypatch)
        wall[0] += 7 * DAY  # the wake
        steady[0] += 7 * DAY if steady_counts_sleep else 1.0
        _delete(h, before)  # kept at the true time
        wall[0] -= 30 * DAY  # wrongly set back a month
        steady[0] += 60.0
        _delete(h, one)
        wall[0] += 30 * DAY + 3600.0  # NTP corrects it
        steady[0] += 3600.0
        _delete(h, two)  # a deletion prunes the kept vectors by age
        assert len(_stamps(h)) == 30, "vectors kept after the wake were pruned at the correction"
        _back_not_embedded(h, before, "ferry")
    finally:
        h.close()


def test_a_jump_ahead_is_mended_only_when_undone(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clock set a month ahead under the daemon: the rows kept meanwhile keep their stamps
    while it stays ahead (it may be a sleep the other clock did not count), and count as kept
    now once it comes back (a correction)."""
    ahead, after = _folder(vault, "Ahead", "market"), _folder(vault, "After", "mill")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        real, wall, steady = _two_clocks(h, monkeypatch)
        wall[0] += 30 * DAY
        steady[0] += 60.0
        _delete(h, ahead)
        steady[0] += 60.0
        wall[0] += 60.0
        h.vectors._clock_mended()  # still ahead: nothing mended
        assert max(_stamps(h).values()) > real + 29 * DAY
        wall[0] = real + 3600.0  # corrected
        steady[0] += 3600.0
        _delete(h, after)
        stamps = _stamps(h)
        assert len(stamps) == 20
        assert max(stamps.values()) <= real + 3601.0, "rows kept while the clock was ahead stay in the future"
    finally:
        h.close()


def test_a_jump_ahead_undone_in_two_steps_leaves_no_stamp_in_the_future(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clock set a month ahead, set back by hand to two weeks ahead, then corrected by NTP:
    the rows kept meanwhile count as kept now once the lead is back where it was before the jump
    (the hand's step alone is no correction: it stays more than a day ahead of it)."""
    a, b, c = _folder(vault, "A", "market"), _folder(vault, "B", "ferry"), _folder(vault, "C", "mill")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        real, wall, steady = _two_clocks(h, monkeypatch)
        wall[0], steady[0] = real + 30 * DAY, steady[0] + 60.0
        _delete(h, a)
        wall[0], steady[0] = real + 14 * DAY, steady[0] + 60.0
        _delete(h, b)
        wall[0], steady[0] = real + 120.0, steady[0] + 60.0
        _delete(h, c)
        ahead = [s for s in _stamps(h).values() if s > real + DAY]
        assert not ahead, f"{len(ahead)} rows stay in the future after a correction in two steps"
    finally:
        h.close()
