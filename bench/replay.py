"""How fast replay is: one `advise()` call and a sweep of VRAM budgets.

    python bench/replay.py            # advise and the sweep, 1,000 and 16,000 tokens
    python bench/replay.py --short    # only the 1,000-token cases
    python bench/replay.py --score    # also: advise with LRU and score eviction


Workload: the default `cope advise` setting (Qwen3-30B-A3B, 48 MoE layers, 128
experts, top-8; the rtx-4060-ti-16gb and desktop-ddr5 presets; the analytic cost
model) on a synthetic trace of 2,000 tokens split into a 1,000-token profile and
the 1,000 tokens replayed; then the long case, 32,000 tokens split into a 16,000-token
profile and 16,000 tokens replayed (the length of a real recorded trace). Prints seconds, candidates, the (token, layer) steps
covered per second (every candidate's histogram covers tokens x layers steps,
whether it was replayed, shared or read off a fixed residency), and each time as a
fraction of its target. `--score` adds `advise --eviction lru,score`, whose score
caches (and small or few LRU pools) run on the step-wise residency of
engine/residency.py rather than the vectorised LRU engines; it has no target. Measures
only; asserts nothing.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clean checkout

from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request  # noqa: E402
from engine.advise import advise, sweep_budgets  # noqa: E402
from engine.catalog import get_model  # noqa: E402
from engine.analytic_cost import AnalyticCostModel  # noqa: E402
from engine.memory import GIB  # noqa: E402
from engine.policy import Eviction  # noqa: E402
from engine.synthetic import SyntheticSettings, synthetic_trace  # noqa: E402

MODEL = "qwen3-30b-a3b"
GPU = "rtx-4060-ti-16gb"
CPU = "desktop-ddr5"
SWEEP_GIB = tuple(range(6, 22))  # 16 budgets
TARGETS_S = {1000: (0.3, 1.0), 16000: (1.0, 2.0)}  # tokens replayed: (advise, sweep)


def workload(tokens: int = 1000):
    settings = SyntheticSettings(tokens=2 * tokens, sequences=2, zipf_exponent=0.7, seed=0)
    profile, replayed = synthetic_trace(get_model(MODEL), settings).split(0.5)
    request = build_request(PlanChoices(model=MODEL, gpu=GPU, cpu=CPU))
    request = replace(request, trace=replayed, profile=profile)
    cost_model = AnalyticCostModel(
        request.model, request.quant, request.platform, context_tokens=request.context_tokens
    )
    return request, cost_model


def report(label: str, seconds: float, candidates: int, steps: int, target_s: float | None) -> None:
    against = f"{seconds / target_s:6.2f} x target ({target_s:g} s)" if target_s else "(no target)"
    print(f"{label:<28} {seconds:8.3f} s  {candidates:5d} candidates  {steps / seconds:14,.0f} steps/s  {against}")


def main() -> None:
    lengths = [1000] if "--short" in sys.argv[1:] else [1000, 16000]
    for tokens in lengths:
        run(tokens)


def run(tokens: int) -> None:
    advise_target_s, sweep_target_s = TARGETS_S[tokens]
    request, cost_model = workload(tokens)
    trace = request.trace
    steps_per_candidate = trace.n_tokens * trace.n_layers
    print(
        f"{MODEL}: {trace.n_tokens} tokens replayed, {trace.n_layers} layers, "
        f"{trace.meta.n_experts} experts, top-{trace.top_k}; {GPU}, {CPU}"
    )

    start = time.perf_counter()
    recommendation = advise(request, cost_model)
    seconds = time.perf_counter() - start
    n = len(recommendation.estimates)
    report(f"advise ({request.vram_budget_bytes / GIB:g} GiB)", seconds, n, n * steps_per_candidate, advise_target_s)

    budgets = [gib * GIB for gib in SWEEP_GIB]
    start = time.perf_counter()
    recommendations = sweep_budgets(request, cost_model, budgets)
    seconds = time.perf_counter() - start
    n = sum(len(r.estimates) for r in recommendations)
    label = f"sweep ({len(budgets)} budgets, {SWEEP_GIB[0]}..{SWEEP_GIB[-1]} GiB)"
    report(label, seconds, n, n * steps_per_candidate, sweep_target_s)

    if "--score" in sys.argv[1:] and tokens == 1000:  # score caches: the short trace only
        scored = replace(request, evictions=(Eviction.LRU, Eviction.SCORE))
        start = time.perf_counter()
        recommendation = advise(scored, cost_model)
        seconds = time.perf_counter() - start
        n = len(recommendation.estimates)
        report("advise, lru and score", seconds, n, n * steps_per_candidate, None)


if __name__ == "__main__":
    main()
