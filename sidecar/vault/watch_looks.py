"""The file watch's looks at the folders it covers, for the supervisor (``Supervisor``, built on
this and on ``SupervisorBase``): the stat of the vault or the agents folder and the walk of their
folders when a watch is set up, each call bounded as a probe of the roots they hold is, a call
that does not answer marking those roots hanging, and the agents folder walked around an agent
whose inbox hangs. Moved out of ``supervisor``.

Imports: config, vault."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from sidecar.vault.root_status import RootStatus, WalkHung, _still_hangs
from sidecar.vault.sources import Asking, Root
from sidecar.vault.supervisor_base import SupervisorBase
from sidecar.vault.timeout import NoAnswer, run_with_timeout

# Its log lines keep the logger of the module they came from (``supervisor``): users grep by it.
log = logging.getLogger("sidecar.vault.supervisor")

T = TypeVar("T")


class WatchLooks(SupervisorBase):
    """The watch's stat and walk of a watched folder, bounded and told to the roots in it."""

    def watched_stat(self, path: Path) -> os.stat_result:
        """The stat of a folder the file watch covers (the vault, the agents folder), asked as
        a probe of the roots it holds is (``_probe``, waited for probeTimeoutSeconds at most):
        NoAnswer at once while the vault hangs, or while the agents folder's own last stat is
        still in, and one that times out marks them hanging (the vault; each inbox known, for
        the agents folder), so status says the share hangs
        and the sweeps retry it with their backoff. Raises OSError as os.stat does."""
        vault = self.cfg.vault.path
        if vault is not None and path == vault:
            root = Root("vault", vault, exclude=self.cfg.vault.wiki_subfolder)
            timeout = self.cfg.watch.probe_timeout_seconds  # the watcher waits no longer
            return self._probe(root, "watch-stat", lambda: os.stat(path), beat=False, patience=timeout)
        inboxes = self._inboxes_in(path)
        # The agents folder is asked even while an inbox in it hangs (one agent's inbox hung by a
        # read of one note must not end the watch of the others'); only its own look that is
        # still in tells the next at once (``SharedProbes``).
        since = self._now()
        try:
            timeout = self.cfg.watch.probe_timeout_seconds
            return self.probes.ask(("watch-stat", str(path)), lambda: os.stat(path), timeout, "watch")
        except NoAnswer as exc:
            if exc.stuck is not None and exc.stuck.is_alive():
                for st in inboxes:
                    if not st.slow:  # waited probeTimeoutSeconds: a slow share's is not judged
                        self._hung(st, exc.stuck, since)
            raise

    def watched_walk(self, path: Path, walk: Callable[[Asking], T]) -> T:
        """A walk of a folder the file watch covers (the vault, the agents folder) when a watch
        is set up, each listing and stat waited for probeTimeoutSeconds (the watcher's one
        thread carries every root's events): NoAnswer at once while the vault hangs, and one
        call that does not answer marks the roots it lies in hanging (the vault; the inbox it
        was in, or each inbox known for the agents folder itself; a vault learnt slow is waited
        for as long as its scans' calls, an inbox learnt slow is not judged), so status says so
        and the watch leaves the folder out rather than watch it in part. Raises NoAnswer (what
        ``walk`` raises otherwise).

        The agents folder is walked around an agent whose inbox hangs (``Asking.avoid``: that
        agent's folder is not asked, and the watch goes folder by folder without it), and a walk
        that hangs in one agent's folder is walked again without it: one agent's hung inbox left
        every other agent's notes without file events until it answered."""
        vault = self.cfg.vault.path
        if vault is not None and path == vault:
            return self._walk_once(path, walk, {})
        avoid: dict[str, threading.Thread] = {}
        for st in self._inboxes_in(path):
            if (stuck := st.hanging) is not None:
                avoid[Path(st.path).parent.name] = stuck
        while True:
            try:
                return self._walk_once(path, walk, avoid)
            except WalkHung as exc:
                if exc.agent is None or exc.agent in avoid or exc.stuck is None:
                    raise
                avoid[exc.agent] = exc.stuck  # the others are walked (and watched) without it

    def _walk_once(self, path: Path, walk: Callable[[Asking], T], avoid: dict[str, threading.Thread]) -> T:
        """One walk of ``path`` for the watch (``watched_walk``), ``avoid``'s folders not asked.
        NoAnswer names, as ``agent``, the agent's folder of the agents folder its call hung in."""
        vault = self.cfg.vault.path
        timeout = self.cfg.watch.probe_timeout_seconds
        # An earlier walk of this folder still in its call: told at once (one thread left in a
        # share that hangs, not one per try); one still in an agent's folder leaves that agent
        # out (the others keep their watch).
        with self._lock:
            earlier = {k: t for k, t in self._walks.items() if t.is_alive()}
            self._walks = earlier
        if (stuck_here := earlier.get(str(path))) is not None:
            raise NoAnswer(f"an earlier walk of {path} still hangs (hung share?)", stuck_here)
        for key, thread in earlier.items():
            if Path(key).parent == path:
                avoid.setdefault(Path(key).name, thread)
        if vault is not None and path == vault:
            st = self.status(Root("vault", vault, exclude=self.cfg.vault.wiki_subfolder))
            if st.hanging is not None:
                raise NoAnswer(_still_hangs(st), st.hanging)
            # A vault learnt slow: each call waited for as its scans' are (given up on sooner, the
            # walk left it out of the watch and was tried again each time it answered late).
            timeout = self._bound(st)
        asking = Asking()
        asking.avoid = dict(avoid)
        value, stuck = run_with_timeout(
            lambda: walk(asking),
            self.cfg.watch.scan_timeout_seconds,
            "watch-walk",
            None,
            self.stopping.is_set,
            calls=asking,
            per_call=timeout,
        )
        if stuck is None:
            return value  # type: ignore[return-value]  # the walk's own result
        asking.abandon()  # it ends at its next call once this one answers
        now = asking.now
        call, rel = (now[0], now[1]) if now is not None else ("walking", ".")
        agent = rel.split("/", 1)[0] if (vault is None or path != vault) and rel not in (".", "") else None
        with self._lock:  # by the agent's folder it hangs in, for the agents folder
            self._walks[str(path / agent) if agent is not None else str(path)] = stuck
        what = f"{call} {rel}" if call == "listing" else f"looking up {rel}"
        if not self.stopping.is_set():
            for st in self._walked_roots(path, rel):
                if st.hanging is None and (not st.slow or timeout >= self._bound(st)):
                    # as ``_hung``: learnt slow should it answer (a slow one is a hung share now)
                    st._stuck, st.hung_on = stuck, f"{what} (the file watch's walk)"
                    st._asking, st._given_up = None, (call, rel, now[2] if now else self._now())
                    self._gave_up(st, slow=st.slow)
            log.error("walk_hung path=%s call=%s timeout=%gs", path, what, timeout)
        raise WalkHung(
            f"{what} in {path} did not answer within {timeout:g} s (hung share?)",
            stuck,
            None if self.stopping.is_set() else agent,
        )

    def slow_folder(self, folder: Path) -> bool:
        """Whether ``folder``, a folder the file watch covers or leaves out (the vault, the
        agents folder, an agent's folder in it), holds a root learnt slow: its share answers,
        later than watch.probeTimeoutSeconds (the watch says so, not "hangs", and walks the vault
        so on a thread of its own). Never the agents folder itself: no root has it as its path."""
        with self._lock:
            held = list(self.roots.values())
        # (an inbox's agent folder is what the agents folder's watch leaves out for it)
        return any(
            st.slow
            and (
                folder == Path(st.path) or (st.name.startswith("memory/") and folder == Path(st.path).parent)
            )
            for st in held
        )

    def _walked_roots(self, path: Path, rel: str) -> list[RootStatus]:
        """The roots a call of the watch's walk of ``path`` (``rel`` in it) lies in."""
        vault = self.cfg.vault.path
        if vault is not None and path == vault:
            return [self.status(Root("vault", vault, exclude=self.cfg.vault.wiki_subfolder))]
        agent = rel.split("/", 1)[0] if rel not in (".", "") else None
        return [st for st in self._inboxes_in(path) if agent is None or Path(st.path).parent.name == agent]

    def _inboxes_in(self, agents: Path) -> list[RootStatus]:
        """The inboxes known (``<agents>/<agent>/memory``) of the agents folder ``agents``."""
        with self._lock:
            return [st for st in self.roots.values() if Path(st.path).parent.parent == agents]
