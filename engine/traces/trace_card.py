"""The dataset card (README.md) `cope trace push` publishes beside a trace.

Built from the trace's own metadata (model, domain, how it was recorded, tokens, layers)
and what the user states (quantization, runtime, licence); what is neither recorded nor
stated is written as "not stated", never guessed beyond what `recorded_with` says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.core.spans import block_span, count_of
from engine.traces.trace import RoutingTrace

TRACE_FILE = "trace.cope.npz"
CSV_FILE = "routing.csv"
NOT_STATED = "not stated"


@dataclass(frozen=True)
class CardFacts:
    """What the card says beyond the trace's metadata."""

    repo_id: str
    date: str  # YYYY-MM-DD, UTC
    licence: str
    quantization: str | None = None
    runtime: str | None = None


def runtime_of(recorded_with: str) -> str:
    """The runtime a recorder names at the start of `recorded_with` (COPE's recorders do)."""
    text = recorded_with.strip()
    if text.startswith("transformers"):
        return text.split(",")[0]  # "transformers X.Y on torch Z"
    if text.startswith("llama-cpp-python"):
        return "llama.cpp (" + text.split(",")[0] + ")"
    return NOT_STATED


def quantization_of(trace: RoutingTrace) -> str:
    """The weights' precision as recorded: transformers' dtype, or a GGUF quantization in the model's name."""
    m = re.search(r"\bdtype ([\w.]+)", trace.meta.recorded_with)
    if m:
        return m[1]
    m = re.search(r"(?i)\b(I?Q\d_[A-Z0-9_]+|Q\d_\d|F16|BF16|F32|MXFP4(?:_MOE)?)\b", trace.meta.model)
    return m[1].upper() if m else NOT_STATED


def _yaml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dataset_card(trace: RoutingTrace, facts: CardFacts) -> str:
    meta = trace.meta
    model = meta.model or NOT_STATED
    quantization = facts.quantization or quantization_of(trace)
    runtime = facts.runtime or runtime_of(meta.recorded_with)
    domain = meta.domain or NOT_STATED
    rows = [
        ("model", model),
        ("quantization", quantization),
        ("runtime", runtime),
        ("prompts' domain", domain),
        ("tokens", f"{trace.n_tokens:,} decode tokens in {count_of(trace.n_sequences, 'sequence')}"),
        ("MoE layers", f"{trace.n_layers} (blocks {block_span(meta.moe_blocks)}), {meta.n_experts} routed experts, "
                       f"top-{trace.top_k}"),
        ("router weights", "yes" if trace.weights is not None else "no"),
        ("date", facts.date),
        ("how recorded", meta.recorded_with or NOT_STATED),
        ("origin", meta.origin),
        ("licence", facts.licence),
    ]
    table = "\n".join(f"| {k} | {v.replace('|', '/')} |" for k, v in rows)
    notes = "".join(f"- {n}\n" for n in meta.notes)
    return f"""---
license: {facts.licence}
pretty_name: {_yaml_str(f"MoE routing trace of {model} ({domain})")}
tags:
- mixture-of-experts
- moe
- routing-traces
- cope
cope:
  model: {_yaml_str(model)}
  format: cope-trace
  trace_file: {TRACE_FILE}
  csv_file: {CSV_FILE}
---
# MoE routing trace of {model}

Which routed experts every decode token chose in every MoE layer, recorded with COPE
(`cope trace record`) and published with `cope trace push`.

| field | value |
| --- | --- |
{table}

## Files

- `{TRACE_FILE}`: COPE's own trace format (numpy arrays in a zip with a JSON header; no pickle):
  expert ids [tokens, layers, k], router weights, sequence starts and this metadata.
- `{CSV_FILE}`: the same routing as a llama-moe-trace CSV (one row per token and layer; no weights).

## Use

```
cope trace pull {facts.repo_id}
cope advise --model {model}
```
{"" if not notes else chr(10) + "## Notes" + chr(10) + chr(10) + notes}"""


def trace_shape(trace: RoutingTrace) -> str:
    """"200 tokens x 48 MoE layers (top-8, 1 sequence)": what a written trace holds."""
    return (f"{trace.n_tokens} tokens x {trace.n_layers} MoE layers (top-{trace.top_k}, "
            f"{count_of(trace.n_sequences, 'sequence')})")
