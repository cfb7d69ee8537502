"""The command line's grammar: every command, its options and their help (``sidecar --help``,
completion scripts), usage errors as one line (JSON with ``--json``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from sidecar import __version__
from sidecar.config import Config, load_config
from sidecar.contracts.errors import ExitCode, SidecarError
from sidecar.contracts.wire import SOURCES


class UsageError(SidecarError):
    """A wrong command line value the parser cannot check (a missing --history file, bad JSON)."""

    code = "usage"
    exit_code = ExitCode.USAGE


# Set by main() when the command line asks for --json: errors are printed as JSON too.
_json_errors = False


def set_json_errors(on: bool) -> None:
    global _json_errors
    _json_errors = on


def emit_error(message: str, code: str) -> None:
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
        emit_error(f"{command + ': ' if command else ''}{message} (see `{self.prog} --help`)", "usage")
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


def _agent(p: argparse.ArgumentParser, help: str, *, required: bool = False) -> None:
    p.add_argument("--agent", required=required, help=help)


def _vault_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vault", metavar="DIR", help="the Obsidian vault folder")
    p.add_argument("--wiki-subfolder", metavar="NAME", help="curated subfolder of the vault (default wiki)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), help="log level")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, or with ``only`` (a command name) just that one: a command line
    names its command first, and building the other fifteen costs a thin client's start."""
    parser = _Parser(prog="sidecar", description="Hybrid recall over an Obsidian vault.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, build in _COMMANDS.items():
        if only in (None, name):
            # every command takes --json (errors come as JSON too)
            build(sub).add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def command_named(argv: Sequence[str]) -> str | None:
    """The command a command line starts with, if it is one (else the full parser decides)."""
    return argv[0] if argv and argv[0] in _COMMANDS else None


Sub = Any  # argparse's subparsers action (a private type)


def _serve(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("serve", help="run the daemon in the foreground")
    _common(p)
    _vault_flags(p)
    return p


def _index(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("index", help="index the vault now (through the daemon if one runs)")
    _common(p)
    _vault_flags(p)
    p.add_argument("--rebuild", action="store_true", help="forget the index and build it again")
    p.add_argument(
        "--confirm-deletions",
        metavar="ROOT",
        help="apply deletions held for ROOT (vault, wiki, memory/<agent>) after most of its notes vanished",
    )
    return p


def _search(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("search", help="hybrid search")
    _common(p)
    p.add_argument("query", help="what to look for")
    p.add_argument("--limit", type=int, default=None, help="number of hits (default from config)")
    p.add_argument("--source", choices=SOURCES, action="append", help="only this source (repeatable)")
    p.add_argument("--min-score", type=float, default=None, help="drop hits below this score")
    _agent(p, "search as this agent (its memory plus vault and wiki)")
    return p


def _recall_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    _common(p)
    p.add_argument("message", help="the current message")
    p.add_argument(
        "--history", metavar="FILE", help="previous turns, one per line or a JSON list (oldest first)"
    )
    _agent(p, "recall as this agent (its memory plus vault and wiki)")
    p.add_argument("--limit", type=int, help="most notes in the block (default recall.limit)")
    p.add_argument(
        "--tokens", type=int, dest="token_budget", help="token budget (default recall.tokenBudget)"
    )
    return p


def _recall(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("recall", help="the context block an agent would get for a message (auto-injection)")
    _recall_args(p)
    p.add_argument("--preview", action="store_true", help="show per-hit scores and the query analysis")
    return p


def _preview(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("preview", help="recall with per-hit scores and the query analysis (for tuning)")
    _recall_args(p)
    p.set_defaults(preview=True)
    return p


def _why(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("why", help="why a note ranks where it does for a query (scores, boosts, outcome)")
    _common(p)
    p.add_argument("reference", help="the note, e.g. vault/Plugins/Audio recorder")
    p.add_argument("query", help="the query")
    _agent(p, "as this agent")
    return p


def _outline(sub: Sub) -> argparse.ArgumentParser:
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
    return p


def _get(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("get", help="print a whole note by its reference")
    _common(p)
    p.add_argument("reference", help="a reference as search returns it, e.g. vault/Plugins/Audio recorder")
    _agent(p, "resolve memory/<slug> in this agent's inbox")
    p.add_argument("--links", action="store_true", help="print its links, backlinks and unresolved links")
    return p


def _related(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("related", help="notes linked with a note, then notes sharing its links or tags")
    _common(p)
    p.add_argument("reference", help="the note, e.g. vault/Plugins/Audio recorder")
    p.add_argument("--limit", type=int, default=10, help="notes shown (default 10)")
    _agent(p, "as this agent")
    return p


def _mcp(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("mcp", help="MCP stdio server for one agent (started by the agent's host)")
    _common(p)
    _agent(p, "the agent's name: a-z, 0-9, '_' and '-'", required=True)
    return p


def _memory(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("memory", help="an agent's memory inbox: list, write, edit, delete")
    _common(p)
    p.add_argument("action", choices=("list", "write", "edit", "delete"))
    p.add_argument("slug", nargs="?", help="note name (write, edit, delete)")
    _agent(p, "whose inbox", required=True)
    p.add_argument("--content", help="note text (default: read from stdin)")
    p.add_argument("--frontmatter", help='front matter as JSON, e.g. \'{"tags": ["nas"]}\'')
    p.add_argument("--tag", help="list: only notes with this tag")
    return p


def _config(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("config", help="configuration helpers")
    _common(p)
    _vault_flags(p)
    p.add_argument(
        "action",
        choices=("check", "example", "show"),
        help="check/show: validate and print the effective values and where each came from; "
        "example: print a documented file",
    )
    return p


def _service(sub: Sub) -> argparse.ArgumentParser:
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
    return p


def _status(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("status", help="what the daemon is doing")
    _common(p)
    return p


def _doctor(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("doctor", help="check what usually goes wrong and say what to do")
    _common(p)
    _vault_flags(p)
    return p


def _completion(sub: Sub) -> argparse.ArgumentParser:
    p = sub.add_parser("completion", help="print a shell completion script (bash, zsh or fish)")
    p.add_argument("shell", choices=("bash", "zsh", "fish"))
    return p


# In the order `sidecar --help` lists them.
_COMMANDS: dict[str, Callable[[Sub], argparse.ArgumentParser]] = {
    "serve": _serve,
    "index": _index,
    "search": _search,
    "recall": _recall,
    "preview": _preview,
    "why": _why,
    "outline": _outline,
    "get": _get,
    "related": _related,
    "mcp": _mcp,
    "memory": _memory,
    "config": _config,
    "service": _service,
    "status": _status,
    "doctor": _doctor,
    "completion": _completion,
}


def config_of(args: argparse.Namespace) -> Config:
    """The configuration this command line names (file, flags, environment)."""
    flags = {
        "home": getattr(args, "home", None),
        "socket": getattr(args, "socket", None),
        "vault.path": getattr(args, "vault", None),
        "vault.wikiSubfolder": getattr(args, "wiki_subfolder", None),
        "logging.level": getattr(args, "log_level", None),
    }
    return load_config(config_file=getattr(args, "config", None), flags=flags)
