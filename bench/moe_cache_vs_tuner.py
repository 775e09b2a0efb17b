"""COPE's choice of llama.cpp's expert cache size against upstream's tuner, on the same routing.

    python bench/moe_cache_vs_tuner.py [--gpu rtx-4090] [--vram-budget 12] [--model ID] [--trace FILE]

llama.cpp's scripts/moe-cache-tune.py (tag b12191; its header, the only part read) "runs the
server at 2 cache sizes x 3 CPU shares, fits the time per token, and replays the recorded
routing through a copy of the cache logic to predict other sizes and shares", with 2048
tokens a request in the first run and 512 in the others. Its code was not read, so this is
that method re-implemented from the description, not the script: at CPU share 0 (COPE does
not model the share), two runs at the largest cache the budget leaves and at half of it are
the "measurements" (priced by COPE's own model, standing in for the server), a line
time = a + b x misses per token is fitted through them, and every other size is predicted
from the replayed misses. Both then pick a size for the same host layers (`--cpu-moe`).

Printed: each side's pick and predicted time per token, and the time to an answer: COPE's
search (measured here) against the tuner's decode alone (2048 + 5 x 512 tokens at the
speeds of its runs), before the six server starts it also pays.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from cope_tui.commands.plan_args import add_plan_flags, advice_from_args
from engine.advice.cache_search import search_cache
from engine.advice.command_estimate import price_placement_command
from engine.llamacpp.llama_args import parse_llama_command
from engine.hardware.memory import SAFETY_MARGIN_FRACTION
from engine.llamacpp.moe_cache import MIB

TUNER_TOKENS = (2048, 512, 512, 512, 512, 512)  # N_FIRST, then N_CALIB for the five other runs


def _command(request, mib: int) -> list[str]:  # type: ignore[no-untyped-def]
    argv = ["llama-server", "-m", f"{request.model.id}.gguf", "-ngl", "99", "-fa", "on", "-c",
            str(request.context_tokens), "-t", str(request.threads), "--fit", "off", "--cpu-moe", "-lm", "none"]
    return argv + (["--moe-cache-mib", str(mib)] if mib else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_plan_flags(parser)
    import sys

    args = parser.parse_args(sys.argv[1:] or ["--gpu", "rtx-4090", "--vram-budget", "12"])
    advice = advice_from_args(args)
    request, cost_model = advice.rec.request, advice.cost_model

    t0 = time.perf_counter()
    cope = search_cache(request, cost_model)
    cope_s = time.perf_counter() - t0
    if cope.with_cache is None:
        print("no cached command fits this budget")
        return

    def priced(mib: int):  # type: ignore[no-untyped-def]
        return price_placement_command(request, cost_model, parse_llama_command(_command(request, mib)))

    plain = priced(0)
    usable = request.vram_budget_bytes * (1 - SAFETY_MARGIN_FRACTION)
    room = int((usable - plain.memory.vram_bytes) // MIB)
    # every size the tuner's replay predicts, its two "runs" (share 0: the largest and half) among them
    sizes = sorted({int(m) for m in np.linspace(room / 8, room, 8)} | {room // 2})
    at = {m: priced(m) for m in sizes}
    uploads = {m: at[m].cost.cache_upload_s for m in sizes}  # what the replay's misses cost a token
    runs = (at[room], at[room // 2])
    # the tuner's fit: time per token = a + b x the replayed misses' upload time, through its two runs
    slope = (runs[0].tpot_s - runs[1].tpot_s) / (uploads[room] - uploads[room // 2] or 1.0)
    predicted = {m: runs[0].tpot_s + slope * (uploads[m] - uploads[room]) for m in sizes}
    tuner_mib = min(predicted, key=predicted.get)
    tuner_true = at[tuner_mib].tpot_s
    tuner_decode_s = sum(n * r.tpot_s for n, r in zip(TUNER_TOKENS, [runs[0]] * 3 + [runs[1]] * 3))

    w = cope.with_cache
    print(f"model {request.model.name} {request.quant.name}, {request.platform.gpu.name}, budget "
          f"{request.vram_budget_bytes / 2**30:.1f} GiB, trace {request.trace.meta.source} "
          f"({request.trace.expert_ids.shape[0]} tokens)")
    print(f"COPE : {' '.join(w.argv[w.argv.index('--fit') + 2:])}  predicted {w.tpot_s * 1e3:.2f} ms/token "
          f"({w.tokens_per_s:.1f} tok/s)")
    print(f"tuner: --cpu-moe --moe-cache-mib {tuner_mib} -lm none  predicted {predicted[tuner_mib] * 1e3:.2f} "
          f"ms/token, COPE prices it {tuner_true * 1e3:.2f} ms/token ({1 / tuner_true:.1f} tok/s)")
    print(f"COPE's pick / the tuner's, by COPE's price: {tuner_true / w.tpot_s:.3f}x")
    print(f"time to an answer: COPE {cope_s:.2f} s ({cope.tried} commands priced); tuner >= {tuner_decode_s:.0f} s "
          f"of decode in 6 server runs ({sum(TUNER_TOKENS)} tokens), plus 6 model loads: "
          f"{tuner_decode_s / cope_s:.0f}x")


if __name__ == "__main__":
    main()
