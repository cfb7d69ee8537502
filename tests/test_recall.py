"""Auto-injection (`recall`) with the real model: relevant context in, small talk out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import RemoteError
from sidecar.contracts.wire import RECALL_GATES
from sidecar.search.fusion import Candidate, Scale, Scored
from sidecar.search.recall import _on_keywords
from tests.conftest import DaemonProcess, write

pytestmark = pytest.mark.model

OFF_TOPIC = [
    "hi there!",
    "thanks, that's all",
    "how are you today?",
    "lol ok",
    "what's the capital of Peru?",
    "tell me a joke",
    "good morning",
    "can you speak French?",
    "what time is it in Tokyo?",
    "who won the football world cup in 2014?",
    "hmm, interesting",
    "please continue",
    "write a haiku about autumn leaves",
    "what is 17 times 23?",
    "ok cool, next",
    "bye for now",
    "translate 'cat' into Spanish",
    "who wrote Hamlet?",
    "what is the boiling point of water?",
    "nice work",
]


@pytest.fixture
def running(daemon_factory: Any, vault: Path) -> DaemonProcess:
    write(
        vault / "wiki" / "Network.md",
        "# Network\n\nThe NAS has the address 192.168.1.20; the router is a Fritzbox.\n",
    )
    write(
        vault / "Travel.md", "# Travel\n\nPacking list for the Norway trip: rain jacket, boots, headlamp.\n"
    )
    write(
        vault / "Disks.md",
        "# Disks\n\nThe failing disk in bay 3 is tracked in ticket OPS-4821; the spare arrives Friday.\n",
    )
    d: DaemonProcess = daemon_factory(vault).start()
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    return d


def test_relevant_message_gets_a_framed_context_block(running: DaemonProcess) -> None:
    """A message about a noted topic yields a block with the header, source tags and the note."""
    r = running.call("recall", {"message": "When does the NAS backup with restic run?"}, agent="claude")
    assert r["hits"] and r["hits"][0]["reference"] == "wiki/Backups"
    block = r["context"]
    assert block.startswith("<recalled-notes>") and block.endswith("</recalled-notes>")
    assert "recollection, not observation" in block and "never replace" in block
    assert "[wiki] wiki/Backups" in block and "Sources: [wiki]" in block
    assert "[memory] your own earlier notes" in block
    # Asked without an agent (a person at the CLI): memory hits are the agents' notes, not "yours".
    plain = running.call("recall", {"message": "When does the NAS backup with restic run?"})["context"]
    assert "[memory] the agents' notes" in plain and "your own" not in plain


def test_off_topic_messages_stay_empty(running: DaemonProcess) -> None:
    """At least 18 of 20 small-talk and unrelated messages inject nothing."""
    empty = sum(running.call("recall", {"message": m}, agent="claude")["context"] == "" for m in OFF_TOPIC)
    assert empty >= 18, empty


MADE_UP = ["xyzzy quux", "asdfgh qwertz", "wonoxopi kaxivonys davohigo", "blorp fizzwick", "qyca lodam"]


def test_search_for_made_up_words_finds_nothing_above_the_floor(running: DaemonProcess) -> None:
    """Words that occur nowhere and mean nothing get no hit at the default minScore: the model
    still finds a nearest chunk, but meaning alone counts at the vector share only. A real
    question keeps its page."""
    for text in MADE_UP:
        hits = running.call("search", {"query": text}, agent="claude")["hits"]
        assert hits == [], (text, hits)
    nearest = running.call("search", {"query": "xyzzy quux", "minScore": 0}, agent="claude")["hits"]
    assert nearest and all(h["relevance"] < 0.2 for h in nearest)
    found = running.call("search", {"query": "what do I pack for Norway?"}, agent="claude")["hits"]
    assert found and found[0]["reference"] == "vault/Travel"
    # The note in German shares no word with it: found by meaning alone, which counts at the
    # vector share (search.vectorWeight 0.6), however close the translation is.
    german = "Packliste für die Norwegenreise: Regenjacke, Stiefel, Stirnlampe."
    hits = running.call("search", {"query": german}, agent="claude")["hits"]
    assert hits and hits[0]["reference"] == "vault/Travel"
    assert 0.2 <= hits[0]["relevance"] <= 0.6, hits[0]


def test_a_named_identifier_is_recalled(running: DaemonProcess) -> None:
    """A message naming a ticket the notes know injects that note, whatever the model makes of
    the number (search.rareTerm*); a ticket the notes do not know injects nothing."""
    r = running.call(
        "recall", {"message": "what did we decide about OPS-4821", "preview": True}, agent="claude"
    )
    # The number is always rare; "OPS" too when the model splits it (XLM-R pieces, not MiniLM's).
    rare = r["analysis"]["rareWords"]
    assert "4821" in rare and set(rare) <= {"OPS", "4821"}
    assert r["hits"][0]["reference"] == "vault/Disks" and "[vault] vault/Disks" in r["context"]
    assert (
        running.call("recall", {"message": "what did we decide about OPS-9377"}, agent="claude")["context"]
        == ""
    )


def test_follow_up_uses_the_history(running: DaemonProcess) -> None:
    """A follow-up without content words is answered from the previous turns."""
    r = running.call(
        "recall",
        {
            "message": "and how often does it run?",
            "history": ["How do we back up the NAS?", "With restic, nightly."],
        },
        agent="claude",
    )
    assert r["hits"] and r["hits"][0]["reference"] == "wiki/Backups"
    alone = running.call("recall", {"message": "and how often does it run?"}, agent="claude")
    assert alone["context"] == "" or alone["hits"][0]["reference"] != "wiki/Backups"


def test_preview_budget_and_bad_input(running: DaemonProcess) -> None:
    """preview explains the query; the block respects its token budget; bad history is refused."""
    r = running.call(
        "recall",
        {"message": "NAS backup restic network address", "preview": True, "limit": 5},
        agent="claude",
    )
    assert r["analysis"]["contentWords"] == ["NAS", "backup", "restic", "network", "address"]
    assert len(r["context"].split()) < 1500
    with pytest.raises(RemoteError, match="history"):
        running.call("recall", {"message": "x", "history": "not a list"}, agent="claude")


def test_search_filters_by_tag_path_and_inline_syntax(running: DaemonProcess) -> None:
    """tag:, path: and source filters restrict hits, inline or as parameters."""
    hits = running.call("search", {"query": "tomatoes water tag:garden"})["hits"]
    assert hits and all(h["reference"] == "vault/Garden" for h in hits)
    assert running.call("search", {"query": "engine", "pathPrefix": "Projects/"})["hits"][0]["reference"] == (
        "vault/Projects/Boat"
    )
    assert all(h["source"] == "wiki" for h in running.call("search", {"query": "NAS source:wiki"})["hits"])
    with pytest.raises(RemoteError, match="since"):
        running.call("search", {"query": "x", "since": "someday"})


def test_why_explains_rank_and_absence(running: DaemonProcess) -> None:
    """`why` gives per-chunk scores, boosts and the outcome; a missing note says why it is absent."""
    r = running.call("why", {"reference": "wiki/Backups", "query": "restic backups of the NAS"})
    assert r["indexed"] and r["chunks"][0]["outcome"] == "hit #1"
    assert r["chunks"][0]["vecScore"] > 0.3 and r["chunks"][0]["bm25Score"] > 0
    assert r["chunks"][0]["boosts"]["source"] == 1.1
    assert r["pageBm25Score"] > 0  # the whole note's keyword score, part of each chunk's
    far = running.call("why", {"reference": "vault/Travel", "query": "restic backups of the NAS"})
    assert far["indexed"] and "hit #1" not in far["chunks"][0]["outcome"]
    gone = running.call("why", {"reference": "vault/Nowhere", "query": "x"})
    assert gone["indexed"] is False and "no such note" in gone["reason"]
    text = running.run_cli("why", "wiki/Backups", "restic backups of the NAS", check=True).stdout
    assert "hit #1" in text and "vec=" in text and "the whole note's keyword score" in text
    preview = running.run_cli("preview", "When does the restic backup of the NAS run?", check=True).stdout
    # readable lines, no raw JSON: the analysis, the gates, the hits, then the block
    assert "content words: restic, backup, NAS, run" in preview and "Gates: " in preview
    assert "wiki/Backups" in preview and "<recalled-notes>" in preview and '"contentWords"' not in preview


def test_a_message_pointing_back_is_steered_by_the_history(daemon_factory: Any, tmp_path: Path) -> None:
    """A follow-up that opens with "und" continues the previous turn: with the follow-up cue the
    history takes the larger share and the archive tool's note leads clearly; with
    recall.followUpCues off, the message's own words ("Dateien", "heraus") pull the file manager's
    note level with it."""
    vault = tmp_path / "cues"
    write(
        vault / "wiki" / "tar.md",
        "# tar\n\nArchivierungstool für Dateien. Erstelle ein Archiv aus einem Ordner: "
        "`tar cf ziel.tar ordner`. Entpacke ein Archiv: `tar xf quelle.tar`.\n",
    )
    write(
        vault / "wiki" / "Dateiexplorer.md",
        "# Dateiexplorer\n\nDer Dateiexplorer zeigt alle Dateien und Ordner des Vaults. Ziehe Dateien "
        "heraus, verschiebe oder lösche sie.\n",
    )
    write(vault / "Garden.md", "# Garten\n\nTomaten brauchen jeden Tag Sonne und Wasser.\n")
    cfg = tmp_path / "cues.yaml"
    cfg.write_text("recall:\n  followUpCues: true\n")
    d: DaemonProcess = daemon_factory(vault, name="cues-home", extra=["--config", str(cfg)]).start()
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    params = {
        "message": "und wie bekomme ich die Dateien wieder heraus?",
        "history": ["Wie packe ich einen Ordner in ein tar-Archiv?"],
        "preview": True,
    }
    on = d.call("recall", params, agent="claude")
    cfg.write_text("recall:\n  followUpCues: false\n")
    d.call("reload")
    off = d.call("recall", params, agent="claude")
    assert on["analysis"]["refersBack"] is True and on["analysis"]["historyShare"] == 0.4
    assert off["analysis"]["historyShare"] == 0.2
    assert on["hits"] and on["hits"][0]["reference"] == "wiki/tar"

    def lead(r: dict[str, Any]) -> float:
        scores = {h["reference"]: h["score"] for h in r["hits"]}
        return scores.get("wiki/tar", 0.0) - scores.get("wiki/Dateiexplorer", 0.0)

    assert lead(on) > lead(off) + 0.1


def test_a_model_that_cannot_read_the_message_needs_the_keywords(daemon_factory: Any, tmp_path: Path) -> None:
    """With the English-only MiniLM, German small talk finds some cosine for anything; recall then
    asks the keywords to match as clearly as it asks of the cosine otherwise: the small talk
    injects nothing, a German question naming the note's words still recalls it."""
    vault = tmp_path / "minilm"
    write(vault / "wiki" / "Backups.md", "# Backups\n\nWe back up the NAS with restic every night at 2am.\n")
    write(
        vault / "wiki" / "Datensicherung.md",
        "# Datensicherung\n\nDie Datensicherung des NAS läuft jede Nacht um zwei Uhr mit restic.\n",
    )
    write(vault / "Kochen.md", "# Rezepte\n\nLinsensuppe: Linsen, Karotten, Zwiebeln, Brühe.\n")
    cfg = tmp_path / "minilm.yaml"
    cfg.write_text("embedder:\n  model: all-MiniLM-L6-v2\n")
    d: DaemonProcess = daemon_factory(vault, name="minilm-home", extra=["--config", str(cfg)]).start()
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0 and h["embedder"]["state"] == "ok")
    for message in ("Was soll ich heute Abend kochen?", "mir ist heute total langweilig", "hmm, na gut"):
        r = d.call("recall", {"message": message, "preview": True}, agent="claude")
        assert r["analysis"]["contentWords"], message  # the gate is reached, not skipped
        assert r["context"] == "", message
    r = d.call("recall", {"message": "Wann läuft die Datensicherung mit restic?"}, agent="claude")
    assert r["hits"] and r["hits"][0]["reference"] == "wiki/Datensicherung"
    # With turns, the keywords are measured against the message's own words, not the whole talk.
    r = d.call(
        "recall",
        {
            "message": "Wie oft läuft die Datensicherung?",
            "history": [
                "Ich richte gerade das NAS ein.",
                "Restic ist installiert, die Rezepte sind gesichert.",
            ],
        },
        agent="claude",
    )
    assert r["hits"] and r["hits"][0]["reference"] == "wiki/Datensicherung"


def _notes_of_an_app(vault: Path) -> None:
    """A few help pages of a note-taking app, in words of their own."""
    pages = {
        "Plugins/Audio recorder": "Record a lecture, a meeting or a voice memo: the audio recorder "
        "plugin records audio from your microphone into an attachment of the open note. Start it "
        "from the ribbon or the command palette; the recording "
        "is saved as a webm file in your attachments folder and embedded where the cursor is.",
        "Plugins/Daily notes": "Daily notes opens a note named after today's date. Choose the folder and "
        "the template for new daily notes in the plugin's settings.",
        "User interface/Hotkeys": "Hotkeys are keyboard shortcuts for commands. Change a hotkey in "
        "Settings under Hotkeys; search for a command and press the keys you want.",
        "Getting started/Back up your files": "Keep a backup of your vault on another disk or in a "
        "backup service. Sync is not a backup: a deleted note is deleted everywhere.",
        "Editing/Tables": "A table is written with pipes and a line of dashes under its header row.",
        "Publish/Custom domains": "Point your own domain name at your published site with a CNAME "
        "record at your domain registrar.",
    }
    for name, text in pages.items():
        write(vault / f"{name}.md", f"# {name.rsplit('/', 1)[-1]}\n\n{text}\n")


@pytest.fixture
def app_help(daemon_factory: Any, tmp_path: Path) -> DaemonProcess:
    vault = tmp_path / "apphelp"
    _notes_of_an_app(vault)
    cfg = tmp_path / "apphelp.yaml"
    cfg.write_text("recall:\n  minSimilarity: 0.8\n")
    d: DaemonProcess = daemon_factory(vault, name="apphelp-home", extra=["--config", str(cfg)]).start()
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    return d


def test_a_page_holding_the_messages_words_passes_just_under_the_similarity_gate(
    app_help: DaemonProcess,
) -> None:
    """A page holding nearly every word of the message, with a cosine the model counts related
    but under recall.minSimilarity (0.8 here), is recalled: the keywords corroborate it. Small
    talk whose word some page holds still recalls nothing."""
    r = app_help.call("recall", {"message": "record a lecture with my microphone", "preview": True})
    top = r["hits"][0]
    assert top["reference"] == "vault/Plugins/Audio recorder", r
    assert 0.2 <= top["similarity"] < 0.8 <= top["keywords"] + 0.2, top
    for m in OFF_TOPIC:
        assert app_help.call("recall", {"message": m})["context"] == "", m


def test_preview_lists_what_each_gate_kept_out(app_help: DaemonProcess) -> None:
    """preview answers with the gates in force and the candidates they kept out, each with the
    gate and the figures it compared; without preview the reply keeps its shape."""
    params = {"message": "Wie nehme ich eine Vorlesung mit dem Mikrofon auf?"}
    r = app_help.call("recall", {**params, "preview": True})
    assert r["hits"] == [] and r["gates"] == {"scoreFloor": 0.3, "minSimilarity": 0.8}
    first = r["dropped"][0]
    assert first["reference"] == "vault/Plugins/Audio recorder" and first["gate"] == "scoreFloor"
    assert {"relevance", "similarity", "vecScore", "score"} <= set(first)
    assert all(h["gate"] in RECALL_GATES for h in r["dropped"])
    plain = app_help.call("recall", params)
    assert "dropped" not in plain and "gates" not in plain


def test_a_name_the_model_cannot_read_is_recalled_by_its_keywords(
    daemon_factory: Any, tmp_path: Path
) -> None:
    """A question naming a person or place of the notes recalls the note holding the name; a
    statement mentioning the name among words of its own, the name alone, or the name next to a
    word no note holds (a question about something else: "Urlaub in Boskoop?") recalls nothing."""
    vault = tmp_path / "names"
    write(
        vault / "Journal" / "04.12.2026.md",
        "# 04.12.2026\n\nMit dem Klempner Herrn Ozturk über die Wärmepumpe gesprochen. "
        "Er kommt am Montag wieder und bringt das Ventil mit.\n",
    )
    write(vault / "Rezepte" / "Kuchen.md", "# Apfelkuchen\n\n6 Äpfel (Boskoop), 200 g Mehl, 100 g Butter.\n")
    write(
        vault / "Garten.md",
        "# Garten\n\nDie Tomaten brauchen jeden Tag Sonne und Wasser.\n",
    )
    write(vault / "Auto.md", "# Auto\n\nDer Reifenwechsel ist im Oktober fällig, die Werkstatt ruft an.\n")
    d: DaemonProcess = daemon_factory(vault, name="names-home").start()
    d.wait_for(lambda h: h["index"]["pending_vectors"] == 0)
    r = d.call("recall", {"message": "Ventil von Herrn Ozturk?", "preview": True})
    assert r["hits"] and r["hits"][0]["reference"] == "vault/Journal/04.12.2026", r["dropped"]
    for aside in (
        "ich habe Boskoop im Laden gekauft",
        "mein Nachbar redet ständig über Boskoop, nervig",
        "Boskoop",
        # the name alone: main's rule (a cosine of at least 0.05); it passed at 0.02 by the
        # keywords alone
        "Was gibt es zu Boskoop?",
        "Urlaub in Boskoop?",
        "What's the weather in Boskoop?",
    ):
        assert d.call("recall", {"message": aside})["context"] == "", aside


class _Covers:
    """A chunk's coverage of the message's words, as given."""

    asks = several = True

    def __init__(self, held: int, missing: int, rare: int) -> None:
        self._counts = (held, missing, rare)

    def counts(self, chunk_id: str) -> tuple[int, int, int]:
        return self._counts

    def most(self, chunk_id: str) -> bool:
        held, missing, _ = self._counts
        return held > missing and missing <= 1

    def misses_rare(self, chunk_id: str) -> bool:
        return False

    def misses_unknown(self, chunk_id: str) -> bool:
        return False


def test_a_chunk_without_a_vector_is_not_recalled_by_the_name_rule() -> None:
    """A chunk whose vector is pending (a first index) passes only the stricter rule (a share of
    0.8): on a real first index the name rule's share of 0.5 let asides in ("Wie viel ist auf
    meinen Laufwerken noch frei?" found a cipher tool's page)."""
    own = Scale(bm25_ideal=10.0)
    covers: Any = _Covers(held=2, missing=1, rare=1)

    def scored(bm25: float, *, embedded: bool) -> Scored:
        c = Candidate("c1", "vault/x", "vault", 1, 2, bm25=bm25, embedded=embedded)
        return Scored(c, 1.0, 0.0, 1.0)

    assert _on_keywords(scored(6.0, embedded=True), own, covers, embedded=True)  # a name: share 0.6
    assert not _on_keywords(scored(6.0, embedded=False), own, covers, embedded=False)
    assert _on_keywords(scored(8.5, embedded=False), own, covers, embedded=False)
