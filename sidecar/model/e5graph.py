"""The e5 encoder as an ONNX graph: 4-bit ``MatMulNBits`` linear layers, a 4-bit word table
dequantized per gathered row, and onnxruntime's fused attention and layer norms. ``onnx`` is
imported only here, in the converting child process."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from sidecar.model.e5file import QK, E5File
from sidecar.model.e5folder import MODEL_NAME


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
