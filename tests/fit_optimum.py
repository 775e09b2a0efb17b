"""The check that constants in the code are a fit's optimum, shared by the fit tests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping


def assert_at_optimum(loss: Callable[[Any], float], code: Any, fitted: Iterable[str],
                      bounds: Mapping[str, tuple[float, float]], *, tolerance: float) -> None:
    """Moving any fitted constant of `code` 5% either way (within its bounds) makes `loss`
    no lower: the code holds the fit's optimum, not a hand-tuned value."""
    best = loss(code)
    for name in fitted:
        for factor in (0.95, 1.05):
            value = getattr(code, name) * factor
            low, high = bounds.get(name, (0.0, float("inf")))
            if not low <= value <= high:
                continue  # the fit is held at this bound
            moved = loss(replace(code, **{name: value}))
            assert moved >= best - tolerance, f"{name} x{factor}: {moved:.5f} fits better than the code's {best:.5f}"
