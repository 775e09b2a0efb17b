from __future__ import annotations

import csv
import json
import os
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.core.errors import CopeInputError
from engine.models.model import ModelSpec
from engine.traces import (
    TraceShape,
    TraceWarning,
    load_any_trace,
    load_trace,
    read_jsonl_trace,
    read_llama_moe_trace_csv,
    read_moe_beyond_csv_dir,
    save_trace,
    write_jsonl_trace,
    write_llama_moe_trace_csv,
)
from engine.traces.trace import RoutingTrace, TraceMeta
from tests.factories import tiny_model

BLOCKS = (1, 2, 3)  # block 0 dense, like DeepSeek
E, K = 8, 2
SHAPE = TraceShape(BLOCKS, E, K)


def make_model(model_id="tiny", n_blocks=4, moe=BLOCKS, experts=E, k=K) -> ModelSpec:
    return tiny_model(model_id=model_id, n_blocks=n_blocks, moe_blocks=moe, experts=experts, k=k, arch="deepseek2")


def make_trace(tokens=7, seq_starts=(0, 3, 4), weights=True, predictions=True, seed=0) -> RoutingTrace:
    rng = np.random.default_rng(seed)
    ids = np.stack(
        [np.stack([rng.permutation(E)[:K] for _ in BLOCKS]) for _ in range(tokens)]
    ).astype(np.int16)
    w = None
    if weights:
        raw = rng.random((tokens, len(BLOCKS), K))
        raw = -np.sort(-raw, axis=2)
        w = (raw / raw.sum(axis=2, keepdims=True)).astype(np.float32)
    pred = None
    if predictions:
        pred = np.full((tokens, len(BLOCKS), K), -1, dtype=np.int16)
        pred[:, :-1] = ids[:, 1:]
        pred[0, 0, 0] = (ids[0, 1, 0] + 1) % E if (ids[0, 1, 0] + 1) % E not in ids[0, 1] else (ids[0, 1, 0] + 2) % E
    meta = TraceMeta(
        model="tiny",
        source="unit test",
        origin="recorded",
        n_experts=E,
        moe_blocks=BLOCKS,
        domain="code",
        recorded_with="by hand",
        notes=("a note", "ünïcode note"),
    )
    return RoutingTrace(
        expert_ids=ids, meta=meta, weights=w, predicted_ids=pred, seq_starts=np.array(seq_starts, dtype=np.int64)
    )


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- own format ---------------------------------------------------------------------


def test_own_format_round_trip_keeps_everything(tmp_path):
    trace = make_trace()
    path = tmp_path / "t.cope.npz"
    save_trace(trace, path)
    back = load_trace(path)
    assert back.expert_ids.dtype == np.int16
    np.testing.assert_array_equal(back.expert_ids, trace.expert_ids)
    assert back.weights is not None and back.weights.dtype == np.float32
    np.testing.assert_array_equal(back.weights, trace.weights)
    np.testing.assert_array_equal(back.predicted_ids, trace.predicted_ids)
    np.testing.assert_array_equal(back.seq_starts, [0, 3, 4])
    assert back.meta == trace.meta
    # Written atomically: nothing but the target is left in the folder.
    assert sorted(os.listdir(tmp_path)) == ["t.cope.npz"]


def test_own_format_round_trip_without_optional_arrays(tmp_path):
    trace = make_trace(weights=False, predictions=False, seq_starts=(0,))
    path = tmp_path / "t.cope.npz"
    save_trace(trace, path)
    back = load_trace(path)
    assert back.weights is None and back.predicted_ids is None
    np.testing.assert_array_equal(back.expert_ids, trace.expert_ids)
    assert back.n_sequences == 1


def test_own_format_overwrite_replaces_file(tmp_path):
    path = tmp_path / "t.cope.npz"
    save_trace(make_trace(seed=1), path)
    second = make_trace(seed=2, tokens=5, seq_starts=(0,))
    save_trace(second, path)
    np.testing.assert_array_equal(load_trace(path).expert_ids, second.expert_ids)


def test_save_into_a_missing_folder_names_the_file(tmp_path):
    target = tmp_path / "no" / "such" / "t.cope.npz"
    with pytest.raises(CopeInputError, match=r"t.cope.npz: cannot write"):
        save_trace(make_trace(), target)


def test_failed_write_leaves_no_temp_file(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(RuntimeError):
        save_trace(make_trace(), tmp_path / "t.cope.npz")
    assert os.listdir(tmp_path) == []


def _npz(path: Path, **arrays) -> Path:
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)
    return path


def _header(**over) -> np.ndarray:
    head = {"format": "cope-trace", "version": 1, "meta": make_trace().meta.to_dict()}
    head.update(over)
    return np.frombuffer(json.dumps(head).encode(), dtype=np.uint8)


def _good_arrays() -> dict:
    t = make_trace()
    return dict(header=_header(), expert_ids=t.expert_ids, seq_starts=t.seq_starts, weights=t.weights)


def test_own_format_rejects_garbage_and_truncation(tmp_path):
    garbage = write(tmp_path / "garbage.cope.npz", "this is not a zip file\n")
    with pytest.raises(CopeInputError, match="garbage.cope.npz.*not an .npz"):
        load_trace(garbage)

    good = tmp_path / "good.cope.npz"
    save_trace(make_trace(), good)
    data = good.read_bytes()
    truncated = tmp_path / "truncated.cope.npz"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CopeInputError, match="truncated.cope.npz"):
        load_trace(truncated)

    # Same length, damaged inside: the zip checksums catch it.
    damaged = tmp_path / "damaged.cope.npz"
    middle = len(data) // 3
    damaged.write_bytes(data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 64]) + data[middle + 64 :])
    with pytest.raises(CopeInputError, match="damaged.cope.npz"):
        load_trace(damaged)

    with pytest.raises(CopeInputError, match="missing.cope.npz: no such file"):
        load_trace(tmp_path / "missing.cope.npz")


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(header=None), "missing array"),
        (dict(expert_ids=None), "missing array"),
        (dict(header=_header(format="something-else")), "format is 'something-else'"),
        (dict(header=_header(version=2)), "version 2 is newer"),
        (dict(header=np.frombuffer(b"{not json", dtype=np.uint8)), "not UTF-8 JSON"),
        (dict(header=_header(meta={"model": "x"})), "bad trace metadata"),
        (dict(expert_ids=np.zeros((7, 3, 2), dtype=np.float32)), "'expert_ids' must be a 3-D integer"),
        (dict(expert_ids=np.zeros((7, 3), dtype=np.int16)), "'expert_ids' must be a 3-D integer"),
        (dict(weights=np.zeros((7, 3, 3), dtype=np.float32)), "'weights' must be floating point shaped"),
        (dict(seq_starts=np.array([0.0, 3.0])), "'seq_starts' must be a 1-D integer"),
        (dict(seq_starts=np.array([0, 9])), "sequence starts"),
        (dict(expert_ids=np.full((7, 3, 2), 9, dtype=np.int16)), "expert id out of range"),
    ],
)
def test_own_format_rejects_bad_contents(tmp_path, change, message):
    arrays = _good_arrays()
    for name, value in change.items():
        if value is None:
            arrays.pop(name)
        else:
            arrays[name] = value
    path = _npz(tmp_path / "bad.cope.npz", **arrays)
    with pytest.raises(CopeInputError, match=message) as info:
        load_trace(path)
    assert str(info.value).startswith(str(path) + ": ")
    assert "\n" not in str(info.value)


def test_own_format_refuses_pickled_arrays(tmp_path):
    arrays = _good_arrays()
    arrays["expert_ids"] = np.array([{"a": 1}], dtype=object)
    path = _npz(tmp_path / "pickled.cope.npz", **arrays)
    with pytest.raises(CopeInputError, match="pickled.cope.npz: holds a pickled"):
        load_trace(path)


# --- llama-moe-trace CSV ----------------------------------------------------------------


def test_llama_csv_round_trip_ids_and_sequences(tmp_path):
    # Sequences of 3, 1, 1 and 2 tokens: one-token sequences in a row must stay apart.
    trace = make_trace(tokens=7, seq_starts=(0, 3, 4, 5), weights=False, predictions=False)
    path = tmp_path / "trace.csv"
    write_llama_moe_trace_csv(trace, path)
    first = path.read_text().splitlines()[0].split(",")
    assert first[:2] == ["0", "1"] and len(first) == 2 + K
    back = read_llama_moe_trace_csv(path, replace(SHAPE, model_name="tiny"))
    np.testing.assert_array_equal(back.expert_ids, trace.expert_ids)
    np.testing.assert_array_equal(back.seq_starts, trace.seq_starts)
    assert back.meta.origin == "imported" and back.meta.model == "tiny"
    assert back.meta.moe_blocks == BLOCKS and back.weights is None
    assert sorted(os.listdir(tmp_path)) == ["trace.csv"]


def test_llama_csv_skips_prompt_rows_and_accepts_any_layer_order(tmp_path):
    text = "\n".join(
        [
            "-2,1,0,1", "-2,2,0,1", "-2,3,0,1",  # prompt rows: skipped
            "-1,1,0,1", "-1,2,0,1", "-1,3,0,1",
            "0,3,5,6", "0,1,1,2", "0,2,3,4",  # token 0, layers out of order
            "1,2,7,0", "1,1,2,3", "1,3,4,5",
            "-1,1,0,1", "-1,2,0,1", "-1,3,0,1",  # the next request's prompt
            "0,1,6,7", "0,2,1,0", "0,3,3,2",
            "",
        ]
    )
    path = write(tmp_path / "fork.csv", text)
    trace = read_llama_moe_trace_csv(path, SHAPE)
    assert trace.n_tokens == 3
    np.testing.assert_array_equal(trace.seq_starts, [0, 2])
    np.testing.assert_array_equal(trace.expert_ids[0], [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(trace.expert_ids[1], [[2, 3], [7, 0], [4, 5]])
    np.testing.assert_array_equal(trace.expert_ids[2], [[6, 7], [1, 0], [3, 2]])


def test_llama_csv_pos_restart_starts_a_new_sequence(tmp_path):
    rows = []
    for pos in (0, 1, 2, 0, 1):
        rows += [f"{pos},{b},{pos},{(pos + 1) % E}" for b in BLOCKS]
    path = write(tmp_path / "two.csv", "\n".join(rows) + "\n")
    trace = read_llama_moe_trace_csv(path, SHAPE)
    np.testing.assert_array_equal(trace.seq_starts, [0, 3])
    assert trace.n_tokens == 5


@pytest.mark.parametrize(
    "bad_line, message",
    [
        ("1,2,3,9", "expert id 9 out of range 0..7"),
        ("1,2,3,-1", "expert id -1 out of range"),
        ("1,2,3", r"expected 4 comma-separated fields"),
        ("1,2,3,4,5", r"expected 4 comma-separated fields"),
        ("1,7,3,4", "block 7 is not an MoE block of the model"),
        ("1,0,3,4", "block 0 is not an MoE block"),
        ("1,2,x,4", "field 'x' is not an integer"),
        ("1,2,3.5,4", "field '3.5' is not an integer"),
        ("1,2,3,3", "same expert id appears twice"),
    ],
)
def test_llama_csv_rejects_bad_rows_with_file_and_line(tmp_path, bad_line, message):
    good = [f"{pos},{b},1,2" for pos in (0, 1) for b in BLOCKS]
    lines = good[:4] + [bad_line] + good[5:]  # line 5 is the bad one
    path = write(tmp_path / "bad.csv", "\n".join(lines) + "\n")
    with pytest.raises(CopeInputError, match=message) as info:
        read_llama_moe_trace_csv(path, SHAPE)
    assert str(info.value).startswith(f"{path}:5: ")


def test_llama_csv_wrong_k_everywhere_is_reported(tmp_path):
    path = write(tmp_path / "k3.csv", "0,1,1,2,3\n0,2,1,2,3\n0,3,1,2,3\n")
    with pytest.raises(CopeInputError, match=r"k3.csv:1: expected 4 comma-separated fields.*found 5"):
        read_llama_moe_trace_csv(path, SHAPE)


def test_llama_csv_rejects_empty_and_prompt_only_files(tmp_path):
    empty = write(tmp_path / "empty.csv", "")
    with pytest.raises(CopeInputError, match="empty.csv: empty file"):
        read_llama_moe_trace_csv(empty, SHAPE)
    blank = write(tmp_path / "blank.csv", "\n\n  \n")
    with pytest.raises(CopeInputError, match="blank.csv: empty file"):
        read_llama_moe_trace_csv(blank, SHAPE)
    prompt = write(tmp_path / "prompt.csv", "-1,1,0,1\n-1,2,0,1\n-1,3,0,1\n")
    with pytest.raises(CopeInputError, match="prompt.csv: no decode rows"):
        read_llama_moe_trace_csv(prompt, SHAPE)
    with pytest.raises(CopeInputError, match="nothere.csv: no such file"):
        read_llama_moe_trace_csv(tmp_path / "nothere.csv", SHAPE)


def test_llama_csv_missing_cell_drops_token_with_warning(tmp_path):
    rows = [f"{pos},{b},{pos % E},{(pos + 3) % E}" for pos in range(4) for b in BLOCKS]
    rows.remove("2,2,2,5")  # token 2 lacks block 2
    path = write(tmp_path / "holes.csv", "\n".join(rows) + "\n")
    with pytest.warns(TraceWarning, match=r"holes\.csv.*dropped 1 of 4 tokens.*block 2"):
        trace = read_llama_moe_trace_csv(path, SHAPE)
    assert trace.n_tokens == 3
    np.testing.assert_array_equal(trace.expert_ids[:, 0, 0], [0, 1, 3])
    assert any("dropped 1 of 4" in n for n in trace.meta.notes)


def test_llama_csv_duplicate_cell_is_an_error(tmp_path):
    rows = ["0,1,0,1", "0,2,0,1", "0,3,0,1", "1,1,0,1", "1,2,0,1", "1,2,2,3", "1,3,0,1"]
    path = write(tmp_path / "dup.csv", "\n".join(rows) + "\n")
    with pytest.raises(CopeInputError, match=r"dup.csv:6: second row for token 1.*block 2 \(first at line 5\)"):
        read_llama_moe_trace_csv(path, SHAPE)


def test_llama_csv_handles_crlf_and_spaces(tmp_path):
    path = tmp_path / "crlf.csv"
    path.write_bytes(b"0, 1, 1, 2\r\n0,2,3,4\r\n0,3,5,6\r\n")
    trace = read_llama_moe_trace_csv(path, SHAPE)
    np.testing.assert_array_equal(trace.expert_ids[0], [[1, 2], [3, 4], [5, 6]])


# --- JSONL --------------------------------------------------------------------------------


def test_jsonl_round_trip_with_weights_and_sequences(tmp_path):
    trace = make_trace(tokens=6, seq_starts=(0, 2, 3), predictions=False)
    path = tmp_path / "t.jsonl"
    write_jsonl_trace(trace, path)
    back = read_jsonl_trace(path, replace(SHAPE, model_name="tiny"))
    np.testing.assert_array_equal(back.expert_ids, trace.expert_ids)
    np.testing.assert_array_equal(back.weights, trace.weights)
    np.testing.assert_array_equal(back.seq_starts, trace.seq_starts)
    assert back.meta.model == "tiny"


def test_jsonl_orders_sequences_by_first_appearance_and_tokens_within(tmp_path):
    recs = []
    for seq, tok, base in (("b", 5, 0), ("a", 1, 2), ("b", 2, 4), ("a", 0, 6)):
        for blk in BLOCKS:
            recs.append({"seq": seq, "token": tok, "layer": blk, "experts": [base, base + 1]})
    path = write(tmp_path / "seqs.jsonl", "\n".join(json.dumps(r) for r in recs) + "\n")
    trace = read_jsonl_trace(path, SHAPE)
    np.testing.assert_array_equal(trace.seq_starts, [0, 2])
    # seq "b" first (tokens 2 then 5), then seq "a" (tokens 0 then 1)
    np.testing.assert_array_equal(trace.expert_ids[:, 0, 0], [4, 0, 6, 2])
    assert trace.weights is None


def _jsonl_lines(n_tokens=2) -> list[str]:
    return [
        json.dumps({"token": t, "layer": b, "experts": [t % E, (t + 1) % E], "weights": [0.6, 0.4]})
        for t in range(n_tokens)
        for b in BLOCKS
    ]


@pytest.mark.parametrize(
    "bad, message",
    [
        ('{"token": 1, "layer": 2, "experts": [1, 9], "weights": [0.6, 0.4]}', "expert id 9 out of range"),
        ('{"token": 1, "layer": 2, "experts": [1, 2, 3], "weights": [0.6, 0.4]}', "expected 2 expert ids, found 3"),
        ('{"token": 1, "layer": 5, "experts": [1, 2], "weights": [0.6, 0.4]}', "block 5 is not an MoE block"),
        ('{"token": 1, "layer": 2, "experts": [1, "2"], "weights": [0.6, 0.4]}', "'experts' must be a list of integers"),
        ('{"token": 1.5, "layer": 2, "experts": [1, 2], "weights": [0.6, 0.4]}', "'token' must be an integer"),
        ('{"token": 1, "layer": 2, "experts": [1, 2]}', "'weights' must be on every record or on none"),
        ('{"token": 1, "layer": 2, "experts": [1, 2], "weights": [0.6]}', "expected 2 weights"),
        ('{"token": 1, "layer": 2, "experts": [1, 2], "weights": [0.6, 0.4], "seq": [1]}', "'seq' must be"),
        ('{"token": 1, "layer": 2, "experts": [1, 2]', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"token": 1, "experts": [1, 2], "weights": [0.6, 0.4]}', "lacks 'layer'"),
    ],
)
def test_jsonl_rejects_bad_records_with_file_and_line(tmp_path, bad, message):
    lines = _jsonl_lines()
    lines[4] = bad  # line 5
    path = write(tmp_path / "bad.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(CopeInputError, match=message) as info:
        read_jsonl_trace(path, SHAPE)
    assert str(info.value).startswith(f"{path}:5: ")


def test_jsonl_empty_file_and_missing_cell(tmp_path):
    empty = write(tmp_path / "empty.jsonl", "\n")
    with pytest.raises(CopeInputError, match="empty.jsonl: empty file"):
        read_jsonl_trace(empty, SHAPE)
    lines = _jsonl_lines(3)
    del lines[3 + 2]  # token 1 lacks block 3
    path = write(tmp_path / "holes.jsonl", "\n".join(lines) + "\n")
    with pytest.warns(TraceWarning, match=r"holes\.jsonl.*dropped 1 of 3 tokens.*block 3"):
        trace = read_jsonl_trace(path, SHAPE)
    np.testing.assert_array_equal(trace.expert_ids[:, 0, 0], [0, 2])


# --- load_any_trace ---------------------------------------------------------------------


def test_load_any_trace_dispatches_and_checks_the_model(tmp_path):
    model = make_model()
    trace = make_trace(predictions=False)
    save_trace(trace, tmp_path / "t.cope.npz")
    write_llama_moe_trace_csv(trace, tmp_path / "t.csv")
    write_jsonl_trace(trace, tmp_path / "t.jsonl")
    for name in ("t.cope.npz", "t.csv", "t.jsonl"):
        back = load_any_trace(tmp_path / name, model=model)
        np.testing.assert_array_equal(back.expert_ids, trace.expert_ids, err_msg=name)
    # Without a telling extension, the content decides.
    (tmp_path / "t.jsonl").rename(tmp_path / "records.txt")
    assert load_any_trace(tmp_path / "records.txt", model=model).weights is not None
    (tmp_path / "t.cope.npz").rename(tmp_path / "blob.bin")
    assert load_any_trace(tmp_path / "blob.bin", model=model).n_tokens == trace.n_tokens

    other = make_model("bigger", n_blocks=5, moe=(1, 2, 3, 4), experts=16, k=4)
    with pytest.raises(CopeInputError, match=r"blob.bin: trace \(from tiny\) does not fit model bigger: 8 experts"):
        load_any_trace(tmp_path / "blob.bin", model=other)
    with pytest.raises(CopeInputError, match="top-2 routing, the model uses top-4"):
        load_any_trace(tmp_path / "blob.bin", model=other)
    shifted = make_model("shifted", moe=(0, 1, 2))
    with pytest.raises(CopeInputError, match=r"MoE blocks 1..3, the model has 0..2"):
        load_any_trace(tmp_path / "blob.bin", model=shifted)
    with pytest.raises(CopeInputError, match="nope.csv: no such file"):
        load_any_trace(tmp_path / "nope.csv", model=model)
    unknown = write(tmp_path / "notes.txt", "hello\n")
    with pytest.raises(CopeInputError, match="notes.txt: unknown trace format"):
        load_any_trace(unknown, model=model)


# --- moe-beyond CSV folder (small hand-made copy) -----------------------------------------

MB_HEADER = ["Layer ID", "Batch Number", "Token", "Activated Expert IDs"]


def write_moe_beyond(path: Path, tokens: list[str], ids_of, drop=None) -> None:
    """ids_of(block, position) -> list of 6 ids; drop: (block, position) rows to leave out."""
    with open(path, "w", encoding="utf-8", newline="") as handle:
        w = csv.writer(handle, lineterminator="\r\n")
        w.writerow(MB_HEADER)
        for block in range(1, 27):
            for pos, tok in enumerate(tokens):
                if drop and (block, pos) in drop:
                    continue
                w.writerow([block, 0, tok, str(ids_of(block, pos))])


def _ids(seed):
    def ids_of(block, pos):
        return [int(x) for x in np.random.default_rng([seed, block, pos]).permutation(64)[:6]]

    return ids_of


def test_moe_beyond_folder_reads_in_numeric_order(tmp_path):
    write_moe_beyond(tmp_path / "prompt_10_data.csv", ["x", "y"], _ids(10))
    write_moe_beyond(tmp_path / "prompt_2_data.csv", ['a,"b"', "c, d", "e"], _ids(2))
    trace = read_moe_beyond_csv_dir(tmp_path)
    assert trace.n_tokens == 5 and trace.n_layers == 26 and trace.top_k == 6
    np.testing.assert_array_equal(trace.seq_starts, [0, 3])
    assert trace.expert_ids[0, 0].tolist() == _ids(2)(1, 0)
    assert trace.expert_ids[1, 25].tolist() == _ids(2)(26, 1)
    assert trace.expert_ids[4, 3].tolist() == _ids(10)(4, 1)
    assert trace.meta.origin == "imported" and "teacher forcing" in trace.meta.recorded_with
    assert read_moe_beyond_csv_dir(tmp_path, max_files=1).n_tokens == 3
    # One such file on its own is recognised by its header.
    model = make_model("dsv2-lite", n_blocks=27, moe=range(1, 27), experts=64, k=6)
    single = load_any_trace(tmp_path / "prompt_10_data.csv", model=model)
    np.testing.assert_array_equal(single.expert_ids, trace.expert_ids[3:])


def test_moe_beyond_errors_and_missing_rows(tmp_path):
    folder = tmp_path / "mb"
    folder.mkdir()
    write_moe_beyond(folder / "prompt_1_data.csv", ["a", "b", "c"], _ids(1), drop={(5, 2)})
    with pytest.warns(TraceWarning, match=r"prompt_1_data.csv.*dropped 1 of 3 tokens"):
        trace = read_moe_beyond_csv_dir(folder)
    assert trace.n_tokens == 2

    bad = tmp_path / "bad"
    bad.mkdir()
    write_moe_beyond(bad / "prompt_1_data.csv", ["a", "b"], lambda b, p: [1, 2, 3, 4, 5, 64 if (b, p) == (3, 1) else 6])
    # header is line 1; block 3, position 1 is data row 2 * 2 + 1 -> line 7
    with pytest.raises(CopeInputError, match=r"prompt_1_data.csv:7: expert id 64 out of range 0..63"):
        read_moe_beyond_csv_dir(bad)
    write_moe_beyond(bad / "prompt_1_data.csv", ["a", "b"], lambda b, p: [1, 2, 3, 4, 5] if b == 2 else [1, 2, 3, 4, 5, 6])
    with pytest.raises(CopeInputError, match=r"prompt_1_data.csv:4: expected 6 expert ids, found 5"):
        read_moe_beyond_csv_dir(bad)
    (bad / "prompt_1_data.csv").write_text("Layer,Token\n1,a\n", encoding="utf-8")
    with pytest.raises(CopeInputError, match=r"prompt_1_data.csv:1: header is"):
        read_moe_beyond_csv_dir(bad)
    with pytest.raises(CopeInputError, match="empty: no .csv files"):
        (tmp_path / "empty").mkdir()
        read_moe_beyond_csv_dir(tmp_path / "empty")


def test_moe_beyond_misaligned_rows_are_an_error(tmp_path):
    path = tmp_path / "prompt_1_data.csv"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        w = csv.writer(handle)
        w.writerow(MB_HEADER)
        for block in range(1, 27):
            toks = ["a", "b"] if block != 4 else ["b", "a"]
            for tok in toks:
                w.writerow([block, 0, tok, "[1, 2, 3, 4, 5, 6]"])
    with pytest.raises(CopeInputError, match=r"prompt_1_data.csv:8: block 4 row 0 is token 'b'.*misaligned"):
        read_moe_beyond_csv_dir(tmp_path)


# --- the real DeepSeek-V2-Lite-Chat data ------------------------------------------------


@pytest.mark.shared_traces
def test_real_deepseek_folder(shared_traces):
    folder = shared_traces / "deepseek-v2-lite-chat__moe-beyond" / "training_data_eamc"
    with warnings.catch_warnings():
        warnings.simplefilter("error", TraceWarning)
        trace = read_moe_beyond_csv_dir(folder)
    assert trace.n_tokens == 25_382
    assert trace.n_sequences == 318
    assert trace.n_layers == 26 and trace.top_k == 6
    assert trace.meta.moe_blocks == tuple(range(1, 27))
    assert trace.meta.n_experts == 64
    assert trace.expert_ids.min() >= 0 and trace.expert_ids.max() <= 63
    assert trace.meta.origin == "imported"

    # The first prompt's first token, parsed here independently of the reader.
    with open(folder / "prompt_1_data.csv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    by_block: dict[int, list[list[int]]] = {}
    for row in rows:
        by_block.setdefault(int(row["Layer ID"]), []).append(json.loads(row["Activated Expert IDs"]))
    n_first = len(by_block[1])
    assert trace.seq_starts[1] == n_first
    for layer, block in ((0, 1), (12, 13), (25, 26)):
        assert trace.expert_ids[0, layer].tolist() == by_block[block][0]
        assert trace.expert_ids[n_first - 1, layer].tolist() == by_block[block][-1]

    # Files are taken in numeric order: prompt 2 follows prompt 1.
    with open(folder / "prompt_2_data.csv", encoding="utf-8", newline="") as handle:
        second = next(r for r in csv.DictReader(handle) if r["Layer ID"] == "1")
    assert trace.expert_ids[n_first, 0].tolist() == json.loads(second["Activated Expert IDs"])


@pytest.mark.shared_traces
def test_real_deepseek_folder_through_load_any_trace(shared_traces):
    model = make_model("deepseek-v2-lite-chat", n_blocks=27, moe=range(1, 27), experts=64, k=6)
    trace = load_any_trace(shared_traces / "deepseek-v2-lite-chat__moe-beyond", model=model)
    assert trace.n_tokens == 25_382
    with pytest.raises(CopeInputError, match="does not fit model tiny"):
        load_any_trace(shared_traces / "deepseek-v2-lite-chat__moe-beyond" / "training_data_eamc", model=make_model())


@pytest.mark.parametrize("header", ["pos,layer,id0,id1", "pos, layer, expert_0, expert_1\r", "token,block,a,b,c"])
def test_llama_csv_with_a_header_line_is_read(tmp_path, header):
    rows = [f"{pos},{b},{pos % E},{(pos + 1) % E}" for pos in range(3) for b in BLOCKS]
    plain = read_llama_moe_trace_csv(write(tmp_path / "plain.csv", "\n".join(rows) + "\n"), SHAPE)
    path = write(tmp_path / "headed.csv", header + "\n" + "\n".join(rows[:1] + ["1,2,x,4"] + rows[2:]) + "\n")
    with pytest.raises(CopeInputError, match="field 'x' is not an integer") as info:
        read_llama_moe_trace_csv(path, SHAPE)
    assert str(info.value).startswith(f"{path}:3: ")  # the file's own line numbers
    path = write(tmp_path / "headed.csv", header + "\n" + "\n".join(rows) + "\n")
    trace = read_llama_moe_trace_csv(path, SHAPE)
    np.testing.assert_array_equal(trace.expert_ids, plain.expert_ids)
    assert "its header line was skipped" in trace.meta.notes
    only = write(tmp_path / "only.csv", header + "\n")
    with pytest.raises(CopeInputError, match="only a header line"):
        read_llama_moe_trace_csv(only, SHAPE)


def test_popularity_counts_every_routed_expert_of_a_long_trace():
    # Counted a few thousand tokens at a time: a trace longer than one piece, ending
    # inside the last, gives the plain per-layer counts.
    rng = np.random.default_rng(2)
    ids = np.argsort(rng.random((9_001, 3, 12)), axis=2)[:, :, :2].astype(np.int16)  # 2 distinct per token
    meta = TraceMeta(model="m", source="test", origin="synthetic", n_experts=12, moe_blocks=(0, 1, 2))
    counts = RoutingTrace(expert_ids=ids, meta=meta).popularity()
    want = np.stack([np.bincount(ids[:, layer].ravel(), minlength=12) for layer in range(3)])
    assert counts.dtype == np.int64 and np.array_equal(counts, want) and counts.sum() == 9_001 * 3 * 2
