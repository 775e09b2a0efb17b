"""Prefill: the copy model's monotonic properties, llama.cpp's and ik_llama.cpp's offload
rules, the -ub choice under a VRAM limit, workloads ranked by the whole request, and
llama-bench's pp test priced by cope estimate."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import numpy as np
import pytest

from cope_tui.cli import EXIT_OK, main
from cope_tui.options import WORKLOAD_PRESETS, PlanChoices
from cope_tui.service.advice import estimate_command, plan
from cope_tui.service.request import build_request
from cope_tui.service.workload import export_with_batch, rank, workload_of
from engine.advice.workload import Workload
from engine.core.errors import CopeInputError
from engine.cost.analytic_cost import AnalyticCostModel
from engine.cost.prefill_cost import (
    DOUBLE_BUFFERED,
    IK_LLAMA,
    LLAMA_CPP,
    LLAMA_CPP_WHOLE,
    UBATCH_CHOICES,
    PrefillModel,
    routed_fraction,
)
from engine.llamacpp.llama_args import parse_llama_command
from engine.llamacpp.llama_placement import placement_of
from engine.runtimes.export import export_for

FAST = PlanChoices(tokens=200, cpu="desktop-ddr5", gpu="rtx-4060-ti-16gb", threads=8)


@pytest.fixture(scope="module")
def setup():  # type: ignore[no-untyped-def]
    request = build_request(FAST)
    analytic = AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens)
    model = PrefillModel(request.model, request.quant, request.platform, popularity=request.profile.popularity(),
                         threads=request.threads, gpu_bytes_per_s=analytic.gpu_stream_bytes_per_s,
                         h2d_bytes_per_s=analytic.h2d_bytes_per_s)
    return request, model


def _placement(request, n_cpu_moe: int):  # type: ignore[no-untyped-def]
    return placement_of(parse_llama_command(["llama-server", "--n-cpu-moe", str(n_cpu_moe)]), request.model)


def test_a_larger_micro_batch_is_never_slower_per_token(setup):
    request, model = setup
    for n_cpu in (0, 11, 48):
        placement = _placement(request, n_cpu)
        for runtime in (LLAMA_CPP, LLAMA_CPP_WHOLE, DOUBLE_BUFFERED):
            speeds = [model.prompt(placement, 8192, ubatch=u, runtime=runtime).tokens_per_s for u in UBATCH_CHOICES]
            assert all(b >= a * (1 - 1e-9) for a, b in zip(speeds, speeds[1:])), (n_cpu, runtime.name, speeds)
    # With experts on the CPU the copy dominates: -ub 4096 is several times -ub 256 (the 3090 runs: 240 -> 1683).
    cpu_heavy = _placement(request, 48)
    small, large = (model.prompt(cpu_heavy, 8192, ubatch=u).tokens_per_s for u in (256, 4096))
    assert large > 3 * small


def test_copying_only_the_routed_experts_is_never_slower(setup):
    request, model = setup
    placement = _placement(request, 24)
    for u in (32, 64, 256, 512, 4096):
        used = model.prompt(placement, 4096, ubatch=u, runtime=LLAMA_CPP)
        whole = model.prompt(placement, 4096, ubatch=u, runtime=LLAMA_CPP_WHOLE)
        assert used.prompt_s <= whole.prompt_s
        assert used.copied_bytes <= whole.copied_bytes
    # A micro-batch of 32 tokens reaches only part of each layer's experts: strictly fewer bytes.
    assert model.prompt(placement, 32, ubatch=32).copied_bytes < model.prompt(
        placement, 32, ubatch=32, runtime=LLAMA_CPP_WHOLE).copied_bytes


def test_double_buffered_copies_are_never_slower_and_labelled_as_no_runtime(setup):
    request, model = setup
    placement = _placement(request, 30)
    for u in (256, 1024, 4096):
        seq = model.prompt(placement, 4096, ubatch=u)
        overlapped = model.prompt(placement, 4096, ubatch=u, runtime=DOUBLE_BUFFERED)
        assert overlapped.prompt_s <= seq.prompt_s
    assert DOUBLE_BUFFERED.runs_in == "" and "no runtime" in DOUBLE_BUFFERED.name


def test_routed_fraction_grows_with_the_batch_and_its_share_per_token_falls():
    rng = np.random.default_rng(0)
    popularity = rng.zipf(1.5, size=(4, 64)).astype(float)
    sizes = [1, 8, 32, 256, 4096]
    fractions = [float(routed_fraction(popularity, 4, u).mean()) for u in sizes]
    assert all(0 < f <= 1 for f in fractions)
    assert fractions == sorted(fractions)
    per_token = [f / u for f, u in zip(fractions, sizes)]
    assert per_token == sorted(per_token, reverse=True)


def test_offload_rules_of_llama_cpp_and_ik_llama_cpp(setup):
    request, model = setup
    placement = _placement(request, 48)
    # Below GGML_OP_OFFLOAD_MIN_BATCH the CPU computes its experts: nothing is copied.
    small = model.prompt(placement, 31, ubatch=31)
    assert small.copy_s == 0 and small.cpu_s > 0
    assert model.prompt(placement, 32, ubatch=32).copy_s > 0
    # ik_llama.cpp: u x k >= 32 x E (Qwen3-30B-A3B: 128 experts, 8 active -> 512 tokens).
    k, e = request.model.top_k, request.model.n_routed_experts
    threshold = 32 * e // k
    assert not model.offloads(threshold - 1, IK_LLAMA) and model.offloads(threshold, IK_LLAMA)
    # -rtr: repacked experts stay on the CPU at any batch.
    assert model.prompt(placement, 4096, ubatch=4096, runtime=replace(IK_LLAMA, repacked=True)).copy_s == 0


def test_the_micro_batch_is_chosen_within_the_vram_left(setup):
    request, model = setup
    placement = _placement(request, 48)
    unlimited = model.choose_ubatch(placement, 8192, None)
    assert unlimited.ubatch == max(UBATCH_CHOICES)
    for headroom_gib in (0.0, 0.5, 1.0, 2.0, 4.0):
        headroom = headroom_gib * 2**30
        chosen = model.choose_ubatch(placement, 8192, headroom)
        assert chosen.ubatch <= 512 or model.extra_vram_bytes(chosen.ubatch) <= headroom
        bigger = [u for u in UBATCH_CHOICES if u > chosen.ubatch]
        # Nothing larger fits (a larger -ub is never slower, so the choice is the largest that fits).
        assert all(model.extra_vram_bytes(u) > headroom for u in bigger)
    assert model.choose_ubatch(placement, 8192, 0.0).ubatch == 512
    # A prompt shorter than a micro-batch is not given a larger one.
    assert model.choose_ubatch(placement, 300, None).ubatch == 256
    # The compute buffer grows with -ub.
    sizes = [model.compute_buffer_bytes(u) for u in UBATCH_CHOICES]
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]


def test_workloads_from_presets_and_numbers():
    assert workload_of(FAST) is None  # the default stays decode-only
    rag = workload_of(FAST.with_(workload="rag"))
    assert (rag.prompt_tokens, rag.output_tokens, rag.name) == (*WORKLOAD_PRESETS["rag"], "rag")
    longer = workload_of(FAST.with_(workload="rag", prompt_tokens=20000))
    assert (longer.prompt_tokens, longer.output_tokens) == (20000, WORKLOAD_PRESETS["rag"][1])
    assert workload_of(FAST.with_(prompt_tokens=8000, output_tokens=300)) == Workload(8000, 300)
    with pytest.raises(CopeInputError, match="--output-tokens"):
        workload_of(FAST.with_(output_tokens=300))


def test_the_request_ranking_can_differ_from_decode_only():
    advice = plan(FAST.with_(prompt_tokens=8000, output_tokens=300))  # planned at a context that holds it
    long_prompt = rank(advice, Workload(8000, 300))
    times = [w.request_s for w in long_prompt.estimates]
    assert times == sorted(times)
    for w in long_prompt.estimates:
        assert w.request_s == pytest.approx(w.prefill.ttft_s + 300 * w.estimate.tpot_s)
    # A long prompt: the decode-only pick (a per-expert cache, which serves decode only) is not the fastest request.
    assert long_prompt.best.candidate_id != advice.rec.best.candidate.id
    assert long_prompt.best.request_s < long_prompt.of(advice.rec.best.candidate.id).request_s
    # A one-token prompt and a long answer: decode decides again.
    answer = plan(FAST.with_(prompt_tokens=1, output_tokens=20000))
    long_answer = rank(answer, Workload(1, 20000))
    assert long_answer.best.estimate.tpot_s == pytest.approx(answer.rec.best.tpot_s)


def test_the_exported_command_carries_b_and_ub_only_with_a_workload():
    advice = plan(FAST.with_(prompt_tokens=8000, output_tokens=300))
    ranking = rank(advice, Workload(8000, 300))
    plain = export_for(advice.rec, ranking.best.estimate)
    assert "-ub" not in plain.argv
    chosen = ranking.of(plain.exported_id)
    withb = export_with_batch(plain, ranking)
    assert withb.argv[-4:] == ("-b", str(chosen.prefill.batch), "-ub", str(chosen.prefill.ubatch))


def test_advise_json_and_text_with_a_workload(capsys):
    flags = ["--tokens", "200", "--cpu", "desktop-ddr5", "--gpu", "rtx-4060-ti-16gb", "--threads", "8"]
    assert main(["advise", *flags, "--json"]) == EXIT_OK
    assert "workload" not in json.loads(capsys.readouterr().out)
    assert main(["advise", *flags, "--prompt-tokens", "8000", "--output-tokens", "300", "--json", "--export"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    best = doc["workload"]["candidates"][0]
    assert doc["workload"]["best"] == best["candidate"]
    assert {"ttft_s", "prompt_tokens_per_s", "decode_tokens_per_s", "request_s", "ubatch"} <= set(best)
    assert "-ub" in doc["export"]["argv"]
    assert main(["advise", *flags, "--workload", "chat"]) == EXIT_OK
    text = capsys.readouterr().out
    assert "Workload: chat: 1000 prompt tokens, 300 output tokens" in text and "TTFT s" in text


def test_estimate_prices_llama_bench_pp_as_well_as_tg():
    est = estimate_command(plan(FAST), parse_llama_command(shlex.split(
        "llama-bench -m m.gguf -ngl 99 --n-cpu-moe 30 -p 4096 -ub 256 -n 128")))
    big = estimate_command(plan(FAST), parse_llama_command(shlex.split(
        "llama-bench -m m.gguf -ngl 99 --n-cpu-moe 30 -p 4096 -ub 2048 -b 2048 -n 128")))
    assert est.yours.prefill.prompt_tokens == 4096 and est.yours.prefill.ubatch == 256
    assert big.yours.prefill.tokens_per_s > est.yours.prefill.tokens_per_s
    assert big.yours.tpot_s == pytest.approx(est.yours.tpot_s)  # -ub does not change decode
    none = estimate_command(plan(FAST), parse_llama_command(shlex.split("llama-bench -m m.gguf -p 0 -n 128")))
    assert none.yours.prefill is None
    server = estimate_command(plan(FAST), parse_llama_command(shlex.split("llama-server -m m.gguf -ub 1024")))
    assert server.yours.prefill is None  # only llama-bench runs a pp test of its own


def test_llama_args_reads_the_prompt_flags():
    c = parse_llama_command(shlex.split("llama-bench -m m.gguf -p 512,4096 -ub 256 -b 4096 -rtr 1 -tb 23"))
    assert (c.n_prompt, c.ubatch, c.batch, c.repack, c.threads_batch) == (512, 256, 4096, True, 23)
    server = parse_llama_command(shlex.split("llama-server -m m.gguf -rtr -fa -ub 2048"))
    assert server.repack and server.ubatch == 2048 and server.flash_attn == "on"
    cli = parse_llama_command(["llama-cli", "-m", "m.gguf", "-p", "hello world"])
    assert cli.n_prompt is None  # llama-cli's -p is the prompt's text
    with pytest.raises(CopeInputError, match="-ub"):
        parse_llama_command(shlex.split("llama-bench -ub 0"))


def test_the_readme_example_picks_another_placement_for_the_whole_request(capsys):
    """README: `cope advise --model gpt-oss-120b --gpu rtx-3090 --cpu ryzen-9-7950x
    --prompt-tokens 8000 --output-tokens 300`."""
    argv = ["advise", "--model", "gpt-oss-120b", "--gpu", "rtx-3090", "--cpu", "ryzen-9-7950x",
            "--prompt-tokens", "8000", "--output-tokens", "300", "--json", "--export"]
    assert main(argv) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    decode_best = doc["recommendation"]["fastest_estimate"]
    ranked = doc["workload"]["candidates"]
    request_best = ranked[0]
    by_id = {c["candidate"]: c for c in ranked}
    fastest_decode = max(ranked, key=lambda c: c["decode_tokens_per_s"])
    assert request_best["candidate"] != fastest_decode["candidate"]
    assert request_best["request_s"] < by_id[fastest_decode["candidate"]]["request_s"]
    assert request_best["ubatch"] > 512 and "-ub" in doc["export"]["argv"]
    assert by_id[decode_best]["decode_tokens_per_s"] == fastest_decode["decode_tokens_per_s"]
    # What to run follows the request too (stock llama.cpp runs every expert on the CPU),
    # with the exported command, whose context holds the prompt and the output.
    now = doc["recommendation"]["run_now"]
    assert now["candidate"] == request_best["candidate"] and now["argv"] == doc["export"]["argv"]
    assert int(now["argv"][now["argv"].index("-c") + 1]) >= 8000 + 300
