"""The agent commands: ``mcp`` (an agent's MCP stdio server) and ``memory`` (its inbox from the
shell)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sidecar.clients.cli_parser import UsageError, serve_flags, socket_now
from sidecar.clients.client import Client
from sidecar.clients.mcp_texts import trash_dropped_note
from sidecar.config import Config
from sidecar.contracts.errors import ExitCode, RemoteError
from sidecar.contracts.notices import modified_said, refused_note
from sidecar.contracts.printable import escape_controls as shown
from sidecar.contracts.printable import quoted
from sidecar.contracts.protocol import LIST_LIMIT_RANGE


def cmd_mcp(args: argparse.Namespace, cfg: Config) -> int:
    from sidecar.runtime import logs

    logs.setup("warning", journald=cfg.journald)  # stderr only: stdout carries the protocol
    from sidecar.clients.mcp_shim import run

    # The daemon-down hint names what this shim was started with (absolute: the host's working
    # folder is not the user's shell's).
    # The socket is looked up again whenever no daemon answers where it was (the file rewritten).
    run(cfg.socket_path, args.agent, cfg.source_file, serve_flags(args, cfg), lambda: socket_now(args))
    return int(ExitCode.OK)


def cmd_memory(args: argparse.Namespace, cfg: Config) -> int:
    params: dict[str, Any] = {}
    if args.action == "list":
        if args.slug:  # it was taken silently and ignored
            raise UsageError(f"memory list takes no SLUG (got {quoted(args.slug)}); --tag TAG filters")
        if args.tag:
            params["tag"] = args.tag
        if args.source:
            params["source"] = args.source
        if args.path:
            params["pathPrefix"] = args.path
        if args.limit is not None:
            params["limit"] = args.limit
    else:
        params["slug"] = _slug(args)
        if args.action in ("write", "edit"):
            params["content"] = args.content if args.content is not None else _stdin_note(args.action)
            if args.frontmatter:
                try:
                    params["frontmatter"] = json.loads(args.frontmatter)
                except json.JSONDecodeError as exc:
                    raise UsageError(f"--frontmatter is not valid JSON: {exc}") from None
    try:
        with Client(
            cfg.socket_path, agent=args.agent, config_file=cfg.source_file, serve_flags=serve_flags(args, cfg)
        ) as client:
            result = client.call(args.action, params)
    except RemoteError as exc:  # the daemon's words name the MCP tools; a person typed a command
        raise RemoteError(exc.code, str(exc).replace("memory_write", "`sidecar memory write`")) from None
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        _print_memory(args.action, result)
    return int(ExitCode.OK)


def _slug(args: argparse.Namespace) -> str:
    """The SLUG, checked as the daemon checks it: a bad one is a bad command line (exit 2)."""
    from sidecar.vault.notenames import SLUG_RE

    if not args.slug:
        raise UsageError(
            f"memory {args.action} needs a SLUG (sidecar memory {args.action} SLUG --agent NAME)"
        )
    if not SLUG_RE.fullmatch(args.slug):
        raise UsageError(
            f"invalid slug {quoted(args.slug)}: use 1-128 characters a-z, 0-9, '_' and '-', starting with a "
            "letter or digit (no folders, no extension), e.g. 'nas-backup-setup'"
        )
    return str(args.slug)


def _stdin_note(action: str) -> str:
    """The note's text from stdin. Nothing there (``< /dev/null``, a closed pipe, a script that
    forgot --content) is refused: it replaced the note with nothing, with exit 0. An empty note
    is written only when asked for: ``--content ''``. At a terminal, say that stdin is read."""
    if sys.stdin.isatty():
        print("sidecar: reading the note from stdin (end it with Ctrl-D)", file=sys.stderr)
    try:
        text = sys.stdin.buffer.read().decode("utf-8") if hasattr(sys.stdin, "buffer") else sys.stdin.read()
    except UnicodeDecodeError:
        raise UsageError("the note on stdin is not UTF-8 text; nothing was written") from None
    if not text.strip():
        raise UsageError(
            f"memory {action}: no note text on stdin (empty or closed); nothing was written. Pipe the "
            "text in or give --content TEXT (--content '' writes an empty note)"
        )
    return text


def _list_footer(result: dict[str, Any]) -> str:
    """The count under a list; a cut list says so (the footer named every note while 200 showed)."""
    total, shown_n = result["total"], len(result["notes"])
    if not result.get("truncated"):
        return f"{total:,} note(s)"
    more = f"raise --limit (up to {LIST_LIMIT_RANGE[1]:,}) or " if shown_n < LIST_LIMIT_RANGE[1] else ""
    return f"first {shown_n:,} of {total:,} note(s) shown; {more}narrow with --path PREFIX or --tag TAG"


def _print_memory(action: str, result: dict[str, Any]) -> None:
    if action == "list":
        if result.get("inboxRefused"):
            print(f"note: {shown(refused_note(result['inboxRefused']))}", file=sys.stderr)
        for n in result["notes"]:
            why = n.get("why", "not indexed")
            state = "" if n.get("indexed", True) else f"  [not searchable: {shown(why)}]"
            print(f"{shown(n['reference'])}  {shown(n['title'])}  ({modified_said(n)}){state}")
        print(_list_footer(result))
    elif action == "delete":
        print(f"moved to {shown(result['trash'])}" if result.get("trash") else shown(result["message"]))
    else:
        done = result.get("action") or ("created" if result["created"] else "written")
        print(f"{shown(result['reference'])} {done} ({result['bytes']} bytes)")
        for kind, n in result["redacted"].items():
            print(f"redacted {n} {kind}", file=sys.stderr)
        for d in result["duplicates"]:
            print(f"similar: {shown(d['reference'])} ({d['similarity']:.0%})", file=sys.stderr)
    if result.get("trashDropped"):  # restorable history the person just lost: said, not only in --json
        print(f"note: {trash_dropped_note(result['trashDropped'])}", file=sys.stderr)
    if result.get("warning"):  # saved, but not searchable yet; its audit line failed; ...
        print(f"sidecar: warning: {result['warning']}", file=sys.stderr)
