"""A command's placement is priced through the CostModel interface (issue 29): the blocks'
shared work comes from `engine/cost/split_work.py`, scaled to what the cost model says a
block on the GPU costs, and nothing outside engine/cost constructs a cost model itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request
from engine.cost.cost_models import analytic_model
from engine.cost.split_work import split_work
from engine.llamacpp.llama_args import parse_llama_command
from engine.llamacpp.llama_placement import placement_cost, placement_of

FAST = PlanChoices(tokens=40, cpu="desktop-ddr5", gpu="rtx-4060-ti-16gb", threads=8)
ROOT = Path(__file__).resolve().parent.parent
COST_MODELS = {"AnalyticCostModel", "CalibratedCostModel", "AtomicCostModel", "CombinedCostModel"}


class SlowerGpuBlocks:
    """A cost model that is not analytic: the analytic one, with every block's shared work
    on the GPU taking `factor` times as long (as a measured profile may say)."""

    fidelity = "measured-stand-in"

    def __init__(self, analytic, factor: float):  # type: ignore[no-untyped-def]
        self.analytic, self.factor = analytic, factor

    def state_costs(self, *a):  # type: ignore[no-untyped-def]
        return self.analytic.state_costs(*a)

    def shared_per_token_s(self) -> float:
        return self.factor * self.analytic.shared_per_token_s()

    def token_overhead_s(self) -> float:
        return self.analytic.token_overhead_s()

    def describe(self):  # type: ignore[no-untyped-def]
        return self.analytic.describe()


def _placed(line: str, request):  # type: ignore[no-untyped-def]
    return placement_of(parse_llama_command(line.split()), request.model)


def test_every_block_on_the_gpu_costs_what_the_cost_model_says():
    request = build_request(FAST)
    analytic = analytic_model(request)
    measured = SlowerGpuBlocks(analytic, 1.5)
    offloaded = _placed("llama-server -ngl 99", request)
    assert placement_cost(request, measured, offloaded).gpu_blocks_s == pytest.approx(measured.shared_per_token_s())
    assert placement_cost(request, analytic, offloaded).gpu_blocks_s == pytest.approx(analytic.shared_per_token_s())
    # blocks on the CPU are the analytic model's CPU lane whatever the cost model: only the GPU side scales
    half = _placed("llama-server -ngl 24", request)
    slow, base = placement_cost(request, measured, half), placement_cost(request, analytic, half)
    assert slow.cpu_blocks_s == base.cpu_blocks_s > 0
    assert slow.gpu_blocks_s == pytest.approx(1.5 * base.gpu_blocks_s)


def test_an_analytic_model_is_its_own_split_work():
    request = build_request(FAST)
    analytic = analytic_model(request)
    shared = split_work(request, analytic)
    assert shared.analytic is analytic and shared.gpu_scale == 1.0
    stand_in = split_work(request, SlowerGpuBlocks(analytic, 2.0))
    assert stand_in.analytic is not analytic and stand_in.gpu_scale == pytest.approx(2.0)


def test_nothing_outside_engine_cost_constructs_a_cost_model():
    """The factory (engine/cost/cost_models.py: build_cost_model, analytic_model) is the one way."""
    found = []
    for package in ("engine", "cope_tui", "probes"):
        for path in (ROOT / package).rglob("*.py"):
            if path.parent.name == "cost" and path.parent.parent.name == "engine":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in COST_MODELS:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id}(")
    assert found == []
