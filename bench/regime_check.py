"""The check every change to the cost model runs: leave-one-source-out figures per regime and
per runtime before and after the change, and a refusal when any regime got worse beyond its
fold noise.

    python bench/published_cv.py --json before.json     # at the commit before the change
    python bench/published_cv.py --json after.json      # with the change
    python bench/regime_check.py before.json after.json

A refit, a new term, a new constant: each can help the regime with many rows and quietly
break one with few (issue 44: six refits in a row improved the all-GPU rows and made the
experts-on-the-CPU rows worse). So the figures are compared regime by regime (all-GPU,
partial offload, experts on the CPU, CPU-only) on the rows both runs held out, and the check
fails (exit 1) when a regime's MAPE rose by more than its fold noise: the standard error of the
regime's held-out error over its sources in the run before (bench/published_cv.py,
fold_noise), the amount the figure moves with which machines happen to be in it. Rows only
one run has (new published rows) are shown apart and judge nothing. Runtimes are printed
too, not judged (a runtime is not where the experts are). Exit 2 for a file that is not a
cross-validation summary.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.published import REGIMES  # noqa: E402


@dataclass(frozen=True)
class Summary:
    """What the check reads of one cross-validation run (bench/published_cv.py --json)."""

    ratios: dict[str, float]  # held-out predicted / published, by row key
    regimes: dict[str, str]
    runtimes: dict[str, str]
    sources: dict[str, str]


@dataclass(frozen=True)
class Verdict:
    group: str
    rows: int
    mape_before: float
    mape_after: float
    noise: float

    @property
    def worse(self) -> bool:
        """Worse beyond the noise (a regime whose noise is unknown: worse at all)."""
        allowed = 0.0 if math.isnan(self.noise) else self.noise
        return self.mape_after - self.mape_before > allowed


class NotASummary(ValueError):
    pass


def read_summary(path: Path) -> Summary:
    """A cross-validation summary; its rows' regimes from the file, else from the rows'
    commands (a summary written before bench/published_cv.py recorded them)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        ratios = {str(k): float(v) for k, v in doc["rows"].items()}
    except FileNotFoundError:
        raise NotASummary(f"{path}: no such file") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise NotASummary(f"{path}: not a bench/published_cv.py --json summary ({exc.__class__.__name__}: {exc})") from None
    regimes, runtimes, sources = doc.get("row_regimes"), doc.get("row_runtimes"), doc.get("row_sources")
    if not (regimes and runtimes and sources):
        regimes, runtimes, sources = _rows_of_code()
    missing = sorted(k for k in ratios if k not in regimes)
    if missing:
        raise NotASummary(f"{path}: rows {', '.join(missing[:5])} are not published rows this checkout prices")
    return Summary(ratios, regimes, runtimes, sources)


def _rows_of_code() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    from bench.published import CSV, price_all, published_rows

    priced = price_all(published_rows(CSV))
    return ({p.key: p.regime for p in priced}, {p.key: p.row.runtime for p in priced},
            {p.key: p.source for p in priced})


def mape(ratios: list[float]) -> float:
    return sum(abs(r - 1) for r in ratios) / len(ratios) if ratios else float("nan")


def fold_noise(errors_by_source: dict[str, list[float]]) -> float:
    """The standard error of the mean absolute error over the sources (each source is one
    fold: one machine, one person's way of measuring), from each source's mean absolute
    error; over the rows where they all come from one source. NaN below two."""
    errors = ([sum(e) / len(e) for e in errors_by_source.values()] if len(errors_by_source) > 1
              else [e for es in errors_by_source.values() for e in es])
    if len(errors) < 2:
        return float("nan")
    mean = sum(errors) / len(errors)
    return math.sqrt(sum((e - mean) ** 2 for e in errors) / (len(errors) - 1) / len(errors))


def compare(before: Summary, after: Summary, group_of, groups) -> list[Verdict]:  # type: ignore[no-untyped-def]
    """Per group, on the rows both runs held out: MAPE before and after, and the noise of the
    run before."""
    common = sorted(set(before.ratios) & set(after.ratios))
    out = []
    for group in groups:
        keys = [k for k in common if group_of(before, k) == group]
        if not keys:
            continue
        by_source: dict[str, list[float]] = {}
        for k in keys:
            by_source.setdefault(before.sources[k], []).append(abs(before.ratios[k] - 1))
        out.append(Verdict(group, len(keys), mape([before.ratios[k] for k in keys]),
                           mape([after.ratios[k] for k in keys]), fold_noise(by_source)))
    return out


def report(before: Summary, after: Summary, say=print) -> bool:  # type: ignore[no-untyped-def]
    """Print the comparison; True when no regime got worse beyond its fold noise."""
    regimes = compare(before, after, lambda s, k: s.regimes[k], REGIMES)
    runtimes = compare(before, after, lambda s, k: s.runtimes[k], sorted(set(before.runtimes.values())))
    say(f"{'':<24} {'rows':>4} {'before':>8} {'after':>8} {'change':>8} {'noise':>7}")
    for v in regimes:
        mark = "  WORSE beyond noise" if v.worse else ""
        say(f"regime {v.group:<17} {v.rows:>4} {v.mape_before:8.1%} {v.mape_after:8.1%} "
            f"{v.mape_after - v.mape_before:+8.1%} {v.noise:7.1%}{mark}")
    for v in runtimes:
        say(f"runtime {v.group:<16} {v.rows:>4} {v.mape_before:8.1%} {v.mape_after:8.1%} "
            f"{v.mape_after - v.mape_before:+8.1%} {v.noise:7.1%}  (printed, not judged)")
    new = sorted(set(after.ratios) - set(before.ratios))
    for regime in REGIMES:
        keys = [k for k in new if after.regimes[k] == regime]
        if keys:
            say(f"rows only after, {regime}: {len(keys)} rows, MAPE {mape([after.ratios[k] for k in keys]):.1%} "
                "(not judged: no figure before)")
    gone = sorted(set(before.ratios) - set(after.ratios))
    if gone:
        say(f"rows only before (not judged): {', '.join(gone)}")
    worse = [v.group for v in regimes if v.worse]
    say("refused: " + ", ".join(worse) + " worse beyond fold noise" if worse
        else "passed: no regime worse beyond its fold noise")
    return not worse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path, help="bench/published_cv.py --json of the code before the change")
    parser.add_argument("after", type=Path, help="the same with the change")
    args = parser.parse_args(argv)
    try:
        before, after = read_summary(args.before), read_summary(args.after)
    except NotASummary as exc:
        print(f"regime_check.py: {exc}", file=sys.stderr)
        return 2
    return 0 if report(before, after) else 1


if __name__ == "__main__":
    sys.exit(main())
