"""`cope verify` against a fake llama-bench written by the test (no llama.cpp needed)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main
from cope_tui.service.verify import parse_bench_json

# What llama-bench -o json prints for `-p 0 -n 64 -r 3` (fields of json_printer, trimmed values).
RECORDED = [
    {
        "build_commit": "0104b151", "build_number": 7000, "cpu_info": "AMD Ryzen 9 7950X",
        "gpu_info": "NVIDIA GeForce RTX 4060 Ti", "backends": "CUDA", "model_filename": "model.gguf",
        "model_type": "qwen3moe 30B.A3B Q4_K - Medium", "model_size": 18556682240, "model_n_params": 30532122624,
        "n_batch": 2048, "n_ubatch": 512, "n_threads": 16, "cpu_mask": "0x0", "cpu_strict": False, "poll": 50,
        "type_k": "f16", "type_v": "f16", "n_gpu_layers": 99, "n_cpu_moe": 11, "split_mode": "layer",
        "main_gpu": 0, "no_kv_offload": False, "flash_attn": 1, "devices": "auto", "tensor_split": "0.00",
        "tensor_buft_overrides": "none", "load_mode": "none", "embeddings": False, "no_op_offload": 0,
        "no_host": False, "fit_target": 0, "fit_min_ctx": 0, "n_prompt": 0, "n_gen": 64, "n_depth": 0,
        "test_time": "2026-05-01T10:00:00Z", "avg_ns": 1552300000, "stddev_ns": 19000000,
        "avg_ts": 41.23, "stddev_ts": 0.51,
        "samples_ns": [1530000000, 1560000000, 1567000000], "samples_ts": [41.83, 41.03, 40.84],
    }
]

FAKE = """#!{python}
import json, os, sys, time
if sys.argv[1:] == ["--version"]:
    sys.stderr.write("version: 7000 (0104b151)\\nbuilt with cc for x86_64-linux-gnu\\n")
    sys.exit(0)
if sys.argv[1:] == ["--help"]:  # which flags this build knows: the test's help text
    help_file = os.path.join(os.path.dirname(__file__), "help.txt")
    sys.stdout.write(open(help_file).read() if os.path.exists(help_file) else {old_help!r})
    sys.exit(0)
mode = open(os.path.join(os.path.dirname(__file__), "mode")).read().strip()
with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as f:
    profile = os.environ.get("GGML_MOE_CACHE_PROFILE")
    f.write(json.dumps({{"argv": sys.argv[1:], "env": os.environ.get("GGML_OP_OFFLOAD_MIN_BATCH"),
                        "profile": profile, "profile_there": bool(profile) and os.path.isfile(profile)}}) + "\\n")
if mode == "ok":
    sys.stdout.write(open(os.path.join(os.path.dirname(__file__), "recorded.json")).read())
elif mode == "fail":
    sys.stderr.write("main: error: failed to load model\\n")
    sys.exit(1)
elif mode == "malformed":
    sys.stdout.write("| model | size | params |\\n| --- | --- | --- |\\n")
elif mode == "slow":
    time.sleep(30)
elif mode == "nan":  # a build that answers nonsense: NaN tokens per second
    sys.stdout.write('[{{"n_prompt": 0, "n_gen": 64, "avg_ts": NaN, "stddev_ts": 0}}]')
elif mode == "flood":  # a runtime that never stops printing
    while True:
        sys.stdout.write("[" * 65536)
elif mode == "binary":  # output that is not UTF-8 at all
    sys.stdout.flush()
    sys.stdout.buffer.write(b"\\xff\\xfe\\x80 not text \\xc3\\x28")
"""


# llama-bench's print_usage before -lm (2026-07-23): the options COPE's commands use, -mmp among them.
OPTIONS = ("-m, --model <filename>", "-p, --n-prompt <n>", "-n, --n-gen <n>", "-ngl, --n-gpu-layers <n>",
           "-ncmoe, --n-cpu-moe <n>", "-fa, --flash-attn <0|1>", "-t, --threads <n>", "-r, --repetitions <n>",
           "-o, --output <csv|json|jsonl|md|sql>", "-ot --override-tensor <tensor name pattern>=<buffer type>;...")
OLD_HELP = "".join(f"  {o}\n" for o in OPTIONS + ("-mmp, --mmap <0|1>",))
NEW_HELP = "".join(f"  {o}\n" for o in OPTIONS + ("-lm, --load-mode <auto|none|mmap|mlock|mmap+mlock|dio>",))


@pytest.fixture
def bench(tmp_path):
    d = tmp_path / "fake bin"
    d.mkdir()
    path = d / "llama-bench"
    path.write_text(FAKE.format(python=sys.executable, old_help=OLD_HELP))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (d / "recorded.json").write_text(json.dumps(RECORDED, indent=2))
    model = tmp_path / "my model.gguf"
    model.write_bytes(b"GGUF")

    def run(mode: str, *extra: str) -> tuple[int, Path]:
        (d / "mode").write_text(mode)
        code = main(["verify", "--llama-bench", str(path), "--model-path", str(model), "--tokens", "100",
                     "--cpu", "desktop-ddr5", *extra])
        return code, d / "calls.jsonl"

    return run


def calls(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_measured_beside_predicted_for_the_export_and_the_baseline(bench, capsys):
    code, log = bench("ok", "--candidate", "partition-last", "--json")
    assert code == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    roles = [(r["role"], r["candidate"]) for r in doc["runs"]]
    assert roles == [("exported", "partition-last"), ("baseline", "partition-first")]
    for r in doc["runs"]:
        assert r["measured_tokens_per_s"] == 41.23 and r["measured_stddev_tokens_per_s"] == 0.51
        assert r["error"] == pytest.approx((r["predicted_tokens_per_s"] - 41.23) / 41.23)
        assert r["problem"] is None
    argvs = [c["argv"] for c in calls(log)]
    assert len(argvs) == 2
    for argv in argvs:
        assert argv[-8:] == ["-p", "0", "-n", "64", "-r", "3", "-o", "json"]
        assert argv[0] == "-m" and argv[1].endswith("my model.gguf")
    assert "-ot" in argvs[0] and "-ncmoe" in argvs[1]


def test_table_output_and_stage_env_reaches_the_binary(bench, capsys):
    code, log = bench("ok", "--candidate", "all-cpu")
    out = capsys.readouterr().out
    assert code == EXIT_OK
    assert "predicted tok/s" in out and "41.2 ± 0.5" in out and "%" in out
    assert calls(log)[0]["env"] is None


def test_not_expressible_candidate_measures_its_nearest(bench, capsys):
    code, _ = bench("ok", "--candidate", "layer.stage.uniform.lru.prefetch", "--json")
    assert code == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["label"] == "not-expressible" and "nearest that runs here" in doc["reason"]
    assert doc["runs"][0]["candidate"] != "layer.stage.uniform.lru.prefetch"


def test_failing_run_is_reported_with_its_message(bench, capsys):
    code, _ = bench("fail", "--candidate", "partition-last")
    out, err = capsys.readouterr()
    assert code == EXIT_INPUT
    assert "problem: llama-bench exited with 1: main: error: failed to load model" in out
    assert err.startswith("cope: error: exported run: llama-bench exited with 1")


def test_malformed_output_is_reported(bench, capsys):
    code, _ = bench("malformed", "--candidate", "partition-first")
    out, err = capsys.readouterr()
    assert code == EXIT_INPUT
    assert "malformed llama-bench output (not JSON" in out
    assert len(calls(_)) == 1  # partition-first is the baseline: one run only


@pytest.mark.parametrize("mode, problem", [("nan", "NaN is not a number JSON allows"),
                                           ("binary", "malformed llama-bench output (not JSON")])
def test_nonsense_from_the_runtime_is_refused_naming_the_binary(bench, capsys, mode, problem):
    code, log = bench(mode, "--candidate", "partition-first")
    out, err = capsys.readouterr()
    assert code == EXIT_INPUT and "nan tok/s" not in out.lower()
    assert err.count("\n") == 1 and problem in err and str(log.parent / "llama-bench") in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("text, problem", [
    ('[{"n_prompt": 0, "n_gen": 64, "avg_ts": 1e999}]', "too large for a float"),
    ('[{"n_prompt": 0, "n_gen": 64, "avg_ts": Infinity}]', "Infinity is not a number"),
    ('[{"n_prompt": 0, "n_gen": 64, "avg_ts": ' + "9" * 5000 + "}]", "more than 4300 digits"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 64"),
])
def test_parse_bench_json_refuses_what_is_not_a_speed(text, problem):
    result = parse_bench_json(text, "/opt/llama-bench")
    assert result.avg_ts is None and problem in result.problem, result.problem


def test_a_runtime_that_never_stops_printing_is_stopped_at_the_cap(bench, capsys):
    code, log = bench("flood", "--candidate", "partition-first", "--time-limit", "300")
    out, err = capsys.readouterr()
    assert code == EXIT_INPUT and "Traceback" not in err
    assert err.count("\n") == 1 and "printed more than 16 MiB" in err and str(log.parent / "llama-bench") in err, err


def test_time_limit_stops_a_slow_run(bench, capsys):
    code, _ = bench("slow", "--candidate", "partition-last", "--time-limit", "0.5")
    out, _err = capsys.readouterr()
    assert code == EXIT_INPUT
    assert "ran past the time limit" in out and "the time limit was used up" in out


def test_without_a_binary_says_how_to_get_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["verify", "--candidate", "partition-first"]) == EXIT_INPUT  # nothing verified: not a success
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "no llama-bench found on PATH" in err and "--target llama-bench" in err


def test_without_a_binary_json_gets_an_error_document(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["verify", "--candidate", "partition-first", "--json"]) == EXIT_INPUT
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["exit_code"] == EXIT_INPUT and "no llama-bench found on PATH" in doc["error"]
    assert "--target llama-bench" in doc["how_to_get"] and err.count("\n") == 1


def test_bad_inputs(tmp_path, capsys):
    assert main(["verify", "--candidate", "all-cpu", "--llama-bench", str(tmp_path / "nope")]) == EXIT_INPUT
    assert "not an executable file" in capsys.readouterr().err
    exe = tmp_path / "llama-bench"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert main(["verify", "--candidate", "all-cpu", "--llama-bench", str(exe)]) == EXIT_INPUT
    assert "--model-path" in capsys.readouterr().err
    assert main(["verify", "--candidate", "all-cpu", "--time-limit", "0"]) == EXIT_INPUT


@pytest.mark.parametrize(
    "text, problem",
    [
        ("", "not JSON"),
        ("{}", "non-empty JSON array"),
        ("[]", "non-empty JSON array"),
        ('[{"n_prompt": 512, "n_gen": 0, "avg_ts": 900.0, "stddev_ts": 3.0}]', "no decode test"),
        ('[{"n_prompt": 0, "n_gen": 64, "avg_ts": "fast"}]', "avg_ts is 'fast'"),
    ],
)
def test_parse_bench_json_errors(text, problem):
    result = parse_bench_json(text)
    assert result.avg_ts is None and problem in result.problem


def test_parse_bench_json_picks_the_decode_test():
    pp = dict(RECORDED[0], n_prompt=512, n_gen=0, avg_ts=1500.0)
    result = parse_bench_json(json.dumps([pp, RECORDED[0]]))
    assert (result.avg_ts, result.stddev_ts, result.problem) == (41.23, 0.51, None)


def test_a_build_with_load_mode_gets_lm_none_instead_of_mmp(bench, capsys, tmp_path):
    code, log = bench("ok", "--candidate", "all-cpu", "--ram-gib", "24", "--json")
    assert code == EXIT_OK
    old = calls(log)[0]["argv"]
    assert "-mmp" in old and old[old.index("-mmp") + 1] == "0"  # the RAM fits the experts copied: --no-mmap
    log.unlink()
    (tmp_path / "fake bin" / "help.txt").write_text(NEW_HELP)
    with open(tmp_path / "fake bin" / "llama-bench", "a") as binary:  # a new build: its --help is read again
        binary.write("# rebuilt\n")
    code, log = bench("ok", "--candidate", "all-cpu", "--ram-gib", "24", "--json")
    assert code == EXIT_OK
    new = calls(log)[0]["argv"]
    assert "-mmp" not in new and new[new.index("-lm") + 1] == "none"
    i = old.index("-mmp")
    assert new == old[:i] + ["-lm", "none"] + old[i + 2:]  # only the spelling changed


def test_the_cpu_only_plan_is_verified_as_llama_bench_runs_it(bench, capsys):
    code, log = bench("ok", "--gpu", "none", "--candidate", "cpu-only", "--threads", "4", "--json")
    assert code == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    [run] = doc["runs"]
    assert run["candidate"] == "cpu-only" and run["measured_tokens_per_s"] == 41.23
    assert run["predicted_tokens_per_s"] > 0
    [argv] = [c["argv"] for c in calls(log)]
    assert argv[argv.index("-ngl") + 1] == "0" and argv[argv.index("-t") + 1] == "4"
    assert "empty context" in doc["notes"][0]
    code, _ = bench("ok", "--gpu", "none", "--candidate", "all-cpu")
    assert code == EXIT_INPUT and "the one plan is cpu-only" in capsys.readouterr().err


def test_the_export_is_priced_at_the_depth_llama_bench_decodes_from(bench, capsys):
    """The same placements as the plan (the KV cache reserved for its context), each step
    attending to the 32 tokens llama-bench's 64-token decode test attends to on average:
    faster than the plan's figure at half of its 8192-token context, and exactly what the
    ranking gives at that depth."""
    from dataclasses import replace

    from cope_tui.options import PlanChoices
    from cope_tui.service.advice import plan
    from engine.advice.advise import advise
    from engine.cost.analytic_cost import AnalyticCostModel

    code, _ = bench("ok", "--candidate", "partition-last", "--json")
    assert code == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    predicted = {r["candidate"]: r["predicted_tokens_per_s"] for r in doc["runs"]}
    planned = plan(PlanChoices(tokens=100, cpu="desktop-ddr5"))
    assert planned.pricing.fidelity.value == "analytic"
    at_depth = replace(planned.rec.request, attention_tokens=32)
    priced = advise(at_depth, AnalyticCostModel(at_depth.model, at_depth.quant, at_depth.platform,
                                                context_tokens=at_depth.context_tokens, attention_tokens=32))
    for candidate, figure in predicted.items():
        assert figure > planned.rec.estimate_of(candidate).tokens_per_s
        assert figure == pytest.approx(priced.estimate_of(candidate).tokens_per_s, rel=1e-9)
    assert "empty context" in doc["notes"][0] and "(analytic)" in doc["notes"][0]


def test_the_fork_benchmark_reads_a_profile_that_is_there(bench, capsys, tmp_path, monkeypatch):
    """cope verify --runtime fork: the profile its llama-bench reads (GGML_MOE_CACHE_PROFILE) is written
    where the command names it before the run (issue 46), whatever folder verify runs from."""
    monkeypatch.chdir(tmp_path)
    code, log = bench("ok", "--candidate", "fixed.parallel.uniform", "--runtime", "fork", "--model",
                      "deepseek-v2-lite-chat", "--vram-budget", "6", "--json")
    assert code == EXIT_OK, capsys.readouterr().err
    first = calls(log)[0]
    assert first["profile"] and os.path.isabs(first["profile"]) and first["profile_there"], first
    assert "-ncmoe" in first["argv"]


def test_ik_llama_bench_runs_the_export_and_the_baseline_spelled_for_it(bench, capsys):
    """cope verify --runtime ik_llama.cpp: both runs go to the same llama-bench, so the baseline
    partition is spelled for it too: its layers as -ot (ik's -ncmoe counts from the last layer), and
    no -dev (ik's llama-bench has none)."""
    code, log = bench("ok", "--candidate", "partition-last", "--runtime", "ik_llama.cpp", "--json")
    assert code == EXIT_OK, capsys.readouterr().err
    argvs = [c["argv"] for c in calls(log)]
    assert len(argvs) == 2
    for argv in argvs:
        assert "-ot" in argv and "-ncmoe" not in argv and "--n-cpu-moe" not in argv and "-dev" not in argv
