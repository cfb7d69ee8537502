"""The file watch and a share that is slow, not hung: status tells the two apart, and a folder on
a share learnt slow does not hold the other folders' events while it is walked. The slow calls
are stand-ins held until the test lets them go; nothing here measures speed."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sidecar.vault.sources import Root
from sidecar.vault.supervisor import RootStatus, Supervisor
from sidecar.vault.watcher import Watcher
from tests.conftest import FakeEmbedder, Harness, write
from tests.share_hangs import hang_listing


def test_an_inbox_left_out_of_the_watch_for_a_slow_share_is_said_slow_not_hung(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ada's inbox is learnt slow and its listing does not answer within the probe timeout: the
    watch leaves her out, and the words status and health show say a slow share, not "a call
    there hangs (hung share?)" (said so, a user looked for an outage that was none); bob's
    inbox, which hangs, is still said hung."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2})
    sup = Supervisor(cfg)
    inboxes = {}
    for agent in ("ada", "bob"):
        inboxes[agent] = inbox = cfg.agents_dir / agent / "memory"
        inbox.mkdir(parents=True)
        sup.status(Root("memory", inbox, agent=agent))
    sup.status(Root("memory", inboxes["ada"], agent="ada")).slow = True
    real = os.scandir
    release = threading.Event()

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int) and Path(path) in inboxes.values():
            release.wait(30)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    said: list[str | None] = []
    watcher = Watcher(
        [cfg.agents_dir],
        lambda *_: None,
        threading.Event(),
        50,
        0.2,
        walk=sup.watched_walk,
        slow=sup.slow_folder,
    )
    watcher.on_left_out = said.append
    try:
        watcher._walked([cfg.agents_dir])
        assert set(watcher.left_out) == {cfg.agents_dir / "ada", cfg.agents_dir / "bob"}
        words = said[-1]
        assert words is not None
        assert f"file events do not cover {cfg.agents_dir / 'bob'}: a call there hangs (hung share?)" in words
        assert f"{cfg.agents_dir / 'ada'} yet: a slow share, not a hung one" in words
        assert f"{cfg.agents_dir / 'ada'}: a call there hangs" not in words
    finally:
        release.set()


@dataclass
class SlowVault:
    """A vault learnt slow whose listing of ``Projects`` waits for ``release``, an agent's inbox
    beside it, and a watch of both whose stat and walk the supervisor asks."""

    cfg: Any
    sup: Supervisor
    st: RootStatus
    release: threading.Event
    asked: list[str]  # the threads that listed ``Projects``, in order
    watcher: Watcher
    said: list[str | None]  # what the watch said it left out, in order


def slow_vault(
    make_cfg: Any,
    vault: Path,
    monkeypatch: pytest.MonkeyPatch,
    on_change: Callable[[set[str], frozenset[str]], None] = lambda *_: None,
    stop: threading.Event | None = None,
    **settings: Any,
) -> SlowVault:
    """The set-up of a vault learnt slow (``settings``: more of the configuration)."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2, **settings})
    write(vault / "Projects" / "a.md", "# A\n\nThe zeppelin.\n")
    (cfg.agents_dir / "ada" / "memory").mkdir(parents=True)
    sup = Supervisor(cfg)
    st = sup.status(Root("vault", vault, exclude=cfg.vault.wiki_subfolder))
    st.slow = True
    release = threading.Event()
    asked = hang_listing(monkeypatch, vault / "Projects", release)
    said: list[str | None] = []
    watcher = Watcher(
        [vault, cfg.agents_dir],
        on_change,
        stop or threading.Event(),
        50,
        0.2,
        walk=sup.watched_walk,
        slow=sup.slow_folder,
    )
    watcher.on_left_out = said.append
    return SlowVault(cfg, sup, st, release, asked, watcher, said)


def test_a_vault_learnt_slow_holds_no_other_folders_events_while_it_is_walked(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vault is learnt slow and its walk waits on a listing: the watch is set up for the
    agents folder without waiting for it (each set-up held every root's events until the
    vault's walk answered, up to watch.scanTimeoutSeconds), the vault is said slow, and once its
    walk answered the watch starts again and takes it in with that answer, not walking it again."""
    s = slow_vault(make_cfg, vault, monkeypatch)
    agents, watcher, said = s.cfg.agents_dir, s.watcher, s.said
    got: list[Any] = []
    setup = threading.Thread(target=lambda: got.append(watcher._walked([vault, agents])), daemon=True)
    try:
        setup.start()
        setup.join(20)
        assert not setup.is_alive(), "the watch's set-up waits for the slow vault's walk"
        _walked, answered, _linked = got[0]
        assert answered == [agents]
        assert said[-1] is not None and f"{vault} yet: a slow share, not a hung one" in said[-1]
        assert not watcher._walk_answered()  # still walking
    finally:
        s.release.set()
    behind = watcher._behind[vault].thread
    behind.join(20)
    assert watcher._walk_answered()  # the watch starts again, with the vault
    before = len(s.asked)
    walked, answered, _linked = watcher._walked([vault, agents])
    assert answered == [vault, agents]
    assert vault / "Projects" in walked and len(s.asked) == before  # its walk's answer, used
    assert said[-1] is None


def test_a_slow_vault_whose_walk_on_its_own_thread_hangs_is_said_hung_and_not_restarted_for(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vault is learnt slow and walked on a thread of its own; a listing there then never
    answers, past watch.scanTimeoutSeconds: the supervisor marks the vault hanging (no longer
    slow). The watch says it hangs from then on, as status does, not "a slow share, not a hung
    one"; and that failed walk answered nothing, so it starts no new watch and no sweep."""
    s = slow_vault(make_cfg, vault, monkeypatch, **{"watch.scanTimeoutSeconds": 1})
    agents, watcher, said = s.cfg.agents_dir, s.watcher, s.said
    try:
        watcher._walked([vault, agents])
        assert "yet: a slow share, not a hung one" in (said[-1] or "")
        watcher._behind[vault].thread.join(20)
        assert s.st.hanging is not None and not s.sup.slow_folder(vault)
        assert not watcher._walk_answered()  # no restart, no sweep: nothing answered
        assert f"cover {vault}: a call there hangs" in (said[-1] or ""), said[-1]
        assert "slow share" not in (said[-1] or "")
        watcher._walked([vault, agents])  # a set-up for another reason: still hung
        assert f"cover {vault}: a call there hangs" in (said[-1] or ""), said[-1]
        assert "slow share" not in (said[-1] or "")
    finally:
        s.release.set()


def _turning_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """A running watch turns (and looks at its walks) every 0.1 s, not every 5 s."""
    from sidecar.vault import watcher as watcher_module

    real_watch = watcher_module.watchfiles.watch
    monkeypatch.setattr(
        watcher_module.watchfiles, "watch", lambda *a, **k: real_watch(*a, **{**k, "rust_timeout": 100})
    )
    monkeypatch.setattr(watcher_module, "_IDENTITY_EVERY_S", 0.0)


class Told:
    """What a running watch told: the paths of its batches and its sweeps of every root."""

    def __init__(self) -> None:
        self.paths: set[str] = set()
        self.whole = 0
        self.changed = threading.Condition()

    def on_change(self, paths: set[str], _gone: frozenset[str]) -> None:
        with self.changed:
            self.paths |= paths
            self.whole += not paths
            self.changed.notify_all()

    def until(self, test: Callable[[], bool], what: str) -> None:
        """Waits for ``test`` (asked at each thing told, and every 0.05 s: a watcher's own state
        changes untold), 20 s at most."""
        deadline = time.monotonic() + 20
        with self.changed:
            while not test():
                assert time.monotonic() < deadline, what
                self.changed.wait(0.05)


def test_a_folder_made_after_a_slow_vaults_walk_on_its_own_thread_gets_file_events(
    make_cfg: Any, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vault is learnt slow and watched folder by folder (a folder symlink in it); once its
    walk on a thread of its own answered, the watch starts again with that walk's answer. A
    folder made after that walk, before the new watch ran, had no watch (no event told it, and
    the answer did not hold it): its notes waited for the next whole sweep, and nothing said so.
    The vault is walked again once the watch runs, and the watch takes in what that walk found."""
    _turning_often(monkeypatch)
    (tmp_path / "elsewhere").mkdir()
    (vault / "link").symlink_to(tmp_path / "elsewhere")
    told, stop = Told(), threading.Event()
    s = slow_vault(make_cfg, vault, monkeypatch, told.on_change, stop)
    agents, watcher = s.cfg.agents_dir, s.watcher
    made = vault / "Made meanwhile"
    walks: list[Path] = []
    walk = watcher._ask_walk

    def ask_walk(path: Path, fn: Any) -> Any:
        walks.append(path)
        if path == agents and walks.count(agents) == 2:
            made.mkdir()  # the new watch's set-up: after the vault's walk, before the watch runs
        return walk(path, fn)

    watcher._ask_walk = ask_walk
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    try:
        told.until(lambda: watcher._behind != {}, "the vault was not walked on a thread of its own")
        s.release.set()
        told.until(lambda: str(made) in told.paths, "the folder made meanwhile was never told")
        write(made / "later.md", "# Later\n\nThe zeppelin lands.\n")
        told.until(lambda: str(made / "later.md") in told.paths, "no file event in the folder made meanwhile")
        assert watcher.flat or watcher.linked
    finally:
        s.release.set()
        stop.set()
        thread.join(10)


@pytest.mark.parametrize("made", [False, True], ids=["the walk answered", "folders made after the walk"])
def test_a_note_written_into_an_inbox_while_the_watch_restarts_is_indexed_by_the_catch_up_sweep(
    make_cfg: Any, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, made: bool
) -> None:
    """The watch starts again once the slow vault's walk on a thread of its own answered (and,
    watched folder by folder, again for a folder made between that walk and the watch set up
    from its answer). Every watch is down meanwhile, the agents folder's too: the set-up adds
    the vault's tree before it (seconds on a big tree, minutes on a share). A note another
    program writes into an inbox then has no event; the sweep after the restart indexes it (it
    swept the vault's roots alone, or nothing, and the note waited for the next scheduled
    sweep, ten minutes, with nothing said). Wired as the daemon wires its watch and loop."""
    from sidecar.daemon.compose import build_watcher
    from sidecar.daemon.indexing import IndexLoop

    _turning_often(monkeypatch)
    if made:
        (tmp_path / "elsewhere").mkdir()
        (vault / "link").symlink_to(tmp_path / "elsewhere")  # the watch goes folder by folder
    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2}), FakeEmbedder())
    stop, thread = threading.Event(), None
    try:
        cfg, sup = h.cfg, h.supervisor
        inbox = cfg.agents_dir / "ada" / "memory"
        write(vault / "Projects" / "a.md", "# A\n\nThe zeppelin.\n")
        write(inbox / "plan.md", "# Plan\n\nada's plan.\n")
        h.indexer.sweep()
        sup.roots["vault"].slow = True
        release = threading.Event()
        hang_listing(monkeypatch, vault / "Projects", release)
        told = Told()
        loop = IndexLoop(cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)

        def on_change(paths: set[str], gone: frozenset[str]) -> None:
            loop.changed(paths, gone)
            told.on_change(paths, gone)

        watcher = build_watcher(cfg, on_change, stop, sup)
        restarts = 2 if made else 1
        during = inbox / "during.md"

        def caught_up() -> int:
            """The catch-up sweeps asked so far (the loop is not run: its jobs wait in its queue)."""
            with loop.jobs.mutex:
                return sum(job.restarted for job in loop.jobs.queue)

        before: list[int] = []  # the catch-up sweeps asked before the note was written
        walk, setups = watcher._ask_walk, [0]

        def ask_walk(path: Path, fn: Any) -> Any:
            if path == cfg.agents_dir:
                setups[0] += 1
                if made and setups[0] == 2:  # set up from the vault's walk: a folder it does not hold
                    (vault / "Made meanwhile").mkdir()
                if setups[0] == restarts + 1:  # the last restart's set-up: no watch is up
                    write(during, "# During\n\nWritten by another program meanwhile.\n")
                    before.append(caught_up())
            return walk(path, fn)

        watcher._ask_walk = ask_walk
        thread = threading.Thread(target=watcher.run, daemon=True)
        thread.start()
        told.until(lambda: watcher._behind != {}, "the vault was not walked on a thread of its own")
        release.set()
        told.until(
            lambda: before != [] and caught_up() > before[0], "no catch-up sweep after the last restart"
        )
        stop.set()
        thread.join(10)
        assert str(during) not in told.paths  # no event told it: the sweep must
        while not loop.jobs.empty():
            loop._run(loop.jobs.get_nowait())
        rows = h.stores.manifest.read("SELECT rel FROM files WHERE agent = 'ada'")
        assert sorted(r[0] for r in rows) == ["during.md", "plan.md"]
    finally:
        release.set()
        stop.set()
        if thread is not None:
            thread.join(10)
        h.close()


def test_a_folder_whose_walk_answered_late_once_and_hangs_now_is_said_hung(
    vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A watched folder's walk answers late once, then hangs for good: one late answer is no
    proof that its calls answer now, so it is said to hang, not "a slow share"."""
    folder = vault / "Projects"
    write(folder / "a.md", "# A\n")
    gates = [threading.Event(), threading.Event()]
    listed = [0]
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int) and Path(path) == folder:
            gate = gates[min(listed[0], 1)]
            listed[0] += 1
            gate.wait(60)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    said: list[str | None] = []
    watcher = Watcher([vault], lambda *_: None, threading.Event(), 50, 0.2)
    watcher.on_left_out = said.append
    try:
        with pytest.raises(OSError, match="no watched folder answered its walk"):
            watcher._walked([vault])
        gates[0].set()  # the first walk answers, late
        for stuck in list(watcher._walk_stuck.values()):
            stuck.join(10)
        assert watcher._walk_answered()
        with pytest.raises(OSError, match="no watched folder answered its walk"):
            watcher._walked([vault])  # hangs now, for good
        assert "a call there hangs" in (said[-1] or ""), said[-1]
        assert "slow share" not in (said[-1] or "")
    finally:
        gates[1].set()
