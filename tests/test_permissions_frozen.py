"""A daemon stopped, and an index opened again, after its manifest's ``-shm`` was immutable
(``chattr +i``: a backup tool's or an admin's flag): the stop exits cleanly, nothing is taken for
damage. Real daemon processes where a SIGBUS may kill one; skipped where chattr does not work."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.conftest import write


@contextlib.contextmanager
def _immutable(*paths: Path, recursive: bool = True) -> Iterator[None]:
    """``paths`` (folders with all in them, unless not ``recursive``) immutable meanwhile."""
    flag = ["-R"] if recursive else []
    if shutil.which("chattr") is None:
        pytest.skip("needs chattr to make a file immutable")
    done = subprocess.run(["chattr", *flag, "+i", *map(str, paths)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot make a file immutable here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", *flag, "-i", *map(str, paths)], capture_output=True, check=True)


def _run_flagged(script: str, path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``script`` run in a process of its own on the manifest at ``path`` (a SIGBUS kills only
    it), the flag it sets on the ``-shm`` lifted after it in any case; skipped where no file can
    be made immutable."""
    if shutil.which("chattr") is None:
        pytest.skip("needs chattr to make a file immutable")
    cwd = Path(__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            [sys.executable, "-c", script, str(path), *args],
            capture_output=True, text=True, timeout=120, check=False, cwd=cwd,
        )  # fmt: skip
    finally:  # a process killed by SIGBUS left the flag set
        subprocess.run(
            ["chattr", "-i", str(path.with_name(path.name + "-shm"))], capture_output=True, check=False
        )
    if "no chattr" in done.stdout:
        pytest.skip("cannot make a file immutable here")
    return done


def test_a_daemon_stopped_while_its_index_is_immutable_exits_cleanly(
    daemon_factory: Any, vault: Path
) -> None:
    """SIGTERM while the index folder is immutable (``chattr -R +i``): the close of the manifest's
    last connection checkpoints into the mapped ``-shm`` and the kernel killed the daemon with
    SIGBUS (-7 here, a core in systemd's log). The writer's connection is left open at the stop
    ("manifest_close_skipped"), the stop exits 0; once the flag is gone a start finds the memory
    written before, nothing moved aside. A start while the flag is still set, then the flag
    lifted, moves nothing aside either."""
    write(vault / "Lighthouse.md", "# Lighthouse\n\nThe keeper of the lighthouse rows home.\n")
    d = daemon_factory(vault, keyword_only=True).start()
    d.call("write", {"slug": "plan", "content": "# Plan\n\nRow to the zeppelin.\n"}, agent="ops")
    index = d.cfg.index_dir
    with _immutable(index):
        os.sync()  # the -shm's pages written back: the next write into them faults
        code = d.stop()
        assert code == 0, (code, d.log.read_text()[-3000:])
        assert "manifest_close_skipped" in d.log.read_text()
    again = daemon_factory(vault, keyword_only=True).start()
    hits = again.call("search", {"query": "zeppelin"}, agent="ops")["hits"]
    assert "memory/plan" in {h["reference"] for h in hits}
    assert again.stop() == 0
    assert not list(index.glob("*.broken-*"))


def test_a_writer_refused_as_a_readonly_database_moves_nothing_aside(make_cfg: Any, vault: Path) -> None:
    """ "attempt to write a readonly database" (SQLITE_READONLY) is a permission state, not
    damage: a reader that mapped the manifest's ``-shm`` while it was immutable maps it read-only,
    and a writer opened in the same process after the flag is gone shares that mapping and is
    refused so. Taken for damage, the healthy manifest and the keyword index were moved aside and
    the whole index rebuilt. Refused as a permission denied now, nothing moved aside."""
    from sidecar.contracts.errors import PermissionDeniedError
    from sidecar.index.problems import Problems
    from sidecar.stores.lifecycle import open_stores

    cfg = make_cfg(vault, **{"embedder.enabled": False})
    cfg.index_dir.mkdir(parents=True)
    path = cfg.index_dir / "manifest.sqlite"
    # Written by a process that exits without closing it: its -wal and -shm stay, as a stop's.
    script = "import os, sys\nfrom pathlib import Path\nfrom sidecar.stores.manifest import Manifest\n"
    script += "Manifest(Path(sys.argv[1])).set_meta('probe', 'kept')\nos._exit(0)\n"
    subprocess.run([sys.executable, "-c", script, str(path)], check=True)
    shm = path.with_name(path.name + "-shm")
    assert shm.exists()
    with _immutable(shm, recursive=False):
        reader = sqlite3.connect("file:" + urllib.parse.quote(str(path)) + "?mode=ro", uri=True)
        reader.execute("SELECT count(*) FROM meta").fetchall()
    try:
        with pytest.raises(PermissionDeniedError, match="readonly database"):
            open_stores(cfg, Problems())
        assert not list(cfg.index_dir.glob("*.broken-*"))
    finally:
        reader.close()
    manifest, bm25 = open_stores(cfg, Problems())
    try:
        assert manifest.get_meta("probe") == "kept"
    finally:
        bm25.close()
        manifest.close()
    assert not list(cfg.index_dir.glob("*.broken-*"))


def test_a_running_daemon_whose_index_turns_immutable_answers_reads(daemon_factory: Any, vault: Path) -> None:
    """``chattr -R +i`` of a running daemon's index folder: search, get, status and the memory list
    were refused ("permission denied: …-shm is immutable") until the flag went, though nothing
    they do writes. Answered over the socket now from the connections the daemon holds; a memory
    write is saved unindexed, saying why. The daemon lives through it and catches up once the
    flag is gone."""
    write(vault / "Lighthouse.md", "# Lighthouse\n\nThe keeper of the lighthouse rows home.\n")
    d = daemon_factory(vault, keyword_only=True).start()
    d.call("write", {"slug": "plan", "content": "# Plan\n\nRow to the zeppelin.\n"}, agent="ops")
    index = d.cfg.index_dir
    with _immutable(index):
        os.sync()  # the -shm's pages written back: a write into them faults
        hits = d.call("search", {"query": "lighthouse keeper"}, agent="ops")["hits"]
        assert "vault/Lighthouse" in {h["reference"] for h in hits}, hits
        got = d.call("get", {"reference": "memory/plan"}, agent="ops")
        assert "zeppelin" in got["text"], got
        health = d.call("health", {}, agent="ops")
        assert health["index"]["files"] >= 2, health
        listed = d.call("list", {}, agent="ops")
        assert [n["reference"] for n in listed["notes"]] == ["memory/plan"], listed
        saved = d.call("write", {"slug": "canoe", "content": "# Canoe\n\nThe kayak canoe.\n"}, agent="ops")
        assert saved["searchable"] is False and "permission denied: " in saved["warning"], saved
        # The refusal's own words (which file, what to do), not the folder's "permission denied".
        assert "is immutable" in saved["warning"] and "chattr -i" in saved["warning"], saved
        said = d.run_cli("status")
        assert said.returncode == 0 and "chattr -i" in said.stdout, said.stdout
        assert "free disk space" not in said.stdout and "--rebuild" not in said.stdout, said.stdout
        # The headline says it: it said "Index: ready" above the PROBLEM line.
        assert f"Index: read-only: {index}" in said.stdout and "Index: ready" not in said.stdout, said.stdout
        assert "is immutable" in said.stdout.split("Index: read-only: ", 1)[1].splitlines()[0], said.stdout
        # The same file in both: status named manifest.sqlite while the write named its -shm.
        named = said.stdout.split("Index: read-only: ", 1)[1].split(" is immutable", 1)[0]
        assert f"permission denied: {named} is immutable" in saved["warning"], (named, saved)
        assert health["index"]["immutable"] == named == f"{index}/manifest.sqlite-shm", health["index"]
        assert health["index"]["immutable"] is not None, health["index"]
        assert health["index"]["immutable_checked"] == "all", health["index"]  # a small index: all of it
        # memory_status too: "index ready" read as if a memory write were searchable.
        from sidecar.clients.mcp_texts import status_of

        told = status_of(health, "ops")["message"]
        assert told.startswith("index read-only: ") and "chattr -i" in told, told
        assert d.proc is not None and d.proc.poll() is None, d.log.read_text()[-3000:]
    d.call("index", {}, agent="ops")  # the sweep that catches up
    deadline = time.monotonic() + 60

    def found() -> set[str]:
        return {h["reference"] for h in d.call("search", {"query": "kayak canoe"}, agent="ops")["hits"]}

    while "memory/canoe" not in found():
        assert time.monotonic() < deadline, d.log.read_text()[-3000:]
        time.sleep(0.2)
    said = d.run_cli("status")
    assert "Index: ready" in said.stdout and "read-only" not in said.stdout, said.stdout
    assert d.stop() == 0
    assert not list(index.glob("*.broken-*"))


def test_clients_of_a_daemon_refusing_its_immutable_index_say_its_words(
    daemon_factory: Any, vault: Path
) -> None:
    """A daemon started while its index is immutable answers health with the refusing record
    (no embedder, no counters): `sidecar index` died of ``KeyError: 'sweeps'``, memory_status
    said "an answer this shim cannot read" (sending the agent after another program). Each says
    the refusal's words now, which name ``chattr``."""
    import asyncio

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    write(vault / "Lighthouse.md", "# Lighthouse\n\nThe keeper of the lighthouse rows home.\n")
    d = daemon_factory(vault, keyword_only=True).start()
    index = d.cfg.index_dir
    with _immutable(index):
        os.sync()
        assert d.stop() == 0
        again = daemon_factory(vault, keyword_only=True).start(wait="refusing")
        done = again.run_cli("index")
        assert done.returncode == 7 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert "the daemon cannot index now: " in done.stderr and "chattr" in done.stderr, done.stderr
        params = StdioServerParameters(
            command=sys.executable, args=["-m", "sidecar", "mcp", "--agent", "ops", "--home", str(again.home)]
        )

        async def steps() -> Any:
            async with Client(params) as client:
                return await client.call_tool("memory_status", {})

        status = asyncio.run(steps())
        text = "\n".join(c.text for c in status.content if getattr(c, "text", None))
        assert not status.is_error and "shim cannot read" not in text and "chattr" in text, text
        assert status.structured_content["refusing"], status.structured_content
        assert again.stop() == 0


# Run in a process of its own, so that a SIGBUS kills only it. Four threads each begin a read of
# the manifest and stay in it (``hold``) while a commit follows each start; then they end, the
# ``-shm`` is made immutable and the manifest is read again. Prints what it reached.
_FOUR_READS_AT_COMMITS = """
import os, subprocess, sys, threading
from pathlib import Path
from sidecar.stores import manifest as manifest_module
from sidecar.stores.manifest import Manifest

release = threading.Event()
entered = threading.Semaphore(0)

def hold():
    entered.release()
    release.wait()
    return 1

real = manifest_module.guarded_connect

def passing():
    entered.release()
    return 1

def connect(target, *args, **kwargs):
    db = real(target, *args, **kwargs)
    # Only the readers' reads are held: a read finding both held reads through the writer, under
    # its lock, and a commit waits for it (held, the test's commits would never run).
    db.create_function("hold", 0, hold if "mode=ro" in str(target) else passing)
    return db

manifest_module.guarded_connect = connect
path = Path(sys.argv[1])
m = Manifest(path)
m.set_meta("k", "0")
threads = []
for i in range(4):
    t = threading.Thread(target=m._committed, args=("SELECT count(*), hold() FROM meta",))
    t.start()
    threads.append(t)
    entered.acquire(timeout=2)  # a read capped out reads through the writer, between commits
    m.set_meta("k", str(i + 1))  # a commit while the reads begun so far are in flight
release.set()
for t in threads:
    t.join()
print("reads ended", flush=True)
os.sync()
shm = path.with_name(path.name + "-shm")
if subprocess.run(["chattr", "+i", str(shm)], capture_output=True).returncode != 0:
    print("no chattr", flush=True)
    os._exit(0)
try:
    print("read", m._committed("SELECT value FROM meta WHERE name = 'k'"), m.get_meta("k"), flush=True)
finally:
    subprocess.run(["chattr", "-i", str(shm)], check=True)
os._exit(0)
"""


def test_a_read_after_four_reads_in_flight_at_commits_survives_an_immutable_shm(tmp_path: Path) -> None:
    """SQLite's WAL has four read-mark slots. Four of the manifest's readers (one per request
    thread, uncapped) in reads at different snapshots at a commit left the writer's read after it
    no slot to record the new end; once the ``-shm`` was immutable the next read wrote a mark
    into the mapped file and the process died of SIGBUS (rc -7). The manifest reads on two
    connections at most now (a third read goes through the writer's, under its lock, so no commit
    runs meanwhile): the settle read always finds a slot."""
    done = _run_flagged(_FOUR_READS_AT_COMMITS, tmp_path / "manifest.sqlite")
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "read [('4',)] 4" in done.stdout, done.stdout


# Run in a process of its own, so that a SIGBUS kills only it: a manifest with commits in its
# write-ahead log, its -shm made immutable, then closed the way a failure closes it; prints what
# each step reached and, once the flag is gone, what a new open reads.
_CLOSED_AFTER_THE_FLAG = """
import sqlite3, subprocess, sys
from pathlib import Path
from sidecar.stores.manifest import Manifest

path, how = Path(sys.argv[1]), sys.argv[2]
shm = path.with_name(path.name + "-shm")

def freeze():
    if subprocess.run(["chattr", "+i", str(shm)], capture_output=True).returncode != 0:
        print("no chattr", flush=True)
        sys.exit(0)

try:
    if how == "failed start":  # the keyword index's open fails after the flag came
        m = Manifest(path)
        for i in range(50):
            m.set_meta(f"probe{i}", "1")
        freeze()
        m.close_after_failure()
    else:  # the writer's own open fails after its connection made the commits
        Manifest(path).close()
        def shrink(self):
            for i in range(50):
                self._db.execute("INSERT OR REPLACE INTO meta(name, value) VALUES (?, '1')", (f"probe{i}",))
            freeze()
            raise sqlite3.OperationalError("disk I/O error")
        real, Manifest._shrink = Manifest._shrink, shrink
        try:
            Manifest(path)
        except Exception as exc:
            print("open failed", type(exc).__name__, flush=True)
        Manifest._shrink = real
    print("closed", flush=True)
finally:
    subprocess.run(["chattr", "-i", str(shm)], check=True)
print("after", len(Manifest(path).meta_names("probe")), flush=True)
"""


@pytest.mark.parametrize("how", ["failed start", "failed open"])
def test_a_manifest_closed_after_its_shm_turned_immutable_lives(tmp_path: Path, how: str) -> None:
    """The flag set between the writer's open and a failure: the keyword index's open failing
    after it (the start closes the manifest), or a step of the manifest's own open (its
    connection closed). SQLite's close of the last connection checkpoints into the mapped
    ``-shm``: the process died of SIGBUS (rc -7), as the stop once did. It closes without that
    checkpoint now, and the next open replays the log: nothing written is lost."""
    done = _run_flagged(_CLOSED_AFTER_THE_FLAG, tmp_path / "manifest.sqlite", how)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "closed" in done.stdout.splitlines() and "after 50" in done.stdout, done.stdout
    assert "manifest_closed_unwritten" in done.stderr and "reason=immutable" in done.stderr, done.stderr
    if _checkpoint_switch_expected():  # not the fallback, which keeps a connection open
        assert "manifest_left_open" not in done.stderr and "without its checkpoint" in done.stderr, (
            done.stderr
        )


def _checkpoint_switch_expected() -> bool:
    """Whether this Python can switch SQLite's checkpoint at close off: 3.12's ``setconfig``, or
    SQLite's own call on CPython 3.11 on Linux."""
    if sys.version_info >= (3, 12):
        return True
    return sys.implementation.name == "cpython" and sys.platform.startswith("linux")


def test_the_checkpoint_at_close_switched_off_leaves_the_log_for_the_next_open(tmp_path: Path) -> None:
    """``no_checkpoint_at_close`` on a plain connection, its database's last: a close without it
    writes the log back and removes the -wal; with it the -wal stays and the next open reads every
    row from it. Where the call is made through ctypes (CPython 3.11) a handle read wrong, or a
    call SQLite ignored, fails here, where a close after the flag only fell back to leaving the
    connection open, unseen."""
    from sidecar.stores.frozen import no_checkpoint_at_close

    if not _checkpoint_switch_expected():
        pytest.skip("this Python cannot switch SQLite's checkpoint at close off")
    path = tmp_path / "plain.sqlite"
    wal = path.with_name(path.name + "-wal")
    plain = sqlite3.connect(path, isolation_level=None)
    plain.execute("PRAGMA journal_mode=WAL")
    plain.execute("CREATE TABLE t(x)")
    plain.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(50)])
    plain.close()
    assert not wal.exists()  # the plain close wrote it back
    db = sqlite3.connect(path, isolation_level=None)
    db.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(50)])
    assert no_checkpoint_at_close(db, path)
    db.close()
    assert wal.exists() and wal.stat().st_size > 0
    again = sqlite3.connect(path)
    try:
        assert again.execute("SELECT count(*) FROM t").fetchone()[0] == 100
    finally:
        again.close()


# Run in a process of its own (a SIGBUS kills only it): three connections of one database, its
# -shm made immutable, each closed through ``close_unwritten`` where the checkpoint at close cannot
# be switched off (another Python's case, made here by answering False); prints what each close
# did and how many connections stay open.
_FALLBACK_CLOSES = """
import os, sqlite3, subprocess, sys
from pathlib import Path
from sidecar.stores import frozen

frozen.no_checkpoint_at_close = lambda db, path: False
path = Path(sys.argv[1])
shm = path.with_name(path.name + "-shm")
dbs = [sqlite3.connect(path, isolation_level=None) for _ in range(3)]
dbs[0].execute("PRAGMA journal_mode=WAL")
dbs[0].execute("CREATE TABLE t(x)")
dbs[0].executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(50)])
for db in dbs:
    db.execute("SELECT count(*) FROM t").fetchall()
os.sync()
if subprocess.run(["chattr", "+i", str(shm)], capture_output=True).returncode != 0:
    print("no chattr", flush=True)
    os._exit(0)
try:
    for db in dbs:
        print("closed:", frozen.close_unwritten(db, path), flush=True)
    print("kept", len(frozen._left_open), flush=True)
finally:
    subprocess.run(["chattr", "-i", str(shm)], check=True)
os._exit(0)
"""


def test_closes_that_cannot_switch_the_checkpoint_off_keep_one_connection_per_file(tmp_path: Path) -> None:
    """Where the checkpoint at close cannot be switched off (a Python with SQLite built in, macOS),
    a close while the -shm is immutable leaves its connection open: each close kept one, and its
    descriptors, for the life of the process. One per database file now: while it is open the
    file's other connections' closes are not the last, write nothing, and close as always."""
    path = tmp_path / "manifest.sqlite"
    done = _run_flagged(_FALLBACK_CLOSES, path)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    closes = [line for line in done.stdout.splitlines() if line.startswith("closed:")]
    assert len(closes) == 3 and closes[0].startswith("closed: left open"), done.stdout
    assert all("is kept open" in line for line in closes[1:]), done.stdout
    assert "kept 1" in done.stdout, done.stdout
    again = sqlite3.connect(path)
    try:
        assert again.execute("SELECT count(*) FROM t").fetchone()[0] == 50
    finally:
        again.close()


def test_a_write_back_refused_for_an_immutable_shm_says_so_not_the_disk(tmp_path: Path) -> None:
    """``written_back`` (the switch to writable, the close of a failed start's stores) with the
    manifest's ``-shm`` immutable: its checkpoint was refused and it answered False, which the
    switch said as "cannot be written back into the file yet (not enough space)" with room on the
    disk. It raises the refusal's own words (which file, ``chattr -i``) now; once the flag is gone
    the log is written back."""
    from sidecar.contracts.errors import PermissionDeniedError
    from sidecar.stores.manifest import Manifest

    path = tmp_path / "manifest.sqlite"
    m = Manifest(path)
    try:
        m.set_meta("k", "1")
        shm = path.with_name(path.name + "-shm")
        with _immutable(shm, recursive=False):
            with pytest.raises(PermissionDeniedError) as refused:
                m.written_back()
            assert f"permission denied: {shm} is immutable" in str(refused.value), refused.value
            assert "chattr -i" in str(refused.value) and "space" not in str(refused.value), refused.value
        assert m.written_back()
    finally:
        m.close()


def test_a_write_refused_for_an_immutable_shm_stops_no_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the ``-shm`` immutable no reader opens, so every read goes through the writer's
    connection; a write there waits for the writer's lock and is refused once it has it. Counted
    as a queued write, it stopped the read running there, which was read again from its start
    for a write that could not run. Not counted now: the read runs once (its rows go on for
    200,000 steps after the write began, more than ten give-ways' worth)."""
    import threading

    from sidecar.contracts.errors import PermissionDeniedError
    from sidecar.stores import manifest as manifest_module
    from sidecar.stores.manifest import Manifest

    starts: list[int] = []
    state = {"write_began": False, "after": 0}
    began_now = threading.Event()

    def began() -> int:
        starts.append(1)
        began_now.set()
        return 1

    def go_on(n: int) -> int:
        if state["write_began"]:
            state["after"] += 1
            return int(state["after"] < 200_000)
        return 1

    real = manifest_module.guarded_connect

    def connect(*args: Any, **kwargs: Any) -> Any:
        db = real(*args, **kwargs)
        db.create_function("began", 0, began)
        db.create_function("go_on", 1, go_on)
        return db

    monkeypatch.setattr(manifest_module, "guarded_connect", connect)
    path = tmp_path / "manifest.sqlite"
    m = Manifest(path)
    try:
        m.set_meta("k", "1")
        answered: list[Any] = []
        refused: list[BaseException] = []
        with _immutable(path.with_name(path.name + "-shm"), recursive=False):
            read = (
                "WITH RECURSIVE c(n) AS (SELECT began() UNION ALL SELECT n + 1 FROM c WHERE go_on(n)) "
                "SELECT count(*) > 0 FROM c"
            )
            reader = threading.Thread(target=lambda: answered.append(m._committed(read)), daemon=True)
            reader.start()
            assert began_now.wait(30)  # a guard against a hang, not a timing
            state["write_began"] = True
            try:
                m.set_meta("k", "2")
            except PermissionDeniedError as exc:
                refused.append(exc)
            reader.join(60)
        assert answered == [[(1,)]] and refused, (answered, refused)
        assert len(starts) == 1, len(starts)
    finally:
        m.close()


@pytest.mark.parametrize("flagged", ["vectors", "bm25/pages/meta.json", "bm25/memory-all/chunks"])
def test_a_flag_inside_the_index_is_found_not_only_on_five_paths(tmp_path: Path, flagged: str) -> None:
    """``health``'s ``index.immutable`` (and with it status's "Index: read-only" headline) asked
    five paths: the index folder, the manifest's three files and the keyword index's folder. A
    flag on the vector table's folder or on a file inside the keyword index (a backup tool
    flagging files one by one) said "Index: ready" while the writes there failed. Every entry a
    few levels down is asked now."""
    from sidecar.stores.frozen import frozen_in_index
    from sidecar.stores.manifest import Manifest

    index = tmp_path / "index"
    index.mkdir()
    Manifest(index / "manifest.sqlite").close()
    for folder in ("bm25/pages", "bm25/memory-all/chunks", "vectors/table.lance/data"):
        (index / folder).mkdir(parents=True)
    for name in ("bm25/pages/meta.json", "bm25/pages/a.idx", "vectors/table.lance/data/0.lance"):
        (index / name).write_text("{}")
    assert frozen_in_index(index) == (None, True)
    with _immutable(index / flagged, recursive=False):
        assert frozen_in_index(index) == (index / flagged, True)
    assert frozen_in_index(index) == (None, True)


def test_a_wholly_flagged_index_is_named_by_the_file_a_write_is_refused_for(tmp_path: Path) -> None:
    """``chattr -R +i`` of an open index flags every file: health named the first it asked, the
    index folder or ``manifest.sqlite``, while a write's refusal named the ``-shm`` (the file SQLite
    writes into first). Both name the ``-shm`` now; the database file when only it is flagged."""
    from sidecar.stores.frozen import frozen_in_index
    from sidecar.stores.manifest import Manifest

    index = tmp_path / "index"
    index.mkdir()
    m = Manifest(index / "manifest.sqlite")
    try:
        m.set_meta("k", "v")  # the -wal and -shm made
        shm = index / "manifest.sqlite-shm"
        assert shm.exists()
        with _immutable(index):
            assert frozen_in_index(index).found == shm
        with _immutable(index / "manifest.sqlite", recursive=False):
            assert frozen_in_index(index).found == index / "manifest.sqlite"
    finally:
        m.close()


def _flag_reader(index: Path, agents: Sequence[str] = ()) -> Any:
    """A stand-in of the stores the flag check reads (``Stores.flags``, ``look_for_flags``): the
    index folder's manifest, the keyword indexes of ``agents``, no vector table, nothing found
    or asked yet."""
    return SimpleNamespace(
        manifest=SimpleNamespace(path=index / "manifest.sqlite"),
        bm25=SimpleNamespace(agents=lambda: list(agents)),
        table_names=list,
        index_flags=None,
        flags_turn=0,
        flags_asked=set(),
        flags_kept=[],
    )


def _big_index(index: Path) -> dict[str, Path]:
    """An index of the real layout's names with more entries than a lowered bound reads: the
    manifest, the keyword index's pair, an agent's memory pair (five levels down), a vector table
    whose data folder is crowded and whose latest manifest its hint names (second naming)."""
    from sidecar.stores.manifest import Manifest

    index.mkdir()
    Manifest(index / "manifest.sqlite").close()
    table = index / "vectors" / "t.lance"
    files = {
        "pages_meta": index / "bm25/pages/meta.json",
        "writer_lock": index / "bm25/chunks/.tantivy-writer.lock",
        "agent_meta": index / "bm25/memory/zed/chunks/meta.json",
        "everyone_meta": index / "bm25/memory-all/pages/meta.json",
        "latest": table / "_versions" / f"{2**64 - 1 - 7:020d}.manifest",
        "hint": table / "_versions/latest_version_hint.json",
    }
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    files["hint"].write_text('{"version":7}')
    (table / "data").mkdir()
    for n in range(400):  # crowded, and more than the lowered bound
        (table / "data" / f"{n:04d}.lance").write_text("")
        (index / "bm25/pages" / f"{n:04d}.idx").write_text("")
    return files


def test_a_flag_past_the_bound_says_the_check_was_partial_and_a_written_file_is_never_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a big index (a vector table not compacted for a while: tens of thousands of files) the
    walk stops at its bound: a flag beyond it was missed, and health said "ready" with no sign that
    part of the index was not looked at. ``complete`` (health's ``index.immutable_checked``) says
    so now, and the files a write touches (a keyword index's ``meta.json`` and lock file, an
    agent's memory index five levels down, the vector table's latest manifest) are asked before
    the walk, so a flag on them is found however big the index is. The bound lowered, not the
    index made huge: the same walk."""
    from sidecar.stores import frozen

    monkeypatch.setattr(frozen, "FROZEN_ENTRIES", 120)
    index = tmp_path / "index"
    files = _big_index(index)
    assert frozen.frozen_in_index(index) == (None, False)
    for name in ("pages_meta", "writer_lock", "agent_meta", "everyone_meta", "latest", "hint"):
        with _immutable(files[name], recursive=False):
            assert frozen.frozen_in_index(index).found == files[name], name


def test_a_crowded_folder_is_read_no_further_than_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crowded folder (a vector table's data files) was listed whole before its files were
    passed over: 60,000 data and 20,000 version files read at every health call (35-124 ms). Its
    listing stops past ``FROZEN_CROWDED`` now, and the whole walk reads ``FROZEN_ENTRIES`` at most:
    the entries read are counted through the real listing."""
    from sidecar.stores import frozen

    index = tmp_path / "index"
    _big_index(index)
    for n in range(400, 3000):
        (index / "vectors/t.lance/data" / f"{n:04d}.lance").write_text("")
    read = [0]
    real_scandir = os.scandir

    @contextlib.contextmanager
    def counted(path: Any) -> Iterator[Iterator[os.DirEntry[str]]]:
        with real_scandir(path) as listing:

            def entries() -> Iterator[os.DirEntry[str]]:
                for entry in listing:
                    read[0] += 1
                    yield entry

            yield entries()

    monkeypatch.setattr(frozen.os, "scandir", counted)
    found, complete = frozen.frozen_in_index(index)
    # The data folder's 3,000 entries are not all read, nor the index's 3,400 and more.
    assert read[0] <= 2 * (frozen.FROZEN_CROWDED + 2) + 30, read[0]
    assert found is None and not complete


def test_health_asks_the_written_files_each_time_and_a_deeper_flag_from_the_last_walk(tmp_path: Path) -> None:
    """A walk of the whole index at every health listed the index's folders under status (tens of
    milliseconds on a big index, the disk read at each call): health asks the files a write
    touches by the names of what is open, nothing listed, and a flag deeper in from the last
    whole walk (the start's, the scheduled optimize's) while that file is still flagged."""
    from sidecar.index.vectoring import Stores
    from sidecar.stores.manifest import Manifest

    index = tmp_path / "index"
    index.mkdir()
    Manifest(index / "manifest.sqlite").close()
    deep = index / "bm25" / "pages" / "segment.store"
    deep.parent.mkdir(parents=True)
    deep.write_bytes(b"x")
    stores = _flag_reader(index)
    flags = Stores.flags  # the method, on a stand-in of the stores it reads
    assert flags(stores) == (None, False)  # type: ignore[arg-type]  # no walk yet: partial
    with _immutable(deep, recursive=False):
        Stores.look_for_flags(stores)  # type: ignore[arg-type]
        assert flags(stores) == (deep, True)  # type: ignore[arg-type]
        with _immutable(index / "bm25", recursive=False):
            assert flags(stores) == (index / "bm25", True)  # type: ignore[arg-type]  # asked now
    assert flags(stores) == (None, True)  # type: ignore[arg-type]  # lifted since the walk


def test_health_asks_the_agents_keyword_indexes_a_few_at_a_time_and_keeps_a_flag_it_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Health asked the files of every agent's keyword index at each call, eleven per agent: 2,000
    statx calls at 180 agents, 30-60 ms per health (290 ms on a loaded machine). It asks
    ``FLAGS_AGENTS_PER_CALL`` agents' in turn now; a flag on the last agent's index is found
    within as many calls as there are turns and said at every call after, until it is lifted.
    Counted, not timed."""
    from sidecar.index import vectoring
    from sidecar.index.vectoring import FLAGS_AGENTS_PER_CALL, Stores
    from sidecar.stores import frozen
    from sidecar.stores.manifest import Manifest

    index = tmp_path / "index"
    index.mkdir()
    Manifest(index / "manifest.sqlite").close()
    agents = [f"agent{n:02d}" for n in range(3 * FLAGS_AGENTS_PER_CALL + 1)]
    for agent in agents:
        for pair in ("chunks", "pages"):
            write(index / "bm25/memory" / agent / pair / "meta.json", "{}")
    stores = _flag_reader(index, agents)
    asked: list[Path] = []
    real = frozen.frozen

    def counted(path: Path) -> bool:
        asked.append(path)
        return real(path)

    monkeypatch.setattr(frozen, "frozen", counted)
    monkeypatch.setattr(vectoring, "frozen", counted)
    stores.index_flags = frozen.IndexFlags(None, True)  # the start's whole look: nothing
    flagged = index / "bm25/memory" / agents[-1] / "pages/meta.json"
    turns = -(-len(agents) // FLAGS_AGENTS_PER_CALL)
    with _immutable(flagged, recursive=False):
        found = []
        for _ in range(turns):
            asked.clear()
            found.append(Stores.flags(stores))  # type: ignore[arg-type]
            # The manifest's, the vault's and every agent's memory pair: 11 entries per agent.
            assert len(asked) <= 20 + 11 * (FLAGS_AGENTS_PER_CALL + 2), len(asked)
        # Not every agent was asked before the turn's last call: "partial" until then, not "all".
        assert found[-1] == (flagged, True), found
        assert found[:-1] == [(None, False)] * (turns - 1), found
        for _ in range(turns):  # said at every call while it stays, whichever agents are asked
            assert Stores.flags(stores) == (flagged, True)  # type: ignore[arg-type]
    assert Stores.flags(stores) == (None, True)  # type: ignore[arg-type]  # lifted
    Stores.look_for_flags(stores)  # type: ignore[arg-type]  # the next whole look: a turn anew
    complete = [Stores.flags(stores).complete for _ in range(turns)]  # type: ignore[arg-type]
    assert complete == [False] * (turns - 1) + [True], complete


def test_a_flag_health_found_does_not_hide_another_still_flagged_once_lifted(tmp_path: Path) -> None:
    """A flag found at a health call replaced the whole look's deeper finding: once the user
    lifted the entry status named, status said nothing was immutable while the deeper file still
    was. Every entry found is kept, each said while it stays: the look's, and two agents' found
    at different calls."""
    from sidecar.index.vectoring import FLAGS_AGENTS_PER_CALL, Stores
    from sidecar.stores.manifest import Manifest

    index = tmp_path / "index"
    index.mkdir()
    Manifest(index / "manifest.sqlite").close()
    deep = index / "bm25" / "pages" / "segment.store"
    write(deep, "x")
    agents = [f"agent{n:02d}" for n in range(3 * FLAGS_AGENTS_PER_CALL)]
    for agent in agents:
        write(index / "bm25/memory" / agent / "pages/meta.json", "{}")
    first, second = (
        index / "bm25/memory" / agents[n] / "pages/meta.json" for n in (2 * FLAGS_AGENTS_PER_CALL, 0)
    )
    stores = _flag_reader(index, agents)
    flags = Stores.flags
    with _immutable(deep, recursive=False):
        Stores.look_for_flags(stores)  # type: ignore[arg-type]
        with _immutable(index / "bm25", recursive=False):
            assert flags(stores).found == index / "bm25"  # type: ignore[arg-type]
        # The folder status named was lifted: the deeper file is still flagged.
        assert flags(stores).found == deep  # type: ignore[arg-type]
        with _immutable(first, recursive=False):
            with _immutable(second, recursive=False):
                assert flags(stores).found == first  # type: ignore[arg-type]  # this call's agents
                assert flags(stores).found == second  # type: ignore[arg-type]  # the next call's
            # The second lifted, the next call asks the share neither is in: the first stays.
            assert flags(stores).found == first  # type: ignore[arg-type]
        assert flags(stores).found == deep  # type: ignore[arg-type]
    assert flags(stores) == (None, True)  # type: ignore[arg-type]
