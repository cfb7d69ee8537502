"""systemd's notify protocol (sd_notify) in a few lines: datagrams to $NOTIFY_SOCKET.

READY=1 once the socket is bound (or once the daemon waits for another daemon serving its home:
the start is done, STATUS= says it waits; READY=1 is no sign of serving), STATUS= lines a person
sees in `systemctl status`, WATCHDOG=1
from a check that the event loop and the indexer are alive, STOPPING=1 on shutdown. A no-op when
not running under systemd. Imports nothing of the project.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger(__name__)

# The launchd agent's label (clients.service.LABEL): launchd names the job in XPC_SERVICE_NAME.
LAUNCHD_LABEL = "dev.sidecar"


def under_service_manager(notify_socket: str | None) -> bool:
    """Whether the service manager runs this process (systemd's notify socket, the launchd
    agent's label), else a person's `sidecar serve` in a terminal (or a script's)."""
    return bool(notify_socket) or os.environ.get("XPC_SERVICE_NAME") == LAUNCHD_LABEL


def under_launchd() -> bool:
    """Whether the launchd agent runs this process (its label, no systemd notify socket)."""
    return not os.environ.get("NOTIFY_SOCKET") and os.environ.get("XPC_SERVICE_NAME") == LAUNCHD_LABEL


def restart_words(service: bool | None) -> str:
    """How to restart the daemon that answers, by what runs it (health's ``service``; None: not
    told, a daemon of an earlier release). A service restart while a person's `sidecar serve`
    answers restarts the service's waiting daemon, not the one meant, and says it succeeded."""
    if service:
        return "restart the daemon (`systemctl --user restart sidecar`)"
    if service is False:
        return "restart the daemon (it runs in a terminal: Ctrl-C there, then `sidecar serve` again)"
    return (
        "restart the daemon (`systemctl --user restart sidecar`; one run in a terminal: Ctrl-C "
        "there, then `sidecar serve` again)"
    )


class Notifier:
    def __init__(self, address: str | None) -> None:
        self.address = address
        self._sock: socket.socket | None = None
        if address:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, *lines: str) -> None:
        if self._sock is None or self.address is None:
            return
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        # One assignment a line: a newline inside a value (a path's, a lock file's text) began
        # another one (READY=1); a name not UTF-8 (surrogates) raised and ended the process.
        text = "\n".join(" ".join(line.splitlines()) for line in lines)
        try:
            self._sock.sendto(text.encode("utf-8", "backslashreplace"), target)
        except OSError as exc:  # the manager went away: nothing to tell any more
            log.debug("notify_failed error=%s", exc)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
