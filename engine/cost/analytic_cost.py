"""The analytic (roofline) cost model: llama.cpp's batch-1 decode from the Platform alone.

Decode at batch 1 is memory-bound: every weight a token touches is read once, so a
piece of work costs its bytes over the bandwidth its device reaches for quantized
mat-vecs, plus fixed latencies (kernel launches, a CPU thread pool's wake-up, the
hand-over of the hidden state between the devices). The pieces:

- a block's shared work (attention with its KV cache at the depth decoded, norms, the
  router, shared experts or a dense FFN) on the GPU or, when the block is not offloaded
  (`-ngl` below the block count, or CPU only), on the CPU;
- a MoE layer's k routed experts on the GPU, on the CPU, or split between them;
- the output head and sampling once per token;
- a hand-over each time the token's work changes device (`sync_s`: half each way).

The CPU streams weights at `cores x` what one thread's mat-vec streams, at most
`cpu_bandwidth_efficiency x` the memory's theoretical peak: decode stops gaining from
threads once DRAM is saturated, and a second thread on a core adds nothing (the two share
its vector units). Below saturation a thread is bound by its core's arithmetic (unpacking
the quants, the int8 dot products): it streams `cpu_thread_bytes_per_mac` bytes a second
for each int8 multiply-accumulate a second of its core's peak (`engine.hardware.cpu_compute`:
the microarchitecture's MACs a cycle at the vendor's base clock), so a 2 GHz Skylake-SP
core streams less than a 4.5 GHz Zen 4 one, and a many-core server can be bound by its
cores before its twelve channels. Where `cope detect` measured this machine (a read stream
by one thread, and by every core), both come from the measurements instead
(`machine_assumptions`): one thread of llama.cpp's quantized mat-vec streams
`measured_thread_share` of the one-thread read (it is partly compute-bound there), and the
lane saturates at `measured_read_share` of the all-core read. A measured figure is already
a sustained one, so the efficiency against a theoretical peak is not applied to it again. Every constant below is either physical (from the
Platform: spec-sheet or measured bandwidths) or fitted once, globally, on the published
llama.cpp runs in ../shared/calibration (bench/fit_published.py; the fit and its data are
in docs/accuracy.md); none is tuned per model, per row or per source.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import cache

from engine.core.assets_io import load_asset_json
from engine.core.errors import CopeInputError
from engine.cost.cost_model import CostModelDescription, Lanes, StateCosts, compose_state_costs, compose_step
from engine.hardware.cpu_compute import core_compute, cores_used, hybrid_of
from engine.hardware.gpu_backends import uses_graphs
from engine.hardware.platform import CpuSpec, GpuSpec, Platform, assumed_cpu_bandwidth_bytes_per_s, plans_without_gpu
from engine.models.model import KV_CACHE_BYTES_PER_ELEMENT, ModelSpec
from engine.models.quant import Quantization
from engine.replays.policy import Execution

# llama.cpp's KV cache types (-ctk/-ctv): bytes per element (ggml block sizes).
KV_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q5_1": 24 / 32, "q5_0": 22 / 32,
                 "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}


# bench/fit_local.py (docs/accuracy.md, "measured against llama.cpp on this machine")
MEASURED_THREAD_SHARE = 0.626
MEASURED_READ_SHARE = 0.773


# Whether a runtime replays a decode step's GPU kernels as CUDA graphs (one launch for many
# kernels). Stock llama.cpp does at decode's batch of 1 with quantized experts
# (ggml-cuda.cu ggml_cuda_graph_check_compability: only a mul_mat_id on the synchronising
# fallback path disables them, and mmvq does not take it). It keeps a graph per split (keyed by
# the split's first node) only from PR 18934 ("ggml-cuda: enable cuda-graphs for n-cpu-moe",
# 2026-01-19); before it, one graph a device, re-captured for each split of a different shape,
# and four consecutive re-captures disable graphs for good: a placement whose token runs more
# than one stretch of GPU work (experts or whole FFNs on the CPU between offloaded blocks) ran
# without graphs; one stretch (-ngl below the block count, all on the GPU) kept its graph.
# ik_llama.cpp (ggml/src/ggml-cuda.cu), by build:
# - before 633e0617b (PR 689, 2025-08-15) never for a MoE model: any GGML_OP_MUL_MAT_ID or
#   GGML_OP_MOE_FUSED_UP_GATE node disabled them, and its one graph a context was updated at
#   every split, which disables it after four consecutive updates;
# - from then on (and at 8337e4c, check_node_graph_compatibility_and_refresh_copy_ops) a
#   graph a split, disabled by a mul_mat_id with more than one expert a token, but not by the
#   fused up/gate op of `-fmoe` on quantized weights at batch 1 (nor the down mul_mat_id right
#   after it); a split without GPU experts (experts on the CPU) keeps its graph;
# - `-fmoe` is on by default from 41d6c42b9 (PR 863, 2025-10-25).
IK_GRAPHS_FROM = "2025-08-15"
IK_FMOE_DEFAULT_FROM = "2025-10-25"
# Both also gate graphs on the GPU's compute capability, whatever the graph holds: stock
# llama.cpp disabled them below Ampere (ggml-org/llama.cpp ggml/src/ggml-cuda/ggml-cuda.cu at
# f6d77a1ba, should_use_cuda_graph: `cc < GGML_CUDA_CC_AMPERE` sets disable_graph_due_to_gpu_arch)
# until PR 25749 ("Enable CUDA graphs on Volta+Turing", 2026-07-16) moved the gate to Volta;
# ik_llama.cpp still disables them below Ampere (ggml/src/ggml-cuda.cu at 8337e4c, line 4712:
# `cc < CC_AMPERE`). So a Turing card (GTX 16, RTX 20 series, T4) launches every kernel one by
# one on ik_llama.cpp and on stock builds before that PR, and a Pascal one on every build.
AMPERE_CC, VOLTA_CC = 8.0, 7.0
STOCK_GRAPHS_FROM_VOLTA = "2026-07-16"
STOCK_GRAPH_PER_SPLIT_FROM = "2026-01-19"


def uses_cuda_graphs(runtime: str, *, build_date: str | None = None, fused_moe: bool | None = None,
                     gpu_experts: bool = True, compute_capability: float | None = None,
                     gpu_stretches: int = 1) -> bool:
    """Whether `runtime` replays the decode step's GPU work as CUDA graphs. `build_date`
    (ISO, a prefix such as "2025-11" is enough; None: a current build), `fused_moe` (ik's
    `-fmoe` as given; None: the build's default), `gpu_experts`: whether routed experts run
    on the GPU, `compute_capability`: the GPU's (None: not known, taken as new enough),
    `gpu_stretches`: how many runs of GPU work, with CPU work between them, a token has."""
    if compute_capability is not None and compute_capability < _graph_gate_cc(runtime, build_date):
        return False
    if runtime != "ik_llama.cpp":
        return gpu_stretches <= 1 or build_date is None or build_date[:10] >= STOCK_GRAPH_PER_SPLIT_FROM
    if build_date is not None and build_date[:10] < IK_GRAPHS_FROM:
        return False
    if fused_moe is None:
        fused_moe = build_date is None or build_date[:10] >= IK_FMOE_DEFAULT_FROM
    return fused_moe or not gpu_experts


def _graph_gate_cc(runtime: str, build_date: str | None) -> float:
    """The lowest compute capability `runtime`'s build replays graphs on (see above)."""
    if runtime == "ik_llama.cpp":
        return AMPERE_CC
    return VOLTA_CC if build_date is None or build_date[:10] >= STOCK_GRAPHS_FROM_VOLTA else AMPERE_CC


@cache
def _compute_capabilities() -> dict:
    return load_asset_json("gpu_compute.json").get("compute_capability", {})


def gpu_compute_capability(gpu: GpuSpec) -> float | None:
    """The CUDA compute capability of `gpu`'s preset (assets/gpu_compute.json, NVIDIA's
    table), or None when it has no preset there."""
    for pid in (gpu.preset_id, gpu.matched_preset_id):
        found = _compute_capabilities().get(pid or "")
        if found:
            return float(found)
    return None


# The GPU kernels a decode step launches in one block, from the architecture (the ggml graph
# llama.cpp builds for it, counted by op: a fused pair counts once): attention with its norm
# (GQA: norm, Q/K/V mat-vecs, two ropes, two cache writes, flash attention, output
# projection, residual add: 11; MLA as DeepSeek-V2 builds it: norm, the query's mat-vec (three
# with a low-rank query: down, norm, up), the compressed KV's mat-vec and norm, two ropes,
# the absorbed key projection, a concat, a cache write, flash attention, the value
# projection, output projection, residual add: 13 or 15); a MoE FFN (norm, router, gating,
# top-k selection and its weights, gate and up, activation, down, the weighting, one add per
# expert beyond the first, residual add: 11 + k - 1), with shared experts (gate, up,
# activation, down, add: 5 more); a dense FFN (norm, gate, up, activation, down, residual add: 6).
REFERENCE_BLOCK_KERNELS = 29  # a GQA block with top-8 routed experts and no shared expert (Qwen3-30B-A3B)


def block_kernels(model: ModelSpec, block: int) -> int:
    """The GPU kernels one decode step launches in `block` (see above): what a block's fixed
    GPU cost scales with."""
    att = model.attention
    if att.kind == "mla":
        attention = 13 + (2 if att.q_lora_rank else 0)
    else:
        attention = 11
    if block in model.moe_blocks:
        ffn = 11 + model.top_k - 1 + (5 if model.n_shared_experts else 0)
    else:
        ffn = 6
    return attention + ffn


# How many times a decode step streams a linear-attention (Gated DeltaNet) block's recurrent
# state, from ggml-org/llama.cpp at 0c1e570: build_rs (src/llama-graph.cpp) gathers the
# sequence's state out of the recurrent cache with ggml_get_rows (read, write a copy);
# build_delta_net_fused (src/models/delta-net-base.cpp, the decode path whenever the device
# supports the fused op, llama-context.cpp's probe) runs ggml_gated_delta_net over the copy
# (read) into its result (write); build_recurrent_attn puts the new state back in the cache with
# ggml_cpy (read, write). The state is F32, 2 MiB a block for Qwen3-Next (the convolution's few
# inputs, 4% of it, counted alike), and it streams where the block runs, on the GPU or the CPU.
# Builds from before the fused op (llama.cpp PR 19504, 2026-02) ran build_delta_net_autoregressive,
# a dozen elementwise ops over state-sized tensors, the path llama.cpp issue 19480 measured about
# 5x slower on the CPU than bandwidth predicts; COPE prices the fused graph of current builds.
DELTA_NET_STATE_PASSES = 6


@dataclass(frozen=True)
class AnalyticAssumptions:
    """The constants of the roofline model. "fitted": by bench/fit_published.py, once, on
    the published runs with their hardware stated (docs/accuracy.md has the fit, its data
    and its residuals); "assumed": small latencies the published runs cannot separate."""

    gpu_bandwidth_efficiency: float = 0.9  # fitted (held to 0.81-0.9; docs/accuracy.md: why)
    cpu_bandwidth_efficiency: float = 0.7461  # fitted: quantized mat-vec vs the memory's theoretical peak
    cpu_thread_bytes_per_mac: float = 0.04712  # fitted: a thread's stream per int8 MAC/s of its core's peak
    # What one thread streams below saturation, on this machine, where `cope detect` measured
    # it or `cope calibrate` fitted it; None: from the core (`thread_bytes_per_s`).
    cpu_thread_bytes_per_s: float | None = None
    gpu_expert_launch_s: float = 15e-6  # assumed: a layer's mul_mat_id kernels (gate, up, down, activation)
    # fitted: the fixed GPU cost of a block of REFERENCE_BLOCK_KERNELS kernels besides its
    # weights' bytes (norms, rope, attention, router), replayed as a CUDA graph; a block of
    # another architecture pays it in proportion to its kernels (block_kernels)
    gpu_block_overhead_s: float = 53.37e-6
    # fitted: what such a block costs more when the runtime launches its kernels one by one,
    # without a CUDA graph (uses_cuda_graphs), scaled the same way
    gpu_block_no_graph_s: float = 74.01e-6
    # fitted: what one SM's flash attention reads of an f16 KV cache a second at batch 1 (a
    # quantized cache counts its elements at f16's bytes: gpu_kv_read_factor). A decode step's
    # attention has few (KV head, split) tiles to spread, so on a card whose memory is fast for
    # its SMs it reads the cache slower than the weights stream: at min(the stream, SMs x this)
    # (docs/accuracy.md: 2.50-2.72 GB/s in 25 of the 26 folds, 4.27 without jeano76's rows)
    gpu_kv_sm_bytes_per_s: float = 2.643e9
    # fitted: the KV cache's bytes a decode step's attention reads on the CPU count this many
    # times a weight's bytes (f16 dot products and softmax do more work a byte than a mat-vec)
    cpu_kv_read_factor: float = 2.368
    cpu_dispatch_s: float = 10e-6  # assumed: waking the CPU thread pool for a layer's experts
    cpu_block_overhead_s: float = 189.5e-6  # fitted: a block's other ops on the CPU (thread-pool barriers)
    # fitted (held to 5 us-0.5 ms): the hand-over of a layer whose experts run on the CPU, half of it at each
    # change of device: the GPU's stream synchronised and three synchronous copies (the normed hidden state and
    # the expert ids to the CPU, the experts' outputs back), and the CPU thread team's start and join for the
    # split (ggml-org/llama.cpp ggml-backend.cpp at 0054c01, ggml_backend_sched_compute_splits; ggml-cpu.c at
    # 1b5f950, ggml_graph_compute). The source gives the count, not the microseconds (docs/accuracy.md, issue 44).
    sync_s: float = 49.41e-6
    copy_latency_s: float = 10e-6  # assumed: setting up one batch of host-to-device copies
    # fitted (held to 10 us-0.5 ms): sampling, embedding, graph launch; at or near its floor in every fold
    # (docs/accuracy.md): llama-bench, most of the rows, samples nothing
    token_fixed_s: float = 10e-6
    # Fitted on llama-bench runs built and measured here (bench/fit_local.py): what llama.cpp's
    # quantized mat-vec streams as a share of `cope detect`'s read streams: one thread, and
    # saturated (every core).
    measured_thread_share: float = MEASURED_THREAD_SHARE
    measured_read_share: float = MEASURED_READ_SHARE


class AnalyticCostModel:
    """Roofline costs from the Platform's figures alone.

    `context_tokens`: the KV cache reserved; `attention_tokens`: the tokens a decode step
    attends to (default half the context: the mean over a conversation that fills it;
    `llama-bench -d D -n N` decodes from D to D + N); `kv_bytes_per_element`: the cache
    type's (`-ctk`/`-ctv`; f16 by default)."""

    fidelity = "analytic"

    def __init__(
        self,
        model: ModelSpec,
        quant: Quantization,
        platform: Platform,
        *,
        context_tokens: int,
        attention_tokens: int | None = None,
        kv_bytes_per_element: float = KV_CACHE_BYTES_PER_ELEMENT,
        assumptions: AnalyticAssumptions | None = None,
        cuda_graphs: bool | None = None,
    ):
        """`assumptions`: the constants to price with (default: the global fit, with this
        machine's measured read figures where the Platform has them); `cuda_graphs`: whether
        the runtime replays a decode step's GPU kernels as CUDA graphs (uses_cuda_graphs; None:
        what a current stock build does on this GPU, which every GPU from Volta on gets)."""
        self.model = model
        self.quant = quant
        self.platform = platform
        self.context_tokens = context_tokens
        self.attention_tokens = context_tokens // 2 if attention_tokens is None else int(attention_tokens)
        self.kv_scale = kv_bytes_per_element / KV_CACHE_BYTES_PER_ELEMENT
        self.a = machine_assumptions(platform.cpu) if assumptions is None else assumptions
        if cuda_graphs is None:
            cuda_graphs = plans_without_gpu(platform.gpu) or uses_cuda_graphs(
                "llama.cpp", compute_capability=gpu_compute_capability(platform.gpu))
        # a backend without graphs launches each kernel (engine/hardware/gpu_backends.py: Vulkan, SYCL)
        self.cuda_graphs = cuda_graphs = cuda_graphs and uses_graphs(platform.gpu.backend)
        reference_block_s = self.a.gpu_block_overhead_s + (0.0 if cuda_graphs else self.a.gpu_block_no_graph_s)
        self._gpu_block_fixed_s = tuple(reference_block_s * block_kernels(model, b) / REFERENCE_BLOCK_KERNELS
                                        for b in range(model.n_blocks))
        self.expert_bytes = model.expert_bytes(quant)
        if plans_without_gpu(platform.gpu):  # --gpu none: no GPU term may be used (NaN shows if one were)
            self.gpu_bytes_per_s = self.h2d_bytes_per_s = float("nan")
        else:
            self.gpu_bytes_per_s = float(_known(platform.gpu.mem_bandwidth_bytes_per_s, "GPU memory bandwidth"))
            self.h2d_bytes_per_s = float(_known(platform.gpu.h2d_bytes_per_s, "host-to-device bandwidth"))
        cpu_bw = platform.cpu.mem_bandwidth_bytes_per_s
        if not cpu_bw.known:
            cpu_bw = assumed_cpu_bandwidth_bytes_per_s(platform.cpu)
        self.cpu_bytes_per_s = float(cpu_bw.value)
        self.cpu_thread_bytes_per_s = thread_bytes_per_s(self.a, platform.cpu)
        self.hybrid = hybrid_of(platform.cpu)  # None: every core alike
        self._hybrid_stream: dict[int, float] = {}
        self.gpu_kv_read_factor = gpu_kv_read_factor(self.a, platform.gpu, self.gpu_stream_bytes_per_s,
                                                     self.kv_scale)

    def gpu_block_fixed_s(self, block: int) -> float:
        """`block`'s fixed GPU cost: its kernels' launches and small ops besides its bytes."""
        return self._gpu_block_fixed_s[block]

    # --- bandwidths -------------------------------------------------------------
    @property
    def gpu_stream_bytes_per_s(self) -> float:
        return self.gpu_bytes_per_s * self.a.gpu_bandwidth_efficiency

    def cpu_stream_bytes_per_s(self, threads: int) -> float:
        """What `threads` threads stream for quantized mat-vecs: linear in the cores they
        run on until the memory saturates (more threads never slower). On a hybrid CPU
        (P- and E-cores) by the pace ggml's split gives them (`_hybrid_stream_bytes_per_s`)."""
        cap = self.cpu_bytes_per_s * self.a.cpu_bandwidth_efficiency
        if self.hybrid is None:
            return min(cores_used(self.platform.cpu, threads) * self.cpu_thread_bytes_per_s, cap)
        if threads not in self._hybrid_stream:
            self._hybrid_stream[threads] = self._hybrid_stream_bytes_per_s(threads, cap)
        return self._hybrid_stream[threads]

    def fastest_threads(self) -> int:
        """The -t whose CPU lane streams most, one thread a core at most, the fewest on a tie
        (past the memory's saturation more threads stream no more): on a hybrid CPU often
        its P-cores (engine/hardware/hybrid_cores.py)."""
        cores = self.platform.cpu.physical_cores
        top = int(cores.value) if cores.known else 1
        speeds = {n: self.cpu_stream_bytes_per_s(n) for n in range(1, top + 1)}
        best = max(speeds.values())
        return min(n for n, v in speeds.items() if v >= best * (1 - 1e-9))

    def _hybrid_stream_bytes_per_s(self, threads: int, cap: float) -> float:
        """An expert's three mat-vecs on a hybrid CPU, each at the P-cores' worth of pace its
        rows get (engine/hardware/hybrid_cores.py: an even split runs at the slowest thread's
        pace, handed-out chunks at the sum), up to the memory's: gate and up have the expert's
        FFN width as rows, down the hidden size; the three hold the same number of weights."""
        model = self.model
        seconds_per_byte = 0.0
        for share, rows in ((2 / 3, model.expert_ffn_size), (1 / 3, model.hidden_size)):
            pace = self.hybrid.p_core_equivalents(threads, rows)  # type: ignore[union-attr]
            seconds_per_byte += share / min(pace * self.cpu_thread_bytes_per_s, cap)
        return 1.0 / seconds_per_byte

    # --- single lanes ---------------------------------------------------------
    def gpu_experts_s(self, n: int) -> float:
        if n == 0:
            return 0.0
        return self.a.gpu_expert_launch_s + n * self.expert_bytes / self.gpu_stream_bytes_per_s

    def cpu_expert_s(self, threads: int) -> float:
        return self.expert_bytes / self.cpu_stream_bytes_per_s(threads)

    def cpu_experts_s(self, n: int, threads: int) -> float:
        return 0.0 if n == 0 else self.a.cpu_dispatch_s + n * self.cpu_expert_s(threads)

    def copy_experts_s(self, n: int) -> float:
        return 0.0 if n == 0 else self.a.copy_latency_s + n * self.expert_bytes / self.h2d_bytes_per_s

    # --- one layer step -------------------------------------------------------
    def lanes(self, threads: int) -> Lanes:
        """The single-operator costs at `threads`, for the shared composition rules."""
        return Lanes(
            gpu_experts_s=self.gpu_experts_s,
            cpu_experts_s=lambda n: self.cpu_experts_s(n, threads),
            copy_experts_s=self.copy_experts_s,
            sync_s=self.a.sync_s,
            gpu_launch_s=self.a.gpu_expert_launch_s,
            gpu_per_expert_s=self.gpu_experts_s(2) - self.gpu_experts_s(1),
            cpu_dispatch_s=self.a.cpu_dispatch_s,
            cpu_per_expert_s=self.cpu_expert_s(threads),
            copy_latency_s=self.a.copy_latency_s,
            copy_per_expert_s=self.copy_experts_s(2) - self.copy_experts_s(1),
        )

    def state_costs(self, execution: Execution, threads: int, top_k: int, prefetch_budget: int) -> StateCosts:
        return compose_state_costs(execution, top_k, prefetch_budget, self.lanes(threads))

    def _step(self, execution: Execution, h: int, m: int, threads: int) -> tuple:
        """(total, gpu, cpu, copy, sync, copied) of one layer step."""
        return compose_step(execution, h, m, self.lanes(threads))

    # --- a block's shared work, on either device --------------------------------
    def block_bytes(self, block: int) -> float:
        """Bytes a decode step reads in `block` besides its routed experts: its weights and
        its KV cache at the attended depth."""
        return self.model.shared_layer_bytes(self.quant, block) + self.kv_bytes(block)

    def kv_bytes(self, block: int) -> float:
        """The KV cache's bytes a decode step reads in `block` at the attended depth."""
        return self.model.kv_read_bytes_per_layer(block, self.attention_tokens) * self.kv_scale

    def state_bytes(self, block: int) -> float:
        """The recurrent state's bytes a decode step streams in `block` (a linear-attention
        block's; 0 for attention): DELTA_NET_STATE_PASSES over the state."""
        return DELTA_NET_STATE_PASSES * self.model.recurrent_state_bytes_per_layer(block)

    def gpu_block_s(self, block: int) -> float:
        work = (self.model.shared_layer_bytes(self.quant, block) + self.gpu_kv_read_factor * self.kv_bytes(block)
                + self.state_bytes(block))
        return self.gpu_block_fixed_s(block) + work / self.gpu_stream_bytes_per_s

    def cpu_block_s(self, block: int, threads: int) -> float:
        work = (self.model.shared_layer_bytes(self.quant, block) + self.a.cpu_kv_read_factor * self.kv_bytes(block)
                + self.state_bytes(block))
        return self.a.cpu_block_overhead_s + work / self.cpu_stream_bytes_per_s(threads)

    def head_s(self, *, on_cpu: bool = False, threads: int = 1) -> float:
        """The output head's mat-vec (sampling and the rest are in `token_overhead_s`)."""
        head = self.model.head_bytes(self.quant)
        return head / (self.cpu_stream_bytes_per_s(threads) if on_cpu else self.gpu_stream_bytes_per_s)

    # --- what every candidate pays -------------------------------------------
    def shared_per_token_s(self) -> float:
        """Every block's shared work on the GPU (the candidates all offload every block)."""
        return sum(self.gpu_block_s(block) for block in range(self.model.n_blocks))

    def token_overhead_s(self) -> float:
        return self.a.token_fixed_s + self.head_s()

    def describe(self) -> CostModelDescription:
        return CostModelDescription(
            self.fidelity,
            "roofline: bytes over bandwidth plus fixed latencies; constants fitted on published llama.cpp runs "
            "(docs/accuracy.md)",
            {
                "gpu_bytes_per_s": self.gpu_bytes_per_s,
                "cpu_bytes_per_s": self.cpu_bytes_per_s,
                "h2d_bytes_per_s": self.h2d_bytes_per_s,
                "expert_bytes": self.expert_bytes,
                "cpu_thread_bytes_per_s": self.cpu_thread_bytes_per_s,
                "attention_tokens": self.attention_tokens,
                "assumptions": asdict(self.a),
            },
        )


def gpu_kv_read_factor(a: AnalyticAssumptions, gpu: GpuSpec, stream_bytes_per_s: float,
                       kv_scale: float = 1.0) -> float:
    """How many times a weight's bytes the KV cache's bytes cost on `gpu`: the weights'
    stream over what its SMs' attention reads (`gpu_kv_sm_bytes_per_s` each, of an f16
    cache), at least 1. The SMs' bound is on elements: flash attention's vec kernel turns
    each element of a quantized cache into f16 or int8 arithmetic one by one (ggml-cuda
    fattn-common.cuh at 0c1e570: vec_dot_fattn_vec_KQ_q8_0, dequantize_V_q8_0), so a cache of
    `kv_scale` times f16's bytes (q8_0: 0.53) reads no faster in elements, and its bytes
    count 1 / kv_scale times more there. A GPU whose SM count is unknown is taken at the
    fitted cards' median bandwidth an SM."""
    if math.isnan(stream_bytes_per_s):  # --gpu none
        return 1.0
    sms = float(gpu.sm_count.value) if gpu.sm_count.known else stream_bytes_per_s / UNKNOWN_SM_BYTES_PER_S
    return max(1.0, stream_bytes_per_s / (sms * a.gpu_kv_sm_bytes_per_s * kv_scale))


# bandwidth an SM of a GPU whose SM count is unknown (gpu_kv_read_factor): the middle of the
# GPU presets' figures (RTX 4080 9.4 GB/s, RTX 4090 7.9, RTX 5090 10.5, GB10 5.7)
UNKNOWN_SM_BYTES_PER_S = 8.5e9


def thread_bytes_per_s(a: AnalyticAssumptions, cpu: CpuSpec) -> float:
    """What one thread of llama.cpp's quantized mat-vec streams on `cpu` below saturation:
    the machine's measured or calibrated figure, else the global fit's share of its core's
    int8 peak."""
    if a.cpu_thread_bytes_per_s is not None:
        return a.cpu_thread_bytes_per_s
    return a.cpu_thread_bytes_per_mac * core_compute(cpu).macs_per_s


def machine_assumptions(cpu: "CpuSpec", base: AnalyticAssumptions = AnalyticAssumptions()) -> AnalyticAssumptions:
    """`base` with the CPU lane taken from `cope detect`'s measurements where there are
    any: one thread streams `measured_thread_share` of the measured one-thread read, and the
    lane saturates at `measured_read_share` of the measured all-core read (in place of the
    fitted efficiency against the theoretical peak, which a sustained figure is already below)."""
    changes: dict[str, float] = {}
    one, every = cpu.thread_bandwidth_bytes_per_s, cpu.mem_bandwidth_bytes_per_s
    if one.known and one.basis == "measured":
        changes["cpu_thread_bytes_per_s"] = base.measured_thread_share * float(one.value)  # type: ignore[arg-type]
    if every.known and every.basis == "measured":
        changes["cpu_bandwidth_efficiency"] = base.measured_read_share
    return replace(base, **changes) if changes else base


def _known(fact, what: str):  # type: ignore[no-untyped-def]
    if not fact.known:
        raise CopeInputError(f"{what} is unknown ({fact.note}); name a GPU preset with --gpu")
    return fact.value
