"""The shipped model catalog and quantization table: shapes, byte sizes, look-ups."""

from __future__ import annotations

import json

import pytest

from engine.core.errors import CopeInputError
from engine.models.catalog import _parse_catalog, catalog, get_model, load_model
from engine.models.quant import _parse_quantizations, get_quantization, quantizations

REQUIRED_IDS = {
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "deepseek-coder-v2-lite-instruct",
    "deepseek-v2-lite-chat",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "mixtral-8x7b-instruct",
    "olmoe-1b-7b",
    "qwen1.5-moe-a2.7b",
}

# Total parameters as the model cards publish them.
PUBLISHED_TOTAL_PARAMS = {
    "qwen3-30b-a3b": 30.5e9,
    "qwen3-235b-a22b": 235e9,
    "deepseek-coder-v2-lite-instruct": 15.7e9,
    "deepseek-v2-lite-chat": 15.7e9,
    "gpt-oss-20b": 20.9e9,
    "gpt-oss-120b": 116.8e9,
    "mixtral-8x7b-instruct": 46.7e9,
    "olmoe-1b-7b": 6.9e9,
    "qwen1.5-moe-a2.7b": 14.3e9,
}

# ggml-common.h block sizes: (bytes per block, weights per block).
BLOCK = {
    "Q8_0": (2 + 32, 32),
    "Q6_K": (128 + 64 + 16 + 2, 256),
    "Q5_K": (2 + 2 + 12 + 32 + 128, 256),
    "Q4_K": (2 + 2 + 12 + 128, 256),
    "Q3_K": (32 + 64 + 12 + 2, 256),
    "Q2_K": (16 + 64 + 2 + 2, 256),
    "Q4_0": (2 + 16, 32),
    "IQ4_XS": (2 + 2 + 4 + 128, 256),
    "IQ3_XXS": (2 + 96, 256),
    "MXFP4": (1 + 16, 32),
}


def bpw(block_type: str) -> float:
    nbytes, weights = BLOCK[block_type]
    return nbytes * 8 / weights


def test_catalog_holds_every_required_model_and_each_loads_by_id_and_name():
    models = catalog()
    assert REQUIRED_IDS <= set(models)
    for model_id, model in models.items():
        assert get_model(model_id) is model
        assert get_model(model.name.upper()) is model
        assert load_model(model_id) is model
        assert model.default_quant.upper() in quantizations()
        assert model.source and model.hf_repo


def test_llama_cpp_architecture_names():
    arch = {m.id: m.arch for m in catalog().values()}
    assert arch["qwen3-30b-a3b"] == arch["qwen3-235b-a22b"] == "qwen3moe"
    assert arch["deepseek-v2-lite-chat"] == arch["deepseek-coder-v2-lite-instruct"] == "deepseek2"
    assert arch["gpt-oss-20b"] == arch["gpt-oss-120b"] == "gpt-oss"
    assert arch["mixtral-8x7b-instruct"] == "llama"
    assert arch["olmoe-1b-7b"] == "olmoe"
    assert arch["qwen1.5-moe-a2.7b"] == "qwen2moe"


@pytest.mark.parametrize("model_id", sorted(PUBLISHED_TOTAL_PARAMS))
def test_total_params_match_the_published_totals(model_id):
    total = get_model(model_id).total_params()
    assert total == pytest.approx(PUBLISHED_TOTAL_PARAMS[model_id], rel=0.01)


def test_qwen3_30b_shape_and_one_expert_in_bytes():
    m = get_model("Qwen3-30B-A3B")
    assert (m.n_blocks, m.moe_blocks) == (48, tuple(range(48)))
    assert (m.n_routed_experts, m.top_k, m.n_shared_experts) == (128, 8, 0)
    assert m.expert_params() == 3 * 2048 * 768

    # A format with one block type everywhere: the expert is 4.5 bits per weight.
    assert m.expert_bytes(get_quantization("Q4_0")) == 3 * 2048 * 768 * 4.5 / 8
    assert m.expert_bytes(get_quantization("Q8_0")) == 3 * 2048 * 768 * 34 // 32

    # Q4_K_M: gate and up stay Q4_K (144 bytes per 256 weights); llama.cpp's
    # use_more_bits rule puts ffn_down at Q6_K (210 bytes per 256) in blocks 0-5,
    # 42-47 and every third block from 8 to 41: 24 of the 48 blocks.
    more_bits = list(range(6)) + list(range(42, 48)) + list(range(8, 42, 3))
    assert len(set(more_bits)) == 24
    blocks_per_matrix = 2048 * 768 // 256
    per_layer = [
        blocks_per_matrix * (144 + 144 + (210 if layer in more_bits else 144)) for layer in range(48)
    ]
    q4km = get_quantization("Q4_K_M")
    assert m.expert_bytes_per_layer(q4km) == tuple(per_layer)
    # Without a file, one expert's bytes are the mean over the layers of llama.cpp's mix.
    assert m.expert_bytes(q4km) == sum(per_layer) / 48 == 2_856_960


@pytest.mark.parametrize(
    ("quant", "published_gb"),
    # Published file sizes of Qwen3-30B-A3B GGUFs: bartowski's imatrix quants (llama.cpp
    # b5200) for Q8_0 to Q5_K_S, "Q4_K_M ~4.8 BPW, 18.6 GB" for Q4_K_M.
    [("BF16", 61.10), ("Q8_0", 32.48), ("Q6_K", 25.10), ("Q5_K_M", 21.74), ("Q5_K_S", 21.10),
     ("Q4_K_M", 18.6)],
)
def test_qwen3_30b_whole_model_bytes_match_published_gguf_sizes(quant, published_gb):
    m = get_model("qwen3-30b-a3b")
    q = get_quantization(quant)
    assert m.file_bytes(q) == pytest.approx(published_gb * 1e9, rel=0.01)


def test_deepseek_v2_lite_shape():
    m = get_model("deepseek-v2-lite-chat")
    assert m.n_blocks == 27 and m.dense_blocks == (0,) and m.moe_blocks == tuple(range(1, 27))
    assert (m.n_routed_experts, m.top_k, m.n_shared_experts) == (64, 6, 2)
    assert m.shared_expert_ffn_size == 2 * 1408 and m.dense_ffn_size == 10944
    a = m.attention
    assert (a.kind, a.q_lora_rank, a.kv_lora_rank, a.qk_rope_head_dim) == ("mla", 0, 512, 64)
    # llama.cpp's MLA cache: the 512-wide latent plus the 64-wide rope key, F16, per block.
    assert m.kv_cache_bytes(1000) == 1000 * 27 * (512 + 64) * 2
    coder = get_model("deepseek-coder-v2-lite-instruct")
    assert coder.total_params() == m.total_params()


def test_gpt_oss_alternates_128_token_sliding_window_and_full_attention():
    m = get_model("gpt-oss-20b")
    per_token = 2 * 8 * 64 * 2  # K and V, 8 KV heads of 64, F16
    # Blocks 0, 2, ..., 22 slide over 128 tokens; blocks 1, 3, ..., 23 see everything.
    assert m.kv_cache_bytes(4096) == (12 * 128 + 12 * 4096) * per_token
    assert m.kv_cache_bytes(100) == 24 * 100 * per_token
    assert m.default_quant == "MXFP4"
    assert m.expert_bytes(get_quantization("MXFP4")) == 3 * 2880 * 2880 * 17 // 32


def test_qwen15_moe_shared_expert():
    m = get_model("qwen1.5-moe-a2.7b")
    assert (m.n_routed_experts, m.top_k, m.expert_ffn_size) == (60, 4, 1408)
    assert (m.n_shared_experts, m.shared_expert_ffn_size) == (1, 5632)


def test_unknown_model_names_every_known_id():
    with pytest.raises(CopeInputError) as err:
        get_model("llama-5-nova")
    message = str(err.value)
    assert "llama-5-nova" in message
    for model_id in REQUIRED_IDS:
        assert model_id in message


@pytest.mark.parametrize("typed, meant", [("qwen3-30b", "qwen3-30b-a3b"), ("Qwen3-30B-A3BB", "qwen3-30b-a3b"),
                                           ("gptoss-20b", "gpt-oss-20b")])
def test_a_mistyped_model_id_gets_the_closest_ids(typed, meant):
    with pytest.raises(CopeInputError, match=rf"unknown model '{typed}' \(did you mean {meant}\b"):
        get_model(typed)


def test_a_mistyped_quantization_gets_the_closest_names_and_where_they_are_listed():
    with pytest.raises(CopeInputError, match=r"'q4km' \(did you mean Q4_K_M\b.*`cope models` lists them"):
        get_quantization("q4km")
    with pytest.raises(CopeInputError) as err:
        get_quantization("Q9_K")
    assert "did you mean" not in str(err.value)  # nothing close: no guess


def test_load_model_by_hub_repo_and_unknown_argument():
    assert load_model("Qwen/Qwen3-30B-A3B").id == "qwen3-30b-a3b"
    with pytest.raises(CopeInputError, match="nor a path to a config.json"):
        load_model("no-such-model")
    with pytest.raises(CopeInputError, match="missing.json: file not found"):
        load_model("missing.json")


def test_load_model_reads_a_config_file_or_its_folder(tmp_path):
    config = {
        "model_type": "mixtral", "hidden_size": 1024, "intermediate_size": 2048,
        "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
        "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 1000,
        "tie_word_embeddings": False,
    }
    folder = tmp_path / "tiny-moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    from_file = load_model(str(folder / "config.json"))
    from_folder = load_model(str(folder))
    assert from_file == from_folder
    assert from_file.id == "tiny-moe" and from_file.expert_params() == 3 * 1024 * 2048
    with pytest.raises(CopeInputError, match="folder holds no config.json"):
        load_model(str(tmp_path))


def test_quantization_table_required_names_and_block_sizes():
    table = quantizations()
    required = {"F16", "BF16", "Q8_0", "Q6_K", "Q5_K_M", "IQ4_XS", "Q4_K_M", "Q3_K_M", "MXFP4"}
    assert required <= set(table)
    assert get_quantization("q4_k_m") is table["Q4_K_M"]
    # Formats with a single block type for every expert matrix.
    for name in ("Q8_0", "Q6_K", "IQ4_XS", "Q4_0", "IQ3_XXS", "MXFP4"):
        assert table[name].expert_bits_per_weight == bpw(name)
    assert table["F16"].expert_bits_per_weight == 16
    # K-quant mixes: gate and up at the base type, ffn_down raised per llama.cpp's rules.
    assert table["Q5_K_M"].expert_bits_per_weight == pytest.approx(
        (2 * bpw("Q5_K") + (bpw("Q5_K") + bpw("Q6_K")) / 2) / 3, abs=1e-6)
    assert table["Q5_K_S"].expert_bits_per_weight == bpw("Q5_K")
    assert table["Q4_K_S"].expert_bits_per_weight == pytest.approx(
        (2 * bpw("Q4_K") + (7 * bpw("Q4_K") + bpw("Q5_K")) / 8) / 3, abs=1e-6)
    assert table["Q3_K_M"].expert_bits_per_weight == pytest.approx(
        (2 * bpw("Q3_K") + (15 * bpw("Q4_K") + bpw("Q5_K")) / 16) / 3, abs=1e-6)
    assert table["Q2_K"].expert_bits_per_weight == pytest.approx(
        (2 * bpw("Q2_K") + bpw("Q3_K")) / 3, abs=1e-6)
    # MXFP4 GGUFs keep everything but the experts at Q8_0.
    assert table["MXFP4"].non_expert_bits_per_weight == pytest.approx(bpw("Q8_0"), abs=0.1)
    # K-quant mixes keep attention, embeddings and head above the experts' average.
    for name in ("Q4_K_M", "Q5_K_M", "Q3_K_M", "IQ4_XS", "Q2_K"):
        assert table[name].non_expert_bits_per_weight > table[name].expert_bits_per_weight
    with pytest.raises(CopeInputError, match="unknown quantization 'Q7_K'"):
        get_quantization("Q7_K")


def _entry(**changes):
    entry = {
        "id": "m", "name": "M", "arch": "llama", "n_blocks": 2, "n_routed_experts": 4, "top_k": 2,
        "hidden_size": 64, "expert_ffn_size": 128, "vocab_size": 100,
        "attention": {"kind": "gqa", "n_heads": 4, "n_kv_heads": 4, "head_dim": 16},
        "source": "test", "default_quant": "Q4_K_M",
    }
    entry.update(changes)
    return entry


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([], "must be a JSON object"),
        ({"schema_version": 2, "models": [_entry()]}, "'schema_version' must be 1"),
        ({"schema_version": 1, "models": []}, "'models' must be a non-empty list"),
        ({"schema_version": 1, "models": ["x"]}, r"models\[0\] must be an object"),
        ({"schema_version": 1, "models": [_entry(), _entry(name="Other")]}, "duplicate id 'm'"),
        ({"schema_version": 1, "models": [_entry(), _entry(id="n")]}, "'m' is also used by 'm'"),
        ({"schema_version": 1, "models": [_entry(default_quant="Q9")]}, "'default_quant' 'Q9'"),
        ({"schema_version": 1, "models": [_entry(top_k=5)]}, "top_k 5 not in 1..4"),
        ({"schema_version": 1, "models": [_entry(source=" ")]}, "field 'source' is empty"),
        ({"schema_version": 1, "models": [_entry(), _entry(id="n", name="N", aliases=["M"])]},
         "'m' is also used by 'm'"),
        ({"schema_version": 1, "models": [_entry(full_attention_interval=4)]}, "linear-attention shape"),
    ],
)
def test_catalog_validation_names_the_file_and_the_problem(data, expected):
    with pytest.raises(CopeInputError, match=expected) as err:
        _parse_catalog(data, origin="assets/models.json")
    assert "assets/models.json" in str(err.value)


def test_catalog_validation_reports_a_missing_field():
    entry = _entry()
    del entry["hidden_size"]
    with pytest.raises(CopeInputError, match="hidden_size") as err:
        _parse_catalog({"schema_version": 1, "models": [entry]}, origin="assets/models.json")
    assert str(err.value).startswith("assets/models.json: ")


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([{"name": "X", "source": "s", "expert_bits_per_weight": 4.5}], "'non_expert_bits_per_weight'"),
        ([{"name": "X", "source": "s", "expert_bits_per_weight": "4.5",
           "non_expert_bits_per_weight": 5}], "'expert_bits_per_weight' must be a number"),
        ([{"name": "", "source": "s", "expert_bits_per_weight": 4, "non_expert_bits_per_weight": 5}],
         "'name' must be a non-empty string"),
        ([{"name": "X", "source": "s", "expert_bits_per_weight": 4, "non_expert_bits_per_weight": 5},
          {"name": "x", "source": "s", "expert_bits_per_weight": 4, "non_expert_bits_per_weight": 5}],
         "duplicate name 'x'"),
    ],
)
def test_quantization_table_validation(rows, expected):
    with pytest.raises(CopeInputError, match=expected) as err:
        _parse_quantizations({"schema_version": 1, "quantizations": rows},
                             origin="assets/quantizations.json")
    assert str(err.value).startswith("assets/quantizations.json: ")


def test_aliases_name_the_same_weights():
    assert get_model("Qwen3-30B-A3B-Instruct-2507").id == "qwen3-30b-a3b"
    assert get_model("deepseek-r1-0528").id == "deepseek-v3"
    assert get_model("DeepSeek-V2-Lite").id == "deepseek-v2-lite-chat"
    assert load_model("Qwen3-Next-80B-A3B-Thinking").id == "qwen3-next-80b-a3b"


def test_a_release_suffix_may_be_left_off_or_added():
    # the catalog names "Qwen3-Coder-30B-A3B-Instruct"; people say "Qwen3-Coder-30B-A3B"
    assert get_model("Qwen3-Coder-30B-A3B").id == "qwen3-30b-a3b"
    # a quantizer's repository name
    assert load_model("Qwen3-30B-A3B-GGUF").id == "qwen3-30b-a3b"
    assert get_model("gpt-oss-20b-gguf").id == "gpt-oss-20b"
    assert get_model("DeepSeek-Coder-V2-Lite").id == "deepseek-coder-v2-lite-instruct"
    # a suffix is not a wildcard: another size is still unknown, with a suggestion
    with pytest.raises(CopeInputError, match="unknown model 'Qwen3-Coder-31B-A3B'"):
        get_model("Qwen3-Coder-31B-A3B")


def test_llama_cpp_file_types_name_their_rules_in_the_table():
    assert get_quantization("MXFP4").llama_ftype == "MXFP4_MOE"
    assert all(q.llama_ftype for q in quantizations().values())
    with pytest.raises(CopeInputError, match="'llama_ftype' 'Q9_K'"):
        _parse_quantizations({"schema_version": 1, "quantizations": [
            {"name": "X", "source": "s", "expert_bits_per_weight": 4, "non_expert_bits_per_weight": 5,
             "llama_ftype": "Q9_K"}]}, origin="assets/quantizations.json")
