"""Text that matches nothing: does `search` keep it below the relevance floor?

    python bench/nothing.py search --work W/help-e5 [--model minilm] [--file bench/madeup-phrases.txt]
    python bench/nothing.py pieces [--model minilm] [--random 540]

``search`` starts a daemon on a kept ``eval.py --work`` folder (its ``vault`` and ``home``, the
default settings otherwise) and sends each phrase with ``minScore`` 0: how many phrases keep a best
hit at or above 0.1 / 0.15 / 0.2 / 0.25 of relevance, and which. Phrases come from ``--file`` (one
per line) and/or ``--random N`` made-up phrases of one to four words of random syllables (seeded,
so every run sends the same ones).

``pieces`` reads no index: the share the search's "unread" rule (``querywords.unread_words``, the
model's own tokenizer) judges unread among the questions of the labeled sets in ``bench/`` (CJK
excluded), their content words one at a time and two at a time, the off-topic messages, and
``--random N`` made-up phrases of random letters and of random syllables.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from common import ROOT, bench_daemon

BENCH = ROOT / "bench"
_CONSONANTS, _VOWELS = "bcdfghjklmnpqrstvwxz", "aeiouy"


def syllable_word(rng: random.Random) -> str:
    word = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(2, 4)))
    return word + rng.choice(["", rng.choice(_CONSONANTS)])


def made_up(n: int, seed: int = 7) -> list[str]:
    """``n`` phrases of one to four words of random syllables."""
    rng = random.Random(seed)
    return [" ".join(syllable_word(rng) for _ in range(rng.randint(1, 4))) for _ in range(n)]


def letters(n: int, seed: int = 3) -> list[str]:
    """``n`` single strings of four to nine random letters."""
    rng = random.Random(seed)
    abc = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(abc) for _ in range(rng.randint(4, 9))) for _ in range(n)]


def config_for(model: str) -> dict[str, object]:
    return {"embedder": {"model": "all-MiniLM-L6-v2"}} if model == "minilm" else {}


def cmd_search(args: argparse.Namespace) -> dict[str, object]:
    phrases = (
        [line.strip() for line in args.file.read_text().splitlines() if line.strip()] if args.file else []
    )
    phrases += made_up(args.random)
    config = args.work / "nothing.yaml"
    config.write_text(json.dumps(config_for(args.model)))
    d = bench_daemon(args.work / "vault", args.work / "home", args=["--config", str(config)])
    tops: list[tuple[float, str, str]] = []
    try:
        d.wait_ready(timeout=3600, poll=1)
        for text in phrases:
            hits = d.call("search", {"query": text, "limit": 1, "minScore": 0})["hits"]
            top = hits[0] if hits else None
            tops.append((top["relevance"] if top else 0.0, text, top["reference"] if top else ""))
    finally:
        d.stop()
    floors = (0.1, 0.15, 0.2, 0.25)
    return {
        "work": str(args.work),
        "model": args.model,
        "phrases": len(phrases),
        "above": {str(f): sum(t >= f for t, _, _ in tops) for f in floors},
        "kept_a_hit": sorted(([round(t, 4), text, ref] for t, text, ref in tops if t >= 0.1), reverse=True),
    }


def cmd_pieces(args: argparse.Namespace) -> dict[str, object]:
    from sidecar.config import load_config
    from sidecar.model.embedder import load_model
    from sidecar.search.query import analyze
    from sidecar.search.querywords import unread_words

    env = {"SIDECAR_EMBEDDER_MODEL": "all-MiniLM-L6-v2"} if args.model == "minilm" else {}
    model = load_model(load_config(flags={"home": str(args.home)}, env=env))

    def unread(text: str) -> bool | None:
        words = list(dict.fromkeys(analyze(text).content_words))
        return unread_words(words, model.count_tokens(words)) if words else None

    questions = [
        json.loads(line)["q"]
        for f in sorted(BENCH.glob("questions-*.jsonl"))
        if "cjk" not in f.name
        for line in f.read_text().splitlines()
        if line.strip()
    ]
    words = sorted({w for q in questions for w in analyze(q).content_words})
    rng = random.Random(5)
    offtopic = [m for f in ("offtopic.txt", "offtopic-de.txt") for m in (BENCH / f).read_text().splitlines()]
    groups = {
        "questions": questions,
        "their content words, one at a time": words,
        "two of their content words": [" ".join(rng.sample(words, 2)) for _ in range(500)],
        "off-topic messages": offtopic,
        "random letters": letters(args.random),
        "random syllables": made_up(args.random, seed=11),
    }
    out: dict[str, object] = {"model": model.model_id}
    for name, texts in groups.items():
        verdicts = [v for v in map(unread, texts) if v is not None]
        out[name] = {"n": len(verdicts), "unread": round(sum(verdicts) / max(1, len(verdicts)), 3)}
    if args.show:
        out["unread words"] = [w for w in words if unread(w)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("search")
    p.add_argument("--work", type=Path, required=True, help="a kept eval.py --work folder")
    p.add_argument("--file", type=Path, help="phrases, one per line")
    p.add_argument("--random", type=int, default=40, help="made-up phrases of random syllables")
    p.add_argument("--model", choices=("e5", "minilm"), default="e5")
    p = sub.add_parser("pieces")
    p.add_argument("--random", type=int, default=540)
    p.add_argument("--model", choices=("e5", "minilm"), default="e5")
    p.add_argument(
        "--home", type=Path, default=Path("/nonexistent-home"), help="where converted models are kept"
    )
    p.add_argument("--show", action="store_true", help="list the questions' words judged unread")
    args = ap.parse_args()
    result = cmd_search(args) if args.cmd == "search" else cmd_pieces(args)
    print(json.dumps(result, ensure_ascii=False, indent=1))


if __name__ == "__main__":
    main()
