"""A note written to often (a plugin's log note appended to every second) over real stores: a
line appended rewrites only the chunks it changed, the note is indexed at most every few times
what that costs while other notes' edits go first and its last state still comes, and file
events log one summary line a minute instead of a line each."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sidecar.clients.cli_render import render_status
from sidecar.clients.mcp_texts import status_of, text_of_search
from sidecar.contracts.notices import waiting_vectors
from sidecar.contracts.wire_json import state_json
from sidecar.daemon.hot import BUDGET_SHARE, BUDGET_WINDOW_S, HOT_MAX_S, SETTLE_S, HotNotes
from sidecar.daemon.indexing import IndexLoop
from sidecar.daemon.watchdog import status_line
from sidecar.index import indexer as indexer_mod
from sidecar.index.summary import SUMMARY_EVERY_S, ActivitySummary
from sidecar.model.embedder import EmbedderSlot
from sidecar.search.request import SearchRequest
from sidecar.search.retrieval import Retriever
from sidecar.stores.bm25 import Bm25Index
from tests.conftest import FakeEmbedder, Harness, write
from tests.in_process import InProcessServer
from tests.index_helpers import search


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _until(check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _log_note(parts: int) -> str:
    """A log note of ``parts`` sections, one chunk each (the fake tokenizer counts words)."""
    return "# Sync log\n\n" + "".join(
        f"## Hour {i}\n\n- synced folder{i} with remote{i} and found nothing new\n\n" for i in range(parts)
    )


def _refs(h: Harness, query: str) -> list[str]:
    return [hit["reference"] for hit in search(h, query)]


@pytest.fixture
def documents(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the keyword documents built (a chunk's id, or a page's note key)."""
    built: list[str] = []
    real = Bm25Index._document

    def counting(doc_id: str, d: Any, body: str) -> Any:
        built.append(doc_id)
        return real(doc_id, d, body)

    monkeypatch.setattr(Bm25Index, "_document", staticmethod(counting))
    return built


def test_a_line_appended_to_a_long_note_rewrites_only_the_chunk_it_changed(
    harness: Harness, documents: list[str]
) -> None:
    """60 chunks, one line appended: one chunk document and the note's page are written (every
    chunk was deleted and added again, and every chunk row rewritten); the stores still agree
    and both the new and the old words are found."""
    log = harness.cfg.vault.path / "Sync log.md"  # type: ignore[operator]
    write(log, _log_note(60))
    harness.sweep()
    assert len(harness.stores.manifest.chunks_of("vault/Sync log")) == 60
    documents.clear()
    rows = harness.stores.manifest._db.total_changes
    with log.open("a", encoding="utf-8") as fh:
        fh.write("- pelican uploaded\n")
    assert harness.sweep()["changed"] == 1
    assert [d for d in documents if d != "vault/Sync log"] == [documents[0]]  # one chunk
    assert documents.count("vault/Sync log") == 1  # the page: the whole note
    assert harness.stores.manifest._db.total_changes - rows < 20  # not 60 chunk rows again
    assert harness.stores.bm25.all_ids() == harness.stores.manifest.all_chunk_ids()
    assert harness.stores.bm25.num_docs() == harness.stores.manifest.chunk_count()
    assert _refs(harness, "pelican")[0] == "vault/Sync log"
    assert _refs(harness, "folder7 remote7")[0] == "vault/Sync log"
    assert harness.stores.bm25.search_pages("pelican folder7", 5)[0][0] == "vault/Sync log"


def test_a_new_title_or_a_note_left_half_written_rewrites_every_chunk(
    harness: Harness, documents: list[str]
) -> None:
    """Every chunk document carries the note's title and aliases: a changed front matter
    rewrites them all. A note a crash left marked ``indexing`` may be in the keyword index as
    no manifest row says: it is replaced whole too, and no chunk is doubled."""
    log = harness.cfg.vault.path / "Sync log.md"  # type: ignore[operator]
    write(log, _log_note(10))
    harness.sweep()
    documents.clear()
    write(log, "---\naliases: [Albatross journal]\n---\n" + _log_note(10))
    harness.sweep()
    assert len([d for d in documents if d != "vault/Sync log"]) == 10
    assert _refs(harness, "albatross")[0] == "vault/Sync log"
    harness.stores.manifest.mark_state(["vault/Sync log"], "indexing")
    documents.clear()
    with log.open("a", encoding="utf-8") as fh:
        fh.write("- cormorant seen\n")
    harness.sweep()
    assert len([d for d in documents if d != "vault/Sync log"]) == 10
    assert harness.stores.bm25.num_docs() == harness.stores.manifest.chunk_count()
    assert harness.stores.bm25.all_ids() == harness.stores.manifest.all_chunk_ids()


def test_a_costly_note_waits_a_multiple_of_its_cost_and_is_never_put_off_for_good() -> None:
    """A note that cost 2 s is held for 20 s after its indexing ends; more events keep that due
    time; a cheap note is never held; the wait is bounded; a held note late by HOT_MAX_S is
    handed out even while other work waits."""
    clock = Clock()
    hot = HotNotes(clock)
    hot.indexed({"/v/log.md": 2.0, "/v/note.md": 0.01, "/v/huge.md": 600.0})
    assert hot.hold({"/v/log.md", "/v/note.md"}) == {"/v/note.md"}
    clock.now += 15
    assert hot.hold({"/v/log.md"}) == frozenset() and hot.due() == frozenset()
    assert hot.wait(30.0) == pytest.approx(SETTLE_S)  # it settles first (see below)
    assert hot.hold({"/v/log.md"}) == frozenset()  # ... unless written again
    clock.now += 5
    assert hot.due() == {"/v/log.md"} and hot.held() == frozenset()
    assert hot.hold({"/v/log.md"}) == {"/v/log.md"}  # its quiet time is over
    assert hot.hold({"/v/huge.md"}) == frozenset()
    assert hot.wait(100.0) == pytest.approx(HOT_MAX_S - 20)  # past its budget: it never settles
    clock.now += HOT_MAX_S
    assert hot.due(late=HOT_MAX_S) == frozenset()
    clock.now += HOT_MAX_S
    assert hot.due(late=HOT_MAX_S) == {"/v/huge.md"}


def test_a_held_note_whose_file_settles_comes_early_within_the_budget() -> None:
    """A held note with no event for SETTLE_S is handed out before its quiet time ends (one slow
    save, whose first indexing caught it half written); a note that keeps changing never settles;
    never twice in a row; and not once the early indexings of all notes, or the note's own
    indexings, would pass the budget (writers every few seconds doubled their CPU)."""
    clock = Clock()
    hot = HotNotes(clock)
    big = "/v/big.md"
    hot.indexed({big: 5.0})  # 50 s quiet
    assert hot.hold({big}) == frozenset()
    clock.now += 1.5
    assert hot.hold({big}) == frozenset()  # the save goes on
    clock.now += SETTLE_S - 0.1
    assert hot.settled() == frozenset() and hot.wait(10.0) == pytest.approx(0.1)
    clock.now += 0.1
    assert hot.settled() == {big} and hot.held() == frozenset()
    hot.indexed({big: 5.0})  # the settled state indexed: the next one waits its quiet time
    assert hot.hold({big}) == frozenset()
    clock.now += SETTLE_S
    assert hot.settled() == frozenset() and hot.wait(100.0) == pytest.approx(50.0 - SETTLE_S)
    clock.now += 50.0
    assert hot.due() == {big}
    hot.indexed({big: 5.0})  # a whole wait again: the next settled one may come early
    assert hot.hold({big}) == frozenset()
    clock.now += SETTLE_S
    assert hot.settled() == {big}
    hot.indexed({big: 5.0})

    # The early indexings of all notes share one budget.
    budget = BUDGET_SHARE * BUDGET_WINDOW_S
    others = [f"/v/n{i}.md" for i in range(int(budget // 5.0) + 2)]
    hot.indexed(dict.fromkeys(others, 5.0))
    early = 2  # big's two
    for path in others:
        assert hot.hold({path}) == frozenset()
        clock.now += SETTLE_S
        got = hot.settled()
        if (early + 1) * 5.0 > budget:
            assert got == frozenset(), path  # spent
            break
        assert got == {path}
        hot.indexed({path: 5.0})
        early += 1
    else:
        raise AssertionError("the budget was never spent")
    clock.now += BUDGET_WINDOW_S  # the window passed: a settled save comes early again
    hot.indexed({big: 5.0})
    assert hot.hold({big}) == frozenset()
    clock.now += SETTLE_S
    assert big in hot.settled()


def test_a_slow_save_of_a_hot_note_is_indexed_once_it_settles(
    hot_loop: tuple[Harness, IndexLoop, Clock], vault: Path
) -> None:
    """The loop hands a settled note out once nothing else waits: its last state is searchable
    seconds after the save ended, not after its whole quiet time (a 4 MB note written over 3 s
    was stale for a minute)."""
    h, loop, clock = hot_loop
    loop.request_sweep()
    _until(lambda: h.indexer.activity.sweeps == 1)
    log = vault / "Sync log.md"
    with log.open("a", encoding="utf-8") as fh:
        fh.write("- zebra synced\n")
    loop.changed({str(log)})
    _until(lambda: loop.hot.held() == {str(log)})
    time.sleep(0.6)
    assert "vault/Sync log" not in _refs(h, "zebra")
    clock.now += SETTLE_S
    _until(lambda: "vault/Sync log" in _refs(h, "zebra"))
    assert clock.now < 1000.0 + 50.0


def test_the_wait_for_the_models_tokenizer_is_no_cost_of_a_note(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a first start the sweep waits for the model's tokenizer once, inside one note's cutting:
    that wait (here a clock moved by 100 s) is not counted as what the note costs, or a note
    edited after the first sweep would wait up to a minute."""
    clock = Clock()
    monkeypatch.setattr(indexer_mod, "time", SimpleNamespace(time=time.time, perf_counter=clock))
    h = Harness(make_cfg(vault), None)
    slot = h.indexer.slot = EmbedderSlot()
    slot.set_loading()

    def tokenizer_comes() -> bool:
        clock.now += 100.0
        slot.set_counter(lambda texts: [len(t.split()) for t in texts])
        return True

    # It comes while the sweep waits for it (asked with a timeout), not while it reads ahead.
    monkeypatch.setattr(slot, "wait_countable", lambda timeout: timeout > 0 and tokenizer_comes())
    costs: dict[str, float] = {}
    h.indexer.on_indexed = lambda spent, _written: costs.update(spent)
    try:
        assert h.indexer.sweep()["changed"] == 4
    finally:
        h.close()
    assert len(costs) == 4 and max(costs.values()) < 1.0


@pytest.fixture
def hot_loop(make_cfg: Any, vault: Path) -> Iterator[tuple[Harness, IndexLoop, Clock]]:
    """An index loop over real stores whose hot notes go by a clock the test moves; the log note
    costs 5 s to index (a note 50 s quiet), every other note nothing."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    write(vault / "Sync log.md", _log_note(5))
    clock = Clock()
    hot = HotNotes(clock)
    stop = threading.Event()
    loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=stop, beat=lambda _a: None, hot=hot)
    log = str(vault / "Sync log.md")
    h.indexer.on_indexed = lambda costs, _w: hot.indexed({p: 5.0 if p == log else 0.0 for p in costs})
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    yield h, loop, clock
    stop.set()
    thread.join(10)
    h.close()


def test_a_hot_note_waits_while_other_notes_go_first_and_its_last_state_comes(
    hot_loop: tuple[Harness, IndexLoop, Clock], vault: Path
) -> None:
    h, loop, clock = hot_loop
    loop.request_sweep()
    _until(lambda: h.indexer.activity.sweeps == 1)
    log, other = vault / "Sync log.md", vault / "Other.md"
    with log.open("a", encoding="utf-8") as fh:
        fh.write("- zebra synced\n")
    loop.changed({str(log)})
    write(other, "# Other\n\nThe walrus moved in.\n")
    loop.changed({str(other)})
    _until(lambda: "vault/Other" in _refs(h, "walrus"))
    assert loop.hot.held() == {str(log)}  # its event came first, and waits
    assert "vault/Sync log" not in _refs(h, "zebra")
    with log.open("a", encoding="utf-8") as fh:
        fh.write("- yak synced\n")
    loop.changed({str(log)})
    for _ in range(49):  # written to all the time (it never settles); more events do not put it off
        clock.now += 1
        loop.changed({str(log)})
    time.sleep(0.6)
    assert "vault/Sync log" not in _refs(h, "yak")
    clock.now += 2
    _until(lambda: "vault/Sync log" in _refs(h, "yak"))
    assert "vault/Sync log" in _refs(h, "zebra") and loop.hot.held() == frozenset()


def test_file_events_log_one_summary_a_minute(
    harness: Harness, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sweep of file events that only writes notes logs ``sweep_done`` at DEBUG and is summed
    into one ``index_activity`` line a minute; full sweeps and deletions keep their INFO line."""
    clock = Clock()
    harness.indexer.summary = ActivitySummary(clock)
    caplog.set_level(logging.DEBUG, logger="sidecar")

    def infos() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]

    harness.indexer.sweep()
    assert [m for m in infos() if m.startswith("sweep_done")] != []
    caplog.clear()
    garden = vault / "Garden.md"
    for word in ("cucumbers", "pumpkins", "radishes"):
        write(garden, f"# Garden\n\n{word} this year.\n")
        harness.indexer.sweep(only=frozenset(), paths=[str(garden)])
        clock.now += 10
    assert infos() == []
    assert len([r for r in caplog.records if r.getMessage().startswith("sweep_done changed=1")]) == 3
    clock.now += SUMMARY_EVERY_S - 30
    harness.indexer.summary.flush()
    (line,) = infos()
    assert line.startswith("index_activity changes=3 notes=1 seconds=")
    caplog.clear()
    garden.unlink()
    harness.indexer.sweep(only=frozenset(), paths=[str(garden)])
    assert [m.split()[0] for m in infos()] == ["notes_deleted", "sweep_done"]


def test_the_summary_counts_the_notes_written_not_those_looked_at(
    harness: Harness, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sweep of events that looked at two notes and wrote one logged ``changes=1 notes=2``
    (distinct notes more than notes written): ``notes`` counts the notes written."""
    clock = Clock()
    harness.indexer.summary = ActivitySummary(clock)
    harness.indexer.sweep()
    caplog.set_level(logging.INFO, logger="sidecar")
    garden, bread = vault / "Garden.md", vault / "Recipes/Bread.md"
    write(garden, "# Garden\n\nCucumbers this year.\n")
    later = bread.stat().st_mtime + 5
    os.utime(bread, (later, later))  # saved again, its text the same: looked at, not written
    harness.indexer.sweep(only=frozenset(), paths=[str(garden), str(bread)])
    clock.now += SUMMARY_EVERY_S
    harness.indexer.summary.flush()
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("index_activity")]
    assert line.startswith("index_activity changes=1 notes=1 seconds="), line


def test_a_hot_note_deleted_or_renamed_away_leaves_search_at_once(
    hot_loop: tuple[Harness, IndexLoop, Clock], vault: Path
) -> None:
    """Its quiet time is for parsing it again; a deletion has nothing to parse and must not leave
    a ghost hit for up to a minute."""
    h, loop, _clock = hot_loop
    for i in range(10):  # one note of two gone would be a mass deletion, held for confirmation
        write(vault / f"Note {i}.md", f"# Note {i}\n\nnothing here\n")
    loop.request_sweep()
    _until(lambda: h.indexer.activity.sweeps == 1)
    log = vault / "Sync log.md"
    with log.open("a", encoding="utf-8") as fh:
        fh.write("- zebra synced\n")
    loop.changed({str(log)})
    _until(lambda: loop.hot.held() == {str(log)})
    log.rename(vault / "Old sync log.md")
    loop.changed({str(log), str(vault / "Old sync log.md")}, frozenset({str(log)}))
    _until(lambda: "vault/Old sync log" in _refs(h, "zebra"))
    # the clock stands still: no quiet time ends (a rename's two paths land in two commits)
    _until(lambda: "vault/Sync log" not in _refs(h, "synced"), timeout=10)
    assert loop.hot.held() == frozenset()


def test_only_a_note_indexed_again_and_again_counts_as_written_continuously() -> None:
    """One costly indexing (a large note saved once) is no note written continuously; the third
    within the window, with the note in its quiet time, is; once its quiet time ends, no more."""
    clock = Clock()
    hot = HotNotes(clock)
    hot.indexed({"/v/Big.md": 5.0}, {"/v/Big.md": ("vault/Big", 900)})
    assert hot.continuous() == {}
    for _ in range(2):
        clock.now += 60.0
        hot.indexed({"/v/Big.md": 5.0}, {"/v/Big.md": ("vault/Big", 2)})
    assert hot.continuous() == {"vault/Big": 2}
    clock.now += 40.0
    assert hot.hold(["/v/Big.md"]) == frozenset()  # held: still written to
    clock.now += 20.0
    assert hot.continuous() == {"vault/Big": 2}
    assert hot.due() == {"/v/Big.md"}
    assert hot.continuous() == {}  # its quiet time is over and nothing holds it
    hot.indexed({"/v/Cheap.md": 0.01}, {"/v/Cheap.md": ("vault/Cheap", 1)})
    assert hot.continuous() == {}


def _hot_after_a_sweep(h: Harness) -> tuple[Clock, HotNotes]:
    """Sweep, then count each note indexed as costing 5 s in hot notes on a clock the test moves
    (an index loop made over them, never run)."""
    h.sweep()
    clock = Clock()
    hot = HotNotes(clock)
    IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None, hot=hot)
    h.indexer.on_indexed = lambda costs, written: hot.indexed(dict.fromkeys(costs, 5.0), written)
    return clock, hot


def _save_three_times(h: Harness, clock: Clock, log: Path) -> None:
    """A line appended to the note three times a minute apart, each save indexed at once."""
    for word in ("zebra", "yak", "okapi"):
        clock.now += 60.0
        with log.open("a", encoding="utf-8") as fh:
            fh.write(f"- {word} synced\n")
        h.indexer.sweep(only=frozenset(), paths=[str(log)])


def test_answers_do_not_count_a_note_written_continuously_as_waiting(make_cfg: Any, vault: Path) -> None:
    """While a note is written continuously, the chunks each of its indexings leaves without a
    vector are not counted as waiting by an answer's notice (they are found by their words at
    once), the edit of another note still is; `status` says the note apart in plain words."""
    write(vault / "Sync log.md", _log_note(3))
    write(vault / "Other.md", "# Other\n\nNothing yet.\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        clock, hot = _hot_after_a_sweep(h)
        _save_three_times(h, clock, vault / "Sync log.md")
        assert set(hot.continuous()) == {"vault/Sync log"}
        retriever = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        result = retriever.search(SearchRequest("okapi", 10, 0.0))
        assert [hit.reference for hit in result.hits][:1] == ["vault/Sync log"]  # by its words
        assert result.pending_vectors == result.pending_continuous > 0
        assert waiting_vectors(result) == 0
        assert state_json(result)["pendingContinuous"] == result.pending_continuous
        write(vault / "Other.md", "# Other\n\nThe walrus moved in.\n")
        h.indexer.sweep(only=frozenset(), paths=[str(vault / "Other.md")])
        retriever = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        result = retriever.search(SearchRequest("walrus", 10, 0.0))
        assert waiting_vectors(result) == h.stores.manifest.pending_count_of({"vault/Other": 10**6}) > 0
    finally:
        h.close()


def _served_written_continuously(
    serve_in_process: Callable[..., InProcessServer], vault: Path
) -> InProcessServer:
    """A daemon served over the vault whose "Sync log" counts as written continuously, a line
    just appended to it and indexed (its new chunks wait for their vectors)."""
    write(vault / "Sync log.md", _log_note(3))
    server = serve_in_process(vault)
    h = server.harness
    h.stores.continuous = lambda: {"vault/Sync log": 10**6}
    log = vault / "Sync log.md"
    with log.open("a", encoding="utf-8") as fh:
        fh.write("- okapi synced\n")
    h.indexer.sweep(only=frozenset(), paths=[str(log)])
    return server


def test_status_says_a_note_written_continuously_in_plain_words(
    serve_in_process: Callable[..., InProcessServer], vault: Path
) -> None:
    """health names the note written continuously with its chunks waiting; status and the agents'
    status say it apart from a backlog, and an answer's notice leaves those chunks out."""
    server = _served_written_continuously(serve_in_process, vault)
    h = server.harness
    health = server.call("health")
    idx = health["index"]
    assert idx["continuous"] == {
        "notes": 1,
        "pending_vectors": idx["pending_vectors"],
        "examples": ["vault/Sync log"],
    }
    assert idx["pending_vectors"] > 0 and idx["state"] == "ready"
    text = render_status(health)
    assert (
        "Written continuously: vault/Sync log (1 note), each change indexed at most a minute later: what "
        "each indexing adds is found by its words at once, by meaning once its vectors are computed; "
        f"{idx['pending_vectors']:,} of its chunks without a vector now"
    ) in text
    assert (
        f"Vectors: every chunk but the {idx['pending_vectors']:,} a note written continuously just added "
        "has a vector"
    ) in text and "waiting for vectors" not in text
    two = {
        **health,
        "index": {**idx, "continuous": {**idx["continuous"], "notes": 2, "examples": ["vault/A"]}},
    }
    assert "(2 notes), each change" in render_status(two) and "of their chunks" in render_status(two)
    line = status_line(h.indexer.activity, h.supervisor, h.stores.manifest, "ok", h.vectors)
    assert line.endswith(", 1 note written continuously") and "waiting for vectors" not in line
    message = status_of(health)["message"]
    assert "1 note is written continuously" in message and "wait for their vector" not in message
    reply = server.call("search", {"query": "okapi"})
    assert reply["pendingContinuous"] == reply["pendingVectors"] > 0
    assert "wait for" not in text_of_search("okapi", reply)


@pytest.mark.parametrize(
    ("state", "said"),
    [
        ("failed", "keyword search only (model failed)"),
        ("loading", "keyword search only (model loading)"),
        ("off", "keyword search only (vectors off)"),
    ],
)
def test_the_status_line_says_the_models_state_beside_a_note_written_continuously(
    make_cfg: Any, vault: Path, state: str, said: str
) -> None:
    """A note written continuously is said beside the model's state, never instead of it."""
    write(vault / "Sync log.md", _log_note(3))
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        h.stores.continuous = lambda: {"vault/Sync log": 10**6}
        line = status_line(h.indexer.activity, h.supervisor, h.stores.manifest, state, h.vectors)
        assert said in line and line.endswith(", 1 note written continuously")
    finally:
        h.close()


def test_with_the_model_failed_every_chunk_waiting_counts_a_continuous_notes_too(
    serve_in_process: Callable[..., InProcessServer], vault: Path
) -> None:
    """The chunks of a note written continuously are left out only while the model computes
    vectors: with it failed, status, the agents' status and `sidecar index` count them all."""
    server = _served_written_continuously(serve_in_process, vault)
    h = server.harness
    h.slot.state, h.slot.error = "failed", "no model here"
    health = server.call("health")
    idx = health["index"]
    assert idx["pending_vectors"] > 0 and idx["continuous"]["pending_vectors"] == 0
    assert f"Vectors: {idx['pending_vectors']:,} chunks wait for the model" in render_status(health)
    assert f"{idx['pending_vectors']} chunks wait for their vector" in status_of(health)["message"]


def test_a_long_note_saved_three_times_leaves_out_only_what_its_last_indexing_added(
    make_cfg: Any, vault: Path
) -> None:
    """Of a note written continuously, only the chunks its last indexing added are no backlog:
    a long new note saved three times in a few minutes keeps its first chunks counted as
    waiting; a rebuild's clear forgets which notes are written continuously."""
    write(vault / "Other.md", "# Other\n\nNothing yet.\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        clock, hot = _hot_after_a_sweep(h)
        log = vault / "Sync log.md"
        write(log, _log_note(30))
        _save_three_times(h, clock, log)
        caps = hot.continuous()
        pending = h.stores.manifest.pending_count()
        assert set(caps) == {"vault/Sync log"} and 0 < caps["vault/Sync log"] < 5 and pending >= 30
        result = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall).search(
            SearchRequest("okapi", 10, 0.0)
        )
        assert result.pending_continuous == caps["vault/Sync log"]
        assert waiting_vectors(result) == pending - caps["vault/Sync log"]
        h.indexer.clear()
        assert hot.continuous() == {}
    finally:
        h.close()


def test_status_names_the_largest_of_the_backlog_not_a_note_written_continuously(
    serve_in_process: Callable[..., InProcessServer], vault: Path
) -> None:
    """The Vectors line's "N of them from ..." counts what waits as a backlog: the chunks a note
    written continuously just added are not, so another note is named, with its own figure."""
    write(vault / "Other.md", "# Other\n\nNothing yet.\n")
    server = serve_in_process(vault)
    h = server.harness
    write(vault / "Sync log.md", _log_note(300))
    write(vault / "Big.md", _log_note(280))
    h.indexer.sweep(only=frozenset(), paths=[str(vault / "Sync log.md"), str(vault / "Big.md")])
    log_pending = h.stores.manifest.pending_count_of({"vault/Sync log": 10**6})
    h.stores.continuous = lambda: {"vault/Sync log": log_pending}
    idx = server.call("health")["index"]
    big = h.stores.manifest.pending_count_of({"vault/Big": 10**6})
    assert idx["pending_vectors"] == log_pending + big and idx["continuous"]["pending_vectors"] == log_pending
    assert idx["pending_largest"] == {"reference": "vault/Big", "chunks": big}


def test_status_counts_the_batch_computed_now_in_the_backlog_only_beyond_a_continuous_notes() -> None:
    """The batch the model computes now may hold a note written continuously's chunks, which the
    backlog leaves out: the Vectors line must not say the backlog is being stored, and says the
    computed part of the backlog beside the count waiting (the count every answer gives)."""
    health = {
        "version": "x", "started": 0, "pid": 1, "socket": "s", "home": "h", "vault": None,
        "index": {"state": "ready", "phase": "idle", "progress": {"done": 0, "total": 0}, "files": 2,
                  "chunks": 900, "by_source": {}, "skipped": {}, "pending_vectors": 60,
                  "continuous": {"notes": 1, "pending_vectors": 40, "examples": ["vault/Log"]}},
        "embedder": {"state": "ok", "model": "m", "origin": "o"},
        "vectors": {"computing": 30}, "roots": [],
    }  # fmt: skip
    text = render_status(health)
    assert "Vectors: 20 chunks waiting for vectors" in text and "storing" not in text
    health["vectors"]["computing"] = 50  # beyond the continuous note's 40: 10 of the backlog's
    said = render_status(health)  # the count waiting as answers give it, the computed part said
    assert "Vectors: 20 chunks waiting for vectors (10 of them computed, stored with the batch" in said
    health["vectors"]["computing"] = 60
    assert "Vectors: storing the last 20 computed" in render_status(health)
