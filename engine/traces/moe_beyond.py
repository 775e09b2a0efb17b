"""The moe-beyond DeepSeek-V2-Lite-Chat routing CSVs: a folder with one CSV per prompt.

Each file has the header `Layer ID,Batch Number,Token,Activated Expert IDs` and its
rows grouped layer by layer; a token's position is its index within its layer's
group. The routing is teacher forcing over the prompts, replayed as a stand-in for
decode. A single such file reads as one sequence.
"""

from __future__ import annotations

import csv
import io
import os
import re
import warnings
from pathlib import Path

import numpy as np

from engine.core.errors import CopeInputError, shown
from engine.traces.format import TraceFormat, text_head
from engine.traces.limits import check_entries, read_text_bounded
from engine.traces.trace import RoutingTrace, TraceMeta
from engine.traces.validate import LineOf, build_trace, check_cells, first_bad_row, warn_dropped

MOE_BEYOND_MODEL = "deepseek-v2-lite-chat"
MOE_BEYOND_BLOCKS = tuple(range(1, 27))
MOE_BEYOND_EXPERTS = 64
MOE_BEYOND_TOP_K = 6
MOE_BEYOND_HEADER = ["Layer ID", "Batch Number", "Token", "Activated Expert IDs"]
_UNORDERED = "expert order within a token is arbitrary; no router scores recorded"
_ID_STRIP = str.maketrans("", "", "[] \t\"")


# --- one file ---------------------------------------------------------------------------


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


def _read_rows(path: str, line_of: LineOf) -> list[list[str]]:
    """The data rows (after a checked header), each with 4 fields."""
    text = read_text_bounded(path, k=MOE_BEYOND_TOP_K)
    try:
        rows = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        raise CopeInputError(f"not a readable CSV: {exc}", path=path) from None
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if not rows:
        raise CopeInputError("empty file", path=path)
    if [h.strip() for h in rows[0]] != MOE_BEYOND_HEADER:
        raise CopeInputError(f"header is {shown(rows[0])}, expected {','.join(MOE_BEYOND_HEADER)!r}", path=path, line=1)
    rows = rows[1:]
    if not rows:
        raise CopeInputError("no data rows after the header", path=path)
    for r, row in enumerate(rows):
        if len(row) != 4:
            raise CopeInputError(f"expected 4 fields, found {len(row)}", path=path, line=line_of(r))
    return rows


def _parse_blocks(path: str, rows: list[list[str]], line_of: LineOf) -> np.ndarray:
    blocks = _parse_ints_fast(",".join([row[0] for row in rows]), len(rows))
    if blocks is not None:
        return blocks
    for r, row in enumerate(rows):
        try:
            int(row[0])
        except ValueError:
            raise CopeInputError(f"Layer ID {shown(row[0])} is not an integer", path=path, line=line_of(r)) from None
    raise CopeInputError("Layer ID column is not readable", path=path)  # pragma: no cover


def _locate_bad_ids(path: str, row: list[str], line: int, k: int) -> None:
    cell = row[3].strip()
    if not (cell.startswith("[") and cell.endswith("]")):
        raise CopeInputError(f"Activated Expert IDs {shown(row[3])} is not a [..] list", path=path, line=line)
    parts = [p.strip() for p in cell[1:-1].split(",") if p.strip()]
    for p in parts:
        try:
            int(p)
        except ValueError:
            raise CopeInputError(f"expert id {shown(p)} is not an integer", path=path, line=line) from None
    if len(parts) != k:
        raise CopeInputError(f"expected {k} expert ids, found {len(parts)}", path=path, line=line)


def _parse_ids(path: str, rows: list[list[str]], line_of: LineOf) -> np.ndarray:
    k = MOE_BEYOND_TOP_K
    ids = _parse_ints_fast(",".join([row[3] for row in rows]).translate(_ID_STRIP), len(rows) * k)
    if ids is not None:
        return ids.reshape(len(rows), k)
    for r, row in enumerate(rows):
        _locate_bad_ids(path, row, line_of(r), k)
    raise CopeInputError("Activated Expert IDs column is not readable", path=path)  # pragma: no cover


def _layer_groups(path: str, blocks: np.ndarray, layer: np.ndarray, line_of: LineOf):
    """(first row, row count) of each trace layer's group, and the layers present."""
    r = first_bad_row(layer[1:] < layer[:-1])
    if r is not None:
        raise CopeInputError(
            f"rows are not grouped layer by layer (block {int(blocks[r + 1])} after block {int(blocks[r])})",
            path=path,
            line=line_of(r + 1),
        )
    group_starts = np.flatnonzero(np.concatenate([[True], layer[1:] != layer[:-1]]))
    group_sizes = np.diff(np.append(group_starts, layer.size))
    present = layer[group_starts]
    n_layers = len(MOE_BEYOND_BLOCKS)
    starts, sizes = np.zeros(n_layers, dtype=np.int64), np.zeros(n_layers, dtype=np.int64)
    starts[present], sizes[present] = group_starts, group_sizes
    return starts, sizes, present


def _check_aligned(path, rows, starts, present, n_tokens: int, line_of: LineOf) -> None:
    """The token text at one position must agree across layers, or rows are misaligned."""
    first = int(present[0])
    ref = [row[2] for row in rows[starts[first] : starts[first] + n_tokens]]
    for li in present[1:].tolist():
        s0 = int(starts[li])
        if [row[2] for row in rows[s0 : s0 + n_tokens]] != ref:
            i = next(i for i in range(n_tokens) if rows[s0 + i][2] != ref[i])
            raise CopeInputError(
                f"block {MOE_BEYOND_BLOCKS[li]} row {i} is token {shown(rows[s0 + i][2])} but block "
                f"{MOE_BEYOND_BLOCKS[first]} has {shown(ref[i])} there: rows are misaligned",
                path=path,
                line=line_of(s0 + i),
            )


def _read_file_ids(path: str) -> tuple[np.ndarray, list[str]]:
    """One prompt file -> (ids int16 [tokens, 26, 6], notes). Raises CopeInputError."""

    def line_of(r: int) -> int:
        return _csv_line_of(path, r)

    rows = _read_rows(path, line_of)
    blocks, ids = _parse_blocks(path, rows, line_of), _parse_ids(path, rows, line_of)
    layer = check_cells(path, blocks, ids, line_of, moe_blocks=MOE_BEYOND_BLOCKS, n_experts=MOE_BEYOND_EXPERTS)
    starts, sizes, present = _layer_groups(path, blocks, layer, line_of)
    n_tokens, most = int(sizes.min()), int(sizes.max())
    notes: list[str] = []
    if n_tokens != most:
        short = MOE_BEYOND_BLOCKS[int(np.argmin(sizes))]
        note = f"dropped {most - n_tokens} of {most} tokens that lack a layer (block {short} has {n_tokens} rows)"
        notes.append(warn_dropped(path, note))
    if n_tokens == 0:
        return np.zeros((0, len(MOE_BEYOND_BLOCKS), MOE_BEYOND_TOP_K), dtype=np.int16), notes
    _check_aligned(path, rows, starts, present, n_tokens, line_of)
    take = starts[:, None] + np.arange(n_tokens)[None, :]  # [L, T]
    return np.ascontiguousarray(ids[take].transpose(1, 0, 2).astype(np.int16)), notes


def _meta(where: str, recorded_with: str, notes: tuple[str, ...]) -> TraceMeta:
    return TraceMeta.imported(MOE_BEYOND_MODEL, where, MOE_BEYOND_EXPERTS, MOE_BEYOND_BLOCKS, recorded_with, notes)


def read_moe_beyond_file(path: str | os.PathLike) -> RoutingTrace:
    """One moe-beyond prompt file as a one-sequence trace."""
    where = str(path)
    ids, notes = _read_file_ids(where)
    if ids.shape[0] == 0:
        raise CopeInputError("no complete token", path=where)
    recorded_with = ("teacher forcing: one forward pass over one prompt; prompt tokens replayed "
                     "as decode steps (a stand-in for decode routing)")
    return build_trace(where, expert_ids=ids, meta=_meta(where, recorded_with, (_UNORDERED, *notes)))


# --- the folder ---------------------------------------------------------------------------


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


def _folder_files(where: str, base: Path, max_files: int | None) -> list[Path]:
    if not base.is_dir():
        raise CopeInputError("not a folder of moe-beyond CSV files", path=where)
    files = _moe_beyond_files(base)
    if not files:
        raise CopeInputError("no .csv files in the folder", path=where)
    if max_files is not None:
        if max_files < 1:
            raise CopeInputError(f"max_files must be at least 1, got {max_files}", path=where)
        files = files[:max_files]
    return files


def read_moe_beyond_csv_dir(folder: str | os.PathLike, *, max_files: int | None = None) -> RoutingTrace:
    """Read the moe-beyond DeepSeek-V2-Lite-Chat routing folder: one CSV per prompt.

    Each prompt is one sequence; files are ordered by the number in their name. The
    routing is teacher forcing over the prompts, replayed as a stand-in for decode.
    Expert order within a token is the file's (arbitrary: treat it as a set).
    """
    where = str(folder)
    parts: list[np.ndarray] = []
    notes: list[str] = []
    for f in _folder_files(where, Path(folder), max_files):
        ids, file_notes = _read_file_ids(str(f))
        notes.extend(f"{f.name}: {n}" for n in file_notes)
        if ids.shape[0]:
            parts.append(ids)
            check_entries(sum(p.size for p in parts), where, what="the folder")
    if not parts:
        raise CopeInputError("no complete token in any file", path=where)
    lengths = np.array([p.shape[0] for p in parts], dtype=np.int64)
    seq_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    recorded_with = (f"teacher forcing: one forward pass over each of {len(parts)} prompts; prompt tokens "
                     "replayed as decode steps (a stand-in for decode routing)")
    fixed = ("origin: github.com/ngavhane/moe-beyond (training_data_eamc), no licence declared", _UNORDERED,
             "each prompt file is one sequence")
    meta = _meta(where, recorded_with, fixed + tuple(notes))
    return build_trace(where, expert_ids=np.concatenate(parts), meta=meta, seq_starts=seq_starts)


# --- registry entry ------------------------------------------------------------------------


def _sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        try:
            return bool(_moe_beyond_files(path))
        except OSError:
            return False
    return text_head(head).startswith(b"Layer ID,")


def _read(path: str, *, model=None) -> RoutingTrace:
    # The files record DeepSeek-V2-Lite-Chat's shape; the registry checks the fit.
    return read_moe_beyond_csv_dir(path) if os.path.isdir(path) else read_moe_beyond_file(path)


FORMAT = TraceFormat(
    name="moe-beyond-csv",
    label="a folder of moe-beyond CSV files",
    suffixes=(".csv",),
    sniff=_sniff,
    read=_read,
    folders=True,
)
