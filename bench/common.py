"""Helpers shared by the benchmark scripts: a real daemon in a subprocess, percentiles, output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sidecar.clients.client import Client
from sidecar.config import load_config
from sidecar.contracts.errors import DaemonNotRunningError


def pct(values: list[float], p: float) -> float:
    """The p-quantile (0..1) of some latencies, rounded to 0.1."""
    ordered = sorted(values)
    return round(ordered[max(0, int(len(ordered) * p) - 1)], 1)


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without SIDECAR_*/XDG_* (the daemon gets exactly what the bench says)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "XDG_"))}
    return {**env, **(extra or {})}


class BenchDaemon:
    """`sidecar serve` on a home and a vault, logging next to the home."""

    def __init__(
        self, vault: Path, home: Path, env: dict[str, str] | None = None, args: list[str] | None = None
    ) -> None:
        self.home = home
        self.cfg = load_config(flags={"home": str(home)}, env={})
        home.parent.mkdir(parents=True, exist_ok=True)
        self.log = (home.parent / f"{home.name}-daemon.log").open("ab")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "sidecar",
                "serve",
                "--home",
                str(home),
                "--vault",
                str(vault),
                *(args or []),
            ],
            stdout=self.log,
            stderr=self.log,
            env=clean_env(env),
        )

    def call(self, op: str, params: dict[str, Any] | None = None, timeout: float = 300) -> dict[str, Any]:
        with Client(self.cfg.socket_path, timeout=timeout) as c:
            return c.call(op, params)

    def health(self) -> dict[str, Any] | None:
        try:
            return self.call("health")
        except DaemonNotRunningError:
            return None

    def wait_ready(self, verbose: bool = False, poll: float = 0.2, limit: float = 7200) -> float:
        """Seconds from start until health says ready."""
        while time.perf_counter() - self.started < limit:
            h = self.health()
            if h is not None and h["index"]["state"] == "ready":
                return time.perf_counter() - self.started
            if verbose and h is not None:
                print(f"  {h['index']['phase']} pending={h['index']['pending_vectors']}", file=sys.stderr)
            time.sleep(poll)
        raise TimeoutError("the daemon did not become ready")

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self) -> dict[str, float]:
        return rss_mb(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()


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


def emit(result: dict[str, Any], out: Path | None) -> None:
    """Print the result as JSON and keep a copy in ``out``."""
    result.setdefault("date", time.strftime("%Y-%m-%d %H:%M"))
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
