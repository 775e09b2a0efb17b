"""llama.cpp's quantization mixes: the type llama-quantize gives each tensor, and the bytes.

A file type such as Q4_K_M is not one type: llama.cpp's `llama_tensor_get_type`
(src/llama-quant.cpp) picks a type per tensor from its role, its layer and the model,
then `tensor_type_fallback` swaps a K-quant for a 32-weight type when the row length is
not a multiple of 256. This module ports those rules for the file types in
assets/quantizations.json and sums the bytes over the tensors `engine.models.gguf_tensors` lists,
so a catalog model is sized as the GGUF llama-quantize would write.

The rules, as in llama-quant.cpp (mainline, 2026):
- output (and a tied token embedding): Q8_0 when its row is not a multiple of the base
  type's block or for MXFP4_MOE, Q5_K for IQ3_XXS, else Q6_K unless the base is Q8_0;
- token embedding: the base type, IQ3_S for IQ3_XXS;
- attention V (attn_v, attn_qkv, attn_kv_b, counted in file order): Q4_K_M and Q5_K_M
  use Q6_K where `use_more_bits(i, n)` (the first and last eighth, every third between),
  Q3_K_M Q5_K for the first two then Q4_K, Q2_K Q4_K when n_head/n_head_kv >= 4 else Q3_K,
  IQ4_XS Q5_K when n_head/n_head_kv >= 4, Q4_K_S Q5_K for the first four; Q8_0 with 8 experts;
- attention K: Q8_0 with 8 experts, IQ2_S for IQ3_XXS; attention Q: IQ2_S for IQ3_XXS;
- FFN down (dense, shared and routed alike; the layer from the tensor's name, n = block
  count): Q4_K_M and Q5_K_M Q6_K where use_more_bits, Q3_K_M Q5_K in the first sixteenth
  then Q4_K, Q2_K Q3_K, Q4_K_S Q5_K in the first eighth, IQ4_XS without an imatrix Q5_K in
  the first eighth;
- attention output: Q3_K for Q2_K, Q4_K for Q3_K_M, IQ3_S for IQ3_XXS; with 8 experts Q5_K
  for the low-bit types;
- MXFP4_MOE: 3-D expert tensors MXFP4, every other matrix Q8_0.
Norms, routers and convolution kernels stay F32. Published IQ files are made with an
importance matrix (IQ3_XXS needs one), K-quant and Q4_0 files assumed without.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import lru_cache

from engine.models.exact_bytes import ExactBytes
from engine.models.gguf_tensors import ModelLayout, TensorShape, gguf_tensors
from engine.models.quant import FILE_TYPES, Quantization

# ggml-common.h: (bytes per block, weights per block).
GGML_BLOCKS: dict[str, tuple[int, int]] = {
    "F32": (4, 1), "F16": (2, 1), "BF16": (2, 1),
    "Q8_0": (34, 32), "Q4_0": (18, 32), "Q4_1": (20, 32), "Q5_0": (22, 32), "Q5_1": (24, 32),
    "Q2_K": (84, 256), "Q3_K": (110, 256), "Q4_K": (144, 256), "Q5_K": (176, 256), "Q6_K": (210, 256),
    "IQ2_XXS": (66, 256), "IQ2_XS": (74, 256), "IQ2_S": (82, 256), "IQ3_XXS": (98, 256), "IQ3_S": (110, 256),
    "IQ4_NL": (18, 32), "IQ4_XS": (136, 256), "MXFP4": (17, 32),
}

# Types an IQ file is only made with an importance matrix for (as published files are).
_IMATRIX_FILE_TYPES = {"IQ4_XS", "IQ4_NL", "IQ3_XXS"}
# tensor_type_fallback: a 256-weight type whose row does not divide -> a 32-weight type.
_FALLBACK = {"IQ3_XXS": "IQ4_NL", "IQ3_S": "IQ4_NL", "IQ4_XS": "IQ4_NL", "IQ2_S": "IQ4_NL",
             "IQ2_XS": "IQ4_NL", "IQ2_XXS": "IQ4_NL", "Q2_K": "Q4_0", "Q3_K": "Q4_0",
             "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
_LOW_BIT_8_EXPERT_OUTPUT = {"Q2_K", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ4_XS"}


@dataclass(frozen=True)
class MixContext:
    """What llama_tensor_get_type reads besides the tensor itself."""

    file_type: str
    n_expert: int
    n_gqa: int  # n_head / n_head_kv (MLA: 1)
    n_layer: int  # the file's block count, NextN blocks included
    has_imatrix: bool
    tied_embeddings: bool

    @property
    def base(self) -> str:
        return FILE_TYPES[self.file_type]


def row_bytes(type_name: str, cols: int) -> int:
    nbytes, per_block = GGML_BLOCKS[type_name]
    return nbytes * cols // per_block


def tensor_bytes(t: TensorShape, type_name: str) -> int:
    return row_bytes(type_name, t.cols) * t.rows * t.experts


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp's use_more_bits (C integer division)."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def category(name: str) -> str:
    """tensor_get_category: the first pattern the name contains, in llama.cpp's order."""
    if name == "output.weight":
        return "output"
    if name == "token_embd.weight":
        return "token_embd"
    for pattern, cat in (("attn_qkv.weight", "attn_v"), ("attn_kv_b.weight", "attn_v"),
                         ("attn_v.weight", "attn_v"), ("attn_k.weight", "attn_k"),
                         ("attn_q.weight", "attn_q"), ("attn_output.weight", "attn_output"),
                         ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"), ("ffn_down", "ffn_down")):
        if pattern in name:
            return cat
    return "other"


def tensor_type(t: TensorShape, ctx: MixContext, i_attn_v: int, n_attn_v: int) -> str:
    """The type llama-quantize writes `t` in (`i_attn_v`: its index among the attention-V tensors)."""
    if t.float32:
        return "F32"
    base = ctx.base
    if base in ("F32", "F16", "BF16"):
        return base  # not quantized: no per-tensor rules
    chosen = _rule(t, ctx, base, i_attn_v, n_attn_v)
    return _fallback(chosen, t.cols)


def _rule(t: TensorShape, ctx: MixContext, base: str, i_attn_v: int, n_attn_v: int) -> str:
    ft, cat = ctx.file_type, category(t.name)
    if cat == "output" or (ctx.tied_embeddings and cat == "token_embd"):
        if ft == "MXFP4_MOE" or t.cols % GGML_BLOCKS[base][1]:
            return "Q8_0"
        if ft == "IQ3_XXS":
            return "Q5_K"
        return base if base == "Q8_0" else "Q6_K"
    if ft == "MXFP4_MOE":
        return "MXFP4" if t.experts > 1 else "Q8_0"
    if cat == "token_embd":
        return "IQ3_S" if ft == "IQ3_XXS" else base
    if cat == "attn_v":
        return _attn_v(ctx, base, i_attn_v, n_attn_v)
    if cat == "attn_k":
        if ctx.n_expert == 8:
            return "Q8_0"
        return "IQ2_S" if ft == "IQ3_XXS" else base
    if cat == "attn_q":
        return "IQ2_S" if ft == "IQ3_XXS" else base
    if cat == "ffn_down":
        return _ffn_down(t, ctx, base)
    if cat == "attn_output":
        if ctx.n_expert == 8:
            return "Q5_K" if ft in _LOW_BIT_8_EXPERT_OUTPUT else base
        return {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K"}.get(ft, base)
    return base


def _attn_v(ctx: MixContext, base: str, i: int, n: int) -> str:
    ft, new = ctx.file_type, base
    if ft == "Q2_K":
        new = "Q4_K" if ctx.n_gqa >= 4 else "Q3_K"
    elif ft == "IQ3_XXS":
        new = "Q4_K" if ctx.n_gqa >= 4 else ("IQ3_XXS" if ctx.has_imatrix else "IQ3_S")
    elif ft == "Q3_K_M":
        new = "Q5_K" if i < 2 else "Q4_K"
    elif ft == "Q3_K_L":
        new = "Q5_K"
    elif ft in ("IQ4_NL", "IQ4_XS") and ctx.n_gqa >= 4:
        new = "Q5_K"
    elif ft in ("Q4_K_M", "Q5_K_M") and use_more_bits(i, n):
        new = "Q6_K"
    elif ft == "Q4_K_S" and i < 4:
        new = "Q5_K"
    if ctx.n_expert == 8:
        new = "Q8_0"  # "for the 8-expert model, bumping this to Q8_0 trades just ~128MB"
    return new


def _ffn_down(t: TensorShape, ctx: MixContext, base: str) -> str:
    ft, i, n = ctx.file_type, t.block or 0, ctx.n_layer
    if ft == "Q2_K":
        return "Q3_K"
    if ft == "IQ3_XXS" and not ctx.has_imatrix:
        return "Q4_K" if i < n // 8 else "Q3_K"
    if ft == "Q3_K_M":
        return "Q5_K" if i < n // 16 else "Q4_K"
    if ft == "Q3_K_L":
        return "Q5_K"
    if ft in ("Q4_K_M", "Q5_K_M"):
        return "Q6_K" if use_more_bits(i, n) else base
    if ft in ("IQ4_NL", "IQ4_XS") and i < n // 8 and not ctx.has_imatrix:
        return "Q5_K"
    if ft == "Q4_K_S" and i < n // 8:
        return "Q5_K"
    if ft in ("Q4_0", "Q5_0") and ctx.has_imatrix and i < n // 8:
        return "Q4_1" if ft == "Q4_0" else "Q5_1"
    return base


def _fallback(type_name: str, cols: int) -> str:
    if cols % GGML_BLOCKS[type_name][1] == 0:
        return type_name
    fallback = _FALLBACK.get(type_name, "F16")
    return fallback if cols % GGML_BLOCKS[fallback][1] == 0 else "F16"


def context_for(model: ModelLayout, file_type: str) -> MixContext:
    a = model.attention
    n_gqa = 1 if a.kind == "mla" else a.n_heads // max(a.n_kv_heads, 1)
    return MixContext(file_type=file_type, n_expert=model.n_routed_experts, n_gqa=n_gqa,
                      n_layer=model.n_blocks + model.nextn_blocks,
                      has_imatrix=file_type in _IMATRIX_FILE_TYPES, tied_embeddings=model.tied_embeddings)


def tensor_types(model: ModelLayout, file_type: str) -> list[tuple[TensorShape, str]]:
    """Each GGUF tensor of `model` with the type llama-quantize gives it for `file_type`."""
    ctx = context_for(model, file_type.upper())
    tensors = gguf_tensors(model)
    attn_v = [t for t in tensors if category(t.name) == "attn_v" and not t.float32]
    index = {t.name: i for i, t in enumerate(attn_v)}
    typed = []
    for t in tensors:
        chosen = tensor_type(t, ctx, index.get(t.name, 0), len(attn_v))
        if t.is_routed_expert and model.native_expert_type and ctx.base in ("F32", "F16", "BF16"):
            # The converter keeps experts the checkpoint ships quantized (gpt-oss: MXFP4).
            chosen = model.native_expert_type
        typed.append((t, chosen))
    return typed


@lru_cache(maxsize=128)
def mixed_sizes(model: ModelLayout, quant: Quantization) -> ExactBytes:
    """The byte sizes of `model` under `quant`'s llama.cpp file type, tensor by tensor."""
    typed = tensor_types(model, quant.llama_ftype)
    n = model.n_blocks
    experts: dict[int, int] = defaultdict(int)
    shared = [0] * n
    shared_experts = [0] * n
    outside: dict[str, int] = {}
    skipped = 0
    for t, type_name in typed:
        size = tensor_bytes(t, type_name)
        if t.block is None:
            outside[t.name] = size
        elif t.block >= n:
            skipped += size
        elif t.is_routed_expert:
            experts[t.block] += size
        else:
            shared[t.block] += size
            if t.is_shared_expert:
                shared_experts[t.block] += size
    embedding = outside.pop("token_embd.weight")
    head = outside.pop("output.weight", 0)
    return ExactBytes(
        expert_bytes_per_layer=tuple(experts[b] // model.n_routed_experts for b in model.moe_blocks),
        shared_layer_bytes=tuple(shared),
        shared_expert_bytes=tuple(shared_experts),
        embedding_bytes=embedding,
        head_bytes=head,
        other_bytes=sum(outside.values()),
        quant_name=quant.name,
        quant_summary=mix_summary(typed, model),
        source=f"llama.cpp's {quant.llama_ftype} rules applied to {model.id}'s tensors (llama_tensor_get_type)",
        skipped_bytes=skipped,
    )


def mix_summary(typed: list[tuple[TensorShape, str]], model: ModelLayout) -> str:
    """E.g. "experts: Q4_K (gate, up) / Q6_K (down, 24 of 48 layers) / ...; non-expert by bytes: ..."."""
    n_moe = model.n_moe_layers
    roles: dict[str, Counter] = defaultdict(Counter)
    rest: Counter = Counter()
    for t, type_name in typed:
        if t.block is not None and t.block >= model.n_blocks:
            continue
        if t.is_routed_expert:
            roles[type_name][t.name.split(".")[2].removeprefix("ffn_").removesuffix("_exps")] += 1
        else:
            rest[type_name] += tensor_bytes(t, type_name)
    order = {"gate": 0, "up": 1, "down": 2}
    parts = []
    for type_name, counts in sorted(roles.items(), key=lambda kv: -sum(kv[1].values())):
        ordered = sorted(counts, key=lambda r: order.get(r, 9))
        full = [r for r in ordered if counts[r] == n_moe]
        some = [f"{r}, {counts[r]} of {n_moe} layers" for r in ordered if counts[r] != n_moe]
        parts.append(f"{type_name} ({'; '.join(([', '.join(full)] if full else []) + some)})")
    total = sum(rest.values()) or 1
    others = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in rest.most_common())
    return f"experts: {' / '.join(parts)}; non-expert by bytes: {others}"
