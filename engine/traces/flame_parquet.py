"""FLAME-MoE's routing traces: Parquet, one file per MoE layer (`layer_NN.parquet`).

The dataset card (CMU-FLAME/FLAME-MoE-Traces) gives each `actives/iter_NNNN/layer_NN.parquet`
one row per token with two columns: `indices` (list<int16>[k], the routed expert ids)
and `scores` (list<float16>[k], their router softmax probabilities, sorted descending).
Row i of every layer file is the same token. NN is the 1-based transformer layer
(the card's 9-layer model has MoE layers 2-9), so layer_NN is model block NN-1.

A single file reads as a one-layer trace; a folder of layer files reads as the whole
model. The tokens are one pretraining stream, so the trace is one sequence; only the
first MAX_IMPORT_TOKENS tokens are kept (a capture holds 52,428,800), fewer where
the replay budget takes fewer (engine/core/input_limits.py). `scores` become
the trace's router weights. pyarrow is imported only when such a file is read (the
optional extra cope[parquet]).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from engine.core.errors import CopeInputError
from engine.core.input_limits import max_replay_slots
from engine.traces.format import MAX_IMPORT_TOKENS, TraceFormat, check_file_size, missing_reader
from engine.traces.trace import RoutingTrace, TraceMeta
from engine.traces.validate import build_trace

PARQUET_MAGIC = b"PAR1"
_LAYER_RE = re.compile(r"^layer_(\d+)\.parquet$", re.IGNORECASE)
_BATCH_ROWS = 65536
# Experts a token routes to: FLAME-MoE's top-8; real MoE models route to at most 10
# (Qwen3-Next). A row of more values is refused from the file's metadata, before a page is
# decoded: a 4 KB file of zstd'd zeros declares 800,000,000 values in 40 rows, 1.6 GB decoded.
MAX_VALUES_PER_ROW = 64


def _pyarrow(where: str):
    try:
        import pyarrow.parquet as pq  # noqa: PLC0415 - optional, heavy: only when a parquet file is read
    except ImportError:
        raise missing_reader(where, "pyarrow", "parquet") from None
    return pq


def _block_of(path: Path) -> int | None:
    m = _LAYER_RE.match(path.name)
    return int(m[1]) - 1 if m and int(m[1]) >= 1 else None


def _list_column(where: str, batch, name: str, k: int | None) -> np.ndarray:
    col = batch.column(name)
    if col.null_count:
        raise CopeInputError(f"column {name!r} has empty (null) rows", path=where)
    lengths = col.value_lengths().to_numpy(zero_copy_only=False)
    width = int(lengths[0]) if k is None else k
    if width < 1 or np.any(lengths != width):
        raise CopeInputError(f"column {name!r}: every row must list the same number of values "
                             f"(found {sorted(set(lengths.tolist()))[:4]})", path=where)
    values = col.flatten().to_numpy(zero_copy_only=False)
    return values.reshape(-1, width)


def _read_layer(where: str, limit: int, n_experts: int) -> tuple[np.ndarray, np.ndarray | None, int]:
    """(expert ids [n, k] int16, scores [n, k] or None, rows in the file) of the first `limit`
    rows; each batch checked as it comes (ids in 0..n_experts-1, distinct in a row), so a
    file of zeros is refused at its first batch, not after a million rows."""
    check_file_size(where)  # first: a FIFO member is refused whether or not pyarrow is installed
    pq = _pyarrow(where)
    try:
        handle = pq.ParquetFile(where)
        names = set(handle.schema_arrow.names)
        if "indices" not in names:
            raise CopeInputError(f"no 'indices' column (columns: {', '.join(sorted(names))}): not a FLAME-MoE "
                                 "actives file", path=where)
        columns = ["indices"] + (["scores"] if "scores" in names else [])
        total = int(handle.metadata.num_rows)
        _check_declared_values(handle.metadata, columns, limit, where)
        ids_parts, score_parts, kept, k = [], [], 0, None
        for batch in handle.iter_batches(batch_size=_BATCH_ROWS, columns=columns):
            batch = batch.slice(0, limit - kept)
            ids = _list_column(where, batch, "indices", k)
            k = ids.shape[1]
            _check_batch(ids, n_experts, kept, where)
            ids_parts.append(ids.astype(np.int16))
            if "scores" in columns:
                score_parts.append(_list_column(where, batch, "scores", k).astype(np.float32))
            kept += ids.shape[0]
            if kept >= limit:
                break
    except CopeInputError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors (ArrowInvalid, OSError...): one line
        raise CopeInputError(f"not a readable Parquet file: {exc}", path=where) from None
    if not ids_parts:
        raise CopeInputError("the file holds no rows", path=where)
    scores = np.concatenate(score_parts) if score_parts else None
    if scores is not None and not np.all(np.isfinite(scores)):
        raise CopeInputError("column 'scores' holds a value that is not a finite number", path=where)
    return np.concatenate(ids_parts), scores, total


def _check_batch(ids: np.ndarray, n_experts: int, first_row: int, where: str) -> None:
    if ids.size and (ids.min() < 0 or ids.max() >= n_experts):
        raise CopeInputError(f"expert id out of range 0..{n_experts - 1}", path=where)
    if ids.shape[1] > 1:
        ordered = np.sort(ids, axis=1)
        twice = np.flatnonzero((ordered[:, 1:] == ordered[:, :-1]).any(axis=1))
        if twice.size:
            raise CopeInputError(f"row {first_row + int(twice[0]):,}: a token routes to the same expert twice",
                                 path=where)


def _declared_width(where: str) -> int:
    """Values a row of 'indices' holds, from the first row group's metadata (1 when unknown)."""
    check_file_size(where)
    pq = _pyarrow(where)
    try:
        metadata = pq.ParquetFile(where).metadata
        group = metadata.row_group(0) if metadata.num_row_groups else None
        leaves = [j for j in range(metadata.num_columns) if metadata.schema.column(j).path.split(".")[0] == "indices"]
        if group is None or not leaves or group.num_rows < 1:
            return 1
        return max(1, min(int(group.column(leaves[0]).num_values) // int(group.num_rows), MAX_VALUES_PER_ROW))
    except Exception:  # noqa: BLE001 - unreadable: _read_layer says why in one line
        return 1


def _check_declared_values(metadata, columns: list[str], limit: int, where: str) -> None:
    """Refuse, from the metadata alone, row groups (of those the first `limit` rows span)
    whose list columns hold more than MAX_VALUES_PER_ROW values a row."""
    leaves = [j for j in range(metadata.num_columns)
              if metadata.schema.column(j).path.split(".")[0] in columns]
    rows = 0
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for j in leaves:
            values = int(group.column(j).num_values)
            if values > MAX_VALUES_PER_ROW * max(int(group.num_rows), 1):
                raise CopeInputError(f"row group {g} declares {values:,} values in {group.num_rows:,} rows, more than "
                                     f"{MAX_VALUES_PER_ROW} experts a token: not a routing trace (or a compression "
                                     "bomb)", path=where)
        rows += int(group.num_rows)
        if rows >= limit:
            return


def _layer_files(where: Path) -> list[tuple[int, Path]]:
    if where.is_dir():
        found = sorted((b, p) for p in where.iterdir() if (b := _block_of(p)) is not None)
        if not found:
            raise CopeInputError("no layer_NN.parquet files in the folder", path=str(where))
        return found
    block = _block_of(where)
    if block is None:
        raise CopeInputError("a FLAME-MoE actives file is named layer_NN.parquet (NN: its transformer layer)",
                             path=str(where))
    return [(block, where)]


def read_flame_parquet(path, *, n_experts: int, model_name: str = "", limit: int = MAX_IMPORT_TOKENS) -> RoutingTrace:
    """Read one layer file or a folder of them as a RoutingTrace (see the module doc)."""
    where = str(path)
    layers = _layer_files(Path(path))
    # No more tokens than a replay of them could take, two halves of the replay budget
    # (engine/core/input_limits.py): a million tokens of 48 layers would be 3 GB read for a
    # refusal. FLAME-MoE's 8 MoE layers x top-8 keep 500,000 tokens.
    budget = 2 * max_replay_slots() // (len(layers) * _declared_width(str(layers[0][1])))
    limit = max(min(limit, budget), 1)
    ids, scores, totals = [], [], []
    for _, file in layers:
        i, s, total = _read_layer(str(file), limit, int(n_experts))
        ids.append(i)
        scores.append(s)
        totals.append(total)
    if len(set(totals)) > 1 or len({a.shape for a in ids}) > 1:
        raise CopeInputError("the layer files hold different numbers of tokens or experts per token "
                             f"({', '.join(f'{f.name}: {t}' for (_, f), t in zip(layers, totals))})", path=where)
    expert_ids = np.stack(ids, axis=1)
    weights = None if any(s is None for s in scores) else np.stack(scores, axis=1)
    notes = []
    if totals[0] > expert_ids.shape[0]:
        why = " (what the replay budget, COPE_MAX_REPLAY_SLOTS, takes)" if limit == budget else ""
        notes.append(f"kept the first {expert_ids.shape[0]:,} of {totals[0]:,} tokens of {Path(where).name}{why}")
    if expert_ids.size and (expert_ids.min() < 0 or expert_ids.max() >= n_experts):
        raise CopeInputError(f"expert id out of range 0..{n_experts - 1}", path=where)
    meta = TraceMeta.imported(
        model_name, where, n_experts, [b for b, _ in layers],
        "FLAME-MoE routing capture (pretraining tokens, one stream); weights: router softmax scores", notes)
    return build_trace(where, expert_ids=expert_ids.astype(np.int16), meta=meta, weights=weights,
                       seq_starts=np.zeros(1, dtype=np.int64))


def _sniff(path: Path, head: bytes) -> bool:
    if path.is_dir():
        return any(_block_of(p) is not None for p in path.iterdir())
    return head.startswith(PARQUET_MAGIC)


def _read(path: str, *, model=None) -> RoutingTrace:
    if model is None:
        raise CopeInputError("a FLAME-MoE Parquet trace does not name its model: say which model it is from",
                             path=path)
    return read_flame_parquet(path, n_experts=model.n_routed_experts, model_name=model.id)


FORMAT = TraceFormat(
    name="flame-parquet",
    label="FLAME-MoE layer_NN.parquet",
    suffixes=(".parquet",),
    sniff=_sniff,
    read=_read,
    folders=True,
)
