"""What a daemon's index lock file says about it: its pid and its phase (starting, serving,
stopping; stopped once it let the index go), since when, and the step of a start. The daemon
writes it as it moves; clients read it when its socket does not answer (a start opening its
stores, a stop closing them) and say what is true instead of "start it" or "already serving".

The record is rewritten in place, never renamed (the lock is held on the file itself: a renamed
file would be another, unlocked one): one write at offset 0 of the same length every time, so a
reader never meets an empty or shortened file, and a checksum, so one that meets a write half
done reads again. A lock file of an older daemon ("pid N") or of `sidecar index` ("`sidecar
index` (pid N)") has no phase and is read as before."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

STARTING, SERVING, STOPPING, STOPPED = "starting", "serving", "stopping", "stopped"
PHASES = (STARTING, SERVING, STOPPING, STOPPED)
# What clients find besides a phase: a record of a process that ended without stopping, and a
# lock held by a process its file does not name.
STALE, HELD = "stale", "held"
# Every record padded to this length: a shorter one written later leaves no tail of the longer.
RECORD_BYTES = 240
_READ_TRIES = 5
_RECORD = re.compile(
    r"^pid (?P<pid>\d+) (?P<phase>starting|serving|stopping|stopped) since (?P<since>\d+(?:\.\d+)?)"
    r"(?: \((?P<step>[^()]*)\))? sum (?P<sum>[0-9a-f]{8})$"
)
_OLD = re.compile(r"^(?:pid (?P<pid>\d+)|(?P<by>.+) \(pid (?P<bypid>\d+)\))$")


@dataclass(frozen=True)
class LockRecord:
    """One reading of the lock file. ``phase`` None: a file without one (an older daemon's,
    `sidecar index`'s, an unreadable one); ``text`` is the file's words then."""

    text: str
    pid: int | None = None
    by: str | None = None  # "`sidecar index`" for an offline run
    phase: str | None = None
    since: float | None = None  # wall clock, seconds
    step: str | None = None

    @property
    def who(self) -> str:
        """How messages name the holder: ``pid N``, ``\\`sidecar index\\` (pid N)``, or the text."""
        if self.pid is None:
            return self.text or "another process"
        return f"{self.by} (pid {self.pid})" if self.by else f"pid {self.pid}"

    def age(self, now: float | None = None) -> float | None:
        if self.since is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.since)

    def since_words(self) -> str:
        """``since 3 s (opening the index)``."""
        age = self.age()
        words = "" if age is None else f"since {_seconds(age)}"
        return f"{words} ({self.step})".strip() if self.step else words

    def age_words(self) -> str:
        """How long ago the record was written (``3 s``): a dead pid's record is not "since"."""
        age = self.age()
        return "a while" if age is None else _seconds(age)

    def phase_words(self) -> str:
        """``starting since 3 s (opening the index)``; "" without a phase."""
        if self.phase is None:
            return ""
        return f"{self.phase} {self.since_words()}".strip()


def _seconds(age: float) -> str:
    if age < 120:
        return f"{age:.0f} s"
    if age < 7200:
        return f"{age / 60:.0f} min"
    return f"{age / 3600:.1f} h"


def record_text(pid: int, phase: str, since: float, step: str | None = None) -> str:
    """The record's words, checksum included, padded to RECORD_BYTES (a newline last)."""
    step = " ".join((step or "").replace("(", " ").replace(")", " ").split())[:120]
    body = f"pid {pid} {phase} since {since:.3f}" + (f" ({step})" if step else "")
    line = f"{body} sum {zlib.crc32(body.encode()):08x}"
    return line.ljust(RECORD_BYTES - 1) + "\n"


def parse(text: str) -> LockRecord | None:
    """The record in ``text``; None when it is a phase record whose checksum does not hold (read
    while being written: read again)."""
    line = text.strip()
    got = _RECORD.match(line)
    if got is not None:
        body = line[: line.rindex(" sum ")]
        if f"{zlib.crc32(body.encode()):08x}" != got["sum"]:
            return None
        return LockRecord(line, int(got["pid"]), None, got["phase"], float(got["since"]), got["step"] or None)
    old = _OLD.match(line)
    if old is not None and old["pid"]:
        return LockRecord(line, int(old["pid"]))
    if old is not None:
        return LockRecord(line, int(old["bypid"]), old["by"])
    if line.startswith("pid ") and " sum " in line:  # a record cut by a write under way
        return None
    return LockRecord(line)


def read_record(fh: IO[str]) -> LockRecord:
    """The record of the open lock file ``fh``, read again while a write is under way."""
    text = ""
    for attempt in range(_READ_TRIES):
        fh.seek(0)
        text = fh.read(4096)
        record = parse(text)
        if record is not None:
            return record
        time.sleep(0.002 * (attempt + 1))
    return LockRecord(text.strip())  # unreadable as a record: its words, as before


def write_record(fh: IO[str], text: str) -> None:
    """Write ``text`` (``record_text``'s, or a `sidecar index` run's name) over the record in one
    write at offset 0, padded to RECORD_BYTES; the file is cut to it (an older, longer content
    goes) only after, so a reader never sees it empty."""
    data = (text.rstrip("\n").ljust(RECORD_BYTES - 1) + "\n").encode()
    fd = fh.fileno()
    os.pwrite(fd, data, 0)
    if os.fstat(fd).st_size > len(data):
        os.ftruncate(fd, len(data))


@dataclass(frozen=True)
class LockView:
    """The lock file and whether a process holds its lock now. ``holder``: the pid the system's
    lock table names (Linux), when it differs from the record's (a read-only start cannot write
    its file, which then still names the daemon before it)."""

    record: LockRecord
    held: bool
    holder: int | None = None

    @property
    def alive(self) -> bool:
        return self.record.pid is not None and pid_alive(self.record.pid)

    @property
    def current(self) -> bool:
        """Whether the record is the holder's own: held, and naming a live process that is not
        said stopped (a record of a daemon before a read-only one is neither)."""
        return (
            self.held
            and self.alive
            and self.record.phase != STOPPED
            and (self.holder is None or self.holder == self.record.pid)
        )

    @property
    def moving(self) -> str | None:
        """STARTING or STOPPING when the record is the holder's own and says so (its socket is
        bound but answers nothing: its stores are opening, or closing), else None. The one rule
        the daemon's second start and every client read the lock by."""
        phase = self.record.phase
        return phase if self.current and phase in (STARTING, STOPPING) else None

    @property
    def starting(self) -> bool:
        """A daemon starting now: the only state a command waits on."""
        return self.moving == STARTING

    @property
    def stale(self) -> bool:
        """A record of a daemon that ended without stopping (killed, crashed): nothing holds the
        lock, and the record does not say stopped."""
        return not self.held and self.record.phase in (STARTING, SERVING, STOPPING)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    except OSError:
        return False
    return True


def flock_holder(path: Path) -> int | None:
    """The pid holding a lock on ``path`` by the system's lock table (/proc/locks, Linux only;
    None elsewhere, or when none is found)."""
    try:
        st = os.stat(path)
        table = Path("/proc/locks").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 12345 08:01:123456 0 EOF" ("->" marks a waiter)
        fields = line.split()
        if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
            continue
        if fields[5] == want and fields[4].isdigit() and int(fields[4]) > 0:  # 0: another pid namespace's
            return int(fields[4])
    return None


def look(lock: Path) -> LockView | None:
    """The lock file at ``lock`` and whether it is held (a probe: released at once); None when
    there is none or it cannot be read."""
    try:
        with lock.open("r") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                held = True
            else:  # released at once: a daemon taking the lock now must not be refused for it
                held = False
                with contextlib.suppress(OSError):
                    fcntl.flock(fh, fcntl.LOCK_UN)
            record = read_record(fh)
    except OSError:
        return None
    # The system's lock table is asked only when the record may not be the holder's (every
    # command looks here first: a live daemon's own record is taken at its word).
    own = record.phase in (STARTING, SERVING, STOPPING) and record.pid is not None and pid_alive(record.pid)
    holder = flock_holder(lock) if held and not own else None
    return LockView(record, held, holder if holder != record.pid else None)
