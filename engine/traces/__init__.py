"""Routing traces: `RoutingTrace` (`trace`), reading and writing them (DESIGN.md section 8),
synthetic traces (`synthetic`), the dataset card `cope trace push` publishes (`trace_card`)
and the prompt sets they are recorded from (`prompts`).

May import: engine.core, engine.models (pyarrow and safetensors only inside the readers
of the published formats that need them).

One module per format, each with a `FORMAT` entry that `registry.FORMATS` lists:

- `cope_npz`: COPE's own format (`save_trace` / `load_trace`, suffix `.cope.npz`).
- `llama_csv`: llama-moe-trace CSV (`read_llama_moe_trace_csv` / `write_llama_moe_trace_csv`).
  It, JSONL and CommitMoE labels do not record the model's shape: their readers take a
  `TraceShape` (format.py).
- `jsonl`: generic JSONL, one record per (token, layer) (`read_jsonl_trace` / `write_jsonl_trace`).
- `moe_beyond`: the moe-beyond DeepSeek-V2-Lite-Chat CSV folder (`read_moe_beyond_csv_dir`).
- `flame_parquet`: FLAME-MoE's per-layer Parquet (`indices`/`scores`; pyarrow, the cope[parquet] extra).
- `commitmoe_safetensors`: CommitMoE's safetensors labels (`top_indices`, `prompt_idx`, `tok`, `layer`).

`registry.load_any_trace` picks the reader (explicit format, suffix, then the file's
first bytes) and checks the trace fits the model with `validate.check_trace_fits_model`.

Every problem with a file is a CopeInputError naming the file and, for text formats,
the line. A token that lacks a (token, layer) cell is dropped, never fatal: the
reader emits one `TraceWarning` (a UserWarning, through the standard `warnings`
module) whose message names the file, and records the same sentence in the trace's
`meta.notes`, so the fact survives saving and shows in `describe()`.
"""

from __future__ import annotations

from engine.traces.cope_npz import TRACE_FORMAT, TRACE_SUFFIX, TRACE_VERSION, load_trace, save_trace
from engine.traces.format import TraceShape
from engine.traces.jsonl import read_jsonl_trace, write_jsonl_trace
from engine.traces.llama_csv import read_llama_moe_trace_csv, write_llama_moe_trace_csv
from engine.traces.moe_beyond import read_moe_beyond_csv_dir, read_moe_beyond_file
from engine.traces.registry import FORMATS, detect_format, load_any_trace, save_any_trace
from engine.traces.validate import TraceWarning, check_trace_fits_model

__all__ = [
    "FORMATS",
    "TRACE_FORMAT",
    "TRACE_SUFFIX",
    "TRACE_VERSION",
    "TraceShape",
    "TraceWarning",
    "check_trace_fits_model",
    "detect_format",
    "load_any_trace",
    "load_trace",
    "read_jsonl_trace",
    "read_llama_moe_trace_csv",
    "read_moe_beyond_csv_dir",
    "read_moe_beyond_file",
    "save_any_trace",
    "save_trace",
    "write_jsonl_trace",
    "write_llama_moe_trace_csv",
]
