"""The typed results of ``sidecar.contracts.wire`` as JSON and back: the daemon builds the replies
of ``search``, ``recall`` and ``why`` with the functions here, the CLI and the MCP shim parse the
same replies back into the same types (docs/protocol.md). Standard library and ``contracts``
only: a thin client imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sidecar.contracts.wire import (
    Analysis,
    AnalysisFilters,
    ChunkExplanation,
    Explanation,
    Hit,
    SearchResult,
    Window,
)


def window_of(analysis: Analysis) -> Window | None:
    if analysis.time_phrase_ignored:
        return Window(
            analysis.time_phrase_ignored,
            applied=False,
            since=analysis.time_phrase_since,
            until=analysis.time_phrase_until,
            why=analysis.time_phrase_why,
        )
    f = analysis.filters
    if f.time_phrase:
        return Window(f.time_phrase, applied=True, since=f.since, until=f.until, given=f.window_given)
    return None


# --- to JSON (the daemon) -----------------------------------------------------------------------


def hit_json(h: Hit) -> dict[str, Any]:
    out: dict[str, Any] = {
        "reference": h.reference,
        "source": h.source,
        "score": h.score,
        "relevance": h.relevance,
        "vecScore": h.vec_score,
        "bm25Score": h.bm25_score,
        "boosts": dict(h.boosts),
        "title": h.title,
        "headings": list(h.headings),
        "lines": list(h.lines),
        "text": h.text,
    }
    if h.masked:
        out["masked"] = dict(h.masked)
    if h.agent:
        out["agent"] = h.agent
    if h.page_bm25_score is not None:
        out["pageBm25Score"] = h.page_bm25_score
    if h.date is not None:
        out["date"] = h.date
        out["datedBy"] = h.dated_by
    if h.modified_ahead is not None:
        out["modifiedAhead"] = h.modified_ahead
    if h.similarity is not None:
        out["similarity"] = h.similarity
    if h.keywords is not None:
        out["keywords"] = h.keywords
    if h.gate is not None:
        out["gate"] = h.gate
    if h.deletion_held:
        out["deletionHeld"] = True
    if h.look:
        out["widerLook"] = h.look
    return out


def analysis_json(a: Analysis) -> dict[str, Any]:
    f = a.filters
    out: dict[str, Any] = {
        "text": a.text,
        "contentWords": list(a.content_words),
        "rareWords": list(a.rare_words),
        "wordClass": a.word_class,
        "chronicle": a.chronicle,
        "language": a.language,
        "filters": {
            "tags": list(f.tags),
            "pathPrefix": f.path_prefix,
            "since": f.since,
            "until": f.until,
            "timePhrase": f.time_phrase,
        },
    }
    if f.window_given:
        out["filters"]["windowGiven"] = True
    if f.no_value:
        out["filters"]["noValue"] = list(f.no_value)
    if a.history_turns is not None:
        out["historyTurns"] = a.history_turns
    if a.history_share is not None:
        out["historyShare"] = a.history_share
    if a.refers_back is not None:
        out["refersBack"] = a.refers_back
    if a.time_phrase_ignored:
        out["timePhraseIgnored"] = a.time_phrase_ignored
        for key, value in (
            ("timePhraseWhy", a.time_phrase_why),
            ("timePhraseSince", a.time_phrase_since),
            ("timePhraseUntil", a.time_phrase_until),
        ):
            if value:
                out[key] = value
    return out


def window_json(w: Window) -> dict[str, Any]:
    if not w.applied:
        ignored: dict[str, Any] = {"phrase": w.phrase, "applied": False}
        ignored.update({k: v for k, v in (("why", w.why), ("since", w.since), ("until", w.until)) if v})
        return ignored
    out: dict[str, Any] = {"phrase": w.phrase, "since": w.since, "until": w.until, "applied": True}
    if w.listed:
        out["listed"] = w.listed
    if w.given:
        out["given"] = True
    return out


def state_json(result: SearchResult) -> dict[str, Any]:
    """What an answer says of the index it came from (degraded, vectors or notes still coming,
    a stale share, a catch-up), as the socket and the MCP shim both put it: one place, so a
    mark added for one is not missing from the other."""
    out: dict[str, Any] = {}
    if result.degraded:
        out["degraded"] = result.degraded
    if result.pending_vectors:
        out["pendingVectors"] = result.pending_vectors
    if result.pending_continuous:
        out["pendingContinuous"] = result.pending_continuous
    if result.left_to_switch:
        out["leftToSwitch"] = result.left_to_switch
    if result.indexing is not None:
        out["indexing"] = {"done": result.indexing[0], "total": result.indexing[1]}
    if result.stale_since is not None:
        out["staleSince"] = result.stale_since
    if result.catching_up is not None:
        done, total, recut = result.catching_up
        out["catchingUp"] = {"done": done, "total": total, **({"recut": recut} if recut else {})}
    return out


def search_json(result: SearchResult, *, preview: bool) -> dict[str, Any]:
    """The reply of ``search`` (and of ``recall``, with its ``context``)."""
    out: dict[str, Any] = {"hits": [hit_json(h) for h in result.hits]}
    if result.context is not None:
        out["context"] = result.context
    out.update(state_json(result))
    if result.listed is not None:
        out["listed"] = result.listed
    window = result.window or (window_of(result.analysis) if result.analysis else None)
    if window is not None:
        out["window"] = window_json(window)
    if preview and result.analysis is not None:
        out["analysis"] = analysis_json(result.analysis)
    if preview and result.gates is not None:
        out["gates"] = dict(result.gates)
        out["dropped"] = [hit_json(h) for h in result.dropped]
    return out


def explanation_json(e: Explanation) -> dict[str, Any]:
    """The reply of ``why``."""
    if not e.indexed:
        out: dict[str, Any] = {"indexed": False, "analysis": analysis_json(e.analysis)}
        if e.exists is not None:
            out["exists"] = e.exists
        if e.reason is not None:
            out["reason"] = e.reason
        if e.excluded is not None:
            out["excluded"] = e.excluded
        return out
    chunks = [
        {
            "lines": list(c.lines),
            "vecScore": c.vec_score,
            "bm25Score": c.bm25_score,
            "score": c.score,
            "relevance": c.relevance,
            "boosts": dict(c.boosts),
            "outcome": c.outcome,
        }
        for c in e.chunks
    ]
    return {
        "indexed": True,
        "reference": e.reference,
        "chunks": chunks,
        "vectorWeight": e.vector_weight,
        "pageBm25Score": e.page_bm25_score,
        "degraded": e.degraded,
        "analysis": analysis_json(e.analysis),
    }


# --- from JSON (the clients) --------------------------------------------------------------------


def _lines(value: Any) -> tuple[int, int]:
    return int(value[0]), int(value[1])


def parse_hit(d: Mapping[str, Any]) -> Hit:
    return Hit(
        reference=d["reference"],
        source=d["source"],
        score=d["score"],
        relevance=d["relevance"],
        vec_score=d.get("vecScore"),
        bm25_score=d.get("bm25Score"),
        boosts=dict(d.get("boosts") or {}),
        title=d.get("title", ""),
        headings=tuple(d.get("headings") or ()),
        lines=_lines(d["lines"]),
        text=d["text"],
        masked=dict(d.get("masked") or {}),
        agent=d.get("agent"),
        page_bm25_score=d.get("pageBm25Score"),
        date=d.get("date"),
        dated_by=d.get("datedBy"),
        modified_ahead=d.get("modifiedAhead"),
        similarity=d.get("similarity"),
        keywords=d.get("keywords"),
        gate=d.get("gate"),
        deletion_held=bool(d.get("deletionHeld")),
        look=int(d.get("widerLook") or 0),
    )


def parse_analysis(d: Mapping[str, Any]) -> Analysis:
    f = d.get("filters") or {}
    return Analysis(
        text=d["text"],
        content_words=tuple(d.get("contentWords") or ()),
        rare_words=tuple(d.get("rareWords") or ()),
        word_class=d.get("wordClass", 0),
        chronicle=bool(d.get("chronicle")),
        language=d.get("language"),
        filters=AnalysisFilters(
            tags=tuple(f.get("tags") or ()),
            path_prefix=f.get("pathPrefix"),
            since=f.get("since"),
            until=f.get("until"),
            time_phrase=f.get("timePhrase"),
            window_given=bool(f.get("windowGiven")),
            no_value=tuple(f.get("noValue") or ()),
        ),
        history_turns=d.get("historyTurns"),
        history_share=d.get("historyShare"),
        refers_back=d.get("refersBack"),
        time_phrase_ignored=d.get("timePhraseIgnored"),
        time_phrase_why=d.get("timePhraseWhy"),
        time_phrase_since=d.get("timePhraseSince"),
        time_phrase_until=d.get("timePhraseUntil"),
    )


def parse_window(w: Mapping[str, Any]) -> Window:
    return Window(
        w["phrase"],
        bool(w["applied"]),
        w.get("since"),
        w.get("until"),
        int(w.get("listed") or 0),
        w.get("why"),
        bool(w.get("given")),
    )


def parse_search(d: Mapping[str, Any]) -> SearchResult:
    w = d.get("window")
    window = parse_window(w) if w else None
    analysis = d.get("analysis")
    return SearchResult(
        hits=tuple(parse_hit(h) for h in d["hits"]),  # no hits key: not a search's answer
        degraded=d.get("degraded"),
        analysis=parse_analysis(analysis) if analysis else None,
        context=d.get("context"),
        window=window,
        pending_vectors=int(d.get("pendingVectors") or 0),
        pending_continuous=int(d.get("pendingContinuous") or 0),
        left_to_switch=int(d.get("leftToSwitch") or 0),
        indexing=(int(d["indexing"]["done"]), int(d["indexing"]["total"])) if d.get("indexing") else None,
        listed=int(d["listed"]) if d.get("listed") is not None else None,
        stale_since=float(d["staleSince"]) if d.get("staleSince") is not None else None,
        catching_up=(
            (
                int(d["catchingUp"]["done"]),
                int(d["catchingUp"]["total"]),
                int(d["catchingUp"].get("recut", 0)),
            )
            if d.get("catchingUp")
            else None
        ),
        dropped=tuple(parse_hit(h) for h in d.get("dropped") or ()),
        gates=dict(d["gates"]) if d.get("gates") else None,
    )


def parse_explanation(d: Mapping[str, Any]) -> Explanation:
    chunks = tuple(
        ChunkExplanation(
            lines=_lines(c["lines"]),
            vec_score=c.get("vecScore"),
            bm25_score=c.get("bm25Score"),
            score=c.get("score"),
            relevance=c.get("relevance"),
            boosts=dict(c.get("boosts") or {}),
            outcome=c["outcome"],
        )
        for c in d.get("chunks", [])
    )
    return Explanation(
        indexed=bool(d["indexed"]),
        analysis=parse_analysis(d["analysis"]),
        reference=d.get("reference"),
        chunks=chunks,
        vector_weight=d.get("vectorWeight"),
        degraded=d.get("degraded"),
        page_bm25_score=d.get("pageBm25Score"),
        exists=d.get("exists"),
        reason=d.get("reason"),
        excluded=d.get("excluded"),
    )
