"""Reading llama.cpp imatrix files: the GGUF format's per-expert counts, and the legacy
`.dat` format refused with the reason (it keeps none). What the fields mean, and the
llama.cpp source they follow (tools/imatrix/imatrix.cpp at 0c1e570), is engine/traces/imatrix.py.

Only the header and the `<tensor>.counts` tensors are read (a few KB): the `in_sum2`
sums, which are most of the file (about 120 MB for Qwen3-30B-A3B, over 1 GB for
DeepSeek-V3), are never touched. The header goes through the hardened GGUF header reader
(cope_tui/sources/gguf_header.py: every count and length checked before use, at most
512 MiB of header); each counts tensor must be F32 with at most MAX_MODEL_EXPERTS values
(engine/core/input_limits.py), checked before its bytes are read.

`load_imatrix` is `read_imatrix` through the cache of readings (engine/traces/imatrix_cache.py):
a second run with the same, unchanged file takes its counts from there.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from cope_tui.sources.gguf_header import read_local_header
from engine.core.errors import CopeInputError, shown
from engine.core.files import open_regular
from engine.core.input_limits import MAX_MODEL_BLOCKS, MAX_MODEL_EXPERTS
from engine.traces.imatrix import COUNTS_SUFFIX, EXPS_NAME, ImatrixCounts, NoExpertCounts, counts_from_tensors
from engine.traces.imatrix_cache import load_cached, save_cached

GGML_TYPE_F32 = 0
LEGACY_SUFFIXES = (".dat", ".imatrix")
LEGACY_MAX_NAME = 1024  # a tensor name in a legacy file; real ones are under 64 bytes
MAKE_ONE = "llama-imatrix -m MODEL.gguf -f TEXT -o imatrix.gguf writes one with them"


def looks_like_imatrix(path: str | os.PathLike) -> bool:
    """Whether `path` should be read as an imatrix rather than as a trace: a GGUF file (no
    trace format is one), or a name ending in .dat or .imatrix (llama-imatrix's legacy output)."""
    name = Path(path).name.lower()
    if name.endswith(LEGACY_SUFFIXES) or name.endswith(".gguf"):
        return True
    try:
        with open_regular(path) as handle:
            return handle.read(4) == b"GGUF"
    except (CopeInputError, OSError):  # /proc/self/mem: a "regular file" that fails to read
        return False  # the trace readers say what is wrong with it


def read_imatrix(path: str | os.PathLike) -> ImatrixCounts:
    """The per-expert routed-token counts of an imatrix file; one CopeInputError line
    naming the file for anything else (a legacy .dat file, a model GGUF, a damaged file)."""
    where = str(path)
    try:
        with open_regular(path, what="imatrix file") as handle:
            head = handle.read(24)
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=where) from None
    if head[:4] != b"GGUF":
        legacy, problem = _legacy_problem(where)
        raise (NoExpertCounts if legacy else CopeInputError)(problem, path=where)
    header = read_local_header(path)
    wanted = [t for t in header.tensors if t.name.endswith(COUNTS_SUFFIX)
              and EXPS_NAME.fullmatch(t.name[: -len(COUNTS_SUFFIX)])]
    if len(wanted) > 8 * MAX_MODEL_BLOCKS:
        raise CopeInputError(f"{len(wanted):,} expert count tensors, more than {MAX_MODEL_BLOCKS:,} blocks could have",
                             path=where)
    arrays: dict[str, np.ndarray] = {}
    try:
        with open_regular(path, what="imatrix file") as handle:
            for t in wanted:
                n = int(np.prod(t.shape, dtype=np.int64)) if t.shape else 1
                if t.ggml_type != GGML_TYPE_F32:
                    raise CopeInputError(f"tensor {shown(t.name)} is {t.type_name}, expected F32 counts", path=where)
                if n > MAX_MODEL_EXPERTS:
                    raise CopeInputError(f"tensor {shown(t.name)} holds {n:,} counts, more than the "
                                         f"{MAX_MODEL_EXPERTS:,} experts COPE sizes", path=where)
                handle.seek(header.data_offset_bytes + t.offset_bytes)
                raw = handle.read(4 * n)
                if len(raw) != 4 * n:
                    raise CopeInputError(f"truncated: tensor {shown(t.name)} ends past the end of the file", path=where)
                arrays[t.name] = np.frombuffer(raw, dtype="<f4")
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=where) from None
    return counts_from_tensors(arrays, header.fields, where)


def load_imatrix(path: str | os.PathLike) -> ImatrixCounts:
    """`read_imatrix`, once per version of the file: the counts come from COPE's cache when
    this file (same path, size, modification time and inode) was read before. Errors are
    never cached, so a refused file is refused with its reason each time."""
    cached = load_cached(path)
    if cached is not None:
        return cached
    counts = read_imatrix(path)
    save_cached(path, counts)
    return counts


def _legacy_problem(where: str) -> tuple[bool, str]:
    """(legacy?, why) a file that is not GGUF gives no popularity: a legacy imatrix (said
    with its first entry) or not an imatrix at all. The legacy layout (save_imatrix_legacy): i32 entries;
    per entry i32 name length, the name, i32 ncall, i32 nval, nval f32; then i32 chunks and the dataset."""
    try:
        with open_regular(where, what="imatrix file") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(8 + LEGACY_MAX_NAME)
    except OSError as exc:
        return False, f"cannot read: {exc.strerror or exc}"
    if len(head) >= 8:
        n_entries, name_len = struct.unpack("<ii", head[:8])
        name = head[8:8 + name_len] if 0 < name_len <= LEGACY_MAX_NAME else b""
        if 0 < n_entries <= 8 * MAX_MODEL_BLOCKS * 16 and len(name) == name_len and name.isascii() and size > 8:
            # save_imatrix_legacy divides each expert's sums by its count: the counts are not written.
            return True, (f"a legacy llama-imatrix file ({n_entries:,} tensors): it keeps no per-expert counts, so no "
                    f"expert popularity; {MAKE_ONE}")
    return False, f"not an imatrix file: neither GGUF (it starts with {head[:4]!r}) nor llama-imatrix's legacy format"


__all__ = ["load_imatrix", "looks_like_imatrix", "read_imatrix"]
