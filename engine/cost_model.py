"""Cost models: the time of one layer step in each execution state.

Every fidelity (analytic here; atomic and combined from a measured Profile in
engine/measured_cost.py) answers the same questions, so one replay can be priced
three ways:
- `state_costs(execution, threads, top_k, prefetch_budget)`: the time of a layer step
  with h hits and k - h misses, for h = 0..k, plus the lane busy times behind it;
- `shared_per_token_s()`: what every token pays in every block whatever the policy
  (attention at the chosen context, norms, router, shared experts, dense FFNs);
- `token_overhead_s()`: embedding, output head and sampling, once per token.

Analytic and atomic share the composition rules (`Lanes`, `compose_step`): they differ
only in where the single-operator costs come from.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

from engine.model import ModelSpec
from engine.platform import Platform, assumed_cpu_bandwidth_bytes_per_s
from engine.policy import Execution
from engine.quant import Quantization

if TYPE_CHECKING:  # engine.cost_models builds these models: import it lazily
    from engine.cost_models import CostModelDescription


@dataclass(frozen=True)
class StateCosts:
    """Layer-step costs of one execution strategy, indexed by hits h = 0..k."""

    execution: Execution
    total_s: np.ndarray  # critical path of the step
    gpu_s: np.ndarray  # GPU busy on routed experts
    cpu_s: np.ndarray  # CPU busy on routed experts
    copy_s: np.ndarray  # PCIe busy copying missed experts
    sync_s: np.ndarray  # GPU<->CPU hand-over of the hidden state and results
    copied: np.ndarray  # int: misses sent over PCIe (ready-first's lane split)
    prefetch_s: np.ndarray  # [P+1] time to copy p prefetched experts
    # Optional [k+1, P+1]: the measured time of a whole step with h hits and p prefetch
    # copies in flight (the exposed prefetch time included); NaN where not measured.
    # Where finite, price() uses it instead of total_s[h] plus its exposure formula.
    total_by_prefetch_s: np.ndarray | None = None


class CostModel(Protocol):
    fidelity: str

    def state_costs(self, execution: Execution, threads: int, top_k: int, prefetch_budget: int) -> StateCosts: ...

    def shared_per_token_s(self) -> float: ...

    def token_overhead_s(self) -> float: ...

    def describe(self) -> "CostModelDescription": ...


@dataclass(frozen=True)
class Lanes:
    """Single-operator costs at one CPU thread count: all the composition rules need.

    Every fidelity that composes lanes (analytic, atomic) fills one of these; the
    rules in `compose_step` then turn it into layer-step costs the same way.
    The cost functions take a number of experts n and return 0 for n = 0.
    """

    gpu_experts_s: Callable[[int], float]  # n routed experts computed on the GPU
    cpu_experts_s: Callable[[int], float]  # n routed experts on the CPU at the thread count
    copy_experts_s: Callable[[int], float]  # n experts copied host to device
    sync_s: float  # hidden state to the CPU and results back
    gpu_launch_s: float  # fixed part of gpu_experts_s, paid by a GPU lane not yet started
    gpu_per_expert_s: float  # one more expert on the GPU
    cpu_dispatch_s: float  # fixed part of cpu_experts_s
    cpu_per_expert_s: float  # one more expert on the CPU
    copy_latency_s: float  # fixed part of copy_experts_s
    copy_per_expert_s: float  # one more expert copied


def compose_state_costs(execution: Execution, top_k: int, prefetch_budget: int, lanes: Lanes) -> StateCosts:
    """Layer-step costs for h = 0..top_k hits, composed from `lanes`."""
    k = top_k
    rows = [compose_step(execution, h, k - h, lanes) for h in range(k + 1)]
    cols = list(zip(*rows))
    return StateCosts(
        execution=execution,
        total_s=np.array(cols[0]),
        gpu_s=np.array(cols[1]),
        cpu_s=np.array(cols[2]),
        copy_s=np.array(cols[3]),
        sync_s=np.array(cols[4]),
        copied=np.array(cols[5], dtype=np.int64),
        prefetch_s=np.array([lanes.copy_experts_s(p) for p in range(prefetch_budget + 1)]),
    )


def compose_step(execution: Execution, h: int, m: int, lanes: Lanes) -> tuple:
    """(total, gpu, cpu, copy, sync, copied) of one layer step with h hits, m misses.

    Sequential sums the lanes, parallel takes the max of them, stage copies then
    computes everything on the GPU, ready-first splits the misses greedily.
    """
    gpu_hits = lanes.gpu_experts_s(h)
    cpu_misses = lanes.cpu_experts_s(m)
    sync = lanes.sync_s if m else 0.0
    if execution is Execution.SEQUENTIAL:
        return gpu_hits + sync + cpu_misses, gpu_hits, cpu_misses, 0.0, sync, 0
    if execution is Execution.PARALLEL:
        return max(gpu_hits, sync + cpu_misses), gpu_hits, cpu_misses, 0.0, sync, 0
    if execution is Execution.STAGE:
        copy = lanes.copy_experts_s(m)
        gpu_all = lanes.gpu_experts_s(h + m)
        return copy + gpu_all, gpu_all, 0.0, copy, 0.0, m
    return compose_ready_first(h, m, lanes)


def compose_ready_first(h: int, m: int, lanes: Lanes) -> tuple:
    """Greedy: each miss goes to the lane that would finish it first.

    The GPU starts on the hits at once. The CPU lane needs the hidden state
    first and hands its results back (half the sync each way); the copy lane
    moves one expert at a time, and the GPU computes it when both are done.
    """
    half_sync = lanes.sync_s / 2
    gpu_per = lanes.gpu_per_expert_s
    cpu_per = lanes.cpu_per_expert_s
    copy_per = lanes.copy_per_expert_s
    gpu_free = lanes.gpu_experts_s(h)
    cpu_free = half_sync + lanes.cpu_dispatch_s
    copy_free = lanes.copy_latency_s
    n_cpu = n_copy = 0
    for _ in range(m):
        cpu_finish = cpu_free + cpu_per + half_sync
        copy_done = copy_free + copy_per
        gpu_start = max(copy_done, gpu_free if gpu_free else lanes.gpu_launch_s)
        gpu_finish = gpu_start + gpu_per
        if gpu_finish <= cpu_finish:
            copy_free, gpu_free = copy_done, gpu_finish
            n_copy += 1
        else:
            cpu_free += cpu_per
            n_cpu += 1
    cpu_end = cpu_free + half_sync if n_cpu else 0.0
    total = max(gpu_free, cpu_end)
    gpu_busy = lanes.gpu_experts_s(h + n_copy)
    cpu_busy = lanes.cpu_experts_s(n_cpu)
    copy_busy = lanes.copy_experts_s(n_copy)
    return total, gpu_busy, cpu_busy, copy_busy, lanes.sync_s if n_cpu else 0.0, n_copy


@dataclass(frozen=True)
class AnalyticAssumptions:
    """The constants of the roofline model: assumed, to be replaced by probes.

    Batch-1 decode is memory-bound: an expert costs its bytes over the bandwidth a
    quantized mat-vec reaches, plus fixed latencies for launching and handing over.
    """

    gpu_bandwidth_efficiency: float = 0.70  # batch-1 quantized mat-vec vs spec-sheet peak
    cpu_bandwidth_efficiency: float = 0.60  # ggml CPU mat-vec vs theoretical DRAM peak
    cpu_thread_bytes_per_s: float = 12e9  # one core streaming quantized weights
    gpu_expert_launch_s: float = 15e-6  # mul_mat_id gate/up/down + activation kernels
    gpu_block_overhead_s: float = 45e-6  # attention, norms, rope, router kernels per block
    cpu_dispatch_s: float = 10e-6  # waking the thread pool, barriers
    sync_s: float = 20e-6  # hidden state to the CPU and results back, stream syncs
    copy_latency_s: float = 10e-6  # setting up one batch of host-to-device copies
    token_fixed_s: float = 150e-6  # sampling, embedding lookup, graph launch per token


class AnalyticCostModel:
    """Roofline costs from the Platform's figures alone."""

    fidelity = "analytic"

    def __init__(
        self,
        model: ModelSpec,
        quant: Quantization,
        platform: Platform,
        *,
        context_tokens: int,
        assumptions: AnalyticAssumptions = AnalyticAssumptions(),
    ):
        self.model = model
        self.quant = quant
        self.platform = platform
        self.context_tokens = context_tokens
        self.a = assumptions
        self.expert_bytes = model.expert_bytes(quant)
        self.gpu_bytes_per_s = float(_known(platform.gpu.mem_bandwidth_bytes_per_s, "GPU memory bandwidth"))
        self.h2d_bytes_per_s = float(_known(platform.gpu.h2d_bytes_per_s, "host-to-device bandwidth"))
        cpu_bw = platform.cpu.mem_bandwidth_bytes_per_s
        if not cpu_bw.known:
            cpu_bw = assumed_cpu_bandwidth_bytes_per_s(platform.cpu)
        self.cpu_bytes_per_s = float(cpu_bw.value)

    # --- single lanes ---------------------------------------------------------
    def gpu_experts_s(self, n: int) -> float:
        if n == 0:
            return 0.0
        per_expert = self.expert_bytes / (self.gpu_bytes_per_s * self.a.gpu_bandwidth_efficiency)
        return self.a.gpu_expert_launch_s + n * per_expert

    def cpu_expert_s(self, threads: int) -> float:
        bandwidth = min(
            threads * self.a.cpu_thread_bytes_per_s,
            self.cpu_bytes_per_s * self.a.cpu_bandwidth_efficiency,
        )
        return self.expert_bytes / bandwidth

    def cpu_experts_s(self, n: int, threads: int) -> float:
        return 0.0 if n == 0 else self.a.cpu_dispatch_s + n * self.cpu_expert_s(threads)

    def copy_experts_s(self, n: int) -> float:
        return 0.0 if n == 0 else self.a.copy_latency_s + n * self.expert_bytes / self.h2d_bytes_per_s

    # --- one layer step -------------------------------------------------------
    def lanes(self, threads: int) -> Lanes:
        """The single-operator costs at `threads`, for the shared composition rules."""
        return Lanes(
            gpu_experts_s=self.gpu_experts_s,
            cpu_experts_s=lambda n: self.cpu_experts_s(n, threads),
            copy_experts_s=self.copy_experts_s,
            sync_s=self.a.sync_s,
            gpu_launch_s=self.a.gpu_expert_launch_s,
            gpu_per_expert_s=self.gpu_experts_s(2) - self.gpu_experts_s(1),
            cpu_dispatch_s=self.a.cpu_dispatch_s,
            cpu_per_expert_s=self.cpu_expert_s(threads),
            copy_latency_s=self.a.copy_latency_s,
            copy_per_expert_s=self.copy_experts_s(2) - self.copy_experts_s(1),
        )

    def state_costs(self, execution: Execution, threads: int, top_k: int, prefetch_budget: int) -> StateCosts:
        return compose_state_costs(execution, top_k, prefetch_budget, self.lanes(threads))

    def _step(self, execution: Execution, h: int, m: int, threads: int) -> tuple:
        """(total, gpu, cpu, copy, sync, copied) of one layer step."""
        return compose_step(execution, h, m, self.lanes(threads))

    # --- what every candidate pays -------------------------------------------
    def shared_per_token_s(self) -> float:
        bandwidth = self.gpu_bytes_per_s * self.a.gpu_bandwidth_efficiency
        total = 0.0
        # Over a conversation that fills the context, decode attends to half of it on
        # average; the KV cache is still reserved for all of it (memory plan).
        mean_fill = self.context_tokens // 2
        for block in range(self.model.n_blocks):
            weights = self.model.shared_layer_bytes(self.quant, block)
            kv = self.model.kv_read_bytes_per_layer(block, mean_fill)
            total += self.a.gpu_block_overhead_s + (weights + kv) / bandwidth
        return total

    def token_overhead_s(self) -> float:
        head = self.model.head_bytes(self.quant)
        return self.a.token_fixed_s + head / (self.gpu_bytes_per_s * self.a.gpu_bandwidth_efficiency)

    def describe(self) -> "CostModelDescription":
        from engine.cost_models import CostModelDescription

        return CostModelDescription(
            self.fidelity,
            "roofline: bytes over bandwidth plus fixed latencies; constants assumed",
            {
                "gpu_bytes_per_s": self.gpu_bytes_per_s,
                "cpu_bytes_per_s": self.cpu_bytes_per_s,
                "h2d_bytes_per_s": self.h2d_bytes_per_s,
                "expert_bytes": self.expert_bytes,
                "assumptions": asdict(self.a),
            },
        )


def _known(fact, what: str):
    from engine.errors import CopeInputError

    if not fact.known:
        raise CopeInputError(f"{what} is unknown ({fact.note}); name a GPU preset with --gpu")
    return fact.value
