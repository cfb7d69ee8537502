"""What ``sidecar serve`` tells a person at a terminal: a few plain lines on stdout (listening,
keyword search ready, vectors ETA, done) while the log keeps one structured line per event on
stderr. The summary is a client of the daemon's own ``health`` op, so the daemon knows nothing
of it. Also the steady ETA that the progress bar and the summary share.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from sidecar.clients.client import Client
from sidecar.contracts.errors import SidecarError

_ETA_EVERY = 60.0  # seconds between two "vectors: ... left" lines


def _continuous_pending(idx: dict[str, Any]) -> int:
    """health's chunks waiting for a vector that notes written continuously just added."""
    return int((idx.get("continuous") or {}).get("pending_vectors") or 0)


def backlog(idx: dict[str, Any]) -> int:
    """health's chunks waiting for a vector, but those of notes written continuously (each of their
    indexings leaves a few, computed at once: no backlog to wait for or to report as one)."""
    return max(int(idx["pending_vectors"]) - _continuous_pending(idx), 0)


def all_vectors_words(idx: dict[str, Any]) -> str:
    """ "every chunk has a vector", or, beside chunks past the per-note limit (found by keywords
    only), every chunk within it: the line must not say all while the next one says some have none
    (nor while chunks of a note written continuously wait, or chunks wait for a model switch's end:
    all but those, said which)."""
    capped = idx.get("keyword_only")
    left = _continuous_pending(idx)
    but = f" but the {left:,} a note written continuously just added" if left else ""
    within = f" within {capped['setting']}" if capped else ""
    if switch := int(idx.get("left_to_switch") or 0):
        # Cut again during a model switch, left to the new model's table: never "every chunk".
        said = (
            f"{switch:,} chunks cut again for the model switch are"
            if switch > 1
            else "1 chunk cut again for the model switch is"
        )
        return f"{said} found by keywords only until it ends; every other chunk{within}{but} has a vector"
    return f"every chunk{within}{but} has a vector"


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60}m"


def per_second(rate: float) -> str:
    """A rate as status says it: whole above 10 ("42"), else two significant digits ("4.2",
    "0.042"; a very slow sweep once read "0.0 a second")."""
    if rate >= 10 or rate <= 0:
        return f"{rate:,.0f}"
    return f"{rate:.{max(1, 1 - math.floor(math.log10(rate)))}f}"


def time_left(left: float, rate: float | None, rough: bool | None = False) -> str:
    """ ", about 3h 57m left" for ``left`` units at ``rate`` a second (the daemon's pace of a sweep
    or of the vectors); "" without a rate. Said to be rough while the pace still settles: the first
    figure of a long backfill on a busy host was 3.5 times the later one."""
    if not rate or not left:
        return ""
    seconds = left / rate
    # Never "0s left" while work waits: the last vectors of a batch are stored together.
    words = f"about {duration(seconds)} left" if seconds >= 60 else "less than a minute left"
    return f", {words}" + (ROUGH if rough else "")


# Said after an estimate from a pace that still settles (``index.embed_rate_rough``).
ROUGH = " (a rough estimate: the pace is still settling)"


class Eta:
    """Time left from a count that moves in steps (vectors arrive 256 chunks at a time): the rate
    is taken over the last ``window`` steps (one step's timing jitter barely moves it), and
    between two steps the estimate counts down instead of standing still and then jumping."""

    def __init__(self, window: int = 16, pull: float = 0.25) -> None:
        self.steps: deque[tuple[float, int]] = deque(maxlen=window)  # (time, done) when it moved
        self.pull = pull
        self._shown: tuple[float, float] | None = None  # (time, seconds left) last returned

    @property
    def rate(self) -> float | None:
        """Units per second over the window, None before two steps."""
        if len(self.steps) < 2:
            return None
        (t0, d0), (t1, d1) = self.steps[0], self.steps[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 and d1 > d0 else None

    def update(self, done: int, total: int, now: float | None = None) -> float | None:
        now = time.monotonic() if now is None else now
        if self.steps and done < self.steps[-1][1]:  # a new count began
            self.steps.clear()
            self._shown = None
        if not self.steps or done > self.steps[-1][1]:
            self.steps.append((now, done))
        rate = self.rate
        if not rate:
            return None
        raw = max(max(total - done, 0) / rate - (now - self.steps[-1][0]), 0.0)
        if self._shown is None or done >= total:
            shown = raw
        else:  # count down from the last figure, moving a quarter of the way to the new estimate
            t, value = self._shown
            predicted = value - (now - t)
            shown = max(predicted + self.pull * (raw - predicted), 0.0)
        self._shown = (now, shown)
        return shown


class Summary:
    """Turns successive health answers into the few lines worth a person's attention."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.eta = Eta()
        self.switch_eta = Eta()
        self.said: set[str] = set()
        self.last_eta_line = -1e9
        self.offline: set[str] = set()

    def _once(self, key: str, line: str, out: list[str]) -> None:
        if key not in self.said:
            self.said.add(key)
            out.append(line)

    def _eta_due(self, now: float, left: float | None) -> bool:
        """Whether a progress line is due: the first one at once, then one per ``_ETA_EVERY``."""
        if now - self.last_eta_line < _ETA_EVERY or (left is None and "vectors" in self.said):
            return False
        self.said.add("vectors")
        self.last_eta_line = now
        return True

    def lines(self, h: dict[str, Any]) -> list[str]:
        out: list[str] = []
        now = self.clock()
        vault = h.get("vault") or "none configured (only agent memory)"
        self._once("up", f"sidecar {h['version']} is listening on {h['socket']}; vault: {vault}", out)
        if refusing := h.get("refusing"):
            # The index cannot be read: its record has no counters (the thread died of a KeyError
            # and said nothing more). Its words, once each; the daemon retries by itself.
            self._once(f"refusing {refusing}", f"index: refusing: {refusing}", out)
            return out
        idx, emb = h["index"], h["embedder"]
        # Not by phase and sweeps: a sweep of file events' paths or of some roots may run before
        # the first sweep of every root, which then runs with sweeps 1 ("ready: 1 notes" of 34).
        # Once said ready, a rebuild's sweep (the flag false again) does not hide the vectors' lines.
        if not idx["first_sweep_done"] and "keywords" not in self.said:
            prog = idx.get("progress") or {}
            if prog.get("total"):
                self._once("reading", f"reading {prog['total']:,} notes for keyword search ...", out)
            return out
        self._once(
            "keywords",
            f"keyword search ready: {idx['files']:,} notes, {idx['chunks']:,} chunks "
            f"(after {duration(now - self.started)})",
            out,
        )
        pending = backlog(idx)
        vec = h.get("vectors") or {}
        fallback = emb.get("fallback")
        if emb["state"] == "ok" and fallback:
            self._once(
                "fallback",
                f"vectors: the configured model {fallback['configured']} failed to load "
                f"({fallback['error']}); {emb['model']} answers in its place",
                out,
            )
        if emb["state"] in ("failed", "off"):
            what = "off" if emb["state"] == "off" else "the model failed"
            self._once("failed", f"vectors: {what} ({emb.get('error')}); search is keyword-only", out)
        elif emb["state"] != "ok":
            self._once("loading", f"vectors: loading the model ({emb.get('model') or 'default'}) ...", out)
        elif pending:
            total = idx["chunks"]
            left = self.eta.update(total - pending, total, now)
            if self._eta_due(now, left):
                # Counted down here between the daemon's batches; rough as long as its pace is.
                rough = ROUGH if idx.get("embed_rate_rough") is not False else ""
                eta = f", about {duration(left)} left{rough}" if left is not None else ""
                out.append(f"vectors: {pending:,} of {total:,} chunks to embed{eta}")
        elif vec.get("building"):  # a model switch: the previous model's vectors answer meanwhile
            total, waiting = idx["chunks"], vec.get("building_pending", 0)
            left = self.switch_eta.update(total - waiting, total, now)
            if self._eta_due(now, left):
                eta = f", about {duration(left)} left" if left is not None else ""
                out.append(
                    f"model switch: {waiting:,} of {total:,} chunks still wait for {emb['model']}'s "
                    f"vectors{eta}; searches use {vec.get('serving_model')}'s until then"
                )
        elif vec.get("serving") and (idx["chunks"] or "vectors" in self.said):
            # Only once the table is attached: before, a switch about to start looked done.
            self._once("done", f"done: {all_vectors_words(idx)} (after {duration(now - self.started)})", out)
        for r in h.get("roots", []):
            if r["mode"] in ("offline", "held") and r["name"] not in self.offline:
                self.offline.add(r["name"])
                why = r.get("error") or "not reachable"
                out.append(
                    f"deletions held: {r['name']} ({r['path']}): {why}"
                    if r["mode"] == "held"
                    else f"offline: {r['name']} ({r['path']}): {why}; waiting"
                )
            elif r["mode"] not in ("offline", "held") and r["name"] in self.offline:
                self.offline.discard(r["name"])
                out.append(f"back: {r['name']} ({r['path']}) is reachable again")
        return out


def follow(socket: Path, stop: threading.Event, out: TextIO, every: float = 2.0) -> threading.Thread:
    """Print the summary of a daemon starting on ``socket`` until ``stop`` is set (a daemon thread)."""

    def run() -> None:
        summary = Summary()
        while not stop.wait(every):
            try:
                with Client(socket, timeout=5.0) as client:
                    health = client.call("health")
            except (SidecarError, OSError):
                continue  # not listening yet, or stopping
            for line in summary.lines(health):
                out.write(line + "\n")
                out.flush()

    thread = threading.Thread(target=run, name="foreground-summary", daemon=True)
    thread.start()
    return thread
