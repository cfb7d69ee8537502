"""A real `sidecar serve` in a subprocess, for the tests and the benchmarks alike.

Imports no pytest and no engine (the benchmarks load it from bench/common.py), only the client,
the configuration and the errors.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from sidecar.clients.client import Client
from sidecar.config import load_config
from sidecar.contracts.errors import DaemonNotRunningError

Health = dict[str, Any]


def exchange(sock_path: Path, payload: bytes) -> list[dict[str, Any]]:
    """Send raw bytes, close our side, and collect every answer line until the daemon closes."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(sock_path))
    try:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the daemon may answer and close before reading everything (oversized frames)
    data = b""
    try:
        while chunk := s.recv(65536):
            data += chunk
    except OSError:
        pass  # a reset after the last answer
    s.close()
    return [json.loads(line) for line in data.splitlines() if line.strip()]


class DaemonProcess:
    """`sidecar serve --home HOME [--vault VAULT]`, logging to ``daemon-HOME.log`` beside the home.

    ``env`` is laid over ``base_env`` (this process's environment by default; the benchmarks pass
    one without SIDECAR_* and XDG_*); SIDECAR_HOME never passes, the home is a flag.
    ``keyword_only`` disables the model: for tests that need no vectors (BM25 search only).
    """

    def __init__(
        self,
        home: Path,
        vault_dir: Path | None,
        extra: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        prefix: Sequence[str] = (),
        base_env: Mapping[str, str] | None = None,
        call_timeout: float = 60.0,
        log_level: str | None = "debug",
        keyword_only: bool = False,
    ):
        self.prefix = list(prefix)
        self.home = home
        self.vault = vault_dir
        self.extra = list(extra)
        self.env = {**(os.environ if base_env is None else base_env), **(env or {})}
        self.env.pop("SIDECAR_HOME", None)
        # The home's record beside the home: a daemon of a module-scoped fixture starts before
        # the per-test fixture points HOME into tmp, and wrote into the user's ~/.local/state.
        self.env.setdefault("XDG_STATE_HOME", str(home.parent / f"state-{home.name}"))
        if keyword_only:  # no model: starts in a second or two, ready after the first sweep
            self.env["SIDECAR_EMBEDDER_ENABLED"] = "false"
        self.call_timeout = call_timeout
        self.log_level = log_level
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0  # time.perf_counter() at the last start
        self.cfg = load_config(flags={"home": str(home)}, env={})
        self.log = home.parent / f"daemon-{home.name}.log"
        self._logfh: BinaryIO | None = None

    @property
    def socket(self) -> Path:
        return self.cfg.socket_path

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def cmd(self) -> list[str]:
        # A PYTHONPATH names the code to run (the benchmarks' old checkout): -P keeps ``-m`` from
        # putting the current directory first, where this checkout would shadow it.
        safe = ["-P"] if self.env.get("PYTHONPATH") else []
        args = [
            *self.prefix,
            sys.executable,
            *safe,
            "-m",
            "sidecar",
            "serve",
            "--home",
            str(self.home),
        ]
        if self.log_level is not None:  # None: the configuration's level
            args += ["--log-level", self.log_level]
        if self.vault is not None:
            args += ["--vault", str(self.vault)]
        return args + self.extra

    def start(self, wait: str | None = "ready", timeout: float = 120.0) -> DaemonProcess:
        """Start the daemon; with ``wait``, return once health reports that index state."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.close_log()
        self._logfh = self.log.open("ab")
        self.started = time.perf_counter()
        # stdin as a service manager gives it: a daemon whose stdin is a terminal (pytest run from
        # one) stops on SIGHUP, a service's reloads
        self.proc = subprocess.Popen(
            self.cmd(), stdin=subprocess.DEVNULL, stdout=self._logfh, stderr=self._logfh, env=self.env
        )
        if wait:
            self.wait_for(lambda h: h["index"]["state"] == wait, timeout)
        return self

    def seconds(self) -> float:
        """Seconds since the last start."""
        return time.perf_counter() - self.started

    def client(self, agent: str | None = None, timeout: float | None = None) -> Client:
        return Client(self.socket, agent=agent, timeout=timeout or self.call_timeout)

    def call(
        self,
        op: str,
        params: dict[str, Any] | None = None,
        agent: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        with self.client(agent, timeout) as c:
            return c.call(op, params)

    def health(self) -> Health:
        return self.call("health")

    def health_or_none(self) -> Health | None:
        """Health, or None while nothing answers on the socket (starting, stopped)."""
        try:
            return self.health()
        except DaemonNotRunningError:
            return None

    def wait_for(
        self,
        predicate: Callable[[Health], bool],
        timeout: float = 120.0,
        poll: float = 0.1,
        progress: Callable[[Health], None] | None = None,
    ) -> Health:
        """Poll health until ``predicate`` holds; fail with the log's tail if the daemon exits or
        the time runs out."""
        deadline = time.monotonic() + timeout
        last: Health | None = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(
                    f"daemon exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
                )
            last = self.health_or_none()
            if last is not None:
                if predicate(last):
                    return last
                if progress is not None:
                    progress(last)
            time.sleep(poll)
        raise AssertionError(
            f"timed out; last health: {json.dumps(last)[:2000]}\n{self.log.read_text()[-3000:]}"
        )

    def log_size(self) -> int:
        """Bytes in the log now: give it to ``wait_for_log`` to look only at what comes after."""
        try:
            return self.log.stat().st_size
        except FileNotFoundError:
            return 0

    def wait_for_log(self, text: str, after: int = 0, count: int = 1, timeout: float = 60.0) -> str:
        """Wait until the log, from byte ``after`` on, holds ``text`` ``count`` times (an event the
        daemon logs, instead of sleeping for as long as it might take); that part of the log."""
        deadline = time.monotonic() + timeout
        while True:
            with self.log.open("rb") as fh:
                fh.seek(after)
                tail = fh.read().decode("utf-8", "replace")
            if tail.count(text) >= count:
                return tail
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"daemon exited with {self.proc.returncode}:\n{tail[-3000:]}")
            if time.monotonic() >= deadline:
                raise AssertionError(f"{text!r} not logged {count}x in {timeout} s:\n{tail[-3000:]}")
            time.sleep(0.05)

    def wait_ready(self, timeout: float = 120.0, poll: float = 0.1, verbose: bool = False) -> float:
        """Wait for the ready state; the seconds from the start until then."""

        def say(h: Health) -> None:
            print(f"  {h['index']['phase']} pending={h['index']['pending_vectors']}", file=sys.stderr)

        self.wait_for(lambda h: h["index"]["state"] == "ready", timeout, poll, say if verbose else None)
        return self.seconds()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self.close_log()
        return code

    def kill(self) -> None:
        """End a daemon that is still running (a test's cleanup): no grace, no check."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.close_log()

    def close_log(self) -> None:
        if self._logfh is not None:
            self._logfh.close()
            self._logfh = None

    def run_cli(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        env = {**self.env, "SIDECAR_HOME": str(self.home)}
        return subprocess.run(
            [sys.executable, "-m", "sidecar", *args],
            capture_output=True,
            text=True,
            env=env,
            check=check,
            timeout=120,
        )


def started_as_a_user_would(base: Path, notes: Mapping[str, str]) -> DaemonProcess:
    """A keyword-only daemon over a vault of ``notes`` (path -> text), started as from a user's
    shell: none of the test run's SIDECAR_* or XDG_* variables, a HOME of its own."""
    vault = base / "vault"
    for rel, text in notes.items():
        (vault / rel).parent.mkdir(parents=True, exist_ok=True)
        (vault / rel).write_text(text, encoding="utf-8")
    d = DaemonProcess(base / "home", vault)
    d.env = {k: v for k, v in d.env.items() if not k.startswith(("SIDECAR_", "XDG_"))}
    d.env |= {"SIDECAR_EMBEDDER_ENABLED": "false", "HOME": str(base / "userhome")}
    (base / "userhome").mkdir()
    return d.start()
