"""This machine as a Platform: detected CPU and GPU, optionally with measured bandwidths.

A measured figure replaces the detected or derived one (basis "measured"); a measurement
that could not run keeps the detected figure, or the unknown, and its note says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from engine.hardware.platform import Fact, Platform
from probes.bandwidth import measure_cpu_memory_bandwidth, measure_gpu_memory_bandwidth, measure_h2d_bandwidth
from probes.gpu import NO_GPU_NAME, detect_gpu
from probes.host import detect_cpu

# One routed expert's weights (gate, up and down) at about 4.5 bits per weight is a few
# MiB for small MoE models (Qwen3-30B-A3B, about 2.5 MiB) and about 24 MiB for
# DeepSeek-V3; 16 MiB is in between. Callers that know the model pass its size.
DEFAULT_EXPERT_BYTES = 16 * 1024**2


SKIPPED = "not measured (measurements skipped)"


def _skipped(f: Fact) -> Fact:
    if f.known:
        return f
    return Fact.unknown(SKIPPED if f.note == "not measured" else f"{SKIPPED}; {f.note}")


def _keep(old: Fact, failed: Fact) -> Fact:
    """`old`, its note extended with why the measurement did not replace it."""
    if not old.known:
        return failed  # the measurement's reason replaces "not measured"
    return Fact(old.value, old.basis, f"{old.note}; {failed.note}")


def _merge(old: Fact, measured: Fact) -> Fact:
    return measured if measured.known else _keep(old, measured)


def detect_platform(
    measure: bool = True,
    expert_bytes: int = DEFAULT_EXPERT_BYTES,
    device: int = 0,
    progress: Callable[[str], None] | None = None,
) -> Platform:
    """Detect this machine; with `measure`, also run the bounded bandwidth measurements.

    Never raises for a missing GPU, torch or NVML: those figures are unknown with the
    reason. `progress` receives one line per step (for narration on stderr).
    """
    say = progress or (lambda _msg: None)
    say("detecting CPU and memory")
    cpu = detect_cpu()
    say("detecting GPU (torch.cuda, NVML)")
    gpu = detect_gpu(device)

    if not measure:
        cpu = replace(cpu, mem_bandwidth_bytes_per_s=Fact.unknown(SKIPPED))
        if gpu.name != NO_GPU_NAME:
            gpu = replace(gpu, h2d_pageable_bytes_per_s=_skipped(gpu.h2d_pageable_bytes_per_s))
        return Platform(gpu=gpu, cpu=cpu)

    say("measuring CPU memory bandwidth (every core reading at once)")
    cores = cpu.physical_cores
    measured = measure_cpu_memory_bandwidth(threads=int(cores.value) if cores.known else None)  # type: ignore[arg-type]
    if measured.known and cpu.mem_peak_bytes_per_s.known:
        peak = float(cpu.mem_peak_bytes_per_s.value)  # type: ignore[arg-type]
        measured = Fact.measured(measured.value, f"{measured.note}; {float(measured.value) / peak:.0%} of "  # type: ignore[arg-type]
                                                 f"the detected memory's theoretical peak {peak / 1e9:.1f} GB/s")
    cpu = replace(cpu, mem_bandwidth_bytes_per_s=_merge(cpu.mem_bandwidth_bytes_per_s, measured))
    say("measuring one thread's memory read bandwidth")
    one = measure_cpu_memory_bandwidth(threads=1)
    cpu = replace(cpu, thread_bandwidth_bytes_per_s=one)

    if gpu.name == NO_GPU_NAME:
        return Platform(gpu=gpu, cpu=cpu)  # every GPU figure already says why it is unknown
    if gpu.cuda_problem is not None:  # an NVIDIA GPU torch cannot use: say why, not just "no CUDA"
        why = Fact.unknown(f"not measured: {gpu.cuda_problem.message}; fix: {gpu.cuda_problem.fix}")
        gpu = replace(gpu, h2d_bytes_per_s=_keep(gpu.h2d_bytes_per_s, why), h2d_pageable_bytes_per_s=why,
                      mem_bandwidth_bytes_per_s=_keep(gpu.mem_bandwidth_bytes_per_s, why))
        return Platform(gpu=gpu, cpu=cpu)

    say("measuring pinned host-to-device bandwidth")
    pinned = measure_h2d_bandwidth(expert_bytes, pinned=True, device=device)
    say("measuring pageable host-to-device bandwidth")
    pageable = measure_h2d_bandwidth(expert_bytes, pinned=False, device=device)
    say("measuring GPU memory bandwidth")
    gpu_bw = measure_gpu_memory_bandwidth(device=device)
    if gpu_bw.known and gpu.mem_bandwidth_bytes_per_s.known:
        peak = float(gpu.mem_bandwidth_bytes_per_s.value)  # type: ignore[arg-type]
        # The peak is torch's (clock x bus) when it has both, else the card's spec sheet.
        whose = ("the spec sheet's peak" if gpu.mem_bandwidth_bytes_per_s.basis == "preset"
                 else "the theoretical peak")
        gpu_bw = Fact.measured(
            gpu_bw.value,  # type: ignore[arg-type]
            f"{gpu_bw.note}; {float(gpu_bw.value) / peak:.0%} of {whose} {peak / 1e9:.0f} GB/s",  # type: ignore[arg-type]
        )
    gpu = replace(
        gpu,
        h2d_bytes_per_s=_merge(gpu.h2d_bytes_per_s, pinned),
        h2d_pageable_bytes_per_s=pageable,
        mem_bandwidth_bytes_per_s=_merge(gpu.mem_bandwidth_bytes_per_s, gpu_bw),
    )
    return Platform(gpu=gpu, cpu=cpu)
