"""Links while the index is being built: a restart that re-cuts every note and a rebuild resolve
every link once, at the end of their sweep. Meanwhile a note's links keep what they resolved to
before, and a link with nothing to keep is said to be not resolved yet, never "names no note"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeEmbedder, Harness, write

_HUB = "# Hub\n\nSee [[Boat]], [[Bread]] and [[Backups]]; [[Nowhere]] is not written yet.\n"


def _links_before_the_end(h: Harness, monkeypatch: pytest.MonkeyPatch, key: str) -> list[dict[str, Any]]:
    """Sweep; the links of ``key`` as the index held them just before the sweep's end resolved
    every link (``Writer.resolve_all_links``)."""
    from sidecar.index.writes import Writer
    from sidecar.notes.links import LinkGraph

    seen: list[list[dict[str, Any]]] = []
    real = Writer.resolve_all_links

    def looked_at_first(self: Writer) -> None:
        seen.append(LinkGraph(self.stores.manifest.read).links_of(key))
        real(self)

    monkeypatch.setattr(Writer, "resolve_all_links", looked_at_first)
    h.sweep()
    monkeypatch.undo()
    assert seen, "the sweep resolved no link at its end"
    return seen[0]


def _targets(links: list[dict[str, Any]]) -> dict[str, str | None]:
    return {link["link"]: link["target"] for link in links}


_RESOLVED = {
    "Boat": "vault/Projects/Boat",
    "Bread": "vault/Recipes/Bread",
    "Backups": "wiki/Backups",
    "Nowhere": None,
}


def test_a_restart_that_recuts_every_note_keeps_the_links_resolved(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every note read again by the first sweep of a start (a chunker or model change re-cuts
    them): until the sweep's end its links show the notes they named, not "unresolved". Was:
    every link of every re-cut note read as naming no note for as long as the sweep took."""
    from sidecar.notes.links import unresolved_paths

    write(vault / "Hub.md", _HUB)
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    h.stores.manifest.reread_all()
    h.close()
    h = Harness(cfg, FakeEmbedder())
    try:
        links = _links_before_the_end(h, monkeypatch, "vault/Hub")
        assert _targets(links) == _RESOLVED
        assert unresolved_paths(links) == ["Nowhere"]
    finally:
        h.close()


def test_a_rebuild_keeps_the_links_resolved_and_says_which_are_not_yet(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild reads every note into an emptied index: a note's links keep what they resolved
    to before the rebuild (its copy set aside) until the sweep's end; a link of a note new since
    is "resolving" (not among ``unresolved``, said by the CLI and the MCP answer), and resolved
    at the end. Was: 0 links, then every link "unresolved" until the rebuild's end."""
    from sidecar.clients.cli_hits import render_links
    from sidecar.contracts.notices import links_state_note
    from sidecar.notes.links import LinkGraph, unresolved_paths

    write(vault / "Hub.md", _HUB)
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        write(vault / "Later.md", "# Later\n\nBack to [[Hub]] and on to [[Nowhere]].\n")
        h.indexer.clear()
        links = _links_before_the_end(h, monkeypatch, "vault/Hub")
        assert _targets(links) == _RESOLVED
        assert unresolved_paths(links) == ["Nowhere"]
        pending = LinkGraph(h.stores.manifest.read).links_of("vault/Later")  # after the end
        assert _targets(pending) == {"Hub": "vault/Hub", "Nowhere": None}
        assert not any(link.get("resolving") for link in pending)
        assert unresolved_paths(pending) == ["Nowhere"]
    finally:
        h.close()
    answer = {
        "reference": "vault/Later",
        "links": [
            {"target": None, "link": "Hub", "anchor": None, "embed": False, "line": 3, "resolving": True},
            {"target": None, "link": "Nowhere", "anchor": None, "embed": False, "line": 3},
        ],
        "backlinks": [],
        "unresolved": ["Nowhere"],
        "indexing": {"done": 3, "total": 6},
    }
    shown = render_links(answer)
    assert "line 3: not resolved yet: [[Hub]]" in shown and "unresolved: [[Nowhere]]" in shown
    said = links_state_note(answer) or ""
    assert "1 link(s) of this note are not resolved yet" in said and "3 of 6 notes read" in said
    assert "this note is not read yet" in (links_state_note({**answer, "links": [], "indexed": False}) or "")


def test_a_link_of_a_note_new_during_a_rebuild_is_not_resolved_yet_until_its_end(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note no earlier index held, read during a rebuild: its links have no earlier target to
    keep, and are marked not resolved yet (``resolving``), not "names no note"."""
    from sidecar.notes.links import LinkGraph, unresolved_paths

    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        write(vault / "Later.md", "# Later\n\nOn to [[Boat]].\n")
        h.indexer.clear()
        links = _links_before_the_end(h, monkeypatch, "vault/Later")
        assert [(link["target"], link.get("resolving")) for link in links] == [(None, True)]
        assert unresolved_paths(links) == []
        after = LinkGraph(h.stores.manifest.read).links_of("vault/Later")
        assert _targets(after) == {"Boat": "vault/Projects/Boat"}
    finally:
        h.close()


def test_a_target_deleted_during_a_rebuild_is_not_shown_as_linked(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note deleted while a rebuild runs: a link to it kept from the rebuild's copy would name
    a note that is gone until the sweep's end (the sweep never saw it, so nothing resolved it
    again); it reads "resolving" instead, and unresolved after the end. The other links keep
    what they resolved to."""
    from sidecar.notes.links import LinkGraph

    write(vault / "Hub.md", _HUB)
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        h.indexer.clear()
        (vault / "Projects" / "Boat.md").unlink()  # deleted while the rebuild runs
        links = _links_before_the_end(h, monkeypatch, "vault/Hub")
        assert _targets(links) == {**_RESOLVED, "Boat": None}
        assert [link.get("resolving") for link in links if link["link"] == "Boat"] == [True]
        after = LinkGraph(h.stores.manifest.read).links_of("vault/Hub")
        assert _targets(after) == {**_RESOLVED, "Boat": None}
        assert not any(link.get("resolving") for link in after)
    finally:
        h.close()
