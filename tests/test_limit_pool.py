"""The answer for a limit is the first hits of a larger limit's answer: the candidate pool, and
everything computed over it, never depends on the limit (real stores, a fake embedder)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sidecar.config import RecallConfig
from sidecar.search.fusion import Candidate, Scored
from sidecar.search.looks import after_pool
from sidecar.search.recall import recall
from sidecar.search.request import SearchRequest
from sidecar.search.retrieval import Retriever
from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import search


def _recall(r: Retriever, message: str, req: Any) -> Any:
    """A recall of ``message`` (no conversation before it), its tokens counted as words."""
    return recall(r, message, [], req, lambda texts: [len(t.split()) for t in texts])


# Words the notes are made of: a few a query asks for, many that only fill.
_ASKED = ["alpha", "beta", "gamma", "delta", "epsilon"]
_FILLER = [f"w{i}" for i in range(40)]
QUERIES = ["alpha beta gamma", "beta delta", "gamma epsilon alpha", "delta alpha"]


def _corpus(vault: Path, notes: int = 60) -> None:
    """Notes of one or two sections mixing asked words and filler in varied measure, so that the
    two arms rank them differently and many candidates of one arm lie past a small pool of the
    other."""
    rng = random.Random(7)
    for n in range(notes):
        sections = []
        for s in range(1 + n % 2):
            words = rng.sample(_ASKED, rng.randint(1, 3)) + rng.choices(_FILLER, k=rng.randint(2, 30))
            rng.shuffle(words)
            sections.append(f"## Part {s}\n\n" + " ".join(words) + "\n")
        write(vault / f"Note {n:02d}.md", f"# Note {n:02d}\n\n" + "\n".join(sections))


def _answer(h: Harness, query: str, limit: int) -> list[tuple[Any, ...]]:
    return [
        (x["reference"], tuple(x["lines"]), x["score"], x["relevance"])
        for x in search(h, query, limit=limit, min_score=0.0)
    ]


@pytest.fixture
def pooled(make_cfg: Any, tmp_path: Path) -> Any:
    def make(**flags: Any) -> Harness:
        vault = tmp_path / "v"
        if not vault.exists():
            _corpus(vault)
        h = Harness(make_cfg(vault, **{"search.candidates": 10, **flags}), FakeEmbedder())
        h.sweep()
        return h

    return make


def test_a_smaller_limit_answers_the_first_hits_of_a_larger_one(pooled: Any) -> None:
    """Limit 3's answer is the first three hits of limit 20's (and limit 10's the first ten), the
    same chunks in the same order with the same scores, also where limit 20 needs more hits than
    the pool of ``search.candidates`` holds."""
    h = pooled()
    try:
        for query in QUERIES:
            three, ten, twenty = (_answer(h, query, k) for k in (3, 10, 20))
            assert len(twenty) == 20, query
            assert three == twenty[:3], query
            assert ten == twenty[:10], query
    finally:
        h.close()


def test_recall_at_a_smaller_limit_recalls_the_first_notes_of_a_larger_one(
    make_cfg: Any, tmp_path: Path
) -> None:
    """recall ranks its own fixed pool (``recall.candidates``) whatever the limit: limit 3's hits
    are the first three of limit 20's."""
    vault = tmp_path / "v"
    _corpus(vault)
    flags = {"recall.candidates": 10, "recall.minSimilarity": 0.0, "recall.scoreFloor": 0.0}
    h = Harness(make_cfg(vault, **flags), FakeEmbedder())
    try:
        h.sweep()
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall)

        def hits(message: str, limit: int) -> list[tuple[Any, ...]]:
            req = SearchRequest("", limit, 0.0, token_budget=50_000)
            found = _recall(r, message, req)
            return [(x.reference, x.lines, x.score) for x in found.hits]

        for message in QUERIES:
            assert hits(message, 3) == hits(message, 20)[:3], message
    finally:
        h.close()


def _hit(cid: str, key: str, score: float, folded: tuple[str, ...] = ()) -> Scored:
    return Scored(Candidate(cid, key, "vault", 1, 2), score, 0.0, 0.0, folded=folded)


def test_a_wider_looks_hits_follow_the_hits_shown() -> None:
    """Hits of a wider look come after the hits shown so far, whatever their score; none holding
    a chunk shown (as a hit or folded into one) comes again, and the per-note cap counts both. A
    chunk the narrower pool ranked below minScore is not shown, so it may come: skipped, it was
    shown at no limit."""
    shown = [_hit("a1", "A", 0.5), _hit("b1", "B", 0.4, folded=("b2",))]
    wider = [
        _hit("x1", "X", 0.9),  # better than the hits shown: still after them
        _hit("b2", "B", 0.8),  # folded into a hit shown
        _hit("z1", "Z", 0.7, folded=("a1",)),  # holds a hit shown
        _hit("c1", "C", 0.6),  # below minScore in the narrower pool: never shown there
        _hit("a2", "A", 0.3),  # A's second hit
        _hit("a3", "A", 0.2),  # A's third: past the cap of two
        _hit("y1", "Y", 0.1),
    ]
    out = after_pool(shown, wider, cap=2)
    assert [s.candidate.chunk_id for s in out] == ["a1", "b1", "x1", "c1", "a2", "y1"]


class _Looks(Retriever):
    """The retriever, noting the pool of every look its arms take."""

    pools: list[int | None]

    def arms(self, req: SearchRequest, *args: Any, **kwargs: Any) -> Any:
        self.pools.append(req.pool)
        return super().arms(req, *args, **kwargs)


def _looks(h: Harness) -> _Looks:
    r = _Looks(h.stores, h.slot, h.cfg.search, h.cfg.recall)
    r.pools = []
    return r


@pytest.fixture
def wide(make_cfg: Any, tmp_path: Path) -> Any:
    vault = tmp_path / "v"
    _corpus(vault, notes=250)  # more chunks than a look of 200 candidates an arm holds
    h = Harness(make_cfg(vault, **{"search.candidates": 10}), FakeEmbedder())
    h.sweep()
    yield h
    h.close()


def test_a_limit_takes_the_wider_looks_it_needs_in_turn(wide: Harness) -> None:
    """A limit the pool cannot fill takes the look of 200 candidates an arm first, and that of 600
    only when 200 still hold too few hits: a limit of 20 does not pay for 600. The answer is the
    same at every limit, cut (limit 20's is limit 200's first 20)."""
    r = _looks(wide)
    query = "alpha beta gamma"
    twenty = r.search(SearchRequest(query, 20, 0.3)).hits
    assert len(twenty) == 20
    assert r.pools == [None, 200]
    r.pools = []
    everything = r.search(SearchRequest(query, 200, 0.3)).hits
    assert r.pools == [None, 200, 600]
    assert everything[:20] == twenty


def test_a_wider_look_searches_with_the_query_vector_of_the_first(wide: Harness, monkeypatch: Any) -> None:
    """With the query cache off, a search that takes wider looks embeds its query once: the
    looks of 200 and 600 search with the first look's vector (each embedded it again); ``why``
    ranks its looks the same way, and scores the note's chunks with that vector too."""
    from dataclasses import replace

    from sidecar.search.explain import explain

    r = _looks(wide)
    r.cfg = replace(r.cfg, query_cache=0, min_score=0.5)
    model = wide.slot.model
    embedded: list[str] = []
    embed = model.embed_query

    def counted(text: str) -> Any:
        embedded.append(text)
        return embed(text)

    monkeypatch.setattr(model, "embed_query", counted)
    query = "alpha beta gamma"
    hits = r.search(SearchRequest(query, 200, 0.3)).hits
    assert r.pools == [None, 200, 600] and any(h.look == 600 for h in hits)
    assert embedded == [query]
    embedded.clear()
    r.pools = []
    wider = next(h for h in r.search(SearchRequest(query, r.cfg.limit, 0.5)).hits if h.look)
    embedded.clear()
    r.pools = []
    explain(r, wider.reference, query, None)
    assert r.pools == [None, 200]
    assert embedded == [query]  # the arms' once: the note's own cosines are taken with its vector


def test_no_hit_of_a_wider_look_is_hidden_at_every_limit(wide: Harness) -> None:
    """A chunk the pool ranked below minScore but the widest look ranks above it is shown at
    the largest limit (after the hits before it): a wider look skips only what is shown."""
    r = Retriever(wide.stores, wide.slot, wide.cfg.search, wide.cfg.recall)
    floor = 0.5
    missed = 0
    for query in QUERIES:
        pool = [h for h in r.search(SearchRequest(query, 200, 0.0, pool=10)).hits if not h.look]
        below = {(h.reference, h.lines) for h in pool if h.relevance < floor}
        widest = r.search(SearchRequest(query, 200, floor, pool=600)).hits
        found = {(h.reference, h.lines) for h in widest} & below
        answer = {(h.reference, h.lines) for h in r.search(SearchRequest(query, 200, floor)).hits}
        assert found, query  # the scene holds such chunks
        missed += len(found - answer)
    assert missed == 0


def test_why_names_the_wider_look_that_found_a_hit(wide: Harness) -> None:
    """`why` ranks as the search at the default limit does: a hit a wider look found (the pool
    held too few hits above minScore) is "hit #N, from a wider look", where it said "below
    minScore" or "not among the candidates" of a note the search returned."""
    from dataclasses import replace

    from sidecar.search.explain import explain

    r = Retriever(wide.stores, wide.slot, replace(wide.cfg.search, min_score=0.5), wide.cfg.recall)
    checked = 0
    for query in QUERIES:
        hits = r.search(SearchRequest(query, r.cfg.limit, r.cfg.min_score)).hits
        for place, hit in enumerate(hits, 1):
            outcomes = {c.lines: c.outcome for c in explain(r, hit.reference, query, None).chunks}
            if hit.look:
                said = f"hit #{place}, from a wider look ({hit.look} candidates an arm)"
                assert outcomes[hit.lines] == said
                checked += 1
            else:
                assert outcomes[hit.lines] == f"hit #{place}"
    assert checked  # the scene holds such hits


def test_recall_ranks_the_pool_recall_candidates_sets(make_cfg: Any, tmp_path: Path) -> None:
    """recall's arms fetch ``recall.candidates`` an arm, not ``search.candidates`` (the help sets'
    follow-ups were measured with recall's own 60), and a limit that pool fills takes no wider
    look; nor does one whose hits the gates ended before the pool did (recall runs on every
    message: small talk, nothing passing, would pay for the looks of 200 and 600 each time)."""
    vault = tmp_path / "v"
    _corpus(vault)
    flags = {"recall.candidates": 12, "search.candidates": 30, "recall.minSimilarity": 0.0}
    h = Harness(make_cfg(vault, **flags), FakeEmbedder())
    try:
        h.sweep()
        r = _looks(h)
        req = SearchRequest("", 3, 0.0, token_budget=50_000)
        _recall(r, "alpha beta gamma", req)
        assert r.pools == [12]
        gated = _Looks(h.stores, h.slot, h.cfg.search, replace(RecallConfig(), candidates=12))  # its gates
        gated.pools = []
        for message in ("what is the weather like on mars", "schreib mir ein gedicht"):
            gated.pools = []
            found = _recall(gated, message, replace(req, limit=20))
            assert len(found.hits) < 20 and gated.pools == [12], message
    finally:
        h.close()


def test_recall_takes_the_wider_looks_a_large_limit_needs(make_cfg: Any, tmp_path: Path) -> None:
    """A recall limit its pool cannot fill takes wider looks as a search does (a limit of 30 got
    at most the notes of ``recall.candidates`` an arm, here 10): their hits that pass the gates
    follow, marked with their look, and the answer for a smaller limit is still the first hits
    of the larger one's."""
    vault = tmp_path / "v"
    _corpus(vault)
    flags = {"recall.candidates": 10, "recall.minSimilarity": 0.0, "recall.scoreFloor": 0.0}
    h = Harness(make_cfg(vault, **flags), FakeEmbedder())
    try:
        h.sweep()
        r = _looks(h)

        def hits(message: str, limit: int) -> list[Any]:
            req = SearchRequest("", limit, 0.0, token_budget=500_000)
            return list(_recall(r, message, req).hits)

        for message in QUERIES:
            r.pools = []
            thirty = hits(message, 30)
            assert len(thirty) == 30, message
            assert r.pools == [10, 200], message
            assert not thirty[0].look and thirty[-1].look == 200, message
            for k in (3, 12):
                assert hits(message, k) == thirty[:k], message
    finally:
        h.close()


def test_a_recall_whose_keyword_arm_found_a_few_notes_takes_no_wider_look(
    make_cfg: Any, tmp_path: Path
) -> None:
    """A specific message whose words few notes hold: the keyword arm returns all it can find,
    fewer than it asked, and its last note passing the gates says nothing of a wider look (the
    vector arm's tail is gated out). Counting that short arm made recall take the looks of 200
    and 600 an arm for no hit, on every such prompt."""
    vault = tmp_path / "v"
    _corpus(vault, notes=400)
    write(vault / "Ticket.md", "# Ticket INC4711\n\nThe printer INC4711 in room 3 jams again.\n")
    write(vault / "Ticket2.md", "# Follow-up\n\nINC4711 closed after the drum was replaced.\n")
    h = Harness(make_cfg(vault, **{"recall.minSimilarity": 0.95}), FakeEmbedder())
    try:
        h.sweep()
        r = _looks(h)
        for message in ("the printer jams again in room 3", "printer jams"):
            r.pools = []
            req = SearchRequest("", 5, 0.0)
            _recall(r, message, req)
            assert r.pools == [60], message
    finally:
        h.close()


def test_the_mcp_tool_says_where_a_wider_looks_hits_begin(serve_in_process: Any, tmp_path: Path) -> None:
    """memory_search through the MCP SDK's own client: the text marks the first hit of each wider
    look (its relevance is of another ranking, and may be higher than the hit above), as the
    command line does, and the structured hits carry ``widerLook`` (the text said nothing, and
    the structured content dropped the key)."""
    import asyncio
    import os
    import sys

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    vault = tmp_path / "v"
    _corpus(vault)
    server = serve_in_process(vault, **{"search.candidates": 10})
    cfg = server.cfg
    conf = tmp_path / "conf" / "sidecar.yaml"
    write(conf, f"home: {cfg.home}\nsocket: {cfg.socket_path}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "sidecar", "mcp", "--agent", "claude", "--config", str(conf)],
        env=env,
    )

    async def steps() -> Any:
        async with Client(params) as client:
            return await client.call_tool(
                "memory_search", {"query": "alpha beta gamma", "limit": 30, "minScore": 0.3}
            )

    result = asyncio.run(steps())
    assert not result.is_error
    looks = [h.get("widerLook", 0) for h in result.structured_content["hits"]]
    first = looks.index(200)  # the scene holds hits of the look of 200
    assert all(look == 0 for look in looks[:first]) and first > 0
    text = "\n".join(c.text for c in result.content if getattr(c, "text", None))
    marked = [line for line in text.splitlines() if "from a wider look" in line]
    assert len(marked) == len(set(looks) - {0})
    assert marked[0].startswith(f"{first + 1}. [") and "(200 candidates an arm)" in marked[0]
