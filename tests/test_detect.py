"""GPU detection through fake torch and NVML objects, the bandwidth probes, `cope detect`."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from cope_tui.cli import EXIT_OK, main
from engine.hardware.platform import PCIE_LANE_BYTES_PER_S, GpuSpec, Platform, unknown_gpu
from engine.hardware.presets import get_gpu_preset
from probes.bandwidth import measure_cpu_memory_bandwidth, measure_gpu_memory_bandwidth, measure_h2d_bandwidth
from probes.gpu import NO_GPU_NAME, detect_gpu, nvml_gpu_info, torch_gpu_info

GIB = 1024**3


# --- fakes ------------------------------------------------------------------------


def fake_torch(*, cuda_version: str | None = "12.4", devices: int = 1, uuid: str = "1234abcd-0000") -> SimpleNamespace:
    props = SimpleNamespace(
        name="NVIDIA GeForce RTX 4090",
        total_memory=24 * GIB,
        multi_processor_count=128,
        memory_clock_rate=10_501_000,  # kHz, as cudaDeviceProp gives it
        memory_bus_width=384,
        uuid=uuid,
    )
    cuda = SimpleNamespace(
        is_available=lambda: devices > 0 and cuda_version is not None,
        device_count=lambda: devices,
        get_device_properties=lambda i: props,
        mem_get_info=lambda i: (20 * GIB, 24 * GIB),
    )
    return SimpleNamespace(__version__="2.9.0", version=SimpleNamespace(cuda=cuda_version, hip=None), cuda=cuda)


class FakeNVMLError(Exception):
    pass


class FakeNvml:
    """Just the pynvml calls detection uses; `fail_init` and `unsupported` simulate errors."""

    NVMLError = FakeNVMLError

    def __init__(self, *, fail_init: bool = False, unsupported: tuple[str, ...] = ()):
        self.fail_init = fail_init
        self.unsupported = set(unsupported)
        self.calls: list[str] = []
        self.shut_down = False

    def _check(self, name: str) -> None:
        self.calls.append(name)
        if name in self.unsupported:
            raise FakeNVMLError("Not Supported")

    def nvmlInit(self):
        if self.fail_init:
            raise FakeNVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.shut_down = True

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._check("nvmlDeviceGetHandleByUUID")
        assert uuid == "GPU-1234abcd-0000"
        return "handle0"

    def nvmlDeviceGetHandleByIndex(self, i):
        self._check("nvmlDeviceGetHandleByIndex")
        return f"handle{i}"

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA GeForce RTX 4090"  # older bindings return bytes

    def nvmlDeviceGetMemoryInfo(self, h):
        self._check("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=24 * GIB, free=23 * GIB, used=1 * GIB)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        self._check("nvmlDeviceGetMaxPcieLinkGeneration")
        return 4

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        self._check("nvmlDeviceGetMaxPcieLinkWidth")
        return 16

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        self._check("nvmlDeviceGetCurrPcieLinkGeneration")
        return 1  # idle link

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        self._check("nvmlDeviceGetCurrPcieLinkWidth")
        return 16

    def nvmlSystemGetDriverVersion(self):
        return "550.54.14"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12040


@pytest.fixture
def no_pynvml(monkeypatch):
    """`import pynvml` raises ImportError, as without nvidia-ml-py."""
    monkeypatch.setitem(sys.modules, "pynvml", None)


# --- torch mapping ----------------------------------------------------------------


def test_torch_with_cuda_maps_the_device_properties():
    t = torch_gpu_info(fake_torch())
    assert t.available
    assert t.name.value == "NVIDIA GeForce RTX 4090" and t.name.basis == "detected"
    assert t.vram_bytes.value == 24 * GIB
    assert t.sm_count.value == 128
    assert t.vram_free_bytes.value == 20 * GIB
    # 2 x 10501 MHz x 384 bits / 8 = 1008 GB/s, the card's spec-sheet figure
    assert t.mem_bandwidth_bytes_per_s.value == pytest.approx(1008.1e9, rel=1e-3)
    assert t.mem_bandwidth_bytes_per_s.basis == "detected" and "peak" in t.mem_bandwidth_bytes_per_s.note
    assert t.cuda_version.value == "12.4"
    assert t.uuid == "1234abcd-0000"


def test_cpu_only_torch_says_so():
    t = torch_gpu_info(fake_torch(cuda_version=None))
    assert not t.available
    assert not t.sm_count.known and "CPU-only build" in t.sm_count.note
    assert not t.cuda_version.known


def test_cuda_torch_without_a_device_says_so(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    t = torch_gpu_info(fake_torch(devices=0))
    assert not t.available
    assert "is_available() is False" in t.why and "built for CUDA 12.4" in t.why
    assert "CUDA_VISIBLE_DEVICES=''" in t.why
    assert t.cuda_version.value == "12.4"  # still known: it is the build's


def test_device_index_out_of_range():
    t = torch_gpu_info(fake_torch(devices=1), index=3)
    assert not t.available and "only 1" in t.why


def test_torch_property_that_raises_does_not_escape():
    torch = fake_torch()
    torch.cuda.get_device_properties = lambda i: (_ for _ in ()).throw(RuntimeError("CUDA error: busy"))
    t = torch_gpu_info(torch)
    assert not t.available and "RuntimeError: CUDA error: busy" in t.why


# --- NVML mapping -----------------------------------------------------------------


def test_nvml_maps_memory_pcie_and_versions():
    nvml = FakeNvml()
    n = nvml_gpu_info(nvml, 0, uuid="1234abcd-0000")
    assert n.available and "UUID" in n.why
    assert n.name.value == "NVIDIA GeForce RTX 4090"  # bytes decoded
    assert (n.vram_bytes.value, n.vram_free_bytes.value) == (24 * GIB, 23 * GIB)
    assert (n.pcie_gen_max.value, n.pcie_lanes_max.value) == (4, 16)
    assert (n.pcie_gen_current.value, n.pcie_lanes_current.value) == (1, 16)
    assert "idles" in n.pcie_gen_current.note
    assert n.driver_version.value == "550.54.14"
    assert n.cuda_driver_version.value == "12.4"
    assert nvml.shut_down


def test_nvml_init_error_makes_every_figure_unknown_with_the_error():
    nvml = FakeNvml(fail_init=True)
    n = nvml_gpu_info(nvml, 0)
    assert not n.available
    for f in (n.vram_free_bytes, n.pcie_gen_max, n.driver_version):
        assert not f.known and "FakeNVMLError: Driver Not Loaded" in f.note


def test_nvml_unsupported_call_makes_only_that_figure_unknown():
    nvml = FakeNvml(unsupported=("nvmlDeviceGetMaxPcieLinkWidth", "nvmlDeviceGetHandleByUUID"))
    n = nvml_gpu_info(nvml, 0, uuid="1234abcd-0000")
    assert n.available
    assert "fell back to NVML index 0" in n.notes[0]
    assert not n.pcie_lanes_max.known and "Not Supported" in n.pcie_lanes_max.note
    assert n.pcie_gen_max.value == 4 and n.vram_free_bytes.value == 23 * GIB


class FakeMigNvml(FakeNvml):
    """An H100 split by MIG: CUDA device 0 is a 1g.10gb slice, which NVML knows only as
    "MIG-<uuid>"; PCIe queries are answered for the parent GPU alone."""

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self.calls.append(uuid)
        if uuid != "MIG-1234abcd-0000":
            raise FakeNVMLError("Not Found")
        return "mig0"

    def nvmlDeviceIsMigDeviceHandle(self, h):
        return h == "mig0"

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h):
        return "handle0"

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H100 80GB HBM3 MIG 1g.10gb" if h == "mig0" else "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, h):
        gib = 10 if h == "mig0" else 80
        return SimpleNamespace(total=gib * GIB, free=(gib - 1) * GIB, used=GIB)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        if h == "mig0":
            raise FakeNVMLError("Not Supported")
        return 5


def test_a_mig_slice_is_found_by_its_mig_uuid_not_taken_for_its_parent():
    nvml = FakeMigNvml()
    n = nvml_gpu_info(nvml, 0, uuid="1234abcd-0000")
    assert nvml.calls[:2] == ["GPU-1234abcd-0000", "MIG-1234abcd-0000"]
    assert n.available and "MIG instance" in n.why and "slice of NVIDIA H100 80GB HBM3" in n.why
    assert n.name.value == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    assert n.vram_bytes.value == 10 * GIB and n.vram_free_bytes.value == 9 * GIB  # the slice's, not the card's
    assert n.pcie_gen_max.value == 5  # the link is the parent's


def test_a_uuid_nvml_does_not_know_falls_back_to_nothing():
    class Unknown(FakeMigNvml):
        def nvmlDeviceGetHandleByUUID(self, uuid):
            raise FakeNVMLError("Not Found")

    n = nvml_gpu_info(Unknown(), 0, uuid="1234abcd-0000")
    assert not n.available and "no device with the UUID" in n.why
    assert not n.vram_bytes.known  # not the 80 GiB of NVML's device 0


def test_a_detected_mig_slice_keeps_its_own_memory_and_borrows_no_preset():
    torch = fake_torch()
    props = torch.cuda.get_device_properties(0)
    props.name, props.total_memory, props.multi_processor_count = "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 10 * GIB, 16
    g = detect_gpu(torch=torch, nvml=FakeMigNvml())
    assert g.vram_bytes.value == 10 * GIB and g.vram_free_bytes.value == 9 * GIB
    assert g.matched_preset_id is None and g.cuda_problem is None


# --- detect_gpu: the merged GpuSpec -------------------------------------------------


def test_cuda_and_nvml_give_a_full_gpu_spec():
    g = detect_gpu(torch=fake_torch(), nvml=FakeNvml())
    assert isinstance(g, GpuSpec) and g.name == "NVIDIA GeForce RTX 4090" and g.preset_id is None
    assert g.vram_bytes.value == 24 * GIB and g.vram_bytes.basis == "detected"
    assert g.vram_free_bytes.value == 23 * GIB and "nvml" in g.vram_free_bytes.note.lower()
    assert g.sm_count.value == 128
    assert (g.pcie_gen.value, g.pcie_lanes.value) == (4, 16)  # what the link can do, not its idle state
    assert (g.pcie_gen_current.value, g.pcie_lanes_current.value) == (1, 16)
    # Not measured: pinned H2D derived from the link, as for presets.
    assert g.h2d_bytes_per_s.basis == "assumed"
    assert g.h2d_bytes_per_s.value == pytest.approx(PCIE_LANE_BYTES_PER_S[4] * 16 * 0.8)
    assert not g.h2d_pageable_bytes_per_s.known
    assert g.driver_version.value == "550.54.14"
    assert g.cuda_version.value == "12.4" and "driver supports CUDA up to 12.4" in g.cuda_version.note
    # the detected card agrees with the RTX 4090 preset's spec sheet
    preset = get_gpu_preset("rtx-4090")
    assert g.mem_bandwidth_bytes_per_s.value == pytest.approx(preset.mem_bandwidth_bytes_per_s.value, rel=0.01)
    json.dumps(g.to_dict())


def test_no_gpu_every_figure_unknown_with_both_reasons():
    g = detect_gpu(torch=fake_torch(cuda_version=None), nvml=FakeNvml(fail_init=True))
    assert g.name == NO_GPU_NAME
    d = g.to_dict()
    for key, fact in d.items():
        if isinstance(fact, dict):
            assert fact["value"] is None and fact["basis"] == "unknown", key
            assert "CPU-only build" in fact["note"] and "Driver Not Loaded" in fact["note"], key


def test_nvml_absent_cuda_present_keeps_torch_figures(no_pynvml):
    g = detect_gpu(torch=fake_torch())  # nvml imported for real: ImportError
    assert g.name == "NVIDIA GeForce RTX 4090"
    assert g.vram_bytes.value == 24 * GIB and g.sm_count.value == 128 and g.sm_count.basis == "detected"
    assert g.vram_free_bytes.value == 20 * GIB and "mem_get_info" in g.vram_free_bytes.note  # torch fallback
    assert not g.driver_version.known and "could not be imported" in g.driver_version.note
    # The link comes from the card's spec sheet, saying why it was not detected.
    assert g.matched_preset_id == "rtx-4090"
    for f, value in ((g.pcie_gen, 4), (g.pcie_lanes, 16)):
        assert f.basis == "preset" and f.value == value
        assert "could not be imported" in f.note and "nvidia.com" in f.note
    assert g.h2d_bytes_per_s.basis == "assumed" and "gen4 x16" in g.h2d_bytes_per_s.note
    assert g.cuda_version.value == "12.4" and g.cuda_problem is None


def test_nvml_init_error_with_cuda_keeps_torch_figures():
    g = detect_gpu(torch=fake_torch(), nvml=FakeNvml(fail_init=True))
    assert g.sm_count.value == 128 and g.sm_count.basis == "detected"
    assert g.pcie_gen.basis == "preset" and "Driver Not Loaded" in g.pcie_gen.note
    assert not g.driver_version.known and "Driver Not Loaded" in g.driver_version.note


def test_cpu_only_torch_with_nvml_still_names_the_card():
    g = detect_gpu(torch=fake_torch(cuda_version=None), nvml=FakeNvml())
    assert g.name == "NVIDIA GeForce RTX 4090" and g.name != NO_GPU_NAME
    assert g.vram_bytes.value == 24 * GIB and g.vram_bytes.note.startswith("nvmlDeviceGetMemoryInfo")
    assert g.pcie_gen.value == 4 and g.pcie_gen.basis == "detected"
    assert g.sm_count.basis == "preset" and "CPU-only build" in g.sm_count.note  # from the card's spec sheet
    assert g.mem_bandwidth_bytes_per_s.basis == "preset" and g.mem_bandwidth_bytes_per_s.value == 1008e9
    assert g.cuda_version.value == "12.4" and "highest CUDA version the driver supports" in g.cuda_version.note
    # The card is there, torch cannot use it: said, with the line that fixes it.
    assert g.cuda_problem.kind == "cpu-build"
    assert "NVIDIA GeForce RTX 4090" in g.cuda_problem.message and "CPU-only" in g.cuda_problem.message
    assert g.cuda_problem.fix == ("pip uninstall -y torch && pip install torch --index-url "
                                  "https://download.pytorch.org/whl/cu124")


def test_torch_absent_and_nvml_absent(monkeypatch, no_pynvml):
    monkeypatch.setitem(sys.modules, "torch", None)
    g = detect_gpu()
    assert g.name == NO_GPU_NAME
    assert not g.vram_bytes.known
    assert "torch could not be imported" in g.vram_bytes.note and "nvidia-ml-py" in g.vram_bytes.note


def test_this_machine_gpu_detection_never_raises():
    g = detect_gpu()
    assert isinstance(g, GpuSpec)
    json.dumps(g.to_dict())


def test_added_gpu_fields_default_for_presets_and_unknown_gpu():
    p = get_gpu_preset("rtx-4090")
    assert not p.driver_version.known and p.driver_version.note
    assert "driver_version" in p.to_dict() and "h2d_pageable_bytes_per_s" in p.to_dict()
    u = unknown_gpu("because")
    assert u.cuda_version.note == "because" and u.pcie_gen_current.note == "because"


# --- bandwidth ----------------------------------------------------------------------


def test_cpu_memory_bandwidth_is_measured_and_positive():
    f = measure_cpu_memory_bandwidth(size_bytes=64 * 1024**2, repeats=3, budget_s=0.5)
    assert f.basis == "measured" and f.value > 0
    assert "64 MiB" in f.note and "median of" in f.note


def test_cpu_memory_bandwidth_reads_with_the_threads_asked_and_says_so():
    many = measure_cpu_memory_bandwidth(size_bytes=16 * 1024**2, repeats=3, budget_s=0.5, threads=3)
    assert many.basis == "measured" and many.value > 0
    assert "multi-threaded read bandwidth: 3 threads at once" in many.note and "numpy" in many.note
    one = measure_cpu_memory_bandwidth(size_bytes=16 * 1024**2, repeats=3, budget_s=0.5, threads=1)
    assert one.known and "one thread" in one.note and "multi-threaded" not in one.note


def test_gpu_measurements_unknown_without_cuda():
    no_cuda = fake_torch(cuda_version=None)
    for f in (
        measure_h2d_bandwidth(16 * 1024**2, pinned=True, torch=no_cuda),
        measure_h2d_bandwidth(16 * 1024**2, pinned=False, torch=no_cuda),
        measure_gpu_memory_bandwidth(torch=no_cuda),
    ):
        assert not f.known and "is_available() is False" in f.note
    assert not measure_h2d_bandwidth(0, pinned=True).known
    assert not measure_gpu_memory_bandwidth(torch=None).known


# --- cope detect --------------------------------------------------------------------


def test_cope_detect_json_no_measure_on_this_machine(capsys):
    assert main(["detect", "--json", "--no-measure"]) == EXIT_OK
    out, err = capsys.readouterr()
    doc = json.loads(out)  # exactly one document
    assert doc["schema_version"] == 1
    cpu, gpu = doc["platform"]["cpu"], doc["platform"]["gpu"]
    assert cpu["logical_threads"]["value"] >= 1
    assert cpu["mem_bandwidth_bytes_per_s"] == {
        "value": None, "basis": "unknown", "note": "not measured (measurements skipped)"
    }
    for fact in gpu.values():
        if isinstance(fact, dict):
            assert fact["basis"] in ("detected", "measured", "assumed", "unknown")
            assert fact["note"]
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        assert gpu["vram_bytes"]["value"] is None and gpu["vram_bytes"]["basis"] == "unknown"
        assert gpu["sm_count"]["note"]
    assert "detecting" in err


def test_cope_detect_text_lists_figures_with_basis(capsys, monkeypatch):
    import probes.detect as detect

    monkeypatch.setattr(detect, "detect_gpu", lambda device=0: detect_gpu(
        torch=fake_torch(), nvml=FakeNvml()))
    assert main(["detect", "--no-measure"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "GPU: NVIDIA GeForce RTX 4090" in out
    assert "24.0 GiB  detected" in out
    assert "pcie_gen_current" in out and "idles" in out
    assert "not measured (measurements skipped)" in out


def test_detect_platform_measures_cpu(monkeypatch):
    import probes.detect as detect

    monkeypatch.setattr(detect, "measure_cpu_memory_bandwidth", lambda threads=None: measure_cpu_memory_bandwidth(
        size_bytes=32 * 1024**2, repeats=3, budget_s=0.3, threads=threads))
    monkeypatch.setattr(detect, "detect_gpu", lambda device=0: detect_gpu(
        torch=fake_torch(cuda_version=None), nvml=FakeNvml(fail_init=True)))
    steps: list[str] = []
    p = detect.detect_platform(measure=True, progress=steps.append)
    assert isinstance(p, Platform)
    assert p.cpu.mem_bandwidth_bytes_per_s.basis == "measured" and p.cpu.mem_bandwidth_bytes_per_s.value > 0
    one = p.cpu.thread_bandwidth_bytes_per_s  # one thread's figure too: the CPU lane at few threads
    assert one.basis == "measured" and one.value > 0 and "one thread" in one.note
    assert p.gpu.name == NO_GPU_NAME and not p.gpu.h2d_bytes_per_s.known
    assert not any("host-to-device" in s for s in steps)  # no GPU: nothing to measure


def test_detect_json_path_does_not_import_textual():
    code = (
        "import sys; from cope_tui.cli import main; rc = main(['detect', '--json', '--no-measure']); "
        "assert 'textual' not in sys.modules, 'textual imported'; sys.exit(rc)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    json.loads(r.stdout)


# --- real GPU -----------------------------------------------------------------------


def _has_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA GPU")
def test_real_gpu_detection_and_measurements():
    from probes.detect import detect_platform

    p = detect_platform(measure=True)
    g = p.gpu
    assert g.name != NO_GPU_NAME
    assert g.vram_bytes.value > 0 and g.sm_count.value > 0 and g.cuda_version.known
    assert g.vram_free_bytes.value <= g.vram_bytes.value
    assert g.h2d_bytes_per_s.basis == "measured" and g.h2d_bytes_per_s.value > 0
    assert g.h2d_pageable_bytes_per_s.basis == "measured" and g.h2d_pageable_bytes_per_s.value > 0
    assert g.mem_bandwidth_bytes_per_s.basis == "measured" and g.mem_bandwidth_bytes_per_s.value > 0
    json.dumps(p.to_dict())


# --- detection without loading torch (planning, the app's start) -------------------------


def test_nvml_alone_names_the_card_fills_its_preset_and_judges_the_installed_torch_build():
    from probes.gpu import UNLOADED

    g = detect_gpu(torch=UNLOADED, nvml=FakeNvml())
    assert g.name == "NVIDIA GeForce RTX 4090" and g.vram_bytes.value == 24 * GIB
    assert g.matched_preset_id == "rtx-4090" and g.mem_bandwidth_bytes_per_s.basis == "preset"
    # The torch installed here is a CPU-only build: said without loading it, with the fix.
    assert g.cuda_problem is not None and g.cuda_problem.kind == "cpu-build"
    assert "CPU-only build" in g.cuda_problem.message and "pip install torch --index-url" in g.cuda_problem.fix


def test_detect_shows_each_figure_in_its_unit():
    from cope_tui.commands.detect import _format_fact

    assert _format_fact("base_clock_hz", 3.5e9) == "3.50 GHz"
    assert _format_fact("mem_bandwidth_bytes_per_s", 61.44e9) == "61.4 GB/s"
    assert _format_fact("ram_bytes", 64 * 1024**3) == "64.0 GiB"
    assert _format_fact("vector_isa", "AVX-512 VNNI") == "AVX-512 VNNI"
    assert _format_fact("base_clock_hz", None) == "unknown"


def test_detect_lines_up_every_figure_whatever_the_name_length():
    # thread_bandwidth_bytes_per_s is the longest name; its figure ends in the same column
    # as every other row's, two spaces before the basis.
    from cope_tui.commands.detect import _render_platform
    from engine.hardware.platform import Platform
    from engine.hardware.cpu_presets import get_cpu_preset
    from engine.hardware.presets import get_gpu_preset

    text = _render_platform(Platform(get_gpu_preset("rtx-3090"), get_cpu_preset("ryzen-9-7950x")))
    rows = [line for line in text.splitlines() if line.startswith("  ") and "_" in line.split()[0]]
    assert any(line.split()[0] == "thread_bandwidth_bytes_per_s" for line in rows)
    end = 2 + max(len(line.split()[0]) for line in rows) + 1 + 12  # name column, a space, the figure
    for line in rows:
        assert line[end - 1] != " " and line[end : end + 2] == "  ", line
