"""The command that runs a candidate on a runtime (DESIGN.md §7, §7b).

The runtime registry (engine/runtimes/) says whether a runtime runs the candidate
exactly, approximately or not at all, and builds its command as a value
(engine/llamacpp/command_line.py: each setting's words and the environment, never a shell
string; `Export.display()` quotes it for copying) and artefacts. Every candidate keeps
its llama.cpp label (DESIGN.md §7):

- runs-on-stock: stock llama.cpp expresses it (layer sets, all on the CPU, all on the
  GPU, staging every routed CPU expert with GGML_OP_OFFLOAD_MIN_BATCH=1);
- needs-fork: fixed per-expert residency with a parallel CPU lane, which only the MoE
  expert-cache fork's `--moe-cache-profile/--moe-cache-slots` express;
- not-expressible in llama.cpp.

A candidate the chosen runtime does not run (or not with the chosen binary) falls back to the nearest candidate, by estimated TPOT,
that it runs exactly and that fits RAM, and says so with both estimates. An approximate
run names what really runs. What the runtime keeps in host memory is checked against
RAM (engine/runtimes/host.py): the copy (`-lm none`, `--no-mmap` in older builds) is
dropped when only the mapped file fits. Every llama.cpp-family command is spelled for the
build found on this machine (`builds`), else for the runtime's shipped flag manifest
(engine/llamacpp/builds.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO, Callable, Mapping

import numpy as np

from engine.core.errors import CopeInputError
from engine.core.files import write_all
from engine.hardware.cpu_compute import cpu_amx
from engine.hardware.host_memory import RamFit
from engine.llamacpp.builds import LlamaBuild
from engine.llamacpp.command_line import CommandLine
from engine.llamacpp.llamacpp_flags import (
    BINARIES,
    EXPS_REGEX_TAIL,
    MIN_GPU_LAYERS_FLAG,
    OFFLOAD_ENV,
    layer_set_regex,
)
from engine.models.model import ModelSpec
from engine.replays.policy import Candidate, Kind, parse_candidate_id
from engine.runtimes import REGISTRY, RUNTIME_NAMES, STOCK_NAME, ExportPlan, LaunchOptions, placement_of, runtime_named
from engine.runtimes.base import Placeholder, SideFile
from engine.runtimes.fork_profile import fork_profile_csv
from engine.runtimes.host import host_choice
from engine.runtimes.llamacpp import FORK_ARCHS, NEEDS_FORK, NOT_EXPRESSIBLE, RUNS_ON_STOCK, llama_shape
from engine.runtimes.sglang_memory import checkpoint_of_hf_model
from engine.traces.popularity import profile_source

RUNTIMES = RUNTIME_NAMES
GGUF_PLACEHOLDER = ("the path of the model's GGUF file: COPE was given none (--model-path FILE, or plan from the "
                    ".gguf with --model FILE.gguf)")


def plan_from_recommendation(rec) -> ExportPlan:  # type: ignore[no-untyped-def]
    req = rec.request
    model, cpu, gpu = req.model, req.platform.cpu, req.platform.gpu
    profile = req.profile
    amx, amx_note = cpu_amx(cpu)
    return ExportPlan(
        memory=rec.memory,
        popularity=profile.popularity(),
        tpot_s=tuple((e.candidate.id, float(e.tpot_s)) for e in rec.estimates),
        ram_bytes=int(cpu.ram_bytes.value) if cpu.ram_bytes.known else None,
        host_non_expert_bytes=model.non_expert_bytes(req.quant) - model.gpu_non_expert_bytes(req.quant),
        synthetic_profile=profile.meta.synthetic,
        profile_source=profile_source(profile),  # a trace, or an imatrix's counts (engine/traces/popularity.py)
        numa_nodes=int(cpu.numa_nodes.value) if cpu.numa_nodes.known else None,
        gpu_vram_bytes=int(gpu.vram_bytes.value) if gpu.vram_bytes.known else None,
        cpu_amx=amx,
        cpu_amx_note=amx_note,
        request=req if gpu.cards else None,
        gpu_backend=gpu.backend,
        kv_cache_type=req.kv_cache_type,
    )


def export_for(rec, target, *, runtime: str = STOCK_NAME, binary: str | None = None,  # type: ignore[no-untyped-def]
               model_path: str | None = None, side_dir: str | None = None, hf_model: str | None = None,
               builds: Mapping[str, LlamaBuild] | None = None) -> "Export":
    """The command of `target` (an Estimate or Candidate of the Recommendation `rec`) at
    the recommendation's context and threads; `builds`: the runtimes' builds found on this
    machine, by registry name (probes/runtimes.py RuntimeScan.builds), each command spelled
    for its runtime's build."""
    req = rec.request
    return export_candidate(target, req.model, plan_from_recommendation(rec), runtime=runtime, binary=binary,
                            model_path=model_path, context=req.context_tokens, threads=req.threads,
                            side_dir=side_dir, hf_model=hf_model, builds=builds)


@dataclass(frozen=True)
class Export:
    candidate_id: str  # what was asked for
    exported_id: str  # what argv runs (the nearest candidate when the asked one cannot)
    label: str  # of the asked candidate, for llama.cpp: runs-on-stock | needs-fork | not-expressible
    reason: str
    command: CommandLine  # what runs: argv and env are its words (engine/llamacpp/command_line.py)
    side_files: tuple[SideFile, ...] = ()  # laid out when read (engine/runtimes/base.py)
    nearest_id: str | None = None
    candidate_tpot_s: float | None = None
    nearest_tpot_s: float | None = None
    runtime: str = STOCK_NAME
    binary: str = "llama-server"
    tensors: tuple[tuple[str, np.ndarray], ...] = field(default=(), compare=False)  # (file name, counts) for torch
    notes: tuple[str, ...] = ()  # caveats: SYNTHETIC routing, the copy dropped, RAM, the spelling
    support: str = "exact"  # how the runtime runs the asked candidate: exact | approximate | no
    ram: RamFit | None = None
    spelled_for: str = ""  # the build whose flags argv uses
    placeholders: tuple[Placeholder, ...] = ()  # words of argv to replace before running, and with what

    @property
    def argv(self) -> tuple[str, ...]:
        return self.command.argv

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        return self.command.env

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def side_files_dict(self) -> dict[str, str]:
        return {f.name: f.text for f in self.side_files}

    @property
    def artefact_names(self) -> list[str]:
        return sorted([f.name for f in self.side_files] + [name for name, _ in self.tensors])

    @property
    def fits_ram(self) -> bool:
        return self.ram is None or self.ram.fits

    def display(self) -> str:
        """One line to paste into a POSIX shell; shlex.split of it gives env + argv back."""
        return self.command.display()

    def to_dict(self) -> dict:
        return {
            "candidate": self.candidate_id,
            "exported": self.exported_id,
            "label": self.label,
            "reason": self.reason,
            "runtime": self.runtime,
            "support": self.support,
            "binary": self.binary,
            "argv": list(self.argv),
            "env": dict(self.env),
            "command": self.display(),
            "side_files": self.artefact_names,
            "notes": list(self.notes),
            "ram": None if self.ram is None else self.ram.to_dict(),
            "nearest": self.nearest_id,
            "candidate_tpot_s": self.candidate_tpot_s,
            "nearest_tpot_s": self.nearest_tpot_s,
            "spelled_for": self.spelled_for,
            "placeholders": [p.to_dict() for p in self.placeholders],
        }


def runs_where(candidate: Candidate, model: ModelSpec, memory) -> str:  # type: ignore[no-untyped-def]
    """The llama.cpp label of a candidate: runs-on-stock, needs-fork or not-expressible."""
    return llama_shape(candidate, placement_of(candidate, model, memory), model).label


def run_refusal(runtime, candidate: Candidate, model: ModelSpec, plan: ExportPlan, binary: str) -> str | None:  # type: ignore[no-untyped-def]
    """Why `runtime`'s `binary` does not run the candidate's command with this plan (its
    backend, card count, the program), as the runtime registry says; None: it does. RAM is
    not asked here (a command that does not fit says so in its notes)."""
    placement = placement_of(candidate, model, plan.memory, plan.popularity)
    support = runtime.support(candidate, placement, model, plan)
    if not support.runs:
        return support.note
    return runtime.binary_problem(placement, binary)


def _runnable_here(runtime, candidate: Candidate, model: ModelSpec, plan: ExportPlan, binary: str) -> bool:  # type: ignore[no-untyped-def]
    placement = placement_of(candidate, model, plan.memory, plan.popularity)
    support = runtime.support(candidate, placement, model, plan)
    # An approximation that names no other candidate runs this one's placement, cut to what
    # the runtime holds (SGLang's GPU experts): the nearest may be it; one that names a twin
    # is the twin's, which is an option of its own.
    if not support.runs or (not support.exact and support.runs_as is not None):
        return False
    if runtime.binary_problem(placement, binary) is not None:
        return False
    return host_choice(runtime, candidate, placement, model, plan).fits


class NothingRuns(CopeInputError):
    """No candidate COPE ranked runs on the runtime's program here; `why`: the reason its
    fallback (the layer partition) does not, when it was asked."""

    def __init__(self, message: str, why: str):
        super().__init__(message)
        self.why = why


def nearest_runnable(candidate: Candidate, model: ModelSpec, plan: ExportPlan, runtime: str,
                     binary: str) -> tuple[Candidate, float | None]:
    """The candidate the runtime runs (exactly, or cut to what it holds) and that fits RAM
    whose estimated TPOT is closest (ties: the faster). With none, the llama.cpp family's
    layer partition (or every expert on the GPU), when the registry says the runtime and
    program run it here, even where RAM is short (its notes say so); else a one-line
    refusal with the reason."""
    rt = runtime_named(runtime)
    tpots = dict(plan.tpot_s)
    target = tpots.get(candidate.id)
    options = []
    for cid, tpot in plan.tpot_s:
        other = parse_candidate_id(cid)
        if other != candidate and _runnable_here(rt, other, model, plan, binary):
            options.append((other, tpot))
    if not options:
        if rt.info.can_map:  # the llama.cpp family always has a layer partition
            fallback = Candidate(Kind.PARTITION_FIRST) if not plan.memory.all_gpu_fits else Candidate(Kind.ALL_GPU)
            why = run_refusal(rt, fallback, model, plan, binary)
            if why is None:
                return fallback, tpots.get(fallback.id)
            raise NothingRuns(f"nothing COPE ranked runs on {rt.info.name} {binary} here: {why}", why)
        raise NothingRuns(f"nothing COPE ranked runs on {rt.info.name} here", "")
    if target is None:
        return min(options, key=lambda o: (o[1], o[0].id))
    return min(options, key=lambda o: (abs(o[1] - target), o[1], o[0].id))


def runs_elsewhere(candidate: Candidate, model: ModelSpec, plan: ExportPlan, runtime: str,
                   binary: str | None) -> str:
    """The nearest command that does run, on another runtime of the registry (stock first),
    as the `cope export` flags that print it; "" when none does."""
    for other in REGISTRY:
        if other.info.name == runtime:
            continue
        program = binary if binary in other.info.binaries else other.info.binaries[0]
        if run_refusal(other, candidate, model, plan, program) is None:  # it runs the candidate itself
            near, tpot = candidate, dict(plan.tpot_s).get(candidate.id)
        else:
            try:
                near, tpot = nearest_runnable(candidate, model, plan, other.info.name, program)
            except CopeInputError:
                continue
        flags = f"--candidate {near.id} --runtime {other.info.name}"
        if program != other.info.binaries[0]:
            flags += f" --binary {program}"
        return f"{flags} ({_ms(tpot)})"
    return ""


def export_candidate(
    target,  # Estimate | Candidate
    model: ModelSpec,
    plan: ExportPlan,
    *,
    runtime: str = STOCK_NAME,
    binary: str | None = None,
    model_path: str | None = None,
    context: int,
    threads: int,
    side_dir: str | None = None,
    hf_model: str | None = None,
    builds: Mapping[str, LlamaBuild] | None = None,
) -> Export:
    """The command (argv, env, artefacts) of a candidate or an Estimate on `runtime`,
    spelled for that runtime's build in `builds` (else for its shipped flag manifest)."""
    rt = runtime_named(runtime)
    binary = binary or rt.info.binaries[0]
    if rt.info.can_map and binary not in BINARIES:
        raise CopeInputError(f"--binary must be one of {', '.join(BINARIES)}, got {binary!r}")
    if context <= 0 or threads <= 0:
        raise CopeInputError(f"context and threads must be positive, got {context} and {threads}")
    candidate: Candidate = getattr(target, "candidate", target)
    build = (builds or {}).get(rt.info.name)
    # The file named for the command, else the GGUF the model was read from, else a placeholder.
    gguf = model_path or model.gguf_path or f"{model.id}.gguf"
    unknown = () if model_path or model.gguf_path else (Placeholder(gguf, GGUF_PLACEHOLDER),)
    unknown += _shadowed(rt, binary, builds)
    opts = LaunchOptions(binary, gguf, context, threads, side_dir, hf_model, build)
    tpots = dict(plan.tpot_s)
    own_tpot = float(target.tpot_s) if hasattr(target, "tpot_s") else tpots.get(candidate.id)
    checkpoint = checkpoint_of_hf_model(hf_model)  # a local --hf-model's config.json: what SGLang loads
    if checkpoint is not None:
        plan = replace(plan, checkpoint=checkpoint)
    placement = placement_of(candidate, model, plan.memory, plan.popularity)
    label = llama_shape(candidate, placement, model).label
    support = rt.support(candidate, placement, model, plan)
    problem = rt.binary_problem(placement, binary) if support.runs else None
    common = dict(label=label, own_tpot=own_tpot, runtime=rt.info.name, binary=binary, support=support.level,
                  unknown=unknown)
    if support.runs and problem is None:
        run = support.runs_as or candidate
        return _build(rt, candidate, run, model, plan, opts, reason=support.note, **common)
    reason = support.note + (f"; {problem}" if problem else _elsewhere(candidate, placement, model, plan, rt))
    try:
        nearest, near_tpot = nearest_runnable(candidate, model, plan, rt.info.name, binary)
    except CopeInputError as exc:
        # One line: why nothing runs, and the nearest command that does (another runtime's).
        elsewhere = runs_elsewhere(candidate, model, plan, rt.info.name, binary)
        own = problem or support.note
        others = getattr(exc, "why", "")
        who = f"{rt.info.name} {binary}" if rt.info.can_map else rt.info.name
        said = f"nothing COPE ranked runs on {who} here ({candidate.id}: {own}" + (
            f"; its layer partition: {others})" if others and others != own else ")")
        raise CopeInputError(said + (f"; nearest that runs: cope export {elsewhere}" if elsewhere else "")) from None
    reason += f"; nearest that runs here: {nearest.id} ({_ms(near_tpot)} against {_ms(own_tpot)})"
    return _build(rt, candidate, nearest, model, plan, opts, reason=reason, nearest_tpot=near_tpot, nearest=True,
                  **common)


def _shadowed(rt, binary: str, builds: Mapping[str, LlamaBuild] | None) -> tuple[Placeholder, ...]:  # type: ignore[no-untyped-def]
    """The bare program name as a placeholder when no build of `rt` was found here but
    another runtime's `binary` was: pasted, the name would run that one."""
    found = builds or {}
    if not rt.info.can_map or rt.info.name in found:
        return ()
    for name, build in found.items():
        where = build.path_of(binary)
        if where is not None:
            title = runtime_named(name).info.title
            return (Placeholder(binary, f"the path of {rt.info.title}'s {binary}: the {binary} found here "
                                        f"({where}) is {title}'s"),)
    return ()


def _elsewhere(candidate: Candidate, placement, model: ModelSpec, plan: ExportPlan, rt) -> str:  # type: ignore[no-untyped-def]
    for other in REGISTRY:
        if other is not rt and other.support(candidate, placement, model, plan).exact:
            return f"; --runtime {other.info.name} to use it"
    return ""


def _build(rt, candidate: Candidate, run: Candidate, model: ModelSpec, plan: ExportPlan,  # type: ignore[no-untyped-def]
           opts: LaunchOptions, *, label: str, reason: str, own_tpot: float | None, runtime: str, binary: str,
           support: str, unknown: tuple[Placeholder, ...] = (), nearest_tpot: float | None = None,
           nearest: bool = False) -> Export:
    placement = placement_of(run, model, plan.memory, plan.popularity)
    choice = host_choice(rt, run, placement, model, plan)
    launch = rt.launch(run, placement, model, plan, opts, mapped=choice.mapped)
    notes = launch.notes + ((choice.note,) if choice.note else ())
    nearest_id = run.id if nearest else None
    # a placeholder the command does not print (SGLang's converted folder in place of the GGUF) is not said
    words = set(launch.command.argv)
    placeholders = tuple(dict.fromkeys(p for p in (*unknown, *launch.placeholders) if p.word in words))
    return Export(candidate.id, run.id, label, reason, launch.command, launch.side_files, nearest_id,
                  own_tpot, nearest_tpot, runtime, binary, launch.tensors, notes, support, choice.fit,
                  launch.spelled_for, placeholders)


def _ms(tpot: float | None) -> str:
    return "no estimate" if tpot is None else f"{tpot * 1e3:.2f} ms/token"


def command_file_text(export: Export) -> str:
    """What `--out` holds: a POSIX shell script, the caveats as comments, then the command."""
    return "#!/bin/sh\n" + "".join(f"# {note}\n" for note in export.notes) + export.display() + "\n"


def write_export(export: Export, out: str | os.PathLike,
                 write_tensor: Callable[[BinaryIO, np.ndarray], None] | None = None) -> list[Path]:
    """Write the command to `out` (a script: `./run.sh` runs it) and the artefacts beside it,
    all or none (engine.core.files.write_all): every target is checked first (a link or a
    special file there is refused), each is written to a temp file beside it and renamed
    only when all are written, so a failed write (a full disk) leaves no partial artefact
    and the old files intact. Routing counts go through `write_tensor(handle, counts)`
    (torch.save lives outside engine/)."""
    out = Path(out)
    if export.tensors and write_tensor is None:
        raise ValueError("this export has routing-count artefacts: pass write_tensor")
    made = not out.parent.exists()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CopeInputError(f"cannot create the folder: {exc.strerror or exc}", path=str(out.parent)) from None
    files: list = [(out.parent / f.name, lambda h, f=f: h.write(f.text), False) for f in export.side_files]
    files += [(out.parent / name, lambda h, c=counts: write_tensor(h, c), True) for name, counts in export.tensors]
    # as bytes: a path the OS gave as bytes that are not UTF-8 (surrogate-escaped) is written back as those bytes
    files.append((out, lambda h: h.write(command_file_text(export).encode("utf-8", "surrogateescape")), True))
    try:
        written = write_all(files)
    except BaseException:
        if made:  # the folder this call made goes too, when nothing went into it
            try:
                out.parent.rmdir()
            except OSError:
                pass
        raise
    script = written[-1]
    mode = script.stat().st_mode
    script.chmod(mode | (mode & 0o444) >> 2)  # executable by whoever may read it
    return written


def write_artefacts(export: Export, folder: str | os.PathLike,
                    write_tensor: Callable[[BinaryIO, np.ndarray], None] | None = None) -> list[Path]:
    """The export's artefacts (the fork's profile, kt-kernel's counts) written into `folder`,
    where its command names them when it was made with that side_dir: all or none, each
    atomically (engine.core.files.write_all), the folder made when missing. [] when the
    command reads no file."""
    if not export.side_files and not export.tensors:
        return []
    if export.tensors and write_tensor is None:
        raise ValueError("this export has routing-count artefacts: pass write_tensor")
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CopeInputError(f"cannot create the folder: {exc.strerror or exc}", path=str(folder)) from None
    files: list = [(folder / f.name, lambda h, f=f: h.write(f.text), False) for f in export.side_files]
    files += [(folder / name, lambda h, c=counts: write_tensor(h, c), True) for name, counts in export.tensors]
    return write_all(files)


def expert_regexes(export: Export) -> list[str]:
    """The tensor patterns of the -ot overrides of an export's command (for tests and checks)."""
    return [override.rsplit("=", 1)[0] for arg in export.command.args if arg.key == "override_tensor"
            for override in arg.words[-1].split(",")]


__all__ = [
    "BINARIES", "EXPS_REGEX_TAIL", "FORK_ARCHS", "MIN_GPU_LAYERS_FLAG", "OFFLOAD_ENV", "Export",
    "ExportPlan", "NEEDS_FORK", "NOT_EXPRESSIBLE", "RUNS_ON_STOCK", "RUNTIMES",
    "command_file_text", "export_candidate", "export_for", "expert_regexes", "fork_profile_csv",
    "layer_set_regex", "nearest_runnable", "plan_from_recommendation", "run_refusal", "runs_elsewhere",
    "runs_where", "write_artefacts", "write_export",
]
