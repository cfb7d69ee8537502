"""Typed errors and the exit codes a service manager can tell apart.

Leaf module: imports nothing of the project. Adapters raise these (``raise ... from exc``);
the CLI turns them into a message and an exit code, the server into an error response.
"""

from __future__ import annotations

import errno
import re
from collections.abc import Iterator
from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes; documented in README (systemd uses CONFIG to stop restarting)."""

    OK = 0
    FAILURE = 1  # unexpected crash
    USAGE = 2  # bad command line (argparse's own code)
    CONFIG = 3  # configuration error: restarting will not help
    SOCKET_IN_USE = 4  # another daemon already serves this socket
    INDEX_UNUSABLE = 5  # the index directory cannot be locked or created
    NOT_RUNNING = 6  # a client found no daemon
    REQUEST_FAILED = 7  # the daemon answered with an error
    NO_ANSWER = 8  # the daemon took the request and did not answer in time: its outcome is unknown
    STOP_ABANDONED = 9  # the stop gave up on a write (or a second Ctrl-C): the index was left open


# Exit codes a restart cannot help (README's table): a bad command line, a configuration error,
# another daemon serving this home or socket (under systemd a daemon waits for it, or for a
# `sidecar index` run holding the index, instead of exiting 4: left for a start that loses a
# race). Each needs a person to change something first.
# Exit code 5 (the home or index cannot be used) is restarted: most of its causes pass by
# themselves (a share not mounted yet at login, a stale NFS handle, a full disk); the start limit
# ends a loop of it that does not pass. launchd cannot skip a restart by code: there a daemon
# exits 0 for these (``clients.cli``), or its agent restarted it every 30 s for good.
NO_RESTART = (ExitCode.USAGE, ExitCode.CONFIG, ExitCode.SOCKET_IN_USE)


class SidecarError(Exception):
    """Base of every error sidecar raises on purpose."""

    code = "internal"
    exit_code = ExitCode.FAILURE


class ConfigError(SidecarError):
    """A configuration file, environment variable or flag is wrong."""

    code = "config"
    exit_code = ExitCode.CONFIG


class SourceError(SidecarError):
    """A reference or path is invalid, refused, or not found."""

    code = "bad_reference"
    exit_code = ExitCode.REQUEST_FAILED


class NotFoundError(SourceError):
    """The reference is valid but no such note exists."""

    code = "not_found"


class UnreadableError(SourceError):
    """The reference is valid but its note cannot be shown now: too large, not UTF-8, its folder
    offline or hung, a link out of its root. Told apart from ``bad_reference`` (a value refused
    whatever the vault holds: the CLI's usage error) so the CLI can exit as README's table says."""

    code = "unreadable"


class ExcludedError(SourceError):
    """A note the user's own ``index.exclude`` leaves out: sidecar does not serve its text."""

    code = "forbidden"


class EmbedderError(SidecarError):
    """The embedding model cannot be found, loaded or run."""

    code = "embedder"


class RetiringModelError(EmbedderError):
    """The model a switch retires fails to load while its files are there: tried again (its
    table kept), then given up on after a while (its table moved aside, a copy kept)."""


class StoreError(SidecarError):
    """An index store cannot be opened or written."""

    code = "store"
    exit_code = ExitCode.INDEX_UNUSABLE


class StoreNewerError(StoreError):
    """A store written by a newer sidecar (a downgrade): not damage, and not this version's to
    replace (the newer one finds it again after a re-upgrade). Restarting will not help."""

    exit_code = ExitCode.CONFIG


class StoreOutdatedError(StoreError):
    """A store written by another version with another layout: rebuilt, nothing is wrong."""


class IndexNotOpenError(StoreError):
    """The keyword index is not open (lost: it and the one put back would not open); it is
    opened again by itself. Its files are whole: not damage, never moved aside."""


class IndexBuildStoppedError(StoreError):
    """A vector index build was ended on purpose (the daemon stops, its table was emptied,
    dropped or replaced): nothing failed, and it is neither logged nor counted as a failure."""


class IndexBuildInterruptedError(StoreError):
    """A vector index build failed for a cause that passes (its child killed, as the kernel does
    when memory runs out; its time limit reached): not remembered across restarts."""


class PassingFaultError(StoreError):
    """A store could not be opened or written for a fault that passes (a full disk, no file
    handles left): not damage, nothing is moved aside; tried again later."""


class StoresClosedError(PassingFaultError):
    """A call into a store its close has begun or ended (the daemon stops): refused before it
    reaches the engine, nothing read or written (a call already in the engine ends first: the
    close never runs under it). No damage; answered ``busy``, as any request during a stop."""

    code = "busy"
    exit_code = ExitCode.REQUEST_FAILED


class DiskFullError(PassingFaultError):
    """A store could not be written because its disk is full: a fault that passes, not damage
    (nothing is moved aside; the write is tried again once there is space)."""


class NoHandlesError(PassingFaultError):
    """A store could not be opened for want of file handles (EMFILE, ENFILE): its files are
    whole. Taken for damage, each try moved a healthy index aside."""


class IoFaultError(PassingFaultError):
    """A store's file could not be read for a fault of the file system (``is_io_fault``: EIO, a
    stale NFS handle, a permission a sync tool flipped): its bytes are unknown, not wrong."""


class PermissionDeniedError(IoFaultError):
    """A store's file or folder may not be read or written by this process (EACCES, EPERM: a mode,
    an immutable file, a privacy control, a share's rights): like a full disk, not damage (nothing
    is moved aside, nothing rebuilt); tried again until it may be written. Taken for damage, an
    agent's keyword index was moved aside once the permission came back."""


# How a full disk reads in the messages of the engines that do not keep the errno: LanceDB's
# ("No space left on device (os error 28)"), sqlite's ("database or disk is full"), a quota's.
_DISK_FULL_WORDS = (
    "no space left on device",
    "os error 28",
    "database or disk is full",
    "disk quota exceeded",
)


def store_error_class(exc: BaseException) -> type[StoreError]:
    """The error a store raises for ``exc``: a full disk, a permission denied or no file handles
    left is a fault that passes (nothing is damaged, nothing is moved aside), anything else may be
    damage."""
    if is_disk_full(exc):
        return DiskFullError
    if is_permission_denied(exc):
        return PermissionDeniedError
    return NoHandlesError if is_out_of_handles(exc) else StoreError


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and the errors it was raised from (at most 8: a cycle of contexts ends there)."""
    seen = 0
    while exc is not None and seen < 8:
        yield exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) says the disk is full."""
    return any(
        isinstance(e, DiskFullError)
        or (isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT))
        or any(words in str(e).lower() for words in _DISK_FULL_WORDS)
        for e in _chain(exc)
    )


# Errors of the file system, not of a store's files: a share that hiccups (EIO, a stale NFS
# handle), one remounted read-only after an I/O error, a permission flipped by a sync tool. They say
# nothing about what the files hold: retried, never taken for damage (which moves an index aside).
_IO_FAULTS = (
    errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.ESTALE, errno.ENOTCONN, errno.ETIMEDOUT,
)  # fmt: skip
_OS_ERROR_CODE = re.compile(r"\(os error (\d+)\)")


_NO_HANDLES = (errno.EMFILE, errno.ENFILE)
_DENIED = (errno.EACCES, errno.EPERM)
# How a permission denied reads in an engine's message that keeps no errno: Tantivy's lock file
# ("Failed to acquire Lockfile: Operation not permitted"), the OS's own words.
_DENIED_WORDS = ("permission denied", "operation not permitted", "readonly database")
# SQLite's SQLITE_READONLY ("attempt to write a readonly database", and its extended codes): the
# database may not be written by this process now (a file or folder it may not write, a ``-shm``
# mapped read-only while it was immutable and shared with a later writer). A permission state,
# never damage: taken for damage, a healthy manifest and the keyword index were moved aside and
# rebuilt once the flag was gone.
_SQLITE_READONLY = 8


def is_permission_denied(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) says this process may not read or write a
    file (EACCES, EPERM), also in an engine's message without the errno."""
    return any(
        isinstance(e, PermissionDeniedError)
        or (isinstance(e, OSError) and e.errno in _DENIED)
        or any(int(code) in _DENIED for code in _OS_ERROR_CODE.findall(str(e)))
        or any(words in str(e).lower() for words in _DENIED_WORDS)
        or (getattr(e, "sqlite_errorcode", None) or 0) & 0xFF == _SQLITE_READONLY
        for e in _chain(exc)
    )


# How an engine says plainly that what it read is damaged: Tantivy ("Data corrupted",
# "corruption"), SQLite ("file is not a database", "database disk image is malformed"), LanceDB,
# the manifest's own integrity check. Such words are damage before any question of permission: a
# read-only file of a store (a restore from a backup) does not make its damage a fault that passes.
_DAMAGE_WORDS = ("corrupt", "file is not a database", "disk image is malformed", "failed its integrity check")
# SQLite's primary result codes for damage: SQLITE_CORRUPT, SQLITE_NOTADB.
_SQLITE_DAMAGE = (11, 26)


def says_damage(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) is an engine saying its files are damaged."""
    return any(
        (getattr(e, "sqlite_errorcode", None) or 0) & 0xFF in _SQLITE_DAMAGE
        or any(words in str(e).lower() for words in _DAMAGE_WORDS)
        for e in _chain(exc)
    )


def is_out_of_handles(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) says no file handles are left, also as a
    Rust engine's message ("Too many open files (os error 24)")."""
    return any(
        isinstance(e, NoHandlesError)
        or (isinstance(e, OSError) and e.errno in _NO_HANDLES)
        or any(int(code) in _NO_HANDLES for code in _OS_ERROR_CODE.findall(str(e)))
        or "too many open files" in str(e).lower()
        for e in _chain(exc)
    )


def is_io_fault(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) is a file-system fault (``_IO_FAULTS``),
    also as a Rust engine's message ("Read-only file system (os error 30)", "Operation not
    permitted")."""
    return is_permission_denied(exc) or any(
        (isinstance(e, OSError) and e.errno in _IO_FAULTS)
        or any(int(code) in _IO_FAULTS for code in _OS_ERROR_CODE.findall(str(e)))
        for e in _chain(exc)
    )


def is_passing_fault(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a fault that passes (a full disk, no file handles left, a file-system
    fault): the one test of a failed commit and of a read in a search's damage check or a count.
    Such a fault is retried, never taken for damage (which moves an index aside)."""
    return (
        any(isinstance(e, PassingFaultError) for e in _chain(exc))
        or is_disk_full(exc)
        or is_out_of_handles(exc)
        or is_io_fault(exc)
    )


def read_error_class(exc: BaseException) -> type[StoreError]:
    """The error for a store's file that could not be read: a fault that passes
    (``is_passing_fault``) is not damage; anything else may be."""
    if is_io_fault(exc) and not (is_disk_full(exc) or is_out_of_handles(exc) or is_permission_denied(exc)):
        return IoFaultError
    return store_error_class(exc)


# What the engines (Tantivy, Lance: Rust under Python) add to a message that says nothing to a
# person: a Rust debug form of the OS error, a generic hint in Some("…"), and the source file and
# line of the panic inside Rust's own library or a crate.
_RUST_OS_ERROR = re.compile(r'IoError\(Os \{ code: \d+, kind: \w+, message: "([^"]*)" \}\)')
# A hint, or its empty form (Tantivy's lock failure: "Operation not permitted. None"), only where it
# ends the message or a part of it, never a sentence going on ("… None of the notes").
_RUST_HINT = re.compile(r'\.?\s*Some\("(?:[^"\\]|\\.)*"\)|\.\s+None(?=\s*(?:$|[,;)\]\n]))')
_RUST_SOURCE = re.compile(r",?\s*(?:/rustc/[0-9a-f]+|\S*/\.cargo/registry/src)/\S+?\.rs:\d+:\d+")


def engine_message(exc: BaseException) -> str:
    """An engine's error as a person can read it in status or a CLI warning: the OS error's own
    words, without the Rust debug forms, generic hints and Rust source locations around them."""
    return engine_text(str(exc))


def engine_text(text: str) -> str:
    """``engine_message`` of an error's text (a problem's, as health keeps it)."""
    text = _RUST_OS_ERROR.sub(lambda m: m.group(1), text)
    return _RUST_SOURCE.sub("", _RUST_HINT.sub("", text)).strip()


class StorageError(SidecarError):
    """A file could not be written (disk full, read-only file system); nothing was changed."""

    code = "storage"
    exit_code = ExitCode.REQUEST_FAILED


class BusyError(SidecarError):
    """The daemon cannot take the request now (it is stopping); nothing was done: retry later."""

    code = "busy"
    exit_code = ExitCode.REQUEST_FAILED


def stopping_message(op: str) -> str:
    """Why a request was refused while the daemon stops (``op`` as the error shows it, quoted)."""
    return (
        f"the daemon is stopping: {op} was not run; try again once it is back (a restart takes "
        "up to about 30 s, plus the embedding model's load)"
    )


def cut_short_message(op: str, *, write: bool) -> str:
    """Why a request that met the index closed by the stop partway was not answered (``op`` as
    the error shows it, quoted): what it did and what it did not. A read changed no note; a
    change (the memory changes say their own) may have changed its note before: that stays, and
    its index entry follows at the next start."""
    done = (
        "what it changed before that stays, and the index catches up with it at the next start"
        if write
        else "no note was changed"
    )
    return (
        f"the daemon is stopping: {op} was cut short where it met the closed index ({done}); try "
        "again once it is back (a restart takes up to about 30 s, plus the embedding model's load)"
    )


class ProtocolError(SidecarError):
    """A request or response violates the wire protocol."""

    code = "bad_request"
    exit_code = ExitCode.REQUEST_FAILED


class DaemonNotRunningError(SidecarError):
    """No daemon listens on the socket."""

    code = "not_running"
    exit_code = ExitCode.NOT_RUNNING


class DaemonStartingError(DaemonNotRunningError):
    """The daemon of this home is starting (its lock file says so): it does not answer yet, and
    this command did not wait for it, or waited as long as it may."""

    code = "starting"


class DaemonUnreachableError(DaemonNotRunningError):
    """Something is at the socket, but this client cannot or must not talk to it (no permission,
    or a server of another user): no daemon of this user's answers there."""

    code = "unreachable"


class NoAnswerError(SidecarError):
    """The daemon took a request and gave no answer in time: a change may or may not be made."""

    code = "no_answer"
    exit_code = ExitCode.NO_ANSWER

    def __init__(self, op: str, message: str) -> None:
        super().__init__(message)
        self.op = op


class DaemonRunningError(SidecarError):
    """Another daemon already owns the socket or the index."""

    code = "already_running"
    exit_code = ExitCode.SOCKET_IN_USE


class SharedSocketError(DaemonRunningError):
    """The daemon answering on this socket serves another home (two configurations name one
    socket): waiting for it helps nothing, each home needs its own socket."""


def shared_socket(socket: str, theirs: dict[str, object], home: str, config: str | None) -> tuple[str, str]:
    """What is wrong and what to change when the daemon on ``socket`` serves another home than
    ``home`` (``theirs``: that daemon's health, ``home`` and ``config_file``), in the words both the
    refused daemon and `doctor` use."""
    their_file = theirs.get("config_file")
    what = (
        f"the daemon on {socket} (pid {theirs.get('pid')}) serves the home {theirs.get('home')} "
        f"(configuration {their_file or 'none, defaults'}), not {home} (configuration "
        f"{config or 'none, defaults'}): two homes cannot share one socket"
    )
    todo = (
        "give one of them its own socket: the `socket` setting in its configuration file (or "
        "SIDECAR_SOCKET, --socket; removed, each home gets a socket of its own), then restart it; "
        "or use that daemon's home (`home`, SIDECAR_HOME, --home)"
    )
    return what, todo


def foreign_socket(socket: str, holder: str, uid: int, config: str | None) -> tuple[str, str]:
    """What is wrong and what to change when another user's process answers on ``socket`` (two
    users' configurations name one path): its daemon can never serve this user's home."""
    what = (
        f"{socket} is held by another user's process ({holder}, uid {uid}); this user's daemon "
        f"(configuration {config or 'none, defaults'}) cannot share it"
    )
    todo = (
        "give this daemon a socket of its own: the `socket` setting in its configuration file (or "
        "SIDECAR_SOCKET, --socket; removed, it gets a socket in this user's runtime folder)"
    )
    return what, todo


class IndexRunError(DaemonRunningError):
    """A `sidecar index` run without the daemon holds the index: it ends by itself (a daemon the
    service starts waits for it)."""


class RemoteError(SidecarError):
    """The daemon answered a request with an error; carries the daemon's code."""

    exit_code = ExitCode.REQUEST_FAILED

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
