"""Byte sizes summed tensor by tensor: from a GGUF's tensor table (engine/models and the
GGUF reader) or from llama.cpp's quantization rules (engine.models.quant_mix)."""

from __future__ import annotations

from dataclasses import dataclass

from engine.core.errors import CopeInputError


@dataclass(frozen=True)
class ExactBytes:
    """Byte sizes summed from a model file's tensor table, not computed from bits per weight."""

    # One routed expert (its gate, up and down rows and their biases) per MoE block, in
    # `moe_blocks` order: a layer's expert tensors' bytes divided by the expert count.
    expert_bytes_per_layer: tuple[int, ...]
    # Per block (all n_blocks): every tensor but the routed experts (attention, norms,
    # router, shared experts, a dense block's FFN).
    shared_layer_bytes: tuple[int, ...]
    # Per block: the shared experts' (`_shexp`) part of shared_layer_bytes.
    shared_expert_bytes: tuple[int, ...]
    embedding_bytes: int  # token_embd
    head_bytes: int  # output; 0 when the head is tied to the embedding
    other_bytes: int  # tensors outside the blocks besides those two (output norm, rope factors)
    quant_name: str  # the file type llama.cpp wrote, e.g. "Q4_K_M"
    quant_summary: str  # the tensor types actually used, e.g. "experts: Q4_K (gate, up) / Q6_K (down)"
    source: str  # the file(s) the sizes come from
    # Tensors the file holds but llama.cpp does not load: the multi-token-prediction
    # (NextN) blocks GLM-4.5 files keep after the model's blocks. In the file size only.
    skipped_bytes: int = 0

    def __post_init__(self) -> None:
        sizes = (*self.expert_bytes_per_layer, *self.shared_layer_bytes, *self.shared_expert_bytes,
                 self.embedding_bytes, self.head_bytes, self.other_bytes, self.skipped_bytes)
        if any(isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in sizes):
            raise CopeInputError(f"{self.source}: byte sizes must be integers >= 0")
        if not self.expert_bytes_per_layer or min(self.expert_bytes_per_layer) <= 0:
            raise CopeInputError(f"{self.source}: every MoE layer needs routed experts of positive size")

    @property
    def max_expert_bytes(self) -> int:
        return max(self.expert_bytes_per_layer)

    def non_expert_bytes(self) -> int:
        return self.embedding_bytes + self.head_bytes + self.other_bytes + sum(self.shared_layer_bytes)
