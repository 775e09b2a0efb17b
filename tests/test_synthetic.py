from __future__ import annotations

import json

import numpy as np
import pytest

from engine.core.errors import CopeInputError
from engine.models.model import ModelSpec
from engine.traces.synthetic import SyntheticSettings, fit_zipf_exponent, popularity_from_mbolt_profile, synthetic_trace
from tests.factories import tiny_model


def make_model(n_layers=48, experts=128, k=8, first_dense=0) -> ModelSpec:
    return tiny_model(
        model_id=f"synthetic-{n_layers}x{experts}-top{k}",
        moe_blocks=tuple(range(first_dense, n_layers + first_dense)),
        experts=experts,
        k=k,
        hidden=2048,
        expert_ffn=768,
    )


QWEN = make_model()
SMALL = make_model(n_layers=6, experts=32, k=4, first_dense=1)


def reuse_rate(trace) -> float:
    """Mean share of a token's experts that the previous token (same sequence) also used."""
    ids = trace.expert_ids.astype(np.int64)
    same = (ids[1:, :, :, None] == ids[:-1, :, None, :]).any(axis=3).mean(axis=(1, 2))
    inside = np.ones(trace.n_tokens - 1, dtype=bool)
    inside[trace.seq_starts[1:] - 1] = False
    return float(same[inside].mean())


def measured_accuracy(trace) -> float:
    pred = trace.predicted_ids[:, :-1].astype(np.int64)
    real = trace.expert_ids[:, 1:].astype(np.int64)
    return float((pred[..., :, None] == real[..., None, :]).any(axis=3).mean())


def top_share(trace, fraction=0.1) -> float:
    counts = np.sort(trace.popularity(), axis=1)[:, ::-1]
    n_top = int(np.ceil(fraction * counts.shape[1]))
    return float((counts[:, :n_top].sum(axis=1) / counts.sum(axis=1)).mean())


def test_seeded_generation_is_deterministic():
    s = SyntheticSettings(tokens=200, seed=7)
    a, b = synthetic_trace(SMALL, s), synthetic_trace(SMALL, s)
    np.testing.assert_array_equal(a.expert_ids, b.expert_ids)
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(a.predicted_ids, b.predicted_ids)
    c = synthetic_trace(SMALL, SyntheticSettings(tokens=200, seed=8))
    assert not np.array_equal(a.expert_ids, c.expert_ids)


def test_shapes_distinct_ids_and_weights():
    trace = synthetic_trace(QWEN, SyntheticSettings(tokens=300, seed=1))
    assert trace.expert_ids.shape == (300, 48, 8) and trace.expert_ids.dtype == np.int16
    s = np.sort(trace.expert_ids, axis=2)
    assert np.all(s[..., 1:] != s[..., :-1])
    assert trace.expert_ids.min() >= 0 and trace.expert_ids.max() < 128
    w = trace.weights
    assert w.dtype == np.float32 and w.shape == trace.expert_ids.shape
    assert np.all(np.diff(w, axis=2) <= 0), "weights must descend with the id order"
    np.testing.assert_allclose(w.sum(axis=2), 1.0, atol=1e-5)
    assert np.all(w > 0)
    assert trace.meta.origin == "synthetic" and trace.meta.synthetic
    assert trace.meta.source == "synthetic" and trace.meta.model == QWEN.id
    assert trace.meta.moe_blocks == QWEN.moe_blocks
    for text in ("seed=1", "zipf exponent 1", "locality=0.3", "predictor_accuracy=0.8"):
        assert text in trace.meta.recorded_with
    assert synthetic_trace(SMALL, SyntheticSettings(tokens=10, with_weights=False)).weights is None


def test_each_layer_has_its_own_popularity_order():
    trace = synthetic_trace(QWEN, SyntheticSettings(tokens=500, seed=3, zipf_exponent=1.2, locality=0.0))
    favourites = trace.popularity().argmax(axis=1)
    assert len(set(favourites.tolist())) > 24


def test_locality_raises_the_reuse_rate():
    base = reuse_rate(synthetic_trace(QWEN, SyntheticSettings(tokens=400, seed=2, locality=0.0)))
    local = reuse_rate(synthetic_trace(QWEN, SyntheticSettings(tokens=400, seed=2, locality=0.5)))
    assert local > base + 0.2
    assert local >= 0.5 - 0.02  # at least the forced reuse


def test_full_locality_repeats_within_a_sequence_only():
    trace = synthetic_trace(SMALL, SyntheticSettings(tokens=30, seed=4, locality=1.0, sequences=3))
    np.testing.assert_array_equal(trace.seq_starts, [0, 10, 20])
    sets = np.sort(trace.expert_ids, axis=2)
    for start in (0, 10, 20):
        assert np.all(sets[start : start + 10] == sets[start])
    assert not np.array_equal(sets[0], sets[10]) or not np.array_equal(sets[10], sets[20])


@pytest.mark.parametrize("accuracy", [0.8, 0.5])
def test_measured_predictor_accuracy_matches_the_setting(accuracy):
    trace = synthetic_trace(QWEN, SyntheticSettings(tokens=500, seed=5, predictor_accuracy=accuracy))
    assert abs(measured_accuracy(trace) - accuracy) < 0.01
    pred = trace.predicted_ids
    assert pred.shape == trace.expert_ids.shape
    assert np.all(pred[:, -1] == -1)
    s = np.sort(pred[:, :-1], axis=2)
    assert np.all(s[..., 1:] != s[..., :-1]), "predicted ids of one row must be distinct"
    assert pred[:, :-1].min() >= 0 and pred.max() < 128


def test_predictor_extremes_and_none():
    exact = synthetic_trace(SMALL, SyntheticSettings(tokens=50, seed=6, predictor_accuracy=1.0))
    np.testing.assert_array_equal(exact.predicted_ids[:, :-1], exact.expert_ids[:, 1:])
    wrong = synthetic_trace(SMALL, SyntheticSettings(tokens=50, seed=6, predictor_accuracy=0.0))
    assert measured_accuracy(wrong) == 0.0
    assert synthetic_trace(SMALL, SyntheticSettings(tokens=5, predictor_accuracy=None)).predicted_ids is None


def test_higher_zipf_exponent_concentrates_popularity():
    shares = [
        top_share(synthetic_trace(QWEN, SyntheticSettings(tokens=1000, seed=9, zipf_exponent=s, locality=0.0)))
        for s in (0.0, 0.8, 1.5)
    ]
    assert shares[0] < shares[1] < shares[2]
    assert shares[0] < 0.15  # flat routing: the top 10% get about their 10% (x k/E effects)


def test_fit_zipf_exponent():
    ranks = np.arange(1, 129)
    counts = np.random.default_rng(0).permutation(1e6 * ranks**-1.3)
    assert fit_zipf_exponent(counts) == pytest.approx(1.3, abs=1e-9)
    assert fit_zipf_exponent(np.full(64, 10.0)) == pytest.approx(0.0, abs=1e-12)
    assert fit_zipf_exponent(np.array([0, 0, 5])) == 0.0


def test_popularity_overrides_zipf():
    pop = np.ones((SMALL.n_moe_layers, SMALL.n_routed_experts))
    pop[:, :4] = 1000.0  # four experts dominate in every layer
    trace = synthetic_trace(SMALL, SyntheticSettings(tokens=300, seed=1, popularity=pop, locality=0.0))
    counts = trace.popularity()
    assert np.all(np.argsort(-counts, axis=1)[:, :4].max(axis=1) < 4)
    assert "given [6x32] popularity" in trace.meta.recorded_with
    with pytest.raises(CopeInputError, match="popularity is 6x32 but model .* has 48 MoE layers x 128"):
        synthetic_trace(QWEN, SyntheticSettings(tokens=10, popularity=pop))


def test_settings_are_validated():
    with pytest.raises(CopeInputError, match="tokens"):
        SyntheticSettings(tokens=0)
    with pytest.raises(CopeInputError, match="locality"):
        SyntheticSettings(tokens=10, locality=1.5)
    with pytest.raises(CopeInputError, match="predictor_accuracy"):
        SyntheticSettings(tokens=10, predictor_accuracy=-0.1)
    with pytest.raises(CopeInputError, match="sequences"):
        SyntheticSettings(tokens=10, sequences=11)
    with pytest.raises(CopeInputError, match="non-negative"):
        SyntheticSettings(tokens=10, popularity=-np.ones((2, 4)))


def test_a_qwen_sized_trace_has_every_token_and_layer():
    # Its generation time is a figure of bench/replay.py, not a test.
    trace = synthetic_trace(QWEN, SyntheticSettings(tokens=1000, seed=0))
    assert trace.expert_ids.shape == (1000, 48, 8)


# --- the mbolt Qwen3-30B-A3B profile ---------------------------------------------------


@pytest.mark.shared_traces
def test_mbolt_profile_drives_popularity(shared_traces):
    path = shared_traces / "qwen3-30b-a3b__mbolt-profile" / "coactivation_qwen3-30b-a3b.json"
    heat = popularity_from_mbolt_profile(path)
    assert heat.shape == (48, 128)
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert heat[0, :10].tolist() == raw["layers"][0]["heat"][:10]
    assert heat[0].sum() == sum(raw["layers"][0]["heat"])

    trace = synthetic_trace(QWEN, SyntheticSettings(tokens=2000, seed=11, popularity=heat))
    counts = trace.popularity().astype(np.float64)
    share = counts / counts.sum(axis=1, keepdims=True)
    target = heat / heat.sum(axis=1, keepdims=True)
    per_layer = [np.corrcoef(share[i], target[i])[0, 1] for i in range(48)]
    assert min(per_layer) > 0.8
    assert np.mean(per_layer) > 0.9
    assert 0.2 < np.mean([fit_zipf_exponent(r) for r in heat]) < 3.0


@pytest.mark.parametrize(
    "doc, message",
    [
        ("{not json", r"bad.json:1: not valid JSON"),
        ("[1, 2]", "top level is not an object"),
        ('{"n_layers": 2, "n_expert_per_layer": 4, "layers": [{"heat": [1, 2, 3, 4]}]}', "list of 2 entries"),
        (
            '{"n_layers": 1, "n_expert_per_layer": 4, "layers": [{"heat": [1, 2, 3]}]}',
            r"layers\[0\].heat must list 4 counts, found 3",
        ),
        ('{"n_layers": 1, "n_expert_per_layer": 4, "layers": [{"heat": [1, -2, 3, 4]}]}', "negative"),
        ('{"n_layers": 1, "n_expert_per_layer": 4, "layers": [{"heat": [1, "x", 3, 4]}]}', "non-number"),
        ('{"n_layers": "2", "n_expert_per_layer": 4, "layers": []}', "'n_layers' is '2'"),
    ],
)
def test_mbolt_profile_validation(tmp_path, doc, message):
    path = tmp_path / "bad.json"
    path.write_text(doc, encoding="utf-8")
    with pytest.raises(CopeInputError, match=message) as info:
        popularity_from_mbolt_profile(path)
    assert str(info.value).startswith(str(path))


def test_mbolt_profile_missing_file(tmp_path):
    with pytest.raises(CopeInputError, match="nothere.json: no such file"):
        popularity_from_mbolt_profile(tmp_path / "nothere.json")
