"""The service layer both front ends call: one options table, one cost-model policy, one
cancellation mechanism, and the same numbers from the command line and the app."""

from __future__ import annotations

import argparse
import json
import threading

import pytest

from cope_tui import cli
from cope_tui.options import PlanChoices, add_flags, app_options, check_choices, choices_from_args
from cope_tui.service import pricing
from cope_tui.service.advice import plan
from cope_tui.service.request import build_request
from engine.advice.advise import advise
from engine.core.errors import CopeInputError
from engine.core.progress import Cancelled
from engine.cost.cost_model import Fidelity
from engine.cost.cost_models import build_cost_model
from engine.profiles.profile import Measurement
from probes.local_prober import GPU_OPERATORS

FAST = PlanChoices(tokens=60, cpu="desktop-ddr5", threads=2)


class FakeProber:
    """Every operator "measured" at a made-up but size-dependent time."""

    cuda = False
    gpu_name = "fake"
    kernel_stand_ins = {"Q4_K_M": "fake kernel"}

    def measure(self, operator, key, share_s):  # type: ignore[no-untyped-def]
        basis = "preset" if operator in GPU_OPERATORS else "measured"
        seconds = 2e-4 * (1 + key.get("n", 1)) + 1e-5 * key.get("hits", 0)
        return Measurement(operator, key, seconds, 1e-6, 3, basis=basis)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(pricing, "PROBER_FACTORY", FakeProber)
    return tmp_path / "cache"


# --- the options table ----------------------------------------------------------------


def test_the_flags_come_from_the_table_and_parse_into_the_same_choices():
    parser = argparse.ArgumentParser()
    add_flags(parser)
    args = parser.parse_args(["--vram-budget", "12.5", "--context", "4096", "--eviction", "lru,score",
                              "--prefetch", "optimistic", "--reprobe", "--cpu", "desktop-ddr5"])
    choices = choices_from_args(args, threads=6)
    assert choices == PlanChoices(vram_budget_gib=12.5, context=4096, evictions=("lru", "score"),
                                  prefetch_mode="optimistic", reprobe=True, cpu="desktop-ddr5", threads=6)
    skipped = argparse.ArgumentParser()
    add_flags(skipped, skip=("context", "threads"))
    assert not hasattr(skipped.parse_args([]), "context")


@pytest.mark.parametrize(
    ("choices", "message"),
    [
        (PlanChoices(vram_budget_gib=float("nan")), "--vram-budget must be a positive number, got nan"),
        (PlanChoices(context=0), "--context must be positive, got 0"),
        (PlanChoices(seed=-1), "--seed must be at least 0, got -1"),
        (PlanChoices(evictions=()), "--eviction needs at least one rule"),
        (PlanChoices(evictions=("lfu",)), "--eviction must be among lru, score; got lfu"),
        (PlanChoices(prefetch_mode="eager"), "--prefetch must be one of timed, optimistic, got eager"),
        (PlanChoices(tokens=1), "--tokens must be at least 2, got 1"),
    ],
)
def test_every_front_end_gets_the_same_one_line_check(choices, message):
    with pytest.raises(CopeInputError, match=message.replace("(", r"\(")):
        check_choices(choices)
    with pytest.raises(CopeInputError, match=message.replace("(", r"\(")):
        build_request(choices)  # the request checks before anything loads


def test_app_inputs_are_the_table_s_with_its_parse_and_checks():
    hardware = {o.name: o for o in app_options("hardware")}
    assert set(hardware) == {"gpu", "cpu", "ram_gib", "memory", "vram_budget_gib"}
    memory = hardware["memory"].parse("ddr5-6000x2")  # given apart from the CPU, as --memory
    assert memory.peak_bytes_per_s == 96e9 and hardware["memory"].show(memory) == "ddr5-6000x2"
    with pytest.raises(CopeInputError, match="Memory: "):
        hardware["memory"].parse("ddr9-1x2")
    assert hardware["gpu"].choices is None and {"rtx-4090", "none"} <= set(hardware["gpu"].suggestions)
    assert hardware["vram_budget_gib"].parse(" 10 ") == 10.0 and hardware["vram_budget_gib"].parse("") is None
    with pytest.raises(CopeInputError, match="VRAM budget GiB: 'lots' is not a number"):
        hardware["vram_budget_gib"].parse("lots")
    with pytest.raises(CopeInputError, match="VRAM budget GiB must be a positive number"):
        hardware["vram_budget_gib"].parse("-3")
    policy = {o.name: o for o in app_options("policy")}
    assert policy["evictions"].parse("lru, score") == ("lru", "score") and policy["evictions"].multiple
    assert policy["prefetch_mode"].choices == (("timed", "timed"), ("optimistic", "optimistic"))


# --- one cost-model policy ---------------------------------------------------------------


def test_no_fidelity_prices_analytically_until_a_complete_profile_is_cached(cache):
    request = build_request(FAST)
    first = pricing.choose_cost_model(request)
    assert first.fidelity is Fidelity.ANALYTIC and first.probed is None and "no complete cached profile" in first.reason
    probed = pricing.choose_cost_model(request, fidelity=Fidelity.COMBINED, probe_budget_s=30)
    assert probed.fidelity is Fidelity.COMBINED and probed.probed.measured > 0
    assert probed.cost_model.describe().profile.from_cache is False
    again = pricing.choose_cost_model(request)  # now complete in the cache: combined, nothing probed
    assert again.fidelity is Fidelity.COMBINED and again.probed is None
    assert again.cost_model.describe().to_dict()["profile_from_cache"] is True
    assert again.profile_source == probed.profile_source


def test_an_incomplete_cached_profile_is_not_used_without_asking(cache):
    request = build_request(FAST)
    cancel = threading.Event()
    calls = []

    def stop_after_two(done, total, label):  # type: ignore[no-untyped-def]
        calls.append(label)
        if len(calls) == 2:
            cancel.set()

    outcome = pricing.probe_then_price(request, Fidelity.COMBINED, budget_s=30, progress=stop_after_two,
                                       cancel=cancel)
    assert outcome.report.stopped == "cancelled" and outcome.pricing is None and outcome.error
    assert pricing.choose_cost_model(request).fidelity is Fidelity.ANALYTIC


def test_the_registry_builds_every_fidelity_and_describes_it(cache):
    request = build_request(FAST)
    profile_pricing = pricing.choose_cost_model(request, fidelity=Fidelity.ATOMIC, probe_budget_s=30)
    assert profile_pricing.fidelity is Fidelity.ATOMIC
    profile = profile_pricing.cost_model.profile
    calibration = a_calibration(request)
    for fidelity in Fidelity:
        model = build_cost_model(fidelity, request, profile, calibration=calibration)
        described = model.describe()
        assert model.fidelity == fidelity.value == described.fidelity and described.basis
        assert described.to_dict()["fidelity"] == fidelity.value
    with pytest.raises(ValueError, match="needs a measured profile"):
        build_cost_model(Fidelity.COMBINED, request)
    with pytest.raises(ValueError, match="needs a calibration"):
        build_cost_model(Fidelity.CALIBRATED, request, profile)
    calibrated = build_cost_model(Fidelity.CALIBRATED, request, calibration=calibration)
    assert calibrated.cpu_thread_bytes_per_s == 5e9  # the calibration's, not the global fit's from the core


def a_calibration(request):  # type: ignore[no-untyped-def]
    from engine.cost.calibration import Calibration, LaneConstants, MeasuredRun

    run = MeasuredRun("cpu-only", "everything on the CPU", ("llama-bench", "-ngl", "0"), 8, False, 20.0, 0.1)
    return Calibration("0123456789abcdef", request.platform.cpu.name, "", request.model.id, request.quant.name,
                       "m.gguf", 1, 8, "2026-11-30T20:00:00+00:00", "abc", 1, "cpu", "", "CPU",
                       LaneConstants({"cpu_thread_bytes_per_s": 5e9}), (run,), 0.0)


# --- cancellation ---------------------------------------------------------------------


def test_a_set_cancel_event_stops_advise_at_a_step_boundary():
    request = build_request(FAST)
    cancel = threading.Event()
    seen = []

    def progress(done, total, label):  # type: ignore[no-untyped-def]
        seen.append(done)
        if len(seen) == 3:
            cancel.set()

    with pytest.raises(Cancelled):
        advise(request, build_cost_model(Fidelity.ANALYTIC, request), progress=progress, cancel=cancel)
    assert len(seen) == 3  # stopped at the next report, not at the end


# --- the same numbers from both front ends ------------------------------------------------



@pytest.mark.anyio
async def test_the_cli_and_the_app_give_the_same_tpot_for_the_same_inputs_and_profile(cache, capsys):
    pytest.importorskip("textual")
    from tests.test_app import make_app, make_services, settle

    # A complete profile in the cache: both front ends must price with it, unasked.
    pricing.choose_cost_model(build_request(FAST), fidelity=Fidelity.COMBINED, probe_budget_s=30)
    assert cli.main(["advise", "--json", "--tokens", "60", "--cpu", "desktop-ddr5", "--threads", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    from_cli = {c["id"]: c["tpot_s"] for c in doc["candidates"]}
    assert doc["cost_model"]["fidelity"] == "combined"

    app = make_app(make_services(), choices=FAST)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        from_app = {e.candidate.id: e.tpot_s for e in app.advice.rec.estimates}
        assert app.advice.rec.cost_model.fidelity == "combined"
    assert from_app.keys() == from_cli.keys() and len(from_app) > 10
    for cid, tpot in from_cli.items():
        assert from_app[cid] == pytest.approx(tpot, rel=1e-12), cid
    assert plan(FAST).rec.best.candidate.id == doc["recommendation"]["fastest_estimate"]


# --- small shared pieces -----------------------------------------------------------------


def test_block_spans_read_the_same_everywhere():
    from engine.core.spans import block_span

    assert block_span([0, 1, 2, 3]) == "0..3"
    assert block_span([4, 5, 9, 12, 13]) == "4..5,9,12..13"
    assert block_span([7]) == "7" and block_span([]) == "none"


def test_an_input_error_keeps_its_message_apart_from_its_place():
    exc = CopeInputError("holds no prompt", path="prompts.txt", line=3)
    assert str(exc) == "prompts.txt:3: holds no prompt" and exc.message == "holds no prompt"
    moved = exc.relabelled("org/repo/prompts.txt")
    assert str(moved) == "org/repo/prompts.txt: holds no prompt" and moved.path == "org/repo/prompts.txt"


# --- planning for the GPU this machine has ------------------------------------------------


def _detected(name="NVIDIA GeForce RTX 4090", vram_gib=24, bandwidth=True):  # type: ignore[no-untyped-def]
    from dataclasses import replace

    from engine.hardware.gpu_match import with_preset_figures
    from engine.hardware.platform import Fact, unknown_gpu

    gpu = replace(unknown_gpu("not asked"), name=name, vram_bytes=Fact.measured(vram_gib * 2**30, "NVML"),
                  vram_free_bytes=Fact.measured(vram_gib * 2**30, "NVML"))
    return with_preset_figures(gpu) if bandwidth else gpu


def test_with_no_gpu_named_the_plan_is_for_the_detected_gpu_and_says_so():
    request = build_request(FAST, detect_gpu=_detected)
    gpu = request.platform.gpu
    assert gpu.name == "NVIDIA GeForce RTX 4090" and gpu.preset_id is None and gpu.matched_preset_id == "rtx-4090"
    assert request.vram_budget_bytes == 24 * 2**30
    note = next(n for n in request.notes if n.startswith("assumed GPU:"))
    assert "detected on this machine" in note and "rtx-4090 spec sheet" in note and "--gpu PRESET" in note


def test_a_named_preset_wins_over_the_detected_gpu():
    def never():  # type: ignore[no-untyped-def]
        raise AssertionError("detection is not needed when --gpu names a card")

    request = build_request(FAST.with_(gpu="rtx-3090"), detect_gpu=never)
    assert request.platform.gpu.preset_id == "rtx-3090"


def test_no_gpu_or_one_without_figures_plans_for_the_default_preset_and_says_why():
    from engine.hardware.platform import unknown_gpu

    none = build_request(FAST, detect_gpu=lambda: unknown_gpu("NVML is not available"))
    assert none.platform.gpu.preset_id == "rtx-4060-ti-16gb"
    assert any("no GPU detected: NVML is not available" in n for n in none.notes)
    # detection's own note already says "no GPU detected": said once, not twice
    said = build_request(FAST, detect_gpu=lambda: unknown_gpu("no GPU detected: NVML could not start")).notes
    assert any("(no GPU detected: NVML could not start)" in n for n in said)
    assert not any("no GPU detected: no GPU detected" in n for n in said)
    odd = build_request(FAST, detect_gpu=lambda: _detected("NVIDIA Mystery 9000", 48, bandwidth=False))
    assert odd.platform.gpu.preset_id == "rtx-4060-ti-16gb"
    assert any("NVIDIA Mystery 9000 was detected, but COPE has no memory-bandwidth figure" in n for n in odd.notes)


def test_changing_threads_prices_from_the_nearest_measured_count_without_probing(cache, monkeypatch):
    request = build_request(FAST)  # 2 threads
    pricing.choose_cost_model(request, fidelity=Fidelity.ATOMIC, probe_budget_s=30)  # complete at 2 threads

    def no_probing(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("probed unasked")

    monkeypatch.setattr(pricing, "PROBER_FACTORY", no_probing)
    advice = plan(FAST.with_(threads=5))
    assert advice.pricing.fidelity is Fidelity.COMBINED and advice.pricing.probed is None
    note = "priced with the cached profile measured at 2 threads, the nearest to 5 (probe to measure at 5)"
    assert note in advice.rec.notes and advice.request.threads == 5
    # The stand-in prices the 5-thread request with the 2-thread measurements.
    from engine.replays.policy import Execution

    k = advice.request.model.top_k
    same = plan(FAST)
    at_5 = advice.cost_model.state_costs(Execution.SEQUENTIAL, 5, k, 0).total_s
    at_2 = same.cost_model.state_costs(Execution.SEQUENTIAL, 2, k, 0).total_s
    assert list(at_5) == list(at_2)


def test_a_cpu_without_compute_figures_says_what_its_cores_were_assumed_to_be(without_recorded_clock):
    """A thread's decode rate rests on the core's int8 peak: where COPE has no figures for
    the CPU, the plan says what it assumed; a preset, or a measured one-thread read, says nothing."""
    from dataclasses import replace

    from cope_tui.service.request import core_assumption
    from engine.hardware.cpu_presets import get_cpu_preset
    from engine.hardware.platform import Fact

    from engine.hardware.memory_spec import parse_memory_spec

    custom = build_request(PlanChoices(cpu="Mystery CPU", memory=parse_memory_spec("ddr5-6000x2"), threads=8,
                                       gpu="rtx-4060-ti-16gb"))
    assert any(n.startswith("assumed CPU core: no compute figures") and "3 GHz" in n for n in custom.notes)
    preset = build_request(PlanChoices(cpu="ryzen-9-7950x", gpu="rtx-4060-ti-16gb"))
    assert not any("CPU core" in n for n in preset.notes)
    # A preset whose base clock the asset did not record: the clock is assumed, and said.
    clocked = build_request(PlanChoices(cpu="ryzen-9-9950x", gpu="rtx-4060-ti-16gb"))
    assert not any("CPU core" in n for n in clocked.notes)
    without_recorded_clock("ryzen-9-9950x")
    unclocked = build_request(PlanChoices(cpu="ryzen-9-9950x", gpu="rtx-4060-ti-16gb"))
    assert any(n.startswith("assumed CPU core: no recorded base clock") for n in unclocked.notes)
    measured = replace(custom.platform.cpu, thread_bandwidth_bytes_per_s=Fact.measured(15e9, "read, one thread"))
    assert core_assumption(measured) is None and core_assumption(get_cpu_preset("xeon-gold-6138")) is None


def test_an_interrupted_probe_run_is_never_the_nearest_thread_count_stand_in(cache, monkeypatch):
    """A probe run stopped part way leaves its profile marked partial: plain advice at any
    thread count is then analytic (as if nothing were cached), never priced from that
    run's figures, and says why."""
    from probes.profile_cache import partial_marker
    from probes.runner import profile_key

    request = build_request(FAST)  # 2 threads
    pricing.choose_cost_model(request, fidelity=Fidelity.ATOMIC, probe_budget_s=30)  # complete at 2 threads
    assert plan(FAST.with_(threads=5)).pricing.fidelity is Fidelity.COMBINED  # the complete one stands in
    partial_marker(profile_key(request)).write_text("an interrupted probe run\n")  # as an interrupted rerun leaves it
    for threads in (2, 5):
        advice = plan(FAST.with_(threads=threads))
        assert advice.pricing.fidelity is Fidelity.ANALYTIC, threads
        assert "interrupted probe run's partial work" in advice.pricing.reason
        assert advice.rec.best.tpot_s == plan(FAST.with_(threads=threads, fidelity="analytic")).rec.best.tpot_s
