"""Index size on disk: the manifest per table and index (SQLite's dbstat) and the other stores'
folders, after a keyword-only index of a vault built from the shared corpora.

    python bench/indexsize.py [--copies 4] [--code OLD] [--keep DIR] [--out bench/out/indexsize.json]
    python bench/indexsize.py --manifest PATH [PATH ...]   # only break down existing manifests

The vault: tldr-pages-de and rustbook-de each copied ``--copies`` times (``tldr-<n>/``,
``rust-<n>/``) and the whole Obsidian help vault (every language) once: 10,433 notes, 68 MB with
4 copies. It is indexed by ``sidecar index`` with the embedder off (no model, no vector) in a fresh
home whose user folders (HOME, XDG_*) lie in a temporary folder, by the code of this checkout or of
``--code`` (a checkout of another version: old against new); the wall time of that command is
printed too (one run: compare versions with repeated paired runs). The manifest is also measured
compacted (a VACUUM of a copy): what it holds with every page full.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import clean_env, emit

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT.parent / "shared" / "eval" / "vaults"


def build_vault(target: Path, copies: int) -> int:
    """The measured vault at ``target``; its note count."""
    for n in range(1, copies + 1):
        shutil.copytree(EVAL / "tldr-pages-de", target / f"tldr-{n}")
        shutil.copytree(EVAL / "rustbook-de", target / f"rust-{n}")
    shutil.copytree(EVAL / "obsidian-help", target / "help")
    return sum(1 for _ in target.rglob("*.md"))


def breakdown(manifest: Path) -> dict[str, Any]:
    """MB per table and index of ``manifest`` (those of 0.1 MB and more), its file size, and the
    same compacted; a few column totals that say where the chunk table's bytes are."""
    db = sqlite3.connect(f"file:{manifest}?mode=ro", uri=True)
    parts = db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
    columns = [r[1] for r in db.execute("PRAGMA table_info(chunks)")]
    sums = ", ".join(
        f"SUM(length(CAST({c} AS BLOB)))" for c in ("text", "embed_text", "headings", "key") if c in columns
    )
    counts = db.execute(f"SELECT count(*), {sums} FROM chunks").fetchone()
    db.close()
    with tempfile.TemporaryDirectory(prefix="sidecar-size-") as tmp:
        copy = Path(tmp) / "m.sqlite"
        shutil.copyfile(manifest, copy)
        vac = sqlite3.connect(copy)
        vac.execute("VACUUM")
        vac.close()
        compacted = copy.stat().st_size
    return {
        "file_mb": round(manifest.stat().st_size / 1e6, 1),
        "compacted_mb": round(compacted / 1e6, 1),
        "by_table_mb": {name: round(size / 1e6, 1) for name, size in parts if size >= 100_000},
        "chunks": counts[0],
        "chunk_column_mb": {
            c: round((v or 0) / 1e6, 1)
            for c, v in zip(("text", "embed_text", "headings", "key"), counts[1:], strict=False)
        },
    }


def folder_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6, 1)


def index_vault(code: Path, vault: Path, home: Path, users: Path) -> tuple[float, str]:
    """``sidecar index`` of ``code`` over ``vault`` into ``home``, keyword-only; (seconds, its summary)."""
    for name in ("home", "state", "config", "run"):
        (users / name).mkdir(parents=True, exist_ok=True)
    config = users / "kw.yaml"
    config.write_text("embedder:\n  enabled: false\n")
    env = clean_env(
        {
            "HOME": str(users / "home"),
            "XDG_STATE_HOME": str(users / "state"),
            "XDG_CONFIG_HOME": str(users / "config"),
            "XDG_RUNTIME_DIR": str(users / "run"),
        }
    )
    cmd = [sys.executable, "-m", "sidecar", "index", "--vault", str(vault), "--home", str(home)]
    started = time.monotonic()
    done = subprocess.run(
        [*cmd, "--config", str(config)], cwd=code, env=env, capture_output=True, text=True, check=True
    )
    said = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("indexed ")]
    return time.monotonic() - started, said[-1] if said else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--code", type=Path, default=ROOT, help="checkout whose sidecar indexes")
    ap.add_argument("--keep", type=Path, help="build vault and home here and keep them")
    ap.add_argument("--manifest", type=Path, nargs="+", help="only break down these manifests")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.manifest:
        emit({str(m): breakdown(m) for m in args.manifest}, args.out)
        return
    work = args.keep or Path(tempfile.mkdtemp(prefix="sidecar-size-"))
    try:
        vault = work / "vault"
        notes = build_vault(vault, args.copies) if not vault.exists() else sum(1 for _ in vault.rglob("*.md"))
        home = work / "home"
        shutil.rmtree(home, ignore_errors=True)
        seconds, said = index_vault(args.code.resolve(), vault, home, work / "users")
        index = home / "index"
        result: dict[str, Any] = {
            "code": str(args.code),
            "notes": notes,
            "vault_mb": folder_mb(vault),
            "index_seconds": round(seconds, 1),
            "said": said,
            "manifest": breakdown(index / "manifest.sqlite"),
            "folders_mb": {p.name: folder_mb(p) for p in sorted(index.iterdir()) if p.is_dir()},
        }
        emit(result, args.out)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
