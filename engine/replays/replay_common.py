"""What the replays share: the trace as index arrays, a candidate's plan, the state
histograms the step-wise replay fills and progress ticks.

These pieces are used by the dispatch and the step-wise replay in `engine.replays.replay`
and by the compiled engines (`engine.replays.replay_compiled`); they live here, below all
of them, so that the engines need not import `engine.replays.replay`, which imports them
(no import cycle). Nothing here replays anything by itself; the rules themselves, the
popularity order and the first contents of a cache are `engine.replays.residency`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.replays.policy import Eviction


# --- planning: what a candidate's replay depends on --------------------------------


@dataclass(frozen=True)
class ReplayPlan:
    candidate_id: str
    key: tuple  # equal keys: identical replays
    slots: np.ndarray  # int64 [L]
    popularity: np.ndarray
    static: bool  # the cache never changes
    pooled: bool = False
    eviction: Eviction | None = None
    admit: np.ndarray | None = None  # int64 [k+1]: misses admitted in a step with h hits
    width: int = 0  # predictions used per step (0: no prefetch)


# --- progress and the state histograms ---------------------------------------------


class Ticks:
    """Progress of run `index` of `runs`, each over the trace's tokens."""

    EVERY = 16  # tokens between reports

    def __init__(self, progress, index: int, runs: int):
        self.progress, self.index, self.runs = progress, index, runs

    def __call__(self, t: int, n_tokens: int) -> None:
        if self.progress is not None and t % self.EVERY == 0:
            self.progress(self.index * n_tokens + t, self.runs * n_tokens, "replaying")

    def reached(self, t: int, n_tokens: int) -> None:
        """t tokens replayed, reported whatever t (the end of a chunk of tokens)."""
        if self.progress is not None:
            self.progress(self.index * n_tokens + t, self.runs * n_tokens, "replaying")


class Histograms:
    """The state counts [L, k+1, P+1] of several replays, from per-step hits and
    copies that the replays write for a chunk of tokens at a time: memory stays
    the same however long the trace."""

    CHUNK = 256  # tokens

    def __init__(self, n_replays: int, n_layers: int, k: int, width: int):
        self.shape = (n_replays, n_layers, k + 1, width + 1)
        self.counts = np.zeros(int(np.prod(self.shape)), dtype=np.int64)
        self.hits = np.zeros((self.CHUNK, n_replays, n_layers), dtype=np.int16)
        self.copies = np.zeros_like(self.hits)  # issued during the step, for the next layer
        self.cell = (np.arange(n_replays * n_layers) * (k + 1) * (width + 1)).reshape(n_replays, n_layers)

    def slot(self, t: int) -> int:
        """Where token t's hits and copies go."""
        return t % self.CHUNK

    def token_done(self, t: int) -> None:
        if t % self.CHUNK == self.CHUNK - 1:
            self.flush(self.CHUNK)

    def flush(self, n: int) -> None:
        width = self.shape[3]
        flat = self.cell + self.hits[:n].astype(np.int64) * width + self.copies[:n]
        self.counts += np.bincount(flat.ravel(), minlength=self.counts.size)
        self.hits[:] = 0
        self.copies[:] = 0

    def finish(self, n_tokens: int) -> None:
        if n_tokens % self.CHUNK:
            self.flush(n_tokens % self.CHUNK)

    def of(self, j: int) -> np.ndarray:
        return self.counts.reshape(self.shape)[j]


# --- the trace, as the replays index it --------------------------------------------


class TraceArrays:
    """Routing and predictions as index arrays, for one prediction width P (the
    predictions a step uses): pred[t, l] are layer l's guesses for layer l + 1, and
    `first` marks the first occurrence of each (a step drops later duplicates).

    int32 (keys are below layers x experts, at most 262,144: engine/core/input_limits.py),
    and the pairwise comparison of the guesses ([T, L, P, P]) made a chunk of tokens at a
    time: whole, it costs P bytes a guess (64 at a width of 64).
    """

    def __init__(self, ids: np.ndarray, predicted: np.ndarray | None, width: int):
        self.n_tokens, self.n_layers, self.k = ids.shape
        self.width = width
        self.ids = ids.astype(np.int32)
        self.pred = self.first = self.route_keys = None
        if width:
            pred = predicted[:, :, :width].astype(np.int32)
            # Duplicates within a row: only the first occurrence takes part.
            self.first = np.empty(pred.shape, dtype=bool)
            for t0, t1 in _token_chunks(self.n_tokens, self.n_layers * width * width):
                same = pred[t0:t1, :, :, None] == pred[t0:t1, :, None, :]  # [chunk, L, P, P]
                self.first[t0:t1] = ~np.tril(same, -1).any(axis=3)
            self.pred = pred

    def add_keys(self, n_experts: int) -> None:
        """Add what the step-wise caches index by: keys number an expert across layers,
        layer * E + expert; pred_keys[t, l] are the keys layer l predicts (rows 0..L-2)."""
        if self.route_keys is not None:
            return
        n_layers, width = self.n_layers, self.width
        layer_base = (np.arange(n_layers, dtype=np.int32) * n_experts)[None, :, None]
        self.route_keys = self.ids + layer_base  # [T, L, k]
        if width:
            self.pred_keys = self.pred[:, : n_layers - 1] + layer_base[:, 1:]  # [T, L-1, P]
            self.pred_first = self.first[:, : n_layers - 1]

    def step_keys(self, t: int) -> tuple[list[list[int]], list[list[int]] | None]:
        """Token t as lists (after `add_keys`): the keys each layer is routed to, and
        the keys each predicts for the next, first occurrences only (None: no prefetch)."""
        route = self.route_keys[t].tolist()
        if not self.width:
            return route, None
        predicted = np.where(self.pred_first[t], self.pred_keys[t], -1).tolist()
        return route, [[key for key in row if key >= 0] for row in predicted]


_CHUNK_CELLS = 2**22  # elements of a chunk's comparison (4 MiB of booleans)


def _token_chunks(n_tokens: int, cells_per_token: int) -> list[tuple[int, int]]:
    step = max(1, _CHUNK_CELLS // max(cells_per_token, 1))
    return [(t0, min(t0 + step, n_tokens)) for t0 in range(0, n_tokens, step)]
