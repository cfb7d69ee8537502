"""What the daemon process holds and sets up before it serves: the index lock, private files,
the open-files limit, and the model loaded into its slot.

One writer per index, daemon or `sidecar index`: an exclusive lock on the index folder. Every file
the process creates is the user's only. The model loads in the background; when it cannot load,
the model of the index's serving table answers in its place if it loads (its vectors are whole),
else search runs on keywords; the daemon says which once.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import resource
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from sidecar.config import Config
from sidecar.contracts.errors import DaemonRunningError, EmbedderError, IndexRunError, SharedSocketError
from sidecar.index.indexer import Indexer
from sidecar.index.problems import Problems
from sidecar.memory.retention import RETIRED_DIR
from sidecar.model.embedder import Embedder, EmbedderSlot, load_model, model_name
from sidecar.runtime import heap, lockstate
from sidecar.vault.confine import tighten_home
from sidecar.vault.homeguard import MARKER

log = logging.getLogger(__name__)


# What `sidecar index` without a daemon writes in the lock file before its pid: one that finds
# the lock taken names it (it may hold the lock for up to scanTimeoutSeconds more while it waits
# for a share's call it gave up on), not "another daemon".
INDEX_RUN = "`sidecar index`"


# Tries of the index lock before a start is refused, this far apart (``IndexLock.acquire``).
_TAKE_TRIES = 5
_TAKE_PAUSE_S = 0.01


class IndexLock:
    """An exclusive lock on the index directory: one writer per index, daemon or `sidecar index`
    (``by``: INDEX_RUN; the daemon's lock file holds its pid alone)."""

    def __init__(self, index_dir: Path, by: str | None = None) -> None:
        index_dir.mkdir(parents=True, exist_ok=True)
        self.path = index_dir / ".lock"
        self.by = by
        self._fh: IO[str] | None = None
        # The locked file opened again for writing, when the lock was taken on it read-only (an
        # immutable index): once it may be written (the flag lifted, the switch to writable) the
        # record names this daemon, not the one before it. A second opening of the same file;
        # the flock stays on the first (closing this one does not let it go).
        self._writer: IO[str] | None = None
        self._folder: tuple[int, int] | None = None  # the index folder's (device, inode) when locked
        # The daemon's phase, its start and step, written in the file as it moves (``phase``);
        # a `sidecar index` run (``by``) writes its name only.
        self._phase: tuple[str, float, str | None] = (lockstate.STARTING, time.time(), None)
        # The switch to writable rewrites the record on its own thread while a stop may write
        # `stopping`: one write at a time, each with the phase of its moment (re-entrant: a
        # signal's stop may write on the thread that is writing).
        self._writing = threading.RLock()

    def acquire(self) -> None:
        try:
            # Read and written in place (not "a+": a write there goes to the end, whatever its offset)
            fh = os.fdopen(os.open(str(self.path), os.O_RDWR | os.O_CREAT, 0o600), "r+")
        except PermissionError as denied:
            # An immutable or read-only index folder (chattr +i, a backup's flag): flock holds on
            # a file opened for reading too, and the read-only start serves the index as it is.
            try:
                fh = self.path.open("r")
            except FileNotFoundError:  # none to lock (a cleaner removed it): the denial is the cause
                raise denied from None
        for attempt in range(_TAKE_TRIES):
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError as exc:
                # A client looks at the lock with a shared take let go at once: tried again a
                # few times so that such a look is not taken for a holder.
                if attempt < _TAKE_TRIES - 1:
                    time.sleep(_TAKE_PAUSE_S)
                    continue
                record = lockstate.read_record(fh)
                fh.close()
                raise self._refusal(record) from exc
        self._fh = fh
        self._write()
        if self._folder is None:
            st = os.stat(self.path.parent)
            self._folder = st.st_dev, st.st_ino

    def _refusal(self, record: lockstate.LockRecord) -> DaemonRunningError:
        """Refused for the holder of the lock, named with its phase (a daemon starting or
        stopping does not answer on its socket yet, or any more)."""
        holder = record.who
        if record.by == INDEX_RUN or holder.startswith(INDEX_RUN):
            return IndexRunError(  # the words README's troubleshooting table promises
                f"the index {self.path.parent} is in use by {holder}, which is still running "
                "(it may be waiting, up to watch.scanTimeoutSeconds, for a share that did not "
                "answer in time): try again once it is done"
            )
        home, index = self.path.parent.parent, self.path.parent
        if record.phase == lockstate.STARTING:
            return DaemonRunningError(
                f"another sidecar daemon ({holder}) is starting on {home}, {record.since_words()}: "
                f"its index {index} is in use; it answers once started (`sidecar status` says how far)"
            )
        if record.phase == lockstate.STOPPING:
            return DaemonRunningError(
                f"another sidecar daemon ({holder}) is stopping on {home}, {record.since_words()}: "
                f"its index {index} is in use until it has stopped: try again then"
            )
        return DaemonRunningError(  # the words README's troubleshooting table promises
            f"another sidecar daemon is already serving {home} (its index {index} is in use by {holder})"
        )

    @property
    def said(self) -> str:
        """The phase last said (``phase``)."""
        return self._phase[0]

    def phase(self, phase: str, step: str | None = None) -> None:
        """Say in the lock file that the daemon is in ``phase`` (its start kept while the phase
        stays, ``step`` what a start is doing): clients read it when the socket does not answer."""
        with self._writing:
            kept = self._phase
            self._phase = (phase, kept[1] if kept[0] == phase else time.time(), step)
            self._write()

    def rewrite(self) -> None:
        """Write the record again (a lock taken read-only: its file may be written now)."""
        self._write()

    def _writable(self) -> IO[str] | None:
        """The locked file, opened for writing: ``_fh`` itself, or (taken read-only) a writable
        opening of the same file once one can be made; None while it cannot (its words kept)."""
        fh = self._fh
        if fh is None or fh.writable():
            return fh
        if self._writer is None:
            try:
                writer = os.fdopen(os.open(str(self.path), os.O_RDWR), "r+")
            except OSError:  # still immutable or read-only
                return None
            held, opened = os.fstat(fh.fileno()), os.fstat(writer.fileno())
            if (held.st_dev, held.st_ino) != (opened.st_dev, opened.st_ino):
                writer.close()  # another file at the path now (``keep`` says so): not ours to write
                return None
            self._writer = writer
        return self._writer

    def _write(self) -> None:
        with self._writing:
            self._write_now()

    def _write_now(self) -> None:
        fh = self._writable()
        if fh is None:
            return
        try:
            if self.by:
                lockstate.write_record(fh, f"{self.by} (pid {os.getpid()})")
            else:
                lockstate.write_record(fh, lockstate.record_text(os.getpid(), *self._phase))
        # The lock holds all the same; only what clients read is older (ValueError: the file was
        # closed under the write).
        except (OSError, ValueError) as exc:
            said = getattr(exc, "strerror", None) or exc
            log.warning("index_lock_unwritten path=%s error=%s", self.path, said)

    def keep(self) -> tuple[str, str] | None:
        """Make sure the lock file at the path is the one this process holds: one removed under
        the running daemon (a cleaner, an `rm -rf` of the index) let a second daemon start on
        the same home. A removed file is made and locked again, in the index folder the daemon
        started on only: one gone or replaced (the home's share unmounted) is said, nothing made
        on the bare mount point; the reason too when another process holds the file there now."""
        fh = self._fh
        if fh is None:
            return None
        try:
            if os.stat(self.path).st_ino == os.fstat(fh.fileno()).st_ino:
                return None
        except FileNotFoundError:
            pass
        except OSError as exc:
            return "stores", f"the index lock {self.path} cannot be checked: {exc.strerror or exc}"
        if not self._same_folder():
            return "home", (
                f"the index folder {self.path.parent} is gone or is not the folder sidecar started on "
                "(the home unmounted or replaced?); its lock is not made anew there (restart the daemon "
                "if it was replaced on purpose)"
            )
        return self._lock_again(fh)

    def _lock_again(self, fh: IO[str]) -> tuple[str, str] | None:
        """Make and lock the lock file anew (the one at ``fh`` was removed)."""
        writer, self._writer = self._writer, None
        try:
            self._fh = None
            self.acquire()
        except DaemonRunningError as exc:
            self._fh, self._writer = fh, writer  # still ours, through the file that was removed
            return "stores", f"{exc}; two daemons on one home write the same index: stop one"
        except OSError as exc:
            self._fh, self._writer = fh, writer
            return "stores", f"the index lock {self.path} cannot be made again: {exc.strerror or exc}"
        fh.close()  # the old, removed file's lock
        if writer is not None:
            writer.close()
        log.warning("index_lock_restored path=%s", self.path)
        return None

    def _same_folder(self) -> bool:
        """Whether the index folder is the one locked at start (not gone, not another)."""
        try:
            st = os.stat(self.path.parent)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._folder

    def release(self) -> None:
        with self._writing:
            self._release()

    def _release(self) -> None:
        if self._fh is not None:
            if not self.by:  # whoever reads it next knows the daemon stopped, not crashed
                self.phase(lockstate.STOPPED)
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def make_private(cfg: Config) -> None:
    """Everything this process creates is readable by the user only (LanceDB's and Tantivy's files
    too). Changes no file: the process's umask only (``lock_and_tighten`` does the rest)."""
    os.umask(0o077)


def lock_and_tighten(
    cfg: Config, by: str | None = None, check: Callable[[], None] | None = None
) -> IndexLock:
    """``check`` (the daemon's: no other daemon serves its socket), the index lock (``by``:
    IndexLock's), ``check`` again, then the home left readable by others tightened (the log says
    so). In this order: a start refused for another daemon holding the lock or the socket changes
    nothing in the home, not even the lock file: one waiting for a daemon of another home on its
    socket took the lock (writing its pid) at every try, and a `sidecar index` run in that moment
    was refused, named a daemon serving nothing."""
    if check is not None:
        check()
    lock = IndexLock(cfg.index_dir, by=by)
    lock.acquire()
    try:
        if check is not None:
            check()
        tighten_own(cfg)
    except BaseException:
        lock.release()
        raise
    return lock


# How often a daemon waiting for a `sidecar index` run tries the lock, and how far each try
# pushes systemd's start timeout (TimeoutStartSec) out: well above the poll, so that a slow try
# (a busy disk) does not let the start time out.
LOCK_POLL_S = 2.0
WAIT_EXTEND_USEC = 60_000_000
START_USEC = 90_000_000
# How long a daemon of another home answering on the socket is waited for (one stopping as this
# starts) before the start is refused.
SHARED_SOCKET_WAIT_S = 30.0


def lock_waiting_for_index_run(
    cfg: Config,
    send: Callable[..., None] | None,
    sleep: Callable[[float], None] = time.sleep,
    check: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> IndexLock:
    """``lock_and_tighten``; under a service manager (``send``: systemd's notifier, launchd's
    that takes nothing) whoever holds the index or
    the socket is waited for, a `sidecar index` run or another daemon (a person's `sidecar serve`
    in a terminal), trying every LOCK_POLL_S, bounded by nothing but a stop signal (SIGTERM ends
    the process: nothing is held or changed yet). Exit 4 is not restarted there: refused, the
    service stayed down after the run or the foreground daemon ended. Outside a service (a
    person's `serve`) the holder is refused at once (exit 4).

    A run ends by itself, so the start waits for it (``systemctl start`` returns once it did, and
    "active" then means serving). Another daemon may serve for days: the start is reported done
    (READY=1, its STATUS= saying this one only waits, the watchdog kept), or `systemctl start`
    and `enable --now` hung until that daemon stopped. A daemon of another home answering on
    the socket (``SharedSocketError``: two configurations name one socket) is waited for
    SHARED_SOCKET_WAIT_S at most, then refused: it would never stop for this one (no READY=1
    meanwhile: `systemctl start` fails with the refusal)."""
    said: set[type] = set()
    ready = False
    shared_since: float | None = None
    while True:
        try:
            lock = lock_and_tighten(cfg, check=check)
        except DaemonRunningError as exc:
            if send is None:
                raise
            if isinstance(exc, SharedSocketError):
                # Another home's daemon on this socket: a moment is waited (it may be stopping),
                # then the start ends (exit 4, not restarted): waited for, it hid the mistake.
                shared_since = clock() if shared_since is None else shared_since
                if clock() - shared_since >= SHARED_SOCKET_WAIT_S:
                    log.error("socket_shared_with_other_home %s", exc)
                    raise
            else:
                shared_since = None
            if type(exc) not in said:  # once per kind of holder: a run, then a daemon, is said twice
                event = "index_lock_wait" if isinstance(exc, IndexRunError) else "daemon_running_wait"
                log.warning("%s %s", event, exc)
                said.add(type(exc))
            # STATUS= for `systemctl status`; the start timeout and the watchdog pushed out.
            if isinstance(exc, (IndexRunError, SharedSocketError)):
                # No READY for another home's daemon either: the start it ends must fail itself
                # (`systemctl start` returned success and the unit failed unseen 30 s later).
                send(f"STATUS=waiting: {exc}", f"EXTEND_TIMEOUT_USEC={WAIT_EXTEND_USEC}", "WATCHDOG=1")
            else:
                status = f"STATUS=waiting: {exc}; taking over when it stops"
                send(status, *(() if ready else ("READY=1",)), "WATCHDOG=1")
                ready = True
            sleep(LOCK_POLL_S)
            continue
        if said and send is not None:
            log.info("index_lock_taken what held the index or socket is gone: starting")
            # The last extension ran out ~2 s after that try: the rest of the start (tightening
            # the rebuilt index, opening the stores) gets one more, and the status stops saying
            # "waiting". 90 s: systemd's default start timeout, what a start without a wait has.
            send("STATUS=starting", f"EXTEND_TIMEOUT_USEC={START_USEC}", "WATCHDOG=1")
        return lock


def tighten_own(cfg: Config) -> None:
    """Tighten what the daemon made in the home: the home folder, index, socket folder, the
    models folder and its prepared copies (not the model files a person put there), and of
    ``agents/`` its own entries only (each agent's folder, audit logs, inbox folder and .trash,
    the retired agents' logs, the home's marker). The notes in an inbox and whatever else a
    person keeps there keep their modes: a person saves notes there and an editor leaves its
    backups, and the inbox folder's 0700 keeps other users out of them. Nothing is reached
    through a link at any level below the home (an ``agents/`` linked elsewhere is left whole)."""
    trees = [cfg.index_dir, cfg.models_dir / ".prepared", cfg.home / "run", cfg.agents_dir / RETIRED_DIR]
    own = [cfg.models_dir, cfg.agents_dir, cfg.agents_dir / MARKER]
    for agent in _real_folders(cfg.agents_dir):
        inbox = agent / "memory"
        own += [agent, agent / "audit.log", agent / "audit.log.1", inbox]
        if inbox in _real_folders(agent):
            trees.append(inbox / ".trash")
    # Only a vault kept inside the home needs leaving alone; one elsewhere is not looked at (on a
    # share that hangs, resolving its path would block the start).
    vault = cfg.vault.path
    inside = vault is not None and vault.is_absolute() and vault.is_relative_to(cfg.home)
    trees = [t for t in trees if _no_link_below(cfg.home, t)]
    own = [o for o in own if _no_link_below(cfg.home, o)]
    tighten_home(cfg.home, trees, [vault] if inside and vault is not None else [], own)


def _no_link_below(home: Path, path: Path) -> bool:
    """Whether every component of ``path`` below the home, itself included, is there and no
    link (lstat each: a link anywhere leads out of what the daemon made)."""
    step = home
    for part in path.relative_to(home).parts:
        step = step / part
        try:
            if stat.S_ISLNK(os.lstat(step).st_mode):
                return False
        except OSError:
            return False
    return True


def _real_folders(folder: Path) -> list[Path]:
    """The folders in ``folder`` that are folders, not links to one (none when it cannot be
    read, or when it is itself a link)."""
    try:
        if stat.S_ISLNK(os.lstat(folder).st_mode):
            return []
        return [Path(e.path) for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except OSError:  # not made yet, or not a folder (the start says so when it makes it)
        return []


def raise_fd_limit() -> None:
    """Allow as many open connections as the hard limit permits (the default soft limit is often 1024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def load_embedder(
    cfg: Config,
    slot: EmbedderSlot,
    previous: Callable[[], Embedder | None] | None = None,
    problems: Problems | None = None,
) -> None:
    """Load the configured model into the slot. On failure ``previous`` (the model of the index's
    serving table) answers in its place if it loads, else search runs BM25-only; either is said
    once. A retry while a fallback answers leaves it answering until the configured model loads."""
    if not cfg.embedder.enabled:
        slot.set_failed("disabled by configuration (embedder.enabled: false)", state="off")
        log.info("embedder_off reason=disabled by configuration; keyword search only")
        return
    standing_in = slot.fallback is not None
    if not standing_in:  # a fallback keeps answering (and counting tokens) during the retry
        slot.set_loading()
    t0 = time.perf_counter()
    try:
        model = load_model(cfg, on_tokenizer=None if standing_in else slot.set_counter)
    except EmbedderError as exc:
        stand_in = slot.model
        if standing_in and stand_in is not None:
            slot.set_fallback(stand_in, slot.origin or "", _configured(cfg), str(exc))
            log.warning("embedder_retry_failed model=%s error=%s", cfg.embedder.model, exc)
            _report_fallback(cfg, slot, str(exc), problems)
        else:
            _fall_back(cfg, slot, str(exc), previous, problems)
        return
    slot.set_ok(model, model.files.origin)
    if problems is not None:
        problems.clear("embedder")
    heap.trim()  # graph optimisation's scratch memory (about 60 MB) goes back to the system
    log.info(
        "embedder_ready model=%s dim=%d seconds=%.2f", model.model_id, model.dim, time.perf_counter() - t0
    )


def _fall_back(
    cfg: Config,
    slot: EmbedderSlot,
    error: str,
    previous: Callable[[], Embedder | None] | None,
    problems: Problems | None,
) -> None:
    """The configured model failed: the serving table's model answers if it loads (the index
    holds its whole table; nothing waits for a model that may never load), else keyword only."""
    old = previous() if previous is not None else None
    if old is None:
        slot.set_failed(error)
        log.error("embedder_failed error=%s; keyword search only until the model loads", error)
        return
    origin = getattr(getattr(old, "files", None), "origin", None) or "the index's vectors"
    slot.set_fallback(old, origin, _configured(cfg), error)
    heap.trim()
    log.error(
        "embedder_fallback model=%s serving=%s error=%s; the previous model answers until the "
        "configured one loads",
        cfg.embedder.model,
        old.model_id,
        error,
    )
    _report_fallback(cfg, slot, error, problems)


def _configured(cfg: Config) -> str:
    """The configured model as the configuration names it (its folder too, when one is given)."""
    e = cfg.embedder
    return f"{e.model} (embedder.path {e.path})" if e.path is not None else e.model


def _report_fallback(cfg: Config, slot: EmbedderSlot, error: str, problems: Problems | None) -> None:
    model = slot.model
    if problems is None or model is None:
        return
    name = _configured(cfg)
    problems.report(
        "embedder",
        f"the configured model {name} could not be loaded: {error}. The previous model "
        f"{model.model_id} answers meanwhile: search uses its vectors and new notes get them "
        "too. Fix the model or the configuration and restart the daemon (a repaired model is "
        "also picked up by the retry every embedder.retryMinutes); the switch to the configured "
        "model then runs in the background",
    )


def record_counting(cfg: Config, slot: EmbedderSlot, indexer: Indexer) -> None:
    """Chunks cut with another model's tokenizer than the configured one (a fallback answers) or
    by words (no model) are recorded so: the next start with the configured model cuts them again."""
    if not cfg.embedder.enabled:
        return
    model = slot.model
    if slot.fallback is not None and model is not None:
        indexer.counted_with(model_name(model.model_id))
    elif model is None:
        indexer.counted_with("words")
