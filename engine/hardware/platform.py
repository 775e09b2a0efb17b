"""The machine a policy runs on: GPU and CPU figures, each with its basis.

Every figure is a `Fact`: a value (or None when unknown) plus where it came from
(a preset's spec sheet, detection on this host, a measurement, a flag the person gave, or
an assumption) and a note that says how or why. GPU presets are read from assets/gpus.json
here, CPU presets from assets/cpus.json by engine.hardware.cpu_presets; both are validated once,
where they are read, and found by name through engine.hardware.preset_names.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from engine.core.records import record_dict


BASES = ("preset", "detected", "measured", "given", "assumed", "unknown")

# PCIe payload bandwidth per lane and direction after line encoding (8b/10b is gone
# from gen3 on; 128b/130b): gen3 8 GT/s, gen4 16 GT/s, gen5 32 GT/s.
PCIE_LANE_BYTES_PER_S: dict[int, float] = {3: 0.985e9, 4: 1.969e9, 5: 3.938e9}
# Pinned host-to-device copies reach about this fraction of the link's payload rate
# (protocol overhead: TLP headers, flow control, DMA setup).
H2D_EFFICIENCY = 0.8

GPU_ASSET = "gpus.json"
GPU_FIGURES = ("vram_bytes", "mem_bandwidth_bytes_per_s", "pcie_gen", "pcie_lanes", "sm_count")
CPU_ASSET = "cpus.json"
DEFAULT_CPU_PRESET = "desktop-ddr5"


# --- Fact -------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    """One figure with its basis: preset, detected, measured, given, assumed or unknown."""

    value: float | int | str | None  # None when unknown
    basis: str
    note: str  # preset: the source; detected, measured: how; given: which flag; assumed, unknown: why

    def __post_init__(self) -> None:
        if self.basis not in BASES:
            raise ValueError(f"basis {self.basis!r} not one of {BASES}")
        if (self.value is None) != (self.basis == "unknown"):
            raise ValueError("a Fact's value is None exactly when its basis is 'unknown'")

    @property
    def known(self) -> bool:
        return self.value is not None

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)

    @classmethod
    def preset(cls, value: float | int | str, source: str) -> Fact:
        return cls(value, "preset", source)

    @classmethod
    def detected(cls, value: float | int | str, how: str) -> Fact:
        return cls(value, "detected", how)

    @classmethod
    def measured(cls, value: float | int | str, how: str) -> Fact:
        return cls(value, "measured", how)

    @classmethod
    def given(cls, value: float | int | str, flag: str) -> Fact:
        return cls(value, "given", flag)

    @classmethod
    def assumed(cls, value: float | int | str, why: str) -> Fact:
        return cls(value, "assumed", why)

    @classmethod
    def unknown(cls, why: str) -> Fact:
        return cls(None, "unknown", why)


@dataclass(frozen=True)
class CudaProblem:
    """Why torch cannot use the NVIDIA GPU this machine has (probes.cuda_check)."""

    kind: str  # "cpu-build", "driver-too-old", "rocm-build", "no-torch", "hidden", "cuda-unavailable"
    message: str  # one line: what is wrong
    fix: str  # the command (or step) that fixes it

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


# --- value types ------------------------------------------------------------------

_NOT_REPORTED = Fact.unknown("not reported by this source (a preset gives spec-sheet figures only)")


@dataclass(frozen=True)
class GpuSpec:
    name: str
    preset_id: str | None
    vram_bytes: Fact
    vram_free_bytes: Fact
    mem_bandwidth_bytes_per_s: Fact
    pcie_gen: Fact
    pcie_lanes: Fact
    h2d_bytes_per_s: Fact  # effective pinned host-to-device bandwidth
    sm_count: Fact
    # Added with detection; defaults keep older constructors (presets) working.
    # pcie_gen / pcie_lanes above are the most the link can run at with this device and
    # system (a spec-sheet figure for presets); these are the link's state when read,
    # which drops while the GPU idles (link power saving).
    pcie_gen_current: Fact = field(default=_NOT_REPORTED)
    pcie_lanes_current: Fact = field(default=_NOT_REPORTED)
    h2d_pageable_bytes_per_s: Fact = field(default=_NOT_REPORTED)  # from pageable host memory
    driver_version: Fact = field(default=_NOT_REPORTED)
    cuda_version: Fact = field(default=_NOT_REPORTED)
    # Detected GPUs only: the preset whose spec sheet filled figures detection lacked,
    # and why torch cannot use an NVIDIA GPU that is there (None: no such problem).
    matched_preset_id: str | None = None
    cuda_problem: CudaProblem | None = None
    device_names: tuple[str, ...] = ()  # presets: the names NVML and torch report for this card
    # Who makes the card and the llama.cpp backend a plan for it uses (engine.hardware.gpu_backends:
    # the backend names the card's buffers, CUDA0, ROCm0, Vulkan0, SYCL0).
    vendor: str = "NVIDIA"
    backend: str = "CUDA"
    backends: tuple[str, ...] = ("CUDA", "Vulkan")  # the backends that run this card, the default first
    # More than one card (engine.hardware.gpu_set): this spec is the set as the planner sees it
    # (memory summed, bandwidth as the cards' shares of the work see it) and `cards` holds each
    # card in llama.cpp's device order (CUDA0, CUDA1, ...). Empty for one card.
    cards: tuple["GpuSpec", ...] = ()
    pci_address: str | None = None  # detected: the PCI address ("0000:01:00.0"), where the system says

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


_NOT_SAID = Fact.unknown("not known: neither given, nor detected, nor in a preset")


@dataclass(frozen=True)
class CpuSpec:
    name: str
    preset_id: str | None
    physical_cores: Fact  # of the whole machine (every socket)
    logical_threads: Fact
    ram_bytes: Fact
    ram_available_bytes: Fact
    # The bandwidth COPE plans with: a measured figure, else the theoretical peak of one
    # socket's memory (engine.hardware.cpu_choice says why one socket; docs/hardware.md).
    mem_bandwidth_bytes_per_s: Fact
    numa_nodes: Fact
    # The memory itself, one socket's (defaults keep older constructors working).
    sockets: Fact = field(default=_NOT_SAID)
    memory_type: Fact = field(default=_NOT_SAID)  # "DDR5"
    memory_speed_mts: Fact = field(default=_NOT_SAID)  # mega-transfers per second
    memory_channels: Fact = field(default=_NOT_SAID)  # 64-bit channels of one socket
    mem_peak_bytes_per_s: Fact = field(default=_NOT_SAID)  # theoretical peak of one socket
    # What ONE thread reads from memory (measured by `cope detect`): at a few threads the
    # CPU lane is bound by this rather than by the memory's total.
    thread_bandwidth_bytes_per_s: Fact = field(default=_NOT_SAID)
    # A core's compute where no preset gives it (engine.hardware.cpu_compute): the widest int8 dot
    # product its flags offer ("AVX2", "AVX2 VNNI", "AVX-512", "AVX-512 VNNI") and its base clock.
    vector_isa: Fact = field(default=_NOT_SAID)
    base_clock_hz: Fact = field(default=_NOT_SAID)
    # Intel AMX with int8 and bf16 tiles (the flags amx_tile, amx_int8, amx_bf16): what
    # kt-kernel's AMXINT4/AMXINT8 methods need (engine.hardware.cpu_compute.cpu_amx reads a
    # preset's from its microarchitecture).
    amx: Fact = field(default=_NOT_SAID)

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


@dataclass(frozen=True)
class Platform:
    gpu: GpuSpec
    cpu: CpuSpec

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


def unknown_gpu(why: str) -> GpuSpec:
    """A GPU about which nothing is known, every figure saying why."""
    u = Fact.unknown(why)
    return GpuSpec(
        name="unknown GPU",
        preset_id=None,
        vram_bytes=u,
        vram_free_bytes=u,
        mem_bandwidth_bytes_per_s=u,
        pcie_gen=u,
        pcie_lanes=u,
        h2d_bytes_per_s=u,
        sm_count=u,
        pcie_gen_current=u,
        pcie_lanes_current=u,
        h2d_pageable_bytes_per_s=u,
        driver_version=u,
        cuda_version=u,
    )


NO_GPU = "none"  # --gpu none: plan for the CPU alone


def no_gpu() -> GpuSpec:
    """No GPU at all (`--gpu none`): zero VRAM, every other figure unknown, saying why."""
    why = "planned without a GPU (--gpu none)"
    return replace(unknown_gpu(why), name="no GPU", preset_id=NO_GPU, vram_bytes=Fact.assumed(0, why),
                   vram_free_bytes=Fact.assumed(0, why))


def plans_without_gpu(gpu: GpuSpec) -> bool:
    return gpu.preset_id == NO_GPU


# --- PCIe ---------------------------------------------------------------------------


def derive_h2d_bytes_per_s(pcie_gen: Fact, pcie_lanes: Fact) -> Fact:
    """Effective pinned host-to-device bandwidth from the link's generation and width.

    Per-lane payload rate after encoding times lanes times an assumed efficiency of 0.8.
    """
    if not pcie_gen.known or not pcie_lanes.known:
        return Fact.unknown("PCIe generation or width unknown, so host-to-device bandwidth cannot be derived")
    gen, lanes = pcie_gen.value, pcie_lanes.value
    if gen not in PCIE_LANE_BYTES_PER_S:
        return Fact.unknown(f"no per-lane figure for PCIe gen {gen}")
    per_lane = PCIE_LANE_BYTES_PER_S[gen]  # type: ignore[index]
    value = per_lane * float(lanes) * H2D_EFFICIENCY  # type: ignore[arg-type]
    return Fact.assumed(
        value,
        f"not measured: derived from PCIe gen{gen} x{lanes} ({per_lane / 1e9:.3f} GB/s per lane "
        f"after encoding) times an assumed efficiency of {H2D_EFFICIENCY} for pinned copies",
    )


# --- assumptions for analytic estimates ---------------------------------------------

# (most physical cores, bandwidth, memory configuration it stands for)
_CPU_BANDWIDTH_TIERS: tuple[tuple[int | None, float, str], ...] = (
    (24, 89.6e9, "2-channel DDR5-5600, a typical desktop (up to 24 cores)"),
    (64, 166.4e9, "4-channel DDR5-5200, a typical workstation (25 to 64 cores)"),
    (None, 307.2e9, "8-channel DDR5-4800, a conservative server figure (more than 64 cores)"),
)


def assumed_cpu_bandwidth_bytes_per_s(cpu: CpuSpec) -> Fact:
    """The CPU's memory bandwidth, or an assumed figure when it is unknown.

    Analytic estimates need a number; a known figure (preset, measured) is returned as
    is. Otherwise the core count picks a typical memory configuration.
    """
    if cpu.mem_bandwidth_bytes_per_s.known:
        return cpu.mem_bandwidth_bytes_per_s
    cores: int | None = None
    counted = ""
    if cpu.physical_cores.known:
        cores = int(cpu.physical_cores.value)  # type: ignore[arg-type]
        counted = f"{cores} physical cores"
    elif cpu.logical_threads.known:
        cores = max(1, int(cpu.logical_threads.value) // 2)  # type: ignore[arg-type]
        counted = f"about {cores} physical cores (half of {cpu.logical_threads.value} threads)"
    for most, value, config in _CPU_BANDWIDTH_TIERS:
        if cores is None or most is None or cores <= most:
            why = counted if cores is not None else "core count unknown"
            return Fact.assumed(
                value,
                f"memory bandwidth not measured; assumed the theoretical peak of {config}; "
                f"{why}; `cope detect` (in the app: Measure this machine) measures it",
            )
    raise AssertionError("unreachable")  # the last tier has no limit


def usable_threads(threads: int, cpu: CpuSpec) -> tuple[int, str | None]:
    """`threads` clamped to the CPU's logical threads, with the note that says so (None:
    unchanged). More threads than logical CPUs only time-slice the same cores: llama.cpp
    runs slower, never faster, so neither a price nor an exported command carries them."""
    logical = cpu.logical_threads
    if not logical.known or threads <= int(logical.value):
        return threads, None
    most = int(logical.value)
    shown = str(threads) if len(str(threads)) <= 12 else f"{str(threads)[:9]}..."
    return most, f"{shown} threads are more than the {most} logical CPUs of the {cpu.name}: priced at {most} threads"
