"""The command's -ub/-b compute buffer in cope estimate's VRAM: llama.cpp allocates it when it
creates the context, so it counts for decode too, and COPE's best leaves room for it."""

from __future__ import annotations

import shlex

import pytest

from cope_tui.options import PlanChoices
from cope_tui.service.advice import estimate_command, plan
from engine.cost.prefill_cost import compute_buffer_bytes, extra_vram_bytes
from engine.llamacpp.llama_args import parse_llama_command

FAST = PlanChoices(tokens=40, cpu="ryzen-9-7950x", gpu="rtx-4060-ti-16gb", threads=16)
BASE = "llama-server -m Qwen3-30B-A3B-Q4_K_M.gguf -ngl 99 -c 8192 -t 16"


def _estimate(line: str):  # type: ignore[no-untyped-def]
    return estimate_command(plan(FAST), parse_llama_command(shlex.split(line)))


def test_the_buffer_beyond_the_default_micro_batch_is_added_to_the_commands_vram():
    plain = _estimate(f"{BASE} --n-cpu-moe 30")
    model = plain.request.model
    assert extra_vram_bytes(model, 512) == 0 < extra_vram_bytes(model, 2048) < extra_vram_bytes(model, 4096)
    assert compute_buffer_bytes(model, 4096) == pytest.approx(8 * compute_buffer_bytes(model, 512))
    for flags, ubatch in (("-ub 4096 -b 4096", 4096), ("-ub 4096", 2048), ("-b 1024", 512), ("-ub 256", 512)):
        est = _estimate(f"{BASE} --n-cpu-moe 30 {flags}")
        added = est.yours.vram_used_bytes - plain.yours.vram_used_bytes
        assert added == pytest.approx(extra_vram_bytes(model, ubatch), abs=1), flags
        assert est.yours.tpot_s == pytest.approx(plain.yours.tpot_s, rel=1e-12)  # decode reads the same bytes


def test_a_micro_batch_whose_buffer_does_not_fit_would_not_run_and_cope_s_command_leaves_room_for_it():
    fits = _estimate(f"{BASE} --n-cpu-moe 12")
    assert fits.yours.runs
    big = _estimate(f"{BASE} --n-cpu-moe 12 -ub 4096 -b 4096")
    assert not big.yours.runs and big.yours.refusal.startswith("would not run: it needs")
    assert any("less the -ub compute buffer" in note for note in big.notes)
    command = shlex.join(big.export.argv)  # COPE's command keeps -ub 4096 -b 4096, and runs
    again = _estimate(command)
    assert "-ub 4096" in command and again.yours.runs
    claimed = big.export.nearest_tpot_s if big.export.exported_id != big.export.candidate_id else \
        big.export.candidate_tpot_s
    assert again.yours.tpot_s == pytest.approx(claimed, rel=1e-9)
