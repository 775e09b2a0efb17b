"""llama.cpp's per-tensor quantization rules (engine.models.quant_mix) and the file sizes they give.

Published sizes are what llama-bench prints in its "size" column (GiB) or a model card's
file size; each row names where it was published. The rules are llama-quant.cpp's
llama_tensor_get_type and tensor_type_fallback (mainline, 2026).
"""

from __future__ import annotations

import pytest

from engine.models.catalog import get_model
from engine.models.gguf_tensors import gguf_tensors
from engine.models.quant import get_quantization, quantizations
from engine.models.quant_mix import GGML_BLOCKS, tensor_types, use_more_bits

GIB = 2**30

# (model, quantization, published GiB, relative tolerance, where it was published)
PUBLISHED_GIB = [
    ("qwen3-30b-a3b", "Q4_K_M", 17.28, 0.005,
     "llama-bench, https://github.com/ikawrakow/ik_llama.cpp/issues/1075"),
    ("qwen3-30b-a3b", "Q3_K_M", 13.70, 0.005,
     "Qwen3-30B-A3B-Instruct-2507 llama-bench, https://github.com/ggml-org/llama.cpp/pull/15952"),
    ("qwen3-30b-a3b", "IQ4_XS", 15.32, 0.01,
     "llama-bench, https://github.com/ikawrakow/ik_llama.cpp/discussions/399"),
    ("gpt-oss-20b", "MXFP4", 11.27, 0.005,
     "llama-bench, https://github.com/ikawrakow/ik_llama.cpp/issues/1075 (biases and sinks not counted)"),
    ("gpt-oss-120b", "F16", 65e9 / GIB, 0.01,
     "gpt-oss-120b-F16.gguf '~65 GB file', https://llmgarage.ai/gpt-oss-120b-dual-3090 (experts stay MXFP4)"),
    ("qwen3-235b-a22b", "Q6_K", 193e9 / GIB, 0.01,
     "unsloth Q6_K '~193GB', https://github.com/ikawrakow/ik_llama.cpp/discussions/357"),
    ("qwen3.5-35b-a3b", "Q4_K_M", 21e9 / GIB, 0.01,
     "Q4_K_M '21 GB', https://github.com/ikawrakow/ik_llama.cpp/pull/1593"),
    ("glm-4.7-flash", "Q4_K_M", 17.1, 0.015,
     "unsloth Q4_K_M llama-bench 17.1 GiB, https://github.com/thecodacus/llama.cpp/pull/5"),
    # llama-bench "size" columns posted in llama.cpp issue threads (stock llama-quantize files):
    ("deepseek-v3", "Q4_K_M", 376.65, 0.005, "llama-bench: deepseek2 671B Q4_K - Medium, 671.03 B"),
    ("deepseek-v2-lite-chat", "Q4_K_M", 9.65, 0.005, "llama-bench: deepseek2 16B Q4_K - Medium, 15.71 B"),
    ("llama-4-scout-17b-16e", "Q4_K_M", 60.86, 0.005, "llama-bench: llama4 17Bx16E (Scout) Q4_K - Medium"),
    ("glm-4.5-air", "Q4_K_M", 67.96, 0.005, "llama-bench: glm4moe 106B.A12B Q4_K - Medium, 110.47 B"),
    ("qwen3-next-80b-a3b", "Q4_K_M", 45.08, 0.01, "llama-bench: qwen3next 80B.A3B Q4_K - Medium, 79.67 B"),
    ("ernie-4.5-21b-a3b", "Q4_K_M", 12.51, 0.02, "llama-bench: ernie4_5-moe 21B.A3B Q4_K - Medium, 21.83 B"),
]


@pytest.mark.parametrize(("model_id", "quant", "published_gib", "tolerance", "where"), PUBLISHED_GIB,
                         ids=[f"{m}-{q}" for m, q, *_ in PUBLISHED_GIB])
def test_file_size_matches_the_published_gguf(model_id, quant, published_gib, tolerance, where):
    size = get_model(model_id).file_bytes(get_quantization(quant))
    assert size / GIB == pytest.approx(published_gib, rel=tolerance), where


def test_use_more_bits_layers_of_a_48_block_model():
    layers = [i for i in range(48) if use_more_bits(i, 48)]
    assert layers == [0, 1, 2, 3, 4, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35, 38, 41, 42, 43, 44, 45, 46, 47]


def types_of(model_id: str, quant: str) -> dict[str, str]:
    return {t.name: type_name for t, type_name in tensor_types(get_model(model_id), quant)}


def test_q4_k_m_mix_of_qwen3_30b():
    types = types_of("qwen3-30b-a3b", "Q4_K_M")
    assert types["token_embd.weight"] == "Q4_K" and types["output.weight"] == "Q6_K"
    assert types["blk.0.ffn_down_exps.weight"] == types["blk.8.ffn_down_exps.weight"] == "Q6_K"
    assert types["blk.6.ffn_down_exps.weight"] == types["blk.7.ffn_down_exps.weight"] == "Q4_K"
    assert types["blk.6.ffn_gate_exps.weight"] == types["blk.6.ffn_up_exps.weight"] == "Q4_K"
    # attn_v follows the same layer rule (counted over the attention-V tensors).
    assert types["blk.0.attn_v.weight"] == "Q6_K" and types["blk.6.attn_v.weight"] == "Q4_K"
    assert types["blk.6.attn_k.weight"] == types["blk.6.attn_output.weight"] == "Q4_K"
    assert types["blk.6.ffn_gate_inp.weight"] == types["blk.6.attn_norm.weight"] == "F32"


def test_k_quant_rows_not_a_multiple_of_256_fall_back_to_32_weight_types():
    # DeepSeek-V2-Lite's experts are 1408 wide: ffn_down rows do not divide by 256.
    types = types_of("deepseek-v2-lite-chat", "Q4_K_M")
    assert types["blk.1.ffn_down_exps.weight"] == "Q8_0"  # Q6_K (use_more_bits) -> Q8_0
    assert types["blk.7.ffn_down_exps.weight"] == "Q5_0"  # Q4_K -> Q5_0
    assert types["blk.7.ffn_gate_exps.weight"] == "Q4_K"  # rows of 2048: no fallback
    # gpt-oss's hidden size 2880: every row of that length falls back, the head to Q8_0.
    types = types_of("gpt-oss-20b", "Q4_K_M")
    assert types["blk.0.ffn_gate_exps.weight"] == "Q5_0" and types["output.weight"] == "Q8_0"
    assert types["blk.0.attn_output.weight"] == "Q4_K"  # 64 heads x 64 = 4096 per row
    # IQ4_XS falls back to IQ4_NL, Q2_K's Q3_K ffn_down to Q4_0.
    assert types_of("deepseek-v2-lite-chat", "IQ4_XS")["blk.7.ffn_down_exps.weight"] == "IQ4_NL"
    assert types_of("deepseek-v2-lite-chat", "Q2_K")["blk.7.ffn_down_exps.weight"] == "Q4_0"


def test_mxfp4_moe_and_the_gpt_oss_native_experts():
    types = types_of("gpt-oss-120b", "MXFP4_MOE")
    assert types["blk.0.ffn_down_exps.weight"] == "MXFP4"
    assert types["blk.0.attn_q.weight"] == types["token_embd.weight"] == types["output.weight"] == "Q8_0"
    # The converter keeps gpt-oss's MXFP4 experts in an F16 file; everything else is F16.
    types = types_of("gpt-oss-120b", "F16")
    assert types["blk.0.ffn_down_exps.weight"] == "MXFP4" and types["blk.0.attn_q.weight"] == "F16"
    # A model whose experts ship as floats gets F16 experts.
    assert types_of("qwen3-30b-a3b", "F16")["blk.0.ffn_down_exps.weight"] == "F16"


def test_eight_expert_rules_for_mixtral():
    types = types_of("mixtral-8x7b-instruct", "Q4_K_M")
    assert types["blk.5.attn_v.weight"] == types["blk.5.attn_k.weight"] == "Q8_0"
    assert types["blk.5.attn_output.weight"] == "Q5_K"
    assert types_of("mixtral-8x7b-instruct", "Q6_K")["blk.5.attn_v.weight"] == "Q8_0"


def test_low_bit_mixes():
    q3 = types_of("qwen3-30b-a3b", "Q3_K_M")
    assert q3["blk.0.attn_v.weight"] == q3["blk.1.attn_v.weight"] == "Q5_K" and q3["blk.2.attn_v.weight"] == "Q4_K"
    assert q3["blk.2.ffn_down_exps.weight"] == "Q5_K" and q3["blk.3.ffn_down_exps.weight"] == "Q4_K"  # 48 // 16
    assert q3["blk.3.attn_output.weight"] == "Q4_K" and q3["blk.3.ffn_up_exps.weight"] == "Q3_K"
    q2 = types_of("qwen3-30b-a3b", "Q2_K")
    assert q2["blk.3.attn_v.weight"] == "Q4_K"  # 32 heads / 4 KV heads >= 4
    assert q2["blk.3.ffn_down_exps.weight"] == "Q3_K" and q2["blk.3.attn_output.weight"] == "Q3_K"
    iq4 = types_of("qwen3-30b-a3b", "IQ4_XS")  # with an importance matrix, as published
    assert iq4["blk.0.ffn_down_exps.weight"] == "IQ4_XS" and iq4["blk.0.attn_v.weight"] == "Q5_K"
    iq3 = types_of("qwen3-30b-a3b", "IQ3_XXS")
    assert iq3["token_embd.weight"] == "IQ3_S" and iq3["output.weight"] == "Q5_K"
    assert iq3["blk.0.attn_q.weight"] == iq3["blk.0.attn_k.weight"] == "IQ2_S"


def test_hybrid_models_bump_the_linear_qkv_like_attention_v():
    # Qwen3.5's Gated DeltaNet attn_qkv counts as an attention-V tensor: the 40 blocks'
    # attn_qkv / attn_v take Q6_K where use_more_bits(i, 40).
    types = types_of("qwen3.5-35b-a3b", "Q4_K_M")
    assert types["blk.0.attn_qkv.weight"] == "Q6_K" and types["blk.3.attn_v.weight"] == "Q6_K"
    assert types["blk.6.attn_qkv.weight"] == "Q4_K" and types["blk.7.attn_v.weight"] == "Q6_K"
    assert types["blk.6.attn_gate.weight"] == types["blk.6.ssm_out.weight"] == "Q4_K"
    assert types["blk.6.ssm_conv1d.weight"] == "F32"
    assert "blk.3.attn_qkv.weight" not in types and "blk.0.attn_v.weight" not in types


def test_nextn_blocks_count_in_the_file_not_in_the_weights():
    m = get_model("glm-4.5-air")
    q = get_quantization("Q4_K_M")
    sizes = m.tensor_sizes(q)
    nextn = [t for t in gguf_tensors(m) if t.block == 46]
    assert nextn and any(t.name == "blk.46.nextn.eh_proj.weight" for t in nextn)
    assert sizes.skipped_bytes > 0
    assert m.file_bytes(q) == m.weight_bytes(q) + sizes.skipped_bytes
    assert len(sizes.shared_layer_bytes) == 46 and len(sizes.expert_bytes_per_layer) == 45


def test_every_catalog_model_sizes_under_every_quantization():
    for model_id in ("qwen3-30b-a3b", "deepseek-v3", "qwen3-next-80b-a3b", "llama-4-maverick-17b-128e"):
        m = get_model(model_id)
        for q in quantizations().values():
            per_layer = m.expert_bytes_per_layer(q)
            assert len(per_layer) == m.n_moe_layers and min(per_layer) > 0
            assert min(per_layer) <= m.expert_bytes(q) <= max(per_layer)
            assert m.expert_bytes(q) == -(-sum(per_layer) // len(per_layer))
            assert 0 < m.gpu_non_expert_bytes(q) <= m.non_expert_bytes(q) < m.file_bytes(q)


def test_ggml_block_table_agrees_with_the_gguf_package():
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    for name, (nbytes, weights) in GGML_BLOCKS.items():
        assert GGML_QUANT_SIZES[GGMLQuantizationType[name]] == (weights, nbytes), name
