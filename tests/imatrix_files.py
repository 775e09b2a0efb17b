"""Imatrix files as llama-imatrix writes them (tools/imatrix/imatrix.cpp at 0c1e570,
save_imatrix and save_imatrix_legacy), for the reader's tests.

GGUF: no general.architecture (gguf_init_empty adds none), general.type "imatrix", the
datasets, chunk count and chunk size, then for each tensor name in sorted order
`<name>.in_sum2` (F32, ne [nval / nmat, nmat]) and `<name>.counts` (F32, ne [1, nmat]);
numpy shapes are ggml's ne reversed.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Mapping

import numpy as np


def write_imatrix_gguf(path: str | Path, counts: Mapping[str, np.ndarray], *, hidden: int = 8,
                       datasets: tuple[str, ...] = ("calibration.txt",), chunk_count: int = 3,
                       chunk_size: int = 64, extra_fields: Mapping[str, str] | None = None) -> Path:
    """`counts`: tensor name (blk.N.ffn_up_exps.weight, or a dense one) -> counts [nmat]."""
    import gguf

    path = Path(path)
    w = gguf.GGUFWriter(str(path), "unused")
    w.kv_data[0].pop("general.architecture")  # llama-imatrix's gguf_init_empty writes none
    w.add_type("imatrix")
    w.add_array("imatrix.datasets", list(datasets))
    w.add_uint32("imatrix.chunk_count", chunk_count)
    w.add_uint32("imatrix.chunk_size", chunk_size)
    for key, value in (extra_fields or {}).items():
        w.add_string(key, value)
    rng = np.random.default_rng(0)
    for name in sorted(counts):
        c = np.asarray(counts[name], dtype=np.float32).ravel()
        w.add_tensor(f"{name}.in_sum2", rng.random((c.size, hidden), dtype=np.float32))
        w.add_tensor(f"{name}.counts", c.reshape(c.size, 1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def moe_counts(counts: np.ndarray, blocks: tuple[int, ...], *, dense: bool = True) -> dict[str, np.ndarray]:
    """The tensors of a qwen3moe-like model: every exps tensor of block b counts counts[i]
    (they share the routing), plus the dense attention tensors with one count each."""
    out: dict[str, np.ndarray] = {}
    for i, b in enumerate(blocks):
        for t in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
            out[f"blk.{b}.{t}.weight"] = counts[i]
        if dense:
            out[f"blk.{b}.attn_q.weight"] = np.array([counts[i].sum()])
    return out


def write_legacy_dat(path: str | Path, entries: Mapping[str, int], *, chunks: int = 3,
                     dataset: str = "calibration.txt") -> Path:
    """save_imatrix_legacy's layout: i32 entries; per entry i32 name length, name, i32 ncall,
    i32 nval, nval f32; then i32 chunks, i32 dataset length, the dataset."""
    out = [struct.pack("<i", len(entries))]
    for name in sorted(entries):
        nval = entries[name]
        raw = name.encode()
        out += [struct.pack("<i", len(raw)), raw, struct.pack("<ii", chunks, nval),
                np.ones(nval, dtype="<f4").tobytes()]
    out += [struct.pack("<i", chunks), struct.pack("<i", len(dataset)), dataset.encode()]
    path = Path(path)
    path.write_bytes(b"".join(out))
    return path
