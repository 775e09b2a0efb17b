"""Reading and writing routing traces.

Formats (DESIGN.md section 8):

- COPE's own format (`save_trace` / `load_trace`, suggested suffix `.cope.npz`): an
  uncompressed .npz with `expert_ids` (int16 [T, L, k]), optional `weights` (float32
  [T, L, k]), optional `predicted_ids` (int16 [T, L, k_pred]), `seq_starts` (int64
  [S]) and `header`, a uint8 array holding UTF-8 JSON
  `{"format": "cope-trace", "version": 1, "meta": TraceMeta.to_dict()}`. No pickle.
- llama-moe-trace CSV (`read_llama_moe_trace_csv` / `write_llama_moe_trace_csv`): no
  header, one row per (token, layer): `pos,layer,id0,...,id{k-1}`, `layer` the block
  index; prompt rows (pos < 0) are skipped; pos restarting at 0 starts a new sequence.
- Generic JSONL (`read_jsonl_trace` / `write_jsonl_trace`): one record per (token,
  layer): `{"token": t, "layer": block, "experts": [...], "weights": [...], "seq": s}`.
- The moe-beyond DeepSeek-V2-Lite-Chat CSV folder (`read_moe_beyond_csv_dir`).
- `load_any_trace` picks the reader from the path and checks the trace fits the model.

Every problem with a file is a CopeInputError naming the file and, for text formats,
the line. A token that lacks a (token, layer) cell is dropped, never fatal: the
reader emits one `TraceWarning` (a UserWarning, through the standard `warnings`
module) whose message names the file, and records the same sentence in the trace's
`meta.notes`, so the fact survives saving and shows in `describe()`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import warnings
import zipfile
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from engine.errors import CopeInputError
from engine.files import atomic_write, read_text
from engine.trace import RoutingTrace, TraceMeta

TRACE_FORMAT = "cope-trace"
TRACE_VERSION = 1
TRACE_SUFFIX = ".cope.npz"

MOE_BEYOND_MODEL = "deepseek-v2-lite-chat"
MOE_BEYOND_BLOCKS = tuple(range(1, 27))
MOE_BEYOND_EXPERTS = 64
MOE_BEYOND_TOP_K = 6
MOE_BEYOND_HEADER = ["Layer ID", "Batch Number", "Token", "Activated Expert IDs"]


class TraceWarning(UserWarning):
    """A trace file was usable but not complete (for example, tokens were dropped)."""


# --- helpers ------------------------------------------------------------------


def _bare_message(exc: CopeInputError) -> str:
    """The message of a CopeInputError without its `path:line:` prefix."""
    text = str(exc)
    if exc.path is not None:
        prefix = f"{exc.path}:{exc.line}: " if exc.line is not None else f"{exc.path}: "
        if text.startswith(prefix):
            return text[len(prefix):]
    return text


def _build_trace(path: str, **kwargs) -> RoutingTrace:
    """RoutingTrace(...), with its validation errors re-labelled with the file."""
    try:
        return RoutingTrace(**kwargs)
    except CopeInputError as exc:
        raise CopeInputError(_bare_message(exc), path=path) from None


def _describe_blocks(blocks: Sequence[int]) -> str:
    blocks = list(blocks)
    if blocks and blocks == list(range(blocks[0], blocks[0] + len(blocks))):
        return f"{blocks[0]}..{blocks[-1]}" if len(blocks) > 1 else str(blocks[0])
    return ",".join(str(b) for b in blocks)


def _block_lookup(moe_blocks: Sequence[int]) -> np.ndarray:
    """Array mapping block index -> trace layer, -1 where the block is not MoE."""
    blocks = [int(b) for b in moe_blocks]
    if not blocks or min(blocks) < 0 or len(set(blocks)) != len(blocks):
        raise CopeInputError(f"bad MoE block list {blocks!r}")
    lookup = np.full(max(blocks) + 1, -1, dtype=np.int64)
    lookup[blocks] = np.arange(len(blocks))
    return lookup


def _first_bad_row(bad: np.ndarray) -> int | None:
    idx = np.flatnonzero(bad)
    return int(idx[0]) if idx.size else None


def _check_cells(
    path: str,
    blocks: np.ndarray,
    ids: np.ndarray,
    line_of: Callable[[int], int],
    *,
    moe_blocks: Sequence[int],
    n_experts: int,
) -> np.ndarray:
    """Validate blocks and ids of parsed rows; returns each row's trace layer index."""
    lookup = _block_lookup(moe_blocks)
    in_table = (blocks >= 0) & (blocks < lookup.size)
    layer = np.full(blocks.shape, -1, dtype=np.int64)
    layer[in_table] = lookup[blocks[in_table]]
    r = _first_bad_row(layer < 0)
    if r is not None:
        raise CopeInputError(
            f"block {int(blocks[r])} is not an MoE block of the model "
            f"(MoE blocks {_describe_blocks(moe_blocks)})",
            path=path,
            line=line_of(r),
        )
    if ids.size:
        r = _first_bad_row(((ids < 0) | (ids >= n_experts)).any(axis=1))
        if r is not None:
            bad = ids[r][(ids[r] < 0) | (ids[r] >= n_experts)][0]
            raise CopeInputError(
                f"expert id {int(bad)} out of range 0..{n_experts - 1}", path=path, line=line_of(r)
            )
        if ids.shape[1] > 1:
            s = np.sort(ids, axis=1)
            r = _first_bad_row((s[:, 1:] == s[:, :-1]).any(axis=1))
            if r is not None:
                raise CopeInputError("the same expert id appears twice in one row", path=path, line=line_of(r))
    return layer


def _assemble(
    path: str,
    *,
    seq: np.ndarray,
    pos: np.ndarray,
    layer: np.ndarray,
    ids: np.ndarray,
    weights: np.ndarray | None,
    line_of: Callable[[int], int],
    moe_blocks: Sequence[int],
    seq_labels: Sequence[object] | None = None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, list[str]]:
    """Turn per-(token, layer) rows into token-major arrays.

    seq: int codes (0, 1, ... in order of first appearance); pos: token position
    within its sequence; layer: trace layer index. Returns (expert_ids [T, L, k],
    weights or None, seq_starts, notes). Duplicate cells are errors; tokens that lack
    a layer are dropped with a TraceWarning (and a note).
    """
    n_layers = len(moe_blocks)
    order = np.lexsort((layer, pos, seq))
    s, p, lyr = seq[order], pos[order], layer[order]
    same_cell = (s[1:] == s[:-1]) & (p[1:] == p[:-1]) & (lyr[1:] == lyr[:-1])
    r = _first_bad_row(same_cell)
    if r is not None:
        first, second = sorted((int(order[r]), int(order[r + 1])))
        label = seq_labels[int(s[r])] if seq_labels is not None else int(s[r]) + 1
        raise CopeInputError(
            f"second row for token {int(p[r])} of sequence {label!r}, block {moe_blocks[int(lyr[r])]} "
            f"(first at line {line_of(first)})",
            path=path,
            line=line_of(second),
        )
    new_token = np.ones(s.size, dtype=bool)
    new_token[1:] = (s[1:] != s[:-1]) | (p[1:] != p[:-1])
    token_of_row = np.cumsum(new_token) - 1
    starts = np.flatnonzero(new_token)
    counts = np.diff(np.append(starts, s.size))
    complete = counts == n_layers
    notes: list[str] = []
    if not complete.all():
        n_drop = int((~complete).sum())
        t = int(np.flatnonzero(~complete)[0])
        row0 = starts[t]
        have = set(lyr[row0 : row0 + counts[t]].tolist())
        missing = [moe_blocks[i] for i in range(n_layers) if i not in have]
        label = seq_labels[int(s[row0])] if seq_labels is not None else int(s[row0]) + 1
        note = (
            f"dropped {n_drop} of {counts.size} tokens that lack a layer (first: token {int(p[row0])} "
            f"of sequence {label!r} at line {line_of(int(order[row0]))} has no row for block "
            f"{missing[0]})"
        )
        warnings.warn(TraceWarning(f"{path}: {note}"), stacklevel=3)
        notes.append(note)
        if not complete.any():
            raise CopeInputError("no complete token: every token lacks a layer", path=path)
        keep = complete[token_of_row]
        order = order[keep]
        s, p = s[keep], p[keep]
        new_token = new_token[keep]
    k = ids.shape[1]
    expert_ids = ids[order].reshape(-1, n_layers, k).astype(np.int16)
    w = None if weights is None else weights[order].reshape(-1, n_layers, k).astype(np.float32)
    token_seq = s[new_token]
    seq_starts = np.flatnonzero(np.concatenate([[True], token_seq[1:] != token_seq[:-1]])).astype(np.int64)
    return expert_ids, w, seq_starts, notes


# --- COPE's own format ---------------------------------------------------------


def save_trace(trace: RoutingTrace, path: str | os.PathLike) -> None:
    """Write `trace` to `path` (an .npz; suggested suffix .cope.npz), atomically."""
    header = json.dumps(
        {"format": TRACE_FORMAT, "version": TRACE_VERSION, "meta": trace.meta.to_dict()},
        ensure_ascii=False,
    ).encode("utf-8")
    arrays = {
        "header": np.frombuffer(header, dtype=np.uint8),
        "expert_ids": np.ascontiguousarray(trace.expert_ids, dtype=np.int16),
        "seq_starts": np.ascontiguousarray(trace.seq_starts, dtype=np.int64),
    }
    if trace.weights is not None:
        arrays["weights"] = np.ascontiguousarray(trace.weights, dtype=np.float32)
    if trace.predicted_ids is not None:
        arrays["predicted_ids"] = np.ascontiguousarray(trace.predicted_ids, dtype=np.int16)
    atomic_write(path, lambda handle: np.savez(handle, **arrays), binary=True)


def _as_int16(path: str, name: str, arr: np.ndarray, ndim: int, low: int) -> np.ndarray:
    if arr.dtype.kind not in "iu" or arr.ndim != ndim:
        raise CopeInputError(
            f"array {name!r} must be a {ndim}-D integer array, found {arr.ndim}-D {arr.dtype}", path=path
        )
    if arr.size and (arr.min() < low or arr.max() > np.iinfo(np.int16).max):
        raise CopeInputError(f"array {name!r} holds values outside {low}..32767", path=path)
    return arr.astype(np.int16, copy=False)


def load_trace(path: str | os.PathLike) -> RoutingTrace:
    """Read a trace written by `save_trace`; every problem is a CopeInputError naming the file."""
    where = str(path)
    if os.path.isdir(where):
        raise CopeInputError("is a folder, expected a .cope.npz file", path=where)
    if not os.path.exists(where):
        raise CopeInputError("no such file", path=where)
    try:
        is_zip = zipfile.is_zipfile(where)
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=where) from None
    if not is_zip:
        raise CopeInputError("not a COPE trace: not an .npz (zip) file, or it is truncated", path=where)
    try:
        with np.load(where, allow_pickle=False) as z:
            names = set(z.files)
            missing = [n for n in ("header", "expert_ids", "seq_starts") if n not in names]
            if missing:
                raise CopeInputError(f"not a COPE trace: missing array(s) {', '.join(missing)}", path=where)
            raw = {n: z[n] for n in ("header", "expert_ids", "seq_starts", "weights", "predicted_ids") if n in names}
    except CopeInputError:
        raise
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise CopeInputError("holds a pickled (object) array, which COPE never loads", path=where) from None
        raise CopeInputError(f"damaged .npz: {exc}", path=where) from None
    except (OSError, EOFError, KeyError, zipfile.BadZipFile, RuntimeError) as exc:
        raise CopeInputError(f"damaged .npz: {exc}", path=where) from None

    header = raw["header"]
    if header.dtype != np.uint8 or header.ndim != 1:
        raise CopeInputError("header must be a 1-D uint8 array of UTF-8 JSON", path=where)
    try:
        head = json.loads(header.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CopeInputError(f"header is not UTF-8 JSON: {exc}", path=where) from None
    if not isinstance(head, dict) or head.get("format") != TRACE_FORMAT:
        found = head.get("format") if isinstance(head, dict) else type(head).__name__
        raise CopeInputError(f"not a COPE trace: header format is {found!r}, expected {TRACE_FORMAT!r}", path=where)
    version = head.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CopeInputError(f"bad trace format version {version!r}", path=where)
    if version > TRACE_VERSION:
        raise CopeInputError(
            f"trace format version {version} is newer than this COPE reads ({TRACE_VERSION}); upgrade COPE",
            path=where,
        )
    try:
        meta_dict = head["meta"]
        if not isinstance(meta_dict, dict):
            raise TypeError("meta is not an object")
        meta = TraceMeta.from_dict(meta_dict)
    except (KeyError, TypeError, ValueError) as exc:
        raise CopeInputError(f"bad trace metadata in header: {exc!r}", path=where) from None

    expert_ids = _as_int16(where, "expert_ids", raw["expert_ids"], 3, 0)
    seq_starts = raw["seq_starts"]
    if seq_starts.dtype.kind not in "iu" or seq_starts.ndim != 1:
        raise CopeInputError(
            f"array 'seq_starts' must be a 1-D integer array, found {seq_starts.ndim}-D {seq_starts.dtype}",
            path=where,
        )
    weights = raw.get("weights")
    if weights is not None:
        if weights.dtype.kind != "f" or weights.shape != expert_ids.shape:
            raise CopeInputError(
                f"array 'weights' must be floating point shaped like expert_ids {expert_ids.shape}, "
                f"found {weights.dtype} {weights.shape}",
                path=where,
            )
        if not np.all(np.isfinite(weights)):
            raise CopeInputError("array 'weights' holds non-finite values", path=where)
        weights = weights.astype(np.float32, copy=False)
    predicted = raw.get("predicted_ids")
    if predicted is not None:
        predicted = _as_int16(where, "predicted_ids", predicted, 3, -1)
    return _build_trace(
        where,
        expert_ids=expert_ids,
        meta=meta,
        weights=weights,
        predicted_ids=predicted,
        seq_starts=seq_starts.astype(np.int64, copy=False),
    )


# --- llama-moe-trace CSV --------------------------------------------------------


def _line_finder(text: str) -> Callable[[int], int]:
    """Maps a data-row index (blank lines not counted) to its 1-based line number."""
    cache: list[int] = []

    def line_of(row: int) -> int:
        if not cache:
            cache.extend(i + 1 for i, ln in enumerate(text.split("\n")) if ln.strip())
        return cache[row] if row < len(cache) else len(cache)

    return line_of


def _parse_int_table_slow(path: str, text: str, n_fields: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Line-by-line parse with exact error locations; returns (table, line numbers)."""
    rows: list[list[int]] = []
    lines: list[int] = []
    limit = 2**62
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        fields = raw.split(",")
        if len(fields) != n_fields:
            raise CopeInputError(
                f"expected {n_fields} comma-separated fields ({what}), found {len(fields)}", path=path, line=number
            )
        values = []
        for f in fields:
            try:
                v = int(f.strip())
            except ValueError:
                raise CopeInputError(f"field {f.strip()!r} is not an integer", path=path, line=number) from None
            if abs(v) >= limit:
                raise CopeInputError(f"field {v} is out of range", path=path, line=number)
            values.append(v)
        rows.append(values)
        lines.append(number)
    return np.array(rows, dtype=np.int64).reshape(-1, n_fields), np.array(lines, dtype=np.int64)


def _parse_int_table(path: str, text: str, n_fields: int, what: str) -> tuple[np.ndarray, Callable[[int], int]]:
    """Parse a headerless CSV of integers; fast C path, line-by-line path to locate errors."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            table = np.loadtxt(io.StringIO(text), delimiter=",", dtype=np.int64, ndmin=2, comments=None)
    except (ValueError, OverflowError, UserWarning, DeprecationWarning):
        table = None
    if table is not None and table.shape[1] == n_fields:
        return table, _line_finder(text)
    table, lines = _parse_int_table_slow(path, text, n_fields, what)
    return table, lambda row: int(lines[row])


def read_llama_moe_trace_csv(
    path: str | os.PathLike,
    *,
    model_moe_blocks: Sequence[int],
    n_experts: int,
    top_k: int,
    model_name: str = "",
) -> RoutingTrace:
    """Read a llama-moe-trace CSV (`pos,layer,id0..id{k-1}`, no header).

    Decode rows (pos >= 0) are kept, prompt rows skipped. A new sequence starts where
    pos restarts at 0: after a row with pos > 0, after prompt rows, or when a pos-0
    cell repeats. Rows of one token may come in any layer order. Tokens lacking a layer
    are dropped with a TraceWarning.
    """
    where = str(path)
    text = read_text(where)
    if not text.strip():
        raise CopeInputError("empty file: no decode rows (pos >= 0)", path=where)
    n_fields = top_k + 2
    table, line_of = _parse_int_table(where, text, n_fields, f"pos,layer and {top_k} expert ids")
    pos_all = table[:, 0]
    decode = pos_all >= 0
    rows = np.flatnonzero(decode)
    if rows.size == 0:
        raise CopeInputError("no decode rows (pos >= 0); only prompt rows", path=where)
    d = table[rows]

    def dline(r: int) -> int:
        return line_of(int(rows[r]))

    layer = _check_cells(where, d[:, 1], d[:, 2:], dline, moe_blocks=model_moe_blocks, n_experts=n_experts)
    pos = d[:, 0]

    # Sequence boundaries.
    prompt_seen = np.cumsum(~decode)[rows]
    start = np.zeros(rows.size, dtype=bool)
    start[0] = True
    if rows.size > 1:
        start[1:] = (pos[1:] == 0) & ((pos[:-1] != 0) | (prompt_seen[1:] != prompt_seen[:-1]))
    zero = np.flatnonzero(pos == 0)
    if zero.size:
        # Consecutive sequences of one token each: a repeated pos-0 cell starts a new one.
        seen: set[int] = set()
        prev = -2
        for j in zero.tolist():
            if start[j] or j != prev + 1:
                seen = set()
            lyr = int(layer[j])
            if lyr in seen:
                start[j] = True
                seen = set()
            seen.add(lyr)
            prev = j
    seq = np.cumsum(start) - 1

    ids, _, seq_starts, notes = _assemble(
        where,
        seq=seq,
        pos=pos,
        layer=layer,
        ids=d[:, 2:],
        weights=None,
        line_of=dline,
        moe_blocks=model_moe_blocks,
    )
    meta = TraceMeta(
        model=model_name,
        source=where,
        origin="imported",
        n_experts=int(n_experts),
        moe_blocks=tuple(int(b) for b in model_moe_blocks),
        recorded_with="llama-moe-trace CSV (llama.cpp fork): decode rows, ids in descending router score",
        notes=("no router weights in this format",) + tuple(notes),
    )
    return _build_trace(where, expert_ids=ids, meta=meta, seq_starts=seq_starts)


def write_llama_moe_trace_csv(trace: RoutingTrace, path: str | os.PathLike) -> None:
    """Write the decode rows of `trace` (pos from 0 in each sequence), atomically.

    The format keeps ids and sequence boundaries; router weights and predictions are
    not part of it and are not written.
    """
    t, n_layers, k = trace.expert_ids.shape
    bounds = np.append(trace.seq_starts, t)
    pos = np.arange(t, dtype=np.int64) - np.repeat(trace.seq_starts, np.diff(bounds))
    table = np.empty((t, n_layers, k + 2), dtype=np.int64)
    table[:, :, 0] = pos[:, None]
    table[:, :, 1] = np.asarray(trace.meta.moe_blocks, dtype=np.int64)[None, :]
    table[:, :, 2:] = trace.expert_ids
    table = table.reshape(-1, k + 2)

    def write(handle) -> None:
        chunk = 65536
        for i in range(0, table.shape[0], chunk):
            part = table[i : i + chunk]
            handle.write("\n".join(",".join(map(str, row)) for row in part.tolist()))
            handle.write("\n")

    atomic_write(path, write, binary=False)


# --- generic JSONL --------------------------------------------------------------


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


def read_jsonl_trace(
    path: str | os.PathLike,
    *,
    model_moe_blocks: Sequence[int],
    n_experts: int,
    top_k: int,
    model_name: str = "",
) -> RoutingTrace:
    """Read JSONL, one record per (token, layer):
    `{"token": t, "layer": block, "experts": [...], "weights": [...], "seq": s}`.

    `weights` and `seq` (an int or a string) are optional; weights must then be on
    every record or on none. Sequences are the distinct `seq` values in order of first
    appearance; tokens are sorted within a sequence. Tokens lacking a layer are
    dropped with a TraceWarning.
    """
    where = str(path)
    text = read_text(where)
    seq_codes: dict[object, int] = {}
    seqs: list[int] = []
    tokens: list[int] = []
    blocks: list[int] = []
    experts: list[list[int]] = []
    weights: list[list[float]] = []
    lines: list[int] = []
    has_weights: bool | None = None
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise CopeInputError(f"not valid JSON: {exc.msg} (column {exc.colno})", path=where, line=number) from None
        if not isinstance(rec, dict):
            raise CopeInputError("each line must be a JSON object", path=where, line=number)
        for key in ("token", "layer", "experts"):
            if key not in rec:
                raise CopeInputError(f"record lacks {key!r}", path=where, line=number)
        token, block, ids = rec["token"], rec["layer"], rec["experts"]
        if not _is_int(token):
            raise CopeInputError(f"'token' must be an integer, found {token!r}", path=where, line=number)
        if not _is_int(block):
            raise CopeInputError(f"'layer' must be an integer block index, found {block!r}", path=where, line=number)
        if not isinstance(ids, list) or not all(_is_int(i) for i in ids):
            raise CopeInputError("'experts' must be a list of integers", path=where, line=number)
        if len(ids) != top_k:
            raise CopeInputError(f"expected {top_k} expert ids, found {len(ids)}", path=where, line=number)
        w = rec.get("weights")
        if has_weights is None:
            has_weights = w is not None
        elif has_weights != (w is not None):
            raise CopeInputError(
                "'weights' must be on every record or on none (the first record "
                + ("has" if has_weights else "lacks")
                + " them)",
                path=where,
                line=number,
            )
        if w is not None:
            if not isinstance(w, list) or not all(_is_number(x) for x in w):
                raise CopeInputError("'weights' must be a list of finite numbers", path=where, line=number)
            if len(w) != top_k:
                raise CopeInputError(f"expected {top_k} weights, found {len(w)}", path=where, line=number)
            weights.append(w)
        s = rec.get("seq")
        if s is not None and not (_is_int(s) or isinstance(s, str)):
            raise CopeInputError(f"'seq' must be an integer or a string, found {s!r}", path=where, line=number)
        code = seq_codes.setdefault(s, len(seq_codes))
        seqs.append(code)
        tokens.append(token)
        blocks.append(block)
        experts.append(ids)
        lines.append(number)
    if not lines:
        raise CopeInputError("empty file: no records", path=where)
    line_arr = np.array(lines, dtype=np.int64)

    def line_of(r: int) -> int:
        return int(line_arr[r])

    try:
        ids_arr = np.array(experts, dtype=np.int64)
        tok_arr = np.array(tokens, dtype=np.int64)
        blk_arr = np.array(blocks, dtype=np.int64)
    except OverflowError:
        bad = next(i for i, (t, b, e) in enumerate(zip(tokens, blocks, experts)) if max(map(abs, [t, b, *e])) >= 2**63)
        raise CopeInputError("integer out of range", path=where, line=line_of(bad)) from None
    layer = _check_cells(where, blk_arr, ids_arr, line_of, moe_blocks=model_moe_blocks, n_experts=n_experts)
    w_arr = np.array(weights, dtype=np.float64) if has_weights else None
    labels = [s if s is not None else "(none)" for s in seq_codes]
    ids, w, seq_starts, notes = _assemble(
        where,
        seq=np.array(seqs, dtype=np.int64),
        pos=tok_arr,
        layer=layer,
        ids=ids_arr,
        weights=w_arr,
        line_of=line_of,
        moe_blocks=model_moe_blocks,
        seq_labels=labels,
    )
    meta = TraceMeta(
        model=model_name,
        source=where,
        origin="imported",
        n_experts=int(n_experts),
        moe_blocks=tuple(int(b) for b in model_moe_blocks),
        recorded_with="generic JSONL, one record per (token, layer)",
        notes=tuple(notes),
    )
    return _build_trace(where, expert_ids=ids, meta=meta, weights=w, seq_starts=seq_starts)


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


# --- moe-beyond DeepSeek-V2-Lite-Chat CSV folder -----------------------------------

_ID_STRIP = str.maketrans("", "", "[] \t\"")


def _csv_line_of(path: str, row_index: int) -> int:
    """Physical line number where data row `row_index` (0-based, after the header) ends."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        for i, _ in enumerate(reader):
            if i == row_index + 1:
                return reader.line_num
        return reader.line_num


def _parse_ints_fast(text: str, expected: int) -> np.ndarray | None:
    if not text:
        return np.zeros(0, dtype=np.int64) if expected == 0 else None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            values = np.fromstring(text, dtype=np.int64, sep=",")
    except (ValueError, DeprecationWarning):
        return None
    return values if values.size == expected else None


def _read_moe_beyond_file(path: str) -> tuple[np.ndarray, list[str]]:
    """One prompt file -> (ids int16 [tokens, 26, 6], notes). Raises CopeInputError."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            rows = list(csv.reader(handle))
    except UnicodeDecodeError as exc:
        raise CopeInputError(f"not UTF-8 text (byte {exc.start})", path=path) from None
    except csv.Error as exc:
        raise CopeInputError(f"not a readable CSV: {exc}", path=path) from None
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if not rows:
        raise CopeInputError("empty file", path=path)
    header = [h.strip() for h in rows[0]]
    if header != MOE_BEYOND_HEADER:
        raise CopeInputError(f"header is {rows[0]!r}, expected {','.join(MOE_BEYOND_HEADER)!r}", path=path, line=1)
    rows = rows[1:]
    n = len(rows)
    if n == 0:
        raise CopeInputError("no data rows after the header", path=path)

    def line_of(r: int) -> int:
        return _csv_line_of(path, r)

    for r, row in enumerate(rows):
        if len(row) != 4:
            raise CopeInputError(f"expected 4 fields, found {len(row)}", path=path, line=line_of(r))
    blocks = _parse_ints_fast(",".join([row[0] for row in rows]), n)
    if blocks is None:
        for r, row in enumerate(rows):
            try:
                int(row[0])
            except ValueError:
                raise CopeInputError(f"Layer ID {row[0]!r} is not an integer", path=path, line=line_of(r)) from None
        raise CopeInputError("Layer ID column is not readable", path=path)  # pragma: no cover
    k = MOE_BEYOND_TOP_K
    ids = _parse_ints_fast(",".join([row[3] for row in rows]).translate(_ID_STRIP), n * k)
    if ids is None:
        for r, row in enumerate(rows):
            cell = row[3].strip()
            if not (cell.startswith("[") and cell.endswith("]")):
                raise CopeInputError(
                    f"Activated Expert IDs {row[3]!r} is not a [..] list", path=path, line=line_of(r)
                )
            parts = [p.strip() for p in cell[1:-1].split(",") if p.strip()]
            for p in parts:
                try:
                    int(p)
                except ValueError:
                    raise CopeInputError(f"expert id {p!r} is not an integer", path=path, line=line_of(r)) from None
            if len(parts) != k:
                raise CopeInputError(f"expected {k} expert ids, found {len(parts)}", path=path, line=line_of(r))
        raise CopeInputError("Activated Expert IDs column is not readable", path=path)  # pragma: no cover
    ids = ids.reshape(n, k)
    layer = _check_cells(path, blocks, ids, line_of, moe_blocks=MOE_BEYOND_BLOCKS, n_experts=MOE_BEYOND_EXPERTS)

    # Rows come grouped layer by layer; a token's position is its index in its group.
    r = _first_bad_row(layer[1:] < layer[:-1])
    if r is not None:
        raise CopeInputError(
            f"rows are not grouped layer by layer (block {int(blocks[r + 1])} after block {int(blocks[r])})",
            path=path,
            line=line_of(r + 1),
        )
    group_starts = np.flatnonzero(np.concatenate([[True], layer[1:] != layer[:-1]]))
    group_sizes = np.diff(np.append(group_starts, n))
    present = layer[group_starts]
    n_layers = len(MOE_BEYOND_BLOCKS)
    sizes = np.zeros(n_layers, dtype=np.int64)
    sizes[present] = group_sizes
    starts = np.zeros(n_layers, dtype=np.int64)
    starts[present] = group_starts
    n_tokens = int(sizes.min())
    notes: list[str] = []
    if n_tokens != int(sizes.max()):
        short = int(np.argmin(sizes))
        note = (
            f"dropped {int(sizes.max()) - n_tokens} of {int(sizes.max())} tokens that lack a layer "
            f"(block {MOE_BEYOND_BLOCKS[short]} has {n_tokens} rows)"
        )
        warnings.warn(TraceWarning(f"{path}: {note}"), stacklevel=3)
        notes.append(note)
    if n_tokens == 0:
        return np.zeros((0, n_layers, k), dtype=np.int16), notes
    # The token text at one position must agree across layers, or rows are misaligned.
    first = int(present[0])
    ref = [row[2] for row in rows[starts[first] : starts[first] + n_tokens]]
    for li in present[1:].tolist():
        s0 = int(starts[li])
        if [row[2] for row in rows[s0 : s0 + n_tokens]] != ref:
            i = next(i for i in range(n_tokens) if rows[s0 + i][2] != ref[i])
            raise CopeInputError(
                f"block {MOE_BEYOND_BLOCKS[li]} row {i} is token {rows[s0 + i][2]!r} but block "
                f"{MOE_BEYOND_BLOCKS[first]} has {ref[i]!r} there: rows are misaligned",
                path=path,
                line=line_of(s0 + i),
            )
    take = starts[:, None] + np.arange(n_tokens)[None, :]  # [L, T]
    out = ids[take].transpose(1, 0, 2).astype(np.int16)
    return np.ascontiguousarray(out), notes


def _number_key(name: str) -> tuple[int, str]:
    m = re.search(r"(\d+)", name)
    return (int(m.group(1)) if m else -1, name)


def _moe_beyond_files(folder: Path) -> list[Path]:
    files = [p for p in folder.iterdir() if p.is_file() and p.suffix.lower() == ".csv"]
    if not files:
        subs = [d for d in folder.iterdir() if d.is_dir() and any(d.glob("*.csv"))]
        if len(subs) == 1:
            return _moe_beyond_files(subs[0])
    return sorted(files, key=lambda p: _number_key(p.name))


def read_moe_beyond_csv_dir(folder: str | os.PathLike, *, max_files: int | None = None) -> RoutingTrace:
    """Read the moe-beyond DeepSeek-V2-Lite-Chat routing folder: one CSV per prompt.

    Each prompt is one sequence; files are ordered by the number in their name. The
    routing is teacher forcing over the prompts, replayed as a stand-in for decode.
    Expert order within a token is the file's (arbitrary: treat it as a set).
    """
    where = str(folder)
    base = Path(folder)
    if not base.is_dir():
        raise CopeInputError("not a folder of moe-beyond CSV files", path=where)
    files = _moe_beyond_files(base)
    if not files:
        raise CopeInputError("no .csv files in the folder", path=where)
    if max_files is not None:
        if max_files < 1:
            raise CopeInputError(f"max_files must be at least 1, got {max_files}", path=where)
        files = files[:max_files]
    parts: list[np.ndarray] = []
    notes: list[str] = []
    for f in files:
        ids, file_notes = _read_moe_beyond_file(str(f))
        notes.extend(f"{f.name}: {n}" for n in file_notes)
        if ids.shape[0]:
            parts.append(ids)
    if not parts:
        raise CopeInputError("no complete token in any file", path=where)
    lengths = np.array([p.shape[0] for p in parts], dtype=np.int64)
    seq_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    meta = TraceMeta(
        model=MOE_BEYOND_MODEL,
        source=where,
        origin="imported",
        n_experts=MOE_BEYOND_EXPERTS,
        moe_blocks=MOE_BEYOND_BLOCKS,
        recorded_with=(
            f"teacher forcing: one forward pass over each of {len(parts)} prompts; prompt tokens "
            "replayed as decode steps (a stand-in for decode routing)"
        ),
        notes=(
            "origin: github.com/ngavhane/moe-beyond (training_data_eamc), no licence declared",
            "expert order within a token is arbitrary; no router scores recorded",
            "each prompt file is one sequence",
        )
        + tuple(notes),
    )
    return _build_trace(where, expert_ids=np.concatenate(parts), meta=meta, seq_starts=seq_starts)


# --- dispatch -------------------------------------------------------------------


def check_trace_fits_model(trace: RoutingTrace, model, *, path: str) -> None:
    """Raise CopeInputError unless the trace's experts, k and MoE blocks match `model`."""
    problems = []
    if trace.meta.n_experts != model.n_routed_experts:
        problems.append(f"{trace.meta.n_experts} experts per layer, the model has {model.n_routed_experts}")
    if trace.top_k != model.top_k:
        problems.append(f"top-{trace.top_k} routing, the model uses top-{model.top_k}")
    if tuple(trace.meta.moe_blocks) != tuple(model.moe_blocks):
        problems.append(
            f"MoE blocks {_describe_blocks(trace.meta.moe_blocks)}, the model has "
            f"{_describe_blocks(model.moe_blocks)}"
        )
    if problems:
        name = trace.meta.model or "an unnamed model"
        raise CopeInputError(
            f"trace (from {name}) does not fit model {model.id}: " + "; ".join(problems), path=path
        )


def _sniff(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if head.startswith(b"PK"):
        return "npz"
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if stripped.startswith(b"{"):
        return "jsonl"
    if stripped.startswith(b"Layer ID,"):
        return "moe-beyond"
    if stripped[:1].isdigit() or stripped.startswith(b"-"):
        return "csv"
    return "unknown"


def load_any_trace(path: str | os.PathLike, *, model) -> RoutingTrace:
    """Read a trace in any supported format and check it fits `model` (a ModelSpec).

    A folder is read as moe-beyond CSVs; `.npz` as COPE's own format; `.csv` as
    llama-moe-trace (or a single moe-beyond file, recognised by its header); `.jsonl`
    as generic JSONL; anything else by its first bytes.
    """
    where = str(path)
    p = Path(path)
    if p.is_dir():
        trace = read_moe_beyond_csv_dir(p)
        check_trace_fits_model(trace, model, path=where)
        return trace
    if not p.exists():
        raise CopeInputError("no such file or folder", path=where)
    name = p.name.lower()
    kind = _sniff(where)
    if name.endswith(".npz"):
        kind = "npz"
    elif name.endswith((".jsonl", ".ndjson")):
        kind = "jsonl"
    elif name.endswith(".csv") and kind != "moe-beyond":
        kind = "csv"
    common = dict(
        model_moe_blocks=model.moe_blocks,
        n_experts=model.n_routed_experts,
        top_k=model.top_k,
        model_name=model.id,
    )
    if kind == "npz":
        trace = load_trace(where)
    elif kind == "jsonl":
        trace = read_jsonl_trace(where, **common)
    elif kind == "csv":
        trace = read_llama_moe_trace_csv(where, **common)
    elif kind == "moe-beyond":
        ids, notes = _read_moe_beyond_file(where)
        if ids.shape[0] == 0:
            raise CopeInputError("no complete token", path=where)
        trace = _build_trace(
            where,
            expert_ids=ids,
            meta=TraceMeta(
                model=MOE_BEYOND_MODEL,
                source=where,
                origin="imported",
                n_experts=MOE_BEYOND_EXPERTS,
                moe_blocks=MOE_BEYOND_BLOCKS,
                recorded_with="teacher forcing: one forward pass over one prompt; prompt tokens replayed "
                "as decode steps (a stand-in for decode routing)",
                notes=("expert order within a token is arbitrary; no router scores recorded", *notes),
            ),
        )
    else:
        raise CopeInputError(
            "unknown trace format (expected .cope.npz, llama-moe-trace .csv, .jsonl or a folder of "
            "moe-beyond CSV files)",
            path=where,
        )
    check_trace_fits_model(trace, model, path=where)
    return trace


__all__ = [
    "TRACE_FORMAT",
    "TRACE_VERSION",
    "TRACE_SUFFIX",
    "TraceWarning",
    "save_trace",
    "load_trace",
    "read_llama_moe_trace_csv",
    "write_llama_moe_trace_csv",
    "read_jsonl_trace",
    "write_jsonl_trace",
    "read_moe_beyond_csv_dir",
    "check_trace_fits_model",
    "load_any_trace",
]
