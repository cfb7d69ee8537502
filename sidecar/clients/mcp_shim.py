"""`sidecar mcp --agent NAME`: an MCP stdio server whose tools each forward one protocol op.

A thin client that speaks MCP's JSON-RPC over stdio itself (the initialize handshake, tools,
resources, prompts): importing an MCP SDK costs seconds of pydantic models per agent start, and
the server side of the protocol is a few messages. It imports the socket client, never a model or
an index; stdout belongs to the protocol (logs go to stderr). Every tool call opens a fresh
connection, so the shim keeps working across daemon restarts; when the daemon is down the tools
answer with an error that says how to start it.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

from sidecar import __version__
from sidecar.clients.client import Client
from sidecar.contracts.errors import DaemonNotRunningError, ProtocolError, RemoteError

log = logging.getLogger(__name__)

PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
SOURCES = ["vault", "wiki", "memory"]
SLUG_PATTERN = "^[a-z0-9][a-z0-9_-]{0,127}$"
REFERENCE_PATTERN = "^(vault|wiki|memory)/[^/].*$"
NOTE_URI = "sidecar://note/"
OUTLINE_URI = "sidecar://outline/wiki"

INSTRUCTIONS = """\
sidecar gives you recall over the user's Obsidian notes and a private memory inbox of your own.
Sources: [wiki] the user's curated pages (most trustworthy), [vault] the user's other notes,
[memory] notes you wrote yourself in earlier sessions. Notes are recollection that can be outdated:
check facts that matter with your tools before acting on them. You can read everything but write
only to your own memory (memory_write / memory_edit / memory_delete); the vault and wiki are read-only.
References look like 'wiki/Backups', 'vault/Projects/Boat' or 'memory/nas-backup-setup' (your own
note). wiki_outline shows the wiki's folders and pages; memory_status says whether search is
complete (index building, keyword-only mode, offline folders)."""

LEGEND = "[wiki] curated pages · [vault] the user's notes · [memory] your own earlier notes"

FILTER_HELP = (
    "Filters may also be written inside the query: tag:garden (tag:a,b for any of several), "
    "path:Projects/, source:wiki, since:2026-09-01, until:2026-09 (also since:yesterday, "
    "since:monday, since:3d). Time phrases in English or German ('today', 'yesterday', 'last week', "
    "'last 3 days', 'this month', 'heute', 'gestern', 'letzte Woche', 'seit Montag', 'vor 3 Tagen') "
    "restrict hits to notes of that date (front matter date, daily-note name, else last change); "
    "when no note of that date matches, the phrase is searched as words instead. "
    "A filter value that cannot be used is an error naming it."
)
DAY_HELP = "A day: YYYY-MM-DD, YYYY-MM, today, yesterday, a weekday name or Nd (N days ago)."


# --- schemas -----------------------------------------------------------------------------------


def _obj(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    return out


_STR = {"type": "string"}
_INT = {"type": "integer"}
_NUM = {"type": "number"}
_BOOL = {"type": "boolean"}
_STR_LIST = {"type": "array", "items": _STR}
_COUNTS = {"type": "object", "additionalProperties": {"type": "integer"}}

HIT = _obj(
    {
        "reference": _STR,
        "source": {"type": "string", "enum": SOURCES},
        "title": _STR,
        "headings": _STR_LIST,
        "lines": {"type": "array", "items": _INT, "minItems": 2, "maxItems": 2},
        "text": _STR,
        "relevance": _NUM,
        "score": _NUM,
        "masked": _COUNTS,
    },
    ("reference", "source", "title", "lines", "text", "relevance"),
)
NOTE = _obj(
    {
        "reference": _STR,
        "source": {"type": "string", "enum": SOURCES},
        "title": _STR,
        "description": _STR,
        "tags": _STR_LIST,
        "modified": _STR,
        "indexed": _BOOL,
        "why": _STR,
    },
    ("reference", "source", "title", "indexed"),
)
WRITE_OUT = _obj(
    {
        "reference": _STR,
        "action": {"type": "string", "enum": ["created", "replaced", "updated"]},
        "bytes": _INT,
        "searchable": _BOOL,
        "searchableBy": _STR_LIST,
        "warning": _STR,
        "redacted": _COUNTS,
        "duplicates": {
            "type": "array",
            "items": _obj({"reference": _STR, "similarity": _NUM}, ("reference", "similarity")),
        },
        "duplicatesChecked": _BOOL,
        "previous": {"type": "string", "description": "where the replaced text was kept"},
    },
    ("reference", "action", "searchable", "duplicates"),
)
SLUG = {
    "type": "string",
    "pattern": SLUG_PATTERN,
    "description": "File name of the note in your memory: a-z, 0-9, '-' and '_', starting with a letter "
    "or digit, no folder, no extension (e.g. 'nas-backup-setup').",
}
CONTENT = {"type": "string", "description": "The whole note in Markdown (it replaces the previous text)."}
FRONTMATTER = {
    "type": "object",
    "description": 'Optional front matter keys, e.g. {"tags": ["nas"], "description": "one line"}; '
    "'created' and 'updated' are managed for you.",
}
READ = {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False}
WRITE = {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True, "openWorldHint": False}


def _tool(name: str, title: str, description: str, *schemas_and_hints: dict[str, Any]) -> dict[str, Any]:
    inp, out, ann = schemas_and_hints
    return {
        "name": name,
        "title": title,
        "description": description,
        "inputSchema": inp,
        "outputSchema": out,
        "annotations": {"title": title, **ann},
    }


TOOLS: list[dict[str, Any]] = [
    _tool(
        "memory_search",
        "Search notes and memory",
        "Search the user's notes and your own memory by meaning and keywords (hybrid search). Use it "
        "before answering questions about the user's projects, setup, decisions or preferences, and "
        "before writing a memory note (to find one to update instead). Returns the best passages, each "
        "with its source tag, reference, line range and relevance (0-1); pass a reference to memory_get "
        "for the whole note. " + FILTER_HELP,
        _obj(
            {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 4000,
                    "description": "What you are looking for, in plain words (any language); inline "
                    "filters and time phrases allowed (see the tool description).",
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 8},
                "minScore": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "description": "Drop passages whose relevance is below this (default: the "
                    "daemon's search.minScore, 0.1).",
                },
                "source": {"type": "string", "enum": SOURCES, "description": "Only this source."},
                "tag": {"type": "string", "description": "Only notes with this tag ('a,b': any of them)."},
                "pathPrefix": {"type": "string", "description": "Only notes whose path starts with this."},
                "since": {"type": "string", "description": "Only notes of this day or later. " + DAY_HELP},
                "until": {"type": "string", "description": "Only notes of this day or earlier. " + DAY_HELP},
            },
            ("query",),
        ),
        _obj(
            {
                "query": _STR,
                "hits": {"type": "array", "items": HIT},
                "degraded": _STR,
                "masked": _COUNTS,
                "window": _obj(
                    {"phrase": _STR, "since": _STR, "until": _STR, "applied": _BOOL}, ("phrase", "applied")
                ),
            },
            ("query", "hits"),
        ),
        READ,
    ),
    _tool(
        "memory_get",
        "Read a note",
        "Read one whole note by its reference, exactly as memory_search or memory_list return it "
        "(e.g. 'wiki/Backups', 'vault/Projects/Boat', 'memory/nas-backup-setup'). Secrets in the text "
        "are shown as [REDACTED:kind].",
        _obj(
            {
                "reference": {
                    "type": "string",
                    "pattern": REFERENCE_PATTERN,
                    "description": "A reference from memory_search or memory_list.",
                }
            },
            ("reference",),
        ),
        _obj(
            {
                "reference": _STR,
                "source": {"type": "string", "enum": SOURCES},
                "title": _STR,
                "text": _STR,
                "lines": _INT,
                "indexed": _BOOL,
                "masked": _COUNTS,
            },
            ("reference", "source", "title", "text", "lines", "indexed"),
        ),
        READ,
    ),
    _tool(
        "memory_related",
        "Notes related to a note",
        "Notes related to one note through the user's link graph: the notes it links to and those "
        "linking to it first, then notes sharing its links or tags. Use it to explore around a note "
        "found with memory_search.",
        _obj(
            {
                "reference": {
                    "type": "string",
                    "pattern": REFERENCE_PATTERN,
                    "description": "A reference from memory_search or memory_list.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 50,
                    "description": "Notes (default 10).",
                },
            },
            ("reference",),
        ),
        _obj(
            {
                "reference": _STR,
                "related": {
                    "type": "array",
                    "items": _obj(
                        {"reference": _STR, "source": _STR, "title": _STR, "relation": _STR},
                        ("reference", "relation"),
                    ),
                },
            },
            ("reference", "related"),
        ),
        READ,
    ),
    _tool(
        "memory_list",
        "List notes",
        "List notes with their one-line description: by default your own memory notes; with source "
        "'wiki', 'vault' or 'all' the user's notes too. Filter by tag (front matter or #tag) and by path "
        "prefix (e.g. 'Projects/'). Notes that exist but are not searchable are marked with the reason.",
        _obj(
            {
                "source": {"type": "string", "enum": [*SOURCES, "all"], "default": "memory"},
                "tag": {"type": "string", "description": "Only notes with this tag."},
                "pathPrefix": {"type": "string", "description": "Only notes whose path starts with this."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 200},
            }
        ),
        _obj(
            {"notes": {"type": "array", "items": NOTE}, "total": _INT, "truncated": _BOOL},
            ("notes", "total", "truncated"),
        ),
        READ,
    ),
    _tool(
        "memory_write",
        "Write a memory note",
        "Create or replace a note in your own memory inbox (never the user's vault or wiki). Write "
        "durable facts worth recalling in later sessions: decisions, how something was set up, "
        "preferences. Search first: if a similar note exists, use memory_edit on it (the reply lists "
        "near copies). Secrets are redacted before writing; a replaced text is kept in the inbox's "
        ".trash folder.",
        _obj({"slug": SLUG, "content": CONTENT, "frontmatter": FRONTMATTER}, ("slug", "content")),
        WRITE_OUT,
        WRITE,
    ),
    _tool(
        "memory_edit",
        "Update a memory note",
        "Update an existing note of your memory (fails if it does not exist). The content replaces the "
        "body; front matter keys you pass are updated, the others are kept. The previous text is kept "
        "in the inbox's .trash folder.",
        _obj({"slug": SLUG, "content": CONTENT, "frontmatter": FRONTMATTER}, ("slug", "content")),
        WRITE_OUT,
        WRITE,
    ),
    _tool(
        "memory_delete",
        "Delete a memory note",
        "Delete a note of your memory that is wrong or obsolete. It is moved to the inbox's .trash "
        "folder (the user can restore it) and leaves search at once. Deleting a missing note is not an "
        "error.",
        _obj({"slug": SLUG}, ("slug",)),
        _obj({"reference": _STR, "deleted": _BOOL, "trash": _STR, "message": _STR}, ("reference", "deleted")),
        WRITE,
    ),
    _tool(
        "memory_status",
        "Memory status",
        "Whether recall is complete right now: the embedding model's state, the index (building or "
        "ready, with progress), chunks still waiting for their vector, folders that are offline and why, "
        "and whether search runs on keywords only. Call it when results look thin or a note is missing.",
        _obj({}),
        _obj(
            {
                "daemon": {"type": "string", "enum": ["running", "down"]},
                "message": _STR,
                "embedder": _obj({"state": _STR, "model": {"type": ["string", "null"]}, "error": _STR}),
                "index": _obj(
                    {
                        "state": {"type": "string", "enum": ["building", "ready"]},
                        "phase": _STR,
                        "done": _INT,
                        "total": _INT,
                        "files": _INT,
                        "chunks": _INT,
                        "pendingVectors": _INT,
                    }
                ),
                "keywordOnly": _BOOL,
                "offlineRoots": {
                    "type": "array",
                    "items": _obj({"name": _STR, "path": _STR, "why": _STR}, ("name", "why")),
                },
                "problems": {"type": "array", "items": _obj({"area": _STR, "error": _STR})},
            },
            ("daemon", "message"),
        ),
        READ,
    ),
    _tool(
        "wiki_outline",
        "Wiki outline",
        "The wiki's topology: folders, pages and one-line descriptions, within a token budget. The text "
        "stays the same between calls while the wiki does, so it can sit in a system prompt. Read a page "
        "with memory_get('wiki/<path>').",
        _obj(
            {
                "pathPrefix": {"type": "string", "description": "Only this folder (e.g. 'Projects')."},
                "tokenBudget": {"type": "integer", "minimum": 100, "maximum": 50000, "default": 1000},
            }
        ),
        _obj(
            {
                "outline": _STR,
                "pages": _INT,
                "folders": _INT,
                "tokens": _INT,
                "detail": {"type": "string", "enum": ["full", "titles", "folders", "truncated"]},
            },
            ("outline", "pages", "folders", "tokens", "detail"),
        ),
        READ,
    ),
]

PROMPTS = [
    {
        "name": "recall",
        "title": "Recall what the notes say",
        "description": "Ask the model to search the user's notes and its memory before answering.",
        "arguments": [{"name": "topic", "description": "What to recall", "required": True}],
    }
]


RESOURCES = [
    {
        "uri": OUTLINE_URI,
        "name": "wiki-outline",
        "title": "Wiki outline",
        "description": "The wiki's folders, pages and one-line descriptions.",
        "mimeType": "text/markdown",
    }
]
RESOURCE_TEMPLATES = [
    {
        "uriTemplate": NOTE_URI + "{+reference}",
        "name": "note",
        "title": "A note by reference",
        "description": "A note of the vault, the wiki or your memory, e.g. "
        f"{NOTE_URI}wiki/Backups or {NOTE_URI}memory/nas-backup-setup.",
        "mimeType": "text/markdown",
    }
]


class ToolError(Exception):
    """A tool call that failed in a way the model should read (sent as isError content)."""


# --- text renderings ---------------------------------------------------------------------------


def _masked_note(counts: dict[str, int]) -> str:
    kinds = ", ".join(f"{n}× {k}" for k, n in sorted(counts.items()))
    return f"Secrets in the notes are shown as [REDACTED:kind] ({kinds})."


def text_of_search(query: str, result: dict[str, Any]) -> str:
    hits = result.get("hits", [])
    lines = [f'{len(hits)} hit(s) for "{query}"  ({LEGEND})']
    if result.get("degraded"):
        lines.append(f"note: {result['degraded']}")
    window = result.get("window")
    if window and window["applied"]:
        lines.append(f"'{window['phrase']}': only notes dated {window['since']} to {window['until']}.")
    elif window:
        lines.append(f"'{window['phrase']}': no note of that date matched, so it was searched as words.")
    for i, h in enumerate(hits, 1):
        head = " › ".join(h.get("headings") or [])
        lines.append(
            f"\n{i}. [{h['source']}] {h['reference']} (lines {h['lines'][0]}-{h['lines'][1]}, "
            f"relevance {h.get('relevance', 0.0):.2f})" + (f"\n   section: {head}" if head else "")
        )
        lines.extend("   " + line for line in h["text"].splitlines())
    if not hits:
        lines.append("Nothing relevant found; try other words, a wider date, or memory_list to browse.")
    if result.get("masked"):
        lines.append(_masked_note(result["masked"]))
    return "\n".join(lines)


def text_of_write(result: dict[str, Any]) -> str:
    size = f"{result['bytes']} bytes" if "bytes" in result else "written"
    lines = [f"{result['reference']} {result['action']} ({size})."]
    if result.get("previous"):
        lines.append(f"The previous text was kept in {result['previous']}.")
    if result.get("warning"):
        lines.append(str(result["warning"]))
    elif result.get("searchable"):
        lines.append("It is searchable now.")
    if result.get("redacted"):
        kinds = ", ".join(f"{n}× {k}" for k, n in result["redacted"].items())
        lines.append(f"Secrets were replaced by [REDACTED:kind] markers before writing: {kinds}.")
    for d in result.get("duplicates", []):
        lines.append(
            f"Near copy: {d['reference']} ({d['similarity']:.0%} similar); "
            + (
                "consider memory_edit on it instead of keeping two."
                if d["reference"].startswith("memory/")
                else "the user's note already says this."
            )
        )
    if result.get("duplicatesChecked") is False:
        lines.append("Copies were not looked for (the embedding model is not loaded yet).")
    return "\n".join(lines)


def text_of_list(r: dict[str, Any]) -> str:
    if not r["notes"]:
        return "No notes match."
    shown = f" (first {len(r['notes'])} shown)" if r["truncated"] else ""
    lines = [f"{r['total']} note(s){shown}:"]
    for n in r["notes"]:
        tags = f"  #{' #'.join(n['tags'])}" if n.get("tags") else ""
        desc = f": {n['description']}" if n.get("description") else ""
        state = "" if n.get("indexed", True) else f"  [not searchable: {n.get('why', 'not indexed')}]"
        lines.append(f"- [{n['source']}] {n['reference']} {n['title']}{desc} ({n['modified']}){tags}{state}")
    return "\n".join(lines)


def status_of(health: dict[str, Any]) -> dict[str, Any]:
    """What an agent needs of the daemon's ``health``."""
    emb = health.get("embedder", {})
    idx = health.get("index", {})
    progress = idx.get("progress", {})
    offline = [
        {"name": r.get("name", "?"), "path": r.get("path", ""), "why": r.get("error") or "unreachable"}
        for r in health.get("roots", [])
        if r.get("mode") == "offline"
    ]
    keyword_only = emb.get("state") != "ok" or (health.get("vectors") or {}).get("serving") is None
    index = {
        "state": idx.get("state", "building"),
        "phase": idx.get("phase", ""),
        "done": progress.get("done", 0),
        "total": progress.get("total", 0),
        "files": idx.get("files", 0),
        "chunks": idx.get("chunks", 0),
        "pendingVectors": idx.get("pending_vectors", 0),
    }
    parts = [
        f"index {index['state']}"
        + (f" ({index['done']}/{index['total']})" if index["state"] == "building" else ""),
        f"{index['files']} notes, {index['chunks']} chunks",
    ]
    if index["pendingVectors"]:
        parts.append(f"{index['pendingVectors']} chunks wait for their vector (found by keywords only)")
    if keyword_only:
        parts.append(f"keyword-only search (embedder {emb.get('state', 'unknown')})")
    parts.extend(f"{r['name']} offline: {r['why']}" for r in offline)
    problems = [
        {"area": p.get("area", ""), "error": p.get("error", "")}
        for p in (health.get("problems") or {}).get("active", [])
    ]
    parts.extend(f"problem in {p['area']}: {p['error']}" for p in problems)
    return {
        "daemon": "running",
        "message": "; ".join(parts) + ".",
        "embedder": {
            "state": emb.get("state", ""),
            "model": emb.get("model"),
            "error": emb.get("error") or "",
        },
        "index": index,
        "keywordOnly": keyword_only,
        "offlineRoots": offline,
        "problems": problems,
    }


# --- the server --------------------------------------------------------------------------------


class Shim:
    """One agent's MCP server over a pair of byte streams."""

    def __init__(self, socket_path: Path, agent: str, out: BinaryIO) -> None:
        self.socket_path = socket_path
        self.agent = agent
        self.out = out
        self._write_lock = threading.Lock()
        self._tools: dict[str, Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]] = {
            "memory_search": self.search,
            "memory_get": self.get,
            "memory_related": self.related,
            "memory_list": self.list,
            "memory_write": lambda a: self.write("write", a),
            "memory_edit": lambda a: self.write("edit", a),
            "memory_delete": self.delete,
            "memory_status": self.status,
            "wiki_outline": self.outline,
        }

    # daemon calls

    def call(self, op: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            with Client(self.socket_path, agent=self.agent, timeout=60.0) as client:
                return client.call(op, params)
        except DaemonNotRunningError as exc:
            raise ToolError(f"sidecar daemon unavailable: {exc}") from exc
        except RemoteError as exc:
            raise ToolError(f"{exc.code}: {exc}") from exc
        except ProtocolError as exc:
            raise ToolError(f"talking to the sidecar daemon failed: {exc}") from exc

    def search(self, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        query = a.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("'query' is required")
        params: dict[str, Any] = {"query": query, "limit": a.get("limit", 8)}
        for k in ("minScore", "source", "tag", "pathPrefix", "since", "until"):
            if a.get(k) is not None:
                params[k] = a[k]
        r = self.call("search", params)
        hits = [
            {
                k: h[k]
                for k in (
                    "reference",
                    "source",
                    "title",
                    "headings",
                    "lines",
                    "text",
                    "relevance",
                    "score",
                    "masked",
                )
                if k in h
            }
            for h in r.get("hits", [])
        ]
        masked: dict[str, int] = {}
        for h in hits:
            for kind, n in h.get("masked", {}).items():
                masked[kind] = masked.get(kind, 0) + n
        out: dict[str, Any] = {"query": query, "hits": hits}
        for k in ("degraded", "window"):
            if r.get(k):
                out[k] = r[k]
        if masked:
            out["masked"] = masked
        return text_of_search(query, out), out

    def get(self, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        r = self.call("get", {"reference": a.get("reference")})
        text = f"[{r['source']}] {r['reference']} ({r['lines']} lines)\n\n{r['text']}"
        links = sorted({link["target"] for link in r.get("links", []) if link["target"]})
        back = sorted({b["reference"] for b in r.get("backlinks", [])})
        if links or back:
            text += (
                f"\n\n---\nLinks to: {', '.join(links) or 'none'}\nLinked from: {', '.join(back) or 'none'}"
            )
        if r.get("masked"):
            text += "\n\n" + _masked_note(r["masked"])
        return text, r

    def related(self, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        params = {k: a[k] for k in ("reference", "limit") if a.get(k) is not None}
        r = self.call("related", params)
        if not r["related"]:
            return f"No notes are linked with {r['reference']} or share its links or tags.", r
        lines = [f"Related to {r['reference']}:"]
        for item in r["related"]:
            shared = "; ".join(f"{k}: {', '.join(v)}" for k, v in item.get("shared", {}).items())
            lines.append(
                f"- [{item['source']}] {item['reference']}: {item.get('title', '')} ({item['relation']}"
                f"{'; ' + shared if shared else ''})"
            )
        return "\n".join(lines), r

    def list(self, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        params = {k: a[k] for k in ("source", "tag", "pathPrefix", "limit") if a.get(k) is not None}
        r = self.call("list", params)
        keep = ("reference", "source", "title", "description", "tags", "modified", "indexed", "why")
        r = {**r, "notes": [{k: n[k] for k in keep if k in n} for n in r["notes"]]}
        return text_of_list(r), r

    def write(self, op: str, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        params = {k: a[k] for k in ("slug", "content", "frontmatter") if a.get(k) is not None}
        r = self.call(op, params)
        keep = (
            "reference",
            "action",
            "bytes",
            "searchable",
            "searchableBy",
            "warning",
            "redacted",
            "duplicatesChecked",
            "previous",
        )
        out = {k: r[k] for k in keep if k in r}
        out["duplicates"] = [
            {"reference": d["reference"], "similarity": d["similarity"]} for d in r.get("duplicates", [])
        ]
        return text_of_write(out), out

    def delete(self, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        r = self.call("delete", {"slug": a.get("slug")})
        text = (
            f"{r['reference']} deleted (kept in .trash)."
            if r["deleted"]
            else f"{r['reference']}: {r['message']}"
        )
        return text, r

    def status(self, _a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        try:
            health = self.call("health", {})
        except ToolError as exc:
            down = {"daemon": "down", "message": str(exc)}
            return f"sidecar is not available: {exc}", down
        out = status_of(health)
        return f"sidecar: {out['message']}", out

    def outline(self, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        params = {k: a[k] for k in ("pathPrefix", "tokenBudget") if a.get(k) is not None}
        r = self.call("outline", params)
        out = {k: r[k] for k in ("outline", "pages", "folders", "tokens", "detail")}
        return r["outline"], out

    # JSON-RPC

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        with self._write_lock:
            self.out.write(data)
            self.out.flush()

    def handle(self, message: Any) -> None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self.send({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "invalid request"}})
            return
        method, rid = message.get("method"), message.get("id")
        if "id" not in message or method is None:
            return  # a notification (initialized, cancelled) or a response: nothing to answer
        params = message.get("params") or {}
        try:
            result = self.dispatch(str(method), params if isinstance(params, dict) else {})
        except RpcError as exc:
            self.send({"jsonrpc": "2.0", "id": rid, "error": {"code": exc.code, "message": str(exc)}})
            return
        except Exception as exc:  # a bug here must not kill the agent's session
            log.exception("mcp_request_failed method=%s", method)
            self.send(
                {"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": f"internal error: {exc}"}}
            )
            return
        self.send({"jsonrpc": "2.0", "id": rid, "result": result})

    def dispatch(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        static: dict[str, dict[str, Any]] = {
            "ping": {},
            "logging/setLevel": {},
            "tools/list": {"tools": TOOLS},
            "resources/list": {"resources": RESOURCES},
            "resources/templates/list": {"resourceTemplates": RESOURCE_TEMPLATES},
            "prompts/list": {"prompts": PROMPTS},
            "completion/complete": {"completion": {"values": [], "hasMore": False}},
        }
        if method in static:
            return static[method]
        calls: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "initialize": self.initialize,
            "tools/call": self.call_tool,
            "resources/read": lambda p: self.read_resource(str(p.get("uri", ""))),
            "prompts/get": self.get_prompt,
        }
        if method not in calls:
            raise RpcError(-32601, f"method not found: {method}")
        return calls[method](params)

    def initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
            "capabilities": {
                "tools": {"listChanged": False},
                "resources": {"subscribe": False, "listChanged": False},
                "prompts": {"listChanged": False},
            },
            "serverInfo": {"name": "sidecar", "title": "sidecar memory", "version": __version__},
            "instructions": INSTRUCTIONS,
        }

    def call_tool(self, params: dict[str, Any]) -> dict[str, Any]:
        name = params.get("name")
        args = params.get("arguments") or {}
        tool = self._tools.get(str(name))
        if tool is None:
            raise RpcError(-32602, f"unknown tool {name!r}")
        if not isinstance(args, dict):
            raise RpcError(-32602, "'arguments' must be an object")
        try:
            text, structured = tool(args)
        except ToolError as exc:
            return {"content": [{"type": "text", "text": str(exc)}], "isError": True}
        return {
            "content": [{"type": "text", "text": text}],
            "structuredContent": structured,
            "isError": False,
        }

    def read_resource(self, uri: str) -> dict[str, Any]:
        try:
            if uri == OUTLINE_URI:
                text = self.call("outline", {})["outline"]
            elif uri.startswith(NOTE_URI) and len(uri) > len(NOTE_URI):
                text = self.call("get", {"reference": uri[len(NOTE_URI) :]})["text"]
            else:
                raise RpcError(-32602, f"unknown resource {uri!r}; use {NOTE_URI}<reference>")
        except ToolError as exc:
            raise RpcError(-32002, str(exc)) from exc
        return {"contents": [{"uri": uri, "mimeType": "text/markdown", "text": text}]}

    def get_prompt(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("name") != "recall":
            raise RpcError(-32602, f"unknown prompt {params.get('name')!r}")
        topic = str((params.get("arguments") or {}).get("topic", "")).strip() or "this conversation"
        text = (
            f"Before answering, recall what the user's notes and your memory say about {topic}: call "
            "memory_search (and memory_get for the notes that matter), say which notes you used by their "
            "references, and treat them as recollection that may be outdated."
        )
        return {
            "description": "Recall from the user's notes and memory",
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        }

    def serve(self, stdin: BinaryIO) -> None:
        """Read one JSON-RPC message a line until stdin closes; tool calls run on threads."""
        threads: list[threading.Thread] = []
        for line in stdin:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                self.send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}})
                continue
            if isinstance(message, dict) and message.get("method") in ("tools/call", "resources/read"):
                t = threading.Thread(target=self.handle, args=(message,), daemon=True)
                t.start()
                threads = [x for x in threads if x.is_alive()] + [t]
            else:
                self.handle(message)
        for t in threads:
            t.join(timeout=65.0)


class RpcError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def run(socket_path: Path, agent: str) -> None:
    Shim(socket_path, agent, sys.stdout.buffer).serve(sys.stdin.buffer)
