"""Which ``MatMulNBits`` kernels run fastest on this CPU, measured once when a model is prepared.

onnxruntime's ``MatMulNBits`` multiplies either with int8 dot products (accuracy level 4: the
activations quantized per block of 32) or in float32 from the dequantized weights (level 1).
Which one is faster depends on the CPU: int8 wins where the CPU has int8 dot-product
instructions (AVX-512 VNNI, AVX-VNNI, Arm dotprod); on a core with plain AVX2 (measured: a 2-core
AMD EPYC) float32 embedded 16 passages of 200 tokens of multilingual-e5-small in 2.6 s against
3.5 s. The weights stay as they are in memory either way; only the level differs, and the vectors
agree to cosine 0.9999. The model file is not rewritten: the level is patched into the bytes the
session is built from, so the file's hash, and with it the model id and the stored vectors, stay.

The converting child measures both levels on a fixed query and passage batch and writes the
choice into the model folder (``kernels.json``, listed in its ``SHA256SUMS``); the loader applies it.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

CHOICE_FILE = "kernels.json"
INT8, FLOAT = 4, 1  # MatMulNBits accuracy levels
# A serialized AttributeProto: field 1 (name) "accuracy_level", field 3 (i) <level>, field 20 (type) INT.
_HEAD = b"\x0a\x0eaccuracy_level\x18"
_TAIL = b"\xa0\x01\x02"
_NODE = b"\x22\x0bMatMulNBits"  # NodeProto field 4 (op_type)
# Float32 is chosen only when it is clearly faster: int8 is what the model was checked with.
_MARGIN = 0.9


def with_accuracy(data: bytes, level: int) -> bytes:
    """The model ``data`` with every ``MatMulNBits`` node at accuracy ``level``: a same-length
    patch of the serialized attribute (one byte each). ValueError unless every such node carries
    exactly one level attribute that was patched (so no weight byte can have been touched)."""
    nodes = data.count(_NODE)
    if nodes == 0:
        return data
    out = data
    for old in (INT8, FLOAT):
        if old != level:
            out = out.replace(_HEAD + bytes([old]) + _TAIL, _HEAD + bytes([level]) + _TAIL)
    if out.count(_HEAD + bytes([level]) + _TAIL) != nodes:
        raise ValueError(f"{nodes} MatMulNBits nodes, but not as many accuracy levels to set")
    return out


def read_choice(folder: Path) -> int | None:
    """The accuracy level the folder's ``kernels.json`` chose (None: none chosen, run as written)."""
    path = folder / CHOICE_FILE
    if not path.is_file():
        return None
    level = json.loads(path.read_text(encoding="utf-8")).get("accuracyLevel")
    return level if level in (INT8, FLOAT) else None


def probe(data: bytes, threads: int, rounds: int = 3) -> dict[str, Any]:
    """Time both levels on a passage batch (4 texts of 128 random tokens; the median of
    ``rounds``) and on a query (one text of 16; the fastest of four times as many), after a
    warm-up run each, alternating so that a change of machine load hits both; the chosen level
    and the figures.

    A query is what a person or an agent waits for, so its timing decides; only when the levels
    tie on it does the passage batch (indexing, in the background) decide. The two can disagree:
    on an Intel Xeon with AVX-512 VNNI a 16-token query took 8.4 ms with int8 dot products and
    13.0 ms in float32, while 128-token passages took 65.5 against 56.5 ms."""
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sessions = {
        level: ort.InferenceSession(with_accuracy(data, level), opts, providers=["CPUExecutionProvider"])
        for level in (INT8, FLOAT)
    }
    first = next(iter(sessions.values()))
    rng = np.random.default_rng(0)
    shapes = {"passages": (4, 128), "query": (1, 16)}
    feeds: dict[str, dict[str, Any]] = {}
    for kind, shape in shapes.items():
        ids = rng.integers(1000, 30_000, size=shape, dtype=np.int64)
        inputs = {"input_ids": ids, "token_type_ids": np.zeros_like(ids)}  # the rest: masks, all ones
        feeds[kind] = {i.name: inputs.get(i.name, np.ones_like(ids)) for i in first.get_inputs()}
    times: dict[tuple[str, int], list[float]] = {(k, level): [] for k in shapes for level in sessions}
    for s in sessions.values():
        for feed in feeds.values():
            s.run(None, feed)
    # A query takes milliseconds, and the probe runs beside a first start's keyword indexing: it
    # gets four times the rounds and its fastest run counts (what the kernels can do, not what
    # the other process left them); in three medians under load the two levels had looked alike.
    for _ in range(rounds):
        for kind, feed in feeds.items():
            for _ in range(4 if kind == "query" else 1):
                for level, s in sessions.items():
                    t0 = time.perf_counter()
                    s.run(None, feed)
                    times[kind, level].append((time.perf_counter() - t0) * 1000)
    # The passages' median, the query's fastest run (see above).
    figure = {
        (kind, level): (min(t) if kind == "query" else statistics.median(t))
        for (kind, level), t in times.items()
    }

    def both(kind: str) -> tuple[float, float]:
        return figure[kind, INT8], figure[kind, FLOAT]

    def shown(kind: str) -> dict[str, float]:
        # To the microsecond: on a fast CPU a small probe takes ~0.1 ms, and at 0.1 ms steps the
        # report could no longer show why the level was chosen.
        return {"int8": round(figure[kind, INT8], 3), "float32": round(figure[kind, FLOAT], 3)}

    return {
        "accuracyLevel": choose(both("query"), both("passages")),
        "medianMs": shown("passages"),
        "queryFastestMs": shown("query"),
        "threads": threads,
        "onnxruntime": ort.__version__,
    }


def choose(query: tuple[float, float], passages: tuple[float, float]) -> int:
    """The level from (int8, float32) times (a query's fastest run, the passages' median): the
    one clearly faster on a query, else the one clearly faster on passages, else int8 (what the
    model was checked with)."""
    for int8, f32 in (query, passages):
        if f32 < _MARGIN * int8:
            return FLOAT
        if int8 < _MARGIN * f32:
            return INT8
    return INT8
