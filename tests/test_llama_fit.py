"""A command without -ngl: llama-server and llama-cli fit it with --fit (on by default,
common/fit.cpp), which COPE follows where it can (the experts of the last layers moved to
the CPU) and otherwise says it did not price; llama-bench has no --fit."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from cope_tui.cli import EXIT_OK, main
from cope_tui.options import PlanChoices
from cope_tui.service.advice import estimate_command, plan
from engine.llamacpp.llama_args import parse_llama_command
from engine.llamacpp.llama_fit import FIT_TARGET_BYTES
from engine.llamacpp.llama_placement import placement_memory, placement_of

SMALL_GPU = PlanChoices(tokens=40, cpu="ryzen-9-7950x", gpu="rtx-4060-ti-16gb")
M = "-m Qwen3-30B-A3B-Q4_K_M.gguf"


def priced(line: str, choices: PlanChoices = SMALL_GPU):  # type: ignore[no-untyped-def]
    return estimate_command(plan(choices), parse_llama_command(shlex.split(line)))


def test_fit_moves_the_last_layers_experts_to_the_cpu_until_the_rest_fits_its_margin():
    est = priced(f"llama-server {M} -c 8192")
    yours, fit = est.yours, est.yours.fit
    assert yours.runs and yours.verdict == "priced" and fit.moved and fit.unpriced is None
    assert est.maps_to == "partition-last" and "as llama.cpp's --fit places it" in yours.detail
    n_cpu = len(est.cpu_moe_blocks)
    assert 0 < n_cpu < 48 and est.cpu_moe_blocks == tuple(range(48 - n_cpu, 48))
    note = next(n for n in est.notes if n.startswith("no -ngl:"))
    assert f"the experts of the last {n_cpu} of 48 MoE layers on the CPU (blocks {48 - n_cpu}..47)" in note
    assert "common/fit.cpp, common_params_fit_impl" in note and "part of one more layer" in note
    # The same layer set written out is priced the same; one layer fewer on the CPU would not fit the margin.
    blocks = "|".join(str(b) for b in est.cpu_moe_blocks)
    same = priced(rf"llama-server {M} -c 8192 -ngl 99 -ot 'blk\.({blocks})\.ffn_.*_exps=CPU'")
    assert same.yours.tpot_s == pytest.approx(yours.tpot_s, rel=1e-12)
    target = 16 * 2**30 - FIT_TARGET_BYTES
    assert yours.memory.vram_bytes <= target
    one_more = placement_of(est.command, est.request.model)
    share = np.ones(48)
    share[: 48 - n_cpu + 1] = 0
    one_more = type(one_more)(one_more.gpu_blocks, share, one_more.output_on_gpu)
    assert placement_memory(est.request, one_more, mapped=True).vram_bytes > target


def test_fit_changes_nothing_when_everything_fits():
    est = priced("llama-server -m OLMoE-1B-7B-0125-Instruct-Q4_K_M.gguf",
                 PlanChoices(tokens=40, cpu="ryzen-9-7950x", gpu="rtx-3090", model="olmoe-1b-7b"))
    assert est.yours.runs and not est.yours.fit.moved and est.maps_to == "all-gpu"
    assert any("leaves every block offloaded" in n for n in est.notes)


def test_without_c_the_note_says_fit_lowers_the_context_first():
    est = priced(f"llama-server {M}")
    assert any("without -c, --fit first lowers the context (to no less than 4096 tokens), priced here at 8192" in n
               for n in est.notes)


@pytest.mark.parametrize("line, note", [
    (f"llama-server {M} -c 8192 --fit off", "no -ngl with --fit off: every block offloaded"),
    (f"llama-server {M} -c 8192 --n-cpu-moe 2", "tensor_buft_overrides already set by user"),
    (f"llama-bench {M}", "llama-bench offloads every layer by default"),
])
def test_without_fit_every_block_is_offloaded_and_may_not_run(line, note):
    est = priced(line)
    assert est.yours.fit is None and est.yours.verdict == "would_not_run"
    assert est.yours.refusal.startswith("would not run: it needs ")
    assert any(note in n for n in est.notes) and not any("--fit (common/fit.cpp" in n for n in est.notes)
    if "llama-bench" in line:
        assert not any("--fit on" in n or "fits layers automatically" in n for n in est.notes)


def test_fit_that_would_offload_fewer_blocks_is_not_priced_and_not_called_would_not_run(capsys):
    flags = ["--tokens", "20", "--gpu", "gtx-1650-super", "--cpu", "ryzen-9-7950x"]
    words = ["--", "llama-server", "-m", "Qwen3-235B-A22B-Q4_K_M.gguf", "-c", "4096"]
    assert main(["estimate", "--json", *flags, *words]) == EXIT_OK
    yours = json.loads(capsys.readouterr().out)["yours"]
    assert yours["runs"] is False and yours["verdict"] == "not_priced" and yours["tpot_s"] is None
    assert yours["fit"] == {"moved": True, "priced": False, "note": yours["fit"]["note"]}
    assert yours["refusal"].startswith("not priced: with every block offloaded it needs ")
    assert "llama.cpp's --fit would offload fewer blocks, which COPE does not model" in yours["refusal"]
    assert main(["estimate", *flags, *words]) == EXIT_OK
    out = capsys.readouterr().out
    assert "Your command:  not priced: " in out and "would not run" not in out.split("COPE's best")[0]
