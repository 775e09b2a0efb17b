"""Planning without a GPU (`--gpu none`): llama.cpp with every weight on the CPU.

There is nothing to split, so the Policy Matrix does not apply: the plan is the one
command a CPU-only machine runs (`llama-server -m FILE -ngl 0 -t T -c C`), priced by the
same placement pricing as `cope estimate` (engine/advice/command_estimate.py) with the cost model
the default policy chooses (this machine's calibration when `cope calibrate` ran, else
analytic). `cope estimate --gpu none` prices the user's command the same way
(`estimate_without_gpu`). Imports neither textual nor torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from cope_tui.options import PlanChoices
from cope_tui.service.pricing import Pricing, choose_cost_model
from cope_tui.service.request import build_request
from cope_tui.service.workload import workload_of
from engine.advice.command_estimate import (
    CommandEstimate,
    CommandPrice,
    command_settings,
    price_command_alone,
    price_placement_command,
)
from engine.core.errors import CopeInputError
from engine.core.spans import count_of
from engine.advice.workload import Workload
from engine.cost.prefill_cost import request_time_s
from engine.cost.request import AdviseRequest
from engine.hardware.memory import GIB
from engine.llamacpp.command_line import CommandLine, spell
from engine.llamacpp.llama_args import LlamaCommand, read_command_line
import shlex


# The prompt a CPU-only plan prices prefill for without a workload: llama-bench's pp test
# (tools/llama-bench/llama-bench.cpp: the default -p 512), the prompt speed people quote.
DEFAULT_PROMPT_TOKENS = 512


@dataclass(frozen=True)
class CpuOnlyPlan:
    request: AdviseRequest
    pricing: Pricing
    line: CommandLine  # the command: `llama-server -m FILE -ngl 0 -c C -t T`
    price: CommandPrice  # with its prefill of `workload`'s prompt, else of DEFAULT_PROMPT_TOKENS
    workload: Workload | None = None

    @property
    def request_s(self) -> float | None:
        """With a workload: TTFT + N x TPOT (None: no workload, or not priced)."""
        p = self.price
        if self.workload is None or not p.runs or p.prefill is None:
            return None
        return request_time_s(p.prefill.ttft_s, p.tpot_s, self.workload.output_tokens)

    @property
    def argv(self) -> tuple[str, ...]:
        return self.line.argv

    def to_dict(self) -> dict:
        p = self.price
        pp = p.prefill if p.runs else None
        run = {"candidate": "cpu-only", "runtime": "llama.cpp", "argv": list(self.argv),
               "tokens_per_s": p.tokens_per_s if p.runs else None, "tpot_s": p.tpot_s if p.runs else None,
               "prompt_tokens": None if pp is None else pp.prompt_tokens,
               "prompt_tokens_per_s": None if pp is None else pp.tokens_per_s,
               "ttft_s": None if pp is None else pp.ttft_s, "ubatch": None if pp is None else pp.ubatch,
               "request_s": self.request_s,
               "ram_bytes": p.memory.host_bytes if p.memory is not None else None, "refusal": p.refusal}
        return {"schema": 2, "gpu": None, "model": self.request.model.id, "quant": self.request.quant.name,
                "cpu": self.request.platform.cpu.name, "threads": self.request.threads,
                "context": self.request.context_tokens, "cost_model": {"fidelity": self.pricing.fidelity.value,
                                                                       "reason": self.pricing.reason},
                "recommendation": {"run_now": run, "best_overall": run}, "notes": list(self.request.notes)}


def plan_cpu_only(choices: PlanChoices, *, detect_cpu=None) -> CpuOnlyPlan:  # type: ignore[no-untyped-def]
    """The CPU-only plan of `choices` (whose --gpu is none), with the prefill of the workload's
    prompt (and its request time), else of llama-bench's default 512-token prompt."""
    for flag, value in (("--vram-budget", choices.vram_budget_gib), ("--fidelity", choices.fidelity)):
        if value is not None and not (flag == "--fidelity" and not value.needs_profile):
            raise CopeInputError(f"{flag} {getattr(value, 'value', value)}: --gpu none plans without a GPU (analytic or calibrated "
                                 "pricing, no VRAM)")
    request = build_request(choices, detect_cpu=detect_cpu)
    pricing = choose_cost_model(request, fidelity=choices.fidelity)
    model_file = request.model.gguf_path or f"{request.model.id}.gguf"  # as engine.runtimes.export names it
    line = CommandLine("llama-server", spell("llama-server", [("model", model_file), ("gpu_layers", 0),
                                                              ("context", request.context_tokens),
                                                              ("threads", request.threads)]))
    workload = workload_of(choices)
    prompt = DEFAULT_PROMPT_TOKENS if workload is None else workload.prompt_tokens
    price = price_placement_command(request, pricing.cost_model, read_command_line(line), prompt_tokens=prompt)
    finite = [price.tpot_s] + ([price.prefill.prompt_s] if price.prefill is not None else [])
    if price.runs and not all(math.isfinite(v) for v in finite):  # a GPU term reached a CPU-only price: a bug
        raise RuntimeError(f"CPU-only price is not finite: {price.cost}, {price.prefill}")
    return CpuOnlyPlan(request, pricing, line, price, workload)


NO_RANKING = "--gpu none: no GPU, so there is no GPU/CPU split to rank against; your command is priced on the CPU alone"
_GPU_BUFFER = re.compile(r"(?i)^(cuda|rocm|vulkan|sycl|metal|cann|musa|opencl)\d*")


def estimate_without_gpu(choices: PlanChoices, command: LlamaCommand, *, fidelity: Fidelity | None = None,
                         detect_cpu=None) -> CommandEstimate:  # type: ignore[no-untyped-def]
    """`cope estimate --gpu none`: `command` priced on the CPU alone (llama.cpp runs every
    layer there without a GPU, whatever -ngl says), with nothing to rank beside it; a
    command that names a GPU (an -ot buffer, -dev, a split) is refused in one line."""
    gpu_flags = [f"{flag} {pattern}={buffer}" for pattern, buffer, flag in command.overrides
                 if _GPU_BUFFER.match(buffer)]
    if command.multi_gpu:
        gpu_flags.append(command.multi_gpu)
    if gpu_flags:
        raise CopeInputError(f"--gpu none: the command puts tensors on a GPU ({'; '.join(gpu_flags)}), which needs "
                             "one; drop --gpu none (or give --gpu PRESET) to price it")
    if fidelity is not None and fidelity.needs_profile:
        raise CopeInputError(f"--fidelity {fidelity.value}: --gpu none prices without a GPU (analytic or calibrated)")
    if choices.vram_budget_gib is not None:
        raise CopeInputError(f"--vram-budget {choices.vram_budget_gib:g}: --gpu none prices without a GPU (no VRAM)")
    request = build_request(choices, detect_cpu=detect_cpu)
    request = replace(request, **command_settings(command, request))
    pricing = choose_cost_model(request, fidelity=fidelity)
    est = price_command_alone(request, pricing.cost_model, command, NO_RANKING)
    offloads = command.gpu_layers is None or command.gpu_layers.strip().lower() in ("all", "auto", "max", "-1") or \
        int(command.gpu_layers) > 0
    said = (f"-ngl {command.gpu_layers or '(unset: every layer)'} offloads nothing without a GPU: llama.cpp runs "
            "every layer on the CPU",) if offloads else ()
    return replace(est, notes=said + est.notes, ranking_notes=tuple(n for n in request.notes if not _about_routing(n)))


def render_cpu_only(plan: CpuOnlyPlan) -> str:
    """The text report: the command first, then what it was priced with."""
    r, p = plan.request, plan.price
    lines = ["Run this now: CPU only with stock llama.cpp (no GPU planned: --gpu none)"]
    if p.runs:
        ram = f", RAM {p.memory.host_bytes / GIB:.1f} GiB" if p.memory is not None else ""
        lines.append(f"  {p.tokens_per_s:.1f} tok/s ({p.tpot_s * 1e3:.2f} ms/token){ram}; {p.detail}")
        pp = p.prefill
        if pp is not None:
            whose = ("the workload's" if plan.workload is not None
                     else "llama-bench's pp512; --prompt-tokens P for yours")
            lines.append(f"  prompt: {pp.tokens_per_s:.0f} prompt tok/s at -ub {pp.ubatch}, TTFT {pp.ttft_s:.2f} s for "
                         f"{pp.prompt_tokens} tokens ({whose})")
        if plan.request_s is not None:
            lines.append(f"  request {plan.request_s:.1f} s = TTFT {pp.ttft_s:.1f} s + "  # type: ignore[union-attr]
                         f"{plan.workload.output_tokens} x {p.tpot_s * 1e3:.2f} ms")  # type: ignore[union-attr]
    else:
        lines.append(f"  {p.refusal}")
    lines += [f"  {shlex.join(plan.argv)}", "",
              f"COPE advise: {r.model.name} {r.quant.name}, no GPU + {r.platform.cpu.name}, {count_of(r.threads, 'thread')}, "
              f"context {r.context_tokens}",
              f"Cost model: {plan.pricing.fidelity.value} ({plan.pricing.reason})"]
    if p.memory is not None:
        lines.append(f"  RAM: {p.memory.ram.describe()}")
    lines += [f"  {note}" for note in r.notes if not _about_routing(note)]
    return "\n".join(lines) + "\n"


def _about_routing(note: str) -> bool:
    """Trace notes: a CPU-only run computes every routed expert where it is, so routing does not move its price."""
    return note.startswith(("popularity learnt", "SYNTHETIC", "assumed trace:", "run `cope trace", "skipped cached trace"))
