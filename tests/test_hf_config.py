"""Reading Hugging Face config.json files: the 27 real ones beside the checkout, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.core.errors import CopeInputError
from engine.models.catalog import get_model
from engine.models.hf_config import model_from_hf_config
from engine.models.quant import get_quantization

CONFIGS = "model-configs__moe-lrc"

def q4_k_m_expert_bytes(hidden: int, ffn: int) -> int:
    """A Q4_K_M expert averaged over the layers: gate and up at Q4_K (144 bytes per 256
    weights); ffn_down at Q6_K (210 bytes per 256) in llama.cpp's use_more_bits layers (half
    of them here) and Q4_K in the others, or, when its rows (ffn wide) are not a multiple of
    256, Q8_0 (34 bytes per 32) and Q5_0 (22 bytes per 32) (tensor_type_fallback)."""
    if ffn % 256 == 0:
        down = hidden * ffn * (210 + 144) // 512
    else:
        down = hidden * ffn * (34 + 22) // 64
    return 2 * hidden * ffn * 144 // 256 + down


@pytest.fixture
def configs(shared_traces: Path) -> Path:
    folder = shared_traces / CONFIGS
    if not folder.is_dir():
        pytest.skip(f"{folder} not found")
    return folder


def _index(folder: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in (folder / "index.jsonl").read_text().splitlines() if line]
    return {row["key"]: row for row in rows}


def _load(folder: Path, key: str):
    return model_from_hf_config(folder / f"{key}.config.json")


def test_every_config_loads_or_is_refused_as_encoder_decoder(configs):
    index = _index(configs)
    assert len(index) == 27
    for key, row in index.items():
        path = configs / f"{key}.config.json"
        if row["type"] == "seq2seq":  # Switch Transformers, NLLB-MoE
            with pytest.raises(CopeInputError) as err:
                model_from_hf_config(path)
            message = str(err.value)
            assert message.startswith(f"{path}: ")
            assert "not a decoder-only MoE model" in message and "encoder-decoder" in message
            continue
        model = model_from_hf_config(path)
        assert model.id == key
        assert model.source.startswith(f"config.json: {path}")
        # The index's own counts, taken from the loaded PyTorch models.
        assert model.n_blocks == row["num_layers"], key
        assert model.n_routed_experts == row["num_experts"], key
        assert model.top_k == row["top_k"], key
        published = row["num_params"] * 1e9
        if key == "jamba":
            # 28 of Jamba's 32 blocks are Mamba mixers, larger than the attention they are
            # counted as: the total comes out low, and the source says why.
            assert 0.95 * published < model.total_params() < published
            assert "Mamba" in model.source
        else:
            assert model.total_params() == pytest.approx(published, rel=0.01), key


def test_refused_models_are_exactly_the_seq2seq_ones(configs):
    refused = set()
    for path in sorted(configs.glob("*.config.json")):
        try:
            model_from_hf_config(path)
        except CopeInputError:
            refused.add(path.name.split(".")[0])
    assert refused == {"switch", "nllb"}


def test_mixtral(configs):
    m = _load(configs, "mixtral")
    assert m.arch == "llama"
    assert m.moe_blocks == tuple(range(32))
    assert m.expert_params() == 3 * 4096 * 14336
    assert m.expert_bytes(get_quantization("Q4_K_M")) == q4_k_m_expert_bytes(4096, 14336)
    assert (m.n_routed_experts, m.top_k, m.n_shared_experts) == (8, 2, 0)
    assert (m.attention.n_heads, m.attention.n_kv_heads, m.attention.head_dim) == (32, 8, 4096 // 32)


def test_qwen3_moe(configs):
    m = _load(configs, "qwen3")
    assert m.arch == "qwen3moe"
    assert m.moe_blocks == tuple(range(48))  # decoder_sparse_step 1, mlp_only_layers []
    assert m.expert_params() == 3 * 2048 * 768
    assert m.expert_bytes(get_quantization("Q4_K_M")) == q4_k_m_expert_bytes(2048, 768)
    assert m.expert_bytes(get_quantization("Q4_0")) == 3 * 2048 * 768 * 4.5 / 8
    assert m.attention.head_dim == 128 and m.attention.n_kv_heads == 4  # head_dim given, not 2048/32


def test_deepseek_v2_lite(configs):
    m = _load(configs, "deepseek2")
    assert m.arch == "deepseek2"
    assert m.moe_blocks == tuple(range(1, 27))  # first_k_dense_replace 1
    assert m.dense_blocks == (0,) and m.dense_ffn_size == 10944
    assert m.expert_params() == 3 * 2048 * 1408
    assert m.expert_bytes(get_quantization("Q8_0")) == 3 * 2048 * 1408 * 34 // 32
    assert (m.n_shared_experts, m.shared_expert_ffn_size) == (2, 2 * 1408)
    a = m.attention
    assert (a.kind, a.n_heads, a.q_lora_rank, a.kv_lora_rank) == ("mla", 16, 0, 512)  # q_lora_rank null
    assert (a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim) == (128, 64, 128)


def test_olmoe(configs):
    m = _load(configs, "olmoe")
    assert m.arch == "olmoe"
    assert m.moe_blocks == tuple(range(16))
    assert m.expert_params() == 3 * 2048 * 1024
    assert m.expert_bytes(get_quantization("IQ4_XS")) == 3 * 2048 * 1024 * 136 // 256
    assert (m.n_routed_experts, m.top_k) == (64, 8)


def test_qwen15_moe(configs):
    m = _load(configs, "qwen")
    assert m.arch == "qwen2moe"
    assert m.moe_blocks == tuple(range(24))
    assert m.expert_params() == 3 * 2048 * 1408
    assert m.expert_bytes(get_quantization("Q4_K_M")) == q4_k_m_expert_bytes(2048, 1408)
    assert (m.n_shared_experts, m.shared_expert_ffn_size) == (1, 5632)  # shared_expert_intermediate_size


def test_jamba_experts_every_other_block(configs):
    m = _load(configs, "jamba")
    assert m.arch == "jamba"
    # expert_layer_period 2, expert_layer_offset 1: blocks 1, 3, ..., 31.
    assert m.moe_blocks == (1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31)
    assert m.dense_blocks == tuple(range(0, 32, 2)) and m.dense_ffn_size == 14336
    assert m.expert_params() == 3 * 4096 * 14336
    assert m.expert_bytes(get_quantization("Q4_K_M")) == q4_k_m_expert_bytes(4096, 14336)


def test_deepseek_moe_16b(configs):
    m = _load(configs, "deepseek")
    assert m.arch == "deepseek"
    assert m.moe_blocks == tuple(range(1, 28))
    assert (m.n_shared_experts, m.shared_expert_ffn_size) == (2, 2 * 1408)
    assert m.attention.kind == "gqa" and m.attention.head_dim == 2048 // 16


def test_openmoe_layout_and_double_width_gate(configs):
    m = _load(configs, "openmoe")
    assert m.moe_blocks == (5, 11, 17, 23)  # moe_layer_interval 6, counted from block 1
    # Each expert: gate 2048 x (2 x 8192), up 2048 x 8192, down 8192 x 2048.
    assert m.expert_params() == 2048 * 2 * 8192 + 2048 * 8192 + 8192 * 2048
    # The dense FFNs have the same 4 h f weights, within a rounding of the width.
    assert 3 * 2048 * m.dense_ffn_size == pytest.approx(4 * 2048 * 8192, rel=1e-4)
    assert m.n_shared_experts == 1  # the extra dense FFN after each MoE layer
    assert "double-width gate" in m.source


def test_jetmoe_attention_experts_are_counted(configs):
    for key in ("jetmoe", "jetmoechat", "jetmoesft"):  # hidden_size / n_embd, num_hidden_layers / num_layers
        m = _load(configs, key)
        assert (m.hidden_size, m.n_blocks, m.n_routed_experts, m.top_k) == (2048, 24, 8, 2)
        assert m.expert_params() == 3 * 2048 * 5632
        # Per block: shared K and V (2 x 2048 x 16 x 128), and 8 attention experts, each
        # with a query and an output projection of 2048 x (16 x 128).
        kv = 2 * 2048 * 16 * 128
        experts = 8 * 2 * 2048 * 16 * 128
        assert m.attention.params(m.hidden_size) == kv + experts
        assert m.attention.kv_elements_per_token() == 2 * 16 * 128
        assert m.tied_embeddings
    # jetmoechat also has the generation setting "top_k": 50, which is not the routing top-k.


def test_other_families(configs):
    llama_moe = _load(configs, "llamamoe")  # size_experts: 16 x 688 per block, top num_selects
    assert (llama_moe.expert_ffn_size, llama_moe.top_k, llama_moe.arch) == (688, 4, "unknown")
    residual = _load(configs, "llamamoe2s")  # a residual FFN every token passes through
    assert (residual.n_shared_experts, residual.shared_expert_ffn_size) == (1, 1792)
    assert residual.arch == "unknown"
    xverse = _load(configs, "xverse")  # moe_top_k, num_shared_experts x intermediate_size
    assert (xverse.top_k, xverse.n_shared_experts, xverse.shared_expert_ffn_size) == (6, 2, 2 * 1728)
    assert xverse.attention.n_kv_heads == 32  # no num_key_value_heads: plain multi-head
    minicpm = _load(configs, "minicpm")  # no model_type, no tie_word_embeddings
    assert minicpm.arch == "minicpm" and minicpm.tied_embeddings
    yuan = _load(configs, "yuan")  # MoE fields nested in moe_config
    assert (yuan.n_routed_experts, yuan.top_k, yuan.expert_ffn_size) == (32, 2, 8192)
    assert yuan.attention.head_dim == 4096 // 16  # attention_projection_size / heads
    assert _load(configs, "phi").arch == "phimoe"
    assert _load(configs, "grin").arch == "unknown"
    assert _load(configs, "powermoe").arch == "granitemoe"
    assert _load(configs, "qwen2").shared_expert_ffn_size == 20480


@pytest.mark.parametrize(
    ("key", "catalog_id"),
    [("qwen3", "qwen3-30b-a3b"), ("mixtral", "mixtral-8x7b-instruct"), ("olmoeins", "olmoe-1b-7b"),
     ("qwen", "qwen1.5-moe-a2.7b"), ("deepseek2", "deepseek-v2-lite-chat")],
)
def test_catalog_entries_agree_with_the_real_configs(configs, key, catalog_id):
    from_config = _load(configs, key)
    entry = get_model(catalog_id)
    for field in ("arch", "n_blocks", "moe_blocks", "n_routed_experts", "top_k", "n_shared_experts",
                  "hidden_size", "expert_ffn_size", "shared_expert_ffn_size", "vocab_size",
                  "tied_embeddings", "attention", "gated_experts"):
        assert getattr(from_config, field) == getattr(entry, field), field
    if from_config.dense_blocks:
        assert from_config.dense_ffn_size == entry.dense_ffn_size


# --- configs written here ------------------------------------------------------------

QWEN3_LIKE = {
    "model_type": "qwen3_moe", "hidden_size": 2048, "moe_intermediate_size": 768,
    "intermediate_size": 6144, "num_hidden_layers": 48, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
    "vocab_size": 151936, "tie_word_embeddings": False, "decoder_sparse_step": 1, "mlp_only_layers": [],
}


def _write(tmp_path: Path, name: str, content) -> Path:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_not_json(tmp_path):
    path = _write(tmp_path, "broken.json", '{"hidden_size": 2048,\n  "num_experts": }')
    with pytest.raises(CopeInputError) as err:
        model_from_hf_config(path)
    assert str(err.value).startswith(f"{path}:2: not valid JSON")


def test_json_that_is_not_an_object(tmp_path):
    path = _write(tmp_path, "list.json", [1, 2])
    with pytest.raises(CopeInputError, match="holds a list") as err:
        model_from_hf_config(path)
    assert str(path) in str(err.value)


def test_dense_config_is_not_moe(tmp_path):
    dense = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
             "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 128256}
    path = _write(tmp_path, "llama.json", dense)
    with pytest.raises(CopeInputError, match="not an MoE config") as err:
        model_from_hf_config(path)
    assert str(err.value).startswith(f"{path}: ")


def test_missing_hidden_size(tmp_path):
    config = dict(QWEN3_LIKE)
    del config["hidden_size"]
    path = _write(tmp_path, "nohidden.json", config)
    with pytest.raises(CopeInputError, match="missing field 'hidden_size'") as err:
        model_from_hf_config(path)
    assert str(err.value).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"num_experts_per_tok": None}, "missing field 'num_experts_per_tok'"),
        ({"num_experts_per_tok": 129}, "top_k 129 not in 1..128"),
        ({"num_hidden_layers": "48"}, "field 'num_hidden_layers' must be an integer"),
        ({"num_experts": 1}, "not an MoE config"),
        ({"mlp_only_layers": list(range(48))}, "no block holds routed experts"),
        ({"is_encoder_decoder": True}, "not a decoder-only MoE model"),
    ],
)
def test_bad_fields_name_the_file_and_the_field(tmp_path, change, expected):
    config = dict(QWEN3_LIKE)
    for key, value in change.items():
        if value is None:
            del config[key]
        else:
            config[key] = value
    path = _write(tmp_path, "bad.json", config)
    with pytest.raises(CopeInputError, match=expected) as err:
        model_from_hf_config(path)
    assert str(err.value).startswith(f"{path}: ")


def test_missing_file(tmp_path):
    with pytest.raises(CopeInputError, match="file not found") as err:
        model_from_hf_config(tmp_path / "nope.json")
    assert str(tmp_path / "nope.json") in str(err.value)


def test_qwen_placement_rules(tmp_path):
    config = dict(QWEN3_LIKE, num_hidden_layers=8, decoder_sparse_step=2, mlp_only_layers=[3])
    m = model_from_hf_config(_write(tmp_path, "sparse.json", config))
    # (i + 1) % 2 == 0 gives 1, 3, 5, 7; block 3 is listed as dense.
    assert m.moe_blocks == (1, 5, 7)
    assert m.dense_ffn_size == 6144


def test_gpt_oss_config(tmp_path):
    config = {  # openai/gpt-oss-20b's config.json, the fields that matter here
        "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "hidden_size": 2880,
        "intermediate_size": 2880, "num_hidden_layers": 24, "num_attention_heads": 64,
        "num_key_value_heads": 8, "head_dim": 64, "num_local_experts": 32, "experts_per_token": 4,
        "num_experts_per_tok": 4, "vocab_size": 201088, "tie_word_embeddings": False,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 12,
    }
    m = model_from_hf_config(_write(tmp_path, "gpt-oss-20b.json", config))
    assert (m.id, m.arch, m.default_quant) == ("gpt-oss-20b", "gpt-oss", "MXFP4")
    assert (m.attention.sliding_window_tokens, m.attention.sliding_window_every) == (128, 2)
    assert m.attention == get_model("gpt-oss-20b").attention
    assert m.total_params() == get_model("gpt-oss-20b").total_params()


def test_hub_cache_path_gives_id_and_repo(tmp_path):
    folder = tmp_path / "models--Qwen--Qwen3-30B-A3B" / "snapshots" / "0123abc"
    folder.mkdir(parents=True)
    m = model_from_hf_config(_write(folder, "config.json", QWEN3_LIKE))
    assert (m.id, m.hf_repo) == ("Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B")
    plain = tmp_path / "my-model"
    plain.mkdir()
    m = model_from_hf_config(_write(plain, "config.json", QWEN3_LIKE))
    assert (m.id, m.hf_repo) == ("my-model", "")
    named = dict(QWEN3_LIKE, _name_or_path="Qwen/Qwen3-30B-A3B")
    m = model_from_hf_config(_write(plain, "config.json", named))
    assert (m.id, m.hf_repo) == ("Qwen3-30B-A3B", "")


def test_what_a_config_shape_gets_wrong_is_said_in_every_plan(configs):
    # Jamba's Mamba blocks are priced as attention: the plan's notes say so, not only the
    # model's provenance in the JSON.
    from cope_tui.options import PlanChoices
    from cope_tui.service.request import build_request

    path = str(configs / "jamba.config.json")
    assert any("Mamba" in c for c in _load(configs, "jamba").caveats)
    request = build_request(PlanChoices(model=path, gpu="rtx-3090", cpu="ryzen-9-7950x", tokens=40))
    assert any(n.startswith("model shape (") and "Mamba mixer blocks are counted as attention" in n
               for n in request.notes)
    plain = build_request(PlanChoices(model=str(configs / "mixtral.config.json"), gpu="rtx-3090",
                                      cpu="ryzen-9-7950x", tokens=40))
    assert not any(n.startswith("model shape (") for n in plain.notes)


@pytest.mark.parametrize(("key", "catalog_id"), [
    ("qwen3", "qwen3-30b-a3b"), ("mixtral", "mixtral-8x7b-instruct"), ("olmoeins", "olmoe-1b-7b"),
    ("qwen", "qwen1.5-moe-a2.7b"), ("deepseek2", "deepseek-v2-lite-chat"),
])
def test_the_trained_context_is_max_position_embeddings_as_the_catalog_says(configs, key, catalog_id):
    from engine.models.catalog import get_model

    data = json.loads((configs / f"{key}.config.json").read_text())
    model = _load(configs, key)
    assert model.context_length == data["max_position_embeddings"] == get_model(catalog_id).context_length
