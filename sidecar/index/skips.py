"""What the folder scans leave out now (too large, hidden, a link out of the root, a path too
long, ...), a mixin of ``ChangeFinder`` (``diff``): each skip recorded and named once in the log,
the skipped notes by the key they would have (for ``list``, ``why`` and health), and the PROBLEM
naming the folders whose paths are too long (worded by ``toolong``, which stays pure). Its own
module because reporting skips changes no sweep's outcome; the state it works on is the
``ChangeFinder``'s own (full sweeps and file events set ``_skips``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from sidecar.config import Config
from sidecar.index.problems import Problems
from sidecar.index.toolong import AREA as TOO_LONG_AREA
from sidecar.index.toolong import too_long_folders, too_long_problem
from sidecar.vault.notenames import TOO_LARGE, is_note_name
from sidecar.vault.sources import Root, Skipped, inbox_root, vault_roots

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.index.diff")


class SkipReport:
    """The skip reporting of a ``ChangeFinder`` (which sets the state below)."""

    cfg: Config
    problems: Problems
    excluded_by: Callable[[str], str | None]
    _skips: dict[tuple[str, str], str]  # files left out now, by (root name, path)
    _skip_sizes: dict[tuple[str, str], int]
    _skips_named: set[tuple[str, str]]
    _too_long_named: list[str]

    def say_too_long(self) -> None:
        """A PROBLEM naming the folders whose notes' paths are too long (one per folder, not
        per note), cleared once none is: their notes left the index with only a skip count."""
        # Not in a folder the user excluded (index.exclude, Obsidian's Excluded files): nothing
        # there is indexed anyway, and a PROBLEM the user could clear only by renaming it.
        by_name = {r.name: r for r in vault_roots(self.cfg)}
        folders = too_long_folders(
            {k: why for k, why in self._skips.items() if not self._excluded_path(by_name.get(k[0]), k[1])}
        )
        said = too_long_problem(folders)
        if said is None:
            self.problems.clear(TOO_LONG_AREA)
            return
        if folders != self._too_long_named:
            log.warning("path_too_long folders=%d first=%s", len(folders), folders[0])
        self.problems.report(TOO_LONG_AREA, said)
        self._too_long_named = folders

    def _excluded_path(self, root: Root | None, where: str) -> bool:
        """Whether a rule leaves out the note at ``where`` (a path of ``root``), or every note
        of the folder at ``where``."""
        if root is None:  # an inbox: no rule leaves its notes out
            return False
        try:
            rel = Path(where).relative_to(root.path).as_posix()
        except ValueError:
            return False
        note = rel if is_note_name(Path(rel).name, root.source) else f"{rel}/x.md"
        return self.excluded_by(root.key_of(note)) is not None

    def skipped_files(self) -> dict[str, Skipped]:
        """Notes the folder scans leave out now (too large, hidden, a link out of the root, ...),
        by the key they would have, with why (and their size where that is why). They never
        reach the manifest, so ``list``, ``why`` and health ask here."""
        by_name = {r.name: r for r in vault_roots(self.cfg)}  # an inbox's by its name: no listing
        out: dict[str, Skipped] = {}
        for (name, where), reason in list(self._skips.items()):
            root = (
                inbox_root(self.cfg, name.removeprefix("memory/"))
                if name.startswith("memory/")
                else by_name.get(name)
            )
            path = Path(where)
            if root is None or not is_note_name(path.name, root.source) or not path.is_relative_to(root.path):
                continue
            size = self._skip_sizes.get((name, where), 0) if reason == TOO_LARGE else 0
            out[root.key_of(path.relative_to(root.path).as_posix())] = Skipped(path, reason, size)
        return out

    def skipped_notes(self) -> dict[str, tuple[Path, str]]:
        """``skipped_files`` as (path, reason) by key."""
        return {key: (s.path, s.reason) for key, s in self.skipped_files().items()}

    def _skipped(self, root: Root, s: Skipped) -> None:
        self._skips[(root.name, str(s.path))] = s.reason
        if s.size:
            self._skip_sizes[(root.name, str(s.path))] = s.size
            if len(self._skip_sizes) > 2 * len(self._skips) + 100:  # of files no longer skipped
                self._skip_sizes = {k: v for k, v in self._skip_sizes.items() if k in self._skips}
        if (str(s.path), s.reason) not in self._skips_named:  # named once, not at every sweep
            self._skips_named.add((str(s.path), s.reason))
            log.info("file_skipped path=%s reason=%s", s.path, s.reason)
