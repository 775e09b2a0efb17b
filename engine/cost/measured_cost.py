"""Cost models from a measured Profile: atomic and combined fidelity (DESIGN.md §5).

- AtomicCostModel: the medians of single operators (GPU experts for n, CPU experts for
  n at a thread count, host-to-device copies, sync, shared layer, head), composed into
  layer steps by the same rules as the analytic model (`engine.cost.cost_model.Lanes`).
  An n that was not measured is read off the straight line fitted to the measured
  ones, and `describe()` lists such lookups.
- CombinedCostModel: a state's measured whole-step time (a "schedule" measurement)
  where the profile has one, the atomic composition otherwise.

The CPU probe times torch's weight-only int8 mat-vec (bf16 activations), which is not
llama.cpp's kernel: on the machine bench/llamacpp_cpu.py ran on, llama.cpp's Q8_0 and Q4_K
mat-vecs (int8 activations, `ggml_vec_dot_q8_0_q8_0`, `ggml_vec_dot_q4_K_q8_K`) did the
same bytes about twice as fast. So when the estimate is for llama.cpp (every `cope advise`,
`estimate` and `export`), the CPU expert lane is the llama.cpp one (`LlamaCppCpuLane`):
the probe's per-expert time over `LLAMA_CPP_KERNEL_SPEEDUP`, but never faster than the
memory lets that many experts stream; a whole step timed with CPU experts in it is scaled
by what that does to the composed step. Validation against COPE's own executor
(`cope validate`) runs the probe's kernel and keeps the probe's figures.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from engine.core.errors import CopeInputError
from engine.cost.cost_model import CostModel, CostModelDescription, Lanes, ProfileUse, StateCosts, compose_state_costs
from engine.profiles.profile import Profile
from engine.replays.policy import Execution


class OperatorCurve:
    """Time of an operator as a function of n experts: the measured medians, and the
    least-squares line through them (intercept >= 0: the fixed cost; slope >= 0: the
    cost of one more expert) for the composition rules and for unmeasured n."""

    def __init__(self, points: dict[int, float], what: str, on_extrapolate):
        self.points = dict(sorted(points.items()))
        self.what = what
        self._on_extrapolate = on_extrapolate
        ns = np.array(list(self.points), dtype=np.float64)
        ys = np.array(list(self.points.values()), dtype=np.float64)
        if len(ns) == 1:
            slope, intercept = ys[0] / ns[0], 0.0
        else:
            slope, intercept = np.polyfit(ns, ys, 1)
            if intercept < 0:  # noisy small n: a line through the origin instead
                slope, intercept = float(ns @ ys / (ns @ ns)), 0.0
        self.slope_s = max(float(slope), 0.0)
        self.intercept_s = max(float(intercept), 0.0)

    def __call__(self, n: int) -> float:
        if n == 0:
            return 0.0
        if n in self.points:
            return self.points[n]
        self._on_extrapolate(f"{self.what} n={n}")
        return self.intercept_s + n * self.slope_s


# llama.cpp's CPU mat-vec against the probe's kernel on the same cores and threads (fitted
# by bench/fit_local.py on one machine's llama-bench runs and probe profiles; docs/accuracy.md).
LLAMA_CPP_KERNEL_SPEEDUP = 2.630


@dataclass(frozen=True)
class LlamaCppCpuLane:
    """The CPU expert lane as llama.cpp runs it, from the probe's: compute `kernel_speedup`
    times the probe's, bounded by the memory (`saturated_bytes_per_s`: what every thread
    together streams, the analytic model's saturated lane on this machine)."""

    kernel_speedup: float
    saturated_bytes_per_s: float
    expert_bytes: float

    def per_expert_s(self, probe_per_expert_s: float) -> float:
        return max(probe_per_expert_s / self.kernel_speedup, self.expert_bytes / self.saturated_bytes_per_s)

    def converted(self, curve: "OperatorCurve") -> "OperatorCurve":
        """`curve` with each measured point's per-expert part converted (its fixed part,
        the thread pool's dispatch, kept)."""
        if curve.slope_s <= 0:
            return curve
        factor = self.per_expert_s(curve.slope_s) / curve.slope_s
        points = {n: curve.intercept_s + max(y - curve.intercept_s, 0.0) * factor for n, y in curve.points.items()}
        return OperatorCurve(points, curve.what + " (as llama.cpp)", curve._on_extrapolate)


class AtomicCostModel:
    """Measured single operators, composed with sum, max and the greedy split."""

    fidelity = "atomic"

    def __init__(self, profile: Profile, *, n_blocks: int, source: str | None = None, use: ProfileUse | None = None,
                 llama_cpp: LlamaCppCpuLane | None = None):
        """`n_blocks`: the model's blocks, for the shared per-token cost; `source`: the
        profile's file, named in errors (default: `use.source`); `use`: where the profile
        came from, for describe(); `llama_cpp`: price the CPU experts as llama.cpp runs them
        (None: as the probe's kernel ran)."""
        self.profile = profile
        self.llama_cpp = llama_cpp
        self.n_blocks = n_blocks
        self.use = use
        self.source = source if source is not None or use is None else use.source
        self.extrapolated: set[str] = set()
        self._gpu = self._curve("gpu_experts", {})
        self._copy = self._curve("h2d_copy", {})
        self._cpu: dict[int, OperatorCurve] = {}

    # --- measurements ------------------------------------------------------------------
    def _missing(self, what: str) -> CopeInputError:
        return CopeInputError(f"the profile has no {what} measurement; run the probes again", path=self.source)

    def _curve(self, operator: str, fixed: dict) -> OperatorCurve:
        points = {}
        for m in self.profile.of(operator):
            key = m.key_dict
            n = key.pop("n")
            if key == fixed:
                points[n] = m.median_s
        if not points:
            label = operator + "".join(f" {k}={v}" for k, v in fixed.items())
            if operator == "cpu_experts":
                measured = sorted({m.key_dict["threads"] for m in self.profile.of(operator)})
                raise CopeInputError(
                    f"the profile has no cpu_experts measurement at {fixed['threads']} threads "
                    f"(measured at: {', '.join(map(str, measured)) or 'none'}); run the probes with these threads",
                    path=self.source,
                )
            raise self._missing(label)
        label = operator + "".join(f" {k}={v}" for k, v in fixed.items())
        return OperatorCurve(points, label, self.extrapolated.add)

    def _single(self, operator: str, key: dict | None = None) -> float:
        m = self.profile.find(operator, key or {})
        if m is None:
            raise self._missing(operator)
        return m.median_s

    # --- single lanes ------------------------------------------------------------------
    def gpu_experts_s(self, n: int) -> float:
        return self._gpu(n)

    def cpu_experts_s(self, n: int, threads: int) -> float:
        return self._cpu_curve(threads)(n)

    def copy_experts_s(self, n: int) -> float:
        return self._copy(n)

    def _cpu_curve(self, threads: int) -> OperatorCurve:
        if threads not in self._cpu:
            curve = self._curve("cpu_experts", {"threads": threads})
            self._cpu[threads] = curve if self.llama_cpp is None else self.llama_cpp.converted(curve)
        return self._cpu[threads]

    def as_probed(self) -> "AtomicCostModel":
        """The same profile priced with the probe's own CPU kernel."""
        return AtomicCostModel(self.profile, n_blocks=self.n_blocks, source=self.source, use=self.use)

    def lanes(self, threads: int) -> Lanes:
        cpu = self._cpu_curve(threads)
        return Lanes(
            gpu_experts_s=self._gpu,
            cpu_experts_s=cpu,
            copy_experts_s=self._copy,
            sync_s=self._single("sync"),
            gpu_launch_s=self._gpu.intercept_s,
            gpu_per_expert_s=self._gpu.slope_s,
            cpu_dispatch_s=cpu.intercept_s,
            cpu_per_expert_s=cpu.slope_s,
            copy_latency_s=self._copy.intercept_s,
            copy_per_expert_s=self._copy.slope_s,
        )

    # --- the CostModel interface -------------------------------------------------------
    def state_costs(self, execution: Execution, threads: int, top_k: int, prefetch_budget: int) -> StateCosts:
        return compose_state_costs(Execution(execution), top_k, prefetch_budget, self.lanes(threads))

    def shared_per_token_s(self) -> float:
        """Σ over blocks of the block's own shared_layer measurement, else the one for every block."""
        generic = self.profile.find("shared_layer", {})
        total = 0.0
        for block in range(self.n_blocks):
            m = self.profile.find("shared_layer", {"block": block}) or generic
            if m is None:
                raise self._missing(f"shared_layer (block {block}, or one for every block)")
            total += m.median_s
        return total

    def token_overhead_s(self) -> float:
        return self._single("token_head")

    def describe(self) -> CostModelDescription:
        by_operator: dict[str, int] = {}
        for m in self.profile.measurements:
            by_operator[m.operator] = by_operator.get(m.operator, 0) + 1
        return CostModelDescription(
            self.fidelity,
            "measured single operators composed with the analytic model's sum, max and greedy rules",
            {
                "profile_key": self.profile.key,
                "provenance": self.profile.provenance.to_dict(),
                "model_shape": self.profile.model_shape.to_dict(),
                "measurements": by_operator,
                "measurements_by_basis": _by_basis(self.profile.measurements),
                "extrapolated": sorted(self.extrapolated),
                "cpu_kernel": self._cpu_kernel(),
            },
            _profile_use(self.use, self.profile, 0),
        )


    def _cpu_kernel(self) -> str:
        if self.llama_cpp is None:
            return "the probe's (torch weight-only int8 mat-vec)"
        lane = self.llama_cpp
        return (f"llama.cpp's: the probe's per-expert time / {lane.kernel_speedup:g}, at most the memory's "
                f"{lane.saturated_bytes_per_s / 1e9:.1f} GB/s")


class CombinedCostModel:
    """Measured whole layer steps where the profile has them, `atomic` elsewhere.

    A state's step time comes from the "schedule" measurement with its execution, hits,
    misses and threads and no prefetch copies; a step measured whole (basis "measured")
    with p > 0 prefetch copies in flight fills `total_by_prefetch_s[h, p]`, which
    price() uses instead of its exposure formula. The lane busy times, the ready-first
    lane split and the prefetch copy times stay those of `atomic`.
    """

    fidelity = "combined"

    def __init__(self, profile: Profile, atomic: CostModel, *, source: str | None = None,
                 use: ProfileUse | None = None):
        self.profile = profile
        self.atomic = atomic
        self.use = use
        self.source = source if source is not None or use is None else use.source
        self._measured: set[tuple[str, int, int, int]] = set()  # (execution, hits, top_k, threads)
        self._estimated: set[tuple[str, int, int, int]] = set()
        self._preset: set[tuple[str, int, int, int]] = set()  # GPU lanes (or all) from a preset
        self._measured_prefetch: set[tuple[str, int, int, int, int]] = set()  # (execution, hits, p, top_k, threads)
        # The same profile priced with the probe's own CPU kernel, which the whole steps ran
        # (None: `atomic` already prices that kernel).
        self._probed = atomic.as_probed() if getattr(atomic, "llama_cpp", None) is not None else None

    def state_costs(self, execution: Execution, threads: int, top_k: int, prefetch_budget: int) -> StateCosts:
        execution = Execution(execution)
        base = self.atomic.state_costs(execution, threads, top_k, prefetch_budget)
        total = np.array(base.total_s, dtype=np.float64, copy=True)
        # A step timed whole ran the probe's CPU kernel: scale it as the composition moves
        # when its CPU experts run llama.cpp's (1 where the step has no CPU experts).
        as_llama = np.ones(top_k + 1)
        if self._probed is not None:
            raw = np.asarray(self._probed.state_costs(execution, threads, top_k, prefetch_budget).total_s)
            as_llama = np.divide(base.total_s, raw, out=as_llama, where=raw > 0)
        for h in range(top_k + 1):
            state = (execution.value, h, top_k, threads)
            m = self.profile.find(
                "schedule",
                {"execution": execution.value, "hits": h, "misses": top_k - h, "prefetches": 0, "threads": threads},
            )
            if m is not None:
                total[h] = m.median_s * as_llama[h]
            if m is not None and m.basis == "measured":
                self._measured.add(state)
                self._estimated.discard(state)
                self._preset.discard(state)
            elif m is not None and m.basis in ("preset", "measured+preset"):
                if state not in self._measured:
                    self._preset.add(state)
                    self._estimated.discard(state)
            elif state not in self._measured and state not in self._preset:
                self._estimated.add(state)
        by_prefetch = np.full((top_k + 1, prefetch_budget + 1), np.nan)
        for h in range(top_k + 1):
            for p in range(1, prefetch_budget + 1):
                m = self.profile.find(
                    "schedule",
                    {"execution": execution.value, "hits": h, "misses": top_k - h, "prefetches": p, "threads": threads},
                )
                # Only a step timed whole on the real devices: a composed one says
                # nothing about prefetch that price()'s formula does not.
                if m is not None and m.basis == "measured":
                    by_prefetch[h, p] = m.median_s * as_llama[h]
                    self._measured_prefetch.add((execution.value, h, p, top_k, threads))
        if not np.isfinite(by_prefetch).any():
            by_prefetch = None
        return replace(base, total_s=total, total_by_prefetch_s=by_prefetch)

    def shared_per_token_s(self) -> float:
        return self.atomic.shared_per_token_s()

    def token_overhead_s(self) -> float:
        return self.atomic.token_overhead_s()

    def describe(self) -> CostModelDescription:
        schedules = self.profile.of("schedule")
        with_prefetch = sum(1 for m in schedules if m.key_dict["prefetches"] > 0 and m.basis != "measured")
        by_method: dict[str, int] = {}
        for m in schedules:
            by_method[m.method or "unrecorded"] = by_method.get(m.method or "unrecorded", 0) + 1
        details = {
            "states_measured": len(self._measured),
            "states_estimated": len(self._estimated),
            "states_partly_preset": len(self._preset),
            "schedule_measurements": len(schedules),
            "schedule_measurements_by_basis": _by_basis(schedules),
            # "timed-step": one real layer step timed whole; "composed": lanes composed.
            "schedule_measurements_by_method": by_method,
            # States with prefetch copies in flight priced from a whole-step measurement;
            # composed ones with prefetch are left to price()'s exposure formula.
            "states_with_prefetch_measured": len(self._measured_prefetch),
            "schedule_measurements_with_prefetch_unused": with_prefetch,
            "fallback": self.atomic.describe().to_dict(),
        }
        return CostModelDescription(
            self.fidelity, "measured whole layer steps where probed, atomic composition elsewhere", details,
            _profile_use(self.use, self.profile, len(self._estimated)),
        )


def _profile_use(use: ProfileUse | None, profile: Profile, estimated_states: int) -> ProfileUse | None:
    """`use` with the profile's counts filled in (None: not told where it came from)."""
    if use is None:
        return None
    return replace(use, counts_by_basis=_by_basis(profile.measurements), estimated_states=estimated_states)


def _by_basis(measurements) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in measurements:
        counts[m.basis] = counts.get(m.basis, 0) + 1
    return counts
