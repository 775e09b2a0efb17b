"""The replay budget and arrays sized by need (issue 32, part d).

A request's work is tokens x MoE layers x top-k routed slots; past COPE_MAX_REPLAY_SLOTS
(16 M by default) it is refused in one line naming the figures, before anything is drawn.
Within it, the synthetic generator, the trace's checks and the replay's one-pass counts
work a chunk (of tokens, or of layers) at a time; real models get exactly the numbers the
whole-array code gave (tests/synthetic_reference.py keeps that code as the oracle).
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from cope_tui.exit_codes import EXIT_INPUT
from engine.core.errors import CopeInputError
from engine.core.input_limits import DEFAULT_MAX_REPLAY_SLOTS, check_replay_slots, most_replay_tokens
from engine.models.catalog import get_model
from engine.replays import hit_curves, replay_common
from engine.replays.hit_curves import static_counts_at, static_step_counts
from engine.replays.replay_common import TraceArrays
from engine.traces import synthetic
from engine.traces.synthetic import SyntheticSettings, synthetic_trace
from engine.traces.trace import RoutingTrace, TraceMeta
from tests.synthetic_reference import reference_arrays

QWEN_CONFIG = {"model_type": "qwen3_moe", "num_experts": 128, "num_experts_per_tok": 8, "hidden_size": 2048,
               "num_hidden_layers": 48, "vocab_size": 151936, "moe_intermediate_size": 768,
               "intermediate_size": 6144, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128}
ANALYTIC = ["--gpu", "rtx-4090", "--fidelity", "analytic"]


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    from cope_tui.cli import main

    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


def config(tmp_path, **change) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**QWEN_CONFIG, **change}))
    return str(path)


# --- the budget ---------------------------------------------------------------------------


@pytest.mark.parametrize("layers,experts,k,slots,most", [(1024, 256, 64, "655M", 244), (64, 4096, 64, "41.0M", 3906)])
def test_every_cap_at_once_is_refused_in_one_line_naming_the_figures(cli, tmp_path, layers, experts, k, slots, most):
    model = config(tmp_path, num_hidden_layers=layers, num_experts=experts, num_experts_per_tok=k)
    code, out, err = cli("advise", "--model", model, *ANALYTIC, "--tokens", "10000")
    lines = err.strip().splitlines()
    assert code == EXIT_INPUT and out == "" and len(lines) == 1, err
    assert lines[0] == (f"cope: error: --tokens 10000: with {layers:,} MoE layers x top-k {k} that would replay "
                        f"{slots} routed slots (tokens x layers x top-k), more than the 16M a request may "
                        f"(COPE_MAX_REPLAY_SLOTS): lower --tokens (at most {most:,} with this model)")


def test_a_shape_at_every_cap_runs_within_the_budget(cli, tmp_path):
    model = config(tmp_path, num_hidden_layers=64, num_experts=4096, num_experts_per_tok=64)
    code, out, err = cli("advise", "--model", model, *ANALYTIC, "--tokens", "20", "--json")
    assert code == 0, err
    doc = json.loads(out)
    trace = doc["inputs"]["trace"]
    assert trace["layers"] == 64 and trace["top_k"] == 64 and trace["tokens"] == 20 and doc["candidates"]


def test_the_budget_is_the_product_and_its_limit_is_inclusive(monkeypatch):
    check_replay_slots(DEFAULT_MAX_REPLAY_SLOTS // 752, 94, 8, what="x", remedy="y")  # Qwen3-235B-A22B
    assert most_replay_tokens(94, 8) == 21_276 and 21_276 * 752 <= DEFAULT_MAX_REPLAY_SLOTS < 21_277 * 752
    check_replay_slots(21_276, 94, 8, what="x", remedy="y")
    with pytest.raises(CopeInputError, match=r"^x: with 94 MoE layers x top-k 8 that would replay 16.0M routed"):
        check_replay_slots(21_277, 94, 8, what="x", remedy="y")
    monkeypatch.setenv("COPE_MAX_REPLAY_SLOTS", "1000")
    assert most_replay_tokens(10, 4) == 25
    with pytest.raises(CopeInputError, match=r"more than the 1,000 a request may"):
        check_replay_slots(26, 10, 4, what="x", remedy="y")
    monkeypatch.setenv("COPE_MAX_REPLAY_SLOTS", "lots")
    with pytest.raises(CopeInputError, match=r"COPE_MAX_REPLAY_SLOTS='lots': expected a whole number"):
        check_replay_slots(1, 1, 1, what="x", remedy="y")


def test_a_lowered_budget_refuses_a_catalog_model_and_names_its_most_tokens(cli, monkeypatch):
    monkeypatch.setenv("COPE_MAX_REPLAY_SLOTS", "100000")
    code, _, err = cli("advise", "--model", "qwen3-30b-a3b", *ANALYTIC, "--tokens", "1000")
    assert code == EXIT_INPUT and "Traceback" not in err, err
    assert err.strip().endswith("more than the 100,000 a request may (COPE_MAX_REPLAY_SLOTS): lower --tokens "
                                "(at most 260 with this model)"), err  # 48 MoE layers x top-8: 384 a token


def test_a_given_trace_over_the_budget_is_refused_naming_it(cli, tmp_path, monkeypatch):
    from engine.traces.cope_npz import save_trace

    trace = synthetic_trace(get_model("qwen3-30b-a3b"), SyntheticSettings(tokens=400, seed=1))
    path = tmp_path / "t.cope.npz"
    save_trace(trace, path)
    monkeypatch.setenv("COPE_MAX_REPLAY_SLOTS", "50000")  # the replayed 200 tokens are 76,800 slots
    code, _, err = cli("advise", "--model", "qwen3-30b-a3b", *ANALYTIC, "--trace", str(path))
    assert code == EXIT_INPUT, err
    line = err.strip().splitlines()[-1]
    assert str(path) in line and "76,800 routed slots" in line and "give a shorter trace" in line, line


def test_the_replay_itself_keeps_the_budget_for_any_caller(monkeypatch):
    from engine.replays.policy import policy_matrix
    from engine.replays.replay import ReplaySetup, replay_many

    monkeypatch.setenv("COPE_MAX_REPLAY_SLOTS", "100")
    ids = np.zeros((26, 2, 2), dtype=np.int16)
    ids[:, :, 1] = 1
    setup = ReplaySetup(np.ones((2, 4)), 4, 0)
    with pytest.raises(CopeInputError, match=r"a replay of 26 tokens: .* 104 routed slots .* replay fewer tokens"):
        replay_many(ids, None, [(policy_matrix(prefetch_available=False)[0], setup)])


# --- real models: the same numbers -------------------------------------------------------


@pytest.mark.parametrize("model_id,tokens", [("qwen3-30b-a3b", 600), ("kimi-k2-instruct", 300),
                                             ("qwen3.5-397b-a17b", 260), ("deepseek-v2-lite-chat", 300)])
def test_the_generator_draws_exactly_what_the_whole_array_one_drew(model_id, tokens):
    model = get_model(model_id)
    for settings in (SyntheticSettings(tokens=tokens, seed=3, sequences=2),
                     SyntheticSettings(tokens=tokens, seed=4, locality=0.0, predictor_accuracy=0.5)):
        trace = synthetic_trace(model, settings)
        ids, weights, predicted = reference_arrays(model, settings)
        assert np.array_equal(trace.expert_ids, ids)
        assert np.array_equal(trace.weights, weights)
        assert np.array_equal(trace.predicted_ids, predicted)


def test_a_forged_shape_is_drawn_in_small_chunks_and_stays_valid():
    from tests.factories import tiny_model

    model = tiny_model(model_id="forged-64x4096-top64", moe_blocks=tuple(range(64)), experts=4096, k=64,
                       hidden=256, expert_ffn=64)
    assert synthetic._chunk_tokens(64, 4096) == 32  # 256 tokens would draw 268 MiB at once, three times over
    tracemalloc.start()
    try:
        trace = synthetic_trace(model, SyntheticSettings(tokens=80, seed=0, sequences=2))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    held = trace.expert_ids.nbytes + trace.weights.nbytes + trace.predicted_ids.nbytes  # 8 bytes a slot
    # the chunk's draws (32 MiB of float32 keys, their int64 partition) beside the trace's own arrays; the
    # whole-array generator held [80, 64, 4096] float32 three times (256 MiB) and 8-byte copies of every slot
    assert peak < held + 160 * 2**20, (peak >> 20, held >> 20)
    sorted_ids = np.sort(trace.expert_ids, axis=2)
    assert not np.any(sorted_ids[:, :, 1:] == sorted_ids[:, :, :-1])
    assert 0 <= trace.predicted_ids[:, :-1].min() and trace.predicted_ids.max() < 4096


def test_a_repeated_expert_in_a_late_chunk_is_still_refused():
    ids = np.tile(np.arange(4, dtype=np.int16), (70_000, 8, 1))  # 70,000 tokens: several chunks of the check
    ids[69_999, 5, 3] = ids[69_999, 5, 0]
    meta = TraceMeta(model="m", source="late.npz", origin="imported", n_experts=8, moe_blocks=tuple(range(8)))
    with pytest.raises(CopeInputError, match="late.npz: a token routes to the same expert twice"):
        RoutingTrace(expert_ids=ids, meta=meta)


def test_static_counts_a_group_of_layers_at_a_time_equal_every_capacity_at_once(monkeypatch):
    rng = np.random.default_rng(5)
    n_tokens, n_layers, n_experts, k = 300, 7, 12, 3
    ids = np.stack([np.stack([rng.choice(n_experts, k, replace=False) for _ in range(n_layers)])
                    for _ in range(n_tokens)]).astype(np.int16)
    popularity = rng.random((n_layers, n_experts))
    whole = static_step_counts(ids, popularity)
    capacities = rng.integers(0, n_experts + 3, size=(5, n_layers))  # above E counts as E
    wanted = whole[np.arange(n_layers)[None, :], np.minimum(capacities, n_experts)]
    assert np.array_equal(static_counts_at(ids, popularity, capacities), wanted)
    monkeypatch.setattr(hit_curves, "_STATIC_CELLS", 2 * (n_experts + 1) * (k + 2))  # groups of 2 layers
    assert len(hit_curves._layer_groups(n_layers, n_experts, k)) == 4
    assert np.array_equal(static_counts_at(ids, popularity, capacities), wanted)
    assert np.array_equal(static_step_counts(ids, popularity), whole)
    assert whole[:, 0, 0].tolist() == [n_tokens] * n_layers and whole[:, n_experts, k].tolist() == [n_tokens] * n_layers


def test_trace_arrays_compare_a_chunk_at_a_time_as_they_would_whole(monkeypatch):
    rng = np.random.default_rng(2)
    ids = rng.integers(0, 10, size=(50, 4, 3)).astype(np.int16)
    predicted = rng.integers(0, 10, size=(50, 4, 3)).astype(np.int16)
    whole = TraceArrays(ids, predicted, 3)
    whole.add_keys(10)
    monkeypatch.setattr(replay_common, "_CHUNK_CELLS", 40)  # a few tokens a chunk
    chunked = TraceArrays(ids, predicted, 3)
    chunked.add_keys(10)
    pred = predicted.astype(np.int64)
    first = ~np.tril(pred[:, :, :, None] == pred[:, :, None, :], -1).any(axis=3)
    assert np.array_equal(whole.first, first) and np.array_equal(chunked.first, first) and not first.all()
    assert all(chunked.step_keys(t) == whole.step_keys(t) for t in range(len(ids)))


def test_advice_of_a_catalog_model_is_unchanged_by_layer_groups(monkeypatch, tmp_path):
    """The one-pass counts in groups of one layer rank every candidate as one group does."""
    from cope_tui.options import PlanChoices
    from cope_tui.service.advice import plan

    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path))
    choices = PlanChoices().with_(model="deepseek-v2-lite-chat", gpu="rtx-4090", fidelity="analytic", tokens=200)

    def ranking():
        rec = plan(choices).rec
        return [(e.candidate.id, e.tpot_s, e.stats.counts.tolist()) for e in rec.estimates]

    one_group = ranking()
    monkeypatch.setattr(hit_curves, "_STATIC_CELLS", 1)  # one layer a group
    assert ranking() == one_group
