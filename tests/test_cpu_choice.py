"""The CPU a plan uses: --cpu (preset, name, '2x'), --memory, --ram-bandwidth, this machine and
the bandwidth `cope detect` measured and stored for it."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import replace

import pytest

import probes.host as host
from cope_tui.cli import EXIT_INPUT, EXIT_OK, main
from cope_tui.options import PlanChoices
from cope_tui.service.hardware import plan_cpu as service_plan_cpu, remember_cpu_bandwidth
from cope_tui.service.request import build_request
from engine.core.errors import CopeInputError
from engine.hardware.bandwidth_store import BandwidthCacheWarning
from engine.hardware.cpu_choice import plan_cpu, split_sockets
from engine.hardware.memory_spec import parse_memory_spec
from engine.hardware.platform import CpuSpec, Fact, Platform, unknown_gpu

GiB = 1024**3


def detected_7950x(**changes) -> CpuSpec:
    """This machine as probes.host.detect_cpu describes a Ryzen 9 7950X box whose DIMMs it cannot read."""
    d = Fact.detected
    none = Fact.unknown("not detected: /sys/firmware/dmi/entries/17-*/raw is readable by root only")
    cpu = CpuSpec(
        name="AMD Ryzen 9 7950X 16-Core Processor", preset_id=None,
        physical_cores=d(16, "cpuinfo"), logical_threads=d(32, "affinity"), ram_bytes=d(64 * GiB, "meminfo"),
        ram_available_bytes=d(60 * GiB, "meminfo"), mem_bandwidth_bytes_per_s=Fact.unknown("not measured; run the probes"),
        numa_nodes=d(1, "sysfs"), sockets=d(1, "cpuinfo"), memory_type=none, memory_speed_mts=none,
        memory_channels=none, mem_peak_bytes_per_s=none,
    )
    return replace(cpu, **changes)


@pytest.fixture
def this_machine(tmp_path, monkeypatch):
    """A private cache and a fixed machine id, so stored measurements are this test's alone."""
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(host, "machine_id", lambda roots=(): "test-machine-id")
    return tmp_path / "cache"


def measured_platform(value: float = 71.3e9) -> Platform:
    cpu = detected_7950x(mem_bandwidth_bytes_per_s=Fact.measured(
        value, "multi-threaded read bandwidth: 16 threads at once, numpy max-reductions of a uint32 array of 512 MiB"))
    return Platform(gpu=unknown_gpu("test"), cpu=cpu)


# --- presets and names ----------------------------------------------------------------


def test_a_preset_with_memory_plans_with_the_given_memory():
    plan = plan_cpu("AMD Ryzen 9 7950X", parse_memory_spec("ddr5-6000x2"), None, None, detected=None)
    c = plan.cpu
    assert c.preset_id == "ryzen-9-7950x" and c.physical_cores.basis == "preset"
    bw = c.mem_bandwidth_bytes_per_s
    assert (bw.value, bw.basis) == (pytest.approx(96e9), "given") and "--memory ddr5-6000x2" in bw.note
    assert (c.memory_speed_mts.value, c.memory_speed_mts.basis) == (6000, "given")
    assert not plan.assumed  # nothing about the memory was assumed


def test_a_preset_without_memory_says_it_assumed_the_usual_one():
    plan = plan_cpu("epyc-9355", None, None, None, detected=None)
    assert plan.cpu.mem_bandwidth_bytes_per_s.value == pytest.approx(576e9)
    [line] = plan.assumed
    assert "12 x DDR5-6000" in line and "--memory" in line


def test_ram_bandwidth_wins_over_memory_and_keeps_the_memory_facts():
    plan = plan_cpu("ryzen-7-9700x", parse_memory_spec("ddr5-6000x2"), 78.0, None, detected=None)
    bw = plan.cpu.mem_bandwidth_bytes_per_s
    assert (bw.value, bw.basis) == (78e9, "given") and "--ram-bandwidth 78" in bw.note
    assert plan.cpu.mem_peak_bytes_per_s.value == pytest.approx(96e9)


def test_a_name_that_is_no_preset_needs_memory_in_one_line():
    with pytest.raises(CopeInputError) as err:
        plan_cpu("Apple M3 Max", None, None, 12, detected=None)
    msg = str(err.value)
    assert "\n" not in msg and "not a CPU preset" in msg and "--memory" in msg and "--ram-bandwidth" in msg


def test_a_name_that_is_no_preset_is_told_everything_it_lacks_at_once():
    # Neither memory nor cores: both asked for in the one message, not one per try.
    with pytest.raises(CopeInputError) as err:
        plan_cpu("Apple M2 Ultra", None, None, None, detected=None)
    msg = str(err.value)
    assert "--memory" in msg and "--threads N" in msg and "\n" not in msg


def test_a_mistyped_cpu_preset_gets_the_closest_preset():
    with pytest.raises(CopeInputError, match=r"'ryzen-9-7950xx' is not a CPU preset \(did you mean ryzen-9-7950x\?\)"):
        plan_cpu("ryzen-9-7950xx", None, None, None, detected=None)


def test_a_name_that_is_no_preset_takes_cores_from_threads_or_the_preset_it_names():
    plan = plan_cpu("Apple M3 Max", parse_memory_spec("lpddr5x-8533x512bit"), None, 12, detected=None)
    c = plan.cpu
    assert c.name == "Apple M3 Max" and c.preset_id is None
    assert (c.physical_cores.value, c.physical_cores.basis) == (12, "given")
    assert c.mem_bandwidth_bytes_per_s.value == pytest.approx(546.112e9)
    assert not c.ram_bytes.known and "--ram-gib" in c.ram_bytes.note
    vm = plan_cpu("AMD EPYC 9355 (VM with 56 of 64 threads)", None, 500.0, None, detected=None).cpu
    assert (vm.physical_cores.value, vm.physical_cores.basis) == (32, "assumed") and "epyc-9355" in vm.physical_cores.note
    with pytest.raises(CopeInputError, match=r"Say its cores \(--threads N; -t N in a command to estimate\)"):
        plan_cpu("Apple M3 Max", None, 400.0, None, detected=None)


def test_two_sockets_double_cores_and_ram_but_not_bandwidth():
    one = plan_cpu("Intel Xeon Gold 6454S", None, None, None, detected=None).cpu
    plan = plan_cpu("2x Intel Xeon Gold 6454S", None, None, None, detected=None)
    two = plan.cpu
    assert two.name == "2x Intel Xeon Gold 6454S" and two.sockets.value == 2 and two.numa_nodes.value == 2
    assert two.physical_cores.value == 2 * one.physical_cores.value == 64
    assert two.ram_bytes.value == 2 * one.ram_bytes.value
    assert two.mem_bandwidth_bytes_per_s.value == one.mem_bandwidth_bytes_per_s.value == pytest.approx(307.2e9)
    assert "one socket" in two.mem_bandwidth_bytes_per_s.note and "--numa distribute" in two.mem_bandwidth_bytes_per_s.note
    assert any("one socket's of the 2" in a for a in plan.assumed)
    assert split_sockets("2 x EPYC 9654") == (2, "EPYC 9654")
    with pytest.raises(CopeInputError, match="1 to 8 sockets"):
        split_sockets("16x EPYC 9654")


def test_memory_the_preset_cannot_take_is_refused_naming_the_flag():
    with pytest.raises(CopeInputError, match=r"^--memory ddr4-3200x2: the AMD Ryzen 9 9950X takes DDR5"):
        plan_cpu("9950x", parse_memory_spec("ddr4-3200x2"), None, None, detected=None)


# --- this machine ---------------------------------------------------------------------


def test_this_machine_without_a_measurement_assumes_its_presets_usual_memory():
    plan = plan_cpu(None, None, None, None, detected=detected_7950x())
    bw = plan.cpu.mem_bandwidth_bytes_per_s
    assert (bw.value, bw.basis) == (pytest.approx(83.2e9), "assumed")
    assert "ryzen-9-7950x" in bw.note and "not detected" in bw.note
    assert any("cope detect" in a and "--memory" in a for a in plan.assumed)


def test_this_machine_with_detected_dimms_plans_with_their_peak():
    cpu = host.with_memory_facts(detected_7950x(), host.MemoryFacts(
        Fact.detected("DDR5", "dmidecode -t 17, 2 DIMMs"), Fact.detected(6000, "dmidecode"),
        Fact.detected(2, "dmidecode"), 2))
    plan = plan_cpu(None, None, None, None, detected=cpu)
    bw = plan.cpu.mem_bandwidth_bytes_per_s
    assert (bw.value, bw.basis) == (pytest.approx(96e9), "detected")


def test_this_machine_with_memory_given():
    plan = plan_cpu(None, parse_memory_spec("ddr5-6400x2"), None, None, detected=detected_7950x())
    assert plan.cpu.mem_bandwidth_bytes_per_s.basis == "given" and plan.cpu.name.startswith("AMD Ryzen 9 7950X")
    assert plan.cpu.mem_bandwidth_bytes_per_s.value == pytest.approx(102.4e9)


def test_the_stored_measurement_is_used_by_advise_with_its_date(this_machine):
    path = remember_cpu_bandwidth(measured_platform(71.3e9), now=dt.datetime(2025, 3, 4, 5, 6, 7, tzinfo=dt.timezone.utc))
    assert path is not None and path.is_file() and str(path).startswith(str(this_machine))
    assert json.loads(path.read_text())["how"].startswith("multi-threaded read bandwidth")

    request = build_request(PlanChoices(tokens=20, gpu="rtx-4090"), detect_cpu=detected_7950x)
    bw = request.platform.cpu.mem_bandwidth_bytes_per_s
    assert (bw.value, bw.basis) == (71.3e9, "measured") and "2025-03-04" in bw.note
    said = [n for n in request.notes if "measured on this machine" in n]
    assert len(said) == 1 and "2025-03-04" in said[0] and "71.3 GB/s" in said[0]
    assert not any("assumed CPU memory bandwidth" in n for n in request.notes)

    # --memory, --ram-bandwidth or --cpu say otherwise: the measurement is not used.
    for choices in (PlanChoices(tokens=20, gpu="rtx-4090", memory=parse_memory_spec("ddr5-6000x2")),
                    PlanChoices(tokens=20, gpu="rtx-4090", ram_bandwidth_gbps=80.0),
                    PlanChoices(tokens=20, gpu="rtx-4090", cpu="ryzen-9-7950x")):
        other = build_request(choices, detect_cpu=detected_7950x).platform.cpu.mem_bandwidth_bytes_per_s
        assert other.basis != "measured"


def test_a_measurement_of_another_machine_is_not_used(this_machine, monkeypatch):
    remember_cpu_bandwidth(measured_platform())
    monkeypatch.setattr(host, "machine_id", lambda roots=(): "another-machine")
    plan = service_plan_cpu(PlanChoices(), detect_cpu=detected_7950x)
    assert plan.cpu.mem_bandwidth_bytes_per_s.basis == "assumed"
    more_ram = lambda: detected_7950x(ram_bytes=Fact.detected(128 * GiB, "meminfo"))  # noqa: E731
    monkeypatch.setattr(host, "machine_id", lambda roots=(): "test-machine-id")
    assert service_plan_cpu(PlanChoices(), detect_cpu=more_ram).cpu.mem_bandwidth_bytes_per_s.basis == "assumed"
    assert service_plan_cpu(PlanChoices(), detect_cpu=detected_7950x).cpu.mem_bandwidth_bytes_per_s.basis == "measured"


def test_an_unreadable_stored_file_is_ignored(this_machine):
    path = remember_cpu_bandwidth(measured_platform())
    path.write_text("{not json")
    with pytest.warns(BandwidthCacheWarning, match="not valid JSON.*not used, moved to"):
        cpu = service_plan_cpu(PlanChoices(), detect_cpu=detected_7950x).cpu
    assert cpu.mem_bandwidth_bytes_per_s.basis == "assumed"
    assert not path.exists()  # set aside, so the next run does not warn again


def test_nothing_is_stored_without_a_measurement(this_machine):
    assert remember_cpu_bandwidth(Platform(gpu=unknown_gpu("t"), cpu=detected_7950x())) is None
    assert not (this_machine / "machine").exists()


# --- the command line -------------------------------------------------------------------


def _advise(capsys, *args):
    code = main(["advise", "--json", "--tokens", "20", "--gpu", "rtx-4090", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--cpu", "Apple M3 Max"], "--cpu 'Apple M3 Max' is not a CPU preset"),
        (["--cpu", "Apple M3 Max", "--memory", "ddr5-4800x2"], "--threads"),
        (["--memory", "ddr5x2", "--cpu", "7950x"], "--memory"),
        (["--memory", "ddr4-3200x2", "--cpu", "7950x"], "takes DDR5"),
        (["--ram-bandwidth", "fast", "--cpu", "7950x"], "--ram-bandwidth"),
        (["--ram-bandwidth", "0", "--cpu", "7950x"], "--ram-bandwidth"),
        (["--cpu", "16x 7950x"], "sockets"),
    ],
)
def test_bad_cpu_and_memory_flags_give_one_line(capsys, args, needle):
    code, out, err = _advise(capsys, *args)
    assert code == EXIT_INPUT and out == ""
    assert err.count("\n") == 1 and needle in err


def test_cli_plans_for_a_named_cpu_with_its_memory(capsys):
    code, out, err = _advise(capsys, "--cpu", "2x Xeon Gold 6454S", "--memory", "DDR5-4800x8", "--ram-gib", "1024")
    assert code == EXIT_OK, err
    doc = json.loads(out)
    cpu = doc["inputs"]["platform"]["cpu"]
    assert cpu["name"] == "2x Intel Xeon Gold 6454S"
    assert cpu["mem_bandwidth_bytes_per_s"]["value"] == pytest.approx(307.2e9)
    assert cpu["mem_bandwidth_bytes_per_s"]["basis"] == "given"
    assert cpu["sockets"]["value"] == 2 and cpu["memory_channels"]["value"] == 8


def test_cope_detect_keeps_its_measurement_and_advise_then_uses_it(this_machine, monkeypatch, capsys):
    import probes.detect as detect

    monkeypatch.setattr(detect, "detect_platform", lambda measure=True, progress=None: measured_platform(64.0e9))
    assert main(["detect", "--json"]) == EXIT_OK
    err = capsys.readouterr().err
    assert "kept the measured CPU memory bandwidth" in err
    [kept] = list((this_machine / "machine").glob("cpu-bandwidth-*.json"))
    assert json.loads(kept.read_text())["bytes_per_s"] == 64.0e9
    monkeypatch.setattr(host, "detect_cpu", detected_7950x)
    code, out, err = _advise(capsys, "--threads", "16")
    assert code == EXIT_OK, err
    doc = json.loads(out)
    bw = doc["inputs"]["platform"]["cpu"]["mem_bandwidth_bytes_per_s"]
    assert (bw["value"], bw["basis"]) == (64.0e9, "measured")
    assert any("measured on this machine by `cope detect`" in n for n in doc["notes"])


# --- one thread's read, and the CPU lane planned from measurements ------------------------


def test_one_threads_read_is_stored_and_planned_with(this_machine):
    one = Fact.measured(18.5e9, "read bandwidth: one thread, numpy max-reductions")
    platform = measured_platform(26.3e9)
    platform = replace(platform, cpu=replace(platform.cpu, thread_bandwidth_bytes_per_s=one))
    path = remember_cpu_bandwidth(platform)
    assert json.loads(path.read_text())["single_thread_bytes_per_s"] == 18.5e9

    request = build_request(PlanChoices(tokens=20, gpu="rtx-4090"), detect_cpu=detected_7950x)
    cpu = request.platform.cpu
    assert (cpu.thread_bandwidth_bytes_per_s.value, cpu.thread_bandwidth_bytes_per_s.basis) == (18.5e9, "measured")
    assert any("one thread 18.5 GB/s" in n for n in request.notes)


def test_a_file_stored_before_the_one_thread_figure_still_plans(this_machine):
    path = remember_cpu_bandwidth(measured_platform(71.3e9))
    doc = json.loads(path.read_text())
    for key in ("single_thread_bytes_per_s", "single_thread_how"):
        doc.pop(key)
    path.write_text(json.dumps(doc))
    cpu = service_plan_cpu(PlanChoices(), detect_cpu=detected_7950x).cpu
    assert cpu.mem_bandwidth_bytes_per_s.basis == "measured" and not cpu.thread_bandwidth_bytes_per_s.known


def test_a_measured_bandwidth_is_not_discounted_twice():
    """The fitted efficiency is against a theoretical peak; a measured (sustained) figure
    gets the share llama.cpp reaches of a measured read instead, and one thread's rate
    comes from one thread's measured read."""
    from engine.cost.analytic_cost import AnalyticAssumptions, AnalyticCostModel, machine_assumptions
    from engine.models.catalog import get_model
    from engine.hardware.platform import no_gpu
    from engine.models.quant import get_quantization as get_quant

    fitted = AnalyticAssumptions()
    peak = replace(detected_7950x(), mem_bandwidth_bytes_per_s=Fact.preset(96e9, "DDR5-6000 x2 peak"))
    assert machine_assumptions(peak) == fitted  # nothing measured: the published fit as is

    measured = replace(detected_7950x(), mem_bandwidth_bytes_per_s=Fact.measured(70e9, "read, 16 threads"),
                       thread_bandwidth_bytes_per_s=Fact.measured(20e9, "read, one thread"))
    a = machine_assumptions(measured)
    assert a.cpu_bandwidth_efficiency == fitted.measured_read_share
    assert a.cpu_thread_bytes_per_s == pytest.approx(fitted.measured_thread_share * 20e9)
    model = AnalyticCostModel(get_model("qwen3-30b-a3b"), get_quant("Q4_K_M"),
                              Platform(gpu=no_gpu(), cpu=measured), context_tokens=4096)
    assert model.cpu_stream_bytes_per_s(64) == pytest.approx(fitted.measured_read_share * 70e9)
    assert model.cpu_stream_bytes_per_s(1) == pytest.approx(fitted.measured_thread_share * 20e9)
    assert model.cpu_stream_bytes_per_s(64) > fitted.cpu_bandwidth_efficiency * 70e9
