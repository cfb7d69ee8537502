"""Shared fixtures: a hermetic environment, small vaults, a fake embedder and a real daemon."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sidecar.clients.client import Client
from sidecar.config import Config, load_config
from sidecar.contracts.errors import DaemonNotRunningError
from sidecar.daemon.compose import build
from sidecar.model.embedder import EmbedderSlot
from sidecar.stores.bm25 import Bm25Index
from sidecar.stores.lifecycle import open_vectors
from sidecar.stores.manifest import Manifest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def prepared_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache of the int8-kernel model copy for the whole run: made once by the first test
    that loads the model (the same code path as a user's first start), reused by the rest."""
    return tmp_path_factory.mktemp("prepared-models")


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
    v = tmp_path / "vault"
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


# --- a real daemon in a subprocess -------------------------------------------------------------


def exchange(sock_path: Path, payload: bytes) -> list[dict[str, Any]]:
    """Send raw bytes, close our side, and collect every answer line until the daemon closes."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(sock_path))
    try:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the daemon may answer and close before reading everything (oversized frames)
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except OSError:
        pass  # a reset after the last answer
    s.close()
    return [json.loads(line) for line in data.splitlines() if line.strip()]


class DaemonProcess:
    def __init__(
        self,
        home: Path,
        vault_dir: Path | None,
        extra: Sequence[str] = (),
        env: dict[str, str] | None = None,
        prefix: Sequence[str] = (),
    ):
        self.prefix = list(prefix)
        self.home = home
        self.vault = vault_dir
        self.extra = list(extra)
        self.env = {**os.environ, **(env or {})}
        self.env.pop("SIDECAR_HOME", None)
        self.proc: subprocess.Popen[bytes] | None = None
        self.cfg = load_config(flags={"home": str(home)}, env={})
        self.log = home.parent / f"daemon-{home.name}.log"

    @property
    def socket(self) -> Path:
        return self.cfg.socket_path

    def cmd(self) -> list[str]:
        args = [
            *self.prefix,
            sys.executable,
            "-m",
            "sidecar",
            "serve",
            "--home",
            str(self.home),
            "--log-level",
            "debug",
        ]
        if self.vault is not None:
            args += ["--vault", str(self.vault)]
        return args + self.extra

    def start(self, wait: str | None = "ready", timeout: float = 120.0) -> DaemonProcess:
        self.home.mkdir(parents=True, exist_ok=True)
        self.close_log()
        self._logfh: Any = self.log.open("ab")
        self.proc = subprocess.Popen(self.cmd(), stdout=self._logfh, stderr=self._logfh, env=self.env)
        if wait:
            self.wait_for(lambda h: h["index"]["state"] == wait, timeout)
        return self

    def client(self, agent: str | None = None) -> Client:
        return Client(self.socket, agent=agent, timeout=60)

    def call(self, op: str, params: dict[str, Any] | None = None, agent: str | None = None) -> dict[str, Any]:
        with self.client(agent) as c:
            return c.call(op, params)

    def health(self) -> dict[str, Any]:
        return self.call("health")

    def wait_for(self, predicate: Any, timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"daemon exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
                )
            try:
                last = self.health()
                if predicate(last):
                    return last
            except DaemonNotRunningError:
                pass
            time.sleep(0.1)
        raise AssertionError(
            f"timed out; last health: {json.dumps(last)[:2000]}\n{self.log.read_text()[-3000:]}"
        )

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=30)
        self.close_log()
        return code

    def close_log(self) -> None:
        fh = getattr(self, "_logfh", None)
        if fh is not None:
            fh.close()
            self._logfh = None

    def run_cli(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        env = {**self.env, "SIDECAR_HOME": str(self.home)}
        return subprocess.run(
            [sys.executable, "-m", "sidecar", *args],
            capture_output=True,
            text=True,
            env=env,
            check=check,
            timeout=120,
        )


@pytest.fixture
def daemon_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[DaemonProcess] = []

    def factory(vault_dir: Path | None, name: str = "home", **kw: Any) -> DaemonProcess:
        d = DaemonProcess(tmp_path / name, vault_dir, **kw)
        started.append(d)
        return d

    yield factory
    for d in started:
        if d.proc is not None and d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
        d.close_log()


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
