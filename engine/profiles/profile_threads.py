"""A profile measured at other thread counts, standing in for the one asked for.

Changing the thread count must not start probing unasked (DESIGN.md §5: probing is
asked for). When the cached profile is complete at some thread counts but not at the
one planned for, the nearest complete count prices the plan, relabelled, and the
pricing says so; a probe (or --reprobe) measures the count itself.
"""

from __future__ import annotations

from dataclasses import replace

from engine.profiles.probe_plan import atomic_probes
from engine.profiles.profile import Profile


def complete_thread_counts(profile: Profile, top_k: int) -> list[int]:
    """The thread counts at which `profile` holds every atomic probe."""
    counts = {int(m.key_dict["threads"]) for m in profile.measurements if "threads" in m.key_dict}
    return sorted(t for t in counts if not profile.missing([p.ident for p in atomic_probes(top_k, t, 0.0)]))


def nearest_thread_count(counts: list[int], threads: int) -> int | None:
    """The count closest to `threads` (the smaller one on a tie: never promise more cores)."""
    return min(counts, key=lambda t: (abs(t - threads), t)) if counts else None


def at_threads(profile: Profile, measured: int, wanted: int) -> Profile:
    """`profile` with its measurements at `measured` threads relabelled as `wanted`
    (those already at `wanted`, an incomplete set, are replaced)."""
    kept = []
    for m in profile.measurements:
        key = m.key_dict
        if "threads" not in key or int(key["threads"]) not in (measured, wanted):
            kept.append(m)
        elif int(key["threads"]) == measured:
            kept.append(replace(m, key={**key, "threads": wanted}))
    return replace(profile, measurements=tuple(kept))
