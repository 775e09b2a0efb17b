"""A block's weights besides its routed experts, by the part of the block's work that reads them.

llama.cpp's decode graph runs a block in this order: the attention's input side
(`attn_norm` and the projections into the attention: q, k, v, MLA's q_a/q_b/kv_a/kv_b, a
linear-attention block's qkv, gate and ssm_* weights), the attention over the KV cache (on
the device that holds the cache), the attention's output projection (`attn_output`,
`ssm_out`), then the FFN side (`ffn_norm`, the router, shared experts or a dense FFN),
then the routed experts. A tensor-buffer override (`-ot`) may put any of these weights on
another device than its block's (`-ngl`); each op then runs where its weight is
(ggml_backend_sched gives an op with a weight the weight's backend; a decode batch of 1 is
below llama.cpp's op-offload threshold of 32), so the token's work changes device wherever
a piece's weights do.

The names are what llama.cpp's converter writes (`engine.models.gguf_tensors`); the bytes are
the quantization mix's (`engine.models.quant_mix`) shares of each block, scaled to the block's
own total (`ModelSpec.shared_layer_bytes`, a GGUF file's exact sizes where there is one).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from engine.models.gguf_tensors import gguf_tensors
from engine.models.model import ModelSpec
from engine.models.quant import Quantization
from engine.models.quant_mix import tensor_bytes, tensor_types

ATTENTION_IN, ATTENTION_OUT, FFN = "attention_in", "attention_out", "ffn"
PIECES = (ATTENTION_IN, ATTENTION_OUT, FFN)  # in the order a block runs them (the KV cache between the first two)
OUTPUT_HEAD = "output.weight"


@dataclass(frozen=True)
class SharedTensor:
    name: str  # e.g. "blk.3.attn_q.weight"
    piece: str  # one of PIECES
    bytes: float


def piece_of(name: str) -> str:
    """The part of its block's work a (non-routed-expert) block tensor serves."""
    role = name.split(".")[2] if name.count(".") >= 2 else name
    if role in ("attn_output", "ssm_out"):
        return ATTENTION_OUT
    if role.startswith(("attn_", "ssm_")):
        return ATTENTION_IN
    return FFN


@lru_cache(maxsize=64)
def shared_tensors(model: ModelSpec, quant: Quantization) -> tuple[tuple[SharedTensor, ...], ...]:
    """Per block (0..n_blocks-1), its weights other than the routed experts, in name order."""
    by_block: list[list[tuple[str, float]]] = [[] for _ in range(model.n_blocks)]
    for name, (block, weight) in _tensor_weights(model, quant).items():
        by_block[block].append((name, weight))
    out = []
    for block, names in enumerate(by_block):
        scale = model.shared_layer_bytes(quant, block) / (sum(w for _, w in names) or 1.0)
        out.append(tuple(SharedTensor(name, piece_of(name), w * scale) for name, w in names))
    return tuple(out)


def _tensor_weights(model: ModelSpec, quant: Quantization) -> dict[str, tuple[int, float]]:
    """name -> (block, relative bytes) of every shared block tensor: the mix's bytes where
    the quantization names a llama.cpp file type, else the element count (a uniform bits
    per weight)."""
    if quant.llama_ftype:
        typed = [(t, float(tensor_bytes(t, type_name))) for t, type_name in tensor_types(model, quant.llama_ftype)]
    else:
        typed = [(t, float(t.n_elements)) for t in gguf_tensors(model)]
    return {t.name: (t.block, w) for t, w in typed
            if t.block is not None and t.block < model.n_blocks and not t.is_routed_expert}


@lru_cache(maxsize=64)  # a model's names never change; a fit prices each row's model hundreds of times
def tensor_names(model: ModelSpec) -> tuple[str, ...]:
    """Every tensor name of the model's GGUF that llama.cpp loads (NextN blocks left out)."""
    return tuple(t.name for t in gguf_tensors(model) if t.block is None or t.block < model.n_blocks)
