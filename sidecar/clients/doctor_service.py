"""``sidecar doctor``'s service check: the systemd unit or launchd agent is installed, runs this
installation with this command's configuration, home and socket, and is enabled and running.
Imports config, errors and service."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from sidecar.clients.doctor_checks import Check, Probes
from sidecar.clients.service import (
    Launcher,
    Setup,
    existing_text,
    installed_setup,
    launcher,
    service_file,
    xdg_folder,
)
from sidecar.config import Config, env_name
from sidecar.config.loader import XDG_DEFAULTS, default_config_file
from sidecar.contracts.errors import SidecarError

_XDG = tuple(XDG_DEFAULTS)

_REINSTALL = (
    "run `sidecar service install` again with this command's --config/--home/--socket (or run this "
    "command with the service's), then restart the service"
)


def _installed_differs(cfg: Config, svc_text: str, installed: str, path: Path) -> Check | None:
    """A failed check when the installed service runs another installation, configuration file,
    home or socket than this command looks at (its daemon and this command would never meet)."""
    want, have = installed_setup(svc_text), installed_setup(installed)
    run = launcher()
    if have.argv[: len(run.argv)] != run.argv:
        return Check(
            "service",
            False,
            f"{path} starts another installation of sidecar ({shlex.join(have.argv[:1]) or 'nothing'}), "
            f"not {shlex.join(run.argv)}",
            "run `sidecar service install` again from this installation, then systemctl --user daemon-reload",
        )
    have_rest, have_file, named = _reads(have, run)
    want_rest, want_file, _ = _reads(want, run)
    if have_rest != want_rest:
        return Check(
            "service",
            False,
            f"{path} runs `{shlex.join(have.argv[len(run.argv) :])}`, not "
            f"`{shlex.join(want.argv[len(run.argv) :])}`",
            _REINSTALL,
        )
    if named and not os.path.isfile(have_file):
        return Check(
            "service",
            False,
            f"{path} names the configuration file {have_file}, which is not there: its daemon "
            "refuses every start (exit 3)",
            _REINSTALL,
        )
    # Compared by the file each reads, not by the words: a unit installed before its file was
    # written names none and reads the default file, the one this command reads now.
    if os.path.realpath(have_file) != os.path.realpath(cfg.source_file or want_file):
        how = "" if named else " (none named: the default under XDG_CONFIG_HOME as the unit sets it)"
        return Check(
            "service",
            False,
            f"{path} runs the daemon on the configuration file {have_file}{how}, not this command's "
            f"{cfg.source_file or want_file}: it reads another configuration file",
            _REINSTALL,
        )
    for key, what in (("home", "home"), ("socket", "socket")):
        name = env_name(key)
        theirs, ours = have.env.get(name), want.env.get(name)
        origin = cfg.origins.get(key, "default")
        if theirs is None and not (origin == "flag" or origin.startswith("environment ")):
            continue  # a unit of an older release, without the pin: its daemon derives it as we do
        if theirs != ours:
            # The unit pins the home and the socket it was installed with: a change since (in
            # the file, a flag, XDG_RUNTIME_DIR) splits the daemon from its clients.
            return Check(
                "service",
                False,
                f"{path} runs the daemon with another {what} ({theirs or 'its default'}) than this "
                f"command's {ours or 'default'}",
                _REINSTALL,
            )
    return None


def _reads(setup: Setup, run: Launcher) -> tuple[tuple[str, ...], str, bool]:
    """A service's daemon arguments without its --config, the configuration file it reads (the
    one named, else the default under the XDG_CONFIG_HOME it is given), and whether one is named."""
    args = list(setup.argv[len(run.argv) :])
    for i, word in enumerate(args):
        if word == "--config" and i + 1 < len(args):
            return (*args[:i], *args[i + 2 :]), args[i + 1], True
        if word.startswith("--config="):
            return (*args[:i], *args[i + 1 :]), word.partition("=")[2], True
    return tuple(args), str(default_config_file(setup.env)), False


def _extra_settings(svc_text: str, installed: str) -> list[str]:
    """The other SIDECAR_* settings, the TZ and the XDG folders where the installed service and
    this command differ (a TZ changed or unset since the install moves the daemon's day from this
    shell's; XDG_STATE_HOME holds the home's record and `--accept-home`'s consent, XDG_CONFIG_HOME
    the file read when none is named)."""
    want, have = installed_setup(svc_text).env, installed_setup(installed).env
    compared = {env_name("home"), env_name("socket")}  # by _installed_differs

    def differs(n: str) -> bool:  # an XDG folder by the folder it names, links resolved
        if n in _XDG:
            return xdg_folder(want, n) != xdg_folder(have, n)
        return want.get(n) != have.get(n)

    names = sorted(
        n
        for n in {*want, *have}
        if (n.startswith("SIDECAR_") or n == "TZ" or n in _XDG) and n not in compared and differs(n)
    )
    return [f"{n}={have[n]}" if n in have else f"without {n}" for n in names]


def check_service(cfg: Config, probes: Probes) -> Check:
    home_dir = probes.home_dir or Path.home()
    try:
        svc = service_file(cfg, home_dir)
    except SidecarError as exc:  # no unit can name this installation: a verdict, not a crash
        return Check("service", False, str(exc), "install sidecar under a plain path")
    try:
        installed = existing_text(svc)
    except SidecarError as exc:  # a folder in its place, no permission (a `sudo` run's leftovers)
        return Check("service", False, str(exc), "move it away, then sidecar service install")
    if installed is None:
        return Check("service", True, f"not installed ({svc.path}); optional: sidecar service install")
    differs = _installed_differs(cfg, svc.text, installed, svc.path)
    if differs is not None:
        return differs
    extra = _extra_settings(svc.text, installed)
    state = _service_state(svc.path, svc.enable, probes)
    if extra and state.ok:
        return Check(
            "service",
            True,
            f"{state.verdict}; its settings differ from this command's: {', '.join(extra)}",
            state.todo or "to check the service's own setup, run doctor with the same settings",
            warning=True,
        )
    return state


def _service_state(path: Path, enable: str, probes: Probes) -> Check:
    """What the service manager says about the installed service."""
    if sys.platform == "darwin":
        return Check("service", True, f"installed ({path})")
    try:
        out = subprocess.run(  # noqa: S603 - a fixed argument list, no shell
            [probes.systemctl, "--user", "is-active", "sidecar"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return Check("service", True, f"installed ({path}); systemctl is not available to ask")
    state = out.stdout.strip()
    if not state:
        # "Failed to connect to bus: …": no user service manager answers this shell; that is
        # no state of the service (it runs only where a user manager does).
        why = (out.stderr.strip().splitlines() or ["no answer"])[0]
        return Check(
            "service",
            True,
            f"installed ({path}), but the user service manager could not be asked: {why}",
            "the service runs under a systemd user manager (a login session, or `loginctl "
            "enable-linger` for one without); run doctor there, or run the daemon in the foreground",
            warning=True,
        )
    if state in ("active", "activating"):
        return _running(state, probes)
    if state == "failed":
        return Check(
            "service",
            False,
            "installed but failed",
            "see why: journalctl --user -u sidecar -p warning -n 20; once fixed: systemctl --user "
            "reset-failed sidecar; systemctl --user restart sidecar (a failed unit is refused a "
            "start while its start limit lasts)",
        )
    return Check("service", True, f"installed, {state}; start it: {enable}")


def _running(state: str, probes: Probes) -> Check:
    """An active or activating service. Active is not serving: a daemon the service started while
    another one serves (a person's `sidecar serve`) reports its start done and waits; activating
    waits for a `sidecar index` run or a home not usable yet. Its STATUS= names what it waits for
    (doctor said "start it: … enable --now sidecar", a command that then waited too)."""
    status = _status_text(probes)
    if status.startswith("waiting:"):
        return Check(
            "service",
            True,
            f"installed, {state} but not serving: {status}",
            "it serves once that ends (or is stopped); see systemctl --user status sidecar",
            warning=True,
        )
    if state == "active":
        return Check("service", True, "installed and active")
    return Check("service", True, "installed, activating (starting); see systemctl --user status sidecar")


def _status_text(probes: Probes) -> str:
    """The STATUS= the service's daemon sent last, as the service manager shows it ("" when it
    cannot be asked)."""
    try:
        out = subprocess.run(  # noqa: S603 - a fixed argument list, no shell
            [probes.systemctl, "--user", "show", "-p", "StatusText", "sidecar"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    for line in out.stdout.splitlines():
        if line.startswith("StatusText="):
            return line.partition("=")[2].strip()
    return ""
