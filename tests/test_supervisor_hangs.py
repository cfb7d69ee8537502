"""Calls on a share outside its scans (the watch's stat, the start's look at the vault, a
rebuild's checks, a path's real spelling, a get's anchors) that time out mark their root hanging
by the one rule (``Supervisor.hangs``): status says the share hangs, the sweeps retry it with
their backoff, no second call is started into it, and nothing indexed leaves for it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.vault.sources import Root
from sidecar.vault.supervisor import Supervisor
from sidecar.vault.watcher import Watcher
from tests.share_hangs import hang_listing


def _hang_stat_of(monkeypatch: pytest.MonkeyPatch, path: Path, release: threading.Event) -> None:
    """``os.stat`` of ``path`` waits for ``release`` (a share whose getattr hangs)."""
    real = os.stat

    def stat(p: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if Path(p) == path:
            release.wait(20)
        return real(p, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)


def test_a_watched_folders_stat_that_hangs_marks_its_roots_hanging(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch's stat of the vault (and of the agents folder, for the inboxes in it) asked
    through the supervisor: one that times out marks the roots in it hanging, status says it
    in words, and the next stat is told at once (was: the watcher's own bound, nothing marked,
    status said "events" while the share hung)."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2})
    sup = Supervisor(cfg)
    inbox = Root("memory", cfg.agents_dir / "ada" / "memory", agent="ada")
    sup.status(inbox)
    release = threading.Event()
    _hang_stat_of(monkeypatch, vault, release)
    _hang_stat_of(monkeypatch, cfg.agents_dir, release)
    folders = [vault, cfg.agents_dir]
    watcher = Watcher(folders, lambda *_: None, threading.Event(), 50, 0.2, stat=sup.watched_stat)
    try:
        assert watcher._stat(vault) is None
        assert watcher._stat(cfg.agents_dir) is None
        roots = {r["name"]: r for r in sup.describe(lambda _p: True)}
        assert roots["vault"]["mode"] == "offline" and "still hangs" in roots["vault"]["error"], roots
        assert "still hangs" in (roots["memory/ada"]["error"] or ""), roots
        before = threading.active_count()
        assert watcher._stat(vault) is None  # told at once: no second thread into the share
        assert watcher._stat(cfg.agents_dir) is None  # its own stat still in: told at once too
        assert threading.active_count() == before
    finally:
        release.set()


def test_one_hanging_inbox_does_not_blind_the_watch_of_the_agents_folder(make_cfg: Any, vault: Path) -> None:
    """ada's inbox is marked hanging (a read of one of her notes hung); the agents folder itself
    answers: the watch's stat of it still answers, so bob's inbox keeps its events (was: NoAnswer
    at once for any inbox marked hanging, the watch restarted without the agents folder)."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2})
    (cfg.agents_dir / "ada" / "memory").mkdir(parents=True, exist_ok=True)
    (cfg.agents_dir / "bob" / "memory").mkdir(parents=True, exist_ok=True)
    sup = Supervisor(cfg)
    sup.status(Root("memory", cfg.agents_dir / "ada" / "memory", agent="ada"))
    sup.status(Root("memory", cfg.agents_dir / "bob" / "memory", agent="bob"))
    release = threading.Event()
    stuck = threading.Thread(target=release.wait, args=(20,), daemon=True)
    stuck.start()
    try:
        sup.read_hangs("memory/ada", "reading x.md", stuck)
        assert sup.roots["memory/ada"].hanging is not None
        watcher = Watcher(
            [vault, cfg.agents_dir], lambda *_: None, threading.Event(), 50, 0.2, stat=sup.watched_stat
        )
        assert watcher._stat(cfg.agents_dir) is not None
        assert sup.roots["memory/bob"].hanging is None
    finally:
        release.set()


def test_the_watchers_stat_of_a_slow_share_waits_no_longer_and_judges_nothing(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a vault learnt slow (its calls waited for up to scanTimeoutSeconds), the watcher's
    stat still gives up after probeTimeoutSeconds (its one thread carries every root's events)
    and, given up on that soon, marks nothing: the share stays slow, not hung."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2, "watch.scanTimeoutSeconds": 30})
    sup = Supervisor(cfg)
    st = sup.status(Root("vault", vault, exclude="wiki"))
    st.slow = True
    release = threading.Event()
    _hang_stat_of(monkeypatch, vault, release)
    watcher = Watcher([vault], lambda *_: None, threading.Event(), 50, 0.2, stat=sup.watched_stat)
    try:
        assert watcher._stat(vault) is None
        assert st.hanging is None and st.slow
    finally:
        release.set()


def test_the_starts_look_at_a_vault_that_hangs_marks_it_hanging(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start's look at the vault (whether it is there) that does not answer marks the
    vault hanging once the supervisor is built: status says the share hangs and the first
    sweep is told at once, no second call into the share (was: only a log line, and the first
    sweep waited its own timeout)."""
    from types import SimpleNamespace

    from sidecar.daemon import lifecycle
    from sidecar.vault.supervisor import RootUnreachable

    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2})
    daemon = lifecycle.Daemon(cfg)
    release = threading.Event()
    _hang_stat_of(monkeypatch, vault, release)
    try:
        daemon._look_at_vault(vault)
        sup = Supervisor(cfg)
        daemon._hand_start_hang(SimpleNamespace(supervisor=sup))
        roots = {r["name"]: r for r in sup.describe(lambda _p: True)}
        assert roots["vault"]["mode"] == "offline" and "still hangs" in roots["vault"]["error"], roots
        with pytest.raises(RootUnreachable, match="still hangs"):
            sup.list_root(Root("vault", vault, exclude="wiki"))
    finally:
        release.set()
        daemon.notifier.close()


def test_a_real_path_look_up_of_the_folder_named_that_hangs_marks_the_root_hanging_and_deletes_nothing(
    make_cfg: Any, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard's look at whether the configuration names another folder: the real path of the
    folder named now that does not answer marks the root hanging, and the sweep's deletions wait
    (was: no answer taken as "the same folder", the deletions judged and applied while the share
    hung, and a thread left per sweep)."""
    import json
    import sys

    from tests.conftest import FakeEmbedder, Harness

    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2}), FakeEmbedder())
    release = threading.Event()
    try:
        h.sweep()
        known = set(h.stores.manifest.file_states("vault/"))
        spelled = str(tmp_path / "spelled-otherwise")
        memo = json.loads(h.stores.manifest.get_meta("root:vault") or "{}")
        h.stores.manifest.set_meta("root:vault", json.dumps({**memo, "path": spelled}))
        real = os.path.realpath

        def realpath(p: Any, *args: Any, **kwargs: Any) -> str:
            # only the guard's look at the folder named now hangs (the scan's own calls answer)
            if str(p) == str(vault) and "_reconfigured" in sys._getframe(1).f_code.co_qualname:
                release.wait(20)
            return real(p, *args, **kwargs)

        monkeypatch.setattr(os.path, "realpath", realpath)
        gone = sorted(vault.rglob("*.md"))[0]
        gone.unlink()
        h.sweep()
        st = h.supervisor.roots["vault"]
        assert st.hanging is not None
        assert set(h.stores.manifest.file_states("vault/")) == known  # nothing left for a timeout
        roots = {r["name"]: r for r in h.supervisor.describe(lambda _p: True)}
        assert "still hangs" in (roots["vault"]["error"] or ""), roots
    finally:
        release.set()
        h.close()


def _moved_off_a_dead_nas(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: threading.Event, keep: int
) -> tuple[Any, set[str], list[str]]:
    """A vault of 7 notes (5 in its top folder) indexed on a NAS (``/mnt/nas``, a mount point
    of its own), copied to a local folder with only the first ``keep`` of its top folder's notes
    (and one new note), the configuration then naming the copy; every look into the old folder
    hangs until ``release`` (a hard mount of a dead share). The harness over the copy, the notes
    indexed before, the looks into the old folder."""
    import json
    import shutil

    from tests.conftest import FakeEmbedder, Harness, make_vault, write

    old = make_vault(tmp_path / "nas" / "vault")
    for i in range(4):
        write(old / f"Log{i}.md", f"# Log {i}\n\nentry {i}\n")
    h = Harness(make_cfg(old, **{"watch.probeTimeoutSeconds": 0.2}), FakeEmbedder())
    h.sweep()
    known = set(h.stores.manifest.file_states("vault/"))
    for name in ("vault", "wiki"):  # as the NAS left it: its own mount point, its own device
        memo = json.loads(h.stores.manifest.get_meta(f"root:{name}") or "{}")
        memo.update(mount=name == "vault", dev=memo["dev"] + 1, under="/mnt/nas")
        h.stores.manifest.set_meta(f"root:{name}", json.dumps(memo))
    h.close()
    new = tmp_path / "local" / "vault"
    shutil.copytree(old, new)
    notes = sorted(p for p in new.glob("*.md"))
    for p in notes[keep:]:
        p.unlink()
    write(new / "Fresh.md", "# Fresh\n\nnew note\n")
    looks: list[str] = []
    real_realpath, real_stat = os.path.realpath, os.stat

    def dead(p: Any) -> None:
        if isinstance(p, (str, os.PathLike)) and os.fspath(p).startswith(str(old)):
            looks.append(os.fspath(p))
            release.wait(20)

    def realpath(p: Any, *args: Any, **kwargs: Any) -> str:
        dead(p)
        return real_realpath(p, *args, **kwargs)

    def stat(p: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        dead(p)
        return real_stat(p, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", realpath)
    monkeypatch.setattr(os, "stat", stat)
    return Harness(make_cfg(new, **{"watch.probeTimeoutSeconds": 0.2}), FakeEmbedder()), known, looks


def test_a_vault_moved_off_a_dead_nas_is_swept_and_its_deletions_applied_while_the_old_mount_hangs(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vault moved off a NAS whose mount hangs: the old folder's real path does not answer, so
    whether the two are one folder cannot be told, and the folder named now is judged as one
    never swept before: the note the copy lacks leaves the index, the new one is indexed, none
    of it "hangs", the new folder is remembered, and the dead share is looked into once per
    root, not at every sweep (was: the deletion waited at every sweep for as long as the old
    mount hung, status silent about why, the old folder remembered and asked again)."""
    import json

    release = threading.Event()
    h, known, looks = _moved_off_a_dead_nas(make_cfg, tmp_path, monkeypatch, release, keep=4)
    try:
        h.sweep()
        states = set(h.stores.manifest.file_states("vault/"))
        assert "vault/Fresh" in states
        lacking = {k for k in known if k not in states}
        assert lacking == {"vault/Log3"}, lacking  # the one note the copy lacks: deleted
        assert h.supervisor.roots["vault"].hanging is None
        roots = {r["name"]: r for r in h.supervisor.describe(lambda _p: True)}
        assert roots["vault"]["mode"] == "events" and roots["vault"]["hold"] is None, roots
        memo = json.loads(h.stores.manifest.get_meta("root:vault") or "{}")
        assert memo["path"] == str(h.cfg.vault.path) and memo.get("under") != "/mnt/nas", memo
        asked = len(looks)
        assert asked == 2, looks  # the vault's old folder and its wiki's, once each
        h.sweep()
        assert len(looks) == asked  # remembered: the dead share is not asked again
    finally:
        release.set()
        h.close()


def test_a_vault_moved_off_a_dead_nas_that_lost_most_notes_holds_them_as_a_mass_deletion(
    make_cfg: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The copy of the vault moved off a dead NAS lacks most notes (a copy cut short): judged as
    a new folder, the loss is still a mass deletion, held with the new folder remembered, and
    nothing leaves the index."""
    import json

    release = threading.Event()
    h, known, _looks = _moved_off_a_dead_nas(make_cfg, tmp_path, monkeypatch, release, keep=0)
    try:
        h.sweep()
        states = set(h.stores.manifest.file_states("vault/"))
        assert known <= states and "vault/Fresh" in states
        roots = {r["name"]: r for r in h.supervisor.describe(lambda _p: True)}
        assert roots["vault"]["hold"]["kind"] == "mass", roots
        memo = json.loads(h.stores.manifest.get_meta("root:vault") or "{}")
        assert memo["path"] == str(h.cfg.vault.path) and memo["hold"]["kind"] == "mass", memo
    finally:
        release.set()
        h.close()


def test_a_gets_anchor_read_that_hangs_marks_its_root_hanging_once_past_the_probe_timeout(
    serve_in_process: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A get's look at a linked note's headings whose read does not answer: the get answers
    within its own budget (the link not looked into), and the read still in its call after
    probeTimeoutSeconds marks the root hanging as a get's own read does (was: nothing marked,
    and each get started one more read into the hung share). Given up on before that, it is
    no hang yet: a slow read is no hung share. (The judge's timer is fired by hand.)"""
    from sidecar.daemon import anchors, note_ops
    from tests.conftest import write

    v = tmp_path / "anchored"
    write(v / "Log.md", "# Log\n\n[[Other#Kopf]]\n")
    write(v / "Other.md", "# Other\n\n## Kopf\n\nText.\n")
    # a probe timeout far past the anchors' budget: the read given up on is judged by the timer
    server = serve_in_process(v, **{"watch.probeTimeoutSeconds": 60})
    release = threading.Event()
    real = note_ops.read_note

    def read_note(path: Path, *args: Any) -> Any:
        if path.name == "Other.md":
            release.wait(20)
        return real(path, *args)

    monkeypatch.setattr(note_ops, "read_note", read_note)
    monkeypatch.setattr(anchors, "ANCHOR_SECONDS", 0.1)
    sup = server.harness.supervisor
    judges: list[tuple[float, Any]] = []
    sup.judge_after = lambda seconds, fn: judges.append((seconds, fn))
    try:
        got = server.call("get", {"reference": "vault/Log"})
        assert got["links"][0].get("anchor_found") is None
        assert sup.roots["vault"].hanging is None  # not past the probe timeout yet
        assert len(judges) == 1 and 0 < judges[0][0] <= 60
        judges[0][1]()  # the probe timeout has passed, the read still in its call
        assert sup.roots["vault"].hanging is not None
        roots = {r["name"]: r for r in server.call("health", {})["roots"]}
        assert "still hangs" in (roots["vault"]["error"] or ""), roots
        assert "reading Other" in (roots["vault"]["error"] or ""), roots
    finally:
        release.set()


def test_a_rebuilds_look_up_of_a_note_not_read_back_that_hangs_keeps_it_and_marks_the_root(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild looks up each note it did not read back (gone, or to be put back): a look-up
    that hangs marks the root hanging and puts the note back, not dropped as deleted (was: an
    unbounded lstat in the indexer's thread, blocking it for as long as the share hung, and the
    note then judged by whatever it answered)."""
    from sidecar.index import putback
    from tests.conftest import FakeEmbedder, Harness

    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2}), FakeEmbedder())
    release = threading.Event()
    try:
        h.sweep()
        known = set(h.stores.manifest.file_states("vault/"))
        gone, key = vault / "Garden.md", "vault/Garden"
        assert key in known
        gone.unlink()
        real = putback._gone

        def looked_up(path: Path) -> bool:
            if path == gone:
                release.wait(3)  # long past the probe timeout; short should the old code wait
            return real(path)

        monkeypatch.setattr(putback, "_gone", looked_up)
        h.indexer.clear()
        h.sweep()
        assert key in set(h.stores.manifest.file_states("vault/"))  # put back: no evidence it went
        stuck = h.supervisor.roots["vault"].hanging
        assert stuck is not None
        release.set()
        stuck.join(10)
        assert h.supervisor.roots["vault"].hanging is None
        h.sweep()  # the share answers: the deleted note leaves
        h.sweep()
        assert key not in set(h.stores.manifest.file_states("vault/"))
    finally:
        release.set()
        h.close()


def test_a_rebuilds_recheck_of_an_unreadable_note_that_hangs_marks_its_root_hanging(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebuild's check of the notes kept unreadable (opened again before it is refused or
    let go) whose open hangs marks their root hanging once past the probe timeout, as a
    sweep's read does, and the note stays named as recorded (was: a warning, the root said
    to be fine while its share hung)."""
    from sidecar.index import unreadable
    from tests.conftest import FakeEmbedder, Harness

    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2}), FakeEmbedder())
    judges: list[Any] = []
    h.supervisor.judge_after = lambda _seconds, fn: judges.append(fn)
    release = threading.Event()
    note = vault / "Garden.md"
    real = unreadable.read_refusal

    def read_refusal(path: Path) -> str | None:
        if path == note:
            release.wait(20)
        return real(path)

    try:
        h.sweep()
        h.indexer.changes._unread_notes[("vault", str(note))] = "an I/O error"
        monkeypatch.setattr(unreadable, "read_refusal", read_refusal)
        assert h.indexer.changes.unreadable_indexed() == [str(note)]
        for judge in judges:  # given up on a hair before the probe timeout: judged by hand
            judge()
        assert h.supervisor.roots["vault"].hanging is not None
        roots = {r["name"]: r for r in h.supervisor.describe(lambda _p: True)}
        assert "still hangs" in (roots["vault"]["error"] or "") and "Garden.md" in roots["vault"]["error"]
    finally:
        release.set()
        h.close()


def test_a_get_of_a_wiki_note_while_the_vault_around_it_hangs_is_told_at_once(
    serve_in_process: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wiki lies in the vault, on the same share: while a call on the vault hangs, a get
    of a wiki note is told at once that it hangs (its indexed text still found), with no read
    of its own started into the share (was: a read thread of its own, "no answer within 0 s"
    after a probe timeout's wait, and a second stuck thread)."""
    from sidecar.contracts.errors import RemoteError
    from sidecar.daemon import note_ops

    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    sup = served.harness.supervisor
    release = threading.Event()
    stuck = threading.Thread(target=release.wait, args=(20,), name="probe-vault", daemon=True)
    stuck.start()
    real = note_ops.read_note
    started: list[Path] = []

    def read_note(path: Path, *args: Any) -> Any:
        started.append(path)
        release.wait(20)
        return real(path, *args)

    monkeypatch.setattr(note_ops, "read_note", read_note)
    wiki_key = next(iter(served.harness.stores.manifest.file_states("wiki/")))
    try:
        sup.hangs(Root("vault", vault, exclude="wiki"), stuck, 0.0)
        with pytest.raises(RemoteError, match=r"still hangs.*still found by search"):
            served.call("get", {"reference": wiki_key})
        assert started == []
    finally:
        release.set()


def test_an_agents_inbox_on_a_share_that_hangs_is_marked_hanging_and_still_searched(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's memory inbox on a share that hangs: a list's look at its folder that does not
    answer marks the inbox hanging (read_hung), as a get's read of one of its notes does; health
    says so; searches, lists and gets after it start no call into the share (was: each list
    and each search by the agent looked at the inbox unbounded, waiting as long as the share
    did); its notes stay indexed, listed and found."""
    from sidecar.contracts.errors import RemoteError
    from sidecar.daemon import note_ops
    from sidecar.memory import ops
    from tests.conftest import write

    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    inbox = served.cfg.agents_dir / "ada" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the zeppelin disks.\n")
    write(inbox / "keep.md", "# Keep\n\nKeep the spare zeppelin disks.\n")
    served.harness.sweep()
    release = threading.Event()
    calls: list[str] = []
    real_scandir, real_read = ops.os.scandir, note_ops.read_inbox_note

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int) and Path(path) == inbox:
            calls.append("listing")
            release.wait(5)
        return real_scandir(path)

    def read_inbox_note(root: Any, name: str, *args: Any) -> Any:
        calls.append(f"reading {name}")
        release.wait(5)
        return real_read(root, name, *args)

    monkeypatch.setattr(ops.os, "scandir", scandir)
    monkeypatch.setattr(note_ops, "read_inbox_note", read_inbox_note)
    try:
        listed = served.call("list", {}, agent="ada")
        assert {n["reference"] for n in listed["notes"]} == {"memory/plan", "memory/keep"}
        roots = {r["name"]: r for r in served.call("health", {})["roots"]}
        assert roots["memory/ada"]["mode"] == "offline", roots
        assert "still hangs" in roots["memory/ada"]["error"], roots
        assert served.call("search", {"query": "zeppelin disks"}, agent="ada")["hits"]
        assert {n["reference"] for n in served.call("list", {}, agent="ada")["notes"]} == {
            "memory/plan",
            "memory/keep",
        }
        with pytest.raises(RemoteError, match="still hangs"):
            served.call("get", {"reference": "memory/keep"}, agent="ada")
        assert calls == ["listing"]  # one call into the share, none after it hung
        served.harness.sweep()  # the sweep is told it hangs: nothing of the inbox leaves
        keys = set(served.harness.stores.manifest.file_states("memory/ada/"))
        assert keys == {"memory/ada/plan", "memory/ada/keep"}
    finally:
        release.set()


def test_a_get_whose_read_of_an_agents_memory_note_hangs_marks_the_inbox_hanging(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A get's read of an agent's memory note that does not answer marks its inbox hanging, as
    for the vault (``Supervisor.read_hangs`` by the inbox's root name)."""
    from sidecar.contracts.errors import RemoteError
    from sidecar.daemon import note_ops
    from tests.conftest import write

    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    inbox = served.cfg.agents_dir / "ada" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the zeppelin disks.\n")
    write(inbox / "keep.md", "# Keep\n\nKeep the spare zeppelin disks.\n")
    served.harness.sweep()
    release = threading.Event()
    real = note_ops.read_inbox_note
    reads: list[str] = []

    def read_inbox_note(root: Any, name: str, *args: Any) -> Any:
        reads.append(name)
        release.wait(20)
        return real(root, name, *args)

    monkeypatch.setattr(note_ops, "read_inbox_note", read_inbox_note)
    try:
        with pytest.raises(RemoteError, match="no answer"):
            served.call("get", {"reference": "memory/plan"}, agent="ada")
        roots = {r["name"]: r for r in served.call("health", {})["roots"]}
        assert roots["memory/ada"]["mode"] == "offline", roots
        assert "still hangs" in roots["memory/ada"]["error"] and "plan" in roots["memory/ada"]["error"]
        with pytest.raises(RemoteError, match="still hangs"):
            served.call("get", {"reference": "memory/keep"}, agent="ada")
        assert reads == ["plan.md"]
    finally:
        release.set()


def test_a_call_given_up_on_early_is_judged_once_however_often_it_is_met(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read given up on before probeTimeoutSeconds (a get's anchors) is judged once that has
    passed: one timer per stuck call, however many requests meet it meanwhile."""
    import time

    started: list[Any] = []
    sup = Supervisor(
        make_cfg(vault, **{"watch.probeTimeoutSeconds": 60}), judge_after=lambda _s, fn: started.append(fn)
    )
    sup.status(Root("vault", vault, exclude="wiki"))
    release = threading.Event()
    stuck = threading.Thread(target=release.wait, args=(20,), daemon=True)
    stuck.start()
    try:
        for _ in range(5):
            sup.read_hangs("vault", "reading A.md", stuck, time.monotonic())
        assert len(started) == 1
        assert sup.roots["vault"].hanging is None  # a slow read is no hang yet
        started[0]()
        assert sup.roots["vault"].hanging is stuck
        sup.read_hangs("vault", "reading A.md", stuck, time.monotonic())
        assert len(started) == 1  # judged: no second timer
    finally:
        release.set()


def test_a_rebuilds_look_at_an_inbox_that_hangs_puts_its_notes_back(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebuild asks whether an agent's inbox is refused before it drops the notes it did
    not read back: a look that hangs marks the inbox hanging and puts them back (was: an
    unbounded look in the indexer's thread, then the notes judged by what it answered)."""
    from sidecar.index import putback
    from tests.conftest import FakeEmbedder, Harness, write

    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2}), FakeEmbedder())
    release = threading.Event()
    try:
        inbox = h.cfg.agents_dir / "ada" / "memory"
        write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
        write(inbox / "keep.md", "# Keep\n\nKeep the spare disks.\n")
        h.sweep()
        (inbox / "plan.md").unlink()
        real = putback.inbox_refusal

        def refusal(root: Any) -> str | None:
            release.wait(3)  # long past the probe timeout; short should the old code wait
            return real(root)

        monkeypatch.setattr(putback, "inbox_refusal", refusal)
        h.indexer.clear()
        h.sweep()
        assert "memory/ada/plan" in set(h.stores.manifest.file_states("memory/ada/"))
        assert h.supervisor.roots["memory/ada"].hanging is not None
    finally:
        release.set()
        h.close()


def test_a_change_of_an_inbox_marked_hanging_is_refused_at_once_and_changes_nothing(
    serve_in_process: Any,
) -> None:
    """ada's inbox is marked hanging (health: "still hangs"): her write, edit and delete are told
    at once that the inbox's share hangs, with nothing written (was: the change started its
    unbounded calls into the share on the request's thread, holding the note's lock as long as
    the share hung); once the call that hung answers, the write goes through."""
    from sidecar.contracts.errors import RemoteError
    from tests.conftest import write

    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    inbox = served.cfg.agents_dir / "ada" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the zeppelin disks.\n")
    served.harness.sweep()
    release = threading.Event()
    stuck = threading.Thread(target=release.wait, args=(20,), daemon=True)
    stuck.start()
    sup = served.harness.supervisor
    try:
        sup.read_hangs("memory/ada", "listing the inbox", stuck)
        roots = {r["name"]: r for r in served.call("health", {})["roots"]}
        assert "still hangs" in roots["memory/ada"]["error"], roots
        with pytest.raises(RemoteError, match=r"share hangs.*nothing written") as err:
            served.call("write", {"slug": "fresh", "content": "# Fresh\n\nnew\n"}, agent="ada")
        assert err.value.code == "storage"
        with pytest.raises(RemoteError, match=r"share hangs.*nothing written"):
            served.call("edit", {"slug": "plan", "content": "# Plan\n\nchanged\n"}, agent="ada")
        with pytest.raises(RemoteError, match=r"share hangs.*nothing deleted"):
            served.call("delete", {"slug": "plan"}, agent="ada")
        assert sorted(p.name for p in inbox.iterdir()) == ["plan.md"]
        assert (inbox / "plan.md").read_text() == "# Plan\n\nRotate the zeppelin disks.\n"
        assert "memory/ada/plan" in served.harness.stores.manifest.file_states("memory/ada/")
        release.set()
        stuck.join(5)
        served.call("write", {"slug": "fresh", "content": "# Fresh\n\nnew\n"}, agent="ada")
        assert (inbox / "fresh.md").exists()
    finally:
        release.set()


def test_an_inbox_not_yet_swept_whose_look_hangs_is_said_hanging_in_health(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """eve's inbox is written after the last sweep (no status of its own yet) and its share
    hangs: her list's look that does not answer marks it hanging, and health says so (was:
    read_hangs dropped a root it did not know, so health was silent and each later request
    met the stuck call without a word)."""
    from sidecar.memory import ops
    from tests.conftest import write

    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    served.harness.sweep()
    inbox = served.cfg.agents_dir / "eve" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate.\n")
    release = threading.Event()
    real_scandir = ops.os.scandir

    def scandir(path: Any = ".") -> Any:
        if not isinstance(path, int) and Path(path) == inbox:
            release.wait(5)
        return real_scandir(path)

    monkeypatch.setattr(ops.os, "scandir", scandir)
    try:
        served.call("list", {}, agent="eve")
        roots = {r["name"]: r for r in served.call("health", {})["roots"]}
        assert "memory/eve" in roots and "still hangs" in (roots["memory/eve"]["error"] or ""), roots
    finally:
        release.set()


def test_a_rebuild_on_a_hung_home_looks_at_one_inbox_and_puts_back_the_others(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The home's share starts hanging between a rebuild's reads and its put-back: the look at
    whether the first inbox is refused hangs, and the other inboxes in the agents folder are not
    asked, their notes put back (was: each inbox looked at in turn, each waiting its own probe
    timeout and leaving its own stuck thread in the indexer's thread)."""
    from sidecar.index import putback
    from tests.conftest import FakeEmbedder, Harness, write

    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2}), FakeEmbedder())
    release = threading.Event()
    looks: list[str] = []
    agents = ("ada", "bob", "cyd", "dee")
    try:
        for a in agents:
            inbox = h.cfg.agents_dir / a / "memory"
            write(inbox / "plan.md", "# Plan\n\nx\n")
            write(inbox / "keep.md", "# Keep\n\ny\n")
        h.sweep()
        for a in agents:  # not read back by the rebuild: its put-back asks whether it may go
            (h.cfg.agents_dir / a / "memory" / "plan.md").unlink()
        real = putback.inbox_refusal

        def refusal(root: Any) -> str | None:
            looks.append(root.name)
            release.wait(20)
            return real(root)

        monkeypatch.setattr(putback, "inbox_refusal", refusal)
        h.indexer.clear()
        h.sweep()
        assert len(looks) == 1, looks  # one hung home share: one wait, one stuck thread
        keys = set(h.stores.manifest.file_states("memory/"))
        assert {f"memory/{a}/plan" for a in agents} <= keys  # put back: no evidence they went
        assert {f"memory/{a}/keep" for a in agents} <= keys
    finally:
        release.set()
        h.close()


def test_a_daemon_whose_vault_hangs_at_start_says_so_and_its_watch_asks_nothing_more(
    make_cfg: Any, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real start (``Daemon.startup``: ``_look_at_vault``, then ``_start_work`` handing its
    stuck stat to the supervisor and building the watcher over it): the vault's stat hangs at
    start, health then says the vault still hangs, and the watch's stat of the vault is told so
    at once (no second call into the share)."""
    import tempfile

    from sidecar.contracts.protocol import Request
    from sidecar.daemon.lifecycle import Daemon
    from sidecar.daemon.process import IndexLock

    release = threading.Event()
    stats: list[str] = []
    real = os.stat

    def stat(p: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if not isinstance(p, int) and Path(p) == vault:
            stats.append(str(p))
            release.wait(20)
        return real(p, *args, **kwargs)

    with tempfile.TemporaryDirectory(dir="/tmp") as run:
        cfg = make_cfg(
            vault,
            **{
                "socket": str(Path(run) / "s.sock"),
                "embedder.enabled": False,
                "watch.probeTimeoutSeconds": 0.3,
            },
        )
        d = Daemon(cfg)
        lock = d._lock = IndexLock(cfg.index_dir)
        lock.acquire()
        monkeypatch.setattr(os, "stat", stat)
        try:
            d.startup()
            assert d.parts is not None and d.watcher is not None and d._dispatch is not None
            assert stats == [str(vault)]  # the start's look, still in its call
            health = d._dispatch.dispatch(Request("health", {}, agent="ops"))
            roots = {r["name"]: r for r in health["roots"]}
            assert "still hangs" in (roots["vault"]["error"] or ""), roots
            assert d.watcher._stat(vault) is None  # asked through the supervisor: told at once
            assert stats == [str(vault)]
        finally:
            release.set()
            d.shutdown()
            d.notifier.close()


def test_a_watch_whose_walk_of_the_vault_hangs_marks_it_hanging_and_keeps_the_inboxes_events(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk of the vault when a watch is set up, asked through the supervisor: a listing
    that does not answer marks the vault hanging (status names the listing), the vault is left
    out of the watch whole, and the inboxes' events still come (was: the watcher's one thread
    waited in the walk as long as the share hung, every inbox without events meanwhile)."""
    from tests.conftest import write

    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2})
    inbox = cfg.agents_dir / "ada" / "memory"
    inbox.mkdir(parents=True)
    sup = Supervisor(cfg)
    sup.status(Root("memory", inbox, agent="ada"))
    release = threading.Event()
    asked = hang_listing(monkeypatch, vault / "Projects", release)
    seen = threading.Event()

    def on_change(changed: set[str], _gone: frozenset[str]) -> None:
        if any(p.startswith(str(inbox)) for p in changed):
            seen.set()

    stop = threading.Event()
    watcher = Watcher(
        [vault, cfg.agents_dir], on_change, stop, 50, 0.2, stat=sup.watched_stat, walk=sup.watched_walk
    )
    runs = threading.Thread(target=watcher.run, daemon=True)
    runs.start()
    try:
        for i in range(100):  # written until one is told: the watch is set up at a moment unknown
            write(inbox / f"note{i}.md", "# Note\n\nsaved\n")
            if seen.wait(0.2):
                break
        assert seen.is_set()
        assert watcher.watching == [cfg.agents_dir]
        roots = {r["name"]: r for r in sup.describe(lambda _p: True)}
        assert roots["vault"]["mode"] == "offline", roots
        error = roots["vault"]["error"] or ""
        assert "listing Projects" in error and "still hangs" in error, roots
        assert len(asked) == 1, asked  # one thread into the share, not one per try
    finally:
        stop.set()
        release.set()
        runs.join(10)
    assert sup.roots["vault"].hanging is None  # it answered: asked again at the next watch


def test_a_watchers_own_walk_that_hangs_leaves_the_folder_out_and_asks_it_again_once_it_answers(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the daemon's supervisor the watcher bounds its walk itself: the folder whose
    walk hangs is left out (the others walked whole), the next try is told at once while the
    first is still in its call, and the watch is set up again once it answers."""
    other = vault.parent / "other"
    (other / "sub").mkdir(parents=True)
    release = threading.Event()
    asked = hang_listing(monkeypatch, vault / "Recipes", release)
    watcher = Watcher([vault, other], lambda *_: None, threading.Event(), 50, 0.2)
    try:
        walked, answered, _linked = watcher._walked([vault, other])
        assert answered == [other] and walked == [other, other / "sub"]
        assert watcher._walked([vault, other])[1] == [other]  # told at once
        assert len(asked) == 1, asked
        assert not watcher._walk_answered()
    finally:
        release.set()
    watcher._walk_stuck[vault].join(10)
    assert watcher._walk_answered()
    assert watcher._walked([vault, other])[1] == [vault, other]


def test_a_memory_write_whose_look_at_the_inbox_hangs_is_refused_and_marks_the_inbox(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write's look at an inbox not yet marked hanging (is it a private folder? is there
    room?) that does not answer: the write is refused (`storage`, "did not answer", nothing
    written) after probeTimeoutSeconds, the inbox is marked hanging, the next write and a delete
    are told at once with no second call into the share, and once the look answers a write goes
    through (was: the write's request thread waited as long as the share hung)."""
    from sidecar.contracts.errors import RemoteError
    from sidecar.memory import inbox_notes
    from tests.conftest import write

    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    inbox = served.cfg.agents_dir / "ada" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the zeppelin disks.\n")
    served.harness.sweep()
    release = threading.Event()
    looks: list[Any] = []
    real = inbox_notes.private_dirs

    def private_dirs(*args: Any, **kwargs: Any) -> Any:
        if not release.is_set():
            looks.append(threading.current_thread())
            release.wait(20)
        return real(*args, **kwargs)

    monkeypatch.setattr(inbox_notes, "private_dirs", private_dirs)
    try:
        refused = r"not written: the inbox .* did not answer.*nothing written"
        with pytest.raises(RemoteError, match=refused) as err:
            served.call("write", {"slug": "fresh", "content": "# Fresh\n\nnew\n"}, agent="ada")
        assert err.value.code == "storage"
        roots = {r["name"]: r for r in served.call("health", {})["roots"]}
        assert "still hangs" in roots["memory/ada"]["error"], roots
        with pytest.raises(RemoteError, match=r"share hangs.*nothing written"):
            served.call("write", {"slug": "fresh", "content": "# Fresh\n\nnew\n"}, agent="ada")
        with pytest.raises(RemoteError, match=r"share hangs.*nothing deleted"):
            served.call("delete", {"slug": "plan"}, agent="ada")
        assert len(looks) == 1  # one thread into the share
        assert sorted(p.name for p in inbox.iterdir()) == ["plan.md"]
    finally:
        release.set()
    looks[0].join(10)
    served.call("write", {"slug": "fresh", "content": "# Fresh\n\nnew\n"}, agent="ada")
    assert (inbox / "fresh.md").exists()


def test_a_list_whose_look_at_a_skipped_vault_note_hangs_answers_and_marks_the_vault(
    serve_in_process: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A list of the vault names its notes left out by the scans (too large) with their times,
    looked up on the share: a look-up that does not answer marks the vault hanging and the list
    answers from the index without that note, the next list told at once (was: the request
    thread waited in the look-up as long as the share hung, nothing said)."""
    from tests.conftest import write

    write(vault / "Huge.md", "# Huge\n\n" + "words and more words\n" * 200)
    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3, "index.maxFileBytes": 2000})
    listed = served.call("list", {"source": "vault"}, agent="ada")
    assert "vault/Huge" in {n["reference"] for n in listed["notes"]}
    release = threading.Event()
    huge = vault / "Huge.md"
    looks: list[Path] = []
    real = Path.lstat

    def lstat(self: Path) -> os.stat_result:
        if self == huge:
            looks.append(self)
            release.wait(20)
        return real(self)

    monkeypatch.setattr(Path, "lstat", lstat)
    try:
        listed = served.call("list", {"source": "vault"}, agent="ada")
        assert "vault/Garden" in {n["reference"] for n in listed["notes"]}
        assert "vault/Huge" not in {n["reference"] for n in listed["notes"]}
        roots = {r["name"]: r for r in served.call("health", {})["roots"]}
        assert "still hangs" in (roots["vault"]["error"] or ""), roots
        served.call("list", {"source": "vault"}, agent="ada")
        assert looks == [huge]  # told at once: one thread into the share
    finally:
        release.set()


def test_the_watchs_walk_of_a_vault_learnt_slow_waits_as_its_scans_do(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vault learnt slow (a listing took longer than probeTimeoutSeconds but answered): the
    watch's walk waits for each call as the vault's scans do, so a listing that answers late
    is walked, not left out of the watch and walked again each time it answered (each retry
    a sweep of every root), and nothing is marked."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2, "watch.scanTimeoutSeconds": 60})
    sup = Supervisor(cfg)
    st = sup.status(Root("vault", vault, exclude="wiki"))
    st.slow = True
    # The supervisor's clock and the bounded work's (``run_with_timeout``, whose waiter judges
    # each call), injected: the listing of Projects answers once the walk's waiter has looked at
    # it 5 s (by that clock) after the listing began, past probeTimeoutSeconds.
    from sidecar.vault import supervisor_base as supervisor_module
    from sidecar.vault import timeout as timeout_module

    ahead = [0.0]
    looked_late = threading.Event()

    class Clock:
        def __getattr__(self, name: str) -> Any:
            return getattr(time, name)

        def monotonic(self) -> float:
            if ahead[0]:
                looked_late.set()
            return time.monotonic() + ahead[0]

    monkeypatch.setattr(supervisor_module, "time", Clock())
    monkeypatch.setattr(timeout_module, "time", Clock())
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path) == vault / "Projects":
            ahead[0] = 5.0
            assert looked_late.wait(20)  # the waiter saw the call 5 s old and waited on
            ahead[0] = 0.0
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    watcher = Watcher([vault], lambda *_: None, threading.Event(), 50, 0.2, walk=sup.watched_walk)
    walked, answered, _linked = watcher._walked([vault])
    assert answered == [vault] and vault / "Projects" in walked
    assert st.hanging is None and st.slow
