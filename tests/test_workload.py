"""A workload (P prompt, N output tokens) decides what `cope advise` says to run: the
run-now and best-overall picks follow request time, their commands carry the -b/-ub
chosen for the request, and the context is sized to hold it."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import pytest

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main
from cope_tui.options import DEFAULT_CONTEXT, WORKLOAD_PRESETS, PlanChoices
from cope_tui.service.advice import plan
from cope_tui.service.workload import rank, workload_of
from engine.advice.run_advice import plan_runs
from engine.advice.workload import CONTEXT_STEP_TOKENS, Workload, request_context
from engine.core.errors import CopeInputError
from engine.runtimes import STOCK_NAME

FLAGS = ["--tokens", "200", "--cpu", "desktop-ddr5", "--gpu", "rtx-4060-ti-16gb", "--threads", "8"]
CHOICES = PlanChoices(tokens=200, cpu="desktop-ddr5", gpu="rtx-4060-ti-16gb", threads=8)


def advise_json(capsys, *args: str) -> dict:
    code = main(["advise", *FLAGS, *args, "--json"])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    return json.loads(out)


def _flag(argv: list[str], name: str) -> int:
    return int(argv[argv.index(name) + 1])


def _fastest_request(doc: dict, runtimes: set[str] | None) -> str:
    """The first candidate of the workload ranking that one of `runtimes` (None: any) runs
    exactly within RAM, group members left out: what run_now / best_overall must be."""
    rows = {c["id"]: c for c in doc["candidates"]}
    for priced in doc["workload"]["candidates"]:
        row = rows[priced["candidate"]]
        if row["identical_to"] is not None:
            continue
        if any(r["exact"] and r["fits_ram"] and (runtimes is None or r["name"] in runtimes) for r in row["runtimes"]):
            return row["id"]
    raise AssertionError("no candidate runs")


def test_with_a_workload_run_now_and_best_overall_follow_request_time(capsys):
    decode = advise_json(capsys)
    assert decode["recommendation"]["ranked_by"] == "tpot_s"
    doc = advise_json(capsys, "--workload", "rag", "--export")
    rec = doc["recommendation"]
    assert rec["ranked_by"] == "request_s"
    now, best = rec["run_now"], rec["best_overall"]
    # No runtime is installed in tests: run_now is the fastest request stock llama.cpp runs.
    assert now["candidate"] == _fastest_request(doc, {STOCK_NAME}) and now["runtime"] == STOCK_NAME
    assert best["candidate"] == _fastest_request(doc, None)
    # Here the request and decode orders disagree (a long prompt favours every expert on the CPU).
    assert now["candidate"] != decode["recommendation"]["run_now"]["candidate"]
    priced = {c["candidate"]: c for c in doc["workload"]["candidates"]}[now["candidate"]]
    assert now["request_s"] == pytest.approx(priced["request_s"]) and now["ubatch"] == priced["ubatch"]
    # Its command carries the -b/-ub chosen for the request, and a context that holds it.
    argv = now["argv"]
    assert (_flag(argv, "-b"), _flag(argv, "-ub")) == (priced["batch"], priced["ubatch"])
    assert _flag(argv, "-c") >= sum(WORKLOAD_PRESETS["rag"])
    # The export of the fastest request is the same command when stock llama.cpp runs it.
    assert doc["workload"]["best"] == now["candidate"] and doc["export"]["argv"] == argv


def test_the_text_run_now_line_is_the_json_pick_with_its_command(capsys):
    doc = advise_json(capsys, "--workload", "rag")
    assert main(["advise", *FLAGS, "--workload", "rag", "--export"]) == EXIT_OK
    out = capsys.readouterr().out
    now = doc["recommendation"]["run_now"]
    # the ranking's pick: first, or after the searched stock command when that is faster (its own block)
    pick = f"{now['candidate']} with stock llama.cpp (fastest by request time"
    block = next(b for b in out.split("\n\n") if pick in b.splitlines()[0]).splitlines()
    assert block[0].split(": ", 1)[0] in ("Run this now", "COPE's ranking picks",
                                          "Without llama.cpp's expert cache (any build), run")
    assert block[2].startswith(f"  request {now['request_s']:.1f} s = TTFT")
    assert shlex.split(block[3]) == now["argv"]
    exported = out.rstrip().splitlines()[-1]
    assert shlex.split(exported) == now["argv"]


def test_plan_runs_picks_in_whatever_order_the_ranking_gives():
    """The picks follow the ranking's order (the one place that decides it), and the
    speedup of best_overall is by request time (DeepSeek-V2-Lite in 8 GiB: the fork runs a
    per-expert candidate that stock llama.cpp does not)."""
    choices = CHOICES.with_(workload="rag", model="deepseek-v2-lite-chat", vram_budget_gib=8.0)
    advice = plan(choices)
    ranking = rank(advice, workload_of(choices))
    # The same candidates in the reverse order, with request times to match.
    backwards = tuple(replace(w, request_s=10.0 + i) for i, w in enumerate(reversed(ranking.estimates)))
    flipped = replace(ranking, estimates=backwards)
    runs = plan_runs(advice.rec, (), flipped)
    order = [w.candidate_id for w in backwards]
    lead = [r for r in runs.rows if r.same_as is None]
    stock = [r.id for r in sorted(lead, key=lambda r: order.index(r.id)) if STOCK_NAME in r.exact_runtimes()]
    anyone = [r.id for r in sorted(lead, key=lambda r: order.index(r.id)) if r.exact_runtimes()]
    assert runs.run_now.row.id == stock[0] and runs.best_overall.row.id == anyone[0]
    assert runs.run_now.row.id != plan_runs(advice.rec, (), ranking).run_now.row.id
    seconds = {w.candidate_id: w.request_s for w in backwards}
    assert runs.best_overall.row is not runs.run_now.row
    assert runs.speedup_elsewhere == pytest.approx(seconds[stock[0]] / seconds[anyone[0]])
    # Without a ranking nothing changes: decode order.
    decode = plan_runs(advice.rec)
    assert decode.ranking is None and decode.run_now.row.id == plan_runs(plan(CHOICES).rec).run_now.row.id


def test_a_ranking_of_another_plan_is_refused():
    advice = plan(CHOICES)
    with pytest.raises(ValueError, match="cannot hold the request"):
        rank(advice, Workload(30000, 1000))  # planned at the default context, 8192


def test_the_context_is_sized_for_the_request():
    chat, rag, agent = (Workload(*WORKLOAD_PRESETS[n], n) for n in ("chat", "rag", "code-agent"))
    assert request_context(chat, None, DEFAULT_CONTEXT).context_tokens == DEFAULT_CONTEXT  # the default holds it
    for w in (rag, agent):
        sized = request_context(w, None, DEFAULT_CONTEXT)
        assert sized.sized and sized.context_tokens % CONTEXT_STEP_TOKENS == 0
        assert w.tokens <= sized.context_tokens < w.tokens + CONTEXT_STEP_TOKENS
    # Decode steps run at depths P..P+N: they attend to P + N/2 on average, whatever the context.
    assert request_context(agent, None, DEFAULT_CONTEXT).attention_tokens == 30000 + 500
    assert request_context(agent, 40000, DEFAULT_CONTEXT).context_tokens == 40000
    with pytest.raises(CopeInputError, match="--context 8192 .* 31000 tokens"):
        request_context(agent, 8192, DEFAULT_CONTEXT)


def test_code_agent_plans_and_exports_a_context_that_holds_the_request(capsys):
    doc = advise_json(capsys, "--workload", "code-agent", "--export")
    need = sum(WORKLOAD_PRESETS["code-agent"])
    context = doc["inputs"]["context_tokens"]
    assert context >= need and doc["memory"]["context_tokens"] == context
    assert any(f"KV cache ({context} tokens)" in line for line in doc["memory"]["lines"])
    assert doc["workload"]["context_tokens"] == context and doc["workload"]["decode_attention_tokens"] == 30500
    assert doc["cost_model"]["attention_tokens"] == 30500
    for argv in (doc["export"]["argv"], doc["recommendation"]["run_now"]["argv"]):
        assert _flag(argv, "-c") >= need
    # The decode estimates are priced at the request's depth: slower than at the default context's half.
    decode = advise_json(capsys)
    [deep] = [c["tpot_s"] for c in doc["candidates"] if c["id"] == "all-cpu"]
    [half] = [c["tpot_s"] for c in decode["candidates"] if c["id"] == "all-cpu"]
    assert deep > half


def test_an_explicit_context_too_small_for_the_request_is_refused(capsys):
    assert main(["advise", *FLAGS, "--workload", "code-agent", "--context", "8192"]) == EXIT_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--context 8192" in err and "31000" in err
    # One that holds it is used as given.
    doc = advise_json(capsys, "--workload", "code-agent", "--context", "31000")
    assert doc["inputs"]["context_tokens"] == 31000 and _flag(doc["recommendation"]["run_now"]["argv"], "-c") == 31000
