"""The built-in all-MiniLM-L6-v2 (the fast English choice): offline resolution, pooling, window,
failure modes, the int8 rewrite. The default model (multilingual-e5-small) is in test_e5.py."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sidecar.contracts.errors import EmbedderError
from sidecar.model.embedder import EmbedderSlot, OnnxEmbedder, load_model
from sidecar.model.locate import MINILM_MODEL, bundled_model_files, resolve_model
from tests.conftest import FakeEmbedder

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def model(prepared_models: Path) -> OnnxEmbedder:
    from sidecar.config import load_config

    env = {
        "SIDECAR_HOME": "/nonexistent-home",
        "SIDECAR_EMBEDDER_CACHE_DIR": str(prepared_models),
        "SIDECAR_EMBEDDER_MODEL": MINILM_MODEL,
    }
    return load_model(load_config(env=env))


def test_bundled_model_is_installed() -> None:
    """The install ships the int8 ONNX (a pinned package) and its tokenizer (sidecar's own data,
    with its license notice): no download, no other SDK."""
    files = bundled_model_files()
    assert files is not None and files.onnx.stat().st_size > 20_000_000
    assert files.tokenizer.name == "all-MiniLM-L6-v2.tokenizer.json"
    assert "Apache License" in (files.tokenizer.parent / "all-MiniLM-L6-v2.NOTICE").read_text()


def test_vectors_are_normalised_and_meaningful(model: OnnxEmbedder) -> None:
    """384-dim unit vectors; a paraphrase is closer than an unrelated sentence."""
    v = model.embed_passages(
        [
            "How do I record audio in a note?",
            "Recording a lecture with a microphone",
            "The tax return is due in April",
        ]
    )
    assert v.shape == (3, 384)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.1
    q = model.embed_query("record audio")
    assert q.shape == (384,)


def test_batching_does_not_change_vectors(model: OnnxEmbedder) -> None:
    """Length-sorted, padded batches give the same vectors as one text at a time."""
    texts = ["short", "a somewhat longer sentence about gardens and tomatoes", "x " * 120]
    together = model.embed_passages(texts)
    alone = np.stack([model.embed_passages([t])[0] for t in texts])
    assert np.allclose(together, alone, atol=1e-4)


def test_window_is_256_not_128(model: OnnxEmbedder) -> None:
    """The shipped tokenizer's 128-token truncation is overridden: tokens 129-256 change the vector."""
    base = "garden " * 150
    a = model.embed_passages([base + "nuclear reactor physics " * 20])[0]
    b = model.embed_passages([base + "tomato salad recipe " * 20])[0]
    assert float(a @ b) < 0.999
    assert model.count_tokens(["word " * 600]) == [600]  # counting is never truncated


def test_home_models_folder_wins_over_bundle(tmp_path: Path) -> None:
    """<home>/models/<name>/ with model.onnx + tokenizer.json is found before the bundled package."""
    from sidecar.config import load_config

    files = bundled_model_files()
    assert files is not None
    target = tmp_path / "home" / "models" / MINILM_MODEL
    target.mkdir(parents=True)
    (target / "model.onnx").symlink_to(files.onnx)
    shutil.copy(files.tokenizer, target / "tokenizer.json")
    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "home"), "SIDECAR_EMBEDDER_MODEL": MINILM_MODEL})
    assert resolve_model(cfg).origin == "home"
    assert load_model(cfg).dim == 384


def test_missing_and_broken_models_fail_clearly(tmp_path: Path) -> None:
    """An unknown model or a corrupt file raises EmbedderError saying where it looked."""
    from sidecar.config import load_config

    cfg: Any = load_config(env={"SIDECAR_HOME": str(tmp_path), "SIDECAR_EMBEDDER_MODEL": "no-such-model"})
    with pytest.raises(EmbedderError, match="no-such-model"):
        resolve_model(cfg)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "model.onnx").write_bytes(b"not a model")
    files = bundled_model_files()
    assert files is not None
    shutil.copy(files.tokenizer, broken / "tokenizer.json")
    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path), "SIDECAR_EMBEDDER_PATH": str(broken)})
    with pytest.raises(EmbedderError, match="cannot load model"):
        load_model(cfg)


def _tiny_model(path: Path, quantized: bool) -> None:
    """input_ids -> embedding table -> MatMul: with int8 weights stored as Cast + Mul(scale) (the
    bundled model's layout) or as plain float tensors."""
    import onnx
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(3)
    table = rng.integers(-127, 128, size=(100, 64), dtype=np.int8)
    row_scale = rng.uniform(0.001, 0.01, size=(100, 1)).astype(np.float32)
    weight = rng.integers(-127, 128, size=(64, 16), dtype=np.int8)
    col_scale = rng.uniform(0.001, 0.01, size=(1, 16)).astype(np.float32)
    nodes: list[Any] = []
    if quantized:
        inits = [
            nh.from_array(table, "table_q"),
            nh.from_array(row_scale, "table_scale"),
            nh.from_array(weight, "w_q"),
            nh.from_array(col_scale, "w_scale"),
        ]
        nodes += [
            helper.make_node("Cast", ["table_q"], ["table_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["table_f", "table_scale"], ["table"]),
            helper.make_node("Cast", ["w_q"], ["w_f"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["w_f", "w_scale"], ["w"]),
        ]
    else:
        inits = [
            nh.from_array(table.astype(np.float32) * row_scale, "table"),
            nh.from_array(weight.astype(np.float32) * col_scale, "w"),
        ]
    nodes += [
        helper.make_node("Gather", ["table", "input_ids"], ["emb"], axis=0),
        helper.make_node("MatMul", ["emb", "w"], ["states"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "s"]),
        ],
        [helper.make_tensor_value_info("states", TensorProto.FLOAT, ["b", "s", 16])],
        initializer=inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_loaded_model_keeps_no_copy_of_the_file(tmp_path: Path) -> None:
    """The session is made from the file's bytes; onnxruntime's Python wrapper would keep them for
    good (the whole file resident beside the session): nothing of that size stays referenced."""
    from sidecar.config import load_config
    from sidecar.model.files import DATA_DIR

    folder = tmp_path / "tiny"
    folder.mkdir()
    _tiny_model(folder / "model.onnx", quantized=False)
    shutil.copy(DATA_DIR / "all-MiniLM-L6-v2.tokenizer.json", folder / "tokenizer.json")
    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "home"), "SIDECAR_EMBEDDER_PATH": str(folder)})
    model = load_model(cfg)
    assert model.dim == 16
    size = (folder / "model.onnx").stat().st_size
    kept = [
        k for k, v in vars(model._session).items() if isinstance(v, (bytes, bytearray)) and len(v) >= size
    ]
    assert kept == []


def _run(path: Path, ids: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    out: np.ndarray = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0]
    return out


def test_prepare_keeps_int8_weights_int8(tmp_path: Path) -> None:
    """Cast + Mul(scale) weights are rewritten to int8 kernels (gathered rows dequantized after the
    Gather, MatMulNBits for the MatMul), checked against the original, and cached."""
    import onnx

    from sidecar.model.int8prep import ensure_prepared

    source, target = tmp_path / "tiny.onnx", tmp_path / "cache" / "tiny-prepared.onnx"
    _tiny_model(source, quantized=True)
    assert ensure_prepared(source, target) == target
    ops = [n.op_type for n in onnx.load(target).graph.node]
    assert "MatMulNBits" in ops and "MatMul" not in ops
    assert ops.count("Cast") == 1  # only the gathered rows are converted, not the table
    ids = np.array([[1, 5, 99, 0], [42, 42, 7, 3]], dtype=np.int64)
    a, b = _run(source, ids), _run(target, ids)
    cos = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
    assert cos.min() > 0.999
    assert ensure_prepared(source, target) == target  # cached: no second child


def test_prepare_leaves_other_models_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A float model has nothing to rewrite: a .skip note says so and later starts do not ask again;
    a child that fails (not a model) leaves no note, so the next start tries again."""
    import sidecar.model.int8prep as prep
    from sidecar.model import child

    source, target = tmp_path / "float.onnx", tmp_path / "cache" / "float-prepared.onnx"
    _tiny_model(source, quantized=False)
    assert prep.ensure_prepared(source, target) is None
    assert "no int8" in target.with_suffix(".skip").read_text()
    monkeypatch.setattr(child.subprocess, "Popen", lambda *a, **k: pytest.fail("child started again"))
    assert prep.ensure_prepared(source, target) is None
    monkeypatch.undo()
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    assert prep.ensure_prepared(broken, tmp_path / "cache" / "broken.onnx") is None
    assert not (tmp_path / "cache" / "broken.skip").exists()


def test_int8_kernels_give_the_float_models_vectors(model: OnnxEmbedder, tmp_path: Path) -> None:
    """The default (prepared copy, weights kept int8) and int8Kernels false (weights folded to
    float32) agree to cosine 0.999 and share the model id, so stored vectors stay valid."""
    from sidecar.config import load_config

    assert model.prepared is not None and model.prepared.is_file()
    env = {
        "SIDECAR_HOME": str(tmp_path),
        "SIDECAR_EMBEDDER_INT8_KERNELS": "0",
        "SIDECAR_EMBEDDER_MODEL": MINILM_MODEL,
    }
    plain = load_model(load_config(env=env))
    assert plain.prepared is None and plain.model_id == model.model_id
    assert (model.weights, plain.weights) == ("int8", "float32")
    texts = [
        "How do I record audio in a note?",
        "Sync your vault across devices with end-to-end encryption.",
        "Die Grafansicht zeigt Verbindungen zwischen Notizen.",
        "garden " * 180,
    ]
    cos = (model.embed_passages(texts) * plain.embed_passages(texts)).sum(axis=1)
    assert cos.min() > 0.999
    assert float(model.embed_query("sync settings") @ plain.embed_query("sync settings")) > 0.999


def test_unusable_prepared_copy_is_replaced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A damaged cached copy is logged, deleted and the original model used; the next load makes
    a good copy again (in the default place, <home>/models/.prepared/)."""
    from sidecar.config import load_config

    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "home"), "SIDECAR_EMBEDDER_MODEL": MINILM_MODEL})
    first = load_model(cfg)
    assert first.prepared is not None and first.prepared.parent == tmp_path / "home" / "models" / ".prepared"
    first.prepared.write_bytes(b"\x00garbage")
    second = load_model(cfg)
    assert second.prepared is None and "model_prepared_unusable" in caplog.text
    assert not first.prepared.exists()
    third = load_model(cfg)
    assert third.prepared == first.prepared and third.prepared.stat().st_size > 20_000_000
    assert float(second.embed_query("canvas") @ third.embed_query("canvas")) > 0.999


def test_minilm_settings_come_from_the_model_table(model: OnnxEmbedder) -> None:
    """No prefixes, English only: what all-MiniLM-L6-v2 was trained for; the id names the file."""
    assert model.model_id == f"{MINILM_MODEL}@8199be6f699a"
    assert (model.cfg.query_prefix, model.cfg.passage_prefix, model.cfg.languages) == ("", "", "en")
    assert model.files.tokenizer.parent.name == "data"  # shipped with sidecar, not another package


def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_tampered_minilm_files_fail_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One changed byte in the package's model.onnx or in the shipped tokenizer.json: a start-up
    error that names the file (and nothing is loaded from it)."""
    import sidecar.model.locate as locate
    from sidecar.config import load_config

    files = bundled_model_files()
    assert files is not None
    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "home"), "SIDECAR_EMBEDDER_MODEL": MINILM_MODEL})
    package = tmp_path / "pkg"
    package.mkdir()
    shutil.copy(files.onnx, package / "model.onnx")
    _flip_one_byte(package / "model.onnx")
    minilm = locate.MINILM_PACKAGE
    monkeypatch.setattr(locate, "package_dir", lambda name: package if name == minilm else None)
    with pytest.raises(EmbedderError, match=rf"{package / 'model.onnx'}: sha256 .* differs"):
        load_model(cfg)
    monkeypatch.undo()
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(files.tokenizer, data / files.tokenizer.name)
    _flip_one_byte(data / files.tokenizer.name)
    monkeypatch.setattr(locate, "DATA_DIR", data)
    with pytest.raises(EmbedderError, match=rf"{data / files.tokenizer.name}: sha256 .* differs"):
        load_model(cfg)


def test_slot_counts_with_the_tokenizer_before_the_model() -> None:
    """Chunking may start once the tokenizer is there: the slot hands out its counter, then the
    model's; a failed load releases the waiters and leaves the estimate to the caller."""
    slot = EmbedderSlot()
    assert slot.counter() is None and slot.wait_countable(0.01) is False
    slot.set_loading()
    slot.set_counter(lambda texts: [7 for _ in texts])
    assert slot.wait_countable(0.01) is True
    count = slot.counter()
    assert count is not None and count(["a", "b"]) == [7, 7] and slot.state == "loading"
    fake = FakeEmbedder()
    slot.set_ok(fake, "test")
    assert slot.counter() == fake.count_tokens
    slot.set_failed("gone")
    assert slot.counter() is None and slot.wait_countable(0.01) is True


def test_made_up_words_are_unread_by_the_tokenizer(model: OnnxEmbedder) -> None:
    """A query whose words the tokenizer breaks into scraps is one the model has never read (the
    search counts its cosine as no evidence when no word occurs in the vault either); real words,
    numbers among them, and a script written one piece per character are read."""
    from types import SimpleNamespace

    from sidecar.config import RecallConfig, SearchConfig
    from sidecar.search.query import analyze
    from sidecar.search.retrieval import Retriever

    stores: Any = SimpleNamespace(serving=SimpleNamespace(model=model))
    r = Retriever(stores, None, SearchConfig(), RecallConfig())  # type: ignore[arg-type]
    for text in ("xyzzy quux", "asdfgh qwertz", "wonoxopi kaxivonys davohigo"):
        assert r.unread(analyze(text)), text
    for text in ("restore a deleted file from the backup", "nightly snapshot 2024", "录音", "garden", "AI"):
        assert not r.unread(analyze(text)), text


def test_onnxruntime_reports_nothing_and_writes_nothing_outside_the_home(tmp_path: Path) -> None:
    """onnxruntime 1.32 keeps a device id and an upload cache under ~/.cache/Microsoft unless
    ORT_DISABLE_TELEMETRY is set before it starts: importing sidecar sets it, so loading a model
    in a process that imported sidecar first leaves the user's home untouched."""
    import os
    import subprocess
    import sys

    files = bundled_model_files()
    assert files is not None
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY" and not k.startswith("XDG_")}
    env["HOME"] = str(tmp_path)
    code = (
        "import sidecar, onnxruntime as ort; "
        f"ort.InferenceSession({str(files.onnx)!r}, providers=['CPUExecutionProvider'])"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert not (tmp_path / ".cache").exists(), sorted(p.name for p in tmp_path.rglob("*"))


def test_a_conversion_unused_for_a_month_goes_after_a_switch_away(
    model: OnnxEmbedder, tmp_path: Path
) -> None:
    """A user who switched from multilingual-e5-small to MiniLM kept its 80 MB conversion for
    good (only an e5 start removed conversions): a month after its last use, the daily tidy of a
    daemon running any model removes it; the copy the start loaded is kept and marked used."""
    import os
    import time

    from sidecar.config import load_config
    from sidecar.model import prepared

    assert model.prepared is not None
    copy = tmp_path / model.prepared.name
    shutil.copyfile(model.prepared, copy)  # this start's int8 copy, not made again here
    e5_folder = tmp_path / "multilingual-e5-small-1571fc982750-e5-ort1.32.0"
    e5_folder.mkdir()
    (e5_folder / "model.onnx").write_bytes(b"x")
    month_ago = time.time() - 31 * 86400
    for path in (copy, e5_folder):
        os.utime(path, (month_ago, month_ago))
    env = {
        "SIDECAR_HOME": "/nonexistent-home",
        "SIDECAR_EMBEDDER_CACHE_DIR": str(tmp_path),
        "SIDECAR_EMBEDDER_MODEL": MINILM_MODEL,
    }
    loaded = load_model(load_config(env=env))
    assert loaded.prepared == copy and copy.is_file() and time.time() - copy.stat().st_mtime < 3600
    prepared.tidy(tmp_path)
    assert copy.is_file() and not e5_folder.exists()
