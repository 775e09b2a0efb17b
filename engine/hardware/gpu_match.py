"""Which GPU preset a detected GPU is, from the name NVML or torch reports.

Detection names a card as the driver does ("NVIDIA GeForce RTX 4090", "NVIDIA H100 80GB
HBM3", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"). A preset stands for the
card only when that name is one of its `device_names` (assets/gpus.json), compared
without case, spaces or punctuation, so a "RTX 4090 Laptop GPU", a "RTX 4090 D" or a
"RTX 3080 Ti" never borrows another card's figures. Where one name covers variants
(the RTX 3060 with 12 or 8 GB, the RTX 4060 Ti and 5060 Ti with 16 or 8 GB), the memory
detection saw must be the preset's within 10%. A MIG slice is never a whole card. A
leading "NVIDIA" is optional (older drivers left it out of GeForce names).
`with_preset_figures` fills what detection could not get from the matched preset.
"""

from __future__ import annotations

import re
from dataclasses import replace

from engine.hardware.platform import Fact, GpuSpec, derive_h2d_bytes_per_s
from engine.hardware.presets import gpu_presets

VRAM_TOLERANCE = 0.10


def _key(name: str) -> str:
    # Drivers before 2021 named GeForce cards without the vendor ("GeForce RTX 2080 Ti").
    return re.sub(r"^nvidia", "", re.sub(r"[^a-z0-9]", "", name.lower()))


def preset_for_device(name: str, vram_bytes: int | float | None = None) -> GpuSpec | None:
    """The preset of the GPU that reports `name` (and, when known, `vram_bytes` of
    memory), or None when no preset is that card."""
    if not name or re.search(r"\bMIG\b", name):
        return None
    wanted = _key(name)
    for spec in gpu_presets().values():
        if wanted not in {_key(n) for n in spec.device_names}:
            continue
        if vram_bytes is not None and spec.vram_bytes.known:
            preset = float(spec.vram_bytes.value)  # type: ignore[arg-type]
            if abs(float(vram_bytes) - preset) > VRAM_TOLERANCE * preset:
                continue
        return spec
    return None


def with_preset_figures(g: GpuSpec) -> GpuSpec:
    """`g` (a detected GPU) with the figures detection could not get (memory bandwidth,
    SM count, PCIe link) from the preset of the same card, basis "preset", and the
    preset's id in `matched_preset_id`."""
    preset = preset_for_device(g.name, g.vram_bytes.value if g.vram_bytes.known else None)  # type: ignore[arg-type]
    if preset is None:
        return g
    changes: dict[str, object] = {"matched_preset_id": preset.preset_id}
    for name in ("mem_bandwidth_bytes_per_s", "sm_count", "pcie_gen", "pcie_lanes"):
        mine, theirs = getattr(g, name), getattr(preset, name)
        if not mine.known and theirs.known:
            changes[name] = Fact.preset(theirs.value, f"spec sheet (preset {preset.preset_id}): {theirs.note}; "  # type: ignore[arg-type]
                                        f"not detected: {mine.note}")
    if not g.h2d_bytes_per_s.known and ("pcie_gen" in changes or "pcie_lanes" in changes):
        changes["h2d_bytes_per_s"] = derive_h2d_bytes_per_s(changes.get("pcie_gen", g.pcie_gen),
                                                            changes.get("pcie_lanes", g.pcie_lanes))
    return replace(g, **changes)
