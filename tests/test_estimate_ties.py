"""Ranks and "faster than" in `cope estimate` ignore float noise: two pricing paths of one
placement agree to ~1e-16 s, and a tie ranks as equal; COPE's best is an improvement only
when it is faster."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

from cope_tui.cli import EXIT_OK, main
from cope_tui.options import PlanChoices
from cope_tui.service.advice import estimate_command, plan
from cope_tui.text_report import render_command_estimate
from engine.cost.estimate import compare, faster
from engine.llamacpp.llama_args import parse_llama_command

PLATFORM = ["--tokens", "100", "--gpu", "rtx-3090", "--cpu", "ryzen-9-7950x"]


def test_float_noise_is_no_speed_difference():
    a = 0.004491
    assert not faster(a, a + 1e-18) and not faster(a + 1e-18, a) and compare(a, a + 1e-18) == "as_fast"
    assert faster(a, a * 1.001) and compare(a * 1.001, a) == "slower" and compare(a, a * 1.001) == "faster"


def _estimate(args: list[str]) -> dict:
    return json.loads(_run(["--json", *args]))


def _run(args: list[str]) -> str:
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["estimate", *args]) == EXIT_OK
    return buf.getvalue()


def test_a_command_as_fast_as_the_best_ranks_first_and_is_not_sold_an_improvement():
    words = ["--", "llama-server", "-m", "OLMoE-1B-7B-0125-Instruct-Q4_K_M.gguf", "-ngl", "99"]
    doc = _estimate([*PLATFORM, *words])
    assert doc["yours"]["rank"] == 1 and "all-gpu" in doc["yours"]["tied_with"]
    assert doc["best"]["id"] in doc["yours"]["tied_with"] and doc["best_is"] == "as_fast"
    out = _run([*PLATFORM, *words])
    assert f"(rank 1 of {doc['yours']['of']}, as fast as " in out
    assert "(as fast as yours: yours is already the fastest)" in out and "1.00x yours" not in out


def test_a_command_identical_to_all_cpu_ranks_with_it_not_below_every_candidate():
    words = ["--", "llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99", "--cpu-moe"]
    doc = _estimate([*PLATFORM, *words])
    yours = doc["yours"]
    assert yours["tied_with"] == ["all-cpu"] and yours["rank"] <= yours["of"] and doc["best_is"] == "faster"
    out = _run([*PLATFORM, *words])
    assert f"(rank {yours['rank']} of {yours['of']}, as fast as all-cpu)" in out and "slower than all" not in out


def test_a_best_slower_than_yours_says_yours_is_faster():
    choices = PlanChoices(tokens=40, cpu="desktop-ddr5", gpu="rtx-4060-ti-16gb", threads=8)
    est = estimate_command(plan(choices), parse_llama_command(shlex.split("llama-server -m q.gguf -ngl 99 "
                                                                           "--n-cpu-moe 30 -t 8")))
    slower = replace(est, best=replace(est.best, tpot_s=est.yours.tpot_s * 1.03), nearest_runnable=None)
    assert slower.best_is == "slower"
    assert "(0.97x yours: yours is already faster than every candidate)" in render_command_estimate(slower)
