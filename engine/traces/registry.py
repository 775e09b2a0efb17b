"""The trace formats COPE reads, and picking one for a path.

A path's format is, in this order: the one named explicitly; else, for a file, the
formats whose suffixes the name ends with (the first of them whose sniffer accepts
the file's first bytes, else the first of them); else the first format whose sniffer
accepts it. A folder goes to the formats that read folders, the same way.

To add a format: write a module with a `FORMAT = TraceFormat(...)` and list it in
FORMATS. Order matters only where two formats claim one suffix (.csv) and neither
sniffs the file: the earlier one reads it.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.core.errors import CopeInputError
from engine.core.files import open_regular
from engine.core.user_paths import input_kind
from engine.traces import commitmoe_safetensors, cope_npz, flame_parquet, jsonl, llama_csv, moe_beyond
from engine.traces.format import HEAD_BYTES, TraceFormat
from engine.traces.trace import RoutingTrace
from engine.traces.validate import check_trace_fits_model

FORMATS: tuple[TraceFormat, ...] = (
    cope_npz.FORMAT,
    llama_csv.FORMAT,  # before moe-beyond: a .csv that neither sniffs as is llama-moe-trace
    jsonl.FORMAT,
    moe_beyond.FORMAT,  # before flame-parquet: a folder that neither sniffs as is moe-beyond's
    flame_parquet.FORMAT,
    commitmoe_safetensors.FORMAT,
)


def format_named(name: str, *, path: str | None = None) -> TraceFormat:
    for fmt in FORMATS:
        if fmt.name == name:
            return fmt
    known = ", ".join(f.name for f in FORMATS)
    raise CopeInputError(f"unknown trace format {name!r}: one of {known}", path=path)


def format_for_suffix(filename: str) -> TraceFormat | None:
    """The format a file name's ending selects, without looking inside; None if none does."""
    claimed = [f for f in FORMATS if f.claims(filename)]
    return claimed[0] if claimed else None


def _unknown(where: str) -> CopeInputError:
    labels = [f.label for f in FORMATS]
    expected = ", ".join(labels[:-1]) + " or " + labels[-1] if len(labels) > 1 else labels[0]
    return CopeInputError(f"unknown trace format (expected {expected})", path=where)


def _read_head(where: str) -> bytes:
    try:
        with open_regular(where) as handle:  # a FIFO or a device is refused here
            return handle.read(HEAD_BYTES)
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=where) from None


def _pick(candidates: list[TraceFormat], path: Path, head: bytes) -> TraceFormat | None:
    for fmt in candidates:
        if fmt.sniff(path, head):
            return fmt
    return None


def detect_format(path: str | os.PathLike, *, format: str | None = None) -> TraceFormat:
    """The format to read `path` with (see the module's docstring); CopeInputError naming the file if none."""
    where, p = str(path), Path(path)
    if format is not None:
        return format_named(format, path=where)
    kind = input_kind(p, what="trace file or folder")  # a FIFO or a device: refused, never opened
    if kind == "folder":
        folders = [f for f in FORMATS if f.folders]
        if not folders:
            raise _unknown(where)
        return _pick(folders, p, b"") or folders[0]
    if kind is None:
        raise CopeInputError("no such file or folder", path=where)
    head = _read_head(where)
    claimed = [f for f in FORMATS if f.claims(p.name)]
    if claimed:
        return _pick(claimed, p, head) or claimed[0]
    found = _pick(list(FORMATS), p, head)
    if found is None:
        raise _unknown(where)
    return found


def load_any_trace(path: str | os.PathLike, *, model, format: str | None = None) -> RoutingTrace:
    """Read a trace in any registered format and check it fits `model` (a ModelSpec).

    `format` names the format (see FORMATS) instead of detecting it. With model None
    nothing is checked, and formats that need the model's shape (CSV, JSONL) refuse.
    """
    where = str(path)
    trace = detect_format(path, format=format).read(where, model=model)
    if model is not None:
        check_trace_fits_model(trace, model, path=where)
    return trace


def save_any_trace(trace: RoutingTrace, path: str | os.PathLike, *, format: str | None = None) -> None:
    """Write `trace` in the format named, else the one the file name's ending selects, atomically."""
    where = str(path)
    fmt = format_named(format, path=where) if format is not None else format_for_suffix(Path(where).name)
    if fmt is None:
        suffixes = ", ".join(s for f in FORMATS if f.write is not None for s in f.suffixes)
        raise CopeInputError(f"cannot tell the trace format from the name: end it with one of {suffixes}", path=where)
    if fmt.write is None:
        raise CopeInputError(f"COPE reads {fmt.name} traces but does not write them", path=where)
    fmt.write(trace, where)
