"""The request a person sends: a named or numbered workload, and the ranking by its time.

`workload_of(choices)` reads --workload / --prompt-tokens / --output-tokens (None: decode
only, the default); `rank(advice, workload)` prices every candidate's prefill and ranks by
TTFT + N x TPOT (engine/workload.py); `export_with_batch` adds the chosen -b/-ub to a
llama.cpp command, only when a workload was named.
"""

from __future__ import annotations

from dataclasses import replace

from cope_tui.options import WORKLOAD_PRESETS, PlanChoices
from engine.errors import CopeInputError
from engine.export import Export
from engine.workload import Workload, WorkloadRanking, rank_workload


def workload_of(choices: PlanChoices) -> Workload | None:
    """The workload the choices name (a preset, with either number overridden), or None."""
    if choices.workload is None and choices.prompt_tokens is None:
        if choices.output_tokens is not None:
            raise CopeInputError("--output-tokens needs --prompt-tokens or --workload")
        return None
    if choices.workload is not None:
        prompt, output = WORKLOAD_PRESETS[choices.workload]
        return Workload(choices.prompt_tokens or prompt,
                        output if choices.output_tokens is None else choices.output_tokens, choices.workload)
    return Workload(int(choices.prompt_tokens), 0 if choices.output_tokens is None else choices.output_tokens)


def rank(advice, workload: Workload) -> WorkloadRanking:  # type: ignore[no-untyped-def]
    return rank_workload(advice.rec, workload)


def export_with_batch(export: Export, ranking: WorkloadRanking) -> Export:
    """`export` with the -b/-ub chosen for the candidate it runs (llama.cpp binaries only:
    -b/-ub are common/arg.cpp's --batch-size/--ubatch-size and llama-bench's -b/-ub)."""
    chosen = ranking.of(export.exported_id)
    if chosen is None or not export.binary.startswith("llama-"):
        return export
    argv = tuple(export.argv) + ("-b", str(chosen.prefill.batch), "-ub", str(chosen.prefill.ubatch))
    note = (f"-b {chosen.prefill.batch} -ub {chosen.prefill.ubatch}: the micro-batch whose compute buffer fits the "
            f"VRAM this placement leaves, for {ranking.workload.describe()} "
            f"(TTFT {chosen.prefill.ttft_s:.1f} s, {chosen.prefill.tokens_per_s:.0f} prompt tok/s)")
    return replace(export, argv=argv, notes=tuple(export.notes) + (note,))
