"""A hot note: a plugin's log note (1.35 MB) appended to every second while another note is edited
every 10 s, old code against new (one after the other, each over its own copy of the vault).

    python bench/hotnote.py --old-code DIR [--seconds 60] [--log-bytes N] [--model [--cache-dir DIR]]
        [--out FILE]

Measures, per side, over the writing window: the daemon's CPU (utime + stime from /proc), how
long each edit of the other note took to be found by search (its new word, polled through the
socket), how long the log's last line took to be found after the writing stopped, and the INFO
lines the daemon logged (per hour). Keyword-only by default (the indexing cost alone);
``--model`` runs the default model (the first start embeds the whole log note: minutes).
``--old-code`` is a checkout of the code to compare with (a ``git worktree`` of an older commit).
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, code_daemon, cpu_seconds, emit, pct

from sidecar.clients.client import Client

WORDS = [
    "sync",
    "upload",
    "download",
    "remote",
    "local",
    "vault",
    "conflict",
    "merged",
    "skipped",
    "renamed",
    "folder",
    "attachment",
]
HEADING_EVERY = 300  # log lines per "## hour" heading


def log_line(rng: random.Random, i: int) -> str:
    return (
        f"- 2024-05-01 {i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d} [INFO] "
        + " ".join(rng.choice(WORDS) for _ in range(8))
        + f" file{rng.randrange(10_000)}.md"
    )


def make_vault(vault: Path, log_bytes: int) -> None:
    """The log note, about 50 ordinary notes, and the note the bench edits."""
    rng = random.Random(1)
    lines = ["# Sync log", ""]
    size, i = 0, 0
    while size < log_bytes:
        if i % HEADING_EVERY == 0:
            lines += ["", f"## Hour {i // HEADING_EVERY}", ""]
        lines.append(log_line(rng, i))
        size += len(lines[-1]) + 1
        i += 1
    (vault / "Sync log.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for n in range(50):
        body = "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(60)) for _ in range(4))
        (vault / f"Notes/note-{n:02d}.md").parent.mkdir(exist_ok=True)
        (vault / f"Notes/note-{n:02d}.md").write_text(f"# Note {n}\n\n{body}\n", encoding="utf-8")
    (vault / "Other.md").write_text("# Other\n\nA note edited now and then.\n", encoding="utf-8")


def found(client: Client, word: str, reference: str) -> bool:
    """Whether the word is indexed: a hit of the note holding it (a hit by meaning alone finds
    the note's old text, as like the new one as one log line is like the next)."""
    hits = client.call("search", {"query": word, "limit": 5})["hits"]
    return any(h["reference"] == reference and word in h["text"] for h in hits)


def info_lines(log: Path, start: int) -> int:
    with log.open("rb") as fh:
        fh.seek(start)
        return sum(1 for line in fh.read().splitlines() if b" INFO " in line)


def run_side(name: str, code: Path, base: Path, template: Path, args: argparse.Namespace) -> dict[str, Any]:
    vault = base / f"vault-{name}"
    shutil.copytree(template, vault)
    home = base / name
    home.mkdir()
    config = base / f"{name}.yaml"
    cache = f"embedder: {{cacheDir: {args.cache_dir}}}\n" if args.cache_dir else ""
    config.write_text(cache if args.model else "embedder: {enabled: false}\n")
    d = code_daemon(home, vault, code, config)
    try:
        d.wait_ready(timeout=3600, poll=0.5)
        time.sleep(2)  # the first sweep's own writes settle
        rng = random.Random(2)
        log, other = vault / "Sync log.md", vault / "Other.md"
        latencies: list[float] = []
        with Client(d.cfg.socket_path) as client:
            start_log, start_cpu, t0 = d.log.stat().st_size, cpu_seconds(d.pid), time.monotonic()
            tick = 0
            pending: tuple[str, float] | None = None  # the other note's new word, and when it was saved
            while time.monotonic() - t0 < args.seconds:
                if time.monotonic() >= t0 + tick:  # a line a second, an edit every 10 s
                    with log.open("a", encoding="utf-8") as fh:
                        fh.write(log_line(rng, 100_000 + tick) + f" tick{tick}x\n")
                    if tick % 10 == 5:
                        if pending is not None:  # not found before the next edit: counted as late as that
                            latencies.append(time.monotonic() - pending[1])
                        word = f"marker{tick}q"
                        other.write_text(f"# Other\n\nEdited: {word} in round {tick}.\n", encoding="utf-8")
                        pending = (word, time.monotonic())
                    tick += 1
                if pending is not None and found(client, pending[0], "vault/Other"):
                    latencies.append(time.monotonic() - pending[1])
                    pending = None
                time.sleep(0.05)
            cpu = cpu_seconds(d.pid) - start_cpu
            window = time.monotonic() - t0
            infos = info_lines(d.log, start_log)
            stopped = time.monotonic()
            last = f"tick{tick - 1}x"
            while not found(client, last, "vault/Sync log") and time.monotonic() - stopped < 120:
                time.sleep(0.1)
            final = time.monotonic() - stopped
    finally:
        d.stop()
    return {
        "cpu_percent": round(100 * cpu / window, 1),
        "other_note_latency_s": {
            "p50": pct(latencies, 0.5),
            "max": round(max(latencies), 1),
            "all": [round(x, 2) for x in latencies],
        },
        "last_append_found_after_s": round(final, 1),
        "info_lines": infos,
        "info_lines_per_hour": round(infos * 3600 / window),
        "appends": tick,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old-code", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--log-bytes", type=int, default=1_350_000, help="the log note's size at the start")
    ap.add_argument("--model", action="store_true", help="the default model (else keyword-only)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="converted models, kept between runs")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        template = base / "template"
        template.mkdir()
        make_vault(template, args.log_bytes)
        result: dict[str, Any] = {"model": args.model, "seconds": args.seconds, "log_bytes": args.log_bytes}
        for name, code in (("old", args.old_code.resolve()), ("new", ROOT)):
            result[name] = run_side(name, code, base, template, args)
    emit(result, args.out)


if __name__ == "__main__":
    main()
