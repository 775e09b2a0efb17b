"""llama.cpp export: golden argument lists, -ot regexes against a real GGUF tensor table,
the fork's synthetic profile, quoting, and the command line.

Golden files live in tests/golden/export/<model>/<case>.txt; regenerate them with
COPE_UPDATE_GOLDEN=1 python -m pytest tests/test_export.py and review the diff.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from cope_tui.cli import EXIT_OK, main
from engine.core.errors import CopeInputError
from engine.hardware.memory import MemoryPlan
from engine.llamacpp.llamacpp_flags import EXPS_REGEX_TAIL
from engine.models.catalog import get_model
from engine.replays.policy import parse_candidate_id
from engine.runtimes.export import (
    NEEDS_FORK,
    NOT_EXPRESSIBLE,
    RUNS_ON_STOCK,
    ExportPlan,
    expert_regexes,
    export_candidate,
    fork_profile_csv,
    layer_set_regex,
    write_export,
)

GOLDEN = Path(__file__).parent / "golden" / "export"
UPDATE = os.environ.get("COPE_UPDATE_GOLDEN") == "1"
MODELS = ("qwen3-30b-a3b", "deepseek-coder-v2-lite-instruct", "gpt-oss-20b")
MODEL_PATH = "/models/My Model's Q4_K_M.gguf"  # a space and a quote
EB = 1 << 20


def memory(model, slots: int) -> MemoryPlan:
    """A plan with exactly `slots` expert slots (staging takes top_k of them)."""
    return MemoryPlan(
        vram_budget_bytes=slots * EB, non_expert_bytes=0, kv_cache_bytes=0, runtime_reserve_bytes=0,
        safety_margin_bytes=0, staging_bytes=model.top_k * EB, expert_bytes=EB,
        n_experts_total=model.n_experts_total, n_routed_experts_per_layer=model.n_routed_experts,
        context_tokens=8192,
    )


def popularity(model) -> np.ndarray:
    L, E = model.n_moe_layers, model.n_routed_experts
    return ((np.arange(E)[None, :] * 37 + np.arange(L)[:, None] * 11) % E).astype(np.int64)


TPOTS = {
    "fixed.ready-first.uniform": 0.0150, "fixed.parallel.uniform": 0.0160, "layer.stage.uniform.lru": 0.0170,
    "fixed.stage.uniform": 0.0180, "partition-first": 0.0200, "partition-last": 0.0210, "all-cpu": 0.0400,
}


def plan(model, kind: str) -> ExportPlan:
    total = model.n_experts_total
    slots = {"partial": int(total * 0.6), "fits": total + model.top_k, "zero": model.top_k}[kind]
    tpots = dict(TPOTS)
    if kind == "fits":
        tpots["all-gpu"] = 0.0100
    return ExportPlan(memory(model, slots), popularity(model), tuple(tpots.items()))


# (case name, plan kind, candidate id, runtime, binary)
CASES = (
    ("partition-first", "partial", "partition-first", "stock", "llama-server"),
    ("partition-last", "partial", "partition-last", "stock", "llama-server"),
    ("all-cpu", "partial", "all-cpu", "stock", "llama-server"),
    ("all-gpu", "fits", "all-gpu", "stock", "llama-server"),
    ("stage-without-cache", "zero", "fixed.stage.uniform", "stock", "llama-server"),
    ("fixed-parallel-fork", "partial", "fixed.parallel.uniform", "fork", "llama-server"),
    ("fixed-parallel-stock", "partial", "fixed.parallel.uniform", "stock", "llama-server"),
    ("not-expressible", "partial", "layer.stage.uniform.lru", "stock", "llama-server"),
    ("cli-partition-first", "partial", "partition-first", "stock", "llama-cli"),
    ("bench-partition-first", "partial", "partition-first", "stock", "llama-bench"),
    ("bench-partition-last", "partial", "partition-last", "stock", "llama-bench"),
    ("bench-all-cpu", "partial", "all-cpu", "stock", "llama-bench"),
    ("bench-stage-without-cache", "zero", "fixed.stage.uniform", "stock", "llama-bench"),
)


def do_export(model_id: str, plan_kind: str, cid: str, runtime: str, binary: str):
    model = get_model(model_id)
    return export_candidate(
        parse_candidate_id(cid), model, plan(model, plan_kind), runtime=runtime, binary=binary,
        model_path=MODEL_PATH, context=8192, threads=8,
    )


def golden_text(x) -> str:
    lines = [
        f"candidate: {x.candidate_id}",
        f"label: {x.label}",
        f"exported: {x.exported_id}",
        f"nearest: {x.nearest_id or '-'}",
        f"reason: {x.reason}",
        "env: " + (" ".join(f"{k}={v}" for k, v in x.env) or "-"),
        "side files: " + (" ".join(f.name for f in x.side_files) or "-"),
        f"display: {x.display()}",
        "argv:",
        *(f"  {a}" for a in x.argv),
    ]
    return "\n".join(lines) + "\n"


def check_golden(path: Path, text: str) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path} (COPE_UPDATE_GOLDEN=1 to create it)"
    assert text == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("model_id", MODELS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_golden_argument_lists(model_id, case):
    name, plan_kind, cid, runtime, binary = case
    x = do_export(model_id, plan_kind, cid, runtime, binary)
    check_golden(GOLDEN / model_id / f"{name}.txt", golden_text(x))
    for side in x.side_files:
        check_golden(GOLDEN / model_id / f"{name}.{side.name}", side.text)


def test_labels_and_flags_that_matter():
    qwen, ds, oss = "qwen3-30b-a3b", "deepseek-coder-v2-lite-instruct", "gpt-oss-20b"
    # DeepSeek: block 0 is dense, --n-cpu-moe counts it.
    x = do_export(ds, "partial", "partition-first", "stock", "llama-server")
    n_cpu = 26 - memory(get_model(ds), int(get_model(ds).n_experts_total * 0.6)).gpu_layers()
    assert x.argv[x.argv.index("--n-cpu-moe") + 1] == str(n_cpu + 1)
    assert x.label == RUNS_ON_STOCK and x.argv[-2:] == ("-lm", "none") and "--no-mmap" not in x.argv
    for base in (["-ngl", "99"], ["-fa", "on"], ["-c", "8192"], ["-t", "8"], ["--fit", "off"]):
        i = x.argv.index(base[0])
        assert list(x.argv[i:i + 2]) == base
    # Stage without cache: the env var, experts on the CPU.
    x = do_export(qwen, "zero", "fixed.stage.uniform", "stock", "llama-server")
    assert x.env_dict == {"GGML_OP_OFFLOAD_MIN_BATCH": "1"} and "--cpu-moe" in x.argv
    # The fork: deepseek2 only among these; the others are refused with the reason.
    x = do_export(ds, "partial", "fixed.parallel.uniform", "fork", "llama-server")
    assert x.label == NEEDS_FORK and x.argv[-4:] == ("-ncmoe", "99", "-lm", "none")
    assert "--moe-cache-slots" in x.argv and len(x.side_files) == 1
    for model_id in (qwen, oss):
        x = do_export(model_id, "partial", "fixed.parallel.uniform", "fork", "llama-server")
        assert x.label == NOT_EXPRESSIBLE and "deepseek2, laguna, qwen35moe" in x.reason
        assert x.exported_id == "partition-first" and x.nearest_tpot_s == 0.0200 and x.candidate_tpot_s == 0.0160
    # Needs the fork but exported for stock: its nearest stock candidate, both estimates.
    x = do_export(ds, "partial", "fixed.parallel.uniform", "stock", "llama-server")
    assert x.label == NEEDS_FORK and x.nearest_id == "partition-first" and "--runtime fork" in x.reason
    assert "20.00 ms/token against 16.00 ms/token" in x.reason
    # llama-bench spellings.
    x = do_export(qwen, "partial", "all-cpu", "stock", "llama-bench")
    assert x.argv[x.argv.index("-ncmoe") + 1] == "48" and x.argv[-2:] == ("-lm", "none") and "-mmp" not in x.argv
    assert "-c" not in x.argv and "--fit" not in x.argv and ("-fa", "1") == x.argv[5:7]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_quoting_round_trips(case):
    name, plan_kind, cid, runtime, binary = case
    for model_id in MODELS:
        x = do_export(model_id, plan_kind, cid, runtime, binary)
        assert shlex.split(x.display()) == [f"{k}={v}" for k, v in x.env] + list(x.argv)
        assert MODEL_PATH in x.argv


def test_odd_paths_survive_quoting():
    model = get_model("gpt-oss-20b")
    for path in ("a b/c'd\"e.gguf", "$(rm -rf x) `y`.gguf", "tab\there.gguf", "ünï cödé.gguf"):
        x = export_candidate(parse_candidate_id("partition-last"), model, plan(model, "partial"),
                             model_path=path, context=4096, threads=4)
        assert shlex.split(x.display()) == list(x.argv)
    with pytest.raises(CopeInputError, match="splits -m on ','"):
        export_candidate(parse_candidate_id("all-cpu"), model, plan(model, "partial"), binary="llama-bench",
                         model_path="a,b.gguf", context=4096, threads=4)


# --- -ot regexes against a real GGUF tensor table -----------------------------------------

def write_tiny_gguf(path: Path) -> list[str]:
    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "qwen3moe")
    names = ["token_embd.weight", "output.weight", "output_norm.weight"]
    for n in range(28):
        for t in ("ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight", "ffn_gate_up_exps.weight",
                  "ffn_down_exps.bias", "ffn_gate_inp.weight", "ffn_gate_shexp.weight", "ffn_up_shexp.weight",
                  "ffn_down_shexp.weight", "ffn_gate.weight", "ffn_up.weight", "attn_q.weight",
                  "exp_probs_b.bias", "ffn_norm.weight"):
            names.append(f"blk.{n}.{t}")
    for name in names:
        writer.add_tensor(name, np.zeros(4, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    reader = gguf.GGUFReader(str(path))
    return [t.name for t in reader.tensors]


def intended(names: list[str], blocks: set[int]) -> set[str]:
    return {n for n in names if "_exps." in n and int(n.split(".")[1]) in blocks}


def test_every_emitted_regex_matches_exactly_the_intended_tensors(tmp_path):
    names = write_tiny_gguf(tmp_path / "tiny.gguf")
    assert len(names) == 3 + 28 * 14
    sets = [{1}, {11}, {2, 3, 27}, set(range(1, 28, 2)), {0, 10, 20}, set(range(28))]
    for blocks in sets:
        pattern = layer_set_regex(sorted(blocks))
        assert "," not in pattern
        got = {n for n in names if re.search(pattern, n)}
        assert got == intended(names, blocks), blocks
    # --cpu-moe's pattern: every expert tensor, nothing shared or dense.
    assert {n for n in names if re.search(EXPS_REGEX_TAIL, n)} == intended(names, set(range(28)))
    # The -ot of real exports (a 28-block shape: DeepSeek-Lite's 27 blocks fit in 0..27).
    model = get_model("deepseek-coder-v2-lite-instruct")
    for binary in ("llama-server", "llama-bench"):
        x = export_candidate(parse_candidate_id("partition-last"), model, plan(model, "partial"),
                             binary=binary, model_path="m.gguf", context=8192, threads=8)
        (pattern,) = expert_regexes(x)
        blocks = {int(b) for b in re.findall(r"\d+", pattern.split(")")[0])}
        # Exactly the last MoE blocks that do not fit: n_layers - gpu_layers of them.
        n_cpu = model.n_moe_layers - plan(model, "partial").memory.gpu_layers()
        assert n_cpu > 0 and blocks == set(model.moe_blocks[-n_cpu:])
        assert {n for n in names if re.search(pattern, n)} == intended(names, blocks)


# --- the fork's synthetic profile ---------------------------------------------------------

@pytest.mark.parametrize("slots", [1, 3, 6, 7, 40])
def test_fork_profile_makes_chosen_experts_strictly_most_frequent(slots):
    model = get_model("deepseek-coder-v2-lite-instruct")  # 64 experts, top-6, blocks 1..26
    pop = popularity(model)
    text = fork_profile_csv(pop, slots, model.moe_blocks, model.top_k)
    counts: dict[int, dict[int, int]] = {}
    for line in text.splitlines():
        pos, layer, *ids = (int(x) for x in line.split(","))
        assert pos >= 0 and len(ids) == model.top_k and len(set(ids)) == model.top_k
        assert layer in model.moe_blocks
        for e in ids:
            counts.setdefault(layer, {}).setdefault(e, 0)
            counts[layer][e] += 1
    order = np.argsort(-pop, axis=1, kind="stable")
    for i, block in enumerate(model.moe_blocks):
        chosen = set(int(e) for e in order[i, :slots])
        c = counts[block]
        assert min(c[e] for e in chosen) > max([c.get(e, 0) for e in range(64) if e not in chosen] + [0])


# --- files and the command line -----------------------------------------------------------

def test_write_export_is_atomic_and_puts_side_files_beside(tmp_path):
    model = get_model("deepseek-coder-v2-lite-instruct")
    out = tmp_path / "run dir" / "cmd.sh"
    x = export_candidate(parse_candidate_id("fixed.parallel.uniform"), model, plan(model, "partial"),
                         runtime="fork", model_path="m.gguf", context=8192, threads=8, side_dir=str(out.parent))
    written = write_export(x, out)
    assert sorted(p.name for p in written) == sorted([out.name, x.side_files[0].name])
    shebang, *comments, command = out.read_text().splitlines()
    assert shebang == "#!/bin/sh" and out.stat().st_mode & 0o100  # a script its owner can run
    assert command == x.display() and comments == [f"# {n}" for n in x.notes] and comments
    assert (out.parent / x.side_files[0].name).read_text() == x.side_files[0].text
    assert str(out.parent / x.side_files[0].name) in x.argv
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp files left



def test_the_fork_profile_is_laid_out_only_when_it_is_read(monkeypatch):
    """A fork export names its profile and lays it out when it is written or read, once;
    the popularity it was made from is what the file holds, whatever happens to the array."""
    from engine.runtimes import fork_profile

    made = []
    real = fork_profile.fork_profile_csv
    monkeypatch.setattr(fork_profile, "fork_profile_csv", lambda *a: made.append(a) or real(*a))
    model = get_model("deepseek-coder-v2-lite-instruct")
    p = plan(model, "partial")
    x = export_candidate(parse_candidate_id("fixed.parallel.uniform"), model, p, runtime="fork",
                         model_path="m.gguf", context=8192, threads=8)
    assert x.artefact_names == [x.side_files[0].name] and x.to_dict()["side_files"] == x.artefact_names
    assert made == []  # named, shown and reported without the file
    slots = int(x.argv[x.argv.index("--moe-cache-slots") + 1])
    expected = real(p.popularity, slots, model.moe_blocks, model.top_k)
    p.popularity[:] = 0  # the caller's array changes after the command is made
    assert x.side_files[0].text == expected and x.side_files_dict == {x.side_files[0].name: expected}
    assert len(made) == 1


def test_a_fork_profile_of_no_slot_is_refused_when_the_command_is_made():
    from engine.runtimes.fork_profile import fork_profile_file

    model = get_model("deepseek-coder-v2-lite-instruct")
    popularity = np.ones((model.n_moe_layers, model.n_routed_experts), dtype=np.int64)
    for slots in (0, model.n_routed_experts):
        with pytest.raises(ValueError, match="slots must be in"):
            fork_profile_file(model, popularity, slots)

FAST = ["--tokens", "100", "--cpu", "desktop-ddr5"]


def test_cope_export_prints_the_command_and_writes_it(capsys, tmp_path):
    out = tmp_path / "cmd.txt"
    code = main(["export", "--candidate", "partition-last", *FAST, "--model-path", MODEL_PATH, "--out", str(out)])
    stdout = capsys.readouterr().out
    assert code == EXIT_OK
    assert stdout.startswith("# plan: no plan recorded (cope advise records one): --cpu desktop-ddr5 --tokens 100, "
                             "the rest COPE's defaults\n# partition-last: stock llama.cpp expresses it\n")
    command = stdout.splitlines()[-1]
    assert shlex.split(command)[:3] == ["llama-server", "-m", MODEL_PATH]
    written = out.read_text().splitlines()
    assert written[0] == "#!/bin/sh" and written[-1] == command
    assert all(line.startswith("# ") for line in written[1:-1])


def test_an_exported_command_names_its_artefacts_by_absolute_path(capsys, tmp_path, monkeypatch):
    # --out fork/run.sh from tmp_path: the CSV the command reads must still be found when the
    # script runs from another folder (cd fork && ./run.sh).
    monkeypatch.chdir(tmp_path)
    code = main(["export", "--candidate", "fixed.parallel.uniform", "--runtime", "fork", *FAST,
                 "--model", "deepseek-v2-lite-chat", "--vram-budget", "6",
                 "--model-path", MODEL_PATH, "--out", "fork/run.sh"])
    assert code == EXIT_OK
    command = shlex.split(capsys.readouterr().out.splitlines()[-1])
    profile = next(a for a in command if a.endswith(".csv"))
    assert Path(profile).is_absolute() and Path(profile).parent == tmp_path / "fork" and Path(profile).is_file()


def test_the_header_says_the_label_in_words_and_which_runtime_runs_it(capsys):
    assert main(["export", "--candidate", "all-cpu", "--runtime", "ik_llama.cpp", *FAST]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()[1:]  # after the line that says which plan
    assert lines[0] == "# all-cpu: stock llama.cpp expresses it"
    assert lines[1].startswith("# ik_llama.cpp runs it exactly")


def test_no_internal_label_reaches_an_export_header(capsys):
    assert main(["export", "--candidate", "fixed.ready-first.uniform", *FAST]) == EXIT_OK
    header = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# ")]
    assert header[0].startswith("# plan: ") and header[1] == "# fixed.ready-first.uniform: no llama.cpp expresses it"
    assert not any(label in line for line in header for label in ("not-expressible", "runs-on-stock", "needs-fork"))


def test_cope_export_json_and_bad_candidate(capsys):
    assert main(["export", "--candidate", "all-cpu", "--json", *FAST, "--binary", "llama-bench"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["label"] == "runs-on-stock" and doc["argv"][0] == "llama-bench" and "-ncmoe" in doc["argv"]
    assert main(["export", "--candidate", "fixed.bogus", *FAST]) == 2
    assert "fixed.bogus" in capsys.readouterr().err


def test_advise_export_adds_the_best_command(capsys):
    assert main(["advise", "--json", "--export", *FAST]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    fastest = doc["recommendation"]["fastest_estimate"]
    assert doc["export"]["candidate"] == fastest
    assert doc["export"]["argv"][0] == "llama-server"
    labels = {c["id"]: c["llama_cpp"] for c in doc["candidates"]}
    assert doc["export"]["label"] == labels[fastest]
    # What is exported runs on stock llama.cpp: the best itself, or its nearest runnable.
    assert labels[doc["export"]["exported"]] == "runs-on-stock"
    if doc["export"]["exported"] == "partition-first":
        detail = next(c["detail"] for c in doc["candidates"] if c["id"] == "partition-first")
        n_blocks = detail.split()[1]  # "--n-cpu-moe N (...)"
        argv = doc["export"]["argv"]
        assert argv[argv.index("--n-cpu-moe") + 1] == n_blocks
    assert main(["advise", "--export", *FAST]) == EXIT_OK
    out = capsys.readouterr().out
    assert "llama.cpp command for the fastest estimate:" in out
    assert out.splitlines()[-1].startswith(("llama-server ", "GGML_OP_OFFLOAD_MIN_BATCH=1 llama-server "))
