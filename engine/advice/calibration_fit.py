"""Fitting a machine's lane constants to llama-bench runs of its own GGUF.

Each run is priced exactly as `cope estimate` prices that llama-bench command
(engine/llamacpp/llama_placement.py: placement_of, placement_cost, at the command's threads and
depth), with the analytic constants as parameters. The fit minimises the sum of squared
log ratios (predicted / measured tokens/s) over the constants the runs constrain:

- which ones: at the current values, the sensitivity of each run's log time to each
  constant's log (a Jacobian column); constants are taken in LANE_CONSTANTS' order while
  their column adds a direction the ones taken do not already give (a CPU-only machine's
  runs leave every GPU constant out; runs that never saturate the CPU leave its
  saturated figure out), never more than there are runs;
- then Levenberg-Marquardt in log space; the choice is made again at the optimum (a fitted
  thread rate can move a run onto the saturated branch) until it settles;
- the saturated rate binds only where a run reaches it, and the global figure may lie far
  above what this machine streams: with three or more thread counts, a second start that
  saturates between the two highest is tried, and kept when it fits clearly better.

The rest keep the global fit's values. numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.advice.calibration_runs import CalibrationRun, run_request
from engine.cost.analytic_cost import AnalyticAssumptions
from engine.cost.cost_models import analytic_model
from engine.cost.calibration import LANE_CONSTANTS, LaneConstants, global_constants
from engine.cost.request import AdviseRequest
from engine.llamacpp.llama_placement import placement_cost, placement_of

MIN_COLUMN = 0.02  # a constant doubling moves the runs' times by less than ~1.4%: not constrained
MIN_NEW_DIRECTION = 0.1  # the share of a column the constants already taken cannot explain
MAX_ROUNDS = 4
STEP = 1e-4  # log-space step of the numerical Jacobian


@dataclass(frozen=True)
class FitResult:
    constants: LaneConstants  # the fitted ones
    global_tokens_per_s: tuple[float, ...]  # per run, before the fit
    fitted_tokens_per_s: tuple[float, ...]  # per run, after it
    residual_rms: float  # of log(fitted / measured)


class _Runs:
    """The runs with what does not change while fitting (their requests and placements)."""

    def __init__(self, request: AdviseRequest, runs: list[CalibrationRun], has_gpu: bool):
        self.items = []
        for run in runs:
            command = run.command()
            at = run_request(request, command)
            self.items.append((at, placement_of(command, at.model, has_gpu=has_gpu and run.uses_gpu)))
        platform = request.platform
        probe = analytic_model(request, assumptions=AnalyticAssumptions(), as_probed=True)
        self.cpu_bytes_per_s = probe.cpu_bytes_per_s
        self.gpu_bytes_per_s = probe.gpu_bytes_per_s
        self.cpu_thread_bytes_per_s = probe.cpu_thread_bytes_per_s  # the global fit's, on this CPU

    def tpot_s(self, values: dict[str, float]) -> np.ndarray:
        a = LaneConstants(values).assumptions(self.cpu_bytes_per_s, self.gpu_bytes_per_s)
        out = []
        for at, placement in self.items:
            out.append(placement_cost(at, analytic_model(at, assumptions=a), placement).tpot_s)
        return np.asarray(out)


def fit_lanes(request: AdviseRequest, runs: list[CalibrationRun], measured_tokens_per_s: list[float], *,
              has_gpu: bool) -> FitResult:
    """The constants `runs` (measured at `measured_tokens_per_s`) determine on this machine."""
    if len(runs) != len(measured_tokens_per_s) or not runs:
        raise ValueError("fit_lanes needs one measured speed per run, and at least one run")
    model = _Runs(request, runs, has_gpu)
    names = list(LANE_CONSTANTS)
    start = global_constants(model.cpu_bytes_per_s, model.gpu_bytes_per_s, model.cpu_thread_bytes_per_s)
    x0 = np.log([start[n] for n in names])
    target = -np.log(np.asarray(measured_tokens_per_s, dtype=float))  # log tpot

    def values(x: np.ndarray) -> dict[str, float]:
        return {n: float(np.exp(v)) for n, v in zip(names, x)}

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(model.tpot_s(values(x))) - target

    def jacobian(x: np.ndarray, free: list[int]) -> np.ndarray:
        base = residual(x)
        cols = []
        for i in free:
            moved = x.copy()
            moved[i] += STEP
            cols.append((residual(moved) - base) / STEP)
        return np.stack(cols, axis=1) if cols else np.zeros((len(runs), 0))

    def settle(x: np.ndarray, free: list[int]) -> tuple[np.ndarray, list[int], float]:
        """What the optimum really constrains (a constant moved off every run's active
        branch is not), the rest back at the global fit, and the residual."""
        final = _choose(jacobian(x, list(range(len(names)))), len(runs))
        kept = sorted(set(free) & set(final))
        x = np.where(np.isin(np.arange(len(names)), kept), x, x0)
        r = residual(x)
        return x, kept, float(np.sqrt(np.mean(r ** 2)))

    def fit_from(x: np.ndarray) -> tuple[np.ndarray, list[int], float]:
        free: list[int] = []
        best = settle(x0.copy(), [])
        for _ in range(MAX_ROUNDS):
            chosen = _choose(jacobian(x, list(range(len(names)))), len(runs))
            if chosen == free:
                break
            free = chosen
            x = np.where(np.isin(np.arange(len(names)), free), x, x0)  # only the chosen move from the global fit
            x = _levenberg_marquardt(residual, jacobian, x, free, x0)
            found = settle(x, free)
            if found[2] < best[2]:  # the choice may not settle: keep the round that fits best
                best = found
        return best

    x, kept, rms = fit_from(x0.copy())
    # The saturated rate binds only below the global figure: when three or more thread counts
    # were run and the fit left it out, try again from a start where the CPU saturates between
    # the middle and the highest thread count, and keep that when it fits clearly better.
    counts = sorted({run.threads for run in runs if not run.uses_gpu})
    sat, rate = names.index("cpu_saturated_bytes_per_s"), names.index("cpu_thread_bytes_per_s")
    if len(counts) >= 3 and sat not in kept:
        start = x.copy()
        start[sat] = x[rate] + np.log(0.5 * (counts[-2] + counts[-1]))
        x2, kept2, rms2 = fit_from(start)
        if rms2 < 0.8 * rms and rms - rms2 > 0.005:
            x, kept, rms = x2, kept2, rms2
    values_fitted = values(x)
    fitted = {names[i]: values_fitted[names[i]] for i in kept}
    after = 1.0 / model.tpot_s(values_fitted)
    before = 1.0 / model.tpot_s(values(x0))
    return FitResult(LaneConstants(fitted), tuple(float(v) for v in before), tuple(float(v) for v in after), rms)


def _choose(jac: np.ndarray, n_runs: int) -> list[int]:
    """Columns in priority order that add a new direction; at most `n_runs`."""
    chosen: list[int] = []
    basis = np.zeros((jac.shape[0], 0))
    for i in range(jac.shape[1]):
        col = jac[:, i]
        norm = float(np.linalg.norm(col))
        if norm < MIN_COLUMN or len(chosen) >= n_runs:
            continue
        rest = col - basis @ (basis.T @ col) if basis.shape[1] else col
        if float(np.linalg.norm(rest)) / norm < MIN_NEW_DIRECTION:
            continue
        chosen.append(i)
        basis = np.concatenate([basis, (rest / np.linalg.norm(rest))[:, None]], axis=1)
    return chosen


def _levenberg_marquardt(residual, jacobian, x: np.ndarray, free: list[int], x0: np.ndarray,  # type: ignore[no-untyped-def]
                         iterations: int = 80) -> np.ndarray:
    """Minimise |residual|^2 over the `free` coordinates of log-space `x`, each kept
    within a factor of 10^4 of its global value."""
    if not free:
        return x
    low, high = x0 - np.log(1e4), x0 + np.log(1e4)
    r = residual(x)
    cost = float(r @ r)
    lam = 1e-3
    for _ in range(iterations):
        jac = jacobian(x, free)
        jtj = jac.T @ jac
        grad = jac.T @ r
        accepted = False
        while lam < 1e10:
            step = np.linalg.solve(jtj + lam * (np.diag(np.diag(jtj)) + 1e-9 * np.eye(len(free))), -grad)
            step = np.clip(step, -1.0, 1.0)
            trial = x.copy()
            trial[free] = np.clip(trial[free] + step, low[free], high[free])
            r_trial = residual(trial)
            c_trial = float(r_trial @ r_trial)
            if c_trial < cost:
                x, r, cost, accepted = trial, r_trial, c_trial, True
                lam = max(lam / 3, 1e-9)
                break
            lam *= 4
        if not accepted or cost < 1e-16 or float(np.max(np.abs(step))) < 1e-7:
            break
    return x
