"""The per-note vector limit (index.maxVectorChunksPerNote): a long note stays whole in keyword
search while only its first chunks are embedded; nothing waits for the rest; status names such
notes and the note most of the vector queue belongs to. Real stores, the fake embedder, a limit
of 5 chunks instead of long notes."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients import cli_render
from sidecar.clients.cli_render import render_status
from sidecar.stores.lifecycle import open_vectors
from sidecar.stores.manifest import Manifest
from tests.conftest import FakeEmbedder, Harness, write
from tests.in_process import InProcessServer
from tests.index_helpers import search

CAP = 5
KEY = "vault/Long"


def _long_note(sections: int, changed: int | None = None) -> str:
    """A note of ``sections`` headed sections (a chunk each); ``changed``: that one reworded."""
    parts = ["# Long\n"]
    for i in range(sections):
        word = "edited" if i == changed else "plain"
        parts.append(f"## Part {i}\n\nSection{i} talks about topic{i} in {word} words.\n")
    return "\n".join(parts)


def _vectors_of(h: Harness, key: str) -> set[int]:
    """The places (ord) of a note's chunks that have a vector in the serving table."""
    rows = h.stores.manifest.read("SELECT ord FROM chunks WHERE key = ? AND has_vector = 1", (key,))
    return {int(r[0]) for r in rows}


@pytest.fixture
def capped(make_cfg: Any, vault: Path) -> Iterator[Harness]:
    write(vault / "Long.md", _long_note(12))
    h = Harness(make_cfg(vault, **{"index.maxVectorChunksPerNote": CAP}), FakeEmbedder())
    yield h
    h.close()


def test_a_long_note_gets_vectors_for_its_first_chunks_only(capped: Harness) -> None:
    """12 chunks, a limit of 5: the first 5 are embedded, the other 7 wait for nothing (the queue
    is empty, so no ETA waits for them), and the last one is still found by its words."""
    h = capped
    h.sweep()
    manifest = h.stores.manifest
    assert len(manifest.chunks_of(KEY)) == 12  # a chunk a section
    assert _vectors_of(h, KEY) == set(range(CAP))
    assert manifest.pending_count() == 0
    hits = search(h, "Section11 topic11")
    assert hits and hits[0]["reference"] == KEY and hits[0]["vecScore"] is None
    notes, chunks, examples = manifest.keyword_only()
    assert (notes, chunks) == (1, 7) and examples == [(KEY, 12, 7)]


def test_an_edit_of_a_capped_note_embeds_only_its_changed_chunk(capped: Harness) -> None:
    """An edit inside the limit embeds the changed chunk alone; one past it embeds nothing."""
    h = capped
    h.sweep()
    model = h.slot.model
    assert isinstance(model, FakeEmbedder)
    vault = h.cfg.vault.path
    assert vault is not None
    model.embedded.clear()
    write(vault / "Long.md", _long_note(12, changed=2))
    h.sweep()
    assert len(model.embedded) == 1 and "Section2" in model.embedded[0]
    model.embedded.clear()
    write(vault / "Long.md", _long_note(12, changed=10))
    h.sweep()
    assert model.embedded == [] and h.stores.manifest.pending_count() == 0
    assert search(h, "Section10 edited")[0]["reference"] == KEY


def test_raising_the_limit_queues_the_rest_and_lowering_keeps_vectors(capped: Harness) -> None:
    """Raised (a reload sets it): the chunks it lets in wait for vectors and get them. Lowered:
    the vectors computed stay (no work thrown away), nothing past it is computed again."""
    h = capped
    h.sweep()
    manifest = h.stores.manifest
    manifest.vector_cap = 9
    assert manifest.pending_count() == 4
    h.sweep()
    assert _vectors_of(h, KEY) == set(range(9)) and manifest.pending_count() == 0
    manifest.vector_cap = 3
    assert manifest.pending_count() == 0
    assert _vectors_of(h, KEY) == set(range(9))
    assert manifest.keyword_only()[:2] == (1, 3)  # the 3 past 9: no vector; 3..8 keep theirs


def test_a_model_switch_builds_only_the_limited_vectors(capped: Harness) -> None:
    """The background switch to another model fills its table up to the limit and then takes
    over (it waited for the chunks past it forever)."""
    h = capped
    h.sweep()

    class OtherModel(FakeEmbedder):
        model_id = "other-model@2"
        dim = 32

    old = h.stores.serving
    assert old is not None
    other = OtherModel()
    new_table = open_vectors(h.cfg, other.model_id, other.dim, other.pooling)
    h.vectors.begin_migration(old.store, old.model, new_table, other)
    assert h.stores.manifest.pending_count("has_next") > 0
    while h.vectors.embed_pending(batch=4):
        pass
    assert h.stores.building is None and h.stores.serving is not None
    assert h.stores.serving.store is new_table
    assert _vectors_of(h, KEY) == set(range(CAP))
    assert sum(1 for e in other.embedded if "Section" in e) == CAP


def test_deleting_a_capped_note_clears_it(capped: Harness) -> None:
    """Deleted: its vectors, its chunks and its keyword-only count are gone."""
    h = capped
    h.sweep()
    vault = h.cfg.vault.path
    assert vault is not None
    (vault / "Long.md").unlink()
    h.sweep()
    assert h.stores.manifest.chunks_of(KEY) == []
    assert h.stores.manifest.keyword_only() == (0, 0, [])
    serving = h.stores.serving
    assert serving is not None
    assert serving.store.ids() == h.stores.manifest.all_chunk_ids()  # no vector of it is left


def test_status_names_capped_notes_and_the_note_that_fills_the_queue(
    serve_in_process: Callable[..., InProcessServer], vault: Path
) -> None:
    """health (status --json) lists the capped note with its keyword-only chunks and the key to
    raise; status says so in words, and names a note that holds most of the vector queue."""
    write(vault / "Long.md", _long_note(12))
    server = serve_in_process(vault, **{"index.maxVectorChunksPerNote": CAP})
    health = server.call("health")
    capped = health["index"]["keyword_only"]
    assert capped == {
        "notes": 1,
        "chunks": 7,
        "limit": CAP,
        "setting": "index.maxVectorChunksPerNote",
        "examples": [{"reference": KEY, "chunks": 12, "keyword_only": 7}],
    }
    text = render_status(health)
    assert "Keyword-only chunks: 7 in 1 note longer than index.maxVectorChunksPerNote (5 chunks" in text
    assert "vault/Long (7 of 12)" in text
    assert "raise index.maxVectorChunksPerNote and run `sidecar reload`" in text
    # One note most of a long queue: named in the Vectors line.
    health["index"].update(pending_vectors=900, pending_largest={"reference": KEY, "chunks": 800})
    assert "Vectors: 900 chunks waiting for vectors, 800 of them from vault/Long, " in render_status(health)
    health["index"].update(pending_largest={"reference": KEY, "chunks": 300})
    assert "of them from" not in render_status(health)  # a third of the queue: not named


def test_status_says_every_chunk_within_the_limit_has_a_vector_beside_keyword_only_ones(
    serve_in_process: Callable[..., InProcessServer], vault: Path
) -> None:
    """status said "Vectors: every chunk has a vector" and on the next line "Keyword-only
    chunks: 7 ...": the Vectors line names the limit while some chunks are past it."""
    write(vault / "Long.md", _long_note(12))
    write(vault / "Short.md", "# Short\n\nsome words\n")
    server = serve_in_process(vault, **{"index.maxVectorChunksPerNote": CAP})
    health = server.call("health")
    text = render_status(health)
    assert "Vectors: every chunk within index.maxVectorChunksPerNote has a vector\n" in text
    assert "Keyword-only chunks: 7" in text
    assert "every chunk has a vector" not in text
    health["index"]["keyword_only"] = None  # no note past the limit: every chunk
    assert "Vectors: every chunk has a vector\n" in render_status(health)


def test_health_scans_the_queue_for_its_limits_at_most_once_a_second(
    serve_in_process: Callable[..., InProcessServer], vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each health ran keyword_only and pending_largest, each a scan of the queue's index under
    the manifest's lock, and `sidecar index` asks twice a second: now each is kept a second (a
    changed limit counts anew), and the largest note is not looked for under 256 waiting."""
    write(vault / "Long.md", _long_note(12))
    server = serve_in_process(vault, **{"index.maxVectorChunksPerNote": CAP})
    handlers = server.handlers
    manifest = handlers.manifest
    calls: dict[str, int] = {"keyword_only": 0, "pending_largest": 0}

    def counted(name: str) -> Callable[..., Any]:
        real = getattr(manifest, name)

        def run(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(*args, **kwargs)

        return run

    for name in calls:
        monkeypatch.setattr(manifest, name, counted(name))
    now = [1000.0]
    handlers.limits.clock = lambda: now[0]
    for _ in range(3):
        assert server.call("health")["index"]["keyword_only"]["chunks"] == 7
    assert calls == {"keyword_only": 1, "pending_largest": 0}  # nothing waits: never looked for
    now[0] += 1.5
    server.call("health")
    assert calls["keyword_only"] == 2
    manifest.vector_cap = 8  # a reload changed the limit: counted at once
    assert server.call("health")["index"]["keyword_only"]["chunks"] == 4
    assert calls["keyword_only"] == 3
    limits = handlers.limits
    assert limits.pending_largest(255) is None and calls["pending_largest"] == 0
    limits.pending_largest(300)
    limits.pending_largest(300)
    assert calls["pending_largest"] == 1
    manifest.pending_largest = lambda *a, **k: (KEY, 290)  # type: ignore[method-assign]
    now[0] += 1.5
    assert limits.pending_largest(300) == {"reference": KEY, "chunks": 290}
    # Kept a second while the queue shrinks: never more of it than waits now.
    assert limits.pending_largest(260) == {"reference": KEY, "chunks": 260}


def test_status_names_a_note_of_the_queue_from_as_many_chunks_as_health_looks_for_it() -> None:
    """health does not look for the largest note under limits.LARGEST_NAMED waiting chunks: status
    must not name one under more."""
    from sidecar.daemon.limits import LARGEST_NAMED

    assert LARGEST_NAMED == cli_render._LARGEST_NAMED


def test_pending_largest_names_the_note_with_most_waiting_chunks(make_cfg: Any, vault: Path) -> None:
    """Before any vector: the long note is the one most chunks wait for (vault and wiki only)."""
    write(vault / "Long.md", _long_note(12))
    h = Harness(make_cfg(vault, **{"index.maxVectorChunksPerNote": 10}), None)
    try:
        h.indexer.sweep()
        assert h.stores.manifest.pending_largest() == (KEY, 10)
    finally:
        h.close()


def _manifest_of_the_previous_version(tmp_path: Path) -> Path:
    """A manifest as the version before made it: its pending index over key alone."""
    path = tmp_path / "manifest.sqlite"
    Manifest(path).close()
    db = sqlite3.connect(path)
    db.execute("DROP INDEX chunks_waiting")
    db.execute("CREATE INDEX chunks_pending ON chunks(key) WHERE has_vector = 0")
    db.commit()
    db.close()
    return path


def test_a_manifest_of_the_previous_version_opens_with_the_new_index(tmp_path: Path) -> None:
    """A manifest with the old pending index (chunks_pending) opens: it is replaced by the one
    over (key, ord), and an older version opening it again makes its own back (no schema bump)."""
    path = _manifest_of_the_previous_version(tmp_path)
    m = Manifest(path)
    try:
        names = {r[0] for r in m.read("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "chunks_waiting" in names and "chunks_pending" not in names
        plan = " ".join(
            str(r[-1])
            for r in m.read(
                "EXPLAIN QUERY PLAN SELECT count(*) FROM chunks WHERE has_vector = 0 AND ord < ?", (5,)
            )
        )
        assert "chunks_waiting" in plan
    finally:
        m.close()


def test_a_kill_while_the_pending_index_is_swapped_leaves_one_of_them(tmp_path: Path) -> None:
    """The open that replaces the old pending index dropped it in one statement and made the new
    one in the next: killed between them (here as the second one starts), the queue had neither
    until the next writable open. One transaction now: the old index is still there."""
    path = _manifest_of_the_previous_version(tmp_path)
    script = (
        "import os, sqlite3, sys\n"
        "from sidecar.stores.manifest import Manifest\n"
        "real = sqlite3.connect\n"
        "mark = 'INDEX IF NOT EXISTS chunks_waiting'\n"
        "def connect(*a, **k):\n"
        "    db = real(*a, **k)\n"
        "    db.set_trace_callback(lambda sql: os._exit(9) if mark in sql else None)\n"
        "    return db\n"
        "sqlite3.connect = connect\n"
        "Manifest(__import__('pathlib').Path(sys.argv[1]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], check=False, timeout=60)
    assert done.returncode == 9  # killed at the second statement, as planned
    db = sqlite3.connect(path)
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    db.close()
    assert "chunks_pending" in names and "chunks_waiting" not in names
    Manifest(path).close()  # the next open swaps them
    db = sqlite3.connect(path)
    names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    db.close()
    assert "chunks_waiting" in names and "chunks_pending" not in names


def test_a_reload_that_raises_the_limit_embeds_the_chunks_it_lets_in(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """index.maxVectorChunksPerNote is applied by a reload (no restart): the chunks between the
    old and the new limit are embedded, and status counts fewer keyword-only ones."""
    write(vault / "Long.md", _long_note(12))
    cfg_file = tmp_path / "sidecar.yaml"
    cfg_file.write_text(f"index:\n  maxVectorChunksPerNote: {CAP}\n")
    d = daemon_factory(vault, extra=["--config", str(cfg_file)]).start()
    before = d.wait_for(  # keyword_only may lag a second behind the queue (health caches it)
        lambda h: (
            h["embedder"]["state"] == "ok"
            and h["index"]["pending_vectors"] == 0
            and h["index"]["keyword_only"]
        ),
        timeout=120,
    )["index"]["keyword_only"]
    assert before["notes"] == 1 and before["examples"][0]["reference"] == KEY
    cfg_file.write_text("index:\n  maxVectorChunksPerNote: 9\n")
    answer = d.call("reload")
    assert answer["changed"] == ["index.maxVectorChunksPerNote"] and answer["needsRestart"] == []
    after = d.wait_for(
        lambda h: (
            h["index"]["pending_vectors"] == 0
            and (h["index"]["keyword_only"] or {}).get("chunks") == before["chunks"] - 4
        ),
        timeout=120,
    )
    assert after["index"]["keyword_only"]["limit"] == 9


def test_an_edit_at_the_start_shifts_chunks_past_the_limit_with_their_own_vectors(capped: Harness) -> None:
    """Three sections put at the start: they are embedded, the five old ones keep theirs (now at
    3..7, past the limit), each vector still belongs to its own text."""
    h = capped
    h.sweep()
    vault = h.cfg.vault.path
    assert vault is not None
    new = "".join(f"## New {i}\n\nFresh{i} prefaced words.\n\n" for i in range(3))
    write(vault / "Long.md", _long_note(12).replace("# Long\n", "# Long\n\n" + new))
    h.sweep()
    m = h.stores.manifest
    assert _vectors_of(h, KEY) == set(range(8))
    assert m.pending_count() == 0
    assert m.keyword_only()[:2] == (1, 7)
    rows = m.read("SELECT ord, text FROM chunks WHERE key = ? AND ord BETWEEN 5 AND 7 ORDER BY ord", (KEY,))
    assert ["Section2" in rows[0][1], "Section3" in rows[1][1], "Section4" in rows[2][1]] == [True] * 3
    hit = search(h, "Section4 topic4")[0]
    assert hit["reference"] == KEY and hit["vecScore"] is not None


def test_an_appended_journal_keeps_its_newest_entries_keyword_only(capped: Harness) -> None:
    """The limit keeps a note's first chunks (README, the config's comment): a log written at its
    end has its newest entries past it, found by their words, never embedded."""
    h = capped
    h.sweep()
    vault = h.cfg.vault.path
    assert vault is not None
    write(vault / "Long.md", _long_note(12) + "\n## Today\n\nTodaysentry newest words.\n")
    h.sweep()
    hit = search(h, "Todaysentry newest")[0]
    assert hit["reference"] == KEY
    assert hit["vecScore"] is None


def test_an_agents_note_past_the_limit_is_counted_not_named(
    serve_in_process: Callable[..., InProcessServer], vault: Path
) -> None:
    write(vault / "a.md", "# A\n\nsome words\n")
    server = serve_in_process(vault, **{"index.maxVectorChunksPerNote": CAP})
    answer = server.call("write", {"slug": "longmem", "content": _long_note(12)}, agent="claude")
    assert answer.get("searchable") is True
    health = server.call("health")
    ko = health["index"]["keyword_only"]
    assert ko["notes"] == 1 and ko["examples"] == []
    text = render_status(health)
    assert "memory/claude" not in text and "longmem" not in text
