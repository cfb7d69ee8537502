"""A note asked for by its name: a one-word alias searched alone finds it first; a question naming
a note by an alias recalls it as one naming its title does; a question about a namesake of a
person of the notes recalls nothing. With the real model (recall's gates are the
model's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DaemonProcess, write

pytestmark = pytest.mark.model

_NOTES = {
    "Projekte/Gartenhaus": "---\naliases: [Schuppen, Garden shed]\n---\n# Gartenhaus\n\nDas Fundament "
    "ist gegossen, die Wände stehen. Als Nächstes kommt das Dach mit Dachpappe; die Tür fehlt noch.\n",
    "Nur Frontmatter": "---\naliases: [Metadatenzettel]\ntags: [meta]\nstatus: draft\n---\n",
    "Zuhause/Übersicht": "# Übersicht\n\nSiehe [[Metadatenzettel]] und [[Gartenhaus]]. Der Keller ist "
    "aufgeräumt.\n",
    "Zuhause/Holz": "# Holz\n\nIm Schuppen liegt noch Brennholz für den Winter, etwa zwei Ster Buche.\n",
    "Personen/Anna Berger": "# Anna Berger\n\nAnna ist meine Schwester. Sie wohnt in Freiburg. "
    "Geburtstag: 12. März\n",
    "Personen/Tom Hardy": "# Tom Hardy\n\nTom is my manager at work. Birthday: 4 July. He prefers "
    "short status reports on Mondays.\n",
    "Birthday": "# Birthday\n\nIdeas for birthday presents: a book, concert tickets, a cooking class.\n",
    "Rezepte/Linsensuppe": "# Linsensuppe\n\nRote Linsen, Karotten, Zwiebeln, Kreuzkümmel. 25 Minuten "
    "kochen.\n",
    "Arbeit/Backup": "# Backup\n\nDas NAS sichert jede Nacht um 2 Uhr mit restic auf die externe Platte.\n",
    "Arbeit/Onboarding": "---\naliases: [2024, Einarbeitung]\n---\n# Onboarding\n\nNew hires get a "
    "laptop, an account and a buddy for the first two weeks.\n",
    "Daily/2024-03-01": "# 2024-03-01\n\nMit Anna telefoniert. Tomaten gegossen.\n",
    "Daily/2024-03-02": "# 2024-03-02\n\nBackup geprüft, alles gut.\n",
    "Reisen/Norwegen": "# Norwegen\n\nPackliste: Regenjacke, Wanderschuhe, Stirnlampe. Fähre ab Kiel.\n",
    "Garten/Tomaten": "# Tomaten\n\nDie Tomaten brauchen jeden Tag Sonne und Wasser.\n",
}


@pytest.fixture
def named(daemon_factory: Any, tmp_path: Path) -> DaemonProcess:
    vault = tmp_path / "namesvault"
    for name, text in _NOTES.items():
        write(vault / f"{name}.md", text)
    d: DaemonProcess = daemon_factory(vault).start()
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    return d


def _first(d: DaemonProcess, query: str) -> str:
    hits = d.call("search", {"query": query, "limit": 3})["hits"]
    return str(hits[0]["reference"]) if hits else ""


def _recalled(d: DaemonProcess, message: str) -> list[str]:
    return [h["reference"] for h in d.call("recall", {"message": message})["hits"]]


def test_a_search_for_a_notes_one_word_alias_finds_that_note_first(named: DaemonProcess) -> None:
    """A query that is exactly a one-word alias puts the aliased note first, before a note that
    holds the word in its text and one that merely links the alias (``[[Metadatenzettel]]``);
    a query of an alias word beside another word is ranked as before, and so is a number alias."""
    assert _first(named, "Schuppen") == "vault/Projekte/Gartenhaus"
    assert _first(named, "Metadatenzettel") == "vault/Nur Frontmatter"
    assert _first(named, "Garden shed") == "vault/Projekte/Gartenhaus"
    assert _first(named, "Brennholz im Schuppen") == "vault/Zuhause/Holz"
    assert _first(named, "Einarbeitung") == "vault/Arbeit/Onboarding"
    # a number alias (YAML reads it as a number) names nothing: the notes of that year come first
    assert _first(named, "2024").startswith("vault/Daily/")


def test_a_question_about_a_namesake_recalls_nothing(named: DaemonProcess) -> None:
    """A question about someone who shares a first name with a person of the notes ("Who is Tom
    Hanks?" beside "Tom Hardy") is not about that person: recall injects nothing (a rule that let
    a capitalised title word name a note injected Tom Hardy's note here)."""
    for message in ("Who is Tom Hanks?", "Wer war Anna Seghers?", "When Tom calls, tell him I'm out."):
        assert _recalled(named, message) == [], message


_DEVICES = {
    "Geräte/Synology DS920+": "---\naliases: [NAS, Netzwerkspeicher]\n---\n# Synology DS920+\n\nVier "
    "Schächte, RAID 5. Hyper Backup sichert die Freigaben jede Nacht auf eine USB-Platte; eine zweite "
    "Kopie geht verschlüsselt zu Backblaze B2. DSM-Updates spiele ich am Wochenende von Hand ein.\n",
    "Geräte/Laptop": "# Laptop\n\nDas MacBook sichert stündlich mit Time Machine auf eine externe Platte.\n",
    "Fotos": "# Fotos\n\nDie Fotos liegen auf dem NAS im Ordner photo, sortiert nach Jahr.\n",
    "Rezepte/Linsensuppe": _NOTES["Rezepte/Linsensuppe"],
    "Reisen/Norwegen": _NOTES["Reisen/Norwegen"],
    "Garten/Tomaten": _NOTES["Garten/Tomaten"],
}


def test_a_question_naming_a_note_by_its_alias_recalls_it(daemon_factory: Any, tmp_path: Path) -> None:
    """ "Wie sichere ich das NAS?" recalls the note aliased "NAS" as "... die Synology?" recalls
    it by its title: the model reads a note's aliases beside its title (it read the title alone,
    and the alias questions recalled nothing). A note that merely mentions the NAS stays out."""
    vault = tmp_path / "devices"
    for name, text in _DEVICES.items():
        write(vault / f"{name}.md", text)
    d = daemon_factory(vault).start()
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    for name in ("die Synology", "das NAS", "den Netzwerkspeicher"):
        message = f"Wie sichere ich {name}?"
        assert _recalled(d, message) == ["vault/Geräte/Synology DS920+"], message
