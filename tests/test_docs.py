"""The docs keep up with the code: every command in the README, every op in docs/protocol.md."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.clients.cli_parser import build_parser

ROOT = Path(__file__).resolve().parent.parent


def test_every_command_is_in_the_readme() -> None:
    """Each `sidecar COMMAND` of the parser appears in README.md."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in sub.choices:  # type: ignore[union-attr]
        assert f"sidecar {name}" in readme, name


def test_every_op_is_in_the_protocol_doc() -> None:
    """Each op the daemon dispatches has a section in docs/protocol.md."""
    doc = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    # The op tables (``"op": self.handler``) of the daemon's handlers and the memory ops; other
    # parts have dicts of that shape too (the MCP shim's tools, the vectors' description).
    parts = [ROOT / "sidecar" / "daemon", ROOT / "sidecar" / "memory"]
    source = "".join(p.read_text() for part in parts for p in part.rglob("*.py"))
    ops = set(re.findall(r'"(\w+)": self\.\w+[,}]', source))
    assert {
        "health",
        "search",
        "recall",
        "why",
        "get",
        "index",
        "reload",
        "list",
        "write",
        "edit",
        "delete",
    } <= ops
    for op in ops:
        assert f"### `{op}`" in doc, op


def test_code_fences_stand_alone_on_their_lines() -> None:
    """A fence line is three backticks and at most a language name: text after a closing fence
    makes it no fence (CommonMark), the block runs on and every later fence pairs the wrong way."""
    for doc in [ROOT / "README.md", ROOT / "RELIABILITY.md", ROOT / "BENCHMARKS.md", *ROOT.glob("docs/*.md")]:
        bad = [
            n
            for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1)
            if line.startswith("```") and not re.fullmatch(r"`{3,}[\w+-]*", line.rstrip())
        ]
        assert bad == [], f"{doc.name}: {bad}"


def test_the_readme_says_how_to_uninstall_and_where_the_agents_notes_are() -> None:
    """An Uninstall section: the command that removes the service, and which folder holds the
    agents' memory (removing the home deleted what agents wrote, and nothing said so)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Uninstall\n", 1)[1].split("\n## ", 1)[0]
    for words in ("sidecar service uninstall", "<home>/agents/", "back it up", "<home>/index/"):
        assert words in section, words
    # What sidecar made, not the model files a person put in models/ (the whole folder went).
    removals = [line for line in section.splitlines() if line.startswith("rm -rf")]
    assert removals and all("/models " not in f"{line} " for line in removals), removals
    assert "~/.sidecar/models/.prepared" in section and "embedder.cacheDir" in section


def _service_steps() -> list[str]:
    """The shell lines of README's "Running as a service" block, but the virtualenv's making
    (the test runs this checkout's sidecar in its place)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Running as a service\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("\n```", 1)[0]
    return [line for line in block.splitlines() if not line.startswith("python3 -m venv")]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the steps install a systemd unit")
@pytest.mark.parametrize(
    ("xdg", "written_before", "weight"),
    [(True, False, "0.7"), (False, False, "0.7"), (False, True, "0.7"), (False, True, "0.6")],
)
def test_the_readme_service_steps_configure_the_daemon(
    tmp_path: Path, xdg: bool, written_before: bool, weight: str
) -> None:
    """README's service steps, run as written in a new HOME, with XDG_CONFIG_HOME set and not:
    the file they write is the one `config check` reads and the installed unit names. They wrote
    ~/.config/sidecar/config.yaml, which no command read with XDG_CONFIG_HOME set: the check said
    "no file", and the unit started a daemon without a vault. A file the quick start and the
    Configuration section had the reader write first is kept: the steps replaced it by the example
    (no vault, the person's settings gone) without a word. Its value at the default (0.6) reads as
    the default, also written in the file: it stays as written if a release changes the default."""
    home = tmp_path / "home"
    program = home / ".local/share/sidecar/venv/bin/sidecar"  # where the steps installed it
    program.parent.mkdir(parents=True)
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m sidecar "$@"\n')
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    vault = tmp_path / "vault"
    vault.mkdir()
    editor = tmp_path / "editor"  # sets vault.path, as the step's comment says
    editor.write_text(
        f"#!/bin/sh\nsed -i '0,/^  path: null$/s||  path: {vault}|' \"$1\"\n"
    )  # the first: vault's
    editor.chmod(0o700)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SIDECAR_", "XDG_")) and k not in ("HOME", "EDITOR", "PYTHONPATH")
    }
    env |= {"HOME": str(home), "EDITOR": str(editor)}
    config_home = tmp_path / "xdg-config" if xdg else home / ".config"
    if xdg:
        env["XDG_CONFIG_HOME"] = str(config_home)
    written = config_home / "sidecar" / "config.yaml"
    mine = f"vault:\n  path: {vault}\nsearch:\n  vectorWeight: {weight}\n"
    if written_before:
        written.parent.mkdir(parents=True)
        written.write_text(mine)
    script = "set -eu\n" + "\n".join(_service_steps()) + "\n"
    done = subprocess.run(
        ["/bin/sh", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"path: {vault}" in written.read_text()
    if written_before:
        assert written.read_text() == mine
        origin = f"default; also written in {written}" if weight == "0.6" else f"file {written}"
        assert f"search.vectorWeight = {weight}  ({origin})" in done.stdout, done.stdout
    assert f"configuration OK ({written})" in done.stdout
    assert f"vault.path = {vault}  (file {written})" in done.stdout
    unit = (config_home / "systemd" / "user" / "sidecar.service").read_text()
    start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert start.endswith(f" serve --config {written}"), start


def test_the_readme_commands_table_has_a_row_per_command_and_the_help_names_every_file_source() -> None:
    """`reload` was in `--help` but had no row in README's Commands table, `config show` was
    nowhere, and `--config FILE`'s help left out $SIDECAR_CONFIG, which README puts first."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith("| `sidecar ")]
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for name in sub.choices:  # type: ignore[union-attr]
        assert any(row.startswith((f"| `sidecar {name} ", f"| `sidecar {name}`")) for row in rows), name
    config = sub.choices["config"]  # type: ignore[index]
    actions = next(a for a in config._actions if a.dest == "action").choices
    row = next(r for r in rows if r.startswith("| `sidecar config"))
    for action in actions:
        assert f"config {action}" in row, action
    help_text = next(a for a in config._actions if a.dest == "config").help
    assert "$SIDECAR_CONFIG" in help_text


@pytest.mark.parametrize("ci", [False, True])
def test_the_test_script_installs_system_packages_only_on_a_ci_runner(tmp_path: Path, ci: bool) -> None:
    """README's "install and run the tests" (`bash .ci/run`) run as root apt-get installed
    systemd on a person's machine when systemd-analyze was missing; the test that uses it skips
    without it. Only a CI runner ($CI set) installs it now. The script's lines before the
    virtualenv is made run with stubs: root, apt-get recording its calls, no systemd-analyze."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    head = script.split("\nVENV=", 1)[0].replace('cd "$(dirname "$0")/.."', "")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    calls = tmp_path / "calls"
    for name, body in (("id", "echo 0"), ("apt-get", f'echo "$*" >> {calls}')):
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    env = {"PATH": str(stubs), **({"CI": "true"} if ci else {})}
    done = subprocess.run(
        ["/bin/bash", "-c", head], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert calls.exists() == ci, done.stdout
