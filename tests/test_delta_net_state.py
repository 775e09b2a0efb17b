"""A Gated DeltaNet block's recurrent state is streamed every decode step where the block runs
(engine/cost/analytic_cost.py DELTA_NET_STATE_PASSES: llama.cpp gathers it out of the cache, its
fused op reads that and writes the new one, a copy puts it back in the cache)."""

from __future__ import annotations

import pytest

from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request
from engine.cost.analytic_cost import DELTA_NET_STATE_PASSES, AnalyticCostModel
from engine.cost.cost_models import analytic_model
from engine.llamacpp.llama_args import parse_llama_command
from engine.llamacpp.llama_placement import placement_cost, placement_of

REQUEST = build_request(PlanChoices(model="qwen3-next-80b-a3b", tokens=20, cpu="desktop-ddr5", gpu="rtx-4060-ti-16gb"))
MODEL = AnalyticCostModel(REQUEST.model, REQUEST.quant, REQUEST.platform, context_tokens=REQUEST.context_tokens)


def test_the_state_of_a_delta_net_block_by_hand():
    """Qwen3-Next: 16 key heads and 32 value heads of 128, a 4-wide convolution. F32 state: the
    convolution's last 3 inputs of q, k and v (3 x (2 x 16 x 128 + 32 x 128) = 24,576) and the
    delta rule's 128 x 4,096 = 524,288 values: 548,864 x 4 bytes, read and written three times a step."""
    assert REQUEST.model.recurrent_state_bytes_per_layer(0) == 548_864 * 4
    assert MODEL.state_bytes(0) == DELTA_NET_STATE_PASSES * 548_864 * 4 == 6 * 2_195_456
    assert MODEL.state_bytes(3) == 0  # blocks 3, 7, ... attend with a KV cache instead


@pytest.mark.parametrize("on_gpu", [True, False])
def test_the_state_costs_its_bytes_at_the_stream_of_the_device_that_runs_the_block(on_gpu):
    block = 0
    shared = REQUEST.model.shared_layer_bytes(REQUEST.quant, block)
    if on_gpu:
        without = MODEL.gpu_block_fixed_s(block) + shared / MODEL.gpu_stream_bytes_per_s
        assert MODEL.gpu_block_s(block) - without == pytest.approx(MODEL.state_bytes(block) / MODEL.gpu_stream_bytes_per_s)
    else:
        stream = MODEL.cpu_stream_bytes_per_s(8)
        without = MODEL.a.cpu_block_overhead_s + shared / stream
        assert MODEL.cpu_block_s(block, 8) - without == pytest.approx(MODEL.state_bytes(block) / stream)


def test_a_commands_placement_prices_the_state_as_the_cost_model_does():
    """engine/cost/split_work.py prices a command's blocks piece by piece: with every block on the
    GPU it comes to the cost model's own shared work, the state included (it would fall short by
    the state's bytes if the split left it out)."""
    analytic = analytic_model(REQUEST)
    placement = placement_of(parse_llama_command(["llama-server", "-ngl", "99"]), REQUEST.model)
    assert any(analytic.state_bytes(b) for b in range(REQUEST.model.n_blocks))
    assert placement_cost(REQUEST, analytic, placement).gpu_blocks_s == pytest.approx(analytic.shared_per_token_s())
