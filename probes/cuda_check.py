"""Whether torch can use this machine's NVIDIA GPU, and what fixes it when it cannot.

A CPU-only torch on a GPU machine, or a torch built for a newer CUDA than the driver
runs, leaves `torch.cuda.is_available()` false: every GPU figure would then silently
come from a preset. `diagnose` is a pure function over the facts (`CudaFacts`) that
says so, why, and the install line that fixes it; `local_cuda_facts` gathers the facts
of this machine without importing torch (NVML through `pynvml`, /dev/nvidia*, torch's
installed metadata and its version.py), so the headless path can key profiles on them.
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from engine.hardware.platform import CudaProblem

WHEEL_INDEX = "https://download.pytorch.org/whl"
# CUDA versions PyTorch publishes wheels for (the index names cuXYZ); a driver runs a
# wheel of its own CUDA major version up to its minor version.
WHEEL_CUDA = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (13, 0))


@dataclass(frozen=True)
class CudaFacts:
    nvidia_gpu: str | None  # how an NVIDIA GPU shows itself ("NVML sees 'NVIDIA H200'"); None: no sign
    torch_version: str | None  # None: torch is not installed
    torch_cuda: str | None  # torch.version.cuda: the CUDA the build targets; None: a CPU-only (or ROCm) build
    torch_hip: str | None = None  # torch.version.hip: a ROCm build
    cuda_available: bool | None = None  # torch.cuda.is_available(); None: not asked (torch not imported)
    driver_cuda: str | None = None  # the newest CUDA the driver runs (nvmlSystemGetCudaDriverVersion)
    driver_version: str | None = None
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES, when set


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    parts = re.findall(r"\d+", str(text))
    return tuple(int(p) for p in parts[:2]) if parts else None


def wheel_tag(driver_cuda: str | None) -> str | None:
    """The newest PyTorch wheel index (cuXYZ) the driver runs, or None when unknown or
    older than every published one."""
    have = version_tuple(driver_cuda)
    if have is None:
        return None
    fits = [v for v in WHEEL_CUDA if v[0] == have[0] and v <= have[:2]]
    if not fits:
        return None
    major, minor = max(fits)
    return f"cu{major}{minor}"


def install_line(driver_cuda: str | None) -> str:
    """The commands that put a CUDA build of torch matched to the driver in place (an
    installed CPU build must go first: pip keeps a torch that satisfies `torch`)."""
    tag = wheel_tag(driver_cuda)
    if tag is not None:
        return f"pip uninstall -y torch && pip install torch --index-url {WHEEL_INDEX}/{tag}"
    if version_tuple(driver_cuda) is not None:
        lowest = ".".join(map(str, WHEEL_CUDA[0]))
        return (f"update the NVIDIA driver: it runs CUDA up to {driver_cuda}; PyTorch's wheels need "
                f"CUDA {lowest} or newer")
    tags = ", ".join(f"cu{a}{b}" for a, b in WHEEL_CUDA)
    return (f"pip uninstall -y torch && pip install torch --index-url {WHEEL_INDEX}/cu126 "
            f"(choose among {tags} the newest not above the 'CUDA Version' that nvidia-smi shows)")


def _hidden_by(visible: str | None) -> bool:
    if visible is None:
        return False
    entries = [v.strip() for v in visible.split(",")]
    return not entries or entries[0] in ("", "-1") or entries[0].lower() in ("none", "void", "nodevfiles")


def diagnose(f: CudaFacts) -> CudaProblem | None:
    """Why torch cannot use the NVIDIA GPU this machine has, with the fix; None when
    there is no sign of an NVIDIA GPU or nothing is wrong (or, torch not asked, nothing
    the facts show)."""
    if f.nvidia_gpu is None or f.cuda_available:
        return None
    where = f.nvidia_gpu
    driver = f"the NVIDIA driver{f' {f.driver_version}' if f.driver_version else ''}"
    if f.torch_version is None:
        return CudaProblem("no-torch", f"an NVIDIA GPU is present ({where}) but torch is not installed",
                           install_line(f.driver_cuda).replace("pip uninstall -y torch && ", ""))
    if f.torch_hip:
        return CudaProblem("rocm-build", f"an NVIDIA GPU is present ({where}) but torch {f.torch_version} is a "
                           f"ROCm build (HIP {f.torch_hip}), which cannot use it", install_line(f.driver_cuda))
    if not f.torch_cuda:
        return CudaProblem("cpu-build", f"an NVIDIA GPU is present ({where}) but torch {f.torch_version} is a "
                           "CPU-only build (torch.version.cuda is None)", install_line(f.driver_cuda))
    built, runs = version_tuple(f.torch_cuda), version_tuple(f.driver_cuda)
    too_new = built is not None and runs is not None and (
        built[0] > runs[0] or (f.cuda_available is False and built > runs))
    if too_new:
        fix = (f"update {driver} to one that runs CUDA {f.torch_cuda}, or install a torch built for CUDA "
               f"{f.driver_cuda}: {install_line(f.driver_cuda)}")
        return CudaProblem("driver-too-old", f"an NVIDIA GPU is present ({where}) but torch {f.torch_version} is "
                           f"built for CUDA {f.torch_cuda} and {driver} runs CUDA up to {f.driver_cuda}", fix)
    if _hidden_by(f.visible_devices):
        return CudaProblem("hidden", f"an NVIDIA GPU is present ({where}) but CUDA_VISIBLE_DEVICES="
                           f"{f.visible_devices!r} hides it from CUDA", "unset CUDA_VISIBLE_DEVICES (or name the GPU, "
                           "e.g. CUDA_VISIBLE_DEVICES=0)")
    if f.cuda_available is False:
        return CudaProblem("cuda-unavailable", f"an NVIDIA GPU is present ({where}) and torch {f.torch_version} is "
                           f"built for CUDA {f.torch_cuda}, but torch.cuda.is_available() is False",
                           "check that `nvidia-smi` works and that this user may open /dev/nvidia*; a container "
                           "needs the GPU passed in (docker run --gpus all)")
    return None


def cuda_facts_of(torch: Any, n: Any, device_files: list[str], *, torch_unloaded: bool = False) -> CudaFacts:
    """The facts from what GPU detection saw (probes.gpu): torch's module, NVML's
    answer for the device (an NvmlGpuInfo), the /dev/nvidia* files. `torch_unloaded`:
    torch was deliberately not imported; its build comes from its package files and
    whether CUDA works stays unasked (None)."""
    if n.available:
        seen = f"NVML sees {n.name.value!r}" if n.name.known else "NVML sees an NVIDIA device"
    else:
        seen = f"{device_files[0]} exists" if device_files else None
    driver = dict(driver_cuda=str(n.cuda_driver_version.value) if n.cuda_driver_version.known else None,
                  driver_version=str(n.driver_version.value) if n.driver_version.known else None,
                  visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
    if torch_unloaded:
        built, cuda, hip = _torch_build_without_import()
        return CudaFacts(seen, built, cuda, hip, None, **driver)
    version = getattr(torch, "version", None)
    available = False
    try:
        available = bool(torch.cuda.is_available()) if torch is not None else False
    except Exception:  # noqa: BLE001 - a broken install answers no
        available = False
    return CudaFacts(
        nvidia_gpu=seen,
        torch_version=str(getattr(torch, "__version__", "?")) if torch is not None else None,
        torch_cuda=getattr(version, "cuda", None),
        torch_hip=getattr(version, "hip", None),
        cuda_available=available,
        driver_cuda=str(n.cuda_driver_version.value) if n.cuda_driver_version.known else None,
        driver_version=str(n.driver_version.value) if n.driver_version.known else None,
        visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
    )


def predicted_usable(f: CudaFacts) -> bool:
    """torch.cuda.is_available() when torch was asked, else what the facts predict."""
    if f.cuda_available is not None:
        return bool(f.cuda_available)
    return f.nvidia_gpu is not None and f.torch_version is not None and bool(f.torch_cuda) and diagnose(f) is None


# --- this machine, without importing torch ---------------------------------------------


def nvidia_device_files(dev: str = "/dev") -> list[str]:
    return sorted(glob.glob(os.path.join(dev, "nvidia[0-9]*")))


@dataclass(frozen=True)
class NvmlFacts:
    names: tuple[str, ...]  # NVML's devices, in its order
    uuids: tuple[str, ...]
    driver_version: str | None
    driver_cuda: str | None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def nvml_facts(nvml: Any) -> NvmlFacts | None:
    """What NVML tells about every device, or None without NVML or a driver."""
    if nvml is None:
        return None
    try:
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver
        return None
    try:
        names, uuids = [], []
        for i in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            names.append(_text(nvml.nvmlDeviceGetName(handle)))
            uuids.append(_text(nvml.nvmlDeviceGetUUID(handle)))
        driver = cuda = None
        try:
            driver = _text(nvml.nvmlSystemGetDriverVersion())
            v = int(nvml.nvmlSystemGetCudaDriverVersion())
            cuda = f"{v // 1000}.{(v % 1000) // 10}"
        except Exception:  # noqa: BLE001 - an old driver lacks one of them
            pass
        return NvmlFacts(tuple(names), tuple(uuids), driver, cuda)
    except Exception:  # noqa: BLE001 - NVML answered, then failed: as good as none
        return None
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


@cache
def _local_nvml() -> NvmlFacts | None:
    try:
        import pynvml
    except Exception:  # noqa: BLE001 - nvidia-ml-py missing or broken
        return None
    return nvml_facts(pynvml)


def _torch_build_without_import() -> tuple[str | None, str | None, str | None]:
    """(version, cuda, hip) of the installed torch, read from its metadata and
    torch/version.py without importing torch; (None, None, None) when not installed."""
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        version = getattr(torch, "version", None)
        return (str(getattr(torch, "__version__", "")) or None, getattr(version, "cuda", None),
                getattr(version, "hip", None))
    try:
        installed = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None, None, None
    text = ""
    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            text = Path(folder, "version.py").read_text()
            break
        except OSError:
            continue
    return (installed, *torch_version_py_fields(text))


def torch_version_py_fields(text: str) -> tuple[str | None, str | None]:
    """(cuda, hip) as torch/version.py assigns them ("cuda: Optional[str] = '12.8'"), None
    where it assigns None or says nothing."""
    def field(name: str) -> str | None:
        m = re.search(rf"^{name}\s*(?::[^=\n]*)?=\s*(?:'([^']*)'|\"([^\"]*)\")", text, re.M)
        return (m.group(1) or m.group(2) or None) if m else None

    return field("cuda"), field("hip")


def local_cuda_facts(dev: str = "/dev") -> CudaFacts:
    """This machine's facts; torch is asked only when something already imported it."""
    nv = _local_nvml()
    files = nvidia_device_files(dev)
    if nv is not None and nv.names:
        seen = f"NVML sees {nv.names[0]!r}" + (f" and {len(nv.names) - 1} more" if len(nv.names) > 1 else "")
    elif files:
        seen = f"{files[0]} exists"
    else:
        seen = None
    version, cuda, hip = _torch_build_without_import()
    available = None
    if "torch" in sys.modules:
        try:
            available = bool(sys.modules["torch"].cuda.is_available())
        except Exception:  # noqa: BLE001 - a broken install answers no
            available = False
    return CudaFacts(seen, version, cuda, hip, available, nv.driver_cuda if nv else None,
                     nv.driver_version if nv else None, os.environ.get("CUDA_VISIBLE_DEVICES"))


def local_device_uuid() -> str:
    """The UUID NVML gives the GPU that CUDA numbers 0 (as CUDA_VISIBLE_DEVICES names
    it, or NVML's first device); "" without NVML or a GPU."""
    nv = _local_nvml()
    if nv is None or not nv.uuids:
        return ""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = visible.split(",")[0].strip() if visible else ""
    if first.startswith(("GPU-", "MIG-")):
        return first
    if first.isdigit() and int(first) < len(nv.uuids):
        return nv.uuids[int(first)]
    return nv.uuids[0]
