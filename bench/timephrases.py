"""What reading a query's time phrases and inline filters costs (``split_filters``), and which
phrase it reads, on this checkout or another one (``--code DIR``, a ``git archive`` export), so
that two versions can be compared on the same machine load.

    python bench/timephrases.py                          # this checkout, the labeled questions
    python bench/timephrases.py --code /tmp/main-code    # another version, the same questions
    python bench/timephrases.py --sentences VAULT --choices /tmp/out.tsv
    python bench/timephrases.py --long                   # long messages of look-alikes

The queries: every question of ``bench/questions-*.jsonl`` (579), each with ten time phrases
appended in turn ("… last week", "… am 3. März", …) and alone, about 6,400 texts. Each text is
read ``--rounds`` times (interleaved, so that a slow stretch of the machine touches all); the
figure is the median of the rounds' mean µs per text. ``--sentences`` reads every sentence of the
Markdown notes under a folder instead (no timing) and writes the phrase each one yields to
``--choices`` (text, phrase, since, until): ``diff`` two such files to see where two versions read
a sentence differently. ``--long`` reads a few messages as long as the daemon takes (4,000
characters, ``MAX_QUERY_CHARS``), each a sentence that looks like a time phrase said again and again
and a real one at its end (a pasted text, an agent's context), and prints for each the seconds it
took (the fastest of ``--rounds``, at most 3) and the phrase read: a reading that looks at the text
before each look-alike costs by the square of its length, a bound on the look-alikes tried misses
the phrase at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TODAY = dt.date(2026, 12, 2)  # a Wednesday, as the tests' fixed day
SUFFIXES = (
    "",
    " last week",
    " gestern",
    " im November",
    " am 3. März",
    " seit letztem Monat",
    " in the last 3 days",
    " vor zwei Wochen",
    " was steht am 3. März an?",
    " in November last year",
    " diese Woche",
)


def questions() -> list[str]:
    texts = []
    for path in sorted(HERE.glob("questions-*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                texts.append(json.loads(line)["q"])
    return [q + s for q in texts for s in SUFFIXES]


# (a sentence that looks like a phrase, the question at the end)
LONG = (
    ("Stromrechnung von März bis Mai 2025. ", "Was habe ich von Juni bis Juli 2025 gemacht?"),
    ("Stromrechnung März bis Mai ", "Was habe ich von Juni bis Juli 2025 gemacht?"),
    ("Before last March I was sad. ", "What did I do last March?"),
    ("Ich bin seit gestern krank. ", "Was habe ich seit gestern notiert?"),
    ("Notizen aus März ", "Was habe ich gestern notiert?"),
    ("Wärmepumpe vor einem Jahr. ", "Was war vor einem Jahr?"),
    ("Meeting am Wochenende, ", "was habe ich letzte Woche gemacht?"),
)
LONG_CHARS = 4000  # MAX_QUERY_CHARS: the longest query, recall message or why the daemon takes


def long_messages(split_filters: Callable[..., Any], rounds: int) -> list[dict[str, object]]:
    rows = []
    for unit, question in LONG:
        text = ((unit * (LONG_CHARS // len(unit))).rstrip(" ,.") + ". " + question)[-LONG_CHARS:]
        best, phrase = float("inf"), None
        for _ in range(min(rounds, 3)):
            start = time.perf_counter()
            phrase = split_filters(text, TODAY)[1].phrase
            best = min(best, time.perf_counter() - start)
        rows.append({"unit": unit, "chars": len(text), "seconds": round(best, 3), "phrase": phrase})
    return rows


def sentences(folder: Path) -> list[str]:
    out = []
    for note in sorted(folder.rglob("*.md")):
        text = note.read_text(encoding="utf-8", errors="replace")
        out.extend(s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", type=Path, help="the sidecar checkout to measure (default: this one)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sentences", type=Path, help="read the sentences of the notes under this folder")
    ap.add_argument("--choices", type=Path, help="with --sentences: write each sentence's phrase here")
    ap.add_argument("--long", action="store_true", help="time long messages of look-alikes instead")
    args = ap.parse_args()
    sys.path.insert(0, str((args.code or HERE.parent).resolve()))
    # query.py imports FilterError in every version (it moved to days.py): older exports run too
    from sidecar.search.query import FilterError, split_filters

    if args.long:
        for row in long_messages(split_filters, args.rounds):
            print(json.dumps(row, ensure_ascii=False))
        return
    if args.sentences:
        rows = []
        for s in sentences(args.sentences):
            try:
                f = split_filters(s, TODAY)[1]
            except FilterError:
                continue
            if f.phrase:
                rows.append("\t".join((" ".join(s.split()), f.phrase, f.since or "", f.until or "")))
        if args.choices:
            args.choices.write_text("\n".join(rows) + "\n", encoding="utf-8")
        print(json.dumps({"sentences_with_a_phrase": len(rows)}))
        return
    texts = questions()
    for t in texts[:50]:  # warm the regular expressions' caches
        split_filters(t, TODAY)
    means = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for t in texts:
            with contextlib.suppress(FilterError):
                split_filters(t, TODAY)
        means.append((time.perf_counter() - start) / len(texts) * 1e6)
    print(
        json.dumps(
            {
                "code": str(args.code or HERE.parent),
                "texts": len(texts),
                "rounds": args.rounds,
                "us_per_text_median": round(statistics.median(means), 1),
                "us_per_text_rounds": [round(m, 1) for m in means],
            }
        )
    )


if __name__ == "__main__":
    main()
