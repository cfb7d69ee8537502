"""The setup commands: ``service install|uninstall|status`` and ``doctor``. Every file problem is
one ``sidecar: …`` line (a folder where the unit belongs, ``~/.config/systemd`` a file, a folder
left to root by a `sudo` run), never a traceback."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from sidecar.clients import service
from sidecar.clients.service import ServiceFile
from sidecar.config import Config, env_name
from sidecar.contracts.errors import ExitCode


def cmd_service(args: argparse.Namespace, cfg: Config) -> int:
    sandbox = {"yes": True, "no": False}.get(getattr(args, "sandbox", "auto"))
    svc = service.service_file(cfg, Path.home(), sandbox=sandbox)
    if args.action == "status":
        return _status(args, svc)
    if args.action == "uninstall":
        return _uninstall(args, svc)
    return _install(args, cfg, svc)


def _status(args: argparse.Namespace, svc: ServiceFile) -> int:
    installed = service.existing_text(svc) is not None
    if args.json:
        print(
            json.dumps(
                {"path": str(svc.path), "start": svc.enable, "stop": svc.disable, "installed": installed}
            )
        )
        return int(ExitCode.OK)
    print(f"service file {svc.path}: {'installed' if installed else 'not installed'}")
    print(f"start it with: {svc.enable}" if installed else "install it with: sidecar service install")
    return int(ExitCode.OK)


def _install_notes(cfg: Config, svc: ServiceFile, before: str | None) -> list[str]:
    """What a person should know about the file being written (on stderr, before it is)."""
    notes = []
    if cfg.source_file is None:
        wanted = shlex.quote(str(cfg.default_file or "~/.config/sidecar/config.yaml"))
        notes.append(
            f"no configuration file; the service starts without a vault and reads {wanted} at its "
            f"next start once you write one (sidecar config example --write {wanted}, then set "
            "vault.path; a home: set there needs `sidecar service install` again)."
        )
    derived = cfg.socket_path == cfg.home / "run" / "sidecar.sock"  # the default without the variable
    if sys.platform != "darwin" and derived and not os.environ.get("XDG_RUNTIME_DIR"):
        # The service manager gives the daemon an XDG_RUNTIME_DIR: the socket is pinned to the
        # one this shell derives, and a shell that has the variable derives another.
        notes.append(
            f"this shell has no XDG_RUNTIME_DIR: the service's socket is pinned to {cfg.socket_path}, "
            "where this shell looks; a shell that has it (a desktop or SSH login) looks in "
            f"$XDG_RUNTIME_DIR/sidecar-…/ instead. Set `socket: {cfg.socket_path}` in the configuration "
            "file (then install again) so that every shell finds the daemon."
        )
    if service.in_tmp(cfg.home):
        notes.append(
            f"the home {cfg.home} lies in a temporary folder, which many systems empty at boot: the "
            "index and every agent's memory inbox would go with it (set --home or home: elsewhere)."
        )
    why = service.time_zone_problem(cfg.time_zone) if cfg.time_zone else None
    if why is not None:
        notes.append(
            f"TZ={cfg.time_zone!r} is not pinned in the service ({why}; the daemon could not "
            "start with it), so the daemon runs in the system's zone (/etc/localtime). Set TZ to "
            "a zone name (TZ=Europe/Berlin) and install again to pin one."
        )
    if before is not None and before != svc.text:
        notes.append(_replaced(svc, before))
    return notes


def _replaced(svc: ServiceFile, before: str) -> str:
    """Say what changes for the running service when its file is replaced by another."""
    old, new = service.installed_setup(before).env, service.installed_setup(svc.text).env
    # The time zone too: a reinstall from a shell with another TZ, or none, moves the daemon's day.
    # XDG_CONFIG_HOME and XDG_STATE_HOME as well: the file read when none is named, and where the
    # home's record and consent are kept.
    named = (
        (env_name("home"), "home", "default"),
        (env_name("socket"), "socket", "default"),
        ("TZ", "TZ", "the system's zone"),
        ("XDG_CONFIG_HOME", "XDG_CONFIG_HOME", "~/.config"),
        ("XDG_STATE_HOME", "XDG_STATE_HOME", "~/.local/state"),
    )
    changed = [
        f"the {what} {old.get(name, unset)} -> {new.get(name, unset)}"
        for name, what, unset in named
        if old.get(name) != new.get(name)
    ]
    what = f" ({'; '.join(changed)})" if changed else ""
    restart = (
        f"launchctl bootout gui/$(id -u)/{service.LABEL}, then {svc.enable}"
        if svc.path.suffix == ".plist"
        else "systemctl --user daemon-reload && systemctl --user restart sidecar"
    )
    return f"{svc.path} held another setup{what}; it applies once the service restarts: {restart}"


def _install(args: argparse.Namespace, cfg: Config, svc: ServiceFile) -> int:
    service.check_config_file(cfg)
    before = service.existing_text(svc)
    for note in _install_notes(cfg, svc, before):
        print(f"note: {note}", file=sys.stderr)
    out: dict[str, Any] = {"path": str(svc.path), "start": svc.enable, "stop": svc.disable}
    if args.dry_run:
        if args.json:
            print(json.dumps({**out, "dryRun": True, "text": svc.text}))
        else:
            sys.stdout.write(svc.text)
            print(f"# would be written to {shlex.quote(str(svc.path))}; then: {svc.enable}", file=sys.stderr)
        return int(ExitCode.OK)
    made = service.prepare(cfg, Path.home())
    service.write(svc)
    if args.json:
        print(json.dumps({**out, "created": [str(f) for f in made], "written": True}))
        return int(ExitCode.OK)
    for folder in made:
        print(f"created {folder}")
    print(f"wrote {svc.path}\nstart it now and at every login with:\n  {svc.enable}")
    return int(ExitCode.OK)


def _uninstall(args: argparse.Namespace, svc: ServiceFile) -> int:
    out: dict[str, Any] = {"path": str(svc.path), "start": svc.enable, "stop": svc.disable}
    there = os.path.lexists(svc.path)
    if args.dry_run:
        if args.json:
            print(json.dumps({**out, "dryRun": True, "installed": there}))
        elif there:
            print(f"would remove {svc.path} (and the links that enable it); then run: {svc.disable}")
        else:
            print(f"nothing to remove: {svc.path} is not installed")
        return int(ExitCode.OK)
    removed = service.remove(svc) if there else []
    if args.json:
        print(json.dumps({**out, "removed": bool(removed)}))
    elif not removed:
        print(f"nothing to remove: {svc.path} is not installed")
    else:
        print("\n".join(f"removed {p}" for p in removed))
        print(f"if it is running, stop it with: {svc.disable}")
    return int(ExitCode.OK)


def cmd_doctor(args: argparse.Namespace, cfg: Config) -> int:
    from sidecar.clients import doctor, snippets

    cfg, vault = doctor.served_config(cfg)
    if args.json:
        checks = doctor.run_checks(cfg)
        ok = all(c.ok for c in checks)
        print(
            json.dumps({"ok": ok, "checks": [c.as_dict() for c in checks], "mcp": snippets.mcp_config(cfg)})
        )
        return int(ExitCode.OK if ok else ExitCode.FAILURE)

    def show(line: str) -> None:
        print(line, flush=True)  # each check as it ends: a slow one is seen waiting, not a hung doctor

    show(doctor.header(cfg, vault))
    checks = doctor.run_checks(cfg, on_check=lambda c: show(doctor.render_check(c)))
    show(doctor.summary(checks))
    print()
    print(snippets.mcp_snippets(cfg))
    return int(ExitCode.OK if all(c.ok for c in checks) else ExitCode.FAILURE)
