"""A note written to often (a plugin's log note appended to every second) over real stores: a
line appended rewrites only the chunks it changed."""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.stores.bm25 import Bm25Index
from tests.conftest import Harness, write
from tests.index_helpers import search


def _log_note(parts: int) -> str:
    """A log note of ``parts`` sections, one chunk each (the fake tokenizer counts words)."""
    return "# Sync log\n\n" + "".join(
        f"## Hour {i}\n\n- synced folder{i} with remote{i} and found nothing new\n\n" for i in range(parts)
    )


def _refs(h: Harness, query: str) -> list[str]:
    return [hit["reference"] for hit in search(h, query)]


@pytest.fixture
def documents(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids of the keyword documents built (a chunk's id, or a page's note key)."""
    built: list[str] = []
    real = Bm25Index._document

    def counting(doc_id: str, d: Any, body: str) -> Any:
        built.append(doc_id)
        return real(doc_id, d, body)

    monkeypatch.setattr(Bm25Index, "_document", staticmethod(counting))
    return built


def test_a_line_appended_to_a_long_note_rewrites_only_the_chunk_it_changed(
    harness: Harness, documents: list[str]
) -> None:
    """60 chunks, one line appended: one chunk document and the note's page are written (every
    chunk was deleted and added again, and every chunk row rewritten); the stores still agree
    and both the new and the old words are found."""
    log = harness.cfg.vault.path / "Sync log.md"  # type: ignore[operator]
    write(log, _log_note(60))
    harness.sweep()
    assert len(harness.stores.manifest.chunks_of("vault/Sync log")) == 60
    documents.clear()
    rows = harness.stores.manifest._db.total_changes
    with log.open("a", encoding="utf-8") as fh:
        fh.write("- pelican uploaded\n")
    assert harness.sweep()["changed"] == 1
    assert [d for d in documents if d != "vault/Sync log"] == [documents[0]]  # one chunk
    assert documents.count("vault/Sync log") == 1  # the page: the whole note
    assert harness.stores.manifest._db.total_changes - rows < 20  # not 60 chunk rows again
    assert harness.stores.bm25.all_ids() == harness.stores.manifest.all_chunk_ids()
    assert harness.stores.bm25.num_docs() == harness.stores.manifest.chunk_count()
    assert _refs(harness, "pelican")[0] == "vault/Sync log"
    assert _refs(harness, "folder7 remote7")[0] == "vault/Sync log"
    assert harness.stores.bm25.search_pages("pelican folder7", 5)[0][0] == "vault/Sync log"


def test_a_new_title_or_a_note_left_half_written_rewrites_every_chunk(
    harness: Harness, documents: list[str]
) -> None:
    """Every chunk document carries the note's title and aliases: a changed front matter
    rewrites them all. A note a crash left marked ``indexing`` may be in the keyword index as
    no manifest row says: it is replaced whole too, and no chunk is doubled."""
    log = harness.cfg.vault.path / "Sync log.md"  # type: ignore[operator]
    write(log, _log_note(10))
    harness.sweep()
    documents.clear()
    write(log, "---\naliases: [Albatross journal]\n---\n" + _log_note(10))
    harness.sweep()
    assert len([d for d in documents if d != "vault/Sync log"]) == 10
    assert _refs(harness, "albatross")[0] == "vault/Sync log"
    harness.stores.manifest.mark_state(["vault/Sync log"], "indexing")
    documents.clear()
    with log.open("a", encoding="utf-8") as fh:
        fh.write("- cormorant seen\n")
    harness.sweep()
    assert len([d for d in documents if d != "vault/Sync log"]) == 10
    assert harness.stores.bm25.num_docs() == harness.stores.manifest.chunk_count()
    assert harness.stores.bm25.all_ids() == harness.stores.manifest.all_chunk_ids()
