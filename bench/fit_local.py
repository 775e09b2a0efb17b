"""Fit how much of a measured memory read stream llama.cpp's CPU mat-vecs reach.

    python bench/fit_local.py

`cope detect` measures this machine's read bandwidth (numpy reductions, one thread and
every core). Where it has, the analytic model's CPU lane comes from those figures
(engine/cost/analytic_cost.py, `machine_assumptions`): one thread streams
`measured_thread_share` of the one-thread read, every thread together at most
`measured_read_share` of the all-core read, in place of the published fit's per-thread rate
and efficiency against a theoretical peak. This script fits the two shares on llama-bench
runs built and measured on one machine (bench/data/llamacpp_cpu_runs.json,
written from bench/llamacpp_cpu.py's results: Qwen3-30B-A3B's shapes in 6 blocks, Q8_0 and
Q4_K_M, 1 and 2 threads), pricing each run's command through the same code as `cope
estimate`, minimising the mean squared log ratio. The other constants keep the published
fit. Two numbers for every machine, from one machine's four runs: docs/accuracy.md says how
far that carries.

Then the measured fidelities' CPU lane: COPE's CPU probe times torch's int8 mat-vec, not
llama.cpp's kernel; `LLAMA_CPP_KERNEL_SPEEDUP` (engine/cost/measured_cost.py) converts the one
into the other. It is fitted the same way on the same runs, priced with the probe profiles
measured on that machine minutes after them (bench/data/probe_profile_*.json) and the
fitted shares. A test (tests/test_local_fit.py) checks the code holds both optima.
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cope_tui.options import PlanChoices  # noqa: E402
from cope_tui.service.request import build_request  # noqa: E402
from engine.cost.analytic_cost import AnalyticAssumptions, machine_assumptions  # noqa: E402
from engine.cost.cost_models import analytic_model  # noqa: E402
from engine.advice.command_estimate import command_settings, price_placement_command  # noqa: E402
from engine.llamacpp.llama_args import parse_llama_command  # noqa: E402
from engine.cost.measured_cost import LLAMA_CPP_KERNEL_SPEEDUP, AtomicCostModel, LlamaCppCpuLane  # noqa: E402
from engine.hardware.platform import Fact  # noqa: E402
from engine.profiles.profile_io import load_profile  # noqa: E402

DATA = ROOT / "bench" / "data" / "llamacpp_cpu_runs.json"
FITTED = ("measured_thread_share", "measured_read_share")
BOUNDS = {name: (0.2, 1.0) for name in FITTED}  # a mat-vec never streams more than the plain read does
SPEEDUP_BOUNDS = (1.0, 5.0)


def load(path: Path = DATA) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def prepared(data: dict) -> list[tuple[object, object, float]]:
    """(request, command, measured tok/s) of each run: the catalog model cut to the run's
    blocks, on a CPU with the measured read figures."""
    out = []
    reads = {int(t): float(v) for t, v in data["read_bytes_per_s"].items()}
    for run in data["runs"]:
        threads = int(run["threads"])
        request = build_request(PlanChoices(model=data["model"], quant=run["quant"], gpu="rtx-4060-ti-16gb",
                                            cpu="desktop-ddr5", trace="synthetic", tokens=20))
        blocks = int(data["blocks"])
        model = replace(request.model, id=f"{request.model.id}-{blocks}blocks", n_blocks=blocks,
                        moe_blocks=tuple(b for b in request.model.moe_blocks if b < blocks))
        cpu = replace(request.platform.cpu, name=data["cpu"], preset_id=None,
                      physical_cores=Fact.given(max(reads), "the machine's cores"),
                      mem_bandwidth_bytes_per_s=Fact.measured(reads[max(reads)], data["read_how"]),
                      thread_bandwidth_bytes_per_s=Fact.measured(reads[1], data["read_how"]))
        request = replace(request, model=model, platform=replace(request.platform, cpu=cpu))
        command = parse_llama_command(shlex.split(f"llama-bench -m m.gguf -ngl 0 -p 0 -n 64 -t {threads}"))
        request = replace(request, **command_settings(command, request))
        out.append((request, command, float(run["tokens_per_s"])))
    return out


def ratios(assumptions: AnalyticAssumptions, runs=None) -> list[float]:  # type: ignore[no-untyped-def]
    """Estimated / measured tok/s of each run under `assumptions` (its shares applied to the
    run's measured read figures)."""
    runs = runs if runs is not None else prepared(load())
    out = []
    for request, command, measured in runs:
        model = analytic_model(request, assumptions=machine_assumptions(request.platform.cpu, assumptions))
        out.append(price_placement_command(request, model, command).tokens_per_s / measured)
    return out


def loss(assumptions: AnalyticAssumptions, runs=None) -> float:  # type: ignore[no-untyped-def]
    rs = ratios(assumptions, runs)
    return sum(math.log(r) ** 2 for r in rs) / len(rs)


def _golden(f, low: float, high: float) -> float:  # type: ignore[no-untyped-def]
    """The minimum of f on [low, high], a valley in one variable."""
    g = (math.sqrt(5) - 1) / 2
    a, b = high - g * (high - low), low + g * (high - low)
    fa, fb = f(a), f(b)
    while high - low > 1e-5:
        if fa < fb:
            high, b, fb = b, a, fa
            a = high - g * (high - low)
            fa = f(a)
        else:
            low, a, fa = a, b, fb
            b = low + g * (high - low)
            fb = f(b)
    return (low + high) / 2


def fit(runs=None) -> AnalyticAssumptions:  # type: ignore[no-untyped-def]
    """Both shares, by golden-section search on one at a time until neither moves."""
    runs = runs if runs is not None else prepared(load())
    best = AnalyticAssumptions()
    for _ in range(30):
        before = best
        for name in FITTED:
            value = _golden(lambda v: loss(replace(best, **{name: v}), runs), *BOUNDS[name])
            best = replace(best, **{name: value})
        if all(abs(getattr(best, n) - getattr(before, n)) < 1e-5 for n in FITTED):
            break
    return best


def probe_profile(quant: str):  # type: ignore[no-untyped-def]
    return load_profile(ROOT / "bench" / "data" / f"probe_profile_{quant}.json")


def atomic_ratios(speedup: float, runs=None, data=None) -> list[float]:  # type: ignore[no-untyped-def]
    """Estimated / measured tok/s of each run at the atomic fidelity (the probe profile of
    its quantization, CPU experts as llama.cpp at `speedup`; the code's shares)."""
    data = data if data is not None else load()
    runs = runs if runs is not None else prepared(data)
    out = []
    for run, (request, command, measured) in zip(data["runs"], runs):
        analytic = analytic_model(request, as_probed=True)
        lane = LlamaCppCpuLane(speedup, analytic.cpu_bytes_per_s * analytic.a.cpu_bandwidth_efficiency,
                               float(request.model.expert_bytes(request.quant)))
        atomic = AtomicCostModel(probe_profile(run["quant"]), n_blocks=request.model.n_blocks, llama_cpp=lane)
        out.append(price_placement_command(request, atomic, command).tokens_per_s / measured)
    return out


def atomic_loss(speedup: float, runs=None, data=None) -> float:  # type: ignore[no-untyped-def]
    rs = atomic_ratios(speedup, runs, data)
    return sum(math.log(r) ** 2 for r in rs) / len(rs)


def fit_speedup(runs=None, data=None) -> float:  # type: ignore[no-untyped-def]
    return _golden(lambda v: atomic_loss(v, runs, data), *SPEEDUP_BOUNDS)


def main() -> int:
    data = load()
    runs = prepared(data)
    best = fit(runs)
    print("fitted (engine/cost/analytic_cost.py): " + ", ".join(f"{n} = {getattr(best, n):.3f}" for n in FITTED))
    print(f"data: {DATA.relative_to(ROOT)} ({data['date']}, {data['cpu']}; {data['llama_cpp']})")
    for label, a in (("fitted", best), ("in the code", AnalyticAssumptions())):
        cells = ", ".join(f"{r['quant']} {r['threads']}t {x:.3f}" for r, x in zip(data["runs"], ratios(a, runs)))
        shares = ", ".join(f"{getattr(a, n):.3f}" for n in FITTED)
        print(f"{label} ({shares}): mean squared log ratio {loss(a, runs):.5f}; estimated/measured: {cells}")
    speedup = fit_speedup(runs, data)
    print(f"fitted (engine/cost/measured_cost.py): LLAMA_CPP_KERNEL_SPEEDUP = {speedup:.3f}")
    for label, v in (("fitted", speedup), ("in the code", LLAMA_CPP_KERNEL_SPEEDUP)):
        cells = ", ".join(f"{r['quant']} {r['threads']}t {x:.3f}"
                          for r, x in zip(data["runs"], atomic_ratios(v, runs, data)))
        print(f"atomic, {label} {v:.3f}: mean squared log ratio {atomic_loss(v, runs, data):.5f}; "
              f"estimated/measured: {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
