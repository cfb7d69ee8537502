"""Shares under a real daemon: a vault emptied in place (its mount point left behind) while
agents write memory, a genuine mass deletion held and confirmed, a vault that appears after the
start, and a full index disk whose notes are searchable seconds after space is freed."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import RemoteError
from tests.conftest import store_ids, write
from tests.daemon_process import DaemonProcess
from tests.reliability.disks import FAST_RETRY, fill, tmpfs

pytestmark = pytest.mark.model

FAST = {**FAST_RETRY, "SIDECAR_WATCH_DEBOUNCE_MS": "50"}


def _root(h: dict[str, Any], name: str = "vault") -> dict[str, Any]:
    return next((r for r in h["roots"] if r["name"] == name), {"mode": None})


def _vault_files(h: dict[str, Any]) -> int:
    return int(h["index"]["by_source"].get("vault", {}).get("files", 0))


def _problem_count(h: dict[str, Any], area: str) -> int:
    """How often the active problem of ``area`` was reported (0: none is active)."""
    return next((int(p["count"]) for p in h["problems"]["active"] if p["area"] == area), 0)


def _swept_since(h: dict[str, Any], sweeps: int) -> bool:
    """A sweep ended after ``sweeps`` had, and none is queued or running."""
    idx = h["index"]
    return bool(idx["sweeps"] > sweeps and not h["queue"]["depth"] and idx["phase"] == "idle")


def _fill_vault(vault: Path, n: int) -> None:
    for i in range(n):
        write(vault / "Log" / f"entry-{i}.md", f"# Entry {i}\n\nThe lighthouse keeper logged storm {i}.\n")


def test_emptied_in_place_while_memory_is_written(daemon_factory: Any, vault: Path, tmp_path: Path) -> None:
    """The vault folder emptied in place for longer than the old confirmation window (11 s with
    memory writes going on, then 90 s without): no chunk leaves the index. Restored, nothing is
    embedded again. A genuine mass deletion is held, then applied on confirmation, and its notes,
    restored, come back with their kept vectors (`vectors.reused`, not `vectors.embedded`)."""
    _fill_vault(vault, 12)
    d: DaemonProcess = daemon_factory(vault, env=FAST).start()
    h = d.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    chunks, vault_files = h["index"]["chunks"], _vault_files(h)
    saved = tmp_path / "saved"
    shutil.copytree(vault, saved)
    for p in list(vault.iterdir()):  # the mount point stays, its content is gone
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    d.wait_for(lambda h: _root(h)["mode"] == "offline", 30)
    embedded = d.health()["vectors"]["embedded"]
    deadline, n = time.monotonic() + 15, 0
    while time.monotonic() < deadline:
        note = {"slug": f"note-{n}", "content": f"# Note {n}\n\nkayak trip {n}\n"}
        out = d.call("write", note, agent="ops")
        assert out["searchable"] is True
        n += 1
        time.sleep(0.3)
    h = d.health()
    assert _vault_files(h) == vault_files and h["index"]["chunks"] >= chunks
    assert _root(h)["hold"]["kind"] == "empty" and _root(h)["held_deletions"] > 0
    assert "--confirm-deletions vault" in d.run_cli("status").stdout
    assert h["index"]["sweeps"] > 5  # many sweeps saw it: sweeps no longer confirm anything
    memory_embedded = h["vectors"]["embedded"] - embedded
    print(f"emptied 15 s: {n} memory writes, {h['index']['sweeps']} sweeps, vault {vault_files} notes kept")
    shutil.copytree(saved, vault, dirs_exist_ok=True)
    h = d.wait_for(lambda h: _root(h)["mode"] != "offline", 30)
    h = d.wait_for(lambda h: h["index"]["pending_vectors"] == 0, 30)
    assert _vault_files(h) == vault_files
    assert h["vectors"]["embedded"] - embedded == memory_embedded  # only the memory notes

    # A genuine mass deletion (same mount, some notes left): held until confirmed. The folder goes
    # in one step: deleted file by file, a loaded machine's watcher may see the first few as
    # their own batch, and a few deletions seen by events are applied at once by design.
    (vault / "Log").rename(tmp_path / "Log-gone")
    d.wait_for(lambda h: (_root(h).get("hold") or {}).get("kind") == "mass", 30)
    sweeps = d.call("index")["sweeps"]  # a sweep asked for now sees the deletions again: still held
    h = d.wait_for(lambda h: _swept_since(h, sweeps))
    assert _vault_files(h) == vault_files and _root(h)["hold"]["kind"] == "mass"
    gone = sorted((saved / "Log").glob("*.md"))[0].stem
    with pytest.raises(RemoteError, match="its deletion is held"):  # not "the vault is offline"
        d.call("get", {"reference": f"vault/Log/{gone}"})
    d.call("index", {"confirmDeletions": "vault"})
    h = d.wait_for(lambda h: _vault_files(h) == vault_files - 12, 30)
    assert _root(h)["mode"] != "offline"
    before = h["vectors"]
    shutil.copytree(saved / "Log", vault / "Log", dirs_exist_ok=True)
    h = d.wait_for(lambda h: _vault_files(h) == vault_files and h["index"]["pending_vectors"] == 0, 30)
    assert h["vectors"]["embedded"] == before["embedded"]
    assert h["vectors"]["reused"] >= before["reused"] + 12
    print(f"restored after a confirmed deletion: {h['vectors']['reused'] - before['reused']} reused")
    assert d.stop() == 0
    ids, bm25_ids, vec_ids = store_ids(d.home)
    assert ids == bm25_ids == vec_ids


def test_vault_absent_at_start_is_indexed_when_it_appears(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """Started before the share is mounted (the vault path does not exist): the daemon serves,
    the root is offline; when the folder appears it is indexed by itself."""
    away = tmp_path / "not-mounted-yet"
    vault.rename(away)
    d: DaemonProcess = daemon_factory(vault, env=FAST).start(wait=None)
    h = d.wait_for(lambda h: _root(h)["mode"] == "offline", 60)
    assert _vault_files(h) == 0
    away.rename(vault)
    h = d.wait_for(
        lambda h: (
            _vault_files(h) == 3
            and h["index"]["by_source"].get("wiki", {}).get("files") == 1
            and _root(h)["mode"] != "offline"
            and _root(h, "wiki")["mode"] != "offline"
        ),
        60,
    )
    assert d.stop() == 0


def test_notes_written_while_the_index_disk_is_full_are_searchable_within_10_s(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """The index folder on a full tmpfs (the inbox and the vault elsewhere): memory notes are
    saved but not searchable, vault notes wait; within 10 s of the space being freed (no
    request needed) all of them are found."""
    d: DaemonProcess = daemon_factory(vault, env={**FAST, "SIDECAR_WATCH_RETRY_MAX_SECONDS": "600"})
    with tmpfs(d.home / "index", "48m") as index:
        d.start()
        d.call("write", {"slug": "first", "content": "# First\n\nbefore the disk filled\n"}, agent="ops")
        filler = fill(index)
        notes = [{"slug": f"full-{i}", "content": f"# Full {i}\n\nzeppelin hangar {i}\n"} for i in range(3)]
        outs = [d.call("write", note, agent="ops") for note in notes]
        assert not any(o["searchable"] for o in outs)
        write(vault / "Later.md", "# Later\n\nThe albatross circled the mast.\n")
        # Five failed updates: a backoff doubling from 1 s would now wait 16 s, longer than the 10 s
        # allowed below (the storage-fault retries are capped well under that).
        d.wait_for(lambda h: _problem_count(h, "index") >= 5, 60)
        filler.unlink()
        freed = time.monotonic()

        def found() -> bool:
            hits = d.call("search", {"query": "zeppelin hangar 2"}, agent="ops")["hits"]
            later = d.call("search", {"query": "albatross mast"})["hits"]
            return any(x["reference"] == "memory/full-2" for x in hits) and any(
                x["reference"] == "vault/Later" for x in later
            )

        while not found():
            assert time.monotonic() - freed < 10, "not searchable within 10 s of space being freed"
            time.sleep(0.2)
        took = time.monotonic() - freed
        print(f"searchable {took:.1f} s after space was freed")
        d.wait_for(lambda h: h["index"]["pending_vectors"] == 0, 60)
        assert d.stop() == 0
        ids, bm25_ids, vec_ids = store_ids(d.home)
        assert ids == bm25_ids == vec_ids
