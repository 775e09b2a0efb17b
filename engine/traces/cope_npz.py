"""COPE's own trace format (suggested suffix `.cope.npz`).

An uncompressed .npz with `expert_ids` (int16 [T, L, k]), optional `weights` (float32
[T, L, k]), optional `predicted_ids` (int16 [T, L, k_pred]), `seq_starts` (int64 [S])
and `header`, a uint8 array holding UTF-8 JSON
`{"format": "cope-trace", "version": 1, "meta": TraceMeta.to_dict()}`. No pickle.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np

from engine.core.errors import CopeInputError, shown
from engine.core.files import atomic_write, check_regular
from engine.traces.format import TraceFormat, json_problem
from engine.traces.limits import check_entries
from engine.traces.trace import RoutingTrace, TraceMeta
from engine.traces.validate import build_trace

TRACE_FORMAT = "cope-trace"
TRACE_VERSION = 1
TRACE_SUFFIX = ".cope.npz"
_ARRAYS = ("header", "expert_ids", "seq_starts", "weights", "predicted_ids")
MAX_HEADER_BYTES = 2**20  # a header is metadata: a few kB


def save_trace(trace: RoutingTrace, path: str | os.PathLike) -> None:
    """Write `trace` to `path` (an .npz; suggested suffix .cope.npz), atomically."""
    doc = {"format": TRACE_FORMAT, "version": TRACE_VERSION, "meta": trace.meta.to_dict()}
    try:
        header = json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a file name that is not UTF-8 (its bytes as the OS gave them, surrogate-escaped):
        header = json.dumps(doc, ensure_ascii=True).encode("ascii")  # kept as \udcXX escapes, read back exactly
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


def load_trace(path: str | os.PathLike) -> RoutingTrace:
    """Read a trace written by `save_trace`; every problem is a CopeInputError naming the file."""
    where = str(path)
    raw = _read_arrays(where)
    meta = _parse_header(where, raw["header"])
    expert_ids = _as_int16(where, "expert_ids", raw["expert_ids"], 3, 0)
    seq_starts = raw["seq_starts"]
    if seq_starts.dtype.kind not in "iu" or seq_starts.ndim != 1:
        raise CopeInputError(
            f"array 'seq_starts' must be a 1-D integer array, found {seq_starts.ndim}-D {seq_starts.dtype}",
            path=where,
        )
    weights = raw.get("weights")
    if weights is not None:
        weights = _checked_weights(where, weights, expert_ids.shape)
    predicted = raw.get("predicted_ids")
    if predicted is not None:
        predicted = _as_int16(where, "predicted_ids", predicted, 3, -1)
    return build_trace(
        where,
        expert_ids=expert_ids,
        meta=meta,
        weights=weights,
        predicted_ids=predicted,
        seq_starts=seq_starts.astype(np.int64, copy=False),
    )


def _check_is_zip(where: str) -> None:
    check_regular(where)  # a FIFO or a device never ends
    try:
        is_zip = zipfile.is_zipfile(where)
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=where) from None
    if not is_zip:
        raise CopeInputError("not a COPE trace: not an .npz (zip) file, or it is truncated", path=where)


def _read_arrays(where: str) -> dict[str, np.ndarray]:
    """The trace's arrays, each read only after its declared shape is checked against
    the entry limit and the bytes its member holds (so no forged shape or inflating
    member allocates more than that)."""
    _check_is_zip(where)
    try:
        with zipfile.ZipFile(where) as zf:
            names = {n.removesuffix(".npy"): n for n in zf.namelist() if n.endswith(".npy")}
            missing = [n for n in _ARRAYS[:3] if n not in names]
            if missing:
                raise CopeInputError(f"not a COPE trace: missing array(s) {', '.join(missing)}", path=where)
            return {n: _read_member(zf, names[n], n, where) for n in _ARRAYS if n in names}
    except CopeInputError:
        raise
    except (OSError, EOFError, zipfile.BadZipFile, RuntimeError, ValueError, NotImplementedError) as exc:
        raise CopeInputError(f"damaged .npz: {_short(exc)}", path=where) from None


def _read_member(zf: zipfile.ZipFile, member: str, name: str, where: str) -> np.ndarray:
    info = zf.getinfo(member)
    with zf.open(info) as handle:
        try:
            version = np.lib.format.read_magic(handle)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read_header(handle)
        except (ValueError, SyntaxError, TypeError, EOFError, MemoryError, RecursionError) as exc:
            raise CopeInputError(f"array {name!r} is damaged: {_short(exc)}", path=where) from None
        if dtype.hasobject:
            raise CopeInputError("holds a pickled (object) array, which COPE never loads", path=where)
        count = 1
        for d in shape:
            count *= int(d)
        if name == "header":
            if count > MAX_HEADER_BYTES:
                raise CopeInputError(f"header of {count:,} bytes: more than a COPE header's "
                                     f"{MAX_HEADER_BYTES:,}", path=where)
        else:
            # max(shape) too: an empty array may still claim a dimension of 2**62
            check_entries(max(count, *shape, 0), where, what=f"array {name!r} (shape {tuple(shape)})")
        wanted = count * dtype.itemsize
        held = info.file_size - handle.tell()
        if wanted > held:
            raise CopeInputError(f"array {name!r} claims {wanted:,} bytes of data but holds {max(held, 0):,}",
                                 path=where)
        data = handle.read(wanted)
    if len(data) != wanted:
        raise CopeInputError(f"array {name!r} is damaged: {len(data):,} of {wanted:,} bytes", path=where)
    array = np.frombuffer(data, dtype=dtype)
    return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


def _parse_header(where: str, header: np.ndarray) -> TraceMeta:
    if header.dtype != np.uint8 or header.ndim != 1:
        raise CopeInputError("header must be a 1-D uint8 array of UTF-8 JSON", path=where)
    try:
        head = json.loads(header.tobytes().decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CopeInputError(f"header is not UTF-8 JSON: {json_problem(exc)}", path=where) from None
    if not isinstance(head, dict) or head.get("format") != TRACE_FORMAT:
        found = head.get("format") if isinstance(head, dict) else type(head).__name__
        raise CopeInputError(f"not a COPE trace: header format is {shown(found)}, expected {TRACE_FORMAT!r}",
                             path=where)
    version = head.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise CopeInputError(f"bad trace format version {shown(version)}", path=where)
    if version > TRACE_VERSION:
        raise CopeInputError(
            f"trace format version {version} is newer than this COPE reads ({TRACE_VERSION}); upgrade COPE",
            path=where,
        )
    try:
        meta_dict = head["meta"]
        if not isinstance(meta_dict, dict):
            raise TypeError("meta is not an object")
        return TraceMeta.from_dict(meta_dict)
    except KeyError as exc:
        raise CopeInputError(f"bad trace metadata in header: field {exc} is missing", path=where) from None
    except (TypeError, ValueError) as exc:
        raise CopeInputError(f"bad trace metadata in header: {exc}", path=where) from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _as_int16(path: str, name: str, arr: np.ndarray, ndim: int, low: int) -> np.ndarray:
    if arr.dtype.kind not in "iu" or arr.ndim != ndim:
        raise CopeInputError(
            f"array {name!r} must be a {ndim}-D integer array, found {arr.ndim}-D {arr.dtype}", path=path
        )
    if arr.size and (arr.min() < low or arr.max() > np.iinfo(np.int16).max):
        raise CopeInputError(f"array {name!r} holds values outside {low}..32767", path=path)
    return arr.astype(np.int16, copy=False)


def _checked_weights(where: str, weights: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if weights.dtype.kind != "f" or weights.shape != shape:
        raise CopeInputError(
            f"array 'weights' must be floating point shaped like expert_ids {shape}, "
            f"found {weights.dtype} {weights.shape}",
            path=where,
        )
    if not np.all(np.isfinite(weights)):
        raise CopeInputError("array 'weights' holds non-finite values", path=where)
    return weights.astype(np.float32, copy=False)


def _sniff(path: Path, head: bytes) -> bool:
    return head.startswith(b"PK")


def _read(path: str, *, model=None) -> RoutingTrace:
    return load_trace(path)  # the file records its model's shape; the registry checks the fit


FORMAT = TraceFormat(
    name="cope-npz",
    label=TRACE_SUFFIX,
    suffixes=(".npz",),
    sniff=_sniff,
    read=_read,
    write=save_trace,
)
