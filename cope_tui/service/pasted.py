"""A llama.cpp command a person already runs, priced beside COPE's best: one path for
`cope estimate` and the app's paste field.

The command says more than its flags: the model its `-m` file names (and the quantization in
that name, which wins over the usual one), what `-c 0` means (the model's trained context),
its `-t`. `pasted_choices` turns those into the plan's choices, so the ranking it is priced
beside is made at the command's own settings, with the notes that say how each was read.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Callable

from cope_tui.options import PlanChoices
from cope_tui.service.advice import Advice, estimate_command, estimate_without_ranking
from cope_tui.service.command_model import command_context, command_model
from cope_tui.service.cpu_only import estimate_without_gpu
from engine.advice.command_estimate import CommandEstimate
from engine.core.errors import BudgetTooSmall
from engine.cost.cost_model import Fidelity
from engine.hardware.gpu_backends import BACKENDS
from engine.hardware.platform import NO_GPU
from engine.llamacpp.llama_args import LlamaCommand


@dataclass(frozen=True)
class PastedChoices:
    choices: PlanChoices  # the plan's, with the command's model, quantization, context and threads
    notes: tuple[str, ...]  # what the file name says, what -c 0 means: for the estimate's notes
    said: str | None  # how the model was found, one line (the CLI's stderr)


def pasted_choices(command: LlamaCommand, choices: PlanChoices, *, gguf_file: str | None = None) -> PastedChoices:
    """`choices` at the command's settings; choices.model / choices.quant are the ones the
    person named (--model / --quant, or the app's model), else the command's file says."""
    found = command_model(command, choices.model, choices.quant)
    context, context_note = command_context(command, found.model, gguf_file, found.alias)
    gpu, backend_note = _command_backend(command, choices.gpu)
    planned = choices.with_(context=context or choices.context, threads=command.threads or choices.threads,
                            model=found.model, quant=found.quant or choices.quant, gpu=gpu)
    notes = found.notes + tuple(n for n in (context_note, backend_note) if n)
    return PastedChoices(planned, notes, found.said)


def _command_backend(command: LlamaCommand, gpu: str | None) -> tuple[str | None, str | None]:
    """The plan's GPU on the backend the command names (`-dev Vulkan0`, `-ot ...=Vulkan0`): a
    build's devices and buffers carry its backend's name, so a command that names one was
    written for a build with it, and COPE plans (and spells COPE's command) for that backend.
    Only for a named GPU preset without a backend of its own (`--gpu X@backend` wins)."""
    if not gpu or "@" in gpu or "," in gpu or gpu.lower() == NO_GPU:
        return gpu, None
    names = [command.devices or "", *(buf for _, buf, _ in command.overrides)]
    for word in (w for name in names for w in name.replace("/", ",").split(",")):
        prefix = word.strip().rstrip("0123456789")
        for known in BACKENDS.values():
            if prefix and prefix.lower() == known.name.lower() and known.name != "CUDA":
                return (f"{gpu}@{known.name.lower()}",
                        f"{word.strip()}: planned with llama.cpp's {known.name} backend, as the command's devices say "
                        f"(--gpu {gpu}@{known.name.lower()}); {known.graphs_why}")
    return gpu, None


def same_plan(planned: PlanChoices, advice: Advice, made_for: PlanChoices) -> bool:
    """Whether `advice`, made for `made_for`, is the ranking `planned` asks for: the fields a
    pasted command can move are equal, or equal to what the advice's request resolved them to."""
    request = advice.request
    resolved = {"context": request.context_tokens, "threads": request.threads}
    return all(getattr(planned, name) in (getattr(made_for, name), resolved.get(name, getattr(made_for, name)))
               for name in ("model", "quant", "context", "threads"))


def estimate_pasted(command: LlamaCommand, pasted: PastedChoices, make_advice: Callable[[PlanChoices], Advice], *,
                    fidelity: Fidelity | None = None, probe_budget_s: float = 60.0, builds=None,  # type: ignore[no-untyped-def]
                    cancel: threading.Event | None = None) -> CommandEstimate:
    """The command priced beside the ranking `make_advice` makes for the pasted choices (an
    app passes its own advice back when `same_plan`); the notes lead with how it was read."""
    choices = pasted.choices
    if (choices.gpu or "").lower() == NO_GPU:  # the CPU alone: the command priced, nothing to rank
        est = estimate_without_gpu(choices, command, fidelity=fidelity)
    else:
        try:
            advice = make_advice(choices)
        except BudgetTooSmall as exc:  # no candidate fits at the command's context: the command alone
            est = estimate_without_ranking(choices, command, exc.message, fidelity=fidelity,
                                           probe_budget_s=probe_budget_s)
        else:
            est = estimate_command(advice, command, fidelity=fidelity, probe_budget_s=probe_budget_s,
                                   builds=builds, cancel=cancel)
    return replace(est, notes=pasted.notes + est.notes) if pasted.notes else est
