"""Hostile inputs, round two (issue 32): special files never opened as data, sizes and
shapes checked before reading, the bandwidth and calibration caches hardened.

Where a regression would hang (a FIFO opened for reading waits for a writer forever), the
command runs in a subprocess with a timeout, so the test fails instead of the suite hanging.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cope_tui.exit_codes import EXIT_INPUT, EXIT_OK
from engine.core.errors import CopeInputError

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")

HANG_GUARD_S = 90  # far beyond any of these runs; only a hang reaches it
FAST = ["--gpu", "rtx-4090", "--fidelity", "analytic", "--tokens", "50"]
QWEN_CONFIG = {"model_type": "qwen3_moe", "num_experts": 128, "num_experts_per_tok": 8, "hidden_size": 2048,
               "num_hidden_layers": 48, "vocab_size": 151936, "moe_intermediate_size": 768,
               "intermediate_size": 6144, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128}


def cope(args: list[str], cache: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COPE_CACHE_DIR": str(cache), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    try:
        return subprocess.run([sys.executable, "-m", "cope_tui.cli", *args], capture_output=True, text=True,
                              timeout=HANG_GUARD_S, env=env, stdin=subprocess.DEVNULL, cwd=cwd)
    except subprocess.TimeoutExpired:
        pytest.fail(f"cope {' '.join(args)} hung (still running after {HANG_GUARD_S} s)")


def one_line_error(proc: subprocess.CompletedProcess, *words: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == EXIT_INPUT, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("cope: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# --- 1. special files -------------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path):
    def make(name: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
        return path

    return make


@pytest.mark.parametrize("flag,name", [("--trace", "t.csv"), ("--trace", "t.cope.npz"),
                                       ("--profile-trace", "p.jsonl"), ("--model", "config.json"),
                                       ("--model", "m.gguf")])
def test_a_fifo_given_as_an_input_is_refused_unopened(tmp_path, fifo, flag, name):
    path = fifo(f"in/{name}")
    args = FAST + ([flag, str(path)] if flag == "--model" else ["--model", "qwen3-30b-a3b", flag, str(path)])
    one_line_error(cope(["advise", *args], tmp_path / "cache"), str(path), "FIFO")


def test_a_fifo_gguf_in_a_model_folder_is_refused(tmp_path, fifo):
    path = fifo("models/m.gguf")
    one_line_error(cope(["advise", "--model", str(path.parent), *FAST], tmp_path / "cache"), str(path), "FIFO")


def test_a_fifo_layer_file_in_a_flame_trace_folder_is_refused(tmp_path, fifo):
    path = fifo("flame/layer_01.parquet")
    proc = cope(["advise", "--model", "qwen3-30b-a3b", *FAST, "--trace", str(path.parent)], tmp_path / "cache")
    one_line_error(proc, "layer_01.parquet", "FIFO")


def test_a_fifo_as_calibrate_gguf_or_prompts_is_refused(tmp_path, fifo):
    gguf = fifo("m.gguf")
    one_line_error(cope(["calibrate", "--gguf", str(gguf)], tmp_path / "cache"), "--gguf", "FIFO")
    prompts = fifo("prompts.txt")
    proc = cope(["trace", "record", "--model", "qwen3-30b-a3b", "--prompts", str(prompts),
                 "--out", str(tmp_path / "o.cope.npz")], tmp_path / "cache")
    one_line_error(proc, "prompts.txt", "FIFO")


def test_a_link_to_a_device_is_refused_as_a_config(tmp_path):
    link = tmp_path / "config.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(CopeInputError, match="is a device .*expected a regular"):
        from engine.models.hf_config import model_from_hf_config

        model_from_hf_config(link)


@pytest.mark.parametrize("target", ["fifo", "folder"])
def test_validate_out_onto_a_fifo_or_a_folder_is_refused_before_any_work(tmp_path, fifo, target):
    out = fifo("out.json") if target == "fifo" else tmp_path
    proc = cope(["validate", "--model", "qwen3-30b-a3b", "--out", str(out), "--max-seconds", "5"], tmp_path / "cache")
    line = one_line_error(proc, "--out", str(out))
    assert "estimating" not in proc.stderr and ("FIFO" in line or "folder" in line)


def test_output_path_checks_the_folder(tmp_path):
    from engine.core.user_paths import output_path

    assert output_path(str(tmp_path / "new.json"), flag="--out") == tmp_path / "new.json"
    assert output_path(str(tmp_path / "to be made" / "x.json"), flag="--out") == tmp_path / "to be made" / "x.json"
    (tmp_path / "file").write_text("")
    with pytest.raises(CopeInputError, match="--out .*file: is a file, not a folder to write into"):
        output_path(str(tmp_path / "file" / "sub" / "x.json"), flag="--out")


# --- 2. sizes and shapes ----------------------------------------------------------------


def sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def test_a_sparse_giant_config_is_refused_before_it_is_read(tmp_path):
    from engine.models.hf_config import model_from_hf_config

    path = sparse(tmp_path / "config.json", 9 * 2**30)
    with pytest.raises(CopeInputError, match=r"config.json: 9.0 GiB, larger than the 8 MiB a config.json can be"):
        model_from_hf_config(path)


def test_a_sparse_giant_non_gguf_model_file_is_refused(tmp_path):
    path = sparse(tmp_path / "model.bin", 9 * 2**30)
    one_line_error(cope(["advise", "--model", str(path), *FAST], tmp_path / "cache"), "8 MiB", str(path))


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl"])
def test_a_sparse_giant_text_trace_is_refused_after_its_first_chunk(tmp_path, name):
    from engine.models.catalog import get_model
    from engine.traces import load_any_trace

    path = sparse(tmp_path / name, 9 * 2**30)
    with pytest.raises(CopeInputError, match="NUL byte at byte 0: not a text trace"):
        load_any_trace(path, model=get_model("qwen3-30b-a3b"))


def test_a_sparse_giant_prompt_file_is_refused(tmp_path):
    from engine.traces.prompts import load_prompts

    path = sparse(tmp_path / "prompts.txt", 9 * 2**30)
    with pytest.raises(CopeInputError, match="larger than the 64 MiB a prompt file can be"):
        load_prompts(str(path))


def test_a_parquet_compression_bomb_is_refused_from_its_metadata(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    import numpy as np

    from engine.traces.flame_parquet import read_flame_parquet

    rows, width = 40, 2_000_000  # 80 million zeros: a few KB with zstd
    values = pa.array(np.zeros(rows * width, dtype=np.int16))
    offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
    path = tmp_path / "layer_02.parquet"
    pq.write_table(pa.table({"indices": pa.ListArray.from_arrays(offsets, values)}), path, compression="zstd")
    assert path.stat().st_size < 1_000_000
    with pytest.raises(CopeInputError, match="declares 80,000,000 values in 40 rows, more than 64 experts a token"):
        read_flame_parquet(path, n_experts=64)


def _flame_layer(path: Path, ids) -> Path:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    import numpy as np

    ids = np.asarray(ids, dtype=np.int16)
    offsets = pa.array(np.arange(0, ids.size + 1, ids.shape[1], dtype=np.int32))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"indices": pa.ListArray.from_arrays(offsets, pa.array(ids.ravel()))}), path,
                   compression="zstd")
    return path


def test_a_parquet_of_millions_of_zero_rows_is_refused_at_its_first_batch(tmp_path):
    import numpy as np

    from engine.traces.flame_parquet import read_flame_parquet

    path = _flame_layer(tmp_path / "flame" / "layer_02.parquet", np.zeros((2_000_000, 8)))  # 16 M zeros
    assert path.stat().st_size < 200_000
    with pytest.raises(CopeInputError, match=r"layer_02.parquet: row 0: a token routes to the same expert twice"):
        read_flame_parquet(path.parent, n_experts=64)


def test_a_flame_trace_keeps_what_the_replay_budget_takes(tmp_path, monkeypatch):
    import numpy as np

    from engine.traces.flame_parquet import read_flame_parquet

    rows = np.stack([np.arange(1000) % 8, (np.arange(1000) + 1) % 8], axis=1)  # top-2 of 8, 1,000 tokens
    for layer in (2, 3):
        _flame_layer(tmp_path / "flame" / f"layer_{layer:02d}.parquet", rows)
    assert read_flame_parquet(tmp_path / "flame", n_experts=8).n_tokens == 1000
    monkeypatch.setenv("COPE_MAX_REPLAY_SLOTS", "1000")  # two halves of 1,000 slots: 500 tokens of 2 x top-2
    trace = read_flame_parquet(tmp_path / "flame", n_experts=8)
    assert trace.n_tokens == 500 and np.array_equal(trace.expert_ids[:, 0], rows[:500])
    assert "kept the first 500 of 1,000 tokens of flame (what the replay budget" in trace.meta.notes[0]


@pytest.mark.parametrize("experts,match", [
    (16_384, "declares 16,384 routed experts a layer, more than the 4,096"),
    ("1e8", "declares 100,000,000 routed experts"),
    ("1" + "0" * 400, "a number of 401 digits"),
    ("1e400", "too large for a float"),
])
def test_a_config_declaring_absurd_expert_counts_is_refused(tmp_path, experts, match):
    from engine.models.hf_config import model_from_hf_config

    text = json.dumps({**QWEN_CONFIG, "num_experts": 7}).replace('"num_experts": 7', f'"num_experts": {experts}')
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(CopeInputError, match=match):
        model_from_hf_config(path)


def test_a_config_of_1000_blocks_and_4096_experts_is_refused(tmp_path):
    from engine.models.hf_config import model_from_hf_config

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**QWEN_CONFIG, "num_experts": 4096, "num_hidden_layers": 1000}))
    with pytest.raises(CopeInputError, match="1,000 MoE layers x 4,096 experts = 4,096,000 experts in all"):
        model_from_hf_config(path)


def test_deeply_nested_json_is_one_line(tmp_path):
    from engine.models.hf_config import model_from_hf_config
    from engine.core.input_limits import parse_json

    path = tmp_path / "config.json"
    path.write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(CopeInputError, match="nested deeper than 64 levels"):
        model_from_hf_config(path)
    with pytest.raises(CopeInputError, match="nested deeper than 64 levels"):
        parse_json("[" * 70 + "]" * 70, where="x", what="thing")
    assert parse_json("[" * 60 + "]" * 60, where="x", what="thing") is not None


def test_a_gguf_declaring_2000_blocks_of_65536_experts_is_refused(tmp_path):
    pytest.importorskip("gguf")
    from cope_tui.sources.gguf_model import model_from_gguf
    from tests.gguf_bytes import U32, base, encode

    g = base().with_field("qwen3moe.block_count", U32, 2000).with_field("qwen3moe.expert_count", U32, 65536)
    path = tmp_path / "m.gguf"
    path.write_bytes(encode(g))
    with pytest.raises(CopeInputError, match="declares 2,000 blocks, more than the 1,024"):
        model_from_gguf(path)


@pytest.mark.parametrize("field,match", [("n_tensors", "200,000 tensors, more than the 100,000"),
                                         ("n_kv", "3,000,000 metadata keys, more than the 10,000")])
def test_a_gguf_declaring_millions_of_keys_or_tensors_is_refused_at_once(tmp_path, field, match):
    pytest.importorskip("gguf")
    from dataclasses import replace

    from cope_tui.sources.gguf_model import model_from_gguf
    from tests.gguf_bytes import base, encode

    count = 200_000 if field == "n_tensors" else 3_000_000
    path = tmp_path / "m.gguf"
    path.write_bytes(encode(replace(base(), **{field: count})))
    sparse_end = path.stat().st_size + 64 * count  # room enough that only the cap refuses it
    os.truncate(path, sparse_end)
    with pytest.raises(CopeInputError, match=match):
        model_from_gguf(path)


def test_tokens_above_the_maximum_is_one_line(tmp_path):
    proc = cope(["advise", "--model", "qwen3-30b-a3b", "--gpu", "rtx-4090", "--fidelity", "analytic",
                 "--tokens", "10000000"], tmp_path / "cache")
    one_line_error(proc, "--tokens must be at most 100,000")


# --- 3. the bandwidth and calibration caches --------------------------------------------


def machine_key() -> str:
    from probes.host import detect_cpu, this_machine_key

    return this_machine_key(detect_cpu())


def test_a_bad_bandwidth_record_is_set_aside_with_one_warning(tmp_path):
    from engine.hardware.bandwidth_store import BandwidthCacheWarning, load_measurement, store_path

    path = store_path("k", tmp_path)
    path.parent.mkdir(parents=True)
    for content in ("[" * 100_000 + "]" * 100_000, '{"schema": "cope-cpu-bandwidth", "bytes_per_s": 1e999}'):
        path.write_text(content)
        with pytest.warns(BandwidthCacheWarning, match="not used, moved to cpu-bandwidth-k.json.corrupt-"):
            assert load_measurement("k", tmp_path) is None
        assert not path.exists()
    path.symlink_to("/dev/zero")
    with pytest.warns(BandwidthCacheWarning, match="is a device"):
        assert load_measurement("k", tmp_path) is None
    assert not os.path.lexists(path)
    assert load_measurement("k", tmp_path) is None  # nothing there: no warning, no error


@pytest.mark.parametrize("which", ["bandwidth", "calibration"])
def test_a_fifo_in_the_machine_cache_never_hangs_advise(tmp_path, which):
    cache = tmp_path / "cache"
    folder = cache / "machine"
    folder.mkdir(parents=True)
    key = machine_key()
    name = f"cpu-bandwidth-{key}.json" if which == "bandwidth" else f"calibration-{key}-qwen3-30b-a3b-Q4_K_M.json"
    os.mkfifo(folder / name)
    args = ["advise", "--model", "qwen3-30b-a3b", "--gpu", "rtx-4090", "--tokens", "50"]  # default fidelity: looks
    proc = cope(args, cache)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "Traceback" not in proc.stderr
    assert any(name in line and "FIFO" in line for line in proc.stderr.splitlines()), proc.stderr
    assert not os.path.lexists(folder / name)
    again = cope(args, cache)
    assert again.returncode == EXIT_OK and name not in again.stderr, again.stderr


def test_a_deeply_nested_calibration_is_set_aside(tmp_path):
    from engine.cost.calibration_io import find_calibration

    folder = tmp_path / "machine"
    folder.mkdir()
    (folder / "calibration-k-m-q.json").write_text("[" * 100_000 + "]" * 100_000)
    found = find_calibration("k", "m", "q", tmp_path)
    assert found.calibration is None and len(found.problems) == 1
    assert "nested deeper than 64 levels" in found.problems[0] and "moved to" in found.problems[0]


# --- 4. runtime output ------------------------------------------------------------------


@pytest.mark.parametrize("text, says", [
    ('[{"n_prompt": 0, "n_gen": 64, "n_threads": 2, "avg_ts": ' + "9" * 5000 + "}]", "more than 4300 digits"),
    ('[{"n_prompt": 0, "n_gen": 64, "n_threads": 2, "avg_ts": 1, "n_depth": ' + "9" * 400 + "}]",
     "a number of 400 digits"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 64"),
    ('[{"n_prompt": 0, "n_gen": 64, "n_threads": 2, "avg_ts": 1e999}]', "too large for a float"),
])
def test_llama_bench_json_with_limits(text, says):
    from engine.llamacpp.llama_bench_json import parse_bench_output

    with pytest.raises(CopeInputError, match="not llama-bench's -o json") as info:
        parse_bench_output(text, where="/opt/llama-bench (cpu-only run)")
    assert says in str(info.value) and str(info.value).startswith("/opt/llama-bench (cpu-only run): ")


def test_a_fit_that_misses_its_runs_is_refused_and_never_stored(tmp_path, monkeypatch):
    pytest.importorskip("gguf")
    from dataclasses import replace

    import engine.advice.calibration_fit as calibration_fit
    from cope_tui.service.calibrate import calibrate
    from tests import tiny_gguf as tg
    from tests.fake_llama_bench import FakeMachine, model_facts, write_fake

    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    real = calibration_fit.fit_lanes

    def off_by_700x(*args, **kwargs):  # a fit whose residual is 70,000 %
        fit = real(*args, **kwargs)
        return replace(fit, fitted_tokens_per_s=tuple(700 * f for f in fit.fitted_tokens_per_s))

    monkeypatch.setattr(calibration_fit, "fit_lanes", off_by_700x)
    weights = tg.random_weights(0)
    gguf = tg.write_gguf(tmp_path / "tiny.gguf", weights)
    bench = write_fake(tmp_path, FakeMachine(**model_facts(weights)))
    with pytest.raises(CopeInputError, match=r"calibration refused: .* more than 2x apart: nothing stored"):
        calibrate(str(gguf), bench=str(bench), threads=2, machine=("k", "cpu"))
    assert not list((tmp_path / "cache").rglob("calibration-*.json"))


# --- 5. what used to end in a traceback -------------------------------------------------


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    from cope_tui.cli import main

    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing here may reach the internet

    def run(*args: str) -> str:
        code = main(list(args))
        err = capsys.readouterr().err
        assert code == EXIT_INPUT, err
        lines = err.strip().splitlines()
        assert lines and lines[-1].startswith("cope: error: ") and "Traceback" not in err, err
        return lines[-1]

    return run


LONG = "a" * 300


@pytest.mark.parametrize("args, says", [
    (["trace", "pull", "org/repo/x.cope.npz", "--revision", "../.."], "--revision '../..': not a branch"),
    (["trace", "push", "org/repo", "--trace", ""], "--trace: the path is empty"),
    (["advise", "--model", "~nosuchuser/config.json", *FAST], "--model ~nosuchuser/config.json: ~nosuchuser names no user"),
    (["advise", "--model", "qwen3-30b-a3b", *FAST, "--trace", "~nosuchuser/t.npz"], "--trace ~nosuchuser/t.npz"),
    (["advise", *FAST, "--llama-bin", "~nosuchuser/bin"], "--llama-bin must be a folder; ~nosuchuser/bin"),
    (["export", "--candidate", "partition-first", *FAST, "--out", "~nosuchuser/run.sh"], "--out ~nosuchuser/run.sh"),
    (["trace", "record", "--model", "org/x", "--prompts", "~nosuchuser/p.txt"], "--prompts ~nosuchuser/p.txt"),
    (["calibrate", "--gguf", "~nosuchuser/m.gguf"], "--gguf ~nosuchuser/m.gguf"),
    (["advise", "--model", "qwen3-30b-a3b", *FAST, "--trace", f"/tmp/{LONG}.npz"], "a name in the path is 304 bytes"),
    (["advise", "--model", f"/tmp/{LONG}.json", *FAST], "a name in the path is 305 bytes"),
    (["advise", "--model", "qwen3-30b-a3b", *FAST, "--trace", "t\x00.npz"], "the path holds a NUL byte"),
])
def test_bad_paths_are_one_line(cli, args, says):
    assert says in cli(*args)


def test_a_split_gguf_name_of_zero_shards_is_one_line(cli, tmp_path):
    path = tmp_path / "m-00001-of-00000.gguf"
    path.write_bytes(b"GGUF")
    assert "shard 1 of 0" in cli("advise", "--model", str(path), *FAST)


def test_a_config_over_the_size_limit_is_one_line(cli, tmp_path):
    path = sparse(tmp_path / "big.config.json", 64 * 2**20)
    assert "64 MiB, larger than the 8 MiB a config.json can be" in cli("advise", "--model", str(path), *FAST)


def test_recording_without_transformers_names_the_extra(cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if it were not installed
    assert "pip install 'cope-tui[record]'" in cli("trace", "record", "--model", "org/x", "--tokens", "4")


def test_export_onto_a_fifo_leaves_the_side_files_alone(cli, tmp_path, fifo):
    out = fifo("run.sh")
    side = tmp_path / "cope-qwen3-30b-a3b-kt-activation.pt"  # what sglang-kt's export writes beside it
    side.write_bytes(b"old")
    line = cli("export", "--runtime", "sglang-kt", "--candidate", "fixed.parallel.uniform", "--model", "qwen3-30b-a3b",
               *FAST, "--out", str(out))
    assert "FIFO" in line and side.read_bytes() == b"old"
