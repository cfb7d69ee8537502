"""Shares that are emptied, unmounted, replaced or partly unreadable keep their notes; mass
deletions wait for wall-clock time or the user; file events touch only their paths; vectors of
deleted chunks come back without the model; a nested wiki keeps its sibling folders."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import RemoteError
from sidecar.daemon import note_ops
from sidecar.vault import note_text, supervisor_base
from sidecar.vault import sources as sources_mod
from sidecar.vault import supervisor as supervisor_mod
from sidecar.vault.supervisor import Identity
from tests.conftest import FakeEmbedder, Harness, make_vault, write
from tests.index_helpers import search
from tests.share_hangs import hang_listing


def _counts(h: Harness) -> tuple[int, int, int]:
    assert h.stores.vectors is not None
    return h.stores.manifest.chunk_count(), h.stores.bm25.num_docs(), h.stores.vectors.count()


def _notes(vault: Path, n: int, folder: str = "Notes") -> list[Path]:
    return [
        write(vault / folder / f"n{i}.md", f"# Note {i}\n\nThe keeper of lighthouse {i} logs storm {i}.\n")
        for i in range(n)
    ]


def _emptied_is_held(h: Harness, folder: Path, indexed: int) -> None:
    """Empty ``folder`` (the vault's notes), sweep: the vault is held as empty, its notes kept."""
    for p in folder.glob("*.md"):
        p.unlink()
    h.sweep()
    assert h.supervisor.roots["vault"].hold_kind == "empty"
    assert len(h.stores.manifest.file_states("vault/")) == indexed


@pytest.fixture
def big(make_cfg: Any, vault: Path) -> Any:
    _notes(vault, 10)
    h = Harness(make_cfg(vault), FakeEmbedder())
    h.sweep()
    yield h
    h.close()


def test_mass_deletion_waits_for_the_clock_not_for_sweeps(big: Harness, vault: Path) -> None:
    """Most notes gone on the same mount: held through many sweeps; applied once the hold
    (real time, default hours) has passed; the status says which, since when and the command."""
    now = [1_000_000.0]
    sup = big.supervisor
    sup.clock = sup.hold_clock = lambda: now[0]
    before = _counts(big)
    for p in list((vault / "Notes").glob("*.md"))[:9]:
        p.unlink()
    for _ in range(10):
        big.sweep()
        now[0] += 30
    assert _counts(big) == before
    st = sup.roots["vault"]
    assert st.offline and st.hold_kind == "mass" and st.hold_since == 1_000_000.0
    (root,) = [r for r in sup.describe(lambda _p: True) if r["name"] == "vault"]
    assert root["mode"] == "held"  # the folder is there and followed: not "offline ... check it is mounted"
    assert root["hold"]["confirm"] == "sidecar index --confirm-deletions vault"
    assert root["hold"]["applies_at"] == 1_000_000.0 + 360 * 60
    assert "--confirm-deletions vault" in root["error"]
    now[0] = 1_000_000.0 + 360 * 60 + 1
    big.sweep()
    assert _counts(big)[0] < before[0]
    assert not sup.roots["vault"].offline


def test_hold_survives_a_restart(make_cfg: Any, vault: Path) -> None:
    """The hold's start is kept in the manifest: a restart does not restart (or skip) the clock."""
    _notes(vault, 10)
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    for p in list((vault / "Notes").glob("*.md"))[:9]:
        p.unlink()
    h.supervisor.clock = h.supervisor.hold_clock = lambda: 5_000.0
    h.sweep()
    h.close()
    h = Harness(cfg, FakeEmbedder())
    try:
        h.supervisor.clock = h.supervisor.hold_clock = lambda: 5_000.0 + 3600
        h.sweep()
        assert h.supervisor.roots["vault"].hold_since == 5_000.0
        before = h.stores.manifest.chunk_count()
        h.supervisor.clock = h.supervisor.hold_clock = lambda: 5_000.0 + 361 * 60
        h.sweep()
        assert h.stores.manifest.chunk_count() < before
    finally:
        h.close()


def test_a_vault_path_changed_in_the_configuration_is_not_a_lost_share(
    make_cfg: Any, vault: Path, tmp_path: Path
) -> None:
    """The configuration names another vault folder: the old one's notes leave at the next start
    (they were held for hours as "lost 21 of 21 notes at once: check it is mounted"); the same
    folder empty stays held as before."""
    _notes(vault, 10)
    h = Harness(make_cfg(vault), FakeEmbedder())
    h.sweep()
    h.close()
    other = tmp_path / "other-vault"
    _notes(other, 5, folder="Elsewhere")
    h = Harness(make_cfg(other), FakeEmbedder())
    try:
        h.sweep()
        keys = set(h.stores.manifest.file_states("vault/"))
        assert keys == {f"vault/Elsewhere/n{i}" for i in range(5)}
        assert not h.supervisor.roots["vault"].offline
        _emptied_is_held(h, other / "Elsewhere", 5)  # and the new folder is guarded as any root
    finally:
        h.close()


def test_a_vault_spelled_through_a_symlink_is_not_a_changed_vault(make_cfg: Any, tmp_path: Path) -> None:
    """The vault's path remembered as its symlink (the share answered slowly at a start, so the
    path was kept as written) and then found empty (unmounted at the next boot): the same folder,
    so its notes are held, not deleted as those of a folder the configuration left."""
    import json

    real = tmp_path / "nas" / "Vault"
    _notes(real, 10)
    link = tmp_path / "Vault"
    link.symlink_to(real)
    h = Harness(make_cfg(link), FakeEmbedder())
    try:
        h.sweep()
        memo = json.loads(h.stores.manifest.get_meta("root:vault") or "{}")
        h.stores.manifest.set_meta("root:vault", json.dumps({**memo, "path": str(link)}))
        _emptied_is_held(h, real / "Notes", 10)
    finally:
        h.close()


def test_unmounted_share_holds_even_with_notes_in_the_mount_point(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root that was a mount point and is not (or is on another device) stays offline while
    it stays so, whatever lies in the folder, and the clock never applies it."""
    real = supervisor_base.identity_of
    state = {"mount": True, "dev": 77}
    monkeypatch.setattr(
        supervisor_base,
        "identity_of",
        lambda p, *a: Identity(state["mount"], state["dev"]) if Path(p) == vault else real(p, *a),
    )
    big.sweep()  # remembered: a mount point of its own on device 77
    before = _counts(big)
    now = [1e6]
    big.supervisor.clock = big.supervisor.hold_clock = lambda: now[0]
    hidden = vault.parent / "hidden"
    os.mkdir(hidden)
    for p in vault.iterdir():
        if p.name != "wiki":
            p.rename(hidden / p.name)
    write(vault / "Stray.md", "# Stray\n\nA half-synced note in the bare mount point.\n")
    state["mount"] = False
    for _ in range(3):
        big.sweep()
        now[0] += 86400
    assert _counts(big) == before
    st = big.supervisor.roots["vault"]
    assert st.offline and st.hold_kind == "unmounted" and "mount it was on" in (st.error or "")
    # Mounting again first: the bare command that applies the deletions, beside a share that is
    # merely away, read as the way to clear the problem (and would empty the index of it). It is
    # named for a vault that lives here for good (else held for ever with no way out shown).
    error = st.error or ""
    assert "mount it again" in error
    assert "if its notes live on this disk from now on: `sidecar index --confirm-deletions vault`" in error
    assert (
        big.stores.manifest.file_states_of(["vault/Stray"]) == {}
    )  # the mount point's content is not indexed
    state.update(mount=True, dev=78)  # another share mounted there
    big.sweep()
    assert big.supervisor.roots["vault"].hold_kind == "device"
    assert "from now on: `sidecar index --confirm-deletions vault`" in (
        big.supervisor.roots["vault"].error or ""
    )
    assert _counts(big) == before
    (vault / "Stray.md").unlink()
    for p in hidden.iterdir():
        p.rename(vault / p.name)
    big.sweep()  # the share is back (its new device is adopted: nothing is missing)
    assert not big.supervisor.roots["vault"].offline
    assert _counts(big) == before


def test_a_stale_copy_under_an_unmounted_share_is_not_the_share(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vault folder below a share's mount point (not a mount point itself): when the share
    goes, the same path shows the disk's old copy under the mount point, with a few notes
    missing and stale ones of its own. It lies on another mount now: held offline, nothing of
    the copy indexed, nothing deleted (was: the missing notes deleted, the stale ones indexed)."""
    real = supervisor_base.identity_of
    state = {"under": "/mnt/nas", "dev": 77}
    monkeypatch.setattr(
        supervisor_base,
        "identity_of",
        lambda p, *a: Identity(False, state["dev"], state["under"]) if Path(p) == vault else real(p, *a),
    )
    big.sweep()  # remembered: on the mount point /mnt/nas
    before = _counts(big)
    for p in list((vault / "Notes").glob("*.md"))[:2]:
        p.unlink()  # the old copy lacks two notes ...
    write(vault / "Stale only.md", "# Stale\n\nA note only the old copy has.\n")  # ... and has one
    state.update(under="/", dev=2049)
    big.sweep()
    st = big.supervisor.roots["vault"]
    assert st.offline and st.hold_kind == "unmounted" and "mount it was on" in (st.error or "")
    assert _counts(big) == before and big.stores.manifest.file_states_of(["vault/Stale only"]) == {}
    state.update(under="/mnt/nas", dev=78)  # the share is back (a new device number, same mount)
    (vault / "Stale only.md").unlink()
    _notes(vault, 10)
    big.sweep()
    assert not big.supervisor.roots["vault"].offline and _counts(big) == before


def test_unreadable_folder_keeps_its_notes(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder that cannot be listed (permission denied, I/O error) keeps its notes in the
    index; the problem is shown, and clears when it is readable again."""
    real = os.scandir
    bad = vault / "Notes"

    def scandir(path: Any) -> Any:
        if Path(path) == bad:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    before = _counts(big)
    monkeypatch.setattr(sources_mod.os, "scandir", scandir)
    big.sweep()
    assert _counts(big) == before
    assert not big.supervisor.roots["vault"].offline
    problem = big.stores.problems.active_in("unreadable")
    # The cause with the folder: the line named the folder, never why it could not be read.
    assert problem is not None and f"{bad}: Permission denied" in problem["error"]
    monkeypatch.setattr(sources_mod.os, "scandir", real)
    big.sweep()
    assert big.stores.problems.active_in("unreadable") is None
    assert _counts(big) == before


def test_a_path_longer_than_the_system_allows_is_skipped_not_unreadable(big: Harness, vault: Path) -> None:
    """A folder chain past PATH_MAX (ENAMETOOLONG) is no passing fault of a share: counted as
    `path too long`, no `unreadable` problem (it was one for ever, without a reason)."""
    fd = os.open(vault, os.O_RDONLY | os.O_DIRECTORY)
    try:  # made by relative steps: the whole path is too long for any one call
        for _ in range(24):
            name = "d" * 200
            os.mkdir(name, dir_fd=fd)
            deeper = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        os.close(os.open("Deep.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)
    before = _counts(big)
    big.sweep()
    assert big.indexer.activity.scan_skipped.get("path too long") == 1
    assert big.stores.problems.active_in("unreadable") is None
    assert _counts(big) == before


def test_a_folder_renamed_past_the_path_limit_is_named_once_in_a_problem(make_cfg: Any, vault: Path) -> None:
    """A folder renamed longer so that its notes' paths pass PATH_MAX: its notes leave the index
    (their calls fail with ENAMETOOLONG) and one PROBLEM line names the folder, not each note; it
    goes once the folder is named shorter again. Only a `path too long` skip count said why notes
    vanished from search."""
    limit = os.pathconf(vault, "PC_PATH_MAX") - 1  # the longest path a call takes (no NUL)
    h = Harness(make_cfg(vault), FakeEmbedder())
    fd = os.open(vault, os.O_RDONLY | os.O_DIRECTORY)
    try:  # made by relative steps; the deepest folder's path ends 20 characters below the limit
        path = str(vault)
        while (room := limit - 20 - len(path) - 1) > 0:
            name = "d" * min(200, room)
            os.mkdir(name, dir_fd=fd)
            deeper = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd, path = deeper, f"{path}/{name}"
        for i in range(3):  # "/n0.md": 6 characters, within the limit
            note = os.open(f"n{i}.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
            os.write(note, f"# Deep {i}\n\nThe abyssal note {i}.\n".encode())
            os.close(note)
    finally:
        os.close(fd)
    try:
        h.sweep()
        assert (
            len([k for k in h.stores.manifest.file_states("vault/") if k.endswith(("/n0", "/n1", "/n2"))])
            == 3
        )
        top = vault / ("d" * 200)
        longer = vault / ("d" * 200 + "-" + "x" * 16)  # 17 more: the folder within, its notes past it
        top.rename(longer)
        h.sweep()
        assert not [k for k in h.stores.manifest.file_states("vault/") if k.endswith(("/n0", "/n1", "/n2"))]
        assert h.indexer.activity.scan_skipped.get("path too long") == 3  # the three notes
        problem = h.stores.problems.active_in("path_too_long")
        assert problem is not None and "1 folder(s) may hold notes whose paths are longer" in problem["error"]
        assert "n0.md" not in problem["error"] and path[-40:] in problem["error"]
        assert h.stores.problems.active_in("unreadable") is None
        longer.rename(top)
        h.sweep()
        assert h.stores.problems.active_in("path_too_long") is None
    finally:
        h.close()


class _DeadEntry:
    """A listed folder entry whose stat fails as a dead share mounted there fails (ENOTCONN);
    the listing's own file type still says it is a folder."""

    def __init__(self, entry: os.DirEntry[str]) -> None:
        self.name, self.path = entry.name, entry.path

    def is_symlink(self) -> bool:
        return False

    def is_dir(self, follow_symlinks: bool = True) -> bool:
        return True

    def stat(self, follow_symlinks: bool = True) -> os.stat_result:
        raise OSError(107, "Transport endpoint is not connected", self.path)


class _Listing:
    """What os.scandir returns: an iterator and a context manager."""

    def __init__(self, entries: list[Any]) -> None:
        self._it = iter(entries)

    def __iter__(self) -> _Listing:
        return self

    def __next__(self) -> Any:
        return next(self._it)

    def __enter__(self) -> _Listing:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def test_folder_that_fails_a_stat_keeps_its_notes(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder listed by its parent but failing a stat (a dead share mounted below the root, no
    search permission on the parent) keeps its notes: they are unreadable now, not gone (they
    were deleted as missing)."""
    real = os.scandir

    def scandir(path: Any) -> Any:
        if Path(path) != vault:
            return real(path)
        with real(path) as it:
            return _Listing([_DeadEntry(e) if e.name == "Projects" else e for e in it])

    before = _counts(big)
    monkeypatch.setattr(sources_mod.os, "scandir", scandir)
    big.sweep()
    assert _counts(big) == before and big.stores.manifest.chunk_ids("vault/Projects/Boat")
    problem = big.stores.problems.active_in("unreadable")
    assert (
        problem is not None
        and f"{vault / 'Projects'}: Transport endpoint is not connected" in problem["error"]
    )
    monkeypatch.setattr(sources_mod.os, "scandir", real)
    big.sweep()
    assert big.stores.problems.active_in("unreadable") is None and _counts(big) == before


def test_unreadable_note_keeps_its_chunks(big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed note that cannot be read (I/O error) keeps what was indexed."""
    target = vault / "Notes" / "n3.md"
    real_open = Path.open

    def fake_open(self: Path, *a: Any, **kw: Any) -> Any:
        if self == target:
            raise OSError(5, "Input/output error")
        return real_open(self, *a, **kw)

    before = big.stores.manifest.chunk_ids("vault/Notes/n3")
    os.utime(target, ns=(1, 1))
    monkeypatch.setattr(Path, "open", fake_open)
    big.sweep()
    assert big.stores.manifest.chunk_ids("vault/Notes/n3") == before != set()


def test_deleted_vectors_come_back_without_the_model(big: Harness, vault: Path) -> None:
    """Notes deleted (confirmed) and restored are not embedded again: their vectors were kept by
    text; `reused` counts them, `embedded` does not move."""
    model = big.slot.model
    assert isinstance(model, FakeEmbedder)
    saved = {p: p.read_bytes() for p in (vault / "Notes").glob("*.md")}
    for p in saved:
        p.unlink()
    big.indexer.sweep(confirm_deletions={"vault"})
    assert big.stores.manifest.kept_count() >= len(saved)
    embedded, reused = big.vectors.embedded, big.vectors.reused
    model.embedded.clear()
    for p, data in saved.items():
        p.write_bytes(data)
    big.sweep()
    assert model.embedded == []
    assert big.vectors.embedded == embedded
    assert big.vectors.reused >= reused + len(saved)
    chunks, docs, vectors = _counts(big)
    assert chunks == docs == vectors


def test_kept_vectors_are_bounded(make_cfg: Any, vault: Path) -> None:
    """At most keepDeletedVectorsMax vectors are kept (the newest)."""
    _notes(vault, 10)
    h = Harness(make_cfg(vault, **{"index.keepDeletedVectorsMax": 3}), FakeEmbedder())
    try:
        h.sweep()
        for p in (vault / "Notes").glob("*.md"):
            p.unlink()
        h.indexer.sweep(confirm_deletions={"vault"})
        assert h.stores.manifest.kept_count() == 3
    finally:
        h.close()


def test_a_memory_write_never_walks_the_vault(big: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    """Event paths are looked at one by one: a changed memory note does not list or stat any
    other root; a new vault note is indexed from its own path."""
    cfg = big.cfg
    inbox = cfg.agents_dir / "ops" / "memory"
    note = write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
    touched: list[str] = []
    real_scandir, real_lstat, real_stat = os.scandir, os.lstat, os.stat
    vault = str(cfg.vault.path)

    def spy(real: Any) -> Any:
        def inner(path: Any, *a: Any, **kw: Any) -> Any:
            if str(path).startswith(vault):
                touched.append(str(path))
            return real(path, *a, **kw)

        return inner

    monkeypatch.setattr(os, "scandir", spy(real_scandir))
    monkeypatch.setattr(os, "lstat", spy(real_lstat))
    monkeypatch.setattr(os, "stat", spy(real_stat))
    big.indexer.sweep(only=frozenset(), paths={str(note)})
    assert big.stores.manifest.file_states_of(["memory/ops/plan"])
    assert touched == []
    new = write(Path(vault) / "Fresh" / "Idea.md", "# Idea\n\nA windmill on the roof.\n")
    big.indexer.sweep(only=frozenset(), paths={str(new.parent)})
    assert big.stores.manifest.file_states_of(["vault/Fresh/Idea"])
    assert not any(t.endswith("/Notes") for t in touched)  # its siblings were not walked


def test_event_deletions_beyond_a_few_go_through_the_guard(big: Harness, vault: Path) -> None:
    """One deleted note seen by an event is removed at once; a burst of deletions (an emptied
    mount point sends one event per file) is handed to a full sweep and held."""
    one = vault / "Garden.md"
    one.unlink()
    big.indexer.sweep(only=frozenset(), paths={str(one)})
    assert big.stores.manifest.file_states_of(["vault/Garden"]) == {}
    before = _counts(big)
    gone = sorted((vault / "Notes").glob("*.md"))
    for p in gone:
        p.unlink()
    for p in vault.rglob("*.md"):
        if "wiki" not in p.parts and not any(x.startswith(".") for x in p.relative_to(vault).parts):
            p.unlink()
    big.indexer.sweep(only=frozenset(), paths={str(p) for p in gone})
    assert _counts(big) == before
    assert big.supervisor.roots["vault"].offline


def test_nested_wiki_keeps_its_siblings(make_cfg: Any, tmp_path: Path) -> None:
    """wikiSubfolder Areas/wiki: the wiki is its own source, Areas/projects stays in the vault."""
    v = tmp_path / "nested"
    write(v / "Areas/wiki/Backups.md", "# Backups\n\nrestic every night.\n")
    write(v / "Areas/projects/Boat.md", "# Boat\n\nnew spark plugs.\n")
    write(v / "Top.md", "# Top\n\nfirst page.\n")
    h = Harness(make_cfg(v, **{"vault.wikiSubfolder": "Areas/wiki"}), FakeEmbedder())
    try:
        h.sweep()
        keys = set(h.stores.manifest.file_states())
        assert keys == {"wiki/Backups", "vault/Areas/projects/Boat", "vault/Top"}
        write(v / "Areas/projects/Kayak.md", "# Kayak\n\npaddle.\n")
        write(v / "Areas/wiki/Kayaks.md", "# Kayaks\n\nwiki page.\n")
        h.indexer.sweep(
            only=frozenset(), paths={str(v / "Areas/projects/Kayak.md"), str(v / "Areas/wiki/Kayaks.md")}
        )
        assert {"vault/Areas/projects/Kayak", "wiki/Kayaks"} <= set(h.stores.manifest.file_states())
    finally:
        h.close()


def test_a_small_wiki_survives_its_vault_emptied_in_place(big: Harness, vault: Path) -> None:
    """The wiki (one note, below the mass-deletion minimum) of a vault whose mount point was
    emptied is unreachable with it, not an empty folder whose notes were deleted."""
    import shutil

    before = _counts(big)
    for p in list(vault.iterdir()):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    for _ in range(3):
        big.sweep()
    assert _counts(big) == before
    assert big.supervisor.roots["wiki"].offline
    assert big.stores.manifest.file_states_of(["wiki/Backups"])


def test_a_folder_holding_a_whole_root_sweeps_that_root(big: Harness, tmp_path: Path) -> None:
    """An agent's folder moved in whole arrives as one event for the folder: its inbox is swept."""
    staged = write(tmp_path / "staged" / "newbie" / "memory" / "hello.md", "# Hello\n\nfirst words\n")
    target = big.cfg.agents_dir / "newbie"
    big.cfg.agents_dir.mkdir(parents=True, exist_ok=True)
    staged.parent.parent.rename(target)
    big.indexer.sweep(only=frozenset(), paths={str(target)})
    assert big.stores.manifest.file_states_of(["memory/newbie/hello"])


def test_get_on_a_hung_share_answers_and_keeps_the_daemon_answering(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note read that hangs (a hard NFS mount, a FUSE share that stopped answering, before a
    sweep has seen it) costs one probe timeout and then fails at once while it still hangs: each
    such request held a worker thread for as long as the share did, and a few of them stopped the
    daemon answering anything. Other roots, search and the note itself once the share answers
    again are unaffected."""
    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    release = threading.Event()
    real = note_ops.read_note

    def hanging(path: Path, *args: Any) -> Any:
        release.wait(30)
        return real(path, *args)

    monkeypatch.setattr(note_ops, "read_note", hanging)
    started = time.monotonic()
    with pytest.raises(RemoteError, match=r"no answer within 0.3 s.*still found by search"):
        served.call("get", {"reference": "vault/Projects/Boat"})
    for _ in range(20):  # more requests than the read lane has workers, answered at once
        with pytest.raises(RemoteError, match="still hangs"):
            served.call("get", {"reference": "vault/Kayak"})
    assert time.monotonic() - started < 10
    assert served.call("search", {"query": "kayak paddle"})["hits"]
    why = served.call("why", {"reference": "vault/Absent", "query": "nothing of it"})
    assert "cannot be looked at now" in str(why)
    with pytest.raises(RemoteError, match="still hangs"):
        served.call("related", {"reference": "vault/Absent"})
    release.set()
    time.sleep(0.2)
    assert "spark plugs" in served.call("get", {"reference": "vault/Projects/Boat"})["text"]


def test_a_get_whose_read_hangs_marks_its_root_hanging(
    serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note read for a request that does not answer within probeTimeoutSeconds marks its root
    hanging by the same rule as a sweep's or a probe's call: health says it is offline while the
    read hangs (was: the get said "no answer" while health's roots said the vault was fine)."""
    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.3})
    release = threading.Event()
    real = note_ops.read_note

    def hanging(path: Path, *args: Any) -> Any:
        release.wait(30)
        return real(path, *args)

    monkeypatch.setattr(note_ops, "read_note", hanging)
    try:
        with pytest.raises(RemoteError, match="no answer"):
            served.call("get", {"reference": "vault/Projects/Boat"})
        roots = {r["name"]: r for r in served.call("health", {})["roots"]}
        assert roots["vault"]["mode"] == "offline" and "still hangs" in roots["vault"]["error"], roots
    finally:
        release.set()


def test_a_get_on_a_root_a_probe_found_hanging_is_told_at_once(
    serve_in_process: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vault marked hanging by a look at its folder (whether an event's deletions may go
    ahead): a get of one of its notes is told at once that a call on it still hangs, with no
    read of its own started into the hung share (was: a second stuck thread, and "no answer
    within 0 s" after a probe timeout's wait)."""
    from sidecar.vault.sources import Root

    served = serve_in_process(**{"watch.probeTimeoutSeconds": 0.5})
    sup = served.harness.supervisor
    release = threading.Event()
    real_scandir = supervisor_mod.os.scandir
    real_read = note_ops.read_note

    def scandir(path: Any = ".") -> Any:
        if Path(path) == vault:
            release.wait(20)
        return real_scandir(path)

    def hanging_read(path: Path, *args: Any) -> Any:
        release.wait(20)
        return real_read(path, *args)

    monkeypatch.setattr(supervisor_mod.os, "scandir", scandir)
    monkeypatch.setattr(note_ops, "read_note", hanging_read)
    before = set(threading.enumerate())
    try:
        assert sup.deletable(Root("vault", vault, exclude="wiki")) is False
        assert sup.roots["vault"].hanging is not None
        with pytest.raises(RemoteError, match="still hangs"):
            served.call("get", {"reference": "vault/Projects/Boat"})
        alive = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
        assert len([a for a in alive if a.startswith("probe-")]) == 1, alive
    finally:
        release.set()


def test_a_wiki_folder_that_is_not_there_is_named_in_status(make_cfg: Any, vault: Path) -> None:
    """A wiki folder missing from a reachable vault (a misspelled wikiSubfolder) is shown as
    absent, not as a healthy root with no word (its notes simply count as vault notes)."""
    h = Harness(make_cfg(vault, **{"vault.wikiSubfolder": "Wikki"}), FakeEmbedder())
    try:
        h.sweep()
        roots = {r["name"]: r for r in h.supervisor.describe(lambda _p: True)}
        assert roots["wiki"]["absent"] is True and roots["vault"]["absent"] is False
    finally:
        h.close()


def test_a_note_grown_too_large_through_an_event_leaves_and_is_counted(make_cfg: Any, vault: Path) -> None:
    """A note that grows past index.maxFileBytes, seen by a file event: its old text leaves the
    index and it is counted and named as skipped at once (both waited for the next full sweep,
    up to ten minutes, while search kept finding text the file no longer held)."""
    note = write(vault / "grow.md", "# Grow\n\nxylofirst marks the first version.\n")
    h = Harness(make_cfg(vault, **{"index.maxFileBytes": 2000}), FakeEmbedder())
    try:
        h.sweep()
        assert "vault/grow" in h.stores.manifest.file_states("vault/")
        note.write_text("# Grow\n\nxylosecond\n" + "x" * 3000)
        h.indexer.sweep(only=frozenset(), paths={str(note)})
        assert "vault/grow" not in h.stores.manifest.file_states("vault/")
        assert h.indexer.activity.scan_skipped == {"too large": 1}
        note.write_text("# Grow\n\nsmall again\n")
        h.indexer.sweep(only=frozenset(), paths={str(note)})
        assert "vault/grow" in h.stores.manifest.file_states("vault/")
        assert h.indexer.activity.scan_skipped == {}
    finally:
        h.close()


def _memory_keys(server: Any) -> list[str]:
    return sorted(server.harness.stores.manifest.file_states("memory/"))


def _health(server: Any) -> dict[str, Any]:
    return server.call("health")


def test_memory_writes_refuse_an_agents_folder_that_is_gone_or_replaced(in_process: Any) -> None:
    """The home's agents folder on a share that goes away (unmounted: the path is missing, or is
    the bare mount point, another folder): a memory write is refused (`storage`) and makes nothing
    there, the inboxes are offline roots (nothing deleted from the index, nothing of the other
    folder indexed) and status says why; once the folder is back, writes and sweeps go on. Was:
    `created`, written into a fresh agents/<agent>/memory/ made on the mount point (hidden when
    the share came back), and every agent's notes deleted from the index."""
    cfg = in_process.cfg
    for slug in ("m1", "m2", "m3"):
        in_process.call("write", {"slug": slug, "content": f"frank memory {slug}"}, agent="frank")
    in_process.call("write", {"slug": "b1", "content": "bob memory"}, agent="bob")
    before = _memory_keys(in_process)
    assert len(before) == 4
    away = cfg.home / "agents.away"
    cfg.agents_dir.rename(away)  # the share goes: its mount point's path leads nowhere

    for op, params in (
        ("write", {"slug": "whilegone", "content": "written while gone"}),
        ("write", {"slug": "m1", "content": "replaced while gone"}),
        ("delete", {"slug": "m2"}),
    ):
        with pytest.raises(RemoteError) as refused:
            in_process.call(op, params, agent="frank")
        assert refused.value.code == "storage" and "agents folder" in str(refused.value), op
    assert not cfg.agents_dir.exists()  # nothing made where the share was
    in_process.harness.sweep()
    assert _memory_keys(in_process) == before
    health = _health(in_process)
    inboxes = [r for r in health["roots"] if r["name"].startswith("memory/")]
    assert {r["name"] for r in inboxes} == {"memory/frank", "memory/bob"}
    assert all(r["mode"] == "offline" and "agents folder" in r["error"] for r in inboxes)
    home = [p for p in health["problems"]["active"] if p["area"] == "home"]
    assert home and "no memory note is deleted" in home[0]["error"]

    # Another folder at the path (the bare mount point, with a stale inbox of its own).
    write(cfg.agents_dir / "frank" / "memory" / "stale.md", "a stale note under the mount point\n")
    with pytest.raises(RemoteError) as refused:
        in_process.call("write", {"slug": "whilegone", "content": "x"}, agent="frank")
    assert refused.value.code == "storage" and "not the folder sidecar kept" in str(refused.value)
    with pytest.raises(RemoteError):
        in_process.call("write", {"slug": "n1", "content": "a new agent"}, agent="newcomer")
    assert sorted(p.name for p in cfg.agents_dir.rglob("*")) == ["frank", "memory", "stale.md"]
    in_process.harness.sweep()
    assert _memory_keys(in_process) == before  # nothing deleted, the stale note not indexed

    # The share is back: writes and sweeps go on as before.
    for p in sorted(cfg.agents_dir.rglob("*"), reverse=True):
        p.rmdir() if p.is_dir() else p.unlink()
    cfg.agents_dir.rmdir()
    away.rename(cfg.agents_dir)
    out = in_process.call("write", {"slug": "m1", "content": "replaced when back"}, agent="frank")
    assert out["action"] == "replaced"
    in_process.call("write", {"slug": "n1", "content": "a new agent"}, agent="newcomer")
    in_process.harness.sweep()
    health = _health(in_process)
    assert all(r["mode"] != "offline" for r in health["roots"] if r["name"].startswith("memory/"))
    assert not [p for p in health["problems"]["active"] if p["area"] == "home"]
    assert _memory_keys(in_process) == [*before, "memory/newcomer/n1"]


def test_an_inbox_gone_while_its_notes_are_indexed_is_not_made_anew(in_process: Any) -> None:
    """An agent's inbox gone (moved away, a share of its own unmounted) while the index holds its
    notes: a write is refused (`storage`) and makes no fresh inbox in its place; once a sweep saw
    the notes gone and let go of them, the next write makes the inbox anew. A new agent's first
    write makes its inbox at once. Was: made anew at once, the write hidden when the folder came
    back."""
    cfg = in_process.cfg
    in_process.call("write", {"slug": "m1", "content": "frank memory one"}, agent="frank")
    (cfg.agents_dir / "frank").rename(cfg.home / "frank-away")
    with pytest.raises(RemoteError) as refused:
        in_process.call("write", {"slug": "m2", "content": "frank memory two"}, agent="frank")
    assert refused.value.code == "storage" and "is gone although its notes are indexed" in str(refused.value)
    assert not (cfg.agents_dir / "frank").exists()
    assert in_process.call("write", {"slug": "n1", "content": "a new agent"}, agent="newcomer")["created"]
    in_process.harness.sweep()
    assert _memory_keys(in_process) == ["memory/newcomer/n1"]
    out = in_process.call("write", {"slug": "m2", "content": "frank memory two"}, agent="frank")
    assert out["action"] == "created" and (cfg.agents_dir / "frank" / "memory" / "m2.md").is_file()


def _hang_reads_of(monkeypatch: pytest.MonkeyPatch, name: str, release: threading.Event) -> None:
    """Reading the note ``name`` hangs until ``release`` (a FUSE helper that stopped answering,
    an SMB oplock, a hard NFS mount): its listing and stat answer, its read does not."""
    real = note_text.read_fd

    def read_fd(fd: int, limit: int) -> bytes:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(name):
            release.wait(20)
        return real(fd, limit)

    monkeypatch.setattr(note_text, "read_fd", read_fd)


def _stuck_readers(root: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name == f"probe-{root}" and t.is_alive())


def test_a_note_whose_read_hangs_takes_its_root_offline_not_the_indexer(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share whose listing answers but whose read of one note hangs: the read has a deadline
    (the probe timeout), the root goes offline naming the note, its other notes wait, and the
    agents' inboxes (local) are indexed on; a sweep while it still hangs starts no second stuck
    read; once the share answers again the retry reads everything. The indexer thread hung in
    the read, with `Index: ready`, no root offline and no inbox note indexed, for as long as
    the share hung."""
    write(vault / "Hang.md", "# Hang\n\nThe quagmire note.\n")
    release = threading.Event()
    _hang_reads_of(monkeypatch, "Hang.md", release)
    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.5}), FakeEmbedder())
    try:
        inbox = h.cfg.agents_dir / "eve" / "memory"
        write(inbox / "plan.md", "# Plan\n\nThe guava harvest.\n")
        costs: dict[str, float] = {}
        h.indexer.on_indexed = lambda spent, _written: costs.update(spent)
        started = time.monotonic()
        h.indexer.sweep()
        assert time.monotonic() - started < 10
        # The wait is no cost of the note: its file events are not held back for it.
        assert str(vault / "Hang.md") not in costs and costs
        assert h.stores.manifest.file_states_of(["memory/eve/plan"])
        st = h.supervisor.roots["vault"]
        assert st.offline and "Hang.md" in str(st.error) and "did not answer" in str(st.error)
        assert "vault/Hang" not in h.stores.manifest.file_states("vault/")
        assert _stuck_readers("vault") == 1
        # A search's "N of M notes read so far" counts the notes read, not those listed (it said
        # "926 of 926" with 319 left behind the hung note).
        act, counts = h.indexer.activity, h.stores.manifest.counts()
        read = sum(c["files"] for c in counts["by_source"].values())
        assert act.notes_read() == read < act.total == act.done
        # While it hangs: sweeps (full, and of an inbox's file events) answer at once, index the
        # inbox, start no second read of the share, and still say which note hangs.
        later = write(inbox / "later.md", "# Later\n\nThe lychee crate.\n")
        started = time.monotonic()
        h.indexer.sweep()
        h.indexer.sweep(only=frozenset(), paths={str(later)})
        assert time.monotonic() - started < 5
        assert h.stores.manifest.file_states_of(["memory/eve/later"])
        assert _stuck_readers("vault") == 1
        roots = {r["name"]: r for r in h.supervisor.describe(lambda _p: True)}
        assert roots["vault"]["mode"] == "offline" and "Hang.md" in str(roots["vault"]["error"])
        release.set()
        for _ in range(100):
            if not _stuck_readers("vault"):
                break
            time.sleep(0.05)
        st.next_retry = 0.0  # the retry is due
        h.indexer.sweep(only=frozenset(h.supervisor.due()))
        assert not st.offline
        assert "vault/Hang" in h.stores.manifest.file_states("vault/")
        assert len(h.stores.manifest.file_states("vault/")) == 4  # Garden, Boat, Bread, Hang
    finally:
        release.set()
        h.close()


def _offline_index(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    hang: Callable[[Path, threading.Event], None],
    **env: str,
) -> tuple[int, float]:
    """`sidecar index` with no daemon (no model, a probe timeout of 2.5 s) over a vault whose
    share ``hang`` makes hang (given the vault and the event that releases it, set once the
    command ends); ``env``: more settings. Its exit code and the seconds it took."""
    from sidecar.clients.cli import main

    vault = make_vault(tmp_path / "vault")
    release = threading.Event()
    hang(vault, release)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SIDECAR_EMBEDDER_ENABLED", "false")
    monkeypatch.setenv("SIDECAR_WATCH_PROBE_TIMEOUT_SECONDS", "2.5")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    started = time.monotonic()
    try:
        code = main(["index", "--home", str(tmp_path / "h"), "--vault", str(vault)])
    finally:
        release.set()
    return code, time.monotonic() - started


def test_offline_index_says_which_read_it_waits_for_and_which_root_is_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sidecar index` with no daemon, on a share that hangs on the read of one note: it says
    which note it waits for, ends after the read's deadline and names the root left offline
    (it printed nothing, and waited as long as the share hung)."""

    def hang(vault: Path, release: threading.Event) -> None:
        write(vault / "Hang.md", "# Hang\n\nThe quagmire note.\n")
        _hang_reads_of(monkeypatch, "Hang.md", release)

    code, seconds = _offline_index(tmp_path, monkeypatch, hang)
    assert code == 0 and seconds < 15
    err = capsys.readouterr().err
    assert "waiting for vault to answer the read of Hang.md (hung share?)" in err
    assert "vault offline, kept as indexed: reading Hang.md" in err


class _HangingEntry:
    """A listed entry whose lstat hangs until ``release``: a FUSE share's listing gives no file
    type, so ``is_symlink`` asks the share (its getattr hangs)."""

    def __init__(self, entry: os.DirEntry[str], release: threading.Event) -> None:
        self._entry, self._release = entry, release
        self.name, self.path = entry.name, entry.path

    def is_symlink(self) -> bool:
        self._release.wait(20)
        return self._entry.is_symlink()

    def is_dir(self, follow_symlinks: bool = True) -> bool:
        return self._entry.is_dir(follow_symlinks=follow_symlinks)

    def is_file(self, follow_symlinks: bool = True) -> bool:
        return self._entry.is_file(follow_symlinks=follow_symlinks)

    def stat(self, follow_symlinks: bool = True) -> os.stat_result:
        return self._entry.stat(follow_symlinks=follow_symlinks)


def _hang_stat_of(monkeypatch: pytest.MonkeyPatch, path: Path, release: threading.Event) -> None:
    """The look-up (lstat) of the file ``path`` hangs until ``release`` (a share whose getattr
    hangs); its folder's listing answers."""
    real = os.scandir

    def scandir(folder: Any = ".") -> Any:
        if Path(folder) != path.parent:
            return real(folder)
        with real(folder) as it:
            return _Listing([_HangingEntry(e, release) if e.name == path.name else e for e in it])

    monkeypatch.setattr(sources_mod.os, "scandir", scandir)


@pytest.mark.parametrize("call", ["listing", "stat"])
def test_a_subfolder_whose_listing_or_stat_hangs_takes_its_root_offline_naming_it(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, call: str
) -> None:
    """A sweep whose listing of one subfolder (or stat of one note) hangs gives up after the
    probe timeout, as a hung read does, and names what hangs: the root offline, its notes kept,
    no second stuck call while it hangs, everything read again once it answers. It waited
    scanTimeoutSeconds (600 s) with `Index: ready` and said only "did not answer"."""
    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.5}), FakeEmbedder())
    release = threading.Event()
    try:
        h.indexer.sweep()
        before = set(h.stores.manifest.file_states("vault/"))
        assert "vault/Recipes/Bread" in before
        if call == "listing":
            hang_listing(monkeypatch, vault / "Recipes", release)
        else:
            _hang_stat_of(monkeypatch, vault / "Recipes" / "Bread.md", release)
        started = time.monotonic()
        h.indexer.sweep()
        assert time.monotonic() - started < 10
        st = h.supervisor.roots["vault"]
        said = "listing Recipes" if call == "listing" else "looking up Recipes/Bread.md"
        assert st.offline and said in str(st.error) and "did not answer" in str(st.error)
        assert set(h.stores.manifest.file_states("vault/")) == before  # kept, none deleted
        assert _stuck_readers("vault") == 1
        h.indexer.sweep()  # while it hangs: no second call on the share, still named
        assert _stuck_readers("vault") == 1
        assert said in str(h.supervisor.roots["vault"].error)
        release.set()
        for _ in range(100):
            if not _stuck_readers("vault"):
                break
            time.sleep(0.05)
        st.next_retry = 0.0
        h.indexer.sweep(only=frozenset(h.supervisor.due()))
        assert not st.offline
        assert set(h.stores.manifest.file_states("vault/")) == before
    finally:
        release.set()
        h.close()


def test_a_stop_ends_the_wait_for_a_hung_listing(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon's stop ends the indexer's wait for a share's call at once (its join waited the
    call's whole deadline, scanTimeoutSeconds for a listing, and gave up on the indexer); the
    root is not said to hang for it, nor to be offline: a stop is no outage (it was logged and
    kept as an offline root, "not waited for")."""
    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 300}), FakeEmbedder())
    caplog.set_level(logging.INFO)
    release = threading.Event()
    try:
        h.indexer.sweep()
        hang_listing(monkeypatch, vault / "Recipes", release)
        sweeping = threading.Thread(target=h.indexer.sweep, daemon=True)
        sweeping.start()
        for _ in range(200):  # until the sweep waits on the listing
            if h.supervisor.waiting is not None or h.supervisor.hung_call():
                break
            time.sleep(0.05)
        assert h.supervisor.hung_call() == "vault (listing Recipes)"
        h.supervisor.stopping.set()
        sweeping.join(20)
        assert not sweeping.is_alive() and not release.is_set()
        st = h.supervisor.roots["vault"]
        assert not st.offline and st.error is None and st.failures == 0
        assert "share_wait_stopped root=vault" in caplog.text
        assert "watcher_retry" not in caplog.text and "scan_hung" not in caplog.text
    finally:
        release.set()
        h.close()


def test_offline_index_says_which_listing_it_waits_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sidecar index` on a share whose listing of one subfolder hangs says which folder it waits
    for, then that it waits on to learn whether the share is only slow (up to
    scanTimeoutSeconds), and names it in the root left offline (it printed nothing for
    scanTimeoutSeconds)."""

    def hang(vault: Path, release: threading.Event) -> None:
        hang_listing(monkeypatch, vault / "Projects", release)

    code, _seconds = _offline_index(tmp_path, monkeypatch, hang, SIDECAR_WATCH_SCAN_TIMEOUT_SECONDS="4")
    assert code == 0
    err = capsys.readouterr().err
    assert "waiting for vault to answer the listing of Projects (hung share?)" in err
    assert "vault did not answer the listing of Projects in time; waiting" in err
    assert "up to 4 s in all, to learn whether it is only a slow share" in err
    assert "vault offline, kept as indexed: listing Projects in" in err


def test_the_status_line_says_which_listing_the_sweep_waits_for(big: Harness) -> None:
    """`systemctl status` said "ready" for as long as a listing hung."""
    from sidecar.daemon.watchdog import status_line

    big.supervisor.waiting = ("vault", "Projects", time.monotonic() - 3, "listing")
    line = status_line(big.indexer.activity, big.supervisor, big.stores.manifest, "ok")
    assert "waiting 3 s for vault to answer the listing of Projects" in line


def test_a_pipe_named_like_a_note_seen_by_an_event_is_counted_at_once(big: Harness, vault: Path) -> None:
    """A FIFO made while running (a file event) is counted as skipped at once, not at the next
    full sweep, and no longer once it is gone; it is never opened."""
    fifo = vault / "pipe.md"
    os.mkfifo(fifo)
    big.indexer.sweep(only=frozenset(), paths={str(fifo)})
    assert big.indexer.activity.scan_skipped == {"not a regular file": 1}
    fifo.unlink()
    big.indexer.sweep(only=frozenset(), paths={str(fifo)})
    assert big.indexer.activity.scan_skipped == {}


def test_an_indexed_note_that_cannot_be_read_is_named_in_status(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note that cannot be read any more (chmod 000, an I/O error) keeps what was indexed and
    is counted and named as unreadable in status, through later sweeps, until it reads again
    (it was kept with only a log line, and its later edits went unread without a word)."""
    target = vault / "Notes" / "n3.md"
    real = note_text.read_fd

    def read_fd(fd: int, limit: int) -> bytes:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/Notes/n3.md"):
            raise PermissionError(13, "Permission denied")
        return real(fd, limit)

    monkeypatch.setattr(note_text, "read_fd", read_fd)
    before = big.stores.manifest.chunk_ids("vault/Notes/n3")
    os.utime(target, ns=(1, 1))
    for _ in range(2):  # the second sweep does not read it again, and still names it
        big.sweep()
        assert big.stores.manifest.chunk_ids("vault/Notes/n3") == before != set()
        assert big.indexer.activity.scan_skipped == {"unreadable": 1}
        problem = big.stores.problems.active_in("unreadable")
        assert problem is not None and str(target) in problem["error"]
        (root,) = [r for r in big.supervisor.describe(lambda _p: True) if r["name"] == "vault"]
        assert root["unreadable"] == [str(target)]
    monkeypatch.setattr(note_text, "read_fd", real)
    target.write_text("# Note 3\n\nReadable again: the wombat.\n")
    big.sweep()
    assert big.indexer.activity.scan_skipped == {}
    assert big.stores.problems.active_in("unreadable") is None
    assert big.stores.manifest.chunk_ids("vault/Notes/n3") != before
    # Made unreadable again by a chmod (only its status time changes, its read fails), then
    # deleted (a file event): named until it is gone, also when a walk of its folder does not
    # read it again.
    monkeypatch.setattr(note_text, "read_fd", read_fd)
    os.chmod(target, 0o600)
    big.indexer.sweep(only=frozenset(), paths={str(target.parent)})  # a walk of its folder
    assert big.indexer.activity.scan_skipped == {"unreadable": 1}
    big.indexer.sweep(only=frozenset(), paths={str(target.parent)})  # not read again: still named
    assert big.indexer.activity.scan_skipped == {"unreadable": 1}
    target.unlink()
    big.indexer.sweep(only=frozenset(), paths={str(target)})
    assert big.indexer.activity.scan_skipped == {}
    assert big.stores.problems.active_in("unreadable") is None


def _failing_reads(monkeypatch: pytest.MonkeyPatch, folder: Path) -> list[bool]:
    """Reads of notes under ``folder`` fail as a folder of mode 000 (or an EIO on a share) makes
    them fail, while the returned flag is set (root reads mode 000: refused here by hand)."""
    from sidecar.index import records as records_mod

    failing = [True]
    real = records_mod.read_note

    def read_note(p: Path, m: int, r: Any = None) -> Any:
        if failing[0] and p.is_relative_to(folder):
            raise records_mod.NoteUnreadable("unreadable (Permission denied)")
        return real(p, m, r)

    monkeypatch.setattr(records_mod, "read_note", read_note)
    return failing


def test_notes_whose_first_read_failed_are_read_again_once_they_read(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notes listed by a first sweep whose read then failed (the folder made unreadable between
    the listing and the read) are not in the index: status says so by name, and the next sweep
    reads them once they read, though no stat of theirs changed. Was: recorded as done with
    their stat, no sweep read them again until each was edited, and status said "Recovered"."""
    private = vault / "Private"
    for i in range(3):
        write(private / f"p{i}.md", f"# P{i}\n\nprivate heronsgate note {i}\n")
    failing = _failing_reads(monkeypatch, private)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        assert not h.stores.manifest.chunk_ids("vault/Private/p0")
        problem = h.stores.problems.active_in("unreadable")
        assert problem is not None and "3 note(s) of vault are not in the index" in problem["error"]
        assert str(private / "p0.md") in problem["error"]
        h.sweep()  # still failing: still named
        assert h.stores.problems.active_in("unreadable") is not None
        failing[0] = False
        h.sweep()  # their turn comes after 2 full sweeps now (a note failing for good waits longer)
        h.sweep()
        assert all(h.stores.manifest.chunk_ids(f"vault/Private/p{i}") for i in range(3))
        assert h.stores.problems.active_in("unreadable") is None
        assert h.stores.manifest.counts()["skipped"] == {}
    finally:
        h.close()


def test_a_rebuild_whose_reads_failed_keeps_those_notes_and_reads_them_again(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild whose reads of a folder's notes failed partway (the folder made unreadable
    during it) keeps them as indexed before it, says the rebuild is not finished, and the next
    sweep reads them once they read (was: lost to search until each was edited)."""
    before = _counts(big)
    failing = _failing_reads(monkeypatch, vault / "Notes")
    big.indexer.clear()
    big.sweep()
    assert all(big.stores.manifest.chunk_ids(f"vault/Notes/n{i}") for i in range(10))
    assert big.stores.bm25.num_docs() == before[1]
    problem = big.stores.problems.active_in("rebuild")
    assert problem is not None and "10 note(s) of vault" in problem["error"]
    unreadable = big.stores.problems.active_in("unreadable")
    assert unreadable is not None and "not in the index" not in unreadable["error"]
    big.sweep()  # still unreadable: kept, still said
    assert big.stores.problems.active_in("rebuild") is not None and big.stores.bm25.num_docs() == before[1]
    failing[0] = False
    big.sweep()  # their turn comes after 2 full sweeps now (a note failing for good waits longer)
    big.sweep()
    assert _counts(big) == before
    assert big.stores.problems.active_in("unreadable") is None
    assert big.stores.problems.active_in("rebuild") is None


def _share_goes_at_third_read(vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """At the third note read, the share goes: its notes move to the returned folder and its
    mount point stays behind, empty."""
    from sidecar.index import records as records_mod

    aside, real, reads = tmp_path / "aside", records_mod.read_note, [0]

    def read_note(p: Path, m: int, r: Any = None) -> Any:
        reads[0] += 1
        if reads[0] == 3:
            aside.mkdir()
            for child in list(vault.iterdir()):
                child.rename(aside / child.name)
        return real(p, m, r)

    monkeypatch.setattr(records_mod, "read_note", read_note)
    return aside


def test_a_share_gone_during_a_rebuild_keeps_the_notes_it_did_not_read(
    big: Harness, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The share unmounted partway through a rebuild (its notes listed, then gone when read):
    the notes not read back are kept as indexed before, searchable, and status says the rebuild
    is not finished; once the share is back the next sweep reads them and the problem clears.
    Was: half the index gone for as long as the share was away, while answers said its notes
    were kept as last indexed."""

    keys = set(big.stores.manifest.file_states("vault/"))
    before = _counts(big)
    docs = before[1]
    aside = _share_goes_at_third_read(vault, tmp_path, monkeypatch)
    big.indexer.clear()
    big.indexer.clear()  # asked again before the first one's sweep ended: its copy is kept
    big.sweep()
    assert set(big.stores.manifest.file_states("vault/")) == keys
    assert big.stores.bm25.num_docs() == docs
    problem = big.stores.problems.active_in("rebuild")
    assert problem is not None and "read again once they can be" in problem["error"]
    assert not big.stores.manifest.has_aside()
    big.sweep()  # the share still away: nothing lost, still said
    assert set(big.stores.manifest.file_states("vault/")) == keys
    assert big.stores.problems.active_in("rebuild") is not None
    for child in list(aside.iterdir()):
        child.rename(vault / child.name)
    big.sweep()
    assert set(big.stores.manifest.file_states("vault/")) == keys and big.stores.bm25.num_docs() == docs
    assert all(st.size > 0 for st in big.stores.manifest.file_states("vault/").values())
    assert big.stores.problems.active_in("rebuild") is None and _counts(big) == before


def test_index_rebuild_without_a_daemon_exits_7_when_the_share_went_away_during_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sidecar index --rebuild` (no daemon) whose share goes away partway: exit 7 saying the
    rebuild is not finished and why, and every note stays in the index (was: exit 0, "indexed N
    notes" with half of them gone)."""
    from sidecar.clients.cli import main
    from sidecar.stores.manifest import Manifest

    vault = make_vault(tmp_path / "vault")
    _notes(vault, 6)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SIDECAR_EMBEDDER_ENABLED", "false")
    args = ["index", "--home", str(tmp_path / "h"), "--vault", str(vault)]
    assert main(args) == 0
    manifest = Manifest(tmp_path / "h" / "index" / "manifest.sqlite")
    try:
        keys = set(manifest.file_states("vault/"))
    finally:
        manifest.close()
    assert len(keys) >= 6
    _share_goes_at_third_read(vault, tmp_path, monkeypatch)
    capsys.readouterr()
    assert main([*args, "--rebuild"]) == 7
    err = capsys.readouterr().err
    assert "rebuild not finished: the rebuild could not read" in err and "read again once they can be" in err
    manifest = Manifest(tmp_path / "h" / "index" / "manifest.sqlite")
    try:
        assert set(manifest.file_states("vault/")) == keys
    finally:
        manifest.close()


def test_index_rebuild_through_the_daemon_exits_7_when_the_share_went_away_during_it(
    vault: Path,
    tmp_path: Path,
    serve_in_process: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`sidecar index --rebuild` through the daemon whose share goes away partway: exit 7 with
    `rebuild not finished`, status says so, and the notes stay found (was: exit 0)."""
    from sidecar.clients.cli import command_for
    from sidecar.clients.cli_parser import build_parser
    from sidecar.clients.cli_render import render_status

    _notes(vault, 6)
    server = serve_in_process(vault, model="fake")
    keys = set(server.harness.indexer.manifest.file_states("vault/"))
    _share_goes_at_third_read(vault, tmp_path, monkeypatch)
    code = command_for("index")(build_parser().parse_args(["index", "--rebuild"]), server.cfg)
    assert code == 7
    assert "rebuild not finished: the rebuild could not read" in capsys.readouterr().err
    assert set(server.harness.indexer.manifest.file_states("vault/")) == keys
    assert "PROBLEM (rebuild not finished" in render_status(server.call("health"))


def test_a_rebuild_leaves_out_notes_deleted_before_it(big: Harness, vault: Path) -> None:
    """Notes deleted (or moved) before a rebuild, on a vault that is there, stay out of the
    index: a rebuild is what removes stale notes. Was: put back as not read back, found by
    search, the rebuild said unfinished, and with most notes gone the deletion was then held."""
    for i in range(8):
        (vault / "Notes" / f"n{i}.md").unlink()
    big.indexer.clear()
    big.sweep()
    keys = set(big.stores.manifest.file_states("vault/Notes/"))
    assert keys == {"vault/Notes/n8", "vault/Notes/n9"}
    assert not big.stores.manifest.chunk_ids("vault/Notes/n0")
    assert big.stores.bm25.num_docs() == big.stores.manifest.chunk_count()
    assert big.stores.problems.active_in("rebuild") is None
    assert big.supervisor.roots["vault"].hold_kind is None


def test_a_rebuild_leaves_out_notes_a_rule_now_excludes(big: Harness, vault: Path) -> None:
    """A note excluded by a rule set just before a rebuild is not put back by it (was: the top
    hit until the next full sweep, and the rebuild said unfinished)."""
    assert big.indexer.set_excludes(["Notes/n1.md"], False)
    big.indexer.clear()
    big.sweep()
    assert "vault/Notes/n1" not in big.stores.manifest.file_states("vault/")
    assert not big.stores.manifest.chunk_ids("vault/Notes/n1")
    assert big.stores.problems.active_in("rebuild") is None


def test_a_rebuild_that_reads_everything_clears_an_earlier_unfinished_one(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild that put notes back, then one that read every note: "rebuild not finished"
    clears (was: said until a restart, and every `index --rebuild` exited 7)."""
    failing = _failing_reads(monkeypatch, vault / "Notes" / "n1.md")
    big.indexer.clear()
    big.sweep()
    assert big.stores.problems.active_in("rebuild") is not None
    failing[0] = False
    big.indexer.clear()
    big.sweep()
    assert big.stores.problems.active_in("rebuild") is None
    assert big.stores.manifest.chunk_ids("vault/Notes/n1")


def test_notes_a_rebuild_puts_back_keep_their_links(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note put back by a rebuild that could not read it keeps its outgoing links (was: put
    back without them: no links, no backlinks from it, until read again)."""
    write(vault / "Linker" / "hub.md", "# Hub\n\nSee [[n2]] and [[n3]].\n")
    big.sweep()
    links = "SELECT src, dst FROM links WHERE src = 'vault/Linker/hub' ORDER BY ord"
    before = big.stores.manifest.read(links)
    assert [d for _, d in before] == ["vault/Notes/n2", "vault/Notes/n3"]
    _failing_reads(monkeypatch, vault / "Linker")
    big.indexer.clear()
    big.sweep()
    assert big.stores.manifest.chunk_ids("vault/Linker/hub")
    assert big.stores.manifest.read(links) == before


def _counting_failing_reads(monkeypatch: pytest.MonkeyPatch, note: Path) -> tuple[list[bool], list[int]]:
    """Reads of ``note`` fail while the flag is set; every read of it is counted."""
    from sidecar.index import records as records_mod

    failing, reads = [True], [0]
    real = records_mod.read_note

    def read_note(p: Path, m: int, r: Any = None) -> Any:
        if p == note:
            reads[0] += 1
            if failing[0]:
                raise records_mod.NoteUnreadable("unreadable (Input/output error)")
        return real(p, m, r)

    monkeypatch.setattr(records_mod, "read_note", read_note)
    return failing, reads


@pytest.mark.parametrize("indexed", [False, True])
def test_a_note_that_stays_unreadable_is_read_again_less_and_less_often(
    big: Harness,
    vault: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    indexed: bool,
) -> None:
    """A note whose reads keep failing (an EIO) is tried again after 1, 2, 4... full sweeps, at
    once on a file event, with one warning at the first failure and one when it reads again
    (was: read, a read timeout paid and a warning logged at every sweep for good). It stays
    named in status while it waits."""
    note = vault / "Notes" / "n3.md" if indexed else write(vault / "Bad" / "eio.md", "# Eio\n\nsandpiper\n")
    failing, reads = _counting_failing_reads(monkeypatch, note)
    caplog.set_level(logging.INFO)
    if indexed:  # read failing since its stat changed (an indexed one unchanged is not read)
        os.utime(note, ns=(time.time_ns(), time.time_ns()))
    got = []
    for _ in range(8):
        big.sweep()
        got.append(reads[0])
        assert big.stores.problems.active_in("unreadable") is not None
    assert got == [1, 2, 2, 3, 3, 3, 3, 4]  # at full sweeps 1, 2, 4, 8 since the first failure
    said = [r for r in caplog.records if r.levelno >= logging.WARNING and str(note) in r.getMessage()]
    assert len([r for r in said if r.name != "sidecar.index.problems"]) == 1  # and the problem, once
    assert any("unreadable_waiting" in r.getMessage() for r in caplog.records)
    big.indexer.sweep(only=frozenset(), paths={str(note)})  # a file event: read at once
    assert reads[0] == 5
    failing[0] = False
    big.indexer.sweep(only=frozenset(), paths={str(note)})
    key = "vault/Notes/n3" if indexed else "vault/Bad/eio"
    assert big.stores.manifest.chunk_ids(key)
    assert big.stores.problems.active_in("unreadable") is None
    assert any("file_readable_again" in r.getMessage() for r in caplog.records)


def test_a_rebuild_without_room_for_its_copy_is_refused_before_anything_is_emptied(
    big: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild keeps a copy of the index until its notes are read back: on a disk without room
    for it, the rebuild is refused with a disk error and the index is left whole (was: no check,
    the copy failed partway with an error of the database)."""
    from sidecar.contracts.errors import StorageError
    from sidecar.stores import manifest_aside

    before = _counts(big)
    monkeypatch.setattr(manifest_aside, "free_bytes", lambda _folder: 4096)
    with pytest.raises(StorageError, match="not rebuilt: the disk of the index"):
        big.indexer.refuse_rebuild()
    with pytest.raises(StorageError, match="not rebuilt: the disk of the index"):
        big.indexer.clear()
    assert _counts(big) == before and not big.stores.manifest.has_aside()
    monkeypatch.setattr(manifest_aside, "free_bytes", lambda _folder: 2**40)
    big.indexer.refuse_rebuild()


def test_rebuild_not_finished_is_said_again_after_a_restart(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notes a rebuild put back are kept in the index's files: after a restart status still
    says the rebuild is not finished until they are read (was: kept in memory only, lost)."""
    _notes(vault, 4)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        failing = _failing_reads(monkeypatch, vault / "Notes" / "n1.md")
        h.indexer.clear()
        h.sweep()
        assert h.stores.problems.active_in("rebuild") is not None
    finally:
        h.close()
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        problem = h.stores.problems.active_in("rebuild")
        assert problem is not None and "1 note(s) of vault" in problem["error"]
        failing[0] = False
        h.sweep()  # its second failure in a row (the first was before the restart): waits a sweep
        h.sweep()
        assert h.stores.problems.active_in("rebuild") is None
        assert h.stores.manifest.chunk_ids("vault/Notes/n1")
    finally:
        h.close()


def test_a_rebuild_copy_that_cannot_be_put_back_is_dropped(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy whose putting back fails (one written by another version, its columns differing)
    is dropped with a log line, and the rebuild's own reads stand (was: the error went up, the
    copy stayed, and every later sweep failed on it)."""
    import sqlite3

    from sidecar.stores.manifest import Manifest

    def broken(self: Manifest, *wanted: Any) -> list[str]:
        raise sqlite3.OperationalError("table aside_files has 3 columns but 30 values were supplied")

    _failing_reads(monkeypatch, vault / "Notes" / "n1.md")
    monkeypatch.setattr(Manifest, "restore_aside", broken)
    big.indexer.clear()
    big.sweep()
    assert not big.stores.manifest.has_aside()
    assert big.stores.manifest.chunk_ids("vault/Notes/n2")
    big.sweep()


def test_a_full_disk_when_a_rebuild_puts_notes_back_keeps_the_copy(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A put-back that fails for a full disk keeps the rebuild's copy: the next sweep puts the
    notes back (was: the copy dropped as one of another version, and with it the notes the
    rebuild could not read, gone from the index until they read again)."""
    import sqlite3

    from sidecar.stores.manifest import Manifest

    real, calls = Manifest.restore_aside, [0]

    def full_once(self: Manifest, wanted: Any, kept_as: str | None = None) -> list[str]:
        calls[0] += 1
        if calls[0] == 1:
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, wanted, kept_as)

    _failing_reads(monkeypatch, vault / "Notes" / "n1.md")
    monkeypatch.setattr(Manifest, "restore_aside", full_once)
    before = big.stores.manifest.chunk_ids("vault/Notes/n1")
    big.indexer.clear()
    with pytest.raises(sqlite3.OperationalError):
        big.sweep()
    assert big.stores.manifest.has_aside()
    big.sweep()  # the retry
    assert big.stores.manifest.chunk_ids("vault/Notes/n1") == before
    assert not big.stores.manifest.has_aside()
    assert big.stores.problems.active_in("rebuild") is not None


class _DeadFile(_DeadEntry):
    """A listed note whose stat fails (an I/O error on a share)."""

    def is_dir(self, follow_symlinks: bool = True) -> bool:
        return False

    def stat(self, follow_symlinks: bool = True) -> os.stat_result:
        raise OSError(5, "Input/output error", self.path)


def test_a_note_deleted_beside_an_unreadable_one_of_a_longer_name_leaves(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note that fails its stat keeps only itself: n12 deleted while n1 cannot be read
    leaves the index (was: "vault/Notes/n1" kept every key it began, n12 with it, for as long
    as n1 stayed unreadable)."""
    write(vault / "Notes" / "n12.md", "# N12\n\nthe twelfth lighthouse\n")
    big.sweep()
    real = os.scandir

    def scandir(path: Any) -> Any:
        if Path(path) != vault / "Notes":
            return real(path)
        with real(path) as it:
            return _Listing([_DeadFile(e) if e.name == "n1.md" else e for e in it])

    monkeypatch.setattr(sources_mod.os, "scandir", scandir)
    (vault / "Notes" / "n12.md").unlink()
    big.sweep()
    assert big.stores.manifest.chunk_ids("vault/Notes/n1")
    assert not big.stores.manifest.file_states_of(["vault/Notes/n12"])


def test_a_rebuild_with_a_folder_it_cannot_list_keeps_its_notes_not_a_deleted_namesake(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder that cannot be listed during a rebuild (made unreadable partway): its notes are
    put back as indexed before it; a note deleted before the rebuild whose name only begins
    like the folder's ("Ab.md" beside "A/") stays out (was: put back, found by search, and the
    rebuild said unfinished while "A" stayed unreadable)."""
    write(vault / "A" / "inner.md", "# Inner\n\nthe inner harbour\n")
    write(vault / "Ab.md", "# Ab\n\nan abandoned quay\n")
    big.sweep()
    (vault / "Ab.md").unlink()
    real = os.scandir

    def scandir(path: Any) -> Any:
        if Path(path) == vault / "A":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    big.indexer.clear()
    monkeypatch.setattr(sources_mod.os, "scandir", scandir)
    big.sweep()
    assert big.stores.manifest.chunk_ids("vault/A/inner")
    assert not big.stores.manifest.file_states_of(["vault/Ab"])
    problem = big.stores.problems.active_in("rebuild")
    assert problem is not None and "1 note(s) of vault" in problem["error"]
    monkeypatch.setattr(sources_mod.os, "scandir", real)
    big.sweep()
    assert big.stores.manifest.chunk_ids("vault/A/inner")
    assert big.stores.problems.active_in("rebuild") is None


@pytest.mark.parametrize("away", ["home", "inbox"])
def test_a_rebuild_keeps_the_agents_memory_while_the_home_is_held_or_an_inbox_cannot_be_listed(
    in_process: Any, monkeypatch: pytest.MonkeyPatch, away: str
) -> None:
    """The agents folder gone (its share unmounted) or one inbox that cannot be listed during a
    rebuild: the agents' notes are put back as indexed before it and said unfinished; once they
    can be read, the next sweep reads them and the problem clears."""
    from sidecar.vault.sources import inbox_root

    cfg, h = in_process.cfg, in_process.harness
    for slug in ("m1", "m2"):
        in_process.call("write", {"slug": slug, "content": f"frank memory {slug}"}, agent="frank")
    before = _memory_keys(in_process)
    assert len(before) == 2
    inbox = inbox_root(cfg, "frank").path
    real = os.scandir

    def scandir(path: Any) -> Any:
        if not isinstance(path, int) and Path(path) == inbox:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    h.indexer.clear()
    if away == "home":
        cfg.agents_dir.rename(cfg.home / "agents.away")
    else:
        monkeypatch.setattr(sources_mod.os, "scandir", scandir)
    h.sweep()
    assert _memory_keys(in_process) == before
    assert all(h.stores.manifest.chunk_ids(k) for k in before)
    problem = h.stores.problems.active_in("rebuild")
    assert problem is not None and "2 note(s) of memory" in problem["error"]
    if away == "home":
        (cfg.home / "agents.away").rename(cfg.agents_dir)
    else:
        monkeypatch.setattr(sources_mod.os, "scandir", real)
    h.sweep()
    h.sweep()
    assert _memory_keys(in_process) == before
    assert h.stores.problems.active_in("rebuild") is None


def test_a_note_a_rebuild_put_back_leaves_once_its_file_is_deleted(
    big: Harness, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note put back by a rebuild whose share went away, deleted while the share was away:
    once the share is back the next sweep removes it and the rebuild is said finished."""
    aside = _share_goes_at_third_read(vault, tmp_path, monkeypatch)
    big.indexer.clear()
    big.sweep()
    assert big.stores.problems.active_in("rebuild") is not None
    (aside / "Notes" / "n7.md").unlink()
    for child in list(aside.iterdir()):
        child.rename(vault / child.name)
    big.sweep()
    assert not big.stores.manifest.file_states_of(["vault/Notes/n7"])
    assert not big.stores.manifest.chunk_ids("vault/Notes/n7")
    assert big.stores.manifest.chunk_ids("vault/Notes/n8")
    assert big.stores.problems.active_in("rebuild") is None


def test_a_rebuild_is_refused_while_a_mass_deletion_is_held(big: Harness, vault: Path) -> None:
    """Most notes vanished at once (a sync tool's glitch, a nested share unmounted): their
    removal is held, and a rebuild is refused with nothing changed (was: it ran, and the held
    notes left the index with no confirmation); once confirmed, the rebuild runs."""
    from sidecar.contracts.errors import UnreadableError

    before = _counts(big)
    moved = vault.parent / "glitch"
    (vault / "Notes").rename(moved)
    big.sweep()
    assert big.supervisor.roots["vault"].hold_kind == "mass"
    with pytest.raises(UnreadableError, match="removal of 10 notes of vault is held"):
        big.indexer.refuse_rebuild()
    assert _counts(big) == before
    big.indexer.refuse_rebuild(["vault"])  # `index --rebuild --confirm-deletions vault`
    big.indexer.sweep(confirm_deletions=frozenset({"vault"}))
    big.indexer.refuse_rebuild()


def test_a_rebuild_stopped_partway_keeps_its_copy_for_the_next_start(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon stopped during a rebuild's sweep: the notes it had not reached are not put
    back at the stop (a long write while stopping, then said "could not read" as for a share
    gone away); the copy stays, and the next start's first sweep reads them, nothing lost."""
    from sidecar.index import records as records_mod

    _notes(vault, 8)
    cfg = make_cfg(vault, **{"index.batchFiles": 2})
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        keys = set(h.stores.manifest.file_states("vault/"))
        stop, real, reads = threading.Event(), records_mod.read_note, [0]

        def read_note(p: Path, m: int, r: Any = None) -> Any:
            reads[0] += 1
            if reads[0] == 3:
                stop.set()
            return real(p, m, r)

        monkeypatch.setattr(records_mod, "read_note", read_note)
        h.indexer.clear()
        h.indexer.sweep(stop=stop)
        assert h.stores.manifest.has_aside()
        assert h.stores.problems.active_in("rebuild") is None
    finally:
        h.close()
    monkeypatch.setattr(records_mod, "read_note", real)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        assert set(h.stores.manifest.file_states("vault/")) == keys
        assert not h.stores.manifest.has_aside()
        assert h.stores.problems.active_in("rebuild") is None
    finally:
        h.close()


def test_a_note_never_read_that_is_deleted_is_no_longer_named_at_its_event(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note not in the index because its read failed, deleted: its file event ends what
    status says of it (was: "not in the index: their read failed" named it until the next
    full sweep, up to index.rescanMinutes later)."""
    note = write(vault / "Bad" / "eio.md", "# Eio\n\nsandpiper\n")
    _counting_failing_reads(monkeypatch, note)
    big.sweep()
    problem = big.stores.problems.active_in("unreadable")
    assert problem is not None and "not in the index" in problem["error"]
    note.unlink()
    big.indexer.sweep(only=frozenset(), paths={str(note)})
    assert big.stores.problems.active_in("unreadable") is None


def test_index_rebuild_through_the_daemon_is_refused_while_a_mass_deletion_is_held(
    vault: Path, serve_in_process: Any
) -> None:
    """The `index` op refuses a rebuild while a mass deletion is held (`unreadable`, exit 7),
    and runs it when the same request confirms that root."""
    _notes(vault, 10)
    server = serve_in_process(vault, model="fake")
    (vault / "Notes").rename(vault.parent / "glitch")
    server.harness.sweep()
    assert server.harness.supervisor.roots["vault"].hold_kind == "mass"
    with pytest.raises(RemoteError, match="removal of 10 notes of vault is held"):
        server.call("index", {"rebuild": True})
    assert server.harness.stores.manifest.file_states("vault/Notes/")
    server.call("index", {"rebuild": True, "confirmDeletions": "vault"})
    assert not server.harness.stores.manifest.file_states("vault/Notes/")


def test_a_keyword_index_failing_when_a_rebuild_puts_notes_back_keeps_them_said(
    big: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keyword index fails (a full disk) as a rebuild puts notes back, after the manifest
    took them: status still says the rebuild is not finished until they are read, and the
    keyword index is refilled from the manifest (was: the error went up with their keys, and
    the retry found no copy left and said the rebuild finished)."""
    from sidecar.contracts.errors import DiskFullError

    before = _counts(big)
    failing = _failing_reads(monkeypatch, vault / "Notes" / "n1.md")
    real, calls = big.stores.bm25.add, [0]

    def add(docs: Any) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise DiskFullError("BM25 commit failed: No space left on device")
        real(docs)

    big.indexer.clear()
    monkeypatch.setattr(big.stores.bm25, "add", add)
    big.sweep()
    assert big.stores.manifest.chunk_ids("vault/Notes/n1")
    problem = big.stores.problems.active_in("rebuild")
    assert problem is not None and "1 note(s) of vault" in problem["error"]
    assert big.stores.bm25.num_docs() == before[1]
    failing[0] = False
    big.sweep()
    big.sweep()
    assert big.stores.problems.active_in("rebuild") is None


def test_a_rebuild_whose_keyword_index_fails_after_the_manifest_emptied_reads_on(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest's copy and emptying committed, then the keyword index fails (the copy took
    the disk's room): the rebuild has begun, its retry reads on and puts back what it could not
    read (was: retried as a rebuild not begun, refused by the room check as "Nothing was
    changed" over an emptied index, and the copy not put back until a restart)."""
    from sidecar.contracts.errors import DiskFullError
    from sidecar.daemon.indexing import REBUILD_AREA, REFUSED, IndexLoop
    from sidecar.stores import manifest_aside

    _notes(vault, 5)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        before = h.stores.manifest.chunk_ids("vault/Notes/n1")
        loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
        ticket = loop.request_sweep(rebuild=True)
        real = h.stores.bm25.delete_all

        def full() -> None:
            raise DiskFullError("BM25 commit failed: No space left on device")

        monkeypatch.setattr(h.stores.bm25, "delete_all", full)
        job = loop._next()
        assert job is not None and job.rebuild
        with pytest.raises(DiskFullError) as failed:
            loop._run(job)
        assert h.stores.manifest.has_aside() and not h.stores.manifest.file_states("vault/")
        assert loop.rebuilding() and not loop.rebuild_queued()  # begun, not waiting
        loop._failed(job, failed.value, 0.0)
        monkeypatch.setattr(h.stores.bm25, "delete_all", real)
        monkeypatch.setattr(manifest_aside, "free_bytes", lambda _folder: 4096)  # no room for a copy
        _failing_reads(monkeypatch, vault / "Notes" / "n1.md")
        retry = loop._next()
        assert retry is not None and not retry.rebuild and retry.ticket == ticket
        loop._run(retry)
        assert h.stores.manifest.chunk_ids("vault/Notes/n1") == before  # put back
        assert not h.stores.manifest.has_aside() and loop.asked_done == ticket
        assert h.problems.active_in(REBUILD_AREA, subject=REFUSED) is None
        problem = h.problems.active_in(REBUILD_AREA)
        assert problem is not None and "could not read 1 note(s) of vault" in problem["error"]
    finally:
        h.close()


def _kept_copy_of_other_columns(h: Harness, change: str) -> None:
    """A rebuild's copy kept (one stopped before its sweep ended, still empty) written by another
    version: its chunks have a column fewer, more, or in another order (``change``)."""
    db = h.stores.manifest._db
    with h.stores.manifest._lock:
        db.execute("CREATE TABLE aside_files AS SELECT * FROM files WHERE 0")
        db.execute("CREATE TABLE aside_links AS SELECT * FROM links WHERE 0")
        if change == "fewer":
            db.execute("CREATE TABLE aside_chunks AS SELECT * FROM chunks WHERE 0")
            db.execute("ALTER TABLE aside_chunks DROP COLUMN embed_hash")
        elif change == "more":
            db.execute("CREATE TABLE aside_chunks AS SELECT *, '' AS embed_head FROM chunks WHERE 0")
        else:  # the same columns, two of them swapped
            columns = [r[1] for r in db.execute("PRAGMA table_info(chunks)")]
            i, j = columns.index("text"), columns.index("headings")
            columns[i], columns[j] = columns[j], columns[i]
            db.execute(f"CREATE TABLE aside_chunks AS SELECT {', '.join(columns)} FROM chunks WHERE 0")


@pytest.mark.parametrize("change", ["fewer", "more", "swapped"])
def test_a_rebuild_over_a_kept_copy_of_other_columns_merges_and_puts_back_by_name(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """A rebuild over the copy an earlier one kept, written by another version (its columns
    differ): the notes indexed now are merged into it by column name, and those the rebuild cannot
    read are put back as they were (was: merged by position: "11 columns but 12 values" failed
    every retry of the rebuild, or values went to the wrong columns; a copy with a column the
    index lacks was dropped at the put-back, and the unread notes with it)."""
    _notes(vault, 5)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        before = [
            (c.chunk_id, c.text, c.headings, c.title) for c in h.stores.manifest.chunks_of("vault/Notes/n1")
        ]
        assert before
        _kept_copy_of_other_columns(h, change)
        h.indexer.clear()
        _failing_reads(monkeypatch, vault / "Notes" / "n1.md")
        h.sweep()
        after = [
            (c.chunk_id, c.text, c.headings, c.title) for c in h.stores.manifest.chunks_of("vault/Notes/n1")
        ]
        assert after == before
        assert not h.stores.manifest.has_aside()
    finally:
        h.close()


def test_a_rebuild_is_refused_for_a_saved_hold_after_a_restart_and_without_a_daemon(
    make_cfg: Any, vault: Path
) -> None:
    """A mass deletion held as a restart comes (before its first sweep judges the root again), or
    held by `sidecar index` without a daemon: a rebuild is refused by the hold saved with the
    root (was: the hold was known to a running daemon only, and the rebuild dropped the held
    notes with no confirmation); the same command confirming the root runs it."""
    from sidecar.contracts.errors import UnreadableError
    from sidecar.daemon.oneshot import index_once

    _notes(vault, 10)
    cfg = make_cfg(vault)
    index_once(cfg, rebuild=False)
    (vault / "Notes").rename(vault.parent / "glitch")
    write(vault / "Other.md", "# Other\n\nstill here\n")
    index_once(cfg, rebuild=False)  # holds the removal of the 10 notes
    with pytest.raises(UnreadableError, match="removal of the notes of vault is held"):
        index_once(cfg, rebuild=True)
    h = Harness(cfg, FakeEmbedder())  # the daemon starts: its first sweep not run yet
    try:
        with pytest.raises(UnreadableError, match="removal of the notes of vault is held"):
            h.indexer.refuse_rebuild()
        assert len(h.stores.manifest.file_states("vault/Notes/")) == 10
        h.sweep()  # judged again: held, with its count
        with pytest.raises(UnreadableError, match="removal of 10 notes of vault is held"):
            h.indexer.refuse_rebuild()
    finally:
        h.close()
    index_once(cfg, rebuild=True, confirm=frozenset({"vault"}))
    h = Harness(cfg, FakeEmbedder())
    try:
        assert not h.stores.manifest.file_states("vault/Notes/")
        assert h.stores.manifest.file_states("vault/Other")
    finally:
        h.close()


def _refused_at_its_turn(h: Harness, breaks: Callable[[], None]) -> tuple[Any, str]:
    """A rebuild asked while nothing refuses it (the request's check passes), ``breaks`` run
    before its turn, then its turn: refused, nothing set aside, the request answered, and said as
    the refusal `index --rebuild` exits 7 with. The index loop and the refusal's words."""
    from sidecar.clients.cli_admin import _rebuild_unfinished
    from sidecar.daemon.indexing import REBUILD_AREA, REFUSED, IndexLoop

    loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
    h.indexer.refuse_rebuild()  # at the request: nothing refuses it yet
    ticket = loop.request_sweep(rebuild=True)
    breaks()
    job = loop._next()
    assert job is not None and job.rebuild
    loop._run(job)
    assert not h.stores.manifest.has_aside() and loop.asked_done == ticket
    problem = h.problems.active_in(REBUILD_AREA, subject=REFUSED)
    assert problem is not None
    assert _rebuild_unfinished(problem["error"]) == 7
    return loop, str(problem["error"])


def test_a_rebuild_is_refused_at_its_turn_when_the_sweep_before_it_began_a_hold(
    make_cfg: Any, vault: Path
) -> None:
    """A rebuild queued behind a sweep that holds a mass deletion: refused when its turn comes,
    nothing emptied, said as "not rebuilt" (was: checked only at the request, and the rebuild
    dropped the held notes with no confirmation)."""
    from sidecar.daemon.indexing import REBUILD_AREA, REFUSED

    _notes(vault, 10)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()

        def held() -> None:
            (vault / "Notes").rename(vault.parent / "glitch")
            h.sweep()  # the sweep under way when the request came holds the removal
            assert h.supervisor.roots["vault"].hold_kind == "mass"

        loop, said = _refused_at_its_turn(h, held)
        assert len(h.stores.manifest.file_states("vault/Notes/")) == 10
        assert "removal of 10 notes of vault is held" in said
        loop.request_sweep(rebuild=True, confirm=frozenset({"vault"}))  # confirmed: it runs
        job = loop._next()
        assert job is not None
        loop._run(job)
        assert not h.stores.manifest.file_states("vault/Notes/")
        assert h.problems.active_in(REBUILD_AREA, subject=REFUSED) is None
    finally:
        h.close()


def test_a_rebuild_is_refused_at_its_turn_when_the_vault_went_offline_since_the_request(
    make_cfg: Any, vault: Path
) -> None:
    """The vault's share goes away between the request and the rebuild's turn: refused at the turn
    with the request's own message (exit 7), nothing emptied (was: only a mass deletion held was
    checked again, and the rebuild ran against the missing share)."""
    from sidecar.contracts.errors import UnreadableError

    _notes(vault, 5)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        keys = set(h.stores.manifest.file_states("vault/"))
        asked: list[str] = []

        def away() -> None:
            vault.rename(vault.parent / "unmounted")  # the share goes away before the turn
            with pytest.raises(UnreadableError) as refused:
                h.indexer.refuse_rebuild()  # what the request would say now
            asked.append(str(refused.value))

        _loop, said = _refused_at_its_turn(h, away)
        assert set(h.stores.manifest.file_states("vault/")) == keys
        assert said == asked[0]
    finally:
        h.close()


def test_a_rebuild_refused_at_its_turn_for_an_offline_vault_leaves_status_once_it_is_back(
    make_cfg: Any, vault: Path
) -> None:
    """A rebuild refused at its turn for a share offline: said while it is, and no longer a
    PROBLEM once a whole sweep reads the share again (kept under Recovered); the sweep of the
    refusal itself keeps it said (was: said until a rebuild ran or a restart, its cause gone)."""
    from sidecar.daemon.indexing import REBUILD_AREA, REFUSED, IndexLoop

    _notes(vault, 5)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
        loop.request_sweep(rebuild=True)
        vault.rename(vault.parent / "unmounted")
        job = loop._next()
        assert job is not None and job.rebuild
        loop._run(job)
        assert h.problems.active_in(REBUILD_AREA, subject=REFUSED) is not None
        loop.request_sweep()  # a whole sweep, the share still away: still said
        job = loop._next()
        assert job is not None
        loop._run(job)
        assert h.problems.active_in(REBUILD_AREA, subject=REFUSED) is not None
        (vault.parent / "unmounted").rename(vault)  # the share is back
        loop.request_sweep()
        job = loop._next()
        assert job is not None
        loop._run(job)
        assert h.problems.active_in(REBUILD_AREA, subject=REFUSED) is None
        recent = h.problems.describe()["recent"]
        # Its cause as the last check found it: the vault and its wiki marked offline by the sweep.
        assert any(r["error"].startswith("not rebuilt: vault, wiki cannot be read now") for r in recent)
    finally:
        h.close()


def test_a_rebuild_refused_at_its_turn_stays_said_when_its_sweep_reads_notes_put_back(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild refused at its turn (the disk filled) whose sweep reads the notes an earlier
    rebuild put back: the refusal stays said and `index --rebuild` exits 7 with it (was: the
    sweep cleared the rebuild's problem as the notes were read, and the command exited 0)."""
    from sidecar.clients.cli_admin import _rebuild_problem, _rebuild_unfinished
    from sidecar.daemon.indexing import IndexLoop
    from sidecar.stores import manifest_aside

    _notes(vault, 5)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        failing = _failing_reads(monkeypatch, vault / "Notes" / "n1.md")
        h.indexer.clear()
        h.sweep()
        assert h.problems.active_in("rebuild") is not None  # 1 note put back
        failing[0] = False
        # The disk filled: the turn's check (the request's, room first) finds no room for a copy.
        monkeypatch.setattr(manifest_aside, "free_bytes", lambda _folder: 4096)
        loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
        loop.request_sweep(rebuild=True)
        job = loop._next()
        assert job is not None and job.rebuild
        loop._run(job)
        assert h.problems.active_in("rebuild") is None  # the note put back is read
        why = _rebuild_problem({"problems": {"active": h.problems.active()}})
        assert why is not None and why.startswith("not rebuilt: the disk of the index")
        assert _rebuild_unfinished(why) == 7
    finally:
        h.close()


def test_rebuild_problem_names_a_refusal_before_notes_put_back() -> None:
    """Both said: the refusal at the rebuild's turn is what `index --rebuild` reports."""
    from sidecar.clients.cli_admin import _rebuild_problem

    put_back = {"area": "rebuild", "error": "the rebuild could not read 1 note(s) of vault"}
    refused = {"area": "rebuild", "subject": "refused", "error": "not rebuilt: the disk filled"}
    other = {"area": "index", "error": "not rebuilt: elsewhere"}
    assert _rebuild_problem({"problems": {"active": [other, put_back, refused]}}) == refused["error"]
    assert _rebuild_problem({"problems": {"active": [put_back]}}) == put_back["error"]
    assert _rebuild_problem({"problems": {"active": [other]}}) is None


def test_the_notes_a_rebuild_put_back_are_kept_with_the_put_back(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keys of the notes put back are written in the put-back's own transaction: a write of
    the meta afterwards that fails (a full disk) no longer loses them, and a restart still says
    the rebuild is not finished (was: written after it, and lost with such a fault)."""
    import sqlite3

    from sidecar.stores.manifest import Manifest

    _notes(vault, 5)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        _failing_reads(monkeypatch, vault / "Notes" / "n1.md")
        h.indexer.clear()
        real = Manifest.set_meta

        def full(self: Manifest, name: str, value: str) -> None:
            if name == "rebuild_put_back":
                raise sqlite3.OperationalError("database or disk is full")
            real(self, name, value)

        monkeypatch.setattr(Manifest, "set_meta", full)
        h.sweep()
        assert h.stores.manifest.get_meta("rebuild_put_back") == '["vault/Notes/n1"]'
    finally:
        h.close()
    monkeypatch.undo()
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        _failing_reads(monkeypatch, vault / "Notes" / "n1.md")
        h.sweep()
        problem = h.problems.active_in("rebuild")
        assert problem is not None and "1 note(s) of vault" in problem["error"]
    finally:
        h.close()


def test_an_error_naming_full_that_is_no_full_disk_is_not_said_as_one(
    big: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest's emptying fails with an error that merely holds the word "full" (a column so
    named): it goes up as the error it is, not as "the disk of the index filled ... Nothing was
    changed" (was: told apart by the word); a full disk is told by SQLite's result code."""
    import sqlite3

    from sidecar.index.writes import disk_full
    from sidecar.stores.manifest import Manifest

    def odd(self: Manifest, db: sqlite3.Connection) -> None:
        db.execute("SELECT full FROM files")

    monkeypatch.setattr(Manifest, "set_aside", odd)
    with pytest.raises(sqlite3.OperationalError, match="no such column: full"):
        big.indexer.clear()
    assert big.stores.manifest.file_states("vault/")
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (x)")
    db.execute("PRAGMA max_page_count = 2")
    with pytest.raises(sqlite3.OperationalError) as exc:
        db.executemany("INSERT INTO t VALUES (?)", [(b"x" * 4096,)] * 4)
    assert exc.value.sqlite_errorcode == 13 and disk_full(exc.value)
    db.close()


def _wait_for(cond: Any, tries: int = 200) -> bool:
    """Poll ``cond`` (another thread's progress) for up to ~10 s; its last answer."""
    for _ in range(tries):
        if cond():
            return True
        time.sleep(0.05)
    return bool(cond())


def test_a_slow_share_is_indexed_not_given_up_at_the_same_listing_each_sweep(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share whose listing of one folder answers after probeTimeoutSeconds on every sweep
    (a cold SMB cache) is slow, not hung: once the listing given up on answers by itself, the
    root's next scan waits for its calls up to scanTimeoutSeconds, and says so while it waits.
    It was given up on at the same listing every sweep, offline for good, nothing new indexed."""
    from sidecar.daemon.watchdog import status_line

    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.5}), FakeEmbedder())
    said: list[Any] = []
    try:
        h.indexer.sweep()
        st = h.supervisor.roots["vault"]
        write(vault / "Recipes" / "New.md", "# New\n\nThe quince tart.\n")
        real = os.scandir

        def scandir(path: Any = ".") -> Any:
            if Path(path) == vault / "Recipes":
                # Answers late every time: once the sweep was given up on it, or once the sweep
                # said it waits past the probe timeout (the beat tells it after a second).
                _wait_for(lambda: st.hung_on is not None or h.supervisor.waiting is not None)
                said.append(h.supervisor.describe_waiting())
                said.append(status_line(h.indexer.activity, h.supervisor, h.stores.manifest, "ok"))
            return real(path)

        monkeypatch.setattr(sources_mod.os, "scandir", scandir)
        h.indexer.sweep()
        assert st.offline and "listing Recipes" in str(st.error)
        assert _wait_for(lambda: not _stuck_readers("vault"))  # it answered: its scan ended there
        st.next_retry = 0.0
        h.indexer.sweep(only=frozenset(h.supervisor.due()))
        assert not st.offline and st.slow
        assert "vault/Recipes/New" in h.stores.manifest.file_states("vault/")
        waited = said[-2]
        assert waited is not None and waited["slow"] and waited["path"] == "Recipes"
        assert waited["timeout_seconds"] == h.cfg.watch.scan_timeout_seconds
        bound = f"(a slow share: up to {h.cfg.watch.scan_timeout_seconds:.0f} s)"
        assert f"for vault to answer the listing of Recipes {bound}" in said[-1]
        assert h.supervisor.describe(lambda _p: True)[0]["slow"] is True
        monkeypatch.setattr(sources_mod.os, "scandir", real)
        h.indexer.sweep()  # every call quick again: given up per call again
        assert not st.slow
    finally:
        h.close()


def test_status_stops_naming_a_listing_once_it_answered(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing given up on that answers later: the scan it was part of ends at its next call
    (nothing would use what it finds), so the root is not said to hang on it any more. The
    scan went on with the rest of the share, the root said "(listing Recipes) still hangs"
    while it did, and no sweep started until it ended."""
    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.5}), FakeEmbedder())
    recipes, projects = threading.Event(), threading.Event()
    listed: list[str] = []
    try:
        h.indexer.sweep()
        real = os.scandir

        def scandir(path: Any = ".") -> Any:
            listed.append(Path(path).name)
            if Path(path) == vault / "Recipes":
                recipes.wait(20)
            elif Path(path) == vault / "Projects":
                projects.wait(20)
            return real(path)

        monkeypatch.setattr(sources_mod.os, "scandir", scandir)
        h.indexer.sweep()
        st = h.supervisor.roots["vault"]
        assert "listing Recipes" in str(st.error) and st.hanging is not None
        listed.clear()
        recipes.set()
        assert _wait_for(lambda: not _stuck_readers("vault"), tries=100)
        assert "Projects" not in listed and st.hanging is None
        projects.set()
        st.next_retry = 0.0
        h.indexer.sweep(only=frozenset(h.supervisor.due()))
        assert not st.offline and "still hangs" not in str(st.error)
    finally:
        recipes.set()
        projects.set()
        h.close()


def test_a_file_event_in_a_folder_whose_listing_hangs_is_given_up_naming_it(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file event for a folder whose listing hangs: the look at it says what it waits on and
    gives up after probeTimeoutSeconds, as a sweep does (it waited scanTimeoutSeconds, naming
    nothing)."""
    h = Harness(
        make_cfg(vault, **{"watch.probeTimeoutSeconds": 2.5, "watch.scanTimeoutSeconds": 60}), FakeEmbedder()
    )
    release = threading.Event()
    seen: list[Any] = []
    try:
        h.indexer.sweep()
        hang_listing(monkeypatch, vault / "Recipes", release)
        looking = threading.Thread(
            target=lambda: h.indexer.sweep(only=frozenset(), paths=[str(vault / "Recipes")]), daemon=True
        )
        looking.start()

        def waits() -> bool:
            seen.append(h.supervisor.describe_waiting())
            return not looking.is_alive()

        _wait_for(waits, tries=200)
        looking.join(5)
        assert not looking.is_alive() and not release.is_set()
        said = [s for s in seen if s]
        assert said and said[0]["call"] == "listing" and said[0]["path"] == "Recipes"
        st = h.supervisor.roots["vault"]
        assert st.offline and "listing Recipes" in str(st.error)
    finally:
        release.set()
        h.close()


def test_status_and_index_say_a_slow_share_and_the_bound_in_force(vault: Path, serve_in_process: Any) -> None:
    """A listing of a slow share (one that answered after probeTimeoutSeconds before) is said to
    be waited on as a slow share, up to scanTimeoutSeconds, not as a hung share given up on after
    probeTimeoutSeconds."""
    from sidecar.clients.cli_admin import _say_waiting
    from sidecar.clients.cli_render import render_status

    server = serve_in_process(vault, model="fake")
    supervisor = server.harness.supervisor
    supervisor.roots["vault"].slow = True
    supervisor.waiting = ("vault", "Recipes", time.monotonic() - 3, "listing")
    health = server.call("health")
    supervisor.waiting = None
    waiting = health["index"]["waiting"]
    assert waiting["slow"] and waiting["timeout_seconds"] == server.cfg.watch.scan_timeout_seconds
    assert "to answer the listing of Recipes (a slow share: a listing or stat of it took longer than " in (
        render_status(health)
    )
    assert next(r for r in health["roots"] if r["name"] == "vault")["slow"] is True

    class Bar:
        def __init__(self) -> None:
            self.said: list[str] = []

        def say(self, text: str) -> None:
            self.said.append(text)

    bar = Bar()
    _say_waiting(bar, waiting, set())  # type: ignore[arg-type]
    bound = server.cfg.watch.scan_timeout_seconds
    assert f"the listing of Recipes (a slow share); given up after {bound:.0f} s" in bar.said[0]


def test_a_file_events_quick_look_leaves_a_slow_share_slow(make_cfg: Any, vault: Path) -> None:
    """Only a whole scan with every call quick ends a share's being slow: a file event's look at
    one note (a call or two) took it back to giving up per call, and the next sweep was given up
    at the same slow listing again."""
    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.5}), FakeEmbedder())
    try:
        h.indexer.sweep()
        st = h.supervisor.roots["vault"]
        st.slow = True
        write(vault / "Recipes" / "Bread.md", "# Bread\n\nRye, slowly.\n")
        h.indexer.sweep(only=frozenset(), paths=[str(vault / "Recipes" / "Bread.md")])
        assert st.slow
        h.indexer.sweep()
        assert not st.slow
    finally:
        h.close()


def test_an_event_sweep_looks_up_only_its_own_notes_among_those_put_back(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With notes a rebuild put back, a sweep of file events looks up only the put-back notes of
    its batch (was: every put-back note at every sweep, a second per sweep with tens of
    thousands); one read by it leaves what status says, and a whole sweep settles the rest."""
    from sidecar.stores.manifest import Manifest

    notes = _notes(vault, 30, "Share")
    write(vault / "Other.md", "# Other\n\nfirst words\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        failing = _failing_reads(monkeypatch, vault / "Share")
        h.indexer.clear()
        h.sweep()
        put_back = {f"vault/Share/n{i}" for i in range(30)}
        assert h.indexer._put_back == put_back
        failing[0] = False
        asked: list[str] = []
        real = Manifest.file_states_of

        def counting(self: Manifest, keys: Any) -> Any:
            asked.extend(k for k in keys if k in put_back)
            return real(self, keys)

        monkeypatch.setattr(Manifest, "file_states_of", counting)
        write(vault / "Other.md", "# Other\n\nnew words\n")
        h.indexer.sweep(only=frozenset(), paths={str(vault / "Other.md")})
        assert asked == []  # none of the put-back notes is in the batch
        h.indexer.sweep(only=frozenset(), paths={str(notes[3])})
        assert set(asked) == {"vault/Share/n3"}  # its own, whatever the batch's lookups
        problem = h.problems.active_in("rebuild")
        assert problem is not None and "could not read 29 note(s)" in problem["error"]
        asked.clear()
        h.sweep()  # a whole sweep reads the rest
        assert h.problems.active_in("rebuild") is None and not h.indexer._put_back
    finally:
        h.close()


def test_put_back_notes_read_by_file_events_are_written_down_at_the_whole_sweep(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Notes a rebuild put back, read one by one by file events: status follows each read, and
    the manifest's row of those still unread (one JSON row of every key) is written at the next
    whole sweep, not at each read (20,000 keys are about 1 MB written per note read back)."""
    import json

    read_now = _notes(vault, 3, "Share/A")
    _notes(vault, 5, "Share/B")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        failing = _failing_reads(monkeypatch, vault / "Share")
        h.indexer.clear()
        h.sweep()
        assert len(h.indexer._put_back) == 8
        failing[0] = False
        _failing_reads(monkeypatch, vault / "Share" / "B")  # B stays unreadable
        manifest = h.stores.manifest
        rows: list[str] = []
        real_set = manifest.set_meta

        def set_meta(key: str, value: str) -> None:
            rows.append(key)
            real_set(key, value)

        monkeypatch.setattr(manifest, "set_meta", set_meta)
        for note in read_now:
            write(note, "# Edited\n\nread back by its event\n")
            h.indexer.sweep(only=frozenset(), paths={str(note)})
        problem = h.problems.active_in("rebuild")
        assert problem is not None and "could not read 5 note(s)" in problem["error"]
        assert "rebuild_put_back" not in rows
        h.sweep()
        assert rows.count("rebuild_put_back") == 1
        assert set(json.loads(manifest.get_meta("rebuild_put_back") or "[]")) == {
            f"vault/Share/B/n{i}" for i in range(5)
        }
    finally:
        h.close()


def test_a_put_back_memory_note_written_or_deleted_is_no_longer_said_unread(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory notes a rebuild put back (their reads failed during it), then rewritten by a memory
    write (``index_now``) or deleted: no longer counted as not read back at once (was: until the
    next whole sweep); the last one clears the rebuild problem and the manifest's row."""
    from sidecar.vault.sources import inbox_root

    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        inbox = h.cfg.agents_dir / "ops" / "memory"
        write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
        write(inbox / "keys.md", "# Keys\n\nThe spare key is with the neighbour.\n")
        h.sweep()
        from sidecar.index import records as records_mod

        def read_inbox_note(*_args: Any) -> Any:  # stays failing: the write's own bytes are indexed
            raise records_mod.NoteUnreadable("unreadable (Input/output error)")

        monkeypatch.setattr(records_mod, "read_inbox_note", read_inbox_note)
        h.indexer.clear()
        h.sweep()
        assert h.indexer._put_back == {"memory/ops/plan", "memory/ops/keys"}
        data = b"# Plan\n\nRotate the disks on Sunday.\n"
        write(inbox / "plan.md", data.decode())
        st = (inbox / "plan.md").stat()
        h.indexer.index_now(
            inbox_root(h.cfg, "ops"), inbox / "plan.md", (data, st.st_mtime_ns, st.st_ctime_ns)
        )
        assert h.indexer._put_back == {"memory/ops/keys"}
        problem = h.problems.active_in("rebuild")
        assert problem is not None and "could not read 1 note(s)" in problem["error"]
        h.indexer.delete(["memory/ops/keys"])
        assert not h.indexer._put_back and h.problems.active_in("rebuild") is None
        assert h.stores.manifest.get_meta("rebuild_put_back") == ""
    finally:
        h.close()


def _refuse_inbox(inbox: Path, how: str, outside: Path) -> None:
    """Make an agent's inbox one sidecar refuses: a symbolic link (to ``outside``, where its
    notes go, with one more), or a folder of another user (needs root: skipped otherwise)."""
    if how == "symlink":
        inbox.rename(outside)
        inbox.symlink_to(outside)
        write(outside / "through.md", "# Through\n\nwritten behind the link\n")
        return
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    os.chown(inbox, 65534, 65534)


@pytest.mark.parametrize("how", ["symlink", "owner"])
def test_an_inbox_refused_after_its_notes_were_indexed_is_said_as_a_problem(
    make_cfg: Any, vault: Path, tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An agent's inbox with notes indexed turned into a symbolic link or another user's folder:
    an ordinary sweep drops its notes (a refused inbox is neither read nor served) and says so,
    a problem naming the inbox, why and how many notes left, logged once; it clears once the
    inbox is the agent's own folder again and its notes are back (was: dropped with only a
    skipped-files line)."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        inbox = h.cfg.agents_dir / "ops" / "memory"
        write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
        write(inbox / "keys.md", "# Keys\n\nThe spare key is with the neighbour.\n")
        h.sweep()
        _refuse_inbox(inbox, how, tmp_path / "outside")
        with caplog.at_level(logging.INFO):
            h.sweep()
            h.sweep()
        assert h.stores.manifest.file_states("memory/") == {}
        said = h.problems.active_in("inbox", subject="ops")
        assert said is not None, h.problems.active()
        why = "symbolic link" if how == "symlink" else "another user"
        assert "agents/ops/memory" in said["error"] and why in said["error"]
        assert "2 of its notes left the index" in said["error"] and str(inbox) in said["error"]
        assert caplog.text.count("inbox_refused_dropped folder=agents/ops/memory inboxes=1 notes=2") == 1
        assert caplog.text.count("problem area=inbox subject=ops") == 1
        if how == "symlink":
            inbox.unlink()
            (tmp_path / "outside").rename(inbox)
        else:
            os.chown(inbox, os.getuid(), os.getgid())
        h.sweep()
        assert h.problems.active_in("inbox", subject="ops") is None
        assert {"memory/ops/plan", "memory/ops/keys"} <= set(h.stores.manifest.file_states("memory/"))
    finally:
        h.close()


@pytest.mark.parametrize("event", ["delete", "add", "change", "rename"])
def test_a_file_event_in_an_inbox_made_a_link_drops_its_notes_at_once(
    make_cfg: Any, vault: Path, tmp_path: Path, event: str
) -> None:
    """An inbox with notes indexed made a symbolic link, then a note behind the link deleted,
    added, changed or renamed: its file event drops every note of the inbox at once and says the
    problem, as the full sweep does (was: the deleted note alone left, the others stayed
    searchable until the full sweep, and an added one was read through the link)."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        inbox = h.cfg.agents_dir / "ops" / "memory"
        write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
        write(inbox / "keys.md", "# Keys\n\nThe spare key is with the neighbour.\n")
        h.sweep()
        outside = tmp_path / "outside"
        inbox.rename(outside)
        inbox.symlink_to(outside)
        if event == "delete":
            (outside / "plan.md").unlink()
            paths = [inbox / "plan.md"]
        elif event == "add":
            write(outside / "new.md", "# New\n\nwritten behind the link\n")
            paths = [inbox / "new.md"]
        elif event == "change":
            write(outside / "plan.md", "# Plan\n\nRotate the tapes.\n")
            paths = [inbox / "plan.md"]
        else:
            (outside / "plan.md").rename(outside / "rota.md")
            paths = [inbox / "plan.md", inbox / "rota.md"]
        h.indexer.sweep(only=frozenset(), paths={str(p) for p in paths})
        assert h.stores.manifest.file_states("memory/") == {}
        said = h.problems.active_in("inbox", subject="ops")
        assert said is not None and "2 of its notes left the index" in said["error"], h.problems.active()
        assert not [x for x in search(h, "spare key neighbour") if x["reference"].startswith("memory/")]
    finally:
        h.close()


def test_the_notes_a_refused_inbox_lost_are_still_said_after_a_restart(
    make_cfg: Any, vault: Path, tmp_path: Path
) -> None:
    """An inbox refused after its notes were indexed: after a restart its problem and `sidecar
    index`'s summary still say how many notes left the index (kept in the manifest; was: "its
    notes are not indexed", 0, as the count lived in memory); once it is mended and read, a
    restart says nothing of it."""
    cfg = make_cfg(vault)
    inbox = cfg.agents_dir / "ops" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
    write(inbox / "keys.md", "# Keys\n\nThe spare key is with the neighbour.\n")
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        _refuse_inbox(inbox, "symlink", tmp_path / "outside")
        h.sweep()
    finally:
        h.close()
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        said = h.problems.active_in("inbox", subject="ops")
        assert said is not None and "2 of its notes left the index" in said["error"], said
        assert [r["notes"] for r in h.indexer.changes.refused.summary()] == [2]
        inbox.unlink()
        (tmp_path / "outside").rename(inbox)
        h.sweep()
        assert h.problems.active_in("inbox", subject="ops") is None
    finally:
        h.close()
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        assert h.indexer.changes.refused.summary() == []
        assert h.problems.active_in("inbox", subject="ops") is None
    finally:
        h.close()


def test_the_notes_a_refused_inbox_lost_are_still_said_after_the_home_was_away(
    make_cfg: Any, vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused inbox's count of notes that left the index is kept while the home has a
    problem for a sweep (its share unmounted a moment): once it is back, status still says
    how many left, and so does the manifest (was: forgotten, "its notes are not indexed")."""
    cfg = make_cfg(vault)
    inbox = cfg.agents_dir / "ops" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
    write(inbox / "keys.md", "# Keys\n\nThe spare key is with the neighbour.\n")
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        _refuse_inbox(inbox, "symlink", tmp_path / "outside")
        h.sweep()
        assert [r["notes"] for r in h.indexer.changes.refused.summary()] == [2]
        with monkeypatch.context() as away:
            away.setattr(type(h.supervisor.home), "problem", lambda _self: "the agents folder is gone")
            h.sweep()
        assert [r["notes"] for r in h.indexer.changes.refused.summary()] == [2]
        h.sweep()
        said = h.problems.active_in("inbox", subject="ops")
        assert said is not None and "2 of its notes left the index" in said["error"], said
        assert json.loads(h.stores.manifest.get_meta("refused_inboxes") or "[]")[0][-1] == 2
    finally:
        h.close()


def test_a_count_of_refused_notes_not_saved_is_said_once_per_sweep(
    make_cfg: Any,
    vault: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The index cannot be written (a full disk): the count of a refused inbox's notes that
    left the index is tried once per full sweep, one warning each, not at each look at the roots
    (an event batch, the links' check); it is saved at the first sweep that can write."""
    cfg = make_cfg(vault)
    inbox = cfg.agents_dir / "ops" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        manifest = h.stores.manifest
        real = manifest.set_meta

        def failing(name: str, value: str) -> None:
            if name == "refused_inboxes":
                raise sqlite3.OperationalError("attempt to write a readonly database")
            real(name, value)

        _refuse_inbox(inbox, "symlink", tmp_path / "outside")
        with monkeypatch.context() as full, caplog.at_level(logging.WARNING):
            full.setattr(manifest, "set_meta", failing)
            h.sweep()
            for _ in range(5):
                h.indexer.changes.roots()
        assert caplog.text.count("refused_inboxes_not_saved") == 1
        h.sweep()
        assert json.loads(manifest.get_meta("refused_inboxes") or "[]")[0][-1] == 1
    finally:
        h.close()


def test_a_refused_inbox_removed_clears_its_problem(make_cfg: Any, vault: Path, tmp_path: Path) -> None:
    """The problem of a refused inbox whose notes left the index goes once the inbox is removed
    (the agent retired): nothing of it is left to read."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        inbox = h.cfg.agents_dir / "ops" / "memory"
        write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
        h.sweep()
        _refuse_inbox(inbox, "symlink", tmp_path / "outside")
        h.sweep()
        assert h.problems.active_in("inbox", subject="ops") is not None
        inbox.unlink()
        h.sweep()
        assert h.problems.active_in("inbox", subject="ops") is None
    finally:
        h.close()


def test_the_agents_folder_behind_a_link_is_one_problem_naming_it(
    make_cfg: Any, vault: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The agents folder itself made a symbolic link: one problem (and one log line) for it,
    naming at most three agents and how many more, the advice naming the agents folder (was:
    one problem and one log line per agent, each telling to mend that agent's inbox)."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        agents = h.cfg.agents_dir
        for i in range(12):
            write(agents / f"agent{i:02}" / "memory" / "plan.md", f"# Plan {i}\n\nRotate disk {i}.\n")
        h.sweep()
        agents.rename(tmp_path / "agents-elsewhere")
        agents.symlink_to(tmp_path / "agents-elsewhere")
        with caplog.at_level(logging.INFO):
            h.sweep()
            h.sweep()
        inbox = [p for p in h.problems.active() if p["area"] == "inbox"]
        assert len(inbox) == 1, inbox
        said = inbox[0]["error"]
        assert "agent00, agent01, agent02 and 9 more" in said and "agent03" not in said
        assert f"make {agents} a folder of your own" in said and "12 of their notes left the index" in said
        assert caplog.text.count("inbox_refused_dropped") == 1
        assert "inbox_refused_dropped folder=agents inboxes=12 notes=12" in caplog.text
        assert caplog.text.count("problem area=inbox") == 1
        agents.unlink()
        (tmp_path / "agents-elsewhere").rename(agents)
        h.sweep()
        assert [p for p in h.problems.active() if p["area"] == "inbox"] == []
        assert len(h.stores.manifest.file_states("memory/")) == 12
    finally:
        h.close()


def test_an_agent_folder_behind_a_link_is_named_as_the_folder_to_mend(
    make_cfg: Any, vault: Path, tmp_path: Path
) -> None:
    """An agent's folder (not its inbox) made a symbolic link: the problem names that folder
    as the one to make a folder of your own again (was: the inbox below it)."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        agent = h.cfg.agents_dir / "ops"
        write(agent / "memory" / "plan.md", "# Plan\n\nRotate the disks.\n")
        h.sweep()
        agent.rename(tmp_path / "ops-elsewhere")
        agent.symlink_to(tmp_path / "ops-elsewhere")
        h.sweep()
        said = h.problems.active_in("inbox", subject="ops")
        assert said is not None
        assert f"make {agent} a folder of your own" in said["error"], said
        assert "inbox (agents/ops) is a symbolic link" in said["error"]
    finally:
        h.close()


def test_sidecar_index_without_a_daemon_names_a_refused_inbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`sidecar index` with no daemon, an inbox with notes indexed turned into a symbolic link:
    its line names the refused inbox and the notes that left the index beside the offline
    roots, and so does --json (was: only "N removed", the problem a raw log line)."""
    from sidecar.clients.cli import main

    vault = make_vault(tmp_path / "vault")
    home = tmp_path / "h"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("SIDECAR_EMBEDDER_ENABLED", "false")
    argv = ["index", "--home", str(home), "--vault", str(vault)]
    assert main(argv) == 0
    inbox = home / "agents" / "ops" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
    assert main(argv) == 0
    inbox.rename(tmp_path / "outside")
    inbox.symlink_to(tmp_path / "outside")
    capsys.readouterr()
    assert main(argv) == 0
    said = capsys.readouterr()
    assert (
        "; memory inbox refused, agents/ops/memory is a symbolic link or not a folder: 1 note left the index"
        in said.out + said.err
    )
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["refused_inboxes"] == [
        {
            "folder": "agents/ops/memory",
            "why": "is a symbolic link or not a folder",
            "agents": ["ops"],
            "notes": 1,
        }
    ]


def test_sidecar_index_through_the_daemon_names_a_refused_inbox(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """`sidecar index` through a running daemon, an inbox with notes indexed turned into a
    symbolic link: its line and its --json name the refused inbox beside the offline roots."""
    d = daemon_factory(vault, env={"SIDECAR_EMBEDDER_ENABLED": "false"}).start()
    inbox = d.home / "agents" / "ops" / "memory"
    write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
    d.run_cli("index", check=True)
    inbox.rename(tmp_path / "outside")
    inbox.symlink_to(tmp_path / "outside")
    ran = d.run_cli("index", check=True)
    assert (
        "; memory inbox refused, agents/ops/memory is a symbolic link or not a folder: 1 note left the index"
        in ran.stdout + ran.stderr
    ), ran
    out = json.loads(d.run_cli("index", "--json", check=True).stdout)
    assert out["refused_inboxes"] == [
        {
            "folder": "agents/ops/memory",
            "why": "is a symbolic link or not a folder",
            "agents": ["ops"],
            "notes": 1,
        }
    ]


@pytest.mark.parametrize("how", ["symlink", "owner"])
def test_a_rebuild_is_refused_while_an_inbox_with_notes_indexed_is_refused(
    make_cfg: Any, vault: Path, tmp_path: Path, how: str
) -> None:
    """An agent's inbox with notes indexed turned into a symbolic link or another user's folder:
    the rebuild is refused saying so, nothing changed (was: it ran, put the notes back as if
    their share had gone away, served them from the refused inbox, and the next sweep dropped
    them without a word)."""
    from sidecar.contracts.errors import UnreadableError

    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        inbox = h.cfg.agents_dir / "ops" / "memory"
        write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
        h.sweep()
        _refuse_inbox(inbox, how, tmp_path / "outside")
        with pytest.raises(UnreadableError) as refused:
            h.indexer.refuse_rebuild()
        said = str(refused.value)
        assert said.startswith("not rebuilt: a memory inbox with notes indexed is not read (memory/ops: ")
        assert ("symbolic link" if how == "symlink" else "another user") in said
        assert "keeps those notes as indexed" not in said and "`sidecar index` removes its notes" in said
        assert set(h.stores.manifest.file_states("memory/")) == {"memory/ops/plan"}
        assert not h.stores.manifest.has_aside()
    finally:
        h.close()


def test_a_rebuild_refused_for_many_inboxes_names_a_few_by_cause(
    make_cfg: Any, vault: Path, tmp_path: Path
) -> None:
    """Many agents' inboxes refused: at most 3 named per cause, "and N more", in the plural; the
    agents folder behind a symbolic link is named as that folder (was: every agent listed with
    the same cause, 3.5 KB for 40 agents, "a memory inbox ... make it a folder")."""
    from sidecar.contracts.errors import UnreadableError

    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        agents = h.cfg.agents_dir
        for i in range(40):
            write(agents / f"agent{i:02}" / "memory" / "plan.md", f"# Plan {i}\n\nRotate disk {i}.\n")
        h.sweep()
        for i in range(5):  # five inboxes behind a link each
            inbox = agents / f"agent{i:02}" / "memory"
            inbox.rename(tmp_path / f"outside{i}")
            inbox.symlink_to(tmp_path / f"outside{i}")
        with pytest.raises(UnreadableError) as refused:
            h.indexer.refuse_rebuild()
        said = str(refused.value)
        assert said.startswith(
            "not rebuilt: 5 memory inboxes with notes indexed are not read (memory/agent00, memory/agent01, "
            "memory/agent02 and 2 more: a symbolic link or not a folder)"
        )
        assert "make them folders of your own again" in said.lower() and "agent03" not in said
        for i in range(5):  # back as they were; then the agents folder itself behind a link
            inbox = agents / f"agent{i:02}" / "memory"
            inbox.unlink()
            (tmp_path / f"outside{i}").rename(inbox)
        agents.rename(tmp_path / "agents-elsewhere")
        agents.symlink_to(tmp_path / "agents-elsewhere")
        with pytest.raises(UnreadableError) as refused:
            h.indexer.refuse_rebuild()
        said = str(refused.value)
        assert said.startswith(
            f"not rebuilt: the agents folder {agents} is a symbolic link or not a folder: the memory "
            "inboxes of 40 agents are not read (with notes indexed)."
        )
        assert "make the agents folder a folder of your own again" in said.lower()
        assert "memory/agent" not in said and len(said) < 1000
    finally:
        h.close()


def _late_listing_of(monkeypatch: pytest.MonkeyPatch, folder: Path, h: Harness) -> None:
    """Listing ``folder`` answers late every time: once the sweep gave up on it, or said it waits
    past a second (a cold SMB cache)."""
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path) == folder:
            st = h.supervisor.roots["vault"]
            _wait_for(lambda: st.hung_on is not None or h.supervisor.waiting is not None)
        return real(path)

    monkeypatch.setattr(sources_mod.os, "scandir", scandir)


def test_a_slow_share_is_remembered_by_the_next_run(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share found slow (a listing given up on that answered by itself) is remembered in the
    manifest: the next run (a restarted daemon, a `sidecar index` of its own) waits for its
    calls with the whole-scan bound from its first sweep, and forgets it once a whole scan is
    quick again. Each run learned it anew in memory: `sidecar index` alone gave up on the same
    listing every time."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.5})
    real = os.scandir
    h = Harness(cfg, FakeEmbedder())
    try:
        h.indexer.sweep()
        _late_listing_of(monkeypatch, vault / "Recipes", h)
        h.indexer.sweep()
        st = h.supervisor.roots["vault"]
        assert st.offline and "listing Recipes" in str(st.error)
        assert _wait_for(lambda: not _stuck_readers("vault"))
        st.next_retry = 0.0
        h.indexer.sweep(only=frozenset(h.supervisor.due()))
        assert not st.offline and st.slow
        assert h.stores.manifest.get_meta("slow:vault") is not None
    finally:
        h.close()
    write(vault / "Recipes" / "New.md", "# New\n\nThe quince tart.\n")
    h = Harness(cfg, FakeEmbedder())
    try:
        _late_listing_of(monkeypatch, vault / "Recipes", h)
        h.indexer.sweep()  # the listing late again: waited for from the first sweep, not given up on
        st = h.supervisor.roots["vault"]
        assert not st.offline and st.slow
        assert "vault/Recipes/New" in h.stores.manifest.file_states("vault/")
        monkeypatch.setattr(sources_mod.os, "scandir", real)
        h.indexer.sweep()  # every call quick again: forgotten
        assert not st.slow and h.stores.manifest.get_meta("slow:vault") is None
    finally:
        h.close()
    h = Harness(cfg, FakeEmbedder())
    try:
        assert not h.supervisor.status(sources_mod.vault_roots(cfg)[0]).slow
    finally:
        h.close()


def test_a_slow_mark_whose_write_failed_is_written_at_the_next_sweep(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The write of a share's slow mark fails (a locked or full index disk): this run still
    waits for it as slow, and the mark is written at the root's next sweep, so the next run
    knows it too (was: written only when the share changed from quick to slow, never again
    within the run; every later run gave up at the same listing)."""
    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.5}), FakeEmbedder())
    manifest = h.stores.manifest
    real_set = manifest.set_meta
    failures = [1]

    def set_meta(key: str, value: str) -> None:
        if key.startswith("slow:") and failures[0]:
            failures[0] -= 1
            raise sqlite3.OperationalError("database is locked")
        real_set(key, value)

    try:
        h.indexer.sweep()
        _late_listing_of(monkeypatch, vault / "Recipes", h)
        monkeypatch.setattr(manifest, "set_meta", set_meta)
        h.indexer.sweep()  # given up on at the listing, which answers late
        st = h.supervisor.roots["vault"]
        assert _wait_for(lambda: not _stuck_readers("vault"))
        st.next_retry = 0.0
        with caplog.at_level(logging.WARNING, logger="sidecar.vault.supervisor"):
            h.indexer.sweep(only=frozenset(h.supervisor.due()))  # learnt slow; the mark's write fails
        assert st.slow and not failures[0] and manifest.get_meta("slow:vault") is None
        assert "root_meta_failed row=slow:vault" in caplog.text
        h.indexer.sweep()  # the listing late again: still slow, and the mark is written now
        assert st.slow and manifest.get_meta("slow:vault") is not None
    finally:
        h.close()


def test_a_slow_mark_that_cannot_be_written_is_retried_at_scans_and_said_once(
    make_cfg: Any, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An index disk that stays full: the slow mark's write is retried at the root's scans, not
    at each file event's look, and its failure is said once until a write works, which is said
    too (was: a write and a warning at every event batch of the root)."""
    from sidecar.vault.sources import Root
    from sidecar.vault.supervisor import Supervisor

    full = [True]
    rows: dict[str, str] = {}

    class Meta(dict):  # type: ignore[type-arg]
        writes = 0

        def get_meta(self, name: str) -> str | None:
            return rows.get(name)

        def set_meta(self, name: str, value: str) -> None:
            Meta.writes += 1
            if full[0]:
                raise sqlite3.OperationalError("database or disk is full")
            rows[name] = value

        def meta_names(self, prefix: str) -> list[str]:
            return [n for n in rows if n.startswith(prefix)]

        def delete_meta(self, names: Any) -> None:  # a quick scan drops the mark
            Meta.writes += 1
            if full[0]:
                raise sqlite3.OperationalError("database or disk is full")
            for name in names:
                rows.pop(name, None)

    sup = Supervisor(make_cfg(vault), meta=Meta())
    root = Root("vault", vault, exclude="wiki")
    st = sup.status(root)
    with caplog.at_level(logging.INFO, logger="sidecar.vault.supervisor"):
        sup._set_slow(st, True, "listing .")
        for _ in range(20):
            sup.bounded(root, lambda _asking: None)
        assert Meta.writes == 1
        sup.list_root(root)
        sup.list_root(root)
        assert Meta.writes >= 3 and "slow:vault" not in rows  # retried at each scan
        assert caplog.text.count("root_meta_failed") == 1
        full[0] = False
        sup.list_root(root)
        assert caplog.text.count("root_meta_saved row=slow:vault") == 1
        written = Meta.writes
        sup.list_root(root)
        assert Meta.writes == written  # written: not asked again


@pytest.mark.parametrize("how", ["symlink", "owner"])
def test_an_inbox_refused_during_a_rebuild_is_not_put_back_nor_read_through(
    make_cfg: Any, vault: Path, tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An inbox refused while a rebuild runs: its notes are not put back (a refused inbox is
    neither read nor served), nothing behind a link is indexed, and the log and status say
    why (was: put back as if their share had gone away, served, then dropped unsaid)."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        inbox = h.cfg.agents_dir / "ops" / "memory"
        write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
        h.sweep()
        h.indexer.clear()
        _refuse_inbox(inbox, how, tmp_path / "outside")
        with caplog.at_level(logging.WARNING, logger="sidecar.index.indexer"):
            h.sweep()
        assert h.stores.manifest.file_states("memory/") == {}
        assert not h.stores.manifest.has_aside() and not h.indexer._put_back
        # One event for the notes dropped (was: rebuild_inbox_refused and inbox_refused_dropped).
        assert caplog.text.count("inbox_refused_dropped") == 1, caplog.text
        assert "rebuild_inbox_refused" not in caplog.text
        assert "inbox_refused_dropped folder=agents/ops/memory inboxes=1 notes=1 why=" in caplog.text
        assert h.problems.active_in("rebuild") is None
        assert any("refused" in why for why in h.indexer.activity.scan_skipped)
    finally:
        h.close()


def test_the_agents_folder_refused_during_a_rebuild_is_one_log_line(
    make_cfg: Any, vault: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The agents folder made a symbolic link while a rebuild runs: the inboxes not put back are
    logged once for the refused folder, as a sweep's inbox_refused_dropped (was: one
    rebuild_inbox_refused line per inbox, grouped apart from the sweep's problem; then that
    line and inbox_refused_dropped both, one event twice)."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        agents = h.cfg.agents_dir
        for i in range(5):
            write(agents / f"agent{i}" / "memory" / "plan.md", f"# Plan {i}\n\nRotate disk {i}.\n")
        h.sweep()
        h.indexer.clear()
        agents.rename(tmp_path / "agents-elsewhere")
        agents.symlink_to(tmp_path / "agents-elsewhere")
        with caplog.at_level(logging.WARNING, logger="sidecar.index"):
            h.sweep()
        assert h.stores.manifest.file_states("memory/") == {}
        assert caplog.text.count("inbox_refused_dropped") == 1, caplog.text
        assert "rebuild_inbox_refused" not in caplog.text
        assert "inbox_refused_dropped folder=agents inboxes=5 notes=5 why=" in caplog.text
    finally:
        h.close()


def test_the_notes_of_an_inbox_refused_during_a_rebuild_are_counted_as_left(
    make_cfg: Any, vault: Path, tmp_path: Path
) -> None:
    """An inbox refused while a rebuild runs: the notes the rebuild does not put back are counted
    among those that left the index, as a sweep counts those it drops (was: "its notes are not
    indexed", 0, although they left)."""
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        inbox = h.cfg.agents_dir / "ops" / "memory"
        write(inbox / "plan.md", "# Plan\n\nRotate the disks.\n")
        write(inbox / "keys.md", "# Keys\n\nThe spare key is with the neighbour.\n")
        h.sweep()
        h.indexer.clear()
        inbox.rename(tmp_path / "outside")
        inbox.symlink_to(tmp_path / "outside")
        h.sweep()
        assert h.stores.manifest.file_states("memory/") == {}
        said = h.problems.active_in("inbox", subject="ops")
        assert said is not None and "2 of its notes left the index" in said["error"], said
        assert [r["notes"] for r in h.indexer.changes.refused.summary()] == [2]
        assert json.loads(h.stores.manifest.get_meta("refused_inboxes") or "[]")[0][-1] == 2
    finally:
        h.close()


def test_a_rebuild_gives_its_copys_pages_back_once_it_is_dropped(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebuild's copy dropped at the end of its sweep: its pages go back to the disk then, a
    step at a time (was: the manifest kept them as free pages until the next start or the daily
    housekeeping, about twice its size after a rebuild)."""
    from sidecar.stores import manifest_file

    monkeypatch.setattr(manifest_file, "_SHRINK_MIN_BYTES", 2**16)  # the share decides here, not the size
    for i in range(40):
        words = " ".join(f"storm{i}x{j} lighthouse keeper logbook" for j in range(300))
        write(vault / "Logs" / f"log{i}.md", f"# Log {i}\n\n{words}\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        db = h.stores.manifest._db

        def pages() -> tuple[int, int]:
            with h.stores.manifest._lock:
                return tuple(
                    db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count")
                )  # type: ignore[return-value]

        h.indexer.clear()
        assert h.stores.manifest.has_aside()
        with_copy = pages()[0]
        h.sweep()
        total, free = pages()
        assert not h.stores.manifest.has_aside()
        assert free * 4 < total and total < with_copy
    finally:
        h.close()


def test_the_retry_of_a_failed_read_keeps_its_backoff_and_warning_across_a_restart(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A note whose read keeps failing: a restart reads it once (a share healed meanwhile is
    read back), and a failure then is its next in a row, kept in the manifest: no new warning
    and a longer wait (was: each restart began its backoff anew and logged one more warning)."""
    _notes(vault, 3)
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        failing = _failing_reads(monkeypatch, vault / "Notes" / "n1.md")
        write(vault / "Notes" / "n1.md", "# Note 1\n\nedited, then unreadable\n")
        with caplog.at_level(logging.WARNING, logger="sidecar.index.indexer"):
            h.sweep()
        assert caplog.text.count("file_kept path=") == 1
    finally:
        h.close()
    caplog.clear()
    h = Harness(cfg, FakeEmbedder())  # a restart
    try:
        with caplog.at_level(logging.INFO, logger="sidecar.index"):
            h.sweep()  # read once: failed again, its second in a row, said at info only
        assert "WARNING" not in [r.levelname for r in caplog.records if "file_kept" in r.getMessage()]
        assert "file_kept path=" in caplog.text
        assert h.indexer.changes.retry_waiting == 0
        unreadable = h.stores.problems.active_in("unreadable")
        assert unreadable is not None and "n1.md" in unreadable["error"]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="sidecar.index"):
            h.sweep()  # waits: 2 full sweeps after a second failure (1 after a first)
        assert "file_kept path=" not in caplog.text
        assert h.indexer.changes.retry_waiting == 1
        failing[0] = False
        os.chmod(vault / "Notes" / "n1.md", 0o644)  # made readable: its ctime moves, read at once
        h.sweep()
        assert h.stores.problems.active_in("unreadable") is None
        assert "edited" in " ".join(c.text for c in h.stores.manifest.chunks_of("vault/Notes/n1"))
    finally:
        h.close()


def _unreadable_then_restart(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, list[bool]]:
    """Three notes indexed, the first edited and then unreadable (kept as indexed), the daemon
    stopped: its read retry is kept in the manifest."""
    _notes(vault, 3)
    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        failing = _failing_reads(monkeypatch, vault / "Notes" / "n1.md")
        write(vault / "Notes" / "n1.md", "# Note 1\n\nedited, then unreadable\n")
        h.sweep()
        assert h.stores.problems.active_in("unreadable") is not None
    finally:
        h.close()
    return cfg, failing


def test_a_rebuild_with_no_daemon_runs_once_the_unreadable_note_reads(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal said `chmod u+r` the note; done, with the daemon stopped: `sidecar index
    --rebuild` runs (was: the read retry kept from before the stop named the note unreadable)."""
    from sidecar.daemon.oneshot import index_once

    cfg, failing = _unreadable_then_restart(make_cfg, vault, monkeypatch)
    failing[0] = False
    os.chmod(vault / "Notes" / "n1.md", 0o644)  # as told; it reads now
    h = Harness(cfg, FakeEmbedder())
    try:
        h.indexer.changes.list_unreadable()  # what `sidecar index --rebuild` does before its check
        h.indexer.refuse_rebuild()
    finally:
        h.close()
    index_once(cfg, rebuild=True)  # the command itself
    h = Harness(cfg, FakeEmbedder())
    try:
        assert "edited" in " ".join(c.text for c in h.stores.manifest.chunks_of("vault/Notes/n1"))
    finally:
        h.close()


@pytest.mark.parametrize("where", ["root", "link"])
def test_a_resolve_that_hangs_is_given_up_on_as_a_stat(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """The root resolved at a scan's start, or a symlink's target resolved to check where it
    leads, on a share that hangs: given up on after probeTimeoutSeconds as a stat is, the root
    offline naming it. Both lay outside the per-call clock and were waited for up to
    scanTimeoutSeconds."""
    (vault / "Link.md").symlink_to(vault / "Garden.md")
    h = Harness(
        make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.5, "watch.scanTimeoutSeconds": 60}), FakeEmbedder()
    )
    release = threading.Event()
    hung = vault if where == "root" else vault / "Link.md"
    real = Path.resolve

    def resolve(self: Path, strict: bool = False) -> Path:
        if self == hung:
            release.wait(20)
        return real(self, strict=strict)

    try:
        h.indexer.sweep()
        monkeypatch.setattr(Path, "resolve", resolve)
        h.indexer.sweep()
        st = h.supervisor.roots["vault"]
        named = "looking up ." if where == "root" else "looking up Link.md"
        assert st.offline and named in str(st.error) and "did not answer" in str(st.error)
    finally:
        release.set()
        h.close()


@pytest.mark.parametrize("where", ["folder", "spelling", "twin", "folder spelling"])
def test_a_file_events_look_ups_on_a_hung_share_are_given_up_on(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A file event's look on a share that hangs at one of its own look-ups (whether a folder on
    the event's path is a link, the listing that tells a case-only rename, whether a deleted
    note's other spelling exists, whether a folder's indexed other spelling is a folder): given
    up on after probeTimeoutSeconds naming it, the root offline. They lay outside the per-call
    clock: the event batch waited up to scanTimeoutSeconds (the last one for good)."""
    h = Harness(
        make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.5, "watch.scanTimeoutSeconds": 60}), FakeEmbedder()
    )
    release = threading.Event()
    hung, paths, named = {
        "folder": (vault / "Recipes", [vault / "Recipes" / "Bread.md"], "looking up Recipes"),
        "spelling": (vault, [vault / "Garden.md", vault / "garden.md"], "listing ."),
        "twin": (vault / "Garden.mD", [vault / "Garden.md"], "looking up Garden.mD"),
        "folder spelling": (vault / "recipes", [vault / "recipes"], "looking up recipes"),
    }[where]
    real_lstat, real_scandir, real_stat = os.lstat, os.scandir, os.stat

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if Path(path) == hung:
            release.wait(10)
        return real_lstat(path, *args, **kwargs)

    def scandir(path: Any = ".") -> Any:
        if Path(path) == hung:
            release.wait(10)
        return real_scandir(path)

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if Path(path) == hung:
            release.wait(10)
        return real_stat(path, *args, **kwargs)

    try:
        h.indexer.sweep()
        if where == "twin":
            (vault / "Garden.md").unlink()
        if where == "folder spelling":  # renamed but for case: the new spelling is stat'ed (isdir)
            (vault / "Recipes").rename(vault / "recipes")
        name, fake = {"spelling": ("scandir", scandir), "folder spelling": ("stat", stat)}.get(
            where, ("lstat", lstat)
        )
        monkeypatch.setattr(os, name, fake)
        h.indexer.sweep(only=frozenset(), paths=[str(p) for p in paths])
        st = h.supervisor.roots["vault"]
        # Given up on at the look-up (the full sweep it escalates to finds the call still hanging).
        assert st.offline and named in str(st.error) and "hung share?" in str(st.error), st.error
    finally:
        release.set()
        monkeypatch.undo()
        h.close()


def test_a_file_events_case_listing_on_a_slow_share_is_timed_per_entry(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listing that tells a case-only rename, on a share that answers a big folder slowly
    (each entry well within probeTimeoutSeconds, the whole listing beyond it): the clock starts
    again at each entry, as a scan's listing, and the root stays online (was: one call under the
    clock, given up on as hung, the vault offline until the next scan learnt it slow)."""
    for i in range(14):
        write(vault / f"Extra {i:02}.md", f"# Extra {i}\n\nfiller {i}\n")
    h = Harness(
        make_cfg(vault, **{"watch.probeTimeoutSeconds": 1.0, "watch.scanTimeoutSeconds": 60}), FakeEmbedder()
    )
    real_listdir, real_scandir = os.listdir, os.scandir

    class Slow:  # a listing whose entries come one by one, each after a while
        def __init__(self, it: Any) -> None:
            self.it = it

        def __enter__(self) -> Slow:
            return self

        def __exit__(self, *exc: object) -> None:
            self.it.close()

        def __iter__(self) -> Slow:
            return self

        def __next__(self) -> Any:
            time.sleep(0.12)
            return next(self.it)

        def close(self) -> None:
            self.it.close()

    def listdir(path: Any = ".") -> list[str]:
        if Path(path) == vault:
            return [e.name for e in Slow(real_scandir(path))]
        return real_listdir(path)

    def scandir(path: Any = ".") -> Any:
        return Slow(real_scandir(path)) if Path(path) == vault else real_scandir(path)

    try:
        h.indexer.sweep()
        monkeypatch.setattr(os, "listdir", listdir)
        monkeypatch.setattr(os, "scandir", scandir)
        h.indexer.sweep(only=frozenset(), paths=[str(vault / "Garden.md"), str(vault / "garden.md")])
        st = h.supervisor.roots["vault"]
        assert not st.offline, st.error
    finally:
        monkeypatch.undo()
        h.close()


def test_offline_index_learns_a_slow_share_within_the_run(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sidecar index` alone on a share whose listing of one folder answers only after it was
    given up on: the run waits for it, learns the share is slow (and keeps that for the next
    runs) and sweeps the root again with the whole-scan bound, so the folder's notes are indexed
    now. The root was left offline, to be given up on at the same listing by every run."""
    from sidecar.daemon.oneshot import index_once

    cfg = make_cfg(vault, **{"embedder.enabled": False, "watch.probeTimeoutSeconds": 0.5})
    index_once(cfg, rebuild=False)
    write(vault / "Recipes" / "New.md", "# New\n\nThe quince tart.\n")
    learning, slow = threading.Event(), threading.Event()
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path) == vault / "Recipes":  # late: past the give-up, then past a second, each time
            (slow if learning.is_set() else learning).wait(20)
        return real(path)

    def told(w: dict[str, Any]) -> None:
        if w.get("learning"):
            learning.set()
        elif w["slow"] and w["path"] == "Recipes":
            slow.set()

    monkeypatch.setattr(sources_mod.os, "scandir", scandir)
    summary = index_once(cfg, rebuild=False, waiting=told)
    assert not summary["offline"] and learning.is_set() and slow.is_set()
    from sidecar.stores.manifest import Manifest

    manifest = Manifest(cfg.index_dir / "manifest.sqlite")
    try:
        assert "vault/Recipes/New" in manifest.file_states("vault/")
        assert manifest.get_meta("slow:vault") is not None
    finally:
        manifest.close()


def test_a_stop_during_a_file_events_look_leaves_the_root_online(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The daemon's stop cuts a file event's look at a folder whose listing hangs: the root is
    not escalated to a full sweep, whose look at the cut call (still running) marked it offline
    ("an earlier call ... still hangs", a retry logged) although only the stop cut the wait."""
    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 300}), FakeEmbedder())
    caplog.set_level(logging.INFO)
    release = threading.Event()
    try:
        h.indexer.sweep()
        hang_listing(monkeypatch, vault / "Recipes", release)
        looking = threading.Thread(
            target=lambda: h.indexer.sweep(only=frozenset(), paths=[str(vault / "Recipes")]), daemon=True
        )
        looking.start()
        assert _wait_for(lambda: h.supervisor.hung_call() is not None)
        h.supervisor.stopping.set()
        looking.join(20)
        assert not looking.is_alive()
        st = h.supervisor.roots["vault"]
        assert not st.offline and st.error is None, st.error
        assert "watcher_retry" not in caplog.text
    finally:
        release.set()
        h.close()


def _too_long_below(folder: Path) -> None:
    """Folders below ``folder`` nested until the last one's path passes the system's limit."""
    limit = os.pathconf(folder, "PC_PATH_MAX") - 1
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    path = str(folder)
    try:
        while (room := limit - 20 - len(path) - 1) > 0:
            name = "d" * min(200, room)
            os.mkdir(name, dir_fd=fd)
            deeper = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd, path = deeper, f"{path}/{name}"
        os.mkdir("e" * 100, dir_fd=fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("how", ["obsidian", "config"])
def test_a_too_long_folder_in_an_excluded_folder_is_no_problem(make_cfg: Any, vault: Path, how: str) -> None:
    """A folder whose path is too long inside a folder the user excluded (Obsidian's Excluded
    files, index.exclude): nothing there is indexed anyway, so no PROBLEM asks to rename it.
    The skip was read before exclusions apply: a standing PROBLEM cleared only by renaming a
    folder the user had left out."""
    import json

    (vault / "Archive").mkdir()
    if how == "obsidian":
        write(vault / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Archive/"]}))
        cfg = make_cfg(vault)
    else:
        cfg = make_cfg(vault, **{"index.exclude": ["Archive/"]})
    (vault / "Kept").mkdir()
    _too_long_below(vault / "Archive")
    _too_long_below(vault / "Kept")
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        problem = h.stores.problems.active_in("path_too_long")
        assert problem is not None and "1 folder(s) may hold notes" in problem["error"]
        # The PROBLEM shortens a long path around an ellipsis (how much depends on the temp
        # folder's length): the folders it names are asked of the finder.
        (named,) = h.indexer.changes._too_long_named
        assert "/Kept/" in named and "Archive" not in named and "Archive/" not in problem["error"]
    finally:
        h.close()


def test_an_event_in_a_wiki_replaced_by_a_symlink_loop_is_no_crash(make_cfg: Any, vault: Path) -> None:
    """The wiki folder replaced by a symlink to itself, then a file event in it: the wiki's whole
    sweep runs at once and finds what a full sweep finds (offline, the loop named, its notes
    kept). Its real path was asked before the refusal was looked at: Path.resolve raised
    RuntimeError on the loop and the sweep crashed."""
    import shutil

    cfg = make_cfg(vault)
    wiki = vault / cfg.vault.wiki_subfolder
    wiki.mkdir(exist_ok=True)
    write(wiki / "W.md", "# W\n\nwiki note\n")
    h = Harness(cfg, FakeEmbedder())
    try:
        h.indexer.sweep()
        shutil.rmtree(wiki)
        wiki.symlink_to(wiki)
        h.indexer.sweep(only=frozenset(), paths=[str(wiki / "W.md")])
        st = h.supervisor.roots["wiki"]
        assert st.offline and "Too many levels of symbolic links" in (st.error or "")
        assert "wiki/W" in h.stores.manifest.file_states("wiki/")  # kept: a sweep decides
    finally:
        h.close()


def test_a_rebuild_with_no_daemon_runs_once_the_unreadable_note_is_deleted(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unreadable note deleted while the daemon was down names no note in a refusal."""
    cfg, _failing = _unreadable_then_restart(make_cfg, vault, monkeypatch)
    (vault / "Notes" / "n1.md").unlink()
    h = Harness(cfg, FakeEmbedder())
    try:
        h.indexer.changes.list_unreadable()
        h.indexer.refuse_rebuild()
    finally:
        h.close()


def test_a_rebuild_with_no_daemon_still_refuses_a_note_that_still_fails(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What still cannot be read still refuses the rebuild (its probe finds it)."""
    from sidecar.contracts.errors import UnreadableError
    from sidecar.index import unreadable as unreadable_mod

    cfg, _failing = _unreadable_then_restart(make_cfg, vault, monkeypatch)
    n1 = vault / "Notes" / "n1.md"
    real = unreadable_mod.read_refusal
    monkeypatch.setattr(
        unreadable_mod, "read_refusal", lambda p: "unreadable (Input/output error)" if p == n1 else real(p)
    )
    h = Harness(cfg, FakeEmbedder())
    try:
        h.indexer.changes.list_unreadable()
        with pytest.raises(UnreadableError, match=r"n1\.md cannot be read now"):
            h.indexer.refuse_rebuild()
    finally:
        h.close()


def test_a_rebuild_right_after_a_restart_runs_once_the_share_healed(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note's I/O error gone while the daemon was down (no change of its stat): the start's
    sweep reads it, and neither status nor a rebuild names it (was: it waited its turn, named
    unreadable, and the rebuild was refused for up to about 6 hours)."""
    cfg, failing = _unreadable_then_restart(make_cfg, vault, monkeypatch)
    failing[0] = False
    h = Harness(cfg, FakeEmbedder())
    try:
        h.indexer.refuse_rebuild()  # before the start's first sweep ends, too
        h.sweep()
        assert h.indexer.changes.retry_waiting == 0
        assert h.stores.problems.active_in("unreadable") is None
        h.indexer.refuse_rebuild()
    finally:
        h.close()


def test_a_running_daemon_rechecks_an_unreadable_note_before_refusing_a_rebuild(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note kept unreadable that reads again while it waits its turn (an I/O error healed, no
    change of its stat) no longer refuses a rebuild; one that still fails does."""
    from sidecar.contracts.errors import UnreadableError
    from sidecar.index import unreadable as unreadable_mod

    _notes(vault, 3)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        n1 = vault / "Notes" / "n1.md"
        failing = _failing_reads(monkeypatch, n1)
        write(n1, "# Note 1\n\nedited, then unreadable\n")
        h.sweep()
        real = unreadable_mod.read_refusal
        monkeypatch.setattr(
            unreadable_mod,
            "read_refusal",
            lambda p: "unreadable (Input/output error)" if failing[0] and p == n1 else real(p),
        )
        with pytest.raises(UnreadableError, match=r"n1\.md cannot be read now"):
            h.indexer.refuse_rebuild()
        failing[0] = False
        h.indexer.refuse_rebuild()
    finally:
        h.close()


def test_a_running_daemon_rechecks_an_unreadable_folder_before_refusing_a_rebuild(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder recorded unreadable by the last sweep that lists again (a share healed, a mode
    given back, with no file event) no longer refuses a rebuild asked of the running daemon, as
    `sidecar index --rebuild` without one lists every root before its check; one that still
    fails does (was: named as the last sweep recorded it until the next full sweep)."""
    from sidecar.contracts.errors import UnreadableError

    _notes(vault, 3)
    bad = vault / "Notes"
    failing = [True]
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if failing[0] and Path(path) == bad:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        monkeypatch.setattr(sources_mod.os, "scandir", scandir)
        h.sweep()
        with pytest.raises(UnreadableError, match="Notes"):
            h.indexer.refuse_rebuild()
        failing[0] = False
        h.indexer.refuse_rebuild()
        failing[0] = True
        with pytest.raises(UnreadableError, match="Notes"):
            h.indexer.refuse_rebuild(recorded=True)  # as the last sweep recorded it: none looked at
    finally:
        h.close()


def test_a_vault_probe_that_hangs_is_not_started_again_while_it_hangs(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look at whether the vault's folder is there (before a rebuild, when notes are put
    back) hangs on a share the supervisor has not found hanging yet: the vault is away, and the
    next asks answer so at once, with no second thread, until the probe answers (was: a new
    thread per ask, each left hanging)."""
    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.3}), FakeEmbedder())
    release = threading.Event()
    asked: list[int] = []
    real = h.supervisor.vault_not_there

    def vault_not_there() -> bool:
        asked.append(1)
        release.wait(20)
        return real()

    try:
        h.sweep()
        monkeypatch.setattr(h.supervisor, "vault_not_there", vault_not_there)
        assert "vault" in h.indexer.unreachable_roots()
        assert "vault" in h.indexer.unreachable_roots()
        assert len(asked) == 1
        release.set()
        assert _wait_for(
            lambda: not any(t.name == "probe-vault" and t.is_alive() for t in threading.enumerate())
        )
        assert "vault" not in h.indexer.unreachable_roots()
        assert len(asked) == 2
    finally:
        release.set()
        h.close()


def test_the_vault_probes_of_event_deletions_and_the_wiki_run_one_at_a_time(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vault whose listing hangs (the supervisor has not flagged it): whether an event's
    deletions may go ahead (``deletable``) and whether the wiki lies in a vault that is there
    (``_inside_vault``) are one probe: the first marks the vault hanging, and both are "no" at
    once while it hangs (was: a new thread per call, each left hanging)."""
    from sidecar.vault import supervisor as supervisor_mod
    from sidecar.vault.sources import Root
    from sidecar.vault.supervisor import Supervisor

    sup = Supervisor(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2}))
    root = Root("vault", vault, exclude="wiki")
    wiki = Root("wiki", vault / "wiki", within=vault)
    release = threading.Event()
    real = supervisor_mod.os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path) == vault:
            release.wait(20)
        return real(path)

    monkeypatch.setattr(supervisor_mod.os, "scandir", scandir)
    before = {t for t in threading.enumerate() if t.name.startswith("probe-")}
    try:
        for _ in range(3):
            assert sup.deletable(root) is False
            assert sup._inside_vault(wiki) is False
        alive = [t for t in threading.enumerate() if t.name.startswith("probe-") and t not in before]
        assert len([t for t in alive if t.is_alive()]) == 1, alive  # the vault's deletable probe
        release.set()
        assert _wait_for(lambda: not any(t.is_alive() for t in alive))
        monkeypatch.undo()
        assert sup.deletable(root) is True and sup._inside_vault(wiki) is True  # asked afresh
    finally:
        release.set()


def test_a_deletable_probe_that_hangs_marks_the_root_hanging(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The look whether an event's deletions may go ahead times out on the vault's listing: the
    vault is marked hanging as a scan's hung call marks it, so its other probes and calls are
    not waited for (told at once) and health says it hangs; once the call answers, the share is
    learnt slow and the vault is asked again (was: nothing marked, each other probe of the
    vault waited its own timeout, and status said "events")."""
    from sidecar.vault import supervisor as supervisor_mod
    from sidecar.vault.sources import Root
    from sidecar.vault.supervisor import RootUnreachable, Supervisor

    sup = Supervisor(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2}))
    root = Root("vault", vault, exclude="wiki")
    release = threading.Event()
    asked: list[Path] = []
    real = supervisor_mod.os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path) == vault:
            asked.append(Path(path))
            release.wait(20)
        return real(path)

    monkeypatch.setattr(supervisor_mod.os, "scandir", scandir)
    try:
        assert sup.deletable(root) is False
        assert sup.roots["vault"].hanging is not None
        (said,) = [r for r in sup.describe(lambda _p: True) if r["name"] == "vault"]
        assert said["mode"] == "offline" and "still hangs" in said["error"], said
        with pytest.raises(supervisor_mod.NoAnswer):
            sup.ask_vault_not_there()
        with pytest.raises(RootUnreachable, match="still hangs"):
            sup.bounded(root, lambda _asking: None)
        assert len(asked) == 1
        release.set()
        assert _wait_for(lambda: sup.roots["vault"].hanging is None)
        (said,) = [r for r in sup.describe(lambda _p: True) if r["name"] == "vault"]
        assert said["mode"] == "events", said
        monkeypatch.undo()
        assert sup.deletable(root) is True
        sup.bounded(root, lambda _asking: None)
        assert sup.roots["vault"].slow  # it answered after its timeout: a slow share
    finally:
        release.set()


def test_a_probe_on_a_share_learnt_slow_waits_as_its_scans_do(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share learnt slow (its calls are waited for up to scanTimeoutSeconds): a look whether
    an event's deletions may go ahead that takes longer than probeTimeoutSeconds is waited for
    as its scans' calls are; the share stays slow, not hanging (was: given up after
    probeTimeoutSeconds, logged hung, its slow mark dropped and shown offline)."""
    from sidecar.vault import supervisor as supervisor_mod
    from sidecar.vault.sources import Root
    from sidecar.vault.supervisor import Supervisor

    sup = Supervisor(make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.1, "watch.scanTimeoutSeconds": 60}))
    root = Root("vault", vault, exclude="wiki")
    st = sup.status(root)
    sup._set_slow(st, True, "a listing or stat")
    real = supervisor_mod.os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path) == vault:
            time.sleep(0.4)  # past the probe timeout, far within the scan timeout
        return real(path)

    monkeypatch.setattr(supervisor_mod.os, "scandir", scandir)
    assert sup.deletable(root) is True
    assert st.slow and st.hanging is None


def test_a_wikis_probe_starts_no_call_into_a_vault_that_hangs(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vault marked hanging by a probe: a probe of the wiki inside it is "no answer" at once,
    as the wiki's scans are, with no thread of its own left stuck in the hung share (was: the
    wiki's probe started a second thread into it)."""
    from sidecar.vault import supervisor as supervisor_mod
    from sidecar.vault.supervisor import Supervisor
    from sidecar.vault.swept_roots import roots

    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.2})
    sup = Supervisor(cfg)
    by = {r.name: r for r in roots(cfg) if r.source != "memory"}
    release = threading.Event()
    real = supervisor_mod.os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path) in (vault, by["wiki"].path):
            release.wait(20)
        return real(path)

    monkeypatch.setattr(supervisor_mod.os, "scandir", scandir)
    before = set(threading.enumerate())
    try:
        assert sup.deletable(by["vault"]) is False
        assert sup.roots["vault"].hanging is not None
        assert sup.deletable(by["wiki"]) is False
        alive = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        assert len(alive) == 1, alive  # the vault's probe only
    finally:
        release.set()


def test_a_caller_beside_a_vault_probe_under_way_reads_its_answer(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two asks whether the vault is there at once (a request's rebuild check beside a sweep's
    put-back): the second reads the answer of the probe under way (was: it waited for the
    first, then probed again, as long again, and could be told "away" a hair before the first
    answered "there")."""
    h = Harness(make_cfg(vault, **{"watch.probeTimeoutSeconds": 20}), FakeEmbedder())
    release = threading.Event()
    asked: list[int] = []
    real = h.supervisor.vault_not_there

    def vault_not_there() -> bool:
        asked.append(1)
        release.wait(20)
        return real()

    try:
        h.sweep()
        monkeypatch.setattr(h.supervisor, "vault_not_there", vault_not_there)
        out: list[bool] = []
        first = threading.Thread(target=lambda: out.append(h.indexer._vault_away()))
        first.start()
        assert _wait_for(lambda: len(asked) == 1)
        second = threading.Thread(target=lambda: out.append(h.indexer._vault_away()))
        second.start()
        time.sleep(0.3)  # the second is waiting (a probe of its own would have begun by now)
        release.set()
        first.join(10)
        second.join(10)
        assert out == [False, False] and len(asked) == 1
    finally:
        release.set()
        h.close()


def test_a_rebuild_reads_a_note_that_waits_its_retry(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A note whose read failed reads again before its turn (no change of its stat): the
    rebuild's check lets it run, and the rebuild reads it (was: counted unchanged while it
    waited, put back unread, and the rebuild said unfinished until its turn)."""
    _notes(vault, 3)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        n1 = vault / "Notes" / "n1.md"
        failing = _failing_reads(monkeypatch, n1)
        write(n1, "# Note 1\n\nedited, then unreadable\n")
        h.sweep()
        h.sweep()  # its turn: failed again, waits 2 full sweeps now
        failing[0] = False  # healed, its turn not come
        h.indexer.refuse_rebuild()
        h.indexer.clear()
        h.sweep()
        assert h.problems.active_in("rebuild") is None
        assert "edited" in " ".join(c.text for c in h.stores.manifest.chunks_of("vault/Notes/n1"))
    finally:
        h.close()


def test_read_retries_of_a_root_no_longer_configured_are_dropped(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read retry kept for a root taken out of the configuration is not loaded."""
    import json

    cfg, _failing = _unreadable_then_restart(make_cfg, vault, monkeypatch)
    h = Harness(cfg, FakeEmbedder())
    rows = json.loads(h.stores.manifest.get_meta("read_retries"))
    h.stores.manifest.set_meta("read_retries", json.dumps([["wiki-gone", "/elsewhere/x.md", 3], *rows]))
    h.close()
    h = Harness(cfg, FakeEmbedder())
    try:
        assert [n for n, _p in h.indexer.changes._retry] == ["vault"]
        h.indexer.refuse_rebuild()
    finally:
        h.close()


def test_a_read_retry_loaded_waits_no_longer_than_the_cap(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A count of failures kept from before (a clock set ahead, a long outage) makes the note
    wait at most about 6 hours after the start's read of it (was: a next try saved under a
    clock a year ahead was taken as it was, 52,561 full sweeps away)."""
    import json

    from sidecar.index.retries import RETRY_MOST_HOURS

    cfg, _failing = _unreadable_then_restart(make_cfg, vault, monkeypatch)
    h = Harness(cfg, FakeEmbedder())
    rows = json.loads(h.stores.manifest.get_meta("read_retries"))
    rows[0][2] = 10**6
    h.stores.manifest.set_meta("read_retries", json.dumps(rows))
    h.close()
    h = Harness(cfg, FakeEmbedder())
    try:
        most = max(1, int(RETRY_MOST_HOURS * 60 / cfg.index.rescan_minutes))
        ((_f, turn, _s),) = h.indexer.changes._retry.values()
        assert turn == 1  # read by the start's first full sweep
        h.sweep()
        ((_f, turn, _s),) = h.indexer.changes._retry.values()
        assert 1 < turn <= 1 + most
    finally:
        h.close()


def test_a_remembered_slow_share_whose_first_stat_is_slow_is_indexed(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share remembered slow whose first stat of the root (the probe: an automount, a cold
    cache) answers after probeTimeoutSeconds: the probe waits with the whole-scan bound as the
    listings do. It kept the per-call bound, and the root went offline on every run."""
    from sidecar.daemon.oneshot import index_once
    from sidecar.stores.manifest import Manifest

    cfg = make_cfg(vault, **{"embedder.enabled": False, "watch.probeTimeoutSeconds": 0.5})
    index_once(cfg, rebuild=False)
    m = Manifest(cfg.index_dir / "manifest.sqlite")
    m.set_meta("slow:vault", '{"call": "x", "since": 0}')
    m.close()
    real = supervisor_base.identity_of

    def identity_of(path: Path, mounts: Any = None) -> Any:
        if Path(path) == vault:
            time.sleep(1.0)
        return real(path, mounts)

    monkeypatch.setattr(supervisor_base, "identity_of", identity_of)
    assert not index_once(cfg, rebuild=False)["offline"]


def test_a_slow_first_stat_is_learnt_by_sidecar_index(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sidecar index` alone: the probe's stat of the root given up on and answering after all
    is learnt as a slow share (remembered), the root swept again in the run. A probe given up
    on was never waited for nor learnt from."""
    from sidecar.daemon.oneshot import index_once
    from sidecar.stores.manifest import Manifest

    cfg = make_cfg(vault, **{"embedder.enabled": False, "watch.probeTimeoutSeconds": 0.5})
    index_once(cfg, rebuild=False)
    real = supervisor_base.identity_of
    learning = threading.Event()

    def identity_of(path: Path, mounts: Any = None) -> Any:
        if Path(path) == vault:  # answers once the run waits to learn, then late each time
            time.sleep(0.6) if learning.is_set() else learning.wait(20)
        return real(path, mounts)

    def told(w: dict[str, Any]) -> None:
        if w.get("learning") and w["call"] == "stat" and w["path"] == ".":
            learning.set()

    monkeypatch.setattr(supervisor_base, "identity_of", identity_of)
    assert not index_once(cfg, rebuild=False, waiting=told)["offline"]
    assert learning.is_set()
    m = Manifest(cfg.index_dir / "manifest.sqlite")
    try:
        assert m.get_meta("slow:vault") is not None
    finally:
        m.close()


def test_a_remembered_slow_share_now_hung_is_given_up_per_call_again(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A share slow once and now hung (its server gone): a call given up on even under the
    whole-scan bound is a hang, not slowness: the slow mark goes, and the next run (a daemon's
    start, `sidecar index`) gives up per call (probeTimeoutSeconds) again. The mark stayed:
    every run waited scanTimeoutSeconds on it (the other roots behind it)."""
    cfg = make_cfg(vault, **{"watch.probeTimeoutSeconds": 0.5, "watch.scanTimeoutSeconds": 2})
    h = Harness(cfg, FakeEmbedder())
    h.indexer.sweep()
    h.stores.manifest.set_meta("slow:vault", '{"call": "x", "since": 0}')
    h.close()
    release = threading.Event()
    hang_listing(monkeypatch, vault / "Recipes", release)
    try:
        h = Harness(cfg, FakeEmbedder())
        try:
            h.indexer.sweep()
            st = h.supervisor.roots["vault"]
            assert st.offline and "watch.scanTimeoutSeconds" in str(st.error) and not st.slow
            assert h.stores.manifest.get_meta("slow:vault") is None
        finally:
            h.close()
        h = Harness(cfg, FakeEmbedder())
        try:
            h.indexer.sweep()
            st = h.supervisor.roots["vault"]
            assert st.offline and "listing Recipes in" in str(st.error) and "within 0.5 s" in str(st.error)
        finally:
            h.close()
    finally:
        release.set()


def test_offline_index_embeds_the_other_roots_before_it_waits_for_a_share(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sidecar index` alone waits for a call it gave up on (to learn whether the share is only
    slow) after the links and vectors of everything else are done: a wait cut short (Ctrl-C, a
    script's timeout) leaves only that root to the next run. It waited before them."""
    from sidecar.daemon import oneshot as oneshot_mod

    cfg = make_cfg(vault, **{"embedder.enabled": False, "watch.probeTimeoutSeconds": 0.5})
    oneshot_mod.index_once(cfg, rebuild=False)
    events: list[str] = []
    real_build = oneshot_mod.build

    def build(*args: Any, **kwargs: Any) -> Any:
        parts = real_build(*args, **kwargs)
        embed = parts.vectors.embed_pending

        def embed_pending() -> int:
            events.append("embed")
            return embed()

        parts.vectors.embed_pending = embed_pending  # type: ignore[method-assign]
        return parts

    learning = threading.Event()
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path) == vault / "Recipes" and not learning.is_set():
            learning.wait(20)  # answers once the run waits to learn
        return real(path)

    def told(w: dict[str, Any]) -> None:
        if w.get("learning"):
            events.append("learning")
            learning.set()

    monkeypatch.setattr(oneshot_mod, "build", build)
    monkeypatch.setattr(sources_mod.os, "scandir", scandir)
    summary = oneshot_mod.index_once(cfg, rebuild=False, waiting=told)
    assert not summary["offline"] and "learning" in events
    assert events.index("embed") < events.index("learning")


def test_an_offline_rebuild_on_a_slow_share_learns_it(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sidecar index --rebuild` alone on a share whose listing answers only after it was given
    up on: the rebuild waits for it, learns the share is slow (remembered), lists it again and
    rebuilds. It was refused ("cannot be read now") on every run, nothing learnt."""
    from sidecar.daemon.oneshot import index_once
    from sidecar.stores.manifest import Manifest

    cfg = make_cfg(vault, **{"embedder.enabled": False, "watch.probeTimeoutSeconds": 0.5})
    index_once(cfg, rebuild=False)
    real = os.scandir

    learning = threading.Event()

    def scandir(path: Any = ".") -> Any:
        if Path(path) == vault / "Recipes":  # answers once the run waits to learn, then late each time
            time.sleep(0.6) if learning.is_set() else learning.wait(20)
        return real(path)

    def told(w: dict[str, Any]) -> None:
        if w.get("learning"):
            learning.set()

    monkeypatch.setattr(sources_mod.os, "scandir", scandir)
    summary = index_once(cfg, rebuild=True, waiting=told)
    assert learning.is_set() and not summary["offline"] and summary["files"] > 0
    m = Manifest(cfg.index_dir / "manifest.sqlite")
    try:
        assert m.get_meta("slow:vault") is not None
    finally:
        m.close()


def _kept_unreadable(h: Harness, vault: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Three notes indexed, then n1 edited and its read failing: kept unreadable."""
    _notes(vault, 3)
    h.sweep()
    n1 = vault / "Notes" / "n1.md"
    _failing_reads(monkeypatch, n1)
    write(n1, "# Note 1\n\nedited, then unreadable\n")
    h.sweep()
    assert h.stores.problems.active_in("unreadable") is not None
    return n1


def _hung_opens(monkeypatch: pytest.MonkeyPatch, n1: Path) -> tuple[threading.Event, list[Path]]:
    """Opening n1 for the rebuild's check hangs (a hung share) until the event is set; every
    path opened is listed."""
    from sidecar.index import unreadable as unreadable_mod

    release, opened = threading.Event(), []
    real = unreadable_mod.read_refusal

    def hung(p: Path) -> str | None:
        opened.append(p)
        if p == n1:
            release.wait(30)
        return real(p)

    monkeypatch.setattr(unreadable_mod, "read_refusal", hung)
    return release, opened


def _reopen_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "probe-unreadable notes" and t.is_alive())


def test_the_recheck_before_a_refusal_waits_the_probe_timeout_and_starts_one_thread(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notes kept unreadable are opened again before a refusal within watch.probeTimeoutSeconds
    (a request's check, in front of nothing else), and while that open still hangs no second one
    is started: the note is named as recorded (was: the scan timeout, 600 s, for each request, a
    new stuck thread each time)."""
    from sidecar.contracts.errors import UnreadableError
    from sidecar.index import unreadable as unreadable_mod

    cfg = make_cfg(vault, **{"watch.scanTimeoutSeconds": 2.0, "watch.probeTimeoutSeconds": 0.2})
    h = Harness(cfg, FakeEmbedder())
    try:
        n1 = _kept_unreadable(h, vault, monkeypatch)
        before = _reopen_threads()
        release, _opened = _hung_opens(monkeypatch, n1)
        bounds: list[float] = []
        real = unreadable_mod.run_with_timeout

        def spy(fn: Any, timeout: float, name: str, *a: Any, **k: Any) -> Any:
            bounds.append(timeout)
            return real(fn, timeout, name, *a, **k)

        monkeypatch.setattr(unreadable_mod, "run_with_timeout", spy)
        try:
            for _ in range(2):
                with pytest.raises(UnreadableError, match=r"n1\.md cannot be read now"):
                    h.indexer.refuse_rebuild()
            assert bounds == [0.2]  # one re-open, bounded by the probe timeout
            assert _reopen_threads() - before == 1
        finally:
            release.set()
    finally:
        h.close()


def test_the_recheck_before_a_refusal_opens_nothing_of_a_root_judged_away(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vault judged away (its probe said missing or hung): its notes kept unreadable are named
    as recorded, none opened (was: opened all the same, waiting the scan timeout on a hung share)."""
    from sidecar.contracts.errors import UnreadableError

    cfg = make_cfg(vault, **{"watch.scanTimeoutSeconds": 2.0, "watch.probeTimeoutSeconds": 0.2})
    h = Harness(cfg, FakeEmbedder())
    try:
        n1 = _kept_unreadable(h, vault, monkeypatch)
        monkeypatch.setattr(h.indexer, "_vault_away", lambda: True)
        release, opened = _hung_opens(monkeypatch, n1)
        try:
            with pytest.raises(UnreadableError, match=r"vault cannot be read now.*n1\.md cannot be read now"):
                h.indexer.refuse_rebuild()
            assert opened == []
        finally:
            release.set()
    finally:
        h.close()


def test_a_memory_write_never_waits_behind_index_requests(
    vault: Path, serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `index --rebuild` requests whose check waits on a share: an agent's memory write is
    answered meanwhile (was: `index` ran on the write lane, both its workers held, and the write
    queued behind them, answered `timeout` and applied minutes later)."""
    server = serve_in_process(vault, model="fake")
    h = server.harness
    release, inside, entered = threading.Event(), [0], threading.Event()
    lock = threading.Lock()

    def waiting(*_a: Any, **_k: Any) -> None:
        with lock:
            inside[0] += 1
            if inside[0] == 2:
                entered.set()
        release.wait(3)
        with lock:
            inside[0] -= 1

    monkeypatch.setattr(h.indexer, "refuse_rebuild", waiting)
    askers = [threading.Thread(target=server.call, args=("index", {"rebuild": True})) for _ in range(2)]
    for t in askers:
        t.start()
    try:
        assert entered.wait(10)
        server.call("write", {"slug": "w1", "content": "a memory note written meanwhile"}, agent="claude")
        with lock:
            assert inside[0] == 2  # both index requests still wait
    finally:
        release.set()
        for t in askers:
            t.join(15)


def test_a_refusal_at_the_turn_is_checked_on_what_sweeps_recorded_and_for_a_bounded_time(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild refused at its turn for a note that stays unreadable: the check after each whole
    sweep opens no note (what the sweep recorded stands; was: every note opened again after each
    whole sweep, for good, its backoff bypassed), and once about REFUSAL_CHECK_HOURS of whole
    sweeps have checked it, it is checked no more: under Recovered, saying the rebuild was not run."""
    from sidecar.daemon import indexing as indexing_mod
    from sidecar.daemon.indexing import REBUILD_AREA, REFUSED, IndexLoop
    from sidecar.index import unreadable as unreadable_mod

    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        n1 = _kept_unreadable(h, vault, monkeypatch)
        real = unreadable_mod.read_refusal
        opened: list[Path] = []

        def counting(p: Path) -> str | None:
            opened.append(p)
            return "unreadable (Input/output error)" if p == n1 else real(p)

        monkeypatch.setattr(unreadable_mod, "read_refusal", counting)
        # 3 whole sweeps of index.rescanMinutes (10)
        monkeypatch.setattr(indexing_mod, "REFUSAL_CHECK_HOURS", 0.5, raising=False)
        loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
        loop.request_sweep(rebuild=True)
        job = loop._next()
        assert job is not None and job.rebuild
        loop._run(job)
        assert h.problems.active_in(REBUILD_AREA, subject=REFUSED) is not None
        before = len(opened)
        for _ in range(2):
            loop.schedule_sweep()
            job = loop._next()
            assert job is not None
            loop._run(job)
        assert len(opened) == before
        problem = h.problems.active_in(REBUILD_AREA, subject=REFUSED)
        assert problem is not None and "n1.md cannot be read now" in problem["error"]
        loop.schedule_sweep()
        job = loop._next()
        assert job is not None
        loop._run(job)
        assert h.problems.active_in(REBUILD_AREA, subject=REFUSED) is None
        recent = [r["error"] for r in h.problems.describe()["recent"] if r.get("subject") == REFUSED]
        assert recent and recent[-1].startswith("not rebuilt: ")
        assert recent[-1].endswith("The rebuild was not run and is no longer checked: ask it again.")
        loop.schedule_sweep()  # no longer checked
        job = loop._next()
        assert job is not None
        loop._run(job)
        assert len(opened) == before and h.problems.active_in(REBUILD_AREA, subject=REFUSED) is None
    finally:
        h.close()


def test_a_refusal_at_the_turn_says_its_cause_now_when_another_replaced_it(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused at the turn for the vault unmounted; the share back, a note of it now fails: status
    says the note (was: still "vault cannot be read now", telling to mount a mounted share)."""
    from sidecar.daemon.indexing import REBUILD_AREA, REFUSED, IndexLoop

    _notes(vault, 3)
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
        loop.request_sweep(rebuild=True)
        vault.rename(vault.parent / "unmounted")
        job = loop._next()
        assert job is not None
        loop._run(job)
        problem = h.problems.active_in(REBUILD_AREA, subject=REFUSED)
        assert problem is not None and problem["error"].startswith("not rebuilt: vault cannot be read now")
        (vault.parent / "unmounted").rename(vault)
        n1 = vault / "Notes" / "n1.md"
        _failing_reads(monkeypatch, n1)
        write(n1, "# Note 1\n\nedited, then unreadable\n")
        loop.schedule_sweep()
        job = loop._next()
        assert job is not None
        loop._run(job)
        problem = h.problems.active_in(REBUILD_AREA, subject=REFUSED)
        assert problem is not None and problem["error"].startswith("not rebuilt: ")
        assert "n1.md cannot be read now" in problem["error"]
        assert "vault cannot be read now" not in problem["error"]
    finally:
        h.close()


def test_sidecar_index_through_a_daemon_reads_a_note_waiting_its_retry(
    make_cfg: Any, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """README: a restart, or `sidecar index`, tries a note waiting its retry once; through a
    running daemon too (was: the `index` op's sweep skipped it like a scheduled one, and status
    named it unreadable for up to about 6 hours although it read). A scheduled sweep still waits."""
    from sidecar.daemon.indexing import IndexLoop

    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        _notes(vault, 3)
        h.sweep()
        n1 = vault / "Notes" / "n1.md"
        failing = _failing_reads(monkeypatch, n1)
        write(n1, "# Note 1\n\nedited, then unreadable\n")
        for _ in range(4):  # fails at the 1st, 2nd and 4th: now waits 4 full sweeps
            h.sweep()
        failing[0] = False  # the share healed, no change of the note's stat
        loop = IndexLoop(h.cfg, h.indexer, h.slot, h.problems, stop=threading.Event(), beat=lambda _a: None)
        loop.schedule_sweep()
        job = loop._next()
        assert job is not None
        loop._run(job)
        assert h.indexer.changes.retry_waiting == 1  # the daemon's own sweep: at its turn
        loop.request_sweep()  # what the `index` op asks
        job = loop._next()
        assert job is not None
        loop._run(job)
        assert h.indexer.changes.retry_waiting == 0
        assert h.stores.problems.active_in("unreadable") is None
    finally:
        h.close()
