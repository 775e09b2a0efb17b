"""The prober of this machine: the operators and layer steps a probe plan asks for,
measured here (the CPU for real; the GPU for real when CUDA is there, else from the
analytic model of the chosen GPU preset, basis "preset"). probes/runner.py runs the plan
and writes what this measures into the profile cache.

torch is imported only when something is measured.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from engine.cost.analytic_cost import AnalyticCostModel
from engine.cost.cost_model import compose_step
from engine.cost.measured_cost import OperatorCurve
from engine.profiles.profile import Measurement
from engine.replays.policy import Execution
from probes import operators as ops
from probes.cuda_check import diagnose, local_cuda_facts
from probes.cuda_graphs import BusyPrelude
from probes.host_pool import host_pool
from probes.layer_step import DeviceSlots, LayerStep
from probes.operators import ExpertPool, ExpertShape

GPU_OPERATORS = frozenset({"gpu_experts", "h2d_copy", "sync", "shared_layer", "token_head"})
STAGING_SLOTS = 8  # the bounded staging buffer of stage and ready-first, in experts


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
    the preset's GPU, copy and sync lanes (engine.cost.cost_model.compose_step): basis
    "measured+preset" (or "preset" when no CPU lane), method "composed".
    """

    def __init__(self, model: Any, quant: Any, preset: PresetGpu, *, pool_bytes: int | None = None,
                 cuda: bool | None = None, context_tokens: int | None = None):
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
        self.cpu_pool = host_pool(self.shape, pool_bytes=pool_bytes, min_experts=model.top_k, pin=self.cuda)
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
        lanes = self.preset.analytic.lanes(threads)
        changes: dict[str, Any] = {}
        names = {"gpu_experts": ("gpu_experts_s", "gpu_launch_s", "gpu_per_expert_s"),
                 "cpu_experts": ("cpu_experts_s", "cpu_dispatch_s", "cpu_per_expert_s"),
                 "h2d_copy": ("copy_experts_s", "copy_latency_s", "copy_per_expert_s")}
        for operator, (fn, fixed, per) in names.items():
            points = self._points.get((operator, threads if operator == "cpu_experts" else 0))
            if points:
                curve = OperatorCurve(points, operator, lambda _label: None)
                changes.update({fn: curve, fixed: curve.intercept_s, per: curve.slope_s})
        if self._sync_s is not None and self.cuda:  # pragma: no cover - needs CUDA
            changes["sync_s"] = self._sync_s
        return replace(lanes, **changes)

    def _schedule_composed(self, key: dict, share_s: float) -> Measurement:
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
