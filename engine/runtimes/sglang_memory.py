"""SGLang's GPU memory for a kt-kernel launch, counted the way SGLang counts it.

SGLang does not place weights by llama.cpp's arithmetic: it builds the GPU side from
`--model-path`'s Hugging Face checkpoint, in the checkpoint's own dtype or quantization,
and sizes its pools by `--mem-fraction-static`. As read in kvcache-ai/sglang at commit
04653fa88f5ce4ea83632c4ad436343db6bc8324:

- python/sglang/srt/server_args.py `_handle_gpu_memory_settings`: the card's memory
  (utils/common.py get_nvgpu_memory_capacity: nvidia-smi's memory.total, MiB) picks
  chunked_prefill_size and cuda_graph_max_bs (below 20 GiB 2048 and 8, below 35 GiB 2048
  and 24, below 60 GiB 4096 and 32, below 160 GiB 8192 and 256, else 16384 and 512; one
  GPU), then reserved_mem = 512 + max(chunked_prefill_size, 2048) x 1.5 +
  cuda_graph_max_bs x 2 + tp x pp / 8 x 1024 MiB (at least 10 GiB on a card above
  60 GiB) for activations and CUDA graphs, and the default
  mem_fraction_static = round((memory - reserved_mem) / memory, 3);
- python/sglang/srt/model_executor/model_runner.py `init_torch_distributed` measures the
  memory free once torch and the CUDA context are up (total_gpu_memory), and
  model_runner_kv_cache_mixin.py `profile_max_num_token` gives the KV pool what the
  loaded weights leave of mem_fraction_static x that: rest = free_after_loading -
  total_gpu_memory x (1 - mem_fraction_static), tokens = rest // cell_size (2 bytes an
  element: kv_cache_dtype "auto" is the model's dtype; MLA caches kv_lora_rank +
  qk_rope_head_dim a layer); "Not enough memory" when no token fits. Hybrid
  linear-attention models first give the Mamba states ratio / (1 + ratio) of it
  (`handle_max_mamba_cache`, mamba_full_memory_ratio 0.9); hybrid sliding-window models
  keep swa_full_tokens_ratio (0.8) sliding tokens per full one
  (`set_num_tokens_hybrid_swa`). `init_memory_pool` then allocates the request table,
  max_running_requests (2048 to 4096 unless set) x (context + 4) int32, outside the pool;
- python/sglang/srt/configs/model_config.py `_get_and_verify_dtype`: dtype "auto" is the
  config.json's `dtype`/`torch_dtype`, a float32 (or missing) one loaded as float16: two
  bytes a weight either way;
- python/sglang/srt/layers/moe/kt_ep_wrapper.py `KTEPWrapperMethod.create_weights`: each
  MoE layer's GPU experts are created by the checkpoint's own MoE method for as many
  experts as the layer's mask holds (`num_gpu_experts`), plus one staging buffer shared
  by all layers, chunked_prefill_size x hidden_size in the model's dtype;
- python/sglang/srt/layers/quantization/mxfp4.py `create_weights`: MXFP4 experts are
  uint8 pairs of 4-bit weights plus a uint8 scale per 32 weights (4.25 bits a weight).

COPE emits `--mem-fraction-static`, `--chunked-prefill-size` and `--cuda-graph-max-bs` so
that the server reserves what this plan counted, and asks kt-kernel for no more GPU
experts than the static pool holds beside the non-expert weights and the KV cache of the
context. The CUDA context (what is already in use when SGLang measures the free memory)
is assumed, not measured.

The budget holds whatever is free at start. The fraction is of the memory free then, which
COPE cannot know when it writes the command, so it bounds both sides instead of guessing:
- from below, the plan leaves COPE's safety margin of the budget (engine/hardware/memory.py)
  to other processes (a desktop's display, another program): the fraction is of the budget
  less that and the CUDA context, so the command starts with that much in use elsewhere;
  with less free than `free_bytes`, SGLang stops with "Not enough memory", and the export
  says how much must be free;
- from above, `--max-total-tokens` (init_memory_pool: the KV pool is the smaller of what
  memory allows and it) and, for hybrid linear-attention models, `--max-mamba-cache-size`
  (handle_max_mamba_cache: an explicit count replaces the ratio's share) cap the pools at
  the plan's, so a card with more free than planned does not hand SGLang the difference.
A fraction of the card's total memory would hold neither side: SGLang multiplies it by the
free memory, so anything in use elsewhere shrinks the pool below the plan (issue 46).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from engine.core.errors import CopeInputError
from engine.hardware.memory import SAFETY_MARGIN_FRACTION
from engine.models.model import KV_CACHE_BYTES_PER_ELEMENT, ModelSpec

MIB = 2**20
GIB = 2**30
# In use before SGLang measures the free memory: the CUDA context, torch and NCCL set up.
# Assumed, not measured.
CUDA_CONTEXT_BYTES = 512 * MIB
# Left unplanned in the static pool, for what is allocated before SGLang measures the
# memory the weights left (kernel workspaces, allocator rounding): the KV pool gets it.
# Assumed, not measured.
HEADROOM_FRACTION = 0.02
# server_args.py defaults.
TP_SIZE = PP_SIZE = 1
MAMBA_FULL_MEMORY_RATIO = 0.9
# model_runner_kv_cache_mixin.py: with the radix cache on (the default), at most
# max_mamba_cache_size // 3 requests run at once.
MAMBA_STATES_PER_REQUEST = 3
SWA_FULL_TOKENS_RATIO = 0.8
# model_runner_kv_cache_mixin.py init_memory_pool: max_running_requests is clamped to
# 2048..4096 when not given; each request row holds the context plus 4 int32 slots.
MAX_RUNNING_REQUESTS = 4096
REQ_TABLE_EXTRA_TOKENS = 4
REQ_TABLE_BYTES_PER_TOKEN = 4
# SGLang's own dtype names, config.json's spellings.
TWO_BYTE_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
                   "half": "float16"}
FLOAT32_DTYPES = ("float32", "fp32", "float")
# Quantizations whose GPU experts COPE sizes; others are counted as two bytes a weight.
FP8 = "fp8"
MXFP4 = "mxfp4"
FP8_BLOCK = 128  # DeepSeek-V3's weight_block_size [128, 128], a float32 scale each


@dataclass(frozen=True)
class Checkpoint:
    """What `--model-path` holds for SGLang's GPU side: the dtype SGLang loads the plain
    weights in, and the quantization of the experts (config.json `quantization_config`'s
    quant_method), with where that was read."""

    dtype: str  # "bfloat16" | "float16"
    quant: str  # "" (plain floats) | "fp8" | "mxfp4" | another quant_method, sized as two bytes
    source: str  # where it was read, or why it was assumed
    assumed: bool = False

    @property
    def label(self) -> str:
        """How a person reads the experts' format: "BF16", "FP8 (block 128x128)", "MXFP4"."""
        if self.quant == FP8:
            return f"FP8 (block {FP8_BLOCK}x{FP8_BLOCK})"
        if self.quant == MXFP4:
            return "MXFP4"
        short = "BF16" if self.dtype == "bfloat16" else "FP16"
        return short if not self.quant else f"{short} (quantization {self.quant} not sized: an upper bound)"

    def expert_bytes(self, model: ModelSpec) -> int:
        """One routed expert on the GPU, in the checkpoint's format."""
        params = model.expert_params()
        if self.quant == MXFP4:
            return params * 17 // 32  # 4 bits a weight and one byte per 32 weights
        if self.quant == FP8:
            n_matrices = 3 if model.gated_experts else 2
            blocks = math.ceil(model.hidden_size / FP8_BLOCK) * math.ceil(model.expert_ffn_size / FP8_BLOCK)
            return params + n_matrices * blocks * 4
        return params * 2

    def non_expert_bytes(self, model: ModelSpec) -> int:
        """Every weight but the routed experts, all on the GPU (SGLang keeps the embedding
        there too): two bytes a weight; an FP8 checkpoint's linear layers one byte (its
        embedding and head stay BF16). MXFP4 covers the experts only (gpt-oss keeps
        attention, router, embedding and head in BF16)."""
        params = model.non_expert_params()
        if self.quant != FP8:
            return params * 2
        tables = model.embedding_params() + (0 if model.tied_embeddings else model.head_params())
        return (params - tables) + tables * 2


def _dtype_of(value: object) -> tuple[str | None, str]:
    """SGLang's load dtype for a config.json dtype string, and what to say about it."""
    if not isinstance(value, str):
        return None, ""
    text = value.lower().removeprefix("torch.")
    if text in TWO_BYTE_DTYPES:
        return TWO_BYTE_DTYPES[text], ""
    if text in FLOAT32_DTYPES:
        return "float16", f"{value} checkpoint, which SGLang loads as float16"
    return None, ""


def checkpoint_from_config(data: dict, source: str) -> Checkpoint:
    """The Checkpoint a config.json (already parsed) describes; BF16 assumed when it names
    no dtype, and said so."""
    inner = data.get("text_config") if isinstance(data.get("text_config"), dict) else {}
    raw = data.get("dtype") or data.get("torch_dtype") or inner.get("dtype") or inner.get("torch_dtype")
    dtype, why = _dtype_of(raw)
    quant_cfg = data.get("quantization_config") or inner.get("quantization_config")
    quant = ""
    if isinstance(quant_cfg, dict) and isinstance(quant_cfg.get("quant_method"), str):
        quant = quant_cfg["quant_method"].lower()
    what = [f"torch_dtype {raw}" if raw is not None else "no torch_dtype"]
    if quant:
        what.append(f"quantization_config.quant_method {quant}")
    if why:
        what.append(why)
    if dtype is None:
        return Checkpoint("bfloat16", quant, f"{source}: {', '.join(what)}; BF16 assumed", assumed=True)
    return Checkpoint(dtype, quant, f"{source}: {', '.join(what)}")


def checkpoint_of_hf_model(hf_model: str | None) -> Checkpoint | None:
    """The Checkpoint of a local `--hf-model` (a folder holding config.json, or the file);
    None for a Hub repo id or a path that is not there (the catalog's fields apply)."""
    if not hf_model:
        return None
    path = os.path.expanduser(hf_model)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not (os.path.isfile(path) and path.endswith(".json")):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError) as exc:
        raise CopeInputError(f"cannot read the file: {exc}", path=path) from None
    except json.JSONDecodeError as exc:
        raise CopeInputError(f"not valid JSON: {exc.msg}", path=path, line=exc.lineno) from None
    if not isinstance(data, dict):
        raise CopeInputError("a config.json holds one JSON object", path=path)
    return checkpoint_from_config(data, f"the config.json of --hf-model ({path})")


def checkpoint_of_model(model: ModelSpec) -> Checkpoint:
    """The Checkpoint the model's own fields name (catalog or config.json), else BF16 assumed."""
    quant = model.checkpoint_quant or (MXFP4 if model.native_expert_type.upper() == "MXFP4" else "")
    if model.checkpoint_dtype:
        dtype, why = _dtype_of(model.checkpoint_dtype)
        where = f"{model.id}'s config.json: torch_dtype {model.checkpoint_dtype}" + (f" ({why})" if why else "")
        if quant:
            where += f", experts {quant}"
        if dtype is not None:
            return Checkpoint(dtype, quant, where)
    what = f"experts {quant}, other weights " if quant else ""
    return Checkpoint("bfloat16", quant, f"{model.id}: no torch_dtype known; {what}BF16 assumed "
                      "(name the checkpoint's folder with --hf-model to read its config.json)", assumed=True)


def sglang_tier(card_mib: float) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks for a card of `card_mib` (one GPU)."""
    if card_mib < 20 * 1024:
        return 2048, 8
    if card_mib < 35 * 1024:
        return 2048, 24
    if card_mib < 60 * 1024:
        return 4096, 32
    if card_mib < 160 * 1024:
        return 8192, 256
    return 16384, 512


def sglang_reserved_mib(card_mib: float, chunked_prefill_size: int, cuda_graph_max_bs: int) -> float:
    """server_args.py's reserved_mem (MiB): activations of a prefill chunk, CUDA graphs."""
    reserved = 512 + max(chunked_prefill_size, 2048) * 1.5 + cuda_graph_max_bs * 2 + TP_SIZE * PP_SIZE / 8 * 1024
    if card_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return reserved


def sglang_kv_bytes(model: ModelSpec, context_tokens: int) -> int:
    """The KV pool SGLang needs to hold one sequence of `context_tokens`."""
    return int(math.ceil(context_tokens * sglang_kv_bytes_per_token(model)))


def sglang_kv_bytes_per_token(model: ModelSpec) -> float:
    """The pool a token of context takes: every attention layer's cell (sliding layers at
    swa_full_tokens_ratio of the tokens) and, for hybrid linear-attention models, the share
    the Mamba states take from the same pool."""
    full = sliding = 0
    for block in model.attention_blocks:
        cell = model.attention.kv_elements_per_token() * KV_CACHE_BYTES_PER_ELEMENT
        if model.attention.slides(block):
            sliding += cell
        else:
            full += cell
    per_token = full + SWA_FULL_TOKENS_RATIO * sliding
    if model.linear_blocks:
        per_token *= 1 + MAMBA_FULL_MEMORY_RATIO
    return per_token


@dataclass(frozen=True)
class SglangMemory:
    """SGLang's arithmetic for one card, budget, model and context."""

    card_bytes: int  # the card's memory: SGLang's tiers
    budget_bytes: int  # what the plan may use of it (COPE's VRAM budget)
    cuda_context_bytes: int  # in use before SGLang measures the free memory (assumed)
    other_use_bytes: int  # left to other processes at start: COPE's safety margin of the budget
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    reserved_bytes: int  # SGLang's reserve for activations and CUDA graphs
    request_table_bytes: int  # allocated after the KV pool, outside it
    checkpoint: Checkpoint
    non_expert_bytes: int  # in the checkpoint's format
    expert_bytes: int  # one routed expert in the checkpoint's format
    kv_bytes: int  # the KV pool one sequence of the context needs
    kv_bytes_per_token: float  # the pool a token of context takes (Mamba states' share included)
    # one request's recurrent states (0: no linear-attention layers), as llama.cpp keeps them (F32):
    # SGLang's conv state is in the model's dtype, so this is an upper bound and the cap errs low
    mamba_state_bytes: int
    staging_bytes: int  # kt-kernel's shared staging buffer
    n_experts_total: int
    context_tokens: int

    @property
    def free_bytes(self) -> int:
        """What SGLang must find free at start (its total_gpu_memory) for this plan: the
        budget less the CUDA context and what other processes may hold."""
        return max(self.budget_bytes - self.cuda_context_bytes - self.other_use_bytes, 0)

    @property
    def mem_fraction_static(self) -> float:
        """The fraction COPE emits: the free memory less SGLang's reserve and the request
        table, rounded down to SGLang's three decimals; 0 when nothing is left."""
        free = self.free_bytes
        if free <= 0:
            return 0.0
        room = free - self.reserved_bytes - self.request_table_bytes
        return max(math.floor(room / free * 1000) / 1000, 0.0)

    @property
    def static_bytes(self) -> int:
        """Weights plus KV pool: mem_fraction_static of the free memory."""
        return int(self.mem_fraction_static * self.free_bytes)

    @property
    def headroom_bytes(self) -> int:
        """Kept free of planned weights in the static pool (HEADROOM_FRACTION)."""
        return int(self.static_bytes * HEADROOM_FRACTION)

    @property
    def expert_room_bytes(self) -> int:
        """What the static pool leaves for GPU experts (negative: not even none fit)."""
        return self.static_bytes - self.headroom_bytes - self.non_expert_bytes - self.kv_bytes - self.staging_bytes

    @property
    def fits(self) -> bool:
        """The non-expert weights and the context's KV cache fit, with no GPU expert."""
        return self.mem_fraction_static > 0 and self.expert_room_bytes >= 0

    @property
    def gpu_experts(self) -> int:
        """Routed experts the static pool holds on the GPU, at most every expert."""
        if not self.fits:
            return 0
        return min(self.expert_room_bytes // self.expert_bytes, self.n_experts_total)

    @property
    def all_fit(self) -> bool:
        """Every routed expert fits: plain SGLang, no kt-kernel needed (its staging buffer
        then is not allocated)."""
        room = self.expert_room_bytes + self.staging_bytes
        return self.mem_fraction_static > 0 and room >= self.n_experts_total * self.expert_bytes

    def kv_pool_bytes(self, n_gpu_experts: int) -> int:
        """What SGLang's KV pool gets with `n_gpu_experts` on the GPU: all the static pool
        leaves."""
        return self.static_bytes - self.non_expert_bytes - self.staging_bytes - n_gpu_experts * self.expert_bytes

    def max_total_tokens(self, n_gpu_experts: int) -> int:
        """The KV pool's tokens at the plan: SGLang's cap when more memory is free."""
        return int(self.kv_pool_bytes(n_gpu_experts) // self.kv_bytes_per_token)

    def max_mamba_cache_size(self, n_gpu_experts: int) -> int:
        """The Mamba states the plan's pool holds (0: no linear-attention layers)."""
        if not self.mamba_state_bytes:
            return 0
        share = self.kv_pool_bytes(n_gpu_experts) * MAMBA_FULL_MEMORY_RATIO / (1 + MAMBA_FULL_MEMORY_RATIO)
        return max(int(share // self.mamba_state_bytes), MAMBA_STATES_PER_REQUEST)

    def flags(self, n_gpu_experts: int) -> list[str]:
        """The server arguments that make SGLang reserve what this plan counts with
        `n_gpu_experts` on the GPU, and take no more when more is free."""
        caps = ["--max-total-tokens", str(self.max_total_tokens(n_gpu_experts))]
        if self.mamba_state_bytes:
            caps += ["--max-mamba-cache-size", str(self.max_mamba_cache_size(n_gpu_experts))]
        return ["--mem-fraction-static", f"{self.mem_fraction_static:.3f}",
                "--chunked-prefill-size", str(self.chunked_prefill_size),
                "--cuda-graph-max-bs", str(self.cuda_graph_max_bs), *caps]

    def refusal(self) -> str:
        """Why not even the non-expert weights and the KV cache fit (when `fits` is False)."""
        return (f"by SGLang's arithmetic the non-expert weights ({_gib(self.non_expert_bytes)} GiB in "
                f"{self.checkpoint.label}), the KV cache of {self.context_tokens} tokens ({_gib(self.kv_bytes)} GiB) "
                f"and kt-kernel's staging buffer do not fit its static pool ({_gib(self.static_bytes)} GiB: "
                f"--mem-fraction-static {self.mem_fraction_static:.3f} of {_gib(self.free_bytes)} GiB free, "
                f"{_gib(self.reserved_bytes + self.request_table_bytes)} GiB kept for activations, CUDA graphs "
                "and the request table)")

    def lines(self, n_gpu_experts: int) -> list[str]:
        """The split, in GiB, one step a line, for the export's comments."""
        experts = n_gpu_experts * self.expert_bytes
        card = "" if self.card_bytes == self.budget_bytes else f" of a {_gib(self.card_bytes)} GiB card"
        mamba = (f" and --max-mamba-cache-size {self.max_mamba_cache_size(n_gpu_experts)} (the Mamba states)"
                 if self.mamba_state_bytes else "")
        return [
            f"needs {_gib(self.free_bytes + self.cuda_context_bytes)} GiB free at start (nvidia-smi "
            f"--query-gpu=memory.free): the {_gib(self.budget_bytes)} GiB budget less {_gib(self.other_use_bytes)} "
            "left to other processes; with less free SGLang stops with \"Not enough memory\" (plan again with "
            f"--vram-budget set to what is free). With more free it takes no more: --max-total-tokens "
            f"{self.max_total_tokens(n_gpu_experts)} caps the KV pool{mamba}",
            f"SGLang's GPU memory for this command (its own arithmetic): {_gib(self.budget_bytes)} GiB budget{card} = "
            f"other processes {_gib(self.other_use_bytes)} + "
            f"CUDA context {_gib(self.cuda_context_bytes)} (assumed) + static pool {_gib(self.static_bytes)} "
            f"(--mem-fraction-static {self.mem_fraction_static:.3f} of the {_gib(self.free_bytes)} free at start) + "
            f"reserve {_gib(self.reserved_bytes)} for activations and CUDA graphs (--chunked-prefill-size "
            f"{self.chunked_prefill_size}, --cuda-graph-max-bs {self.cuda_graph_max_bs}) + request table "
            f"{_gib(self.request_table_bytes)} ({MAX_RUNNING_REQUESTS} x {self.context_tokens + REQ_TABLE_EXTRA_TOKENS}"
            " int32)",
            f"static pool {_gib(self.static_bytes)} GiB = non-expert weights {_gib(self.non_expert_bytes)} "
            f"({self.checkpoint.label}) + {n_gpu_experts} GPU experts {_gib(experts)} "
            f"({self.expert_bytes / MIB:.2f} MiB each, {self.checkpoint.label}) + kt staging buffer "
            f"{_gib(self.staging_bytes)} + KV pool {_gib(self.kv_pool_bytes(n_gpu_experts))} (the context's "
            f"{self.context_tokens} tokens need {_gib(self.kv_bytes)}; {HEADROOM_FRACTION:.0%} of the pool kept "
            "free of planned weights)",
            f"checkpoint: {self.checkpoint.source}",
        ]

    def to_dict(self, n_gpu_experts: int | None = None) -> dict:
        # by hand: the split at a given count of GPU experts (the KV pool depends on it)
        n = self.gpu_experts if n_gpu_experts is None else n_gpu_experts
        return {
            "card_bytes": self.card_bytes, "budget_bytes": self.budget_bytes,
            "cuda_context_bytes": self.cuda_context_bytes, "other_use_bytes": self.other_use_bytes,
            "free_bytes": self.free_bytes,
            "mem_fraction_static": self.mem_fraction_static, "static_bytes": self.static_bytes,
            "chunked_prefill_size": self.chunked_prefill_size, "cuda_graph_max_bs": self.cuda_graph_max_bs,
            "reserved_bytes": self.reserved_bytes, "request_table_bytes": self.request_table_bytes,
            "checkpoint": self.checkpoint.label, "non_expert_bytes": self.non_expert_bytes,
            "expert_bytes": self.expert_bytes, "kv_bytes": self.kv_bytes, "staging_bytes": self.staging_bytes,
            "headroom_bytes": self.headroom_bytes,
            "gpu_experts": n, "gpu_experts_fit": self.gpu_experts, "kv_pool_bytes": self.kv_pool_bytes(n),
            "max_total_tokens": self.max_total_tokens(n), "max_mamba_cache_size": self.max_mamba_cache_size(n),
        }


def sglang_memory(model: ModelSpec, checkpoint: Checkpoint, *, budget_bytes: int, context_tokens: int,
                  card_bytes: int | None = None) -> SglangMemory:
    """SGLang's arithmetic for `model` from `checkpoint` on a card of `card_bytes` (None:
    the budget is the card) when the plan may use `budget_bytes` of it."""
    budget = int(budget_bytes)
    card = int(card_bytes) if card_bytes else budget
    card_mib = card / MIB
    chunked, graph_bs = sglang_tier(card_mib)
    reserved = int(sglang_reserved_mib(card_mib, chunked, graph_bs) * MIB)
    table = MAX_RUNNING_REQUESTS * (context_tokens + REQ_TABLE_EXTRA_TOKENS) * REQ_TABLE_BYTES_PER_TOKEN
    return SglangMemory(
        card_bytes=card,
        budget_bytes=budget,
        cuda_context_bytes=CUDA_CONTEXT_BYTES,
        other_use_bytes=int(budget * SAFETY_MARGIN_FRACTION),
        chunked_prefill_size=chunked,
        cuda_graph_max_bs=graph_bs,
        reserved_bytes=reserved,
        request_table_bytes=table,
        checkpoint=checkpoint,
        non_expert_bytes=checkpoint.non_expert_bytes(model),
        expert_bytes=checkpoint.expert_bytes(model),
        kv_bytes=sglang_kv_bytes(model, context_tokens),
        kv_bytes_per_token=sglang_kv_bytes_per_token(model),
        mamba_state_bytes=model.recurrent_state_bytes() if model.linear_blocks else 0,
        staging_bytes=chunked * model.hidden_size * 2,
        n_experts_total=model.n_experts_total,
        context_tokens=int(context_tokens),
    )


def _gib(n: float) -> str:
    return f"{n / GIB:.2f}"
