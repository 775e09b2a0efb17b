"""The CPU compute model of prefill: every preset has a microarchitecture and sourced clocks,
and the model's rate moves the way the hardware does (more cores never slower until the
memory bounds it, a second thread on a core adds nothing, AVX-512 never slower than AVX2)."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request
from engine.core.assets_io import load_asset_json
from engine.cost.analytic_cost import AnalyticCostModel
from engine.cost.prefill_cost import PrefillAssumptions, PrefillModel
from engine.hardware.cpu_compute import (
    CPU_COMPUTE_ASSET,
    FALLBACK_CLOCK_HZ,
    CoreCompute,
    core_compute,
    core_compute_of,
    cpu_model_id,
    cpu_peak_flops,
)
from engine.hardware.cpu_presets import cpu_models, get_cpu_preset
from engine.llamacpp.llama_args import parse_llama_command
from engine.llamacpp.llama_placement import placement_of

TABLE = load_asset_json(CPU_COMPUTE_ASSET)
FACTORS = (1.0, PrefillAssumptions().cpu_no_vnni_factor, 2.0)


def test_every_cpu_preset_has_a_microarchitecture_and_a_sourced_clock():
    assert set(TABLE["cpus"]) == set(cpu_models())
    for pid, entry in TABLE["cpus"].items():
        arch = TABLE["microarchitectures"][entry["microarchitecture"]]
        assert arch["how"].startswith("derived from the microarchitecture"), entry["microarchitecture"]
        assert 1.0e9 <= entry["base_clock_hz"] <= entry["boost_clock_hz"] <= 6.5e9, pid
        source = entry["clock_source"]
        said = re.search(r"base (?:clock|frequency) ([0-9.]+) GHz", source)
        assert said and abs(float(said.group(1)) * 1e9 - entry["base_clock_hz"]) < 1e6, pid
        assert source.startswith(("AMD ", "Intel ARK")), pid
        boost = re.search(r"(?:boost up to|max turbo frequency) ([0-9.]+) GHz", source)
        assert boost and abs(float(boost.group(1)) * 1e9 - entry["boost_clock_hz"]) < 1e6, pid
        if entry["microarchitecture"] == "intel-hybrid":  # the P-core base is recorded, the E-cores' said
            assert source.find("performance-core base") < source.find("efficient-core"), pid


def test_the_isa_classes_are_the_vendors():
    assert core_compute_of("ryzen-9-7950x").isa == "AVX-512 VNNI"  # Zen 4
    assert core_compute_of("threadripper-pro-5965wx").isa == "AVX2"  # Zen 3
    assert core_compute_of("xeon-gold-6138").isa == "AVX-512"  # Skylake-SP: VNNI came with Cascade Lake
    assert core_compute_of("epyc-9175f").clock_hz == 4.2e9


def test_unknown_cpus_and_missing_clocks_are_assumptions_that_say_so(without_recorded_clock):
    unknown = core_compute_of("no-such-cpu")
    assert unknown.source.startswith("assumed") and unknown.clock_hz == FALLBACK_CLOCK_HZ
    assert core_compute_of("ryzen-9-9950x").assumed == ""
    without_recorded_clock("ryzen-9-9950x")
    no_clock = core_compute_of("ryzen-9-9950x")
    assert "assumed: no recorded base clock" in no_clock.source and no_clock.clock_hz == FALLBACK_CLOCK_HZ
    assert "ryzen-9-9950x" in no_clock.assumed and no_clock.isa == "AVX-512 VNNI"  # the rest still known


@pytest.mark.parametrize(("pid", "macs", "clock_hz"), [
    ("ryzen-9-9950x", 64, 4.3e9),  # Zen 5, one 256-bit vpdpbusd on either of two pipes
    ("xeon-w9-3495x", 64, 1.9e9),  # Sapphire Rapids: 56 cores at a low base clock
    ("core-i9-13900k", 64, 3.0e9),  # hybrid: the P-core base, taken for every core
    ("epyc-7763", 32, 2.45e9),  # Zen 3, no VNNI
])
def test_a_preset_cpu_is_priced_at_its_recorded_base_clock(pid, macs, clock_hz):
    core = core_compute(get_cpu_preset(pid))
    assert core.assumed == ""
    assert (core.int8_macs_per_cycle, core.clock_hz) == (macs, clock_hz)
    assert core.macs_per_s == macs * clock_hz
    # A detected CPU named like the preset gets the same figures
    detected = replace(get_cpu_preset(pid), preset_id=None)
    assert core_compute(detected) == core


def test_machines_and_detected_names_find_their_cpu_model():
    assert cpu_model_id(get_cpu_preset("desktop-ddr5")) == "ryzen-9-7950x"
    detected = replace(get_cpu_preset("xeon-gold-6138"), preset_id=None, name="2x Intel Xeon Gold 6138")
    assert core_compute(detected) == core_compute_of("xeon-gold-6138")


@pytest.mark.parametrize("pid", ["ryzen-9-7950x", "xeon-gold-6138", "epyc-9355", "threadripper-pro-5965wx"])
def test_more_threads_never_slower_and_smt_adds_nothing(pid):
    cpu = get_cpu_preset(pid)
    cores = int(cpu.physical_cores.value)
    rates = [cpu_peak_flops(cpu, t) for t in range(1, int(cpu.logical_threads.value) + 1)]
    assert all(b >= a for a, b in zip(rates, rates[1:]))
    assert rates[cores - 1] > rates[0] and rates[-1] == rates[cores - 1]  # past the cores: nothing more


@pytest.mark.parametrize("factor", FACTORS)
def test_avx512_never_slower_than_avx2_at_equal_clock_and_cores(factor):
    cores = [CoreCompute(a["isa"], a["int8_macs_per_cycle"], 3e9, k) for k, a in TABLE["microarchitectures"].items()]
    wide = [c for c in cores if c.isa.startswith("AVX-512")]
    narrow = [c for c in cores if c.isa.startswith("AVX2")]
    assert wide and narrow
    for w in wide:
        for n in narrow:
            if n.vnni and not w.vnni:
                continue  # AVX-VNNI (a 256-bit one-instruction dot) against AVX-512 without it
            assert w.rate_flops_per_s(factor) >= n.rate_flops_per_s(factor), (w.source, n.source)
    # VNNI never slower than its absence at equal clock, whatever the fitted factor
    assert min(c.rate_flops_per_s(factor) for c in cores if c.vnni) >= max(
        c.rate_flops_per_s(factor) for c in cores if not c.vnni)


@pytest.fixture(scope="module")
def cpu_only():  # type: ignore[no-untyped-def]
    request = build_request(PlanChoices(tokens=200, cpu="ryzen-9-7950x", gpu="rtx-4060-ti-16gb"))
    analytic = AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens)
    placement = placement_of(parse_llama_command(["llama-server", "-ngl", "0"]), request.model, has_gpu=False)

    def tokens_per_s(threads: int, ubatch: int = 512, cpu_bytes_per_s: float | None = None) -> float:
        model = PrefillModel(request.model, request.quant, request.platform, popularity=request.profile.popularity(),
                             threads=threads, gpu_bytes_per_s=analytic.gpu_stream_bytes_per_s,
                             h2d_bytes_per_s=analytic.h2d_bytes_per_s, cpu_bytes_per_s=cpu_bytes_per_s)
        return model.prompt(placement, 512, ubatch=ubatch, has_gpu=False).tokens_per_s

    return tokens_per_s


def test_a_cpu_only_prompt_speeds_up_with_cores_until_the_memory_bounds_it(cpu_only):
    tps = np.array([cpu_only(t) for t in (1, 2, 4, 8, 16, 32)])
    assert np.all(np.diff(tps) >= 0) and tps[4] > 4 * tps[1]  # compute-bound: about linear in cores
    assert tps[5] == tps[4]  # 32 threads on 16 cores: SMT adds nothing
    # A memory that streams little: every thread count is bandwidth-bound, so all are equal
    slow = np.array([cpu_only(t, ubatch=32, cpu_bytes_per_s=1e9) for t in (4, 8, 16)])
    assert np.allclose(slow, slow[0]) and slow[0] < cpu_only(4, ubatch=32)
