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
from sidecar.contracts.errors import ConfigError, ExitCode

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


def _serve_args(exe: Path, config: Path | None) -> list[str]:
    """The daemon's command line. Without a configuration file it names none and reads the
    default one once it is written (a --config naming a missing file is a configuration error:
    the service would never start)."""
    return [str(exe), "serve", *(["--config", str(config)] if config is not None else [])]


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


def _word(text: str, *, command: bool = False) -> str:
    """One word of a unit file setting: '%' is a specifier ('%%'), '$' a variable in a command
    line ('$$'), and a word with blanks, quotes or backslashes is double-quoted with C escapes
    (a home such as "My Files" was split in two: the daemon exited 2 and restarted forever)."""
    text = text.replace("%", "%%")
    if command:
        text = text.replace("$", "$$")
    if any(c.isspace() or c in "\"'\\;" for c in text) or not text:
        body = text.replace("\\", "\\\\").replace('"', '\\"')
        body = body.replace("\n", "\\n").replace("\t", "\\t")
        return f'"{body}"'
    return text


def _outside_home(cfg: Config) -> list[Path]:
    """Folders the daemon writes besides its home: the socket's and the model cache's, when set
    elsewhere (read-only under ProtectSystem=strict unless listed)."""
    out: list[Path] = []
    for folder in (cfg.socket_path.parent, cfg.prepared_dir):
        if not folder.is_relative_to(cfg.home) and folder not in out:
            out.append(folder)
    return out


def _writable(cfg: Config) -> list[Path]:
    """What the sandbox must leave writable for ``_outside_home``: a folder in /tmp is gone after
    a reboot and a missing path is left read-only ("-"), so the daemon could not make it again:
    its temporary folder is listed whole; the others are made by ``prepare`` at install."""
    out: list[Path] = []
    for folder in _outside_home(cfg):
        wanted = _tmp_of(folder) or folder
        if wanted not in out:
            out.append(wanted)
    return out


# Where PrivateTmp= gives the unit its own copy; only compared with, never written to.
_TMP = (Path("/tmp"), Path("/var/tmp"))  # noqa: S108


def _tmp_of(path: Path) -> Path | None:
    """The temporary folder ``path`` lies in, or None."""
    return next((t for t in _TMP if path.is_relative_to(t)), None)


def systemd_unit(cfg: Config, exe: Path, config: Path | None, sandbox: bool | None = None) -> str:
    sandbox = user_namespaces() if sandbox is None else sandbox
    vault = f"ReadOnlyPaths={_word(f'-{cfg.vault.path}')}\n" if cfg.vault.path else ""
    if sandbox:
        writable = " ".join(_word(f"-{p}") for p in [cfg.home, *_writable(cfg)])
        # A socket in /tmp under PrivateTmp= would be the unit's own /tmp: no client could see it.
        private_tmp = (
            "# PrivateTmp= is left out: the socket lies in /tmp, which clients must see.\n"
            if _tmp_of(cfg.socket_path)
            else "PrivateTmp=yes\n"
        )
        isolation = (
            "# Sandboxing (this machine allows unprivileged user namespaces; where they are off,\n"
            "# `sidecar service install` leaves these lines out rather than fail every start).\n"
            f"{private_tmp}ProtectSystem=strict\nReadWritePaths={writable} -%t\n{vault}"
        )
    else:
        isolation = (
            "# No mount-namespace sandboxing: unprivileged user namespaces are off on this machine,\n"
            "# and a user unit with ProtectSystem=/PrivateTmp= would fail every start.\n"
        )
    if any(c in str(exe) for c in "\"'\\\t\n"):
        # systemd reads the program's path with no escapes of these: the unit would never start.
        raise ConfigError(
            f"the sidecar command's path {str(exe)!r} holds a quote, backslash, tab or newline, which a "
            "systemd unit cannot name: install sidecar under a path without them"
        )
    # Variables are expanded in the arguments, not in the program's path ("$$" stayed literal).
    command = " ".join(_word(a, command=i > 0) for i, a in enumerate(_serve_args(exe, config)))
    return f"""\
# sidecar user service, written by `sidecar service install`.
# It starts without its vault (a share mounted later is picked up by itself): no target is
# waited for, and every path below may be absent at start ("-").
[Unit]
Description=sidecar: hybrid recall over an Obsidian vault

[Service]
Type=notify
NotifyAccess=main
ExecStart={command}
ExecReload=/bin/kill -HUP $MAINPID
Environment={_word(f"SIDECAR_HOME={cfg.home}")}
Restart=on-failure
RestartSec=5
# Exit codes {int(ExitCode.USAGE)} and {int(ExitCode.CONFIG)}: a bad command line or configuration (no loop).
RestartPreventExitStatus={int(ExitCode.USAGE)} {int(ExitCode.CONFIG)}
TimeoutStopSec=30
# The daemon pings while its event loop turns and its indexer is alive or waiting on a bounded
# scan (a slow share); a hung scan is reported in status after watch.scanTimeoutSeconds.
WatchdogSec=120
NoNewPrivileges=yes
{isolation}MemoryMax=2G

[Install]
WantedBy=default.target
"""


def launchd_plist(cfg: Config, exe: Path, config: Path | None, logs: Path) -> str:
    data = {
        "Label": LABEL,
        "ProgramArguments": _serve_args(exe, config),
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
    wanted = [cfg.home, cfg.agents_dir, *(f for f in _outside_home(cfg) if not _tmp_of(f))]
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
    exe, config = executable(), cfg.source_file  # the file in use, if any
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
