"""The keyword benchmarks' vault (``kwcompact``, ``kwfillmem``): the eval corpora's Obsidian help
vault or a given one, or its first N notes copied, swept keyword-only into a home. The sidecar
modules are imported when a sweep is asked for: a process that only fills an index (``kwfillmem``'s
measured one) loads nothing of it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

HELP_VAULT = Path(__file__).resolve().parents[2] / "shared" / "eval" / "vaults" / "obsidian-help"


def first_notes(vault: Path, notes: int, into: Path) -> Path:
    """``vault`` itself, or with ``notes`` a copy of its first ``notes`` notes (path order) at
    ``into`` (nothing is written to the vault)."""
    vault = vault.resolve()
    if not notes:
        return vault
    for path in sorted(vault.rglob("*.md"))[:notes]:
        target = into / path.relative_to(vault)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return into


def keyword_sweep(home: Path, vault: Path) -> Any:
    """The daemon's parts over ``home`` and ``vault``, swept with no model (keyword only); the
    sweep's seconds printed."""
    from sidecar.config import load_config
    from sidecar.daemon.compose import build
    from sidecar.model.embedder import EmbedderSlot

    cfg = load_config(flags={"home": str(home), "vault.path": str(vault)}, env={})
    parts = build(cfg, EmbedderSlot())
    started = time.perf_counter()
    parts.indexer.sweep()
    print(f"swept {time.perf_counter() - started:.1f} s", flush=True)
    return parts
