"""Ready-to-paste MCP client configuration for this installation (Claude Code, Codex), as data
(`doctor --json`) and as text: the program that runs sidecar, and the --config/--home/--socket a
host needs to reach the daemon this command looks at. Imports config and service."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any

from sidecar.clients.service import launcher
from sidecar.config import Config
from sidecar.config.loader import default_config_file


def _toml_str(text: str) -> str:
    """A TOML basic string: any Unicode is written as it is; only '"', '\\' and control
    characters are escaped (json.dumps wrote surrogate pairs, which TOML refuses)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:  # a byte of a name that is not UTF-8: not writable in TOML
            out.append("\\uFFFD")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def mcp_config(cfg: Config) -> dict[str, Any]:
    """Ready-to-paste MCP client configuration with this installation's absolute paths, as data."""
    run = launcher()
    env = dict(run.env)
    program, first = run.argv[0], list(run.argv[1:])
    home_args = daemon_args(cfg)
    claude_args = [*first, "mcp", "--agent", "claude", *home_args]
    codex_args = [*first, "mcp", "--agent", "codex", *home_args]
    server: dict[str, Any] = {"command": program, "args": claude_args, **({"env": env} if env else {})}
    add = ["claude", "mcp", "add", "sidecar"]
    for k, v in env.items():
        add += ["-e", f"{k}={v}"]
    toml = [
        "[mcp_servers.sidecar]",
        f"command = {_toml_str(program)}",
        f"args = [{', '.join(_toml_str(a) for a in codex_args)}]",
    ]
    if env:
        toml.append("env = { " + ", ".join(f"{k} = {_toml_str(v)}" for k, v in env.items()) + " }")
    return {
        "claudeCode": {
            "add": shlex.join([*add, "--", program, *claude_args]),
            "json": {"mcpServers": {"sidecar": server}},
        },
        "codex": {"toml": "\n".join(toml) + "\n"},
    }


def mcp_snippets(cfg: Config) -> str:
    """``mcp_config`` as text for a person."""
    snippets = mcp_config(cfg)
    lines = [
        "Claude Code (run once):",
        f"  {snippets['claudeCode']['add']}",
        "  or in .mcp.json / ~/.claude.json:",
        f"  {json.dumps(snippets['claudeCode']['json'])}",
        "Codex (~/.codex/config.toml):",
        *(f"  {line}" for line in snippets["codex"]["toml"].splitlines()),
    ]
    if cfg.source_file is not None and not cfg.source_file.is_file():
        lines.append(
            f"note: the configuration {cfg.source_file} is not a file (a pipe?): a host cannot read it "
            "later; name a file"
        )
    return "\n".join(lines)


def daemon_args(cfg: Config) -> list[str]:
    """What a shim started by an agent's host (with none of this shell's flags or SIDECAR_*
    variables, reading the default configuration file) needs to reach this daemon: the file in
    use when it is another one, and a home or socket that came from a flag or the environment."""
    out: list[str] = []
    if cfg.source_file is not None and cfg.source_file != _default_file():
        out += ["--config", str(cfg.source_file)]
    for key, flag, value in (("home", "--home", cfg.home), ("socket", "--socket", cfg.socket)):
        origin = cfg.origins.get(key, "default")
        if value is not None and origin != "default" and not origin.startswith("file"):
            out += [flag, str(value)]
    return out


def _default_file() -> Path | None:
    try:
        return default_config_file(os.environ).resolve()
    except OSError:  # a folder on the way that cannot be looked into
        return None
