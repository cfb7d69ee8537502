"""Hits are listed by their ranking score (relevance with boosts), and relevance is shown: a hit
listed above one of higher relevance says why, in the CLI and in memory_search, and the tool's
description says what orders the hits and what relevance means."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _hit(reference: str, relevance: float, score: float, boosts: dict[str, float]) -> Any:
    from sidecar.contracts.wire import Hit

    return Hit(
        reference=reference,
        source="vault",
        score=score,
        relevance=relevance,
        vec_score=None,
        bm25_score=1.0,
        boosts=boosts,
        title=reference,
        headings=(),
        lines=(1, 3),
        text="text",
    )


# As seen for "Wie richte ich Obsidian Sync ein?": a rare word's boost lifts a 0.63 above 0.74.
_HITS = [
    ("vault/Tarife", 0.63, 0.95, {"rareTerm": 1.5, "rank": 0.02}),
    ("vault/Einführung", 0.74, 0.80, {"rank": 0.03}),
    ("vault/Einrichten", 0.73, 0.79, {}),
    ("vault/Other", 0.40, 0.50, {"source": 1.1}),
]


def test_a_hit_listed_above_one_of_higher_relevance_says_why() -> None:
    """Only hits above a later one of higher relevance carry a reason, naming their boosts in
    words. Was: 0.63 listed above 0.74 with no word of why (an agent read the order as wrong)."""
    from sidecar.contracts.notices import ranked_up

    said = ranked_up([_hit(*h) for h in _HITS])
    assert said == [
        "ranked above hits of higher relevance: it holds a rare word of the query",
        None,
        None,
        None,
    ]
    lifted_by_rank = ranked_up([_hit("a", 0.5, 0.9, {"rank": 0.04}), _hit("b", 0.6, 0.8, {})])
    assert (
        lifted_by_rank[0]
        == "ranked above hits of higher relevance: its place in the keyword and meaning results"
    )


def test_memory_search_says_what_orders_its_hits(tmp_path: Path) -> None:
    """The tool's description says hits come by their ranking score, relevance being the match
    without boosts; a hit ranked above one of higher relevance says why in the text and in its
    structured content (``rankedUp``)."""
    from sidecar.clients.mcp_calls import ToolCalls
    from sidecar.clients.mcp_tools import TOOLS
    from sidecar.contracts.wire_json import hit_json

    described = next(t for t in TOOLS if t["name"] == "memory_search")["description"]
    assert "listed best first by their ranking score" in described and "without boosts" in described
    calls = ToolCalls(tmp_path / "no.sock", "claude")
    answer = {"hits": [hit_json(_hit(*h)) for h in _HITS]}
    calls.call = lambda op, params, **_: answer  # type: ignore[method-assign]
    text, out = calls.search({"query": "Wie richte ich Obsidian Sync ein?"})
    assert "relevance 0.63; ranked above hits of higher relevance: it holds a rare word of the query" in text
    assert out["hits"][0]["rankedUp"].startswith("ranked above hits of higher relevance")
    assert all("rankedUp" not in h for h in out["hits"][1:])


def test_sidecar_search_says_why_a_hit_is_listed_above_one_of_higher_relevance(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """`sidecar search` lists relevance and score; the hit a boost lifted above one of higher
    relevance says why on its line."""
    from sidecar.clients import cli_query
    from sidecar.clients.cli_parser import build_parser
    from sidecar.config import load_config
    from sidecar.contracts.wire_json import hit_json

    answer = {"hits": [hit_json(_hit(*h)) for h in _HITS]}
    monkeypatch.setattr(cli_query, "_call", lambda *_a, **_k: answer)
    args = build_parser().parse_args(["search", "Wie richte ich Obsidian Sync ein?"])
    cfg = load_config(flags={"home": str(tmp_path / "home")}, env={})
    assert cli_query.cmd_search(args, cfg) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "relevance" in line]
    assert "ranked above hits of higher relevance: it holds a rare word of the query" in lines[0]
    assert not any("ranked above" in line for line in lines[1:])


def test_a_hit_ranked_up_names_only_what_can_have_lifted_it() -> None:
    """A boost is named only when it closes the gap by itself; a demotion of the hit below is
    named; the source's weight names the source. Was: "its source" for memory's 1.05 on a 0.40
    above a 0.74 log page (the log page's demotion did it), and for any boost the hit held."""
    import dataclasses

    from sidecar.contracts.notices import ranked_up

    demoted = [_hit("wiki/a", 0.40, 0.50, {"source": 1.1}), _hit("wiki/logs/b", 0.74, 0.45, {"log": 0.6})]
    assert ranked_up(demoted)[0] == (
        "ranked above hits of higher relevance: the hit below is a log or journal page, demoted"
    )
    too_small = [_hit("memory/claude/a", 0.63, 0.9, {"source": 1.05}), _hit("vault/b", 0.74, 0.8, {})]
    assert ranked_up(too_small)[0] == (
        "ranked above hits of higher relevance: its place in the keyword and meaning results"
    )
    memory = dataclasses.replace(_hit("memory/claude/a", 0.70, 0.9, {"source": 1.1}), source="memory")
    assert ranked_up([memory, _hit("vault/b", 0.74, 0.8, {})])[0] == (
        "ranked above hits of higher relevance: memory notes weighted 1.1"
    )


def test_a_hit_ranked_up_names_boosts_that_lift_it_together_and_a_source_demotion_below() -> None:
    """Where the cause is known the general words are not given: two boosts that close the gap
    only together are named ("…, together"), and the hit below weighted down by its source's
    weight under 1 is said so. Was: "its place in the keyword and meaning results" for both."""
    import dataclasses

    from sidecar.contracts.notices import ranked_up

    together = [_hit("vault/a", 0.50, 0.9, {"rareTerm": 1.15, "slug": 1.15}), _hit("vault/b", 0.62, 0.8, {})]
    assert ranked_up(together)[0] == (
        "ranked above hits of higher relevance: it holds a rare word of the query and words of its "
        "name are in the query, together"
    )
    weighted = dataclasses.replace(_hit("wiki/b", 0.74, 0.5, {"source": 0.8}), source="wiki")
    assert ranked_up([_hit("vault/a", 0.70, 0.6, {}), weighted])[0] == (
        "ranked above hits of higher relevance: the hit below is of wiki notes, weighted 0.8"
    )


def test_a_hit_ranked_up_by_its_rank_or_by_most_of_the_gap_says_so() -> None:
    """The "rank" boost's words were the general words themselves ("its place in the keyword and
    meaning results"): a hit lifted by it and one lifted by nothing known read alike. And a boost
    closing most of the gap, the rest the ranking score's own scale, was not named."""
    from sidecar.contracts.notices import ranked_up

    by_rank = ranked_up([_hit("a", 0.5, 0.9, {"rank": 0.12}), _hit("b", 0.6, 0.8, {})])
    assert (
        by_rank[0]
        == "ranked above hits of higher relevance: it is among the first of the keyword or meaning results"
    )
    most = ranked_up([_hit("vault/a", 0.50, 0.9, {"rareTerm": 1.15}), _hit("vault/b", 0.62, 0.8, {})])
    assert most[0] == (
        "ranked above hits of higher relevance: it holds a rare word of the query, most of the gap "
        "(the rest: its place in the keyword and meaning results)"
    )


def test_hits_of_a_wider_look_are_not_said_to_be_ranked_below_by_the_boosts(
    tmp_path: Path, monkeypatch: Any, capsys: Any
) -> None:
    """A wider look's hits follow the pool's own on their own scale (``Hit.look``): a 0.11 of the
    pool above a 0.27 of the wider look was explained with "its place in the keyword and meaning
    results". Only hits of one look are compared; the CLI says where the wider look's hits begin,
    and the look survives the JSON of the socket."""
    import dataclasses

    from sidecar.clients import cli_query
    from sidecar.clients.cli_parser import build_parser
    from sidecar.config import load_config
    from sidecar.contracts.notices import ranked_up
    from sidecar.contracts.wire_json import hit_json, parse_search

    pool = [_hit("vault/a", 0.12, 0.2, {}), _hit("vault/b", 0.11, 0.108, {})]
    wider = [dataclasses.replace(_hit(f"vault/w{i}", r, r, {}), look=200) for i, r in enumerate((0.27, 0.25))]
    assert ranked_up([*pool, *wider]) == [None, None, None, None]
    # Within one look the reason is still given, against that look's hits alone.
    lifted = [_hit("vault/a", 0.5, 0.9, {"rank": 0.12}), _hit("vault/b", 0.6, 0.8, {}), *wider]
    assert ranked_up(lifted)[0] is not None
    answer = {"hits": [hit_json(h) for h in [*pool, *wider]]}
    assert [h.look for h in parse_search(answer).hits] == [0, 0, 200, 200]
    monkeypatch.setattr(cli_query, "_call", lambda *_a, **_k: answer)
    args = build_parser().parse_args(["search", "Skript pausieren"])
    cfg = load_config(flags={"home": str(tmp_path / "home")}, env={})
    assert cli_query.cmd_search(args, cfg) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "relevance" in line]
    assert not any("ranked above" in line for line in lines)
    marked = ["from a wider look (200 candidates an arm)" in line for line in lines]
    assert marked == [False, False, True, False]
