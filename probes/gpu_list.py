"""Every GPU this machine shows, each with its memory and its PCIe link; never raises.

- NVIDIA: every NVML device (probes.gpu.detect_gpu through NVML alone, one per index), its
  PCI address from nvmlDeviceGetPciInfo.
- AMD: the DRM devices of vendor 0x1002 under /sys/class/drm/card*/device (amdgpu's
  mem_info_vram_total and mem_info_vram_used, the PCI core's max/current_link_speed and
  _width, product_name where the driver has one), named by `amd-smi static --json` or
  `rocm-smi --showproductname --json` where either is installed.
- Intel (vendor 0x8086) display devices: the PCI link from sysfs; their memory is not read
  (neither i915 nor xe keeps a mem_info_vram_total), and that is said.

Two cards share a PCIe switch when the paths of their PCI devices under /sys/devices have
a bridge in common below the root port; `shared_links` says so where the system does.
Everything reads from `sys_root` and calls `run` so tests give a fake tree and fake tool
output.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from engine.core.records import record_dict
from engine.hardware.gpu_match import preset_for_device, with_preset_figures
from engine.hardware.platform import Fact, GpuSpec, derive_h2d_bytes_per_s, unknown_gpu
from probes.gpu import UNLOADED, detect_gpu, import_nvml

VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}
# PCIe transfer rate -> generation (the PCI core writes "16.0 GT/s PCIe").
_GEN_OF_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_DISPLAY_CLASS = ("0x0300", "0x0302", "0x0380")  # VGA, 3D controller, other display
Run = Callable[[list[str]], "str | None"]
_IMPORT = object()  # detect_gpus(nvml=...): import pynvml (None: no NVML)


@dataclass(frozen=True)
class GpuList:
    gpus: tuple[GpuSpec, ...]
    notes: tuple[str, ...]  # what could not be read, and why
    shared_links: tuple[str, ...] = ()  # "CUDA0 and CUDA1 are behind the same PCIe switch (0000:02:00.0)"

    def to_dict(self) -> dict[str, Any]:
        return record_dict(self)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None


def pcie_gen(speed: str | None) -> int | None:
    """"16.0 GT/s PCIe" -> 4; None when unreadable."""
    m = re.match(r"\s*([\d.]+)\s*GT/s", speed or "")
    return _GEN_OF_GTS.get(float(m.group(1))) if m else None


def _run_tool(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _link(dev: Path, what: str) -> tuple[Fact, Fact, Fact, Fact]:
    """(gen max, lanes max, gen now, lanes now) from a PCI device directory."""
    def fact(file: str, convert: Callable[[str | None], int | None], label: str) -> Fact:
        raw = _read(dev / file)
        value = convert(raw) if raw is not None else None
        if value is None:
            return Fact.unknown(f"{label}: {file} not readable in sysfs for {what}")
        return Fact.detected(value, f"sysfs {file} ({raw})")

    def width(raw: str | None) -> int | None:
        return int(raw) if raw and raw.isdigit() and int(raw) > 0 else None

    return (fact("max_link_speed", pcie_gen, "PCIe generation"), fact("max_link_width", width, "PCIe width"),
            fact("current_link_speed", pcie_gen, "PCIe generation now"),
            fact("current_link_width", width, "PCIe width now"))


def amd_names(run: Run) -> dict[str, str]:
    """PCI address -> marketing name from amd-smi's or rocm-smi's JSON ({} when neither answers)."""
    out: dict[str, str] = {}
    text = run(["amd-smi", "static", "--asic", "--bus", "--json"])
    try:
        data = json.loads(text) if text else None
    except ValueError:
        data = None
    rows = data if isinstance(data, list) else (data or {}).get("gpu_data", []) if isinstance(data, dict) else []
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        bdf = str((row.get("bus") or {}).get("bdf", "")).lower()
        name = (row.get("asic") or {}).get("market_name")
        if bdf and isinstance(name, str) and name.strip():
            out[bdf] = name.strip()
    if out:
        return out
    text = run(["rocm-smi", "--showproductname", "--showbus", "--json"])
    try:
        data = json.loads(text) if text else None
    except ValueError:
        data = None
    for card in (data or {}).values() if isinstance(data, dict) else []:
        if not isinstance(card, dict):
            continue
        keys = {k.lower(): v for k, v in card.items()}
        bdf = str(keys.get("pci bus", "")).lower()
        name = keys.get("card series") or keys.get("card model")
        if bdf and isinstance(name, str) and name.strip():
            out[bdf] = name.strip()
    return out


def sysfs_gpus(sys_root: Path = Path("/sys"), run: Run = _run_tool,
               skip_vendors: tuple[str, ...] = ("NVIDIA",)) -> tuple[list[GpuSpec], list[str]]:
    """The AMD and Intel GPUs of /sys/class/drm (NVIDIA's come from NVML), and notes."""
    gpus: list[GpuSpec] = []
    notes: list[str] = []
    drm = sys_root / "class" / "drm"
    seen: set[str] = set()
    names: dict[str, str] | None = None
    for card in sorted(drm.glob("card[0-9]*"), key=lambda p: int(re.sub(r"\D", "", p.name) or 0)):
        if not re.fullmatch(r"card\d+", card.name):
            continue  # connectors: card0-DP-1
        dev = card / "device"
        vendor = VENDORS.get((_read(dev / "vendor") or "").lower())
        if vendor is None or vendor in skip_vendors:
            continue
        cls = (_read(dev / "class") or "")[:6]
        if cls and cls not in _DISPLAY_CLASS:
            continue
        address = os.path.basename(os.path.realpath(dev))
        if address in seen:
            continue
        seen.add(address)
        pci_id = _read(dev / "device") or "?"
        if vendor == "AMD" and names is None:
            names = amd_names(run)
        name = (names or {}).get(address.lower()) or _read(dev / "product_name") or f"{vendor} GPU (PCI device {pci_id})"
        what = f"{card.name} ({address})"
        total, used = _read(dev / "mem_info_vram_total"), _read(dev / "mem_info_vram_used")
        if total and total.isdigit():
            vram = Fact.detected(int(total), "sysfs mem_info_vram_total (amdgpu)")
            free = (Fact.detected(int(total) - int(used), "sysfs mem_info_vram_total less mem_info_vram_used")
                    if used and used.isdigit() else Fact.unknown(f"mem_info_vram_used not readable for {what}"))
        else:
            why = (f"memory not read for {what}: the {vendor} driver keeps no mem_info_vram_total in sysfs"
                   if vendor != "AMD" else f"mem_info_vram_total not readable for {what}")
            vram = free = Fact.unknown(why)
            notes.append(why)
        gen, lanes, gen_now, lanes_now = _link(dev, what)
        bw = Fact.unknown(f"memory bandwidth of the {name}: not read by sysfs; from the preset of the same card "
                          "where there is one")
        spec = replace(
            unknown_gpu(f"not read for {what}"), name=name, vram_bytes=vram, vram_free_bytes=free,
            mem_bandwidth_bytes_per_s=bw, pcie_gen=gen, pcie_lanes=lanes,
            h2d_bytes_per_s=derive_h2d_bytes_per_s(gen, lanes), pcie_gen_current=gen_now,
            pcie_lanes_current=lanes_now, vendor=vendor, pci_address=address,
            backend="ROCm" if vendor == "AMD" else "SYCL",
            backends=("ROCm", "Vulkan") if vendor == "AMD" else ("SYCL", "Vulkan"))
        matched = with_preset_figures(spec)
        preset = preset_for_device(name, vram.value if vram.known else None)  # type: ignore[arg-type]
        gpus.append(replace(matched, backend=preset.backend, backends=preset.backends) if preset else matched)
    if not drm.is_dir():
        notes.append(f"{drm} not readable: AMD and Intel GPUs not looked for")
    return gpus, notes


def nvml_gpus(nvml: Any, detect: Callable[[int], GpuSpec]) -> tuple[list[GpuSpec], list[str]]:
    """Every NVML device, each through `detect(index)`, with its PCI address."""
    if nvml is None:
        return [], ["NVML not available: NVIDIA GPUs not listed"]
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return [], [f"NVML could not start ({type(exc).__name__}): no NVIDIA driver"]
    try:
        count = int(nvml.nvmlDeviceGetCount())
        addresses = []
        for i in range(count):
            try:
                bus = nvml.nvmlDeviceGetPciInfo(nvml.nvmlDeviceGetHandleByIndex(i)).busId
                addresses.append(_text(bus).lower()[-12:])  # "00000000:01:00.0" -> "0000:01:00.0"
            except Exception:
                addresses.append(None)
    except Exception as exc:
        return [], [f"NVML device count failed ({type(exc).__name__})"]
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return [replace(detect(i), pci_address=addresses[i]) for i in range(count)], []


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def shared_links(gpus: list[GpuSpec], sys_root: Path = Path("/sys")) -> list[str]:
    """Cards behind the same PCIe switch: a bridge below the root port in both their paths."""
    chains: dict[int, list[str]] = {}
    for i, g in enumerate(gpus):
        if not g.pci_address:
            continue
        real = os.path.realpath(sys_root / "bus" / "pci" / "devices" / g.pci_address)
        parts = [p for p in real.split(os.sep) if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d", p)]
        if len(parts) >= 2:
            chains[i] = parts[1:-1]  # below the root port, above the card
    out = []
    keys = sorted(chains)
    for a_i, a in enumerate(keys):
        for b in keys[a_i + 1:]:
            common = [x for x, y in zip(chains[a], chains[b]) if x == y]
            if common:
                out.append(f"GPU {a} ({gpus[a].pci_address}) and GPU {b} ({gpus[b].pci_address}) share the PCIe "
                           f"switch at {common[-1]}: their host copies share its uplink")
    return out


def detect_gpus(*, nvml: Any = _IMPORT, sys_root: Path = Path("/sys"), run: Run = _run_tool,
                detect: Callable[[int], GpuSpec] | None = None) -> GpuList:
    """Every GPU of the machine (NVIDIA first, by NVML index; then AMD and Intel by DRM card)."""
    try:
        if detect is None:
            def detect(i: int) -> GpuSpec:
                return detect_gpu(i, torch=UNLOADED)
        if nvml is _IMPORT:
            nvml, _ = import_nvml()
        nv, nv_notes = nvml_gpus(nvml, detect)
        other, other_notes = sysfs_gpus(sys_root, run)
        gpus = nv + other
        return GpuList(tuple(gpus), tuple(nv_notes + other_notes), tuple(shared_links(gpus, sys_root)))
    except Exception as exc:  # never raise: detection is advice
        return GpuList((), (f"GPU listing failed ({type(exc).__name__}: {exc})",))
