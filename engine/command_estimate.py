"""A llama.cpp command a person already runs, priced beside COPE's ranking.

The command's expert placement (engine/llama_args.py: `--n-cpu-moe`, `--cpu-moe`, `-ot`,
GGML_OP_OFFLOAD_MIN_BATCH) becomes a CPU layer set, priced with the same replay, cost
model and pricing as the ranking (engine/layer_set.py), so the figures compare. The
recommendation must already be at the command's threads and context (the service
layer recomputes it when they differ).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from engine.advise import AdviseRequest, Recommendation
from engine.cost_model import CostModel
from engine.estimate import Estimate
from engine.export import Export, export_for
from engine.layer_set import layer_set_kind, price_layer_set
from engine.llama_args import LlamaCommand, command_notes, cpu_layers
from engine.memory import GIB
from engine.policy import Execution


@dataclass(frozen=True)
class CommandEstimate:
    """A command's layer set priced beside COPE's best (what `cope estimate` shows)."""

    command: LlamaCommand
    request: AdviseRequest  # what it was priced with (the command's threads and context)
    maps_to: str  # the candidate kind the command's layer set is (partition-first, ..., "layer set")
    yours: Estimate
    best: Estimate  # COPE's best at the same settings
    rank: int  # where the command would rank among the candidates, 1 = fastest
    of: int  # candidates ranked
    export: Export  # the command of COPE's best, with the command's binary and model file
    runs: Estimate | None  # when the best cannot run on stock llama.cpp: the nearest that can
    notes: tuple[str, ...]  # about the command and how it was priced
    ranking_notes: tuple[str, ...]  # every assumption and caveat of the ranking it was priced beside
    cpu_moe_blocks: tuple[int, ...]  # the blocks whose experts the command keeps on the CPU

    @property
    def stages(self) -> bool:
        """The command copies its CPU experts to the GPU every step (GGML_OP_OFFLOAD_MIN_BATCH)."""
        return self.maps_to.endswith("(stage)")

    @property
    def speedup(self) -> float:
        return self.yours.tpot_s / self.best.tpot_s


def price_command(rec: Recommendation, cost_model: CostModel, command: LlamaCommand) -> CommandEstimate:
    """Price `command`'s placement with `rec`'s request and `cost_model`."""
    request = rec.request
    model = request.model
    cpu, placement_notes = cpu_layers(command, model)
    execution = Execution.STAGE if command.stages_cpu_experts and cpu.any() else Execution.SEQUENTIAL
    yours = price_layer_set(request, cost_model, cpu, execution=execution)
    notes = list(command_notes(command, model)) + list(placement_notes)
    if command.model_path and not _is_model_file(command.model_path, model):
        notes.append(f"-m {command.model_path}: priced as {model.name} {request.quant.name}, the model in use "
                     "(give that file as the model to price it instead)")
    if yours.vram_used_bytes > request.vram_budget_bytes:
        notes.append(f"your placement needs {yours.vram_used_bytes / GIB:.1f} GiB of VRAM, over the budget of "
                     f"{request.vram_budget_bytes / GIB:.1f} GiB: llama.cpp would run out of memory")
    binary = command.tool if command.tool != "other" else "llama-server"
    export = export_for(rec, rec.best, model_path=command.model_path, binary=binary)
    runs = rec.estimate_of(export.exported_id) if export.nearest_id is not None else None
    maps_to = layer_set_kind(cpu) + (" (stage)" if execution is Execution.STAGE else "")
    rank = 1 + sum(e.tpot_s < yours.tpot_s for e in rec.estimates)
    blocks = tuple(model.moe_blocks[i] for i in range(len(cpu)) if cpu[i])
    return CommandEstimate(command, request, maps_to, yours, rec.best, rank, len(rec.estimates), export, runs,
                           tuple(notes), tuple(rec.notes), blocks)


def _is_model_file(path: str, model) -> bool:  # type: ignore[no-untyped-def]
    exact = model.exact_bytes
    if exact is None:
        return False
    try:
        return os.path.samefile(path, exact.source)
    except OSError:
        return os.path.abspath(path) == os.path.abspath(exact.source)
