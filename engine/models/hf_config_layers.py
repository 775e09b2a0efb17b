"""Per-block rules of the newer MoE families' config.json: which blocks attend, which are
linear, which hold experts, and what a GGUF stores beyond the blocks.

- Qwen3-Next, Qwen3.5, Qwen3.6 (`qwen3_next`, `qwen3_5_moe`): `layer_types` lists
  "linear_attention" (Gated DeltaNet) and "full_attention" per block; without it every
  `full_attention_interval`-th block attends. The full-attention blocks are gated
  (`attn_output_gate`; Qwen3-Next always is).
- Llama 4 (`llama4`): experts in `moe_layers`, else every `interleave_moe_layer_step`-th
  block; a shared expert as wide as a routed one; dense blocks `intermediate_size_mlp`
  wide; chunked attention (`attention_chunk_size`) with a full-attention NoPE block every
  `no_rope_layer_interval`-th (llama.cpp: a sliding window with pattern 4).
- GLM-4.5/4.6/4.7 (`glm4_moe`): llama.cpp's GGUF keeps the `num_nextn_predict_layers`
  multi-token-prediction blocks (DeepSeek's converter drops its own).
- GLM-4.7-Flash (`glm4_moe_lite`): `mlp_layer_types` ("dense"/"sparse"), by default one
  dense block first.
"""

from __future__ import annotations

from engine.core.errors import CopeInputError
from engine.models.attention import LinearAttentionShape
from engine.models.hf_config_fields import ConfigFields

HYBRID_TYPES = ("qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text")
LLAMA4_TYPES = ("llama4", "llama4_text")
# Families whose llama.cpp GGUF holds the NextN blocks after the model's blocks.
NEXTN_IN_GGUF_TYPES = ("glm4_moe",)


def linear_attention(fields: ConfigFields, model_type: str, n_blocks: int) -> tuple[tuple[int, ...], LinearAttentionShape | None]:
    """(the linear-attention blocks, their shape); ((), None) for an all-attention model."""
    layer_types = fields.data.get("layer_types")
    if isinstance(layer_types, list) and "linear_attention" in layer_types:
        if len(layer_types) != n_blocks:
            raise CopeInputError(f"field 'layer_types' lists {len(layer_types)} blocks, the model has {n_blocks}",
                                 path=fields.path)
        blocks = tuple(i for i, kind in enumerate(layer_types) if kind == "linear_attention")
    elif model_type in HYBRID_TYPES:
        every = fields.optional_int(("full_attention_interval",), minimum=1) or 4
        blocks = tuple(i for i in range(n_blocks) if (i + 1) % every)
    else:
        return (), None
    shape = LinearAttentionShape(
        n_key_heads=fields.int_of(("linear_num_key_heads",)),
        n_value_heads=fields.int_of(("linear_num_value_heads",)),
        key_head_dim=fields.int_of(("linear_key_head_dim",)),
        value_head_dim=fields.int_of(("linear_value_head_dim",)),
        conv_kernel=fields.int_of(("linear_conv_kernel_dim",)),
    )
    return blocks, shape


def output_gate(fields: ConfigFields, model_type: str) -> bool:
    """Gated attention: the query projection also yields the per-head output gate."""
    return model_type == "qwen3_next" or fields.data.get("attn_output_gate") is True


def explicit_moe_blocks(fields: ConfigFields, model_type: str, n_blocks: int) -> list[int] | None:
    """MoE blocks a family lists outright (Llama 4, GLM-4.7-Flash); None: the general rules apply."""
    data = fields.data
    kinds = data.get("mlp_layer_types")
    if isinstance(kinds, list):
        if len(kinds) != n_blocks:
            raise CopeInputError(f"field 'mlp_layer_types' lists {len(kinds)} blocks, the model has {n_blocks}",
                                 path=fields.path)
        return [i for i, kind in enumerate(kinds) if kind == "sparse"]
    if model_type in LLAMA4_TYPES:
        listed = data.get("moe_layers")
        if isinstance(listed, list) and listed:
            return [fields.to_int("moe_layers", b, minimum=0) for b in listed if b < n_blocks]
        step = fields.optional_int(("interleave_moe_layer_step",), minimum=1) or 1
        return list(range(step - 1, n_blocks, step))
    if model_type == "glm4_moe_lite" and fields.optional_int(("first_k_dense_replace",)) is None:
        return list(range(1, n_blocks))  # Glm4MoeLiteConfig's default: one dense block first
    return None


def llama4_shared_and_dense(fields: ConfigFields, expert_ffn: int) -> tuple[int, int, int]:
    """(shared experts, their width, dense FFN width) of a Llama 4 text config."""
    dense = fields.optional_int(("intermediate_size_mlp",)) or 0
    return 1, expert_ffn, dense


def chunked_attention(fields: ConfigFields, model_type: str) -> tuple[int, int] | None:
    """Llama 4's chunked attention as (window tokens, every n-th block full); None elsewhere."""
    if model_type not in LLAMA4_TYPES:
        return None
    chunk = fields.optional_int(("attention_chunk_size",), minimum=1)
    if not chunk:
        return None
    every = fields.optional_int(("no_rope_layer_interval",), minimum=1) or 4
    return chunk, every


def nextn_blocks(fields: ConfigFields, model_type: str) -> int:
    if model_type not in NEXTN_IN_GGUF_TYPES:
        return 0
    return fields.optional_int(("num_nextn_predict_layers",)) or 0
