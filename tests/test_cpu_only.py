"""`--gpu none`: planning for the CPU alone, priced as `cope estimate` prices the same command."""

from __future__ import annotations

import json

import pytest

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main

PLAN = ["--model", "qwen3-30b-a3b", "--cpu", "ryzen-9-7950x", "--context", "4096", "--fidelity", "analytic"]


@pytest.fixture(autouse=True)
def _empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))  # no calibration or profile of this machine


def _advise(capsys, *extra: str) -> dict:
    assert main(["advise", "--gpu", "none", "--json", *PLAN, *extra]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


def test_the_plan_is_llama_cpp_with_no_layer_offloaded(capsys):
    doc = _advise(capsys, "--threads", "8")
    run = doc["recommendation"]["run_now"]
    assert doc["gpu"] is None and run == doc["recommendation"]["best_overall"]
    assert run["argv"] == ["llama-server", "-m", "qwen3-30b-a3b.gguf", "-ngl", "0", "-c", "4096", "-t", "8"]
    assert run["refusal"] is None and 0 < run["tokens_per_s"] < 1e3


def test_it_costs_what_cope_estimate_says_the_same_command_costs(capsys):
    # With a GPU present, `-ngl 0` decodes every token on the CPU too: the same placement price.
    run = _advise(capsys, "--threads", "8")["recommendation"]["run_now"]
    plan = [a for a in PLAN if a not in ("--context", "4096")]  # estimate takes the context from -c
    assert main(["estimate", "--json", *plan, "--gpu", "rtx-4090", "--", *run["argv"]]) == EXIT_OK
    yours = json.loads(capsys.readouterr().out)["yours"]
    assert yours["tokens_per_s"] == pytest.approx(run["tokens_per_s"], rel=1e-9)


def test_more_threads_are_never_slower(capsys):
    speeds = [_advise(capsys, "--threads", str(t))["recommendation"]["run_now"]["tokens_per_s"] for t in (1, 4, 16)]
    assert speeds == sorted(speeds) and speeds[0] < speeds[-1]


def test_a_model_bigger_than_ram_runs_from_the_page_cache_slower(capsys):
    """17 GiB of mapped experts in 16 GiB of RAM: llama.cpp still runs it (issue 44), reading
    what the page cache cannot hold from disk, so it is priced slower, not refused."""
    tight = _advise(capsys, "--threads", "8", "--ram-gib", "16")["recommendation"]["run_now"]
    ample = _advise(capsys, "--threads", "8", "--ram-gib", "64")["recommendation"]["run_now"]
    assert tight["refusal"] is None and ample["refusal"] is None
    assert 0 < tight["tokens_per_s"] < ample["tokens_per_s"] and tight["argv"] == ample["argv"]
    assert main(["advise", "--gpu", "none", *PLAN, "--threads", "8", "--ram-gib", "16"]) == EXIT_OK
    assert "read from disk again whenever a token needs it" in capsys.readouterr().out


def test_the_text_leads_with_the_command(capsys):
    assert main(["advise", "--gpu", "none", *PLAN, "--threads", "8"]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Run this now: CPU only")
    # its figures (decode, then the prompt), then the command, as advise's run-now block with a GPU
    assert lines[2].strip().startswith("prompt: ")
    assert lines[3].strip() == "llama-server -m qwen3-30b-a3b.gguf -ngl 0 -c 4096 -t 8"


@pytest.mark.parametrize("flag", [["--vram-budget", "4"], ["--fidelity", "combined"]])
def test_what_needs_a_gpu_is_one_line(capsys, flag):
    plan = [a for a in PLAN if a not in ("--fidelity", "analytic")]
    assert main(["advise", "--gpu", "none", *plan, *flag]) == EXIT_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--gpu none" in err


def test_commands_that_rank_splits_say_where_the_cpu_only_plan_is(capsys):
    # `cope estimate --gpu none` prices a command on the CPU alone (tests/test_estimate_no_gpu.py).
    assert main(["export", "--gpu", "none", "--model", "qwen3-30b-a3b", "--candidate", "all-cpu"]) == EXIT_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cope advise --gpu none" in err


def test_a_cpu_only_plan_gives_its_prompt_speed(capsys):
    """llama-bench's pp512 by default: the same prefill `cope estimate` prices for the command's pp test."""
    run = _advise(capsys, "--threads", "8")["recommendation"]["run_now"]
    assert run["prompt_tokens"] == 512 and run["ubatch"] == 512
    assert 0 < run["prompt_tokens_per_s"] < 1e4
    assert run["ttft_s"] == pytest.approx(512 / run["prompt_tokens_per_s"], rel=1e-9)
    # prefill is compute-bound on the CPU: faster per token than decoding one token at a time
    assert run["prompt_tokens_per_s"] > run["tokens_per_s"]
    bench = ["llama-bench", "-m", "qwen3-30b-a3b.gguf", "-ngl", "0", "-t", "8", "-p", "512", "-n", "0"]
    plan = [a for a in PLAN if a not in ("--context", "4096")]
    assert main(["estimate", "--json", *plan, "--gpu", "none", "--", *bench]) == EXIT_OK
    pp = json.loads(capsys.readouterr().out)["yours"]["prompt_processing"]
    assert pp["prompt_tokens_per_s"] == pytest.approx(run["prompt_tokens_per_s"], rel=1e-6)
    assert main(["advise", "--gpu", "none", *PLAN, "--threads", "8"]) == EXIT_OK
    assert "prompt tok/s at -ub 512" in capsys.readouterr().out


def test_a_cpu_only_workload_is_ranked_by_its_request_time(capsys):
    run = _advise(capsys, "--threads", "8", "--workload", "chat")["recommendation"]["run_now"]
    assert run["prompt_tokens"] == 1000
    assert run["request_s"] == pytest.approx(run["ttft_s"] + 300 * run["tpot_s"], rel=1e-12)
    assert main(["advise", "--gpu", "none", *PLAN, "--threads", "8", "--workload", "chat"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "request " in out and "300 x " in out and "(the workload's)" in out
