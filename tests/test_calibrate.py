"""`cope calibrate` against a fake llama-bench (tests/fake_llama_bench.py) whose speeds come
from known constants: the fit recovers them, the stored file round-trips, pricing uses it,
and bad llama-bench output or a missing llama-bench give one line."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from cope_tui.cli import main
from cope_tui.options import PlanChoices
from engine.core.errors import CopeInputError
from engine.cost.analytic_cost import REFERENCE_BLOCK_KERNELS, AnalyticAssumptions
from engine.cost.calibration_io import find_calibration, from_dict, load_calibration, to_dict
from engine.hardware.presets import get_gpu_preset
from engine.llamacpp.llama_bench_json import parse_bench_output
from engine.cost.cost_model import Fidelity
from tests import tiny_gguf as tg
from tests.fake_llama_bench import FakeMachine, model_facts, write_fake

GPU = "rtx-4090"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def gguf(tmp_path):
    weights = tg.random_weights(0)
    path = tg.write_gguf(tmp_path / "tiny-qwen3moe-f32.gguf", weights)
    return path, model_facts(weights)


def _calibrate(gguf_path, bench, threads, **kw):  # type: ignore[no-untyped-def]
    from cope_tui.service.calibrate import calibrate

    return calibrate(str(gguf_path), bench=str(bench), threads=threads, **kw)


def test_cpu_only_calibration_recovers_the_thread_rate_and_block_overhead(tmp_path, cache, gguf):
    path, facts = gguf
    truth = FakeMachine(cpu_thread_bytes_per_s=2e8, cpu_block_overhead_s=300e-6, **facts)
    report = _calibrate(path, write_fake(tmp_path, truth), 2)
    cal = report.calibration
    assert [r.name for r in cal.runs] == ["cpu-only", "cpu-only-1t"]
    assert [r.threads for r in cal.runs] == [2, 1]
    fitted = cal.constants.values
    assert set(fitted) == {"cpu_thread_bytes_per_s", "cpu_block_overhead_s"}  # no GPU run: no GPU constant
    assert fitted["cpu_thread_bytes_per_s"] == pytest.approx(2e8, rel=0.03)
    assert fitted["cpu_block_overhead_s"] == pytest.approx(300e-6, rel=0.03)
    assert cal.residual_rms < 0.01
    for run in cal.runs:
        assert run.fitted_tokens_per_s == pytest.approx(run.tokens_per_s, rel=0.01)
        assert run.global_tokens_per_s > 1.5 * run.tokens_per_s  # the global constants are far off this fake
    assert any("no GPU backend" in reason for _, reason in cal.skipped)
    assert (cal.build_commit, cal.build_number, cal.backends) == ("fake123", 4242, "CPU")


@pytest.mark.parametrize("load, why", [({"busy_above": 1}, "slower than"), ({"jitter_above": 1}, "repetitions varied")],
                         ids=["slower-with-more-threads", "repetitions-disagree"])
def test_a_run_that_measured_a_busy_machine_is_not_fitted_and_says_so(tmp_path, cache, gguf, load, why):
    path, facts = gguf
    truth = FakeMachine(cpu_thread_bytes_per_s=2e8, cpu_block_overhead_s=300e-6, **load, **facts)
    cal = _calibrate(path, write_fake(tmp_path, truth), 2).calibration
    assert [r.name for r in cal.runs] == ["cpu-only-1t"]
    reason = dict(cal.skipped)["cpu-only"]
    assert why in reason and "quiet" in reason
    assert set(cal.constants.values) == {"cpu_thread_bytes_per_s"}  # one run: one constant
    assert cal.runs[0].fitted_tokens_per_s == pytest.approx(cal.runs[0].tokens_per_s, rel=0.01)


def test_when_every_run_is_noisy_calibrate_says_so_in_one_line(tmp_path, gguf, cache, capsys):
    from cope_tui.cli import main

    path, facts = gguf
    noisy = write_fake(tmp_path, FakeMachine(jitter_above=0, **facts))  # every run
    rc = main(["calibrate", "--gguf", str(path), "--llama-bench", str(noisy), "--threads", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith("cope: ") and "no llama-bench run could be used" in err[-1]
    assert "repetitions varied" in err[-1] and "--repetitions" in err[-1]


def test_repetitions_reach_llama_bench_and_one_is_refused(tmp_path, cache, gguf, capsys):
    path, facts = gguf
    cal = _calibrate(path, write_fake(tmp_path, FakeMachine(**facts)), 2, repetitions=5).calibration
    for run in cal.runs:
        assert run.argv[run.argv.index("-r") + 1] == "5"
    from cope_tui.cli import main

    rc = main(["calibrate", "--gguf", str(path), "--llama-bench", str(write_fake(tmp_path, FakeMachine(**facts))),
               "--repetitions", "1"])
    assert rc == 2 and "--repetitions: at least 2" in capsys.readouterr().err


def test_saturation_is_fitted_when_the_runs_reach_it(tmp_path, cache, gguf, monkeypatch):
    from dataclasses import replace

    import probes.host
    from engine.hardware.platform import Fact

    detect = probes.host.detect_cpu
    # An 8-core machine: more threads than this one's logical CPUs would be clamped to them.
    monkeypatch.setattr(probes.host, "detect_cpu", lambda *a, **k: replace(
        detect(*a, **k), logical_threads=Fact.detected(16, "test"), physical_cores=Fact.detected(8, "test")))
    path, facts = gguf
    truth = FakeMachine(cpu_thread_bytes_per_s=2e8, cpu_saturated_bytes_per_s=1e9, cpu_block_overhead_s=300e-6,
                        **facts)
    cal = _calibrate(path, write_fake(tmp_path, truth), 8).calibration
    assert [r.threads for r in cal.runs] == [8, 4, 1]
    fitted = cal.constants.values
    assert fitted["cpu_thread_bytes_per_s"] == pytest.approx(2e8, rel=0.03)
    assert fitted["cpu_saturated_bytes_per_s"] == pytest.approx(1e9, rel=0.03)
    assert fitted["cpu_block_overhead_s"] == pytest.approx(300e-6, rel=0.05)


def test_gpu_calibration_recovers_the_block_overhead_and_hand_over(tmp_path, cache, gguf):
    path, facts = gguf
    gpu = get_gpu_preset(GPU)
    truth = FakeMachine(gpu=True, gpu_stream_bytes_per_s=0.6 * float(gpu.mem_bandwidth_bytes_per_s.value),
                        gpu_block_overhead_s=150e-6, sync_s=250e-6, **facts)
    cal = _calibrate(path, write_fake(tmp_path, truth), 2, detect_gpu=lambda: gpu).calibration
    assert [r.name for r in cal.runs] == ["cpu-only", "all-on-gpu", "half-experts-on-cpu", "experts-on-cpu",
                                          "cpu-only-1t"]
    assert cal.gpu_name == gpu.name
    fitted = cal.constants.values
    # gpu_block_overhead_s is a block of REFERENCE_BLOCK_KERNELS kernels; the tiny model's GQA
    # block with top-2 experts launches fewer (engine.cost.analytic_cost.block_kernels), and it is
    # that block the fake machine charges 150 us
    tiny_kernels = 11 + 11 + tg.TOP_K - 1
    assert fitted["gpu_block_overhead_s"] * tiny_kernels / REFERENCE_BLOCK_KERNELS == pytest.approx(150e-6, rel=0.05)
    assert fitted["sync_s"] == pytest.approx(250e-6, rel=0.05)
    assert fitted["cpu_thread_bytes_per_s"] == pytest.approx(2e8, rel=0.03)
    ngl = [r.argv[r.argv.index("-ngl") + 1] for r in cal.runs]
    assert ngl == ["0", "99", "99", "99", "0"]
    assert cal.runs[3].argv[-2:] == ("-ncmoe", str(tg.N_BLOCKS))


def test_the_stored_file_round_trips_and_a_damaged_one_is_set_aside(tmp_path, cache, gguf):
    path, facts = gguf
    report = _calibrate(path, write_fake(tmp_path, FakeMachine(**facts)), 2)
    cal = report.calibration
    assert load_calibration(report.path) == cal
    assert from_dict(json.loads(json.dumps(to_dict(cal))), "x") == cal
    doc = json.loads(report.path.read_text())
    assert doc["runs"][0]["argv"][:3] == ["llama-bench", "-m", str(path)]
    assert doc["gguf_bytes"] == os.path.getsize(path) and doc["threads"] == 2

    doc["constants"]["cpu_thread_bytes_per_s"] = -1
    report.path.write_text(json.dumps(doc))
    found = find_calibration(cal.machine, cal.model_id, cal.quant)
    assert found.calibration is None
    assert len(found.problems) == 1 and "constants.cpu_thread_bytes_per_s" in found.problems[0]
    assert not report.path.exists() and list(report.path.parent.glob("*.corrupt-*"))


def test_pricing_uses_this_machines_calibration_and_says_so(tmp_path, cache, gguf, capsys):
    path, facts = gguf
    _calibrate(path, write_fake(tmp_path, FakeMachine(**facts)), 2)
    from cope_tui.service.advice import plan

    advice = plan(PlanChoices(model=str(path), threads=2, gpu=GPU, tokens=40))
    assert advice.pricing.fidelity.value == "calibrated"
    assert "this machine's calibration" in advice.pricing.reason
    assert advice.cost_model.a.cpu_thread_bytes_per_s == pytest.approx(2e8, rel=0.03)
    # the calibration's CPU-only run was measured on a machine without a GPU: only CPU constants apply
    assert advice.cost_model.a.gpu_block_overhead_s == pytest.approx(AnalyticAssumptions().gpu_block_overhead_s)
    analytic = plan(PlanChoices(model=str(path), threads=2, gpu=GPU, tokens=40, fidelity="analytic"))
    assert analytic.pricing.fidelity.value == "analytic"

    rc = main(["estimate", "--gpu", GPU, "--json", "--", "llama-bench", "-m", str(path), "-ngl", "0", "-t", "2",
               "-p", "0", "-n", "32"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["yours"]["fidelity"] == "calibrated"
    measured = next(r for r in json.loads((next(cache.glob("machine/calibration-*.json"))).read_text())["runs"]
                    if r["name"] == "cpu-only")
    assert doc["yours"]["tokens_per_s"] == pytest.approx(measured["tokens_per_s"], rel=0.02)
    assert "priced calibrated: this machine's calibration" in err


def test_asking_for_calibrated_without_a_calibration_is_one_line(cache, capsys):
    rc = main(["advise", "--cpu", "desktop-ddr5", "--gpu", GPU, "--tokens", "40", "--fidelity", "calibrated"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0 and "run cope calibrate --gguf FILE first" in err


def test_a_missing_gguf_is_named_before_llama_bench_is_looked_for(tmp_path, cache, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no llama-bench anywhere: the file is still what is said
    missing = tmp_path / "nope.gguf"
    rc = main(["calibrate", "--gguf", str(missing)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and str(missing) in err[0] and "no such file" in err[0]


def test_garbage_from_llama_bench_is_one_clear_line(tmp_path, cache, gguf, capsys):
    path, facts = gguf
    bench = write_fake(tmp_path, FakeMachine(output="garbage", **facts))
    rc = main(["calibrate", "--gguf", str(path), "--llama-bench", str(bench), "--threads", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith("cope: error: ") and "not llama-bench's -o json" in err[-1]
    assert not list(cache.glob("machine/calibration-*.json"))


def test_a_failing_llama_bench_is_one_line_with_its_last_words(tmp_path, cache, gguf, capsys):
    path, facts = gguf
    bench = write_fake(tmp_path, FakeMachine(output="fail", **facts))
    rc = main(["calibrate", "--gguf", str(path), "--llama-bench", str(bench), "--threads", "2"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2 and "exited with 1: error: failed to load model" in err


def test_a_missing_llama_bench_exits_2_with_one_line(tmp_path, cache, gguf, capsys):
    path, _ = gguf
    rc = main(["calibrate", "--gguf", str(path)])  # the runtime scan finds none (tests/conftest.py)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "no llama-bench found" in err
    rc = main(["calibrate", "--gguf", str(path), "--llama-bench", str(tmp_path / "nowhere")])
    assert rc == 2 and "not an executable file" in capsys.readouterr().err


def test_the_cli_prints_the_runs_and_json(tmp_path, cache, gguf, capsys):
    path, facts = gguf
    bench = write_fake(tmp_path, FakeMachine(**facts))
    assert main(["calibrate", "--gguf", str(path), "--llama-bench", str(bench), "--threads", "2"]) == 0
    text = capsys.readouterr().out
    assert "cpu-only-1t" in text
    assert main(["calibrate", "--gguf", str(path), "--llama-bench", str(bench), "--threads", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema"] == "cope-calibration" and doc["llama_bench"] == str(bench)
    # the fake machine's thread streams 0.2 GB/s; the fit finds it within 3% (beside the global constants)
    fitted = doc["constants"]["cpu_thread_bytes_per_s"]
    assert fitted == pytest.approx(2e8, rel=0.03)
    assert f"Fitted: cpu_thread_bytes_per_s {fitted / 1e9:.2f} GB/s" in text


def test_a_run_past_its_time_limit_is_skipped_and_cancel_stops(tmp_path, cache, gguf):
    import threading

    from cope_tui.service.calibrate import run_llama_bench
    from engine.advice.calibration_runs import cpu_runs
    from engine.core.progress import Cancelled

    slow = tmp_path / "slow-bench"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    run = cpu_runs("x.gguf", 2)[0]
    with pytest.raises(TimeoutError):
        run_llama_bench(str(slow), run, timeout_s=0.5)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(Cancelled):
        run_llama_bench(str(slow), run, timeout_s=30, cancel=cancel)


def test_llama_bench_json_parsing():
    good = [{"n_prompt": 0, "n_gen": 32, "n_threads": 2, "avg_ts": 12.5, "stddev_ts": 0.1, "build_commit": "abc",
             "backends": "CPU", "gpu_info": "", "cpu_info": "x", "model_type": "qwen3moe 30B.A3B Q8_0"}]
    tests = parse_bench_output(json.dumps(good))
    assert tests[0].avg_ts == 12.5 and tests[0].is_decode and not tests[0].has_gpu_backend
    assert tests[0].n_depth == 0 and tests[0].n_cpu_moe == 0  # older builds lack these fields
    for bad, says in (("", "not llama-bench's -o json"), ("[]", "non-empty"),
                      (json.dumps([{**good[0], "avg_ts": "fast"}]), "'avg_ts'"),
                      (json.dumps([{**good[0], "avg_ts": 0}]), "avg_ts is 0"),
                      ('[{"avg_ts": NaN}]', "not llama-bench's -o json")):
        with pytest.raises(CopeInputError, match=says):
            parse_bench_output(bad)
    assert replace(tests[0], backends="CUDA", gpu_info="RTX").has_gpu_backend



def test_estimate_keeps_the_fidelity_asked_for_at_the_commands_own_settings(tmp_path, cache, gguf, monkeypatch):
    # A llama-bench command decodes from depth 0, so its ranking is recomputed at its own
    # settings; a measured fidelity the person named must price it there too, not the
    # default policy (which would take this machine's calibration).
    import shlex

    from cope_tui.service import advice as service
    from engine.llamacpp.llama_args import parse_llama_command

    path, facts = gguf
    _calibrate(path, write_fake(tmp_path, FakeMachine(**facts)), 2)
    advice = service.plan(PlanChoices(model=str(path), threads=2, gpu=GPU, tokens=40, fidelity="analytic"))
    asked = []
    real = service.choose_cost_model

    def choose(request, *, fidelity=None, **kw):  # type: ignore[no-untyped-def]
        asked.append(fidelity)  # recorded, then priced analytic: no probing in a unit test
        return real(request, fidelity=Fidelity.ANALYTIC, **kw)

    monkeypatch.setattr(service, "choose_cost_model", choose)
    command = parse_llama_command(shlex.split(f"llama-bench -m {path} -ngl 0 -t 2 -p 0 -n 32"))
    service.estimate_command(advice, command, fidelity=Fidelity.ATOMIC)
    service.estimate_command(advice, command)
    assert asked == ["atomic", "analytic"]  # named: kept; not named: the advice's own (analytic) kept
