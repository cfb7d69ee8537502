"""Shared fixtures: a hermetic environment, small vaults, a fake embedder, real stores, a real
server in this process and a real daemon in a subprocess."""

from __future__ import annotations

import hashlib
import os
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sidecar.config import Config, load_config
from sidecar.daemon.compose import build
from sidecar.model.embedder import EmbedderSlot
from sidecar.stores.bm25 import Bm25Index
from sidecar.stores.lifecycle import open_vectors
from sidecar.stores.manifest import Manifest

# The subprocess harness lives in tests/daemon_process.py, shared with the benchmarks; these names
# stay importable from here for the test modules that import them from conftest.
from tests.daemon_process import DaemonProcess, exchange  # noqa: F401
from tests.in_process import InProcessServer

REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Bytecode for the run's own processes where the environment turned it off
    (PYTHONDONTWRITEBYTECODE): each of the hundreds of daemons and CLI commands a run starts
    compiled the package from its source again (about a third of a second each), and each xdist
    worker rewrote the asserts of every test module it collected (most of its collection). Kept
    under pytest's cache folder, never beside the sources; set before the workers start, so they
    and every process they start inherit it."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        os.environ.pop("PYTHONDONTWRITEBYTECODE")
        os.environ["PYTHONPYCACHEPREFIX"] = str(config.rootpath / ".pytest_cache" / "pycache")
        sys.dont_write_bytecode = False  # and this process, for the test modules it imports next
        sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"]
    if hasattr(config.option, "loadscopereorder"):
        # xdist hands the files out by their number of tests, most first; by LONGEST_FILES here
        config.option.loadscopereorder = False


# The files that take longest, longest first (whole-suite durations on two workers, summed per
# file). Under pytest-xdist's --dist loadfile each file runs whole on one worker, handed out in
# this order: started last, one of them kept a worker busy for minutes while the other was
# done. A file not named here is only handed out later; the list needs no exactness.
LONGEST_FILES = (
    "tests/reliability/test_faults.py",
    "tests/test_ann_retrain.py",
    "tests/test_sync.py",
    "tests/reliability/test_crash.py",
    "tests/test_daemon_phases.py",
    "tests/test_agents.py",
    "tests/test_daemon.py",
    "tests/reliability/test_hostile_files.py",
    "tests/test_e5.py",
    "tests/test_cli.py",
    "tests/test_service.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (``LONGEST_FILES``), the rest in their usual order."""
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Under pytest-xdist (`.ci/run`) the default model is converted once, here on the controller
    before its workers start (the same code path as a user's first start), into one folder every
    worker's daemons read (``prepared_models``).

    Outside any test: converted by a worker within its first test, a conversion slower than that
    test's timeout (a slow or loaded runner) failed the session fixture, and with it every test
    of the worker. A conversion per worker had doubled its CPU; two at once into one folder
    would replace it under a daemon reading it."""
    config = session.config
    if config.option.collectonly or not config.pluginmanager.has_plugin("dsession"):
        return  # one process (or a worker): the first daemon that loads the model converts it
    from sidecar.model.locate import resolve_model

    factory: pytest.TempPathFactory = config._tmp_path_factory  # type: ignore[attr-defined]
    folder = factory.mktemp("prepared-models", numbered=False)
    home = factory.mktemp("prepare-home", numbered=False)
    env = {"SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER_CACHE_DIR": str(folder)}
    try:
        resolve_model(load_config(env=env))
    except Exception as exc:  # the model tests say what is wrong; each worker's daemons prepare it then
        print(f"the default model was not prepared ahead: {exc}", file=sys.stderr)
        return
    config.stash[_PREPARED] = str(folder)


_PREPARED = pytest.StashKey[str]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Tell each xdist worker where the controller prepared the model."""
    folder = node.config.stash.get(_PREPARED, None)
    if folder is not None:
        node.workerinput["prepared_models"] = folder


@pytest.fixture(scope="session")
def prepared_models(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache of the int8-kernel model copy for the whole run: the controller's under xdist
    (``pytest_sessionstart``), else made by the first daemon that loads the model and reused by
    the rest."""
    folder = getattr(request.config, "workerinput", {}).get("prepared_models")
    return Path(folder) if folder else tmp_path_factory.mktemp("prepared-models")


@pytest.fixture(autouse=True)
def hermetic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prepared_models: Path) -> None:
    """Every user path points into tmp_path; no SIDECAR_* or XDG variable leaks in (except the
    shared cache of the prepared model, see ``prepared_models``)."""
    for name in list(os.environ):
        if name.startswith(("SIDECAR_", "XDG_")) or name in (
            "JOURNAL_STREAM",
            "NOTIFY_SOCKET",
            "WATCHDOG_USEC",
        ):
            monkeypatch.delenv(name)
    # the system language a "Same as system" week start follows: none, whatever the machine's
    for name in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LC_TIME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
    (tmp_path / "userhome").mkdir(exist_ok=True)
    monkeypatch.setenv("SIDECAR_EMBEDDER_CACHE_DIR", str(prepared_models))


class FakeEmbedder:
    """Deterministic bag-of-words vectors behind the real Embedder interface."""

    model_id = "fake-bow@1"
    dim = 64
    pooling = "mean"

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, dtype=np.float32)
        for word in text.lower().split():
            v[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        n = np.linalg.norm(v)
        return v / n if n else v

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        self.embedded.extend(texts)
        return np.stack([self._vec(t) for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._vec(text)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    """A small vault with a wiki, a dot-folder and a few ordinary notes."""
    return make_vault(tmp_path / "vault")


def make_vault(v: Path) -> Path:
    """The notes of the ``vault`` fixture, at ``v``."""
    write(v / "Garden.md", "---\ntags: [garden]\n---\n# Garden\n\nTomatoes need sun and water every day.\n")
    write(v / "Projects/Boat.md", "# Boat\n\n## Engine\n\nThe outboard engine needs new spark plugs.\n")
    write(v / "Recipes/Bread.md", "# Bread\n\nSourdough bread needs flour, water, salt and a starter.\n")
    write(v / "wiki/Backups.md", "# Backups\n\nWe back up the NAS with restic every night at 2am.\n")
    write(v / ".obsidian/workspace.md", "# not a note\n")
    write(v / ".trash/Old.md", "# deleted note\n")
    return v


@pytest.fixture
def make_cfg(tmp_path: Path) -> Any:
    def make(vault_dir: Path | None, **flags: Any) -> Config:
        all_flags = {"home": str(tmp_path / "home"), "vault.path": str(vault_dir) if vault_dir else None}
        all_flags.update(flags)
        return load_config(flags=all_flags, env={})

    return make


class Harness:
    """Real stores in tmp_path with a fake (or given) embedder, driven without a daemon."""

    def __init__(self, cfg: Config, model: Any) -> None:
        self.cfg = cfg
        self.slot = EmbedderSlot()
        if model is not None:
            self.slot.set_ok(model, "test")
        else:
            self.slot.set_failed("no model in this test")
        parts = build(cfg, self.slot)
        self.problems, self.stores, self.vectors = parts.problems, parts.stores, parts.vectors
        self.supervisor, self.indexer, self.repair = parts.supervisor, parts.indexer, parts.repair
        if model is not None:
            self.vectors.attach(open_vectors(cfg, model.model_id, model.dim, model.pooling), model)

    def sweep(self) -> dict[str, int]:
        summary = self.indexer.sweep()
        while self.vectors.embed_pending():
            pass
        return summary

    def close(self) -> None:
        self.stores.close()


@pytest.fixture
def harness(make_cfg: Any, vault: Path) -> Iterator[Harness]:
    h = Harness(make_cfg(vault), FakeEmbedder())
    yield h
    h.close()


# --- the socket loop and handlers in this process (tests/in_process.py) -------------------------

KEYWORD_ONLY = None  # ``serve_in_process(model=KEYWORD_ONLY)``: no model, search is BM25 only


@pytest.fixture
def serve_in_process(make_cfg: Any, vault: Path) -> Iterator[Callable[..., InProcessServer]]:
    """Start real servers in this process over a swept vault (``vault`` by default): the fake
    embedder unless ``model`` says otherwise (KEYWORD_ONLY, or a real model); ``flags`` are
    configuration keys (``**{"server.maxFrameBytes": 2048}``). Each is closed after the test."""
    started: list[tuple[InProcessServer, Harness]] = []

    def start(vault_dir: Path | None = vault, model: Any = "fake", **flags: Any) -> InProcessServer:
        h = Harness(make_cfg(vault_dir, **flags), FakeEmbedder() if model == "fake" else model)
        try:
            h.sweep()
            server = InProcessServer(h)
        except BaseException:
            h.close()
            raise
        started.append((server, h))
        return server

    yield start
    for server, h in started:
        try:
            server.close()
        finally:
            h.close()


@pytest.fixture
def in_process(serve_in_process: Callable[..., InProcessServer]) -> InProcessServer:
    """A real server in this process over the small ``vault``, with the fake embedder."""
    return serve_in_process()


# --- a real daemon in a subprocess (tests/daemon_process.py) ---------------------------------


@pytest.fixture
def silent_socket(tmp_path: Path) -> Iterator[Path]:
    """A socket path that takes connections and never answers (a daemon stopped by SIGSTOP, a
    hang): they wait in the listen backlog."""
    import socket

    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    path = folder / "s.sock"
    silent = socket.socket(socket.AF_UNIX)
    silent.bind(str(path))
    silent.listen()
    try:
        yield path
    finally:
        silent.close()


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[DaemonProcess] = []

    def factory(vault_dir: Path | None, name: str = "home", **kw: Any) -> DaemonProcess:
        d = DaemonProcess(tmp_path / name, vault_dir, **kw)
        started.append(d)
        return d

    yield factory
    for d in started:
        d.kill()


def make_notes(vault: Path, n: int) -> None:
    """``n`` small notes of random words in seven folders (deterministic)."""
    rng = random.Random(7)
    words = [
        "garden",
        "boat",
        "engine",
        "bread",
        "backup",
        "restic",
        "kayak",
        "paddle",
        "tomato",
        "propeller",
    ]
    for i in range(n):
        body = "\n\n".join(" ".join(rng.choice(words) for _ in range(30)) for _ in range(rng.randint(1, 4)))
        write(vault / f"folder{i % 7}" / f"note-{i:03d}.md", f"# Note {i}\n\n{body}\n")


def store_ids(home: Path) -> tuple[set[str], set[str], set[str]]:
    """Chunk ids of a stopped daemon's manifest, BM25 index and vector table (chunks that need no
    vector, flag 2, count as present in the vector set so the three compare directly)."""
    cfg = load_config(flags={"home": str(home)}, env={})
    manifest = Manifest(cfg.index_dir / "manifest.sqlite")
    bm25 = Bm25Index(cfg.index_dir / "bm25")
    try:
        ids = manifest.all_chunk_ids()
        novec = {r[0] for r in manifest._query("SELECT chunk_id FROM chunks WHERE has_vector = 2")}
        bm25_ids = bm25.all_ids()
        table = manifest.get_meta("vector_table")
    finally:
        bm25.close()
        manifest.close()
    import lancedb

    db = lancedb.connect(str(cfg.index_dir / "vectors"))
    vec = (
        db.open_table(table)
        .search()
        .select(["chunk_id"])
        .limit(None)
        .to_arrow()
        .column("chunk_id")
        .to_pylist()
    )
    assert len(vec) == len(set(vec)), "duplicate vectors"
    return ids, bm25_ids, set(vec) | novec
