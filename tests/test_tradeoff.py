"""The trade-off table beside `cope advise`'s answer (engine/advice/tradeoff.py): context 8k to
64k x f16/q8_0 KV, each cell the best command with the answer's -ub and load mode held,
priced by the path the answer's search takes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cope_tui.options import PlanChoices
from cope_tui.service.advice import cost_model_at, plan
from engine.cost.cost_models import analytic_model
from engine.advice.cache_search import search_argv, search_cache
from engine.advice.command_estimate import price_placement_command
from engine.advice.tradeoff import CONTEXTS_TOKENS, KV_TYPES, price_tradeoff
from engine.cost.analytic_cost import KV_TYPE_BYTES, AnalyticCostModel
from engine.cost.estimate import faster
from engine.hardware.memory import GIB, SAFETY_MARGIN_FRACTION
from engine.llamacpp.llama_args import parse_llama_command

PERSONA_A = dict(model="qwen3-30b-a3b", gpu="rtx-3060-12gb", cpu="7950x", ram_gib=64.0, tokens=200)


@pytest.fixture(scope="module")
def persona_a():  # type: ignore[no-untyped-def]
    advice = plan(PlanChoices(**PERSONA_A))
    found = search_cache(advice.rec.request, advice.cost_model)
    table = price_tradeoff(advice.rec.request, advice.cost_model, found.best, prompt_tokens=1000,
                           prompt_basis="a default", cost_model_at=cost_model_at(advice))
    return advice, found, table


def _at(request, context, kv):  # type: ignore[no-untyped-def]
    return replace(request, context_tokens=context, kv_bytes_per_element=KV_TYPE_BYTES[kv],
                   kv_cache_type=None if kv == "f16" else kv)


def test_the_answers_own_cell_is_the_answer(persona_a):  # type: ignore[no-untyped-def]
    advice, found, table = persona_a
    best = found.best
    assert best.cache_mib == 0  # persona A's answer is a plain partition (the cache loses here)
    cell = table.cell(8192, "f16")
    assert cell.argv == best.argv
    assert cell.tpot_s == pytest.approx(best.tpot_s, rel=1e-12)
    assert cell.vram_used_bytes == best.vram_bytes
    assert [(c.context_tokens, c.kv_cache_type) for c in table.cells] == [(c, k) for c in CONTEXTS_TOKENS
                                                                          for k in KV_TYPES]


def test_each_cell_is_the_fastest_command_that_fits_with_the_held_knobs(persona_a):  # type: ignore[no-untyped-def]
    advice, found, table = persona_a
    request, model = advice.rec.request, advice.rec.request.model
    budget = request.vram_budget_bytes - int(request.vram_budget_bytes * SAFETY_MARGIN_FRACTION)
    for cell in table.cells:
        at = _at(request, cell.context_tokens, cell.kv_cache_type)
        assert cell.fits
        # the cell's command priced again, on its own, gives the cell's figures (one pricing path)
        priced_by = analytic_model(at)  # the cell's own: its context's depth and its cache's bytes
        again = price_placement_command(at, priced_by, parse_llama_command(cell.argv), prompt_tokens=1000)
        assert again.tpot_s == pytest.approx(cell.tpot_s, rel=1e-12)
        assert again.prefill.ttft_s == pytest.approx(cell.ttft_s, rel=1e-12)
        assert again.vram_used_bytes == cell.vram_used_bytes <= budget
        assert ("-c", str(cell.context_tokens)) == tuple(cell.argv[cell.argv.index("-c"):][:2])
        assert (cell.kv_cache_type == "q8_0") == ("-ctk" in cell.argv)
        # no other host-layer count that fits is faster, in decode or in TTFT (a full scan, not the bisection)
        for n in range(model.moe_blocks[0], model.n_blocks + 1):
            argv = search_argv(at, "qwen3-30b-a3b.gguf", n, 0, False, None)
            other = price_placement_command(at, priced_by, parse_llama_command(argv), prompt_tokens=1000)
            if other.memory.vram_bytes > budget:
                assert n < cell.n_cpu_moe  # the cell is the smallest N that fits
                continue
            assert not faster(other.tpot_s, cell.tpot_s), (cell.context_tokens, cell.kv_cache_type, n)
            assert not faster(other.prefill.ttft_s, cell.ttft_s)


def test_a_longer_context_costs_layers_and_q8_0_gives_them_back(persona_a):  # type: ignore[no-untyped-def]
    _, _, table = persona_a
    for kv in KV_TYPES:
        hosts = [table.cell(c, kv).n_cpu_moe for c in CONTEXTS_TOKENS]
        assert hosts == sorted(hosts) and hosts[-1] > hosts[0]
        speeds = [table.cell(c, kv).tokens_per_s for c in CONTEXTS_TOKENS]
        assert speeds == sorted(speeds, reverse=True)
    for context in CONTEXTS_TOKENS:
        f16, q8 = table.cell(context, "f16"), table.cell(context, "q8_0")
        assert q8.n_cpu_moe <= f16.n_cpu_moe and q8.tokens_per_s >= f16.tokens_per_s
    # at 64k the f16 cache (6 GiB for Qwen3-30B-A3B: 48 layers x 4 KV heads x 128 x 2 x 2 bytes a token)
    # takes layers that q8_0 keeps on the GPU
    assert table.cell(65536, "q8_0").n_cpu_moe < table.cell(65536, "f16").n_cpu_moe


def test_a_cell_that_does_not_fit_says_so():
    # 3 GiB: at 64k, Qwen3-30B-A3B's f16 KV cache (6 GiB) alone overflows it; at 8k q8_0 it fits
    advice = plan(PlanChoices(**PERSONA_A, vram_budget_gib=3.0))
    found = search_cache(advice.rec.request, advice.cost_model)
    table = price_tradeoff(advice.rec.request, advice.cost_model, found.best, prompt_tokens=1000,
                           prompt_basis="a default", cost_model_at=cost_model_at(advice))
    big = table.cell(65536, "f16")
    assert not big.fits and big.tokens_per_s is None and "--cpu-moe" in big.refusal
    assert table.cell(8192, "q8_0").fits
    line = next(line for line in table.lines() if line.strip().startswith("65536 f16"))
    assert "does not fit" in line


def test_a_workload_holds_the_answers_ubatch_and_refuses_contexts_too_small():
    advice = plan(PlanChoices(**PERSONA_A, prompt_tokens=12000, output_tokens=300))
    found = search_cache(advice.rec.request, advice.cost_model, prompt_tokens=12000, output_tokens=300)
    table = price_tradeoff(advice.rec.request, advice.cost_model, found.best, prompt_tokens=12000,
                           prompt_basis="the workload's", output_tokens=300, cost_model_at=cost_model_at(advice))
    for kv in KV_TYPES:
        small = table.cell(8192, kv)
        assert not small.fits and "12300 tokens do not fit in 8192" in small.refusal
    for context in CONTEXTS_TOKENS[1:]:
        cell = table.cell(context, "f16")
        assert cell.fits and cell.argv[cell.argv.index("-ub") + 1] == str(found.best.ubatch)
    assert "-ub" in table.held_fixed and "12150 tokens" in table.decode_at


def test_advise_prints_the_table_after_the_answer_and_writes_it_in_json(run_cope, cope_json):  # type: ignore[no-untyped-def]
    flags = ["--gpu", "rtx-3060-12gb", "--cpu", "7950x", "--ram-gib", "64", "--tokens", "200"]
    code, out, _ = run_cope("advise", *flags)
    assert code == 0
    head = out.split("COPE advise:")[0]  # short, and before the ranking
    assert "What context and KV cache type cost" in head and "1000-token prompt" in head
    assert sum(line.strip().startswith(("8192 ", "16384 ", "32768 ", "65536 ")) for line in head.splitlines()) == 8
    doc = cope_json("advise", *flags, "--json")
    cells = doc["tradeoff"]["cells"]
    assert len(cells) == 8
    first = cells[0]
    assert {"context_tokens", "kv_cache_type", "tpot_s", "tokens_per_s", "ttft_s", "vram_used_bytes", "fits"} <= set(first)
    # the 8k f16 cell is the command advise leads with
    assert first["tokens_per_s"] == pytest.approx(doc["recommendation"]["run_now"]["tokens_per_s"], rel=1e-9)
    assert first["vram_used_bytes"] / GIB < 12


def test_cells_priced_by_another_fidelity_say_which(persona_a):  # type: ignore[no-untyped-def]
    """A measured profile covers the answer's context only: the other cells fall back (the
    default policy), and the table says which cell each fidelity priced."""
    advice, found, table = persona_a
    assert {c.fidelity for c in table.cells} == {"analytic"}
    assert not any(line.strip().startswith("priced ") for line in table.lines())

    class Measured(AnalyticCostModel):  # stands in for the answer's measured fidelity
        fidelity = "combined"

    request = advice.rec.request
    answer_model = Measured(request.model, request.quant, request.platform, context_tokens=request.context_tokens)
    mixed = price_tradeoff(request, answer_model, found.best, prompt_tokens=1000, prompt_basis="a default",
                           cost_model_at=analytic_model)
    assert mixed.cell(8192, "f16").fidelity == "combined" and mixed.cell(8192, "q8_0").fidelity == "analytic"
    said = mixed.lines()[-1]
    assert said.startswith("  priced analytic: 8192 q8_0, 16384 f16") and said.endswith("combined: 8192 f16")
