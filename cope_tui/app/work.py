"""What the app's workers run: Textual-free, each with a progress callback and a
cancel flag, so the same code could run headless. Nothing here imports textual, and
torch only loads inside the probe and record paths."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Callable

from engine.memory import GIB

Progress = Callable[[int, int, str], None]


class Cancelled(Exception):
    """Raised from a progress callback to stop work whose worker was cancelled."""


@dataclass(frozen=True)
class Advice:
    request: Any  # AdviseRequest
    cost_model: Any
    rec: Any  # Recommendation
    profile_source: str | None = None  # the cached profile priced with, if any


@dataclass(frozen=True)
class SweepPoint:
    budget_bytes: int
    tokens_per_s: dict  # candidate id -> tokens/s at this budget


@dataclass(frozen=True)
class ProbeOutcome:
    cost_model: Any | None  # None: not enough was measured to price with it
    fidelity: str
    measured: int = 0
    skipped: int = 0
    left: int = 0
    stopped: str | None = None  # "cancelled", "budget", "failed" or None
    source: str = ""  # the profile file
    error: str = ""


def build(choices, services, cpu_spec) -> Any:  # type: ignore[no-untyped-def]
    """The AdviseRequest for the app's choices (the same defaults as `cope advise`)."""
    from cope_tui.inputs import build_request

    args = choices.to_args(tokens=services.tokens, seed=services.seed)
    return build_request(args, detect_cpu=lambda: cpu_spec)


def cached_cost_model(request) -> tuple[Any, str | None]:  # type: ignore[no-untyped-def]
    """The combined cost model from the profile cache `cope advise` also uses, when it
    holds every atomic probe; else analytic. Never probes."""
    from engine.cost_model import AnalyticCostModel

    analytic = AnalyticCostModel(request.model, request.quant, request.platform,
                                 context_tokens=request.context_tokens)
    try:
        from engine.probe_plan import atomic_probes
        from probes.profile_cache import profile_path
        from probes.runner import cached_profile, measured_cost_model, profile_key

        profile = cached_profile(request)
        if profile is None:
            return analytic, None
        if profile.missing([p.ident for p in atomic_probes(request.model.top_k, request.threads, 0.0)]):
            return analytic, None
        source = str(profile_path(profile_key(request)))
        return measured_cost_model(request, "combined", profile, source), source
    except Exception:  # noqa: BLE001 - a bad cache entry must not stop the app
        return analytic, None


def compute_advice(request, cost_model=None, *, progress: Progress | None = None) -> Advice:  # type: ignore[no-untyped-def]
    from engine.advise import advise

    source = None
    if cost_model is None:
        cost_model, source = cached_cost_model(request)
    rec = advise(request, cost_model, progress=progress)
    return Advice(request, cost_model, rec, source)


def sweep_budgets_for(rec, n_points: int) -> list[int]:  # type: ignore[no-untyped-def]
    """VRAM budgets from just above what the non-expert weights need to the whole GPU."""
    top = rec.request.platform.gpu.vram_bytes.value or rec.request.vram_budget_bytes
    top = max(int(top), rec.request.vram_budget_bytes)
    low = rec.memory.fixed_bytes / (1 - 0.05) + 0.5 * GIB  # the margin scales with the budget
    low = math.ceil(low / (0.5 * GIB)) * 0.5 * GIB
    if low >= top or n_points < 2:
        return [top]
    step = (top - low) / (n_points - 1)
    return [int(low + i * step) for i in range(n_points)]


def sweep(advice: Advice, n_points: int, *, progress: Progress | None = None) -> list[SweepPoint]:
    """tokens/s of every candidate at a few VRAM budgets (engine.advise.sweep_budgets
    when the engine has it, else advise once per budget)."""
    from dataclasses import replace

    import engine.advise as adv

    budgets = sweep_budgets_for(advice.rec, n_points)
    sweep_fn = getattr(adv, "sweep_budgets", None)
    if sweep_fn is not None:
        recs = sweep_fn(advice.request, advice.cost_model, budgets, progress=progress)
    else:
        recs = []
        for i, b in enumerate(budgets):
            if progress:
                progress(i, len(budgets), f"{b / GIB:.1f} GiB")
            recs.append(adv.advise(replace(advice.request, vram_budget_bytes=b), advice.cost_model))
    return [
        SweepPoint(b, {e.candidate.id: e.tokens_per_s for e in r.estimates}) for b, r in zip(budgets, recs)
    ]


def run_probes(
    request,  # type: ignore[no-untyped-def]
    *,
    fidelity: str = "combined",
    budget_s: float = 60.0,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    make_prober=None,  # type: ignore[no-untyped-def]
) -> ProbeOutcome:
    """Probe into the shared profile cache (resuming what is there), then price with it.

    A cancelled or failed run keeps every measurement already written; the outcome says
    how many, and carries no cost model when the atomic probes are incomplete."""
    from engine.cost_model import AnalyticCostModel
    from probes.runner import ensure_profile, measured_cost_model

    analytic = AnalyticCostModel(request.model, request.quant, request.platform,
                                 context_tokens=request.context_tokens)

    def candidates():  # type: ignore[no-untyped-def]
        from engine.advise import advise

        rec = advise(request, analytic)
        return [(e.candidate.execution, e.stats) for e in rec.estimates]

    outcome = ensure_profile(
        request, fidelity, budget_s=budget_s, reprobe=False, candidates=candidates,
        make_prober=make_prober, cancel=cancel, progress=progress,
    )
    ran = outcome.ran
    counts = dict(measured=ran.measured, skipped=ran.skipped, left=ran.left, stopped=ran.stopped) if ran else {}
    try:
        from engine.policy import Execution

        model = measured_cost_model(request, fidelity, outcome.profile, outcome.source)
        k = request.model.top_k
        model.state_costs(Execution.SEQUENTIAL, request.threads, k, k)  # fail here, not while pricing
    except Exception as exc:  # noqa: BLE001 - incomplete profile: keep it, price analytically
        return ProbeOutcome(None, fidelity, source=outcome.source, error=str(exc), **counts)
    return ProbeOutcome(model, fidelity, source=outcome.source, **counts)


def record_trace(*, model: str, domain: str, tokens: int, progress: Progress, cancel: threading.Event) -> str:
    """Record a trace with transformers into the trace cache `cope trace record` uses."""
    from engine.cache_dirs import default_trace_path, model_label
    from engine.prompts import domain_prompts
    from engine.traces import save_trace
    from probes.record_hf import record_with_transformers

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    label = model_label(model)
    trace = record_with_transformers(model, domain_prompts(domain), tokens, device=device,
                                     progress=progress, cancel=cancel, model_name=label, domain=domain)
    out = default_trace_path(label, domain)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_trace(trace, out)
    return str(out)


@dataclass(frozen=True)
class CommandEstimate:
    """A pasted llama.cpp command priced beside COPE's best (what `cope estimate` shows)."""

    command: Any  # engine.llama_args.LlamaCommand
    request: Any  # the AdviseRequest it was priced with (the command's threads and context)
    fidelity: str
    maps_to: str  # the candidate kind the command's layer set is (partition-first, ..., or "layer set")
    yours: Any  # Estimate of the command's layer set
    best: Any  # COPE's best Estimate at the same settings
    rank: int  # where the command would rank among the candidates, 1 = fastest
    of: int  # candidates ranked
    runs: Any | None  # when the best cannot run on stock llama.cpp: the nearest that can
    notes: tuple[str, ...]

    @property
    def speedup(self) -> float:
        return self.yours.tpot_s / self.best.tpot_s


def parse_pasted(text: str) -> Any:
    """A pasted command line -> LlamaCommand; split like a shell would (shlex), never run.

    Raises CopeInputError with one line for anything unreadable."""
    import shlex

    from engine.errors import CopeInputError
    from engine.llama_args import parse_llama_command

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


def estimate_command(advice: Advice, command, *, progress: Progress | None = None) -> CommandEstimate:  # type: ignore[no-untyped-def]
    """Price the layer set `command` describes with the app's model, platform, trace and cost
    model; the command's -t and -c are honoured as `cope estimate` does (the ranking is then
    recomputed at those settings)."""
    from dataclasses import replace

    from engine.advise import advise
    from engine.layer_set import price_layer_set
    from engine.llama_args import command_notes, cpu_layers
    from engine.policy import Execution

    request, cost_model, rec = advice.request, advice.cost_model, advice.rec
    threads = command.threads or request.threads
    context = command.context or request.context_tokens
    if (threads, context) != (request.threads, request.context_tokens):
        request = replace(request, threads=threads, context_tokens=context)
        cost_model, _ = cached_cost_model(request)
        rec = advise(request, cost_model, progress=progress)
        recomputed = (f"COPE's best recomputed at the command's {threads} threads and context {context} "
                      f"(the app's ranking is at {advice.request.threads} threads, context "
                      f"{advice.request.context_tokens})")
    else:
        recomputed = None
    model = request.model
    cpu, placement_notes = cpu_layers(command, model)
    execution = Execution.STAGE if command.stages_cpu_experts and cpu.any() else Execution.SEQUENTIAL
    yours = price_layer_set(request, cost_model, cpu, execution=execution)
    best = rec.best
    notes = list(command_notes(command, model)) + list(placement_notes)
    if recomputed:
        notes.append(recomputed)
    if command.model_path:
        notes.append(f"-m {command.model_path}: priced as the app's model, {model.name} {request.quant.name} "
                     "(open that file in the Model pane to price it instead)")
    if yours.vram_used_bytes > request.vram_budget_bytes:
        notes.append(f"your placement needs {yours.vram_used_bytes / GIB:.1f} GiB of VRAM, over the budget of "
                     f"{request.vram_budget_bytes / GIB:.1f} GiB: llama.cpp would run out of memory")
    runs = None
    try:
        from cope_tui.commands.export import export_for

        export = export_for(rec, best, binary=command.tool if command.tool != "other" else "llama-server")
        if export.nearest_id is not None:
            runs = next((e for e in rec.estimates if e.candidate.id == export.exported_id), None)
    except Exception:  # noqa: BLE001 - the nearest runnable candidate is extra, not the estimate
        runs = None
    rank = 1 + sum(e.tpot_s < yours.tpot_s for e in rec.estimates)
    maps_to = layer_set_kind(cpu)
    if execution is Execution.STAGE:
        maps_to += " (stage)"
    return CommandEstimate(command, request, yours.fidelity, maps_to, yours, best, rank, len(rec.estimates), runs,
                           tuple(notes))


def layer_set_kind(cpu) -> str:  # type: ignore[no-untyped-def]
    """The candidate kind a CPU layer set ([L] bool) is, as the ranking names them."""
    import numpy as np

    cpu = np.asarray(cpu, dtype=bool)
    n = int(cpu.sum())
    if n == 0:
        return "all-gpu"
    if n == cpu.size:
        return "all-cpu"
    if cpu[:n].all():
        return "partition-first"
    if cpu[-n:].all():
        return "partition-last"
    return "layer set"
