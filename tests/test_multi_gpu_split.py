"""Two or more cards in llama.cpp's terms (issue 33, parts 2-4, 6): the layer split's
rounding, the devices a command uses, per-card memory, `cope estimate` pricing two-card
commands (and refusing what it cannot price), `cope advise` exporting -ts and per-card
-ot buffers, and an AMD card's ROCm or Vulkan command."""

from __future__ import annotations

import shlex
from dataclasses import replace

import numpy as np
import pytest

from cope_tui.options import PlanChoices
from cope_tui.service.advice import estimate_command, plan
from engine.cost.multi_gpu import handover_s
from engine.hardware.memory import GIB
from engine.hardware.presets import get_gpu_preset
from engine.llamacpp.device_split import NotPriced, command_devices, layer_devices
from engine.llamacpp.llama_args import parse_llama_command
from engine.runtimes.export import export_for

TWO = PlanChoices(model="qwen3-235b-a22b", tokens=40, cpu="epyc-9355", gpu="2x rtx-3090", threads=32,
                  context=8192)


def test_layers_split_as_load_tensors_rounds():
    # 94 blocks, all offloaded: 95 layers with the output; equal shares put il/95 < 0.5 on the first.
    blocks, out = layer_devices(94, 99, (1.0, 1.0))
    assert (blocks[:48] == 0).all() and (blocks[48:] == 1).all() and out == 1
    # -ts 3,1 over 10 blocks + output: points 0.75, 1: il/11 < 0.75 -> il <= 8
    blocks, out = layer_devices(10, 11, (3.0, 1.0))
    assert blocks.tolist() == [0] * 9 + [1] and out == 1
    # -ngl 5 of 10 blocks: blocks 0-5 on the CPU (i_gpu_start = 6), the output's layer offloaded
    blocks, out = layer_devices(10, 5, (1.0, 1.0))
    assert blocks.tolist() == [-1] * 6 + [0, 0, 0, 1] and out == 1
    # whole-block counts as proportions give exactly those counts (the same float division)
    for counts in ((60, 35), (1, 94), (47, 0, 48), (13, 29, 53)):
        blocks, out = layer_devices(94, 99, counts)
        got = [int((blocks == d).sum()) + (out == d) for d in range(len(counts))]
        assert got == list(counts), counts


def _devices(line: str, gpu: str = "2x rtx-3090"):
    return command_devices(parse_llama_command(shlex.split(line)), get_gpu_preset(gpu))


def test_devices_follow_dev_visible_devices_and_split_mode():
    d = _devices("llama-server -m m.gguf -ts 3,1")
    assert d.names == ("CUDA0", "CUDA1") and d.proportions == (3.0, 1.0) and d.how == "--tensor-split 3,1"
    assert _devices("llama-server -m m.gguf -dev CUDA1,CUDA0 -ts 1/2").names == ("CUDA1", "CUDA0")
    d = _devices("CUDA_VISIBLE_DEVICES=1 llama-server -m m.gguf")
    assert d.names == ("CUDA0",) and d.visible == ("CUDA0",)
    assert _devices("llama-server -m m.gguf -sm none -mg 1").names == ("CUDA1",)
    assert _devices("llama-bench -m m.gguf -ts 2/1,1/1").proportions == (2.0, 1.0)  # its first configuration
    free = _devices("llama-server -m m.gguf")
    assert free.proportions == (24.0 * GIB, 24.0 * GIB) and "free memory" in free.how
    assert _devices("llama-server -m m.gguf -ts 1,1", "rx-7900-xtx").names == ("ROCm0",)
    for line, says in (("llama-server -m m.gguf -sm row", "not modelled: --split-mode row"),
                       ("llama-server -m m.gguf -ngl 99 -ot exps=CUDA2", "'unknown buffer type' for -ot exps=CUDA2"),
                       ("llama-server -m m.gguf -dev CUDA3", "invalid device CUDA3"),
                       ("llama-server -m m.gguf -sm none -mg 2", "--main-gpu 2"),
                       ("CUDA_VISIBLE_DEVICES=GPU-abc llama-server -m m.gguf", "not UUIDs")):
        with pytest.raises(NotPriced) as err:
            _devices(line)
        assert says in str(err.value), line
    with pytest.raises(NotPriced, match="ROCm devices are ROCm0"):
        _devices("llama-server -m m.gguf -ngl 99 -ot exps=CUDA0", "rx-7900-xtx")


def priced(line: str, choices: PlanChoices = TWO):  # type: ignore[no-untyped-def]
    return estimate_command(plan(choices), parse_llama_command(shlex.split(line)))


CPU_FROM_14 = r"-ot 'blk\.(1[4-9]|[2-9][0-9])\.ffn_.*_exps=CPU'"


def test_a_two_card_command_is_priced_with_hand_overs_and_checked_per_card():
    est = priced(f"llama-server -m m.gguf -ngl 99 -ts 1,1 {CPU_FROM_14} -t 32 -c 8192")
    assert est.yours.runs, est.yours.refusal
    assert "layers split over 2 cards by --tensor-split 1,1: CUDA0 blocks 0-47, CUDA1 blocks 48-93" in est.yours.detail
    # block 47's experts are on the CPU: the work reaches CUDA1 from the CPU (priced as the CPU's hand-overs)
    assert "0 hand-over(s) between cards a token" in est.yours.detail
    # experts of blocks 7-13 moved to CUDA1 while their blocks stay on CUDA0: two hand-overs each
    cross = priced(r"llama-server -m m.gguf -ngl 99 -ot 'blk\.(7|8|9|10|11|12|13)\.ffn_.*_exps=CUDA1' "
                   f"{CPU_FROM_14} -t 32 -c 8192")
    assert cross.yours.runs and "14 hand-over(s) between cards a token" in cross.yours.detail
    assert cross.yours.cost.sync_s - est.yours.cost.sync_s == pytest.approx(14 * handover_s(
        est.request.model.hidden_size, *get_gpu_preset("2x rtx-3090").cards))
    assert cross.yours.tpot_s > est.yours.tpot_s


def test_one_card_overflowing_is_would_not_run_with_its_arithmetic():
    est = priced(r"llama-server -m m.gguf -ngl 99 -ts 1,1 -ot 'blk\.(2[4-9]|[3-9][0-9])\.ffn_.*_exps=CPU' -t 32 -c 8192")
    assert not est.yours.runs and est.yours.verdict == "would_not_run"
    assert est.yours.refusal.startswith("would not run: CUDA0 (NVIDIA GeForce RTX 3090) needs ")
    assert est.yours.refusal.endswith(" GiB of 24.0 GiB (weights, KV cache, context and buffers)")
    # giving CUDA1 the later experts' blocks balances it: each card under its 24 GiB
    ok = priced(r"llama-server -m m.gguf -ngl 99 -ts 1,1 -ot 'blk\.(1[2-9]|2[0-3]|[3-9][0-9])\.ffn_.*_exps=CPU' "
                r"-ot 'blk\.(6|7|8|9|10|11)\.ffn_.*_exps=CUDA1' -t 32 -c 8192")
    assert ok.yours.runs, ok.yours.refusal


def test_row_split_stays_refused_with_its_reason():
    est = priced("llama-server -m m.gguf -ngl 99 -sm row -ts 1,1 --cpu-moe")
    assert est.yours.verdict == "not_priced" and "not modelled: --split-mode row" in est.yours.refusal


def test_advise_over_two_cards_exports_ts_and_a_buffer_a_card_that_prices_back():
    advice = plan(TWO)
    rec = advice.rec
    assert any("2 cards (2x NVIDIA GeForce RTX 3090, llama.cpp CUDA)" in n for n in rec.notes)
    export = export_for(rec, rec.estimate_of("partition-first"), model_path="m.gguf", binary="llama-server")
    argv = list(export.argv)
    assert "-ts" in argv
    buffers = [a.rsplit("=", 1)[1] for a in argv if a.startswith("blk") and "=" in a]
    assert {"CUDA0", "CUDA1"} <= set(buffers) and ("--n-cpu-moe" in argv or "CPU" in buffers)
    counts = [int(x) for x in argv[argv.index("-ts") + 1].split(",")]
    assert sum(counts) == rec.request.model.n_blocks + 1
    back = estimate_command(advice, parse_llama_command(argv))
    assert back.yours.runs, back.yours.refusal
    assert back.yours.tpot_s == pytest.approx(rec.estimate_of("partition-first").tpot_s, rel=0.02)


def test_two_cards_beat_one_of_them_and_hold_more_experts():
    two, one = plan(TWO).rec, plan(replace(TWO, gpu="rtx-3090")).rec
    assert two.memory.slots(staging=False) > 2 * one.memory.slots(staging=False) * 0.9
    assert two.estimate_of("partition-first").tpot_s < one.estimate_of("partition-first").tpot_s


def test_an_amd_card_exports_its_backend_and_vulkan_prices_without_graphs():
    choices = PlanChoices(model="qwen3-30b-a3b", tokens=40, cpu="desktop-ddr5", gpu="rx-7900-xtx", threads=8)
    for gpu, buffer in (("rx-7900-xtx", "ROCm0"), ("rx-7900-xtx@vulkan", "Vulkan0")):
        rec = plan(replace(choices, gpu=gpu)).rec
        argv = list(export_for(rec, rec.best, model_path="m.gguf", binary="llama-server").argv)
        assert argv[argv.index("-dev") + 1] == buffer, argv
    rocm = plan(replace(choices, gpu="rx-7900-xtx")).rec
    vulkan = plan(replace(choices, gpu="rx-7900-xtx@vulkan")).rec
    pid = rocm.best.candidate.id
    assert vulkan.estimate_of(pid).tpot_s > rocm.estimate_of(pid).tpot_s  # no graphs: each kernel launched
    two = plan(replace(choices, gpu="2x rx-7900-xtx@vulkan", model="qwen3-235b-a22b", cpu="epyc-9355",
                       context=8192)).rec
    argv = export_for(two, two.estimate_of("partition-first"), model_path="m.gguf", binary="llama-server").argv
    assert any(a.endswith("=Vulkan1") for a in argv) and not any(a.endswith("=CUDA0") for a in argv)


def test_the_published_two_gpu_rows_are_priced_as_checks_and_never_fitted():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.published import CSV, _checked, price_row, published_rows
    from bench.published_multi_gpu import MULTI_GPU_INDEXES, MULTI_GPU_ROWS
    from bench.published_rows import ROWS, SKIPPED

    if not CSV.is_file():
        pytest.skip(f"{CSV.name}: the shared calibration data is not beside this checkout")
    rows_csv = published_rows(CSV)
    priced = [price_row(row, _checked(rows_csv, row, "multi")) for row in MULTI_GPU_ROWS]
    assert all(p.ratio is not None for p in priced), [p.problem for p in priced]
    assert all(0.33 < p.ratio < 3 for p in priced), [p.ratio for p in priced]
    # checks only: not among the rows the constants are fitted on (bench/fit_published.py prices ROWS)
    assert MULTI_GPU_INDEXES <= set(SKIPPED) and not MULTI_GPU_INDEXES & {r.index for r in ROWS}
