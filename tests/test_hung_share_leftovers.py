"""Hung and slow shares, the calls left in them: a look started beside a scan under way, a
request's look cut at its cap, and read-only mode's list and room check. The hanging calls are
stand-ins (a call held until the test lets it go, a clock set ahead); nothing here measures speed."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.clients.cli_render import _each_root
from sidecar.contracts.errors import StorageError
from sidecar.contracts.protocol import Request
from sidecar.vault.sources import Asking, Root, asked
from sidecar.vault.supervisor import LookCut, RootUnreachable, Supervisor
from tests.conftest import write
from tests.share_hangs import hang_listing, held_scans, inbox_of, read_only, scan_waiting, slow_inbox


def test_a_look_cut_at_its_cap_leaves_the_only_thread_in_the_share_until_it_answers(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inbox learnt slow whose look is cut at its cap: the next writes' looks are refused at
    once while its call is still in (each started one more thread into the share), status says
    what it waits on, and once that call answered the inbox is looked at again."""
    clock, sup, root = slow_inbox(make_cfg, vault, monkeypatch, 0.3)
    st = sup.status(root)
    release = threading.Event()
    started: list[threading.Thread] = []

    def look(asking: Asking) -> int:
        started.append(threading.current_thread())
        with asked(asking, "stat", "."):
            clock.ahead += 31.0  # past the cap (30 s of the 120 s request timeout)
            release.wait(20)
        return 1

    try:
        with pytest.raises(LookCut, match=r"did not end within 30 s"):
            sup.looked(root, look)
        for _ in range(3):
            with pytest.raises(LookCut, match=r"an earlier request's look at it \(stat \.\) has waited"):
                sup.looked(root, look)
        assert len(started) == 1, started
        (described,) = [r for r in sup.describe(lambda _p: True) if r["name"] == "memory/ada"]
        assert described["look_waiting"]["by"] == "look" and described["look_waiting"]["call"] == "stat"
        assert described["error"] is None and st.hanging is None  # slow, not hung: nothing marked
        said = "\n".join(_each_root([described], []))
        assert "slow: a request's look cut at its cap waits" in said and " on stat ." in said, said
    finally:
        release.set()
    started[0].join(10)
    clock.ahead = 0.0

    def quick(asking: Asking) -> int:
        with asked(asking, "stat", "."):
            return 2

    assert sup.looked(root, quick) == 2
    assert [r["look_waiting"] for r in sup.describe(lambda _p: True)] == [None]


def test_a_never_swept_inbox_whose_look_is_cut_at_its_cap_is_not_added_to_status(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An inbox never swept and not slow (each call answers within its bound) whose look is cut
    at its cap as a whole: nothing is kept of it, so status does not list it as an inbox "not
    listed yet" (the cut look kept its status)."""
    from sidecar.vault import sources

    clock, sup, root = slow_inbox(make_cfg, vault, monkeypatch, 5, "newbie", slow=False)
    monkeypatch.setattr(sources, "time", clock)  # each call's own wait stays under its bound
    release = threading.Event()
    started: list[threading.Thread] = []

    def look(asking: Asking) -> int:
        started.append(threading.current_thread())
        with asked(asking, "stat", "a.md"):
            pass
        clock.ahead += 31.0  # many quick calls took the look past its cap (30 s)
        with asked(asking, "stat", "b.md"):
            release.wait(20)
        return 1

    try:
        with pytest.raises(LookCut, match=r"did not end within 30 s"):
            sup.looked(root, look)
        assert [r["name"] for r in sup.describe(lambda _p: True)] == []
    finally:
        release.set()
    started[0].join(10)


def test_a_look_beside_a_slow_scans_call_past_the_cap_starts_no_thread(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep of an inbox learnt slow waits on one listing (its whole scan may take
    scanTimeoutSeconds, so it is not given up on): a write's look beside it, past the cap
    already, is refused at once rather than started into the share (status said the inbox
    healthy and each write's look stalled on it again)."""
    clock, sup, root = slow_inbox(make_cfg, vault, monkeypatch, 0.3)
    looked: list[str] = []

    with scan_waiting(sup, root, clock, 45.0) as release:

        def look(asking: Asking) -> int:
            looked.append("asked")
            with asked(asking, "stat", "."):
                release.wait(20)
            return 1

        with pytest.raises(LookCut, match=r"its scan under way has waited 45 s on listing \."):
            sup.looked(root, look)
        assert looked == []
        (described,) = [r for r in sup.describe(lambda _p: True) if r["name"] == "memory/ada"]
        assert described["look_waiting"]["by"] == "scan"


def test_status_says_a_look_is_refused_beside_a_slow_scan_only_once_it_is(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep of an inbox learnt slow waits 15 s on one listing, past probeTimeoutSeconds but
    under the look's cap (30 s): a write's look is still started, and status does not say looks
    are refused as slow (it said so from probeTimeoutSeconds on)."""
    clock, sup, root = slow_inbox(make_cfg, vault, monkeypatch, 10)
    with scan_waiting(sup, root, clock, 15.0):
        (described,) = [r for r in sup.describe(lambda _p: True) if r["name"] == "memory/ada"]
        assert described["look_waiting"] is None
        assert "refused as slow" not in "\n".join(_each_root([described], []))
        assert sup.looked(root, lambda _asking: 4) == 4


def test_a_hang_two_scans_met_is_said_until_the_first_ones_call_answers(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two looks of one root under way (a sweep, a request's look beside it), each given up on
    at its own call: the root hangs until the call recorded first answers. The second no longer
    replaces it: once its own call answered the root was said healthy while the first still
    hung, and the next look stalled on it again."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.5})
    sup = Supervisor(cfg)
    _, root = inbox_of(cfg)
    first, second = threading.Event(), threading.Event()
    try:
        errors = held_scans(sup, root, first, second)
        assert len(errors) == 2, errors
        assert sup.status(root).hanging is not None
        stuck = [t for t in threading.enumerate() if t.name == "probe-memory/ada"]
        second.set()  # the second's call answers; the first's still hangs
        for t in stuck:
            t.join(1)  # the second's thread ends; the first's stays in its call
        assert sum(t.is_alive() for t in stuck) == 1
        st = sup.status(root)
        assert st.hanging is not None and "a.md" in (st.hung_on or ""), st.hung_on
        with pytest.raises(RootUnreachable, match=r"still hangs"):
            sup.bounded(root, lambda _asking: 1)
    finally:
        first.set()
        second.set()


def test_a_hang_two_scans_met_is_said_until_the_second_ones_call_answers_too(
    make_cfg: Any, vault: Path
) -> None:
    """The mirror order: two looks of one root each given up on at its own call, and the FIRST
    call answers while the second's still hangs: the root hangs on the second's call (it was
    said healthy, the second's thread tracked nowhere, and the next scan started a thread beside
    it); each look's refusal names its own call."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.5})
    sup = Supervisor(cfg)
    _, root = inbox_of(cfg)
    first, second = threading.Event(), threading.Event()
    started: list[str] = []
    try:
        errors = held_scans(sup, root, first, second)
        assert sorted(errors) == ["a.md", "b.md"], errors
        assert errors["b.md"].startswith("looking up b.md"), errors
        stuck = [t for t in threading.enumerate() if t.name == "probe-memory/ada"]
        first.set()  # the first's call answers; the second's still hangs
        for t in stuck:
            t.join(1)
        assert sum(t.is_alive() for t in stuck) == 1
        st = sup.status(root)
        assert st.hanging is not None and "b.md" in (st.hung_on or ""), st.hung_on

        def third(asking: Asking) -> int:
            started.append("third")
            return 1

        with pytest.raises(RootUnreachable, match=r"still hangs"):
            sup.bounded(root, third)
        assert started == []
    finally:
        first.set()
        second.set()
    for t in stuck:
        t.join(10)
    assert sup.status(root).hanging is None  # both answered: asked again
    assert sup.bounded(root, lambda _asking: 3) == 3


def test_read_only_modes_list_of_a_hung_inbox_is_refused_in_words_not_waited_for(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index cannot be read and the memory list is answered from the inbox: a listing that
    hangs is refused after probeTimeoutSeconds, naming it, and the next list is told at once
    (one thread in the share); the list waited as long as the share hung."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.3})
    inbox, _root = inbox_of(cfg, "ops")
    write(inbox / "canoe.md", "# Canoe\n\nThe zeppelin canoe.\n")
    _rule, refusing = read_only(cfg)
    release = threading.Event()
    listed: list[str] = []
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int) and Path(path) == inbox:
            listed.append("listing")
            release.wait(20)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    try:
        hung = r"listing \. in .*ops/memory did not answer within 0.3 s \(hung share\?\)"
        with pytest.raises(StorageError, match=hung):
            refusing.dispatch(Request("list", {}, agent="ops"))
        with pytest.raises(StorageError, match=r"an earlier call on .*ops/memory \(listing \.\) still hangs"):
            refusing.dispatch(Request("list", {}, agent="ops"))
        assert listed == ["listing"]
    finally:
        release.set()
    for t in threading.enumerate():
        if t.name == "probe-memory/ops":
            t.join(10)  # the stuck listing ends once let go: the inbox is asked again
    listed_now = refusing.dispatch(Request("list", {}, agent="ops"))["notes"]
    assert [n["reference"] for n in listed_now] == ["memory/canoe"]


def test_read_only_modes_room_check_of_a_hung_inbox_refuses_that_agents_write_only(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The room check before a write is saved in the inbox (read-only mode) on a share whose
    look-up hangs: ada's write is refused after probeTimeoutSeconds naming the call, nothing
    written; bob's write, whose inbox answers, is saved (the stuck call was kept under the whole
    agents folder, refusing every agent's memory change while ada's share hung); ada's list is
    told at once (one thread in her share); status names the hung inbox, not a full disk."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.3})
    ada, _root = inbox_of(cfg, "ada")
    bob, _ = inbox_of(cfg, "bob")
    rule, refusing = read_only(cfg)
    release = threading.Event()
    real = os.access

    def access(path: Any, mode: int, **kwargs: Any) -> bool:
        if Path(path) == ada:
            release.wait(20)
        return real(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)
    try:
        hung = r"memory change refused: looking up \. in .*ada/memory did not answer within 0.3 s .*nothing"
        with pytest.raises(StorageError, match=hung):
            refusing.dispatch(Request("write", {"slug": "canoe", "content": "# Canoe\n\nx\n"}, agent="ada"))
        saved = refusing.dispatch(
            Request("write", {"slug": "kayak", "content": "# Kayak\n\ny\n"}, agent="bob")
        )
        assert saved["reference"] == "memory/kayak" and (bob / "kayak.md").exists()
        with pytest.raises(
            StorageError, match=r"an earlier call on .*agents/ada/memory \(looking up \.\) still hangs"
        ):
            refusing.dispatch(Request("list", {}, agent="ada"))
        said = rule.message()
        assert "until there is space (memory writes are saved in the inboxes" in said
        assert re.search(
            r"memory changes of agent ada are refused while looking up \. in .*agents/ada/memory has not",
            said,
        )
        # One root name, one folder: the inbox, as the list's look says it (not the agents folder).
        assert [(n, f) for n, f, _ in rule.looks.hung_looks()] == [("memory/ada", str(ada))]
        assert "memory writes and rebuilds wait until there is space" not in said
    finally:
        release.set()
    assert not (ada / "canoe.md").exists()


def test_read_only_modes_status_of_a_hung_agents_folder_names_the_share_not_the_disk(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agents folder itself hangs in read-only mode: status says memory changes are refused
    while it does not answer (it said they waited for space on the index's disk)."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.3})
    inbox_of(cfg, "ada")
    rule, _refusing = read_only(cfg)
    release = threading.Event()
    real = os.access

    def access(path: Any, mode: int, **kwargs: Any) -> bool:
        if Path(path) == cfg.agents_dir:
            release.wait(20)
        return real(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)
    try:
        said = rule.message()
        assert re.search(
            r"memory changes are refused while looking up \. in .*agents did not answer", said
        ), said
        assert "memory writes" not in said
    finally:
        release.set()


def _ada_hung(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, release: threading.Event
) -> tuple[Any, Supervisor, tuple[Path, Path], list[str]]:
    """Two agents' inboxes known to a supervisor (``watch.probeTimeoutSeconds`` 0.2), ada's
    listing hanging until ``release``: the configuration, the supervisor, (ada's inbox, bob's)
    and the threads that asked ada's listing."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2})
    ada, _ = inbox_of(cfg, "ada")
    bob, _ = inbox_of(cfg, "bob")
    sup = Supervisor(cfg)
    for agent, inbox in (("ada", ada), ("bob", bob)):
        sup.status(Root("memory", inbox, agent=agent))
    return cfg, sup, (ada, bob), hang_listing(monkeypatch, ada, release)


def test_one_agents_hung_inbox_leaves_the_other_agents_watched(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch's walk of the agents folder hangs in ada's inbox: bob's note written meanwhile
    comes as a file event (the agents folder was left out of the watch whole until ada's listing
    answered, so only the sweeps found it); ada's folder is asked once, and watched again once
    its listing answers."""
    from sidecar.vault.watcher import Watcher

    release = threading.Event()
    cfg, sup, (_, bob), asked_ = _ada_hung(make_cfg, vault, monkeypatch, release)
    seen: set[str] = set()
    came = threading.Event()

    def on_change(paths: set[str], _gone: frozenset[str]) -> None:
        seen.update(paths)
        if str(bob / "plan.md") in paths:
            came.set()

    stop = threading.Event()
    watcher = Watcher([cfg.agents_dir], on_change, stop, 100, 0.2, walk=sup.watched_walk)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while sup.roots["memory/ada"].hanging is None:
            assert time.monotonic() < deadline, "the walk did not hang in ada's inbox"
            time.sleep(0.05)
        time.sleep(0.5)  # the notify watch is set up after the walk
        write(bob / "plan.md", "# Plan\n\nRotate the zeppelin disks.\n")
        assert came.wait(20), seen
        assert list(watcher.left_out) == [cfg.agents_dir / "ada"] and len(asked_) == 1, asked_
        release.set()  # ada's listing answers: the watch starts again, ada's folder in it
        while cfg.agents_dir / "ada" in watcher.left_out:
            assert time.monotonic() < deadline + 30, "ada's folder was not watched again"
            time.sleep(0.1)
    finally:
        release.set()
        stop.set()
        thread.join(10)


def test_an_agents_folder_too_large_to_watch_folder_by_folder_waits_whole_for_its_hung_inbox(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Around a hung inbox the agents folder is watched folder by folder; with more folders
    than such a watch takes, a recursive watch would ask the hung inbox (and hang the watcher
    in it): the agents folder is left out whole, as before, until that inbox answers."""
    from sidecar.vault import watcher as watcher_module
    from sidecar.vault.watcher import Watcher

    release = threading.Event()
    cfg, sup, _, asked_ = _ada_hung(make_cfg, vault, monkeypatch, release)
    watcher = Watcher([cfg.agents_dir], lambda *_: None, threading.Event(), 50, 0.2, walk=sup.watched_walk)
    try:
        _walked, answered, _flat = watcher._walked([cfg.agents_dir])  # around ada: folder by folder
        assert answered == [cfg.agents_dir] and list(watcher.left_out) == [cfg.agents_dir / "ada"]
        # The agents folder, bob's folder and his inbox: as many as a folder-by-folder watch takes.
        monkeypatch.setattr(watcher_module, "MAX_FLAT_FOLDERS", 3)
        for _ in range(2):
            with pytest.raises(OSError, match="no watched folder answered"):
                watcher._walked([cfg.agents_dir])
        assert watcher.left_out == {} and len(asked_) == 1, asked_
        assert cfg.agents_dir / "ada" in watcher._walk_stuck  # watched again once it answers
        # The vault walked after it takes the count past what a folder-by-folder watch takes:
        # the vault is watched (recursively), the agents folder waits whole.
        monkeypatch.setattr(watcher_module, "MAX_FLAT_FOLDERS", 4)
        _walked, answered, _flat = watcher._walked([cfg.agents_dir, vault])
        assert answered == [vault] and watcher.left_out == {}, answered
    finally:
        release.set()
