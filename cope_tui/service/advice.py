"""The main job, for every front end: choices -> request -> pricing -> ranked advice.

`plan` is what `cope advise` (and export, estimate, verify) and the app's compute worker
both call, so the same inputs and profile give the same ranking everywhere; `sweep_stages`
feeds the app's tok/s-vs-VRAM chart a stage at a time; `estimate_command` prices a llama.cpp command a
person already runs beside the ranking.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field, replace
from typing import Iterator

from cope_tui.options import PlanChoices
from cope_tui.service.pricing import Pricing, choose_cost_model
from cope_tui.service.request import build_request
from engine.advice.advise import Recommendation, advise, sweep_in_stages
from engine.advice.command_estimate import CommandEstimate, command_settings, price_command, price_command_alone
from engine.advice.workload import rank_workload
from engine.core.errors import BudgetTooSmall, CopeInputError
from engine.core.progress import Progress
from engine.cost.cost_model import CostModel, Fidelity
from engine.cost.request import AdviseRequest
from engine.hardware.memory import GIB, SAFETY_MARGIN_FRACTION
from engine.hardware.platform import plans_without_gpu, usable_threads
from engine.llamacpp.llama_args import LlamaCommand, parse_llama_command
import shlex


@dataclass(frozen=True)
class Advice:
    request: AdviseRequest
    pricing: Pricing
    rec: Recommendation

    @property
    def cost_model(self) -> CostModel:
        return self.pricing.cost_model


@dataclass(frozen=True)
class SweepPoint:
    budget_bytes: int
    tokens_per_s: dict[str, float]  # candidate id -> tokens/s at this budget
    prompt_tokens_per_s: dict[str, float] = field(default_factory=dict)  # with a workload: prefill tok/s


def plan(
    choices: PlanChoices,
    *,
    detect_cpu=None,  # type: ignore[no-untyped-def]
    detect_gpu=None,  # type: ignore[no-untyped-def]
    probe_progress: Progress | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Advice:
    """Build the request, choose its cost model (probing only when a measured fidelity is
    asked for and not cached), rank every candidate."""
    request = build_request(choices, detect_cpu=detect_cpu, detect_gpu=detect_gpu)
    if plans_without_gpu(request.platform.gpu):
        raise CopeInputError("--gpu none: there is no GPU/CPU split to rank; `cope advise --gpu none` prints the "
                             "CPU-only command and its price (cope estimate prices yours with any --gpu)")
    pricing = choose_cost_model(request, fidelity=choices.fidelity, probe_budget_s=choices.probe_budget_s,
                                reprobe=choices.reprobe, progress=probe_progress, cancel=cancel)
    return advise_with(request, pricing, progress=progress, cancel=cancel)


def advise_with(request: AdviseRequest, pricing: Pricing, *, progress: Progress | None = None,
                cancel: threading.Event | None = None) -> Advice:
    rec = advise(request, pricing.cost_model, progress=progress, cancel=cancel)
    if pricing.note:
        rec = replace(rec, notes=rec.notes + (pricing.note,))
    return Advice(request, pricing, rec)


def sweep_budgets_for(rec: Recommendation, n_points: int) -> list[int]:
    """VRAM budgets from just above what the non-expert weights need to the whole GPU."""
    top = rec.request.platform.gpu.vram_bytes.value or rec.request.vram_budget_bytes
    top = max(int(top), rec.request.vram_budget_bytes)
    low = rec.memory.fixed_bytes / (1 - SAFETY_MARGIN_FRACTION) + 0.5 * GIB  # the margin scales with the budget
    low = math.ceil(low / (0.5 * GIB)) * 0.5 * GIB
    if low >= top or n_points < 2:
        return [top]
    step = (top - low) / (n_points - 1)
    return [int(low + i * step) for i in range(n_points)]


@dataclass(frozen=True)
class SweepStage:
    """The sweep so far: every budget's point with the candidates priced yet."""

    points: list[SweepPoint]
    done: int  # (budget, candidate) pairs priced
    total: int


def sweep_stages(advice: Advice, n_points: int, *, candidate_ids=None, cancel: threading.Event | None = None,
                 workload=None) -> Iterator[SweepStage]:  # type: ignore[no-untyped-def]
    """tokens/s of every candidate at a few VRAM budgets (and, with a workload, prompt
    tokens/s at the -ub each budget leaves room for), a stage at a time (engine.advice.advise.sweep_in_stages): first what the one-pass
    curves give, then each step-wise replay as it finishes; `candidate_ids`: those only."""
    budgets = sweep_budgets_for(advice.rec, n_points)
    counted = [0, 0]

    def progress(done: int, total: int, label: str) -> None:
        counted[:] = [done, total]

    stages = sweep_in_stages(advice.request, advice.cost_model, budgets, only=candidate_ids, progress=progress,
                             cancel=cancel)
    for recs in stages:
        yield SweepStage(_points(budgets, recs, workload), *counted)


def _points(budgets, recs, workload) -> list[SweepPoint]:  # type: ignore[no-untyped-def]
    points = []
    for b, r in zip(budgets, recs):
        prompt = {}
        if workload is not None:
            prompt = {w.candidate_id: w.prefill.tokens_per_s for w in rank_workload(r, workload).estimates}
        points.append(SweepPoint(b, {e.candidate.id: e.tokens_per_s for e in r.estimates}, prompt))
    return points


def parse_pasted(text: str) -> LlamaCommand:
    """A pasted command line -> LlamaCommand; split like a shell would (shlex), never run.

    Raises CopeInputError with one line for anything unreadable."""
    text = text.strip()
    if text.startswith("$ "):
        text = text[2:]  # a copied shell prompt
    if not text:
        raise CopeInputError("paste a llama.cpp command, e.g. llama-server -m model.gguf -ngl 99 --n-cpu-moe 24 -t 8")
    try:
        words = shlex.split(text)
    except ValueError as exc:
        reason = str(exc).lower()  # shlex: "No closing quotation", "No escaped character"
        raise CopeInputError(f"{reason} (check its quotes and backslashes)") from None
    return parse_llama_command(words)


def kept_fidelity(pricing: Pricing) -> Fidelity | None:
    """The fidelity to price another request of the same plan with (its context, KV type,
    threads): the same when it never probes (analytic, calibrated); else None, the default
    policy (a complete cached profile for those settings, else analytic)."""
    return pricing.fidelity if not pricing.fidelity.needs_profile else None


def cost_model_at(advice: Advice):  # type: ignore[no-untyped-def]
    """A function giving the cost model of `advice`'s plan for another request (the trade-off
    table's cells, engine/advice/tradeoff.py), priced as `estimate_command` re-prices one."""
    kept = kept_fidelity(advice.pricing)
    return lambda request: choose_cost_model(request, fidelity=kept).cost_model


def estimate_command(advice: Advice, command: LlamaCommand, *, fidelity: Fidelity | None = None,
                     probe_budget_s: float = 60.0, progress: Progress | None = None,
                     cancel: threading.Event | None = None, builds=None) -> CommandEstimate:  # type: ignore[no-untyped-def]
    """Price `command` beside the ranking of `advice`; COPE's command is spelled for
    `builds` (probes.runtimes.RuntimeScan.builds: the runtimes found here). The command's settings are honoured
    (-t, -c, the KV cache type, llama-bench's -d and -n): when they differ from the
    advice's, the ranking is recomputed at them (priced with the same fidelity when it is
    analytic or calibrated, or when `fidelity` names the one the person asked for; else by
    the default policy: a complete cached profile for those settings, else analytic) and a
    note says so."""
    request = advice.request
    first: tuple[str, ...] = ()
    if command.threads is not None:  # never price (or export) more threads than the CPU has
        threads, clamped = usable_threads(command.threads, request.platform.cpu)
        if clamped:
            command = replace(command, threads=threads)
            first = (clamped,) if clamped not in request.notes else ()  # said once
    changes = command_settings(command, request)
    if not changes:
        result = price_command(advice.rec, advice.cost_model, command, builds)
        return replace(result, notes=first + result.notes)
    moved = replace(request, **changes)
    # An asked-for measured fidelity is kept too: the person asked for it (its profile is usually cached).
    kept = fidelity or kept_fidelity(advice.pricing)
    pricing = choose_cost_model(moved, fidelity=kept, probe_budget_s=probe_budget_s, progress=progress, cancel=cancel)
    try:
        redone = advise_with(moved, pricing, progress=progress, cancel=cancel)
    except BudgetTooSmall as exc:  # nothing ranks at the command's settings: the command alone
        alone = price_command_alone(moved, pricing.cost_model, command, exc.message)
        return replace(alone, notes=first + alone.notes)
    result = price_command(redone.rec, redone.cost_model, command, builds)
    said = ", ".join(f"{_SETTING_NAMES[k]} {v / GIB:.2f} GiB" if k == "vram_budget_bytes"
                     else f"{_SETTING_NAMES[k]} {v:g}" for k, v in changes.items())
    note = f"COPE's best recomputed at the command's settings ({said}); the ranking shown elsewhere is at its own"
    if pricing.fidelity is not advice.pricing.fidelity:
        note += f"; priced {pricing.reason}"
    return replace(result, notes=first + (note,) + result.notes)


def estimate_without_ranking(choices: PlanChoices, command: LlamaCommand, no_ranking: str, *,
                             fidelity: Fidelity | None = None, probe_budget_s: float = 60.0) -> CommandEstimate:
    """`command` priced alone where no candidate can be ranked at its settings
    (`no_ranking` says why: the budget cannot hold its context's KV cache, ...)."""
    request = build_request(choices)
    request = replace(request, **command_settings(command, request))
    pricing = choose_cost_model(request, fidelity=fidelity, probe_budget_s=probe_budget_s)
    return price_command_alone(request, pricing.cost_model, command, no_ranking)


_SETTING_NAMES = {"threads": "threads", "context_tokens": "context", "attention_tokens": "attended tokens",
                  "kv_bytes_per_element": "KV bytes per element",
                  "vram_budget_bytes": "VRAM budget less the -ub compute buffer"}
