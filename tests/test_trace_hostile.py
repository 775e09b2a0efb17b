"""Hostile trace files: every one is a one-line CopeInputError naming the file, read
within bounds (special files refused, sizes checked before anything is allocated)."""

from __future__ import annotations

import io
import json
import os
import sys
import zipfile

import numpy as np
import pytest

from engine.core.errors import CopeInputError
from engine.traces import load_any_trace, save_trace, write_jsonl_trace, write_llama_moe_trace_csv
from engine.traces.limits import MAX_ENTRIES_ENV
from tests.test_trace_io import make_model, make_trace

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev/zero are POSIX")
MODEL = make_model()


def refused(path, match, *, format=None):
    with pytest.raises(CopeInputError, match=match) as info:
        load_any_trace(path, model=MODEL, format=format)
    line = str(info.value)
    assert line.startswith(str(path)) and "\n" not in line and len(line) < 300, line
    return line


# --- JSONL --------------------------------------------------------------------------


def _jsonl(tmp_path, text: str):
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    return path


def test_jsonl_deeply_nested_line(tmp_path):
    refused(_jsonl(tmp_path, "[" * 100_000 + "\n"), r"t\.jsonl:1: not valid JSON: nested too deeply")


def test_jsonl_5000_digit_integer(tmp_path):
    line = '{"token": 1' + "0" * 5000 + ', "layer": 1, "experts": [0, 1]}\n'
    refused(_jsonl(tmp_path, line), r"t\.jsonl:1: not valid JSON: a number of more than")


def test_jsonl_401_digit_weight(tmp_path):
    line = '{"token": 0, "layer": 1, "experts": [0, 1], "weights": [1' + "0" * 400 + ", 1]}\n"
    refused(_jsonl(tmp_path, line), r"t\.jsonl:1: 'weights' must be a list of finite numbers")


# --- llama-moe-trace CSV ------------------------------------------------------------------


@pytest.mark.parametrize("field, problem", [
    ("1_1", "is not an integer"), ("\u0661\u0661", "is not an integer"), ("1 1", "is not an integer"),
    ("1" * 5000, "is out of range"),
], ids=["underscore", "arabic-indic", "space", "5000-digits"])
def test_csv_accepts_only_plain_ascii_integers(tmp_path, field, problem):
    path = tmp_path / "t.csv"
    path.write_text(f"0,1,0,{field}\n0,2,0,1\n0,3,0,1\n", encoding="utf-8")
    refused(path, r"t\.csv:1: field .* " + problem)


# --- .cope.npz ----------------------------------------------------------------------


def _npz(tmp_path, *, meta_edit=None, header: bytes | None = None, members: dict | None = None,
         compress=False, name="t.cope.npz", predictions=True):
    """A COPE trace with its header's meta edited, its header replaced, or members replaced
    by raw .npy bytes."""
    path = tmp_path / name
    save_trace(make_trace(predictions=predictions), path)
    with np.load(path) as z:
        arrays = {n: z[n] for n in z.files}
    if meta_edit is not None or header is not None:
        if header is None:
            doc = json.loads(arrays["header"].tobytes())
            meta_edit(doc["meta"])
            header = json.dumps(doc).encode()
        arrays["header"] = np.frombuffer(header, dtype=np.uint8)
    raw = {}
    for n, a in arrays.items():
        buf = io.BytesIO()
        np.lib.format.write_array(buf, a)
        raw[n + ".npy"] = buf.getvalue()
    raw.update(members or {})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as zf:
        for n, data in raw.items():
            zf.writestr(n, data)
    return path


def _raw_meta_value(tmp_path, field: str, literal: str):
    """A header whose meta field `field` is the JSON text `literal` (e.g. 1e999)."""
    marker = "__HOSTILE__"
    path = _npz(tmp_path, meta_edit=lambda m: m.__setitem__(field, marker))
    with np.load(path) as z:
        text = z["header"].tobytes().decode().replace(f'"{marker}"', literal)
    return _npz(tmp_path, header=text.encode())


@pytest.mark.parametrize("field, literal, match", [
    ("n_experts", "1e999", r"n_experts is inf, expected an integer"),
    ("n_experts", "8.9", r"n_experts is 8.9, expected an integer"),
    ("moe_blocks", "[1.0, 2.0, 3.0]", r"moe_blocks must be a list of integers"),
    ("moe_blocks", '{"1": 1, "2": 2, "3": 3}', r"moe_blocks must be a list of integers"),
    ("notes", '"abc"', r"notes must be a list of text"),
    ("model", '{"nested": {"deeper": 1}}', r"model is \{'nested'.*expected text"),
], ids=["inf", "float", "float-blocks", "object-blocks", "string-notes", "nested-model"])
def test_npz_header_fields_are_checked_not_coerced(tmp_path, field, literal, match):
    refused(_raw_meta_value(tmp_path, field, literal), r"bad trace metadata in header: " + match)


def test_npz_header_5000_digit_integer(tmp_path):
    refused(_raw_meta_value(tmp_path, "n_experts", "1" + "0" * 5000),
            r"header is not UTF-8 JSON: a number of more than 4300 digits")


def test_npz_deeply_nested_header(tmp_path):
    refused(_npz(tmp_path, header=b"[" * 100_000), r"header is not UTF-8 JSON: nested too deeply")


def test_npz_empty_member(tmp_path):
    refused(_npz(tmp_path, members={"expert_ids.npy": b""}), r"array 'expert_ids' is damaged")


def _forged(shape, dtype="<i2", data=b"\0" * 64) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": False, "shape": shape})
    return buf.getvalue() + data


def test_npz_forged_shape_of_128_tib_is_refused_before_allocating(tmp_path):
    path = _npz(tmp_path, members={"expert_ids.npy": _forged((2**45, 3, 2))})
    refused(path, r"array 'expert_ids' \(shape \(35184372088832, 3, 2\)\) holds 211,106,232,532,992 routing entries")


def test_npz_forged_shape_beyond_any_number_stays_one_short_line(tmp_path):
    path = _npz(tmp_path, members={"predicted_ids.npy": _forged((2**62, 2**62, 2**31 - 1))})
    refused(path, r"array 'predicted_ids' .* holds 4.57e\+46 routing entries")


def test_npz_an_empty_array_claiming_a_huge_dimension(tmp_path):
    path = _npz(tmp_path, members={"predicted_ids.npy": _forged((2**31 - 1, 2**32 - 1, 0), data=b"")})
    refused(path, r"array 'predicted_ids' \(shape \(2147483647, 4294967295, 0\)\) holds 4,294,967,295")


def test_npz_shape_larger_than_its_member_is_refused(tmp_path):
    refused(_npz(tmp_path, members={"expert_ids.npy": _forged((100, 3, 2))}),
            r"array 'expert_ids' claims 1,200 bytes of data but holds 64")


def test_a_decompression_bomb_is_bounded_and_the_limit_can_be_raised(tmp_path, monkeypatch):
    ids = np.zeros((200_000, 3, 2), dtype=np.int16)
    ids[:, :, 1] = 1
    members = {"expert_ids.npy": _forged(ids.shape, data=ids.tobytes()),
               "weights.npy": _forged((200_000, 3, 2), "<f4", data=np.full(ids.shape, 0.5, "<f4").tobytes()),
               "seq_starts.npy": _forged((1,), "<i8", data=np.zeros(1, "<i8").tobytes())}
    path = _npz(tmp_path, members=members, compress=True, predictions=False)
    assert path.stat().st_size < 100_000  # small on disk, 3.6 MB inflated
    monkeypatch.setenv(MAX_ENTRIES_ENV, "1000000")
    refused(path, rf"array 'expert_ids' \(shape \(200000, 3, 2\)\) holds 1,200,000 routing entries "
                  rf".* more than {MAX_ENTRIES_ENV}=1,000,000")
    monkeypatch.setenv(MAX_ENTRIES_ENV, "2000000")
    assert load_any_trace(path, model=MODEL).n_tokens == 200_000


def test_text_traces_are_bounded_by_the_same_limit(tmp_path, monkeypatch):
    trace = make_trace()
    write_llama_moe_trace_csv(trace, tmp_path / "t.csv")
    write_jsonl_trace(trace, tmp_path / "t.jsonl")
    monkeypatch.setenv(MAX_ENTRIES_ENV, "10")
    refused(tmp_path / "t.csv", r"t\.csv: .* more than COPE_MAX_TRACE_ENTRIES=10")
    refused(tmp_path / "t.jsonl", r"t\.jsonl: .* more than COPE_MAX_TRACE_ENTRIES=10")


@pytest.mark.parametrize("value", ["0", "lots", "-5", "1e9"])
def test_a_bad_limit_is_named(tmp_path, monkeypatch, value):
    save_trace(make_trace(), tmp_path / "t.cope.npz")
    monkeypatch.setenv(MAX_ENTRIES_ENV, value)
    with pytest.raises(CopeInputError, match=rf"{MAX_ENTRIES_ENV}={value!r}: expected a whole number >= 1"):
        load_any_trace(tmp_path / "t.cope.npz", model=MODEL)


# --- special files ------------------------------------------------------------------


@posix_only
@pytest.mark.parametrize("format", [None, "cope-npz", "llama-moe-trace-csv", "jsonl", "moe-beyond-csv"])
def test_a_fifo_as_the_trace_is_refused_without_blocking(tmp_path, format):
    fifo = tmp_path / "routing.csv"
    os.mkfifo(fifo)
    refused(fifo, r"routing\.csv: is a FIFO \(named pipe\), expected a regular", format=format)


@posix_only
@pytest.mark.parametrize("format", [None, "cope-npz", "llama-moe-trace-csv", "jsonl", "moe-beyond-csv"])
def test_dev_zero_as_the_trace_is_refused(format):
    refused("/dev/zero", r"/dev/zero: is a device, expected a regular", format=format)


@posix_only
def test_cli_refuses_dev_zero_as_trace(capsys):
    from cope_tui import cli

    assert cli.main(["advise", "--json", "--trace", "/dev/zero", "--cpu", "desktop-ddr5"]) == cli.EXIT_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("cope: error: /dev/zero: is a device")
