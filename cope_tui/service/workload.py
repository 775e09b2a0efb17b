"""The request a person sends: a named or numbered workload, and the ranking by its time.

`workload_of(choices)` reads --workload / --prompt-tokens / --output-tokens (None: decode
only, the default); the request is planned at a context that holds it
(cope_tui/service/request.py, engine.advice.workload.request_context); `rank(advice, workload)`
prices every candidate's prefill and ranks by TTFT + N x TPOT (engine/advice/workload.py);
`export_with_batch` adds the chosen -b/-ub to a llama.cpp command, only when a workload
was named.
"""

from __future__ import annotations

from cope_tui.options import WORKLOAD_PRESETS, PlanChoices
from engine.advice.workload import Workload, WorkloadRanking, export_with_batch, rank_workload
from engine.core.errors import CopeInputError

__all__ = ["export_with_batch", "rank", "workload_of"]


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

