"""`cope estimate --gpu none`: the command priced on the CPU alone (as `cope advise --gpu
none` prices its own), with nothing to rank beside it; a command that names a GPU is one
clear line."""

from __future__ import annotations

import json

import pytest

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main

CPU = ["--gpu", "none", "--cpu", "ryzen-9-7950x", "--tokens", "40"]
M = ["-m", "Qwen3-30B-A3B-Q4_K_M.gguf"]


def test_the_command_is_priced_on_the_cpu_as_advise_prices_its_own(capsys):
    assert main(["advise", "--json", *CPU, "--model", "qwen3-30b-a3b", "--threads", "16"]) == EXIT_OK
    advised = json.loads(capsys.readouterr().out)["recommendation"]["run_now"]
    assert main(["estimate", "--json", *CPU, "--", "llama-server", *M, "-ngl", "0", "-t", "16"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    yours = doc["yours"]
    assert yours["verdict"] == "priced" and yours["vram_used_bytes"] == 0 and doc["command"]["maps_to"] == "cpu only"
    assert yours["tpot_s"] == pytest.approx(advised["tpot_s"], rel=1e-12)
    assert doc["best"] is None and doc["export"] is None and doc["best_is"] is None
    assert doc["no_ranking"].startswith("--gpu none: no GPU, so there is no GPU/CPU split to rank against")
    assert yours["rank"] is None and yours["fit"] is None


def test_offloading_flags_offload_nothing_without_a_gpu(capsys):
    assert main(["estimate", *CPU, "--", "llama-server", *M, "-ngl", "99", "-c", "4096"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "Your command:  everything on the CPU (no layer offloaded)" in out
    assert "COPE's best:   none at these settings: --gpu none: no GPU" in out
    assert "  - -ngl 99 offloads nothing without a GPU: llama.cpp runs every layer on the CPU" in out
    assert "SYNTHETIC" not in out  # routing does not move a CPU-only price


@pytest.mark.parametrize("flag", [["--vram-budget", "4"], ["--fidelity", "combined"]])
def test_what_needs_a_gpu_is_refused_in_one_line(capsys, flag):
    assert main(["estimate", *CPU, *flag, "--", "llama-server", *M, "-ngl", "0"]) == EXIT_INPUT
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"cope: error: {flag[0]} {flag[1]}: --gpu none prices without a GPU")


def test_a_command_that_names_a_gpu_is_one_line(capsys):
    assert main(["estimate", *CPU, "--", "llama-server", *M, "-ot", r"blk\.1\.=CUDA0"]) == EXIT_INPUT
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (r"cope: error: --gpu none: the command puts tensors on a GPU (-ot blk\.1\.=CUDA0), which needs one; "
                   "drop --gpu none (or give --gpu PRESET) to price it")
