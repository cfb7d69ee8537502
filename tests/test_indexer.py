"""Indexer over real Tantivy, LanceDB and sqlite with a fake embedder: sweeps, edits, deletes,
crash convergence, bad files, shares that vanish, and the vault never being written."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.index import records as records_mod
from sidecar.search.request import SearchRequest
from sidecar.search.retrieval import Retriever
from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import (
    search,
    snapshot,
    store_counts,
)


def test_sweep_indexes_every_store_consistently(harness: Harness) -> None:
    """A first sweep puts every chunk in BM25 and, after backfill, in the vector table."""
    summary = harness.sweep()
    assert summary["changed"] == 4
    chunks, docs, vectors = store_counts(harness)
    assert chunks == docs == vectors > 0
    assert harness.stores.manifest.pending_count() == 0
    counts = harness.stores.manifest.counts()
    assert counts["by_source"]["wiki"]["files"] == 1 and counts["by_source"]["vault"]["files"] == 3


def test_unchanged_resweep_reads_no_file(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second sweep over an unchanged vault compares stat only and reads no note."""
    harness.sweep()
    reads: list[Path] = []
    real = records_mod.read_note
    monkeypatch.setattr(records_mod, "read_note", lambda p, m, r=None: reads.append(p) or real(p, m, r))
    summary = harness.sweep()
    assert reads == [] and summary["changed"] == 0 and summary["unchanged"] == 4


def test_a_file_time_past_2262_is_indexed_and_stops_nothing(harness: Harness) -> None:
    """A note whose mtime does not fit 64-bit nanoseconds (after 2262-04-11: a bad clock, a
    restored backup; ext4 keeps up to 2446) is indexed with its time clamped: it failed every
    sweep's batch, so nothing of the vault was indexed, for good."""
    note = harness.cfg.vault.path / "Far future.md"  # type: ignore[operator]
    write(note, "# Far future\n\nThe zeppelin hangar.\n")
    far = 253_402_300_800 * 10**9  # year 10000; the file system keeps what it can
    os.utime(note, ns=(far, far))
    assert note.stat().st_mtime_ns > 2**63  # else this file system cannot show the case
    assert harness.sweep()["changed"] == 5
    assert harness.sweep()["changed"] == 0  # the clamped time compares equal next time
    assert "vault/Far future" in harness.stores.manifest.file_states("vault/")


def test_touched_file_with_same_content_is_not_reindexed(harness: Harness) -> None:
    """A new mtime with identical bytes is read and hashed, but nothing is re-chunked or re-embedded."""
    harness.sweep()
    model = harness.slot.model
    assert isinstance(model, FakeEmbedder)
    before = len(model.embedded)
    note = harness.cfg.vault.path / "Garden.md"  # type: ignore[operator]
    os.utime(note, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
    assert harness.sweep()["changed"] == 0
    assert len(model.embedded) == before


def test_an_edit_that_keeps_size_and_mtime_is_seen(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """New bytes of the same size with the old mtime put back (a tool restoring mtimes, two
    saves within a coarse clock's tick) are found by the status change time (it was never seen,
    not even by `sidecar index`); a change of mode alone is read once, then settles."""
    harness.sweep()
    note = harness.cfg.vault.path / "Garden.md"  # type: ignore[operator]
    old = note.stat()
    text = note.read_text()
    note.write_text(text.replace("Tomatoes", "Potatoes"))
    os.utime(note, ns=(old.st_atime_ns, old.st_mtime_ns))
    assert note.stat().st_size == old.st_size and note.stat().st_mtime_ns == old.st_mtime_ns
    assert harness.sweep()["changed"] == 1
    assert any("Potatoes" in c.text for c in harness.stores.manifest.chunks_of("vault/Garden"))
    os.chmod(note, 0o600)
    reads: list[Path] = []
    real = records_mod.read_note
    monkeypatch.setattr(records_mod, "read_note", lambda p, m, r=None: reads.append(p) or real(p, m, r))
    assert harness.sweep()["changed"] == 0 and reads == [note]
    assert harness.sweep()["unchanged"] == 4 and reads == [note]


def test_a_note_made_unreadable_is_kept_and_read_again_until_it_reads(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note whose mode alone changed and that cannot be read now keeps its indexed text, and
    each sweep tries it again (a folder made readable again changes no stat of its notes) until
    it reads; then it is no longer named unreadable and sweeps leave it alone."""
    harness.sweep()
    note = harness.cfg.vault.path / "Garden.md"  # type: ignore[operator]
    note.chmod(0)
    reads: list[Path] = []
    real = records_mod.read_note

    def unreadable(p: Path, m: int, r: Any = None) -> Any:
        reads.append(p)
        if p == note:
            raise records_mod.NoteUnreadable("unreadable (Permission denied)")  # root reads mode 000
        return real(p, m, r)

    monkeypatch.setattr(records_mod, "read_note", unreadable)
    try:
        harness.sweep()
        harness.sweep()
        assert reads == [note, note]
        assert harness.problems.active_in("unreadable") is not None
    finally:
        note.chmod(0o644)
    monkeypatch.setattr(records_mod, "read_note", lambda p, m, r=None: reads.append(p) or real(p, m, r))
    harness.sweep()
    harness.sweep()
    assert reads == [note, note, note] and harness.problems.active_in("unreadable") is None
    assert any("Tomatoes" in c.text for c in harness.stores.manifest.chunks_of("vault/Garden"))


def test_a_manifest_without_status_change_times_learns_them_without_reading(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest written before ctime was kept opens as it is; its unchanged notes get their
    ctime from the next sweep's stat, with no note read again."""
    import sqlite3

    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    h.close()
    with sqlite3.connect(cfg.index_dir / "manifest.sqlite") as db:
        db.execute("ALTER TABLE files DROP COLUMN ctime_ns")
    h = Harness(cfg, FakeEmbedder())
    try:
        reads: list[Path] = []
        real = records_mod.read_note
        monkeypatch.setattr(records_mod, "read_note", lambda p, m, r=None: reads.append(p) or real(p, m, r))
        assert h.sweep()["unchanged"] == 4 and reads == []
        assert all(st.ctime_ns for st in h.stores.manifest.file_states("vault/").values())
    finally:
        h.close()


def test_edit_reembeds_only_changed_chunks(harness: Harness) -> None:
    """Editing one section re-embeds that chunk only; unchanged chunks keep their vectors."""
    vault = harness.cfg.vault.path
    assert vault is not None
    write(
        vault / "Long.md", "# Long\n\n## One\n\nalpha text\n\n## Two\n\nbeta text\n\n## Three\n\ngamma text\n"
    )
    harness.sweep()
    model = harness.slot.model
    assert isinstance(model, FakeEmbedder)
    model.embedded.clear()
    write(
        vault / "Long.md",
        "# Long\n\n## One\n\nalpha text\n\n## Two\n\nBETA CHANGED\n\n## Three\n\ngamma text\n",
    )
    harness.sweep()
    assert len(model.embedded) == 1 and "BETA CHANGED" in model.embedded[0]
    chunks, docs, vectors = store_counts(harness)
    assert chunks == docs == vectors
    assert search(harness, "beta changed")[0]["reference"] == "vault/Long"


def test_editing_one_paragraph_of_a_20_chunk_note_embeds_one_chunk(harness: Harness) -> None:
    """Issue 7: chunk-level hashes, so one changed paragraph costs one model call for one text."""
    vault = harness.cfg.vault.path
    assert vault is not None
    sections = [f"## Part {i}\n\nParagraph {i} talks about topic{i} in plain words.\n" for i in range(20)]
    write(vault / "Twenty.md", "# Twenty\n\n" + "\n".join(sections))
    harness.sweep()
    assert len(harness.stores.manifest.chunks_of("vault/Twenty")) == 20
    model = harness.slot.model
    assert isinstance(model, FakeEmbedder)
    calls: list[list[str]] = []
    real = model.embed_passages
    model.embed_passages = lambda texts: calls.append(list(texts)) or real(texts)  # type: ignore[method-assign]
    sections[7] = "## Part 7\n\nParagraph 7 was rewritten to mention lighthouses.\n"
    write(vault / "Twenty.md", "# Twenty\n\n" + "\n".join(sections))
    harness.sweep()
    assert len(calls) == 1 and len(calls[0]) == 1 and "lighthouses" in calls[0][0]
    chunks, docs, vectors = store_counts(harness)
    assert chunks == docs == vectors
    assert "vault/Twenty" in [h["reference"] for h in search(harness, "lighthouses")]


def test_front_matter_only_and_empty_notes_are_not_embedded(harness: Harness) -> None:
    """Such notes get one chunk for BM25 (findable by title) but no model call and no vector."""
    vault = harness.cfg.vault.path
    assert vault is not None
    write(vault / "Only props.md", "---\ntags: [inbox]\ndescription: placeholder zebra\n---\n")
    write(vault / "Empty.md", "")
    model = harness.slot.model
    assert isinstance(model, FakeEmbedder)
    harness.sweep()
    assert not any("Only props" in t or t.startswith("Empty") for t in model.embedded)
    assert harness.stores.manifest.pending_count() == 0
    chunks, docs, vectors = store_counts(harness)
    assert chunks == docs == vectors + 2
    assert "vault/Only props" in [h["reference"] for h in search(harness, "zebra")]
    # A new model's table (migration) does not wait for them either.
    harness.stores.manifest.reset_vectors()
    assert harness.stores.manifest.pending_count() == vectors


def test_deleted_note_leaves_every_store(harness: Harness) -> None:
    """Deleting a note removes its chunks from BM25, vectors and the manifest."""
    harness.sweep()
    (harness.cfg.vault.path / "Recipes" / "Bread.md").unlink()  # type: ignore[operator]
    harness.sweep()
    chunks, docs, vectors = store_counts(harness)
    assert chunks == docs == vectors
    assert all(h["reference"] != "vault/Recipes/Bread" for h in search(harness, "sourdough bread starter"))


def test_bad_files_are_skipped_and_counted(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Binary, non-UTF-8 and unreadable notes are skipped with a reason; the others index."""
    vault = harness.cfg.vault.path
    assert vault is not None
    (vault / "binary.md").write_bytes(b"\0\1\2\3" * 100)
    (vault / "latin1.md").write_bytes("Grüße aus Köln".encode("latin-1"))
    (vault / "utf16.md").write_bytes("# Notiz\n\nGrüße".encode("utf-16"))  # a BOM, then NUL bytes
    locked = write(vault / "locked.md", "secret")
    write(vault / "badyaml.md", "---\ntags: [oops\n---\nThe body of a note with broken front matter.\n")
    real, failing = records_mod.read_note, [True]

    def read_note(p: Path, m: int, r: Any = None) -> Any:
        if failing[0] and p == locked:  # as a file of mode 000 fails (root reads those)
            raise records_mod.NoteUnreadable("unreadable (Permission denied)")
        return real(p, m, r)

    monkeypatch.setattr(records_mod, "read_note", read_note)
    summary = harness.sweep()
    failing[0] = False
    counts = harness.stores.manifest.counts()
    assert counts["by_source"]["vault"]["files"] == 4  # 3 good + badyaml
    skipped = counts["skipped"]
    assert skipped.get("binary") == 1 and skipped.get("not UTF-8") == 1
    assert skipped.get("not UTF-8 (UTF-16)") == 1
    assert any(k.startswith("unreadable") for k in skipped)
    assert summary["changed"] >= 6
    assert search(harness, "broken front matter")[0]["reference"] == "vault/badyaml"
    # skipped files are not re-read on the next sweep, but for one whose read failed: it is
    # read again (readable now: indexed)
    assert harness.sweep()["changed"] == 1
    assert harness.stores.manifest.chunk_ids("vault/locked")
    assert harness.sweep()["changed"] == 0


def test_vault_is_never_written(harness: Harness) -> None:
    """Indexing, re-indexing and searching leave every byte and mtime of the vault as it was."""
    vault = harness.cfg.vault.path
    assert vault is not None
    before = snapshot(vault)
    harness.sweep()
    search(harness, "garden")
    harness.indexer.clear()
    harness.sweep()
    assert snapshot(vault) == before


def test_crash_mid_write_converges(harness: Harness, make_cfg: Any) -> None:
    """A crash between the intent mark and the manifest commit is redone on the next start."""
    harness.sweep()
    vault = harness.cfg.vault.path
    assert vault is not None
    write(vault / "Garden.md", "# Garden\n\nCucumbers instead of tomatoes this year.\n")

    boom = RuntimeError("simulated crash after BM25 commit")
    real_commit = harness.stores.bm25.commit

    def crash() -> None:
        real_commit()
        raise boom

    harness.stores.bm25.commit = crash  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        harness.indexer.sweep()
    assert harness.stores.manifest.keys_in_state("indexing") == ["vault/Garden"]
    harness.close()
    # "restart": fresh objects over the same directories
    h2 = Harness(harness.cfg, FakeEmbedder())
    try:
        h2.indexer.finish_interrupted()
        h2.sweep()
        chunks, docs, vectors = store_counts(h2)
        assert chunks == docs == vectors
        assert h2.stores.manifest.keys_in_state("indexing", "deleting") == []
        assert search(h2, "cucumbers")[0]["reference"] == "vault/Garden"
    finally:
        h2.close()


def test_interrupted_delete_is_finished_on_start(harness: Harness) -> None:
    """A note left in state 'deleting' by a crash is removed from every store at the next start."""
    harness.sweep()
    harness.stores.manifest.mark_state(["vault/Garden"], "deleting")
    harness.indexer.finish_interrupted()
    keys = {v.key for v in harness.stores.manifest.all_chunks()}
    assert "vault/Garden" not in keys
    chunks, docs, vectors = store_counts(harness)
    assert chunks == docs == vectors


def test_no_arm_that_can_search_is_an_error_not_an_empty_answer(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keyword index cannot be read and there are no vectors (turned off, or failing too):
    the search fails saying so (it answered "nothing relevant found", and an agent concluded the
    note did not exist)."""
    from sidecar.contracts.errors import StoreError

    h = Harness(make_cfg(vault), None)
    try:
        h.indexer.sweep()

        def damaged(*_a: Any, **_k: Any) -> Any:
            raise StoreError("BM25 search failed: the offset to copy is not contained")

        monkeypatch.setattr(h.stores.bm25, "search", damaged)
        with pytest.raises(StoreError, match=r"keyword index cannot be read.*vector search is unavailable"):
            Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall).search(
                SearchRequest("spark plugs", 5, 0.0)
            )
    finally:
        h.close()


def test_bm25_only_without_model(make_cfg: Any, vault: Path) -> None:
    """With no model, indexing still works, search answers from BM25 and says it is degraded."""
    h = Harness(make_cfg(vault), None)
    try:
        h.indexer.sweep()
        r = Retriever(h.stores, h.slot, h.cfg.search, h.cfg.recall).search(
            SearchRequest("spark plugs", 5, 0.0)
        )
        assert r.hits[0].reference == "vault/Projects/Boat"
        assert r.hits[0].vec_score is None
        assert r.degraded and "keyword" in r.degraded
        assert h.stores.manifest.pending_count() == h.stores.manifest.chunk_count()
    finally:
        h.close()


def test_unmounted_vault_keeps_its_index(harness: Harness, tmp_path: Path) -> None:
    """A vault folder that vanishes (unmounted share) goes offline; nothing is deleted."""
    harness.sweep()
    vault = harness.cfg.vault.path
    assert vault is not None
    before = store_counts(harness)
    vault.rename(tmp_path / "unmounted")
    harness.sweep()
    assert store_counts(harness) == before
    assert harness.supervisor.roots["vault"].offline
    (tmp_path / "unmounted").rename(vault)
    harness.sweep()
    assert not harness.supervisor.roots["vault"].offline
    assert store_counts(harness) == before


def test_emptied_mount_point_holds_deletions(harness: Harness) -> None:
    """An emptied root (a mount point left behind) holds deletions however many sweeps see it;
    the user's confirmation applies them."""
    vault = harness.cfg.vault.path
    assert vault is not None
    for i in range(6):
        write(vault / f"extra{i}.md", f"# Extra {i}\n\nfiller note number {i}\n")
    harness.sweep()
    before = store_counts(harness)
    for p in vault.rglob("*.md"):
        if "wiki" not in p.parts and ".obsidian" not in p.parts and ".trash" not in p.parts:
            p.unlink()
    for _ in range(5):
        harness.sweep()
    assert store_counts(harness) == before
    assert harness.supervisor.roots["vault"].offline
    assert harness.supervisor.roots["vault"].hold_kind == "empty"
    harness.indexer.sweep(confirm_deletions={"vault"})
    assert store_counts(harness)[0] < before[0]


def test_file_vanishing_between_scan_and_read(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """A note deleted after the scan listed it and before it is read is simply not indexed: the
    sweep finishes, the other notes index, and the next sweep has nothing left to do for it."""
    vault = harness.cfg.vault.path
    assert vault is not None
    write(vault / "Fleeting.md", "# Fleeting\n\nhere one moment\n")
    real = records_mod.read_note

    def vanish_first(path: Path, limit: int, root: Any = None) -> Any:
        if path.name == "Fleeting.md" and path.exists():
            path.unlink()  # gone between the scan's stat and this read
        return real(path, limit, root)

    monkeypatch.setattr(records_mod, "read_note", vanish_first)
    summary = harness.sweep()
    assert summary["changed"] == 4
    assert "vault/Fleeting" not in {f[0] for f in harness.stores.manifest.list_files("1", ())}
    assert harness.sweep()["changed"] == 0


def test_other_chunking_is_redone_and_unchanged_chunks_keep_their_vectors(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An index cut with other chunking settings (or by another chunker version) is cut again
    at the next start: every note re-read once, no duplicate or stale chunk, and a chunk whose
    embed text stays the same is not embedded again."""
    long_note = "# Log\n\n" + "\n\n".join(f"Entry {i}: the pump was checked and oiled." for i in range(40))
    write(vault / "Log.md", long_note + "\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    h.indexer.reparse_if_chunking_changed()  # a new index: records today's chunking
    h.sweep()
    before = h.stores.manifest.chunk_ids("vault/Log")
    assert h.stores.manifest.get_meta("chunker") is not None
    # Another chunker version wrote this index: everything is read again, nothing re-embedded.
    h.stores.manifest.set_meta("chunker", "1:200:0.2")
    model = h.slot.model
    assert isinstance(model, FakeEmbedder)
    model.embedded.clear()
    mtimes = {k: st.mtime_ns for k, st in h.stores.manifest.file_states().items()}
    with caplog.at_level("INFO"):
        h.indexer.reparse_if_chunking_changed()
    assert "index_rechunk notes=5" in caplog.text
    # Until the sweep, the notes keep their mtime (date filters read it).
    assert {k: st.mtime_ns for k, st in h.stores.manifest.file_states().items()} == mtimes
    assert h.sweep()["changed"] == 5
    assert model.embedded == [] and h.stores.manifest.chunk_ids("vault/Log") == before
    h.close()
    # Smaller chunks: the long note is cut again, its old chunks leave every store.
    h = Harness(make_cfg(vault, **{"chunking.maxTokens": 60}), FakeEmbedder())
    h.indexer.reparse_if_chunking_changed()
    h.sweep()
    after = h.stores.manifest.chunk_ids("vault/Log")
    assert len(after) > len(before) and not after & before
    chunks, docs, vectors = store_counts(h)
    assert chunks == docs == vectors
    h.indexer.reparse_if_chunking_changed()  # recorded: the next start reads nothing again
    assert h.sweep()["changed"] == 0
    h.close()
    # Another model counts the tokens: cut again (chunks cut to another tokenizer's budget ran past
    # the new model's window after a switch).
    h = Harness(
        make_cfg(vault, **{"chunking.maxTokens": 60, "embedder.model": "all-MiniLM-L6-v2"}), FakeEmbedder()
    )
    caplog.clear()
    with caplog.at_level("INFO"):
        h.indexer.reparse_if_chunking_changed()
    assert "index_rechunk notes=5" in caplog.text
    assert str(h.stores.manifest.get_meta("chunker")).endswith(":all-MiniLM-L6-v2")
    h.close()


def test_a_new_drawing_reader_reads_the_drawings_again_and_nothing_else(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Excalidraw drawings are read again when the way they are read changes (their elements'
    ids were words of the drawing), without a chunker version: that re-read the whole vault at
    the next start (a NAS read whole) for a change to the drawings alone. A drawing is a note whose
    stored front matter has ``excalidraw-plugin``, of any value."""
    drawing = "---\nexcalidraw-plugin: {}\n---\n# Excalidraw Data\n## Text Elements\nTor ^t0r1\n\n"
    write(vault / "Plan.excalidraw.md", drawing.format("parsed"))
    write(vault / "Skizze.md", drawing.format(""))  # null, and not named as the plugin names it
    write(vault / "Nur.md", "# Nur\n\nexcalidraw-plugin is named here, in no front matter.\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.indexer.reparse_if_chunking_changed()
        h.indexer.reread_drawings_if_read_differently()  # a new index: recorded, nothing to read
        h.sweep()
        h.indexer.reread_drawings_if_read_differently()
        assert h.sweep()["changed"] == 0
        # An index the previous reader wrote: no version recorded.
        with h.stores.manifest.transaction() as db:
            db.execute("DELETE FROM meta WHERE name = 'drawing_reader'")
        with caplog.at_level("INFO"):
            h.indexer.reparse_if_chunking_changed()  # the chunker is the one that cut them
            h.indexer.reread_drawings_if_read_differently()
        assert "index_rechunk" not in caplog.text and "drawing_reread notes=2 old=1 new=" in caplog.text
        assert h.sweep()["changed"] == 2  # the two drawings alone
        h.indexer.reread_drawings_if_read_differently()  # recorded: nothing read again
        assert h.sweep()["changed"] == 0
    finally:
        h.close()


def test_notes_with_an_unquoted_link_alias_are_read_again_and_nothing_else(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index built when ``aliases: [[Schuppen]]`` (a wiki-link unquoted: a list in a list as
    YAML reads it) named nothing: at the upgrade only the notes whose stored aliases hold such a
    list are read again, their first chunks name the alias, and the rest of the vault is not read.
    Was: a chunker version that read and cut every note again at the next start."""
    from sidecar.notes import frontmatter
    from sidecar.stores import manifest_rows

    write(vault / "Gartenhaus.md", "---\naliases: [[Schuppen]]\n---\nDas Haus im Garten.\n")
    write(vault / "Laube.md", "---\nAliases:\n  - [[Hütte]]\n  - Pavillon\n---\nHolz.\n")
    # A list in a list elsewhere, and aliases in plain lists: nothing to read again.
    write(vault / "Werkstatt.md", "---\naliases: [Keller]\nrelated: [[Garden]]\n---\nWerkzeug.\n")
    model = FakeEmbedder()
    h = Harness(make_cfg(vault), model)
    try:
        monkeypatch.setattr(frontmatter, "_unquoted_link", lambda _value: None)  # the reading before
        h.indexer.reparse_if_chunking_changed()
        h.sweep()
        assert not any("Schuppen" in t or "Hütte" in t for t in model.embedded)
        # The index the previous reader wrote: no version recorded.
        with h.stores.manifest.transaction() as db:
            db.execute("DELETE FROM meta WHERE name = 'link_alias_reader'")
        monkeypatch.undo()
        manifest_rows._aliases.cache_clear()
        model.embedded.clear()
        with caplog.at_level("INFO"):
            h.indexer.reparse_if_chunking_changed()  # the chunker is the one that cut them
            h.indexer.reread_link_aliases_if_read_differently()
        assert "index_rechunk" not in caplog.text
        assert "link_alias_reread notes=2 old=1 new=2" in caplog.text
        assert h.sweep()["changed"] == 2  # the two notes alone
        assert any(t.startswith("Gartenhaus\nSchuppen\n") for t in model.embedded), model.embedded
        assert any(t.startswith("Laube\nHütte, Pavillon\n") for t in model.embedded), model.embedded
        h.indexer.reread_link_aliases_if_read_differently()  # recorded: nothing read again
        assert h.sweep()["changed"] == 0
    finally:
        h.close()


def test_notes_with_names_yaml_read_as_numbers_are_read_again_and_nothing_else(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index built when ``aliases: [010]`` named the note "8" (YAML 1.1 octal), ``tags: [yes]``
    was a yes/no and ``title: 1.50`` the number 1.5: at the upgrade only the notes whose stored
    aliases, tags or title hold such a value are read again, and they then name the text written."""
    from sidecar.notes import frontmatter
    from sidecar.stores import manifest_rows

    write(vault / "Raum.md", "---\naliases: [010, Keller]\n---\nDer Raum im Keller.\n")
    write(vault / "Flag.md", "---\nTags:\n  - yes\n---\nText.\n")
    write(vault / "Preis.md", "---\ntitle: 1.50\n---\nText.\n")
    write(vault / "Datum.md", "---\nalias: 2024-01-01 10:00:00\n---\nText.\n")
    # Names as text, and numbers under other keys: nothing to read again.
    write(vault / "Werkstatt.md", "---\naliases: [Keller, '010']\ncount: 010\n---\nWerkzeug.\n")
    model = FakeEmbedder()
    h = Harness(make_cfg(vault), model)
    try:
        monkeypatch.setattr(frontmatter, "_AS_WRITTEN", frozenset())  # the reading before
        h.indexer.reparse_if_chunking_changed()
        h.sweep()
        assert any(t.startswith("Raum\n8, Keller\n") for t in model.embedded), model.embedded
        with h.stores.manifest.transaction() as db:  # the index the previous reader wrote
            db.execute("DELETE FROM meta WHERE name = 'property_name_reader'")
        monkeypatch.undo()
        manifest_rows._aliases.cache_clear()
        model.embedded.clear()
        with caplog.at_level("INFO"):
            h.indexer.reparse_if_chunking_changed()  # the chunker is the one that cut them
            h.indexer.reread_link_aliases_if_read_differently()
            h.indexer.reread_property_names_if_read_differently()
        assert "index_rechunk" not in caplog.text and "link_alias_reread" not in caplog.text
        assert "property_name_reread notes=4 old=1 new=2" in caplog.text
        assert h.sweep()["changed"] == 4  # those notes alone
        assert any(t.startswith("Raum\n010, Keller\n") for t in model.embedded), model.embedded
        assert any(t.startswith("1.50\n") for t in model.embedded), model.embedded
        assert any(t.startswith("Datum\n2024-01-01 10:00:00\n") for t in model.embedded), model.embedded
        tags = h.stores.manifest._query("SELECT tags FROM files WHERE rel = 'Flag.md'")
        assert tags == [('["yes"]',)], tags
        h.indexer.reread_property_names_if_read_differently()  # recorded: nothing read again
        assert h.sweep()["changed"] == 0
    finally:
        h.close()


@pytest.mark.parametrize("older", ["events", "whole sweep"])
def test_notes_an_older_release_wrote_after_the_last_whole_sweep_are_read_again(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, older: str
) -> None:
    """A downgrade and back: an older release, run on the index after this one recorded its
    one-time re-reads, wrote a note with its own reading (``aliases: [010]`` as "8") and knows
    none of those rows; at the next start the notes written after this reader's last whole sweep,
    and only those, are read again (they kept the old reading for good). An older release that
    keeps such a mark too ("whole sweep") keeps its own: one shared mark was moved past its
    writes by its own whole sweep."""
    from sidecar.index import rowmarks as rowmarks_mod
    from sidecar.notes import frontmatter
    from sidecar.stores import manifest_rows

    write(vault / "Raum.md", "---\naliases: [010, Keller]\n---\nDer Raum im Keller.\n")
    model = FakeEmbedder()
    h = Harness(make_cfg(vault), model)
    try:
        h.indexer.reread_if_written_elsewhere()  # nothing recorded yet: nothing to tell by
        assert h.sweep()["changed"] > 0  # a whole sweep records its latest row
        assert h.stores.manifest.get_meta(rowmarks_mod._written_until())
        time.sleep(0.01)
        monkeypatch.setattr(frontmatter, "_AS_WRITTEN", frozenset())  # the older release's reading
        monkeypatch.setattr(rowmarks_mod, "PROPERTY_NAME_READER_VERSION", 1)
        write(vault / "Raum.md", "---\naliases: [010, Keller]\n---\nDer Raum im Keller, neu.\n")
        if older == "events":
            h.indexer.sweep(paths=[str(vault / "Raum.md")])
            while h.vectors.embed_pending():
                pass
        else:
            h.indexer.reread_if_written_elsewhere()
            assert h.sweep()["changed"] == 1
        assert any(t.startswith("Raum\n8, Keller\n") for t in model.embedded), model.embedded
        monkeypatch.undo()
        manifest_rows._aliases.cache_clear()
        model.embedded.clear()
        with caplog.at_level("INFO"):
            h.indexer.reread_if_written_elsewhere()  # the start of this release again
        assert "notes_written_since_reread notes=1" in caplog.text
        assert h.sweep()["changed"] == 1  # that note alone
        assert any(t.startswith("Raum\n010, Keller\n") for t in model.embedded), model.embedded
        h.indexer.reread_if_written_elsewhere()  # recorded by that whole sweep: nothing again
        assert h.sweep()["changed"] == 0
    finally:
        h.close()


class _ShiftedTime:
    """The ``time`` module with its wall clock moved by ``offset`` seconds (a clock set wrong)."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def time(self) -> float:
        return time.time() + self.offset


@pytest.mark.parametrize("wrong", ["ahead at the whole sweep", "back under the older release"])
def test_notes_written_after_the_last_whole_sweep_are_found_whatever_the_clock_said(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, wrong: str
) -> None:
    """The mark of the notes written at the last whole sweep was their latest write time: a whole
    sweep under a clock set a day ahead recorded a mark in the future, and an older release run
    under a clock set back wrote times below the mark; either way its writes were not read again
    (they kept its reading for good). The row each write makes is counted too, which no clock
    moves."""
    from sidecar.index import rowmarks as rowmarks_mod
    from sidecar.notes import frontmatter
    from sidecar.stores import manifest as manifest_mod
    from sidecar.stores import manifest_rows

    day = 86_400.0
    write(vault / "Raum.md", "---\naliases: [010, Keller]\n---\nDer Raum im Keller.\n")
    write(vault / "Flur.md", "Der Flur.\n")
    model = FakeEmbedder()
    h = Harness(make_cfg(vault), model)
    try:
        with monkeypatch.context() as m:
            if wrong.startswith("ahead"):
                m.setattr(manifest_mod, "time", _ShiftedTime(day))
            assert h.sweep()["changed"] > 0  # a whole sweep records its mark
        with monkeypatch.context() as m:  # the older release, run on the index meanwhile
            if wrong.startswith("back"):
                m.setattr(manifest_mod, "time", _ShiftedTime(-day))
            m.setattr(frontmatter, "_AS_WRITTEN", frozenset())
            m.setattr(rowmarks_mod, "PROPERTY_NAME_READER_VERSION", 1)
            write(vault / "Raum.md", "---\naliases: [010, Keller]\n---\nDer Raum im Keller, neu.\n")
            h.indexer.sweep(paths=[str(vault / "Raum.md")])
            while h.vectors.embed_pending():
                pass
            assert any(t.startswith("Raum\n8, Keller\n") for t in model.embedded), model.embedded
        manifest_rows._aliases.cache_clear()
        model.embedded.clear()
        with caplog.at_level("INFO"):
            h.indexer.reread_if_written_elsewhere()  # the start of this release again
        assert "notes_written_since_reread notes=1" in caplog.text
        assert h.sweep()["changed"] == 1  # that note alone
        assert any(t.startswith("Raum\n010, Keller\n") for t in model.embedded), model.embedded
    finally:
        h.close()


def test_a_mark_of_written_notes_that_is_no_time_is_ignored(make_cfg: Any, vault: Path) -> None:
    """A mark another version wrote in another form (or a hand edit) is no reason to refuse a
    start: it is ignored, and the next whole sweep writes it anew."""
    from sidecar.index import rowmarks as rowmarks_mod

    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        for value in ("not a time", "nan", "inf"):
            h.stores.manifest.set_meta(rowmarks_mod._written_until(), value)
            h.indexer.reread_if_written_elsewhere()
            assert h.sweep()["changed"] == 0
    finally:
        h.close()


def test_notes_an_older_reader_could_not_read_for_a_name_are_read_again_once(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Front matter the previous reader could not read for a name's value (``title: =``, a tag
    YAML has no constructor for) or stored as no JSON (``.inf``, ``.nan``) is read again at the
    upgrade and gives its names; names that merely start with a year are not read again, nor
    front matter that is still unreadable for another reason."""
    from sidecar.notes import frontmatter
    from sidecar.stores import manifest_rows

    write(vault / "Gleich.md", "---\ntitle: =\ntags: [projekt]\n---\nText.\n")
    write(vault / "Plan.md", "---\ntitle: !wichtig Plan\ntags: [projekt]\n---\nText.\n")
    write(vault / "Unendlich.md", "---\ntitle: .inf\ntags: [.nan]\n---\nText.\n")
    write(vault / "Reise.md", "---\ntitle: 2024-Trip nach Tokyo\ntags: [2024-Q1-Team]\n---\nText.\n")
    write(vault / "Kaputt.md", "---\ntitle: [offen\ntags: [projekt]\n---\nText.\n")
    model = FakeEmbedder()
    h = Harness(make_cfg(vault), model)
    try:
        monkeypatch.setattr(frontmatter, "_AS_WRITTEN", frozenset())  # the reading before
        h.indexer.reparse_if_chunking_changed()
        h.sweep()
        with h.stores.manifest.transaction() as db:  # the index the previous reader wrote
            db.execute("DELETE FROM meta WHERE name = 'property_name_reader'")
        monkeypatch.undo()
        manifest_rows._aliases.cache_clear()
        with caplog.at_level("INFO"):
            h.indexer.reread_property_names_if_read_differently()
        assert "property_name_reread notes=3 " in caplog.text
        assert h.sweep()["changed"] == 3
        rows = dict(h.stores.manifest._query("SELECT rel, title || ' ' || tags FROM files"))
        assert rows["Gleich.md"] == '= ["projekt"]'
        assert rows["Plan.md"] == 'Plan ["projekt"]'
        assert rows["Unendlich.md"] == '.inf [".nan"]'
        assert h.stores.manifest.counts()["front_matter_unread"]["notes"] == 1  # Kaputt.md
        h.indexer.reread_property_names_if_read_differently()  # recorded: nothing read again
        assert h.sweep()["changed"] == 0
    finally:
        h.close()


def test_sidecar_index_reads_the_unquoted_link_aliases_again_once(make_cfg: Any, vault: Path) -> None:
    """`sidecar index` without a daemon reads the notes with an unquoted link alias again at the
    upgrade, as a daemon's start does, and only them."""
    import sqlite3

    from sidecar.daemon.oneshot import index_once

    write(vault / "Gartenhaus.md", "---\naliases: [[Schuppen]]\n---\nDas Haus im Garten.\n")
    cfg = make_cfg(vault)
    index_once(cfg, rebuild=False)
    with sqlite3.connect(cfg.index_dir / "manifest.sqlite") as db:
        db.execute("DELETE FROM meta WHERE name = 'link_alias_reader'")
    assert index_once(cfg, rebuild=False)["changed"] == 1
    assert index_once(cfg, rebuild=False)["changed"] == 0


def test_a_first_sweep_reads_and_parses_while_the_tokenizer_loads(
    make_cfg: Any, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a first start the model's tokenizer comes a second or so after the sweep could begin
    (the conversion publishes it): the sweep reads and parses every note meanwhile and waits only
    to cut them, and the chunks are counted with the tokenizer, never estimated."""
    import threading

    from sidecar.model.embedder import EmbedderSlot

    def by_chars(texts: Any) -> list[int]:  # far from the estimate: shows which one cut the notes
        return [len(t) for t in texts]

    for i in range(6):
        write(
            vault / f"Long {i}.md",
            f"# Long {i}\n\n" + "\n\n".join(f"Paragraph {j} of note {i}, some words." for j in range(30)),
        )
    reference = Harness(make_cfg(vault, home=str(tmp_path / "ref")), None)
    reference.indexer.slot = EmbedderSlot()
    reference.indexer.slot.set_counter(by_chars)
    reference.sweep()
    want = _chunk_tokens(reference)
    reference.close()

    h = Harness(make_cfg(vault), None)
    slot = h.indexer.slot = EmbedderSlot()
    slot.set_loading()
    reads: list[Path] = []
    real = records_mod.read_note
    monkeypatch.setattr(records_mod, "read_note", lambda p, m, r=None: reads.append(p) or real(p, m, r))
    sweep = threading.Thread(target=h.indexer.sweep)
    sweep.start()
    try:
        deadline = time.monotonic() + 30
        while len(reads) < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert len(reads) == 10 and sweep.is_alive()  # every note read, none cut: it waits
        assert h.stores.manifest.counts()["chunks"] == 0
        slot.set_counter(by_chars)
        sweep.join(30)
        assert not sweep.is_alive()
        got = _chunk_tokens(h)
        assert got == want and len(got) > 10
    finally:
        slot.set_failed("end of test")
        sweep.join(30)
        h.close()


def _chunk_tokens(h: Harness) -> list[tuple[str, int]]:
    import sqlite3

    with sqlite3.connect(f"file:{h.stores.manifest.path}?mode=ro", uri=True) as db:
        return sorted(db.execute("SELECT key, tokens FROM chunks").fetchall())


def test_a_repaired_keyword_index_serves_only_once_it_is_filled(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keyword index is refilled before it replaces the damaged one (swapped in empty, it
    answered every search during the refill with nothing, read as "nothing relevant")."""
    from sidecar.index import repair as repair_mod

    harness.sweep()
    serving_while_filled: list[bool] = []
    real = repair_mod.fill_bm25

    def spy(index: Any, manifest: Any) -> None:
        serving_while_filled.append(harness.stores.bm25 is index)
        real(index, manifest)

    monkeypatch.setattr(repair_mod, "fill_bm25", spy)
    harness.repair.repair_bm25("a test")
    assert serving_while_filled == [False]
    assert search(harness, "spark plugs")[0]["reference"] == "vault/Projects/Boat"


def test_a_memory_note_deleted_after_a_sweep_read_it_is_not_indexed(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep that read a memory note just before its agent deleted it does not write its entry
    after the delete removed it (search found the deleted note until its file event came)."""
    harness.sweep()
    inbox = harness.cfg.agents_dir / "claude" / "memory"
    inbox.mkdir(parents=True, mode=0o700)
    os.chmod(inbox.parent, 0o700)
    note = inbox / "gone.md"
    note.write_text("# Gone\n\nA note deleted while the sweep read it.\n")
    real = records_mod.read_inbox_note

    def read_then_deleted(root: Any, name: str, limit: int) -> Any:
        out = real(root, name, limit)
        if name == note.name:
            note.unlink()  # the agent's delete: file moved, entry (none yet) removed
        return out

    monkeypatch.setattr(records_mod, "read_inbox_note", read_then_deleted)
    harness.sweep()
    assert "memory/claude/gone" not in harness.stores.manifest.file_states("memory/")
    assert harness.stores.manifest.chunks_of("memory/claude/gone") == []


def test_an_index_problem_clears_with_the_first_batch_written(harness: Harness) -> None:
    """Once a batch is written again (space freed), the 'index' problem clears at once, not at
    the end of the sweep: a catch-up of minutes showed "disk is full" beside moving progress."""
    harness.sweep()
    harness.problems.report("index", "updating the index failed: database or disk is full (retrying in 5 s)")
    note = harness.cfg.vault.path / "Garden.md"  # type: ignore[operator]
    note.write_text(note.read_text() + "\nMore about potatoes.\n")
    harness.indexer.sweep()
    assert harness.problems.active_in("index") is None


def test_a_renamed_folder_stays_findable_while_it_is_indexed(make_cfg: Any, tmp_path: Path) -> None:
    """The notes of a renamed folder are found under their old or their new name at every point
    of the sweep (old ones were deleted first: moved notes were missing for up to 28 s)."""
    v = tmp_path / "moving"
    for i in range(4):
        write(v / "Old" / f"n{i}.md", f"# N{i}\n\nnote {i} of the moving folder\n")
    for i in range(6):  # most of the vault stays: the mass-deletion guard lets the move through
        write(v / f"stay{i}.md", f"# Stay {i}\n\nnote {i} that stays\n")
    h = Harness(make_cfg(v, **{"index.batchFiles": 1}), FakeEmbedder())
    try:
        h.sweep()
        (v / "Old").rename(v / "New")
        seen: list[set[int]] = []
        real = h.indexer.writer.write

        def write_batch(prepared: Any) -> None:
            real(prepared)
            keys = set(h.stores.manifest.file_states("vault/"))
            seen.append({i for i in range(4) if {f"vault/Old/n{i}", f"vault/New/n{i}"} & keys})

        h.indexer.writer.write = write_batch  # type: ignore[method-assign]
        h.indexer.sweep()
        assert seen and all(s == {0, 1, 2, 3} for s in seen), seen
        moved = {k for k in h.stores.manifest.file_states("vault/") if "/n" in k}
        assert moved == {f"vault/New/n{i}" for i in range(4)}
    finally:
        h.close()


def test_a_note_brought_back_during_a_sweep_is_not_deleted_at_its_end(make_cfg: Any, tmp_path: Path) -> None:
    """A note gone when the sweep listed its folder and restored while it runs is indexed from its
    file event between batches and not deleted with the sweep's deletions after them (its event
    was taken: it stayed out of the index until the next full sweep)."""
    v = tmp_path / "v"
    write(v / "X.md", "# X\n\nrestored zauberx\n")
    for i in range(4):
        write(v / f"n{i}.md", f"# n{i}\n\nfiller {i}\n")
    h = Harness(make_cfg(v, **{"index.batchFiles": 1}), FakeEmbedder())
    try:
        h.sweep()
        (v / "X.md").unlink()
        for i in range(4):
            write(v / f"n{i}.md", f"# n{i}\n\nchanged {i}\n")
        fired: list[int] = []

        def hot() -> frozenset[str]:
            if fired:
                return frozenset()
            fired.append(1)
            write(v / "X.md", "# X\n\nrestored zauberx\n")  # restored from the trash mid-sweep
            return frozenset({str(v / "X.md")})

        h.indexer.hot_paths = hot
        h.indexer.sweep()
        assert h.stores.manifest.file_states_of(["vault/X"])
        assert any("zauberx" in c.text for c in h.stores.manifest.chunks_of("vault/X"))
    finally:
        h.close()


def test_an_emptied_inbox_is_a_root_until_its_entries_are_gone(harness: Harness) -> None:
    """An inbox whose notes are deleted stays a root until the sweep that deletes their entries,
    then its status (a line in health and `status`) and what was kept of it go at once, and
    later sweeps do not bring them back; a note saved there again is indexed from its file
    event and the inbox is a root again."""
    agents = harness.cfg.agents_dir
    plan = write(agents / "ada" / "memory" / "plan.md", "# Plan\n\nRotate the backup disks monthly.\n")
    write(agents / "bob" / "memory" / "keep.md", "# Keep\n\nBob keeps this.\n")
    harness.sweep()
    sup, changes = harness.supervisor, harness.indexer.changes
    assert {"memory/ada", "memory/bob"} <= set(sup.roots)

    plan.unlink()  # by hand: the entry is still in the index
    assert "memory/ada" in {r.name for r in changes.roots()}
    harness.indexer.sweep(only=frozenset(), paths={str(plan)})  # its file event
    assert not harness.stores.manifest.file_states("memory/ada/")
    assert "memory/ada" not in sup.roots and "memory/ada" not in changes._event_deletions
    assert "memory/ada" not in {r.name for r in changes.roots()}
    harness.sweep()
    assert "memory/ada" not in {r["name"] for r in sup.describe(lambda _p: True)}
    assert "memory/bob" in sup.roots

    write(plan, "# Plan\n\nRotate the backup disks weekly now.\n")
    harness.indexer.sweep(only=frozenset(), paths={str(plan)})
    assert search(harness, "backup disks weekly")[0]["reference"] == "memory/ada/plan"
    assert "memory/ada" in sup.roots
    plan.unlink()
    harness.sweep()  # a full sweep deletes the entry: the status goes with that sweep
    assert "memory/ada" not in sup.roots and not harness.stores.manifest.file_states("memory/ada/")


def test_an_index_holds_every_note_only_after_a_sweep_read_them_all(tmp_path: Path, make_cfg: Any) -> None:
    """A new index counts as holding every note (``swept``: searches stop saying it is still
    being built) only once every root was listed and written to the end: not after a sweep a stop
    cut short (a daemon stopped during a first build or a rebuild), nor while the vault is offline
    (it said "ready" with 1,024 of 6,277 notes read, and empty answers looked final)."""
    import threading

    v = tmp_path / "whole"
    for i in range(12):
        write(v / f"n{i}.md", f"# Note {i}\n\nText {i}.\n")
    cfg = make_cfg(v, **{"index.batchFiles": 4})
    h = Harness(cfg, FakeEmbedder())
    try:
        stop = threading.Event()
        real = h.indexer.index_files

        def one_batch_then_stop(notes: Any, data: Any = None) -> int:
            stop.set()  # the daemon is asked to stop while this batch is written
            return real(notes, data)

        h.indexer.index_files = one_batch_then_stop  # type: ignore[method-assign]
        h.indexer.sweep(stop=stop)
        h.indexer.index_files = real  # type: ignore[method-assign]
        assert h.stores.manifest.counts()["files"] == 4
        assert h.indexer.reading_first_time and h.stores.manifest.get_meta("swept") != "1"

        # Restarted over the part-read index, with the vault gone meanwhile.
        h.close()
        h = h2 = Harness(cfg, FakeEmbedder())
        (v.parent / "away").mkdir()
        v.rename(v.parent / "away" / "whole")
        h2.indexer.sweep()
        assert h2.indexer.reading_first_time and h2.stores.manifest.get_meta("swept") != "1"
        (v.parent / "away" / "whole").rename(v)
        h2.indexer.sweep(only={"vault", "wiki"})  # back: their own sweep reads them to the end
        assert h2.stores.manifest.counts()["files"] == 12
        assert not h2.indexer.reading_first_time and h2.stores.manifest.get_meta("swept") == "1"
    finally:
        h.close()


def test_a_note_saved_into_an_empty_inbox_during_a_long_sweep_is_indexed(
    tmp_path: Path, make_cfg: Any
) -> None:
    """Between a sweep's batches the notes saved meanwhile are indexed; one saved into an agent's
    inbox that was empty when the sweep began (no root then) was dropped until the next full sweep."""
    v = tmp_path / "long"
    for i in range(8):
        write(v / f"n{i}.md", f"# Note {i}\n\nText {i}.\n")
    cfg = make_cfg(v, **{"index.batchFiles": 4})
    inbox = cfg.agents_dir / "bob" / "memory"
    inbox.mkdir(parents=True)
    h = Harness(cfg, FakeEmbedder())
    try:
        saved: list[str] = []

        def hot() -> frozenset[str]:
            if saved:
                return frozenset()
            write(inbox / "x.md", "# X\n\nSaved by hand while the sweep ran.\n")
            saved.append(str(inbox / "x.md"))
            return frozenset(saved)

        h.indexer.hot_paths = hot
        h.indexer.hot_back = lambda paths: None
        h.indexer.sweep()
        assert "memory/bob/x" in h.stores.manifest.file_states("memory/")
    finally:
        h.close()


def test_notes_under_a_name_past_u_ffff_leave_when_deleted_moved_or_excluded(
    make_cfg: Any, tmp_path: Path
) -> None:
    """Folders named with an emoji first ("📥 Inbox", common in Obsidian vaults): the manifest's
    prefix lookups ended at U+FFFF, below every emoji, so such notes were never deleted by a
    sweep, nor by a folder's deletion event, nor by a new exclusion rule (their text stayed
    searchable for good); a note of a name past U+FFFF too."""
    v = tmp_path / "v"
    for i in range(8):
        write(v / f"Plain/n{i}.md", f"# N{i}\n\nplain note {i}\n")
    for name in ("📥 Inbox/item", "🎯 Private/diary", "𝔊 Fraktur"):
        write(v / f"{name}.md", f"# {name}\n\nzqemoji {name}\n")
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        keys = set(h.stores.manifest.file_states("vault/"))
        assert {"vault/📥 Inbox/item", "vault/🎯 Private/diary", "vault/𝔊 Fraktur"} <= keys
        assert h.sweep()["changed"] == 0  # they were read again at every sweep, as if new
        shutil.rmtree(v / "📥 Inbox")
        (v / "𝔊 Fraktur.md").unlink()
        h.sweep()
        h.indexer.sweep(only=frozenset(), paths=[str(v / "📥 Inbox")])  # the folder's event too
        assert h.indexer.set_excludes(["🎯 Private/"], False) == "index.exclude,index.obsidianExcludes"
        h.sweep()  # a reload asks for one
        assert h.stores.bm25.search("zqemoji", 10) == []
        assert not set(h.stores.manifest.file_states("vault/")) - {f"vault/Plain/n{i}" for i in range(8)}
    finally:
        h.close()


def test_prefix_end_bounds_every_key_under_a_prefix() -> None:
    from sidecar.stores.manifest_rows import prefix_end

    assert prefix_end("vault/") == "vault0" and prefix_end("") is None
    assert prefix_end("a\U0010ffff") == "b" and prefix_end("a\ud7ff") == "a\ue000"
    for key in ("vault/📥 x", "vault/\U0010ffff\U0010ffff", "vault/z"):
        assert "vault/" <= key < prefix_end("vault/")  # type: ignore[operator]
    assert not "vault/" <= "vault0" < prefix_end("vault/")  # type: ignore[operator]


def test_a_conflict_copy_is_counted_by_sweeps_and_events_and_why_names_it(harness: Harness) -> None:
    """A sync tool's conflict copy, found by a full sweep or by its file event, is counted as
    skipped with its reason (the event filter dropped it, the scan did not count it, and `why`
    said a sweep would pick it up)."""
    from sidecar.vault.notenames import CONFLICT_REASON

    v = harness.cfg.vault.path
    write(v / "Garden (Dave's conflicted copy 2026-12-04).md", "# Garden\n\nzqconflict edit\n")
    summary = harness.sweep()
    assert summary["skipped"] == 1
    left_out = harness.indexer.changes.skipped_notes()
    assert left_out["vault/Garden (Dave's conflicted copy 2026-12-04)"][1] == CONFLICT_REASON
    later = write(v / "Recipes" / "Bread.sync-conflict-20261204-153012-ABCDEFG.md", "# Bread\n\nzqconflict\n")
    summary = harness.indexer.sweep(only=frozenset(), paths=[str(later)])
    assert summary["skipped"] == 1 and summary["changed"] == 0
    assert (
        "vault/Recipes/Bread.sync-conflict-20261204-153012-ABCDEFG" in harness.indexer.changes.skipped_notes()
    )
    assert harness.stores.bm25.search("zqconflict", 10) == []


def test_a_folder_put_in_the_place_of_another_leaves_no_ghosts(make_cfg: Any, tmp_path: Path) -> None:
    """`mv proj proj-old; mv proj-new proj; rm -rf proj-old`: the notes only the old folder held
    leave the index with the events (its walk only added what it found: ghosts until the next
    full sweep, and a search hit that cannot be opened)."""
    v, new = tmp_path / "v", tmp_path / "proj-new"
    for i in range(3):
        write(v / "proj" / f"p{i}.md", f"# P{i}\n\nold {i} zqswapold{i}\n")
    write(v / "proj" / "sub" / "deep.md", "# Deep\n\nold deep zqswapolddeep\n")
    for i in range(6):
        write(v / f"stay{i}.md", f"# Stay {i}\n\nnote {i} that stays\n")
    write(new / "p0.md", "# P0\n\nnew zqswapnew0\n")
    write(new / "sub" / "other.md", "# Other\n\nnew other zqswapnewother\n")
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        (v / "proj").rename(v / "proj-old")
        new.rename(v / "proj")
        shutil.rmtree(v / "proj-old")
        # The watcher's batch: the folder (renamed away, and moved in), the old one's deletions.
        events = [v / "proj", v / "proj-old"] + [v / "proj-old" / f"p{i}.md" for i in range(3)]
        summary = h.indexer.sweep(only=frozenset(), paths=[str(p) for p in events])
        assert summary["deleted"] == 3
        assert set(h.stores.manifest.file_states("vault/proj/")) == {"vault/proj/p0", "vault/proj/sub/other"}
        assert _notes_with(h, "zqswapold1") == [] and _notes_with(h, "zqswapolddeep") == []
        assert _notes_with(h, "zqswapnew0") == ["vault/proj/p0"]
    finally:
        h.close()


def test_a_twin_takes_over_its_key_when_the_note_is_deleted(make_cfg: Any, tmp_path: Path) -> None:
    """`Note.MD` beside `Note.md` is skipped as its twin (one key); once `Note.md` is deleted,
    its event indexes `Note.MD` under the key (nothing looked at it: `vault/Note` said "no
    note" until the next full sweep)."""
    v = tmp_path / "v"
    write(v / "Note.MD", "# Upper\n\nupper zqtwinupper\n")
    write(v / "Note.md", "# Lower\n\nlower zqtwinlower\n")
    for i in range(3):
        write(v / f"n{i}.md", f"# N{i}\n\nfiller {i}\n")
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        assert _notes_with(h, "zqtwinlower") == ["vault/Note"]
        assert _notes_with(h, "zqtwinupper") == []
        (v / "Note.md").unlink()
        h.indexer.sweep(only=frozenset(), paths=[str(v / "Note.md")])
        assert _notes_with(h, "zqtwinupper") == ["vault/Note"]
        assert _notes_with(h, "zqtwinlower") == []
        assert h.stores.manifest.rel_of("vault/Note") == "Note.MD"
    finally:
        h.close()


def test_a_folder_named_like_a_note_takes_its_notes_when_moved_away(make_cfg: Any, tmp_path: Path) -> None:
    """A folder named "Book.md" moved out of the vault: its one event named a note key only, and
    the notes inside stayed as ghosts until the next full sweep."""
    v = tmp_path / "v"
    write(v / "Book.md" / "chapter.md", "# Chapter\n\nzqbookchapter\n")
    for i in range(3):
        write(v / f"n{i}.md", f"# N{i}\n\nfiller {i}\n")
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        assert _notes_with(h, "zqbookchapter") == ["vault/Book.md/chapter"]
        (v / "Book.md").rename(tmp_path / "Book.md")
        h.indexer.sweep(only=frozenset(), paths=[str(v / "Book.md")])
        assert _notes_with(h, "zqbookchapter") == []
    finally:
        h.close()


def _notes_with(h: Harness, word: str) -> list[str]:
    """The notes whose indexed text holds ``word`` (keyword index only)."""
    return [key for key, _score in h.stores.bm25.search_pages(word, 10)]


def test_a_new_keyword_index_is_refilled_before_the_first_sweep_reads_notes(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upgrade that starts a new keyword index (a new layout) refills it from the manifest
    before its first sweep: the sweep keeps unchanged chunks' keyword documents as they are, so
    they were found by no word until a check after the whole sweep (minutes on a large vault). A
    stop ends a refill between notes."""
    import threading

    from sidecar.index import bm25fill
    from sidecar.index import repair as repair_mod

    harness.sweep()
    harness.stores.bm25.delete_all()
    harness.stores.bm25.commit()
    assert harness.stores.bm25.search("spark plugs", 5) == []
    harness.indexer.activity.first_sweep_done = False  # as at a start
    seen: list[int] = []
    real_apply = harness.indexer._apply

    def apply(*args: Any, **kwargs: Any) -> Any:
        seen.append(harness.stores.bm25.num_docs())
        return real_apply(*args, **kwargs)

    monkeypatch.setattr(harness.indexer, "_apply", apply)
    harness.sweep()
    assert seen and seen[0] == harness.stores.manifest.indexed_chunk_count() > 0
    assert harness.stores.bm25.search("spark plugs", 5)

    stop = threading.Event()
    stop.set()
    monkeypatch.setattr(bm25fill, "_FILL_BATCH", 1)
    repair_mod.fill_bm25(harness.stores.bm25, harness.stores.manifest, stop)  # stopped: nothing committed
    harness.stores.bm25.commit()  # the next write's commit keeps what was there (the emptying is undone)
    assert harness.stores.bm25.search("spark plugs", 5)
    # The check after a stopped first sweep does not refill either (the stop waited for it)
    calls: list[Any] = []
    monkeypatch.setattr(repair_mod, "fill_bm25", lambda *a: calls.append(a))
    harness.stores.bm25.delete_all()
    harness.stores.bm25.commit()
    repair_mod.check_bm25(harness.stores, stop)
    assert calls == []


def test_an_index_made_before_the_swept_mark_is_not_read_as_new(make_cfg: Any, vault: Path) -> None:
    """An index from before the 'swept' mark holds what its sweeps read: it is not a new index
    (read as one, every answer said "still being built" for as long as a root stayed offline
    or held after an upgrade); a new index is marked new until its first whole sweep."""
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        assert h.stores.manifest.get_meta("swept") == "" and h.indexer.reading_first_time
        h.sweep()
        h.stores.manifest.delete_meta(["swept"])  # as an older version left it
    finally:
        h.close()
    h = Harness(cfg, FakeEmbedder())
    try:
        assert not h.indexer.reading_first_time and h.stores.manifest.get_meta("swept") == "1"
    finally:
        h.close()


def test_a_note_replaced_by_a_folder_of_its_name_leaves_at_its_events(harness: Harness, vault: Path) -> None:
    """`rm tar.md && mkdir tar.md && echo ... > tar.md/x.md`: the events indexed `tar.md/x` and
    the old note's text was found (`get` said "not a regular file") until the full sweep."""
    harness.sweep()
    assert search(harness, "sourdough starter flour")[0]["reference"] == "vault/Recipes/Bread"
    note = vault / "Recipes" / "Bread.md"
    note.unlink()
    write(note / "x.md", "# inner\n\nRye crumbs.\n")
    harness.indexer.sweep(only=frozenset(), paths={str(note), str(note / "x.md")})  # its file events
    states = harness.stores.manifest.file_states("vault/Recipes/")
    assert set(states) == {"vault/Recipes/Bread.md/x"}
    assert "vault/Recipes/Bread" not in {h["reference"] for h in search(harness, "sourdough starter flour")}


def test_a_symlink_loop_is_counted_as_skipped_from_its_event(harness: Harness, vault: Path) -> None:
    """`loop2.md -> loop1 -> loop2.md` made while the daemon runs: not counted as skipped until the
    full sweep (then "broken symlink"): its event found nothing."""
    harness.sweep()
    os.symlink(vault / "loop1", vault / "loop2.md")
    os.symlink(vault / "loop2.md", vault / "loop1")
    harness.indexer.sweep(only=frozenset(), paths={str(vault / "loop2.md"), str(vault / "loop1")})
    skipped = harness.indexer.changes.skipped_notes()
    assert skipped.get("vault/loop2") == (vault / "loop2.md", "broken symlink"), skipped
    harness.sweep()
    assert harness.indexer.changes.skipped_notes().get("vault/loop2") == skipped["vault/loop2"]


def _marked(h: Harness) -> tuple[int, int]:
    """(notes marked to be read again, notes)."""
    rows = h.stores.manifest._query("SELECT sum(size = -1), count(*) FROM files")[0]
    return int(rows[0] or 0), int(rows[1])


def _other_release_rebuilds(h: Harness, monkeypatch: pytest.MonkeyPatch, *, embed: bool = False) -> None:
    """The other release's `sidecar index --rebuild` on this index, its clock set back a day and
    its own marks (rows numbered from 1 again); ``embed``: its vectors computed too."""
    from sidecar.index import rowmarks as rowmarks_mod
    from sidecar.stores import manifest as manifest_mod

    with monkeypatch.context() as m:
        m.setattr(manifest_mod, "time", _ShiftedTime(-86_400.0))
        m.setattr(rowmarks_mod, "PROPERTY_NAME_READER_VERSION", 1)  # its own marks
        h.indexer.clear()
        h.indexer.sweep(retry_all=True)
        while embed and h.vectors.embed_pending():
            pass


def _other_release_write_is_read_again(h: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other release writes Projects/Boat.md (a file event) under a clock set back a day;
    this release's next look at the marks marks that note, and it alone, to be read again."""
    from sidecar.stores import manifest as manifest_mod

    with monkeypatch.context() as m:  # the other release, its clock set back
        m.setattr(manifest_mod, "time", _ShiftedTime(-86_400.0))
        write(vault / "Projects/Boat.md", "# Boat\n\nchanged by the older release\n")
        h.indexer.sweep(paths=[str(vault / "Projects/Boat.md")])
    h.indexer.reread_if_written_elsewhere()
    size = h.stores.manifest._query("SELECT size FROM files WHERE rel = 'Projects/Boat.md'")[0][0]
    assert size == -1, "the other release's write is not marked to be read again"
    assert _marked(h)[0] == 1  # that note alone


def test_the_row_mark_comes_down_when_the_newest_rows_are_deleted(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new row takes the number after the latest: once the newest notes were deleted by file
    events (no whole sweep), another release's write (a clock set back) took a number at or below
    the row mark and was never read again. The mark comes down with the latest row."""
    from sidecar.index.rowmarks import ROW_MARK, _written_until

    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        write(vault / "Zlast.md", "# Last\n\nwritten last.\n")
        h.sweep()  # a whole sweep: the marks at Zlast's row
        mark = int(h.stores.manifest.get_meta(_written_until(ROW_MARK)) or 0)
        (vault / "Zlast.md").unlink()
        h.indexer.sweep(paths=[str(vault / "Zlast.md")])  # a file event: its row deleted
        assert h.stores.manifest.last_row() < mark
        _other_release_write_is_read_again(h, vault, monkeypatch)
    finally:
        h.close()


@pytest.mark.parametrize("at", ["start", "reload"])
def test_an_exclusion_of_the_newest_note_lowers_the_row_mark(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, at: str
) -> None:
    """An exclusion deletes notes outside a sweep's batch: the mark stayed above the latest row.
    At start that read every note again for nothing (taken for rows numbered elsewhere); after a
    reload stopped before its whole sweep, another release's next write took the mark's number
    under a clock set back and was never read again."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        write(vault / "Private/Zlast.md", "# Last\n\nwritten last.\n")
        h.sweep()  # a whole sweep: the marks at Zlast's row
        h.indexer.set_excludes(["Private/**"], obsidian=True)
        assert h.indexer.remove_excluded() == 1  # no sweep batch
        if at == "start":
            with caplog.at_level("INFO"):
                h.indexer.reread_if_written_elsewhere()
            assert "notes_renumbered_reread" not in caplog.text
            assert _marked(h)[0] == 0
            return
        _other_release_write_is_read_again(h, vault, monkeypatch)
    finally:
        h.close()


def test_another_releases_rebuild_after_this_ones_numbers_rows_up_to_the_mark_and_is_read_again(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """This release rebuilt (rows 1..N, the row mark N), then the older release rebuilt the same
    vault under a clock set back (the remedy its warning names): rows 1..N again, none below the
    mark nor above it, so none of its writes was read again. The row at the mark is recorded
    with it (key and time): another there reads every note again once."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        h.indexer.clear()  # this release's `sidecar index --rebuild`
        h.indexer.sweep(retry_all=True)
        _other_release_rebuilds(h, monkeypatch)
        h.indexer._rows_checked = False  # this release's next start
        with caplog.at_level("INFO"):
            h.indexer.reread_if_written_elsewhere()
        marked, notes = _marked(h)
        assert notes > 0 and marked == notes, (marked, notes)
        assert "notes_renumbered_reread" in caplog.text
    finally:
        h.close()


def test_rows_numbered_elsewhere_are_found_before_the_starts_own_deletes(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A start deletes before it reads the marks (an interrupted delete redone, notes excluded
    while stopped): moving the mark with those deletes first hid the other release's rows."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        write(vault / "Private/Zlast.md", "# Last\n\nwritten last.\n")
        h.sweep()
        _other_release_rebuilds(h, monkeypatch)
        h.indexer._rows_checked = False  # this release's next start, Private excluded meanwhile
        h.indexer.set_excludes(["Private/**"], obsidian=True)
        assert h.indexer.remove_excluded() == 1
        with caplog.at_level("INFO"):
            h.indexer.reread_if_written_elsewhere()
        marked, notes = _marked(h)
        assert notes > 0 and marked == notes, (marked, notes)
    finally:
        h.close()


def test_a_note_at_the_row_mark_written_anew_reads_nothing_else_again_at_start(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The note written last edited again (a file event): its row takes a new number, the one at
    the mark is gone. The mark comes down to the row below it, so the next start reads that note
    again (written since the whole sweep), not every note."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        write(vault / "Zlast.md", "# Last\n\nwritten last.\n")
        h.sweep()  # a whole sweep: the marks at Zlast's row
        write(vault / "Zlast.md", "# Last\n\nedited again.\n")
        h.indexer.sweep(paths=[str(vault / "Zlast.md")])
        h.indexer._rows_checked = False  # the next start
        with caplog.at_level("INFO"):
            h.indexer.reread_if_written_elsewhere()
        assert "notes_renumbered_reread" not in caplog.text
        assert _marked(h)[0] == 1
    finally:
        h.close()


def test_a_kill_before_the_batch_ends_reads_only_the_notes_at_the_row_mark_again(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The note at the row mark written anew (or deleted) and the process killed before its batch
    ended, where the mark came down: the next start found the row at the mark gone, took it for
    rows numbered elsewhere and read every note again. The mark comes down in the transaction that
    writes the row, so only that note is read again."""
    from sidecar.index.indexer import Indexer

    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        write(vault / "Zlast.md", "# Last\n\nwritten last.\n")
        h.sweep()  # a whole sweep: the marks at Zlast's row
        for change in ("edited", "deleted"):
            if change == "edited":
                write(vault / "Zlast.md", "# Last\n\nedited again.\n")
            else:
                write(vault / "Ylast.md", "# Y\n\nwritten.\n")
                h.sweep()  # the marks at Ylast's row
                (vault / "Ylast.md").unlink()
            with monkeypatch.context() as m:
                m.setattr(Indexer, "_row_mark_kept", lambda _self: None)  # killed before the batch's end
                h.indexer.sweep(paths=[str(vault / ("Zlast.md" if change == "edited" else "Ylast.md"))])
            h.indexer._rows_checked = False  # the next start
            caplog.clear()
            with caplog.at_level("INFO"):
                h.indexer.reread_if_written_elsewhere()
            assert "notes_renumbered_reread" not in caplog.text, change
            assert _marked(h)[0] == (1 if change == "edited" else 0), change
            h.sweep()
    finally:
        h.close()


def test_rows_numbered_below_the_mark_read_every_note_again_once(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Another release's rebuild (the remedy the downgrade warning suggests) numbers its rows
    from 1, far below a mark that grew with every write: under a clock set back neither mark
    caught its writes, and this release kept its reading of every note for good. A latest row
    below the mark at start reads every note again once, embedding no text again."""
    model = FakeEmbedder()
    h = Harness(make_cfg(vault), model)
    try:
        for _ in range(3):  # a while of use: every note written anew a few times
            for p in vault.rglob("*.md"):
                if ".obsidian" not in p.parts and ".trash" not in p.parts:
                    p.write_text(p.read_text() + "\nmore\n")
            h.sweep()
        _other_release_rebuilds(h, monkeypatch, embed=True)
        model.embedded.clear()
        h.indexer._rows_checked = False  # this release's next start
        with caplog.at_level("INFO"):
            h.indexer.reread_if_written_elsewhere()
        marked, notes = _marked(h)
        assert notes > 0 and marked == notes, (marked, notes)
        assert "notes_renumbered_reread" in caplog.text
        h.sweep()
        while h.vectors.embed_pending():
            pass
        assert model.embedded == []  # read again, not embedded again
        h.indexer.reread_if_written_elsewhere()  # once: the marks stand on the rows now
        assert _marked(h)[0] == 0
    finally:
        h.close()


def test_sidecar_index_in_process_with_vectors_off_counts_no_chunk_waiting(
    make_cfg: Any, vault: Path
) -> None:
    """`sidecar index --json` without a daemon, the model off by configuration: every chunk was
    counted in `pending_vectors`, a backlog that never goes. None waits for a vector (health
    says 0 too)."""
    from sidecar.daemon.oneshot import index_once

    summary = index_once(make_cfg(vault, **{"embedder.enabled": False}), rebuild=False)
    assert summary["chunks"] > 0 and summary["pending_vectors"] == 0
