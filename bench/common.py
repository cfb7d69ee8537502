"""Helpers shared by the benchmark scripts: a real daemon in a subprocess, percentiles, output."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the daemon harness is the tests' (tests/daemon_process.py)

from sidecar.clients.client import Client  # noqa: E402
from tests.daemon_process import DaemonProcess  # noqa: E402


def pct(values: list[float], p: float) -> float:
    """The p-quantile (0..1) of some latencies, rounded to 0.1."""
    ordered = sorted(values)
    return round(ordered[max(0, int(len(ordered) * p) - 1)], 1)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without SIDECAR_*/XDG_* (the daemon gets exactly what the bench says)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "XDG_"))}
    return {**env, **(extra or {})}


def bench_daemon(
    vault: Path, home: Path, env: dict[str, str] | None = None, args: list[str] | None = None
) -> DaemonProcess:
    """`sidecar serve` on a home and a vault, started (not waited for), logging next to the home:
    the tests' harness, given this environment minus SIDECAR_*/XDG_*, at the configured log level."""
    home.parent.mkdir(parents=True, exist_ok=True)
    d = DaemonProcess(
        home, vault, args or [], env=env, base_env=clean_env(), call_timeout=300, log_level=None
    )
    return d.start(wait=None)


def keyword_searchable(health: dict[str, Any] | None) -> bool:
    """Whether a daemon's first sweep is done (its notes are searchable by keyword)."""
    return health is not None and bool(health["index"]["first_sweep_done"])


def startup_times(
    d: DaemonProcess, *, ready: bool = True, timeout: float = 7200.0, poll: float = 0.1
) -> tuple[float, float | None]:
    """Seconds from a daemon's start to keyword-searchable and to ready (with ``ready`` False, it
    returns at keyword-searchable, ready None). A ready daemon is keyword-searchable too."""
    keyword = None
    while d.seconds() < timeout:
        h = d.health_or_none()
        now = d.seconds()
        if keyword is None and keyword_searchable(h):
            keyword = now
            if not ready:
                return keyword, None
        if keyword is not None and h is not None and h["index"]["state"] == "ready":
            return keyword, now
        time.sleep(poll)
    raise TimeoutError(f"daemon not {'ready' if ready else 'keyword-searchable'} within {timeout} s")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> dict[str, float]:
    """Resident memory now (VmRSS) and at its peak (VmHWM) of a process, in MB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS", "VmHWM")):
            name, value, _unit = line.split()
            out[name.rstrip(":")] = round(int(value) / 1024, 1)
    return out


def combined_vault(vaults: list[Path]) -> Path:
    """One vault: the folder itself, or for several a temporary copy with each under its own name."""
    if len(vaults) == 1:
        return vaults[0].resolve()
    root = Path(tempfile.mkdtemp(prefix="sidecar-vault-"))
    for v in vaults:
        shutil.copytree(v, root / v.name)
    return root


def code_daemon(home: Path, vault: Path, code: Path, config: Path) -> DaemonProcess:
    """A daemon of the code in checkout ``code`` (old against new), started, not waited for.
    ``python -m`` puts the working folder first on the path: the daemon starts inside ``code``."""
    return DaemonProcess(
        home,
        vault,
        ["--config", str(config)],
        env={"PYTHONPATH": str(code)},
        prefix=["env", "-C", str(code)],
        base_env=clean_env(),
        call_timeout=300,
        log_level=None,
    ).start(wait=None)


class WriteSide:
    """One side of an old-against-new comparison of memory writes through the socket: a daemon of
    the code in ``code`` with its own home on the shared vault and the configuration ``settings``
    (YAML), and, once ``connect`` is called, a client of the agent ``bench``."""

    def __init__(self, name: str, home: Path, vault: Path, code: Path, settings: str) -> None:
        self.name = name
        config = home.parent / f"{home.name}-config.yaml"
        config.write_text(settings)
        self.daemon = code_daemon(home, vault, code, config)
        self.client: Client | None = None

    def connect(self) -> Client:
        self.client = Client(self.daemon.cfg.socket_path, agent="bench")
        self.client.__enter__()
        return self.client

    def timed_write(self, slug: str, content: str) -> float:
        """A memory write of the note ``slug``; its milliseconds, answer included."""
        assert self.client is not None, "connect first"
        t0 = time.perf_counter()
        self.client.call("write", {"slug": slug, "content": content})
        return (time.perf_counter() - t0) * 1000

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        self.daemon.stop()


Side = TypeVar("Side", bound=WriteSide)


@contextlib.contextmanager
def old_and_new(
    make: Callable[[str, Path, Path, Path], Side], base: Path, vault: Path, old_code: Path
) -> Iterator[list[Side]]:
    """The sides ``old`` (the checkout ``old_code``) and ``new`` (this one), made with
    ``make(name, home, vault, code)``, homes in ``base``; both are closed at the end."""
    sides: list[Side] = []
    try:
        for name, code in (("old", old_code.resolve()), ("new", ROOT)):
            sides.append(make(name, base / name, vault, code))  # one made is closed if the next fails
        yield sides
    finally:
        for side in sides:
            side.close()


def interleaved(sides: Sequence[Side], rounds: int) -> Iterator[tuple[int, Side]]:
    """(round, side) for ``rounds`` rounds, the sides' order swapped every round (A B B A ...),
    so both see the same machine load and neither always goes first."""
    for i in range(rounds):
        for side in sides if i % 2 else sides[::-1]:
            yield i, side


def emit(result: dict[str, Any], out: Path | None) -> None:
    """Print the result as JSON and keep a copy in ``out``."""
    result.setdefault("date", time.strftime("%Y-%m-%d %H:%M"))
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
