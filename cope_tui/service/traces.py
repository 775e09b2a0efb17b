"""Getting a routing trace: recording one with transformers into the trace cache."""

from __future__ import annotations

import threading

from engine.core.cache_dirs import default_trace_path
from engine.core.progress import Progress
from engine.models.catalog import model_label
from engine.traces import save_trace
from engine.traces.prompts import domain_prompts
from probes.record_hf import record_with_transformers


def record_trace(*, model: str, domain: str, tokens: int, progress: Progress, cancel: threading.Event) -> str:
    """Record a trace with transformers into the trace cache `cope trace record` uses;
    returns its path. A cancelled recording keeps the tokens recorded so far."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    label = model_label(model)
    trace = record_with_transformers(model, domain_prompts(domain), tokens, device=device,
                                     progress=progress, cancel=cancel, model_name=label, domain=domain)
    out = default_trace_path(label, domain)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_trace(trace, out)
    return str(out)
