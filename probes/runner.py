"""Run a probe plan (engine.profiles.probe_plan) into the profile cache (probes.profile_cache).

Atomic probes first, then the combined layer steps, most frequent first; a total
budget in seconds, a cancel flag and a progress callback (done, total, label). Each
measurement is written as it comes (ProfileWriter), so an interrupted run, Ctrl-C and
SIGTERM included, keeps what it measured, marked partial: the next run resumes it
(measures only what is missing, and says so in its RunResult). `reprobe` measures into
a side file and replaces the cached profile only once the new one is complete.

Every series of the atomic probes (CPU experts at the thread count, GPU experts, copies,
and each single operator) is checked for consistency once measured
(engine.profiles.probe_consistency: more experts never faster, repeats not spread wide); one that
fails is measured once more, and one that fails again is refused: not kept, recorded in
the profile with a line saying which figure and why, so pricing says it and stays
analytic for what the series would have priced, and the next run measures it again.

With CUDA every operator is measured, the shared layer and the head included, and
each combined state is one real layer step (probes.layer_step) timed as a whole
(method "timed-step"), the GPU side as a runtime runs it: CUDA graphs, CUDA events, the
GPU kept busy while the host queues a step, one host wait per step. On a machine
without a GPU the CPU side is measured for real and the GPU-side operators
(gpu_experts, h2d_copy, sync, shared_layer, token_head) come from the analytic model
of the chosen GPU preset, with basis "preset" (the profile's GPU name says why when an
NVIDIA GPU is there but torch cannot use it); a layer step that mixes a measured CPU
lane with preset GPU lanes has basis "measured+preset" and method "composed".

torch is imported only when something is measured.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from engine.cost.cost_model import Fidelity
from engine.cost.cost_models import analytic_model
from engine.profiles.probe_consistency import check_profile, check_series, refusal_note, series_in, series_refs
from engine.profiles.probe_plan import ProbePlan, atomic_probes, plan_probes
from engine.profiles.profile import Measurement, ProbedModel, Profile, Provenance, Refusal
from engine.profiles.profile_keys import cache_key
from probes.cuda_check import local_cuda_facts, local_device_uuid, predicted_usable
from probes.local_prober import GPU_OPERATORS, LocalProber, PresetGpu
from probes.profile_cache import ProfileWriter, is_partial, load_cached, profile_path

if TYPE_CHECKING:
    from engine.cost.request import AdviseRequest

MIN_SHARE_S = 0.05
Progress = Callable[[int, int, str], None]


class Prober(Protocol):
    kernel_stand_ins: dict[str, str]

    def measure(self, operator: str, key: dict, share_s: float) -> Measurement: ...


@dataclass(frozen=True)
class RunResult:
    measured: int  # measurements taken in this run (a series measured again counts again)
    skipped: int  # already in the profile
    left: int  # not reached (budget, cancel or a refusal)
    stopped: str | None  # "budget", "cancelled", "refused" or None
    elapsed_s: float
    resumed: int = 0  # measurements an interrupted earlier run had left in the cache
    refused: tuple[str, ...] = ()  # a line for each series refused (engine.profiles.probe_consistency)


def _label(operator: str, key: dict) -> str:
    return operator + "".join(f" {k}={v}" for k, v in sorted(key.items()))


Wanted = tuple[str, dict, float]  # (operator, key, probe seconds)


class _Run:
    """One run's measuring: the counters, the budget, the cancel flag and the progress."""

    def __init__(self, writer: ProfileWriter, prober: Prober, total: int, budget_s: float,
                 cancel: threading.Event | None, progress: Progress | None, clock: Callable[[], float]):
        self.writer, self.prober, self.total, self.budget_s = writer, prober, total, budget_s
        self.cancel, self.progress, self.clock = cancel, progress, clock
        self.start = clock()
        self.done = 0

    def measure_all(self, todo: list[Wanted], *, atomic: bool, suffix: str = "") -> str | None:
        """Measure `todo` in order; why it stopped early ("cancelled", "budget"), or None.
        Atomic probes ignore the budget (every measured fidelity needs them)."""
        for operator, key, probe_s in todo:
            if self.cancel is not None and self.cancel.is_set():
                return "cancelled"
            spent = self.clock() - self.start
            if not atomic and spent >= self.budget_s:
                return "budget"
            if self.progress:
                self.progress(self.done, self.total, _label(operator, key) + suffix)
            share = max(MIN_SHARE_S, min(probe_s, (self.budget_s - spent) / max(self.total - self.done, 1)))
            t0 = self.clock()
            measurement = self.prober.measure(operator, key, share)
            self.writer.add(measurement, elapsed_s=self.clock() - t0)
            self.done += 1
        return None


def run_plan(
    plan: ProbePlan,
    writer: ProfileWriter,
    prober: Prober,
    *,
    budget_s: float | None = None,
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> RunResult:
    """Measure what `plan` asks for and `writer` lacks, atomic probes first.

    The atomic probes always run (every measured fidelity needs them); then each of
    their series is checked (engine.profiles.probe_consistency), one that fails is measured once
    more, and one that fails again is refused: dropped from the profile with a note, and
    the combined states are not measured (the machine was not measuring steadily).
    Combined states stop at the budget. A KeyboardInterrupt flushes what was measured
    and propagates.
    """
    budget_s = plan.budget_s if budget_s is None else budget_s
    atomic = [(p.operator, dict(p.key), p.probe_s) for p in plan.atomic if writer.missing([p.ident])]
    states = [("schedule", s.state.key, s.probe_s) for s in plan.states if writer.missing([s.state.ident])]
    skipped = len(plan.atomic) + len(plan.states) - len(atomic) - len(states)
    run = _Run(writer, prober, len(atomic) + len(states), budget_s, cancel, progress, clock)
    refused: tuple[str, ...] = ()
    try:
        stopped = run.measure_all(atomic, atomic=True)
        if stopped is None:
            stopped, refused = _recheck_series(run, plan)
        if stopped is None:
            stopped = run.measure_all(states, atomic=False)
    finally:
        writer.flush()
    if progress:
        progress(run.done, run.total, stopped or "done")
    return RunResult(run.done, skipped, run.total - run.done, stopped, clock() - run.start, refused=refused)


def _recheck_series(run: _Run, plan: ProbePlan) -> tuple[str | None, tuple[str, ...]]:
    """Check every series of the plan's atomic probes; measure a failing one once more,
    refuse it when it fails again. (why it stopped, the refusal lines)."""
    writer = run.writer
    probe_s = {p.ident: p.probe_s for p in plan.atomic}
    refs = series_refs(m for m in writer.profile.measurements if m.ident in probe_s)
    failing = {v.series: v for v in check_profile(writer.profile, refs)}
    refused = []
    for ref in refs:
        first = failing.get(ref)
        if first is None:
            writer.accept(ref.operator, dict(ref.fixed))
            continue
        again = [(m.operator, m.key_dict, probe_s[m.ident]) for m in series_in(writer.profile, ref) if m.ident in probe_s]
        run.total += len(again)
        stopped = run.measure_all(again, atomic=True, suffix=f" (again: {first.kind} check failed)")
        if stopped is not None:
            return stopped, tuple(refused)
        second = check_series(ref, series_in(writer.profile, ref))
        if second.ok:
            writer.accept(ref.operator, dict(ref.fixed))
            continue
        note = refusal_note(first, second)
        writer.refuse(Refusal(ref.operator, ref.fixed, note))
        refused.append(note)
    return ("refused" if refused else None), tuple(refused)


# --- the local machine ---------------------------------------------------------------


def hardware_key(request: "AdviseRequest", cuda: Any = None) -> dict:
    """What the profile depends on besides the model shape, without importing torch:
    the platform planned for, and the device the probes measure on, by its NVML UUID,
    the torch build and whether CUDA works (torch.cuda.is_available() when torch is
    imported, else what probes.cuda_check predicts), so a profile measured without CUDA
    is never reused as one measured with it. `cuda`: (CudaFacts, device UUID) for tests."""
    facts, uuid = cuda if cuda is not None else (local_cuda_facts(), local_device_uuid())
    p = request.platform
    return {
        "cpu": p.cpu.name,
        "cpu_preset": p.cpu.preset_id or "",
        "gpu": p.gpu.name,
        "gpu_preset": p.gpu.preset_id or "",
        "gpu_uuid": uuid,
        "torch": facts.torch_version or "",
        "torch_cuda": facts.torch_cuda or "",
        "cuda_available": predicted_usable(facts),
        "context_tokens": int(request.context_tokens),
    }


def model_shape(request: "AdviseRequest") -> ProbedModel:
    return ProbedModel(request.model.id, request.model.expert_bytes(request.quant), request.quant.name)


def profile_key(request: "AdviseRequest") -> str:
    return cache_key(hardware_key(request), model_shape(request).to_dict())


def cached_profile(request: "AdviseRequest", root: str | os.PathLike | None = None) -> Profile | None:
    return load_cached(profile_key(request), root)


def cached_profile_complete(request: "AdviseRequest", root: str | os.PathLike | None = None) -> tuple[Profile, str] | None:
    """(profile, its file) when the cache holds every atomic probe of `request`, none of
    them an interrupted run's partial work and every series of them consistent; else None."""
    key = profile_key(request)
    if is_partial(key, root, request.threads):
        return None  # an interrupted run's partial work: a measured fidelity resumes it
    cached = load_cached(key, root)
    if cached is None or not trusted_at(cached, request.model.top_k, request.threads):
        return None
    return cached, str(_path(key, root))


def trusted_at(profile: Profile, top_k: int, threads: int) -> bool:
    """Whether `profile` has every atomic probe at `threads` and each of their series
    passes its consistency check (a profile measured before the check may not)."""
    wanted = [p.ident for p in atomic_probes(top_k, threads, 0.0)]
    return not profile.missing(wanted) and not check_profile(profile, _atomic_series(profile, wanted))


def cached_profile_partial(request: "AdviseRequest", root: str | os.PathLike | None = None) -> bool:
    """Whether the cache holds the partial work of an interrupted probe run at the
    request's thread count."""
    return is_partial(profile_key(request), root, request.threads)


def cached_profile_doubts(request: "AdviseRequest", root: str | os.PathLike | None = None) -> tuple[str, ...]:
    """A line for each series at the request's thread count that the cached profile
    refused, or holds but fails its consistency check; () when none (or no profile)."""
    cached = load_cached(profile_key(request), root)
    if cached is None:
        return ()
    threads = request.threads
    lines = [r.note for r in cached.refused if dict(r.fixed).get("threads", threads) == threads]
    wanted = [p.ident for p in atomic_probes(request.model.top_k, threads, 0.0)]
    lines += [f"{v.series.label} refused: {v.problem} (in the cached profile; --fidelity combined measures it again)"
              for v in check_profile(cached, _atomic_series(cached, wanted))]
    return tuple(lines)


def _atomic_series(profile: Profile, wanted: list) -> list:
    present = set(wanted)
    return series_refs(m for m in profile.measurements if m.ident in present)


def probe_seconds(cuda: bool) -> Callable[[str, dict], float]:
    def estimate(operator: str, key: dict) -> float:
        if operator in GPU_OPERATORS:
            return 0.2 if cuda else 0.0
        if operator == "cpu_experts":
            return 0.4
        return 0.8

    return estimate


@dataclass(frozen=True)
class ProfileOutcome:
    profile: Profile
    source: str
    ran: RunResult | None  # None: the cache had what was needed


def ensure_profile(
    request: "AdviseRequest",
    fidelity: Fidelity,
    *,
    budget_s: float = 60.0,
    reprobe: bool = False,
    root: str | os.PathLike | None = None,
    candidates: Callable[[], list] | None = None,
    make_prober: Callable[[], Prober] | None = None,
    cancel: threading.Event | None = None,
    progress: Progress | None = None,
) -> ProfileOutcome:
    """The profile `fidelity` needs: the cached one when it has every atomic probe
    (and not `reprobe`), else one measured now within `budget_s`, resuming from the
    cache. `candidates()` gives [(Execution, ReplayStats)] for the combined plan."""
    if not fidelity.needs_profile:
        raise ValueError(f"fidelity {fidelity.value!r} needs no profile")
    threads, k = request.threads, request.model.top_k
    complete = None if reprobe else cached_profile_complete(request, root)
    if complete is not None:
        return ProfileOutcome(*complete, None)

    analytic = analytic_model(request, as_probed=True)  # the preset lanes of what the probes run
    prober = make_prober() if make_prober else LocalProber(request.model, request.quant, PresetGpu(analytic),
                                                           context_tokens=request.context_tokens)
    cuda = bool(getattr(prober, "cuda", False))
    if fidelity is Fidelity.COMBINED and candidates is not None:
        plan = plan_probes(candidates(), threads=threads, budget_s=budget_s, probe_s=probe_seconds(cuda))
    else:
        plan = ProbePlan(atomic_probes(k, threads, probe_seconds(cuda)), (), (), float(budget_s), threads)
    base = Profile(_provenance(prober, budget_s), model_shape(request), hardware_key(request))
    writer = ProfileWriter(base, root=root, resume=not reprobe, staging=reprobe, threads=threads)
    try:
        writer.start()
        result = run_plan(plan, writer, prober, budget_s=budget_s, cancel=cancel, progress=progress)
        finished = result.stopped != "cancelled"  # a KeyboardInterrupt propagates from run_plan: no commit either
        if finished:
            writer.commit()
    finally:
        writer.release()  # another run may write the profile now (the marker stays unless committed)
    source = writer.path if finished else writer.file  # a cancelled reprobe's work is in its side file
    return ProfileOutcome(writer.profile, str(source), replace(result, resumed=writer.resumed))


def _path(key: str, root) -> Path:
    return profile_path(key, root)


def _provenance(prober: Any, budget_s: float) -> Provenance:
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover
        torch_version = "not installed"
    return Provenance(
        host=socket.gethostname(),
        gpu_name=str(getattr(prober, "gpu_name", "unknown")),
        driver=str(getattr(prober, "driver", "")),
        torch_version=torch_version,
        date_iso=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        probe_budget_s=float(budget_s),
        probe_used_s=0.0,
        kernel_stand_ins=dict(getattr(prober, "kernel_stand_ins", {})),
    )
