"""Every analytic figure `cope estimate` shows carries its regime's cross-validated error band
(engine/advice/error_band.py, issue 44), in the text and the JSON; measured fidelities and
policies no published run executes say why they have none."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cope_tui.cli import EXIT_OK, main
from engine.advice.error_band import (ALL_GPU, CPU_ONLY, CV_BY_REGIME, EXPERTS_ON_CPU, PARTIAL, REGIMES, band_for,
                                      placement_regime)

PLAN = ["--model", "qwen3-30b-a3b", "--cpu", "ryzen-9-7950x", "--gpu", "rtx-4060-ti-16gb", "--tokens", "20",
        "--fidelity", "analytic"]


@pytest.fixture(autouse=True)
def _empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))


def test_a_placement_is_the_regime_of_where_its_experts_are():
    none, some, every = np.zeros(48), np.r_[np.ones(20), np.zeros(28)], np.ones(48)
    assert placement_regime(none, has_gpu=True, cpu_only=False) == ALL_GPU
    assert placement_regime(some, has_gpu=True, cpu_only=False) == PARTIAL
    assert placement_regime(every, has_gpu=True, cpu_only=False) == EXPERTS_ON_CPU
    assert placement_regime(every, has_gpu=False, cpu_only=False) == CPU_ONLY
    assert placement_regime(none, has_gpu=True, cpu_only=True) == CPU_ONLY


def test_every_regime_has_a_recorded_band():
    assert set(CV_BY_REGIME) == set(REGIMES)
    for regime, band in CV_BY_REGIME.items():
        assert band.regime == regime and band.rows >= band.sources >= 1 and 0 < band.mape < 1


def test_measured_figures_and_per_expert_policies_say_why_they_have_no_band():
    assert band_for(PARTIAL, "analytic").band is CV_BY_REGIME[PARTIAL]
    calibrated = band_for(PARTIAL, "calibrated")
    assert calibrated.band is None and "measured on this machine" in calibrated.why_none
    matrix = band_for(None, "analytic")
    assert matrix.band is None and "no published run executes this policy" in matrix.why_none


@pytest.mark.parametrize("placement, regime", [(["--cpu-moe"], EXPERTS_ON_CPU), (["--n-cpu-moe", "30"], PARTIAL)])
def test_the_json_band_is_the_commands_regime_around_its_figure(capsys, placement, regime):
    command = ["llama-server", "-m", "q.gguf", "-ngl", "99", "-c", "4096", "-t", "8", *placement]
    assert main(["estimate", "--json", *PLAN, "--", *command]) == EXIT_OK
    yours = json.loads(capsys.readouterr().out)["yours"]
    band, recorded = yours["error_band"], CV_BY_REGIME[regime]
    assert band["regime"] == regime and band["cv_mape"] == recorded.mape and band["cv_rows"] == recorded.rows
    assert band["tokens_per_s_low"] == pytest.approx(yours["tokens_per_s"] * (1 - recorded.mape))
    assert band["tokens_per_s_high"] == pytest.approx(yours["tokens_per_s"] * (1 + recorded.mape))


def test_the_text_puts_the_band_under_each_figure(capsys):
    command = ["llama-server", "-m", "q.gguf", "-ngl", "99", "-c", "4096", "-t", "8", "--cpu-moe"]
    assert main(["estimate", *PLAN, "--", *command]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Your command:"))
    assert "tok/s" in lines[at + 1]
    assert lines[at + 2].strip() == f"error band: {CV_BY_REGIME[EXPERTS_ON_CPU].text()}"
    bands = [line for line in lines if line.strip().startswith("error band:")]
    priced = [line for line in lines if "ms/token" in line and "tok/s" in line]
    assert len(bands) == len(priced) >= 2


def test_every_ranked_candidate_of_advise_carries_its_band_or_why_not(capsys):
    assert main(["advise", "--json", *PLAN, "--context", "4096", "--threads", "8"]) == EXIT_OK
    candidates = json.loads(capsys.readouterr().out)["candidates"]
    kinds = {c["kind"]: c["error_band"] for c in candidates}
    assert kinds["all-cpu"]["regime"] == EXPERTS_ON_CPU and kinds["partition-first"]["regime"] == PARTIAL
    assert kinds["matrix"]["regime"] is None and "no published run executes this policy" in kinds["matrix"]["why_none"]
    for c in candidates:
        band = c["error_band"]
        if band["regime"] is not None:
            assert band["tokens_per_s_low"] == pytest.approx(c["tokens_per_s"] * (1 - band["cv_mape"]))


def test_advises_searched_commands_carry_their_band_and_a_cached_one_says_why_not(capsys):
    """The stock commands advise searches beside its ranking, and llama.cpp's own placement of
    the lead command, carry the band of where they put the experts; one that sets llama.cpp's
    expert cache has none (no published run used the cache), said in the JSON."""
    assert main(["advise", "--json", *PLAN]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    cache, default = doc["llama_cpp_cache"], doc["llama_cpp_default"]
    plain = cache["partition"]
    # the best plain partition keeps some layers' experts on the CPU: partial offload
    assert 0 < plain["host_layers"] < 48 and plain["error_band"]["regime"] == PARTIAL
    assert plain["error_band"]["cv_mape"] == CV_BY_REGIME[PARTIAL].mape
    low, high = plain["error_band"]["tokens_per_s_low"], plain["error_band"]["tokens_per_s_high"]
    assert low < plain["tokens_per_s"] < high
    cached = cache["with_cache"]
    assert cached["cache_mib"] > 0 and cached["error_band"]["regime"] is None
    assert "expert cache" in cached["error_band"]["why_none"]
    assert default["error_band"]["regime"] in (PARTIAL, EXPERTS_ON_CPU)
    assert default["error_band"]["tokens_per_s_low"] < default["tokens_per_s"]
