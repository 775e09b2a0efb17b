"""`cope estimate` keeps the runtime and backend the pasted command is written for (issue 45
item 4): a Vulkan build's `-dev Vulkan0` plans that backend and stays in COPE's command; an
ik_llama.cpp command (-fmoe, -rtr) gets COPE's command for ik_llama.cpp, without stock-only flags."""

from __future__ import annotations


import pytest

from engine.advice.command_estimate import command_runtime
from engine.llamacpp.llama_args import parse_llama_command
from engine.runtimes.llamacpp import IK
from engine.runtimes import STOCK_NAME


@pytest.fixture
def estimate(cope_json):
    return lambda *args: cope_json("estimate", "--json", *args)


def test_ik_only_options_say_the_command_is_ik_llama_cpps():
    assert command_runtime(parse_llama_command(["llama-server", "-m", "m.gguf", "-fmoe", "-rtr"])) == IK.info.name
    assert command_runtime(parse_llama_command(["llama-server", "-m", "m.gguf", "--n-cpu-moe", "3"])) == STOCK_NAME


def test_an_option_stock_llama_cpp_renamed_says_an_older_stock_build():
    """-mmp 0 and --no-mmap went from stock llama.cpp on 2026-09-09 (#28334) and ik_llama.cpp still
    takes them: a command that carries one was run with an older stock build, not with ik."""
    bench = ["llama-bench", "-m", "m.gguf", "-ngl", "99", "-ncmoe", "30", "-t", "10", "-mmp", "0"]
    assert command_runtime(parse_llama_command(bench)) == STOCK_NAME
    assert command_runtime(parse_llama_command(["llama-server", "-m", "m.gguf", "--no-mmap"])) == STOCK_NAME
    assert command_runtime(parse_llama_command([*bench, "-fmoe", "1"])) == IK.info.name  # an ik-only option still says ik


def test_an_older_stock_command_gets_a_stock_command_back(estimate):
    doc = estimate("--gpu", "rtx-4070", "--cpu", "7950x", "--ram-gib", "64", "--", "llama-bench", "-m",
                   "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99", "-ncmoe", "30", "-t", "10", "-mmp", "0")
    export = doc["export"]
    assert export["runtime"] == STOCK_NAME
    argv = export["argv"]
    assert argv[argv.index("-lm") + 1] == "none"  # the copy kept, spelled for the current build


def test_an_ik_command_gets_an_ik_command_back(estimate):
    doc = estimate("--gpu", "rtx-4090", "--", "llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99",
                   "--n-cpu-moe", "30", "-fmoe", "-rtr", "-c", "8192")
    export = doc["export"]
    assert export["runtime"] == IK.info.name
    argv = export["argv"]
    assert "-fmoe" in argv and "-rtr" in argv  # the user's own flags kept
    assert "--fit" not in argv and "-lm" not in argv  # stock-only spellings left out


def test_a_vulkan_command_is_planned_and_answered_on_vulkan(estimate):
    doc = estimate("--gpu", "rx-7900-xtx", "--", "llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99",
                   "-dev", "Vulkan0", "--n-cpu-moe", "10", "-c", "8192")
    assert doc["yours"]["verdict"] == "priced"  # not refused as a device the plan lacks
    argv = doc["export"]["argv"]
    assert argv[argv.index("-dev") + 1] == "Vulkan0"
    assert any("Vulkan backend" in note and "not measured" in note for note in doc["notes"])
