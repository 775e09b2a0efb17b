"""A machine's calibration: the lane constants `cope calibrate` fitted from llama-bench runs.

The analytic model (engine/cost/analytic_cost.py) states its streaming rates as efficiencies of
a bandwidth figure (the GPU's spec sheet, the CPU memory's peak or measurement). A
calibration measures what this machine streams, so it keeps absolute figures (bytes per
second): a later plan that states the memory differently still prices with what was
measured. Overheads and the hand-over are seconds either way. A constant the runs did not
determine is absent: the globally fitted value (docs/accuracy.md) stands for it.

The record keeps its provenance: when, which llama-bench build, which GGUF, which
machine, and every run's flags with its measured and fitted tokens/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Mapping

from engine.cost.analytic_cost import AnalyticAssumptions

# The measurable lane constants: name -> (the AnalyticAssumptions field it sets, what it is), in the
# order the fit takes them when the runs cannot tell two apart (engine/advice/calibration_fit.py).
LANE_CONSTANTS: dict[str, tuple[str, str]] = {
    "cpu_thread_bytes_per_s": ("cpu_thread_bytes_per_s", "what one CPU thread streams below saturation"),
    "cpu_saturated_bytes_per_s": ("cpu_bandwidth_efficiency", "what the CPU streams once the memory saturates"),
    "cpu_block_overhead_s": ("cpu_block_overhead_s", "a block's other CPU ops"),
    "gpu_block_overhead_s": ("gpu_block_overhead_s", "a block's other GPU kernels"),
    "sync_s": ("sync_s", "the hidden state to the CPU and back"),
    "gpu_stream_bytes_per_s": ("gpu_bandwidth_efficiency", "what the GPU streams for quantized mat-vecs"),
}
GPU_CONSTANTS = ("gpu_block_overhead_s", "sync_s", "gpu_stream_bytes_per_s")


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class LaneConstants:
    """Measured constants (absolute: bytes per second, seconds), by LANE_CONSTANTS name."""

    values: Mapping[str, float]

    def __post_init__(self) -> None:
        for name, value in self.values.items():
            if name not in LANE_CONSTANTS:
                raise ValueError(f"unknown lane constant {name!r}; known: {', '.join(LANE_CONSTANTS)}")
            if not _positive(value):
                raise ValueError(f"lane constant {name} must be a positive number, got {value!r}")

    def without_gpu(self) -> "LaneConstants":
        return LaneConstants({k: v for k, v in self.values.items() if k not in GPU_CONSTANTS})

    def assumptions(self, cpu_bytes_per_s: float, gpu_bytes_per_s: float,
                    base: AnalyticAssumptions = AnalyticAssumptions()) -> AnalyticAssumptions:
        """`base` with the measured constants in place, the streaming rates as efficiencies
        of the bandwidths the plan states (`cpu_bytes_per_s`, `gpu_bytes_per_s`)."""
        v = dict(self.values)
        changes: dict[str, float] = {}
        if "cpu_saturated_bytes_per_s" in v:
            changes["cpu_bandwidth_efficiency"] = v.pop("cpu_saturated_bytes_per_s") / cpu_bytes_per_s
        if "gpu_stream_bytes_per_s" in v:
            changes["gpu_bandwidth_efficiency"] = v.pop("gpu_stream_bytes_per_s") / gpu_bytes_per_s
        changes.update(v)  # the rest are AnalyticAssumptions fields of the same name
        return replace(base, **changes)

    def sets(self) -> tuple[str, ...]:
        """The AnalyticAssumptions fields the measured constants set."""
        return tuple(LANE_CONSTANTS[name][0] for name in self.values)

    def kept(self) -> tuple[str, ...]:
        """The AnalyticAssumptions fields left at their globally fitted or assumed values."""
        done = set(self.sets())
        return tuple(f.name for f in fields(AnalyticAssumptions) if f.name not in done)


def global_constants(cpu_bytes_per_s: float, gpu_bytes_per_s: float, cpu_thread_bytes_per_s: float,
                     base: AnalyticAssumptions = AnalyticAssumptions()) -> dict[str, float]:
    """Every lane constant as the global fit gives it on a machine with these bandwidths
    and this rate of one thread (`engine.cost.analytic_cost.thread_bytes_per_s`)."""
    return {
        "cpu_thread_bytes_per_s": cpu_thread_bytes_per_s,
        "cpu_block_overhead_s": base.cpu_block_overhead_s,
        "gpu_block_overhead_s": base.gpu_block_overhead_s,
        "sync_s": base.sync_s,
        "gpu_stream_bytes_per_s": base.gpu_bandwidth_efficiency * gpu_bytes_per_s,
        "cpu_saturated_bytes_per_s": base.cpu_bandwidth_efficiency * cpu_bytes_per_s,
    }


@dataclass(frozen=True)
class MeasuredRun:
    """One llama-bench run of a calibration: its flags and what it measured."""

    name: str
    what: str
    argv: tuple[str, ...]  # llama-bench's words, the binary first (as "llama-bench")
    threads: int
    uses_gpu: bool
    tokens_per_s: float  # llama-bench's avg_ts of the decode test
    stddev_tokens_per_s: float
    global_tokens_per_s: float = 0.0  # what the global constants predict
    fitted_tokens_per_s: float = 0.0  # what the calibrated constants predict


@dataclass(frozen=True)
class Calibration:
    """This machine's lane constants, with where they came from."""

    machine: str  # the machine key (engine.hardware.bandwidth_store.machine_key)
    cpu_name: str
    gpu_name: str  # the GPU the runs used ("" when none did)
    model_id: str
    quant: str
    gguf_name: str
    gguf_bytes: int
    threads: int
    date_iso: str  # UTC, to the second
    build_commit: str  # llama-bench's
    build_number: int
    cpu_info: str  # as llama-bench reports them
    gpu_info: str
    backends: str
    constants: LaneConstants  # the fitted ones only
    runs: tuple[MeasuredRun, ...]
    residual_rms: float  # root mean square of log(fitted / measured) over the runs
    skipped: tuple[tuple[str, str], ...] = ()  # (run, why it was not run)

    @property
    def date(self) -> str:
        return self.date_iso[:10]

    def assumptions(self, cpu_bytes_per_s: float, gpu_bytes_per_s: float, *, gpu_matches: bool,
                    base: AnalyticAssumptions = AnalyticAssumptions()) -> AnalyticAssumptions:
        """The analytic constants with this calibration's; its GPU constants only when the
        GPU planned for is the one calibrated (`gpu_matches`)."""
        constants = self.constants if gpu_matches else self.constants.without_gpu()
        return constants.assumptions(cpu_bytes_per_s, gpu_bytes_per_s, base)

    def describe(self) -> str:
        fitted = ", ".join(describe_constant(k, v) for k, v in self.constants.values.items()) or "nothing"
        return (f"calibrated on {self.date} with llama-bench {self.build_commit or '?'} on {self.gguf_name} "
                f"({len(self.runs)} runs, residual {self.residual_rms:.1%}): {fitted}")


def describe_constant(name: str, value: float) -> str:
    if name.endswith("_bytes_per_s"):
        return f"{name} {value / 1e9:.2f} GB/s"
    return f"{name} {value * 1e6:.1f} us"
