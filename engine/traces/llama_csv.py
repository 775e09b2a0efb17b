"""llama-moe-trace CSV (the llama.cpp fork's routing dump).

No header (a first line of column names, as CSV tools add, is skipped), one row per (token, layer): `pos,layer,id0,...,id{k-1}`, `layer` the block
index, ids in descending router score. Prompt rows (pos < 0) are skipped; pos
restarting at 0 starts a new sequence; no router weights.
"""

from __future__ import annotations

import io
import os
import re
import warnings
from pathlib import Path

import numpy as np

from engine.core.errors import CopeInputError
from engine.core.files import atomic_write
from engine.traces.format import TraceFormat, TraceShape, model_shape, text_head
from engine.traces.limits import read_text_bounded
from engine.traces.trace import RoutingTrace, TraceMeta
from engine.traces.validate import LineOf, assemble, build_trace, check_cells

_INT_LIMIT = 2**62
_INT_RE = re.compile(r"-?[0-9]+")


def _line_finder(text: str) -> LineOf:
    """Maps a data-row index (blank lines not counted) to its 1-based line number."""
    cache: list[int] = []

    def line_of(row: int) -> int:
        if not cache:
            cache.extend(i + 1 for i, ln in enumerate(text.split("\n")) if ln.strip())
        return cache[row] if row < len(cache) else len(cache)

    return line_of


def _parse_int_row(path: str, raw: str, number: int, n_fields: int, what: str) -> list[int]:
    fields = raw.split(",")
    if len(fields) != n_fields:
        raise CopeInputError(
            f"expected {n_fields} comma-separated fields ({what}), found {len(fields)}", path=path, line=number
        )
    values = []
    for f in fields:
        cell = f.strip()
        # Plain ASCII digits only: int() also takes "1_1", "+1" and Arabic-Indic digits.
        shown = cell if len(cell) <= 30 else cell[:27] + "..."
        if not _INT_RE.fullmatch(cell):
            raise CopeInputError(f"field {shown!r} is not an integer", path=path, line=number)
        v = int(cell) if len(cell) <= 20 else _INT_LIMIT  # never convert thousands of digits
        if abs(v) >= _INT_LIMIT:
            raise CopeInputError(f"field {shown} is out of range", path=path, line=number)
        values.append(v)
    return values


def _parse_int_table_slow(path: str, text: str, n_fields: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Line-by-line parse with exact error locations; returns (table, line numbers)."""
    rows: list[list[int]] = []
    lines: list[int] = []
    for number, raw in enumerate(text.split("\n"), start=1):
        if raw.strip():
            rows.append(_parse_int_row(path, raw, number, n_fields, what))
            lines.append(number)
    return np.array(rows, dtype=np.int64).reshape(-1, n_fields), np.array(lines, dtype=np.int64)


def _parse_int_table(path: str, text: str, n_fields: int, what: str) -> tuple[np.ndarray, LineOf]:
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


def _sequence_codes(pos: np.ndarray, layer: np.ndarray, prompt_seen: np.ndarray) -> np.ndarray:
    """Sequence code (0, 1, ...) of each decode row.

    A sequence starts where pos restarts at 0: after a row with pos > 0, after prompt
    rows (prompt_seen counts them), or when a pos-0 cell repeats.
    """
    start = np.zeros(pos.size, dtype=bool)
    start[0] = True
    if pos.size > 1:
        start[1:] = (pos[1:] == 0) & ((pos[:-1] != 0) | (prompt_seen[1:] != prompt_seen[:-1]))
    # Consecutive sequences of one token each: a repeated pos-0 cell starts a new one.
    seen: set[int] = set()
    prev = -2
    for j in np.flatnonzero(pos == 0).tolist():
        if start[j] or j != prev + 1:
            seen = set()
        lyr = int(layer[j])
        if lyr in seen:
            start[j] = True
            seen = set()
        seen.add(lyr)
        prev = j
    return np.cumsum(start) - 1


_HEADER = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_ ]*(\s*,\s*[A-Za-z_][A-Za-z0-9_ ]*)+\s*")


def _without_header(text: str) -> tuple[str, bool]:
    """The fork writes no header, but a CSV tool adds one (`pos,layer,id0,...`): a first
    line of column names is blanked (the line numbers of errors stay the file's)."""
    first, newline, rest = text.partition("\n")
    if _HEADER.fullmatch(first.rstrip("\r")):
        return newline + rest, True
    return text, False


def read_llama_moe_trace_csv(path: str | os.PathLike, shape: TraceShape) -> RoutingTrace:
    """Read a llama-moe-trace CSV (`pos,layer,id0..id{k-1}`, no header).

    Decode rows (pos >= 0) are kept, prompt rows skipped. A new sequence starts where
    pos restarts at 0: after a row with pos > 0, after prompt rows, or when a pos-0
    cell repeats. Rows of one token may come in any layer order. Tokens lacking a layer
    are dropped with a TraceWarning.
    """
    where = str(path)
    top_k = shape.top_k
    text = read_text_bounded(where, k=top_k)
    if not text.strip():
        raise CopeInputError("empty file: no decode rows (pos >= 0)", path=where)
    text, header = _without_header(text)
    if not text.strip():
        raise CopeInputError("only a header line: no decode rows (pos >= 0)", path=where)
    table, line_of = _parse_int_table(where, text, top_k + 2, f"pos,layer and {top_k} expert ids")
    decode = table[:, 0] >= 0
    rows = np.flatnonzero(decode)
    if rows.size == 0:
        raise CopeInputError("no decode rows (pos >= 0); only prompt rows", path=where)
    d = table[rows]

    def dline(r: int) -> int:
        return line_of(int(rows[r]))

    layer = check_cells(where, d[:, 1], d[:, 2:], dline, moe_blocks=shape.moe_blocks, n_experts=shape.n_experts)
    seq = _sequence_codes(d[:, 0], layer, np.cumsum(~decode)[rows])
    ids, _, seq_starts, notes = assemble(
        where, seq=seq, pos=d[:, 0], layer=layer, ids=d[:, 2:], weights=None, line_of=dline,
        moe_blocks=shape.moe_blocks,
    )
    meta = TraceMeta.imported(
        shape.model_name, where, shape.n_experts, shape.moe_blocks,
        "llama-moe-trace CSV (llama.cpp fork): decode rows, ids in descending router score",
        ("no router weights in this format",) + (("its header line was skipped",) if header else ()) + tuple(notes))
    return build_trace(where, expert_ids=ids, meta=meta, seq_starts=seq_starts)


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


def _sniff(path: Path, head: bytes) -> bool:
    text = text_head(head)
    return text[:1].isdigit() or text.startswith(b"-")


def _read(path: str, *, model=None) -> RoutingTrace:
    return read_llama_moe_trace_csv(path, model_shape(path, model, "llama-moe-trace CSV"))


FORMAT = TraceFormat(
    name="llama-moe-trace-csv",
    label="llama-moe-trace .csv",
    suffixes=(".csv",),
    sniff=_sniff,
    read=_read,
    write=write_llama_moe_trace_csv,
)
