"""Small model specs for tests that need a shape, not a real model."""

from __future__ import annotations

from engine.models.model import AttentionShape, ModelSpec


def tiny_model(
    *,
    model_id: str = "tiny",
    moe_blocks: tuple[int, ...] = (0,),
    n_blocks: int | None = None,
    experts: int = 8,
    k: int = 2,
    hidden: int = 64,
    expert_ffn: int = 32,
    arch: str = "qwen3moe",
) -> ModelSpec:
    return ModelSpec(
        id=model_id,
        name=model_id,
        arch=arch,
        n_blocks=n_blocks if n_blocks is not None else max(moe_blocks) + 1,
        moe_blocks=tuple(moe_blocks),
        n_routed_experts=experts,
        top_k=k,
        n_shared_experts=0,
        hidden_size=hidden,
        expert_ffn_size=expert_ffn,
        shared_expert_ffn_size=0,
        dense_ffn_size=128,
        vocab_size=100,
        tied_embeddings=False,
        attention=AttentionShape("gqa", 4, 2, 16),
        source="test",
    )


def replay_priced_layer_set(request, cost_model, cpu_layers):  # type: ignore[no-untyped-def]
    """TPOT of whole layers' experts on the CPU, priced as the ranking prices a partition
    candidate (replay, then engine.cost.estimate.price): an independent check of placement pricing."""
    import numpy as np

    from engine.cost.estimate import price
    from engine.replays.policy import Candidate, Execution, Kind
    from engine.replays.replay import ReplaySetup, replay

    k = request.model.top_k
    stats = replay(request.trace.expert_ids, None, Candidate(Kind.PARTITION_FIRST),
                   ReplaySetup(request.profile.popularity(), 0, 0), cpu_layers=np.asarray(cpu_layers, dtype=bool))
    tpot, _ = price(stats, cost_model.state_costs(Execution.SEQUENTIAL, request.threads, k, k),
                    shared_per_token_s=cost_model.shared_per_token_s(),
                    token_overhead_s=cost_model.token_overhead_s(), prefetch_mode=request.prefetch_mode)
    return tpot
