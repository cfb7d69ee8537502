"""Whether a rebuild may run now, a mixin of ``Indexer`` (``indexer``): a rebuild forgets every
note and reads them again, so it is refused while a root with notes indexed cannot be read (a
share away, the vault missing or unmounted, folders unreadable), an agent's inbox with notes
indexed is refused, or a mass deletion is held; the refusal says why and what to do. Its own
module because it only asks and words, changing nothing; the state it works on is the
``Indexer``'s own.
"""

from __future__ import annotations

import json
from collections.abc import Collection

from sidecar.config import Config
from sidecar.contracts.errors import StorageError, UnreadableError
from sidecar.contracts.printable import few_names
from sidecar.index.diff import ChangeFinder
from sidecar.index.refused import rebuild_said
from sidecar.stores.manifest import Manifest
from sidecar.vault.sources import (
    inbox_refusal,
    inbox_root,
    vault_roots,
)
from sidecar.vault.supervisor import Supervisor
from sidecar.vault.timeout import NoAnswer


class RebuildRefusal:
    """The rebuild's refusals of an ``Indexer`` (which sets the state below)."""

    cfg: Config
    manifest: Manifest
    supervisor: Supervisor
    changes: ChangeFinder

    def _vault_away(self) -> bool:
        """The vault's folder is missing, empty, not the mount it was on, or does not answer
        within the probe timeout. One probe at a time (``Supervisor.probes``): a caller beside one
        under way reads its answer; one that times out marks the vault hanging, and while it
        hangs the vault is away at once, with no other thread left behind."""
        try:
            return self.supervisor.ask_vault_not_there()
        except (NoAnswer, OSError):
            return True

    def unreachable_roots(self) -> dict[str, str]:
        """Roots with notes indexed that a sweep cannot read now, with why (an offline root with
        none has nothing a rebuild could lose): those offline (a mass deletion held is not:
        its folder is there) and the vault when its folder is missing, empty or not the mount it
        was on (a share unmounted since the last sweep), asked with the probe timeout."""
        out = {
            st.name: st.error or "offline"
            for st in list(self.supervisor.roots.values())
            if st.offline and st.hold_kind != "mass" and self.manifest.has_notes(f"{st.name}/")
        }
        if self.cfg.vault.path is not None and "vault" not in out and self.manifest.has_notes("vault/"):
            vault = self.supervisor.roots.get("vault")
            # A call on the vault still hanging: not asked again (one more stuck thread each time).
            if (vault is not None and vault.hanging is not None) or self._vault_away():
                out["vault"] = f"{self.cfg.vault.path} is missing, empty, unmounted or does not answer"
        return out

    def refuse_rebuild(self, confirmed: Collection[str] = (), *, recorded: bool = False) -> None:
        """Raise UnreadableError when a root that has notes indexed cannot be read now, or a
        folder (or note) with notes indexed is recorded unreadable (no permission, an I/O error):
        a rebuild forgets every note first and reads them again, so it emptied an unmounted vault
        (and its wiki) from the index for the whole outage, and dropped the notes of a folder of
        mode 000 while status said they stay, where a sweep keeps them as indexed. ``recorded``:
        the notes kept unreadable are taken as the last sweep recorded them, none opened (the
        check after each whole sweep of a refusal at the rebuild's turn)."""
        short = self.manifest.aside_room()
        if short is not None:  # nothing changed: a request's error (exit 7), no broken index
            raise StorageError(short)
        gone = self.unreachable_roots()
        folders = self.changes.unreadable_indexed(gone, reopen=not recorded)
        refused = self.refused_inboxes()
        if not gone and not folders and not refused:
            self.refuse_held(confirmed)
            return
        what: list[str] = []
        then: list[str] = []
        if gone:
            said = "; ".join(f"{name}: {why}" for name, why in sorted(gone.items()))
            what.append(f"{', '.join(sorted(gone))} cannot be read now ({said})")
            then.append("mount the share (`sidecar status` shows when it is back)")
        if folders:
            named = few_names(folders)
            what.append(
                f"{named} cannot be read now (unreadable, with notes indexed: no permission or an I/O error)"
            )
            then.append(
                "make them readable to the user sidecar runs as (e.g. `chmod u+r` a note, `chmod u+rx` "
                "a folder; `sidecar status` shows while they are not)"
            )
        if refused:
            inboxes, told = rebuild_said(self.cfg.agents_dir, refused)
            what += inboxes
            then += told
        then[0] = then[0][:1].upper() + then[0][1:]
        kept = " and keeps those notes as indexed" if gone or folders else ""
        message = (
            f"not rebuilt: {'; '.join(what)}. A rebuild reads every note again, and notes that cannot "
            "be read would be gone from the index until they can. Nothing was changed. "
            f"{' and '.join(then)} and run `sidecar index --rebuild` again; `sidecar index` updates "
            f"the rest now{kept}."
        )
        if refused:
            # No sweep reads a refused inbox: its notes leave the index with the next one anyway.
            message += (
                " A refused inbox is neither read nor served: `sidecar index` removes its notes from "
                "the index (read again once it is your folder again), and the rebuild runs after that."
            )
        if folders:
            # The way past the refusal when those notes are to leave the index.
            message += (
                " To rebuild without them, move them out of the vault (or delete them) and run "
                "`sidecar index` first: their notes leave the index, and the rebuild runs."
            )
        if gone:
            message = (
                message[:-1]
                + ". If you emptied it on purpose, "
                + " and ".join(f"`sidecar index --confirm-deletions {name}`" for name in sorted(gone))
                + " removes its notes from the index; a rebuild runs after that"
            )
        raise UnreadableError(message)

    def refused_inboxes(self) -> dict[str, str]:
        """Agents with notes indexed whose inbox is refused now (a symbolic link, not a folder,
        another user's), with why: a rebuild would drop their notes, not read back (a sweep drops
        them too, its skipped files say why). None while the home is held (its inboxes are offline)."""
        if self.supervisor.home.problem() is not None:
            return {}
        found = {a: inbox_refusal(inbox_root(self.cfg, a)) for a in self.manifest.memory_agents()}
        return {agent: why for agent, why in found.items() if why is not None}

    def refuse_held(self, confirmed: Collection[str]) -> None:
        """Raise UnreadableError while a root's mass deletion is held (unless the same request
        confirms it): the rebuild forgets every note and puts back only those it could not judge,
        so the notes the hold keeps (vanished at once, waiting for the clock or a confirmation)
        left the index unconfirmed. Asked at the request and again at the rebuild's turn (a sweep
        it waited behind may begin a hold)."""
        held = self._held_roots(confirmed)
        if not held:
            return
        said = ", ".join(f"{n} notes of {name}" if n else f"the notes of {name}" for name, n in held)
        raise UnreadableError(
            f"not rebuilt: the removal of {said} is held (they vanished at once). A rebuild "
            "would drop them without the confirmation the hold waits for. Nothing was changed. Bring "
            "them back, wait for the hold to end (`sidecar status` shows when), or confirm it with "
            + " and ".join(f"`sidecar index --confirm-deletions {name}`" for name, _ in held)
            + "; then run `sidecar index --rebuild` again"
            + (
                f" (`sidecar index --rebuild --confirm-deletions {held[0][0]}` does both)."
                if len(held) == 1
                else "."
            )
        )

    def _held_roots(self, confirmed: Collection[str]) -> list[tuple[str, int | None]]:
        """The roots whose mass deletion is held, with how many notes (None: not known here). A
        root not judged by this process yet (a restart's first sweep to come, `sidecar index`
        without a daemon) by the hold saved with its state (was: the hold of a running daemon
        only, and a rebuild then dropped the held notes unconfirmed)."""
        roots = dict(self.supervisor.roots)
        configured = {r.name for r in vault_roots(self.cfg)}  # an agent's inbox is never held
        saved = {row[len("root:") :] for row in self.manifest.meta_names("root:")} & configured
        held: list[tuple[str, int | None]] = []
        for name in sorted((set(roots) | saved) - set(confirmed)):
            st = roots.get(name)
            if st is not None and st.last_sweep is not None:  # judged here: what it said holds
                if st.hold_kind == "mass" and st.held_deletions:
                    held.append((name, st.held_deletions))
            elif _saved_hold(self.manifest.get_meta(f"root:{name}")) == "mass":
                held.append((name, None))
        return held


def _saved_hold(raw: str | None) -> str | None:
    """The kind of hold a root's saved state names (``Supervisor``'s meta row), else None."""
    try:
        memo = json.loads(raw) if raw else {}
    except ValueError:
        return None
    hold = memo.get("hold") if isinstance(memo, dict) else None
    kind = hold.get("kind") if isinstance(hold, dict) else None
    return kind if isinstance(kind, str) else None
