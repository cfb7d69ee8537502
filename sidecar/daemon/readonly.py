"""Serving while the index's disk is full: what the read-only daemon refuses and says
(``ReadOnly``), and the server's handler of the moment (``Dispatch``), which hands the socket's
requests from the read-only handlers to the writable ones once the disk has room, without closing
the socket."""

from __future__ import annotations

import copy
import logging
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sidecar import __version__
from sidecar.config import Config
from sidecar.contracts.errors import (
    BusyError,
    ProtocolError,
    StorageError,
    StoresClosedError,
    cut_short_message,
    engine_text,
    stopping_message,
)
from sidecar.contracts.printable import quoted
from sidecar.contracts.protocol import (
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_RANGE,
    PROTOCOL_VERSION,
    Request,
    check_known,
    param_int,
    param_opt_str,
    param_str,
)
from sidecar.contracts.wire import under_prefix
from sidecar.daemon.compose import Dispatcher
from sidecar.daemon.handlers import Handlers
from sidecar.daemon.server import WRITE_OPS
from sidecar.index.problems import Problems
from sidecar.memory.inbox import Inboxes
from sidecar.memory.inbox_bounded import in_inbox
from sidecar.memory.inbox_types import check_agent, check_slug
from sidecar.memory.ops import audit_warning, deleted_reply, unindexed_note
from sidecar.runtime.release import build_id
from sidecar.stores.space import LOW_BYTES
from sidecar.vault.references import public_reference
from sidecar.vault.sources import Asking, Root, agent_inbox, asked
from sidecar.vault.supervisor import RootUnreachable, StopCut, Supervisor

log = logging.getLogger(__name__)


def folder_looks(cfg: Config, stop: threading.Event | None = None) -> Supervisor:
    """The read-only modes' looks at the agents folder and its inboxes (a list from the inbox, the
    room check before a write is saved): the supervisor's own bounded look (``Supervisor.looked``),
    as a memory change's look at its inbox is when the index is open. Each call is waited for
    watch.probeTimeoutSeconds; one that does not answer leaves its thread in the share and the
    next look at the same root is told at once while it is still in (one stuck thread per inbox,
    not one per request); one that answers late teaches that the share is slow, and its calls
    are then waited for as long as a request's look may take. No index is open to remember that
    in: learnt for the daemon's run. ``stop``: the daemon's stop, which ends a wait at once."""
    looks = Supervisor(cfg)
    if stop is not None:
        looks.stopping = stop  # set first thing by the stop: a look then ends at once
    return looks


class Refusing:
    """Handlers of a daemon whose index cannot be read: ``health`` answers a record saying so
    (``InboxOnly.health``: what, which path, what to do), the memory list lists the agent's inbox
    from disk, and memory writes, edits and deletes are saved in the agent's inbox when it may be
    written (``inbox``: no index is open to update, the catch-up sweep indexes them once the index
    can be read), as the read-only state saves them: an agent's memory is not lost because the
    index folder alone refuses. Every other request is refused (code ``storage``) with why."""

    def __init__(self, why: str, inbox: InboxOnly | None = None) -> None:
        self.why = why
        self.inbox = inbox

    def dispatch(self, req: Request) -> dict[str, Any]:
        if self.inbox is not None:
            if req.op == "health":
                return self.inbox.health(req, self.why)
            if req.op == "list":
                return self.inbox.listed(req, self.why)
            if req.op in ReadOnly.MEMORY and self.inbox.writable(req.agent):
                return self.inbox.dispatch(req, self.why)
        raise StorageError(self.why)


class InboxOnly:
    """Memory writes, edits, deletes and lists in the inboxes alone, no index open (``Refusing``),
    and the health record of that state. One for the daemon's life: its ``Inboxes`` (the note
    locks, the kept texts' caps) is not made anew at every retry of the index."""

    def __init__(
        self,
        cfg: Config,
        writable: Callable[[str | None], bool],
        started: float,
        looks: Supervisor | None = None,
    ) -> None:
        self.cfg = cfg
        self.inboxes = Inboxes(cfg)
        self.writable = writable  # ``ReadOnly.inboxes_writable``: asked at each request
        self.looks = looks if looks is not None else folder_looks(cfg)  # the list's, bounded
        self.started = started
        self.problems = Problems()  # the audit log's failures, shown by ``health``
        self.since = time.time()  # when the index was first found unreadable (health's "since")

    def health(self, req: Request, why: str) -> dict[str, Any]:
        """A record in ``health``'s shape (its common fields, ``index.state`` "refusing") whose
        ``refusing`` and active index problem say why nothing is served from the index and what to
        do: status and doctor show it (a refusal in its place left status with exit 7 and no record)."""
        check_known(req.params, ())
        now = time.time()
        problems = self.problems.describe()
        active = [p for p in problems.get("active", []) if p.get("area") != "index"]
        since, started = self.since, self.started
        active.append({"area": "index", "error": why, "since": since, "last": now, "count": 1})
        return {
            "version": __version__,
            "build": build_id(),
            "protocol": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "started": started,
            "uptime_seconds": round(now - started, 1),
            "home": str(self.cfg.home),
            "socket": str(self.cfg.socket_path),
            "vault": str(self.cfg.vault.path) if self.cfg.vault.path else None,
            "refusing": why,
            "index": {"state": "refusing", "path": str(self.cfg.index_dir), "error": why},
            "problems": {"active": active, "recent": problems.get("recent", [])},
        }

    def listed(self, req: Request, why: str) -> dict[str, Any]:
        """The agent's memory notes as its inbox holds them (``list``'s shape, each ``indexed:
        false`` with why): listing needs no index. Other sources, and a tag (read from the index),
        are refused with why."""
        p = req.params
        check_known(p, ("source", "tag", "pathPrefix", "limit"))
        if req.agent is None:
            raise ProtocolError("list needs an agent name (the 'agent' field of the request; --agent)")
        agent = check_agent(req.agent)
        if (param_opt_str(p, "source") or "memory") != "memory" or param_opt_str(p, "tag"):
            raise StorageError(f"{why} (the memory list without a tag is answered from the inbox meanwhile)")
        prefix = param_opt_str(p, "pathPrefix") or ""
        lo, hi = LIST_LIMIT_RANGE
        limit = param_int(p, "limit", default=LIST_LIMIT_DEFAULT, lo=lo, hi=hi)
        inbox = agent_inbox(self.cfg, agent)
        root = Root("memory", inbox, agent=agent)
        short = why.split(";", maxsplit=1)[0]

        def look(asking: Asking) -> list[dict[str, Any]]:
            notes = []
            with asked(asking, "listing", "."), os.scandir(inbox) as entries:
                found = [e for e in entries if e.name.lower().endswith(".md") and not e.name.startswith(".")]
            for e in found:
                reference = public_reference(root.key_of_path(Path(e.path)), agent)
                if not under_prefix(reference.split("/", 1)[1], prefix, "memory"):
                    continue
                with asked(asking, "stat", e.name):
                    st = e.stat(follow_symlinks=False)
                notes.append(unindexed_note(reference, "memory", (st.st_mtime_ns, st.st_ctime_ns), short))
            return notes

        try:
            notes = self.looks.looked(root, look)
        except FileNotFoundError:
            notes = []  # no inbox yet: no notes
        except StopCut as exc:
            raise BusyError(stopping_message("the list")) from exc
        except RootUnreachable as exc:
            raise StorageError(f"the inbox cannot be listed: {exc}; try again once it answers") from exc
        except OSError as exc:
            raise StorageError(f"the inbox {inbox} cannot be read: {exc.strerror or exc}") from exc
        notes.sort(key=lambda n: n["reference"])
        return {"notes": notes[:limit], "total": len(notes), "truncated": len(notes) > limit}

    def dispatch(self, req: Request, why: str) -> dict[str, Any]:
        p = req.params
        agent = check_agent(req.agent)
        slug = check_slug(p.get("slug"))
        short = why.split(";", maxsplit=1)[0]  # "the index cannot be read: <what>"
        if req.op == "delete":
            check_known(p, ("slug",))
            with self.inboxes.locked(agent, slug):
                try:
                    moved = in_inbox(
                        self.looks,
                        Root("memory", agent_inbox(self.cfg, agent), agent=agent),
                        lambda: self.inboxes.delete(agent, slug, held=True),
                        call="moving to .trash",
                        slug=slug,
                        done="deleted",
                        keep=lambda: self.inboxes.keep(agent, slug),
                    )
                except OSError as exc:
                    raise StorageError(f"not deleted: {exc.strerror or exc}; the note is unchanged") from exc
            gone = deleted_reply(slug, moved)
            if moved is None:
                return gone
            log.info("memory_delete agent=%s slug=%s index=unreadable", agent, slug)
            still = f"deleted, but still found by search until the index can be read again ({short})"
            audit = audit_warning(moved.audit_error, agent, self.problems)
            gone["warning"] = "; ".join(w for w in (still, audit) if w)
            return gone
        check_known(p, ("slug", "content", "frontmatter"))
        content = param_str(p, "content", max_len=self.cfg.server.max_frame_bytes)
        front_matter = p.get("frontmatter")
        must_exist = req.op == "edit"
        self.inboxes.precheck(agent, slug, content, front_matter)
        with self.inboxes.locked(agent, slug):
            try:
                written = in_inbox(
                    self.looks,
                    Root("memory", agent_inbox(self.cfg, agent), agent=agent),
                    lambda: self.inboxes.write(
                        agent, slug, content, front_matter, must_exist=must_exist, held=True
                    ),
                    call="writing",
                    slug=slug,
                    done="written",
                    keep=lambda: self.inboxes.keep(agent, slug),
                )
            except OSError as exc:
                raise StorageError(f"not written: {exc.strerror or exc}; the inbox is unchanged") from exc
        log.info("memory_%s agent=%s slug=%s bytes=%d index=unreadable", req.op, agent, slug, written.size)
        key = Root("memory", agent_inbox(self.cfg, agent), agent=agent).key_of_path(written.path)
        later = f"saved, but not searchable yet: {short}; it is indexed once the index can be read again"
        audit = audit_warning(written.audit_error, agent, self.problems)
        out: dict[str, Any] = {
            "reference": public_reference(key, agent),
            "action": "created" if written.created else ("updated" if must_exist else "replaced"),
            "created": written.created,
            "bytes": written.size,
            "redacted": written.redacted,
            "duplicates": [],
            "duplicatesChecked": False,
            "searchable": False,
        }
        if written.previous is not None:
            out["previous"] = str(written.previous)
        if written.trash_dropped:
            out["trashDropped"] = list(written.trash_dropped)
        out["warning"] = "; ".join(w for w in (later, audit) if w)
        return out


def unreadable_words(exc: BaseException) -> str:
    """What every request is answered while the index cannot even be read for want of
    permission (``Refusing``): the denied path and what to do."""
    return (
        f"the index cannot be read: {engine_text(str(exc))}; give the user the daemon runs as read "
        "and write access to the index folder and all in it (chown -R, chmod -R u+rwX, chattr -R -i); "
        "the daemon tries again every few seconds and resumes by itself, no restart needed"
    )


class Stopping:
    """Handlers of a daemon that stops: every request is refused ``busy``, as the server refuses
    those arriving during its drain (the docs promise ``busy``; ``storage`` said a file failed)."""

    def dispatch(self, req: Request) -> dict[str, Any]:
        raise BusyError(stopping_message(quoted(req.op)))


class Dispatch:
    """The server's handler: the handlers of the moment (read-only ones are replaced by the
    normal ones once the disk has room, without closing the socket). ``hold`` makes new requests
    wait and returns once those on the current handlers are answered; ``release`` hands them on."""

    def __init__(self, handlers: Dispatcher) -> None:
        self._cond = threading.Condition()
        self._handlers: Dispatcher | None = handlers
        self._generation = 0
        self._running: Counter[int] = Counter()  # requests in flight, by handlers' generation
        self._interim: Dispatcher | None = None  # answers health while held
        self._closed = False  # the daemon stops: no handlers are handed on any more
        # Writes in flight (any generation): the stop closes the stores only once none runs. A read
        # still running then is not waited for (one hung on a share would hold every stop up); it
        # fails quietly (``busy``) if it touches the closed stores: a read changes no file.
        self._writes = 0
        self._when_idle: Callable[[], None] | None = None  # run by the last write to end
        self._stores_closed = False

    def dispatch(self, req: Request) -> dict[str, Any]:
        with self._cond:
            interim = self._interim
            if self._handlers is None and interim is not None and req.op in _AT_ONCE:
                return interim.dispatch(req)
            # Held well below the clients' timeouts (60 s): a memory write held longer was applied
            # after its client had given up on it, and a retry of an edit applied it twice.
            if not self._cond.wait_for(lambda: self._handlers is not None, _SWITCH_WAIT):
                raise StorageError(
                    "the index may be written again and is being reopened for writing; nothing "
                    "was done: try again in a moment"
                )
            handlers, generation = self._handlers, self._generation
            self._running[generation] += 1
            write = req.op in WRITE_OPS
            self._writes += write
        assert handlers is not None
        try:
            return handlers.dispatch(req)
        except StoresClosedError:
            # Met the closed index partway: said as what it is (the store's words are of that
            # one step; "nothing was written" would be untrue of a request that wrote before).
            raise BusyError(cut_short_message(quoted(req.op), write=write)) from None
        except Exception:
            if self._stores_closed:  # a read that outlasted the stop: its stores are gone
                raise BusyError(cut_short_message(quoted(req.op), write=write)) from None
            raise
        finally:
            then = None
            with self._cond:
                self._running[generation] -= 1
                self._writes -= write
                self._cond.notify_all()
                if self._when_idle is not None and self._writes <= 0:
                    then, self._when_idle = self._when_idle, None
            if then is not None:
                then()

    def running(self) -> int:
        """Requests in flight (a read left running by the stop among them)."""
        with self._cond:
            return sum(n for n in self._running.values() if n > 0)

    def after_running(self, then: Callable[[], None]) -> bool:
        """Whether a write still runs: ``then`` is then run in the thread of the last one, once it
        ends (the stop closes the stores only when no write can touch them: a write that outlasted
        the stop's drain ran on into closed stores). False (nothing run) when none does. Reads are
        not waited for (see ``stores_closing``)."""
        with self._cond:
            if self._writes <= 0:
                return False
            self._when_idle = then
            return True

    def stores_closing(self) -> None:
        """The stop closes the stores now: a read still running that fails from here on is
        answered ``busy`` (the daemon is stopping), not logged as an internal error."""
        self._stores_closed = True

    def hold(self, most: float | None = None, interim: Dispatcher | None = None) -> bool:
        """Whether the requests on the current handlers were answered within ``most`` seconds (new
        ones wait meanwhile, but health, answered by ``interim`` if given). If not, the current
        handlers serve again and nothing is held: a request that never ends (a read of a hung
        share) held the switch, and every request behind it, for good, with nothing feeding the
        systemd watchdog."""
        with self._cond:
            if self._closed:
                return False
            handlers, self._handlers = self._handlers, None
            self._interim = interim
            held = self._generation
            if not self._cond.wait_for(
                lambda: self._running[held] <= 0, _HOLD_WAIT if most is None else most
            ):
                if not self._closed:
                    self._handlers, self._interim = handlers, None
                self._cond.notify_all()
                return False
            del self._running[held]
            return True

    def release(self, handlers: Dispatcher) -> None:
        with self._cond:
            if not self._closed:
                self._hand_on(handlers)

    def close(self, handlers: Dispatcher) -> None:
        """Hand on ``handlers`` for good (the daemon stops): a switch that ends later hands on
        nothing (it re-armed the requests with stores opened after the stop)."""
        with self._cond:
            self._closed = True
            self._hand_on(handlers)

    def close_if_held(self, handlers: Dispatcher) -> None:
        """``close`` now if requests are held (a switch to writable runs while a stop begins): they
        are answered at once, not at the end of the stop's drain."""
        with self._cond:
            if self._handlers is None and not self._closed:
                self._closed = True
                self._hand_on(handlers)

    def _hand_on(self, handlers: Dispatcher) -> None:
        self._generation += 1
        self._handlers, self._interim = handlers, None
        self._cond.notify_all()


class SwitchingHealth:
    """health while the index is reopened for writing (requests are held meanwhile): the last
    answer of the read-only handlers, with the switch as the index's problem."""

    def __init__(self, health: dict[str, Any]) -> None:
        self.health = health
        self.since = time.time()
        self._taken = time.monotonic()  # when ``health`` was answered, by the uptime's clock

    def dispatch(self, req: Request) -> dict[str, Any]:
        answer = copy.deepcopy(self.health)
        if isinstance(uptime := answer.get("uptime_seconds"), (int, float)):
            # That answer's uptime and the time since, by the steady clock (by the wall clock a
            # step made it negative or days long).
            answer["uptime_seconds"] = round(uptime + max(time.monotonic() - self._taken, 0.0), 1)
        problems, since = answer.setdefault("problems", {}), self.since
        active = [p for p in problems.get("active", []) if p.get("area") != "index"]
        active.append(
            {
                "area": "index",
                "error": (
                    # Room on the disk or the permission back (an immutable flag lifted): which
                    # one is not known here, and "the disk has room" was false for the latter.
                    "switching to writable: the index may be written again and is being reopened "
                    f"for writing; other requests wait up to {_SWITCH_WAIT:.0f} s meanwhile"
                ),
                "since": since,
                "last": time.time(),
                "count": 1,
            }
        )
        problems["active"] = active
        return answer


class ReadOnly:
    """What a daemon serving an index opened read-only (its disk full) refuses, and says."""

    WRITES = frozenset({"index", "write", "edit", "delete"})  # indexing, memory writes, rebuilds
    MEMORY = frozenset({"write", "edit", "delete"})

    def __init__(self, index_dir: Path, manifest: Path, agents_dir: Path, looks: Supervisor) -> None:
        self.index_dir = index_dir
        self.agents_dir = agents_dir
        self.looks = looks  # the room check's calls on the agents' share, bounded
        self.failed: str | None = None  # why the last switch to writable failed, if not for space
        # Why the switch waits for a thread of a failed one, while it does (``Daemon._switch_waits``).
        self.waiting: Callable[[], str | None] = lambda: None
        self.needs = 0  # the free bytes kept stores' log needs to be written back, while it waits
        # Serving through kept writable stores (``Daemon._let_go``): memory writes are refused
        # wherever the inboxes are, their index update would write onto the full disk.
        self.kept = False
        try:
            self.since = manifest.stat().st_mtime  # the index's last write
        except OSError:
            self.since = time.time()

    def inboxes_writable(self, agent: str | None = None) -> bool:
        """Whether a memory write (of ``agent``, or any) can be saved in its inbox now, asked at
        each write (a share can be mounted or unmounted meanwhile, a mode or an immutable flag
        changed). Then it is saved, which is what it promises, and indexed by the catch-up sweep
        once the index can be written (the write's answer says `searchable: false`): the index
        folder alone refusing writes (a permission denied) stops no inbox on the same disk. On a
        full disk holding the inboxes it is refused with the read-only message, nothing written."""
        if self.kept:  # the kept writable stores' indexer would write onto the full disk
            return False
        agents = self.agents_dir

        def room(asking: Asking) -> bool:
            # The disk's room, not its device number: another device is not always another disk
            # with room (a btrfs subvolume of the same full disk, an agents disk full too).
            with asked(asking, "stat", "."):
                if shutil.disk_usage(agents).free < LOW_BYTES:
                    return False
                return agent is not None or writable(agents)

        def writable(at: Path) -> bool:
            # access(2) answers for an immutable folder and a read-only mount, root's too.
            return at.is_dir() and os.access(at, os.W_OK | os.X_OK)

        inbox = agents if agent is None else agents / agent / "memory"

        def reach(asking: Asking) -> bool:
            # Named from the inbox, as the list's calls are: one root name, one folder.
            at = inbox
            while at != agents:  # made by the write
                with asked(asking, "stat", os.path.relpath(at, inbox)):
                    if at.exists():
                        break
                at = at.parent
            with asked(asking, "stat", os.path.relpath(at, inbox)):
                return writable(at)

        try:
            # The agents folder's own calls kept under a root of its own, an agent's under its
            # inbox (the list's too: one stuck thread per inbox, whichever look left it): one
            # agent's hung inbox refuses that agent's changes, not every agent's. The inbox's
            # root is its own folder, as the list's is (kept under the agents folder, one root
            # name held two folders, and status named the agents folder as the inbox that hangs).
            if not self.looks.looked(Root("agents", agents), room):
                return False
            return agent is None or self.looks.looked(Root("memory", inbox, agent=agent), reach)
        except StopCut as exc:
            raise BusyError(stopping_message("the change (nothing changed)")) from exc
        except RootUnreachable as exc:
            # Not "the disk is full": the write is refused for the share that hangs, in those words.
            raise StorageError(
                f"memory change refused: {exc}; nothing changed, try again once it answers"
            ) from exc
        except OSError:  # the agents folder gone: refused with the read-only message
            return False

    def reason(self) -> str:
        """The kind of reason ``message`` gives, without its figures (logged once per kind)."""
        if self.waiting():
            return "waiting"
        return f"failed {self.failed}" if self.failed else ("needs" if self.needs else "full")

    def message(self) -> str:
        try:
            free = shutil.disk_usage(self.index_dir).free
        except OSError:
            free = 0
        waiting = self.waiting()
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.since))
        try:
            writable = self.inboxes_writable()
            hangs = None
        except StorageError as exc:  # the agents folder hangs: no write is saved meanwhile
            writable = False
            hangs = str(exc.__cause__ or exc)
        except BusyError:  # the daemon stops
            writable, hangs = False, None
        # Each inbox whose look still hangs: that agent's changes are refused, for its share.
        refused = "".join(
            f"; memory changes of agent {name.removeprefix('memory/')} are refused while {what} in "
            f"{folder} has not answered (hung share?)"
            for name, folder, what in self.looks.hung_looks()
            if name.startswith("memory/")
        )
        if hangs is not None:  # not the disk's space: the share that hangs, in those words
            waits = (
                f"indexing and rebuilds wait until there is space; memory changes are refused while {hangs}"
            )
        elif writable:
            waits = (
                "indexing and rebuilds wait until there is space (memory writes are saved in the "
                f"inboxes and found by search then{refused})"
            )
        else:
            waits = "indexing, memory writes and rebuilds wait until there is space"
        # A failure of another kind said "the disk holding the index is full: 24.5 MB free".
        if waiting:  # it said "the disk is full: 21.9 MB free", with room on the disk
            until = waits.replace("until there is space", "until it ends")
            return (
                f"read-only: {waiting}; answers come from the index as it was at {when}; {until} "
                f"({free / 1e6:.1f} MB free on the index's disk)"
            )
        if self.failed:
            why = f"the index could not be opened for writing ({self.failed}; tried again every few seconds)"
            waits = waits.replace("until there is space", "until it can be written")
        else:
            why = f"the disk holding the index is full: {free / 1e6:.1f} MB free"
            if self.needs:  # said "full: 1.5 MB free" where the space check saw room
                room = "is full" if free < LOW_BYTES else "has too little room"
                why = (
                    f"the disk holding the index {room}: {free / 1e6:.1f} MB free, "
                    f"{self.needs / 1e6:.1f} MB needed to write the index's log back into its file"
                )
        return (
            f"{why}; answers come from the index as it was at {when}; {waits} (the daemon resumes by itself)"
        )

    def wrap(self, handlers: Handlers, problems: Problems) -> None:
        """Make ``handlers`` refuse the ops that write, with the message (code ``storage``)."""
        real = handlers.dispatch

        def dispatch(req: Request) -> dict[str, Any]:
            if req.op not in self.WRITES:
                return real(req)
            if req.op not in self.MEMORY or not self.inboxes_writable(req.agent):
                message = self.message()
                problems.report("index", message, since=self.since)  # health says what this answer says
                raise StorageError(message)
            try:
                return real(req)
            finally:
                # Its failed index update reported itself as the index's problem: this is the one.
                problems.report("index", self.message(), since=self.since)

        handlers.dispatch = dispatch  # type: ignore[method-assign]


_SWITCH_WAIT = 15.0  # a request held while the stores are reopened for writing, at most
_AT_ONCE = frozenset({"health"})  # answered during the switch (status, doctor, memory_status)
# The requests on the read-only handlers waited for before a switch, at most: below any watchdog
# interval (the switching thread is the one that feeds it while read-only).
_HOLD_WAIT = 5.0
