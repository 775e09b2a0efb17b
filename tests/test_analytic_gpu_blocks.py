"""A block's fixed GPU cost follows its kernels (architecture) and whether the runtime's build
replays decode as CUDA graphs; the KV cache's reads count their device's factor."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.published import build_date, fused_moe, gpu_stretches  # noqa: E402
from bench.published_rows import Row  # noqa: E402
from engine.cost.analytic_cost import (KV_TYPE_BYTES, REFERENCE_BLOCK_KERNELS, AnalyticAssumptions, AnalyticCostModel,  # noqa: E402
                                  block_kernels, gpu_compute_capability, uses_cuda_graphs)
from engine.core.assets_io import load_asset_json  # noqa: E402
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


def test_graphs_need_a_new_enough_gpu():
    # stock llama.cpp: below Ampere (8.0) until PR 25749 (2026-07-16), below Volta (7.0) after
    assert not uses_cuda_graphs("llama.cpp", build_date="2025-10-29", compute_capability=7.5)
    assert uses_cuda_graphs("llama.cpp", build_date="2025-10-29", compute_capability=8.6)
    assert uses_cuda_graphs("llama.cpp", build_date="2026-08-01", compute_capability=7.5)
    assert uses_cuda_graphs("llama.cpp", compute_capability=7.5)  # a current build
    assert not uses_cuda_graphs("llama.cpp", compute_capability=6.1)  # Pascal: never
    # ik_llama.cpp: below Ampere whatever the build, the flags or where the experts are
    assert not uses_cuda_graphs("ik_llama.cpp", compute_capability=7.5)
    assert not uses_cuda_graphs("ik_llama.cpp", build_date="2026-02-13", gpu_experts=False, compute_capability=7.5)
    assert uses_cuda_graphs("ik_llama.cpp", build_date="2026-02-13", compute_capability=8.0)
    # a GPU whose capability is not known is taken as new enough (the rules above decide)
    assert uses_cuda_graphs("ik_llama.cpp", build_date="2026-02-13", compute_capability=None)


def test_stock_builds_kept_one_graph_a_device_until_pr_18934():
    # before 2026-01-19 a token with CPU work between stretches of GPU work ran without graphs
    assert not uses_cuda_graphs("llama.cpp", build_date="2025-04-29", gpu_stretches=15)
    assert uses_cuda_graphs("llama.cpp", build_date="2025-04-29", gpu_stretches=1)
    assert uses_cuda_graphs("llama.cpp", build_date="2026-02-01", gpu_stretches=15)
    assert uses_cuda_graphs("llama.cpp", gpu_stretches=15)  # a current build: a graph a split


def _stretches(command: str, gpu: str | None = "rtx-4080") -> int:
    return gpu_stretches(Row(0, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", gpu, "ryzen-9-7950x", command))


def test_a_commands_stretches_of_gpu_work():
    assert _stretches("llama-bench -m m.gguf -ngl 99 -p 0 -n 128") == 1
    # the FFNs of blocks 34-47 on the CPU: blocks 0-34's GPU work, then 35..47's attention, then the head
    assert _stretches(r"llama-bench -m m.gguf -ngl 99 -ot blk\.3[4-9]\.ffn=CPU;blk\.4[0-9]\.ffn=CPU -p 0 -n 128") == 15
    assert _stretches("llama-bench -m m.gguf -ngl 99 -ot exps=CPU -p 0 -n 128") == 48 + 1
    # -ngl 24 of 48: the last 24 blocks in one stretch, between the CPU's first 24 and its output head
    assert _stretches("llama-bench -m m.gguf -ngl 24 -p 0 -n 128") == 1
    assert _stretches("llama-bench -m m.gguf -ngl 0 -p 0 -n 128", gpu=None) == 0


def test_every_nvidia_preset_has_its_compute_capability():
    presets = load_asset_json("gpus.json")["gpus"]
    table = load_asset_json("gpu_compute.json")["compute_capability"]
    assert {g["id"] for g in presets if g.get("vendor", "NVIDIA") == "NVIDIA"} <= set(table)  # AMD/Intel: no CUDA cc
    by_id = {pid: gpu_compute_capability(platform_from(pid, "ryzen-9-7950x", None).gpu)
             for pid in ("gtx-1650-super", "rtx-3090", "a100-80gb", "rtx-4090", "h100-sxm", "rtx-5090")}
    assert by_id == {"gtx-1650-super": 7.5, "rtx-3090": 8.6, "a100-80gb": 8.0, "rtx-4090": 8.9,
                     "h100-sxm": 9.0, "rtx-5090": 12.0}


def test_by_default_the_model_replays_graphs_as_a_current_build_on_its_gpu(monkeypatch):
    import engine.cost.analytic_cost as analytic

    model, quant = get_model("qwen3-30b-a3b"), get_quantization("Q4_K_M")
    a = AnalyticAssumptions()
    turing = platform_from("gtx-1650-super", "ryzen-9-7950x", None)  # graphs from PR 25749 on
    assert AnalyticCostModel(model, quant, turing, context_tokens=4096).cuda_graphs
    # a Pascal card (capability 6.1) launches every kernel one by one, and pays for it
    monkeypatch.setattr(analytic, "_compute_capabilities", lambda: {"gtx-1650-super": "6.1"})
    pascal = AnalyticCostModel(model, quant, turing, context_tokens=4096)
    assert not pascal.cuda_graphs
    assert pascal.gpu_block_fixed_s(5) == pytest.approx(a.gpu_block_overhead_s + a.gpu_block_no_graph_s)


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
           a: AnalyticAssumptions | None = None, kv_type: str = "f16") -> AnalyticCostModel:
    model = get_model(model_id)
    platform = platform_from(gpu, "ryzen-9-7950x", None)
    return AnalyticCostModel(model, get_quantization("Q4_K_M"), platform, context_tokens=max(2 * tokens, 4096),
                             attention_tokens=tokens, assumptions=a or AnalyticAssumptions(), cuda_graphs=graphs,
                             kv_bytes_per_element=KV_TYPE_BYTES[kv_type])


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
    one = replace(base, cpu_kv_read_factor=1.0)
    two = replace(base, cpu_kv_read_factor=2.0)
    m1, m2 = _model("qwen3-30b-a3b", tokens=16384, a=one), _model("qwen3-30b-a3b", tokens=16384, a=two)
    kv = m1.kv_bytes(0)
    assert kv > 0
    assert m2.cpu_block_s(0, 8) - m1.cpu_block_s(0, 8) == pytest.approx(kv / m1.cpu_stream_bytes_per_s(8))
    assert m2.gpu_block_s(0) == pytest.approx(m1.gpu_block_s(0))  # the CPU's factor only
    # at no depth the factor moves nothing
    e1, e2 = _model("qwen3-30b-a3b", tokens=0, a=one), _model("qwen3-30b-a3b", tokens=0, a=two)
    assert e1.cpu_block_s(0, 8) == pytest.approx(e2.cpu_block_s(0, 8))


def test_the_gpu_reads_the_kv_cache_at_what_its_sms_attend_to_at_most_its_stream():
    """An RTX 4090 (128 SMs, 1008 GB/s): the cache at min(the stream, 128 x the per-SM rate)."""
    deep, flat = _model("qwen3-30b-a3b", tokens=16384), _model("qwen3-30b-a3b", tokens=0)
    a, kv = deep.a, deep.kv_bytes(0)
    sm_rate = 128 * a.gpu_kv_sm_bytes_per_s
    assert sm_rate < deep.gpu_stream_bytes_per_s  # the fitted rate caps a fast card
    assert deep.gpu_block_s(0) - flat.gpu_block_s(0) == pytest.approx(kv / sm_rate)
    # SMs fast enough for the card's memory: the cache streams like the weights
    quick = replace(a, gpu_kv_sm_bytes_per_s=1e12)
    deep_q, flat_q = _model("qwen3-30b-a3b", tokens=16384, a=quick), _model("qwen3-30b-a3b", tokens=0, a=quick)
    assert deep_q.gpu_block_s(0) - flat_q.gpu_block_s(0) == pytest.approx(kv / deep_q.gpu_stream_bytes_per_s)
    # the same cache costs the GB10 (273 GB/s over 48 SMs) fewer weight-bytes a byte than the RTX 4090
    gb10 = _model("qwen3-30b-a3b", "gb10", tokens=16384)
    assert 1.0 <= gb10.gpu_kv_read_factor < deep.gpu_kv_read_factor

def test_a_quantized_cache_saves_bytes_where_they_bind_and_not_where_the_sms_do():
    """Where the SMs bound the attention (the RTX 4090 at the fitted per-SM rate), a q8_0 cache
    costs what an f16 one does: its elements are as many and each is unpacked into the same
    arithmetic. Where the stream binds (SMs fast for the memory), it costs its bytes: 34/64
    of f16's."""
    def attention_s(kv_type: str, a: AnalyticAssumptions | None = None) -> float:
        deep = _model("qwen3-30b-a3b", tokens=16384, a=a, kv_type=kv_type)
        flat = _model("qwen3-30b-a3b", tokens=0, a=a, kv_type=kv_type)
        return deep.gpu_block_s(0) - flat.gpu_block_s(0)

    assert attention_s("q8_0") == pytest.approx(attention_s("f16"))
    quick = replace(AnalyticAssumptions(), gpu_kv_sm_bytes_per_s=1e12)
    assert attention_s("q8_0", quick) == pytest.approx(attention_s("f16", quick) * 34 / 64)
