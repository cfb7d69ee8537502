"""`sidecar mcp --agent NAME`: an MCP stdio server whose six tools each forward one protocol op.

A thin client: it imports the MCP SDK, the socket client and the config, never a model or an
index; stdout belongs to the MCP protocol (logs go to stderr). Every tool call opens a fresh
connection, so the shim keeps working across daemon restarts; when the daemon is down the tools
answer with an error that says how to start it.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from sidecar import __version__
from sidecar.client import Client
from sidecar.errors import DaemonNotRunningError, ProtocolError, RemoteError

log = logging.getLogger(__name__)

Source = Literal["vault", "wiki", "memory"]

INSTRUCTIONS = """\
sidecar gives you recall over the user's Obsidian notes and a private memory inbox of your own.
Sources: [wiki] the user's curated pages (most trustworthy), [vault] the user's other notes,
[memory] notes you wrote yourself in earlier sessions. Notes are recollection that can be outdated:
check facts that matter with your tools before acting on them. You can read everything but write
only to your own memory (memory_write / memory_edit / memory_delete); the vault and wiki are read-only.
References look like 'wiki/Backups', 'vault/Projects/Boat' or 'memory/nas-backup-setup'."""

LEGEND = "[wiki] curated pages · [vault] the user's notes · [memory] your own earlier notes"


def _text_of_search(query: str, result: dict[str, Any]) -> str:
    hits = result.get("hits", [])
    lines = [f'{len(hits)} hit(s) for "{query}"  ({LEGEND})']
    if result.get("degraded"):
        lines.append(f"note: {result['degraded']}")
    for i, h in enumerate(hits, 1):
        where = f"lines {h['lines'][0]}-{h['lines'][1]}"
        head = " › ".join(h.get("headings") or [])
        lines.append(
            f"\n{i}. [{h['source']}] {h['reference']} ({where}, score {h['score']:.2f})"
            + (f"\n   section: {head}" if head else "")
        )
        lines.extend("   " + line for line in h["text"].splitlines())
    if not hits:
        lines.append("Nothing matched; try other words, or memory_list to browse.")
    return "\n".join(lines)


def _text_of_write(op: str, result: dict[str, Any]) -> str:
    verb = "created" if result.get("created") else ("updated" if op != "write" else "replaced")
    lines = [f"{result['reference']} {verb} ({result['bytes']} bytes); it is searchable now."]
    if result.get("redacted"):
        kinds = ", ".join(f"{n}× {k}" for k, n in result["redacted"].items())
        lines.append(f"Secrets were replaced by [REDACTED:kind] markers before writing: {kinds}.")
    for d in result.get("duplicates", []):
        lines.append(
            f"Similar existing note: {d['reference']} ({d['similarity']:.0%}); consider memory_edit on it "
            "instead of keeping two."
        )
    return "\n".join(lines)


# Annotations are evaluated by the SDK in this module's globals, so shared fields live here.
SLUG_FIELD = Field(
    description="File name of the note in your memory: lowercase a-z, 0-9, '-' and '_' "
    "(e.g. 'nas-backup-setup')."
)
CONTENT_FIELD = Field(description="The whole note in Markdown (it replaces the previous text).")
FM_FIELD = Field(
    description='Optional front matter keys, e.g. {"tags": ["nas"], "description": "..."}; '
    "'created' and 'updated' are managed for you."
)


def build_server(socket_path: Path, agent: str) -> MCPServer:
    """The MCP server for one agent; tools call the daemon at ``socket_path``."""
    server: MCPServer = MCPServer(
        name="sidecar", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    def call(op: str, params: dict[str, Any]) -> dict[str, Any]:
        try:
            with Client(socket_path, agent=agent, timeout=60.0) as client:
                return client.call(op, params)
        except DaemonNotRunningError as exc:
            raise ToolError(f"sidecar daemon unavailable: {exc}") from exc
        except RemoteError as exc:
            raise ToolError(f"{exc.code}: {exc}") from exc
        except ProtocolError as exc:
            raise ToolError(f"talking to the sidecar daemon failed: {exc}") from exc

    def write(op: str, slug: str, content: str, frontmatter: dict[str, Any] | None) -> str:
        params: dict[str, Any] = {"slug": slug, "content": content}
        if frontmatter is not None:
            params["frontmatter"] = frontmatter
        return _text_of_write(op, call(op, params))

    @server.tool(
        structured_output=False,
        description=(
            "Search the user's notes and your own memory by meaning and keywords (hybrid search). Use it "
            "before answering questions about the user's projects, setup, decisions or preferences, and "
            "before writing a memory note (to find one to update instead). Returns the best passages, each "
            "with its source tag, reference and line range; pass a reference to memory_get for the "
            "whole note."
        ),
    )
    def memory_search(
        query: Annotated[str, Field(description="What you are looking for, in plain words (any language).")],
        limit: Annotated[int, Field(ge=1, le=50, description="Number of passages (default 8).")] = 8,
        minScore: Annotated[  # noqa: N803 - the protocol's camelCase name
            float, Field(ge=0.0, le=10.0, description="Drop passages scoring below this (default 0).")
        ] = 0.0,
        source: Annotated[Source | None, Field(description="Only 'vault', 'wiki' or 'memory'.")] = None,
    ) -> str:
        params: dict[str, Any] = {"query": query, "limit": limit, "minScore": minScore}
        if source is not None:
            params["source"] = source
        return _text_of_search(query, call("search", params))

    @server.tool(
        structured_output=False,
        description=(
            "Read one whole note by its reference, exactly as memory_search or memory_list return it "
            "(e.g. 'wiki/Backups', 'vault/Projects/Boat', 'memory/nas-backup-setup')."
        ),
    )
    def memory_get(
        reference: Annotated[str, Field(description="A reference from memory_search or memory_list.")],
    ) -> str:
        r = call("get", {"reference": reference})
        links = sorted({link["target"] for link in r.get("links", []) if link["target"]})
        back = sorted({b["reference"] for b in r.get("backlinks", [])})
        tail = ""
        if links or back:
            tail = (
                "\n\n---\nLinks to: "
                + (", ".join(links) or "none")
                + "\nLinked from: "
                + (", ".join(back) or "none")
            )
        return f"[{r['source']}] {r['reference']} ({r['lines']} lines)\n\n{r['text']}{tail}"

    @server.tool(
        structured_output=False,
        description=(
            "Notes related to one note through the user's link graph: the notes it links to and those "
            "linking to it first, then notes sharing its links or tags. Use it to explore around a note "
            "found with memory_search."
        ),
    )
    def memory_related(
        reference: Annotated[str, Field(description="A reference from memory_search or memory_list.")],
        limit: Annotated[int, Field(ge=1, le=50, description="Number of notes (default 10).")] = 10,
    ) -> str:
        r = call("related", {"reference": reference, "limit": limit})
        if not r["related"]:
            return f"No notes are linked with {r['reference']} or share its links or tags."
        lines = [f"Related to {r['reference']}:"]
        for item in r["related"]:
            shared = "; ".join(f"{k}: {', '.join(v)}" for k, v in item.get("shared", {}).items())
            lines.append(
                f"- [{item['source']}] {item['reference']}: {item['title']} ({item['relation']}"
                f"{'; ' + shared if shared else ''})"
            )
        return "\n".join(lines)

    @server.tool(
        structured_output=False,
        description=(
            "List notes: by default your own memory notes; with source 'wiki' or 'vault' the user's notes. "
            "Filter by tag (front matter or #tag) and by path prefix (e.g. 'Projects/')."
        ),
    )
    def memory_list(
        tag: Annotated[str | None, Field(description="Only notes with this tag.")] = None,
        source: Annotated[Source | None, Field(description="'memory' (default), 'wiki' or 'vault'.")] = None,
        pathPrefix: Annotated[  # noqa: N803 - the protocol's camelCase name
            str | None, Field(description="Only notes whose path starts with this.")
        ] = None,
    ) -> str:
        params = {k: v for k, v in (("tag", tag), ("source", source), ("pathPrefix", pathPrefix)) if v}
        r = call("list", params)
        if not r["notes"]:
            return "No notes match."
        lines = [
            f"{r['total']} note(s){' (first ' + str(len(r['notes'])) + ' shown)' if r['truncated'] else ''}:"
        ]
        for n in r["notes"]:
            tags = f"  #{' #'.join(n['tags'])}" if n["tags"] else ""
            lines.append(f"- [{n['source']}] {n['reference']}: {n['title']} (modified {n['modified']}){tags}")
        return "\n".join(lines)

    @server.tool(
        structured_output=False,
        description=(
            "Create or replace a note in your own memory inbox (never the user's vault or wiki). "
            "Write durable "
            "facts worth recalling in later sessions: decisions, how something was set up, preferences. "
            "Search first: if a similar note exists, use memory_edit on it. Secrets are redacted "
            "automatically."
        ),
    )
    def memory_write(
        slug: Annotated[str, SLUG_FIELD],
        content: Annotated[str, CONTENT_FIELD],
        frontmatter: Annotated[dict[str, Any] | None, FM_FIELD] = None,
    ) -> str:
        return write("write", slug, content, frontmatter)

    @server.tool(
        structured_output=False,
        description=(
            "Update an existing note of your memory (fails if it does not exist). The content replaces the "
            "body; front matter keys you pass are updated, the others are kept."
        ),
    )
    def memory_edit(
        slug: Annotated[str, SLUG_FIELD],
        content: Annotated[str, CONTENT_FIELD],
        frontmatter: Annotated[dict[str, Any] | None, FM_FIELD] = None,
    ) -> str:
        return write("edit", slug, content, frontmatter)

    @server.tool(
        structured_output=False,
        description=(
            "Delete a note of your memory that is wrong or obsolete. It is moved to the inbox's "
            ".trash folder "
            "(the user can restore it) and leaves search at once. Deleting a missing note is not an error."
        ),
    )
    def memory_delete(slug: Annotated[str, SLUG_FIELD]) -> str:
        r = call("delete", {"slug": slug})
        return (
            f"{r['reference']} deleted (kept in .trash)."
            if r["deleted"]
            else f"{r['reference']}: {r['message']}"
        )

    return server


def run(socket_path: Path, agent: str) -> None:
    logging.getLogger("mcp").setLevel(logging.WARNING)
    build_server(socket_path, agent).run("stdio")
