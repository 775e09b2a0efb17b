"""Tensor overrides as llama.cpp reads them: `-ot` values split into (pattern, buffer) items,
`--n-cpu-moe N` written as its overrides, the patterns checked to match in bounded time, the
buffer names llama.cpp takes, and the expert tensors the patterns are matched against.

engine/llamacpp/llama_args.py reads commands with these; the placement and device split
modules ask them which buffer is a GPU's.
"""

from __future__ import annotations

import re
from typing import Sequence

from engine.core.errors import CopeInputError
from engine.llamacpp.ecma_regex import RegexError, compile_pattern
from engine.llamacpp.llamacpp_flags import EXPS_REGEX_TAIL
from engine.models.model import ModelSpec

WHERE = "the llama.cpp command"
LLAMA_MAX_LAYERS = 512  # src/llama-hparams.h: no model has more blocks, so --n-cpu-moe N > 512 is 512
MAX_OVERRIDE_STATES = 8_000  # every -ot pattern's matcher together (engine/llamacpp/ecma_regex.py)

# llama.cpp's buffer-type names (ggml_backend_buft_name), which -ot looks up exactly, case
# included (common/arg.cpp, parse_tensor_buffer_overrides): the CPU's ("CPU", and its
# extra types, "CPU_REPACK", ...), each GPU device's (the backend's name and the device's
# index: CUDA0, ROCm0, Vulkan0, ...) and a GPU backend's pinned host memory (CUDA_Host).
GPU_BUFFER = re.compile(r"(CUDA|ROCm|MUSA|Vulkan|SYCL|CANN|MTL)(\d+)|Metal")
HOST_BUFFER = re.compile(r"(CUDA|ROCm|MUSA|Vulkan|SYCL|CANN)_Host")
# The environment variables that choose which GPUs a backend sees.
VISIBLE_DEVICES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GGML_VK_VISIBLE_DEVICES")


def is_gpu_buffer(buffer: str) -> bool:
    """Whether an -ot buffer name is a GPU's memory (else the host's)."""
    return GPU_BUFFER.fullmatch(buffer) is not None


def buffer_problem(overrides: Sequence[tuple[str, str, str]]) -> str | None:
    """Why llama.cpp would refuse a command's -ot buffers at start-up (None: it takes them)."""
    for pattern, buffer, flag in overrides:
        if buffer.startswith("CPU") or is_gpu_buffer(buffer) or HOST_BUFFER.fullmatch(buffer):
            continue
        return (f"would not run: llama.cpp stops at start-up with 'unknown buffer type' for {flag} "
                f"{pattern}={buffer}: buffer names are exact, case included (CPU, CUDA0, ...)")
    return None


def n_cpu_moe_overrides(n: int, flag: str) -> list[tuple[str, str, str]]:
    """--n-cpu-moe N as llama.cpp writes it (common/arg.cpp): one override per block i < N, in order."""
    if n < 0:
        raise CopeInputError(f"{WHERE}: {flag} must be >= 0, got {n}")
    return [(rf"blk\.{b}{EXPS_REGEX_TAIL}", "CPU", flag) for b in range(min(n, LLAMA_MAX_LAYERS))]


def parse_overrides(value: str, flag: str, tool: str, notes: list[str]) -> list[tuple[str, str, str]]:
    """An -ot value's (pattern, buffer, flag) items, split as `tool` splits them."""
    if tool == "llama-bench":
        # llama-bench.cpp: ',' separates test configurations, ';' the overrides of one.
        groups = value.split(",")
        if len(groups) > 1:
            notes.append(f"{flag} gives {len(groups)} llama-bench configurations: the first is estimated")
        items = [x for x in groups[0].split(";") if x]
    else:
        items = [x for x in value.split(",") if x]  # arg.cpp parse_tensor_buffer_overrides
    out = []
    for item in items:
        if "=" not in item:
            raise CopeInputError(f"{WHERE}: {flag} {item!r} is not <pattern>=<buffer>")
        pattern, buffer = item.split("=", 1)  # llama.cpp: override.find('='), the first one
        out.append((pattern, buffer, flag))
    return out


def check_patterns(overrides: Sequence[tuple[str, str, str]]) -> None:
    """Every -ot pattern compiles in engine/llamacpp/ecma_regex.py, and together they stay small
    enough to match in bounded time."""
    states = 0
    for pattern, _, flag in overrides:
        shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
        try:
            states += compile_pattern(pattern).size
        except RegexError as exc:
            raise CopeInputError(f"{WHERE}: {flag} pattern {shown!r} is not a regular expression COPE can match: {exc}") from None
        if states > MAX_OVERRIDE_STATES:
            raise CopeInputError(f"{WHERE}: the -ot patterns are too complex together (over {MAX_OVERRIDE_STATES} "
                                 "matcher states); simplify them")


def expert_tensor_names(model: ModelSpec, block: int) -> list[str]:
    kinds = ("gate", "up", "down") if model.gated_experts else ("up", "down")
    return [f"blk.{block}.ffn_{kind}_exps.weight" for kind in kinds]
