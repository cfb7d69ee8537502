"""The service commands: serve, index, status, reload, config, completion (service and doctor are
in cli_service). ``serve`` and an offline ``index`` import the daemon lazily; ``status`` only asks
the socket."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from sidecar.clients.cli_parser import UsageError, build_parser, config_of, serve_flags
from sidecar.clients.cli_progress import Progress
from sidecar.clients.cli_render import render_status, waited_call
from sidecar.clients.client import Client
from sidecar.clients.foreground import backlog, time_left
from sidecar.config import Config
from sidecar.contracts.errors import (
    ConfigError,
    DaemonNotRunningError,
    DaemonStartingError,
    DaemonUnreachableError,
    ExitCode,
    StorageError,
)
from sidecar.contracts.printable import escape_controls as shown
from sidecar.contracts.printable import few_names, quoted
from sidecar.runtime.notify import restart_words
from sidecar.vault.homeguard import forget, record_path

# `sidecar index` stops waiting for vectors once the count of chunks waiting for one has not gone
# down for this long (a model that hangs, a backfill held by searches): it says what is left.
VECTOR_STALL_S = 120.0
# While it waits for vectors, `sidecar index` says the time left this often (a line of its own).
VECTOR_ETA_EVERY_S = 600.0


def _check_vault(args: argparse.Namespace, cfg: Config, *, serving: bool) -> None:
    """A vault folder that does not exist: the daemon waits for it (a share not mounted yet), with
    a warning; a literal ``~`` from the command line (quoted, so the shell did not expand it) or
    an offline ``index`` run is an error instead of a run over 0 notes."""
    from sidecar.contracts.errors import ConfigError
    from sidecar.vault.timeout import folder_state

    path = cfg.vault.path
    if path is None:
        return
    # Briefly: this only decides a warning, and a hung share must not hold the start (the
    # daemon's own checks are bounded by the probe timeout and report it).
    timeout = cfg.watch.probe_timeout_seconds
    there, why = folder_state(path, min(2.0, timeout) if serving else timeout)
    if there:
        return
    if why is not None:  # there, but not answering: a share that is down or hangs
        if not serving:
            raise ConfigError(f"vault.path: the folder {path} cannot be read now ({why})")
        print(
            f"sidecar: warning: the vault folder {path} cannot be read now ({why}); serving agent "
            "memory and the notes already indexed, retrying it",
            file=sys.stderr,
        )
        return
    raw = getattr(args, "vault", None)
    if raw is not None and "~" in raw:
        raise ConfigError(
            f"--vault {raw}: the folder {path} does not exist; the shell did not expand '~' "
            "(was it quoted?): write the full path"
        )
    if not serving:
        raise ConfigError(f"vault.path: the folder {path} does not exist")
    print(
        f"sidecar: warning: the vault folder {path} does not exist (yet); serving agent memory and "
        "waiting for it to appear (e.g. a share that is not mounted)",
        file=sys.stderr,
    )


def cmd_serve(args: argparse.Namespace, cfg: Config) -> int:
    from sidecar.runtime import heap, logs

    heap.tune()  # before the stores' native threads exist
    from sidecar.daemon.lifecycle import Daemon, exit_now

    _check_vault(args, cfg, serving=True)
    logs.setup(cfg.logging.level, journald=cfg.journald)
    if sys.stdout.isatty() and not cfg.journald and not args.json:
        import threading

        from sidecar.clients.foreground import follow

        follow(cfg.socket_path, threading.Event(), sys.stdout)
    daemon = Daemon(cfg, reload_config=lambda: config_of(args), hangup_stops=_in_a_terminal())
    daemon.run()
    # A request that outlasted the stop's drain runs on and the stores close after it: waited for,
    # with a bound (the interpreter's exit would wait on its worker for ever).
    stopped = daemon.wait_stopped()
    if stopped:
        daemon.exiting()
    # The index lock kept for a vector write under way: exit at once (its record says `stopped`).
    if not stopped or daemon.stuck or daemon.requests_left() or daemon.lock_kept:
        # A worker is still inside the model's native code (a batch of a model switch outlasts
        # the stop's wait): the interpreter's own exit would tear down under it and abort (exit
        # 134, "terminate called without an active exception"), and it would wait for ever on a
        # read hung on a share. Everything is closed by now, or a write still runs past both
        # bounds (its stores' files are left as a crash leaves them: a code of its own says so).
        exit_now(int(ExitCode.OK if stopped else ExitCode.STOP_ABANDONED))
    return int(ExitCode.OK)


def _in_a_terminal() -> bool:
    """A person runs this daemon in a terminal (stdin is one): closing it must stop the daemon.
    Not under a service manager (stdin is /dev/null), nor under ``nohup`` (SIGHUP ignored: the
    user asked it to outlive the terminal)."""
    import signal

    return sys.stdin.isatty() and signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN


def _swept(idx: dict[str, Any], ticket: int | None, before: int) -> bool:
    """Whether the sweep this command asked for has ended: health's ``asked_done`` reached the
    request's ``ticket``. Any sweep that ended since the request stood for it before: one already
    running when it came (a note being saved) ended, the rebuild had only emptied the index, and
    the command said "indexed 0 notes" while the rebuild ran on for a minute. A daemon that
    numbers no requests (older) is still asked the old way."""
    done = idx.get("asked_done")
    if ticket is None or done is None:
        return bool(idx["sweeps"] > before)
    return bool(done >= ticket)


def cmd_index(args: argparse.Namespace, cfg: Config) -> int:
    bar = Progress(sys.stderr)
    if args.accept_home:
        # The record of the home is the daemon's only memory of it: without it the next check
        # (the sweep this command asks for) takes the folder there as the home.
        forgotten = forget(cfg)
        print(
            f"the folder {cfg.home} is taken as the home"
            + ("" if forgotten else " (no other one was recorded)"),
            file=sys.stderr,
        )
    sent = False
    try:
        with Client(
            cfg.socket_path, config_file=cfg.source_file, serve_flags=serve_flags(args, cfg)
        ) as client:
            first = _served_health(client)
            before = first["index"]["sweeps"]
            params: dict[str, Any] = {"rebuild": bool(args.rebuild)}
            if args.confirm_deletions:
                params["confirmDeletions"] = args.confirm_deletions
            asked = time.time()
            sent = True  # from here a lost daemon may have taken the request: no fallback
            reply = client.call("index", params)
            ticket = reply.get("ticket")
            if args.confirm_deletions and not _holds(first, args.confirm_deletions):
                # Typed because status once said so, or by mistake: "indexed 425 notes" alone left
                # the person wondering what was confirmed.
                print(
                    f"note: no deletions were held for {shown(args.confirm_deletions)}: nothing to "
                    "confirm; the sweep runs as usual",
                    file=sys.stderr,
                )
            health = _wait_for_sweep(client, bar, ticket, before, asked)
            stalled = False
            if ticket is not None and health["index"].get("asked_done") is not None:
                health, stalled = _wait_for_vectors(client, bar, health, asked)
            idx = health["index"]
        if args.accept_home:
            _say_if_still_refused(health, cfg)
        # A root that could not be swept keeps what was indexed (offline), or its deletions wait
        # (held): say so, not only the totals.
        offline = [r for r in health.get("roots", []) if r.get("mode") in ("offline", "held")]
        still = _still_going_on(idx, health["embedder"], stalled)
        if args.json:
            print(
                json.dumps(
                    {
                        "through": "daemon",
                        "files": idx["files"],
                        "chunks": idx["chunks"],
                        "pending_vectors": idx["pending_vectors"],
                        "phase": idx["phase"],
                        "offline": [
                            {"name": r["name"], "mode": r["mode"], "error": r.get("error")} for r in offline
                        ],
                        "refused_inboxes": idx.get("refused_inboxes", []),
                    }
                )
            )
        else:
            kept = "".join(
                f"; {r['name']} "
                + ("deletions held" if r["mode"] == "held" else "offline, kept as indexed")
                + f": {shown(str(r.get('error')))}"
                for r in offline
            ) + _refused_inboxes_said(idx.get("refused_inboxes", []))
            bar.done(f"indexed {idx['files']} notes, {idx['chunks']} chunks (through the daemon){kept}")
        for line in still:
            print(f"note: {line}", file=sys.stderr)
        return _rebuild_unfinished(_rebuild_problem(health) if args.rebuild else None)
    except DaemonNotRunningError as exc:
        if isinstance(exc, DaemonStartingError):  # waited as long as it may: indexing here is refused
            raise
        if sent:
            # The daemon took the request, then stopped or died. Indexing here now would hold the
            # index lock against its restart (systemd restarts it at once): nothing would answer
            # searches until this finished. The daemon picks the work up when it starts again.
            bar.done("")
            again = (
                "run this command again once it is back (a rebuild or a confirmation is not resumed)"
                if args.rebuild or args.confirm_deletions
                else "it goes on with the work when it starts again (`sidecar status` shows it)"
            )
            raise DaemonNotRunningError(f"the daemon stopped while it was indexing ({exc}); {again}") from exc
    return _index_here(args, cfg, bar)


def _served_health(client: Client) -> dict[str, Any]:
    """Health of a daemon that serves its index; one refusing it (the index cannot be read: its
    record has no counters) is an error in its own words, exit 7 (a KeyError's traceback was
    shown instead)."""
    health: dict[str, Any] = client.call("health")
    if refusing := health.get("refusing"):
        raise StorageError(f"the daemon cannot index now: {refusing}")
    return health


def _wait_for_sweep(
    client: Client, bar: Progress, ticket: int | None, before: int, asked: float
) -> dict[str, Any]:
    """Health once the sweep `sidecar index` asked for is done, the progress shown meanwhile."""
    said: set[tuple[str, str, int]] = set()
    while True:
        health = _served_health(client)
        idx = health["index"]
        _show_progress(bar, idx, health["embedder"])
        _say_waiting(bar, idx.get("waiting"), said)
        swept = _swept(idx, ticket, before)
        if swept and ticket is not None and idx.get("asked_done") is not None:
            # Its own sweep is done: other sweeps after it (the changes of a note saved over and
            # over) are said, not waited for (a daemon never idle kept the command waiting for
            # good); its vectors are waited for next (``_wait_for_vectors``).
            return health
        waiting = health["embedder"]["state"] == "ok" and backlog(idx) > 0
        if swept and idx["phase"] == "idle" and not waiting:
            return health  # a daemon that numbers no requests: its sweep is done once it is idle
        failing = _failing_since(health, asked, ("index", "stores"))
        if failing is not None:  # the sweep cannot finish: say why instead of waiting on
            bar.done("")
            raise StorageError(
                f"the index cannot be updated now: {failing}; nothing indexed is lost and the "
                "daemon retries by itself (`sidecar status` shows when it recovers)"
            )
        if swept and waiting and _failing_since(health, asked, ("embedding",)):
            return health  # notes are in; their vectors wait for the model (status says why)
        time.sleep(0.5)


def _wait_for_vectors(
    client: Client, bar: Progress, health: dict[str, Any], asked: float
) -> tuple[dict[str, Any], bool]:
    """After its own sweep, `sidecar index` waits until no chunk waits for its vector while the
    model is on and ok: `sidecar index && sidecar search ...` expects meaning-based hits. Never
    for other sweeps or for an idle daemon; at once when the model is off, loading or failed (said
    by ``_still_going_on``). Returns the last health and whether it gave up because the count
    of waiting chunks stopped going down for ``VECTOR_STALL_S``."""
    lowest, since, said = None, time.monotonic(), None
    while True:
        idx = health["index"]
        pending = backlog(idx)  # a note written continuously leaves a few chunks: no backlog
        if health["embedder"]["state"] != "ok" or not pending:
            return health, False
        if _failing_since(health, asked, ("embedding",)):
            return health, False  # the model fails on them: status says why
        left = time_left(pending, idx.get("embed_rate_chunks_per_second"), idx.get("embed_rate_rough"))
        if said is None:
            bar.say(
                f"computing the vectors of {pending:,} chunks{left}, so that search finds them by their "
                "meaning too (Ctrl-C stops waiting; the daemon goes on in the background)"
            )
            said = (time.monotonic(), bool(left))
        elif left and (not said[1] or time.monotonic() - said[0] >= VECTOR_ETA_EVERY_S):
            # The estimate once the daemon has a pace, then now and then: a wait of hours said
            # nothing of its length.
            bar.say(f"vectors: {pending:,} chunks still to compute{left}")
            said = (time.monotonic(), True)
        if lowest is None or pending < lowest:
            lowest, since = pending, time.monotonic()
        elif time.monotonic() - since >= VECTOR_STALL_S:
            return health, True
        bar.update("embedding", idx["chunks"] - pending, idx["chunks"])
        time.sleep(0.5)
        health = _served_health(client)


def _still_going_on(idx: dict[str, Any], embedder: dict[str, Any], stalled: bool = False) -> list[str]:
    """What the daemon still does once the sweep `sidecar index` asked for is done, in words."""
    out = []
    if idx["phase"] in ("scanning", "indexing"):
        progress = idx.get("progress") or {}
        of = f" ({progress['done']:,} of {progress['total']:,})" if progress.get("total") else ""
        out.append(
            f"the daemon goes on with changes made since{of}: notes saved meanwhile are found "
            "once it has read them (`sidecar status` shows it)"
        )
    pending = idx["pending_vectors"]
    if pending and embedder["state"] != "off":
        why = {
            "ok": f" (no progress for {VECTOR_STALL_S:.0f} s, so not waited for)" if stalled else "",
            "failed": " once the embedding model loads (it failed to: `sidecar status` says why)",
        }.get(embedder["state"], " once the embedding model has loaded")
        out.append(
            f"{pending:,} chunks still wait for their vectors, computed in the background{why}; "
            "search finds them by their words meanwhile (`sidecar status` shows the progress)"
        )
    return out


def _say_if_still_refused(health: dict[str, Any], cfg: Config) -> None:
    """After `--accept-home` and the sweep it asked for, a daemon that still refuses the home did
    not read the consent: one started from an earlier sidecar (it takes only a removed record,
    and nothing in its answers tells its code apart, the version number being the same), or one
    keeping its state in another folder. Said, as "taken as the home" alone was not true."""
    refused = [p["error"] for p in health["problems"]["active"] if p.get("area") == "home"]
    if refused:
        print(
            f"note: the running daemon still refuses the home: {shown(refused[0])}. It did not read "
            f"the consent written to {record_path(cfg)}: {restart_words(health.get('service'))} (a "
            "daemon started before this sidecar was installed does not read it); if it "
            "still refuses, it keeps its state in another folder than this command ($XDG_STATE_HOME)",
            file=sys.stderr,
        )


def _holds(health: dict[str, Any], root: str) -> bool:
    """Whether the daemon holds deletions of ``root`` (a mass deletion waiting for a confirmation)."""
    return any(r.get("name") == root and (r.get("held_deletions") or r.get("hold")) for r in health["roots"])


def _index_here(args: argparse.Namespace, cfg: Config, bar: Progress) -> int:
    """`sidecar index` in this process (no daemon runs)."""
    _check_vault(args, cfg, serving=False)
    if args.confirm_deletions:
        _check_root(cfg, args.confirm_deletions)
    from sidecar.daemon.oneshot import index_once
    from sidecar.runtime import logs

    logs.setup(cfg.logging.level if cfg.logging.level != "info" else "warning", journald=cfg.journald)
    confirm = frozenset([args.confirm_deletions]) if args.confirm_deletions else frozenset()
    told: set[tuple[str, str, int]] = set()
    summary = index_once(
        cfg,
        rebuild=bool(args.rebuild),
        progress=bar.update,
        confirm=confirm,
        waiting=lambda w: _say_waiting(bar, w, told),
    )
    unfinished = summary.get("rebuild_unfinished") if args.rebuild else None
    if args.json:
        print(json.dumps({"through": "in-process", **summary}, default=str))
        return _rebuild_unfinished(unfinished)
    # Keyword-only, no chunk ever gets a vector: "5 without vectors" read like a fault.
    vectors = f", {summary['pending_vectors']} without vectors" if cfg.embedder.enabled else ""
    kept = "".join(f"; {r['name']} offline, kept as indexed: {shown(r['error'])}" for r in summary["offline"])
    kept += _refused_inboxes_said(summary["refused_inboxes"])
    bar.done(
        f"indexed {summary['files']} notes, {summary['chunks']} chunks ({summary['changed']} read, "
        f"{summary['deleted']} removed{vectors}){kept}"
    )
    return _rebuild_unfinished(unfinished)


def _refused_inboxes_said(refused: list[dict[str, Any]]) -> str:
    """The agents' inboxes refused, beside the offline roots: their notes left the index (a
    refused inbox is neither read nor served), one part per refused folder, at most 3 agents
    named of an agents folder refused whole."""
    out = ""
    for r in refused:
        agents = r["agents"]
        names = few_names(agents)
        whose = "" if len(agents) == 1 else f" (the inboxes of {len(agents)} agents: {names})"
        n = r["notes"]
        gone = f"{n} note{'' if n == 1 else 's'} left the index" if n else "its notes are not indexed"
        out += f"; memory inbox refused, {shown(r['folder'])} {shown(r['why'])}{whose}: {gone}"
    return out


def _rebuild_problem(health: dict[str, Any]) -> str | None:
    """What status says of the rebuild, a refusal at its turn ("not rebuilt: ...") first: the
    notes an earlier rebuild put back may be said beside it, and nothing was rebuilt."""
    said = [p["error"] for p in health.get("problems", {}).get("active", []) if p["area"] == "rebuild"]
    return min(said, key=lambda why: not why.startswith("not rebuilt:"), default=None)


def _rebuild_unfinished(why: str | None) -> int:
    """Exit 7 with why when the rebuild asked for could not read every note back (its share
    went away during it): those notes are kept as indexed before and read when they can be.
    It exited 0 with half the index gone. Also when the daemon refused it at its turn."""
    if why is None:
        return int(ExitCode.OK)
    # A rebuild the daemon refused when its turn came (no room for its copy): said as refused.
    print(
        shown(why) if why.startswith("not rebuilt:") else f"rebuild not finished: {shown(why)}",
        file=sys.stderr,
    )
    return int(ExitCode.REQUEST_FAILED)


def _check_root(cfg: Config, name: str) -> None:
    """``--confirm-deletions ROOT`` names a root, as the daemon checks it (a typo ran a sweep that
    confirmed nothing, with exit 0): the vault's two, and every agent's inbox."""
    from sidecar.config import valid_agent
    from sidecar.vault.sources import inbox_root, vault_roots

    try:
        agents = [n for n in os.listdir(cfg.agents_dir) if valid_agent(n)]
    except OSError:
        agents = []
    known = {r.name for r in vault_roots(cfg)} | {inbox_root(cfg, a).name for a in agents}
    if name not in known:
        raise UsageError(f"unknown root {quoted(name)}; roots: {', '.join(sorted(known)) or 'none yet'}")


def _failing_since(health: dict[str, Any], since: float, areas: tuple[str, ...]) -> str | None:
    """The error of a problem in ``areas`` seen again since ``since`` (a sweep that keeps failing)."""
    for p in (health.get("problems") or {}).get("active", []):
        if p.get("area") in areas and p.get("last", 0) >= since and p.get("count", 0) >= 2:
            return str(p.get("error"))
    return None


def _say_waiting(bar: Progress, waiting: dict[str, Any] | None, said: set[tuple[str, str, int]]) -> None:
    """Say once per note or folder that indexing waits for its read, listing or stat (a share
    that hangs): the bar stood still, and nothing was printed, for as long as the share hung.
    The wait to learn whether a share is only slow (minutes, all else done) shows its elapsed
    time: on the bar, or a line a minute when stderr is no terminal."""
    if not waiting:
        return
    where = (waiting["root"], waiting["path"])
    if waiting.get("learning"):
        seconds, timeout = waiting["seconds"], waiting["timeout_seconds"]
        bar.update("waiting", int(seconds), max(int(timeout), 1))
        minute = int(seconds // 60)
        if (*where, -2) not in said:
            said.update({(*where, -2), (*where, minute)})
            bar.say(
                f"{shown(waiting['root'])} did not answer {waited_call(waiting)} in time; waiting "
                f"{seconds:.0f} s so far, up to {timeout:.0f} s in all, to learn whether it is only a "
                "slow share (then it is indexed now and waited for so from now on; else, or on "
                "Ctrl-C, the root stays offline till the next run)"
            )
        elif (*where, minute) not in said:
            said.add((*where, minute))
            if not bar.enabled:
                bar.say(f"still waiting for {shown(waiting['root'])}: {seconds:.0f} s of {timeout:.0f} s")
        return
    if (*where, -1) in said:
        return
    said.add((*where, -1))
    bar.say(
        f"waiting for {shown(waiting['root'])} to answer {waited_call(waiting)} "
        f"({'a slow share' if waiting.get('slow') else 'hung share?'}); given up after "
        f"{waiting['timeout_seconds']:g} s, the root is then offline"
    )


def _show_progress(bar: Progress, idx: dict[str, Any], embedder: dict[str, Any]) -> None:
    if idx["phase"] in ("scanning", "indexing"):
        bar.update(idx["phase"], idx["progress"]["done"], idx["progress"]["total"])
    elif embedder["state"] == "ok" and (pending := backlog(idx)):
        total = idx["chunks"]
        bar.update("embedding", total - pending, total)


def cmd_status(args: argparse.Namespace, cfg: Config) -> int:
    try:
        flags = serve_flags(args, cfg)
        with Client(cfg.socket_path, timeout=10.0, config_file=cfg.source_file, serve_flags=flags) as client:
            health = client.call("health")
    except DaemonNotRunningError as exc:
        return _not_answering(args, cfg, exc)
    if args.json:
        print(json.dumps({"running": True, **health}, ensure_ascii=False))
    else:
        print(render_status(health))
    return int(ExitCode.OK)


def _not_answering(args: argparse.Namespace, cfg: Config, exc: DaemonNotRunningError) -> int:
    """What status says when no daemon answers: starting or stopping (its lock file says so: not
    waited for), a stale lock, one holding this home elsewhere (no "start it" for a second), or not
    running."""
    from sidecar.clients.lockholder import lock_view, other_daemon, phase_words

    view = lock_view(cfg)
    said = phase_words(view) if view is not None else None
    lock: dict[str, Any] | None = None
    head = "sidecar is not running."
    if view is not None and view.record.pid is not None:
        record = view.record
        lock = {"pid": view.holder or record.pid, "held": view.held, "stale": view.stale}
        if view.current and record.phase is not None:
            lock |= {"phase": record.phase, "since": record.since, "step": record.step}
            if view.moving is not None:
                head = f"sidecar is {view.moving} (pid {record.pid}), {record.since_words()}."
    other = other_daemon(cfg) if said is None else None
    if said is not None:
        why = f"no sidecar daemon answers on {cfg.socket_path}: {said}"
        if view is not None and view.stale:  # the connection's words say it, with how to start
            why = str(exc) if said in str(exc) else f"{exc}\n{said}"
    else:
        why = str(exc) if other is None else f"no sidecar daemon answers on {cfg.socket_path}, but {other}"
    refused = _refused_index(cfg) if other is None and (view is None or not view.held) else None
    if refused is not None:  # the daemon cannot start on this index: "start it" would not help
        why = f"{why}\n{refused}"
    if args.json:
        error = {"code": exc.code, "message": why}  # the shape of every command's error
        out: dict[str, Any] = {"running": False, "socket": str(cfg.socket_path), "error": error}
        if lock is not None:
            out["lock"] = lock
        print(json.dumps(out))
    elif isinstance(exc, DaemonUnreachableError):  # something is there: "not running" is not known
        print(f"sidecar: {exc}", file=sys.stderr)
    else:
        print(f"{head}\n{why}")
    return int(ExitCode.NOT_RUNNING)


def _refused_index(cfg: Config) -> str | None:
    """Why the daemon refuses to start on this home's index (exit 3), said where its log is not
    read: a store written by a newer sidecar."""
    from sidecar.stores.versions import newer_store
    from sidecar.vault.timeout import run_with_timeout

    # Bounded like ``other_daemon``: a home on a share that went away hangs a read of its files.
    newer, stuck = run_with_timeout(
        lambda: newer_store(cfg.index_dir), cfg.watch.probe_timeout_seconds, "index"
    )
    if stuck is not None or newer is None:
        return None
    return (
        f"The daemon refuses to start (exit code 3): {newer.describe()}. Start the newer sidecar "
        "again, or run `sidecar index --rebuild` to build this version's index from the notes "
        "(`sidecar doctor` says the same)."
    )


def cmd_reload(args: argparse.Namespace, cfg: Config) -> int:
    """The daemon re-reads its configuration file (what SIGHUP does, for those without systemd:
    a launchd agent, a daemon in a terminal); a refused file is an error naming why."""
    flags = serve_flags(args, cfg)
    with Client(cfg.socket_path, timeout=30.0, config_file=cfg.source_file, serve_flags=flags) as client:
        answer = client.call("reload")
    if args.json:
        print(json.dumps(answer))
    elif not answer.get("reloaded"):
        print("the daemon has no configuration file to reload")
    else:
        model = answer.get("model") or {}
        applied = list(answer["changed"])
        if model.get("state") == "loaded":  # the model put right: "nothing changed" was false
            applied.append(f"the model {model['model']}, loaded now")
        print(f"reloaded; applied: {', '.join(applied) or 'nothing changed'}")
        if model.get("state") == "loading":
            print("the model that had failed is being loaded again: `sidecar status` says when it is ready")
        elif model.get("state") == "failed":
            print(f"the model still cannot be loaded: {model['error']}")
        if answer.get("needsRestart"):
            print(f"changed, applied at the next start: {', '.join(answer['needsRestart'])}")
    return int(ExitCode.OK)


def _origin(cfg: Config, dotted: str) -> dict[str, Any]:
    """Where a value came from; a key the file gives at its default value (`config example
    --write` writes every key) is the default, also written in the file (``inFile``): it
    follows the default no more, a changed default leaves the file's value in force, then said
    as the file's."""
    origin = cfg.origins.get(dotted, "default")
    if dotted in cfg.file_defaults:
        return {"from": "default", "inFile": True}
    return {"from": origin}


def cmd_config(args: argparse.Namespace, cfg: Config) -> int:
    from sidecar.config import settings

    # What the values name that the file alone cannot tell: a model folder without its model.
    warnings = [*cfg.warnings, *_path_warnings(cfg)]
    values: dict[str, Any] = {}
    for s in settings():
        value: Any = cfg
        for attr in s.attrs:
            value = getattr(value, attr)
        values[s.dotted] = value
    if args.json:
        print(
            json.dumps(
                {
                    "file": str(cfg.source_file) if cfg.source_file else None,
                    "warnings": warnings,
                    "values": {k: {"value": v, **_origin(cfg, k)} for k, v in values.items()},
                    "socket": str(cfg.socket_path),
                },
                default=str,
            )
        )
        return int(ExitCode.OK)
    state = f"with {len(warnings)} warning(s)" if warnings else "OK"
    print(f"configuration {state} ({cfg.source_file or 'no file: defaults, environment and flags'})")
    for warning in warnings:
        print(f"warning: {warning}")
    for dotted, value in values.items():
        origin = _origin(cfg, dotted)
        also = f"; also written in {cfg.source_file}" if origin.get("inFile") else ""
        print(f"{dotted} = {value}  ({origin['from']}{also})")
    print(f"socket (effective) = {cfg.socket_path}")
    return int(ExitCode.OK)


def _path_warnings(cfg: Config) -> list[str]:
    """What the paths name that the file alone cannot tell, bounded as doctor's look: a vault
    folder that is not there, ``embedder.path`` set to a folder that holds no model (valid values,
    but the daemon would index nothing or search by keywords only: doctor failed them while
    config check said OK)."""
    return [*_vault_warnings(cfg), *_model_path_warnings(cfg)]


def _vault_warnings(cfg: Config) -> list[str]:
    """vault.path not there: a warning, not an error (a share not mounted yet is a vault too)."""
    from sidecar.vault.timeout import folder_state

    vault = cfg.vault.path
    if vault is None and cfg.origins.get("vault.path", "default") != "default":
        # Written but null (`path: ~`, or the example's `path: null` left as it was): the daemon
        # indexes no vault; "configuration OK" read as done. Left out, the key is a choice.
        return [
            "vault.path is not set (null): only agents' memory is indexed; write the vault's folder "
            "(`~` alone is YAML's null: write `~/notes`, or quote it)"
        ]
    if vault is None:
        return []
    there, why = folder_state(vault, cfg.watch.probe_timeout_seconds)
    if there:
        return []
    what = f"cannot be read now ({why})" if why else "does not exist or is not a folder"
    return [
        f"vault.path {vault} {what}: the daemon waits for it and indexes nothing from it meanwhile; "
        "fix vault.path, or mount its share"
    ]


def _model_path_warnings(cfg: Config) -> list[str]:
    e = cfg.embedder
    if not e.enabled or e.path is None:
        return []
    from sidecar.model.files import folder_files  # the check doctor makes of the same folder
    from sidecar.vault.timeout import folder_state

    there, why = folder_state(e.path, cfg.watch.probe_timeout_seconds)
    if why is not None:
        return [f"embedder.path {e.path} cannot be read now ({why})"]
    if there and folder_files(e.path, "configured path") is not None:
        return []
    # Name the file that is missing: "no model.onnx and tokenizer.json" read as both missing.
    onnx = any((e.path / p).is_file() for p in ("model.onnx", "onnx/model.onnx"))
    tok = (e.path / "tokenizer.json").is_file()
    if not there:
        what, put = "does not exist", "put model.onnx and tokenizer.json there"
    elif onnx:
        what, put = "holds model.onnx but no tokenizer.json", "put tokenizer.json there"
    elif tok:
        what, put = "holds tokenizer.json but no model.onnx", "put model.onnx there"
    else:
        what, put = "holds no model.onnx and tokenizer.json", "put both files there"
    return [
        f"embedder.path {e.path} {what}: the daemon would search by keywords only; {put}, or remove "
        "embedder.path to use the built-in model"
    ]


def cmd_config_example(args: argparse.Namespace) -> int:
    """Print the documented example, or with --write write it where the commands read their file,
    keeping a file already there: the service steps ran `config example > "$config"` and replaced
    the file a person had written by the quick start with the example (no vault) without a word."""
    from sidecar.config import render_example
    from sidecar.config.loader import config_file_path

    text = render_example()
    if args.write is None:
        print(json.dumps({"example": text}) if args.json else text, end="" if not args.json else "\n")
        return int(ExitCode.OK)
    flag = getattr(args, "config", None)
    path = Path(args.write).expanduser() if args.write else config_file_path(flag, os.environ)
    path = path if path.is_absolute() else Path.cwd() / path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a part of it is a file: mkdir's bare "File exists" named no cause
        raise ConfigError(
            f"cannot write the example to {path}: its folder {path.parent} cannot be made "
            f"({exc.strerror or exc}; is a part of it a file?)"
        ) from exc
    if path.is_dir():
        raise ConfigError(f"cannot write the example to {path}: it is a folder; name a file in it")
    try:
        with path.open("x", encoding="utf-8") as out:  # "x": never over a file, even one made just now
            out.write(text)
        written = True
    except FileExistsError:
        written = False
    except OSError as exc:
        raise ConfigError(f"cannot write the example to {path}: {exc.strerror or exc}") from exc
    if args.json:
        print(json.dumps({"file": str(path), "written": written}))
    elif written:
        print(f"wrote {path}: set vault.path in it, then run `sidecar config check`")
    else:
        print(
            f"{path} exists: kept as it is, not overwritten (`sidecar config example` prints the "
            "example to compare; `sidecar config check` shows what the file sets)"
        )
    return int(ExitCode.OK)


def cmd_config_path(args: argparse.Namespace) -> int:
    """The configuration file the commands read: --config, else $SIDECAR_CONFIG, else the default
    ($XDG_CONFIG_HOME/sidecar/config.yaml, else ~/.config/sidecar/config.yaml), written or not, so
    that the steps writing it write the file the daemon reads."""
    from sidecar.config.loader import config_file_path, ignored_config_file

    flag = getattr(args, "config", None)
    ignored = ignored_config_file(flag, os.environ, Path.cwd())
    if ignored is not None:  # the one command a person asks which file is read
        print(f"sidecar: warning: {ignored}", file=sys.stderr)
    path = config_file_path(flag, os.environ)
    path = path if path.is_absolute() else Path.cwd() / path
    raw = os.fsencode(path)
    if args.json:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:  # JSON would carry another name (\udcff), a file never read
            raise UsageError(
                f"the configuration file's path {raw!r} is not UTF-8, which JSON cannot carry: "
                "run `sidecar config path` without --json"
            ) from None
        print(json.dumps({"file": str(path), "exists": path.is_file()}))
    else:
        # The path's own bytes: printed as text, a name that is not UTF-8 came out as "\udcff",
        # and `$(sidecar config path)` named another file.
        sys.stdout.flush()
        sys.stdout.buffer.write(raw + b"\n")
    return int(ExitCode.OK)


def cmd_completion(args: argparse.Namespace) -> int:
    from sidecar.clients.completion import command_tree, script

    parser = build_parser()
    if args.json:
        print(json.dumps(command_tree(parser)))
    else:
        sys.stdout.write(script(parser, args.shell))
    return int(ExitCode.OK)
