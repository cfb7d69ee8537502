"""An error of a problem as one line a person can read in ``sidecar status``, ``sidecar doctor``
and the MCP ``memory_status`` tool (pure).

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


def _plain_line(line: str) -> str:
    """One line of an error: engine text cleaned, each Rust debug dump replaced by its message."""
    line = engine_text(line)
    for _ in range(8):  # a dump whose message holds a dump again: bounded
        if not (m := _DUMP_START.search(line)):
            break
        end = _dump_end(line, m.start())
        if end < len(line) and line[end] == "'" and line[m.start()] == "'":
            end += 1  # the quotes Tantivy puts around the dump
        line = line[: m.start()] + _plain_dump(line[m.start() : end]) + line[end:]
    return _OS_ERROR.sub("", line).strip()


# Lines of a multi-line error that say nothing to a person: the frames of a Rust or Python
# backtrace ("   3: tantivy::…", "at /rustc/…/src/x.rs:12:5", 'File "x.py", line 3, in f' and the
# source line under it) and the hint to turn backtraces on.
_FRAME = re.compile(
    r"\s*(?:stack backtrace:|\d+: [\w:<>$.]|at \S+:\d+|Traceback \(most recent call last\):|"
    r'File "[^"]*", line \d+|note: run with `RUST_BACKTRACE)'
)
# At most this many lines of a multi-line error are said; the log keeps the rest.
_MOST_LINES = 6


def _said_lines(text: str) -> list[str]:
    """The lines of ``text`` a person needs: blank lines, backtrace frames (and the source line
    under a Python frame) and repeats left out."""
    out: list[str] = []
    under_frame = False
    for raw in text.strip().splitlines():
        if _FRAME.match(raw):
            under_frame = raw.lstrip().startswith("File ")
            continue
        if under_frame and raw.startswith("    "):
            under_frame = False
            continue
        under_frame = False
        line = _plain_line(raw)
        if line and line not in out:
            out.append(line)
    return out


def plain_error(text: str) -> str:
    """``text`` as one line: each line cleaned (Rust debug dumps replaced by their own message),
    a known cause said first; the log keeps it whole. A multi-line error (a configuration with
    several problems, an engine's "caused by" chain) keeps its lines, joined, up to
    ``_MOST_LINES``: its first line alone ("2 configuration problems:") lost the files and keys
    the person must mend. Not cut to a length: sidecar's own messages are long where they say
    what to do (an unmounted home's)."""
    lines = _said_lines(text) or [""]
    kept = lines[:_MOST_LINES]
    line = kept[0]
    for more in kept[1:]:
        line += f" {more}" if line.endswith(":") else f"; {more}"
    cause = cause_of(text)
    if cause is not None and cause not in line.lower():
        line = f"{cause}: {line}"
    if len(lines) > len(kept):
        line += f" (and {len(lines) - len(kept)} more lines: the daemon's log has them)"
    return line
