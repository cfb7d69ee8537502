"""Storage faults, broken notes and vanishing shares against a real daemon process.

Disk-full and read-only cases need root and mount(2) (a small tmpfs, a read-only bind mount); where
that is not available they skip and say so. Figures of the longer runs are in RELIABILITY.md
(``python bench/chaos.py``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import ExitCode, RemoteError
from tests.conftest import store_ids, write
from tests.daemon_process import DaemonProcess, exchange
from tests.reliability.disks import FAST_RETRY, fill, mount, tmpfs

pytestmark = pytest.mark.model


def _snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _active(h: dict[str, Any]) -> set[str]:
    return {p["area"] for p in h["problems"]["active"]}


def test_disk_full_during_indexing_and_memory_write(daemon_factory: Any, vault: Path, tmp_path: Path) -> None:
    """With the home on a full tmpfs: searches keep working, the failure is in health and status,
    a memory write fails cleanly (old note intact, no temp file), nothing in the vault changes;
    with space back, everything written meanwhile is indexed and the problem clears."""
    before = _snapshot(vault)
    with tmpfs(tmp_path / "home", "48m") as home:
        d: DaemonProcess = daemon_factory(vault, env=FAST_RETRY).start()
        assert d.home == home
        d.call(
            "write", {"slug": "plan", "content": "# Plan\n\nRotate the backup disks monthly.\n"}, agent="ops"
        )
        inbox = next(home.rglob("plan.md")).parent
        original = (inbox / "plan.md").read_bytes()
        filler = fill(home)
        for i in range(20):
            write(vault / "Later" / f"note-{i}.md", f"# Later {i}\n\nThe lighthouse keeper logs storm {i}.\n")
        h = d.wait_for(lambda h: "index" in _active(h) or "embedding" in _active(h), timeout=60)
        assert h["pid"] == d.proc.pid  # type: ignore[union-attr]
        assert d.call("search", {"query": "spark plugs"})["hits"][0]["reference"] == "vault/Projects/Boat"
        with pytest.raises(RemoteError) as err:
            d.call("edit", {"slug": "plan", "content": "# Plan\n\n" + "x" * 50_000}, agent="ops")
        assert err.value.code in ("storage", "internal") and "space" in str(err.value).lower()
        assert (inbox / "plan.md").read_bytes() == original
        assert not [p for p in inbox.iterdir() if p.name.endswith(".tmp")]
        assert "PROBLEM" in d.run_cli("status").stdout
        filler.unlink()
        d.call("index")
        d.wait_for(
            lambda h: (
                h["index"]["files"] == 25  # 4 notes + 20 new + the memory note
                and not _active(h) & {"index", "embedding"}
                and h["index"]["pending_vectors"] == 0
            ),
            timeout=120,
        )
        hits = d.call("search", {"query": "lighthouse keeper storm 7"})["hits"]
        assert any(hit["reference"] == "vault/Later/note-7" for hit in hits)
        d.call("edit", {"slug": "plan", "content": "# Plan\n\nRotate the disks weekly.\n"}, agent="ops")
        assert not _active(d.health())
        assert d.stop() == 0
        ids, bm25_ids, vec_ids = store_ids(home)
        assert ids == bm25_ids == vec_ids
    assert _snapshot(vault) == {
        **before,
        **{k: v for k, v in _snapshot(vault).items() if k.startswith("Later")},
    }


def test_a_keyword_writer_killed_by_a_full_disk_comes_back(tmp_path: Path) -> None:
    """A segment flush that meets a full disk kills Tantivy's writer thread; every later document
    was refused ("an index writer was killed") until a restart, however much space was freed.
    Now the writer is replaced after a failed write, and the error names the full disk."""
    from sidecar.contracts.errors import StoreError
    from sidecar.stores.bm25 import Bm25Doc, Bm25Index

    def docs(tag: str, n: int) -> list[Bm25Doc]:
        body = " ".join(f"w{tag}{j}" for j in range(400))
        return [Bm25Doc(f"{tag}{i}", f"vault/{tag}{i}", "vault", "", f"T{i}", "", body) for i in range(n)]

    with tmpfs(tmp_path / "small", "3m") as disk:
        index = Bm25Index(disk / "bm25")
        try:
            filler = fill(disk)
            for attempt in range(2):

                def index_some(tag: str = f"a{attempt}x") -> None:
                    index.add(docs(tag, 200))
                    index.commit()

                with pytest.raises(StoreError, match="MB free on the index's disk"):
                    index_some()
            filler.unlink()
            index.add(docs("b", 50))
            index.commit()
            assert index.num_docs() == 50 and index.num_pages() == 50
        finally:
            index.close()


def test_a_start_on_a_full_disk_serves_the_index_read_only_and_resumes(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """A start whose index disk is full (the stores cannot be opened for writing) exited 5 and the
    service retried it forever, although the index on disk was whole. Now the daemon serves
    search, recall and get from it read-only (``staleSince`` on the answers), refuses indexing and
    memory writes with what is wrong, writes nothing into the index folder, and once space is back
    resumes by itself (same process) and catches up with the notes written meanwhile."""
    with tmpfs(tmp_path / "home", "24m") as home:
        d: DaemonProcess = daemon_factory(vault, keyword_only=True, env=FAST_RETRY).start()
        plan = "# Plan\n\nRotate the backup disks monthly.\n"
        d.call("write", {"slug": "plan", "content": plan}, agent="ops")
        assert d.stop() == 0
        filler = fill(home)
        index = {k: v for k, v in _snapshot(home / "index").items() if k != ".lock"}
        write(vault / "Later.md", "# Later\n\nThe lighthouse keeper logs every storm.\n")
        d.start(wait=None)
        h = d.wait_for(lambda h: "index" in _active(h), timeout=120)
        pid = h["pid"]
        problem = next(p for p in h["problems"]["active"] if p["area"] == "index")
        assert "the disk holding the index is full" in problem["error"]
        assert "answers come from the index as it was at" in problem["error"]
        found = d.call("search", {"query": "spark plugs"})
        assert found["hits"][0]["reference"] == "vault/Projects/Boat" and found.get("staleSince")
        assert d.call("get", {"reference": "vault/Garden"})["text"].startswith("---")
        assert "monthly" in d.call("search", {"query": "rotate backup disks"}, agent="ops")["hits"][0]["text"]
        assert d.call("recall", {"message": "how do we back up the NAS?"}).get("staleSince")
        for op, params in (("write", {"slug": "new", "content": "# New\n\nx\n"}), ("index", {})):
            with pytest.raises(RemoteError) as err:
                d.call(op, params, agent="ops")
            assert err.value.code == "storage" and "the disk holding the index is full" in str(err.value)
        with pytest.raises(RemoteError) as err:  # applied now, the switch to writable undid it
            d.call("reload", {})
        assert err.value.code == "storage" and "read-only while its disk is full" in str(err.value)
        status = d.run_cli("status").stdout
        assert "PROBLEM" in status and "the disk holding the index is full" in status
        assert {k: v for k, v in _snapshot(home / "index").items() if k != ".lock"} == index
        filler.unlink()
        d.wait_for(lambda h: "index" not in _active(h) and h["index"]["files"] == 6, timeout=120)
        hits = d.call("search", {"query": "lighthouse keeper storm"})["hits"]
        assert hits[0]["reference"] == "vault/Later" and d.health()["pid"] == pid
        d.call("write", {"slug": "new", "content": "# New\n\nThe disk has room again.\n"}, agent="ops")
        assert d.stop() == 0


def test_a_reload_asked_while_read_only_is_applied_once_the_index_is_writable(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """A reload was refused while the index was read-only (the switch to writable builds the parts
    from the start's configuration and would undo it), and the user was told to ask again later:
    a folder excluded in the file stayed in search after the disk had room. It is applied by the
    switch now."""
    cfg_file = tmp_path / "sidecar.yaml"
    cfg_file.write_text("embedder:\n  enabled: false\n")
    with tmpfs(tmp_path / "home", "24m") as home:
        d: DaemonProcess = daemon_factory(vault, extra=["--config", str(cfg_file)], env=FAST_RETRY).start()
        assert d.call("search", {"query": "spark plugs"})["hits"][0]["reference"] == "vault/Projects/Boat"
        assert d.stop() == 0
        filler = fill(home)
        d.start(wait=None)
        d.wait_for(lambda h: "index" in _active(h), timeout=120)
        cfg_file.write_text("embedder:\n  enabled: false\nindex:\n  exclude: [Projects/]\n")
        with pytest.raises(RemoteError) as err:
            d.call("reload", {})
        assert err.value.code == "storage" and "applied as soon as the index is writable" in str(err.value)
        assert d.call("search", {"query": "spark plugs"})["hits"]  # nothing applied yet
        assert "a configuration reload waits until the index is writable" in d.run_cli("status").stdout
        filler.unlink()
        d.wait_for(lambda h: "index" not in _active(h), timeout=120)
        d.wait_for(lambda h: h["index"]["excluded"] == {"index.exclude: Projects/": 1}, timeout=120)
        assert not d.call("search", {"query": "spark plugs", "minScore": 0})["hits"]
        assert d.stop() == 0


LONG = " ".join(f"x{i:x}q{i * 7919:x}z{i * 104729:x}" for i in range(400))  # few words, many tokens


def test_notes_caught_up_after_a_read_only_start_are_cut_by_the_model_s_tokenizer(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """The read-only start marked the daemon's model slot failed; the resume's catch-up sweep then
    cut the notes written meanwhile by a word estimate (4 chunks of ~1200 real tokens where the
    model's tokenizer makes 26) and nothing cut them again. They are cut as a normal start cuts."""
    import sqlite3

    with tmpfs(tmp_path / "home", "160m") as home:
        write(vault / "Control.md", f"# Control\n\n{LONG}\n")
        d: DaemonProcess = daemon_factory(vault, env=FAST_RETRY).start()
        d.wait_for(lambda h: h["index"]["files"] == 5, timeout=300)
        assert d.stop() == 0
        filler = fill(home)
        write(vault / "Later.md", f"# Control\n\n{LONG}\n")
        d.start(wait=None)
        d.wait_for(lambda h: "index" in _active(h), timeout=120)
        filler.unlink()
        d.wait_for(lambda h: "index" not in _active(h) and h["index"]["files"] == 6, timeout=300)
        assert d.stop() == 0
        db = sqlite3.connect(home / "index" / "manifest.sqlite")
        rows = dict(
            db.execute(
                "SELECT key, count(*) FROM chunks WHERE key IN ('vault/Control', 'vault/Later') GROUP BY key"
            ).fetchall()
        )
        db.close()
        assert rows["vault/Later"] == rows["vault/Control"] > 20, rows  # the word estimate made 4


def _deleted_but_held(pid: int, home: Path) -> list[str]:
    """Files under ``home`` the process still has open or mapped though they were deleted."""
    held = [
        f"map {line.split(maxsplit=5)[-1]}" for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
    ]
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            held.append("fd " + os.readlink(f"/proc/{pid}/fd/{fd}"))
    return sorted({h for h in held if str(home) in h and h.endswith("(deleted)")})


def test_the_read_only_stores_are_closed_when_the_daemon_resumes(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """The read-only keyword readers stayed open after the resume: every segment a merge deleted
    kept its space on the disk that had just run full, for the life of the process. They are
    closed at the switch (with the immutable manifest)."""
    with tmpfs(tmp_path / "home", "24m") as home:
        for i in range(30):
            write(vault / "A" / f"n{i}.md", f"# N{i}\n\nbody number {i} of the first batch.\n")
        d: DaemonProcess = daemon_factory(vault, keyword_only=True, env=FAST_RETRY).start()
        assert d.stop() == 0
        filler = fill(home)
        d.start(wait=None)
        pid = d.wait_for(lambda h: "index" in _active(h), timeout=120)["pid"]
        assert d.call("search", {"query": "body number 7 first batch"})["hits"]  # read-only readers
        first = [p for p in (home / "index" / "bm25").rglob("*") if p.suffix in {".idx", ".store"}]
        filler.unlink()
        d.wait_for(lambda h: "index" not in _active(h) and h["index"]["files"] == 34, timeout=120)
        for j in range(25):  # commits enough for a merge, which deletes the first segments
            for i in range(4):
                write(vault / "B" / f"m{j}-{i}.md", f"# M{j}\n\nsecond batch {j} {i} lighthouse.\n")
            d.wait_for(lambda h, j=j: h["index"]["files"] == 34 + 4 * (j + 1), timeout=60)
        for i in range(30):
            (vault / "A" / f"n{i}.md").unlink()
        d.wait_for(lambda h: h["index"]["files"] == 4 + 100, timeout=120)
        d.wait_for(lambda h: not all(p.exists() for p in first), timeout=120)  # merged away
        held = _deleted_but_held(pid, home)
        assert d.stop() == 0
        assert not [h for h in held if "/bm25/" in h or "manifest" in h], held


def test_an_index_of_a_newer_sidecar_on_a_full_disk_is_refused_as_such(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """A newer version's index on a full disk exited 5 ("free some space"), which the service
    restarts every few seconds: it is refused as a newer index (exit 3), as with space."""
    import sqlite3

    with tmpfs(tmp_path / "home", "24m") as home:
        d: DaemonProcess = daemon_factory(vault, keyword_only=True, env=FAST_RETRY).start()
        assert d.stop() == 0
        db = sqlite3.connect(home / "index" / "manifest.sqlite")
        db.execute("PRAGMA user_version=99")
        db.commit()
        db.close()
        fill(home)
        d.start(wait=None)
        assert d.proc is not None and d.proc.wait(timeout=120) == ExitCode.CONFIG


def test_read_only_index_directory(daemon_factory: Any, vault: Path, tmp_path: Path) -> None:
    """A read-only index folder: searches still answer, health says indexing fails, and once the
    folder is writable again the notes saved meanwhile are indexed."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a read-only bind mount (root ignores file modes)")
    d: DaemonProcess = daemon_factory(vault, env=FAST_RETRY).start()
    index = d.cfg.index_dir
    try:
        mount("--bind", str(index), str(index))
        mount("-o", "remount,bind,ro", str(index))
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"cannot bind-mount read-only here: {exc}")
    try:
        write(vault / "Dock.md", "# Dock\n\nThe floating dock needs new fenders before winter.\n")
        d.wait_for(lambda h: bool(_active(h) & {"index", "embedding"}), timeout=60)
        assert d.call("search", {"query": "spark plugs"})["hits"][0]["reference"] == "vault/Projects/Boat"
        # `sidecar index` says why it cannot finish (it waited silently for as long as it lasted).
        ran = d.run_cli("index")
        assert ran.returncode == ExitCode.REQUEST_FAILED and "cannot be updated now" in ran.stderr
    finally:
        subprocess.run(["umount", "-l", str(index)], check=False, capture_output=True, timeout=30)
    d.call("index")
    d.wait_for(
        lambda h: h["index"]["files"] == 5 and not _active(h) and h["index"]["pending_vectors"] == 0, 120
    )
    assert d.call("search", {"query": "floating dock fenders"})["hits"][0]["reference"] == "vault/Dock"


@pytest.mark.timeout(600)  # embeds a few hundred chunks of broken notes with the real model
def test_broken_notes_are_skipped_or_indexed_with_reasons(daemon_factory: Any, tmp_path: Path) -> None:
    """Every kind of broken note either indexes or is skipped with a reason in health; the daemon
    stays up and the good note is found."""
    vault = tmp_path / "vault"
    write(vault / "Good.md", "# Good\n\nThe weather station reports humidity every minute.\n")
    (vault / "Latin1.md").write_bytes("# Caf\xe9\n\nna\xefve cr\xe8me\n".encode("latin-1"))
    (vault / "Binary.md").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + os.urandom(2048))
    with (vault / "Huge.md").open("wb") as fh:  # 50 MB: over index.maxFileBytes
        fh.truncate(50 * 1024 * 1024)
    bomb = "---\na: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    write(vault / "Bomb.md", bomb + "---\n# Bomb\n\nbody after a YAML bomb\n")
    write(vault / "BadYaml.md", "---\ntitle: [unclosed\n---\n# Bad yaml\n\nbody text survives\n")
    write(vault / "Headings.md", "".join(f"## Heading {i}\n" for i in range(3_000)) + "\nend\n")
    # One 110 KB line (no newline for the parser to split at).
    write(vault / "Line.md", "# Line\n\n" + " ".join(f"w{i % 5000}" for i in range(20_000)) + "\n")
    write(vault / "Nested.md", "".join("  " * i + "- level\n" for i in range(400)))
    # What indexes and what is skipped is under test, not vectors: keyword-only, the 3,000
    # headings and the long line are not embedded (that took most of a minute).
    d: DaemonProcess = daemon_factory(vault, env={"SIDECAR_EMBEDDER_ENABLED": "false"}).start(wait=None)
    h = d.wait_for(lambda h: h["index"]["first_sweep_done"] and h["index"]["phase"] == "idle", timeout=120)
    skipped = h["index"]["skipped"]
    assert sum(skipped.values()) == 3, skipped  # binary, too large, not UTF-8
    assert any("large" in reason for reason in skipped)
    # good, bomb, bad YAML, headings, long line, nested (health reads its phase before the counts:
    # read after, one run saw idle beside none of them, counted mid-batch); the log with a miss
    assert h["index"]["files"] == 6, (h["index"], d.log.read_text()[-4000:])
    assert d.call("search", {"query": "weather station humidity"})["hits"][0]["reference"] == "vault/Good"
    assert d.call("search", {"query": "YAML bomb"})["hits"][0]["reference"] == "vault/Bomb"
    assert "Skipped files" in d.run_cli("status").stdout
    assert d.proc is not None and d.proc.poll() is None


def test_a_pasted_blob_is_indexed_for_keywords_but_never_embedded(
    daemon_factory: Any, tmp_path: Path
) -> None:
    """A pasted 100 KB base64 blob: one "word" far over the chunk budget, cut by characters; its
    ~170 chunks carry no language, so they are keyword-indexed and never sent to the model."""
    vault = tmp_path / "vault"
    write(vault / "Good.md", "# Good\n\nThe weather station reports humidity every minute.\n")
    write(vault / "Blob.md", "# Blob\n\n" + base64.b64encode(os.urandom(75_000)).decode() + "\n")
    fast = {"SIDECAR_EMBEDDER_MODEL": "all-MiniLM-L6-v2"}  # which chunks are embedded matters, not how
    d: DaemonProcess = daemon_factory(vault, env=fast).start(wait=None)
    h = d.wait_for(
        lambda h: h["index"]["phase"] == "idle" and h["index"]["pending_vectors"] == 0, timeout=120
    )
    assert h["index"]["files"] == 2
    assert h["index"]["chunks"] > 150 and h["vectors"]["embedded"] < h["index"]["chunks"] - 150


def test_share_vanishes_and_returns_while_queries_run(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """Five outages with edits made while the share is away; a client searches throughout. No
    request fails, no chunk is lost or doubled, and every change is picked up (50 in bench/chaos)."""
    d: DaemonProcess = daemon_factory(vault, env={**FAST_RETRY, "SIDECAR_WATCH_POLL_SECONDS": "1"}).start()
    errors: list[str] = []
    done = threading.Event()

    def query() -> None:
        with d.client() as c:
            while not done.is_set():
                try:
                    c.call("search", {"query": "spark plugs engine"})
                except Exception as exc:  # collected and asserted below
                    errors.append(repr(exc))
                time.sleep(0.02)

    t = threading.Thread(target=query)
    t.start()
    away = tmp_path / "away"
    try:
        for i in range(5):
            vault.rename(away)
            d.call("index")
            d.wait_for(lambda h: any(r["mode"] == "offline" for r in h["roots"] if r["name"] == "vault"), 30)
            write(away / f"Outage {i}.md", f"# Outage {i}\n\nWritten while the share was away, mark{i}.\n")
            away.rename(vault)
            d.wait_for(lambda h, n=i: h["index"]["files"] == 5 + n, timeout=60)
    finally:
        done.set()
        t.join()
    assert errors == []
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0, timeout=60)
    assert d.call("search", {"query": "mark3"})["hits"][0]["reference"] == "vault/Outage 3"
    assert d.stop() == 0
    ids, bm25_ids, vec_ids = store_ids(d.home)
    assert ids == bm25_ids == vec_ids


def _scribble(folder: Path) -> int:
    """Overwrite the middle of every file in ``folder`` in place (same inode, as a bad disk would)."""
    n = 0
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.stat().st_size > 64:
            with p.open("r+b") as fh:
                fh.seek(p.stat().st_size // 2)
                fh.write(os.urandom(min(4096, p.stat().st_size // 3)))
            n += 1
    return n


def test_stores_damaged_while_running(daemon_factory: Any, vault: Path) -> None:
    """Tantivy and LanceDB files scribbled over and the manifest deleted under a running daemon:
    every request still gets an answer (hits from whatever still works, or a clear error), the
    daemon stays up, and a restart rebuilds a consistent index from the notes."""
    d: DaemonProcess = daemon_factory(vault).start()
    index = d.cfg.index_dir
    assert _scribble(index / "bm25") > 0
    assert _scribble(index / "vectors") > 0
    (index / "manifest.sqlite").unlink()
    for q in ("spark plugs", "sourdough starter", "tomatoes sun"):
        answers = exchange(d.socket, json.dumps({"op": "search", "params": {"query": q}}).encode() + b"\n")
        assert len(answers) == 1 and (answers[0]["ok"] or answers[0]["error"]["message"])
    h = d.wait_for(lambda h: "stores" in _active(h), timeout=30)
    assert h["pid"] == d.proc.pid  # type: ignore[union-attr]
    assert "restart the daemon" in d.run_cli("status").stdout
    # The keyword index is rebuilt in place from the (still open) manifest within a tick.
    h = d.wait_for(lambda h: any("keyword index failed" in p["error"] for p in h["problems"]["recent"]), 30)
    assert "keyword_search" not in _active(h)
    hits = d.call("search", {"query": "spark plugs"})["hits"]  # (the scribbled vectors still rank)
    assert any(h["reference"] == "vault/Projects/Boat" and h["bm25Score"] is not None for h in hits)
    assert d.stop() == 0
    d.start()
    assert d.call("search", {"query": "spark plugs"})["hits"][0]["reference"] == "vault/Projects/Boat"
    h = d.health()
    assert h["index"]["files"] == 4 and h["index"]["pending_vectors"] == 0
    assert d.stop() == 0
    ids, bm25_ids, vec_ids = store_ids(d.home)
    assert ids == bm25_ids == vec_ids


def _truncate_vector_data(index: Path) -> None:
    files = list((index / "vectors").rglob("data/*.lance"))
    assert files
    for f in files:
        with f.open("r+b") as fh:
            fh.truncate(f.stat().st_size // 2)


def _vectors_back(d: DaemonProcess) -> None:
    """The table was replaced, every chunk embedded again, and searches use both arms."""
    h = d.wait_for(
        lambda h: (
            "vector_search" not in _active(h)
            and h["vectors"]["serving"] is not None  # the new table is attached, not only filled
            and h["index"]["pending_vectors"] == 0
            and any("re-embedding" in p["error"] for p in h["problems"]["recent"])
        ),
        timeout=90,
    )
    assert h["index"]["chunks"] > 0
    answer = d.call("search", {"query": "spark plugs"})
    assert "degraded" not in answer and answer["hits"][0]["reference"] == "vault/Projects/Boat"
    assert answer["hits"][0]["vecScore"] is not None
    assert d.stop() == 0
    ids, bm25_ids, vec_ids = store_ids(d.home)
    assert ids == bm25_ids == vec_ids


def test_unreadable_vector_table_is_replaced_while_running(daemon_factory: Any, vault: Path) -> None:
    """Truncated LanceDB data files (the table still opens; every vector read fails): searches
    answer from keywords, and after the first failure the daemon reads the table, moves it aside
    and embeds again, without a restart (a restart would not notice: the table opens)."""
    d: DaemonProcess = daemon_factory(vault).start()
    _truncate_vector_data(d.cfg.index_dir)
    answer = d.call("search", {"query": "spark plugs"})  # one failed search is enough to check
    assert "vector search failed" in answer["degraded"]
    assert answer["hits"][0]["reference"] == "vault/Projects/Boat"
    _vectors_back(d)
    assert "vectors_repaired" in d.log.read_text()


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_unreadable_vector_table_found_at_start(daemon_factory: Any, vault: Path, stop: int) -> None:
    """After a kill the start reconciles the table with the manifest; a table that cannot be read
    there is replaced at once instead of leaving the daemon on keywords alone. After a clean stop
    the start skips that reconcile unless the table's files changed meanwhile (a data file
    damaged while stopped went unnoticed until searches failed)."""
    d: DaemonProcess = daemon_factory(vault).start()
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    d.stop(stop)
    _truncate_vector_data(d.cfg.index_dir)
    d.start(wait=None)
    _vectors_back(d)


def test_page_index_damaged_while_running(daemon_factory: Any, vault: Path) -> None:
    """Only the keyword index's page part scribbled over: searches keep answering from the chunks,
    the failure is reported, and the repair rebuilds both parts from the manifest, after which
    hits carry their notes' scores again."""
    d: DaemonProcess = daemon_factory(vault).start()
    assert d.call("search", {"query": "spark plugs"})["hits"][0].get("pageBm25Score")
    assert _scribble(d.cfg.index_dir / "bm25" / "pages") > 0
    for q in ("spark plugs", "sourdough starter", "tomatoes sun"):
        answers = exchange(d.socket, json.dumps({"op": "search", "params": {"query": q}}).encode() + b"\n")
        assert len(answers) == 1 and answers[0]["ok"], answers  # the chunks still answer
    why = d.call("why", {"reference": "vault/Projects/Boat", "query": "spark plugs"})
    assert why["indexed"] and why["chunks"]
    h = d.wait_for(lambda h: any("keyword index failed" in p["error"] for p in h["problems"]["recent"]), 30)
    assert "keyword_search" not in _active(h)
    top = d.call("search", {"query": "spark plugs"})["hits"][0]
    assert top["reference"] == "vault/Projects/Boat" and top.get("pageBm25Score")
    assert d.stop() == 0
