"""A chunk's model text kept as its head and where the rest starts in the chunk's text."""

from __future__ import annotations

import pytest

from sidecar.stores.embedtext import joined_embed_text, split_embed_text


@pytest.mark.parametrize(
    ("embed_text", "text", "head"),
    [
        ("Boat › Engine\nThe engine needs plugs.", "The engine needs plugs.", "Boat › Engine\n"),
        ("gdate\n> An alias of `date`.", "# gdate\n> An alias of `date`.", ""),
        ("Git › Date\ngdate\n> An alias.", "## gdate\n> An alias.", "Git › Date\n"),
        ("Title\nsomething else", "nothing alike!", "Title\nsomething else"),
        ("Title\n", "", "Title\n"),
        ("x", "a longer text than the head ending in x", ""),
        ("Title\nnul \x00 and 📥 inside", "# T\nnul \x00 and 📥 inside", "Title"),
        ("", "", ""),
    ],
)
def test_the_model_text_is_its_head_and_the_end_of_the_text(embed_text: str, text: str, head: str) -> None:
    """Only what the text does not end with is kept, and the two give the model's text back."""
    stored, start = split_embed_text(embed_text, text)
    assert stored == head
    assert joined_embed_text(stored, text, start) == embed_text


def test_a_row_without_a_start_holds_the_model_text_whole() -> None:
    """NULL in embed_from: a row written whole (before, or from an older copy) reads as it is."""
    assert joined_embed_text("Title\nbody", "body", None) == "Title\nbody"
