"""Where a llama.cpp command puts a model's weights, and what a decode token then costs.

Placement, by llama.cpp's rules (src/llama-model.cpp, load_tensors): `-ngl N` offloads
the output layer first and then the last N - 1 repeating blocks (i_gpu_start = n_layer + 1
- N, the output layer at index n_layer: llama-model.cpp at 0c1e570; ggml-org/llama.cpp PR
18148, "offload output layer to GPU first", of 2025-12-17), with
their attention, norms and KV cache; builds before it and ik_llama.cpp (src/llama.cpp at
8337e4c: i_gpu_start = n_layer - N) offload the last N blocks and the output layer only when
N > n_layer (`output_first=False`). Without -ngl (or `all`, `auto`, `-1`) every block is
offloaded. Tensor overrides (`-ot`, `--n-cpu-moe`, `--cpu-moe`,
common/arg.cpp) then move tensors by name, the first matching pattern winning: COPE reads
them for every tensor of the model, per projection, so `-ot "ffn_down_exps=CPU"` keeps one
third of a layer's expert bytes on the CPU and `-ot "blk\\.1\\..*=CPU"` puts block 1's
attention weights, norms and router there too, while its KV cache stays in VRAM with the
block (the cache follows -ngl, not -ot: llama-kv-cache.cpp allocates it on the layer's
device). Buffer names are llama.cpp's, case and all (common/arg.cpp,
parse_tensor_buffer_overrides: an exact lookup among the devices' buffer types, "CPU",
"CUDA0", ...; any other name stops llama.cpp at start-up).

Pricing follows the work of one decode token through the blocks: each block's shared
work piece by piece on the device of its weights (`engine.models.block_tensors`: the attention's
input side, the attention over the KV cache where the cache is, its output projection,
the FFN side), each MoE layer's routed experts on theirs (a split layer: the GPU's part,
then the CPU's), the output head, and half a hand-over (`sync`) every time the work
changes device. For a set of whole layers' experts on the CPU with every block
offloaded, this is exactly what the ranking's layer-partition candidates cost (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from engine.core.spans import block_span
from engine.cost.cost_model import CostModel
from engine.cost.request import AdviseRequest
from engine.cost.split_work import split_work
from engine.hardware.host_memory import PAGE_CACHE_DISK_BYTES_PER_S, cold_expert_disk_bytes, ram_fit
from engine.hardware.memory import GIB, RUNTIME_RESERVE_BYTES
from engine.llamacpp.ecma_regex import search
from engine.llamacpp.llama_args import LlamaCommand, stoi
from engine.llamacpp.tensor_overrides import expert_tensor_names, is_gpu_buffer
from engine.models.block_tensors import OUTPUT_HEAD, PIECES, shared_tensors, tensor_names
from engine.models.model import ModelSpec
from engine.models.quant import Quantization
from engine.replays.policy import Execution, Kind

if TYPE_CHECKING:
    from engine.hardware.host_memory import RamFit
    from engine.llamacpp.moe_cache_price import CachedLayers

ALL_LAYERS = ("all", "auto", "-1", "max")


@dataclass(frozen=True)
class LlamaPlacement:
    gpu_blocks: np.ndarray  # bool [n_blocks]: offloaded (attention, norms, KV on the GPU)
    expert_cpu_share: np.ndarray  # float [L]: the share of each MoE layer's expert bytes on the CPU
    output_on_gpu: bool
    notes: tuple[str, ...] = ()
    # Block tensors besides the routed experts that an override puts on the other device
    # than their block's (an offloaded block's on the CPU, a CPU block's on the GPU).
    moved_shared: frozenset[str] = frozenset()

    @property
    def cpu_only(self) -> bool:
        return (not self.gpu_blocks.any() and not self.output_on_gpu and bool((self.expert_cpu_share == 1).all())
                and not self.moved_shared)

    def shared_split(self, model: ModelSpec, quant: Quantization, block: int) -> list[tuple[float, float]]:
        """(GPU bytes, CPU bytes) of `block`'s weights besides its routed experts, per piece
        of its work (engine.models.block_tensors.PIECES order)."""
        on_gpu = bool(self.gpu_blocks[block])
        split = {piece: [0.0, 0.0] for piece in PIECES}
        for t in shared_tensors(model, quant)[block]:
            gpu = on_gpu != (t.name in self.moved_shared)
            split[t.piece][0 if gpu else 1] += t.bytes
        return [(g, c) for g, c in split.values()]

    @property
    def whole_layer_set(self) -> np.ndarray | None:
        """[L] bool when every block is offloaded and each layer's experts are all on one
        side: the shape the ranking's partition candidates have; else None."""
        share = self.expert_cpu_share
        if not (self.gpu_blocks.all() and self.output_on_gpu and np.isin(share, (0.0, 1.0)).all()
                and not self.moved_shared):
            return None
        return share == 1.0

    def describe(self, model: ModelSpec) -> str:
        cpu_blocks = [b for b in range(model.n_blocks) if not self.gpu_blocks[b]]
        if self.cpu_only:
            return "everything on the CPU (no layer offloaded)"
        parts = []
        if cpu_blocks:
            parts.append(f"{len(cpu_blocks)} of {model.n_blocks} blocks whole on the CPU (blocks {block_span(cpu_blocks)})")
        whole = [model.moe_blocks[i] for i, s in enumerate(self.expert_cpu_share) if s == 1.0
                 and self.gpu_blocks[model.moe_blocks[i]]]
        split = [model.moe_blocks[i] for i, s in enumerate(self.expert_cpu_share) if 0 < s < 1]
        if whole:
            parts.append(f"{len(whole)} of {model.n_moe_layers} MoE layers' experts on the CPU (blocks "
                         f"{block_span(whole)})")
        if split:
            parts.append(f"some expert projections on the CPU in blocks {block_span(split)}")
        moved = sorted({int(name.split(".")[1]) for name in self.moved_shared})
        to_cpu = [b for b in moved if self.gpu_blocks[b]]
        to_gpu = [b for b in moved if not self.gpu_blocks[b]]
        if to_cpu:
            parts.append(f"attention, norm or router weights on the CPU in offloaded blocks {block_span(to_cpu)} "
                         "(their KV cache in VRAM)")
        if to_gpu:
            parts.append(f"attention, norm or router weights on the GPU in CPU blocks {block_span(to_gpu)}")
        if not self.output_on_gpu:
            parts.append("output layer on the CPU")
        return "; ".join(parts) or f"every expert on the GPU (0 of {model.n_moe_layers} MoE layers on the CPU)"


def layer_set_kind(cpu_layers: np.ndarray) -> str:
    """The candidate kind a CPU layer set ([L] bool) is, as the ranking names them."""
    cpu = np.asarray(cpu_layers, dtype=bool)
    n = int(cpu.sum())
    if n == 0:
        return Kind.ALL_GPU.value
    if n == cpu.size:
        return Kind.ALL_CPU.value
    if cpu[:n].all():
        return Kind.PARTITION_FIRST.value
    if cpu[-n:].all():
        return Kind.PARTITION_LAST.value
    return "layer set"


def gpu_layer_count(command: LlamaCommand, model: ModelSpec) -> int:
    """-ngl as a number of offloaded layers, the output layer counted as n_blocks + 1."""
    ngl = command.gpu_layers
    if ngl is None or ngl.strip().lower() in ALL_LAYERS:
        return model.n_blocks + 1
    n = stoi(ngl, "-ngl")  # llama-bench's lists and ranges are resolved to their first value when read
    return model.n_blocks + 1 if n < 0 else n


# The first stock llama.cpp build dated after PR 18148 ("llama: offload output layer to GPU
# first", opened 2025-12-17): from it on -ngl offloads the output layer before the blocks.
STOCK_OUTPUT_FIRST_FROM = "2025-12-18"


def offloads_output_first(runtime: str, build_date: str | None = None) -> bool:
    """Whether `runtime` at a build of `build_date` (ISO, a prefix is enough; None: a current
    one) offloads the output layer first under -ngl: stock llama.cpp from PR 18148 on, never
    ik_llama.cpp (see the module's docstring)."""
    if runtime == "ik_llama.cpp":
        return False
    return build_date is None or build_date[:10] >= STOCK_OUTPUT_FIRST_FROM


@lru_cache(maxsize=512)  # pure in its arguments; a fit prices each published command hundreds of times
def placement_of(command: LlamaCommand, model: ModelSpec, *, has_gpu: bool = True,
                 output_first: bool = True) -> LlamaPlacement:
    """The placement `command` gives `model` (everything on the CPU without a GPU);
    `output_first`: whether -ngl offloads the output layer before the blocks (a stock build
    from PR 18148 on; see the module's docstring). Its arrays are read-only: the placement
    is shared by every caller that asks again."""
    n_gpu = gpu_layer_count(command, model) if has_gpu else 0
    start = max(model.n_blocks + (1 if output_first else 0) - n_gpu, 0)
    gpu_blocks = np.arange(model.n_blocks) >= start
    share = np.zeros(model.n_moe_layers)
    for layer, block in enumerate(model.moe_blocks):
        names = expert_tensor_names(model, block)
        on_cpu = [_on_cpu(name, command, bool(gpu_blocks[block])) for name in names]
        share[layer] = sum(on_cpu) / len(names)
    moved: set[str] = set()
    output_on_gpu = has_gpu and n_gpu > (0 if output_first else model.n_blocks)
    # --cpu-moe's and --n-cpu-moe's patterns name routed-expert tensors only: the rest of
    # the model follows the user's own -ot patterns, the first match winning.
    typed = [o for o in command.overrides if o[2] in ("-ot", "--override-tensor")]
    names = tensor_names(model)
    for name in (n for n in names if "_exps." not in n) if has_gpu and typed else ():
        buffer = _buffer_of(name, typed)
        if buffer is None:
            continue
        if name == OUTPUT_HEAD:
            output_on_gpu = is_gpu_buffer(buffer)
        elif name.startswith("blk.") and is_gpu_buffer(buffer) != bool(gpu_blocks[int(name.split(".")[1])]):
            moved.add(name)
    notes = []
    unused = [f"{flag} {pat}={buf}" for pat, buf, flag in typed if not any(search(pat, n) for n in names)]
    if unused:
        notes.append("overrides that match no tensor of this model (they move nothing): " + "; ".join(unused))
    gpu_blocks.flags.writeable = share.flags.writeable = False
    return LlamaPlacement(gpu_blocks, share, output_on_gpu, tuple(notes), frozenset(moved))


def _on_cpu(name: str, command: LlamaCommand, block_on_gpu: bool) -> bool:
    buffer = _buffer_of(name, command.overrides)
    if buffer is None:
        return not block_on_gpu
    return not is_gpu_buffer(buffer)


def _buffer_of(name: str, overrides) -> str | None:  # type: ignore[no-untyped-def]
    """The buffer of the first override whose pattern `name` matches (llama.cpp's rule)."""
    return next((buf for pat, buf, _ in overrides if search(pat, name)), None)


@dataclass(frozen=True)
class PlacementCost:
    """Seconds per decode token of a placement, by where the time goes."""

    gpu_blocks_s: float  # shared work of the offloaded blocks
    cpu_blocks_s: float  # shared work of the blocks on the CPU
    gpu_experts_s: float
    cpu_experts_s: float
    sync_s: float  # hand-overs between the devices
    head_s: float  # output head, sampling and the per-token fixed cost
    transitions: int  # device changes in one token's work
    # llama.cpp's expert cache (engine/llamacpp/moe_cache_price.py): its layers' steps are in
    # gpu_experts_s (compute and uploads) and sync_s (the ids' hand-over); these say how much.
    cache_upload_s: float = 0.0
    cache_sync_s: float = 0.0
    page_cache_s: float = 0.0  # the CPU's experts read back from disk (mapped, larger than RAM: page_cache_stream_s)

    @property
    def tpot_s(self) -> float:
        return (self.gpu_blocks_s + self.cpu_blocks_s + self.gpu_experts_s + self.cpu_experts_s + self.sync_s
                + self.head_s + self.page_cache_s)


def placement_cost(request: AdviseRequest, cost_model: CostModel, placement: LlamaPlacement, *,
                   stage: bool = False, kv_offload: bool = True, cached: "CachedLayers | None" = None) -> PlacementCost:
    """One decode token of `placement`. The routed experts come from `cost_model`'s
    sequential layer steps (all k on the GPU: h = k; all on the CPU: h = 0, less its
    hand-over), or with `stage` (GGML_OP_OFFLOAD_MIN_BATCH=1) its staged ones (the CPU's
    experts copied to the GPU and computed there); the blocks' shared work piece by piece,
    wherever each piece is, and the head on the CPU from `cost_model`'s split work
    (engine/cost/split_work.py); the head on the GPU from `cost_model`. Without
    `kv_offload` (-nkvo: the KV cache in host memory, where llama.cpp runs attention), an
    offloaded block's KV reads are priced on the CPU lane, between two hand-overs (the
    block's weights stay on the GPU). With `cached` (llama.cpp's expert cache), the layers it
    caches run their experts on the GPU from the cache at its priced step instead."""
    model, threads, k = request.model, request.threads, request.model.top_k
    steps = cost_model.state_costs(Execution.SEQUENTIAL, threads, k, 0)
    gpu_layer, cpu_layer = float(steps.total_s[k]), float(steps.total_s[0] - steps.sync_s[0])
    cpu_device = "cpu"
    if stage:
        cpu_layer, cpu_device = float(cost_model.state_costs(Execution.STAGE, threads, k, 0).total_s[0]), "gpu"
    sync = float(steps.sync_s[0])
    shared = split_work(request, cost_model)
    moe_at = {block: i for i, block in enumerate(model.moe_blocks)}
    devices: list[str] = []  # the device of each piece of the token's work, in order
    gpu_blocks_s = cpu_blocks_s = gpu_experts_s = cpu_experts_s = 0.0
    for block in range(model.n_blocks):
        on_gpu = bool(placement.gpu_blocks[block])
        gpu_s, cpu_s, block_devices = shared.block_s(block, placement.shared_split(model, request.quant, block),
                                                     on_gpu=on_gpu, kv_on_gpu=on_gpu and kv_offload,
                                                     threads=threads)
        gpu_blocks_s += gpu_s
        cpu_blocks_s += cpu_s
        devices += block_devices
        layer = moe_at.get(block)
        if layer is None:
            continue
        share = float(placement.expert_cpu_share[layer])
        if share < 1:
            gpu_experts_s += (1 - share) * gpu_layer
            devices.append("gpu")
        if share > 0 and cached is not None and cached.cached[layer]:
            gpu_experts_s += float(cached.compute_s[layer] + cached.upload_s[layer])
            devices.append("gpu")
        elif share > 0:
            cpu_experts_s += share * cpu_layer
            devices.append(cpu_device)
    if placement.output_on_gpu:
        head_s = cost_model.token_overhead_s()
        devices.append("gpu")
    else:
        head_s = shared.cpu_head_s(threads)
        devices.append("cpu")
    transitions = sum(a != b for a, b in zip(devices, devices[1:]))
    if cached is None:
        return PlacementCost(gpu_blocks_s, cpu_blocks_s, gpu_experts_s, cpu_experts_s, transitions * sync / 2,
                             head_s, transitions)
    cache_sync = float(cached.sync_s.sum())
    return PlacementCost(gpu_blocks_s, cpu_blocks_s, gpu_experts_s, cpu_experts_s,
                         transitions * sync / 2 + cache_sync, head_s, transitions,
                         cache_upload_s=float(cached.upload_s.sum()), cache_sync_s=cache_sync)


@dataclass(frozen=True)
class PlacementMemory:
    """What a placement keeps in VRAM and in host memory, and whether it fits."""

    vram_bytes: int  # weights, KV cache of the offloaded blocks, CUDA context and compute buffers
    vram_total_bytes: int | None  # the GPU's (None: unknown, not checked)
    host_bytes: int  # weights left on the CPU (and the KV cache of the blocks there)
    ram: "RamFit"

    @property
    def fits_vram(self) -> bool:
        return self.vram_total_bytes is None or self.vram_bytes <= self.vram_total_bytes

    def problem(self) -> str | None:
        """Why the command would not run (None: it fits)."""
        if not self.fits_vram:
            return (f"would not run: it needs {self.vram_bytes / GIB:.1f} GiB of VRAM (weights, KV cache, CUDA "
                    f"context and buffers) on a {self.vram_total_bytes / GIB:.1f} GiB GPU")
        if not self.ram.runs:  # a mapped file larger than RAM still runs (slower), a copy from pageable memory
            return f"would not run: {self.ram.describe()}"
        return None


def page_cache_stream_s(request: AdviseRequest, placement: LlamaPlacement, ram: "RamFit") -> float:
    """Seconds a decode token spends reading the CPU's routed experts back from disk when the
    mapped model is larger than the RAM it may use (`ram.streams`): the page cache lacks
    `need - budget` bytes, taken from the experts the routing profile routes least
    (host_memory.cold_expert_disk_bytes: the cache keeps the experts tokens reuse), and a
    token reads each absent expert it routes to. At the assumed PAGE_CACHE_DISK_BYTES_PER_S."""
    if not ram.streams:
        return 0.0
    model, quant = request.model, request.quant
    cpu_bytes = np.asarray(placement.expert_cpu_share) * np.asarray(model.expert_bytes_per_layer(quant), dtype=float)
    missing = ram.need_bytes - int(ram.budget_bytes or 0)
    return cold_expert_disk_bytes(request.profile.popularity(), cpu_bytes, model.top_k,
                                  missing) / PAGE_CACHE_DISK_BYTES_PER_S


def placement_memory(request: AdviseRequest, placement: LlamaPlacement, *, mapped: bool,
                     kv_offload: bool = True) -> PlacementMemory:
    """VRAM and host memory of `placement` at the request's context (llama.cpp keeps the
    token embedding in host memory unless it is tied to the output head; with
    `kv_offload` False, -nkvo, every block's KV cache is in host memory: llama-context.cpp
    allocates it on the CPU when cparams.offload_kqv is false)."""
    model, quant = request.model, request.quant
    kv_scale = request.kv_bytes_per_element / 2.0
    expert_layer = model.n_routed_experts * model.expert_bytes(quant)
    vram = host = 0.0
    for block in range(model.n_blocks):
        pieces = placement.shared_split(model, quant, block)
        vram += sum(g for g, _ in pieces)
        host += sum(c for _, c in pieces)
        kv = model.kv_read_bytes_per_layer(block, request.context_tokens) * kv_scale
        if placement.gpu_blocks[block] and kv_offload:
            vram += kv
        else:
            host += kv
    for share in placement.expert_cpu_share:
        host += share * expert_layer
        vram += (1 - share) * expert_layer
    head = model.head_bytes(quant)
    embedding = model.non_expert_bytes(quant) - model.gpu_non_expert_bytes(quant)  # 0 when tied
    if placement.output_on_gpu:
        vram += head
    elif not model.tied_embeddings:
        host += head
    host += embedding
    uses_gpu = (placement.gpu_blocks.any() or placement.output_on_gpu or bool((placement.expert_cpu_share < 1).any())
                or bool(placement.moved_shared))
    if uses_gpu:
        vram += RUNTIME_RESERVE_BYTES
    gpu_vram = request.platform.gpu.vram_bytes
    total = int(gpu_vram.value) if gpu_vram.known and uses_gpu else None
    ram_bytes = request.platform.cpu.ram_bytes
    ram = ram_fit(int(host), int(ram_bytes.value) if ram_bytes.known else None, mapped=mapped,
                  what="the weights left on the CPU")
    return PlacementMemory(int(vram), total, int(host), ram)
