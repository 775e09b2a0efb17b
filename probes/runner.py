"""Run a probe plan (engine.probe_plan) into the profile cache (probes.profile_cache).

Atomic probes first, then the combined layer steps, most frequent first; a total
budget in seconds, a cancel flag and a progress callback (done, total, label). Each
measurement is written as it comes (ProfileWriter), so an interrupted run, Ctrl-C and
SIGTERM included, keeps what it measured, marked partial: the next run resumes it
(measures only what is missing, and says so in its RunResult). `reprobe` measures into
a side file and replaces the cached profile only once the new one is complete.

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

from engine.analytic_cost import AnalyticCostModel
from engine.probe_plan import ProbePlan, atomic_probes, plan_probes
from engine.profile import Measurement, ModelShape, Profile, Provenance
from engine.profile_keys import cache_key
from probes.local_prober import GPU_OPERATORS, LocalProber, PresetGpu
from probes.profile_cache import ProfileWriter, is_partial, load_cached

if TYPE_CHECKING:
    from engine.advise import AdviseRequest

MIN_SHARE_S = 0.05
Progress = Callable[[int, int, str], None]


class Prober(Protocol):
    kernel_stand_ins: dict[str, str]

    def measure(self, operator: str, key: dict, share_s: float) -> Measurement: ...


@dataclass(frozen=True)
class RunResult:
    measured: int  # measurements taken in this run
    skipped: int  # already in the profile
    left: int  # not reached (budget or cancel)
    stopped: str | None  # "budget", "cancelled" or None
    elapsed_s: float
    resumed: int = 0  # measurements an interrupted earlier run had left in the cache


def _label(operator: str, key: dict) -> str:
    return operator + "".join(f" {k}={v}" for k, v in sorted(key.items()))


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

    The atomic probes always run (every measured fidelity needs them); combined states
    stop at the budget. A KeyboardInterrupt flushes what was measured and propagates.
    """
    budget_s = plan.budget_s if budget_s is None else budget_s
    wanted = [(p.operator, dict(p.key), p.probe_s, True) for p in plan.atomic]
    wanted += [("schedule", s.state.key, s.probe_s, False) for s in plan.states]
    todo = [w for w in wanted if writer.missing([(w[0], w[1])])]
    skipped = len(wanted) - len(todo)
    total = len(todo)
    start = clock()
    done = 0
    stopped = None
    try:
        for operator, key, probe_s, atomic in todo:
            if cancel is not None and cancel.is_set():
                stopped = "cancelled"
                break
            spent = clock() - start
            if not atomic and spent >= budget_s:
                stopped = "budget"
                break
            label = _label(operator, key)
            if progress:
                progress(done, total, label)
            share = max(MIN_SHARE_S, min(probe_s, (budget_s - spent) / max(total - done, 1)))
            t0 = clock()
            measurement = prober.measure(operator, key, share)
            writer.add(measurement, elapsed_s=clock() - t0)
            done += 1
    finally:
        writer.flush()
    if progress:
        progress(done, total, stopped or "done")
    return RunResult(done, skipped, total - done, stopped, clock() - start)


# --- the local machine ---------------------------------------------------------------


def hardware_key(request: "AdviseRequest", cuda: Any = None) -> dict:
    """What the profile depends on besides the model shape, without importing torch:
    the platform planned for, and the device the probes measure on, by its NVML UUID,
    the torch build and whether CUDA works (torch.cuda.is_available() when torch is
    imported, else what probes.cuda_check predicts), so a profile measured without CUDA
    is never reused as one measured with it. `cuda`: (CudaFacts, device UUID) for tests."""
    from probes.cuda_check import local_cuda_facts, local_device_uuid, predicted_usable

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


def model_shape(request: "AdviseRequest") -> ModelShape:
    return ModelShape(request.model.id, request.model.expert_bytes(request.quant), request.quant.name)


def profile_key(request: "AdviseRequest") -> str:
    return cache_key(hardware_key(request), model_shape(request).to_dict())


def cached_profile(request: "AdviseRequest", root: str | os.PathLike | None = None) -> Profile | None:
    return load_cached(profile_key(request), root)


def cached_profile_complete(request: "AdviseRequest", root: str | os.PathLike | None = None) -> tuple[Profile, str] | None:
    """(profile, its file) when the cache holds every atomic probe of `request`, else None."""
    key = profile_key(request)
    if is_partial(key, root):
        return None  # an interrupted run's partial work: a measured fidelity resumes it
    cached = load_cached(key, root)
    if cached is None or cached.missing([p.ident for p in atomic_probes(request.model.top_k, request.threads, 0.0)]):
        return None
    return cached, str(_path(key, root))


def cached_profile_partial(request: "AdviseRequest", root: str | os.PathLike | None = None) -> bool:
    """Whether the cache holds the partial work of an interrupted probe run for `request`."""
    return is_partial(profile_key(request), root)


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
    fidelity: str,
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
    if fidelity not in ("atomic", "combined"):
        raise ValueError(f"fidelity {fidelity!r} needs no profile")
    threads, k = request.threads, request.model.top_k
    complete = None if reprobe else cached_profile_complete(request, root)
    if complete is not None:
        return ProfileOutcome(*complete, None)

    analytic = AnalyticCostModel(request.model, request.quant, request.platform,
                                 context_tokens=request.context_tokens)
    prober = make_prober() if make_prober else LocalProber(request.model, request.quant, PresetGpu(analytic),
                                                           context_tokens=request.context_tokens)
    cuda = bool(getattr(prober, "cuda", False))
    if fidelity == "combined" and candidates is not None:
        plan = plan_probes(candidates(), threads=threads, budget_s=budget_s, probe_s=probe_seconds(cuda))
    else:
        plan = ProbePlan(atomic_probes(k, threads, probe_seconds(cuda)), (), (), float(budget_s), threads)
    base = Profile(_provenance(prober, budget_s), model_shape(request), hardware_key(request))
    writer = ProfileWriter(base, root=root, resume=not reprobe, staging=reprobe)
    writer.start()
    result = run_plan(plan, writer, prober, budget_s=budget_s, cancel=cancel, progress=progress)
    finished = result.stopped != "cancelled"  # a KeyboardInterrupt propagates from run_plan: no commit either
    if finished:
        writer.commit()
    source = writer.path if finished else writer.file  # a cancelled reprobe's work is in its side file
    return ProfileOutcome(writer.profile, str(source), replace(result, resumed=writer.resumed))


def _path(key: str, root) -> Path:
    from probes.profile_cache import profile_path

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
