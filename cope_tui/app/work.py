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
    from cope_tui.commands.trace_record import _model_label, default_trace_path, domain_prompts
    from engine.trace_io import save_trace
    from probes.record_hf import record_with_transformers

    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    label = _model_label(model)
    trace = record_with_transformers(model, domain_prompts(domain), tokens, device=device,
                                     progress=progress, cancel=cancel, model_name=label, domain=domain)
    out = default_trace_path(label, domain)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_trace(trace, out)
    return str(out)
