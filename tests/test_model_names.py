"""A GGUF file name -> the catalog model and quantization it names (engine.models.model_names).

The names are real published file names (Hugging Face GGUF repos of ggml-org, unsloth,
bartowski, lmstudio-community, TheBloke) and paths people pass to llama.cpp's -m.
"""

from __future__ import annotations

import pytest

from engine.models.model_names import model_from_file_name

KNOWN = [
    ("Qwen3-30B-A3B-Q4_K_M.gguf", "qwen3-30b-a3b", "Q4_K_M"),
    ("/models/Qwen3-30B-A3B-Instruct-2507-Q3_K_M.gguf", "qwen3-30b-a3b", "Q3_K_M"),
    ("Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf", "qwen3-30b-a3b", "Q4_K_M"),  # the same shape, an alias
    ("Qwen3-30B-A3B-128K-Q8_0.gguf", "qwen3-30b-a3b", "Q8_0"),
    ("Qwen_Qwen3-30B-A3B-IQ4_XS.gguf", "qwen3-30b-a3b", "IQ4_XS"),
    ("gpt-oss-120b-mxfp4-00001-of-00003.gguf", "gpt-oss-120b", "MXFP4"),
    ("gpt-oss-20b-mxfp4.gguf", "gpt-oss-20b", "MXFP4"),
    ("gpt-oss-120b-F16.gguf", "gpt-oss-120b", "F16"),
    ("gpt-oss-20b-MXFP4_MOE.gguf", "gpt-oss-20b", "MXFP4"),
    ("unsloth_Qwen3-235B-A22B-Instruct-2507-UD-Q4_K_XL.gguf", "qwen3-235b-a22b", "Q4_K_M"),
    ("Qwen3-235B-A22B-Q6_K-00001-of-00004.gguf", "qwen3-235b-a22b", "Q6_K"),
    ("Qwen3.5-35B-A3B-Q4_K_M.gguf", "qwen3.5-35b-a3b", "Q4_K_M"),
    ("C:\\llm\\lmstudio-community\\Qwen3.6-35B-A3B-GGUF\\Qwen3.6-35B-A3B-Q4_K_M.gguf", "qwen3.6-35b-a3b", "Q4_K_M"),
    ("Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf", "qwen3.6-35b-a3b", "Q4_K_M"),
    ("Qwen3-Next-80B-A3B-Instruct-Q4_K_M.gguf", "qwen3-next-80b-a3b", "Q4_K_M"),
    ("Qwen3-Next-80B-A3B-Thinking-UD-Q4_K_XL.gguf", "qwen3-next-80b-a3b", "Q4_K_M"),
    ("GLM-4.7-Flash-Q4_K_M.gguf", "glm-4.7-flash", "Q4_K_M"),
    ("GLM-4.5-Air-Q4_K_M-00001-of-00002.gguf", "glm-4.5-air", "Q4_K_M"),
    ("zai-org_GLM-4.5-Air-Q8_0-00001-of-00003.gguf", "glm-4.5-air", "Q8_0"),
    ("GLM-4.7-Q8_0-00001-of-00008.gguf", "glm-4.7", "Q8_0"),
    ("GLM-4.6-UD-Q2_K_XL-00001-of-00003.gguf", "glm-4.7", "Q2_K"),
    ("DeepSeek-V3-0324-Q4_K_M-00001-of-00009.gguf", "deepseek-v3", "Q4_K_M"),
    ("DeepSeek-R1-0528-UD-Q2_K_XL-00001-of-00006.gguf", "deepseek-v3", "Q2_K"),
    ("DeepSeek-V2-Lite-Chat.Q2_K.gguf", "deepseek-v2-lite-chat", "Q2_K"),
    ("DeepSeek-V2-Lite-Q4_K_M.gguf", "deepseek-v2-lite-chat", "Q4_K_M"),
    ("DeepSeek-Coder-V2-Lite-Instruct-Q4_K_M.gguf", "deepseek-coder-v2-lite-instruct", "Q4_K_M"),
    ("Llama-4-Scout-17B-16E-Instruct-Q4_K_M-00001-of-00002.gguf", "llama-4-scout-17b-16e", "Q4_K_M"),
    ("Llama-4-Maverick-17B-128E-Instruct-UD-IQ4_XS-00001-of-00005.gguf", "llama-4-maverick-17b-128e", "IQ4_XS"),
    ("meta-llama_Llama-4-Scout-17B-16E-Instruct-IQ4_XS.gguf", "llama-4-scout-17b-16e", "IQ4_XS"),
    ("mixtral-8x7b-instruct-v0.1.Q4_K_M.gguf", "mixtral-8x7b-instruct", "Q4_K_M"),
    ("Mixtral-8x7B-Instruct-v0.1-Q5_K_M.gguf", "mixtral-8x7b-instruct", "Q5_K_M"),
    ("OLMoE-1B-7B-0125-Instruct-Q4_K_M.gguf", "olmoe-1b-7b", "Q4_K_M"),
    ("Qwen1.5-MoE-A2.7B-Chat.Q4_K_M.gguf", "qwen1.5-moe-a2.7b", "Q4_K_M"),
    ("ERNIE-4.5-21B-A3B-PT-Q4_K_M.gguf", "ernie-4.5-21b-a3b", "Q4_K_M"),
    ("Qwen3-30B-A3B-BF16-00001-of-00002.gguf", "qwen3-30b-a3b", "BF16"),
    ("Qwen3-30B-A3B-IQ4_KS.gguf", "qwen3-30b-a3b", None),  # an ik_llama.cpp type
]


@pytest.mark.parametrize(("path", "model_id", "quant"), KNOWN, ids=[k[0] for k in KNOWN])
def test_published_file_names(path, model_id, quant):
    match = model_from_file_name(path)
    assert match is not None
    assert (match.model_id, match.quant) == (model_id, quant)
    if quant is None:
        assert match.quant_tag and match.notes  # the tag is kept and the gap explained


def test_unsloth_dynamic_quants_say_what_they_are():
    match = model_from_file_name("Qwen3.6-35B-A3B-UD-Q4_K_XL.gguf")
    assert match.quant_tag == "UD-Q4_K_XL" and match.quant == "Q4_K_M"
    assert match.notes == ("the file says UD-Q4_K_XL, an Unsloth dynamic quant (its own per-tensor mix, some tensors "
                           "above Q4_K_M's types); priced as Q4_K_M, the nearest llama.cpp mix COPE sizes (give the "
                           "GGUF file for exact sizes)",)


@pytest.mark.parametrize(("tag", "priced_as"), [
    ("Q2_K_L", "Q2_K"), ("Q3_K_L", "Q3_K_M"), ("Q3_K_S", "Q3_K_M"), ("Q4_K_L", "Q4_K_M"), ("IQ4_NL", "Q4_0"),
    ("UD-Q3_K_XL", "Q3_K_M"), ("UD-Q8_K_XL", "Q8_0"), ("UD-IQ3_XXS", "IQ3_XXS"),
])
def test_a_quant_without_a_row_is_priced_as_the_nearest_and_says_so(tag, priced_as):
    match = model_from_file_name(f"DeepSeek-V3-0324-{tag}-00001-of-00005.gguf")
    assert (match.model_id, match.quant, match.quant_tag) == ("deepseek-v3", priced_as, tag)
    assert match.notes[0].startswith(f"the file says {tag}") and f"priced as {priced_as}, the nearest" in match.notes[0]


@pytest.mark.parametrize("tag", ["IQ2_XXS", "UD-IQ2_XXS", "UD-IQ1_S", "Q5_1", "IQ4_KS"])
def test_a_quant_with_no_defensible_neighbour_is_not_recognised(tag):
    match = model_from_file_name(f"Qwen3-30B-A3B-{tag}.gguf")
    assert match.quant is None and match.quant_tag == tag
    assert match.notes[0].startswith(f"the file says {tag}, a quantization COPE does not recognise (it sizes F16, ")


def test_the_folder_names_the_model_when_the_file_does_not():
    match = model_from_file_name("/srv/models/Qwen3-30B-A3B-GGUF/Q4_K_M/model-Q4_K_M.gguf")
    assert match is not None and (match.model_id, match.quant) == ("qwen3-30b-a3b", "Q4_K_M")


@pytest.mark.parametrize("path", [
    "Qwen3-32B-Q4_K_M.gguf",  # a dense model
    "Qwen3-Coder-480B-A35B-Instruct-Q4_K_M.gguf",  # not in the catalog
    "gemma-3-27b-it-Q4_K_M.gguf",
    "model.gguf",
    "",
])
def test_names_outside_the_catalog_match_nothing(path):
    assert model_from_file_name(path) is None


def test_a_file_name_without_a_quantization_still_names_the_model():
    match = model_from_file_name("gpt-oss-20b.gguf")
    assert match is not None and match.model_id == "gpt-oss-20b" and match.quant is None


def test_with_model_given_the_file_names_quantization_still_counts(capsys):
    """`--model` names the model; the -m file (not on this machine) still says its
    quantization, which wins over the model's usual one; --quant wins over both."""
    import json

    from cope_tui.cli import EXIT_OK, main

    base = ["estimate", "--json", "--tokens", "100", "--gpu", "rtx-4090", "--cpu", "ryzen-9-7950x",
            "--model", "qwen3-30b-a3b"]
    command = ["--", "llama-server", "-m", "Qwen3-30B-A3B-Q8_0.gguf", "-ngl", "0", "-t", "16"]  # CPU only: both fit
    assert main([*base, *command]) == EXIT_OK
    out = capsys.readouterr()
    q8 = json.loads(out.out)
    assert "priced as qwen3-30b-a3b at Q8_0 (the file name says Q8_0)" in out.err
    assert main([*base, "--quant", "Q4_K_M", *command]) == EXIT_OK
    q4 = json.loads(capsys.readouterr().out)
    assert q8["yours"]["tpot_s"] > 1.3 * q4["yours"]["tpot_s"]  # 1.8x the expert bytes a token
    assert main([b for b in base if b != "--json"] + command) == EXIT_OK
    assert "COPE estimate: Qwen3-30B-A3B Q8_0," in capsys.readouterr().out
