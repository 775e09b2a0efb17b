"""`cope advise` as a person and a script use it: exit codes, stdout, stderr."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main
from engine.models.catalog import get_model
from engine.traces import save_trace, write_llama_moe_trace_csv
from engine.traces.synthetic import SyntheticSettings, synthetic_trace

FAST = ["--tokens", "100", "--cpu", "desktop-ddr5"]


def advise_json(capsys, *args: str) -> dict:
    code = main(["advise", "--json", *FAST, *args])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    return json.loads(out)  # exactly one document: json.loads rejects trailing data


def test_json_document_has_inputs_with_provenance_memory_and_ranked_candidates(capsys):
    doc = advise_json(capsys)
    assert doc["schema_version"] == 2
    gpu = doc["inputs"]["platform"]["gpu"]
    assert gpu["vram_bytes"]["basis"] == "preset" and gpu["vram_bytes"]["note"]
    assert doc["inputs"]["platform"]["cpu"]["physical_cores"]["basis"] == "preset"
    assert doc["inputs"]["trace"]["synthetic"] is True
    assert any("SYNTHETIC" in n for n in doc["notes"])
    memory = doc["memory"]
    assert memory["slots"] == memory["expert_room_bytes"] // memory["expert_bytes"]
    tpots = [c["tpot_s"] for c in doc["candidates"]]
    assert tpots == sorted(tpots)
    assert [c["rank"] for c in doc["candidates"]] == list(range(1, len(tpots) + 1))
    first = doc["candidates"][0]
    assert doc["recommendation"]["fastest_estimate"] == first["id"]
    assert first["tokens_per_s"] == pytest.approx(1 / first["tpot_s"])
    # 30B at Q4_K_M does not fit the default 16 GiB: llama.cpp's usual answer is the baseline.
    assert doc["baseline"] == "partition-first"
    baseline = next(c for c in doc["candidates"] if c["id"] == doc["baseline"])
    assert baseline["speedup_vs_baseline"] == pytest.approx(1.0)
    labels = {c["id"]: c["llama_cpp"] for c in doc["candidates"]}
    assert set(labels.values()) <= {"runs-on-stock", "needs-fork", "not-expressible"}
    assert labels["partition-first"] == labels["all-cpu"] == "runs-on-stock"
    # Stock llama.cpp places whole tensors: per-expert residency is not expressible there.
    assert labels["layer.stage.uniform.lru.prefetch"] == "not-expressible"
    for c in doc["candidates"]:
        assert sum(c["states"]["steps_by_hits"]) == c["states"]["steps"]
        assert 0 < c["vram_used_bytes"] <= doc["inputs"]["vram_budget_bytes"]


def test_table_output_shows_arithmetic_ranking_and_assumptions(capsys):
    assert main(["advise", *FAST]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("Run this now: ")
    assert "VRAM arithmetic" in out and "room for experts" in out
    assert "<- run now, baseline" in out or "<- baseline" in out
    assert "SYNTHETIC" in out
    assert "assumed GPU" in out


def test_imported_trace_is_used_and_labelled(capsys, tmp_path):
    model = get_model("olmoe-1b-7b")
    trace = synthetic_trace(model, SyntheticSettings(tokens=60, sequences=3, seed=4))
    path = tmp_path / "routing.csv"
    write_llama_moe_trace_csv(trace, path)
    doc = advise_json(capsys, "--model", "olmoe-1b-7b", "--trace", str(path))
    assert doc["inputs"]["trace"]["synthetic"] is False
    assert doc["inputs"]["trace"]["origin"] == "imported"
    assert doc["inputs"]["trace"]["tokens"] + doc["inputs"]["profile_trace"]["tokens"] == 60


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--model", "no-such-model"], "no-such-model"),
        (["--gpu", "voodoo5"], "voodoo5"),
        (["--quant", "Q9_9"], "Q9_9"),
        (["--vram-budget", "0.5"], "cannot hold"),
        (["--context", "-3"], "--context"),
        (["--context", "0"], "--context"),
        (["--threads", "0"], "--threads"),
        (["--vram-budget", "nan"], "--vram-budget"),
        (["--vram-budget", "inf"], "--vram-budget"),
        (["--vram-budget", "40"], "more than"),  # the default GPU has 16 GiB
        (["--seed", "-1"], "--seed"),
        (["--eviction", ","], "--eviction"),
        (["--bogus-flag"], "--bogus-flag"),
    ],
)
def test_bad_flags_give_one_line_and_exit_2(capsys, args, needle):
    code = main(["advise", *FAST, *args])
    out, err = capsys.readouterr()
    assert code == EXIT_INPUT
    assert out == ""
    assert err.count("\n") == 1 and needle in err


def test_bad_trace_files_name_the_file(capsys, tmp_path):
    bad_id = tmp_path / "bad-id.csv"
    bad_id.write_text("0,0," + ",".join(str(i) for i in range(7)) + ",64\n")  # OLMoE has 64 experts
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"PK\x03\x04 not really a zip")
    for path in (bad_id, empty, garbage):
        code = main(["advise", *FAST, "--model", "olmoe-1b-7b", "--trace", str(path)])
        err = capsys.readouterr().err
        assert code == EXIT_INPUT, path
        assert str(path) in err and err.count("\n") == 1


def test_own_format_trace_is_not_overwritten_or_unpickled(capsys, tmp_path):
    model = get_model("olmoe-1b-7b")
    trace = synthetic_trace(model, SyntheticSettings(tokens=40, seed=2))
    path = tmp_path / "t.cope.npz"
    save_trace(trace, path)
    before = path.read_bytes()
    advise_json(capsys, "--model", "olmoe-1b-7b", "--trace", str(path))
    assert path.read_bytes() == before
    # An object array would need pickle: refused, not loaded.
    evil = tmp_path / "evil.npz"
    np.savez(evil, expert_ids=np.array([object()], dtype=object))
    assert main(["advise", *FAST, "--model", "olmoe-1b-7b", "--trace", str(evil)]) == EXIT_INPUT
    assert str(evil) in capsys.readouterr().err


def test_headless_run_imports_neither_textual_nor_torch():
    code = (
        "import sys\n"
        "from cope_tui.cli import main\n"
        "rc = main(['advise', '--json', '--tokens', '50', '--cpu', 'desktop-ddr5'])\n"
        "assert rc == 0, rc\n"
        "bad = [m for m in ('textual', 'torch') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["schema_version"] == 2


def test_the_text_header_counts_threads_in_the_right_number(capsys):
    for threads, said in ((1, ", 1 thread, context"), (2, ", 2 threads, context")):
        assert main(["advise", *FAST, "--threads", str(threads)]) == EXIT_OK
        out = capsys.readouterr().out
        header = next(line for line in out.splitlines() if line.startswith("COPE advise: "))
        assert said in header


def test_models_and_presets_list_the_catalog(capsys):
    assert main(["models"]) == EXIT_OK
    out = capsys.readouterr().out
    for model_id in ("qwen3-30b-a3b", "deepseek-v2-lite-chat", "gpt-oss-20b", "mixtral-8x7b-instruct"):
        assert model_id in out
    # every quantization --quant takes, each on its own line (an unknown one's error points here)
    from engine.models.quant import quantizations

    listed = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    assert listed == {q.name for q in quantizations().values()}
    assert main(["presets"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "rtx-4090" in out and "desktop-ddr5" in out


def test_models_and_presets_as_json_hold_what_the_tables_show(capsys):
    from engine.models.catalog import catalog
    from engine.hardware.cpu_presets import cpu_presets
    from engine.hardware.presets import gpu_presets
    from engine.models.quant import quantizations

    assert main(["models", "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert [m["id"] for m in doc["models"]] == list(catalog())
    assert [q["name"] for q in doc["quantizations"]] == [q.name for q in quantizations().values()]
    qwen = doc["models"][0]
    assert (qwen["routed_experts"], qwen["top_k"], len(qwen["moe_blocks"])) == (128, 8, 48)
    assert main(["presets", "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["gpus"]) == set(gpu_presets()) and set(doc["cpus"]) == set(cpu_presets())
    assert doc["gpus"]["rtx-3090"]["vram_bytes"]["value"] == 24 * 2**30
    cores = doc["cpus"]["ryzen-9-7950x"]["physical_cores"]
    assert (cores["value"], cores["basis"]) == (16, "preset") and "amd.com" in cores["note"]  # with its source


def test_export_into_a_path_under_a_file_is_a_one_line_error(capsys, tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("keep me\n")
    code = main(["export", "--candidate", "partition-first", *FAST, "--out", str(blocker / "cmd.sh")])
    err = capsys.readouterr().err
    assert code == EXIT_INPUT
    assert err.count("\n") == 1 and str(blocker) in err
    assert blocker.read_text() == "keep me\n"


def test_override_pattern_splits_at_the_first_equals_sign_like_llama_cpp():
    from engine.llamacpp.llama_args import parse_llama_command

    command = parse_llama_command(["llama-server", "-m", "m.gguf", "-ot", "blk\\.(1)\\.ffn_(up|down)_exps=CPU"])
    assert command.overrides[0][:2] == ("blk\\.(1)\\.ffn_(up|down)_exps", "CPU")
    # "a=b=CPU": llama.cpp takes the pattern up to the first "=", so the buffer is "b=CPU".
    odd = parse_llama_command(["llama-server", "-m", "m.gguf", "-ot", "a=b=CPU"])
    assert odd.overrides[0][:2] == ("a", "b=CPU")
