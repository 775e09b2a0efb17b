"""Which blocks attend, which are linear, which hold experts, and the caches that follow."""

from __future__ import annotations

import pytest

from engine.core.errors import CopeInputError
from engine.hardware.memory import plan_memory
from engine.models.catalog import get_model
from engine.models.model import AttentionShape, LinearAttentionShape, ModelSpec
from engine.models.quant import get_quantization

F16 = 2  # bytes per cached K/V element
F32 = 4  # bytes per recurrent-state element


@pytest.mark.parametrize("model_id", ["qwen3.5-35b-a3b", "qwen3.6-35b-a3b"])
def test_qwen35_three_gated_deltanet_blocks_then_one_attention_block(model_id):
    m = get_model(model_id)
    full = tuple(range(3, 40, 4))
    assert m.attention_blocks == full
    assert m.linear_blocks == tuple(b for b in range(40) if b not in full)
    assert m.block_kinds[:4] == ("linear_attention",) * 3 + ("full_attention",)
    assert m.moe_blocks == tuple(range(40)) and m.n_shared_experts == 1
    # KV only in the 10 attention blocks: 2 KV heads x 256 x (K and V) x F16 per token.
    assert m.kv_read_bytes_per_layer(0, 4096) == 0
    assert m.kv_read_bytes_per_layer(3, 4096) == 4096 * 2 * 2 * 256 * F16
    assert m.kv_cache_bytes(4096) == 10 * 4096 * 2 * 2 * 256 * F16
    # Each Gated DeltaNet block keeps a fixed state: the 3-step convolution window over
    # q, k, v (2 x 16 x 128 + 32 x 128 channels) and 32 heads x 128 x 128, in F32.
    per_block = ((4 - 1) * (2 * 16 * 128 + 32 * 128) + 128 * 32 * 128) * F32
    assert m.recurrent_state_bytes_per_layer(0) == per_block and m.recurrent_state_bytes_per_layer(3) == 0
    assert m.recurrent_state_bytes() == 30 * per_block
    # Gated attention: q_proj is twice as wide (query and gate).
    assert m.attention.output_gate
    assert m.shared_layer_params(3) - m.shared_layer_params(0) == (
        m.attention.params(2048) - m.linear_attention.params(2048))
    assert m.attention.params(2048) == 2048 * (2 * 16 * 256) + 2 * 2048 * 2 * 256 + 16 * 256 * 2048


def test_qwen3_next_hybrid_layout():
    m = get_model("qwen3-next-80b-a3b")
    assert len(m.attention_blocks) == 12 and m.attention_blocks[0] == 3 and len(m.linear_blocks) == 36
    assert (m.n_routed_experts, m.top_k, m.expert_ffn_size, m.shared_expert_ffn_size) == (512, 10, 512, 512)
    assert m.kv_cache_bytes(1000) == 12 * 1000 * 2 * 2 * 256 * F16


def test_deepseek_v3_dense_leading_blocks_and_latent_attention():
    m = get_model("deepseek-v3")
    assert m.dense_blocks == (0, 1, 2) and m.moe_blocks == tuple(range(3, 61))
    assert (m.n_shared_experts, m.shared_expert_ffn_size, m.dense_ffn_size) == (1, 2048, 18432)
    a = m.attention
    assert (a.kind, a.q_lora_rank, a.kv_lora_rank, a.qk_rope_head_dim) == ("mla", 1536, 512, 64)
    assert m.kv_cache_bytes(1000) == 61 * 1000 * (512 + 64) * F16  # llama.cpp's MLA cache


def test_glm_dense_first_blocks_shared_expert_and_nextn():
    air = get_model("glm-4.5-air")
    assert air.dense_blocks == (0,) and air.n_moe_layers == 45 and air.nextn_blocks == 1
    assert air.kv_cache_bytes(1000) == 46 * 1000 * 2 * 8 * 128 * F16
    big = get_model("glm-4.7")
    assert big.dense_blocks == (0, 1, 2) and big.n_moe_layers == 89 and big.n_shared_experts == 1
    flash = get_model("glm-4.7-flash")
    assert flash.arch == "deepseek2" and flash.attention.kind == "mla" and flash.dense_blocks == (0,)
    assert flash.kv_cache_bytes(1000) == 47 * 1000 * (512 + 64) * F16


def test_llama4_interleaved_moe_and_chunked_attention():
    scout = get_model("llama-4-scout-17b-16e")
    assert scout.moe_blocks == tuple(range(48)) and scout.top_k == 1 and scout.n_shared_experts == 1
    maverick = get_model("llama-4-maverick-17b-128e")
    assert maverick.moe_blocks == tuple(range(1, 48, 2))  # interleave_moe_layer_step 2
    assert maverick.dense_blocks == tuple(range(0, 48, 2)) and maverick.dense_ffn_size == 16384
    # Chunked attention over 8192 tokens; every 4th block (3, 7, ...) attends to everything.
    assert scout.block_kind(3) == "full_attention" and scout.block_kind(0) == "sliding_attention"
    per_token = 2 * 8 * 128 * F16
    assert scout.kv_cache_bytes(32768) == (12 * 32768 + 36 * 8192) * per_token


def test_ernie_first_block_dense_and_tied_head():
    m = get_model("ernie-4.5-21b-a3b")
    assert m.dense_blocks == (0,) and m.n_moe_layers == 27
    assert (m.n_shared_experts, m.shared_expert_ffn_size) == (2, 2 * 1536) and m.tied_embeddings


def test_memory_plan_holds_the_recurrent_state_beside_the_kv_cache():
    m = get_model("qwen3.5-35b-a3b")
    plan = plan_memory(m, get_quantization("Q4_K_M"), vram_budget_bytes=16 * 2**30, context_tokens=8192)
    assert plan.kv_cache_bytes == m.kv_cache_bytes(8192) + m.recurrent_state_bytes()
    dense_kv = 40 * 8192 * 2 * 2 * 256 * F16  # what every block attending would cache
    assert plan.kv_cache_bytes < dense_kv / 2  # 10 of 40 blocks attend; 30 hold 2.2 MB each


def test_linear_blocks_need_their_shape_and_valid_indices():
    base = dict(id="x", name="x", arch="qwen35moe", n_blocks=4, moe_blocks=(0, 1, 2, 3), n_routed_experts=4,
                top_k=2, n_shared_experts=0, hidden_size=64, expert_ffn_size=32, shared_expert_ffn_size=0,
                dense_ffn_size=0, vocab_size=10, tied_embeddings=False, attention=AttentionShape("gqa", 2, 1, 32),
                source="test")
    with pytest.raises(CopeInputError, match="linear-attention shape"):
        ModelSpec(**base, linear_blocks=(0, 1))
    with pytest.raises(CopeInputError, match="outside"):
        ModelSpec(**base, linear_blocks=(7,), linear_attention=LinearAttentionShape(1, 2, 16, 16, 4))
