"""The machine a policy runs on: GPU and CPU figures, each with its basis.

Every figure is a `Fact`: a value (or None when unknown) plus where it came from
(a preset's spec sheet, detection on this host, a measurement, or an assumption) and a
note that says how or why. Presets are read from assets/gpus.json and assets/cpus.json
and validated once, where they are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from functools import cache
from typing import Any

from engine.asset_rows import Rows as _Rows
from engine.assets_io import load_asset_json
from engine.errors import CopeInputError

BASES = ("preset", "detected", "measured", "assumed", "unknown")

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
    """One figure with its basis: preset, detected, measured, assumed or unknown."""

    value: float | int | str | None  # None when unknown
    basis: str
    note: str  # preset: the source; detected: how; assumed: why; unknown: why

    def __post_init__(self) -> None:
        if self.basis not in BASES:
            raise ValueError(f"basis {self.basis!r} not one of {BASES}")
        if (self.value is None) != (self.basis == "unknown"):
            raise ValueError("a Fact's value is None exactly when its basis is 'unknown'")

    @property
    def known(self) -> bool:
        return self.value is not None

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "basis": self.basis, "note": self.note}

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
    def assumed(cls, value: float | int | str, why: str) -> Fact:
        return cls(value, "assumed", why)

    @classmethod
    def unknown(cls, why: str) -> Fact:
        return cls(None, "unknown", why)


def _spec_to_dict(spec: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(spec):
        v = getattr(spec, f.name)
        out[f.name] = v.to_dict() if hasattr(v, "to_dict") else v
    return out


@dataclass(frozen=True)
class CudaProblem:
    """Why torch cannot use the NVIDIA GPU this machine has (probes.cuda_check)."""

    kind: str  # "cpu-build", "driver-too-old", "rocm-build", "no-torch", "hidden", "cuda-unavailable"
    message: str  # one line: what is wrong
    fix: str  # the command (or step) that fixes it

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": self.message, "fix": self.fix}


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

    def to_dict(self) -> dict[str, Any]:
        return _spec_to_dict(self)


@dataclass(frozen=True)
class CpuSpec:
    name: str
    preset_id: str | None
    physical_cores: Fact
    logical_threads: Fact
    ram_bytes: Fact
    ram_available_bytes: Fact
    mem_bandwidth_bytes_per_s: Fact
    numa_nodes: Fact

    def to_dict(self) -> dict[str, Any]:
        return _spec_to_dict(self)


@dataclass(frozen=True)
class Platform:
    gpu: GpuSpec
    cpu: CpuSpec

    def to_dict(self) -> dict[str, Any]:
        return {"gpu": self.gpu.to_dict(), "cpu": self.cpu.to_dict()}


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


# --- asset validation -------------------------------------------------------------


@cache
def gpu_presets() -> dict[str, GpuSpec]:
    """GPU presets from assets/gpus.json, by id (validated once, cached)."""
    r = _Rows(GPU_ASSET, load_asset_json(GPU_ASSET), "gpus")
    out: dict[str, GpuSpec] = {}
    for i, row_id in enumerate(r.unique_ids()):
        name = r.text(i, "name")
        r.text(i, "source")  # the row's summary; each figure cites its own source below
        vram = r.positive_int(i, "vram_bytes")
        bandwidth = r.positive_number(i, "mem_bandwidth_bytes_per_s")
        gen = r.positive_int(i, "pcie_gen")
        if gen not in PCIE_LANE_BYTES_PER_S:
            r.fail(f"{r._where(i, 'pcie_gen')}: must be one of {sorted(PCIE_LANE_BYTES_PER_S)}, found {gen}")
        lanes = r.positive_int(i, "pcie_lanes")
        if lanes not in (1, 2, 4, 8, 16):
            r.fail(f"{r._where(i, 'pcie_lanes')}: must be 1, 2, 4, 8 or 16, found {lanes}")
        sms = r.positive_int(i, "sm_count")
        cites = r.sources(i, GPU_FIGURES)
        pcie_gen = Fact.preset(gen, cites["pcie_gen"])
        pcie_lanes = Fact.preset(lanes, cites["pcie_lanes"])
        if r.has(i, "h2d_bytes_per_s"):
            h2d = Fact.measured(r.positive_number(i, "h2d_bytes_per_s"), r.text(i, "h2d_source"))
        else:
            h2d = derive_h2d_bytes_per_s(pcie_gen, pcie_lanes)
        out[row_id] = GpuSpec(
            name=name,
            preset_id=row_id,
            vram_bytes=Fact.preset(vram, cites["vram_bytes"]),
            vram_free_bytes=Fact.assumed(
                vram,
                "preset: assumed all VRAM is free; a real card loses a few hundred MiB to the "
                "driver, the CUDA context and the display",
            ),
            mem_bandwidth_bytes_per_s=Fact.preset(bandwidth, cites["mem_bandwidth_bytes_per_s"]),
            pcie_gen=pcie_gen,
            pcie_lanes=pcie_lanes,
            h2d_bytes_per_s=h2d,
            sm_count=Fact.preset(sms, cites["sm_count"]),
            device_names=r.texts(i, "device_names"),
        )
    return out


@cache
def cpu_presets() -> dict[str, CpuSpec]:
    """CPU presets (typical machines) from assets/cpus.json, by id (validated once, cached)."""
    r = _Rows(CPU_ASSET, load_asset_json(CPU_ASSET), "cpus")
    out: dict[str, CpuSpec] = {}
    for i, row_id in enumerate(r.unique_ids()):
        name = r.text(i, "name")
        source = r.text(i, "source")
        cores = r.positive_int(i, "physical_cores")
        threads = r.positive_int(i, "logical_threads")
        if threads < cores:
            r.fail(f"{r._where(i, 'logical_threads')}: {threads} is fewer than physical_cores {cores}")
        ram = r.positive_int(i, "ram_bytes")
        bandwidth = r.positive_number(i, "mem_bandwidth_bytes_per_s")
        memory = r.text(i, "memory")
        numa = r.positive_int(i, "numa_nodes")
        ram_note = f"typical RAM for this preset's class of machine, not a spec-sheet figure ({memory})"
        out[row_id] = CpuSpec(
            name=name,
            preset_id=row_id,
            physical_cores=Fact.preset(cores, source),
            logical_threads=Fact.preset(threads, source),
            ram_bytes=Fact.preset(ram, ram_note),
            ram_available_bytes=Fact.assumed(
                ram, "preset: assumed all RAM is available; a real machine keeps some for the OS and other programs"
            ),
            mem_bandwidth_bytes_per_s=Fact.preset(
                bandwidth, f"theoretical peak of {memory}; sustained bandwidth is lower ({source})"
            ),
            numa_nodes=Fact.preset(numa, f"{memory} ({source})"),
        )
    return out


# --- lookup by name -----------------------------------------------------------------

_VENDOR_PREFIX = re.compile(r"^(nvidia|geforce|amd|intel)+")


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _without_vendor(squashed: str) -> str:
    return _VENDOR_PREFIX.sub("", squashed) or squashed


def _aliases(preset_id: str, name: str) -> set[str]:
    """The spellings that find a preset: id, display name, and shortened forms."""
    ids = {preset_id}
    names = {name}
    # Without the memory size ("rtx-3060" for "rtx-3060-12gb"); an alias that several
    # presets share ("a100") is reported as ambiguous.
    ids |= {re.sub(r"(?i)[\s_-]*\d+\s*gb\b", "", x) for x in ids}
    names |= {re.sub(r"(?i)[\s_-]*\d+\s*gb\b", "", x) for x in names}
    out = {_squash(x) for x in ids}
    out |= {_without_vendor(_squash(x)) for x in names}  # vendor words only off names
    out |= {a.replace("pcie", "").replace("sxm", "") for a in out}  # "h100" is either form factor
    out |= {re.sub(r"^(ryzen(?=threadripper)|core(?=i\d))", "", a) for a in out}
    # The model number alone: "4090", "7950x", "13900k", "9654".
    out |= {re.sub(r"^(rtx|ryzenthreadripper|threadripper|ryzen\d|corei\d|epyc)", "", a) for a in out}
    return {a for a in out if a}


def _lookup(kind: str, asset: str, table: dict[str, Any], query: str) -> Any:
    key = query.strip().lower()
    if key in table:
        return table[key]
    hits: dict[str, set[str]] = {}
    for preset_id, spec in table.items():
        for alias in _aliases(preset_id, spec.name):
            hits.setdefault(alias, set()).add(preset_id)
    squashed = _squash(query)
    tries = (squashed, _without_vendor(squashed))
    tries += tuple(t.replace("pcie", "") for t in tries)  # "A100-PCIE-40GB" as nvidia-smi says
    found: list[str] = []
    for t in tries:
        if t in hits:
            found = sorted(hits[t])
            break
    if len(found) == 1:
        return table[found[0]]
    if len(found) > 1:
        raise CopeInputError(f"{kind} preset {query!r} is ambiguous: it could be {', '.join(found)}")
    known = ", ".join(table)
    raise CopeInputError(f"unknown {kind} preset {query!r}; known: {known} (assets/{asset})")


def get_gpu_preset(name: str) -> GpuSpec:
    """A GPU preset by id or name: "rtx-4090", "RTX 4090", "rtx4090", "4090"."""
    return _lookup("GPU", GPU_ASSET, gpu_presets(), name)


def get_cpu_preset(name: str) -> CpuSpec:
    """A CPU preset by id or name: "desktop-ddr5", "AMD Ryzen 9 7950X", "7950x"."""
    return _lookup("CPU", CPU_ASSET, cpu_presets(), name)


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
                f"{why}; run the probes to measure it",
            )
    raise AssertionError("unreachable")  # the last tier has no limit


def platform_from(
    gpu_preset: str | None,
    cpu_preset: str | None,
    detected_cpu: CpuSpec | None,
    detected_gpu: GpuSpec | None = None,
) -> Platform:
    """The platform to plan for.

    CPU: the named preset if given, else the detected CPU (an unknown memory bandwidth
    filled by `assumed_cpu_bandwidth_bytes_per_s`), else the "desktop-ddr5" preset.
    GPU: the named preset if given, else the detected GPU, else an unknown GPU.
    """
    if gpu_preset is not None:
        gpu = get_gpu_preset(gpu_preset)
    elif detected_gpu is not None:
        gpu = detected_gpu
    else:
        gpu = unknown_gpu("no GPU preset chosen and no GPU detected")

    if cpu_preset is not None:
        cpu = get_cpu_preset(cpu_preset)
    elif detected_cpu is not None:
        cpu = replace(detected_cpu, mem_bandwidth_bytes_per_s=assumed_cpu_bandwidth_bytes_per_s(detected_cpu))
    else:
        cpu = get_cpu_preset(DEFAULT_CPU_PRESET)
    return Platform(gpu=gpu, cpu=cpu)
