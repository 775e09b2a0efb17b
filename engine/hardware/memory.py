"""From a VRAM budget to expert slots, with the arithmetic kept for display."""

from __future__ import annotations

from dataclasses import dataclass

from engine.models.model import ModelSpec
from engine.models.quant import Quantization

GIB = 1024**3

# CUDA context plus llama.cpp's compute buffers at the default batch of 512: a few
# hundred MiB each on the models in the catalog. Assumed, not measured.
RUNTIME_RESERVE_BYTES = 1 * GIB
# Headroom so that a plan that fits on paper survives allocator fragmentation and
# the first long prompt.
SAFETY_MARGIN_FRACTION = 0.05


@dataclass(frozen=True)
class MemoryPlan:
    vram_budget_bytes: int
    non_expert_bytes: int  # attention, norms, routers, shared experts, output head
    kv_cache_bytes: int  # at the chosen context
    runtime_reserve_bytes: int
    safety_margin_bytes: int
    staging_bytes: int  # GPU-side landing room for one layer's copied misses
    expert_bytes: int  # one routed expert
    n_experts_total: int
    n_routed_experts_per_layer: int
    context_tokens: int

    @property
    def fixed_bytes(self) -> int:
        return (
            self.non_expert_bytes
            + self.kv_cache_bytes
            + self.runtime_reserve_bytes
            + self.safety_margin_bytes
        )

    def expert_room_bytes(self, *, staging: bool) -> int:
        room = self.vram_budget_bytes - self.fixed_bytes - (self.staging_bytes if staging else 0)
        return max(room, 0)

    def slots(self, *, staging: bool) -> int:
        """Expert slots left in the budget, never more than the model has experts."""
        return min(self.expert_room_bytes(staging=staging) // self.expert_bytes, self.n_experts_total)

    def gpu_layers(self) -> int:
        """Whole MoE layers whose experts fit (for layer partition)."""
        return self.slots(staging=False) // self.n_routed_experts_per_layer

    @property
    def all_gpu_fits(self) -> bool:
        return self.slots(staging=False) >= self.n_experts_total

    @property
    def fits_at_all(self) -> bool:
        return self.vram_budget_bytes >= self.fixed_bytes

    def runtime_expert_room_bytes(self) -> int:
        """What a runtime may allocate for experts: the budget less everything else it
        allocates (the safety margin is headroom a plan keeps, not an allocation)."""
        return self.vram_budget_bytes - self.vram_used_bytes(0, staging=False)

    def vram_used_bytes(self, slots: int, *, staging: bool) -> int:
        """What the runtime allocates for `slots` experts: the headroom a plan keeps (the
        safety margin) is not used, so it is not counted; `cope estimate` counts the same."""
        return (self.fixed_bytes - self.safety_margin_bytes + slots * self.expert_bytes
                + (self.staging_bytes if staging else 0))

    def lines(self) -> list[str]:
        """The arithmetic as a person reads it (GiB, one step a line)."""

        def row(sign: str, label: str, n: int, tail: str = "") -> str:
            return f"{sign} {label:<34}{n / GIB:8.2f} GiB{tail}"

        each = f" ({self.expert_bytes / 2**20:.2f} MiB each)"
        return [
            row(" ", "VRAM budget", self.vram_budget_bytes),
            row("-", "non-expert weights", self.non_expert_bytes),
            row("-", f"KV cache ({self.context_tokens} tokens)", self.kv_cache_bytes),
            row("-", "CUDA context + compute buffers", self.runtime_reserve_bytes),
            row("-", f"safety margin ({SAFETY_MARGIN_FRACTION:.0%})", self.safety_margin_bytes),
            row("=", "room for experts", self.expert_room_bytes(staging=False),
                f"  -> {self.slots(staging=False)} of {self.n_experts_total} experts{each}"),
            row("-", "staging (when misses are copied)", self.staging_bytes,
                f"  -> {self.slots(staging=True)} experts"),
        ]

    def to_dict(self) -> dict:
        # by hand: derived room and slots among the fields, the per-layer expert count left out
        return {
            "vram_budget_bytes": self.vram_budget_bytes,
            "non_expert_bytes": self.non_expert_bytes,
            "kv_cache_bytes": self.kv_cache_bytes,
            "context_tokens": self.context_tokens,
            "runtime_reserve_bytes": self.runtime_reserve_bytes,
            "safety_margin_bytes": self.safety_margin_bytes,
            "staging_bytes": self.staging_bytes,
            "expert_bytes": self.expert_bytes,
            "expert_room_bytes": self.expert_room_bytes(staging=False),
            "slots": self.slots(staging=False),
            "slots_with_staging": self.slots(staging=True),
            "n_experts_total": self.n_experts_total,
            "all_gpu_fits": self.all_gpu_fits,
        }


def plan_memory(
    model: ModelSpec, quant: Quantization, *, vram_budget_bytes: int, context_tokens: int,
    kv_bytes_per_element: float = 2.0,
) -> MemoryPlan:
    expert_bytes = model.expert_bytes(quant)
    return MemoryPlan(
        vram_budget_bytes=int(vram_budget_bytes),
        non_expert_bytes=model.gpu_non_expert_bytes(quant),
        # Attention blocks' KV cache, plus the fixed per-sequence state of linear-attention
        # blocks (hybrid models; llama.cpp keeps both in its one hybrid memory).
        # (kv_bytes_per_element: -ctk/-ctv's type; the recurrent state stays F32.)
        kv_cache_bytes=int(model.kv_cache_bytes(context_tokens) * kv_bytes_per_element / 2.0)
        + model.recurrent_state_bytes(),
        runtime_reserve_bytes=RUNTIME_RESERVE_BYTES,
        safety_margin_bytes=int(vram_budget_bytes * SAFETY_MARGIN_FRACTION),
        # A layer misses at most top_k experts at once.
        staging_bytes=model.top_k * expert_bytes,
        expert_bytes=expert_bytes,
        n_experts_total=model.n_experts_total,
        n_routed_experts_per_layer=model.n_routed_experts,
        context_tokens=context_tokens,
    )
