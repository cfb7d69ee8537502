"""Which notes to leave out: ``index.exclude`` (gitignore patterns), Obsidian's "Excluded files"
and the folder Obsidian's templates are kept in.

Paths are matched relative to the vault, with ``.md`` (the wiki is its folder ``<wikiSubfolder>/``),
so ``Templates/``, ``*.excalidraw.md``, ``/Archive`` and ``!Archive/keep.md`` mean what they mean
in a ``.gitignore`` (the last matching pattern decides). Obsidian's setting
(``.obsidian/app.json``, ``userIgnoreFilters``) holds path prefixes (``Archive/``) or regular
expressions written ``/…/``; it is read again whenever the file changes, and a file that was
there and is missing keeps its rules for a while (``SETTINGS_GRACE_S``). Memory inboxes are never
excluded. The templates folder (the Templates core plugin's ``.obsidian/templates.json``
``folder``, Templater's ``templates_folder``) is left out as well (``index.obsidianTemplates``): a
template is a form with placeholders, never what the user did or wrote, and it matched every
question of "what did I do". Of the project it imports only the confined reads
(``sidecar.vault.confine``) and the Canvas file names (``sidecar.vault.canvas``).
"""

from __future__ import annotations

import json
import logging
import os
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Obsidian's filters are regular expressions from the vault: not ours to trust. The regex engine
# takes a deadline per match; one that backtracks without end (/^(a|aa)+$/) would hold the GIL
# and freeze the daemon under the standard library's re.
import regex
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from sidecar.vault.canvas import is_canvas_name
from sidecar.vault.confine import open_regular, printable, read_fd

log = logging.getLogger(__name__)
# Obsidian's app.json holds a few settings: a file far larger is not one to read whole.
_MAX_SETTINGS_BYTES = 1 << 20
# A filter matches a short path in microseconds; past this it is backtracking without end.
_REGEX_TIMEOUT_S = 0.05
# How long Excluded files read before stay in force while app.json (or all of .obsidian) is
# missing: Obsidian rewriting its settings, or a sync tool replacing the folder, makes it vanish
# for a moment, and the sweep its removal starts indexed every excluded note at once. Longer than
# a sync takes to put it back; a vault that stopped being one of Obsidian's is followed after it.
SETTINGS_GRACE_S = 30 * 60.0
OWN_RULES = "index.exclude"  # the origin of sidecar's own rules, as a rule describes itself
# The plugins that keep templates in a folder, and the key of that folder in their settings.
TEMPLATE_SETTINGS = (
    (Path(".obsidian/templates.json"), "folder"),
    (Path(".obsidian/plugins/templater-obsidian/data.json"), "templates_folder"),
)
TEMPLATES_ORIGIN = "Obsidian templates folder"


@dataclass(frozen=True)
class _Rule:
    origin: str  # "index.exclude" | "Obsidian excluded files" | "Obsidian templates folder"
    text: str
    pattern: GitIgnoreSpecPattern | None = None
    regex: Any = None  # a compiled pattern of the regex engine
    # Set when the pattern ran past its deadline once: from then on it decides nothing.
    stuck: list[bool] = field(default_factory=lambda: [False], compare=False)

    def decides(self, path: str) -> bool | None:
        """True: excludes ``path``; False: a negation takes it back in; None: no opinion."""
        if self.pattern is not None:
            if self.pattern.include is None or self.pattern.match_file(path) is None:
                return None
            return bool(self.pattern.include)
        if self.regex is not None:
            if self.stuck[0]:
                return None
            try:
                return True if self.regex.search(path, timeout=_REGEX_TIMEOUT_S) else None
            except TimeoutError:
                self.stuck[0] = True
                log.warning("obsidian_filter_ignored filter=%s reason=too slow", printable(self.text))
                return None
        return True if path.startswith(self.text) else None

    def describe(self) -> str:
        return f"{self.origin}: {self.text}"


def _folder(value: Any) -> str:
    """A settings folder as Obsidian normalises it ("\\" as "/", no "./" nor slashes around it)."""
    if not isinstance(value, str):
        return ""
    folder = unicodedata.normalize("NFC", value.strip().replace("\\", "/")).strip("/")
    while folder.startswith("./"):
        folder = folder[2:].lstrip("/")
    return "" if folder == "." else folder


def _compile(filters: Any) -> tuple[list[_Rule], list[str]]:
    """Obsidian's ``userIgnoreFilters`` as rules, and those that are no regular expression."""
    rules: list[_Rule] = []
    invalid: list[str] = []
    for item in filters if isinstance(filters, list) else []:
        if not isinstance(item, str) or not item.strip():
            continue
        f = unicodedata.normalize("NFC", item.strip())
        if len(f) > 2 and f.startswith("/") and f.endswith("/"):
            try:
                rules.append(_Rule("Obsidian excluded files", f, regex=regex.compile(f[1:-1])))
            except (regex.error, RecursionError, ValueError):
                log.warning("obsidian_filter_invalid filter=%s", printable(f))
                invalid.append(f)
        else:
            rules.append(_Rule("Obsidian excluded files", f))
    return rules, invalid


class IgnoreRules:
    """The exclusion rules of one vault; ``match`` names the rule that leaves a note out."""

    def __init__(
        self,
        patterns: Sequence[str],
        vault: Path | None,
        obsidian: bool = True,
        clock: Callable[[], float] = time.monotonic,
        templates: bool = True,
    ) -> None:
        self.patterns = tuple(patterns)
        self.clock = clock
        self.vault = vault
        self.obsidian = obsidian
        self.templates = templates
        # settings file -> (its stamp, the folder rule it names or None)
        self._template_read: dict[Path, tuple[tuple[int, int], _Rule | None]] = {}
        self._own: list[_Rule] = []
        for text in self.patterns:
            line = unicodedata.normalize("NFC", text.strip())
            if not line or line.startswith("#"):
                continue
            self._own.append(_Rule(OWN_RULES, line, pattern=GitIgnoreSpecPattern(line)))
        self._app_stat: tuple[int, int] | None = None
        self._app: list[_Rule] = []
        self._missing_since: float | None = None  # app.json, read before, not found since then
        self._missing_wall: float | None = None  # the same as wall-clock time (kept across a restart)
        # What is wrong with Obsidian's settings as last read (unreadable, filters that are no
        # regular expression), for status: a log line alone left the user wondering why a folder
        # they excluded in Obsidian is searched.
        self.trouble: str | None = None

    def _obsidian_rules(self) -> list[_Rule]:
        if not self.obsidian or self.vault is None:
            return []
        path = self.vault / ".obsidian" / "app.json"
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return self._missing(path)
        except OSError:
            return self._app  # cannot tell now (a share that fails): the rules in force stay
        if self._missing_since is not None:  # back: read again, which says what is wrong with it now
            self._missing_since, self._missing_wall, self._app_stat = None, None, None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._app_stat:
            return self._app
        try:
            # Opened as a note is (never a blocking read of a pipe, a device is refused) and read
            # up to a cap: the file is the vault's, whatever it holds.
            raw = read_fd(open_regular(path), _MAX_SETTINGS_BYTES + 1)
            if len(raw) > _MAX_SETTINGS_BYTES:
                raise ValueError(f"larger than {_MAX_SETTINGS_BYTES} bytes")
            filters = json.loads(raw.decode("utf-8")).get("userIgnoreFilters") or []
        except (OSError, ValueError, AttributeError, RecursionError) as exc:
            # Said once per version of the file; the rules in force stay (a note the user left
            # out is not indexed because the file could not be read this time).
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            log.warning("obsidian_settings_unreadable path=%s error=%s", path, printable(why))
            self._app_stat = stamp
            kept = f"the {len(self._app)} rules read before stay" if self._app else "no rule of it applies"
            self.trouble = f"{path} cannot be read ({printable(why)}); {kept}"
            return self._app
        rules, invalid = _compile(filters)
        if rules:
            log.info("obsidian_excluded_files count=%d", len(rules))
        # Both at once: a read that hung past its deadline and ends later replaces the whole list.
        self._app_stat, self._app = stamp, rules
        self.trouble = None
        if invalid:
            shown = ", ".join(printable(f[:80]) for f in invalid[:3]) + (" …" if len(invalid) > 3 else "")
            self.trouble = (
                f"{len(invalid)} of Obsidian's Excluded files filters are no regular expression and leave "
                f"nothing out: {shown}"
            )
        return rules

    def _missing(self, path: Path) -> list[_Rule]:
        """No settings file: no rules of Obsidian's, except that rules read before stay for
        ``SETTINGS_GRACE_S`` after it went (said in status meanwhile)."""
        now = self.clock()
        if self._app and self._missing_since is None:
            self._missing_since, self._missing_wall = now, time.time()
            log.warning("obsidian_settings_missing path=%s rules_kept=%d", path, len(self._app))
        if self._app and self._missing_since is not None and now - self._missing_since < SETTINGS_GRACE_S:
            left = SETTINGS_GRACE_S - (now - self._missing_since)
            self.trouble = (
                f"{path} is missing; the {len(self._app)} Excluded files rules read before stay in force "
                f"until it is back, or for {max(1, round(left / 60))} more min"
            )
            return self._app
        if self._app:
            log.warning("obsidian_settings_gone path=%s rules_dropped=%d", path, len(self._app))
        self._app_stat, self._app, self._missing_since, self._missing_wall = None, [], None, None
        self.trouble = None
        return []

    def carry_over(self, before: IgnoreRules) -> None:
        """Obsidian's rules as ``before`` (the rules replaced by a configuration reload) read
        them: a settings file missing at the reload keeps them for what is left of its grace."""
        if self.obsidian and before.obsidian and self.vault == before.vault:
            self._app_stat, self._app = before._app_stat, before._app
            self._missing_since, self.trouble = before._missing_since, before.trouble
            self._missing_wall = before._missing_wall
        if self.templates and before.templates and self.vault == before.vault:
            self._template_read = dict(before._template_read)

    def kept(self) -> dict[str, Any] | None:
        """Obsidian's rules as last read, and since when (wall clock) their file is missing, for
        the index to keep: a daemon started while the file is missing uses them (``resume``)."""
        if not self.obsidian or self.vault is None:
            return None
        return {
            "vault": str(self.vault),
            "filters": [r.text for r in self._app],
            "missing_since": self._missing_wall,
        }

    def resume(self, kept: dict[str, Any]) -> None:
        """At a start, the rules a run before read (``kept``): in force while the settings file
        stays missing, for what is left of the grace since it went, or from now if it went while
        no daemon ran. A settings file that is there is read as ever and replaces them. A restart
        while a sync tool replaced .obsidian indexed every excluded note at once."""
        if not self.obsidian or self.vault is None or self._app or kept.get("vault") != str(self.vault):
            return
        filters = kept.get("filters")
        rules, _ = _compile(filters if isinstance(filters, list) else [])
        if not rules:
            return
        self._app = rules
        since = kept.get("missing_since")
        if isinstance(since, int | float) and not isinstance(since, bool):
            self._missing_wall = float(since)
            self._missing_since = self.clock() - max(0.0, time.time() - float(since))

    def refresh(self) -> None:
        """Re-read Obsidian's settings if they changed (called once per sweep)."""
        self._obsidian_rules()
        self._template_rules()

    def rules(self) -> list[str]:
        return [r.describe() for r in [*self._own, *self._app, *self._templates()]]

    def _templates(self) -> list[_Rule]:
        return list(dict.fromkeys(r for _, r in self._template_read.values() if r is not None))

    def _template_rules(self) -> None:
        """Read the template plugins' settings that changed. A file gone takes its folder's rule
        with it (the plugin was turned off); one that cannot be read keeps what was read."""
        if not self.templates or self.vault is None:
            return
        for rel, key in TEMPLATE_SETTINGS:
            path = self.vault / rel
            try:
                st = os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                self._template_read.pop(path, None)
                continue
            except OSError:
                continue
            stamp = (st.st_mtime_ns, st.st_size)
            if self._template_read.get(path, ((0, 0), None))[0] == stamp:
                continue
            try:
                raw = read_fd(open_regular(path), _MAX_SETTINGS_BYTES + 1)
                if len(raw) > _MAX_SETTINGS_BYTES:
                    raise ValueError(f"larger than {_MAX_SETTINGS_BYTES} bytes")
                folder = _folder(json.loads(raw.decode("utf-8")).get(key))
            except (OSError, ValueError, AttributeError, RecursionError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                log.warning("template_settings_unreadable path=%s error=%s", path, printable(why))
                continue
            # No folder set: the templates lie anywhere, and the vault is not left out.
            rule = _Rule(TEMPLATES_ORIGIN, f"{folder}/") if folder else None
            if rule is not None:
                log.info("templates_folder path=%s folder=%s", path, printable(folder))
            self._template_read[path] = (stamp, rule)

    def match(self, vault_rel: str) -> str | None:
        """The rule that excludes a note at ``vault_rel`` (POSIX, with .md), or None. Names and
        rules are compared in one Unicode form (NFC): a folder a Mac named in NFD is the folder
        the user excluded by typing its name."""
        vault_rel = unicodedata.normalize("NFC", vault_rel)
        decided: _Rule | None = None
        for rule in self._own:
            verdict = rule.decides(vault_rel)
            if verdict is not None:
                decided = rule if verdict else None
        if decided is not None:
            return decided.describe()
        for rule in [*self._app, *self._templates()]:
            if rule.decides(vault_rel):
                return rule.describe()
        return None

    def match_key(self, key: str, wiki_subfolder: str) -> str | None:
        """The rule that excludes the note behind an index key (memory keys: never)."""
        source, _, rest = key.partition("/")
        if source == "memory" or not rest:
            return None
        rel = f"{wiki_subfolder.strip('/')}/{rest}" if source == "wiki" else rest
        return self.match(rel if is_canvas_name(rel) else rel + ".md")  # a Canvas's key keeps its name
