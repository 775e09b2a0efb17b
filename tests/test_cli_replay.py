"""`cope replay`: hit rates per candidate at given slots per layer or for a VRAM budget,
as a table or one JSON document, over any trace format COPE reads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cope_tui.cli import main
from cope_tui.exit_codes import EXIT_INPUT, EXIT_OK
from engine.models.catalog import get_model
from engine.replays.hit_curves import hits_of, static_step_counts
from engine.traces import load_any_trace
from engine.traces.registry import save_any_trace
from engine.traces.synthetic import SyntheticSettings, synthetic_trace

FAST = ["--cpu", "desktop-ddr5", "--gpu", "rtx-4060-ti-16gb"]


def replay_json(capsys, *args) -> dict:
    assert main(["replay", "--json", *FAST, *args]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("suffix", [".npz", ".csv", ".jsonl"])
def test_hit_rates_at_slots_per_layer_from_a_trace_file(capsys, tmp_path, suffix):
    model = get_model("olmoe-1b-7b")
    path = tmp_path / f"routing{suffix}"
    save_any_trace(synthetic_trace(model, SyntheticSettings(tokens=80, sequences=2, seed=3)), path)
    doc = replay_json(capsys, "--model", "olmoe-1b-7b", "--trace", str(path), "--slots", "12")
    rows = {row["candidate"]: row for row in doc["candidates"]}
    n_layers = model.n_moe_layers
    # Every allocation spends the same slots: 12 a layer in all.
    assert {row["slots_total"] for row in rows.values()} == {12 * n_layers}
    assert all(len(row["slots_per_layer"]) == n_layers and 0 <= row["hit_rate"] <= 1 for row in rows.values())
    # Fixed uniform residency: each layer's 12 most popular experts on the profile half.
    full = load_any_trace(str(path), model=model)
    profile_tokens = full.n_tokens - doc["tokens"]
    profile, replayed = full.slice_tokens(0, profile_tokens), full.slice_tokens(profile_tokens, full.n_tokens)
    hits = hits_of(static_step_counts(replayed.expert_ids, profile.popularity()))[:, 12].sum()
    assert rows["fixed.parallel.uniform"]["hit_rate"] == pytest.approx(hits / replayed.expert_ids.size)
    # Only mutable caches admit or prefetch.
    assert rows["fixed.stage.nonuniform"]["admissions"] == 0
    stage_lru = [row for cid, row in rows.items() if cid.startswith("layer.stage.uniform.lru")]
    assert len(stage_lru) == 1 and stage_lru[0]["admissions"] > 0  # with prefetch where the format has predictions


def test_hit_rates_for_a_budget_are_advise_s_replays(capsys):
    doc = replay_json(capsys, "--tokens", "60", "--vram-budget", "10")
    assert main(["advise", "--json", *FAST, "--tokens", "60", "--vram-budget", "10"]) == EXIT_OK
    advised = json.loads(capsys.readouterr().out)
    assert "10 GiB" in doc["basis"]
    ours = {row["candidate"]: row["hit_rate"] for row in doc["candidates"]}
    theirs = {c["id"]: c["hit_rate"] for c in advised["candidates"]}
    assert ours == pytest.approx(theirs)


def test_table_names_each_candidate_and_its_hit_rate(capsys):
    assert main(["replay", *FAST, "--tokens", "40", "--slots", "8"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "8 slots per layer" in out and "hit rate" in out
    assert "layer.stage.nonuniform.lru" in out and "%" in out


@pytest.mark.parametrize("slots, needle", [("-1", "--slots"), ("x", "--slots"), ("500", "--slots")])
def test_bad_slots_give_one_line_and_exit_2(capsys, slots, needle):
    assert main(["replay", *FAST, "--tokens", "20", "--slots", slots]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
