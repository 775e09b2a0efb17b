"""Hybrid Intel CPUs priced by the cores llama.cpp's threads land on (engine/hardware/hybrid_cores.py):
ggml splits a batch-1 mat-vec's rows evenly over the threads unless there are at least 4 chunks
of 64 rows a thread, and the barrier after the op waits for the slowest thread."""

from __future__ import annotations

import math

import statistics

import pytest

from engine.core.assets_io import load_asset_json
from engine.cost.analytic_cost import AnalyticAssumptions, AnalyticCostModel
from engine.hardware.cpu_compute import CPU_COMPUTE_ASSET, cpu_peak_flops, hybrid_of
from engine.hardware.cpu_presets import get_cpu_preset
from engine.hardware.hybrid_cores import E_BASE_CLOCK_RATIO, CoreType, HybridCores
from engine.hardware.platform import Platform
from engine.hardware.presets import get_gpu_preset
from engine.models.catalog import get_model
from engine.models.quant import get_quantization

A = AnalyticAssumptions()


def _toy() -> HybridCores:
    # 2 P-cores with 2 hardware threads each, 4 E-cores at a quarter of a P-core
    return HybridCores((CoreType("P-core", 2, 2, 4.0), CoreType("E-core", 4, 1, 1.0)), "a toy")


def test_threads_fill_p_cores_then_e_cores_then_the_p_cores_second_threads():
    cpu = _toy()
    assert cpu.thread_speeds(2) == (1.0, 1.0)
    assert cpu.thread_speeds(4) == (1.0, 1.0, 0.25, 0.25)
    assert cpu.thread_speeds(6) == (1.0, 1.0, 0.25, 0.25, 0.25, 0.25)
    # 7 threads: one P-core runs two at half its pace each
    assert cpu.thread_speeds(7) == (0.5, 0.5, 1.0, 0.25, 0.25, 0.25, 0.25)
    assert cpu.thread_speeds(8) == (0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25)


def test_an_even_split_runs_at_the_slowest_thread_and_handed_out_chunks_at_the_sum():
    cpu = _toy()
    # 768 rows = 12 chunks of 64: fewer than 4 x 4 threads, so 4 equal slices; the E-cores set the pace
    assert cpu.p_core_equivalents(4, 768) == pytest.approx(4 * 0.25)
    assert cpu.p_core_equivalents(2, 768) == pytest.approx(2.0)  # 12 >= 8 chunks, both P-cores
    # 1024 rows = 16 chunks = 4 x 4 threads: handed out, so each thread works at its own pace
    assert cpu.p_core_equivalents(4, 1024) == pytest.approx(1 + 1 + 0.25 + 0.25)
    # 6 threads on 768 rows: 6 x 0.25 = 1.5 P-cores, slower than the 2 P-cores alone
    assert cpu.p_core_equivalents(6, 768) < cpu.p_core_equivalents(2, 768)


def test_the_presets_carry_their_core_types_with_sources():
    table = load_asset_json(CPU_COMPUTE_ASSET)
    h = hybrid_of(get_cpu_preset("core-ultra-7-155h"))
    assert [(t.name, t.cores, t.threads_per_core) for t in h.types] == [
        ("P-core", 6, 2), ("E-core", 8, 1), ("low-power E-core", 2, 1)]
    assert "6 Performance-cores, 8 Efficient-cores, 2 Low Power Efficient-cores" in h.source
    # 155H's E-core base clock is not recorded: the presets' median ratio, said so
    assert h.types[1].macs_per_s == pytest.approx(32 * 1.4e9 * E_BASE_CLOCK_RATIO)
    assert "0.743" in h.assumed
    ratios = [e["efficient_base_clock_hz"] / e["base_clock_hz"] for e in table["cpus"].values()
              if "efficient_base_clock_hz" in e]
    assert len(ratios) == 27 and round(statistics.median(ratios), 3) == E_BASE_CLOCK_RATIO
    # the 12900K's E-core clock is ARK's (2.4 GHz against the P-cores' 3.2)
    k = hybrid_of(get_cpu_preset("core-i9-12900k"))
    assert k.types[1].macs_per_s / k.types[0].macs_per_s == pytest.approx(32 * 2.4 / (64 * 3.2))
    assert k.assumed == ""
    # a CPU with one kind of core is not hybrid
    assert hybrid_of(get_cpu_preset("ryzen-9-7950x")) is None
    assert hybrid_of(get_cpu_preset("core-i5-12400")) is None  # 6 P-cores and no E-cores


def _analytic(cpu_name: str) -> AnalyticCostModel:
    model = get_model("qwen3-30b-a3b")  # experts: FFN width 768 (gate, up), hidden 2048 (down)
    assert (model.expert_ffn_size, model.hidden_size) == (768, 2048)
    platform = Platform(gpu=get_gpu_preset("rtx-4090"), cpu=get_cpu_preset(cpu_name))
    return AnalyticCostModel(model, get_quantization("Q4_K_M"), platform, context_tokens=8192)


def test_a_12900k_is_priced_by_hand_worked_figures():
    m = _analytic("core-i9-12900k")
    p_thread = A.cpu_thread_bytes_per_mac * 64 * 3.2e9  # one P-core thread: 8.94 GB/s at the fitted constants
    cap = 76.8e9 * A.cpu_bandwidth_efficiency  # DDR5-4800 x 2: 50.54 GB/s
    e = 32 * 2.4 / (64 * 3.2)  # an E-core: 0.375 of a P-core
    # -t 8: the 8 P-cores (66 GB/s of pace) saturate the memory
    assert m.cpu_stream_bytes_per_s(8) == pytest.approx(cap)
    # -t 12 (8 P + 4 E): 12 and 32 chunks are fewer than 48, so even slices at the E-cores' pace
    assert m.cpu_stream_bytes_per_s(12) == pytest.approx(12 * e * p_thread)
    # -t 16 (8 P + 8 E): 16 x 0.375 = 6 P-cores' worth, at most what the memory gives -t 8
    assert m.cpu_stream_bytes_per_s(16) == pytest.approx(min(16 * e * p_thread, cap))
    assert m.cpu_stream_bytes_per_s(12) < m.cpu_stream_bytes_per_s(16) <= m.cpu_stream_bytes_per_s(8)
    # -t 4: 12 chunks < 16, but all on P-cores: 4 P-cores' worth
    assert m.cpu_stream_bytes_per_s(4) == pytest.approx(4 * p_thread)


def test_a_core_ultra_155h_gains_nothing_past_its_p_cores():
    m = _analytic("core-ultra-7-155h")
    p_thread = A.cpu_thread_bytes_per_mac * 64 * 1.4e9
    e = 0.5 * E_BASE_CLOCK_RATIO
    assert m.cpu_stream_bytes_per_s(6) == pytest.approx(6 * p_thread)
    assert m.cpu_stream_bytes_per_s(16) == pytest.approx(16 * e * p_thread)  # 5.94 P-cores' worth
    # what was 2.6x (-t 16 priced as 16 P-cores) is now no faster; -t 8 is slower (2 E-cores set the pace)
    assert m.cpu_stream_bytes_per_s(16) <= m.cpu_stream_bytes_per_s(6)
    # -t 8 (6 P + 2 E): gate and up (12 chunks < 32) in even slices at the E-cores' pace; down
    # (32 chunks = 4 x 8) handed out, 6 + 2 x 0.37; the expert's bytes a third each
    even, handed = 8 * e * p_thread, (6 + 2 * e) * p_thread
    assert m.cpu_stream_bytes_per_s(8) == pytest.approx(1 / ((2 / 3) / even + (1 / 3) / handed))
    assert m.cpu_stream_bytes_per_s(8) < m.cpu_stream_bytes_per_s(6)


def test_a_wide_model_hands_out_chunks_so_e_cores_add_their_pace():
    # DeepSeek-V3's hidden size 7168 = 112 chunks: at -t 24 on a 13900K (8 P + 16 E) at least 4 a
    # thread, so the down projection is work-stealing; its FFN width 2048 (32 chunks) is not
    h = hybrid_of(get_cpu_preset("core-i9-13900k"))
    e = 32 * 2.2 / (64 * 3.0)
    assert h.p_core_equivalents(24, 7168) == pytest.approx(8 + 16 * e)
    assert h.p_core_equivalents(24, 2048) == pytest.approx(24 * e)


def test_prompt_matmuls_count_each_thread_at_its_core():
    cpu = get_cpu_preset("core-i9-12900k")
    one = cpu_peak_flops(cpu, 1)
    assert cpu_peak_flops(cpu, 16) == pytest.approx(one * (8 + 8 * 0.375))
    # the 7950X (16 alike cores) is unchanged: one core's peak a thread, at most one a core
    amd = get_cpu_preset("ryzen-9-7950x")
    assert cpu_peak_flops(amd, 32) == pytest.approx(16 * cpu_peak_flops(amd, 1))


def test_cope_estimate_orders_the_155h_threads_as_users_report(run_cope):  # type: ignore[no-untyped-def]
    def tok_s(threads: int) -> float:
        code, out, err = run_cope("estimate", "--gpu", "rtx-4060-ti-16gb", "--cpu", "core-ultra-7-155h", "--ram-gib",
                                  "32", "--", "llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99",
                                  "--cpu-moe", "-t", str(threads))
        assert code == 0, err
        line = next(line for line in out.splitlines() if "ms/token" in line)
        assert "hybrid" in out  # the note says how its threads are priced
        return float(line.split("ms/token")[1].split("tok/s")[0])

    six, eight, sixteen = tok_s(6), tok_s(8), tok_s(16)
    assert eight < six and sixteen <= six * 1.01  # was 2.6x at -t 16


def test_advise_plans_a_hybrid_cpu_at_its_fastest_thread_count(cope_json):  # type: ignore[no-untyped-def]
    # no --threads: not the 16 cores of a 155H (E-cores would set every thread's pace) but its 6 P-cores
    doc = cope_json("advise", "--json", "--gpu", "rtx-4060-ti-16gb", "--cpu", "core-ultra-7-155h", "--ram-gib", "32",
                    "--tokens", "200")
    argv = doc["recommendation"]["run_now"]["argv"]
    assert argv[argv.index("-t") + 1] == "6"
    # a 12900K's memory saturates at fewer P-cores than its 8 (6 x 8.94 GB/s > 50.54 GB/s at the fitted
    # constants): the fewest threads that reach it
    doc = cope_json("advise", "--json", "--gpu", "rtx-4060-ti-16gb", "--cpu", "core-i9-12900k", "--ram-gib", "32",
                    "--tokens", "200")
    argv = doc["recommendation"]["run_now"]["argv"]
    p_thread, cap = A.cpu_thread_bytes_per_mac * 64 * 3.2e9, 76.8e9 * A.cpu_bandwidth_efficiency
    assert int(argv[argv.index("-t") + 1]) == math.ceil(cap / p_thread) < 8
