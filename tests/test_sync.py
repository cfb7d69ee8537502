"""Following the files through outages and crashes, with a real daemon process."""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import RemoteError
from tests.conftest import DaemonProcess, make_notes, store_ids, write

pytestmark = pytest.mark.model

FAST_RETRY = {"SIDECAR_WATCH_RETRY_BASE_SECONDS": "0.5", "SIDECAR_WATCH_RETRY_MAX_SECONDS": "1"}


def _vault_root(h: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in h["roots"] if r["name"] == "vault")


def test_vanished_root_stays_searchable_and_recovers(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """A vanished vault goes offline, loses no chunk, comes back by itself with the edits made meanwhile."""
    d: DaemonProcess = daemon_factory(vault, env=FAST_RETRY).start()
    chunks = d.health()["index"]["chunks"]
    away = tmp_path / "unmounted"
    vault.rename(away)
    d.call("index")  # a sweep now, as the next scheduled one would
    h = d.wait_for(lambda h: _vault_root(h)["mode"] == "offline", timeout=30)
    assert h["index"]["chunks"] == chunks
    assert d.call("search", {"query": "spark plugs"})["hits"][0]["reference"] == "vault/Projects/Boat"
    assert "vault" in d.run_cli("status").stdout and "PROBLEM" in d.run_cli("status").stdout
    # get reads the file itself: an offline root says so (not "cannot be resolved", and never the
    # file of whatever now lies at the path).
    with pytest.raises(RemoteError, match="offline"):
        d.call("get", {"reference": "vault/Projects/Boat"})
    ran = d.run_cli("index")  # says what it could not sweep, not only the totals
    assert "vault offline, kept as indexed" in ran.stdout + ran.stderr
    write(away / "Projects" / "Boat.md", "# Boat\n\n## Engine\n\nThe outboard engine got a new propeller.\n")
    write(away / "Kayak.md", "# Kayak\n\nThe kayak paddle hangs in the garage loft.\n")
    away.rename(vault)
    # Files are committed in batches: the count can reach 5 (Kayak) before the edited Boat is in,
    # so wait for the recovery sweep to finish, not for the count alone.
    d.wait_for(
        lambda h: (
            _vault_root(h)["mode"] != "offline"
            and h["index"]["files"] == 5
            and h["index"]["phase"] == "idle"
            and h["index"]["pending_vectors"] == 0
        ),
        timeout=60,
    )
    assert "watcher_recovered" in d.log.read_text() and "watcher_retry" in d.log.read_text()
    hits = d.call("search", {"query": "outboard propeller"})["hits"]
    assert hits[0]["reference"] == "vault/Projects/Boat" and "propeller" in hits[0]["text"]


def test_a_vault_failing_with_an_error_starts_offline_and_events_go_on(
    daemon_factory: Any, tmp_path: Path
) -> None:
    """A vault path that fails with an error other than "not found" (here ENAMETOOLONG; a dead
    share answers ENOTCONN or EIO the same way): the daemon starts and serves, the vault is shown
    offline with the reason, and file events keep working for the agents' inboxes (the watcher
    thread died on the first such error, and serve exited with a traceback)."""
    vault = tmp_path / ("v" * 300)
    d: DaemonProcess = daemon_factory(vault, keyword_only=True).start(timeout=60)
    h = d.wait_for(lambda h: _vault_root(h)["mode"] == "offline", timeout=30)
    assert "too long" in (_vault_root(h)["error"] or "")
    inbox = d.home / "agents" / "claude" / "memory"
    d.call("write", {"slug": "first", "content": "# First\n\nheron colony\n"}, agent="claude")
    write(inbox / "by-hand.md", "# By hand\n\nThe kestrel nests under the eaves.\n")
    d.wait_for(lambda h: h["index"]["files"] == 2, timeout=20)  # an event: no sweep is due
    status = d.run_cli("status").stdout  # vectors turned off by the configuration: not a failure
    assert "Vectors: off" in status and "fix the model" not in status and h["embedder"]["state"] == "off"
    log = d.log.read_text()
    assert "Exception in thread" not in log
    assert "changes detected" not in log and "change detected" not in log  # watchfiles' own INFO
    assert d.stop() == 0


def test_recreated_root_is_watched_again(daemon_factory: Any, vault: Path, tmp_path: Path) -> None:
    """After the vault folder is replaced by a new one, saves in it are still seen by events."""
    d: DaemonProcess = daemon_factory(vault, keyword_only=True).start()  # no vector is asked for
    mark = d.log_size()
    shutil.copytree(vault, tmp_path / "copy")
    shutil.rmtree(vault)
    (tmp_path / "copy").rename(vault)
    # A liveness look (every 5 s) notices the new inode and starts the watch again, with a sweep
    # for what came meanwhile: waited for, so the note below is seen by an event, not that sweep.
    restarted = "watcher_restart reason=a watched folder was replaced"
    tail = d.wait_for_log(restarted, mark, timeout=30)
    after = mark + len(tail[: tail.index(restarted)].encode())
    d.wait_for_log("watcher_started", after, timeout=30)
    d.wait_for_log("sweep_done", after, timeout=30)
    write(vault / "Fresh.md", "# Fresh\n\nThe greenhouse heater switches on below five degrees.\n")
    d.wait_for(lambda h: h["index"]["files"] == 5, timeout=30)
    assert d.call("search", {"query": "greenhouse heater"})["hits"][0]["reference"] == "vault/Fresh"


def test_network_mount_runs_in_polling_mode(daemon_factory: Any, vault: Path, tmp_path: Path) -> None:
    """A vault on a cifs share (per the mount table) is polled on its own interval and says so."""
    table = tmp_path / "mountinfo"
    table.write_text(f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:35 / {vault} rw - cifs //nas/v rw\n")
    env = {"SIDECAR_WATCH_MOUNT_TABLE": str(table), "SIDECAR_WATCH_POLL_SECONDS": "1"}
    d: DaemonProcess = daemon_factory(vault, env=env, keyword_only=True).start()
    assert _vault_root(d.health())["mode"] == "polling"
    sweeps = d.health()["index"]["sweeps"]
    d.wait_for(lambda h: h["index"]["sweeps"] >= sweeps + 2, timeout=20)


def test_kill_9_at_twenty_moments_converges(daemon_factory: Any, tmp_path: Path) -> None:
    """SIGKILL at 20 moments of indexing 200 notes; after restarts the index equals a clean rebuild."""
    vault = tmp_path / "big-vault"
    make_notes(vault, 200)
    # Convergence, not ranking, is under test: the faster real model (3x) embeds the 200 notes
    # of each start; the clean rebuild uses it too, since chunk sizes are counted in its tokens.
    fast = {"SIDECAR_EMBEDDER_MODEL": "all-MiniLM-L6-v2"}
    d: DaemonProcess = daemon_factory(vault, name="killed", env=fast)
    rng = random.Random(11)
    for _ in range(20):
        d.start(wait=None)
        time.sleep(rng.uniform(0.3, 3.0))
        d.stop(signal.SIGKILL)
        if rng.random() < 0.3:  # the vault changes between crashes too
            victim = vault / "folder1" / f"note-{rng.randrange(200):03d}.md"
            if victim.exists():
                victim.unlink()
            write(
                vault / "folder9" / f"late-{rng.randrange(1000)}.md", "# Late\n\nadded between two crashes\n"
            )
    d.start(wait=None)
    d.wait_for(lambda h: h["index"]["state"] == "ready" and h["index"]["pending_vectors"] == 0, timeout=180)
    assert d.stop() == 0
    clean = daemon_factory(vault, name="clean", env=fast)
    out = clean.run_cli("index", "--vault", str(vault), check=True)
    assert "0 without vectors" in out.stderr
    ids, bm25_ids, vec_ids = store_ids(d.home)
    clean_ids, clean_bm25, clean_vec = store_ids(clean.home)
    assert ids == clean_ids, "manifest chunks differ from a clean rebuild"
    assert bm25_ids == ids and vec_ids == ids
    assert clean_bm25 == clean_ids == clean_vec
    notes = set(vault.rglob("*.md"))
    assert len(notes) > 150
    assert not os.path.exists(d.socket)
