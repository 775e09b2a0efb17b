"""The llama.cpp command for a candidate (DESIGN.md §7).

The exporter builds an argument list from the declarative flag table below, never a
shell string; `Export.display()` quotes it for copying. Every candidate is labelled:

- runs-on-stock: stock llama.cpp expresses it (layer sets, all on the CPU, all on the
  GPU, staging every routed CPU expert with GGML_OP_OFFLOAD_MIN_BATCH=1);
- needs-fork: fixed per-expert residency with a parallel CPU lane, which only the
  community fork's `--moe-cache-profile/--moe-cache-slots` express;
- not-expressible: everything else; the export then carries the command of the
  nearest expressible candidate (by estimated TPOT) with both estimates.

A candidate that needs the fork, exported for stock llama.cpp or for llama-bench (whose
own parser does not know the fork's flags), also falls back to its nearest candidate
that runs there, and says so.

Where each flag comes from (ggml-org/llama.cpp, read through the code index):
- common/arg.cpp (llama-server, llama-cli): `-m/--model`, `-ngl/--gpu-layers/
  --n-gpu-layers`, `-c/--ctx-size`, `-t/--threads`, `-fa/--flash-attn [on|off|auto]`,
  `-fit/--fit [on|off]` (default on), `--mmap/--no-mmap`, `-ot/--override-tensor
  <pattern>=<buffer>,...` (split on ',' by parse_tensor_buffer_overrides),
  `-cmoe/--cpu-moe`, `-ncmoe/--n-cpu-moe N` (one override per block i < N).
- common/common.h: the expert-tensor regex LLM_FFN_EXPS_REGEX =
  `\\.ffn_(up|down|gate|gate_up)_(ch|)exps`, per block `blk\\.%d` + that regex.
- tools/llama-bench/llama-bench.cpp (its own parser): `-m`, `-ngl`, `-t`,
  `-fa <on|off|auto>` via is_truthy (which also takes "1", as older builds needed),
  `-ncmoe/--n-cpu-moe`, `-ot` (',' separates test configurations, ';' overrides),
  `-mmp/--mmap <0|1>` (newer builds prefer `-lm none` but still take `-mmp`),
  `-p`, `-n`, `-r`, `-o json`. It has no `-c`, no `--fit` (it fits only with
  `-fitt`) and no `--cpu-moe`, and splits `-m` on ','.
- ggml/src/ggml-cuda/ggml-cuda.cu: getenv("GGML_OP_OFFLOAD_MIN_BATCH"), default 32.
- The fork's `--moe-cache-profile FILE.csv --moe-cache-slots S`: DESIGN.md §7 only.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from engine.errors import CopeInputError
from engine.files import atomic_write_text
from engine.fork_profile import fork_profile_csv, profile_file_name
from engine.memory import MemoryPlan
from engine.model import ModelSpec
from engine.policy import Allocation, Candidate, Execution, Kind, Residency, parse_candidate_id

RUNTIMES = ("stock", "fork")
BINARIES = ("llama-server", "llama-cli", "llama-bench")

RUNS_ON_STOCK = "runs-on-stock"
NEEDS_FORK = "needs-fork"
NOT_EXPRESSIBLE = "not-expressible"

# common/common.h LLM_FFN_EXPS_REGEX: every expert tensor of a block, merged gate_up too.
EXPS_REGEX_TAIL = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
OFFLOAD_ENV = "GGML_OP_OFFLOAD_MIN_BATCH"
FORK_ARCHS = frozenset({"deepseek2", "qwen35moe", "laguna"})
MIN_GPU_LAYERS_FLAG = 99

_SERVER_LIKE = ("llama-server", "llama-cli")


@dataclass(frozen=True)
class Flag:
    """One setting and how each binary spells it; `None`: the binary has no such flag.

    `values` maps a binary to the literal value it takes when the setting's value is
    fixed (e.g. flash attention on is "on" for llama-server, "1" for llama-bench).
    """

    setting: str
    spelling: Mapping[str, str | None]
    source: str
    values: Mapping[str, str] = field(default_factory=dict)


def _all(spelling: str) -> dict[str, str]:
    return {b: spelling for b in BINARIES}


FLAG_TABLE: tuple[Flag, ...] = (
    Flag("model", _all("-m"), "arg.cpp {-m,--model}; llama-bench.cpp -m"),
    Flag("gpu_layers", _all("-ngl"), "arg.cpp {-ngl,--gpu-layers,--n-gpu-layers}; llama-bench.cpp -ngl"),
    Flag("flash_attn", _all("-fa"), "arg.cpp {-fa,--flash-attn} [on|off|auto]; llama-bench.cpp -fa via is_truthy",
         values={"llama-server": "on", "llama-cli": "on", "llama-bench": "1"}),
    Flag("context", {"llama-server": "-c", "llama-cli": "-c", "llama-bench": None},
         "arg.cpp {-c,--ctx-size}; llama-bench has none (its context is -p + -n + -d)"),
    Flag("threads", _all("-t"), "arg.cpp {-t,--threads}; llama-bench.cpp -t"),
    Flag("fit", {"llama-server": "--fit", "llama-cli": "--fit", "llama-bench": None},
         "arg.cpp {-fit,--fit} [on|off], default on; llama-bench fits only with -fitt",
         values={"llama-server": "off", "llama-cli": "off"}),
    Flag("n_cpu_moe", {"llama-server": "--n-cpu-moe", "llama-cli": "--n-cpu-moe", "llama-bench": "-ncmoe"},
         "arg.cpp {-ncmoe,--n-cpu-moe} N; llama-bench.cpp -ncmoe"),
    Flag("fork_n_cpu_moe", {"llama-server": "-ncmoe", "llama-cli": "-ncmoe", "llama-bench": None},
         "DESIGN.md §7: the fork runs with -ncmoe 99"),
    Flag("cpu_moe", {"llama-server": "--cpu-moe", "llama-cli": "--cpu-moe", "llama-bench": None},
         "arg.cpp {-cmoe,--cpu-moe}; llama-bench has none: -ncmoe <blocks> instead"),
    Flag("override_tensor", _all("-ot"), "arg.cpp {-ot,--override-tensor}; llama-bench.cpp -ot"),
    Flag("no_mmap", {"llama-server": "--no-mmap", "llama-cli": "--no-mmap", "llama-bench": "-mmp"},
         "arg.cpp {--mmap,--no-mmap}; llama-bench.cpp {-mmp,--mmap} <0|1>",
         values={"llama-bench": "0"}),
    Flag("moe_cache_profile", {"llama-server": "--moe-cache-profile", "llama-cli": "--moe-cache-profile",
                               "llama-bench": None}, "the fork (DESIGN.md §7)"),
    Flag("moe_cache_slots", {"llama-server": "--moe-cache-slots", "llama-cli": "--moe-cache-slots",
                             "llama-bench": None}, "the fork (DESIGN.md §7)"),
    Flag("n_prompt", {"llama-server": None, "llama-cli": None, "llama-bench": "-p"}, "llama-bench.cpp -p"),
    Flag("n_gen", {"llama-server": None, "llama-cli": None, "llama-bench": "-n"}, "llama-bench.cpp -n"),
    Flag("repetitions", {"llama-server": None, "llama-cli": None, "llama-bench": "-r"}, "llama-bench.cpp -r"),
    Flag("output", {"llama-server": None, "llama-cli": None, "llama-bench": "-o"}, "llama-bench.cpp -o json"),
)
_FLAGS = {f.setting: f for f in FLAG_TABLE}


def flag_args(binary: str, setting: str, value: object | None = None) -> list[str]:
    """The argument(s) that set `setting` for `binary`; [] when the binary lacks it."""
    flag = _FLAGS[setting]
    spelling = flag.spelling.get(binary)
    if spelling is None:
        return []
    if value is None:
        value = flag.values.get(binary)
    return [spelling] if value is None else [spelling, str(value)]


@dataclass(frozen=True)
class ExportPlan:
    """What the exporter needs beyond the model: the memory plan, the popularity that
    fills fixed residency, and the estimated TPOT of every candidate (for "nearest")."""

    memory: MemoryPlan
    popularity: np.ndarray | None = None  # [L, E] routing counts of the profile trace
    tpot_s: tuple[tuple[str, float], ...] = ()  # (candidate id, estimated TPOT)


def plan_from_recommendation(rec) -> ExportPlan:  # type: ignore[no-untyped-def]
    return ExportPlan(
        memory=rec.memory,
        popularity=rec.request.profile.popularity(),
        tpot_s=tuple((e.candidate.id, float(e.tpot_s)) for e in rec.estimates),
    )


def export_for(rec, target, *, runtime: str = "stock", binary: str = "llama-server",  # type: ignore[no-untyped-def]
               model_path: str | None = None, side_dir: str | None = None) -> "Export":
    """The command of `target` (an Estimate or Candidate of the Recommendation `rec`) at
    the recommendation's context and threads."""
    req = rec.request
    return export_candidate(target, req.model, plan_from_recommendation(rec), runtime=runtime, binary=binary,
                            model_path=model_path, context=req.context_tokens, threads=req.threads,
                            side_dir=side_dir)


@dataclass(frozen=True)
class Export:
    candidate_id: str  # what was asked for
    exported_id: str  # what argv runs (the nearest candidate when the asked one cannot)
    label: str  # of the asked candidate: runs-on-stock | needs-fork | not-expressible
    reason: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    side_files: tuple[tuple[str, str], ...] = ()  # (file name, text)
    nearest_id: str | None = None
    candidate_tpot_s: float | None = None
    nearest_tpot_s: float | None = None
    runtime: str = "stock"
    binary: str = "llama-server"

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def side_files_dict(self) -> dict[str, str]:
        return dict(self.side_files)

    def display(self) -> str:
        """One line to paste into a POSIX shell; shlex.split of it gives env + argv back."""
        prefix = [f"{k}={shlex.quote(v)}" for k, v in self.env]
        return " ".join(prefix + [shlex.join(self.argv)])

    def to_dict(self) -> dict:
        return {
            "candidate": self.candidate_id,
            "exported": self.exported_id,
            "label": self.label,
            "reason": self.reason,
            "runtime": self.runtime,
            "binary": self.binary,
            "argv": list(self.argv),
            "env": dict(self.env),
            "command": self.display(),
            "side_files": sorted(name for name, _ in self.side_files),
            "nearest": self.nearest_id,
            "candidate_tpot_s": self.candidate_tpot_s,
            "nearest_tpot_s": self.nearest_tpot_s,
        }


@dataclass(frozen=True)
class _Shape:
    """How a candidate maps onto llama.cpp, before flags are spelled."""

    label: str
    reason: str
    cpu_layers: np.ndarray | None = None  # [L] bool, MoE layers whose experts stay on the CPU
    stage_env: bool = False
    fork_slots: int = 0  # > 0: the fork's fixed residency with this many slots per layer


def layer_set_regex(blocks: Sequence[int]) -> str:
    """One -ot pattern for the expert tensors of `blocks`: no comma, dot after the number."""
    if not blocks:
        raise ValueError("an empty layer set has no override")
    alternation = "|".join(str(b) for b in sorted(set(int(b) for b in blocks)))
    return rf"blk\.({alternation}){EXPS_REGEX_TAIL}"


def _slots_used(candidate: Candidate, memory: MemoryPlan, n_layers: int) -> int:
    total = memory.slots(staging=candidate.copies_misses)
    n_experts = memory.n_routed_experts_per_layer
    if candidate.allocation is Allocation.UNIFORM:
        return min(total // n_layers, n_experts) * n_layers
    return min(total, n_layers * n_experts)


def _shape(candidate: Candidate, model: ModelSpec, memory: MemoryPlan, runtime: str, binary: str) -> _Shape:
    from engine.advise import partition_layers

    n_layers = model.n_moe_layers
    if candidate.kind is not Kind.MATRIX:
        cpu, detail = partition_layers(candidate.kind, n_layers, memory.gpu_layers(), model.moe_blocks)
        return _Shape(RUNS_ON_STOCK, f"{candidate.describe()}: {detail}", cpu)
    used = _slots_used(candidate, memory, n_layers)
    everything = np.ones(n_layers, dtype=bool)
    if used >= model.n_experts_total:
        return _Shape(RUNS_ON_STOCK, "every expert fits in its slots: the same as every expert on the GPU",
                      np.zeros(n_layers, dtype=bool))
    if used == 0:
        if candidate.execution is Execution.STAGE:
            return _Shape(RUNS_ON_STOCK,
                          "no expert slots: staging every routed expert from the CPU at each decode step "
                          f"is stock llama.cpp with {OFFLOAD_ENV}=1 and the experts on the CPU",
                          everything, stage_env=True)
        if candidate.execution in (Execution.SEQUENTIAL, Execution.PARALLEL):
            return _Shape(RUNS_ON_STOCK, "no expert slots: every routed expert is computed on the CPU (--cpu-moe)",
                          everything)
    if (
        candidate.residency is Residency.FIXED
        and candidate.execution is Execution.PARALLEL
        and candidate.allocation is Allocation.UNIFORM
    ):
        slots = used // n_layers
        if model.arch not in FORK_ARCHS:
            return _Shape(NOT_EXPRESSIBLE,
                          f"the fork's --moe-cache-* is wired only for {', '.join(sorted(FORK_ARCHS))}, "
                          f"not for {model.arch}")
        return _Shape(NEEDS_FORK,
                      f"fixed residency of {slots} popular experts per layer with a parallel CPU lane: "
                      "the fork's --moe-cache-profile/--moe-cache-slots", fork_slots=slots)
    why = "stock llama.cpp places whole expert tensors (all experts of a layer), so per-expert residency"
    if candidate.residency is Residency.FIXED and candidate.allocation is Allocation.NONUNIFORM:
        why += " is not expressible there, and the fork keeps the same number of slots in every layer"
    elif candidate.residency is Residency.FIXED:
        why += (" is not expressible there, and the fork runs misses on a parallel CPU lane, "
                f"not {candidate.execution.value}")
    else:
        why += " is not expressible there, and the fork's residency never changes"
    return _Shape(NOT_EXPRESSIBLE, why)


def runs_where(candidate: Candidate, model: ModelSpec, memory: MemoryPlan) -> str:
    """The label of a candidate: runs-on-stock, needs-fork or not-expressible."""
    return _shape(candidate, model, memory, "fork", "llama-server").label


def _runnable(shape: _Shape, runtime: str, binary: str) -> bool:
    if shape.label == RUNS_ON_STOCK:
        return True
    return shape.label == NEEDS_FORK and runtime == "fork" and binary in _SERVER_LIKE


def _argv(
    shape: _Shape,
    model: ModelSpec,
    plan: ExportPlan,
    *,
    binary: str,
    model_path: str,
    context: int,
    threads: int,
    side_dir: str | None,
) -> tuple[list[str], list[tuple[str, str]], list[tuple[str, str]]]:
    argv = [binary]
    argv += flag_args(binary, "model", model_path)
    argv += flag_args(binary, "gpu_layers", max(MIN_GPU_LAYERS_FLAG, model.n_blocks + 1))
    argv += flag_args(binary, "flash_attn")
    argv += flag_args(binary, "context", context)
    argv += flag_args(binary, "threads", threads)
    argv += flag_args(binary, "fit")
    env: list[tuple[str, str]] = []
    side: list[tuple[str, str]] = []
    experts_on_cpu = False
    if shape.fork_slots:
        if plan.popularity is None:
            raise CopeInputError("exporting fixed residency for the fork needs the profile trace's popularity")
        name = profile_file_name(model, shape.fork_slots)
        side.append((name, fork_profile_csv(plan.popularity, shape.fork_slots, model.moe_blocks, model.top_k)))
        path = name if side_dir is None else os.path.join(side_dir, name)
        argv += flag_args(binary, "moe_cache_profile", path)
        argv += flag_args(binary, "moe_cache_slots", shape.fork_slots)
        argv += flag_args(binary, "fork_n_cpu_moe", 99)
        experts_on_cpu = True
    elif shape.cpu_layers is not None and shape.cpu_layers.any():
        experts_on_cpu = True
        cpu = np.asarray(shape.cpu_layers, dtype=bool)
        n_cpu = int(cpu.sum())
        blocks = [model.moe_blocks[i] for i in np.flatnonzero(cpu)]
        if cpu.all():
            argv += flag_args(binary, "cpu_moe") or flag_args(binary, "n_cpu_moe", model.n_blocks)
        elif cpu[:n_cpu].all():
            # --n-cpu-moe counts blocks, dense leading blocks included.
            argv += flag_args(binary, "n_cpu_moe", blocks[-1] + 1)
        else:
            argv += flag_args(binary, "override_tensor", layer_set_regex(blocks) + "=CPU")
    if experts_on_cpu:
        argv += flag_args(binary, "no_mmap")
    if shape.stage_env:
        env.append((OFFLOAD_ENV, "1"))
    return argv, env, side


def _tpots(plan: ExportPlan) -> dict[str, float]:
    return dict(plan.tpot_s)


def nearest_runnable(
    candidate: Candidate, model: ModelSpec, plan: ExportPlan, runtime: str, binary: str
) -> tuple[Candidate, float | None]:
    """The runnable candidate whose estimated TPOT is closest (ties: the faster)."""
    tpots = _tpots(plan)
    target = tpots.get(candidate.id)
    options = []
    for cid, tpot in plan.tpot_s:
        other = parse_candidate_id(cid)
        if other == candidate:
            continue
        if _runnable(_shape(other, model, plan.memory, runtime, binary), runtime, binary):
            options.append((other, tpot))
    if not options:
        fallback = Candidate(Kind.PARTITION_FIRST) if not plan.memory.all_gpu_fits else Candidate(Kind.ALL_GPU)
        return fallback, tpots.get(fallback.id)
    if target is None:
        return min(options, key=lambda o: (o[1], o[0].id))
    return min(options, key=lambda o: (abs(o[1] - target), o[1], o[0].id))


def export_candidate(
    target,  # Estimate | Candidate
    model: ModelSpec,
    plan: ExportPlan,
    *,
    runtime: str = "stock",
    binary: str = "llama-server",
    model_path: str | None = None,
    context: int,
    threads: int,
    side_dir: str | None = None,
) -> Export:
    """The llama.cpp command (argv, env, side files) for a candidate or an Estimate."""
    if runtime not in RUNTIMES:
        raise CopeInputError(f"--runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    if binary not in BINARIES:
        raise CopeInputError(f"--binary must be one of {', '.join(BINARIES)}, got {binary!r}")
    if context <= 0 or threads <= 0:
        raise CopeInputError(f"context and threads must be positive, got {context} and {threads}")
    candidate: Candidate = getattr(target, "candidate", target)
    model_path = model_path or f"{model.id}.gguf"
    if binary == "llama-bench" and "," in model_path:
        raise CopeInputError(f"--model-path {model_path!r}: llama-bench splits -m on ',', rename the file")
    tpots = _tpots(plan)
    own_tpot = float(target.tpot_s) if hasattr(target, "tpot_s") else tpots.get(candidate.id)
    shape = _shape(candidate, model, plan.memory, runtime, binary)
    common = dict(binary=binary, model_path=model_path, context=context, threads=threads, side_dir=side_dir)
    if _runnable(shape, runtime, binary):
        argv, env, side = _argv(shape, model, plan, **common)
        return Export(candidate.id, candidate.id, shape.label, shape.reason, tuple(argv), tuple(env),
                      tuple(side), None, own_tpot, None, runtime, binary)
    nearest, near_tpot = nearest_runnable(candidate, model, plan, runtime, binary)
    near_shape = _shape(nearest, model, plan.memory, runtime, binary)
    argv, env, side = _argv(near_shape, model, plan, **common)
    if shape.label == NEEDS_FORK:
        where = "llama-bench does not parse the fork's flags" if binary == "llama-bench" else "--runtime fork to use it"
        reason = f"{shape.reason}; {where}"
    else:
        reason = shape.reason
    reason += f"; nearest that runs here: {nearest.id} ({_ms(near_tpot)} against {_ms(own_tpot)})"
    return Export(candidate.id, nearest.id, shape.label, reason, tuple(argv), tuple(env), tuple(side),
                  nearest.id, own_tpot, near_tpot, runtime, binary)


def _ms(tpot: float | None) -> str:
    return "no estimate" if tpot is None else f"{tpot * 1e3:.2f} ms/token"


def write_export(export: Export, out: str | os.PathLike) -> list[Path]:
    """Write the command to `out` and the side files beside it, each atomically."""
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CopeInputError(f"cannot create the folder: {exc.strerror or exc}", path=str(out.parent)) from None
    written = []
    for name, text in export.side_files:
        written.append(atomic_write_text(out.parent / name, text))
    written.append(atomic_write_text(out, export.display() + "\n"))
    return written


def expert_regexes(export: Export) -> list[str]:
    """The tensor patterns of the -ot overrides in an export's argv (for tests and checks)."""
    out = []
    argv = list(export.argv)
    for i, arg in enumerate(argv[:-1]):
        if arg == "-ot":
            for override in argv[i + 1].split(","):
                out.append(override.rsplit("=", 1)[0])
    return out


__all__ = [
    "BINARIES", "FLAG_TABLE", "Export", "ExportPlan", "Flag", "NEEDS_FORK", "NOT_EXPRESSIBLE",
    "RUNS_ON_STOCK", "RUNTIMES", "export_candidate", "export_for", "flag_args", "fork_profile_csv", "layer_set_regex",
    "nearest_runnable", "plan_from_recommendation", "runs_where", "write_export", "expert_regexes",
]
