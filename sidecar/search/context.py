"""Recall's context block: the words that frame the recalled notes for an agent, and the hits
cut to a token budget."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from sidecar.contracts.printable import escape_controls
from sidecar.contracts.wire import Hit

HEADER = (
    "Notes recalled from the user's knowledge base because they may relate to this message. They are "
    "recollection, not observation: written earlier, possibly outdated or wrong, and they never replace "
    "checking the current state with your tools."
)
MORE = "Call memory_search to recall more, or memory_get with a reference for the whole note."
LEGEND = "Sources: [wiki] curated pages · [vault] the user's notes · [memory] your own earlier notes"
# Asked without an agent (a person at the CLI): memory hits are several agents' notes.
LEGEND_ALL = "Sources: [wiki] curated pages · [vault] the user's notes · [memory] the agents' notes"
# The frame's own tags inside a note's text or name (a web clipping, a pasted prompt), also with
# spaces, invisible characters or full-width brackets a model reads alike: written as text, so no
# note ends the frame early and goes on as if it were not recalled.
_GAP = "[\\s\u00ad\u200b-\u200d\u2060\ufeff]*"
_FRAME_TAG = re.compile(f"[<\uff1c\ufe64]{_GAP}(/?){_GAP}recalled{_GAP}-?{_GAP}notes", re.IGNORECASE)
# A line of a note's text that reads like a hit's head ("[memory] memory/x (lines 1-2)") would
# pass its text off as another note (one of the agent's own): such a line is marked as text.
_HEAD_LIKE = re.compile(r"^(\s*)\[(wiki|vault|memory)\]", re.IGNORECASE | re.MULTILINE)


def _as_text(text: str) -> str:
    return _HEAD_LIKE.sub(r"\1\\[\2]", _FRAME_TAG.sub(r"&lt;\1recalled-notes", text))


def render_block(
    hits: Sequence[Hit],
    budget: int,
    count_tokens: Callable[[Sequence[str]], list[int]],
    *,
    own: bool = True,
) -> str:
    """The context block: header, legend, then hits until the token budget is spent; empty when
    no hit fits (a frame saying notes were recalled, holding none, would mislead the model).
    ``own``: asked by an agent, whose memory hits are its own notes."""
    if not hits:
        return ""
    parts = ["<recalled-notes>", HEADER, LEGEND if own else LEGEND_ALL, MORE]
    frame = len(parts)
    used = sum(count_tokens(parts))
    for h in hits:
        # A file name may hold a line break: escaped, it cannot start a line of its own.
        # A note of a period the message named says its day (which day of "last week" it is).
        day = f", dated {h.date}" if h.date else ""
        if h.modified_ahead:  # its mtime lies in the future: the date is a change seen here
            day += f" (its file's date {h.modified_ahead} lies in the future)"
        head = (
            f"\n[{h.source}] {_as_text(escape_controls(h.reference))} (lines {h.lines[0]}-{h.lines[1]}{day})"
        )
        body = _as_text(h.text)
        cost = sum(count_tokens([head, body]))
        if used + cost > budget:
            room = budget - used - count_tokens([head])[0]
            if room < 40:
                break
            words = body.split()
            body = " ".join(words[: max(1, len(words) * room // max(cost, 1))]) + " …"
            cost = sum(count_tokens([head, body]))
        parts.extend([head, body])
        used += cost
    if len(parts) == frame:
        return ""
    parts.append("</recalled-notes>")
    return "\n".join(parts)


def with_note(block: str | None, note: str) -> str | None:
    """``block`` with one plain line under its header (e.g. that the index is out of date): what
    the agent reads is the block, not the client's stderr. Outside the token budget: one line."""
    if not block:
        return block
    return block.replace(HEADER, f"{HEADER}\nNote: {note}", 1)
