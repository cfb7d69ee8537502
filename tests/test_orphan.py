"""A child process (model conversion, index build) ends with the daemon that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILDREN = {
    # What a conversion or build child calls: on Linux the kernel's parent-death signal.
    "die_with_parent": "from sidecar.runtime.orphan import die_with_parent\ndie_with_parent()\n",
    # The watch every platform has (the only one on macOS), alone.
    "watch_parent": "from sidecar.runtime.orphan import watch_parent\nwatch_parent(os.getppid(), 3, 0.05)\n",
}


@pytest.mark.parametrize("how", sorted(CHILDREN))
def test_an_orphaned_child_exits(tmp_path: Path, how: str) -> None:
    """Kill -9 the parent: the child exits within seconds instead of converting a model or
    committing an index beside the next daemon's."""
    pid_file = tmp_path / "child.pid"
    child_py = tmp_path / "child.py"
    child_py.write_text(
        "import os, sys, time\n" + CHILDREN[how] + "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "time.sleep(120)\n"
    )
    parent = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, sys.argv[1], sys.argv[2]])\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", parent, str(child_py), str(pid_file)])
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        time.sleep(0.2)  # the child is alive and watching
        os.kill(child, 0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            os.kill(child, signal.SIGKILL)
            pytest.fail("the orphaned child kept running")
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_child_whose_daemon_died_before_it_watched_exits_at_once() -> None:
    """The daemon's pid comes with the child's environment (child_env): a child that finds another
    parent when it starts exits at once, one that finds its daemon keeps going, even where the
    daemon is pid 1 (a container), which a check for init could not tell."""
    code = "from sidecar.runtime.orphan import die_with_parent\ndie_with_parent(7)\nprint('running')\n"
    gone = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "SIDECAR_PARENT_PID": str(2**22 + 1)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert gone.returncode == 7 and gone.stdout == ""
    here = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "SIDECAR_PARENT_PID": str(os.getpid())},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert here.returncode == 0 and here.stdout == "running\n"
