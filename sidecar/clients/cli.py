"""Command line: parse, load the config once, run one command, turn typed errors into messages
and exit codes. A thin client: ``serve`` and offline ``index`` import the engine lazily; search,
get and status only talk to the socket (a test checks that no engine module gets imported).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from sidecar import __version__
from sidecar.clients.client import Client
from sidecar.clients.foreground import duration
from sidecar.config import Config, load_config
from sidecar.contracts.errors import DaemonNotRunningError, ExitCode, RemoteError, SidecarError

# The sources a search can be limited to (sidecar.vault.sources.SOURCES; not imported: a thin client
# starts faster without the scanner's module, and a test keeps the two equal).
SOURCES = ("vault", "wiki", "memory")


class UsageError(SidecarError):
    """A wrong command line value the parser cannot check (a missing --history file, bad JSON)."""

    code = "usage"
    exit_code = ExitCode.USAGE


# Set by main() when the command line asks for --json: errors are printed as JSON too.
_json_errors = False


def _emit_error(message: str, code: str) -> None:
    """One line per error: JSON on stdout with --json (where the answer would have been), else
    ``sidecar: message`` on stderr."""
    if _json_errors:
        print(json.dumps({"error": {"code": code, "message": message}}, ensure_ascii=False))
    else:
        print(f"sidecar: {message}", file=sys.stderr)


class _Parser(argparse.ArgumentParser):
    """Options and positionals in any order (``memory write --agent me my-note``: plain argparse
    stops at the first optional after a ``?`` positional), and usage errors as one line."""

    _intermixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # The top level (it has the subcommands) parses as usual; each command's own parser
        # (which the subcommand action calls) collects all optionals first, then the positionals.
        if self._intermixing or self._subparsers is not None:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("sidecar").strip()
        _emit_error(f"{command + ': ' if command else ''}{message} (see `{self.prog} --help`)", "usage")
        raise SystemExit(int(ExitCode.USAGE))


class _Version(argparse.Action):
    """``--version``: the package and the model a daemon started here would use."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and the model, then exit")

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> NoReturn:
        print(version_text())
        raise SystemExit(0)


def version_text() -> str:
    from sidecar.config import EmbedderConfig

    try:
        model, origin = load_config().embedder.model, "configured"
    except SidecarError:
        model, origin = EmbedderConfig.model, "default"
    if model == EmbedderConfig.model:
        origin = "default"
    return f"sidecar {__version__} (distribution sidecar-recall), model {model} ({origin})"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config", metavar="FILE", help="configuration file (default ~/.config/sidecar/config.yaml)"
    )
    p.add_argument(
        "--home", metavar="DIR", help="sidecar home: agents/, index/, models/ (default ~/.sidecar)"
    )
    p.add_argument("--socket", metavar="PATH", help="daemon socket (default derived from the home)")


def _vault_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vault", metavar="DIR", help="the Obsidian vault folder")
    p.add_argument("--wiki-subfolder", metavar="NAME", help="curated subfolder of the vault (default wiki)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), help="log level")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sidecar", description="Hybrid recall over an Obsidian vault.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("serve", help="run the daemon in the foreground")
    _common(p)
    _vault_flags(p)

    p = sub.add_parser("index", help="index the vault now (through the daemon if one runs)")
    _common(p)
    _vault_flags(p)
    p.add_argument("--rebuild", action="store_true", help="forget the index and build it again")
    p.add_argument(
        "--confirm-deletions",
        metavar="ROOT",
        help="apply deletions held for ROOT (vault, wiki, memory/<agent>) after most of its notes vanished",
    )

    _query_commands(sub)
    _agent_commands(sub)
    _admin_commands(sub)
    _help_commands(sub)
    for command in sub.choices.values():  # every command takes --json (errors come as JSON too)
        if "--json" not in command._option_string_actions:
            command.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _help_commands(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check what usually goes wrong and say what to do")
    _common(p)
    _vault_flags(p)
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh or fish)")
    p.add_argument("shell", choices=("bash", "zsh", "fish"))


def _recall_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("message", help="the current message")
    p.add_argument(
        "--history", metavar="FILE", help="previous turns, one per line or a JSON list (oldest first)"
    )
    p.add_argument("--agent", help="recall as this agent (its memory plus vault and wiki)")
    p.add_argument("--limit", type=int, help="most notes in the block (default recall.limit)")
    p.add_argument(
        "--tokens", type=int, dest="token_budget", help="token budget (default recall.tokenBudget)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _query_commands(sub: Any) -> None:
    p = sub.add_parser("search", help="hybrid search")
    _common(p)
    p.add_argument("query", help="what to look for")
    p.add_argument("--limit", type=int, default=None, help="number of hits (default from config)")
    p.add_argument("--source", choices=SOURCES, action="append", help="only this source (repeatable)")
    p.add_argument("--min-score", type=float, default=None, help="drop hits below this score")
    p.add_argument("--agent", help="search as this agent (its memory plus vault and wiki)")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("recall", help="the context block an agent would get for a message (auto-injection)")
    _recall_args(p)
    p.add_argument("--preview", action="store_true", help="show per-hit scores and the query analysis")

    p = sub.add_parser("preview", help="recall with per-hit scores and the query analysis (for tuning)")
    _recall_args(p)
    p.set_defaults(preview=True)

    p = sub.add_parser("why", help="why a note ranks where it does for a query (scores, boosts, outcome)")
    _common(p)
    p.add_argument("reference", help="the note, e.g. vault/Plugins/Audio recorder")
    p.add_argument("query", help="the query")
    p.add_argument("--agent", help="as this agent")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser(
        "outline", help="the wiki's folders, pages and one-line descriptions (for a system prompt)"
    )
    _common(p)
    p.add_argument("--path", dest="path_prefix", help="only this folder, e.g. Projects")
    p.add_argument("--tokens", type=int, dest="token_budget", help="token budget (default 1000)")
    p.add_argument(
        "--source",
        dest="outline_source",
        choices=("wiki", "vault"),
        default="wiki",
        help="outline the wiki (default) or the vault",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("get", help="print a whole note by its reference")
    _common(p)
    p.add_argument("reference", help="a reference as search returns it, e.g. vault/Plugins/Audio recorder")
    p.add_argument("--agent", help="resolve memory/<slug> in this agent's inbox")
    p.add_argument("--links", action="store_true", help="print its links, backlinks and unresolved links")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("related", help="notes linked with a note, then notes sharing its links or tags")
    _common(p)
    p.add_argument("reference", help="the note, e.g. vault/Plugins/Audio recorder")
    p.add_argument("--limit", type=int, default=10, help="notes shown (default 10)")
    p.add_argument("--agent", help="as this agent")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _admin_commands(sub: Any) -> None:
    p = sub.add_parser("status", help="what the daemon is doing")
    _common(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _agent_commands(sub: Any) -> None:
    p = sub.add_parser("mcp", help="MCP stdio server for one agent (started by the agent's host)")
    _common(p)
    p.add_argument("--agent", required=True, help="the agent's name: a-z, 0-9, '_' and '-'")

    p = sub.add_parser("memory", help="an agent's memory inbox: list, write, edit, delete")
    _common(p)
    p.add_argument("action", choices=("list", "write", "edit", "delete"))
    p.add_argument("slug", nargs="?", help="note name (write, edit, delete)")
    p.add_argument("--agent", required=True, help="whose inbox")
    p.add_argument("--content", help="note text (default: read from stdin)")
    p.add_argument("--frontmatter", help='front matter as JSON, e.g. \'{"tags": ["nas"]}\'')
    p.add_argument("--tag", help="list: only notes with this tag")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("config", help="configuration helpers")
    _common(p)
    _vault_flags(p)
    p.add_argument(
        "action",
        choices=("check", "example", "show"),
        help="check/show: validate and print the effective values and where each came from; "
        "example: print a documented file",
    )

    p = sub.add_parser("service", help="install the user service (systemd on Linux, launchd on macOS)")
    _common(p)
    p.add_argument("action", choices=("install", "uninstall", "status"))
    p.add_argument("--dry-run", action="store_true", help="print the file instead of writing it")
    p.add_argument(
        "--sandbox",
        choices=("auto", "yes", "no"),
        default="auto",
        help="systemd mount-namespace sandboxing (auto: only where unprivileged user namespaces work)",
    )


def _config(args: argparse.Namespace) -> Config:
    flags = {
        "home": getattr(args, "home", None),
        "socket": getattr(args, "socket", None),
        "vault.path": getattr(args, "vault", None),
        "vault.wikiSubfolder": getattr(args, "wiki_subfolder", None),
        "logging.level": getattr(args, "log_level", None),
    }
    return load_config(config_file=getattr(args, "config", None), flags=flags)


def main(argv: Sequence[str] | None = None) -> int:
    global _json_errors
    argv = list(sys.argv[1:] if argv is None else argv)
    _json_errors = "--json" in argv[: argv.index("--") if "--" in argv else len(argv)]
    try:
        args = build_parser().parse_args(argv)
        if args.command == "completion":  # needs no configuration
            return cmd_completion(args)
        cfg = _config(args)
        for warning in cfg.warnings:
            print(f"sidecar: warning: {warning}", file=sys.stderr)
        command: Callable[[argparse.Namespace, Config], int] = COMMANDS[args.command]
        code = command(args, cfg)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return code
    except SidecarError as exc:
        _emit_error(str(exc), exc.code)
        return int(exc.exit_code)
    except BrokenPipeError:
        # The reader went away (`sidecar status | head -1`): not an error. Point stdout at
        # /dev/null so the interpreter's final flush does not complain again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.OK)
    except KeyboardInterrupt:
        return 130


# --- commands ---------------------------------------------------------------------------------


def _check_vault(args: argparse.Namespace, cfg: Config, *, serving: bool) -> None:
    """A vault folder that does not exist: the daemon waits for it (a share not mounted yet), with
    a warning; a literal ``~`` from the command line (quoted, so the shell did not expand it) or
    an offline ``index`` run is an error instead of a run over 0 notes."""
    from sidecar.contracts.errors import ConfigError

    path = cfg.vault.path
    if path is None or path.is_dir():
        return
    raw = getattr(args, "vault", None)
    if raw is not None and "~" in raw:
        raise ConfigError(
            f"--vault {raw}: the folder {path} does not exist; the shell did not expand '~' "
            "(was it quoted?): write the full path"
        )
    if not serving:
        raise ConfigError(f"vault.path: the folder {path} does not exist")
    print(
        f"sidecar: warning: the vault folder {path} does not exist (yet); serving agent memory and "
        "waiting for it to appear (e.g. a share that is not mounted)",
        file=sys.stderr,
    )


def cmd_serve(args: argparse.Namespace, cfg: Config) -> int:
    from sidecar.runtime import heap, logs

    heap.limit_arenas()  # before the stores' native threads exist
    from sidecar.daemon.lifecycle import Daemon

    _check_vault(args, cfg, serving=True)
    logs.setup(cfg.logging.level, journald=cfg.journald)
    if sys.stdout.isatty() and not cfg.journald and not args.json:
        import threading

        from sidecar.clients.foreground import follow

        follow(cfg.socket_path, threading.Event(), sys.stdout)
    Daemon(cfg, reload_config=lambda: _config(args)).run()
    return int(ExitCode.OK)


def cmd_index(args: argparse.Namespace, cfg: Config) -> int:
    bar = Progress(sys.stderr)
    try:
        with Client(cfg.socket_path) as client:
            before = client.call("health")["index"]["sweeps"]
            params: dict[str, Any] = {"rebuild": bool(args.rebuild)}
            if args.confirm_deletions:
                params["confirmDeletions"] = args.confirm_deletions
            client.call("index", params)
            while True:
                health = client.call("health")
                idx = health["index"]
                _show_progress(bar, idx, health["embedder"])
                waiting = health["embedder"]["state"] == "ok" and idx["pending_vectors"] > 0
                if idx["sweeps"] > before and idx["phase"] == "idle" and not waiting:
                    break
                time.sleep(0.5)
        if args.json:
            print(json.dumps({"through": "daemon", "files": idx["files"], "chunks": idx["chunks"]}))
        else:
            bar.done(f"indexed {idx['files']} notes, {idx['chunks']} chunks (through the daemon)")
        return int(ExitCode.OK)
    except DaemonNotRunningError:
        pass
    _check_vault(args, cfg, serving=False)
    from sidecar.daemon.lifecycle import index_once
    from sidecar.runtime import logs

    logs.setup(cfg.logging.level if cfg.logging.level != "info" else "warning", journald=cfg.journald)
    confirm = frozenset([args.confirm_deletions]) if args.confirm_deletions else frozenset()
    summary = index_once(cfg, rebuild=bool(args.rebuild), progress=bar.update, confirm=confirm)
    if args.json:
        print(json.dumps({"through": "in-process", **summary}, default=str))
        return int(ExitCode.OK)
    bar.done(
        f"indexed {summary['files']} notes, {summary['chunks']} chunks ({summary['changed']} read, "
        f"{summary['deleted']} removed, {summary['pending_vectors']} without vectors)"
    )
    return int(ExitCode.OK)


def _show_progress(bar: Progress, idx: dict[str, Any], embedder: dict[str, Any]) -> None:
    if idx["phase"] in ("scanning", "indexing"):
        bar.update(idx["phase"], idx["progress"]["done"], idx["progress"]["total"])
    elif embedder["state"] == "ok" and idx["pending_vectors"]:
        total = idx["chunks"]
        bar.update("embedding", total - idx["pending_vectors"], total)


def cmd_search(args: argparse.Namespace, cfg: Config) -> int:
    params: dict[str, Any] = {"query": args.query}
    if args.limit is not None:
        params["limit"] = args.limit
    if args.source:
        params["source"] = args.source if len(args.source) > 1 else args.source[0]
    if args.min_score is not None:
        params["minScore"] = args.min_score
    with Client(cfg.socket_path, agent=args.agent) as client:
        result = client.call("search", params)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return int(ExitCode.OK)
    if result.get("degraded"):
        print(f"note: {result['degraded']}", file=sys.stderr)
    if not result["hits"]:
        print("nothing relevant found")
    for i, hit in enumerate(result["hits"], 1):
        where = f"lines {hit['lines'][0]}-{hit['lines'][1]}"
        scores = f"relevance {hit['relevance']:.2f}, score {hit['score']:.3f}"
        print(f"{i:>2}. {hit['reference']}  ({scores}, {where})")
        snippet = " ".join(hit["text"].split())
        print(f"    {snippet[:200]}{'…' if len(snippet) > 200 else ''}")
    return int(ExitCode.OK)


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
    params: dict[str, Any] = {"message": args.message, "history": history, "preview": bool(args.preview)}
    if args.limit:
        params["limit"] = args.limit
    if args.token_budget:
        params["tokenBudget"] = args.token_budget
    with Client(cfg.socket_path, agent=args.agent) as client:
        result = client.call("recall", params)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return int(ExitCode.OK)
    if args.preview:
        print(json.dumps(result.get("analysis", {}), ensure_ascii=False))
        for h in result["hits"]:
            print(
                f"{h['score']:.3f} relevance={h['relevance']} vec={h['vecScore']} bm25={h['bm25Score']} "
                f"{h['boosts']} {h['reference']}"
            )
    if result["context"]:
        print(result["context"])
    elif not args.preview:
        print("(nothing recalled)", file=sys.stderr)
    return int(ExitCode.OK)


def cmd_why(args: argparse.Namespace, cfg: Config) -> int:
    with Client(cfg.socket_path, agent=args.agent) as client:
        r = client.call("why", {"reference": args.reference, "query": args.query})
    missing = not r["indexed"] and r.get("exists") is False  # like `get`: a missing note fails
    if args.json:
        print(json.dumps(r, ensure_ascii=False))
        return int(ExitCode.REQUEST_FAILED if missing else ExitCode.OK)
    if not r["indexed"]:
        print(
            f"{args.reference}: not indexed: {r.get('reason', '')}",
            file=sys.stderr if missing else sys.stdout,
        )
        return int(ExitCode.REQUEST_FAILED if missing else ExitCode.OK)
    a = r["analysis"]
    words, weight = a["contentWords"], r["vectorWeight"]
    print(f"{r['reference']} for {a['text']!r}: content words {words}, vector weight {weight}")
    if r.get("degraded"):
        print(f"note: {r['degraded']}")
    for c in r["chunks"]:
        scores = (
            f"vec={c['vecScore']} bm25={c['bm25Score']} relevance={c['relevance']} fused={c['score']} "
            f"{c['boosts'] or ''}"
        )
        print(f"  lines {c['lines'][0]}-{c['lines'][1]}: {c['outcome']}  ({scores})")
    return int(ExitCode.OK)


def cmd_get(args: argparse.Namespace, cfg: Config) -> int:
    with Client(cfg.socket_path, agent=args.agent) as client:
        result = client.call("get", {"reference": args.reference})
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    elif args.links:
        print(render_links(result))
    else:
        sys.stdout.write(result["text"] if result["text"].endswith("\n") else result["text"] + "\n")
    return int(ExitCode.OK)


def cmd_related(args: argparse.Namespace, cfg: Config) -> int:
    with Client(cfg.socket_path, agent=args.agent) as client:
        r = client.call("related", {"reference": args.reference, "limit": args.limit})
    if args.json:
        print(json.dumps(r, ensure_ascii=False))
        return int(ExitCode.OK)
    if not r["related"]:
        print(f"{r['reference']}: no linked notes, no shared links or tags")
    for item in r["related"]:
        shared = "; ".join(f"{k}: {', '.join(v)}" for k, v in item.get("shared", {}).items())
        print(f"{item['reference']}  ({item['relation']}{'; ' + shared if shared else ''})")
    return int(ExitCode.OK)


def render_links(r: dict[str, Any]) -> str:
    """A note's outgoing links, backlinks and unresolved links, one per line."""
    lines = [f"{r['reference']}: {len(r['links'])} link(s), {len(r['backlinks'])} backlink(s)"]
    for link in r["links"]:
        if link["target"] is not None:
            kind = "embeds" if link["embed"] else "links to"
            anchor = f" #{link['anchor']}" if link["anchor"] else ""
            lines.append(f"  line {link['line']}: {kind} {link['target']}{anchor}")
    for b in r["backlinks"]:
        lines.append(f"  line {b['line']} of {b['reference']} links here")
    for name in r["unresolved"]:
        lines.append(f"  unresolved: [[{name}]]")
    return "\n".join(lines)


def cmd_outline(args: argparse.Namespace, cfg: Config) -> int:
    params: dict[str, Any] = {"source": args.outline_source}
    if args.path_prefix:
        params["pathPrefix"] = args.path_prefix
    if args.token_budget:
        params["tokenBudget"] = args.token_budget
    with Client(cfg.socket_path) as client:
        result = client.call("outline", params)
    print(json.dumps(result, ensure_ascii=False) if args.json else result["outline"])
    return int(ExitCode.OK)


def cmd_status(args: argparse.Namespace, cfg: Config) -> int:
    try:
        with Client(cfg.socket_path, timeout=10.0) as client:
            health = client.call("health")
    except DaemonNotRunningError as exc:
        if args.json:
            print(json.dumps({"running": False, "socket": str(cfg.socket_path), "error": str(exc)}))
        else:
            print(f"sidecar is not running.\n{exc}")
        return int(ExitCode.NOT_RUNNING)
    if args.json:
        print(json.dumps({"running": True, **health}, ensure_ascii=False))
    else:
        print(render_status(health))
    return int(ExitCode.OK)


def cmd_mcp(args: argparse.Namespace, cfg: Config) -> int:
    from sidecar.config import valid_agent
    from sidecar.runtime import logs

    if not valid_agent(args.agent):
        raise UsageError(f"invalid agent name {args.agent!r}: use a-z, 0-9, '_' and '-'")
    logs.setup("warning", journald=cfg.journald)  # stderr only: stdout carries the protocol
    from sidecar.clients.mcp_shim import run

    run(cfg.socket_path, args.agent)
    return int(ExitCode.OK)


def cmd_memory(args: argparse.Namespace, cfg: Config) -> int:
    params: dict[str, Any] = {}
    if args.action == "list":
        if args.tag:
            params["tag"] = args.tag
    else:
        if not args.slug:
            raise UsageError(
                f"memory {args.action} needs a SLUG (sidecar memory {args.action} SLUG --agent NAME)"
            )
        params["slug"] = args.slug
        if args.action in ("write", "edit"):
            params["content"] = args.content if args.content is not None else sys.stdin.read()
            if args.frontmatter:
                try:
                    params["frontmatter"] = json.loads(args.frontmatter)
                except json.JSONDecodeError as exc:
                    raise UsageError(f"--frontmatter is not valid JSON: {exc}") from None
    try:
        with Client(cfg.socket_path, agent=args.agent) as client:
            result = client.call(args.action, params)
    except RemoteError as exc:  # the daemon's words name the MCP tools; a person typed a command
        raise RemoteError(exc.code, str(exc).replace("memory_write", "`sidecar memory write`")) from None
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    elif args.action == "list":
        for n in result["notes"]:
            print(f"{n['reference']}  {n['title']}  ({n['modified']})")
        print(f"{result['total']} note(s)")
    elif args.action == "delete":
        print(f"moved to {result['trash']}" if result["deleted"] else result["message"])
    else:
        print(
            f"{result['reference']} {'created' if result['created'] else 'written'} ({result['bytes']} bytes)"
        )
        for kind, n in result["redacted"].items():
            print(f"redacted {n} {kind}", file=sys.stderr)
        for d in result["duplicates"]:
            print(f"similar: {d['reference']} ({d['similarity']:.0%})", file=sys.stderr)
    return int(ExitCode.OK)


def cmd_config(args: argparse.Namespace, cfg: Config) -> int:
    from sidecar.config import render_example, settings

    if args.action == "example":
        text = render_example()
        print(json.dumps({"example": text}) if args.json else text, end="" if not args.json else "\n")
        return int(ExitCode.OK)
    values: dict[str, Any] = {}
    for s in settings():
        value: Any = cfg
        for attr in s.attrs:
            value = getattr(value, attr)
        values[s.dotted] = value
    if args.json:
        print(
            json.dumps(
                {
                    "file": str(cfg.source_file) if cfg.source_file else None,
                    "warnings": list(cfg.warnings),
                    "values": {
                        k: {"value": v, "from": cfg.origins.get(k, "default")} for k, v in values.items()
                    },
                    "socket": str(cfg.socket_path),
                },
                default=str,
            )
        )
        return int(ExitCode.OK)
    state = f"with {len(cfg.warnings)} warning(s)" if cfg.warnings else "OK"
    print(f"configuration {state} ({cfg.source_file or 'no file: defaults, environment and flags'})")
    for warning in cfg.warnings:
        print(f"warning: {warning}")
    for dotted, value in values.items():
        print(f"{dotted} = {value}  ({cfg.origins.get(dotted, 'default')})")
    print(f"socket (effective) = {cfg.socket_path}")
    return int(ExitCode.OK)


def cmd_service(args: argparse.Namespace, cfg: Config) -> int:
    from sidecar.clients.service import prepare, service_file

    sandbox = {"yes": True, "no": False}.get(getattr(args, "sandbox", "auto"))
    svc = service_file(cfg, Path.home(), sandbox=sandbox)
    if args.json:
        return _service_json(args, cfg, svc)
    if args.action == "status":
        state = "installed" if svc.path.exists() else "not installed"
        print(f"service file {svc.path}: {state}")
        print(
            f"start it with: {svc.enable}"
            if svc.path.exists()
            else "install it with: sidecar service install"
        )
        return int(ExitCode.OK)
    if args.action == "uninstall":
        if args.dry_run:
            print(f"would remove {svc.path}; first run: {svc.disable}")
            return int(ExitCode.OK)
        print(f"stop it first with: {svc.disable}")
        svc.path.unlink(missing_ok=True)
        print(f"removed {svc.path}")
        return int(ExitCode.OK)
    if args.dry_run:
        sys.stdout.write(svc.text)
        print(f"# would be written to {svc.path}; then: {svc.enable}", file=sys.stderr)
        return int(ExitCode.OK)
    if cfg.source_file is None:
        print(
            "note: no configuration file; the service will start without a vault. Write one "
            "(sidecar config example > ~/.config/sidecar/config.yaml) and set vault.path.",
            file=sys.stderr,
        )
    for folder in prepare(cfg, Path.home()):
        print(f"created {folder}")
    svc.path.parent.mkdir(parents=True, exist_ok=True)
    svc.path.write_text(svc.text, encoding="utf-8")
    print(f"wrote {svc.path}\nstart it now and at every login with:\n  {svc.enable}")
    return int(ExitCode.OK)


def _service_json(args: argparse.Namespace, cfg: Config, svc: Any) -> int:
    out: dict[str, Any] = {"path": str(svc.path), "start": svc.enable, "stop": svc.disable}
    if args.action == "status":
        out["installed"] = svc.path.exists()
    elif args.dry_run:
        out["dryRun"] = True
        if args.action == "install":
            out["text"] = svc.text
    elif args.action == "install":
        from sidecar.clients.service import prepare

        out["created"] = [str(f) for f in prepare(cfg, Path.home())]
        svc.path.parent.mkdir(parents=True, exist_ok=True)
        svc.path.write_text(svc.text, encoding="utf-8")
        out["written"] = True
    else:
        svc.path.unlink(missing_ok=True)
        out["removed"] = True
    print(json.dumps(out))
    return int(ExitCode.OK)


def cmd_doctor(args: argparse.Namespace, cfg: Config) -> int:
    from sidecar.clients.doctor import mcp_snippets, render, run_checks

    checks = run_checks(cfg)
    if args.json:
        ok = all(c.ok for c in checks)
        print(json.dumps({"ok": ok, "checks": [c.as_dict() for c in checks], "mcp": mcp_snippets(cfg)}))
    else:
        print(render(checks, cfg))
    return int(ExitCode.OK if all(c.ok for c in checks) else ExitCode.FAILURE)


def cmd_completion(args: argparse.Namespace) -> int:
    from sidecar.clients.completion import command_tree, script

    parser = build_parser()
    if args.json:
        print(json.dumps(command_tree(parser)))
    else:
        sys.stdout.write(script(parser, args.shell))
    return int(ExitCode.OK)


COMMANDS: dict[str, Callable[[argparse.Namespace, Config], int]] = {
    "serve": cmd_serve,
    "index": cmd_index,
    "search": cmd_search,
    "get": cmd_get,
    "related": cmd_related,
    "outline": cmd_outline,
    "recall": cmd_recall,
    "preview": cmd_recall,
    "why": cmd_why,
    "status": cmd_status,
    "config": cmd_config,
    "mcp": cmd_mcp,
    "service": cmd_service,
    "memory": cmd_memory,
    "doctor": cmd_doctor,
}


# --- presentation -----------------------------------------------------------------------------


def _ago(ts: float | None) -> str:
    if ts is None:
        return "never"
    return f"{duration(time.time() - ts)} ago"


def _until(ts: float) -> str:
    left = ts - time.time()
    return "at the next sweep" if left <= 0 else f"in {duration(left)}"


_PROBLEM_AREAS = {
    "index": "index updates",
    "embedding": "vectors",
    "keyword_search": "keyword search",
    "vector_search": "vector search",
    "memory_write": "memory writes",
    "stores": "index files",
    "unreadable": "unreadable folders",
}


def _problem_lines(problems: dict[str, Any], todo: list[str]) -> list[str]:
    """What is wrong now (and what was repaired lately), in the words of health's problems."""
    out = []
    for p in problems["active"]:
        area = _PROBLEM_AREAS.get(p["area"], p["area"])
        times = f", {p['count']} times" if p["count"] > 1 else ""
        out.append(f"PROBLEM ({area}, since {_ago(p['since'])}{times}): {p['error']}")
    areas = {p["area"] for p in problems["active"]}
    if areas & {"index", "embedding", "memory_write"}:
        todo.append("check free disk space and permissions of the home folder; the daemon retries by itself")
    if "stores" in areas:
        todo.append("restart the daemon so it rebuilds its index (e.g. `systemctl --user restart sidecar`)")
    for p in problems["recent"][-3:]:
        area = _PROBLEM_AREAS.get(p["area"], p["area"])
        out.append(f"Recovered ({area}, {_ago(p['cleared'])}): {p['error']}")
    return out


def render_status(h: dict[str, Any]) -> str:
    idx, emb = h["index"], h["embedder"]
    lines = [
        f"sidecar {h['version']}: running since {_ago(h['started'])} (pid {h['pid']}), socket {h['socket']}"
    ]
    if idx["state"] == "building" and idx["phase"] in ("scanning", "indexing", "starting"):
        prog = idx["progress"]
        lines.append(f"Index: building ({idx['phase']} {prog['done']:,}/{prog['total']:,} notes)")
    elif idx["state"] == "building":
        lines.append("Index: building (every note is searchable by keyword; vectors are being computed)")
    else:
        lines.append("Index: ready")
    lines.append(f"  {idx['files']:,} notes, {idx['chunks']:,} chunks")
    for source, c in sorted(idx["by_source"].items()):
        lines.append(f"    {source:<7} {c['files']:>7,} notes {c['chunks']:>8,} chunks")
    pending = idx["pending_vectors"]
    todo: list[str] = []
    if emb["state"] == "ok":
        lines.append(f"Embedder: ok ({emb['model']}, from {emb['origin']})")
        if pending:
            rate = idx.get("embed_rate_chunks_per_second")
            eta = f", about {duration(pending / rate)} left" if rate else ""
            lines.append(
                f"Vectors: {pending:,} chunks waiting for vectors{eta}; keyword search covers them already"
            )
        else:
            lines.append("Vectors: every chunk has a vector")
    else:
        lines.append(f"Embedder: {emb['state']}" + (f": {emb['error']}" if emb.get("error") else ""))
        if emb["state"] == "failed":
            lines.append(f"Vectors: {pending:,} chunks wait for the model; search is keyword-only")
            todo.append("fix the model (see the embedder error above) and restart the daemon")
    lines += _root_lines(h["roots"], todo)
    if idx["skipped"]:
        parts = ", ".join(f"{n} {reason}" for reason, n in sorted(idx["skipped"].items()))
        lines.append(f"Skipped files: {parts}")
    if idx.get("excluded"):
        parts = ", ".join(f"{n} by {rule}" for rule, n in sorted(idx["excluded"].items()))
        lines.append(f"Excluded notes: {parts}")
    lines += _problem_lines(h.get("problems") or {"active": [], "recent": []}, todo)
    if h["vault"] is None:
        todo.append("configure a vault (--vault or vault.path) to index notes")
    if todo:
        lines.append("To do: " + "; ".join(todo))
    return "\n".join(lines)


def _root_lines(roots: list[dict[str, Any]], todo: list[str]) -> list[str]:
    """The Roots block of `status`: mode, last sweep, held deletions and what to do about them."""
    lines = ["Roots:"]
    for r in roots:
        extra = f"  PROBLEM: {r['error']}" if r.get("error") else ""
        lines.append(
            f"  {r['name']:<16} {r['mode']:<8} last sweep {_ago(r['last_sweep'])}  {r['path']}{extra}"
        )
        hold = r.get("hold")
        if hold:
            when = (
                f"; applied {_until(hold['applies_at'])} unless the notes come back"
                if hold.get("applies_at")
                else "; held for as long as it stays so"
            )
            lines.append(
                f"    {r['held_deletions']:,} deletions held ({hold['kind']}) since {_ago(hold['since'])}"
                f"{when}; to apply them now: {hold['confirm']}"
            )
        if r["mode"] == "offline":
            todo.append(f"check that {r['path']} is mounted and readable")
    return lines


class Progress:
    """A one-line progress bar on stderr when it is a terminal; silent otherwise."""

    def __init__(self, stream: TextIO) -> None:
        from sidecar.clients.foreground import Eta

        self.stream = stream
        self.enabled = stream.isatty()
        self.phase = ""
        self.eta = Eta()

    def update(self, phase: str, done: int, total: int) -> None:
        from sidecar.clients.foreground import Eta

        if not self.enabled or total <= 0:
            return
        if phase != self.phase:  # each phase has its own pace
            self.phase, self.eta = phase, Eta()
        share = min(done / total, 1.0)
        width = 30
        filled = int(share * width)
        left = self.eta.update(done, total)  # a moving average: steady although counts move in steps
        eta = f" ETA {duration(left)}" if left is not None and share < 1 else ""
        self.stream.write(
            f"\r{phase:<10} [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,}{eta}   "
        )
        self.stream.flush()

    def done(self, message: str) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 79 + "\r")
        self.stream.write(message + "\n")
        self.stream.flush()
