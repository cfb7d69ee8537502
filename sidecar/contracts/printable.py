"""Names as they may be shown in a line of text (pure): a file name, a title or a heading of a
note is any string, and text for people and agents must not let one break a line or turn it."""

from __future__ import annotations

import re
from collections.abc import Sequence

# C0 and C1 controls, DEL, line and paragraph separators, and the bidirectional marks, embeddings,
# overrides and isolates: a name holding one would break a line (forging an entry or a hit), drive
# the terminal (ESC, CR) or display the rest of the line reversed (U+202E).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """``text`` with control characters shown as escapes (``\\n``, ``\\x1b``, ``\\u202e``), as in
    the log. Structured replies keep names exact, so a reference still round-trips."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


# C0 and C1 controls and DEL but the tab and the line feed: what a terminal acts on (ESC opens
# OSC 52 clipboard writes, title changes, screen clears; a lone CR overwrites a line). And the
# bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069): each shows the
# rest of its line in another order than it is stored ("Trojan Source"), so a note could show a
# reader on a terminal text that is not what it holds. The marks U+200E, U+200F and U+061C stay:
# they act as one invisible letter, cannot reorder letters around them, and are common in
# Hebrew and Arabic notes, which they would fill with escapes.
_TERMINAL_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def escape_terminal(text: str) -> str:
    """A whole text (a note) as a terminal may show it: controls and bidirectional overrides
    escaped as in ``escape_controls``, its lines and tabs kept (Windows line ends too: the CR
    before a line feed shows nothing)."""
    return _TERMINAL_CONTROL.sub(
        lambda m: m.group().encode("unicode_escape").decode("ascii"), text.replace("\r\n", "\n")
    )


# A name quoted in a one-line message is cut past this many characters (a reference of 8 KB was
# echoed whole into the error it caused).
QUOTED_CHARS = 120


def quoted(text: object, most: int = QUOTED_CHARS) -> str:
    """``text`` quoted as ``repr`` does, cut to its first ``most`` characters with how long it was
    said when it is longer: ``'vault/aaa…' (8,192 characters)``. Not text (a request's JSON may
    give a list where a name belongs): its ``repr``, cut alike."""
    if not isinstance(text, str):
        shown = repr(text)
        return shown if len(shown) <= most else f"{shown[:most]}… ({len(shown):,} characters)"
    if len(text) <= most:
        return repr(text)
    return f"{text[:most]!r}… ({len(text):,} characters)"


def quoted_names(names: Sequence[object], most: int = 5) -> str:
    """Names a request gave, each ``quoted``: at most ``most`` of them, then how many more (a
    request of ten thousand unknown keys is answered in one line)."""
    shown = ", ".join(quoted(n) for n in names[:most])
    return shown if len(names) <= most else f"{shown} and {len(names) - most:,} more"


def few_names(names: Sequence[str], most: int = 3) -> str:
    """``names`` joined, at most ``most`` of them, then how many more ("a, b, c and 4 more"): a
    line that names what a problem touches stays one line however many it touches."""
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more
