"""The converting child process: the daemon runs a model rewrite as ``python -m <module> SOURCE
TARGET`` (so ``onnx`` and the rewrite's memory never enter it), and the child notes why it
refused, so that the daemon does not ask again."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sidecar.runtime.orphan import child_env


def run(
    module: str,
    source: Path,
    target: Path,
    timeout: float,
    early: tuple[Path, Callable[[Path], None]] | None = None,
) -> tuple[int, str]:
    """The child's exit code and the last line of its stderr (OSError or TimeoutExpired when it
    could not run or ran too long). ``early``: a file the child publishes before it is done, and
    what to call with it once it appears (while the child goes on)."""
    cmd = [sys.executable, "-m", module, str(source), str(target)]
    target.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryFile() as err:
        # Our own interpreter and module, paths as separate arguments: no shell, nothing untrusted.
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=child_env())  # noqa: S603
        try:
            while True:
                try:
                    code = proc.wait(timeout=0.1)
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() > deadline:
                        raise
                if early is not None and early[0].is_file():
                    path, call = early
                    early = None
                    call(path)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        lines = err.read().decode("utf-8", "replace").strip().splitlines()
    return code, (lines or [""])[-1]


def arguments(argv: list[str], usage: str) -> tuple[Path, Path] | None:
    """SOURCE and TARGET from the child's command line; None (the usage printed) when it is wrong."""
    if len(argv) != 2:
        print(f"usage: {usage}", file=sys.stderr)
        return None
    return Path(argv[0]), Path(argv[1])


def refuse(target: Path, reason: str, code: int) -> int:
    """Remember why next to ``target`` (``.skip``), say it on stderr, and exit with ``code``."""
    target.with_suffix(".skip").write_text(reason + "\n")
    print(reason, file=sys.stderr)
    return code
