"""Command line: parse, load the config once, run one command, turn typed errors into messages
and exit codes. A thin client: only the module of the command given is imported; ``serve`` and
offline ``index`` import the engine lazily, search, get and status only talk to the socket (a test
checks that no engine module gets imported).
"""

from __future__ import annotations

import argparse
import codecs
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import cast

from sidecar.clients.cli_parser import (
    UsageError,
    build_parser,
    check_text_args,
    command_named,
    config_of,
    emit_error,
    set_json_errors,
)
from sidecar.config import Config
from sidecar.contracts.errors import NO_RESTART, ExitCode, NoAnswerError, RemoteError, SidecarError
from sidecar.runtime.notify import LAUNCHD_LABEL, under_launchd

Command = Callable[[argparse.Namespace, Config], int]

# Each command's module and function in sidecar.clients.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("cli_admin", "cmd_serve"),
    "index": ("cli_admin", "cmd_index"),
    "search": ("cli_query", "cmd_search"),
    "get": ("cli_query", "cmd_get"),
    "related": ("cli_query", "cmd_related"),
    "outline": ("cli_query", "cmd_outline"),
    "recall": ("cli_query", "cmd_recall"),
    "preview": ("cli_query", "cmd_recall"),
    "why": ("cli_query", "cmd_why"),
    "status": ("cli_admin", "cmd_status"),
    "reload": ("cli_admin", "cmd_reload"),
    "config": ("cli_admin", "cmd_config"),
    "mcp": ("cli_memory", "cmd_mcp"),
    "service": ("cli_service", "cmd_service"),
    "memory": ("cli_memory", "cmd_memory"),
    "doctor": ("cli_service", "cmd_doctor"),
}


# Commands an agent runs on every prompt (a recall hook) or a tool call: they do not repeat that
# the file holds keys of an older release (renamed, retired), which `config check`, doctor, status
# and the daemon's log say; every other warning and every error they still print.
QUERY_COMMANDS = frozenset(
    {"search", "get", "related", "outline", "recall", "preview", "why", "mcp", "memory"}
)


def command_for(name: str) -> Command:
    module, function = COMMANDS[name]
    return cast(Command, getattr(importlib.import_module(f"sidecar.clients.{module}"), function))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _main(argv)
    except SystemExit as exc:  # the parser's usage error
        if not isinstance(exc.code, int) or not _not_restarted_by_launchd(argv, exc.code):
            raise
        return int(ExitCode.OK)
    finally:
        # --json holds for this command line only: a process that runs main() again (the MCP
        # shim's host, a test) printed the next command's errors as JSON on stdout.
        set_json_errors(False)
    return int(ExitCode.OK) if _not_restarted_by_launchd(argv, code) else code


def _not_restarted_by_launchd(argv: list[str], code: int) -> bool:
    """Whether the launchd agent's daemon ended with an exit a restart cannot help (NO_RESTART),
    said in its log: it then exits 0. launchd restarts every failed exit (KeepAlive
    SuccessfulExit false) and cannot skip one by its code: a daemon refused for a shared socket
    or a configuration error was started again every 30 s for good, lines in a log never rotated."""
    if code not in NO_RESTART or command_named(argv) != "serve" or not under_launchd():
        return False
    print(
        f"sidecar: not_restarted exit={code}: launchd does not start this daemon again (a restart "
        f"cannot help); fix what the line above says, then: launchctl kickstart gui/$(id -u)/{LAUNCHD_LABEL}",
        file=sys.stderr,
    )
    return True


def _main(argv: list[str]) -> int:
    _usable_std_streams()
    # The MCP shim's stdout belongs to the protocol: its errors stay on stderr even with --json.
    json_errors = "--json" in argv[: argv.index("--") if "--" in argv else len(argv)]
    set_json_errors(json_errors and command_named(argv) != "mcp")
    try:
        args = build_parser(command_named(argv)).parse_args(argv)
        check_text_args(args)
        early = _without_configuration(args)
        if early is not None:
            return early
        cfg = config_of(args)
        if (args.command, getattr(args, "action", None)) != ("config", "check"):  # check lists them
            quiet = (*(cfg.outdated if args.command in QUERY_COMMANDS else ()), *cfg.setup_notes)
            if args.command == "serve":  # its log is where a setup is looked at; doctor has a check
                quiet = ()
            for warning in cfg.warnings:
                if warning not in quiet:
                    print(f"sidecar: warning: {warning}", file=sys.stderr)
        _watch_starts(args.command, cfg)
        try:
            code = command_for(args.command)(args, cfg)
        finally:
            _watch_starts(None, cfg)  # a process's next `main` (tests, the MCP host) sets its own
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below
        return code
    except SidecarError as exc:
        return _failed(exc)
    except BrokenPipeError:
        # The reader went away (`sidecar status | head -1`): not an error. Point stdout at
        # /dev/null so the interpreter's final flush does not complain again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.OK)
    except OSError as exc:  # a file or folder this command needed (a service file's folder, ...)
        where = f"{exc.filename}: " if exc.filename else ""
        emit_error(f"{where}{exc.strerror or exc}", "os_error")
        return int(ExitCode.FAILURE)
    except KeyboardInterrupt:
        return 130


# What a command does when the home's daemon is starting (its lock file says so): these say it at
# once, for they must answer fast (the recall prompt hook, the MCP shim's calls) or report it
# (status); the others that talk to the daemon wait for it a bounded time. None for the rest.
_NOT_WAITING = frozenset({"recall", "mcp", "status"})
_NO_DAEMON = frozenset({"serve", "doctor", "config", "service", "completion"})


def _watch_starts(command: str | None, cfg: Config) -> None:
    from sidecar.clients.client import watch_starts

    if command is None or command in _NO_DAEMON:
        watch_starts(None)
        return
    from sidecar.clients.lockholder import StartWatch

    watch_starts(StartWatch(cfg, wait=command not in _NOT_WAITING))


def _without_configuration(args: argparse.Namespace) -> int | None:
    """The exit code of a command that loads no configuration, None for the others: completion,
    `config path` (it names the file even when that file is broken) and `config example`."""
    if args.command == "completion":
        from sidecar.clients.cli_admin import cmd_completion

        return cmd_completion(args)
    if args.command == "config" and args.action != "example" and args.write is not None:
        raise UsageError("--write goes with `sidecar config example`")  # path ignored it silently
    if args.command == "config" and args.action == "path":
        from sidecar.clients.cli_admin import cmd_config_path

        return cmd_config_path(args)
    if args.command == "config" and args.action == "example":  # reads no file: one may be broken
        from sidecar.clients.cli_admin import cmd_config_example

        return cmd_config_example(args)
    return None


def _failed(exc: SidecarError) -> int:
    """One line for a typed error, and its exit code."""
    if isinstance(exc, NoAnswerError):
        emit_error(f"{exc}{_unsure(exc.op)}", exc.code)
        return int(exc.exit_code)
    emit_error(str(exc), exc.code)
    if isinstance(exc, RemoteError):
        return int(_remote_exit(exc.code))
    return int(exc.exit_code)


# The daemon's error codes for a value refused whatever the vault holds: it came from this command
# line (a query too long, an unknown root, a reference with "..", memory/<slug> without --agent,
# a bad slug, a note too large to send). A reference refused for what is there (no such note:
# not_found; too large, offline: unreadable) and the rest are refusals (exit 7).
_MALFORMED = frozenset({"bad_request", "bad_reference", "bad_memory_write", "frame_too_large"})


def _remote_exit(code: str) -> ExitCode:
    """The exit code of a daemon's refusal, as README's table has it: a malformed value is a bad
    command line; a request it did not finish in time may have acted."""
    if code in _MALFORMED:
        return ExitCode.USAGE
    if code == "timeout":
        return ExitCode.NO_ANSWER
    return ExitCode.REQUEST_FAILED


# What to check after a change that got no answer: it may have been made all the same.
_CHECK_AFTER = {
    "write": "the note may still have been written: check (`sidecar memory list --agent NAME`) before "
    "writing again",
    "edit": "the note may still have been changed: check (`sidecar memory list --agent NAME`) before "
    "editing again",
    "delete": "the note may still have been deleted: check with `sidecar memory list --agent NAME`",
    "index": "the sweep may still have been queued: `sidecar status` shows it",
    "reload": "the file may still have been applied: `sidecar status` shows it",
}


def _unsure(op: str) -> str:
    check = _CHECK_AFTER.get(op)
    if check:
        return f"; {check}"
    if op == "health":  # `sidecar status` itself: sending the user to it again helped nobody
        return " (is it overloaded, or stopped by a signal or a debugger? its log may say why)"
    if op in ("recall", "search"):
        return " (is it overloaded or stopped? `sidecar status` says; --timeout sets the wait)"
    return " (is it overloaded or stopped? `sidecar status` says)"


def _escape_unencodable(exc: UnicodeError) -> tuple[str, int]:
    """Characters the output encoding lacks (an ASCII locale, PYTHONIOENCODING) as ``\\uXXXX``:
    readable in text, and still valid inside the strings of --json output."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    out = []
    for ch in exc.object[exc.start : exc.end]:
        n = ord(ch)
        if n > 0xFFFF:  # JSON spells it as a surrogate pair
            n -= 0x10000
            out.append(f"\\u{0xD800 + (n >> 10):04x}\\u{0xDC00 + (n & 0x3FF):04x}")
        else:
            out.append(f"\\u{n:04x}")
    return "".join(out), exc.end


codecs.register_error("sidecar.escape", _escape_unencodable)


def _usable_std_streams() -> None:
    """A closed stdin, stdout or stderr (``>&-``) reads as empty and writes go nowhere, as into a
    closed pipe (the command still acts; it died with a traceback after acting); an output
    encoding that lacks a character escapes it instead of failing the command."""
    for name, mode in (("stdin", "r"), ("stdout", "w"), ("stderr", "w")):
        if getattr(sys, name) is None:
            # open() takes the lowest free descriptor, this one (no socket lands on it then)
            setattr(sys, name, open(os.devnull, mode, encoding="utf-8"))  # noqa: SIM115 (kept open)
        elif name != "stdin":
            reconfigure = getattr(getattr(sys, name), "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="sidecar.escape")
