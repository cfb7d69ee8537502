"""A keyword index of the layout before this one (2: a word is ``\\w+``, underscores at its edges
kept) is refilled in this version's layout beside it while it answers, then swapped in; a kill
or a stop leaves one index whole. Layout 3's word holds underscores only inside."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import index_and_close, search

_WAIT = 60.0  # a bound against a hang, never reached when the code works

_LAYOUT_2 = {"sidecar_text_2": None, "sidecar_en_2": "english", "sidecar_de_2": "german"}
_FIELDS_2 = {
    "title": "sidecar_text_2",
    "body": "sidecar_text_2",
    "body_en": "sidecar_en_2",
    "body_de": "sidecar_de_2",
}


@pytest.fixture
def underscores(tmp_path: Path) -> Path:
    """A vault whose words sit in Markdown's underscore emphasis, and a snake_case name."""
    v = tmp_path / "vault"
    write(v / "Rust.md", "# Rust\n\nThe crate's manifest is _Cargo.toml_ in the project folder.\n")
    write(v / "Mail.md", "# Mail\n\nDie Rechnung liegt in den __Anhänge__ der Mail vom Montag.\n")
    write(v / "Code.md", "# Code\n\nThe helper my_function parses the request body.\n")
    write(v / "Garden.md", "# Garden\n\nTomatoes need sun and water every day.\n")
    return v


def _analyzer(stem: str | None) -> Any:
    import tantivy

    builder = (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(r"[\w]+"))
        .filter(tantivy.Filter.remove_long(64))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
    )
    return (builder.filter(tantivy.Filter.stemmer(stem)) if stem else builder).build()


def _layout_2_index(cfg: Any) -> None:
    """The kept keyword index written anew as layout 2 wrote it (its analyzers' names and word,
    its layout file), from the manifest's chunks (the vault's: no memory yet)."""
    import sqlite3

    import tantivy

    from sidecar.stores.bm25_text import german_fold

    bm25 = cfg.index_dir / "bm25"
    shutil.rmtree(bm25)
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("chunk_id", stored=True, tokenizer_name="raw", index_option="basic")
    for name in ("key", "source", "agent"):
        sb.add_text_field(name, stored=False, tokenizer_name="raw", index_option="basic")
    for name, analyzer in _FIELDS_2.items():
        sb.add_text_field(name, stored=False, tokenizer_name=analyzer, index_option="freq")
    schema = sb.build()
    db = sqlite3.connect(cfg.index_dir / "manifest.sqlite")
    rows = db.execute(
        "SELECT c.chunk_id, c.key, f.source, f.title, c.text FROM chunks c JOIN files f USING (key) "
        "WHERE f.state = 'indexed' ORDER BY c.key, c.ord"
    ).fetchall()
    db.close()
    assert rows and not any(r[2] == "memory" for r in rows)
    pages: dict[str, list[Any]] = {}
    for row in rows:
        pages.setdefault(row[1], []).append(row)
    for part in ("chunks", "pages"):
        (bm25 / part).mkdir(parents=True)
        index = tantivy.Index(schema, path=str(bm25 / part), reuse=True)
        for name, stem in _LAYOUT_2.items():
            index.register_tokenizer(name, _analyzer(stem))
        writer = index.writer(heap_size=15_000_000, num_threads=1)
        units = [(r[0], r[1], r[2], r[3], r[4]) for r in rows] if part == "chunks" else [
            (key, key, rs[0][2], rs[0][3], "\n".join(r[4] for r in rs)) for key, rs in pages.items()
        ]  # fmt: skip
        for doc_id, key, source, title, text in units:
            writer.add_document(
                tantivy.Document(
                    chunk_id=doc_id,
                    key=key,
                    source=source,
                    agent="",
                    title=title,
                    body=text,
                    body_en=text,
                    body_de=german_fold(text),
                )
            )
        writer.commit()
        writer.wait_merging_threads()
    (bm25 / "memory").mkdir()
    (bm25 / "layout.json").write_text('{"layout": 2}\n')


def _kept_layout_2(make_cfg: Any, vault: Path, *, inbox: bool = False) -> Any:
    """A config over ``vault`` whose index was swept and closed, its keyword index then written
    anew as layout 2 wrote it (with ``inbox``, agent alpha's empty inbox made first)."""
    cfg = make_cfg(vault)
    if inbox:
        (cfg.agents_dir / "alpha" / "memory").mkdir(parents=True)
    index_and_close(cfg)
    _layout_2_index(cfg)
    return cfg


def _alpha_writes_a_quokka(cfg: Any) -> None:
    """Agent alpha's note about the quokka written and indexed at once; the stores closed."""
    h = Harness(cfg, FakeEmbedder())
    try:
        path = cfg.agents_dir / "alpha/memory/quokka.md"
        write(path, "# Quokka\n\nAlpha keeps notes about the quokka.\n")
        root = next(r for r in h.indexer.changes.roots() if r.name == "memory/alpha")
        h.indexer.index_now(root, path)
    finally:
        h.close()


def _swapped_in_will_not_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """The upgrade's open of the index swapped in (``bm25``) fails for want of file handles; any
    other folder opens."""
    import sidecar.index.beside as beside
    from sidecar.contracts.errors import StoreError
    from sidecar.stores.bm25 import Bm25Index

    def opened(path: Path, **kw: Any) -> Bm25Index:
        if path.name == "bm25":
            raise StoreError(f"BM25 index {path} cannot be opened: Too many open files")
        return Bm25Index(path, **kw)

    monkeypatch.setattr(beside, "Bm25Index", opened)  # the swap's open (``refill_beside``)


def _found(h: Harness, query: str) -> set[str]:
    """The notes the keyword arm finds for ``query`` (file names)."""
    hits = search(h, query, sources=["vault", "memory"])
    return {hit["reference"].rsplit("/", 1)[-1] for hit in hits if hit["bm25Score"]}


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """(entered, release): the upgrade's read of the manifest waits for ``release`` once it has
    set ``entered`` (the refill held half-way, so that what happens meanwhile can be seen)."""
    from sidecar.stores.manifest import Manifest

    entered, release = threading.Event(), threading.Event()
    real = Manifest.all_chunks

    def all_chunks(self: Any) -> Iterator[Any]:
        # Beside, the refill's fill runs in a thread of its own (a stop does not wait for it).
        name = threading.current_thread().name
        if (name == "upgrade" or name.startswith("bm25-refill-fill-")) and not release.is_set():
            entered.set()
            assert release.wait(_WAIT)
        yield from real(self)

    monkeypatch.setattr(Manifest, "all_chunks", all_chunks)
    yield entered, release
    release.set()


def _health(h: Harness) -> dict[str, Any]:
    from tests.in_process import InProcessServer

    server = InProcessServer(h)
    try:
        return server.call("health")
    finally:
        server.close()


def _start_sweep(h: Harness, stop: threading.Event | None = None) -> threading.Thread:
    thread = threading.Thread(target=h.indexer.sweep, kwargs={"stop": stop}, name="upgrade", daemon=True)
    thread.start()
    return thread


def test_an_upgrade_refills_beside_the_old_index_which_answers_meanwhile(
    make_cfg: Any, underscores: Path, held: tuple[threading.Event, threading.Event]
) -> None:
    """At the first start after the upgrade the layout-2 index answers searches while layout 3 is
    refilled beside it (it answered nothing until the refill ended); a note and a memory written
    meanwhile are found after the swap; then underscore emphasis is found by its word and a
    snake_case name as typed, and status says what happens while it runs."""
    from sidecar.clients.cli_render import render_status
    from sidecar.stores.versions import bm25_layout
    from tests.in_process import InProcessServer

    entered, release = held
    cfg = make_cfg(underscores)
    write(cfg.agents_dir / "alpha/memory/start.md", "# Start\n\nThe first memory of alpha.\n")
    index_and_close(cfg)
    shutil.rmtree(cfg.agents_dir / "alpha")  # the layout-2 index is made of the vault alone
    h0 = Harness(cfg, FakeEmbedder())
    h0.sweep()
    h0.close()
    _layout_2_index(cfg)
    h = Harness(cfg, FakeEmbedder())
    try:
        thread = _start_sweep(h)
        assert entered.wait(_WAIT)
        assert (cfg.index_dir / "bm25.next").is_dir() and h.stores.upgrading
        server = InProcessServer(h)
        try:  # status says it; a search through the daemon's handlers answers from the old index
            health = server.call("health")
            assert health["index"]["keyword_upgrade"] is True
            assert "keyword index: being rebuilt in the background" in render_status(health)
            hits = server.call("search", {"query": "tomatoes"})["hits"]
            assert any(hit["reference"].endswith("Garden") and hit["bm25Score"] for hit in hits)
        finally:
            server.close()
        # The old index answers, read with its own words.
        assert "Garden" in _found(h, "tomatoes")
        assert "Code" in _found(h, "my_function")
        # Written during the refill: into the old index now, into the new one at the swap.
        write(underscores / "Boat.md", "# Boat\n\nThe outboard engine needs new spark plugs.\n")
        vault_root = next(r for r in h.indexer.changes.roots() if r.name == "vault")
        h.indexer.index_now(vault_root, underscores / "Boat.md")
        (underscores / "Garden.md").unlink()
        h.indexer.delete(["vault/Garden"])
        assert "Boat" in _found(h, "outboard") and "Garden" not in _found(h, "tomatoes")
        release.set()
        thread.join(_WAIT)
        assert not thread.is_alive()
        assert not h.stores.upgrading
        assert bm25_layout(cfg.index_dir / "bm25") == 3
        assert sorted(p.name for p in cfg.index_dir.iterdir() if p.name.startswith("bm25")) == ["bm25"]
        assert "Boat" in _found(h, "outboard")
        assert "Garden" not in _found(h, "tomatoes")
        assert "Rust" in _found(h, "cargo")
        assert "Mail" in _found(h, "anhänge")
        assert "Code" in _found(h, "my_function")
        # The list of umlaut words reads them the same way: "Anhaenge" is read as "anhänge".
        assert h.stores.bm25.umlaut_readings(["Anhaenge"]) == {"anhaenge": "anhänge"}
        assert h.stores.bm25.num_docs() == h.stores.manifest.indexed_chunk_count()
        assert "keyword index: being rebuilt" not in render_status(_health(h))
    finally:
        release.set()
        h.close()


def test_memory_written_during_the_refill_is_in_the_new_index(
    make_cfg: Any, underscores: Path, held: tuple[threading.Event, threading.Event]
) -> None:
    """A memory note written while the refill runs is not held for it, is found at once, and is
    in the index swapped in (its agent's own index and the one of all memory)."""
    from sidecar.stores.versions import bm25_layout

    entered, release = held
    cfg = _kept_layout_2(make_cfg, underscores, inbox=True)
    h = Harness(cfg, FakeEmbedder())
    try:
        thread = _start_sweep(h)
        assert entered.wait(_WAIT)
        path = cfg.agents_dir / "alpha/memory/kayak.md"
        write(path, "# Kayak\n\nThe _kayak_ trip to the lake with alpha.\n")
        root = next(r for r in h.indexer.changes.roots() if r.name == "memory/alpha")
        h.indexer.index_now(root, path)  # returns while the refill is held: no wait for it
        assert "kayak" in _found(h, "lake")
        release.set()
        thread.join(_WAIT)
        assert not thread.is_alive() and bm25_layout(cfg.index_dir / "bm25") == 3
        assert "kayak" in _found(h, "kayak")  # the new word: "_kayak_" was "_kayak_"
        scoped = search(h, "kayak", agent="alpha", sources=["memory"])
        assert [hit["reference"].rsplit("/", 1)[-1] for hit in scoped if hit["bm25Score"]] == ["kayak"]
    finally:
        release.set()
        h.close()


def test_a_stopped_refill_leaves_the_old_index_and_the_next_start_finishes(
    make_cfg: Any, underscores: Path, held: tuple[threading.Event, threading.Event]
) -> None:
    """A stop during the refill (the daemon told to stop) leaves the old index whole and answering,
    and the side folder removed; the next start refills and swaps."""
    from sidecar.stores.versions import bm25_layout

    entered, release = held
    cfg = _kept_layout_2(make_cfg, underscores)
    h = Harness(cfg, FakeEmbedder())
    stop = threading.Event()
    try:
        thread = _start_sweep(h, stop)
        assert entered.wait(_WAIT)
        stop.set()
        release.set()
        thread.join(_WAIT)
        assert not thread.is_alive()
        assert bm25_layout(cfg.index_dir / "bm25") == 2 and "Garden" in _found(h, "tomatoes")
        assert not (cfg.index_dir / "bm25.next").exists()
    finally:
        h.close()
    assert bm25_layout(cfg.index_dir / "bm25") == 2
    h2 = Harness(cfg, FakeEmbedder())
    try:
        h2.sweep()
        assert bm25_layout(cfg.index_dir / "bm25") == 3 and "Rust" in _found(h2, "cargo")
    finally:
        h2.close()


@pytest.mark.parametrize("cut", ["refilling", "between-renames", "before-removal"])
def test_a_kill_at_any_point_leaves_one_whole_index(make_cfg: Any, underscores: Path, cut: str) -> None:
    """A kill during the refill leaves a half-made ``bm25.next`` (removed at the next start, the
    old index kept and refilled again); one between the swap's two renames leaves ``bm25`` gone
    beside a whole new index (put in place at the next start); one before the old index's removal
    leaves it beside the new one (removed). Never a mix of the two."""
    from sidecar.stores.bm25_side import NEXT, PREVIOUS
    from sidecar.stores.versions import bm25_layout

    cfg = make_cfg(underscores)
    index_and_close(cfg)
    old = cfg.index_dir / "bm25"
    if cut == "refilling":
        _layout_2_index(cfg)
        (cfg.index_dir / NEXT / "chunks").mkdir(parents=True)
        (cfg.index_dir / NEXT / "chunks" / "meta.json").write_text("{ half")
        expected = 2
    else:
        shutil.copytree(old, cfg.index_dir / NEXT)  # the new index, whole (layout 3)
        _layout_2_index(cfg)
        old.rename(cfg.index_dir / PREVIOUS)
        if cut == "before-removal":
            (cfg.index_dir / NEXT).rename(old)
        expected = 3
    from sidecar.index.problems import Problems
    from sidecar.stores.lifecycle import open_stores

    manifest, bm25 = open_stores(cfg, Problems())
    try:
        assert bm25_layout(old) == expected
        assert bm25.num_docs() == manifest.indexed_chunk_count()
    finally:
        manifest.close()
        bm25.close()
    assert sorted(p.name for p in cfg.index_dir.iterdir() if p.name.startswith("bm25")) == ["bm25"]
    assert bm25_layout(old) == expected
    assert json.loads((old / "layout.json").read_text()) == {"layout": expected}


def test_a_full_disk_during_the_refill_leaves_the_old_index_answering(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refill that fails (the disk ran full: the new index's commit fails) leaves the old index
    answering, the side folder removed, and status says so; the next start tries again."""
    from sidecar.contracts.errors import DiskFullError
    from sidecar.stores import bm25 as bm25_mod
    from sidecar.stores.versions import bm25_layout

    cfg = _kept_layout_2(make_cfg, underscores)
    real = bm25_mod.Bm25Index.commit

    def commit(self: Any) -> None:
        if self.path.name == "bm25.next":
            raise DiskFullError("BM25 commit failed: No space left on device")
        real(self)

    monkeypatch.setattr(bm25_mod.Bm25Index, "commit", commit)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        assert bm25_layout(cfg.index_dir / "bm25") == 2 and "Garden" in _found(h, "tomatoes")
        assert not (cfg.index_dir / "bm25.next").exists()
        active = h.stores.problems.describe()["active"]
        assert any(p["area"] == "keyword_index" and "old index" in p["error"] for p in active)
    finally:
        h.close()


def test_query_words_hold_underscores_only_inside() -> None:
    """A query's words are read as the index reads them: "_Cargo.toml_" is cargo and toml,
    "__init__" is init, "my_function" stays one word."""
    from sidecar.search.query import analyze

    assert analyze("_Cargo.toml_ __init__ my_function").words == ("Cargo", "toml", "init", "my_function")


def test_a_rebuild_on_purpose_builds_layout_3_from_a_layout_2_index(make_cfg: Any, underscores: Path) -> None:
    """`sidecar index --rebuild` (no daemon) over a layout-2 index builds this version's index
    from the notes (the old one read until then), and the words in underscores are found."""
    from sidecar.daemon.oneshot import index_once
    from sidecar.stores.versions import bm25_layout

    cfg = make_cfg(underscores)
    expected = index_and_close(cfg)
    _layout_2_index(cfg)
    assert index_once(cfg, rebuild=True)["chunks"] == expected
    assert bm25_layout(cfg.index_dir / "bm25") == 3
    assert sorted(p.name for p in cfg.index_dir.iterdir() if p.name.startswith("bm25")) == ["bm25"]
    h = Harness(cfg, FakeEmbedder())
    try:
        assert "Rust" in _found(h, "cargo") and "Mail" in _found(h, "anhänge")
    finally:
        h.close()


def test_the_read_only_open_reads_a_layout_2_index_as_it_is(make_cfg: Any, underscores: Path) -> None:
    """On a full disk the daemon serves the index read-only: a layout-2 index is read with its own
    analyzers (nothing refilled, nothing written), and the refill waits for a writable start."""
    from sidecar.daemon.compose import build_read_only
    from sidecar.model.embedder import EmbedderSlot
    from tests.index_helpers import snapshot

    cfg = _kept_layout_2(make_cfg, underscores)
    before = snapshot(cfg.index_dir / "bm25")
    parts = build_read_only(cfg, EmbedderSlot())
    try:
        assert parts.stores.bm25.layout == 2
        assert parts.stores.bm25.search("tomatoes", 5)
        assert parts.stores.bm25.search("my_function", 5)
    finally:
        parts.stores.close()
    assert snapshot(cfg.index_dir / "bm25") == before
    assert not (cfg.index_dir / "bm25.next").exists()


def test_a_failed_open_of_the_swapped_in_index_leaves_a_usable_index(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new index fails to open after the two renames: the swap is undone and the old index
    opened again (kept closed and renamed, every write failed, "IndexWriter was consumed")."""

    cfg = _kept_layout_2(make_cfg, underscores)

    _swapped_in_will_not_open(monkeypatch)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        bm25 = h.stores.bm25
        assert bm25.path.name == "bm25", f"the daemon serves the index in {bm25.path.name}"
        assert bm25.layout == 2  # the old one, tried again at the next start
        assert sorted(p.name for p in cfg.index_dir.iterdir() if p.name.startswith("bm25.")) == []
        write(underscores / "Boat.md", "# Boat\n\nThe outboard engine needs new spark plugs.\n")
        vault_root = next(r for r in h.indexer.changes.roots() if r.name == "vault")
        h.indexer.index_now(vault_root, underscores / "Boat.md")
        assert "Boat" in _found(h, "outboard")
        assert "keyword_index" in json.dumps(_health(h))
    finally:
        h.close()


def test_a_search_holding_the_old_index_after_the_swap_opens_no_inbox_in_a_removed_folder(
    make_cfg: Any, underscores: Path
) -> None:
    """A search that took the old index before the swap, opening an agent's inbox after it
    (inboxes open lazily), reads the new index: the old one made ``bm25.previous`` again (an
    empty index in the folder the swap removed) and answered without that agent's memory."""
    cfg = _kept_layout_2(make_cfg, underscores, inbox=True)
    _alpha_writes_a_quokka(cfg)  # a layout-2 index: memory written into it before the upgrade
    h = Harness(cfg, FakeEmbedder())  # alpha's inbox not opened yet in the old index
    try:
        old = h.stores.bm25
        assert old.layout == 2
        h.sweep()  # the upgrade: refilled beside, swapped in, the old folder removed
        assert h.stores.bm25.layout == 3
        hits = old.search("quokka", limit=5, sources=["memory"], agent_scope="alpha")
        pages = old.search_pages("quokka", limit=5, sources=["memory"], agent_scope="alpha")
        assert sorted(p.name for p in cfg.index_dir.iterdir() if p.name.startswith("bm25.")) == []
        assert hits and pages, "alpha's memory missing from a search that began before the swap"
    finally:
        h.close()


def _no_room_beside(monkeypatch: pytest.MonkeyPatch, *, in_place_fails: bool = False) -> None:
    """A disk with less free than a second keyword index: the free space told is 10 MB, and a
    commit beside fails as the full disk fails it (in place too when ``in_place_fails``)."""
    import sidecar.index.upgrade as upgrade
    from sidecar.contracts.errors import DiskFullError
    from sidecar.stores import bm25 as bm25_mod

    monkeypatch.setattr(upgrade, "free_space", lambda path: 10_000_000, raising=False)  # none before
    real = bm25_mod.Bm25Index.commit
    full = {"bm25.next", "bm25"} if in_place_fails else {"bm25.next"}

    def commit(self: Any) -> None:
        if self.path.name in full:
            raise DiskFullError("BM25 commit failed: No space left on device")
        real(self)

    monkeypatch.setattr(bm25_mod.Bm25Index, "commit", commit)


def test_without_room_for_a_second_index_the_upgrade_refills_in_place(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Less free space than a second copy of the keyword index: the refill beside failed at every
    start (the disk full for a moment each time) and the upgrade never ended. The old index is
    refilled in place instead, as before the refill beside, and the upgrade ends."""
    from sidecar.stores.versions import bm25_layout

    cfg = _kept_layout_2(make_cfg, underscores)
    _no_room_beside(monkeypatch)
    h = Harness(cfg, FakeEmbedder())
    try:
        with caplog.at_level("INFO"):
            h.sweep()
        assert bm25_layout(cfg.index_dir / "bm25") == 3
        assert h.stores.bm25.layout == 3
        assert "Rust" in _found(h, "cargo") and "Garden" in _found(h, "tomatoes")
        assert "bm25_upgrade_in_place reason=" in caplog.text
        assert sorted(p.name for p in cfg.index_dir.iterdir() if p.name.startswith("bm25.")) == []
        assert h.stores.problems.active_in("keyword_index") is None
    finally:
        h.close()


def test_an_upgrade_failing_in_place_too_says_how_much_room_it_needs(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No room beside, and the refill in place fails too (the disk full): status says how many
    MB the index's disk needs free, not only that the index could not be rebuilt."""
    from sidecar.index.upgrade import upgrade_bm25

    cfg = _kept_layout_2(make_cfg, underscores)
    _no_room_beside(monkeypatch, in_place_fails=True)
    h = Harness(cfg, FakeEmbedder())
    try:
        assert upgrade_bm25(h.stores) is False
        problem = h.stores.problems.active_in("keyword_index")
        assert problem is not None and "MB free are needed" in problem["error"], problem
        assert h.stores.bm25.path == cfg.index_dir / "bm25"
    finally:
        h.close()


class _NoHandles:
    """Opens of the keyword index in ``bm25`` fail as with no file handles left (EMFILE) while
    ``on``: the open calls of the upgrade (the new index, in place too) and, when ``old_too``,
    of the old one put back and of the reopen are patched; the rest is real."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, old_too: bool = True) -> None:
        import sidecar.index.beside as beside
        import sidecar.index.upgrade as upgrade

        self.on = True
        real_index, real_open = upgrade.Bm25Index, upgrade.open_bm25

        def index(path: Path, **kw: Any) -> Any:
            if self.on and path.name == "bm25":
                raise self._error(path)
            return real_index(path, **kw)

        def opened(path: Path, **kw: Any) -> Any:
            if self.on and old_too and path.name == "bm25":
                raise self._error(path)
            return real_open(path, **kw)

        for module in (upgrade, beside):  # in place and the reopen; the swap's (``refill_beside``)
            monkeypatch.setattr(module, "Bm25Index", index)
            monkeypatch.setattr(module, "open_bm25", opened)

    @staticmethod
    def _error(path: Path) -> Exception:
        from sidecar.contracts.errors import NoHandlesError

        return NoHandlesError(f"BM25 index {path} cannot be opened: Too many open files (os error 24)")


def _policy(h: Harness) -> Any:
    from sidecar.daemon.repairs import RepairPolicy

    return RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot)


def test_a_swap_undone_whose_old_index_will_not_open_either_heals_without_a_restart(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The new index fails to open after the swap and the old one, put back, too (no file handles
    left): the stores held the closed old index until a restart, every write failing. Now status
    says so in plain words, a search answers with a clear note, a memory write fails with an
    error (not acknowledged), and once handles are free the repair tick opens the old index
    again: writes and searches work, the note written meanwhile is indexed by the sweep."""
    from sidecar.contracts.errors import StoreError
    from sidecar.index.upgrade import upgrade_bm25
    from sidecar.stores.versions import bm25_layout
    from tests.in_process import InProcessServer

    cfg = _kept_layout_2(make_cfg, underscores, inbox=True)
    h = Harness(cfg, FakeEmbedder())
    try:
        fault = _NoHandles(monkeypatch)
        with caplog.at_level("ERROR"):
            assert upgrade_bm25(h.stores) is False
        assert "the old index answers" not in caplog.text  # none does
        problem = h.stores.problems.active_in("keyword_index")
        assert problem is not None and "keyword search finds nothing" in problem["error"], problem
        assert "Too many open files" in problem["error"]
        assert bm25_layout(cfg.index_dir / "bm25") == 2  # the old index, put back whole
        with pytest.raises(StoreError, match="the keyword index is not open"):
            h.stores.bm25.search("tomatoes", 5)
        server = InProcessServer(h)
        try:
            answer = server.call("search", {"query": "tomatoes"})  # vectors alone, and why
            assert "keyword search failed" in json.dumps(answer), answer
            # Saved, said to be not searchable yet (the index catches up once it opens).
            kayak = {"slug": "kayak", "content": "The kayak trip to the lake."}
            saved = server.call("write", kayak, agent="alpha")
            assert saved["searchable"] is False and "keyword index is not open" in saved["warning"], saved
            with caplog.at_level("ERROR"):
                _policy(h).tick()  # still no handles: tried again later, nothing moved aside
            assert "bm25_reopen_failed" in caplog.text and "retry_in=1s" in caplog.text
            assert h.stores.bm25.unavailable is not None
            assert not any(p.name.startswith("bm25.broken") for p in cfg.index_dir.iterdir())
            fault.on = False
            _policy(h).tick()
            assert h.stores.bm25.unavailable is None and h.stores.bm25.path == cfg.index_dir / "bm25"
            assert "Garden" in _found(h, "tomatoes")
            written = server.call("write", {"slug": "canoe", "content": "The canoe is red."}, agent="alpha")
            assert written["searchable"] is True, written
        finally:
            server.close()
        problem = h.stores.problems.active_in("keyword_index")  # the upgrade waits for a start
        assert problem is not None and "answer from the old index" in problem["error"], problem
        assert h.stores.problems.active_in("keyword_search") is None
        h.sweep()  # what could not be indexed meanwhile is now (and this first sweep upgrades)
        assert "kayak" in _found(h, "lake") and "canoe" in _found(h, "red")
    finally:
        h.close()


def test_an_in_place_refill_whose_index_will_not_open_heals_without_a_restart(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No room beside; the old index removed, the new one in its place will not open (no file
    handles left), nor an empty one after: the stores held the closed, removed old index until a
    restart. Now the repair tick opens a new one once it can, refilled from the manifest, and
    the problem goes."""
    from sidecar.contracts.errors import StoreError
    from sidecar.index.upgrade import upgrade_bm25

    cfg = _kept_layout_2(make_cfg, underscores)
    _no_room_beside(monkeypatch)
    h = Harness(cfg, FakeEmbedder())
    try:
        fault = _NoHandles(monkeypatch)
        assert upgrade_bm25(h.stores) is False
        assert h.stores.problems.active_in("keyword_index") is not None
        with pytest.raises(StoreError, match="the keyword index is not open"):
            h.stores.bm25.search("cargo", 5)
        fault.on = False
        _policy(h).tick()
        assert h.stores.bm25.layout == 3 and h.stores.bm25.unavailable is None
        assert "Rust" in _found(h, "cargo") and "Garden" in _found(h, "tomatoes")
        assert h.stores.bm25.num_docs() == h.stores.manifest.indexed_chunk_count()
        assert h.stores.problems.active_in("keyword_index") is None
    finally:
        h.close()


def test_an_undone_swap_leaves_the_old_object_pointing_at_the_index(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The swap undone (the new index would not open), a search holding the old object that opens
    an agent's inbox reads the index put back: it pointed at ``bm25.previous`` and made an empty
    inbox there (removed at the next start), answering without the agent's memory."""
    from sidecar.index.upgrade import upgrade_bm25

    cfg = _kept_layout_2(make_cfg, underscores, inbox=True)
    _alpha_writes_a_quokka(cfg)
    h = Harness(cfg, FakeEmbedder())  # alpha's inbox not opened yet in the old index
    try:
        old = h.stores.bm25
        _NoHandles(monkeypatch, old_too=False)
        assert upgrade_bm25(h.stores) is False
        assert h.stores.bm25.layout == 2 and h.stores.bm25 is not old  # the old index opened again
        hits = old.search("quokka", limit=5, sources=["memory"], agent_scope="alpha")
        assert sorted(p.name for p in cfg.index_dir.iterdir() if p.name.startswith("bm25.")) == []
        assert hits, "alpha's memory missing from a search holding the old object"
    finally:
        h.close()


def test_status_says_an_in_place_refill_finds_nothing_until_it_ends(
    make_cfg: Any,
    underscores: Path,
    monkeypatch: pytest.MonkeyPatch,
    held: tuple[threading.Event, threading.Event],
) -> None:
    """During a refill in place (no room beside) status said the index was rebuilt in the
    background, as if the old one answered, while keyword search found nothing: it says so now,
    and how far the refill is."""
    from sidecar.clients.cli_render import render_status

    entered, release = held
    cfg = _kept_layout_2(make_cfg, underscores)
    _no_room_beside(monkeypatch)
    h = Harness(cfg, FakeEmbedder())
    thread = None
    try:
        thread = _start_sweep(h)
        assert entered.wait(_WAIT)
        health = _health(h)
        chunks = h.stores.manifest.indexed_chunk_count()
        assert health["index"]["keyword_upgrade_in_place"] == {"done": 0, "total": chunks}
        shown = render_status(health)
        assert "keyword search finds nothing until it ends" in shown, shown
        assert f"0 of {chunks} chunks so far" in shown and "in the background" not in shown
        release.set()
        thread.join(_WAIT)
        assert not thread.is_alive()
        health = _health(h)
        assert health["index"]["keyword_upgrade_in_place"] is None
        assert "keyword index: being rebuilt" not in render_status(health)
    finally:
        release.set()
        if thread is not None:
            thread.join(_WAIT)  # the store is not closed under the refill
        h.close()


def test_a_failed_in_place_refill_is_no_problem_once_a_later_refill_succeeds(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refill in place failed (the disk full), then the refill the sweep tries again works
    (space freed): its problem ("searches find no words") stayed until the next start."""
    from sidecar.index.upgrade import upgrade_bm25

    cfg = _kept_layout_2(make_cfg, underscores)
    _no_room_beside(monkeypatch, in_place_fails=True)
    h = Harness(cfg, FakeEmbedder())
    try:
        assert upgrade_bm25(h.stores) is False
        assert h.stores.problems.active_in("keyword_index") is not None
        monkeypatch.undo()  # space freed
        h.sweep()  # the first sweep refills the new, empty index
        assert "Rust" in _found(h, "cargo") and h.stores.bm25.layout == 3
        assert h.stores.problems.active_in("keyword_index") is None
    finally:
        h.close()


def test_a_newer_versions_swap_cut_short_is_undone_after_a_downgrade(
    make_cfg: Any, underscores: Path
) -> None:
    """A newer version killed between its swap's renames, then this version started (a downgrade):
    the newer index was put in place, the one this version reads removed, and the start refused.
    Now the swap is undone: this version's index serves, the newer one's side folder is removed
    (its next start refills it)."""
    from sidecar.index.problems import Problems
    from sidecar.stores.bm25_side import NEXT, PREVIOUS
    from sidecar.stores.lifecycle import open_stores
    from sidecar.stores.versions import bm25_layout

    cfg = make_cfg(underscores)
    index_and_close(cfg)
    current = cfg.index_dir / "bm25"
    shutil.copytree(current, cfg.index_dir / NEXT)
    (cfg.index_dir / NEXT / "layout.json").write_text('{"layout": 4}\n')  # a newer version's
    current.rename(cfg.index_dir / PREVIOUS)
    manifest, bm25 = open_stores(cfg, Problems())
    try:
        assert bm25.layout == 3 and bm25_layout(current) == 3
        assert bm25.num_docs() == manifest.indexed_chunk_count()
    finally:
        manifest.close()
        bm25.close()
    assert sorted(p.name for p in cfg.index_dir.iterdir() if p.name.startswith("bm25")) == ["bm25"]


def test_a_refill_cut_by_a_downgrade_leaves_no_side_folder_at_the_next_start(
    make_cfg: Any, underscores: Path
) -> None:
    """A refill cut short (a kill), then the version before ran (it knows no side folder) and
    wrote its layout-2 index: this version's next start removes ``bm25.next`` (the disk it held)
    before anything else, never the live index, and refills again."""
    from sidecar.stores.bm25_side import NEXT
    from sidecar.stores.versions import bm25_layout

    cfg = make_cfg(underscores)
    index_and_close(cfg)
    shutil.copytree(cfg.index_dir / "bm25", cfg.index_dir / NEXT)  # the refill, cut short
    _layout_2_index(cfg)  # what the version before wrote meanwhile
    h = Harness(cfg, FakeEmbedder())
    try:
        assert not (cfg.index_dir / NEXT).exists()
        assert h.stores.bm25.layout == 2 and "Garden" in _found(h, "tomatoes")
        h.sweep()
        assert bm25_layout(cfg.index_dir / "bm25") == 3 and "Rust" in _found(h, "cargo")
    finally:
        h.close()


def test_a_search_failing_on_the_lost_index_reporting_after_the_reopen_moves_nothing_aside(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search that met the lost index and reported its failure after the reopen left a
    keyword_search problem active, and the next tick's repair moved the healthy, reopened index
    aside and rebuilt it. The lost index is said by keyword_index alone: nothing is moved."""
    import sidecar.search.arms as arms
    from sidecar.index.upgrade import upgrade_bm25

    cfg = _kept_layout_2(make_cfg, underscores)
    h = Harness(cfg, FakeEmbedder())
    try:
        fault = _NoHandles(monkeypatch)
        assert upgrade_bm25(h.stores) is False
        assert h.stores.bm25.unavailable is not None
        entered, release = threading.Event(), threading.Event()
        real_warning = arms.log.warning

        def warning(msg: str, *args: Any) -> None:
            if threading.current_thread().name == "late-search" and "keyword_search_failed" in msg:
                entered.set()
                assert release.wait(_WAIT)
            real_warning(msg, *args)

        monkeypatch.setattr(arms.log, "warning", warning)
        thread = threading.Thread(target=search, args=(h, "tomatoes"), name="late-search", daemon=True)
        thread.start()
        assert entered.wait(_WAIT)
        fault.on = False
        policy = _policy(h)
        policy.tick()
        assert h.stores.bm25.unavailable is None
        release.set()
        thread.join(_WAIT)
        policy.tick()
        assert not any(p.name.startswith("bm25.broken") for p in cfg.index_dir.iterdir())
        assert h.stores.problems.active_in("keyword_search") is None
        assert "Garden" in _found(h, "tomatoes")
    finally:
        h.close()


def test_an_in_place_removal_cut_part_way_heals_once_handles_are_free(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No room beside; the removal of the old index fails part-way (no file handles left) and
    the index is lost: the half-removed folder stayed at ``bm25`` and every reopen refused it for
    ever. The old index is renamed away before it is removed: the reopen makes a new one and
    refills it from the manifest."""
    import sidecar.index.upgrade as upgrade

    cfg = _kept_layout_2(make_cfg, underscores)
    _no_room_beside(monkeypatch)
    h = Harness(cfg, FakeEmbedder())
    try:
        fault = _NoHandles(monkeypatch)
        real_rmtree = shutil.rmtree

        def rmtree(path: Any, ignore_errors: bool = False, **kw: Any) -> None:
            if fault.on and Path(path).name in ("bm25", "bm25.undone"):
                (Path(path) / "chunks" / "meta.json").unlink()  # a part removed, then no handles
                if not ignore_errors:
                    raise OSError(24, "Too many open files")
                return
            real_rmtree(path, ignore_errors=ignore_errors, **kw)

        monkeypatch.setattr(shutil, "rmtree", rmtree)  # the module upgrade.py removes with
        assert upgrade.upgrade_bm25(h.stores) is False
        assert h.stores.bm25.unavailable is not None
        fault.on = False
        _policy(h).tick()
        assert h.stores.bm25.unavailable is None and h.stores.bm25.layout == 3
        assert "Rust" in _found(h, "cargo") and "Garden" in _found(h, "tomatoes")
        assert sorted(p.name for p in cfg.index_dir.iterdir() if p.name.startswith("bm25.")) == []
    finally:
        h.close()


def test_a_lost_index_whose_files_are_damaged_is_moved_aside_and_refilled_by_the_reopen(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lost index whose folder will not open for damage (not for want of handles): the reopen
    failed at every try for ever (the repair skips a lost index). It is moved aside and made
    anew, refilled from the manifest, as a start does."""
    from sidecar.index.upgrade import upgrade_bm25

    cfg = _kept_layout_2(make_cfg, underscores)
    h = Harness(cfg, FakeEmbedder())
    try:
        fault = _NoHandles(monkeypatch)
        assert upgrade_bm25(h.stores) is False
        assert h.stores.bm25.unavailable is not None
        (cfg.index_dir / "bm25" / "chunks" / "meta.json").write_text("{not json")
        fault.on = False
        _policy(h).tick()
        assert h.stores.bm25.unavailable is None, h.stores.bm25.unavailable
        assert "Rust" in _found(h, "cargo") and "Garden" in _found(h, "tomatoes")
        assert h.stores.bm25.num_docs() == h.stores.manifest.indexed_chunk_count()
        assert any(p.name.startswith("bm25.broken") for p in cfg.index_dir.iterdir())
    finally:
        h.close()


class _Kill(BaseException):
    """The process killed at this point."""


def test_a_swap_undo_cut_short_keeps_the_old_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The undo of a swap removed the new index in ``bm25`` first, then renamed what was left to
    ``bm25.next``: a kill between left a part that the next start's ``settle`` promoted, removing
    the old index in ``bm25.previous``. The new one is renamed away (``bm25.undone``) first."""
    from sidecar.stores import bm25_side

    index_dir = tmp_path / "index"
    for name in ("bm25", "bm25.previous"):
        (index_dir / name / "chunks").mkdir(parents=True)
        (index_dir / name / "chunks" / "meta.json").write_text(name)
        (index_dir / name / "chunks" / "seg").write_text(name)
    real_rmtree = shutil.rmtree

    def killed(path: Any, *args: Any, **kw: Any) -> None:
        (Path(path) / "chunks" / "seg").unlink()
        raise _Kill

    monkeypatch.setattr(bm25_side.shutil, "rmtree", killed)
    with pytest.raises(_Kill):
        bm25_side.swap_undone(index_dir)
    monkeypatch.setattr(bm25_side.shutil, "rmtree", real_rmtree)
    bm25_side.settle(index_dir)  # the next start
    assert (index_dir / "bm25" / "chunks" / "meta.json").read_text() == "bm25.previous"
    assert (index_dir / "bm25" / "chunks" / "seg").is_file()
    assert sorted(p.name for p in index_dir.iterdir()) == ["bm25"]


def test_a_reopen_failing_on_the_manifest_is_tried_again_later(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The reopen's refill reads the manifest: a sqlite error there escaped the repair tick with
    no backoff. It is a failed try like the others: logged, tried again later."""
    import sqlite3

    from sidecar.index.upgrade import upgrade_bm25
    from sidecar.stores.manifest import Manifest

    cfg = _kept_layout_2(make_cfg, underscores)
    _no_room_beside(monkeypatch)
    h = Harness(cfg, FakeEmbedder())
    try:
        fault = _NoHandles(monkeypatch)
        assert upgrade_bm25(h.stores) is False
        fault.on = False

        def locked(self: Any) -> int:
            raise sqlite3.OperationalError("database is locked")

        monkeypatch.setattr(Manifest, "indexed_chunk_count", locked)
        with caplog.at_level("ERROR"):
            _policy(h).tick()
        assert "bm25_reopen_failed" in caplog.text and "database is locked" in caplog.text
        assert h.stores.bm25.unavailable is not None
    finally:
        h.close()


def _unremovable_undone(index_dir: Path, how: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stale ``bm25.undone`` that cannot be removed: a file under its name (rmtree refuses a
    file, root's too), or a folder whose removal the share refuses (rmtree patched for it)."""
    from sidecar.stores import bm25_side

    stale = index_dir / "bm25.undone"
    if how == "a file":
        stale.write_text("stale")
        return stale
    (stale / "chunks").mkdir(parents=True)
    (stale / "chunks" / "meta.json").write_text("stale")
    real_rmtree = shutil.rmtree

    def refused(path: Any, ignore_errors: bool = False, **kw: Any) -> None:
        if Path(path) == stale:
            if not ignore_errors:
                raise PermissionError(13, "Permission denied", str(path))
            return
        real_rmtree(path, ignore_errors=ignore_errors, **kw)

    monkeypatch.setattr(bm25_side.shutil, "rmtree", refused)
    return stale


@pytest.mark.parametrize("how", ["a file", "a folder"])
def test_a_stale_undone_that_cannot_be_removed_breaks_no_undo_removal_or_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """A ``bm25.undone`` left behind that cannot be removed: a swap's undo puts the old index
    back, a removal before a refill in place removes the index, and the next start's ``settle``
    leaves it and removes what it can. Was: the undo and the removal raised on it (the index was
    lost until a restart, a refill in place never ran)."""
    from sidecar.stores import bm25_side

    index_dir = tmp_path / "index"
    for name in ("bm25", "bm25.previous"):
        (index_dir / name / "chunks").mkdir(parents=True)
        (index_dir / name / "chunks" / "meta.json").write_text(name)
    stale = _unremovable_undone(index_dir, how, monkeypatch)
    bm25_side.swap_undone(index_dir)
    assert (index_dir / "bm25" / "chunks" / "meta.json").read_text() == "bm25.previous"
    bm25_side.remove_index(index_dir / "bm25")
    assert not (index_dir / "bm25").exists()
    bm25_side.settle(index_dir)  # the next start
    if how == "a file":  # removed as a file: rmtree refused it
        assert sorted(p.name for p in index_dir.iterdir()) == []
        return
    assert sorted(p.name for p in index_dir.iterdir()) == ["bm25.undone"] and stale.exists()
    monkeypatch.undo()  # the share lets it go again
    bm25_side.settle(index_dir)
    assert sorted(p.name for p in index_dir.iterdir()) == []


def test_a_swap_undone_beside_a_stale_undone_leaves_a_usable_index(
    make_cfg: Any, underscores: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start beside a ``bm25.undone`` that cannot be removed, whose upgrade's new index fails
    to open after the swap: the start goes on, the swap is undone, the old index answers and
    takes writes. Was: the undo raised on the leftover and no keyword index was open."""

    cfg = _kept_layout_2(make_cfg, underscores)
    _unremovable_undone(cfg.index_dir, "a folder", monkeypatch)

    _swapped_in_will_not_open(monkeypatch)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        bm25 = h.stores.bm25
        assert bm25.unavailable is None and bm25.path.name == "bm25" and bm25.layout == 2
        write(underscores / "Boat.md", "# Boat\n\nThe outboard engine needs new spark plugs.\n")
        vault_root = next(r for r in h.indexer.changes.roots() if r.name == "vault")
        h.indexer.index_now(vault_root, underscores / "Boat.md")
        assert "Boat" in _found(h, "outboard")
    finally:
        h.close()
