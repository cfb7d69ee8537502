"""The home and its ``agents/`` folder are still the ones sidecar keeps the agents' memory in.

The home (or only its ``agents/``) may lie on a share. When it is unmounted, its path leads to the
bare mount-point folder below: a write made there is acknowledged and then hidden under the share
when it comes back, and every inbox looks emptied. So the identity (device and inode) of the home
and of its ``agents/`` folder, and the agents whose inboxes it holds, are recorded when first seen
(at the first start: the daemon makes ``agents/``), in the state folder outside the home (the
home's own ``index/`` goes away with its share, and a record there would be missing exactly when
it is needed). While either folder is missing or another one, memory writes are refused
(``storage``), nothing is made there, and the agents' inboxes are unreachable roots for the
supervisor, as an unmounted vault is: nothing of them is deleted from the index. This holds
across restarts: a daemon started on the bare mount point does not take it as the home.

Another folder is taken as the home (and recorded) when it holds an inbox of a known agent: a
share mounted again may come back under another device number (NFS, SMB), and a home moved on
purpose holds its inboxes. An empty or bare folder is taken only when the user says so
(``sidecar index --accept-home`` replaces the record with the user's consent; the next check
takes what is there).

At the first start (nothing recorded) a home below a mount point of the fstab that is not mounted
now is the bare folder an unmounted share leaves: it is not recorded (nor is ``agents/`` made)
until the share is mounted, or the user accepts it (the daemon's ``index/`` is still made there:
the lock and stores are opened before, and stay open until a restart). A share mounted by other
means is not known there: a first start on its bare folder records that folder, and once the
share is mounted the refusal says that case and the command.
Imports nothing from sidecar but the configuration, errors, the mount tables and the atomic write.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

from sidecar.config import Config, valid_agent
from sidecar.contracts.errors import StorageError
from sidecar.runtime.atomic import atomic_write
from sidecar.vault.mounts import read_fstab, read_mounts, unmounted_point_above

log = logging.getLogger(__name__)

_Ident = tuple[int, int]  # (st_dev, st_ino)
ACCEPT_COMMAND = "sidecar index --accept-home"
# A token written into the kept agents folder and recorded with it: the same folder seen under
# another device number (a share mounted again) or copied (a home moved on purpose) holds it; a
# bare mount point does not, also when an old write left a stale inbox there.
MARKER = ".sidecar-home"


class HomeChangedError(StorageError):
    """The home or its agents folder is gone or not the folder the daemon started on."""

    def __init__(self, why: str) -> None:
        super().__init__(refusal(why))
        self.why = why


def record_path(cfg: Config) -> Path | None:
    """Where the home's identity is recorded (one file per home path), None without a state folder."""
    if cfg.state_dir is None:
        return None
    digest = hashlib.sha256(os.fsencode(cfg.home)).hexdigest()[:16]
    return cfg.state_dir / "homes" / f"{digest}.json"


def clock_path(cfg: Config) -> Path | None:
    """Where the home's steady clock keeps its reading (beside the home's record: the state
    folder outlives an unmounted home), None without a state folder."""
    path = record_path(cfg)
    return None if path is None else path.with_name(f"{path.stem}.clock.json")


def forget(cfg: Config) -> bool:
    """Replace the home's record by the user's consent to the folder there now (taken at the next
    check, also below a mount point of the fstab that is not mounted); whether one was recorded."""
    path = record_path(cfg)
    if path is None:
        return False
    try:
        was = "homeId" in json.loads(path.read_bytes())
    except (OSError, ValueError, TypeError):
        was = path.exists()
    try:
        atomic_write(path, json.dumps({"home": str(cfg.home), "accepted": True}).encode())
    except OSError:
        # A consent that cannot be written: the record removed says the same to the guard.
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    log.warning("home_record_forgotten home=%s", cfg.home)
    return was


class HomeGuard:
    """Keeps the home's and ``agents/``'s identity (recorded); says when either is gone or replaced."""

    def __init__(self, cfg: Config) -> None:
        self.home = cfg.home
        self.agents = cfg.agents_dir
        self.record = record_path(cfg)
        self._fstab, self._mount_table = cfg.watch.fstab, cfg.watch.mount_table
        self._lock = threading.Lock()
        self._seen: tuple[_Ident, _Ident] | None = None
        self._known: set[str] = set()  # agents whose inbox the kept agents folder holds
        self._recorded = False  # a record was read or written: its removal is the user's consent
        self._mark: str | None = None  # the token of the kept agents folder (``MARKER``)
        self._since: float | None = None  # when the kept folders were first recorded
        self._bare: str | None = None  # why the folder there now is not taken (a first start)
        self.record_error: str | None = None  # why the record cannot be written (status says so)
        self._load()
        self.remember()

    @property
    def remembered(self) -> bool:
        return self._seen is not None

    def remember(self) -> None:
        """Take the folders there now as the ones to keep, if both are there and none is kept yet."""
        with self._lock:
            if self._seen is not None:
                return
            self._bare = self._unmounted_share()
            if self._bare is not None:
                return
            try:
                home, agents = os.stat(self.home), os.stat(self.agents, follow_symlinks=False)
            except OSError:
                return
            self._keep(home, agents, "home_recorded")

    def _unmounted_share(self) -> str | None:
        """Why the home there now is the bare folder of a share that is not mounted (it lies
        below a mount point of the fstab missing from the mount table), or None. A mount table
        that cannot be read says nothing (every point would look unmounted), nor does "/"."""
        if self.record is not None and _consented(self.record, missing=False):
            return None
        mounts = read_mounts(self._mount_table)
        if not mounts:
            return None
        fstab = [p for p in read_fstab(self._fstab) if p != "/"]
        point = unmounted_point_above(os.path.realpath(self.home), fstab, mounts) if fstab else None
        if point is None:
            return None
        if self._bare is None:
            log.warning("home_not_mounted home=%s mount_point=%s", self.home, point)
        return (
            f"the home {self.home} lies below {point}, a mount point of {self._fstab or '/etc/fstab'} "
            "that is not mounted (sidecar started before its share was mounted?): the bare folder "
            "there is not taken as the home and no agents/ folder is made there, but the vaults' "
            "index is kept in it until sidecar restarts: mount the share, then restart sidecar (if "
            f"the home is meant to be that folder: `{ACCEPT_COMMAND}`)"
        )

    def know(self, agent: str) -> None:
        """``agent``'s inbox is in the kept agents folder now (it was just written to)."""
        with self._lock:
            if agent in self._known or self._seen is None:
                return
            self._known.add(agent)
            self._save()

    def problem(self) -> str | None:
        """Why the inboxes cannot be used now (the home or ``agents/`` gone or replaced), or None.
        Remembers the folders when none are kept yet."""
        if self._seen is None:
            self.remember()
            return self._bare if self._seen is None else None
        home_id, agents_id = self._seen
        found: list[os.stat_result] = []
        for what, path, kept in (
            ("the home", self.home, home_id),
            ("the agents folder", self.agents, agents_id),
        ):
            try:
                st = os.stat(path, follow_symlinks=path == self.home)
            except FileNotFoundError:
                return self._unless_forgotten(f"{what} {path} is gone (unmounted? removed?)")
            except OSError as exc:
                return f"{what} {path} cannot be reached ({exc.strerror or exc}; unmounted?)"
            found.append(st)
            if (st.st_dev, st.st_ino) != kept and not self._holds_known(found):
                return self._unless_forgotten(_replaced(what, path) + self._first_start(path, st, kept))
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

    # --- the record ------------------------------------------------------------------------------

    def _holds_known(self, found: list[os.stat_result]) -> bool:
        """The folders there now are the kept ones under another identity: the same home mounted
        again (under another device number) or moved on purpose. Told by the kept folder's token
        (``MARKER``) where one was recorded, else by the known agents' inboxes. Taken and recorded."""
        try:
            home = found[0] if found else os.stat(self.home)
            agents = found[1] if len(found) > 1 else os.stat(self.agents, follow_symlinks=False)
            held = [a for a in sorted(self._known) if (self.agents / a / "memory").is_dir()]
        except OSError:
            return False
        if self._mark is not None:
            # The inboxes' names are no evidence here: with one agent (the common case), a stale
            # inbox an old write left on the bare mount point held "every known inbox".
            if _read_mark(self.agents) != self._mark:
                return False
            with self._lock:
                self._keep(home, agents, "home_taken_again", " (its agents folder holds the recorded token)")
            return True
        # Every known inbox, or (some gone on purpose) the recorded agents folder itself under
        # another device number: a bare folder with a stale inbox left in it by an old write is
        # neither.
        if not held or (len(held) < len(self._known) and self._seen and agents.st_ino != self._seen[1][1]):
            return False
        with self._lock:
            self._keep(home, agents, "home_taken_again", f" with the inboxes of {', '.join(held)}")
        return True

    def _first_start(self, path: Path, st: os.stat_result, kept: _Ident) -> str:
        """What a refusal adds when the kept folders never held an agent's memory and the folder
        at ``path`` now is on another device, while the kept one's device holds a folder above it:
        a share mounted since over the bare mount point the first start recorded (the user was
        left to guess why writes were refused with the share there). Not said the other way
        round (the share recorded, unmounted now: its device is nowhere above the bare folder),
        where taking the folder there would be the very mistake."""
        if self._known or st.st_dev == kept[0]:
            return ""
        try:
            above = {os.stat(folder).st_dev for folder in path.parents}
        except OSError:
            return ""
        if kept[0] not in above:
            return ""
        when = time.strftime(" on %Y-%m-%d at %H:%M", time.localtime(self._since)) if self._since else ""
        return (
            f"; sidecar recorded the folder there at its first start{when}, before any agent wrote to it: "
            "if the home's share was not mounted then, that was its bare mount point and the folder "
            f"there now is the real home: run `{ACCEPT_COMMAND}` to take it"
        )

    def _unless_forgotten(self, why: str) -> str | None:
        """``why``, unless the user replaced the record by consent (accepting the folder there now)."""
        if not self._recorded or self.record is None or not _consented(self.record):
            return why
        log.warning("home_accepted home=%s was: %s", self.home, why)
        with self._lock:
            self._seen, self._known, self._recorded, self._mark = None, set(), False, None
            self._since = None
        self.remember()
        return None

    def _keep(self, home: os.stat_result, agents: os.stat_result, event: str, more: str = "") -> None:
        """Keep these folders (the lock held) and record them with the agents whose inboxes they hold."""
        self._seen = (home.st_dev, home.st_ino), (agents.st_dev, agents.st_ino)
        self._mark = _read_mark(self.agents) or _write_mark(self.agents)
        self._since = self._since if event == "home_taken_again" and self._since else time.time()
        with contextlib.suppress(OSError):
            self._known |= {
                a for a in os.listdir(self.agents) if valid_agent(a) and (self.agents / a / "memory").is_dir()
            }
        log.info("%s home=%s%s", event, self.home, more)
        self._save()

    def _save(self) -> None:
        if self.record is None or self._seen is None:
            return
        (home_id, agents_id), known = self._seen, sorted(self._known)
        data: dict[str, Any] = {"home": str(self.home), "homeId": home_id, "agentsId": agents_id}
        data.update(agents=known, mark=self._mark, since=self._since)
        try:
            atomic_write(self.record, json.dumps(data).encode())
        except OSError as exc:  # kept for this run; a restart on a bare mount point is not caught
            log.warning("home_record_failed path=%s error=%s", self.record, exc.strerror or exc)
            self.record_error = f"{self.record}: {exc.strerror or exc}"
            return
        self._recorded, self.record_error = True, None

    def _load(self) -> None:
        if self.record is None:
            return
        try:
            data: Any = json.loads(self.record.read_bytes())
            if data["home"] != str(self.home):
                raise ValueError(f"recorded for {data['home']!r}")
            if data.get("accepted") is True:
                return  # the user's consent, no folder yet: the next check takes what is there
            seen = _ident(data["homeId"]), _ident(data["agentsId"])
            known = {a for a in data["agents"] if isinstance(a, str) and valid_agent(a)}
            mark = data.get("mark") if isinstance(data.get("mark"), str) else None
            since = data.get("since") if isinstance(data.get("since"), (int, float)) else None
        except FileNotFoundError:
            return  # the first start on this home
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("home_record_unreadable path=%s error=%s", self.record, exc)
            return
        self._seen, self._known, self._recorded, self._mark = seen, known, True, mark
        self._since = since


def _consented(record: Path, *, missing: bool = True) -> bool:
    """The user accepted the folder at the home's path now: the record replaced by a consent
    (``forget``), or removed (as an older ``--accept-home`` did: ``missing`` says whether a record
    that is not there counts, which it does only where one was there before)."""
    try:
        data: Any = json.loads(record.read_bytes())
    except FileNotFoundError:
        return missing
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("accepted") is True


def _read_mark(agents: Path) -> str | None:
    try:
        fd = os.open(agents / MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        text = os.read(fd, 256).decode("ascii", "replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return text or None


def _write_mark(agents: Path) -> str | None:
    """A new token in ``agents`` (made once: an existing one is read), or None when it cannot be
    written (the record then falls back to the known agents' inboxes)."""
    token = secrets.token_hex(16)
    try:
        fd = os.open(
            agents / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except FileExistsError:
        return _read_mark(agents)
    except OSError as exc:
        log.warning("home_mark_failed path=%s error=%s", agents / MARKER, exc.strerror or exc)
        return None
    try:
        os.write(fd, (token + "\n").encode())
        os.fsync(fd)
    except OSError:
        return None
    finally:
        os.close(fd)
    return token


def _ident(value: Any) -> _Ident:
    dev, ino = value
    if not (isinstance(dev, int) and isinstance(ino, int)):
        raise TypeError(f"not a device and inode: {value!r}")
    return dev, ino


def _replaced(what: str, path: Path) -> str:
    return (
        f"{what} {path} is not the folder sidecar kept the agents' memory in and holds no sign of "
        "being it (share unmounted? replaced?)"
    )


def _accept_hint(why: str) -> str:
    """The way out, unless ``why`` names it already."""
    return "" if ACCEPT_COMMAND in why else f" (if the home was replaced on purpose: `{ACCEPT_COMMAND}`)"


def refusal(why: str) -> str:
    """What a refused memory change says."""
    return f"{why}; nothing was changed: memory writes wait until it is back{_accept_hint(why)}"


def held(why: str) -> str:
    """What status says of the inboxes while the home or ``agents/`` is not there."""
    return (
        f"{why}: memory writes are refused and no memory note is deleted from the index until it is "
        f"back{_accept_hint(why)}"
    )
