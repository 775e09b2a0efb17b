"""The token mixers of a block: attention (with its KV cache) and linear attention (with its state).

A block of an MoE model mixes tokens either with attention, which caches keys and values
for every token it has seen, or with a linear-attention (recurrent) layer such as Qwen3-Next's
Gated DeltaNet, which keeps a fixed-size state per sequence however long the context grows.
Hybrid models (Qwen3-Next, Qwen3.5, Qwen3.6) interleave the two: three Gated DeltaNet blocks,
then one full-attention block.

Weight counts ignore biases, norms and the few per-head scalars (well under 0.1% of a block).
"""

from __future__ import annotations

from dataclasses import dataclass

# llama.cpp keeps the recurrent states (convolution window and SSM state) in F32 by default
# (llama_memory_recurrent with type_r = type_s = GGML_TYPE_F32).
RECURRENT_STATE_BYTES_PER_ELEMENT = 4


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
    # Gated attention (Qwen3-Next, Qwen3.5: attn_output_gate): the query projection also
    # yields a per-head output gate, so it is twice as wide.
    output_gate: bool = False

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
        q_out = 2 * q_dim if self.output_gate else q_dim
        return hidden_size * q_out + 2 * hidden_size * kv_dim + q_dim * hidden_size

    def kv_elements_per_token(self) -> int:
        """Cached K and V elements per token and block."""
        if self.kind == "mla":
            # llama.cpp caches the compressed latent plus the shared rope key.
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.n_kv_heads * self.head_dim

    def slides(self, block: int) -> bool:
        """Whether `block` attends over a window (or chunk) rather than the whole context."""
        if not self.sliding_window_tokens:
            return False
        return not (self.sliding_window_every and (block + 1) % self.sliding_window_every == 0)


@dataclass(frozen=True)
class LinearAttentionShape:
    """A Gated DeltaNet block (Qwen3-Next, Qwen3.5/3.6 `linear_attention` layers).

    Field names follow the config.json: `linear_num_key_heads`, `linear_num_value_heads`,
    `linear_key_head_dim`, `linear_value_head_dim`, `linear_conv_kernel_dim`.
    """

    n_key_heads: int
    n_value_heads: int
    key_head_dim: int
    value_head_dim: int
    conv_kernel: int

    @property
    def key_dim(self) -> int:
        return self.n_key_heads * self.key_head_dim

    @property
    def value_dim(self) -> int:
        return self.n_value_heads * self.value_head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of the causal convolution: q, k and v."""
        return 2 * self.key_dim + self.value_dim

    def params(self, hidden_size: int) -> int:
        qkv = hidden_size * self.conv_dim  # in_proj_qkv (llama.cpp: attn_qkv)
        z = hidden_size * self.value_dim  # in_proj_z, the output gate (attn_gate)
        beta_alpha = 2 * hidden_size * self.n_value_heads  # in_proj_b, in_proj_a (ssm_beta, ssm_alpha)
        conv = self.conv_dim * self.conv_kernel  # depthwise conv1d (ssm_conv1d)
        out = self.value_dim * hidden_size  # out_proj (ssm_out)
        return qkv + z + beta_alpha + conv + out

    def state_elements(self) -> int:
        """Per sequence: the convolution window and the delta-rule state.

        llama.cpp's n_embd_r = (d_conv - 1) * (d_inner + 2 * n_group * d_state) and
        n_embd_s = d_state * d_inner, with d_inner = value_dim, n_group = key heads and
        d_state = key_head_dim.
        """
        conv = (self.conv_kernel - 1) * self.conv_dim
        ssm = self.key_head_dim * self.value_dim
        return conv + ssm

    def state_bytes(self) -> int:
        return self.state_elements() * RECURRENT_STATE_BYTES_PER_ELEMENT
