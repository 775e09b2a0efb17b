"""Thread scaling of the executor's CPU lane against the probes' CPU kernel.

For Qwen3-30B-A3B's real expert shape (Q4_K_M by default) on this machine's CPU, at each
thread count, in one process as `cope validate` runs them:
- probe: probes.operators.cpu_experts for k experts (the atomic probe, on the calling
  thread), times the MoE layers: the expert time per token the probes imply;
- executed: probes.executor.Executor running the all-on-CPU candidate over a synthetic
  trace (median expert time per token), with the lanes' observed torch threads and the
  CPUs the process kept busy meanwhile (CPU time / wall time: about the thread count
  when the threads run at once, whatever else loads the machine).

Prints both, the speed-up from the first thread count to each other (executed and
implied by the probe) and the load average before and after. Run:
python bench/executor_threads.py [--threads 1,2] [--tokens 16] [--quant Q4_K_M] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.models.catalog import load_model  # noqa: E402
from engine.replays.policy import Candidate, Kind  # noqa: E402
from engine.models.quant import get_quantization  # noqa: E402
from engine.replays.replay import ReplaySetup  # noqa: E402
from engine.traces.synthetic import SyntheticSettings, synthetic_trace  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-30b-a3b")
    ap.add_argument("--quant", default="Q4_K_M")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2, help="every thread count this many times, interleaved")
    args = ap.parse_args()
    import torch

    from probes import operators as ops
    from probes.executor import Executor

    counts = [int(t) for t in args.threads.split(",")]
    model, quant = load_model(args.model), get_quantization(args.quant)
    print(f"load average before: {os.getloadavg()}; torch {torch.__version__}, {os.cpu_count()} CPUs")
    trace = synthetic_trace(model, SyntheticSettings(tokens=args.tokens, seed=0))
    setup = ReplaySetup(trace.popularity(), 0, prefetch_budget=0)
    executor = Executor(model, quant, mode="timed", gpu_device="cpu")
    pool = executor.host
    probe, executed = {t: [] for t in counts}, {t: [] for t in counts}
    for _ in range(args.rounds):
        for t in counts:
            per_step = ops.cpu_experts(pool, model.top_k, t, 3.0).median_s  # the probe, on this thread
            probe[t].append(per_step * model.n_moe_layers)
            c0, w0 = os.times(), time.perf_counter()
            run = executor.run(Candidate(Kind.ALL_CPU), trace, setup, threads=t)
            c1, w1 = os.times(), time.perf_counter()
            busy = (c1.user - c0.user + c1.system - c0.system) / (w1 - w0)  # CPUs this process kept busy
            executed[t].append(run.experts_median_s)
            print(f"  {t} threads: probe {probe[t][-1] * 1e3:7.1f} ms/token, executed {run.experts_median_s * 1e3:7.1f}"
                  f" ms/token, {busy:.2f} CPUs busy (lanes: {run.summary()['cpu_lane_threads']})", flush=True)
    base = counts[0]
    print(f"{'threads':>7} {'probe ms':>9} {'executed ms':>12} {'implied x':>10} {'achieved x':>11}")
    for t in counts:
        p, e = min(probe[t]), min(executed[t])
        implied, achieved = min(probe[base]) / p, min(executed[base]) / e
        print(f"{t:>7} {p * 1e3:9.1f} {e * 1e3:12.1f} {implied:10.2f} {achieved:11.2f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
