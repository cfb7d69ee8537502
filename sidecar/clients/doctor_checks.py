"""What ``sidecar doctor``'s checks share: a check's verdict and where the machine is read. Imports
nothing of ours."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    verdict: str
    todo: str = ""
    warning: bool = False  # ok, but worth a look (shown "warn"; doctor still exits 0)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Probes:
    """Where the machine is read (tests point these at files of their own)."""

    inotify_limit: Path = Path("/proc/sys/fs/inotify/max_user_watches")
    mount_table: Path | None = None  # None: this machine's
    systemctl: str = "systemctl"
    home_dir: Path | None = None  # the user's home (service files); None: Path.home()


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def readable_size(n: int) -> str:
    """A byte count a person reads at a glance (never "0 MB" for a few kilobytes)."""
    if n >= 1e9:
        return f"{n / 1e9:,.1f} GB"
    if n >= 1e6:
        return f"{n / 1e6:,.0f} MB"
    return f"{max(n / 1e3, 1):,.0f} KB"
