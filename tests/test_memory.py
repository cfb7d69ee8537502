"""Agents' memory through a real daemon: write, search, get, list, edit, delete, scoping, guards."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import RemoteError
from tests.conftest import DaemonProcess

pytestmark = pytest.mark.model

NOTE = "The NAS backup runs restic at 02:00 to the offsite bucket; retention keeps 14 daily snapshots."


def _tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def running(daemon_factory: Any, vault: Path) -> DaemonProcess:
    return daemon_factory(vault).start()


@pytest.fixture
def keyword_only(daemon_factory: Any, vault: Path) -> DaemonProcess:
    """For the tests of refusals, the CLI and the write path: no vector is asked for, and a
    keyword-only daemon starts in a second or two, against several with the model."""
    return daemon_factory(vault, keyword_only=True).start()


def test_memory_lifecycle_and_scoping(running: DaemonProcess, vault: Path) -> None:
    """A written note is searchable on return, private to its agent, editable, and deleted into .trash."""
    before = _tree(vault)
    w = running.call(
        "write", {"slug": "nas-backup", "content": NOTE, "frontmatter": {"tags": ["nas"]}}, agent="claude"
    )
    assert w["reference"] == "memory/nas-backup" and w["created"] and w["searchable"]
    hits = running.call(
        "search", {"query": "offsite bucket retention snapshots", "limit": 3}, agent="claude"
    )["hits"]
    assert hits[0]["reference"] == "memory/nas-backup" and hits[0]["source"] == "memory"
    got = running.call("get", {"reference": "memory/nas-backup"}, agent="claude")
    assert "restic" in got["text"] and "tags:" in got["text"]
    listed = running.call("list", {}, agent="claude")["notes"]
    assert [n["reference"] for n in listed] == ["memory/nas-backup"] and listed[0]["tags"] == ["nas"]
    assert running.call("list", {"tag": "nas"}, agent="claude")["total"] == 1
    # as the tag pane shows a parent, and as search's tag filter takes it
    assert running.call("list", {"tag": " #NAS/"}, agent="claude")["total"] == 1
    assert running.call("list", {"source": "wiki"}, agent="claude")["notes"][0]["reference"] == "wiki/Backups"

    # another agent sees vault and wiki but never claude's memory
    other = running.call(
        "search", {"query": "offsite bucket retention snapshots", "limit": 10}, agent="codex"
    )["hits"]
    assert all(h["source"] != "memory" for h in other)
    assert running.call("list", {}, agent="codex")["notes"] == []
    with pytest.raises(RemoteError) as exc:
        running.call("get", {"reference": "memory/nas-backup"}, agent="codex")
    assert exc.value.code == "not_found"
    with pytest.raises(RemoteError):
        running.call("get", {"reference": "memory/claude/nas-backup"}, agent="codex")
    # the person at the CLI sees every inbox, named memory/<agent>/<slug>
    cli = running.call("search", {"query": "offsite bucket retention snapshots", "limit": 3})["hits"]
    assert cli[0]["reference"] == "memory/claude/nas-backup"

    e = running.call(
        "edit", {"slug": "nas-backup", "content": "Backups moved to borg on Sundays."}, agent="claude"
    )
    assert not e["created"]
    assert running.call("search", {"query": "borg sundays", "limit": 1}, agent="claude")["hits"][0][
        "reference"
    ] == ("memory/nas-backup")
    d = running.call("delete", {"slug": "nas-backup"}, agent="claude")
    assert d["deleted"] and Path(d["trash"]).parent.name == ".trash" and Path(d["trash"]).exists()
    assert all(
        h["source"] != "memory"
        for h in running.call("search", {"query": "borg sundays"}, agent="claude")["hits"]
    )
    assert running.call("delete", {"slug": "nas-backup"}, agent="claude")["deleted"] is False
    assert _tree(vault) == before, "memory operations never touch the vault"
    audit = (running.home / "agents" / "claude" / "audit.log").read_text().splitlines()
    assert len(audit) == 3


REFUSALS = [
    ("write", {"slug": "../../vault/x", "content": "x"}, "bad_memory_write"),
    ("write", {"slug": "vault/Garden", "content": "x"}, "bad_memory_write"),
    ("write", {"slug": "wiki/Backups", "content": "x"}, "bad_memory_write"),
    ("write", {"slug": "Has Spaces", "content": "x"}, "bad_memory_write"),
    ("write", {"slug": "ok", "content": 5}, "bad_request"),
    ("write", {"slug": "ok", "content": "x", "frontmatter": [1]}, "bad_memory_write"),
    ("edit", {"slug": "missing-note", "content": "x"}, "not_found"),
    ("write", {"slug": "ok", "content": "x", "path": "/etc/passwd"}, "bad_request"),
]


def test_memory_refusals(keyword_only: DaemonProcess, vault: Path) -> None:
    """Bad slugs, writes aimed at vault/wiki, wrong types, edits of missing notes: clear errors, no
    file (one daemon for every case: each refusal leaves nothing behind for the next)."""
    before = _tree(vault)
    inbox = keyword_only.home / "agents" / "claude" / "memory"
    for op, params, code in REFUSALS:
        with pytest.raises(RemoteError) as exc:
            keyword_only.call(op, params, agent="claude")
        assert exc.value.code == code, (op, params)
        assert _tree(vault) == before, (op, params)
        assert not inbox.exists() or [p.name for p in inbox.glob("*.md")] == [], (op, params)


def test_memory_ops_need_an_agent(keyword_only: DaemonProcess) -> None:
    """write/edit/delete/list without an agent name are refused."""
    for op in ("write", "edit", "delete", "list"):
        with pytest.raises(RemoteError, match="agent"):
            keyword_only.call(op, {"slug": "x", "content": "y"} if op in ("write", "edit") else {})


def test_oversize_and_secrets(daemon_factory: Any, vault: Path) -> None:
    """Content over memory.maxNoteBytes is refused; secrets are redacted before reaching disk."""
    d = daemon_factory(vault, env={"SIDECAR_MEMORY_MAX_NOTE_BYTES": "2000"}, keyword_only=True).start()
    with pytest.raises(RemoteError, match="maxNoteBytes"):
        d.call("write", {"slug": "big", "content": "x" * 5000}, agent="claude")
    w = d.call(
        "write",
        {"slug": "creds", "content": "key AKIAIOSFODNN7EXAMPLE, pw: postgres://u:Hunter2222@db/x"},
        agent="claude",
    )
    assert w["redacted"] == {"aws_access_key": 1, "url_password": 1}
    raw = (d.home / "agents" / "claude" / "memory" / "creds.md").read_text()
    assert "AKIAIOSFODNN7EXAMPLE" not in raw and "Hunter2222" not in raw


def test_near_duplicates_warn_or_reject(daemon_factory: Any, vault: Path) -> None:
    """A near-identical note is reported (warn) or refused naming the note to edit (reject)."""
    d = daemon_factory(vault, env={"SIDECAR_MEMORY_WRITE_ON_DUPLICATE": "reject"}).start()
    d.call("write", {"slug": "first", "content": NOTE}, agent="claude")
    with pytest.raises(RemoteError) as exc:
        d.call("write", {"slug": "second", "content": NOTE + " "}, agent="claude")
    assert exc.value.code == "duplicate" and "memory/first" in str(exc.value)
    assert not (d.home / "agents" / "claude" / "memory" / "second.md").exists()
    # replacing the same note is not a duplicate of itself; an unrelated note passes
    assert d.call("write", {"slug": "first", "content": NOTE}, agent="claude")["duplicates"] == []
    ok = d.call(
        "write", {"slug": "bread", "content": "Rye sourdough needs 20 hours of proofing."}, agent="claude"
    )
    assert ok["duplicates"] == []
    # another agent's identical note is not a duplicate (it cannot see claude's memory)
    assert d.call("write", {"slug": "mine", "content": NOTE}, agent="codex")["duplicates"] == []
    d.stop()
    warn = daemon_factory(vault, name="home2").start()
    warn.call("write", {"slug": "first", "content": NOTE}, agent="claude")
    res = warn.call("write", {"slug": "second", "content": NOTE}, agent="claude")
    assert res["duplicates"][0]["reference"] == "memory/first" and res["duplicates"][0]["similarity"] > 0.9


def test_cli_memory_commands(keyword_only: DaemonProcess) -> None:
    """`sidecar memory write/list/delete --agent` for people."""
    out = keyword_only.run_cli(
        "memory",
        "write",
        "cli-note",
        "--agent",
        "claude",
        "--content",
        "from the shell",
        "--frontmatter",
        '{"tags": ["cli"]}',
        check=True,
    )
    assert "memory/cli-note created" in out.stdout
    edited = keyword_only.run_cli(
        "memory", "edit", "cli-note", "--agent", "claude", "--content", "b", check=True
    )
    assert "memory/cli-note updated" in edited.stdout
    assert "memory/cli-note" in keyword_only.run_cli("memory", "list", "--agent", "claude", check=True).stdout
    assert (
        "moved to"
        in keyword_only.run_cli("memory", "delete", "cli-note", "--agent", "claude", check=True).stdout
    )


_TOPICS = (
    "The boat trailer needs new bearings before the spring launch at the lake.",
    "Grandmother's apple cake uses cinnamon, brown sugar and a shortcrust base.",
    "The home server runs Debian with ZFS mirrors on two refurbished disks.",
    "Tax documents for the year go into the blue folder in the office drawer.",
    "The cat gets her vaccination every March at the clinic on Lindenstrasse.",
    "Our router forwards port 443 to the reverse proxy on the small NUC.",
    "The garden hose reel broke; the replacement is a wall-mounted model.",
    "Piano lessons moved to Thursday evenings with the new teacher.",
)


def _long_note(n: int) -> str:
    """A note far longer than 256 tokens, every paragraph different."""
    parts = ["# Household handbook"]
    for i in range(n):
        parts.append(f"## Part {i}\n\n{_TOPICS[i % len(_TOPICS)]} Checked on visit {i}, item {i * 7}.")
    return "\n\n".join(parts) + "\n"


def test_duplicate_check_finds_exact_copies_of_long_notes(daemon_factory: Any, vault: Path) -> None:
    """An exact copy of a long note is 100% similar whatever its title, in memory and in the vault;
    reject names the note to edit; an unrelated note is no duplicate (real vectors)."""
    long = _long_note(24)
    (vault / "Handbook.md").write_text(long.replace("# Household handbook", "# Vault handbook"))
    reject = {"SIDECAR_MEMORY_WRITE_ON_DUPLICATE": "reject"}
    d = daemon_factory(vault, env=reject).start()
    with pytest.raises(RemoteError) as exc:
        d.call("write", {"slug": "handbook-copy", "content": long}, agent="claude")
    assert exc.value.code == "duplicate" and "vault/Handbook" in str(exc.value)
    d.stop()
    (vault / "Handbook.md").unlink()
    d = daemon_factory(vault, name="home2", env=reject).start()
    first = d.call("write", {"slug": "handbook", "content": long}, agent="claude")
    assert first["duplicates"] == []
    with pytest.raises(RemoteError) as exc:
        d.call(
            "write", {"slug": "other-title", "content": long.replace("Household", "Family")}, agent="claude"
        )
    assert exc.value.code == "duplicate" and "memory/handbook" in str(exc.value)
    assert "memory_edit" in str(exc.value)
    # warn mode is the same check: an edit reports what it is similar to
    copy = d.call("edit", {"slug": "handbook", "content": long}, agent="claude")
    assert copy["duplicates"] == []  # itself is never a copy
    tail = "\n\n".join(long.split("\n\n")[-6:])  # the last paragraphs only: beyond the first 256 tokens
    near = d.call("write", {"slug": "tail", "content": tail}, agent="claude")
    assert near["duplicates"] == [] or near["duplicates"][0]["similarity"] < 0.9
    other = d.call("write", {"slug": "unrelated", "content": NOTE}, agent="claude")
    assert other["duplicates"] == []
    d.stop()
    warn = daemon_factory(vault, name="home3").start()
    warn.call("write", {"slug": "handbook", "content": long}, agent="claude")
    copy = warn.call(
        "write", {"slug": "copy", "content": "# Copied\n\n" + long.split("\n", 1)[1]}, agent="claude"
    )
    dup = copy["duplicates"][0]
    assert dup["reference"] == "memory/handbook" and dup["similarity"] >= 0.95 and dup["byWords"] >= 0.95
