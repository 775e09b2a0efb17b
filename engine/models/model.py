"""ModelSpec: the shape of an MoE model and the byte sizes that follow from it.

Parameter counts come from the shape; byte sizes from a Quantization. Counts ignore
biases and norms' few thousand weights per block except where noted: they change the
byte totals by well under 0.1%. Where the sizes come from, in order:
- a model read from a GGUF file carries its exact byte sizes (`exact_bytes`, summed from
  the file's tensor table); the byte methods use them and ignore the Quantization;
- a Quantization that names a llama.cpp file type (`llama_ftype`, every row of
  assets/quantizations.json) is applied tensor by tensor with llama.cpp's own rules
  (`engine.models.quant_mix`: Q4_K_M's Q6_K layers, K-quant fallbacks, ...), giving the sizes
  the GGUF llama-quantize would write;
- otherwise the Quantization's average bits per weight.

Blocks mix tokens with attention (full, or over a sliding window) or with a linear
(recurrent) layer; only attention blocks have a KV cache, linear blocks a fixed state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from engine.core.errors import CopeInputError
from engine.models.attention import AttentionShape, LinearAttentionShape
from engine.models.exact_bytes import ExactBytes
from engine.models.quant import Quantization
from engine.models.quant_mix import mixed_sizes

__all__ = ["AttentionShape", "ExactBytes", "LinearAttentionShape", "ModelSpec", "model_from_dict", "model_read"]

KV_CACHE_BYTES_PER_ELEMENT = 2  # llama.cpp's default F16 KV cache
BLOCK_KINDS = ("full_attention", "sliding_attention", "linear_attention")


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
    # The local GGUF it was read from, as the person named it (a split's first shard, where
    # llama.cpp starts): what a printed command loads; "" when not read from a local file.
    gguf_path: str = ""
    gated_experts: bool = True  # gate, up and down (SwiGLU); False: up and down only
    hf_repo: str = ""
    default_quant: str = "Q4_K_M"
    # Exact byte sizes from a GGUF file; None: computed from a Quantization.
    exact_bytes: ExactBytes | None = None
    # Blocks whose token mixer is a linear (recurrent) layer instead of attention, and its shape.
    linear_blocks: tuple[int, ...] = ()
    linear_attention: LinearAttentionShape | None = None
    # Multi-token-prediction blocks a GGUF file stores after the n_blocks (GLM-4.5's NextN
    # layer); llama.cpp does not run them, so they count in the file size only.
    nextn_blocks: int = 0
    # Other names of the same weights' shape (fine-tunes, instruct releases).
    aliases: tuple[str, ...] = ()
    # The type the checkpoint ships its routed experts in, which llama.cpp's converter keeps
    # whatever its output type (gpt-oss: "MXFP4"); "" when the experts are plain floats.
    native_expert_type: str = ""
    # What the shape gets wrong, as read from a config.json (Jamba's Mamba blocks counted as
    # attention, ...): said with every plan made for the model, not only in its provenance.
    caveats: tuple[str, ...] = ()
    # The context it was trained for, in tokens: llama.cpp's n_ctx_train, what `-c 0` uses
    # (GGUF `<arch>.context_length`, written from config.json's max_position_embeddings);
    # None: unknown.
    context_length: int | None = None
    # A GGUF whose experts store gate and up as one tensor (blk.N.ffn_gate_up_exps): the
    # MoE-cache fork's cache stays off for it (engine/runtimes/llamacpp.py).
    merged_gate_up: bool = False
    # The Hugging Face checkpoint's config.json: `torch_dtype` ("bfloat16", ...) and
    # `quantization_config.quant_method` ("fp8", "mxfp4"); "" when not known or none. What
    # SGLang builds its GPU side from (engine/runtimes/sglang_memory.py).
    checkpoint_dtype: str = ""
    checkpoint_quant: str = ""

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
        if any(b < 0 or b >= self.n_blocks for b in self.linear_blocks):
            problems.append("a linear-attention block index is outside 0..n_blocks-1")
        if len(set(self.linear_blocks)) != len(self.linear_blocks):
            problems.append("a linear-attention block is listed twice")
        if self.linear_blocks and self.linear_attention is None:
            problems.append("linear-attention blocks need the linear-attention shape")
        if self.nextn_blocks < 0:
            problems.append("nextn_blocks must be >= 0")
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

    @property
    def attention_blocks(self) -> tuple[int, ...]:
        """Blocks that attend (and so hold a KV cache)."""
        linear = set(self.linear_blocks)
        return tuple(b for b in range(self.n_blocks) if b not in linear)

    def block_kind(self, block: int) -> str:
        """"full_attention", "sliding_attention" (a window or chunk) or "linear_attention"."""
        if block in self.linear_blocks:
            return "linear_attention"
        return "sliding_attention" if self.attention.slides(block) else "full_attention"

    @property
    def block_kinds(self) -> tuple[str, ...]:
        return tuple(self.block_kind(b) for b in range(self.n_blocks))

    # --- parameter counts ----------------------------------------------------
    def expert_params(self) -> int:
        """Weights of one routed expert."""
        n_matrices = 3 if self.gated_experts else 2
        return n_matrices * self.hidden_size * self.expert_ffn_size

    def shared_layer_params(self, block: int) -> int:
        """Weights every token touches in one block, whatever the routing."""
        norms = 2 * self.hidden_size
        if block in self.linear_blocks:
            assert self.linear_attention is not None  # checked in __post_init__
            mixer = self.linear_attention.params(self.hidden_size)
        else:
            mixer = self.attention.params(self.hidden_size)
        params = mixer + norms
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
    def tensor_sizes(self, quant: Quantization) -> ExactBytes | None:
        """Per-tensor byte sizes: the file's, else llama.cpp's mix for `quant`; None: use bits per weight."""
        if self.exact_bytes is not None:
            return self.exact_bytes
        if quant.llama_ftype:
            return mixed_sizes(self, quant)
        return None

    def expert_bytes(self, quant: Quantization) -> int:
        """One routed expert: the size of one expert slot in VRAM.

        Mixes differ across layers (llama.cpp's Q4_K_M stores half the layers' down
        projections at Q6_K). From a model file, the largest: the file's experts must
        fit the slots COPE's executor fills with them. Without a file, the mean over the
        layers of llama.cpp's mix, as the averaged bits per weight always gave: what a
        decode step reads per expert on average and what whole-layer placement
        (--n-cpu-moe) holds per expert; `expert_bytes_per_layer` has each layer's.
        """
        if self.exact_bytes is not None:
            return self.exact_bytes.max_expert_bytes
        sizes = self.tensor_sizes(quant)
        if sizes is not None:
            per_layer = sizes.expert_bytes_per_layer
            return -(-sum(per_layer) // len(per_layer))
        return quant.expert_bytes(self.expert_params())

    def expert_bytes_per_layer(self, quant: Quantization) -> tuple[int, ...]:
        """One routed expert's bytes in each MoE layer (`moe_blocks` order)."""
        sizes = self.tensor_sizes(quant)
        if sizes is not None:
            return sizes.expert_bytes_per_layer
        return (quant.expert_bytes(self.expert_params()),) * self.n_moe_layers

    def shared_layer_bytes(self, quant: Quantization, block: int) -> int:
        sizes = self.tensor_sizes(quant)
        if sizes is not None:
            return sizes.shared_layer_bytes[block]
        return quant.non_expert_bytes(self.shared_layer_params(block))

    def head_bytes(self, quant: Quantization) -> int:
        sizes = self.tensor_sizes(quant)
        if sizes is not None:
            return sizes.embedding_bytes if self.tied_embeddings else sizes.head_bytes
        return quant.non_expert_bytes(self.head_params())

    def non_expert_bytes(self, quant: Quantization) -> int:
        sizes = self.tensor_sizes(quant)
        if sizes is not None:
            return sizes.non_expert_bytes()
        return quant.non_expert_bytes(self.non_expert_params())

    def gpu_non_expert_bytes(self, quant: Quantization) -> int:
        """Non-expert weights that llama.cpp puts in VRAM with `-ngl 99`.

        The token embedding table stays in host memory (only looked up, never
        multiplied), unless it is tied to the output head, which is on the GPU.
        """
        sizes = self.tensor_sizes(quant)
        if self.tied_embeddings:
            embedding = 0
        elif sizes is not None:
            embedding = sizes.embedding_bytes
        else:
            embedding = quant.non_expert_bytes(self.embedding_params())
        return self.non_expert_bytes(quant) - embedding

    def weight_bytes(self, quant: Quantization) -> int:
        """Every weight llama.cpp loads: all routed experts plus the non-expert weights."""
        experts = sum(self.expert_bytes_per_layer(quant)) * self.n_routed_experts
        return experts + self.non_expert_bytes(quant)

    def file_bytes(self, quant: Quantization) -> int:
        """The GGUF file's tensor data: the loaded weights plus blocks llama.cpp skips (NextN)."""
        sizes = self.tensor_sizes(quant)
        skipped = sizes.skipped_bytes if sizes is not None else 0
        return self.weight_bytes(quant) + skipped

    # --- per-sequence caches ----------------------------------------------------
    def kv_read_bytes_per_layer(self, block: int, context_tokens: int) -> int:
        """KV-cache bytes one decode step reads in `block` with `context_tokens` cached.

        Zero for a linear-attention block: it keeps a fixed state instead
        (`recurrent_state_bytes_per_layer`).
        """
        if block in self.linear_blocks:
            return 0
        a = self.attention
        tokens = min(context_tokens, a.sliding_window_tokens) if a.slides(block) else context_tokens
        return tokens * a.kv_elements_per_token() * KV_CACHE_BYTES_PER_ELEMENT

    def kv_cache_bytes(self, context_tokens: int) -> int:
        return sum(self.kv_read_bytes_per_layer(b, context_tokens) for b in range(self.n_blocks))

    def recurrent_state_bytes_per_layer(self, block: int) -> int:
        """A linear-attention block's state for one sequence (read and written every step)."""
        if block not in self.linear_blocks or self.linear_attention is None:
            return 0
        return self.linear_attention.state_bytes()

    def recurrent_state_bytes(self) -> int:
        """All linear-attention blocks' states for one sequence: fixed, whatever the context."""
        return sum(self.recurrent_state_bytes_per_layer(b) for b in self.linear_blocks)


def model_read(where: str, n_blocks: int, moe_blocks: tuple[int, ...], n_experts: int, top_k: int, n_shared: int,
               hidden: int, expert_ffn: int, shared_ffn: int, dense_ffn: int, vocab: int, **fields: Any) -> ModelSpec:
    """The one builder of a ModelSpec from what a file says of a model (a catalog entry,
    a config.json, a GGUF's header): the shape every reader reads, in this order (blocks,
    the MoE ones, routed experts and how many a token uses, shared experts; the hidden,
    expert, shared-expert and dense FFN widths; the vocabulary), then ModelSpec's other
    fields by name. ModelSpec's own checks answer in one line that names `where`."""
    try:
        return ModelSpec(n_blocks=n_blocks, moe_blocks=moe_blocks, n_routed_experts=n_experts, top_k=top_k,
                         n_shared_experts=n_shared, hidden_size=hidden, expert_ffn_size=expert_ffn,
                         shared_expert_ffn_size=shared_ffn, dense_ffn_size=dense_ffn, vocab_size=vocab, **fields)
    except CopeInputError as exc:
        raise CopeInputError(str(exc), path=exc.path or where) from None


def model_from_dict(entry: Mapping[str, Any], *, origin: str) -> ModelSpec:
    """Build a ModelSpec from one catalog entry; `origin` names the file for errors.

    Block placement, besides an explicit `moe_blocks` list: `first_dense_blocks` (DeepSeek's
    first_k_dense_replace) and `moe_layer_step` (Llama 4's interleave_moe_layer_step: block
    i holds experts when (i + 1) % step == 0). Linear-attention blocks: `linear_blocks`, or
    `full_attention_interval` (every n-th block attends, the others are linear).
    """
    try:
        attn = dict(entry["attention"])
        n_blocks = int(entry["n_blocks"])
        if "moe_blocks" in entry:
            moe_blocks = tuple(int(b) for b in entry["moe_blocks"])
        else:
            first_dense = int(entry.get("first_dense_blocks", 0))
            step = int(entry.get("moe_layer_step", 1))
            moe_blocks = tuple(b for b in range(first_dense, n_blocks) if (b + 1) % step == 0)
        linear = entry.get("linear_attention")
        if "linear_blocks" in entry:
            linear_blocks = tuple(int(b) for b in entry["linear_blocks"])
        elif "full_attention_interval" in entry:
            every = int(entry["full_attention_interval"])
            linear_blocks = tuple(b for b in range(n_blocks) if (b + 1) % every)
        else:
            linear_blocks = ()
        return model_read(
            origin, n_blocks, moe_blocks, int(entry["n_routed_experts"]), int(entry["top_k"]),
            int(entry.get("n_shared_experts", 0)), int(entry["hidden_size"]), int(entry["expert_ffn_size"]),
            int(entry.get("shared_expert_ffn_size", 0)), int(entry.get("dense_ffn_size", 0)), int(entry["vocab_size"]),
            id=str(entry["id"]),
            name=str(entry["name"]),
            arch=str(entry["arch"]),
            tied_embeddings=bool(entry.get("tied_embeddings", False)),
            attention=AttentionShape(**attn),
            source=str(entry["source"]),
            gated_experts=bool(entry.get("gated_experts", True)),
            hf_repo=str(entry.get("hf_repo", "")),
            default_quant=str(entry.get("default_quant", "Q4_K_M")),
            linear_blocks=linear_blocks,
            linear_attention=LinearAttentionShape(**dict(linear)) if linear else None,
            nextn_blocks=int(entry.get("nextn_blocks", 0)),
            aliases=tuple(str(a) for a in entry.get("aliases", ())),
            native_expert_type=str(entry.get("native_expert_type", "")),
            context_length=int(entry["context_length"]) if entry.get("context_length") else None,
            checkpoint_dtype=str(entry.get("checkpoint_dtype", "")),
            checkpoint_quant=str(entry.get("checkpoint_quant", "")),
        )
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise CopeInputError(f"bad model entry {entry.get('id', '?')!r}: {exc!r}", path=origin) from None
