"""How much synthetic routing fitted to an imatrix's counts closes the hit-rate gap to
real routing (issue 31, part 3), on real DeepSeek-V2-Lite-Chat routing.

    python bench/imatrix_synthetic_gap.py [TRACE_FOLDER]

TRACE_FOLDER: the moe-beyond DeepSeek-V2-Lite-Chat routing folder (default: the shared
trace folder beside this checkout, `../shared/traces/deepseek-v2-lite-chat__moe-beyond`).

No imatrix of DeepSeek-V2-Lite-Chat is at hand (no weights on this machine), so the
imatrix stands in as what llama-imatrix counts on the profile half's text: the
per-expert routing counts of those tokens (tests/test_imatrix_real.py checks, with the
real binary on a tiny model, that an imatrix's counts are exactly that). The moe-beyond
routing is teacher forcing over prompts, like llama-imatrix's, replayed as decode.

Three ways to rank, each replaying 1 + 4 candidates at 8, 16 and 32 of 64 slots a layer:
- real: popularity from the first half of the trace, the second half replayed (what
  `cope advise --trace` does);
- zipf: what COPE does with no trace: synthetic routing, Zipf 0.7 over a random order,
  split the same way;
- imatrix: popularity from the counts (`--profile-trace X.imatrix.gguf`), the replayed
  routing synthetic with each layer's popularity from those counts (locality 0.3, the
  generator's default), as many tokens as the real replay.
Prints each hit rate and, per way, the mean absolute gap to real. Measures only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clean checkout

from cope_tui.service.request import SYNTHETIC_ZIPF  # noqa: E402
from engine.models.catalog import get_model  # noqa: E402
from engine.replays.hit_rates import hit_rates_at_slots  # noqa: E402
from engine.traces.popularity import PopularityProfile  # noqa: E402
from engine.traces.synthetic import SyntheticSettings, synthetic_trace  # noqa: E402
from engine.traces.trace import TraceMeta  # noqa: E402
from engine.traces.moe_beyond import read_moe_beyond_csv_dir  # noqa: E402

FOLDER = Path(__file__).resolve().parents[2] / "shared" / "traces" / "deepseek-v2-lite-chat__moe-beyond"
SLOTS = (8, 16, 32)
SHOWN = ("fixed.sequential.uniform", "fixed.sequential.nonuniform", "layer.stage.uniform.lru",
         "layer.stage.nonuniform.lru", "pool.stage.uniform.lru")


def rates(trace, profile, slots):  # type: ignore[no-untyped-def]
    rows = hit_rates_at_slots(trace, profile, slots, prefetch_budget=0, admit_per_hits=None)
    return {r.candidate_id: r.hit_rate for r in rows if r.candidate_id in SHOWN}


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else FOLDER
    model = get_model("deepseek-v2-lite-chat")
    real = read_moe_beyond_csv_dir(folder)
    profile, replayed = real.split(0.5)
    counts = profile.popularity()
    meta = TraceMeta(model=model.id, source="counts of the profile half", origin="imported",
                     n_experts=model.n_routed_experts, moe_blocks=tuple(model.moe_blocks))
    imatrix = PopularityProfile(counts=counts, meta=meta, top_k=model.top_k, label="profile-half counts")
    fitted = synthetic_trace(model, SyntheticSettings(tokens=replayed.n_tokens, seed=0, popularity=counts,
                                                      sequences=2, predictor_accuracy=None))
    zipf_full = synthetic_trace(model, SyntheticSettings(tokens=2 * replayed.n_tokens, seed=0, sequences=2,
                                                         zipf_exponent=SYNTHETIC_ZIPF, predictor_accuracy=None))
    zipf_profile, zipf_replayed = zipf_full.split(0.5)
    print(f"DeepSeek-V2-Lite-Chat (moe-beyond): {profile.n_tokens} profile tokens, {replayed.n_tokens} replayed, "
          f"{real.n_layers} layers x {real.meta.n_experts} experts, top-{real.top_k}; no prefetch")
    ways = {"real": (replayed, profile), "zipf": (zipf_replayed, zipf_profile), "imatrix": (fitted, imatrix)}
    gaps: dict[str, list[float]] = {w: [] for w in ways if w != "real"}
    print(f"{'slots':>5}  {'candidate':<30} " + " ".join(f"{w:>8}" for w in ways))
    for slots in SLOTS:
        got = {w: rates(t, p, slots) for w, (t, p) in ways.items()}
        for cid in SHOWN:
            print(f"{slots:>5}  {cid:<30} " + " ".join(f"{got[w][cid]:8.2%}" for w in ways))
            for w in gaps:
                gaps[w].append(abs(got[w][cid] - got["real"][cid]))
    for w, g in gaps.items():
        print(f"mean |{w} - real| hit rate: {np.mean(g):.2%} (max {np.max(g):.2%}) over {len(g)} cells")


if __name__ == "__main__":
    main()
