"""Detect this machine's GPU through torch.cuda and NVML (the `pynvml` module of
`nvidia-ml-py`), both imported lazily.

torch gives the name, total memory, SM count, the memory clock and bus width (a
theoretical peak bandwidth) and the CUDA runtime version; NVML gives free memory, the
PCIe link (generation and width, the most the link can run at and its state now) and the
driver version. Either may be missing: a machine without a GPU, a CPU-only torch build,
no NVIDIA driver, an NVML call a device does not support. `detect_gpu` never raises;
every figure it cannot get is unknown with the reason.

The mapping takes the module objects as parameters (`torch_gpu_info`, `nvml_gpu_info`,
`gpu_spec_from`), so tests can feed fake torch and NVML objects.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from engine.hardware.gpu_match import with_preset_figures
from engine.hardware.platform import Fact, GpuSpec, derive_h2d_bytes_per_s, unknown_gpu
from probes.cuda_check import cuda_facts_of, diagnose, nvidia_device_files

_IMPORT = object()  # sentinel: import the real module
UNLOADED = object()  # sentinel for `torch`: do not load it; read its build from the package files
NO_GPU_NAME = "no GPU detected"


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def import_torch() -> tuple[Any, str | None]:
    """(torch, None), or (None, why it could not be imported)."""
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install (OSError on a missing library)
        return None, f"torch could not be imported ({_why(exc)})"
    return torch, None


def import_nvml() -> tuple[Any, str | None]:
    """(pynvml, None), or (None, why it could not be imported)."""
    try:
        import pynvml
    except Exception as exc:
        return None, f"NVML Python bindings could not be imported ({_why(exc)}); pip install nvidia-ml-py"
    return pynvml, None


# --- torch ------------------------------------------------------------------------


@dataclass(frozen=True)
class TorchGpuInfo:
    """What torch.cuda says about one device; every field may be unknown."""

    available: bool
    why: str  # when not available: the reason; else how the device was chosen
    name: Fact
    vram_bytes: Fact
    vram_free_bytes: Fact
    sm_count: Fact
    mem_bandwidth_bytes_per_s: Fact  # theoretical peak from memory clock and bus width
    cuda_version: Fact
    uuid: str | None = None


def _torch_cuda_version(torch: Any) -> Fact:
    version = getattr(torch, "version", None)
    cuda = getattr(version, "cuda", None)
    if cuda:
        return Fact.detected(str(cuda), "torch.version.cuda: the CUDA runtime this torch was built with")
    hip = getattr(version, "hip", None)
    if hip:
        return Fact.unknown(f"torch is a ROCm build (HIP {hip}), not CUDA")
    return Fact.unknown(f"torch {getattr(torch, '__version__', '?')} is a CPU-only build (torch.version.cuda is None)")


def torch_gpu_info(torch: Any, index: int = 0) -> TorchGpuInfo:
    """Device `index` as torch.cuda sees it; unavailable (with the reason) instead of raising."""
    cuda_version = _torch_cuda_version(torch)

    def none(why: str) -> TorchGpuInfo:
        u = Fact.unknown(why)
        return TorchGpuInfo(False, why, u, u, u, u, u, cuda_version)

    if torch is None:
        return none("torch is not available")
    cuda = getattr(torch, "cuda", None)
    if cuda is None:
        return none("this torch has no torch.cuda module")
    try:
        available = bool(cuda.is_available())
    except Exception as exc:
        return none(f"torch.cuda.is_available() failed ({_why(exc)})")
    if not available:
        if not cuda_version.known:
            why = f"no CUDA through torch: {cuda_version.note}"
        else:
            why = (f"torch.cuda.is_available() is False (torch built for CUDA {cuda_version.value}): "
                   "no NVIDIA GPU, no working driver, or none visible")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            why += f"; CUDA_VISIBLE_DEVICES={visible!r}"
        return none(why)
    try:
        count = int(cuda.device_count())
    except Exception as exc:
        return none(f"torch.cuda.device_count() failed ({_why(exc)})")
    if count <= 0:
        return none("torch.cuda reports no CUDA devices")
    if not 0 <= index < count:
        return none(f"CUDA device {index} asked for, but torch.cuda sees only {count} (0..{count - 1})")
    try:
        props = cuda.get_device_properties(index)
    except Exception as exc:
        return none(f"torch.cuda.get_device_properties({index}) failed ({_why(exc)})")

    how = f"torch.cuda.get_device_properties({index})"
    which = f"CUDA device {index} of {count}"
    name_value = getattr(props, "name", None)
    name = Fact.detected(str(name_value), how) if name_value else Fact.unknown(f"{how} gave no name")
    total = getattr(props, "total_memory", None)
    vram = Fact.detected(int(total), f"{how}.total_memory") if total else Fact.unknown(f"{how} gave no total memory")
    sms = getattr(props, "multi_processor_count", None)
    sm = Fact.detected(int(sms), f"{how}.multi_processor_count") if sms else Fact.unknown(f"{how} gave no SM count")

    clock_khz = getattr(props, "memory_clock_rate", None)
    bus_bits = getattr(props, "memory_bus_width", None)
    if clock_khz and bus_bits:
        peak = 2.0 * float(clock_khz) * 1e3 * float(bus_bits) / 8.0
        bandwidth = Fact.detected(
            peak,
            f"theoretical peak from {how}: 2 x memory clock {float(clock_khz) / 1e3:.0f} MHz x "
            f"{int(bus_bits)}-bit bus / 8; sustained bandwidth is lower (measure it)",
        )
    else:
        # Absent on some current builds too (torch 2.11 on CUDA 13): say what is missing
        # and what stands in, not a guess at the cause.
        missing = [attr for attr, v in (("memory_clock_rate", clock_khz), ("memory_bus_width", bus_bits)) if not v]
        bandwidth = Fact.unknown(
            f"{how} has no {' and no '.join(missing)} (torch {getattr(torch, '__version__', '?')}, CUDA "
            f"{cuda_version.value if cuda_version.known else '?'}): the theoretical peak is missing; the measured "
            "bandwidth is used instead (`cope detect` measures it)")

    try:
        free, _total = cuda.mem_get_info(index)
        free_fact = Fact.detected(
            int(free), f"torch.cuda.mem_get_info({index}), after this process's own CUDA context took its share"
        )
    except Exception as exc:
        free_fact = Fact.unknown(f"torch.cuda.mem_get_info({index}) failed ({_why(exc)})")

    uuid = getattr(props, "uuid", None)
    return TorchGpuInfo(True, which, name, vram, free_fact, sm, bandwidth, cuda_version,
                        uuid=str(uuid) if uuid else None)


# --- NVML -------------------------------------------------------------------------


@dataclass(frozen=True)
class NvmlGpuInfo:
    """What NVML says about one device; every field may be unknown."""

    available: bool
    why: str  # when not available: the reason; else how the device was matched
    name: Fact
    vram_bytes: Fact
    vram_free_bytes: Fact
    pcie_gen_max: Fact
    pcie_lanes_max: Fact
    pcie_gen_current: Fact
    pcie_lanes_current: Fact
    driver_version: Fact
    cuda_driver_version: Fact  # the highest CUDA version the driver supports
    notes: tuple[str, ...] = field(default=())


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def nvml_gpu_info(nvml: Any, index: int = 0, uuid: str | None = None) -> NvmlGpuInfo:
    """Device `index` (or the one with this CUDA `uuid`) as NVML sees it; never raises.

    Each NVML call that fails (an NVMLError such as NotSupported, or anything else) makes
    only its own figure unknown, with the error as the reason.
    """

    def none(why: str) -> NvmlGpuInfo:
        u = Fact.unknown(why)
        return NvmlGpuInfo(False, why, u, u, u, u, u, u, u, u, u)

    if nvml is None:
        return none("NVML is not available")
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return none(f"NVML could not start ({_why(exc)}): no NVIDIA driver, or the driver's libnvidia-ml is missing")
    try:
        return _nvml_read(nvml, index, uuid, none)
    except Exception as exc:  # defensive: the reading itself guards each call
        return none(f"NVML failed ({_why(exc)})")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _nvml_read(nvml: Any, index: int, uuid: str | None, none: Any) -> NvmlGpuInfo:
    notes: list[str] = []

    def call(label: str, fn: str, *args: Any) -> tuple[Any, str | None]:
        f = getattr(nvml, fn, None)
        if f is None:
            return None, f"{label}: this pynvml has no {fn}"
        try:
            return f(*args), None
        except Exception as exc:
            return None, f"{label}: {fn} failed ({_why(exc)})"

    handle = None
    how = ""
    link = None  # the handle PCIe figures come from: a MIG slice's parent GPU
    if uuid:
        # torch gives the bare UUID; NVML names a whole GPU "GPU-..." and a MIG slice "MIG-...".
        tries = [uuid] if uuid.startswith(("GPU-", "MIG-")) else [f"GPU-{uuid}", f"MIG-{uuid}"]
        errors = []
        for nvml_uuid in tries:
            handle, err = call("device", "nvmlDeviceGetHandleByUUID", nvml_uuid)
            if handle is not None:
                break
            errors.append(err)
        if handle is not None:
            how = f"NVML device matched to CUDA device {index} by UUID"
            mig, _ = call("MIG", "nvmlDeviceIsMigDeviceHandle", handle)
            if mig:
                link, err = call("MIG parent", "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle)
                parent, _ = call("MIG parent name", "nvmlDeviceGetName", link) if link is not None else (None, None)
                how = f"NVML MIG instance matched to CUDA device {index} by UUID" + (
                    f", a slice of {_text(parent)}" if parent else "")
                if link is None:
                    notes.append(f"{err}; PCIe figures unknown for this MIG instance")
        elif all("not found" in str(e).lower() for e in errors):
            # Not NVML's device `index` instead: for a MIG slice that is its parent GPU,
            # whose memory and name would be wrong.
            return none(f"NVML has no device with the UUID CUDA device {index} reports ({'; '.join(errors)})")
        else:
            notes.append(f"{errors[-1]}; fell back to NVML index {index}")
    if handle is None:
        count, err = call("device count", "nvmlDeviceGetCount")
        if err is None and count is not None and int(count) <= index:
            return none(f"NVML sees {int(count)} device(s); no device {index}")
        handle, err = call("device", "nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            return none(f"NVML could not open device {index} ({err})")
        how = f"NVML device {index}" + (f" of {int(count)}" if count is not None else "")
        if uuid is None:
            how += " (NVML order; CUDA_VISIBLE_DEVICES or CUDA_DEVICE_ORDER may number devices differently)"

    def fact(label: str, fn: str, *args: Any, convert: Any = int) -> Fact:
        value, err = call(label, fn, *args)
        if err is not None:
            return Fact.unknown(err)
        if value is None or value == "":
            return Fact.unknown(f"{label}: {fn} returned nothing")
        return Fact.detected(convert(value), fn)

    name = fact("name", "nvmlDeviceGetName", handle, convert=_text)
    mem, err = call("memory", "nvmlDeviceGetMemoryInfo", handle)
    if err is None and mem is not None:
        vram = Fact.detected(int(mem.total), "nvmlDeviceGetMemoryInfo total")
        free = Fact.detected(int(mem.free), "nvmlDeviceGetMemoryInfo free, as the driver reports it now")
    else:
        vram = free = Fact.unknown(err or "memory: nvmlDeviceGetMemoryInfo returned nothing")

    pcie = link if link is not None else handle
    gen_max = fact("PCIe generation", "nvmlDeviceGetMaxPcieLinkGeneration", pcie)
    lanes_max = fact("PCIe width", "nvmlDeviceGetMaxPcieLinkWidth", pcie)
    gen_now = fact("PCIe generation now", "nvmlDeviceGetCurrPcieLinkGeneration", pcie)
    lanes_now = fact("PCIe width now", "nvmlDeviceGetCurrPcieLinkWidth", pcie)
    if gen_max.known:
        gen_max = Fact.detected(gen_max.value, "nvmlDeviceGetMaxPcieLinkGeneration: the most this device "
                                "and this system's slot allow")  # type: ignore[arg-type]
    if lanes_max.known:
        lanes_max = Fact.detected(lanes_max.value, "nvmlDeviceGetMaxPcieLinkWidth: the most this device "
                                  "and this system's slot allow")  # type: ignore[arg-type]
    if gen_now.known:
        gen_now = Fact.detected(gen_now.value, "nvmlDeviceGetCurrPcieLinkGeneration: the link now; it drops "
                                "while the GPU idles (power saving)")  # type: ignore[arg-type]
    if lanes_now.known:
        lanes_now = Fact.detected(lanes_now.value, "nvmlDeviceGetCurrPcieLinkWidth: the link now")  # type: ignore[arg-type]

    driver = fact("driver version", "nvmlSystemGetDriverVersion", convert=_text)
    cuda_int, err = call("CUDA driver version", "nvmlSystemGetCudaDriverVersion")
    if err is None and cuda_int:
        v = int(cuda_int)
        cuda_driver = Fact.detected(f"{v // 1000}.{(v % 1000) // 10}", "nvmlSystemGetCudaDriverVersion")
    else:
        cuda_driver = Fact.unknown(err or "CUDA driver version: nvmlSystemGetCudaDriverVersion returned nothing")

    return NvmlGpuInfo(True, how, name, vram, free, gen_max, lanes_max, gen_now, lanes_now, driver, cuda_driver,
                       notes=tuple(notes))


# --- merge ------------------------------------------------------------------------


def _first_known(*facts: Fact) -> Fact:
    for f in facts:
        if f.known:
            return f
    reasons = "; ".join(dict.fromkeys(f.note for f in facts))
    return Fact.unknown(reasons)


def gpu_spec_from(t: TorchGpuInfo, n: NvmlGpuInfo) -> GpuSpec:
    """One GpuSpec from what torch and NVML said; each figure from the better source."""
    if not t.available and not n.available:
        why = f"no GPU detected: {t.why}; {n.why}"
        u = Fact.unknown(why)
        return GpuSpec(
            name=NO_GPU_NAME, preset_id=None, vram_bytes=u, vram_free_bytes=u,
            mem_bandwidth_bytes_per_s=u, pcie_gen=u, pcie_lanes=u, h2d_bytes_per_s=u, sm_count=u,
            pcie_gen_current=u, pcie_lanes_current=u, h2d_pageable_bytes_per_s=u,
            driver_version=u, cuda_version=t.cuda_version if t.cuda_version.known else u,
        )

    name_fact = _first_known(t.name, n.name)
    name = str(name_fact.value) if name_fact.known else "unnamed GPU"
    no_torch = f"needs torch with CUDA ({t.why})"
    no_nvml = f"needs NVML ({n.why})"

    sm_count = t.sm_count if t.available else Fact.unknown(f"SM count {no_torch}")
    mem_bw = t.mem_bandwidth_bytes_per_s if t.available else Fact.unknown(f"memory bandwidth {no_torch}")
    # NVML's free memory is the device's; torch's is after this process's context.
    free = _first_known(n.vram_free_bytes, t.vram_free_bytes) if n.available else t.vram_free_bytes
    vram = _first_known(t.vram_bytes, n.vram_bytes)

    def nv(f: Fact, what: str) -> Fact:
        return f if n.available else Fact.unknown(f"{what} {no_nvml}")

    pcie_gen = nv(n.pcie_gen_max, "PCIe generation")
    pcie_lanes = nv(n.pcie_lanes_max, "PCIe width")
    h2d = derive_h2d_bytes_per_s(pcie_gen, pcie_lanes)
    h2d_pageable = Fact.unknown(f"measuring it {no_torch}" if not t.available else "not measured")

    if t.cuda_version.known:
        cuda = t.cuda_version
        if n.cuda_driver_version.known:
            cuda = Fact.detected(cuda.value, f"{cuda.note}; the driver supports CUDA up to "  # type: ignore[arg-type]
                                 f"{n.cuda_driver_version.value}")
    elif n.cuda_driver_version.known:
        cuda = Fact.detected(
            n.cuda_driver_version.value,  # type: ignore[arg-type]
            f"nvmlSystemGetCudaDriverVersion: the highest CUDA version the driver supports ({t.cuda_version.note})",
        )
    else:
        cuda = Fact.unknown(f"{t.cuda_version.note}; {n.cuda_driver_version.note}")

    return GpuSpec(
        name=name,
        preset_id=None,
        vram_bytes=vram,
        vram_free_bytes=free,
        mem_bandwidth_bytes_per_s=mem_bw,
        pcie_gen=pcie_gen,
        pcie_lanes=pcie_lanes,
        h2d_bytes_per_s=h2d,
        sm_count=sm_count,
        pcie_gen_current=nv(n.pcie_gen_current, "current PCIe generation"),
        pcie_lanes_current=nv(n.pcie_lanes_current, "current PCIe width"),
        h2d_pageable_bytes_per_s=h2d_pageable,
        driver_version=nv(n.driver_version, "driver version"),
        cuda_version=cuda,
    )


def detect_gpu(index: int = 0, *, torch: Any = _IMPORT, nvml: Any = _IMPORT,
               device_files: list[str] | None = None) -> GpuSpec:
    """CUDA device `index` of this machine; never raises.

    `torch` and `nvml` default to importing the real modules; pass module-like objects
    (or None for "absent") to simulate a machine, or `torch=UNLOADED` to detect through
    NVML alone without loading torch (planning, the app's start); `device_files`: the
    /dev/nvidia* files (default: this machine's). An NVIDIA GPU that torch cannot use
    is said in `cuda_problem`, with the fix; figures detection lacks come from the
    card's preset.
    """
    try:
        unloaded = torch is UNLOADED
        if unloaded:
            torch, torch_err = None, "torch not loaded (detected through NVML alone)"
        elif torch is _IMPORT:
            torch, torch_err = import_torch()
        else:
            torch_err = None if torch is not None else "torch is not available"
        t = torch_gpu_info(torch, index)
        if torch is None and torch_err:
            u = Fact.unknown(torch_err)
            t = TorchGpuInfo(False, torch_err, u, u, u, u, u, u)
        if nvml is _IMPORT:
            nvml, nvml_err = import_nvml()
        else:
            nvml_err = None if nvml is not None else "NVML is not available"
        n = nvml_gpu_info(nvml, index, uuid=t.uuid if t.available else None)
        if nvml is None and nvml_err:
            u = Fact.unknown(nvml_err)
            n = NvmlGpuInfo(False, nvml_err, u, u, u, u, u, u, u, u, u)
        files = nvidia_device_files() if device_files is None else list(device_files)
        problem = diagnose(cuda_facts_of(torch, n, files, torch_unloaded=unloaded))
        return replace(with_preset_figures(gpu_spec_from(t, n)), cuda_problem=problem)
    except Exception as exc:  # never raise: detection is advice, not a precondition
        return unknown_gpu(f"GPU detection failed ({_why(exc)})")
