"""English questions for German pages: writes ``bench/questions-en-de.jsonl`` from the help sets'
English questions, each expected page replaced by its German counterpart, for the German
corpus's index (tldr-pages-de, rustbook-de and the help vault's ``de/``, where a help page reads
``vault/help/de/...``). The help sets run on an index of both languages, so an English asker with
a German vault is measured only here.

The help vault's ``en/`` and ``de/`` pages correspond by the ``permalink`` of their front matter
(the same for a page and its translations). A question is taken when it is English (its ``lang``,
or, for a question without one, the language its words show, else its first expected page's
folder) and has no ``context`` (follow-ups are left out: their earlier turns are English too). A
question whose expected pages have no German counterpart is dropped; one asked in more than one
file is written once. Run again after the help sets or the vault change:

    python bench/endequestions.py            # writes bench/questions-en-de.jsonl
    python bench/endequestions.py --check    # fails when the file differs from what it would write
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.eval import permalink  # noqa: E402
from sidecar.search.query import analyze  # noqa: E402

HELP = ROOT.parent / "shared" / "eval" / "vaults" / "obsidian-help"
SOURCES = ["questions-help", "questions-help2", "questions-blind-help", "questions-blind-short-help"]
OUT = ROOT / "bench" / "questions-en-de.jsonl"


def german_pages(vault: Path) -> dict[str, str]:
    """permalink -> the German page's reference in the German corpus (``vault/help/de/...``)."""
    pages = {}
    for note in sorted((vault / "de").rglob("*.md")):
        link = permalink(note)
        if link:
            pages[link] = "vault/help/" + note.relative_to(vault).with_suffix("").as_posix()
    return pages


def is_english(row: dict[str, Any]) -> bool:
    if "lang" in row:
        return bool(row["lang"] == "en")
    found = analyze(row["q"]).language
    if found:
        return found == "en"
    return bool(row["expected"]) and str(row["expected"][0]).startswith("vault/en/")


def rows(vault: Path) -> tuple[list[dict[str, Any]], int]:
    german = german_pages(vault)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    dropped = 0
    for name in SOURCES:
        for line in (ROOT / "bench" / f"{name}.jsonl").read_text().splitlines():
            row = json.loads(line)
            if row.get("context") or not is_english(row) or row["q"] in seen:
                continue
            expected: list[str] = []
            for ref in row["expected"]:
                link = permalink(vault / f"{ref.removeprefix('vault/')}.md")
                page = german.get(link) if link else None
                if page and page not in expected:
                    expected.append(page)
            if not expected:
                dropped += 1
                continue
            seen.add(row["q"])
            kept = {"q": row["q"], "expected": expected, "lang": "en", "source": "help", "from": name}
            if "kind" in row:
                kept["kind"] = row["kind"]
            out.append(kept)
    return out, dropped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vault", type=Path, default=HELP, help="the help vault (its en/ and de/ folders)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing it")
    args = ap.parse_args()
    found, dropped = rows(args.vault)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in found)
    print(f"{len(found)} questions, {dropped} without a German page", file=sys.stderr)
    if args.check:
        if args.out.read_text() != text:
            sys.exit(f"{args.out} differs from what {Path(__file__).name} writes")
        return
    args.out.write_text(text)


if __name__ == "__main__":
    main()
