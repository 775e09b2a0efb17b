"""Short, bounded bandwidth measurements: host-to-device copies, GPU memory (and, from
probes.cpu_bandwidth, CPU memory read by many threads).

Each returns a `Fact`: measured, with the method in the note (sizes, runs, median), or
unknown with the reason. None raises; each stops after its time budget (a warm-up and at
least `MIN_RUNS` timed runs are always done, so one slow run cannot loop forever, and the
sizes are capped so one run stays short on any machine that gets that far).
torch is imported lazily, inside the functions.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from engine.hardware.platform import Fact
from probes.cpu_bandwidth import measure_cpu_memory_bandwidth  # noqa: F401 - callers import it from here

MIB = 1024**2
MIN_RUNS = 3
GPU_BYTES = 512 * MIB
MAX_H2D_BYTES = 1024 * MIB

_IMPORT = object()


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _runs(timed: Callable[[], float], repeats: int, budget_s: float) -> list[float]:
    """Seconds of up to `repeats` timed runs (at least MIN_RUNS), stopping at the budget."""
    start = time.perf_counter()
    out: list[float] = []
    while len(out) < max(repeats, MIN_RUNS):
        out.append(timed())
        if len(out) >= MIN_RUNS and time.perf_counter() - start > budget_s:
            break
    return out


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB/s"


def _mib(n: int) -> str:
    return f"{n / MIB:.0f} MiB" if n >= MIB else f"{n / 1024:.0f} KiB"


def _cuda(torch: Any) -> tuple[Any, str | None]:
    if torch is _IMPORT:
        try:
            import torch as _torch
        except Exception as exc:
            return None, f"not measured: torch could not be imported ({_why(exc)})"
        torch = _torch
    if torch is None:
        return None, "not measured: torch is not available"
    try:
        if not torch.cuda.is_available():
            return None, "not measured: no CUDA device through torch (torch.cuda.is_available() is False)"
    except Exception as exc:
        return None, f"not measured: torch.cuda.is_available() failed ({_why(exc)})"
    return torch, None


# --- CPU: probes.cpu_bandwidth (many threads at once, numpy) --------------------------


# --- GPU --------------------------------------------------------------------------


def _event_runs(torch: Any, op: Callable[[], None], repeats: int, budget_s: float) -> list[float]:
    """Seconds per call of `op` on the current stream, timed with CUDA events."""
    op()  # warm-up
    torch.cuda.synchronize()

    def once() -> float:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        op()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    return _runs(once, repeats, budget_s)


def measure_h2d_bandwidth(
    expert_bytes: int, pinned: bool, repeats: int = 20, budget_s: float = 1.0, device: int = 0,
    *, torch: Any = _IMPORT,
) -> Fact:
    """Host-to-device bandwidth of one copy of `expert_bytes` (one expert's weights).

    Each copy is timed alone with CUDA events, so the per-copy latency counts, as it does
    when a layer's missed experts are staged one by one. `pinned`: from page-locked host
    memory (what a staging buffer uses); else from ordinary pageable memory.
    """
    kind = "pinned" if pinned else "pageable"
    try:
        expert_bytes = int(expert_bytes)
    except (TypeError, ValueError):
        return Fact.unknown(f"not measured: expert size {expert_bytes!r} is not a number of bytes")
    if expert_bytes <= 0:
        return Fact.unknown(f"not measured: expert size must be positive, got {expert_bytes}")
    if expert_bytes > MAX_H2D_BYTES:
        return Fact.unknown(f"not measured: expert size {_mib(expert_bytes)} is above the {_mib(MAX_H2D_BYTES)} cap")
    torch, why = _cuda(torch)
    if torch is None:
        return Fact.unknown(why or "not measured")
    try:
        dev = torch.device("cuda", device)
        src = torch.ones(expert_bytes, dtype=torch.uint8, pin_memory=pinned)
        dst = torch.empty(expert_bytes, dtype=torch.uint8, device=dev)
        with torch.cuda.device(dev):
            times = _event_runs(torch, lambda: dst.copy_(src, non_blocking=pinned), repeats, budget_s)
        del src, dst
    except Exception as exc:  # out of memory, pinning refused, driver error
        return Fact.unknown(f"not measured: the {kind} host-to-device copy failed ({_why(exc)})")
    median = statistics.median(times)
    if median <= 0:
        return Fact.unknown("not measured: CUDA events gave no elapsed time")
    return Fact.measured(
        expert_bytes / median,
        f"{kind} host-to-device copy of {_mib(expert_bytes)} (one expert) to cuda:{device}, each copy "
        f"timed alone with CUDA events, median of {len(times)} copies after a warm-up "
        f"(best {_gb(expert_bytes / min(times))})",
    )


def measure_gpu_memory_bandwidth(
    size_bytes: int = GPU_BYTES, repeats: int = 10, budget_s: float = 1.0, device: int = 0,
    *, torch: Any = _IMPORT,
) -> Fact:
    """Device memory bandwidth: a device-to-device copy, counting bytes read plus written."""
    torch, why = _cuda(torch)
    if torch is None:
        return Fact.unknown(why or "not measured")
    try:
        dev = torch.device("cuda", device)
        free, _total = torch.cuda.mem_get_info(dev)
        size_bytes = int(min(int(size_bytes), free // 4))  # two buffers, half the free memory at most
        if size_bytes < 16 * MIB:
            return Fact.unknown(f"not measured: only {_mib(int(free))} of GPU memory free")
        src = torch.ones(size_bytes, dtype=torch.uint8, device=dev)
        dst = torch.empty(size_bytes, dtype=torch.uint8, device=dev)
        with torch.cuda.device(dev):
            times = _event_runs(torch, lambda: dst.copy_(src), repeats, budget_s)
        del src, dst
        torch.cuda.empty_cache()
    except Exception as exc:
        return Fact.unknown(f"not measured: the GPU memory measurement failed ({_why(exc)})")
    median = statistics.median(times)
    if median <= 0:
        return Fact.unknown("not measured: CUDA events gave no elapsed time")
    moved = 2 * size_bytes
    return Fact.measured(
        moved / median,
        f"device-to-device copy of {_mib(size_bytes)} on cuda:{device}, counting bytes read plus written, "
        f"CUDA events, median of {len(times)} runs after a warm-up (best {_gb(moved / min(times))})",
    )
