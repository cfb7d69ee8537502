"""The command line as a person meets it: every command form README.md shows works against a real
daemon, user errors are one line with a documented exit code (JSON with --json), closed pipes
are quiet, doctor names what is broken, completion comes from the parser, and the foreground
summary and log lines read well."""

from __future__ import annotations

import itertools
import json
import logging
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar import __version__
from sidecar.clients.cli import COMMANDS, command_for
from sidecar.clients.cli_parser import build_parser
from sidecar.clients.doctor import check_model, render, run_checks
from sidecar.clients.doctor_checks import Probes
from sidecar.clients.foreground import Eta, Summary
from sidecar.config import load_config, render_example
from sidecar.contracts.errors import ExitCode
from sidecar.runtime.logs import JournaldFormatter
from sidecar.runtime.release import build_id, this_release

from .conftest import REPO, DaemonProcess, write
from .daemon_process import started_as_a_user_would

NO_MODEL = {"SIDECAR_EMBEDDER_ENABLED": "false"}  # these tests are about the CLI, not vectors


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One real daemon (keyword search only) on a tiny vault for the whole module."""
    notes = {
        "Audio.md": "# Audio recorder\n\nRecord a lecture with my microphone.\n",
        "Plugins/Audio recorder.md": "# Audio recorder\n\nThe plugin records audio.\n",
        "wiki/Backups.md": "# Backups\n\nThe NAS is backed up every night at 2:00.\n",
    }
    d = started_as_a_user_would(tmp_path_factory.mktemp("cli"), notes)
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.stop()


def _run(d: DaemonProcess, *args: str, stdin: str = "", env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        capture_output=True,
        text=True,
        input=stdin,
        env={**d.env, "SIDECAR_HOME": str(d.home), **(env or {})},
        timeout=120,
        check=False,
    )


# --- the README's own command forms ----------------------------------------------------------

_PARSE_ONLY = {"serve", "mcp"}  # a second daemon would be refused; mcp waits for a client


def readme_forms() -> list[str]:
    """Every `sidecar COMMAND ...` in README.md (inline code and shell blocks), as written."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    pieces = re.findall(r"`([^`\n]+)`", text)
    pieces += [line for block in re.findall(r"```sh\n(.*?)```", text, re.S) for line in block.splitlines()]
    names = "|".join(sorted({*COMMANDS, "completion"}, key=len, reverse=True))
    forms = []
    for piece in pieces:
        for m in re.finditer(rf"(?:^|[\s/])sidecar ((?:{names})\b.*)", piece):
            form = re.split(r"\s+(?:#|>|&&|;|\|(?!\|))\s*|\s+\|\s", m.group(1))[0].strip()
            if "$(" in piece[: m.start()] and form.endswith(")"):  # config=$(… sidecar config path)
                form = form[:-1]
            forms.append(form)
    return list(dict.fromkeys(forms))


def _expand(form: str) -> list[list[str]]:
    """A documented form -> concrete command lines: alternatives (``a\\|b``) each, optional
    ``[...]`` parts included, an optional argument of one (``[--write [FILE]]``) given and left
    out, placeholders replaced by values of the test vault."""
    nested = re.search(r"\[(-[^\[\]]*?)\s*\[([^\[\]]+)\]\]", form)
    if nested:  # it was passed as the word "[FILE]", and the form without it never ran
        head, tail = form[: nested.start()], form[nested.end() :]
        with_it = f"{head}{nested.group(1)} {nested.group(2)}{tail}"
        return _expand(with_it) + _expand(f"{head}{nested.group(1)}{tail}")
    # Optional parts start with a dash ("[--agent A]"); a wiki-link ("[[Backups]]") is a value.
    form = re.sub(r"\[(-[^\]]*)\]", r"\1", form).replace("…", "DIR")
    form = form.replace("vault/<path>", "vault/Audio")
    words = shlex.split(form.replace("\\|", "|"))
    alternatives = [w.split("|") if "|" in w and not w.startswith("-") else [w] for w in words]
    lines: list[list[str]] = [[]]
    for alt in alternatives:
        lines = [[*line, a] for line in lines for a in alt]
    return lines


def _concrete(words: list[str], d: DaemonProcess, history: Path, config: Path) -> list[str]:
    values = {
        "QUERY": "backed up every night",
        "REFERENCE": "wiki/Backups",
        "MESSAGE": "when is the NAS backed up?",
        "N": "3",
        "S": "wiki",
        "X": "0.1",
        "A": "me",
        "NAME": "me",
        "SLUG": "readme-note",
        "ROOT": "vault",
        "SECONDS": "30",
        "FOLDER": "Plugins",  # a folder of the test vault, not the word
    }
    by_option = {
        "--vault": str(d.vault),
        "--home": str(d.home),
        "--history": str(history),
        "--config": str(config),
        "--wiki-subfolder": "wiki",
        "--tokens": "800",  # a token budget: 100 at least
        "--since": "2020-01-01",  # a window holding the test vault's notes
        "--until": "today",
        # `config example --write FILE`: never the default file, which every later test reads.
        "--write": str(config.parent / "example.yaml"),
    }
    out = []
    for i, w in enumerate(words):
        prev = words[i - 1] if i else ""
        out.append(by_option.get(prev, values.get(w, w)) if w.isupper() or prev in by_option else w)
    return out


def test_readme_lists_every_command_form() -> None:
    """The extraction finds the forms (a broken extractor must not pass vacuously)."""
    forms = readme_forms()
    assert len(forms) >= 25, forms
    shown = {f.split()[0] for f in forms}
    assert shown >= set(COMMANDS) - {"preview"} | {"doctor", "completion"}, set(COMMANDS) - shown
    assert "memory list --agent NAME" in forms
    assert any(f.startswith("memory write|edit|delete SLUG --agent NAME") for f in forms)


def test_every_readme_command_form_works(shared: DaemonProcess, tmp_path: Path) -> None:
    """Each form README.md shows runs (against the daemon where it needs one) and exits 0."""
    history = write(tmp_path / "history.txt", "we talked about the NAS\n")
    config = write(tmp_path / "config.yaml", f"vault:\n  path: {shared.vault}\nembedder:\n  enabled: false\n")
    parser = build_parser()
    ran = 0
    for form in readme_forms():
        for words in _expand(form):
            argv = _concrete(words, shared, history, config)
            if argv[0] in _PARSE_ONLY:
                parser.parse_args(argv)  # SystemExit here fails the test
                continue
            # `config example --write` alone writes the file `config path` names: one in tmp here.
            named = tmp_path / "named" / "config.yaml"
            env = {"SIDECAR_CONFIG": str(named)} if argv[-1] == "--write" else None
            r = _run(shared, *argv, stdin="A note from the README test.\n", env=env)
            assert r.returncode == 0, f"sidecar {shlex.join(argv)} (from `sidecar {form}`): {r.stderr}"
            assert "Traceback" not in r.stderr
            if "--write" in argv:
                assert Path(named if argv[-1] == "--write" else argv[argv.index("--write") + 1]).is_file()
            ran += 1
    assert ran >= 30


@pytest.mark.parametrize(
    "argv",
    [
        ["memory", "write", "--agent", "me", "my-note", "--content", "x"],
        ["memory", "--agent", "me", "write", "my-note", "--content", "x"],
        ["memory", "write", "my-note", "--agent", "me", "--content", "x"],
        ["memory", "--content", "x", "write", "--agent", "me", "my-note"],
    ],
)
def test_options_and_positionals_in_any_order(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.action, args.slug, args.agent, args.content) == ("write", "my-note", "me", "x")


# --- user errors: one line, a documented exit code --------------------------------------------


def _one_line(r: Any, code: int, needle: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("sidecar: warning:")]
    assert len(lines) == 1 and needle in lines[0], r.stderr


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (["recall", "hi", "--history", "missing.txt"], ExitCode.USAGE, "--history missing.txt: No such file"),
        (
            ["memory", "edit", "--agent", "me", "nope", "--content", "x"],
            ExitCode.REQUEST_FAILED,
            "sidecar memory write",
        ),
        (["why", "vault/Nope", "backup"], ExitCode.REQUEST_FAILED, "no such note"),
        (["get", "vault/Nope"], ExitCode.REQUEST_FAILED, "no note"),
        (["search", "x", "--limit", "abc"], ExitCode.USAGE, "invalid int value: 'abc'"),
        # a value out of the daemon's range is a bad command line too, named with the range
        (["search", "x", "--limit", "0"], ExitCode.USAGE, "--limit: 0 is not between 1 and 200"),
        (["search", "x", "--limit", "201"], ExitCode.USAGE, "--limit: 201 is not between 1 and 200"),
        # Relevance is 0-1: a floor above it dropped every hit with no word of why.
        (["search", "x", "--min-score", "2"], ExitCode.USAGE, "--min-score: 2 is not between 0 and 1"),
        (["search", "x", "--min-score", "1.01"], ExitCode.USAGE, "--min-score: 1.01 is not between 0 and 1"),
        (["search", "x", "--min-score", "-0.1"], ExitCode.USAGE, "--min-score: -0.1 is not between 0 and 1"),
        (["search", "x", "--min-score", "nan"], ExitCode.USAGE, "--min-score: nan is not between 0 and 1"),
        (["recall", "x", "--limit", "0"], ExitCode.USAGE, "--limit: 0 is not between 1 and 200"),
        # -n as in head, grep -m and qmd: the same option, the same range
        (["search", "x", "-n", "0"], ExitCode.USAGE, "-n/--limit: 0 is not between 1 and 200"),
        (["related", "vault/Audio", "-n", "101"], ExitCode.USAGE, "-n/--limit: 101 is not between 1 and 100"),
        (["recall", "x", "--tokens", "99"], ExitCode.USAGE, "--tokens: 99 is not between 100 and 50000"),
        (["outline", "--tokens", "50001"], ExitCode.USAGE, "--tokens: 50001 is not between 100 and 50000"),
        (
            ["related", "vault/Audio", "--limit", "101"],
            ExitCode.USAGE,
            "--limit: 101 is not between 1 and 100",
        ),
        (
            ["memory", "write", "--agent", "me", "n", "--frontmatter", "{", "--content", "x"],
            ExitCode.USAGE,
            "JSON",
        ),
        (["mcp", "--agent", "_bad"], ExitCode.USAGE, "starting with a letter or digit"),
        (["mcp", "--agent", "alice", "--agent", "bob"], ExitCode.USAGE, "--agent given twice"),
        (["serve", "--vault", "~/path/to/vault"], ExitCode.CONFIG, "the shell did not expand '~'"),
        (["serve"], ExitCode.SOCKET_IN_USE, "another sidecar daemon is already serving"),
    ],
)
def test_user_errors_are_one_line_with_their_exit_code(
    shared: DaemonProcess, argv: list[str], code: int, needle: str
) -> None:
    _one_line(_run(shared, *argv), code, needle)


def test_errors_as_json_with_json(shared: DaemonProcess, tmp_path: Path) -> None:
    r = _run(shared, "search", "x", "--limit", "abc", "--json")
    assert r.returncode == ExitCode.USAGE
    assert json.loads(r.stdout)["error"]["code"] == "usage"
    r = _run(shared, "get", "vault/Nope", "--json")
    assert r.returncode == ExitCode.REQUEST_FAILED and json.loads(r.stdout)["error"]["code"] == "not_found"
    r = _run(shared, "search", "x", "--json", env={"SIDECAR_HOME": str(tmp_path / "other")})
    assert r.returncode == ExitCode.NOT_RUNNING and json.loads(r.stdout)["error"]["code"] == "not_running"
    # status too: the documented {"error": {"code", "message"}}, beside running: false
    r = _run(shared, "status", "--json", env={"SIDECAR_HOME": str(tmp_path / "other")})
    status = json.loads(r.stdout)
    assert r.returncode == ExitCode.NOT_RUNNING and status["running"] is False
    assert status["error"]["code"] == "not_running" and "no sidecar daemon" in status["error"]["message"]
    # The hint to start it names the configuration file whose socket was tried (it said --vault
    # PATH, which starts a daemon on another socket when the file sets home: or socket:).
    conf = tmp_path / "other.yaml"
    conf.write_text("search: {minScore: 0.1}\n")
    r = _run(
        shared, "search", "x", "--config", str(conf), "--json", env={"SIDECAR_HOME": str(tmp_path / "other")}
    )
    assert f"sidecar serve --config {conf}" in json.loads(r.stdout)["error"]["message"]
    # ... and the --home it was given (a daemon started without it listens on another socket).
    other = tmp_path / "elsewhere"
    for argv in (["search", "x"], ["status"], ["memory", "list", "--agent", "claude"], ["reload"]):
        r = _run(shared, *argv, "--home", str(other), "--json")
        assert f"sidecar serve --home {other}" in json.loads(r.stdout)["error"]["message"], argv


def test_every_command_takes_json() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name, p in sub.choices.items():  # type: ignore[attr-defined]
        assert "--json" in p._option_string_actions, name


@pytest.mark.parametrize("argv", [["status"], ["search", "backed up"], ["memory", "list", "--agent", "me"]])
def test_a_closed_pipe_is_not_an_error(shared: DaemonProcess, argv: list[str]) -> None:
    """`sidecar status | head -1` when head has gone: no BrokenPipeError traceback, exit 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sidecar", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**shared.env, "SIDECAR_HOME": str(shared.home)},
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and "Traceback" not in err and "Error" not in err


def test_config_errors_exit_3_listing_all(shared: DaemonProcess, tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.yaml", "vault: /data/notes\nsearch:\n  limit: many\n")
    r = _run(shared, "config", "check", "--config", str(bad))
    assert r.returncode == ExitCode.CONFIG and "Traceback" not in r.stderr
    assert "2 configuration problems" in r.stderr and "vault is a section" in r.stderr
    assert "search.limit = 'many': expected an integer" in r.stderr


def test_unknown_environment_variable_is_a_warning(shared: DaemonProcess) -> None:
    r = _run(shared, "status", env={"SIDECAR_SEARCH_LIMITT": "3", "SIDECAR_CI_VENV": "/tmp/v"})
    assert r.returncode == 0 and "Index:" in r.stdout
    assert r.stderr.splitlines() == [
        "sidecar: warning: environment: SIDECAR_SEARCH_LIMITT is not a sidecar setting and is ignored "
        "(did you mean SIDECAR_SEARCH_LIMIT?)"
    ]
    r = _run(shared, "config", "check", env={"SIDECAR_SEARCH_LIMITT": "3"})
    assert r.returncode == 0 and "configuration with 1 warning(s)" in r.stdout
    assert "warning: environment: SIDECAR_SEARCH_LIMITT" in r.stdout
    assert r.stderr == ""  # check lists its warnings once, in its report


def test_serve_waits_for_a_missing_vault(daemon_factory: Any, tmp_path: Path) -> None:
    """A vault folder that does not exist (a share not mounted yet) is a warning line naming it;
    the daemon starts and serves."""
    d = daemon_factory(tmp_path / "nas" / "notes", env=NO_MODEL).start(wait=None)
    d.wait_for(lambda h: h["index"]["sweeps"] >= 1, timeout=120)
    first = d.log.read_text().splitlines()[0]
    assert first.startswith("sidecar: warning: the vault folder") and str(tmp_path / "nas" / "notes") in first
    assert "waiting for it" in first


def test_version_names_the_model() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sidecar", "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.startswith("sidecar ") and "model multilingual-e5-small" in out.stdout


# --- doctor ---------------------------------------------------------------------------------


def test_a_configuration_file_that_does_not_load_leaves_clients_the_daemon(
    shared: DaemonProcess, tmp_path: Path
) -> None:
    """A typo in the configuration file (the running daemon keeps its own): clients that only
    ask the daemon still reach it, at the home and socket the file names, and warn in one line
    (every client exited 3, each agent's MCP shim with them); other commands still refuse it, and
    a file named but missing is not guessed at."""
    broken = tmp_path / "c.yaml"
    broken.write_text(f"home: {shared.home}\nsearch:\n  limt: 5\n")
    env = {k: v for k, v in shared.env.items() if k != "SIDECAR_HOME"}  # the file says where
    r = subprocess.run(
        [sys.executable, "-m", "sidecar", "search", "microphone", "--config", str(broken)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0 and "vault/Audio" in r.stdout, r.stderr
    (warning,) = [line for line in r.stderr.splitlines() if "limt" in line]  # one line
    assert warning.startswith("sidecar: warning:") and "using the daemon at" in warning
    broken.write_text(f'home: "{shared.home}"  # mine\nsearch: [\n')  # not even YAML: one line too
    r = subprocess.run(
        [sys.executable, "-m", "sidecar", "status", "--config", str(broken)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0 and "invalid YAML at line 3" in r.stderr and r.stderr.count("\n") == 1
    r = _run(shared, "doctor", "--config", str(broken))
    assert r.returncode == ExitCode.CONFIG
    # No daemon at the home the file names: the hint to start one names the file (it said
    # `sidecar serve --vault PATH`, a daemon of another home).
    broken.write_text(f"home: {tmp_path / 'elsewhere'}\nsearch:\n  limt: 5\n")
    r = subprocess.run(
        [sys.executable, "-m", "sidecar", "status", "--config", str(broken)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    said = r.stdout + r.stderr
    assert f"sidecar serve --config {broken.resolve()}" in said and "--vault PATH" not in said, said
    r = _run(shared, "search", "x", "--config", str(tmp_path / "missing.yaml"))
    assert r.returncode == ExitCode.CONFIG and "not found" in r.stderr


def test_doctor_passes_on_a_healthy_setup(shared: DaemonProcess) -> None:
    r = _run(shared, "doctor")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "all checks passed" in r.stdout and "FAIL" not in r.stdout
    names = ("vault", "file events", "model", "daemon", "one daemon per home", "service", "storage", "disk")
    for name in names:
        assert f"ok    {name}" in r.stdout
    exe = str(Path(sys.executable).parent / "sidecar")
    assert f'"command": "{exe}"' in r.stdout or "sidecar mcp --agent claude" in r.stdout
    assert "[mcp_servers.sidecar]" in r.stdout and "--home" in r.stdout


def test_doctor_checks_the_default_model_files() -> None:
    check = check_model(load_config(env={}))
    assert check.ok and "sha256 verified" in check.verdict


def _failed(checks: list[Any]) -> dict[str, Any]:
    return {c.name: c for c in checks if not c.ok}


def test_doctor_names_a_stopped_daemon_and_a_broken_model(tmp_path: Path) -> None:
    model = tmp_path / "my-model"
    write(model / "model.onnx", "not really")
    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "home"), "SIDECAR_EMBEDDER_PATH": str(model)})
    failed = _failed(run_checks(cfg))
    assert set(failed) == {"daemon", "model"}, failed
    assert "no daemon answers" in failed["daemon"].verdict and "sidecar serve" in failed["daemon"].todo
    assert "tokenizer.json" in failed["model"].verdict
    assert "FAIL  model" in render(run_checks(cfg), cfg)


def test_doctor_names_a_missing_vault(tmp_path: Path) -> None:
    """A vault folder that is not there fails the vault check (doctor said "all checks passed"
    while status showed the vault offline); a vault without its wiki folder says so."""
    env = {**NO_MODEL, "SIDECAR_HOME": str(tmp_path / "home")}
    cfg = load_config(flags={"vault.path": str(tmp_path / "nothere")}, env=env)
    failed = _failed(run_checks(cfg))
    assert "does not exist" in failed["vault"].verdict and "vault.path" in failed["vault"].todo
    write(tmp_path / "v" / "Note.md", "# Note\n")  # an empty folder is a warning of its own
    cfg = load_config(flags={"vault.path": str(tmp_path / "v"), "vault.wikiSubfolder": "Wikki"}, env=env)
    vault = next(c for c in run_checks(cfg) if c.name == "vault")
    assert vault.ok and "Wikki/ is not in the vault" in vault.verdict
    # Named on purpose and not there: a warning; a folder of a near name there (other case, cut
    # short): the one meant. Both were a plain "ok".
    assert vault.warning and "fix vault.wikiSubfolder" in vault.todo, vault
    (tmp_path / "v" / "wiki").mkdir()
    for named in ("Wiki", "wi", "Wikki"):
        cfg = load_config(flags={"vault.path": str(tmp_path / "v"), "vault.wikiSubfolder": named}, env=env)
        vault = next(c for c in run_checks(cfg) if c.name == "vault")
        assert vault.ok and vault.warning and f"{named}/ is not in the vault" in vault.verdict, vault
        assert "did you mean wiki/?" in vault.verdict and "vault.wikiSubfolder: wiki" in vault.todo
    (tmp_path / "v" / "wiki").rmdir()
    cfg = load_config(flags={"vault.path": str(tmp_path / "v")}, env=env)  # the default name, no wiki
    vault = next(c for c in run_checks(cfg) if c.name == "vault")
    assert vault.ok and not vault.warning and "did you mean" not in vault.verdict, vault


def test_a_vault_without_the_optional_wiki_is_no_warning(tmp_path: Path) -> None:
    """The default wiki name written in the file (`config example --write` writes every key) is
    not a name set on purpose; and for that name only another case of it is a near folder:
    `Wikipedia/` beside no wiki was 'did you mean Wikipedia/?', in doctor and status alike."""
    from sidecar.clients.cli_render import _no_wiki

    env = {**NO_MODEL, "SIDECAR_HOME": str(tmp_path / "home")}
    notes = tmp_path / "notes"
    write(notes / "a.md", "# a\n")
    (notes / "Wikipedia").mkdir()
    f = tmp_path / "config.yaml"
    f.write_text(render_example().replace("  path: null", f"  path: {notes}", 1))
    cfg = load_config(config_file=str(f), env=env)
    assert cfg.origins["vault.wikiSubfolder"] != "default"
    vault = next(c for c in run_checks(cfg) if c.name == "vault")
    assert vault.ok and not vault.warning and "did you mean" not in vault.verdict, vault
    roots = [{"name": "vault", "path": str(notes)}]
    assert "optional" in _no_wiki(str(notes / "wiki"), roots)
    # Set on purpose, a prefix still counts; the default name in another case too.
    assert "did you mean Wikipedia/?" in _no_wiki(str(notes / "Wiki"), roots)
    (notes / "Wiki").mkdir()
    vault = next(c for c in run_checks(cfg) if c.name == "vault")
    assert vault.warning and "did you mean Wiki/?" in vault.verdict, vault
    assert "did you mean Wiki/?" in _no_wiki(str(notes / "wiki"), roots)


def test_doctor_names_a_home_on_a_share_and_a_low_watch_limit(shared: DaemonProcess, tmp_path: Path) -> None:
    assert shared.vault is not None
    for i in range(12):
        (shared.vault / f"Folder {i}").mkdir(exist_ok=True)
    table = write(
        tmp_path / "mountinfo",
        f"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 0:50 / {shared.home} rw - cifs //nas/home rw\n",
    )
    limit = write(tmp_path / "max_user_watches", "16\n")
    cfg = load_config(flags={"home": str(shared.home), "vault.path": str(shared.vault)}, env=NO_MODEL)
    failed = _failed(run_checks(cfg, Probes(inotify_limit=limit, mount_table=table)))
    assert set(failed) == {"storage", "file events"}, failed
    assert "network filesystem (cifs)" in failed["storage"].verdict and "local" in failed["storage"].todo
    assert "inotify limit is 16" in failed["file events"].verdict
    assert "fs.inotify.max_user_watches" in failed["file events"].todo


# --- completion, foreground summary, journald -------------------------------------------------


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_bash_completion_from_the_parser(tmp_path: Path) -> None:
    script = subprocess.run(
        [sys.executable, "-m", "sidecar", "completion", "bash"], capture_output=True, text=True, check=True
    ).stdout
    f = write(tmp_path / "c.bash", script)

    def complete(*words: str) -> list[str]:
        line = " ".join(["sidecar", *words])
        prog = (
            f"source {f}; COMP_WORDS=({line}); COMP_CWORD={len(words)}; _sidecar; "
            'printf "%s\\n" "${COMPREPLY[@]}"'
        )
        return subprocess.run(["bash", "-c", prog], capture_output=True, text=True, check=True).stdout.split()

    assert "doctor" in complete("do") and complete("memory", "w") == ["write"]
    assert "--confirm-deletions" in complete("index", "--con")
    assert complete("search", "--source", "w") == ["wiki"]
    # a value of the user's comes next: nothing offered (it offered the options); a positional's
    # choice is offered once (memory list <TAB> offered list write edit delete again)
    assert complete("search", "--limit", "") == []
    assert complete("search", "-n", "") == []
    assert complete("memory", "--agent", "") == []
    after = complete("memory", "list", "")
    assert "--agent" in after and "write" not in after


def test_each_command_resolves_and_its_module_loads_no_engine() -> None:
    """main imports only the module of the command given; none of them loads an engine at import
    (serve and an offline index import the daemon when they run)."""
    assert all(callable(command_for(name)) for name in COMMANDS)
    modules = sorted({f"sidecar.clients.{module}" for module, _ in COMMANDS.values()})
    code = (
        f"import sys, {', '.join(modules)};"
        "heavy = {'onnxruntime', 'tokenizers', 'lancedb', 'tantivy', 'pyarrow', 'numpy'} & set(sys.modules);"
        "print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_completion_name_every_command(shell: str) -> None:
    text = subprocess.run(
        [sys.executable, "-m", "sidecar", "completion", shell], capture_output=True, text=True, check=True
    ).stdout
    for name in COMMANDS:
        assert name in text
    if shutil.which(shell):
        syntax = ["zsh", "-n"] if shell == "zsh" else ["fish", "--no-execute"]
        subprocess.run([*syntax], input=text, text=True, check=True)


def test_eta_is_steady_while_vectors_arrive_in_steps() -> None:
    """Vectors land 256 at a time every 2.56 s (100 chunks/s); sampled every 0.5 s, the ETA counts
    down smoothly instead of jumping with each step."""
    eta, total, etas = Eta(), 10_000, []
    for tick in range(1, 120):
        now = tick * 0.5
        done = int(now / 2.56) * 256
        left = eta.update(done, total, now)
        if left is not None:
            etas.append((now, left))
    assert etas
    for (t0, a), (t1, b) in itertools.pairwise(etas):
        assert abs((a - b) - (t1 - t0)) < 1.0, (t0, a, b)  # never a jump of a whole step (2.56 s)
    true_left = (total - int(59.5 / 2.56) * 256) / 100 - (59.5 - int(59.5 / 2.56) * 2.56)
    assert abs(etas[-1][1] - true_left) < 5


def _health(
    phase: str, sweeps: int, pending: int, state: str = "ok", first_done: bool | None = None
) -> dict[str, Any]:
    """Health as the daemon answers it; the first sweep done (by default) once a sweep ended
    and none of file events' paths only (``starting``) stands for it."""
    return {
        "version": "0.1.0",
        "socket": "/run/s.sock",
        "vault": "/v",
        "index": {
            "phase": phase,
            "sweeps": sweeps,
            "first_sweep_done": sweeps >= 1 and phase != "starting" if first_done is None else first_done,
            "progress": {"done": 10, "total": 100},
            "files": 100,
            "chunks": 1000,
            "pending_vectors": pending,
        },
        "embedder": {"state": state, "model": "m"},
        "roots": [{"name": "vault", "mode": "events", "path": "/v"}],
        "vectors": {"serving": "vectors_m", "serving_model": "m", "building": None, "building_pending": 0},
    }


def test_foreground_summary_says_keyword_ready_eta_and_done() -> None:
    clock = iter(float(t) for t in range(0, 1000, 30))
    s = Summary(clock=lambda: next(clock))
    said = s.lines(_health("indexing", 0, 1000))
    said += s.lines(_health("idle", 1, 1000))
    said += s.lines(_health("embedding", 1, 700))
    said += s.lines(_health("embedding", 1, 400))
    said += s.lines(_health("idle", 1, 0))
    said += s.lines(_health("idle", 1, 0))
    text = "\n".join(said)
    assert "listening on /run/s.sock" in said[0] and "reading 100 notes" in said[1]
    assert "keyword search ready: 100 notes, 1,000 chunks" in text
    assert re.search(r"vectors: 400 of 1,000 chunks to embed, about \d+s left", text)
    assert text.count("done: every chunk has a vector") == 1


@pytest.mark.parametrize("phase", ["starting", "scanning", "indexing"])
def test_foreground_summary_is_not_ready_after_a_sweep_before_the_first_whole_one(phase: str) -> None:
    """A sweep of file events' paths (or of some roots) ended before the first sweep of every
    root: `sidecar serve` says no "keyword search ready" over the few notes it wrote, neither
    before the sweep of every root begins nor while it runs (``sweeps`` is 1 then: the summary
    said "ready: 1 notes" of 34 and, once only, never the real count)."""
    s = Summary(clock=lambda: 0.0)
    said = "\n".join(s.lines(_health(phase, 1, 0, first_done=False)))
    assert "keyword search ready" not in said
    assert "keyword search ready" in "\n".join(s.lines(_health("idle", 2, 0)))


def test_foreground_summary_keeps_the_vectors_lines_through_a_rebuild_after_ready() -> None:
    """A rebuild empties the index (its first sweep is to come again): once `sidecar serve` said
    the keyword search ready it goes on with the vectors' progress meanwhile."""
    s = Summary(clock=lambda: 0.0)
    assert "keyword search ready" in "\n".join(s.lines(_health("idle", 1, 0)))
    said = "\n".join(s.lines(_health("indexing", 2, 500, first_done=False)))
    assert "vectors: 500 of 1,000 chunks to embed" in said


def test_foreground_summary_done_names_the_vector_limit_when_chunks_are_past_it() -> None:
    """`sidecar index` said "done: every chunk has a vector" with chunks of a long note past
    index.maxVectorChunksPerNote found by keywords only."""
    s = Summary(clock=lambda: 0.0)
    h = _health("idle", 1, 0)
    h["index"]["keyword_only"] = {
        "notes": 1,
        "chunks": 7,
        "limit": 5,
        "setting": "index.maxVectorChunksPerNote",
    }
    said = "\n".join(s.lines(h))
    assert "done: every chunk within index.maxVectorChunksPerNote has a vector" in said
    assert "every chunk has a vector" not in said


def test_foreground_summary_follows_a_model_switch_to_its_end() -> None:
    """`sidecar serve` in a terminal at the start of a model switch: no "done" before the tables
    are attached, then the switch's progress, and "done" only once the new model's table serves.
    It said "done: every chunk has a vector" two seconds in and nothing more."""
    clock = iter(float(t) for t in range(0, 1000, 30))
    s = Summary(clock=lambda: next(clock))

    def health(serving: str | None, building: str | None, waiting: int) -> dict[str, Any]:
        h = _health("idle", 1, 0)
        h["embedder"]["model"] = "new@1"
        h["vectors"] = {
            "serving": serving,
            "serving_model": "old@1",
            "building": building,
            "building_pending": waiting,
        }
        return h

    said = s.lines(health(None, None, 0))  # the model loaded, the tables not attached yet
    assert not any("done" in line for line in said)
    said += s.lines(health("vectors_old", "vectors_new", 1000))
    said += s.lines(health("vectors_old", "vectors_new", 600))
    said += s.lines(health("vectors_old", "vectors_new", 300))
    assert not any("done" in line for line in said)
    text = "\n".join(said)
    assert "model switch: 1,000 of 1,000 chunks still wait for new@1's vectors" in text
    assert re.search(r"model switch: 300 of 1,000 chunks still wait for new@1's vectors, about \d+s", text)
    assert "searches use old@1's until then" in text
    said = s.lines(health("vectors_new", None, 0))
    assert len(said) == 1 and said[0].startswith("done: every chunk has a vector")


def test_foreground_summary_says_which_model_answers_for_a_failed_one() -> None:
    """`sidecar serve` in a terminal says once that the configured model failed to load and which
    model answers in its place (it said nothing: the state is ok)."""
    s = Summary(clock=lambda: 0.0)
    h = _health("idle", 1, 0)
    h["embedder"]["fallback"] = {"configured": "all-MiniLM-L6-v2", "error": "model not found"}
    said = s.lines(h) + s.lines(h)
    assert [line for line in said if "failed to load" in line] == [
        "vectors: the configured model all-MiniLM-L6-v2 failed to load (model not found); "
        "m answers in its place"
    ]


def test_journald_lines_carry_their_priority() -> None:
    fmt = JournaldFormatter("%(levelname)s %(name)s %(message)s")

    def line(level: int, msg: str) -> str:
        return fmt.format(logging.LogRecord("sidecar.x", level, __file__, 1, msg, None, None))

    assert line(logging.ERROR, "sweep_failed error=x") == "<3>ERROR sidecar.x sweep_failed error=x"
    assert line(logging.WARNING, "w").startswith("<4>") and line(logging.INFO, "i").startswith("<6>")
    # A value holding a newline (a file name) cannot forge a line: escaped, one event one line.
    assert line(logging.INFO, "file_skipped path=a\n<2>CRITICAL x.md") == (
        "<6>INFO sidecar.x file_skipped path=a\\n<2>CRITICAL x.md"
    )
    record = logging.LogRecord("sidecar.x", logging.ERROR, __file__, 1, "failed\tnow", None, None)
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    lines = fmt.format(record).splitlines()
    assert lines[0] == "<3>ERROR sidecar.x failed\\tnow" and lines[-1] == "<3>ValueError: boom"


def test_each_skipped_file_is_named_once_at_info(
    harness: Any, vault: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A symlink leading out of the vault is named in the log with its reason at the first sweep,
    not again at every later one."""
    outside = write(tmp_path / "outside.md", "# Secret\n\nnot part of the vault\n")
    (vault / "Link.md").symlink_to(outside)
    with caplog.at_level(logging.INFO, logger="sidecar.index"):
        harness.sweep()
        harness.sweep()
    named = [r for r in caplog.records if r.getMessage().startswith("file_skipped")]
    assert len(named) == 1 and named[0].levelno == logging.INFO
    assert str(vault / "Link.md") in named[0].getMessage() and "reason=" in named[0].getMessage()


def test_status_shows_a_batch_of_changes_being_indexed(shared: DaemonProcess) -> None:
    """After the first sweep, thousands of changed notes (a checkout, a synced folder) show as
    work in progress, not as a plain "ready" beside the old note count."""
    from sidecar.clients.cli_render import render_status

    h = shared.health()
    h["index"].update(state="ready", phase="indexing", progress={"done": 1_825, "total": 5_000})
    assert "Index: ready; indexing changes (1,825/5,000 notes)" in render_status(h)
    h["index"].update(phase="idle", progress={"done": 3, "total": 3})
    assert "Index: ready\n" in render_status(h)
    # A note's read that hangs on a share: status says which root and note indexing waits for.
    assert "to answer the read of" not in render_status(h)
    h["index"]["waiting"] = {"root": "vault", "path": "Hang.md", "seconds": 4.2, "timeout_seconds": 10.0}
    assert "waiting 4 s for vault to answer the read of Hang.md (hung share?)" in render_status(h)
    del h["index"]["waiting"]
    # A root says when its folder was listed, not "last sweep" (read as a sweep done while the
    # first one was still writing what that listing found).
    assert re.search(r"\n  vault +\w+ +listed \S", render_status(h)) and "last sweep" not in render_status(h)
    # After an upgrade the daemon runs the old code until restarted: status says so
    assert "the daemon runs" not in render_status(h)
    h["version"] = "0.0.9"
    assert "the daemon runs 0.0.9 (build " in render_status(h) and ", this installation is " in render_status(
        h
    )
    # One release, other code (a checkout, an upgrade that kept the version): told by the build.
    assert h["build"] == build_id() and h["index"]["written_by"]["last"] == this_release()
    h["version"] = __version__
    assert "the daemon runs" not in render_status(h)
    h["build"] = "0123456789ab"
    assert f"the daemon runs {__version__} (build 0123456789ab), this installation is" in render_status(h)
    # A daemon older than the release that last wrote its index (a downgrade) says so.
    assert h["index"]["newer_writer"] is None and "newer sidecar" not in render_status(h)
    h["index"]["newer_writer"] = {"version": "9.9.9", "build": "fedcba987654"}
    assert "the index was written by a newer sidecar (sidecar 9.9.9 (build fedcba987654))" in render_status(h)


def test_status_shows_one_line_per_problem_area_in_plain_words(shared: DaemonProcess) -> None:
    """A disk that filled up again and again: status shows one line per area (a problem now hides
    that area's recoveries, recoveries collapse to the latest with their count), and a Tantivy
    error's Rust debug dump is said in plain words; health keeps the whole text."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index.problems import Problems

    problems = Problems()
    dump = (
        "updating the index failed: BM25 commit failed: Failed to open file for write: 'IoError { io_error: "
        'Os { code: 28, kind: StorageFull, message: "No space left on device" }, filepath: '
        '"/home/u/.local/share/sidecar/index/bm25/3f2a.idx" }\' (retrying in 5 s)'
    )
    for _ in range(3):  # three episodes, each cleared
        problems.report("memory_write", "writing the ada inbox failed: [Errno 28] No space left on device")
        problems.clear("memory_write")
    problems.report("index", dump)
    problems.clear("index")
    problems.report("memory_write", "writing the ada inbox failed: [Errno 28] No space left on device")
    h = shared.health()
    h["problems"] = problems.describe()
    text = render_status(h)
    assert text.count("(memory writes,") == 1 and "Recovered (memory writes" not in text
    assert "PROBLEM (memory writes, since " in text
    index = [line for line in text.splitlines() if line.startswith("Recovered (index updates")]
    assert index == [
        f"Recovered (index updates, {index[0].split(', ')[1].split(')')[0]}): disk full: updating the index "
        "failed: BM25 commit failed: Failed to open file for write: No space left on device "
        "(/home/u/.local/share/sidecar/index/bm25/3f2a.idx) (retrying in 5 s)"
    ]
    assert "IoError" not in text and "kind:" not in text
    problems.clear("memory_write")  # the disk has room again: the four episodes are one line
    h["problems"] = problems.describe()
    text = render_status(h)
    assert "PROBLEM" not in text and text.count("(memory writes,") == 1
    assert re.search(r"\nRecovered \(memory writes, .+ ago, recovered 4 times\): disk full: writing", text)
    assert any("IoError" in p["error"] for p in h["problems"]["recent"])  # health keeps the whole text


def test_query_commands_leave_keys_of_an_older_release_to_the_commands_a_person_runs(
    shared: DaemonProcess, tmp_path: Path
) -> None:
    """A file with a renamed and a retired key: search, get, recall ... (an agent's hook, every
    prompt) print nothing about them; config check, status and doctor say both. Any other
    warning (an unknown SIDECAR_* variable) and errors stay loud everywhere."""
    old = tmp_path / "old.yaml"
    old.write_text("search:\n  rareTermChunks: 3\n  vectorMinSpread: 0.1\n", encoding="utf-8")
    env = {"SIDECAR_CONFIG": str(old)}
    for argv in (
        ("search", "audio"),
        ("get", "Audio.md"),
        ("get", "Audio.md", "--links"),
        ("recall", "how do I record audio"),
        ("preview", "how do I record audio"),
        ("why", "audio", "Audio.md"),
        ("related", "Audio.md"),
    ):
        r = _run(shared, *argv, env=env)
        assert r.returncode == 0, (argv, r.stderr)
        assert "rareTermChunks" not in r.stderr and "vectorMinSpread" not in r.stderr, argv
        r = _run(shared, *argv, env={**env, "SIDECAR_SEARCH_LIMITT": "3"})
        assert "sidecar: warning: environment: SIDECAR_SEARCH_LIMITT is not a sidecar setting" in r.stderr
    for argv in (("status",), ("doctor",)):
        r = _run(shared, *argv, env=env)
        assert "search.rareTermChunks is now search.rareTermNotes" in r.stderr, argv
        assert "search.vectorMinSpread is no longer a setting" in r.stderr, argv
    r = _run(shared, "config", "check", env=env)
    assert "search.rareTermChunks is now" in r.stdout and "search.vectorMinSpread is no" in r.stdout
    old.write_text("search:\n  rareTermChunks: 3\n  limit: many\n", encoding="utf-8")
    r = _run(shared, "search", "audio", env=env)  # an error: the daemon is reached, the file named
    assert "search.limit = 'many'" in r.stderr and "rareTermChunks" in r.stderr


def test_status_says_engine_errors_plainly_without_sources_or_a_wrong_cause() -> None:
    """A quota is not a full disk (`df` shows free space), a Rust source location is not for the
    user (the same cleaning as CLI warnings), and a folder named like a Rust struct is a path."""
    from sidecar.contracts.plainerror import plain_error

    quota = "writing the ada inbox failed: [Errno 122] Disk quota exceeded: '/h/a.md'"
    assert plain_error(quota) == quota  # was: "disk full: writing …"
    assert plain_error("BM25 commit failed: Os { code: 122, kind: FilesystemQuotaExceeded }") == (
        "disk quota exceeded: BM25 commit failed: FilesystemQuotaExceeded"
    )
    lance = plain_error(
        "vector search failed: LanceError(IO): Generic LocalFileSystem error: Read-only file system, "
        "/root/.cargo/registry/src/index.crates.io-6f17d22bba/lance-io-0.10.1/src/object_store.rs:345:12 "
        "(retrying in 30 s)"
    )
    assert ".rs:" not in lance and ".cargo" not in lance, lance
    assert lance.endswith("Read-only file system (retrying in 30 s)"), lance
    path = "3 folder(s) or note(s) of vault cannot be read (/v/Custom {draft}/a.md); their notes stay"
    assert plain_error(path) == path


def test_status_keeps_recoveries_of_each_agent_and_store_apart(shared: DaemonProcess) -> None:
    """Recoveries collapse per area and subject: agent a's then agent b's memory-write recovery
    are two lines (was: one, "recovered 2 times", with b's error only), and two stores repaired
    at one start are two lines, so the first one's aside name is still in status."""
    from sidecar.clients.cli_render import render_status
    from sidecar.index.problems import Problems

    problems = Problems()
    for agent in ("ada", "bob"):
        problems.report(
            "memory_write", f"writing the {agent} inbox failed: [Errno 28] No space", subject=agent
        )
        problems.clear("memory_write", subject=agent)
    h = shared.health()
    h["problems"] = problems.describe()
    lines = [x for x in render_status(h).splitlines() if x.startswith("Recovered (memory writes")]
    assert len(lines) == 2 and "ada inbox" in lines[0] and "bob inbox" in lines[1], lines
    assert not any("recovered 2 times" in x for x in lines)
    problems = Problems()
    problems.note(
        "stores", "bm25 could not be opened (x); moved to bm25.broken-1 and rebuilt", subject="bm25"
    )
    problems.note("stores", "vectors damaged; moved to vectors.broken-1, re-embedding", subject="vectors")
    h["problems"] = problems.describe()
    text = render_status(h)
    assert "bm25.broken-1" in text and "vectors.broken-1" in text


def test_status_lists_a_gone_models_vectors_apart_from_damaged_copies() -> None:
    """A previous model's table that a switch could not use, its model gone (a switch asked
    for), is no damage: listed apart. It was among the "Damaged index copies"."""
    from sidecar.clients.cli_render import _aside_lines

    aside = [
        {
            "name": "vectors.retired-20260101-000000-1",
            "store": "vectors",
            "age_days": 2.0,
            "newer": False,
            "retired": True,
        },
        {
            "name": "bm25.broken-20260101-000000-2",
            "store": "bm25",
            "age_days": 1.0,
            "newer": False,
            "retired": False,
        },
    ]
    lines = _aside_lines(aside, "/h")
    assert lines[0].startswith("Damaged index copies: 1 moved aside in /h/index (bm25.broken-"), lines
    assert lines[1].startswith(
        "Previous model's vectors kept (not damage: its model is gone): 1 moved aside in /h/index "
        "(vectors.retired-"
    ), lines


def test_status_names_copies_of_damaged_stores_kept_for_inspection(shared: DaemonProcess) -> None:
    """A store moved aside as damaged (at this start or any before) is named by status, with its
    age and when it goes: copies of a whole index were kept for good and named nowhere. A newer
    release's store a rebuild replaced after a downgrade is no damage: listed apart (it was
    among the "Damaged index copies")."""
    from sidecar.clients.cli_render import render_status
    from sidecar.stores.lifecycle import move_aside_name

    copy = move_aside_name(Path(shared.health()["home"]) / "index" / "bm25")
    copy.mkdir()
    try:
        h = shared.health()
        listed = [{"name": copy.name, "store": "bm25", "age_days": 0.0, "newer": False, "retired": False}]
        assert h["index"]["moved_aside"] == listed
        assert (
            f"Damaged index copies: 1 moved aside in {h['home']}/index ({copy.name}; the oldest under a "
            "day old), kept for inspection and removed after 30 days" in render_status(h)
        )
        newer = move_aside_name(Path(h["home"]) / "index" / "manifest.sqlite", newer=True)
        newer.write_bytes(b"")
        try:
            h = shared.health()
            assert sorted(c["newer"] for c in h["index"]["moved_aside"]) == [False, True]
            shown = render_status(h)
            assert f"Damaged index copies: 1 moved aside in {h['home']}/index ({copy.name};" in shown
            assert (
                "Index copies made by a newer release (replaced by a rebuild): 1 moved aside in "
                f"{h['home']}/index ({newer.name}; the oldest under a day old)" in shown
            ), shown
        finally:
            newer.unlink()
    finally:
        copy.rmdir()
    assert shared.health()["index"]["moved_aside"] == []
    assert "Damaged index copies" not in render_status(shared.health())


def test_status_shows_a_model_switch_and_its_progress(shared: DaemonProcess) -> None:
    """While the vectors of a new model are computed, status (and memory_status) say so, how far
    it is and which model answers meanwhile: it said "every chunk has a vector" and named the new
    model while the old one answered."""
    from sidecar.clients.cli_render import render_status
    from sidecar.clients.mcp_texts import status_of

    h = shared.health()
    h["embedder"].update(state="ok", model="all-MiniLM-L6-v2@8199be6f699a", origin="bundled package")
    h["index"].update(state="ready", pending_vectors=0, chunks=854, embed_rate_chunks_per_second=10.0)
    h["vectors"] = {
        "serving": "vectors_e5",
        "serving_model": "multilingual-e5-small@3db4bf40b651",
        "building": "vectors_minilm",
        "building_pending": 256,
        "building_rate_chunks_per_second": 10.0,
    }
    text = render_status(h)
    assert "Model switch: 256 of 854 chunks still wait for all-MiniLM-L6-v2@8199be6f699a's vectors" in text
    assert "searches use multilingual-e5-small@3db4bf40b651's until then" in text
    assert "switching models: 256 chunks" in status_of(h)["message"]
    assert "less than a minute left" in text  # 256 chunks at 10 a second: never "25s", then "0s"
    # While vectors cannot be stored (a full disk) nothing moves: no ETA counting down.
    full = {"area": "embedding", "error": "storing vectors failed: the disk is full", "count": 3}
    h["problems"] = {"active": [{**full, "since": time.time()}], "recent": []}
    text = render_status(h)
    assert "256 of 854 chunks still wait" in text and "left" not in text
    assert "paused: storing vectors fails (see PROBLEM below)" in text
    # A switch undone before it finished: its table is kept a while, and status says so.
    h["vectors"] = {"building": None, "paused": {"table": "vectors_minilm", "vectors": 256, "drop_at": 1.8e9}}
    assert "Paused model switch: 256 vectors in vectors_minilm are kept until 20" in render_status(h)


def test_option_ranges_are_the_daemons(shared: DaemonProcess) -> None:
    """The CLI refuses what the daemon would (exit 2, above) and passes its bounds through: the
    edges of each range are answered, and --min-score's help names relevance, what it filters on."""
    for argv in (
        ["search", "audio", "--limit", "200", "--min-score", "1"],
        ["search", "audio", "--limit", "1", "--min-score", "0"],
        ["recall", "audio", "--limit", "200", "--tokens", "50000"],
        ["outline", "--tokens", "100"],
        ["related", "vault/Audio", "--limit", "100"],
    ):
        r = _run(shared, *argv)
        assert r.returncode == 0, (argv, r.stderr)
    search = next(a for a in build_parser("search")._actions if a.dest == "command").choices["search"]
    help_text = " ".join(search.format_help().split())
    assert "drop hits whose relevance (0-1, not the score) is below this" in help_text


def test_search_snippets_read_as_prose_around_the_query_words() -> None:
    """A hit's line shows the part of its text that holds the query's words (it showed the first 200
    characters, the matched words often past them), without table rules, emphasis, link brackets,
    quote and callout marks or embedded images."""
    from sidecar.clients.cli_hits import plain_text, snippet

    chunk = (
        "## Set up\n\nFirst **open** the [[Settings#Sync|sync settings]] ![[cog.svg#icon]] and "
        + "filler words about nothing much " * 12
        + "then pick the *vault folder* with [the picker](Picker.md).\n\n"
        "| Option | Meaning |\n| --- | :---: |\n| `--path` | the vault |\n\n> [!tip]- Hint\n> Keep backups.\n"
    )
    plain = plain_text(chunk)
    assert plain.startswith("Set up: First open the sync settings and filler")
    assert "Option · Meaning; --path · the vault; Tip: Hint Keep backups." in plain
    assert not any(mark in plain for mark in ("**", "[[", "](", "---", "cog.svg", ">"))
    shown = snippet(chunk, "vault folder picker")
    assert shown.startswith("…") and "pick the vault folder with the picker" in shown
    assert len(shown) <= 201 and shown.endswith("Keep backups.")  # the window reached the end
    assert snippet(chunk, "open sync settings").endswith("…")
    assert snippet(chunk, "zzz").startswith("Set up: First open")  # no word met: from the start
    assert snippet("Short **note**.", "note") == "Short note."
    # block ids, as reading view shows the text: at a line's end or on a line of their own
    assert plain_text("Run restic nightly. ^restore-cmd\n\n> [!tip] Tip\n> Keep it.\n^tipblock\n") == (
        "Run restic nightly. Tip: Tip Keep it."
    )
    assert plain_text("Costs 5^2 euro and x ^ y") == "Costs 5^2 euro and x ^ y"


def test_snippets_show_code_blocks_as_written() -> None:
    """A ``#`` comment in a fenced code block is no heading in a hit's one-line snippet (it got the
    heading's colon: "Flächenberechnung für das Pultdach:"), a ``|`` there no table cell; the text
    after the block is prose again."""
    from sidecar.clients.cli_hits import plain_text

    chunk = (
        "## Skript zur Berechnung\n\n```bash\n#!/bin/bash\n# Flächenberechnung für das Pultdach\n"
        "echo $((4 * 3)) | bc\n~~~\n# Ende\n```\n\n# Nachher\n\n| a | b |\n"
    )
    assert plain_text(chunk) == (
        "Skript zur Berechnung: #!/bin/bash # Flächenberechnung für das Pultdach "
        "echo $((4 * 3)) | bc ~~~ # Ende Nachher: a · b;"
    )
    assert plain_text("~~~~\n# a\n~~~ not closed\n# b\n") == "# a ~~~ not closed # b"  # runs to the end


def test_status_calls_a_missing_wiki_optional(shared: DaemonProcess) -> None:
    """The wiki folder is named by default and optional: the quick start (no wiki) was told on
    every status screen that something was wrong with a name it never set. Another root's
    missing folder still asks whether its name is right."""
    from sidecar.clients.cli_render import render_status

    h = shared.health()
    roots = {r["name"]: r for r in h["roots"]}
    roots["wiki"]["absent"] = True
    text = render_status(h)
    assert "no wiki folder: optional; make it, or name yours with vault.wikiSubfolder" in text
    assert "is the name right?" not in text
    roots["vault"]["absent"] = True
    assert "is the name right?" in render_status(h)
    # A folder of a near name is there (the configuration says Wiki, the folder is wiki/).
    roots["vault"]["absent"] = False
    wiki = Path(roots["wiki"]["path"])
    roots["wiki"]["path"] = str(wiki.parent / wiki.name.upper())
    text = render_status(h)
    assert f"did you mean {wiki.name}/? set vault.wikiSubfolder: {wiki.name}" in text, text
    assert "optional" not in text


def test_status_over_a_complete_index_while_the_model_loads(shared: DaemonProcess) -> None:
    """After a restart over a complete index, status said "vectors are being computed" while
    every chunk had its vector and the model only loaded."""
    from sidecar.clients.cli_render import render_status

    h = shared.health()
    h["index"].update(state="building", phase="idle", pending_vectors=0)
    h["embedder"] = {"state": "loading"}
    text = render_status(h)
    assert "by meaning once the model is loaded" in text and "vectors are being computed" not in text
    h["index"]["pending_vectors"] = 12
    assert "vectors are being computed" in render_status(h)


def test_memory_write_says_when_trash_let_an_older_text_go(capsys: pytest.CaptureFixture[str]) -> None:
    """A write that pushed .trash past its cap printed only "replaced (88 bytes)"; the text that
    can no longer be restored was named in --json only (the MCP reply said it)."""
    from sidecar.clients.cli_memory import _print_memory

    result = {
        "reference": "memory/q1",
        "action": "replaced",
        "bytes": 88,
        "redacted": {},
        "duplicates": [],
        "trashDropped": ["q1--20261205T082551063538.md"],
    }
    _print_memory("write", result)
    out = capsys.readouterr()
    assert out.out == "memory/q1 replaced (88 bytes)\n"
    assert "q1--20261205T082551063538.md can no longer be restored" in out.err


def test_status_with_the_vault_not_mounted_says_it_waits(shared: DaemonProcess) -> None:
    """`serve` on a share not mounted yet: status said "every note is searchable by keyword;
    vectors are being computed" over 0 notes. It says what it waits for."""
    from sidecar.clients.cli_render import render_status

    h = shared.health()
    h["index"].update(state="building", phase="idle", files=0, chunks=0, pending_vectors=0)
    h["roots"] = [r for r in h["roots"] if r["name"] in ("vault", "wiki")]  # other tests' inboxes out
    for r in h["roots"]:
        r.update(mode="offline", error=f"{r['path']} does not exist or is not mounted")
    text = render_status(h)
    vault = next(r["path"] for r in h["roots"] if r["name"] == "vault")
    assert f"Index: waiting for {vault} to be readable (see Roots); nothing indexed yet" in text
    assert "vectors are being computed" not in text
    # The wiki lies in the vault: its problem is the vault's, said once.
    assert re.search(r"\n  wiki +offline .*\(offline with the vault\)\n", text), text
    assert text.count("is mounted and readable") == 1 and text.count("does not exist or is not mounted") == 1


def test_status_sums_up_many_inboxes_and_names_those_with_a_problem(shared: DaemonProcess) -> None:
    """300 agents' inboxes printed 300 root lines: past a few they are one line (how many, in
    which mode, how many with a problem), followed by a line of each that has a problem (at most
    ten); the vault's and the wiki's lines stay; a few inboxes are still listed one by one. Past
    200 a line says what so many cost."""
    from sidecar.clients.cli_render import render_status

    h = shared.health()
    h["roots"] = [r for r in h["roots"] if not r["name"].startswith("memory/")]  # other tests' agents
    base = {**h["roots"][0], "error": None, "hold": None, "unreadable": [], "absent": False}
    inboxes = [
        {**base, "name": f"memory/agent{i:03d}", "path": f"/h/agents/agent{i:03d}/memory", "mode": "events"}
        for i in range(300)
    ]
    inboxes[7].update(mode="offline", error="folder not answering")
    inboxes[42].update(error="unreadable: notes/x.md")
    h["roots"] = [*h["roots"], *inboxes]
    text = render_status(h)
    assert sum("memory/agent" in line for line in text.splitlines()) == 2
    assert "memory/*" in text and "300 agents' inboxes: 299 events, 1 offline; 2 with a problem" in text
    assert "each of the 300 inboxes is watched (file watches)" in text
    assert "is watched" not in render_status({**h, "roots": h["roots"][:-150]})  # 150: no word of it
    assert "memory/agent007  offline" in text and "folder not answering" in text
    assert "memory/agent042" in text and "unreadable: notes/x.md" in text
    vault_roots = [r for r in shared.health()["roots"] if not r["name"].startswith("memory/")]
    assert all(f"  {r['name']}" in text for r in vault_roots)
    for i in range(100, 120):
        inboxes[i].update(mode="offline", error="folder not answering")
    text = render_status(h)
    assert sum("memory/agent" in line for line in text.splitlines()) == 10
    assert "and 12 more inboxes with a problem" in text and "the other offline inboxes" in text
    h["roots"] = [*vault_roots, *inboxes[:5]]
    assert sum("memory/agent" in line for line in render_status(h).splitlines()) == 5


def test_search_says_when_a_time_phrase_was_searched_as_words(shared: DaemonProcess) -> None:
    """A phrase whose window holds no note is searched as words; the CLI said nothing, so the
    hits of any time read as the period's notes (the MCP text and --json said it)."""
    r = _run(shared, "search", "NAS backed up last year")
    assert r.returncode == 0, r.stderr
    # With the dates the phrase was read as (last year's first and last day).
    said = r"'last year' \(\d{4}-01-01 to \d{4}-12-31\): no note has that date, so it was searched as words"
    assert re.search(said, r.stderr), r.stderr
    assert "wiki/Backups" in r.stdout


def test_a_multi_line_error_keeps_its_files_and_cause_and_drops_backtraces() -> None:
    """A multi-line error showed its first line only ("2 configuration problems:"), losing the
    files and keys to mend and an engine's "Caused by" line; backtrace frames stay out, and a
    long one says how many lines the log keeps."""
    from sidecar.contracts.plainerror import plain_error

    config = plain_error(
        "the configuration file could not be reloaded: 2 configuration problems:\n"
        "  /c/sidecar.yaml: unknown key 'serch'\n  /c/sidecar.yaml: search.limit = 'many' is not a number"
    )
    assert config == (
        "the configuration file could not be reloaded: 2 configuration problems: /c/sidecar.yaml: "
        "unknown key 'serch'; /c/sidecar.yaml: search.limit = 'many' is not a number"
    )
    chained = plain_error(
        "vector search failed: lance error: IO\n"
        'Caused by: Os { code: 13, kind: PermissionDenied, message: "Permission denied" }\n'
        "stack backtrace:\n   0: lance::io::open\n             at /rustc/1f2e/library/std/src/x.rs:12:5\n"
    )
    assert chained == "vector search failed: lance error: IO; Caused by: Permission denied"
    long = plain_error("\n".join(f"line {i}" for i in range(10)))
    assert long.startswith("line 0; line 1") and long.endswith(
        "(and 4 more lines: the daemon's log has them)"
    )


def test_an_engines_numbered_cause_chain_stays_and_its_backtrace_goes() -> None:
    """anyhow numbers its causes ("    0: opening …", "    1: No space left …") as a backtrace
    numbers its frames: the causes were dropped with the frames and the "Stack backtrace:"
    header was kept as the message. Only lines under the backtrace's header are frames."""
    from sidecar.contracts.plainerror import plain_error

    said = plain_error(
        "failed to open the index\n\nCaused by:\n    0: opening /h/index/bm25/meta.json\n"
        "    1: No space left on device (os error 28)\n\nStack backtrace:\n"
        "   0: std::backtrace::Backtrace::create\n"
        "             at /rustc/1f2e/library/std/src/backtrace.rs:331:13\n"
        "   1: tantivy::x\n"
    )
    assert said == (
        "disk full: failed to open the index; Caused by: 0: opening /h/index/bm25/meta.json; "
        "1: No space left on device"
    )
    assert plain_error("errors:\n  0: config.toml: bad key\n  1: missing path") == (
        "errors: 0: config.toml: bad key; 1: missing path"
    )
    assert plain_error("locked\n  at /home/a/.local/state/sidecar/lock:1 by pid 42") == (
        "locked; at /home/a/.local/state/sidecar/lock:1 by pid 42"
    )


def test_an_error_of_frames_or_blanks_alone_is_never_said_as_nothing() -> None:
    """An error that was a backtrace alone became an empty string (doctor printed "keyword
    search: " and memory_status an empty error): its first line is said, cut."""
    from sidecar.contracts.plainerror import plain_error

    assert plain_error("stack backtrace:\n   0: tantivy::x\n   1: y\n") == "stack backtrace:"
    assert plain_error(" \n ") == "an error without a message (the daemon's log may say more)"
    frames = plain_error('File "' + "x" * 500 + '.py", line 3, in f\n')
    assert 0 < len(frames) <= 200 and frames.endswith("…")


def test_an_error_shows_no_control_characters() -> None:
    """Escape sequences, BEL and NUL in an error reached doctor's terminal and memory_status as
    they came: they are taken out, the words around them stay."""
    from sidecar.contracts.plainerror import plain_error

    said = plain_error("bad\x1b[31m red\x1b[0m \x07bell \x00nul\x1b]0;title\x07 \u202eend\rCR only line")
    assert said == "bad red bell nul end; CR only line"


def test_a_long_error_line_is_cut_before_it_is_cleaned() -> None:
    """Cleaning a line without spaces takes time growing faster than its length, and doctor and
    memory_status clean every line: each line is cut to 2,000 characters first."""
    from sidecar.contracts.plainerror import plain_error

    said = plain_error(("/" + "a" * 20000 + "\n") * 3 + "b" * 100000)
    assert all(len(part) <= 2000 for part in said.split("; "))


def test_index_help_says_confirm_deletions_goes_with_rebuild() -> None:
    """`sidecar index --help` says --confirm-deletions combines with --rebuild, as the refusal of
    a rebuild while a mass deletion is held advises it."""
    index = next(a for a in build_parser("index")._actions if a.dest == "command").choices["index"]
    help_text = " ".join(index.format_help().split())
    assert "with --rebuild, the rebuild runs after them" in help_text
