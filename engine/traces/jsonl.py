"""Generic JSONL traces, one record per (token, layer).

`{"token": t, "layer": block, "experts": [...], "weights": [...], "seq": s}`, with
`weights` and `seq` (an int or a string) optional.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.core.errors import CopeInputError, shown
from engine.core.files import atomic_write
from engine.traces.format import TraceFormat, TraceShape, json_problem, model_shape, text_head
from engine.traces.limits import read_text_bounded
from engine.traces.trace import RoutingTrace, TraceMeta
from engine.traces.validate import assemble, build_trace, check_cells


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer too large for a float (a 401-digit weight)
        return False


@dataclass
class _Records:
    """The parsed records, column by column."""

    seq_codes: dict[object, int] = field(default_factory=dict)
    seqs: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    experts: list[list[int]] = field(default_factory=list)
    weights: list[list[float]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    has_weights: bool | None = None


def _parse_record(where: str, raw: str, number: int, top_k: int) -> dict:
    try:
        rec = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise CopeInputError(f"not valid JSON: {json_problem(exc)}", path=where, line=number) from None
    if not isinstance(rec, dict):
        raise CopeInputError("each line must be a JSON object", path=where, line=number)
    for key in ("token", "layer", "experts"):
        if key not in rec:
            raise CopeInputError(f"record lacks {key!r}", path=where, line=number)
    token, block, ids = rec["token"], rec["layer"], rec["experts"]
    if not _is_int(token):
        raise CopeInputError(f"'token' must be an integer, found {shown(token)}", path=where, line=number)
    if not _is_int(block):
        raise CopeInputError(f"'layer' must be an integer block index, found {shown(block)}", path=where, line=number)
    if not isinstance(ids, list) or not all(_is_int(i) for i in ids):
        raise CopeInputError("'experts' must be a list of integers", path=where, line=number)
    if len(ids) != top_k:
        raise CopeInputError(f"expected {top_k} expert ids, found {len(ids)}", path=where, line=number)
    return rec


def _seq_of(where: str, rec: dict, number: int) -> object:
    s = rec.get("seq")
    if s is not None and not (_is_int(s) or isinstance(s, str)):
        raise CopeInputError(f"'seq' must be an integer or a string, found {shown(s)}", path=where, line=number)
    return s


def _add_weights(where: str, out: _Records, w: object, number: int, top_k: int) -> None:
    if out.has_weights is None:
        out.has_weights = w is not None
    elif out.has_weights != (w is not None):
        raise CopeInputError(
            "'weights' must be on every record or on none (the first record "
            + ("has" if out.has_weights else "lacks")
            + " them)",
            path=where,
            line=number,
        )
    if w is None:
        return
    if not isinstance(w, list) or not all(_is_number(x) for x in w):
        raise CopeInputError("'weights' must be a list of finite numbers", path=where, line=number)
    if len(w) != top_k:
        raise CopeInputError(f"expected {top_k} weights, found {len(w)}", path=where, line=number)
    out.weights.append(w)


def _parse(where: str, text: str, top_k: int) -> _Records:
    out = _Records()
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        rec = _parse_record(where, raw, number, top_k)
        _add_weights(where, out, rec.get("weights"), number, top_k)
        seq = _seq_of(where, rec, number)
        out.seqs.append(out.seq_codes.setdefault(seq, len(out.seq_codes)))
        out.tokens.append(rec["token"])
        out.blocks.append(rec["layer"])
        out.experts.append(rec["experts"])
        out.lines.append(number)
    if not out.lines:
        raise CopeInputError("empty file: no records", path=where)
    return out


def read_jsonl_trace(path: str | os.PathLike, shape: TraceShape) -> RoutingTrace:
    """Read JSONL, one record per (token, layer):
    `{"token": t, "layer": block, "experts": [...], "weights": [...], "seq": s}`.

    `weights` and `seq` (an int or a string) are optional; weights must then be on
    every record or on none. Sequences are the distinct `seq` values in order of first
    appearance; tokens are sorted within a sequence. Tokens lacking a layer are
    dropped with a TraceWarning.
    """
    where = str(path)
    recs = _parse(where, read_text_bounded(where, k=shape.top_k), shape.top_k)
    line_arr = np.array(recs.lines, dtype=np.int64)

    def line_of(r: int) -> int:
        return int(line_arr[r])

    try:
        ids_arr = np.array(recs.experts, dtype=np.int64)
        tok_arr = np.array(recs.tokens, dtype=np.int64)
        blk_arr = np.array(recs.blocks, dtype=np.int64)
    except OverflowError:
        rows = zip(recs.tokens, recs.blocks, recs.experts)
        bad = next(i for i, (t, b, e) in enumerate(rows) if max(map(abs, [t, b, *e])) >= 2**63)
        raise CopeInputError("integer out of range", path=where, line=line_of(bad)) from None
    layer = check_cells(where, blk_arr, ids_arr, line_of, moe_blocks=shape.moe_blocks, n_experts=shape.n_experts)
    ids, w, seq_starts, notes = assemble(
        where,
        seq=np.array(recs.seqs, dtype=np.int64),
        pos=tok_arr,
        layer=layer,
        ids=ids_arr,
        weights=np.array(recs.weights, dtype=np.float64) if recs.has_weights else None,
        line_of=line_of,
        moe_blocks=shape.moe_blocks,
        seq_labels=[s if s is not None else "(none)" for s in recs.seq_codes],
    )
    meta = TraceMeta.imported(shape.model_name, where, shape.n_experts, shape.moe_blocks,
                              "generic JSONL, one record per (token, layer)", notes)
    return build_trace(where, expert_ids=ids, meta=meta, weights=w, seq_starts=seq_starts)


def write_jsonl_trace(trace: RoutingTrace, path: str | os.PathLike) -> None:
    """Write `trace` as JSONL (token = position in its sequence, seq = 0, 1, ...), atomically.

    Router weights are written when the trace has them; predictions are not part of
    the format.
    """
    t = trace.n_tokens
    bounds = np.append(trace.seq_starts, t)
    seq_of = np.repeat(np.arange(trace.n_sequences), np.diff(bounds)).tolist()
    pos = (np.arange(t) - np.repeat(trace.seq_starts, np.diff(bounds))).tolist()
    blocks = list(trace.meta.moe_blocks)
    ids = trace.expert_ids.tolist()
    w = None if trace.weights is None else trace.weights.astype(np.float64).tolist()

    def write(handle) -> None:
        for i in range(t):
            for li, block in enumerate(blocks):
                rec: dict = {"seq": seq_of[i], "token": pos[i], "layer": block, "experts": ids[i][li]}
                if w is not None:
                    rec["weights"] = w[i][li]
                handle.write(json.dumps(rec, separators=(",", ":")))
                handle.write("\n")

    atomic_write(path, write, binary=False)


def _sniff(path: Path, head: bytes) -> bool:
    return text_head(head).startswith(b"{")


def _read(path: str, *, model=None) -> RoutingTrace:
    return read_jsonl_trace(path, model_shape(path, model, "JSONL"))


FORMAT = TraceFormat(
    name="jsonl",
    label=".jsonl",
    suffixes=(".jsonl", ".ndjson"),
    sniff=_sniff,
    read=_read,
    write=write_jsonl_trace,
)
