"""The services the app calls for what touches the machine or the network (tests replace
them); what the person chose is a PlanChoices (cope_tui/options.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable
from cope_tui.service.advice import sweep_stages
from cope_tui.service.hardware import remember_cpu_bandwidth
from cope_tui.service.pricing import probe_then_price
from cope_tui.service.runtimes import scan_runtimes
from cope_tui.service.traces import record_trace
from cope_tui.sources.hub_imatrix import pull_entry_file
from cope_tui.sources.hub_trace import plan_pull, pull_trace
from probes.detect import detect_platform
from probes.gpu import UNLOADED, detect_gpu
from probes.host import detect_cpu


def _detect_cpu():  # type: ignore[no-untyped-def]
    return detect_cpu()


def _detect_gpu():  # type: ignore[no-untyped-def]
    # NVML only: cheap, and torch stays unimported until the person asks to measure.
    return detect_gpu(torch=UNLOADED)


def _measure_platform(progress, expert_bytes):  # type: ignore[no-untyped-def]
    platform = detect_platform(measure=True, expert_bytes=expert_bytes, progress=progress)
    remember_cpu_bandwidth(platform)  # planning on this machine uses it from now on
    return platform


def _run_probes(request, *, fidelity, budget_s, progress, cancel):  # type: ignore[no-untyped-def]
    return probe_then_price(request, fidelity, budget_s=budget_s, progress=progress, cancel=cancel)


def _scan_runtimes():  # type: ignore[no-untyped-def]
    return scan_runtimes()


def _plan_pull(spec: str):  # type: ignore[no-untyped-def]
    return plan_pull(spec)


def _pull(spec: str, model: str, log, progress=None, cancel=None):  # type: ignore[no-untyped-def]
    return str(pull_trace(spec, model=model, log=log, progress=progress, cancel=cancel).path)


def _pull_imatrix(repo_id: str, filename: str | None, **kw):  # type: ignore[no-untyped-def]
    return pull_entry_file(repo_id, filename, **kw)


def _sweep_stages(advice, n_points, **kw):  # type: ignore[no-untyped-def]
    return sweep_stages(advice, n_points, **kw)


def _record(**kw):  # type: ignore[no-untyped-def]
    return record_trace(**kw)


@dataclass(frozen=True)
class Services:
    """Everything that touches the machine or the network; tests replace these."""

    detect_cpu: Callable[[], Any] = _detect_cpu
    detect_gpu: Callable[[], Any] | None = _detect_gpu
    measure_platform: Callable[..., Any] = _measure_platform
    run_probes: Callable[..., Any] = _run_probes  # -> cope_tui.service.pricing.ProbeOutcome
    record: Callable[..., Any] = _record
    plan_pull: Callable[..., Any] = _plan_pull  # (spec) -> hub_trace.PullPlan: the file and its size
    pull: Callable[..., Any] = _pull  # (spec, model id, log, progress, cancel) -> path of the pulled trace
    # (repo, file or None, repo_type=, progress=, cancel=) -> path of the downloaded imatrix
    pull_imatrix: Callable[..., Any] = _pull_imatrix
    scan_runtimes: Callable[[], Any] | None = _scan_runtimes  # -> probes.runtimes.RuntimeScan
    sweep_stages: Callable[..., Any] = _sweep_stages  # -> iterator of cope_tui.service.advice.SweepStage
    sweep_points: int = 6  # VRAM budgets in the chart
    chart_series: int = 4  # best candidates drawn
