"""What to run, for every front end: the runtimes this machine has, the ranking seen
through them (engine/advice/run_advice.py), and the artefacts an export writes.

Detection runs programs and looks up Python packages (probes/runtimes.py), never
imports torch or SGLang; only writing a kt-kernel activation file imports torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from engine.advice.advise import Recommendation
from engine.advice.run_advice import RunAdvice, plan_runs
from engine.core.files import atomic_write
from probes.runtimes import detect_runtimes


def scan_runtimes(llama_bin: str | None = None):  # type: ignore[no-untyped-def]
    """The runtimes found on this machine (probes.runtimes.RuntimeScan)."""
    return detect_runtimes(llama_bin)


def run_advice(rec: Recommendation, scan, ranking=None) -> RunAdvice:  # type: ignore[no-untyped-def]
    """The ranking seen through the runtimes of `scan` (probes.runtimes.RuntimeScan), each
    command spelled for the build found; `ranking`: a workload's
    (engine.advice.workload.WorkloadRanking), the picks then follow request time."""
    return plan_runs(rec, scan.names, ranking, scan.builds)


def save_counts_pt(handle, counts: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    """kt-kernel's activation file into the open binary `handle`: torch.save({"logical_count":
    int64 tensor}), read back by SGLang with torch.load(weights_only=True) (kt_ep_wrapper.py).
    torch.save raises RuntimeError for a failed write (a full disk); it is an OSError here,
    so the export that writes it answers in one line and leaves nothing behind."""
    import torch

    tensor = torch.from_numpy(np.ascontiguousarray(counts, dtype=np.int64))
    try:
        torch.save({"logical_count": tensor}, handle)
    except RuntimeError as exc:
        said = (str(exc).splitlines() or ["no reason given"])[0][:120]
        raise OSError(f"torch.save could not write it (a full disk?): {said}") from None


def write_counts_pt(path: Path, counts: np.ndarray) -> Path:
    """`save_counts_pt` into `path`, written atomically."""
    return atomic_write(path, lambda handle: save_counts_pt(handle, counts), binary=True)
