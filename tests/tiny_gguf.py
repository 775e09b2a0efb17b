"""A tiny but complete `qwen3moe` GGUF that llama.cpp loads and runs, and a numpy
reference forward pass of the same model.

The file holds every metadata key llama.cpp's qwen3moe loader reads (context and
embedding length, block count, head counts, key/value length, rope base, RMS epsilon,
expert count, expert used count, expert feed-forward length) and every tensor it
creates, all F32. The tokenizer model is "none" (llama-vocab.cpp: no tokens, no special
tokens; the vocabulary size then comes from `qwen3moe.vocab_size`, which must match
`token_embd`'s rows), so prompts are token ids: llama_tokenize would abort on it.

Weights are a dict {GGUF tensor name: numpy array in numpy order, i.e. the reverse of
ggml's ne}; `random_weights` draws them from a seed, `weights_from_transformers` copies
a transformers Qwen3MoeForCausalLM (the same layout llama.cpp's converter writes:
qwen3 uses NeoX rope, so Q and K are not permuted; gate_up_proj splits into gate, up).

`reference_forward` recomputes the model in float64 numpy, independently of llama.cpp
and of transformers: embeddings, RMSNorm, Q/K/V with per-head Q/K norms, NeoX rope,
causal grouped-query attention, the softmax router with normalised top-k weights, SiLU
gated experts, the output head. With `zero_attention=True` the attention output
projections are all zero, so every block's attention adds nothing and the hidden state
entering block 0's FFN norm is exactly the token's embedding row: the router input is
then known without any attention arithmetic (the fallback when a full recomputation is
in doubt).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

ARCH = "qwen3moe"
HIDDEN = 64
N_BLOCKS = 3
N_EXPERTS = 8
TOP_K = 2
VOCAB = 64
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = 16
EXPERT_FF = 32
CONTEXT = 256
RMS_EPS = 1e-6
ROPE_BASE = 10000.0
EXPERT_ROLES = ("gate", "up", "down")


@dataclass(frozen=True)
class Shape:
    hidden: int = HIDDEN
    n_blocks: int = N_BLOCKS
    n_experts: int = N_EXPERTS
    top_k: int = TOP_K
    vocab: int = VOCAB
    n_head: int = N_HEAD
    n_head_kv: int = N_HEAD_KV
    head_dim: int = HEAD_DIM
    expert_ff: int = EXPERT_FF


TINY = Shape()


def random_weights(seed: int = 0, *, shape: Shape = TINY, zero_attention: bool = False) -> dict[str, np.ndarray]:
    """Random float32 weights under llama.cpp's qwen3moe tensor names.

    The router logits come out with a spread of a few units (std 0.3 weights on unit-RMS
    inputs): clear gaps between the picks, so float32 (llama.cpp) and float64 (numpy)
    agree on the top-k and its order, and second picks keep a weight worth comparing.
    """
    rng = np.random.default_rng(seed)
    s = shape
    h, q, kv, f, e = s.hidden, s.n_head * s.head_dim, s.n_head_kv * s.head_dim, s.expert_ff, s.n_experts

    def normal(*dims: int, std: float = 1.0) -> np.ndarray:
        return rng.normal(0.0, std, size=dims).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.normal(size=n)).astype(np.float32)

    w: dict[str, np.ndarray] = {
        "token_embd.weight": normal(s.vocab, h),
        "output_norm.weight": norm(h),
        "output.weight": normal(s.vocab, h, std=1.0 / np.sqrt(h)),
    }
    for b in range(s.n_blocks):
        p = f"blk.{b}."
        w[p + "attn_norm.weight"] = norm(h)
        w[p + "attn_q.weight"] = normal(q, h, std=1.0 / np.sqrt(h))
        w[p + "attn_k.weight"] = normal(kv, h, std=1.0 / np.sqrt(h))
        w[p + "attn_v.weight"] = normal(kv, h, std=1.0 / np.sqrt(h))
        w[p + "attn_output.weight"] = (np.zeros((h, q), np.float32) if zero_attention
                                       else normal(h, q, std=1.0 / np.sqrt(q)))
        w[p + "attn_q_norm.weight"] = norm(s.head_dim)
        w[p + "attn_k_norm.weight"] = norm(s.head_dim)
        w[p + "ffn_norm.weight"] = norm(h)
        w[p + "ffn_gate_inp.weight"] = normal(e, h, std=0.3)
        w[p + "ffn_gate_exps.weight"] = normal(e, f, h, std=1.0 / np.sqrt(h))
        w[p + "ffn_up_exps.weight"] = normal(e, f, h, std=1.0 / np.sqrt(h))
        w[p + "ffn_down_exps.weight"] = normal(e, h, f, std=1.0 / np.sqrt(f))
    return w


def weights_from_transformers(model) -> dict[str, np.ndarray]:
    """A transformers Qwen3MoeForCausalLM's weights under llama.cpp's tensor names."""
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    cfg = model.config
    f = cfg.moe_intermediate_size
    w = {
        "token_embd.weight": sd["model.embed_tokens.weight"],
        "output_norm.weight": sd["model.norm.weight"],
        "output.weight": sd.get("lm_head.weight", sd["model.embed_tokens.weight"]),
    }
    for b in range(cfg.num_hidden_layers):
        src, p = f"model.layers.{b}.", f"blk.{b}."
        w[p + "attn_norm.weight"] = sd[src + "input_layernorm.weight"]
        w[p + "attn_q.weight"] = sd[src + "self_attn.q_proj.weight"]
        w[p + "attn_k.weight"] = sd[src + "self_attn.k_proj.weight"]
        w[p + "attn_v.weight"] = sd[src + "self_attn.v_proj.weight"]
        w[p + "attn_output.weight"] = sd[src + "self_attn.o_proj.weight"]
        w[p + "attn_q_norm.weight"] = sd[src + "self_attn.q_norm.weight"]
        w[p + "attn_k_norm.weight"] = sd[src + "self_attn.k_norm.weight"]
        w[p + "ffn_norm.weight"] = sd[src + "post_attention_layernorm.weight"]
        w[p + "ffn_gate_inp.weight"] = sd[src + "mlp.gate.weight"]
        if src + "mlp.experts.gate_up_proj" in sd:  # transformers >= 5: fused [E, 2F, H], gate first
            gate_up = sd[src + "mlp.experts.gate_up_proj"]
            w[p + "ffn_gate_exps.weight"] = gate_up[:, :f, :]
            w[p + "ffn_up_exps.weight"] = gate_up[:, f:, :]
            w[p + "ffn_down_exps.weight"] = sd[src + "mlp.experts.down_proj"]
        else:  # one nn.Linear per expert
            n = cfg.num_experts
            for role in EXPERT_ROLES:
                w[p + f"ffn_{role}_exps.weight"] = np.stack(
                    [sd[src + f"mlp.experts.{i}.{role}_proj.weight"] for i in range(n)])
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in w.items()}


def shape_of(weights: dict[str, np.ndarray]) -> Shape:
    n_blocks = 1 + max(int(k.split(".")[1]) for k in weights if k.startswith("blk."))
    e, f, h = weights["blk.0.ffn_gate_exps.weight"].shape
    hd = weights["blk.0.attn_q_norm.weight"].shape[0]
    return Shape(hidden=h, n_blocks=n_blocks, n_experts=e, top_k=TOP_K, vocab=weights["token_embd.weight"].shape[0],
                 n_head=weights["blk.0.attn_q.weight"].shape[0] // hd,
                 n_head_kv=weights["blk.0.attn_k.weight"].shape[0] // hd, head_dim=hd, expert_ff=f)


def write_gguf(path: str | Path, weights: dict[str, np.ndarray], *, top_k: int = TOP_K,
               name: str = "Tiny Qwen3 MoE", rope_base: float = ROPE_BASE, rms_eps: float = RMS_EPS) -> Path:
    """Write `weights` as a qwen3moe GGUF llama.cpp can load (F32, tokenizer "none")."""
    import gguf

    from bench.synthetic_gguf import add_metadata

    s = shape_of(weights)
    path = Path(path)
    w = gguf.GGUFWriter(str(path), ARCH)
    add_metadata(w, s, name=name, file_type=int(gguf.LlamaFileType.ALL_F32), top_k=top_k, context=CONTEXT,
                 rope_base=rope_base, rms_eps=rms_eps)
    for tensor_name, array in weights.items():
        w.add_tensor(tensor_name, np.ascontiguousarray(array, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def expert_bytes_per_layer(weights: dict[str, np.ndarray]) -> list[int]:
    """One routed expert's bytes per block, from the tensor shapes (F32: 4 bytes an element)."""
    s = shape_of(weights)
    out = []
    for b in range(s.n_blocks):
        total = sum(4 * int(np.prod(weights[f"blk.{b}.ffn_{role}_exps.weight"].shape)) for role in EXPERT_ROLES)
        assert total % s.n_experts == 0
        out.append(total // s.n_experts)
    return out


# --- numpy reference ----------------------------------------------------------------------


def _rms(x: np.ndarray, weight: np.ndarray, eps: float = RMS_EPS) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _rope_neox(x: np.ndarray, positions: np.ndarray, base: float = ROPE_BASE) -> np.ndarray:
    """x [T, heads, d]: rotate the pairs (i, i + d/2) by pos * base^(-2i/d) (NeoX / HF rotate_half)."""
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # [d/2]
    ang = positions[:, None].astype(np.float64) * inv[None, :]  # [T, d/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


@dataclass
class Reference:
    ids: np.ndarray  # [T, n_blocks, k], by descending router weight
    weights: np.ndarray  # [T, n_blocks, k], normalised to sum 1
    margins: np.ndarray  # [T, n_blocks]: smallest router-logit gap between consecutive picks (1..k+1)
    logits: np.ndarray  # [T, vocab]


def reference_forward(weights: dict[str, np.ndarray], tokens: list[int], *, top_k: int = TOP_K) -> Reference:
    """The model's forward pass over `tokens` (positions 0..T-1) in float64 numpy."""
    s = shape_of(weights)
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    tokens = list(tokens)
    n = len(tokens)
    pos = np.arange(n)
    x = w["token_embd.weight"][tokens]  # [T, H]
    group = s.n_head // s.n_head_kv
    causal = np.tril(np.ones((n, n), bool))
    all_ids, all_w, all_m = [], [], []
    for b in range(s.n_blocks):
        p = f"blk.{b}."
        a = _rms(x, w[p + "attn_norm.weight"])
        q = (a @ w[p + "attn_q.weight"].T).reshape(n, s.n_head, s.head_dim)
        k = (a @ w[p + "attn_k.weight"].T).reshape(n, s.n_head_kv, s.head_dim)
        v = (a @ w[p + "attn_v.weight"].T).reshape(n, s.n_head_kv, s.head_dim)
        q = _rope_neox(_rms(q, w[p + "attn_q_norm.weight"]), pos)
        k = _rope_neox(_rms(k, w[p + "attn_k_norm.weight"]), pos)
        heads = []
        for hh in range(s.n_head):
            kk, vv = k[:, hh // group], v[:, hh // group]
            scores = (q[:, hh] @ kk.T) / np.sqrt(s.head_dim)
            scores = np.where(causal, scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            heads.append((scores / scores.sum(axis=1, keepdims=True)) @ vv)
        attn = np.concatenate(heads, axis=1) @ w[p + "attn_output.weight"].T
        x = x + attn
        hn = _rms(x, w[p + "ffn_norm.weight"])
        logits = hn @ w[p + "ffn_gate_inp.weight"].T  # [T, E]
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs /= probs.sum(axis=1, keepdims=True)
        order = np.argsort(-probs, axis=1, kind="stable")
        ids = order[:, :top_k]
        picked = np.take_along_axis(probs, ids, axis=1)
        ranked = np.take_along_axis(logits, order, axis=1)
        all_m.append(np.min(ranked[:, :top_k] - ranked[:, 1:top_k + 1], axis=1))
        gate_w = picked / picked.sum(axis=1, keepdims=True)
        out = np.zeros_like(x)
        for t in range(n):
            for j in range(top_k):
                ex = ids[t, j]
                g = w[p + "ffn_gate_exps.weight"][ex] @ hn[t]
                u = w[p + "ffn_up_exps.weight"][ex] @ hn[t]
                act = g / (1.0 + np.exp(-g)) * u
                out[t] += gate_w[t, j] * (w[p + "ffn_down_exps.weight"][ex] @ act)
        x = x + out
        all_ids.append(ids)
        all_w.append(gate_w)
    final = _rms(x, w["output_norm.weight"]) @ w["output.weight"].T
    return Reference(ids=np.stack(all_ids, axis=1), weights=np.stack(all_w, axis=1),
                     margins=np.stack(all_m, axis=1), logits=final)


def greedy_continuation(weights: dict[str, np.ndarray], prompt: list[int], n: int) -> list[int]:
    """The n tokens greedy decoding generates after `prompt` (numpy reference)."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(np.argmax(reference_forward(weights, seq).logits[-1])))
    return seq[len(prompt):]
