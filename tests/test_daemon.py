"""The daemon as users run it: a real process, a real socket, the real model, the CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import ExitCode, RemoteError
from sidecar.stores.vectors import table_name
from tests.conftest import DaemonProcess, FakeEmbedder, Harness, exchange, make_vault, write

pytestmark = pytest.mark.model


@pytest.fixture
def running(daemon_factory: Any, vault: Path) -> DaemonProcess:
    """A daemon of its own for a test that changes it; keyword-only (a second or two to start,
    against several with the model): its users test references, the lock, the socket and file
    events, not vectors."""
    return daemon_factory(vault, keyword_only=True).start()


@pytest.fixture(scope="module")
def steady(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One daemon for the tests that only ask it (each asserts it is still ready after)."""
    base = tmp_path_factory.mktemp("steady")
    d = DaemonProcess(base / "home", make_vault(base / "vault")).start()
    yield d
    d.stop()


def test_end_to_end_search_and_get(steady: DaemonProcess) -> None:
    """Ready with every chunk embedded; search --json ranks the right note; get returns it whole."""
    h = steady.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    assert h["index"]["files"] == 4 and h["embedder"]["state"] == "ok"
    assert h["embedder"]["origin"] == "bundled package"
    out = steady.run_cli("search", "when do we back up the NAS", "--json", check=True)
    hits = json.loads(out.stdout)["hits"]
    assert hits[0]["reference"] == "wiki/Backups"
    assert hits[0]["vecScore"] is not None and hits[0]["bm25Score"] is not None
    assert set(hits[0]) >= {"reference", "source", "score", "vecScore", "bm25Score", "title", "lines", "text"}
    got = steady.call("get", {"reference": hits[0]["reference"]})
    assert got["text"].startswith("# Backups") and got["source"] == "wiki"
    human = steady.run_cli("get", "vault/Projects/Boat", check=True)
    assert "spark plugs" in human.stdout
    limited = steady.call("search", {"query": "water", "limit": 1, "source": "vault"})
    assert len(limited["hits"]) == 1 and limited["hits"][0]["source"] == "vault"


def test_status_contract(steady: DaemonProcess) -> None:
    """status --json carries index.state/files/chunks/pending_vectors and embedder.state; text is plain."""
    out = steady.run_cli("status", "--json", check=True)
    data = json.loads(out.stdout)
    assert data["index"]["state"] == "ready"
    assert {"files", "chunks", "pending_vectors"} <= set(data["index"])
    assert data["embedder"]["state"] == "ok"
    text = steady.run_cli("status", check=True).stdout
    assert "Index: ready" in text and "Embedder: ok" in text


def test_get_refuses_escapes(running: DaemonProcess, tmp_path: Path) -> None:
    """Traversal, absolute paths, NUL bytes and symlinks out of the vault are refused with clear errors."""
    assert running.vault is not None
    secret = write(tmp_path / "secret.md", "top secret\n")
    os.symlink(secret, running.vault / "escape.md")
    for ref in ["vault/../../etc/passwd", "/etc/passwd", "vault/a\0b", "vault/escape", "memory/x"]:
        with pytest.raises(RemoteError) as exc:
            running.call("get", {"reference": ref})
        assert exc.value.code in ("bad_reference", "not_found", "unreadable")  # a link out: unreadable
        assert "top secret" not in str(exc.value)


def test_socket_is_private(steady: DaemonProcess) -> None:
    """Socket mode 0600 inside a 0700 directory; no TCP socket is open."""
    mode = stat.S_IMODE(steady.socket.stat().st_mode)
    assert mode == 0o600
    assert stat.S_IMODE(steady.socket.parent.stat().st_mode) == 0o700
    assert steady.proc is not None
    inodes = set()
    for fd in Path(f"/proc/{steady.proc.pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:  # closed between the listing and the read (a file the daemon was reading)
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if Path(table).exists():
            for line in Path(table).read_text().splitlines()[1:]:
                assert line.split()[9] not in inodes, "the daemon owns a TCP socket"


def test_peer_of_another_uid_is_refused(steady: DaemonProcess) -> None:
    """A client running as another user gets a 'forbidden' answer even if file modes would let it in."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run a client as another user")
    # Open the modes on purpose: the UID check must hold on its own.
    dirs = [steady.socket.parent, *steady.socket.parent.parents]
    saved = {d: stat.S_IMODE(d.stat().st_mode) for d in dirs}
    saved_sock = stat.S_IMODE(steady.socket.stat().st_mode)
    try:
        for d in dirs:
            os.chmod(d, saved[d] | 0o011)
        os.chmod(steady.socket, 0o666)
        code = (
            "import socket,sys;s=socket.socket(socket.AF_UNIX);s.connect(sys.argv[1]);"
            "print(s.recv(4096).decode())"
        )
        out = subprocess.run(
            [
                setpriv,
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sys.executable,
                "-c",
                code,
                str(steady.socket),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    finally:
        for d in dirs:
            os.chmod(d, saved[d])
        os.chmod(steady.socket, saved_sock)
    assert '"forbidden"' in out.stdout, out.stderr
    assert '"index"' not in out.stdout


def test_bad_requests_get_clear_errors_and_daemon_survives(steady: DaemonProcess) -> None:
    """Malformed JSON, wrong shapes, unknown ops and wrong types each get an error frame."""
    frames = (
        b"\n".join(
            [
                b"{not json",
                b"[1,2,3]",
                b'{"op": 5}',
                b'{"id": "u", "op": "launch_missiles"}',
                b'{"id": 1, "op": "search", "params": {"query": 42}}',
                b'{"id": 2, "op": "search", "params": {"query": "x", "limit": -1}}',
                b'{"id": 3, "op": "search", "params": {"query": "x", "limit": 10000000}}',
                b'{"id": 4, "op": "search", "params": {"query": "x", "bogus": 1}}',
                b'{"id": 5, "op": "get", "params": {"reference": "vault/../../etc/passwd"}}',
                b'{"id": 6, "op": "health", "agent": "../../evil"}',
                b'{"id": 7, "v": 99, "op": "health"}',
                b"\xff\xfe garbage",
                b'{"id": 8, "op": "search", "params": {"query": "spark plugs"}}',
            ]
        )
        + b"\n"
    )
    answers = exchange(steady.socket, frames)
    assert len(answers) == 13
    assert all(not a["ok"] for a in answers[:-1])
    assert answers[3]["id"] == "u" and "unknown op" in answers[3]["error"]["message"]
    assert answers[-1]["ok"] and answers[-1]["result"]["hits"]
    codes = {a["error"]["code"] for a in answers[:-1]}
    assert codes <= {"bad_request", "bad_reference", "not_found"}
    assert steady.health()["index"]["state"] == "ready"


def test_oversized_and_partial_frames(steady: DaemonProcess) -> None:
    """A frame over the limit is refused and the connection closed; a half frame then hang-up is harmless."""
    big = b'{"op":"search","params":{"query":"' + b"a" * 2_000_000 + b'"}}\n'
    answers = exchange(steady.socket, big)
    assert answers and answers[0]["error"]["code"] == "frame_too_large"
    assert exchange(steady.socket, b'{"op":"hea') == []
    assert steady.health()["index"]["state"] == "ready"


def test_second_instance_is_refused(running: DaemonProcess, daemon_factory: Any, vault: Path) -> None:
    """A second daemon on the same home exits with the socket-in-use code and says why."""
    second = DaemonProcess(running.home, vault, keyword_only=True)
    proc = subprocess.run(
        second.cmd(), capture_output=True, text=True, timeout=60, check=False, env=second.env
    )
    assert proc.returncode == ExitCode.SOCKET_IN_USE
    assert "in use" in proc.stderr or "already" in proc.stderr
    assert running.health()["index"]["state"] == "ready"


def test_a_removed_index_lock_is_made_again_and_a_second_daemon_still_refused(
    running: DaemonProcess, vault: Path, tmp_path: Path
) -> None:
    """The index lock file removed under a running daemon (a cleaner, an `rm` of the index):
    the daemon makes it again within a tick, and a second daemon on the same home with another
    socket is refused; were it to get past the lock, the keyword index in use is not taken for a
    damaged one (the second daemon moved the first one's live index aside and rebuilt it)."""
    lock = running.home / "index" / ".lock"
    lock.unlink()
    deadline = time.monotonic() + 10

    def restored() -> bool:  # the file is made before the line is logged: both waited for
        return lock.exists() and "index_lock_restored" in running.log.read_text()

    while not restored() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert restored()
    second = DaemonProcess(running.home, vault, keyword_only=True)
    cmd = [*second.cmd(), "--socket", str(tmp_path / "other.sock")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False, env=second.env)
    assert proc.returncode == ExitCode.SOCKET_IN_USE and "already serving" in proc.stderr
    from sidecar.contracts.errors import DaemonRunningError
    from sidecar.stores.bm25 import Bm25Index

    with pytest.raises(DaemonRunningError, match="in use by another process"):
        Bm25Index(running.home / "index" / "bm25")
    assert not list((running.home / "index").glob("bm25.broken-*"))
    assert running.call("search", {"query": "spark plugs"})["hits"][0]["reference"] == "vault/Projects/Boat"


@pytest.mark.parametrize("broken", ["home", "index", "agents", "lock", "run"])
def test_an_unusable_home_is_one_line_and_the_index_code(tmp_path: Path, broken: str) -> None:
    """A home (or its index, agents folder, lock) that is a file where a folder belongs, or the
    reverse: one line naming it and exit 5 (it was a traceback and exit 1)."""
    home = tmp_path / "home"
    target = {
        "home": home,
        "index": home / "index",
        "agents": home / "agents",
        "lock": home / "index" / ".lock",
        "run": home / "run",  # the socket's folder: a configuration error
    }
    path = target[broken]
    path.parent.mkdir(parents=True, exist_ok=True)
    if broken == "lock":
        path.mkdir()
    else:
        path.write_text("not a folder")
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"} | {
        "SIDECAR_EMBEDDER_ENABLED": "false"
    }
    proc = subprocess.run(
        [sys.executable, "-m", "sidecar", "serve", "--home", str(home), "--config", os.devnull],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert "Traceback" not in proc.stderr, proc.stderr
    if broken == "run":
        assert proc.returncode == ExitCode.CONFIG and "socket directory" in proc.stderr
    else:
        assert proc.returncode == ExitCode.INDEX_UNUSABLE, proc.stderr
        assert f"the home {home} cannot be used" in proc.stderr


def test_stale_socket_is_replaced_and_sigterm_cleans_up(daemon_factory: Any, vault: Path) -> None:
    """A socket file left by a crash is removed at start; SIGTERM stops cleanly and removes the socket."""
    d = daemon_factory(vault)
    d.socket.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(d.socket))
    stale.close()  # the file stays, nobody listens: exactly what a kill -9 leaves
    d.start()
    assert d.stop(signal.SIGTERM) == 0
    assert not d.socket.exists()
    d.start()
    assert d.stop(signal.SIGINT) == 0
    assert not d.socket.exists()


def test_cli_without_daemon_says_how_to_start(tmp_path: Path) -> None:
    """A client with no daemon exits non-zero with a message naming `sidecar serve`."""
    env = {**os.environ, "SIDECAR_HOME": str(tmp_path / "nohome")}
    for args in (["search", "x"], ["status"], ["get", "vault/x"]):
        out = subprocess.run(
            [sys.executable, "-m", "sidecar", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
        assert out.returncode == ExitCode.NOT_RUNNING
        assert "sidecar serve" in out.stdout + out.stderr


def test_restart_rebuild_and_delete(daemon_factory: Any, vault: Path) -> None:
    """Unchanged restart reads no note; a deleted index dir is rebuilt; a deleted note leaves the index."""
    d = daemon_factory(vault).start()
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    chunks = d.health()["index"]["chunks"]
    assert d.stop() == 0
    d.start()
    first = d.call("search", {"query": "spark plugs"})  # right at `ready`: vectors must already serve
    assert "degraded" not in first and first["hits"][0]["vecScore"] is not None
    assert "sweep_done changed=0 deleted=0 unchanged=4" in d.log.read_text()
    (vault / "Recipes" / "Bread.md").unlink()
    out = d.run_cli("index", check=True)  # goes through the running daemon
    assert "indexed 3 notes" in out.stderr
    assert all(
        h["reference"] != "vault/Recipes/Bread" for h in d.call("search", {"query": "sourdough"})["hits"]
    )
    assert d.stop() == 0
    shutil.rmtree(d.home / "index")
    d.start()
    h = d.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    assert h["index"]["files"] == 3 and 0 < h["index"]["chunks"] < chunks


def test_offline_index_command(daemon_factory: Any, vault: Path) -> None:
    """`sidecar index` with no daemon indexes in-process and a daemon started later finds it all done."""
    d = daemon_factory(vault)
    out = d.run_cli("index", "--vault", str(vault), check=True)
    assert "indexed 4 notes" in out.stderr and "0 without vectors" in out.stderr
    d.start()
    assert d.health()["index"]["pending_vectors"] == 0
    assert "sweep_done changed=0" in d.log.read_text()


def test_broken_model_degrades_to_keyword_search(daemon_factory: Any, vault: Path, tmp_path: Path) -> None:
    """A model that cannot load means embedder 'failed', one log line, BM25-only answers that say so."""
    d = daemon_factory(vault, env={"SIDECAR_EMBEDDER_PATH": str(tmp_path / "no-model")}).start()
    h = d.health()
    assert h["embedder"]["state"] == "failed" and "no-model" in h["embedder"]["error"]
    result = d.call("search", {"query": "spark plugs"})
    assert result["hits"][0]["reference"] == "vault/Projects/Boat"
    assert "keyword" in result["degraded"]
    assert d.log.read_text().count("embedder_failed") == 1
    assert "search is keyword-only" in d.run_cli("status").stdout


def test_a_file_still_being_written_when_reloaded_is_read_again_once_it_changes(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """A reload that read the start of a file still being written (the writer paused longer than
    the settle wait) applied it: without its exclusions a private folder came back into search and
    stayed there until the next reload. A change of the file within seconds after a reload is
    read again by itself."""
    write(vault / "Private" / "Secret.md", "# Secret\n\nThe zebraquartz code.\n")
    whole = "embedder:\n  enabled: false\nindex:\n  exclude: [Private/]\n"
    cfg_file = tmp_path / "sidecar.yaml"
    cfg_file.write_text(whole)
    d: DaemonProcess = daemon_factory(vault, extra=["--config", str(cfg_file)]).start()

    def found() -> bool:
        return bool(d.call("search", {"query": "zebraquartz", "minScore": 0})["hits"])

    assert not found()
    cfg_file.write_text(whole[: whole.index("index:")])  # the writer pauses here
    assert "index.exclude" in d.call("reload")["changed"]
    d.wait_for(lambda h: not h["index"]["excluded"] and found(), timeout=60)
    cfg_file.write_text(whole)  # and ends: nobody reloads
    d.wait_for(lambda h: h["index"]["excluded"] == {"index.exclude: Private/": 1}, timeout=60)
    d.wait_for(lambda _h: not found(), timeout=60)
    assert "config_changed_after_reload" in d.log.read_text()


def test_reload_tries_a_failed_model_again_at_once(daemon_factory: Any, vault: Path, tmp_path: Path) -> None:
    """A reload is how a user says the model's files are put right: it is tried then, not at the
    next embedder.retryMinutes (an hour here), and the answer says how that went: it said
    "applied: nothing changed" while the model loaded."""
    from sidecar.model.locate import bundled_model_files

    folder = tmp_path / "my-model"
    folder.mkdir()
    env = {
        "SIDECAR_EMBEDDER_MODEL": "my-model",
        "SIDECAR_EMBEDDER_PATH": str(folder),
        "SIDECAR_EMBEDDER_RETRY_MINUTES": "60",
    }
    d = daemon_factory(vault, env=env).start()
    assert d.health()["embedder"]["state"] == "failed"
    still = d.call("reload", {}, timeout=60)["model"]  # nothing put right yet
    assert still["state"] == "failed" and "needs model.onnx and tokenizer.json" in still["error"]
    files = bundled_model_files()
    assert files is not None
    shutil.copy(files.tokenizer, folder / "tokenizer.json")
    shutil.copy(files.onnx, folder / "model.onnx")
    done = d.run_cli("reload", check=True)
    assert "reloaded; applied: the model my-model, loaded now" in done.stdout, done.stdout
    h = d.wait_for(
        lambda h: h["embedder"]["state"] == "ok" and h["index"]["pending_vectors"] == 0, timeout=120
    )
    assert h["embedder"]["model"].startswith("my-model@")
    assert d.call("search", {"query": "spark plugs"})["hits"][0]["vecScore"] is not None
    assert d.log.read_text().count("embedder_retry") == 2


def test_a_reload_answers_for_a_model_retry_started_after_it_asked(tmp_path: Path) -> None:
    """Two races of the reload's model answer: a retry already running when the reload asked
    (its own run_soon skipped: the scheduler runs no job beside itself) ended and the answer was
    "still cannot be loaded", no retry of the files put right until embedder.retryMinutes; and a
    later retry at work when the answer was read said `loading` as "failed: None"."""
    from types import SimpleNamespace

    from sidecar.config import load_config
    from sidecar.daemon.lifecycle import Daemon
    from sidecar.daemon.reloading import ConfigReload, ModelRetries

    retries = ModelRetries()
    asked: list[int] = []
    seen: list[bool] = []

    def load() -> None:
        if not asked:  # the reload arrives while this retry (from before the fix) runs
            asked.append(retries.ask())
        else:  # the running one ended: not the retry the reload waits for
            seen.append(retries.ended_after(asked[0], 0))

    daemon: Any = SimpleNamespace(_model_retries=retries, _model_wanted=lambda: True, _load_embedder=load)
    Daemon._retry_embedder(daemon)
    assert seen == [False]  # run again by the running job, at once
    assert retries.ended_after(asked[0], 0)
    # A later retry at work when the answer is read: "loading", not "failed" with no reason.
    reload: Any = SimpleNamespace(
        cfg=load_config(env={"SIDECAR_HOME": str(tmp_path / "home")}),
        _model_retries=retries,
        slot=SimpleNamespace(describe=lambda: {"state": "loading", "fallback": None, "error": None}),
    )
    assert ConfigReload._model_outcome(reload, asked[0])["state"] == "loading"


def test_a_model_that_fails_after_a_switch_leaves_the_previous_one_answering(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """The configuration names another model that cannot load (its folder lacks the files): the
    previous model, whose table the index holds, answers in its place and embeds new notes into
    it (`sidecar index` too), and health, status and memory_status say so. It went keyword-only.
    Once the folder holds the files, the retry loads the model and the usual switch runs; the
    previous table is dropped only when the new one is whole."""
    from sidecar.clients.mcp_texts import status_of
    from sidecar.model.locate import bundled_model_files

    d = daemon_factory(vault, env={"SIDECAR_EMBEDDER_MODEL": "all-MiniLM-L6-v2"}).start()
    old_table = d.health()["vectors"]["serving"]
    d.stop()
    folder = tmp_path / "my-model"
    folder.mkdir()
    d.env.update(
        SIDECAR_EMBEDDER_MODEL="my-model",
        SIDECAR_EMBEDDER_PATH=str(folder),
        SIDECAR_EMBEDDER_RETRY_MINUTES="0.1",
    )
    write(vault / "Kayak.md", "# Kayak\n\nThe kayak paddle hangs in the garage loft.\n")
    assert "0 without vectors" in d.run_cli("index", "--vault", str(vault), check=True).stderr
    d.start()
    write(vault / "Canoe.md", "# Canoe\n\nThe canoe trailer needs a new tyre.\n")
    h = d.wait_for(lambda h: h["index"]["files"] == 6 and h["index"]["pending_vectors"] == 0)
    emb = h["embedder"]
    assert emb["state"] == "ok" and emb["model"].startswith("all-MiniLM-L6-v2@")
    assert emb["fallback"]["configured"] == f"my-model (embedder.path {folder})"
    assert "needs model.onnx and tokenizer.json" in emb["fallback"]["error"]
    assert h["vectors"]["serving"] == old_table and h["vectors"]["building"] is None
    problem = next(p for p in h["problems"]["active"] if p["area"] == "embedder")
    assert "the configured model my-model" in problem["error"] and "all-MiniLM-L6-v2@" in problem["error"]
    for query, note in (("kayak paddle", "vault/Kayak"), ("canoe trailer tyre", "vault/Canoe")):
        result = d.call("search", {"query": query})
        assert result["hits"][0]["reference"] == note and result["hits"][0]["vecScore"] is not None
        assert "degraded" not in result
    status = d.run_cli("status").stdout
    assert "answering in place of the configured model my-model" in status
    assert "PROBLEM (model" in status and "keyword-only" not in status
    said = status_of(h)
    assert not said["keywordOnly"] and "problem in embedder: the configured model my-model" in said["message"]
    assert said["embedder"]["fallback"] == emb["fallback"]  # memory_status's structured answer too
    log = d.log.read_text()
    assert log.count("embedder_fallback model=my-model serving=all-MiniLM-L6-v2@") == 1
    assert "embedder_failed" not in log
    # The notes are cut with the standing-in model's tokenizer, and recorded so: the next start
    # with the configured model cuts them again.
    assert "index_chunking_recorded counted=all-MiniLM-L6-v2" in log

    # The model's files arrive (written whole, as an installer would): the retry loads it.
    files = bundled_model_files()
    assert files is not None
    shutil.copy(files.tokenizer, folder / "tokenizer.json")
    shutil.copy(files.onnx, folder / "model.tmp")
    os.replace(folder / "model.tmp", folder / "model.onnx")
    h = d.wait_for(
        lambda h: h["embedder"]["model"].startswith("my-model@") and h["vectors"]["serving"] != old_table,
        timeout=120,
    )
    assert h["embedder"]["fallback"] is None and h["vectors"]["building"] is None
    assert not [p for p in h["problems"]["active"] if p["area"] == "embedder"]
    assert h["index"]["pending_vectors"] == 0
    assert d.call("search", {"query": "kayak paddle"})["hits"][0]["vecScore"] is not None
    log = d.log.read_text()
    assert "vectors_migration_started serving=" + old_table in log
    assert f"vectors_switched table={h['vectors']['serving']} retired={old_table}" in log


def test_thin_clients_never_load_engines() -> None:
    """Importing the CLI and client loads no onnxruntime, tokenizers, lancedb or tantivy."""
    code = (
        "import sys, sidecar.clients.cli, sidecar.clients.client, sidecar.contracts.protocol;"
        "heavy = {'onnxruntime', 'tokenizers', 'lancedb', 'tantivy', 'pyarrow', 'numpy'} & set(sys.modules);"
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_the_daemon_starts_without_waiting_for_the_vector_library() -> None:
    """Loading the daemon's code imports no lancedb (about a second of its start, spent before
    the first sweep could begin); a thread of its own loads it, and the vector store on use."""
    code = (
        "import sys, sidecar.daemon.lifecycle, sidecar.index.indexer, sidecar.daemon.compose;"
        "print(sorted({'lancedb', 'pyarrow'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"
    from sidecar.stores import vectors

    vectors.warm()
    assert sys.modules["lancedb"] is vectors.lancedb_module()


def _vector_library_in(d: DaemonProcess) -> list[str]:
    """What of the vector library the daemon holds: its mapped lancedb/pyarrow files (a load by
    any path counts) and, from its debug log, a started warm-up thread (it may not have mapped
    anything yet when the process is read; that it started is in the log before ``ready``)."""
    mapped = {line.split()[-1] for line in Path(f"/proc/{d.pid}/maps").read_text().splitlines()}
    loaded = sorted(m for m in mapped if "lancedb" in m or "pyarrow" in m)
    log = d.log.read_text()
    assert "thread_started name=indexer" in log  # the threads are logged at all
    return loaded + ["thread vector-library"] * ("thread_started name=vector-library" in log)


def test_a_keyword_only_daemon_loads_no_vector_library(daemon_factory: Any, vault: Path) -> None:
    """With the model off nothing needs vectors: a daemon that indexed, searched and answered
    health has loaded neither lancedb nor pyarrow (BENCHMARKS.md: what that saves at each
    start), and started no thread to load them."""
    d: DaemonProcess = daemon_factory(vault, keyword_only=True).start()
    hits = d.call("search", {"query": "outboard engine spark plugs"})["hits"]
    assert hits[0]["reference"] == "vault/Projects/Boat"
    assert d.health()["index"]["files"] == 4
    assert _vector_library_in(d) == []
    d.stop()


def test_a_keyword_only_daemon_on_an_index_with_a_vector_table_loads_no_vector_library(
    daemon_factory: Any, make_cfg: Any, vault: Path
) -> None:
    """The home of a user who ran with the model: its index holds the model's vector table. Turned
    keyword-only, the daemon opens it on no path (a start, status, doctor, a reload): each that
    did would bring the library back into every start of exactly these users."""
    cfg = make_cfg(vault)

    class Earlier(FakeEmbedder):  # a table named as the configured model's (vectors: not read)
        model_id = f"{cfg.embedder.model}@0123456789ab"
        dim = 384

    earlier = Harness(cfg, Earlier())
    earlier.sweep()
    earlier.close()
    table = cfg.index_dir / "vectors" / f"{table_name(Earlier.model_id, 384, 'mean')}.lance"
    assert table.is_dir()
    d: DaemonProcess = daemon_factory(vault, keyword_only=True).start()
    hits = d.call("search", {"query": "outboard engine spark plugs"})["hits"]
    assert hits[0]["reference"] == "vault/Projects/Boat"
    assert _vector_library_in(d) == []
    env = {**d.env, "SIDECAR_HOME": str(d.home)}
    for command in ("status", "doctor", "reload"):
        out = subprocess.run(
            [sys.executable, "-m", "sidecar", command],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, (command, out.stdout, out.stderr)
        assert _vector_library_in(d) == [], command
    assert d.health()["index"]["files"] == 4
    assert table.is_dir()  # kept for the day the model is on again
    d.stop()


def test_saved_and_deleted_notes_are_seen_without_a_command(running: DaemonProcess) -> None:
    """A note saved through an atomic rename is searchable shortly after; a deleted one leaves."""
    assert running.vault is not None
    tmp = write(
        running.vault / ".new-note.md.tmp", "# Kayak\n\nThe kayak paddle is stored in the garage loft.\n"
    )
    os.replace(tmp, running.vault / "Kayak.md")
    running.wait_for(lambda h: h["index"]["files"] == 5, timeout=30)
    hits = running.call("search", {"query": "kayak paddle garage"})["hits"]
    assert hits[0]["reference"] == "vault/Kayak"
    assert any(r["mode"] == "events" for r in running.health()["roots"])
    (running.vault / "Kayak.md").unlink()
    running.wait_for(lambda h: h["index"]["files"] == 4, timeout=30)


def test_an_empty_inbox_becomes_a_root_with_its_first_note(daemon_factory: Any, vault: Path) -> None:
    """An agent's inbox that holds nothing is no root (no status line); the first note saved in
    it by hand is seen by file events, indexed, and the inbox is a root; once it is deleted
    again, its entry goes and so does the root."""
    d: DaemonProcess = daemon_factory(vault, keyword_only=True)
    inbox = d.cfg.agents_dir / "idle" / "memory"
    (inbox / ".trash").mkdir(parents=True)
    d.start()
    assert {r["name"] for r in d.health()["roots"]} == {"vault", "wiki"}
    tmp = write(inbox / ".first.0123abcd.tmp", "# First\n\nThe heron nests by the mill pond.\n")
    os.replace(tmp, inbox / "first.md")
    h = d.wait_for(lambda h: h["index"]["by_agent"].get("idle", {}).get("files") == 1, timeout=30)
    assert "memory/idle" in {r["name"] for r in h["roots"]}
    assert (
        d.call("search", {"query": "heron mill pond"}, agent="idle")["hits"][0]["reference"] == "memory/first"
    )
    (inbox / "first.md").unlink()
    d.wait_for(lambda h: {r["name"] for r in h["roots"]} == {"vault", "wiki"}, timeout=30)
    assert d.health()["index"]["by_agent"] == {}


def test_no_network_is_attempted(daemon_factory: Any, vault: Path, tmp_path: Path) -> None:
    """Start, index, embed and search with an audit hook that records every non-Unix socket use.

    (urllib3, imported by lancedb, binds a throwaway socket to ::1 to probe IPv6 support: that
    loopback probe is not network access and is let through.)
    """
    hook_dir = tmp_path / "hook"
    hook_dir.mkdir()
    record = tmp_path / "network.log"
    (hook_dir / "sitecustomize.py").write_text(
        "import socket, sys\n"
        f"_LOG = {str(record)!r}\n"
        "def _hook(event, args):\n"
        "    if event in ('socket.connect', 'socket.getaddrinfo', 'socket.sendto', 'socket.bind'):\n"
        "        target = args[1] if event != 'socket.getaddrinfo' else args[0]\n"
        "        probe = event == 'socket.bind' and target[0] in ('::1', '127.0.0.1')\n"
        "        unix = event != 'socket.getaddrinfo' and isinstance(target, (str, bytes))\n"
        "        if not probe and not unix:\n"
        "            with open(_LOG, 'a') as fh:\n"
        "                fh.write(f'{event} {target!r}\\n')\n"
        "sys.addaudithook(_hook)\n"
    )
    prefix: list[str] = []
    if os.geteuid() == 0 and shutil.which("unshare"):
        prefix = ["unshare", "--net"]  # and no network at all, so native code cannot reach out either
    d = daemon_factory(vault, env={"PYTHONPATH": str(hook_dir)}, prefix=prefix)
    d.start()
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    assert d.call("search", {"query": "spark plugs"})["hits"][0]["reference"] == "vault/Projects/Boat"
    d.stop()
    assert not record.exists() or record.read_text() == ""


def test_index_whose_daemon_stops_meanwhile_does_not_index_in_its_place(
    daemon_factory: Any, tmp_path: Path
) -> None:
    """`sidecar index` whose daemon stops while it waits says so and exits 6; it no longer
    indexes in-process (holding the index lock, it kept a restarted daemon from starting)."""
    vault = tmp_path / "many"
    for i in range(3000):
        write(vault / f"f{i % 30}" / f"n{i}.md", f"# Note {i}\n\nText of note {i} about boats and gardens.\n")
    d: DaemonProcess = daemon_factory(vault, keyword_only=True).start()
    cli = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "index", "--rebuild"],
        env={**d.env, "SIDECAR_HOME": str(d.home)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    d.wait_for(lambda h: h["index"]["phase"] != "idle", timeout=60, poll=0.02)
    d.stop()
    _out, err = cli.communicate(timeout=60)
    assert cli.returncode == ExitCode.NOT_RUNNING, err
    # --rebuild is not resumed by the restarted daemon: asked again
    assert "stopped while it was indexing" in err and "run this command again" in err
    assert "indexed 3000 notes" not in err  # no in-process run after it


def test_a_stop_with_clients_connected_logs_no_error(daemon_factory: Any, vault: Path) -> None:
    """SIGTERM while a client holds a connection open (an MCP shim, a CLI waiting on `index`): the
    connections are closed and the log holds no error (asyncio logged each cancelled connection
    as an ERROR with a traceback: `journalctl -p err` showed it after every restart)."""
    d: DaemonProcess = daemon_factory(vault, keyword_only=True).start()
    held = []
    for _ in range(2):
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(d.socket))
        held.append(s)
    held[0].sendall(b'{"op":"health"}\n')
    held[0].recv(65536)
    assert d.stop() == 0
    for s in held:
        s.settimeout(10)
        assert s.recv(65536) == b""  # closed by the daemon
        s.close()
    log = d.log.read_text()
    assert "Traceback" not in log and "ERROR" not in log, log[-2000:]


def test_a_stop_that_gives_up_on_a_worker_says_so(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker still running when the stop stops waiting (a model switch's batch inside the
    model's native code) marks the daemon stuck: `sidecar serve` then leaves with os._exit once
    everything is closed, as the interpreter's own exit aborted under that thread (exit 134)."""
    from sidecar.daemon import lifecycle

    monkeypatch.setattr(lifecycle, "_JOIN_TIMEOUT", 0.05)
    daemon = lifecycle.Daemon(make_cfg(vault))
    release = threading.Event()
    worker = threading.Thread(target=release.wait, name="vectors", daemon=True)
    worker.start()
    daemon._threads.append(worker)
    daemon.shutdown()
    assert daemon.stuck
    release.set()
    worker.join(5)


@dataclass
class HungShareStop:
    """A daemon stopping while a call on the vault's share hangs (``hung_share_stop``)."""

    daemon: Any
    status: Any  # the vault root's supervisor status: set its hung call to make it known
    call: threading.Thread  # the call that hangs
    watcher: threading.Thread  # its walk of the share, until the share answers (5 s)

    def start(self, *threads: threading.Thread) -> None:
        """Start ``threads`` as the daemon's workers, in this order, and begin the stop's clock."""
        for t in threads:
            t.start()
            self.daemon._threads.append(t)
        self.daemon.stop_clock.begin()


@pytest.fixture
def hung_share_stop(make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HungShareStop]:
    """A daemon with a supervisor (a vault root whose call hangs, not yet known) and a watcher
    walking the share, its stop allowed a long join: each thread released and joined after."""
    from types import SimpleNamespace

    from sidecar.daemon import lifecycle
    from sidecar.vault.sources import Root
    from sidecar.vault.supervisor import Supervisor

    monkeypatch.setattr(lifecycle, "_JOIN_TIMEOUT", 30.0)
    cfg = make_cfg(vault)
    daemon = lifecycle.Daemon(cfg)
    supervisor = Supervisor(cfg)
    release = threading.Event()
    call = threading.Thread(target=release.wait, args=(30,), daemon=True)
    call.start()
    st = supervisor.status(Root("vault", vault))
    daemon.parts = SimpleNamespace(supervisor=supervisor, vectors=SimpleNamespace(stop_builds=lambda: None))  # type: ignore[assignment]
    watcher = threading.Thread(target=release.wait, args=(5,), name="watcher", daemon=True)
    try:
        yield HungShareStop(daemon, st, call, watcher)
    finally:
        release.set()
        if watcher.ident is not None:
            watcher.join(5)
        call.join(5)


def test_a_stop_does_not_wait_for_a_watcher_stuck_on_a_hung_share(
    hung_share_stop: HungShareStop, caplog: pytest.LogCaptureFixture
) -> None:
    """With a call on a share known to hang, the stop does not wait its whole join for the
    watcher (its walk of the share is in the kernel until the share answers; it writes nothing):
    10 s for it beside the indexer's took 20 s of the unit's TimeoutStopSec=30. Said in the log,
    and the process leaves with os._exit (``stuck``)."""
    scene = hung_share_stop
    scene.status._stuck, scene.status.hung_on = scene.call, "listing Projects"
    indexer = threading.Thread(target=lambda: None, name="indexer", daemon=True)
    scene.start(scene.watcher, indexer)
    with caplog.at_level("WARNING"):
        stuck = scene.daemon._join_workers()
    assert scene.watcher.is_alive()  # not waited for: the old stop joined it until the share answered
    assert not stuck and scene.daemon.stuck
    assert "shutdown_timeout thread=watcher hung_share=vault (listing Projects)" in caplog.text


def test_a_stop_asks_for_a_hung_call_when_the_watchers_turn_comes(
    hung_share_stop: HungShareStop, caplog: pytest.LogCaptureFixture
) -> None:
    """A call found to hang while the indexer is joined (its wait for the share ended at the
    stop) still spares the stop the watcher's whole join: the hung call is asked for when the
    watcher's turn comes (it was asked once before the indexer's join, and none was known yet)."""
    scene = hung_share_stop
    indexer_go = threading.Event()

    def indexer_run() -> None:  # its wait for the listing ends at the stop: the hang is known then
        indexer_go.wait(5)
        scene.status._stuck, scene.status.hung_on = scene.call, "listing Projects"

    indexer = threading.Thread(target=indexer_run, name="indexer", daemon=True)
    scene.start(indexer, scene.watcher)
    indexer_go.set()
    with caplog.at_level("WARNING"):
        stuck = scene.daemon._join_workers()
    assert scene.watcher.is_alive()  # not waited for its whole join
    assert not stuck and scene.daemon.stuck
    assert "shutdown_timeout thread=watcher hung_share=vault (listing Projects)" in caplog.text


@pytest.mark.parametrize("raised", ["config", "other"])
def test_a_reload_refused_for_any_reason_says_the_previous_settings_stay_once(
    make_cfg: Any, vault: Path, raised: str
) -> None:
    """A refusal that was no ConfigError (another error of the configuration's loading) said
    nothing of the daemon's settings; a refused identity change said "nothing applied" twice."""
    from sidecar.contracts.errors import ConfigError, EmbedderError
    from sidecar.daemon import lifecycle

    def reload_config() -> Any:
        if raised == "config":
            raise ConfigError("search.vectorWeight: 1.7 is over 1")
        raise EmbedderError("model folder unreadable")

    daemon = lifecycle.Daemon(make_cfg(vault), reload_config=reload_config)
    daemon._retriever = object()  # type: ignore[assignment]  # started: what a reload updates
    kind = ConfigError if raised == "config" else EmbedderError
    with pytest.raises(kind) as refused:
        daemon.reload()
    said = str(refused.value)
    assert "the daemon keeps running with its previous settings" in said, said
    assert said.lower().count("nothing was applied") == 1, said


def test_a_refused_reload_says_the_previous_settings_stay(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """`sidecar reload` of a file with a bad value: exit 7 and the problems listed, but not a word
    on whether the daemon still ran, and with which settings."""
    cfg_file = tmp_path / "sidecar.yaml"
    cfg_file.write_text("embedder:\n  enabled: false\n")
    d: DaemonProcess = daemon_factory(vault, extra=["--config", str(cfg_file)]).start()
    cfg_file.write_text("embedder:\n  enabled: false\nsearch:\n  vectorWeight: 1.7\n")
    refused = d.run_cli("reload", "--config", str(cfg_file))
    assert refused.returncode == 7, refused
    assert "vectorWeight" in refused.stderr
    assert "the daemon keeps running with its previous settings" in refused.stderr, refused.stderr
    assert d.health()["index"]["state"] in ("ready", "building")


def test_an_index_lock_held_by_sidecar_index_is_named_so(make_cfg: Any, tmp_path: Path) -> None:
    """The index locked by `sidecar index` without a daemon (which may wait minutes for a share
    it gave up on): a daemon or a second run is told that run holds it, not that "another
    sidecar daemon is already serving" (exit 4 either way)."""
    from sidecar.contracts.errors import DaemonRunningError
    from sidecar.daemon.oneshot import index_once
    from sidecar.daemon.process import IndexLock

    cfg = make_cfg(make_vault(tmp_path / "vault"), **{"embedder.enabled": False})
    said: list[str] = []

    def progress(_phase: str, _done: int, _total: int) -> None:
        if said:
            return
        with pytest.raises(DaemonRunningError) as got:
            IndexLock(cfg.index_dir).acquire()  # a daemon starting meanwhile
        said.append(str(got.value))

    index_once(cfg, rebuild=False, progress=progress)
    assert said and f"is in use by `sidecar index` (pid {os.getpid()})" in said[0]
    assert "already serving" not in said[0]
