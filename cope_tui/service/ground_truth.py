"""Estimated against executed TPOT, per fidelity (DESIGN.md §6): what `cope validate` runs.

For each configuration (model, platform, CPU threads, VRAM budget): estimate every
candidate at each fidelity (the measured ones probe first, reusing the profile cache),
execute every candidate for real (probes.executor) with the replay setup its estimate
used, and compare; then, per fidelity, selection accuracy, top-3 recovery, MAPE and mean
Spearman (engine.advice.accuracy).

Without CUDA only the candidates that need no GPU (all-on-CPU) execute; the others are
reported as refused with the executor's reason. Their routed-expert work is measured for
real; the GPU-side work every candidate pays (shared layers, head, hand-over) cannot run
here and is added from the GPU preset, so the "CPU target" also reports the error of
the expert work alone.

Across thread counts, every candidate executed at more than one is checked for
scaling (engine.advice.thread_speedup): the speed-up its execution achieved from the fewest
threads to N against the one each fidelity's estimates imply; more than 15% apart is a
warning (the executor or the probes do not use the threads they were given).

Every configuration is reported through `on_config` as soon as it is done, so a run cut
short (a time limit, Ctrl-C) keeps what it finished. A candidate the device cannot hold
(out of memory) is refused like any other, and the run goes on.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from cope_tui.options import PlanChoices
from cope_tui.service import pricing
from cope_tui.service.request import build_request
from engine.advice.accuracy import config_accuracy, summarize
from engine.advice.advise import sweep_budgets
from engine.advice.repeat_noise import noise_verdict, repeat_groups
from engine.advice.thread_speedup import SPEEDUP_TOLERANCE, describe, speedup_checks
from engine.core.progress import check_cancel
from engine.cost.cost_models import analytic_model
from engine.cost.cost_model import Fidelity
from engine.hardware.memory import GIB, plan_memory
from engine.core.errors import CopeInputError
from probes.executor import ExecutionRefused, Executor, NotEnoughMemory

CPU_TARGET = 0.10
EXECUTOR_FACTORY = None  # tests put a fake executor factory here: f(model, quant, context_tokens, mode)


@dataclass(frozen=True)
class GroundTruthSettings:
    base: PlanChoices  # quant, gpu, cpu, trace, tokens, seed, context (model and threads vary)
    models: tuple[str, ...]
    threads: tuple[int, ...]
    budgets_gib: tuple[float, ...]
    fidelities: tuple[Fidelity, ...]  # in the order of Fidelity
    probe_budget_s: float = 30.0
    reprobe: bool = False
    mode: str = "timed"  # or "functional": both tiers on the CPU, times mean nothing
    max_seconds: float | None = None  # stop probing and executing after this long


@dataclass
class _Progress:
    """What the run has gathered so far (mutable while it runs; the report is frozen)."""

    configurations: list[dict] = field(default_factory=list)
    per_fidelity: dict[str, list] = field(default_factory=dict)
    cpu_target: list[dict] = field(default_factory=list)
    probing: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stopped: bool = False


@dataclass(frozen=True)
class GroundTruthReport:
    settings: GroundTruthSettings
    cuda_device: str | None
    date_iso: str
    configurations: tuple[dict, ...]
    summary: dict[str, dict]
    cpu_target: dict[str, Any]
    probing: dict[str, Any]
    thread_scaling: dict[str, Any]
    elapsed_s: float
    notes: tuple[str, ...]
    complete: bool

    def to_dict(self) -> dict[str, Any]:
        # by hand: `cope validate`'s document: the command's name first, its settings spread out
        return {
            "command": "cope validate",
            "date_iso": self.date_iso,
            "mode": self.settings.mode,
            "cuda_device": self.cuda_device,
            "fidelities": [f.value for f in self.settings.fidelities],
            "configurations": list(self.configurations),
            "summary": self.summary,
            "cpu_target": self.cpu_target,
            "probing": self.probing,
            "thread_scaling": self.thread_scaling,
            "elapsed_s": self.elapsed_s,
            "notes": list(self.notes),
            "complete": self.complete,
        }


def cuda_device() -> str | None:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return None
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def _make_executor(model, quant, context_tokens: int, mode: str):  # type: ignore[no-untyped-def]
    if EXECUTOR_FACTORY is not None:
        return EXECUTOR_FACTORY(model, quant, context_tokens, mode)
    try:
        return Executor(model, quant, mode=mode, context_tokens=context_tokens)
    except NotEnoughMemory as exc:  # before anything was allocated: one line
        raise CopeInputError(str(exc)) from None


def run_ground_truth(settings: GroundTruthSettings, *, on_config: Callable[[GroundTruthReport], None] | None = None,
                     say: Callable[[str], None] | None = None,
                     cancel: threading.Event | None = None) -> GroundTruthReport:
    """Estimate and execute every configuration; `on_config(report so far)` after each."""
    started = time.perf_counter()
    run = _Progress(per_fidelity={f.value: [] for f in settings.fidelities})
    device = cuda_device()
    executors: dict[str, Any] = {}

    def report(complete: bool) -> GroundTruthReport:
        return _report(settings, run, device, time.perf_counter() - started, complete)

    def out_of_time() -> bool:
        return settings.max_seconds is not None and time.perf_counter() - started > settings.max_seconds

    for model_id in settings.models:
        for threads in settings.threads:
            check_cancel(cancel)
            if out_of_time():
                run.stopped = True
                run.notes.append(f"{model_id} at {threads} threads: not probed nor run (--max-seconds reached)")
                continue
            if say:
                say(f"{model_id}, {threads} threads: estimating")
            for config in _configurations(settings, model_id, threads, run, executors, out_of_time, cancel):
                run.configurations.append(config)
                if on_config:
                    on_config(report(False))
    return report(True)


def _configurations(settings, model_id, threads, run, executors, out_of_time, cancel):  # type: ignore[no-untyped-def]
    """The configurations of one model and thread count, one budget at a time."""
    request = build_request(settings.base.with_(model=model_id, threads=threads,
                                                vram_budget_gib=settings.budgets_gib[0]))
    model, quant = request.model, request.quant
    fits = [b for b in settings.budgets_gib
            if plan_memory(model, quant, vram_budget_bytes=int(b * GIB),
                           context_tokens=request.context_tokens).fits_at_all]
    run.notes.extend(f"{model.id}: a {b:g} GiB budget cannot hold the non-expert weights; skipped"
                     for b in settings.budgets_gib if b not in fits)
    if not fits:
        return
    recs = {}
    # Combined first: it probes the schedules as well as the atomic operators, which atomic
    # then reuses from the cache (the other way round, combined would find the atomic
    # profile complete and probe no schedule). --reprobe: once, by the first measured one.
    reprobe = settings.reprobe
    for f in sorted(settings.fidelities, key=lambda x: {"combined": 0, "atomic": 1}.get(x.value, 2)):
        t0 = time.perf_counter()
        # The executor runs the probe's CPU kernel, so its estimates price that kernel too.
        cm = pricing.choose_cost_model(request, fidelity=f, probe_budget_s=settings.probe_budget_s,
                               reprobe=reprobe and f.needs_profile, cancel=cancel, kernels="probe").cost_model
        if f.needs_profile:
            reprobe = False
            run.probing.append({"model": model.id, "threads": threads, "fidelity": f.value,
                                "seconds": time.perf_counter() - t0})
        recs[f.value] = sweep_budgets(request, cm, [int(b * GIB) for b in fits], cancel=cancel)
    split_from = settings.fidelities[-1].value  # ready-first's lane split: the most accurate asked for
    if model.id not in executors:
        executors[model.id] = _make_executor(model, quant, request.context_tokens, settings.mode)
    executor = executors[model.id]
    analytic = analytic_model(request, as_probed=True)  # the executor attends to half the context, F16 cache
    for i, budget in enumerate(fits):
        memory = recs[split_from][i].memory
        executor.budget = memory.runtime_expert_room_bytes()
        estimates = {f: {e.candidate.id: e for e in recs[f][i].estimates} for f in recs}
        rows, measured = [], {}
        for est in recs[split_from][i].estimates:
            check_cancel(cancel)
            row = _execute(executor, est, request, threads, analytic, out_of_time)
            lanes = (row["executed"] or {}).get("cpu_lane_threads") or {}
            off = {where: ran for where, ran in lanes.items() if set(ran) != {threads}}
            if off:
                run.notes.append(f"{model.id} {est.candidate.id} at {threads} threads: the executor's CPU lane ran "
                                 f"with {off} torch threads")
            row["estimated_tpot_s"] = {f.value: estimates[f.value][est.candidate.id].tpot_s
                                       for f in settings.fidelities}
            rows.append(row)
            if row["refused"] == NOT_RUN:
                run.stopped = True
            if row["measured_tpot_s"] is None:
                continue
            measured[est.candidate.id] = row["measured_tpot_s"]
            if est.candidate.kind.value == "all-cpu" and settings.mode == "timed":
                run.cpu_target.extend(_cpu_target_rows(model.id, threads, budget, estimates, est.candidate.id, row))
        accuracy = {}
        for f in settings.fidelities:
            acc = config_accuracy({cid: e.tpot_s for cid, e in estimates[f.value].items()}, measured)
            run.per_fidelity[f.value].append(acc)
            accuracy[f.value] = acc.to_dict()
        yield {
            "model": model.id, "quantization": quant.name,
            "platform": {"gpu": request.platform.gpu.name, "cpu": request.platform.cpu.name,
                         "executed_on_gpu": cuda_device()},
            "threads": threads, "vram_budget_gib": budget, "tokens": request.trace.n_tokens,
            "ready_first_split_from": split_from, "candidates": rows, "accuracy": accuracy,
        }


NOT_RUN = "not run: --max-seconds reached"


def _execute(executor, est, request, threads, analytic, out_of_time) -> dict:  # type: ignore[no-untyped-def]
    """One candidate executed with what its estimate replayed (its setup and, for a
    partition, its layers); a refusal (no GPU, over budget, out of memory) is its row."""
    c = est.candidate
    row: dict[str, Any] = {"candidate": c.id, "estimated_tpot_s": {}, "measured_tpot_s": None, "refused": None,
                           "executed": None}
    if out_of_time():
        row["refused"] = NOT_RUN
        return row
    try:
        result = executor.run(c, request.trace, est.setup, threads=threads, cpu_layers=est.cpu_layers)
    except ExecutionRefused as exc:
        row["refused"] = str(exc)
        return row
    # Medians over tokens: robust to bursts of load from elsewhere on the machine.
    tpot = result.tpot_median_s
    if result.gpu_side == "not executed":
        syncs = _handover_steps(result.counts, c.execution) / result.n_tokens
        gpu_side = analytic.shared_per_token_s() + analytic.token_overhead_s() + syncs * analytic.a.sync_s
        tpot = result.experts_median_s + gpu_side
        row["gpu_side_from_preset_s"] = gpu_side
    stats = est.stats
    row["counts_match_replay"] = bool(result.counts.shape == stats.counts.shape and (result.counts == stats.counts).all())
    row["measured_tpot_s"] = tpot
    row["measured_experts_s"] = result.experts_median_s
    row["gpu_side"] = result.gpu_side
    row["executed"] = result.summary()
    return row


def _handover_steps(counts, execution) -> int:  # type: ignore[no-untyped-def]
    """Layer steps that hand the hidden state to the CPU and back (a CPU lane ran)."""
    if execution.value == "stage":
        return 0
    k = counts.shape[1] - 1
    return int(counts[:, :k, :].sum())


def _cpu_target_rows(model_id, threads, budget, estimates, candidate_id, row) -> list[dict]:  # type: ignore[no-untyped-def]
    tpot, experts = row["measured_tpot_s"], row["measured_experts_s"]
    out = []
    for f, by_id in estimates.items():
        e = by_id[candidate_id]
        est_experts = e.breakdown.experts_critical_s - e.breakdown.sync_s
        out.append({
            "model": model_id, "threads": threads, "vram_budget_gib": budget, "fidelity": f,
            "estimated_tpot_s": e.tpot_s, "measured_tpot_s": tpot, "error": (e.tpot_s - tpot) / tpot,
            "estimated_experts_s": est_experts, "measured_experts_s": experts,
            "experts_error": (est_experts - experts) / experts, "gpu_side": row["gpu_side"],
        })
    return out


def _report(settings: GroundTruthSettings, run: _Progress, device: str | None, elapsed_s: float,
            complete: bool) -> GroundTruthReport:
    notes = list(run.notes)
    if device is None and settings.mode == "timed":
        notes.append("no CUDA device: only candidates needing no GPU executed (all-on-CPU); the others are refused, "
                     "and the GPU-side work of executed ones (shared layers, head, hand-over) comes from the preset")
    if settings.mode == "functional":
        notes.append("functional mode: both tiers ran on the CPU; measured times do not describe a real machine")
    if run.stopped:
        notes.append(f"--max-seconds {settings.max_seconds:g} reached: some candidates were not run")
    if not complete:
        notes.append("partial: the run had not finished when this was written")
    targets = {}
    for f in settings.fidelities:
        rows = [r for r in run.cpu_target if r["fidelity"] == f.value]
        if rows:
            worst = max(abs(r["error"]) for r in rows)
            worst_experts = max(abs(r["experts_error"]) for r in rows)
            targets[f.value] = {"worst_abs_error": worst, "worst_abs_experts_error": worst_experts,
                                "met": worst < CPU_TARGET and worst_experts < CPU_TARGET}
    # The all-on-CPU candidate's executions at one thread count are repeats (one a budget).
    repeats = repeat_groups(run.cpu_target)
    return GroundTruthReport(
        settings, device, datetime.now(timezone.utc).isoformat(timespec="seconds"), tuple(run.configurations),
        {f: summarize(accs) for f, accs in run.per_fidelity.items()},
        {"rows": list(run.cpu_target), "by_fidelity": targets, "threshold": CPU_TARGET,
         "repeats": [g.to_dict() for g in repeats], "noise": noise_verdict(repeats, CPU_TARGET)},
        {"runs": list(run.probing), "total_s": sum(p["seconds"] for p in run.probing)},
        thread_scaling(run.configurations, [f.value for f in settings.fidelities]),
        elapsed_s, tuple(notes), complete,
    )


def thread_scaling(configurations: list[dict], fidelities: list[str]) -> dict[str, Any]:
    """Per (model, budget, candidate) executed at several thread counts, and fidelity:
    the speed-up executed from the fewest threads to each other against the estimates'."""
    seen: dict[tuple, tuple[dict, dict]] = {}
    for cfg in configurations:
        for row in cfg["candidates"]:
            if row["measured_tpot_s"] is None:
                continue
            estimated, executed = seen.setdefault((cfg["model"], cfg["vram_budget_gib"], row["candidate"]), ({}, {}))
            executed[cfg["threads"]] = row["measured_tpot_s"]
            for f, tpot in row["estimated_tpot_s"].items():
                estimated.setdefault(f, {})[cfg["threads"]] = tpot
    rows, warnings = [], []
    for (model, budget, candidate), (estimated, executed) in seen.items():
        for f in fidelities:
            for check in speedup_checks(estimated.get(f, {}), executed):
                rows.append({"model": model, "vram_budget_gib": budget, "candidate": candidate, "fidelity": f,
                             **check.to_dict()})
                if check.warn:
                    warnings.append(f"{model} {candidate} budget {budget:g} GiB, {f}: {describe(check)}: "
                                    f"more than {SPEEDUP_TOLERANCE:.0%} apart")
    return {"tolerance": SPEEDUP_TOLERANCE, "rows": rows, "warnings": warnings}
