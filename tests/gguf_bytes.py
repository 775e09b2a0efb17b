"""A GGUF file written field by field, so tests (and bench/fuzz.py) can forge any
count, offset or string the format allows: the tiny valid MoE model of `base()`, and
`encode()` to serialise it with any field replaced."""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

ALIGN = 32
F32 = 0
# GGUF value types
U32, I32, STR, ARR, U64 = 4, 5, 8, 9, 10


@dataclass(frozen=True)
class Tensor:
    name: bytes
    shape: tuple[int, ...]  # ne0 first
    offset: int | None = None  # None: laid out in order, aligned
    ggml_type: int = F32

    @property
    def n_bytes(self) -> int:
        n = 4
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class Gguf:
    fields: tuple[tuple[bytes, int, object], ...]  # (key, value type, value)
    tensors: tuple[Tensor, ...]
    n_tensors: int | None = None  # None: the true count
    n_kv: int | None = None
    trailing: bytes = b""

    def with_field(self, key: str, vtype: int, value) -> "Gguf":
        k = key.encode()
        kept = tuple(f for f in self.fields if f[0] != k)
        return replace(self, fields=kept + ((k, vtype, value),))

    def without(self, key: str) -> "Gguf":
        return replace(self, fields=tuple(f for f in self.fields if f[0] != key.encode()))


HIDDEN, FFN, EXPERTS, VOCAB = 8, 4, 4, 16


def base() -> Gguf:
    fields = (
        (b"general.architecture", STR, b"qwen3moe"),
        (b"general.name", STR, b"Tiny"),
        (b"qwen3moe.block_count", U32, 1),
        (b"qwen3moe.expert_count", U32, EXPERTS),
        (b"qwen3moe.expert_used_count", U32, 2),
        (b"qwen3moe.embedding_length", U32, HIDDEN),
        (b"qwen3moe.attention.head_count", U32, 2),
        (b"qwen3moe.attention.head_count_kv", U32, 1),
    )
    tensors = (
        Tensor(b"token_embd.weight", (HIDDEN, VOCAB)),
        Tensor(b"blk.0.attn_q.weight", (HIDDEN, HIDDEN)),
        Tensor(b"blk.0.ffn_gate_exps.weight", (HIDDEN, FFN, EXPERTS)),
        Tensor(b"blk.0.ffn_up_exps.weight", (HIDDEN, FFN, EXPERTS)),
        Tensor(b"blk.0.ffn_down_exps.weight", (FFN, HIDDEN, EXPERTS)),
        Tensor(b"output.weight", (HIDDEN, VOCAB)),
    )
    return Gguf(fields, tensors)


def _pad(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _string(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def _value(vtype: int, value) -> bytes:
    if vtype == STR:
        return _string(value)
    if vtype == ARR:  # (item type, the count the file states, the items' raw bytes)
        item_type, count, raw = value
        return struct.pack("<IQ", item_type, count) + raw
    code = {U32: "<I", I32: "<i", U64: "<Q"}[vtype]
    return struct.pack(code, value)


def encode(g: Gguf) -> bytes:
    out = bytearray(b"GGUF" + struct.pack("<I", 3))
    out += struct.pack("<QQ", len(g.tensors) if g.n_tensors is None else g.n_tensors,
                       len(g.fields) if g.n_kv is None else g.n_kv)
    for key, vtype, value in g.fields:
        out += _string(key) + struct.pack("<I", vtype) + _value(vtype, value)
    running = 0
    layout = []
    for t in g.tensors:
        offset = running if t.offset is None else t.offset
        layout.append(offset)
        out += _string(t.name) + struct.pack("<I", len(t.shape))
        out += b"".join(struct.pack("<Q", d) for d in t.shape)
        out += struct.pack("<IQ", t.ggml_type, offset % 2**64)
        running = _pad(running + t.n_bytes)
    out += bytes(_pad(len(out)) - len(out))
    out += bytes(min(running, 1 << 20))  # a forged shape claims more than the file holds
    return bytes(out + g.trailing)
