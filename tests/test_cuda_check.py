"""Whether torch can use the NVIDIA GPU that is there (probes.cuda_check), `cope detect`'s
warning, and the profile key that keeps profiles measured with and without CUDA apart."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from cope_tui.cli import EXIT_OK, main
from engine.hardware.presets import platform_from
from probes.cuda_check import (
    CudaFacts,
    diagnose,
    install_line,
    nvml_facts,
    predicted_usable,
    torch_version_py_fields,
    wheel_tag,
)

H200 = "NVML sees 'NVIDIA H200'"
CPU_BUILD = CudaFacts(nvidia_gpu=H200, torch_version="2.11.0+cpu", torch_cuda=None, cuda_available=False,
                      driver_cuda="13.0", driver_version="580.159.03")


@pytest.mark.parametrize("driver, tag", [("13.0", "cu130"), ("12.9", "cu128"), ("12.8", "cu128"), ("12.5", "cu124"),
                                         ("12.2", "cu121"), ("11.8", "cu118"), ("11.4", None), ("12.0", None),
                                         (None, None)])
def test_the_wheel_index_is_the_newest_the_driver_runs(driver, tag):
    assert wheel_tag(driver) == tag


def test_a_cpu_build_on_a_gpu_machine_is_named_with_the_install_line_for_its_driver():
    problem = diagnose(CPU_BUILD)
    assert problem.kind == "cpu-build"
    assert "NVIDIA H200" in problem.message and "2.11.0+cpu" in problem.message and "CPU-only" in problem.message
    assert problem.fix == "pip uninstall -y torch && pip install torch --index-url https://download.pytorch.org/whl/cu130"


def test_no_gpu_or_a_working_gpu_is_no_problem():
    assert diagnose(replace(CPU_BUILD, nvidia_gpu=None)) is None  # a laptop with a CPU build: fine
    assert diagnose(replace(CPU_BUILD, torch_cuda="13.0", cuda_available=True)) is None


def test_a_build_for_a_newer_cuda_than_the_driver_runs():
    new_build = replace(CPU_BUILD, torch_version="2.11.0+cu130", torch_cuda="13.0", driver_cuda="12.4",
                        driver_version="550.54.14")
    problem = diagnose(new_build)
    assert problem.kind == "driver-too-old"
    assert "CUDA 13.0" in problem.message and "550.54.14" in problem.message and "12.4" in problem.message
    assert "update the NVIDIA driver 550.54.14" in problem.fix and problem.fix.endswith("/whl/cu124")
    # A newer major version cannot run at all, even before torch is asked...
    assert diagnose(replace(new_build, cuda_available=None)).kind == "driver-too-old"
    # ...a newer minor version usually runs (minor-version compatibility): only a failure says so.
    minor = replace(new_build, torch_cuda="12.8", cuda_available=None)
    assert diagnose(minor) is None and predicted_usable(minor)
    assert diagnose(replace(minor, cuda_available=False)).kind == "driver-too-old"


def test_other_reasons_each_with_a_fix():
    rocm = diagnose(replace(CPU_BUILD, torch_version="2.11.0+rocm6.3", torch_hip="6.3.42131"))
    assert rocm.kind == "rocm-build" and "HIP 6.3" in rocm.message and "cu130" in rocm.fix
    missing = diagnose(replace(CPU_BUILD, torch_version=None))
    assert missing.kind == "no-torch" and missing.fix == "pip install torch --index-url https://download.pytorch.org/whl/cu130"
    cuda_build = replace(CPU_BUILD, torch_version="2.11.0+cu130", torch_cuda="13.0")
    hidden = diagnose(replace(cuda_build, visible_devices=""))
    assert hidden.kind == "hidden" and "CUDA_VISIBLE_DEVICES=''" in hidden.message
    other = diagnose(cuda_build)
    assert other.kind == "cuda-unavailable" and "nvidia-smi" in other.fix
    files_only = diagnose(replace(CPU_BUILD, nvidia_gpu="/dev/nvidia0 exists", driver_cuda=None))
    assert "/dev/nvidia0 exists" in files_only.message and "choose among cu118" in files_only.fix
    assert "update the NVIDIA driver" in install_line("11.4")


def test_version_py_is_read_without_importing_torch():
    cuda_build = "__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n"
    assert torch_version_py_fields(cuda_build) == ("13.0", None)
    assert torch_version_py_fields("cuda: Optional[str] = None\nhip = '6.3.1'\n") == (None, "6.3.1")
    assert torch_version_py_fields("") == (None, None)


class _Nvml:
    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return [b"NVIDIA H200", "NVIDIA H200"][h]

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-0000000{h}-aaaa-bbbb-cccc-dddddddddddd"

    def nvmlSystemGetDriverVersion(self):
        return "580.159.03"

    def nvmlSystemGetCudaDriverVersion(self):
        return 13000


def test_nvml_facts_of_every_device():
    facts = nvml_facts(_Nvml())
    assert facts.names == ("NVIDIA H200", "NVIDIA H200")
    assert facts.uuids[1].startswith("GPU-00000001")
    assert (facts.driver_version, facts.driver_cuda) == ("580.159.03", "13.0")
    assert nvml_facts(None) is None
    broken = _Nvml()
    broken.nvmlInit = lambda: (_ for _ in ()).throw(RuntimeError("Driver Not Loaded"))
    assert nvml_facts(broken) is None


# --- the profile key -------------------------------------------------------------------


def _request():
    return SimpleNamespace(platform=platform_from("h200", "desktop-ddr5", None), context_tokens=4096)


def test_profiles_measured_with_and_without_cuda_have_different_keys():
    from probes.runner import hardware_key

    uuid = "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"
    works = replace(CPU_BUILD, torch_version="2.11.0+cu130", torch_cuda="13.0", cuda_available=True)
    with_cuda = hardware_key(_request(), cuda=(works, uuid))
    without = hardware_key(_request(), cuda=(CPU_BUILD, uuid))
    assert with_cuda["cuda_available"] is True and without["cuda_available"] is False
    assert with_cuda["gpu_uuid"] == uuid and with_cuda["torch"] == "2.11.0+cu130" and with_cuda["torch_cuda"] == "13.0"
    assert with_cuda != without
    other_card = hardware_key(_request(), cuda=(works, uuid.replace("00000000", "00000001")))
    assert other_card != with_cuda
    # torch not imported: the facts predict the answer torch would give
    assert hardware_key(_request(), cuda=(replace(works, cuda_available=None), uuid)) == with_cuda
    json.dumps(with_cuda)


def test_this_machine_key_needs_no_torch_import():
    import subprocess
    import sys

    code = ("import sys; from types import SimpleNamespace; from engine.hardware.presets import platform_from; "
            "from probes.runner import hardware_key; "
            "k = hardware_key(SimpleNamespace(platform=platform_from('h200', 'desktop-ddr5', None), context_tokens=1)); "
            "assert 'torch' not in sys.modules; print(k['cuda_available'], k['torch'])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    available, version = r.stdout.split()
    import torch

    assert version == torch.__version__ and available == str(torch.cuda.is_available())


# --- cope detect ------------------------------------------------------------------------


def _cpu_build_machine(monkeypatch):
    import probes.detect as detect
    from probes.gpu import detect_gpu
    from tests.test_detect import FakeNvml, fake_torch

    monkeypatch.setattr(detect, "detect_gpu", lambda device=0: detect_gpu(
        torch=fake_torch(cuda_version=None), nvml=FakeNvml()))


def test_cope_detect_warns_when_torch_cannot_use_the_gpu(monkeypatch, capsys):
    _cpu_build_machine(monkeypatch)
    assert main(["detect", "--no-measure"]) == EXIT_OK
    out, err = capsys.readouterr()
    first = out.splitlines()[0]
    assert first.startswith("warning: an NVIDIA GPU is present (NVML sees 'NVIDIA GeForce RTX 4090')")
    assert "CPU-only build" in first and "Fix: pip uninstall -y torch && pip install torch" in first
    assert "cope: warning:" in err
    assert "(spec sheet: preset rtx-4090)" in out


def test_cope_detect_json_carries_the_problem_and_the_warning(monkeypatch, capsys):
    _cpu_build_machine(monkeypatch)
    assert main(["detect", "--json", "--no-measure"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    problem = doc["platform"]["gpu"]["cuda_problem"]
    assert problem["kind"] == "cpu-build" and problem["fix"].endswith("/whl/cu124")
    assert len(doc["warnings"]) == 1 and problem["message"] in doc["warnings"][0]
    assert doc["platform"]["gpu"]["matched_preset_id"] == "rtx-4090"


def test_detect_platform_says_why_the_gpu_was_not_measured(monkeypatch):
    import probes.detect as detect
    from engine.hardware.platform import Fact

    _cpu_build_machine(monkeypatch)
    monkeypatch.setattr(detect, "measure_cpu_memory_bandwidth", lambda threads=None: Fact.measured(1e10, "stub"))
    p = detect.detect_platform(measure=True)
    for f in (p.gpu.h2d_pageable_bytes_per_s, p.gpu.h2d_bytes_per_s, p.gpu.mem_bandwidth_bytes_per_s):
        assert "not measured: an NVIDIA GPU is present" in f.note and "pip install torch" in f.note
    assert p.gpu.mem_bandwidth_bytes_per_s.basis == "preset"  # the spec sheet's figure stays, said as such


def test_the_keyed_device_is_the_one_cuda_numbers_0(monkeypatch):
    import probes.cuda_check as cc

    monkeypatch.setattr(cc, "_local_nvml", lambda: nvml_facts(_Nvml()))
    first, second = cc.nvml_facts(_Nvml()).uuids
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert cc.local_device_uuid() == first
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert cc.local_device_uuid() == second
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-abcd")
    assert cc.local_device_uuid() == "MIG-abcd"
    monkeypatch.setattr(cc, "_local_nvml", lambda: None)
    assert cc.local_device_uuid() == ""


def test_device_files_are_a_sign_of_an_nvidia_gpu(tmp_path, monkeypatch):
    import probes.cuda_check as cc

    for name in ("nvidia0", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).write_text("")
    assert cc.nvidia_device_files(str(tmp_path)) == [str(tmp_path / "nvidia0")]
    monkeypatch.setattr(cc, "_local_nvml", lambda: None)
    facts = cc.local_cuda_facts(str(tmp_path))
    assert facts.nvidia_gpu == f"{tmp_path / 'nvidia0'} exists" and facts.driver_cuda is None
