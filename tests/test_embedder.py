"""The real bundled model: offline resolution, pooling, window, failure modes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sidecar.embedder import BUNDLED_MODEL, OnnxEmbedder, bundled_model_files, load_model, resolve_model
from sidecar.errors import EmbedderError

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def model() -> OnnxEmbedder:
    from sidecar.config import load_config

    return load_model(load_config(env={"SIDECAR_HOME": "/nonexistent-home"}))


def test_bundled_model_is_installed() -> None:
    """The default install ships the int8 ONNX and its tokenizer (no download)."""
    files = bundled_model_files()
    assert files is not None and files.onnx.stat().st_size > 20_000_000
    assert files.tokenizer.name == "tokenizer.json"


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
    target = tmp_path / "home" / "models" / BUNDLED_MODEL
    target.mkdir(parents=True)
    (target / "model.onnx").symlink_to(files.onnx)
    shutil.copy(files.tokenizer, target / "tokenizer.json")
    cfg = load_config(env={"SIDECAR_HOME": str(tmp_path / "home")})
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
