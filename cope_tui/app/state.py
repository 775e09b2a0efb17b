"""What the person chose in the app, and the services the app calls (stubs in tests)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from cope_tui.inputs import SYNTHETIC_SEED, SYNTHETIC_TOKENS, AdviseArgs


@dataclass(frozen=True)
class Choices:
    """The app's fields; None means "the headless default" (build_request's assumptions)."""

    model: str | None = None  # catalog id, GGUF path or Hub repo id
    gguf_file: str | None = None  # with a Hub repo id: a GGUF file in it
    quant: str | None = None
    gpu: str | None = None  # GPU preset to plan for
    vram_budget_gib: float | None = None
    context: int | None = None
    threads: int | None = None
    trace: str | None = None  # a file, "synthetic", or None: the newest cached trace, else synthetic
    profile_trace: str | None = None

    def with_(self, **kw: Any) -> "Choices":
        return replace(self, **kw)

    def to_args(self, *, tokens: int, seed: int) -> AdviseArgs:
        return AdviseArgs(
            model=self.model, gguf_file=self.gguf_file, quant=self.quant, gpu=self.gpu,
            vram_budget_gib=self.vram_budget_gib, context=self.context, threads=self.threads,
            trace=self.trace, profile_trace=self.profile_trace, tokens=tokens, seed=seed,
        )


def _detect_cpu():  # type: ignore[no-untyped-def]
    from probes.host import detect_cpu  # reads /proc only

    return detect_cpu()


def _detect_gpu():  # type: ignore[no-untyped-def]
    # NVML only: cheap, and torch stays unimported until the person asks to measure.
    from probes.gpu import detect_gpu

    return detect_gpu(torch=None)


def _measure_platform(progress, expert_bytes):  # type: ignore[no-untyped-def]
    from probes.detect import detect_platform

    return detect_platform(measure=True, expert_bytes=expert_bytes, progress=progress)


def _run_probes(request, **kw):  # type: ignore[no-untyped-def]
    from cope_tui.app.work import run_probes

    return run_probes(request, **kw)


def _pull(spec: str, model: str, log):  # type: ignore[no-untyped-def]
    from cope_tui.sources.hub_trace import pull_trace

    return str(pull_trace(spec, model=model, log=log).path)


def _record(**kw):  # type: ignore[no-untyped-def]
    from cope_tui.app.work import record_trace

    return record_trace(**kw)


@dataclass(frozen=True)
class Services:
    """Everything that touches the machine or the network; tests replace these."""

    detect_cpu: Callable[[], Any] = _detect_cpu
    detect_gpu: Callable[[], Any] | None = _detect_gpu
    measure_platform: Callable[..., Any] = _measure_platform
    run_probes: Callable[..., Any] = _run_probes
    record: Callable[..., Any] = _record
    pull: Callable[..., Any] = _pull  # (spec, model id, log) -> path of the pulled trace
    tokens: int = SYNTHETIC_TOKENS  # synthetic tokens per half
    seed: int = SYNTHETIC_SEED
    sweep_points: int = 6  # VRAM budgets in the chart
    chart_series: int = 4  # best candidates drawn
    extra: dict = field(default_factory=dict)
