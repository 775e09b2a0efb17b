"""-ot over a block's other tensors (attention, norms, router) and over buffer names:
what llama.cpp does with them, priced and counted as it runs."""

from __future__ import annotations

import json
import shlex

import pytest

from cope_tui.cli import EXIT_OK, main
from cope_tui.options import PlanChoices
from cope_tui.service.advice import estimate_command, plan
from cope_tui.service.request import build_request
from engine.cost.analytic_cost import AnalyticCostModel
from engine.hardware.memory import RUNTIME_RESERVE_BYTES
from engine.llamacpp.llama_args import parse_llama_command
from engine.llamacpp.llama_placement import placement_cost, placement_memory, placement_of
from engine.models.block_tensors import ATTENTION_IN, ATTENTION_OUT, FFN, piece_of, shared_tensors
from engine.models.gguf_tensors import gguf_tensors

FAST = PlanChoices(tokens=40, cpu="desktop-ddr5", gpu="rtx-4060-ti-16gb", threads=8)


def _placed(line: str, request):  # type: ignore[no-untyped-def]
    return placement_of(parse_llama_command(shlex.split(line)), request.model)


def _cost(line: str, request):  # type: ignore[no-untyped-def]
    model = AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens)
    return placement_cost(request, model, _placed(line, request)), model


def test_every_block_tensor_belongs_to_one_piece_of_the_block_and_the_pieces_add_up_to_the_block():
    request = build_request(FAST)
    model, quant = request.model, request.quant
    assert piece_of("blk.3.attn_q.weight") == ATTENTION_IN and piece_of("blk.3.attn_norm.weight") == ATTENTION_IN
    assert piece_of("blk.3.attn_output.weight") == ATTENTION_OUT and piece_of("blk.3.ssm_out.weight") == ATTENTION_OUT
    assert piece_of("blk.3.ffn_gate_inp.weight") == FFN and piece_of("blk.3.ffn_up_shexp.weight") == FFN
    for block, tensors in enumerate(shared_tensors(model, quant)):
        assert sum(t.bytes for t in tensors) == pytest.approx(model.shared_layer_bytes(quant, block), rel=1e-12)
        assert not any("_exps." in t.name for t in tensors)
    names = {t.name for t in gguf_tensors(model)}
    assert {"blk.1.attn_q.weight", "blk.1.ffn_gate_inp.weight", "blk.1.ffn_up_exps.weight"} <= names


def test_a_block_regex_moves_its_attention_and_router_to_the_cpu_and_keeps_its_kv_cache_in_vram():
    request = build_request(FAST)
    every = _placed(r"llama-server -ngl 99 -ot 'blk\.1.*=CPU'", request)
    experts = _placed(r"llama-server -ngl 99 -ot 'blk\.1.*_exps=CPU'", request)
    # blk\.1 matches blocks 1 and 10-19: their experts go either way, the rest only with .*
    assert (every.expert_cpu_share == experts.expert_cpu_share).all() and experts.expert_cpu_share.sum() == 11
    assert not experts.moved_shared
    moved_blocks = {int(name.split(".")[1]) for name in every.moved_shared}
    assert moved_blocks == {1, *range(10, 20)}
    assert "blk.1.attn_q.weight" in every.moved_shared and "blk.12.ffn_gate_inp.weight" in every.moved_shared
    assert every.gpu_blocks.all()  # -ngl still offloads them: their KV cache stays on the GPU
    full, _ = _cost(r"llama-server -ngl 99 -ot 'blk\.1.*=CPU'", request)
    part, _ = _cost(r"llama-server -ngl 99 -ot 'blk\.1.*_exps=CPU'", request)
    # A moved block runs CPU (projections) -> GPU (attention over the cache) -> CPU (output
    # projection, router, experts): alone between offloaded blocks, four hand-overs where its
    # experts alone make two; in a run of moved blocks, two a block and one at each end.
    assert part.transitions == 2 * 11
    assert full.transitions == 4 + (2 * 10 + 2)
    one, _ = _cost(r"llama-server -ngl 99 -ot 'blk\.5\..*=CPU'", request)
    assert one.transitions == 4
    assert full.cpu_blocks_s > 0 == part.cpu_blocks_s and full.tpot_s > part.tpot_s
    mem_full = placement_memory(request, every, mapped=True)
    mem_part = placement_memory(request, experts, mapped=True)
    moved_bytes = sum(t.bytes for b in moved_blocks for t in shared_tensors(request.model, request.quant)[b])
    assert mem_part.vram_bytes - mem_full.vram_bytes == pytest.approx(moved_bytes, abs=2)
    assert mem_full.host_bytes - mem_part.host_bytes == pytest.approx(moved_bytes, abs=2)


def test_one_projection_moved_costs_its_bytes_on_the_cpu_two_hand_overs_and_a_share_of_the_block_overhead():
    request = build_request(FAST)
    base, model = _cost("llama-server -ngl 99", request)
    one, _ = _cost(r"llama-server -ngl 99 -ot 'blk\.5\.attn_output=CPU'", request)
    block5 = shared_tensors(request.model, request.quant)[5]
    nbytes = next(t.bytes for t in block5 if t.name == "blk.5.attn_output.weight")
    a, threads = model.a, request.threads
    # Of the block's four pieces (projections in, attention, projection out, FFN side) one
    # now runs on the CPU: a quarter of the block's fixed cost moves with it.
    by_hand = (nbytes / model.cpu_stream_bytes_per_s(threads) - nbytes / model.gpu_stream_bytes_per_s
               + (a.cpu_block_overhead_s - a.gpu_block_overhead_s) / 4 + 2 * a.sync_s / 2)
    assert one.transitions == base.transitions + 2
    assert one.tpot_s - base.tpot_s == pytest.approx(by_hand, rel=1e-9)


def test_everything_overridden_to_the_cpu_leaves_only_the_kv_cache_and_the_runtime_in_vram():
    request = build_request(FAST)
    placement = _placed("llama-server -ngl 99 -ot '.*=CPU'", request)
    assert not placement.output_on_gpu and (placement.expert_cpu_share == 1).all()
    memory = placement_memory(request, placement, mapped=True)
    kv = request.model.kv_cache_bytes(request.context_tokens) * request.kv_bytes_per_element / 2.0
    assert memory.vram_bytes == pytest.approx(kv + RUNTIME_RESERVE_BYTES, rel=1e-9)
    cpu_only = placement_memory(request, _placed("llama-server -ngl 0", request), mapped=True)
    assert memory.host_bytes == pytest.approx(cpu_only.host_bytes - kv, rel=1e-9)
    # Attention runs on the GPU over its cache, the rest (and the head) on the CPU: there
    # and back once a block.
    cost, _ = _cost("llama-server -ngl 99 -ot '.*=CPU'", request)
    assert cost.transitions == 2 * request.model.n_blocks and cost.gpu_experts_s == 0 < cost.gpu_blocks_s


def test_tensors_a_cpu_block_puts_on_the_gpu_move_there():
    request = build_request(FAST)
    placement = _placed(r"llama-server -ngl 0 -ot 'attn_.*=CUDA0'", request)
    assert not placement.gpu_blocks.any() and len(placement.moved_shared) > 0 and not placement.cpu_only
    memory = placement_memory(request, placement, mapped=True)
    attention = sum(t.bytes for block in shared_tensors(request.model, request.quant) for t in block
                    if t.name.split(".")[2].startswith("attn_"))
    assert memory.vram_bytes == pytest.approx(attention + RUNTIME_RESERVE_BYTES, rel=1e-9)


def test_an_override_that_matches_no_tensor_is_noted_and_one_on_attention_is_not():
    request = build_request(FAST)
    assert _placed(r"llama-server -ngl 99 -ot 'attn_q=CPU'", request).notes == ()
    nothing = _placed(r"llama-server -ngl 99 -ot 'no_such_tensor=CPU'", request)
    assert len(nothing.notes) == 1 and "no_such_tensor=CPU" in nothing.notes[0]


def _estimate(line: str):  # type: ignore[no-untyped-def]
    return estimate_command(plan(FAST), parse_llama_command(shlex.split(line)))


def test_a_buffer_name_llama_cpp_does_not_have_would_not_run(capsys):
    for buffer in ("cpu", "cuda0", "GPU"):
        est = _estimate(f"llama-server -m q.gguf -ngl 99 -ot exps={buffer}")
        assert not est.yours.runs and est.yours.verdict == "would_not_run"
        assert f"exps={buffer}" in est.yours.refusal and "unknown buffer type" in est.yours.refusal
    for line in ("llama-server -m q.gguf -ngl 99 -ot exps=CPU", "llama-server -m q.gguf -ngl 99 -ot exps=CUDA_Host",
                 "llama-server -m q.gguf -ngl 99 -ot blk\\.1\\.ffn_up_exps=CUDA0,exps=CPU"):
        assert _estimate(line).yours.runs, line
    words = ["estimate", "--json", "--model", "qwen3-30b-a3b", "--cpu", "desktop-ddr5", "--gpu", "rtx-4060-ti-16gb",
             "--tokens", "40", "--", "llama-server", "-m", "q.gguf", "-ngl", "99", "-ot", "exps=cpu"]
    assert main(words) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["yours"]["runs"] is False and "unknown buffer type" in doc["yours"]["refusal"]


def test_a_second_gpu_named_or_made_visible_on_a_one_gpu_plan():
    # a card the plan does not have: llama.cpp stops at its unknown buffer
    est = _estimate("llama-server -m q.gguf -ngl 99 -ot exps=CUDA1")
    assert est.yours.verdict == "would_not_run" and "'unknown buffer type' for -ot exps=CUDA1" in est.yours.refusal
    # the CUDA runtime ignores ordinals past its devices; HIP's variable is not a CUDA build's
    one = _estimate("llama-server -m q.gguf -ngl 99").yours.tpot_s
    for line in ("CUDA_VISIBLE_DEVICES=0,1 llama-server -m q.gguf -ngl 99",
                 "env HIP_VISIBLE_DEVICES=0,2 llama-server -m q.gguf -ngl 99"):
        assert _estimate(line).yours.tpot_s == one, line
    assert _estimate("CUDA_VISIBLE_DEVICES=1 llama-server -m q.gguf -ngl 99 --cpu-moe").yours.runs
