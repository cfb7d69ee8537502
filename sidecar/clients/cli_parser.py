"""The command line's grammar: every command, its options and their help (``sidecar --help``,
completion scripts), usage errors as one line (JSON with ``--json``)."""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from sidecar import __version__
from sidecar.config import Config, agent_name_problem, daemon_address, holds_nothing, load_config, valid_agent
from sidecar.contracts.errors import ConfigError, ExitCode, SidecarError
from sidecar.contracts.protocol import (
    LIMIT_RANGE,
    LIST_LIMIT_DEFAULT,
    LIST_LIMIT_RANGE,
    RELATED_LIMIT_RANGE,
    RELEVANCE_RANGE,
    TOKEN_BUDGET_RANGE,
)
from sidecar.contracts.wire import SOURCES
from sidecar.runtime.release import build_id


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
    stops at the first optional after a ``?`` positional), ``--`` ends the options (``search --
    -rf``), and usage errors as one line naming this command's help."""

    _intermixing = False
    _after_dashes: dict[str, str] = {}  # noqa: RUF012 (set per parse, see parse_known_args)
    words: Sequence[str] = ()  # this command's words before "--", as given

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        # The top level (it has the subcommands) parses as usual; each command's own parser
        # (which the subcommand action calls) collects all optionals first, then the positionals.
        if self._intermixing:
            return super().parse_known_args(args, namespace)
        words = list(sys.argv[1:] if args is None else args)
        if self._subparsers is not None:
            self._refuse_unknown_options(words[:1])  # `sidecar --bogus`: not "COMMAND is required"
            return super().parse_known_args(words, namespace)
        cut = words.index("--") if "--" in words else len(words)
        self._refuse_unknown_options(words[:cut])
        # Python 3.11's intermixed parsing loses what "--" means: what follows it goes in as
        # placeholders that cannot look like options, and comes back as given.
        self._after_dashes = {f"\0{i}": word for i, word in enumerate(words[cut + 1 :])}
        self.words = words[:cut]  # for a help that depends on them (``_MemoryHelp``)
        self._intermixing = True
        try:
            ns, extras = self.parse_known_intermixed_args(words[:cut] + list(self._after_dashes), namespace)
            for name, value in vars(ns).items():
                setattr(ns, name, self._given(value))
            if extras:  # here, not at the top: the message then names this command's help
                self.error(f"unrecognized arguments: {' '.join(map(self._given, extras))}")
            return ns, []
        finally:
            self._intermixing = False
            self._after_dashes = {}

    def _given(self, value: Any) -> Any:
        """A value with the words after ``--`` as they were typed."""
        if isinstance(value, str):
            return self._after_dashes.get(value, value)
        if isinstance(value, list):
            return [self._given(v) for v in value]
        return value

    def _refuse_unknown_options(self, words: Sequence[str]) -> None:
        """An unknown option is named as such, before argparse says a positional is missing
        (``search -rf``, ``search --query=x``: "the following arguments are required: query")."""
        for word in words:
            if _looks_like_option(word) and not self._knows(word):
                hint = ""
                if self._subparsers is not None:
                    hint = ": options go after the COMMAND"
                elif "=" not in word and any(not a.option_strings for a in self._actions):
                    hint = f" (text that starts with '-' goes after --: {self.prog} -- {word})"
                self.error(f"unrecognized option {word}{hint}")

    def _knows(self, word: str) -> bool:
        name = word.split("=", 1)[0] if word.startswith("--") else word
        if name in self._option_string_actions:
            return True
        # argparse takes an unambiguous prefix of a long option (--lim for --limit)
        return name.startswith("--") and any(o.startswith(name) for o in self._option_string_actions)

    def error(self, message: str) -> NoReturn:
        for placeholder, word in self._after_dashes.items():
            message = message.replace(repr(placeholder), repr(word)).replace(placeholder, word)
        command = self.prog.removeprefix("sidecar").strip()
        emit_error(f"{command + ': ' if command else ''}{message} (see `{self.prog} --help`)", "usage")
        raise SystemExit(int(ExitCode.USAGE))


_NEGATIVE_NUMBER = re.compile(r"-\d+|-\d*\.\d+")


def _looks_like_option(word: str) -> bool:
    """What argparse takes for an option: a dash-word that is not "-", a negative number (this
    parser has no options that look like one) or a text with a blank."""
    return word.startswith("-") and word != "-" and not _NEGATIVE_NUMBER.fullmatch(word) and " " not in word


class _Version(argparse.Action):
    """``--version``: the package and the model a daemon started here would use."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and the model, then exit")

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any, **_kwargs: Any) -> NoReturn:
        print(version_text())
        raise SystemExit(0)


# What each `memory` action does, printed by `memory ACTION --help` (write and edit printed the
# same text, and only the MCP tools' descriptions said how they differ).
MEMORY_ACTIONS = {
    "list": "List the agent's notes, with those there but not searchable and why; with --source "
    "all, vault or wiki the vault's and the wiki's notes too. --tag and --path filter.",
    "write": "Create the note SLUG, or replace it whole when it exists (the replaced text is kept "
    "in the inbox's .trash). The text comes from --content or stdin; a front matter block at its "
    "top or --frontmatter gives its keys (created and updated are managed); secrets are redacted.",
    "edit": "Update the note SLUG, which must exist (refused, exit 7, when it does not: write "
    "creates it). The text replaces its body; front matter keys given are updated and the others "
    "kept; the previous text is kept in the inbox's .trash.",
    "delete": "Move the note SLUG to the inbox's .trash (restorable there for memory.trashDays); "
    "a note that does not exist is nothing to do.",
}


class _MemoryHelp(argparse.Action):
    """``memory ACTION --help``: the parser's help, opened by what that action does."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show this help message and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any) -> NoReturn:
        # Optionals are parsed before positionals (see _Parser): the action is among the words.
        words = getattr(parser, "words", ())
        action = next((w for w in words if w in MEMORY_ACTIONS), None)
        if action is not None:
            parser.description = f"memory {action}: {MEMORY_ACTIONS[action]}"
        parser.print_help()
        raise SystemExit(0)


def version_text() -> str:
    from sidecar.config import EmbedderConfig

    try:
        embedder = load_config().embedder
        model, origin = embedder.model, "configured"
    except SidecarError:
        embedder, model, origin = None, EmbedderConfig.model, "default"
    if model == EmbedderConfig.model:
        origin = "default"
    head = f"sidecar {__version__} (build {build_id()}, distribution sidecar-recall)"
    if embedder is not None and not embedder.enabled:
        return f"{head}, no model (embedder.enabled: false)"
    return f"{head}, model {model} ({origin})"


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        metavar="FILE",
        help="configuration file (default $SIDECAR_CONFIG, else $XDG_CONFIG_HOME/sidecar/config.yaml, "
        "else ~/.config/sidecar/config.yaml; `sidecar config path` names it)",
    )
    p.add_argument(
        "--home", metavar="DIR", help="sidecar home: agents/, index/, models/ (default ~/.sidecar)"
    )
    p.add_argument("--socket", metavar="PATH", help="daemon socket (default derived from the home)")


class _Once(argparse.Action):
    """An option that names an identity: given twice with different values is an error (the
    last one silently won: `--agent alice --agent bob` acted as bob)."""

    def __call__(
        self, parser: argparse.ArgumentParser, ns: argparse.Namespace, value: Any, opt: Any = None
    ) -> None:
        before = getattr(ns, self.dest, None)
        if before is not None and before != value:
            parser.error(f"{opt} given twice ({before!r} and {value!r}): name one")
        setattr(ns, self.dest, value)


def _agent_name(text: str) -> str:
    """``--agent``'s type: a name the daemon accepts, else a usage error (exit 2) before any
    daemon is asked (a byte that is not UTF-8 in it crashed the request's encoding)."""
    if not valid_agent(text):
        raise argparse.ArgumentTypeError(agent_name_problem(text))
    return text


def _agent(p: argparse.ArgumentParser, help: str, *, required: bool = False) -> None:
    p.add_argument("--agent", required=required, help=help, action=_Once, type=_agent_name)


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
    for name, (help_text, options) in _COMMANDS.items():
        if only not in (None, name):
            continue
        # memory's -h/--help says what the action it names does: it replaces argparse's.
        p = sub.add_parser(name, help=help_text, conflict_handler="resolve" if name == "memory" else "error")
        if name != "completion":  # it needs no configuration
            _common(p)
        options(p)
        p.add_argument("--json", action="store_true", help="machine-readable output")  # errors too
    return parser


def command_named(argv: Sequence[str]) -> str | None:
    """The command a command line starts with, if it is one (else the full parser decides)."""
    return argv[0] if argv and argv[0] in _COMMANDS else None


def _index(p: argparse.ArgumentParser) -> None:
    _vault_flags(p)
    p.add_argument("--rebuild", action="store_true", help="forget the index and build it again")
    p.add_argument(
        "--confirm-deletions",
        metavar="ROOT",
        help="apply deletions held for ROOT (vault, wiki, memory/<agent>) after most of its notes "
        "vanished; with --rebuild, the rebuild runs after them (it is refused while they are held)",
    )
    p.add_argument(
        "--accept-home",
        action="store_true",
        help="take the folder at the home's path as the home (moved or made anew on purpose)",
    )


def _in_range(kind: type[int] | type[float], bounds: tuple[float, float]) -> Callable[[str], Any]:
    """An option's type: a number within the range the daemon accepts, else a usage error (exit 2)
    that names the range, before any daemon is asked."""
    lo, hi = bounds

    def parse(text: str) -> int | float:
        value = kind(text)  # a ValueError: argparse says "invalid int value: 'abc'"
        if not lo <= value <= hi:  # NaN fails this too
            raise argparse.ArgumentTypeError(f"{text} is not between {lo:g} and {hi:g}")
        return value

    parse.__name__ = kind.__name__  # the type argparse names in that message
    return parse


def _search(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", help="what to look for")
    p.add_argument(
        "-n",
        "--limit",
        type=_in_range(int, LIMIT_RANGE),
        default=None,
        help="number of hits, 1-200 (default search.limit)",
    )
    p.add_argument("--source", choices=SOURCES, action="append", help="only this source (repeatable)")
    p.add_argument(
        "--min-score",
        type=_in_range(float, RELEVANCE_RANGE),
        default=None,
        help="drop hits whose relevance (0-1, not the score) is below this; 0 keeps every candidate "
        "(default search.minScore)",
    )
    # As the MCP tool's parameters: a window given here wins over a time phrase of the query.
    day = "YYYY-MM-DD, YYYY-MM, DD.MM.YYYY, today/heute, yesterday/gestern, tomorrow/morgen, a weekday or Nd"
    p.add_argument("--since", metavar="DAY", help=f"only notes dated this day or later ({day})")
    p.add_argument("--until", metavar="DAY", help=f"only notes dated this day or earlier ({day})")
    _agent(p, "search as this agent (its memory plus vault and wiki)")
    _timeout(p, QUERY_TIMEOUT_S)


# How long `recall` waits for the daemon by default: it runs before every prompt (a hook), and a
# daemon that is stopped (SIGSTOP, a debugger) or hangs held each prompt for the client's minute.
RECALL_TIMEOUT_S = 10.0
QUERY_TIMEOUT_S = 60.0  # search and preview: asked by a person, who can wait and interrupt
TIMEOUT_RANGE = (0.5, 3600.0)


def _timeout(p: argparse.ArgumentParser, default: float) -> None:
    p.add_argument(
        "--timeout",
        type=_in_range(float, TIMEOUT_RANGE),
        default=default,
        metavar="SECONDS",
        help=f"give up when the daemon has not answered within this many seconds, exit 8 "
        f"(default {default:g})",
    )


def _recall_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("message", help="the current message")
    p.add_argument(
        "--history", metavar="FILE", help="previous turns, one per line or a JSON list (oldest first)"
    )
    _agent(p, "recall as this agent (its memory plus vault and wiki)")
    p.add_argument(
        "-n",
        "--limit",
        type=_in_range(int, LIMIT_RANGE),
        help="most notes in the block, 1-200 (default recall.limit)",
    )
    p.add_argument(
        "--tokens",
        type=_in_range(int, TOKEN_BUDGET_RANGE),
        dest="token_budget",
        help="token budget, 100-50000 (default recall.tokenBudget)",
    )


def _recall(p: argparse.ArgumentParser) -> None:
    _recall_options(p)
    p.add_argument("--preview", action="store_true", help="show per-hit scores and the query analysis")
    _timeout(p, RECALL_TIMEOUT_S)


def _preview(p: argparse.ArgumentParser) -> None:
    _recall_options(p)
    p.set_defaults(preview=True)
    _timeout(p, QUERY_TIMEOUT_S)


def _why(p: argparse.ArgumentParser) -> None:
    p.add_argument("reference", help="the note, e.g. vault/Plugins/Audio recorder")
    p.add_argument("query", help="the query")
    _agent(p, "as this agent")


def _outline(p: argparse.ArgumentParser) -> None:
    p.add_argument("--path", dest="path_prefix", help="only this folder, e.g. Projects")
    p.add_argument(
        "--tokens",
        type=_in_range(int, TOKEN_BUDGET_RANGE),
        dest="token_budget",
        help="token budget, 100-50000 (default 1000)",
    )
    p.add_argument(
        "--source",
        dest="outline_source",
        choices=("wiki", "vault"),
        default="wiki",
        help="outline the wiki (default) or the vault",
    )


def _get(p: argparse.ArgumentParser) -> None:
    p.add_argument("reference", help="a reference as search returns it, e.g. vault/Plugins/Audio recorder")
    _agent(p, "resolve memory/<slug> in this agent's inbox")
    p.add_argument("--links", action="store_true", help="print its links, backlinks and unresolved links")


def _related(p: argparse.ArgumentParser) -> None:
    p.add_argument("reference", help="the note, e.g. vault/Plugins/Audio recorder")
    p.add_argument(
        "-n",
        "--limit",
        type=_in_range(int, RELATED_LIMIT_RANGE),
        default=10,
        help="notes shown, 1-100 (default 10)",
    )
    _agent(p, "as this agent")


def _mcp(p: argparse.ArgumentParser) -> None:
    _agent(p, "the agent's name: a-z, 0-9, '_' and '-'", required=True)


def _memory(p: argparse.ArgumentParser) -> None:
    p.add_argument("-h", "--help", action=_MemoryHelp)  # in place of argparse's (see build_parser)
    p.add_argument(
        "action",
        choices=("list", "write", "edit", "delete"),
        help="list: the inbox's notes; write: create or replace a note; edit: update a note that "
        "exists (refused when it does not; front matter keys not given are kept); delete: move a "
        "note to the inbox's .trash",
    )
    p.add_argument("slug", nargs="?", help="note name (write, edit, delete)")
    _agent(p, "whose inbox", required=True)
    p.add_argument("--content", help="note text (default: read from stdin)")
    p.add_argument("--frontmatter", help='front matter as JSON, e.g. \'{"tags": ["nas"]}\'')
    p.add_argument("--tag", help="list: only notes with this tag")
    p.add_argument(
        "--source",
        choices=("memory", "vault", "wiki", "all"),
        help="list: whose notes (default memory: the agent's own; all: the vault, the wiki and the agent's)",
    )
    p.add_argument("--path", metavar="PREFIX", help="list: only notes whose path starts with this")
    p.add_argument(
        "-n",
        "--limit",
        type=_in_range(int, LIST_LIMIT_RANGE),
        help=f"list: notes shown, {LIST_LIMIT_RANGE[0]}-{LIST_LIMIT_RANGE[1]} (default {LIST_LIMIT_DEFAULT})",
    )


def _config(p: argparse.ArgumentParser) -> None:
    _vault_flags(p)
    p.add_argument(
        "action",
        choices=("check", "example", "path", "show"),
        help="check (or show): validate and print the effective values and where each came from; "
        "example: print a documented file; path: print the file commands read (written or not)",
    )
    p.add_argument(
        "--write",
        nargs="?",
        const="",
        metavar="FILE",
        help="example: write it to FILE (default: the file `sidecar config path` names) and its "
        "folder; an existing file is kept, never overwritten",
    )


def _service(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("install", "uninstall", "status"))
    p.add_argument("--dry-run", action="store_true", help="print the file instead of writing it")
    p.add_argument(
        "--sandbox",
        choices=("auto", "yes", "no"),
        default="auto",
        help="systemd mount-namespace sandboxing (auto: only where unprivileged user namespaces work)",
    )


def _no_options(_p: argparse.ArgumentParser) -> None:
    """The common options only."""


def _completion(p: argparse.ArgumentParser) -> None:
    p.add_argument("shell", choices=("bash", "zsh", "fish"))


# Name -> (help, its own options), in the order `sidecar --help` lists them.
_COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "serve": ("run the daemon in the foreground", _vault_flags),
    "index": ("index the vault now (through the daemon if one runs)", _index),
    "search": ("hybrid search", _search),
    "recall": ("the context block an agent would get for a message (auto-injection)", _recall),
    "preview": ("recall with per-hit scores and the query analysis (for tuning)", _preview),
    "why": ("why a note ranks where it does for a query (scores, boosts, outcome)", _why),
    "outline": ("the wiki's folders, pages and one-line descriptions (for a system prompt)", _outline),
    "get": ("print a whole note by its reference", _get),
    "related": ("notes linked with a note, then notes sharing its links or tags", _related),
    "mcp": ("MCP stdio server for one agent (started by the agent's host)", _mcp),
    "memory": ("an agent's memory inbox: list, write, edit, delete", _memory),
    "config": ("configuration helpers", _config),
    "service": ("install the user service (systemd on Linux, launchd on macOS)", _service),
    "status": ("what the daemon is doing", _no_options),
    "reload": ("re-read the configuration file in the running daemon (as SIGHUP)", _no_options),
    "doctor": ("check what usually goes wrong and say what to do", _vault_flags),
    "completion": ("print a shell completion script (bash, zsh or fish)", _completion),
}


def serve_flags(args: argparse.Namespace, cfg: Config) -> list[str]:
    """The --home/--socket this command was given, absolute: the daemon-down hint names them (a
    daemon started as told without them listens on another socket)."""
    return [
        *(["--home", str(cfg.home)] if getattr(args, "home", None) else []),
        *(["--socket", str(cfg.socket_path)] if getattr(args, "socket", None) else []),
    ]


# How long a command that talks to the daemon waits for a configuration file that is empty (an
# editor truncates it, then writes it): read at that instant, the defaults named another socket,
# and an MCP shim started then talked to it for its whole life.
EMPTY_CONFIG_WAIT_S = 2.0
EMPTY_CONFIG_FRESH_S = 10.0  # an empty file written this recently may be an editor's save
_pause: Callable[[float], None] = time.sleep  # between looks at it (tests replace it)


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "home": getattr(args, "home", None),
        "socket": getattr(args, "socket", None),
        "vault.path": getattr(args, "vault", None),
        "vault.wikiSubfolder": getattr(args, "wiki_subfolder", None),
        "logging.level": getattr(args, "log_level", None),
    }


def socket_now(args: argparse.Namespace) -> Path | None:
    """The daemon's socket as the command line and the configuration file name it now (read
    again), or None when the file does not load: an MCP shim asks when no daemon answers where it
    looked, for the file may have been rewritten since it started."""
    try:
        return load_config(config_file=getattr(args, "config", None), flags=_flags(args)).socket_path
    except ConfigError:
        try:
            return daemon_address(getattr(args, "config", None), _flags(args)).socket_path
        except ConfigError:
            return None


def _wait_while_empty(path: Path | None) -> bool:
    """Whether the configuration file has content within ``EMPTY_CONFIG_WAIT_S`` (True at once
    when it is not empty). Only a file changed in the last seconds is waited for: one left empty
    (every line commented out) would cost each command, a recall hook's every prompt, the wait."""
    try:
        # a modification time in the future (a clock set back, a share's clock) is no fresh save:
        # it would cost every command the wait until that time came
        if path is None or not 0 <= time.time() - path.stat().st_mtime <= EMPTY_CONFIG_FRESH_S:
            return False
    except OSError:
        return False
    deadline = time.monotonic() + EMPTY_CONFIG_WAIT_S
    while _empty(path):
        if time.monotonic() >= deadline:
            return False
        _pause(0.1)
    return True


def config_of(args: argparse.Namespace) -> Config:
    """The configuration this command line names (file, flags, environment)."""
    flags = _flags(args)
    try:
        cfg = load_config(config_file=getattr(args, "config", None), flags=flags)
        talks = args.command in _TALK_TO_THE_DAEMON
        if talks and _empty(cfg.source_file) and _wait_while_empty(cfg.source_file):
            cfg = load_config(config_file=getattr(args, "config", None), flags=flags)  # written meanwhile
    except ConfigError as exc:
        if args.command not in _TALK_TO_THE_DAEMON:
            raise
        # The daemon runs with the configuration it loaded (a reload of a bad file keeps it):
        # reach it anyway, and say what is wrong with the file.
        try:
            cfg = daemon_address(getattr(args, "config", None), flags)
        except ConfigError:
            raise exc from None
        what = " ".join(line.strip() for line in str(exc).splitlines())
        print(
            f"sidecar: warning: {what}; using the daemon at {cfg.socket_path} "
            "(fix the file: sidecar config check)",
            file=sys.stderr,
        )
        return cfg
    if args.command in _TALK_TO_THE_DAEMON and _empty(cfg.source_file):
        # An editor rewriting it, or a truncated file: its home and socket are the defaults now,
        # so "no daemon is listening" would name a socket the running daemon never had.
        print(
            f"sidecar: warning: {cfg.source_file} is empty (being written?); using the defaults "
            f"(socket {cfg.socket_path})",
            file=sys.stderr,
        )
    return cfg


def _empty(path: Path | None) -> bool:
    """A configuration file with nothing but blank and comment lines (a regular file: /dev/null
    is empty on purpose, and a pipe cannot be read twice)."""
    try:
        if path is None or not path.is_file():
            return False
    except OSError:
        return False
    return holds_nothing(path)


# Commands that only ask the daemon: a configuration file that does not load falls back to where
# the daemon is (a typo in the file cut every agent's MCP shim off from a healthy daemon).
_TALK_TO_THE_DAEMON = frozenset(
    {"search", "get", "related", "outline", "recall", "preview", "why", "status", "mcp", "memory", "reload"}
)


# The values a command sends to the daemon, as the usage error names them.
_SENT = {
    "query": "QUERY",
    "message": "MESSAGE",
    "reference": "REFERENCE",
    "slug": "SLUG",
    "content": "--content",
    "frontmatter": "--frontmatter",
    "tag": "--tag",
    "path_prefix": "--path",
    "confirm_deletions": "--confirm-deletions",
}
_UNDECODED = re.compile("[\udc80-\udcff]")  # how Python keeps an argument's non-UTF-8 bytes


def check_text_args(args: argparse.Namespace) -> None:
    """A value to send that holds bytes that are not UTF-8 (a Latin-1 terminal) is a usage error
    naming it; the request could not carry it ("unpaired UTF-16 surrogate", exit 7). Paths are
    not checked: a file name may be any bytes."""
    for dest, name in _SENT.items():
        value = getattr(args, dest, None)
        if isinstance(value, str) and _UNDECODED.search(value):
            raw = value.encode("utf-8", "surrogateescape")
            raise UsageError(
                f"{name} is not UTF-8 text ({raw!r}): sidecar takes UTF-8 (is the terminal set to "
                "another encoding?)"
            )
