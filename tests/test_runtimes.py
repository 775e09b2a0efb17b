"""The runtime registry: golden argument lists per runtime and candidate kind, what each
runtime runs exactly or approximately, and kt-kernel's activation file.

Golden files live in tests/golden/runtimes/<model>/<runtime>-<case>.txt; regenerate them
with COPE_UPDATE_GOLDEN=1 python -m pytest tests/test_runtimes.py and review the diff.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.core.errors import CopeInputError
from engine.hardware.memory import GIB
from engine.models.catalog import get_model
from engine.replays.policy import parse_candidate_id
from engine.replays.replay import resident_mask
from engine.runtimes import REGISTRY, placement_of, runtime_named
from engine.runtimes.export import ExportPlan, expert_regexes, export_candidate
from engine.runtimes.sglang_kt import activation_counts, total_flags
from engine.traces.synthetic import SyntheticSettings, synthetic_trace
from tests.test_export import EB, MODEL_PATH, TPOTS, check_golden, memory, popularity

GOLDEN = Path(__file__).parent / "golden" / "runtimes"
MODELS = ("qwen3-30b-a3b", "deepseek-coder-v2-lite-instruct")


KT_BUDGET = 32 * GIB  # SGLang's budget: an RTX 5090's memory (the plan leaves 5% of it to other processes)
AMX_NOTE = "a test CPU with AMX"


def plan(model, kind: str, **kw) -> ExportPlan:
    """The llama.cpp runtimes' plan of tests/test_export.py (1 MiB expert slots), in a 24 GiB
    budget whose runtime reserve leaves exactly those slots, so that SGLang's arithmetic
    (which counts the checkpoint's BF16 weights, not llama.cpp's slots) has a real card to
    size; the CPU has AMX (kt-kernel's AMX methods for expert widths LLAMAFILE refuses)."""
    total = model.n_experts_total
    slots = {"partial": int(total * 0.6), "fits": total + model.top_k, "zero": model.top_k}[kind]
    tpots = dict(TPOTS, **{"fixed.parallel.nonuniform": 0.0155, "fixed.sequential.nonuniform": 0.0190})
    if kind == "fits":
        tpots["all-gpu"] = 0.0100
    mem = replace(memory(model, slots), vram_budget_bytes=KT_BUDGET, runtime_reserve_bytes=KT_BUDGET - slots * EB)
    kw = {"numa_nodes": 1, "cpu_amx": True, "cpu_amx_note": AMX_NOTE, **kw}
    return ExportPlan(mem, popularity(model), tuple(tpots.items()), **kw)


# (case name, plan kind, candidate id, runtime)
CASES = (
    ("ik_llama.cpp", "partition-first", "partial", "partition-first"),
    ("ik_llama.cpp", "partition-last", "partial", "partition-last"),
    ("ik_llama.cpp", "all-cpu", "partial", "all-cpu"),
    ("ik_llama.cpp", "all-gpu", "fits", "all-gpu"),
    ("ik_llama.cpp", "stage-without-cache", "zero", "fixed.stage.uniform"),
    ("fork", "fixed-parallel-nonuniform", "partial", "fixed.parallel.nonuniform"),
    ("llama.cpp", "fixed-parallel-nonuniform", "partial", "fixed.parallel.nonuniform"),
    ("sglang-kt", "fixed-parallel-nonuniform", "partial", "fixed.parallel.nonuniform"),
    ("sglang-kt", "fixed-parallel-uniform", "partial", "fixed.parallel.uniform"),
    ("sglang-kt", "fixed-sequential-nonuniform", "partial", "fixed.sequential.nonuniform"),
    ("sglang-kt", "layer-parallel-uniform", "partial", "layer.parallel.uniform.lru"),
    ("sglang-kt", "partition-last", "partial", "partition-last"),
    ("sglang-kt", "partition-first", "partial", "partition-first"),
    ("sglang-kt", "all-cpu", "partial", "all-cpu"),
)


def do_export(model_id: str, runtime: str, plan_kind: str, cid: str, **kw):
    model = get_model(model_id)
    return export_candidate(parse_candidate_id(cid), model, plan(model, plan_kind), runtime=runtime,
                            model_path=MODEL_PATH, context=8192, threads=8, **kw)


def golden_text(x) -> str:
    lines = [
        f"candidate: {x.candidate_id}",
        f"runtime: {x.runtime} ({x.support})",
        f"label: {x.label}",
        f"exported: {x.exported_id}",
        f"nearest: {x.nearest_id or '-'}",
        f"reason: {x.reason}",
        "env: " + (" ".join(f"{k}={v}" for k, v in x.env) or "-"),
        "artefacts: " + (" ".join(x.artefact_names) or "-"),
        *(f"note: {n}" for n in x.notes),
        f"display: {x.display()}",
        "argv:",
        *(f"  {a}" for a in x.argv),
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("model_id", MODELS)
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_golden_argument_lists(model_id, case):
    runtime, name, plan_kind, cid = case
    x = do_export(model_id, runtime, plan_kind, cid)
    check_golden(GOLDEN / model_id / f"{runtime}-{name}.txt", golden_text(x))
    assert shlex.split(x.display()) == [f"{k}={v}" for k, v in x.env] + list(x.argv)


def test_ik_llama_cpp_spells_partitions_as_overrides_and_never_fit_off():
    model = get_model("deepseek-coder-v2-lite-instruct")  # block 0 dense
    for cid in ("partition-first", "partition-last"):
        x = do_export(model.id, "ik_llama.cpp", "partial", cid)
        # ik_llama.cpp's --n-cpu-moe counts the last MoE layers, so a layer set is always -ot.
        assert "--n-cpu-moe" not in x.argv and "-ncmoe" not in x.argv and "--fit" not in x.argv
        (pattern,) = expert_regexes(x)
        stock = do_export(model.id, "llama.cpp", "partial", cid)
        n_cpu = model.n_moe_layers - plan(model, "partial").memory.gpu_layers()
        blocks = {int(b) for b in pattern.split("(")[1].split(")")[0].split("|")}
        assert len(blocks) == n_cpu and 0 not in blocks
        assert blocks == (set(model.moe_blocks[:n_cpu]) if cid == "partition-first" else set(model.moe_blocks[-n_cpu:]))
        # ik_llama.cpp (at its manifest's commit) has no -lm: --no-mmap; stock has only -lm.
        assert x.argv[-1] == "--no-mmap" and stock.argv[-2:] == ("-lm", "none") and "--no-mmap" not in stock.argv
    assert "--cpu-moe" in do_export(model.id, "ik_llama.cpp", "partial", "all-cpu").argv
    # ik's llama-bench (examples/llama-bench/llama-bench.cpp at 8337e4c): no --cpu-moe, -ncmoe or -lm there,
    # so every layer as one -ot and the copy as -mmp 0
    bench = do_export(model.id, "ik_llama.cpp", "partial", "all-cpu", binary="llama-bench")
    (pattern,) = expert_regexes(bench)
    assert {int(b) for b in pattern.split("(")[1].split(")")[0].split("|")} == set(model.moe_blocks)
    assert bench.argv[-2:] == ("-mmp", "0") and "-c" not in bench.argv and bench.argv[bench.argv.index("-fa") + 1] == "1"


def test_sglang_kt_frequency_export_carries_counts_and_exact_total():
    model = get_model("deepseek-coder-v2-lite-instruct")
    x = do_export(model.id, "sglang-kt", "partial", "fixed.parallel.nonuniform")
    assert x.support == "exact" and x.exported_id == x.candidate_id
    argv = list(x.argv)
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    # DeepSeek's experts are 1408 wide: not LLAMAFILE (% 256), AMXINT4 on this AMX CPU, from converted weights.
    for flag, value in (("--kt-method", "AMXINT4"), ("--kt-weight-path", "deepseek-coder-v2-lite-instruct-AMXINT4"),
                        ("--kt-cpuinfer", "8"),
                        ("--kt-expert-placement-strategy", "frequency"), ("--context-length", "8192"),
                        ("--init-expert-location", "cope-deepseek-coder-v2-lite-instruct-kt-activation.pt"),
                        ("--model-path", model.hf_repo or model.id)):
        assert argv[argv.index(flag) + 1] == value, flag
    p = plan(model, "partial")
    placement = placement_of(parse_candidate_id("fixed.parallel.nonuniform"), model, p.memory, p.popularity)
    # No environment: SGLang at the manifest's commit reads no per-layer count; the total is the flags'.
    assert x.env == ()
    ratio = float(argv[argv.index("--kt-gpu-experts-ratio") + 1])
    assert int(model.n_moe_layers * model.n_routed_experts * ratio) == placement.slots_total
    (name, counts), = x.tensors
    assert counts.shape == (1, model.n_blocks, model.n_routed_experts) and not counts[0, 0].any()


@pytest.mark.parametrize("total", [1, 47, 48, 999, 1663, 4775, 6143])
def test_total_flags_ask_kt_kernel_for_exactly_the_total(total):
    n_layers, n_experts = 48, 128
    flags = total_flags(total, n_layers, n_experts)
    if flags[0] == "--kt-num-gpu-experts":
        assert int(flags[1]) * n_layers == total
    else:
        # kt_ep_wrapper.py: num_gpu_experts = int(total_experts * kt_gpu_experts_ratio)
        assert int(n_layers * n_experts * float(flags[1])) == total


def test_what_each_runtime_runs():
    ds = get_model("deepseek-coder-v2-lite-instruct")  # deepseek2: the fork is wired for it
    qwen = get_model("qwen3-30b-a3b")  # qwen3moe: it is not
    p_ds, p_qwen = plan(ds, "partial"), plan(qwen, "partial")

    def levels(model, p, cid):
        c = parse_candidate_id(cid)
        placement = placement_of(c, model, p.memory, p.popularity)
        return {r.info.name: r.support(c, placement, model, p).level for r in REGISTRY}

    assert levels(ds, p_ds, "partition-first") == {"llama.cpp": "exact", "ik_llama.cpp": "exact", "fork": "exact",
                                                   "sglang-kt": "no"}
    assert levels(ds, p_ds, "partition-last")["sglang-kt"] == "exact"  # front-loading
    assert levels(ds, p_ds, "fixed.parallel.uniform") == {"llama.cpp": "no", "ik_llama.cpp": "no", "fork": "exact",
                                                          "sglang-kt": "approximate"}
    assert levels(qwen, p_qwen, "fixed.parallel.uniform")["fork"] == "no"
    assert levels(ds, p_ds, "fixed.parallel.nonuniform") == {"llama.cpp": "no", "ik_llama.cpp": "no",
                                                             "fork": "approximate", "sglang-kt": "exact"}
    assert set(levels(ds, p_ds, "fixed.ready-first.nonuniform").values()) == {"no"}
    assert set(levels(ds, p_ds, "layer.stage.uniform.lru").values()) == {"no"}
    # The cost model's execution semantics: llama.cpp's CPU experts run after the GPU's
    # layer work, the fork's and kt-kernel's at the same time.
    assert {r.info.name: r.info.cpu_experts.value for r in REGISTRY} == {
        "llama.cpp": "sequential", "ik_llama.cpp": "sequential", "fork": "parallel", "sglang-kt": "parallel"}


def test_stock_and_fork_runtime_names_keep_working():
    model = get_model("deepseek-coder-v2-lite-instruct")
    assert runtime_named("stock") is runtime_named("llama.cpp")
    a = do_export(model.id, "stock", "partial", "partition-first")
    b = do_export(model.id, "llama.cpp", "partial", "partition-first")
    assert a == b and a.runtime == "llama.cpp"
    with pytest.raises(CopeInputError, match="--runtime must be one of llama.cpp, ik_llama.cpp, fork, sglang-kt"):
        runtime_named("vllm")


# --- RAM ------------------------------------------------------------------------------------


def test_no_mmap_is_dropped_when_only_the_mapped_file_fits_and_refused_when_nothing_does():
    model = get_model("qwen3-30b-a3b")
    base = plan(model, "partial")
    x = do_export(model.id, "llama.cpp", "partial", "partition-first")
    need = x.ram.need_bytes  # 20 of 48 layers' experts at 1 MiB each, no embedding in this plan
    assert x.argv[-2:] == ("-lm", "none") and x.ram.budget_bytes is None
    [spelled] = x.notes  # nothing dropped: only which build the command is spelled for
    assert spelled.startswith("spelled for ggml-org/llama.cpp at 0c1e57098") and "--no-mmap in place of -lm none" in spelled
    ram_for = {  # RAM at which the copy just fails but the mapped file fits; then nothing fits
        "mapped": int((need + 2 * GIB) / 0.95),
        "none": need + 2 * GIB - 1,
    }
    p = ExportPlan(base.memory, base.popularity, base.tpot_s, ram_bytes=ram_for["mapped"])
    x = export_candidate(parse_candidate_id("partition-first"), model, p, model_path="m.gguf", context=8192,
                         threads=8)
    assert "-lm" not in x.argv and x.ram.mapped and x.ram.fits
    assert x.notes[-1].startswith("mapped, not copied (no -lm none / --no-mmap):") and "pinned" in x.notes[-1]
    p = ExportPlan(base.memory, base.popularity, base.tpot_s, ram_bytes=ram_for["none"])
    x = export_candidate(parse_candidate_id("partition-first"), model, p, model_path="m.gguf", context=8192,
                         threads=8)
    assert not x.fits_ram and x.notes[-1].startswith("does not fit in RAM")


# --- kt-kernel's activation file --------------------------------------------------------------


def kt_frequency_masks(path: Path, n_gpu_experts: int, moe_blocks) -> np.ndarray:
    """kt-kernel's "frequency" rule as SGLang applies it (kt_ep_wrapper.py and
    experts_base.py generate_gpu_experts_masks): load, sum the first dimension, global
    torch.topk over every layer, dense layers all on the GPU."""
    torch = pytest.importorskip("torch")
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    counts = loaded["logical_count"]
    freq = counts.sum(dim=0).float()
    n_layers, n_experts = freq.shape
    _, top = torch.topk(freq.view(-1), k=n_gpu_experts, largest=True, sorted=False)
    mask = torch.zeros(n_layers * n_experts, dtype=torch.bool)
    mask[top] = True
    mask = mask.view(n_layers, n_experts)
    for block in range(n_layers):
        if block not in moe_blocks:
            mask[block, :] = True
    return mask.numpy()


def asked_total(x, model) -> int:
    """The GPU experts an sglang-kt command asks for (per layer, or as a ratio of every expert)."""
    argv = list(x.argv)
    if "--kt-num-gpu-experts" in argv:
        return int(argv[argv.index("--kt-num-gpu-experts") + 1]) * model.n_moe_layers
    return int(model.n_experts_total * float(argv[argv.index("--kt-gpu-experts-ratio") + 1]))


def check_activation_file(tmp_path: Path, model, profile) -> None:
    from cope_tui.service.runtimes import save_counts_pt
    from engine.runtimes.export import write_export

    torch = pytest.importorskip("torch")
    pop = profile.popularity()
    total = int(model.n_experts_total * 0.4)  # a boundary that may well be tied: the file orders strictly
    p = ExportPlan(replace(memory(model, total), vram_budget_bytes=KT_BUDGET,
                           runtime_reserve_bytes=KT_BUDGET - total * EB), pop, (), cpu_amx=True, cpu_amx_note=AMX_NOTE)
    candidate = parse_candidate_id("fixed.parallel.nonuniform")
    x = export_candidate(candidate, model, p, runtime="sglang-kt", model_path="m.gguf", context=8192, threads=4,
                         side_dir=str(tmp_path))
    written = write_export(x, tmp_path / "run.sh", write_tensor=save_counts_pt)
    pt = tmp_path / x.tensors[0][0]
    assert pt in written and str(pt) in x.argv
    loaded = torch.load(pt, weights_only=True)
    counts = loaded["logical_count"]
    assert set(loaded) == {"logical_count"} and counts.dtype == torch.int64
    assert tuple(counts.shape) == (1, model.n_blocks, model.n_routed_experts)
    table = counts[0].numpy()
    for block in range(model.n_blocks):
        if block not in model.moe_blocks:
            assert not table[block].any(), block
    moe = table[list(model.moe_blocks)]
    n = model.n_experts_total
    assert ((moe - 1) // n == pop).all()  # count x N + (N - rank): the trace's counts read back
    assert (((moe - 1) // n).sum(axis=1) == profile.n_tokens * model.top_k).all()
    assert len(np.unique(moe)) == moe.size and moe.min() > 0 and moe.max() < 2**24  # strict, float32-exact
    # kt-kernel's global top-N picks exactly COPE's fixed nonuniform residency, at the total asked.
    placement = placement_of(candidate, model, p.memory, pop)
    assert asked_total(x, model) == placement.slots_total == total  # DeepSeek's 665 fit SGLang's pool: no cut
    chosen = resident_mask(pop, placement.slots_per_layer)
    kt = kt_frequency_masks(pt, total, model.moe_blocks)
    assert (kt[list(model.moe_blocks)] == chosen).all()


def test_activation_file_for_a_synthetic_trace_with_a_dense_block(tmp_path):
    model = get_model("deepseek-coder-v2-lite-instruct")  # block 0 is dense
    trace = synthetic_trace(model, SyntheticSettings(tokens=400, seed=3))
    check_activation_file(tmp_path, model, trace)


def test_activation_file_for_real_deepseek_routing(tmp_path, shared_traces):
    from engine.traces import read_moe_beyond_csv_dir

    model = get_model("deepseek-v2-lite-chat")
    trace = read_moe_beyond_csv_dir(shared_traces / "deepseek-v2-lite-chat__moe-beyond", max_files=40)
    profile, _ = trace.split(0.5)
    check_activation_file(tmp_path, model, profile)


def test_activation_counts_reject_a_foreign_shape():
    model = get_model("qwen3-30b-a3b")
    with pytest.raises(ValueError, match="popularity of shape"):
        activation_counts(np.zeros((3, 4)), model)


# --- the fork, as its source at the manifest's commit reads its flags ---------------------------


def test_the_fork_llama_bench_runs_the_cache_from_the_environment():
    """The fork's llama-bench has no --moe-cache-*, but init_moe_expert_cache falls back to
    GGML_MOE_CACHE_PROFILE/GGML_MOE_CACHE_SLOTS (src/llama-model.cpp at 53a8e41)."""
    model = get_model("deepseek-coder-v2-lite-instruct")
    x = do_export(model.id, "fork", "partial", "fixed.parallel.uniform", binary="llama-bench")
    slots = x.argv[x.argv.index("-ncmoe") + 1]
    env = x.env_dict
    assert slots == "99" and "--moe-cache-profile" not in x.argv and "--moe-cache-slots" not in x.argv
    assert env["GGML_MOE_CACHE_PROFILE"] == x.artefact_names[0] and int(env["GGML_MOE_CACHE_SLOTS"]) > 0
    assert any("fable5/moe-cache-readme" in n for n in x.notes)  # the branch that has the cache, named


def test_the_fork_is_not_offered_with_fewer_slots_than_layers_or_merged_gate_up():
    from dataclasses import replace

    model = get_model("deepseek-coder-v2-lite-instruct")
    few = ExportPlan(memory(model, model.n_moe_layers - 1), popularity(model), tuple(TPOTS.items()))
    x = export_candidate(parse_candidate_id("fixed.parallel.nonuniform"), model, few, runtime="fork",
                         model_path="m.gguf", context=8192, threads=8)
    assert x.exported_id != "fixed.parallel.nonuniform" and "0 turns its cache off" in x.reason
    merged = replace(model, merged_gate_up=True)
    x = export_candidate(parse_candidate_id("fixed.parallel.uniform"), merged, plan(merged, "partial"),
                         runtime="fork", model_path="m.gguf", context=8192, threads=8)
    assert x.label == "not-expressible" and "ffn_gate_up_exps" in x.reason and "--moe-cache" not in x.display()
