"""`cope calibrate`: a few short llama-bench runs of the user's own GGUF, this machine's lane
constants fitted to them, kept in the cache, and found again when pricing.

The runs (engine/advice/calibration_runs.py): everything on the CPU at the planned threads first
(its JSON says whether llama-bench has a GPU backend), then, with a GPU COPE can plan for,
every expert on the GPU, half and all of the MoE layers' experts on the CPU, then the
CPU-only runs at fewer threads. A placement that would not fit is not run (the reason is
kept). Each run has a time limit and stops on cancellation (Ctrl-C, or the app's worker).
The fit: engine/advice/calibration_fit.py; the file: engine/cost/calibration_io.py.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request
from cope_tui.service.runtimes import scan_runtimes
from engine.advice import calibration_fit
from engine.advice.calibration_runs import BENCH_REPETITIONS, CalibrationRun, SkippedRun, check_fits, cpu_runs, gpu_runs
from engine.core.cache_dirs import machine_dir
from engine.core.errors import CopeInputError
from engine.core.input_limits import RUNTIME_OUTPUT_MAX_BYTES, size_text
from engine.core.progress import Progress, check_cancel
from engine.cost.calibration import Calibration, MeasuredRun
from engine.cost.calibration_io import PREFIX, Found, find_calibration, save_calibration
from engine.llamacpp.llama_bench_json import BenchTest, decode_tests, parse_bench_output
from probes.bounded_run import run_capped
from probes.gpu import UNLOADED, detect_gpu as detect
from probes.host import detect_cpu, this_machine_key

RUN_TIMEOUT_S = 300.0
NO_LLAMA_BENCH = ("no llama-bench found (give it with --llama-bench PATH, or put it on PATH; build it from "
                  "https://github.com/ggml-org/llama.cpp: cmake --build build --target llama-bench)")


@dataclass(frozen=True)
class CalibrateReport:
    calibration: Calibration
    path: Path  # where it was stored
    skipped: tuple[SkippedRun, ...]


def this_machine() -> tuple[str, str]:
    """(machine key, CPU name) of the machine COPE runs on (reads /proc and /sys)."""
    cpu = detect_cpu()
    return this_machine_key(cpu), cpu.name


def find_llama_bench(path: str | None) -> str:
    """`path` when given (an executable file), else llama-bench where the runtime scan finds
    it (PATH); one line naming what is missing otherwise."""
    if path is not None:
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise CopeInputError("--llama-bench: not an executable file", path=path)
        return path
    for runtime in scan_runtimes(None).found:
        if "llama-bench" in runtime.programs:
            return os.path.join(runtime.where, "llama-bench")
    raise CopeInputError(NO_LLAMA_BENCH)


def run_llama_bench(bench: str, run: CalibrationRun, *, timeout_s: float,
                    cancel: threading.Event | None = None) -> BenchTest:
    """The decode test of one run; CopeInputError (one line) when llama-bench fails or its
    output is not its JSON; TimeoutError past `timeout_s`; Cancelled on `cancel`."""
    argv = [bench, *run.argv[1:]]
    try:  # read within a cap, decoded with replacement: a runtime's output is untrusted
        proc = run_capped(argv, timeout_s=timeout_s, poll=lambda: check_cancel(cancel))
    except OSError as exc:
        raise CopeInputError(f"cannot run: {exc.strerror or exc}", path=bench) from None
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"stopped after {timeout_s:g} s") from None
    if proc.overflowed:
        raise CopeInputError(f"the {run.name} run printed more than {size_text(RUNTIME_OUTPUT_MAX_BYTES)}, far more "
                             "than llama-bench's answer: stopped, not read", path=bench)
    out, err = proc.stdout, proc.stderr
    if proc.returncode != 0:
        tail = (err or out or "").strip().splitlines()
        raise CopeInputError(f"{run.name} run exited with {proc.returncode}: {tail[-1] if tail else 'no output'}",
                             path=bench)
    return decode_tests(parse_bench_output(out, where=f"{bench} ({run.name} run)"), where=bench)[0]


def calibrate(gguf: str, *, bench: str, threads: int | None = None, run_timeout_s: float = RUN_TIMEOUT_S,
              repetitions: int = BENCH_REPETITIONS,
              progress: Progress | None = None, cancel: threading.Event | None = None,
              detect_gpu: Callable | None = None, machine: tuple[str, str] | None = None,
              now: _dt.datetime | None = None, root: str | os.PathLike | None = None) -> CalibrateReport:
    """Run, fit, store; see the module doc."""
    if run_timeout_s <= 0:
        raise CopeInputError(f"--run-timeout must be positive, got {run_timeout_s:g}")
    if repetitions < 2:
        raise CopeInputError(f"--repetitions: at least 2 (their spread shows a busy machine), got {repetitions}")
    if not os.path.isfile(gguf):
        raise CopeInputError("--gguf: no such file", path=gguf)
    gpu = _detect_gpu(detect_gpu)
    gpu_usable = gpu.vram_bytes.known and gpu.mem_bandwidth_bytes_per_s.known
    request = build_request(PlanChoices(model=gguf, threads=threads, tokens=40), detect_gpu=lambda: gpu)
    t = request.threads
    planned_cpu, skipped = check_fits(request, cpu_runs(gguf, t, repetitions))
    if not planned_cpu:
        raise CopeInputError(f"--gguf: cannot calibrate with it: {skipped[0].reason}", path=gguf)
    done: list[tuple[CalibrationRun, BenchTest]] = []
    total = len(planned_cpu)

    def measure(run: CalibrationRun) -> None:
        if progress is not None:
            progress(len(done), total, f"{run.name}: {run.what}")
        try:
            done.append((run, run_llama_bench(bench, run, timeout_s=run_timeout_s, cancel=cancel)))
        except TimeoutError as exc:
            skipped.append(SkippedRun(run.name, run.what, f"not measured: {exc} (--run-timeout)"))

    measure(planned_cpu[0])
    first = done[0][1] if done else None
    if first is not None and first.has_gpu_backend and gpu_usable:
        fits, too_big = check_fits(request, gpu_runs(request, gguf, t, repetitions))
        skipped.extend(too_big)
        total += len(fits)
        for run in fits:
            measure(run)
    elif first is not None and first.has_gpu_backend:
        skipped.append(SkippedRun("gpu runs", "placements on the GPU",
                                  f"not run: COPE cannot plan for this machine's GPU ({gpu.mem_bandwidth_bytes_per_s.note})"))
    elif first is not None:
        skipped.append(SkippedRun("gpu runs", "placements on the GPU",
                                  f"not run: this llama-bench has no GPU backend (backends: {first.backends or 'CPU'})"))
    for run in planned_cpu[1:]:
        measure(run)
    if progress is not None:
        progress(len(done), total, "fitting")
    if not done:
        raise CopeInputError(f"no llama-bench run finished: {'; '.join(s.reason for s in skipped)}", path=gguf)
    done = _consistent(_steady(done, skipped), skipped)
    if not done:  # every run measured other work: say why of the first
        first = next(s for s in skipped if s.reason.startswith("not used"))
        raise CopeInputError(f"no llama-bench run could be used ({first.name}: {first.reason})", path=gguf)
    has_gpu = any(run.uses_gpu for run, _ in done)
    fit = calibration_fit.fit_lanes(request, [r for r, _ in done], [b.avg_ts for _, b in done], has_gpu=has_gpu)
    _check_residuals([r for r, _ in done], [b.avg_ts for _, b in done], fit.fitted_tokens_per_s, bench, gguf)
    key, cpu_name = machine if machine is not None else this_machine()
    stamp = (now or _dt.datetime.now(_dt.timezone.utc)).astimezone(_dt.timezone.utc).replace(microsecond=0)
    ref = done[0][1]
    runs = tuple(MeasuredRun(r.name, r.what, r.argv, r.threads, r.uses_gpu, b.avg_ts, b.stddev_ts, g, f)
                 for (r, b), g, f in zip(done, fit.global_tokens_per_s, fit.fitted_tokens_per_s))
    cal = Calibration(
        machine=key, cpu_name=cpu_name, gpu_name=request.platform.gpu.name if has_gpu else "",
        model_id=request.model.id, quant=request.quant.name, gguf_name=os.path.basename(gguf),
        gguf_bytes=os.path.getsize(gguf), threads=t, date_iso=stamp.isoformat(), build_commit=ref.build_commit,
        build_number=ref.build_number, cpu_info=ref.cpu_info, gpu_info=ref.gpu_info, backends=ref.backends,
        constants=fit.constants, runs=runs, residual_rms=fit.residual_rms,
        skipped=tuple((s.name, s.reason) for s in skipped),
    )
    return CalibrateReport(cal, save_calibration(cal, root), tuple(skipped))


# A fit is kept only when it reproduces every run it rests on within this factor: a quiet
# machine's fits land within a few percent, so a run the lanes cannot explain to within
# 2x means the measurements (or the runtime's answers) are not of this machine's lanes.
# Such a fit is refused: never stored, never made the default cost model.
MAX_FIT_FACTOR = 2.0


def _check_residuals(runs: list[CalibrationRun], measured: list[float], fitted, bench: str, gguf: str) -> None:  # type: ignore[no-untyped-def]
    worst = max(zip(runs, measured, fitted), key=lambda rmf: _factor(rmf[1], rmf[2]))
    run, m, f = worst
    if _factor(m, f) > MAX_FIT_FACTOR:
        raise CopeInputError(f"calibration refused: the fitted lanes give {f:.3g} tok/s for the {run.name} run, "
                             f"which {bench} measured at {m:.3g} tok/s, more than {MAX_FIT_FACTOR:g}x apart: "
                             "nothing stored (calibrate again on a quiet machine)", path=gguf)


def _factor(measured: float, fitted: float) -> float:
    """How many times apart two speeds are (inf when either is not a positive number)."""
    if not (measured > 0 and fitted > 0) or not (math.isfinite(measured) and math.isfinite(fitted)):
        return math.inf
    return max(measured / fitted, fitted / measured)


BUSY_MARGIN = 0.9  # a run this much slower than one with fewer threads contradicts the model
# Repetitions of one run on a quiet machine agree within a few percent (measured: 0.3-4%);
# this much spread means other work took the cores in some of them.
NOISY_SPREAD = 0.15  # standard deviation over mean


def _steady(done: list[tuple[CalibrationRun, BenchTest]],
            skipped: list[SkippedRun]) -> list[tuple[CalibrationRun, BenchTest]]:
    """The runs whose repetitions agree; each one dropped is kept in `skipped` with why."""
    out = []
    for run, test in done:
        if test.avg_ts > 0 and test.stddev_ts / test.avg_ts <= NOISY_SPREAD:
            out.append((run, test))
            continue
        skipped.append(SkippedRun(run.name, run.what,
                                  f"not used: its repetitions varied by {test.stddev_ts:.2f} around "
                                  f"{test.avg_ts:.2f} tok/s: other work was holding the CPU's cores; "
                                  "calibrate again when the machine is quiet (or with more --repetitions)"))
    return out


def _consistent(done: list[tuple[CalibrationRun, BenchTest]],
                skipped: list[SkippedRun]) -> list[tuple[CalibrationRun, BenchTest]]:
    """The runs without the CPU-only ones that ran slower with more threads than another
    with fewer: on a memory-bound decode more threads are never slower unless other work
    holds the cores (llama.cpp's threads then wait on each other), so such a run measures
    the machine's load, not its lanes. Each one dropped is kept in `skipped` with why."""
    cpu = [(r, b) for r, b in done if not r.uses_gpu]
    out = []
    for run, test in done:
        fewer = [(r, b) for r, b in cpu if r.threads < run.threads and b.avg_ts * BUSY_MARGIN > test.avg_ts]
        if run.uses_gpu or not fewer:
            out.append((run, test))
            continue
        r, b = max(fewer, key=lambda rb: rb[1].avg_ts)
        skipped.append(SkippedRun(run.name, run.what,
                                  f"not used: {test.avg_ts:.2f} tok/s at {run.threads} threads, slower than "
                                  f"{b.avg_ts:.2f} at {r.threads}: other work was holding the CPU's cores; "
                                  "calibrate again when the machine is quiet"))
    return out


def _detect_gpu(detect_gpu: Callable | None):  # type: ignore[no-untyped-def]
    if detect_gpu is not None:
        return detect_gpu()
    return detect(torch=UNLOADED)


def calibration_for(request, root: str | os.PathLike | None = None,  # type: ignore[no-untyped-def]
                    machine: Callable[[], tuple[str, str]] | None = None) -> Found:
    """This machine's calibration for `request` when the request plans for this machine's
    CPU; Found(None) otherwise. Looks at this machine only when calibrations are stored."""
    try:
        if not any(machine_dir(root).glob(f"{PREFIX}*.json")):
            return Found(None, None, "")
    except OSError:
        return Found(None, None, "")
    key, cpu_name = (machine or this_machine)()
    if request.platform.cpu.name != cpu_name:
        return Found(None, None, "")
    return find_calibration(key, request.model.id, request.quant.name, root)
