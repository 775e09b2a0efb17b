"""Where a decode token's work crosses between the GPU and the CPU in llama.cpp: the graph
splits of one MoE layer's routed experts, and the tensors copied at each crossing.

From the source (github.com/ggml-org/llama.cpp):
- src/llama-graph.cpp at 00395eb (llm_graph_context::build_moe_ffn): a MoE layer's routed
  experts are, in graph order, the router (its weights are the block's), then `up`, `gate`
  (each a mul_mat_id reading the normed hidden state and the selected expert ids), the GLU
  of the two (or the activation of `up` for an ungated FFN), `down` (a mul_mat_id reading the
  GLU's output and the ids), then the weighting by the router's weights and the sum over the
  k experts.
- ggml/src/ggml-backend.cpp at 0054c01 (ggml_backend_sched_split_graph): an op with weights
  runs where its weights are; an op without weights is given the GPU by expanding the GPU's
  ops down the graph, then up it ("cpu will never be used unless weights are on cpu, or there
  are no gpu ops between cpu ops"), and otherwise follows its neighbours. So the GLU runs on
  the GPU when `gate` (`up` if ungated) or `down` does, and the weighting and the sum, which
  have no weights, run on the GPU of an offloaded block. Every change of backend starts a
  split, and a tensor a split reads from the other device is one of its inputs, copied once
  a graph to each device (tensor_id_copy).
- ggml_backend_sched_compute_splits (same file): the splits run one after another on the
  calling thread. Before a split its inputs are copied in; the CPU backend has no
  asynchronous copy and the CUDA backend's takes only CUDA to CUDA, so the scheduler waits for
  the source's stream (ggml_backend_synchronize) and copies each input with a synchronous
  copy (ggml_backend_tensor_copy). The GPU idles while the CPU works and the CPU waits while
  the GPU works: nothing overlaps, which is why COPE adds the two devices' times.
- ggml/src/ggml-cpu/ggml-cpu.c at 1b5f950 (ggml_graph_compute, ggml_graph_compute_thread):
  each CPU split is one graph for the thread team, an OpenMP parallel region (or the thread
  pool's kickoff), with a barrier after every node and one at the end.

What one crossing costs in seconds is not in the source: the hand-over of a layer whose experts
run on the CPU (three synchronous copies: the hidden state and the ids in, the experts' outputs
out; the thread team's start and join) is the fitted `sync_s` of engine/cost/analytic_cost.py,
half of it charged at each change of device.
"""

from __future__ import annotations

GPU, CPU = "gpu", "cpu"

# The routed-expert projections in the order build_moe_ffn runs them, with the op between
# them that has no weights (the GLU of gate and up; an ungated FFN's activation of up).
GATED_ORDER = ("up", "gate", "glu", "down")
UNGATED_ORDER = ("up", "act", "down")


def expert_op_devices(cpu_projections: frozenset[str], *, gated: bool) -> tuple[str, ...]:
    """The device of each op of a MoE layer's routed experts in an offloaded block, in graph
    order (GATED_ORDER or UNGATED_ORDER), when the projections named in `cpu_projections`
    ("up", "gate", "down") have their weights on the CPU: the weightless op between them runs
    on the GPU when the projection before it (gate, or up when ungated) or the one after it
    (down) does (the scheduler's expansion of GPU ops down, then up), else on the CPU."""
    before = "gate" if gated else "up"
    weighted = {name: (CPU if name in cpu_projections else GPU) for name in ("up", "gate", "down")}
    between = GPU if GPU in (weighted[before], weighted["down"]) else CPU
    order = GATED_ORDER if gated else UNGATED_ORDER
    return tuple(between if name in ("glu", "act") else weighted[name] for name in order)


def crossings(devices: tuple[str, ...] | list[str]) -> int:
    """Changes of device along a token's work (each one a new graph split)."""
    return sum(a != b for a, b in zip(devices, devices[1:]))
