"""A GGUF with a catalog model's real shapes, random weights and fewer blocks, for running
llama.cpp on a machine without the real file (bench/llamacpp_cpu.py).

llama.cpp's qwen3moe loader (src/llama-model.cpp, LLM_ARCH_QWEN3MOE) reads the metadata
written here (context and embedding length, block count, head counts, key/value length,
rope base, RMS epsilon, expert count, expert used count, expert feed-forward length) and
creates these tensors, ggml's ne reversed into numpy's order:

    token_embd.weight [vocab, hidden]       output_norm.weight [hidden]   output.weight [vocab, hidden]
    blk.N.attn_norm.weight [hidden]         blk.N.attn_q.weight [heads*head_dim, hidden]
    blk.N.attn_k.weight [kv_heads*head_dim, hidden]    blk.N.attn_v.weight (the same)
    blk.N.attn_output.weight [hidden, heads*head_dim]  blk.N.attn_q_norm.weight, attn_k_norm.weight [head_dim]
    blk.N.ffn_norm.weight [hidden]          blk.N.ffn_gate_inp.weight [experts, hidden]
    blk.N.ffn_gate_exps.weight, ffn_up_exps.weight [experts, expert_ff, hidden]
    blk.N.ffn_down_exps.weight [experts, hidden, expert_ff]

Matrices are F16 (what llama-quantize then turns into Q8_0 or Q4_K_M), norms and the
router F32 (llama.cpp's converter keeps them so, and llama-quantize leaves ffn_gate_inp
alone). The tokenizer model is "none": llama-bench feeds token ids, so it needs no
vocabulary, only `qwen3moe.vocab_size` matching token_embd's rows. Tensors are written
one at a time, so a file of several GB needs memory for one tensor, not all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

ARCH = "qwen3moe"
# Qwen/Qwen3-30B-A3B config.json: rope_theta 1000000, rms_norm_eps 1e-06, max_position_embeddings 40960.
ROPE_BASE = 1_000_000.0
RMS_EPS = 1e-6
CONTEXT = 40960
POOL = 1 << 24  # random values drawn once, tiled over every tensor (decode speed does not read them)


@dataclass(frozen=True)
class GgufShape:
    hidden: int
    n_blocks: int
    n_experts: int
    top_k: int
    expert_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    vocab: int


def catalog_shape(model_id: str, n_blocks: int) -> GgufShape:
    """The shapes of a catalog qwen3moe model (engine/models/catalog.py), with `n_blocks` blocks."""
    from engine.models.catalog import load_model

    m = load_model(model_id)
    if m.arch != ARCH or m.attention is None or m.n_shared_experts:
        raise ValueError(f"{model_id}: only qwen3moe models without shared experts are written here")
    a = m.attention
    return GgufShape(hidden=m.hidden_size, n_blocks=n_blocks, n_experts=m.n_routed_experts, top_k=m.top_k,
                     expert_ff=m.expert_ffn_size, n_head=a.n_heads, n_head_kv=a.n_kv_heads, head_dim=a.head_dim,
                     vocab=m.vocab_size)


def tensor_shapes(s: GgufShape) -> Iterator[tuple[str, tuple[int, ...], type]]:
    """(name, numpy shape, dtype) of every tensor, in file order."""
    h, q, kv, e, f = s.hidden, s.n_head * s.head_dim, s.n_head_kv * s.head_dim, s.n_experts, s.expert_ff
    yield "token_embd.weight", (s.vocab, h), np.float16
    yield "output_norm.weight", (h,), np.float32
    yield "output.weight", (s.vocab, h), np.float16
    for b in range(s.n_blocks):
        p = f"blk.{b}."
        yield p + "attn_norm.weight", (h,), np.float32
        yield p + "attn_q.weight", (q, h), np.float16
        yield p + "attn_k.weight", (kv, h), np.float16
        yield p + "attn_v.weight", (kv, h), np.float16
        yield p + "attn_output.weight", (h, q), np.float16
        yield p + "attn_q_norm.weight", (s.head_dim,), np.float32
        yield p + "attn_k_norm.weight", (s.head_dim,), np.float32
        yield p + "ffn_norm.weight", (h,), np.float32
        yield p + "ffn_gate_inp.weight", (e, h), np.float32
        yield p + "ffn_gate_exps.weight", (e, f, h), np.float16
        yield p + "ffn_up_exps.weight", (e, f, h), np.float16
        yield p + "ffn_down_exps.weight", (e, h, f), np.float16


def add_metadata(w, s, *, name: str, file_type: int, top_k: int | None = None, context: int = CONTEXT,  # type: ignore[no-untyped-def]
                 rope_base: float = ROPE_BASE, rms_eps: float = RMS_EPS) -> None:
    """Every metadata key llama.cpp's qwen3moe loader reads, on the `gguf.GGUFWriter` `w`,
    for shape `s` (any object with GgufShape's fields; `top_k` in place of its own), and
    the tokenizer "none" (no tokens: prompts are token ids)."""
    top_k = s.top_k if top_k is None else top_k
    w.add_name(name)
    w.add_file_type(file_type)
    w.add_context_length(context)
    w.add_embedding_length(s.hidden)
    w.add_block_count(s.n_blocks)
    w.add_feed_forward_length(s.expert_ff * top_k)
    w.add_expert_feed_forward_length(s.expert_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.head_dim)
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(rms_eps)
    w.add_expert_count(s.n_experts)
    w.add_expert_used_count(top_k)
    w.add_vocab_size(s.vocab)
    w.add_tokenizer_model("none")


def write_random_gguf(path: str | Path, s: GgufShape, *, seed: int = 0, name: str = "COPE synthetic Qwen3 MoE") -> Path:
    """Write the GGUF; weights are N(0, 0.02) (norms 1 +- 0.1), tiled from one random pool."""
    import gguf

    rng = np.random.default_rng(seed)
    pool = rng.normal(0.0, 0.02, size=POOL).astype(np.float32)
    path = Path(path)
    w = gguf.GGUFWriter(str(path), ARCH)
    add_metadata(w, s, name=name, file_type=int(gguf.LlamaFileType.MOSTLY_F16))
    shapes = list(tensor_shapes(s))
    for tname, shape, dtype in shapes:
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        w.add_tensor_info(tname, shape, np.dtype(dtype), nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for tname, shape, dtype in shapes:
        if len(shape) == 1:
            data = (1.0 + 5.0 * np.resize(pool, shape)).astype(dtype)  # norms near 1
        else:
            data = np.resize(pool, shape).astype(dtype)
        w.write_tensor_data(data)
    w.close()
    return path
