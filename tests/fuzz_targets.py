"""What the fuzzers feed COPE's readers: one target per reader, each a valid seed file
and a way to mutate it, shared by the property tests (tests/test_fuzz_properties.py)
and the longer campaign (bench/fuzz.py).

A target's `make(rng)` returns the bytes of one case (a mutation of its valid seed,
byte-wise or structure-aware); `read(path)` runs the reader on a file holding them.
For every case a reader must return a value or raise CopeInputError (NeedMoreBytes
too, for the prefix parser), within bounded time and memory.
"""

from __future__ import annotations

import functools
import io
import json
import random
import struct
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

# Integers and strings that break careless parsers.
INTERESTING_INTS = (0, 1, -1, 2, 7, 8, 31, 32, 33, 255, 256, 2**15, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
                    2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1)
INTERESTING_TEXT = (b"1_1", "\u0661\u0661".encode(), b"1e999", b"-1e999", b"9" * 5000, b"[" * 3000, b"{" * 3000,
                    b"NaN", b"Infinity", b"-", b"", b"\x00", b"\xff\xfe", b"8.9", b"-0", b"1" + b"0" * 400,
                    b'"', b",", b"\n", b"\r\n", b"\xef\xbb\xbf", b"null", b"true", b"[]", b"{}", b'"abc"')


def mutate(data: bytes, rng: random.Random, *, max_ops: int = 6, max_len: int = 1 << 20) -> bytes:
    """A few random edits: bit flips, interesting bytes, integers and strings, insertions,
    deletions, duplications and truncation."""
    out = bytearray(data)
    for _ in range(rng.randint(1, max_ops)):
        if not out:
            out += rng.choice(INTERESTING_TEXT)
            continue
        i = rng.randrange(len(out))
        op = rng.randrange(8)
        if op == 0:
            out[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            out[i] = rng.choice((0, 0x7F, 0x80, 0xFF, ord("9"), ord("-"), ord(","), ord("\n")))
        elif op == 2:
            width, code = rng.choice(((4, "<I"), (8, "<Q")))
            value = rng.choice(INTERESTING_INTS) % (1 << (8 * width))
            out[i:i + width] = struct.pack(code, value)
        elif op == 3:
            out[i:i] = rng.choice(INTERESTING_TEXT)
        elif op == 4:
            del out[i:i + rng.randint(1, 64)]
        elif op == 5:
            out[i:i] = out[i:i + rng.randint(1, 256)]
        elif op == 6:
            del out[i:]
        else:
            out[i:i + 1] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
    return bytes(out[:max_len])


def _json_paths(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from _json_paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield prefix + (i,)
            yield from _json_paths(v, prefix + (i,))


def _hostile_json(rng: random.Random):
    return rng.choice((0, -1, 8.9, 1e308, -1e-4, float("nan"), float("inf"), 10**400, 2**64, True, None, "",
                       "abc", [], {}, [1.0, 2.0], {"a": 1}, [[[[[]]]]], "\u0661"))


def mutate_json(text: bytes, rng: random.Random) -> bytes:
    """Replace one value of a JSON document with a hostile one (NaN and 400-digit numbers included)."""
    doc = json.loads(text)
    paths = list(_json_paths(doc))
    for _ in range(rng.randint(1, 3)):
        if not paths:
            break
        path = rng.choice(paths)
        node = doc
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = _hostile_json(rng)
        paths = list(_json_paths(doc))
    return json.dumps(doc).encode()


@dataclass(frozen=True)
class Target:
    name: str
    suffix: str
    seed: Callable[[], bytes]
    read: Callable[[str], object]
    structured: Callable[[bytes, random.Random], bytes] | None = None

    def make(self, rng: random.Random) -> bytes:
        seed = self.seed()
        if self.structured is not None and rng.random() < 0.5:
            try:
                return self.structured(seed, rng)
            except (ValueError, KeyError, IndexError, TypeError, OverflowError, struct.error):
                pass
        return mutate(seed, rng)


# --- seeds --------------------------------------------------------------------------


def _written(write, suffix: str) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"seed{suffix}"
        write(path)
        return path.read_bytes()


@functools.lru_cache(maxsize=None)
def _trace():
    from tests.test_trace_io import make_trace

    return make_trace(tokens=5, seq_starts=(0, 3))


@functools.lru_cache(maxsize=None)
def _model():
    from tests.test_trace_io import make_model

    return make_model()


@functools.lru_cache(maxsize=None)
def npz_seed() -> bytes:
    from engine.traces import save_trace

    return _written(lambda p: save_trace(_trace(), p), ".cope.npz")


@functools.lru_cache(maxsize=None)
def csv_seed() -> bytes:
    from engine.traces import write_llama_moe_trace_csv

    return _written(lambda p: write_llama_moe_trace_csv(_trace(), p), ".csv")


@functools.lru_cache(maxsize=None)
def jsonl_seed() -> bytes:
    from engine.traces import write_jsonl_trace

    return _written(lambda p: write_jsonl_trace(_trace(), p), ".jsonl")


@functools.lru_cache(maxsize=None)
def moe_beyond_seed() -> bytes:
    from tests.test_trace_io import _ids, write_moe_beyond

    return _written(lambda p: write_moe_beyond(p, ["a", "b"], _ids(1)), ".csv")


@functools.lru_cache(maxsize=None)
def gguf_seed() -> bytes:
    from tests.gguf_bytes import base, encode

    return encode(base())


@functools.lru_cache(maxsize=None)
def profile_seed() -> bytes:
    from engine.profiles.profile_io import save_profile
    from tests.test_profile import profile

    return _written(lambda p: save_profile(profile(), p), ".json")


# --- structure-aware mutations ------------------------------------------------------------


def npz_header_mutation(seed: bytes, rng: random.Random) -> bytes:
    """The trace's JSON header with hostile values, or a member replaced by a forged .npy."""
    import zipfile

    import numpy as np

    members = {}
    with zipfile.ZipFile(io.BytesIO(seed)) as zf:
        for name in zf.namelist():
            members[name] = zf.read(name)
    if rng.random() < 0.5:
        header = np.load(io.BytesIO(members["header.npy"]))
        text = mutate_json(header.tobytes(), rng)
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.frombuffer(text, dtype=np.uint8))
        members["header.npy"] = buf.getvalue()
    else:
        name = rng.choice(sorted(members))
        shape = tuple(rng.choice(INTERESTING_INTS[:20]) for _ in range(rng.randint(0, 3)))
        dtype = rng.choice(("<i2", "<f4", "<i8", "|u1", "|O", "<U3", ">i2"))
        buf = io.BytesIO()
        try:
            np.lib.format.write_array_header_1_0(buf, {"descr": dtype, "fortran_order": rng.random() < 0.2,
                                                       "shape": shape})
        except ValueError:
            return mutate(seed, rng)
        members[name] = buf.getvalue() + bytes(rng.randint(0, 128))
    out = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if rng.random() < 0.5 else zipfile.ZIP_STORED
    with zipfile.ZipFile(out, "w", method) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


def gguf_field_mutation(seed: bytes, rng: random.Random) -> bytes:
    """The base GGUF with a count, a metadata integer, a string or a tensor offset forged."""
    from tests.gguf_bytes import ARR, I32, STR, U32, U64, base, encode

    g = base()
    keys = [k.decode() for k, _, _ in g.fields]
    choice = rng.randrange(6)
    value = rng.choice(INTERESTING_INTS)
    if choice == 0:
        g = replace(g, n_tensors=value) if rng.random() < 0.5 else replace(g, n_kv=value)
    elif choice == 1:
        key = rng.choice(keys[2:] + ["qwen3moe.nextn_predict_layers", "general.alignment", "qwen3moe.vocab_size"])
        vtype = rng.choice((U32, I32, U64))
        limit = 1 << (32 if vtype != U64 else 64)
        v = value if vtype != I32 else rng.choice((0, -1, -2**31, 2**31 - 1))
        g = g.with_field(key, vtype, v % limit if vtype != I32 else v)
    elif choice == 2:
        g = g.with_field(rng.choice(["general.name", "general.architecture"]), STR, rng.choice(INTERESTING_TEXT))
    elif choice == 5:  # an array whose stated length is forged (items of any type, a few bytes of them)
        item_type = rng.choice((U32, I32, U64, STR, ARR, 0, 12, 77))
        g = g.with_field(rng.choice(keys[2:] + ["tokenizer.ggml.tokens"]), ARR,
                         (item_type, value, bytes(rng.randint(0, 24))))
    elif choice == 3:
        i = rng.randrange(len(g.tensors))
        tensors = list(g.tensors)
        tensors[i] = replace(tensors[i], offset=value)
        g = replace(g, tensors=tuple(tensors))
    else:
        i = rng.randrange(len(g.tensors))
        tensors = list(g.tensors)
        name = rng.choice((b"blk.100000000000.ffn_up_exps.weight", b"blk.\xff.x", b"blk.1" + b"0" * 5000 + b".x",
                           tensors[i].name + b"\xff"))
        shape = tuple(rng.choice((0, 1, 4, 8, 2**20, 2**40)) for _ in range(rng.randint(1, 4)))
        tensors[i] = replace(tensors[i], name=name) if rng.random() < 0.5 else replace(tensors[i], shape=shape)
        g = replace(g, tensors=tuple(tensors))
    return encode(g)


def text_mutation(seed: bytes, rng: random.Random) -> bytes:
    """A cell of a text trace replaced with an interesting token."""
    lines = seed.split(b"\n")
    i = rng.randrange(len(lines))
    cells = lines[i].split(b",")
    j = rng.randrange(len(cells))
    cells[j] = rng.choice(INTERESTING_TEXT)
    lines[i] = b",".join(cells)
    return b"\n".join(lines)


def jsonl_mutation(seed: bytes, rng: random.Random) -> bytes:
    lines = seed.split(b"\n")
    i = rng.randrange(len(lines) - 1)
    lines[i] = mutate_json(lines[i], rng)
    return b"\n".join(lines)


# --- readers ------------------------------------------------------------------------


def read_trace(path: str, format: str | None = None, *, with_model: bool = True):
    from engine.traces import load_any_trace

    return load_any_trace(path, model=_model() if with_model else None, format=format)


def read_gguf(path: str):
    from cope_tui.sources.gguf_model import model_from_gguf

    return model_from_gguf(path)


def read_gguf_prefix(path: str):
    from cope_tui.sources.gguf_header import NeedMoreBytes, parse_header_prefix
    from engine.core.errors import CopeInputError

    try:
        return parse_header_prefix(Path(path).read_bytes(), path)
    except NeedMoreBytes as need:  # the prefix reader's way to ask for more: a clean outcome
        raise CopeInputError(f"needs {need.needed} bytes", path=path) from None


@functools.lru_cache(maxsize=None)
def imatrix_seed() -> bytes:
    import numpy as np

    from tests.imatrix_files import moe_counts, write_imatrix_gguf

    return _written(lambda p: write_imatrix_gguf(p, moe_counts(np.array([[4, 0, 2, 2], [1, 3, 3, 1]]), (0, 1)),
                                                 hidden=2), ".gguf")


@functools.lru_cache(maxsize=None)
def legacy_imatrix_seed() -> bytes:
    from tests.imatrix_files import write_legacy_dat

    return _written(lambda p: write_legacy_dat(p, {"blk.0.ffn_up_exps.weight": 8}), ".dat")


def read_imatrix(path: str):
    from cope_tui.sources.imatrix import read_imatrix as read

    return read(path)


def read_profile(path: str):
    from engine.profiles.profile_io import load_profile

    return load_profile(path)


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("cope-npz", ".cope.npz", npz_seed, read_trace, npz_header_mutation),
    Target("llama-csv", ".csv", csv_seed, lambda p: read_trace(p, "llama-moe-trace-csv"), text_mutation),
    Target("jsonl", ".jsonl", jsonl_seed, read_trace, jsonl_mutation),
    Target("moe-beyond", ".csv", moe_beyond_seed, lambda p: read_trace(p, "moe-beyond-csv", with_model=False),
           text_mutation),
    Target("gguf", ".gguf", gguf_seed, read_gguf, gguf_field_mutation),
    Target("gguf-prefix", ".gguf", gguf_seed, read_gguf_prefix, gguf_field_mutation),
    Target("profile", ".json", profile_seed, read_profile, mutate_json),
    Target("imatrix", ".gguf", imatrix_seed, read_imatrix, gguf_field_mutation),
    Target("imatrix-legacy", ".dat", legacy_imatrix_seed, read_imatrix),
)}
