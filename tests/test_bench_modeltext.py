"""The benchmarks that read chunks' model texts straight from a manifest (bench/levers.py,
bench/throughput.py) read them whole: the manifest keeps a head plus where in the chunk's text
the rest starts, and the column alone is only that head. A real manifest in a tmp home; no
model, no daemon."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sidecar.stores.embedtext import embed_hash
from sidecar.stores.manifest import Manifest
from sidecar.stores.manifest_rows import ChunkRecord, FileRecord

BENCH = Path(__file__).resolve().parents[1] / "bench"
# A note whose text starts with its title's heading: the head kept is '' (stores.embedtext).
_CHUNKS = [
    ("gdate\n> An alias of `date` for the shell.", "# gdate\n> An alias of `date` for the shell."),
    ("gdate › Usage\nRun it with a format string.", "## Usage\nRun it with a format string."),
]


def _bench(name: str) -> ModuleType:
    """bench/<name>.py as a module (it imports its sibling ``common``)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "index").mkdir()
    m = Manifest(tmp_path / "index" / "manifest.sqlite")
    record = FileRecord("vault/gdate", "vault", "", "gdate.md", 1, 10, "h", "indexed")
    chunks = [
        ChunkRecord(f"c{i}", record.key, i, text, (), i, i, model, 8, embed_hash(model))
        for i, (model, text) in enumerate(_CHUNKS)
    ]
    try:
        with m.transaction() as db:
            m.commit_file(record, chunks, db)
        assert m.read("SELECT embed_text FROM chunks WHERE ord = 0") == [("",)]  # kept as a head
    finally:
        m.close()
    return tmp_path


def test_levers_read_whole_model_texts_and_titles(home: Path) -> None:
    levers = _bench("levers")
    assert levers.note_texts(home)["vault/gdate"].split("\n")[0] == "gdate"
    assert levers.note_outlines(home)["vault/gdate"].split("\n")[0] == "gdate"
    assert [e for _c, _k, _o, e, _t, _h in levers.chunk_rows(home)] == [m for m, _ in _CHUNKS]


def test_throughput_baseline_embeds_whole_model_texts(home: Path) -> None:
    throughput = _bench("throughput")
    m = Manifest(home / "index" / "manifest.sqlite")
    try:
        assert sorted(t for t, _n, _h in throughput.waiting_texts(m)) == sorted(m for m, _ in _CHUNKS)
    finally:
        m.close()
