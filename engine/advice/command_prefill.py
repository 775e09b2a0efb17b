"""The prompt-processing test of a pasted llama-bench command, priced (`cope estimate`).

llama-bench runs a pp test of -p tokens (default 512; 0: none) from an empty cache (or
depth -d) in micro-batches of -ub (default 512; at most -b), besides its tg test. Its
placement is the one the decode estimate prices; the prefill rules are stock llama.cpp's
(only the routed experts copied), or ik_llama.cpp's when the command repacks CPU experts
(-rtr, an ik_llama.cpp flag: those experts then stay on the CPU). The compute buffer of
the command's -ub is in the placement's VRAM (engine/advice/command_estimate.py: with_compute_buffer).
"""

from __future__ import annotations

from dataclasses import replace

from engine.cost.cost_models import analytic_model
from engine.cost.prefill_cost import DEFAULT_BATCH, DEFAULT_UBATCH, IK_LLAMA, LLAMA_CPP, PrefillCost, PrefillModel
from engine.cost.request import AdviseRequest
from engine.llamacpp.llama_args import LlamaCommand
from engine.llamacpp.llama_placement import LlamaPlacement, PlacementMemory

LLAMA_BENCH_N_PROMPT = 512  # tools/llama-bench/llama-bench.cpp: the default -p


def bench_prompt_tokens(command: LlamaCommand) -> int:
    """The tokens of the command's pp test (0: none, or not llama-bench)."""
    if command.tool != "llama-bench":
        return 0
    return LLAMA_BENCH_N_PROMPT if command.n_prompt is None else command.n_prompt


def price_prefill(request: AdviseRequest, placement: LlamaPlacement, memory: PlacementMemory | None,
                  command: LlamaCommand, prompt_tokens: int, *, has_gpu: bool) -> PrefillCost | None:
    """The pp test of `command` (None: no test)."""
    if prompt_tokens <= 0:
        return None
    analytic = analytic_model(request)
    model = PrefillModel(request.model, request.quant, request.platform, popularity=request.profile.popularity(),
                         threads=command.threads_batch or request.threads,
                         gpu_bytes_per_s=analytic.gpu_stream_bytes_per_s, h2d_bytes_per_s=analytic.h2d_bytes_per_s,
                         cpu_bytes_per_s=analytic.cpu_stream_bytes_per_s(command.threads_batch or request.threads))
    runtime = replace(IK_LLAMA, repacked=True) if command.repack else LLAMA_CPP
    batch = command.batch or DEFAULT_BATCH
    ubatch = command.ubatch or DEFAULT_UBATCH
    fits = memory is None or memory.fits_vram  # `memory` holds the -ub's compute buffer (with_compute_buffer)
    return model.prompt(placement, prompt_tokens, ubatch=ubatch, batch=batch, depth=command.n_depth,
                        runtime=runtime, has_gpu=has_gpu, fits=fits)
