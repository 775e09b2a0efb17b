"""-nkvo / --no-kv-offload: llama.cpp keeps the KV cache in host memory and runs attention
there; the fit check counts it in RAM, not VRAM, and its KV reads are priced on the CPU."""

from __future__ import annotations

import shlex

import pytest

from cope_tui.options import PlanChoices
from cope_tui.service.advice import estimate_command, plan
from engine.llamacpp.llama_args import parse_llama_command

BIG_GPU = PlanChoices(tokens=40, cpu="ryzen-9-7950x", gpu="rtx-3090")
M = "-m Qwen3-30B-A3B-Q4_K_M.gguf -ngl 99"


def priced(line: str):  # type: ignore[no-untyped-def]
    return estimate_command(plan(BIG_GPU), parse_llama_command(shlex.split(line)))


@pytest.mark.parametrize(("line", "off"), [
    ("llama-server -nkvo", True), ("llama-server --no-kv-offload -t 4", True), ("llama-server --no_kv_offload", True),
    ("llama-server -nkvo --kv-offload", False), ("llama-server -kvo -nkvo", True), ("llama-server", False),
    ("llama-bench -nkvo 1", True), ("llama-bench -nkvo 0", False), ("llama-bench --no-kv-offload 1,0", True),
])
def test_the_flag_in_every_spelling(line, off):
    cmd = parse_llama_command(shlex.split(line))
    assert cmd.no_kv_offload is off and not [u for u in cmd.unknown if "kv" in u]


def test_the_kv_cache_moves_from_vram_to_host_memory():
    on = priced(f"llama-server {M} -c 32768 -t 16")
    off = priced(f"llama-server {M} -c 32768 -t 16 -nkvo")
    model, request = off.request.model, off.request
    kv = model.kv_cache_bytes(32768) * request.kv_bytes_per_element / 2
    assert on.yours.memory.vram_bytes - off.yours.memory.vram_bytes == pytest.approx(kv, abs=2)
    assert off.yours.memory.host_bytes - on.yours.memory.host_bytes == pytest.approx(kv, abs=2)
    assert any(n.startswith("-nkvo: the KV cache is in host memory") for n in off.notes)


def test_a_context_whose_kv_cache_overflows_vram_runs_with_nkvo_and_its_attention_is_priced_on_the_cpu():
    on = priced(f"llama-server {M} -c 131072 -t 16")
    off = priced(f"llama-server {M} -c 131072 -t 16 -nkvo")
    assert on.yours.verdict == "would_not_run" and off.yours.runs
    cost = off.yours.cost
    assert cost.cpu_blocks_s > 0 and cost.cpu_experts_s == 0 and cost.transitions == 2 * 48
    fits = priced(f"llama-server {M} -c 32768 -t 16")
    slower = priced(f"llama-server {M} -c 32768 -t 16 -nkvo")
    assert slower.yours.tpot_s > fits.yours.tpot_s and slower.yours.cost.gpu_blocks_s < fits.yours.cost.gpu_blocks_s


def test_the_printed_command_keeps_nkvo_and_says_its_figure_does_not_include_it():
    est = priced(f"llama-server {M} -c 65536 -t 16 --n-cpu-moe 30 -nkvo")
    assert est.export.argv[-1] == "-nkvo"
    assert any(n.startswith("your -nkvo is kept: the candidates were priced with the KV cache in VRAM")
               for n in est.export.notes)
