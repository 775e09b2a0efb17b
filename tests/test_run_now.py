"""What `cope advise` says to run: the run-now block first, how much faster another
runtime would be, RAM refusals, identical placements shown once; `cope export` for
every runtime."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main
from cope_tui.options import PlanChoices
from cope_tui.service.advice import plan
from engine.advice.run_advice import ALL_GPU_GROUP, plan_runs
from engine.core.cache_dirs import exports_dir

FAST = ["--tokens", "100", "--cpu", "desktop-ddr5"]


def advise(capsys, *args: str) -> tuple[str, str]:
    code = main(["advise", *FAST, *args])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    return out, err


def test_text_starts_with_the_command_to_run_now_and_the_faster_runtime(capsys):
    out, err = advise(capsys)
    # llama.cpp's expert cache leads when it wins; the ranking's pick follows, for any build
    blocks = out.split("\n\n")
    assert blocks[0].startswith("Run this now: ")
    block = next(b for b in blocks if "partition-first with stock llama.cpp" in b.splitlines()[0]).splitlines()
    # Nothing is installed (tests see no runtime): the best stock llama.cpp runs.
    assert block[0] in ("Run this now: partition-first with stock llama.cpp",
                        "Without llama.cpp's expert cache (any build), run: partition-first with stock llama.cpp")
    assert "tok/s" in block[1] and "VRAM" in block[1] and "RAM" in block[1] and "--n-cpu-moe" in block[1]
    assert shlex.split(block[2])[:3] == ["llama-server", "-m", "qwen3-30b-a3b.gguf"]
    [missing] = [line for line in block[3:] if "not found on PATH" in line]
    assert "github.com/ggml-org/llama.cpp" in missing
    # No build was read: the command is spelled for the current release, the older spelling beside it.
    assert any("spelled for ggml-org/llama.cpp at" in line and "take --no-mmap in place of -lm none" in line
               for line in block[3:])
    # SGLang's static pool holds fewer of Qwen3's BF16 experts than llama.cpp's slots priced:
    # no speed is promised for it (its exports are approximate, cut to what it holds).
    assert not any("faster with SGLang" in line for line in block)
    out, err = advise(capsys, "--model", "deepseek-v2-lite-chat", "--vram-budget", "8")
    faster = next(line for line in out.split("\n\n")[0].splitlines() if "x faster with" in line)
    assert "x faster with the llama.cpp MoE expert-cache fork (fixed.parallel.uniform" in faster
    assert "branch fable5/moe-cache-readme" in faster and "cope export --runtime fork" in faster
    # the fork's speed-up comes from the experts it pins, learnt here from SYNTHETIC routing: the line says so
    assert "on SYNTHETIC routing: record or pull a real trace" in faster
    ratio = float(faster.split("x faster")[0])
    doc_out, _ = advise(capsys, "--model", "deepseek-v2-lite-chat", "--vram-budget", "8", "--json")
    rec = json.loads(doc_out)["recommendation"]
    now, best = rec["run_now"], rec["best_overall"]
    assert ratio == pytest.approx(now["tpot_s"] / best["tpot_s"], abs=0.006) and ratio > 1
    # The fork's profile pins experts of SYNTHETIC routing here: said on stderr too.
    assert "SYNTHETIC" in err
    # The table says which runtime runs each row, and explains the short names.
    assert "runs on" in out and ("fork = the llama.cpp MoE expert-cache fork (github.com/thecodacus/llama.cpp, "
                                 "branch fable5/moe-cache-readme)") in out


def test_json_run_now_and_best_overall_and_candidate_runtimes(capsys):
    out, _ = advise(capsys, "--json")
    doc = json.loads(out)
    rec = doc["recommendation"]
    now, best = rec["run_now"], rec["best_overall"]
    assert rec["installed_runtimes"] == [] and not now["installed"]
    assert now["candidate"] == "partition-first" and now["runtime"] == "llama.cpp" and now["argv"][0] == "llama-server"
    assert now["command"] == shlex.join(now["argv"]) and now["artefacts"] == []
    # SGLang runs the per-expert candidates only cut to its pool (approximate): nothing faster is exact.
    assert best["candidate"] == now["candidate"] and best["runtime"] == "llama.cpp"
    kt = [r for c in doc["candidates"] for r in c["runtimes"] if r["name"] == "sglang-kt"]
    assert kt and any("cut to the" in r["note"] and not r["exact"] for r in kt)
    by_id = {c["id"]: c for c in doc["candidates"]}
    assert {r["name"]: r["exact"] for r in by_id["partition-first"]["runtimes"]} == {
        "llama.cpp": True, "ik_llama.cpp": True, "fork": True}
    assert all(set(r) >= {"name", "exact", "note"} for c in doc["candidates"] for r in c["runtimes"])
    # Ready-first runs on no runtime: faster than the best overall, and never what to run.
    assert rec["fastest_estimate"] == doc["candidates"][0]["id"]
    ready_first = [c for c in doc["candidates"] if c["id"].startswith("fixed.ready-first.")]
    assert ready_first and all(c["runtimes"] == [] for c in ready_first)
    assert ready_first[0]["tpot_s"] < best["tpot_s"] and best["candidate"] != ready_first[0]["id"]


def test_a_placement_that_needs_more_ram_than_the_machine_has_is_refused(capsys):
    out, _ = advise(capsys, "--model", "qwen3-235b-a22b", "--gpu", "4090", "--ram-gib", "23.5")
    first = out.splitlines()[0]
    assert first.startswith("Run this now: nothing COPE ranked fits this machine's RAM; even partition-first")
    assert "--n-cpu-moe 83" in first and "GiB in host memory" in first and "23.5 GiB" in first
    assert "llama-server" not in out.split("\n\n")[0]
    out, _ = advise(capsys, "--model", "qwen3-235b-a22b", "--gpu", "4090", "--ram-gib", "23.5", "--json")
    doc = json.loads(out)
    assert doc["recommendation"]["run_now"] is None and doc["recommendation"]["best_overall"] is None
    refused = {c["id"]: c["ram_refused"] for c in doc["candidates"]}
    assert refused["partition-first"].startswith("does not fit in RAM")
    assert all(reason for cid, reason in refused.items() if cid in ("partition-last", "all-cpu"))
    # With RAM enough the same plan is recommended.
    out, _ = advise(capsys, "--model", "qwen3-235b-a22b", "--gpu", "4090", "--ram-gib", "512", "--json")
    assert json.loads(out)["recommendation"]["run_now"]["candidate"] == "partition-first"


def test_no_mmap_is_dropped_with_its_reason_when_only_the_mapped_file_fits(capsys):
    out, _ = advise(capsys, "--ram-gib", "6", "--json")
    now = json.loads(out)["recommendation"]["run_now"]
    assert now["candidate"] == "partition-first" and now["mmap"] and "-lm" not in now["argv"]
    assert any(n.startswith("mapped, not copied") for n in now["notes"])
    out, _ = advise(capsys, "--ram-gib", "64", "--json")
    now = json.loads(out)["recommendation"]["run_now"]
    assert not now["mmap"] and now["argv"][-2:] == ["-lm", "none"]
    [spelled] = now["notes"]
    assert spelled.startswith("spelled for ggml-org/llama.cpp at ") and "--no-mmap in place of -lm none" in spelled


def test_identical_placements_are_one_row_that_says_so(capsys):
    out, _ = advise(capsys, "--gpu", "3090")
    table = out.split("rank  llama.cpp flags, or candidate")[1]
    rows = [line for line in table.splitlines() if line[:4].strip().isdigit()]
    assert [r.split()[1] for r in rows] == ["-ngl", "--cpu-moe"]  # all-gpu and all-cpu, in llama.cpp's words
    assert f"= 24 more with the same placement ({ALL_GPU_GROUP})" in table
    assert out.startswith("Run this now: all-gpu with stock llama.cpp\n")
    doc = json.loads(advise(capsys, "--gpu", "3090", "--json")[0])
    same = [c["id"] for c in doc["candidates"] if c["identical_to"] == "all-gpu"]
    assert len(same) == 24 and all(c.startswith(("fixed.", "layer.", "pool.")) for c in same)
    runs = plan_runs(plan(PlanChoices(gpu="3090", cpu="desktop-ddr5", tokens=100)).rec)
    lead = runs.row("all-gpu")
    assert lead.group_size == 25 and {r.estimate.tpot_s for r in runs.rows if r.same_as} == {lead.estimate.tpot_s}


def test_cope_export_writes_the_sglang_kt_command_and_activation_file(capsys, tmp_path):
    torch = pytest.importorskip("torch")
    out_file = tmp_path / "kt" / "run.sh"
    code = main(["export", "--runtime", "sglang-kt", "--candidate", "fixed.parallel.nonuniform", *FAST,
                 "--model-path", "/models/qwen/Qwen3-30B-A3B-Q4_K_M.gguf", "--out", str(out_file)])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    command = out.splitlines()[-1]
    argv = shlex.split(command)
    assert argv[0:3] == ["python", "-m", "sglang.launch_server"]
    pt = tmp_path / "kt" / "cope-qwen3-30b-a3b-kt-activation.pt"
    assert argv[argv.index("--init-expert-location") + 1] == str(pt)
    # kt-kernel's GGUFLoader reads the one file named (a folder would load every *.gguf in it).
    assert argv[argv.index("--kt-weight-path") + 1] == "/models/qwen/Qwen3-30B-A3B-Q4_K_M.gguf"
    counts = torch.load(pt, weights_only=True)["logical_count"]
    # 100 profile tokens x top-8 routings in every layer, written as count x N + (N - rank)
    routed = (counts - 1) // (48 * 128)
    assert tuple(counts.shape) == (1, 48, 128) and routed.sum(dim=2).unique().tolist() == [100 * 8]
    assert out_file.read_text().splitlines()[-1] == command
    assert "# SYNTHETIC routing" in out_file.read_text() and "cope: warning: SYNTHETIC routing" in err
    # Without --out the .pt is written where the printed command names it: the cache folder's exports/
    # (issue 46: SGLang would otherwise stop at torch.load), and stderr names it.
    assert main(["export", "--runtime", "sglang-kt", "--candidate", "fixed.parallel.nonuniform", *FAST]) == EXIT_OK
    out, err = capsys.readouterr()
    argv = shlex.split(out.splitlines()[-1])
    named = Path(argv[argv.index("--init-expert-location") + 1])
    assert named.is_absolute() and named.parent == exports_dir().absolute() and f"cope: wrote {named}" in err
    assert torch.equal(torch.load(named, weights_only=True)["logical_count"], counts)
    assert f"# artefact {named.name}: written to {named}" in out


def test_cope_export_runtime_names(capsys):
    for runtime in ("stock", "llama.cpp"):
        assert main(["export", "--runtime", runtime, "--candidate", "partition-first", *FAST, "--json"]) == EXIT_OK
        doc = json.loads(capsys.readouterr().out)
        assert doc["runtime"] == "llama.cpp" and doc["support"] == "exact" and "--n-cpu-moe" in doc["argv"]
    assert main(["export", "--runtime", "ik_llama.cpp", "--candidate", "partition-first", *FAST, "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["runtime"] == "ik_llama.cpp" and "-ot" in doc["argv"] and "--fit" not in doc["argv"]
    assert main(["export", "--runtime", "vllm", "--candidate", "partition-first", *FAST]) == EXIT_INPUT
    assert "llama.cpp" in capsys.readouterr().err
    assert main(["export", "--runtime", "sglang-kt", "--binary", "llama-bench", "--candidate", "all-cpu",
                 *FAST]) == EXIT_INPUT
    assert "sglang-kt runs python -m sglang.launch_server" in capsys.readouterr().err
    assert main(["export", "--runtime", "fork", "--candidate", "partition-first", *FAST]) == EXIT_OK
    text = capsys.readouterr().out
    assert "the llama.cpp MoE expert-cache fork runs it exactly" in text and "github.com/thecodacus/llama.cpp" in text


def test_the_forks_speedup_on_a_real_trace_does_not_say_synthetic(capsys, shared_traces):  # type: ignore[no-untyped-def]
    trace = shared_traces / "deepseek-v2-lite-chat__moe-beyond" / "training_data_eamc"
    out, _ = advise(capsys, "--model", "deepseek-v2-lite-chat", "--vram-budget", "8", "--trace", str(trace))
    faster = next(line for line in out.split("\n\n")[0].splitlines() if "x faster with" in line)
    assert "fork" in faster and "SYNTHETIC" not in faster
