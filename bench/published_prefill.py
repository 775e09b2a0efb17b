"""COPE's prompt-processing estimate of every published run with a prompt figure, beside it.

    python bench/published_prefill.py [--csv PATH] [--json OUT]

The rows of bench/published_rows.py that publish `pp_tok_s` (PROMPT_RUNS says how each was
taken: prompt tokens, -ub, depth, the build's copy of CPU experts, ik_llama.cpp's -rtr) are
priced with engine/cost/prefill_cost.py on the request and placement bench/published.py builds
for the decode figure (the same model, quantization, hardware presets and command). The
published tokens/s never enter the estimate. Reported: MAPE over the rows with their
hardware stated and over all priced rows, the GPU rows (experts copied or computed beside a
GPU) and the CPU-only rows apart, and the order within each -ub sweep.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.published import mape, output_first_of, prepared, rows_from_args, tokens_per_s  # noqa: E402
from bench.published_rows import PROMPT_RUNS, ROWS, UBATCH_SWEEPS, PromptRun, Row  # noqa: E402
from cope_tui.options import SYNTHETIC_TOKENS, PlanChoices  # noqa: E402
from cope_tui.service.request import build_request  # noqa: E402
from engine.cost.analytic_cost import AnalyticCostModel  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from engine.llamacpp.llama_placement import placement_memory, placement_of  # noqa: E402
from engine.cost.prefill_cost import IK_LLAMA, LLAMA_CPP, PrefillAssumptions, PrefillModel  # noqa: E402


@dataclass(frozen=True)
class PricedPrompt:
    row: Row
    run: PromptRun
    published_tps: float | None
    estimate_tps: float | None
    problem: str | None
    cpu_only: bool

    @property
    def ratio(self) -> float | None:
        if self.estimate_tps is None or not self.published_tps:
            return None
        return self.estimate_tps / self.published_tps


def popularity(row: Row):  # type: ignore[no-untyped-def]
    return _popularity(row.model)


@functools.cache
def _popularity(model: str):  # type: ignore[no-untyped-def]
    """Routing counts of the model's synthetic trace at COPE's usual length (the decode
    benchmark replays 20 tokens, too few to say how many experts a micro-batch routes to);
    the same for every row of a model."""
    choices = PlanChoices(model=model, gpu="rtx-4060-ti-16gb", cpu="ryzen-9-7950x", trace="synthetic",
                          tokens=SYNTHETIC_TOKENS)
    return build_request(choices).profile.popularity()


def runtime_of(row: Row, run: PromptRun):  # type: ignore[no-untyped-def]
    base = IK_LLAMA if row.runtime == "ik_llama.cpp" else LLAMA_CPP
    return replace(base, copies_used_experts=run.copies_used_experts, repacked=run.repacked)


def price_prompt(row: Row, run: PromptRun, published: dict[str, str],
                 assumptions: PrefillAssumptions | None = None) -> PricedPrompt:
    tps = tokens_per_s(published["pp_tok_s"])
    if run.not_modelled:
        return PricedPrompt(row, run, tps, None, f"not modelled: {run.not_modelled}", row.gpu is None)
    try:
        request, command = prepared(row)
    except CopeInputError as exc:
        return PricedPrompt(row, run, tps, None, f"cannot price: {exc}", row.gpu is None)
    has_gpu = row.gpu is not None
    placement = placement_of(command, request.model, has_gpu=has_gpu, output_first=output_first_of(row, published))
    problem = placement_memory(request, placement, mapped=not command.no_mmap).problem() if has_gpu else None
    if problem is not None:
        return PricedPrompt(row, run, tps, None, problem, False)
    analytic = AnalyticCostModel(request.model, request.quant, request.platform,
                                 context_tokens=request.context_tokens, attention_tokens=request.attention_tokens,
                                 kv_bytes_per_element=request.kv_bytes_per_element)
    model = PrefillModel(request.model, request.quant, request.platform, popularity=popularity(row),
                         threads=run.threads or request.threads, gpu_bytes_per_s=analytic.gpu_stream_bytes_per_s,
                         h2d_bytes_per_s=analytic.h2d_bytes_per_s,
                         cpu_bytes_per_s=analytic.cpu_stream_bytes_per_s(run.threads or request.threads),
                         assumptions=assumptions or PrefillAssumptions())
    cost = model.prompt(placement, run.prompt_tokens, ubatch=run.ubatch, batch=max(run.ubatch, 2048),
                        depth=run.depth, runtime=runtime_of(row, run), has_gpu=has_gpu)
    return PricedPrompt(row, run, tps, cost.tokens_per_s, None, not has_gpu)


def price_all(rows_csv: list[dict[str, str]], assumptions: PrefillAssumptions | None = None) -> list[PricedPrompt]:
    out = []
    for row in ROWS:
        run = PROMPT_RUNS.get(row.index)
        if run is None:
            continue
        published = rows_csv[row.index]
        if row.model_in_csv not in published["model"]:
            raise SystemExit(f"published_prefill.py: row {row.index} is {published['model']!r}: the CSV changed")
        out.append(price_prompt(row, run, published, assumptions))
    return out


def sweep_orders(priced: list[PricedPrompt]) -> list[tuple[str, bool, str]]:
    by_index = {p.row.index: p for p in priced if p.ratio is not None}
    out = []
    for name, indices in UBATCH_SWEEPS.items():
        members = [by_index[i] for i in indices if i in by_index]
        pub = [p.row.index for p in sorted(members, key=lambda p: p.published_tps)]
        est = [p.row.index for p in sorted(members, key=lambda p: p.estimate_tps)]
        out.append((name, pub == est, f"published slowest->fastest {pub}, estimated {est}"))
    return out


def summary(priced: list[PricedPrompt]) -> dict:
    ok = [p for p in priced if p.ratio is not None]
    groups = {
        "all": ok,
        "hardware_stated": [p for p in ok if p.row.stated],
        "gpu_rows": [p for p in ok if not p.cpu_only],
        "gpu_rows_stated": [p for p in ok if not p.cpu_only and p.row.stated],
        "cpu_only_rows": [p for p in ok if p.cpu_only],
    }
    return {
        "mape": {name: mape([p.ratio for p in rows]) for name, rows in groups.items()},
        "rows": {name: len(rows) for name, rows in groups.items()},
        "not_priced": {p.row.index: p.problem for p in priced if p.ratio is None},
        "sweeps": [{"sweep": n, "right_order": ok_, "orders": how} for n, ok_, how in sweep_orders(priced)],
        "worst": sorted(((round(p.ratio, 2), p.row.index) for p in ok), key=lambda t: abs(math.log(t[0])))[-5:],
    }


def report(priced: list[PricedPrompt]) -> dict:
    lines = [f"{'row':>3}  {'runtime':<12} {'model':<16} {'gpu':<18} {'P':>5} {'ub':>5} {'depth':>6} "
             f"{'published':>9} {'COPE':>8} {'ratio':>6}"]
    for p in priced:
        r, run = p.row, p.run
        est = f"{p.estimate_tps:8.1f}" if p.estimate_tps is not None else "       -"
        ratio = f"{p.ratio:6.2f}" if p.ratio is not None else "     -"
        mark = "" if r.stated else "  (assumed hardware)"
        lines.append(f"{r.index:>3}  {r.runtime:<12} {r.model[:16]:<16} {str(r.gpu or '-')[:18]:<18} "
                     f"{run.prompt_tokens:>5} {run.ubatch:>5} {run.depth:>6} {p.published_tps or 0:9.1f} {est} "
                     f"{ratio}{mark}" + (f"  {p.problem}" if p.problem else ""))
    s = summary(priced)
    m, n = s["mape"], s["rows"]
    lines += ["", "prompt tok/s MAPE: " + ", ".join(f"{k} {m[k]:.1%} ({n[k]} rows)" for k in m),
              "-ub sweeps: " + "; ".join(f"{x['sweep']}: {'right' if x['right_order'] else 'WRONG'} ({x['orders']})"
                                         for x in s["sweeps"]),
              f"largest misses (ratio, row): {s['worst']}",
              "not priced: " + "; ".join(f"{i}: {why}" for i, why in s["not_priced"].items())]
    print("\n".join(lines))
    return s


def main() -> int:
    given = rows_from_args("published_prefill.py")
    if given is None:
        return 2
    rows_csv, json_out = given[0], given[1].json
    s = report(price_all(rows_csv))
    if json_out:
        Path(json_out).write_text(json.dumps(s, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
