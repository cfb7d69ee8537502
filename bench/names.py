"""Notes asked for by their name: a generated bilingual vault of people (German and English
notes), notes with aliases, notes titled with everyday words ("Birthday", "Ideen", "Meeting") and
filler; labeled cases run on a daemon of the code in ``--code`` (old against new):

- search: a query that is exactly a note's alias; the aliased note's place (MRR@10, first);
- recall: questions naming a person in the other language than the note ("When is Anna's
  birthday?" over a German note), in the note's own language, and questions naming an alias;
  right (the note among the hits) and wrong notes recalled beside it;
- asides: statements, bare names and questions without a question word that mention a name in
  passing, and questions about an everyday word that titles a note; injected (any hit) counts;
- namesakes: questions about a well-known person who shares a first name with a person of the
  notes ("Who is Tom Hanks?" beside "Tom Hardy"), and statements opening with a question word
  ("When Tom calls, ..."); injected (any hit) counts.

    python bench/names.py [--code DIR] [--out FILE]

Uses the default model (multilingual-e5-small); the first start of each run prepares it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from common import ROOT, code_daemon, emit

# (title, German?, first-name text of the note: city, birthday, relation)
PEOPLE = [
    ("Anna Berger", True, "Freiburg", "12. März", "meine Schwester"),
    ("Tom Hardy", False, "Leeds", "4 July", "my manager at work"),
    ("Jonas Keller", True, "Leipzig", "3. Juni", "mein Kollege im Vertrieb"),
    ("Emily Carter", False, "Boston", "21 October", "my cousin"),
    ("Lena Vogt", True, "Kassel", "9. Januar", "die Nachbarin von oben"),
    ("Oliver Grant", False, "Dublin", "30 May", "my old flatmate"),
    ("Mia Schneider", True, "Bremen", "17. August", "meine Patentante"),
    ("Noah Fischer", True, "Rostock", "2. Dezember", "der Trainer im Verein"),
    ("Grace Miller", False, "Toronto", "11 February", "my piano teacher"),
    ("Felix Brandt", True, "Erfurt", "25. April", "mein Schwager"),
]
# A well-known namesake of each person: a question about them is not about the note's person.
NAMESAKES = {
    "Anna": "Anna Netrebko",
    "Tom": "Tom Hanks",
    "Jonas": "Jonas Kaufmann",
    "Emily": "Emily Blunt",
    "Lena": "Lena Meyer-Landrut",
    "Oliver": "Oliver Twist",
    "Mia": "Mia Farrow",
    "Noah": "Noah Webster",
    "Grace": "Grace Kelly",
    "Felix": "Felix Mendelssohn",
}
# (path, aliases, body)
ALIASED = [
    (
        "Projekte/Gartenhaus",
        ["Schuppen", "Garden shed"],
        "Das Fundament ist gegossen, die Wände "
        "stehen. Als Nächstes kommt das Dach mit Dachpappe; die Tür fehlt noch.",
    ),
    ("Nur Frontmatter", ["Metadatenzettel"], ""),
    (
        "Projekte/Wintergarten",
        ["Orangerie"],
        "Glasdach bestellt, Lieferung in sechs Wochen; Heizung fehlt noch.",
    ),
    ("Technik/Heimnetz", ["Netzwerkschrank"], "Switch mit 16 Ports, Patchfeld beschriftet, USV für das NAS."),
    ("Projects/Boat", ["Sloop"], "The hull is sanded; next the antifouling paint and a new tiller."),
    ("Home/Attic", ["Dachboden"], "Insulation done on the east side; the west side still needs boards."),
]
EVERYDAY = {
    "Birthday": "Ideas for birthday presents: a book, concert tickets, a cooking class.",
    "Ideen": "Ein Blog über Gartenarbeit; eine App für Einkaufslisten.",
    "Meeting": "Meeting rules: an agenda beforehand, notes afterwards, never longer than an hour.",
    "Todo": "- Fahrrad reparieren\n- Steuer machen\n- Fenster putzen",
    "Geburtstage": "Liste der Geburtstage im Kalender pflegen; Karten rechtzeitig kaufen.",
}
FILLER = {
    "Zuhause/Übersicht": "Siehe [[Metadatenzettel]] und [[Gartenhaus]]. Der Keller ist aufgeräumt.",
    "Zuhause/Holz": "Im Schuppen liegt noch Brennholz für den Winter, etwa zwei Ster Buche.",
    "Rezepte/Linsensuppe": "Rote Linsen, Karotten, Zwiebeln, Kreuzkümmel. 25 Minuten kochen.",
    "Rezepte/Pancakes": "Flour, milk, eggs, a pinch of salt. Rest the batter for ten minutes.",
    "Arbeit/Backup": "Das NAS sichert jede Nacht um 2 Uhr mit restic auf die externe Platte.",
    "Arbeit/Onboarding": "New hires get a laptop, an account and a buddy for the first two weeks.",
    "Auto/Reifen": "Reifenwechsel im Oktober; die Winterreifen lagern in der Werkstatt.",
    "Auto/Versicherung": "Kfz-Versicherung läuft bis Dezember, Kündigungsfrist ein Monat.",
    "Reisen/Norwegen": "Packliste: Regenjacke, Wanderschuhe, Stirnlampe. Fähre ab Kiel.",
    "Reisen/Japan trip": "Tokyo for five days, then Kyoto. Rail pass ordered, hotels booked.",
    "Garten/Tomaten": "Die Tomaten brauchen jeden Tag Sonne und Wasser; ausgeizen nicht vergessen.",
    "Garten/Kompost": "Kompost alle drei Monate umsetzen; keine Zitrusschalen.",
    "Gesundheit/Zahnarzt": "Kontrolle alle sechs Monate, nächster Termin im Mai.",
    "Gesundheit/Running": "Training plan: three runs a week, long run on Sunday, 10k race in autumn.",
    "Finanzen/Steuer": "Steuererklärung bis Ende Juli abgeben; Belege im Ordner Finanzen.",
    "Finanzen/Budget": "Monthly budget: rent, groceries, savings plan of 300 euros.",
    "Technik/Router": "Die Fritzbox hat die Adresse 192.168.178.1; WLAN-Passwort im Passwortmanager.",
    "Technik/Laptop": "The laptop battery drains fast; replace it before the warranty ends.",
    "Bücher/Leseliste": "Der Zauberberg, Stoner, Middlemarch, Die Blechtrommel.",
    "Musik/Gitarre": "Neue Saiten aufziehen; Stimmgerät liegt im Koffer.",
    "Haustiere/Katze": "Die Katze bekommt zweimal am Tag Futter; Tierarzt im Juni impfen.",
}


def person_note(title: str, german: bool, city: str, day: str, who: str) -> str:
    first = title.split(maxsplit=1)[0]
    if german:
        return f"# {title}\n\n{first} ist {who}. Wohnt in {city}. Geburtstag: {day}.\n"
    return f"# {title}\n\n{first} is {who}. Lives in {city}. Birthday: {day}.\n"


def build(vault: Path) -> None:
    def put(rel: str, text: str) -> None:
        p = vault / f"{rel}.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    for title, german, city, day, who in PEOPLE:
        put(f"Personen/{title}", person_note(title, german, city, day, who))
    for path, aliases, body in ALIASED:
        title = path.rsplit("/", 1)[-1]
        front = f"---\naliases: [{', '.join(aliases)}]\n---\n"
        put(path, front + (f"# {title}\n\n{body}\n" if body else ""))
    for title, body in EVERYDAY.items():
        put(title, f"# {title}\n\n{body}\n")
    for path, body in FILLER.items():
        put(path, f"# {path.rsplit('/', 1)[-1]}\n\n{body}\n")


def cases() -> dict[str, list[tuple[str, str]]]:
    """(message, the note it asks for; "" for an aside) per group."""
    other, own, asides = [], [], []
    for title, german, *_ in PEOPLE:
        ref, first = f"vault/Personen/{title}", title.split()[0]
        en = [f"When is {first}'s birthday?", f"Where does {first} live?", f"Who is {first}?"]
        de = [f"Wann hat {first} Geburtstag?", f"Wo wohnt {first}?", f"Wer ist {first}?"]
        other += [(q, ref) for q in (en if german else de)]
        own += [(q, ref) for q in (de if german else en)]
        asides += [
            (first, ""),
            (f"{first}?", ""),
            (f"ich habe {first} gestern im Zug getroffen", ""),
            (f"I had lunch with {first} today", ""),
            (f"Hast du {first} gesehen?", ""),
            (f"{first} sends her regards, by the way", ""),
        ]
    namesakes = []
    for title, german, *_ in PEOPLE:
        first = title.split()[0]
        famous = NAMESAKES[first]
        namesakes += [
            (f"Wer ist {famous}?" if german else f"Who is {famous}?", ""),
            (f"Wann hat {famous} Geburtstag?" if german else f"When is {famous}'s birthday?", ""),
            (f"When {first} calls, tell them I'm out.", ""),
        ]
    alias_q = []
    for path, aliases, _ in ALIASED:
        a = aliases[0]
        alias_q += [
            (f"wie weit ist der {a}", f"vault/{path}"),
            (f"What is the state of the {a}?", f"vault/{path}"),
        ]
        asides += [(a, ""), (f"mein {a} ist ein einziges Chaos", "")]
    asides += [
        ("What is a good birthday present for a child?", ""),
        ("What should a meeting agenda look like?", ""),
        ("Welche Ideen hast du für das Wochenende?", ""),
        ("What is the capital of Peru?", ""),
        ("Wie spät ist es in Tokio?", ""),
    ]
    return {
        "other language": other,
        "own language": own,
        "aliases": alias_q,
        "asides": asides,
        "namesakes": namesakes,
    }


def search_aliases(d: Any) -> dict[str, Any]:
    ranks = []
    for path, aliases, _ in ALIASED:
        for a in aliases:
            hits = d.call("search", {"query": a, "limit": 10})["hits"]
            refs = [h["reference"] for h in hits]
            ranks.append(refs.index(f"vault/{path}") + 1 if f"vault/{path}" in refs else 0)
    return {
        "queries": len(ranks),
        "first": sum(r == 1 for r in ranks),
        "mrr10": round(sum(1 / r for r in ranks if r) / len(ranks), 3),
    }


def run(code: Path, base: Path) -> dict[str, Any]:
    vault, home = base / "vault", base / "home"
    build(vault)
    config = base / "sidecar.yaml"
    config.write_text("")
    d = code_daemon(home, vault, code, config)
    try:
        d.wait_for(lambda h: h["index"]["state"] == "ready" and h["index"]["pending_vectors"] == 0, 600)
        out: dict[str, Any] = {"search alias": search_aliases(d)}
        for group, items in cases().items():
            right = wrong = injected = 0
            misses = []
            for message, ref in items:
                refs = [h["reference"] for h in d.call("recall", {"message": message})["hits"]]
                injected += bool(refs)
                if ref:
                    right += ref in refs
                    wrong += sum(r != ref for r in refs)
                    if ref not in refs:
                        misses.append(message)
                elif refs:
                    misses.append(message)
            out[group] = {
                "messages": len(items),
                "right": right,
                "wrong notes": wrong,
                "injected": injected,
                "injecting" if group in ("asides", "namesakes") else "misses": misses,
            }
        return out
    finally:
        d.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", type=Path, default=ROOT, help="checkout of the code to run (default: this one)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="names-") as tmp:
        emit({"code": str(args.code), **run(args.code.resolve(), Path(tmp))}, args.out)


if __name__ == "__main__":
    main()
