"""Hostile files and layouts in the vault and the home: names that do not decode, named pipes,
symlinks under agents/ and in the vault, modes of everything the daemon writes, references that
must round-trip, leftover temp files. (The socket's connection, input and time limits are tested
on the in-process server, tests/test_server.py.)"""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import RemoteError
from tests.conftest import write
from tests.daemon_process import DaemonProcess

BAD = b"caf\xe9"  # Latin-1 bytes: not valid UTF-8


def _daemon(factory: Any, vault: Path | None, **extra: str) -> DaemonProcess:
    """A daemon without the model (the files are under test here), with ``extra`` settings."""
    d: DaemonProcess = factory(vault, env=extra, keyword_only=True)
    return d


def _refs(hits: list[dict[str, Any]]) -> list[str]:
    return [h["reference"] for h in hits]


def _log(d: DaemonProcess) -> str:
    return d.log.read_text(errors="replace")


def _wait_log(d: DaemonProcess, event: str, timeout: float = 20) -> None:
    """Wait until the daemon's log holds ``event`` (a stable event name or its detail)."""
    d.wait_for(lambda _h: event in _log(d), timeout)


def _new_note_is_indexed(d: DaemonProcess, vault: Path, name: str, word: str) -> None:
    """A note written now (``name``: its path in the vault) is found within 20 s: by a file
    event, the scheduled sweep is an hour away."""
    files = d.health()["index"]["files"]
    write(vault / f"{name}.md", f"# {name}\n\n{word}\n")
    d.wait_for(lambda h: h["index"]["files"] == files + 1, 20)
    assert _refs(d.call("search", {"query": word})["hits"]) == [f"vault/{name}"]


def test_undecodable_names_before_start(daemon_factory: Any, tmp_path: Path) -> None:
    """A file and a folder whose names are not UTF-8 are skipped and counted; the rest is indexed
    and file events keep working (the recursive watch cannot take such a folder)."""
    vault = tmp_path / "vault"
    write(vault / "Good.md", "# Good\n\nquokka habitat notes\n")
    vault_b = os.fsencode(vault)
    with open(vault_b + b"/" + BAD + b".md", "wb") as fh:
        fh.write(b"# bad name\n\nzebrafinch\n")
    os.mkdir(vault_b + b"/" + BAD + b"-folder")
    with open(vault_b + b"/" + BAD + b"-folder/Inside.md", "wb") as fh:
        fh.write(b"# inside\n\nzebrafinch\n")
    write(vault / "Sub" / "Other.md", "# Other\n\nplatypus\n")
    d = _daemon(daemon_factory, vault).start(timeout=60)
    h = d.health()
    assert h["index"]["state"] == "ready" and h["index"]["files"] == 2
    assert h["index"]["skipped"].get("name is not valid UTF-8") == 2
    assert not h["problems"]["active"]
    assert _refs(d.call("search", {"query": "quokka"})["hits"]) == ["vault/Good"]
    assert d.call("search", {"query": "zebrafinch"})["hits"] == []
    _wait_log(d, "(one by one)")  # the watcher started over, folder by folder
    _new_note_is_indexed(d, vault, "Later", "wombat")
    _new_note_is_indexed(d, vault, "Sub/Deeper", "echidna")
    assert d.stop() == 0


def test_undecodable_names_while_running(daemon_factory: Any, tmp_path: Path) -> None:
    """An empty folder and a note with names that are not UTF-8, made while the daemon runs, stop
    neither the watcher nor indexing."""
    vault = tmp_path / "vault"
    write(vault / "Good.md", "# Good\n\nquokka habitat notes\n")
    d = _daemon(daemon_factory, vault).start(timeout=60)
    _wait_log(d, "watcher_started")  # the names below are made while the watch runs
    vault_b = os.fsencode(vault)
    os.mkdir(vault_b + b"/" + BAD + b"-empty")
    with open(vault_b + b"/later-" + BAD + b".md", "wb") as fh:
        fh.write(b"# later\n")
    _wait_log(d, "watcher_undecodable_path")
    _wait_log(d, "(one by one)")
    _new_note_is_indexed(d, vault, "Later", "wombat")
    h = d.health()
    assert h["index"]["skipped"].get("name is not valid UTF-8") == 2
    assert not h["problems"]["active"]
    assert d.stop() == 0


def test_named_pipes_never_block_a_sweep_or_get(daemon_factory: Any, tmp_path: Path) -> None:
    """A fifo named like a note is skipped by the sweep, and `get` of it answers at once (four in
    parallel, more than the request workers), while health and search keep answering."""
    vault = tmp_path / "vault"
    write(vault / "Good.md", "# Good\n\nquokka habitat notes\n")
    os.mkfifo(vault / "pipe.md")
    home = tmp_path / "home"
    inbox = home / "agents" / "claude" / "memory"
    inbox.mkdir(parents=True, mode=0o700)
    os.mkfifo(inbox / "piped.md")
    d = _daemon(daemon_factory, vault, SIDECAR_SERVER_WORKERS="2").start(timeout=60)
    assert d.health()["index"]["skipped"].get("not a regular file") == 2
    errors: list[str] = []

    def get(ref: str, agent: str | None = None) -> None:
        try:
            d.call("get", {"reference": ref}, agent=agent)
        except RemoteError as exc:
            errors.append(exc.code)

    t0 = time.monotonic()
    threads = [threading.Thread(target=get, args=("vault/pipe",)) for _ in range(4)]
    threads.append(threading.Thread(target=get, args=("memory/piped", "claude")))
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert time.monotonic() - t0 < 10
    assert errors == ["unreadable"] * 5  # there, but no file a note can be
    assert d.health()["index"]["state"] == "ready"
    assert _refs(d.call("search", {"query": "quokka"})["hits"]) == ["vault/Good"]
    assert d.stop() == 0


def test_symlink_layouts_never_confine_wrongly(daemon_factory: Any, tmp_path: Path) -> None:
    """Every layout of the report: an agent folder linked elsewhere, an inbox linked into another
    agent's inbox or outside, a note that is a link, a vault link into a dot-folder."""
    vault = tmp_path / "vault"
    write(vault / "Good.md", "# Good\n\nquokka habitat notes\n")
    write(vault / ".hidden/hidden.md", "# hidden\n\nsecretpelican\n")
    os.symlink(".hidden/hidden.md", vault / "inside-link.md")
    outside = tmp_path / "outside"
    write(outside / "loot.md", "---\nowner: someone\n---\n# loot\n\nsecretcormorant\n")
    home = tmp_path / "home"
    agents = home / "agents"
    (agents / "victim" / "memory").mkdir(parents=True, mode=0o700)
    write(agents / "victim" / "memory" / "diary.md", "# diary\n\nsecretheron\n")
    (agents / "eve").mkdir(mode=0o700)
    os.symlink(agents / "victim" / "memory", agents / "eve" / "memory")  # into another inbox
    os.symlink(outside, agents / "mallory")  # the agent folder itself, before memory/ exists
    (agents / "out").mkdir(mode=0o700)
    os.symlink(outside, agents / "out" / "memory")  # an inbox linked outside
    (agents / "claude" / "memory").mkdir(parents=True, mode=0o700)
    os.symlink(outside / "loot.md", agents / "claude" / "memory" / "linked.md")  # a note that is a link
    before = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    d = _daemon(daemon_factory, vault).start(timeout=60)

    for agent in ("eve", "mallory", "out"):
        with pytest.raises(RemoteError) as info:
            d.call("write", {"slug": "x", "content": "planted"}, agent=agent)
        assert "symbolic link" in str(info.value)
    with pytest.raises(RemoteError, match="symbolic link"):
        d.call("edit", {"slug": "linked", "content": "changed"}, agent="claude")
    with pytest.raises(RemoteError, match="symbolic link"):
        d.call("write", {"slug": "linked", "content": "changed"}, agent="claude")
    # Nothing indexed or served through a link: the other inbox, outside, the dot-folder.
    h = d.health()
    assert set(h["index"]["by_agent"]) == {"victim"}
    for word in ("secretpelican", "secretcormorant"):
        assert d.call("search", {"query": word})["hits"] == []
    assert _refs(d.call("search", {"query": "secretheron"})["hits"]) == ["memory/victim/diary"]
    assert d.call("search", {"query": "secretheron"}, agent="eve")["hits"] == []
    for ref, agent in (
        ("memory/diary", "eve"),
        ("memory/out/loot", None),
        ("memory/linked", "claude"),
        ("vault/inside-link", None),
        ("vault/.hidden/hidden", None),
    ):
        with pytest.raises(RemoteError):
            d.call("get", {"reference": ref}, agent=agent)
    assert d.call("list", {}, agent="eve")["notes"] == []
    # The outside folder and the victim's inbox are as they were: no note, no audit log, no temp file.
    assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in (agents / "victim" / "memory").iterdir()) == ["diary.md"]
    assert d.stop() == 0


def test_links_out_of_the_vault_are_refused_by_sweeps_and_file_events(
    daemon_factory: Any, tmp_path: Path
) -> None:
    """A wiki folder that is a symlink into another agent's inbox or out of the vault is not
    read; file events arriving through a folder symlink (the watch follows it), or naming a note
    that links into a dot-folder, index nothing; what a sweep refuses, events refuse too."""
    vault = tmp_path / "vault"
    write(vault / "Good.md", "# Good\n\nquokka habitat notes\n")
    write(vault / ".hidden/hidden.md", "# hidden\n\nsecretpelican\n")
    outside = tmp_path / "outside"
    write(outside / "dir/old.md", "# old\n\nsecretgannet\n")
    home = tmp_path / "home"
    inbox = home / "agents" / "bob" / "memory"
    inbox.mkdir(parents=True, mode=0o700)
    write(inbox / "plan.md", "# plan\n\nsecretheron\n")
    os.symlink(inbox, vault / "wiki")  # the wiki folder: a link into bob's inbox
    os.symlink(outside / "dir", vault / "linked-dir")  # a folder link out of the vault
    d = _daemon(daemon_factory, vault).start(timeout=60)
    for word in ("secretheron", "secretgannet", "secretpelican"):
        assert d.call("search", {"query": word}, agent="alice")["hits"] == [], word
    with pytest.raises(RemoteError, match="outside"):
        d.call("get", {"reference": "wiki/plan"}, agent="alice")
    # Each link counted once: the wiki folder by the wiki root, the folder link by the vault's scan.
    skipped = d.health()["index"]["skipped"]
    assert skipped["symlink leads outside the root"] == 1
    assert sum(n for why, n in skipped.items() if why.startswith("folder is a symlink")) == 1
    # Events: a note written below the folder link, a note linking into the dot-folder, then a
    # note of the vault itself (whose event must arrive and be indexed after the others).
    write(outside / "dir" / "new.md", "# new\n\nsecretcormorant\n")
    os.symlink(".hidden/hidden.md", vault / "hid.md")
    _new_note_is_indexed(d, vault, "Later", "wombatburrow")
    for word in ("secretcormorant", "secretpelican", "secretgannet"):
        assert d.call("search", {"query": word})["hits"] == [], word
    # The watch goes folder by folder, links left out (a recursive one sets watches through them),
    # and still sees notes in folders made later, a dotted name too, and in a folder deleted and
    # made again (its old watch died with it).
    assert "watcher_flat reason=a folder symlink inside" in _log(d)
    mark = d.log_size()
    (vault / "v1.2").mkdir()
    d.wait_for_log("watcher_started", mark)  # the new folder's event restarted the watch with it
    _new_note_is_indexed(d, vault, "v1.2/Dotted", "pangolinscales")
    (vault / "Again").mkdir()
    _new_note_is_indexed(d, vault, "Again/First", "axolotlgills")
    shutil.rmtree(vault / "Again")
    d.wait_for(lambda h: h["index"]["by_source"]["vault"]["files"] == 3, 20)  # Good, Later, Dotted
    mark = d.log_size()
    (vault / "Again").mkdir()
    # the folder's own event is handled (the watch started again with it) before the note is
    # written in it
    d.wait_for_log("watcher_started", mark)
    _new_note_is_indexed(d, vault, "Again/Second", "narwhaltusk")
    assert d.stop() == 0


def test_a_link_swapped_after_the_check_is_not_read(tmp_path: Path) -> None:
    """The file a note's path opens is checked, not only the link seen by the scan: a link
    swapped to a file outside the root between scan and read is refused (a race made real by
    reading after the swap)."""
    from sidecar.vault.note_text import NoteUnreadable, read_note
    from sidecar.vault.sources import Root

    vault = tmp_path / "vault"
    write(vault / "real.md", "# real\n\ninside text\n")
    write(tmp_path / "outside" / "secret.md", "# secret\n\noutside text\n")
    root = Root("vault", vault)
    os.symlink("real.md", vault / "swap.md")
    assert "inside text" in read_note(vault / "swap.md", 1 << 20, root)[1]
    os.unlink(vault / "swap.md")
    os.symlink(tmp_path / "outside" / "secret.md", vault / "swap.md")  # swapped after the scan
    with pytest.raises(NoteUnreadable, match="outside the root"):
        read_note(vault / "swap.md", 1 << 20, root)


def _tree_modes(home: Path) -> dict[str, int]:
    out = {}
    for folder, dirs, files in os.walk(home):
        for name in (*dirs, *files):
            p = Path(folder, name)
            st = p.lstat()
            if not stat.S_ISLNK(st.st_mode):
                out[str(p.relative_to(home))] = stat.S_IMODE(st.st_mode)
    return out


def _loose(top: Path, mode: int = 0o777) -> None:
    """Every folder and file under ``top`` (itself too) readable and writable by everyone."""
    for folder, _dirs, files in os.walk(top):
        Path(folder).chmod(mode)
        for name in files:
            Path(folder, name).chmod(mode & 0o666)


def test_tightening_follows_no_link_and_leaves_a_persons_models(tmp_path: Path) -> None:
    """An ``agents/`` that is a link to another folder is left whole at start: the walk went
    through it (``agents/.retired`` and each inbox's ``.trash`` were checked as links at their
    last component only) and chmodded the other folder's files. A model a person put in
    ``models/`` keeps its mode (a group-readable model shared with another account); the
    daemon's prepared copies and the folder itself are tightened."""
    from sidecar.config import load_config
    from sidecar.daemon.process import tighten_own

    home = tmp_path / "home"
    other = tmp_path / "other" / "agents"
    write(other / "a" / "audit.log", "{}\n")
    write(other / "a" / "memory" / ".trash" / "old.md", "# old\n")
    write(other / ".retired" / "a.audit.log", "{}\n")
    write(other / ".sidecar-home", "token\n")
    write(home / "models" / "my-model" / "model.onnx", "weights")
    write(home / "models" / ".prepared" / "my-model.onnx", "prepared")
    (home / "index").mkdir()
    os.symlink(other, home / "agents")
    _loose(other)
    _loose(home / "models", 0o755)
    before = _tree_modes(other)
    tighten_own(load_config(flags={"home": str(home)}, env={}))
    assert _tree_modes(other) == before
    modes = {p: m for p, m in _tree_modes(home).items() if not p.startswith("agents")}
    assert modes["models/my-model"] == 0o755 and modes["models/my-model/model.onnx"] == 0o644
    assert modes["models"] == modes["models/.prepared"] == 0o700
    assert modes["models/.prepared/my-model.onnx"] == 0o600


def test_a_linked_trash_or_inbox_is_not_followed(tmp_path: Path) -> None:
    """Below a real ``agents/``: an inbox, a ``.trash`` or ``.retired`` that is a link is not
    walked, nor what lies behind it."""
    from sidecar.config import load_config
    from sidecar.daemon.process import tighten_own

    home = tmp_path / "home"
    other = tmp_path / "other"
    write(other / "trash" / "old.md", "# old\n")
    write(other / "inbox" / ".trash" / "old.md", "# old\n")
    write(other / "retired" / "a.audit.log", "{}\n")
    (home / "agents" / "a" / "memory").mkdir(parents=True)
    os.symlink(other / "trash", home / "agents" / "a" / "memory" / ".trash")
    (home / "agents" / "b").mkdir()
    os.symlink(other / "inbox", home / "agents" / "b" / "memory")
    os.symlink(other / "retired", home / "agents" / ".retired")
    _loose(other)
    before = _tree_modes(other)
    tighten_own(load_config(flags={"home": str(home)}, env={}))
    assert _tree_modes(other) == before


def test_everything_under_the_home_is_private(daemon_factory: Any, tmp_path: Path) -> None:
    """A home left 0755 (index 0755, a manifest 0644) is tightened at start and says so; after
    start and after writes (with the model, so LanceDB writes too) nothing is group or other
    readable but a person's files in an agent's folder: a note in the inbox and one beside it keep
    their modes (the daemon did not make them; the folders' 0700 keep other users out), while
    the inbox's .trash and the audit log are tightened."""
    vault = tmp_path / "vault"
    write(vault / "Good.md", "# Good\n\nquokka habitat notes\n")
    home = tmp_path / "home"
    inbox = home / "agents" / "claude" / "memory"
    (home / "index").mkdir(parents=True)
    write(inbox / "old.md", "# old\n\nkept\n")
    write(inbox / ".trash" / "gone--20260101T000000000000.md", "# gone\n\nkept text\n")
    write(home / "agents" / "claude" / "audit.log", "{}\n").chmod(0o644)
    write(home / "agents" / "claude" / "todo.md", "# todo\n\nthe person's, beside the inbox\n")
    for p in (home, home / "index", home / "agents", home / "agents" / "claude", inbox, inbox / ".trash"):
        p.chmod(0o755)
    for p in (inbox / "old.md", inbox / ".trash" / "gone--20260101T000000000000.md"):
        p.chmod(0o644)
    (home / "agents" / "claude" / "todo.md").chmod(0o664)
    old = os.umask(0o022)  # a permissive login umask, inherited by the daemon
    try:
        d: DaemonProcess = daemon_factory(vault, env={})
        d.env.pop("SIDECAR_EMBEDDER_ENABLED", None)
        d.start(timeout=180)
    finally:
        os.umask(old)
    assert "home_tightened" in _log(d)
    person = {  # the person's: left as they are
        "agents/claude/memory/old.md": oct(0o644),
        "agents/claude/todo.md": oct(0o664),
    }
    loose = {p: oct(m) for p, m in _tree_modes(home).items() if m & 0o077}
    assert loose == person
    for i in range(5):
        d.call("write", {"slug": f"n{i}", "content": f"# note {i}\n\nfact number {i}\n"}, agent="claude")
    d.call("delete", {"slug": "n0"}, agent="claude")
    d.call("write", {"slug": "fresh", "content": "# fresh\n\nnew agent\n"}, agent="newagent")
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0, 60)
    modes = _tree_modes(home)
    assert any(p.startswith("index/vectors") for p in modes)  # LanceDB wrote files
    assert {p: oct(m) for p, m in modes.items() if m & 0o077} == person
    assert modes["agents/claude/memory/n1.md"] == 0o600
    assert d.stop() == 0


def test_references_round_trip_and_temp_files_are_cleaned(daemon_factory: Any, tmp_path: Path) -> None:
    """Every reference search returns is accepted by get (a backslash in a name, a path over
    2,000 characters); temp files a killed write left in an inbox are cleared at start (kept in
    .trash unless it is a second name of the note itself)."""
    vault = tmp_path / "vault"
    write(vault / "back\\slash.md", "# Back\n\nnarwhal tusk\n")
    write(vault / "Shout.MD", "# Shout\n\nbellbird\n")
    write(vault / "twice.md.md", "# Twice\n\nkakapo\n")
    write(vault / "twice.md", "# Once\n\nkea parrot\n")
    deep = vault.joinpath(*(["d" * 200] * 11))
    write(deep / "Deep.md", "# Deep\n\nabyssal plain\n")
    home = tmp_path / "home"
    inbox = home / "agents" / "claude" / "memory"
    inbox.mkdir(parents=True, mode=0o700)
    write(inbox / "kept.md", "# kept\n")
    write(inbox / ".kept.1a2b3c4d.tmp", "half a write")
    d = _daemon(daemon_factory, vault).start(timeout=60)
    assert sorted(p.name for p in inbox.iterdir()) == [".trash", "kept.md"]  # kept there, not removed
    assert "inbox_temp_kept" in _log(d)
    for word in ("bellbird", "kakapo", "kea", "narwhal", "abyssal"):
        ref = d.call("search", {"query": word})["hits"][0]["reference"]
        assert word in d.call("get", {"reference": ref})["text"], ref
    assert len(ref) > 2000
    assert d.call("get", {"reference": "vault/back\\slash"})["reference"] == "vault/back\\slash"
    assert d.stop() == 0
