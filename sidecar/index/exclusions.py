"""The rules that leave notes out, a mixin of ``Indexer`` (``indexer``): index.exclude and
Obsidian's settings (Excluded files, templates, the daily-note formats and the week start) read
with the probe timeout and kept in the manifest, the notes they newly leave out removed at once
(a reload, a start, an edit of Obsidian's settings), and the excluded notes a sweep found kept as
link targets. Its own module because what a rule leaves out is asked by every part of the write
path and changed only here; the state it works on is the ``Indexer``'s own.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sidecar.config import Config
from sidecar.index.activity import Activity
from sidecar.index.diff import ChangeFinder, Diff
from sidecar.index.problems import Problems
from sidecar.index.vectoring import Stores
from sidecar.index.writes import Writer
from sidecar.stores.manifest import Manifest
from sidecar.vault.dailynotes import DailyNoteFormats
from sidecar.vault.ignore import IgnoreRules
from sidecar.vault.sources import (
    Root,
)
from sidecar.vault.supervisor import Supervisor
from sidecar.vault.timeout import run_with_timeout
from sidecar.vault.weekstart import WeekStart

# The log lines keep the logger of the module they came from: journald users grep by it.
log = logging.getLogger("sidecar.index.indexer")


class Exclusions:
    """The exclusion rules of an ``Indexer`` (which sets the state below)."""

    cfg: Config
    stores: Stores
    manifest: Manifest
    supervisor: Supervisor
    problems: Problems
    activity: Activity
    changes: ChangeFinder
    writer: Writer
    ignore: IgnoreRules
    daily_formats: DailyNoteFormats
    week_start: WeekStart
    _rules_kept: str | None
    _ignore_stuck: threading.Thread | None
    _hot_excluded: dict[str, dict[str, str]]

    if TYPE_CHECKING:  # the indexer's own (``Deletes``)

        def delete(self, keys: Sequence[str]) -> None: ...

    def set_excludes(self, patterns: Sequence[str], obsidian: bool, templates: bool = True) -> str | None:
        """New exclusion rules (config reload): the keys that changed ("index.exclude",
        "index.obsidianExcludes", "index.obsidianTemplates", or Obsidian's "Excluded files", read
        again now: an edit there waited for a full sweep), comma-separated, else None."""
        was = (self.ignore.patterns, self.ignore.obsidian, self.ignore.templates)
        now = (tuple(patterns), obsidian, templates)
        if now == was:
            before = self.ignore.rules()
            self._refresh_ignore()  # with the probe timeout, as a sweep reads them: a share may hang
            return "Obsidian excluded files" if self.ignore.rules() != before else None
        rules = IgnoreRules(patterns, self.cfg.vault.path, obsidian, self.ignore.clock, templates)
        rules.carry_over(self.ignore)
        self.ignore = rules
        self.problems.clear("obsidian_settings")  # said again by the read below if still true
        # Obsidian's settings read anew now, not at the next sweep: rules turned on by the reload
        # (or an app.json edited with it) are in force when the removal that follows asks them.
        self._refresh_ignore()
        keys = ("index.exclude", "index.obsidianExcludes", "index.obsidianTemplates")
        return ",".join(k for k, a, b in zip(keys, was, now, strict=True) if a != b)

    def remove_excluded_at_start(self) -> int:
        """At a start: Obsidian's settings read (an edit made while the daemon was stopped: the
        rules a run before kept are in force until then), and the notes every rule leaves out
        removed before the first sweep writes. How many notes."""
        self._refresh_ignore()  # with the probe timeout: a share may hang
        return self.remove_excluded()

    def reread_obsidian_rules(self) -> int:
        """Obsidian's settings changed (a file event): read them now and remove the notes they
        newly leave out, as a reload does. Read only when a sweep started, a folder excluded in
        Obsidian during a long sweep was written by it and searchable for up to two sweeps. How
        many notes left."""
        rules = self.ignore
        if self.set_excludes(rules.patterns, rules.obsidian, rules.templates) is None:
            return 0
        return self.remove_excluded()

    def remove_excluded(self) -> int:
        """Remove from every store the notes the rules leave out now (a reload changed them), at
        once: left to the sweep the reload asks for, a private folder excluded during a long sweep
        stayed searchable until that sweep had ended and the next one ran. Every batch asks the
        rules while it holds the write lock (``Writer``): once the lock was free after the change,
        a batch that asked before is committed (and listed here), any later one leaves the notes
        out. How many notes."""
        with self.stores.write_lock:
            pass  # not held while every key is matched (seconds in a large vault)
        keys = [
            k
            for prefix in ("vault/", "wiki/")
            for k in self.manifest.file_states(prefix)
            if self.excluded_by(k) is not None
        ]
        try:
            self.delete(keys)
        except Exception as exc:  # said in status until a full sweep (or a removal) takes them out
            self.problems.report(
                "exclusions",
                f"{len(keys)} notes the rules now leave out could not be removed from the index yet "
                f"({exc}); the next sweep removes them, until then search may still find them",
            )
            raise
        self.problems.clear("exclusions")
        if keys:
            log.info("excluded_notes_removed count=%d", len(keys))
        return len(keys)

    def excluded_by(self, key: str) -> str | None:
        """The rule that leaves this note out of the index, or None."""
        return self.ignore.match_key(key, self.cfg.vault.wiki_subfolder)

    def _record_excluded(self, diff: Diff, every: Sequence[Root] | None, whole: int | None = None) -> None:
        """The excluded notes a sweep found, as link targets (notes.links.set_excluded); ``every``:
        the roots of a sweep, None for the file events taken between its batches, whose findings
        are applied again after the sweep's own (newer than its listing). ``whole``: the problems'
        mark at the start of a full sweep, which removed every excluded note it found."""
        if whole is not None:
            self.problems.clear("exclusions", since=whole)
            for rules in self.writer.left_out.values():  # listed before a reload excluded them
                for rule in rules.values():
                    self.activity.excluded[rule] = self.activity.excluded.get(rule, 0) + 1
        if every is None:
            _after(self._hot_excluded, diff.excluded)
        else:
            _after(self._hot_excluded, self.writer.left_out)
            _after(diff.excluded, self._hot_excluded)
            self._hot_excluded = {}
        if diff.excluded:
            roots = self.changes.roots() if every is None else every
            self.writer.set_excluded(diff.excluded, {r.source for r in roots if r.source != "memory"})

    def _refresh_ignore(self) -> None:
        """Re-read Obsidian's settings (``_read_obsidian_settings``); what was read kept in the
        manifest and its trouble said in status."""
        if self._read_obsidian_settings():
            self._keep_rules()

    def _read_obsidian_settings(self) -> bool:
        """Re-read Obsidian's settings, a file of the vault, with the probe timeout: on a share
        that hangs the rules in force stay (the vault's own listing then reports the share), and
        no second read is started while the first still hangs. Whether the read ended."""
        if self._ignore_stuck is not None and self._ignore_stuck.is_alive():
            return False
        vault = self.cfg.vault.path
        status = self.supervisor.roots.get("vault")
        if vault is None or (status is not None and status.hanging is not None):
            return False  # the vault's own call still hangs: its rules in force stay
        timeout, beat = self.cfg.watch.probe_timeout_seconds, self.supervisor.beat
        formats, self._ignore_stuck = run_with_timeout(self._read_settings, timeout, "settings", beat)
        if self._ignore_stuck is not None:
            # Said, not only waited out: a new Excluded files rule went unapplied without a word.
            # Cleared by the first read that ends (``_keep_rules``).
            log.error("obsidian_settings_hung path=%s timeout=%gs", vault / ".obsidian", timeout)
            self.problems.report(
                "obsidian_settings",
                f"reading Obsidian's settings in {vault / '.obsidian'} did not answer within {timeout:g} s "
                "(hung share?); the rules read before stay until it answers",
            )
        if formats is None:
            return False  # past the timeout: the rules in force stay
        # Dates are read from the names when a search asks (nothing stored to redo): a format
        # set or changed in Obsidian dates the notes indexed before at once.
        self.manifest.day_formats = formats
        return True

    def _keep_rules(self) -> None:
        """Obsidian's rules as read, into the manifest when they changed; their trouble to status."""
        kept = self.ignore.kept() or {"vault": str(self.cfg.vault.path)}
        kept["daily_notes"] = self.daily_formats.kept()
        text = json.dumps(kept, ensure_ascii=False)
        if text != self._rules_kept:
            self.manifest.set_meta(_OBSIDIAN_RULES, text)
            self._rules_kept = text
        # Excluded files and the daily-note settings are one area: both are Obsidian's settings.
        trouble = "; ".join(t for t in (self.ignore.trouble, self.daily_formats.trouble) if t) or None
        if trouble is not None:
            self.problems.report("obsidian_settings", trouble)
        else:
            self.problems.clear("obsidian_settings")

    def _read_settings(self) -> tuple[tuple[str, str], ...] | None:
        """Obsidian's settings this index follows: Excluded files, the daily-note formats and the
        week start searches read weeks by; None (the settings in force stay) while the vault is not
        there: a bare mount point has no .obsidian, and reading it as "no settings" forgot the
        daily-note format for the whole outage (the notes stay searchable, their dates went)."""
        if self.supervisor.vault_not_there():
            return None
        self.ignore.refresh()
        self.week_start.refresh()
        return self.daily_formats.refresh()


# The manifest's meta row holding Obsidian's Excluded files as last read (``IgnoreRules.kept``).
_OBSIDIAN_RULES = "obsidian_rules"


def _after(scopes: dict[str, dict[str, str]], later: dict[str, dict[str, str]]) -> None:
    """``later``'s scopes of ``Diff.excluded`` into ``scopes``, after theirs (applied in order)."""
    for scope, found in later.items():
        scopes.pop(scope, None)
        scopes[scope] = found
