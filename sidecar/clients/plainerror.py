"""An error of a problem as one short line a person can read in ``sidecar status`` (pure).

The daemon keeps an error's whole text (health's ``problems``, the log): an engine's message can
carry a Rust debug dump (Tantivy's ``IoError { io_error: Os { code: 28, kind: StorageFull,
message: "No space left on device" }, filepath: "…" }``) that says "disk full" in sixty words.
Imports only ``re`` and the engine-message cleaning of ``sidecar.contracts.errors`` (Rust source
locations, hints and ``IoError(Os {…})`` forms are removed there, for status and CLI warnings alike).
"""

from __future__ import annotations

import re

from sidecar.contracts.errors import engine_text

# The start of a Rust debug form of an error: a struct (`IoError { io_error: …`, `Os { code: …`,
# `Custom { kind: …`) or a tuple variant (`IoError(Os { …`), opened where the text switches to the
# engine's own words. A field name must follow the bracket: a folder named `Custom {draft}` is a
# path, not a dump.
_DUMP_START = re.compile(r"'?\b(?:IoError|Os|Custom|SimpleMessage)(?: \{(?= \w+: )|\((?=\w+ \{ \w+: ))")
_MESSAGE = re.compile(r'\b(?:message|error): "((?:[^"\\]|\\.)*)"')
_FILEPATH = re.compile(r'\bfilepath: "((?:[^"\\]|\\.)*)"')
_KIND = re.compile(r"\bkind: (\w+)")
_OS_ERROR = re.compile(r"\s*\(os error \d+\)")

# A short cause for the usual faults, from the OS's words, Rust's error kinds or the errno
# Rust appends ("(os error 28)"); said first when the line does not already say it.
_CAUSES = (
    # EDQUOT: `df` shows free space, so not "disk full"
    ("disk quota exceeded", ("quota exceeded", "filesystemquotaexceeded", "os error 122")),
    ("disk full", ("no space left", "storagefull", "os error 28", "disk is full")),
    ("permission denied", ("permission denied", "permissiondenied", "os error 13", "os error 1)")),
    ("read-only file system", ("read-only file system", "readonlyfilesystem", "os error 30")),
)


def _dump_end(text: str, start: int) -> int:
    """The index after the bracket that closes the one opened at or after ``start`` (quotes
    skipped), or the text's end when it never closes."""
    depth, quoted, i = 0, False, start
    while i < len(text):
        c = text[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in "{(":
            depth += 1
        elif c in "})":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def _plain_dump(dump: str) -> str:
    """What a Rust debug dump says: its message (and the file it names), else its error kind."""
    said = _MESSAGE.search(dump)
    words = said.group(1) if said else (m.group(1) if (m := _KIND.search(dump)) else "an I/O error")
    path = _FILEPATH.search(dump)
    return f"{words} ({path.group(1)})" if path else words


def cause_of(text: str) -> str | None:
    """ "disk quota exceeded", "disk full", "permission denied", "read-only file system", or None."""
    low = text.lower()
    return next((cause for cause, words in _CAUSES if any(w in low for w in words)), None)


def plain_error(text: str) -> str:
    """``text`` as one line for status: its first line, each Rust debug dump replaced by its own
    message, a known cause said first; the log keeps it whole. Not cut to a length: sidecar's own
    messages are long where they say what to do (an unmounted home's)."""
    lines = text.strip().splitlines() or [""]
    line, cut = engine_text(lines[0]), len(lines) > 1
    for _ in range(8):  # a dump whose message holds a dump again: bounded
        if not (m := _DUMP_START.search(line)):
            break
        end = _dump_end(line, m.start())
        if end < len(line) and line[end] == "'" and line[m.start()] == "'":
            end += 1  # the quotes Tantivy puts around the dump
        line = line[: m.start()] + _plain_dump(line[m.start() : end]) + line[end:]
    line = _OS_ERROR.sub("", line)
    cause = cause_of(text)
    if cause is not None and cause not in line.lower():
        line = f"{cause}: {line}"
    return f"{line} (the daemon's log has the rest)" if cut else line
