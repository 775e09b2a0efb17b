"""Prompt processing (prefill): prompt tokens/s and time to first token of a placement.

What llama.cpp does with a micro-batch (`-ub` tokens) when experts live in host memory
(ggml/src/ggml-backend.cpp, ggml_backend_sched_backend_id_from_cur): an op whose weights
sit in a host buffer is given to a higher-priority backend when that backend's
`offload_op` says so; for CUDA (ggml/src/ggml-cuda/ggml-cuda.cu,
ggml_backend_cuda_device_offload_op) that is a batch of at least 32 tokens
(GGML_OP_OFFLOAD_MIN_BATCH). The scheduler then copies the weights into the GPU's compute
buffer before the split runs (ggml_backend_sched_split_graph, pass 5: "create a copy of
the input in the split's backend"), on the split's own stream, so the copy and the compute
of a layer do not overlap. Newer builds copy only the experts the batch routes to
(ggml_backend_sched_compute_splits: "copying only the experts that are used", consecutive
ids grouped); older ones copy the whole tensor. ik_llama.cpp offloads a MoE op only when
batch x active experts >= 32 x total experts (its ggml_backend_cuda_offload_op), and its
`-rtr` repacks CPU experts into CPU-only types the GPU cannot use, so they are computed on
the CPU. Below the threshold the CPU computes its experts.

A micro-batch of u tokens at KV depth d costs, layer by layer: the GPU's work as a
roofline (FLOPs at a fitted share of the GPU's tensor peak, or its weights' bytes at the
decode model's GPU bandwidth, whichever is longer; an expert GEMM whose share of the
micro-batch, u x k / E tokens, fills less than a 128-row tile is charged for the whole
tile), the CPU's (a roofline too: FLOPs at a fitted share of the cores' int8 SIMD peak,
engine/hardware/cpu_compute.py, or the bytes of the weights it reads at the CPU's streaming rate),
and the copy (bytes over the host-to-device bandwidth); added, or with
double-buffered copies (MoE-CORE's alternating buffers: layer l+1's copy under layer l's
compute) the larger of copy and GPU. The routed fraction of a layer for u tokens is
mean_e 1 - (1 - q_e)^u, q_e the share of tokens routing to expert e in the trace: tokens
taken as independent draws, which counts at least as many distinct experts as correlated
real text (so the copy is never underestimated).

The prompt of P tokens runs in ceil(P/ub) micro-batches, each at its own depth; the first
token is sampled from the last one's logits, so TTFT is the prompt's time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from engine.core.assets_io import load_asset_json
from engine.hardware.cpu_compute import core_compute, cpu_peak_flops
from engine.hardware.platform import Platform, assumed_cpu_bandwidth_bytes_per_s
from engine.models.model import ModelSpec
from engine.models.quant import Quantization

OFFLOAD_MIN_BATCH = 32  # ggml-cuda.cu: min_batch_size (GGML_OP_OFFLOAD_MIN_BATCH)
DEFAULT_UBATCH = 512  # common/common.h: n_ubatch
DEFAULT_BATCH = 2048  # common/common.h: n_batch
UBATCH_CHOICES = (256, 512, 1024, 2048, 4096, 8192)
# No figure for a GPU: its tensor FLOP/s taken as this many times its memory bandwidth
# (the tabulated GPUs span about 70-200 FLOP per byte; assumed, and said so).
FALLBACK_FLOP_PER_BYTE = 100.0


@dataclass(frozen=True)
class PrefillAssumptions:
    """Prefill's constants; "fitted": once, over every published row with a prompt figure
    (bench/fit_prefill.py; docs/accuracy.md)."""

    gpu_flops_efficiency: float = 0.425  # fitted: prefill GEMMs vs the FP16 tensor peak (FP32 accumulate)
    cpu_flops_efficiency: float = 0.0856  # fitted: CPU GEMMs vs the cores' int8 SIMD peak at base clock
    cpu_no_vnni_factor: float = 1.55  # fitted (1-2): a core without VNNI reaches more of its halved dot peak
    ik_cpu_speedup: float = 3.45  # fitted: ik_llama.cpp's repacked (-rtr) CPU GEMMs against mainline's
    copy_efficiency: float = 1.0  # fitted (at its bound): expert copies vs the pinned host-to-device figure
    layer_overhead_s: float = 60e-6  # assumed: a block's kernel launches and split hand-overs per micro-batch
    # assumed: the rows of one expert's GEMM tile (ggml-cuda/mmq.cuh: mmq_x up to 128): an
    # expert that gets fewer of the micro-batch's tokens leaves the tile part empty
    tile_tokens: float = 128.0  # not fitted: the fit moves it little (81) and gains nothing


@dataclass(frozen=True)
class PrefillRuntime:
    """What a runtime does with CPU-resident experts during prefill."""

    name: str
    ik_offload_rule: bool = False  # offload when u x k >= 32 x E (ik_llama.cpp), else u >= 32
    copies_used_experts: bool = True  # only the routed experts (newer llama.cpp), else whole tensors
    double_buffered: bool = False  # copies overlap the previous layer's compute
    cpu_kernel_speedup: bool = False  # ik_llama.cpp's CPU GEMMs (faster on the types -rtr repacks into)
    repacked: bool = False  # ik_llama.cpp -rtr: CPU experts never offloaded
    runs_in: str = ""  # which runtime runs it ("" none: a labelled what-if)


LLAMA_CPP = PrefillRuntime("llama.cpp", runs_in="llama.cpp")
LLAMA_CPP_WHOLE = PrefillRuntime("llama.cpp (builds that copy whole expert tensors)", copies_used_experts=False,
                                 runs_in="llama.cpp before the copy of used experts only")
IK_LLAMA = PrefillRuntime("ik_llama.cpp", ik_offload_rule=True, copies_used_experts=False, cpu_kernel_speedup=True,
                          runs_in="ik_llama.cpp")
DOUBLE_BUFFERED = PrefillRuntime("double-buffered copies (MoE-CORE's alternating buffers; no runtime runs it)",
                                 double_buffered=True)


@dataclass(frozen=True)
class PrefillCost:
    """A prompt of `prompt_tokens` in micro-batches of `ubatch`."""

    prompt_tokens: int
    ubatch: int
    batch: int
    prompt_s: float  # = time to first token
    gpu_s: float
    cpu_s: float
    copy_s: float
    copied_bytes: float
    runtime: str
    fits: bool = True  # the compute buffer at this -ub fits the VRAM left

    @property
    def ttft_s(self) -> float:
        return self.prompt_s

    @property
    def tokens_per_s(self) -> float:
        return self.prompt_tokens / self.prompt_s if self.prompt_s > 0 else float("inf")

    def to_dict(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "ubatch": self.ubatch, "batch": self.batch,
                "ttft_s": self.ttft_s, "prompt_tokens_per_s": self.tokens_per_s, "gpu_s": self.gpu_s,
                "cpu_s": self.cpu_s, "copy_s": self.copy_s, "copied_bytes": self.copied_bytes,
                "runtime": self.runtime, "fits": self.fits}


@cache
def _gpu_compute_table() -> dict:
    return load_asset_json("gpu_compute.json")["gpus"]


def gpu_tensor_flops(platform: Platform) -> tuple[float, str]:
    """(FP16 tensor FLOP/s, where it comes from) of the platform's GPU."""
    gpu = platform.gpu
    for pid in (gpu.preset_id, gpu.matched_preset_id):
        entry = _gpu_compute_table().get(pid or "")
        if entry:
            return float(entry["fp16_tensor_flops"]), entry["source"]
    bw = float(gpu.mem_bandwidth_bytes_per_s.value) if gpu.mem_bandwidth_bytes_per_s.known else 500e9
    return bw * FALLBACK_FLOP_PER_BYTE, (f"assumed: no tensor FLOP/s figure for {gpu.name}; "
                                         f"{FALLBACK_FLOP_PER_BYTE:g} FLOP per byte of its memory bandwidth")


def routed_fraction(popularity: np.ndarray, top_k: int, tokens: int) -> np.ndarray:
    """[L]: the expected share of each layer's experts that `tokens` tokens route to,
    from the trace's routing counts [L, E] (tokens as independent draws)."""
    # Half a count for every expert: one the trace never saw may still be routed to.
    counts = np.asarray(popularity, dtype=np.float64) + 0.5
    totals = counts.sum(axis=1, keepdims=True)
    n_experts = counts.shape[1]
    share = np.where(totals > 0, counts / np.maximum(totals, 1.0), 1.0 / n_experts)
    q = np.clip(share * top_k, 0.0, 1.0)  # P(a token routes to expert e)
    return (1.0 - (1.0 - q) ** max(int(tokens), 0)).mean(axis=1)


class PrefillModel:
    """Prefill costs of placements of one model on one platform."""

    def __init__(self, model: ModelSpec, quant: Quantization, platform: Platform, *, popularity: np.ndarray,
                 threads: int, gpu_bytes_per_s: float, h2d_bytes_per_s: float,
                 cpu_bytes_per_s: float | None = None, assumptions: PrefillAssumptions = PrefillAssumptions()):
        self.model, self.quant, self.platform, self.threads = model, quant, platform, max(int(threads), 1)
        self.a = assumptions
        self.popularity = np.asarray(popularity)
        self.gpu_flops, self.gpu_flops_source = gpu_tensor_flops(platform)
        self.cpu_compute_source = core_compute(platform.cpu).source
        self.gpu_bytes_per_s = gpu_bytes_per_s  # the decode model's effective streaming rate
        self.h2d_bytes_per_s = h2d_bytes_per_s
        # What the CPU's threads stream from memory (the decode model's rate); None: its memory's figure
        self.cpu_bytes_per_s = cpu_bytes_per_s or float(assumed_cpu_bandwidth_bytes_per_s(platform.cpu).value)
        self.expert_bytes = float(model.expert_bytes(quant))
        self.expert_flops = 2.0 * model.expert_params()  # per token per routed expert
        n = model.n_blocks
        self.shared_bytes = np.array([model.shared_layer_bytes(quant, b) for b in range(n)], dtype=np.float64)
        self.shared_flops = np.array([2.0 * model.shared_layer_params(b) for b in range(n)], dtype=np.float64)
        self.attn_width = np.zeros(n)
        self.window = np.zeros(n)  # 0: attends to every token
        att = model.attention
        width = att.n_heads * (att.head_dim if att.kind != "mla" else att.qk_nope_head_dim + att.qk_rope_head_dim)
        for b in model.attention_blocks:
            self.attn_width[b] = width
            if att.slides(b):
                self.window[b] = att.sliding_window_tokens
        self.layer_of = {block: i for i, block in enumerate(model.moe_blocks)}

    # --- rates ----------------------------------------------------------------------
    @property
    def gpu_flops_per_s(self) -> float:
        return self.gpu_flops * self.a.gpu_flops_efficiency

    def cpu_flops_per_s(self, runtime: PrefillRuntime) -> float:
        """The cores' int8 SIMD peak at base clock (a second hardware thread on a core adds
        nothing) times what llama.cpp's kernels reach of it; ik_llama.cpp's kernels for the
        row-interleaved types `-rtr` repacks into reach more. The speedup is measured only
        with `-rtr` (the same 7950X, 474 vs 142 tok/s), so ik_llama.cpp without it is priced
        at mainline's rate."""
        speed = self.a.ik_cpu_speedup if runtime.cpu_kernel_speedup and runtime.repacked else 1.0
        return (cpu_peak_flops(self.platform.cpu, self.threads, self.a.cpu_no_vnni_factor)
                * self.a.cpu_flops_efficiency * speed)

    def expert_tile_use(self, tokens: int) -> float:
        """The share of an expert GEMM tile's rows the micro-batch fills: u x k / E tokens
        per expert on average."""
        per_expert = tokens * self.model.top_k / self.model.n_routed_experts
        return min(1.0, max(per_expert, 1.0) / self.a.tile_tokens)

    def offloads(self, tokens: int, runtime: PrefillRuntime) -> bool:
        """Whether a micro-batch of `tokens` moves CPU-resident experts' work to the GPU."""
        if runtime.repacked or tokens < OFFLOAD_MIN_BATCH:
            return False
        if runtime.ik_offload_rule:
            return tokens * self.model.top_k >= OFFLOAD_MIN_BATCH * self.model.n_routed_experts
        return True

    # --- one micro-batch ---------------------------------------------------------------
    def ubatch_s(self, placement, tokens: int, depth: int, runtime: PrefillRuntime,  # type: ignore[no-untyped-def]
                 has_gpu: bool = True) -> tuple[float, float, float, float, float]:
        """(total, gpu, cpu, copy seconds, copied bytes) of `tokens` tokens after `depth`."""
        model, u = self.model, float(tokens)
        on_gpu = np.asarray(placement.gpu_blocks, dtype=bool) if has_gpu else np.zeros(model.n_blocks, dtype=bool)
        share = np.asarray(placement.expert_cpu_share, dtype=np.float64) if has_gpu else np.ones(model.n_moe_layers)
        offload = has_gpu and self.offloads(tokens, runtime)
        attended = np.where(self.window > 0, np.minimum(depth + u / 2, self.window), depth + u / 2)
        block_flops = u * (self.shared_flops + 4.0 * self.attn_width * attended)  # QK^T and PV per token
        # A block left on the CPU: its weights are copied too when the batch is offloaded (MUL_MAT, u >= 32).
        shared_on_gpu = on_gpu | offload
        gpu_flops = np.where(shared_on_gpu, block_flops, 0.0)
        gpu_bytes = np.where(shared_on_gpu, self.shared_bytes, 0.0)
        cpu_flops = np.where(shared_on_gpu, 0.0, block_flops)
        cpu_bytes = np.where(shared_on_gpu, 0.0, self.shared_bytes)
        copy_bytes = np.where(~on_gpu & offload, self.shared_bytes, 0.0)
        # The routed experts of each MoE block, by layer (a split layer: the GPU's part, then the CPU's).
        blocks = np.asarray(model.moe_blocks)
        expert_flops = u * model.top_k * self.expert_flops
        gpu_expert_flops = expert_flops / self.expert_tile_use(tokens)  # dense-equivalent: the tile's empty rows
        read = routed_fraction(self.popularity, model.top_k, tokens) * model.n_routed_experts * self.expert_bytes
        whole = model.n_routed_experts * self.expert_bytes
        on_gpu_share = (1 - share) + (share if offload else 0.0)
        np.add.at(gpu_flops, blocks, on_gpu_share * gpu_expert_flops)
        np.add.at(gpu_bytes, blocks, on_gpu_share * read)
        if offload:
            np.add.at(copy_bytes, blocks, share * (read if runtime.copies_used_experts else whole))
        else:
            np.add.at(cpu_flops, blocks, share * expert_flops)
            np.add.at(cpu_bytes, blocks, share * read)
        gpu_s = np.maximum(gpu_flops / self.gpu_flops_per_s, gpu_bytes / self.gpu_bytes_per_s)
        gpu_s = np.where(gpu_flops > 0, gpu_s + self.a.layer_overhead_s, 0.0)
        # A small micro-batch reads each routed expert for few tokens: memory-bound then.
        cpu_s = np.maximum(cpu_flops / self.cpu_flops_per_s(runtime), cpu_bytes / self.cpu_bytes_per_s)
        # nothing copied costs nothing (without a GPU the link's rate is NaN: 0 / NaN must not reach the sum)
        copy_s = np.where(copy_bytes > 0, copy_bytes / (self.h2d_bytes_per_s * self.a.copy_efficiency), 0.0)
        if runtime.double_buffered:
            total = float(np.maximum(copy_s, gpu_s).sum() + cpu_s.sum())
        else:
            total = float(copy_s.sum() + gpu_s.sum() + cpu_s.sum())
        return total, float(gpu_s.sum()), float(cpu_s.sum()), float(copy_s.sum()), float(copy_bytes.sum())

    # --- a prompt ----------------------------------------------------------------------
    def prompt(self, placement, prompt_tokens: int, *, ubatch: int = DEFAULT_UBATCH,  # type: ignore[no-untyped-def]
               batch: int | None = None, depth: int = 0, runtime: PrefillRuntime = LLAMA_CPP,
               has_gpu: bool = True, fits: bool = True) -> PrefillCost:
        """`prompt_tokens` tokens from KV depth `depth`, -ub `ubatch`, -b `batch` (the
        micro-batch is the smaller of the two, as llama.cpp clamps it)."""
        batch = max(batch or max(DEFAULT_BATCH, ubatch), 1)
        u = max(min(ubatch, batch), 1)
        total = gpu = cpu = copy = copied = 0.0
        done = 0
        prompt_tokens = max(int(prompt_tokens), 1)
        cached: dict[tuple[int, int], tuple] = {}
        while done < prompt_tokens:
            n = min(u, prompt_tokens - done)
            key = (n, (depth + done) // 256)  # depth in 256-token steps: attention varies slowly
            if key not in cached:
                cached[key] = self.ubatch_s(placement, n, depth + done, runtime, has_gpu)
            t, g, c, k, bytes_ = cached[key]
            total, gpu, cpu, copy, copied = total + t, gpu + g, cpu + c, copy + k, copied + bytes_
            done += n
        return PrefillCost(prompt_tokens, u, batch, total, gpu, cpu, copy, copied, runtime.name, fits)

    # --- VRAM of the micro-batch ----------------------------------------------------------
    def compute_buffer_bytes(self, ubatch: int) -> float:
        return compute_buffer_bytes(self.model, ubatch)

    def extra_vram_bytes(self, ubatch: int) -> float:
        return extra_vram_bytes(self.model, ubatch)

    def choose_ubatch(self, placement, prompt_tokens: int, headroom_bytes: float | None, *,  # type: ignore[no-untyped-def]
                      depth: int = 0, runtime: PrefillRuntime = LLAMA_CPP) -> PrefillCost:
        """The fastest -ub whose compute buffer fits `headroom_bytes` (VRAM left after the
        placement; None: not checked); -ub 512 and below always fit (the plan's reserve)."""
        useful = [u for u in UBATCH_CHOICES if u <= max(prompt_tokens, UBATCH_CHOICES[0])]
        fitting = [u for u in useful
                   if u <= DEFAULT_UBATCH or headroom_bytes is None or self.extra_vram_bytes(u) <= headroom_bytes]
        costs = [self.prompt(placement, prompt_tokens, ubatch=u, batch=max(DEFAULT_BATCH, u), depth=depth,
                             runtime=runtime) for u in fitting]
        return min(costs, key=lambda c: (c.prompt_s, c.ubatch))


def request_time_s(ttft_s: float, tpot_s: float, output_tokens: int) -> float:
    """The whole request: prefill, then N decoded tokens (the first comes with the prefill's
    logits, each of the rest costs a TPOT; N x TPOT is the simple, stated reading)."""
    return ttft_s + max(int(output_tokens), 0) * tpot_s


def compute_buffer_bytes(model: ModelSpec, ubatch: int) -> float:
    """llama.cpp's CUDA compute buffer at -ub `ubatch`, approximately (no closed form
    exists: ggml-alloc measures the worst-case graph): the logits [n_vocab, ub] f32, on
    the reading that the worst-case graph llama.cpp reserves (src/llama-context.cpp)
    counts every token as an output (not re-checked against the current source), plus
    the largest live activations (a few hidden-sized tensors and the experts' gate/up
    outputs [ff, k, ub] f32); flash attention keeps the attention scores out of it."""
    per_token = model.vocab_size + 4 * model.hidden_size + 3 * model.top_k * model.expert_ffn_size
    return 4.0 * ubatch * per_token


def extra_vram_bytes(model: ModelSpec, ubatch: int) -> float:
    """VRAM the compute buffer needs beyond the decode plan's reserve, which holds
    llama.cpp's buffers at its default -ub 512 (and so the copy of one layer's CPU
    experts an offloaded micro-batch lands in, the same at any -ub)."""
    return max(compute_buffer_bytes(model, ubatch) - compute_buffer_bytes(model, DEFAULT_UBATCH), 0.0)
