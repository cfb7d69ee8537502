"""Root supervision: mount types, backoff, due roots, hung shares, polling mode."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.runtime import backoff
from sidecar.runtime.backoff import Backoff
from sidecar.vault import supervisor as supervisor_mod
from sidecar.vault.mounts import fs_type_of, is_network, parse_mount_output, parse_mountinfo
from sidecar.vault.sources import Root
from sidecar.vault.supervisor import Supervisor
from tests.conftest import FakeEmbedder, Harness, write

MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /mnt/nas rw,relatime shared:20 - cifs //nas/share rw,vers=3.0
41 22 0:36 / /mnt/my\\040notes rw - nfs4 nas:/notes rw
42 22 0:37 / /home/u/remote rw - fuse.sshfs u@host: rw
43 40 0:38 / /mnt/nas/local rw - tmpfs tmpfs rw
"""


def test_mountinfo_types_and_longest_prefix() -> None:
    """Types come from the longest mount point containing the path; escapes are decoded."""
    mounts = parse_mountinfo(MOUNTINFO)
    assert ("/mnt/my notes", "nfs4") in mounts
    assert fs_type_of(Path("/mnt/nas/Vault"), mounts) == "cifs"
    assert fs_type_of(Path("/mnt/nas/local/x"), mounts) == "tmpfs"
    assert fs_type_of(Path("/mnt/my notes/v"), mounts) == "nfs4"
    assert fs_type_of(Path("/srv/vault"), mounts) == "ext4"
    assert all(is_network(t) for t in ("cifs", "nfs4", "fuse.sshfs", "smbfs", "afpfs"))
    assert not any(is_network(t) for t in ("ext4", "apfs", "tmpfs", "btrfs", None))


def test_macos_mount_output() -> None:
    """macOS `mount` lines parse into (mount point, type)."""
    out = "//me@nas._smb._tcp.local/Vault on /Volumes/Vault (smbfs, nodev, nosuid, mounted by me)\n"
    assert parse_mount_output(out) == [("/Volumes/Vault", "smbfs")]


def test_backoff_grows_caps_and_jitters() -> None:
    """30 s, 60 s, 120 s ... capped at 10 min, each within ±20 %."""
    b = Backoff(30, 600, 0.2)
    assert [b.delay(n, lambda: 0.5) for n in (1, 2, 3, 6, 9)] == [30, 60, 120, 600, 600]
    assert b.delay(1, lambda: 0.0) == pytest.approx(24) and b.delay(1, lambda: 1.0) == pytest.approx(36)


def test_backoff_test_mode_removes_the_waits_and_ends_with_the_block() -> None:
    """In test mode every delay is 0 (retries still run in order); outside it the policy holds."""
    b = Backoff(30, 600, 0.2)
    with backoff.testing():
        assert backoff.is_testing()
        assert [b.delay(n) for n in (1, 2, 9)] == [0.0, 0.0, 0.0]
    assert not backoff.is_testing()
    assert b.delay(1, lambda: 0.5) == 30


def test_a_share_that_hangs_everywhere_never_blocks_a_sweep(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vault whose every call hangs (a hard NFS mount whose server is gone): finding its file
    system type and reading Obsidian's settings hang too, before any listing. Both are asked with
    the probe timeout: the sweep ends, the vault and wiki go offline, the agents' memory is
    indexed, and no second call is started while the first still hangs (on the vault or in it)."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.3})
    release = __import__("threading").Event()
    calls: list[str] = []
    real_type = supervisor_mod.fs_type_of

    def fs_type_of(path: Path, mounts: Any) -> Any:
        if Path(path).is_relative_to(vault):
            calls.append("type")
            release.wait(30)
        return real_type(path, mounts)

    monkeypatch.setattr(supervisor_mod, "fs_type_of", fs_type_of)
    h = Harness(cfg, FakeEmbedder())
    settings = h.indexer.ignore.refresh

    def refresh() -> None:
        calls.append("settings")
        release.wait(30)
        settings()

    monkeypatch.setattr(h.indexer.ignore, "refresh", refresh)
    write(cfg.agents_dir / "claude" / "memory" / "note.md", "# Note\n\nheron\n")
    try:
        for _ in range(2):
            t0 = time.monotonic()
            h.sweep()
            assert time.monotonic() - t0 < 10
        for name in ("vault", "wiki"):
            assert h.supervisor.roots[name].offline, name
        assert h.stores.manifest.counts()["by_source"]["memory"]["files"] == 1
        # One call on the hung vault in all: not one per sweep, none for the wiki inside it,
        # and the settings file is not asked while the vault's call hangs.
        assert calls == ["type"]
        release.set()
        time.sleep(0.3)
        h.sweep()
        assert not h.supervisor.roots["vault"].offline
        assert h.stores.manifest.counts()["by_source"]["vault"]["files"] == 3
    finally:
        release.set()
        h.close()


def test_sweeps_before_the_retry_do_not_grow_the_backoff(make_cfg: Any, vault: Path) -> None:
    """Sweeps that meet an offline root before its retry is due (file events, a user's index) keep
    its schedule; only the retries themselves grow the delay (two early sweeps pushed it to a
    minute)."""
    now = [1000.0]
    sup = Supervisor(make_cfg(vault), clock=lambda: now[0])
    root = Root("vault", vault)
    sup.mark_offline(root, "gone")
    first = sup.status(root).next_retry
    assert first is not None and sup.status(root).failures == 1
    now[0] += 1
    # Whatever the early sweeps say (a hung root: "did not answer", then "still hangs").
    sup.mark_offline(root, "did not answer within its timeout")
    sup.mark_offline(root, "an earlier call still hangs")
    assert sup.status(root).failures == 1 and sup.status(root).next_retry == first
    assert sup.status(root).error == "an earlier call still hangs"
    now[0] = first
    sup.mark_offline(root, "gone")
    assert sup.status(root).failures == 2


def test_due_roots_follow_retry_and_poll_intervals(make_cfg: Any, vault: Path) -> None:
    """Offline roots are due at their retry time; network roots every poll interval."""
    now = [1000.0]
    sup = Supervisor(make_cfg(vault, **{"watch.pollSeconds": 60}), clock=lambda: now[0])
    nas = Root("vault", vault)
    sup.status(nas).network = True
    sup.status(nas).last_sweep = 990.0
    assert sup.due() == []
    now[0] = 1051.0
    assert sup.due() == ["vault"]
    wiki = Root("wiki", vault / "wiki")
    sup.mark_offline(wiki, "gone")
    assert "wiki" not in sup.due()
    now[0] += 40
    assert "wiki" in sup.due()
    sup.mark_online(wiki)
    assert sup.status(wiki).failures == 0 and not sup.status(wiki).offline


def test_hung_root_does_not_block_the_others(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root whose listing hangs goes offline after its timeout; the other roots are indexed."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.3})
    real_probe = supervisor_mod._probe
    release = __import__("threading").Event()

    def probe(root: Root, *args: Any) -> None:
        if root.source == "wiki":
            release.wait(30)  # a hung NFS stat
        real_probe(root, *args)

    monkeypatch.setattr(supervisor_mod, "_probe", probe)
    h = Harness(cfg, FakeEmbedder())
    try:
        t0 = time.monotonic()
        h.sweep()
        assert time.monotonic() - t0 < 10
        wiki = h.supervisor.roots["wiki"]
        assert (
            wiki.offline
            and "looking up . in" in (wiki.error or "")
            and "did not answer" in (wiki.error or "")
        )
        assert h.stores.manifest.counts()["by_source"]["vault"]["files"] == 3
        h.sweep()  # the hung probe thread is still there: no second one is started
        assert "still hangs" in (h.supervisor.roots["wiki"].error or "")
        release.set()
        time.sleep(0.2)
        h.sweep()
        assert not h.supervisor.roots["wiki"].offline
        assert h.stores.manifest.counts()["by_source"]["wiki"]["files"] == 1
    finally:
        release.set()
        h.close()


def test_mount_table_double_puts_root_in_polling_mode(make_cfg: Any, vault: Path, tmp_path: Path) -> None:
    """A vault on a cifs mount (per the mount table) is reported as polling, not events."""
    table = tmp_path / "mountinfo"
    table.write_text(f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:35 / {vault} rw - cifs //nas/v rw\n")
    h = Harness(make_cfg(vault, **{"watch.mountTable": str(table)}), FakeEmbedder())
    try:
        h.sweep()
        roots = {r["name"]: r for r in h.supervisor.describe(lambda _p: True)}
        assert roots["vault"]["mode"] == "polling" and roots["vault"]["fs_type"] == "cifs"
        assert roots["wiki"]["mode"] == "polling"  # inside the same share
    finally:
        h.close()


def test_long_scan_beats_the_watchdog_and_a_hung_one_is_reported(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow scan keeps the indexer's heartbeat going (about once a second) and completes; a
    scan hung past watch.scanTimeoutSeconds is reported (root offline, reason given), and the
    heartbeat went on meanwhile, so the watchdog kills neither."""
    real_scan = supervisor_mod.scan
    delay = {"vault": 2.5}

    def slow_scan(root: Root, max_bytes: int, asking: Any = None) -> Any:
        time.sleep(delay.get(root.source, 0.0))  # no call asked: slow, and past the scan's timeout
        return real_scan(root, max_bytes, asking=asking)

    monkeypatch.setattr(supervisor_mod, "scan", slow_scan)
    h = Harness(make_cfg(vault, **{"watch.scanTimeoutSeconds": 4}), FakeEmbedder())
    try:
        beats: list[float] = []
        h.supervisor.beat = lambda: beats.append(time.monotonic())
        h.sweep()
        assert len(beats) >= 2 and not h.supervisor.roots["vault"].offline
        assert h.stores.manifest.file_states_of(["vault/Garden"])
        beats.clear()
        delay["vault"] = 6.0
        h.sweep()
        st = h.supervisor.roots["vault"]
        assert st.offline and "did not answer within its timeout" in (st.error or "")
        assert len(beats) >= 3 and max(b - a for a, b in itertools.pairwise(beats)) < 2.0
        assert h.stores.manifest.file_states_of(["vault/Garden"])  # nothing deleted
    finally:
        h.close()


def test_the_status_of_an_inbox_that_is_no_root_any_more_is_forgotten(make_cfg: Any, vault: Path) -> None:
    """Statuses of agent inboxes that are no roots now are dropped (one kept per agent that ever
    wrote grew without bound); the vault's and wiki's stay, and so does an inbox's whose call
    still hangs, so that no second call is started on it."""
    cfg = make_cfg(vault)
    sup = Supervisor(cfg)
    for name in ("vault", "wiki", "memory/a", "memory/b", "memory/stuck"):
        sup.status(Root(name.split("/")[0], cfg.home / name, agent=name.partition("/")[2]))
    release = threading.Event()
    stuck = threading.Thread(target=release.wait, args=(30,), daemon=True)
    stuck.start()
    sup.roots["memory/stuck"]._stuck = stuck
    try:
        sup.keep_memory_roots({"memory/b"})
        assert set(sup.roots) == {"vault", "wiki", "memory/b", "memory/stuck"}
        release.set()
        stuck.join()
        sup.keep_memory_roots(set())
        assert set(sup.roots) == {"vault", "wiki"}
        assert [r["name"] for r in sup.describe(lambda _p: True)] == ["vault", "wiki"]
    finally:
        release.set()


def test_a_retired_inbox_leaves_no_meta_row(make_cfg: Any, vault: Path) -> None:
    """The mount state remembered for an agent's inbox (meta row root:memory/<agent>) goes when
    the inbox is no root any more, and the rows an older version left for inboxes retired
    before this start go with the first sweep: one row per agent name ever used grew the
    manifest for good. The inbox's next note brings its row back."""
    from sidecar.memory.inbox import Inboxes

    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    inboxes = Inboxes(cfg)
    try:
        manifest = h.stores.manifest

        def rows() -> set[str]:
            return {r[0] for r in manifest.read("SELECT name FROM meta WHERE name LIKE 'root:%'")}

        manifest.set_meta("root:memory/long-gone", '{"dev": 1}')  # left by an older version
        inboxes.write("s1", "n", "a note", None, must_exist=False)
        inboxes.write("s2", "n", "another", None, must_exist=False)
        h.sweep()
        assert "root:memory/long-gone" not in rows()
        assert {"root:memory/s1", "root:memory/s2", "root:vault"} <= rows()
        inboxes.delete("s1", "n")
        h.sweep()
        assert "memory/s1" not in h.supervisor.roots
        assert "root:memory/s1" not in rows()
        assert manifest.get_meta("root:memory/s2") is not None and manifest.get_meta("root:vault")
        inboxes.prune_trash(now=time.time() + 91 * 86_400)  # its folders retired
        assert not (cfg.agents_dir / "s1").exists()
        h.sweep()
        inboxes.write("s1", "n", "back", None, must_exist=False)
        h.sweep()
        assert manifest.get_meta("root:memory/s1") is not None
    finally:
        h.close()


def test_a_stop_cutting_the_vaults_read_does_not_take_the_wiki_offline(make_cfg: Any, vault: Path) -> None:
    """The daemon's stop cuts the wait for a vault note's read: the wiki's next read in the
    batch is cut as a stop too (``StopCut``: no offline state), not refused because the vault's
    call still runs (a plain RootUnreachable, the wiki marked offline)."""
    from sidecar.vault.supervisor import RootUnreachable, StopCut

    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 30})
    sup = Supervisor(cfg)
    outer = Root("vault", vault, exclude="wiki")
    wiki = Root("wiki", vault / "wiki", within=vault)
    release, reading = threading.Event(), threading.Event()

    def hang() -> None:
        reading.set()
        release.wait(20)

    cut: list[BaseException] = []

    def read_vault() -> None:
        try:
            sup.read(outer, "A.md", hang)
        except RootUnreachable as exc:
            cut.append(exc)

    t = threading.Thread(target=read_vault, daemon=True)
    try:
        t.start()
        assert reading.wait(10)
        sup.stopping.set()
        t.join(10)
        assert cut and isinstance(cut[0], StopCut)
        with pytest.raises(StopCut):
            sup.read(wiki, "W.md", lambda: "text")
        sup.unreachable(wiki, StopCut("stop"))
        assert not sup.status(wiki).offline
    finally:
        release.set()


def test_a_read_that_hangs_after_a_scan_given_up_on_is_known_to_hang(make_cfg: Any, vault: Path) -> None:
    """A note's read hangs on a root whose earlier scan was given up on at a call that answered
    since: the read is what hangs now, and no second call is started beside it. The given-up
    scan's record said the root's call had answered: the hung read went unseen."""
    from sidecar.vault.sources import Asking
    from sidecar.vault.supervisor import RootUnreachable

    sup = Supervisor(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.3}))
    root = Root("vault", vault, exclude="wiki")
    st = sup.status(root)
    st._asking, st._given_up = Asking(), ("listing", "Recipes", 0.0)  # answered since: now is None
    release = threading.Event()
    try:
        with pytest.raises(RootUnreachable, match=r"reading A\.md"):
            sup.read(root, "A.md", lambda: release.wait(20))
        assert st.hanging is not None
        with pytest.raises(RootUnreachable, match="still hangs"):
            sup.read(root, "B.md", lambda: "text")
    finally:
        release.set()


def _share_table(tmp_path: Path, vault: Path, fs_type: str = "cifs") -> Path:
    """A mount table (mountinfo) naming ``vault`` as a share of its own: classify looks it up."""
    table = tmp_path / "mountinfo"
    table.write_text(f"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:35 / {vault} rw - {fs_type} //nas/v rw\n")
    return table


def _late_look_up(monkeypatch: pytest.MonkeyPatch, vault: Path, release: threading.Event) -> list[Path]:
    """classify's look-up of ``vault`` in the mount table (its path resolved) waits for ``release``."""
    real = supervisor_mod.fs_type_of
    asked: list[Path] = []

    def fs_type_of(path: Path, mounts: list[tuple[str, str]]) -> str | None:
        asked.append(path)
        if path == vault:
            release.wait(20)
        return real(path, mounts)

    monkeypatch.setattr(supervisor_mod, "fs_type_of", fs_type_of)
    return asked


class _Meta(dict[str, str]):
    """The supervisor's meta rows, in memory."""

    def get_meta(self, name: str) -> str | None:
        return self.get(name)

    def set_meta(self, name: str, value: str) -> None:
        self[name] = value

    def meta_names(self, prefix: str) -> list[str]:
        return [k for k in self if k.startswith(prefix)]

    def delete_meta(self, names: Any) -> None:
        for n in names:
            self.pop(n, None)


def test_classify_reads_the_mount_table_it_is_given(make_cfg: Any, vault: Path, tmp_path: Path) -> None:
    """classify takes each root's type from the configured mount table (a share: polled) and
    keeps the table's mount points; an empty table asks nothing of the roots."""
    root = Root("vault", vault, exclude="wiki")
    sup = Supervisor(make_cfg(vault, **{"watch.mountTable": str(_share_table(tmp_path, vault, "nfs4"))}))
    sup.classify([root])
    st = sup.status(root)
    assert st.fs_type == "nfs4" and st.network and str(vault) in sup.mount_points_seen
    empty = tmp_path / "empty"
    empty.write_text("")
    sup = Supervisor(make_cfg(vault, **{"watch.mountTable": str(empty)}))
    sup.classify([root])
    assert sup.status(root).fs_type is None and sup.mounts == []


def test_classify_gives_up_a_hung_look_up_and_learns_a_slow_share(
    make_cfg: Any,
    vault: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """classify's look-up of a root that does not answer: given up on after probeTimeoutSeconds
    as a stat of the root ("looking up ."), no second one started while it hangs; once it has
    answered, the next scan learns the share is slow and remembers it."""
    from sidecar.vault.supervisor import RootUnreachable

    cfg = make_cfg(
        vault,
        **{
            "watch.mountTable": str(_share_table(tmp_path, vault)),
            "watch.probeTimeoutSeconds": 0.3,
            "watch.scanTimeoutSeconds": 60,
        },
    )
    meta = _Meta()
    sup = Supervisor(cfg, meta=meta)
    root = Root("vault", vault, exclude="wiki")
    release = threading.Event()
    asked = _late_look_up(monkeypatch, vault, release)
    try:
        sup.classify([root])
        st = sup.status(root)
        assert st.hung_on == "looking up ." and st.hanging is not None and st.fs_type is None
        sup.classify([root])  # still hanging: not asked again
        assert asked.count(vault) == 1
        with pytest.raises(RootUnreachable, match="still hangs"):
            sup.list_root(root)
    finally:
        release.set()
    st._stuck.join(10)  # type: ignore[union-attr]  # the look-up answered (late)
    with caplog.at_level(logging.WARNING, logger="sidecar.vault.supervisor"):
        sup.bounded(root, lambda _asking: None)  # a file event's look (a whole quick scan ends it)
    assert st.slow and "slow:vault" in meta and "share_slow root=vault call=looking up ." in caplog.text


def test_classify_waits_the_whole_scan_bound_on_a_slow_share_and_drops_a_hung_ones_mark(
    make_cfg: Any,
    vault: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """On a share remembered slow, classify's look-up is waited for up to scanTimeoutSeconds (one
    past probeTimeoutSeconds still finds the type); one that does not answer even then is a hung
    share: its slow mark goes (share_hung) and later calls are given up per call again."""
    table = str(_share_table(tmp_path, vault))
    root = Root("vault", vault, exclude="wiki")
    meta = _Meta({"slow:vault": '{"call": "listing Recipes", "since": 0}'})
    release = threading.Event()
    _late_look_up(monkeypatch, vault, release)
    cfg = make_cfg(vault, **{"watch.mountTable": table, "watch.probeTimeoutSeconds": 0.1})
    # Answered at the wait's first beat (about a second): past the probe timeout.
    sup = Supervisor(cfg, meta=meta, beat=release.set)
    sup.classify([root])
    st = sup.status(root)
    assert st.fs_type == "cifs" and st.slow and st.hung_on is None
    release.clear()
    cfg = make_cfg(
        vault, **{"watch.mountTable": table, "watch.probeTimeoutSeconds": 0.1, "watch.scanTimeoutSeconds": 1}
    )
    sup = Supervisor(cfg, meta=meta)
    try:
        with caplog.at_level(logging.WARNING, logger="sidecar.vault.supervisor"):
            sup.classify([root])
        st = sup.status(root)
        assert st.hung_on == "looking up ." and st.hanging is not None
        assert not st.slow and "slow:vault" not in meta and "share_hung root=vault" in caplog.text
    finally:
        release.set()


def test_one_stuck_thread_per_key_serves_unshared_calls_and_shared_probes() -> None:
    """One mechanism for both kinds of call with a deadline: unshared calls under one key
    (``bounded_call``: reads of different notes of one root) each get their own answer (a shared
    probe's callers read one answer: test_nas), and while a call under a key hangs past its
    deadline the next under that key is told NoAnswer at once, with the stuck thread."""
    from sidecar.vault.timeout import NoAnswer, SharedProbes, bounded_call

    probes = SharedProbes()
    assert bounded_call(lambda: "a", 5, probes, "vault", "t") == "a"
    assert bounded_call(lambda: "b", 5, probes, "vault", "t") == "b"  # its own, not a's
    release = threading.Event()
    with pytest.raises(NoAnswer) as hung:
        bounded_call(lambda: release.wait(20), 0.1, probes, "vault", "t")
    stuck = hung.value.stuck
    assert stuck is not None and stuck.is_alive()
    with pytest.raises(NoAnswer, match="still hangs") as again:
        bounded_call(lambda: "c", 5, probes, "vault", "t")
    assert again.value.stuck is stuck
    assert bounded_call(lambda: "d", 5, probes, "wiki", "t") == "d"  # another key goes on
    release.set()
    stuck.join(10)
    assert bounded_call(lambda: "e", 5, probes, "vault", "t") == "e"


def test_the_supervisors_parts_define_each_method_once() -> None:
    """The supervisor's parts are built on one base (``SupervisorBase``: the roots' state and the
    calls the parts make of one another): a method defined in two of them would be taken from
    whichever comes first in the inheritance order, silently, so none is."""
    from sidecar.vault.remembered import Remembered
    from sidecar.vault.root_report import RootReport
    from sidecar.vault.supervisor_base import SupervisorBase
    from sidecar.vault.watch_looks import WatchLooks

    parts = [SupervisorBase, Remembered, RootReport, WatchLooks, Supervisor]
    owners: dict[str, list[str]] = {}
    for part in parts:
        for name in vars(part):
            if not (name.startswith("__") and name.endswith("__")):
                owners.setdefault(name, []).append(part.__name__)
    assert {n: o for n, o in owners.items() if len(o) > 1} == {}
    assert all(issubclass(part, SupervisorBase) for part in parts)


def test_a_patch_of_a_name_that_moved_out_of_the_supervisor_or_the_watcher_fails_loudly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The clock, ``identity_of`` and the watch's folder look moved to ``supervisor_base`` and
    ``watch_walk``: a test patching them where they were would reach nothing, silently; the old
    modules keep no such name, so the patch raises."""
    from sidecar.vault import supervisor as supervisor_module
    from sidecar.vault import watcher as watcher_module

    for module, name in [
        (supervisor_module, "time"),
        (supervisor_module, "identity_of"),
        (watcher_module, "time"),
        (watcher_module, "_is_real_folder"),
    ]:
        with pytest.raises(AttributeError):
            monkeypatch.setattr(module, name, None)


def test_the_watchs_look_reads_the_supervisors_one_clock(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch's stat of the agents folder (``WatchLooks``) times the call it gives up on by
    the clock every part of the supervisor reads: it read a clock of its own, which a test
    setting the supervisor's clock ahead never reached."""
    import os

    from sidecar.vault import supervisor_base
    from sidecar.vault.timeout import NoAnswer
    from tests.share_hangs import SupervisorClock, inbox_of

    clock = SupervisorClock()
    monkeypatch.setattr(supervisor_base, "time", clock)
    clock.ahead = 10_000.0
    cfg = make_cfg(tmp_path / "vault", **{"watch.probeTimeoutSeconds": 0.2})
    sup = Supervisor(cfg)
    _, root = inbox_of(cfg)
    st = sup.status(root)
    release = threading.Event()
    real = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path) == cfg.agents_dir:
            release.wait(20)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    try:
        with pytest.raises(NoAnswer):
            sup.watched_stat(cfg.agents_dir)
        assert st._given_up is not None and st._given_up[2] >= time.monotonic() + 9_000
    finally:
        release.set()
