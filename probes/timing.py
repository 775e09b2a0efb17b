"""Timing a probe: repeats until the spread is small or the budget is spent, median and
interquartile range of the repeats (probes.operators and probes.cuda_graphs time with it)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    median_s: float
    spread_s: float  # interquartile range
    repeats: int


def time_repeats(
    fn: Callable[[], Any],
    budget_s: float,
    *,
    min_repeats: int = 5,
    max_repeats: int = 1000,
    rel_spread: float = 0.05,
    sync: Callable[[], None] | None = None,
    warmup: int = 1,
    timer: Callable[[Any], float] | None = None,
) -> Timing:
    """Run `fn` until the IQR is under `rel_spread` of the median (after `min_repeats`)
    or `budget_s` is spent (at least 3 repeats); median and IQR of perf_counter times.
    `timer`: the time of a repeat is timer(fn's result) instead (a layer step times
    itself, leaving out its set-up)."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_repeats:
        t0 = time.perf_counter()
        result = fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0 if timer is None else float(timer(result)))
        n = len(times)
        spent = time.perf_counter() - start
        if n >= min_repeats and _iqr(times) <= rel_spread * statistics.median(times):
            break
        if spent >= budget_s and n >= 3:
            break
    return Timing(statistics.median(times), _iqr(times), len(times))


def _iqr(times: list[float]) -> float:
    if len(times) < 4:
        return max(times) - min(times)
    q = statistics.quantiles(times, n=4)
    return q[2] - q[0]
