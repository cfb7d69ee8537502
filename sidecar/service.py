"""Service files for the current user: a systemd user unit (Linux) or a launchd agent (macOS),
rendered with the absolute path of the installed ``sidecar`` and the chosen configuration.
Imports config only.
"""

from __future__ import annotations

import plistlib
import sys
from dataclasses import dataclass
from pathlib import Path

from sidecar.config import Config
from sidecar.errors import ExitCode

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


def systemd_unit(cfg: Config, exe: Path, config: Path) -> str:
    vault = f"ReadOnlyPaths={cfg.vault.path}\n" if cfg.vault.path else ""
    return f"""\
# sidecar user service, written by `sidecar service install`.
[Unit]
Description=sidecar: hybrid recall over an Obsidian vault
After=network-online.target remote-fs.target
Wants=network-online.target

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
WatchdogSec=120
NoNewPrivileges=yes
PrivateTmp=yes
ProtectSystem=strict
ReadWritePaths={cfg.home} %t
{vault}MemoryMax=2G

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


def service_file(cfg: Config, home_dir: Path, platform: str = sys.platform) -> ServiceFile:
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
        systemd_unit(cfg, exe, config),
        "systemctl --user daemon-reload && systemctl --user enable --now sidecar",
        "systemctl --user disable --now sidecar",
    )
