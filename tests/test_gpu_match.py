"""A detected GPU's name, as NVML and torch report it, to its preset (engine.hardware.gpu_match)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.hardware.gpu_match import preset_for_device, with_preset_figures
from engine.hardware.platform import Fact, unknown_gpu
from engine.hardware.presets import get_gpu_preset

GiB = 1024**3
MiB = 1024**2


@pytest.mark.parametrize(
    "name, vram, pid",
    [
        # names as nvidia-smi / NVML / torch.cuda.get_device_name report them, memory as the driver does
        ("NVIDIA H200", 143771 * MiB, "h200"),
        ("NVIDIA H100 80GB HBM3", 81559 * MiB, "h100-sxm"),
        ("NVIDIA H100 PCIe", 81559 * MiB, "h100-pcie"),
        ("NVIDIA B200", int(178.35 * GiB), "b200"),
        ("NVIDIA A100-PCIE-40GB", 40536 * MiB, "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", 81920 * MiB, "a100-80gb"),
        ("NVIDIA L40S", 46068 * MiB, "l40s"),
        ("NVIDIA RTX A6000", 49140 * MiB, "rtx-a6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 97887 * MiB, "rtx-pro-6000"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 97887 * MiB, "rtx-pro-6000-max-q"),
        ("NVIDIA GeForce RTX 3060", 12288 * MiB, "rtx-3060-12gb"),
        ("NVIDIA GeForce RTX 3080", 10240 * MiB, "rtx-3080"),
        ("NVIDIA GeForce RTX 3090", 24576 * MiB, "rtx-3090"),
        ("NVIDIA GeForce RTX 4060 Ti", 16380 * MiB, "rtx-4060-ti-16gb"),
        ("NVIDIA GeForce RTX 4070 Ti SUPER", 16376 * MiB, "rtx-4070-ti-super"),
        ("NVIDIA GeForce RTX 4080", 16376 * MiB, "rtx-4080"),
        ("NVIDIA GeForce RTX 4090", 24564 * MiB, "rtx-4090"),
        ("NVIDIA GeForce RTX 5060 Ti", 16311 * MiB, "rtx-5060-ti-16gb"),
        ("NVIDIA GeForce RTX 5070 Ti", 16303 * MiB, "rtx-5070-ti"),
        ("NVIDIA GeForce RTX 5080", 16303 * MiB, "rtx-5080"),
        ("NVIDIA GeForce RTX 5090", 32607 * MiB, "rtx-5090"),
        ("nvidia geforce rtx 4090", None, "rtx-4090"),  # case and memory unknown
        ("NVIDIA GeForce RTX 4090 D", 24564 * MiB, "rtx-4090d"),
        ("NVIDIA GeForce RTX 3090 Ti", 24564 * MiB, "rtx-3090-ti"),
        ("NVIDIA GeForce RTX 3080 Ti", 12288 * MiB, "rtx-3080-ti"),
        ("NVIDIA GeForce RTX 4080 SUPER", 16376 * MiB, "rtx-4080-super"),
        ("NVIDIA GeForce RTX 5070", 12227 * MiB, "rtx-5070"),
        ("NVIDIA GeForce RTX 4060 Ti", 8188 * MiB, "rtx-4060-ti-8gb"),  # one name, two cards: the memory tells
        ("NVIDIA GeForce RTX 4060 Ti", 16380 * MiB, "rtx-4060-ti-16gb"),
        ("NVIDIA GeForce GTX 1650 SUPER", 3911 * MiB, "gtx-1650-super"),
        ("GeForce RTX 2080 Ti", 11019 * MiB, "rtx-2080-ti"),  # a driver from before 2021: no vendor word
        ("NVIDIA RTX 6000 Ada Generation", 49140 * MiB, "rtx-6000-ada"),
        ("NVIDIA RTX A5000", 24564 * MiB, "rtx-a5000"),
        ("NVIDIA L4", 23034 * MiB, "l4"),
        ("NVIDIA H100 NVL", 95830 * MiB, "h100-nvl"),
        ("NVIDIA H200 NVL", 143771 * MiB, "h200-nvl"),
        ("NVIDIA A100-SXM4-80GB", 81920 * MiB, "a100-sxm4-80gb"),
        ("Tesla T4", 15360 * MiB, "t4"),
    ],
)
def test_real_device_names_find_their_preset(name, vram, pid):
    spec = preset_for_device(name, vram)
    assert spec is not None and spec.preset_id == pid


@pytest.mark.parametrize(
    "name, vram",
    [
        ("NVIDIA GeForce RTX 4090 Laptop GPU", 16376 * MiB),  # another card under a similar name
        ("NVIDIA GeForce RTX 4090 D v2", 24564 * MiB),
        ("NVIDIA GeForce RTX 5070 Laptop GPU", 8151 * MiB),
        ("NVIDIA GeForce RTX 3060", 8192 * MiB),  # the 8 GB card, 240 GB/s
        ("NVIDIA GeForce RTX 3080", 12288 * MiB),  # the 12 GB card, 912 GB/s
        ("NVIDIA GeForce RTX 5060 Ti", 8151 * MiB),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 9984 * MiB),  # a slice is not the card
        ("Tesla V100-SXM2-16GB", 16160 * MiB),
        ("", None),
    ],
)
def test_other_cards_and_variants_find_none(name, vram):
    assert preset_for_device(name, vram) is None


def test_detection_fills_only_what_it_lacks_from_the_matched_preset():
    u = Fact.unknown("torch.cuda gives no memory clock on this CUDA")
    detected = replace(unknown_gpu("x"), name="NVIDIA H200", vram_bytes=Fact.detected(143771 * MiB, "torch"),
                       sm_count=Fact.detected(132, "torch"), mem_bandwidth_bytes_per_s=u)
    g = with_preset_figures(detected)
    assert g.matched_preset_id == "h200" and g.preset_id is None
    bw = g.mem_bandwidth_bytes_per_s
    assert bw.basis == "preset" and bw.value == get_gpu_preset("h200").mem_bandwidth_bytes_per_s.value
    assert "no memory clock" in bw.note and "nvidia.com/en-us/data-center/h200" in bw.note
    assert g.sm_count.basis == "detected"  # what was detected stays
    assert g.pcie_gen.value == 5 and g.h2d_bytes_per_s.basis == "assumed"  # the link from the spec sheet
    assert with_preset_figures(replace(detected, name="Tesla T4")).matched_preset_id is None
