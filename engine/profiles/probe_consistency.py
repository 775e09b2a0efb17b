"""Is a probe series consistent enough to price with? (issue 30: measurements are
trusted only when complete and consistent)

A series is one operator's measurements that differ only in n, the number of experts:
gpu_experts, cpu_experts at one thread count, h2d_copy; a single operator (sync,
shared_layer, token_head) is a series of one. Two checks, each with its tolerance:

- monotone: more experts are never faster. A figure may be at most MONOTONE_TOLERANCE
  slower than one with more experts (medians of adjacent n differ by as little as 1/n,
  and the noise of a quiet machine stays well inside 30%). The case that made this
  check: cpu_experts at 2 threads measured 31.9 ms for 2 experts, 300.9 ms for 6 and
  14.2 ms for 8, the machine busy for a moment.
- spread: the interquartile range of a figure's repeats is at most SPREAD_TOLERANCE of
  its median. The IQR already ignores the slowest quarter of the repeats, so a wider
  one means the machine changed speed for much of the measurement (a quiet 2-core VM
  showed up to 0.4).

Only figures measured here are checked: a preset's come from the analytic model.
The runner (probes/runner.py) measures a failing series once more and refuses it
when it fails again; `refusal_note` is the user's line for that.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.profiles.profile import Measurement, Profile
from engine.profiles.profile_keys import KeyValue

MONOTONE_TOLERANCE = 0.30
SPREAD_TOLERANCE = 1.0
CHECKED_BASES = frozenset({"measured"})
SERIES_OPERATORS = ("gpu_experts", "cpu_experts", "h2d_copy", "sync", "shared_layer", "token_head")


@dataclass(frozen=True)
class SeriesRef:
    """Which series: an operator and its key fields other than n."""

    operator: str
    fixed: tuple[tuple[str, KeyValue], ...] = ()

    @staticmethod
    def of(m: Measurement) -> SeriesRef:
        return SeriesRef(m.operator, tuple((k, v) for k, v in m.key if k != "n"))

    @property
    def label(self) -> str:
        fixed = dict(self.fixed)
        if set(fixed) == {"threads"}:
            return f"{self.operator} at {fixed['threads']} threads"
        return self.operator + "".join(f" {k}={v}" for k, v in self.fixed)


@dataclass(frozen=True)
class SeriesVerdict:
    """A series' check: `problem` says what is wrong ("" when it is consistent)."""

    series: SeriesRef
    problem: str = ""
    kind: str = ""  # "monotone" or "spread" when there is a problem
    at: tuple[int, ...] = ()  # the n of the figures the problem names

    @property
    def ok(self) -> bool:
        return not self.problem


def series_in(profile: Profile, ref: SeriesRef) -> list[Measurement]:
    """The measurements of `ref` in `profile`, by n."""
    members = [m for m in profile.of(ref.operator) if SeriesRef.of(m) == ref]
    return sorted(members, key=lambda m: m.key_dict.get("n", 0))


def check_series(ref: SeriesRef, measurements: Iterable[Measurement]) -> SeriesVerdict:
    """Monotone first (the clearer figure), then spread, over the measured points."""
    points = sorted((m for m in measurements if m.basis in CHECKED_BASES), key=lambda m: m.key_dict.get("n", 0))
    worst = _worst_inversion(points)
    if worst is not None:
        fewer, more = worst
        return SeriesVerdict(ref, f"{_what(fewer)} measured {_time(fewer.median_s)}, slower than "
                                  f"{_experts(more)} at {_time(more.median_s)}", "monotone", (_n(fewer), _n(more)))
    for m in points:
        if m.spread_s > SPREAD_TOLERANCE * m.median_s:
            return SeriesVerdict(ref, f"{_what(m)} measured {_time(m.median_s)} with its repeats spread over "
                                      f"{_time(m.spread_s)} (more than {SPREAD_TOLERANCE:.0%} of it)", "spread",
                                 (_n(m),))
    return SeriesVerdict(ref)


def check_profile(profile: Profile, refs: Iterable[SeriesRef] | None = None) -> tuple[SeriesVerdict, ...]:
    """The failing verdicts of `refs` (default: every series in `profile`)."""
    if refs is None:
        refs = series_refs(profile.measurements)
    verdicts = (check_series(ref, series_in(profile, ref)) for ref in refs)
    return tuple(v for v in verdicts if not v.ok)


def series_refs(measurements: Iterable[Measurement]) -> list[SeriesRef]:
    """The checked series these measurements belong to, in first-seen order."""
    seen: dict[SeriesRef, None] = {}
    for m in measurements:
        if m.operator in SERIES_OPERATORS:
            seen.setdefault(SeriesRef.of(m), None)
    return list(seen)


def refusal_note(first: SeriesVerdict, second: SeriesVerdict) -> str:
    """The user's line for a series that failed its check, then failed it again when
    measured once more."""
    head = f"{second.series.label} refused: {second.problem}"
    if (first.kind, first.at) == (second.kind, second.at):  # the same figures failed the same way
        return head + ", twice"
    return f"{head} (the first time: {first.problem})"


def _worst_inversion(points: list[Measurement]) -> tuple[Measurement, Measurement] | None:
    """The pair (fewer experts, more experts) where the one with fewer is slowest past the
    tolerance, by how many times slower; None when the series is monotone."""
    worst, ratio = None, 1.0 + MONOTONE_TOLERANCE
    for i, fewer in enumerate(points):
        for more in points[i + 1:]:
            if more.median_s > 0 and fewer.median_s / more.median_s > ratio:
                worst, ratio = (fewer, more), fewer.median_s / more.median_s
    return worst


def _n(m: Measurement) -> int:
    return int(m.key_dict.get("n", 0))


def _what(m: Measurement) -> str:
    return _experts(m) if "n" in m.key_dict else "it"


def _experts(m: Measurement) -> str:
    n = m.key_dict["n"]
    return f"{n} expert{'s' if n != 1 else ''}"


def _time(seconds: float) -> str:
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} us"
