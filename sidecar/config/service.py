"""The running service: the memory, server and logging sections."""

from dataclasses import field

from sidecar.config.fields import _opt, section


@section
class MemoryWriteConfig:
    on_duplicate: str = _opt(
        "warn",
        "A write close to an existing note: warn (write and report) or reject.",
        choices=("warn", "reject"),
    )
    duplicate_threshold: float = _opt(
        0.9,
        "Similarity from which a note counts as a near-duplicate: the higher of the cosine rescaled "
        "from a note on the same subject (0) to an identical one (1) and the overlap of word triples "
        "(see write's duplicates in docs/protocol.md).",
        min=0.0,
        max=1.0,
    )


@section
class MemoryConfig:
    max_note_bytes: int = _opt(100_000, "Largest memory note an agent may write.", min=256)
    redact_secrets: bool = _opt(True, "Replace keys, tokens and passwords by [REDACTED:kind] before writing.")
    trash_days: int = _opt(
        90,
        "Replaced and deleted memory texts are kept in <inbox>/.trash this many days (0: for ever); "
        "older ones are removed at start and once a day. An empty file a write replaced waits there "
        "as long (a program may still write into it) once unchanged.",
        min=0,
    )
    max_inbox_bytes: int = _opt(
        100 << 20,
        "Largest size of one agent's notes together (its .trash not counted): a write beyond it is "
        "refused (error inbox_full) until the agent deletes notes (0: no limit).",
        min=0,
    )
    max_trash_bytes: int = _opt(
        100 << 20,
        "Texts kept in an inbox's .trash beyond this disk use (allocated blocks: a 600-byte text "
        "takes 4 KiB on most disks) are removed, oldest first, when another is added and at start "
        "and once a day (0: no limit; memory.trashDays still applies).",
        min=0,
    )
    max_trash_files: int = _opt(
        10_000,
        "Texts kept in an inbox's .trash beyond this number are removed, oldest first, as for "
        "memory.maxTrashBytes (0: no limit).",
        min=0,
    )
    index_idle_days: int = _opt(
        30,
        "An agent's own keyword index not used for this many days (no search with its scope, no "
        "write) is removed from disk; its memory stays searchable for a person, and the agent's "
        "next search rebuilds the index from the notes' index (0: kept for ever).",
        min=0,
    )
    retired_audit_days: int = _opt(
        365,
        "The audit history of a retired agent (agents/.retired/<agent>.audit.log) is removed this "
        "many days after its last retirement, at start and once a day (0: kept for ever).",
        min=0,
    )
    write: MemoryWriteConfig = field(default_factory=MemoryWriteConfig)


@section
class ServerConfig:
    max_frame_bytes: int = _opt(1_048_576, "Largest request line accepted.", min=1024)
    workers: int = _opt(4, "Threads that run searches and other reads.", min=1, max=64)
    write_workers: int = _opt(
        2, "Threads that run memory writes and index requests (searches never wait for them).", min=1, max=16
    )
    idle_timeout_seconds: float = _opt(300.0, "A connection silent this long is closed.", min=1.0)
    max_connections: int = _opt(1024, "Open connections beyond this are refused with an error.", min=1)
    max_buffered_bytes: int = _opt(
        64 << 20,
        "Unfinished request bytes held over all connections; beyond, a connection is refused.",
        min=1024,
    )
    request_timeout_seconds: float = _opt(
        120.0, "A request running longer is answered with a timeout error.", min=1.0
    )


@section
class LoggingConfig:
    level: str = _opt("info", "Log level.", choices=("debug", "info", "warning", "error"))
