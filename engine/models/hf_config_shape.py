"""Per-family rules that turn a config's fields into the ModelSpec's shape.

Which blocks hold routed experts (Jamba's period and offset, OpenMoE's interval,
DeepSeek's first dense blocks and frequency, Qwen-MoE's sparse step and dense-only
list), the width and gating of one expert, the shared experts, the attention shape
(grouped-query, DeepSeek's latent attention, JetMoE's attention experts, Yuan's
projection size, GPT-OSS's sliding windows) and the llama.cpp architecture. Each
rule reads fields through `engine.models.hf_config_fields.ConfigFields`, so a missing or
malformed field is one line naming the file and the field.
"""

from __future__ import annotations

from typing import Any

from engine.core.errors import CopeInputError
from engine.models.hf_config_fields import (
    EXPERT_FFN_KEYS,
    HEAD_KEYS,
    KV_HEAD_KEYS,
    LLAMA_CPP_ARCH,
    UNKNOWN_ARCH,
    ConfigFields,
)
from engine.models.hf_config_layers import chunked_attention, explicit_moe_blocks, output_gate
from engine.models.model import AttentionShape


def expert_ffn_of(fields: ConfigFields, model_type: str, n_experts: int) -> tuple[int, bool]:
    """Width of one routed expert's FFN, and whether it is gated (3 matrices)."""
    if model_type == "llama_moe":
        sizes = fields.data.get("size_experts")
        if sizes is not None:
            flat = [s for layer in sizes for s in layer] if all(
                isinstance(layer, list) for layer in sizes) else list(sizes)
            if not flat or len(set(flat)) != 1:
                raise CopeInputError(
                    "field 'size_experts': experts of different widths are not supported",
                    path=fields.path)
            return fields.to_int("size_experts", flat[0]), True
        total = fields.int_of(("intermediate_size",))
        if total % n_experts:
            raise CopeInputError(
                f"field 'intermediate_size' ({total}) does not split evenly into {n_experts} experts",
                path=fields.path)
        return total // n_experts, True
    if model_type == "openmoe":
        return 2 * fields.int_of(("intermediate_size",)), False
    width = fields.int_of(EXPERT_FFN_KEYS)
    gated = not any(fields._raw(k) is False
                    for k in ("glu", "gated_linear_unit", "is_gated_act", "mlp_gated"))
    return width, gated


def moe_blocks_of(fields: ConfigFields, model_type: str, n_blocks: int) -> tuple[int, ...]:
    """Indices of the blocks that hold routed experts, by the family's placement rule."""
    data = fields.data
    listed = explicit_moe_blocks(fields, model_type, n_blocks)
    if listed is not None:
        if not listed:
            raise CopeInputError("no block holds routed experts under this config's layer rules",
                                 path=fields.path)
        return tuple(listed)
    blocks = list(range(n_blocks))

    period = fields.optional_int(("expert_layer_period",), minimum=1)
    if model_type == "jamba" or period is not None:
        # Jamba: block i holds experts when i % expert_layer_period == expert_layer_offset.
        period = period or 2  # JambaConfig's defaults: period 2, offset 1
        offset = fields.optional_int(("expert_layer_offset",))
        if offset is None:
            offset = 1 if model_type == "jamba" else 0
        blocks = [i for i in blocks if i % period == offset]

    interval = fields.optional_int(("moe_layer_interval",), minimum=1)
    if interval is not None:
        # OpenMoE (and ERNIE): every interval-th block, counted from 1.
        blocks = [i for i in blocks if (i + 1) % interval == 0]
        start = fields.optional_int(("moe_layer_start_index",))
        end = fields.optional_int(("moe_layer_end_index",), minimum=-1)
        if start is not None:
            blocks = [i for i in blocks if i >= start]
        if end is not None and end >= 0:
            blocks = [i for i in blocks if i <= end]

    first_dense = fields.optional_int(("first_k_dense_replace",))
    if first_dense:
        # DeepSeek: the first k blocks keep a dense FFN.
        blocks = [i for i in blocks if i >= first_dense]

    freq = data.get("moe_layer_freq")
    if isinstance(freq, list):
        if len(freq) != n_blocks:
            raise CopeInputError(
                f"field 'moe_layer_freq' lists {len(freq)} blocks, the model has {n_blocks}",
                path=fields.path)
        blocks = [i for i in blocks if freq[i]]
    elif freq is not None:
        # DeepSeek: block i holds experts when i % moe_layer_freq == 0.
        step = fields.to_int("moe_layer_freq", freq)
        blocks = [i for i in blocks if i % step == 0]

    step = fields.optional_int(("decoder_sparse_step",), minimum=0)
    if step:
        # Qwen-MoE: block i holds experts when (i + 1) % decoder_sparse_step == 0 ...
        blocks = [i for i in blocks if (i + 1) % step == 0]
    dense_only = data.get("mlp_only_layers")
    if dense_only:
        # ... and i is not in mlp_only_layers.
        if not isinstance(dense_only, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) for i in dense_only):
            raise CopeInputError(f"field 'mlp_only_layers' must list block indices, got {dense_only!r}",
                                 path=fields.path)
        blocks = [i for i in blocks if i not in set(dense_only)]

    if not blocks:
        raise CopeInputError("no block holds routed experts under this config's layer rules",
                             path=fields.path)
    return tuple(blocks)


def shared_experts_of(fields: ConfigFields, model_type: str, expert_ffn: int) -> tuple[int, int]:
    """(number of shared experts, their total FFN width) in an MoE block."""
    if model_type == "openmoe":
        # The extra dense FFN after each MoE layer: every token passes through it.
        return 1, round(4 * (expert_ffn // 2) / 3)
    width = fields.optional_int(("shared_expert_intermediate_size",))
    if width is not None:  # Qwen-MoE: one shared expert of this width
        return (1, width) if width else (0, 0)
    width = fields.optional_int(("intermediate_size_residual",))
    if width is not None:  # LLaMA-MoE v2: a residual FFN every token passes through
        return (1, width) if width else (0, 0)
    count = fields.optional_int(("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"))
    if count:  # DeepSeek, XVERSE, ERNIE: count x the routed expert's width
        return count, count * expert_ffn
    return 0, 0


def attention_shape(fields: ConfigFields, model_type: str, hidden: int, n_experts: int) -> AttentionShape:
    data = fields.data
    if data.get("kv_lora_rank") is not None:  # DeepSeek-V2/V3 multi-head latent attention
        n_heads = fields.int_of(HEAD_KEYS)
        nope = fields.int_of(("qk_nope_head_dim",))
        rope = fields.int_of(("qk_rope_head_dim",))
        return AttentionShape(
            kind="mla",
            n_heads=n_heads,
            n_kv_heads=n_heads,
            head_dim=nope + rope,
            q_lora_rank=fields.optional_int(("q_lora_rank",)) or 0,
            kv_lora_rank=fields.int_of(("kv_lora_rank",)),
            qk_nope_head_dim=nope,
            qk_rope_head_dim=rope,
            v_head_dim=fields.int_of(("v_head_dim",)),
        )
    if model_type == "jetmoe":
        n_kv = fields.int_of(KV_HEAD_KEYS)
        head_dim = fields.int_of(("kv_channels",))
        return AttentionShape(kind="gqa", n_heads=n_experts * n_kv, n_kv_heads=n_kv, head_dim=head_dim)

    n_heads = fields.int_of(HEAD_KEYS)
    n_kv = fields.int_of(KV_HEAD_KEYS, default=n_heads)
    head_dim = fields.optional_int(("head_dim", "kv_channels"), minimum=1)
    projection = fields.optional_int(("attention_projection_size",), minimum=1)
    if head_dim is None and projection is not None:
        # Yuan 2.0: q, k, v and o project to attention_projection_size, not hidden_size.
        if projection % n_heads:
            raise CopeInputError(
                f"field 'attention_projection_size' ({projection}) is not a multiple of "
                f"{n_heads} heads", path=fields.path)
        head_dim = projection // n_heads
    if head_dim is None:
        if hidden % n_heads:
            raise CopeInputError(
                f"missing field 'head_dim' (hidden size {hidden} is not a multiple of "
                f"{n_heads} heads)", path=fields.path)
        head_dim = hidden // n_heads
    window, every = chunked_attention(fields, model_type) or _sliding_window(fields)
    return AttentionShape(kind="gqa", n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim,
                          sliding_window_tokens=window, sliding_window_every=every,
                          output_gate=output_gate(fields, model_type))


def _sliding_window(fields: ConfigFields) -> tuple[int, int]:
    """Sliding-window layers, only where `layer_types` says which blocks slide (GPT-OSS).

    Elsewhere every block is taken as full attention: llama.cpp keeps a full-size KV
    cache for those families, so that is the safe size to plan for.
    """
    layer_types = fields.data.get("layer_types")
    window = fields.data.get("sliding_window")
    if not isinstance(layer_types, list) or not isinstance(window, int) or window <= 0:
        return 0, 0
    full = [i for i, kind in enumerate(layer_types) if kind == "full_attention"]
    if not full:
        return window, 0
    every = full[0] + 1
    if full == list(range(every - 1, len(layer_types), every)):
        return window, every
    return 0, 0  # an irregular pattern: plan for full attention everywhere


def llama_cpp_arch(data: dict[str, Any], model_type: str) -> str:
    if model_type == "mixtral" and (
        data.get("intermediate_size_residual") or data.get("scale_factor") not in (None, 1, 1.0)
    ):
        # LLaMA-MoE v2 reuses Mixtral's config with a residual FFN and an output scale
        # that llama.cpp's Mixtral (llama) path does not have.
        return UNKNOWN_ARCH
    return LLAMA_CPP_ARCH.get(model_type, UNKNOWN_ARCH)
