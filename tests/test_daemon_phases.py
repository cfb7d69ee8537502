"""Commands in a daemon's first and last seconds say what is true: the daemon states its phase in
its index lock file (starting, serving, stopping, stopped), and clients read it when its socket
does not answer. Real daemons, paused in their start or their stop by SIGSTOP (what a loaded
machine or a debugger does to a process), real CLI processes."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import DaemonRunningError, ExitCode
from sidecar.runtime import lockstate
from tests.conftest import write


def _lock_text(d: Any) -> str:
    try:
        return (d.home / "index" / ".lock").read_text()
    except OSError:
        return ""


def _paused_when(d: Any, ready: Callable[[Any], bool], timeout: float = 120) -> None:
    """SIGSTOP the daemon as soon as ``ready(d)``; the process stays there."""
    deadline = time.monotonic() + timeout
    while not ready(d):
        assert d.proc.poll() is None, d.log.read_text()[-3000:]
        assert time.monotonic() < deadline, (_lock_text(d), d.log.read_text()[-3000:])
        time.sleep(0.002)
    os.kill(d.pid, signal.SIGSTOP)


def _paused_in(d: Any, phase: str) -> None:
    """SIGSTOP the daemon as soon as its lock file says ``phase``."""
    _paused_when(d, lambda d: f" {phase} since " in _lock_text(d))


def _cli(d: Any, *args: str, env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen[str]:
    env = {**d.env, "SIDECAR_HOME": str(d.home), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "sidecar", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
        **kw,
    )


def _run(d: Any, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = _cli(d, *args, env=env)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def _started_paused(daemon_factory: Any, tmp_path: Path) -> Any:
    """A keyword-only daemon paused in its start (its lock says starting)."""
    vault = tmp_path / "vault"
    write(vault / "Lighthouse.md", "# Lighthouse\n\nThe lighthouse keeper rows out at dawn.\n")
    return _paused_starting(daemon_factory, vault, "home", lambda d: " starting since " in _lock_text(d))


def _paused_starting(daemon_factory: Any, vault: Path, name: str, ready: Callable[[Any], bool]) -> Any:
    """A keyword-only daemon paused in its start once ``ready(d)``. A start that got past its
    starting phase before the pause landed (a fast machine) is stopped and made again."""
    for attempt in range(5):
        d = daemon_factory(vault, name=f"{name}{attempt}", keyword_only=True)
        d.start(wait=None)
        _paused_when(d, ready)
        if " starting since " in _lock_text(d):
            return d
        os.kill(d.pid, signal.SIGCONT)
        assert d.stop() == 0
    raise AssertionError("every start got past its starting phase before it was paused")


def _hook_said_and_search_waiting(d: Any, query: str, timeout: int) -> subprocess.Popen[str]:
    """The prompt hook, run while the daemon is paused in its start, says it is starting at once
    (it waits for nothing); a search run then says it waits, bounded by its own ``--timeout``:
    the search, still waiting (the caller lets the daemon go on, then reads its answer)."""
    code, out, err = _run(d, "recall", query, "--agent", "ops", "--timeout", "100")
    assert code == ExitCode.NOT_RUNNING, (out, err)
    assert f"the daemon (pid {d.pid}) is starting" in err and "waiting" not in err, err
    search = _cli(d, "search", query, "--timeout", str(timeout))
    assert search.stderr is not None
    first = search.stderr.readline()
    assert f"the daemon (pid {d.pid}) is starting" in first and f"waiting up to {timeout} s" in first, first
    return search


def test_a_start_is_said_starting_the_hook_does_not_wait_and_a_search_waits_for_it(
    daemon_factory: Any, tmp_path: Path
) -> None:
    """While a daemon starts (it holds the index, its socket does not answer yet): status said
    "not running … Start it" or that one "started with another socket" holds the index, a second
    serve "already serving", a search "Start it". Now status says starting with its pid, the
    second serve names the phase and the pid, the recall prompt hook says it at once (it waits for
    nothing), and a search waits for the start and is answered."""
    d = _started_paused(daemon_factory, tmp_path)
    try:
        code, out, err = _run(d, "status")
        assert code == ExitCode.NOT_RUNNING, (out, err)
        assert out.startswith(f"sidecar is starting (pid {d.pid}), since "), out
        assert "Start it" not in out and "another socket" not in out and "already serving" not in out
        code, out, err = _run(d, "status", "--json")
        said = json.loads(out)
        assert said["running"] is False and said["error"]["code"] == "starting", said
        assert said["lock"]["phase"] == "starting" and said["lock"]["pid"] == d.pid, said

        second = subprocess.run(
            [*d.cmd()], capture_output=True, text=True, timeout=120, env=d.env, check=False
        )
        assert second.returncode == ExitCode.SOCKET_IN_USE, second.stderr
        # Paused before its socket was bound the daemon is named by its home; after (a loaded
        # machine gets that far before the pause lands), by its socket, with the start's step.
        said = second.stderr
        assert f"another sidecar daemon (pid {d.pid}) is starting " in said and str(d.home) in said, said

        # The daemon check says it, not a hung disk. Doctor's looks are bounded by the probe
        # timeout (10 s); a doctor starved past it by a loaded machine says the home hung and does
        # not read the lock (seen once beside parallel tests). The phase is tested here, not that.
        code, out, err = _run(d, "doctor", env={"SIDECAR_WATCH_PROBE_TIMEOUT_SECONDS": "120"})
        assert f"the daemon (pid {d.pid}) is starting" in out and "hung" not in out, (out, err)
        assert "started with another" not in out, out

        # The prompt hook: answered while the daemon is still paused, without a wait; a search's
        # wait is bounded by its own --timeout (it was 30 s at most, whatever the flag said).
        search = _hook_said_and_search_waiting(d, "lighthouse keeper", 45)
        assert " starting since " in _lock_text(d)  # still paused: nothing was waited for
    finally:
        os.kill(d.pid, signal.SIGCONT)
    out, err = search.communicate(timeout=120)
    assert search.returncode == 0, (out, err)  # answered by the daemon (maybe before its first sweep)
    assert " serving since " in _lock_text(d)
    code, out, err = _run(d, "status")
    assert code == 0 and "running since" in out, (out, err)
    assert d.stop() == 0
    assert " stopped since " in _lock_text(d)


def test_a_stop_is_said_stopping_and_not_waited_for(daemon_factory: Any, vault: Path) -> None:
    """A daemon closing its stores after its socket went: commands said "not running … Start it"
    (a second daemon then exited 4, the index held). Now status and a search say it is stopping,
    at once, and the daemon stops as before."""
    d = daemon_factory(vault, keyword_only=True).start()
    d.proc.send_signal(signal.SIGTERM)
    _paused_in(d, "stopping")
    try:
        code, out, err = _run(d, "status")
        assert code == ExitCode.NOT_RUNNING, (out, err)
        assert out.startswith(f"sidecar is stopping (pid {d.pid}), since "), out
        code, out, err = _run(d, "search", "spark plugs")
        assert code == ExitCode.NOT_RUNNING, (out, err)
        assert f"the daemon (pid {d.pid}) is stopping" in err and "waiting" not in err, err
        assert "Start it with" not in err, err
    finally:
        os.kill(d.pid, signal.SIGCONT)
    assert d.proc.wait(timeout=120) == 0
    code, out, _err = _run(d, "status")
    assert code == ExitCode.NOT_RUNNING and "stale" not in out and "Start it with" in out, out


def test_a_daemon_killed_leaves_a_lock_said_stale(daemon_factory: Any, vault: Path) -> None:
    """kill -9: the lock file still names the daemon, serving. Status and a search say it is a
    stale lock of a daemon that ended without stopping, and how to start one; nothing waits."""
    d = daemon_factory(vault, keyword_only=True).start()
    pid = d.pid
    d.proc.kill()
    d.proc.wait()
    code, out, err = _run(d, "status")
    assert code == ExitCode.NOT_RUNNING, (out, err)
    assert f"the index lock names pid {pid}, said serving when last written " in out, out
    assert "stale lock" in out and "since" not in out.split("stale lock")[0], out
    assert "Start it with" in out, out
    code, out, err = _run(d, "status", "--json")
    assert json.loads(out)["lock"] == {"pid": pid, "held": False, "stale": True}, out
    code, out, err = _run(d, "search", "spark plugs")
    assert code == ExitCode.NOT_RUNNING and "stale lock" in err and "waiting" not in err, err
    d.start()  # the next start takes the lock as after any crash
    assert f"pid {d.pid} serving since " in _lock_text(d)


def test_the_record_is_read_whole_or_read_again(tmp_path: Path) -> None:
    """The record is rewritten in place (the lock is on the file: no rename): a reader that meets
    a write half done (the checksum fails) reads again; an older daemon's file ("pid N") and a
    `sidecar index` run's are read as before."""
    text = lockstate.record_text(42, lockstate.STARTING, 1000.0, "opening (the) index")
    assert len(text.encode()) == lockstate.RECORD_BYTES
    got = lockstate.parse(text)
    assert got is not None and (got.pid, got.phase, got.since) == (42, "starting", 1000.0)
    assert got.step == "opening the index"
    torn = text.replace("starting", "serving ", 1)  # a reader caught between two writes
    assert lockstate.parse(torn) is None
    assert lockstate.parse("pid 17\n") == lockstate.LockRecord("pid 17", 17)
    run = lockstate.parse("`sidecar index` (pid 18)")
    assert run is not None and run.who == "`sidecar index` (pid 18)" and run.phase is None

    lock = tmp_path / ".lock"
    with lock.open("w+") as fh:
        lockstate.write_record(fh, lockstate.record_text(os.getpid(), lockstate.SERVING, time.time()))
        lockstate.write_record(fh, "`sidecar index` (pid 9)")  # shorter words: padded, no tail left
        assert lockstate.read_record(fh).who == "`sidecar index` (pid 9)"


def test_a_lock_whose_file_names_an_earlier_daemon_names_its_holder(tmp_path: Path) -> None:
    """A daemon on an index it may not write (an immutable folder: read-only start) takes the lock
    on a file it cannot write, which still names the daemon before it, stopped: that pid was named
    as the holder. The holder the system's lock table names is named instead."""
    from sidecar.clients.lockholder import lock_holder
    from sidecar.config import load_config

    cfg = load_config(flags={"home": str(tmp_path / "h")}, env={})
    cfg.index_dir.mkdir(parents=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    old = int(dead.stdout)
    (cfg.index_dir / ".lock").write_text(lockstate.record_text(old, lockstate.STOPPED, time.time() - 60))
    with (cfg.index_dir / ".lock").open("r") as fh:  # as IndexLock opens an unwritable one
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert lock_holder(cfg) == f"pid {os.getpid()}"
        from sidecar.clients.lockholder import phase_words

        view = lockstate.look(cfg.index_dir / ".lock")
        assert view is not None and not view.starting
        words = phase_words(view)
        assert words is not None and f"held by pid {os.getpid()}" in words and f"pid {old}" in words


def test_a_second_daemon_is_refused_with_the_phase_and_pid(tmp_path: Path) -> None:
    """The refusal of a second daemon names the first one's phase and pid (it said "already
    serving" while the first one was starting or stopping)."""
    from sidecar.daemon.process import IndexLock

    first, me = IndexLock(tmp_path / "index"), os.getpid()
    first.acquire()
    try:
        first.phase(lockstate.STARTING, "opening the index")
        with pytest.raises(DaemonRunningError, match=rf"\(pid {me}\) is starting on .*opening the index"):
            IndexLock(tmp_path / "index").acquire()
        first.phase(lockstate.SERVING)
        with pytest.raises(DaemonRunningError, match=rf"already serving .* in use by pid {me}\)"):
            IndexLock(tmp_path / "index").acquire()
        first.phase(lockstate.STOPPING)
        with pytest.raises(DaemonRunningError, match=rf"\(pid {me}\) is stopping on .*try again then"):
            IndexLock(tmp_path / "index").acquire()
    finally:
        first.release()
    assert " stopped since " in (tmp_path / "index" / ".lock").read_text()


@pytest.mark.parametrize(
    ("command", "waits"), [("recall", False), ("mcp", False), ("status", False), ("search", True)]
)
def test_the_mcp_shims_calls_say_a_start_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str, waits: bool
) -> None:
    """The MCP shim's calls and the recall hook must answer fast: a daemon starting (its lock
    says so, held by a live pid: here this process's, as a daemon's own) is said at once, not
    waited for; a search waits. The lock is real, the socket a path nothing listens on."""
    from sidecar.clients import cli, client, mcp_calls
    from sidecar.clients.mcp_calls import ToolCalls, ToolError
    from sidecar.config import load_config
    from sidecar.daemon.process import IndexLock

    cfg = load_config(flags={"home": str(tmp_path / "h"), "socket": str(tmp_path / "s.sock")}, env={})
    lock = IndexLock(cfg.index_dir)
    lock.acquire()
    said: list[str] = []
    try:
        lock.phase(lockstate.STARTING, "opening the index")
        cli._watch_starts(command, cfg)
        assert client._watch is not None and getattr(client._watch, "wait", None) is waits
        if waits:  # bounded by the call's own timeout
            monkeypatch.setattr(mcp_calls, "STATUS_TIMEOUT", 0.3)
            client._watch.say = said.append  # type: ignore[attr-defined]
        calls = ToolCalls(cfg.socket_path, "ops")
        with pytest.raises(ToolError) as err:
            calls.tools["memory_status"]({})
        starting = "is still starting after 0.3 s of waiting" if waits else "is starting"
        assert f"the daemon (pid {os.getpid()}) {starting}" in str(err.value), err.value
        assert ("still starting" in str(err.value)) is waits, err.value
        assert bool(said) is waits, said
    finally:
        cli._watch_starts(None, cfg)
        lock.release()


def test_a_restart_during_the_wait_is_waited_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A daemon restarting while a command waits for its start (it stops, another takes the lock a
    moment later and starts): the wait ended at the free lock and the command said "not running
    … Start it" (a second daemon would have exited 4). The wait goes on, within its bound, until
    the next one serves. Real locks, taken and let go by this process as two daemons would."""
    import threading

    from sidecar.clients.lockholder import StartWatch
    from sidecar.config import load_config
    from sidecar.daemon.process import IndexLock

    cfg = load_config(flags={"home": str(tmp_path / "h")}, env={})
    first = IndexLock(cfg.index_dir)
    first.acquire()
    first.phase(lockstate.STARTING, "opening the index")
    served = threading.Event()

    def restart() -> None:
        time.sleep(0.3)
        first.release()  # says stopped
        _next_daemon(cfg, served)

    said: list[str] = []
    thread = threading.Thread(target=restart)
    thread.start()
    try:
        assert StartWatch(cfg, wait=True, say=said.append).absent(60.0)
        assert served.is_set(), _lock_text_of(cfg.index_dir)
        assert said and "is starting" in said[0], said
    finally:
        thread.join()


def _next_daemon(cfg: Any, served: Any) -> None:
    """A restart's next daemon, after the lock was let go: the lock free a moment (a restart's
    gap), then taken, starting, serving (``served`` set), let go."""
    from sidecar.daemon.process import IndexLock

    time.sleep(0.1)
    second = IndexLock(cfg.index_dir)
    second.acquire()
    time.sleep(0.3)
    second.phase(lockstate.SERVING)
    served.set()
    time.sleep(0.5)
    second.release()


def _lock_text_of(index: Path) -> str:
    return (index / ".lock").read_text()


def test_a_read_only_start_is_named_by_its_own_pid(daemon_factory: Any, vault: Path, tmp_path: Path) -> None:
    """A daemon started on an immutable index (chattr -R +i: it serves read-only) takes the lock on
    a file it cannot write, which still names the daemon before it: that dead pid was named as
    the holder. The holder the system's lock table names is, and nothing waits on the old record.
    Once the index may be written, the file names the daemon."""
    from sidecar.clients.lockholder import lock_holder, lock_view, phase_words
    from tests.test_permissions import _immutable

    d = daemon_factory(vault, keyword_only=True).start()
    before = d.pid
    assert d.stop() == 0
    with _immutable(d.cfg.index_dir):
        d.start(wait=None)
        d.wait_for(lambda h: h.get("pid") == d.pid, 120)  # it answers (read-only or refusing)
        assert f"pid {before} stopped since " in _lock_text(d)  # the file it could not write
        assert lock_holder(d.cfg) == f"pid {d.pid}"
        view = lock_view(d.cfg)
        assert view is not None and not view.starting and not view.stale
        words = phase_words(view)
        assert words is not None and f"held by pid {d.pid}" in words and f"pid {before}" in words
    # The flag lifted: the daemon switches to writable, and its lock file names it from then on
    # (it named the earlier daemon until the stop: status, a second serve).
    deadline = time.monotonic() + 120
    while f"pid {d.pid} serving since " not in _lock_text(d):
        assert d.proc.poll() is None and time.monotonic() < deadline, (
            _lock_text(d),
            d.log.read_text()[-3000:],
        )
        time.sleep(0.1)
    assert lock_holder(d.cfg) == f"pid {d.pid}"
    # A second serve on another socket meets the lock, not this daemon's socket.
    other = [*d.cmd(), "--socket", str(tmp_path / "other.sock")]
    second = subprocess.run(other, capture_output=True, text=True, timeout=120, env=d.env, check=False)
    assert second.returncode == ExitCode.SOCKET_IN_USE, second.stderr
    assert f"in use by pid {d.pid})" in second.stderr and f"pid {before}" not in second.stderr, second.stderr
    assert d.stop() == 0
    assert f"pid {d.pid} stopped since " in _lock_text(d)


# Loaded into the daemon (``sitecustomize`` on its PYTHONPATH): once the module that starts it is
# imported, its ``bind_socket`` is wrapped to stop the process (SIGSTOP) right after the socket
# is bound and listening, before the stores open. A pause at that point by the test's own clock
# missed it on a loaded machine (the window is short).
_PAUSE_AFTER_BIND = """
import importlib.util, os, signal, sys

class _PauseAfterBind:
    def find_spec(self, name, path=None, target=None):
        if name != "sidecar.daemon.lifecycle":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            bind = module.bind_socket

            def bind_then_pause(path):
                sock = bind(path)
                os.kill(os.getpid(), signal.SIGSTOP)
                return sock

            module.bind_socket = bind_then_pause

        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, _PauseAfterBind())
"""


def _paused_after_its_bind(daemon_factory: Any, vault: Path, tmp_path: Path) -> Any:
    """A keyword-only daemon stopped by itself once its socket listens (``_PAUSE_AFTER_BIND``);
    the commands the test runs then load no such hook."""
    hook = tmp_path / "pause-after-bind"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_PAUSE_AFTER_BIND)
    d = daemon_factory(vault, name="bound", keyword_only=True, env={"PYTHONPATH": str(hook)})
    d.start(wait=None)
    deadline = time.monotonic() + 120
    while _process_state(d.pid) != "T":
        assert d.proc.poll() is None, d.log.read_text()[-3000:]
        assert time.monotonic() < deadline, d.log.read_text()[-3000:]
        time.sleep(0.01)
    del d.env["PYTHONPATH"]
    return d


def _process_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat (``T``: stopped by a signal)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0]


def test_a_start_paused_after_its_bind_is_said_starting_not_serving(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """Paused once its socket is bound, before it answers (its stores opening): the socket takes
    connections into its queue and answers nothing. A second serve found a daemon on the socket
    and said "already serving"; status would have waited in that queue. Both say starting."""
    d = _paused_after_its_bind(daemon_factory, vault, tmp_path)
    assert "(opening the index)" in _lock_text(d) and d.socket.exists()
    try:
        second = subprocess.run(d.cmd(), capture_output=True, text=True, timeout=120, env=d.env, check=False)
        assert second.returncode == ExitCode.SOCKET_IN_USE, second.stderr
        assert f"another sidecar daemon (pid {d.pid}) is starting since " in second.stderr, second.stderr
        assert "already serving" not in second.stderr, second.stderr
        code, out, err = _run(d, "status")
        assert code == ExitCode.NOT_RUNNING and out.startswith(
            f"sidecar is starting (pid {d.pid}), since "
        ), (
            out,
            err,
        )
        # Connected (the socket is bound), no answer: the hook looks at the lock and says it.
        search = _hook_said_and_search_waiting(d, "spark plugs", 100)
    finally:
        os.kill(d.pid, signal.SIGCONT)
    out, err = search.communicate(timeout=120)
    assert search.returncode == 0, (out, err)  # its request waited in the queue and was answered
    d.wait_for(lambda h: h["pid"] == d.pid, 120)
    assert d.stop() == 0


def test_a_serving_daemon_is_served_whatever_its_lock_file_says(daemon_factory: Any, vault: Path) -> None:
    """The socket is tried first; the lock file is read only when it does not answer. A record
    that says starting while the daemon serves (a write of ``serving`` that failed, a step run
    again by a switch to writable) had the prompt hook and every MCP call refused ("is starting")
    and searches wait, for the daemon's life."""
    d = daemon_factory(vault, keyword_only=True).start()
    lock = d.home / "index" / ".lock"
    fd = os.open(lock, os.O_WRONLY)
    try:
        os.pwrite(
            fd, lockstate.record_text(d.pid, lockstate.STARTING, time.time(), "catching up").encode(), 0
        )
    finally:
        os.close(fd)
    assert f"pid {d.pid} starting since " in _lock_text(d)
    code, out, err = _run(d, "recall", "spark plugs", "--agent", "ops")
    assert code == 0 and "is starting" not in err, (out, err)
    code, out, err = _run(d, "search", "spark plugs")
    assert code == 0 and "waiting" not in err, (out, err)
    code, out, err = _run(d, "status")
    assert code == 0 and "running since" in out, (out, err)
    assert d.stop() == 0


def test_a_stop_asked_in_the_start_says_stopped(daemon_factory: Any, tmp_path: Path) -> None:
    """SIGTERM (what a service manager's stop or restart sends) to a daemon still starting: it
    killed the process before its handlers were installed, so its lock file kept saying starting
    for a daemon gone (said a stale lock "killed or crashed"). It stops as any stop does: exit 0,
    the record says stopped."""
    d = _started_paused(daemon_factory, tmp_path)
    try:
        d.proc.send_signal(signal.SIGTERM)
    finally:
        os.kill(d.pid, signal.SIGCONT)
    assert d.proc.wait(timeout=120) == 0, d.log.read_text()[-3000:]
    assert f"pid {d.pid} stopped since " in _lock_text(d), _lock_text(d)
    code, out, _err = _run(d, "status")
    assert code == ExitCode.NOT_RUNNING and "stale" not in out, out


def test_a_wait_looks_again_at_a_lock_whose_daemon_died(tmp_path: Path) -> None:
    """A start that ended without saying stopped (killed) and the next daemon taking the lock a
    moment later (a restart): the wait ended at the lock of the dead pid, the command said "stale
    … Start it" while the next one started. It looks again, within its bound."""
    import threading

    from sidecar.clients.lockholder import StartWatch
    from sidecar.config import load_config

    cfg = load_config(flags={"home": str(tmp_path / "h")}, env={})
    cfg.index_dir.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs
    path = cfg.index_dir / ".lock"
    fh = path.open("w+")
    fcntl.flock(fh, fcntl.LOCK_EX)
    lockstate.write_record(fh, lockstate.record_text(os.getpid(), lockstate.STARTING, time.time(), "opening"))
    served = threading.Event()

    def killed_then_restarted() -> None:
        time.sleep(0.3)
        lockstate.write_record(
            fh, lockstate.record_text(dead.pid, lockstate.STARTING, time.time(), "opening")
        )
        fh.close()  # let go as a killed process's lock is: the record says starting, its pid dead
        _next_daemon(cfg, served)

    thread = threading.Thread(target=killed_then_restarted)
    thread.start()
    try:
        assert StartWatch(cfg, wait=True, say=lambda _line: None).absent(60.0)
        assert served.is_set(), _lock_text_of(cfg.index_dir)
    finally:
        thread.join()


def test_a_look_at_the_lock_does_not_refuse_a_start(tmp_path: Path) -> None:
    """Clients look at the lock with a shared take let go at once; a start taking it in that
    moment was refused ("already serving … pid N", N a daemon stopped). It tries again."""
    import threading

    from sidecar.daemon.process import IndexLock

    index = tmp_path / "index"
    index.mkdir()
    (index / ".lock").write_text("")
    looker = (index / ".lock").open("r")
    fcntl.flock(looker, fcntl.LOCK_SH)
    threading.Timer(0.015, looker.close).start()
    lock = IndexLock(index)
    lock.acquire()
    lock.release()


def test_a_request_read_by_the_daemon_is_not_taken_for_a_start(tmp_path: Path) -> None:
    """An answer slow to come had the lock file decide; a request the daemon has read (a busy
    daemon, serving) is not one a start holds in its queue, whatever the lock file says."""
    import socket

    from sidecar.clients.client import _unread

    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(path))
    client.sendall(b'{"v": 1, "id": 1, "op": "health", "params": {}}\n')
    try:
        assert _unread(client)  # in the accept queue: what a start's socket holds
        peer, _ = server.accept()
        assert peer.recv(4096).endswith(b"\n")
        assert not _unread(client)
        peer.close()
    finally:
        client.close()
        server.close()


def test_a_lock_taken_read_only_names_its_holder_once_its_file_may_be_written(tmp_path: Path) -> None:
    """A lock taken on an immutable index cannot write its file, which names the daemon before
    it. Once the file may be written (the flag lifted: the switch to writable), its record names
    the daemon that holds the lock: a second serve and status named the earlier pid, or "a
    process its lock file does not name", until the daemon stopped."""
    from sidecar.clients.lockholder import lock_holder
    from sidecar.config import load_config
    from sidecar.daemon.process import IndexLock
    from tests.test_permissions import _immutable

    cfg = load_config(flags={"home": str(tmp_path / "h")}, env={})
    earlier = IndexLock(cfg.index_dir)
    earlier.acquire()
    earlier.release()  # "stopped": the record of the daemon before
    me = os.getpid()
    with _immutable(cfg.index_dir):
        lock = IndexLock(cfg.index_dir)
        lock.acquire()
        lock.phase(lockstate.SERVING)  # written nowhere while the file cannot be written
        assert " stopped since " in _lock_text_of(cfg.index_dir)
    try:
        lock.rewrite()  # what the switch to writable does
        assert f"pid {me} serving since " in _lock_text_of(cfg.index_dir)
        view = lockstate.look(cfg.index_dir / ".lock")
        assert view is not None and view.current and view.holder is None
        assert lock_holder(cfg) == f"pid {me}"
        with pytest.raises(DaemonRunningError, match=rf"already serving .* in use by pid {me}\)"):
            IndexLock(cfg.index_dir).acquire()
        lock.phase(lockstate.STOPPING)
        with pytest.raises(DaemonRunningError, match=rf"\(pid {me}\) is stopping on "):
            IndexLock(cfg.index_dir).acquire()
    finally:
        lock.release()
    assert f"pid {me} stopped since " in _lock_text_of(cfg.index_dir)


def test_the_switch_to_writable_never_writes_serving_over_a_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The switch to writable rewrites the record on its own thread while a stop may write
    `stopping` on the main one: the two writes took turns inside each other, so the file said
    `serving` after `stopping` and clients did not say the daemon was stopping."""
    import threading

    from sidecar.config import load_config
    from sidecar.daemon.process import IndexLock

    cfg = load_config(flags={"home": str(tmp_path / "h")}, env={})
    lock = IndexLock(cfg.index_dir)
    lock.acquire()
    lock.phase(lockstate.SERVING)
    inside, go_on = threading.Event(), threading.Event()
    write = lockstate.write_record

    def held_write(fh: Any, text: str) -> None:
        if threading.current_thread().name == "switch":
            inside.set()
            assert go_on.wait(30)
        write(fh, text)

    monkeypatch.setattr(lockstate, "write_record", held_write)
    switch = threading.Thread(target=lock.rewrite, name="switch")
    switch.start()
    try:
        assert inside.wait(30)  # the switch's write has its phase (serving) and is writing
        stop = threading.Thread(target=lock.phase, args=(lockstate.STOPPING,))
        stop.start()
        stop.join(0.5)  # the stop's write waits for the switch's (it went first before)
    finally:
        go_on.set()
        switch.join(30)
    stop.join(30)
    try:
        assert f"pid {os.getpid()} stopping since " in _lock_text_of(cfg.index_dir)
    finally:
        lock.release()


def test_what_the_lock_says_of_an_unanswered_request_comes_with_its_kind(tmp_path: Path) -> None:
    """One rule reads a daemon starting or stopping from its lock (``LockView.moving``): the
    client's look at an unanswered request gives the kind with the words, starting or stopping,
    and nothing for a daemon serving (it was the words of a start only, and a second look at
    the lock decided a stop)."""
    from sidecar.clients.lockholder import StartWatch
    from sidecar.config import load_config
    from sidecar.daemon.process import IndexLock

    cfg = load_config(flags={"home": str(tmp_path / "h")}, env={})
    lock, me = IndexLock(cfg.index_dir), os.getpid()
    lock.acquire()
    watch = StartWatch(cfg, wait=False)
    try:
        lock.phase(lockstate.STARTING, "opening the index")
        kind, words = watch.unanswered(5.0) or ("", "")
        assert kind == lockstate.STARTING and f"the daemon (pid {me}) is starting" in words, words
        lock.phase(lockstate.SERVING)
        assert watch.unanswered(5.0) is None
        lock.phase(lockstate.STOPPING)
        kind, words = watch.unanswered(5.0) or ("", "")
        assert kind == lockstate.STOPPING and f"the daemon (pid {me}) is stopping" in words, words
    finally:
        lock.release()
    assert watch.unanswered(5.0) is None  # stopped: nothing holds it


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGINT"])
def test_a_stop_signal_as_the_lock_is_taken_says_stopped(daemon_factory: Any, vault: Path, stop: str) -> None:
    """SIGTERM (a service manager's stop) or SIGINT (Ctrl-C) in the moment between the lock
    file's first write (``starting``) and the daemon holding the lock as its own: the start ended
    with nothing to write ``stopped``, and clients read a stale lock of a daemon "killed or
    crashed" (Ctrl-C's KeyboardInterrupt did so still after SIGTERM was held). The signal is
    delivered there (the process sends it to itself right after that write: no other way lands
    it in that moment); the daemon stops as any stop does: exit 0, the record says stopped."""
    d = daemon_factory(vault, keyword_only=True)
    d.home.mkdir(parents=True)
    argv = d.cmd()[d.cmd().index("serve") :]
    # SIGINT as a terminal's Python has it: a parallel test run's workers ignore it, the child
    # inherits that, and an ignored SIGINT is left ignored by the start (as it should be).
    script = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from sidecar.runtime import lockstate\n"
        "written = lockstate.write_record\n"
        "def write_then_stop(fh, text):\n"
        "    written(fh, text)\n"
        "    if ' starting since ' in text:\n"
        "        lockstate.write_record = written\n"
        f"        os.kill(os.getpid(), signal.{stop})\n"
        "lockstate.write_record = write_then_stop\n"
        "from sidecar.clients.cli import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env=d.env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert " stopped since " in _lock_text(d), (_lock_text(d), done.stderr[-3000:])
    assert "daemon_stop_in_start" in done.stderr, done.stderr[-3000:]
    code, out, _err = _run(d, "status")
    assert code == ExitCode.NOT_RUNNING and "stale" not in out, out


@dataclass
class _Stopping:
    """A home whose lock this process holds saying stopping (as a daemon's own), a socket bound
    at a short path whose requests the test answers or not, and a client of that home that does
    not wait: ``looked`` is set once it has looked at the lock."""

    cfg: Any
    server: Any
    looked: Any


@pytest.fixture
def stopping(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[_Stopping]:
    """``_Stopping``; parametrised by ``queue_asked`` False, the socket's send queue cannot be
    asked (``termios.TIOCOUTQ`` gone, as on macOS: the fallback)."""
    import socket
    import threading

    from sidecar.clients import client
    from sidecar.clients.lockholder import StartWatch
    from sidecar.config import load_config
    from sidecar.daemon.process import IndexLock

    if not request.param:
        monkeypatch.delattr(termios, "TIOCOUTQ")
    path = tmp_path / "s.sock"
    cfg = load_config(flags={"home": str(tmp_path / "h"), "socket": str(path)}, env={})
    lock = IndexLock(cfg.index_dir)
    lock.acquire()
    lock.phase(lockstate.STOPPING)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(4)
    watch = StartWatch(cfg, wait=False)
    looked = threading.Event()
    unanswered = watch.unanswered

    def look(timeout: float) -> tuple[str, str] | None:
        said = unanswered(timeout)
        looked.set()
        return said

    watch.unanswered = look  # type: ignore[method-assign]
    client.watch_starts(watch)
    try:
        yield _Stopping(cfg, server, looked)
    finally:
        client.watch_starts(None)
        server.close()
        lock.release()


_QUEUE_ASKED = pytest.mark.parametrize("stopping", [True, False], ids=["linux", "fallback"], indirect=True)


@_QUEUE_ASKED
def test_a_stopping_daemons_unread_request_is_said_stopping(stopping: _Stopping) -> None:
    """A request left in the queue of a daemon stopping is never read: said as a refused
    connection is (stopping), not waited for to the timeout. Where the socket's send queue cannot
    be asked (macOS: the fallback) it is said once the stop closes the socket."""
    import threading

    from sidecar.clients import client
    from sidecar.contracts.errors import DaemonNotRunningError

    closer = threading.Thread(target=lambda: stopping.looked.wait(60) and stopping.server.close())
    closer.start()
    try:
        with (
            pytest.raises(DaemonNotRunningError) as err,
            client.Client(stopping.cfg.socket_path, timeout=60) as c,
        ):
            c.call("health")
        assert f"the daemon (pid {os.getpid()}) is stopping" in str(err.value), err.value
    finally:
        closer.join()


@_QUEUE_ASKED
def test_a_request_a_stopping_daemon_read_is_answered(
    stopping: _Stopping, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop drains the requests it took up: one read before the stop, answered late, is waited
    for. Where the send queue cannot be asked (the fallback) it was given up on and said
    stopping, its answer lost."""
    import threading

    from sidecar.clients import client
    from sidecar.contracts.protocol import ok_frame

    asked = threading.Event()  # the client asked whether its request was read: its first wait over
    unread = client._unread

    def ask(sock: Any) -> bool | None:
        got = unread(sock)
        asked.set()
        return got

    monkeypatch.setattr(client, "_unread", ask)

    def drain() -> None:
        peer, _ = stopping.server.accept()
        with peer:
            assert peer.recv(4096).endswith(b"\n")
            asked.wait(60)  # answered late: after the client's first wait
            peer.sendall(ok_frame(1, {"drained": True}))

    thread = threading.Thread(target=drain)
    thread.start()
    try:
        with client.Client(stopping.cfg.socket_path, timeout=60) as c:
            assert c.call("health") == {"drained": True}
    finally:
        thread.join()
    # Where the queue can be asked, a request read is not looked up in the lock at all.
    assert stopping.looked.is_set() is (termios.__dict__.get("TIOCOUTQ") is None)


def test_a_stop_signal_ends_a_wait_for_the_lock(daemon_factory: Any, vault: Path, tmp_path: Path) -> None:
    """A stop signal is held while the lock is taken (``test_a_stop_signal_as_the_lock_is_taken_
    says_stopped``), but not through the service's wait for a `sidecar index` run between tries:
    the daemon stops at once (exit 0), the run's lock and record untouched."""
    import socket

    from sidecar.daemon.process import INDEX_RUN, IndexLock

    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)  # a service manager's notify socket
    sink.bind(str(tmp_path / "notify.sock"))
    d = daemon_factory(vault, keyword_only=True, env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
    held = IndexLock(d.home / "index", by=INDEX_RUN)
    held.acquire()
    try:
        d.start(wait=None)
        _paused_when(d, lambda d: "index_lock_wait" in d.log.read_text())  # in its wait
        d.proc.send_signal(signal.SIGTERM)  # delivered as it goes on
        os.kill(d.pid, signal.SIGCONT)
        assert d.proc.wait(timeout=60) == 0, d.log.read_text()[-3000:]
        assert _lock_text(d).startswith(f"{INDEX_RUN} (pid {os.getpid()})"), _lock_text(d)
    finally:
        held.release()
        sink.close()


def test_a_stop_signal_just_before_a_wait_between_lock_tries_ends_it_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop signal landing after the wait's look for a stop asked and before the wait began was
    only noted (the lock take holds stops back), and the 2 s wait ran out before the stop. Now the
    wait marks itself first and looks after: it ends at once, the sleep never begun. The signal's
    handler is run where a signal would land: at the wait's mark, on the main thread."""
    import inspect
    import signal as signals

    from sidecar.config import load_config
    from sidecar.daemon import lifecycle
    from sidecar.daemon.lifecycle import Daemon

    cfg = load_config(flags={"home": str(tmp_path / "h")}, env={})
    daemon = Daemon(cfg)
    slept: list[float] = []
    daemon._sleep = slept.append
    previous = signals.getsignal(signals.SIGTERM)
    daemon._stop_in_start()  # the start's handler
    handler = signals.getsignal(signals.SIGTERM)
    source, first = inspect.getsourcelines(Daemon._pause)
    mark = first + next(i for i, line in enumerate(source) if "self._pausing = True" in line)
    code = Daemon._pause.__code__

    def tracer(frame: Any, event: str, _arg: Any) -> Any:
        if frame.f_code is not code:
            return None
        if event == "line" and frame.f_lineno == mark:
            assert callable(handler)
            handler(signals.SIGTERM, frame)  # lands here: the stop is noted, as in the take
        return tracer

    try:
        with daemon._stops_held_back():
            sys.settrace(tracer)
            try:
                with pytest.raises(lifecycle._StopAsked):
                    daemon._pause(2.0)
            finally:
                sys.settrace(None)
            daemon._stop_waits = False  # asked and taken: the take's end raises nothing more
    finally:
        signals.signal(signals.SIGTERM, previous)
        daemon.notifier.close()
    assert slept == []


def test_an_ignored_sigint_stays_ignored_through_the_lock_take(tmp_path: Path) -> None:
    """A daemon started with SIGINT ignored (a background job of a shell, a launcher that sets
    it so): the lock take's hold of stop signals put the start's handler in for SIGINT too, and a
    SIGINT in that moment stopped it. Now an ignored SIGINT stays ignored through the take, and
    is ignored after it as before."""
    from sidecar.config import load_config
    from sidecar.daemon.lifecycle import Daemon

    daemon = Daemon(load_config(flags={"home": str(tmp_path / "h")}, env={}))
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with daemon._stops_held_back():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
        daemon.notifier.close()
