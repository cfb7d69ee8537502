"""The configuration file read again and applied while the daemon runs (SIGHUP, the reload
op), a mixin of ``Daemon``: what a reload applies (``_RELOADED``) and what waits for a restart,
a file refused while being written or naming another daemon, one asked while the index is
read-only carried into the switch to writable. Its own module because a reload touches the
running parts only through their settings, apart from the start and stop in ``lifecycle`` and
the switch to writable in ``readonly_start``; the state it works on is the daemon's own, made in
``Daemon.__init__``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sidecar.config import Config, file_sets, holds_nothing
from sidecar.config.settings import carried, settings
from sidecar.contracts.errors import ConfigError, SidecarError, StorageError
from sidecar.daemon.compose import Parts, model_gates, model_stem
from sidecar.daemon.indexing import IndexLoop
from sidecar.daemon.schedule import Schedule
from sidecar.model.embedder import EmbedderSlot, model_name
from sidecar.runtime.notify import restart_words, under_service_manager
from sidecar.search.retrieval import Retriever

log = logging.getLogger(__name__)

# Keys a reload applies; every other one is read at start.
_RELOADED = (
    "search.",
    "recall.",
    "index.exclude",
    "index.obsidianExcludes",
    "index.obsidianTemplates",
    "index.maxVectorChunksPerNote",
)
# Keys that say which daemon a file is for: a file naming others is not this daemon's any more
# (emptied, cut short while being written) and none of it is applied.
_IDENTITY = ("home", "socket", "vault.path")
RELOAD_WAITS = "a configuration reload waits until the index is writable again"
# How long after a reload a change of the file read brings another reload (a writer still at it).
_RECHECK_S = 30.0
# How long the reload op waits for the model it tries again (the CLI waits 30 s for the answer);
# a longer load (a first conversion, about a minute) is answered "loading".
MODEL_WAIT_S = 20.0


def _needs_restart(key: str, was: object, now: object, unset: bool) -> str:
    """Why a reload refuses a changed ``key`` of ``_IDENTITY``: it takes a restart, said first (a
    vault moved on purpose was met with a guess that the file was cut short); the guess only when
    the file no longer sets the key (``unset``), as a file cut short or emptied reads."""
    guess = "; the file no longer sets it: was it cut short or emptied? " if unset else ". "
    return (
        f"{key} changed in the file ({was} -> {now}) and takes a restart: a reload does not move the "
        f"daemon to another {key}{guess}To use the new value, restart the daemon"
    )


class ModelRetries:
    """Which retries of the model started and ended, so that a reload waits for one that started
    after it asked: an event set by any retry's end let a retry already running (from before the
    files were put right) answer the reload "still cannot be loaded"; and the one asked then was
    skipped (the scheduler runs no job beside itself), so it is run by the running one's end."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._started = 0
        self._ended = 0  # the number of the last retry that ended
        self._asked = False  # a retry asked since the last one started

    def ask(self) -> int:
        """A retry is wanted; the number to wait past (``ended_after``)."""
        with self._cond:
            self._asked = True
            return self._started

    def begin(self) -> int:
        with self._cond:
            self._asked = False
            self._started += 1
            return self._started

    def end(self, number: int) -> bool:
        """This retry ended; whether another was asked while it ran (run it now)."""
        with self._cond:
            self._ended = number
            self._cond.notify_all()
            return self._asked

    def ended_after(self, asked: int, timeout: float) -> bool:
        """Whether a retry that started after ``ask`` ended, waiting ``timeout`` at most."""
        with self._cond:
            return self._cond.wait_for(lambda: self._ended > asked, timeout)


class ConfigReload:
    """The reloads of a ``Daemon`` (which sets the state below), one at a time (``_reload_lock``)."""

    cfg: Config
    reload_config: Callable[[], Config] | None
    parts: Parts | None
    loop: IndexLoop | None
    _reload_lock: threading.Lock
    _read_only: bool
    _reload_waits: bool
    _read_only_parts: Parts | None
    _retriever: Retriever | None
    _scheduler: Schedule | None
    _read_stamp: tuple[int, int, int] | None
    _recheck: tuple[tuple[int, int, int] | None, float] | None
    slot: EmbedderSlot
    _model_retries: ModelRetries  # which retries of the model started and ended

    if TYPE_CHECKING:  # the daemon's own (``Daemon``)

        def _model_wanted(self) -> bool: ...

    def _carry_waiting_reload(self) -> None:
        """A reload asked while read-only: the file's reloadable settings go into the
        configuration the parts are built from (its catch-up sweep already leaves a folder
        excluded meanwhile out). A file refused now is said by the reload after the switch."""
        with self._reload_lock:
            if not self._reload_waits or self.reload_config is None:
                return
            try:
                new = self._loaded()
            except SidecarError as exc:
                log.error("reload_failed error=%s; the switch keeps the running configuration", exc)
                return
            self.cfg = carried(self.cfg, new, _RELOADED)

    def _reload_quietly(self) -> None:
        """SIGHUP's: the model retry it asks runs in the background, nobody waits for it."""
        with contextlib.suppress(SidecarError), self._reload_lock:  # logged; the running one stays
            self._reload()

    def reload(self) -> dict[str, Any]:
        """Re-read the configuration and apply the ranking tunables (the reload op). A model that
        had failed to load is tried again now, and the answer says how that went (``model``):
        it said "nothing changed" while the model the person had just put right loaded."""
        with self._reload_lock:
            answer = self._reload()
        asked = answer.pop("modelRetry", None)
        if asked is not None:  # waited outside the lock: a SIGHUP is not held
            answer["model"] = self._model_outcome(asked)
        return answer

    def _model_outcome(self, asked: int) -> dict[str, Any]:
        """The retry asked by a reload (one started after ``asked``), waited for ``MODEL_WAIT_S``
        at most: ``loaded`` (the model's name), ``loading`` (still at it) or ``failed`` (and why)."""
        # Within the request's own bound (server.requestTimeoutSeconds may be set lower).
        wait = min(MODEL_WAIT_S, self.cfg.server.request_timeout_seconds / 2)
        if not self._model_retries.ended_after(asked, wait):
            return {"state": "loading", "model": None, "error": None}
        d = self.slot.describe()
        if d["state"] == "ok" and d["fallback"] is None:
            return {"state": "loaded", "model": model_name(d["model"] or ""), "error": None}
        if d["state"] in ("idle", "loading"):  # a later retry (a SIGHUP, the periodic one) is at it
            return {"state": "loading", "model": None, "error": None}
        error = d["fallback"]["error"] if d["fallback"] else d["error"]
        return {"state": "failed", "model": None, "error": error}

    def _loaded(self) -> Config:
        """The configuration file as it is now, once it stopped changing, refused when it is empty
        or names another daemon's home, vault or socket (a file being written, or emptied: applied,
        it dropped every exclusion and brought private folders back into search)."""
        assert self.reload_config is not None
        source = self.cfg.source_file
        for _ in range(3):  # read again while the file changes under the read
            seen = None
            if source is not None:
                seen = _settled(source)
                _refuse_empty(source)
            new = self.reload_config()
            if source is None or _stamp(source) == seen:
                break
        self._read_stamp = seen
        for s in settings():
            if s.dotted in _IDENTITY:
                was, now = (
                    functools.reduce(getattr, s.attrs, self.cfg),
                    functools.reduce(getattr, s.attrs, new),
                )
                if was != now:
                    unset = source is not None and not file_sets(source, s.dotted)
                    raise ConfigError(_needs_restart(s.dotted, was, now, unset))
        return new

    def _reload(self) -> dict[str, Any]:
        if self._read_only:
            # Applied to the read-only parts now, it was undone by the switch to writable, which
            # builds its parts from the configuration (a folder excluded meanwhile came back); so
            # the switch carries it (also one asked while the switch runs).
            self._reload_waits = True
            ro = self._read_only_parts
            if ro is not None:  # None while a switch runs
                ro.problems.report("config", RELOAD_WAITS)
            raise StorageError(
                "the index is read-only while its disk is full; nothing applied yet: the reload is "
                "applied as soon as the index is writable again (`sidecar status` says when)"
            )
        if self.reload_config is None or self._retriever is None:
            return {"reloaded": False, "changed": []}
        problems = self.parts.problems if self.parts is not None else None
        try:
            new = self._loaded()
        except SidecarError as exc:
            log.error("reload_failed error=%s; keeping the running configuration", exc)
            if problems is not None:
                problems.report(
                    "config",
                    f"the configuration file could not be reloaded (the previous settings stay): {exc}",
                )
            # Said in the answer, not only in status: a person reading the refusal could not tell
            # whether the daemon still ran, and with which settings. Any refusal (the error keeps
            # its class and code: only its text grows).
            exc.args = (
                f"{exc}\nNothing was applied: the daemon keeps running with its previous settings; fix "
                "the file and run `sidecar reload` again",
            )
            raise
        if problems is not None:
            problems.clear("config")
        # Named by their config paths (search.minScore), as needsRestart names its keys.
        running = {"search": self._retriever.cfg, "recall": self._retriever.recall_cfg}
        changed = [
            s.dotted
            for s in settings()
            if s.attrs[0] in running
            and functools.reduce(getattr, s.attrs[1:], running[s.attrs[0]])
            != functools.reduce(getattr, s.attrs, new)
        ]
        self._retriever.cfg = new.search
        self._retriever.recall_cfg = new.recall
        self._retriever.model_stem = model_stem(new)
        self._retriever.model_gates = model_gates(new)
        unremoved = self._reload_index(new, changed)
        log.info("config_reloaded changed=%s", ",".join(changed) or "nothing")
        for warning in new.warnings:  # at the start the command line said them on stderr
            log.warning("config_warning %s", warning)
        retry: int | None = None
        if self._model_wanted() and self._scheduler is not None:
            # A reload is how a user says "I fixed it": the model file put right is tried now,
            # not at the next embedder.retryMinutes.
            retry = self._model_retries.ask()
            self._scheduler.run_soon("model-retry")
        # Everything else is read at start: say what waits for one instead of a silent success.
        restart = [
            s.dotted
            for s in settings()
            if not s.dotted.startswith(_RELOADED)
            and functools.reduce(getattr, s.attrs, self.cfg) != functools.reduce(getattr, s.attrs, new)
        ]
        if restart:
            log.warning("config_needs_restart keys=%s", ",".join(restart))
        if problems is not None:  # shown by status until the restart (or the file is put back)
            if restart:
                problems.report(
                    "restart",
                    f"changed in the configuration, applied at the next start: {', '.join(restart)} "
                    f"({restart_words(under_service_manager(self.cfg.notify_socket))})",
                )
            else:
                problems.clear("restart")
        # A writer that paused longer than the settle wait (an editor saving over a network home,
        # a tool writing in pieces) left a valid start of the file, applied now: if the file
        # changes in the next seconds, it is read again (the tick looks).
        self._recheck = (self._read_stamp, time.monotonic() + _RECHECK_S)
        if unremoved is not None:
            raise StorageError(
                f"the configuration is applied, but the notes it now excludes could not be removed "
                f"from the index yet ({unremoved}); the sweep queued removes them, and until then "
                "search may still find them"
            )
        return {"reloaded": True, "changed": changed, "needsRestart": restart, "modelRetry": retry}

    def _reload_index(self, new: Config, changed: list[str]) -> Exception | None:
        """The index's reloadable settings applied (their keys added to ``changed``); the error
        that kept the notes now excluded from being removed, if one did."""
        parts, loop = self.parts, self.loop
        if parts is None or loop is None:
            return None
        unremoved: Exception | None = None
        s = new.search
        parts.vectors.tune(s.ann_index, s.ann_probes, s.ann_threshold)
        which = parts.indexer.set_excludes(
            new.index.exclude, new.index.obsidian_excludes, new.index.obsidian_templates
        )
        if which is not None:
            changed.extend(which.split(","))
            # Excluded notes leave, included ones come: no events were lost for those.
            loop.schedule_sweep(audit=False)
            # Those it leaves out leave before the answer: excluded for privacy, a folder must not
            # be found once the reload said it was applied (a running first sweep let them in
            # until its end and the next sweep's).
            try:
                parts.indexer.remove_excluded()
            except Exception as exc:  # any: the rest of the reload is applied all the same
                log.error("excluded_notes_removal_failed error=%s; the sweep asked removes them", exc)
                unremoved = exc
        cap = new.index.max_vector_chunks_per_note
        if parts.stores.manifest.vector_cap != cap:
            # Read by every query of pending vectors: a raised limit queues the chunks it lets
            # in (the backfill is woken for them), a lowered one keeps the vectors computed.
            parts.stores.manifest.vector_cap = cap
            changed.append("index.maxVectorChunksPerNote")
            parts.vectors.notify_written()
        return unremoved

    def _recheck_config(self) -> None:
        """On the tick: the file read by the last reload changed within ``_RECHECK_S`` after it:
        reloaded again (in a thread of its own: the settle wait must not hold the tick)."""
        recheck, source = self._recheck, self.cfg.source_file
        if recheck is None or source is None:
            return
        stamp, until = recheck
        if time.monotonic() > until:
            self._recheck = None
        elif _stamp(source) != stamp:
            self._recheck = None
            log.warning("config_changed_after_reload the file changed right after it was read: read again")
            threading.Thread(target=self._reload_quietly, name="config-reload", daemon=True).start()


def _refuse_empty(source: Path) -> None:
    if holds_nothing(source):
        raise ConfigError(f"{source} is empty (being written?)")


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """The file's size, time and inode (None when it cannot be looked at)."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def _settled(path: Path, wait: float = 0.1, limit: float = 2.0) -> tuple[int, int, int] | None:
    """Return once ``path``'s size and time hold still for ``wait`` (at most ``limit``): a reload
    that lands while an editor writes the file reads it whole. Its stamp then."""
    deadline = time.monotonic() + limit
    before = None
    while time.monotonic() < deadline:
        now = _stamp(path)
        if now is None or now == before:
            return now
        before = now
        time.sleep(wait)
    return before
