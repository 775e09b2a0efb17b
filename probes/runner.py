"""Run a probe plan (engine.probe_plan) into the profile cache (probes.profile_cache).

Atomic probes first, then the combined layer steps, most frequent first; a total
budget in seconds, a cancel flag and a progress callback (done, total, label). Each
measurement is written as it comes (ProfileWriter), so an interrupted run, Ctrl-C
included, keeps what it measured and the next run skips it.

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
from typing import Any, Protocol

from engine.cost_model import AnalyticCostModel, compose_step
from engine.policy import Execution
from engine.probe_plan import ProbePlan, atomic_probes, plan_probes
from engine.profile import Measurement, ModelShape, Profile, Provenance
from engine.profile_keys import cache_key
from probes.profile_cache import ProfileWriter, load_cached

GPU_OPERATORS = frozenset({"gpu_experts", "h2d_copy", "sync", "shared_layer", "token_head"})
FIDELITIES = ("analytic", "atomic", "combined")
MIN_SHARE_S = 0.05
STAGING_SLOTS = 8  # the bounded staging buffer of stage and ready-first, in experts
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


class PresetGpu:
    """GPU-side operators from the analytic model of a GPU preset (basis "preset")."""

    def __init__(self, analytic: AnalyticCostModel):
        self.analytic = analytic

    def seconds(self, operator: str, key: dict) -> float:
        a = self.analytic
        if operator == "gpu_experts":
            return a.gpu_experts_s(key["n"])
        if operator == "h2d_copy":
            return a.copy_experts_s(key["n"])
        if operator == "sync":
            return a.a.sync_s
        if operator == "shared_layer":
            return a.shared_per_token_s() / a.model.n_blocks
        if operator == "token_head":
            return a.token_overhead_s()
        raise ValueError(f"{operator} is not a GPU-side operator")

    def measure(self, operator: str, key: dict) -> Measurement:
        return Measurement(operator, key, self.seconds(operator, key), 0.0, 1, basis="preset")


class LocalProber:
    """Measures on this machine: the CPU for real; the GPU for real when CUDA is there,
    else from `preset`.

    Layer steps: with CUDA, each state is one real layer step of probes.layer_step
    (resident experts on the GPU, misses in pinned host memory, p prefetch copies in
    flight on their own stream), timed as a whole: basis "measured", method
    "timed-step". Without CUDA, the step's CPU lane is timed for real and composed with
    the preset's GPU, copy and sync lanes (engine.cost_model.compose_step): basis
    "measured+preset" (or "preset" when no CPU lane), method "composed".
    """

    def __init__(self, model: Any, quant: Any, preset: PresetGpu, *, pool_bytes: int | None = None,
                 cuda: bool | None = None, context_tokens: int | None = None):
        from probes.operators import ExpertPool, ExpertShape

        import torch

        self.torch = torch
        self.model = model
        self.quant = quant
        self.preset = preset
        self.context_tokens = int(context_tokens if context_tokens is not None
                                  else getattr(preset.analytic, "context_tokens", 4096))
        self.shape = ExpertShape.of(model, quant)
        self.cuda = torch.cuda.is_available() if cuda is None else cuda
        # Host and device pools share one layout (the CPU kernel's), so a copied miss is
        # the same bytes on the GPU; the GPU reads them with its own kernel.
        self.cpu_pool = ExpertPool(self.shape, "cpu", pool_bytes=pool_bytes, min_experts=model.top_k,
                                   pin=self.cuda)
        self.gpu_pool = None
        if self.cuda:  # pragma: no cover - needs CUDA
            self.gpu_pool = ExpertPool(self.shape, "cuda", pool_bytes=pool_bytes, min_experts=model.top_k,
                                       int8=self.cpu_pool.int8)
        self.kernel_stand_ins = {quant.name: "CPU: " + self.cpu_pool.kernel_stand_in()}
        if self.gpu_pool is not None:  # pragma: no cover
            self.kernel_stand_ins[quant.name] += "; GPU: " + self.gpu_pool.kernel_stand_in()
            self.kernel_stand_ins["shared_layer"] = (
                "attention projections, router and shared experts as byte-equivalent mat-vecs, attention over an "
                f"F16 KV cache of {self.context_tokens // 2} tokens (half of {self.context_tokens}), on CUDA")
        self._points: dict[tuple[str, int], dict[int, float]] = {}  # (operator, threads) -> {n: median}
        self._sync_s: float | None = None
        self._step = None
        self._prefetch_slots = None
        self._copier = None
        self._cursor = [0, 0]  # rotation through the device and host pools
        self._warm_threads: set[int] = set()

    @property
    def gpu_name(self) -> str:
        if self.cuda:  # pragma: no cover
            return self.torch.cuda.get_device_name(0)
        from probes.cuda_check import diagnose, local_cuda_facts

        text = f"none: GPU figures from the {self.preset.analytic.platform.gpu.name} preset"
        problem = diagnose(local_cuda_facts())
        return text if problem is None else f"{text}; {problem.message} (fix: {problem.fix})"

    @property
    def driver(self) -> str:
        if self.cuda:  # pragma: no cover
            return f"CUDA {self.torch.version.cuda}"
        return ""

    def measure(self, operator: str, key: dict, share_s: float) -> Measurement:
        m = self._measure(operator, key, share_s)
        if operator in ("gpu_experts", "cpu_experts", "h2d_copy"):
            self._points.setdefault((operator, key.get("threads", 0)), {})[key["n"]] = m.median_s
        elif operator == "sync":
            self._sync_s = m.median_s
        return m

    def _measure(self, operator: str, key: dict, share_s: float) -> Measurement:
        from probes import operators as ops

        if operator == "cpu_experts":
            t = ops.cpu_experts(self.cpu_pool, key["n"], key["threads"], share_s)
            return Measurement(operator, key, t.median_s, t.spread_s, t.repeats)
        if operator == "schedule":
            if self.cuda:  # pragma: no cover - needs CUDA
                return self._schedule_step(key, share_s)
            return self._schedule_composed(key, share_s)
        if operator in GPU_OPERATORS and not self.cuda:
            return self.preset.measure(operator, key)
        return self._measure_gpu(operator, key, share_s)  # pragma: no cover

    def _measure_gpu(self, operator, key, share_s):  # pragma: no cover - needs CUDA
        from probes import operators as ops

        if operator == "gpu_experts":
            t = ops.gpu_experts(self.gpu_pool, key["n"], share_s)
        elif operator == "h2d_copy":
            if self._copier is None or len(self._copier.slots) < key["n"]:
                self._copier = ops.H2DCopier(self.cpu_pool, max(key["n"], self.model.top_k))
            t = self._copier.time(key["n"], share_s)
        elif operator == "sync":
            t = ops.gpu_sync(self.shape.hidden_size, share_s)
        elif operator == "shared_layer":
            # Decode attends to half the context on average (as the analytic model says).
            t, _kernel = ops.shared_layer_time(self.model, self.quant, self.context_tokens // 2, share_s, "cuda")
        elif operator == "token_head":
            head = ops.TokenHeadOp(self.model, self.quant, "cuda")
            t = ops.time_repeats(head.run, share_s)  # each run waits for its token, as sampling does
        else:
            raise ValueError(f"{operator} is not a GPU-side operator")
        return Measurement(operator, key, t.median_s, t.spread_s, t.repeats)

    # --- layer steps -------------------------------------------------------------------
    def lanes(self, threads: int):
        """Single-operator costs for the composition rules (and ready-first's split): what
        this prober measured so far, the preset's figures for the rest."""
        from engine.measured_cost import _Curve

        lanes = self.preset.analytic.lanes(threads)
        changes: dict[str, Any] = {}
        names = {"gpu_experts": ("gpu_experts_s", "gpu_launch_s", "gpu_per_expert_s"),
                 "cpu_experts": ("cpu_experts_s", "cpu_dispatch_s", "cpu_per_expert_s"),
                 "h2d_copy": ("copy_experts_s", "copy_latency_s", "copy_per_expert_s")}
        for operator, (fn, fixed, per) in names.items():
            points = self._points.get((operator, threads if operator == "cpu_experts" else 0))
            if points:
                curve = _Curve(points, operator, lambda _label: None)
                changes.update({fn: curve, fixed: curve.intercept_s, per: curve.slope_s})
        if self._sync_s is not None and self.cuda:  # pragma: no cover - needs CUDA
            changes["sync_s"] = self._sync_s
        return replace(lanes, **changes)

    def _schedule_composed(self, key: dict, share_s: float) -> Measurement:
        from probes import operators as ops

        execution = Execution(key["execution"])
        h, m, threads = key["hits"], key["misses"], key["threads"]
        uses_cpu = m > 0 and execution is not Execution.STAGE
        cpu_s, spread, repeats = 0.0, 0.0, 1
        if uses_cpu:
            t = ops.cpu_experts(self.cpu_pool, m, threads, share_s)
            cpu_s, spread, repeats = t.median_s, t.spread_s, t.repeats
        lanes = self.preset.analytic.lanes(threads)
        if uses_cpu:
            per = cpu_s / m
            lanes = replace(lanes, cpu_experts_s=lambda n: n * per, cpu_dispatch_s=0.0, cpu_per_expert_s=per)
        total = compose_step(execution, h, m, lanes)[0]
        basis = "measured+preset" if uses_cpu else "preset"
        return Measurement("schedule", key, total, spread, repeats, basis=basis, method="composed")

    def _schedule_step(self, key: dict, share_s: float, device: str = "cuda") -> Measurement:
        """One real layer step in this state, timed as a whole (probes.layer_step), with
        the resident experts from the GPU pool on `device` ("cpu": the functional mode,
        for tests) and the misses and prefetch sources from the host pool."""
        from probes import operators as ops
        from probes.layer_step import DeviceSlots, LayerStep

        torch = self.torch
        execution = Execution(key["execution"])
        h, m, p, threads = key["hits"], key["misses"], key["prefetches"], key["threads"]
        k = self.model.top_k
        if self._step is None:
            self._step = LayerStep(self.gpu_pool, gpu_device=device, staging_slots=max(1, min(k, STAGING_SLOTS)))
            self._step.prepare(self.gpu_pool.experts)
        if threads not in self._warm_threads:
            self._step.warm(threads)
            self._warm_threads.add(threads)
        if p and (self._prefetch_slots is None or len(self._prefetch_slots) < p):
            self._prefetch_slots = DeviceSlots(self.gpu_pool, device, p)
        n_dev, n_host = self.gpu_pool.n_experts, self.cpu_pool.n_experts
        resident = dict(enumerate(self.gpu_pool.experts))
        host = {n_dev + j: mats for j, mats in enumerate(self.cpu_pool.experts)}
        gen = torch.Generator().manual_seed(h * 1000 + m * 10 + p)
        weights = torch.softmax(torch.randn(k, generator=gen), 0).tolist()
        x = torch.randn(1, self.shape.hidden_size, generator=gen).to(torch.bfloat16).to(device)
        lanes = self.lanes(threads) if execution is Execution.READY_FIRST else None

        prelude = None
        if self._step.cuda:  # pragma: no cover - needs CUDA
            from probes.cuda_graphs import BusyPrelude

            prelude = BusyPrelude(torch)

        def step():
            if prelude is not None:  # pragma: no cover - the GPU busy while the host queues the step
                prelude()
            d0, h0 = self._cursor
            hits = [(d0 + i) % n_dev for i in range(h)]
            misses = [n_dev + (h0 + i) % n_host for i in range(m)]
            sources = [host[n_dev + (h0 + m + i) % n_host] for i in range(p)]
            self._cursor = [(d0 + h) % n_dev, (h0 + m + p) % n_host]
            ids = hits + misses
            result = self._step.run(
                execution, x, device_experts=resident, host_experts=host, hit_ids=hits, miss_ids=misses,
                router_weights={e: weights[i] for i, e in enumerate(ids)}, threads=threads,
                prefetch=[(src, self._prefetch_slots[i]) for i, src in enumerate(sources)], lanes=lanes,
            )
            if prelude is not None:  # pragma: no cover
                prelude.host_took(result.queued_s)
            return result

        t = ops.time_repeats(step, share_s, timer=lambda result: result.elapsed_s)
        return Measurement("schedule", key, t.median_s, t.spread_s, t.repeats, basis="measured", method="timed-step")


# --- profiles for `cope advise` --------------------------------------------------------


def hardware_key(request: Any, cuda: Any = None) -> dict:
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


def model_shape(request: Any) -> ModelShape:
    return ModelShape(request.model.id, request.model.expert_bytes(request.quant), request.quant.name)


def profile_key(request: Any) -> str:
    return cache_key(hardware_key(request), model_shape(request).to_dict())


def cached_profile(request: Any, root: str | os.PathLike | None = None) -> Profile | None:
    return load_cached(profile_key(request), root)


def cached_profile_complete(request: Any, root: str | os.PathLike | None = None) -> tuple[Profile, str] | None:
    """(profile, its file) when the cache holds every atomic probe of `request`, else None."""
    key = profile_key(request)
    cached = load_cached(key, root)
    if cached is None or cached.missing([p.ident for p in atomic_probes(request.model.top_k, request.threads, 0.0)]):
        return None
    return cached, str(_path(key, root))


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
    request: Any,
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
    writer = ProfileWriter(base, root=root, resume=not reprobe)
    result = run_plan(plan, writer, prober, budget_s=budget_s, cancel=cancel, progress=progress)
    return ProfileOutcome(writer.profile, str(writer.path), result)


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
