"""The tensors a GGUF of a model holds, from its shape alone: names as llama.cpp writes them.

What llama.cpp's converter (convert_hf_to_gguf.py) writes for the families in the catalog,
in the order llama.cpp's loader sorts them (tensors outside the blocks, then block by block,
by name within a block). Shapes follow ggml: `cols` is ne0, the row length a quantization
type must divide; `rows` is ne1; `experts` is ne2 of the 3-D routed-expert tensors.

Left out as too small to matter (well under 0.1% of any catalog model): biases, q/k norms,
attention sinks, per-head scalars of linear attention, the expert-selection bias and the
shared-expert gate. Kept F32 as the converter keeps them: norms, routers (ffn_gate_inp) and
the linear-attention convolution kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from engine.models.attention import AttentionShape, LinearAttentionShape


class ModelLayout(Protocol):
    """What the tensor table and llama.cpp's quantization mix read of a model's shape
    (engine.models.model.ModelSpec has it; its byte sizes are built from these tables)."""

    id: str
    n_blocks: int
    moe_blocks: tuple[int, ...]
    n_routed_experts: int
    hidden_size: int
    expert_ffn_size: int
    shared_expert_ffn_size: int
    dense_ffn_size: int
    vocab_size: int
    tied_embeddings: bool
    attention: AttentionShape
    gated_experts: bool
    linear_blocks: tuple[int, ...]
    linear_attention: LinearAttentionShape | None
    nextn_blocks: int
    native_expert_type: str

    @property
    def n_moe_layers(self) -> int: ...


@dataclass(frozen=True)
class TensorShape:
    name: str  # e.g. "blk.3.ffn_down_exps.weight"
    block: int | None  # None outside the blocks
    cols: int  # ne0
    rows: int  # ne1
    experts: int = 1  # ne2: the routed experts of a 3-D expert tensor
    float32: bool = False  # stored F32 by the converter and never quantized

    @property
    def n_elements(self) -> int:
        return self.cols * self.rows * self.experts

    @property
    def is_routed_expert(self) -> bool:
        return "_exps." in self.name

    @property
    def is_shared_expert(self) -> bool:
        return "_shexp." in self.name


def gguf_tensors(model: ModelLayout) -> list[TensorShape]:
    """Every weight tensor of the model's GGUF, NextN blocks included (they come last)."""
    h = model.hidden_size
    out = [TensorShape("token_embd.weight", None, h, model.vocab_size),
           TensorShape("output_norm.weight", None, h, 1, float32=True)]
    if not model.tied_embeddings:
        out.append(TensorShape("output.weight", None, h, model.vocab_size))
    for block in range(model.n_blocks + model.nextn_blocks):
        out.extend(sorted(_block_tensors(model, block), key=lambda t: t.name))
    return out


def _block_tensors(model: ModelLayout, b: int) -> list[TensorShape]:
    h = model.hidden_size
    nextn = b >= model.n_blocks
    tensors = [_t(b, "attn_norm", h, 1, f32=True), _t(b, "ffn_norm", h, 1, f32=True)]
    if b in model.linear_blocks:
        tensors += _linear_attention(model, b)
    else:
        tensors += _attention(model, b)
    # A NextN block is shaped like the model's last block (an MoE block in GLM-4.5).
    moe = (b in model.moe_blocks) or (nextn and bool(model.moe_blocks))
    if moe:
        tensors += _moe_ffn(model, b)
    else:
        d = model.dense_ffn_size
        tensors += [_t(b, "ffn_gate", h, d), _t(b, "ffn_up", h, d), _t(b, "ffn_down", d, h)]
    if nextn:
        # GLM-4.5's NextN layer carries its own embedding and head copies (llama.cpp counts
        # them: 110.47 B parameters in a GLM-4.5-Air GGUF against 106.85 B without).
        tensors += [_t(b, "nextn.eh_proj", 2 * h, h),
                    _t(b, "nextn.embed_tokens", h, model.vocab_size),
                    _t(b, "nextn.shared_head_head", h, model.vocab_size),
                    _t(b, "nextn.enorm", h, 1, f32=True), _t(b, "nextn.hnorm", h, 1, f32=True),
                    _t(b, "nextn.shared_head_norm", h, 1, f32=True)]
    return tensors


def _attention(model: ModelLayout, b: int) -> list[TensorShape]:
    a, h = model.attention, model.hidden_size
    if a.kind == "mla":
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            q = [_t(b, "attn_q_a", h, a.q_lora_rank), _t(b, "attn_q_a_norm", a.q_lora_rank, 1, f32=True),
                 _t(b, "attn_q_b", a.q_lora_rank, a.n_heads * qk)]
        else:
            q = [_t(b, "attn_q", h, a.n_heads * qk)]
        return q + [
            _t(b, "attn_kv_a_mqa", h, a.kv_lora_rank + a.qk_rope_head_dim),
            _t(b, "attn_kv_a_norm", a.kv_lora_rank, 1, f32=True),
            _t(b, "attn_kv_b", a.kv_lora_rank, a.n_heads * (a.qk_nope_head_dim + a.v_head_dim)),
            _t(b, "attn_output", a.n_heads * a.v_head_dim, h),
        ]
    q_dim, kv_dim = a.n_heads * a.head_dim, a.n_kv_heads * a.head_dim
    return [
        _t(b, "attn_q", h, 2 * q_dim if a.output_gate else q_dim),
        _t(b, "attn_k", h, kv_dim),
        _t(b, "attn_v", h, kv_dim),
        _t(b, "attn_output", q_dim, h),
    ]


def _linear_attention(model: ModelLayout, b: int) -> list[TensorShape]:
    la, h = model.linear_attention, model.hidden_size
    assert la is not None
    return [
        _t(b, "attn_qkv", h, la.conv_dim),
        _t(b, "attn_gate", h, la.value_dim),
        _t(b, "ssm_beta", h, la.n_value_heads),
        _t(b, "ssm_alpha", h, la.n_value_heads),
        _t(b, "ssm_conv1d", la.conv_kernel, la.conv_dim, f32=True),
        _t(b, "ssm_out", la.value_dim, h),
    ]


def _moe_ffn(model: ModelLayout, b: int) -> list[TensorShape]:
    h, f, e = model.hidden_size, model.expert_ffn_size, model.n_routed_experts
    tensors = [_t(b, "ffn_gate_inp", h, e, f32=True),
               _t(b, "ffn_up_exps", h, f, e), _t(b, "ffn_down_exps", f, h, e)]
    if model.gated_experts:
        tensors.append(_t(b, "ffn_gate_exps", h, f, e))
    s = model.shared_expert_ffn_size
    if s:
        tensors += [_t(b, "ffn_gate_shexp", h, s), _t(b, "ffn_up_shexp", h, s), _t(b, "ffn_down_shexp", s, h)]
    return tensors


def _t(block: int, role: str, cols: int, rows: int, experts: int = 1, *, f32: bool = False) -> TensorShape:
    return TensorShape(f"blk.{block}.{role}.weight", block, cols, rows, experts, f32)
