"""``sidecar doctor``'s checks of where the index lives: the home is a writable folder in its
shape, on a disk that keeps it (not a share, not a tmpfs) with room to index and rebuild. Imports
config, mounts, timeout, (for damaged copies moved aside) stores.aside and (for the model copies
beside the index) model.prepared, which loads no model."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

from sidecar.clients.doctor_checks import Check, Probes, readable_size
from sidecar.config import Config
from sidecar.model import prepared
from sidecar.stores.aside import KEEP_MOVED_ASIDE_DAYS, moved_aside
from sidecar.vault.mounts import is_network, mount_containing, read_mounts
from sidecar.vault.timeout import run_with_timeout

_MIN_FREE_BYTES = 500 * 1024 * 1024
_VOLATILE = frozenset({"tmpfs", "ramfs"})  # emptied at every reboot


def _real(path: Path, timeout: float) -> str | None:
    """The real path of ``path`` (of its nearest existing folder), or None when the file system
    does not answer within ``timeout`` (realpath blocks on a hung share)."""
    value, stuck = run_with_timeout(lambda: os.path.realpath(_existing(path)), timeout, "doctor-realpath")
    return None if stuck is not None else value


def _type_at(real: str | None, mounts: list[tuple[str, str]]) -> str | None:
    found = mount_containing(real, mounts) if real else None
    return found[1] if found else None


def _existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _unwritable(path: Path) -> str | None:
    """Why the daemon could not write into the folder ``path``, or None."""
    if os.access(path, os.W_OK | os.X_OK):
        return None
    with contextlib.suppress(OSError):
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "read-only file system"
    return "permission denied"


def _home_state(cfg: Config) -> Check:  # noqa: PLR0911 - one verdict per way a home is unusable
    """The home is a folder the daemon can write, with its parts in their shapes (the daemon
    exits 5 on each of these; doctor said "ok" to all of them)."""
    home = cfg.home
    fix = "fix it, or set --home / SIDECAR_HOME (home: in the configuration file) to a writable folder"
    if not home.exists():
        parent = _existing(home)
        why = "not a folder" if not parent.is_dir() else _unwritable(parent)
        if why:
            return Check("home", False, f"the home {home} cannot be made in {parent}: {why}", fix)
        return Check("home", True, f"{home} does not exist yet; the daemon makes it at its first start")
    if not home.is_dir():
        return Check("home", False, f"the home {home} is not a folder", fix)
    why = _unwritable(home)
    if why:
        return Check("home", False, f"the home {home} cannot be written: {why}", fix)
    for part in (cfg.agents_dir, cfg.index_dir, cfg.models_dir):
        if part.exists() and not part.is_dir():
            return Check("home", False, f"{part} is a file where a folder belongs", "move that file away")
        if part.is_dir() and _unwritable(part):
            return Check("home", False, f"{part} cannot be written: {_unwritable(part)}", fix)
    lock = cfg.index_dir / ".lock"
    if os.path.lexists(lock) and not lock.is_file():
        return Check("home", False, f"the index lock {lock} is not a file", "remove it (no daemon runs here)")
    return Check("home", True, f"{home} is a writable folder")


def check_home(cfg: Config) -> Check:
    """The home's state; one in a hidden folder of the vault (one not hidden is refused) is a
    warning beside an "ok": the index and the agents' memory are written into the vault's folder."""
    check = _home_state(cfg)
    vault = cfg.vault.path
    if not check.ok or vault is None or not cfg.home.is_relative_to(vault):
        return check
    return Check(
        "home",
        True,
        f"{check.verdict}; but it lies inside the vault {vault}: the index and every agent's memory "
        "are written into the vault's folder (not indexed: it is hidden), and whatever syncs or "
        "versions the vault carries them",
        "move the home outside the vault (home: in the configuration file), or keep it out of the "
        "vault's sync",
        warning=True,
    )


def check_storage(cfg: Config, probes: Probes, timeout: float) -> tuple[tuple[Check, bool], dict[str, str]]:
    """The storage check, whether the vault is on a share, and the folders that did not answer."""
    mounts = read_mounts(probes.mount_table)
    hung: dict[str, str] = {}
    late = f"did not answer within {timeout:g} s"
    home_real = _real(cfg.home, timeout)
    if home_real is None:
        hung["home"] = late
    vault_real = _real(cfg.vault.path, timeout) if cfg.vault.path else None
    if cfg.vault.path and vault_real is None:
        hung["vault"] = late
    home_type, vault_type = _type_at(home_real, mounts), _type_at(vault_real, mounts)
    vault_network = is_network(vault_type)
    if "home" in hung:
        check = Check(
            "storage",
            False,
            f"the home {cfg.home} {late} (a hung share or disk?)",
            "keep the home on a local disk (--home / SIDECAR_HOME)",
        )
        return (check, vault_network), hung
    if is_network(home_type):
        check = Check(
            "storage",
            False,
            f"the home {cfg.home} is on a network filesystem ({home_type}): the index needs a local disk",
            "set --home / SIDECAR_HOME (or home: in the config file) to a local folder",
        )
        return (check, vault_network), hung
    where = (
        f"the vault is on a network share ({vault_type}), polled every {cfg.watch.poll_seconds:g} s; "
        if vault_network
        else ""
    )
    if "vault" in hung:
        where = f"the vault {cfg.vault.path} {late}; "
    if home_type in _VOLATILE:
        check = Check(
            "storage",
            True,
            f"{where}the home {cfg.home} is in memory ({home_type}): the index and every agent's memory "
            "inbox are lost at the next reboot",
            "set --home / SIDECAR_HOME (or home: in the config file) to a folder on a disk",
            warning=True,
        )
        return (check, vault_network), hung
    check = Check(
        "storage", True, f"{where}the home {cfg.home} is on a local disk ({home_type or 'unknown'})"
    )
    return (check, vault_network), hung


def check_disk(cfg: Config) -> Check:
    base = _existing(cfg.home)
    free = shutil.disk_usage(base).free
    used = (
        sum(f.stat().st_size for f in cfg.index_dir.rglob("*") if f.is_file())
        if cfg.index_dir.is_dir()
        else 0
    )
    size = f"; the index uses {readable_size(used)}" if used else ""
    aside = moved_aside(cfg.index_dir) if cfg.index_dir.is_dir() else []
    if aside:
        kept = sum(f.stat().st_size for c in aside for f in _files(c.path))
        kinds = {
            "an index a newer release made"
            if c.newer
            else "a previous model's vectors"
            if c.retired
            else "damaged data"
            for c in aside
        }
        what = " or ".join(
            k
            for k in ("damaged data", "an index a newer release made", "a previous model's vectors")
            if k in kinds
        )
        size += (
            f" ({readable_size(kept)} of it in {len(aside)} cop{'y' if len(aside) == 1 else 'ies'} of "
            f"{what} moved aside, kept for inspection and removed {KEEP_MOVED_ASIDE_DAYS} days after "
            "the move (by the daemon's daily housekeeping, or at its next start): "
            f"{', '.join(c.path.name for c in aside)}; delete them to free the space now)"
        )
    size += _besides_the_index(cfg)
    if free < max(_MIN_FREE_BYTES, used):
        return Check(
            "disk",
            False,
            f"{readable_size(free)} free at {base}{size}: too little to index and rebuild safely",
            "free space on that disk, or move the home (--home) to a disk with room",
        )
    return Check("disk", True, f"{readable_size(free)} free at {base}{size}")


def _besides_the_index(cfg: Config, now: float | None = None) -> str:
    """What else the home keeps on that disk, what it holds and what can go: the agents' .trash
    (earlier versions of their notes) and the prepared model copies (one per model and
    onnxruntime, an earlier model's left behind by a switch or an upgrade)."""
    now = time.time() if now is None else now
    out = ""
    trash = [f for inbox in _subfolders(cfg.agents_dir) for f in _files(inbox / "memory" / ".trash")]
    if trash:
        held = sum(_size(f) for f in trash)
        days = cfg.memory.trash_days
        kept = f"kept {days} days" if days > 0 else "kept for ever (memory.trashDays 0)"
        out += (
            f"; the agents' .trash uses {readable_size(held)} ({len(trash)} earlier versions of memory "
            f"notes, replaced or deleted, {kept} within memory.maxTrashBytes per agent; the daily "
            "housekeeping removes the older ones)"
        )
    models = prepared.copies(cfg.prepared_dir)
    if models:
        named = ", ".join(
            f"{path.name} {readable_size(size)}, {_last_used(now - used)}" for path, size, used in models
        )
        total = readable_size(sum(c[1] for c in models))
        out += (
            f"; model copies (and the word list's file) in {cfg.prepared_dir} use {total} "
            f"({named}; one a daemon loads is made again if removed, a model at the cost of a "
            "minute's conversion, the German word list's file in seconds; one unused for "
            f"{prepared.UNUSED_DAYS:g} days is removed by the daily housekeeping, delete it sooner "
            "when no daemon uses it)"
        )
    return out


def _last_used(age: float) -> str:
    days = int(max(age, 0) // 86_400)
    return "used today" if days == 0 else f"unused for {days} day{'s' if days != 1 else ''}"


def _subfolders(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _files(path: Path) -> list[Path]:
    try:
        return [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
    except OSError:
        return []
