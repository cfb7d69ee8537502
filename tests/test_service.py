"""Running as a service: unit files, sd_notify, exit codes, reload."""

from __future__ import annotations

import os
import plistlib
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients.service import LABEL, service_file
from sidecar.config import load_config
from sidecar.contracts.errors import ExitCode
from tests.conftest import DaemonProcess


def test_unit_and_plist_render_absolute_paths(tmp_path: Path, vault: Path) -> None:
    """The systemd unit and the launchd plist name the absolute sidecar path, config, home and vault."""
    cfg_file = tmp_path / "config.yaml"
    cfg_file.write_text(f"vault:\n  path: {vault}\nhome: {tmp_path / 'home'}\n")
    cfg = load_config(config_file=str(cfg_file), env={})
    unit = service_file(cfg, tmp_path, platform="linux")
    assert unit.path == tmp_path / ".config" / "systemd" / "user" / "sidecar.service"
    exec_start = next(line for line in unit.text.splitlines() if line.startswith("ExecStart="))
    exe = exec_start.split("=", 1)[1].split()[0]
    assert Path(exe).is_absolute() and Path(exe).exists()
    assert f"--config {cfg_file.resolve()}" in exec_start
    assert "Type=notify" in unit.text
    assert f"RestartPreventExitStatus={int(ExitCode.USAGE)} {int(ExitCode.CONFIG)}" in unit.text
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


def test_repository_plist_parses() -> None:
    """launchd/dev.sidecar.plist is a valid plist with the keys launchd needs."""
    data = plistlib.loads((Path(__file__).parent.parent / "launchd" / "dev.sidecar.plist").read_bytes())
    assert {"Label", "ProgramArguments", "RunAtLoad", "KeepAlive", "ThrottleInterval"} <= set(data)


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
    assert "PrivateTmp=yes" not in text and " -/tmp " in text
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
    from sidecar.clients.service import systemd_unit

    cfg = load_config(flags={"home": str(tmp_path / "h$x"), "vault.path": str(vault)}, env={})
    exe = tmp_path / "v$env" / "bin" / "sidecar"
    text = systemd_unit(cfg, exe, tmp_path / "c$.yaml", sandbox=False)
    exec_start = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    assert exec_start == f"ExecStart={exe} serve --config {tmp_path}/c$$.yaml"
    from sidecar.contracts.errors import ConfigError

    with pytest.raises(ConfigError, match="cannot name"):  # no escape of these works there
        systemd_unit(cfg, tmp_path / 'it\'s "mine"' / "sidecar", None, sandbox=False)
    # doctor reports such an installation's service as a failed check (it ended with the error).
    from sidecar.clients import doctor as doctor_mod
    from sidecar.clients import service as service_mod

    monkeypatch.setattr(service_mod, "executable", lambda: tmp_path / 'it\'s "mine"' / "sidecar")
    check = doctor_mod.check_service(cfg, doctor_mod.Probes(home_dir=tmp_path))
    assert not check.ok and "cannot name" in check.verdict


def test_doctor_names_a_service_installed_with_another_home(tmp_path: Path, vault: Path) -> None:
    """A home changed in the configuration after the service was installed (the unit pins the
    home it was installed with): doctor says to install it again."""
    from sidecar.clients.doctor import Probes, check_service

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


@pytest.mark.model
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
    cfg_file.write_text("search:\n  vectorWeight: 0.5\n")
    assert d.call("reload")["changed"] == ["search.vectorWeight"]
    # The defaults a request does not give are the reloaded ones too: a floor above every hit
    # empties the search and a limit of 1 keeps one hit, without a restart.
    assert len(d.call("search", {"query": "outboard engine spark plugs and tomatoes"})["hits"]) > 1
    cfg_file.write_text("search:\n  vectorWeight: 0.5\n  minScore: 50\n")
    assert d.call("reload")["changed"] == ["search.minScore"]
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
    with pytest.raises(Exception, match="nothing applied"):
        d.call("reload")
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
