"""The GGUF header and tensor table, without the weights.

Two readers produce the same `GGUFHeader`:
- `read_local_header(path)`: `gguf.GGUFReader` over the memory-mapped file; only the
  key/value fields and the tensor infos are touched, never the tensor data. The counts
  and every length are first checked by our own parser (`_parse_bounded`), since
  GGUFReader iterates a forged array length past the end of the file.
- `parse_header_prefix(data, where)`: a minimal parser of the format over the first bytes
  of a file (for remote files read with HTTP range requests). It raises `NeedMoreBytes`
  with the length it needs when the prefix ends inside the header.

Format (little- or big-endian): magic "GGUF", version u32 (2 or 3), tensor count u64, kv
count u64; kv pairs (key string, value type u32, value); tensor infos (name string,
n_dims u32, dims u64 x n_dims, ggml type u32, offset u64); tensor data from the next
multiple of `general.alignment` (default 32). Strings are a u64 length plus UTF-8 bytes.
"""

from __future__ import annotations

import os
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from engine.core.errors import CopeInputError, shown
from engine.core.files import open_regular
from engine.core.input_limits import check_model_shape

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
# Arrays longer than this (tokenizer vocabularies, merges) are kept as their length only.
MAX_KEPT_ARRAY = 4096
# Bounds on the counts a header declares, checked before anything iterates them. The
# largest real GGUFs: Qwen3-235B-A22B has 94 blocks and 1,131 tensors, DeepSeek-V3 and
# Kimi-K2 1,086 tensors (61 blocks); a file with its tokenizer holds about 50 metadata keys,
# and the longest array, a tokenizer's vocabulary or merges, about 262,144 items (Gemma 3).
# A forged count of millions costs minutes and gigabytes to walk, so past these it is refused.
MAX_TENSORS = 100_000
MAX_KEYS = 10_000
MAX_ARRAY_ITEMS = 16_777_216
MAX_LOCAL_HEADER_BYTES = 512 * 2**20  # as for remote files (hub_model.py)

# GGUF value types -> struct codes (8: string, 9: array are handled apart).
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True)
class ArrayLength:
    """A long metadata array, kept as its length (its items are never needed)."""

    length: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]  # GGUF order: ne0 (the contiguous dimension) first
    ggml_type: int
    offset_bytes: int  # from the start of the tensor data
    n_bytes: int

    @property
    def type_name(self) -> str:
        return ggml_type_name(self.ggml_type)


@dataclass(frozen=True)
class GGUFHeader:
    source: str  # the file, or URL, it was read from
    version: int
    fields: Mapping[str, Any]  # scalars, strings, short arrays as tuples, long ones as ArrayLength
    tensors: tuple[TensorInfo, ...]
    data_offset_bytes: int  # where the tensor data starts in the file

    @property
    def header_bytes(self) -> int:
        return self.data_offset_bytes

    @property
    def file_bytes_needed(self) -> int:
        """The file size the tensor table implies."""
        ends = [t.offset_bytes + t.n_bytes for t in self.tensors]
        return self.data_offset_bytes + (max(ends) if ends else 0)


class NeedMoreBytes(Exception):
    """The prefix ends inside the header; `needed` bytes are known to be required (a lower bound)."""

    def __init__(self, needed: int):
        super().__init__(f"need at least {needed} bytes")
        self.needed = needed


def ggml_type_name(ggml_type: int) -> str:
    from gguf.constants import GGMLQuantizationType  # noqa: PLC0415

    try:
        return GGMLQuantizationType(ggml_type).name
    except ValueError:
        return f"type{ggml_type}"


def tensor_n_bytes(shape: tuple[int, ...], ggml_type: int, *, where: str, name: str) -> int:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType  # noqa: PLC0415

    try:
        block_size, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise CopeInputError(f"tensor {shown(name)} has ggml type {ggml_type}, which this gguf package "
                             "does not know (upgrade gguf)", path=where) from None
    n = 1
    for d in shape:
        n *= d
    if shape and shape[0] % block_size:
        raise CopeInputError(f"tensor {shown(name)}: first dimension {shape[0]} is not a multiple of "
                             f"{ggml_type_name(ggml_type)}'s block of {block_size}", path=where)
    return n * type_size // block_size


def check_magic(head: bytes, where: str) -> None:
    """One-line errors for files that are not GGUF at all, or end within the first 24 bytes."""
    if not head:
        raise CopeInputError("not a GGUF file: the file is empty", path=where)
    if len(head) < 4 or head[:4] != GGUF_MAGIC:
        if len(head) < 4 and GGUF_MAGIC.startswith(head):
            raise CopeInputError(f"truncated GGUF file: only {len(head)} bytes", path=where)
        raise CopeInputError(f"not a GGUF file (it starts with {head[:4]!r}, not b'GGUF')", path=where)
    if len(head) < 24:
        raise CopeInputError(f"truncated GGUF header: the file ends after {len(head)} bytes", path=where)


def check_layout(tensors: tuple[TensorInfo, ...], alignment: int, where: str,
                 *, data_offset: int | None = None, file_size: int | None = None) -> None:
    """The tensor data as llama.cpp lays it out and checks it (gguf.cpp): in table order,
    each tensor at the previous one's end rounded up to the alignment, the first at 0.
    With the file's size: the data must fit, and nothing may follow the last tensor
    beyond its padding (a table short of an entry leaves that tensor's data there)."""
    running = last_end = 0
    for t in tensors:
        if t.offset_bytes != running:
            if t.offset_bytes % alignment:
                raise CopeInputError(f"tensor {shown(t.name)} has offset {t.offset_bytes}, not a multiple of the "
                                     f"alignment {alignment}", path=where)
            raise CopeInputError(f"tensor {shown(t.name)} has offset {t.offset_bytes}, expected {running} (llama.cpp "
                                 "lays tensors out in table order)", path=where)
        last_end = running + t.n_bytes
        running = -(-last_end // alignment) * alignment
    if file_size is None or data_offset is None:
        return
    if data_offset + last_end > file_size:
        raise CopeInputError(f"truncated GGUF file: the tensor table needs {data_offset + last_end} bytes, "
                             f"the file has {file_size}", path=where)
    extra = file_size - (data_offset + running)
    if extra > 0:
        raise CopeInputError(f"{extra} bytes after the last tensor's data: the tensor table is short of an entry "
                             "(or something was appended to the file)", path=where)


def check_counts(head: bytes, size: int, where: str) -> None:
    """The tensor and key counts of the first 24 bytes against what `size` bytes could hold
    (a tensor info takes at least 24 bytes, a key/value pair 13), before anything iterates them."""
    order = ">" if struct.unpack("<I", head[4:8])[0] & 0xFFFF == 0 else "<"
    n_tensors, n_kv = struct.unpack(order + "QQ", head[8:24])
    _check_declared(n_tensors, n_kv, where)
    if 24 + 24 * n_tensors + 13 * n_kv > size:
        raise CopeInputError(f"truncated GGUF header (or corrupt counts): {n_tensors} tensors and {n_kv} metadata "
                             f"keys need more than the file's {size} bytes", path=where)


def _check_declared(n_tensors: int, n_kv: int, where: str) -> None:
    if n_tensors > MAX_TENSORS:
        raise CopeInputError(f"corrupt GGUF header: it declares {n_tensors:,} tensors, more than the {MAX_TENSORS:,} "
                             "COPE reads (the largest real models have about 1,100)", path=where)
    if n_kv > MAX_KEYS:
        raise CopeInputError(f"corrupt GGUF header: it declares {n_kv:,} metadata keys, more than the {MAX_KEYS:,} "
                             "COPE reads (a real model has about 50)", path=where)


def _check_declared_shape(fields: Mapping[str, Any], where: str) -> None:
    """The blocks and experts the metadata declares, against what any real model has,
    before the model is built from them (engine/core/input_limits.py states the caps)."""
    arch = fields.get("general.architecture")
    if not isinstance(arch, str):
        return
    blocks, experts = fields.get(f"{arch}.block_count"), fields.get(f"{arch}.expert_count")
    used = fields.get(f"{arch}.expert_used_count")
    blocks = blocks if isinstance(blocks, int) and not isinstance(blocks, bool) else 0
    experts = experts if isinstance(experts, int) and not isinstance(experts, bool) else 0
    used = used if isinstance(used, int) and not isinstance(used, bool) else None
    check_model_shape(blocks, blocks, experts, where, used)  # every block counted as MoE: an upper bound


def _alignment(fields: Mapping[str, Any], where: str) -> int:
    align = fields.get("general.alignment", DEFAULT_ALIGNMENT)
    if isinstance(align, bool) or not isinstance(align, int) or align <= 0 or align & (align - 1) or align > 2**20:
        raise CopeInputError(f"metadata 'general.alignment' must be a power of two, got {shown(align)}", path=where)
    return align


# --- our own parser, over a prefix -------------------------------------------------


class _Cursor:
    def __init__(self, data: bytes | memoryview, order: str):
        self.data = memoryview(data)
        self.pos = 0
        self.order = order

    def take(self, n: int) -> memoryview:
        end = self.pos + n
        if end > len(self.data):
            raise NeedMoreBytes(end)
        out = self.data[self.pos:end]
        self.pos = end
        return out

    def scalar(self, code: str) -> Any:
        size = struct.calcsize(code)
        return struct.unpack(self.order + code, self.take(size))[0]

    def string(self) -> str:
        n = self.scalar("Q")
        return bytes(self.take(n)).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        self.take(self.scalar("Q"))


def parse_header_prefix(data: bytes | memoryview, where: str) -> GGUFHeader:
    """Parse the header and tensor table from the first bytes of a GGUF file."""
    check_magic(bytes(data[:24]), where)
    order = "<"
    version = struct.unpack("<I", data[4:8])[0]
    if version & 0xFFFF == 0:  # written on a big-endian machine
        order = ">"
        version = struct.unpack(">I", data[4:8])[0]
    if version not in SUPPORTED_VERSIONS:
        raise CopeInputError(f"GGUF version {version} is not supported (only 2 and 3)", path=where)
    cur = _Cursor(data, order)
    cur.pos = 8
    n_tensors = cur.scalar("Q")
    n_kv = cur.scalar("Q")
    _check_declared(n_tensors, n_kv, where)
    fields: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        vtype = cur.scalar("I")
        fields[key] = _value(cur, vtype, where, key)
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.scalar("I")
        if n_dims > 8:
            raise CopeInputError(f"corrupt GGUF tensor table: tensor {shown(name)} has {n_dims} dimensions",
                                 path=where)
        shape = tuple(cur.scalar("Q") for _ in range(n_dims))
        ggml_type = cur.scalar("I")
        offset = cur.scalar("Q")
        tensors.append(TensorInfo(name, shape, ggml_type, offset,
                                  tensor_n_bytes(shape, ggml_type, where=where, name=name)))
    check_layout(tuple(tensors), _alignment(fields, where), where)
    _check_declared_shape(fields, where)
    return GGUFHeader(where, version, fields, tuple(tensors), _data_offset(cur.pos, fields, where))


def _value(cur: _Cursor, vtype: int, where: str, key: str) -> Any:
    if vtype in _SCALAR:
        return cur.scalar(_SCALAR[vtype])
    if vtype == _STRING:
        return cur.string()
    if vtype == _ARRAY:
        itype = cur.scalar("I")
        count = cur.scalar("Q")
        if count > MAX_ARRAY_ITEMS:
            raise CopeInputError(f"corrupt GGUF header: metadata {shown(key)} declares an array of {count:,} items, "
                                 f"more than the {MAX_ARRAY_ITEMS:,} COPE reads (a vocabulary has about 262,144)",
                                 path=where)
        if itype in _SCALAR:
            size = struct.calcsize(_SCALAR[itype])
            raw = cur.take(size * count)
            if count > MAX_KEPT_ARRAY:
                return ArrayLength(count)
            return struct.unpack(f"{cur.order}{count}{_SCALAR[itype]}", raw)
        if itype == _STRING:
            if count > MAX_KEPT_ARRAY:
                for _ in range(count):
                    cur.skip_string()
                return ArrayLength(count)
            return tuple(cur.string() for _ in range(count))
        raise CopeInputError(f"metadata {shown(key)}: arrays of type {itype} are not supported", path=where)
    raise CopeInputError(f"corrupt GGUF header: metadata {shown(key)} has unknown value type {vtype}", path=where)


def _data_offset(end_of_infos: int, fields: Mapping[str, Any], where: str) -> int:
    align = _alignment(fields, where)
    return -(-end_of_infos // align) * align


# --- gguf.GGUFReader, over a local file ---------------------------------------------


def read_local_header(path: str | Path) -> GGUFHeader:
    """The header of a local GGUF file via `gguf.GGUFReader` (memory-mapped; weights untouched)."""
    where = str(path)
    p = Path(path)
    try:
        with open_regular(p, what="GGUF file") as f:  # a FIFO or a device is refused, never waited on
            size = os.fstat(f.fileno()).st_size
            head = f.read(24)
    except OSError as exc:
        raise CopeInputError(f"cannot read the file: {exc.strerror or exc}", path=where) from None
    check_magic(head, where)
    check_counts(head, size, where)
    _parse_bounded(p, size, where)

    from gguf import GGUFReader  # noqa: PLC0415 - numpy-only, but big: load on demand

    try:
        with warnings.catch_warnings():
            # a forged offset overflows the reader's numpy sum; check_layout names it below
            warnings.simplefilter("ignore", RuntimeWarning)
            reader = GGUFReader(p, "r")
    except (ValueError, IndexError, KeyError, TypeError, OverflowError, OSError, MemoryError) as exc:
        # GGUFReader also builds a view of each tensor's data, so a file cut inside the
        # tensor data fails here too: tell the two apart with our own header parser.
        detail = _prefix_diagnosis(p, size, where)
        raise CopeInputError(detail or f"corrupt GGUF file ({exc})", path=where) from None

    fields = {name: _field_value(field) for name, field in reader.fields.items() if not name.startswith("GGUF.")}
    version = int(reader.fields["GGUF.version"].parts[0][0])
    tensors = tuple(
        TensorInfo(t.name, tuple(int(d) for d in t.shape), int(t.tensor_type),
                   # modulo 2**64: the offset as the file states it, had the reader's sum wrapped
                   (int(t.data_offset) - int(reader.data_offset)) % 2**64, int(t.n_bytes))
        for t in reader.tensors
    )
    header = GGUFHeader(where, version, fields, tensors, int(reader.data_offset))
    check_layout(tensors, _alignment(fields, where), where, data_offset=header.data_offset_bytes, file_size=size)
    return header


def _parse_bounded(p: Path, size: int, where: str) -> None:
    """Our own parser over the header first: every length it meets is checked against the
    bytes there are. GGUFReader, given an array length of 2**60, reads its items one by one
    past the end of the file (each an empty read that never fails): a hang."""
    want = min(size, 2**20)
    while True:
        try:
            with p.open("rb") as f:
                data = f.read(want)
        except OSError as exc:
            raise CopeInputError(f"cannot read the file: {exc.strerror or exc}", path=where) from None
        try:
            parse_header_prefix(data, where)
            return
        except NeedMoreBytes as need:
            if need.needed > size:
                raise CopeInputError(f"truncated GGUF header: it needs more than the file's {size} bytes "
                                     f"(at least {need.needed})", path=where) from None
            if want >= MAX_LOCAL_HEADER_BYTES:
                raise CopeInputError(f"the GGUF header is larger than {MAX_LOCAL_HEADER_BYTES // 2**20} MiB, "
                                     "more than any model's", path=where) from None
            want = min(size, MAX_LOCAL_HEADER_BYTES, max(need.needed, 2 * want))


def _field_value(field) -> Any:
    """A metadata value as `parse_header_prefix` gives it; strings that are not UTF-8 are
    read with U+FFFD in place of the bad bytes (as our own parser does)."""
    from gguf.constants import GGUFValueType  # noqa: PLC0415

    def text(index: int) -> str:
        return bytes(field.parts[index]).decode("utf-8", errors="replace")

    if field.types and field.types[0] == GGUFValueType.ARRAY:
        if len(field.data) > MAX_KEPT_ARRAY:
            return ArrayLength(len(field.data))
        if field.types[-1] == GGUFValueType.STRING:
            return tuple(text(i) for i in field.data)
        return tuple(field.contents())
    if field.types and field.types[0] == GGUFValueType.STRING:
        return text(-1)
    return field.contents()


def _prefix_diagnosis(p: Path, size: int, where: str) -> str | None:
    try:
        with p.open("rb") as f:
            data = f.read(min(size, 64 * 2**20))
        header = parse_header_prefix(data, where)
    except NeedMoreBytes as need:
        return f"truncated GGUF header: it needs more than the file's {size} bytes (at least {need.needed})"
    except CopeInputError as exc:
        return exc.message
    except OSError:
        return None
    try:
        check_layout(header.tensors, _alignment(header.fields, where), where,
                     data_offset=header.data_offset_bytes, file_size=size)
    except CopeInputError as exc:
        return exc.message
    return None
