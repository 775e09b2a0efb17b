from __future__ import annotations

import json

import pytest

import engine.hardware.cpu_presets as cpus_mod
import engine.hardware.platform as plat
import engine.hardware.presets as presets_mod
from engine.core.errors import CopeInputError
from engine.hardware.cpu_presets import cpu_presets, get_cpu_preset
from engine.hardware.memory_spec import memory_type
from engine.hardware.platform import CpuSpec, Fact, Platform, assumed_cpu_bandwidth_bytes_per_s, derive_h2d_bytes_per_s
from engine.hardware.presets import get_gpu_preset, gpu_presets, platform_from
from probes.host import (
    BANDWIDTH_UNKNOWN_NOTE,
    count_numa_nodes,
    cpuinfo_model_name,
    cpuinfo_physical_cores,
    cpuinfo_vector_isa,
    detect_cpu,
    meminfo_bytes,
)

GiB = 1024**3

GPU_IDS = {
    # AMD and Intel (issue 33)
    "rx-7900-xtx", "rx-7900-xt", "rx-9070-xt", "radeon-pro-w7900", "mi50-32gb", "mi100", "arc-b580", "arc-a770-16gb",
    # issue 44: GPUs of published hybrid runs (ik_llama.cpp issue 2199; GoodOlClint/homelab)
    "rtx-a1000", "quadro-rtx-5000",
    # issue 44: AMD cards of published hybrid runs (mudkipdev/flake; markb-1/rx6700xt-local-ai)
    "rx-6800", "rx-6700-xt",
    "rtx-3060-12gb",
    "rtx-3080",
    "rtx-3090",
    "rtx-4060-ti-16gb",
    "rtx-4070-ti-super",
    "rtx-4080",
    "rtx-4090",
    "rtx-5060-ti-16gb",
    "rtx-5070-ti",
    "rtx-5080",
    "rtx-5090",
    "rtx-a6000",
    "rtx-pro-6000",
    "a100-40gb",
    "a100-80gb",
    "h100-pcie",
    "h100-sxm",
    "h200",
    "b200",
    "l40s",
    # added with the hardware descriptions (GeForce 16/20/30/40/50, workstation, datacenter)
    "gtx-1650-super", "gtx-1660-super", "rtx-2060", "rtx-2060-super", "rtx-2070", "rtx-2070-super", "rtx-2080",
    "rtx-2080-super", "rtx-2080-ti", "titan-rtx", "rtx-3050", "rtx-3060-ti", "rtx-3070", "rtx-3070-ti", "rtx-3080-ti",
    "rtx-3090-ti", "rtx-4060", "rtx-4070", "rtx-4070-super", "rtx-4070-ti", "rtx-4080-super", "rtx-4090d", "rtx-5050",
    "rtx-5060", "rtx-5070", "rtx-5090d", "rtx-a4000", "rtx-a4500", "rtx-a5000", "rtx-a5500", "rtx-2000-ada",
    "rtx-4000-sff-ada", "rtx-4000-ada", "rtx-4500-ada", "rtx-5000-ada", "rtx-6000-ada", "rtx-pro-6000-max-q", "t4",
    "a10", "a40", "l4", "l40", "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-nvl", "h200-nvl",
    "gb10",  # the DGX Spark (unified memory)
    "rtx-4060-ti-8gb",  # the 8 GB variant, named like the 16 GB card
}


@pytest.fixture
def fresh_presets():
    """Clear the preset caches around a test that swaps the loader."""
    caches = (gpu_presets, cpus_mod.cpu_models, cpus_mod.machines, cpus_mod.cpu_presets)
    for c in caches:
        c.cache_clear()
    yield
    for c in caches:
        c.cache_clear()


# --- GPU presets ------------------------------------------------------------------


def test_all_gpu_presets_load_with_positive_figures_and_a_source():
    presets = gpu_presets()
    assert set(presets) == GPU_IDS
    for pid, g in presets.items():
        assert g.preset_id == pid and g.name
        for fact in (g.vram_bytes, g.mem_bandwidth_bytes_per_s, g.pcie_gen, g.pcie_lanes, g.sm_count):
            assert fact.basis == "preset"
            assert fact.value > 0
            assert "https://" in fact.note and g.vendor.lower() in fact.note.lower()  # each figure cites its source
        assert g.device_names, pid  # a detected card can find its preset
        assert g.h2d_bytes_per_s.value > 0
        assert g.vram_free_bytes.value == g.vram_bytes.value
        assert g.vram_free_bytes.basis == "assumed" and g.vram_free_bytes.note
        json.dumps(g.to_dict())  # serialisable


@pytest.mark.parametrize(
    "pid, vram_bytes, bandwidth, gen, lanes, sms",
    [
        ("rtx-4090", 24 * GiB, 1008e9, 4, 16, 128),
        ("rtx-5090", 32 * GiB, 1792e9, 5, 16, 170),
        ("rtx-3060-12gb", 12 * GiB, 360e9, 4, 16, 28),
        ("rtx-4060-ti-16gb", 16 * GiB, 288e9, 4, 8, 34),
        ("a100-40gb", 40 * GiB, 1555e9, 4, 16, 108),
        ("a100-80gb", 80 * GiB, 1935e9, 4, 16, 108),
        ("h100-pcie", 80 * GiB, 2000e9, 5, 16, 114),
        ("l40s", 48 * GiB, 864e9, 4, 16, 142),
        ("h100-sxm", 80 * GiB, 3350e9, 5, 16, 132),
        ("h200", 141 * GiB, 4800e9, 5, 16, 132),
        ("b200", 180 * GiB, 8000e9, 5, 16, 148),
        ("rtx-pro-6000", 96 * GiB, 1792e9, 5, 16, 188),
        ("rtx-a6000", 48 * GiB, 768e9, 4, 16, 84),
        ("rtx-3080", 10 * GiB, 760e9, 4, 16, 68),
        ("rtx-5060-ti-16gb", 16 * GiB, 448e9, 5, 8, 36),
        ("rtx-5070-ti", 16 * GiB, 896e9, 5, 16, 70),
        ("rtx-3090-ti", 24 * GiB, 1008e9, 4, 16, 84),
        ("rtx-4090d", 24 * GiB, 1008e9, 4, 16, 114),
        ("rtx-5070", 12 * GiB, 672e9, 5, 16, 48),
        ("gtx-1650-super", 4 * GiB, 192e9, 3, 16, 20),
        ("rtx-2080-ti", 11 * GiB, 616e9, 3, 16, 68),
        ("rtx-pro-6000-max-q", 96 * GiB, 1792e9, 5, 16, 188),
        ("rtx-6000-ada", 48 * GiB, 960e9, 4, 16, 142),
        ("l4", 24 * GiB, 300e9, 4, 16, 58),
        ("a100-sxm4-80gb", 80 * GiB, 2039e9, 4, 16, 108),
        ("h100-nvl", 94 * GiB, 3900e9, 5, 16, 132),
        ("t4", 16 * GiB, 320e9, 3, 16, 40),
    ],
)
def test_gpu_preset_matches_spec_sheet(pid, vram_bytes, bandwidth, gen, lanes, sms):
    g = gpu_presets()[pid]
    assert g.vram_bytes.value == vram_bytes
    assert g.mem_bandwidth_bytes_per_s.value == pytest.approx(bandwidth)
    assert (g.pcie_gen.value, g.pcie_lanes.value, g.sm_count.value) == (gen, lanes, sms)


def test_h2d_derived_from_pcie_gen4_x16_and_x8():
    x16 = gpu_presets()["rtx-4090"].h2d_bytes_per_s
    assert x16.basis == "assumed"
    assert x16.value == pytest.approx(1.969e9 * 16 * 0.8)  # about 25.2 GB/s
    assert "assumed" in x16.note and "0.8" in x16.note and "gen4 x16" in x16.note
    x8 = gpu_presets()["rtx-4060-ti-16gb"].h2d_bytes_per_s
    assert x8.value == pytest.approx(1.969e9 * 8 * 0.8)
    gen5 = derive_h2d_bytes_per_s(Fact.preset(5, "s"), Fact.preset(16, "s"))
    assert gen5.value == pytest.approx(3.938e9 * 16 * 0.8)
    assert not derive_h2d_bytes_per_s(Fact.unknown("x"), Fact.preset(16, "s")).known


def test_measured_h2d_in_the_asset_is_kept(monkeypatch, fresh_presets):
    data = presets_mod.load_asset_json("gpus.json")
    data["gpus"][0]["h2d_bytes_per_s"] = 24.5e9
    data["gpus"][0]["h2d_source"] = "nvbandwidth on a test box"
    monkeypatch.setattr(presets_mod, "load_asset_json", lambda name: data)
    g = gpu_presets()[data["gpus"][0]["id"]]
    assert g.h2d_bytes_per_s == Fact(24.5e9, "measured", "nvbandwidth on a test box")


@pytest.mark.parametrize(
    "query, pid",
    [
        ("rtx-4090", "rtx-4090"),
        ("RTX-4090", "rtx-4090"),
        ("rtx4090", "rtx-4090"),
        ("4090", "rtx-4090"),
        ("RTX 4090", "rtx-4090"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("RTX 4070 Ti SUPER", "rtx-4070-ti-super"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("h100 sxm", "h100-sxm"),
        ("H200", "h200"),
        ("b200", "b200"),
        ("RTX PRO 6000", "rtx-pro-6000"),
        ("A6000", "rtx-a6000"),
        ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
        ("A100 80GB", "a100-80gb"),
        ("L40S", "l40s"),
        # as the published measurements name them, memory size included
        ("RTX 3090 Ti 24GB", "rtx-3090-ti"),
        ("RTX 4090D 24GB", "rtx-4090d"),
        ("RTX 5070 (12GB)", "rtx-5070"),
        ("GTX 1650 SUPER 4GB", "gtx-1650-super"),
        ("RTX PRO 6000 Blackwell Max-Q 96GB", "rtx-pro-6000-max-q"),
        ("RTX A6000 48GB", "rtx-a6000"),
        ("RTX 3060 12GB", "rtx-3060-12gb"),
        ("rtx 4060 ti 16gb", "rtx-4060-ti-16gb"),
        ("5060 Ti 16GB", "rtx-5060-ti-16gb"),
        ("RTX 6000 Ada", "rtx-6000-ada"),
    ],
)
def test_gpu_lookup_variants(query, pid):
    assert get_gpu_preset(query).preset_id == pid


@pytest.mark.parametrize("query, pid", [("rtx 3060", "rtx-3060-12gb"), ("4060 Ti", "rtx-4060-ti-16gb or rtx-4060-ti-8gb"),
                                        ("rtx-5060-ti", "rtx-5060-ti-16gb")])
def test_a_card_sold_in_several_memory_sizes_needs_its_size(query, pid):
    # The RTX 5060 Ti also comes with 8 GB, which has no preset: the bare name must not
    # quietly plan for the 16 GB card's VRAM and bandwidth; the RTX 4060 Ti has both.
    with pytest.raises(CopeInputError, match=f"comes in more than one memory size; name it with its memory, e.g. {pid}"):
        get_gpu_preset(query)


def test_a_mistyped_preset_name_gets_the_closest_names():
    with pytest.raises(CopeInputError, match=r"unknown GPU preset 'rtx-4900' \(did you mean rtx-4090 or"):
        get_gpu_preset("rtx-4900")


def test_a_memory_size_the_card_does_not_have_finds_nothing():
    with pytest.raises(CopeInputError, match="unknown GPU preset 'RTX 4090 16GB'"):
        get_gpu_preset("RTX 4090 16GB")


def test_gpu_lookup_unknown_lists_known_ids():
    with pytest.raises(CopeInputError) as err:
        get_gpu_preset("rtx 9999")
    msg = str(err.value)
    assert "rtx 9999" in msg and "rtx-4090" in msg and "l40s" in msg


def test_gpu_lookup_ambiguous():
    # Variants that differ only in memory say so and list the sizes.
    with pytest.raises(CopeInputError, match="more than one memory size.*a100-40gb or a100-80gb"):
        get_gpu_preset("A100")
    with pytest.raises(CopeInputError, match="ambiguous.*h100-pcie.*h100-sxm"):
        get_gpu_preset("h100")


# --- CPU presets ------------------------------------------------------------------


def test_cpu_presets_load():
    presets = cpu_presets()
    assert {"desktop-ddr4", "desktop-ddr5", "intel-desktop-ddr5", "workstation", "server-epyc"} <= set(presets)
    for pid, c in presets.items():
        assert c.preset_id == pid
        for fact in (c.physical_cores, c.logical_threads, c.ram_bytes, c.mem_bandwidth_bytes_per_s, c.numa_nodes,
                     c.sockets, c.memory_speed_mts, c.memory_channels, c.mem_peak_bytes_per_s):
            assert fact.basis == "preset" and fact.value > 0 and fact.note
        assert c.memory_type.basis == "preset" and memory_type(str(c.memory_type.value)) is not None
        assert c.logical_threads.value >= c.physical_cores.value
    assert presets["desktop-ddr4"].mem_bandwidth_bytes_per_s.value == pytest.approx(51.2e9)
    assert presets["desktop-ddr5"].mem_bandwidth_bytes_per_s.value == pytest.approx(96e9)
    assert presets["intel-desktop-ddr5"].mem_bandwidth_bytes_per_s.value == pytest.approx(89.6e9)
    assert presets["workstation"].mem_bandwidth_bytes_per_s.value == pytest.approx(166.4e9)
    epyc = presets["server-epyc"]
    assert epyc.mem_bandwidth_bytes_per_s.value == pytest.approx(460.8e9)
    assert (epyc.physical_cores.value, epyc.logical_threads.value, epyc.ram_bytes.value) == (96, 192, 768 * GiB)


@pytest.mark.parametrize(
    "query, pid",
    [
        ("desktop-ddr5", "desktop-ddr5"),
        ("Desktop DDR5", "desktop-ddr5"),
        ("intel desktop ddr5", "intel-desktop-ddr5"),
        ("AMD Ryzen 9 7950X", "ryzen-9-7950x"),
        ("5800x", "ryzen-7-5800x"),
        ("i9-13900K", "core-i9-13900k"),
        ("Threadripper 7980X", "threadripper-7980x"),
        ("EPYC 9654", "epyc-9654"),
    ],
)
def test_cpu_lookup_variants(query, pid):
    assert get_cpu_preset(query).preset_id == pid


def test_cpu_lookup_unknown():
    with pytest.raises(CopeInputError, match="unknown CPU preset 'm3-max'.*desktop-ddr5"):
        get_cpu_preset("m3-max")


# --- corrupt assets -----------------------------------------------------------------


def _gpu_data_with(**changes):
    data = presets_mod.load_asset_json("gpus.json")
    data["gpus"][1].update(changes)
    return data


@pytest.mark.parametrize(
    "change, field",
    [
        ({"vram_bytes": -1}, "vram_bytes"),
        ({"vram_bytes": "24 GB"}, "vram_bytes"),
        ({"mem_bandwidth_bytes_per_s": None}, "mem_bandwidth_bytes_per_s"),
        ({"pcie_gen": 7}, "pcie_gen"),
        ({"pcie_lanes": 12}, "pcie_lanes"),
        ({"source": ""}, "source"),
        ({"sm_count": True}, "sm_count"),
    ],
)
def test_corrupt_gpu_asset_names_asset_and_field(monkeypatch, fresh_presets, change, field):
    data = _gpu_data_with(**change)
    monkeypatch.setattr(presets_mod, "load_asset_json", lambda name: data)
    with pytest.raises(CopeInputError) as err:
        gpu_presets()
    msg = str(err.value)
    assert "gpus.json" in msg and field in msg and data["gpus"][1]["id"] in msg


@pytest.mark.parametrize("sources", [None, "https://nvidia.com", {"vram_bytes": "https://a"},
                                     {k: "the vendor said so" for k in plat.GPU_FIGURES}])
def test_a_gpu_figure_without_its_source_is_refused(monkeypatch, fresh_presets, sources):
    data = _gpu_data_with(sources=sources)
    monkeypatch.setattr(presets_mod, "load_asset_json", lambda name: data)
    with pytest.raises(CopeInputError, match=r"gpus\.json.*sources"):
        gpu_presets()


def test_corrupt_asset_top_level(monkeypatch, fresh_presets):
    monkeypatch.setattr(cpus_mod, "load_asset_json", lambda name: {"schema_version": 1, "cpus": []})
    with pytest.raises(CopeInputError, match=r"cpus\.json.*schema_version"):
        cpu_presets()
    monkeypatch.setattr(presets_mod, "load_asset_json", lambda name: {"schema_version": 1, "gpus": "x"})
    with pytest.raises(CopeInputError, match=r"gpus\.json.*gpus"):
        gpu_presets()


def test_corrupt_cpu_asset_names_asset_and_field(monkeypatch, fresh_presets):
    data = presets_mod.load_asset_json("cpus.json")
    del data["cpus"][0]["physical_cores"]
    monkeypatch.setattr(cpus_mod, "load_asset_json", lambda name: data)
    with pytest.raises(CopeInputError, match=r"cpus\.json.*ryzen-5-3500.*physical_cores"):
        cpu_presets()


def test_duplicate_ids_rejected(monkeypatch, fresh_presets):
    data = presets_mod.load_asset_json("gpus.json")
    data["gpus"][1]["id"] = data["gpus"][0]["id"]
    monkeypatch.setattr(presets_mod, "load_asset_json", lambda name: data)
    with pytest.raises(CopeInputError, match="duplicate"):
        gpu_presets()


# --- host detection parsers ---------------------------------------------------------

# Two sockets, two cores each, two hyperthreads per core: 8 logical CPUs, 4 physical cores.
CPUINFO_2S_HT = "\n".join(
    f"processor\t: {p}\n"
    "vendor_id\t: GenuineIntel\n"
    "model name\t: Intel(R) Xeon(R) Gold 6130  CPU @ 2.10GHz\n"
    f"physical id\t: {sock}\n"
    "siblings\t: 4\n"
    f"core id\t\t: {core}\n"
    "cpu cores\t: 2\n"
    for p, (sock, core) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1), (0, 0), (0, 1), (1, 0), (1, 1)])
)

CPUINFO_ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd
CPU implementer\t: 0x41

processor\t: 1
BogoMIPS\t: 50.00
"""

MEMINFO = """MemTotal:       65536000 kB
MemFree:        10000000 kB
MemAvailable:   50000000 kB
Buffers:          200000 kB
Cached:          3000000 kB
HugePages_Total:       0
"""


def test_cpuinfo_two_sockets_with_hyperthreads():
    assert cpuinfo_physical_cores(CPUINFO_2S_HT) == 4
    assert cpuinfo_model_name(CPUINFO_2S_HT) == "Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz"
    # Only the logical CPUs this process may use: 0 and 4 are siblings of one core.
    assert cpuinfo_physical_cores(CPUINFO_2S_HT, allowed={0, 4}) == 1
    assert cpuinfo_physical_cores(CPUINFO_2S_HT, allowed={0, 1, 2}) == 3


def test_cpuinfo_without_core_ids():
    assert cpuinfo_physical_cores(CPUINFO_ARM) is None
    assert cpuinfo_model_name(CPUINFO_ARM) is None
    assert cpuinfo_physical_cores("") is None


@pytest.mark.parametrize("flags, isa", [
    ("fpu sse2 avx avx2 fma", "AVX2"),
    ("avx2 avx512f avx512bw avx512vl", "AVX-512"),  # Skylake-SP: no VNNI
    ("avx2 avx512f avx512vl avx512_vnni", "AVX-512 VNNI"),  # Zen 4, Sapphire Rapids
    ("avx2 avx_vnni", "AVX2 VNNI"),  # Alder Lake
    ("avx2 avx512f avx512_vnni", "AVX-512"),  # VNNI without VL: not the 256-bit form ggml uses
    ("sse2 avx", None),
])
def test_the_vector_isa_comes_from_the_flags(flags, isa):
    assert cpuinfo_vector_isa(f"processor\t: 0\nflags\t\t: {flags}\n") == isa
    assert cpuinfo_vector_isa(CPUINFO_ARM) is None


def test_a_detected_cpu_no_preset_knows_is_priced_by_its_flags_and_base_clock(tmp_path):
    """Neither name is a preset: the core's MACs a cycle follow the flags, the clock the
    model name or cpufreq's base_frequency, and the decode lane follows the core."""
    from engine.hardware.cpu_compute import core_compute

    proc = tmp_path / "proc"
    proc.mkdir()
    flags = "flags\t\t: avx2 avx512f avx512vl avx512_vnni\n"
    (proc / "cpuinfo").write_text(CPUINFO_2S_HT.replace("Gold 6130 ", "Gold 9999 ").replace("cpu cores", flags + "cpu cores"))
    (proc / "meminfo").write_text(MEMINFO)
    cpu = detect_cpu(proc, tmp_path / "sys")
    core = core_compute(cpu)
    assert (cpu.vector_isa.value, cpu.base_clock_hz.value) == ("AVX-512 VNNI", 2.1e9)
    assert (core.int8_macs_per_cycle, core.clock_hz) == (64, 2.1e9) and core.source.startswith("detected: ")
    freq = tmp_path / "sys" / "devices" / "system" / "cpu" / "cpu0" / "cpufreq"
    freq.mkdir(parents=True)
    (freq / "base_frequency").write_text("3500000\n")
    assert core_compute(detect_cpu(proc, tmp_path / "sys")).clock_hz == 3.5e9
    (proc / "cpuinfo").write_text(CPUINFO_2S_HT.replace(" @ 2.10GHz", "").replace("cpu cores", "flags\t\t: avx2\ncpu cores"))
    (freq / "base_frequency").unlink()
    bare = core_compute(detect_cpu(proc, tmp_path / "sys"))
    assert (bare.int8_macs_per_cycle, bare.clock_hz) == (32, 3e9) and bare.source.startswith("assumed: 3 GHz")


def test_meminfo_parser():
    m = meminfo_bytes(MEMINFO)
    assert m["MemTotal"] == 65536000 * 1024
    assert m["MemAvailable"] == 50000000 * 1024
    assert m["HugePages_Total"] == 0


def test_numa_node_count():
    assert count_numa_nodes(["node0", "node1", "online", "possible", "has_cpu", "power"]) == 2
    assert count_numa_nodes(["online"]) is None


def test_detect_cpu_on_fake_roots(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cpuinfo").write_text(CPUINFO_2S_HT)
    (proc / "meminfo").write_text(MEMINFO.replace("MemAvailable:   50000000 kB\n", ""))
    nodes = tmp_path / "sys" / "devices" / "system" / "node"
    for n in ("node0", "node1", "online"):
        (nodes / n).mkdir(parents=True)
    cpu = detect_cpu(proc, tmp_path / "sys")
    assert cpu.name.startswith("Intel(R) Xeon(R) Gold 6130")
    assert cpu.physical_cores.basis == "detected"
    assert cpu.ram_bytes.value == 65536000 * 1024
    # No MemAvailable: free + buffers + cache.
    assert cpu.ram_available_bytes.value == (10000000 + 200000 + 3000000) * 1024
    assert cpu.numa_nodes.value == 2
    assert cpu.mem_bandwidth_bytes_per_s == Fact.unknown(BANDWIDTH_UNKNOWN_NOTE)


def test_detect_cpu_with_missing_files_never_raises(tmp_path):
    cpu = detect_cpu(tmp_path / "no-proc", tmp_path / "no-sys")
    assert cpu.logical_threads.value > 0
    assert cpu.physical_cores.basis == "assumed" and "unreadable" in cpu.physical_cores.note
    assert not cpu.ram_bytes.known and cpu.ram_bytes.note
    assert not cpu.ram_available_bytes.known
    assert not cpu.numa_nodes.known
    json.dumps(cpu.to_dict())


def test_detect_cpu_on_this_machine():
    cpu = detect_cpu()
    assert isinstance(cpu, CpuSpec) and cpu.name
    assert cpu.logical_threads.value > 0
    assert cpu.logical_threads.basis == "detected"
    if cpu.physical_cores.known:
        assert 0 < cpu.physical_cores.value <= cpu.logical_threads.value or cpu.physical_cores.basis == "assumed"
    assert cpu.mem_bandwidth_bytes_per_s.basis == "unknown"
    json.dumps(cpu.to_dict())


# --- assumptions and platform_from ----------------------------------------------------


def _cpu(cores, threads=None, bandwidth=None):
    u = Fact.unknown("test")
    return CpuSpec(
        name="test CPU",
        preset_id=None,
        physical_cores=Fact.detected(cores, "test") if cores else u,
        logical_threads=Fact.detected(threads, "test") if threads else u,
        ram_bytes=u,
        ram_available_bytes=u,
        mem_bandwidth_bytes_per_s=Fact.measured(bandwidth, "test") if bandwidth else Fact.unknown("not measured"),
        numa_nodes=u,
    )


def test_assumed_cpu_bandwidth():
    desk = assumed_cpu_bandwidth_bytes_per_s(_cpu(8, 16))
    assert desk.basis == "assumed" and desk.value == pytest.approx(89.6e9)
    assert "DDR5-5600" in desk.note and "not measured" in desk.note
    assert assumed_cpu_bandwidth_bytes_per_s(_cpu(24, 32)).value == pytest.approx(89.6e9)
    big = assumed_cpu_bandwidth_bytes_per_s(_cpu(64, 128))
    assert big.value > desk.value and big.basis == "assumed"
    assert assumed_cpu_bandwidth_bytes_per_s(_cpu(96, 192)).value > big.value
    assert assumed_cpu_bandwidth_bytes_per_s(_cpu(None, 16)).value == pytest.approx(89.6e9)
    unknown = assumed_cpu_bandwidth_bytes_per_s(_cpu(None, None))
    assert unknown.value == pytest.approx(89.6e9) and "unknown" in unknown.note
    measured = _cpu(8, 16, bandwidth=70e9)
    assert assumed_cpu_bandwidth_bytes_per_s(measured) is measured.mem_bandwidth_bytes_per_s


def test_platform_from_choices():
    detected = _cpu(8, 16)
    p = platform_from("rtx 4090", "workstation", detected)
    assert isinstance(p, Platform)
    assert p.gpu.preset_id == "rtx-4090" and p.cpu.preset_id == "workstation"

    p = platform_from("5090", None, detected)
    assert p.cpu.name == "test CPU"
    assert p.cpu.mem_bandwidth_bytes_per_s.basis == "assumed"
    assert p.cpu.mem_bandwidth_bytes_per_s.value == pytest.approx(89.6e9)

    p = platform_from(None, None, None)
    assert p.cpu.preset_id == "desktop-ddr5"
    assert not p.gpu.vram_bytes.known and p.gpu.vram_bytes.note
    d = p.to_dict()
    assert d["cpu"]["mem_bandwidth_bytes_per_s"] == {
        "value": 96e9,
        "basis": "preset",
        "note": p.cpu.mem_bandwidth_bytes_per_s.note,
    }
    json.dumps(d)


def test_fact_rules():
    with pytest.raises(ValueError):
        Fact(1, "guessed", "x")
    with pytest.raises(ValueError):
        Fact(None, "preset", "x")
    assert Fact.unknown("why").to_dict() == {"value": None, "basis": "unknown", "note": "why"}
