"""An error of a problem as one line a person can read in ``sidecar status``, ``sidecar doctor``,
a reply's warning (a memory write the index could not take, a search arm that failed)
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


# Lines of a multi-line error that say nothing to a person: a Python traceback's frames ('File
# "x.py", line 3, in f' and the source line under it), the hint to turn backtraces on, and a Rust
# backtrace: its header ("stack backtrace:", anyhow's "Stack backtrace:") and the frames under it
# ("   3: tantivy::…", "at /rustc/…/src/x.rs:12:5"). A numbered line outside a backtrace is the
# error's own ("Caused by:" then "    0: opening …/meta.json", "    1: No space left on device").
_FRAME = re.compile(
    r'\s*(?:Traceback \(most recent call last\):|File "[^"]*", line \d+|note: run with `RUST_BACKTRACE)'
)
_BACKTRACE = re.compile(r"(?i)\s*stack backtrace:\s*$")
_BACKTRACE_FRAME = re.compile(r"\s*(?:\d+: [\w:<>$.]|at \S+:\d+)|\s+\.\.\.|\s*$")
# Control characters the terminal of doctor or an MCP client would act on: escape sequences
# (colours, title changes, clipboard writes), BEL, NUL, the other C0 and C1 controls and DEL, and
# the bidirectional overrides that show a line in another order than it is stored. Taken out.
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_]?)")
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# A line is cut to this many characters before it is cleaned: cleaning a long line without spaces
# (a dump, a minified path) takes time that grows faster than its length, and doctor and
# memory_status clean every line.
_LONGEST_LINE = 2000
# At most this many lines of a multi-line error are said; the log keeps the rest.
_MOST_LINES = 6


def _printable(line: str) -> str:
    """``line`` without escape sequences and control characters (a tab is a space)."""
    return _CONTROL.sub("", _ESCAPE.sub("", line.replace("\t", " ")))


def _said_lines(text: str) -> list[str]:
    """The lines of ``text`` a person needs: blank lines, backtrace frames (and the source line
    under a Python frame) and repeats left out."""
    out: list[str] = []
    under_frame = in_backtrace = False
    for whole in text.strip().splitlines():
        raw = _printable(whole[:_LONGEST_LINE])
        if _BACKTRACE.match(raw):
            in_backtrace = True
            continue
        if in_backtrace and _BACKTRACE_FRAME.match(raw):
            continue
        in_backtrace = False
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


def _first_line(text: str) -> str:
    """The first line of ``text`` that says anything, cut, for an error whose every line was left
    out (a backtrace alone showed as an empty error in doctor and memory_status)."""
    first = next((p for raw in text.splitlines() if (p := _printable(raw).strip())), "")
    if not first:
        return "an error without a message (the daemon's log may say more)"
    return first if len(first) <= 200 else first[:199] + "…"


def plain_error(text: str) -> str:
    """``text`` as one line: each line cleaned (Rust debug dumps replaced by their own message),
    a known cause said first; the log keeps it whole. A multi-line error (a configuration with
    several problems, an engine's "caused by" chain) keeps its lines, joined, up to
    ``_MOST_LINES``: its first line alone ("2 configuration problems:") lost the files and keys
    the person must mend. Not cut to a length: sidecar's own messages are long where they say
    what to do (an unmounted home's)."""
    lines = _said_lines(text) or [_first_line(text)]
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
