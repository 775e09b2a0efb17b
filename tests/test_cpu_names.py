"""The desktop, laptop and server CPUs of 2019 on by name: EPYC 4004/4005 and the 9005 gaps,
Xeon E-2200/E-2300/E-2400, Intel's laptop parts (Tiger Lake to Arrow and Lunar Lake, H, HX,
P, U and V), Core Ultra 200S without K, AMD's laptop parts (Ryzen 5000 to 9000 HX). The
names /proc/cpuinfo prints find the rows, `cope estimate` plans with the rows' own figures,
and a name no row has (a cloud-only part) is answered with the closest presets. The names of
these rows, as /proc/cpuinfo prints them and as people type them, are among
tests/test_cpu_database.py's."""

from __future__ import annotations

import pytest

from cope_tui.cli import EXIT_OK, main
from engine.core.errors import CopeInputError
from engine.hardware.cpu_compute import core_compute_of, cpu_amx, hybrid_of
from engine.hardware.cpu_presets import cpu_models, get_cpu_preset
from engine.hardware.memory_spec import parse_memory_spec


def estimate(capsys, cpu: str, *flags: str, threads: int | None = None):
    command = ["llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99", "--n-cpu-moe", "20"]
    code = main(["estimate", "--cpu", cpu, "--gpu", "rtx-4090", "--tokens", "100", *flags, "--", *command,
                 *(["-t", str(threads)] if threads else [])])
    return code, capsys.readouterr()


@pytest.mark.parametrize("pid", ["epyc-4564p", "epyc-4345p", "xeon-e-2288g", "xeon-e-2488", "core-i5-1135g7",
                                 "core-i7-12700h", "core-i9-14900hx", "core-ultra-7-155h", "core-ultra-7-258v",
                                 "ryzen-9-7945hx", "ryzen-7-5800h"])
def test_cope_estimate_plans_with_the_rows_figures(capsys, pid):
    model = cpu_models()[pid]
    code, out = estimate(capsys, model.name)
    assert code == EXIT_OK, out.err
    # without -t, the threads are llama.cpp's default: the physical cores, and on a hybrid Intel CPU its
    # P-cores (common.cpp cpu_get_num_math: cpu_count_math_cpus skips the efficiency cores, "efficiency
    # cores harm lockstep threading"); the memory the row's usual one
    hybrid = hybrid_of(get_cpu_preset(pid))
    threads = hybrid.performance.cores if hybrid is not None else model.cores
    assert f"COPE estimate: Qwen3-30B-A3B Q4_K_M, {threads} threads" in out.out
    assert f"assumed CPU memory: {model.default_memory.describe()}" in out.out
    spec = get_cpu_preset(pid)
    assert (spec.physical_cores.value, spec.logical_threads.value) == (model.cores, model.threads)
    assert spec.mem_bandwidth_bytes_per_s.value == pytest.approx(model.default_memory.peak_bytes_per_s)


def test_laptop_parts_take_their_slots_or_their_soldered_memory():
    meteor = cpu_models()["core-ultra-7-155h"]
    for spec in ("ddr5-5600x2", "lpddr5x-7467x128bit"):
        meteor.check_memory(parse_memory_spec(spec), "--memory")
    # a 128-bit LPDDR bus is eight 16-bit channels
    assert meteor.memory_channels == 8 and meteor.default_memory.text == "lpddr5x-7467x128bit"
    lunar = get_cpu_preset("core-ultra-7-258v")  # its memory is in the package
    assert lunar.mem_bandwidth_bytes_per_s.value == pytest.approx(136.5e9, rel=1e-3)
    with pytest.raises(CopeInputError, match="takes DDR5 or DDR4, not LPDDR5X"):
        cpu_models()["core-i9-14900hx"].check_memory(parse_memory_spec("lpddr5x-7467x128bit"), "--memory")
    with pytest.raises(CopeInputError, match="2 memory channels"):
        cpu_models()["epyc-4564p"].check_memory(parse_memory_spec("ddr5-5200x4"), "--memory")


@pytest.mark.parametrize(("pid", "isa", "macs"), [
    ("core-i5-1135g7", "AVX-512 VNNI", 64),  # Tiger Lake's Willow Cove
    ("core-ultra-7-155h", "AVX2 VNNI", 64), ("core-ultra-7-258v", "AVX2 VNNI", 64),
    ("xeon-e-2488", "AVX2 VNNI", 64),  # Raptor Cove with AVX-512 off
    ("xeon-e-2388g", "AVX-512 VNNI", 64),  # Rocket Lake's Cypress Cove
    ("xeon-e-2288g", "AVX2", 32),  # Coffee Lake
    ("epyc-4564p", "AVX-512 VNNI", 64), ("ryzen-7-5700u", "AVX2", 32),  # Zen 4; Lucienne is Zen 2
])
def test_the_new_rows_have_their_cores_isa(pid, isa, macs):
    core = core_compute_of(pid)
    assert (core.isa, core.int8_macs_per_cycle, core.assumed) == (isa, macs, "")
    assert cpu_amx(get_cpu_preset(pid))[0] is False


@pytest.mark.parametrize("name", ["EPYC 7B13", "AMD EPYC 7B13 64-Core Processor", "7B13"])
def test_a_cloud_only_part_is_no_preset_and_gets_the_closest_ones(capsys, name):
    assert "epyc-7b13" not in cpu_models()  # AMD publishes no product page for it
    code, out = estimate(capsys, name)
    assert code != EXIT_OK
    assert f"--cpu {name!r} is not a CPU preset (did you mean epyc-7713 or epyc-7513 or epyc-7413?)" in out.err
    # with its memory and threads said, it plans as a CPU that is no preset
    code, out = estimate(capsys, name, "--memory", "ddr4-3200x8", threads=64)
    assert code == EXIT_OK, out.err
    assert "COPE estimate: Qwen3-30B-A3B Q4_K_M, 64 threads" in out.out
