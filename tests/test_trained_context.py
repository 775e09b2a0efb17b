"""`-c 0` in a llama.cpp command is the model's trained context (n_ctx_train), which the
catalog holds from each model's config.json (max_position_embeddings), a GGUF from its
`<arch>.context_length`; unknown, the estimate says what it assumed instead."""

from __future__ import annotations

import json
import re

import pytest

from cope_tui.cli import EXIT_OK, main
from engine.models.catalog import catalog

PLATFORM = ["--tokens", "40", "--gpu", "rtx-3090", "--cpu", "ryzen-9-7950x"]


def test_every_catalog_model_has_its_trained_context_and_cites_it():
    for model in catalog().values():
        assert model.context_length is not None and model.context_length >= 4096, model.id
        cited = re.search(r"context_length: (?:text_config\.)?max_position_embeddings (\d+)", model.source)
        assert cited is not None and int(cited[1]) == model.context_length, model.id


def test_c_0_prices_the_trained_context_and_says_so(capsys):
    words = ["--", "llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99", "-c", "0"]
    assert main(["estimate", "--json", *PLATFORM, *words]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"]["context"] == 0
    assert doc["export"]["argv"][doc["export"]["argv"].index("-c") + 1] == "40960"
    assert ("-c 0: llama.cpp uses the model's trained context (n_ctx_train): 40960 tokens for Qwen3-30B-A3B (its "
            "config.json max_position_embeddings); --fit does not lower it") in doc["notes"]
    assert not any(n.startswith("assumed context") for n in doc["notes"])
    assert main(["estimate", *PLATFORM, *words]) == EXIT_OK
    assert ", context 40960, cost model" in capsys.readouterr().out.splitlines()[0]


def test_c_0_of_an_alias_release_says_its_context_may_differ(capsys):
    words = ["--", "llama-server", "-m", "Qwen3-30B-A3B-Instruct-2507-Q4_K_M.gguf", "-ngl", "99", "-c", "0"]
    assert main(["estimate", "--json", *PLATFORM, *words]) == EXIT_OK
    note = next(n for n in json.loads(capsys.readouterr().out)["notes"] if n.startswith("-c 0:"))
    assert "the file is Qwen3-30B-A3B-Instruct-2507, another release of the same shape" in note


def test_c_0_of_a_model_whose_context_is_unknown_says_what_was_assumed(tmp_path, capsys):
    config = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "num_hidden_layers": 4,
              "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "vocab_size": 1000,
              "intermediate_size": 512, "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    words = ["--", "llama-server", "-m", "m.gguf", "-ngl", "99", "-c", "0"]
    assert main(["estimate", "--json", "--model", str(path), *PLATFORM, *words]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    note = next(n for n in doc["notes"] if n.startswith("-c 0:"))
    assert note.endswith("priced at the default context instead (give -c N)")
    assert "assumed context: 8192 tokens (KV cache reserved for it)" in doc["notes"]


@pytest.mark.parametrize("value, expected", [(131072, 131072), (None, None), ("x", None), (True, None)])
def test_config_json_context(tmp_path, value, expected):
    from engine.models.hf_config import model_from_hf_config

    config = {"model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2,
              "num_key_value_heads": 1, "head_dim": 64, "num_experts": 4, "num_experts_per_tok": 2,
              "moe_intermediate_size": 64, "vocab_size": 100}
    if value is not None:
        config["max_position_embeddings"] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert model_from_hf_config(path).context_length == expected


def test_a_gguf_says_its_trained_context(tmp_path):
    pytest.importorskip("gguf")
    from cope_tui.sources.gguf_model import model_from_gguf
    from tests.tiny_gguf import CONTEXT, random_weights, write_gguf

    path = write_gguf(tmp_path / "tiny.gguf", random_weights())
    assert model_from_gguf(path).context_length == CONTEXT
