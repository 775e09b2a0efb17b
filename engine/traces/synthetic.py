"""Synthetic routing traces, for models without a recorded or published trace.

The generator draws, per token and MoE layer, k distinct experts from a per-layer
popularity (Zipf over a random rank order per layer, or a given [L, E] table such as
a measured heat profile), with temporal locality (each of a token's k slots reuses an
expert of the previous token in the same layer with probability `locality`), router
weights, and the guesses of a next-layer predictor of a chosen accuracy.

Everything a figure depends on is recorded in the trace's metadata: origin
"synthetic" and `recorded_with` listing every setting.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

from engine.core.errors import CopeInputError
from engine.core.input_limits import check_replay_slots
from engine.models.model import ModelSpec
from engine.traces.trace import RoutingTrace, TraceMeta

_CHUNK_TOKENS = 256  # tokens whose random draws are made in one numpy call
# ...and the most float32 numbers such a call draws: 256 tokens of the catalog's widest model
# (Qwen3.5-397B-A17B, 60 MoE layers x 512 experts: 7.9 M) fit, so real models draw exactly
# as they always did; a forged 64 x 4,096 draws 32 tokens at a time (32 MiB), not 256 (268
# MiB, held three times over before).
_CHUNK_DRAWS = 2**23
_FLOOR_PROBABILITY = 1e-12  # experts never seen in a given popularity stay drawable


@dataclass(frozen=True)
class SyntheticSettings:
    tokens: int
    seed: int = 0
    zipf_exponent: float = 1.0  # p(rank r) ~ r^-s within each layer
    popularity: np.ndarray | None = None  # [L, E] counts or probabilities; overrides zipf
    locality: float = 0.3  # chance each of a token's k slots reuses a previous-token expert
    predictor_accuracy: float | None = 0.8  # chance each predicted id is right; None: no predictor
    sequences: int = 1
    with_weights: bool = True
    popularity_source: str = ""  # where a given popularity's counts are from (an imatrix), said in describe()

    def __post_init__(self) -> None:
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, (int, np.integer)) or self.tokens < 1:
            raise CopeInputError(f"synthetic trace: tokens must be a positive integer, got {self.tokens!r}")
        if not isinstance(self.sequences, (int, np.integer)) or not 1 <= self.sequences <= self.tokens:
            raise CopeInputError(
                f"synthetic trace: sequences must be in 1..tokens ({self.tokens}), got {self.sequences!r}"
            )
        if not (math.isfinite(self.zipf_exponent) and self.zipf_exponent >= 0):
            raise CopeInputError(f"synthetic trace: zipf_exponent must be >= 0, got {self.zipf_exponent!r}")
        if not 0.0 <= self.locality <= 1.0:
            raise CopeInputError(f"synthetic trace: locality must be in 0..1, got {self.locality!r}")
        if self.predictor_accuracy is not None and not 0.0 <= self.predictor_accuracy <= 1.0:
            raise CopeInputError(
                f"synthetic trace: predictor_accuracy must be in 0..1 (or None), got {self.predictor_accuracy!r}"
            )
        if self.popularity is not None:
            pop = np.array(self.popularity, dtype=np.float64)  # a private copy
            if pop.ndim != 2 or pop.size == 0:
                raise CopeInputError(f"synthetic trace: popularity must be a [layers, experts] array, got shape {pop.shape}")
            if not np.all(np.isfinite(pop)) or np.any(pop < 0):
                raise CopeInputError("synthetic trace: popularity must hold finite, non-negative values")
            if np.any(pop.sum(axis=1) <= 0):
                raise CopeInputError("synthetic trace: every layer's popularity must have a positive total")
            pop.setflags(write=False)
            object.__setattr__(self, "popularity", pop)

    def describe(self) -> str:
        if self.popularity is not None:
            fitted = np.mean([fit_zipf_exponent(row) for row in self.popularity])
            given = f"real counts of {self.popularity_source}" if self.popularity_source else "given"
            pop = f"{given} [{self.popularity.shape[0]}x{self.popularity.shape[1]}] popularity (fitted zipf ~{fitted:.2f})"
        else:
            pop = f"zipf exponent {self.zipf_exponent:g} over a random rank order per layer"
        acc = "none" if self.predictor_accuracy is None else f"{self.predictor_accuracy:g}"
        return (
            f"synthetic generator: seed={self.seed}, tokens={self.tokens}, sequences={self.sequences}, "
            f"popularity={pop}, locality={self.locality:g}, predictor_accuracy={acc}, "
            f"router_weights={'yes' if self.with_weights else 'no'}"
        )


def _log_probabilities(model: ModelSpec, settings: SyntheticSettings, rng: np.random.Generator) -> np.ndarray:
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


def _chunk_tokens(n_layers: int, n_experts: int) -> int:
    """Tokens whose [tokens, layers, experts] random draws are made in one numpy call."""
    return max(1, min(_CHUNK_TOKENS, _CHUNK_DRAWS // max(n_layers * n_experts, 1)))


def _predictions(ids: np.ndarray, n_experts: int, accuracy: float, rng: np.random.Generator) -> np.ndarray:
    """predicted[t, l] = ids[t, l+1] with each entry, with probability 1 - accuracy,
    replaced by a distinct expert outside ids[t, l+1]; the last layer's row is -1.

    The draws are those of one [T, L-1, k] uniform draw, then [T, L-1, E] float32 keys; both
    are made in pieces (the same numbers in the same order: nothing else draws between
    them), the first kept as booleans, and the ids are widened a chunk at a time, so
    nothing [T, L, k] is held at 8 bytes a slot."""
    t, n_layers, k = ids.shape
    pred = np.full((t, n_layers, k), -1, dtype=np.int16)
    if n_layers < 2:
        return pred
    wrong = np.empty((t, n_layers - 1, k), dtype=bool)
    piece = max(1, _CHUNK_DRAWS // ((n_layers - 1) * k))
    for c in range(0, t, piece):
        np.greater_equal(rng.random((min(piece, t - c), n_layers - 1, k)), accuracy, out=wrong[c : c + piece])
    pred[:, :-1, :] = ids[:, 1:, :]
    n_spare = min(k, n_experts - k)  # replacements available outside the real list
    if n_spare <= 0 or not wrong.any():
        return pred
    # Nothing else draws between these, so the chunk does not change the numbers: 2 M float32
    # keys at a time (8 MiB, their int64 partition 16 MiB), whatever the shape.
    chunk = max(1, min(_CHUNK_TOKENS, _CHUNK_DRAWS // 4 // ((n_layers - 1) * n_experts)))
    for c in range(0, t, chunk):
        r = ids[c : c + chunk, 1:, :].astype(np.int64)
        w = wrong[c : c + chunk]
        keys = rng.random(r.shape[:2] + (n_experts,), dtype=np.float32)
        np.put_along_axis(keys, r, 2.0, axis=2)  # real ids sort last
        cand = np.argpartition(keys, n_spare - 1, axis=2)[..., :n_spare]
        nth = np.cumsum(w, axis=2) - 1  # this slot is the nth replaced one of its row
        use = w & (nth < n_spare)
        repl = np.take_along_axis(cand, np.clip(nth, 0, n_spare - 1), axis=2)
        pred[c : c + chunk, :-1, :] = np.where(use, repl, r)
    return pred


def _softmax_into(out: np.ndarray, scores: np.ndarray) -> None:
    """Router weights: a softmax over each step's selected scores (descending, so the
    weights are too), in float64, stored as float32."""
    e = np.exp(scores.astype(np.float64) - scores[..., :1])
    out[...] = (e / e.sum(axis=2, keepdims=True)).astype(np.float32)


def synthetic_trace(model: ModelSpec, settings: SyntheticSettings) -> RoutingTrace:
    """Generate a routing trace for `model`; deterministic for a given seed.

    Memory: the trace's own arrays (int16 ids and predictions, float32 weights: 8 bytes
    a routed slot) and a chunk's draws (at most _CHUNK_DRAWS float32 numbers); router
    scores and weights are made a chunk at a time. A trace of more slots than two halves
    of the replay budget is refused before anything is drawn."""
    rng = np.random.default_rng(settings.seed)
    n_tokens = int(settings.tokens)
    n_layers, n_experts, k = model.n_moe_layers, model.n_routed_experts, model.top_k
    # advise replays half of it (the other half is the profile): the budget is the half's
    check_replay_slots(-(-n_tokens // 2), n_layers, k, what=f"a synthetic trace of {n_tokens:,} tokens of {model.id}",
                       remedy="ask for fewer tokens")
    logp = _log_probabilities(model, settings, rng)

    seq_starts = np.unique(np.floor(np.linspace(0, n_tokens, settings.sequences + 1)[:-1]).astype(np.int64))
    is_start = np.zeros(n_tokens, dtype=bool)
    is_start[seq_starts] = True

    ids = np.empty((n_tokens, n_layers, k), dtype=np.int16)
    weights = np.empty((n_tokens, n_layers, k), dtype=np.float32) if settings.with_weights else None
    layer_rows = np.arange(n_layers)[:, None]
    logp32 = logp.astype(np.float32)
    locality = float(settings.locality)
    cut = n_experts - k  # argpartition at this index puts the k largest last
    tiny = np.finfo(np.float32).tiny
    chunk = _chunk_tokens(n_layers, n_experts)
    prev: np.ndarray | None = None
    for c in range(0, n_tokens, chunk):
        m = min(chunk, n_tokens - c)
        # Gumbel-top-k: the k largest of log p + Gumbel noise are k distinct experts
        # drawn without replacement in proportion to p. In place: one [m, L, E] array.
        g_chunk = rng.standard_exponential((m, n_layers, n_experts), dtype=np.float32)
        np.maximum(g_chunk, tiny, out=g_chunk)
        np.log(g_chunk, out=g_chunk)
        np.negative(g_chunk, out=g_chunk)
        g_chunk += logp32
        scores = np.empty((m, n_layers, k), dtype=np.float32)
        if locality <= 0:
            # No locality: tokens are independent, so the whole chunk is one call.
            top = np.argpartition(g_chunk, cut, axis=2)[..., cut:]
            val = np.take_along_axis(g_chunk, top, axis=2)
            order = np.argsort(-val, axis=2)
            ids[c : c + m] = np.take_along_axis(top, order, axis=2)
            scores[:] = np.take_along_axis(val, order, axis=2)
        else:
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
                scores[i] = val[layer_rows, order]
        if weights is not None:
            _softmax_into(weights[c : c + m], scores)
        del g_chunk

    predicted = None
    if settings.predictor_accuracy is not None:
        predicted = _predictions(ids, n_experts, float(settings.predictor_accuracy), rng)

    meta = TraceMeta(
        model=model.id,
        source="synthetic",
        origin="synthetic",
        n_experts=n_experts,
        moe_blocks=tuple(model.moe_blocks),
        recorded_with=settings.describe(),
        notes=(() if not settings.popularity_source else (
            f"real: each layer's expert popularity, from {settings.popularity_source}; assumed: the order and timing "
            f"of routing (locality {settings.locality:g}, which experts a token takes together), next-layer "
            "predictions and router weights",)),
    )
    return RoutingTrace(
        expert_ids=ids, meta=meta, weights=weights, predicted_ids=predicted, seq_starts=seq_starts
    )


def popularity_from_mbolt_profile(path: str | os.PathLike) -> np.ndarray:
    """Per-layer routing counts (float64 [L, E]) from an mbolt co-activation profile JSON
    (`n_layers`, `n_expert_per_layer`, `layers[i]["heat"]`)."""
    where = str(path)
    try:
        with open(where, encoding="utf-8") as handle:
            doc = json.load(handle)
    except FileNotFoundError:
        raise CopeInputError("no such file", path=where) from None
    except json.JSONDecodeError as exc:
        raise CopeInputError(f"not valid JSON: {exc.msg}", path=where, line=exc.lineno) from None
    except UnicodeDecodeError as exc:
        raise CopeInputError(f"not UTF-8 text (byte {exc.start})", path=where) from None
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=where) from None
    if not isinstance(doc, dict):
        raise CopeInputError("not an mbolt profile: the top level is not an object", path=where)
    n_layers, n_experts = doc.get("n_layers"), doc.get("n_expert_per_layer")
    for name, value in (("n_layers", n_layers), ("n_expert_per_layer", n_experts)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise CopeInputError(f"not an mbolt profile: {name!r} is {value!r}, expected a positive integer", path=where)
    layers = doc.get("layers")
    if not isinstance(layers, list) or len(layers) != n_layers:
        found = len(layers) if isinstance(layers, list) else type(layers).__name__
        raise CopeInputError(f"'layers' must be a list of {n_layers} entries, found {found}", path=where)
    heat = np.zeros((n_layers, n_experts), dtype=np.float64)
    for i, entry in enumerate(layers):
        row = entry.get("heat") if isinstance(entry, dict) else None
        if not isinstance(row, list) or len(row) != n_experts:
            found = len(row) if isinstance(row, list) else type(row).__name__
            raise CopeInputError(f"layers[{i}].heat must list {n_experts} counts, found {found}", path=where)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in row):
            raise CopeInputError(f"layers[{i}].heat holds a non-number", path=where)
        heat[i] = row
        if not np.all(np.isfinite(heat[i])) or np.any(heat[i] < 0):
            raise CopeInputError(f"layers[{i}].heat holds a negative or non-finite count", path=where)
        if heat[i].sum() <= 0:
            raise CopeInputError(f"layers[{i}].heat is all zero", path=where)
    return heat


def fit_zipf_exponent(counts_row: np.ndarray) -> float:
    """Zipf exponent s of one layer's routing counts: least squares of log count on log
    rank over the experts with a positive count (0.0 when fewer than two have one)."""
    counts = np.asarray(counts_row, dtype=np.float64).ravel()
    counts = np.sort(counts[counts > 0])[::-1]
    if counts.size < 2:
        return 0.0
    x = np.log(np.arange(1, counts.size + 1, dtype=np.float64))
    y = np.log(counts)
    x -= x.mean()
    slope = float((x * (y - y.mean())).sum() / (x * x).sum())
    return -slope
