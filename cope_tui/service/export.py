"""Export, for every front end: the command (and artefacts) that runs one candidate.

`cope export`, `cope advise --export` and the app's Export pane (copy and save) all ask
`export_command`; it composes the export once (engine/advice/run_advice.py:
`compose_export`, which the JSON report's run-now and best-overall picks use too): the
runtime from the registry, the model path as the person gave it (else the GGUF the model
was read from), the artefacts (the fork's profile CSV, kt-kernel's counts) named beside
where the command is saved, else in the cache folder's exports/ (`write_side_files` puts
them there before the command is shown), and with a workload the -b/-ub it chose. The front ends only
turn their input into an `ExportAsk` and show or save the `Export`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from cope_tui.service.advice import Advice
from cope_tui.service.runtimes import save_counts_pt
from engine.advice.run_advice import compose_export
from engine.advice.workload import WorkloadRanking
from engine.llamacpp.builds import LlamaBuild
from engine.runtimes import STOCK_NAME
from engine.core.cache_dirs import exports_dir
from engine.runtimes.export import Export, write_artefacts, write_export


@dataclass(frozen=True)
class ExportAsk:
    """What a person asks an export for."""

    candidate_id: str | None = None  # None: the fastest estimate, or with a workload the fastest request
    runtime: str = STOCK_NAME  # a registry name (or an earlier spelling, engine.runtimes.ALIASES)
    binary: str | None = None  # None: the runtime's first program (llama-server)
    model_path: str | None = None  # the -m named for the command; None: the GGUF the model was read from
    hf_model: str | None = None  # sglang-kt: the weights SGLang loads (None: the model's repo id)
    out: str | os.PathLike | None = None  # where the command will be saved: its artefacts are named beside it

    @property
    def side_dir(self) -> str:
        """Where the command's artefacts are, by absolute path so it runs from any folder:
        beside `out`, else the cache folder's exports/ (written there by `write_side_files`)."""
        if self.out is not None:
            return os.path.dirname(os.path.abspath(self.out))
        return os.path.abspath(exports_dir())


def export_command(advice: Advice, ask: ExportAsk, *, ranking: WorkloadRanking | None = None,
                   builds: Mapping[str, LlamaBuild] | None = None) -> Export:
    """The export `ask` names, of `advice`'s ranking; `ranking`: the workload's (its -b/-ub,
    and its fastest request when no candidate is named); `builds`: the runtimes' builds found
    here (probes.runtimes.RuntimeScan.builds), each command spelled for its own."""
    rec = advice.rec
    if ask.candidate_id is not None:
        target = rec.estimate_of(ask.candidate_id)
    else:
        target = rec.best if ranking is None else ranking.best.estimate
    return compose_export(rec, target, ranking=ranking, runtime=ask.runtime, binary=ask.binary,
                          model_path=ask.model_path, side_dir=ask.side_dir, hf_model=ask.hf_model, builds=builds)


def write_side_files(export: Export, side_dir: str | os.PathLike) -> list[Path]:
    """The export's artefacts written where its command names them (`side_dir`, as the
    export was made with), all or none, each atomically; [] when it reads no file. A
    command whose files cannot be written is not to be printed: the error is one line."""
    return write_artefacts(export, side_dir, write_tensor=save_counts_pt)


def save_export(export: Export, out: str | os.PathLike) -> list[Path]:
    """The command written to `out` and its artefacts beside it, all or none
    (engine.runtimes.export.write_export; kt-kernel's counts through torch.save)."""
    return write_export(export, out, write_tensor=save_counts_pt)


__all__ = ["ExportAsk", "export_command", "save_export", "write_side_files"]
