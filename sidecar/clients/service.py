"""Service files for the current user: a systemd user unit (Linux) or a launchd agent (macOS),
rendered with the absolute path of the installed ``sidecar`` and the chosen configuration.

The service must start at login before a share is mounted: paths are ``-`` prefixed (systemd
refuses a unit whose ReadOnlyPaths= names a missing folder), no target is waited for (a user
manager has no network-online or remote-fs target), and the daemon itself treats an absent
vault as an offline root that recovers when the mount appears. Mount-namespace sandboxing needs
unprivileged user namespaces in a user unit; where they are off it would fail every start, so
it is written only when this machine has them (and said so in the unit). Imports config and errors.
"""

from __future__ import annotations

import contextlib
import os
import plistlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sidecar.config import Config
from sidecar.contracts.errors import ExitCode

LABEL = "dev.sidecar"


@dataclass(frozen=True)
class ServiceFile:
    path: Path
    text: str
    enable: str  # the command that starts it now and at every login
    disable: str


def executable() -> Path:
    """The ``sidecar`` script of this installation (next to its Python), else the one running."""
    beside = Path(sys.executable).parent / "sidecar"
    if beside.exists():
        return beside.absolute()
    return Path(sys.argv[0]).resolve()


def config_path(cfg: Config, home_dir: Path) -> Path:
    return cfg.source_file or home_dir / ".config" / "sidecar" / "config.yaml"


def user_namespaces() -> bool:
    """Whether this user can create a user namespace (what systemd needs to sandbox a user unit)."""
    for knob, off in (
        ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
        ("/proc/sys/user/max_user_namespaces", "0"),
        ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1"),
    ):
        try:
            if Path(knob).read_text().strip() == off:
                return False
        except OSError:
            continue
    tool = shutil.which("unshare")
    if tool is None:
        return sys.platform.startswith("linux")
    try:
        done = subprocess.run([tool, "--user", "true"], capture_output=True, timeout=10, check=False)  # noqa: S603
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def systemd_unit(cfg: Config, exe: Path, config: Path, sandbox: bool | None = None) -> str:
    sandbox = user_namespaces() if sandbox is None else sandbox
    vault = f"ReadOnlyPaths=-{cfg.vault.path}\n" if cfg.vault.path else ""
    if sandbox:
        isolation = (
            "# Sandboxing (this machine allows unprivileged user namespaces; where they are off,\n"
            "# `sidecar service install` leaves these lines out rather than fail every start).\n"
            f"PrivateTmp=yes\nProtectSystem=strict\nReadWritePaths=-{cfg.home} %t\n{vault}"
        )
    else:
        isolation = (
            "# No mount-namespace sandboxing: unprivileged user namespaces are off on this machine,\n"
            "# and a user unit with ProtectSystem=/PrivateTmp= would fail every start.\n"
        )
    return f"""\
# sidecar user service, written by `sidecar service install`.
# It starts without its vault (a share mounted later is picked up by itself): no target is
# waited for, and every path below may be absent at start ("-").
[Unit]
Description=sidecar: hybrid recall over an Obsidian vault

[Service]
Type=notify
NotifyAccess=main
ExecStart={exe} serve --config {config}
ExecReload=/bin/kill -HUP $MAINPID
Environment=SIDECAR_HOME={cfg.home}
Restart=on-failure
RestartSec=5
# Exit code {int(ExitCode.CONFIG)} is a configuration error: restarting would only loop.
RestartPreventExitStatus={int(ExitCode.CONFIG)}
TimeoutStopSec=30
# The daemon pings while its event loop turns and its indexer is alive or waiting on a bounded
# scan (a slow share); a hung scan is reported in status after watch.scanTimeoutSeconds.
WatchdogSec=120
NoNewPrivileges=yes
{isolation}MemoryMax=2G

[Install]
WantedBy=default.target
"""


def launchd_plist(cfg: Config, exe: Path, config: Path, logs: Path) -> str:
    data = {
        "Label": LABEL,
        "ProgramArguments": [str(exe), "serve", "--config", str(config)],
        "EnvironmentVariables": {"SIDECAR_HOME": str(cfg.home)},
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False, "Crashed": True},
        "ThrottleInterval": 30,
        "StandardOutPath": str(logs / "sidecar.log"),
        "StandardErrorPath": str(logs / "sidecar.log"),
        "ProcessType": "Background",
    }
    return plistlib.dumps(data).decode("utf-8")


def prepare(cfg: Config, home_dir: Path, platform: str = sys.platform) -> list[Path]:
    """Create what the service needs before its first start (the home, the log folder)."""
    made = []
    wanted = [cfg.home, cfg.agents_dir]
    if platform == "darwin":
        wanted.append(home_dir / "Library" / "Logs")
    for folder in wanted:
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            made.append(folder)
    with contextlib.suppress(OSError):
        os.chmod(cfg.home, 0o700)
    return made


def service_file(
    cfg: Config, home_dir: Path, platform: str = sys.platform, sandbox: bool | None = None
) -> ServiceFile:
    exe, config = executable(), config_path(cfg, home_dir)
    if platform == "darwin":
        path = home_dir / "Library" / "LaunchAgents" / f"{LABEL}.plist"
        return ServiceFile(
            path,
            launchd_plist(cfg, exe, config, home_dir / "Library" / "Logs"),
            f"launchctl bootstrap gui/$(id -u) {path}",
            f"launchctl bootout gui/$(id -u) {path}",
        )
    path = home_dir / ".config" / "systemd" / "user" / "sidecar.service"
    return ServiceFile(
        path,
        systemd_unit(cfg, exe, config, sandbox),
        "systemctl --user daemon-reload && systemctl --user enable --now sidecar",
        "systemctl --user disable --now sidecar",
    )
