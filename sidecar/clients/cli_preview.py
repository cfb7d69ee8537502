"""What ``sidecar preview`` prints: the query analysis, recall's gates, the hits kept and the
candidates each gate kept out, with the figures the gates compared (for tuning recall). Pure:
a parsed ``recall`` reply in, lines out."""

from __future__ import annotations

from sidecar.contracts.notices import dates_said, ignored_phrase_note, switch_note, waiting_vectors
from sidecar.contracts.printable import escape_controls as shown
from sidecar.contracts.wire import Analysis, Hit, SearchResult

# What each gate compares, as the preview explains a candidate it kept out.
_WHY = {
    "scoreFloor": "relevance {relevance} is below recall.scoreFloor {scoreFloor}",
    "minSimilarity": "similarity {similarity} is below recall.minSimilarity {minSimilarity}",
    "keywordShare": "the model does not read the message's language and its keyword share "
    "{keywords} is below recall.minSimilarity {minSimilarity}",
    "limit": "passed the gates, but the block holds at most the limit's hits",
}


def recall_pending_note(n: int) -> str:
    """What ``recall`` and ``preview`` say while some chunks have no vector yet (a first index)."""
    chunks = "1 chunk still waits for its vector" if n == 1 else f"{n:,} chunks still wait for their vectors"
    return f"{chunks} (being computed): recall weighs those by their keywords alone, by a stricter rule"


def _figure(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _analysis_lines(a: Analysis) -> list[str]:
    words = ", ".join(shown(w) for w in a.content_words) or "none"
    rare = ", ".join(shown(w) for w in a.rare_words) or "none"
    lines = [
        f"Message: {shown(a.text)!r}",
        f"  content words: {words}; rare words: {rare}; language: {a.language or 'undecided'}; "
        f"word class {a.word_class}",
    ]
    if a.history_turns:
        back = "yes" if a.refers_back else "no"
        lines.append(f"  history: {a.history_turns} turn(s), share {a.history_share}, refers back: {back}")
    f = a.filters
    if f.time_phrase:
        given = " (the dates given; the phrase's own not used)" if f.window_given else ""
        lines.append(f"  time phrase {shown(f.time_phrase)!r}: {dates_said(f.since, f.until)}{given}")
    if a.time_phrase_ignored:
        note = ignored_phrase_note(
            a.time_phrase_ignored, a.time_phrase_why, a.time_phrase_since, a.time_phrase_until
        )
        lines.append(f"  time phrase {shown(note)}")
    return lines


def _hit_lines(i: int, h: Hit) -> list[str]:
    boosts = " ".join(f"{k}={v}" for k, v in h.boosts.items()) or "none"
    bm25 = "-" if h.bm25_score is None else f"{h.bm25_score:.2f}"
    vec = "-" if h.vec_score is None else f"{h.vec_score:.4f}"
    return [
        f"{i:>3}. {shown(h.reference)} (lines {h.lines[0]}-{h.lines[1]})",
        f"     relevance {_figure(h.relevance)}  similarity {_figure(h.similarity)}  keywords "
        f"{_figure(h.keywords)}  score {h.score:.3f}  (cosine {vec}, bm25 {bm25})  boosts: {boosts}",
    ]


def preview_lines(result: SearchResult) -> list[str]:
    """The preview of a ``recall`` reply asked with ``preview``."""
    lines = _analysis_lines(result.analysis) if result.analysis is not None else []
    gates = dict(result.gates or {})
    if gates:
        lines.append(
            "Gates: relevance >= recall.scoreFloor "
            f"{gates.get('scoreFloor')}, similarity (calibrated cosine) >= recall.minSimilarity "
            f"{gates.get('minSimilarity')}"
        )
    if waiting := waiting_vectors(result):
        lines.append(f"Vectors: {recall_pending_note(waiting)}")
    if result.left_to_switch:
        lines.append(f"Vectors: {switch_note(result.left_to_switch)}")
    lines.append(f"Recalled: {len(result.hits)} hit(s)")
    least = gates.get("minSimilarity")
    for i, h in enumerate(result.hits, 1):
        lines.extend(_hit_lines(i, h))
        # passed the similarity gate by other evidence (recall in docs/protocol.md)
        if least is not None and h.similarity is None and "rareTerm" not in h.boosts:
            lines.append("     no similarity (no vector yet): passed on its keywords alone")
        elif least is not None and (h.similarity is None or h.similarity < least):
            lines.append("     under recall.minSimilarity: passed on its keywords, a rare word or code")
    if result.dropped:
        lines.append(f"Kept out: {len(result.dropped)} candidate(s), best first")
    for i, h in enumerate(result.dropped, 1):
        lines.extend(_hit_lines(i, h))
        figures = {
            "relevance": _figure(h.relevance),
            "similarity": _figure(h.similarity),
            "keywords": _figure(h.keywords),
            **{k: str(v) for k, v in gates.items()},
        }
        reason = _WHY.get(h.gate or "", "{gate}").format(gate=h.gate, **figures)
        lines.append(f"     kept out by {h.gate}: {reason}")
    lines.append("Context block:" if result.context else "Context block: empty (nothing recalled)")
    return lines
