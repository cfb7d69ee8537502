"""A share that goes away (the vault's folder left empty, as an unmounted share leaves its mount
point): what the daemon read of the vault's Obsidian settings stays in force, across a restart
too, answers say the vault is offline, and a rebuild does not empty the index of it."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients import cli_parser
from sidecar.clients.cli import main
from sidecar.clients.cli_render import render_status
from sidecar.clients.doctor import render, run_checks
from sidecar.clients.doctor_checks import Probes
from sidecar.contracts.errors import ExitCode
from tests.conftest import KEYWORD_ONLY, write
from tests.daemon_process import started_as_a_user_would


def _journal_vault(v: Path) -> Path:
    write(v / ".obsidian/daily-notes.json", json.dumps({"folder": "Journal", "format": "DD.MM.YYYY"}))
    write(v / "Journal/03.12.2026.md", "# Donnerstag\n\nTermin beim Optiker, neue Brille bestellt.\n")
    for i in range(5):
        write(v / f"Notes/n{i}.md", f"# Note {i}\n\nThe keeper of lighthouse {i} logs storm {i}.\n")
    return v


def _unmount(v: Path, aside: Path) -> None:
    """The share goes: its mount point stays behind, empty."""
    aside.mkdir()
    for p in list(v.iterdir()):
        shutil.move(str(p), str(aside / p.name))


def _dated(server: Any) -> dict[str, Any]:
    server.handlers.retriever.today = lambda: dt.date(2026, 12, 5)
    return server.call("search", {"query": "Was hab ich vorgestern gemacht?"})


def test_daily_note_format_stays_while_the_share_is_unmounted(tmp_path: Path, serve_in_process: Any) -> None:
    """With the vault's share unmounted, the daily-note format read before stays in force (also
    after a restart meanwhile): a date question still finds the journal note, and says the vault
    is offline. Was: the format forgotten (``daily_notes: []``), the note left out, the answer
    presented as complete."""
    v = _journal_vault(tmp_path / "nas")
    server = serve_in_process(v, model=KEYWORD_ONLY)
    assert [h["reference"] for h in _dated(server)["hits"]] == ["vault/Journal/03.12.2026"]
    _unmount(v, tmp_path / "aside")
    server.harness.sweep()
    assert server.harness.supervisor.roots["vault"].offline
    health = server.call("health")
    assert health["daily_notes"] == [
        {"format": "DD.MM.YYYY", "folder": "Journal", "file": ".obsidian/daily-notes.json"}
    ]
    assert "no daily-note format set" not in render_status(health)
    answer = _dated(server)
    assert [h["reference"] for h in answer["hits"]] == ["vault/Journal/03.12.2026"]
    assert answer["offline"] == ["vault", "wiki"]
    recalled = server.call("recall", {"message": "Was hab ich vorgestern gemacht?"})
    assert recalled["offline"] == ["vault", "wiki"]
    # The block an agent's hook reads says it too, under its header, as a stale index is said.
    lines = recalled["context"].split("\n")
    assert lines[2].startswith("Note: the vault and the wiki are offline (share unmounted")
    assert "Optiker" in recalled["context"]
    server.close()
    server.harness.close()
    again = serve_in_process(v, model=KEYWORD_ONLY)  # a restart while the share is still away
    assert again.call("health")["daily_notes"] == health["daily_notes"]
    assert [h["reference"] for h in _dated(again)["hits"]] == ["vault/Journal/03.12.2026"]
    for p in list((tmp_path / "aside").iterdir()):
        shutil.move(str(p), str(v / p.name))
    again.harness.sweep()
    assert not again.harness.supervisor.roots["vault"].offline
    assert "offline" not in _dated(again)


def _cli(d: Any, *args: str) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        capture_output=True,
        text=True,
        env={**d.env, "SIDECAR_HOME": str(d.home)},
        timeout=120,
        check=False,
    )


def test_a_rebuild_while_the_share_is_away_is_refused_and_keeps_the_index(tmp_path: Path) -> None:
    """`sidecar index --rebuild` with the vault's share unmounted: refused with the reason and a
    non-zero exit, its notes stay found, nothing claimed "kept as indexed" falsely (was: every
    vault and wiki note gone from the index, exit 0, "wiki offline, kept as indexed"). The same
    without a daemon. Back online, the rebuild runs."""
    notes = {f"Notes/n{i}.md": f"# Note {i}\n\nThe keeper of lighthouse {i} logs storm.\n" for i in range(5)}
    notes["wiki/Backups.md"] = "# Backups\n\nThe NAS is backed up every night by Kranichflug.\n"
    d = started_as_a_user_would(tmp_path / "base", notes)
    try:
        v = d.vault
        _unmount(v, tmp_path / "aside")
        assert _cli(d, "index").returncode == 0  # a sweep sees the share gone: kept as indexed
        r = _cli(d, "index", "--rebuild")
        assert r.returncode == ExitCode.REQUEST_FAILED, (r.stdout, r.stderr)
        assert "not rebuilt: vault, wiki cannot be read now" in r.stderr and "Nothing was changed" in r.stderr
        assert "kept as indexed" not in r.stdout + r.stderr
        found = _cli(d, "search", "Kranichflug")
        assert "wiki/Backups" in found.stdout and "the vault and the wiki are offline" in found.stderr
        recalled = _cli(d, "recall", "When is the NAS backed up by Kranichflug?")  # an agent's hook
        assert "wiki/Backups" in recalled.stdout, (recalled.stdout, recalled.stderr)
        assert "\nNote: the vault and the wiki are offline" in recalled.stdout
        status = json.loads(_cli(d, "status", "--json").stdout)
        assert status["index"]["by_source"]["vault"]["files"] == 5
        for p in list((tmp_path / "aside").iterdir()):
            shutil.move(str(p), str(v / p.name))
        # Back once a sweep has seen it (as the refusal says: status shows when it is back); a
        # rebuild asked in the same instant could still meet the daemon's word "offline".
        assert _cli(d, "index").returncode == 0
        r = _cli(d, "index", "--rebuild")
        assert r.returncode == 0 and "indexed 6 notes" in r.stdout + r.stderr, (r.stdout, r.stderr)
    finally:
        d.stop()
    _unmount(v, tmp_path / "aside2")  # no daemon: the command indexes in its own process
    r = _cli(d, "index", "--rebuild", "--vault", str(v))
    assert r.returncode == ExitCode.REQUEST_FAILED and "not rebuilt: vault" in r.stderr, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr


def test_a_rebuild_is_refused_while_the_vault_holds_only_its_settings(
    tmp_path: Path, serve_in_process: Any
) -> None:
    """The vault's notes gone but its folder not empty (`.obsidian/` left, a `#recycle` folder, an
    empty filesystem mounted again on the same device number): the rebuild is refused and the
    notes stay indexed until a sweep finds them again (was: a live re-probe counted any listing
    as back, the rebuild ran and emptied the vault from the index)."""
    from sidecar.contracts.errors import RemoteError

    v = tmp_path / "nas"
    write(v / ".obsidian/app.json", "{}")
    for i in range(6):
        write(v / f"Notes/n{i}.md", f"# Note {i}\n\nThe keeper of lighthouse {i} logs zebrafinch.\n")
    server = serve_in_process(v, model=KEYWORD_ONLY)
    (tmp_path / "aside").mkdir()
    shutil.move(str(v / "Notes"), str(tmp_path / "aside" / "Notes"))  # .obsidian stays
    (v / "#recycle").mkdir()
    server.harness.sweep()
    st = server.harness.supervisor.roots["vault"]
    assert st.offline and st.hold_kind == "empty"
    with pytest.raises(RemoteError, match="not rebuilt: vault cannot be read now"):
        server.call("index", {"rebuild": True})
    assert len(server.harness.indexer.manifest.file_states("vault/")) == 6
    assert [h["reference"] for h in server.call("search", {"query": "zebrafinch"})["hits"]]


def _private_unreadable(v: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A vault whose Private folder, once of mode 000, cannot be listed (this runs as root, which
    reads it anyway: refused here as it is for any other user)."""
    for i in range(3):
        write(v / "Private" / f"p{i}.md", f"# P{i}\n\nprivate heronsgate note {i}\n")
        write(v / "Work" / f"w{i}.md", f"# W{i}\n\nwork note {i}\n")
    private = v / "Private"
    real_scandir = os.scandir

    def scandir(path: Any = ".") -> Any:
        if os.fspath(path) == str(private) and not private.stat().st_mode & 0o777:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return private


def test_a_rebuild_is_refused_while_a_folder_with_notes_indexed_cannot_be_read(
    tmp_path: Path, serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder of indexed notes made unreadable (`chmod 000`): status says its notes stay in
    the index, and `index --rebuild` is refused naming the folder (exit 7, nothing changed), as
    for an offline root (was: the rebuild ran and dropped that folder's notes). Readable again
    and swept, the rebuild runs."""
    from sidecar.contracts.errors import RemoteError

    v = tmp_path / "v"
    private = _private_unreadable(v, monkeypatch)
    server = serve_in_process(v, model=KEYWORD_ONLY)
    manifest = server.harness.indexer.manifest
    assert len(manifest.file_states("vault/")) == 6
    private.chmod(0)
    try:
        server.harness.sweep()
        assert "their notes stay in the index" in str(server.harness.problems.active_in("unreadable"))
        with pytest.raises(RemoteError, match=f"not rebuilt: {private} cannot be read now") as refused:
            server.call("index", {"rebuild": True})
        assert "Nothing was changed" in str(refused.value) and "confirm-deletions" not in str(refused.value)
        assert len(manifest.file_states("vault/")) == 6
        assert len(server.call("search", {"query": "heronsgate"})["hits"]) == 3
    finally:
        private.chmod(0o755)
    server.harness.sweep()
    assert server.call("index", {"rebuild": True})["queued"]


def test_a_rebuild_without_a_daemon_is_refused_while_a_folder_cannot_be_read(
    tmp_path: Path, make_cfg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sidecar index --rebuild` with no daemon: no sweep of this process has seen the folder
    unreadable, so it lists the roots first, and refuses (was: it cleared the index and the
    sweep after it dropped the folder's notes)."""
    from sidecar.contracts.errors import UnreadableError
    from sidecar.daemon.oneshot import index_once
    from sidecar.stores.manifest import Manifest

    v = tmp_path / "v"
    private = _private_unreadable(v, monkeypatch)
    cfg = make_cfg(v, **{"embedder.enabled": False})
    assert index_once(cfg, rebuild=False)["changed"] == 6
    private.chmod(0)
    try:
        with pytest.raises(UnreadableError, match=f"not rebuilt: {private} cannot be read now"):
            index_once(cfg, rebuild=True)
    finally:
        private.chmod(0o755)
    manifest = Manifest(cfg.index_dir / "manifest.sqlite")
    try:
        assert len(manifest.file_states("vault/")) == 6
    finally:
        manifest.close()
    index_once(cfg, rebuild=True)


def test_a_rebuild_without_a_daemon_is_refused_while_an_indexed_note_cannot_be_read(
    tmp_path: Path, make_cfg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One indexed note made unreadable (`chmod 000`; its open fails for any user but root, who
    opens it anyway: refused here by hand): a rebuild with no daemon running cleared the index
    and its sweep dropped that note, where the daemon refused. Refused now too, naming the note
    and how to get past it, nothing changed; readable again, the rebuild runs and keeps it."""
    import sidecar.vault.note_text as note_text_mod
    from sidecar.contracts.errors import UnreadableError
    from sidecar.daemon.oneshot import index_once
    from sidecar.stores.manifest import Manifest

    v = tmp_path / "v"
    for i in range(3):
        write(v / "Work" / f"w{i}.md", f"# W{i}\n\nwork note {i} about the heronsgate\n")
    cfg = make_cfg(v, **{"embedder.enabled": False})
    assert index_once(cfg, rebuild=False)["changed"] == 3
    locked = v / "Work" / "w1.md"
    real = note_text_mod.open_regular

    def open_regular(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path) == str(locked) and not locked.stat().st_mode & 0o777:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(note_text_mod, "open_regular", open_regular)
    locked.chmod(0)
    try:
        with pytest.raises(UnreadableError, match=f"not rebuilt: {locked} cannot be read now") as refused:
            index_once(cfg, rebuild=True)
    finally:
        locked.chmod(0o644)
    said = str(refused.value)
    assert "Nothing was changed" in said and "chmod u+r" in said and "move them out of the vault" in said
    manifest = Manifest(cfg.index_dir / "manifest.sqlite")
    try:
        assert sorted(manifest.file_states("vault/")) == ["vault/Work/w0", "vault/Work/w1", "vault/Work/w2"]
    finally:
        manifest.close()
    assert index_once(cfg, rebuild=True)["files"] == 3


def test_recall_gives_up_on_a_silent_daemon_after_its_timeout(
    tmp_path: Path, silent_socket: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sidecar recall` (a hook before every prompt) waits 10 s by default for a daemon that took
    the connection and does not answer (SIGSTOP, a hang), `--timeout` sets it, for search too:
    exit 8, nothing on stdout (was: a fixed 60 s, no option)."""
    monkeypatch.setattr(cli_parser, "_json_errors", False)  # main sets it; restored after
    parser = cli_parser.build_parser()
    assert parser.parse_args(["recall", "hi"]).timeout == cli_parser.RECALL_TIMEOUT_S == 10.0
    assert parser.parse_args(["search", "hi"]).timeout == 60.0
    where = ["--socket", str(silent_socket), "--home", str(tmp_path / "home")]
    assert main(["recall", "Wo wohnt Anna?", "--agent", "claude", "--timeout", "1", *where]) == 8
    out = capsys.readouterr()
    assert out.out == "" and "did not answer 'recall' within 1 s" in out.err and "--timeout" in out.err
    assert main(["search", "Anna", "--timeout", "1", *where]) == ExitCode.NO_ANSWER
    with pytest.raises(SystemExit) as bad:
        main(["recall", "hi", "--timeout", "0", *where])  # 0.5 s at least
    assert bad.value.code == ExitCode.USAGE


def test_a_shim_started_while_the_config_file_is_empty_finds_the_daemon_later(
    tmp_path: Path, in_process: Any
) -> None:
    """An MCP shim started in the instant an editor had emptied the configuration file (whose
    `home:` is not the default) reaches the daemon once the file is whole again: it looks the
    socket up again when none answers where it looked (was: the default socket for its whole
    life, every tool call "no sidecar daemon is listening")."""
    config = tmp_path / "config.yaml"
    config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SIDECAR_", "XDG_"))}
    env["HOME"] = str(tmp_path / "userhome")  # the default home: no daemon there
    shim = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "mcp", "--agent", "claude", "--config", str(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert shim.stdin is not None and shim.stdout is not None

    def ask(rid: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        assert shim.stdin is not None and shim.stdout is not None
        line = json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        shim.stdin.write(line.encode() + b"\n")
        shim.stdin.flush()
        answer: dict[str, Any] = json.loads(shim.stdout.readline())
        return answer

    try:
        init = {
            "protocolVersion": "2025-03-26",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        }
        assert "result" in ask(1, "initialize", init)  # started (on the defaults)
        config.write_text(f"home: {in_process.cfg.home}\n")  # the editor's save is complete
        found = ask(2, "tools/call", {"name": "memory_search", "arguments": {"query": "audio recorder"}})
        assert not found["result"].get("isError"), found
        written = ask(3, "tools/call", {"name": "memory_write", "arguments": {"slug": "s", "content": "x"}})
        assert not written["result"].get("isError"), written
    finally:
        shim.stdin.close()
        shim.wait(timeout=60)
        shim.stdout.close()
        assert shim.stderr is not None
        shim.stderr.close()


def test_a_command_waits_briefly_for_an_emptied_config_file(
    tmp_path: Path, in_process: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CLI command that finds the configuration file empty waits a moment for it to be written
    and uses it then (was: the defaults at once, "no daemon is listening")."""
    config = tmp_path / "config.yaml"
    config.write_text("# being written\n")
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "userhome"))
    monkeypatch.setattr(cli_parser, "_json_errors", False)
    # The editor's write lands while the command waits (in place of its pause: no timing).
    monkeypatch.setattr(cli_parser, "_pause", lambda _s: config.write_text(f"home: {in_process.cfg.home}\n"))
    assert main(["status", "--config", str(config)]) == 0
    out = capsys.readouterr()
    assert "is empty" not in out.err and "Index" in out.out


def test_doctor_says_the_share_is_unmounted(tmp_path: Path, serve_in_process: Any) -> None:
    """`sidecar doctor` with the vault's share unmounted: the vault check warns (its folder is an
    empty mount point) and a check of what the running daemon cannot read fails, naming the
    offline vault (was: vault ok, daily notes ok with no format, "the daemon reports none")."""
    v = _journal_vault(tmp_path / "nas")
    server = serve_in_process(v, model=KEYWORD_ONLY)
    probes = Probes(
        inotify_limit=write(tmp_path / "max_user_watches", "100000\n"),
        home_dir=tmp_path / "userhome",
        systemctl="/bin/false",
    )
    before = {c.name: c for c in run_checks(server.cfg, probes)}
    assert before["vault"].ok and before["roots"].ok and not before["roots"].warning
    _unmount(v, tmp_path / "aside")
    server.harness.sweep()
    checks = {c.name: c for c in run_checks(server.cfg, probes)}
    vault = checks["vault"]
    assert vault.warning and "is empty: nothing to index (an unmounted share" in vault.verdict
    assert "daily notes" not in checks  # nothing to read in an empty mount point
    roots = checks["roots"]
    assert not roots.ok and "cannot read vault, wiki now" in roots.verdict and "mount the share" in roots.todo
    assert "FAIL  roots" in render(list(checks.values()), server.cfg)


@pytest.mark.parametrize("age", [-86_400.0, -1_000_000_000.0])
def test_an_empty_config_file_dated_in_the_future_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, age: float
) -> None:
    """A modification time ahead of the clock is no save in progress: it cost every command 2 s."""
    config = tmp_path / "config.yaml"
    config.write_text("# home: /somewhere\n")
    os.utime(config, (time.time() - age, time.time() - age))
    monkeypatch.setattr(cli_parser, "_pause", lambda _s: pytest.fail("waited for a future-dated empty file"))
    args = cli_parser.build_parser().parse_args(["status", "--config", str(config)])
    assert cli_parser.config_of(args).source_file == config


def test_a_config_file_left_empty_long_ago_is_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A configuration file whose every line is commented out, unchanged for a while, is taken as
    it is at once: the wait is for an editor's save in progress, not a cost of every command."""
    config = tmp_path / "config.yaml"
    config.write_text("# home: /somewhere\n")
    os.utime(config, (1_000_000_000, 1_000_000_000))
    monkeypatch.setattr(cli_parser, "_pause", lambda _s: pytest.fail("waited for an old empty file"))
    args = cli_parser.build_parser().parse_args(["status", "--config", str(config)])
    assert cli_parser.config_of(args).source_file == config


def test_a_rebuild_is_refused_only_for_an_offline_root_with_notes_indexed(
    tmp_path: Path, serve_in_process: Any
) -> None:
    """The refusal names what to run when the vault was emptied on purpose; once its notes are
    confirmed deleted, the wiki folder, still missing, holds no note indexed and a rebuild runs
    (was: refused for as long as the wiki stayed offline, with nothing of it to lose)."""
    from sidecar.contracts.errors import UnreadableError

    v = _journal_vault(tmp_path / "nas")
    server = serve_in_process(v, model=KEYWORD_ONLY)
    indexer = server.harness.indexer
    _unmount(v, tmp_path / "aside")
    server.harness.sweep()
    with pytest.raises(UnreadableError) as refused:
        indexer.refuse_rebuild()
    assert "emptied it on purpose, `sidecar index --confirm-deletions vault`" in str(refused.value)
    indexer.sweep(confirm_deletions=["vault", "wiki"])
    roots = server.harness.supervisor.roots
    assert not indexer.manifest.file_states("vault/") and not indexer.manifest.file_states("wiki/")
    assert not roots["vault"].offline and roots["wiki"].offline
    indexer.refuse_rebuild()


def test_hits_of_notes_whose_deletion_is_held_say_so(tmp_path: Path, serve_in_process: Any) -> None:
    """Most of a folder deleted at once is held by the mass-deletion guard (for hours): search and
    recall kept answering with the deleted notes' text as current, while `get` said the note was
    gone. Each such hit is marked now (``deletionHeld``; the CLI and the MCP text say it), the
    recall block says which, and a hit of a note still there is not marked."""
    from sidecar.clients.mcp_texts import text_of_search
    from sidecar.contracts.notices import DELETION_HELD_MARK

    v = tmp_path / "v"
    for i in range(6):
        write(v / f"Alt/n{i}.md", f"# Alt {i}\n\nDer Leuchtturmwärter {i} notiert Sturmflut {i}.\n")
    write(v / "Bleibt.md", "# Bleibt\n\nDer Leuchtturmwärter Hauke notiert jede Sturmflut.\n")
    server = serve_in_process(v, model=KEYWORD_ONLY)
    shutil.rmtree(v / "Alt")
    server.harness.sweep()
    st = server.harness.supervisor.roots["vault"]
    assert st.hold_kind == "mass" and st.held_deletions == 6
    got = server.call("search", {"query": "Leuchtturmwärter Sturmflut", "limit": 10})
    marks = {h["reference"]: h.get("deletionHeld", False) for h in got["hits"]}
    assert marks["vault/Bleibt"] is False
    assert marks["vault/Alt/n0"] is True and sum(marks.values()) == 6
    assert f"; {DELETION_HELD_MARK})" in text_of_search("Leuchtturmwärter Sturmflut", got)
    recalled = server.call("recall", {"message": "Was notiert der Leuchtturmwärter zur Sturmflut?"})
    held = [h["reference"] for h in recalled["hits"] if h.get("deletionHeld")]
    assert held and "deleted on disk; sidecar holds" in recalled["context"]
    note = [line for line in recalled["context"].splitlines() if line.startswith("Note: ")]
    assert len(note) == 1 and all(ref in note[0] for ref in held)


def test_a_rebuild_without_a_daemon_is_not_refused_for_a_slow_note_check(
    tmp_path: Path, make_cfg: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The rebuild's check that opens every indexed note one after another could outlast the
    scan timeout on a large vault on a slow share, and then refused a rebuild that worked before
    ("cannot be read now … hung share?"). It stops when half the timeout is spent (here the first
    open takes all of it), says so in the log, and the rebuild runs; a note it did not reach is
    not taken as unreadable."""
    import sidecar.index.unreadable as unreadable_mod
    from sidecar.daemon.oneshot import index_once

    v = tmp_path / "v"
    for i in range(3):
        write(v / "Work" / f"w{i}.md", f"# W{i}\n\nwork note {i} about the heronsgate\n")
    cfg = make_cfg(v, **{"embedder.enabled": False})
    assert index_once(cfg, rebuild=False)["changed"] == 3
    now = [0.0]
    asked: list[Path] = []

    def slow_refusal(path: Path) -> str | None:
        """Each open takes the whole timeout; a note reached after the first is unreadable."""
        asked.append(path)
        now[0] += cfg.watch.scan_timeout_seconds
        return "unreadable (Permission denied)" if len(asked) > 1 else None

    monkeypatch.setattr(unreadable_mod, "_clock", lambda: now[0], raising=False)
    monkeypatch.setattr(unreadable_mod, "read_refusal", slow_refusal)
    with caplog.at_level("WARNING", logger="sidecar.index.diff"):
        assert index_once(cfg, rebuild=True)["files"] == 3
    assert len(asked) == 1
    assert "rebuild_check_incomplete root=vault checked=1 of=3" in caplog.text


def test_a_rebuild_without_a_daemon_runs_when_one_notes_open_does_not_return(
    tmp_path: Path, make_cfg: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A note whose open does not return within the scan timeout marked the whole root offline
    and refused the rebuild ("hung share?") although its listing had answered: the check gives
    up on the rest, says so in the log, and the rebuild runs."""
    import threading

    import sidecar.index.unreadable as unreadable_mod
    from sidecar.daemon.oneshot import index_once

    v = tmp_path / "v"
    for i in range(2):
        write(v / "Work" / f"w{i}.md", f"# W{i}\n\nwork note {i} about the heronsgate\n")
    cfg = make_cfg(v, **{"embedder.enabled": False, "watch.scanTimeoutSeconds": 1})
    assert index_once(cfg, rebuild=False)["changed"] == 2
    release = threading.Event()

    def hung_refusal(path: Path) -> str | None:
        """The open of a note on a share that stopped answering."""
        release.wait(30)
        return None

    monkeypatch.setattr(unreadable_mod, "read_refusal", hung_refusal)
    try:
        with caplog.at_level("WARNING", logger="sidecar.index.diff"):
            assert index_once(cfg, rebuild=True)["files"] == 2
    finally:
        release.set()
    assert "rebuild_check_incomplete root=vault checked=some of=2" in caplog.text
