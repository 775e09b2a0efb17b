"""cope estimate on a command that names its model by the Hub (-hf, -hff) or a URL (-mu)
instead of a -m file: priced as the model and quantization those name, and COPE's command
keeps them in place of a -m of its own."""

from __future__ import annotations

import json

from cope_tui.cli import EXIT_OK, main
from engine.llamacpp.llama_args import parse_llama_command

HW = ["--gpu", "rtx-4090", "--cpu", "ryzen-9-7950x", "--tokens", "40"]


def _estimate(capsys, *words: str) -> dict:  # type: ignore[type-arg]
    assert main(["estimate", "--json", *HW, "--", *words]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


def test_the_hub_flags_name_the_model_as_llama_cpp_reads_them():
    tagged = parse_llama_command(["llama-server", "-hf", "unsloth/Qwen3-30B-A3B-GGUF:Q5_K_M"])
    assert tagged.model_path is None and tagged.model_source == "-hf unsloth/Qwen3-30B-A3B-GGUF:Q5_K_M"
    assert tagged.model_name.endswith("-Q5_K_M.gguf") and tagged.notes == ()
    untagged = parse_llama_command(["llama-server", "-hf", "unsloth/Qwen3-30B-A3B-GGUF"])
    assert untagged.model_name.endswith("-Q4_K_M.gguf")  # llama.cpp's default tag
    assert any("llama.cpp takes Q4_K_M" in n for n in untagged.notes)
    file = parse_llama_command(["llama-server", "-hf", "unsloth/Qwen3-30B-A3B-GGUF", "-hff", "Qwen3-30B-A3B-Q8_0.gguf"])
    assert file.model_name == "unsloth/Qwen3-30B-A3B-GGUF/Qwen3-30B-A3B-Q8_0.gguf"
    url = parse_llama_command(["llama-server", "-mu", "https://example.org/m/Qwen3-30B-A3B-Q6_K.gguf?download=1"])
    assert url.model_name == "Qwen3-30B-A3B-Q6_K.gguf" and url.model_source.startswith("-mu https://")
    assert parse_llama_command(["llama-server", "-m", "x.gguf", "-hf", "a/b"]).model_name is None  # -m wins


def test_a_hub_model_is_priced_as_the_file_it_names_and_the_best_command_keeps_the_hub_flag(capsys):
    hub = _estimate(capsys, "llama-server", "-hf", "unsloth/Qwen3-30B-A3B-GGUF:Q5_K_M", "-ngl", "99", "--cpu-moe")
    file = _estimate(capsys, "llama-server", "-m", "Qwen3-30B-A3B-Q5_K_M.gguf", "-ngl", "99", "--cpu-moe")
    q4 = _estimate(capsys, "llama-server", "-hf", "unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M", "-ngl", "99", "--cpu-moe")
    assert hub["yours"]["tpot_s"] == file["yours"]["tpot_s"]
    assert hub["yours"]["host_bytes"] == file["yours"]["host_bytes"]
    assert q4["yours"]["host_bytes"] < hub["yours"]["host_bytes"]  # the tag is read: Q4_K_M is smaller
    assert hub["command"]["model_source"] == "-hf unsloth/Qwen3-30B-A3B-GGUF:Q5_K_M"
    argv = hub["export"]["argv"]
    assert "-m" not in argv and argv[argv.index("-hf") + 1] == "unsloth/Qwen3-30B-A3B-GGUF:Q5_K_M"
    assert not any(flag.startswith("-hf") for flag in hub["command"]["unknown_flags"])
    assert file["export"]["argv"][file["export"]["argv"].index("-m") + 1] == "Qwen3-30B-A3B-Q5_K_M.gguf"
