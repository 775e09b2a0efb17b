"""Formatting of figures with their basis (detected / measured / preset / given / assumed)."""

from __future__ import annotations

from rich.text import Text

from engine.hardware.memory import GIB

BASIS_STYLE = {
    "measured": "bold green",
    "detected": "cyan",
    "preset": "yellow",
    "given": "bold",
    "assumed": "magenta",
    "unknown": "dim",
}


def fmt_value(name: str, value) -> str:  # type: ignore[no-untyped-def]
    if value is None:
        return "unknown"
    if name.endswith("bytes_per_s"):
        return f"{float(value) / 1e9:.1f} GB/s"
    if name.endswith("bytes"):
        return f"{float(value) / GIB:.1f} GiB"
    return str(value)


def basis_text(basis: str) -> Text:
    return Text(basis, style=BASIS_STYLE.get(basis, ""))


LABELS = {
    "vram_bytes": "VRAM total",
    "vram_free_bytes": "VRAM free",
    "mem_bandwidth_bytes_per_s": "memory bandwidth",
    "pcie_gen": "PCIe generation",
    "pcie_lanes": "PCIe lanes",
    "h2d_bytes_per_s": "host-to-GPU (pinned)",
    "sm_count": "SMs",
    "physical_cores": "physical cores",
    "logical_threads": "threads",
    "ram_bytes": "RAM",
    "ram_available_bytes": "RAM available",
}


def fact_rows(spec, fields: tuple[str, ...]):  # type: ignore[no-untyped-def]
    """(label, value, basis, note) of each Fact field of a GpuSpec or CpuSpec."""
    for name in fields:
        f = getattr(spec, name, None)
        if f is None:
            continue
        yield LABELS.get(name, name.replace("_", " ")), fmt_value(name, f.value), f.basis, f.note


GPU_FIELDS = ("vram_bytes", "vram_free_bytes", "mem_bandwidth_bytes_per_s", "pcie_gen", "pcie_lanes",
              "h2d_bytes_per_s", "sm_count")
CPU_FIELDS = ("physical_cores", "logical_threads", "ram_bytes", "ram_available_bytes", "mem_bandwidth_bytes_per_s")
