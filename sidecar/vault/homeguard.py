"""The home's ``agents/`` folder is still the one this daemon started on.

The home (or only its ``agents/``) may lie on a share. When it is unmounted, its path leads to the
bare mount-point folder below: a write made there is acknowledged and then hidden under the share
when it comes back, and every inbox looks emptied. So the identity (device and inode) of the home
and of its ``agents/`` folder is remembered when first seen (at start: the daemon makes
``agents/``), and while either is missing or another folder, memory writes are refused
(``storage``), nothing is made there, and the agents' inboxes are unreachable roots for the
supervisor, as an unmounted vault is: nothing of them is deleted from the index. A daemon restart
takes the folder there as the one to keep (a replacement made on purpose). Imports nothing from
sidecar but the configuration and errors.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from sidecar.config import Config
from sidecar.contracts.errors import StorageError

_Ident = tuple[int, int]  # (st_dev, st_ino)


class HomeChangedError(StorageError):
    """The home or its agents folder is gone or not the folder the daemon started on."""

    def __init__(self, why: str) -> None:
        super().__init__(refusal(why))
        self.why = why


class HomeGuard:
    """Remembers the home's and ``agents/``'s identity; says when either is gone or replaced."""

    def __init__(self, cfg: Config) -> None:
        self.home = cfg.home
        self.agents = cfg.agents_dir
        self._lock = threading.Lock()
        self._seen: tuple[_Ident, _Ident] | None = None
        self.remember()

    @property
    def remembered(self) -> bool:
        return self._seen is not None

    def remember(self) -> None:
        """Take the folders there now as the ones to keep, if both are there and none is kept yet."""
        with self._lock:
            if self._seen is not None:
                return
            try:
                home, agents = os.stat(self.home), os.stat(self.agents, follow_symlinks=False)
            except OSError:
                return
            self._seen = (home.st_dev, home.st_ino), (agents.st_dev, agents.st_ino)

    def problem(self) -> str | None:
        """Why the inboxes cannot be used now (the home or ``agents/`` gone or replaced), or None.
        Remembers the folders when none are kept yet."""
        if self._seen is None:
            self.remember()
            return None
        home_id, agents_id = self._seen
        for what, path, kept in (
            ("the home", self.home, home_id),
            ("the agents folder", self.agents, agents_id),
        ):
            try:
                st = os.stat(path, follow_symlinks=path == self.home)
            except FileNotFoundError:
                return f"{what} {path} is gone (unmounted? removed?)"
            except OSError as exc:
                return f"{what} {path} cannot be reached ({exc.strerror or exc}; unmounted?)"
            if (st.st_dev, st.st_ino) != kept:
                return _replaced(what, path)
        return None

    def check(self) -> None:
        """Raise HomeChangedError while ``problem`` says why."""
        why = self.problem()
        if why is not None:
            raise HomeChangedError(why)

    def check_fd(self, agents_fd: int) -> None:
        """The opened ``agents/`` folder is the one kept (checked through its descriptor, so a
        folder swapped between the check by path and the open is seen); kept if none was."""
        st = os.fstat(agents_fd)
        self.remember()
        seen = self._seen
        if seen is not None and (st.st_dev, st.st_ino) != seen[1]:
            raise HomeChangedError(_replaced("the agents folder", self.agents))


def _replaced(what: str, path: Path) -> str:
    return f"{what} {path} is not the folder sidecar started on (unmounted or replaced?)"


def refusal(why: str) -> str:
    """What a refused memory change says."""
    return (
        f"{why}; nothing was changed: memory writes wait until it is back (restart the daemon if it "
        "was replaced on purpose)"
    )


def held(why: str) -> str:
    """What status says of the inboxes while the home or ``agents/`` is not there."""
    return (
        f"{why}: memory writes are refused and no memory note is deleted from the index until it is "
        "back (restart the daemon if it was replaced on purpose)"
    )
