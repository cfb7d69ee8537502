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
        assert loop.catching_up() == (0, 12, 0)
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


def _loop_on(h: Harness, now: list[float]) -> IndexLoop:
    """An index loop over ``h`` whose bursts run on the clock ``now`` (moved by hand)."""
    h.indexer.changes.bursts.clock = lambda: now[0]
    return IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _act: None)


def _events(h: Harness, loop: IndexLoop, paths: set[Path], gone: set[Path] = set()) -> None:  # noqa: B006
    """File events of ``paths`` handled as the index loop does: a sweep of those paths only."""
    loop.changed({str(p) for p in paths}, frozenset(str(p) for p in gone))
    h.indexer.sweep(only=(), paths=loop.take_paths())


def _save(h: Harness, loop: IndexLoop, note: Path, i: int) -> None:
    """An editor saves ``note`` (a note the index knows) again."""
    _events(h, loop, {write(note, f"# Draft\n\nStill typing, take {i}.\n")})


def test_a_folder_renamed_while_a_note_is_edited_moves_at_once(make_cfg: Any, vault: Path) -> None:
    """A folder of 8 notes renamed while a note elsewhere is being saved (an editor's autosave),
    and 6 other notes deleted in the same batch: the moves are applied by that very sweep (the
    old paths were found beside the new ones for up to a minute); only the 6 deletions no move
    explains wait for the root to go quiet, and are judged then."""
    _notes(vault / "Trip", 8)
    gone = _notes(vault / "Import", 30)[:6]
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        now = [1000.0]
        loop = _loop_on(h, now)
        _save(h, loop, vault / "Garden.md", 0)
        (vault / "Trip").rename(vault / "Reise")
        for p in gone:
            p.unlink()
        _events(h, loop, {vault / "Trip", vault / "Reise", *gone}, {vault / "Trip", *gone})
        manifest, st = h.stores.manifest, h.supervisor.roots["vault"]
        assert manifest.file_states("vault/Trip/") == {}, "the old paths left with the move"
        assert len(manifest.file_states("vault/Reise/")) == 8
        assert st.waiting_deletions == 6 and len(manifest.file_states("vault/Import/")) == 30
        now[0] += 1.0
        _save(h, loop, vault / "Garden.md", 1)  # the editor goes on: the root is quiet all the same
        now[0] += 1.0
        job = loop._next()
        assert job is not None and job.roots is not None and "vault" in job.roots
        loop._run(job)
        assert st.hold_kind is None and st.waiting_deletions == 0
        assert len(manifest.file_states("vault/Import/")) == 24
    finally:
        h.close()


def test_a_deletion_in_a_root_edited_without_pause_is_judged_once_its_burst_is_quiet(
    make_cfg: Any, vault: Path
) -> None:
    """A note saved every 0.7 s never lets its root go quiet; a folder of 6 notes deleted meanwhile
    is judged once no deletion or new note came for the quiet time (it waited the full minute)."""
    notes = _notes(vault / "Trip", 6)
    _notes(vault / "Import", 30)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        now = [1000.0]
        loop = _loop_on(h, now)
        for p in notes:
            p.unlink()
        _events(h, loop, {vault / "Trip"}, {vault / "Trip"})
        st = h.supervisor.roots["vault"]
        assert st.waiting_deletions == 6
        for i in range(3):  # saves at 0.7, 1.4, 2.1 s
            now[0] += 0.7
            _save(h, loop, vault / "Garden.md", i)
        job = loop._next()
        assert job is not None and job.roots is not None and "vault" in job.roots
        loop._run(job)
        assert st.waiting_deletions == 0 and st.hold_kind is None
        assert h.stores.manifest.file_states("vault/Trip/") == {}
    finally:
        h.close()


def test_a_held_root_swept_while_busy_stays_held_and_waits_its_retry(make_cfg: Any, vault: Path) -> None:
    """A root held as a mass deletion, retried while notes are coming in: the retry holds it again
    at once and moves its next retry on (it was left due, and swept whole every second while the
    root stayed busy); the held notes are held, never also "waiting"; an event naming them again
    (their folder looked at) neither waits for them nor asks for a sweep."""
    notes = _notes(vault / "Import", 30)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        for p in notes[:20]:
            p.unlink()
        h.sweep()
        st = h.supervisor.roots["vault"]
        assert st.hold_kind == "mass" and st.held_deletions == 20
        now = [1000.0]
        loop = _loop_on(h, now)
        _events(h, loop, {write(vault / "Fresh.md", "# Fresh\n\nA note just come.\n")})  # busy
        st.next_retry = time.time() - 1  # the retry is due
        assert "vault" in h.supervisor.due()
        h.indexer.sweep(only={"vault"})  # the retry, while the root is busy
        assert st.hold_kind == "mass" and st.held_deletions == 20 and st.waiting_deletions == 0
        assert "vault" not in h.supervisor.due(), "the next retry waits its backoff"
        assert loop.catching_up() is None
        write(vault / "Import" / "more.md", "# More\n\nAnother note in the held folder.\n")
        _events(h, loop, {vault / "Import"})  # the folder walked: its held notes named again
        assert st.waiting_deletions == 0 and st.hold_kind == "mass" and loop.jobs.empty()
    finally:
        h.close()


def test_a_failed_judgment_is_retried_with_its_root(make_cfg: Any, vault: Path) -> None:
    """A judgment sweep that fails (a disk full while it writes) is retried with the root it was
    to judge: re-queued as its paths only, the root said "waiting" until the next scheduled sweep."""
    notes = _notes(vault / "Import", 30)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        now = [1000.0]
        loop = _loop_on(h, now)
        for p in notes[:6]:
            p.unlink()
        _events(h, loop, set(notes[:6]), set(notes[:6]))
        assert h.supervisor.roots["vault"].waiting_deletions == 6
        now[0] += 10.0
        job = loop._next()
        assert job is not None and job.roots is not None and "vault" in job.roots
        h.indexer.leftover = frozenset({str(vault / "Garden.md")})  # what the failed sweep left
        loop._failed(job, OSError("No space left on device"), 0.0)
        again = loop.jobs.get_nowait()
        assert again.roots is not None and "vault" in again.roots
        loop._run(again)
        assert h.supervisor.roots["vault"].waiting_deletions == 0
        assert len(h.stores.manifest.file_states("vault/Import/")) == 24
    finally:
        h.close()
