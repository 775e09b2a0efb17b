"""COPE's command beside llama.cpp's own placement (engine/advice/llama_default.py): the
command without placement flags, placed by --fit, priced as `cope estimate` prices it."""

from __future__ import annotations


import pytest

from engine.advice.llama_default import without_placement
from engine.core.errors import CopeInputError
from engine.llamacpp.llama_args import parse_llama_command


def test_placement_flags_and_their_values_are_taken_out():
    argv = ["llama-server", "-m", "m.gguf", "-ngl", "99", "-fa", "on", "-c", "8192", "-t", "8", "--fit", "off",
            "--n-cpu-moe", "22", "--moe-cache-mib", "900", "--cpu-moe", "-ot", "exps=CPU", "-lm", "none"]
    assert without_placement(argv) == ["llama-server", "-m", "m.gguf", "-fa", "on", "-c", "8192", "-t", "8",
                                       "-lm", "none"]


def test_fit_target_is_read():
    assert parse_llama_command(["llama-server", "-m", "m.gguf", "-fitt", "2048,512"]).fit_target_mib == 2048
    assert parse_llama_command(["llama-server", "-m", "m.gguf"]).fit_target_mib is None
    with pytest.raises(CopeInputError, match="-fitt"):
        parse_llama_command(["llama-server", "-m", "m.gguf", "-fitt", "-3"])


def test_a_larger_fit_target_leaves_fewer_experts_on_the_gpu(cope_json):
    base = ["estimate", "--gpu", "rtx-3060-12gb", "--json", "--", "llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf",
            "-c", "8192"]
    loose = cope_json(*base)
    tight = cope_json(*base, "-fitt", "4096")
    assert loose["yours"]["tpot_s"] < tight["yours"]["tpot_s"]
    assert "4096 MiB" in tight["yours"]["fit"]["note"]


def test_advise_shows_llama_cpps_own_placement_beside_its_command(cope_json):
    doc = cope_json("advise", "--gpu", "rtx-3060-12gb", "--json")
    default = doc["llama_cpp_default"]
    assert "-ngl" not in default["argv"] and "--fit" not in default["argv"]
    lead = doc["llama_cpp_cache"]["with_cache"] if doc["llama_cpp_cache"]["cache_wins"] else None
    ours = lead["tpot_s"] if lead else doc["recommendation"]["run_now"]["tpot_s"]
    # the figure is the estimate of that very command, and the ratio is theirs over ours
    again = cope_json("estimate", "--gpu", "rtx-3060-12gb", "--json", "--", *default["argv"])
    assert again["yours"]["tpot_s"] == pytest.approx(default["tpot_s"], rel=1e-9)
    assert default["speedup"] == pytest.approx(default["tpot_s"] / ours, rel=1e-9)
