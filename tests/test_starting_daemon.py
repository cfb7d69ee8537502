"""A command run while a daemon starts (it holds the index, its socket does not answer yet) waits
for it and asks it, instead of saying another daemon serves or that none runs. A real daemon held
between its lock and its socket's bind (the one step made to wait for a file), real CLI processes."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write

# ``sidecar serve`` with its socket's bind made to wait for the file ``argv[1]`` (``.reached``
# beside it once the lock is held and the bind is next): the start's window, held open.
_GATED_SERVE = """
import sys, time
from pathlib import Path
from sidecar.daemon import lifecycle

gate = Path(sys.argv[1])
real = lifecycle.bind_socket

def gated(path):
    gate.with_suffix(".reached").touch()
    while not gate.exists():
        time.sleep(0.05)
    return real(path)

lifecycle.bind_socket = gated
from sidecar.clients.cli import main
sys.exit(main(sys.argv[2:]))
"""


def _wait_for(path: Path, d: Any) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert d.proc.poll() is None and time.monotonic() < deadline, d.log.read_text()[-3000:]
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("command", "answered"),
    [
        (("index",), "(through the daemon)"),
        (("status",), "running since"),
        (("search", "lighthouse keeper"), ""),  # answered (exit 0), maybe before the note is read
        # The note read from stdin before the connection: sent once the daemon answers, whole.
        (("memory", "write", "--agent", "ops", "plan"), ""),
    ],
)
def test_a_command_in_a_daemons_start_waits_for_it_and_asks_it(
    daemon_factory: Any, tmp_path: Path, command: tuple[str, ...], answered: str
) -> None:
    """`sidecar index` in the first seconds of a start said "another sidecar daemon is already
    serving ... (pid N)" and did nothing; status said none answers and that one "started with
    another socket" holds the index; search said to start one. Each says the daemon is starting,
    waits for its socket, and is answered by it."""
    vault = write(tmp_path / "vault" / "Lighthouse.md", "# Lighthouse\n\nThe lighthouse keeper.\n").parent
    d = daemon_factory(vault, keyword_only=True)
    gate = tmp_path / "gate"
    serve = d.cmd()
    d.cmd = lambda: [sys.executable, "-c", _GATED_SERVE, str(gate), *serve[serve.index("serve") :]]
    d.start(wait=None)
    _wait_for(gate.with_suffix(".reached"), d)
    env = {**d.env, "SIDECAR_HOME": str(d.home)}
    asked = subprocess.Popen(
        [sys.executable, "-m", "sidecar", *command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert asked.stderr is not None and asked.stdin is not None
        asked.stdin.write("# Plan\n\nRow to the zeppelin.\n")
        asked.stdin.close()
        asked.stdin = None  # closed: ``communicate`` writes nothing more
        first = asked.stderr.readline()  # said before it waits (the daemon held at its bind)
        assert "is starting: waiting up to" in first and f"pid {d.pid}" in first, first
        gate.touch()
        out, err = asked.communicate(timeout=120)
    finally:
        gate.touch()
        if asked.poll() is None:
            asked.kill()
    assert asked.returncode == 0, (out, err)
    assert answered in out + err, (out, err)
    assert "already serving" not in err and "another socket" not in out + err, (out, err)
    assert "no sidecar daemon is listening" not in err, (out, err)
    if command[0] == "memory":
        got = d.call("get", {"reference": "memory/plan"}, agent="ops")
        assert "Row to the zeppelin." in got["text"], got
    assert d.stop() == 0


def test_a_daemon_that_holds_the_index_and_never_answers_is_said_starting_not_elsewhere(
    daemon_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The wait is bounded: a daemon holding the index whose socket takes nothing in time is said
    to hold it and maybe still start (what to do, and not to start a second one), not "started
    with another socket" (advice to reinstall the service). The bound set to none at all."""
    from sidecar.clients import lockholder
    from sidecar.clients.cli import main
    from sidecar.contracts.errors import ExitCode

    d = daemon_factory(None, keyword_only=True)
    gate = tmp_path / "gate"
    serve = d.cmd()
    d.cmd = lambda: [sys.executable, "-c", _GATED_SERVE, str(gate), *serve[serve.index("serve") :]]
    d.start(wait=None)
    try:
        _wait_for(gate.with_suffix(".reached"), d)
        monkeypatch.setattr(lockholder, "START_WAIT_S", 0.0)
        monkeypatch.setenv("XDG_STATE_HOME", d.env["XDG_STATE_HOME"])
        assert main(["status", "--home", str(d.home)]) == ExitCode.NOT_RUNNING
        said = capsys.readouterr()
        assert said.out.startswith("sidecar is starting, not answering yet.\n"), said
        assert f"the daemon (pid {d.pid}) holds the index" in said.out, said
        assert "did not answer" in said.out and "Do not start a second daemon" in said.out, said
        assert "another socket" not in said.out, said
    finally:
        gate.touch()
    d.wait_for(lambda h: h["index"]["state"] in ("building", "ready"), 120)  # it answers then
    assert d.stop() == 0
