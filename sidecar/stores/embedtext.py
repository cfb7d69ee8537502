"""The text the model reads of a chunk, kept in the manifest as what it adds to the chunk's text.

A chunk's model text is a head (title, heading path, aliases) and the chunk's own text, less a
leading line that repeats the head: stored whole beside the text, the chunk table held each
chunk's text twice (44 of 120 MB on a 10,000-note vault). The manifest keeps the head and where
in the text the rest starts (``embed_from``); NULL there: the row holds the model's text whole
(written before, or put back from an older copy). A model text's identity (``embed_hash``) lets
equal chunks share one embedding. Pure; imports only the standard library.
"""

from __future__ import annotations

import hashlib


def split_embed_text(embed_text: str, text: str) -> tuple[str, int]:
    """(head, start) with ``head + text[start:] == embed_text``: the longest end of ``text`` that
    ``embed_text`` ends with is left out of the head."""
    if embed_text.endswith(text):
        return embed_text[: len(embed_text) - len(text)], 0
    # The ends two strings share grow one character at a time: the longest is found by halving.
    low, high = 0, min(len(embed_text), len(text))
    while low < high:
        mid = (low + high + 1) // 2
        if embed_text.endswith(text[len(text) - mid :]):
            low = mid
        else:
            high = mid - 1
    return embed_text[: len(embed_text) - low], len(text) - low


def joined_embed_text(head: str, text: str, start: int | None) -> str:
    """The model's text of a manifest row (``embed_text``, ``text``, ``embed_from``)."""
    return head if start is None else head + text[start:]


def embed_hash(embed_text: str) -> str:
    """Identity of a chunk's text for the model: equal texts anywhere share one embedding."""
    return hashlib.blake2b(embed_text.encode(), digest_size=12).hexdigest()
