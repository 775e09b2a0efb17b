"""The joint search of stock llama.cpp commands (engine/advice/cache_search.py): host layers,
llama.cpp's expert cache and its load mode, -ub with a workload, the KV cache type. What it
picks is beaten by no neighbouring command COPE prices (issue 45's two cases)."""

from __future__ import annotations

import pytest

from cope_tui.options import PlanChoices
from cope_tui.service.advice import plan
from engine.advice.cache_search import UBATCHES, search_argv, search_cache
from engine.advice.command_estimate import price_placement_command
from engine.cost.estimate import faster
from engine.cost.prefill_cost import request_time_s
from engine.hardware.memory import SAFETY_MARGIN_FRACTION
from engine.llamacpp.llama_args import parse_llama_command


def _objective(advice, argv, prompt, output):  # type: ignore[no-untyped-def]
    """A command's request time (or TPOT without a workload); None when it overflows the budget."""
    request = advice.rec.request
    price = price_placement_command(request, advice.cost_model, parse_llama_command(argv), prompt_tokens=prompt)
    budget = request.vram_budget_bytes * (1 - SAFETY_MARGIN_FRACTION)
    if not price.runs or price.memory.vram_bytes > budget:
        return None
    if output is None:
        return price.tpot_s
    return request_time_s(price.prefill.ttft_s, price.tpot_s, output)


def _neighbours(best, n_blocks):  # type: ignore[no-untyped-def]
    ubs = UBATCHES if best.ubatch is not None else (None,)
    for n in (best.n_cpu_moe - 1, best.n_cpu_moe, best.n_cpu_moe + 1):
        if not 0 <= n <= n_blocks:
            continue
        for ub in ubs:
            for mib in {0, 512, 2048, best.cache_mib, max(best.cache_mib - 256, 0)}:
                for pinned in (False, True):
                    yield n, mib, pinned, ub


def _assert_unbeaten(advice, found, prompt, output):  # type: ignore[no-untyped-def]
    best = found.best
    request = advice.rec.request
    model_file = best.argv[best.argv.index("-m") + 1]
    assert _objective(advice, best.argv, prompt, output) == pytest.approx(best.objective_s, rel=1e-9)
    tried = 0
    for n, mib, pinned, ub in _neighbours(best, request.model.n_blocks):
        other = _objective(advice, search_argv(request, model_file, n, mib, pinned, ub), prompt, output)
        tried += 1
        if other is not None:
            assert not faster(other, best.objective_s), (n, mib, pinned, ub, other, best.objective_s)
    assert tried >= 8


@pytest.mark.slow
def test_a_long_prompt_picks_fewer_gpu_layers_with_a_bigger_ubatch():
    # gpt-oss-120b on an RTX 4090 + 7950X, 64 GiB: an 8000-token prompt and 300 tokens out
    choices = PlanChoices(model="gpt-oss-120b", gpu="rtx-4090", cpu="7950x", ram_gib=64.0, tokens=200,
                          prompt_tokens=8000, output_tokens=300)
    advice = plan(choices)
    found = search_cache(advice.rec.request, advice.cost_model, prompt_tokens=8000, output_tokens=300)
    best = found.best
    assert best.ubatch is not None and best.request_s is not None
    # it beats what every placement at its most-VRAM form with the -ub that fits gave (--cpu-moe -ub 4096)
    cpu_moe = _objective(advice, search_argv(advice.rec.request, "gpt-oss-120b.gguf", 36, 0, False, 4096), 8000, 300)
    assert faster(best.request_s, cpu_moe)
    _assert_unbeaten(advice, found, 8000, 300)


def test_a_q8_0_kv_cache_places_more_layers_and_the_pick_is_unbeaten():
    base = dict(model="qwen3-30b-a3b", gpu="rtx-3060-12gb", cpu="desktop-ddr5", tokens=200, context=16384)
    f16 = plan(PlanChoices(**base))
    q8 = plan(PlanChoices(**base, cache_type="q8_0"))
    plain_f16 = search_cache(f16.rec.request, f16.cost_model).partition
    found = search_cache(q8.rec.request, q8.cost_model)
    # a smaller KV cache leaves room for more experts on the GPU, and the command says the type
    assert found.partition.host_layers < plain_f16.host_layers
    assert found.partition.argv.count("q8_0") == 2 and "-ctk" in found.partition.argv
    assert q8.rec.memory.kv_cache_bytes < f16.rec.memory.kv_cache_bytes
    _assert_unbeaten(q8, found, None, None)
