"""Each newer catalog entry against its published config.json, read by the config reader.

The dicts below hold the fields of each model's published config.json that decide its
shape (the sources are in each catalog entry's `source`). Reading them with
`engine.models.hf_config` must give the catalog entry's shape: the catalog and the reader agree,
and both follow the published fields. Totals are checked against the model cards.
"""

from __future__ import annotations

import json

import pytest

from engine.models.catalog import get_model
from engine.models.hf_config import model_from_hf_config

HYBRID_LINEAR = {"linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
                 "linear_num_value_heads": 32, "linear_value_head_dim": 128}

QWEN35_TEXT = {
    "model_type": "qwen3_5_moe_text", "num_hidden_layers": 40, "hidden_size": 2048,
    "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "attn_output_gate": True,
    "full_attention_interval": 4,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10,
    "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512, "vocab_size": 248320, "tie_word_embeddings": False,
    **HYBRID_LINEAR,
}

CONFIGS = {
    "qwen3-next-80b-a3b": {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "decoder_sparse_step": 1,
        "full_attention_interval": 4, "head_dim": 256, "hidden_size": 2048, "intermediate_size": 5120,
        "mlp_only_layers": [], "moe_intermediate_size": 512, "num_attention_heads": 16,
        "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2,
        "shared_expert_intermediate_size": 512, "tie_word_embeddings": False, "vocab_size": 151936,
        **HYBRID_LINEAR,
    },
    "qwen3.5-35b-a3b": {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
                        "tie_word_embeddings": False, "text_config": QWEN35_TEXT},
    "qwen3.6-35b-a3b": {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
                        "tie_word_embeddings": False, "text_config": QWEN35_TEXT},
    "glm-4.7-flash": {
        "architectures": ["Glm4MoeLiteForCausalLM"], "model_type": "glm4_moe_lite", "hidden_size": 2048,
        "intermediate_size": 10240, "moe_intermediate_size": 1536, "num_hidden_layers": 47,
        "num_attention_heads": 20, "num_key_value_heads": 20, "n_shared_experts": 1, "n_routed_experts": 64,
        "kv_lora_rank": 512, "q_lora_rank": 768, "qk_rope_head_dim": 64, "v_head_dim": 256,
        "qk_nope_head_dim": 192, "num_experts_per_tok": 4, "vocab_size": 154880, "tie_word_embeddings": False,
        "num_nextn_predict_layers": 1,
    },
    "glm-4.5-air": {
        "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "first_k_dense_replace": 1,
        "head_dim": 128, "hidden_size": 4096, "intermediate_size": 10944, "moe_intermediate_size": 1408,
        "n_routed_experts": 128, "n_shared_experts": 1, "num_attention_heads": 96, "num_experts_per_tok": 8,
        "num_hidden_layers": 46, "num_key_value_heads": 8, "num_nextn_predict_layers": 1,
        "partial_rotary_factor": 0.5, "tie_word_embeddings": False, "vocab_size": 151552,
    },
    "glm-4.7": {
        "architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", "first_k_dense_replace": 3,
        "head_dim": 128, "hidden_size": 5120, "intermediate_size": 12288, "moe_intermediate_size": 1536,
        "n_routed_experts": 160, "n_shared_experts": 1, "num_attention_heads": 96, "num_experts_per_tok": 8,
        "num_hidden_layers": 92, "num_key_value_heads": 8, "num_nextn_predict_layers": 1,
        "partial_rotary_factor": 0.5, "tie_word_embeddings": False, "vocab_size": 151552,
    },
    "deepseek-v3": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "first_k_dense_replace": 3,
        "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "moe_intermediate_size": 2048,
        "moe_layer_freq": 1, "n_routed_experts": 256, "n_shared_experts": 1, "num_attention_heads": 128,
        "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
        "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "vocab_size": 129280, "tie_word_embeddings": False,
    },
    "llama-4-scout-17b-16e": {
        "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "tie_word_embeddings": False,
        "text_config": {
            "model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128, "hidden_size": 5120,
            "interleave_moe_layer_step": 1, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48,
            "num_key_value_heads": 8, "num_local_experts": 16, "vocab_size": 202048,
        },
    },
    "llama-4-maverick-17b-128e": {
        "architectures": ["Llama4ForConditionalGeneration"], "model_type": "llama4", "tie_word_embeddings": False,
        "text_config": {
            "model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128, "hidden_size": 5120,
            "interleave_moe_layer_step": 2, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "num_attention_heads": 40, "num_experts_per_tok": 1, "num_hidden_layers": 48,
            "num_key_value_heads": 8, "num_local_experts": 128, "vocab_size": 202048,
        },
    },
    "ernie-4.5-21b-a3b": {
        "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe", "hidden_size": 2560,
        "intermediate_size": 12288, "num_hidden_layers": 28, "num_attention_heads": 20, "num_key_value_heads": 4,
        "moe_intermediate_size": 1536, "moe_k": 6, "moe_num_experts": 64, "moe_num_shared_experts": 2,
        "moe_layer_start_index": 1, "moe_layer_interval": 1, "vocab_size": 103424, "tie_word_embeddings": True,
    },
}

SHAPE_FIELDS = ("arch", "n_blocks", "moe_blocks", "n_routed_experts", "top_k", "n_shared_experts", "hidden_size",
                "expert_ffn_size", "shared_expert_ffn_size", "dense_ffn_size", "vocab_size", "tied_embeddings",
                "attention", "linear_blocks", "linear_attention", "nextn_blocks", "gated_experts")

# Total parameters from the model cards (or llama.cpp's count of the GGUF, where said).
PUBLISHED_TOTAL_PARAMS = {
    "qwen3-next-80b-a3b": 80e9,  # card: 80B total, 3B activated
    "qwen3.5-35b-a3b": 35e9,  # card: 35B (text and vision); llama.cpp counts 34.66 B in the text GGUF
    "qwen3.6-35b-a3b": 35e9,
    "glm-4.7-flash": 30e9,  # card: 30B-A3B; llama.cpp counts 29.94 B
    "glm-4.5-air": 106e9,  # card: 106B total, 12B active
    "glm-4.7": 355e9,  # GLM-4.5 family card: 355B total, 32B active
    "deepseek-v3": 671e9,  # card: 671B (+14B MTP), 37B activated
    "llama-4-scout-17b-16e": 109e9,  # card: 109B with the vision encoder; llama.cpp counts 107.77 B text
    "llama-4-maverick-17b-128e": 400e9,  # card: 400B total, 17B active
    "ernie-4.5-21b-a3b": 21.83e9,  # card "21B" rounds down; llama.cpp counts 21.83 B in the GGUF
}
# Activated parameters per token from the model cards: attention, shared experts, dense
# blocks and the head plus top_k routed experts per MoE layer.
PUBLISHED_ACTIVE_PARAMS = {
    "qwen3-next-80b-a3b": (3e9, 0.25),  # "3B activated" (3.56B counted: the card rounds to 1 digit)
    "glm-4.7-flash": (3e9, 0.25),
    "glm-4.5-air": (12e9, 0.10),
    "glm-4.7": (32e9, 0.05),
    "deepseek-v3": (37e9, 0.02),
    "llama-4-scout-17b-16e": (17e9, 0.06),
    "llama-4-maverick-17b-128e": (17e9, 0.06),
}


def active_params(model) -> int:
    blocks = sum(model.shared_layer_params(b) for b in range(model.n_blocks))
    return blocks + model.head_params() + model.n_moe_layers * model.top_k * model.expert_params()


def read_as_entry(tmp_path, config: dict, model_id: str):  # type: ignore[no-untyped-def]
    """(the model a config.json reads as, the catalog entry), after checking every shape field
    and the total weights agree."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    read = model_from_hf_config(path)
    entry = get_model(model_id)
    for field in SHAPE_FIELDS:
        assert getattr(read, field) == getattr(entry, field), field
    assert read.total_params() == entry.total_params()
    return read, entry


@pytest.mark.parametrize("model_id", sorted(CONFIGS))
def test_published_config_reads_as_the_catalog_entry(tmp_path, model_id):
    read_as_entry(tmp_path, CONFIGS[model_id], model_id)


@pytest.mark.parametrize("model_id", sorted(PUBLISHED_TOTAL_PARAMS))
def test_totals_match_the_model_cards_within_two_percent(model_id):
    assert get_model(model_id).total_params() == pytest.approx(PUBLISHED_TOTAL_PARAMS[model_id], rel=0.02)


@pytest.mark.parametrize("model_id", sorted(PUBLISHED_ACTIVE_PARAMS))
def test_active_parameters_match_the_model_cards(model_id):
    published, tolerance = PUBLISHED_ACTIVE_PARAMS[model_id]
    assert active_params(get_model(model_id)) == pytest.approx(published, rel=tolerance)


def test_llama_cpp_parameter_counts_of_published_ggufs():
    # llama-bench's "params" column for GGUFs of these models: every tensor's elements.
    from engine.models.gguf_tensors import gguf_tensors

    counted = {m: sum(t.n_elements for t in gguf_tensors(get_model(m))) for m in
               ("qwen3.5-35b-a3b", "glm-4.7-flash", "glm-4.5-air", "llama-4-scout-17b-16e", "deepseek-v3",
                "ernie-4.5-21b-a3b", "qwen3-next-80b-a3b")}
    assert counted["qwen3.5-35b-a3b"] == pytest.approx(34.66e9, rel=2e-3)
    assert counted["glm-4.7-flash"] == pytest.approx(29.94e9, rel=2e-3)
    assert counted["glm-4.5-air"] == pytest.approx(110.47e9, rel=2e-3)  # NextN block with its own embedding and head
    assert counted["llama-4-scout-17b-16e"] == pytest.approx(107.77e9, rel=2e-3)
    assert counted["deepseek-v3"] == pytest.approx(671.03e9, rel=2e-3)
    assert counted["ernie-4.5-21b-a3b"] == pytest.approx(21.83e9, rel=2e-3)
    assert counted["qwen3-next-80b-a3b"] == pytest.approx(79.67e9, rel=2e-3)
