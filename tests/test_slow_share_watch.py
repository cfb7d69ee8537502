"""The file watch and a share that is slow, not hung: status tells the two apart, and a folder on
a share learnt slow does not hold the other folders' events while it is walked. The slow calls
are stand-ins held until the test lets them go; nothing here measures speed."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from sidecar.vault.sources import Root
from sidecar.vault.supervisor import Supervisor
from sidecar.vault.watcher import Watcher
from tests.conftest import write
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


def test_a_vault_learnt_slow_holds_no_other_folders_events_while_it_is_walked(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vault is learnt slow and its walk waits on a listing: the watch is set up for the
    agents folder without waiting for it (each set-up held every root's events until the
    vault's walk answered, up to watch.scanTimeoutSeconds), the vault is said slow, and once its
    walk answered the watch starts again and takes it in with that answer, not walking it again."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2})
    write(vault / "Projects" / "a.md", "# A\n\nThe zeppelin.\n")
    (cfg.agents_dir / "ada" / "memory").mkdir(parents=True)
    sup = Supervisor(cfg)
    sup.status(Root("vault", vault, exclude=cfg.vault.wiki_subfolder)).slow = True
    release = threading.Event()
    asked = hang_listing(monkeypatch, vault / "Projects", release)
    said: list[str | None] = []
    watcher = Watcher(
        [vault, cfg.agents_dir],
        lambda *_: None,
        threading.Event(),
        50,
        0.2,
        walk=sup.watched_walk,
        slow=sup.slow_folder,
    )
    watcher.on_left_out = said.append
    got: list[Any] = []
    setup = threading.Thread(target=lambda: got.append(watcher._walked([vault, cfg.agents_dir])), daemon=True)
    try:
        setup.start()
        setup.join(20)
        assert not setup.is_alive(), "the watch's set-up waits for the slow vault's walk"
        _walked, answered, _linked = got[0]
        assert answered == [cfg.agents_dir]
        assert said[-1] is not None and f"{vault} yet: a slow share, not a hung one" in said[-1]
        assert not watcher._walk_answered()  # still walking
    finally:
        release.set()
    behind = watcher._behind[vault].thread
    behind.join(20)
    assert watcher._walk_answered()  # the watch starts again, with the vault
    before = len(asked)
    walked, answered, _linked = watcher._walked([vault, cfg.agents_dir])
    assert answered == [vault, cfg.agents_dir]
    assert vault / "Projects" in walked and len(asked) == before  # its walk's answer, used
    assert said[-1] is None


def test_a_slow_vault_whose_walk_on_its_own_thread_hangs_is_said_hung_and_not_restarted_for(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vault is learnt slow and walked on a thread of its own; a listing there then never
    answers, past watch.scanTimeoutSeconds: the supervisor marks the vault hanging (no longer
    slow). The watch says it hangs from then on, as status does, not "a slow share, not a hung
    one"; and that failed walk answered nothing, so it starts no new watch and no sweep."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2, "watch.scanTimeoutSeconds": 1})
    write(vault / "Projects" / "a.md", "# A\n\nThe zeppelin.\n")
    (cfg.agents_dir / "ada" / "memory").mkdir(parents=True)
    sup = Supervisor(cfg)
    st = sup.status(Root("vault", vault, exclude=cfg.vault.wiki_subfolder))
    st.slow = True
    release = threading.Event()
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int) and Path(path) == vault / "Projects":
            release.wait(60)  # hangs until the test ends
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    said: list[str | None] = []
    watcher = Watcher(
        [vault, cfg.agents_dir],
        lambda *_: None,
        threading.Event(),
        50,
        0.2,
        walk=sup.watched_walk,
        slow=sup.slow_folder,
    )
    watcher.on_left_out = said.append
    try:
        watcher._walked([vault, cfg.agents_dir])
        assert "yet: a slow share, not a hung one" in (said[-1] or "")
        watcher._behind[vault].thread.join(20)
        assert st.hanging is not None and not sup.slow_folder(vault)
        assert not watcher._walk_answered()  # no restart, no sweep: nothing answered
        assert f"cover {vault}: a call there hangs" in (said[-1] or ""), said[-1]
        assert "slow share" not in (said[-1] or "")
        watcher._walked([vault, cfg.agents_dir])  # a set-up for another reason: still hung
        assert f"cover {vault}: a call there hangs" in (said[-1] or ""), said[-1]
        assert "slow share" not in (said[-1] or "")
    finally:
        release.set()


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
