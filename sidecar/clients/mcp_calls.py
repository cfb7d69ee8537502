"""The MCP tools' work: each tool forwards one protocol op over a fresh connection (the shim keeps
working across daemon restarts) and answers with a text for the model and structured content."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sidecar.clients.client import Client, local_today
from sidecar.clients.mcp_texts import (
    building_note,
    masked_note,
    status_of,
    text_of_list,
    text_of_search,
    text_of_write,
    trash_dropped_note,
)
from sidecar.contracts.errors import DaemonNotRunningError, NoAnswerError, ProtocolError, RemoteError
from sidecar.contracts.notices import anchor_missing, links_state_note, ranked_up, resolved_notes
from sidecar.contracts.printable import escape_controls as shown
from sidecar.contracts.wire_json import hit_json, parse_search, state_json, window_json

log = logging.getLogger(__name__)

# What a search hit shows an agent (the scores behind relevance are for tuning, not for it).
# A note's day (date, datedBy, modifiedAhead) when a date window judged it: which day of a period
# it belongs to; deletionHeld when its file is gone while its deletion is held.
HIT_KEYS = (
    "reference",
    "source",
    "title",
    "headings",
    "lines",
    "text",
    "relevance",
    "score",
    "masked",
    "date",
    "datedBy",
    "modifiedAhead",
    "deletionHeld",
    "widerLook",
)

Tool = Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]


# The most of one note memory_get returns unasked (about 12,000 tokens); a range reads the rest.
GET_CHARS = 50_000

# How long a tool waits for the daemon's answer. memory_status waits less, as `sidecar status`
# does: health is counted from memory (no search, no file read), so an answer that takes longer
# means a stopped (SIGSTOP), hung or swamped daemon, and the agent asking "why are results thin?"
# learns that in seconds, not after the minute a search may take under load.
CALL_TIMEOUT = 60.0
STATUS_TIMEOUT = 10.0


class ToolError(Exception):
    """A tool call that failed in a way the model should read (sent as isError content);
    ``daemon`` says how the daemon was when it failed ("down", "not answering"), if that was why."""

    def __init__(
        self, message: str, daemon: str | None = None, structured: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.daemon = daemon
        self.structured = structured  # structured content sent with the error, when the tool has some


# Ops that change a memory: when the daemon was reached but no answer came back, the change may
# have been made all the same.
CHANGES = frozenset({"write", "edit", "delete"})


class ToolCalls:
    """One agent's tools, by name."""

    def __init__(
        self,
        socket_path: Path,
        agent: str,
        config_file: Path | None = None,
        serve_flags: Sequence[str] = (),
        resolve: Callable[[], Path | None] | None = None,
    ) -> None:
        self.socket_path = socket_path
        # Where the daemon's socket is now (the configuration file read again): asked when no
        # daemon listens on ``socket_path``. A shim started while an editor had emptied the file
        # took the default socket and kept it for its life, the daemon running all the while.
        self.resolve = resolve
        self.agent = agent
        # What the shim was started with: the daemon-down hint names them (a daemon started
        # without them, as the hint said, listened on another home's socket).
        self.config_file = config_file
        self.serve_flags = tuple(serve_flags)
        self.tools: dict[str, Tool] = {
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

    def call(self, op: str, params: dict[str, Any], timeout: float = CALL_TIMEOUT) -> dict[str, Any]:
        sent = [False]
        try:
            try:
                return self._ask(op, params, timeout, sent)
            except DaemonNotRunningError:
                moved = self.resolve() if self.resolve is not None and not sent[0] else None
                if moved is None or moved == self.socket_path:
                    raise
                log.warning("mcp_socket_changed from=%s to=%s", self.socket_path, moved)
                self.socket_path = moved
                return self._ask(op, params, timeout, sent)
        except DaemonNotRunningError as exc:
            raise ToolError(f"sidecar daemon unavailable: {exc}{_unsure(op, sent[0])}", "down") from exc
        except RemoteError as exc:
            # The daemon names the agent's own notes as the CLI does (memory/<agent>/<slug>); the
            # agent's answers and input say memory/<slug>. Only where a reference starts (a vault
            # path holding ".../memory/<agent>/..." stays as it is) and before a slug: a reference
            # the agent sent ("memory/<agent>/../x") is shown as sent.
            own = re.compile(rf"(?<![\w/.-])memory/{re.escape(self.agent)}/(?=[a-z0-9][a-z0-9_-]*(?![\w/-]))")
            raise ToolError(f"{exc.code}: {own.sub('memory/', str(exc))}") from exc
        except (ProtocolError, NoAnswerError) as exc:
            raise ToolError(
                f"talking to the sidecar daemon failed: {exc}{_unsure(op, sent[0])}", "not answering"
            ) from exc

    def _ask(self, op: str, params: dict[str, Any], timeout: float, sent: list[bool]) -> dict[str, Any]:
        """One request; ``sent[0]`` is set once the daemon was reached (it may act on it)."""
        with Client(
            self.socket_path,
            agent=self.agent,
            timeout=timeout,
            config_file=self.config_file,
            serve_flags=self.serve_flags,
        ) as client:
            client.connect()
            sent[0] = True
            return client.call(op, params)

    def search(self, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        query = a.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("'query' is required" if query is None else "'query' must be a non-empty string")
        limit = a.get("limit")
        params: dict[str, Any] = {"query": query, "limit": 8 if limit is None else limit}  # null: the default
        for k in ("minScore", "source", "tag", "pathPrefix", "since", "until"):
            if a.get(k) is not None:
                params[k] = a[k]
        params["today"] = local_today()  # the agent's "today", not the daemon's
        raw = self.call("search", params)
        result = parse_search(raw)
        hits = [{k: j[k] for k in HIT_KEYS if k in j} for j in map(hit_json, result.hits)]
        for hit, why in zip(hits, ranked_up(result.hits), strict=True):
            if why is not None:  # listed above a hit of higher relevance: said why
                hit["rankedUp"] = why
        masked: dict[str, int] = {}
        for h in result.hits:
            for kind, n in h.masked.items():
                masked[kind] = masked.get(kind, 0) + n
        out: dict[str, Any] = {"query": query, "hits": hits, **state_json(result)}
        if result.window:
            out["window"] = window_json(result.window)
        if result.listed is not None:
            out["listed"] = result.listed
        if masked:
            out["masked"] = masked
        if raw.get("inboxRefused"):
            out["inboxRefused"] = raw["inboxRefused"]
        if raw.get("todayIgnored"):
            out["todayIgnored"] = raw["todayIgnored"]
        if raw.get("filterNoValue"):
            out["filterNoValue"] = raw["filterNoValue"]
        return text_of_search(query, out), out

    def get(self, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        params = {k: a[k] for k in ("reference", "startLine", "endLine") if a.get(k) is not None}
        params.setdefault("reference", a.get("reference"))
        # Megabytes of one note would fill the agent's context: whole lines up to this, and
        # where to read on (search hits name the lines to ask for).
        r = self.call("get", {**params, "maxChars": GET_CHARS})
        where = f"{r['lines']} lines"
        if "range" in r:
            first, last = r["range"]
            where = f"lines {first}-{last} of {r['lines']}"
            if r.get("cut"):
                where += f"; line {first} is longer than {GET_CHARS:,} characters: only its start is shown"
            if last < r["lines"]:
                where += f"; memory_get with startLine {last + 1} reads on"
        text = f"[{r['source']}] {shown(r['reference'])} ({where})\n\n{r['text']}"
        for note in resolved_notes(str(params["reference"]), r):
            text = f"note: {note}\n{text}"
        links = sorted({shown(link["target"]) for link in r.get("links", []) if link["target"]})
        back = sorted({shown(b["reference"]) for b in r.get("backlinks", [])})
        if links or back:
            text += (
                f"\n\n---\nLinks to: {', '.join(links) or 'none'}\nLinked from: {', '.join(back) or 'none'}"
            )
        missing = [
            f"{shown(link['link'])} (line {link['line']}: {why})"
            for link in r.get("links", [])
            if (why := anchor_missing(link))
        ]
        if missing:  # the note is there, the part the link names is not: it opens at the top
            text += f"\nLinks to a heading or block that is not there: {', '.join(missing)}"
        if (state := links_state_note(r)) is not None:
            pending = sorted({shown(link["link"]) for link in r.get("links", []) if link.get("resolving")})
            text += f"\nnote: {state}" + (f" ({', '.join(pending)})" if pending else "")
        if r.get("masked"):
            text += "\n\n" + masked_note(r["masked"])
        return text, r

    def related(self, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        params = {k: a[k] for k in ("reference", "limit") if a.get(k) is not None}
        r = self.call("related", params)
        building = r.get("indexing")
        note = "\n" + building_note(building) if building else ""
        if not r["related"]:
            return f"No notes are linked with {shown(r['reference'])} or share its links or tags.{note}", r
        lines = [f"Related to {shown(r['reference'])}:"]
        for item in r["related"]:
            shared = "; ".join(f"{k}: {', '.join(v)}" for k, v in item.get("shared", {}).items())
            line = (
                f"[{item['source']}] {item['reference']}: {item.get('title', '')} ({item['relation']}"
                f"{'; ' + shared if shared else ''})"
            )
            lines.append(f"- {shown(line)}")
        return "\n".join(lines) + note, r

    def list(self, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        params = {k: a[k] for k in ("source", "tag", "pathPrefix", "limit") if a.get(k) is not None}
        r = self.call("list", params)
        keep = (
            "reference",
            "source",
            "title",
            "description",
            "tags",
            "modified",
            "modifiedAhead",
            "indexed",
            "why",
        )
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
            "trashDropped",
        )
        out = {k: r[k] for k in keep if k in r}
        out["duplicates"] = [
            {"reference": d["reference"], "similarity": d["similarity"]} for d in r.get("duplicates", [])
        ]
        return text_of_write(out), out

    def delete(self, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        r = self.call("delete", {"slug": a.get("slug")})
        text = shown(
            f"{r['reference']} deleted (kept in .trash)."
            if r["deleted"] and r.get("trash")
            else f"{r['reference']}: {r['message']}"
        )
        if r.get("trashDropped"):
            text += " " + trash_dropped_note(r["trashDropped"])
        return text, r

    def status(self, _a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        try:
            health = self.call("health", {}, timeout=STATUS_TIMEOUT)
        except ToolError as exc:
            # An error, as every other tool's when the daemon is down (a host showing only the
            # error flag took "sidecar is not available" for a success); the structured content
            # still says how the daemon is, as the output schema promises.
            text = str(exc)
            if exc.daemon == "not answering":
                text += (
                    ": it may be stopped, hung or overloaded; ask the user to check `sidecar status` "
                    "and restart it (`systemctl --user restart sidecar`; one run in a terminal: Ctrl-C "
                    "there, then `sidecar serve` again)"
                )
            raise ToolError(text, exc.daemon, {"daemon": exc.daemon or "down", "message": text}) from exc
        if health.get("refusing"):  # the index cannot be read: its record has no embedder
            out = status_of(health, self.agent)
            return f"sidecar: {out['message']}", out
        if not isinstance(health.get("index"), dict) or not isinstance(health.get("embedder"), dict):
            raise TypeError("the health answer has no index and embedder")  # not the daemon's answer
        out = status_of(health, self.agent)
        return f"sidecar: {out['message']}", out

    def outline(self, a: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        params = {k: a[k] for k in ("pathPrefix", "tokenBudget") if a.get(k) is not None}
        r = self.call("outline", params)
        out = {k: r[k] for k in ("outline", "pages", "folders", "tokens", "detail")}
        return r["outline"], out

    # JSON-RPC


def _unsure(op: str, sent: bool) -> str:
    """What to add when a change was sent and no answer came back."""
    if not sent or op not in CHANGES:
        return ""
    return ". The change may still have been made: check with memory_get before trying again"
