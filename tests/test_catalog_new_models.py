"""The MoE models added to the catalog in the 2026 refresh, against their published config.json.

Each dict below holds the shape-deciding fields of the model's published config.json as read
(where: each catalog entry's `source`). The tests check the entries' key dimensions as
numbers, that `engine.models.hf_config` reading those fields gives the entry's shape, the totals
against the model cards, that a typical published GGUF file name maps to the entry, and that
`cope estimate` prices a llama.cpp command for each.
"""

from __future__ import annotations

import pytest

from cope_tui.cli import EXIT_OK, main
from engine.models.catalog import catalog, get_model
from engine.models.model_names import model_from_file_name
from tests.test_catalog_configs import read_as_entry

QWEN35_LINEAR_64V = {"linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
                     "linear_num_value_heads": 64, "linear_value_head_dim": 128}


def qwen35_text(n_layers: int, **fields) -> dict:
    return {"model_type": "qwen3_5_moe_text", "num_hidden_layers": n_layers,
            "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * (n_layers // 4),
            "full_attention_interval": 4, "mlp_only_layers": [], "attn_output_gate": True, "head_dim": 256,
            "num_attention_heads": 32, "num_key_value_heads": 2, "vocab_size": 248320,
            "tie_word_embeddings": False, "max_position_embeddings": 262144, "dtype": "bfloat16",
            "mtp_num_hidden_layers": 1, **QWEN35_LINEAR_64V, **fields}


# ai-dynamo/aiconfigurator aic-core/src/aiconfigurator_core/model_configs/<org>--<name>_config.json
# (copies of the Hub files), and for Mixtral-8x22B-Instruct the copies its fine-tunes publish.
CONFIGS = {
    "qwen3.5-122b-a10b": {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "tie_word_embeddings": False,
        "text_config": qwen35_text(48, hidden_size=3072, num_experts=256, num_experts_per_tok=8,
                                   moe_intermediate_size=1024, shared_expert_intermediate_size=1024),
    },
    "qwen3.5-397b-a17b": {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "tie_word_embeddings": False,
        "text_config": qwen35_text(60, hidden_size=4096, num_experts=512, num_experts_per_tok=10,
                                   moe_intermediate_size=1024, shared_expert_intermediate_size=1024),
    },
    "kimi-k2-instruct": {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "first_k_dense_replace": 1,
        "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 131072,
        "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_routed_experts": 384, "n_shared_experts": 1,
        "num_attention_heads": 64, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 64,
        "num_nextn_predict_layers": 0, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
        "v_head_dim": 128, "vocab_size": 163840, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                "weight_block_size": [128, 128]},
    },
    "mixtral-8x22b-instruct": {
        "_name_or_path": "mistralai/Mixtral-8x22B-Instruct-v0.1", "architectures": ["MixtralForCausalLM"],
        "model_type": "mixtral", "hidden_size": 6144, "intermediate_size": 16384, "max_position_embeddings": 65536,
        "num_attention_heads": 48, "num_experts_per_tok": 2, "num_hidden_layers": 56, "num_key_value_heads": 8,
        "num_local_experts": 8, "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "vocab_size": 32768,
    },
}

NEW_IDS = sorted(CONFIGS)


@pytest.mark.parametrize("model_id", NEW_IDS)
def test_published_config_reads_as_the_catalog_entry(tmp_path, model_id):
    read, entry = read_as_entry(tmp_path, CONFIGS[model_id], model_id)
    assert read.context_length == entry.context_length
    assert (read.checkpoint_dtype, read.checkpoint_quant) == (entry.checkpoint_dtype, entry.checkpoint_quant)


def test_qwen35_122b_a10b_dimensions():
    m = get_model("Qwen3.5-122B-A10B")
    assert (m.arch, m.hf_repo) == ("qwen35moe", "Qwen/Qwen3.5-122B-A10B")
    assert (m.n_blocks, m.n_moe_layers, m.n_routed_experts, m.top_k) == (48, 48, 256, 8)
    assert (m.hidden_size, m.expert_ffn_size, m.n_shared_experts, m.shared_expert_ffn_size) == (3072, 1024, 1, 1024)
    a = m.attention
    assert (a.kind, a.n_heads, a.n_kv_heads, a.head_dim, a.output_gate) == ("gqa", 32, 2, 256, True)
    assert m.attention_blocks == tuple(range(3, 48, 4))  # 12 attention blocks, 36 Gated DeltaNet
    la = m.linear_attention
    assert (la.n_key_heads, la.n_value_heads, la.key_head_dim, la.value_head_dim) == (16, 64, 128, 128)
    assert la.conv_kernel == 4
    assert (m.vocab_size, m.tied_embeddings, m.context_length) == (248320, False, 262144)


def test_qwen35_397b_a17b_dimensions():
    m = get_model("qwen3.5-397b-a17b")
    assert (m.arch, m.n_blocks, m.n_moe_layers, m.n_routed_experts, m.top_k) == ("qwen35moe", 60, 60, 512, 10)
    assert (m.hidden_size, m.expert_ffn_size, m.n_shared_experts, m.shared_expert_ffn_size) == (4096, 1024, 1, 1024)
    assert (m.attention.n_heads, m.attention.n_kv_heads, m.attention.head_dim) == (32, 2, 256)
    assert len(m.linear_blocks) == 45 and len(m.attention_blocks) == 15
    assert m.linear_attention.n_value_heads == 64
    assert (m.vocab_size, m.context_length) == (248320, 262144)


def test_kimi_k2_dimensions():
    m = get_model("Kimi-K2-Instruct")
    assert (m.arch, m.hf_repo) == ("deepseek2", "moonshotai/Kimi-K2-Instruct")
    assert (m.n_blocks, m.dense_blocks, m.n_moe_layers) == (61, (0,), 60)
    assert (m.n_routed_experts, m.top_k, m.n_shared_experts) == (384, 8, 1)
    assert (m.hidden_size, m.expert_ffn_size, m.shared_expert_ffn_size, m.dense_ffn_size) == (7168, 2048, 2048, 18432)
    a = m.attention
    assert (a.kind, a.n_heads, a.q_lora_rank, a.kv_lora_rank) == ("mla", 64, 1536, 512)
    assert (a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim, a.head_dim) == (128, 64, 128, 192)
    assert (m.vocab_size, m.tied_embeddings, m.nextn_blocks, m.context_length) == (163840, False, 0, 131072)
    assert m.checkpoint_quant == "fp8"


def test_mixtral_8x22b_instruct_dimensions():
    m = get_model("Mixtral-8x22B-Instruct-v0.1")
    assert (m.arch, m.id) == ("llama", "mixtral-8x22b-instruct")
    assert (m.n_blocks, m.n_moe_layers, m.n_routed_experts, m.top_k, m.n_shared_experts) == (56, 56, 8, 2, 0)
    assert (m.hidden_size, m.expert_ffn_size) == (6144, 16384)
    assert (m.attention.kind, m.attention.n_heads, m.attention.n_kv_heads, m.attention.head_dim) == ("gqa", 48, 8, 128)
    assert (m.vocab_size, m.context_length) == (32768, 65536)  # the v3 tokenizer; the base model has 32000


# Totals: the model cards, or llama.cpp's count of a published GGUF where one was read.
PUBLISHED_TOTAL_PARAMS = {
    "qwen3.5-122b-a10b": (122.11e9, 2e-3),  # llama.cpp: 122.11 B in the text GGUF (card: 122B)
    "qwen3.5-397b-a17b": (397e9, 0.01),  # card: 397B with the vision encoder
    "kimi-k2-instruct": (1e12, 0.03),  # card: "1T" (1.026 T counted from the config)
    "mixtral-8x22b-instruct": (141e9, 0.01),  # Mistral AI: 141B total
}
# Active per token (attention, shared experts, dense blocks, head and top_k routed experts).
PUBLISHED_ACTIVE_PARAMS = {
    "qwen3.5-122b-a10b": (10e9, 0.12),  # "A10B": 9.0 B counted, 9.8 B with the embedding row
    "qwen3.5-397b-a17b": (17e9, 0.06),
    "kimi-k2-instruct": (32e9, 0.02),
    "mixtral-8x22b-instruct": (39e9, 0.01),
}


@pytest.mark.parametrize("model_id", sorted(PUBLISHED_TOTAL_PARAMS))
def test_totals_match_the_published_totals(model_id):
    published, rel = PUBLISHED_TOTAL_PARAMS[model_id]
    assert get_model(model_id).total_params() == pytest.approx(published, rel=rel)


@pytest.mark.parametrize("model_id", sorted(PUBLISHED_ACTIVE_PARAMS))
def test_active_parameters_match_the_published_counts(model_id):
    m = get_model(model_id)
    active = (sum(m.shared_layer_params(b) for b in range(m.n_blocks)) + m.head_params()
              + m.n_moe_layers * m.top_k * m.expert_params())
    published, rel = PUBLISHED_ACTIVE_PARAMS[model_id]
    assert active == pytest.approx(published, rel=rel)


def test_llama_cpp_parameter_count_of_the_qwen35_122b_gguf():
    from engine.models.gguf_tensors import gguf_tensors

    counted = sum(t.n_elements for t in gguf_tensors(get_model("qwen3.5-122b-a10b")))
    assert counted == pytest.approx(122.11e9, rel=2e-3)


def test_aliases_of_models_with_the_same_dimensions():
    assert get_model("Qwen3-Coder-Next").id == "qwen3-next-80b-a3b"
    assert get_model("GLM-4.6").id == "glm-4.7"
    assert get_model("DeepSeek-R1").id == "deepseek-v3"
    assert get_model("Kimi-K2").id == "kimi-k2-instruct"
    assert get_model("Mixtral-8x22B").id == "mixtral-8x22b-instruct"
    assert set(catalog()) >= {"qwen3.5-122b-a10b", "qwen3.5-397b-a17b", "kimi-k2-instruct", "mixtral-8x22b-instruct"}


FILE_NAMES = [
    ("Qwen3.5-122B-A10B-UD-Q4_K_XL-00001-of-00003.gguf", "qwen3.5-122b-a10b", "Q4_K_M"),
    ("Qwen_Qwen3.5-122B-A10B-Q4_K_M-00001-of-00002.gguf", "qwen3.5-122b-a10b", "Q4_K_M"),
    ("Qwen3.5-397B-A17B-UD-Q4_K_XL-00001-of-00006.gguf", "qwen3.5-397b-a17b", "Q4_K_M"),
    ("Qwen3-Coder-Next-Q4_K_M.gguf", "qwen3-next-80b-a3b", "Q4_K_M"),
    ("Qwen3-Coder-Next-UD-Q4_K_XL.gguf", "qwen3-next-80b-a3b", "Q4_K_M"),
    ("Kimi-K2-Instruct-UD-Q2_K_XL-00001-of-00008.gguf", "kimi-k2-instruct", "Q2_K"),
    ("moonshotai_Kimi-K2-Instruct-Q4_K_M-00001-of-00015.gguf", "kimi-k2-instruct", "Q4_K_M"),
    ("Kimi-K2-Instruct-0905-UD-Q4_K_XL-00001-of-00013.gguf", "kimi-k2-instruct", "Q4_K_M"),
    ("Mixtral-8x22B-Instruct-v0.1.Q4_K_M-00001-of-00002.gguf", "mixtral-8x22b-instruct", "Q4_K_M"),
    ("mistralai_Mixtral-8x22B-Instruct-v0.1-Q4_K_M-00001-of-00003.gguf", "mixtral-8x22b-instruct", "Q4_K_M"),
    ("GLM-4.6-UD-Q4_K_XL-00001-of-00005.gguf", "glm-4.7", "Q4_K_M"),
    ("DeepSeek-R1-UD-Q2_K_XL-00001-of-00005.gguf", "deepseek-v3", "Q2_K"),
]


@pytest.mark.parametrize(("path", "model_id", "quant"), FILE_NAMES, ids=[f[0] for f in FILE_NAMES])
def test_published_file_names_map_to_the_entries(path, model_id, quant):
    match = model_from_file_name(path)
    assert match is not None
    assert (match.model_id, match.quant) == (model_id, quant)


def test_a_model_the_catalog_lacks_is_not_taken_for_kimi_k2():
    assert model_from_file_name("Kimi-K2.5-UD-Q2_K_XL-00001-of-00008.gguf") is None


ESTIMATED = [
    ("Qwen3.5-122B-A10B-UD-Q4_K_XL-00001-of-00003.gguf", "Qwen3.5-122B-A10B"),
    ("Qwen3.5-397B-A17B-UD-Q4_K_XL-00001-of-00006.gguf", "Qwen3.5-397B-A17B"),
    ("Kimi-K2-Instruct-Q4_K_M-00001-of-00013.gguf", "Kimi-K2-Instruct"),
    ("Mixtral-8x22B-Instruct-v0.1.Q4_K_M-00001-of-00002.gguf", "Mixtral-8x22B-Instruct-v0.1"),
    ("Qwen3-Coder-Next-Q4_K_M.gguf", "Qwen3-Next-80B-A3B-Instruct"),
]


@pytest.mark.parametrize(("gguf", "name"), ESTIMATED, ids=[e[1] for e in ESTIMATED])
def test_cope_estimate_prices_a_llama_cpp_command(capsys, gguf, name):
    code = main(["estimate", "--gpu", "rtx-4090", "--cpu", "epyc-9654", "--tokens", "40", "--",
                 "llama-server", "-m", gguf, "-ngl", "99", "--cpu-moe", "-t", "32"])
    out = capsys.readouterr()
    assert code == EXIT_OK, out.err
    assert f"COPE estimate: {name} Q4_K_M" in out.out
    assert "ms/token" in out.out
