"""Agents' keyword indexes at scale: a person's search reads one index of every agent's memory,
an agent's own index is removed when idle and rebuilt whole when the agent is back, and the two
kinds of index are kept in agreement across crashes, deletions, damage and an upgrade."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import search, with_agents

_FILLER = "notes about the garden and the boat and other things of the week"


def _doc(key: str, body: str, *, n: int = 0) -> Any:
    from sidecar.stores.bm25 import Bm25Doc

    source = key.split("/", 1)[0]
    agent = key.split("/")[1] if source == "memory" else ""
    name = key.rsplit("/", 1)[-1]
    return Bm25Doc.of(f"{key}#{n}", key, source, agent, title=name, aliases=(), headings=(), body=body)


def _agents_index(path: Path, agents: list[str]) -> None:
    """A keyword index with a small vault and one note of each agent, closed."""
    from sidecar.stores.bm25 import Bm25Index

    idx = Bm25Index(path)
    try:
        idx.add([_doc(f"vault/V{i}", f"{_FILLER} {i}") for i in range(20)])
        idx.add([_doc("vault/Kayak", f"kayak paddle trip {_FILLER}")])
        for i, agent in enumerate(agents):
            idx.add([_doc(f"memory/{agent}/n", f"the kayak of {agent} at the lake {'word ' * (i % 5)}")])
        idx.commit()
    finally:
        idx.close()


def test_a_persons_search_over_many_agents_opens_no_inbox(tmp_path: Path, monkeypatch: Any) -> None:
    """A person's search (no agent scope) reads every agent's memory from one index and opens no
    agent's own: 300 agents made it read 300 indexes (0.7-1.2 s a search, 640 threads held for
    five minutes). Restricted to notes by key, it still opens none; an agent's own search opens
    its own index alone."""
    from sidecar.stores.bm25 import Bm25Index

    path = tmp_path / "bm25"
    agents = [f"a{i:02d}" for i in range(40)]
    _agents_index(path, agents)
    idx = Bm25Index(path)
    opened: list[str] = []
    real = idx._open_pair

    def counting(agent: str) -> Any:
        opened.append(agent)
        return real(agent)

    monkeypatch.setattr(idx, "_open_pair", counting)
    try:
        found = idx.search("kayak lake", 100)
        assert {k.split("/")[1] for k, _ in found if k.startswith("memory/")} == set(agents)
        assert len(idx.search_pages("kayak", 100, sources=["memory"])) == 40
        keys = ["memory/a03/n", "memory/a07/n", "vault/Kayak"]
        assert sorted(k for k, _ in idx.search_pages("kayak", 10, keys=keys)) == sorted(keys)
        assert idx.holding(["lake"], ["memory/a05/n#0", "vault/V1#0"], {"a05"}) == {"memory/a05/n#0"}
        assert opened == [] and len(idx._open) == 0
        idx.search("kayak", 10, agent_scope="a01")
        assert opened == ["a01"]
    finally:
        idx.close()


def test_a_persons_memory_hits_score_as_the_agents_own_with_one_agent(tmp_path: Path) -> None:
    """With one agent, its memory scores for a person as for itself (the vault's idf, the same
    lengths); with more, a person's memory hits are normalised by all memory's average length."""
    from sidecar.stores.bm25 import Bm25Index

    path = tmp_path / "bm25"
    _agents_index(path, ["alpha"])
    idx = Bm25Index(path)
    try:
        for query in ("kayak lake", "kayak paddle trip"):
            own = dict(idx.search(query, 50, agent_scope="alpha"))
            person = dict(idx.search(query, 50))
            assert person["memory/alpha/n#0"] == pytest.approx(own["memory/alpha/n#0"], rel=1e-5)
            assert person["vault/Kayak#0"] == own["vault/Kayak#0"]
    finally:
        idx.close()


_NOTES = {
    "alpha": {
        "trip": "# Trip\n\nThe kayak of alpha waits at the lake.\n",
        "gear": "# Gear\n\nA paddle, a kayak cart and a long list of other gear for the lake.\n",
    },
    "beta": {"trip": "# Trip\n\nThe kayak of beta waits at the river, kayak kayak.\n"},
}


def ready_inbox(stores: Any, agent: str | None) -> None:
    from sidecar.index.repair import ready_inbox as ready

    ready(stores, agent)


def remove_idle_inboxes(stores: Any, days: int) -> None:
    from sidecar.index.repair import remove_idle_inboxes as remove

    remove(stores, days)


def _age(cfg: Any, agent: str, days: float) -> None:
    """Make ``agent``'s own index look unused for ``days``."""
    base = cfg.index_dir / "bm25" / "memory" / agent
    when = time.time() - days * 86400
    for f in base.rglob("*"):
        os.utime(f, (when, when))


def _keywords(h: Harness, query: str, agent: str | None = None) -> list[tuple[str, float]]:
    return h.stores.bm25.search(query, 20, agent_scope=agent)


def _keys(h: Harness, query: str, agent: str | None = None) -> set[str]:
    """The notes a keyword search finds."""
    views = h.stores.manifest.views([c for c, _ in _keywords(h, query, agent)])
    return {v.key for v in views.values()}


def test_an_idle_agents_index_is_removed_and_rebuilt_on_return_with_the_same_scores(
    make_cfg: Any, vault: Path
) -> None:
    """An agent's own index unused for longer than memory.indexIdleDays is removed from disk (its
    memory stays found by a person's search); the agent's next search rebuilds it from the
    manifest, whole and scored as before. A note the agent writes meanwhile makes no index of
    one note: the rebuild holds it and the others."""
    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        before = _keywords(h, "kayak lake paddle", "alpha")
        person = _keywords(h, "kayak lake paddle")
        assert {k for k in _keys(h, "kayak lake paddle", "alpha") if k.startswith("memory/")} == {
            "memory/alpha/trip",
            "memory/alpha/gear",
        }
        _age(h.cfg, "alpha", 40)
        h.stores.bm25._used_at.clear()
        remove_idle_inboxes(h.stores, 30)
        assert h.stores.bm25.agents() == ["beta"]
        assert not (cfg.index_dir / "bm25/memory/alpha").exists()
        assert _keywords(h, "kayak lake paddle") == person  # a person still finds alpha's memory
        refs = [hit["reference"] for hit in search(h, "kayak lake paddle", agent="alpha")]
        assert "memory/trip" in refs and "memory/gear" in refs
        assert h.stores.bm25.agents() == ["alpha", "beta"]
        assert _keywords(h, "kayak lake paddle", "alpha") == before
        # Idle again, then a note written: no index of that note alone; the next search of the
        # agent rebuilds all three.
        _age(h.cfg, "alpha", 40)
        h.stores.bm25._used_at.clear()
        remove_idle_inboxes(h.stores, 30)
        write(cfg.agents_dir / "alpha/memory/more.md", "# More\n\nAnother kayak trip to the lake.\n")
        h.sweep()
        assert not (cfg.index_dir / "bm25/memory/alpha").exists()
        ready_inbox(h.stores, "alpha")
        mine = {k for k in _keys(h, "kayak", "alpha") if k.startswith("memory/")}
        assert mine == {"memory/alpha/trip", "memory/alpha/gear", "memory/alpha/more"}
        # Used recently: kept.
        remove_idle_inboxes(h.stores, 30)
        assert h.stores.bm25.agents() == ["alpha", "beta"]
    finally:
        h.close()


def test_an_idle_removal_racing_an_agents_search_leaves_the_search_its_index(
    make_cfg: Any, vault: Path, monkeypatch: Any
) -> None:
    """A sweep's removal of idle indexes landing between a returning agent's look for its index
    and its search (forced here) left that search without the agent's memory, and nothing said
    so. The use is told first: a removal after it keeps the index, one before it is rebuilt."""
    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        idx = h.stores.bm25
        real = idx.inbox_missing
        removed: list[list[str]] = []

        def racing(agent: str, held: Any = None) -> bool:
            missing = real(agent, held)
            removed.append(idx.remove_idle(30 * 86400))  # the sweep, at the worst moment
            return missing

        for raced in ("after the look", "before the look"):
            _age(h.cfg, "alpha", 40)
            idx._used_at.clear()
            if raced == "before the look":
                removed.append(idx.remove_idle(30 * 86400))
            else:
                monkeypatch.setattr(idx, "inbox_missing", racing)
            ready_inbox(h.stores, "alpha")
            monkeypatch.setattr(idx, "inbox_missing", real)
            assert "alpha" in idx.agents(), (raced, removed)
            mine = {k for k in _keys(h, "kayak", "alpha") if k.startswith("memory/")}
            assert mine == {"memory/alpha/trip", "memory/alpha/gear"}, raced
        assert removed == [[], ["alpha"]]  # raced after the look: kept; before: removed, rebuilt
    finally:
        h.close()


def test_a_crash_between_the_two_writes_is_repaired_at_start(make_cfg: Any, vault: Path) -> None:
    """A memory note is committed to the index of every agent's memory and to its agent's own
    index one after the other: a crash between the two leaves them disagreeing (here each copy
    from before the note, in turn). The check after the first sweep refills the one behind."""
    cfg = with_agents(make_cfg, vault, {"alpha": {"trip": _NOTES["alpha"]["trip"]}})
    bm25 = cfg.index_dir / "bm25"
    kept = {part: cfg.index_dir / f"kept-{part.replace('/', '-')}" for part in ("memory-all", "memory/alpha")}
    for part, copy in kept.items():
        shutil.copytree(bm25 / part, copy)
    write(cfg.agents_dir / "alpha/memory/gear.md", _NOTES["alpha"]["gear"])
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    h.close()
    for part, copy in kept.items():
        shutil.rmtree(bm25 / part)
        shutil.copytree(copy, bm25 / part)  # that index as the crash left it
        h = Harness(cfg, FakeEmbedder())
        try:
            h.sweep()
            both = {"memory/alpha/trip", "memory/alpha/gear"}
            for agent in (None, "alpha"):
                found = _keys(h, "kayak lake", agent)
                assert both <= found, (part, agent)
            assert h.stores.bm25.everyone_counts() == (2, 2)
            assert h.stores.bm25.inbox_counts() == {"alpha": (2, 2)}
        finally:
            h.close()


def test_an_install_without_the_index_of_all_memory_fills_it_at_start(make_cfg: Any, vault: Path) -> None:
    """An index from before the index of every agent's memory (inboxes only): a person's search
    reads the inboxes until it is filled from the manifest at the first sweep, then opens none.
    The keyword layout is not raised: nothing else is rebuilt."""
    cfg = with_agents(make_cfg, vault, _NOTES)
    bm25 = cfg.index_dir / "bm25"
    shutil.rmtree(bm25 / "memory-all")
    vault_meta = (bm25 / "chunks/meta.json").read_bytes()
    h = Harness(cfg, FakeEmbedder())
    try:
        idx = h.stores.bm25
        assert not idx.everyone_ready
        person = _keys(h, "kayak")
        assert {"memory/alpha/trip", "memory/beta/trip"} <= person
        h.sweep()
        assert idx.everyone_ready and (bm25 / "memory-all/filled").is_file()
        assert (bm25 / "chunks/meta.json").read_bytes() == vault_meta
        idx._open.clear()
        assert _keys(h, "kayak") == person
        assert len(idx._open) == 0
    finally:
        h.close()


def test_a_deleted_memory_note_leaves_both_indexes(make_cfg: Any, vault: Path) -> None:
    """A deleted memory note is gone from its agent's own index and from the index of every
    agent's memory; also when the agent's own index was removed as idle (the rebuild does not
    bring it back)."""
    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        (cfg.agents_dir / "alpha/memory/gear.md").unlink()
        _age(h.cfg, "beta", 40)
        remove_idle_inboxes(h.stores, 30)
        (cfg.agents_dir / "beta/memory/trip.md").unlink()
        write(cfg.agents_dir / "beta/memory/kept.md", "# Kept\n\nThe canoe of beta.\n")
        h.sweep()
        for agent in (None, "alpha", "beta"):
            ready_inbox(h.stores, agent)
            found = _keys(h, "kayak paddle canoe", agent)
            assert "memory/alpha/gear" not in found and "memory/beta/trip" not in found, agent
        assert h.stores.bm25.everyone_counts() == (2, 2)
        assert h.stores.bm25.inbox_counts() == {"alpha": (1, 1), "beta": (1, 1)}
    finally:
        h.close()


def test_a_damaged_index_of_all_memory_is_moved_aside_and_refilled(make_cfg: Any, vault: Path) -> None:
    """The index of every agent's memory damaged at start is moved aside (next to the index) and
    refilled from the manifest before the first sweep; the vault's index is left alone."""
    cfg = with_agents(make_cfg, vault, _NOTES)
    (cfg.index_dir / "bm25/memory-all/chunks/meta.json").write_text("{not json")
    h = Harness(cfg, FakeEmbedder())
    try:
        assert any(p.name.startswith("bm25-memory-all.broken-") for p in cfg.index_dir.iterdir())
        h.sweep()
        assert h.stores.bm25.everyone_counts() == (3, 3)
        found = _keys(h, "kayak")
        assert {"memory/alpha/trip", "memory/beta/trip"} <= found and len(h.stores.bm25._open) <= 2
    finally:
        h.close()


def test_read_only_removes_and_rebuilds_nothing(tmp_path: Path) -> None:
    """Opened read-only (its disk is full), no idle index is removed, none is rebuilt, no use is
    noted on disk."""
    from sidecar.stores.bm25 import Bm25Index

    path = tmp_path / "bm25"
    _agents_index(path, ["alpha", "beta"])
    when = time.time() - 90 * 86400
    for f in (path / "memory").rglob("*"):
        os.utime(f, (when, when))
    before = sorted(str(p) for p in path.rglob("*"))
    idx = Bm25Index(path, read_only=True)
    try:
        assert idx.everyone_ready and idx.remove_idle(86400) == []
        idx.note_use("alpha")
        assert not idx.inbox_missing("gamma")
        assert len(idx.search("kayak", 50, sources=["memory"])) == 2
    finally:
        idx.close()
    assert sorted(str(p) for p in path.rglob("*")) == before


def test_why_scores_an_agents_note_as_its_search_does(make_cfg: Any, vault: Path) -> None:
    """`why` asked by an agent gives its memory note the keyword score the agent's search gave
    (from its own index), not a person's (all memory's lengths): other agents' longer notes
    would move it."""
    from sidecar.search.explain import explain
    from sidecar.search.retrieval import Retriever, SearchRequest

    long = "# Log\n\n" + " ".join(f"word{i}" for i in range(300)) + " kayak lake\n"
    cfg = with_agents(make_cfg, vault, {**_NOTES, "gamma": {"log": long, "log2": long + "more"}})
    h = Harness(cfg, None)
    try:
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        hits = r.search(SearchRequest("kayak lake", 10, 0.0, agent="alpha")).hits
        scores = {hit.reference: hit.bm25_score for hit in hits}
        why = explain(r, "memory/alpha/trip", "kayak lake", "alpha")
        assert scores["memory/trip"] is not None
        assert [c.bm25_score for c in why.chunks] == [pytest.approx(scores["memory/trip"], abs=1e-3)]
    finally:
        h.close()


@pytest.mark.parametrize("fault", ["lost", "damaged"])
def test_why_on_a_keyword_index_that_cannot_be_read_answers_and_says_so(
    make_cfg: Any, vault: Path, fault: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`why` while the keyword index cannot be read (lost: closed with none open in its place;
    damaged: its searches fail): it answers as the search does, from vectors, with no keyword
    score and the note that keyword search failed; a damaged index is reported for the repair.
    Was: `why` failed with the keyword index's error."""
    from sidecar.search.explain import explain
    from sidecar.search.retrieval import Retriever, SearchRequest
    from sidecar.stores.bm25_folder import engine

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        bm25 = h.stores.bm25
        if fault == "lost":
            bm25.lost("too many open files at its reopen")
        else:

            def damaged(*_args: Any, **_kw: Any) -> Any:
                with engine("search"):
                    raise ValueError("Data corrupted: checksum mismatch")

            monkeypatch.setattr(bm25, "_search", damaged)
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        said = r.search(SearchRequest("kayak lake", 10, 0.0, agent="alpha")).degraded
        assert said is not None and "keyword search failed" in said, said
        why = explain(r, "memory/alpha/trip", "kayak lake", "alpha")
        assert why.indexed and why.chunks and all(c.bm25_score is None for c in why.chunks)
        assert why.degraded is not None and why.degraded.count("keyword search failed") == 1, why.degraded
        assert (h.problems.active_in("keyword_search") is not None) == (fault == "damaged")
    finally:
        h.close()


def test_why_says_a_memory_index_it_could_not_read_for_its_note(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`why`'s keyword search of the note itself failing in the agent's own index for want of
    file handles (the search before it had read it): the answer says that index's notes may be
    missing, as a search's does, and status says no file handles left. Was: the note showed no
    keyword score and nothing said why."""
    from sidecar.index.keyword_faults import NO_HANDLES
    from sidecar.search.explain import explain
    from sidecar.search.retrieval import Retriever

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        bm25 = h.stores.bm25
        real = bm25._inbox_hits

        def one_note_fails(agent: str, *, pages: bool, keys: Any, **kw: Any) -> Any:
            if not pages and keys is not None:  # the chunk search of one note: why's own
                _out_of_handles()
            return real(agent, pages=pages, keys=keys, **kw)

        monkeypatch.setattr(bm25, "_inbox_hits", one_note_fails)
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        why = explain(r, "memory/alpha/trip", "kayak lake", "alpha")
        assert why.chunks and all(c.bm25_score is None for c in why.chunks)
        note = why.degraded
        assert note is not None and "memory/alpha" in note and "may be missing" in note, note
        assert h.problems.active_in("keyword_search", subject=NO_HANDLES) is not None
    finally:
        h.close()


def test_an_index_of_all_memory_damaged_while_running_is_reported_and_refilled(tmp_path: Path) -> None:
    """The index of every agent's memory failing a person's search: that search reads the
    agents' own indexes instead, the failure is reported (``failing``) for the repair, and the
    refill moves it aside and fills a new one; the agents' own indexes are left alone."""
    from sidecar.stores.bm25 import Bm25Index
    from sidecar.stores.bm25_search import EVERYONE

    path = tmp_path / "index" / "bm25"
    idx = Bm25Index(path)
    try:
        docs = [_doc("memory/alpha/a", "kayak alpha"), _doc("memory/beta/b", "kayak beta")]
        idx.add([_doc("vault/v", "kayak vault"), *docs])
        idx.commit()
        for f in (path / "memory-all" / "chunks").glob("*.term"):  # cut short under the open index
            with f.open("r+b") as fh:
                fh.truncate(f.stat().st_size // 3)
        found = sorted(k for k, _ in idx.search("kayak", 10))
        assert found == ["memory/alpha/a#0", "memory/beta/b#0", "vault/v#0"]
        assert f"{EVERYONE}/chunks" in idx.failing
        idx.refill_everyone(docs)
        assert idx.failing == {} and idx.everyone_counts() == (2, 2)
        assert [p.name.split(".broken-")[0] for p in (tmp_path / "index").glob("*.broken-*")] == [
            "bm25-memory-all"
        ]
        idx._open.clear()
        assert sorted(k for k, _ in idx.search("kayak", 10)) == found and idx._open == {}
    finally:
        idx.close()


def test_a_failed_rebuild_of_a_returning_agents_index_is_said_and_tried_again(
    make_cfg: Any, vault: Path, monkeypatch: Any
) -> None:
    """The rebuild of an idle-removed agent's index failing (a full disk at its commit): the
    search answers (vault and vector results) and says the agent's notes may be missing; no
    empty index is left to pass for the agent's memory; once there is room the next search
    rebuilds it whole. `why` answers too."""
    from sidecar.contracts.errors import DiskFullError
    from sidecar.search.explain import explain
    from sidecar.search.retrieval import Retriever, SearchRequest
    from sidecar.stores import bm25_folder as b

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        idx = h.stores.bm25
        _age(h.cfg, "alpha", 40)
        idx._used_at.clear()
        assert idx.remove_idle(30 * 86400) == ["alpha"]
        real = b.Folder.commit

        def full(self: Any) -> None:
            if "/memory/alpha/" in str(self.path):
                raise DiskFullError("No space left on device (simulated)")
            real(self)

        monkeypatch.setattr(b.Folder, "commit", full)
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        for _ in range(2):
            result = r.search(SearchRequest("kayak lake", 10, 0.0, agent="alpha"))
            assert result.degraded is not None and "memory/alpha" in result.degraded
            assert idx.inbox_missing("alpha") and "alpha" in idx.failing
            assert not (cfg.index_dir / "bm25/memory/alpha").exists()
        assert explain(r, "memory/alpha/trip", "kayak lake", "alpha").indexed
        monkeypatch.setattr(b.Folder, "commit", real)
        result = r.search(SearchRequest("kayak lake", 10, 0.0, agent="alpha"))
        assert idx.failing == {} and not idx.inbox_missing("alpha")
        assert {k for k in _keys(h, "kayak", "alpha") if k.startswith("memory/")} == {
            "memory/alpha/trip",
            "memory/alpha/gear",
        }
    finally:
        h.close()


def test_an_index_whose_searches_fail_is_not_removed_as_idle(tmp_path: Path) -> None:
    """A search failure is reported as ``<agent>/chunks``: the idle removal leaves that index to
    the repair (moved aside, kept as evidence), and its report stays."""
    from sidecar.stores.bm25 import Bm25Index

    path = tmp_path / "index" / "bm25"
    idx = Bm25Index(path)
    try:
        idx.add([_doc("memory/alpha/a", "kayak alpha"), _doc("memory/beta/b", "kayak beta")])
        idx.commit()
        assert idx.everyone_ready
        idx.failing["alpha/chunks"] = "damaged (simulated)"
        when = time.time() - 40 * 86400
        for f in (path / "memory").rglob("*"):
            os.utime(f, (when, when))
        idx._used_at.clear()
        assert idx.remove_idle(30 * 86400) == ["beta"]
        assert (path / "memory" / "alpha").is_dir() and "alpha/chunks" in idx.failing
    finally:
        idx.close()


def test_memory_written_by_an_older_version_is_refilled_into_the_index_of_all_memory(
    make_cfg: Any, vault: Path
) -> None:
    """A downgrade writes the agents' own indexes and the manifest, never the index of all memory
    (its `filled` stays): an edit and a rename keep the counts, so the start's count check alone
    kept a person's search on the old text and names for good. Simulated: that index put back
    as it was before the edits. A restart with nothing written by another version refills
    nothing."""
    cfg = with_agents(make_cfg, vault, _NOTES)
    bm25 = cfg.index_dir / "bm25"
    shutil.copytree(bm25 / "memory-all", cfg.index_dir / "kept-all")
    inbox = cfg.agents_dir / "alpha/memory"
    write(inbox / "trip.md", "# Trip\n\nThe canoe of alpha waits at the river.\n")  # edit
    (inbox / "gear.md").rename(inbox / "kit.md")  # rename
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    h.close()
    shutil.rmtree(bm25 / "memory-all")
    shutil.copytree(cfg.index_dir / "kept-all", bm25 / "memory-all")  # as the older version left it
    h = Harness(cfg, FakeEmbedder())  # the upgrade again
    try:
        h.sweep()
        assert "memory/alpha/trip" in _keys(h, "canoe")
        assert "memory/alpha/kit" in _keys(h, "paddle") and "memory/alpha/gear" not in _keys(h, "paddle")
        write(inbox / "more.md", "# More\n\nA kayak trip.\n")
        h.sweep()
    finally:
        h.close()
    h = Harness(cfg, FakeEmbedder())  # its own restart: nothing to refill
    try:
        assert not h.stores.bm25.everyone_behind()
    finally:
        h.close()


def _alpha_removed_as_idle(make_cfg: Any, vault: Path, notes: dict[str, dict[str, str]]) -> Any:
    """The agents' ``notes`` indexed, then alpha's own keyword index removed as idle (its notes
    aged 40 days); the stores closed."""
    cfg = with_agents(make_cfg, vault, notes)
    h = Harness(cfg, FakeEmbedder())
    try:
        _age(h.cfg, "alpha", 40)
        assert h.stores.bm25.remove_idle(30 * 86400) == ["alpha"]
    finally:
        h.close()
    return cfg


def _idle_alpha_then_memory_all_damaged(make_cfg: Any, vault: Path) -> Any:
    """Agents alpha and beta; alpha's own index removed as idle; then the index of every agent's
    memory damaged while stopped (moved aside and refilled at the next start's first sweep)."""
    cfg = _alpha_removed_as_idle(make_cfg, vault, _NOTES)
    (cfg.index_dir / "bm25/memory-all/chunks/meta.json").write_text("{not json")
    return cfg


def test_until_the_index_of_all_memory_is_filled_no_agents_memory_goes_unsaid(
    make_cfg: Any, vault: Path
) -> None:
    """Until the index of every agent's memory is filled (moved aside as damaged here), a person's
    search reads the agents' own indexes: an agent whose own one was removed as idle was found by
    nobody, and nothing said so. A person's answer says how many agents' memory its words cannot
    find yet; the agent's own search rebuilds its index from the manifest and finds all its
    notes; once filled, a person's search finds them and says nothing."""
    from sidecar.search.retrieval import Retriever, SearchRequest

    cfg = _idle_alpha_then_memory_all_damaged(make_cfg, vault)
    h = Harness(cfg, None)  # keyword search alone: what the words find
    try:
        idx = h.stores.bm25
        assert not idx.everyone_ready and idx.agents() == ["beta"]
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        person = r.search(SearchRequest("kayak lake paddle", 10, 0.0))
        assert person.degraded is not None
        assert "memory of 1 agent " in person.degraded and "being filled" in person.degraded
        mine = r.search(SearchRequest("kayak lake paddle", 10, 0.0, agent="alpha"))
        assert {"memory/trip", "memory/gear"} <= {hit.reference for hit in mine.hits}
        assert idx.agents() == ["alpha", "beta"]
        assert mine.degraded is None or "memory of" not in mine.degraded
        h.sweep()
        assert idx.everyone_ready
        person = r.search(SearchRequest("kayak lake paddle", 10, 0.0))
        assert person.degraded is None or "memory of" not in person.degraded
        refs = {hit.reference for hit in person.hits}
        assert {"memory/alpha/trip", "memory/alpha/gear", "memory/beta/trip"} <= refs
    finally:
        h.close()


def test_a_write_before_the_index_of_all_memory_is_filled_rebuilds_the_agents_whole_index(
    make_cfg: Any, vault: Path
) -> None:
    """A note written for an agent whose own index was removed as idle, before the index of every
    agent's memory is filled: it made an index holding that one note, which its agent's searches
    and a person's took for all its memory (until the first sweep's check). The write rebuilds the
    agent's whole index from the manifest, the new note with it."""
    cfg = _idle_alpha_then_memory_all_damaged(make_cfg, vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        idx = h.stores.bm25
        assert not idx.everyone_ready
        path = cfg.agents_dir / "alpha/memory/more.md"
        write(path, "# More\n\nAnother kayak trip to the lake.\n")
        root = next(r for r in h.indexer.changes.roots() if r.name == "memory/alpha")
        h.indexer.index_now(root, path)
        assert not idx.everyone_ready  # still the window: no sweep ran
        assert idx.inbox_counts()["alpha"] == (3, 3)
        want = {"memory/alpha/trip", "memory/alpha/gear", "memory/alpha/more"}
        assert want <= _keys(h, "kayak", "alpha")
        assert want <= _keys(h, "kayak")  # a person's search, reading the agents' own indexes
    finally:
        h.close()


def test_no_index_is_removed_as_idle_while_the_index_of_all_memory_fails(tmp_path: Path) -> None:
    """While the index of every agent's memory fails its searches (damaged, its repair pending),
    a person's search reads the agents' own indexes: one removed as idle then was found by
    nobody. None is removed until the repair has refilled it."""
    from sidecar.stores.bm25 import Bm25Index
    from sidecar.stores.bm25_search import EVERYONE

    path = tmp_path / "index" / "bm25"
    idx = Bm25Index(path)
    try:
        docs = [_doc("memory/alpha/a", "kayak alpha"), _doc("memory/beta/b", "kayak beta")]
        idx.add(docs)
        idx.commit()
        idx.failing[f"{EVERYONE}/chunks"] = "damaged (simulated)"
        when = time.time() - 40 * 86400
        for f in (path / "memory").rglob("*"):
            os.utime(f, (when, when))
        idx._used_at.clear()
        assert idx.remove_idle(30 * 86400) == []
        assert idx.agents() == ["alpha", "beta"]
        idx.refill_everyone(docs)
        assert sorted(idx.remove_idle(30 * 86400)) == ["alpha", "beta"]
    finally:
        idx.close()


def test_status_and_answers_over_the_socket_say_while_all_memory_is_being_indexed(
    make_cfg: Any, vault: Path
) -> None:
    """Over the socket, before the first sweep has filled the index of every agent's memory: health
    says it is being filled and whose memory a person's search cannot find by its words
    (`index.memory_all`), status says it in a line, a person's answer says it in `degraded`;
    once filled, none of them says anything."""
    from sidecar.clients.cli_render import render_status
    from tests.in_process import InProcessServer

    cfg = _idle_alpha_then_memory_all_damaged(make_cfg, vault)
    h = Harness(cfg, None)
    server = InProcessServer(h)
    try:
        health = server.call("health")
        assert health["index"]["memory_all"] == {"state": "filling", "agents_not_searchable": 1}
        shown = render_status(health)
        assert "keyword index of all agents' memory: being filled from the notes" in shown
        assert "the memory of 1 agent whose own index was removed as unused" in shown
        answer = server.call("search", {"query": "kayak lake"})
        assert "memory of 1 agent " in answer["degraded"]
        h.sweep()
        health = server.call("health")
        assert health["index"]["memory_all"] is None
        assert "all agents' memory" not in render_status(health)
        answer = server.call("search", {"query": "kayak lake"})
        assert "memory of" not in (answer.get("degraded") or "")
        assert "memory/alpha/trip" in {hit["reference"] for hit in answer["hits"]}
    finally:
        server.close()
        h.close()


def test_idle_agents_memory_does_not_make_a_damaged_index_of_all_memory_rebuild_the_vaults(
    make_cfg: Any, vault: Path, caplog: Any
) -> None:
    """The index of every agent's memory moved aside at start is refilled alone, memory only. The
    start's look for a new keyword index counted the notes of agents whose own index was removed
    as idle as missing: with more of them than the vault's, it refilled the vault's index too,
    and a person's search read the agents' own indexes all that time."""
    many = {f"n{i}": f"# N{i}\n\nThe kayak of alpha, trip {i} to the lake.\n" for i in range(12)}
    cfg = _alpha_removed_as_idle(make_cfg, vault, {"alpha": many, "beta": _NOTES["beta"]})
    bm25 = cfg.index_dir / "bm25"
    (bm25 / "memory-all/chunks/meta.json").write_text("{not json")
    vault_meta = (bm25 / "chunks/meta.json").read_bytes()
    h = Harness(cfg, FakeEmbedder())
    try:
        caplog.set_level("INFO", logger="sidecar")
        h.sweep()
        assert h.stores.bm25.everyone_ready and h.stores.bm25.agents() == ["beta"]
        assert (bm25 / "chunks/meta.json").read_bytes() == vault_meta
        assert "reason=new keyword index" not in caplog.text
        assert len([k for k in _keys(h, "kayak lake") if k.startswith("memory/alpha/")]) == 12
    finally:
        h.close()


def _vault_index_emptied(cfg: Any) -> None:
    """The vault's and the wiki's keyword index emptied while stopped (a new one at next start)."""
    bm25 = cfg.index_dir / "bm25"
    shutil.rmtree(bm25 / "chunks")
    shutil.rmtree(bm25 / "pages")


@pytest.mark.parametrize("memory_all", ["filled", "damaged, agents idle"])
def test_a_new_vault_index_is_refilled_at_start_whatever_memory_holds(
    make_cfg: Any, vault: Path, memory_all: str
) -> None:
    """A new (emptied) vault index is refilled before the first sweep also when memory holds more
    chunks than the vault: counted with memory's (a filled index of all memory, or the notes of
    agents whose own index was removed as idle), its emptiness was hidden, and a person's search
    found no vault note by its words until the check after the whole sweep."""
    many = {f"n{i}": f"# N{i}\n\nThe kayak of alpha, trip {i} to the lake.\n" for i in range(40)}
    cfg = with_agents(make_cfg, vault, {"alpha": many, "beta": _NOTES["beta"]})
    h = Harness(cfg, FakeEmbedder())
    try:
        vault_chunks = h.stores.bm25.shared_counts()[0]
        assert 0 < vault_chunks < 40
        if memory_all != "filled":
            _age(h.cfg, "alpha", 40)
            assert h.stores.bm25.remove_idle(30 * 86400) == ["alpha"]
    finally:
        h.close()
    _vault_index_emptied(cfg)
    if memory_all != "filled":
        (cfg.index_dir / "bm25/memory-all/chunks/meta.json").write_text("{not json")
    h = Harness(cfg, FakeEmbedder())
    try:
        from sidecar.index.repair import refill_new_bm25

        assert h.stores.bm25.shared_counts()[0] == 0
        refill_new_bm25(h.stores)  # what the start does before its first sweep
        assert h.stores.bm25.shared_counts()[0] == vault_chunks
        assert h.stores.bm25.everyone_ready
        hits = h.stores.bm25.search("kayak lake", 100)
        keys = {v.key for v in h.stores.manifest.views([c for c, _ in hits]).values()}
        assert len([k for k in keys if k.startswith("memory/alpha/")]) == 40
    finally:
        h.close()


def test_read_only_an_agent_whose_index_was_removed_as_idle_is_told_its_memory_is_not_found(
    make_cfg: Any, vault: Path
) -> None:
    """Served read-only (a full disk at start), an agent whose own keyword index was removed as
    idle gets none back (nothing is written): its search found none of its memory by its words,
    and its answer said nothing. It says so; another agent's answer does not."""
    from sidecar.daemon.compose import build_read_only
    from sidecar.model.embedder import EmbedderSlot
    from sidecar.search.retrieval import Retriever, SearchRequest

    cfg = _alpha_removed_as_idle(make_cfg, vault, _NOTES)
    slot = EmbedderSlot()
    parts = build_read_only(cfg, slot)
    try:
        r = Retriever(parts.stores, slot, cfg.search, cfg.recall)
        mine = r.search(SearchRequest("kayak lake paddle", 10, 0.0, agent="alpha"))
        assert not [hit for hit in mine.hits if hit.reference.startswith("memory/")]
        assert mine.degraded is not None
        assert "your memory's keyword index" in mine.degraded and "read-only" in mine.degraded
        other = r.search(SearchRequest("kayak river", 10, 0.0, agent="beta"))
        assert "memory/trip" in {hit.reference for hit in other.hits}
        assert other.degraded is None or "your memory" not in other.degraded
    finally:
        parts.stores.close()


def test_the_agents_with_memory_are_read_through_the_primary_key(make_cfg: Any, vault: Path) -> None:
    """The agents with memory (asked on each health call and person's search while the index of
    all memory is not filled) are found through the key's range: by the source alone every
    file was scanned (58 ms at 100,000 files)."""
    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        manifest = h.stores.manifest
        assert manifest.agents_with_memory() == {"alpha", "beta"}  # the manifest's reader opened
        [db] = manifest._readers  # one reader: the next read takes it again
        statements: list[str] = []
        db.set_trace_callback(statements.append)
        try:
            manifest.agents_with_memory()
        finally:
            db.set_trace_callback(None)
        [sql] = [s for s in statements if "DISTINCT" in s]
        plan = " | ".join(str(row[-1]) for row in db.execute(f"EXPLAIN QUERY PLAN {sql}"))
        assert "SEARCH f USING INDEX sqlite_autoindex_files_1 (key>? AND key<?)" in plan, plan
    finally:
        h.close()


def test_a_persons_search_reads_the_agents_with_memory_at_most_once_a_second(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the index of all memory is not filled, a person's search and health count the agents
    whose memory its words cannot find: the manifest's agents are read at most once a second,
    and not at all while that index is damaged (the answer says the damage, not the count)."""
    import sidecar.index.repair as repair
    from sidecar.index.repair import memory_gap
    from sidecar.search.retrieval import Retriever, SearchRequest
    from sidecar.stores.bm25_search import EVERYONE

    cfg = _idle_alpha_then_memory_all_damaged(make_cfg, vault)
    h = Harness(cfg, None)
    try:
        now = [1000.0]
        monkeypatch.setattr(repair, "_clock", lambda: now[0], raising=False)
        reads: list[int] = []
        manifest = h.stores.manifest
        real = manifest.agents_with_memory

        def counted() -> set[str]:
            reads.append(1)
            return real()

        monkeypatch.setattr(manifest, "agents_with_memory", counted)
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        for _ in range(2):
            answer = r.search(SearchRequest("kayak lake", 10, 0.0))
            assert answer.degraded is not None and "memory of 1 agent " in answer.degraded
        assert memory_gap(h.stores) == ("filling", 1)
        assert len(reads) == 1
        now[0] += 2 * repair.MEMORY_AGENTS_KEPT
        assert memory_gap(h.stores) == ("filling", 1) and len(reads) == 2
        now[0] += 2 * repair.MEMORY_AGENTS_KEPT
        h.stores.bm25.failing[f"{EVERYONE}/chunks"] = "damaged (simulated)"
        answer = r.search(SearchRequest("kayak lake", 10, 0.0))
        assert answer.degraded is not None and "all agents' memory is damaged" in answer.degraded
        assert len(reads) == 2
    finally:
        h.close()


def _no_file_handles_left(under: Path) -> contextlib.AbstractContextManager[None]:
    """Every read of a keyword index file fails with EMFILE meanwhile, as in a process out of
    file handles: injected at the read (a process-wide limit also failed the harness's own
    threads, at random)."""
    return _reads_fail(under, errno.EMFILE, stats=False)


_SEGMENT_SUFFIXES = (".term", ".idx", ".pos", ".store", ".fast", ".fieldnorm", ".del")


@contextlib.contextmanager
def _reads_fail(under: Path, code: int, *, stats: bool = True) -> Iterator[None]:
    """Every read (and stat) of an index file under ``under`` fails with ``code`` meanwhile, as
    on a share that hiccups (EIO, ESTALE, EACCES, ENOTCONN): a segment file's stat and bytes,
    meta.json's text. Other paths are read as ever."""
    real_stat, real_bytes, real_text = os.stat, Path.read_bytes, Path.read_text

    def hit(p: Any) -> bool:
        return str(p).startswith(str(under) + os.sep)

    def fail(p: Any) -> None:
        raise OSError(code, os.strerror(code), str(p))

    def stat(p: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if stats and hit(p) and str(p).endswith(_SEGMENT_SUFFIXES):
            fail(p)
        return real_stat(p, *args, **kwargs)

    def read_bytes(self: Path) -> bytes:
        if hit(self):
            fail(self)
        return real_bytes(self)

    def read_text(self: Path, *args: Any, **kwargs: Any) -> str:
        if hit(self) and self.name == "meta.json":
            fail(self)
        return real_text(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(os, "stat", stat)
        m.setattr(Path, "read_bytes", read_bytes)
        m.setattr(Path, "read_text", read_text)
        yield


@pytest.mark.parametrize(
    ("what", "code"),
    [
        ("stat", errno.EIO),
        ("checksum", errno.ESTALE),
        ("checksum", errno.EACCES),
        ("count", errno.ENOTCONN),
        ("count", errno.EIO),
    ],
)
def test_a_share_fault_in_a_damage_check_or_a_count_is_no_damage(
    make_cfg: Any, vault: Path, code: int, what: str
) -> None:
    """A file-system fault that passes (as a failed commit takes it) in a search's damage check
    (a segment file's stat, its bytes read for the checksum) or in the count of an agent's index
    (its meta.json): a fault that passes, nothing reported for repair, nothing moved aside. Was:
    "cannot be read" or "was overwritten" (damage), or an unreadable count: the index was moved
    aside and refilled."""
    from sidecar.contracts.errors import PassingFaultError
    from sidecar.daemon.repairs import RepairPolicy

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, None)
    try:
        bm25 = h.stores.bm25
        assert bm25.everyone_gap() is None
        if what == "count":
            with _reads_fail(cfg.index_dir / "bm25", code):
                for count in (bm25.inbox_counts, bm25.num_docs):
                    with pytest.raises(PassingFaultError):
                        count()
        else:
            for f in (cfg.index_dir / "bm25" / "memory-all" / "chunks").iterdir():
                if f.suffix == ".term":  # touched: the next search reads its checksum
                    st = f.stat()
                    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
            with _reads_fail(cfg.index_dir / "bm25" / "memory-all", code, stats=what == "stat"):
                bm25.search("zeppelin", 10)
        assert bm25.failing == {} and bm25.everyone_gap() is None
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        assert not list(cfg.index_dir.glob("*.broken-*"))
        assert bm25.inbox_counts() == {"alpha": (2, 2), "beta": (1, 1)}
        found = {x["reference"] for x in search(h, "kayak", sources=["memory"])}
        assert found == {"memory/alpha/trip", "memory/alpha/gear", "memory/beta/trip"}
    finally:
        h.close()


def test_no_file_handles_left_in_a_search_moves_no_index_of_all_memory_aside(
    make_cfg: Any, vault: Path
) -> None:
    """A person's search that meets no file handles left (EMFILE, at the read) in
    the index of every agent's memory (a file of it touched, so that its checksum is read): the
    search goes on without it, nothing is reported for repair and the repair moves nothing
    aside. Was: taken for damage ("was overwritten"), reported, and the repair moved the index
    aside and refilled it."""
    from sidecar.daemon.repairs import RepairPolicy

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, None)
    try:
        bm25 = h.stores.bm25
        assert bm25.everyone_gap() is None
        for f in (cfg.index_dir / "bm25" / "memory-all" / "chunks").iterdir():
            if f.suffix == ".term":  # touched: the next search that matches nothing reads it
                st = f.stat()
                os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
        with _no_file_handles_left(cfg.index_dir):
            bm25.search("zeppelin", 10)
        assert bm25.failing == {} and bm25.everyone_gap() is None
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        assert not list(cfg.index_dir.glob("*.broken-*"))
        assert h.problems.active_in("keyword_search") is None
        found = {x["reference"] for x in search(h, "kayak", sources=["memory"])}
        assert found == {"memory/alpha/trip", "memory/alpha/gear", "memory/beta/trip"}
    finally:
        h.close()


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        ("Too many open files (os error 24)", "NoHandlesError"),
        ("Too many open files in system (os error 23)", "NoHandlesError"),
        ("No space left on device (os error 28)", "DiskFullError"),
        ("Data corrupted: checksum mismatch", "StoreError"),
    ],
)
def test_a_keyword_engine_failure_that_passes_is_told_from_damage(message: str, kind: str) -> None:
    """What Tantivy raises in a search, a commit or a count with no file handles left or on a
    full disk is a fault that passes (PassingFaultError: nothing moved aside); anything else is a
    plain StoreError (may be damage). Was: every engine failure a plain StoreError."""
    from sidecar.contracts.errors import PassingFaultError, StoreError
    from sidecar.stores.bm25_folder import engine

    with pytest.raises(StoreError) as err, engine("search"):
        raise ValueError(f"Failed to open file for read: {message}")
    assert type(err.value).__name__ == kind
    assert isinstance(err.value, PassingFaultError) == (kind != "StoreError")


def test_no_file_handles_left_in_a_count_moves_no_agents_index_aside(make_cfg: Any, vault: Path) -> None:
    """The check's count of each agent's index (its meta.json read) with no file handles left
    (EMFILE, at the read): the count fails as a fault that passes and nothing is moved aside; counted
    once handles are free, every index is whole. Was: each agent's index was taken for unreadable
    and moved aside."""
    from sidecar.contracts.errors import PassingFaultError

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, None)
    try:
        bm25 = h.stores.bm25
        for count in (bm25.inbox_counts, bm25.num_docs):
            with (
                pytest.raises(PassingFaultError, match="Too many open files"),
                _no_file_handles_left(cfg.index_dir),
            ):
                count()
        assert bm25.failing == {} and not list(cfg.index_dir.glob("*.broken-*"))
        assert bm25.inbox_counts() == {"alpha": (2, 2), "beta": (1, 1)}
    finally:
        h.close()


def _keyword_search_out_of_handles(h: Harness, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Sweep, then have every keyword search fail for want of file handles (as Tantivy says it)
    until ``monkeypatch.undo()``; returns the keyword index."""
    from sidecar.stores.bm25_folder import engine

    h.sweep()
    bm25 = h.stores.bm25

    def out_of_handles(*args: Any, **kw: Any) -> Any:
        with engine("search"):
            raise ValueError("Failed to open file for read: Too many open files (os error 24)")

    monkeypatch.setattr(bm25, "search", out_of_handles)
    return bm25


def test_a_keyword_search_out_of_file_handles_gets_no_index_rebuilt(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyword search failing for want of file handles (as Tantivy says it): the answer comes
    from vectors, and nothing is reported for the repair, which moves nothing aside. Was:
    reported as a failing keyword index, and the whole index was moved aside and refilled."""
    from sidecar.daemon.repairs import RepairPolicy

    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        bm25 = _keyword_search_out_of_handles(h, monkeypatch)
        assert search(h, "spark plugs")  # from vectors alone
        assert h.problems.active_in("keyword_search") is None
        monkeypatch.undo()
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        assert not list(h.cfg.index_dir.glob("*.broken-*")) and h.stores.bm25 is bm25
    finally:
        h.close()


def test_a_keyword_search_out_of_file_handles_is_said_in_status_until_one_works(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keyword searches failing for want of file handles: status says so in plain words, the
    repair does not act on it (nothing moved aside), and the next keyword search that works
    clears it. Was: keyword search stayed dead with nothing in status or health."""
    import json

    from sidecar.daemon.repairs import RepairPolicy
    from sidecar.index.keyword_faults import NO_HANDLES

    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        bm25 = _keyword_search_out_of_handles(h, monkeypatch)
        assert search(h, "spark plugs")  # from vectors alone
        said = json.dumps(h.problems.describe())
        assert "keyword search fails: no file handles left" in said and "answering by meaning" in said, said
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        assert not list(h.cfg.index_dir.glob("*.broken-*")) and h.stores.bm25 is bm25
        assert h.problems.active_in("keyword_search", subject=NO_HANDLES) is not None
        monkeypatch.undo()
        assert search(h, "spark plugs")
        assert h.problems.active_in("keyword_search", subject=NO_HANDLES) is None
    finally:
        h.close()


@pytest.mark.parametrize("part", ["memory-all", "own"])
def test_a_memory_index_out_of_file_handles_is_said_in_status_and_in_the_answer(
    make_cfg: Any, vault: Path, part: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyword search whose memory index (every agent's and the agents' own read in its place,
    for a person; an agent's own, in its scope) fails for want of file handles: status says so as
    for the vault's index, the answer says that memory's notes may be missing, nothing is
    reported for the repair, and the next search that reads it clears it. Was: logged alone, and
    the answer came back without the memory hits as if complete."""
    import json

    from sidecar.index.keyword_faults import NO_HANDLES
    from sidecar.search.request import SearchRequest
    from sidecar.search.retrieval import Retriever

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        bm25 = h.stores.bm25
        agent = None if part == "memory-all" else "alpha"
        if agent is None:
            monkeypatch.setattr(bm25, "_everyone_hits", _out_of_handles)
        monkeypatch.setattr(bm25, "_inbox_hits", _out_of_handles)  # a person's fallback fails alike
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        answer = r.search(SearchRequest("kayak", 10, 0.0, agent=agent))
        assert answer.degraded is not None and "may be missing" in answer.degraded, answer.degraded
        assert "memory/alpha" in answer.degraded, answer.degraded
        said = json.dumps(h.problems.describe())
        assert "keyword search fails: no file handles left" in said, said
        assert h.problems.active_in("keyword_search") is None  # nothing for the repair
        monkeypatch.undo()
        answer = r.search(SearchRequest("kayak", 10, 0.0, agent=agent))
        assert any(hit.source == "memory" for hit in answer.hits)
        assert h.problems.active_in("keyword_search", subject=NO_HANDLES) is None
    finally:
        h.close()


def _out_of_handles(*args: Any, **kw: Any) -> Any:
    from sidecar.stores.bm25_folder import engine

    with engine("search"):
        raise ValueError("Failed to open file for read: Too many open files (os error 24)")


def test_all_memory_out_of_file_handles_read_from_each_agents_index_is_no_fault(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A person's keyword search whose index of every agent's memory fails for want of file
    handles reads each agent's own index instead: when that works, the answer holds every
    agent's memory and says nothing is missing, and status says no keyword search fails. Only
    agents whose own index was removed as unused are missed, and the answer says how many.
    Was: the answer said all agents' memory may be missing and status that keyword search
    fails, although every agent's own index had answered."""
    import json

    from sidecar.index.keyword_faults import NO_HANDLES
    from sidecar.search.request import SearchRequest
    from sidecar.search.retrieval import Retriever

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        bm25 = h.stores.bm25
        monkeypatch.setattr(bm25, "_everyone_hits", _out_of_handles)
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        answer = r.search(SearchRequest("kayak", 10, 0.0))
        assert {hit.agent for hit in answer.hits if hit.source == "memory"} == {"alpha", "beta"}
        assert answer.degraded is None or "memory" not in answer.degraded, answer.degraded
        assert h.problems.active_in("keyword_search", subject=NO_HANDLES) is None, h.problems.describe()
        # Alpha's own index removed as unused: its memory is missed, and the answer says so.
        monkeypatch.undo()
        _age(h.cfg, "alpha", 40)
        bm25._used_at.clear()
        remove_idle_inboxes(h.stores, 30)
        assert bm25.agents() == ["beta"]
        monkeypatch.setattr(bm25, "_everyone_hits", _out_of_handles)
        answer = r.search(SearchRequest("kayak", 10, 0.0))
        note = answer.degraded
        assert note is not None and "the memory of 1 agent whose" in note, note
        said = json.dumps(h.problems.describe())
        assert "keyword search fails: no file handles left" in said, said
    finally:
        h.close()


def test_a_failed_inbox_repair_is_no_longer_said_once_nothing_fails(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repair of an agent's failing keyword index fails (said in status, keyword_index/repair);
    then a search with that agent's scope reads its index and nothing fails any more: the next
    tick drops the line. Was: it stayed for as long as the daemon ran, no repair being tried
    again to clear it."""
    from sidecar.contracts.errors import StoreError
    from sidecar.daemon.repairs import REPAIR_SUBJECT, RepairPolicy

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, None)
    try:
        bm25 = h.stores.bm25
        bm25.failing["alpha/chunks"] = "damaged (simulated)"
        policy = RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot)
        real = policy.repair.repair_inboxes

        def fails(*_args: Any) -> None:
            raise StoreError("BM25 index cannot be made: Input/output error")

        monkeypatch.setattr(policy.repair, "repair_inboxes", fails)
        policy.tick()
        assert h.problems.active_in("keyword_index", subject=REPAIR_SUBJECT) is not None
        monkeypatch.setattr(policy.repair, "repair_inboxes", real)
        found = {x["reference"] for x in search(h, "kayak", agent="alpha")}
        assert {"memory/trip", "memory/gear"} <= found, found
        assert bm25.failing == {} and h.problems.active_in("keyword_search") is None
        policy.tick()
        assert h.problems.active_in("keyword_index", subject=REPAIR_SUBJECT) is None
    finally:
        h.close()


def test_no_file_handles_is_said_until_the_index_that_failed_is_read_again(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's page index fails for want of file handles while its chunk index answers: status
    says so from the first search on, steadily (not cleared by the chunk search of the next
    request), a search of the vault alone leaves it, and the next search that reads that page
    index clears it. Was: each request's chunk search cleared it and its page search reported it
    again, and any search that worked (one of the vault alone) cleared it."""
    from sidecar.index.keyword_faults import NO_HANDLES
    from sidecar.search.request import SearchRequest
    from sidecar.search.retrieval import Retriever

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        bm25 = h.stores.bm25
        real = bm25._inbox_hits

        def pages_fail(agent: str, *, pages: bool, **kw: Any) -> Any:
            if pages:
                _out_of_handles()
            return real(agent, pages=pages, **kw)

        monkeypatch.setattr(bm25, "_inbox_hits", pages_fail)
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)
        for _ in range(3):
            r.search(SearchRequest("kayak", 10, 0.0, agent="alpha"))
            assert h.problems.active_in("keyword_search", subject=NO_HANDLES) is not None
        said = h.problems.describe()
        assert not [p for p in said["recent"] if p.get("subject") == NO_HANDLES], said
        monkeypatch.undo()
        r.search(SearchRequest("boat", 10, 0.0, sources=("vault",)))
        assert h.problems.active_in("keyword_search", subject=NO_HANDLES) is not None
        r.search(SearchRequest("kayak", 10, 0.0, agent="alpha"))
        assert h.problems.active_in("keyword_search", subject=NO_HANDLES) is None
    finally:
        h.close()


def test_a_memory_writes_duplicate_check_out_of_file_handles_is_said_in_status(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory write's duplicate check whose keyword search of the agent's own index fails for
    want of file handles: the write is saved, and status says no file handles left as for a
    search (cleared by the next one that reads that index). Was: only logged."""
    from sidecar.contracts.protocol import Request
    from sidecar.index.keyword_faults import NO_HANDLES
    from sidecar.memory.inbox import Inboxes
    from sidecar.memory.ops import MemoryOps

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        ops = MemoryOps(cfg, Inboxes(cfg), h.indexer, h.slot, stores=h.stores, problems=h.problems)
        monkeypatch.setattr(h.stores.bm25, "_inbox_hits", _out_of_handles)
        params = {"slug": "canoe", "content": "# Canoe\n\nThe canoe of alpha waits at the lake.\n"}
        ops.write(Request(op="write", params=params, agent="alpha"))
        assert (cfg.agents_dir / "alpha/memory/canoe.md").is_file()
        assert h.problems.active_in("keyword_search", subject=NO_HANDLES) is not None
        monkeypatch.undo()
        search(h, "kayak", agent="alpha")
        assert h.problems.active_in("keyword_search", subject=NO_HANDLES) is None
    finally:
        h.close()


def test_a_memory_write_during_a_refill_of_its_agents_index_ends_in_the_new_index(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory write of an agent that comes while the agent's own index is replaced (refilled
    from the manifest: the old one removed, the new one not filled yet): the refill holds the
    stores' write lock from its read of the manifest to its commit, so the write waits for it and
    ends in the new index, beside the agent's other notes (it neither lands in the old index,
    dropped by the swap, nor is missed by the refill's read). A hook inside the swap, no sleeps."""
    import threading

    from sidecar.contracts.protocol import Request
    from sidecar.index.repair import refill_inbox
    from sidecar.memory.inbox import Inboxes
    from sidecar.memory.ops import MemoryOps

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        bm25 = h.stores.bm25
        ops = MemoryOps(cfg, Inboxes(cfg), h.indexer, h.slot, stores=h.stores, problems=h.problems)
        params = {"slug": "canoe", "content": "# Canoe\n\nThe canoe of alpha waits at the pond.\n"}
        writer = threading.Thread(target=ops.write, args=(Request(op="write", params=params, agent="alpha"),))
        lock_free: list[bool] = []
        real = bm25._add

        def in_the_swap(notes: Any, **kw: Any) -> Any:
            if not writer.is_alive() and not lock_free:
                writer.start()

                def probe() -> None:
                    took = h.stores.write_lock.acquire(blocking=False)
                    if took:
                        h.stores.write_lock.release()
                    lock_free.append(took)

                other = threading.Thread(target=probe)
                other.start()
                other.join()
            return real(notes, **kw)

        monkeypatch.setattr(bm25, "_add", in_the_swap)
        refill_inbox(h.stores, "alpha")
        writer.join()
        monkeypatch.undo()
        assert lock_free == [False]
        assert "alpha" in bm25.agents()
        assert _keys(h, "canoe kayak paddle", "alpha") == {
            "memory/alpha/canoe",
            "memory/alpha/trip",
            "memory/alpha/gear",
        }
    finally:
        h.close()
