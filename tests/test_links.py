"""The link graph: extraction, Obsidian's resolution rules, updates on edits, renames and deletions."""

from __future__ import annotations

import functools
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from sidecar.notes.chunking import chunk_note
from sidecar.notes.links import LinkGraph
from sidecar.notes.linktext import extract_links, pasted_link
from sidecar.notes.markdown import anchor_lines, note_anchors
from sidecar.notes.resolver import Resolver, Target
from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import edit_links

# A help-vault-like fixture: every way of linking, each page's backlinks counted by hand below.
PAGES = {
    "Home.md": (
        "---\ntags: [start]\n---\n# Home\n\n"
        "Begin with [[Getting started]] or the [[Plugins/Audio recorder|recorder]].\n"
        "Sync is set up in [[Sync#Setup]].\n\n![[Callouts]]\n\n"
        "See [Format](Formatting%20syntax.md#Bold) too.\n"
        "Backups live in the wiki: [[Backups]]. Planned: [[Missing page]].\n"
        "![[diagram.png]] and [a site](https://example.org/page.md) are no note links.\n"
    ),
    "Getting started.md": (
        "---\naliases: [Start here]\ntags: [start]\n---\n# Getting started\n\n"
        "Back to [[Home]]. The key step: [[Sync#^step1]].\n"
        "Headings: [[Formatting syntax#Headings#Level 2]].\n"
    ),
    "Sync.md": "# Sync\n\n## Setup\n\nOpen the settings. ^step1\n\nSee [[Home]] and the [[Index]].\n",
    "Formatting syntax.md": (
        "# Formatting syntax\n\n## Headings\n\n### Level 2\n\n"
        "Use [[Callouts]] and again [[Callouts|a callout]].\n\n"
        "```\n[[Home]] in a code block is no link\n```\n\nInline `[[Sync]]` neither.\n"
    ),
    "Callouts.md": "---\ntags: [start]\n---\n# Callouts\n\nStart at [[Start here]].\n",
    "Plugins/Audio recorder.md": "# Audio recorder\n\nUp: [home](../Home.md). Needs [[Sync]].\n",
    "A/Index.md": "# Index A\n\n[[Home]]\n",
    "B/Deep/Index.md": "# Index B\n\n[[Sync]]\n",
    "wiki/Backups.md": "# Backups\n\nRestic nightly. Sync first: [[Sync]]; start at [[Home]].\n",
}
MEMORY = {
    "nas-setup.md": "# NAS setup\n\nThe wiki says [[Backups]]; details in [[other-note]].\n",
    "other-note.md": "# Other note\n\nNothing links from here.\n",
}
# Distinct linking notes per page, counted by reading PAGES and MEMORY above.
EXPECTED = {
    "vault/Home": 5,  # Getting started, Sync, Audio recorder (markdown link), A/Index, wiki/Backups
    "vault/Getting started": 2,  # Home, Callouts (through the alias "Start here")
    "vault/Sync": 5,  # Home, Getting started, Audio recorder, B/Deep/Index, wiki/Backups (code ignored)
    "vault/Formatting syntax": 2,  # Home (markdown link), Getting started
    "vault/Callouts": 2,  # Home (embed), Formatting syntax (twice, counted once)
    "vault/Plugins/Audio recorder": 1,  # Home
    "vault/A/Index": 1,  # Sync: [[Index]] is ambiguous, the shorter path wins
    "vault/B/Deep/Index": 0,
    "wiki/Backups": 2,  # Home, memory/claude/nas-setup
    "memory/claude/other-note": 1,  # nas-setup, its agent's own inbox
}


@pytest.fixture
def linked(tmp_path: Path, make_cfg: Any) -> Any:
    v = tmp_path / "lvault"
    for rel, text in PAGES.items():
        write(v / rel, text)
    cfg = make_cfg(v)
    for rel, text in MEMORY.items():
        write(cfg.agents_dir / "claude" / "memory" / rel, text)
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    yield h, v
    h.close()


def _words(texts: Any) -> list[int]:
    return [len(t.split()) for t in texts]


def _counts(h: Harness) -> dict[str, int]:
    return LinkGraph(h.stores.manifest.read).backlink_counts()


def test_backlink_counts_match_an_independent_count(linked: Any) -> None:
    h, _v = linked
    counts = _counts(h)
    assert {k: counts.get(k, 0) for k in EXPECTED} == EXPECTED


def test_links_keep_anchors_embeds_and_ambiguity(linked: Any) -> None:
    h, _v = linked
    graph = LinkGraph(h.stores.manifest.read)
    home = graph.links_of("vault/Home")
    by_target = {(link["target"], link["anchor"]): link for link in home}
    assert by_target["vault/Sync", "Setup"]["line"] == 7
    assert by_target["vault/Callouts", None]["embed"] is True
    assert by_target["vault/Formatting syntax", "Bold"]["link"] == "Formatting syntax.md#Bold"
    assert by_target["vault/Plugins/Audio recorder", None]["display"] == "recorder"
    assert [link["link"] for link in home if link["target"] is None] == ["Missing page"]
    started = {link["target"]: link["anchor"] for link in graph.links_of("vault/Getting started")}
    assert started["vault/Sync"] == "^step1"
    assert started["vault/Formatting syntax"] == "Headings › Level 2"
    sync = graph.links_of("vault/Sync")
    assert [(link["target"], link.get("ambiguous")) for link in sync][1] == ("vault/A/Index", 2)
    # An agent sees no other agent's memory among the backlinks.
    assert [b["source"] for b in graph.backlinks("wiki/Backups", agent="other")] == ["vault/Home"]
    assert len(graph.backlinks("wiki/Backups", agent="claude")) == 2


def test_rename_and_delete_reresolve_what_names_mean(linked: Any) -> None:
    h, v = linked
    os.rename(v / "A/Index.md", v / "A/Contents.md")
    h.sweep()
    counts = _counts(h)
    assert counts.get("vault/B/Deep/Index") == 1  # the only Index left
    assert "vault/A/Index" not in counts and counts["vault/Home"] == 5  # A/Contents still links Home
    (v / "Callouts.md").unlink()
    write(v / "Missing page.md", "# Missing page\n\nNow it exists.\n")
    h.sweep()
    counts = _counts(h)
    assert counts["vault/Getting started"] == 1  # its alias link came from Callouts
    assert counts["vault/Missing page"] == 1
    graph = LinkGraph(h.stores.manifest.read)
    assert [u[1] for u in graph.unresolved("vault/Home")] == ["Callouts"]
    # An alias added to one note makes a dangling link of an unchanged note resolve.
    write(v / "Plugins/Audio recorder.md", PAGES["Plugins/Audio recorder.md"] + "\nSee [[Deep thoughts]].\n")
    h.sweep()
    assert _counts(h)["vault/B/Deep/Index"] == 1
    write(v / "B/Deep/Index.md", "---\naliases: Deep thoughts\n---\n# Index B\n\n[[Sync]]\n")
    h.sweep()
    assert _counts(h)["vault/B/Deep/Index"] == 2


def test_a_crash_between_stores_leaves_no_half_written_links(linked: Any, monkeypatch: Any) -> None:
    """Links are written in the manifest transaction of the note's chunks: if it fails, neither
    changes, and the next sweep writes both."""
    h, v = linked
    from sidecar.index import writes as writes_mod

    write(v / "A/Index.md", "# Index A\n\n[[Home]] [[Sync]]\n")

    def boom(*_a: Any, **_k: Any) -> int:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(writes_mod, "reresolve", boom)
    with pytest.raises(sqlite3.OperationalError):
        h.indexer.sweep()
    assert _counts(h)["vault/Sync"] == 5
    monkeypatch.undo()
    h.sweep()
    assert _counts(h)["vault/Sync"] == 6


def test_old_manifest_gets_its_links_on_the_next_sweep(linked: Any) -> None:
    """A manifest from before the link graph: every note is read once more, vectors are kept."""
    h, _v = linked
    cfg = h.cfg
    vectors_before = h.stores.manifest.vector_ids()
    h.close()
    db = sqlite3.connect(cfg.index_dir / "manifest.sqlite")
    db.executescript("DROP VIEW links; DROP TABLE link_rows; DROP TABLE link_keys")
    db.execute("PRAGMA user_version=3")
    db.commit()
    db.close()
    h2 = Harness(cfg, FakeEmbedder())
    try:
        h2.sweep()
        assert {k: _counts(h2).get(k, 0) for k in EXPECTED} == EXPECTED
        assert h2.stores.manifest.vector_ids() == vectors_before
        assert h2.vectors.embedded == 0
    finally:
        h2.close()
    h.stores = h2.stores  # the fixture closes these again (a no-op)


def test_extraction_ignores_code_and_attachments_and_reads_properties() -> None:
    """Links in code and to attachments are none; a link as a property's value is one (Obsidian
    shows it as a backlink: it was left out)."""
    text = (
        "---\nup: '[[Home]]'\ncover: '[[pic.png]]'\n---\n"
        "[[A]] `[[B]]` ![[pic.jpg]] [[C.pdf]] [[D.md|dee]] [x](E%20F.md) [y](http://g.md)\n"
        "~~~\n[[H]]\n~~~\n| [[I\\|i]] |\n[[#Local heading]]\n"
    )
    links = extract_links(text)
    assert links[0].kind == "property"
    assert [(link.target, link.line - 1) for link in links] == [
        ("Home", 1),
        ("A", 4),
        ("D.md", 4),
        ("E F.md", 4),
        ("I", 8),
        ("", 9),
    ]
    assert links[-1].anchor == "Local heading"


def test_links_in_comments_are_not_links() -> None:
    """Obsidian renders no comment, so a link commented out (``%% … %%``, ``<!-- … -->``, over
    lines too) links nothing; a ``%%`` in code opens no comment, and the lines after a comment keep
    their numbers. A wiki-link lies on one line."""
    text = (
        "%% old: [[Retired]] %%\n"
        "<!-- draft\n[[Draft]] [d](Draft2.md)\n-->\n"
        '`printf("%%d")` [[Kept]]\n'
        "```\n%%\n```\n"
        "[[Also kept]] %% [[Hidden]]\n"
        "%%\n[[Split\nacross]] [[Last]]\n"
    )
    found = [(link.target, link.line) for link in extract_links(text)]
    assert found == [("Kept", 5), ("Also kept", 9), ("Last", 12)]
    assert chunk_note("[[Open\n#echt]] [[X|#kein]]\n", title="t", count_tokens=_words).tags == ("echt",)


def test_code_blocks_end_where_commonmark_ends_them(tmp_path: Path, make_cfg: Any) -> None:
    """A ```` fence holding ``` is one code block (a toggle on every fence-like line swallowed the
    rest of the note), and an indented code block holds no links or tags; an indented line that
    continues a list item is no code."""
    doku = "Fences:\n\n````text\n```\n[[InFence]] #infence\n````\n\nReal #echt and [[Ziel]].\n"
    code = "Example:\n\n    [[Ziel]] #beispiel\n\n~~~\n~~~ not a close\n[[Tilde]]\n~~~~\n[[After]]\n"
    item = "- item\n\n    continued: [[Ziel]] #weiter\n"
    assert [(link.target, link.line) for link in extract_links(doku)] == [("Ziel", 8)]
    assert [link.target for link in extract_links(code)] == ["After"]
    assert [link.target for link in extract_links(item)] == ["Ziel"]
    assert chunk_note(doku, title="t", count_tokens=_words).tags == ("echt",)
    assert chunk_note(code, title="t", count_tokens=_words).tags == ()
    assert chunk_note(item, title="t", count_tokens=_words).tags == ("weiter",)
    v = tmp_path / "cv"
    write(v / "Ziel.md", "Ziel.\n")
    write(v / "Doku.md", doku)
    write(v / "Code.md", code)
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        graph = LinkGraph(h.stores.manifest.read)
        assert [b["source"] for b in graph.backlinks("vault/Ziel")] == ["vault/Doku"]
    finally:
        h.close()


def test_names_with_a_dot_are_notes_attachments_are_not(tmp_path: Path, make_cfg: Any) -> None:
    """[[Node.js]], ![[Node.js]] and [[ASP.NET|ASP]] link to those notes (any dotted name was taken
    for an attachment and dropped); images, PDFs, office files, archives and data files (csv,
    json, ...: they were unresolved note links) stay no note links. A Canvas is a note."""
    v = tmp_path / "dots"
    write(v / "Node.js.md", "JavaScript runtime.\n")
    write(v / "ASP.NET.md", "Framework.\n")
    write(
        v / "Stack.md",
        "Nutzt [[Node.js]], ![[Node.js]] und [[ASP.NET|ASP]], [[Release 1.5]].\n"
        "![[pic.PNG]] [[Plan.pdf]] [x](Budget.xlsx) [[src.zip]] ![[clip.mp4]] [[Board.canvas]]\n"
        "[[prices.csv]] [x](data/export.json) [[feed.xml]] [[page.html]] [[compose.yaml]]\n",
    )
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        links = LinkGraph(h.stores.manifest.read).links_of("vault/Stack")
        assert [(link["target"], link["link"], link["embed"]) for link in links] == [
            ("vault/Node.js", "Node.js", False),
            ("vault/Node.js", "Node.js", True),
            ("vault/ASP.NET", "ASP.NET", False),
            (None, "Release 1.5", False),
            (None, "Board.canvas", False),  # a Canvas is a note: here, one not there
        ]
    finally:
        h.close()


def test_resolver_rules() -> None:
    r = Resolver(
        [
            Target("vault/Notes/Plan", "Notes/Plan"),
            Target("vault/Work/Plan", "Work/Plan"),
            Target("vault/Work/Deep/Plan", "Work/Deep/Plan"),
            Target("vault/Plan", "Plan"),
            Target("wiki/Plan", "wiki/Plan", ("Roadmap",)),
            Target("memory/a/plan", "plan", agent="a"),
            Target("vault/Work/Note", "Work/Note"),
            Target("vault/Work/Deep/Note", "Work/Deep/Note"),
        ]
    )
    assert r.resolve("Plan", "vault/Other") == ("vault/Plan", 1)  # the vault-root file is an exact path
    assert r.resolve("Work/Plan", "vault/Other") == ("vault/Work/Plan", 1)
    assert r.resolve("Deep/Plan", "vault/Other") == ("vault/Work/Deep/Plan", 1)
    assert r.resolve("roadmap", "vault/Other") == ("wiki/Plan", 1)
    assert r.resolve("./Plan.md", "vault/Work/Note") == ("vault/Work/Plan", 1)
    assert r.resolve("../Plan", "vault/Work/Deep/Note") == ("vault/Work/Plan", 1)
    assert r.resolve("plan", "memory/a/x") == ("memory/a/plan", 1)  # own inbox first
    assert r.resolve("plan", "memory/b/x") == ("vault/Plan", 1)
    assert r.resolve("Nothing", "vault/Plan") == (None, 0)
    r2 = Resolver(
        [
            Target("vault/Notes/Plan", "Notes/Plan"),
            Target("vault/Work/Plan", "Work/Plan"),
            Target("vault/Notes/Other", "Notes/Other"),
            Target("vault/Other", "Other"),
        ]
    )
    assert r2.resolve("Plan", "vault/Notes/Other") == ("vault/Notes/Plan", 2)  # same folder first
    assert r2.resolve("Plan", "vault/Other") == ("vault/Work/Plan", 2)  # then the shorter path


def test_link_lift_raises_a_note_the_top_notes_link_to(linked: Any) -> None:
    from dataclasses import replace

    from sidecar.search.query import Filters
    from sidecar.search.request import SearchRequest
    from sidecar.search.retrieval import Retriever

    h, _v = linked
    req = SearchRequest("sync", 20, 0.0, None, None, Filters())
    off = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall).search(req).hits
    assert not any("linked" in hit.boosts for hit in off)
    on = Retriever(h.stores, h.slot, replace(h.cfg.search, link_lift=0.4), h.cfg.recall).search(req).hits
    sync = next(hit for hit in on if hit.reference == "vault/Sync")
    # Home, Getting started, Audio recorder, B/Deep/Index and wiki/Backups mention and link Sync.
    assert sync.boosts["linked"] > 1.0
    before = next(hit for hit in off if hit.reference == "vault/Sync")
    assert sync.score == pytest.approx(before.score * sync.boosts["linked"], rel=1e-4)


def _shown(text: str, anchor: str) -> list[str] | None:
    """The lines ``anchor`` opens in ``text`` (None: it names nothing there)."""
    found = anchor_lines(text, anchor)
    return text.split("\n")[found[0] - 1 : found[1]] if found else None


def test_anchor_lines_find_sections_and_blocks_as_obsidian_opens_them() -> None:
    text = (
        "---\ntitle: '# not a heading'\n---\n# Top\n\n## Set up: Linux\n\napt\n\n```\n## In code\n```\n\n"
        "## Next\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n^table-id\n\n1. first ^one\n"
    )
    shown = functools.partial(_shown, text)
    assert shown("Set up Linux") == ["## Set up: Linux", "", "apt", "", "```", "## In code", "```"]
    assert shown("top › set up: linux") == shown("Set up Linux")  # nested, any case, ":" dropped
    assert shown("In code") is None and shown("not a heading") is None
    assert shown("^table-id") == ["| a | b |", "|---|---|", "| 1 | 2 |"]  # the block before the id
    assert shown("^one") == ["1. first ^one"]
    assert shown("^missing") is None and shown("Next › Top") is None
    assert anchor_lines("# A\rtext\r# B\rmore\r", "B") == (3, 4)  # old Mac line ends, as get numbers them


def test_a_notes_anchors_collected_at_once_are_those_anchor_lines_finds() -> None:
    """``note_anchors`` (one parse and one look at each line for all of a note's anchors, as
    ``get`` checks its links) tells an anchor there exactly when ``anchor_lines`` finds it."""
    text = (
        "---\ntitle: '# not a heading'\n---\n# Top\n\n## Set up: Linux\n\napt ^Mixed-Case\n\n"
        "```\n## In code\nx ^incode\n```\n\n## Next\n\n### Deep\n\n> [!note]\n> text\n^callout\n\n"
        "- a ^one\n- b ^two ^three\nx ^a^b\n## Top\n"
    )
    anchors = note_anchors(text)
    for anchor in (
        *("Set up Linux", "top › set up: linux", "Top", "Next › Deep", "Top › Deep", "Deep › Next"),
        *("In code", "not a heading", "Nowhere", "^mixed-case", "^Mixed-Case", "^incode", "^callout"),
        *("^one", "^two", "^three", "^a^b", "^b", "^", "^missing"),
    ):
        assert anchors.has(anchor) == (anchor_lines(text, anchor) is not None), anchor


def test_an_id_line_right_under_a_callout_or_a_list_names_that_block() -> None:
    """An ``^id`` line with no blank line before it continues the callout, quote or list item
    above it (Obsidian's own help writes callout ids so): it names that block. It was read as a
    block of its own and named the block before: the paragraph above the callout, the callout
    above the list."""
    text = (
        "Intro paragraph here.\n\n> [!tip] Tip\n> The callout text.\n^tipblock\n\n"
        "- item one\n- item two\n  more of two\n^listblock\n\nA paragraph\n^parablock\n\n"
        "Alone before.\n\n^alone\n"
    )
    shown = functools.partial(_shown, text)
    assert shown("^tipblock") == ["> [!tip] Tip", "> The callout text."]
    assert shown("^listblock") == ["- item two", "  more of two"]
    assert shown("^parablock") == ["A paragraph"]
    assert shown("^alone") == ["Alone before."]  # after a blank line: the block before, as before


def test_pasted_links_and_names() -> None:
    assert pasted_link("[[Boat#Budget|costs]]") == ("Boat", "Budget")
    assert pasted_link(" ![[Folder/Boat.md#A#B]] ") == ("Folder/Boat.md", "A › B")
    assert pasted_link("[costs](Folder/Boat%20Plan.md#Budget)") == ("Folder/Boat Plan.md", "Budget")
    assert pasted_link("Boat#^crew") == ("Boat", "^crew")
    assert pasted_link("Boat^crew") == ("Boat", "^crew")
    assert pasted_link("wiki/Boat") == ("wiki/Boat", "")


def test_escaped_pipe_in_a_table_is_no_part_of_the_anchor(tmp_path: Path, make_cfg: Any) -> None:
    """``[[Note#Heading\\|alias]]`` (Obsidian's escape inside a table) links to "Heading", in the
    note's links and the target's backlinks alike: the backslash belonged to the pipe."""
    v = tmp_path / "tv"
    write(v / "Sync.md", "# Sync\n\n## Setup\n\nOpen the settings. ^step1\n")
    write(
        v / "Table.md",
        "---\nup: '[[Sync#Setup\\|s]]'\n---\n| a | b |\n| --- | --- |\n"
        "| x | [[Sync#Setup\\|Setup]] |\n| y | [[Sync#^step1\\|step]] |\n| z | ![[Sync\\|shown]] |\n",
    )
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        graph = LinkGraph(h.stores.manifest.read)
        links = graph.links_of("vault/Table")
        assert [(link["anchor"], link["display"]) for link in links] == [
            ("Setup", "s"),
            ("Setup", "Setup"),
            ("^step1", "step"),
            (None, "shown"),
        ]
        assert all(link["target"] == "vault/Sync" for link in links)
        assert [b["anchor"] for b in graph.backlinks("vault/Sync")] == ["Setup", "Setup", "^step1", None]
    finally:
        h.close()


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("[[Note#Heading\\]]", ("Note", "Heading\\", "")),
        ("[[Note#C:\\dir\\]]", ("Note", "C:\\dir\\", "")),
        ("[[Note#Heading\\|h]]", ("Note", "Heading", "h")),
        ("[[Note#Heading\\\\|h]]", ("Note", "Heading\\", "h")),
        ("---\nrel: '[[Note\\]]'\n---\nbody", ("Note\\", "", "")),
        ("---\nup: '[[Sync#Setup\\|s]]'\n---\nbody", ("Sync", "Setup", "s")),
    ],
)
def test_only_the_pipes_escape_is_taken_off_a_link(text: str, want: tuple[str, str, str]) -> None:
    """The escaped pipe's backslash is no part of an anchor; every other trailing one was taken
    off too (``[[Note#Heading\\]]`` became "Heading", a property's ``[[Note\\]]`` "Note")."""
    assert [(link.target, link.anchor, link.display) for link in extract_links(text)] == [want]


def _candidates(h: Harness, src: str) -> list[tuple[str | None, int]]:
    rows = h.stores.manifest.read("SELECT dst, candidates FROM links WHERE src = ? ORDER BY ord", (src,))
    return [(dst, n) for dst, n in rows]


def test_a_moved_note_linked_by_its_alias_is_no_second_candidate(make_cfg: Any, tmp_path: Path) -> None:
    """A folder renamed whose note links to itself by its alias: the new note's link was
    resolved while the old key was still indexed (deletions come after the new notes), and the
    deletion resolved again only the links named by the old file name, so the link said
    "ambiguous: 2" for good (a fresh index says 1)."""
    v = tmp_path / "v"
    text = (
        "---\naliases: [Interpreting web pages]\n---\n# Interpreter\n\n"
        "See [[Interpreting web pages#Templates]].\n"
    )
    write(v / "fr/Interpreter.md", text)
    write(v / "Other.md", "# Other\n\nSee [[Interpreting web pages]].\n")
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        assert _candidates(h, "vault/fr/Interpreter") == [("vault/fr/Interpreter", 1)]
        (v / "fr").rename(v / "fr-old")
        h.sweep()
        assert _candidates(h, "vault/fr-old/Interpreter") == [("vault/fr-old/Interpreter", 1)]
        assert _candidates(h, "vault/Other") == [("vault/fr-old/Interpreter", 1)]
    finally:
        h.close()


def test_an_alias_dropped_leaves_the_links_it_made_ambiguous(make_cfg: Any, tmp_path: Path) -> None:
    """Two notes with one alias, a link by it (2 candidates); one drops the alias: the link has
    one candidate again (it kept counting the note that no longer answers to the name)."""
    v = tmp_path / "v"
    write(v / "A.md", "---\naliases: [Harbour]\n---\n# A\n\nText a.\n")
    write(v / "Sub/B.md", "---\naliases: [Harbour]\n---\n# B\n\nText b.\n")
    write(v / "C.md", "# C\n\nSee [[Harbour]].\n")
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        assert [n for _, n in _candidates(h, "vault/C")] == [2]
        write(v / "Sub/B.md", "# B\n\nText b, no alias now.\n")
        h.sweep()
        assert _candidates(h, "vault/C") == [("vault/A", 1)]
    finally:
        h.close()


def test_a_search_does_not_wait_for_every_link_to_be_resolved(linked: Any, monkeypatch: Any) -> None:
    """Resolving every link (a start's first sweep ends) holds the manifest a page at a time: a
    search that arrives part-way is answered then, not after the last link (it waited 7 s)."""
    import threading
    from dataclasses import replace

    from sidecar.notes import links as links_mod
    from sidecar.search.query import Filters
    from sidecar.search.request import SearchRequest
    from sidecar.search.retrieval import Retriever

    h, _v = linked
    with h.stores.manifest.transaction() as db:
        edit_links(db, "UPDATE links SET dst = NULL, candidates = 0")  # all to be resolved again
    monkeypatch.setattr(links_mod, "PAGE_LINKS", 5, raising=False)
    retriever = Retriever(h.stores, h.slot, replace(h.cfg.search, link_lift=0.4), h.cfg.recall)
    req = SearchRequest("sync", 20, 0.0, None, None, Filters())
    answered = threading.Event()
    hits: list[Any] = []
    seen: list[bool] = []
    resolve = Resolver.resolve
    calls = 0

    def resolving(self: Resolver, target: str, src: str) -> tuple[str | None, int]:
        nonlocal calls
        calls += 1
        if calls == 8:  # on the second page: a search comes in
            threading.Thread(target=lambda: (hits.extend(retriever.search(req).hits), answered.set())).start()
            # A bound for the old code, which held the manifest until the end (never reached
            # otherwise: the search needs a few ms).
            seen.append(answered.wait(30))
        return resolve(self, target, src)

    monkeypatch.setattr(Resolver, "resolve", resolving)
    h.indexer.writer.resolve_all_links()
    answered.wait(30)
    assert seen == [True]
    assert any(hit.reference == "vault/Sync" for hit in hits)
    # Every page resolved as one pass over all links did.
    assert {k: _counts(h).get(k, 0) for k in EXPECTED} == EXPECTED


def test_resolving_every_link_waits_for_searches_a_bounded_time(linked: Any, monkeypatch: Any) -> None:
    """The write lock is held from the first page to the last: a wait of its own per page for the
    searches in flight (0.5 s each, 51 pages at 102,000 links) kept memory writes waiting 25 s
    more, and a search waiting for that lock (an idle inbox rebuilt) made every page wait in full.
    The waits of a whole run stay within a small budget however many pages there are."""
    from sidecar.index import writes
    from sidecar.notes import links as links_mod

    h, _v = linked
    with h.stores.manifest.transaction() as db:
        edit_links(db, "UPDATE links SET dst = NULL, candidates = 0")
        links = db.execute("SELECT count(*) FROM links").fetchone()[0]
    monkeypatch.setattr(links_mod, "PAGE_LINKS", 1)  # a page per link: many pages
    waits: list[float] = []

    class Busy:
        """A search always in flight: every wait lasts as long as it is allowed to."""

        def yield_to(self, max_wait: float) -> float:
            waits.append(max_wait)
            return max_wait

    monkeypatch.setattr(writes, "FOREGROUND", Busy())
    monkeypatch.setattr(writes, "RERESOLVE_YIELD_S", 0.2, raising=False)  # 4 pages' waits, of 23 pages
    h.indexer.writer.resolve_all_links()
    assert links == 23 and waits  # the searches in flight were waited for, at first
    assert sum(waits) <= 0.2 + 1e-9
    assert max(waits) <= writes.RERESOLVE_PAGE_YIELD_S
    assert {k: _counts(h).get(k, 0) for k in EXPECTED} == EXPECTED


def _graph_answers(h: Harness) -> dict[str, Any]:
    """Every answer the link graph gives about every note: links, backlinks, related notes, the
    lift in ranking, status's totals."""
    from sidecar.notes.links import cited_by

    read = h.stores.manifest.read
    graph = LinkGraph(read)
    keys = [r[0] for r in read("SELECT key FROM files ORDER BY key")]
    return {
        "links": {k: graph.links_of(k) for k in keys},
        "backlinks": {k: graph.backlinks(k) for k in keys},
        "agent": {k: (graph.links_of(k, "codex"), graph.backlinks(k, "codex")) for k in keys},
        "related": {k: graph.related(k, 10) for k in keys},
        "unresolved": graph.unresolved(),
        "totals": graph.totals(),
        "counts": graph.backlink_counts(),
        "cited": cited_by(read, keys),
    }


def test_a_link_keeps_no_copy_of_its_notes_paths(tmp_path: Path, make_cfg: Any) -> None:
    """A link costs about as much however long the paths of its note and its target are: each
    note's key is kept once, not in every row of its links and again in the index on each (about
    440 bytes a link at 10,000 notes, most of the link graph's 23.5 MB)."""
    folder = "/".join(["A rather long folder name, as a vault grows them"] * 3)
    v = tmp_path / "v"
    for i in range(20):
        others = " ".join(f"[[Note {j}]]" for j in range(20) if j != i)
        write(v / folder / f"Note {i}.md", f"# Note {i}\n\n{others} [[Nowhere {i}]]\n")
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        assert LinkGraph(h.stores.manifest.read).totals() == {"links": 400, "unresolved": 20}
        stored = h.stores.manifest.read(
            "SELECT sum(payload) FROM dbstat WHERE name LIKE 'link%' OR name LIKE 'sqlite_autoindex_link%'"
        )[0][0]
    finally:
        h.close()
    key = len(f"vault/{folder}/Note 10")
    assert stored / 400 < key / 2


def _as_schema_5(path: Path) -> list[tuple[Any, ...]]:
    """The manifest at ``path`` as schema 5 kept its links (one table, keys as text); its rows."""
    from tests.index_helpers import as_old_links

    db = sqlite3.connect(path)
    as_old_links(db)
    db.execute("PRAGMA user_version=5")
    db.commit()
    rows = db.execute("SELECT * FROM links ORDER BY src, ord").fetchall()
    db.close()
    return rows


def test_a_schema_5_index_moves_its_links_in_place_and_answers_as_before(linked: Any) -> None:
    """The links of an index of the version before move to the smaller tables at the first start:
    every answer stays, no note is read or embedded again, and the graph follows changes after."""
    from sidecar.stores.versions import MANIFEST_SCHEMA, manifest_schema

    h, v = linked
    before = _graph_answers(h)
    cfg = h.cfg
    h.close()
    path = cfg.index_dir / "manifest.sqlite"
    assert _as_schema_5(path)
    h2 = Harness(cfg, FakeEmbedder())
    try:
        assert manifest_schema(path) == MANIFEST_SCHEMA
        assert h2.stores.manifest.read("SELECT type FROM sqlite_master WHERE name = 'links'") == [("view",)]
        assert _graph_answers(h2) == before
        assert h2.sweep()["changed"] == 0 and h2.vectors.embedded == 0
        assert _graph_answers(h2) == before
        write(v / "Missing page.md", "# Missing page\n\nHere now.\n")
        (v / "Plugins").rename(v / "Extensions")
        h2.sweep()
        home = {link["target"] for link in LinkGraph(h2.stores.manifest.read).links_of("vault/Home")}
        assert "vault/Missing page" in home and "vault/Plugins/Audio recorder" not in home
        back = LinkGraph(h2.stores.manifest.read).backlinks("vault/Sync")
        assert "vault/Extensions/Audio recorder" in {b["source"] for b in back}
    finally:
        h2.close()
    h.stores = h2.stores  # the fixture closes these again (a no-op)


def test_a_full_disk_serves_a_schema_5_index_read_only_and_the_next_start_upgrades_it(
    linked: Any,
) -> None:
    """A start on a full disk serves the index read-only: a schema-5 index, whose upgrade needs
    room to move its links, is read as it is (every link answer as before, nothing written to
    its folder), and the next writable start upgrades it. It was refused: no answers at all."""
    from types import SimpleNamespace

    from sidecar.daemon.compose import build_read_only
    from sidecar.model.embedder import EmbedderSlot
    from sidecar.stores.versions import MANIFEST_SCHEMA, manifest_schema
    from tests.index_helpers import snapshot

    h, _v = linked
    before = _graph_answers(h)
    cfg = h.cfg
    h.close()
    path = cfg.index_dir / "manifest.sqlite"
    assert _as_schema_5(path)
    files = snapshot(cfg.index_dir)
    parts = build_read_only(cfg, EmbedderSlot())
    try:
        assert _graph_answers(SimpleNamespace(stores=parts.stores)) == before  # type: ignore[arg-type]
        assert parts.stores.bm25.search("Home", 5)
    finally:
        parts.stores.close()
    assert snapshot(cfg.index_dir) == files
    assert manifest_schema(path) == 5
    h2 = Harness(cfg, FakeEmbedder())
    try:
        assert manifest_schema(path) == MANIFEST_SCHEMA
        assert _graph_answers(h2) == before
    finally:
        h2.close()
    h.stores = h2.stores


def test_an_upgrade_killed_while_it_moves_the_links_leaves_the_index_as_it_was(linked: Any) -> None:
    """A kill -9 part-way through moving the links leaves the file as the version before wrote it
    (its table whole, its schema), which that version still opens; the next start moves them."""
    import subprocess
    import sys

    from sidecar.stores.versions import MANIFEST_SCHEMA, manifest_schema

    h, _v = linked
    before = _graph_answers(h)
    cfg = h.cfg
    h.close()
    path = cfg.index_dir / "manifest.sqlite"
    rows = _as_schema_5(path)
    killed = (
        "import os, sys\nfrom pathlib import Path\nfrom sidecar.notes import links\n"
        "from sidecar.stores.manifest import Manifest\nreal = links.put_back\n"
        "def dying(*args):\n    real(*args)\n    os._exit(9)\n"
        "links.put_back = dying\nManifest(Path(sys.argv[1]))\n"
    )
    command = [sys.executable, "-c", killed, str(path)]
    done = subprocess.run(command, check=False, capture_output=True, timeout=120)
    assert done.returncode == 9, done.stderr
    assert manifest_schema(path) == 5
    db = sqlite3.connect(path)
    try:
        assert db.execute("SELECT type FROM sqlite_master WHERE name = 'links'").fetchall() == [("table",)]
        assert db.execute("SELECT * FROM links ORDER BY src, ord").fetchall() == rows
    finally:
        db.close()
    h2 = Harness(cfg, FakeEmbedder())
    try:
        assert manifest_schema(path) == MANIFEST_SCHEMA
        assert _graph_answers(h2) == before
    finally:
        h2.close()
    h.stores = h2.stores


def test_no_key_is_kept_that_no_link_names(linked: Any) -> None:
    """The keys of notes renamed, deleted or no longer linked leave the graph with their links:
    a vault renamed for years does not keep every path it ever had."""
    h, v = linked
    (v / "Plugins").rename(v / "Extensions")
    (v / "A" / "Index.md").unlink()
    write(v / "Callouts.md", "# Callouts\n\nNo links now.\n")  # linked to: kept
    h.sweep()
    h.indexer.writer.resolve_all_links()
    read = h.stores.manifest.read
    unnamed = read(
        "SELECT key FROM link_keys k WHERE NOT EXISTS (SELECT 1 FROM link_rows WHERE src = k.id) "
        "AND NOT EXISTS (SELECT 1 FROM link_rows WHERE dst = k.id)"
    )
    assert unnamed == []
    keys = {r[0] for r in read("SELECT key FROM link_keys")}
    assert not keys & {"vault/Plugins/Audio recorder", "vault/A/Index"}
    assert "vault/Extensions/Audio recorder" in keys
