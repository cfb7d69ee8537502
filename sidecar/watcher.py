"""File events (watchfiles) that trigger indexing soon after a save.

Each batch of changes hands its paths to the indexer, which looks at those paths only (a stat
each; a new folder is walked), never at the rest of their root: a memory write does not walk a
vault on a share. What events miss (edits made on other machines of a network share, a watch
that died) arrives with the scheduled full sweeps and the polling of network roots; a watched
folder that was replaced, mounted or unmounted restarts the watch and asks for a full sweep
(an empty set of paths). Editor temp files, dot-folders and non-Markdown files are filtered out.
Imports ``sources``.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import watchfiles

from sidecar.sources import is_debris

log = logging.getLogger(__name__)

_RETRY_SECONDS = (5.0, 30.0, 60.0, 300.0)
# How often the watched folders' identity is compared (a stat of each; not once per event batch,
# or every memory write would stat the vault's share).
_IDENTITY_EVERY_S = 5.0


class NoteFilter:
    """Accept changes to Markdown notes and to folders (a new folder may hold notes) under the roots."""

    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = [str(r).rstrip("/") + "/" for r in roots]

    def __call__(self, _change: watchfiles.Change, path: str) -> bool:
        root = next((r for r in self.roots if path.startswith(r)), None)
        rel = path[len(root) :] if root else Path(path).name
        parts = rel.split("/")
        if any(p.startswith(".") for p in parts):
            return False
        name = parts[-1]
        if "." in name and not name.lower().endswith(".md"):
            return False  # another kind of file; a name without a dot may be a folder
        return not is_debris(name)


class Watcher:
    """Watch the given folders until ``stop`` is set; call ``on_change`` after each debounced batch."""

    def __init__(
        self,
        paths: Sequence[Path],
        on_change: Callable[[set[str]], None],
        stop: threading.Event,
        debounce_ms: int = 300,
    ) -> None:
        self.paths = list(paths)
        self.on_change = on_change
        self.stop = stop
        self.debounce_ms = debounce_ms
        self.watching: list[Path] = []

    def run(self) -> None:
        failures = 0
        while not self.stop.is_set():
            existing = [p for p in self.paths if p.is_dir()]
            if not existing:
                self.stop.wait(_RETRY_SECONDS[1])
                continue
            self.watching = existing
            try:
                self._watch(existing)
                failures = 0
            except (OSError, RuntimeError) as exc:  # watchfiles raises RuntimeError for backend errors
                delay = _RETRY_SECONDS[min(failures, len(_RETRY_SECONDS) - 1)]
                failures += 1
                log.warning("watcher_retry paths=%s error=%s retry_in=%.0fs", existing, exc, delay)
                self.watching = []
                self.stop.wait(delay)

    def _identity(self) -> list[tuple[str, int, int] | None]:
        """(path, device, inode) of each watched folder: a recreated or remounted folder differs."""
        out: list[tuple[str, int, int] | None] = []
        for p in self.paths:
            try:
                st = os.stat(p)
            except OSError:
                out.append(None)
                continue
            out.append((str(p), st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None)
        return out

    def _watch(self, existing: list[Path]) -> None:
        log.info("watcher_started paths=%s", ",".join(map(str, existing)))
        identity = self._identity()
        checked = time.monotonic()
        for changes in watchfiles.watch(
            *existing,
            watch_filter=NoteFilter(existing),
            debounce=self.debounce_ms,
            step=50,
            stop_event=self.stop,
            rust_timeout=5000,
            yield_on_timeout=True,
            raise_interrupt=False,
            ignore_permission_denied=True,
        ):
            if changes:
                log.debug("watcher_changes count=%d", len(changes))
                self.on_change({p for _, p in changes})
            # inotify dies silently when a watched folder is deleted, recreated or remounted:
            # compare device and inode now and then and start a new watch (and a catch-up sweep).
            if time.monotonic() - checked < _IDENTITY_EVERY_S:
                continue
            checked = time.monotonic()
            if self._identity() != identity:
                log.info("watcher_restart reason=a watched folder was replaced, mounted or unmounted")
                self.on_change(set())
                return
