"""llama.cpp's own GPU cache of host experts (`--moe-cache-mib N`), as the runtime builds it.

Since release b11480 (ggml-org/llama.cpp PR #29887) llama.cpp keeps, in VRAM, a cache of
the experts of the MoE layers whose expert tensors all sit in host memory (`-cmoe`,
`-ncmoe N`, `-ot ...=CPU`). Read in src/llama-moe-cache.cpp at commit
4b060f27a806dab2072a66007607f0e98b6b9b40 (the same strings are in the libllama of
build 11739, commit 0ce8cd11, that a package registry serves):

- Groups: the cached layers of one device whose expert tensors have the same layout
  (type, shape, expert stride) share one LRU over their slots. A Q4_K_M file stores the
  down projections of some layers at Q6_K, so those layers form a second group.
- Budget: `--moe-cache-mib` is split among the groups by their host expert bytes, so each
  caches the same fraction of its experts. A group's slots are the most n whose banks,
  one per expert tensor, each of n + 1 experts (one spare: CUDA's MMQ reads past the
  last), padded to the buffer's alignment, fit its share; a group with fewer slots than
  one token's experts (top-k) is left uncached, its experts computed on the CPU.
- Use: only ubatches of at most 32 tokens read and change the cache (decode, speculative
  verification); larger ones copy the cached experts and upload the rest without
  evicting. A decode step of a cached layer reads the selected ids back to the host,
  plans the slots (engine/replays/moe_cache_kernels.py), uploads the misses (runs of
  consecutive expert ids to consecutive slots merged into one copy per tensor) and the
  GPU computes every selected expert from the cache.

Several GPUs split the budget by free memory or `-ts`: COPE models one card's cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from engine.core.errors import CopeInputError
from engine.models.quant_mix import tensor_bytes, tensor_types
from engine.replays.compiled import moe_cache_kernels

SOURCE = "ggml-org/llama.cpp src/llama-moe-cache.cpp at 4b060f27"
FIRST_RELEASE = "b11480"  # PR #29887: --moe-cache-mib
MAX_BATCH_TOKENS = 32  # llama_moe_cache::impl::max_batch
# ggml-cuda.cu: ggml_backend_cuda_buffer_type_get_alignment returns 128.
CUDA_BUFFER_ALIGNMENT = 128
MIB = 1024 * 1024


@dataclass(frozen=True)
class CacheGroup:
    """Cached layers of one layout: MoE-layer indices, each expert tensor's bytes per expert."""

    layers: tuple[int, ...]
    tensor_expert_bytes: tuple[int, ...]  # nb[2] of gate, up, down (or gate_up, down)
    n_experts: int
    budget_bytes: int  # its share of --moe-cache-mib
    n_slots: int  # 0: too few for one token's experts, not cached

    @property
    def expert_bytes(self) -> int:
        return sum(self.tensor_expert_bytes)

    @property
    def host_bytes(self) -> int:
        return self.expert_bytes * self.n_experts * len(self.layers)

    @property
    def bank_bytes(self) -> int:
        """VRAM its banks take (0 when uncached)."""
        return bank_bytes(self.tensor_expert_bytes, self.n_slots) if self.n_slots else 0

    @property
    def cached_fraction(self) -> float:
        return self.n_slots / (len(self.layers) * self.n_experts)


def _pad(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def bank_bytes(tensor_expert_bytes: tuple[int, ...], n_slots: int, alignment: int = CUDA_BUFFER_ALIGNMENT) -> int:
    """`alloc_size`: one bank per expert tensor, n_slots + 1 experts each, padded."""
    return sum(_pad(b * (n_slots + 1), alignment) for b in tensor_expert_bytes)


def slots_for(tensor_expert_bytes: tuple[int, ...], budget_bytes: int, max_slots: int,
              alignment: int = CUDA_BUFFER_ALIGNMENT) -> int:
    """The most slots (up to max_slots) whose banks fit `budget_bytes`: the constructor's
    `while (alloc_size(g, n + 1) <= budget) n++`, in closed form then checked."""
    per = sum(tensor_expert_bytes)
    n = max(min(budget_bytes // per - 1, max_slots), 0)  # alloc(n) >= per * (n + 1)
    while n > 0 and bank_bytes(tensor_expert_bytes, n, alignment) > budget_bytes:
        n -= 1
    while n < max_slots and bank_bytes(tensor_expert_bytes, n + 1, alignment) <= budget_bytes:
        n += 1
    return n


def cache_groups(layouts: tuple[tuple[int, ...], ...], host_layers: np.ndarray, n_experts: int, top_k: int,
                 cache_bytes: int, alignment: int = CUDA_BUFFER_ALIGNMENT) -> tuple[CacheGroup, ...]:
    """The groups llama.cpp makes for the MoE layers in `host_layers` ([L] bool: every expert
    tensor in host memory), `layouts[l]` each layer's tensor bytes per expert, in first-seen
    order; one device with `cache_bytes` of cache."""
    if cache_bytes < 0:
        raise CopeInputError(f"--moe-cache-mib: the cache size must be >= 0, got {cache_bytes / MIB:g} MiB")
    members: dict[tuple[int, ...], list[int]] = {}
    for layer in np.flatnonzero(host_layers):
        members.setdefault(layouts[int(layer)], []).append(int(layer))
    total = sum(sum(layout) * n_experts * len(layers) for layout, layers in members.items())
    groups = []
    for layout, layers in members.items():
        host = sum(layout) * n_experts * len(layers)
        budget = int(float(cache_bytes) * host / total)  # (size_t) ((double) size*g.host_bytes/host_bytes)
        n = slots_for(layout, budget, len(layers) * n_experts, alignment)
        groups.append(CacheGroup(tuple(layers), layout, n_experts, budget, n if n >= top_k else 0))
    return tuple(groups)


def used_for_batch(n_tokens: int, top_k: int, n_experts: int, n_slots: int) -> bool:
    """`get_slot_map`: whether a ubatch of n_tokens reads (and changes) a group's cache."""
    return 0 < n_tokens <= MAX_BATCH_TOKENS and n_slots > 0 and min(n_tokens * top_k, n_experts) <= n_slots


@dataclass(frozen=True)
class CacheReplay:
    """What decoding a trace through the cache did, per MoE layer (all L; uncached ones zero)."""

    groups: tuple[CacheGroup, ...]
    hits_hist: np.ndarray  # int64 [L, k+1]: cached layers' steps by distinct hits
    segments: np.ndarray  # int64 [L]: upload runs (one copy per expert tensor each)
    cached: np.ndarray  # bool [L]
    n_tokens: int

    @property
    def top_k(self) -> int:
        return self.hits_hist.shape[1] - 1

    def hits(self) -> np.ndarray:
        return self.hits_hist @ np.arange(self.top_k + 1)

    def misses(self) -> np.ndarray:
        return self.hits_hist.sum(axis=1) * self.top_k - self.hits()

    @property
    def hit_rate(self) -> float:
        steps = self.hits_hist.sum() * self.top_k
        return float(self.hits().sum() / steps) if steps else 0.0

    @property
    def vram_bytes(self) -> int:
        return sum(g.bank_bytes for g in self.groups)

    def group_counts(self) -> list[dict]:
        """Per group: its layers, slots, hits, misses and upload runs (the tests' and
        upstream's log line figures)."""
        out = []
        for g in self.groups:
            idx = list(g.layers)
            out.append({"layers": idx, "slots": g.n_slots, "hits": int(self.hits()[idx].sum()),
                        "misses": int(self.misses()[idx].sum()) if g.n_slots else 0,
                        "segments": int(self.segments[idx].sum())})
        return out


def replay_cache(ids: np.ndarray, groups: tuple[CacheGroup, ...]) -> CacheReplay:
    """Decode every token of `ids` ([T, L, k] expert ids, one ubatch a token) through the
    cache `groups`, each group its own LRU, every group from empty."""
    ids32 = np.ascontiguousarray(ids, dtype=np.int32)
    n_tokens, n_layers, k = ids32.shape
    hist = np.zeros((n_layers, k + 1), dtype=np.int64)
    segments = np.zeros(n_layers, dtype=np.int64)
    cached = np.zeros(n_layers, dtype=bool)
    for g in groups:
        if g.n_slots == 0:
            continue
        layers = np.asarray(g.layers, dtype=np.int64)
        if (ids32[:, layers] < 0).any() or (ids32[:, layers] >= g.n_experts).any():
            raise CopeInputError(f"expert ids outside 0..{g.n_experts - 1} in the trace replayed through the cache")
        g_hist = np.zeros((len(layers), k + 1), dtype=np.int64)
        g_seg = np.zeros(len(layers), dtype=np.int64)
        moe_cache_kernels().moe_cache_lru_group(ids32, layers, g.n_experts, g.n_slots, g_hist, g_seg)
        hist[layers] = g_hist
        segments[layers] = g_seg
        cached[layers] = True
    return CacheReplay(groups, hist, segments, cached, n_tokens)


@lru_cache(maxsize=64)
def expert_layouts(model, quant) -> tuple[tuple[int, ...], ...]:  # type: ignore[no-untyped-def]
    """Each MoE layer's cached expert tensors (gate, up, down or gate_up, down: the weights,
    not their biases), as bytes per expert: what groups the layers. From llama.cpp's
    quantization mix where COPE has it (a catalog model), tensor by tensor; from a model
    file, whose tensor table COPE sums per layer, one figure a layer (layers of equal bytes
    grouped as one layout)."""
    if model.exact_bytes is None and quant.llama_ftype:
        per_block: dict[int, list[int]] = {}
        for t, type_name in tensor_types(model, quant.llama_ftype):
            if t.is_routed_expert and t.name.endswith(".weight") and t.block is not None:
                per_block.setdefault(t.block, []).append(tensor_bytes(t, type_name) // t.experts)
        if all(b in per_block for b in model.moe_blocks):
            return tuple(tuple(per_block[b]) for b in model.moe_blocks)
    return tuple((b,) for b in model.expert_bytes_per_layer(quant))
