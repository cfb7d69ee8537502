"""A permission denied in the index folder (EPERM, EACCES: an immutable folder, a macOS privacy
denial, a share's rights) is a fault that passes, like a full disk: said as "permission denied:
<path>", nothing moved aside, nothing rebuilt, and the index catches up by itself once it may be
written again."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import search, with_agents

_NOTES = {"alpha": {"trip": "# Trip\n\nThe kayak of alpha waits at the lake.\n"}}


@contextlib.contextmanager
def _immutable(folder: Path, *, recursive: bool = True) -> Iterator[None]:
    """``folder`` and all in it (or, not ``recursive``, the folder alone: no file made, renamed or
    removed in it) immutable meanwhile (chattr +i: every write and every file made fails with
    EPERM, for root too, whom a mode does not bind)."""
    flag = ["-R"] if recursive else []
    if shutil.which("chattr") is None:
        pytest.skip("needs chattr to make a folder refuse writes with EPERM")
    done = subprocess.run(["chattr", *flag, "+i", str(folder)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot make a folder immutable here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", *flag, "-i", str(folder)], capture_output=True, check=True)


def test_an_agents_keyword_index_that_refuses_writes_is_not_taken_for_damage(
    make_cfg: Any, vault: Path
) -> None:
    """A memory write while the keyword index's folder refuses every write (EPERM): the note is
    saved, the reply and status say "permission denied: <path>", no search says the index is
    damaged, the repair moves nothing aside; once the folder may be written again the note is
    indexed by the next sweep. Was: Tantivy's "Failed to acquire Lockfile: Operation not
    permitted. None" taken for damage: "the keyword index of memory/alpha is damaged and is
    being rebuilt", and the index moved aside as broken once writable again."""
    from sidecar.contracts.protocol import Request
    from sidecar.daemon.repairs import RepairPolicy
    from sidecar.memory.inbox import Inboxes
    from sidecar.memory.ops import MemoryOps

    cfg = with_agents(make_cfg, vault, _NOTES)
    h = Harness(cfg, FakeEmbedder())
    try:
        ops = MemoryOps(cfg, Inboxes(cfg), h.indexer, h.slot, stores=h.stores, problems=h.problems)
        params = {"slug": "canoe", "content": "# Canoe\n\nThe zeppelin canoe of alpha.\n"}
        with _immutable(cfg.index_dir / "bm25"):
            out = ops.write(Request(op="write", params=params, agent="alpha"))
            assert (cfg.agents_dir / "alpha/memory/canoe.md").is_file()
            said = str(out.get("warning", ""))
            assert "permission denied: " in said and str(cfg.index_dir / "bm25") in said, out
            assert "None" not in said
            for agent in ("alpha", None):
                search(h, "kayak", agent=agent)
            assert not h.stores.bm25.failing
            described = str(h.problems.describe())
            assert "damaged" not in described and ". None" not in described, described
            RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        assert not list(cfg.index_dir.glob("*.broken-*"))
        h.sweep()
        RepairPolicy(h.repair, h.problems, h.stores.manifest, h.slot).tick()
        assert not list(cfg.index_dir.glob("*.broken-*"))
        assert "memory/canoe" in {x["reference"] for x in search(h, "zeppelin", agent="alpha")}
    finally:
        h.close()


@contextlib.contextmanager
def _refused(folder: Path, code: int) -> Iterator[None]:
    """Files made in ``folder`` and writes of what it holds refused with ``code`` meanwhile (as a
    mode, an immutable folder or a privacy control refuses them), for this process's checks."""
    real_open, real_access = os.open, os.access

    def inside(p: Any) -> bool:
        return str(p) == str(folder) or str(p).startswith(str(folder) + os.sep)

    def fake_open(p: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if inside(p) and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise OSError(code, os.strerror(code), str(p))
        return real_open(p, flags, *args, **kwargs)

    def fake_access(p: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        if inside(p) and mode & os.W_OK:
            return False
        return real_access(p, mode, *args, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(os, "open", fake_open)
        m.setattr(os, "access", fake_access)
        yield


@pytest.mark.parametrize("code", [errno.EPERM, errno.EACCES])
def test_sqlites_disk_io_error_for_a_refused_write_says_permission_denied(tmp_path: Path, code: int) -> None:
    """SQLite says "disk I/O error" for a write the OS refuses for want of permission: status said
    so (a dying disk) while the folder was only immutable. The folder is asked and the words are
    "permission denied: <folder>"; a folder that may be written keeps SQLite's words."""
    from sidecar.stores.space import fault_words

    db = tmp_path / "manifest.sqlite"
    sqlite3.connect(db).close()
    exc = sqlite3.OperationalError("disk I/O error")
    assert fault_words(exc, db) == "disk I/O error"
    with _refused(tmp_path, code):
        assert fault_words(exc, db) == f"permission denied: {tmp_path}"
        full = sqlite3.OperationalError("database or disk is full")
        assert fault_words(full, db) == "database or disk is full"


@pytest.mark.parametrize("code", [errno.EPERM, errno.EACCES])
def test_a_keyword_index_that_cannot_be_written_is_a_fault_that_passes(tmp_path: Path, code: int) -> None:
    """Tantivy's failure whose words name no permission (or none at all) on a folder that refuses
    writes: a PermissionDeniedError (a fault that passes: nothing moved aside) naming the folder.
    Was: a plain StoreError, taken for damage."""
    from sidecar.contracts.errors import PassingFaultError, PermissionDeniedError, is_passing_fault
    from sidecar.stores.bm25_folder import engine

    with pytest.raises(PermissionDeniedError) as err, _refused(tmp_path, code), engine("commit", tmp_path):
        raise ValueError("An IO error occurred: 'cannot write meta.json'")
    assert isinstance(err.value, PassingFaultError) and is_passing_fault(err.value)
    assert str(err.value) == f"BM25 commit failed: permission denied: {tmp_path}"
    with pytest.raises(PermissionDeniedError) as err, engine("writer"):
        raise ValueError("Failed to acquire Lockfile: Operation not permitted. None")
    assert str(err.value) == "BM25 writer failed: Failed to acquire Lockfile: Operation not permitted"


def test_storing_vectors_refused_for_want_of_permission_is_said_so_and_repairs_nothing(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backfill's manifest write failing with SQLite's "disk I/O error" while the index folder
    refuses writes: the problem says "permission denied: <folder>" (was: "OperationalError: disk
    I/O error", as a crash); a vector table that cannot be attached for a permission denied is no
    damage: raised to be tried again, the repair (which checks and replaces a table) not run."""
    import threading

    from sidecar.contracts.errors import PermissionDeniedError
    from sidecar.daemon.backfill import Backfill

    h = harness
    backfill = Backfill(
        h.cfg, h.slot, h.vectors, h.repair, problems=h.problems, activity=h.indexer.activity,
        stop=threading.Event(),
    )  # fmt: skip
    backfill.stop.set()  # no wait after the report
    with _refused(h.cfg.index_dir, errno.EPERM):
        backfill._embed_failed(sqlite3.OperationalError("disk I/O error"), 0.0)
    said = str(h.problems.active_in("embedding"))
    assert f"permission denied: {h.cfg.index_dir}" in said and "OperationalError" not in said, said

    def refused(*_a: Any, **_k: Any) -> None:
        raise PermissionDeniedError(f"permission denied: {h.cfg.index_dir / 'vectors'}")

    repaired: list[str] = []
    monkeypatch.setattr("sidecar.daemon.backfill.attach", refused)
    monkeypatch.setattr(h.repair, "repair_vectors", repaired.append)
    with pytest.raises(PermissionDeniedError):
        backfill._attach_once(h.slot.model)  # type: ignore[arg-type]
    assert repaired == []


def test_an_engine_message_loses_its_empty_hint_not_a_sentence() -> None:
    """Tantivy's lock failure ends in its empty hint (". None"), which status showed as it was; a
    sentence that goes on with "None" keeps it."""
    from sidecar.contracts.errors import engine_text

    assert engine_text("Failed to acquire Lockfile: Operation not permitted. None") == (
        "Failed to acquire Lockfile: Operation not permitted"
    )
    assert engine_text("the commit failed. None of the notes were lost") == (
        "the commit failed. None of the notes were lost"
    )


@contextlib.contextmanager
def _read_only_files(*paths: Path) -> Iterator[None]:
    """These files read-only to this process meanwhile (as a mode 0444 makes them for a user; root,
    running these tests, is not bound by a mode): ``os.access(W_OK)`` says no."""
    real_access = os.access
    names = {str(p) for p in paths}

    def fake_access(p: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        if str(p) in names and mode & os.W_OK:
            return False
        return real_access(p, mode, *args, **kwargs)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(os, "access", fake_access)
        yield


@pytest.mark.parametrize("name", ["meta.json", ".tantivy-meta.lock"])
def test_a_damaged_keyword_index_with_a_read_only_file_is_damage(tmp_path: Path, name: str) -> None:
    """Tantivy says "Data corrupted" of an index one of whose files is read-only (a restore from a
    backup, a copy off read-only media): damage, to be moved aside and refilled. Tantivy never
    writes its files in place, so a read-only one stops nothing. Was: "permission denied:
    …/.tantivy-meta.lock", a fault that passes, and the damage kept for ever."""
    from sidecar.contracts.errors import PassingFaultError, StoreError
    from sidecar.stores.bm25_folder import Folder
    from sidecar.stores.bm25_text import build_schema

    index = tmp_path / "bm25"
    Folder(index, build_schema()).close()
    (index / "meta.json").write_text("{ not json")
    with pytest.raises(StoreError) as err, _read_only_files(index / name):
        Folder(index, build_schema())
    assert not isinstance(err.value, PassingFaultError), err.value
    assert "permission denied" not in str(err.value)


def test_a_manifest_that_is_no_database_is_damage_though_read_only(tmp_path: Path) -> None:
    """SQLite's "file is not a database" of a read-only manifest is damage (moved aside, rebuilt):
    the engine said so before any question of permission. Was: "permission denied: …", never moved
    aside."""
    from sidecar.contracts.errors import StoreError
    from sidecar.stores import lifecycle
    from sidecar.stores.manifest import Manifest

    path = tmp_path / "manifest.sqlite"
    path.write_bytes(os.urandom(8192))
    with pytest.raises(StoreError) as err:
        Manifest(path)
    with _read_only_files(path):
        lifecycle._unless_disk_full(path, err.value)  # not a fault that passes: raises nothing


def _swept_lighthouse(make_cfg: Any, vault: Path) -> None:
    """The vault of one note, swept into the index (and the index closed again)."""
    write(vault / "Lighthouse.md", "# Lighthouse\n\nThe keeper of the lighthouse rows home.\n")
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    h.close()


@contextlib.contextmanager
def _daemon_holding_the_lock(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, Any]]:
    """A Daemon (no embedder) that holds the index lock as its run does, its socket in a temporary
    folder under /tmp (a socket's path is short), ``_wait_for_space`` off (the test switches it
    itself); shut down at the end. Yields the daemon and its config."""
    import tempfile

    from sidecar.daemon.lifecycle import Daemon
    from sidecar.daemon.process import IndexLock

    monkeypatch.setattr(Daemon, "_wait_for_space", lambda self: None)  # the test switches itself
    with tempfile.TemporaryDirectory(dir="/tmp") as run:
        cfg = make_cfg(vault, **{"socket": str(Path(run) / "s.sock"), "embedder.enabled": False})
        d = Daemon(cfg)
        lock = d._lock = IndexLock(cfg.index_dir)
        lock.acquire()
        try:
            yield d, cfg
        finally:
            d.shutdown()
            d.notifier.close()


def test_a_start_whose_index_may_not_be_written_serves_read_only_until_it_may(
    make_cfg: Any, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start whose index folder refuses new files (immutable: EPERM) serves search from the index
    as it is, like a start on a full disk, status saying "permission denied: <path>"; writes are
    refused; once the folder may be written the switch to writable succeeds. Nothing is moved
    aside. Was: the daemon exited (5) with no search at all."""

    from sidecar.contracts.errors import SidecarError
    from sidecar.contracts.protocol import Request

    _swept_lighthouse(make_cfg, vault)
    with _daemon_holding_the_lock(make_cfg, vault, monkeypatch) as (d, cfg):
        with _immutable(cfg.index_dir, recursive=False):  # the manifest's -wal cannot be made
            d.startup()
            assert d._read_only_parts is not None and d.parts is None
            dispatch = d._dispatch
            assert dispatch is not None
            hits = dispatch.dispatch(Request("search", {"query": "lighthouse keeper"}, agent="ops"))["hits"]
            assert hits
            said = str(dispatch.dispatch(Request("health", {}, agent="ops")))
            assert "permission denied: " in said and "until it can be written" in said, said
            with pytest.raises(SidecarError):
                dispatch.dispatch(Request("index", {}, agent="ops"))
            assert d._switch_to_writable() is False  # still refused: read-only again
            assert d._read_only_parts is not None
        assert d._switch_to_writable() is True
        assert d.parts is not None
        assert not list(cfg.index_dir.glob("*.broken-*"))


# Run as an unprivileged user (``_unprivileged``): what a mode refuses, for real (root ignores
# modes). Prints one line per case: the error's class, and whether it is a fault that passes.
_AS_A_USER = """
import os, sys
from pathlib import Path
from sidecar.contracts.errors import StoreError, is_passing_fault
from sidecar.stores import lifecycle
from sidecar.stores.bm25_folder import Folder, engine
from sidecar.stores.bm25_text import build_schema
from sidecar.stores.manifest import Manifest

base = Path(sys.argv[1])

def said(case, run):
    try:
        run()
        print(case, "ok", "-")
    except StoreError as exc:
        print(case, type(exc).__name__, is_passing_fault(exc))

damaged = base / "damaged"
Folder(damaged, build_schema()).close()
(damaged / "meta.json").write_text("{ not json")
os.chmod(damaged / ".tantivy-meta.lock", 0o444)
os.chmod(damaged / "meta.json", 0o444)
said("damaged", lambda: Folder(damaged, build_schema()))

closed = base / "closed"
Folder(closed, build_schema()).close()
os.chmod(closed, 0o555)
def commit():
    folder = Folder(closed, build_schema())
    with engine("commit", closed):
        folder.writer.commit()
said("closed", commit)

manifest = base / "manifest.sqlite"
manifest.write_bytes(os.urandom(8192))
os.chmod(manifest, 0o444)
try:
    Manifest(manifest)
except StoreError as exc:
    said("manifest", lambda: lifecycle._unless_disk_full(manifest, exc))
"""


def test_as_an_unprivileged_user_a_refused_folder_is_denied_and_damage_stays_damage() -> None:
    """As a user a mode binds (root ignores modes; run under setpriv as nobody): a keyword index
    whose folder is 0555 is a permission denied (a fault that passes), while a damaged keyword
    index or manifest with read-only files (0444: a restore from a backup) is damage, to be moved
    aside. The other tests of this file refuse writes by a patched os call or chattr; this one
    meets the OS's own EACCES."""
    import sys
    import tempfile

    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs setpriv and root, to run as an unprivileged user")
    base = Path(tempfile.mkdtemp(prefix="sidecar-perm-"))
    try:
        os.chmod(base, 0o755)
        os.chown(base, 65534, 65534)
        as_user = [setpriv, "--reuid", "65534", "--regid", "65534", "--clear-groups", sys.executable, "-c"]
        cwd = Path(__file__).resolve().parent.parent
        # A checkout in a folder only its owner may enter (mktemp's 0700, a home folder) cannot be
        # imported by another user: nothing to test then.
        probe = subprocess.run(
            [*as_user, "import sidecar.stores.space"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=cwd,
        )
        if probe.returncode != 0:
            pytest.skip(f"the unprivileged user cannot import this checkout: {probe.stderr.strip()[-200:]}")
        command = [*as_user, _AS_A_USER, str(base)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, cwd=cwd)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\n")[:3] == [
            "damaged StoreError False",
            "closed PermissionDeniedError True",
            "manifest ok -",
        ], done.stdout
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_a_memory_write_while_the_index_may_not_be_written_is_saved_in_its_inbox(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start whose index folder refuses new files (immutable) while the agents' inboxes, on the
    same disk, may be written: a memory write is saved in its inbox (``searchable: false``, saying
    it is found once the index can be written), an edit and a delete too; indexing stays refused;
    the catch-up sweep after the switch to writable indexes the note. Was: refused as on a full
    disk ("memory writes ... wait"), since the inboxes shared the index's disk."""
    import time

    from sidecar.contracts.errors import SidecarError
    from sidecar.contracts.protocol import Request

    base = with_agents(make_cfg, vault, _NOTES)
    with _daemon_holding_the_lock(make_cfg, vault, monkeypatch) as (d, cfg):
        assert cfg.agents_dir == base.agents_dir
        with _immutable(cfg.index_dir, recursive=False):
            d.startup()
            assert d._read_only_parts is not None
            dispatch = d._dispatch
            assert dispatch is not None

            def ask(op: str, **params: Any) -> dict[str, Any]:
                return dispatch.dispatch(Request(op, params, agent="alpha"))

            saved = ask("write", slug="canoe", content="# Canoe\n\nThe zeppelin canoe of alpha.\n")
            assert saved["searchable"] is False, saved
            assert "saved" in saved["warning"] and "once the index can be written" in saved["warning"]
            ask("write", slug="gone", content="# Gone\n\nA note to delete.\n")
            assert ask("delete", slug="gone")["deleted"] is True
            ask("edit", slug="canoe", content="# Canoe\n\nThe zeppelin canoe of alpha, patched.\n")
            inbox = cfg.agents_dir / "alpha" / "memory"
            assert "patched" in (inbox / "canoe.md").read_text() and not (inbox / "gone.md").exists()
            with pytest.raises(SidecarError) as err:
                ask("index")
            assert "memory writes are saved in the inboxes" in str(err.value), err.value
            said = str(ask("health")["problems"])
            assert "permission denied: " in said and "memory writes are saved" in said, said
        assert d._switch_to_writable() is True
        deadline = time.monotonic() + 60
        while not ask("search", query="zeppelin canoe")["hits"]:
            assert time.monotonic() < deadline, "the catch-up sweep did not index the saved note"
            time.sleep(0.1)
        assert not list(cfg.index_dir.glob("*.broken-*"))


def test_a_running_daemon_whose_index_turns_immutable_lives_and_says_so(
    daemon_factory: Any, vault: Path
) -> None:
    """``chattr -R +i`` of a running daemon's index folder (a backup tool, an admin): the kernel
    answers a write into the manifest's mapped ``-shm`` with SIGBUS, which can kill the daemon
    without a word (whether this sequence reaches such a write depends on SQLite's state: the
    manifest test below forces one). It lives: a memory write is saved unindexed saying why, a
    search is answered from the connections the daemon holds, and once the flag is gone the note
    is found. A real daemon process, so a SIGBUS kills only it."""
    import time

    from sidecar.contracts.errors import SidecarError

    write(vault / "Lighthouse.md", "# Lighthouse\n\nThe keeper of the lighthouse rows home.\n")
    d = daemon_factory(vault, keyword_only=True).start()
    d.call("write", {"slug": "plan", "content": "# Plan\n\nRow to the lighthouse.\n"}, agent="ops")
    index = d.cfg.index_dir
    with _immutable(index):
        os.sync()  # the -shm's pages written back: the next write into them faults
        said = []
        for op, params in (
            ("write", {"slug": "canoe", "content": "# Canoe\n\nThe zeppelin canoe.\n"}),
            ("search", {"query": "lighthouse keeper"}),
            ("index", {}),
        ):
            try:
                said.append(str(d.call(op, params, agent="ops")))
            except SidecarError as exc:
                said.append(str(exc))
        assert d.proc is not None and d.proc.poll() is None, d.log.read_text()[-3000:]
        assert any("immutable" in s or "permission denied" in s for s in said), said
        assert (d.cfg.agents_dir / "ops" / "memory" / "canoe.md").is_file()
    said_write = said[0]
    assert "saved, but not searchable yet" in said_write and "permission denied: " in said_write, said
    assert "'hits': [" in said[1], said  # the search, answered from the connections held
    d.call("index", {}, agent="ops")  # the sweep that catches up
    deadline = time.monotonic() + 60

    def found() -> set[str]:
        return {h["reference"] for h in d.call("search", {"query": "zeppelin"}, agent="ops")["hits"]}

    while "memory/canoe" not in found():
        assert time.monotonic() < deadline, d.log.read_text()[-3000:]
        time.sleep(0.2)
    assert d.proc.poll() is None
    assert not list(index.glob("*.broken-*"))


# Run in a process of its own (``test_a_manifest_whose_files_turn_immutable_...``), so that a SIGBUS
# kills only it: the manifest written (commits left in its -wal), its folder made immutable, then
# read and written; prints what each did, then the same once the flag is gone.
_FROZEN_MANIFEST = """
import subprocess, sys
from pathlib import Path
from sidecar.contracts.errors import SidecarError
from sidecar.stores.manifest import Manifest

folder = Path(sys.argv[1])
m = Manifest(folder / "manifest.sqlite")
for i in range(100):
    m.set_meta(f"probe{i}", "1")
subprocess.run(["chattr", "-R", "+i", str(folder)], check=True)
try:
    read, written = lambda: m._query("SELECT count(*) FROM meta"), lambda: m.set_meta("probe", "2")
    checkpoint = lambda: m._query("PRAGMA wal_checkpoint(TRUNCATE)")
    for what, run in (("read", read), ("write", written), ("checkpoint", checkpoint)):
        try:
            run()
            print(what, "done", flush=True)
        except SidecarError as exc:
            print(what, "refused", exc, flush=True)
finally:
    subprocess.run(["chattr", "-R", "-i", str(folder)], check=True)
m.set_meta("probe", "3")
print("after", m.get_meta("probe"), flush=True)
"""


def test_a_manifest_whose_files_turn_immutable_refuses_in_words_and_works_again(tmp_path: Path) -> None:
    """The manifest's folder made immutable while it is open (``chattr -R +i``: a backup tool, an
    admin) with commits in its write-ahead log: SQLite's next read wrote into the mapped ``-shm``
    and the kernel killed the process with SIGBUS (exit -7, no word said). Then each read and
    write was refused as a permission denied naming the immutable ``-shm``: a daemon answered no
    search, get or status until the flag went. A read is answered now (each commit is followed by
    a read, whose read mark the next reads use: nothing is written), a write is refused in words,
    and writes work again once the flag is gone."""
    import sys

    if shutil.which("chattr") is None:
        pytest.skip("needs chattr")
    probe = tmp_path / "probe"
    probe.touch()
    if subprocess.run(["chattr", "+i", str(probe)], capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot make a file immutable here")
    subprocess.run(["chattr", "-i", str(probe)], check=True)
    folder = tmp_path / "index"
    folder.mkdir()
    cwd = Path(__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            [sys.executable, "-c", _FROZEN_MANIFEST, str(folder)],
            capture_output=True, text=True, timeout=120, check=False, cwd=cwd,
        )  # fmt: skip
    finally:
        subprocess.run(["chattr", "-R", "-i", str(folder)], capture_output=True, check=False)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    lines = done.stdout.splitlines()
    shm = folder / "manifest.sqlite-shm"
    assert lines[0] == "read done", lines  # the read mark set after the commits: nothing written
    assert lines[1].startswith(f"write refused the index is immutable: permission denied: {shm}"), lines
    assert "chattr -i" in lines[1], lines
    assert lines[2].startswith("checkpoint refused the index is immutable: "), lines  # query_only lets it
    assert lines[3] == "after 3", lines


# Run in a process of its own (``test_the_immutable_check_keeps_sqlites_locks_...``), so that a
# SIGBUS kills only it: a guarded writer commits in a loop while another process opens the file
# read-only again and again (``sidecar doctor``, a user's sqlite3, a backup reader); prints the
# loops run, the rows it read wrong, and the rows found against those written.
_SHARED_WITH_A_READER = """
import sqlite3, subprocess, sys
from pathlib import Path
from sidecar.stores.frozen import guarded_connect

path = Path(sys.argv[1])
g = guarded_connect(path, path, isolation_level=None)
g.execute("PRAGMA journal_mode=WAL")
g.execute("PRAGMA wal_autocheckpoint=0")
g.execute("CREATE TABLE t(x)")
for i in range(2000):
    g.execute("INSERT INTO t VALUES(?)", (i,))
reader = (
    "import sqlite3, sys\\nfor _ in range(200):\\n"
    " db = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True, timeout=5)\\n"
    " db.execute('SELECT count(*) FROM t').fetchone()\\n db.close()\\n"
)
other = subprocess.Popen([sys.executable, "-c", reader, str(path)])
loops = wrong = 0
rows = 2000
while other.poll() is None or loops == 0:
    g.execute("BEGIN IMMEDIATE")
    g.execute("INSERT INTO t VALUES(?)", (rows,))
    g.execute("COMMIT")
    rows += 1
    wrong += g.execute("SELECT count(*) FROM t").fetchone()[0] != rows
    loops += 1
g.close()
found = sqlite3.connect(path).execute("SELECT count(*) FROM t").fetchone()[0]
print(loops, wrong, other.returncode, found, rows, flush=True)
"""


def test_the_immutable_check_keeps_sqlites_locks_against_another_process(tmp_path: Path) -> None:
    """The check for an immutable ``-shm`` opened and closed that file before each statement, and
    closing any descriptor of a file drops every POSIX lock the process holds on it: SQLite's
    cross-process locks on the ``-shm`` were gone, and another process's read-only open (doctor
    while the daemon runs) rebuilt the shared memory under the writer's mapping: the writer died
    of SIGBUS or read "database disk image is malformed" (a damage word), in each of 6 runs.
    Asked by path now: the writer and the reader both run to their end, every row there."""
    import sys

    path = tmp_path / "m.sqlite"
    cwd = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", _SHARED_WITH_A_READER, str(path)],
        capture_output=True, text=True, timeout=300, check=False, cwd=cwd,
    )  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-2000:])
    loops, wrong, reader, found, rows = map(int, done.stdout.split())
    assert loops > 0 and wrong == 0 and reader == 0, done.stdout
    assert found == rows, done.stdout


def test_the_index_lock_holds_in_an_immutable_index_folder(tmp_path: Path) -> None:
    """An index folder made immutable whole (``chattr -R +i``): the lock file cannot be opened
    for writing, and the start exited 5 ("the home cannot be used") before it could serve the
    index read-only. The lock is taken on the file opened for reading; a second holder is refused."""
    from sidecar.contracts.errors import DaemonRunningError
    from sidecar.daemon.process import IndexLock

    index = tmp_path / "index"
    first = IndexLock(index)
    first.acquire()
    first.release()
    with _immutable(index):
        lock = IndexLock(index)
        lock.acquire()
        try:
            with pytest.raises(DaemonRunningError):
                IndexLock(index).acquire()
        finally:
            lock.release()


def test_an_immutable_index_folder_without_a_lock_file_says_permission_denied(tmp_path: Path) -> None:
    """The same folder with no lock file in it (a cleaner removed it, a first start): the start
    said "….lock: No such file or directory", the wrong cause. The denial is said."""
    from sidecar.daemon.process import IndexLock

    index = tmp_path / "index"
    index.mkdir()
    with _immutable(index), pytest.raises(PermissionError) as err:
        IndexLock(index).acquire()
    assert err.value.filename == str(index / ".lock")


def test_a_manifest_whose_commits_are_all_in_its_log_is_read_read_only(tmp_path: Path) -> None:
    """A manifest killed before its first checkpoint holds every commit in its -wal, its file's
    header saying schema 0: the read-only start (a full disk, an immutable folder) refused it as
    "schema 0 … an upgrade writes" and exited 5. Its schema is asked through the log."""
    import sys

    from sidecar.stores.manifest import Manifest

    path = tmp_path / "manifest.sqlite"
    killed = (
        "import os, sys\nfrom pathlib import Path\nfrom sidecar.stores.manifest import Manifest\n"
        "m = Manifest(Path(sys.argv[1]))\nm.set_meta('probe', 'kept')\nos._exit(0)\n"
    )
    cwd = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", killed, str(path)], check=True, cwd=cwd, timeout=120)
    assert Path(f"{path}-wal").stat().st_size > 0
    m = Manifest(path, read_only=True)
    try:
        assert m.get_meta("probe") == "kept"
    finally:
        m.close()


def test_a_start_that_cannot_even_read_the_index_serves_words_and_resumes_by_itself(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start whose keyword index cannot be opened at all for want of permission (immutable:
    Tantivy writes its lock file even to read): the daemon exited 5, status had nothing to say.
    It serves: every request is answered "the index cannot be read: permission denied: <path>"
    with what to do (health with a record saying so: status exited 7 with no record), and once
    the folder may be written the switch to writable succeeds, no restart. Nothing is moved
    aside."""

    from sidecar.contracts.errors import SidecarError
    from sidecar.contracts.protocol import Request

    _swept_lighthouse(make_cfg, vault)
    with _daemon_holding_the_lock(make_cfg, vault, monkeypatch) as (d, cfg):
        with _immutable(cfg.index_dir / "bm25"):
            d.startup()
            dispatch = d._dispatch
            assert dispatch is not None
            with pytest.raises(SidecarError) as err:
                dispatch.dispatch(Request("search", {"query": "lighthouse"}, agent="ops"))
            health = dispatch.dispatch(Request("health", {}, agent="ops"))
            assert health["index"]["state"] == "refusing" and health["pid"] == os.getpid(), health
            for said in (str(err.value), health["refusing"], health["problems"]["active"][0]["error"]):
                assert said.startswith("the index cannot be read: "), said
                assert "permission denied: " in said and str(cfg.index_dir / "bm25") in said, said
                assert "chattr -R -i" in said and "resumes by itself" in said, said
            assert d._switch_to_writable() is False  # still refused: refusing again
        assert d._switch_to_writable() is True
        hits = d._dispatch.dispatch(Request("search", {"query": "lighthouse keeper"}, agent="ops"))
        assert hits["hits"]
        assert not list(cfg.index_dir.glob("*.broken-*"))


def test_a_start_that_cannot_read_the_index_saves_memory_writes_in_a_writable_inbox(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same start (the keyword index immutable: nothing can be read) refused memory writes
    too, "the index cannot be read", although the agent's inbox could be written: an agent lost
    them. Written, edited and deleted in the inbox (``searchable: false``, saying why, ``previous``
    kept as the normal path does, one warning for a delete), listed from the inbox, indexed once
    the index can be read; an agent with no inbox yet gets one; other requests are still refused."""
    import time

    from sidecar.contracts.errors import SidecarError
    from sidecar.contracts.protocol import Request

    _swept_lighthouse(make_cfg, vault)
    with _daemon_holding_the_lock(make_cfg, vault, monkeypatch) as (d, cfg):
        d._make_agents_folder()  # as the daemon's run does before its start
        with _immutable(cfg.index_dir / "bm25"):
            d.startup()
            dispatch = d._dispatch
            assert dispatch is not None

            def ask(op: str, **params: Any) -> dict[str, Any]:
                return dispatch.dispatch(Request(op, params, agent="ops"))

            made = ask("write", slug="canoe", content="# Canoe\n\nThe zeppelin canoe.\n")
            assert made["created"] and made["searchable"] is False, made
            assert "saved, but not searchable yet: the index cannot be read: " in made["warning"], made
            edited = ask("edit", slug="canoe", content="# Canoe\n\nThe zeppelin canoe, painted.\n")
            assert edited["action"] == "updated" and edited["searchable"] is False, edited
            assert Path(edited["previous"]).is_file(), edited  # the replaced text, kept in .trash
            ask("write", slug="old", content="# Old\n\nGone soon.\n")
            gone = ask("delete", slug="old")
            assert gone["deleted"] and "still found by search" in gone["warning"], gone
            assert gone["warning"].count("the index cannot be read") == 1, gone
            assert "indexed" not in gone["warning"], gone  # a deletion is not indexed
            listed = ask("list")
            assert [n["reference"] for n in listed["notes"]] == ["memory/canoe"], listed
            assert listed["notes"][0]["indexed"] is False, listed
            first = dispatch.dispatch(  # an agent with no inbox yet: its first write makes it
                Request("write", {"slug": "hello", "content": "# Hello\n\nA new agent.\n"}, agent="newcomer")
            )
            assert first["created"] and (cfg.agents_dir / "newcomer" / "memory" / "hello.md").is_file()
            assert d._refusing("again").inbox is d._refusing("once more").inbox  # one per daemon
            with pytest.raises(SidecarError, match="the index cannot be read: "):
                ask("search", query="zeppelin")
        inbox = cfg.agents_dir / "ops" / "memory"
        assert "painted" in (inbox / "canoe.md").read_text()
        assert not (inbox / "old.md").exists()
        assert d._switch_to_writable() is True
        deadline = time.monotonic() + 60  # the catch-up sweep, in its thread

        def found() -> set[str]:
            hits = d._dispatch.dispatch(Request("search", {"query": "zeppelin painted"}, agent="ops"))
            return {hit["reference"] for hit in hits["hits"]}

        while "memory/canoe" not in found():
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_doctor_of_a_daemon_refusing_an_unreadable_index_says_its_words_not_restart(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """doctor of a daemon that answers every request refusing, its index unreadable: it said
    "restart the daemon" (which changes nothing) and took the daemon for another one holding the
    index. It shows the daemon's words, which say what to do, and no second daemon."""
    from sidecar.clients.doctor import check_daemon
    from sidecar.daemon import compose
    from sidecar.daemon.readonly import Refusing, unreadable_words
    from tests import in_process

    denied = PermissionError(errno.EACCES, "Permission denied", "/x/index/bm25")
    real = compose.build_server
    monkeypatch.setattr(
        in_process, "build_server", lambda cfg, _h: real(cfg, Refusing(unreadable_words(denied)))
    )
    server = serve_in_process()
    socket, other, health = check_daemon(server.cfg)
    assert health is None and not socket.ok
    assert "refusing: the index cannot be read: " in socket.verdict and "chattr -R -i" in socket.verdict
    assert socket.todo == "" and other.ok, (socket, other)


def test_status_and_doctor_of_a_daemon_refusing_an_unreadable_index_read_its_record(
    make_cfg: Any, vault: Path
) -> None:
    """The health record of the cannot-read state (``InboxOnly.health``): status renders it (it
    exited 7 with the refusal's words, no record), doctor says "refusing" with its words."""
    import time

    from sidecar.clients.cli_render import render_status
    from sidecar.contracts.protocol import Request
    from sidecar.daemon.readonly import InboxOnly, Refusing, unreadable_words

    cfg = make_cfg(vault)
    why = unreadable_words(PermissionError(errno.EPERM, "Operation not permitted", "/x/index/bm25"))
    health = Refusing(why, InboxOnly(cfg, lambda _agent: True, time.time())).dispatch(Request("health", {}))
    said = render_status(health)
    assert "Index: refusing: the index cannot be read: " in said and "chattr -R -i" in said, said
    assert health["problems"]["active"][0]["area"] == "index", health


def test_the_summary_and_memory_status_of_a_daemon_refusing_an_unreadable_index_say_its_words(
    make_cfg: Any, vault: Path
) -> None:
    """The cannot-read record (``InboxOnly.health``) has no embedder and no counters: the terminal
    summary of `sidecar serve` died of a KeyError on it, and memory_status called it "an answer
    this shim cannot read". Both say the refusal's words (what to do included)."""
    import time

    import jsonschema

    from sidecar.clients.foreground import Summary
    from sidecar.clients.mcp_texts import status_of
    from sidecar.clients.mcp_tools import TOOLS
    from sidecar.contracts.protocol import Request
    from sidecar.daemon.readonly import InboxOnly, Refusing, unreadable_words

    cfg = make_cfg(vault)
    why = unreadable_words(PermissionError(errno.EPERM, "Operation not permitted", "/x/index/bm25"))
    health = Refusing(why, InboxOnly(cfg, lambda _agent: True, time.time())).dispatch(Request("health", {}))
    summary = Summary()
    said = summary.lines(health)
    assert any(line.startswith("index: refusing: the index cannot be read: ") for line in said), said
    assert "chattr -R -i" in "\n".join(said), said
    assert summary.lines(health) == []  # said once
    status = status_of(health, "ops")
    assert status["daemon"] == "running" and status["refusing"] == why, status
    assert "chattr -R -i" in status["message"] and status["message"].count(why) == 1, status
    schema = next(t["outputSchema"] for t in TOOLS if t["name"] == "memory_status")
    jsonschema.validate(status, schema)


def test_the_switch_from_a_refusing_index_does_not_say_the_disk_has_room(make_cfg: Any, vault: Path) -> None:
    """While a daemon refusing an unreadable index (a permission, an immutable flag) reopens it,
    health's active index problem said "the disk has room again": false for a permission. It says
    the index may be written again, and the record keeps the refusing shape."""
    import time

    from sidecar.contracts.protocol import Request
    from sidecar.daemon.readonly import InboxOnly, Refusing, SwitchingHealth, unreadable_words

    cfg = make_cfg(vault)
    why = unreadable_words(PermissionError(errno.EPERM, "Operation not permitted", "/x/index/bm25"))
    health = Refusing(why, InboxOnly(cfg, lambda _agent: True, time.time())).dispatch(Request("health", {}))
    during = SwitchingHealth(health).dispatch(Request("health", {}))
    [problem] = [p for p in during["problems"]["active"] if p["area"] == "index"]
    assert problem["error"].startswith("switching to writable: the index may be written again"), problem
    assert "disk" not in problem["error"], problem
