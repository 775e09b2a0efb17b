"""The published datasets' trace formats, read from files written in each dataset card's schema.

- FLAME-MoE (CMU-FLAME/FLAME-MoE-Traces): `actives/iter_NNNN/layer_NN.parquet`, one row per
  token, `indices` list<int16>[6] and `scores` list<float16>[6] (sorted descending).
- CommitMoE (RASMUS/commitmoe-qwen35-fp8-layers-v2): `labels/part_*.safetensors` with
  `top_indices` [N, 8], `prompt_idx`, `tok`, `layer` (+ `gen_token_id`), and router
  `logits` [N, 256] in the logits files.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engine.core.errors import CopeInputError
from engine.models.catalog import get_model
from engine.traces import flame_parquet
from engine.traces import TraceShape
from engine.traces.commitmoe_safetensors import read_commitmoe_safetensors
from engine.traces.registry import detect_format, load_any_trace

safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="the safetensors package reads CommitMoE traces")

# FLAME-MoE-290M: 9 transformer layers, MoE layers 2-9 (blocks 1-8), 64 experts, top-6. Not in the catalog.
FLAME_290M = SimpleNamespace(id="flame-moe-290m", moe_blocks=tuple(range(1, 9)), n_routed_experts=64, top_k=6)
QWEN35 = "qwen3.5-35b-a3b"


def _routing(rng, rows: int, n_experts: int, k: int) -> np.ndarray:
    return np.stack([rng.choice(n_experts, size=k, replace=False) for _ in range(rows)])


# --- FLAME-MoE parquet ----------------------------------------------------------------------


def _write_flame_layer(path: Path, ids: np.ndarray, scores: np.ndarray) -> None:
    pa = pytest.importorskip("pyarrow", reason="pyarrow (the cope[parquet] extra) writes the test's parquet files")
    import pyarrow.parquet as pq

    table = pa.table({
        "scores": pa.array(list(scores.astype(np.float16)), type=pa.list_(pa.float16())),
        "indices": pa.array(list(ids.astype(np.int16)), type=pa.list_(pa.int16())),
    })
    pq.write_table(table, path, row_group_size=7)  # several row groups: the reader must stitch them


@pytest.fixture
def flame_dir(tmp_path):
    rng = np.random.default_rng(5)
    folder = tmp_path / "actives" / "iter_5473"
    folder.mkdir(parents=True)
    ids = {}
    for layer in range(2, 10):
        chosen = _routing(rng, 20, 64, 6)
        raw = rng.random((20, 6))
        scores = -np.sort(-raw / raw.sum(axis=1, keepdims=True), axis=1)
        _write_flame_layer(folder / f"layer_{layer:02d}.parquet", chosen, scores)
        ids[layer] = (chosen, scores)
    return folder, ids


def test_flame_folder_reads_every_layer_in_order(flame_dir):
    folder, ids = flame_dir
    assert detect_format(folder).name == "flame-parquet"
    trace = load_any_trace(folder, model=FLAME_290M)
    assert trace.meta.moe_blocks == tuple(range(1, 9)) and trace.n_tokens == 20 and trace.top_k == 6
    for layer, (chosen, scores) in ids.items():
        np.testing.assert_array_equal(trace.expert_ids[:, layer - 2], chosen)
        np.testing.assert_allclose(trace.weights[:, layer - 2], scores.astype(np.float16), rtol=1e-3)
    assert trace.n_sequences == 1 and "softmax scores" in trace.meta.recorded_with


def test_flame_single_layer_file_and_token_limit(flame_dir):
    folder, ids = flame_dir
    path = folder / "layer_04.parquet"
    assert detect_format(path).name == "flame-parquet"
    trace = flame_parquet.read_flame_parquet(path, n_experts=64, limit=9)
    assert trace.meta.moe_blocks == (3,) and trace.n_tokens == 9
    np.testing.assert_array_equal(trace.expert_ids[:, 0], ids[4][0][:9])
    assert trace.meta.notes == ("kept the first 9 of 20 tokens of layer_04.parquet",)


def test_flame_refuses_other_models_and_bad_files(flame_dir, tmp_path):
    folder, _ = flame_dir
    with pytest.raises(CopeInputError, match=r"does not fit model deepseek-v2-lite-chat: numbers its MoE blocks"):
        load_any_trace(folder, model=get_model("deepseek-v2-lite-chat"))  # 64 experts top-6, but 26 MoE blocks
    bad = tmp_path / "layer_02.parquet"
    bad.write_bytes(b"PAR1 not really parquet PAR1")
    pytest.importorskip("pyarrow")
    with pytest.raises(CopeInputError, match=r"layer_02\.parquet: not a readable Parquet file"):
        load_any_trace(bad, model=FLAME_290M)
    odd = tmp_path / "routing.parquet"
    odd.write_bytes(b"PAR1")
    with pytest.raises(CopeInputError, match=r"routing\.parquet: a FLAME-MoE actives file is named layer_NN\.parquet"):
        load_any_trace(odd, model=FLAME_290M)


def test_flame_without_pyarrow_says_which_extra(flame_dir, monkeypatch):
    folder, _ = flame_dir
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(CopeInputError, match=r"layer_02\.parquet: reading this format needs the pyarrow package: "
                                             r"install cope\[parquet\]"):
        load_any_trace(folder, model=FLAME_290M)


# --- CommitMoE safetensors ---------------------------------------------------------------------


def _commitmoe_rows(rng, prompts: dict[int, int], n_layers: int = 40, n_experts: int = 256, k: int = 8):
    """Rows (prompt, token, layer) shuffled as a columnar shard might hold them."""
    cells = [(p, t, l) for p, n in prompts.items() for t in range(n) for l in range(n_layers)]
    order = rng.permutation(len(cells))
    cells = [cells[i] for i in order]
    return {
        "top_indices": _routing(rng, len(cells), n_experts, k).astype(np.int16),
        "prompt_idx": np.array([c[0] for c in cells], dtype=np.int32),
        "tok": np.array([c[1] for c in cells], dtype=np.int32),
        "layer": np.array([c[2] for c in cells], dtype=np.int16),
        "gen_token_id": rng.integers(0, 248_320, len(cells)).astype(np.int32),
    }


def test_commitmoe_labels_become_sequences_per_prompt(tmp_path):
    rng = np.random.default_rng(11)
    cols = _commitmoe_rows(rng, {7: 3, 2: 4})
    path = tmp_path / "part_000.safetensors"
    safetensors_numpy.save_file(cols, str(path))
    assert detect_format(path).name == "commitmoe-safetensors"
    trace = load_any_trace(path, model=get_model(QWEN35))
    assert trace.n_tokens == 7 and trace.n_layers == 40 and trace.top_k == 8
    # Sequences in order of first appearance in the file; each prompt's tokens by position.
    assert trace.seq_starts.tolist() == ([0, 3] if cols["prompt_idx"][0] == 7 else [0, 4])
    first = int(cols["prompt_idx"][0])
    row = np.flatnonzero((cols["prompt_idx"] == first) & (cols["tok"] == 1) & (cols["layer"] == 5))[0]
    np.testing.assert_array_equal(trace.expert_ids[1, 5], cols["top_indices"][row])
    assert trace.weights is None and "no router logits in this file" in trace.meta.recorded_with


def test_commitmoe_router_logits_become_weights(tmp_path):
    rng = np.random.default_rng(3)
    cols = _commitmoe_rows(rng, {0: 2})
    logits = rng.normal(size=(cols["top_indices"].shape[0], 256)).astype(np.float32)
    path = tmp_path / "part_001.safetensors"
    safetensors_numpy.save_file({**cols, "logits": logits}, str(path))
    trace = load_any_trace(path, model=get_model(QWEN35))
    row = np.flatnonzero((cols["tok"] == 1) & (cols["layer"] == 0))[0]
    probs = np.exp(logits[row] - logits[row].max())
    probs /= probs.sum()
    np.testing.assert_allclose(trace.weights[1, 0], probs[cols["top_indices"][row]], rtol=1e-5)
    assert "softmax of the router logits" in trace.meta.recorded_with


def test_commitmoe_keeps_whole_prompts_up_to_the_limit(tmp_path):
    rng = np.random.default_rng(4)
    cols = _commitmoe_rows(rng, {0: 3, 1: 3, 2: 3})
    path = tmp_path / "part.safetensors"
    safetensors_numpy.save_file(cols, str(path))
    model = get_model(QWEN35)
    trace = read_commitmoe_safetensors(path, TraceShape(tuple(model.moe_blocks), 256, 8), limit=7)
    assert trace.n_tokens == 6 and trace.n_sequences == 2
    assert trace.meta.notes[0] == "kept the first 2 of 3 prompts (6 tokens)"


def test_commitmoe_bad_files(tmp_path):
    model = get_model(QWEN35)
    rng = np.random.default_rng(1)
    cols = _commitmoe_rows(rng, {0: 1})
    lacking = tmp_path / "no_layer.safetensors"
    safetensors_numpy.save_file({k: v for k, v in cols.items() if k != "layer"}, str(lacking))
    with pytest.raises(CopeInputError, match=r"no_layer\.safetensors: lacks the tensor\(s\) layer"):
        load_any_trace(lacking, model=model)
    wrong_k = tmp_path / "k6.safetensors"
    safetensors_numpy.save_file({**cols, "top_indices": cols["top_indices"][:, :6].copy()}, str(wrong_k))
    with pytest.raises(CopeInputError, match=r"k6\.safetensors: top_indices lists 6 experts per row, the model "
                                             r"routes top-8"):
        load_any_trace(wrong_k, model=model)
    garbage = tmp_path / "junk.safetensors"
    garbage.write_bytes(b"\xff" * 64)
    with pytest.raises(CopeInputError, match=r"junk\.safetensors: not a readable safetensors file"):
        load_any_trace(garbage, model=model)
    twice = tmp_path / "twice.safetensors"
    safetensors_numpy.save_file({k: np.concatenate([v, v[:1]]) for k, v in cols.items()}, str(twice))
    with pytest.raises(CopeInputError, match=r"twice\.safetensors: row \d+: second row for token 0 of sequence 0, "
                                             r"block \d+ \(first at row \d+\)"):
        load_any_trace(twice, model=model)
    with pytest.raises(CopeInputError, match=r"row 1: block 40 is not an MoE block of the model"):
        bad_layer = tmp_path / "layer40.safetensors"
        safetensors_numpy.save_file({**cols, "layer": np.full_like(cols["layer"], 40)}, str(bad_layer))
        load_any_trace(bad_layer, model=model)
