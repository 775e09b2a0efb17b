"""The synthetic routing generator as first written, whole arrays at once: the oracle that
engine/traces/synthetic.py's chunked generator must equal, number for number, on every
shape a catalog model has (tests/test_replay_budget.py). Kept apart from engine/ and
deliberately plain: [T, L, k] scores, float64 draws of the wrong guesses and int64 copies
of the ids, all held whole.
"""

from __future__ import annotations

import numpy as np

from engine.core.errors import CopeInputError
from engine.models.model import ModelSpec

_CHUNK_TOKENS = 256
_FLOOR_PROBABILITY = 1e-12


def _log_probabilities(model: ModelSpec, settings, rng: np.random.Generator) -> np.ndarray:
    n_layers, n_experts = model.n_moe_layers, model.n_routed_experts
    if settings.popularity is not None:
        pop = settings.popularity
        if pop.shape != (n_layers, n_experts):
            raise CopeInputError(
                f"synthetic trace: popularity is {pop.shape[0]}x{pop.shape[1]} but model {model.id} has "
                f"{n_layers} MoE layers x {n_experts} experts"
            )
        p = pop / pop.sum(axis=1, keepdims=True)
        return np.log(np.maximum(p, _FLOOR_PROBABILITY))
    base = -settings.zipf_exponent * np.log(np.arange(1, n_experts + 1, dtype=np.float64))
    base -= np.log(np.exp(base).sum())
    ranks = np.argsort(rng.random((n_layers, n_experts)), axis=1)  # a random permutation per layer
    return base[ranks]


def _predictions(ids: np.ndarray, n_experts: int, accuracy: float, rng: np.random.Generator) -> np.ndarray:
    """predicted[t, l] = ids[t, l+1] with each entry, with probability 1 - accuracy,
    replaced by a distinct expert outside ids[t, l+1]; the last layer's row is -1."""
    t, n_layers, k = ids.shape
    pred = np.full((t, n_layers, k), -1, dtype=np.int16)
    if n_layers < 2:
        return pred
    real = ids[:, 1:, :].astype(np.int64)
    wrong = rng.random(real.shape) >= accuracy
    n_spare = min(k, n_experts - k)  # replacements available outside the real list
    out = real.copy()
    if n_spare > 0 and wrong.any():
        for c in range(0, t, _CHUNK_TOKENS):
            r = real[c : c + _CHUNK_TOKENS]
            w = wrong[c : c + _CHUNK_TOKENS]
            keys = rng.random(r.shape[:2] + (n_experts,), dtype=np.float32)
            np.put_along_axis(keys, r, 2.0, axis=2)  # real ids sort last
            cand = np.argpartition(keys, n_spare - 1, axis=2)[..., :n_spare]
            nth = np.cumsum(w, axis=2) - 1  # this slot is the nth replaced one of its row
            use = w & (nth < n_spare)
            repl = np.take_along_axis(cand, np.clip(nth, 0, n_spare - 1), axis=2)
            out[c : c + _CHUNK_TOKENS] = np.where(use, repl, r)
    pred[:, :-1, :] = out
    return pred


def reference_arrays(model: ModelSpec, settings) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(ids, weights, predicted) as the first generator drew them."""
    rng = np.random.default_rng(settings.seed)
    n_tokens = int(settings.tokens)
    n_layers, n_experts, k = model.n_moe_layers, model.n_routed_experts, model.top_k
    logp = _log_probabilities(model, settings, rng)

    seq_starts = np.unique(np.floor(np.linspace(0, n_tokens, settings.sequences + 1)[:-1]).astype(np.int64))
    is_start = np.zeros(n_tokens, dtype=bool)
    is_start[seq_starts] = True

    ids = np.empty((n_tokens, n_layers, k), dtype=np.int16)
    scores = np.empty((n_tokens, n_layers, k), dtype=np.float32)
    layer_rows = np.arange(n_layers)[:, None]
    logp32 = logp.astype(np.float32)
    locality = float(settings.locality)
    cut = n_experts - k  # argpartition at this index puts the k largest last
    prev: np.ndarray | None = None
    for c in range(0, n_tokens, _CHUNK_TOKENS):
        m = min(_CHUNK_TOKENS, n_tokens - c)
        # Gumbel-top-k: the k largest of log p + Gumbel noise are k distinct experts
        # drawn without replacement in proportion to p.
        expo = rng.standard_exponential((m, n_layers, n_experts), dtype=np.float32)
        gumbel = -np.log(np.maximum(expo, np.finfo(np.float32).tiny, out=expo))
        g_chunk = logp32[None] + gumbel
        if locality <= 0:
            # No locality: tokens are independent, so the whole chunk is one call.
            top = np.argpartition(g_chunk, cut, axis=2)[..., cut:]
            val = np.take_along_axis(g_chunk, top, axis=2)
            order = np.argsort(-val, axis=2)
            ids[c : c + m] = np.take_along_axis(top, order, axis=2)
            scores[c : c + m] = np.take_along_axis(val, order, axis=2)
            continue
        reuse_chunk = rng.random((m, n_layers, k)) < locality
        for i in range(m):
            t = c + i
            g = g_chunk[i]
            sel = g
            if prev is not None and not is_start[t]:
                reuse = reuse_chunk[i]
                if reuse.any():
                    sel = g.copy()
                    li, slot = np.nonzero(reuse)
                    sel[li, prev[li, slot]] = np.inf  # forced in; ordered by g below
            top = np.argpartition(sel, cut, axis=1)[:, cut:]
            val = g[layer_rows, top]
            order = np.argsort(-val, axis=1)
            prev = top[layer_rows, order]
            ids[t] = prev
            scores[t] = val[layer_rows, order]

    weights = None
    if settings.with_weights:
        # Softmax over the selected scores; scores are descending, so weights are too.
        e = np.exp(scores.astype(np.float64) - scores[..., :1])
        weights = (e / e.sum(axis=2, keepdims=True)).astype(np.float32)
    predicted = None
    if settings.predictor_accuracy is not None:
        predicted = _predictions(ids, n_experts, float(settings.predictor_accuracy), rng)

    return ids, weights, predicted
