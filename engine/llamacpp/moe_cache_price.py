"""What llama.cpp's expert cache (engine/llamacpp/moe_cache.py) costs a decode token.

A cached layer's step, as the runtime runs it: the scheduler stops at the layer's slot
lookup, so the selected ids come back to the host (one hand-over, every step, hit or
miss); the misses are uploaded, one copy per merged run and expert tensor; then the GPU
computes all k selected experts from the cache. Priced with the cost model's own lanes
(its stage step: copying n experts and computing them on the GPU) and its hand-over:
nothing here is fitted.

Uploads come from host memory that is pinned only when the weights are read into memory
(`-lm none`, `mlock`, `dio`; llama.cpp uses the GPU's host buffer type for them); from a
mapped file (the default) they are pageable, which the driver copies through a pinned
staging buffer of its own. PAGEABLE_H2D_FRACTION prices that: an assumption with no run
behind it, said wherever it is used.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.cost.cost_model import CostModel
from engine.llamacpp.moe_cache import MIB, CacheReplay, cache_groups, expert_layouts, replay_cache
from engine.replays.policy import Execution

# Pageable host-to-device copies at this share of the pinned bandwidth the cost model
# holds: an assumption (a second copy through the driver's staging buffer), not a fit.
PAGEABLE_H2D_FRACTION = 0.5
SOURCE_SHORT = "llama.cpp 4b060f27"  # moe_cache.SOURCE, as a figure's line names it
PAGEABLE_NOTE = (f"uploads from the mapped file (pageable memory) priced at {PAGEABLE_H2D_FRACTION:g}x the pinned "
                 "bandwidth: an assumption, no run behind it (-lm none pins the host experts)")


@dataclass(frozen=True)
class CacheSetting:
    """The cache flags of a command: --moe-cache-mib and whether uploads are pinned."""

    cache_mib: int
    pinned: bool

    @property
    def cache_bytes(self) -> int:
        return self.cache_mib * MIB


@dataclass(frozen=True)
class CachedLayers:
    """Per MoE layer (all L): seconds per token of a cached layer's expert step, split."""

    replay: CacheReplay
    compute_s: np.ndarray  # [L] the GPU's k experts a step, per token
    upload_s: np.ndarray  # [L] the misses' copies, per token
    sync_s: np.ndarray  # [L] the ids' hand-over, per token
    setting: CacheSetting

    @property
    def cached(self) -> np.ndarray:
        return self.replay.cached

    def layer_s(self) -> np.ndarray:
        return self.compute_s + self.upload_s + self.sync_s


def replay_for(request, host_layers: np.ndarray, setting: CacheSetting) -> CacheReplay:  # type: ignore[no-untyped-def]
    """The request's trace decoded through the cache llama.cpp builds over `host_layers`."""
    model = request.model
    groups = cache_groups(expert_layouts(model, request.quant), host_layers, model.n_routed_experts, model.top_k,
                          setting.cache_bytes)
    return replay_cache(request.trace.expert_ids, groups)


def cached_layer_costs(replay: CacheReplay, cost_model: CostModel, threads: int, setting: CacheSetting,
                       n_tensors: np.ndarray) -> CachedLayers:
    """Price `replay`'s cached layers with `cost_model`'s lanes; `n_tensors[l]`: the
    expert tensors each upload run copies (3, or 2 with a merged gate_up)."""
    k = replay.top_k
    stage = cost_model.state_costs(Execution.STAGE, threads, k, 0)
    seq = cost_model.state_costs(Execution.SEQUENTIAL, threads, k, 0)
    one, two = float(stage.copy_s[k - 1]), float(stage.copy_s[k - 2])  # copying 1 and 2 experts
    per_expert = two - one
    latency = max(one - per_expert, 0.0)
    if not setting.pinned:
        per_expert /= PAGEABLE_H2D_FRACTION
    steps = replay.hits_hist.sum(axis=1).astype(np.float64)
    tokens = float(replay.n_tokens)
    compute = np.where(replay.cached, steps * float(stage.gpu_s[0]) / tokens, 0.0)
    upload = (replay.misses() * per_expert + replay.segments * n_tensors * latency) / tokens
    sync = np.where(replay.cached, steps * float(seq.sync_s[0]) / tokens, 0.0)
    return CachedLayers(replay, compute, np.where(replay.cached, upload, 0.0), sync, setting)


def cache_for_placement(request, cost_model: CostModel, gpu_blocks: np.ndarray, expert_cpu_share: np.ndarray,  # type: ignore[no-untyped-def]
                        setting: CacheSetting) -> CachedLayers:
    """The cache llama.cpp builds for a placement (the MoE layers whose expert tensors are
    all in host memory and whose block is offloaded), replayed and priced."""
    model = request.model
    host_layers = (np.asarray(expert_cpu_share) >= 1.0) & np.asarray(gpu_blocks)[list(model.moe_blocks)]
    replay = replay_for(request, host_layers, setting)
    n_tensors = np.array([len(t) for t in expert_layouts(model, request.quant)], dtype=np.float64)
    return cached_layer_costs(replay, cost_model, request.threads, setting, n_tensors)


def describe_cache(cached: CachedLayers) -> str:
    """E.g. "llama.cpp's expert cache: 1,024 MiB, 412 slots for 24 layers (13%), hit rate 61%"."""
    r = cached.replay
    live = [g for g in r.groups if g.n_slots]
    if not live:
        return (f"llama.cpp's expert cache ({cached.setting.cache_mib:,} MiB) holds less than one token's experts "
                "in every group: nothing is cached, the host layers run on the CPU")
    layers = sum(len(g.layers) for g in live)
    slots = sum(g.n_slots for g in live)
    out = (f"llama.cpp's expert cache (--moe-cache-mib {cached.setting.cache_mib}, LRU as in {SOURCE_SHORT}): "
           f"{slots:,} slots for {layers} host layers in {len(live)} group(s) "
           f"({100 * slots / (layers * r.groups[0].n_experts):.0f}% of their experts), decode hit rate "
           f"{100 * r.hit_rate:.0f}%")
    skipped = sum(len(g.layers) for g in r.groups if not g.n_slots)
    if skipped:
        out += f"; {skipped} host layer(s) left uncached (their share holds less than one token's experts)"
    if not cached.setting.pinned:
        out += f"; {PAGEABLE_NOTE}"
    return out

