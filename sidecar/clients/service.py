"""Service files for the current user: a systemd user unit (Linux) or a launchd agent (macOS),
rendered with the command that runs this installation of sidecar and the settings the installing
command saw.

The service runs the daemon with the same effective settings as the command that installed it:
the configuration file it read is named, the home is pinned, and every setting that came from a
flag or a ``SIDECAR_*`` variable (which the service manager does not pass on) is written into
the service's environment, the socket included (the default socket depends on
``XDG_RUNTIME_DIR``, which a shell and the service manager may not share).

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
import re
import shlex
import shutil
import site
import subprocess
import sys
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar.config import Config, env_name, settings
from sidecar.config.loader import xdg_base
from sidecar.contracts.errors import NO_RESTART, ConfigError, ExitCode, StorageError

LABEL = "dev.sidecar"
UNIT = "sidecar.service"


@dataclass(frozen=True)
class ServiceFile:
    path: Path
    text: str
    enable: str  # the command that starts it now and at every login
    disable: str  # the command that stops it; works once the file is removed


@dataclass(frozen=True)
class Launcher:
    """How this installation is started: its ``sidecar`` script, or the interpreter with
    ``-m sidecar`` and what that needs in the environment to import the same package."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Setup:
    """What an installed service file runs: its command line and its environment."""

    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


def launcher() -> Launcher:
    """The ``sidecar`` script of this installation (next to its Python, or the one running),
    else ``python -m sidecar`` (run that way there is no script: ``__main__.py`` is neither
    executable nor a program a unit or an MCP host can start)."""
    beside = Path(sys.executable).parent / "sidecar"
    if _runnable(beside):
        return Launcher((str(beside.absolute()),))
    running = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if running is not None and running.name == "sidecar" and _runnable(running):
        return Launcher((str(running.resolve()),))
    return Launcher((sys.executable, "-m", "sidecar"), _python_path())


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _python_path() -> tuple[tuple[str, str], ...]:
    """PYTHONPATH for ``-m sidecar`` started elsewhere (no shell, another working folder): this
    one's folders made absolute, and the folder holding the package when it is not installed."""
    import sidecar

    folders = [str(Path(p).absolute()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    own = str(Path(sidecar.__file__).resolve().parent.parent)
    installed = {str(Path(p).resolve()) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    if own not in folders and own not in installed:
        folders.insert(0, own)
    return (("PYTHONPATH", os.pathsep.join(dict.fromkeys(folders))),) if folders else ()


def _serve_args(run: Launcher, config: Path | None) -> list[str]:
    """The daemon's command line. Without a configuration file it names none and reads the
    default one once it is written (a --config naming a missing file is a configuration error:
    the service would never start)."""
    return [*run.argv, "serve", *(["--config", str(config)] if config is not None else [])]


def _env_text(value: Any) -> str:
    """A setting's value as its ``SIDECAR_*`` variable spells it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, tuple):
        text = ",".join(value)
        # One item in brackets reads as a YAML list there; a trailing comma keeps it one pattern.
        return text + "," if text.startswith("[") and text.endswith("]") else text
    return str(value)


def xdg_folder(env: Mapping[str, str], name: str) -> str:
    """The folder an XDG variable names (the configuration loader's rule, ``xdg_base``), links
    resolved: the same folder spelled through a link (a home under a linked /home) is no other
    folder."""
    return os.path.realpath(xdg_base(env, name))


def pinned_env(cfg: Config) -> list[tuple[str, str]]:
    """The daemon's environment in the service: the home and the socket this command uses (the
    default socket follows XDG_RUNTIME_DIR, which the service manager sets its own way), every
    other setting this command took from a flag or a variable, and its TZ when it has one."""
    out = [(env_name("home"), str(cfg.home)), (env_name("socket"), str(cfg.socket_path))]
    # Compared with links resolved: the default folder spelled another way is no other folder.
    state, config = cfg.state_dir, cfg.default_file
    if state is not None and os.path.realpath(state.parent) != xdg_folder({}, "XDG_STATE_HOME"):
        # The state folder follows XDG_STATE_HOME, which the service manager does not pass on.
        out.append(("XDG_STATE_HOME", str(state.parent)))
    if config is not None and os.path.realpath(config.parent.parent) != xdg_folder({}, "XDG_CONFIG_HOME"):
        # The file read when none is named follows XDG_CONFIG_HOME too: without it the service
        # read ~/.config/sidecar/config.yaml while this shell's commands wrote and checked another.
        out.append(("XDG_CONFIG_HOME", str(config.parent.parent)))
    for s in settings():
        origin = cfg.origins.get(s.dotted, "default")
        if s.dotted in ("home", "socket") or not (origin == "flag" or origin.startswith("environment ")):
            continue
        value: Any = cfg
        for attr in s.attrs:
            value = getattr(value, attr)
        out.append((env_name(s.dotted), _env_text(value)))
    if cfg.time_zone and time_zone_problem(cfg.time_zone) is None:
        # The systemd user manager and launchd start the daemon in the system's zone
        # (/etc/localtime), not the installing shell's TZ: its "today" and the day of a note's
        # last change were a zone off around midnight (a NAS or VPS on UTC).
        out.append(("TZ", cfg.time_zone))
    return out


def time_zone_problem(value: str) -> str | None:
    """Why a TZ value is not pinned in the service, None when it is: only a zone that zoneinfo
    resolves (a name, ``:`` before it or not, or a zone file's absolute path). A POSIX rule
    ("<+0530>-5:30") or a misspelled name ("Europe/Berln") glibc reads its own way, but the
    scheduler's zone lookup (tzlocal) fails on it: the daemon would exit at every start and the
    service manager restart it for ever."""
    if not value.isprintable() or not value.strip():
        return "it holds a blank or a control character"
    name = value.removeprefix(":")
    try:
        if os.path.isabs(name):
            with open(name, "rb") as f:
                zoneinfo.ZoneInfo.from_file(f)
        else:
            zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return "it names no zone of the time zone database (a POSIX rule or a misspelled name)"
    return None


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


def _words(text: str) -> list[str]:
    """The words of a unit file setting as ``_word`` writes them (quotes and escapes undone;
    the specifier and variable escapes are left to the caller)."""
    words: list[str] = []
    i = 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        buf: list[str] = []
        if text[i] == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                if text[i] == "\\" and i + 1 < len(text):
                    buf.append({"n": "\n", "t": "\t"}.get(text[i + 1], text[i + 1]))
                    i += 2
                else:
                    buf.append(text[i])
                    i += 1
            i += 1
        else:
            while i < len(text) and not text[i].isspace():
                buf.append(text[i])
                i += 1
        words.append("".join(buf))
    return words


def installed_setup(text: str, platform: str = sys.platform) -> Setup:
    """The command line and environment a service file runs (best effort for a hand-edited one)."""
    if platform == "darwin":
        try:
            data = plistlib.loads(text.encode("utf-8"))
        except Exception:  # any damage reads as "nothing known"
            return Setup()
        variables = data.get("EnvironmentVariables") if isinstance(data, dict) else None
        args = data.get("ProgramArguments") if isinstance(data, dict) else None
        return Setup(
            tuple(str(a) for a in args) if isinstance(args, list) else (),
            {str(k): str(v) for k, v in variables.items()} if isinstance(variables, dict) else {},
        )
    argv: tuple[str, ...] = ()
    env: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key.strip() == "ExecStart":
            words = _words(value)
            # Variables are escaped in the arguments only ('$$'), specifiers everywhere ('%%').
            argv = tuple(
                (w if i == 0 else w.replace("$$", "$")).replace("%%", "%") for i, w in enumerate(words)
            )
        elif key.strip() == "Environment":
            for word in _words(value):
                name, _, val = word.replace("%%", "%").partition("=")
                env[name] = val
    return Setup(argv, env)


def _outside_home(cfg: Config) -> list[Path]:
    """Folders the daemon writes besides its home: the socket's and the model cache's, when set
    elsewhere, and the state folder (read-only under ProtectSystem=strict unless listed)."""
    out: list[Path] = []
    # The state folder keeps the home's identity: read-only under the sandbox, the record was
    # never written for a service, and a restart on an unmounted share took the bare mount point.
    state = [cfg.state_dir] if cfg.state_dir is not None else []
    for folder in (cfg.socket_path.parent, cfg.prepared_dir, *state):
        if not folder.is_relative_to(cfg.home) and folder not in out:
            out.append(folder)
    return out


def _writable(cfg: Config) -> list[Path]:
    """What the sandbox must leave writable: the home and ``_outside_home``. A folder in /tmp is
    gone after a reboot and a missing path is left read-only ("-"), so the daemon could not make
    it again: its temporary folder is listed whole; the others are made by ``prepare`` at install."""
    out: list[Path] = []
    for folder in [cfg.home, *_outside_home(cfg)]:
        wanted = _tmp_of(folder) or folder
        if wanted not in out:
            out.append(wanted)
    return out


# Where PrivateTmp= gives the unit its own copy; only compared with, never written to.
_TMP = (Path("/tmp"), Path("/var/tmp"))  # noqa: S108


def _tmp_of(path: Path) -> Path | None:
    """The temporary folder ``path`` lies in, or None."""
    return next((t for t in _TMP if path.is_relative_to(t)), None)


def in_tmp(path: Path) -> bool:
    return _tmp_of(path) is not None


def _in_tmp(cfg: Config, run: Launcher, config: Path | None) -> Path | None:
    """A path the daemon needs that lies in /tmp or /var/tmp. Under PrivateTmp= the unit sees
    its own empty copy there: a configuration file "not found" (exit 3, never restarted), a home
    made afresh and deleted at every stop (the agents' memory with it), a vault never there, a
    socket no client sees, an installation that is not there."""
    python_path = [Path(p) for k, v in run.env if k == "PYTHONPATH" for p in v.split(os.pathsep) if p]
    needed = [
        cfg.socket_path,
        cfg.home,
        config if config is not None else cfg.default_file,  # the file read once it is written
        cfg.vault.path,
        cfg.prepared_dir,
        cfg.embedder.path,
        cfg.watch.mount_table,
        Path(run.argv[0]),
        *python_path,
    ]
    return next((p for p in needed if p is not None and _tmp_of(p)), None)


def _sandbox_lines(cfg: Config, run: Launcher, config: Path | None) -> str:
    vault = f"ReadOnlyPaths={_word(f'-{cfg.vault.path}')}\n" if cfg.vault.path else ""
    writable = " ".join(_word(f"-{p}") for p in _writable(cfg))
    shared = _in_tmp(cfg, run, config)
    private_tmp = (
        f"# PrivateTmp= is left out: {_comment(shared)} lies in {_tmp_of(shared)}, which the service must "
        "see as it is.\n"
        if shared is not None
        else "PrivateTmp=yes\n"
    )
    return (
        "# Sandboxing (this machine allows unprivileged user namespaces; where they are off,\n"
        "# `sidecar service install` leaves these lines out rather than fail every start).\n"
        f"{private_tmp}ProtectSystem=strict\nReadWritePaths={writable} -%t\n{vault}"
    )


def _comment(path: Path) -> str:
    return str(path).replace("\n", "\\n")


def systemd_unit(cfg: Config, run: Launcher, config: Path | None, sandbox: bool | None = None) -> str:
    sandbox = user_namespaces() if sandbox is None else sandbox
    if sandbox:
        isolation = _sandbox_lines(cfg, run, config)
    else:
        isolation = (
            "# No mount-namespace sandboxing: unprivileged user namespaces are off on this machine,\n"
            "# and a user unit with ProtectSystem=/PrivateTmp= would fail every start.\n"
        )
    program = run.argv[0]
    if any(c in program for c in "\"'\\\t\n"):
        # systemd reads the program's path with no escapes of these: the unit would never start.
        raise ConfigError(
            f"the sidecar command's path {program!r} holds a quote, backslash, tab or newline, which a "
            "systemd unit cannot name: install sidecar under a path without them"
        )
    # Variables are expanded in the arguments, not in the program's path ("$$" stayed literal).
    command = " ".join(_word(a, command=i > 0) for i, a in enumerate(_serve_args(run, config)))
    env = "".join(f"Environment={_word(f'{k}={v}')}\n" for k, v in [*pinned_env(cfg), *run.env])
    reads = ""
    if config is None and cfg.default_file is not None and "\n" not in str(cfg.default_file):
        # Said in the unit: which file its daemon reads, when the command line names none.
        reads = (
            "# No configuration file was there at install: none is named (a named file that is missing\n"
            f"# stops every start); the daemon reads {cfg.default_file} once it is written.\n"
        )
    return f"""\
# sidecar user service, written by `sidecar service install`.
# It starts without its vault (a share mounted later is picked up by itself): no target is
# waited for, and every path below may be absent at start ("-").
[Unit]
Description=sidecar: hybrid recall over an Obsidian vault
# A restart loop ends after 20 starts within 10 minutes (the unit is left failed; once fixed:
# `systemctl --user reset-failed sidecar`, then start it). systemd counts every start, a
# person's `systemctl --user restart` too: a start that fails at once, restarted every 10 s
# (RestartSec) and failing in about 2 s, reaches 20 in about 4 minutes (a home on a share not
# mounted yet or behind a stale handle is waited for in the daemon instead). A handful of
# restarts by hand within a few minutes stays far below 20.
StartLimitIntervalSec=600
StartLimitBurst=20

[Service]
Type=notify
NotifyAccess=main
{reads}ExecStart={command}
ExecReload=/bin/kill -HUP $MAINPID
# The home and socket the installing command used, and what it had from flags and SIDECAR_* variables.
{env}Restart=on-failure
RestartSec=10
# Not restarted: exit codes 2 and 3 (a bad command line or configuration), 4 (another daemon
# serves this home or socket: a daemon this unit starts waits for it, and for a `sidecar index`
# run, instead; for one of another home on its socket 30 s at most, then it exits naming the
# `socket` setting to change): a restart cannot help; start it once fixed. A crash, exit code 1,
# exit code 5 (the home or index cannot be used: a full disk, if it passes within the loop's ~4
# minutes; a home not mounted yet is waited for) or the watchdog restarts it.
RestartPreventExitStatus={" ".join(str(int(c)) for c in NO_RESTART)}
# Exit code 9: a stop that gave up on a write still running (the next start catches up).
SuccessExitStatus={int(ExitCode.STOP_ABANDONED)}
# 10 s above the stop's one bound (20 s for all its waits: the requests taken up, the threads,
# a write still running); past it the daemon exits without closing the index, as after a crash.
TimeoutStopSec=30
# The daemon pings while its event loop turns and its indexer is alive or waiting on a bounded
# scan (a slow share); a hung scan is reported in status after watch.scanTimeoutSeconds.
WatchdogSec=120
NoNewPrivileges=yes
{isolation}MemoryMax=2G

[Install]
WantedBy=default.target
"""


# A locale's name: language, territory, codeset, modifier ("en_US.UTF-8", "de_DE@euro", "sr_RS.UTF-8@latin").
_LOCALE_NAME = re.compile(
    r"[a-z]{2,3}(?:_[A-Z]{2}|_[0-9]{3})?(?:\.[A-Za-z0-9-]{1,20})?(?:@[A-Za-z0-9]{1,20})?"
)


def agent_language(system_locale: str | None) -> str | None:
    """The LANG the launchd agent gets: the installing shell's language when it names one. None
    for C, POSIX, a blank or anything not shaped as a locale's name (a control character would
    stop plistlib, and a stray value pinned for good helps no one): the agent then runs as launchd
    starts it. A name without a codeset gets UTF-8 ("de_DE" from LANGUAGE=de_DE:en), as a bare
    "de_DE" is ISO8859-1 on macOS and would become the daemon's text encoding."""
    name = system_locale or ""
    if not _LOCALE_NAME.fullmatch(name):
        return None
    return f"{name}.UTF-8" if "_" in name and not any(c in name for c in ".@") else name


def launchd_plist(cfg: Config, run: Launcher, config: Path | None, logs: Path) -> str:
    env = dict([*pinned_env(cfg), *run.env])
    language = agent_language(cfg.system_locale)
    if language and "LANG" not in env:
        # launchd starts an agent without LANG (macOS keeps the language in its preferences, not
        # the environment), so the Calendar plugin's "Same as system" read Monday as the week
        # start whatever the Mac's language: the installing shell's language goes with the agent.
        env["LANG"] = language
    data = {
        "Label": LABEL,
        "ProgramArguments": _serve_args(run, config),
        "EnvironmentVariables": env,
        "RunAtLoad": True,
        # Restarted after a crash or a failed exit, not after a clean stop. launchd cannot skip
        # a restart by exit code, nor stop a loop after some starts (launchd.plist(5)): the
        # daemon exits 0 for NO_RESTART under launchd (``clients.cli``), so those are not
        # restarted; exit code 5 is retried every ThrottleInterval seconds (a full disk freed:
        # it passes). Another daemon or a
        # `sidecar index` run holding the home, and a home not mounted yet, are waited for in the
        # daemon (it knows launchd by XPC_SERVICE_NAME), as under systemd.
        "KeepAlive": {"SuccessfulExit": False, "Crashed": True},
        "ThrottleInterval": 30,
        # Above the stop's one bound (20 s, see the systemd unit's TimeoutStopSec), below which
        # launchd's default (20 s) would kill the daemon at the end of its own wait.
        "ExitTimeOut": 25,
        "StandardOutPath": str(logs / "sidecar.log"),
        "StandardErrorPath": str(logs / "sidecar.log"),
        # Standard (light limits, as with none given), not Background: a Background job's CPU
        # and I/O are throttled to keep out of the user's way, and this daemon answers the
        # user's agents while they wait (a prompt's recall hook, searches). Adaptive follows XPC
        # transactions, which a Unix socket server never opens: it would stay Background.
        "ProcessType": "Standard",
    }
    return plistlib.dumps(data).decode("utf-8")


def prepare(cfg: Config, home_dir: Path, platform: str = sys.platform) -> list[Path]:
    """Create what the service needs before its first start (the home, the log folder); a path
    that cannot be made is a StorageError naming it (a file where the home belongs, no permission)."""
    made = []
    wanted = [cfg.home, cfg.agents_dir, *(f for f in _outside_home(cfg) if not _tmp_of(f))]
    if platform == "darwin":
        wanted.append(home_dir / "Library" / "Logs")
    for folder in wanted:
        try:
            if not folder.is_dir():
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                made.append(folder)
        except OSError as exc:
            raise StorageError(f"cannot create the folder {folder}: {_why(exc, folder)}") from None
    with contextlib.suppress(OSError):
        os.chmod(cfg.home, 0o700)
    return made


def _why(exc: OSError, path: Path) -> str:
    """An OSError about ``path`` in words: what is in the way, rather than "Not a directory"."""
    if isinstance(exc, NotADirectoryError | FileExistsError):
        blocker = next((p for p in [*reversed(path.parents), path] if p.exists() and not p.is_dir()), None)
        if blocker is not None:
            return f"{blocker} is a file where a folder belongs"
    if isinstance(exc, IsADirectoryError):
        return f"{path} is a folder, not a file"
    what = exc.strerror or str(exc)
    return f"{what}: {exc.filename}" if exc.filename and Path(exc.filename) != path else what


def check_config_file(cfg: Config) -> None:
    """A configuration given as a pipe (``--config <(…)``) is gone once this command ends; the
    service reads it at every start."""
    if cfg.source_file is not None and not cfg.source_file.is_file():
        raise ConfigError(
            f"the configuration {cfg.source_file} is not a regular file (a pipe or process "
            "substitution?): the service reads it at every start; name a file"
        )


def existing_text(svc: ServiceFile) -> str | None:
    """The installed file's text, None when there is none; a StorageError when it cannot be read
    (a folder in its place, no permission)."""
    try:
        return svc.path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read the service file {svc.path}: {_why(exc, svc.path)}") from None


def write(svc: ServiceFile) -> None:
    """Write the service file, or a StorageError naming what is in the way (``~/.config/systemd``
    a file, a folder where the file belongs, a folder left to root by a `sudo` run)."""
    try:
        svc.path.parent.mkdir(parents=True, exist_ok=True)
        svc.path.write_text(svc.text, encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"cannot write the service file {svc.path}: {_why(exc, svc.path)}") from None


def remove(svc: ServiceFile) -> list[Path]:
    """Remove the service file and the links that enable it (what `systemctl --user disable`
    removes: once the file is gone, disable fails and the links would dangle). Returns what was
    removed; a StorageError when something is in the way (a folder in the file's place)."""
    links = sorted(p for p in svc.path.parent.glob(f"*.wants/{svc.path.name}") if p.is_symlink())
    if svc.path.is_dir() and not svc.path.is_symlink():
        raise StorageError(f"{svc.path} is a folder, not a service file: look at it and remove it by hand")
    removed = []
    for path in [svc.path, *links]:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StorageError(f"cannot remove {path}: {_why(exc, path)}") from None
        removed.append(path)
    return removed


def service_file(
    cfg: Config,
    home_dir: Path,
    platform: str = sys.platform,
    sandbox: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> ServiceFile:
    run, config = launcher(), cfg.source_file  # the file in use, if any
    env = os.environ if env is None else env
    if platform == "darwin":
        path = home_dir / "Library" / "LaunchAgents" / f"{LABEL}.plist"
        return ServiceFile(
            path,
            launchd_plist(cfg, run, config, home_dir / "Library" / "Logs"),
            f"launchctl bootstrap gui/$(id -u) {shlex.quote(str(path))}",
            # By label: a bootout naming the file needs the file, gone after an uninstall.
            f"launchctl bootout gui/$(id -u)/{LABEL}",
        )
    # systemd reads user units from $XDG_CONFIG_HOME/systemd/user when it is set (an absolute
    # path; a relative one is ignored, as systemd does), else ~/.config/systemd/user.
    path = xdg_base(env, "XDG_CONFIG_HOME", home_dir) / "systemd" / "user" / UNIT
    return ServiceFile(
        path,
        systemd_unit(cfg, run, config, sandbox),
        "systemctl --user daemon-reload && systemctl --user enable --now sidecar",
        # Works once the file and its links are gone (`disable` then fails: no such unit).
        "systemctl --user stop sidecar; systemctl --user daemon-reload",
    )
