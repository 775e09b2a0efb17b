"""llama.cpp placements priced per decode token: -ngl, CPU only, -ot per projection, more
than one GPU, commands that would not fit, and the cost model's monotonic properties."""

from __future__ import annotations

import json
from dataclasses import replace
import shlex

import numpy as np
import pytest

from cope_tui.cli import EXIT_OK, main
from cope_tui.options import PlanChoices
from cope_tui.service.advice import estimate_command, plan
from cope_tui.service.request import build_request
from engine.cost.analytic_cost import AnalyticCostModel
from engine.hardware.cpu_presets import get_cpu_preset
from engine.hardware.host_memory import PAGE_CACHE_DISK_BYTES_PER_S, cold_expert_disk_bytes
from engine.hardware.memory import GIB
from engine.llamacpp.llama_args import parse_llama_command
from engine.llamacpp.llama_placement import placement_cost, placement_memory, placement_of
from tests.factories import replay_priced_layer_set

FAST = PlanChoices(tokens=40, cpu="desktop-ddr5", gpu="rtx-4060-ti-16gb", threads=8)


def priced(line: str, choices: PlanChoices = FAST):  # type: ignore[no-untyped-def]
    return estimate_command(plan(choices), parse_llama_command(shlex.split(line)))


def analytic(request) -> AnalyticCostModel:  # type: ignore[no-untyped-def]
    return AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens)


def test_a_whole_layer_set_costs_what_the_ranking_charges_its_partition():
    request = build_request(FAST)
    model = analytic(request)
    for n in (0, 11, 30, 48):
        placement = placement_of(parse_llama_command(["llama-server", "--n-cpu-moe", str(n)]), request.model)
        cost = placement_cost(request, model, placement)
        assert cost.tpot_s == pytest.approx(replay_priced_layer_set(request, model, np.arange(48) < n), rel=1e-9)
    advice = plan(FAST)
    partition = advice.rec.estimate_of("partition-first")
    n_cpu = int(partition.cpu_layers.sum())
    est = priced(f"llama-server -m q.gguf -ngl 99 --n-cpu-moe {n_cpu} -t 8 -c 8192")
    assert est.yours.tpot_s == pytest.approx(partition.tpot_s, rel=1e-9) and est.maps_to == "partition-first"


def test_partial_ngl_keeps_whole_blocks_on_the_cpu_and_costs_more_than_offloading_them():
    est = priced("llama-server -m q.gguf -ngl 20 -t 8 -c 8192")
    placement = placement_of(est.command, est.request.model)
    # the output layer goes first (PR 18148): 19 blocks and the head on the GPU, one hand-over to it
    assert placement.gpu_blocks.sum() == 19 and placement.output_on_gpu
    assert est.yours.runs and est.yours.cost.cpu_blocks_s > 0 and est.yours.cost.transitions == 1
    assert "29 of 48 blocks whole on the CPU (blocks 0..28)" in est.yours.detail
    # The same experts on the CPU with every block offloaded is faster, and uses more VRAM.
    layers = priced("llama-server -m q.gguf -ngl 99 --n-cpu-moe 28 -t 8 -c 8192")
    assert layers.yours.tpot_s < est.yours.tpot_s and layers.yours.vram_used_bytes > est.yours.vram_used_bytes


def test_ngl_0_is_cpu_only_with_no_hand_over():
    est = priced("llama-server -m q.gguf -ngl 0 -t 8 -c 8192")
    cost = est.yours.cost
    assert est.maps_to == "cpu only" and cost.transitions == 0 and cost.sync_s == 0
    assert cost.gpu_blocks_s == cost.gpu_experts_s == 0 and est.yours.vram_used_bytes == 0
    request = est.request
    model = analytic(request)
    by_hand = (sum(model.cpu_block_s(b, 8) for b in range(48)) + 48 * model.cpu_experts_s(8, 8)
               + model.a.token_fixed_s + model.head_s(on_cpu=True, threads=8))
    assert cost.tpot_s == pytest.approx(by_hand, rel=1e-12)
    assert est.yours.tpot_s > priced("llama-server -m q.gguf -ngl 99 --cpu-moe -t 8 -c 8192").yours.tpot_s


def test_a_command_that_overflows_vram_would_not_run_and_says_why(capsys):
    big = PlanChoices(model="qwen3-235b-a22b", tokens=20, cpu="desktop-ddr5", gpu="rtx-4060-ti-16gb", threads=8)
    est = priced("llama-server -m q.gguf -ngl 99 -t 8 -c 8192", big)
    assert not est.yours.runs and est.rank is None
    assert est.yours.refusal.startswith("would not run: it needs ") and "GiB of VRAM" in est.yours.refusal
    assert est.yours.memory.vram_bytes > 100 * GIB
    code = main(["estimate", "--json", "--model", "qwen3-235b-a22b", "--cpu", "desktop-ddr5", "--gpu",
                 "rtx-4060-ti-16gb", "--tokens", "20", "--", "llama-server", "-m", "q.gguf", "-ngl", "99"])
    doc = json.loads(capsys.readouterr().out)
    assert code == EXIT_OK and doc["yours"]["runs"] is False and doc["yours"]["tpot_s"] is None
    assert doc["speedup_of_best"] is None
    assert main(["estimate", "--model", "qwen3-235b-a22b", "--cpu", "desktop-ddr5", "--gpu", "rtx-4060-ti-16gb",
                 "--tokens", "20", "--", "llama-server", "-ngl", "99"]) == EXIT_OK
    assert "Your command would not run: it needs" in capsys.readouterr().out


def test_a_mapped_model_larger_than_ram_is_priced_with_its_disk_reads_and_a_copy_is_refused():
    """Issue 44's case: Qwen3.5-122B-A10B IQ4_XS with every expert on the CPU of a 64 GB box
    (59.6 GiB), published running at 9.3 tok/s. Mapped (llama.cpp's default) it runs: the share
    of the host weights the page cache cannot hold is read from disk whenever a token routes to
    it. As a copy (--no-mmap) it cannot be held and does not run."""
    box = PlanChoices(model="qwen3.5-122b-a10b", quant="IQ4_XS", gpu="rtx-4070", cpu="ryzen-9-7950x", ram_gib=59.6,
                      tokens=20, fidelity="analytic")
    line = "llama-server -m q.gguf -ngl 99 --cpu-moe -c 8192"
    mapped = priced(line, box)
    ram = mapped.yours.memory.ram
    assert mapped.yours.runs and ram.streams and not ram.fits and 0 < ram.disk_share < 0.05
    roomy = priced(line, replace(box, ram_gib=128))
    assert roomy.yours.memory.ram.fits and roomy.yours.cost.page_cache_s == 0
    # the disk reads: what the page cache lacks, taken from the least routed experts of the
    # plan's routing profile; no more than the uniform share of every routed expert's bytes
    request, placement = mapped.request, placement_of(mapped.command, mapped.request.model)
    per_layer = np.asarray(request.model.expert_bytes_per_layer(request.quant), dtype=float)
    cold = cold_expert_disk_bytes(request.profile.popularity(), placement.expert_cpu_share * per_layer,
                                  request.model.top_k, ram.need_bytes - ram.budget_bytes)
    assert mapped.yours.cost.page_cache_s == pytest.approx(cold / PAGE_CACHE_DISK_BYTES_PER_S)
    uniform = ram.disk_share * request.model.top_k * float(per_layer @ placement.expert_cpu_share)
    assert 0 < cold < uniform
    assert mapped.yours.tpot_s == pytest.approx(roomy.yours.tpot_s + mapped.yours.cost.page_cache_s, rel=1e-9)
    assert "read from disk again whenever a token needs it" in mapped.yours.detail
    copy = priced(line + " --no-mmap", box)
    assert not copy.yours.runs and copy.yours.refusal.startswith("would not run: ") and "as a copy" in copy.yours.refusal


def test_a_copy_too_large_for_pinned_memory_runs_from_pageable_memory():
    """The published run of issue 44's case is a copy (llama-bench -mmp 0) on a 64 GB box: 57.8
    GiB is more than the pinned budget (64 GiB less the 2 GiB reserve and 10% headroom, 55.6
    GiB), and llama.cpp's CUDA host buffer then falls back to pageable memory, where it fits the
    62 GiB a mapped file may use: it runs, priced as a copy that fits (no disk reads)."""
    box = PlanChoices(model="qwen3.5-122b-a10b", quant="IQ4_XS", gpu="rtx-4070", cpu="ryzen-9-7950x", ram_gib=64,
                      tokens=20, fidelity="analytic")
    line = "llama-bench -m q.gguf -ngl 99 -ncmoe 48 -mmp 0 -p 0 -n 128"
    copy = priced(line, box)
    ram = copy.yours.memory.ram
    assert copy.yours.runs and not ram.fits and ram.pageable and not ram.streams
    assert ram.budget_bytes == pytest.approx(55.6 * GIB, abs=1) and ram.pageable_budget_bytes == 62 * GIB
    assert ram.budget_bytes < ram.need_bytes <= ram.pageable_budget_bytes and copy.yours.cost.page_cache_s == 0
    assert "falls back to pageable memory" in ram.describe() and ram.to_dict()["pageable_fallback"] is True
    mapped = priced(line.replace(" -mmp 0", ""), box)
    assert mapped.yours.memory.ram.fits and mapped.yours.tpot_s == pytest.approx(copy.yours.tpot_s, rel=1e-9)


def test_a_context_no_candidate_fits_still_prices_the_command_alone(capsys):
    """-c 200000 on a 16 GiB card: the KV cache alone overflows it, so nothing can be
    ranked; the command is still answered, "would not run" with its arithmetic, exit 0."""
    words = ["llama-server", "-m", "q.gguf", "-ngl", "99", "--cpu-moe", "-c", "200000"]
    flags = ["--model", "qwen3-30b-a3b", "--cpu", "desktop-ddr5", "--gpu", "rtx-4060-ti-16gb", "--tokens", "20"]
    assert main(["estimate", "--json", *flags, "--", *words]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["yours"]["runs"] is False and doc["yours"]["refusal"].startswith("would not run: it needs ")
    needed = doc["yours"]["vram_used_bytes"]
    kv = 48 * 2 * 4 * 128 * 2 * 200_000  # blocks x (K, V) x KV heads x head dim x f16 bytes x tokens
    assert kv < needed < kv + 3 * GIB and doc["yours"]["vram_total_bytes"] == 16 * GIB
    assert doc["best"] is None and doc["export"] is None and doc["speedup_of_best"] is None
    assert "cannot hold the non-expert weights, KV cache" in doc["no_ranking"]
    assert main(["estimate", *flags, "--", *words]) == EXIT_OK
    out = capsys.readouterr().out
    assert "Your command would not run: it needs" in out and "COPE's best:   none at these settings: " in out
    assert "Command for COPE's best" not in out


def test_a_second_gpu_on_a_one_gpu_plan_is_refused_not_mispriced():
    # llama.cpp ignores -ts values past its devices: one card priced as without -ts
    assert priced("llama-server -m q.gguf -ts 1,1").yours.tpot_s == priced("llama-server -m q.gguf").yours.tpot_s
    est = priced("llama-server -m q.gguf -sm row")
    assert not est.yours.runs and est.yours.refusal.startswith("not modelled: --split-mode row")
    est = priced(r"llama-server -m q.gguf -ot 'blk\.[0-9]\.=CUDA0' -ot 'blk\.1[0-9]\.=CUDA1'")
    assert est.yours.verdict == "would_not_run" and "'unknown buffer type'" in est.yours.refusal
    assert "the plan's CUDA devices are CUDA0" in est.yours.refusal


def test_one_projection_on_the_cpu_is_a_third_of_the_layer():
    request = build_request(FAST)
    model = analytic(request)
    down = placement_of(parse_llama_command(shlex.split(r"llama-server -ot 'ffn_down_exps=CPU'")), request.model)
    assert np.allclose(down.expert_cpu_share, 1 / 3)
    whole = placement_of(parse_llama_command(["llama-server", "--cpu-moe"]), request.model)
    none = placement_of(parse_llama_command(["llama-server"]), request.model)
    t_down, t_all, t_none = (placement_cost(request, model, p).tpot_s for p in (down, whole, none))
    assert t_none < t_down < t_all


def test_llama_bench_decodes_from_its_depth():
    shallow = priced("llama-bench -m q.gguf -ngl 99 --n-cpu-moe 20 -t 8 -p 0 -n 128")
    deep = priced("llama-bench -m q.gguf -ngl 99 --n-cpu-moe 20 -t 8 -p 0 -n 128 -d 16384")
    assert shallow.request.attention_tokens == 64 and deep.request.attention_tokens == 16384 + 64
    assert shallow.request.context_tokens == 128 and deep.yours.tpot_s > shallow.yours.tpot_s
    q8 = priced("llama-bench -m q.gguf -ngl 99 --n-cpu-moe 20 -t 8 -p 0 -n 128 -d 16384 -ctk q8_0 -ctv q8_0")
    # the RTX 4060 Ti's SMs bound its attention, by elements: a q8_0 cache reads no faster there
    assert q8.request.kv_bytes_per_element == pytest.approx(34 / 32) and q8.yours.tpot_s == pytest.approx(deep.yours.tpot_s)


# --- the cost model's monotonic properties ---------------------------------------------


def test_more_cpu_layers_are_never_faster_more_threads_never_slower_and_threads_saturate():
    request = build_request(FAST)
    model = analytic(request)
    times = []
    for n in range(0, 49, 4):
        placement = placement_of(parse_llama_command(["llama-server", "--n-cpu-moe", str(n)]), request.model)
        times.append(placement_cost(request, model, placement).tpot_s)
    assert all(a <= b for a, b in zip(times, times[1:]))
    per_thread = [model.cpu_expert_s(t) for t in range(1, 65)]
    assert all(a >= b for a, b in zip(per_thread, per_thread[1:]))
    # Saturated: once the threads stream what the memory gives, more threads change nothing.
    limit = model.cpu_bytes_per_s * model.a.cpu_bandwidth_efficiency / model.cpu_thread_bytes_per_s
    past = int(np.ceil(limit)) + 1
    assert model.cpu_expert_s(past) == model.cpu_expert_s(past + 16) < model.cpu_expert_s(1)


def test_a_thread_streams_what_its_core_computes_and_a_second_thread_on_a_core_adds_nothing():
    """Below saturation the CPU lane follows the core's int8 peak (MACs a cycle x clock), and
    counts cores, not hardware threads."""
    from engine.cost.analytic_cost import AnalyticAssumptions
    from engine.hardware.cpu_compute import core_compute

    request = build_request(FAST)
    rates = {}
    for cpu in ("ryzen-9-7950x", "xeon-gold-6138", "threadripper-pro-5965wx"):
        platform = replace(request.platform, cpu=get_cpu_preset(cpu))
        model = AnalyticCostModel(request.model, request.quant, platform, context_tokens=4096)
        rates[cpu] = model.cpu_thread_bytes_per_s
        assert rates[cpu] == pytest.approx(AnalyticAssumptions().cpu_thread_bytes_per_mac
                                           * core_compute(platform.cpu).macs_per_s)
        cores = int(platform.cpu.physical_cores.value)
        assert model.cpu_stream_bytes_per_s(2) == pytest.approx(2 * rates[cpu])  # linear below saturation
        assert model.cpu_stream_bytes_per_s(cores) == model.cpu_stream_bytes_per_s(2 * cores)  # SMT adds nothing
    # Zen 4 at 4.5 GHz with VNNI (64 MACs a cycle) against Skylake-SP at 2.0 GHz without (32).
    assert rates["ryzen-9-7950x"] / rates["xeon-gold-6138"] == pytest.approx(64 * 4.5 / (32 * 2.0))
    assert rates["ryzen-9-7950x"] > rates["threadripper-pro-5965wx"] > rates["xeon-gold-6138"]
    # A machine's own figure (measured or calibrated) stands in for the core's.
    platform = replace(request.platform, cpu=get_cpu_preset("xeon-gold-6138"))
    own = AnalyticCostModel(request.model, request.quant, platform, context_tokens=4096,
                            assumptions=AnalyticAssumptions(cpu_thread_bytes_per_s=3e9))
    assert own.cpu_thread_bytes_per_s == 3e9


def test_placement_memory_counts_what_each_side_holds():
    request = build_request(FAST)
    none = placement_of(parse_llama_command(["llama-server", "-ngl", "0"]), request.model)
    memory = placement_memory(request, none, mapped=True)
    assert memory.vram_bytes == 0 and memory.vram_total_bytes is None
    # Everything on the CPU: the model's weights plus the KV cache.
    model = request.model
    expected = model.non_expert_bytes(request.quant) + model.n_experts_total * model.expert_bytes(request.quant) \
        + model.kv_cache_bytes(request.context_tokens)
    assert memory.host_bytes == pytest.approx(expected, rel=1e-6)
