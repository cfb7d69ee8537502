"""Obsidian-native behaviour: folders left out, CJK keyword search, every file indexed or accounted
for, and the link graph through the daemon (get, related, CLI)."""

from __future__ import annotations

import json
import logging
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sidecar.contracts.errors import RemoteError
from sidecar.contracts.notices import resolved_notes
from sidecar.notes.dayformat import compile_format, day_of_path
from sidecar.stores.cjk import bigrams
from sidecar.vault.notenames import CANVAS_TWIN_REASON
from sidecar.vault.references import path_for_key
from tests.conftest import KEYWORD_ONLY, DaemonProcess, FakeEmbedder, Harness, write
from tests.index_helpers import edit_links, search


def _keys(h: Harness) -> set[str]:
    return set(h.stores.manifest.file_states())


def _exclusion_vault(tmp_path: Path) -> Path:
    v = tmp_path / "xvault"
    write(v / "Notes/Plan.md", "# Plan\n\nThe plan links [[Template]].\n")
    write(v / "Templates/Template.md", "# Template\n\n{{date}} daily template\n")
    write(v / "Archive/old.md", "# Old\n\nold archived note\n")
    write(v / "Archive/keep.md", "# Keep\n\nkept archived note\n")
    write(v / "Private/diary.md", "# Diary\n\nprivate thoughts\n")
    write(v / "Notes/secret-42.md", "# Secret\n\nnumbered secret\n")
    write(v / "Drawing.excalidraw.md", "# Drawing\n\nexcalidraw data\n")
    write(v / "wiki/Backups.md", "# Backups\n\nrestic nightly\n")
    write(v / "wiki/drafts/Draft.md", "# Draft\n\nunfinished wiki page\n")
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/", "/secret-\\d+/"]}))
    return v


def test_exclude_patterns_and_obsidian_setting(tmp_path: Path, make_cfg: Any) -> None:
    v = _exclusion_vault(tmp_path)
    cfg = make_cfg(
        v, **{"index.exclude": "Templates/,Archive/,!Archive/keep.md,*.excalidraw.md,wiki/drafts/"}
    )
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        assert _keys(h) == {"vault/Notes/Plan", "vault/Archive/keep", "wiki/Backups"}
        act = h.indexer.activity
        assert act.excluded == {
            "index.exclude: Templates/": 1,
            "index.exclude: Archive/": 1,
            "index.exclude: *.excalidraw.md": 1,
            "index.exclude: wiki/drafts/": 1,
            "Obsidian excluded files: Private/": 1,
            "Obsidian excluded files: /secret-\\d+/": 1,
        }
        assert h.indexer.excluded_by("vault/Private/diary") == "Obsidian excluded files: Private/"
        assert h.indexer.excluded_by("vault/Archive/keep") is None
        # The Obsidian setting changes while running: the next sweep follows it.
        write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Notes/"]}))
        h.sweep()
        assert _keys(h) == {"vault/Private/diary", "vault/Archive/keep", "wiki/Backups"}
    finally:
        h.close()


def test_obsidian_setting_can_be_ignored(tmp_path: Path, make_cfg: Any) -> None:
    v = _exclusion_vault(tmp_path)
    h = Harness(make_cfg(v, **{"index.obsidianExcludes": "false"}), FakeEmbedder())
    try:
        h.sweep()
        assert {"vault/Private/diary", "vault/Notes/secret-42", "vault/Templates/Template"} <= _keys(h)
    finally:
        h.close()


@pytest.mark.parametrize("kind", ["fifo", "device", "huge", "deep", "backtracking"])
def test_hostile_obsidian_settings_never_stop_a_sweep(
    tmp_path: Path, make_cfg: Any, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Obsidian's settings file is the vault's: a named pipe, a link to a device, a huge file or
    JSON nested past the parser are skipped with a warning (was: a sweep blocked on the pipe for
    good, /dev/zero read into gigabytes); a filter that backtracks without end is given up after
    its deadline (was: the daemon frozen). The notes are indexed either way."""
    import os

    v = tmp_path / "v"
    write(v / "Good.md", "# Good\n\nquokka habitat\n")
    write(v / ("a" * 60 + ".md"), "# A\n\nmany letters\n")
    settings = v / ".obsidian" / "app.json"
    settings.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(settings)
    elif kind == "device":
        os.symlink("/dev/zero", settings)
    elif kind == "huge":
        settings.write_text(json.dumps({"userIgnoreFilters": ["Good"], "pad": "x" * (2 << 20)}))
    elif kind == "deep":
        settings.write_text("[" * 200_000 + "]" * 200_000)
    else:
        settings.write_text(json.dumps({"userIgnoreFilters": ["/^(a|aa)+$/"]}))
    h = Harness(make_cfg(v), FakeEmbedder())
    t0 = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING):
            h.sweep()
            h.sweep()
        assert {"vault/Good", "vault/" + "a" * 60} <= _keys(h)
        assert time.monotonic() - t0 < 30
        expected = "obsidian_filter_ignored" if kind == "backtracking" else "obsidian_settings_unreadable"
        assert expected in caplog.text
    finally:
        h.close()


def test_obsidian_rules_stay_while_the_settings_cannot_be_read(tmp_path: Path) -> None:
    """Settings that cannot be read this time (replaced by something unreadable, a share that
    fails) keep the rules in force: a note the user left out is not indexed meanwhile."""
    import os

    from sidecar.vault.ignore import SETTINGS_GRACE_S, IgnoreRules

    v = tmp_path / "v"
    settings = v / ".obsidian" / "app.json"
    write(settings, json.dumps({"userIgnoreFilters": ["Private/"]}))
    now = [1000.0]
    rules = IgnoreRules((), v, clock=lambda: now[0])
    rules.refresh()
    assert rules.match("Private/diary.md") == "Obsidian excluded files: Private/"
    settings.unlink()
    os.mkfifo(settings)  # present but unreadable as settings
    rules.refresh()
    assert rules.match("Private/diary.md") == "Obsidian excluded files: Private/"
    settings.unlink()  # gone: kept for a while (Obsidian or a sync tool may put it back) ...
    rules.refresh()
    assert rules.match("Private/diary.md") == "Obsidian excluded files: Private/"
    now[0] += SETTINGS_GRACE_S  # ... gone for good: no rules of Obsidian's
    rules.refresh()
    assert rules.match("Private/diary.md") is None


def test_new_rules_remove_indexed_notes_past_the_mass_deletion_guard(tmp_path: Path, make_cfg: Any) -> None:
    """Excluding most of a vault is a rule, not a vanished mount: the notes leave at once."""
    v = tmp_path / "big"
    for i in range(10):
        write(v / f"Archive/n{i}.md", f"# N{i}\n\narchived {i}\n")
    write(v / "Keep.md", "# Keep\n\nstays\n")
    h = Harness(make_cfg(v), FakeEmbedder())
    now = [1000.0]
    h.indexer.ignore.clock = lambda: now[0]
    try:
        h.sweep()
        assert len(_keys(h)) == 11
        assert h.indexer.set_excludes(["Archive/"], True) == "index.exclude"
        assert h.indexer.set_excludes(["Archive/"], True) is None
        # Obsidian's own "Excluded files" are read again by a reload (they waited for a sweep).
        write(v / ".obsidian/app.json", '{"userIgnoreFilters": ["Keep.md"]}')
        assert h.indexer.set_excludes(["Archive/"], True) == "Obsidian excluded files"
        assert h.indexer.set_excludes(["Archive/"], True) is None
        (v / ".obsidian/app.json").unlink()
        assert h.indexer.set_excludes(["Archive/"], True) is None  # kept for a while (F8)
        now[0] += 3600
        assert h.indexer.set_excludes(["Archive/"], True) == "Obsidian excluded files"
        h.sweep()
        assert _keys(h) == {"vault/Keep"}
        assert h.stores.bm25.search("archived", 10) == []
        # A write for an excluded note (an event, index_now) is dropped too.
        write(v / "Archive/n1.md", "# N1\n\narchived again\n")
        h.indexer.index_now(h.indexer.changes.roots()[-1], v / "Archive/n1.md")
        assert _keys(h) == {"vault/Keep"}
    finally:
        h.close()


def test_cjk_words_find_their_notes(tmp_path: Path, make_cfg: Any) -> None:
    v = tmp_path / "cjk"
    write(v / "zh/同步.md", "# 同步\n\n使用数据库备份功能可以恢复你的笔记。\n")
    write(v / "zh/插件.md", "# 插件\n\n社区插件由第三方开发者编写。\n")
    write(v / "ja/同期.md", "# 同期\n\nノートを別のデバイスと同期するには設定を開きます。\n")
    write(v / "ja/プラグイン.md", "# プラグイン\n\nコミュニティプラグインを有効にします。\n")
    write(v / "ko/동기화.md", "# 동기화\n\n노트를 다른 기기와 동기화하려면 설정을 여세요.\n")
    write(v / "en/Sync.md", "# Sync\n\nKeep your notes in sync across devices.\n")
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()

        def top(query: str) -> str:
            hits = h.stores.bm25.search(query, 3)
            views = h.stores.manifest.views([c for c, _ in hits])
            return views[hits[0][0]].key if hits else ""

        assert top("备份") == "vault/zh/同步"  # two characters inside a longer run
        assert top("第三方") == "vault/zh/插件"
        assert top("設定") == "vault/ja/同期"
        assert top("プラグイン") == "vault/ja/プラグイン"
        assert top("기기") == "vault/ko/동기화"
        assert top("devices") == "vault/en/Sync"  # other scripts as before
        assert bigrams("Straße 数据库") == "Straße  数据 据库 "
    finally:
        h.close()


def test_keyword_index_of_the_analyzer_before_cjk_is_rebuilt(make_cfg: Any, vault: Path) -> None:
    """Index written before the CJK bigrams (other analyzer names): replaced and refilled."""
    import shutil

    import tantivy

    from sidecar.stores.bm25_text import FIELD_BOOSTS

    cfg = make_cfg(vault)
    h = Harness(cfg, FakeEmbedder())
    h.sweep()
    expected = h.stores.bm25.num_docs()
    h.close()
    shutil.rmtree(cfg.index_dir / "bm25")
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("chunk_id", stored=True, tokenizer_name="raw", index_option="basic")
    for name in ("key", "source", "agent"):
        sb.add_text_field(name, stored=False, tokenizer_name="raw", index_option="basic")
    old = {"body_en": "sidecar_en", "body_de": "sidecar_de"}
    for name in FIELD_BOOSTS:
        sb.add_text_field(
            name, stored=False, tokenizer_name=old.get(name, "sidecar_text"), index_option="freq"
        )
    (cfg.index_dir / "bm25").mkdir()
    tantivy.Index(sb.build(), path=str(cfg.index_dir / "bm25"), reuse=True)
    h2 = Harness(cfg, FakeEmbedder())
    try:
        assert h2.stores.bm25.num_docs() == 0
        h2.sweep()
        assert h2.stores.bm25.num_docs() == expected > 0
        assert h2.stores.bm25.search("restic", 3)
    finally:
        h2.close()


def test_invalid_bytes_are_replaced_and_every_file_is_accounted_for(
    harness: Harness, vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    body = "# Bytes\n\n" + "A note about gardening and compost heaps. " * 10
    (vault / "Bytes.md").write_bytes(body.encode() + b"\xff\xfe broken tail about worms\n")
    (vault / "Binary.md").write_bytes(b"\x00\x01\x02binary")
    write(vault / "..md", "# dot dot\n")
    write(vault / ".hidden.md", "# hidden\n")
    caplog.set_level(logging.WARNING)
    harness.sweep()
    keys = _keys(harness)
    assert "vault/Bytes" in keys
    assert harness.stores.manifest.file_states("vault/Bytes")["vault/Bytes"].state == "indexed"
    assert "note_invalid_utf8" in caplog.text and "Bytes.md" in caplog.text
    hits = harness.stores.bm25.search("worms", 3)
    assert hits and "\ufffd" in harness.stores.manifest.views([hits[0][0]])[hits[0][0]].text
    assert harness.stores.manifest.file_states("vault/Binary")["vault/Binary"].state == "skipped"
    assert harness.indexer.activity.scan_skipped.get("hidden file name") == 2


def _wait(predicate: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.2)


def test_daemon_links_related_and_excludes_after_reload(daemon_factory: Any, tmp_path: Path) -> None:
    v = tmp_path / "dvault"
    write(v / "Home.md", "---\ntags: [hub]\n---\n# Home\n\n[[Sync#Setup]] and ![[Callouts]], [[Nowhere]].\n")
    write(v / "Sync.md", "---\ntags: [hub]\n---\n# Sync\n\n## Setup\n\nBack to [[Home]].\n")
    write(v / "Callouts.md", "# Callouts\n\nSee [[Sync]].\n")
    write(v / "Other.md", "---\ntags: [hub]\n---\n# Other\n\nAlso about [[Sync]].\n")
    write(v / "Projects/Boat.md", "# Boat\n\nThe outboard engine needs spark plugs.\n")
    cfg_file = tmp_path / "sidecar.yaml"
    cfg_file.write_text("embedder:\n  enabled: false\n")
    d: DaemonProcess = daemon_factory(v, extra=["--config", str(cfg_file)]).start()
    got = d.call("get", {"reference": "vault/Home"})
    assert [(x["target"], x["anchor"], x["embed"]) for x in got["links"]] == [
        ("vault/Sync", "Setup", False),
        ("vault/Callouts", None, True),
        (None, None, False),
    ]
    assert got["unresolved"] == ["Nowhere"]
    assert {b["reference"] for b in d.call("get", {"reference": "vault/Sync"})["backlinks"]} == {
        "vault/Home",
        "vault/Callouts",
        "vault/Other",
    }
    related = d.call("related", {"reference": "vault/Home"})["related"]
    assert [r["reference"] for r in related[:2]] == ["vault/Sync", "vault/Callouts"]
    assert related[0]["relation"] == "links both ways"
    assert related[2]["reference"] == "vault/Other" and related[2]["shared"]["links"] == ["vault/Sync"]
    out = d.run_cli("related", "vault/Home", check=True).stdout
    assert "vault/Sync  (links both ways" in out
    out = d.run_cli("get", "vault/Home", "--links", check=True).stdout
    assert "embeds vault/Callouts" in out and "unresolved: [[Nowhere]]" in out
    # Backlinks say as much as links: the section meant, and an embed as an embed.
    assert (
        "line 6 of vault/Home links here #Setup"
        in d.run_cli("get", "vault/Sync", "--links", check=True).stdout
    )
    assert "line 6 of vault/Home embeds this note" in d.run_cli("get", "vault/Callouts", "--links").stdout

    assert d.call("search", {"query": "outboard engine", "minScore": 0})["hits"]
    cfg_file.write_text("embedder:\n  enabled: false\nindex:\n  exclude: [Projects/]\n")
    assert "index.exclude" in d.call("reload")["changed"]
    # Gone once the reload answered (not with the sweep it asks for).
    assert not d.call("search", {"query": "outboard engine", "minScore": 0})["hits"]
    why = d.call("why", {"reference": "vault/Projects/Boat", "query": "engine"})
    assert why["indexed"] is False
    _wait(lambda: d.health()["index"]["excluded"] == {"index.exclude: Projects/": 1})  # the sweep's count
    assert why["indexed"] is False and why["excluded"] == "index.exclude: Projects/"
    assert d.health()["index"]["excluded"] == {"index.exclude: Projects/": 1}
    assert d.health()["index"]["links"] == {"links": 6, "unresolved": 1}
    assert "Excluded notes: 1 by index.exclude: Projects/" in d.run_cli("status", check=True).stdout
    # Events for the excluded folder bring nothing back; an ordinary note still comes in.
    write(v / "Projects/Boat.md", "# Boat\n\nThe outboard engine needs spark plugs and oil.\n")
    write(v / "Projects/Car.md", "# Car\n\nThe outboard engine of the car.\n")
    write(v / "Garden.md", "# Garden\n\nThe outboard engine of the lawnmower.\n")
    _wait(lambda: d.call("search", {"query": "lawnmower", "minScore": 0})["hits"])
    time.sleep(1.0)
    refs = {h["reference"] for h in d.call("search", {"query": "outboard engine", "minScore": 0})["hits"]}
    assert refs == {"vault/Garden"}


def _nfd(text: str) -> str:
    import unicodedata

    return unicodedata.normalize("NFD", text)


def test_names_and_text_a_mac_wrote_in_nfd_are_found_as_typed(tmp_path: Path, serve_in_process: Any) -> None:
    """A Mac writes "ü" as "u" plus a combining mark (NFD) over SMB; a keyboard on Linux, an agent
    and a YAML file type the single letter (NFC). Both are one name and one word: get, related,
    links, the path filter, keywords, tags and exclusions meet them (each missed them before)."""
    v = tmp_path / "nfd"
    write(v / f"{_nfd('Übersicht')}.md", "# Umzug\n\nAlles zum Umzug in die neue Wohnung.\n")
    write(v / "Linker.md", "# Linker\n\nSiehe [[Übersicht]] für den Umzug.\n")
    write(v / _nfd("Bücher") / "Kapitel.md", "# Kapitel\n\nKapitel eins handelt vom Segeln.\n")
    write(v / "Pasted.md", _nfd("# Pasted\n\nDie Kündigung der Wohnung kam am Freitag. #küche\n"))
    write(v / _nfd("Privat Tagebücher") / "Geheim.md", "# Geheim\n\nzaubergeheim privat\n")
    server = serve_in_process(v, **{"index.exclude": "Privat Tagebücher/"})
    call = server.call
    got = call("get", {"reference": "vault/Übersicht"})  # typed in NFC
    assert "Umzug" in got["text"] and got["reference"] == f"vault/{_nfd('Übersicht')}"
    links = call("get", {"reference": "vault/Linker"})["links"]
    assert [link["target"] for link in links] == [f"vault/{_nfd('Übersicht')}"]
    assert call("related", {"reference": "vault/Übersicht"})["related"]
    assert call("why", {"reference": "vault/Übersicht", "query": "Umzug"})["indexed"]
    hits = call("search", {"query": "Kapitel Segeln", "pathPrefix": "Bücher/"})["hits"]
    assert [h["reference"] for h in hits] == [f"vault/{_nfd('Bücher')}/Kapitel"]
    assert call("search", {"query": "Kündigung"})["hits"][0]["reference"] == "vault/Pasted"
    assert [h["reference"] for h in call("search", {"query": "Wohnung", "tag": "küche"})["hits"]] == [
        "vault/Pasted"
    ]
    assert call("search", {"query": "zaubergeheim"})["hits"] == []  # the excluded folder stays out
    # A query pasted in NFD (from a Mac's file name) is the query typed in NFC: the same hits and
    # scores (the model read the split letters as other words, and another page came first).
    for op, text in (("search", "query"), ("recall", "message")):
        typed = call(op, {text: "Kündigung der Wohnung", "preview": True})
        pasted = call(op, {text: _nfd("Kündigung der Wohnung"), "preview": True})
        assert [(h["reference"], h["score"]) for h in pasted["hits"]] == [
            (h["reference"], h["score"]) for h in typed["hits"]
        ]
    assert (
        call("recall", {"message": "und?", "history": [_nfd("Die Kündigung der Wohnung")]})["hits"]
        == (call("recall", {"message": "und?", "history": ["Die Kündigung der Wohnung"]})["hits"])
    )
    why = call("why", {"reference": "vault/Pasted", "query": _nfd("Kündigung")})
    assert why == call("why", {"reference": "vault/Pasted", "query": "Kündigung"})


def test_note_md_and_note_upper_md_in_one_folder(tmp_path: Path, make_cfg: Any) -> None:
    """`Dup.md` and `Dup.MD` share one key: `.md` is the note, the twin is counted as skipped
    (the two overwrote each other's entry, one never searchable and never counted), by sweeps
    and by file events alike, and the twin's deletion leaves the note alone."""
    v = tmp_path / "twins"
    write(v / "Dup.md", "# Dup\n\nlowercase zauberlow\n")
    write(v / "Dup.MD", "# Dup\n\nuppercase zauberup\n")
    write(v / "Solo.MD", "# Solo\n\nonly an upper-case extension\n")
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        manifest = h.stores.manifest
        assert _keys(h) == {"vault/Dup", "vault/Solo"} and manifest.rel_of("vault/Dup") == "Dup.md"
        assert h.indexer.activity.scan_skipped == {
            "same name as another note but for the case of .md (not read)": 1
        }
        write(v / "Dup.MD", "# Dup\n\nuppercase edited zauberup\n")
        h.indexer.sweep(only=frozenset(), paths=[str(v / "Dup.MD")])  # its file event alone
        assert any("zauberlow" in c.text for c in manifest.chunks_of("vault/Dup"))
        (v / "Dup.MD").unlink()
        h.indexer.sweep(only=frozenset(), paths=[str(v / "Dup.MD")])
        assert any("zauberlow" in c.text for c in manifest.chunks_of("vault/Dup"))
    finally:
        h.close()


def test_notes_left_out_by_the_scan_are_listed_and_explained(tmp_path: Path, serve_in_process: Any) -> None:
    """A note the folder scan leaves out (too large) is listed as not searchable with its reason,
    and `why` says so (list left it out; why said "a sweep will pick it up", which never came)."""
    v = tmp_path / "sized"
    write(v / "Small.md", "# Small\n\nA short note about kayaks.\n")
    write(v / "Big.md", "# Big\n\n" + "kayak paddles and more. " * 200)
    server = serve_in_process(v, **{"index.maxFileBytes": 2000})
    notes = {n["reference"]: n for n in server.call("list", {"source": "vault"}, agent="claude")["notes"]}
    assert notes["vault/Small"]["indexed"] is True
    assert notes["vault/Big"]["indexed"] is False and "too large" in notes["vault/Big"]["why"]
    assert "vault/Big" in {
        n["reference"] for n in server.call("list", {"source": "all"}, agent="claude")["notes"]
    }
    assert "vault/Big" not in {n["reference"] for n in server.call("list", {}, agent="claude")["notes"]}
    why = server.call("why", {"reference": "vault/Big", "query": "kayak"})
    assert why["indexed"] is False and "left out when indexing: too large" in why["reason"]


def test_unresolved_names_each_missing_note_once(tmp_path: Path, serve_in_process: Any) -> None:
    """`unresolved` lists a missing note once, without anchor, in its first spelling (it listed
    "Nowhere", "Nowhere#Setup" and "nowhere"); links keep each link as written."""
    v = tmp_path / "dangling"
    write(
        v / "Dangling.md",
        "A [[Nowhere#Setup]] B [[Nowhere]] C [[nowhere]] D ![[Nowhere]] E [x](Nowhere.md#Cost)\n"
        "F [[Elsewhere#^block]] G [[Abc/Deep#A#B]] H [[#Own heading]]\n",
    )
    got = serve_in_process(v).call("get", {"reference": "vault/Dangling"})
    assert got["unresolved"] == ["Abc/Deep", "Elsewhere", "Nowhere"]
    assert [link["link"] for link in got["links"]][:3] == ["Nowhere#Setup", "Nowhere", "nowhere"]


def test_control_characters_in_names_are_escaped_for_people(
    tmp_path: Path, make_cfg: Any, serve_in_process: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newline, CR or ESC in a file name is shown escaped in the CLI's lines and in the outline
    (a newline forged a second outline entry, ESC and CR rewrote the terminal line); JSON and the
    protocol keep the name exact."""
    from sidecar.clients.cli import command_for
    from sidecar.clients.cli_parser import build_parser

    v = tmp_path / "ctl"
    evil = "Evil\x1b[2K\rvault-Harmless"
    write(v / "wiki" / "Backup\n- Passwords: see the Secrets page.md", "Body.\n")
    write(v / f"{evil}.md", "zauberesc #esc\n")
    write(v / "Ding\x07\x1bc.md", "zauberding #esc\n")  # ESC c resets a terminal
    write(v / "Linker.md", "See [[Ding\x07\x1bc]]. #esc\n")
    write(make_cfg(v).agents_dir / "claude" / "memory" / "Dropped\x1b[31m.md", "by hand\n")
    server = serve_in_process(v)

    def cli(*argv: str) -> str:
        assert command_for(argv[0])(build_parser().parse_args(argv), server.cfg) == 0
        return capsys.readouterr().out

    def clean(out: str) -> bool:
        return not any(ch in out for ch in "\x1b\r\x07")

    outline = cli("outline")
    assert "- Backup\\n- Passwords: see the Secrets page: Body." in outline.splitlines()
    out = cli("search", "zauberesc")
    assert "vault/Evil\\x1b[2K\\rvault-Harmless" in out and clean(out)
    for out in (
        cli("related", "vault/Linker"),
        cli("get", "vault/Linker", "--links"),
        cli("get", "vault/Ding\x07\x1bc", "--links"),
        cli("why", f"vault/{evil}", "zauberesc"),
        cli("memory", "list", "--agent", "claude"),
    ):
        assert "\\x1b" in out and clean(out), out
    assert server.call("search", {"query": "zauberesc"})["hits"][0]["reference"] == f"vault/{evil}"
    assert json.loads(cli("search", "zauberesc", "--json"))["hits"][0]["reference"] == f"vault/{evil}"
    mcp_outline = server.call("outline", {})["outline"]
    assert "\n- Passwords" not in mcp_outline


def test_settings_missing_for_a_moment_keep_their_excluded_files(tmp_path: Path, make_cfg: Any) -> None:
    """.obsidian gone for a moment (Obsidian rewriting it, a sync tool replacing the folder): the
    sweep its removal starts kept no rule of Obsidian's and indexed every excluded note at once.
    The rules read before stay until it is back or SETTINGS_GRACE_S passed, and status says so."""
    from sidecar.vault.ignore import SETTINGS_GRACE_S

    v = tmp_path / "v"
    write(v / "Notes/a.md", "# A\n\nan ordinary note\n")
    write(v / "Private/diary.md", "# Diary\n\nthe zeppelin over the lake\n")
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
    h = Harness(make_cfg(v), FakeEmbedder())
    now = [1000.0]
    h.indexer.ignore.clock = lambda: now[0]
    try:
        h.sweep()
        assert _keys(h) == {"vault/Notes/a"}
        (v / ".obsidian").rename(tmp_path / "aside")
        h.sweep()
        assert _keys(h) == {"vault/Notes/a"} and h.stores.bm25.search("zeppelin", 10) == []
        problem = h.indexer.problems.active_in("obsidian_settings")
        assert problem is not None and "is missing" in problem["error"], problem
        (tmp_path / "aside").rename(v / ".obsidian")
        h.sweep()
        assert h.indexer.problems.active_in("obsidian_settings") is None
        (v / ".obsidian").rename(tmp_path / "aside")
        now[0] += SETTINGS_GRACE_S - 1
        h.sweep()
        assert _keys(h) == {"vault/Notes/a"}  # the grace counts from this absence, not the first
        now[0] += SETTINGS_GRACE_S
        h.sweep()  # gone for good: the vault is followed without Obsidian's rules
        assert _keys(h) == {"vault/Notes/a", "vault/Private/diary"}
        assert h.indexer.problems.active_in("obsidian_settings") is None
    finally:
        h.close()


@pytest.mark.parametrize("went", ["while running", "while stopped"])
def test_settings_missing_across_a_restart_keep_their_excluded_files(
    tmp_path: Path, make_cfg: Any, went: str
) -> None:
    """.obsidian replaced by a sync tool while the daemon restarts (a login, an update, a crash):
    the keep lived in memory only, and the new process indexed every excluded note at once. The
    rules last read are kept in the manifest; a start with the file missing uses them for what is
    left of the grace (from when it went, or from the start if it went while no daemon ran)."""
    from sidecar.vault.ignore import SETTINGS_GRACE_S

    v = tmp_path / "v"
    write(v / "Notes/a.md", "# A\n\nan ordinary note\n")
    write(v / "Private/diary.md", "# Diary\n\nthe zeppelin over the lake\n")
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        if went == "while running":
            (v / ".obsidian").rename(tmp_path / "aside")
            h.sweep()
        h.close()
        if went == "while stopped":
            (v / ".obsidian").rename(tmp_path / "aside")
        h = Harness(h.cfg, FakeEmbedder())
        h.sweep()
        assert _keys(h) == {"vault/Notes/a"} and h.stores.bm25.search("zeppelin", 10) == []
        problem = h.indexer.problems.active_in("obsidian_settings")
        assert problem is not None and "is missing" in problem["error"], problem
        h.indexer.ignore.clock = lambda: time.monotonic() + SETTINGS_GRACE_S
        h.sweep()  # the grace over: followed without Obsidian's rules
        assert _keys(h) == {"vault/Notes/a", "vault/Private/diary"}
        h.close()
        h = Harness(h.cfg, FakeEmbedder())  # and a start after it has none of them either
        h.sweep()
        assert h.indexer.ignore.rules() == []
    finally:
        h.close()


def test_obsidian_settings_trouble_is_a_status_problem(tmp_path: Path, make_cfg: Any) -> None:
    """A malformed app.json and a filter that is no regular expression are problems in status (a
    log line alone left the user wondering why a folder excluded in Obsidian is searched), cleared
    once the file reads well again."""
    v = _exclusion_vault(tmp_path)
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        assert h.indexer.problems.active_in("obsidian_settings") is None
        write(v / ".obsidian/app.json", '{"userIgnoreFilters": ["Private/",')
        h.sweep()
        problem = h.indexer.problems.active_in("obsidian_settings")
        assert problem is not None and "cannot be read" in problem["error"]
        assert "the 2 rules read before stay" in problem["error"]
        assert h.indexer.excluded_by("vault/Private/diary") is not None  # the rules in force stay
        write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/", "/(unclosed/"]}))
        h.sweep()
        problem = h.indexer.problems.active_in("obsidian_settings")
        assert problem is not None and "/(unclosed/" in problem["error"]
        write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
        h.sweep()
        assert h.indexer.problems.active_in("obsidian_settings") is None
    finally:
        h.close()


def test_get_takes_a_notes_name_or_a_link_as_written(tmp_path: Path, serve_in_process: Any) -> None:
    """`get`, `related` and `why` take a note's name or a link as a note writes it, resolved as
    Obsidian resolves it (shortest path, then aliases); a heading or block anchor reads only that
    section. Each was "must start with vault/, wiki/ or memory/" or "no note" before."""
    v = tmp_path / "names"
    boat = (
        "---\naliases: [Kahn]\n---\n# Boat\n\nIntro.\n\n## Budget\n\nSails cost 900.\n\n"
        "### Spare parts\n\nRope.\n\n## Crew\n\nTwo people. ^crew-line\n\n- oars\n- life vests ^vests\n"
    )
    write(v / "Projects/Boat.md", boat)
    write(v / "Archive/Old/Boat.md", "# Boat\n\nThe old one.\n")
    write(v / "wiki/Glossary.md", "# Glossary\n\nSee [[Boat#Budget]].\n")
    call = serve_in_process(v).call

    got = call("get", {"reference": "Boat"})
    assert got["reference"] == "vault/Projects/Boat" and got["candidates"] == 2 and "range" not in got
    got = call("get", {"reference": "[[Boat#Budget|what it costs]]"})
    assert got["range"] == [8, 14] and got["text"].startswith("## Budget") and "Rope." in got["text"]
    assert "Crew" not in got["text"] and got["anchor"] == {"text": "Budget", "found": True}
    got = call("get", {"reference": "![[Projects/Boat#Budget#Spare parts]]"})
    assert got["text"] == "### Spare parts\n\nRope.\n" and "candidates" not in got
    assert call("get", {"reference": "Boat#^crew-line"})["text"] == "Two people. ^crew-line\n"
    assert call("get", {"reference": "vault/Projects/Boat#^vests"})["text"] == "- life vests ^vests\n"
    assert call("get", {"reference": "Kahn"})["reference"] == "vault/Projects/Boat"  # an alias
    assert call("get", {"reference": "Old/Boat"})["reference"] == "vault/Archive/Old/Boat"
    assert call("get", {"reference": "Glossary"})["reference"] == "wiki/Glossary"
    missing = call("get", {"reference": "Boat#Nowhere"})
    assert missing["anchor"] == {"text": "Nowhere", "found": False} and missing["text"] == boat
    # An explicit line range wins over the anchor.
    assert call("get", {"reference": "Boat#Crew", "startLine": 1, "endLine": 2})["range"] == [1, 2]
    assert call("related", {"reference": "[[Boat]]"})["reference"] == "vault/Projects/Boat"
    assert call("why", {"reference": "Boat", "query": "sails"})["indexed"]

    for ref, words in (
        ("Nowhere", "no note named 'Nowhere' in the vault or the wiki"),
        ("/etc/passwd", "absolute path"),
        ("../Boat", "leaves its root"),
        ("[[../../etc/passwd]]", "leaves its root"),
        ("vault/../Boat", "leaves its root"),
    ):
        with pytest.raises(RemoteError, match=re.escape(words)):
            call("get", {"reference": ref})
    with pytest.raises(RemoteError, match=re.escape("put that note's name before the '#'")):
        call("get", {"reference": "[[#Budget]]"})
    call("write", {"slug": "boat-fact", "content": "The boat is blue."}, agent="claude")
    with pytest.raises(RemoteError, match=re.escape("your memory note is memory/boat-fact")):
        call("get", {"reference": "boat-fact"}, agent="claude")
    with pytest.raises(RemoteError, match=r"no note named 'boat-fact' in the vault or the wiki \(a"):
        call("get", {"reference": "boat-fact"}, agent="codex")  # not another agent's


def test_a_link_to_a_heading_or_block_that_is_not_there_is_marked(
    tmp_path: Path, serve_in_process: Any
) -> None:
    """`get`'s links say whether the heading or block a link names is in its note now
    (`anchor_found`), as Obsidian marks such a link: `[[Boat#Nowhere]]` was listed as a plain
    link to the note. The CLI says "heading not found" / "block not found", the MCP text names
    the links; a link without anchor or to no note has no `anchor_found`."""
    from sidecar.clients.cli_hits import render_links
    from sidecar.clients.mcp_calls import ToolCalls

    v = tmp_path / "anchors"
    write(v / "Boat.md", "# Boat\n\n## Budget\n\nSails cost 900.\n\n- oars ^vests\n")
    write(
        v / "Log.md",
        "# Log\n\n## Today\n\n[[Boat#Budget]] [[Boat#Nowhere]] [[Boat#^vests]] [[Boat#^gone]]\n"
        "[[#Today]] [[#Tomorrow]] [[Boat]] [[Nirgends#Budget]] [[boat#budget]]\n",
    )
    server = serve_in_process(v)
    got = server.call("get", {"reference": "vault/Log"})
    assert [(x["link"], x.get("anchor_found")) for x in got["links"]] == [
        ("Boat#Budget", True),
        ("Boat#Nowhere", False),
        ("Boat#^vests", True),
        ("Boat#^gone", False),
        ("#Today", True),
        ("#Tomorrow", False),
        ("Boat", None),
        ("Nirgends#Budget", None),
        ("boat#budget", True),  # headings match without regard to case, as in Obsidian
    ]
    shown = render_links(got)
    assert "line 5: links to vault/Boat #Nowhere (heading not found)" in shown
    assert "line 5: links to vault/Boat #^gone (block not found)" in shown
    assert "#Budget (" not in shown and "#^vests (" not in shown
    text, _ = ToolCalls(server.cfg.socket_path, "claude").tools["memory_get"]({"reference": "vault/Log"})
    assert text.endswith(
        "Links to a heading or block that is not there: Boat#Nowhere (line 5: heading not found), "
        "Boat#^gone (line 5: block not found), #Tomorrow (line 6: heading not found)"
    )


def test_the_anchor_lookup_is_bounded(tmp_path: Path, serve_in_process: Any, monkeypatch: Any) -> None:
    """`get` read every linked note whole for its anchors and searched it once per anchor, on
    every call (200 block links into a 560 KB note: 3 s a get, past a client's timeout). Now the
    reads share one byte budget and one deadline (the links past them have no `anchor_found`:
    not checked), and a page read on (`startLine` past 1) looks up nothing."""
    from sidecar.clients.mcp_calls import ToolCalls
    from sidecar.daemon import anchors

    v = tmp_path / "bounded"
    write(v / "Big.md", "# Big\n\n" + "".join(f"Line {n} ^b{n}\n\n" for n in range(400)))
    write(v / "Small.md", "# Small\n\n## Kopf\n\nText.\n")
    write(v / "Third.md", "# Third\n\nx ^t1\n")
    links = " ".join(f"[[Big#^b{n}]]" for n in range(0, 400, 2)) + " [[Big#^none]]"
    write(v / "Log.md", f"# Log\n\n{links}\n\n[[Small#Kopf]] [[Small#Fuss]]\n\n[[Third#^t1]] [[#Log]]\n")
    server = serve_in_process(v)
    got = server.call("get", {"reference": "vault/Log"})
    found = [x.get("anchor_found") for x in got["links"]]
    assert found == [True] * 200 + [False, True, False, True, True]  # each note looked through once
    # Big is past the bytes left to read: its links are not checked, the smaller notes still are
    # (and Log's own, too large to parse within them, not).
    monkeypatch.setattr(anchors, "ANCHOR_BYTES", 1000)
    got = server.call("get", {"reference": "vault/Log"})
    assert [x.get("anchor_found") for x in got["links"]] == [None] * 201 + [True, False, True, None]
    monkeypatch.undo()
    # The deadline: each look at the clock 0.4 s later; past 1 s the notes left are not read.
    ticks = iter(range(100))
    server.handlers.anchor_clock = lambda: next(ticks) * 0.4
    got = server.call("get", {"reference": "vault/Log"})
    assert [x.get("anchor_found") for x in got["links"]][-4:] == [None, None, None, None]
    assert got["links"][0]["anchor_found"] is True
    # A page read on: no lookup, no line in memory_get's text; the first page has them.
    server.handlers.anchor_clock = time.monotonic
    got = server.call("get", {"reference": "vault/Log", "startLine": 3})
    assert not any("anchor_found" in x for x in got["links"])
    get = ToolCalls(server.cfg.socket_path, "claude").tools["memory_get"]
    assert "not there: Big#^none" in get({"reference": "vault/Log", "startLine": 1})[0]
    assert "not there" not in get({"reference": "vault/Log", "startLine": 3})[0]


def test_links_into_a_drawing_or_a_hidden_note_are_not_checked(tmp_path: Path, serve_in_process: Any) -> None:
    """Excalidraw links name a drawing's elements, groups, areas and frames (`#^group=ID`,
    `#^abc123` of a rectangle), no block of its text: they were all "block not found". A note
    `index.exclude` leaves out (by the rules in force now, not as of the last sweep) and another
    agent's memory note are not looked into either: no `anchor_found`."""
    v = tmp_path / "drawn"
    write(
        v / "Plan.excalidraw.md",
        "---\nexcalidraw-plugin: parsed\n---\n# Excalidraw Data\n## Text Elements\nTor ^t0r1\n\n"
        "## Element Links\ne1f2g3: [[Boat]]\n\n%%\n## Drawing\n```compressed-json\nN4Ig\n```\n%%\n",
    )
    write(v / "Boat.md", "# Boat\n\n## Budget\n\nSails. ^sails\n")
    write(v / "Privat/Geheim.md", "# Geheim\n\n## Plan\n\nNur für mich.\n")
    write(v / "Später/Notiz.md", "# Notiz\n\n## Teil\n\nText.\n")
    write(
        v / "Log.md",
        "# Log\n\n[[Plan.excalidraw#^group=g1]] [[Plan.excalidraw#^area=a1]] [[Plan.excalidraw#^frame=f1]]\n"
        "[[Plan.excalidraw#^clippedframe=f1]] [[Plan.excalidraw#^rect99]] [[Plan.excalidraw#Nirgends]]\n"
        "[[Boat#^group=g1]] [[Boat#^sails]]\n[[Geheim#Plan]] [[Notiz#Teil]]\n",
    )
    server = serve_in_process(v, **{"index.exclude": "Privat/"})
    got = server.call("get", {"reference": "vault/Log"})
    assert [(x["link"], x.get("anchor_found")) for x in got["links"]] == [
        ("Plan.excalidraw#^group=g1", None),
        ("Plan.excalidraw#^area=a1", None),
        ("Plan.excalidraw#^frame=f1", None),
        ("Plan.excalidraw#^clippedframe=f1", None),
        ("Plan.excalidraw#^rect99", None),
        ("Plan.excalidraw#Nirgends", None),
        ("Boat#^group=g1", None),
        ("Boat#^sails", True),
        ("Geheim#Plan", None),  # excluded: never read, its link still names it
        ("Notiz#Teil", True),
    ]
    # The drawing's element links are links, its ids and that list no text.
    drawn = server.call("get", {"reference": "vault/Plan.excalidraw"})
    assert [x["target"] for x in drawn["links"]] == ["vault/Boat"]
    text = server.harness.stores.manifest.chunks_of("vault/Plan.excalidraw")[0].text
    assert "Tor" in text and not any(w in text for w in ("t0r1", "e1f2g3"))
    # Excluded since the last sweep (a reload): the rules in force now are asked.
    server.harness.indexer.set_excludes(["Privat/", "Später/"], obsidian=True)
    got = server.call("get", {"reference": "vault/Log"})
    assert got["links"][-1]["link"] == "Notiz#Teil" and "anchor_found" not in got["links"][-1]
    # Another agent's memory note: no target for this agent, nothing looked into. (A memory
    # note's links resolve in its own agent's inbox only: the row is set as if one did not.)
    server.call("write", {"slug": "boot", "content": "# Boot\n\n## Segel\n\nBlau.\n"}, agent="codex")
    server.call("write", {"slug": "log", "content": "See [[boot#Segel]]."}, agent="claude")
    server.call("index", {})
    with server.harness.stores.manifest.transaction() as db:
        edit_links(db, "UPDATE links SET dst = 'memory/codex/boot' WHERE src = 'memory/claude/log'")
    seen = server.call("get", {"reference": "memory/claude/log"})  # the CLI sees every note
    assert seen["links"][0]["target"] == "memory/codex/boot"
    mine = server.call("get", {"reference": "memory/log"}, agent="claude")
    assert [(x["target"], x.get("anchor_found")) for x in mine["links"]] == [(None, None)]


def test_a_bare_name_after_vault_or_wiki_is_resolved_within_that_root(
    tmp_path: Path, serve_in_process: Any
) -> None:
    """`vault/Boat` and `wiki/Glossary` with no note at that path name the note a bare name opens,
    within that root only, with the same candidates (they said "no note" while `Boat` worked); an
    exact path still wins, and neither reaches another root or a memory note."""
    v = tmp_path / "rooted"
    write(v / "Projects/Boat.md", "# Boat\n\n## Budget\n\nSails cost 900.\n")
    write(v / "Archive/Old/Boat.md", "# Boat\n\nThe old one.\n")
    write(v / "Top.md", "# Top\n\nAt the top.\n")
    write(v / "wiki/Terms/Glossary.md", "# Glossary\n\nWords.\n")
    write(v / "wiki/Sails.md", "# Sails\n\nIn the wiki only.\n")
    call = serve_in_process(v).call

    got = call("get", {"reference": "vault/Boat"})
    assert got["reference"] == "vault/Projects/Boat" and got["candidates"] == 2
    assert call("get", {"reference": "vault/Old/Boat"})["reference"] == "vault/Archive/Old/Boat"
    assert call("get", {"reference": "vault/Boat#Budget"})["text"].startswith("## Budget")
    got = call("get", {"reference": "wiki/Glossary"})
    assert got["reference"] == "wiki/Terms/Glossary" and "candidates" not in got
    assert call("get", {"reference": "vault/Top"})["reference"] == "vault/Top"  # the exact path
    assert call("related", {"reference": "vault/Boat"})["reference"] == "vault/Projects/Boat"
    assert call("why", {"reference": "wiki/Glossary", "query": "words"})["indexed"]
    call("write", {"slug": "keel", "content": "The keel is iron."}, agent="claude")
    for ref in ("vault/Sails", "wiki/Boat", "vault/Glossary", "vault/keel", "wiki/keel"):
        with pytest.raises(RemoteError, match="no note"):  # another root's note, a memory note
            call("get", {"reference": ref}, agent="claude")


def test_file_names_properties_and_dated_links_as_obsidian_shows_them(
    tmp_path: Path, serve_in_process: Any
) -> None:
    """A note whose title property differs from its file name is found by the file name (a web
    clipping's); a link in a property is a link (backlinks, related); a date property linking the
    daily note dates the note. Each was missed before."""
    v = tmp_path / "props"
    write(
        v / "Clippings/Rezept Linsensuppe.md",
        "---\ntitle: Schwäbische Linsen mit Spätzle\n---\nOmas Rezept mit Alblinsen.\n",
    )
    write(
        v / "Meetings/Kickoff.md",
        '---\nproject: "[[Projekt Alpha]]"\ndate: "[[2026-11-19]]"\n---\nWe agreed on the plan.\n',
    )
    write(v / "Projekt Alpha.md", "# Projekt Alpha\n\nThe migration project.\n")
    call = serve_in_process(v, model=KEYWORD_ONLY).call
    hits = call("search", {"query": "Linsensuppe"})["hits"]
    assert hits and hits[0]["reference"] == "vault/Clippings/Rezept Linsensuppe"
    assert [b["reference"] for b in call("get", {"reference": "vault/Projekt Alpha"})["backlinks"]] == [
        "vault/Meetings/Kickoff"
    ]
    assert (
        call("related", {"reference": "vault/Meetings/Kickoff"})["related"][0]["reference"]
        == "vault/Projekt Alpha"
    )
    dated = call("search", {"query": "plan since:2026-11-19 until:2026-11-19", "minScore": 0})["hits"]
    assert [h["reference"] for h in dated] == ["vault/Meetings/Kickoff"]


def test_tags_and_aliases_keys_in_any_case_are_read_as_obsidian_reads_them(in_process: Any) -> None:
    """Imports write "Tags:", "TAGS:", "Aliases:" (Obsidian reads the keys in any case): they were
    ignored, so the tag filter and alias links missed those notes. An alias string names are
    separated by commas only ("Grosse Halle, Saal" is two names; a space splits none)."""
    vault = in_process.cfg.vault.path
    (vault / "Gross.md").write_text("---\nTAGS: grossschrift\nAliases: [GrossAlias]\n---\nText zwei\n")
    (vault / "Halle.md").write_text(
        "---\nTags: ['#hashfm', Gross/Klein]\nALIAS: Grosse Halle, Saal\n---\nText\n"
    )
    in_process.call("index")

    def tagged(tag: str) -> list[str]:
        return [
            h["reference"]
            for h in in_process.call("search", {"query": "Text", "tag": tag, "minScore": 0})["hits"]
        ]

    assert tagged("grossschrift") == ["vault/Gross"]
    assert tagged("hashfm") == tagged("gross") == ["vault/Halle"]
    assert in_process.call("get", {"reference": "GrossAlias"})["reference"] == "vault/Gross"
    for name in ("Grosse Halle", "Saal"):
        assert in_process.call("get", {"reference": name})["reference"] == "vault/Halle", name


def test_status_names_notes_whose_front_matter_does_not_read(in_process: Any) -> None:
    """A note whose front matter is not valid YAML is indexed by its text alone (no title, tags,
    aliases, dates): status says which, and why (it said nothing, and `get "Alias"` just failed).
    Memory notes are not named (health must not show one agent's notes to another)."""
    from sidecar.clients.cli_render import render_status

    vault = in_process.cfg.vault.path
    (vault / "Broken.md").write_text("---\naliases: [Boot\ntags: x\n---\n# Broken\n\nText.\n")
    (vault / "Fine.md").write_text("---\naliases: [Boot]\n---\n# Fine\n")
    inbox = in_process.cfg.agents_dir / "zz" / "memory"
    inbox.mkdir(parents=True)
    (inbox / "bad.md").write_text("---\na: [\n---\nbody\n")
    in_process.call("index")
    h = in_process.call("health")
    unread = h["index"]["front_matter_unread"]
    assert unread["notes"] == 1 and unread["examples"][0]["reference"] == "vault/Broken"
    assert unread["examples"][0]["reason"].startswith("invalid YAML in front matter")
    assert (
        "Front matter not read: 1 note (found by their text, without their title, tags, aliases and "
        "dates): vault/Broken (invalid YAML" in render_status(h)
    )
    (vault / "Broken.md").write_text("---\naliases: [Boot]\n---\n# Broken\n")
    in_process.call("index")
    h = in_process.call("health")
    assert h["index"]["front_matter_unread"]["notes"] == 0 and "Front matter not read" not in render_status(h)


@pytest.mark.parametrize("watch", ["recursive", "folder by folder"])
def test_excluded_files_changed_in_obsidian_apply_at_once(
    daemon_factory: Any, tmp_path: Path, watch: str
) -> None:
    """A folder added to Obsidian's Excluded files leaves search within seconds, and comes back
    when removed again: app.json's change is a file event that sweeps every root (it waited for
    the next periodic sweep, ten minutes by default), also where the watch goes folder by folder
    (a folder symlink in the vault), whose walk left .obsidian/ out. The settings folder moved
    away sweeps too: its rules stay for a while (status says so), not dropped at once."""
    v = tmp_path / "v"
    write(v / "Private/diary.md", "# Diary\n\nthe zeppelin over the lake\n")
    write(v / "Keep.md", "# Keep\n\nnothing else\n")
    write(v / ".obsidian/workspace.json", "{}")  # a vault Obsidian opened: the folder is there
    if watch == "folder by folder":
        (v / "Shortcut").symlink_to(v / "Private")
    d = daemon_factory(v, keyword_only=True).start()
    d.wait_for(lambda h: h["index"]["files"] == 2)

    def found() -> bool:
        return bool(d.call("search", {"query": "zeppelin"})["hits"])

    assert found()
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
    deadline = time.monotonic() + 20
    while found():
        assert time.monotonic() < deadline, "the excluded note is still found"
        time.sleep(0.2)
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": []}))
    deadline = time.monotonic() + 20
    while not found():
        assert time.monotonic() < deadline, "the note is not found again"
        time.sleep(0.2)
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
    _wait(lambda: not found(), 20)
    (v / ".obsidian").rename(tmp_path / "settings-kept-aside")  # one event, for the folder

    def missing() -> bool:
        active = d.health()["problems"]["active"]
        return any(p["area"] == "obsidian_settings" and "is missing" in p["error"] for p in active)

    _wait(missing, 20)
    assert not found()


@pytest.mark.parametrize(
    ("fmt", "path", "day"),
    [
        ("DD.MM.YYYY", "Journal/15.11.2025", "2025-11-15"),
        ("DD.MM.YYYY", "Journal/15.11.2025 Weihnachtsmarkt", "2025-11-15"),
        ("D.M.YY", "3.2.26", "2026-02-03"),
        ("YYYY/MM/YYYY-MM-DD", "Daily/2025/12/2025-12-24", "2025-12-24"),
        ("YYYY/MM/[Tag] DD", "Journal/2025/12/Tag 24", "2025-12-24"),
        ("dddd, D. MMMM YYYY", "Montag, 1. Dezember 2025", "2025-12-01"),
        ("dddd, MMMM Do YYYY", "Monday, December 1st 2025", "2025-12-01"),
        ("DD MMM YYYY", "03 Mär 2025", "2025-03-03"),
        ("DD.MM.YYYY", "31.02.2026", ""),  # no such day
        ("DD.MM.YYYY", "115.11.2025", ""),  # another number
        ("YYYY/MM/YYYY-MM-DD", "2025-12-24", ""),  # the folders are part of the format
        ("DD MMMM YYYY", "03 Quark 2025", ""),  # no month
    ],
)
def test_daily_note_formats_read_a_notes_day(fmt: str, path: str, day: str) -> None:
    """Moment.js formats as Obsidian's Daily notes and Periodic Notes write them name a note's day."""
    assert day_of_path(path, (fmt,)) == day


@pytest.mark.parametrize("fmt", ["gggg-[W]ww", "YYYY-MM", "YYYY-[Q]Q", "YYYY-MM-DD HH", ""])
def test_formats_that_name_no_day_are_not_used(fmt: str) -> None:
    """A weekly, monthly or quarterly note's format, or one with tokens not read, dates nothing."""
    assert compile_format(fmt) is None


def test_daily_notes_named_in_the_vaults_format_are_dated(tmp_path: Path, serve_in_process: Any) -> None:
    """Daily notes named in the format Obsidian's settings give (DD.MM.YYYY) are dated by their
    name as soon as a sweep reads the setting, notes indexed before it included, without reading or
    embedding them again; a Periodic Notes format counts too, and a removed setting no longer does
    (they took the day of their last change)."""
    v = tmp_path / "german"
    write(v / "Journal/15.11.2025.md", "# Samstag\n\nWeihnachtsmarkt mit Anna.\n")
    write(v / "Journal/2025/12/Tag 24.md", "# Heiligabend\n\nWeihnachtsmarkt am Dom.\n")
    write(v / "Ideen.md", "# Ideen\n\nWeihnachtsmarkt Stand planen.\n")
    server = serve_in_process(v, model=KEYWORD_ONLY)
    h = server.harness

    def dated(query: str) -> set[str]:
        return {hit["reference"] for hit in server.call("search", {"query": query, "minScore": 0})["hits"]}

    assert dated("Weihnachtsmarkt until:2025-12-31") == set()  # all dated today, by their mtime
    indexed = h.stores.manifest.read("SELECT key, indexed_at FROM files")
    write(v / ".obsidian/daily-notes.json", json.dumps({"folder": "Journal", "format": "DD.MM.YYYY"}))
    h.sweep()
    assert dated("Weihnachtsmarkt until:2025-12-31") == {"vault/Journal/15.11.2025"}
    assert dated("Weihnachtsmarkt since:2025-11-15 until:2025-11-15") == {"vault/Journal/15.11.2025"}
    periodic = v / ".obsidian/plugins/periodic-notes/data.json"
    write(periodic, json.dumps({"daily": {"enabled": True, "format": "YYYY/MM/[Tag] DD", "folder": ""}}))
    h.sweep()
    assert dated("Weihnachtsmarkt until:2025-12-31") == {
        "vault/Journal/15.11.2025",
        "vault/Journal/2025/12/Tag 24",
    }
    assert h.stores.manifest.read("SELECT key, indexed_at FROM files") == indexed  # nothing re-read
    (v / ".obsidian/daily-notes.json").unlink()
    periodic.unlink()
    h.sweep()
    assert dated("Weihnachtsmarkt until:2025-12-31") == set()


def test_links_to_excluded_notes_resolve_and_their_names_are_found(
    tmp_path: Path, serve_in_process: Any
) -> None:
    """A link to a note in a folder Obsidian's Excluded files (or index.exclude) leaves out resolves
    to it, marked excluded, and `get`/`why` find it by name, while search never returns it (it was
    listed as unresolved with no target, and its name named no note)."""
    v = tmp_path / "linked"
    write(v / "Notes/Links Test.md", "See [[2023 Review]], [[tmp-scratch]] and [[Nicht vorhanden]].\n")
    write(v / "Archive/2023 Review.md", "# 2023 Review\n\nJahresrückblick mit Kranichflug.\n")
    write(v / "Inbox/tmp-scratch.md", "Kranichflug scratch.\n")
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Archive/"]}))
    server = serve_in_process(v, model=KEYWORD_ONLY, **{"index.exclude": "Inbox/tmp-*"})
    call = server.call
    got = call("get", {"reference": "vault/Notes/Links Test"})
    targets = {link["link"]: (link["target"], link.get("excluded")) for link in got["links"]}
    assert targets == {
        "2023 Review": ("vault/Archive/2023 Review", "Obsidian excluded files: Archive/"),
        "tmp-scratch": ("vault/Inbox/tmp-scratch", "index.exclude: Inbox/tmp-*"),
        "Nicht vorhanden": (None, None),
    }
    assert got["unresolved"] == ["Nicht vorhanden"]
    review = call("get", {"reference": "2023 Review"})
    assert review["reference"] == "vault/Archive/2023 Review" and "Kranichflug" in review["text"]
    assert review["indexed"] is False and review["excluded"] == "Obsidian excluded files: Archive/"
    assert [b["reference"] for b in review["backlinks"]] == ["vault/Notes/Links Test"]
    assert "excluded by Obsidian excluded files: Archive/" in resolved_notes("2023 Review", review)[0]
    why = call("why", {"reference": "[[tmp-scratch]]", "query": "Kranichflug"})
    assert why["indexed"] is False and "index.exclude: Inbox/tmp-*" in why["reason"]
    assert call("search", {"query": "Kranichflug", "minScore": 0})["hits"] == []
    # The rule goes: the note is indexed and found, the link still means it, no longer excluded.
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": []}))
    server.harness.sweep()
    links = call("get", {"reference": "vault/Notes/Links Test"})["links"]
    assert (links[0]["target"], links[0].get("excluded")) == ("vault/Archive/2023 Review", None)
    hits = call("search", {"query": "Kranichflug", "minScore": 0})["hits"]
    assert [h["reference"] for h in hits] == ["vault/Archive/2023 Review"]
    # And comes back: excluded again, still the link's target.
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Archive/"]}))
    server.harness.sweep()
    links = call("get", {"reference": "vault/Notes/Links Test"})["links"]
    assert links[0]["target"] == "vault/Archive/2023 Review" and links[0]["excluded"]
    assert call("search", {"query": "Kranichflug", "minScore": 0})["hits"] == []


def test_links_follow_excluded_notes_that_file_events_bring(tmp_path: Path, serve_in_process: Any) -> None:
    """A note made, renamed, moved in or deleted in an excluded folder is a link's target (marked
    excluded), or none, as soon as the file events of the change are looked at, without its text
    being indexed (links to it stayed unresolved until the next full sweep, ten minutes by
    default); a folder moved into the excluded one leaves search and stays the links' target."""
    v = tmp_path / "linked"
    write(v / "Notes/Hub.md", "See [[2024 Review]] and [[Plan]].\n")
    write(v / "Projects/Plan.md", "# Plan\n\nSegelflug im Mai.\n")
    write(v / "Archive/old.md", "# Old\n")
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Archive/"]}))
    server = serve_in_process(v, model=KEYWORD_ONLY)
    call, indexer = server.call, server.harness.indexer

    def events(*paths: Path) -> None:
        indexer.sweep(only=frozenset(), paths={str(p) for p in paths})

    def targets() -> dict[str, tuple[str | None, str | None]]:
        links = call("get", {"reference": "vault/Notes/Hub"})["links"]
        return {x["link"]: (x["target"], x.get("excluded")) for x in links}

    rule = "Obsidian excluded files: Archive/"
    assert targets()["2024 Review"] == (None, None)
    review = write(v / "Archive/2024 Review.md", "# 2024 Review\n\nKranichflug.\n")
    events(review)
    assert targets()["2024 Review"] == ("vault/Archive/2024 Review", rule)
    assert call("search", {"query": "Kranichflug", "minScore": 0})["hits"] == []
    (v / "Archive/Years").mkdir()
    moved = review.rename(v / "Archive/Years/2024 Review.md")
    events(review, moved)
    assert targets()["2024 Review"] == ("vault/Archive/Years/2024 Review", rule)
    (v / "Projects").rename(v / "Archive/Projects")  # a folder moved in
    events(v / "Projects", v / "Archive/Projects")
    assert targets()["Plan"] == ("vault/Archive/Projects/Plan", rule)
    assert call("search", {"query": "Segelflug", "minScore": 0})["hits"] == []
    moved.unlink()
    events(moved)
    assert targets()["2024 Review"] == (None, None)
    (v / "Archive/Projects").rename(v / "Archive/Elsewhere")  # renamed within the excluded folder
    events(v / "Archive/Projects", v / "Archive/Elsewhere")
    assert targets()["Plan"] == ("vault/Archive/Elsewhere/Plan", rule)
    server.harness.sweep()  # a full sweep finds the same
    assert targets() == {"2024 Review": (None, None), "Plan": ("vault/Archive/Elsewhere/Plan", rule)}


def test_daemon_a_folder_moved_into_an_excluded_folder(daemon_factory: Any, tmp_path: Path) -> None:
    """The hostile test's case, with the real watcher: most of the vault moved (renamed) into a
    folder Obsidian excludes leaves search within seconds and holds nothing (it was "lost 10 of 18
    indexed notes", searchable under the old paths for 6 h); a note then made there is a link's
    target. A copy of most notes there (6 of 8), the originals deleted, is still held."""
    v = tmp_path / "v"
    for i in range(10):
        write(v / f"Projects/p{i}.md", f"# P{i}\n\nxylophone movable note {i}\n")
    for i in range(6):
        write(v / f"Copied/c{i}.md", f"# C{i}\n\nmarimba copied note {i}\n")
    write(v / "Hub.md", "# Hub\n\nSee [[Memo]].\n")
    write(v / "Keep.md", "# Keep\n\nnothing else\n")
    write(v / "Private/diary.md", "# Diary\n")
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
    d = daemon_factory(v, keyword_only=True).start()
    d.wait_for(lambda h: h["index"]["files"] == 18)
    assert d.call("search", {"query": "xylophone"})["hits"]
    (v / "Projects").rename(v / "Private/Projects")
    _wait(lambda: not d.call("search", {"query": "xylophone"})["hits"], 20)
    d.wait_for(lambda h: h["index"]["files"] == 8, timeout=20)  # 10 of 18 moved: past the share
    vault = next(r for r in d.health()["roots"] if r["name"] == "vault")
    assert vault["hold"] is None and vault["mode"] == "events", vault
    write(v / "Private/Memo.md", "# Memo\n")
    _wait(lambda: d.call("get", {"reference": "vault/Hub"})["links"][0]["target"] == "vault/Private/Memo", 20)
    shutil.copytree(v / "Copied", v / "Private/Copied")  # copy2: the same bytes and mtimes
    shutil.rmtree(v / "Copied")

    def held() -> dict[str, Any] | None:
        return next(r for r in d.health()["roots"] if r["name"] == "vault")["hold"]

    _wait(lambda: held() is not None, 20)
    assert held()["kind"] == "mass"  # type: ignore[index]
    assert d.call("search", {"query": "marimba"})["hits"]


def test_the_days_of_notes_are_read_once_per_change(tmp_path: Path, make_cfg: Any) -> None:
    """A time phrase's list of dated notes is kept until the manifest is written or the daily-note
    formats change (every such query parsed every note's front matter again)."""
    v = tmp_path / "v"
    write(v / "Daily/2026-11-20.md", "# Day\n\nwalked\n")
    write(v / "Journal/21.11.2026.md", "# Tag\n\nran\n")
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        manifest = h.stores.manifest
        first = manifest.note_days()
        assert {n.key: n.date for n in first} == {
            "vault/Daily/2026-11-20": "2026-11-20",
            "vault/Journal/21.11.2026": "",
        }
        again = manifest.note_days()
        assert again == first and all(a is b for a, b in zip(again, first, strict=True))
        manifest.day_formats = (("DD.MM.YYYY", ""),)
        assert {n.key: n.date for n in manifest.note_days()}["vault/Journal/21.11.2026"] == "2026-11-21"
        write(v / "Daily/2026-11-22.md", "# Day\n\nswam\n")
        h.sweep()
        assert "vault/Daily/2026-11-22" in {n.key for n in manifest.note_days()}
    finally:
        h.close()


@pytest.mark.parametrize(
    ("properties", "day"),
    [
        ({"date": "2026-11-19"}, "2026-11-19"),
        ({"date": "2026-11-19T10:00"}, "2026-11-19"),
        ({"date": ["2026-11-24", "2026-11-25"]}, "2026-11-24"),  # a list: its first day
        ({"date": [["2026-11-25"]]}, "2026-11-25"),  # date: [[2026-11-25]] unquoted, as YAML reads it
        ({"date": "[[2026-11-19|Thursday]]"}, "2026-11-19"),
        ({"Date": "2026-11-26"}, "2026-11-26"),
        ({"date": "2026/11/27"}, "2026-11-27"),
        ({"date": "24.11.2026"}, "2026-11-24"),  # the vault's daily-note format
        ({"date": "2026-13-40"}, ""),
        ({"date": "soon", "created": "2026-11-01"}, "2026-11-01"),
    ],
)
def test_date_properties_as_vaults_write_them(properties: dict[str, Any], day: str) -> None:
    """A note's day from its properties in the forms Obsidian vaults hold (a list, an unquoted link
    to the daily note, a capital key, slashes, the vault's own daily format); only a valid day."""
    from sidecar.stores.noteday import note_date

    assert note_date(json.dumps(properties), "vault/Notes/x", (("DD.MM.YYYY", ""),)) == day
    # A memory note's own write stamps date nothing; its 'date' does.
    assert note_date(json.dumps({"created": "2026-11-01"}), "memory/a/x") == ""
    assert note_date(json.dumps({"date": "2026-11-02"}), "memory/a/x") == "2026-11-02"


@pytest.mark.parametrize(
    ("name", "day"),
    [
        ("99-12-31", "1999-12-31"),
        ("69-01-02", "1969-01-02"),
        ("68-01-02", "2068-01-02"),
        ("26-11-05", "2026-11-05"),
    ],
)
def test_a_two_digit_year_reads_as_moment_reads_it(name: str, day: str) -> None:
    """YY is 2000-2068 or 1969-1999, as Moment.js (Obsidian's parser) reads it ('99' was 2099)."""
    assert day_of_path(name, ("YY-MM-DD",)) == day


def test_daily_notes_are_those_named_in_their_folder(tmp_path: Path, serve_in_process: Any) -> None:
    """A name in the vault's daily-note format dates a note only inside the daily-note folder
    ("Projects/12.11.2025 Meeting" was a daily note); a period lists its notes newest day first, a
    note whose date property gives another day than its name by the property's day (it was taken
    for a daily note of its name's);
    status and doctor say which format was read and from where, and an unreadable settings file
    is a problem (it was a log line)."""
    import datetime as dt

    from sidecar.clients.cli_render import render_status

    v = tmp_path / "journal"
    write(v / "Journal/15.11.2025.md", "# Samstag\n\nMarkt.\n")
    write(v / "Journal/Archiv/14.11.2025.md", "# Freitag\n\nArbeit.\n")
    write(v / "Journal/13.11.2025.md", "---\ndate: 2025-11-13\n---\n# Donnerstag\n\nSport.\n")
    write(v / "Projects/12.11.2025 Meeting.md", "# Meeting\n\nAgenda.\n")
    write(v / "Notes/2025-11-01 call.md", "---\ndate: 2025-11-16\n---\n# Call\n\nNotes.\n")
    settings = v / ".obsidian/daily-notes.json"
    write(settings, json.dumps({"folder": "Journal/", "format": "DD.MM.YYYY"}))
    server = serve_in_process(v, model=KEYWORD_ONLY)
    h = server.harness
    days = {n.key: (n.date, n.named) for n in h.stores.manifest.note_days()}
    assert days["vault/Journal/15.11.2025"] == ("2025-11-15", True)
    assert days["vault/Journal/Archiv/14.11.2025"] == ("2025-11-14", True)  # below the folder too
    assert days["vault/Journal/13.11.2025"] == ("2025-11-13", True)  # its property says the same day
    assert days["vault/Projects/12.11.2025 Meeting"] == ("", False)  # not in the daily-note folder
    assert days["vault/Notes/2025-11-01 call"] == ("2025-11-16", False)  # its property gave the day
    server.handlers.retriever.today = lambda: dt.date(2025, 11, 20)
    listed = [
        hit["reference"] for hit in server.call("search", {"query": "what did I do last week?"})["hits"]
    ]
    assert listed == [
        "vault/Notes/2025-11-01 call",  # the 16th, by its property
        "vault/Journal/15.11.2025",
        "vault/Journal/Archiv/14.11.2025",
        "vault/Journal/13.11.2025",
    ]
    health = server.call("health")
    assert health["daily_notes"] == [
        {"format": "DD.MM.YYYY", "folder": "Journal", "file": ".obsidian/daily-notes.json"}
    ]
    assert "Daily notes: DD.MM.YYYY in Journal/ (from .obsidian/daily-notes.json)" in render_status(health)
    from sidecar.clients.doctor import check_daily_notes

    doctor = check_daily_notes(server.cfg)
    assert doctor.ok and not doctor.warning and "DD.MM.YYYY in Journal/" in doctor.verdict
    write(settings, '{"folder": "Journal", "format": ')
    h.sweep()
    problem = h.indexer.problems.active_in("obsidian_settings")
    assert problem is not None and "daily-notes.json cannot be read" in problem["error"]
    assert "the daily-note format read before stays (DD.MM.YYYY)" in problem["error"]
    shown = render_status(server.call("health"))
    assert "PROBLEM (obsidian_settings" in shown and "daily-notes.json cannot be read" in shown
    doctor = check_daily_notes(server.cfg)
    assert doctor.warning and "daily-notes.json cannot be read" in doctor.verdict
    still = {n.key: n.date for n in h.stores.manifest.note_days()}
    assert still["vault/Journal/15.11.2025"] == "2025-11-15"  # the format read before stays
    settings.unlink()
    periodic = v / ".obsidian/plugins/periodic-notes/data.json"
    write(periodic, json.dumps({"daily": {"enabled": True, "format": "DD.MM.YYYY", "folder": "Projects"}}))
    h.sweep()
    days = {n.key: n.date for n in h.stores.manifest.note_days()}
    assert (
        days["vault/Projects/12.11.2025 Meeting"] == "2025-11-12" and days["vault/Journal/15.11.2025"] == ""
    )
    assert h.indexer.problems.active_in("obsidian_settings") is None
    assert "Daily notes: named YYYY-MM-DD" not in render_status(server.call("health"))
    periodic.unlink()
    h.sweep()
    assert "Daily notes: named YYYY-MM-DD (no daily-note format set" in render_status(server.call("health"))


def test_with_a_daily_note_folder_an_iso_name_elsewhere_is_no_daily_note(
    tmp_path: Path, serve_in_process: Any
) -> None:
    """With a daily-note folder set, a note named by an ISO day outside it ("Meetings/2025-11-16
    Standup") is dated by its name but is no daily note (at one day it follows the folder's daily
    note), those nested below it by year and month are daily notes; without a folder set, any note
    so named is one, as before. A period lists them newest day first."""
    import datetime as dt

    v = tmp_path / "nested"
    write(v / "Daily/2025-11-15.md", "# Samstag\n\nMarkt.\n")
    write(v / "Daily/2025/11/2025-11-14.md", "# Freitag\n\nArbeit.\n")
    write(v / "Meetings/2025-11-16 Standup.md", "# Standup\n\nAgenda.\n")
    write(v / "Trip.md", "---\ndate: 2025-11-12\n---\n# Trip\n\nZug.\n")
    settings = v / ".obsidian/daily-notes.json"
    write(settings, json.dumps({"folder": "Daily", "format": "YYYY/MM/YYYY-MM-DD"}))
    server = serve_in_process(v, model=KEYWORD_ONLY)
    h = server.harness
    server.handlers.retriever.today = lambda: dt.date(2025, 11, 20)

    def listed() -> list[str]:
        r = server.call("search", {"query": "what did I do last week?"})
        return [hit["reference"] for hit in r["hits"]]

    days = {n.key: (n.date, n.named) for n in h.stores.manifest.note_days()}
    assert days["vault/Meetings/2025-11-16 Standup"] == ("2025-11-16", False)
    assert days["vault/Daily/2025/11/2025-11-14"] == ("2025-11-14", True)
    assert days["vault/Daily/2025-11-15"] == ("2025-11-15", True)  # an ISO name in the folder
    week = [
        "vault/Meetings/2025-11-16 Standup",
        "vault/Daily/2025-11-15",
        "vault/Daily/2025/11/2025-11-14",
        "vault/Trip",
    ]
    assert listed() == week
    write(settings, json.dumps({"folder": "Daily"}))  # the folder alone: the default format
    h.sweep()
    days = {n.key: (n.date, n.named) for n in h.stores.manifest.note_days()}
    assert days["vault/Daily/2025-11-15"] == ("2025-11-15", True)
    assert days["vault/Meetings/2025-11-16 Standup"] == ("2025-11-16", False)
    assert listed()[1:3] == ["vault/Daily/2025-11-15", "vault/Daily/2025/11/2025-11-14"]
    settings.unlink()  # no folder: any note named by its day is a daily note
    h.sweep()
    days = {n.key: (n.date, n.named) for n in h.stores.manifest.note_days()}
    assert days["vault/Meetings/2025-11-16 Standup"] == ("2025-11-16", True)
    assert listed() == [
        "vault/Meetings/2025-11-16 Standup",
        "vault/Daily/2025-11-15",
        "vault/Daily/2025/11/2025-11-14",
        "vault/Trip",
    ]


def test_daily_note_settings_of_a_folder_alone_or_typed_with_backslashes(tmp_path: Path) -> None:
    """Obsidian writes only {"folder": …} when the folder alone was changed (its default format
    stays YYYY-MM-DD), and normalises "Journal\\" to "Journal": such settings were read as no daily
    notes at all, or as a folder no note is in."""
    from sidecar.vault.dailynotes import DailyNoteFormats

    vault = tmp_path / "v"
    write(vault / ".obsidian/daily-notes.json", json.dumps({"folder": "Daily/"}))
    assert DailyNoteFormats(vault).refresh() == (("YYYY-MM-DD", "Daily"),)
    write(vault / ".obsidian/daily-notes.json", json.dumps({"folder": "Journal\\", "format": "DD.MM.YYYY"}))
    assert DailyNoteFormats(vault).refresh() == (("DD.MM.YYYY", "Journal"),)
    write(vault / ".obsidian/daily-notes.json", json.dumps({"folder": "./Tage", "format": "DD.MM.YYYY"}))
    assert DailyNoteFormats(vault).refresh() == (("DD.MM.YYYY", "Tage"),)


def test_a_daily_notes_plugin_switched_off_sets_no_format(tmp_path: Path) -> None:
    """Obsidian keeps daily-notes.json (and Periodic Notes' data.json) when the plugin is switched
    off, and ignores it: its format still dated notes by their names here. Off (core-plugins.json
    as a map or a list; community-plugins.json for Periodic Notes), its format is not in force and
    status says why; on again, or no list at all, it counts as before."""
    from sidecar.clients.cli_render import daily_notes_line
    from sidecar.vault.dailynotes import DailyNoteFormats
    from sidecar.vault.settingsfile import COMMUNITY_PLUGINS, CORE_PLUGINS

    vault = tmp_path / "v"
    write(vault / ".obsidian/daily-notes.json", json.dumps({"folder": "Journal", "format": "DD.MM.YYYY"}))
    formats = DailyNoteFormats(vault)
    assert formats.refresh() == (("DD.MM.YYYY", "Journal"),)  # no list of plugins: taken as on
    write(vault / CORE_PLUGINS, json.dumps({"daily-notes": False, "templates": True}))
    assert formats.refresh() == () and formats.formats() == () and formats.kept() == []
    line = daily_notes_line(formats.describe())
    assert "DD.MM.YYYY in Journal/ (from .obsidian/daily-notes.json) is not used" in line, line
    assert "the Daily notes plugin is switched off in Obsidian" in line, line
    write(vault / CORE_PLUGINS, json.dumps(["file-explorer", "daily-notes"]))
    assert formats.refresh() == (("DD.MM.YYYY", "Journal"),)
    write(vault / CORE_PLUGINS, json.dumps(["file-explorer"]))
    assert formats.refresh() == ()
    periodic = {"daily": {"format": "YYYY/MM/DD", "folder": "Tage"}}
    write(vault / ".obsidian/plugins/periodic-notes/data.json", json.dumps(periodic))
    write(vault / COMMUNITY_PLUGINS, json.dumps(["dataview"]))
    assert formats.refresh() == ()
    assert "the Periodic Notes plugin is switched off" in daily_notes_line(formats.describe())
    write(vault / COMMUNITY_PLUGINS, json.dumps(["periodic-notes"]))
    assert formats.refresh() == (("YYYY/MM/DD", "Tage"),)


def test_a_daily_notes_plugin_off_with_its_settings_broken_is_no_trouble(tmp_path: Path) -> None:
    """Obsidian ignores the settings of a Daily notes plugin switched off: a broken one is no
    trouble (status named it a problem, doctor warned to fix a file nothing reads); on again, it
    is."""
    from sidecar.vault.dailynotes import DailyNoteFormats
    from sidecar.vault.settingsfile import CORE_PLUGINS

    vault = tmp_path / "v"
    write(vault / ".obsidian/daily-notes.json", "{not json")
    write(vault / CORE_PLUGINS, json.dumps({"daily-notes": False}))
    formats = DailyNoteFormats(vault)
    assert formats.refresh() == () and formats.trouble is None, formats.trouble
    write(vault / CORE_PLUGINS, json.dumps({"daily-notes": True}))
    formats.refresh()
    assert formats.trouble is not None and "daily-notes.json cannot be read" in formats.trouble


def test_health_lists_a_daily_note_format_off_apart(tmp_path: Path, serve_in_process: Any) -> None:
    """A format whose plugin is off is not in health's daily_notes, the formats in force (a client
    that predates the mark printed it as in force), but in daily_notes_off; status says both."""
    from sidecar.clients.cli_render import render_status

    v = tmp_path / "dv"
    write(v / "Journal/03.11.2026.md", "# Tag\n\nZaun gestrichen.\n")
    write(v / ".obsidian/daily-notes.json", json.dumps({"folder": "Journal", "format": "DD.MM.YYYY"}))
    write(v / ".obsidian/core-plugins.json", json.dumps({"daily-notes": False}))
    h = serve_in_process(v).call("health")
    assert h["daily_notes"] == [], h["daily_notes"]
    off = {"format": "DD.MM.YYYY", "folder": "Journal", "file": ".obsidian/daily-notes.json"}
    off["off"] = "Daily notes"
    assert h["daily_notes_off"] == [off], h["daily_notes_off"]
    shown = render_status(h)
    assert "DD.MM.YYYY in Journal/ (from .obsidian/daily-notes.json) is not used" in shown, shown


def test_a_note_sidecars_own_exclude_leaves_out_is_not_shown(tmp_path: Path, serve_in_process: Any) -> None:
    """`index.exclude: [Privat/]` is the user's word to sidecar: get (and memory_get, resources)
    served the whole private note to any agent by name. Obsidian's Excluded files hide notes from
    Obsidian's search only and are still read by name, as Obsidian opens them."""
    v = tmp_path / "private"
    write(v / "Privat/Tagebuch.md", "# Tagebuch\n\nMeine geheime Liebe heißt Berta.\n")
    write(v / "Archiv/Alt.md", "# Alt\n\nein altes Projekt\n")
    write(v / "Home.md", "# Home\n\nSiehe [[Tagebuch]] und [[Alt]].\n")
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Archiv/"]}))
    server = serve_in_process(v, **{"index.exclude": "Privat/"})
    for reference in ("vault/Privat/Tagebuch", "Tagebuch", "[[Tagebuch]]"):
        with pytest.raises(RemoteError) as err:
            server.call("get", {"reference": reference})
        assert err.value.code == "forbidden"
        assert "left out by index.exclude: Privat/" in str(err.value) and "Berta" not in str(err.value)
    archived = server.call("get", {"reference": "Alt"})
    assert "altes Projekt" in archived["text"] and archived["excluded"] == "Obsidian excluded files: Archiv/"
    links = server.call("get", {"reference": "vault/Home"})["links"]
    assert {link["target"] for link in links} == {"vault/Privat/Tagebuch", "vault/Archiv/Alt"}


def _card(kind: str, box: tuple[int, int, int, int], **fields: str) -> dict[str, Any]:
    x, y, width, height = box
    return {"id": f"n{x}{y}", "type": kind, "x": x, "y": y, "width": width, "height": height, **fields}


PLAN_CANVAS = {
    "nodes": [
        _card("group", (-50, -50, 800, 500), label="Sprint Mondscheinbahn"),
        _card("file", (400, 0, 300, 200), file="Projekte/Gartenhaus.md"),
        _card("text", (0, 0, 300, 200), text="# Leuchtturmprojekt\nKundenportal, siehe [[Gartenhaus#Dach]]."),
        _card("link", (0, 300, 300, 100), url="https://example.org"),
        _card("text", (0, 900, 300, 100), text="Lose Karte: Abendrot"),
    ],
    "edges": [{"id": "e1", "fromNode": "n00", "toNode": "n4000", "label": "hängt ab von"}],
}


def test_a_canvas_is_a_note_and_a_base_is_counted(daemon_factory: Any, tmp_path: Path) -> None:
    """A Canvas was invisible: its cards were not searched, its file cards no backlinks, and no
    count said it was left out. Now it is a note (``vault/Plan.canvas``): its cards' Markdown,
    groups as headings, file cards and links in cards as links; edits are seen while running; a
    malformed one and a Bases file are skipped with their reason in status."""
    v = tmp_path / "cvault"
    write(v / "Projekte/Gartenhaus.md", "# Gartenhaus\n\n## Dach\n\nLärchenbretter.\n")
    write(v / "Planung.canvas", json.dumps(PLAN_CANVAS))
    write(v / "Kaputt.canvas", '{"nodes": [')
    write(v / "Übersicht.md", "# Übersicht\n\n![[Planung.canvas]] und [[Planung]]\n")
    write(v / "Aufgaben.base", "views:\n  - type: table\n    name: Offene Aufgaben\n")
    cfg_file = tmp_path / "sidecar.yaml"
    cfg_file.write_text("embedder:\n  enabled: false\n")
    d: DaemonProcess = daemon_factory(v, extra=["--config", str(cfg_file)]).start()
    hits = d.call("search", {"query": "Leuchtturmprojekt Kundenportal", "minScore": 0})["hits"]
    assert hits[0]["reference"] == "vault/Planung.canvas"
    got = d.call("get", {"reference": "vault/Planung.canvas"})
    # The loose card first, then the group under its label, its cards top to bottom, left to right.
    assert got["text"] == (
        "Lose Karte: Abendrot\n\n# Sprint Mondscheinbahn\n\n# Leuchtturmprojekt\n"
        "Kundenportal, siehe [[Gartenhaus#Dach]].\n\n[[Projekte/Gartenhaus.md]]\n\nhttps://example.org\n"
    )
    assert [(x["target"], x["anchor"]) for x in got["links"]] == [
        ("vault/Projekte/Gartenhaus", "Dach"),
        ("vault/Projekte/Gartenhaus", None),
    ]
    back = d.call("get", {"reference": "vault/Projekte/Gartenhaus"})["backlinks"]
    assert {b["reference"] for b in back} == {"vault/Planung.canvas"}
    assert d.call("get", {"reference": "Planung.canvas"})["reference"] == "vault/Planung.canvas"
    # A link names a canvas with its extension, as in Obsidian ("[[Planung]]" is a note's name).
    links = d.call("get", {"reference": "vault/Übersicht"})["links"]
    assert [(x["target"], x["embed"]) for x in links] == [("vault/Planung.canvas", True), (None, False)]
    skipped = d.health()["index"]["skipped"]
    assert skipped["malformed Canvas (not JSON)"] == 1
    assert skipped["Bases view definition (no text to index)"] == 1
    status = d.run_cli("status", check=True).stdout
    assert (
        "1 Bases view definition (no text to index)" in status and "1 malformed Canvas (not JSON)" in status
    )
    # An edit of the canvas while running is indexed (the watcher let only new and gone ones by).
    PLAN_CANVAS["nodes"][4]["text"] = "Lose Karte: Morgenrot"
    (v / "Planung.canvas").write_text(json.dumps(PLAN_CANVAS), encoding="utf-8")
    _wait(lambda: d.call("search", {"query": "Morgenrot", "minScore": 0})["hits"])
    assert (
        d.call("search", {"query": "Morgenrot", "minScore": 0})["hits"][0]["reference"]
        == "vault/Planung.canvas"
    )


def test_a_note_named_like_a_canvas_keeps_its_reference(serve_in_process: Any, tmp_path: Path) -> None:
    """``Plan.canvas.md`` was ``vault/Plan.canvas`` before canvases were read; a ``Plan.canvas``
    beside it took that reference and the Markdown note dropped out of search (called a .md case
    twin). The Markdown note keeps it; the canvas is left out and counted with its reason."""
    v = tmp_path / "v"
    write(v / "Plan.canvas.md", "# Plan md\n\nmarkdown note wombat\n")
    card = _card("text", (0, 0, 10, 10), text="canvas card quokka")
    write(v / "Plan.canvas", json.dumps({"nodes": [card]}))
    write(v / "Only.canvas.md", "# Only\n\nan existing note platypus\n")
    s = serve_in_process(v, model=KEYWORD_ONLY)
    assert [h["reference"] for h in s.call("search", {"query": "wombat", "minScore": 0})["hits"]] == [
        "vault/Plan.canvas"
    ]
    assert s.call("search", {"query": "quokka", "minScore": 0})["hits"] == []
    assert "wombat" in s.call("get", {"reference": "vault/Plan.canvas"})["text"]
    assert "platypus" in s.call("get", {"reference": "vault/Only.canvas"})["text"]
    assert path_for_key(s.harness.cfg, "vault/Only.canvas")[1].name == "Only.canvas.md"  # no rel known
    skipped = s.call("health")["index"]["skipped"]
    assert skipped == {CANVAS_TWIN_REASON: 1}
    assert CANVAS_TWIN_REASON.startswith("Canvas beside a Markdown note")
    # A changed canvas seen by an event does not take the reference either.
    (v / "Plan.canvas").write_text(json.dumps({"nodes": [_card("text", (0, 0, 9, 9), text="numbat")]}))
    s.harness.indexer.sweep(paths=[str(v / "Plan.canvas")])
    assert s.harness.stores.manifest.rel_of("vault/Plan.canvas") == "Plan.canvas.md"
    assert s.call("search", {"query": "numbat", "minScore": 0})["hits"] == []
    assert s.call("search", {"query": "wombat", "minScore": 0})["hits"]


def _template_vault(tmp_path: Path) -> Path:
    v = tmp_path / "tvault"
    write(v / "Vorlagen/Tagesnotiz.md", "# {{date:dddd}}\n\n## Was habe ich heute gemacht?\n\n- \n")
    write(v / "Journal/03.12.2026.md", "# Donnerstag\n\nDach gedeckt, mit Lena telefoniert.\n")
    write(v / "Vorlagenkunde.md", "# Vorlagenkunde\n\nNot in the folder, only alike in name.\n")
    write(v / ".obsidian/templates.json", json.dumps({"folder": "Vorlagen/"}))
    return v


def test_the_templates_folder_is_left_out_under_its_own_rule(tmp_path: Path, make_cfg: Any) -> None:
    """A template ("## Was habe ich heute gemacht?") ranked first for "was hab ich vorgestern
    gemacht": the folder named by the Templates plugin (and Templater) is left out as Excluded files
    are, counted under its own rule; a switch keeps it."""
    v = _template_vault(tmp_path)
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        assert _keys(h) == {"vault/Journal/03.12.2026", "vault/Vorlagenkunde"}
        assert h.indexer.activity.excluded == {"Obsidian templates folder: Vorlagen/": 1}
        assert h.indexer.excluded_by("vault/Vorlagen/Tagesnotiz") == "Obsidian templates folder: Vorlagen/"
        assert h.indexer.problems.active_in("obsidian_settings") is None
    finally:
        h.close()
    h = Harness(
        make_cfg(_template_vault(tmp_path / "b"), **{"index.obsidianTemplates": "false"}), FakeEmbedder()
    )
    try:
        h.sweep()
        assert "vault/Vorlagen/Tagesnotiz" in _keys(h)
    finally:
        h.close()


def test_a_templates_plugin_switched_off_leaves_its_folder_in(tmp_path: Path, make_cfg: Any) -> None:
    """Obsidian keeps templates.json when the Templates core plugin is switched off; its folder
    then holds notes like any other, and they stayed out of search. core-plugins.json in both
    forms (a list of the plugins on, older Obsidian; a map of id -> on, newer); none, a broken one
    or a map not naming the plugin: as before. Templater by community-plugins.json alike."""
    from sidecar.vault.ignore import IgnoreRules

    v = _template_vault(tmp_path)
    core = v / ".obsidian/core-plugins.json"
    rules = IgnoreRules((), v)
    for text, left_out in [
        (None, True),
        (json.dumps({"daily-notes": False, "templates": False}), False),
        (json.dumps({"templates": True}), True),
        (json.dumps({"daily-notes": False}), True),
        (json.dumps(["file-explorer", "daily-notes"]), False),
        (json.dumps(["file-explorer", "templates"]), True),
        ('{"templates": fal', True),
    ]:
        if text is not None:
            write(core, text)
        rules.refresh()
        assert (rules.match("Vorlagen/Tagesnotiz.md") is not None) is left_out, text
    write(v / ".obsidian/plugins/templater-obsidian/data.json", json.dumps({"templates_folder": "Tpl"}))
    write(v / ".obsidian/community-plugins.json", json.dumps(["dataview"]))
    rules.refresh()
    assert rules.match("Tpl/a.md") is None and rules.match("Vorlagen/a.md") is not None
    write(v / ".obsidian/community-plugins.json", json.dumps(["templater-obsidian"]))
    rules.refresh()
    assert rules.match("Tpl/a.md") == "Obsidian templates folder: Tpl/"
    # The sweep: the note in the folder is searched once the plugin is off.
    write(core, json.dumps({"templates": False}))
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        assert "vault/Vorlagen/Tagesnotiz" in _keys(h)
        assert "Obsidian templates folder: Vorlagen/" not in h.indexer.activity.excluded
    finally:
        h.close()


def test_status_says_a_templates_folder_is_indexed_again_while_its_plugin_is_off(
    tmp_path: Path, serve_in_process: Any
) -> None:
    """The Templates plugin switched off, its folder comes back into the index and the count of
    notes jumps: status said nothing of it (it names the folder only while it is left out). It
    says where it spoke of the folder, in plain words, and no more once the plugin is on again."""
    from sidecar.clients.cli_render import render_status

    v = _template_vault(tmp_path)
    core = write(v / ".obsidian/core-plugins.json", json.dumps({"templates": False}))
    server = serve_in_process(v)
    health = server.call("health")
    assert health["index"]["templates_indexed"] == [
        {"folder": "Vorlagen/", "plugin": "Templates", "file": ".obsidian/templates.json"}
    ]
    shown = render_status(health)
    said = (
        "Templates folder Vorlagen/ is indexed as notes: the Templates plugin is switched off in "
        "Obsidian (its folder is set in .obsidian/templates.json)"
    )
    assert said in shown, shown
    write(core, json.dumps({"templates": True}))
    server.harness.sweep()
    health = server.call("health")
    assert health["index"]["templates_indexed"] == []
    shown = render_status(health)
    assert "Excluded notes: 1 by Obsidian templates folder: Vorlagen/" in shown and said not in shown, shown


def test_status_says_no_templates_folder_indexed_that_another_rule_leaves_out(
    tmp_path: Path, serve_in_process: Any
) -> None:
    """Core Templates switched off in favour of Templater, both naming Vorlagen/ (a common set-up):
    the folder stays out under Templater's rule, and status said it both excluded and 'indexed as
    notes'."""
    from sidecar.clients.cli_render import render_status

    v = _template_vault(tmp_path)
    write(v / ".obsidian/plugins/templater-obsidian/data.json", json.dumps({"templates_folder": "Vorlagen"}))
    write(v / ".obsidian/community-plugins.json", json.dumps(["templater-obsidian"]))
    write(v / ".obsidian/core-plugins.json", json.dumps({"templates": False}))
    health = serve_in_process(v).call("health")
    shown = render_status(health)
    assert health["index"]["templates_indexed"] == [], health["index"]
    assert "Excluded notes: 1 by Obsidian templates folder: Vorlagen/" in shown, shown
    assert "is indexed as notes" not in shown, shown


@pytest.mark.parametrize("left_out", ["app.json", "index.exclude", "missing", "empty", "skipped"])
def test_a_templates_folder_off_is_indexed_only_with_a_note_no_rule_leaves_out(
    tmp_path: Path, serve_in_process: Any, left_out: str
) -> None:
    """The Templates plugin off, its folder is said indexed as notes only when a note of it is in
    the index: not when Obsidian's Excluded files or index.exclude still leave it out, nor when it
    is missing or holds no note, or only notes the index skipped (binary: said indexed, as their
    rows were counted whatever their state); a note put there is, once a sweep has indexed it."""
    v = _template_vault(tmp_path)
    write(v / ".obsidian/core-plugins.json", json.dumps({"templates": False}))
    flags: dict[str, Any] = {}
    if left_out == "app.json":
        write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Vorlagen/"]}))
    elif left_out == "index.exclude":
        flags["index.exclude"] = "Vorlagen/"
    elif left_out == "skipped":
        (v / "Vorlagen/Tagesnotiz.md").write_bytes(b"\x00\x01\x02binary")  # read, then skipped
    else:
        shutil.rmtree(v / "Vorlagen")
        if left_out == "empty":
            write(v / "Vorlagen/bild.png", "not a note")
    server = serve_in_process(v, **flags)
    assert server.call("health")["index"]["templates_indexed"] == [], left_out
    if left_out in ("missing", "empty", "skipped"):
        write(v / "Vorlagen/Neu.md", "# Neu\n")
        server.harness.sweep()
        assert [t["folder"] for t in server.call("health")["index"]["templates_indexed"]] == ["Vorlagen/"]


def test_status_asks_the_index_not_the_disk_whether_a_templates_folder_is_indexed(
    tmp_path: Path, serve_in_process: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """status walked the templates folder on disk at every call while its plugin was off (a share
    that hangs hung status): it asks the index, so the folder gone since the sweep is still said
    indexed until the next sweep, and no walk or listing of the vault is made."""
    import os

    v = _template_vault(tmp_path)
    write(v / ".obsidian/core-plugins.json", json.dumps({"templates": False}))
    server = serve_in_process(v)
    shutil.rmtree(v / "Vorlagen")

    def no_walk(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("status read the disk")

    with monkeypatch.context() as m:
        m.setattr(os, "walk", no_walk)
        m.setattr(os, "scandir", no_walk)
        said = server.call("health")["index"]["templates_indexed"]
    assert [t["folder"] for t in said] == ["Vorlagen/"]
    server.harness.sweep()
    assert server.call("health")["index"]["templates_indexed"] == []


def test_status_lists_the_templates_folders_while_a_sweep_changes_them(
    tmp_path: Path, serve_in_process: Any
) -> None:
    """status asks the index about each templates folder switched off while the sweep's thread
    may read the plugins' settings anew (a plugin switched back on): the list it goes through is
    its own copy ("dictionary changed size during iteration" failed status)."""
    v = _template_vault(tmp_path)
    write(v / ".obsidian/plugins/templater-obsidian/data.json", json.dumps({"templates_folder": "Vorlagen"}))
    write(v / ".obsidian/core-plugins.json", json.dumps({"templates": False}))
    write(v / ".obsidian/community-plugins.json", json.dumps([]))
    ignore = serve_in_process(v).harness.indexer.ignore
    asked: list[str] = []

    def indexed(prefix: str) -> bool:
        if not asked:  # the sweep, meanwhile: the core plugin switched on again
            write(v / ".obsidian/core-plugins.json", json.dumps({"templates": True}))
            ignore.refresh()
        asked.append(prefix)
        return True

    said = ignore.templates_indexed(indexed, "")
    assert said and asked, said


@pytest.mark.parametrize(
    ("folder", "note", "said"),
    [
        ("Tmpl", "Tmpl2/a.md", False),  # a folder named as the start of another's name
        ("Tmpl/", "Tmpl/a.md", True),
        ("/Tmpl/sub/", "Tmpl/sub/x/a.md", True),
        ("Übersicht", "U\u0308bersicht/a.md", True),  # named in NFD on disk, typed in NFC
        ("Ärger/Übersicht", "A\u0308rger/Übersicht/a.md", True),  # one part NFD, the other NFC
        ("Ärger/Übersicht", "Ärger/U\u0308bersicht/a.md", True),
        ("wiki/Vorlagen", "wiki/Vorlagen/a.md", True),  # inside the wiki: its notes are wiki notes
    ],
)
def test_a_templates_folder_off_is_found_in_the_index_by_its_own_notes(
    tmp_path: Path, serve_in_process: Any, folder: str, note: str, said: bool
) -> None:
    """Which index keys are the notes of a templates folder switched off: those below the folder
    itself, whatever Unicode form the disk names it in, and wiki notes where it is in the wiki."""
    v = tmp_path / "tvault"
    write(v / note, "# A\n\nsome words\n")
    write(v / "Journal/b.md", "# B\n")
    write(v / ".obsidian/templates.json", json.dumps({"folder": folder}))
    write(v / ".obsidian/core-plugins.json", json.dumps({"templates": False}))
    got = serve_in_process(v).call("health")["index"]["templates_indexed"]
    assert bool(got) is said, got


@pytest.mark.parametrize("folder", ["/", "", "./", "\\"])
@pytest.mark.parametrize("on", [True, False])
def test_a_templates_folder_set_to_the_vault_root_leaves_nothing_out(
    tmp_path: Path, serve_in_process: Any, folder: str, on: bool
) -> None:
    """Obsidian reads a templates folder of "/" (or none) as the vault root, its templates anywhere:
    leaving that folder out would leave the whole vault out, so no note is, switched on or off, and
    status names no templates folder (none is indexed again when the plugin is off)."""
    v = _template_vault(tmp_path)
    write(v / ".obsidian/templates.json", json.dumps({"folder": folder}))
    write(v / ".obsidian/plugins/templater-obsidian/data.json", json.dumps({"templates_folder": folder}))
    write(v / ".obsidian/core-plugins.json", json.dumps({"templates": on}))
    write(v / ".obsidian/community-plugins.json", json.dumps(["templater-obsidian"] if on else []))
    server = serve_in_process(v)
    health = server.call("health")
    assert health["index"]["excluded"] == {} and health["index"]["templates_indexed"] == [], health["index"]
    assert "vault/Vorlagen/Tagesnotiz" in _keys(server.harness)


def test_a_templates_folder_set_anew_applies_at_once(tmp_path: Path, make_cfg: Any) -> None:
    """Templater's folder set to "Journal": a templates folder is in force as soon as it is read
    (no hold), its notes leave search at once, under the templates folder's rule."""
    v = _template_vault(tmp_path)
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        write(
            v / ".obsidian/plugins/templater-obsidian/data.json", json.dumps({"templates_folder": "Journal"})
        )
        h.sweep()
        assert _keys(h) == {"vault/Vorlagenkunde"}
        assert h.indexer.activity.excluded == {
            "Obsidian templates folder: Vorlagen/": 1,
            "Obsidian templates folder: Journal/": 1,
        }
        assert h.indexer.problems.active_in("obsidian_settings") is None
    finally:
        h.close()


def test_a_templates_folder_read_during_a_slow_settings_read_is_never_indexed(
    tmp_path: Path, make_cfg: Any
) -> None:
    """Templates and their setting arriving together (a sync from another device) while the
    daily-note settings read is slow past the probe timeout: the templates are not indexed, in
    that sweep or after the read ends."""
    v = tmp_path / "v"
    write(v / "Journal/a.md", "# A\n\nGarten.\n")
    write(v / ".obsidian/app.json", "{}")
    h = Harness(make_cfg(v, **{"watch.probeTimeoutSeconds": "0.2"}), FakeEmbedder())
    try:
        h.sweep()
        write(v / "Templates/Daily.md", "# {{date}}\n\n## Was habe ich heute gemacht?\n")
        write(v / ".obsidian/templates.json", json.dumps({"folder": "Templates"}))
        real, go = h.indexer.daily_formats.refresh, threading.Event()

        def slow() -> Any:
            go.wait(30)  # a share slow this once, until the test lets it answer
            return real()

        h.indexer.daily_formats.refresh = slow  # type: ignore[method-assign]
        h.sweep()
        assert _keys(h) == {"vault/Journal/a"}
        go.set()
        stuck = h.indexer._ignore_stuck
        assert stuck is not None
        stuck.join(30)
        h.sweep()
        assert _keys(h) == {"vault/Journal/a"}
    finally:
        h.close()


def test_a_settings_file_whose_read_hangs_is_said_in_status(
    tmp_path: Path, make_cfg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """.obsidian/app.json whose open hangs on a share: the read is given up after the probe
    timeout and said (log and status), the rules in force stay; once it answers it is applied
    and the problem goes. Nothing was said while a new Excluded files rule went unapplied."""
    from sidecar.vault import settingsfile

    v = tmp_path / "v"
    write(v / "Private/a.md", "# A\n\nGarten.\n")
    write(v / "b.md", "# B\n\nBlumen.\n")
    h = Harness(make_cfg(v, **{"watch.probeTimeoutSeconds": "0.2"}), FakeEmbedder())
    release = threading.Event()
    real = settingsfile.read_settings_json

    def hanging(path: Path, encoding: str = "utf-8") -> Any:
        if path.name == "app.json":
            release.wait(30)  # a share that does not answer the open, until the test lets it
        return real(path, encoding)

    try:
        h.sweep()
        assert _keys(h) == {"vault/Private/a", "vault/b"}
        monkeypatch.setattr(settingsfile, "read_settings_json", hanging)
        write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
        h.sweep()
        problem = h.indexer.problems.active_in("obsidian_settings")
        assert problem is not None and "did not answer within" in problem["error"]
        assert ".obsidian" in problem["error"]
        release.set()
        stuck = h.indexer._ignore_stuck
        assert stuck is not None
        stuck.join(30)
        h.sweep()
        assert h.indexer.problems.active_in("obsidian_settings") is None
        assert _keys(h) == {"vault/b"}
    finally:
        release.set()
        h.close()


def test_a_templates_folder_a_daily_note_template_lies_in_stays_out(tmp_path: Path, make_cfg: Any) -> None:
    """With the Templates plugin switched off, the Daily notes core plugin (or Periodic Notes) may
    still make each day's note from a template in its folder ("template": "Vorlagen/Tagesnotiz"):
    the form was searched, and ranked first for "was hab ich vorgestern gemacht". The folder
    stays out while such a template lies in it."""
    from sidecar.vault.ignore import IgnoreRules

    v = _template_vault(tmp_path)
    write(v / ".obsidian/core-plugins.json", json.dumps({"templates": False, "daily-notes": True}))
    daily = v / ".obsidian/daily-notes.json"
    periodic = v / ".obsidian/plugins/periodic-notes/data.json"
    rules = IgnoreRules((), v)
    for daily_text, periodic_text, community, left_out in [
        (None, None, None, False),
        ({"folder": "Journal", "template": "Vorlagen/Tagesnotiz"}, None, None, True),
        ({"template": "/Vorlagen/Tagesnotiz.md"}, None, None, True),
        ({"template": "Vorlagenkunde"}, None, None, False),  # alike in name, not in the folder
        ({"template": ""}, None, None, False),
        ({"template": "Vorlagen/Tagesnotiz"}, None, ["dataview"], True),
        # Periodic Notes, 0.x and 1.x, switched on or off
        ({}, {"daily": {"enabled": True, "template": "Vorlagen/Tagesnotiz"}}, ["periodic-notes"], True),
        ({}, {"weekly": {"enabled": True, "template": "Vorlagen/Woche"}}, ["periodic-notes"], True),
        ({}, {"daily": {"enabled": False, "template": "Vorlagen/Tagesnotiz"}}, ["periodic-notes"], False),
        ({}, {"daily": {"enabled": True, "template": "Vorlagen/Tagesnotiz"}}, ["dataview"], False),
        ({}, {"calendarSets": [{"day": {"templatePath": "Vorlagen/T.md"}}]}, ["periodic-notes"], True),
    ]:
        if daily_text is not None:
            write(daily, json.dumps(daily_text))
        if periodic_text is not None:
            write(periodic, json.dumps(periodic_text))
        if community is not None:
            write(v / ".obsidian/community-plugins.json", json.dumps(community))
        rules.refresh()
        got = rules.match("Vorlagen/Tagesnotiz.md")
        assert (got is not None) is left_out, (daily_text, periodic_text, community)
    # The Daily notes plugin switched off too: its template makes no note, the folder is in.
    write(daily, json.dumps({"template": "Vorlagen/Tagesnotiz"}))
    write(periodic, json.dumps({}))
    write(v / ".obsidian/core-plugins.json", json.dumps({"templates": False, "daily-notes": False}))
    rules.refresh()
    assert rules.match("Vorlagen/Tagesnotiz.md") is None
    # The sweep: the form is not searched while the daily notes are made from it.
    write(v / ".obsidian/core-plugins.json", json.dumps({"templates": False, "daily-notes": True}))
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        assert "vault/Vorlagen/Tagesnotiz" not in _keys(h)
        assert h.indexer.excluded_by("vault/Vorlagen/Tagesnotiz") == "Obsidian templates folder: Vorlagen/"
    finally:
        h.close()


def test_templates_turned_off_by_a_reload_index_the_folder_again(tmp_path: Path, make_cfg: Any) -> None:
    """index.obsidianTemplates: false by a configuration reload did nothing: the rules built anew
    took over the templates folder read before. Now the folder's notes are indexed again."""
    v = _template_vault(tmp_path)
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        assert "vault/Vorlagen/Tagesnotiz" not in _keys(h)
        # The reload names the key that changed (it said index.exclude for any of the three).
        assert h.indexer.set_excludes([], True, False) == "index.obsidianTemplates"
        h.sweep()
        assert "vault/Vorlagen/Tagesnotiz" in _keys(h)
        assert h.indexer.ignore.rules() == [] and h.indexer.activity.excluded == {}
    finally:
        h.close()


def test_templates_settings_have_app_jsons_safeguards(tmp_path: Path, make_cfg: Any) -> None:
    """templates.json had none of app.json's safeguards: gone for a moment (a sync tool replacing
    .obsidian) every template was indexed at once, across a restart too, and an unreadable file was
    a log line only. Now its folder stays in force while the file is missing (for the grace, kept
    across a restart) and while it cannot be read, and status says so."""
    from sidecar.vault.ignore import SETTINGS_GRACE_S

    v = _template_vault(tmp_path)
    cfg = make_cfg(v)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        write(v / ".obsidian/templates.json", '{"folder": "Vorl')
        h.sweep()
        assert "vault/Vorlagen/Tagesnotiz" not in _keys(h)
        problem = h.indexer.problems.active_in("obsidian_settings")
        assert problem is not None and "templates.json cannot be read" in problem["error"]
        assert "the 1 rule read before stays" in problem["error"]
        (v / ".obsidian").rename(tmp_path / "aside")
        h.sweep()
        assert "vault/Vorlagen/Tagesnotiz" not in _keys(h)
        problem = h.indexer.problems.active_in("obsidian_settings")
        assert problem is not None and "templates.json is missing" in problem["error"]
    finally:
        h.close()
    h = Harness(cfg, FakeEmbedder())  # restarted while it is still missing
    try:
        h.sweep()
        assert "vault/Vorlagen/Tagesnotiz" not in _keys(h)
        assert h.indexer.excluded_by("vault/Vorlagen/Tagesnotiz") == "Obsidian templates folder: Vorlagen/"
        h.indexer.ignore.clock = lambda: time.monotonic() + SETTINGS_GRACE_S
        h.sweep()  # the grace over: no templates folder any more
        assert "vault/Vorlagen/Tagesnotiz" in _keys(h)
    finally:
        h.close()


def test_a_canvas_card_opening_with_dashes_is_no_front_matter(tmp_path: Path, make_cfg: Any) -> None:
    """A first card opening with a "---" line became the canvas's properties (title "Ziel",
    tags, the card's words gone from search). It stays the card's text; a canvas an older reader
    indexed is read again once after the upgrade (its bytes did not change), nothing else is."""
    v = tmp_path / "v"
    card = _card(
        "text", (0, 0, 300, 200), text="---\ntitle: Ziel\ntags: [geheim]\n---\nKarte mit Wendeltreppe"
    )
    write(v / "Plan.canvas", json.dumps({"nodes": [card, _card("text", (0, 400, 9, 9), text="Zweite")]}))
    write(v / "Haus.md", "# Haus\n\nDach.\n")
    cfg = make_cfg(v)
    h = Harness(cfg, FakeEmbedder())
    try:
        h.sweep()
        row = h.stores.manifest.read(
            "SELECT title, tags, front_matter FROM files WHERE key = 'vault/Plan.canvas'"
        )
        assert row == [("Plan", "[]", "{}")]
        assert h.stores.bm25.search("Wendeltreppe", 5)
        # An index the older reader wrote: no version recorded, the card read as properties.
        with h.stores.manifest.transaction() as db:
            db.execute("DELETE FROM meta WHERE name = 'canvas_reader'")
            db.execute(
                "UPDATE files SET title = 'Ziel', front_matter = ? WHERE key = 'vault/Plan.canvas'",
                ('{"title": "Ziel"}',),
            )
        h.indexer.reread_canvases_if_read_differently()
        assert h.sweep()["changed"] == 1  # the canvas alone
        row = h.stores.manifest.read("SELECT title, front_matter FROM files WHERE key = 'vault/Plan.canvas'")
        assert row == [("Plan", "{}")]
        h.indexer.reread_canvases_if_read_differently()  # recorded: nothing read again
        assert h.sweep()["changed"] == 0
    finally:
        h.close()


def test_hidden_canvas_and_bases_files_are_counted_as_hidden(tmp_path: Path, make_cfg: Any) -> None:
    """A hidden ``.Entwurf.canvas`` (or ``.Sicht.base``) was in no count, where a hidden note is
    counted as skipped ("every Canvas and Bases file is indexed, skipped or excluded")."""
    v = tmp_path / "v"
    write(v / "Haus.md", "# Haus\n\nDach.\n")
    write(v / ".Entwurf.canvas", json.dumps({"nodes": []}))
    write(v / "Sub/.Sicht.base", "views: []\n")
    write(v / ".Notiz.md", "# hidden\n")
    write(v / "._Plan.canvas", "AppleDouble")  # a Mac's metadata beside a copied file: no note
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        assert h.indexer.activity.scan_skipped == {"hidden file name": 3}
    finally:
        h.close()


def test_time_phrases_read_weeks_from_the_vaults_calendar_setting(
    tmp_path: Path, serve_in_process: Any
) -> None:
    """ "this week" began on Monday though the vault's Calendar plugin begins weeks on Sunday:
    the week start it records is read at each sweep, and a change to it counts at the next;
    status says which weekday and why."""
    import datetime as dt

    from sidecar.clients.cli_render import render_status

    v = tmp_path / "weeks"
    write(v / "Daily/2026-11-29.md", "# Sunday\n\nBaked bread.\n")
    write(v / "Daily/2026-11-30.md", "# Monday\n\nFiled taxes.\n")
    write(v / ".obsidian/plugins/calendar/data.json", json.dumps({"weekStart": "sunday"}))
    server = serve_in_process(v)
    server.handlers.retriever.today = lambda: dt.date(2026, 12, 2)
    refs = [h["reference"] for h in server.call("search", {"query": "what did I do this week?"})["hits"]]
    assert refs == ["vault/Daily/2026-11-30", "vault/Daily/2026-11-29"], refs
    assert "Weeks begin on: Sunday (the Calendar plugin's setting)" in render_status(server.call("health"))
    write(
        v / ".obsidian/plugins/calendar/data.json",
        json.dumps({"weekStart": "locale", "localeOverride": "de"}),
    )
    server.harness.sweep()
    refs = [h["reference"] for h in server.call("search", {"query": "what did I do this week?"})["hits"]]
    assert refs == ["vault/Daily/2026-11-30"], refs
    health = server.call("health")
    assert health["week_start"] == {"weekday": "monday", "source": "the Calendar plugin's locale de"}
    assert "Weeks begin on: Monday (the Calendar plugin's locale de)" in render_status(health)


def test_a_locale_default_week_start_follows_the_system_locale(tmp_path: Path) -> None:
    """The Calendar plugin left at "Locale default" and "Same as system" began weeks on Sunday on
    a US English system and sidecar on Monday; a Saturday locale was Monday too. The plugin
    installed with no settings written is its defaults; no plugin at all is Monday."""
    from sidecar.vault.weekstart import CALENDAR_SETTINGS, WeekStart

    settings = tmp_path / CALENDAR_SETTINGS
    assert WeekStart(tmp_path, "en_US.UTF-8").refresh() == 0  # no plugin
    settings.parent.mkdir(parents=True)
    us = WeekStart(tmp_path, "en_US.UTF-8")
    assert us.refresh() == 6  # the plugin's defaults: locale, same as system
    assert us.describe() == {
        "weekday": "sunday",
        "source": "the Calendar plugin's locale default, 'Same as system': the system locale en_US.UTF-8,"
        " assuming Obsidian runs in that language",
    }
    settings.write_text('{"weekStart": "locale", "localeOverride": "system-default"}')
    assert [WeekStart(tmp_path, name).refresh() for name in ("en_US.UTF-8", "de_DE.UTF-8", "fa_IR")] == [
        6,
        0,
        5,
    ]
    plain = WeekStart(tmp_path, "C.UTF-8")
    assert plain.refresh() == 0
    assert plain.describe()["source"] == (
        "the Calendar plugin's locale default, 'Same as system'; the system locale C.UTF-8 names none: Monday"
    )
    unset = WeekStart(tmp_path, None)
    unset.refresh()
    assert unset.source == (
        "the Calendar plugin's locale default, 'Same as system'; no system locale is set: Monday"
    )


def test_a_calendar_plugin_switched_off_sets_no_week_start(tmp_path: Path) -> None:
    """Obsidian keeps a plugin's settings when it is switched off: a Sunday start of a Calendar
    plugin no longer in community-plugins.json began "last week" on Sunday while Obsidian showed
    no calendar. Switched on again, its setting counts again; no list at all: as before."""
    from sidecar.vault.settingsfile import COMMUNITY_PLUGINS
    from sidecar.vault.weekstart import CALENDAR_SETTINGS, WeekStart

    write(tmp_path / CALENDAR_SETTINGS, json.dumps({"weekStart": "sunday"}))
    week = WeekStart(tmp_path)
    assert week.refresh() == 6  # no list of plugins: taken as on
    write(tmp_path / COMMUNITY_PLUGINS, json.dumps(["dataview"]))
    assert week.refresh() == 0
    assert week.describe() == {"weekday": "monday", "source": "the Calendar plugin is switched off: Monday"}
    write(tmp_path / COMMUNITY_PLUGINS, json.dumps(["dataview", "calendar"]))
    assert week.refresh() == 6


def test_a_malformed_calendar_setting_is_told_once_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A malformed .obsidian/plugins/calendar/data.json was read and warned about at every sweep;
    now once per change of the file. A byte-order mark is no malformation."""
    import os

    from sidecar.vault.weekstart import CALENDAR_SETTINGS, WeekStart

    settings = tmp_path / CALENDAR_SETTINGS
    settings.parent.mkdir(parents=True)
    settings.write_text('{"weekStart": "sunday"}')
    week = WeekStart(tmp_path)
    assert week.refresh() == 6
    settings.write_text('{"weekStart": "sunday", ')  # half-written
    os.utime(settings, ns=(1, 1))
    with caplog.at_level(logging.WARNING, logger="sidecar.vault.weekstart"):
        assert [week.refresh() for _ in range(3)] == [6, 6, 6]  # the last read stays
    assert [r.getMessage().split()[0] for r in caplog.records] == ["week_start_settings_unreadable"]
    settings.write_bytes(b'\xef\xbb\xbf{"weekStart": "saturday"}')
    assert week.refresh() == 5


@pytest.mark.parametrize("toggle", ["excludes", "templates"])
def test_obsidian_rules_turned_on_by_a_reload_are_in_force_when_it_answers(
    tmp_path: Path, make_cfg: Any, toggle: str
) -> None:
    """index.obsidianExcludes (or obsidianTemplates) turned on by a reload: the rules were built
    without reading Obsidian's settings, so the removal at the reload found nothing to remove and
    the folder stayed searchable until the next sweep read them."""
    v = tmp_path / "v"
    folder = "Private" if toggle == "excludes" else "Tpl"
    write(v / f"{folder}/p.md", "# P\n\nThe secret diary of the lighthouse keeper.\n")
    write(v / "Open.md", "# Open\n\nThe public history of the harbour.\n")
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
    write(v / ".obsidian/templates.json", json.dumps({"folder": "Tpl"}))
    key = f"index.obsidian{toggle.capitalize()}"
    h = Harness(make_cfg(v, **{key: "false"}), FakeEmbedder())
    try:
        h.sweep()
        assert f"vault/{folder}/p" in _keys(h)
        before = (False, True) if toggle == "excludes" else (True, False)
        assert (h.indexer.ignore.obsidian, h.indexer.ignore.templates) == before
        assert h.indexer.set_excludes([], True, True) == key
        assert h.indexer.remove_excluded() == 1
        assert f"vault/{folder}/p" not in _keys(h)
        found = [x["reference"] for x in search(h, "secret diary lighthouse keeper", min_score=0)]
        assert f"vault/{folder}/p" not in found
    finally:
        h.close()


def test_an_exclude_reload_reads_obsidians_settings_anew(tmp_path: Path, make_cfg: Any) -> None:
    """An index.exclude edit reloaded together with an app.json edit: the new rules carried the
    app.json text read before, and the folder newly excluded there stayed in until the next sweep."""
    v = tmp_path / "v"
    write(v / "Private/p.md", "# P\n\nThe secret diary of the lighthouse keeper.\n")
    write(v / "Archive/a.md", "# A\n\nOld archived plans.\n")
    write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": []}))
    h = Harness(make_cfg(v), FakeEmbedder())
    try:
        h.sweep()
        write(v / ".obsidian/app.json", json.dumps({"userIgnoreFilters": ["Private/"]}))
        assert h.indexer.set_excludes(["Archive/"], True) == "index.exclude"
        assert h.indexer.remove_excluded() == 2
        assert not {"vault/Private/p", "vault/Archive/a"} & _keys(h)
    finally:
        h.close()
