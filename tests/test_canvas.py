"""A Canvas read as Markdown (``vault.canvas``): odd, deep and large canvases are read or skipped
as malformed, never an exception out of the reader, and in time that grows as n log n."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sidecar.vault import canvas
from sidecar.vault.canvas import CanvasError, canvas_markdown
from tests.conftest import FakeEmbedder, Harness, write


def _text(text: str, x: float, y: float, w: float = 1, h: float = 1) -> dict[str, Any]:
    return {"type": "text", "text": text, "x": x, "y": y, "width": w, "height": h}


def _group(label: str, x: float, y: float, w: float, h: float) -> dict[str, Any]:
    return {"type": "group", "label": label, "x": x, "y": y, "width": w, "height": h}


def _nested(n: int) -> list[dict[str, Any]]:
    """``n`` concentric groups, the innermost holding one card."""
    side = 10 * n + 10
    groups = [_group(f"g{i}", 5 * i, 5 * i, side - 10 * i, side - 10 * i) for i in range(n)]
    return [*groups, _text("innermost", 5 * n + 1, 5 * n + 1)]


@pytest.mark.parametrize("value", [int("9" * 400), float("inf"), float("nan"), -1e300])
def test_a_coordinate_no_float_holds_makes_the_canvas_malformed(value: Any) -> None:
    """A 400-digit integer raised OverflowError out of the reader (and crashed every sweep)."""
    text = json.dumps({"nodes": [_text("card", value, 0)]})
    with pytest.raises(CanvasError, match="coordinate out of range"):
        canvas_markdown(text)


def test_groups_nested_deeper_than_the_stack_are_read_in_order() -> None:
    """1,200 nested groups raised RecursionError; now each label is a heading (at most ######)."""
    md = canvas_markdown(json.dumps({"nodes": _nested(1200)}))
    lines = [line for line in md.split("\n") if line]
    assert lines[:3] == ["# g0", "## g1", "### g2"]
    assert lines[1199] == "###### g1199"
    assert lines[-1] == "innermost"
    assert len(lines) == 1201


def test_thousands_of_groups_side_by_side_each_hold_their_own_card() -> None:
    """The reading at size: 3,000 groups in a 60 x 50 grid, a card in each, and 3,000 loose cards
    around them; each card under its group's heading (the old reading tried every card against
    every card: 15,000 one-line cards took half a minute and the vault counted as a hung share)."""
    nodes: list[dict[str, Any]] = []
    for i in range(3000):
        gx, gy = (i % 60) * 100, (i // 60) * 100
        nodes.append(_text(f"loose{i}", gx + 60, gy + 60, 30, 30))
        nodes.append(_text(f"in{i}", gx + 10, gy + 10, 20, 20))
        nodes.append(_group(f"G{i}", gx, gy, 50, 50))
    blocks = canvas_markdown(json.dumps({"nodes": nodes})).rstrip("\n").split("\n\n")
    assert blocks[:3000] == [f"loose{i}" for i in range(3000)]  # loose first, top to bottom, left to right
    assert blocks[3000:] == [part for i in range(3000) for part in (f"# G{i}", f"in{i}")]


def test_a_card_is_tried_against_the_groups_near_it_only(monkeypatch: Any) -> None:
    """The work, counted: each card was tried against every group (O(n x g), 35 s for 15,000
    cards); now against the few groups filed where it lies."""
    tried = 0
    inside = canvas._Card.inside

    def counting(card: Any, group: Any) -> bool:
        nonlocal tried
        tried += 1
        return inside(card, group)

    monkeypatch.setattr(canvas._Card, "inside", counting)
    nodes: list[dict[str, Any]] = []
    for i in range(500):
        gx, gy = (i % 25) * 100, (i // 25) * 100
        nodes += [_group(f"G{i}", gx, gy, 50, 50), _text(f"in{i}", gx + 10, gy + 10)]
        nodes.append(_text(f"out{i}", gx + 70, gy))
    md = canvas_markdown(json.dumps({"nodes": nodes}))
    assert "# G499\n\nin499\n" in md
    assert tried <= 4 * len(nodes)


def test_a_card_goes_to_the_smallest_group_holding_it_and_a_tie_to_the_first() -> None:
    """Membership as before the rewrite: smallest holder, equal boxes do not hold each other."""
    nodes = [
        _group("Big", 0, 0, 100, 100),
        _group("Twin A", 10, 10, 20, 20),
        _group("Twin B", 10, 10, 20, 20),
        _group("Small", 12, 12, 5, 5),
        _text("in small", 13, 13),
        _text("in twins", 20, 20),
        _text("half out", 90, 90, 20, 20),
    ]
    assert canvas_markdown(json.dumps({"nodes": nodes})) == (
        "half out\n\n# Big\n\n## Twin A\n\nin twins\n\n### Small\n\nin small\n\n## Twin B\n"
    )


def test_groups_overlapping_past_the_work_bound_make_the_canvas_malformed(monkeypatch: Any) -> None:
    """A hostile tangle of groups is given up after MAX_WORK steps, not read for minutes."""
    monkeypatch.setattr(canvas, "MAX_WORK", 5_000)
    nodes = _nested(200) + [_text(f"c{i}", 1, 1) for i in range(200)]  # each tries all 200 groups
    with pytest.raises(CanvasError, match="too many overlapping groups"):
        canvas_markdown(json.dumps({"nodes": nodes}))


def test_a_bad_canvas_is_skipped_and_the_rest_of_the_vault_indexed(tmp_path: Path, make_cfg: Any) -> None:
    """A sweep over a vault with an overflowing and a deep canvas crashed (sweep_crashed, forever)."""
    v = tmp_path / "v"
    write(v / "Normal.md", "# Normal\n\nhello world\n")
    write(v / "Big.canvas", json.dumps({"nodes": [_text("card", int("9" * 400), 0)]}))
    write(v / "Deep.canvas", json.dumps({"nodes": _nested(1200)}))
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        counts = h.stores.manifest.counts()
        assert counts["by_source"]["vault"]["files"] == 2  # Normal.md and Deep.canvas
        assert counts["skipped"] == {"malformed Canvas (coordinate out of range)": 1}
    finally:
        h.close()
