"""Two or more GPUs and cards that are not NVIDIA (issue 33, part 1): `--gpu` with several
cards, the AMD and Intel presets, the backends' buffer names, and detection of every GPU
from fake NVML objects, fake sysfs trees and fake amd-smi/rocm-smi output."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from cope_tui.commands.detect import render_gpu_list
from engine.core.errors import CopeInputError
from engine.hardware.gpu_backends import buffer_name, uses_graphs
from engine.hardware.gpu_set import cards_of, split_gpu_names
from engine.hardware.memory import GIB, RUNTIME_RESERVE_BYTES
from engine.hardware.platform import Fact
from engine.hardware.presets import get_gpu_preset, gpu_presets
from probes.gpu_list import detect_gpus, nvml_gpus, pcie_gen, shared_links, sysfs_gpus


def test_two_cards_are_named_either_way_and_sum_their_memory_less_a_reserve_each():
    for text in ("rtx-3090,rtx-3090", "2x rtx-3090", "2x RTX 3090", " rtx-3090 , rtx-3090 "):
        gpu = get_gpu_preset(text)
        assert len(gpu.cards) == 2 and all(c.preset_id == "rtx-3090" for c in gpu.cards), text
        assert gpu.vram_bytes.value == 48 * GIB - RUNTIME_RESERVE_BYTES
        assert gpu.mem_bandwidth_bytes_per_s.value == pytest.approx(936e9)  # identical cards: the card's own
        assert gpu.name == "2x NVIDIA GeForce RTX 3090" and gpu.matched_preset_id == "rtx-3090"
    assert split_gpu_names("3x rtx-3090,rtx-4090") == (["rtx-3090"] * 3 + ["rtx-4090"], None)
    assert cards_of(get_gpu_preset("rtx-3090")) == (get_gpu_preset("rtx-3090"),)


def test_mixed_cards_weigh_bandwidth_by_memory():
    gpu = get_gpu_preset("rtx-3090,rtx-4060-ti-16gb")
    a, b = gpu.cards
    w_a, w_b = float(a.vram_bytes.value), float(b.vram_bytes.value)
    expected = (w_a + w_b) / (w_a / float(a.mem_bandwidth_bytes_per_s.value) + w_b / float(b.mem_bandwidth_bytes_per_s.value))
    assert gpu.mem_bandwidth_bytes_per_s.value == pytest.approx(expected)
    assert float(b.mem_bandwidth_bytes_per_s.value) < expected < float(a.mem_bandwidth_bytes_per_s.value)
    assert gpu.name == "NVIDIA GeForce RTX 3090 + NVIDIA GeForce RTX 4060 Ti 16GB"


@pytest.mark.parametrize("text, says", [
    ("rtx-3090,", "empty card name"), ("0x rtx-3090", "at least one"), ("17x rtx-3090", "more than 16"),
    ("rtx-4090@rocm", "does not run on llama.cpp's ROCm backend"), ("rx-7900-xtx@metal", "unknown llama.cpp backend"),
    ("rtx-3090,rx-7900-xtx", "different llama.cpp backends"), ("arc-a770", "more than one memory size"),
])
def test_bad_gpu_lists_are_one_line_errors(text, says):
    with pytest.raises(CopeInputError) as err:
        get_gpu_preset(text)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_amd_and_intel_presets_cite_the_vendor_page_and_name_their_backend():
    wanted = {"rx-7900-xtx": ("AMD", "ROCm", 24, 960e9, 4, 16), "rx-7900-xt": ("AMD", "ROCm", 20, 800e9, 4, 16),
              "rx-9070-xt": ("AMD", "ROCm", 16, 640e9, 5, 16), "radeon-pro-w7900": ("AMD", "ROCm", 48, 864e9, 4, 16),
              "mi50-32gb": ("AMD", "ROCm", 32, 1024e9, 4, 16), "mi100": ("AMD", "ROCm", 32, 1228.8e9, 4, 16),
              "arc-b580": ("Intel", "SYCL", 12, 456e9, 4, 8), "arc-a770-16gb": ("Intel", "SYCL", 16, 560e9, 4, 16)}
    table = gpu_presets()
    for pid, (vendor, back, gib, bw, gen, lanes) in wanted.items():
        g = table[pid]
        assert (g.vendor, g.backend, g.vram_bytes.value, g.mem_bandwidth_bytes_per_s.value, g.pcie_gen.value,
                g.pcie_lanes.value) == (vendor, back, gib * GIB, bw, gen, lanes), pid
        host = "amd.com" if vendor == "AMD" else "intel.com"
        for fact in (g.vram_bytes, g.mem_bandwidth_bytes_per_s, g.pcie_gen, g.pcie_lanes):
            assert f"https://www.{host}/" in fact.note, (pid, fact.note)
        assert "Vulkan" in g.backends
    assert table["rtx-3090"].vendor == "NVIDIA" and table["rtx-3090"].backend == "CUDA"
    assert get_gpu_preset("RX 7900 XTX").preset_id == "rx-7900-xtx"
    assert get_gpu_preset("rx-7900-xtx@vulkan").backend == "Vulkan"
    assert get_gpu_preset("2x mi50-32gb").cards[1].backend == "ROCm"


def test_buffer_names_and_graphs_follow_the_backends():
    assert [buffer_name(b, 1) for b in ("CUDA", "rocm", "VULKAN", "sycl")] == ["CUDA1", "ROCm1", "Vulkan1", "SYCL1"]
    assert uses_graphs("CUDA") and uses_graphs("ROCm") and not uses_graphs("Vulkan") and not uses_graphs("SYCL")


def test_pcie_speeds_read_as_generations():
    assert [pcie_gen(s) for s in ("2.5 GT/s PCIe", "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe", "junk")] \
        == [1, 3, 4, 5, None]


def _card(root: Path, n: int, address: str, files: dict[str, str], parents: tuple[str, ...] = ()) -> None:
    """/sys/class/drm/cardN/device -> /sys/devices/pci0000:00/<parents>/<address>, and /sys/bus/pci/devices."""
    real = root / "devices" / "pci0000:00"
    for p in (*parents, address):
        real = real / p
    real.mkdir(parents=True)
    for name, text in files.items():
        (real / name).write_text(text + "\n")
    (root / "class" / "drm" / f"card{n}").mkdir(parents=True)
    os.symlink(real, root / "class" / "drm" / f"card{n}" / "device")
    (root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    os.symlink(real, root / "bus" / "pci" / "devices" / address)


AMD_FILES = {"vendor": "0x1002", "device": "0x744c", "class": "0x030000", "mem_info_vram_total": str(24 * GIB),
             "mem_info_vram_used": str(GIB), "max_link_speed": "16.0 GT/s PCIe", "max_link_width": "16",
             "current_link_speed": "2.5 GT/s PCIe", "current_link_width": "16"}


def test_sysfs_lists_amd_cards_with_memory_and_link_and_says_what_it_cannot_read(tmp_path):
    _card(tmp_path, 0, "0000:03:00.0", AMD_FILES, parents=("0000:00:01.1", "0000:01:00.0", "0000:02:00.0"))
    _card(tmp_path, 1, "0000:04:00.0", {**AMD_FILES, "max_link_width": "8"},
          parents=("0000:00:01.1", "0000:01:00.0", "0000:02:01.0"))
    _card(tmp_path, 2, "0000:05:00.0", {"vendor": "0x8086", "device": "0xe20b", "class": "0x030000",
                                        "max_link_speed": "16.0 GT/s PCIe", "max_link_width": "8"},
          parents=("0000:00:03.1",))
    _card(tmp_path, 3, "0000:06:00.0", {"vendor": "0x10de", "class": "0x030000"}, parents=("0000:00:03.2",))
    (tmp_path / "class" / "drm" / "card0-DP-1").mkdir()  # a connector, not a card
    names = {"0000:03:00.0": "Radeon RX 7900 XTX"}

    def run(argv):  # rocm-smi answers, amd-smi is absent
        if argv[0] != "rocm-smi":
            return None
        return json.dumps({f"card{i}": {"Card Series": name, "PCI Bus": bus} for i, (bus, name) in enumerate(names.items())})

    gpus, notes = sysfs_gpus(tmp_path, run)
    assert [g.vendor for g in gpus] == ["AMD", "AMD", "Intel"]  # NVIDIA's come from NVML
    xtx, other, arc = gpus
    assert xtx.name == "Radeon RX 7900 XTX" and xtx.matched_preset_id == "rx-7900-xtx"
    assert xtx.vram_bytes == Fact.detected(24 * GIB, "sysfs mem_info_vram_total (amdgpu)")
    assert xtx.vram_free_bytes.value == 23 * GIB and xtx.pcie_gen.value == 4 and xtx.pcie_lanes.value == 16
    assert xtx.pcie_gen_current.value == 1 and xtx.mem_bandwidth_bytes_per_s.value == 960e9  # from the preset
    assert xtx.backend == "ROCm" and xtx.pci_address == "0000:03:00.0"
    assert other.name == "AMD GPU (PCI device 0x744c)" and other.pcie_lanes.value == 8 and other.matched_preset_id is None
    assert not arc.vram_bytes.known and any("keeps no mem_info_vram_total" in n for n in notes)
    links = shared_links(gpus, tmp_path)
    assert len(links) == 1 and "GPU 0 (0000:03:00.0) and GPU 1 (0000:04:00.0) share the PCIe switch at 0000:01:00.0" in links[0]
    text = render_gpu_list(detect_gpus(nvml=None, sys_root=tmp_path, run=run))
    assert "GPU 0: Radeon RX 7900 XTX (AMD; llama.cpp ROCm0) 24.0 GiB, 23.0 GiB free; PCIe gen4 x16 at most, gen1 x16 now" in text
    assert "GPU 1: AMD GPU (PCI device 0x744c) (AMD; llama.cpp ROCm1)" in text and "llama.cpp SYCL0" in text
    assert "not read: NVML not available" in text and "share the PCIe switch" in text


def test_amd_smi_names_cards_before_rocm_smi(tmp_path):
    _card(tmp_path, 0, "0000:03:00.0", AMD_FILES)
    out = json.dumps([{"gpu": 0, "asic": {"market_name": "AMD Radeon RX 7900 XTX"}, "bus": {"bdf": "0000:03:00.0"}}])
    gpus, _ = sysfs_gpus(tmp_path, lambda argv: out if argv[0] == "amd-smi" else None)
    assert gpus[0].name == "AMD Radeon RX 7900 XTX" and gpus[0].matched_preset_id == "rx-7900-xtx"


def test_no_drm_tree_is_said_not_raised(tmp_path):
    gpus, notes = sysfs_gpus(tmp_path / "nothing", lambda argv: None)
    assert gpus == [] and "AMD and Intel GPUs not looked for" in notes[0]


class FakeNvml:
    """Two NVIDIA devices as pynvml shows them."""

    def nvmlInit(self): pass

    def nvmlShutdown(self): pass

    def nvmlDeviceGetCount(self): return 2

    def nvmlDeviceGetHandleByIndex(self, i): return i

    def nvmlDeviceGetPciInfo(self, handle): return SimpleNamespace(busId=f"00000000:0{handle + 1}:00.0".encode())


def test_every_nvml_device_is_listed_with_its_pci_address():
    seen = []

    def detect(i):
        seen.append(i)
        return get_gpu_preset("rtx-3090")

    gpus, notes = nvml_gpus(FakeNvml(), detect)
    assert seen == [0, 1] and notes == [] and [g.pci_address for g in gpus] == ["0000:01:00.0", "0000:02:00.0"]
    gpus, notes = nvml_gpus(None, detect)
    assert gpus == [] and "NVML not available" in notes[0]
