"""The JSON schemas of the MCP tools' inputs and outputs: shared pieces (a hit, a note, a write
reply, a slug) and ``tool``, which puts a tool's entry together."""

from __future__ import annotations

import json
import math
from typing import Any

from sidecar.contracts.protocol import MAX_DAY_CHARS, MAX_PATH_PREFIX_CHARS, MAX_REFERENCE_CHARS
from sidecar.contracts.wire import SOURCES

SLUG_PATTERN = "^[a-z0-9][a-z0-9_-]{0,127}$"


def obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    return out


STR = {"type": "string"}
INT = {"type": "integer"}
NUM = {"type": "number"}
BOOL = {"type": "boolean"}
STR_LIST = {"type": "array", "items": STR}
COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}

HIT = obj(
    {
        "reference": STR,
        "source": {"type": "string", "enum": list(SOURCES)},
        "title": STR,
        "headings": STR_LIST,
        "lines": {"type": "array", "items": INT, "minItems": 2, "maxItems": 2},
        "text": STR,
        "relevance": NUM,
        "score": NUM,
        "rankedUp": STR,
        "masked": COUNTS,
        "date": STR,
        "datedBy": {"type": "string", "enum": ["name", "property", "modified"]},
        "modifiedAhead": STR,
        "deletionHeld": BOOL,
        "widerLook": INT,
    },
    ("reference", "source", "title", "lines", "text", "relevance"),
)
NOTE = obj(
    {
        "reference": STR,
        "source": {"type": "string", "enum": list(SOURCES)},
        "title": STR,
        "description": STR,
        "tags": STR_LIST,
        "modified": STR,
        "modifiedAhead": STR,
        "indexed": BOOL,
        "why": STR,
    },
    ("reference", "source", "title", "indexed"),
)
WRITE_OUT = obj(
    {
        "reference": STR,
        "action": {"type": "string", "enum": ["created", "replaced", "updated"]},
        "bytes": INT,
        "searchable": BOOL,
        "searchableBy": STR_LIST,
        "warning": STR,
        "redacted": COUNTS,
        "duplicates": {
            "type": "array",
            "items": obj({"reference": STR, "similarity": NUM}, ("reference", "similarity")),
        },
        "duplicatesChecked": BOOL,
        "previous": {"type": "string", "description": "where the replaced text was kept"},
        "trashDropped": {
            "type": "array",
            "items": {"type": "string"},
            "description": (
                "older kept texts removed from .trash to stay under memory.maxTrashBytes and maxTrashFiles"
            ),
        },
    },
    ("reference", "action", "searchable", "duplicates"),
)
SLUG = {
    "type": "string",
    "pattern": SLUG_PATTERN,
    "maxLength": 128,
    "description": "File name of the note in your memory: a-z, 0-9, '-' and '_', starting with a letter "
    "or digit, no folder, no extension (e.g. 'nas-backup-setup').",
}
# The lengths the daemon accepts (sidecar.contracts.protocol), stated so the
# shim answers a longer one in the daemon's words: sent on, a megabyte hit the frame limit first.
# A note to read or explore: a reference as search returns it, or a link as a note writes it
# ("[[Boat#Budget]]") or a note's name, resolved as Obsidian resolves links. No pattern: every
# reference search returns must pass (a file name may hold a line break, and a host enforcing
# input schemas refused to send such a one back); the daemon refuses what names no note.
NOTE_REF = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_REFERENCE_CHARS,
    "description": "A reference from memory_search or memory_list, or a link as a note writes it "
    "('[[Boat#Budget]]') or a note's name.",
}
PATH_PREFIX = {
    "type": "string",
    "maxLength": MAX_PATH_PREFIX_CHARS,
    "description": "Only notes whose path starts with this.",
}
DAY = {"type": "string", "maxLength": MAX_DAY_CHARS}
CONTENT = {
    "type": "string",
    "description": "The whole note in Markdown (it replaces the previous text); at most about 100 kB "
    "(the user's memory.maxNoteBytes): split a longer text into several notes.",
}
FRONTMATTER = {
    "type": "object",
    "description": 'Optional front matter keys, e.g. {"tags": ["nas"], "description": "one line"}; '
    "'created' and 'updated' are managed for you. Names ('aliases'/'alias', 'tags'/'tag', 'title', "
    "any case) are text: a number there is written as its text, and true or false is refused "
    '(send "true" as text for a name spelled so).',
}
READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}
WRITE = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True, "openWorldHint": False}


def tool(name: str, title: str, description: str, *schemas_and_hints: dict[str, Any]) -> dict[str, Any]:
    inp, out, ann = schemas_and_hints
    return {
        "name": name,
        "title": title,
        "description": description,
        # A misspelt argument is an error (the shim checks the names), not a silently dropped
        # filter; the schema does not say additionalProperties: some clients' model APIs refuse it.
        "inputSchema": inp,
        "outputSchema": out,
        "annotations": {"title": title, **ann},
    }


def out_of_bounds(schema: dict[str, Any], args: dict[str, Any]) -> str | None:
    """What is wrong with an argument against its input schema (a number's type, ``minimum`` and
    ``maximum``; a string's ``maxLength``), or None. The shim checks these itself: a client need
    not validate the schema, the daemon's own, wider ranges (limit up to 200, minScore up to 100)
    are not the tool's, and a string too long for a frame got an error about frames, not its own."""
    for name, prop in schema.get("properties", {}).items():
        kind, value = prop.get("type"), args.get(name)
        longest = prop.get("maxLength")
        if isinstance(value, str) and longest is not None and len(value) > longest:
            return f"'{name}' is longer than {longest} characters"  # the daemon's words
        if kind not in ("integer", "number") or value is None:
            continue
        integral = isinstance(value, int) and not isinstance(value, bool)
        ok = integral or (kind == "number" and isinstance(value, float) and not math.isnan(value))
        lo, hi = prop.get("minimum"), prop.get("maximum")
        if not ok or (lo is not None and value < lo) or (hi is not None and value > hi):
            what = "an integer" if kind == "integer" else "a number"
            span = f" from {lo} to {hi}" if lo is not None and hi is not None else ""
            return f"'{name}' must be {what}{span}, not {json.dumps(value, ensure_ascii=False)}"
    return None
