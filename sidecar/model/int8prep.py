"""Keep an int8 model's weights int8 in memory: rewrite it once, in a child process, and cache it.

The bundled all-MiniLM-L6-v2 stores every weight as an int8 tensor followed by ``Cast`` and
``Mul(scale)``. onnxruntime either runs those nodes on every call (a one-text query took 39 ms) or
folds them into float32 weights once (2.6 ms, but ~120 MB resident where the file holds 23 MB).
The rewrite keeps the int8 tensors and gives them to kernels that read int8:

- an embedding table (``Gather`` of the dequantized table) gathers the int8 rows and their
  per-row scales and dequantizes only those rows: the same numbers, bit for bit;
- a ``MatMul`` weight becomes ``MatMulNBits`` (8 bits, blocks of 32 along K, accuracy level 4:
  int8 dot products with the activations quantized per block of 32).

The child checks the rewritten model against the original on fixed probe inputs (cosine of the
pooled outputs >= ``MIN_COSINE``, 0.995) before it writes the file; a model that does not have the
pattern, or fails the check, gets a ``.skip`` note with the reason and is loaded as it is. The
daemon never imports ``onnx`` (14 MB resident) and never holds both models at once.
Measured (BENCHMARKS.md): model resident 120 -> ~60 MB, query 2.6 -> 1.3 ms, batch
throughput unchanged, vectors within cosine 0.9997 of the float model's.

    python -m sidecar.model.int8prep SOURCE.onnx TARGET.onnx    # exit 0 written, 3 skipped, 1 failed
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from sidecar.model import child
from sidecar.runtime.orphan import die_with_parent

log = logging.getLogger(__name__)

PREP_VERSION = 1  # bump when the rewrite changes: cached files carry it in their name
BLOCK = 32  # K-block of MatMulNBits: 32 kept cosine 0.9997 of float, 128 only 0.9988 (same speed)
MIN_COSINE = 0.995  # a broken rewrite lands far below; random-token probes gave 0.9994 here
EXIT_SKIPPED = 3
CHILD_TIMEOUT_S = 600.0


def cache_name(digest: str, ort_version: str) -> str:
    """File name of a prepared copy: the source's digest, the rewrite and the runtime it was
    checked with (another onnxruntime may run MatMulNBits differently, so it is checked again)."""
    return f"{digest}-p{PREP_VERSION}-ort{ort_version}.onnx"


def ensure_prepared(source: Path, target: Path, timeout: float = CHILD_TIMEOUT_S) -> Path | None:
    """The prepared model at ``target``, made by a child process if missing; None to load the
    source as it is (no pattern, failed check, or the child failed: the reason is logged)."""
    if target.is_file():
        return target
    skip = target.with_suffix(".skip")
    if skip.is_file():
        return None
    t0 = time.perf_counter()
    try:
        code, detail = child.run("sidecar.model.int8prep", source, target, timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("model_prepare_failed source=%s error=%s", source, exc)
        return None
    if code == 0 and target.is_file():
        log.info(
            "model_prepared source=%s target=%s seconds=%.1f %s",
            source,
            target,
            time.perf_counter() - t0,
            detail,
        )
        return target
    if code == EXIT_SKIPPED:
        log.info("model_prepare_skipped source=%s reason=%s", source, detail)
    else:  # a crash or a full disk: tried again at the next start
        log.warning("model_prepare_failed source=%s code=%s error=%s", source, code, detail)
    return None


def rewrite(data: bytes) -> tuple[bytes, dict[str, int]] | None:
    """The rewritten model and what was rewritten, or None if nothing matched."""
    import onnx
    from onnx import helper
    from onnx import numpy_helper as nh

    model = onnx.load_from_string(data)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    replaced: dict[int, list[Any]] = {}  # id(node) -> nodes in its place ([] removes it)
    new_inits: list[Any] = []
    counts = {"gather": 0, "matmul": 0, "vocab": 0}
    for mul in graph.node:
        found = _dequant(mul, producer, inits)
        if found is None:
            continue
        cast, q_name, s_name = found
        users = consumers.get(mul.output[0], [])
        if len(users) != 1 or mul.output[0] in {o.name for o in graph.output}:
            continue
        user = users[0]
        q = nh.to_array(inits[q_name])
        scale = nh.to_array(inits[s_name]).astype(np.float32)
        nodes: list[Any] | None = None
        if user.op_type == "Gather" and list(user.input).index(mul.output[0]) == 0:
            nodes = _gather(user, q, q_name, scale, s_name)
            if nodes is not None:
                counts["gather"] += 1
                counts["vocab"] = max(counts["vocab"], q.shape[0])
        elif user.op_type == "MatMul" and list(user.input).index(mul.output[0]) == 1:
            nodes = _matmul(user, q, scale, new_inits)
            counts["matmul"] += nodes is not None
        if nodes is not None:
            replaced[id(user)] = nodes
            replaced[id(mul)] = []
            if len(consumers.get(cast.output[0], [])) == 1:
                replaced[id(cast)] = []
    if not replaced:
        return None
    kept = [n for node in graph.node for n in replaced.get(id(node), [node])]
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(new_inits)
    used = {name for node in graph.node for name in node.input} | {o.name for o in graph.output}
    alive = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(alive)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model.SerializeToString(), counts


def _dequant(mul: Any, producer: dict[str, Any], inits: dict[str, Any]) -> Any:
    """(cast, int8 initializer, scale initializer) if ``mul`` is ``Cast(int8 const) * const``."""
    import onnx

    if mul.op_type != "Mul" or len(mul.input) != 2:
        return None
    first, second = mul.input
    for a, b in ((first, second), (second, first)):
        cast = producer.get(a)
        if cast is None or cast.op_type != "Cast" or b not in inits:
            continue
        q = inits.get(cast.input[0])
        to = next((attr.i for attr in cast.attribute if attr.name == "to"), None)
        if q is not None and q.data_type == onnx.TensorProto.INT8 and to == onnx.TensorProto.FLOAT:
            return cast, cast.input[0], b
    return None


def _gather(user: Any, q: Any, q_name: str, scale: Any, s_name: str) -> list[Any] | None:
    """Gather int8 rows (and per-row scales), dequantize after: same values as before."""
    from onnx import helper

    axis = next((attr.i for attr in user.attribute if attr.name == "axis"), 0)
    if axis != 0 or q.ndim != 2:
        return None
    ids, out = user.input[1], user.output[0]
    nodes = [
        helper.make_node("Gather", [q_name, ids], [out + "/q"], axis=0),
        helper.make_node("Cast", [out + "/q"], [out + "/f"], to=1),
    ]
    if scale.size == 1:
        nodes.append(helper.make_node("Mul", [out + "/f", s_name], [out]))
    elif scale.shape == (q.shape[0], 1):
        nodes.append(helper.make_node("Gather", [s_name, ids], [out + "/s"], axis=0))
        nodes.append(helper.make_node("Mul", [out + "/f", out + "/s"], [out]))
    else:
        return None
    return nodes


def _matmul(user: Any, q: Any, scale: Any, new_inits: list[Any]) -> list[Any] | None:
    """MatMul(x, int8 W * per-column scale) -> MatMulNBits with 8-bit blocks along K."""
    from onnx import helper
    from onnx import numpy_helper as nh

    if q.ndim != 2 or q.shape[0] % BLOCK:
        return None
    k, n = q.shape
    if scale.size == 1:
        per_column = np.full(n, float(scale.reshape(-1)[0]), dtype=np.float32)
    elif scale.shape in ((1, n), (n,)):
        per_column = scale.reshape(n)
    else:
        return None
    blocks = k // BLOCK
    out = user.output[0]
    # MatMulNBits stores B column-major as unsigned bytes with zero point 128 (its default).
    packed = (q.T.astype(np.int16) + 128).astype(np.uint8).reshape(n, blocks, BLOCK)
    scales = np.repeat(per_column[:, None], blocks, axis=1).reshape(-1)
    new_inits.append(nh.from_array(packed, out + "/B"))
    new_inits.append(nh.from_array(scales.astype(np.float32), out + "/scales"))
    return [
        helper.make_node(
            "MatMulNBits",
            [user.input[0], out + "/B", out + "/scales"],
            [out],
            domain="com.microsoft",
            K=k,
            N=n,
            bits=8,
            block_size=BLOCK,
            accuracy_level=4,
        )
    ]


def _session(data: bytes) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.enable_cpu_mem_arena = False
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def check(original: bytes, prepared: bytes, vocab: int) -> float:
    """Lowest cosine between the two models' pooled outputs over fixed probe inputs (token ids
    below ``vocab``, the largest embedding table rewritten; 0: none was)."""
    probes = []
    rng = np.random.default_rng(7)
    top = min(vocab or 1000, 5000)
    for length in (4, 17, 64, 200):
        ids = rng.integers(0, top, size=(2, length), dtype=np.int64)
        mask = np.ones_like(ids)
        mask[1, length // 2 :] = 0  # padding, as in real batches
        probes.append((ids, mask))
    lowest = 1.0
    outputs = []
    for data in (original, prepared):
        session = _session(data)
        names = {i.name for i in session.get_inputs()}
        runs = []
        for ids, mask in probes:
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            states = session.run(None, {k: v for k, v in feeds.items() if k in names})[0]
            if states.ndim == 3:
                states = (states * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
            runs.append(states / np.linalg.norm(states, axis=1, keepdims=True))
        outputs.append(runs)
        del session
    for a, b in zip(*outputs, strict=True):
        lowest = min(lowest, float((a * b).sum(axis=1).min()))
    return lowest


def main(argv: list[str]) -> int:
    paths = child.arguments(argv, "python -m sidecar.model.int8prep SOURCE.onnx TARGET.onnx")
    if paths is None:
        return 2
    from sidecar.runtime.atomic import atomic_write

    source, target = paths
    die_with_parent()

    def skip(reason: str) -> int:
        return child.refuse(target, reason, EXIT_SKIPPED)

    original = source.read_bytes()
    done = rewrite(original)
    if done is None:
        return skip("no int8 Cast/Mul weights to rewrite")
    prepared, counts = done
    try:
        cosine = check(original, prepared, counts["vocab"])
    except Exception as exc:  # onnxruntime raises its own types (e.g. an op this build lacks)
        return skip(f"rewritten model does not run here: {str(exc).splitlines()[0][:300]}")
    if cosine < MIN_COSINE:
        return skip(f"rewritten model disagrees with the original: cosine {cosine:.5f} < {MIN_COSINE}")
    atomic_write(target, prepared)
    summary = f"gathers={counts['gather']} matmuls={counts['matmul']} bytes={len(prepared)}"
    print(f"{summary} min_cosine={cosine:.6f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
