"""SGLang + kt-kernel sized as SGLang sizes it: GPU experts in the checkpoint's dtype, the
pools by --mem-fraction-static, kt-kernel's CPU method per model and CPU, the strict order
of the activation file, and the GGUF file named as the weight path."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace

import numpy as np
import pytest

from cope_tui.cli import EXIT_OK, main
from engine.core.errors import CopeInputError
from engine.hardware.cpu_compute import cpu_amx
from engine.hardware.cpu_presets import get_cpu_preset
from engine.hardware.memory import plan_memory
from engine.models.catalog import catalog, get_model
from engine.models.hf_config import model_from_hf_config
from engine.models.quant import get_quantization
from engine.replays.policy import Allocation, parse_candidate_id
from engine.replays.replay import resident_mask
from engine.replays.residency import allocate_slots
from engine.runtimes import placement_of
from engine.runtimes.export import ExportPlan, export_candidate
from engine.runtimes.kt_method import AMXINT4, LLAMAFILE, kt_method
from engine.runtimes.sglang_kt import SGLANG_KT, activation_counts, cope_rank, kt_memory, strict_counts
from engine.runtimes.sglang_memory import (
    CUDA_CONTEXT_BYTES,
    GIB,
    MIB,
    Checkpoint,
    checkpoint_from_config,
    checkpoint_of_model,
    sglang_memory,
    sglang_reserved_mib,
    sglang_tier,
)
from probes.host import cpuinfo_amx

FAST = ["--tokens", "100", "--cpu", "desktop-ddr5"]
QWEN_BF16_EXPERT = 3 * 2048 * 768 * 2  # gate, up, down of 2048 x 768 at two bytes: 9.44 MB


def export_json(capsys, *args: str) -> dict:
    code = main(["export", "--runtime", "sglang-kt", *FAST, *args, "--json"])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    return json.loads(out)


def flag(argv, name: str) -> str:
    argv = list(argv)
    return argv[argv.index(name) + 1]


def asked_gpu_experts(argv, model) -> int:
    """What kt_ep_wrapper.py computes from the flags: per layer x MoE layers, or int(all x ratio)."""
    argv = list(argv)
    if "--kt-gpu-experts-ratio" in argv:
        return int(model.n_experts_total * float(flag(argv, "--kt-gpu-experts-ratio")))
    return int(flag(argv, "--kt-num-gpu-experts")) * model.n_moe_layers


def kt_plan(model, budget_gib: float, *, amx: bool | None = False, card_gib: float | None = None,
            context: int = 8192, popularity=None) -> ExportPlan:
    memory = plan_memory(model, get_quantization(model.default_quant), vram_budget_bytes=int(budget_gib * GIB),
                         context_tokens=context)
    pop = popularity if popularity is not None else (
        (np.arange(model.n_routed_experts)[None, :] * 7 + np.arange(model.n_moe_layers)[:, None]) % 13
    ).astype(np.int64)
    return ExportPlan(memory, pop, (("fixed.parallel.nonuniform", 0.01), ("all-cpu", 0.05)), numa_nodes=1,
                      gpu_vram_bytes=int(card_gib * GIB) if card_gib else None, cpu_amx=amx,
                      cpu_amx_note="a test CPU " + ("with" if amx else "without") + " AMX")


# --- SGLang's arithmetic ---------------------------------------------------------------------


def test_sglang_picks_its_prefill_and_cuda_graph_sizes_and_reserve_by_the_card():
    # server_args.py _handle_gpu_memory_settings, one GPU: reserved = 512 + chunk x 1.5 + bs x 2 + 128 MiB.
    assert sglang_tier(16 * 1024) == (2048, 8) and sglang_reserved_mib(16 * 1024, 2048, 8) == 3728
    assert sglang_tier(24 * 1024) == (2048, 24) and sglang_reserved_mib(24 * 1024, 2048, 24) == 3760
    assert sglang_tier(40 * 1024) == (4096, 32) and sglang_reserved_mib(40 * 1024, 4096, 32) == 6848
    assert sglang_tier(80 * 1024) == (8192, 256) and sglang_reserved_mib(80 * 1024, 8192, 256) == 13440
    assert sglang_tier(180 * 1024) == (16384, 512) and sglang_reserved_mib(180 * 1024, 16384, 512) == 26240
    assert sglang_reserved_mib(64 * 1024, 2048, 8) == 10 * 1024  # at least 10 GiB above 60 GiB


def test_qwen3_30b_on_a_4090_fits_the_card_by_sglangs_arithmetic(capsys):
    model = get_model("qwen3-30b-a3b")
    doc = export_json(capsys, "--gpu", "rtx-4090", "--candidate", "fixed.parallel.nonuniform")
    argv, notes = doc["argv"], doc["notes"]
    # Fewer GPU experts than llama.cpp's slots priced: the command runs the candidate cut to them.
    assert doc["support"] == "approximate" and flag(argv, "--kt-method") == LLAMAFILE
    assert "cut to the 1648 of its 6144 GPU experts" in doc["reason"]
    plan = kt_plan(model, 24, card_gib=24)  # what the request plans with: the whole 24 GiB card
    sg = kt_memory(model, plan)
    # The GPU experts are the checkpoint's BF16 ones, not the GGUF's Q4_K_M (3.3x smaller).
    assert sg.expert_bytes == QWEN_BF16_EXPERT and sg.checkpoint.label == "BF16" and not sg.checkpoint.assumed
    assert sg.non_expert_bytes == model.non_expert_params() * 2  # embedding and head on the GPU too
    assert sg.kv_bytes == 8192 * 48 * 2 * 4 * 128 * 2  # 8192 tokens x 48 layers x K,V x 4 heads x 128 x 2 bytes
    n_gpu = asked_gpu_experts(argv, model)
    # 34 a layer; kt-kernel's README fits "~32" on its 4090. 1.2 GiB (5% of the card) is left to other
    # processes: 1.2 GiB / 9 MiB = 134 experts fewer than a plan that takes the whole card (1782).
    assert n_gpu == sg.gpu_experts == 1648 and sg.other_use_bytes == int(0.05 * 24 * GIB)
    assert float(flag(argv, "--mem-fraction-static")) == sg.mem_fraction_static == 0.829
    assert flag(argv, "--chunked-prefill-size") == "2048" and flag(argv, "--cuda-graph-max-bs") == "24"
    # SGLang's own accounting: weights + KV for the context within mem_fraction_static x the free memory ...
    static = sg.mem_fraction_static * (24 * GIB - CUDA_CONTEXT_BYTES - sg.other_use_bytes)
    weights = sg.non_expert_bytes + n_gpu * QWEN_BF16_EXPERT + sg.staging_bytes
    assert weights + sg.kv_bytes <= static and static - weights - sg.kv_bytes < 0.05 * static
    # ... and the reserve it keeps for activations and CUDA graphs, with the request table, outside it.
    assert sg.other_use_bytes + CUDA_CONTEXT_BYTES + static + 3760 * MIB + sg.request_table_bytes <= 24 * GIB
    # The split, in GiB, in the export's comments.
    assert any("24.00 GiB budget = other processes 1.20 + CUDA context 0.50 (assumed) + static pool 18.49 "
               "(--mem-fraction-static 0.829" in n for n in notes)
    assert any("non-expert weights 2.87 (BF16) + 1648 GPU experts 14.48 (9.00 MiB each, BF16)" in n for n in notes)
    assert any(n.startswith("needs 22.80 GiB free at start") and "--max-total-tokens 12277 caps the KV pool" in n
               for n in notes)
    assert any("the candidate assumed 6144" in n and "1648 asked of kt-kernel" in n for n in notes)


def test_a_12_gib_budget_asks_for_what_sglang_holds_not_llama_cpps_slots():
    model = get_model("qwen3-30b-a3b")
    plan = kt_plan(model, 12, card_gib=24)
    candidate = parse_candidate_id("fixed.parallel.nonuniform")
    placement = placement_of(candidate, model, plan.memory, plan.popularity)
    assert placement.slots_total == 3338  # llama.cpp's arithmetic at the GGUF's size (the figure)
    x = export_candidate(candidate, model, plan, runtime="sglang-kt", model_path="/m/q.gguf", context=8192,
                         threads=8)
    sg = kt_memory(model, plan)
    assert asked_gpu_experts(x.argv, model) == sg.gpu_experts == 378  # 0.6 GiB (5%) left to others: 67 fewer
    assert sg.gpu_experts * sg.expert_bytes + sg.non_expert_bytes + sg.kv_bytes <= sg.static_bytes
    # A 12 GiB budget on the 24 GiB card: the tiers are the card's, the fraction the budget's.
    assert sg.chunked_prefill_size == 2048 and sg.cuda_graph_max_bs == 24 and sg.mem_fraction_static == 0.651
    assert "cut to the 378 of its 3338 GPU experts" in x.reason
    # Fewer GPU experts than the candidate was priced with: what runs is not that candidate.
    assert x.support == "approximate" and x.env == ()


def test_plain_sglang_is_decided_by_sglangs_arithmetic():
    model = get_model("qwen3-30b-a3b")
    all_gpu = parse_candidate_id("all-gpu")
    # 24 GiB: llama.cpp holds every Q4_K_M expert, SGLang not the 61 GB of BF16 ones.
    plan = kt_plan(model, 24)
    assert plan.memory.all_gpu_fits
    placement = placement_of(all_gpu, model, plan.memory, plan.popularity)
    support = SGLANG_KT.support(all_gpu, placement, model, plan)
    assert not support.runs and "plain SGLang" not in support.note and "6144 x 9.00 MiB in BF16" in support.note
    x = export_candidate(all_gpu, model, plan, runtime="sglang-kt", model_path="m.gguf", context=8192, threads=8)
    assert x.exported_id == "fixed.parallel.nonuniform" and asked_gpu_experts(x.argv, model) == 1648
    # An H200 holds them all: plain SGLang, no kt-kernel.
    h200 = kt_plan(model, 141)
    assert kt_memory(model, h200).all_fit
    support = SGLANG_KT.support(all_gpu, placement_of(all_gpu, model, h200.memory, h200.popularity), model, h200)
    assert not support.runs and "plain SGLang" in support.note


def test_the_checkpoint_dtype_comes_from_config_json_or_is_assumed_and_said(tmp_path):
    qwen = get_model("qwen3-30b-a3b")
    assert checkpoint_of_model(qwen) == Checkpoint("bfloat16", "", "qwen3-30b-a3b's config.json: torch_dtype bfloat16")
    ds = checkpoint_of_model(get_model("deepseek-v2-lite-chat"))
    assert ds.assumed and "BF16 assumed" in ds.source
    v3 = checkpoint_of_model(get_model("deepseek-v3"))
    assert v3.quant == "fp8" and v3.expert_bytes(get_model("deepseek-v3")) < 0.51 * 2 * get_model(
        "deepseek-v3").expert_params()
    oss = get_model("gpt-oss-20b")
    assert checkpoint_of_model(oss).expert_bytes(oss) == oss.expert_params() * 17 // 32  # MXFP4: 4.25 bits
    # A float32 config loads as float16 (model_config.py _get_and_verify_dtype): two bytes all the same.
    c = checkpoint_from_config({"torch_dtype": "float32"}, "x")
    assert c.dtype == "float16" and "loads as float16" in c.source and not c.assumed
    # --hf-model naming a local folder: its config.json decides (here an FP8 checkpoint).
    folder = tmp_path / "Qwen3-30B-A3B-FP8"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16",
                                                    "quantization_config": {"quant_method": "fp8"}}))
    plan = kt_plan(qwen, 24)
    x = export_candidate(parse_candidate_id("fixed.parallel.nonuniform"), qwen, plan, runtime="sglang-kt",
                         model_path="m.gguf", context=8192, threads=8, hf_model=str(folder))
    assert flag(x.argv, "--model-path") == str(folder)
    assert any(f"the config.json of --hf-model ({folder / 'config.json'})" in n for n in x.notes)
    assert asked_gpu_experts(x.argv, qwen) > 1.9 * 1782  # one byte a weight: about twice the BF16 count
    # A config.json read as the model carries the same fields.
    path = tmp_path / "m.config.json"
    path.write_text(json.dumps({"model_type": "qwen3_moe", "num_experts": 8, "num_experts_per_tok": 2,
                                "hidden_size": 64, "moe_intermediate_size": 256, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
                                "torch_dtype": "float16"}))
    assert model_from_hf_config(path).checkpoint_dtype == "float16"


# --- kt-kernel's CPU method -------------------------------------------------------------------


@pytest.mark.parametrize("model_id", ["deepseek-v2-lite-chat", "gpt-oss-20b"])
@pytest.mark.parametrize("amx", [False, None, True])
def test_llamafile_is_never_exported_for_deepseek_v2_lite_or_gpt_oss(model_id, amx):
    model = get_model(model_id)
    plan = kt_plan(model, 12, amx=amx)  # 12 GiB: gpt-oss's MXFP4 experts do not all fit
    for cid in ("fixed.parallel.nonuniform", "partition-last", "all-cpu"):
        candidate = parse_candidate_id(cid)
        support = SGLANG_KT.support(candidate, placement_of(candidate, model, plan.memory, plan.popularity),
                                    model, plan)
        if model_id == "gpt-oss-20b":
            assert not support.runs and "no method for gpt-oss" in support.note, support.note
        elif amx:
            x = export_candidate(candidate, model, plan, runtime="sglang-kt", model_path="m.gguf", context=8192,
                                 threads=8)
            assert flag(x.argv, "--kt-method") == AMXINT4 and LLAMAFILE not in x.argv
            assert flag(x.argv, "--kt-weight-path") == "deepseek-v2-lite-chat-AMXINT4"
            assert any("convert_cpu_weights.py" in n and "--quant-method int4" in n for n in x.notes)
        else:
            assert not support.runs and "divisible by 256" in support.note and "1408" in support.note
            assert ("need an AMX CPU: a test CPU without AMX" in support.note) if amx is False else (
                "AMX not known" in support.note)
    if not amx or model_id == "gpt-oss-20b":
        with pytest.raises(CopeInputError, match="nothing COPE ranked runs on sglang-kt here"):
            export_candidate(parse_candidate_id("fixed.parallel.nonuniform"), model, plan, runtime="sglang-kt",
                             model_path="m.gguf", context=8192, threads=8)


def test_llamafile_only_where_the_expert_width_divides_by_256():
    for model in catalog().values():
        checkpoint = checkpoint_of_model(model)
        for amx in (False, True):
            method = kt_method(model, checkpoint, amx=amx, amx_note="test", threadpools=1, gguf_expert_bytes=1 << 20)
            if method.name == LLAMAFILE:
                assert model.expert_ffn_size % 256 == 0, model.id
            elif model.expert_ffn_size % 256 and model.arch != "gpt-oss":
                assert method.name == (AMXINT4 if amx else ""), (model.id, method)
    # Each thread pool needs one 256-wide block of the width: 512 has two.
    qwen35 = get_model("qwen3.5-35b-a3b")
    method = kt_method(qwen35, checkpoint_of_model(qwen35), amx=False, amx_note="t", threadpools=4,
                       gguf_expert_bytes=1 << 20)
    assert method.name == "" and "4 thread pools" in method.why


def test_amx_from_the_cpu_flags_or_the_presets_microarchitecture():
    flags = "processor\t: 0\nflags\t\t: fpu avx2 avx512f amx_bf16 amx_tile amx_int8\n\n"
    assert cpuinfo_amx(flags) is True
    assert cpuinfo_amx(flags.replace(" amx_int8", "")) is False
    assert cpuinfo_amx("processor\t: 0\n") is None
    assert cpu_amx(get_cpu_preset("xeon-gold-6454s"))[0] is True  # Sapphire Rapids
    assert cpu_amx(get_cpu_preset("desktop-ddr5"))[0] is False  # Ryzen 9 7950X, Zen 4


# --- the activation file and the weight path -----------------------------------------------------


def test_the_activation_file_orders_strictly_as_cope_fills_even_through_ties():
    model = get_model("qwen3-30b-a3b")
    rng = np.random.default_rng(0)
    pop = rng.integers(0, 3, size=(model.n_moe_layers, model.n_routed_experts))  # ties everywhere
    counts = activation_counts(pop, model)[0]
    flat = counts.ravel()
    assert len(np.unique(flat)) == flat.size and flat.min() > 0  # no ties, no zero like a dense row
    assert len(np.unique(flat.astype(np.float32))) == flat.size  # kt-kernel takes .float() before topk
    n = pop.size
    assert ((counts - 1) // n == pop).all()  # count x N + (N - rank): the counts read back
    # argsort of the written counts is COPE's fill order (the global top, ties to the lower layer and id) ...
    order = np.argsort(-flat, kind="stable")
    assert (cope_rank(pop).ravel()[order] == np.arange(n)).all()
    # ... so kt-kernel's global top-N is COPE's fixed nonuniform residency at every total.
    for total in (1, 100, 1782, 3338, n - 1):
        top = np.zeros(n, dtype=bool)
        top[np.argpartition(-flat.astype(np.float32), total - 1)[:total]] = True
        chosen = resident_mask(pop, allocate_slots(pop, total, Allocation.NONUNIFORM))
        assert (top.reshape(pop.shape) == chosen).all(), total


def test_counts_too_large_for_float32_are_written_as_ranks():
    pop = np.array([[10**6, 5, 5], [10**6, 5, 0]], dtype=np.int64)  # 10^6 x 6 + 6 is still float32-exact
    big = np.full((48, 128), 3000, dtype=np.int64)  # 3000 x 6144 > 2^24
    big[0, 0] = 3001
    written = strict_counts(big)
    assert written.max() == big.size and written[0, 0] == big.size and len(np.unique(written)) == big.size
    assert (strict_counts(pop) == pop * 6 + 6 - cope_rank(pop)).all()


def test_the_weight_path_names_the_gguf_file_or_a_split_models_folder():
    model = get_model("qwen3-30b-a3b")
    plan = kt_plan(model, 24)
    candidate = parse_candidate_id("fixed.parallel.nonuniform")
    x = export_candidate(candidate, model, plan, runtime="sglang-kt", context=8192, threads=8,
                         model_path="/models/qwen/Qwen3-30B-A3B-Q4_K_M.gguf")
    assert flag(x.argv, "--kt-weight-path") == "/models/qwen/Qwen3-30B-A3B-Q4_K_M.gguf"
    split = export_candidate(candidate, model, plan, runtime="sglang-kt", context=8192, threads=8,
                             model_path="/models/big/Qwen3-30B-A3B-BF16-00001-of-00002.gguf")
    assert flag(split.argv, "--kt-weight-path") == "/models/big"
    assert any("every *.gguf there in sorted order" in n for n in split.notes)
    assert shlex.split(x.display())[-1] == x.argv[-1]


def test_sglang_refuses_what_its_pool_cannot_hold_at_all():
    model = get_model("qwen3-30b-a3b")
    plan = kt_plan(model, 6)  # 6 GiB: SGLang's reserve and the BF16 non-expert weights leave nothing
    candidate = parse_candidate_id("all-cpu")
    support = SGLANG_KT.support(candidate, placement_of(candidate, model, plan.memory, plan.popularity), model, plan)
    assert not support.runs and "do not fit its static pool" in support.note
    sg = sglang_memory(model, checkpoint_of_model(model), budget_bytes=6 * GIB, context_tokens=8192)
    assert not sg.fits and sg.gpu_experts == 0
    assert replace(sg, budget_bytes=24 * GIB, card_bytes=24 * GIB).fits


def sglang_pools(sg, n_gpu: int, free_at_start: float, argv) -> tuple[float, float]:
    """(KV pool tokens, Mamba states) SGLang gives a launch with `argv` when `free_at_start`
    bytes are free after the CUDA context, as model_runner_kv_cache_mixin.py at 04653fa
    computes them: rest = free after loading - free at start x (1 - mem_fraction_static); an
    explicit --max-mamba-cache-size takes its states from rest, the ratio's share otherwise;
    the tokens are the rest over a cell, capped by --max-total-tokens."""
    argv = list(argv)
    fraction = float(flag(argv, "--mem-fraction-static"))
    weights = sg.non_expert_bytes + n_gpu * sg.expert_bytes + sg.staging_bytes
    rest = (free_at_start - weights) - free_at_start * (1 - fraction)
    ratio = 0.9  # mamba_full_memory_ratio
    cell = sg.kv_bytes_per_token / ((1 + ratio) if sg.mamba_state_bytes else 1)
    states = 0.0
    if sg.mamba_state_bytes:
        if "--max-mamba-cache-size" in argv:
            states = int(flag(argv, "--max-mamba-cache-size"))
        else:
            states = rest * ratio / (1 + ratio) // sg.mamba_state_bytes
        rest -= states * sg.mamba_state_bytes
    tokens = rest // cell
    if "--max-total-tokens" in argv:
        tokens = min(tokens, int(flag(argv, "--max-total-tokens")))
    return tokens, states


@pytest.mark.parametrize("model_id, budget_gib", [("qwen3-30b-a3b", 24), ("qwen3-30b-a3b", 12),
                                                   ("qwen3-next-80b-a3b", 24)])
def test_the_budget_holds_whatever_is_free_at_start(model_id, budget_gib):
    """Issue 46: 1.1 GiB in use elsewhere stopped the command ("Not enough memory"), and a card
    with more free than the budget handed SGLang the difference. With the plan's margin for
    other processes and the caps, SGLang's own arithmetic keeps the context's pool at the
    least free memory the export names, and takes no more than the plan on a card whose
    other 12 GiB are free too."""
    model = get_model(model_id)
    plan = kt_plan(model, budget_gib, card_gib=24)
    x = export_candidate(parse_candidate_id("fixed.parallel.nonuniform"), model, plan, runtime="sglang-kt",
                         model_path="/m/q.gguf", context=8192, threads=8)
    sg = kt_memory(model, plan)
    n_gpu = asked_gpu_experts(x.argv, model)
    needed = sglang_pools(sg, n_gpu, sg.free_bytes, x.argv)
    # At the least it names: the context's tokens fit (and the Mamba states of a request).
    assert needed[0] >= 8192 and needed[1] >= (3 if sg.mamba_state_bytes else 0)
    # 1.1 GiB of the 24 GiB card in use elsewhere, the case: still starts.
    busy = sglang_pools(sg, n_gpu, 24 * GIB - CUDA_CONTEXT_BYTES - 1.1 * GIB, x.argv)
    assert busy[0] >= 8192
    # The whole card free: the pools stay the plan's, not what 24 GiB would give.
    whole = sglang_pools(sg, n_gpu, 24 * GIB - CUDA_CONTEXT_BYTES, x.argv)
    assert whole == (sg.max_total_tokens(n_gpu), sg.max_mamba_cache_size(n_gpu) if sg.mamba_state_bytes else 0)
    if budget_gib < 24:  # without the caps SGLang would have taken the other half of the card
        uncapped = [a for a in x.argv]
        for name in ("--max-total-tokens", "--max-mamba-cache-size"):
            if name in uncapped:
                i = uncapped.index(name)
                del uncapped[i:i + 2]
        assert sglang_pools(sg, n_gpu, 24 * GIB - CUDA_CONTEXT_BYTES, uncapped)[0] > 2 * whole[0]
    used = (sg.non_expert_bytes + n_gpu * sg.expert_bytes + sg.staging_bytes + whole[0] * sg.kv_bytes_per_token
            / ((1 + 0.9) if sg.mamba_state_bytes else 1) + whole[1] * sg.mamba_state_bytes)
    assert used <= sg.static_bytes
