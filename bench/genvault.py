"""A synthetic vault for scale tests: N small notes in nested folders (one in five German, front
matter, a link and a unique token each), a wiki/ subfolder and four notes of 1-4 MB.

    python bench/genvault.py DIR N [SEED]
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

EN = [
    "the",
    "backup",
    "server",
    "network",
    "garden",
    "recipe",
    "meeting",
    "project",
    "invoice",
    "travel",
    "photo",
    "camera",
    "battery",
    "kernel",
    "python",
    "sqlite",
    "docker",
    "router",
    "printer",
    "budget",
    "lecture",
    "microphone",
    "bicycle",
]
DE = [
    "Kündigung",
    "Wohnung",
    "Versicherung",
    "Steuererklärung",
    "Garten",
    "Gemüse",
    "Fahrrad",
    "Rechnung",
    "Urlaub",
    "Besprechung",
    "Heizung",
    "Straße",
    "Müll",
    "Grüße",
    "Übersicht",
    "Bürgeramt",
    "Führerschein",
    "Zahnarzt",
]


def main() -> None:
    root, n = Path(sys.argv[1]), int(sys.argv[2])
    rnd = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 1)

    def para(words: list[str], k: int) -> str:
        return " ".join(rnd.choice(words) for _ in range(k))

    for i in range(n):
        top = "wiki" if i % 20 == 0 else f"Area{i % 12:02d}"
        folder = root / top / f"Sub{(i // 12) % 25:02d}" / f"Deep{(i // 300) % 8}"
        folder.mkdir(parents=True, exist_ok=True)
        german = i % 5 == 0
        words = DE if german else EN
        title = f"{'Notiz' if german else 'Note'} {i:05d}"
        body = [
            f"---\ntags: [t{i % 37}, {'de' if german else 'en'}]\n---",
            f"# {title}",
            "",
            para(words, 40),
            "",
            f"## {'Abschnitt' if german else 'Section'}",
            para(words, 60),
            f"uniqtok{i:05d}x",
            f"See [[Note {(i * 7) % n:05d}]]",
        ]
        (folder / f"{title}.md").write_text("\n".join(body) + "\n")
    big = root / "Big"
    big.mkdir(parents=True, exist_ok=True)
    for j, mb in enumerate([1, 2, 3, 4]):
        with (big / f"Big {j}.md").open("w") as f:
            f.write(f"# Big {j}\n\nbigmarker{j}\n\n")
            target = mb * 1024 * 1024 - 200_000  # below index.maxFileBytes (5,000,000) for 4 MB
            k = 0
            while f.tell() < target:
                f.write(f"## Part {k}\n" + para(EN + DE, 120) + "\n\n")
                k += 1
    print("done", n)


if __name__ == "__main__":
    main()
