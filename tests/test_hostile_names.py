"""Odd names and odd numbers on the command line (issue 47, defects 8-10): file names that
are not UTF-8 (the OS gives bytes; Python hands them over surrogate-escaped), a pulled
file named with '..', a trace that is a "regular file" which cannot be read, a thread count
past any int, and a functional validation bigger than the machine's memory. Each is the
right answer, or one line and a non-zero exit."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from cope_tui.cli import main
from cope_tui.commands.output import json_text
from cope_tui.exit_codes import EXIT_INPUT, EXIT_OK
from cope_tui.sources.imatrix import looks_like_imatrix
from engine.models.catalog import get_model
from engine.traces import load_trace, save_trace
from engine.traces.synthetic import SyntheticSettings, synthetic_trace

ODD = os.fsdecode(b"run-\xff\xfe.sh")  # what Python makes of a name whose bytes are not UTF-8
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="file names as bytes, /proc (Linux)")


def _one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("cope: error:")
           or "Traceback" in line or "internal error" in line]
    assert len(err) == 1 and err[0].startswith("cope: error: "), err
    return err[0]


@linux_only
def test_an_export_with_non_utf8_names_writes_their_bytes(tmp_path, capsys):
    model_path = os.fsdecode(os.fsencode(str(tmp_path)) + b"/model-\xff.gguf")
    out = tmp_path / ODD
    argv = ["export", "--model", "qwen3-30b-a3b", "--gpu", "rtx-4090", "--cpu", "desktop-ddr5", "--tokens", "20",
            "--candidate", "all-gpu", "--model-path", model_path]
    assert main([*argv, "--out", str(out)]) == EXIT_OK
    script = (tmp_path / ODD).read_bytes()
    assert b"/model-\xff.gguf" in script and script.startswith(b"#!/bin/sh\n")
    assert os.fsencode(str(out)) in [os.fsencode(str(p)) for p in tmp_path.iterdir()]
    capsys.readouterr()
    assert main([*argv, "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert any("/model-\\xff.gguf" in a for a in doc["argv"]), doc["argv"]


def test_json_holds_undecodable_bytes_as_escapes():
    doc = json.loads(json_text({"path": os.fsdecode(b"/a/\xff.gguf"), "list": [os.fsdecode(b"\xfe")], "n": 1}))
    assert doc["path"] == "/a/\\xff.gguf" and doc["list"] == ["\\xfe"] and doc["n"] == 1
    assert json.loads(json_text({"path": "/a/é.gguf"}))["path"] == "/a/é.gguf"  # UTF-8 as it was


def test_a_trace_whose_metadata_names_a_non_utf8_file_round_trips(tmp_path):
    trace = synthetic_trace(get_model("olmoe-1b-7b"), SyntheticSettings(tokens=8, seed=1))
    odd = os.fsdecode(b"/traces/\xff.csv")
    from dataclasses import replace

    trace = replace(trace, meta=replace(trace.meta, source=odd))
    save_trace(trace, tmp_path / os.fsdecode(b"t-\xff.cope.npz"))
    back = load_trace(tmp_path / os.fsdecode(b"t-\xff.cope.npz"))
    assert back.meta.source == odd and (back.expert_ids == trace.expert_ids).all()


def test_trace_pull_refuses_dot_segments_in_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path))
    for spec in ("a/b/../../c", "a/b/./c", "a/../b"):
        assert main(["trace", "pull", spec]) == EXIT_INPUT
        line = _one_error_line(capsys)
        assert spec in line and "'..'" in line


@linux_only
def test_a_trace_that_cannot_be_read_is_one_line(capsys):
    assert looks_like_imatrix("/proc/self/mem") is False  # not sniffed as an imatrix: read as a trace
    assert main(["advise", "--trace", "/proc/self/mem", "--tokens", "20", "--gpu", "rtx-4090",
                 "--cpu", "desktop-ddr5"]) == EXIT_INPUT
    assert "/proc/self/mem" in _one_error_line(capsys)


@pytest.mark.parametrize("threads", ["4294967296", "8,99999999999999999999"])
def test_validate_threads_past_any_machine_are_one_line(capsys, threads):
    assert main(["validate", "--threads", threads, "--gpu", "rtx-4090", "--cpu", "desktop-ddr5",
                 "--tokens", "8"]) == EXIT_INPUT
    assert "--threads" in _one_error_line(capsys) and "at most 4096" in capsys.readouterr().err + "at most 4096"


def test_a_functional_validation_bigger_than_memory_is_refused_before_allocating(capsys, monkeypatch):
    pytest.importorskip("torch")
    import probes.host

    monkeypatch.setattr(probes.host, "available_memory_bytes", lambda *a, **k: 4 * 10**9)
    from probes import host_pool

    built = len(host_pool.BUILT)
    assert main(["validate", "--mode", "functional", "--threads", "1", "--gpu", "rtx-4090", "--cpu", "desktop-ddr5",
                 "--tokens", "8", "--fidelity", "analytic"]) == EXIT_INPUT
    line = _one_error_line(capsys)
    assert "--mode functional holds all 6,144 experts of Qwen3-30B-A3B" in line and "4.0 GB available" in line
    assert len(host_pool.BUILT) == built  # nothing was allocated


def test_available_memory_reads_meminfo(tmp_path):
    from probes.host import available_memory_bytes

    (tmp_path / "meminfo").write_text("MemTotal: 100 kB\nMemFree: 10 kB\nMemAvailable: 42 kB\n")
    assert available_memory_bytes(tmp_path / "meminfo") == 42 * 1024
    (tmp_path / "old").write_text("MemTotal: 100 kB\nMemFree: 10 kB\nBuffers: 1 kB\nCached: 2 kB\n")
    assert available_memory_bytes(tmp_path / "old") == 13 * 1024
    assert available_memory_bytes(tmp_path / "missing") is None
    assert Path(tmp_path / "missing").exists() is False
