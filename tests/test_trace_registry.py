"""The trace format registry: which reader a path gets, and the one trace-fits-model check."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.core.errors import CopeInputError
from engine.traces import (
    check_trace_fits_model,
    detect_format,
    load_any_trace,
    registry,
    save_any_trace,
    save_trace,
    write_jsonl_trace,
    write_llama_moe_trace_csv,
)
from engine.traces.format import TraceFormat
from tests.test_trace_io import _ids, make_model, make_trace, write_moe_beyond

UNKNOWN = ("unknown trace format (expected .cope.npz, llama-moe-trace .csv, .jsonl, a folder of "
           "moe-beyond CSV files, FLAME-MoE layer_NN.parquet or CommitMoE labels .safetensors)")


def _files(tmp_path: Path) -> dict[str, Path]:
    """One file per writable format, under names that do not tell the format."""
    trace = make_trace(predictions=False)
    paths = {"cope-npz": tmp_path / "a.bin", "llama-moe-trace-csv": tmp_path / "b.dat",
             "jsonl": tmp_path / "c.log"}
    save_trace(trace, paths["cope-npz"])
    write_llama_moe_trace_csv(trace, paths["llama-moe-trace-csv"])
    write_jsonl_trace(trace, paths["jsonl"])
    return paths


def test_without_a_telling_suffix_the_first_bytes_decide(tmp_path):
    model, trace = make_model(), make_trace(predictions=False)
    for name, path in _files(tmp_path).items():
        assert detect_format(path).name == name
        back = load_any_trace(path, model=model)
        np.testing.assert_array_equal(back.expert_ids, trace.expert_ids, err_msg=name)
        np.testing.assert_array_equal(back.seq_starts, trace.seq_starts, err_msg=name)
    write_moe_beyond(tmp_path / "prompt.txt", ["x", "y"], _ids(1))
    assert detect_format(tmp_path / "prompt.txt").name == "moe-beyond-csv"


def test_the_suffix_wins_over_the_content(tmp_path):
    files = _files(tmp_path)
    jsonl_as_csv = files["jsonl"].rename(tmp_path / "routing.csv")
    assert detect_format(jsonl_as_csv).name == "llama-moe-trace-csv"
    with pytest.raises(CopeInputError, match=r"routing\.csv:1: expected 4 comma-separated fields"):
        load_any_trace(jsonl_as_csv, model=make_model())
    csv_as_jsonl = files["llama-moe-trace-csv"].rename(tmp_path / "decode.JSONL")
    assert detect_format(csv_as_jsonl).name == "jsonl"
    assert detect_format(files["cope-npz"].rename(tmp_path / "x.npz")).name == "cope-npz"


def test_two_formats_on_one_suffix_are_told_apart_by_content(tmp_path):
    write_moe_beyond(tmp_path / "prompt_1_data.csv", ["x", "y"], _ids(1))
    assert detect_format(tmp_path / "prompt_1_data.csv").name == "moe-beyond-csv"
    (tmp_path / "garbage.csv").write_text("hello\n", encoding="utf-8")
    assert detect_format(tmp_path / "garbage.csv").name == "llama-moe-trace-csv"  # the first to claim .csv
    assert detect_format(tmp_path).name == "moe-beyond-csv"  # a folder


def test_an_explicit_format_is_used_as_named(tmp_path):
    path = _files(tmp_path)["jsonl"]
    trace = load_any_trace(path, model=make_model(), format="jsonl")
    assert trace.weights is not None
    with pytest.raises(CopeInputError, match=r"c\.log:1: expected 4 comma-separated fields"):
        load_any_trace(path, model=make_model(), format="llama-moe-trace-csv")
    with pytest.raises(CopeInputError) as err:
        load_any_trace(path, model=make_model(), format="orc")
    assert str(err.value) == (f"{path}: unknown trace format 'orc': one of cope-npz, llama-moe-trace-csv, "
                              "jsonl, moe-beyond-csv, flame-parquet, commitmoe-safetensors")


def test_an_unknown_format_is_one_line_naming_the_file(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\nworld\n", encoding="utf-8")
    with pytest.raises(CopeInputError) as err:
        load_any_trace(notes, model=make_model())
    assert str(err.value) == f"{notes}: {UNKNOWN}"
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with pytest.raises(CopeInputError, match=r"empty: unknown trace format"):
        detect_format(empty)
    with pytest.raises(CopeInputError, match=r"nope\.bin: no such file or folder"):
        detect_format(tmp_path / "nope.bin")


def test_formats_without_a_model_shape_need_the_model(tmp_path):
    files = _files(tmp_path)
    with pytest.raises(CopeInputError, match=r"b\.dat: a llama-moe-trace CSV trace does not name its model"):
        load_any_trace(files["llama-moe-trace-csv"], model=None)
    own = load_any_trace(files["cope-npz"], model=None)  # records its own shape: nothing to check against
    assert own.meta.model == "tiny"


def test_a_new_format_is_one_entry(tmp_path, monkeypatch):
    """What a later format (parquet, safetensors) needs: a TraceFormat listed in FORMATS."""
    trace = make_trace(predictions=False)
    seen = []

    def read(path, *, model=None):
        seen.append(path)
        return trace

    fake = TraceFormat(name="fake", label=".fake", suffixes=(".fake",),
                       sniff=lambda path, head: head.startswith(b"FAKE"), read=read)
    monkeypatch.setattr(registry, "FORMATS", registry.FORMATS + (fake,))
    (tmp_path / "t.fake").write_bytes(b"whatever")
    (tmp_path / "t.other").write_bytes(b"FAKE1")
    assert load_any_trace(tmp_path / "t.fake", model=make_model()) is trace
    assert load_any_trace(tmp_path / "t.other", model=make_model()) is trace
    assert seen == [str(tmp_path / "t.fake"), str(tmp_path / "t.other")]
    (tmp_path / "notes.txt").write_text("hello\n", encoding="utf-8")
    with pytest.raises(CopeInputError, match=r"CommitMoE labels \.safetensors or \.fake\)$"):
        load_any_trace(tmp_path / "notes.txt", model=make_model())


def test_save_any_trace_writes_the_format_the_name_says(tmp_path):
    trace, model = make_trace(predictions=False), make_model()
    for name in ("t.cope.npz", "t.csv", "t.ndjson"):
        save_any_trace(trace, tmp_path / name)
        np.testing.assert_array_equal(load_any_trace(tmp_path / name, model=model).expert_ids, trace.expert_ids)
    assert detect_format(tmp_path / "t.ndjson").name == "jsonl"
    save_any_trace(trace, tmp_path / "t.out", format="jsonl")
    assert (tmp_path / "t.out").read_text(encoding="utf-8").startswith('{"seq":0,"token":0,"layer":1,')
    with pytest.raises(CopeInputError, match=r"t\.txt: cannot tell the trace format from the name: end it with "
                                             r"one of \.npz, \.csv, \.jsonl, \.ndjson$"):
        save_any_trace(trace, tmp_path / "t.txt")
    with pytest.raises(CopeInputError, match=r"x: COPE reads moe-beyond-csv traces but does not write them$"):
        save_any_trace(trace, tmp_path / "x", format="moe-beyond-csv")


def test_the_one_fit_check_names_the_trace_the_file_and_every_mismatch():
    trace = make_trace()
    check_trace_fits_model(trace, make_model())  # fits: no error
    other = make_model("bigger", n_blocks=5, moe=(0, 1, 2), experts=16, k=4)
    with pytest.raises(CopeInputError) as err:
        check_trace_fits_model(trace, other, what="profile trace")
    assert str(err.value) == (
        "unit test: profile trace (from tiny) does not fit model bigger: 8 experts per layer, the model has 16; "
        "top-2 routing, the model uses top-4; numbers its MoE blocks 1..3, the model has 0..2"
    )
    unnamed = replace(trace, meta=replace(trace.meta, model=""))
    with pytest.raises(CopeInputError, match=r"^f\.csv: trace \(from an unnamed model\) does not fit model bigger"):
        check_trace_fits_model(unnamed, other, path="f.csv")
