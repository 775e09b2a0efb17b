"""ModelSpec: the shape of an MoE model and the byte sizes that follow from it.

Parameter counts come from the shape; byte sizes from a Quantization. Counts ignore
biases and norms' few thousand weights per block except where noted: they change the
byte totals by well under 0.1%. A model read from a GGUF file carries its exact byte
sizes (`exact_bytes`, summed from the file's tensor table); the byte methods then use
them and ignore the Quantization.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from engine.errors import CopeInputError
from engine.quant import Quantization

KV_CACHE_BYTES_PER_ELEMENT = 2  # llama.cpp's default F16 KV cache


@dataclass(frozen=True)
class AttentionShape:
    """Attention of one block. `kind` is "gqa" (incl. MHA/MQA) or "mla" (DeepSeek-V2)."""

    kind: str
    n_heads: int
    n_kv_heads: int
    head_dim: int
    # Multi-head latent attention (kind == "mla") only.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # Sliding-window layers cache at most this many tokens (0: full attention).
    sliding_window_tokens: int = 0
    sliding_window_every: int = 0  # every n-th block is full attention; 0: none slide

    def params(self, hidden_size: int) -> int:
        if self.kind == "mla":
            qk_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
            if self.q_lora_rank:
                q = hidden_size * self.q_lora_rank + self.q_lora_rank * self.n_heads * qk_dim
            else:
                q = hidden_size * self.n_heads * qk_dim
            kv_a = hidden_size * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv_b = self.kv_lora_rank * self.n_heads * (self.qk_nope_head_dim + self.v_head_dim)
            o = self.n_heads * self.v_head_dim * hidden_size
            return q + kv_a + kv_b + o
        q_dim = self.n_heads * self.head_dim
        kv_dim = self.n_kv_heads * self.head_dim
        return hidden_size * q_dim + 2 * hidden_size * kv_dim + q_dim * hidden_size

    def kv_elements_per_token(self) -> int:
        """Cached K and V elements per token and block."""
        if self.kind == "mla":
            # llama.cpp caches the compressed latent plus the shared rope key.
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.n_kv_heads * self.head_dim


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

    def __post_init__(self) -> None:
        sizes = (*self.expert_bytes_per_layer, *self.shared_layer_bytes, *self.shared_expert_bytes,
                 self.embedding_bytes, self.head_bytes, self.other_bytes)
        if any(isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in sizes):
            raise CopeInputError(f"{self.source}: byte sizes must be integers >= 0")
        if not self.expert_bytes_per_layer or min(self.expert_bytes_per_layer) <= 0:
            raise CopeInputError(f"{self.source}: every MoE layer needs routed experts of positive size")

    @property
    def max_expert_bytes(self) -> int:
        return max(self.expert_bytes_per_layer)

    def non_expert_bytes(self) -> int:
        return self.embedding_bytes + self.head_bytes + self.other_bytes + sum(self.shared_layer_bytes)


@dataclass(frozen=True)
class ModelSpec:
    id: str
    name: str
    arch: str  # llama.cpp architecture name (GGUF general.architecture)
    n_blocks: int
    moe_blocks: tuple[int, ...]  # block indices that hold routed experts
    n_routed_experts: int
    top_k: int
    n_shared_experts: int
    hidden_size: int
    expert_ffn_size: int
    shared_expert_ffn_size: int  # total FFN width of a block's shared experts
    dense_ffn_size: int  # FFN width of the dense (non-MoE) blocks
    vocab_size: int
    tied_embeddings: bool
    attention: AttentionShape
    source: str
    gated_experts: bool = True  # gate, up and down (SwiGLU); False: up and down only
    hf_repo: str = ""
    default_quant: str = "Q4_K_M"
    # Exact byte sizes from a GGUF file; None: computed from a Quantization's bits per weight.
    exact_bytes: ExactBytes | None = None

    def __post_init__(self) -> None:
        problems = []
        exact = self.exact_bytes
        if exact is not None:
            if len(exact.expert_bytes_per_layer) != len(self.moe_blocks):
                problems.append(f"exact sizes list {len(exact.expert_bytes_per_layer)} MoE layers, "
                                f"the model has {len(self.moe_blocks)}")
            if len(exact.shared_layer_bytes) != self.n_blocks or len(exact.shared_expert_bytes) != self.n_blocks:
                problems.append(f"exact sizes list {len(exact.shared_layer_bytes)} blocks, "
                                f"the model has {self.n_blocks}")
        if not self.moe_blocks:
            problems.append("no MoE blocks")
        if any(b < 0 or b >= self.n_blocks for b in self.moe_blocks):
            problems.append("an MoE block index is outside 0..n_blocks-1")
        if self.top_k < 1 or self.top_k > self.n_routed_experts:
            problems.append(f"top_k {self.top_k} not in 1..{self.n_routed_experts}")
        if self.hidden_size <= 0 or self.expert_ffn_size <= 0:
            problems.append("hidden and expert FFN sizes must be positive")
        if problems:
            raise CopeInputError(f"model {self.id}: " + "; ".join(problems))

    # --- shape ---------------------------------------------------------------
    @property
    def n_moe_layers(self) -> int:
        return len(self.moe_blocks)

    @property
    def dense_blocks(self) -> tuple[int, ...]:
        moe = set(self.moe_blocks)
        return tuple(b for b in range(self.n_blocks) if b not in moe)

    @property
    def n_experts_total(self) -> int:
        return self.n_moe_layers * self.n_routed_experts

    # --- parameter counts ----------------------------------------------------
    def expert_params(self) -> int:
        """Weights of one routed expert."""
        n_matrices = 3 if self.gated_experts else 2
        return n_matrices * self.hidden_size * self.expert_ffn_size

    def shared_layer_params(self, block: int) -> int:
        """Weights every token touches in one block, whatever the routing."""
        norms = 2 * self.hidden_size
        params = self.attention.params(self.hidden_size) + norms
        if block in self.moe_blocks:
            router = self.hidden_size * self.n_routed_experts
            shared = 3 * self.hidden_size * self.shared_expert_ffn_size
            params += router + shared
        else:
            params += 3 * self.hidden_size * self.dense_ffn_size
        return params

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    def head_params(self) -> int:
        """The output projection (shares the embedding's weights when tied)."""
        return self.vocab_size * self.hidden_size

    def non_expert_params(self) -> int:
        blocks = sum(self.shared_layer_params(b) for b in range(self.n_blocks))
        head = 0 if self.tied_embeddings else self.head_params()
        return self.embedding_params() + head + blocks

    def total_params(self) -> int:
        return self.non_expert_params() + self.n_experts_total * self.expert_params()

    # --- bytes under a quantization (exact from the file when there is one) ----
    def expert_bytes(self, quant: Quantization) -> int:
        """One routed expert: the size of one expert slot in VRAM."""
        if self.exact_bytes is not None:
            # Files may mix types across layers (llama.cpp's Q4_K_M stores some layers'
            # down projections at Q6_K), so experts differ in size; a slot must hold the
            # largest, and every slot is sized alike.
            return self.exact_bytes.max_expert_bytes
        return quant.expert_bytes(self.expert_params())

    def shared_layer_bytes(self, quant: Quantization, block: int) -> int:
        if self.exact_bytes is not None:
            return self.exact_bytes.shared_layer_bytes[block]
        return quant.non_expert_bytes(self.shared_layer_params(block))

    def head_bytes(self, quant: Quantization) -> int:
        if self.exact_bytes is not None:
            e = self.exact_bytes
            return e.embedding_bytes if self.tied_embeddings else e.head_bytes
        return quant.non_expert_bytes(self.head_params())

    def non_expert_bytes(self, quant: Quantization) -> int:
        if self.exact_bytes is not None:
            return self.exact_bytes.non_expert_bytes()
        return quant.non_expert_bytes(self.non_expert_params())

    def gpu_non_expert_bytes(self, quant: Quantization) -> int:
        """Non-expert weights that llama.cpp puts in VRAM with `-ngl 99`.

        The token embedding table stays in host memory (only looked up, never
        multiplied), unless it is tied to the output head, which is on the GPU.
        """
        if self.tied_embeddings:
            embedding = 0
        elif self.exact_bytes is not None:
            embedding = self.exact_bytes.embedding_bytes
        else:
            embedding = quant.non_expert_bytes(self.embedding_params())
        return self.non_expert_bytes(quant) - embedding

    def kv_read_bytes_per_layer(self, block: int, context_tokens: int) -> int:
        """KV-cache bytes one decode step reads in `block` with `context_tokens` cached."""
        a = self.attention
        tokens = context_tokens
        if a.sliding_window_tokens and not (a.sliding_window_every and (block + 1) % a.sliding_window_every == 0):
            tokens = min(context_tokens, a.sliding_window_tokens)
        return tokens * a.kv_elements_per_token() * KV_CACHE_BYTES_PER_ELEMENT

    def kv_cache_bytes(self, context_tokens: int) -> int:
        return sum(self.kv_read_bytes_per_layer(b, context_tokens) for b in range(self.n_blocks))


def model_from_dict(entry: Mapping[str, Any], *, origin: str) -> ModelSpec:
    """Build a ModelSpec from one catalog entry; `origin` names the file for errors."""
    try:
        attn = dict(entry["attention"])
        n_blocks = int(entry["n_blocks"])
        if "moe_blocks" in entry:
            moe_blocks = tuple(int(b) for b in entry["moe_blocks"])
        else:
            first_dense = int(entry.get("first_dense_blocks", 0))
            moe_blocks = tuple(range(first_dense, n_blocks))
        return ModelSpec(
            id=str(entry["id"]),
            name=str(entry["name"]),
            arch=str(entry["arch"]),
            n_blocks=n_blocks,
            moe_blocks=moe_blocks,
            n_routed_experts=int(entry["n_routed_experts"]),
            top_k=int(entry["top_k"]),
            n_shared_experts=int(entry.get("n_shared_experts", 0)),
            hidden_size=int(entry["hidden_size"]),
            expert_ffn_size=int(entry["expert_ffn_size"]),
            shared_expert_ffn_size=int(entry.get("shared_expert_ffn_size", 0)),
            dense_ffn_size=int(entry.get("dense_ffn_size", 0)),
            vocab_size=int(entry["vocab_size"]),
            tied_embeddings=bool(entry.get("tied_embeddings", False)),
            attention=AttentionShape(**attn),
            source=str(entry["source"]),
            gated_experts=bool(entry.get("gated_experts", True)),
            hf_repo=str(entry.get("hf_repo", "")),
            default_quant=str(entry.get("default_quant", "Q4_K_M")),
        )
    except CopeInputError as exc:
        if exc.path is None:  # ModelSpec's own checks: name the file they came from
            raise CopeInputError(str(exc), path=origin) from None
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise CopeInputError(f"bad model entry {entry.get('id', '?')!r}: {exc!r}", path=origin) from None
