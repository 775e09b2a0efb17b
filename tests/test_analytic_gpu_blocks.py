"""A block's fixed GPU cost follows its kernels (architecture) and whether the runtime's build
replays decode as CUDA graphs; the KV cache's reads count their device's factor."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.published import build_date, fused_moe  # noqa: E402
from engine.cost.analytic_cost import (REFERENCE_BLOCK_KERNELS, AnalyticAssumptions, AnalyticCostModel,  # noqa: E402
                                  block_kernels, uses_cuda_graphs)
from engine.models.catalog import get_model  # noqa: E402
from engine.hardware.presets import platform_from  # noqa: E402
from engine.models.quant import get_quantization  # noqa: E402


def test_stock_llama_cpp_and_the_fork_always_replay_graphs():
    for runtime in ("llama.cpp", "fork"):
        assert uses_cuda_graphs(runtime)
        assert uses_cuda_graphs(runtime, build_date="2025-03-01", fused_moe=False)


def test_ik_llama_cpp_graphs_by_build_and_fmoe():
    # before PR 689 (2025-08-15): never, whatever the flags
    assert not uses_cuda_graphs("ik_llama.cpp", build_date="2025-07-13", fused_moe=True)
    assert not uses_cuda_graphs("ik_llama.cpp", build_date="2025-07-13", fused_moe=True, gpu_experts=False)
    # from then on: with -fmoe, or with no expert on the GPU
    assert uses_cuda_graphs("ik_llama.cpp", build_date="2025-09-04", fused_moe=True)
    assert not uses_cuda_graphs("ik_llama.cpp", build_date="2025-09-04", fused_moe=False)
    assert not uses_cuda_graphs("ik_llama.cpp", build_date="2025-09-04")  # -fmoe not yet the default
    assert uses_cuda_graphs("ik_llama.cpp", build_date="2025-10-13", gpu_experts=False)
    # -fmoe on by default from PR 863 (2025-10-25); a current build (no date) has it
    assert uses_cuda_graphs("ik_llama.cpp", build_date="2026-02-13")
    assert uses_cuda_graphs("ik_llama.cpp", build_date="2025-11")
    assert uses_cuda_graphs("ik_llama.cpp")
    assert not uses_cuda_graphs("ik_llama.cpp", fused_moe=False)


def test_a_rows_build_date_and_fmoe_come_from_what_it_published():
    assert build_date({"date": "2025-07-18 (later comment)", "runtime": "ik"}) == "2025-07-18"
    assert build_date({"date": "2025-11 (comment in PR thread)", "runtime": "llama.cpp"}) == "2025-11"
    assert build_date({"date": "not stated", "runtime": "ik_llama.cpp build 4192 (1cb7e1bf)"}) == "2026-02-13"
    assert build_date({"date": "not stated", "runtime": "ik_llama.cpp"}) is None
    assert fused_moe({"placement": "-ngl 99 -fa -mla 3 -fmoe --threads 1"}) is True
    assert fused_moe({"placement": "experts on CPU; rtr 1, fmoe 1, mla 1"}) is True
    assert fused_moe({"placement": "-ngl 99 -fmoe 0"}) is False
    assert fused_moe({"placement": "-ngl 99 -fa"}) is None


def test_kernels_follow_the_architecture():
    qwen, gptoss = get_model("qwen3-30b-a3b"), get_model("gpt-oss-20b")
    lite, glm = get_model("deepseek-v2-lite-chat"), get_model("glm-4.7-flash")
    assert block_kernels(qwen, 0) == REFERENCE_BLOCK_KERNELS
    assert block_kernels(gptoss, 0) == REFERENCE_BLOCK_KERNELS - 4  # four experts a token, not eight
    # MLA's attention launches more kernels than GQA's; shared experts add theirs; a dense
    # block (DeepSeek's first) has no router, top-k or per-expert adds
    assert block_kernels(lite, 1) == 13 + 11 + 5 + 5
    assert block_kernels(glm, 1) == 15 + 11 + 3 + 5
    assert block_kernels(lite, 0) == 13 + 6 < block_kernels(lite, 1)


def _model(model_id: str, gpu: str = "rtx-4090", *, graphs: bool = True, tokens: int = 0,
           a: AnalyticAssumptions | None = None) -> AnalyticCostModel:
    model = get_model(model_id)
    platform = platform_from(gpu, "ryzen-9-7950x", None)
    return AnalyticCostModel(model, get_quantization("Q4_K_M"), platform, context_tokens=max(2 * tokens, 4096),
                             attention_tokens=tokens, assumptions=a or AnalyticAssumptions(), cuda_graphs=graphs)


def test_a_blocks_fixed_cost_scales_with_its_kernels_and_graphs():
    a = AnalyticAssumptions()
    qwen, lite = _model("qwen3-30b-a3b"), _model("deepseek-v2-lite-chat")
    assert qwen.gpu_block_fixed_s(5) == pytest.approx(a.gpu_block_overhead_s)
    assert lite.gpu_block_fixed_s(5) == pytest.approx(a.gpu_block_overhead_s * 34 / REFERENCE_BLOCK_KERNELS)
    ungraphed = _model("deepseek-v2-lite-chat", graphs=False)
    assert ungraphed.gpu_block_fixed_s(5) == pytest.approx(
        (a.gpu_block_overhead_s + a.gpu_block_no_graph_s) * 34 / REFERENCE_BLOCK_KERNELS)


def test_the_kv_cache_reads_count_their_devices_factor():
    base = AnalyticAssumptions()
    one = replace(base, gpu_kv_read_factor=1.0, cpu_kv_read_factor=1.0)
    three = replace(base, gpu_kv_read_factor=3.0, cpu_kv_read_factor=2.0)
    m1, m3 = _model("qwen3-30b-a3b", tokens=16384, a=one), _model("qwen3-30b-a3b", tokens=16384, a=three)
    kv = m1.kv_bytes(0)
    assert kv > 0
    assert m3.gpu_block_s(0) - m1.gpu_block_s(0) == pytest.approx(2 * kv / m1.gpu_stream_bytes_per_s)
    assert m3.cpu_block_s(0, 8) - m1.cpu_block_s(0, 8) == pytest.approx(kv / m1.cpu_stream_bytes_per_s(8))
    # at no depth the factor moves nothing
    e1, e3 = _model("qwen3-30b-a3b", tokens=0, a=one), _model("qwen3-30b-a3b", tokens=0, a=three)
    assert e1.gpu_block_s(0) == pytest.approx(e3.gpu_block_s(0))
