"""What every trace reader checks, in one place.

- `check_cells`: each row's block is an MoE block of the model and its expert ids are
  in range and distinct (the row width, k, is each reader's to check while parsing).
- `assemble`: per-(token, layer) rows into token-major arrays; a second row for one
  cell is an error, a token lacking a layer is dropped with a warning (`warn_dropped`).
- `check_trace_fits_model`: the one check that a trace's experts, k and MoE blocks
  match a model, used by the loaders and by `advise`.

Errors are CopeInputErrors naming the file and, where there is one, the line.
"""

from __future__ import annotations

import warnings
from typing import Callable, Sequence

import numpy as np

from engine.core.errors import CopeInputError
from engine.core.spans import block_span
from engine.traces.trace import RoutingTrace

LineOf = Callable[[int], int]  # data-row index -> 1-based line number in the file


class TraceWarning(UserWarning):
    """A trace file was usable but not complete (for example, tokens were dropped)."""



def build_trace(path: str, **kwargs) -> RoutingTrace:
    """RoutingTrace(...), with its validation errors re-labelled with the file."""
    try:
        return RoutingTrace(**kwargs)
    except CopeInputError as exc:
        raise exc.relabelled(path) from None


def first_bad_row(bad: np.ndarray) -> int | None:
    idx = np.flatnonzero(bad)
    return int(idx[0]) if idx.size else None


def warn_dropped(path: str, note: str) -> str:
    """Report dropped tokens as a TraceWarning naming the file; returns the note for meta.notes."""
    warnings.warn(TraceWarning(f"{path}: {note}"), stacklevel=2)
    return note


# --- rows ---------------------------------------------------------------------------


def _block_lookup(moe_blocks: Sequence[int]) -> np.ndarray:
    """Array mapping block index -> trace layer, -1 where the block is not MoE."""
    blocks = [int(b) for b in moe_blocks]
    if not blocks or min(blocks) < 0 or len(set(blocks)) != len(blocks):
        raise CopeInputError(f"bad MoE block list {blocks!r}")
    lookup = np.full(max(blocks) + 1, -1, dtype=np.int64)
    lookup[blocks] = np.arange(len(blocks))
    return lookup


def _check_ids(path: str, ids: np.ndarray, line_of: LineOf, n_experts: int) -> None:
    if not ids.size:
        return
    r = first_bad_row(((ids < 0) | (ids >= n_experts)).any(axis=1))
    if r is not None:
        bad = ids[r][(ids[r] < 0) | (ids[r] >= n_experts)][0]
        raise CopeInputError(f"expert id {int(bad)} out of range 0..{n_experts - 1}", path=path, line=line_of(r))
    if ids.shape[1] > 1:
        s = np.sort(ids, axis=1)
        r = first_bad_row((s[:, 1:] == s[:, :-1]).any(axis=1))
        if r is not None:
            raise CopeInputError("the same expert id appears twice in one row", path=path, line=line_of(r))


def check_cells(
    path: str,
    blocks: np.ndarray,
    ids: np.ndarray,
    line_of: LineOf,
    *,
    moe_blocks: Sequence[int],
    n_experts: int,
) -> np.ndarray:
    """Validate blocks and ids of parsed rows; returns each row's trace layer index."""
    lookup = _block_lookup(moe_blocks)
    in_table = (blocks >= 0) & (blocks < lookup.size)
    layer = np.full(blocks.shape, -1, dtype=np.int64)
    layer[in_table] = lookup[blocks[in_table]]
    r = first_bad_row(layer < 0)
    if r is not None:
        raise CopeInputError(
            f"block {int(blocks[r])} is not an MoE block of the model "
            f"(MoE blocks {block_span(moe_blocks)})",
            path=path,
            line=line_of(r),
        )
    _check_ids(path, ids, line_of, n_experts)
    return layer


# --- rows to token-major arrays --------------------------------------------------------


class _Rows:
    """Rows sorted by (sequence, position, layer), with where each token starts."""

    def __init__(self, seq: np.ndarray, pos: np.ndarray, layer: np.ndarray):
        self.order = np.lexsort((layer, pos, seq))
        self.s, self.p, self.lyr = seq[self.order], pos[self.order], layer[self.order]
        self.new_token = np.ones(self.s.size, dtype=bool)
        self.new_token[1:] = (self.s[1:] != self.s[:-1]) | (self.p[1:] != self.p[:-1])
        self.starts = np.flatnonzero(self.new_token)
        self.counts = np.diff(np.append(self.starts, self.s.size))


def _label(seq_labels: Sequence[object] | None, code: int) -> object:
    return seq_labels[code] if seq_labels is not None else code + 1


def _refuse_duplicates(path: str, rows: _Rows, line_of: LineOf, moe_blocks, seq_labels) -> None:
    s, p, lyr = rows.s, rows.p, rows.lyr
    r = first_bad_row((s[1:] == s[:-1]) & (p[1:] == p[:-1]) & (lyr[1:] == lyr[:-1]))
    if r is None:
        return
    first, second = sorted((int(rows.order[r]), int(rows.order[r + 1])))
    raise CopeInputError(
        f"second row for token {int(p[r])} of sequence {_label(seq_labels, int(s[r]))!r}, "
        f"block {moe_blocks[int(lyr[r])]} (first at line {line_of(first)})",
        path=path,
        line=line_of(second),
    )


def _drop_incomplete(path: str, rows: _Rows, line_of: LineOf, moe_blocks, seq_labels) -> list[str]:
    """Keep only tokens with a row for every layer (rows is narrowed in place); returns the notes."""
    n_layers = len(moe_blocks)
    complete = rows.counts == n_layers
    if complete.all():
        return []
    t = int(np.flatnonzero(~complete)[0])
    row0 = rows.starts[t]
    have = set(rows.lyr[row0 : row0 + rows.counts[t]].tolist())
    missing = [moe_blocks[i] for i in range(n_layers) if i not in have]
    note = (
        f"dropped {int((~complete).sum())} of {rows.counts.size} tokens that lack a layer (first: token "
        f"{int(rows.p[row0])} of sequence {_label(seq_labels, int(rows.s[row0]))!r} at line "
        f"{line_of(int(rows.order[row0]))} has no row for block {missing[0]})"
    )
    warn_dropped(path, note)
    if not complete.any():
        raise CopeInputError("no complete token: every token lacks a layer", path=path)
    keep = complete[np.cumsum(rows.new_token) - 1]
    rows.order, rows.s, rows.p = rows.order[keep], rows.s[keep], rows.p[keep]
    rows.new_token = rows.new_token[keep]
    return [note]


def assemble(
    path: str,
    *,
    seq: np.ndarray,
    pos: np.ndarray,
    layer: np.ndarray,
    ids: np.ndarray,
    weights: np.ndarray | None,
    line_of: LineOf,
    moe_blocks: Sequence[int],
    seq_labels: Sequence[object] | None = None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, list[str]]:
    """Turn per-(token, layer) rows into token-major arrays.

    seq: int codes (0, 1, ... in order of first appearance); pos: token position
    within its sequence; layer: trace layer index. Returns (expert_ids [T, L, k],
    weights or None, seq_starts, notes). Duplicate cells are errors; tokens that lack
    a layer are dropped with a TraceWarning (and a note).
    """
    rows = _Rows(seq, pos, layer)
    _refuse_duplicates(path, rows, line_of, moe_blocks, seq_labels)
    notes = _drop_incomplete(path, rows, line_of, moe_blocks, seq_labels)
    n_layers, k = len(moe_blocks), ids.shape[1]
    expert_ids = ids[rows.order].reshape(-1, n_layers, k).astype(np.int16)
    w = None if weights is None else weights[rows.order].reshape(-1, n_layers, k).astype(np.float32)
    token_seq = rows.s[rows.new_token]
    seq_starts = np.flatnonzero(np.concatenate([[True], token_seq[1:] != token_seq[:-1]])).astype(np.int64)
    return expert_ids, w, seq_starts, notes


# --- trace against model -----------------------------------------------------------------


def check_trace_fits_model(trace: RoutingTrace, model, *, path: str | None = None, what: str = "trace") -> None:
    """Raise CopeInputError unless the trace's experts, k and MoE blocks match `model`.

    `path` names the file in the message (default: the trace's source); `what` names
    the trace ("trace", "profile trace").
    """
    problems = []
    if trace.meta.n_experts != model.n_routed_experts:
        problems.append(f"{trace.meta.n_experts} experts per layer, the model has {model.n_routed_experts}")
    if trace.top_k != model.top_k:
        problems.append(f"top-{trace.top_k} routing, the model uses top-{model.top_k}")
    if tuple(trace.meta.moe_blocks) != tuple(model.moe_blocks):
        problems.append(
            f"numbers its MoE blocks {block_span(trace.meta.moe_blocks)}, the model has "
            f"{block_span(model.moe_blocks)}"
        )
    if problems:
        name = trace.meta.model or "an unnamed model"
        raise CopeInputError(
            f"{what} (from {name}) does not fit model {model.id}: " + "; ".join(problems),
            path=trace.meta.source if path is None else path,
        )
