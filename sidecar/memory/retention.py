"""Retention of an agent's memory: how long the texts kept in an inbox's ``.trash`` stay
(``memory.trashDays`` and the caps), the retirement of agents with nothing left (their folders
removed, their audit history kept in ``agents/.retired/``), and how long that history stays
(``memory.retiredAuditDays``). A part of :class:`sidecar.memory.inbox.Inboxes` (its base class):
retirement shares the inbox's note locks, so a write racing it is never lost. Imports config,
confine, errors, and trash.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from contextlib import AbstractContextManager

from sidecar.config import Config, valid_agent
from sidecar.contracts.errors import SourceError
from sidecar.memory.trash import (
    KEPT,
    STAMP,
    TRASH_TEMP,
    Fd,
    Trash,
    is_time,
    name_time,
    over,
    read_stamp,
    trash_dir,
)
from sidecar.runtime.steadyclock import SteadyClock
from sidecar.vault.confine import NotPrivateError, open_private_dir, open_regular, private_dirs
from sidecar.vault.homeguard import HomeGuard

log = logging.getLogger(__name__)

RETIRED_DIR = ".retired"  # in agents/: the audit logs of agents whose folders were retired
_AUDIT_LOGS = ("audit.log.1", "audit.log")  # an agent folder's generations, oldest first


def _drop_stale_stamps(trash_fd: int) -> None:
    """Remove the stamp-only markers whose copy is gone (aged out, capped, removed by the user):
    one per note ever re-saved unchanged would stay for good, and keep an empty agent's folders."""
    for name in os.listdir(trash_fd):
        if (m := STAMP.match(name)) is None:
            continue
        known = read_stamp(trash_fd, m.group(1))
        if known is not None:
            with contextlib.suppress(FileNotFoundError):
                os.stat(known[0], dir_fd=trash_fd, follow_symlinks=False)
                continue
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=trash_fd)


def _changed_since(trash_fd: int, name: str, since: float) -> bool:
    """Whether a kept text was changed at or after ``since``: written (mtime: an editor saved
    into it) or its inode changed (ctime). Its name's time says when it was kept, not when a
    person last touched it: one edited yesterday was removed for a name months old. The mtime
    alone missed an edit by a tool that sets the old time back (``cp -p`` or ``rsync -t`` of a
    restored copy, an editor set to keep times): nothing sets ctime back. An untouched text's
    mtime is its note's last write and its ctime the keep's rename, so it still ages by its
    name. A copy or restore of the folder sets ctime too: its texts then age from that (kept
    longer, never shorter), as does a time ahead of ``since`` (a clock stepped back, a future
    time set by hand); the caps still bound the folder."""
    st = os.stat(name, dir_fd=trash_fd, follow_symlinks=False)
    return max(st.st_mtime, st.st_ctime) >= since


class Retention:
    """Pruning of the inboxes' .trash and retirement of empty agents, for ``Inboxes``."""

    # Set by Inboxes: its config, home, clock, and the note locks' state retirement waits on.
    cfg: Config
    home: HomeGuard
    clock: SteadyClock
    _guard: threading.Lock
    _busy: dict[str, int]
    _retiring: set[str]
    _retired: threading.Condition
    _trashes: dict[str, Trash]

    # Inboxes' own (the inbox's folders, its ledgers, its caps, its agents)
    def _dirs(self, agent: str, *, create: bool) -> AbstractContextManager[tuple[int, int]]:
        raise NotImplementedError

    def _trash_of(self, agent: str) -> Trash:
        raise NotImplementedError

    def _caps(self) -> tuple[int, int]:
        raise NotImplementedError

    def _agent_names(self) -> list[str]:
        raise NotImplementedError

    def _settle_held(self, agent: str, inbox_fd: int, trash_fd: int) -> None:
        raise NotImplementedError

    def _settle_temps(self, agent: str, inbox_fd: int, *, running: bool) -> int:
        raise NotImplementedError

    def prune_trash(self, now: float | None = None) -> int:
        """Remove texts kept in the inboxes' .trash longer than ``memory.trashDays`` (their age is
        since the latest of the time in their name, as written by this daemon, their mtime and
        their ctime: one a person opened and edited there is judged by that edit, see
        ``_changed_since``; other files are left alone), and the
        oldest beyond the caps (a trash kept by an older version, or caps lowered); leftovers of
        a keep that was killed go too, and those of a write that was killed are settled as at a
        start. Counts each trash afresh for the caps (see Trash). An
        agent in a loop of rewrites would otherwise fill the disk the index shares over the years.
        Then retires the folders of agents with nothing left (see ``_retire``). Returns how many
        kept texts were removed.

        A text's age counts only as far as real time confirms it: "now" is the earlier of the
        wall clock and the steady clock (which a step of the wall clock does not move), so a
        step forward ages nothing and a step back only keeps texts longer."""
        days = self.cfg.memory.trash_days
        if now is None:
            now = min(self.clock.wall(), self.clock.now())
        # The name's time is fixed-width digits: compared as text, as in time (no parsing of each).
        cutoff = name_time(now - days * 86_400) if days > 0 else ""
        caps = self._caps()
        removed = retired = 0
        for agent in self._agent_names():
            aged, capped = self._prune_one(agent, (cutoff, now - days * 86_400), caps)
            if aged:
                log.info("memory_trash_pruned agent=%s removed=%d older_than_days=%d", agent, aged, days)
            if capped:
                log.info(
                    "memory_trash_capped agent=%s removed=%d limit_bytes=%d limit_files=%d",
                    agent,
                    capped,
                    caps[0],
                    caps[1],
                )
            removed += aged + capped
            retired += self._retire(agent)
        # A ledger per agent ever touched grew for good: keep those of agents with a folder.
        present = set(self._agent_names())
        with self._guard:
            for agent in [a for a in self._trashes if a not in present and a not in self._busy]:
                del self._trashes[agent]
        if retired:
            log.info("agents_retired count=%d audit_logs=%s", retired, self.cfg.agents_dir / RETIRED_DIR)
        self._prune_retired(now)
        return removed

    def _prune_retired(self, now: float) -> int:
        """Remove the audit histories of retired agents whose last retirement is older than
        ``memory.retiredAuditDays`` (agents named per session left one file each, for good). Only
        regular files named for an agent; anything else in the folder is left alone."""
        days = self.cfg.memory.retired_audit_days
        if days <= 0 or self.home.problem() is not None:
            return 0
        agents, removed = self.cfg.agents_dir, 0
        what = "the retired agents' folder"
        try:
            with private_dirs(agents.parent, [agents.name, RETIRED_DIR], create=False, what=what) as fds:
                retired_fd = fds[1]
                for name in os.listdir(retired_fd):
                    agent = name.removesuffix(".audit.log")
                    if agent == name or not valid_agent(agent):
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        st = os.stat(name, dir_fd=retired_fd, follow_symlinks=False)
                        if stat.S_ISREG(st.st_mode) and st.st_mtime < now - days * 86_400:
                            os.unlink(name, dir_fd=retired_fd)
                            removed += 1
        except FileNotFoundError:
            return removed  # nothing retired yet
        except (OSError, SourceError) as exc:
            log.warning("retired_audit_prune_failed error=%s", exc)
        if removed:
            log.info("retired_audit_pruned removed=%d older_than_days=%d", removed, days)
        return removed

    def _prune_one(self, agent: str, cutoff: tuple[str, float], caps: tuple[int, int]) -> tuple[int, int]:
        """Prune one agent's .trash: (texts removed by age, texts removed by the caps). ``cutoff``:
        the name's time and the epoch time before which a kept text is old enough."""
        aged = capped = 0
        try:
            with self._dirs(agent, create=False) as (_agent_fd, inbox_fd):
                # The temp files of writes killed mid-way, as at a start: a daemon running for
                # months kept them (and the text a person saved into one) until its next start.
                self._settle_temps(agent, inbox_fd, running=True)
                try:
                    trash = trash_dir(inbox_fd, create=False)
                except FileNotFoundError:
                    return 0, 0
                ledger = self._trash_of(agent)
                with contextlib.closing(Fd(trash)):
                    # First, and outside the ledger's lock (it takes the notes' locks, which come
                    # first): the caps then count the texts it keeps.
                    self._settle_held(agent, inbox_fd, trash)
                    with ledger.lock:
                        for name in os.listdir(trash):
                            m = KEPT.match(name)
                            if m is not None and m.group(1) < cutoff[0] and is_time(m.group(1)):
                                with contextlib.suppress(OSError):  # gone, or a folder so named
                                    if not _changed_since(trash, name, cutoff[1]):
                                        os.unlink(name, dir_fd=trash)
                                        aged += 1
                            elif m is None and TRASH_TEMP.match(name):
                                # Left by a keep that was killed (a keep runs under the lock held).
                                with contextlib.suppress(OSError):
                                    os.unlink(name, dir_fd=trash)
                        _drop_stale_stamps(trash)
                        ledger.seen = None  # counted again, with what is left
                        if caps != (0, 0):  # else when asked (a stat of each kept text)
                            ledger.counted(trash)
                            if over(ledger.used, ledger.files, caps):
                                capped = len(ledger.shed(trash, caps, keep=set()))
        except (OSError, SourceError):
            pass  # no inbox, or not a private one; what was removed is still counted
        return aged, capped

    def _retire(self, agent: str) -> bool:
        """Remove the folders of an agent with nothing left: no file in its inbox and none in its
        .trash (its texts aged out). Every agent name ever used kept three folders, three inotify
        watches and a listing per sweep for good (names per session made tens of thousands). Its
        audit history is appended to ``agents/.retired/<agent>.audit.log`` first. Runs while no
        note lock of the agent is held or waited for, and holds off new ones until done (they
        then make fresh folders): a write racing it is never lost. A folder not of the daemon's
        own shape (a link, another user's, anything else in it) is left alone. True if retired."""
        with self._guard:
            # A write or delete of it runs or waits: tomorrow, then (or a retirement runs already).
            if self._busy.get(agent) or agent in self._retiring:
                return False
            self._retiring.add(agent)
        done = False
        try:
            done = self._remove_folders(agent)
        except FileNotFoundError:
            done = False
        except NotPrivateError:
            done = False  # not the daemon's own folder: not ours to remove
        except OSError as exc:
            log.warning("agent_retire_failed agent=%s error=%s", agent, exc)
            done = False
        finally:
            with self._guard:
                if done:  # before a waiting writer comes in: it makes a fresh ledger
                    self._trashes.pop(agent, None)
                self._retiring.discard(agent)
                self._retired.notify_all()
        if done:
            log.info("agent_retired agent=%s reason=no notes and an empty trash", agent)
        return done

    def _remove_folders(self, agent: str) -> bool:
        """``_retire``'s work, with the agent's note locks held off. Checks again, through the
        descriptors it removes by, that nothing is left; a file put there meanwhile by someone
        else makes a folder's removal fail (it is not empty), so it is never lost."""
        agents = self.cfg.agents_dir
        what = f"the folder of agent {agent!r}"
        with (
            private_dirs(agents.parent, [agents.name, agent], create=False, what=what) as fds,
            contextlib.ExitStack() as stack,
        ):
            agents_fd, agent_fd = fds
            inside = set(os.listdir(agent_fd))
            if not inside <= {"memory", *_AUDIT_LOGS}:
                return False
            logs = [n for n in _AUDIT_LOGS if n in inside]  # oldest first
            if any(
                not stat.S_ISREG(os.stat(n, dir_fd=agent_fd, follow_symlinks=False).st_mode) for n in logs
            ):
                return False
            inbox_fd = trash_fd = None
            if "memory" in inside:
                inbox_fd = stack.enter_context(
                    contextlib.closing(Fd(open_private_dir(agent_fd, "memory", create=False, what=what)))
                ).fd
                names = os.listdir(inbox_fd)
                if names not in ([], [".trash"]):
                    return False  # a note, a hidden one, a temp file of a write, the user's file
                if names:
                    trash_fd = stack.enter_context(
                        contextlib.closing(Fd(trash_dir(inbox_fd, create=False)))
                    ).fd
                    if os.listdir(trash_fd):
                        return False
            if logs:
                self._keep_audit(agents_fd, agent_fd, agent, logs)
            if inbox_fd is not None:
                if trash_fd is not None:
                    os.rmdir(".trash", dir_fd=inbox_fd)
                os.rmdir("memory", dir_fd=agent_fd)
            os.rmdir(agent, dir_fd=agents_fd)  # fails if anything came meanwhile: it stays
            os.fsync(agents_fd)
        return True

    def _keep_audit(self, agents_fd: int, agent_fd: int, agent: str, logs: list[str]) -> None:
        """Append the agent's audit logs (oldest first) to ``.retired/<agent>.audit.log`` (one
        file per agent in one folder: one watch for all), made durable before the originals go.
        A crash in between leaves the originals, appended again by the next retirement: lines
        may come twice, none is lost."""
        # Read too: its last byte says whether a crash cut its last line.
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        with contextlib.closing(
            Fd(open_private_dir(agents_fd, RETIRED_DIR, create=True, what="the retired agents' folder"))
        ) as retired:
            fd = os.open(f"{agent}.audit.log", flags, 0o600, dir_fd=retired.fd)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise NotPrivateError(f"{RETIRED_DIR}/{agent}.audit.log is not a regular file")
                if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
                    os.write(fd, b"\n")  # a line cut by a crash stays on a line of its own
                for name in logs:
                    src = open_regular(name, dir_fd=agent_fd, follow=False)
                    try:
                        while block := os.read(src, 1 << 20):
                            view = memoryview(block)
                            while view:
                                view = view[os.write(fd, view) :]
                    finally:
                        os.close(src)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.fsync(retired.fd)
        for name in logs:
            os.unlink(name, dir_fd=agent_fd)
        os.fsync(agent_fd)
