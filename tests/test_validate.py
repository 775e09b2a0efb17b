"""`cope validate` with a fake prober and a fake executor: the JSON shape, refusals, the
accuracy summary per fidelity and the CPU target."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cope_tui import cli
from cope_tui.service import ground_truth, pricing
from engine.profiles.profile import Measurement
from engine.replays.policy import Kind
from probes.local_prober import GPU_OPERATORS


class FakeProber:
    cuda = False
    gpu_name = "fake"
    kernel_stand_ins = {"Q4_K_M": "fake kernel"}

    def measure(self, operator, key, share_s):
        basis = "preset" if operator in GPU_OPERATORS else "measured"
        return Measurement(operator, key, 1e-4 * (1 + key.get("n", 1)), 1e-6, 3, basis=basis)


class FakeRun:
    def __init__(self, counts, n_tokens):
        self.counts, self.n_tokens = counts, n_tokens
        self.tpot_median_s = self.experts_median_s = 0.05
        self.gpu_side = "not executed"

    def summary(self):
        return {"fake": True}


class FakeExecutor:
    """Runs all-on-CPU (as replay counts it), refuses the rest as a CPU-only machine does."""

    def __init__(self, *args):
        self.budget = None
        self.calls = []
        self.given = []  # (candidate, setup, cpu_layers) of every run

    def run(self, candidate, trace, setup, *, threads, cpu_layers=None):
        from probes.executor import GpuRequired

        self.calls.append((candidate.id, threads, self.budget))
        self.given.append((candidate, setup, cpu_layers))
        if candidate.kind is not Kind.ALL_CPU:
            raise GpuRequired(f"{candidate.id}: needs a CUDA GPU to execute for real")
        n_tokens, n_layers, k = trace.expert_ids.shape
        counts = np.zeros((n_layers, k + 1, 1), dtype=np.int64)
        counts[:, 0, 0] = n_tokens
        return FakeRun(counts, n_tokens)


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(pricing, "PROBER_FACTORY", FakeProber)
    made = []

    def factory(*args):
        made.append(FakeExecutor(*args))
        return made[-1]

    monkeypatch.setattr(ground_truth, "EXECUTOR_FACTORY", factory)
    return made


def test_validate_json_reports_every_configuration_and_fidelity(fakes, capsys):
    args = ["validate", "--json", "--threads", "1,2", "--vram-budgets", "16,24", "--tokens", "6",
            "--cpu", "desktop-ddr5", "--probe-budget", "5"]
    assert cli.main(args) == cli.EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["fidelities"] == ["analytic", "atomic", "combined"]
    assert len(doc["configurations"]) == 4
    assert {(c["threads"], c["vram_budget_gib"]) for c in doc["configurations"]} == {(1, 16), (1, 24), (2, 16), (2, 24)}
    for cfg in doc["configurations"]:
        rows = {r["candidate"]: r for r in cfg["candidates"]}
        assert rows["all-cpu"]["measured_tpot_s"] > 0 and rows["all-cpu"]["counts_match_replay"] is True
        refused = [r for r in cfg["candidates"] if r["candidate"] != "all-cpu"]
        assert refused and all(r["measured_tpot_s"] is None and "CUDA" in r["refused"] for r in refused)
        assert set(rows["all-cpu"]["estimated_tpot_s"]) == {"analytic", "atomic", "combined"}
        assert set(cfg["accuracy"]) == {"analytic", "atomic", "combined"}
        assert cfg["accuracy"]["combined"]["n_measured"] == 1
    for f in doc["fidelities"]:
        s = doc["summary"][f]
        assert s["configurations"] == 4 and s["selection_accuracy"] is None and s["mape"] is not None
    target = doc["cpu_target"]
    assert len(target["rows"]) == 4 * 3 and set(target["by_fidelity"]) == {"analytic", "atomic", "combined"}
    # the all-on-CPU candidate ran once a budget: two repeats a thread count, for each fidelity
    assert sorted((g["threads"], g["fidelity"], g["n_executions"]) for g in target["repeats"]) == sorted(
        (t, f, 2) for t in (1, 2) for f in ("analytic", "atomic", "combined"))
    for g in target["repeats"]:
        assert g["min_tpot_s"] <= g["median_tpot_s"] <= g["max_tpot_s"] and g["spread"] >= 0
    assert target["noise"] is None or "identical executions" in target["noise"]
    assert doc["probing"]["total_s"] >= 0 and {p["fidelity"] for p in doc["probing"]["runs"]} == {"atomic", "combined"}
    # one executor per model; the weights budget set per configuration
    assert len(fakes) == 1 and {b for _, _, b in fakes[0].calls if b is not None}
    # each run gets what its estimate replayed: the setup, and a partition's CPU layers
    kinds = set()
    for candidate, setup, cpu_layers in fakes[0].given:
        kinds.add(candidate.kind)
        assert setup is not None and setup.popularity.shape[0] == 48
        if candidate.kind in (Kind.PARTITION_FIRST, Kind.PARTITION_LAST):
            assert cpu_layers.dtype == bool and cpu_layers.shape == (48,) and 0 < cpu_layers.sum() < 48
        elif candidate.kind is Kind.MATRIX:
            assert cpu_layers is None and setup.total_slots > 0
            assert (setup.admit_per_hits is not None) == (candidate.execution.value == "ready-first")
    assert {Kind.MATRIX, Kind.PARTITION_FIRST, Kind.ALL_CPU} <= kinds


def test_validate_text_and_bad_flags(fakes, capsys):
    assert cli.main(["validate", "--threads", "1", "--vram-budgets", "16", "--tokens", "4", "--cpu", "desktop-ddr5",
                     "--fidelity", "analytic"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "refused" in out and "selection accuracy" in out and "CPU target" in out
    assert cli.main(["validate", "--fidelity", "exact"]) == cli.EXIT_INPUT
    assert cli.main(["validate", "--threads", "0"]) == cli.EXIT_INPUT


def test_out_is_rewritten_after_every_configuration_so_a_cut_run_keeps_its_part(fakes, tmp_path, monkeypatch):
    out = tmp_path / "validate.json"
    seen = []
    real = ground_truth._configurations

    def watched(*args, **kwargs):  # what --out holds once each configuration is done, before the next
        for config in real(*args, **kwargs):
            yield config
            doc = json.loads(out.read_text())
            seen.append((len(doc["configurations"]), doc["complete"]))

    monkeypatch.setattr(ground_truth, "_configurations", watched)
    assert cli.main(["validate", "--threads", "1,2", "--vram-budgets", "16", "--tokens", "4", "--cpu", "desktop-ddr5",
                     "--fidelity", "analytic", "--out", str(out)]) == cli.EXIT_OK
    # each configuration is on disk, marked partial, before the next one starts
    assert seen == [(1, False), (2, False)]
    doc = json.loads(out.read_text())
    assert doc["complete"] is True and len(doc["configurations"]) == 2


def test_max_seconds_stops_before_probing_the_next_thread_count(fakes, monkeypatch, capsys):
    clock = iter(range(0, 10_000, 100))  # every look at the clock: 100 s later
    monkeypatch.setattr(ground_truth.time, "perf_counter", lambda: float(next(clock)))
    probed = []
    real_choose = __import__("cope_tui.service.pricing", fromlist=["x"]).choose_cost_model

    def choose(request, **kw):  # type: ignore[no-untyped-def]
        probed.append(request.threads)
        return real_choose(request, **kw)

    monkeypatch.setattr(pricing, "choose_cost_model", choose)
    assert cli.main(["validate", "--json", "--threads", "1,2", "--vram-budgets", "16", "--tokens", "4",
                     "--cpu", "desktop-ddr5", "--fidelity", "analytic", "--max-seconds", "150"]) == cli.EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert probed == [1]  # thread count 2 was neither probed nor run
    assert any("2 threads: not probed nor run" in n for n in doc["notes"])


def test_a_candidate_that_runs_out_of_memory_is_refused_and_the_rest_still_run(fakes, monkeypatch, capsys):
    from probes.executor import OutOfDeviceMemory

    def oom_on_stage(self, candidate, trace, setup, *, threads, cpu_layers=None):  # type: ignore[no-untyped-def]
        if candidate.execution.value == "stage":
            raise OutOfDeviceMemory(f"{candidate.id}: refused: out of memory on the device (CUDA out of memory)")
        return original(self, candidate, trace, setup, threads=threads, cpu_layers=cpu_layers)

    original = FakeExecutor.run
    monkeypatch.setattr(FakeExecutor, "run", oom_on_stage)
    assert cli.main(["validate", "--json", "--threads", "1", "--vram-budgets", "16", "--tokens", "4",
                     "--cpu", "desktop-ddr5", "--fidelity", "analytic"]) == cli.EXIT_OK
    rows = json.loads(capsys.readouterr().out)["configurations"][0]["candidates"]
    refused = {r["candidate"]: r["refused"] for r in rows}
    assert any("out of memory" in (v or "") for k, v in refused.items() if "stage" in k)
    assert next(r for r in rows if r["candidate"] == "all-cpu")["measured_tpot_s"] > 0


def test_validate_reports_the_speedup_executed_against_the_one_the_probes_imply(fakes, monkeypatch, capsys):
    # The fake probe's CPU experts get faster with threads; the fake executor does not.
    def scaling_probe(self, operator, key, share_s):  # type: ignore[no-untyped-def]
        basis = "preset" if operator in GPU_OPERATORS else "measured"
        return Measurement(operator, key, 1e-4 * (1 + key.get("n", 1)) / key.get("threads", 1), 1e-6, 3, basis=basis)

    monkeypatch.setattr(FakeProber, "measure", scaling_probe)
    args = ["validate", "--threads", "1,2", "--vram-budgets", "16", "--tokens", "4", "--cpu", "desktop-ddr5",
            "--fidelity", "combined"]
    assert cli.main([*args, "--json"]) == cli.EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 1
    scaling = doc["thread_scaling"]
    assert scaling["tolerance"] == 0.15
    (row,) = [r for r in scaling["rows"] if r["candidate"] == "all-cpu"]
    assert (row["base_threads"], row["threads"], row["fidelity"], row["vram_budget_gib"]) == (1, 2, "combined", 16)
    by_threads = {c["threads"]: next(r for r in c["candidates"] if r["candidate"] == "all-cpu")
                  for c in doc["configurations"]}
    assert row["executed_base_tpot_s"] == by_threads[1]["measured_tpot_s"]
    assert row["estimated_tpot_s"] == by_threads[2]["estimated_tpot_s"]["combined"]
    assert row["achieved_speedup"] == pytest.approx(1.0)  # the fake executor takes 50 ms at any count
    assert row["implied_speedup"] == pytest.approx(by_threads[1]["estimated_tpot_s"]["combined"]
                                                   / by_threads[2]["estimated_tpot_s"]["combined"])
    assert row["implied_speedup"] > 1.3 and row["warn"] is True
    assert len(scaling["rows"]) == 1  # only all-on-CPU executed
    assert len(scaling["warnings"]) == 1 and "all-cpu" in scaling["warnings"][0] and "1 to 2 threads" in scaling["warnings"][0]
    assert cli.main(args) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert "Thread scaling" in out and "1->2 threads" in out and "WARNING" in out
    assert "warning: thread scaling: qwen3-30b-a3b all-cpu budget 16 GiB, combined: executed 1.00x" in out


def test_one_thread_count_has_no_scaling_to_report(fakes, capsys):
    assert cli.main(["validate", "--json", "--threads", "2", "--vram-budgets", "16", "--tokens", "4",
                     "--cpu", "desktop-ddr5", "--fidelity", "analytic"]) == cli.EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["thread_scaling"]["rows"] == [] and doc["thread_scaling"]["warnings"] == []



def test_validate_help_says_its_own_defaults(capsys):
    """validate overrides the plan options' defaults (32 tokens, a 30 s probe budget): its
    help says those, not the plan's 1000 and 60."""
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["validate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default 32, at most" in out and "(default 30)" in out and "(default 4096)" in out
    assert "default 1000" not in out and "(default 60)" not in out
