"""How well the analytic model prices runs from machines no fit has seen: leave-one-source-out
cross-validation over the published decode rows.

    python bench/published_cv.py [--csv PATH] [--json OUT] [--regime all-GPU] [--balanced]

The constants of engine/cost/analytic_cost.py are fitted on the rows whose hardware is stated
(bench/fit_published.py). Those rows' in-sample error says little about a new machine: a
source (one discussion, one blog post) is one machine and one person's way of measuring,
and the fit learns it. So, for each source: refit every constant on the rows of all the
other sources (the same fit, started from the code's constants), then price that source's
rows with the refit constants. The held-out ratios (predicted / published tokens/s) give
the figures docs/accuracy.md leads with: MAPE and mean signed error, overall, by regime
(where the command puts the experts: all-GPU, partial offload, experts on the CPU,
CPU-only), by runtime (stock llama.cpp, ik_llama.cpp) and, for the all-GPU rows, by GPU.
A source whose rows are the only ones of a regime tests the model where no row
constrained it. Each figure has its fold noise: the standard error of the held-out error
over the sources behind it, how much it moves with which machines happen to be in it
(bench/regime_check.py compares two runs regime by regime against it). Each refit's
constants are printed too: how stable a constant is across the folds says how well the rows
determine them. SUSPECT rows are left out, as in the fit.
About 1 minute a fold on 2 quiet cores, 5 under the load of other work; `--jobs 2` runs two
folds at once. `--regime R` leaves
out only the sources with fitted rows of regime R (each fold still refits on every other
row): a quicker check of that regime's held-out figures, whose other regimes' figures then
cover only those sources' rows.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fit_published import FITTED, fit  # noqa: E402
from bench.regime_check import fold_noise as regime_fold_noise  # noqa: E402
from bench.published import REGIMES, Priced, fitted_rows, mape, price_all, rows_from_args, signed_error  # noqa: E402
from engine.cost.analytic_cost import AnalyticAssumptions  # noqa: E402


@dataclass(frozen=True)
class Fold:
    source: str
    constants: AnalyticAssumptions  # fitted without this source's rows
    held_out: tuple[Priced, ...]  # this source's rows, priced with those constants


def leave_one_source_out(rows_csv: list[dict[str, str]], say=print,  # type: ignore[no-untyped-def]
                         regime: str | None = None, balanced: bool = False, jobs: int = 1,
                         squared: bool = False) -> list[Fold]:
    """One fold per source of fitted rows (`regime`: per source with fitted rows of that regime).
    `jobs` > 1 runs that many folds at once in forked processes: the folds share nothing, and
    each is a minute of one core's arithmetic."""
    sources = sorted({p.source for p in fitted_rows(price_all(rows_csv)) if regime in (None, p.regime)})
    work = [(i, len(sources), source, rows_csv, balanced, squared) for i, source in enumerate(sources, 1)]
    if jobs <= 1:
        return [_fold(*args, say=say) for args in work]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        return pool.starmap(_fold, work)


def _fold(i: int, n: int, source: str, rows_csv: list[dict[str, str]], balanced: bool,  # type: ignore[no-untyped-def]
          squared: bool, say=None) -> Fold:
    (say or _say)(f"fold {i} of {n}: without {source}")
    constants = fit(rows_csv, keep=lambda p: p.source != source, start=AnalyticAssumptions(), balanced=balanced,
                    squared=squared)
    held = tuple(p for p in fitted_rows(price_all(rows_csv, constants)) if p.source == source)
    return Fold(source, constants, held)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def figures(priced: list[Priced]) -> dict:
    ratios = [p.ratio for p in priced]
    return {"rows": len(ratios), "mape": mape(ratios), "signed_error": signed_error(ratios),
            "fold_noise": fold_noise(priced)}


def fold_noise(priced: list[Priced]) -> float:
    """How much the MAPE of these held-out rows moves with which machines happen to be in
    them (bench/regime_check.py: fold_noise, over their sources' absolute errors)."""
    by_source: dict[str, list[float]] = {}
    for p in priced:
        by_source.setdefault(p.source, []).append(abs(p.ratio - 1))
    return regime_fold_noise(by_source)


def summary(folds: list[Fold]) -> dict:
    held = [p for f in folds for p in f.held_out]
    return {
        "overall": figures(held),
        "by_regime": {r: figures([p for p in held if p.regime == r]) for r in REGIMES},
        "by_runtime": {rt: figures([p for p in held if p.row.runtime == rt])
                       for rt in sorted({p.row.runtime for p in held})},
        "by_source": {f.source: figures(list(f.held_out)) for f in folds},
        # the all-GPU rows by GPU: what a GPU term has to get right on cards no fit has seen
        "all_gpu_by_gpu": {gpu: {p.key: round(p.ratio, 4) for p in held if p.regime == "all-GPU" and p.row.gpu == gpu}
                           for gpu in sorted({p.row.gpu for p in held if p.regime == "all-GPU"})},
        "rows": {p.key: round(p.ratio, 4) for p in held},
        # what the before/after check (bench/regime_check.py) groups the rows by
        "row_regimes": {p.key: p.regime for p in held},
        "row_runtimes": {p.key: p.row.runtime for p in held},
        "row_sources": {p.key: p.source for p in held},
        "constants": {f.source: {name: getattr(f.constants, name) for name in FITTED} for f in folds},
    }


def _line(name: str, fig: dict) -> str:
    if not fig["rows"]:
        return f"  {name:<52} no rows"
    return (f"  {name:<52} {fig['rows']:>3} rows  MAPE {fig['mape']:6.1%}  mean signed error {fig['signed_error']:+6.1%}"
            f"  fold noise {fig['fold_noise']:5.1%}")


def report(folds: list[Fold]) -> dict:
    doc = summary(folds)
    lines = ["Leave-one-source-out (each source priced with constants fitted without it):",
             _line("all held-out rows", doc["overall"])]
    lines += [_line(f"regime: {r}", fig) for r, fig in doc["by_regime"].items()]
    lines += [_line(f"runtime: {rt}", fig) for rt, fig in doc["by_runtime"].items()]
    lines += [_line(f"source: {s[-52:]}", fig) for s, fig in doc["by_source"].items()]
    lines += [f"  all-GPU on {gpu}: " + ", ".join(f"{k} {r:.2f}" for k, r in ratios.items())
              for gpu, ratios in doc["all_gpu_by_gpu"].items()]
    lines.append("held-out ratios: " + ", ".join(f"{i}: {r:.2f}" for i, r in sorted(doc["rows"].items())))
    lines.append("constants of each fold (how well the rows determine them):")
    for name in FITTED:
        values = [c[name] for c in doc["constants"].values()]
        spread = (max(values) - min(values)) / (sum(values) / len(values))
        lines.append(f"  {name:<28} " + ", ".join(f"{v:.4g}" for v in values) + f"  (spread {spread:.0%} of the mean)")
    print("\n".join(lines))
    return doc


def main() -> int:
    def options(parser):  # type: ignore[no-untyped-def]
        parser.add_argument("--regime", choices=REGIMES, help="leave out only the sources with fitted rows of this regime")
        parser.add_argument("--balanced", action="store_true",
                            help="fit each fold with every regime, and each source of a regime, weighing the same")
        parser.add_argument("--squared", action="store_true",
                            help="fit each fold on the mean squared log ratio (the fit before 2026-12-07's evening)")
        parser.add_argument("--jobs", type=int, default=1, metavar="N", help="folds run at once (forked processes)")

    given = rows_from_args("published_cv.py", options=options)
    if given is None:
        return 2
    rows_csv, args = given
    json_out = args.json
    doc = report(leave_one_source_out(rows_csv, say=_say, regime=args.regime, balanced=args.balanced,
                                      jobs=max(1, args.jobs), squared=args.squared))
    if json_out:
        Path(json_out).write_text(json.dumps(doc, indent=1, default=str))
    return 0 if not math.isnan(doc["overall"]["mape"]) else 1


if __name__ == "__main__":
    sys.exit(main())
