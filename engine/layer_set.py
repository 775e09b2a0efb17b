"""Price an arbitrary set of CPU-resident MoE layers with the advise pipeline's pieces.

`cope estimate -- llama-server ...` describes whole layers' experts on the CPU (from
`--n-cpu-moe`, `--cpu-moe`, `-ot`), which need not be the first or last N. This reuses
the same replay (a partition candidate with an explicit layer set), the same cost model
and the same pricing as engine/advise.py, so the figure is comparable with its ranking.
"""

from __future__ import annotations

import numpy as np

from engine.advise import AdviseRequest
from engine.cost_model import CostModel
from engine.errors import CopeInputError
from engine.spans import block_span
from engine.estimate import Estimate, price
from engine.memory import plan_memory
from engine.policy import Candidate, Execution, Kind
from engine.replay import ReplaySetup, replay
from engine.traces.validate import check_trace_fits_model


def describe_layer_set(cpu_layers: np.ndarray, moe_blocks: tuple[int, ...]) -> str:
    cpu = np.asarray(cpu_layers, dtype=bool)
    n_cpu, n = int(cpu.sum()), cpu.size
    if n_cpu == 0:
        return f"every expert on the GPU (0 of {n} MoE layers on the CPU)"
    blocks = [moe_blocks[i] for i in np.flatnonzero(cpu)]
    return f"{n_cpu} of {n} MoE layers' experts on the CPU (blocks {block_span(blocks)})"


def layer_set_kind(cpu_layers: np.ndarray) -> str:
    """The candidate kind a CPU layer set ([L] bool) is, as the ranking names them."""
    cpu = np.asarray(cpu_layers, dtype=bool)
    n = int(cpu.sum())
    if n == 0:
        return Kind.ALL_GPU.value
    if n == cpu.size:
        return Kind.ALL_CPU.value
    if cpu[:n].all():
        return Kind.PARTITION_FIRST.value
    if cpu[-n:].all():
        return Kind.PARTITION_LAST.value
    return "layer set"


def price_layer_set(
    request: AdviseRequest,
    cost_model: CostModel,
    cpu_layers: np.ndarray,
    *,
    execution: Execution = Execution.SEQUENTIAL,
) -> Estimate:
    """TPOT of keeping the experts of `cpu_layers` ([L] bool) on the CPU, the rest on the GPU.

    `execution` prices the CPU layers' steps: SEQUENTIAL computes them on the CPU (stock
    llama.cpp in decode); STAGE copies the routed experts to the GPU every step
    (GGML_OP_OFFLOAD_MIN_BATCH=1).
    """
    model, trace = request.model, request.trace
    check_trace_fits_model(trace, model)
    cpu = np.asarray(cpu_layers, dtype=bool)
    if cpu.shape != (model.n_moe_layers,):
        raise CopeInputError(f"a layer set needs {model.n_moe_layers} entries for {model.name}, got {cpu.shape}")
    memory = plan_memory(
        model, request.quant, vram_budget_bytes=request.vram_budget_bytes, context_tokens=request.context_tokens
    )
    k = model.top_k
    budget = k if request.prefetch_budget is None else request.prefetch_budget
    costs = cost_model.state_costs(execution, request.threads, k, budget)
    popularity = request.profile.popularity()
    candidate = Candidate(Kind.PARTITION_FIRST, execution=execution)
    stats = replay(trace.expert_ids, None, candidate, ReplaySetup(popularity, 0, 0), cpu_layers=cpu)
    tpot, breakdown = price(
        stats, costs,
        shared_per_token_s=cost_model.shared_per_token_s(),
        token_overhead_s=cost_model.token_overhead_s(),
        prefetch_mode=request.prefetch_mode,
    )
    gpu_experts = int((~cpu).sum()) * model.n_routed_experts
    vram = memory.vram_used_bytes(gpu_experts, staging=execution is Execution.STAGE)
    detail = describe_layer_set(cpu, model.moe_blocks)
    if execution is Execution.STAGE:
        detail += ", routed CPU experts copied to the GPU every step"
    return Estimate(candidate, tpot, breakdown, stats, vram, cost_model.fidelity, detail)
