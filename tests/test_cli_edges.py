"""The command line at its edges: a socket another user holds, empty or closed stdin, a daemon
that does not answer, bytes that are not UTF-8, closed or non-UTF-8 output, ``--``, a terminal
that hangs up or would run escape sequences from a note, and exit codes as README's table says."""

from __future__ import annotations

import functools
import io
import json
import os
import pty
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients import cli_memory, cli_parser
from sidecar.clients.cli import _remote_exit, main
from sidecar.clients.cli_parser import build_parser
from sidecar.clients.cli_progress import Progress
from sidecar.clients.client import Client, check_peer
from sidecar.config import load_config
from sidecar.contracts.errors import DaemonUnreachableError, ExitCode

from .conftest import DaemonProcess, write
from .daemon_process import started_as_a_user_would


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """One keyword-only daemon on a tiny vault for the module."""
    notes = {
        "Audio.md": "# Audio recorder\n\nRecord a lecture with my microphone.\n",
        "wiki/Backups.md": "# Backups\n\nThe NAS is backed up every night at 2:00.\n",
    }
    d = started_as_a_user_would(tmp_path_factory.mktemp("edges"), notes)
    yield d
    if d.proc is not None and d.proc.poll() is None:
        d.stop()


def _env(d: DaemonProcess, **extra: str) -> dict[str, str]:
    return {**d.env, "SIDECAR_HOME": str(d.home), **extra}


def _run(d: DaemonProcess, *args: str | bytes, stdin: str | None = "", **env: str) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        capture_output=True,
        input=None if stdin is None else stdin.encode(),
        stdin=subprocess.DEVNULL if stdin is None else None,
        env=_env(d, **env),
        timeout=120,
        check=False,
    )


def _one_line(r: Any, code: int, needle: str) -> None:
    err = r.stderr.decode() if isinstance(r.stderr, bytes) else r.stderr
    assert r.returncode == code, (r.returncode, r.stdout, err)
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if not ln.startswith("sidecar: warning:")]
    assert len(lines) == 1 and needle in lines[0], err


# --- §3: the server must be this user's -------------------------------------------------------


def test_a_client_checks_whose_server_it_reached(tmp_path: Path) -> None:
    """The peer's UID must be the client's; without credentials, the socket's and its folder's
    owner and mode decide. Nothing is sent before."""
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(path))
    try:
        check_peer(client, path)  # the real credentials: this process
        with pytest.raises(DaemonUnreachableError, match=r"served by uid 4242 and this user is uid"):
            check_peer(client, path, read_uid=lambda _s: 4242)
        no_credentials = functools.partial(check_peer, client, path, read_uid=lambda _s: None)
        no_credentials()  # this user's socket in this user's private folder
        os.chmod(tmp_path, 0o777)
        try:
            with pytest.raises(DaemonUnreachableError, match="may be written by others"):
                no_credentials()
        finally:
            os.chmod(tmp_path, 0o700)
        if os.geteuid() == 0:  # another owner for the socket file
            os.chown(path, 65534, 65534)
            with pytest.raises(DaemonUnreachableError, match="the socket belongs to uid 65534"):
                no_credentials()
    finally:
        client.close()
        server.close()


_FAKE = """
import socket, sys
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); s.settimeout(60)
got = b""
for _ in range(int(sys.argv[2])):
    c, _a = s.accept(); c.settimeout(5)
    try:
        c.sendall(b'{"v":1,"id":1,"ok":true,"result":{"hits":[{"reference":"vault/IMPORTANT"}]}}\\n')
        while chunk := c.recv(4096):
            got += chunk
    except OSError:
        pass
    c.close()
print(len(got), flush=True)
"""


def test_a_socket_another_user_took_first_gets_nothing(tmp_path: Path) -> None:
    """The report's attack: another user listens on the socket path first (the /tmp fallback).
    The query is never sent, its fake hits are never shown, and status does not say "not
    running" but who is there."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run a server as another user")
    folder = Path(tempfile.mkdtemp(prefix="sidecar-foreign-"))
    os.chown(folder, 65534, 65534)
    sock = folder / "s.sock"
    fake = subprocess.Popen(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", _FAKE, sock, "3"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert fake.poll() is None and time.monotonic() < deadline, "the fake server did not start"
            time.sleep(0.05)
        env = {**os.environ, "HOME": str(tmp_path), "SIDECAR_HOME": str(tmp_path / "home")}

        def run(*argv: str) -> Any:
            cmd = [sys.executable, "-m", "sidecar", *argv, "--socket", str(sock)]
            return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)

        r = run("search", "my bank password")
        _one_line(r, ExitCode.NOT_RUNNING, "refusing to talk to")
        assert "uid 65534" in r.stderr and "IMPORTANT" not in r.stdout
        r = run("status")
        _one_line(r, ExitCode.NOT_RUNNING, "refusing to talk to")
        assert "not running" not in r.stdout
        r = run("status", "--json")
        assert json.loads(r.stdout)["error"]["code"] == "unreachable"
        out, _ = fake.communicate(timeout=60)
        assert out.strip() == "0", "the fake server received bytes"
    finally:
        fake.kill()
        fake.wait()
        shutil.rmtree(folder, ignore_errors=True)


# --- §7: nothing on stdin is no note ----------------------------------------------------------


def test_memory_write_refuses_an_empty_or_closed_stdin(daemon: DaemonProcess) -> None:
    r = _run(daemon, "memory", "write", "keep", "--agent", "me", "--content", "the wifi password rotates")
    assert r.returncode == 0, r.stderr
    for action in ("write", "edit"):
        _one_line(_run(daemon, "memory", action, "keep", "--agent", "me"), ExitCode.USAGE, "no note text")
        _one_line(
            _run(daemon, "memory", action, "keep", "--agent", "me", stdin=" \n"), ExitCode.USAGE, "stdin"
        )
    write_keep = [sys.executable, "-m", "sidecar", "memory", "write", "keep", "--agent", "me"]
    closed = subprocess.run(
        ["bash", "-c", 'exec "$@" <&-', "-", *write_keep],
        capture_output=True,
        text=True,
        env=_env(daemon),
        timeout=60,
        check=False,
    )
    _one_line(closed, ExitCode.USAGE, "no note text on stdin")
    r = _run(daemon, "get", "memory/me/keep")
    assert "the wifi password rotates" in r.stdout.decode()  # untouched
    # asked for: an empty note
    assert _run(daemon, "memory", "write", "empty", "--agent", "me", "--content", "").returncode == 0


def test_memory_write_at_a_terminal_says_it_reads_stdin(daemon: DaemonProcess) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "memory", "write", "typed", "--agent", "me"],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(daemon),
    )
    os.close(slave)
    try:
        os.write(master, b"typed at a terminal\n\x04")
        _out, err = proc.communicate(timeout=60)
    finally:
        os.close(master)
    assert proc.returncode == 0, err
    assert b"reading the note from stdin (end it with Ctrl-D)" in err
    assert b"typed at a terminal" in _run(daemon, "get", "memory/me/typed").stdout


# --- §8: a change without an answer is not a refusal ------------------------------------------


def test_a_write_without_an_answer_says_it_may_have_been_made(
    tmp_path: Path,
    silent_socket: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The daemon took the request and went silent (SIGSTOP, a hang): exit 8 and code no_answer,
    saying the note may have been written, not "refused" (exit 7, bad_request)."""
    monkeypatch.setattr(cli_memory, "Client", functools.partial(Client, timeout=0.5))
    monkeypatch.setattr(cli_parser, "_json_errors", False)  # main sets it; restored after
    argv = ["memory", "write", "n", "--agent", "me", "--content", "x", "--socket", str(silent_socket)]
    assert main([*argv, "--home", str(tmp_path / "home")]) == ExitCode.NO_ANSWER == 8
    err = capsys.readouterr().err
    assert "did not answer 'write' within 0.5 s" in err and "may still have been written" in err
    assert main([*argv, "--home", str(tmp_path / "home"), "--json"]) == ExitCode.NO_ANSWER
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "no_answer" and "check" in error["message"]
    assert _remote_exit("timeout") == ExitCode.NO_ANSWER  # the daemon's own "did not finish"
    assert _remote_exit("not_found") == ExitCode.REQUEST_FAILED


# --- §9, §16: one line, never a traceback ----------------------------------------------------


def test_bytes_that_are_not_utf8_are_a_usage_error(daemon: DaemonProcess) -> None:
    for argv in (
        [b"search", b"x", b"--agent", b"\xff"],
        [b"memory", b"list", b"--agent", b"\xff"],
        [b"memory", b"write", b"x", b"--agent", b"\xff", b"--content", b"x"],
    ):
        _one_line(_run(daemon, *argv), ExitCode.USAGE, "invalid agent name")
    _one_line(_run(daemon, b"search", b"caf\xe9"), ExitCode.USAGE, "QUERY is not UTF-8 text")
    _one_line(_run(daemon, b"get", b"vault/\xff"), ExitCode.USAGE, "REFERENCE is not UTF-8 text")


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["memory", "list", "--agent", "me"],
        ["memory", "write", "closed-out", "--agent", "me", "--content", "x"],
        ["get", "vault/Audio"],
    ],
)
def test_a_closed_stdout_is_not_a_crash(daemon: DaemonProcess, argv: list[str]) -> None:
    """``>&-``: the command acts and ends with 0, as into a closed pipe (it acted, then died with
    a traceback on the flush)."""
    r = subprocess.run(
        ["bash", "-c", 'exec "$@" >&-', "-", sys.executable, "-m", "sidecar", *argv],
        capture_output=True,
        text=True,
        env=_env(daemon),
        timeout=60,
        check=False,
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr and "Error" not in r.stderr, r.stderr


def test_an_ascii_output_encoding_escapes_what_it_lacks(daemon: DaemonProcess) -> None:
    r = _run(daemon, "recall", "record a lecture", PYTHONIOENCODING="ascii")
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr
    assert b"\\u00b7" in r.stdout  # the block header's middle dot
    r = _run(daemon, "recall", "record a lecture", "--json", PYTHONIOENCODING="ascii")
    assert "·" in json.loads(r.stdout)["context"]  # escaped as JSON reads it back


def test_a_file_the_command_cannot_use_is_one_line(daemon: DaemonProcess, tmp_path: Path) -> None:
    """A folder on the way is a file (or root's, after sudo): one line, not a traceback."""
    home = tmp_path / "user"
    write(home / ".config" / "systemd", "not a folder\n")
    r = _run(daemon, "service", "install", "--home", str(tmp_path / "h"), HOME=str(home))
    lines = [ln for ln in r.stderr.decode().splitlines() if not ln.startswith("note:")]
    assert r.returncode != 0 and len(lines) == 1 and lines[0].startswith("sidecar: "), lines


def test_a_default_configuration_file_that_cannot_be_checked_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sudo -u` keeping HOME: the default file lies in a folder this user may not enter."""
    real_exists = Path.exists

    def exists(self: Path) -> bool:
        if self.name == "config.yaml":
            raise PermissionError(13, "Permission denied", str(self))
        return real_exists(self)

    monkeypatch.setattr(Path, "exists", exists)
    cfg = load_config(env={"HOME": str(tmp_path)}, flags={"home": str(tmp_path / "h")})
    assert cfg.source_file is None
    assert any("cannot be checked: Permission denied; not read" in w for w in cfg.warnings)
    with pytest.raises(Exception, match="cannot be checked"):  # named: an error (exit 3)
        load_config(config_file=str(tmp_path / "config.yaml"), env={})


# --- §10: `--` ends the options; unknown options are named -------------------------------------


def _parse(argv: Sequence[str]) -> Any:
    return build_parser(argv[0]).parse_args(argv)


def test_double_dash_ends_the_options() -> None:
    args = _parse(["search", "--limit", "3", "--", "-rf"])
    assert (args.query, args.limit) == ("-rf", 3)
    assert (
        _parse(["search", "--", "--json"]).query == "--json" and not _parse(["search", "--", "--json"]).json
    )
    args = _parse(["why", "vault/Audio", "--", "--force"])
    assert (args.reference, args.query) == ("vault/Audio", "--force")
    args = _parse(["memory", "write", "--agent", "me", "--", "-x"])
    assert args.slug == "-x"
    assert _parse(["search", "-5"]).query == "-5"  # a negative number is no option
    assert _parse(["search", "x", "--lim", "4"]).limit == 4  # nor is a prefix unknown


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["search", "-rf"],
            "unrecognized option -rf (text that starts with '-' goes after --: sidecar search -- -rf)",
        ),
        (["search", "--query=x"], "search: unrecognized option --query=x"),
        (["search", "foo", "--bogus"], "(see `sidecar search --help`)"),
        (["search", "--", "a", "-b"], "search: unrecognized arguments: -b"),
        (["--bogus"], "unrecognized option --bogus: options go after the COMMAND"),
    ],
)
def test_unknown_options_are_named(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser(argv[0] if not argv[0].startswith("-") else None).parse_args(argv)
    assert exc.value.code == ExitCode.USAGE
    assert needle in capsys.readouterr().err


def test_json_errors_hold_for_one_command_line_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --json command run by main() in this process leaves the next command's usage errors on
    stderr as plain lines (the switch was left on: they went to stdout as JSON)."""
    assert main(["index", "--home", str(tmp_path / "h"), "--vault", str(tmp_path / "none"), "--json"]) != 0
    capsys.readouterr()
    with pytest.raises(SystemExit):
        build_parser("search").parse_args(["search", "--bogus"])
    said = capsys.readouterr()
    assert said.out == "" and "search: unrecognized option --bogus" in said.err


def test_memory_list_takes_no_slug(daemon: DaemonProcess) -> None:
    _one_line(_run(daemon, "memory", "list", "--agent", "me", "extra"), ExitCode.USAGE, "takes no SLUG")


def test_search_after_double_dash_reaches_the_daemon(daemon: DaemonProcess) -> None:
    r = _run(daemon, "search", "--json", "--", "-rf")
    assert r.returncode == 0 and "hits" in json.loads(r.stdout), r.stderr


# --- §11: a daemon in a terminal stops when the terminal goes ---------------------------------


def _serve(d: DaemonProcess, stdin: Any) -> subprocess.Popen[bytes]:
    d.home.mkdir(parents=True, exist_ok=True)
    log = d.log.open("ab")
    # A terminal's daemon: SIGHUP as a terminal would deliver it, also when this suite runs under
    # nohup (ignored SIGHUP is inherited, and a daemon started under nohup keeps ignoring it).
    proc = subprocess.Popen(
        d.cmd(),
        stdin=stdin,
        stdout=log,
        stderr=log,
        env=d.env,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),  # noqa: PLW1509 - no threads start before exec
    )
    log.close()
    deadline = time.monotonic() + 60
    while True:
        try:
            with Client(d.socket, timeout=5) as c:
                c.call("health")
            return proc
        except Exception:
            assert proc.poll() is None and time.monotonic() < deadline, d.log.read_text()
            time.sleep(0.1)


def test_sighup_stops_a_daemon_in_a_terminal_and_reloads_a_service(tmp_path: Path) -> None:
    """Closing the terminal sends SIGHUP: a `sidecar serve` whose stdin is that terminal stops
    (it took it as a reload and outlived the window, holding the index); with stdin not a
    terminal (systemd's ExecReload=kill -HUP) it still reloads."""
    d = DaemonProcess(tmp_path / "home", None, keyword_only=True)
    master, slave = pty.openpty()
    try:
        proc = _serve(d, slave)
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(slave)
        os.close(master)
    assert "daemon_hangup" in d.log.read_text()
    proc = _serve(d, subprocess.DEVNULL)
    try:
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "config_reloaded" not in d.log.read_text():
            assert time.monotonic() < deadline, d.log.read_text()
            time.sleep(0.1)
        assert proc.poll() is None  # still serving
    finally:
        proc.terminate()
        proc.wait(timeout=60)


# --- §14: a note's control characters do not reach a terminal ---------------------------------


def _on_a_terminal(d: DaemonProcess, *argv: str) -> bytes:
    """What the command prints with stdout a terminal (the line discipline's CRs removed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sidecar", *argv],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=subprocess.DEVNULL,
        env=_env(d),
    )
    os.close(slave)
    out = b""
    try:
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the other end is closed
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
        proc.wait(timeout=60)
    return out.replace(b"\r\n", b"\n")


def test_get_and_recall_escape_control_characters_on_a_terminal_only(daemon: DaemonProcess) -> None:
    """On a terminal a note's escape sequences and bidirectional overrides and isolates are shown
    escaped (an override showed the rest of its line reversed: text other than the note holds);
    the right-to-left mark of Hebrew text stays; into a pipe the text is exact."""
    evil = (
        "backup codes \x1b]52;c;ZWNobyBwd25lZA==\x07 and \x1b[2J cleared\n\tindented\n"
        "invoice \u202egpj.exe\u202c and \u2067isolated\u2069, \u05e9\u05dc\u05d5\u05dd\u200f!\n"
    )
    assert _run(daemon, "memory", "write", "evil", "--agent", "bob", stdin=evil).returncode == 0
    shown = _on_a_terminal(daemon, "get", "memory/bob/evil")
    assert b"\x1b" not in shown and b"\x07" not in shown
    assert b"\\x1b]52;c;ZWNobyBwd25lZA==\\x07" in shown and b"\n\tindented" in shown
    assert b"invoice \\u202egpj.exe\\u202c and \\u2067isolated\\u2069, " in shown
    assert "\u05e9\u05dc\u05d5\u05dd\u200f!".encode() in shown
    recalled = _on_a_terminal(daemon, "recall", "backup codes invoice", "--agent", "bob")
    assert b"\\x1b[2J" in recalled and b"\x1b" not in recalled
    assert b"\\u202e" in recalled and "\u202e".encode() not in recalled
    found = _on_a_terminal(daemon, "search", "invoice isolated", "--agent", "bob")
    assert b"memory/evil" in found and "\u202e".encode() not in found
    assert evil.encode() in _run(daemon, "get", "memory/bob/evil").stdout  # piped: exact
    assert evil in json.loads(_run(daemon, "get", "memory/bob/evil", "--json").stdout)["text"]


# --- §18: exit codes as documented ------------------------------------------------------------


def test_values_the_daemon_refuses_as_malformed_are_usage_errors(daemon: DaemonProcess) -> None:
    _one_line(_run(daemon, "search", "x" * 4001), ExitCode.USAGE, "longer than 4000 characters")
    _one_line(_run(daemon, "index", "--confirm-deletions", "bogus"), ExitCode.USAGE, "unknown root 'bogus'")
    _one_line(
        _run(daemon, "memory", "write", "Bad/slug", "--agent", "me", "--content", "x"),
        ExitCode.USAGE,
        "invalid slug",
    )
    _one_line(_run(daemon, "search", "x", "--agent", "A B"), ExitCode.USAGE, "invalid agent name 'A B'")


def test_references_and_notes_refused_as_malformed_exit_2_missing_or_unreadable_notes_7(
    daemon: DaemonProcess,
) -> None:
    """README's table: a value the daemon refuses whatever the vault holds is a bad command line
    (2); a note that does not exist, or cannot be shown, is a refused request (7). A reference
    with "..", memory/<slug> without --agent and a note too large to write exited 7."""
    assert daemon.vault is not None
    (daemon.vault / "Latin1.md").write_bytes("caf\xe9 \xe0 la cr\xe8me ".encode("latin-1") * 4)
    _one_line(_run(daemon, "get", "vault/../x"), ExitCode.USAGE, "leaves its root")
    _one_line(_run(daemon, "get", "memory/x"), ExitCode.USAGE, "without an agent")
    _one_line(_run(daemon, "related", "vault/.hidden/x"), ExitCode.USAGE, "hidden folder")
    _one_line(_run(daemon, "get", "[[#Setup]]"), ExitCode.USAGE, "names a heading or block")
    big = "word " * 30_000  # over memory.maxNoteBytes (100,000)
    _one_line(
        _run(daemon, "memory", "write", "big", "--agent", "me", stdin=big), ExitCode.USAGE, "larger than"
    )
    r = _run(daemon, "get", "vault/../x", "--json")
    assert r.returncode == ExitCode.USAGE and json.loads(r.stdout)["error"]["code"] == "bad_reference"
    _one_line(_run(daemon, "get", "vault/Nope"), ExitCode.REQUEST_FAILED, "no note")
    _one_line(_run(daemon, "get", "memory/nope", "--agent", "me"), ExitCode.REQUEST_FAILED, "no note")
    _one_line(_run(daemon, "get", "vault/Latin1"), ExitCode.REQUEST_FAILED, "not UTF-8")
    r = _run(daemon, "get", "vault/Latin1", "--json")
    assert r.returncode == ExitCode.REQUEST_FAILED and json.loads(r.stdout)["error"]["code"] == "unreadable"


def _index_offline(tmp_path: Path, *extra: str) -> Any:
    """`sidecar index` with no daemon, keyword-only, over a one-note vault."""
    vault = write(tmp_path / "vault" / "a.md", "# A\n\ntext\n").parent
    env = {**os.environ, "HOME": str(tmp_path), "SIDECAR_EMBEDDER_ENABLED": "false"}
    argv = ["index", "--home", str(tmp_path / "h"), "--vault", str(vault), *extra]
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_offline_index_refuses_an_unknown_root(tmp_path: Path) -> None:
    """No daemon: a mistyped root confirmed nothing and exited 0."""
    r = _index_offline(tmp_path, "--confirm-deletions", "bogus")
    _one_line(r, ExitCode.USAGE, "unknown root 'bogus'; roots: vault, wiki")
    assert _index_offline(tmp_path, "--confirm-deletions", "vault").returncode == 0


def test_why_of_a_missing_note_is_an_error_in_its_shape(daemon: DaemonProcess) -> None:
    r = _run(daemon, "why", "vault/Nope", "q", "--json")
    assert r.returncode == ExitCode.REQUEST_FAILED
    assert json.loads(r.stdout)["error"]["code"] == "not_found"
    r = _run(daemon, "why", "vault/Audio", "lecture")  # its notes on stderr, as search's
    assert r.returncode == 0 and b"note:" not in r.stdout and b"note: vector search" in r.stderr


def test_an_emptied_configuration_file_is_named(daemon: DaemonProcess, tmp_path: Path) -> None:
    """A file emptied while an editor rewrites it: clients fall back to the defaults, and say so
    (they said only "no sidecar daemon is listening on <the default socket>")."""
    empty = write(tmp_path / "c.yaml", "# being rewritten\n")
    r = _run(daemon, "status", "--config", str(empty), SIDECAR_HOME=str(tmp_path / "other"))
    assert r.returncode == ExitCode.NOT_RUNNING
    assert f"sidecar: warning: {empty} is empty (being written?); using the defaults" in r.stderr.decode()
    r = _run(daemon, "status", "--config", "/dev/null")  # empty on purpose: no warning
    assert r.returncode == 0 and b"warning" not in r.stderr, r.stderr


def test_version_says_no_model_when_vectors_are_off(daemon: DaemonProcess) -> None:
    r = _run(daemon, "--version")
    assert b"no model (embedder.enabled: false)" in r.stdout and b"multilingual" not in r.stdout


# --- §19: the progress bar fits the terminal; keyword-only wording ---------------------------


def test_a_keyword_only_index_does_not_report_missing_vectors(tmp_path: Path) -> None:
    """With vectors off, "1 without vectors" read like a fault."""
    r = _index_offline(tmp_path)
    assert r.returncode == 0 and "indexed 1 notes" in r.stderr and "vectors" not in r.stderr, r.stderr


def test_the_progress_bar_fits_a_narrow_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    bar = Progress(stream)
    monkeypatch.setattr(bar, "_columns", lambda: 40)
    for done in (0, 5_000, 123_456):
        bar.update("embedding", done, 123_456)
    bar.done("indexed")
    updates = stream.getvalue().split("\r")
    assert all(len(u) <= 39 for u in updates if "\n" not in u), updates
    assert "123,456/123,456" in stream.getvalue()


def test_confirming_deletions_when_none_are_held_says_so(daemon: DaemonProcess) -> None:
    """`index --confirm-deletions vault` with nothing held said only "indexed N notes": the
    person (told so by an old status, or by mistake) could not tell what was confirmed."""
    from sidecar.clients.cli_admin import _holds

    r = _run(daemon, "index", "--confirm-deletions", "vault")
    assert r.returncode == 0, r.stderr
    assert "no deletions were held for vault: nothing to confirm" in r.stderr.decode()
    held = {"roots": [{"name": "vault", "held_deletions": 12, "hold": {"kind": "mass"}}, {"name": "wiki"}]}
    assert _holds(held, "vault") and not _holds(held, "wiki")


def test_memory_help_says_what_the_action_named_does(capsys: pytest.CaptureFixture[str]) -> None:
    """`memory edit --help` and `memory write --help` printed the same text: how edit differs
    (refused for a missing note, keeps the front matter keys not given) was only in the MCP
    tools' descriptions. Each action's help now opens with what it does."""
    actions = ("list", "write", "edit", "delete")
    helps = {}
    for action in actions:
        for argv in (["memory", action, "--help"], ["memory", "--agent", "me", "-h", action, "x"]):
            with pytest.raises(SystemExit) as done:
                build_parser().parse_args(argv)
            assert done.value.code == 0
            helps[action] = " ".join(capsys.readouterr().out.split())
            assert f"memory {action}: " in helps[action], argv
    assert "which must exist" in helps["edit"] and "others kept" in helps["edit"]
    assert "replace it whole" in helps["write"] and "which must exist" not in helps["write"]
    assert len(set(helps.values())) == len(actions)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["memory", "--help"])
    assert "memory edit: " not in capsys.readouterr().out


def test_preview_text_names_the_gate_that_kept_each_candidate_out() -> None:
    """`sidecar preview` prints readable lines (no raw JSON): the query, the gates, the hits and
    each kept-out candidate with the gate and the figures it compared."""
    from sidecar.clients.cli_preview import preview_lines
    from sidecar.contracts.wire_json import parse_search

    hit = {
        "reference": "vault/Plugins/Audio recorder",
        "source": "vault",
        "score": 0.9,
        "relevance": 0.82,
        "vecScore": 0.8496,
        "bm25Score": 47.6,
        "boosts": {"rareTerm": 1.5},
        "lines": [4, 7],
        "text": "Record audio",
        "similarity": 0.2956,
        "keywords": 0.62,
        "gate": "minSimilarity",
    }
    reply = {
        "hits": [],
        "context": "",
        "gates": {"scoreFloor": 0.3, "minSimilarity": 0.35},
        "dropped": [hit],
        "analysis": {"text": "record a lecture", "contentWords": ["record", "lecture"], "rareWords": []},
    }
    text = "\n".join(preview_lines(parse_search(reply)))
    assert "{" not in text.replace("{gate}", ""), text
    assert "Recalled: 0 hit(s)" in text and "vault/Plugins/Audio recorder (lines 4-7)" in text
    assert "kept out by minSimilarity: similarity 0.30 is below recall.minSimilarity 0.35" in text
    assert "Context block: empty" in text


def test_preview_says_recall_ran_partly_on_keywords_while_vectors_are_pending() -> None:
    """While chunks wait for their vectors, `sidecar preview` says recall weighs those by their
    keywords alone, and marks a hit that passed without a similarity (it said nothing)."""
    from sidecar.clients.cli_preview import preview_lines
    from sidecar.contracts.wire_json import parse_search

    hit = {
        "reference": "vault/Obsidian Sync einrichten",
        "source": "vault",
        "score": 0.6,
        "relevance": 0.55,
        "bm25Score": 12.5,
        "boosts": {},
        "lines": [1, 3],
        "text": "So richtest du Obsidian Sync ein",
        "keywords": 0.91,
    }
    reply = {
        "hits": [hit],
        "context": "<recalled-notes>…</recalled-notes>",
        "pendingVectors": 1543,
        "gates": {"scoreFloor": 0.3, "minSimilarity": 0.35},
        "analysis": {
            "text": "Wie richte ich Obsidian Sync ein?",
            "contentWords": ["richte", "Obsidian", "Sync"],
        },
    }
    text = "\n".join(preview_lines(parse_search(reply)))
    assert "1,543 chunks still wait for their vectors" in text and "keywords alone" in text, text
    assert "no similarity (no vector yet): passed on its keywords alone" in text, text


def test_config_path_names_a_file_that_is_not_utf8_as_it_is(tmp_path: Path) -> None:
    """`sidecar config path --config $'\\xff.yaml'` printed `…/\\udcff.yaml` (exit 0): the steps
    writing "$(sidecar config path)" wrote another file than the commands read. The path's own
    bytes are printed; --json, which cannot carry them, is refused as a bad command line."""
    name = os.fsdecode(b"\xff.yaml")
    code = subprocess.run(
        [sys.executable, "-m", "sidecar", "config", "path", "--config", name],
        capture_output=True,
        cwd=tmp_path,
        check=False,
        timeout=60,
    )
    assert code.returncode == 0 and code.stdout == os.fsencode(tmp_path.resolve()) + b"/\xff.yaml\n", code
    as_json = subprocess.run(
        [sys.executable, "-m", "sidecar", "config", "path", "--config", name, "--json"],
        capture_output=True,
        cwd=tmp_path,
        check=False,
        timeout=60,
    )
    assert as_json.returncode == ExitCode.USAGE and b"not UTF-8" in as_json.stdout + as_json.stderr


def test_the_start_hint_names_the_service_only_when_it_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Daemon down: status suggested `systemctl --user start sidecar` to a person who had never
    installed the service (doctor said "when the service is installed"). Named only when its
    unit (or launchd agent) is there."""
    from sidecar.clients.client import serve_hint

    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    assert serve_hint(None) == "`sidecar serve --vault PATH`"
    write(tmp_path / ".config" / "systemd" / "user" / "sidecar.service", "[Unit]\n")
    assert serve_hint(None) == "`sidecar serve --vault PATH` (or `systemctl --user start sidecar`)"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # where systemd looks then
    assert "systemctl" not in serve_hint(None)
    monkeypatch.setattr(sys, "platform", "darwin")
    write(tmp_path / "Library" / "LaunchAgents" / "dev.sidecar.plist", "<plist/>\n")
    assert serve_hint(None).endswith("(or `launchctl kickstart gui/$(id -u)/dev.sidecar`)")
