"""The llama.cpp family: stock llama.cpp, ik_llama.cpp and the MoE expert-cache fork.

All three place whole expert tensors (`blk.N.ffn_*_exps` holds every expert of a
layer), so per-expert residency is out of reach except through the fork's cache; their
CPU experts run after the layer's GPU work (llama.cpp's graph splits), the fork's at the
same time as the GPU's cached experts (its README: "the GPU hot chain executes
concurrently with the CPU cold chain").

ik_llama.cpp (ikawrakow/ik_llama.cpp, common/common.cpp and src/llama-load-tensors.cpp
as read): `-ngl`, `-ot` (split on ',', first '=' separates the buffer), `-fa on`,
`-c`, `-t`, `--no-mmap` and `-cmoe/--cpu-moe` as llama.cpp; `--fit` is a switch that
turns automatic fitting on (off by default), so `--fit off` would be a stray argument;
`-ncmoe/--n-cpu-moe N` there keeps the experts of the LAST N MoE layers on the CPU with
one GPU (the loader walks the layers from the end), unlike llama.cpp's first N blocks,
so COPE spells every partial layer set as `-ot`. Its CUDA backend decides offloading
with its own `-cuda` parameters, not GGML_OP_OFFLOAD_MIN_BATCH: staging every routed CPU
expert at decode is `-cuda offload-batch-size=0` (IK_STAGING). Its other MoE options
(`-ser` smart expert reduction changes routing: out of scope; `-rtr` run-time repack,
`-fmoe` fused up/gate, on by default) do not change placement. Its llama-bench
(examples/llama-bench/llama-bench.cpp at 8337e4c) has its own parser: `-mmp 0` for a copy,
`-fa 1`, the same `-cuda` string, `-ot` split on ',' like the server's (BENCH_OT_JOIN), and
no `-dev`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from engine.core.errors import CopeInputError
from engine.hardware.gpu_set import cards_of
from engine.llamacpp.builds import LlamaBuild, shipped_build
from engine.llamacpp.command_line import Arg, CommandLine, spell, spelled
from engine.llamacpp.device_split import plan_split
from engine.llamacpp.llamacpp_flags import (
    BINARIES,
    MIN_GPU_LAYERS_FLAG,
    OFFLOAD_ENV,
    SERVER_LIKE,
    has_setting,
    layer_set_regex,
    older_spellings,
)
from engine.models.model import ModelSpec
from engine.replays.policy import Allocation, Candidate, Execution, Kind, Residency
from engine.runtimes.base import APPROXIMATE, EXACT, NOT_RUN, Support  # the support levels
from engine.runtimes.base import ExportPlan, HostUse, Launch, LaunchOptions, Runtime, SideFile
from engine.runtimes.fork_profile import fork_profile_file
from engine.runtimes.placement import Layout, Placement

FORK_ARCHS = frozenset({"deepseek2", "qwen35moe", "laguna"})
# ik_llama.cpp at 8337e4c, ggml/src/ggml-cuda.cu ggml_backend_cuda_offload_op: a MoE matmul whose
# weights are in host memory goes to the GPU when batch >= N and batch x active >= N x experts,
# N the -cuda offload-batch-size (default 32), so at decode's batch of 1 only N = 0 stages; with
# only_active_exps (common/common.h, on by default) only the routed experts are copied.
IK_STAGING = ("every routed expert copied from the CPU at each decode step: ik_llama.cpp with "
              "-cuda offload-batch-size=0 and the experts on the CPU (read in its source at 8337e4c, "
              "not run here)")
# The fork's cache is on these, not on its default branch fable5/prefetch-experts; the
# commit is the one its flag manifest was read at (assets/runtime_flags/fork.json).
FORK_HOME = "github.com/thecodacus/llama.cpp"
FORK_BRANCH = "fable5/moe-cache-readme"
FORK_COMMIT = "53a8e41318255a460d9e42b699fd8f2c333c6560"
CACHE_PROFILE_ENV = "GGML_MOE_CACHE_PROFILE"
CACHE_SLOTS_ENV = "GGML_MOE_CACHE_SLOTS"
# src/llama-model.cpp create_tensor_gate_up_exps leaves ffn_gate_exps/ffn_up_exps unset for
# a merged tensor, and init_moe_expert_cache then finds no layer to cache (at FORK_COMMIT).
MERGED_GATE_UP = ("this GGUF stores gate and up as one tensor (ffn_gate_up_exps), and the fork's cache "
                  "stays off for it (it logs \"no CPU-resident MoE layers\")")

# How llama-bench splits one -ot value. Stock (tools/llama-bench/llama-bench.cpp at 0c1e570): ','
# separates test configurations and ';' the overrides of one. ik_llama.cpp
# (examples/llama-bench/llama-bench.cpp at 8337e4c, parse_buft_overrides): every -ot is split
# on ',' into overrides of the one configuration, as its server's (common/common.cpp), and
# a ';' stays inside a pattern ("Invalid tensor buffer type override").
BENCH_OT_JOIN = {"llama.cpp": ";", "fork": ";", "ik_llama.cpp": ","}

RUNS_ON_STOCK = "runs-on-stock"
NEEDS_FORK = "needs-fork"
NOT_EXPRESSIBLE = "not-expressible"
# What a label means, in the words export headers and the app show (the labels stay the JSON's values).
LABEL_TEXT = {RUNS_ON_STOCK: "stock llama.cpp expresses it", NEEDS_FORK: "needs the llama.cpp MoE expert-cache fork",
              NOT_EXPRESSIBLE: "no llama.cpp expresses it"}


def label_text(label: str) -> str:
    """A llama.cpp label in words ("not-expressible" -> "no llama.cpp expresses it")."""
    return LABEL_TEXT.get(label, label)


@dataclass(frozen=True)
class LlamaShape:
    """How a candidate maps onto llama.cpp (DESIGN.md §7 labels), whatever the runtime."""

    label: str  # RUNS_ON_STOCK | NEEDS_FORK | NOT_EXPRESSIBLE
    reason: str
    fork_slots: int = 0  # NEEDS_FORK: slots per layer


def multi_card_blocker(stock: bool, placement: Placement) -> str | None:
    """Why a runtime cannot run `placement` over two or more cards as COPE spells it (None: it can)."""
    if not stock:
        return ("two or more cards are exported for stock llama.cpp only (its -ts and per-card -ot buffers, "
                "read at 0c1e570)")
    if placement.layout is not Layout.LAYERS:
        return "over two or more cards COPE exports whole layers a card (no staged copies, no expert cache)"
    return None


def fork_blocker(placement: Placement, model: ModelSpec) -> str | None:
    """Why the fork cannot hold this per-expert placement at all, or None."""
    if model.arch not in FORK_ARCHS:
        return f"the fork's --moe-cache-* is wired only for {', '.join(sorted(FORK_ARCHS))}, not for {model.arch}"
    if placement.slots_total < model.n_moe_layers:  # --moe-cache-slots 0 turns the cache off (common/arg.cpp)
        return (f"{placement.slots_total} expert slots for {model.n_moe_layers} MoE layers: the fork keeps the same "
                "number in every layer, and 0 turns its cache off")
    if model.merged_gate_up:
        return MERGED_GATE_UP
    return None


def llama_shape(candidate: Candidate, placement: Placement, model: ModelSpec) -> LlamaShape:
    if placement.layout is Layout.LAYERS:
        return LlamaShape(RUNS_ON_STOCK, placement.detail)
    if placement.layout is Layout.STAGED:
        return LlamaShape(RUNS_ON_STOCK, "no expert slots: staging every routed expert from the CPU at each "
                          f"decode step is stock llama.cpp with {OFFLOAD_ENV}=1 and the experts on the CPU")
    n_layers = model.n_moe_layers
    if (candidate.residency is Residency.FIXED and candidate.execution is Execution.PARALLEL
            and candidate.allocation is Allocation.UNIFORM):
        slots = placement.slots_total // n_layers
        blocker = fork_blocker(placement, model)
        if blocker:
            return LlamaShape(NOT_EXPRESSIBLE, blocker)
        spare = placement.slots_total - slots * n_layers  # uniform's remainder: the fork has one count
        unused = f" ({spare} slots of COPE's uniform remainder unused)" if spare else ""
        return LlamaShape(NEEDS_FORK, f"fixed residency of {slots} popular experts per layer with a parallel "
                          f"CPU lane: the fork's --moe-cache-profile/--moe-cache-slots{unused}", slots)
    why = "stock llama.cpp places whole expert tensors (all experts of a layer), so per-expert residency"
    if candidate.residency is Residency.FIXED and candidate.allocation is Allocation.NONUNIFORM:
        why += " is not expressible there, and the fork keeps the same number of slots in every layer"
    elif candidate.residency is Residency.FIXED:
        why += (" is not expressible there, and the fork runs misses on a parallel CPU lane, "
                f"not {candidate.execution.value}")
    else:
        why += " is not expressible there, and the fork's residency never changes"
    return LlamaShape(NOT_EXPRESSIBLE, why)


class LlamaFamily:
    """One llama.cpp-family runtime; the knobs say where it differs from stock."""

    def __init__(self, info: Runtime, *, fit_off: bool, first_n_flag: bool, stage_env: bool, moe_cache: bool,
                 stage_flag: bool = False, bench_overrides_join: str = ";"):
        self.info = info
        self.fit_off = fit_off  # spell `--fit off` (stock's auto-fit is on by default)
        self.first_n_flag = first_n_flag  # `--n-cpu-moe N` keeps the first N blocks (stock); else -ot
        self.stage_env = stage_env  # reads GGML_OP_OFFLOAD_MIN_BATCH
        self.stage_flag = stage_flag  # stages with -cuda offload-batch-size=0 (ik_llama.cpp)
        self.moe_cache = moe_cache  # the fork's --moe-cache-*
        # What separates two overrides inside one llama-bench -ot (BENCH_OT_JOIN).
        self.bench_overrides_join = bench_overrides_join

    # --- what it runs ------------------------------------------------------------------
    def support(self, candidate: Candidate, placement: Placement, model: ModelSpec, plan: ExportPlan) -> Support:
        shape = llama_shape(candidate, placement, model)
        name = self.info.name
        if plan.request is not None:  # two or more cards (engine/llamacpp/device_split.py)
            why = multi_card_blocker(self is STOCK, placement)
            if why:
                return Support(name, NOT_RUN, why)
        if plan.gpu_backend != "CUDA" and self is not STOCK:
            return Support(name, NOT_RUN, f"{self.info.title} is exported for CUDA only; llama.cpp's "
                           f"{plan.gpu_backend} backend is stock llama.cpp's")
        if placement.layout is Layout.STAGED and self.stage_flag:
            return Support(name, EXACT, IK_STAGING)
        if placement.layout is Layout.STAGED and not self.stage_env:
            return Support(name, NOT_RUN, f"{self.info.title} does not read {OFFLOAD_ENV} (its CUDA backend "
                           "decides offloading with its own -cuda parameters), so staging is not expressible")
        if shape.label == RUNS_ON_STOCK:
            return Support(name, EXACT, shape.reason)
        if not self.moe_cache:
            return Support(name, NOT_RUN, shape.reason)
        return self._fork_support(candidate, shape, placement, model)

    def _fork_support(self, candidate: Candidate, shape: LlamaShape, placement: Placement,
                      model: ModelSpec) -> Support:
        name = self.info.name
        if shape.label == NEEDS_FORK:
            return Support(name, EXACT, shape.reason)
        blocker = fork_blocker(placement, model) if placement.layout is Layout.EXPERTS else None
        if blocker:
            return Support(name, NOT_RUN, blocker)
        if candidate.residency is not Residency.FIXED:
            return Support(name, NOT_RUN, "the fork's cached experts never change while decoding")
        if candidate.execution not in (Execution.SEQUENTIAL, Execution.PARALLEL):
            return Support(name, NOT_RUN, "the fork computes the experts it does not cache on the CPU; "
                           f"it never copies them to the GPU ({candidate.execution.value})")
        lane = self.info.cpu_experts  # the fork's CPU lane runs beside the cached experts
        as_run = Candidate(Kind.MATRIX, Residency.FIXED, lane, Allocation.UNIFORM)
        why = []
        if candidate.allocation is Allocation.NONUNIFORM:
            why.append("keeps the same number of slots in every layer")
        if candidate.execution is not lane:
            why.append("computes the CPU's experts at the same time as the GPU's")
        return Support(name, APPROXIMATE, f"the fork {' and '.join(why)}: it runs {as_run.id}", as_run)

    def binary_problem(self, placement: Placement, binary: str) -> str | None:
        """Why `binary` cannot run this placement, or None."""
        if binary not in self.info.binaries:
            raise CopeInputError(f"--binary must be one of {', '.join(self.info.binaries)} for "
                                 f"{self.info.name}, got {binary!r}")
        return None  # the fork's llama-bench takes its cache from the environment (_moe_cache_args)

    # --- host memory ---------------------------------------------------------------------
    def host_use(self, candidate: Candidate, placement: Placement, model: ModelSpec, plan: ExportPlan,
                 *, mapped: bool) -> HostUse:
        expert = plan.memory.expert_bytes
        per_layer = plan.memory.n_routed_experts_per_layer
        if placement.layout is Layout.EXPERTS:
            # -ncmoe 99: every expert stays on the CPU; the cache holds copies in VRAM.
            n_cpu, what = model.n_moe_layers, "every layer's experts (the cache copies some to VRAM)"
        else:
            n_cpu = int(placement.cpu_layers.sum())  # type: ignore[union-attr]
            what = f"{n_cpu} layers' experts"
        extra = plan.host_non_expert_bytes
        if extra:
            what += " and the token embedding"
        return HostUse(n_cpu * per_layer * expert + extra, mapped, what)

    # --- the command ---------------------------------------------------------------------
    def launch(self, candidate: Candidate, placement: Placement, model: ModelSpec, plan: ExportPlan,
               opts: LaunchOptions, *, mapped: bool) -> Launch:
        binary = opts.binary
        if binary == "llama-bench" and "," in opts.model_path:
            raise CopeInputError(f"--model-path {opts.model_path!r}: llama-bench splits -m on ',', rename the file")
        build, unread = self._build_for(binary, opts.build)
        base = [("model", opts.model_path), ("gpu_layers", max(MIN_GPU_LAYERS_FLAG, model.n_blocks + 1)),
                ("flash_attn", None), ("context", opts.context), ("threads", opts.threads)]
        if plan.kv_cache_type:  # the KV cache type the plan placed the layers with
            base += [("cache_type_k", plan.kv_cache_type), ("cache_type_v", plan.kv_cache_type)]
        if self.fit_off:
            base.append(("fit", None))
        used = [setting for setting, _ in base]
        args = list(spell(binary, base, build))
        env: list[tuple[str, str]] = []
        side: list[SideFile] = []
        notes: list[str] = []
        if placement.layout is Layout.EXPERTS:
            args += self._moe_cache_args(placement, model, plan, opts, env, side, notes)
        elif placement.cpu_layers.any():  # type: ignore[union-attr]
            args += self._layer_args(placement.cpu_layers, model, binary, build)  # type: ignore[arg-type]
        if plan.request is not None and placement.cpu_layers is not None:
            args = self._card_args(args, plan, placement.cpu_layers, binary, build, notes)
        elif plan.gpu_backend != "CUDA" and not placement.all_on_cpu:
            # a build with several backends sees one card once a backend: name the plan's
            # (src/llama.cpp: -dev picks the devices; ggml-vulkan.cpp, ggml-cuda.cu name them)
            args += self._device_args(binary, plan.gpu_backend, build)
            notes.append(f"-dev {plan.gpu_backend}0: llama.cpp's {plan.gpu_backend} backend (buffer names as "
                         "ggml registers them at 0c1e570)")
        experts_on_cpu = placement.layout is Layout.EXPERTS or bool(placement.cpu_layers.any())  # type: ignore[union-attr]
        if experts_on_cpu and not mapped:
            args += spelled(binary, "no_mmap", None, build)
            used.append("no_mmap")
        if placement.layout is Layout.STAGED and self.stage_flag:
            args += spelled(binary, "cuda_offload_batch", None, build)
        elif placement.layout is Layout.STAGED:
            env.append((OFFLOAD_ENV, "1"))
        # the program of the build found here by its path: the bare name may run another runtime's
        command = CommandLine(build.path_of(binary) or binary, tuple(args), tuple(env))
        # every setting the command writes, in order: the version notes cover each one
        used = list(dict.fromkeys([*used, *(arg.key for arg in command.args)]))
        notes += self._spelling_notes(binary, build, command.argv, used, unread)
        return Launch(command, tuple(side), (), tuple(notes), build.origin)

    def _build_for(self, binary: str, found: LlamaBuild | None) -> tuple[LlamaBuild, LlamaBuild | None]:
        """The build `binary` is spelled for: the one found here when its --help was read,
        else the runtime's manifest (a build found with llama-server alone says nothing of its
        llama-bench); and the found build whose `binary` was not read, for the note."""
        if found is not None and found.program(binary) is not None:
            return found, None
        return shipped_build(self.info.name), found

    def _device_args(self, binary: str, backend: str, build: LlamaBuild) -> tuple[Arg, ...]:
        """-dev naming the plan's backend's first card; a program without -dev (ik_llama.cpp's
        llama-bench at 8337e4c parses none) is refused rather than left to run on whatever
        backend it finds first."""
        program = build.program(binary)
        if program is not None and not program.takes("-dev"):
            raise CopeInputError(f"{self.info.title}'s {binary} ({build.origin}) has no -dev to choose llama.cpp's "
                                 f"{backend} backend")
        return spelled(binary, "device", f"{backend}0", build)

    def _spelling_notes(self, binary: str, build: LlamaBuild, argv: tuple[str, ...],
                        used: list[str], unread: LlamaBuild | None = None) -> list[str]:
        """What a person with another build needs to know: which build the command is
        spelled for when none was read (or not this program of it), and the options the
        build does not list."""
        notes = []
        if not build.detected:
            # llama.cpp's own history; the forks are pinned at the commit their manifest names.
            older = older_spellings(binary, used, build) if self is STOCK else []
            found = (f"no {binary} was found with the build of {self.info.title} read ({unread.origin})"
                     if unread is not None else f"no build of {self.info.title} was read (PATH or --llama-bin DIR)")
            notes.append(f"spelled for {build.origin}: {found}" + "".join(f"; {o}" for o in older))
        rejected = build.rejected(binary, argv)
        if rejected:
            notes.append(f"{binary} of {build.origin} does not list {', '.join(dict.fromkeys(rejected))} in its "
                         "--help: it may refuse this command")
        return notes

    def _layer_args(self, cpu: np.ndarray, model: ModelSpec, binary: str, build: LlamaBuild) -> tuple[Arg, ...]:
        cpu = np.asarray(cpu, dtype=bool)
        n_cpu = int(cpu.sum())
        blocks = [model.moe_blocks[i] for i in np.flatnonzero(cpu)]
        # A build without --n-cpu-moe (an older one) gets the same placement as -ot patterns.
        takes_first_n = self.first_n_flag and has_setting(binary, "n_cpu_moe", build)
        if cpu.all() and has_setting(binary, "cpu_moe", build):
            return spelled(binary, "cpu_moe", None, build)
        if cpu.all() and takes_first_n:
            return spelled(binary, "n_cpu_moe", model.n_blocks, build)
        if takes_first_n and cpu[:n_cpu].all():
            # --n-cpu-moe counts blocks, dense leading blocks included.
            return spelled(binary, "n_cpu_moe", blocks[-1] + 1, build)
        return spelled(binary, "override_tensor", layer_set_regex(blocks) + "=CPU", build)

    def _card_args(self, args: list[Arg], plan: ExportPlan, cpu_layers: np.ndarray, binary: str,
                   build: LlamaBuild, notes: list[str]) -> list[Arg]:
        """`args` with -ts (each card's blocks) and an -ot a card for the experts it holds.
        In llama-bench the overrides join the command's one -ot as the runtime's parser
        splits them (BENCH_OT_JOIN); llama-server and llama-cli take one -ot each."""
        split = plan_split(plan.request, cpu_layers)  # type: ignore[arg-type]
        bench = binary == "llama-bench"
        args = list(args) + list(spelled(binary, "tensor_split",
                                         ("/" if bench else ",").join(str(c) for c in split.layer_counts), build))
        pinned = [layer_set_regex(list(blocks)) + f"={name}" for name, blocks in zip(split.names, split.expert_blocks)
                  if blocks]
        at = next((i for i, arg in enumerate(args) if arg.key == "override_tensor"), None)
        if bench and pinned and at is not None:
            option, value = args[at].words
            args[at] = Arg(args[at].key, (option, self.bench_overrides_join.join([value, *pinned])))
        elif bench and pinned:
            args += spelled(binary, "override_tensor", self.bench_overrides_join.join(pinned), build)
        else:
            for override in pinned:
                args += spelled(binary, "override_tensor", override, build)
        cards = cards_of(plan.request.platform.gpu)  # type: ignore[union-attr]
        held = "; ".join(f"{name} ({card.name}) {n} blocks, {used / 2**30:.1f} GiB of "
                         f"{int(card.vram_bytes.value) / 2**30:.1f}"  # type: ignore[arg-type]
                         for name, card, n, used in zip(split.names, cards, split.layer_counts, split.card_bytes))
        notes.append(f"layers over {len(cards)} cards (-ts counts each card's layers, the output layer with the last "
                     f"block's card where it has room; "
                     f"src/llama-model.cpp load_tensors at 0c1e570): {held}")
        over = [name for name, card, used in zip(split.names, cards, split.card_bytes)
                if card.vram_bytes.known and used > int(card.vram_bytes.value)]  # type: ignore[arg-type]
        if over:
            notes.append(f"{', '.join(over)} would hold more than its memory: lower -c or move a layer's experts to "
                         "the CPU")
        return args

    def _moe_cache_args(self, placement: Placement, model: ModelSpec, plan: ExportPlan, opts: LaunchOptions,
                        env: list, side: list, notes: list) -> tuple[Arg, ...]:
        slots = placement.slots_total // model.n_moe_layers
        if plan.popularity is None:
            raise CopeInputError("exporting fixed residency for the fork needs the profile trace's popularity")
        profile = fork_profile_file(model, plan.popularity, slots)
        side.append(profile)
        name = profile.name
        path = name if opts.side_dir is None else os.path.join(opts.side_dir, name)
        notes.append(f"the fork: {FORK_HOME}, branch {FORK_BRANCH} (checked at {FORK_COMMIT[:9]}); its default "
                     f"branch has no --moe-cache-*")
        notes.append(f"{name} pins each layer's {slots} most routed experts of "
                     f"{plan.profile_source or 'the profile trace'} (the fork keeps the most frequent ids of its "
                     "profile's decode rows)")
        if plan.synthetic_profile:
            notes.append(f"SYNTHETIC routing: {name} pins experts of made-up routing, not of how this model "
                         "routes; record or pull a real trace (cope trace) before running it")
        build, _ = self._build_for(opts.binary, opts.build)
        if opts.binary not in SERVER_LIKE:
            # llama-bench has no cache flags, but its model parameters leave the cache unset, and
            # init_moe_expert_cache then reads the environment (src/llama-model.cpp at FORK_COMMIT).
            env += [(CACHE_PROFILE_ENV, path), (CACHE_SLOTS_ENV, str(slots))]
            notes.append(f"llama-bench has no --moe-cache-*: the fork reads {CACHE_PROFILE_ENV} and {CACHE_SLOTS_ENV}")
            return spelled(opts.binary, "fork_n_cpu_moe", 99, build)
        return spell(opts.binary, [("moe_cache_profile", path), ("moe_cache_slots", slots), ("fork_n_cpu_moe", 99)],
                     build)


STOCK = LlamaFamily(
    Runtime("llama.cpp", "stock llama.cpp",
            "whole layers' experts on the CPU (--n-cpu-moe, -ot per block, --cpu-moe) or all on the GPU; "
            "CPU experts run after the layer's GPU work",
            "github.com/ggml-org/llama.cpp", "release binaries, brew, winget or nix, or build from source",
            Execution.SEQUENTIAL, BINARIES, "stock", can_map=True),
    fit_off=True, first_n_flag=True, stage_env=True, moe_cache=False)

IK = LlamaFamily(
    Runtime("ik_llama.cpp", "ik_llama.cpp",
            "a llama.cpp fork with the same placement flags (-ngl, -ot, --cpu-moe) and its own CPU MoE "
            "kernels; CPU experts run after the layer's GPU work",
            "github.com/ikawrakow/ik_llama.cpp", "build from source",
            Execution.SEQUENTIAL, BINARIES, "ik", can_map=True),
    fit_off=False, first_n_flag=False, stage_env=False, moe_cache=False, stage_flag=True,
    bench_overrides_join=BENCH_OT_JOIN["ik_llama.cpp"])

FORK = LlamaFamily(
    Runtime("fork", "the llama.cpp MoE expert-cache fork",
            "llama.cpp plus a fixed set of each layer's most routed experts in VRAM (--moe-cache-profile, "
            "--moe-cache-slots), the rest computed on the CPU at the same time; wired for "
            + ", ".join(sorted(FORK_ARCHS)),
            f"{FORK_HOME}, branch {FORK_BRANCH}", "build from source",
            Execution.PARALLEL, BINARIES, "fork", can_map=True),
    fit_off=True, first_n_flag=True, stage_env=True, moe_cache=True)
