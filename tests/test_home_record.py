"""The home's identity survives a restart: a daemon started while the home's share is unmounted
does not take the bare mount point as the home (real daemon, real folders; the mount is simulated
by swapping the home folder)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import ExitCode, RemoteError
from tests.daemon_process import DaemonProcess


def _write(d: DaemonProcess, agent: str, slug: str, text: str) -> dict[str, Any]:
    return d.call("write", {"slug": slug, "content": text}, agent=agent)


def _home_problem(d: DaemonProcess) -> str | None:
    active = [p for p in d.health()["problems"]["active"] if p["area"] == "home"]
    return active[0]["error"] if active else None


def _unmount(home: Path, share: Path) -> None:
    """The share goes away: its folder leaves the home's path, an empty mount point stays."""
    home.rename(share)
    home.mkdir()


def _mount(home: Path, share: Path) -> None:
    """The share comes back over its mount point (what the daemon made there is hidden)."""
    shutil.rmtree(home)
    share.rename(home)


@pytest.fixture
def daemon(daemon_factory: Any, vault: Path) -> DaemonProcess:
    d: DaemonProcess = daemon_factory(vault, keyword_only=True).start()
    _write(d, "frank", "m1", "frank remembers the harbour")
    _write(d, "bob", "b1", "bob remembers the lighthouse")
    assert d.stop() == 0
    return d


def test_a_restart_on_a_bare_mount_point_makes_no_inbox(daemon: DaemonProcess, tmp_path: Path) -> None:
    """The daemon restarted while the home's share is unmounted: memory writes are refused
    (`storage`, exit 7) and make nothing on the bare mount point, status names the problem and the
    way out; with the share back (and a restart) the writes go on into the real inboxes. Was:
    the bare folder taken as the home, the write `created` in agents/ made there (hidden once the
    share came back, the agent's memory split)."""
    d, home, share = daemon, daemon.home, tmp_path / "share"
    _unmount(home, share)
    d.start()
    with pytest.raises(RemoteError) as refused:
        _write(d, "frank", "m2", "written while the share is away")
    assert refused.value.code == "storage" and "--accept-home" in str(refused.value)
    with pytest.raises(RemoteError):
        _write(d, "newcomer", "n1", "a new agent while the share is away")
    cli = d.run_cli("memory", "write", "--agent", "frank", "m3", "--content", "x")
    assert cli.returncode == ExitCode.REQUEST_FAILED, cli.stderr
    assert not (home / "agents").exists()  # nothing made on the mount point
    d.run_cli("index")  # a sweep: the problem is said there too
    why = _home_problem(d)
    assert why is not None and "memory writes are refused" in why
    status = d.run_cli("status")
    assert "home folder" in status.stdout and "--accept-home" in status.stdout, status.stdout
    assert d.stop() == 0

    _mount(home, share)
    d.start()
    assert _write(d, "frank", "m2", "written with the share back")["action"] == "created"
    assert (home / "agents" / "frank" / "memory" / "m2.md").is_file()
    assert _home_problem(d) is None
    assert d.stop() == 0


def test_a_home_that_holds_the_inboxes_is_taken_as_the_home(daemon: DaemonProcess, tmp_path: Path) -> None:
    """Another folder at the home's path that holds every known agent's inbox (the share mounted
    again under another device number, or the home copied to a new disk) is taken at once and
    recorded; an empty one is taken only after `sidecar index --accept-home`."""
    d, home = daemon, daemon.home
    shutil.copytree(home, tmp_path / "copy", symlinks=True)
    shutil.rmtree(home)
    (tmp_path / "copy").rename(home)  # every folder another inode now
    d.start()
    assert _write(d, "frank", "m2", "written into the moved home")["action"] == "created"
    assert _home_problem(d) is None
    assert d.stop() == 0

    _unmount(home, tmp_path / "share")  # now an empty home, on purpose: a fresh start
    d.start()
    with pytest.raises(RemoteError):
        _write(d, "frank", "m3", "refused until accepted")
    accepted = d.run_cli("index", "--accept-home")
    assert accepted.returncode == 0, accepted.stderr
    assert "taken as the home" in accepted.stderr
    assert _write(d, "frank", "m3", "a fresh home accepted")["action"] == "created"
    assert (home / "agents" / "frank" / "memory" / "m3.md").is_file()
    assert _home_problem(d) is None
    assert d.stop() == 0
    d.start()  # the accepted home is the recorded one now
    assert _write(d, "frank", "m4", "after a restart")["action"] == "created"


def test_accept_home_says_when_the_running_daemon_did_not_take_the_consent(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    """`--accept-home` whose consent the running daemon does not read (one started from an
    earlier sidecar, which takes only a removed record; here one keeping its state in another
    folder): the command says the daemon still refuses the home and to restart it. Was: "taken as
    the home" only, the writes still refused."""
    d, home = daemon, daemon.home
    _unmount(home, tmp_path / "share")  # an empty home, on purpose
    d.start()
    elsewhere = {**d.env, "SIDECAR_HOME": str(home), "XDG_STATE_HOME": str(tmp_path / "other-state")}
    unread = subprocess.run(
        [sys.executable, "-m", "sidecar", "index", "--accept-home"],
        capture_output=True,
        text=True,
        env=elsewhere,
        check=False,
        timeout=120,
    )
    assert unread.returncode == 0, unread.stderr
    said = " ".join(unread.stderr.split())
    assert "still refuses the home" in said and "restart the daemon" in said, said
    with pytest.raises(RemoteError):
        _write(d, "frank", "m3", "still refused")
    accepted = d.run_cli("index", "--accept-home")
    assert accepted.returncode == 0 and "still refuses" not in accepted.stderr, accepted.stderr
    assert _write(d, "frank", "m3", "a fresh home accepted")["action"] == "created"
    assert d.stop() == 0


def test_a_home_record_that_cannot_be_written_is_a_problem(tmp_path: Path, vault: Path) -> None:
    """The record's failure was a log line only (a service sandbox that could not write the state
    folder went unnoticed, and a restart on a bare mount point then took it for the home)."""
    from sidecar.config import load_config
    from tests.conftest import FakeEmbedder, Harness

    blocker = tmp_path / "state"
    blocker.write_text("a file where the state folder belongs\n")
    cfg = load_config(
        flags={"home": str(tmp_path / "home"), "vault.path": str(vault)}, env={"XDG_STATE_HOME": str(blocker)}
    )
    cfg.agents_dir.mkdir(parents=True)  # as the daemon makes it at its first start
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        active = [p for p in h.problems.describe()["active"] if p["area"] == "home"]
        assert len(active) == 1 and "the home's identity cannot be recorded" in active[0]["error"], active
        assert str(blocker) in active[0]["error"]
    finally:
        h.close()


def test_a_stale_inbox_on_the_bare_mount_point_is_no_home(tmp_path: Path) -> None:
    """One agent (the common setup) and a stale inbox an old write left on the mount point below
    the share: with the share unmounted, the bare folder "held every known inbox" and was taken
    as the home. The kept agents folder holds a token (recorded); the bare one has none. The same
    folder under another device number or copied (a home moved on purpose) holds it and is taken."""
    from sidecar.config import load_config
    from sidecar.vault.homeguard import MARKER, HomeGuard

    cfg = load_config(flags={"home": str(tmp_path / "home")}, env={"XDG_STATE_HOME": str(tmp_path / "st")})
    home = cfg.home
    (home / "agents" / "frank" / "memory").mkdir(parents=True)  # the stale inbox, under the share
    (home / "agents" / "frank" / "memory" / "old.md").write_text("stale\n")
    bare = tmp_path / "bare"
    home.rename(bare)
    (home / "agents" / "frank" / "memory").mkdir(parents=True)  # the share mounted: the real home
    guard = HomeGuard(cfg)
    guard.know("frank")
    assert guard.problem() is None and (home / "agents" / MARKER).is_file()
    share = tmp_path / "share"
    home.rename(share)  # unmounted: the bare folder is at the home's path again
    bare.rename(home)
    assert HomeGuard(cfg).problem() is not None  # a restart: the bare folder is not the home
    home.rename(bare)
    shutil.copytree(share, home, symlinks=True)  # the home moved on purpose (a copy: new inodes)
    assert HomeGuard(cfg).problem() is None


def _tables(tmp_path: Path, nas: Path, *, mounted: bool) -> dict[str, str]:
    """An fstab naming ``nas`` as a share's mount point, and a mount table with or without it."""
    fstab, table = tmp_path / "fstab", tmp_path / "mountinfo"
    point = str(nas).replace(" ", "\\040")  # both tables escape a space so
    fstab.write_text(
        "# <file system> <mount point> <type> <options> <dump> <pass>\n"
        "UUID=1234 / ext4 defaults 0 1\n"
        "/swapfile none swap sw 0 0\n"
        f"//nas/share {point} cifs noauto,user 0 0\n"
    )
    lines = ["22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw"]
    if mounted:
        lines.append(f"40 22 0:50 / {point} rw,relatime shared:9 - cifs //nas/share rw")
    table.write_text("\n".join(lines) + "\n")
    return {"watch.fstab": str(fstab), "watch.mountTable": str(table)}


def test_a_first_start_below_an_unmounted_fstab_mount_point_records_nothing(tmp_path: Path) -> None:
    """The first start ever, with the home below a mount point of the fstab whose share is not
    mounted: the bare folder is not recorded as the home (it was, and the share mounted later was
    refused until `--accept-home`); memory writes are refused naming the mount point. Mounted,
    the home is recorded. A home elsewhere, or a mount table that cannot be read, is recorded at
    once (no refusal of normal homes); `--accept-home` takes the bare folder if meant."""
    from sidecar.config import load_config
    from sidecar.vault.homeguard import HomeChangedError, HomeGuard, forget, record_path

    nas = tmp_path / "my nas"
    (nas / "sidecar" / "agents").mkdir(parents=True)
    env = {"XDG_STATE_HOME": str(tmp_path / "st")}
    cfg = load_config(flags={"home": str(nas / "sidecar"), **_tables(tmp_path, nas, mounted=False)}, env=env)
    guard = HomeGuard(cfg)
    why = guard.problem()
    assert why is not None and f"below {nas}, a mount point of" in why and "not mounted" in why, why
    assert "--accept-home" in why
    with pytest.raises(HomeChangedError):
        guard.check()
    record = record_path(cfg)
    assert record is not None and not record.exists()

    _tables(tmp_path, nas, mounted=True)  # the share is mounted now
    assert guard.problem() is None and record.is_file()

    elsewhere = load_config(
        flags={"home": str(tmp_path / "local"), **_tables(tmp_path, nas, mounted=False)}, env=env
    )
    (tmp_path / "local" / "agents").mkdir(parents=True)
    assert HomeGuard(elsewhere).problem() is None
    unreadable = {**_tables(tmp_path, nas, mounted=False), "watch.mountTable": str(tmp_path / "none")}
    env2 = {"XDG_STATE_HOME": str(tmp_path / "st2")}
    assert (
        HomeGuard(load_config(flags={"home": str(nas / "sidecar"), **unreadable}, env=env2)).problem() is None
    )

    env3 = {"XDG_STATE_HOME": str(tmp_path / "st3")}
    meant = load_config(
        flags={"home": str(nas / "sidecar"), **_tables(tmp_path, nas, mounted=False)}, env=env3
    )
    assert HomeGuard(meant).problem() is not None
    assert forget(meant) is False  # nothing was recorded; the consent is
    assert HomeGuard(meant).problem() is None
    assert "homeId" in (record_path(meant) or Path()).read_text()


def test_an_unmounted_fstab_point_above_the_mount_holding_the_home_refuses_nothing(tmp_path: Path) -> None:
    """fstab holds an old `noauto` line for ``x`` (not mounted) while the share is mounted deeper,
    at ``x/nas``, by other means (autofs, a systemd mount unit, by hand): the home on it is
    recorded. Was: every memory write refused until `--accept-home`, naming ``x`` as unmounted.
    A point of the fstab below that mount, not mounted, is still the bare folder."""
    from sidecar.config import load_config
    from sidecar.vault.homeguard import HomeGuard

    x = tmp_path / "x"
    (x / "nas" / "sidecar" / "agents").mkdir(parents=True)
    fstab, table = tmp_path / "fstab", tmp_path / "mountinfo"
    fstab.write_text(f"/dev/sdz1 {x} ext4 noauto 0 0\n")
    table.write_text(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        f"40 22 0:50 / {x / 'nas'} rw,relatime shared:9 - cifs //nas/share rw\n"
    )
    tables = {"watch.fstab": str(fstab), "watch.mountTable": str(table)}
    env = {"XDG_STATE_HOME": str(tmp_path / "st")}
    cfg = load_config(flags={"home": str(x / "nas" / "sidecar"), **tables}, env=env)
    assert HomeGuard(cfg).problem() is None

    fstab.write_text(f"/dev/sdz1 {x} ext4 noauto 0 0\n//nas/deep {x / 'nas' / 'sidecar'} cifs noauto 0 0\n")
    env2 = {"XDG_STATE_HOME": str(tmp_path / "st2")}
    deep = load_config(flags={"home": str(x / "nas" / "sidecar"), **tables}, env=env2)
    why = HomeGuard(deep).problem()
    assert why is not None and f"below {x / 'nas' / 'sidecar'}, a mount point" in why, why


def test_an_fstab_backslash_not_followed_by_octal_digits_is_kept_as_written(tmp_path: Path) -> None:
    """A mount point in fstab written with a backslash and non-octal digits (``/mnt/b\\089``) is
    kept literally; was a ValueError that stopped the first start."""
    from sidecar.config import load_config
    from sidecar.vault.homeguard import HomeGuard
    from sidecar.vault.mounts import parse_fstab

    assert parse_fstab("/dev/sdz9 /mnt/b\\089 ext4 noauto 0 0\n//nas/x /mnt/my\\040nas cifs 0 0") == [
        "/mnt/b\\089",
        "/mnt/my nas",
    ]
    fstab = tmp_path / "fstab"
    fstab.write_text(f"/dev/sdz9 {tmp_path}/b\\089 ext4 noauto 0 0\n")
    home = tmp_path / "home"
    (home / "agents").mkdir(parents=True)
    cfg = load_config(
        flags={"home": str(home), "watch.fstab": str(fstab)}, env={"XDG_STATE_HOME": str(tmp_path / "st")}
    )
    assert HomeGuard(cfg).problem() is None


@contextlib.contextmanager
def _share_at(path: Path) -> Iterator[None]:
    """A small tmpfs mounted at ``path`` for the block (another device, as a share is); the test
    is skipped where mounting is not allowed (not root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_share_mounted_after_a_first_start_on_its_bare_mount_point_says_so(tmp_path: Path) -> None:
    """The first start ever took the bare mount point for the home (a share no fstab names); the
    share mounted later holds another sidecar home: memory writes are refused, and the refusal
    (and status) says that case and the command to run, once. Was: "not the folder sidecar kept
    the agents' memory in ... (share unmounted? replaced?)", with the share mounted. The other way
    round (the share recorded before any write, unmounted now) it is not said: taking the bare
    folder there would be the very mistake."""
    from sidecar.config import load_config
    from sidecar.vault.homeguard import HomeGuard, forget, held, refusal

    cfg = load_config(flags={"home": str(tmp_path / "home")}, env={"XDG_STATE_HOME": str(tmp_path / "st")})
    home = cfg.home
    (home / "agents").mkdir(parents=True)  # the daemon's first start, on the bare mount point
    assert HomeGuard(cfg).problem() is None
    with _share_at(home):  # the share, mounted over it, holding a sidecar home of its own
        (home / "agents" / "frank" / "memory").mkdir(parents=True)
        (home / "agents" / ".sidecar-home").write_text("another-token\n")
        (home / "agents" / "frank" / "memory" / "m1.md").write_text("frank remembers the harbour\n")
        why = HomeGuard(cfg).problem()
        assert why is not None and "first start" in why and "before any agent wrote to it" in why, why
        assert "`sidecar index --accept-home` to take it" in why
        for said in (refusal(why), held(why)):
            assert said.count("--accept-home") == 1, said
        assert forget(cfg) is True
        assert HomeGuard(cfg).problem() is None

    other = load_config(
        flags={"home": str(tmp_path / "home2")}, env={"XDG_STATE_HOME": str(tmp_path / "st2")}
    )
    with _share_at(other.home):  # recorded on the share, before any agent wrote
        other.agents_dir.mkdir()
        assert HomeGuard(other).problem() is None
    why = HomeGuard(other).problem()  # unmounted: the bare folder
    assert why is not None and "first start" not in why, why


def test_a_first_start_below_an_unmounted_share_refuses_writes(
    daemon_factory: Any, vault: Path, tmp_path: Path
) -> None:
    """The daemon's first start with its home below an fstab mount point that is not mounted:
    a memory write is refused (`storage`) naming the mount point, no agents folder is made there
    and status says it; once the share is mounted the next write goes in and is recorded. The
    index is made in the bare folder (its lock and stores open before the check), and the message
    says so and asks for a restart once the share is mounted; it said nothing was made there."""
    nas = tmp_path / "nas"
    nas.mkdir()
    tables = _tables(tmp_path, nas, mounted=False)
    d: DaemonProcess = daemon_factory(
        vault,
        name="nas/home",
        keyword_only=True,
        env={
            "SIDECAR_WATCH_FSTAB": tables["watch.fstab"],
            "SIDECAR_WATCH_MOUNT_TABLE": tables["watch.mountTable"],
            "XDG_STATE_HOME": str(tmp_path / "state"),
        },
    ).start()
    with pytest.raises(RemoteError) as refused:
        _write(d, "frank", "m1", "written before the share is mounted")
    assert refused.value.code == "storage" and f"below {nas}" in str(refused.value), refused.value
    assert not (d.home / "agents").exists()
    assert (d.home / "index").is_dir()
    assert "index is kept in it until sidecar restarts" in str(refused.value), refused.value
    assert "nothing is recorded or made" not in str(refused.value)
    status = d.run_cli("status")
    assert "not mounted" in status.stdout and "--accept-home" in status.stdout, status.stdout
    assert "then restart sidecar" in " ".join(status.stdout.split()), status.stdout
    _tables(tmp_path, nas, mounted=True)
    assert _write(d, "frank", "m1", "written with the share mounted")["action"] == "created"
    assert list((tmp_path / "state" / "sidecar" / "homes").glob("*.json"))
    assert d.stop() == 0


def test_doctor_names_the_way_out_of_a_home_problem_its_message_clips() -> None:
    """Doctor clips each problem to 300 characters, which cut the home's long message before its
    command: its advice names the first-start case and `sidecar index --accept-home` itself."""
    from sidecar.clients.doctor import check_problems

    why = "the home /mnt/nas/sidecar is not the folder sidecar kept the agents' memory in " + "x" * 400
    check = check_problems({"problems": {"active": [{"area": "home", "error": why, "count": 1}]}})
    assert not check.ok and "first started before it was" in check.todo
    assert "`sidecar index --accept-home`" in check.todo
