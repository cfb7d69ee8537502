"""The versions the index's stores were written in, read from their files without opening them
as stores.

The manifest's schema is SQLite's ``user_version`` (the file header, offset 60, big-endian; asked
through a read-only connection where a new manifest's is still only in its write-ahead log). The
keyword index's layout is recorded in ``bm25/layout.json``; an index from before that file was
written carries its layout only in its analyzers' names (``sidecar_text_2``: text prepared
differently gets a new name), read from ``chunks/meta.json``. A store of a newer version is not
this one's to open or replace (a downgrade): the daemon refuses to start, ``doctor`` and
``status`` say so. Imports only the standard library: thin clients read this.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sqlite3
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# The manifest's schema. 5: a chunk's model text kept as what it adds to its text. 6: the link
# graph's rows name notes by number (``notes.links``).
MANIFEST_SCHEMA = 6
# The keyword index's layout: its fields, their analyzers and its folders. A change that an index
# written before cannot serve raises it (and the analyzers get new names when text is prepared
# differently). 2: chunks, pages and memory/<agent> folders, analyzers ``sidecar_*_2``. 3: a word
# holds underscores only inside (``sidecar_*_3``); a layout-2 index answers while layout 3 is
# refilled beside it (``index.upgrade``).
BM25_LAYOUT = 3
LAYOUT_FILE = "layout.json"
FIRST_RECORDED_LAYOUT = 2  # the layout that came with the file: none lower was ever recorded
_ANALYZER_GENERATION = re.compile(r"^sidecar_[a-z]+_(\d+)$")


def manifest_schema(path: Path) -> int | None:
    """The schema of the manifest at ``path`` (0 for a new one), None without a readable one."""
    try:
        with path.open("rb") as fh:
            head = fh.read(100)
    except OSError:
        return None
    if len(head) == 100 and head.startswith(b"SQLite format 3\x00"):
        return int.from_bytes(head[60:64], "big", signed=True)
    return None


def schema_in_log(path: Path, header: int | None) -> bool:
    """Whether the manifest's schema is to be asked through its write-ahead log: the log holds
    commits, and any of them may have set it. A new manifest's header says 0 until its first
    checkpoint (a running daemon's new index, a kill before that checkpoint); an upgrade's new
    schema stays in the log until one too (a header of 5 while the log says 6, or this version's
    header while a newer sidecar's upgrade is in the log), and judged by its header such an index
    was said to be upgraded at the next start, or not newer."""
    if header is None:
        return False
    try:
        return path.with_name(f"{path.name}-wal").stat().st_size > 0
    except OSError:
        return False


def manifest_schema_now(path: Path) -> int | None:
    """The manifest's schema as a reader sees it: the header's, or the one its write-ahead log holds
    when the log holds commits (``schema_in_log``) and its -shm is there (a read-only connection
    then reads through it and makes no file); the header's when that read fails."""
    header = manifest_schema(path)
    if not schema_in_log(path, header) or not path.with_name(f"{path.name}-shm").exists():
        return header
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=2)) as db:
            return int(db.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.Error:
        return header


def bm25_layout(folder: Path) -> int | None:
    """The layout of the keyword index in ``folder``: the recorded one, else the one its analyzers'
    names carry (1 for names without a number, and for the single index of before the chunks/ and
    pages/ folders); None without an index there or when unreadable."""
    recorded = _recorded_layout(folder)
    if recorded is not None:
        return recorded
    if (folder / "meta.json").is_file() and not (folder / "chunks").exists():
        return 1  # one index in the folder itself, from before the chunks/ and pages/ folders
    try:
        fields = json.loads((folder / "chunks" / "meta.json").read_text(encoding="utf-8"))["schema"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    generations = [1]
    for f in fields if isinstance(fields, list) else []:
        with contextlib.suppress(AttributeError, KeyError, TypeError):
            name = f["options"]["indexing"]["tokenizer"]
            m = _ANALYZER_GENERATION.match(name) if isinstance(name, str) else None
            if m:
                generations.append(int(m.group(1)))
    return max(generations)


def _recorded_layout(folder: Path) -> int | None:
    """The layout ``layout.json`` records; None without the file or when it holds no layout any
    version writes (a plain number from 2, the first one recorded): such a file is not taken for
    an older layout (whose index is replaced), the analyzers' names tell instead."""
    path = folder / LAYOUT_FILE
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("bm25_layout_unreadable path=%s error=%s (read from the analyzers)", path, exc)
        return None
    layout = recorded.get("layout") if isinstance(recorded, dict) else None
    # bool is an int; 1 and below were never recorded (the file came with layout 2)
    if type(layout) is int and layout >= FIRST_RECORDED_LAYOUT:
        return layout
    log.warning("bm25_layout_unknown path=%s value=%r (read from the analyzers)", path, recorded)
    return None


def record_bm25_layout(folder: Path, layout: int = BM25_LAYOUT) -> None:
    """Write ``layout`` (this version's) into ``folder`` (through a temporary file: never half a
    file). Raises OSError (a full disk): the caller decides whether it matters."""
    target = folder / LAYOUT_FILE
    temp = folder / f".{LAYOUT_FILE}.tmp"
    try:
        temp.write_text(json.dumps({"layout": layout}) + "\n", encoding="utf-8")
        os.replace(temp, target)
    except OSError:
        # A full disk leaves an empty or partial temporary file: not left in the index folder.
        with contextlib.suppress(OSError):
            temp.unlink()
        raise


@dataclass(frozen=True)
class NewerStore:
    """A store of the index written by a newer sidecar."""

    store: str  # "manifest" or "keyword index"
    path: Path
    found: int
    reads: int

    def describe(self) -> str:
        """The one line doctor, status and the refused start share."""
        kind = "schema" if self.store == "manifest" else "layout"
        return (
            f"index written by a newer sidecar ({self.store} {kind} {self.found}, this one reads "
            f"{self.reads}; {self.path}): upgrade again, or rebuild"
        )


def newer_store(index_dir: Path) -> NewerStore | None:
    """The first store in ``index_dir`` a newer sidecar wrote, or None. The manifest's schema is
    read through its write-ahead log where that holds commits (``manifest_schema_now``)."""
    manifest = index_dir / "manifest.sqlite"
    schema = manifest_schema_now(manifest)
    if schema is not None and schema > MANIFEST_SCHEMA:
        return NewerStore("manifest", manifest, schema, MANIFEST_SCHEMA)
    bm25 = index_dir / "bm25"
    layout = bm25_layout(bm25)
    if layout is not None and layout > BM25_LAYOUT:
        return NewerStore("keyword index", bm25, layout, BM25_LAYOUT)
    return None
