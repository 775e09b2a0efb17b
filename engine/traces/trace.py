"""RoutingTrace: which experts every decode token chose in every MoE layer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from engine.core.errors import CopeInputError, shown

ORIGINS = ("synthetic", "published", "recorded", "imported")


@dataclass(frozen=True)
class TraceMeta:
    model: str  # catalog id or name of the model the routing came from
    source: str  # file, repository or generator that produced it
    origin: str  # one of ORIGINS
    n_experts: int  # routed experts per layer (ids are 0..n_experts-1)
    moe_blocks: tuple[int, ...]  # block index of each trace layer
    domain: str = ""  # chat, code, math, ... when known
    recorded_with: str = ""  # how: "teacher forcing", "generate", generator settings
    notes: tuple[str, ...] = ()

    @property
    def synthetic(self) -> bool:
        return self.origin == "synthetic"

    @classmethod
    def imported(cls, model: str, source: str, n_experts: int, moe_blocks: Sequence[int], recorded_with: str,
                 notes: Sequence[str] = ()) -> "TraceMeta":
        """What every reader of a file format says of the routing it read."""
        return cls(model=model, source=source, origin="imported", n_experts=int(n_experts),
                   moe_blocks=tuple(int(b) for b in moe_blocks), recorded_with=recorded_with, notes=tuple(notes))

    def to_dict(self) -> dict:
        # by hand: `synthetic` (derived) sits after `origin`, where the written traces have it
        return {
            "model": self.model,
            "source": self.source,
            "origin": self.origin,
            "synthetic": self.synthetic,
            "n_experts": self.n_experts,
            "moe_blocks": list(self.moe_blocks),
            "domain": self.domain,
            "recorded_with": self.recorded_with,
            "notes": list(self.notes),
        }

    @staticmethod
    def from_dict(d: dict) -> "TraceMeta":
        """The inverse of to_dict, strict: every field of its JSON type, nothing coerced
        (TypeError/ValueError/KeyError name the field)."""
        return TraceMeta(
            model=_text(d, "model"),
            source=_text(d, "source"),
            origin=_text(d, "origin"),
            n_experts=_whole(d["n_experts"], "n_experts"),
            moe_blocks=_wholes(d["moe_blocks"], "moe_blocks"),
            domain=_text(d, "domain", ""),
            recorded_with=_text(d, "recorded_with", ""),
            notes=_texts(d.get("notes", []), "notes"),
        )


def _text(d: dict, name: str, default: str | None = None) -> str:
    value = d[name] if default is None else d.get(name, default)
    if not isinstance(value, str):
        raise ValueError(f"{name} is {shown(value)}, expected text")
    return value


def _whole(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} is {shown(value)}, expected an integer")
    return value


def _wholes(value, name: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ValueError(f"{name} must be a list of integers, found {shown(value)}")
    return tuple(value)


def _texts(value, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a list of text, found {shown(value)}")
    return tuple(value)


@dataclass(frozen=True)
class RoutingTrace:
    """Token-major routing of one or more decode sequences.

    expert_ids[t, l, j]: the j-th routed expert of token t in MoE layer l (trace
    layer l is model block meta.moe_blocks[l]), in descending router score when the
    source gives an order. predicted_ids[t, l, :] are the experts a next-layer
    predictor guessed, at layer l, for layer l+1 (row L-1 is unused, filled with -1).
    seq_starts holds the token index where each sequence begins (always starts at 0).
    """

    expert_ids: np.ndarray  # int16 [T, L, k]
    meta: TraceMeta
    weights: np.ndarray | None = None  # float32 [T, L, k]
    predicted_ids: np.ndarray | None = None  # int16 [T, L, k_pred]
    seq_starts: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))

    def __post_init__(self) -> None:
        ids = self.expert_ids
        where = self.meta.source
        if ids.ndim != 3:
            raise CopeInputError("expert ids must be a [tokens, layers, k] array", path=where)
        t, n_layers, k = ids.shape
        if t == 0:
            raise CopeInputError("the trace holds no tokens", path=where)
        if n_layers != len(self.meta.moe_blocks):
            raise CopeInputError(
                f"{n_layers} trace layers but {len(self.meta.moe_blocks)} MoE blocks in metadata",
                path=where,
            )
        if self.meta.origin not in ORIGINS:
            raise CopeInputError(f"origin {self.meta.origin!r} not one of {ORIGINS}", path=where)
        if ids.min() < 0 or ids.max() >= self.meta.n_experts:
            raise CopeInputError(
                f"expert id out of range 0..{self.meta.n_experts - 1}", path=where
            )
        if k > 1:
            # A sorted copy a few MiB at a time: a whole one (and its comparison) would be
            # another 3 bytes a routed slot beside the trace.
            step = max(1, 2**21 // (n_layers * k))
            for start in range(0, t, step):
                sorted_ids = np.sort(ids[start:start + step], axis=2)
                if np.any(sorted_ids[:, :, 1:] == sorted_ids[:, :, :-1]):
                    raise CopeInputError("a token routes to the same expert twice", path=where)
        if self.weights is not None and self.weights.shape != ids.shape:
            raise CopeInputError("router weights do not match the expert ids' shape", path=where)
        if self.predicted_ids is not None:
            p = self.predicted_ids
            if p.ndim != 3 or p.shape[:2] != ids.shape[:2]:
                raise CopeInputError("predicted ids do not match the trace's tokens and layers", path=where)
            if p[:, :-1].size and (p[:, :-1].min() < 0 or p.max() >= self.meta.n_experts):
                raise CopeInputError("predicted expert id out of range", path=where)
        starts = self.seq_starts
        if starts.ndim != 1 or starts.size == 0 or starts[0] != 0 or np.any(np.diff(starts) <= 0) or starts[-1] >= t:
            raise CopeInputError("sequence starts must rise from 0 and stay below the token count", path=where)

    @property
    def n_tokens(self) -> int:
        return int(self.expert_ids.shape[0])

    @property
    def n_layers(self) -> int:
        return int(self.expert_ids.shape[1])

    @property
    def top_k(self) -> int:
        return int(self.expert_ids.shape[2])

    @property
    def n_sequences(self) -> int:
        return int(self.seq_starts.size)

    def popularity(self) -> np.ndarray:
        """Routing counts per layer and expert: int64 [L, n_experts]."""
        n_layers, n_experts = self.n_layers, self.meta.n_experts
        offsets = (np.arange(n_layers, dtype=np.int64) * n_experts)[None, :, None]
        counts = np.zeros(n_layers * n_experts, dtype=np.int64)
        # 4,096 tokens at a time: one flat int64 copy of a long trace (50 MB for 16,000
        # tokens of 48 layers x top-8) cost about 0.1 s in page faults inside advise; fewer
        # where a token holds more slots (4,096 of 1,024 layers x top-64 would be 2 GiB).
        step = max(1, min(4096, 2**21 // max(n_layers * self.expert_ids.shape[2], 1)))
        for start in range(0, self.expert_ids.shape[0], step):
            flat = self.expert_ids[start:start + step] + offsets
            counts += np.bincount(flat.ravel(), minlength=n_layers * n_experts)
        return counts.reshape(n_layers, n_experts)

    def slice_tokens(self, start: int, stop: int) -> "RoutingTrace":
        """Tokens [start, stop) as a trace of their own; sequences are cut at the ends."""
        starts = self.seq_starts[(self.seq_starts >= start) & (self.seq_starts < stop)] - start
        if starts.size == 0 or starts[0] != 0:
            starts = np.concatenate([[0], starts]).astype(np.int64)
        return RoutingTrace(
            expert_ids=self.expert_ids[start:stop],
            meta=self.meta,
            weights=None if self.weights is None else self.weights[start:stop],
            predicted_ids=None if self.predicted_ids is None else self.predicted_ids[start:stop],
            seq_starts=starts,
        )

    def split(self, profile_fraction: float = 0.5) -> tuple["RoutingTrace", "RoutingTrace"]:
        """(profile, replay) halves, cut at a sequence boundary when there are several.

        Popularity is learnt from the first part and candidates are scored on the
        second, so no candidate is scored on the data it was tuned on.
        """
        target = int(round(self.n_tokens * profile_fraction))
        target = min(max(target, 1), self.n_tokens - 1)
        cut = target
        if self.n_sequences > 1:
            inner = self.seq_starts[1:]
            cut = int(inner[np.argmin(np.abs(inner - target))])
        return self.slice_tokens(0, cut), self.slice_tokens(cut, self.n_tokens)

    def describe(self) -> dict:
        return {
            **self.meta.to_dict(),
            "tokens": self.n_tokens,
            "layers": self.n_layers,
            "top_k": self.top_k,
            "sequences": self.n_sequences,
            "has_router_weights": self.weights is not None,
            "has_predictions": self.predicted_ids is not None,
        }
