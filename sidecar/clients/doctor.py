"""``sidecar doctor``: one screen of checks for what usually goes wrong, each with a plain verdict
and what to do. Reads only (the model is hash-checked, never loaded or converted; the index lock is
probed, never kept). Every probe of the machine can be pointed elsewhere, which is how the tests
build broken setups. Imports config, client, errors, mounts, lockholder, service, snippets and
(for the model) model. The checks of the home and its disk are in ``doctor_storage``, the
service's in ``doctor_service``; ``doctor_checks`` holds what they share.

Every check runs in a worker thread with a deadline: a home, vault or share that hangs (a hard NFS
mount whose server is gone) gives a failed check "did not answer within N s" instead of a doctor
that hangs, the main thread only waits (Ctrl-C stops it), and each check is shown as it ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from sidecar.clients.cli_render import HOME_TODO, daily_notes_line, problem_area
from sidecar.clients.client import Client
from sidecar.clients.doctor_checks import Check, Probes, plural
from sidecar.clients.doctor_service import check_service
from sidecar.clients.doctor_storage import check_disk, check_home, check_storage
from sidecar.clients.lockholder import listening_on, lock_holder, starting_or_stopping
from sidecar.clients.service import (
    LABEL,
)
from sidecar.clients.snippets import daemon_args, mcp_snippets
from sidecar.config import DEFAULT_WIKI, Config
from sidecar.contracts.errors import (
    DaemonNotRunningError,
    EmbedderError,
    RemoteError,
    SidecarError,
    foreign_socket,
    shared_socket,
)
from sidecar.contracts.plainerror import plain_error
from sidecar.runtime.peer import socket_peer
from sidecar.runtime.release import (
    FIRST_RECORDING,
    WRITERS_META,
    downgraded_from,
    newer_writer,
    said,
    this_release,
    written_unrecorded,
)
from sidecar.stores.versions import (
    BM25_LAYOUT,
    MANIFEST_SCHEMA,
    NewerStore,
    bm25_layout,
    manifest_schema_now,
    newer_store,
)
from sidecar.vault.dailynotes import DailyNoteFormats
from sidecar.vault.timeout import folder_state, near_folder, run_with_timeout

_FOLDER_LIMIT = 200_000  # stop counting vault folders here: the verdict is clear by then
_WALK_SECONDS = 60.0  # count vault folders at most this long (a slow share that still answers)


def _count_folders(root: Path, stall: float, cap: float = _WALK_SECONDS) -> tuple[int, str | None]:
    """The vault's folders (up to _FOLDER_LIMIT), counted in a thread: (count, None) when done;
    (count so far, why) when no folder answered for ``stall`` seconds (a hung share) or the count
    took longer than ``cap`` (a huge or slow one that still answers)."""
    count, stop, done = [0], threading.Event(), threading.Event()

    def walk() -> None:
        try:
            for _dir, dirs, _files in os.walk(root):
                count[0] += len(dirs)
                if count[0] >= _FOLDER_LIMIT or stop.is_set():
                    break
        finally:
            done.set()

    threading.Thread(target=walk, name="doctor-walk", daemon=True).start()
    start = moved = time.monotonic()
    last = 0
    while not done.wait(0.2):
        now = time.monotonic()
        if count[0] != last:
            last, moved = count[0], now
        if now - moved >= stall:
            stop.set()
            return count[0] + 1, f"a folder did not answer within {stall:g} s"
        if now - start >= cap:
            stop.set()
            return count[0] + 1, f"counting stopped after {cap:g} s"
    return count[0] + 1, None


def check_vault(cfg: Config) -> tuple[Check, bool]:
    """The vault folder and its wiki are there (asked with a deadline: a hung share answers
    "does not answer", not a hung doctor); whether the vault can be looked into."""
    vault = cfg.vault.path
    if vault is None:
        return Check("vault", True, "no vault configured: only the agents' memory is indexed"), False
    timeout = min(cfg.watch.probe_timeout_seconds, 5.0)
    there, why = folder_state(vault, timeout)
    if not there:
        what = f"cannot be read: {why}" if why else "does not exist or is not a folder"
        return (
            Check(
                "vault",
                False,
                f"the vault {vault} {what}",
                "mount its share or fix vault.path; the daemon picks it up by itself once it is there",
            ),
            False,
        )
    if _empty_folder(vault, timeout):
        # What an unmounted share leaves behind: its mount point, empty. "ok" with "its wiki folder
        # is not in the vault" was read as all well during an outage. A warning: a new vault is
        # empty too; the daemon's own view (the `roots` check) fails when the share is gone.
        return (
            Check(
                "vault",
                True,
                f"the vault {vault} is empty: nothing to index (an unmounted share leaves its mount "
                "point empty)",
                "mount its share (or fix vault.path); the daemon keeps what it indexed meanwhile and "
                "picks the notes up by itself once they are there",
                warning=True,
            ),
            False,
        )
    wiki = vault / cfg.vault.wiki_subfolder
    wiki_there, wiki_why = folder_state(wiki, timeout)
    if wiki_there:
        return Check("vault", True, f"{vault}, wiki folder {cfg.vault.wiki_subfolder}/"), True
    if wiki_why is not None:  # no wiki is a choice; an unreadable one is not
        verdict = f"{vault}; its wiki folder {cfg.vault.wiki_subfolder}/ cannot be read: {wiki_why}"
        todo = "check the folder's permissions"
        return Check("vault", False, f"{verdict}: no note counts as wiki", todo), True
    # Named on purpose, or a folder of a near name is there (`Wiki` for wiki/, a cut `wi`): a
    # warning, with the folder meant. It was an "ok" nobody read as a mistake.
    # Named only when it is not the default: `config example --write` writes the default into
    # the file, and a vault without the optional wiki is well.
    named = cfg.vault.wiki_subfolder != DEFAULT_WIKI
    near = near_folder(vault, cfg.vault.wiki_subfolder, timeout, loose=named)
    meant = f"; did you mean {near}/?" if near else ""
    return (
        Check(
            "vault",
            True,
            f"{vault}; its wiki folder {cfg.vault.wiki_subfolder}/ is not in the vault: no note counts "
            f"as wiki{meant}",
            (f"set vault.wikiSubfolder: {near} (folder names are case-sensitive)" if near else "")
            or ("make the folder, or fix vault.wikiSubfolder" if named else ""),
            warning=bool(near) or named,
        ),
        True,
    )


def _empty_folder(path: Path, timeout: float) -> bool:
    """Whether a folder holds nothing at all, asked with a deadline (no answer: not known, False)."""

    def look() -> bool:
        with os.scandir(path) as it:
            return next(it, None) is None

    try:
        empty, _stuck = run_with_timeout(look, timeout, "doctor-vault")
    except OSError:
        return False
    return bool(empty)


def check_daily_notes(cfg: Config) -> Check:
    """The daily-note formats Obsidian's settings give (what dates a note by its name), read as
    the daemon reads them; a settings file that cannot be read is a warning."""
    formats = DailyNoteFormats(cfg.vault.path)
    formats.refresh()
    trouble = formats.trouble
    if trouble:
        # A warning: notes are still found, only not dated by their names in that format.
        return Check(
            "daily notes",
            True,
            trouble,
            "fix the file (Obsidian's Daily notes or Periodic Notes settings) or remove it",
            warning=True,
        )
    return Check("daily notes", True, daily_notes_line(formats.describe()))


def check_inotify(cfg: Config, probes: Probes, vault_network: bool, vault_there: bool = True) -> Check:
    vault = cfg.vault.path
    if vault is None or not vault_there:
        return Check("file events", True, "no vault folder to watch")
    if vault_network or not cfg.watch.events:
        return Check("file events", True, "the vault is polled (network share or watch.events off)")
    try:
        limit = int(probes.inotify_limit.read_text().strip())
    except (OSError, ValueError):
        return Check("file events", True, "no inotify limit on this system")
    folders, cut = _count_folders(vault, cfg.watch.probe_timeout_seconds)
    if cut is not None and cut.startswith("a folder"):
        return Check(
            "file events",
            False,
            f"the vault {vault}: {cut} after {plural(folders, 'folder')} (a hung share or disk?)",
            "check the disk or share the vault is on; the daemon reports such a folder and retries",
        )
    counted = f"at least {folders:,} ({cut})" if cut else f"{folders:,}"
    # Each folder costs one watch; editors, IDEs and sync tools share the same per-user limit.
    if folders * 2 > limit:
        return Check(
            "file events",
            False,
            f"the vault has {counted} folders but the inotify limit is {limit:,} watches: "
            "the daemon would poll the vault every watch.pollSeconds instead of following file events",
            f"raise it: sudo sysctl fs.inotify.max_user_watches={max(524288, folders * 4)} (and put "
            "the same line in /etc/sysctl.d/90-inotify.conf)",
        )
    noun = "vault folder" if folders == 1 and not cut else "vault folders"
    return Check("file events", True, f"{counted} {noun}, inotify limit {limit:,} watches")


def check_model(cfg: Config) -> Check:  # noqa: PLR0911 - one verdict per way a model is found
    from sidecar.model import e5folder
    from sidecar.model.files import SUMS, folder_files, verify_file
    from sidecar.model.locate import (
        DEFAULT_MODEL,
        MINILM_MODEL,
        MODEL_PACKAGES,
        bundled_model_files,
        install_command,
    )

    e = cfg.embedder
    if not e.enabled:
        return Check("model", True, "embedder disabled (embedder.enabled: false): keyword search only")
    if e.path is not None:
        found = folder_files(e.path, "configured path")
        if found is None:
            return Check(
                "model",
                False,
                f"embedder.path {e.path} needs model.onnx and tokenizer.json",
                "put both files there, or remove embedder.path to use the built-in model",
            )
        return Check("model", True, f"{e.model} from {e.path} (your own files: not hash-checked)")
    home = folder_files(cfg.models_dir / e.model, "home")
    if home is not None:
        return Check("model", True, f"{e.model} from {home.onnx.parent} (your own files: not hash-checked)")
    # The model's package as this installation pins it (a changed file: put back by force).
    reinstall = (
        f"reinstall the package named in the path: {install_command(e.model, force=True)} (a file "
        "under sidecar/data/: reinstall sidecar the way you installed it)"
    )
    missing = f"{e.model}: its package {MODEL_PACKAGES.get(e.model)} is not installed"
    try:
        if e.model == MINILM_MODEL:
            if bundled_model_files(MINILM_MODEL) is None:
                return Check("model", False, missing, f"install it: {install_command(e.model)}")
            return Check("model", True, f"{e.model}: built-in files, sha256 verified")
        if e.model == DEFAULT_MODEL:
            source = e5folder.source_path()
            if source is None:
                return Check("model", False, missing, f"install it: {install_command(e.model)}")
            verify_file(source, e5folder.SOURCE_SHA256)
            with contextlib.suppress(metadata.PackageNotFoundError):
                folder = cfg.prepared_dir / e5folder.folder_name(metadata.version("onnxruntime"))
                if (folder / SUMS).is_file():
                    e5folder.verify_folder(folder)
                    return Check("model", True, f"{e.model}: source and converted files, sha256 verified")
            return Check(
                "model",
                True,
                f"{e.model}: source file sha256 verified; the daemon converts it once at its first start "
                "(about a minute)",
            )
    except EmbedderError as exc:
        return Check("model", False, str(exc), reinstall)
    return Check(
        "model",
        False,
        f"model {e.model!r} not found in {cfg.models_dir / e.model}",
        "put model.onnx and tokenizer.json there, or set embedder.path",
    )


def start_hint(cfg: Config) -> str:
    """How to start the daemon this command looks for: with the flags that point it here (a
    bare `sidecar serve` would serve the default configuration, home and socket)."""
    serve = shlex.join(["sidecar", "serve", *daemon_args(cfg)])
    service = (
        f"launchctl kickstart gui/$(id -u)/{LABEL}"
        if sys.platform == "darwin"
        else "systemctl --user start sidecar"
    )
    return f"start it: {serve} (foreground), or {service} when the service is installed"


def served_config(cfg: Config, timeout: float = 2.0) -> tuple[Config, str]:
    """The configuration doctor checks, and what the header says of its vault. The quick start
    gives the daemon its vault by flag (`sidecar serve --vault DIR`); a doctor without the flag
    has none configured and said "no vault configured" (ok) and skipped the watch-limit check while
    that daemon indexed a vault. With none configured, the vault of the daemon running on this home
    is the one checked (asked with a deadline: a daemon that does not answer leaves ``cfg`` as it is)."""
    if cfg.vault.path is not None:
        return cfg, str(cfg.vault.path)

    def ask() -> dict[str, Any] | None:
        with contextlib.suppress(SidecarError, OSError), Client(cfg.socket_path, timeout=timeout) as client:
            health: dict[str, Any] = client.call("health")
            return health
        return None

    health, _stuck = run_with_timeout(ask, timeout + 1.0, "doctor-served")
    served = (health or {}).get("vault")
    if not served or (health or {}).get("home") != str(cfg.home):
        return cfg, "not configured"
    vault = dataclasses.replace(cfg.vault, path=Path(served))
    return dataclasses.replace(cfg, vault=vault), f"{served} (the running daemon's; none configured here)"


def _other_vault(cfg: Config, health: dict[str, Any]) -> str:
    """A word when the daemon on this home indexes another vault or wiki folder than this
    configuration names (it was started with other flags or an older file: a `reload` does not
    move either). It compared the vault only: a wiki changed in the file passed as all well."""
    served = health.get("vault")
    if cfg.vault.path is None or health.get("home") != str(cfg.home):
        return ""
    if served != str(cfg.vault.path):
        return f"; it indexes {served or 'no vault'}, not the vault {cfg.vault.path} named here"
    wiki = str(cfg.vault.path / cfg.vault.wiki_subfolder)
    served_wiki = next((r.get("path") for r in health.get("roots") or [] if r.get("name") == "wiki"), None)
    if served_wiki is not None and served_wiki != wiki:
        return f"; its wiki folder is {served_wiki}, not {wiki} as named here"
    return ""


def check_daemon(cfg: Config, probe_lock: bool = True) -> tuple[Check, Check, dict[str, Any] | None]:
    """Socket reachability, and whether another daemon holds this home's index."""
    health: dict[str, Any] | None = None
    holder = lock_holder(cfg) if probe_lock else None
    try:
        with Client(cfg.socket_path, timeout=5.0) as client:
            health = client.call("health")
    except DaemonNotRunningError:
        # A daemon that holds this home but listens elsewhere must not get a second one beside it.
        todo = "see `one daemon per home` below" if holder is not None else start_hint(cfg)
        socket = Check("daemon", False, f"no daemon answers on {cfg.socket_path}", todo)
        phase = starting_or_stopping(cfg) if probe_lock else None
        if phase is not None:  # its lock says so: not another daemon, nor a hung disk
            socket = Check("daemon", False, f"no daemon answers on {cfg.socket_path}: {phase}", "")
            holder = None
    except SidecarError as exc:
        if isinstance(exc, RemoteError) and exc.code == "storage":
            # It answers, refusing for its index (one it cannot read): its words say what to do,
            # a restart changes nothing; it holds the index (its lock file may not say so).
            socket = Check("daemon", False, f"answers on {cfg.socket_path}, refusing: {exc}", "")
            holder = None
        else:
            socket = Check("daemon", False, f"{cfg.socket_path}: {exc}", "restart the daemon")
    if health is not None and health.get("refusing"):
        # Its record says so (it answers health in that state): as above, no record to check.
        socket = Check("daemon", False, f"answers on {cfg.socket_path}, refusing: {health['refusing']}", "")
        health = holder = None
    elif health is not None:
        other_vault = _other_vault(cfg, health)
        theirs = {"version": str(health.get("version")), "build": str(health.get("build") or "")}
        runs = f"answers on {cfg.socket_path} (pid {health['pid']}, {said(theirs)}){other_vault}"
        socket = Check(
            "daemon",
            True,
            runs,
            "restart it with this configuration (`sidecar service install` again for a service)"
            if other_vault
            else "",
            warning=bool(other_vault),
        )
        idx = health.get("index") or {}
        older = _older_code(theirs, idx.get("newer_writer"), idx.get("other_build"))
        if older and not other_vault:
            socket = Check("daemon", True, f"{runs}; {older[0]}", older[1], warning=True)
    file = str(cfg.source_file) if cfg.source_file else None
    peer = socket_peer(cfg.socket_path) if health is None else None
    if health is not None and health.get("home") != str(cfg.home):
        # In the words a daemon of this home started then is refused with (exit 4).
        what, todo = shared_socket(str(cfg.socket_path), health, str(cfg.home), file)
        other = Check("one daemon per home", False, what, todo)
    elif peer is not None and peer[1] is not None and peer[1] != os.getuid():
        what, todo = foreign_socket(str(cfg.socket_path), peer[0], peer[1], file)  # as refused
        other = Check("one daemon per home", False, what, todo)
    elif holder is not None and (health is None or holder != f"pid {health['pid']}"):
        sockets = listening_on(holder)
        where = f" and listens on {', '.join(sockets)}" if sockets else ""
        other = Check(
            "one daemon per home",
            False,
            f"the index {cfg.index_dir} is held by {holder}{where}, which does not answer on "
            f"{cfg.socket_path}",
            "a daemon started with another --socket (or XDG_RUNTIME_DIR: a service installed from a "
            "shell without it), or a `sidecar index` run: use that daemon's socket (`sidecar service "
            "install` again pins this one), stop it, or wait for the run to finish",
        )
    else:
        other = Check("one daemon per home", True, "no other daemon uses this home")
    return socket, other, health


def check_problems(health: dict[str, Any]) -> Check:
    """What the running daemon itself reports as wrong (status' PROBLEM lines): doctor said "all
    checks passed" while every vector search of that daemon failed and it re-embedded in a loop."""
    active = (health.get("problems") or {}).get("active", [])
    if not active:
        return Check("daemon problems", True, "the daemon reports none")
    # In status' plain words (a Rust debug dump said "disk full" in sixty words), not clipped: the
    # lines after the first of a multi-line error name the file and the cause.
    said = "; ".join(f"{problem_area(str(p['area']))}: {plain_error(str(p['error']))}" for p in active)
    fix = (
        "`sidecar status` shows each with what to do (README, Troubleshooting); most clear by themselves "
        "once the fault is gone"
    )
    if any(p["area"] == "home" for p in active):  # the command may be clipped off the message
        fix += f"; the home: {HOME_TODO}"
    return Check(
        "daemon problems", False, f"the daemon reports {plural(len(active), 'problem')}: {said}", fix
    )


def check_roots(health: dict[str, Any]) -> Check:
    """The folders the running daemon cannot read now (offline: a share unmounted, hung or gone)
    or whose deletions it holds: doctor said "the daemon reports none" through a whole outage."""
    roots = health.get("roots") or []
    offline = [r for r in roots if r.get("mode") == "offline"]
    held = [r for r in roots if r.get("mode") == "held"]
    if not offline and not held:
        return Check("roots", True, "the daemon reads every folder")
    said = "; ".join(
        f"{r['name']} {r['mode']}: {plain_error(str(r.get('error') or ''))}" for r in offline + held
    )
    if offline:
        return Check(
            "roots",
            False,
            f"the daemon cannot read {', '.join(r['name'] for r in offline)} now: {said}",
            "mount the share (or fix its permissions); searches answer from what was indexed, nothing "
            "is deleted, and the daemon picks it up by itself (`sidecar status` shows when)",
        )
    return Check(
        "roots",
        True,
        f"deletions held: {said}",
        "if the notes were removed on purpose, confirm with the command named; else put them back",
        warning=True,
    )


REBUILD_TODO = (
    "start the newer sidecar again, or run `sidecar index --rebuild` (with the daemon stopped) to "
    "build this version's index from the notes; the newer one is moved aside"
)


def _older_code(
    theirs: dict[str, str], newer: dict[str, str] | None, other: dict[str, str] | None = None
) -> tuple[str, str] | None:
    """What to say of a daemon that runs other code than this installation (installed anew and
    not restarted: told by the release, or by the build where both are one release), or older
    code than the release that last wrote its index, or an earlier build of its release than the
    one that wrote it last before it started (``other``); None when none."""
    rebuild = "rebuild the index with this one (`sidecar index --rebuild` with the daemon stopped)"
    if newer:
        return (f"the index was written by a newer sidecar ({said(newer)})", f"run that one, or {rebuild}")
    mine = this_release()
    if theirs["version"] != mine["version"] or (theirs["build"] and theirs["build"] != mine["build"]):
        return (
            f"this installation is {said(mine)}",
            "restart it to run the installed one (systemctl --user restart sidecar, or stop and start "
            "`sidecar serve`)",
        )
    if other and other.get("build"):
        return (
            f"the index was last written by build {other['build']} of this release, later than the "
            "daemon's (a downgrade, judged by the order the builds first wrote the index, not by "
            "their age)",
            "if that build is the newer one, run it; if the daemon's is newer (an older build ran in "
            "between), nothing is wrong: this goes at the daemon's next start",
        )
    return None


def _writers(path: Path) -> str | None:
    """The index's record of its writers (its manifest's meta, read only); None when there is
    none or it cannot be read."""
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=2)) as db:
            row = db.execute("SELECT value FROM meta WHERE name = ?", (WRITERS_META,)).fetchone()
    except sqlite3.Error:
        return None
    return str(row[0]) if row else None


def _last_other_build(writers: str | None) -> dict[str, str] | None:
    """The last writer when this installation's build is a downgrade from it (a build of its
    release that wrote the index first), else None; an installed build never seen is an upgrade."""
    return downgraded_from(writers, this_release()["build"])


def check_index(cfg: Config) -> Check:
    """The versions the index's stores were written in: one a newer sidecar wrote (a downgrade)
    refuses the daemon's start (exit 3), which only its log said."""
    newer = newer_store(cfg.index_dir)
    if newer is not None:
        return Check("index", False, newer.describe(), REBUILD_TODO)
    # Through the write-ahead log where it holds commits: a running daemon's new index, or one amid
    # an upgrade, keeps its schema there until a checkpoint (the header alone said "schema 0" or the
    # old schema, "upgraded at the next start").
    manifest = cfg.index_dir / "manifest.sqlite"
    schema = manifest_schema_now(manifest)
    if schema is None:
        return Check("index", True, "no index yet: the daemon builds it at its first start")
    if schema > MANIFEST_SCHEMA:  # a newer sidecar's, checkpointed since newer_store read it
        return Check(
            "index", False, NewerStore("manifest", manifest, schema, MANIFEST_SCHEMA).describe(), REBUILD_TODO
        )
    layout = bm25_layout(cfg.index_dir / "bm25")
    later = " (upgraded at the next start)" if schema < MANIFEST_SCHEMA else ""
    keywords = f"keyword index layout {layout}" if layout is not None else "no keyword index yet"
    if layout is not None and layout < BM25_LAYOUT:
        # Layout 2 is refilled beside itself and answers meanwhile (``index.upgrade``).
        keywords += (
            " (rebuilt in the background at the next start; searches answer from it meanwhile)"
            if layout == BM25_LAYOUT - 1
            else " (rebuilt at the next start)"
        )
    verdict = f"manifest schema {schema}{later}, {keywords}: this version reads them"
    writers = _writers(cfg.index_dir / "manifest.sqlite")
    if written_unrecorded(writers):
        verdict += (
            f"; written by a release before {FIRST_RECORDING} too, which records no writer (a "
            "downgrade to one is not said)"
        )
    writer = newer_writer(writers)
    other = _last_other_build(writers)
    if writer is None and other is not None:  # a later build of this release wrote it last
        return Check(
            "index",
            True,
            f"{verdict}; last written by build {other['build']} of this release, later than this "
            f"installation's build {this_release()['build']} (a downgrade, judged by the order the "
            "builds first wrote the index, not by their age)",
            "if that build is the newer one, run it; if this one is newer (an older build ran in "
            "between), nothing is wrong: this goes at this daemon's next start",
            warning=True,
        )
    if writer is not None:  # the same store versions, but a newer release wrote it (a downgrade)
        return Check(
            "index",
            True,
            f"{verdict}; written by a newer sidecar ({said(writer)}) than this one ({said(this_release())})",
            "run that one, or rebuild the index with this one (`sidecar index --rebuild` with the "
            "daemon stopped)",
            warning=True,
        )
    return Check("index", True, verdict)


MANY_AGENTS = 200  # from this many agents' inboxes on, doctor says what they cost


def check_agents(cfg: Config) -> list[Check]:
    """A warning once hundreds of agent names hold an inbox: each is a root (file watches, a look
    at every sweep, its .trash and audit log) and keeps a keyword index of its own (about 76 KB
    and 20 files) while its agent uses it. A search without --agent reads one index of all memory
    whatever the count."""
    try:
        inboxes = sum(1 for p in cfg.agents_dir.iterdir() if "." not in p.name and (p / "memory").is_dir())
    except OSError:
        return []
    if inboxes < MANY_AGENTS:
        return []
    days = cfg.memory.index_idle_days
    kept = f"not used for {days} days" if days else "never (memory.indexIdleDays: 0)"
    return [
        Check(
            "agents",
            True,
            f"{inboxes} agents' inboxes: each is watched (file watches) and looked at by every sweep, "
            "and keeps its .trash and audit log; an agent's own keyword index is removed when "
            f"{kept} and rebuilt when it is back",
            'name agents per project or per tool rather than per session (README, "Agents named '
            'per session or per project"); an agent whose notes are all deleted is retired after '
            "memory.trashDays",
            warning=True,
        )
    ]


# --- running the checks with deadlines -----------------------------------------------------------


def _bounded(
    names: tuple[str, ...], fn: Callable[[], list[Check]], budget: float, subject: str
) -> list[Check]:
    """``fn``'s checks, run in a worker thread: a failed check per name when it does not end
    within ``budget`` seconds or fails itself (a traceback helps nobody reading doctor)."""
    try:
        value, stuck = run_with_timeout(fn, budget, f"doctor-{names[0].replace(' ', '-')}")
    except (OSError, SidecarError) as exc:
        return [Check(n, False, f"could not be checked: {exc}", "") for n in names]
    except Exception as exc:  # doctor reports, it does not crash
        return [Check(n, False, f"could not be checked: {type(exc).__name__}: {exc}", "") for n in names]
    if stuck is not None or value is None:
        return [
            Check(n, False, f"{subject} did not answer within {budget:g} s (a hung share or disk?)", "")
            for n in names
        ]
    return value


class _Run:
    """The checks in the order they are shown, each bounded, with what earlier ones learned (a
    folder that hangs costs one deadline, not one per check)."""

    def __init__(self, cfg: Config, probes: Probes) -> None:
        self.cfg, self.probes = cfg, probes
        self.t = cfg.watch.probe_timeout_seconds
        self.hung: dict[str, str] = {}
        self.vault_network = False
        self.vault_there = False

    def storage(self) -> list[Check]:
        def run() -> list[Check]:
            (check, self.vault_network), self.hung = check_storage(self.cfg, self.probes, self.t)
            return [check]

        return _bounded(("storage",), run, 2 * self.t + 10, "the mount table")

    def _skip(self, name: str, what: str = "home") -> Check:
        path = self.cfg.home if what == "home" else self.cfg.vault.path
        return Check(name, False, f"not checked: the {what} {path} {self.hung[what]}", "")

    def home(self) -> list[Check]:
        if "home" in self.hung:
            return [self._skip("home")]
        return _bounded(("home",), lambda: [check_home(self.cfg)], self.t, f"the home {self.cfg.home}")

    def vault(self) -> list[Check]:
        if "vault" in self.hung:
            return [
                Check(
                    "vault",
                    False,
                    f"the vault {self.cfg.vault.path} {self.hung['vault']} (a hung share?)",
                    "check its share or remount it (`soft` mounts fail instead of hanging); the daemon "
                    "reports it offline and picks it up by itself once it answers",
                )
            ]

        def run() -> list[Check]:
            check, self.vault_there = check_vault(self.cfg)
            return [check, check_daily_notes(self.cfg)] if self.vault_there else [check]

        return _bounded(("vault",), run, 2 * self.t + 5, f"the vault {self.cfg.vault.path}")

    def file_events(self) -> list[Check]:
        there = self.vault_there and "vault" not in self.hung
        return _bounded(
            ("file events",),
            lambda: [check_inotify(self.cfg, self.probes, self.vault_network, there)],
            _WALK_SECONDS + self.t + 5,
            f"the vault {self.cfg.vault.path}",
        )

    def disk(self) -> list[Check]:
        if "home" in self.hung:
            return [self._skip("disk")]
        return _bounded(
            ("disk",), lambda: [check_disk(self.cfg)], max(self.t, 30.0), f"the home {self.cfg.home}"
        )

    def index(self) -> list[Check]:
        if "home" in self.hung:
            return [self._skip("index")]
        where = f"the index {self.cfg.index_dir}"
        return _bounded(("index",), lambda: [check_index(self.cfg), *check_agents(self.cfg)], self.t, where)

    def model(self) -> list[Check]:
        e = self.cfg.embedder
        if e.enabled and e.path is None and "home" in self.hung:
            return [self._skip("model")]
        if e.enabled and e.path is not None:
            _there, why = folder_state(e.path, self.t)
            if why is not None:
                return [Check("model", False, f"embedder.path {e.path} cannot be read: {why}", "")]
        # Hashing a model file takes a few seconds on a slow disk: a wider deadline.
        return _bounded(("model",), lambda: [check_model(self.cfg)], max(self.t, 120.0), "the model files")

    def daemon(self) -> list[Check]:
        lock = "home" not in self.hung

        def run() -> list[Check]:
            socket, other, health = check_daemon(self.cfg, probe_lock=lock)
            if health is None:
                return [socket, other]
            return [socket, other, check_problems(health), check_roots(health)]

        return _bounded(
            ("daemon", "one daemon per home"),
            run,
            self.t + 10,
            f"the socket {self.cfg.socket_path}",
        )

    def service(self) -> list[Check]:
        return _bounded(
            ("service",), lambda: [check_service(self.cfg, self.probes)], self.t + 10, "the service file"
        )


def run_checks(
    cfg: Config, probes: Probes | None = None, on_check: Callable[[Check], None] | None = None
) -> list[Check]:
    """Every check, in the order shown; ``on_check`` sees each as soon as it is done."""
    run = _Run(cfg, probes or Probes())
    out: list[Check] = []
    for step in (
        run.storage,
        run.home,
        run.vault,
        run.file_events,
        run.disk,
        run.index,
        run.model,
        run.daemon,
        run.service,
    ):
        for check in step():
            out.append(check)
            if on_check is not None:
                on_check(check)
    return out


# --- output ---------------------------------------------------------------------------------------


def header(cfg: Config, vault: str | None = None) -> str:
    """The first line; ``vault`` is what ``served_config`` says of the vault checked."""
    vault = vault or str(cfg.vault.path or "not configured")
    return f"{said(this_release())} doctor: home {cfg.home}, vault {vault}"


def render_check(c: Check) -> str:
    mark = "FAIL" if not c.ok else "warn" if c.warning else "ok  "
    line = f"  {mark}  {c.name:<19} {c.verdict}"
    return line + (f"\n{'':<27}-> {c.todo}" if c.todo else "")


def summary(checks: list[Check]) -> str:
    bad = [c.name for c in checks if not c.ok]
    warned = [c.name for c in checks if c.ok and c.warning]
    text = "all checks passed" if not bad else f"{len(bad)} check(s) failed: {', '.join(bad)}"
    return text + (f"; {len(warned)} warning(s): {', '.join(warned)}" if warned else "")


def render(checks: list[Check], cfg: Config) -> str:
    lines = [header(cfg), *(render_check(c) for c in checks), summary(checks), "", mcp_snippets(cfg)]
    return "\n".join(lines)
