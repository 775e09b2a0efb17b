"""The short llama-bench runs `cope calibrate` measures: a few placements of the user's GGUF.

Each run decodes `BENCH_GEN_TOKENS` tokens from an empty context (`-p 0 -n 32 -r 2 -o
json`), so a run costs seconds, not minutes. The placements separate the lanes of the
analytic model (engine/cost/analytic_cost.py), each a common llama.cpp command:

- `all-on-gpu`: `-ngl 99`, every block and expert offloaded (the GPU lane alone);
- `half-experts-on-cpu`: `-ngl 99 -ncmoe N`, the first half of the MoE layers' experts on
  the CPU (a split: it checks that the two lanes add up);
- `experts-on-cpu`: `-ngl 99 -ncmoe <blocks>`, every routed expert on the CPU, the rest
  on the GPU (llama-bench has no `--cpu-moe`; `-ncmoe` over every block is the same);
- `cpu-only`: `-ngl 0` at the planned threads, then at half of them (and at one thread
  from four threads up), so the CPU lane's thread scaling and its saturation are measured.

Without a GPU only the CPU runs. A placement that would not fit this machine's VRAM or RAM
(engine/llamacpp/llama_placement.py: placement_memory, the check `cope estimate` makes) is not run,
with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.advice.command_estimate import command_settings, price_placement_command
from engine.cost.cost_models import analytic_model
from engine.cost.request import AdviseRequest
from engine.llamacpp.command_line import Arg, CommandLine, bench_decode_test, spelled
from engine.llamacpp.llama_args import LlamaCommand, read_command_line

BENCH_GEN_TOKENS = 32
BENCH_REPETITIONS = 2
ALL_LAYERS = 99  # llama-bench's usual "-ngl 99" (more when a model has more blocks)


@dataclass(frozen=True)
class CalibrationRun:
    """One llama-bench run: its name, what it places where, its command."""

    name: str
    what: str
    line: CommandLine
    threads: int
    uses_gpu: bool

    @property
    def argv(self) -> tuple[str, ...]:
        """Its words, the binary first (as "llama-bench")."""
        return self.line.argv

    def command(self) -> LlamaCommand:
        return read_command_line(self.line)


@dataclass(frozen=True)
class SkippedRun:
    name: str
    what: str
    reason: str


def run_request(request: AdviseRequest, command: LlamaCommand) -> AdviseRequest:
    """`request` at a llama-bench command's own settings (threads, and the context its
    decode test fills), as `cope estimate` prices it."""
    return replace(request, **command_settings(command, request))


def bench_line(model_path: str, threads: int, placement: tuple[Arg, ...],
               repetitions: int = BENCH_REPETITIONS) -> CommandLine:
    args = (spelled("llama-bench", "model", model_path) + bench_decode_test(BENCH_GEN_TOKENS, repetitions)
            + spelled("llama-bench", "threads", threads) + placement)
    return CommandLine("llama-bench", args)


def cpu_thread_counts(threads: int) -> list[int]:
    """The planned threads, half of them, and one from four up (each once, most first)."""
    counts = [threads, threads // 2] + ([1] if threads >= 4 else [])
    return [t for i, t in enumerate(counts) if t >= 1 and t not in counts[:i]]


def cpu_runs(model_path: str, threads: int, repetitions: int = BENCH_REPETITIONS) -> list[CalibrationRun]:
    if threads < 1:
        raise ValueError(f"threads must be positive, got {threads}")
    cpu_only = spelled("llama-bench", "gpu_layers", 0)
    return [CalibrationRun("cpu-only" if t == threads else f"cpu-only-{t}t", f"everything on the CPU, {t} thread{'s' if t > 1 else ''}",
                           bench_line(model_path, t, cpu_only, repetitions), t, False)
            for t in cpu_thread_counts(threads)]


def gpu_runs(request: AdviseRequest, model_path: str, threads: int,
             repetitions: int = BENCH_REPETITIONS) -> list[CalibrationRun]:
    model = request.model
    ngl = spelled("llama-bench", "gpu_layers", max(ALL_LAYERS, model.n_blocks + 1))
    runs = [CalibrationRun("all-on-gpu", "every block and expert on the GPU", bench_line(model_path, threads, ngl, repetitions),
                           threads, True)]
    half = model.n_moe_layers // 2
    if half >= 1:
        below = model.moe_blocks[half - 1] + 1  # -ncmoe N: the experts of blocks i < N
        runs.append(CalibrationRun(
            "half-experts-on-cpu", f"the experts of {half} of {model.n_moe_layers} MoE layers on the CPU",
            bench_line(model_path, threads, ngl + spelled("llama-bench", "n_cpu_moe", below), repetitions), threads,
            True))
    runs.append(CalibrationRun(
        "experts-on-cpu", "every routed expert on the CPU, the rest on the GPU",
        bench_line(model_path, threads, ngl + spelled("llama-bench", "n_cpu_moe", model.n_blocks), repetitions),
        threads, True))
    return runs


def check_fits(request: AdviseRequest, runs: list[CalibrationRun]) -> tuple[list[CalibrationRun], list[SkippedRun]]:
    """The runs that fit this machine's VRAM and RAM, and those that would not, with why."""
    fit, skipped = [], []
    for run in runs:
        command = run.command()
        at = run_request(request, command)
        price = price_placement_command(at, analytic_model(at), command)
        if price.runs:
            fit.append(run)
        else:
            skipped.append(SkippedRun(run.name, run.what, f"not run: {price.refusal}"))
    return fit, skipped
