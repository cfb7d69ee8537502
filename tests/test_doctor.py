"""`sidecar doctor` on machines that are not well: a vault or folder that hangs (a hard NFS mount
whose server is gone), a home it cannot use, a service manager it cannot ask, another daemon
holding the home; and the snippets it prints."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sidecar.clients import doctor, snippets
from sidecar.clients.doctor import check_daemon, run_checks
from sidecar.clients.doctor_checks import Probes, plural, readable_size
from sidecar.clients.doctor_service import check_service
from sidecar.clients.doctor_storage import check_home
from sidecar.clients.service import service_file
from sidecar.config import Config, load_config
from tests.conftest import write

NO_MODEL = {"SIDECAR_EMBEDDER_ENABLED": "false"}


def _cfg(tmp_path: Path, vault: Path | None, timeout: float = 0.5, **flags: Any) -> Config:
    given = {"home": str(tmp_path / "home"), "watch.probeTimeoutSeconds": timeout, **flags}
    if vault is not None:
        given["vault.path"] = str(vault)
    return load_config(flags=given, env=NO_MODEL)


def _probes(tmp_path: Path) -> Probes:
    return Probes(
        inotify_limit=write(tmp_path / "max_user_watches", "100000\n"),
        home_dir=tmp_path / "userhome",
        systemctl="/bin/false",
    )


@contextlib.contextmanager
def _hung(monkeypatch: pytest.MonkeyPatch, below: Path) -> Iterator[list[str]]:
    """Every stat, lstat and listing of ``below`` (and under it) blocks until the test ends, as
    on a hung share; a call from the main thread is recorded instead (there it could not be
    interrupted: Ctrl-C did nothing) and answered at once, so the test fails instead of hanging."""
    release = threading.Event()
    on_main: list[str] = []

    def wrap(real: Callable[..., Any]) -> Callable[..., Any]:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(path, str | bytes | os.PathLike):
                p = os.fsdecode(path)
                if p == str(below) or p.startswith(str(below) + os.sep):
                    if threading.current_thread() is threading.main_thread():
                        on_main.append(f"{real.__name__}({p})")
                    else:
                        release.wait(60)
            return real(path, *args, **kwargs)

        return call

    for name in ("stat", "lstat", "scandir"):
        monkeypatch.setattr(os, name, wrap(getattr(os, name)))
    try:
        yield on_main
    finally:
        release.set()


def test_doctor_answers_on_a_vault_that_hangs(
    tmp_path: Path, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vault on a share that hangs: every check ends, the vault's as failed "did not answer
    within N s" (the mount lookup resolved the path with no deadline: doctor hung for ever,
    silently); the main thread never touches the vault, and each check is reported as it ends."""
    cfg = _cfg(tmp_path, vault)
    seen: list[str] = []
    with _hung(monkeypatch, vault) as on_main:
        started = time.monotonic()
        checks = run_checks(cfg, _probes(tmp_path), on_check=lambda c: seen.append(c.name))
        elapsed = time.monotonic() - started
    assert on_main == []
    assert elapsed < 10, elapsed
    assert seen == [c.name for c in checks]
    assert {"storage", "home", "vault", "file events", "disk", "model", "daemon", "service"} <= set(seen)
    failed = {c.name: c for c in checks if not c.ok}
    assert "did not answer within 0.5 s" in failed["vault"].verdict, failed
    assert set(failed) == {"vault", "daemon"}, failed


def test_doctor_names_a_folder_inside_the_vault_that_hangs(
    tmp_path: Path, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vault answers but a folder in it does not (another share mounted inside it): counting
    its folders for the inotify check stops there and fails, instead of walking for ever."""
    cfg = _cfg(tmp_path, vault)
    with _hung(monkeypatch, vault / "Projects") as on_main:
        started = time.monotonic()
        checks = run_checks(cfg, _probes(tmp_path))
        elapsed = time.monotonic() - started
    assert on_main == [] and elapsed < 10, (on_main, elapsed)
    events = next(c for c in checks if c.name == "file events")
    assert not events.ok and "did not answer within 0.5 s" in events.verdict, events


def test_ctrl_c_stops_doctor_waiting_on_a_hung_vault(
    tmp_path: Path, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C ends a doctor that waits on a hung share at once (the main thread sat in the
    kernel: SIGINT did nothing, only SIGTERM or SIGKILL ended it)."""
    cfg = _cfg(tmp_path, vault, timeout=30.0)
    # As in a terminal: a test run started as a shell's background job inherits SIGINT ignored
    # (then no Ctrl-C interrupts anything, and this test failed in such runs).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    try:
        with _hung(monkeypatch, vault) as on_main:
            started = time.monotonic()
            timer.start()
            with pytest.raises(KeyboardInterrupt):
                run_checks(cfg, _probes(tmp_path))
            elapsed = time.monotonic() - started
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert on_main == [] and elapsed < 5, (on_main, elapsed)


def test_doctor_shows_each_check_as_it_ends(
    tmp_path: Path, vault: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The header and each verdict are printed when they are known, not all at the end: a check
    that waits on a slow share is seen waiting."""
    from sidecar.clients.cli_service import cmd_doctor

    cfg = _cfg(tmp_path, vault)
    shown: list[str] = []
    real = doctor._Run.vault

    def vault_step(self: Any) -> Any:
        shown.append(capsys.readouterr().out)  # what a person sees while the vault is asked
        return real(self)

    monkeypatch.setattr(doctor._Run, "vault", vault_step)
    cmd_doctor(argparse.Namespace(json=False), cfg)
    assert "doctor: home" in shown[0] and "  ok    storage" in shown[0] and "  ok    home" in shown[0]
    rest = capsys.readouterr().out
    assert "vault" in rest and "Codex" in rest


def test_doctor_names_a_home_it_cannot_use(
    tmp_path: Path, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A home the daemon refuses (exit 5) fails the home check; doctor called storage and disk
    "ok" for a file in its place, a lock that is a folder, a read-only file system."""
    hfile = write(tmp_path / "hfile", "")
    check = check_home(_cfg(tmp_path, vault, home=str(hfile)))
    assert not check.ok and "is not a folder" in check.verdict and "--home" in check.todo
    failed = {c.name: c for c in run_checks(_cfg(tmp_path, vault, home=str(hfile)), _probes(tmp_path))}
    assert not failed["home"].ok
    cfg = _cfg(tmp_path, vault)
    (cfg.index_dir / ".lock").mkdir(parents=True)
    check = check_home(cfg)
    assert not check.ok and ".lock is not a file" in check.verdict
    (cfg.index_dir / ".lock").rmdir()
    write(cfg.agents_dir, "")
    check = check_home(cfg)
    assert not check.ok and "agents is a file where a folder belongs" in check.verdict
    cfg.agents_dir.unlink()
    assert check_home(cfg).ok and "writable" in check_home(cfg).verdict
    # A read-only mount (root may write anywhere else, so the file system is what says no).
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m, **k: False if Path(p) == cfg.home else real_access(p, m))
    monkeypatch.setattr(os, "statvfs", lambda p: SimpleNamespace(f_flag=os.ST_RDONLY))
    check = check_home(cfg)
    assert not check.ok and "read-only file system" in check.verdict
    monkeypatch.undo()
    fresh = check_home(_cfg(tmp_path, vault, home=str(tmp_path / "new" / "home")))
    assert fresh.ok and "does not exist yet" in fresh.verdict


def test_doctor_warns_of_a_home_in_memory(tmp_path: Path, vault: Path) -> None:
    """A home on tmpfs is a warning: the index and every agent's memory inbox go at the next
    reboot (it was "ok: a local disk (tmpfs)"); a warning does not fail doctor."""
    cfg = _cfg(tmp_path, vault)
    cfg.home.mkdir(parents=True)
    table = write(
        tmp_path / "mountinfo",
        f"1 0 8:1 / / rw - ext4 /dev/sda1 rw\n2 1 0:50 / {cfg.home} rw - tmpfs tmpfs rw\n",
    )
    checks = run_checks(cfg, Probes(**{**_probes(tmp_path).__dict__, "mount_table": table}))
    storage = next(c for c in checks if c.name == "storage")
    assert storage.ok and storage.warning and "lost at the next reboot" in storage.verdict
    text = doctor.render(checks, cfg)
    assert "  warn  storage" in text and "1 warning(s): storage" in text


def test_a_service_manager_that_cannot_be_asked_is_no_state(tmp_path: Path, vault: Path) -> None:
    """`systemctl --user` failing ("Failed to connect to bus") is said as such, as a warning (it
    was shown as the service's state: "ok installed, Failed to connect to bus: …")."""
    cfg = _cfg(tmp_path, vault)
    home_dir = tmp_path / "userhome"
    svc = service_file(cfg, home_dir, platform="linux")
    write(svc.path, svc.text)
    fake = write(
        tmp_path / "systemctl", "#!/bin/sh\necho 'Failed to connect to bus: No medium found' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    check = check_service(cfg, Probes(home_dir=home_dir, systemctl=str(fake)))
    assert check.ok and check.warning, check
    assert "could not be asked: Failed to connect to bus: No medium found" in check.verdict
    assert "installed, Failed" not in check.verdict and "loginctl enable-linger" in check.todo


def test_a_failed_service_is_reset_before_it_is_restarted(tmp_path: Path, vault: Path) -> None:
    """A unit failed by its start limit refuses `systemctl --user restart` while the limit lasts:
    doctor's hint said only "then systemctl --user restart sidecar"; it resets the failure first."""
    cfg = _cfg(tmp_path, vault)
    home_dir = tmp_path / "userhome"
    svc = service_file(cfg, home_dir, platform="linux")
    write(svc.path, svc.text)
    fake = write(tmp_path / "systemctl", "#!/bin/sh\necho failed\nexit 3\n")
    fake.chmod(0o755)
    check = check_service(cfg, Probes(home_dir=home_dir, systemctl=str(fake)))
    assert not check.ok and check.verdict == "installed but failed"
    reset, restart = check.todo.index("reset-failed sidecar"), check.todo.index("restart sidecar")
    assert reset < restart, check.todo


def test_doctor_compares_the_services_xdg_folders(tmp_path: Path, vault: Path) -> None:
    """A unit installed from a shell with XDG_CONFIG_HOME (no file named: its daemon reads
    $XDG_CONFIG_HOME/sidecar/config.yaml) and doctor run from one without (SSH, another
    terminal): the commands read another file than the daemon, and doctor said nothing. It fails
    the check now; an XDG_STATE_HOME of the unit's own (the home's record, --accept-home's
    consent) is a warning, as the other differing settings are."""
    home_dir = tmp_path / "userhome"
    given = {"home": str(tmp_path / "home"), "vault.path": str(vault)}
    cfg = load_config(flags=given, env=NO_MODEL)
    probes = Probes(home_dir=home_dir, systemctl="/bin/false")
    for extra, ok in (
        ({"XDG_CONFIG_HOME": str(tmp_path / "dotfiles")}, False),
        ({"XDG_STATE_HOME": "/srv/st"}, True),
    ):
        installed = service_file(load_config(flags=given, env={**NO_MODEL, **extra}), home_dir)
        assert "XDG_" in installed.text
        write(installed.path, installed.text)
        check = check_service(cfg, probes)
        assert check.ok is ok and next(iter(extra)) in check.verdict, check
        if ok:
            assert check.warning and "settings differ" in check.verdict


def test_the_same_xdg_folder_through_a_link_is_no_other(
    tmp_path: Path, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HOME reached through a link (a /home linked elsewhere) and XDG_CONFIG_HOME naming the same
    folder by its real path: one configuration file. The install pinned XDG_CONFIG_HOME (the
    names differed as text) and doctor failed: "it reads another configuration file"."""
    real = tmp_path / "real" / "u"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.setenv("HOME", str(tmp_path / "link" / "u"))
    given = {"home": str(tmp_path / "home"), "vault.path": str(vault)}
    same = {"XDG_CONFIG_HOME": str(real / ".config"), "XDG_STATE_HOME": str(real / ".local" / "state")}
    fresh = service_file(load_config(flags=given, env={**NO_MODEL, **same}), tmp_path / "userhome")
    assert "XDG_" not in fresh.text
    installed = service_file(load_config(flags=given, env=NO_MODEL), tmp_path / "userhome")
    pinned = installed.text.replace(
        "[Service]\n", f"[Service]\nEnvironment=XDG_CONFIG_HOME={real / '.config'}\n", 1
    )  # a unit an earlier install wrote so
    assert "Environment=XDG_CONFIG_HOME=" in pinned
    write(installed.path, pinned)
    check = check_service(
        load_config(flags=given, env=NO_MODEL), Probes(home_dir=tmp_path / "userhome", systemctl="/bin/false")
    )
    assert check.ok and "XDG_CONFIG_HOME" not in check.verdict, check


def test_the_start_hint_keeps_the_flags(tmp_path: Path, vault: Path) -> None:
    """No daemon: the hint names the --config and --home this command was given (a bare
    `sidecar serve` started a daemon on the default configuration, home and socket)."""
    conf = write(tmp_path / "c.yaml", f"vault:\n  path: {vault}\n")
    cfg = load_config(config_file=str(conf), flags={"home": str(tmp_path / "h")}, env=NO_MODEL)
    daemon, _other, _health = check_daemon(cfg)
    serve = shlex.join(["sidecar", "serve", "--config", str(conf.resolve()), "--home", str(tmp_path / "h")])
    assert not daemon.ok and serve in daemon.todo, daemon.todo


def test_a_daemon_holding_the_home_elsewhere_is_named_not_doubled(tmp_path: Path, vault: Path) -> None:
    """The index is held by a daemon listening on another socket (a service installed from a shell
    without XDG_RUNTIME_DIR): doctor and status name its socket and say not to start a second
    one (status said "Start it with `sidecar serve …`", and that daemon exited 4)."""
    home = tmp_path / "h"
    (home / "index").mkdir(parents=True)
    with (home / "index" / ".lock").open("w") as lock, socket.socket(socket.AF_UNIX) as listener:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lock.write(f"pid {os.getpid()}")
        lock.flush()
        elsewhere = tmp_path / "o.sock"
        listener.bind(str(elsewhere))
        listener.listen()
        cfg = _cfg(tmp_path, vault, home=str(home), socket=str(tmp_path / "here.sock"))
        daemon, other, _health = check_daemon(cfg)
        assert not daemon.ok and "start it" not in daemon.todo
        assert not other.ok and f"pid {os.getpid()} and listens on {elsewhere}" in other.verdict
        here = ["--home", str(home), "--socket", str(tmp_path / "here.sock")]
        out = subprocess.run(
            [sys.executable, "-m", "sidecar", "status", *here],
            capture_output=True, text=True, timeout=60, check=False, env={**os.environ, **NO_MODEL},
        )  # fmt: skip
    assert out.returncode == 6
    assert f"--socket {elsewhere}" in out.stdout and "Do not start a second one" in out.stdout
    assert "Start it with" not in out.stdout


def test_the_codex_snippet_is_toml_for_any_path(tmp_path: Path, vault: Path) -> None:
    """A home with characters beyond the BMP gives a Codex snippet TOML reads back to the same
    path (json.dumps wrote surrogate pairs, which TOML refuses); `doctor --json` gives the
    snippets as data, not one text blob."""
    home = tmp_path / 'notes 📁 ü "q" \\ x'
    cfg = _cfg(tmp_path, vault, home=str(home))
    toml = tomllib.loads(snippets.mcp_config(cfg)["codex"]["toml"])["mcp_servers"]["sidecar"]
    assert toml["args"][-2:] == ["--home", str(home)]
    text = snippets.mcp_snippets(cfg)
    block = text[text.index("[mcp_servers.sidecar]") :].splitlines()
    assert tomllib.loads("\n".join(line.strip() for line in block[:3]))["mcp_servers"]["sidecar"] == toml
    out = subprocess.run(
        [sys.executable, "-m", "sidecar", "doctor", "--json", "--home", str(home), "--vault", str(vault)],
        capture_output=True, text=True, timeout=120, check=False, env={**os.environ, **NO_MODEL},
    )  # fmt: skip
    mcp = json.loads(out.stdout)["mcp"]
    assert mcp["claudeCode"]["json"]["mcpServers"]["sidecar"]["args"][-2:] == ["--home", str(home)]
    assert tomllib.loads(mcp["codex"]["toml"])["mcp_servers"]["sidecar"] == toml


def test_sizes_and_counts_read_right() -> None:
    """ "1 vault folders" and "the index uses 0 MB" (a few hundred kilobytes) read wrong."""
    assert plural(1, "folder") == "1 folder" and plural(2, "folder") == "2 folders"
    assert readable_size(235_000) == "235 KB" and readable_size(12) == "1 KB"
    assert readable_size(5_300_000) == "5 MB" and readable_size(66_000_000_000) == "66.0 GB"


def test_the_configuration_loads_with_a_home_that_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every command loads the configuration first (search, status, each MCP shim's start): a
    home on a share that hangs kept its path as written after a deadline, as the vault's did;
    resolving it had none (the command hung before it could say anything)."""
    home = tmp_path / "home"
    home.mkdir()
    with _hung(monkeypatch, home) as on_main:
        started = time.monotonic()
        cfg = _cfg(tmp_path, None)
        elapsed = time.monotonic() - started
    assert on_main == [] and elapsed < 5, (on_main, elapsed)
    assert cfg.home == home


def test_doctor_fails_while_the_daemon_reports_a_problem(in_process: Any) -> None:
    """A daemon whose vector search fails on every query (and which re-embeds in a loop) made
    doctor say "all checks passed": the daemon's own active problems are a failed check, in
    status' words; a daemon with none passes it."""
    cfg = in_process.cfg
    checks = {c.name: c for c in doctor._Run(cfg, Probes()).daemon()}
    assert checks["daemon"].ok and checks["daemon problems"].ok, checks
    in_process.harness.problems.report("vector_search", "vector sample failed: lance error: Not found")
    checks = {c.name: c for c in doctor._Run(cfg, Probes()).daemon()}
    problems = checks["daemon problems"]
    assert not problems.ok and "vector search: vector sample failed" in problems.verdict
    assert "sidecar status" in problems.todo
    assert "all checks passed" not in doctor.summary(list(checks.values()))


def test_doctor_checks_the_vault_the_running_daemon_was_given(in_process: Any, tmp_path: Path) -> None:
    """The quick start gives the daemon its vault by flag; a plain `sidecar doctor` (no vault
    configured) said "no vault configured" (ok) and skipped the watch-limit check while that daemon
    indexed a vault. It checks the daemon's vault now, and says whose it is; a configuration naming
    another vault than the daemon indexes is a warning on the daemon check."""
    served = in_process.cfg
    bare = dataclasses.replace(served, vault=dataclasses.replace(served.vault, path=None))
    cfg, said = doctor.served_config(bare)
    assert cfg.vault.path == served.vault.path
    assert said == f"{served.vault.path} (the running daemon's; none configured here)"
    assert "none configured here" in doctor.header(cfg, said)
    run = doctor._Run(cfg, _probes(tmp_path))
    vault = run.vault()[0]
    assert vault.ok and "no vault configured" not in vault.verdict, vault
    assert "no vault folder to watch" not in run.file_events()[0].verdict

    other = dataclasses.replace(served, vault=dataclasses.replace(served.vault, path=tmp_path))
    assert doctor.served_config(other) == (other, str(tmp_path))
    checks = {c.name: c for c in doctor._Run(other, Probes()).daemon()}
    daemon = checks["daemon"]
    assert daemon.ok and daemon.warning, daemon
    assert f"it indexes {served.vault.path}, not the vault {tmp_path} named here" in daemon.verdict
    assert "restart it" in daemon.todo
    assert not {c.name: c for c in doctor._Run(served, Probes()).daemon()}["daemon"].warning
    # The same vault with another wiki folder (it passed: only the vault was compared).
    wiki = dataclasses.replace(served, vault=dataclasses.replace(served.vault, wiki_subfolder="Other"))
    daemon = {c.name: c for c in doctor._Run(wiki, Probes()).daemon()}["daemon"]
    assert daemon.ok and daemon.warning, daemon
    assert f"its wiki folder is {served.vault.path / served.vault.wiki_subfolder}, not " in daemon.verdict


def test_doctor_without_a_daemon_keeps_no_vault(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, None)
    assert doctor.served_config(cfg) == (cfg, "not configured")


def _newer_than_this(cfg: Config, store: str) -> None:
    """Mark one store of a kept index as a newer sidecar left it (a downgrade)."""
    import sqlite3

    from sidecar.stores.versions import BM25_LAYOUT, MANIFEST_SCHEMA

    if store == "manifest":
        db = sqlite3.connect(cfg.index_dir / "manifest.sqlite")
        db.execute(f"PRAGMA user_version={MANIFEST_SCHEMA + 1}")
        db.commit()
        db.close()
    else:
        (cfg.index_dir / "bm25" / "layout.json").write_text(f'{{"layout": {BM25_LAYOUT + 1}}}\n')


@pytest.mark.parametrize("store", ["manifest", "keyword"])
def test_doctor_and_status_say_the_index_is_a_newer_sidecars(
    daemon_factory: Any, tmp_path: Path, vault: Path, store: str
) -> None:
    """A daemon refused on an index a newer sidecar wrote (exit 3) was only explained in its log:
    `doctor` (no daemon needed) names the store, its version and this one's, and what to do;
    `status` finding no daemon says why it does not start instead of only "not running"."""
    from sidecar.contracts.errors import ExitCode
    from sidecar.stores.versions import BM25_LAYOUT, MANIFEST_SCHEMA

    d = daemon_factory(vault, keyword_only=True).start()
    assert d.stop() == 0
    cfg = _cfg(tmp_path, vault, home=str(d.home))
    assert {c.name: c for c in run_checks(cfg, _probes(tmp_path))}["index"].ok
    _newer_than_this(cfg, store)
    d.start(wait=None)
    assert d.proc is not None and d.proc.wait(timeout=120) == ExitCode.CONFIG
    index = {c.name: c for c in run_checks(cfg, _probes(tmp_path))}["index"]
    found, reads = (
        (f"schema {MANIFEST_SCHEMA + 1}", MANIFEST_SCHEMA)
        if store == "manifest"
        else (f"layout {BM25_LAYOUT + 1}", BM25_LAYOUT)
    )
    assert not index.ok
    assert f"index written by a newer sidecar ({store}" in index.verdict
    assert f"{found}, this one reads {reads}" in index.verdict
    assert "upgrade again, or rebuild" in index.verdict
    assert "sidecar index --rebuild" in index.todo
    r = subprocess.run(
        [sys.executable, "-m", "sidecar", "status"],
        capture_output=True,
        text=True,
        env={**d.env, "SIDECAR_HOME": str(d.home)},
        timeout=120,
        check=False,
    )
    assert r.returncode == ExitCode.NOT_RUNNING
    assert "refuses to start (exit code 3)" in r.stdout and f"{found}, this one reads {reads}" in r.stdout
    assert "sidecar index --rebuild" in r.stdout


def test_status_without_a_daemon_does_not_hang_on_an_index_file_that_never_answers(tmp_path: Path) -> None:
    """`status` finding no daemon reads the index's files to say why a start is refused; a home
    on a share that went away (a FIFO stands in) hung it with no limit. It is bounded now."""
    from sidecar.contracts.errors import ExitCode

    home = tmp_path / "home"
    (home / "index").mkdir(parents=True)
    os.mkfifo(home / "index" / "manifest.sqlite")
    env = {
        **os.environ,
        "SIDECAR_HOME": str(home),
        "SIDECAR_SOCKET": str(tmp_path / "s.sock"),
        "SIDECAR_WATCH_PROBE_TIMEOUT_SECONDS": "1",
    }
    r = subprocess.run(
        [sys.executable, "-m", "sidecar", "status"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert r.returncode == ExitCode.NOT_RUNNING and "not running" in r.stdout


def test_doctor_says_the_daemons_problems_in_status_words(in_process: Any) -> None:
    """doctor showed a problem's raw text (a Rust debug dump of sixty words, clipped at 300
    characters) where status says it plainly; a multi-line error keeps what its later lines
    name (the file, the key), not its first line alone."""
    in_process.harness.problems.report(
        "keyword_search",
        "BM25 commit failed: 'IoError { io_error: Os { code: 28, kind: StorageFull, message: \"No "
        'space left on device" }, filepath: "/h/index/bm25/meta.json" }\'',
    )
    in_process.harness.problems.report(
        "config",
        "the configuration file could not be reloaded: 2 configuration problems:\n"
        "  /c/sidecar.yaml: unknown key 'serch' (value 1)\n"
        "  /c/sidecar.yaml: search.limit = 'many' is not a number",
    )
    checks = {c.name: c for c in doctor._Run(in_process.cfg, Probes()).daemon()}
    verdict = checks["daemon problems"].verdict
    assert "disk full: BM25 commit failed: No space left on device (/h/index/bm25/meta.json)" in verdict
    assert "IoError" not in verdict and "\n" not in verdict
    assert "unknown key 'serch'" in verdict and "search.limit = 'many' is not a number" in verdict


def test_a_unit_installed_before_its_configuration_file_reads_that_file(tmp_path: Path, vault: Path) -> None:
    """`sidecar service install` before the configuration file was written: the unit names no
    --config and its daemon reads the default file. Once the file is written, doctor (which now
    reads it) called the unit's "another configuration file"; it is the same file. A unit naming
    a file that is gone is said as such (its daemon refuses every start); one whose default file
    is not the one this command reads still fails."""
    home_dir = tmp_path / "userhome"
    env = {**NO_MODEL, "XDG_CONFIG_HOME": str(tmp_path / "conf")}
    given = {"home": str(tmp_path / "home")}
    before = load_config(flags=given, env=env)
    assert before.source_file is None and before.default_file is not None
    installed = service_file(before, home_dir, platform="linux")
    assert "--config" not in installed.text
    assert f"the daemon reads {before.default_file} once it is written" in installed.text
    write(installed.path, installed.text)
    write(before.default_file, f"vault:\n  path: {vault}\n")
    now = load_config(flags=given, env=env)
    assert now.source_file == before.default_file.resolve()
    probes = Probes(home_dir=home_dir, systemctl="/bin/false")
    check = check_service(now, probes)
    assert "another configuration file" not in check.verdict, check
    assert check.verdict != "" and "not there" not in check.verdict
    # Named elsewhere: a file of its own (another one) and a file gone.
    other = write(tmp_path / "other.yaml", f"vault:\n  path: {vault}\n")
    elsewhere = load_config(config_file=str(other), flags=given, env=env)
    check = check_service(elsewhere, probes)
    assert not check.ok and "another configuration file" in check.verdict, check
    write(installed.path, service_file(elsewhere, home_dir, platform="linux").text)
    other.unlink()
    check = check_service(now, probes)
    assert not check.ok and "which is not there" in check.verdict, check


def test_the_index_records_which_release_wrote_it_and_a_downgrade_is_said(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Both releases of an upgrade called themselves one version and the index recorded no
    writer: nothing told a downgrade. Each writable start records its release and build as the
    last writer, and keeps the newest release that ever wrote it; a start of an older one logs
    it, doctor's index check warns ("written by a newer sidecar": run that one or rebuild), and a
    rebuild by this release makes it the newest again."""
    from sidecar.clients.doctor import check_index
    from sidecar.runtime.release import WRITERS_META, read_writers, this_release
    from tests.conftest import FakeEmbedder, Harness

    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        written = read_writers(h.stores.manifest.get_meta(WRITERS_META))
        assert written == {"last": this_release(), "newest": this_release()}
        assert check_index(cfg).ok and not check_index(cfg).warning
        newer = {"version": "9.9.9", "build": "fedcba987654"}
        h.stores.manifest.set_meta(WRITERS_META, json.dumps({"last": newer, "newest": newer}))
    finally:
        h.close()
    with caplog.at_level("WARNING"):
        h = Harness(cfg, FakeEmbedder())  # this, older, release starts on it
    try:
        assert "index_written_by_newer_release writer=sidecar 9.9.9 (build fedcba987654)" in caplog.text
        written = read_writers(h.stores.manifest.get_meta(WRITERS_META))
        assert written == {"last": this_release(), "newest": newer}  # still said after a restart
        check = check_index(cfg)
        assert check.ok and check.warning and "written by a newer sidecar (sidecar 9.9.9" in check.verdict
        assert "--rebuild" in check.todo
        h.indexer.clear()  # a rebuild: every note read anew by this release
        assert read_writers(h.stores.manifest.get_meta(WRITERS_META))["newest"] == this_release()
    finally:
        h.close()
    assert not check_index(cfg).warning


def test_an_index_a_release_before_the_record_wrote_is_said_so(make_cfg: Any, vault: Path) -> None:
    """An index with notes and no record of its writers (0.2 wrote it: it records none) was
    recorded as this release's alone, and a downgrade to 0.2 meanwhile was said by nothing: the
    first write records that an unrecorded release wrote it too, doctor says so at every look, and
    a rebuild (every note read anew) drops it. A new index has none."""
    from sidecar.clients.doctor import check_index
    from sidecar.runtime.release import WRITERS_META
    from tests.conftest import FakeEmbedder, Harness

    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        h.stores.manifest.delete_meta([WRITERS_META])  # as 0.2 left it
    finally:
        h.close()
    assert "before 0.3" not in check_index(cfg).verdict
    for _ in range(2):  # the first write records it, later ones keep it
        h = Harness(cfg, FakeEmbedder())
        h.close()
        check = check_index(cfg)
        assert check.ok and not check.warning, check
        assert "written by a release before 0.3 too, which records no writer" in check.verdict, check
    h = Harness(cfg, FakeEmbedder())
    try:
        h.indexer.clear()
    finally:
        h.close()
    assert "before 0.3" not in check_index(cfg).verdict


def test_a_new_index_is_not_said_to_be_written_before_the_record(make_cfg: Any, vault: Path) -> None:
    """A new index (no notes yet at the first write) is this release's alone."""
    from sidecar.clients.doctor import check_index
    from tests.conftest import FakeEmbedder, Harness

    cfg = make_cfg(vault)
    Harness(cfg, FakeEmbedder()).close()
    Harness(cfg, FakeEmbedder()).close()
    assert "before 0.3" not in check_index(cfg).verdict


def test_one_version_in_one_place() -> None:
    """The release is written once (sidecar/__init__.py; pyproject.toml reads it): no other file
    of the package or its tests spells it, so a bump edits one line (this test named it too)."""
    from sidecar import __version__

    root = Path(__file__).parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "sidecar.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", __version__), __version__
    spelled = [
        p.relative_to(root).as_posix()
        for folder in ("sidecar", "tests")
        for p in (root / folder).rglob("*.py")
        if f'"{__version__}"' in p.read_text(errors="replace")
    ]
    assert spelled == ["sidecar/__init__.py"], spelled


def test_doctor_names_what_the_services_daemon_waits_for(tmp_path: Path, vault: Path) -> None:
    """A service whose daemon waits (another daemon serves the home: active; a `sidecar index`
    run: activating): doctor said "installed and active", or "start it: systemctl --user enable
    --now sidecar", the command that then waited too; it names what the daemon waits for."""
    cfg = _cfg(tmp_path, vault)
    home_dir = tmp_path / "userhome"
    svc = service_file(cfg, home_dir, platform="linux")
    write(svc.path, svc.text)
    for state, status in (
        ("active", "waiting: another sidecar daemon is already serving /s (pid 7); taking over when it ends"),
        ("activating", "waiting: the index /h/index is in use by `sidecar index` (pid 8)"),
    ):
        asked = f'case "$*" in *is-active*) echo {state}; exit 0;; esac'
        fake = write(tmp_path / "systemctl", f"#!/bin/sh\n{asked}\necho 'StatusText={status}'\n")
        fake.chmod(0o755)
        check = check_service(cfg, Probes(home_dir=home_dir, systemctl=str(fake)))
        assert check.ok and check.warning, check
        assert f"installed, {state} but not serving: {status}" == check.verdict, check
        assert "start it" not in check.verdict + check.todo
        assert "systemctl --user status sidecar" in check.todo


def _start_of_build(
    cfg: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, build: str, run: str
) -> tuple[dict[str, dict[str, str]], str]:
    """A start of ``build`` (its process's run ``run``) on the index: what the index records of
    its writers then, and the warnings logged."""
    from sidecar.runtime import release
    from sidecar.runtime.release import WRITERS_META, read_writers
    from tests.conftest import FakeEmbedder, Harness

    monkeypatch.setattr(release, "build_id", lambda: build)
    monkeypatch.setattr(release, "_RUN", run, raising=False)
    caplog.clear()
    with caplog.at_level("WARNING"):
        h = Harness(cfg, FakeEmbedder())
    try:
        return read_writers(h.stores.manifest.get_meta(WRITERS_META)), caplog.text
    finally:
        h.close()


def test_an_upgrade_that_keeps_the_version_is_said_nowhere(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout pulled (the version kept, the build new): the build that wrote the index before
    was said as a possible downgrade, in the log, status and doctor, for the new daemon's whole
    life, and by doctor with the daemon stopped after the pull. A build never seen is an upgrade."""
    from sidecar.clients.doctor import check_index

    cfg = make_cfg(vault)
    _start_of_build(cfg, monkeypatch, caplog, "01d01d01d01d", "run-1")
    assert not check_index(cfg).warning  # pulled, the daemon not started yet: installed is new
    writers, logged = _start_of_build(cfg, monkeypatch, caplog, "0e30e30e30e3", "run-2")
    assert "index_written_by" not in logged, logged
    assert "before" not in writers and writers["last"]["build"] == "0e30e30e30e3"
    assert not check_index(cfg).warning


def test_a_build_started_after_a_later_build_of_its_release_is_said(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A downgrade between two checkouts of one version: NEW wrote the index after OLD, then OLD
    runs on it. doctor with the daemon stopped names the later
    build; the OLD daemon logs it and keeps it (health index.other_build), said by status and
    doctor for that daemon's life (its switches to writable too), not after its next start."""
    from sidecar import __version__
    from sidecar.clients.cli_render import _release_lines
    from sidecar.clients.doctor import _older_code, check_index
    from sidecar.runtime import release
    from sidecar.runtime.release import other_build, this_release

    cfg = make_cfg(vault)
    old, new = "01d01d01d01d", "0e30e30e30e3"
    _start_of_build(cfg, monkeypatch, caplog, old, "run-1")
    _start_of_build(cfg, monkeypatch, caplog, new, "run-2")
    monkeypatch.setattr(release, "build_id", lambda: old)
    check = check_index(cfg)  # OLD installed again, its daemon not started yet
    assert check.warning and f"last written by build {new} of this release, later than" in check.verdict
    writers, logged = _start_of_build(cfg, monkeypatch, caplog, old, "run-3")
    assert f"index_written_by_later_build writer=sidecar {__version__} (build {new})" in logged
    assert writers["before"] == {"version": __version__, "build": new}
    writers, _ = _start_of_build(cfg, monkeypatch, caplog, old, "run-3")  # a switch to writable
    other = other_build(writers, old)
    assert other == {"version": __version__, "build": new}
    said_status = "\n".join(_release_lines({"version": __version__, "build": old}, {"other_build": other}))
    assert f"the index was last written by build {new} of this release, later than" in said_status
    said_doctor = _older_code(this_release(), None, other)
    assert said_doctor is not None and f"last written by build {new}" in said_doctor[0]
    assert "rebuild" not in said_doctor[1] and "nothing is wrong" in said_doctor[1], said_doctor
    assert not check_index(cfg).warning  # its last writer is this build now
    writers, logged = _start_of_build(cfg, monkeypatch, caplog, old, "run-4")  # OLD's next start
    assert "before" not in writers and "index_written_by" not in logged
    writers, logged = _start_of_build(cfg, monkeypatch, caplog, new, "run-5")  # and NEW again
    assert "before" not in writers and "index_written_by" not in logged


def test_a_build_seen_long_ago_is_neither_new_nor_makes_the_latest_a_downgrade(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """70 builds of one release wrote an index in turn (a checkout over years): the first ones fell
    out of the 64 kept and counted as never seen, so the first build run again was taken for an
    upgrade and recorded as the latest, and the real latest run after it was called a downgrade.
    The record stays bounded."""
    from sidecar import __version__
    from sidecar.runtime import release
    from sidecar.runtime.release import downgraded_from, record_writer

    def start(build: str, value: str | None) -> str:
        monkeypatch.setattr(release, "build_id", lambda: build)
        return record_writer(value)

    builds = [f"{i:012x}" for i in range(1, 71)]
    value: str | None = None
    for build in builds:
        value = start(build, value)
    first, latest = builds[0], builds[-1]
    assert downgraded_from(value, first) == {"version": __version__, "build": latest}
    assert downgraded_from(value, builds[10]) == {"version": __version__, "build": latest}  # kept
    assert downgraded_from(value, "abcabcabcabc") is None  # never seen: an upgrade
    value = start(first, value)  # the first build writes the index again
    assert downgraded_from(value, latest) is None, "the latest build called a downgrade"
    assert downgraded_from(value, builds[10]) is None
    value = start(latest, value)
    assert downgraded_from(value, first) == {"version": __version__, "build": latest}
    monkeypatch.setattr(release, "_DROPPED_KEPT", 200)  # 4096 kept: the same with fewer builds
    for build in (f"{i:012x}" for i in range(100, 400)):  # 300 more: the record does not grow
        value = start(build, value)
    assert len(release._dropped(value)) == 200 and len(value) < 4000, len(value)
    assert downgraded_from(value, f"{200:012x}") == {"version": __version__, "build": f"{399:012x}"}
    assert downgraded_from(value, latest) is None  # out of the capped list too: taken for new


def test_new_builds_after_thousands_of_builds_are_not_called_downgrades(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A checkout over years makes a build of each edit: with thousands of builds dropped from the
    kept order, a build never seen must still be new (an upgrade, said nowhere), and one dropped
    long ago still a downgrade. A set of fixed size took about one new build in four for a dropped
    one after 2,000 builds: called a downgrade, and not kept in the order."""
    from sidecar import __version__
    from sidecar.runtime import release
    from sidecar.runtime.release import downgraded_from, record_writer

    current = [""]
    monkeypatch.setattr(release, "build_id", lambda: current[0])
    value: str | None = None
    for i in range(2000):
        current[0] = f"build-{i:05d}"
        value = record_writer(value)
    latest = {"version": __version__, "build": "build-01999"}
    called = [f"fresh-{j:05d}" for j in range(200) if downgraded_from(value, f"fresh-{j:05d}") is not None]
    assert not called, f"{len(called)} of 200 new builds called a downgrade"
    assert downgraded_from(value, "build-00000") == latest  # dropped 1,936 builds ago: still older
    assert downgraded_from(value, "build-01000") == latest
    current[0] = "fresh-00000"
    value = record_writer(value)
    assert release._builds(value)[-1] == "fresh-00000"  # a new build is the latest
    assert downgraded_from(value, "build-01999") == {"version": __version__, "build": "fresh-00000"}


def test_the_build_said_before_is_dropped_at_the_next_start_of_a_process_with_the_same_pid(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon that gets the same pid at every start (pid 1 in a container, `sidecar serve` its
    entrypoint) kept the later build's warning for good: the process is told by a token of its
    run, not by its pid."""
    cfg = make_cfg(vault)
    monkeypatch.setattr(os, "getpid", lambda: 1)
    _start_of_build(cfg, monkeypatch, caplog, "01d01d01d01d", "run-1")
    _start_of_build(cfg, monkeypatch, caplog, "0e30e30e30e3", "run-2")
    writers, _ = _start_of_build(cfg, monkeypatch, caplog, "01d01d01d01d", "run-3")
    assert "before" in writers
    writers, _ = _start_of_build(cfg, monkeypatch, caplog, "01d01d01d01d", "run-4")  # restarted
    assert "before" not in writers


def test_the_index_check_reads_the_schema_a_running_daemon_wrote(make_cfg: Any, vault: Path) -> None:
    """With a daemon of this version running on a new index, doctor said `manifest schema 0
    (upgraded at the next start)`: it read the file's header, and the schema a new manifest set
    is still in its write-ahead log until a checkpoint. It says the schema the daemon reads."""
    from sidecar.clients.doctor import check_index
    from sidecar.stores.versions import MANIFEST_SCHEMA
    from tests.conftest import FakeEmbedder, Harness

    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())  # the stores open, as a running daemon holds them
    try:
        h.sweep()
        check = check_index(cfg)
        assert check.ok and not check.warning, check
        assert f"manifest schema {MANIFEST_SCHEMA}," in check.verdict, check.verdict
        assert "upgraded" not in check.verdict, check.verdict
    finally:
        h.close()
    assert f"manifest schema {MANIFEST_SCHEMA}," in check_index(cfg).verdict  # closed: in the file


def test_the_index_check_says_an_index_a_newer_sidecar_runs_on_is_newer(make_cfg: Any, vault: Path) -> None:
    """A new index a newer sidecar runs on keeps its schema in the write-ahead log, the header
    saying 0: read through the log, doctor said `manifest schema 99 ...: this version reads them`
    (ok), though a daemon of this version refuses to start on it. It says a newer sidecar wrote it."""
    from sidecar.clients.doctor import check_index
    from tests.index_helpers import newer_manifest_in_log

    cfg = make_cfg(vault)
    writer = newer_manifest_in_log(cfg.index_dir / "manifest.sqlite")
    try:
        check = check_index(cfg)
    finally:
        writer.close()
    assert not check.ok, check
    assert "index written by a newer sidecar (manifest schema 99," in check.verdict, check.verdict
