"""Presets from the spec sheets: the GPUs of assets/gpus.json, found by name, and the
platform to plan for from the presets a person named and what this machine is.

The CPU presets (assets/cpus.json) are engine.hardware.cpu_presets'; both build the
types of engine.hardware.platform.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import cache

from engine.core.assets_io import load_asset_json
from engine.core.errors import CopeInputError
from engine.hardware.asset_rows import Rows
from engine.hardware.cpu_presets import get_cpu_preset
from engine.hardware.gpu_backends import BACKENDS
from engine.hardware.gpu_set import gpu_choice
from engine.hardware.platform import (
    DEFAULT_CPU_PRESET,
    GPU_ASSET,
    GPU_FIGURES,
    PCIE_LANE_BYTES_PER_S,
    CpuSpec,
    Fact,
    GpuSpec,
    Platform,
    assumed_cpu_bandwidth_bytes_per_s,
    derive_h2d_bytes_per_s,
    unknown_gpu,
)
from engine.hardware.preset_names import find_preset, match_preset


# --- asset validation -------------------------------------------------------------


@cache
def gpu_presets() -> dict[str, GpuSpec]:
    """GPU presets from assets/gpus.json, by id (validated once, cached)."""
    r = Rows(GPU_ASSET, load_asset_json(GPU_ASSET), "gpus")
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
            **_vendor_fields(r, i),
        )
    return out


def _vendor_fields(r: Rows, i: int) -> dict[str, object]:
    """vendor, backend and backends of row `i` (NVIDIA and CUDA where the row says none)."""
    vendor = r.text(i, "vendor") if r.has(i, "vendor") else "NVIDIA"
    backends = r.texts(i, "backends") if r.has(i, "backends") else ("CUDA", "Vulkan")
    for name in backends:
        if name not in BACKENDS:
            r.fail(f"{r._where(i, 'backends')}: {name!r} is not one of {', '.join(BACKENDS)}")
    return {"vendor": vendor, "backend": backends[0], "backends": backends}


# --- lookup by name (engine.hardware.preset_names) -----------------------------------------


_SIZE = re.compile(r"(?i)[\s_-]*\d+\s*gb\b")


def get_gpu_preset(name: str) -> GpuSpec:
    """A GPU preset by id or name: "rtx-4090", "RTX 4090", "rtx4090", "4090"; several cards
    as "rtx-3090,rtx-3090" or "2x rtx-3090" (engine.hardware.gpu_set), a backend after '@'
    ("rx-7900-xtx@vulkan")."""
    return gpu_choice(name, _one_gpu_preset)


def _one_gpu_preset(name: str) -> GpuSpec:
    table = gpu_presets()
    names = {k: v.name for k, v in table.items()}
    # The name with the card's memory, as people write it: "RTX 4090 24GB", "RTX 5070 (12GB)".
    sized = {k: [f"{_SIZE.sub('', v.name)} {int(v.vram_bytes.value) // 2**30}GB"]  # type: ignore[arg-type]
             for k, v in table.items()}
    found = match_preset(names, name, more_names=sized)
    if not _SIZE.search(name) and found and all(_SIZE.search(pid) for pid in found):
        # An id carries its memory only where the card comes in other sizes (docs/hardware.md):
        # the bare name could be any of them, or a size without a preset.
        raise CopeInputError(f"--gpu {name!r}: the {_SIZE.sub('', table[found[0]].name)} comes in more than "
                             f"one memory size; name it with its memory, e.g. {' or '.join(found)} (a size "
                             "without a preset has none: its memory and bandwidth differ)")
    return table[find_preset("GPU", GPU_ASSET, names, name, more_names=sized)]


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
