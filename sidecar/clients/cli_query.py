"""The query commands: search, recall (and preview), why, get, related, outline. Each sends one
op and prints its reply; ``--json`` prints the reply as the daemon sent it."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from sidecar.clients.cli_hits import render_links, snippet
from sidecar.clients.cli_parser import QUERY_TIMEOUT_S, UsageError, serve_flags
from sidecar.clients.cli_preview import preview_lines, recall_pending_note
from sidecar.clients.client import Client, local_today
from sidecar.config import Config
from sidecar.contracts.errors import ExitCode, NotFoundError
from sidecar.contracts.notices import (
    DELETION_HELD_MARK,
    WIDER_LOOK_MARK,
    catching_up_note,
    dates_said,
    ignored_phrase_note,
    indexing_note,
    offline_note,
    pending_note,
    ranked_up,
    refused_note,
    resolved_notes,
    stale_note,
    switch_note,
    waiting_vectors,
    window_said,
)
from sidecar.contracts.printable import escape_controls as shown
from sidecar.contracts.printable import escape_terminal
from sidecar.contracts.wire import Window
from sidecar.contracts.wire_json import parse_explanation, parse_search


def cmd_search(args: argparse.Namespace, cfg: Config) -> int:
    source = (args.source if len(args.source) > 1 else args.source[0]) if args.source else None
    params = _given(
        query=args.query,
        limit=args.limit,
        source=source,
        minScore=args.min_score,
        since=args.since,
        until=args.until,
        today=local_today(),
    )
    reply = _call(args, cfg, "search", params)
    if reply is None:
        return int(ExitCode.OK)
    result = parse_search(reply)
    if result.degraded:
        print(f"note: {result.degraded}", file=sys.stderr)
    if waiting := waiting_vectors(result):
        print(f"note: {pending_note(waiting)}", file=sys.stderr)
    if result.left_to_switch:
        print(f"note: {switch_note(result.left_to_switch)}", file=sys.stderr)
    if result.indexing is not None:
        print(f"note: {indexing_note(*result.indexing)}", file=sys.stderr)
    if result.stale_since is not None:
        print(f"note: {stale_note(result.stale_since)}", file=sys.stderr)
    if result.catching_up is not None:
        print(f"note: {catching_up_note(*result.catching_up)}", file=sys.stderr)
    _reply_notes(reply)
    if result.listed:  # none listed: said in place of "nothing relevant found" below
        print(
            f"note: the query holds filters alone: {result.listed} hit(s) (relevance 0) are the notes "
            "they select, newest first, not ranked by any word",
            file=sys.stderr,
        )
    if result.window is not None:
        _window_note(result.window, args)
    if not result.hits and result.listed is not None:
        # Filters alone: "nothing relevant" read as "no relevant note" where no note has the tag.
        print("no note matches these filters")
    elif not result.hits:
        print("nothing relevant found")
    lifted = ranked_up(result.hits)
    for i, hit in enumerate(result.hits, 1):
        where = f"lines {hit.lines[0]}-{hit.lines[1]}" + (f", dated {hit.date}" if hit.date else "")
        if lifted[i - 1] is not None:
            where += f"; {lifted[i - 1]}"
        if hit.look and (i == 1 or result.hits[i - 2].look != hit.look):
            # Where the pool's own hits end: the scores after it are of another ranking.
            where += f"; {WIDER_LOOK_MARK.format(pool=hit.look)}"
        if hit.modified_ahead:
            where += (
                f" by its last change seen here (its file's date {hit.modified_ahead} lies in the future)"
            )
        scores = f"relevance {hit.relevance:.2f}, score {hit.score:.3f}"
        held = f"; {DELETION_HELD_MARK}" if hit.deletion_held else ""
        print(f"{i:>2}. {shown(hit.reference)}  ({scores}, {where}{held})")
        print(f"    {shown(snippet(hit.text, args.query))}")
    return int(ExitCode.OK)


def _reply_notes(reply: dict[str, Any]) -> None:
    """The search reply's own notes (offline parts, refused inboxes, an ignored date, a filter key
    without a value), on stderr."""
    if reply.get("offline"):
        print(f"note: {offline_note(reply['offline'])}", file=sys.stderr)
    if reply.get("inboxRefused"):
        print(f"note: {shown(refused_note(reply['inboxRefused']))}", file=sys.stderr)
    for key in ("todayIgnored", "filterNoValue"):
        if reply.get(key):
            print(f"note: {shown(reply[key])}", file=sys.stderr)


def _window_note(window: Window, args: argparse.Namespace) -> None:
    """What the search's time phrase became, on stderr: the period listed, the dates given that
    won over it, or why it was not applied."""
    if window.listed:
        said = shown(window_said(window, _given_as(args)))
        print(
            f"note: '{shown(window.phrase)}': {window.listed} hit(s) (relevance 0) are {said}, "
            "listed by date, not ranked by the query's words",
            file=sys.stderr,
        )
    elif window.applied and window.given:
        print(f"note: {shown(window_said(window, _given_as(args)))}", file=sys.stderr)
    elif not window.applied:
        # The hits come from any time: without this line they read as the period's notes.
        note = ignored_phrase_note(window.phrase, window.why, window.since, window.until)
        print(f"note: {shown(note)}", file=sys.stderr)


def _given_as(args: argparse.Namespace) -> str:
    """How the dates that won over a time phrase were given: the options named, else inline."""
    named = [f"--{o}" for o in ("since", "until") if getattr(args, o, None)]
    return " and ".join(named) if named else "since:/until: in the query"


def cmd_recall(args: argparse.Namespace, cfg: Config) -> int:
    history: list[str] = []
    if args.history:
        try:
            source = (
                sys.stdin.read() if args.history == "-" else Path(args.history).read_text(encoding="utf-8")
            )
        except OSError as exc:
            raise UsageError(f"--history {args.history}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise UsageError(f"--history {args.history}: not UTF-8 text") from None
        raw = source.strip()
        try:
            loaded = json.loads(raw) if raw.startswith("[") else raw.splitlines()
        except json.JSONDecodeError as exc:
            raise UsageError(f"--history {args.history} is not a JSON list: {exc}") from None
        history = [str(t) for t in loaded]
    params = _given(
        message=args.message,
        history=history,
        preview=bool(args.preview),
        limit=args.limit or None,
        tokenBudget=args.token_budget or None,
        today=local_today(),
    )
    reply = _call(args, cfg, "recall", params)
    if reply is None:
        return int(ExitCode.OK)
    result = parse_search(reply)
    if result.indexing is not None:
        print(f"note: {indexing_note(*result.indexing)}", file=sys.stderr)
    if (waiting := waiting_vectors(result)) and not args.preview:  # the preview says it among its lines
        print(f"note: {recall_pending_note(waiting)}", file=sys.stderr)
    if result.left_to_switch and not args.preview:
        print(f"note: {switch_note(result.left_to_switch)}", file=sys.stderr)
    if result.stale_since is not None:
        print(f"note: {stale_note(result.stale_since)}", file=sys.stderr)
    if result.catching_up is not None:
        print(f"note: {catching_up_note(*result.catching_up)}", file=sys.stderr)
    if reply.get("offline"):
        print(f"note: {offline_note(reply['offline'])}", file=sys.stderr)
    if reply.get("todayIgnored"):
        print(f"note: {shown(reply['todayIgnored'])}", file=sys.stderr)
    if args.preview:
        print("\n".join(preview_lines(result)))
    if result.context:
        print(_for_terminal(result.context))
    elif not args.preview:
        print("(nothing recalled)", file=sys.stderr)
    return int(ExitCode.OK)


def cmd_why(args: argparse.Namespace, cfg: Config) -> int:
    with Client(
        cfg.socket_path, agent=args.agent, config_file=cfg.source_file, serve_flags=serve_flags(args, cfg)
    ) as client:
        reply = client.call("why", {"reference": args.reference, "query": args.query, "today": local_today()})
    r = parse_explanation(reply)
    for key in ("todayIgnored", "filterNoValue"):  # on stderr, as search's notes
        if reply.get(key):
            print(f"note: {shown(reply[key])}", file=sys.stderr)
    if not r.indexed and r.exists is False:  # like `get`: a missing note fails, in its error shape
        raise NotFoundError(f"{shown(args.reference)}: not indexed: {shown(r.reason or 'no such note')}")
    if args.json:
        print(json.dumps(reply, ensure_ascii=False))
        return int(ExitCode.OK)
    if not r.indexed:
        print(f"{shown(args.reference)}: not indexed: {shown(r.reason or '')}")
        return int(ExitCode.OK)
    a = r.analysis
    words, weight = list(a.content_words), r.vector_weight
    name = shown(r.reference or args.reference)
    # The query as asked (its text without a time phrase was '' for "this year")
    print(f"{name} for {shown(args.query)!r}: content words {words}, vector weight {weight}")
    f = a.filters
    if f.time_phrase:
        print(f"time phrase {shown(f.time_phrase)!r}: notes dated {dates_said(f.since, f.until)}")
    if r.page_bm25_score is not None:
        print(f"the whole note's keyword score: bm25={r.page_bm25_score}")
    if r.degraded:  # on stderr, as search's notes
        print(f"note: {r.degraded}", file=sys.stderr)
    for c in r.chunks:
        scores = (
            f"vec={c.vec_score} bm25={c.bm25_score} relevance={c.relevance} fused={c.score} {c.boosts or ''}"
        )
        print(f"  lines {c.lines[0]}-{c.lines[1]}: {c.outcome}  ({scores})")
    return int(ExitCode.OK)


def cmd_get(args: argparse.Namespace, cfg: Config) -> int:
    result = _call(args, cfg, "get", {"reference": args.reference})
    if result is not None:
        for note in resolved_notes(args.reference, result):
            print(f"note: {note}", file=sys.stderr)
    if result is not None and args.links:
        print(render_links(result))
    elif result is not None:
        text = _for_terminal(result["text"])
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return int(ExitCode.OK)


def _for_terminal(text: str) -> str:
    """A note's text for stdout: exact into a pipe or file (``get`` is like ``cat``), with its
    control characters escaped on a terminal (an agent may have stored escape sequences that
    write the clipboard or clear the screen)."""
    return escape_terminal(text) if sys.stdout.isatty() else text


def cmd_related(args: argparse.Namespace, cfg: Config) -> int:
    r = _call(args, cfg, "related", {"reference": args.reference, "limit": args.limit})
    if r is None:
        return int(ExitCode.OK)
    if r.get("indexing"):
        print(f"note: {indexing_note(r['indexing']['done'], r['indexing']['total'])}", file=sys.stderr)
    if not r["related"]:
        print(f"{shown(r['reference'])}: no linked notes, no shared links or tags")
    for item in r["related"]:
        shared = "; ".join(f"{k}: {', '.join(map(shown, v))}" for k, v in item.get("shared", {}).items())
        print(f"{shown(item['reference'])}  ({item['relation']}{'; ' + shared if shared else ''})")
    return int(ExitCode.OK)


def cmd_outline(args: argparse.Namespace, cfg: Config) -> int:
    params = _given(
        source=args.outline_source,
        pathPrefix=args.path_prefix or None,
        tokenBudget=args.token_budget or None,
    )
    result = _call(args, cfg, "outline", params)
    if result is not None:
        # Its header names the MCP tool that reads a page; in a shell that is `sidecar get`.
        head, _, rest = result["outline"].partition("\n")
        head = re.sub(r"memory_get\('([^']*)'\)", r"`sidecar get \1`", head)
        print(f"{head}\n{rest}" if rest else head)
    return int(ExitCode.OK)


def _given(**params: Any) -> dict[str, Any]:
    """The parameters the command line gave (the daemon's defaults apply to the others)."""
    return {k: v for k, v in params.items() if v is not None}


def _call(args: argparse.Namespace, cfg: Config, op: str, params: dict[str, Any]) -> dict[str, Any] | None:
    """The daemon's reply to one op, or None when ``--json`` printed it as it came."""
    agent = getattr(args, "agent", None)
    flags = serve_flags(args, cfg)
    # --timeout where the command has it (recall's default is short: it runs before every prompt).
    timeout = getattr(args, "timeout", None) or QUERY_TIMEOUT_S
    with Client(
        cfg.socket_path, timeout=timeout, agent=agent, config_file=cfg.source_file, serve_flags=flags
    ) as client:
        reply = client.call(op, params)
    if args.json:
        print(json.dumps(reply, ensure_ascii=False))
        return None
    return reply
