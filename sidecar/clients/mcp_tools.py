"""The MCP tool table: each tool's name, description, input and output schema and hints, and the
instructions an agent gets at the handshake."""

from __future__ import annotations

from typing import Any

from sidecar.clients.mcp_schemas import (
    BOOL,
    CONTENT,
    COUNTS,
    DAY,
    FRONTMATTER,
    HIT,
    INT,
    NOTE,
    NOTE_REF,
    NUM,
    PATH_PREFIX,
    READ,
    SLUG,
    STR,
    WRITE,
    WRITE_OUT,
    obj,
    tool,
)
from sidecar.contracts.protocol import MAX_QUERY_CHARS, MAX_TAG_CHARS
from sidecar.contracts.wire import SOURCES

INSTRUCTIONS = """\
sidecar gives you recall over the user's Obsidian notes and a private memory inbox of your own.
Sources: [wiki] the user's curated pages (most trustworthy), [vault] the user's other notes,
[memory] notes you wrote yourself in earlier sessions. Notes are recollection that can be outdated:
check facts that matter with your tools before acting on them. You can read everything but write
only to your own memory (memory_write / memory_edit / memory_delete); the vault and wiki are read-only.
References look like 'wiki/Backups', 'vault/Projects/Boat' or 'memory/nas-backup-setup' (your own
note). wiki_outline shows the wiki's folders and pages; memory_status says whether search is
complete (index building, keyword-only mode, offline folders)."""

FILTER_HELP = (
    "Filters may also be written inside the query: tag:garden (tag:a,b for any of several), "
    "path:Projects/, source:wiki, since:2026-09-01, until:2026-09 (also since:yesterday, "
    "since:monday, since:3d). Time phrases in English or German ('today', 'yesterday', 'last week', "
    "'last 3 days', 'this month', 'last Tuesday', 'in November', 'on December 3', 'heute', 'gestern', "
    "'letzte Woche', 'seit Montag', 'vor 3 Tagen', 'am 3. Dezember', 'seit Anfang des Monats') "
    "restrict hits to notes of that date (front matter date, daily-note name, else last change): "
    "'what did I do last week?' lists that week's notes, those matching the other words first; "
    "when no note has that date, the phrase is searched as words instead. A since/until (parameter or "
    "inline) wins over a time phrase, which then sets no window. A query of filters alone "
    "('tag:garden path:Projects/') lists the notes they select, newest first (relevance 0). "
    "A filter value that cannot be used is an error naming it."
)
DAY_HELP = (
    "A day: YYYY-MM-DD, YYYY-MM, DD.MM.YYYY, today/heute, yesterday/gestern, tomorrow/morgen, "
    "a weekday name (English or German) or Nd (N days ago)."
)

# A pace of work under way (memory_status): units a second, units left, the seconds that makes
# (null while storing vectors fails), and whether the pace still settles.
PACE = obj(
    {"perSecond": NUM, "left": INT, "secondsLeft": {"type": ["number", "null"]}, "rough": BOOL},
    ("perSecond", "left", "secondsLeft", "rough"),
)

# A line of a note (the daemon takes as many: no note has more).
LINE = {"type": "integer", "minimum": 1, "maximum": 10_000_000}

TOOLS: list[dict[str, Any]] = [
    tool(
        "memory_search",
        "Search notes and memory",
        "Search the user's notes and your own memory by meaning and keywords (hybrid search). Use it "
        "before answering questions about the user's projects, setup, decisions or preferences, and "
        "before writing a memory note (to find one to update instead). Returns the best passages, each "
        "with its source tag, reference, line range and relevance (0-1); pass a reference to memory_get "
        "for the whole note. Passages are listed best first by their ranking score: relevance (how "
        "well the passage matches, without boosts; comparable across queries, minScore filters on it) "
        "with boosts (a rare word of the query, the note's name, its source, more passages of its "
        "note matching). So a passage may come before one of higher relevance; it then says why "
        "(rankedUp). " + FILTER_HELP,
        obj(
            {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUERY_CHARS,
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
                "source": {"type": "string", "enum": list(SOURCES), "description": "Only this source."},
                "tag": {"type": "string", "description": "Only notes with this tag ('a,b': any of them)."},
                "pathPrefix": PATH_PREFIX,
                "since": {**DAY, "description": "Only notes of this day or later. " + DAY_HELP},
                "until": {**DAY, "description": "Only notes of this day or earlier. " + DAY_HELP},
            },
            ("query",),
        ),
        obj(
            {
                "query": STR,
                "hits": {"type": "array", "items": HIT},
                "degraded": STR,
                "pendingVectors": {"type": "integer"},
                "leftToSwitch": {"type": "integer"},
                "indexing": obj({"done": INT, "total": INT}),
                "staleSince": {"type": "number"},
                "catchingUp": obj({"done": INT, "total": INT, "recut": INT}, ("done", "total")),
                "inboxRefused": STR,
                "masked": COUNTS,
                "listed": INT,
                "window": obj(
                    {"phrase": STR, "since": STR, "until": STR, "applied": BOOL, "listed": INT},
                    ("phrase", "applied"),
                ),
            },
            ("query", "hits"),
        ),
        READ,
    ),
    tool(
        "memory_get",
        "Read a note",
        "Read one whole note by its reference, exactly as memory_search or memory_list return it "
        "(e.g. 'wiki/Backups', 'vault/Projects/Boat', 'memory/nas-backup-setup'), or only lines "
        "startLine to endLine of it (a search hit names its lines). A link as a note writes it "
        "('[[Boat#Budget]]') or a note's name ('Boat') reads the note that link opens in Obsidian, "
        "only the section (or block) its anchor names. A note longer than about 50,000 "
        "characters comes in parts: the answer says which lines it holds and where to read on. "
        "Secrets in the text are shown as [REDACTED:kind].",
        obj(
            {
                "reference": NOTE_REF,
                "startLine": {**LINE, "description": "First line to read (1-based)."},
                "endLine": {**LINE, "description": "Last line to read (inclusive)."},
            },
            ("reference",),
        ),
        obj(
            {
                "reference": STR,
                "source": {"type": "string", "enum": list(SOURCES)},
                "title": STR,
                "text": STR,
                "lines": INT,
                "range": {"type": "array", "items": INT, "description": "the lines of the note in text"},
                "cut": {"type": "boolean", "description": "the one line in text is longer than shown"},
                "indexed": BOOL,
                "masked": COUNTS,
                "anchor": obj(
                    {"text": STR, "found": {"type": "boolean", "description": "false: the whole note"}},
                    ("text", "found"),
                ),
                "candidates": {"type": "integer", "description": "notes a bare name could mean"},
            },
            ("reference", "source", "title", "text", "lines", "indexed"),
        ),
        READ,
    ),
    tool(
        "memory_related",
        "Notes related to a note",
        "Notes related to one note through the user's link graph: the notes it links to and those "
        "linking to it first, then notes sharing its links or tags. Use it to explore around a note "
        "found with memory_search.",
        obj(
            {
                "reference": NOTE_REF,
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 50,
                    "description": "Notes (default 10).",
                },
            },
            ("reference",),
        ),
        obj(
            {
                "reference": STR,
                "related": {
                    "type": "array",
                    "items": obj(
                        {"reference": STR, "source": STR, "title": STR, "relation": STR},
                        ("reference", "relation"),
                    ),
                },
                "indexing": obj({"done": INT, "total": INT}, ("done", "total")),
            },
            ("reference", "related"),
        ),
        READ,
    ),
    tool(
        "memory_list",
        "List notes",
        "List notes with their one-line description: by default your own memory notes; with source "
        "'wiki', 'vault' or 'all' the user's notes too. Filter by tag (front matter or #tag) and by path "
        "prefix (e.g. 'Projects/'). Notes that exist but are not searchable are marked with the reason.",
        obj(
            {
                "source": {"type": "string", "enum": [*SOURCES, "all"], "default": "memory"},
                "tag": {
                    "type": "string",
                    "maxLength": MAX_TAG_CHARS,
                    "description": "Only notes with this tag.",
                },
                "pathPrefix": PATH_PREFIX,
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 200},
            }
        ),
        obj(
            {"notes": {"type": "array", "items": NOTE}, "total": INT, "truncated": BOOL, "inboxRefused": STR},
            ("notes", "total", "truncated"),
        ),
        READ,
    ),
    tool(
        "memory_write",
        "Write a memory note",
        "Create or replace a note in your own memory inbox (never the user's vault or wiki). Write "
        "durable facts worth recalling in later sessions: decisions, how something was set up, "
        "preferences. Search first: if a similar note exists, use memory_edit on it (the reply lists "
        "near copies). Secrets are redacted before writing; a replaced text is kept in the inbox's "
        ".trash folder.",
        obj({"slug": SLUG, "content": CONTENT, "frontmatter": FRONTMATTER}, ("slug", "content")),
        WRITE_OUT,
        WRITE,
    ),
    tool(
        "memory_edit",
        "Update a memory note",
        "Update an existing note of your memory (fails if it does not exist). The content replaces the "
        "body; front matter keys you pass are updated, the others are kept. The previous text is kept "
        "in the inbox's .trash folder.",
        obj({"slug": SLUG, "content": CONTENT, "frontmatter": FRONTMATTER}, ("slug", "content")),
        WRITE_OUT,
        WRITE,
    ),
    tool(
        "memory_delete",
        "Delete a memory note",
        "Delete a note of your memory that is wrong or obsolete. It is moved to the inbox's .trash "
        "folder (the user can restore it; when .trash passes its limits the oldest kept texts go, "
        "and the reply names them) and leaves search at once. Deleting a missing note is not an "
        "error.",
        obj({"slug": SLUG}, ("slug",)),
        obj(
            {
                "reference": STR,
                "deleted": BOOL,
                "trash": STR,
                "message": STR,
                "trashDropped": {"type": "array", "items": STR},
            },
            ("reference", "deleted"),
        ),
        WRITE,
    ),
    tool(
        "memory_status",
        "Memory status",
        "Whether recall is complete right now: the embedding model's state, the index (building or "
        "ready, with progress), chunks still waiting for their vector, how long these take (pace: rate, "
        "seconds left, rough while the pace settles), folders that are offline and why, "
        "whether search runs on keywords only, and how full your memory inbox is (maxBytes 0: no limit). "
        "Call it when results look thin or a note is missing.",
        obj({}),
        obj(
            {
                "daemon": {"type": "string", "enum": ["running", "down", "not answering"]},
                "message": STR,
                # Only while the index cannot be read: why, and what to do (no index, no embedder).
                "refusing": STR,
                "embedder": obj(
                    {
                        "state": STR,
                        "model": {"type": ["string", "null"]},
                        "error": STR,
                        "fallback": obj({"configured": STR, "error": STR}),
                    }
                ),
                "index": obj(
                    {
                        "state": {"type": "string", "enum": ["building", "ready"]},
                        "phase": STR,
                        "done": INT,
                        "total": INT,
                        "files": INT,
                        "chunks": INT,
                        "pendingVectors": INT,
                        "leftToSwitch": INT,
                    }
                ),
                "keywordOnly": BOOL,
                "offlineRoots": {
                    "type": "array",
                    "items": obj({"name": STR, "path": STR, "why": STR, "mode": STR}, ("name", "why")),
                },
                "problems": {"type": "array", "items": obj({"area": STR, "error": STR})},
                "inbox": obj(
                    {
                        "notes": INT,
                        "bytes": INT,
                        "maxBytes": INT,
                        "trashBytes": INT,
                        "copies": INT,  # copies of the person's text beside the notes, not merged
                        "countedAt": NUM,  # only on an earlier count, with why (``stale``)
                        "stale": STR,
                    }
                ),
                # Only the work under way that has a pace: the sweep's notes, the vectors waiting,
                # a model switch's vectors.
                "pace": obj(dict.fromkeys(("notes", "vectors", "switch"), PACE)),
            },
            ("daemon", "message"),
        ),
        READ,
    ),
    tool(
        "wiki_outline",
        "Wiki outline",
        "The wiki's topology: folders, pages and one-line descriptions, within a token budget. The text "
        "stays the same between calls while the wiki does, so it can sit in a system prompt. Read a page "
        "with memory_get('wiki/<path>').",
        obj(
            {
                "pathPrefix": {**PATH_PREFIX, "description": "Only this folder (e.g. 'Projects')."},
                "tokenBudget": {"type": "integer", "minimum": 100, "maximum": 50000, "default": 1000},
            }
        ),
        obj(
            {
                "outline": STR,
                "pages": INT,
                "folders": INT,
                "tokens": INT,
                "detail": {"type": "string", "enum": ["full", "titles", "folders", "truncated"]},
            },
            ("outline", "pages", "folders", "tokens", "detail"),
        ),
        READ,
    ),
]
