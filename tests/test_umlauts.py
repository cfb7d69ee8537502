"""Words typed without umlauts (ae/oe/ue) read as the notes write them, and only then: the list of
the notes' umlaut words, how it is kept, taught to an older index and read by search."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from sidecar.index.repair import refill_new_bm25
from sidecar.stores.umlauts import FILE, UmlautWords
from tests.conftest import FakeEmbedder, Harness, write
from tests.index_helpers import search

MIETE = "# Miete\n\nDie Kündigung des Mietvertrags, der Fußgängerüberweg vor dem Haus, die Übersicht.\n"
# Plain words of the notes that "poet", "aerial", "neuen", "Boeing" fold into.
LURES = "# Lures\n\nThe pot, Arial, neun, Boing.\n"


def _harness(make_cfg: Any, tmp_path: Path) -> Harness:
    vault = tmp_path / "v"
    write(vault / "Miete.md", MIETE)
    write(vault / "Lures.md", LURES)
    h = Harness(make_cfg(vault), FakeEmbedder())
    h.sweep()
    return h


def test_a_word_typed_with_ae_oe_ue_is_read_as_the_notes_umlaut_word(make_cfg: Any, tmp_path: Path) -> None:
    """ "Kuendigung", "Fussgaengerueberweg", "Uebersicht" (a US keyboard's) are read as the notes'
    "Kündigung", "Fußgängerüberweg", "Übersicht" (each distinct word once), and find the note."""
    h = _harness(make_cfg, tmp_path)
    try:
        bm25 = h.stores.bm25
        assert bm25.umlaut_readings(["Kuendigung", "Fussgaengerueberweg", "Uebersicht", "kuendigung"]) == {
            "kuendigung": "kündigung",
            "fussgaengerueberweg": "fußgängerüberweg",
            "uebersicht": "übersicht",
        }
        for typed in ("Kuendigung", "Fussgaengerueberweg"):
            assert search(h, typed)[0]["reference"] == "vault/Miete"
    finally:
        h.close()


def test_plain_words_are_never_read_as_umlaut_words(make_cfg: Any, tmp_path: Path) -> None:
    """ "poet" is not "pot", "aerial" not "arial", "neuen" not "neun", "Boeing" not "Boing", and
    "Queue" stays itself: no note writes "pöt", "ärial", "neün", "böing" or "qüü", though the
    index, which folds umlauts, holds each folded form."""
    h = _harness(make_cfg, tmp_path)
    try:
        bm25 = h.stores.bm25
        for word in ("poet", "aerial", "neuen", "Boeing", "Queue", "queue"):
            assert bm25.umlaut_readings([word]) == {}
            assert bm25.umlaut_readings([word, "Kuendigung"]) == {"kuendigung": "kündigung"}
        # Only the German field's folding meets them, at its half weight, as before.
        for typed, plain in (("poet", "pot"), ("aerial", "Arial"), ("neuen", "neun")):
            got = [x["score"] for x in search(h, typed) if x["reference"] == "vault/Lures"]
            assert got < [search(h, plain)[0]["score"]], typed
    finally:
        h.close()


def test_umlaut_words_survive_a_restart_and_an_older_index_learns_them(make_cfg: Any, tmp_path: Path) -> None:
    """The list is saved beside the keyword index; an index without it (older than it) is taught
    it from the manifest before the first sweep, without a refill of the index."""
    h = _harness(make_cfg, tmp_path)
    folder = h.stores.bm25.path
    try:
        assert (folder / FILE).read_text(encoding="utf-8").split().count("kündigung") == 1
    finally:
        h.close()
    assert UmlautWords(folder).written_with_umlaut("Kuendigung") == "kündigung"
    (folder / FILE).unlink()
    h = Harness(h.cfg, FakeEmbedder())
    try:
        bm25 = h.stores.bm25
        assert not bm25.umlauts.complete and bm25.umlaut_readings(["Kuendigung"]) == {}
        docs = bm25.num_docs()
        refill_new_bm25(h.stores)
        assert bm25.num_docs() == docs and bm25.umlaut_readings(["Kuendigung"]) == {"kuendigung": "kündigung"}
        assert (folder / FILE).exists()
    finally:
        h.close()


def test_a_refill_writes_the_list_anew(tmp_path: Path) -> None:
    """A refill writes the list anew (a deleted note's words go) at its commit, the old one read
    until then; a rollback keeps the old one; new words are appended at a save."""
    words = UmlautWords(tmp_path)
    words.learn(["Die Kündigung", "plain text"])
    words.save()
    words.clear()
    words.learn(["Übersicht"])
    words.forget_unsaved()
    assert words.written_with_umlaut("kuendigung") == "kündigung"
    assert words.written_with_umlaut("uebersicht") is None
    words.clear()
    words.learn(["Übersicht"])
    assert words.written_with_umlaut("Kuendigung") == "kündigung"  # until the refill's commit
    words.save()
    assert words.written_with_umlaut("Kuendigung") is None
    words.learn(["Größe"])
    words.save()
    assert (tmp_path / FILE).read_text(encoding="utf-8").split() == ["übersicht", "größe"]
    assert UmlautWords(tmp_path).written_with_umlaut("Groesse") == "größe"


def test_a_note_named_as_typed_stays_first(make_cfg: Any, tmp_path: Path) -> None:
    """A note named without umlauts ("Uebersicht.md", no mention in its text) is first for
    "Uebersicht", above a note whose text says "Übersicht" in passing: the typed word is searched
    as well as the notes' umlaut word, never replaced by it."""
    vault = tmp_path / "v"
    write(vault / "Uebersicht.md", "Konten, Depots und Versicherungen im Blick.\n")
    write(vault / "Kosten.md", "# Kosten\n\nDie Übersicht der Nebenkosten fehlt noch.\n")
    write(vault / "Garten.md", "# Garten\n\nTomaten pflanzen im Mai.\n")
    h = Harness(make_cfg(vault), FakeEmbedder())
    try:
        h.sweep()
        hits = search(h, "Uebersicht")
        assert [x["reference"] for x in hits[:2]] == ["vault/Uebersicht", "vault/Kosten"]
    finally:
        h.close()


def test_an_agents_memory_written_as_typed_stays_first(make_cfg: Any, tmp_path: Path) -> None:
    """An agent's memory that writes "Kuendigung" as typed is first for that agent's
    "Kuendigung", above a vault note saying "Kündigung"."""
    vault = tmp_path / "v"
    write(vault / "Miete.md", "# Miete\n\nDie Kündigung des Mietvertrags ist schriftlich.\n")
    cfg = make_cfg(vault)
    write(
        cfg.agents_dir / "claude" / "memory" / "kuendigung-frist.md",
        "Kuendigung Frist: drei Monate zum Monatsende, Einschreiben.\n",
    )
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        hits = search(h, "Kuendigung", agent="claude")
        assert [x["reference"] for x in hits[:2]] == ["memory/kuendigung-frist", "vault/Miete"]
    finally:
        h.close()


def test_a_failed_save_leaves_no_list_that_passes_for_complete(tmp_path: Path, monkeypatch: Any) -> None:
    """An append that fails (a full disk) removes the file: the next start learns the list from
    the manifest again instead of trusting a list missing words; this process writes its whole
    list at the next save."""
    words = UmlautWords(tmp_path)
    words.learn(["Die Kündigung"])
    words.save()
    words.learn(["Die Übersicht"])
    real_open = Path.open

    def full_disk(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self.name == FILE:
            raise OSError(28, "No space left on device")
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", full_disk)
    words.save()
    monkeypatch.undo()
    assert not (tmp_path / FILE).exists()
    assert not UmlautWords(tmp_path).complete  # relearned at the next start
    words.save()
    assert sorted((tmp_path / FILE).read_text(encoding="utf-8").split()) == ["kündigung", "übersicht"]


def test_an_older_index_learns_its_list_without_the_write_lock(make_cfg: Any, tmp_path: Path) -> None:
    """The list is taught from the manifest while a memory write holds the stores' write lock:
    the write does not wait for it (1.8 s for 7,218 chunks on a loaded machine)."""
    h = _harness(make_cfg, tmp_path)
    folder = h.stores.bm25.path
    h.close()
    (folder / FILE).unlink()
    h = Harness(h.cfg, FakeEmbedder())
    try:
        learner = threading.Thread(target=refill_new_bm25, args=(h.stores,), daemon=True)
        with h.stores.write_lock:
            learner.start()
            learner.join(timeout=120)  # a hang, not a duration: it never returned under the lock
            assert not learner.is_alive()
        assert h.stores.bm25.umlaut_readings(["Kuendigung"]) == {"kuendigung": "kündigung"}
    finally:
        learner.join()
        h.close()
