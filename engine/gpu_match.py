"""Which GPU preset a detected GPU is, from the name NVML or torch reports.

Detection names a card as the driver does ("NVIDIA GeForce RTX 4090", "NVIDIA H100 80GB
HBM3", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"). A preset stands for the
card only when that name is one of its `device_names` (assets/gpus.json), compared
without case, spaces or punctuation, so a "RTX 4090 Laptop GPU", a "RTX 4090 D" or a
"RTX 3080 Ti" never borrows another card's figures. Where one name covers variants
(the RTX 3060 with 12 or 8 GB, the RTX 4060 Ti and 5060 Ti with 16 or 8 GB), the memory
detection saw must be the preset's within 10%. A MIG slice is never a whole card.
"""

from __future__ import annotations

import re

from engine.platform import GpuSpec, gpu_presets

VRAM_TOLERANCE = 0.10


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


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
