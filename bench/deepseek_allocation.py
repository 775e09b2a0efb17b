"""Nonuniform against uniform per-layer LRU on real DeepSeek-V2-Lite routing.

    python bench/deepseek_allocation.py [TRACE_FOLDER]

TRACE_FOLDER: the moe-beyond DeepSeek-V2-Lite-Chat routing folder (default: the shared
trace folder beside this checkout, `../shared/traces/deepseek-v2-lite-chat__moe-beyond`).
Splits the trace as `cope advise` does without --profile-trace (popularity and hit
curves from the first half of the tokens, the candidates replayed on the second),
then, for totals of 117, 169, ..., 1261 expert slots (26 MoE layers x 4.5 up to
x 48.5), replays the per-layer LRU with stage admission (every miss copied in, no
prefetch) under both allocations at the same total. Prints, per total: the fewest
slots the nonuniform candidate gives a layer, and both hit rates, with the curves
measured on the whole profile (what COPE does) and on its last 1,024 tokens (what it
did before). The routing is teacher forcing over prompts, replayed as a stand-in for
decode routing. Measures only; asserts nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clean checkout

from engine.replays.hit_curves import lru_hit_curves  # noqa: E402
from engine.replays.policy import Allocation, Candidate, Eviction, Execution, Kind, Residency  # noqa: E402
from engine.replays.replay import ReplaySetup, replay_many  # noqa: E402
from engine.traces.moe_beyond import read_moe_beyond_csv_dir  # noqa: E402

FOLDER = Path(__file__).resolve().parents[2] / "shared" / "traces" / "deepseek-v2-lite-chat__moe-beyond"
TOTALS = range(117, 1262, 52)
CURVES = {"whole profile": None, "last 1,024 tokens": 1024}


def stage_lru(allocation: Allocation) -> Candidate:
    return Candidate(Kind.MATRIX, Residency.LAYER, Execution.STAGE, allocation, Eviction.LRU)


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER
    trace = read_moe_beyond_csv_dir(folder)
    profile, replayed = trace.split(0.5)
    popularity = profile.popularity()
    n_layers, k = replayed.n_layers, replayed.top_k
    print(f"DeepSeek-V2-Lite: {profile.n_tokens} profile tokens, {replayed.n_tokens} replayed, "
          f"{n_layers} layers, {trace.meta.n_experts} experts, top-{k}; per-layer LRU, stage admission")
    lru_hit_curves(profile.expert_ids[:2], popularity)  # loads the compiled loops: not part of the timing
    columns = {}
    for name, tokens in CURVES.items():
        start = time.perf_counter()
        curves = lru_hit_curves(profile.expert_ids, popularity, tokens=tokens)
        print(f"curves on the {name}: {time.perf_counter() - start:.3f} s")
        jobs = [(stage_lru(allocation), ReplaySetup(popularity, total, 0, None, curves))
                for total in TOTALS for allocation in (Allocation.UNIFORM, Allocation.NONUNIFORM)]
        stats = replay_many(replayed.expert_ids, None, jobs)
        columns[name] = list(zip(stats[::2], stats[1::2]))
    header = "  ".join(f"{name + ': min, uniform, nonuniform, diff':>48}" for name in CURVES)
    print(f"{'total':>5}  {header}")
    for i, total in enumerate(TOTALS):
        cells = []
        for name in CURVES:
            uniform, nonuniform = columns[name][i]
            cells.append(f"{int(nonuniform.slots_per_layer.min()):>14d}  {uniform.hit_rate:10.4%}  "
                         f"{nonuniform.hit_rate:10.4%}  {nonuniform.hit_rate - uniform.hit_rate:+9.4%}")
        print(f"{total:>5}  " + "  ".join(f"{cell:>48}" for cell in cells))


if __name__ == "__main__":
    main()
