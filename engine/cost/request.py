"""The question every cost model and the advise pipeline answer: a model, under a
quantization, on a platform, with the traces to replay and the settings of the run.

It lives beside the cost models because their factory (engine.cost.cost_models) builds
them from it; engine.advice.advise answers it with a Recommendation.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.hardware.platform import Platform
from engine.models.model import ModelSpec
from engine.models.quant import Quantization
from engine.replays.policy import Eviction
from engine.traces.popularity import PopularityProfile
from engine.traces.trace import RoutingTrace


@dataclass(frozen=True)
class AdviseRequest:
    model: ModelSpec
    quant: Quantization
    platform: Platform
    vram_budget_bytes: int
    context_tokens: int
    threads: int
    trace: RoutingTrace  # replayed
    profile: RoutingTrace | PopularityProfile  # popularity for fixed and initial residency
    evictions: tuple[Eviction, ...] = (Eviction.LRU,)
    prefetch_mode: str = "timed"
    prefetch_budget: int | None = None  # copies per layer; None: top_k
    notes: tuple[str, ...] = ()
    # What a decode step attends to: None is half the context (the mean over a conversation
    # that fills it); a llama-bench run decodes from its depth -d. And the KV cache type.
    attention_tokens: int | None = None
    kv_bytes_per_element: float = 2.0  # llama.cpp's default F16 cache
    kv_cache_type: str | None = None  # -ctk/-ctv as the user chose it (None: llama.cpp's default f16)
