"""The MatMulNBits kernel choice: the accuracy level patched into a model's bytes (a real graph
run in onnxruntime at both levels) and the probe that picks one (the converted e5 folder's choice
is tested in test_e5.py)."""

from __future__ import annotations

import numpy as np
import pytest

from sidecar.model import kernels


def _nbits_model(level: int = kernels.INT8, with_attribute: bool = True) -> bytes:
    """One 4-bit MatMulNBits layer (K=64, N=8, blocks of 32), as a converter writes it."""
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(1)
    q = rng.integers(0, 16, size=(8, 2, 32), dtype=np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, size=16).astype(np.float32)
    attrs = {"K": 64, "N": 8, "bits": 4, "block_size": 32}
    if with_attribute:
        attrs["accuracy_level"] = level
    node = helper.make_node("MatMulNBits", ["x", "B", "s"], ["y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [nh.from_array(packed, "B"), nh.from_array(scales, "s")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 9
    data: bytes = model.SerializeToString()
    return data


def _run(data: bytes) -> np.ndarray:
    import onnxruntime as ort

    s = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(1, 64)
    return np.asarray(s.run(None, {"x": x})[0])


def test_patch_equals_a_model_written_at_the_other_level() -> None:
    """The byte patch gives exactly the bytes onnx writes for the other level, and both levels
    compute the same layer (int8 activations vs float32: close, not equal)."""
    int8 = _nbits_model(kernels.INT8)
    patched = kernels.with_accuracy(int8, kernels.FLOAT)
    assert patched == _nbits_model(kernels.FLOAT) and len(patched) == len(int8)
    assert kernels.with_accuracy(patched, kernels.INT8) == int8
    a, b = _run(int8), _run(patched)
    assert np.allclose(a, b, rtol=0.05, atol=0.05) and not np.array_equal(a, b)


def test_patch_refuses_a_node_without_its_level() -> None:
    """A MatMulNBits node that carries no accuracy level cannot be patched: refused, not guessed."""
    with pytest.raises(ValueError, match="MatMulNBits"):
        kernels.with_accuracy(_nbits_model(with_attribute=False), kernels.FLOAT)
    plain = b"no such nodes"
    assert kernels.with_accuracy(plain, kernels.FLOAT) is plain


def test_probe_times_both_levels() -> None:
    """The probe runs both levels on a query and on a passage batch and names the level the
    figures choose."""
    choice = kernels.probe(_nbits_model_3d(), threads=1, rounds=2)
    assert choice["accuracyLevel"] in (kernels.INT8, kernels.FLOAT)
    q, p = choice["queryFastestMs"], choice["medianMs"]
    assert min(q["int8"], q["float32"], p["int8"], p["float32"]) >= 0
    assert choice["accuracyLevel"] == kernels.choose((q["int8"], q["float32"]), (p["int8"], p["float32"]))


@pytest.mark.parametrize(
    ("query", "passages", "level"),
    [
        ((8.4, 13.0), (65.5, 56.5), kernels.INT8),  # the query decides: what a person waits for
        ((13.0, 8.4), (56.5, 65.5), kernels.FLOAT),
        ((10.0, 10.2), (3.5, 2.6), kernels.FLOAT),  # a tie on the query: passages decide
        ((10.0, 10.2), (3.5, 3.4), kernels.INT8),  # a tie on both: what the model was checked with
    ],
)
def test_the_query_decides_the_kernels(
    query: tuple[float, float], passages: tuple[float, float], level: int
) -> None:
    assert kernels.choose(query, passages) == level


def _nbits_model_3d() -> bytes:
    """A one-layer encoder shape the probe can feed: input_ids -> Gather -> MatMulNBits."""
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(2)
    table = rng.standard_normal((30_000, 64)).astype(np.float32)
    q = rng.integers(0, 16, size=(8, 2, 32), dtype=np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    scales = rng.uniform(0.01, 0.1, size=16).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["h"]),
        helper.make_node(
            "MatMulNBits", ["h", "B", "s"], ["y"], domain="com.microsoft",
            K=64, N=8, bits=4, block_size=32, accuracy_level=4,
        ),
        helper.make_node("Identity", ["attention_mask"], ["m"]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "l"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["b", "l"]),
        ],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "l", 8]),
            helper.make_tensor_value_info("m", TensorProto.INT64, ["b", "l"]),
        ],
        [nh.from_array(table, "table"), nh.from_array(packed, "B"), nh.from_array(scales, "s")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 9
    data: bytes = model.SerializeToString()
    return data
