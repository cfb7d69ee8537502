"""Chunking: heading-aware, sized in tokens, overlapping, front matter parsed, links readable."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Sequence

import pytest

from sidecar.config import load_config
from sidecar.model.embedder import load_model
from sidecar.notes.chunking import chunk_note
from sidecar.notes.frontmatter import aliases_of, parse_front_matter
from sidecar.notes.linktext import extract_links
from sidecar.notes.markdown import mostly_data, readable_links


def words(texts: Sequence[str]) -> list[int]:
    return [len(t.split()) for t in texts]


def test_heading_path_and_line_ranges() -> None:
    """Each chunk knows its heading path and 1-based line range."""
    text = "# Boat\n\nintro line\n\n## Engine\n\nspark plugs\n\n### Fuel\n\ndiesel only\n"
    note = chunk_note(text, title="Boat", count_tokens=words)
    by_text = {c.text.splitlines()[-1]: c for c in note.chunks}
    assert by_text["intro line"].headings == ("Boat",)
    assert by_text["spark plugs"].headings == ("Boat", "Engine")
    assert by_text["diesel only"].headings == ("Boat", "Engine", "Fuel")
    fuel = by_text["diesel only"]
    assert (fuel.start_line, fuel.end_line) == (9, 11)
    # The heading path without the H1 that repeats the title; the heading line not again.
    assert fuel.embed_text == "Boat\nEngine › Fuel\ndiesel only"
    assert fuel.text == "### Fuel\ndiesel only"


def test_chunks_never_exceed_budget_and_overlap() -> None:
    """A long section is cut into chunks within max_tokens that share about 20 % with the next one."""
    paragraphs = "\n\n".join(f"paragraph {i} " + "word " * 18 for i in range(40))
    note = chunk_note(
        f"# Long\n\n{paragraphs}\n", title="Long", count_tokens=words, max_tokens=100, overlap=0.2
    )
    assert len(note.chunks) > 5
    assert all(c.tokens <= 100 for c in note.chunks)
    for a, b in zip(note.chunks, note.chunks[1:], strict=False):
        assert b.start_line <= a.end_line, "adjacent chunks overlap"
        assert b.start_line > a.start_line, "chunks advance"


def test_the_overlap_keeps_its_line_breaks_within_the_chunks_lines() -> None:
    """The words a chunk carries over from the one before keep their line breaks and lie within
    the chunk's lines (they were glued into one line, a callout's '>' in the middle, and placed on
    the previous piece's last line, so the chunk's lines missed its first words)."""
    steps = [
        f"> Step {i} starts here. It runs for a while and then stops.\n"
        f"> Check step {i} twice before the next one. Then write it down."
        for i in range(12)
    ]
    text = "# Runbook\n\n" + "\n\n".join(steps) + "\n"
    note = chunk_note(text, title="Runbook", count_tokens=words, max_tokens=60, overlap=0.3)
    lines = text.split("\n")
    assert len(note.chunks) > 3
    carried = 0
    for a, b in zip(note.chunks, note.chunks[1:], strict=False):
        shown = lines[b.start_line - 1 : b.end_line]
        assert all(any(part in line for line in shown) for part in b.text.split("\n")), b
        carried += b.start_line <= a.end_line
    assert carried == len(note.chunks) - 1


def test_single_huge_line_is_split() -> None:
    """One 5,000-word line (no structure at all) still yields chunks within the budget."""
    note = chunk_note("word " * 5000, title="Blob", count_tokens=words, max_tokens=64)
    assert all(c.tokens <= 64 for c in note.chunks)
    assert sum(len(c.text.split()) for c in note.chunks) >= 5000


def test_pasted_data_is_keyword_indexed_but_not_embedded() -> None:
    """Chunks that are mostly base64 or hex carry no language: kept for BM25, never sent to the model."""
    blob = base64.b64encode(os.urandom(20_000)).decode()
    text = f"# Photo\n\nThe harbour at dawn, taken from the pier.\n\n{blob}\n\n## Notes\n\nShot on film.\n"
    note = chunk_note(text, title="Photo", count_tokens=lambda ts: [len(t) // 4 + 1 for t in ts])
    data = [c for c in note.chunks if not c.embed]
    assert len(data) > 10 and all(c.text.strip() in blob for c in data)
    assert sum(len(c.text) for c in data) >= len(blob) * 0.9
    embedded = " ".join(c.text for c in note.chunks if c.embed)
    assert "harbour at dawn" in embedded and "Shot on film." in embedded


def test_data_detection_spares_prose_links_and_code() -> None:
    """Links, long words, code and a digest inside a sentence stay text; digests and base64 do not."""
    digest = hashlib.sha256(b"x").hexdigest()
    for text in (
        "See https://docs.example.org/en/latest/getting-started/installation.html?lang=en#linux "
        "for the install steps and https://example.com/a/b for the rest.",
        "Donaudampfschifffahrtsgesellschaftskapitänswitwenrentenversicherung is a long word indeed.",
        "def load(path):\n    return json.loads(Path(path).read_text(encoding='utf-8'))\n",
        f"The release tarball has the checksum {digest}, check it before you unpack the archive.",
    ):
        assert not mostly_data(text), text
    assert mostly_data("\n".join(hashlib.sha256(bytes([i])).hexdigest() for i in range(20)))
    assert mostly_data("data:image/png;base64," + base64.b64encode(os.urandom(300)).decode())


def test_front_matter_parsed_not_embedded() -> None:
    """Tags, aliases and description come from YAML; the raw YAML is not in any chunk."""
    text = (
        "---\ntitle: Audio recorder\naliases: [voice memo]\ntags: [plugin, Audio]\n"
        "description: Record audio.\ncreated: 2026-01-05\n---\nBody text with #inline-tag here.\n"
    )
    note = chunk_note(text, title="file-name", count_tokens=words)
    assert note.title == "Audio recorder"
    assert note.aliases == ("voice memo",)
    assert note.tags == ("plugin", "audio", "inline-tag")
    assert note.front_matter["created"] == "2026-01-05"
    assert all("aliases:" not in c.embed_text and "tags:" not in c.text for c in note.chunks)
    assert "Record audio." in note.chunks[0].embed_text
    assert note.chunks[0].start_line == 8


def test_aliases_are_read_beside_the_title_by_the_model() -> None:
    """The first section's embed text names the note's aliases after its title (an alias repeating
    the title is not said twice), as a front-matter-only note's does: a question naming the note
    by an alias ("das NAS") is near it as one naming its title is. Later sections say the title
    alone, as they leave out the description; hits show the note's lines."""
    text = (
        "---\naliases: [NAS, Netzwerkspeicher, synology ds920+]\n---\n# Synology DS920+\n\nRAID 5.\n\n"
        "## Updates\n\nAm Wochenende.\n"
    )
    note = chunk_note(text, title="Synology DS920+", count_tokens=words)
    assert [c.embed_text for c in note.chunks] == [
        "Synology DS920+\nNAS, Netzwerkspeicher\nRAID 5.",
        "Synology DS920+\nUpdates\nAm Wochenende.",
    ]
    assert note.chunks[0].text == "# Synology DS920+\nRAID 5."


def test_aliases_are_read_in_the_first_chunk_only_after_the_description() -> None:
    """A note without headings is one section of many chunks: its aliases are said in its first
    chunk only (said in every chunk they crowded the text the model reads), after the
    description, which every chunk of the first section says as before; no chunk exceeds the
    budget, the first one too when its first paragraph is one long line."""
    body = "\n\n".join(f"Absatz {i} " + "wort " * 30 for i in range(12))
    text = f"---\naliases: [NAS, Netzwerkspeicher]\ndescription: Das Gerät im Keller.\n---\n{body}\n"
    note = chunk_note(text, title="Synology", count_tokens=words, max_tokens=80)
    assert len(note.chunks) > 3
    lead = "Synology\nDas Gerät im Keller.\n"
    assert note.chunks[0].embed_text.startswith(lead + "NAS, Netzwerkspeicher\nAbsatz 0")
    for c in note.chunks[1:]:
        assert c.embed_text.startswith(lead), c.embed_text
        assert "Netzwerkspeicher" not in c.embed_text
    assert all(c.tokens <= 80 and c.tokens == len(c.embed_text.split()) for c in note.chunks)
    long_line = "---\naliases: [NAS]\n---\n" + "wort " * 75 + "\n\nEnde.\n"
    first = chunk_note(long_line, title="Synology", count_tokens=words, max_tokens=80).chunks
    assert first[0].embed_text.startswith("Synology\nNAS\nwort")
    assert all(c.tokens <= 80 and c.tokens == len(c.embed_text.split()) for c in first)
    assert "NAS" not in "".join(c.embed_text for c in first[1:])


def test_a_long_alias_list_is_counted_once_and_cut() -> None:
    """A note of 2,000 sections with 60 KB of aliases: the tokenizer sees its aliases in a few
    texts of a few hundred characters (the first chunk's prefix), not in every section's prefix
    (12 s and 1.8 GB for one note); the first chunk names the first aliases, no other chunk any."""
    names = [f"Zweitname{i:04d}" for i in range(4000)]
    sections = "\n\n".join(f"## Abschnitt {i}\n\nText {i}." for i in range(2000))
    text = "---\naliases: [" + ", ".join(names) + "]\n---\n" + sections + "\n"
    asked: list[str] = []

    def counting(texts: Sequence[str]) -> list[int]:
        asked.extend(texts)
        return words(texts)

    note = chunk_note(text, title="Viele Namen", count_tokens=counting)
    assert len(note.aliases) == 4000 and len(note.chunks) == 2000
    named = [t for t in asked if "Zweitname" in t]
    assert 0 < len(named) <= 4 and max(map(len, named)) <= 600
    assert note.chunks[0].embed_text.startswith("Viele Namen\nAbschnitt 0\nZweitname0000, Zweitname0001")
    assert not any("Zweitname" in c.embed_text for c in note.chunks[1:])


def test_a_description_at_the_length_limit_stays_whole_beside_aliases() -> None:
    """The description and aliases are cut to a few hundred characters before the tokenizer sees
    them: a description that just fits stays whole in every chunk, the first one too (the alias
    list goes where the two together are too long)."""
    description = "wort " * 99 + "endes"
    assert len(description) == 500
    text = f"---\naliases: [NAS]\ndescription: {description}\n---\n" + "\n\n".join(["Text hier."] * 100)
    tenth = lambda ts: [len(t.split()) // 10 + 1 for t in ts]  # noqa: E731
    note = chunk_note(text, title="t", count_tokens=tenth, max_tokens=45)
    assert len(note.chunks) > 1
    assert all(c.embed_text.startswith(f"t\n{description}\n") for c in note.chunks)


def test_odd_aliases_are_names_on_one_line() -> None:
    """An unquoted yes is the alias "yes" as typed (it read "True", then none), a link names what
    it shows, a line break is a space."""
    fm = '---\naliases: [yes, 2024, "[[Bar]]", "[[Ordner/Baz.md#Kopf|Qux]]", "zwei\\nZeilen"]\n---\nText.\n'
    got = chunk_note(fm, title="t", count_tokens=words).aliases
    assert got == ("yes", "2024", "Bar", "Qux", "zwei Zeilen")
    one_string = chunk_note("---\naliases: '[[Foo]], x'\n---\n", title="t", count_tokens=words)
    assert one_string.aliases == ("Foo", "x")


def test_an_unquoted_wiki_link_is_an_alias_as_a_quoted_one() -> None:
    """``aliases: [[Bar]]`` as Obsidian's users write it (YAML reads a list in a list), also as a
    list item, with a shown name, or under the older ``alias`` key: the link's name is the alias,
    as when it is quoted, and the first chunk says it. A list of two names in it is no link, a
    mapping no name. Was: no alias at all."""
    cases = {
        "aliases: [[Bar]]": ("Bar",),
        'aliases: "[[Bar]]"': ("Bar",),
        "aliases: [[Bar|Shown]]": ("Shown",),
        "aliases:\n  - [[Ordner/Baz.md#Kopf]]\n  - Qux": ("Baz", "Qux"),
        "alias: [[Bar]]": ("Bar",),
        "aliases: [[a, b]]": (),
        "aliases: [[Bar: x]]": (),
    }
    for fm, aliases in cases.items():
        note = chunk_note(f"---\n{fm}\n---\nText.\n", title="Foo", count_tokens=words)
        assert note.aliases == aliases, fm
        named = [", ".join(aliases)] if aliases else []
        assert note.chunks[0].embed_text == "\n".join(["Foo", *named, "Text."])


def test_an_unquoted_link_names_only_the_text_written_one_level_deep() -> None:
    """In an unquoted ``[[...]]`` YAML 1.1 reads numbers, times and infinities (``[[010]]`` was 8,
    ``[[12:30]]`` 750 in base 60): the name is the text written. Only a link as YAML reads it (a
    list of one list of one text), as the value or an item of it, is one: lists deeper down or of
    other shapes are none. A plain list of numbers keeps its names (``aliases: [2024]``), a date
    in the link its text, an empty link none."""
    cases = {
        "aliases: [[010]]": ("010",),
        "aliases: [[12:30]]": ("12:30",),
        "aliases: [[0x1F]]": ("0x1F",),
        "aliases: [[1_000]]": ("1_000",),
        "aliases: [[1.50]]": ("1.50",),
        "aliases: [[.inf]]": (".inf",),
        "aliases: [[2024]]": ("2024",),
        "aliases: [[true]]": ("true",),
        "aliases: [[null]]": (),
        "aliases: [[[[Deep]]]]": (),
        "aliases: [[[Bar]]]": ("Bar",),
        "aliases:\n  - [[[Deep]]]": (),
        "aliases: [[Bar], [Baz]]": (),
        "aliases: [[Bar], Qux]": ("Qux",),
        "aliases: [[2024-01-05]]": ("2024-01-05",),
        "aliases: [[[Bar]], [[Baz]]]": ("Bar", "Baz"),
        "aliases: [2024]": ("2024",),
    }
    for fm, aliases in cases.items():
        assert aliases_of(parse_front_matter(fm)[0]) == aliases, fm


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("010", "010"),
        ("1e3", "1e3"),
        ("1.50", "1.50"),
        ("yes", "yes"),
        ("Off", "Off"),
        ("0x1F", "0x1F"),
        ("2024-01-01", "2024-01-01"),
        ("2024-01-01 10:00:00", "2024-01-01 10:00:00"),
        ("12:30", "12:30"),
    ],
)
def test_aliases_tags_and_title_are_read_as_written(written: str, read: str) -> None:
    """``aliases: [010]`` named the note "8" (YAML 1.1 reads an unquoted 010 as octal), ``1e3``
    and ``1.50`` were numbers written back otherwise, ``yes`` a yes/no: an alias, a tag or a
    title is the text the user typed, in any case of the key, in a list or alone. Other keys
    keep their values (a count stays a number), and an empty or null value names nothing."""
    text = f"---\nAliases: [{written}]\ntags: [{written}]\nTitle: {written}\ncount: 010\n---\nText.\n"
    note = chunk_note(text, title="t", count_tokens=words)
    assert note.aliases == (read,) and note.title == read, note
    assert note.tags == (read.lower(),), note.tags
    assert note.front_matter["count"] == 8
    empty = chunk_note("---\naliases:\ntags: ~\ntitle: null\n---\nText.\n", title="t", count_tokens=words)
    assert (empty.aliases, empty.tags, empty.title) == ((), (), "t")


def test_a_value_a_name_shares_through_an_anchor_keeps_its_reading_under_the_other_key() -> None:
    """A node anchored under another key and repeated under a name key (``title: *d``) is read
    as written there only: the date stays a time, the count a number, a shared list's items
    numbers and yes/no under its own key."""
    fm, problem = parse_front_matter(
        "date: &d 2024-01-01 10:00:00\ncount: &n 010\nlist: &l [010, yes]\n"
        "title: *d\naliases: [*n]\ntags: *l\nagain: *l\n"
    )
    assert problem is None
    assert fm["date"] == "2024-01-01T10:00:00" and fm["title"] == "2024-01-01 10:00:00"
    assert fm["count"] == 8 and fm["aliases"] == ["010"]
    assert fm["list"] == fm["again"] == [8, True] and fm["tags"] == ["010", "yes"]


def test_a_yaml_alias_repeated_in_a_name_list_is_refused() -> None:
    """An anchored list repeated many times in ``aliases`` (a YAML alias bomb), whose values are
    read as written: the front matter is still refused by its node budget."""
    fm = "a: &a [" + ", ".join(["x"] * 2000) + "]\naliases: [" + ", ".join(["*a"] * 2000) + "]"
    assert parse_front_matter(fm) == ({}, "front matter is too large or too deeply aliased")


def test_links_comments_and_code_hold_no_tags() -> None:
    """A heading link, a link anchor, indented code and Obsidian or HTML comments (over lines too)
    are no tags; tags around them, nested and umlaut tags still are (also in a link's text, as in
    Obsidian), numbers, URL fragments and an escaped ``\\#`` not."""
    text = (
        "Siehe [[#Einkauf]], [[Plan#Kosten|#alias]] und [Abschnitt](#kosten).\n\n"
        "    #include <stdio.h>\n\n"
        "%% #entwurf interner Kommentar %%\nA %% over\n#lines\n%% #echt\n"
        "<!-- #html\n#more --> `#code` ``a ` #spanned`` #projekt/sub #Küche #2024 https://x.org/p#frag\n"
        "Escaped \\#nottag, linked [#Gentoo](https://gentoo.org).\n"
    )
    note = chunk_note(text, title="t", count_tokens=words)
    assert note.tags == ("echt", "projekt/sub", "küche", "gentoo")


def test_an_impossible_date_keeps_the_rest_of_the_front_matter() -> None:
    """A date YAML cannot build (month 13) stays text; title, tags and aliases still count."""
    text = "---\ntitle: Boat log\ncreated: 2020-13-45\ntags: [boat]\naliases: [log]\n---\nBody.\n"
    note = chunk_note(text, title="file-name", count_tokens=words)
    assert note.front_matter_error is None and note.front_matter["created"] == "2020-13-45"
    assert (note.title, note.tags, note.aliases) == ("Boat log", ("boat",), ("log",))


def test_broken_front_matter_keeps_the_body() -> None:
    """Invalid YAML is reported and the note is still chunked."""
    note = chunk_note("---\ntags: [unclosed\n---\nStill here.\n", title="t", count_tokens=words)
    assert note.front_matter == {} and note.front_matter_error
    assert "Still here." in note.chunks[0].text


def test_a_key_given_twice_is_front_matter_that_does_not_read() -> None:
    """A second ``tags:`` line silently dropped the first one's tags (YAML loaders keep the last
    key); Obsidian's properties refuse such a block, and so does this, naming the key, so status
    lists the note. A merge key ("<<") that a later key overrides is fine."""
    note = chunk_note(
        "---\ntags: [boat]\ntitle: Log\ntags: [sea]\n---\nBody.\n", title="t", count_tokens=words
    )
    assert note.front_matter == {} and note.front_matter_error is not None
    assert "'tags' given twice" in note.front_matter_error
    nested = chunk_note("---\nx:\n  a: 1\n  a: 2\n---\nBody.\n", title="t", count_tokens=words)
    assert nested.front_matter_error is not None and "'a' given twice" in nested.front_matter_error
    merged = chunk_note(
        "---\nbase: &b {kind: draft}\ntitle: Log\nmeta:\n  <<: *b\n  kind: final\n---\nBody.\n",
        title="t",
        count_tokens=words,
    )
    assert merged.front_matter_error is None and merged.front_matter["meta"] == {"kind": "final"}


def test_property_keys_in_any_case_and_alias_strings_split_by_commas() -> None:
    """``Tags:``/``ALIASES:``/``Title:`` count as Obsidian reads them; an exactly written key wins;
    an alias string is split at commas only (it was split at every space: "My Alias" made two)."""
    text = "---\nTitle: Log\nTAGS: [a, b]\nAliases: My Alias, Other One\n---\nBody.\n"
    note = chunk_note(text, title="t", count_tokens=words)
    assert (note.title, note.tags, note.aliases) == ("Log", ("a", "b"), ("My Alias", "Other One"))
    both = chunk_note("---\nTags: [upper]\ntags: [lower]\n---\nBody.\n", title="t", count_tokens=words)
    assert both.tags == ("lower",)


def test_yaml_alias_bomb_is_contained() -> None:
    """A billion-laughs front matter is refused by the node budget, not expanded."""
    bomb = (
        "---\na: &a [x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 4) + "]\n" for i in range(12)
        )
        + "---\nbody\n"
    )
    note = chunk_note(bomb, title="bomb", count_tokens=words)
    assert note.front_matter == {} and note.front_matter_error


def test_bom_is_stripped() -> None:
    """A BOM in front of --- does not hide the front matter."""
    note = chunk_note("\ufeff---\ntitle: Real\n---\nbody\n", title="x", count_tokens=words)
    assert note.title == "Real"


def test_wikilinks_become_readable() -> None:
    """[[target|alias]] reads as alias, [[a/b#h]] as 'b › h', image embeds vanish."""
    assert readable_links("see [[Projects/Boat|the boat]] now") == "see the boat now"
    assert readable_links("[[Boat#Engine]]") == "Boat › Engine"
    assert readable_links("![[diagram.png]] and ![[Other note]]") == " and Other note"
    note = chunk_note("Link to [[Garden|my garden]].\n", title="t", count_tokens=words)
    assert note.chunks[0].text == "Link to my garden."


def test_empty_note_is_findable_by_title() -> None:
    """A note with only front matter still yields one chunk carrying its title."""
    note = chunk_note("---\ntags: [x]\n---\n", title="Empty idea", count_tokens=words)
    assert len(note.chunks) == 1 and note.chunks[0].embed_text.startswith("Empty idea")
    # Its lines are the front matter's (they were "4-3", after the last line); an empty note's line 1.
    assert (note.chunks[0].start_line, note.chunks[0].end_line) == (1, 3)
    note = chunk_note("---\ntitle: T\n---\n\n\n", title="x", count_tokens=words)
    assert (note.chunks[0].start_line, note.chunks[0].end_line) == (1, 3)
    for empty in ("", "\n\n"):
        note = chunk_note(empty, title="Empty", count_tokens=words)
        assert (note.chunks[0].start_line, note.chunks[0].end_line) == (1, 1)


def test_heading_only_sections_glue_to_the_next() -> None:
    """A heading directly followed by a sub-heading is not a chunk of its own."""
    note = chunk_note("# A\n## B\ntext\n", title="t", count_tokens=words)
    assert len(note.chunks) == 1
    assert note.chunks[0].text.startswith("# A")


def test_pathological_structure() -> None:
    """10,000 headings and deeply nested lists parse and chunk without error."""
    many = "".join(f"## h{i}\nx\n" for i in range(10_000))
    assert len(chunk_note(many, title="t", count_tokens=words).chunks) == 10_000
    nested = "".join("  " * i + "- item\n" for i in range(200))
    assert chunk_note(nested, title="t", count_tokens=words).chunks


def test_chunk_token_counts_add_up_to_the_model_tokenizers() -> None:
    """A chunk's count is its prefix's plus its pieces' (no second tokenizer pass over the note):
    exact, because the model's pre-tokenizer splits at whitespace and pieces are joined by line
    breaks. Checked with the real tokenizer on text that splits lines, words and scripts."""
    model = load_model(load_config(env={}))
    long_line = " ".join(f"Wort{i} über Straße, naïve café." for i in range(300))
    text = (
        "---\ntitle: Mixed\ndescription: A note to count.\n---\n# Top\n\n"
        + "\n\n".join(
            f"## Part {i}\n\nParagraph {i}: the quick brown fox, état, 東京都, Кириллица, عربى."
            for i in range(12)
        )
        + f"\n\n{long_line}\n\n```python\nprint('x' * 10)  # code\n```\n\n"
        + "| a | b |\n| --- | --- |\n| 1 | 2 |\n\n"
        + "x" * 500
        + "\n\n"
        + "https://example.com/"
        + "a1" * 80
        + "\n"
    )
    note = chunk_note(text, title="Mixed", count_tokens=model.count_tokens, max_tokens=64)
    assert len(note.chunks) > 10
    real = model.count_tokens([c.embed_text for c in note.chunks])
    assert [c.tokens for c in note.chunks] == real
    assert max(real) <= 64


def test_the_embed_text_says_each_line_once() -> None:
    """An H1 named like the note, a heading line under its own heading path and a lead paragraph
    that is the front matter's description are shown and keyword-indexed, but the model reads
    each of them once; a chunk of nothing but such lines still embeds them."""
    text = (
        "---\ndescription: Keep the boat running.\n---\n# Boat\n\nKeep the boat running.\n\n"
        "More about the hull.\n\n## Engine\n\nspark plugs\n"
    )
    note = chunk_note(text, title="Boat", count_tokens=words)
    first, engine = note.chunks
    assert first.embed_text == "Boat\nKeep the boat running.\nMore about the hull."
    assert "# Boat" in first.text and "Keep the boat running." in first.text
    assert engine.embed_text == "Boat\nEngine\nspark plugs" and engine.text == "## Engine\nspark plugs"
    assert engine.tokens == len(engine.embed_text.split())
    only = chunk_note("# Solo\n\nSolo\n", title="Solo", count_tokens=words).chunks[0]
    assert only.embed_text == "Solo\n# Solo\nSolo"


def test_comment_and_code_span_removal_read_as_their_definitions() -> None:
    """The linear scanners that blank comments and code spans give what the plain definitions
    (regular expressions, which took quadratic time on hostile notes) give, on random texts."""
    import random
    import re

    from sidecar.notes.markdown import without_code_spans, without_comments

    comments = re.compile(r"%%.*?%%|<!--.*?-->", re.S)
    spans = re.compile(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)")
    rng = random.Random(7)
    for _ in range(3000):
        text = "".join(
            rng.choice(["%%", "<!--", "-->", "a", "\n", "#t", " "]) for _ in range(rng.randint(0, 30))
        )
        assert without_comments(text) == comments.sub(" ", text), repr(text)
        line = "".join(rng.choice(["`", "``", "```", "a", " ", "#t"]) for _ in range(rng.randint(0, 30)))
        assert without_code_spans(line) == spans.sub(" ", line), repr(line)


def test_a_dash_line_inside_a_quoted_value_does_not_end_the_front_matter() -> None:
    """The inbox writes a value holding a "---" line as a quoted scalar, that line indented; the
    chunker's Markdown parser ended the block there, and the note lost its tags, title and
    description (a write said nothing). One rule now: the block ends at a "---" at a line's start."""
    import yaml

    fm = yaml.safe_dump({"description": "a\n---\ninjected: true\n---", "tags": ["injtag"], "title": "T"})
    text = f"---\n{fm}---\n# Body\n\nSee [[Other]].\n"
    assert "\n  ---\n" in text  # the shape that broke it
    note = chunk_note(text, title="file-name", count_tokens=words)
    assert note.front_matter_error is None and (note.title, note.tags) == ("T", ("injtag",))
    assert note.front_matter["description"] == "a\n---\ninjected: true\n---"
    assert all("injected" not in c.text for c in note.chunks)
    assert [link.target for link in extract_links(text)] == ["Other"]
    # A block without its closing line is no front matter; "..." does not close one.
    assert chunk_note("---\ntags: [x]\n...\nBody\n", title="t", count_tokens=words).tags == ()


def test_the_first_dash_line_closes_the_front_matter() -> None:
    """The first "---" line after the opening one ends the block: "---/---" is an empty block and
    what follows is body, a "---" rule included (the block ran to the third "---", and the rule,
    or every line up to a later rule, was lost from the chunks)."""
    shapes = {
        "---\n---\n---\nDreifach\n": ("---\nDreifach", 3, 4),
        "---\n---\nText\n---\nMehr\n": ("Text\n---\nMehr", 3, 5),
        "---\ntags: [a]\n---\n---\nX\n": ("---\nX", 4, 5),
        "---\n---\n---\n": ("---", 3, 3),
        "---\n": ("---", 1, 1),  # a lone rule opens no block
    }
    for text, chunk in shapes.items():
        note = chunk_note(text, title="t", count_tokens=words)
        assert [(c.text, c.start_line, c.end_line) for c in note.chunks] == [chunk], text
        assert note.front_matter_error is None, text
    empty = chunk_note("---\n---\n", title="Leer", count_tokens=words)
    assert [c.text for c in empty.chunks] == [""] and empty.front_matter == {}


def test_yaml_lines_after_an_empty_front_matter_block_are_body() -> None:
    """The block opens on line 1 and ends at the next "---" line: "---/---" is an empty block,
    and "title: x" and "tags: [a]" after it are body text, not keys (before, the block ran to
    the third "---" and they were read as front matter); the closing "---" after them a rule."""
    note = chunk_note("---\n---\ntitle: x\ntags: [a]\n---\nBody\n", title="t", count_tokens=words)
    assert note.front_matter == {} and note.tags == () and note.front_matter_error is None
    assert [(c.text, c.start_line, c.end_line) for c in note.chunks] == [
        ("title: x\ntags: [a]\n---\nBody", 3, 6)
    ]


def test_what_reading_view_does_not_show_as_text_is_not_indexed() -> None:
    """A plugin's data in comments (an Excalidraw drawing, Kanban settings), query fences
    (Dataview, Tasks, embedded search, Bases), inline queries, style sheets and the rest of an
    Excalidraw note but its text elements: no chunk text, no embedding, no tags (they were hits,
    and matched every question naming a folder: 'TASK FROM "Projekte"'). Code stays."""
    drawing = (
        "---\nexcalidraw-plugin: parsed\ntags: [excalidraw]\n---\n"
        "==⚠  Switch to EXCALIDRAW VIEW in the MORE OPTIONS menu of this document. ⚠==\n\n"
        "# Excalidraw Data\n## Text Elements\nLastverteiler Nordflügel ^a1b2c3\n\n"
        "Grundriss\nZwiebelturm ^Xy_9-kQ2\n\n"
        "Fläche m ^2\nBüro ^Qw3e4r5t\n\n"
        "## Element Links\ne1f2g3: [[Apfelbaum]]\n\n"
        "## Embedded Files\n4a2f: [[Screenshot.png]]\n\n"
        "%%\n## Drawing\n```compressed-json\nN4IgLgngDgpiBcIYA8DGBDANgSwCYCd0B3EAGhAD\n```\n%%\n"
    )
    note = chunk_note(drawing, title="Netzwerkplan.excalidraw", count_tokens=words)
    text = "\n".join(c.text for c in note.chunks)
    assert "Lastverteiler Nordflügel" in text and "Grundriss\nZwiebelturm" in text
    assert not any(w in text for w in ("Switch to EXCALIDRAW", "N4Ig", "Drawing", "4a2f", "compressed"))
    # The elements' ids and links list are no words of the drawing (the link stays a link: see
    # test_obsidian); an id ends an element's last line only, a "^2" within its text is text.
    assert not any(w in text for w in ("a1b2c3", "Xy_9-kQ2", "e1f2g3", "Qw3e4r5t"))
    assert "Fläche m ^2\nBüro" in text
    legacy = (
        "---\nexcalidraw-plugin: parsed\n---\n# Text Elements\nGartenhaus\n\n"
        '# Drawing\n```json\n{"strokeColor": 1}\n```\n'
    )
    assert "strokeColor" not in "".join(
        c.text for c in chunk_note(legacy, title="g", count_tokens=words).chunks
    )

    daily = (
        "# 2026-12-01\n\nMet Anna about the roof.\n\n"
        '```dataview\nTASK FROM "Projekte" WHERE !completed\n```\n\n'
        "```tasks\nnot done\n```\n\n"
        "Today is `= this.file.name` and `$= dv.pages().length` notes; `a == b`.\n\n"
        "<style>\n.card { color: #fafafa; }\n</style>\n\n![x](data:image/png;base64,"
        + "iVBORw0KGgo" * 20
        + ')\n\n%% kanban:settings\n{"kanban-plugin":"board"}\n%%\n\n```python\nprint(\'kept\')\n```\n'
    )
    daily += (
        "\nRun `npm i --force` first %%todo%% then `make`. Set `a`=5 and `b`=6.\n\n"
        "<style>\n.x { margin: 0 }\n\nStill here after an unclosed style.\n"
    )
    note = chunk_note(daily, title="2026-12-01", count_tokens=words)
    text = "\n".join(c.text for c in note.chunks)
    # code beside a comment, text between code spans, and what follows an unclosed <style> stay
    assert "Run `npm i --force` first" in text and "then `make`." in text and "todo" not in text
    assert "Set `a`=5 and `b`=6." in text
    assert "Still here after an unclosed style." in text
    assert "Met Anna about the roof." in text and "print('kept')" in text and "`a == b`" in text
    for junk in ("TASK FROM", "not done", "this.file.name", "dv.pages", "color:", "iVBORw0KGgo", "kanban"):
        assert junk not in text, junk
    assert "fafafa" not in note.tags and "data:…" in text


def test_a_long_tables_later_chunks_say_its_header_again() -> None:
    """A table cut over chunks names its columns in each (a later chunk's rows were numbers
    without their column names, for a reader and for the model); an embed's size is no text."""
    rows = "".join(
        f"| {i} | 2025-11-{i % 28 + 1:02d} | Beleg {i} | {i * 3},50 € | nein |\n" for i in range(60)
    )
    text = "# Ausgaben\n\n| Nr | Datum | Beleg | Betrag | Erstattet |\n|---|---|---|---|---|\n" + rows
    note = chunk_note(text, title="Ausgaben", count_tokens=words, max_tokens=120)
    assert len(note.chunks) > 3
    for c in note.chunks[1:]:
        assert c.text.startswith("| Nr | Datum | Beleg | Betrag | Erstattet |\n|---|---|---|---|---|\n| ")
        assert "Erstattet" in c.embed_text and c.tokens <= 120
    sized = chunk_note(
        "See ![[Sketch.excalidraw|400]] and ![[pic.png|640x480]].\n", title="t", count_tokens=words
    )
    assert sized.chunks[0].text == "See Sketch.excalidraw and ."


def test_a_line_cut_by_characters_is_cut_between_what_a_reader_sees_as_characters() -> None:
    """A long line without spaces (CJK, a blob) is cut where one visible character ends: an emoji
    family, a flag or a letter with combining marks stays whole (a piece ended in a dangling
    joiner and the next began with half a family)."""
    import regex

    from sidecar.notes.chunking import _split_chars

    family = "👨\u200d👩\u200d👧\u200d👦"
    text = ("旅行記" + family + "🇩🇪🇯🇵" + "e\u0301\u0323") * 60
    for budget in (7, 11, 20, 33):
        pieces = _split_chars(text, budget, lambda ts: [len(t) // 3 + 1 for t in ts])
        assert "".join(pieces) == text and len(pieces) > 1
        bounds = {m.end() for m in regex.finditer(r"\X", text)}
        at = 0
        for piece in pieces[:-1]:
            at += len(piece)
            assert at in bounds, (budget, piece[-4:])


def test_a_line_without_spaces_is_cut_without_a_tokenizer() -> None:
    """With no model loaded (keyword-only, or a model that failed), a line of 200,000 characters
    without a space counted as one word: one chunk of the whole line, returned whole by every
    answer. The estimate counts a long word by its length, so the chunker cuts it."""
    from sidecar.model.embedder import approx_token_count

    line = "a" * 200_000
    assert approx_token_count([line])[0] >= 200_000 // 4
    assert approx_token_count(["a few ordinary words here"]) == [7]  # ordinary text as before
    note = chunk_note(f"# Blob\n\n{line}\n", title="Blob", count_tokens=approx_token_count, max_tokens=200)
    assert len(note.chunks) > 100
    assert max(len(c.text) for c in note.chunks) <= 2_000
