"""Running as a service: unit files, sd_notify, exit codes, reload."""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import os
import plistlib
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients.service import LABEL, service_file
from sidecar.config import load_config
from sidecar.contracts.errors import ExitCode
from sidecar.daemon.server import STOP_BUDGET_S
from tests.conftest import DaemonProcess, write


def test_unit_and_plist_render_absolute_paths(tmp_path: Path, vault: Path) -> None:
    """The systemd unit and the launchd plist name the absolute sidecar path, config, home and vault."""
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text(f"vault:\n  path: {vault}\nhome: {tmp_path / 'home'}\n")
    cfg = load_config(config_file=str(cfg_file), env={})
    unit = service_file(cfg, tmp_path, platform="linux")
    assert unit.path == tmp_path / ".config" / "systemd" / "user" / "sidecar.service"
    # Where systemd looks when XDG_CONFIG_HOME is set (it wrote to ~/.config whatever the variable)
    elsewhere = tmp_path / "xdg"
    moved = service_file(cfg, tmp_path, platform="linux", env={"XDG_CONFIG_HOME": str(elsewhere)})
    assert moved.path == elsewhere / "systemd" / "user" / "sidecar.service"
    assert service_file(cfg, tmp_path, platform="linux", env={"XDG_CONFIG_HOME": "rel"}).path == unit.path
    exec_start = next(line for line in unit.text.splitlines() if line.startswith("ExecStart="))
    exe = exec_start.split("=", 1)[1].split()[0]
    assert Path(exe).is_absolute() and Path(exe).exists()
    assert f"--config {cfg_file.resolve()}" in exec_start
    assert "Type=notify" in unit.text
    assert "RestartPreventExitStatus=2 3 4\n" in unit.text
    sandboxed = service_file(cfg, tmp_path, platform="linux", sandbox=True)
    assert "After=" not in sandboxed.text and "Wants=" not in sandboxed.text
    for line in sandboxed.text.splitlines():
        if line.startswith(("ReadOnlyPaths=", "ReadWritePaths=")):
            assert all(p.startswith("-") for p in line.split("=", 1)[1].split()), line
    mac = service_file(cfg, tmp_path, platform="darwin")
    data = plistlib.loads(mac.text.encode())
    assert (
        data["Label"] == LABEL and data["RunAtLoad"] is True and data["KeepAlive"]["SuccessfulExit"] is False
    )
    assert data["ProgramArguments"][1:] == ["serve", "--config", str(cfg_file.resolve())]
    assert Path(data["ProgramArguments"][0]).is_absolute() and data["ThrottleInterval"] > 0
    assert data["StandardErrorPath"].startswith(str(tmp_path))
    # The service managers kill a daemon still stopping at their limit (launchd's default: 20 s):
    # both lie above the stop's one bound, with room for the process's own exit.
    assert data["ExitTimeOut"] >= STOP_BUDGET_S + 5
    assert f"TimeoutStopSec={data['ExitTimeOut'] + 5}" in unit.text


def test_repository_plist_parses() -> None:
    """launchd/dev.sidecar.plist is a valid plist with the keys launchd needs."""
    data = plistlib.loads((Path(__file__).parent.parent / "launchd" / "dev.sidecar.plist").read_bytes())
    assert {"Label", "ProgramArguments", "RunAtLoad", "KeepAlive", "ThrottleInterval"} <= set(data)
    assert data["ExitTimeOut"] >= STOP_BUDGET_S + 5


def _directives(unit_text: str) -> dict[str, list[str]]:
    """A unit file's settings, ``[Section]Key`` -> its values in order (comments left out)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in unit_text.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line
        elif line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out.setdefault(f"{section}{key}", []).append(value)
    return out


# What names this installation's paths and settings (PrivateTmp= is left out when one lies in
# /tmp, as the test's do): the rest of the files must agree.
_UNIT_LOCAL = {"ExecStart", "Environment", "ReadWritePaths", "ReadOnlyPaths", "PrivateTmp"}
_PLIST_LOCAL = {"ProgramArguments", "EnvironmentVariables", "StandardErrorPath", "StandardOutPath"}


def test_the_shipped_service_files_are_what_install_writes(tmp_path: Path, vault: Path) -> None:
    """systemd/sidecar.service and launchd/dev.sidecar.plist say what `sidecar service install`
    writes, but for the paths and settings of an installation: the restart policy of the example
    a person copies is the one the command writes."""
    repo = Path(__file__).parent.parent
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text(f"vault:\n  path: {vault}\n")
    cfg = load_config(config_file=str(cfg_file), env={})
    written = _directives(service_file(cfg, tmp_path, platform="linux", sandbox=True).text)
    shipped = _directives((repo / "systemd" / "sidecar.service").read_text())

    def common(d: dict[str, list[str]]) -> dict[str, list[str]]:
        return {k: v for k, v in d.items() if k.partition("]")[2] not in _UNIT_LOCAL}

    assert common(shipped) == common(written)
    plist = plistlib.loads(service_file(cfg, tmp_path, platform="darwin").text.encode())
    example = plistlib.loads((repo / "launchd" / "dev.sidecar.plist").read_bytes())
    assert {k: v for k, v in example.items() if k not in _PLIST_LOCAL} == {
        k: v for k, v in plist.items() if k not in _PLIST_LOCAL
    }


def test_a_restart_loop_ends_and_what_a_restart_cannot_help_is_not_restarted(
    tmp_path: Path, vault: Path
) -> None:
    """The unit restarted for ever on exit code 4 (another daemon serves the home), and a restart
    every 5 s never tripped systemd's default start limit (five within 10 s). Now 2 to 4 are not
    restarted, 9 (a stop that gave up on a write) is a stop, and a loop of whatever else ends.
    Exit code 5 is restarted: a share not mounted yet at login, a stale NFS handle or a full disk
    passes by itself (not restarted, the service stayed down until a person acted). systemd
    counts a person's starts against the limit too: five restarts by hand within a few minutes
    (with a crash or two between) are not refused, while a loop of failing starts (a few seconds
    each) still ends within the interval. launchd: restarted on a failed exit or a crash only,
    and not throttled as a Background job."""
    cfg = load_config(flags={"home": str(tmp_path / "home"), "vault.path": str(vault)}, env={})
    unit = _directives(service_file(cfg, tmp_path, platform="linux", sandbox=False).text)
    prevent = {int(c) for c in unit["[Service]RestartPreventExitStatus"][0].split()}
    assert prevent == {ExitCode.USAGE, ExitCode.CONFIG, ExitCode.SOCKET_IN_USE}
    assert ExitCode.INDEX_UNUSABLE not in prevent
    assert unit["[Service]Restart"] == ["on-failure"]
    assert unit["[Service]SuccessExitStatus"] == [str(int(ExitCode.STOP_ABANDONED))]
    interval = int(unit["[Unit]StartLimitIntervalSec"][0])
    burst = int(unit["[Unit]StartLimitBurst"][0])
    restart_sec = int(unit["[Service]RestartSec"][0])
    failing_start = 5  # seconds a start takes to fail (a share not mounted, a full disk)
    assert (burst - 1) * (restart_sec + failing_start) < interval  # a loop of restarts trips it
    assert interval <= 600  # a few crashes far apart are still restarted
    assert burst >= 5 + 2 + 3  # five manual restarts and two crashes leave room to spare
    data = plistlib.loads(service_file(cfg, tmp_path, platform="darwin").text.encode())
    assert data["KeepAlive"] == {"SuccessfulExit": False, "Crashed": True}
    assert data["ProcessType"] == "Standard"


def test_the_readme_says_how_long_exit_5_is_restarted(tmp_path: Path, vault: Path) -> None:
    """The restarts of a start failing with exit 5 last about four minutes (the start limit),
    then the unit is left failed: README said the service restarts it "until it starts"."""
    cfg = load_config(flags={"home": str(tmp_path / "home"), "vault.path": str(vault)}, env={})
    unit = _directives(service_file(cfg, tmp_path, platform="linux", sandbox=False).text)
    burst = int(unit["[Unit]StartLimitBurst"][0])
    restart_sec = int(unit["[Service]RestartSec"][0])
    assert round(burst * (restart_sec + 2) / 60) == 4  # a start failing in about 2 s
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `the home … cannot be used"))
    assert "for about four minutes" in row and "leaves the unit failed" in row and "reset-failed" in row
    assert "every 10 s (launchd: 30 s) until it starts" not in row


@pytest.mark.parametrize("sandbox", [True, False])
def test_systemd_analyze_verify(tmp_path: Path, sandbox: bool) -> None:
    """The unit of `sidecar service install --dry-run`, for a vault and home that do not exist
    yet, passes `systemd-analyze verify --user` with nothing to warn about; every path in it
    may be absent ("-"), with or without the sandboxing lines."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed here")
    absent = tmp_path / "nas" / "Vault"
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text(f"vault:\n  path: {absent}\n")
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "SIDECAR_HOME": str(tmp_path / "not-yet"),
    }
    flag = "--sandbox=" + ("yes" if sandbox else "no")
    out = subprocess.run(
        [sys.executable, "-m", "sidecar", "service", "install", "--dry-run", flag, "--config", str(cfg_file)],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert (f"ReadOnlyPaths=-{absent}" in out.stdout) is sandbox
    assert ("ProtectSystem=strict" in out.stdout) is sandbox
    assert not absent.exists() and not (tmp_path / "not-yet").exists()
    unit = tmp_path / "sidecar.service"
    unit.write_text(out.stdout)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    done = subprocess.run(
        [tool, "verify", "--user", str(unit)],
        capture_output=True, text=True, check=False, env={**env, "XDG_RUNTIME_DIR": str(runtime)},
    )  # fmt: skip
    assert done.returncode == 0 and "sidecar.service" not in done.stderr, done.stderr


def _verify(tool: str, unit_text: str, tmp_path: Path) -> str:
    unit = tmp_path / "sidecar.service"
    unit.write_text(unit_text)
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    done = subprocess.run(
        [tool, "verify", "--user", str(unit)],
        capture_output=True, text=True, check=False,
        env={**os.environ, "HOME": str(tmp_path), "XDG_RUNTIME_DIR": str(runtime)},
    )  # fmt: skip
    assert done.returncode == 0 and "sidecar.service" not in done.stderr, done.stderr
    return done.stderr


def test_paths_with_blanks_and_percent_signs_stay_whole(tmp_path: Path) -> None:
    """A home, vault or configuration path holding a blank, a '%' or a '$' is written so that
    systemd reads it whole (unquoted, "My Files" was two words: ExecStart gave the daemon an
    argument too many, exit 2, restarted every 5 s forever); a socket or model cache outside
    the home is writable in the sandbox, and a socket in /tmp keeps the unit's /tmp shared."""
    tool = shutil.which("systemd-analyze")
    odd = tmp_path / "sp ace" / "50% $HOME"
    odd.mkdir(parents=True)
    cfg_file = odd / "c f.yaml"
    cache = Path(f"/srv/sidecar test {os.getpid()}")  # named, not made here
    cfg_file.write_text(
        f'home: "{odd / "home dir"}"\nvault:\n  path: "{odd / "My Vault"}"\n'
        f'embedder:\n  cacheDir: "{cache}"\nsocket: /tmp/sidecar-t-{os.getpid()}/s.sock\n'
    )
    cfg = load_config(config_file=str(cfg_file), env={})
    text = service_file(cfg, tmp_path, platform="linux", sandbox=True).text
    # A socket folder in /tmp is gone after a reboot: /tmp itself stays writable for the daemon.
    writable = next(x for x in text.splitlines() if x.startswith("ReadWritePaths=")).split("=", 1)[1]
    assert "PrivateTmp=yes" not in text and "-/tmp" in writable.split()
    assert f'"-{cache}"' in text
    exec_start = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    words = shlex.split(exec_start.split("=", 1)[1].replace("%%", "%").replace("$$", "$"))
    assert words[1:] == ["serve", "--config", str(cfg_file.resolve())]
    if tool is None:
        pytest.skip("systemd-analyze is not installed here")
    _verify(tool, text, tmp_path)


def test_an_installation_path_with_a_dollar_sign_runs(
    tmp_path: Path, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'$' is escaped in the arguments (variables) but not in the program's path, where systemd
    expands nothing ('$$' stayed literal: the unit named a program that does not exist)."""
    from sidecar.clients.service import Launcher, systemd_unit

    cfg = load_config(flags={"home": str(tmp_path / "h$x"), "vault.path": str(vault)}, env={})
    exe = tmp_path / "v$env" / "bin" / "sidecar"
    text = systemd_unit(cfg, Launcher((str(exe),)), tmp_path / "c$.yaml", sandbox=False)
    exec_start = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    assert exec_start == f"ExecStart={exe} serve --config {tmp_path}/c$$.yaml"
    from sidecar.contracts.errors import ConfigError

    odd = Launcher((str(tmp_path / 'it\'s "mine"' / "sidecar"),))
    with pytest.raises(ConfigError, match="cannot name"):  # no escape of these works there
        systemd_unit(cfg, odd, None, sandbox=False)
    # doctor reports such an installation's service as a failed check (it ended with the error).
    from sidecar.clients import doctor_checks, doctor_service
    from sidecar.clients import service as service_mod

    monkeypatch.setattr(service_mod, "launcher", lambda: odd)
    check = doctor_service.check_service(cfg, doctor_checks.Probes(home_dir=tmp_path))
    assert not check.ok and "cannot name" in check.verdict


def test_doctor_names_a_service_installed_with_another_home(tmp_path: Path, vault: Path) -> None:
    """A home changed in the configuration after the service was installed (the unit pins the
    home it was installed with): doctor says to install it again."""
    from sidecar.clients.doctor_checks import Probes
    from sidecar.clients.doctor_service import check_service

    cfg = load_config(flags={"home": str(tmp_path / "old"), "vault.path": str(vault)}, env={})
    svc = service_file(cfg, tmp_path, platform="linux")
    svc.path.parent.mkdir(parents=True)
    svc.path.write_text(svc.text)
    probes = Probes(home_dir=tmp_path, systemctl="/bin/false")
    assert "another home" not in check_service(cfg, probes).verdict
    moved = load_config(flags={"home": str(tmp_path / "new"), "vault.path": str(vault)}, env={})
    check = check_service(moved, probes)
    assert not check.ok and "another home" in check.verdict and "service install" in check.todo


def test_service_without_a_configuration_file_starts(tmp_path: Path) -> None:
    """Installed before any configuration file exists, the unit names none (a --config naming a
    missing file is a configuration error, exit 3: the service said it would start without a
    vault and never started); the daemon then reads the default file once it is written."""
    env = {**os.environ, "HOME": str(tmp_path), "SIDECAR_HOME": str(tmp_path / "h")}
    env.pop("SIDECAR_CONFIG", None)
    env.pop("XDG_CONFIG_HOME", None)
    out = subprocess.run(
        [sys.executable, "-m", "sidecar", "service", "install", "--dry-run"],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert "--config" not in out.stdout and "no configuration file" in out.stderr
    gone = subprocess.run(
        [sys.executable, "-m", "sidecar", "service", "uninstall"],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert "nothing to remove" in gone.stdout and "removed" not in gone.stdout


def test_service_install_creates_the_home(tmp_path: Path) -> None:
    """`sidecar service install` creates the home (and its agents folder) the unit names."""
    env = {**os.environ, "HOME": str(tmp_path), "SIDECAR_HOME": str(tmp_path / "h")}
    out = subprocess.run(
        [sys.executable, "-m", "sidecar", "service", "install"],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert (tmp_path / "h").is_dir() and (tmp_path / "h").stat().st_mode & 0o777 == 0o700
    assert f"created {tmp_path / 'h'}" in out.stdout
    unit = tmp_path / ".config" / "systemd" / "user" / "sidecar.service"
    assert unit.exists() or sys.platform == "darwin"


def test_cli_service_dry_run(tmp_path: Path) -> None:
    """`sidecar service install --dry-run` prints the unit and writes nothing."""
    env = {**os.environ, "HOME": str(tmp_path), "SIDECAR_HOME": str(tmp_path / "h")}
    out = subprocess.run(
        [sys.executable, "-m", "sidecar", "service", "install", "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert "ExecStart=" in out.stdout or "<plist" in out.stdout
    assert not (tmp_path / ".config" / "systemd").exists()


def test_bad_config_exits_with_the_config_code(tmp_path: Path) -> None:
    """A configuration error exits with code 3 (systemd does not restart it) and names the key."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("search:\n  vectorWieght: 2\n")
    out = subprocess.run(
        [sys.executable, "-m", "sidecar", "serve", "--config", str(bad), "--home", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == ExitCode.CONFIG == 3
    assert "search.vectorWieght" in out.stderr


def _modes_and_times(*tops: Path) -> dict[str, tuple[str, int]]:
    """Every entry under ``tops`` (links not followed): its mode and its mtime."""
    out: dict[str, tuple[str, int]] = {}
    for top in tops:
        for folder, dirs, files in os.walk(top):
            for name in ("", *dirs, *files):
                st = os.lstat(os.path.join(folder, name))
                out[os.path.join(folder, name)] = (oct(st.st_mode), st.st_mtime_ns)
    return out


def test_a_refused_second_start_changes_nothing(daemon_factory: Any, vault: Path) -> None:
    """A second `serve` on a home a daemon serves exits 4 without touching a file: it took the
    lock only after walking the home and making private what it found, a person's files in an
    agent's inbox among them (an editor's backup, a note saved 0644)."""
    first: DaemonProcess = daemon_factory(vault, keyword_only=True).start()
    home = first.home
    inbox = home / "agents" / "ed" / "memory"
    first.call("write", {"slug": "kept", "content": "# kept\n\nan agent's fact\n"}, agent="ed")
    write(inbox / "person.md", "# person\n\nsaved by a person\n").chmod(0o644)
    write(inbox / "kept.md~", "# kept\n\nan editor's backup\n").chmod(0o664)
    for folder in (home, home / "index"):
        folder.chmod(0o755)  # what a start tightens: not a refused one
    tops = (home, Path(first.env["XDG_STATE_HOME"]))

    found = False

    def settled(health: Any) -> bool:
        """The person's note indexed whole, and the first daemon's indexer has nothing left to
        write. A search finds a note once its keyword index commits; the manifest is written
        after that, in the same batch (the first daemon's own -wal was written while the second
        ran, under load): the batch has ended when health, read after the find, says idle."""
        nonlocal found
        if not found:
            hits = first.call("search", {"query": "saved by a person"}, agent="ed")["hits"]
            found = any(h["reference"] == "memory/person" for h in hits)
            return False
        index = health["index"]
        return bool(index["first_sweep_done"] and index["phase"] == "idle" and health["queue"]["depth"] == 0)

    first.wait_for(settled, 30)
    before = _modes_and_times(*tops)
    second = DaemonProcess(home, vault, keyword_only=True)
    proc = subprocess.run(
        second.cmd(), capture_output=True, text=True, timeout=60, check=False, env=second.env
    )
    assert proc.returncode == ExitCode.SOCKET_IN_USE == 4, proc.stderr
    assert "already serving" in proc.stderr and "home_tightened" not in proc.stderr
    assert _modes_and_times(*tops) == before
    assert first.health()["index"]["state"] == "ready"


def test_a_start_refused_for_the_socket_changes_nothing(tmp_path: Path, vault: Path) -> None:
    """A daemon on another home but a socket another daemon serves exits 4 without tightening its
    home, writing ``agents/.sidecar-home`` or recording the home (a bare mount point recorded as
    "the home"): it did all of that after the lock and before it bound the socket."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    path = run / "s.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    home = tmp_path / "h2"
    write(home / "agents" / "a" / "memory" / ".trash" / "old.md", "# old\n").chmod(0o644)
    write(home / "index" / ".lock", "")  # a home used before; its lock is taken, then let go
    home.chmod(0o755)
    d = DaemonProcess(home, vault, extra=["--socket", str(path)], keyword_only=True)
    state = Path(d.env["XDG_STATE_HOME"])
    tops = (home, state) if state.exists() else (home,)
    before = _modes_and_times(*tops)
    try:
        proc = subprocess.run(d.cmd(), capture_output=True, text=True, timeout=60, check=False, env=d.env)
    finally:
        listener.close()
    assert proc.returncode == ExitCode.SOCKET_IN_USE, proc.stderr
    assert f"already serving {path}" in proc.stderr and "home_tightened" not in proc.stderr
    lock = str(home / "index" / ".lock")
    assert {k: v for k, v in _modes_and_times(*tops).items() if k != lock} == {
        k: v for k, v in before.items() if k != lock
    }
    assert not (home / "agents" / ".sidecar-home").exists() and not (state / "sidecar" / "homes").exists()


def test_a_socket_folder_of_another_user_is_said_as_such(tmp_path: Path, vault: Path) -> None:
    """A socket folder another user owns (a ``/tmp/sidecar-<uid>`` made first by someone else) is
    refused naming that folder, exit 3: the probe for a daemon on the socket raised
    PermissionError and the start said "the home cannot be used", exit 5, which the service
    restarts."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to act as a user without DAC override")
    folder = tmp_path / "sd"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    d = DaemonProcess(
        tmp_path / "h", vault, extra=["--socket", str(folder / "s.sock")], keyword_only=True,
        prefix=[setpriv, "--bounding-set", "-dac_override,-dac_read_search"],
    )  # fmt: skip
    d.home.mkdir()
    proc = subprocess.run(d.cmd(), capture_output=True, text=True, timeout=60, check=False, env=d.env)
    assert proc.returncode == ExitCode.CONFIG == 3, proc.stderr
    assert f"socket directory {folder} belongs to another user" in proc.stderr
    assert "cannot be used" not in proc.stderr


def test_a_notice_is_one_assignment_a_line_whatever_its_text(tmp_path: Path) -> None:
    """A value with a newline (a path's, a lock file's text) stays one assignment, and a name not
    UTF-8 is sent escaped: it added a READY=1 of its own, and raised UnicodeEncodeError (a
    traceback, exit 1, restarted) in the wait for an index run under a home so named."""
    from sidecar.runtime.notify import Notifier

    path = tmp_path / "notify.sock"
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(str(path))
    sink.settimeout(5)
    notifier = Notifier(str(path))
    try:
        notifier.send("STATUS=waiting: /h\udcff/index\nREADY=1", "WATCHDOG=1")
        got = sink.recv(4096).decode("utf-8").split("\n")
    finally:
        notifier.close()
        sink.close()
    assert got == ["STATUS=waiting: /h\\udcff/index READY=1", "WATCHDOG=1"]


def _notices(sink: socket.socket, until: Any, timeout: float = 60) -> list[str]:
    """The notify lines received until ``until(lines)`` holds (or the timeout: the test fails)."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while not until(seen) and time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError):
            seen.extend(sink.recv(4096).decode().splitlines())
    return seen


def test_a_service_start_waits_for_a_sidecar_index_run(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """A daemon the service starts while `sidecar index` (without a daemon) holds the index waits
    for it and then serves: it exited 4, which the unit does not restart, and the service stayed
    down after the run ended (a hook or `--rebuild` run while the daemon was restarting). The wait
    is said in the log and in systemd's STATUS=, and it pushes the start timeout out."""
    from sidecar.daemon.process import INDEX_RUN, IndexLock

    path = tmp_path / "notify.sock"
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(str(path))
    sink.settimeout(1)
    d: DaemonProcess = daemon_factory(vault, keyword_only=True, env={"NOTIFY_SOCKET": str(path)})
    held = IndexLock(d.home / "index", by=INDEX_RUN)
    held.acquire()
    d.start(wait=None)
    try:
        exited = lambda: d.proc is not None and d.proc.poll() is not None  # noqa: E731
        waiting = _notices(sink, lambda seen: exited() or any(s.startswith("STATUS=waiting") for s in seen))
        assert any("is in use by `sidecar index`" in s for s in waiting), waiting
        assert any(s.startswith("EXTEND_TIMEOUT_USEC=") for s in waiting), waiting
        assert d.proc is not None and d.proc.poll() is None  # waiting, not exited 4
        assert "index_lock_wait" in d.log.read_text()
        # A reload during the wait (`kill -HUP`) is done once it serves: it ended the process, a
        # clean exit the unit does not restart.
        d.proc.send_signal(signal.SIGHUP)
        again = _notices(sink, lambda seen: exited() or any(s.startswith("STATUS=waiting") for s in seen))
        assert d.proc.poll() is None, again
    finally:
        held.release()
    ready = _notices(sink, lambda seen: "READY=1" in seen)
    sink.close()
    assert "READY=1" in ready, ready
    # The rest of the start has a timeout of its own again, and the status says so.
    taken = ready.index("STATUS=starting")
    assert ready[taken + 1].startswith("EXTEND_TIMEOUT_USEC=") and taken < ready.index("READY=1"), ready
    d.wait_for(lambda h: h["index"]["state"] == "ready", 60)
    assert "index_lock_taken" in d.log.read_text()
    d.wait_for(lambda _h: "config_reload_deferred" in d.log.read_text(), 30)


def test_a_service_start_waits_for_a_home_on_a_share_not_mounted_yet(tmp_path: Path, vault: Path) -> None:
    """Under systemd a home that cannot be used yet (the bare mount point of a share not mounted
    refuses: Permission denied) is waited for in the process, then the daemon serves: it exited
    5, and after 20 restarts (about four minutes) the unit was left failed for good. Outside a
    service it still exits 5 at once."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to act as a user without DAC override")
    mount = tmp_path / "mnt"
    mount.mkdir(mode=0o755)
    os.chown(mount, 65534, 65534)  # not mounted: the mount point is not this user's
    path = tmp_path / "notify.sock"
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(str(path))
    sink.settimeout(1)
    prefix = [setpriv, "--bounding-set", "-dac_override,-dac_read_search"]
    d = DaemonProcess(mount / "home", vault, keyword_only=True, prefix=prefix)
    alone = subprocess.run(d.cmd(), capture_output=True, text=True, timeout=60, check=False, env=d.env)
    assert alone.returncode == ExitCode.INDEX_UNUSABLE == 5, alone.stderr
    d = DaemonProcess(
        mount / "home", vault, keyword_only=True, prefix=prefix, env={"NOTIFY_SOCKET": str(path)}
    )
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(d.cmd(), stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=d.env)
    try:
        exited = lambda: proc.poll() is not None  # noqa: E731
        waiting = _notices(sink, lambda seen: exited() or any(s.startswith("STATUS=waiting") for s in seen))
        assert any("cannot be used" in s and "Permission denied" in s for s in waiting), waiting
        assert any(s.startswith("EXTEND_TIMEOUT_USEC=") for s in waiting) and proc.poll() is None
        os.chown(mount, 0, 0)  # the share mounted
        ready = _notices(sink, lambda seen: exited() or "READY=1" in seen)
        assert "READY=1" in ready and "STATUS=starting" in ready, (ready, log.read_text())
        assert "home_wait" in log.read_text() and "home_usable" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        sink.close()


def test_the_wait_for_a_home_ends_after_its_bound(
    tmp_path: Path, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A home that never becomes usable (a permission mistake looks like a share not mounted yet)
    is waited for ``HOME_WAIT_MOST_S`` at most, then the start fails with exit 5 (restarted by the
    unit): it was waited for for good, and `systemctl start` (a notify unit's start waits for
    READY) with it."""
    import errno

    from sidecar.contracts.errors import StoreError
    from sidecar.daemon import lifecycle

    cfg = load_config(flags={"home": str(tmp_path / "home"), "vault.path": str(vault)}, env={})

    def refused(*_a: Any, **_k: Any) -> Any:
        raise OSError(errno.ENOENT, "No such file or directory", str(tmp_path / "home"))

    monkeypatch.setattr(lifecycle, "lock_waiting_for_index_run", refused)
    monkeypatch.setattr(signal, "signal", lambda *_a: None)  # the test process keeps its handlers
    daemon = lifecycle.Daemon(cfg)
    sent: list[tuple[str, ...]] = []

    class Told:
        enabled = True

        def send(self, *lines: str) -> None:
            sent.append(lines)

        def close(self) -> None:
            pass

    now = [0.0]
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) > 10_000:
            raise AssertionError("the home was waited for for good")
        now[0] += seconds

    daemon.notifier = Told()  # type: ignore[assignment]
    daemon._sleep, daemon._clock = nap, lambda: now[0]
    with pytest.raises(StoreError) as over:
        daemon.run()
    assert over.value.exit_code == ExitCode.INDEX_UNUSABLE == 5
    assert "cannot be used" in str(over.value)
    assert lifecycle.HOME_WAIT_MOST_S <= now[0] < lifecycle.HOME_WAIT_MOST_S + 2 * lifecycle.HOME_POLL_S
    assert any(line.startswith("STATUS=waiting") for lines in sent for line in lines)


def test_a_service_start_waits_for_whoever_holds_the_index_or_socket(tmp_path: Path, vault: Path) -> None:
    """Under a service manager (``send``) another daemon holding the index, or answering on the
    socket, is waited for like a `sidecar index` run, its STATUS= naming who, and the home is
    left alone meanwhile: it exited 4, which the unit does not restart, and the service stayed
    down after a person's foreground `serve` ended. Outside one (a person's `serve`) each is
    refused at once (exit 4)."""
    from sidecar.contracts.errors import DaemonRunningError, IndexRunError
    from sidecar.daemon import lifecycle
    from sidecar.daemon.process import INDEX_RUN, IndexLock, lock_waiting_for_index_run

    cfg = load_config(flags={"home": str(tmp_path / "home"), "vault.path": str(vault)}, env={})
    sent: list[tuple[str, ...]] = []

    def never(_s: float) -> None:
        raise AssertionError("waited")

    daemon = IndexLock(cfg.index_dir)
    daemon.acquire()
    with pytest.raises(DaemonRunningError) as refused:
        lock_waiting_for_index_run(cfg, None, never)
    assert not isinstance(refused.value, IndexRunError) and refused.value.exit_code == 4
    cfg.home.chmod(0o755)  # a home left readable: the start tightens it, a waiting one must not

    def daemon_ends(_s: float) -> None:
        assert stat.S_IMODE(cfg.home.stat().st_mode) == 0o755  # nothing changed while waiting
        daemon.release()

    lock = lock_waiting_for_index_run(cfg, lambda *lines: sent.append(lines), daemon_ends)
    assert len(sent) == 2 and sent[0][0].startswith("STATUS=waiting: another sidecar daemon"), sent
    assert f"pid {os.getpid()}" in sent[0][0] and sent[0][0].endswith("; taking over when it stops")
    # Another daemon may serve for days: the start is reported done (`systemctl start` and
    # `enable --now` waited for it with no end), the watchdog kept, no start timeout pushed out.
    assert sent[0][1:] == ("READY=1", "WATCHDOG=1"), sent
    assert sent[1][:2] == ("STATUS=starting", "EXTEND_TIMEOUT_USEC=90000000")
    lock.release()
    sent.clear()
    run = IndexLock(cfg.index_dir, by=INDEX_RUN)
    run.acquire()
    with pytest.raises(IndexRunError):
        lock_waiting_for_index_run(cfg, None, never)

    def run_ends(_s: float) -> None:
        run.release()

    lock = lock_waiting_for_index_run(cfg, lambda *lines: sent.append(lines), run_ends)
    assert len(sent) == 2 and sent[0][0].startswith("STATUS=waiting: the index")
    # A run ends by itself: the start waits for it.
    assert "READY=1" not in sent[0] and sent[0][1].startswith("EXTEND_TIMEOUT_USEC="), sent
    assert lock.path.read_text().startswith(f"pid {os.getpid()} starting since ")  # the lock's record
    lock.release()
    sent.clear()
    # A daemon serving another home on this socket: the lock is free, the socket is not.
    cfg.socket_path.parent.mkdir(parents=True, exist_ok=True)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(cfg.socket_path))
    other.listen(4)
    check = lifecycle.Daemon(cfg)._socket_free
    with pytest.raises(DaemonRunningError):
        lock_waiting_for_index_run(cfg, None, never, check=check)

    def other_ends(_s: float) -> None:
        other.close()
        cfg.socket_path.unlink()

    lock = lock_waiting_for_index_run(cfg, lambda *lines: sent.append(lines), other_ends, check=check)
    serving = f"STATUS=waiting: another sidecar daemon is already serving {cfg.socket_path}"
    assert sent[0][0].startswith(serving)
    if sys.platform.startswith("linux"):
        assert f"(pid {os.getpid()})" in sent[0][0]
    lock.release()


def test_a_wait_for_another_homes_daemon_on_the_socket_leaves_the_lock_alone(
    tmp_path: Path, vault: Path
) -> None:
    """A daemon of another home answering on this socket: each try took this home's index lock
    (writing its pid into index/.lock) before it probed the socket, and a `sidecar index` run
    on this home in that moment was refused, naming a daemon that serves nothing. The socket is
    probed first now; the lock is taken once it is free."""
    from sidecar.contracts.errors import DaemonRunningError
    from sidecar.daemon import lifecycle
    from sidecar.daemon.process import INDEX_RUN, IndexLock, lock_waiting_for_index_run

    cfg = load_config(flags={"home": str(tmp_path / "home"), "vault.path": str(vault)}, env={})
    cfg.socket_path.parent.mkdir(parents=True, exist_ok=True)
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    other.bind(str(cfg.socket_path))
    other.listen(4)
    seen: list[str] = []
    refused: list[str] = []
    free = lifecycle.Daemon(cfg)._socket_free

    def check() -> None:  # each socket probe while the other daemon answers: may a run take the index?
        run = IndexLock(cfg.index_dir, by=INDEX_RUN)
        try:
            run.acquire()
            run.release()
        except DaemonRunningError as exc:
            if len(seen) < 2:
                refused.append(str(exc))
        free()

    def tick(_s: float) -> None:
        lock_file = cfg.index_dir / ".lock"
        seen.append(lock_file.read_text() if lock_file.exists() else "")
        if len(seen) == 2:
            other.close()
            cfg.socket_path.unlink()

    lock = lock_waiting_for_index_run(cfg, lambda *_a: None, tick, check=check)
    assert lock.path.read_text().startswith(
        f"pid {os.getpid()} starting since "
    )  # taken once the socket was free
    lock.release()
    assert not any(s.startswith("pid ") for s in seen) and not refused, (seen, refused)


def test_a_service_daemon_refuses_another_homes_daemon_on_its_socket_after_a_bound(
    daemon_factory: Any, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two configurations naming one socket: the service's daemon of the second home waited for
    the first home's daemon for good (its status saying `waiting`). After a bounded wait it ends
    with exit 4 (not restarted) naming that daemon's home and configuration file and the setting
    to change, and doctor says the same."""
    from sidecar.clients.doctor import check_daemon
    from sidecar.contracts.errors import SharedSocketError
    from sidecar.daemon import lifecycle
    from sidecar.daemon.process import SHARED_SOCKET_WAIT_S

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    sock = run / "s.sock"
    conf_a = write(tmp_path / "a.yaml", f"socket: {sock}\n")
    conf_b = write(tmp_path / "b.yaml", f"socket: {sock}\n")
    first: DaemonProcess = daemon_factory(vault, name="a", keyword_only=True, extra=["--config", str(conf_a)])
    first.cfg = load_config(config_file=str(conf_a), flags={"home": str(first.home)}, env={})
    first.start()
    cfg = load_config(
        config_file=str(conf_b), flags={"home": str(tmp_path / "b"), "vault.path": str(vault)}, env={}
    )
    monkeypatch.setattr(signal, "signal", lambda *_a: None)  # the test process keeps its handlers
    daemon = lifecycle.Daemon(cfg)
    sent: list[tuple[str, ...]] = []

    class Told:
        enabled = True

        def send(self, *lines: str) -> None:
            sent.append(lines)

        def close(self) -> None:
            pass

    now = [0.0]

    def nap(seconds: float) -> None:
        if now[0] > 10 * SHARED_SOCKET_WAIT_S:
            raise AssertionError("the other home's daemon was waited for for good")
        now[0] += seconds

    daemon.notifier = Told()  # type: ignore[assignment]
    daemon._sleep, daemon._clock = nap, lambda: now[0]
    with pytest.raises(SharedSocketError) as refused:
        daemon.run()
    said = str(refused.value)
    assert refused.value.exit_code == ExitCode.SOCKET_IN_USE == 4  # RestartPreventExitStatus
    assert SHARED_SOCKET_WAIT_S <= now[0] <= SHARED_SOCKET_WAIT_S + 4, now
    assert f"serves the home {first.home} (configuration {conf_a})" in said, said
    assert f"not {cfg.home} (configuration {conf_b})" in said and "the `socket` setting" in said, said
    assert any(line.startswith("STATUS=waiting") for lines in sent for line in lines), sent
    assert not (cfg.home / "agents").exists()  # refused before anything was made in the home
    _socket, other, _health = check_daemon(cfg, probe_lock=False)
    assert not other.ok and other.verdict in said and other.todo in said, other
    assert first.health()["index"]["state"] == "ready"  # the one serving is left alone


def test_a_daemon_not_answering_health_yet_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another home's daemon binds its socket at once and answers only once its stores are open
    (a boot starting both services): a health ask in between got no answer, and that was kept for
    the holder for good, so this daemon waited for it for good as "another daemon". A failed ask is
    asked again at the next check; the answer, once there, names the other home."""
    import threading

    from sidecar.contracts.errors import DaemonRunningError, SharedSocketError
    from sidecar.contracts.protocol import ok_frame
    from sidecar.daemon import lifecycle

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    sock = run / "s.sock"
    cfg = load_config(config_file=None, flags={"home": str(tmp_path / "b"), "socket": str(sock)}, env={})
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock))
    listener.listen(8)  # bound, not answering yet: the other daemon opening its stores
    real = lifecycle.holder_health
    monkeypatch.setattr(lifecycle, "holder_health", lambda path: real(path, timeout=0.2))
    daemon = lifecycle.Daemon(cfg)
    now = [0.0]
    daemon._clock = lambda: now[0]
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn, contextlib.suppress(OSError):
                line = conn.makefile("rb").readline()
                if line:
                    answer = {"home": "/other/home", "pid": os.getpid(), "config_file": None}
                    conn.sendall(ok_frame(json.loads(line).get("id"), answer))

    answering = threading.Thread(target=serve, daemon=True)
    try:
        with pytest.raises(DaemonRunningError) as first:  # waited for as a daemon of this home
            daemon._socket_free()
        assert not isinstance(first.value, SharedSocketError), first.value
        answering.start()  # its stores open: it answers health now
        now[0] += 2.0  # the next check of the wait
        with pytest.raises(SharedSocketError) as refused:
            daemon._socket_free()
        assert "serves the home /other/home" in str(refused.value), refused.value
    finally:
        stop.set()
        if answering.is_alive():
            answering.join()
        listener.close()


def test_another_users_process_on_the_socket_is_refused_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two users' configurations naming one socket path (e.g. /tmp/sidecar.sock): another user's
    process holds it. It can never serve this user's home, and its health is not asked, so the
    service's daemon waited for it for good as "another daemon". Refused as a shared socket (the
    bounded wait, then exit 4) naming it as another user's process and the setting to change."""
    import tempfile

    from sidecar.contracts.errors import SharedSocketError
    from sidecar.daemon import lifecycle
    from sidecar.runtime import peer

    run = Path(tempfile.mkdtemp(prefix="sidecar-other-user-"))
    sock = run / "s.sock"
    other_uid = 65534 if os.getuid() == 0 else None
    code = (
        "import os,socket,sys;"
        + (f"os.setgid({other_uid});os.setuid({other_uid});" if other_uid is not None else "")
        + f"s=socket.socket(socket.AF_UNIX);s.bind({str(sock)!r});s.listen(8);print('up',flush=True);"
        "sys.stdin.read()"
    )
    run.chmod(0o777)
    other = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None and other.stdout.readline() == "up\n", other.poll()
        if other_uid is None:  # not root: the process is this user's; its peer is said to be another's
            other_uid = os.getuid() + 1
            monkeypatch.setattr(peer, "peer_uid", lambda _s: other_uid)
        cfg = load_config(config_file=None, flags={"home": str(tmp_path / "b"), "socket": str(sock)}, env={})
        daemon = lifecycle.Daemon(cfg)
        with pytest.raises(SharedSocketError) as refused:
            daemon._socket_free()
        said = str(refused.value)
        assert f"held by another user's process (pid {other.pid}, uid {other_uid})" in said, said
        assert "the `socket` setting" in said, said
        if os.getuid() == 0:  # the process is really another user's: doctor says the same
            from sidecar.clients.doctor import check_daemon

            _socket, holder, _health = check_daemon(cfg, probe_lock=False)
            assert not holder.ok and holder.verdict in said and holder.todo in said, holder
    finally:
        other.kill()
        other.communicate()  # closes its pipes
        shutil.rmtree(run, ignore_errors=True)


def test_a_start_refused_for_another_homes_daemon_is_not_reported_started(tmp_path: Path) -> None:
    """While the service's daemon waits the bounded time for another home's daemon on its socket,
    it said READY=1 (as for a daemon of its own home): `systemctl --user start` returned success
    and the unit failed 30 s later unseen. It sends its STATUS= and pushes the start timeout out,
    never READY, so the start itself fails with the refusal."""
    from sidecar.contracts.errors import SharedSocketError
    from sidecar.daemon.process import SHARED_SOCKET_WAIT_S, lock_waiting_for_index_run

    cfg = load_config(config_file=None, flags={"home": str(tmp_path / "home")}, env={})
    sent: list[tuple[str, ...]] = []
    now = [0.0]

    def check() -> None:
        raise SharedSocketError("the daemon on s.sock serves the home /other, not this one")

    def nap(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(SharedSocketError):
        lock_waiting_for_index_run(
            cfg, lambda *lines: sent.append(lines), nap, check=check, clock=lambda: now[0]
        )
    assert now[0] >= SHARED_SOCKET_WAIT_S and sent, (now, sent)
    lines = [line for each in sent for line in each]
    assert "READY=1" not in lines, sent
    assert all(any(line.startswith("EXTEND_TIMEOUT_USEC=") for line in each) for each in sent), sent
    assert any(line.startswith("STATUS=waiting: the daemon on s.sock serves") for line in lines), sent


def test_a_service_daemon_waits_for_a_foreground_serve_then_takes_over(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """A person's `sidecar serve` holding the home: the daemon the service starts waits (log
    daemon_running_wait, STATUS= waiting), then serves once it stopped; it exited 4 and the unit
    stayed down."""
    path = tmp_path / "notify.sock"
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(str(path))
    sink.settimeout(1)
    person: DaemonProcess = daemon_factory(vault, keyword_only=True).start()
    service: DaemonProcess = daemon_factory(vault, keyword_only=True, env={"NOTIFY_SOCKET": str(path)})
    service.start(wait=None)
    exited = lambda: service.proc is not None and service.proc.poll() is not None  # noqa: E731
    waiting = _notices(sink, lambda seen: exited() or any(s.startswith("STATUS=waiting") for s in seen))
    assert any(f"another sidecar daemon is already serving {person.socket}" in s for s in waiting), waiting
    assert "READY=1" in waiting, waiting  # `systemctl start` returns while it waits
    assert service.proc is not None and service.proc.poll() is None  # waiting, not exited 4
    assert "daemon_running_wait" in service.log.read_text()
    assert person.health()["index"]["state"] == "ready"  # the one serving is left alone
    assert person.stop() == 0
    ready = _notices(sink, lambda seen: exited() or "READY=1" in seen)
    sink.close()
    assert "READY=1" in ready and "STATUS=starting" in ready, ready
    service.wait_for(lambda h: h["pid"] == service.pid and h["index"]["state"] == "ready", 60)


def test_a_launchd_agent_waits_for_a_foreground_serve_as_under_systemd(
    daemon_factory: Any, vault: Path
) -> None:
    """launchd sets no notify socket, only XPC_SERVICE_NAME (the agent's label): its daemon exited
    4 while a person's `sidecar serve` held the home, started again every 30 s with a line each
    time. It waits as systemd's does (log daemon_running_wait), serves once that one stopped, and
    tells it runs as a service (health ``service``)."""
    plist = plistlib.loads((Path(__file__).parent.parent / "launchd" / "dev.sidecar.plist").read_bytes())
    launchd = {"XPC_SERVICE_NAME": plist["Label"]}
    person: DaemonProcess = daemon_factory(vault, keyword_only=True, env={"XPC_SERVICE_NAME": ""}).start()
    assert person.health()["service"] is False
    agent: DaemonProcess = daemon_factory(vault, keyword_only=True, env=launchd)
    agent.start(wait=None)
    deadline = time.monotonic() + 60
    while "daemon_running_wait" not in agent.log.read_text() and time.monotonic() < deadline:
        assert agent.proc is not None and agent.proc.poll() is None, agent.log.read_text()  # not exited 4
        time.sleep(0.1)
    assert f"another sidecar daemon is already serving {person.socket}" in agent.log.read_text()
    assert agent.proc is not None and agent.proc.poll() is None
    assert person.stop() == 0
    health = agent.wait_for(lambda h: h["pid"] == agent.pid and h["index"]["state"] == "ready", 60)
    assert health["service"] is True


@pytest.mark.model
def test_a_launchd_agent_ends_an_exit_a_restart_cannot_help_with_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """launchd restarts every failed exit of the agent (KeepAlive SuccessfulExit false) and cannot
    skip one by its code: a refusal a restart cannot help (exit 2, 3 or 4, the codes the systemd
    unit's RestartPreventExitStatus names) was started again every 30 s for good. Under launchd
    (XPC_SERVICE_NAME = the plist's label) the daemon logs the refusal and exits 0; elsewhere the
    code is kept."""
    from sidecar.clients.cli import main
    from sidecar.clients.service import NO_RESTART

    plist = plistlib.loads((Path(__file__).parent.parent / "launchd" / "dev.sidecar.plist").read_bytes())
    unit = (Path(__file__).parent.parent / "systemd" / "sidecar.service").read_text()
    assert f"RestartPreventExitStatus={' '.join(str(int(c)) for c in NO_RESTART)}" in unit
    assert plist["KeepAlive"] == {"SuccessfulExit": False, "Crashed": True}
    broken = write(tmp_path / "broken.yaml", "search: [\n")
    bad_config = ["serve", "--config", str(broken), "--home", str(tmp_path / "home")]
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.delenv("XPC_SERVICE_NAME", raising=False)
    assert main(bad_config) == ExitCode.CONFIG  # a person's `sidecar serve`: the code
    capsys.readouterr()
    monkeypatch.setenv("XPC_SERVICE_NAME", plist["Label"])
    assert main(bad_config) == 0
    err = capsys.readouterr().err
    assert str(broken) in err and "not_restarted exit=3" in err, err
    assert f"launchctl kickstart gui/$(id -u)/{plist['Label']}" in err, err
    assert main(["serve", "--no-such-flag"]) == 0  # a bad command line in the agent's file
    assert "not_restarted exit=2" in capsys.readouterr().err
    assert main(["status", "--config", str(broken)]) != 0  # a client keeps its code


def test_sd_notify_ready_status_watchdog_stopping(daemon_factory: Any, vault: Path, tmp_path: Path) -> None:
    """With NOTIFY_SOCKET set the daemon sends READY=1, STATUS= lines, WATCHDOG=1 and STOPPING=1."""
    path = tmp_path / "notify.sock"
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(str(path))
    sink.settimeout(20)
    d: DaemonProcess = daemon_factory(vault, env={"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "2000000"})
    d.start()
    seen: list[str] = []
    deadline = time.monotonic() + 30
    # The "ready" status follows the first sweep and its vectors: read until it came too.
    while time.monotonic() < deadline and not (
        {"READY=1", "WATCHDOG=1"} <= set(seen) and any(s.startswith("STATUS=ready") for s in seen)
    ):
        seen.extend(sink.recv(4096).decode().splitlines())
    assert "READY=1" in seen and "WATCHDOG=1" in seen
    assert any(s.startswith("STATUS=ready: 4 notes") for s in seen), seen
    d.stop()
    rest: list[str] = []
    sink.settimeout(2)
    try:
        while True:
            rest.extend(sink.recv(4096).decode().splitlines())
    except TimeoutError:
        pass
    sink.close()
    assert "STOPPING=1" in rest


@pytest.mark.model
def test_sighup_reloads_ranking_weights(daemon_factory: Any, vault: Path, tmp_path: Path) -> None:
    """Editing search.vectorWeight and sending SIGHUP changes scores without a restart."""
    cfg_file = tmp_path / "sidecar.yaml"
    cfg_file.write_text("search:\n  vectorWeight: 1.0\n")
    d: DaemonProcess = daemon_factory(vault, extra=["--config", str(cfg_file)]).start()
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    pid = d.proc.pid if d.proc else 0

    def top() -> list[float]:
        hits = d.call("search", {"query": "outboard engine spark plugs and tomatoes", "limit": 5})["hits"]
        return [h["score"] for h in hits]

    before = top()
    cfg_file.write_text("search:\n  vectorWeight: 0.0\n")
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + 20
    while "config_reloaded" not in d.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "config_reloaded changed=search.vectorWeight" in d.log.read_text()
    after = top()
    assert after != before
    assert d.proc is not None and d.proc.pid == pid and d.proc.poll() is None

    def reloaded(key: str, was: int) -> None:
        # Written within 30 s of the last reload, the file may be read again by the daemon's own
        # tick before this reload asks (its re-check of a file changing right after a reload):
        # then this one finds nothing left to change, and the log names the key once more.
        changed = d.call("reload")["changed"]
        said = d.log.read_text().count(f"config_reloaded changed={key}\n")
        assert changed == [key] or (changed == [] and said == was + 1), (changed, said, was)

    def times(key: str) -> int:
        return d.log.read_text().count(f"config_reloaded changed={key}\n")

    was = times("search.vectorWeight")
    cfg_file.write_text("search:\n  vectorWeight: 0.5\n")
    reloaded("search.vectorWeight", was)
    # The defaults a request does not give are the reloaded ones too: a floor above every hit
    # empties the search and a limit of 1 keeps one hit, without a restart.
    assert len(d.call("search", {"query": "outboard engine spark plugs and tomatoes"})["hits"]) > 1
    was = times("search.minScore")
    cfg_file.write_text("search:\n  vectorWeight: 0.5\n  minScore: 50\n")
    reloaded("search.minScore", was)
    assert d.call("search", {"query": "outboard engine spark plugs and tomatoes"})["hits"] == []
    cfg_file.write_text("search:\n  vectorWeight: 0.5\n  limit: 1\n")
    d.call("reload")
    assert len(d.call("search", {"query": "outboard engine spark plugs and tomatoes"})["hits"]) == 1
    cfg_file.write_text("search:\n  vectorWeight: 7\n")
    with pytest.raises(Exception, match="vectorWeight"):
        d.call("reload")
    assert d.health()["index"]["state"] == "ready"
    # A failed reload shows in status, not only in the log; a key read only at start is named.
    assert "config" in [p["area"] for p in d.health()["problems"]["active"]]
    cfg_file.write_text("search:\n  vectorWeight: 0.5\n  limit: 1\nwatch:\n  pollSeconds: 77\n")
    answer = d.call("reload")
    assert answer["changed"] == [] and answer["needsRestart"] == ["watch.pollSeconds"]
    areas = [p["area"] for p in d.health()["problems"]["active"]]
    assert "config" not in areas and "restart" in areas  # status says a restart is due
    assert "config_needs_restart keys=watch.pollSeconds" in d.log.read_text()
    # A key of an older release that a reload brings: the log says what to write instead (the
    # query commands an agent runs leave it unsaid).
    cfg_file.write_text(
        "search:\n  vectorWeight: 0.5\n  limit: 1\n  rareTermChunks: 3\nwatch:\n  pollSeconds: 77\n"
    )
    d.call("reload")
    assert (
        "config_warning " in d.log.read_text()
        and "rareTermChunks is now search.rareTermNotes" in d.log.read_text()
    )


def test_a_reload_of_an_emptied_or_foreign_file_applies_nothing(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """A file emptied (an editor's first step of a write, `cat > file`) or naming another socket is
    refused whole, the exclusions stay (applied, an emptied file brought excluded notes back into
    search); two reloads close together end with the last file's values, whichever thread
    finished last (they ran in parallel and an older, slower file could win)."""
    cfg_file = tmp_path / "sidecar.yaml"
    cfg_file.write_text("index:\n  exclude: [Recipes/]\n")
    d: DaemonProcess = daemon_factory(vault, extra=["--config", str(cfg_file)], keyword_only=True).start()
    assert d.health()["index"]["excluded"]
    cfg_file.write_text("")
    with pytest.raises(Exception, match="empty"):
        d.call("reload")
    cfg_file.write_text(f"socket: {tmp_path / 'other.sock'}\nindex:\n  exclude: []\n")
    with pytest.raises(Exception, match=r"other\.sock") as refused:
        d.call("reload")
    assert str(refused.value).lower().count("nothing") == 1, refused.value  # said once
    assert "config" in [p["area"] for p in d.health()["problems"]["active"]]
    cfg_file.write_text("index:\n  exclude: [Recipes/]\n")
    assert d.call("reload")["changed"] == []  # the exclusion never left

    def cli_reload() -> subprocess.CompletedProcess[str]:  # `sidecar reload`: SIGHUP for launchd
        argv = [sys.executable, "-m", "sidecar", "reload", "--config", str(cfg_file), "--home", str(d.home)]
        return subprocess.run(argv, capture_output=True, text=True, env=d.env, timeout=60, check=False)

    answer = cli_reload()
    assert answer.returncode == 0 and "reloaded; applied: nothing changed" in answer.stdout
    cfg_file.write_text("")
    answer = cli_reload()
    assert answer.returncode != 0 and "empty" in answer.stderr
    cfg_file.write_text("index:\n  exclude: [Recipes/]\n")
    pid = d.proc.pid if d.proc else 0
    slow = "search:\n  vectorWeight: 0.11\n" + "# padding, slow to read\n" * 20_000
    cfg_file.write_text(slow + "index:\n  exclude: [Recipes/]\n")
    os.kill(pid, signal.SIGHUP)
    time.sleep(0.005)
    cfg_file.write_text("search:\n  vectorWeight: 0.37\nindex:\n  exclude: [Recipes/]\n")
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + 20
    while d.log.read_text().count("config_reloaded") < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert d.call("reload")["changed"] == []  # the running values are the file's last ones


def test_a_reload_refusing_a_moved_vault_says_first_that_it_takes_a_restart(
    make_cfg: Any, vault: Path, tmp_path: Path
) -> None:
    """A vault moved on purpose (vault.path changed in the file) was refused with a guess first,
    "a file cut short or emptied?": the refusal says first that the key takes a restart, and
    guesses at a cut file only when the file no longer sets the key."""
    import dataclasses

    from sidecar.contracts.errors import ConfigError
    from sidecar.daemon.lifecycle import Daemon

    moved = tmp_path / "moved-vault"
    moved.mkdir()
    cfg_file = tmp_path / "sidecar.yaml"
    cfg = dataclasses.replace(make_cfg(vault), source_file=cfg_file)
    new = dataclasses.replace(cfg, vault=dataclasses.replace(cfg.vault, path=moved))
    daemon = Daemon(cfg, reload_config=lambda: new)
    cfg_file.write_text(f"vault:\n  path: {moved}\n")
    with pytest.raises(ConfigError) as refused:
        daemon._loaded()
    said = str(refused.value)
    assert said.startswith("vault.path changed in the file") and "takes a restart" in said, said
    assert "cut short" not in said and str(moved) in said
    cfg_file.write_text("index:\n  exclude: []\n")  # the rest of the file lost
    with pytest.raises(ConfigError, match=r"^vault\.path changed in the file .*takes a restart.*cut short"):
        daemon._loaded()


def test_reload_names_changed_keys_by_their_config_paths(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """`reload`'s `changed` and the `config_reloaded` log line name keys as the file spells them
    (search.minScore), as `needsRestart` does, recall.* included (it is applied too)."""
    cfg_file = tmp_path / "sidecar.yaml"
    cfg_file.write_text("search:\n  vectorWeight: 0.5\n")
    d: DaemonProcess = daemon_factory(vault, extra=["--config", str(cfg_file)], keyword_only=True).start()
    cfg_file.write_text(
        "search:\n  vectorWeight: 0.4\n  minScore: 0.5\n  boosts:\n    wiki: 1.5\nrecall:\n  limit: 3\n"
        "index:\n  exclude: [Recipes/]\nmemory:\n  maxNoteBytes: 7000\n"
    )
    answer = d.call("reload")
    assert answer["changed"] == [  # in the order of the example file
        "search.minScore",
        "search.vectorWeight",
        "search.boosts.wiki",
        "recall.limit",
        "index.exclude",
    ], answer
    assert answer["needsRestart"] == ["memory.maxNoteBytes"]
    assert (
        "config_reloaded changed=search.minScore,search.vectorWeight,search.boosts.wiki,recall.limit,"
        "index.exclude" in d.log.read_text()
    )


# --- the service runs what the installing command saw --------------------------------------------


def _sidecar(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        env=env, capture_output=True, text=True, timeout=120, check=False, cwd=cwd,
    )  # fmt: skip


def _daemon_env(unit: str, **extra: str) -> dict[str, str]:
    """The environment the service manager gives the daemon of ``unit`` (nothing of this shell's)."""
    from sidecar.clients.service import installed_setup

    base = {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "XDG_"))}
    return {**base, **installed_setup(unit, "linux").env, **extra}


def test_install_carries_the_flags_and_variables_into_the_service(tmp_path: Path, vault: Path) -> None:
    """`service install --home H --socket S` with SIDECAR_* variables: the unit's daemon gets the
    same home, socket and settings (it listened on the default socket and took none of the
    variables: the service and its clients never met); doctor names a unit whose socket differs
    from its own instead of calling it "ok"."""
    from sidecar.clients.doctor_checks import Probes
    from sidecar.clients.doctor_service import check_service
    from sidecar.clients.service import installed_setup

    (tmp_path / "sockdir").mkdir(mode=0o700)
    home, sock = tmp_path / "h10", tmp_path / "sockdir" / "s.sock"
    env = {**os.environ, "SIDECAR_EMBEDDER_ENABLED": "false", "SIDECAR_VAULT_PATH": str(vault)}
    out = _sidecar("service", "install", "--home", str(home), "--socket", str(sock), env=env)
    assert out.returncode == 0, out.stderr
    unit = (tmp_path / "userhome" / ".config" / "systemd" / "user" / "sidecar.service").read_text()
    pinned = installed_setup(unit, "linux").env
    assert pinned["SIDECAR_HOME"] == str(home) and pinned["SIDECAR_SOCKET"] == str(sock)
    assert pinned["SIDECAR_EMBEDDER_ENABLED"] == "false" and pinned["SIDECAR_VAULT_PATH"] == str(vault)
    # The daemon's own view, under the service manager's XDG_RUNTIME_DIR and none of this shell.
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    seen = _sidecar(
        "config", "check", "--json", env=_daemon_env(unit, XDG_RUNTIME_DIR=str(runtime)), cwd=Path("/")
    )
    values = json.loads(seen.stdout)
    assert values["socket"] == str(sock) and values["values"]["home"]["value"] == str(home)
    assert values["values"]["embedder.enabled"]["value"] is False
    assert values["values"]["vault.path"]["value"] == str(vault)
    probes = Probes(home_dir=tmp_path / "userhome", systemctl="/bin/false")
    bare = load_config(flags={"home": str(home)}, env={"SIDECAR_EMBEDDER_ENABLED": "false"})
    check = check_service(bare, probes)
    assert not check.ok and f"another socket ({sock})" in check.verdict, check
    same = load_config(
        flags={"home": str(home), "socket": str(sock), "vault.path": str(vault)},
        env={"SIDECAR_EMBEDDER_ENABLED": "false"},
    )
    assert "socket" not in check_service(same, probes).verdict
    # The launchd agent carries the same environment.
    mac = service_file(same, tmp_path, platform="darwin")
    assert plistlib.loads(mac.text.encode())["EnvironmentVariables"]["SIDECAR_SOCKET"] == str(sock)


def test_a_service_installed_before_its_configuration_reads_the_file_the_shell_names(tmp_path: Path) -> None:
    """Installed from a shell with XDG_CONFIG_HOME and no configuration file yet, the unit names
    no --config: its daemon read ~/.config/sidecar/config.yaml (the service manager passes no
    XDG_CONFIG_HOME on), while `config path`, `config check` and the install note named
    $XDG_CONFIG_HOME/sidecar/config.yaml. The unit now carries XDG_CONFIG_HOME, and the note
    names the file the daemon will read."""
    xdg = tmp_path / "dotfiles"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_")}
    env |= {"XDG_CONFIG_HOME": str(xdg), "SIDECAR_HOME": str(tmp_path / "h11")}
    out = _sidecar("service", "install", "--dry-run", env=env)
    assert out.returncode == 0, out.stderr
    wanted = xdg / "sidecar" / "config.yaml"
    assert _sidecar("config", "path", env=env).stdout == f"{wanted}\n"
    assert f"reads {wanted} at its next start" in out.stderr
    assert "--config" not in out.stdout
    write(wanted, "search:\n  limit: 4\n")  # written after the install, where the note says
    seen = _sidecar("config", "check", "--json", env=_daemon_env(out.stdout), cwd=Path("/"))
    values = json.loads(seen.stdout)
    assert values["file"] == str(wanted) and values["values"]["search.limit"]["value"] == 4
    mac = service_file(load_config(env={"XDG_CONFIG_HOME": str(xdg)}), tmp_path, platform="darwin")
    assert plistlib.loads(mac.text.encode())["EnvironmentVariables"]["XDG_CONFIG_HOME"] == str(xdg)
    plain = service_file(load_config(env={}), tmp_path, platform="linux", sandbox=False)
    assert "XDG_CONFIG_HOME" not in plain.text  # the default needs nothing pinned


def test_a_service_installed_without_xdg_runtime_dir_listens_where_its_shell_looks(tmp_path: Path) -> None:
    """Installed from a shell without XDG_RUNTIME_DIR (su, some SSH sessions, containers), the
    unit pins the socket that shell derives (the service manager's own XDG_RUNTIME_DIR put the
    daemon elsewhere: `status` said "not running" and told to start a second daemon), and says
    how to make every shell agree."""
    env = {**os.environ, "SIDECAR_HOME": str(tmp_path / "h")}
    out = _sidecar("service", "install", env=env)
    assert out.returncode == 0 and "no XDG_RUNTIME_DIR" in out.stderr and "socket:" in out.stderr
    unit = (tmp_path / "userhome" / ".config" / "systemd" / "user" / "sidecar.service").read_text()
    runtime = tmp_path / "rt"
    runtime.mkdir(mode=0o700)
    daemon = _sidecar("config", "check", "--json", env=_daemon_env(unit, XDG_RUNTIME_DIR=str(runtime)))
    client = _sidecar("config", "check", "--json", env=env)
    assert json.loads(daemon.stdout)["socket"] == json.loads(client.stdout)["socket"]
    assert json.loads(client.stdout)["socket"] == str(tmp_path / "h" / "run" / "sidecar.sock")


@pytest.mark.parametrize("where", ["home", "config", "vault", "socket", "program"])
def test_private_tmp_is_left_out_when_the_daemon_needs_tmp(tmp_path: Path, where: str) -> None:
    """Under PrivateTmp= the unit sees its own empty /tmp: a configuration there is "not found"
    (exit 3, never restarted), a home there is made afresh and deleted at every stop (the agents'
    memory with it), a vault there never appears. PrivateTmp=yes was written for all of these."""
    from sidecar.clients.service import Launcher, systemd_unit

    tmp = Path("/tmp") / f"sidecar-t-{os.getpid()}"  # named, never made
    paths = {
        "home": "/srv/sidecar/home",
        "socket": "/srv/sidecar/run/s.sock",
        "vault.path": "/srv/notes",
    }
    config: Path | None = None
    if where == "config":
        config = write(tmp_path / "c.yaml", "")
        assert str(config).startswith(("/tmp/", "/var/tmp/")), "tmp_path is expected in /tmp"
    elif where in ("home", "socket"):
        paths[where] = str(tmp / where)
    elif where == "vault":
        paths["vault.path"] = str(tmp / "notes")
    cfg = load_config(flags=paths, env={})
    program = str(tmp / "venv" / "bin" / "sidecar") if where == "program" else "/opt/sidecar/bin/sidecar"
    text = systemd_unit(cfg, Launcher((program,)), config, sandbox=True)
    assert "PrivateTmp=yes" not in text and "# PrivateTmp= is left out" in text
    if where == "home":  # its folder goes with a reboot: the sandbox lets the daemon make it again
        writable = next(x for x in text.splitlines() if x.startswith("ReadWritePaths=")).split("=", 1)[1]
        assert "-/tmp" in writable.split()
    away = {"home": "/srv/sidecar/home", "socket": "/srv/sidecar/run/s.sock", "vault.path": "/srv/notes"}
    # Nor the default file the daemon reads once written (the test's HOME lies in /tmp).
    outside = load_config(flags=away, env={"XDG_CONFIG_HOME": "/srv/config"})
    clean = systemd_unit(outside, Launcher(("/opt/sidecar/bin/sidecar",)), None, True)
    assert "PrivateTmp=yes" in clean


def test_run_as_python_dash_m_the_service_runs_the_interpreter(tmp_path: Path) -> None:
    """Run as `python -m sidecar` with no `sidecar` script beside the interpreter, the unit and
    the MCP snippets start the interpreter with `-m sidecar` and the PYTHONPATH that found it (they
    named sidecar/__main__.py, which is no program: 203/EXEC every 5 s for ever); that command
    line runs from anywhere with only the unit's environment."""
    import sysconfig

    from sidecar.clients.service import installed_setup

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3"
    python.symlink_to(sys.executable)  # outside its venv: the venv's packages come by PYTHONPATH
    path = os.pathsep.join([str(Path(__file__).resolve().parent.parent), sysconfig.get_paths()["purelib"]])
    env = {**os.environ, "PYTHONPATH": path, "SIDECAR_HOME": str(tmp_path / "h")}
    out = subprocess.run(
        [str(python), "-m", "sidecar", "service", "install", "--dry-run"],
        env=env, capture_output=True, text=True, timeout=120, check=True, cwd=tmp_path,
    )  # fmt: skip
    setup = installed_setup(out.stdout, "linux")
    assert setup.argv[:4] == (str(python), "-m", "sidecar", "serve"), setup.argv
    assert "__main__" not in out.stdout and setup.env["PYTHONPATH"] == path
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **setup.env}
    ran = subprocess.run(
        [*setup.argv[:3], "--version"],
        env=clean,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd="/",
    )
    assert ran.returncode == 0 and ran.stdout.startswith("sidecar "), ran.stderr
    doctor = subprocess.run(
        [str(python), "-m", "sidecar", "doctor", "--json"],
        env={**env, "SIDECAR_EMBEDDER_ENABLED": "false"}, capture_output=True, text=True, timeout=120,
        check=False, cwd=tmp_path,
    )  # fmt: skip
    server = json.loads(doctor.stdout)["mcp"]["claudeCode"]["json"]["mcpServers"]["sidecar"]
    assert server["command"] == str(python) and server["args"][:3] == ["-m", "sidecar", "mcp"]
    assert server["env"]["PYTHONPATH"] == path


def test_launchd_commands_quote_paths_and_stop_by_label(tmp_path: Path) -> None:
    """The printed launchctl commands paste as they are for a home with blanks (the path was
    split at the blank), and the stop command needs no file (bootout with the plist's path reads
    the plist, which `service uninstall` has removed)."""
    home_dir = tmp_path / "svc home ü"
    cfg = load_config(flags={"home": str(tmp_path / "h")}, env={})
    mac = service_file(cfg, home_dir, platform="darwin")
    assert shlex.split(mac.enable)[-1] == str(mac.path)
    assert mac.disable == f"launchctl bootout gui/$(id -u)/{LABEL}" and str(home_dir) not in mac.disable
    data = plistlib.loads(mac.text.encode())
    assert data["KeepAlive"] == {"SuccessfulExit": False, "Crashed": True}


def test_uninstall_removes_the_enabling_link_and_says_how_to_stop_it(tmp_path: Path) -> None:
    """`service uninstall` removes the unit and the link `enable` made, and prints a stop command
    that works without the file (`systemctl --user disable --now sidecar` after the removal
    failed: "unit sidecar.service does not exist")."""
    env = {**os.environ, "SIDECAR_HOME": str(tmp_path / "h")}
    assert _sidecar("service", "install", env=env).returncode == 0
    user = tmp_path / "userhome" / ".config" / "systemd" / "user"
    link = user / "default.target.wants" / "sidecar.service"
    link.parent.mkdir()
    link.symlink_to(user / "sidecar.service")
    gone = _sidecar("service", "uninstall", env=env)
    assert gone.returncode == 0 and not link.is_symlink() and not (user / "sidecar.service").exists()
    assert f"removed {link}" in gone.stdout
    assert "systemctl --user stop sidecar; systemctl --user daemon-reload" in gone.stdout
    assert "disable" not in gone.stdout


def test_service_commands_name_what_is_in_the_way(tmp_path: Path) -> None:
    """Odd file states give one `sidecar: …` line, never a traceback: ~/.config/systemd a file, a
    folder where the unit belongs (install, uninstall, status and doctor), a file where the home
    belongs."""
    env = {**os.environ, "SIDECAR_HOME": str(tmp_path / "h")}
    config = tmp_path / "userhome" / ".config"
    write(config / "systemd", "")
    out = _sidecar("service", "install", env=env)
    assert out.returncode == ExitCode.REQUEST_FAILED and "Traceback" not in out.stderr
    assert f"sidecar: cannot read the service file {config}/systemd/user/sidecar.service: " in out.stderr
    assert f"{config / 'systemd'} is a file where a folder belongs" in out.stderr
    (config / "systemd").unlink()
    (config / "systemd" / "user" / "sidecar.service").mkdir(parents=True)
    for action in ("install", "uninstall", "status"):
        out = _sidecar("service", action, env=env)
        assert out.returncode == ExitCode.REQUEST_FAILED and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.startswith("sidecar: ") and out.stderr.count("\n") == 1, out.stderr
    doctor = _sidecar("doctor", env={**env, "SIDECAR_EMBEDDER_ENABLED": "false"})
    assert "Traceback" not in doctor.stderr and "FAIL  service" in doctor.stdout
    (config / "systemd" / "user" / "sidecar.service").rmdir()
    hfile = write(tmp_path / "hfile", "")
    out = _sidecar("service", "install", env={**env, "SIDECAR_HOME": str(hfile)})
    assert out.returncode == ExitCode.REQUEST_FAILED and "Traceback" not in out.stderr
    assert f"{hfile} is a file where a folder belongs" in out.stderr


def test_install_refuses_a_configuration_from_a_pipe(tmp_path: Path) -> None:
    """`--config <(…)` names a pipe gone once the command ends: the unit would name
    /proc/<pid>/fd/pipe:[…] and fail every start with exit 3."""
    env = {**os.environ, "SIDECAR_HOME": str(tmp_path / "h")}
    out = subprocess.run(
        [sys.executable, "-m", "sidecar", "service", "install", "--config", "/dev/stdin"],
        env=env, capture_output=True, text=True, timeout=60, check=False, input="logging:\n  level: info\n",
    )  # fmt: skip
    assert out.returncode == ExitCode.CONFIG and "not a regular file" in out.stderr, out.stderr
    assert not (tmp_path / "userhome" / ".config" / "systemd").exists()
    doctor = subprocess.run(
        [sys.executable, "-m", "sidecar", "doctor", "--config", "/dev/stdin"],
        env={**env, "SIDECAR_EMBEDDER_ENABLED": "false"}, capture_output=True, text=True, timeout=120,
        check=False, input="logging:\n  level: info\n",
    )  # fmt: skip
    assert "is not a file (a pipe?)" in doctor.stdout, doctor.stdout


def test_a_configuration_folder_that_cannot_be_looked_into(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sudo -u` keeping HOME, or a service user: the default file's folder cannot be searched.
    Without a file named that is a warning and no file (Path.exists raised PermissionError: a
    traceback from every command); a file named there is a one-line configuration error."""
    from sidecar.contracts.errors import ConfigError

    hidden = tmp_path / "xdg" / "sidecar"
    real_exists = Path.exists

    def exists(self: Path, *args: Any, **kwargs: Any) -> bool:
        if self.is_relative_to(hidden):
            raise PermissionError(13, "Permission denied", str(self))
        return real_exists(self, *args, **kwargs)

    monkeypatch.setattr(Path, "exists", exists)
    cfg = load_config(env={"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert cfg.source_file is None
    assert any("cannot be checked: Permission denied; not read" in w for w in cfg.warnings)
    with pytest.raises(ConfigError, match="cannot be checked: Permission denied"):
        load_config(config_file=str(hidden / "config.yaml"), env={})


def test_install_says_what_it_replaces(tmp_path: Path) -> None:
    """A unit written for another home is replaced with a word about it (the daemon serving the old
    home was silently cut off at the next restart)."""
    env = {**os.environ, "SIDECAR_HOME": str(tmp_path / "old")}
    assert _sidecar("service", "install", env=env).returncode == 0
    again = _sidecar("service", "install", env=env)
    assert "held another setup" not in again.stderr
    moved = _sidecar("service", "install", env={**env, "SIDECAR_HOME": str(tmp_path / "new")})
    assert moved.returncode == 0 and "held another setup" in moved.stderr
    assert f"the home {tmp_path / 'old'} -> {tmp_path / 'new'}" in moved.stderr
    # The configuration and state folders the unit pins are said too (the file read when none is
    # named; the home's record and consent).
    xdg = _sidecar("service", "install", env={**env, "SIDECAR_HOME": str(tmp_path / "new"),
                                               "XDG_STATE_HOME": str(tmp_path / "st")})  # fmt: skip
    assert xdg.returncode == 0 and f"-> {tmp_path / 'st'}" in xdg.stderr, xdg.stderr


def test_the_sandboxed_service_may_write_the_state_folder(tmp_path: Path) -> None:
    """The home's identity is recorded in the state folder (outside the home): under the unit's
    ProtectSystem=strict it was read-only, so a service never recorded it and a restart on an
    unmounted share's bare mount point was taken as the home. The unit lists it writable,
    install makes it, and a state folder of XDG_STATE_HOME goes into the unit's environment."""
    from sidecar.clients.service import _outside_home, pinned_env

    state = Path("/var/lib/sidecar-test-state")  # outside /tmp (listed whole there); not created
    cfg = load_config(flags={"home": str(tmp_path / "home")}, env={"XDG_STATE_HOME": str(state)})
    assert cfg.state_dir == state / "sidecar"
    unit = service_file(cfg, tmp_path, platform="linux", sandbox=True)
    writable = next(line for line in unit.text.splitlines() if line.startswith("ReadWritePaths="))
    assert f"-{state / 'sidecar'}" in writable.split("=", 1)[1].split(), writable
    assert state / "sidecar" in _outside_home(cfg)  # what install makes (``prepare``)
    assert ("XDG_STATE_HOME", str(state)) in pinned_env(cfg)
    default = load_config(flags={"home": str(tmp_path / "home")}, env={})
    assert all(name != "XDG_STATE_HOME" for name, _ in pinned_env(default))
    example = (Path(__file__).parent.parent / "systemd" / "sidecar.service").read_text()
    assert "-%h/.local/state/sidecar" in example


def test_the_launchd_agent_carries_the_installing_shells_language(tmp_path: Path) -> None:
    """launchd starts an agent with no LANG, so the week start of the Calendar plugin's "Same as
    system" read Monday on a US Mac: the plist pins the language the installing shell has (the
    one the daemon reads), and none when that shell has none."""
    from sidecar.vault.weekstart import week_start_in

    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "home"), "LANG": "en_US.UTF-8"})
    env = plistlib.loads(service_file(cfg, tmp_path, platform="darwin").text.encode())["EnvironmentVariables"]
    assert env["LANG"] == "en_US.UTF-8"
    served = load_config(env=env)
    assert week_start_in({}, served.system_locale)[0] == 6  # Sunday, as the plugin shows it there
    bare = load_config(env={"SIDECAR_HOME": str(tmp_path / "home")})
    env = plistlib.loads(service_file(bare, tmp_path, platform="darwin").text.encode())[
        "EnvironmentVariables"
    ]
    assert "LANG" not in env


@pytest.mark.parametrize(
    "lang", ["C", "POSIX", "  ", "C.UTF-8", "a\x01b", "en_US.UTF-8\n", "de_DE; rm -rf ~"]
)
def test_the_launchd_agent_pins_no_language_that_names_none(tmp_path: Path, lang: str) -> None:
    """C, POSIX, a blank or a value not shaped as a locale's name is not pinned into the agent
    (it was written as it came, and a control character stopped the install with plistlib's
    ValueError): the plist is written without LANG."""
    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "home"), "LANG": lang})
    env = plistlib.loads(service_file(cfg, tmp_path, platform="darwin").text.encode())["EnvironmentVariables"]
    assert "LANG" not in env


def test_the_launchd_agent_language_without_a_codeset_gets_utf8(tmp_path: Path) -> None:
    """A language without a codeset (LANGUAGE=de_DE:en gives "de_DE") is pinned as de_DE.UTF-8: a
    bare de_DE is ISO8859-1 on macOS, and the daemon's text encoding would follow it."""
    cfg = load_config(
        env={"SIDECAR_HOME": str(tmp_path / "home"), "LANGUAGE": "de_DE:en", "LANG": "en_US.UTF-8"}
    )
    env = plistlib.loads(service_file(cfg, tmp_path, platform="darwin").text.encode())["EnvironmentVariables"]
    assert env["LANG"] == "de_DE.UTF-8"


@pytest.mark.parametrize("zone", ["America/Argentina/Buenos_Aires", ":Europe/Berlin", "zone file"])
def test_the_service_carries_the_installing_shells_time_zone(tmp_path: Path, zone: str) -> None:
    """The unit and the plist set no TZ: the user manager starts the daemon in /etc/localtime's
    zone, so a user with TZ in the shell (a NAS or VPS on UTC) got "today" and the day of a
    note's change a zone off around midnight. Install (and --dry-run) carry the shell's TZ."""
    from sidecar.clients.service import installed_setup

    if zone == "zone file":  # TZ may name a zone file by its path
        zone = str(tmp_path / "Berlin.tzif")
        Path(zone).write_bytes((importlib.resources.files("tzdata") / "zoneinfo/Europe/Berlin").read_bytes())
    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "home"), "TZ": zone})
    unit = service_file(cfg, tmp_path, platform="linux", sandbox=False).text
    assert installed_setup(unit).env["TZ"] == zone, unit
    plist = plistlib.loads(service_file(cfg, tmp_path, platform="darwin").text.encode())
    assert plist["EnvironmentVariables"]["TZ"] == zone
    env = {**os.environ, "HOME": str(tmp_path), "SIDECAR_HOME": str(tmp_path / "h"), "TZ": zone}
    out = subprocess.run(
        [sys.executable, "-m", "sidecar", "service", "install", "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert f"TZ={zone}" in out or f"<string>{zone.replace('<', '&lt;').replace('>', '&gt;')}</string>" in out


@pytest.mark.parametrize(
    "zone",
    [
        "",
        "Europe/Berlin\n",
        "Europe/Ber lin",
        "a\x01b",
        'x"; rm -rf ~',
        "<+0530>-5:30",
        "CET-1CEST,M3.5.0,M10.5.0/3",
        "Europe/Berln",
        "Europe",
        "/etc/hostname",
    ],
)
def test_the_service_carries_no_time_zone_that_names_none(tmp_path: Path, zone: str) -> None:
    """No TZ, or a value no zone is spelled as (a control character stopped a plist install),
    is not pinned: the daemon runs in the system's zone. Nor is a POSIX rule or a misspelled
    name, which glibc reads its own way: the daemon's scheduler looks the zone up in the time
    zone database, failed, and the daemon exited at every start (systemd restarted it every 5 s
    for ever). Install says why it pins none."""
    from sidecar.clients.cli_service import _install_notes
    from sidecar.clients.service import installed_setup

    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "home"), "TZ": zone})
    svc = service_file(cfg, tmp_path, platform="linux", sandbox=False)
    assert "TZ" not in installed_setup(svc.text).env
    plist = plistlib.loads(service_file(cfg, tmp_path, platform="darwin").text.encode())
    assert "TZ" not in plist["EnvironmentVariables"]
    told = [n for n in _install_notes(cfg, svc, None) if n.startswith("TZ=")]
    assert told == ([] if not zone else [told[0]]), told
    if zone:
        assert f"TZ={zone!r} is not pinned in the service" in told[0] and "system's zone" in told[0]


def test_a_reinstall_names_a_changed_or_dropped_time_zone(tmp_path: Path, vault: Path) -> None:
    """A reinstall from a shell with another TZ, or none, moves the daemon's day: install named
    only a changed home or socket, and doctor compared only SIDECAR_* settings."""
    from sidecar.clients.cli_service import _replaced
    from sidecar.clients.doctor_checks import Probes
    from sidecar.clients.doctor_service import check_service

    def cfg(zone: str) -> Any:
        return load_config(flags={"home": str(tmp_path / "h"), "vault.path": str(vault)}, env={"TZ": zone})

    berlin = service_file(cfg("Europe/Berlin"), tmp_path, platform="linux", sandbox=False)
    plain = service_file(cfg(""), tmp_path, platform="linux", sandbox=False)
    tokyo = service_file(cfg("Asia/Tokyo"), tmp_path, platform="linux", sandbox=False)
    assert "(the TZ Europe/Berlin -> the system's zone)" in _replaced(plain, berlin.text)
    assert "(the TZ Europe/Berlin -> Asia/Tokyo)" in _replaced(tokyo, berlin.text)
    berlin.path.parent.mkdir(parents=True)
    berlin.path.write_text(berlin.text)
    active = tmp_path / "systemctl"
    active.write_text("#!/bin/sh\necho active\n")
    active.chmod(0o755)
    probes = Probes(home_dir=tmp_path, systemctl=str(active))
    check = check_service(cfg(""), probes)
    assert check.ok and check.warning, check
    assert "its settings differ from this command's: TZ=Europe/Berlin" in check.verdict, check
    assert not check_service(cfg("Europe/Berlin"), probes).warning


def test_the_build_is_read_when_the_process_starts(tmp_path: Path, vault: Path) -> None:
    """The build id digests the package's files when first asked: a daemon that waited (hours,
    for another daemon) or started slowly while the user reinstalled ran the old code but
    reported and recorded the new build. A daemon and a `sidecar index` run read it at once."""
    from sidecar.contracts.errors import DaemonRunningError
    from sidecar.daemon import lifecycle
    from sidecar.daemon.oneshot import index_once
    from sidecar.daemon.process import IndexLock
    from sidecar.runtime.release import build_id

    cfg = load_config(flags={"home": str(tmp_path / "home"), "vault.path": str(vault)}, env={})
    build_id.cache_clear()
    lifecycle.Daemon(cfg)
    assert build_id.cache_info().currsize == 1
    build_id.cache_clear()
    held = IndexLock(cfg.index_dir)
    held.acquire()
    try:
        with pytest.raises(DaemonRunningError):
            index_once(cfg, rebuild=False)
    finally:
        held.release()
    assert build_id.cache_info().currsize == 1
