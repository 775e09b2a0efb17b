"""Where a decode token's work changes device in llama.cpp (engine/llamacpp/graph_splits.py),
counted by hand from the scheduler's rules, and what a mapped model larger than the RAM reads
from disk when the page cache keeps the experts tokens reuse (host_memory.cold_expert_disk_bytes)."""

from __future__ import annotations

import shlex

import numpy as np
import pytest

from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request
from engine.cost.analytic_cost import AnalyticCostModel
from engine.hardware.host_memory import cold_expert_disk_bytes
from engine.llamacpp.graph_splits import crossings, expert_op_devices
from engine.llamacpp.llama_args import parse_llama_command
from engine.llamacpp.llama_placement import placement_cost, placement_of

G, C = "gpu", "cpu"
REQUEST = build_request(PlanChoices(tokens=20, cpu="desktop-ddr5", gpu="rtx-4060-ti-16gb", threads=8))


def cost_of(line: str):  # type: ignore[no-untyped-def]
    model = AnalyticCostModel(REQUEST.model, REQUEST.quant, REQUEST.platform, context_tokens=REQUEST.context_tokens)
    placement = placement_of(parse_llama_command(shlex.split(line)), REQUEST.model)
    return placement, placement_cost(REQUEST, model, placement)


@pytest.mark.parametrize("on_cpu, devices", [
    # every projection on the CPU: one CPU split (up, gate, GLU, down), the weighting on the GPU
    ({"up", "gate", "down"}, (C, C, C, C)),
    # down alone: the GLU follows gate onto the GPU
    ({"down"}, (G, G, G, C)),
    # up and down: gate and the GLU stay on the GPU between them: two CPU splits
    ({"up", "down"}, (C, G, G, C)),
    # gate alone: the GLU goes to the GPU because down is there
    ({"gate"}, (G, C, G, G)),
    # up and gate: the GLU goes to the GPU with down
    ({"up", "gate"}, (C, C, G, G)),
    ({"gate", "down"}, (G, C, C, C)),
])
def test_the_expert_ops_run_where_the_scheduler_puts_them(on_cpu, devices):
    assert expert_op_devices(frozenset(on_cpu), gated=True) == devices


def test_an_ungated_ffn_puts_its_activation_beside_up_or_down():
    assert expert_op_devices(frozenset({"up"}), gated=False) == (C, G, G)
    assert expert_op_devices(frozenset({"up", "down"}), gated=False) == (C, C, C)
    assert crossings([G, C, G, G, C, G]) == 4 and crossings([G]) == 0


def test_splits_a_token_for_each_placement():
    """Qwen3-30B-A3B (48 blocks, every one MoE): --cpu-moe crosses twice a block (to the CPU
    for the experts and back); --n-cpu-moe 20 twice for each of its 20 blocks; -ngl 20 once
    (28 whole blocks on the CPU, then the GPU); -ot up and down twice as often as --cpu-moe,
    since gate stays on the GPU between them (ggml-backend.cpp's expansion of GPU ops)."""
    assert cost_of("llama-server --cpu-moe")[1].transitions == 2 * 48
    assert cost_of("llama-server --n-cpu-moe 20")[1].transitions == 2 * 20
    assert cost_of("llama-server -ngl 20")[1].transitions == 2  # CPU blocks, GPU blocks, output head on the CPU
    both, cost = cost_of(r"llama-server -ot 'ffn_(up|down)_exps=CPU'")
    assert both.expert_cpu_projections[0] == frozenset({"up", "down"}) and cost.transitions == 4 * 48
    down, cost = cost_of(r"llama-server -ot 'ffn_down_exps=CPU'")
    assert down.expert_cpu_projections[5] == frozenset({"down"}) and cost.transitions == 2 * 48


def test_each_change_of_device_costs_half_a_hand_over():
    """The hand-over (sync_s: the copies in and out and the CPU thread team's start) is charged
    half at each change of device, so two CPU splits a layer cost twice one's."""
    _, one = cost_of(r"llama-server -ot 'ffn_(up|gate|down)_exps=CPU'")
    _, two = cost_of(r"llama-server -ot 'ffn_(up|down)_exps=CPU'")
    sync = AnalyticCostModel(REQUEST.model, REQUEST.quant, REQUEST.platform,
                             context_tokens=REQUEST.context_tokens).a.sync_s
    assert one.sync_s == pytest.approx(48 * sync) and two.sync_s == pytest.approx(2 * 48 * sync)


def test_the_page_cache_drops_the_least_routed_experts_first():
    """Two layers of four experts, top-2, one expert 100 bytes; the counts make the chances a
    token routes each expert (counts + 1 over the layer's, times 2): layer 0 [0.8, 0.6, 0.4,
    0.2], layer 1 [0.5, 0.5, 0.5, 0.5]. 150 bytes missing: layer 0's expert 3 (0.2) whole, then
    half of expert 2 (0.4): 100 x 0.2 + 50 x 0.4 = 40 bytes a token."""
    popularity = np.array([[3, 2, 1, 0], [1, 1, 1, 1]])
    assert cold_expert_disk_bytes(popularity, np.array([100, 100]), 2, 150) == pytest.approx(40.0)
    # nothing missing, nothing read; the GPU's layer (0 bytes on the CPU) is never dropped
    assert cold_expert_disk_bytes(popularity, np.array([100, 100]), 2, 0) == 0.0
    assert cold_expert_disk_bytes(popularity, np.array([0, 100]), 2, 100) == pytest.approx(50.0)
    # more missing than all the CPU's experts: every expert from disk with its chance (layer 1:
    # 4 x 100 x 0.5 = 200), and the other 100 bytes read every token
    assert cold_expert_disk_bytes(popularity, np.array([0, 100]), 2, 500) == pytest.approx(300.0)


def test_a_skewed_routing_reads_less_from_disk_than_a_flat_one():
    flat = np.full((1, 8), 10)
    skewed = np.array([[70, 5, 1, 1, 1, 1, 1, 0]])
    missing = 300.0
    assert (cold_expert_disk_bytes(skewed, np.array([100]), 2, missing)
            < cold_expert_disk_bytes(flat, np.array([100]), 2, missing) == pytest.approx(300 * 2 / 8))
