"""The converting child process: the daemon runs a model rewrite as ``python -m <module> SOURCE
TARGET`` (so ``onnx`` and the rewrite's memory never enter it), and the child notes why it
refused, so that the daemon does not ask again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run(module: str, source: Path, target: Path, timeout: float) -> tuple[int, str]:
    """The child's exit code and the last line of its stderr (OSError or TimeoutExpired when it
    could not run or ran too long)."""
    cmd = [sys.executable, "-m", module, str(source), str(target)]
    target.parent.mkdir(parents=True, exist_ok=True)
    # Our own interpreter and module, paths as separate arguments: no shell, nothing untrusted.
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)  # noqa: S603
    return done.returncode, (done.stderr.strip().splitlines() or [""])[-1]


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
