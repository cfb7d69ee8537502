"""Deletions judged over their burst of file events, with a real daemon and its real watcher: a
root emptied over several batches is held whole (it left the index batch by batch, each batch
under the mass-deletion share), a branch switch that deletes first and writes after is applied
(no mass loss: as many notes came in), a note or two deleted leave at once, and a kill -9 while
deletions wait loses nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from sidecar.daemon.indexing import IndexLoop
from sidecar.index.bursts import MAX_WAIT_S, Bursts
from tests.conftest import DaemonProcess, FakeEmbedder, Harness, write

# Deletion batches come 0.4 s apart below: a quiet time well above that, so a busy machine does not
# cut the burst in two (the default, 2 s, is for people and git).
QUIET = {"SIDECAR_INDEX_MASS_DELETION_QUIET_SECONDS": "5"}


def _root(h: dict[str, Any], name: str = "vault") -> dict[str, Any]:
    return next(r for r in h["roots"] if r["name"] == name)


def _marker(i: int) -> str:
    """A word of letters only, unique to note ``i``."""
    return f"zq{chr(97 + i // 26)}{chr(97 + i % 26)}xq"


def _notes(folder: Path, n: int) -> list[Path]:
    return [
        write(
            folder / f"n{i:03d}.md", f"# Note {i}\n\nThe keeper of lighthouse {_marker(i)} logs storm {i}.\n"
        )
        for i in range(n)
    ]


def _delete_in_batches(notes: list[Path], size: int) -> None:
    """Delete ``notes`` ``size`` at a time, 0.4 s apart (each its own batch of file events, the
    root's stream busy throughout: an ``rm -r`` on a slow disk, a sync client)."""
    for i in range(0, len(notes), size):
        for p in notes[i : i + size]:
            p.unlink()
        time.sleep(0.4)  # the pace of the deletion, not a wait for the daemon


def test_a_root_emptied_over_several_batches_is_held_whole(daemon_factory: Any, vault: Path) -> None:
    """30 of the vault's 33 notes deleted 6 at a time: each batch was judged by itself (6 of 33,
    6 of 27, 6 of 21, 6 of 15: under the share) and applied, and only the last 6 were held; the
    whole deletion is held now, nothing applied."""
    notes = _notes(vault / "Import", 30)
    d: DaemonProcess = daemon_factory(vault, env=QUIET, keyword_only=True).start()
    d.wait_for(lambda h: h["index"]["files"] == 34, timeout=60)
    _delete_in_batches(notes, 6)
    h = d.wait_for(lambda h: _root(h)["hold"] is not None, timeout=60)
    assert _root(h)["hold"]["kind"] == "mass", _root(h)
    assert _root(h)["held_deletions"] == 30 and _root(h)["mode"] == "held"
    assert h["index"]["files"] == 34  # nothing applied
    assert "lost 30 of 33" in (_root(h)["error"] or "")
    log = d.log.read_text()
    assert "deletions_waiting root=vault" in log and "deletions_judged root=vault missing=30 hold=mass" in log


def test_a_checkout_that_deletes_first_and_writes_after_is_applied(daemon_factory: Any, vault: Path) -> None:
    """A branch switch as git does it: 120 notes removed, then (a second later) written under new
    paths. The first batch saw 120 of 123 notes gone and held them as a mass loss (both paths found
    until a retry found the new ones); judged once the root went quiet, with the notes that came in,
    it is applied: the notes under their new paths only, no hold."""
    old = _notes(vault / "Old", 120)
    d: DaemonProcess = daemon_factory(vault, env=QUIET, keyword_only=True).start()
    d.wait_for(lambda h: h["index"]["files"] == 124, timeout=60)
    texts = [(p.name, p.read_text(encoding="utf-8")) for p in old]
    for p in old:
        p.unlink()
    (vault / "Old").rmdir()
    time.sleep(1.0)  # git writes the new files after it removed the old ones
    for name, text in texts:
        write(vault / "New" / name, text)
    holds: list[Any] = []

    def converged(h: dict[str, Any]) -> bool:
        holds.append(_root(h)["hold"])
        if h["index"]["files"] != 124 or _root(h).get("waiting_deletions", 0):
            return False
        hits = d.call("search", {"query": _marker(7)})["hits"]
        return [x["reference"] for x in hits] == ["vault/New/n007"]

    h = d.wait_for(converged, timeout=120)
    assert not any(holds) and _root(h)["mode"] == "events" and _root(h)["held_deletions"] == 0
    assert "watcher_retry root=vault" not in d.log.read_text()
    assert [x["reference"] for x in d.call("search", {"query": _marker(99)})["hits"]] == ["vault/New/n099"]


def test_a_note_deleted_leaves_at_once(daemon_factory: Any, vault: Path) -> None:
    """A person deleting a note (or a few): applied with the batch that saw it, no wait for the
    root to go quiet (the default quiet time)."""
    d: DaemonProcess = daemon_factory(vault, keyword_only=True).start()
    (vault / "Garden.md").unlink()
    d.wait_for(
        lambda h: h["index"]["files"] == 3 and not d.call("search", {"query": "tomatoes sun"})["hits"],
        timeout=30,
    )
    assert "deletions_waiting" not in d.log.read_text()


def test_deletions_waiting_at_a_kill_9_are_judged_whole_at_the_restart(
    daemon_factory: Any, vault: Path
) -> None:
    """A kill -9 while a deletion waits for its root to go quiet: nothing was applied, and the
    start's sweep finds the notes missing and holds the whole deletion."""
    notes = _notes(vault / "Import", 30)
    env = {"SIDECAR_INDEX_MASS_DELETION_QUIET_SECONDS": "60"}
    d: DaemonProcess = daemon_factory(vault, env=env, keyword_only=True).start()
    d.wait_for(lambda h: h["index"]["files"] == 34, timeout=60)
    _delete_in_batches(notes, 6)
    h = d.wait_for(lambda h: _root(h).get("waiting_deletions", 0) == 30, timeout=30)
    assert h["index"]["files"] == 34 and h["index"]["catching_up"] is not None
    assert "30 deletions wait for the changes under way to end" in d.run_cli("status").stdout
    d.kill()
    d.start()
    h = d.wait_for(lambda h: _root(h)["hold"] is not None, timeout=60)
    assert _root(h)["hold"]["kind"] == "mass" and _root(h)["held_deletions"] == 30
    assert h["index"]["files"] == 34


def test_quiet_and_the_longest_wait_on_a_clock() -> None:
    """The rule itself, on a clock moved by hand: a deletion or a new note keeps a root busy for
    the quiet time (each root its own); waiting deletions are counted by note (one named by two
    batches once, one that came back no more, a full sweep's replace them), due once the root is
    quiet, or after MAX_WAIT_S for a root whose events never stop, and are judged then whatever
    comes (they were put back to wait by their own judgment)."""
    now = [100.0]
    bursts = Bursts(2.0, clock=lambda: now[0])
    bursts.heard("wiki")
    assert bursts.busy("wiki") and not bursts.busy("vault")
    bursts.heard("vault")
    keys = [f"vault/n{i}.md" for i in range(30)]
    bursts.wait("vault", keys[:20])
    bursts.wait("vault", keys[10:])  # named again by the next batch: counted once
    assert bursts.waiting() == 30 and bursts.due() == [] and bursts.next_in(5.0) == 2.0
    bursts.wait("vault", (), back=keys[:2])  # written again (a checkout): waits no more
    assert bursts.waiting("vault") == 28
    now[0] += 1.5
    bursts.heard("vault")  # still coming
    now[0] += 1.9
    assert bursts.due() == [] and bursts.busy("vault")
    bursts.wait("vault", keys[:29], whole=True)  # a full sweep's view: all that wait now
    assert bursts.waiting("vault") == 29
    now[0] += 0.1
    assert bursts.due() == ["vault"] and bursts.waiting("vault") == 29  # quiet: judged now
    assert bursts.judging() == {"vault"}
    bursts.judged("vault")
    assert bursts.waiting() == 0 and bursts.judging() == frozenset()
    bursts.wait("vault", keys[:5])  # a root whose events never stop
    for _ in range(int(MAX_WAIT_S)):
        bursts.heard("vault")
        assert bursts.busy("vault") and bursts.due() == []
        now[0] += 1.0
    assert bursts.due() == ["vault"]
    bursts.heard("vault")
    assert not bursts.busy("vault")  # its judgment judges it, busy or not
    bursts.judged("vault")
    assert bursts.busy("vault") and bursts.waiting() == 0


def test_a_full_sweep_during_the_deletion_leaves_it_waiting(make_cfg: Any, vault: Path) -> None:
    """The schedule's sweep (or a network poll) in the middle of an ``rm -r``: it judged the part
    it saw (12 of 33 notes gone: under the share, applied); now the deletion waits, and once the
    root is quiet it is judged whole (30 of 33: held)."""
    notes = _notes(vault / "Import", 30)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        now = [1000.0]
        h.indexer.changes.bursts.clock = lambda: now[0]
        loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _act: None)
        first, rest = notes[:12], notes[12:]
        for p in first:
            p.unlink()
        # The root is busy: a new note came (events of deletions and new notes make a burst).
        loop.changed({str(write(vault / "Fresh.md", "# New\n\nA note just come.\n"))})
        h.indexer.sweep(only=(), paths=loop.take_paths())
        h.indexer.sweep()  # the schedule's sweep, now
        st = h.supervisor.roots["vault"]
        assert len(h.stores.manifest.file_states("vault/Import/")) == 30, "applied in part"
        assert st.hold_kind is None and st.waiting_deletions == 12
        assert loop.catching_up() == (0, 12)
        for p in rest:
            p.unlink()
        now[0] += 1.0
        loop.changed({str(p) for p in rest}, frozenset(str(p) for p in rest))
        now[0] += 2.0  # no event for the quiet time
        job = loop._next()
        assert job is not None and job.roots is not None and "vault" in job.roots
        loop._run(job)
        assert st.hold_kind == "mass" and st.held_deletions == 30 and st.waiting_deletions == 0
        assert len(h.stores.manifest.file_states("vault/Import/")) == 30
    finally:
        h.close()
