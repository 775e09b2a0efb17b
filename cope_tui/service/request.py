"""Build the AdviseRequest for what a person chose (PlanChoices, from flags or app fields).

Every default that stands in for something the person did not say is recorded as an
assumption, so the output can say what it assumed. Shared by the command line and
the app; imports neither textual nor torch.
"""

from __future__ import annotations

from cope_tui.options import DEFAULT_CONTEXT, DEFAULT_GPU, DEFAULT_MODEL, PlanChoices, check_choices
from cope_tui.service.hardware import plan_cpu
from cope_tui.service.workload import workload_of
from cope_tui.sources.resolve import resolve_model
from engine.cost.analytic_cost import KV_TYPE_BYTES
from engine.cost.cost_models import fastest_threads
from engine.advice.workload import CONTEXT_STEP_TOKENS, request_context
from engine.core.errors import CopeInputError
from engine.core.user_paths import user_path
from engine.cost.request import AdviseRequest
from engine.hardware.cpu_compute import core_compute, hybrid_of
from engine.hardware.backend_evidence import backend_basis_note
from engine.hardware.memory import GIB
from engine.core.spans import count_of
from engine.hardware.platform import NO_GPU, CpuSpec, Fact, GpuSpec, Platform, no_gpu, plans_without_gpu, usable_threads
from engine.hardware.presets import get_gpu_preset
from engine.models.model_names import quant_for_name
from engine.models.quant import get_quantization, quantizations
from engine.replays.policy import Eviction
from engine.traces import check_trace_fits_model, load_any_trace, load_trace
from engine.traces.popularity import PopularityProfile, Profile
from engine.core.input_limits import check_replay_slots, most_replay_tokens
from engine.traces.synthetic import SyntheticSettings, synthetic_trace
from engine.traces.trace import RoutingTrace
from dataclasses import replace
from cope_tui.sources.gguf_model import file_quantization
from cope_tui.sources.hub_trace import entries_for, pull_command, same_shape_words
from cope_tui.sources.imatrix import load_imatrix, looks_like_imatrix
from engine.core.cache_dirs import cached_traces
from engine.traces.imatrix import check_imatrix_fits_model, imatrix_profile
from probes.gpu import UNLOADED, detect_gpu as detect

# Zipf 0.7 gives the top 16 of 128 experts ~43% of a layer's routing, as a
# published Qwen3-30B-A3B decode profile shows in its middle layers.
SYNTHETIC_ZIPF = 0.7


def build_request(args: PlanChoices, *, detect_cpu=None, detect_gpu=None) -> AdviseRequest:
    """`detect_cpu` / `detect_gpu` are called only when no CPU / GPU preset is named
    (default: this machine's, the GPU through NVML without loading torch; tests pass stubs)."""
    check_choices(args)
    assumed: list[str] = []

    model_arg = args.model or DEFAULT_MODEL
    if args.model is None:
        assumed.append(f"model: {DEFAULT_MODEL} (no --model given)")
    model = load_model(model_arg, gguf_file=args.gguf_file)

    model_notes: tuple[str, ...] = tuple(f"model shape ({model.name}): {c}" for c in model.caveats)
    if model.exact_bytes is not None:
        exact = model.exact_bytes
        if args.quant is not None:
            raise CopeInputError(
                f"--quant {args.quant}: the model comes from a GGUF file, whose tensors fix the "
                f"quantization ({exact.quant_name}); drop --quant", path=exact.source)
        quant = file_quantization(model)
        model_notes += (f"byte sizes exact from the GGUF tensor table of {exact.source}: {exact.quant_summary}",)
    else:
        quant_name = args.quant or model.default_quant
        if args.quant is None:
            assumed.append(f"quantization: {quant_name} (the model's usual GGUF; --quant to change)")
        elif args.quant.upper() not in quantizations():  # a name people use (UD-Q4_K_XL): as a file name's
            nearest, said = quant_for_name(args.quant)
            if nearest is not None:
                quant_name = nearest
                assumed.extend(said)
        quant = get_quantization(quant_name)

    hardware_notes: list[str] = []
    platform = _platform(args, assumed, hardware_notes, detect_cpu, detect_gpu)
    platform = with_ram(platform, args.ram_gib, assumed)

    gpu_vram = platform.gpu.vram_bytes
    if args.vram_budget_gib is not None:
        budget = int(args.vram_budget_gib * GIB)
        if gpu_vram.known and budget > int(gpu_vram.value):
            raise CopeInputError(
                f"--vram-budget {args.vram_budget_gib:g} GiB is more than the "
                f"{platform.gpu.name}'s {int(gpu_vram.value) / GIB:.0f} GiB; "
                "name a bigger GPU with --gpu to plan for one"
            )
    else:
        budget = int(gpu_vram.value)
        if not plans_without_gpu(platform.gpu):
            assumed.append(f"VRAM budget: all of the GPU's {budget / GIB:.0f} GiB")

    context, attention_tokens = _context(args, assumed)

    threads = _default_threads(platform) if args.threads is None else args.threads
    hybrid = hybrid_of(platform.cpu) if args.threads is None else None
    if hybrid is not None:  # E-cores in an even split slow every thread: the fastest count for this model
        threads = fastest_threads(model, quant, platform, context_tokens=context)
        assumed.append(f"CPU threads: {threads}, the fewest that stream {model.name}'s experts fastest on this hybrid "
                       f"CPU ({hybrid.performance.cores} P-cores; engine/hardware/hybrid_cores.py)")
    elif args.threads is None:
        assumed.append(f"CPU threads: {threads} (the CPU's physical cores)")
    threads, clamped = usable_threads(threads, platform.cpu)
    if clamped:
        hardware_notes.append(clamped)
    trace, profile, trace_notes = _traces(args, model, assumed)
    return AdviseRequest(
        model=model,
        quant=quant,
        platform=platform,
        vram_budget_bytes=budget,
        context_tokens=context,
        threads=threads,
        trace=trace,
        profile=profile,
        evictions=tuple(Eviction(e) for e in args.evictions),
        prefetch_mode=args.prefetch_mode,
        attention_tokens=attention_tokens,
        kv_bytes_per_element=KV_TYPE_BYTES[args.cache_type or "f16"],
        kv_cache_type=None if args.cache_type in (None, "f16") else args.cache_type,
        notes=model_notes + tuple(f"assumed {a}" for a in assumed) + tuple(hardware_notes) + trace_notes,
    )


def _context(args: PlanChoices, assumed: list[str]) -> tuple[int, int | None]:
    """The context (KV cache reserved) and the tokens a decode step attends to (None: half
    the context); with a workload, both follow the request (engine.advice.workload.request_context)."""
    workload = workload_of(args)
    if workload is None:
        if args.context is None:
            assumed.append(f"context: {DEFAULT_CONTEXT} tokens (KV cache reserved for it)")
        return (DEFAULT_CONTEXT if args.context is None else args.context), None
    sized = request_context(workload, args.context, DEFAULT_CONTEXT)
    if sized.sized:
        assumed.append(f"context: {sized.context_tokens} tokens (KV cache reserved for it), sized for the request: "
                       f"{workload.prompt_tokens} prompt + {workload.output_tokens} output tokens rounded up to a "
                       f"multiple of {CONTEXT_STEP_TOKENS}")
    elif args.context is None:
        assumed.append(f"context: {DEFAULT_CONTEXT} tokens (KV cache reserved for it), which holds the request's "
                       f"{workload.tokens} tokens")
    return sized.context_tokens, sized.attention_tokens


def load_model(arg: str, *, gguf_file: str | None = None):
    """`--model`: a catalog id, a config.json path, a .gguf path or a Hub repo id (see
    cope_tui.sources.resolve); the GGUF and Hub readers load only when needed."""
    return resolve_model(arg, gguf_file=gguf_file)


def _platform(args: PlanChoices, assumed: list[str], notes: list[str], detect_cpu, detect_gpu) -> Platform:
    if args.gpu is not None and args.gpu.lower() == NO_GPU:
        gpu = no_gpu()
    else:
        gpu = get_gpu_preset(args.gpu) if args.gpu is not None else _this_gpu(detect_gpu, assumed)
    if not plans_without_gpu(gpu):
        basis = backend_basis_note(gpu.backend)
        if basis:
            notes.append(basis)
    cpu = plan_cpu(args, detect_cpu)  # --cpu, --memory, --ram-bandwidth; else this machine (a stored measurement)
    assumed.extend(cpu.assumed)
    core = core_assumption(cpu.cpu)
    if core:
        assumed.append(core)
    hybrid = hybrid_note(cpu.cpu)
    if hybrid:
        notes.append(hybrid)
    notes.extend(cpu.notes)
    return Platform(gpu=gpu, cpu=cpu.cpu)


def preset_gpu_on_this_cpu(choices: PlanChoices, platform: Platform) -> str | None:
    """What to say loudly when a GPU preset is planned with this machine's CPU (--gpu
    without --cpu): the CPU's experts are priced on the machine COPE runs on, which is often
    not the one the card goes in (a laptop planning a desktop's two RTX 3090s). None when
    the CPU was named or no GPU is planned."""
    if choices.gpu is None or choices.gpu.strip().lower() == NO_GPU or choices.cpu is not None:
        return None
    cpu = platform.cpu
    threads = (count_of(int(cpu.logical_threads.value), "thread") if cpu.logical_threads.known
               else "its threads unknown")
    bandwidth = cpu.mem_bandwidth_bytes_per_s
    memory = (f"{bandwidth.value / 1e9:.0f} GB/s memory ({bandwidth.basis})" if bandwidth.known
              else "its memory bandwidth unknown")
    return (f"--gpu {choices.gpu.strip()} is planned with THIS machine's CPU ({cpu.name}, {threads}, {memory}): "
            "the experts left on the CPU are priced on it; if the card goes in another machine, give that "
            "machine's --cpu NAME (and --memory TYPE-SPEEDxCHANNELS)")


def hybrid_note(cpu: CpuSpec) -> str | None:
    """How a hybrid Intel CPU's threads are priced (engine/hardware/hybrid_cores.py), None for
    any other CPU."""
    hybrid = hybrid_of(cpu)
    if hybrid is None:
        return None
    p = hybrid.performance.cores
    assumed = f"; {hybrid.assumed}" if hybrid.assumed else ""
    return (f"{cpu.name} is hybrid ({hybrid.describe()}{assumed}): llama.cpp's threads are not pinned and a "
            f"decode mat-vec's rows are split evenly when they make fewer than 4 chunks of 64 a thread, so past "
            f"the {p} P-cores every thread works at the slowest core's pace")


def core_assumption(cpu: CpuSpec) -> str | None:
    """What was assumed of the CPU's cores (no preset, no recorded base clock) where a CPU
    thread's decode rate rests on it (engine.cost.analytic_cost.thread_bytes_per_s): no
    one-thread read measured by `cope detect`."""
    one = cpu.thread_bandwidth_bytes_per_s
    if one.known and one.basis == "measured":
        return None
    assumed = core_compute(cpu).assumed
    return f"CPU core: {assumed}; a CPU thread's decode rate follows it (cope detect measures it)" if assumed else None


def _this_gpu(detect_gpu, assumed: list[str]) -> GpuSpec:  # type: ignore[no-untyped-def]
    """The GPU of this machine when it can be planned for (its VRAM known, and its memory
    bandwidth measured or from the preset of the same card), else the default preset;
    the assumption says which, and why."""
    if detect_gpu is None:
        def detect_gpu():  # type: ignore[no-untyped-def]
            return detect(torch=UNLOADED)  # NVML alone: the headless path never loads torch to plan
    gpu = detect_gpu()
    default = get_gpu_preset(DEFAULT_GPU)
    other = "--gpu PRESET plans for another card"
    if gpu.vram_bytes.known and gpu.mem_bandwidth_bytes_per_s.known:
        bandwidth = gpu.mem_bandwidth_bytes_per_s
        source = (f"the {gpu.matched_preset_id} spec sheet" if bandwidth.basis == "preset" else bandwidth.basis)
        assumed.append(f"GPU: {gpu.name}, detected on this machine ({int(gpu.vram_bytes.value) / GIB:.1f} GiB; "
                       f"memory bandwidth {float(bandwidth.value) / 1e9:.0f} GB/s from {source}); {other}")
        return gpu
    if gpu.vram_bytes.known:
        assumed.append(f"GPU: the {default.name} preset: this machine's {gpu.name} was detected, but COPE has no "
                       f"memory-bandwidth figure for it ({gpu.mem_bandwidth_bytes_per_s.note}); {other}")
    else:
        why = gpu.vram_bytes.note  # detection's note says "no GPU detected: ..." itself
        why = why if why.startswith("no GPU detected") else f"no GPU detected: {why}"
        assumed.append(f"GPU: the {default.name} preset ({why}); {other}")
    return default


def with_ram(platform: Platform, ram_gib: float | None, assumed: list[str]) -> Platform:
    """The platform with `--ram-gib` as its RAM; without it, a preset's typical RAM is
    recorded as an assumption (the host-memory check uses it)."""
    cpu = platform.cpu
    if ram_gib is not None:
        ram = Fact.assumed(int(ram_gib * GIB), f"given with --ram-gib {ram_gib:g}")
        return replace(platform, cpu=replace(cpu, ram_bytes=ram, ram_available_bytes=ram))
    if cpu.ram_bytes.known and cpu.ram_bytes.basis == "preset":
        assumed.append(f"RAM: {int(cpu.ram_bytes.value) / GIB:.0f} GiB, typical for the {cpu.name} preset "
                       "(--ram-gib to give yours)")
    elif not cpu.ram_bytes.known:
        assumed.append(f"RAM: unknown ({cpu.ram_bytes.note}), so host memory is not checked; --ram-gib to give it")
    return platform


def _default_threads(platform: Platform) -> int:
    cores = platform.cpu.physical_cores
    if cores.known:
        return int(cores.value)
    threads = platform.cpu.logical_threads
    return int(threads.value) if threads.known else 4


def _traces(args: PlanChoices, model, assumed: list[str]) -> tuple[RoutingTrace, Profile, tuple[str, ...]]:
    """(replayed trace, profile trace or an imatrix's popularity, notes)."""
    notes: list[str] = []
    full = None
    given = None
    if args.profile_trace:
        given = load_profile(user_path(args.profile_trace, flag="--profile-trace"), model)
    if args.trace not in (None, "synthetic"):
        if looks_like_imatrix(user_path(args.trace, flag="--trace")):
            raise CopeInputError("an imatrix holds routing counts, not a routing order to replay: give it with "
                                 "--profile-trace (the replayed routing is then synthetic, drawn from its counts)",
                                 path=f"--trace {args.trace}")
    if args.trace is None:
        # No --trace: the newest cached trace of this model (recorded or pulled), else synthetic,
        # pointing at a published one when the trace index knows one.
        skipped: list[str] = []
        candidates = cached_traces(model.id)
        for path in candidates:
            try:
                found = load_trace(path)
                check_trace_fits_model(found, model, path=str(path))
            except CopeInputError as exc:
                skipped.append(str(exc))
                continue
            if found.n_tokens < 2:
                skipped.append(f"{path}: fewer than 2 tokens")
                continue
            full = found
            assumed.append(f"trace: {path}, the newest cached {found.meta.origin} trace of {model.id} "
                           f"(from {found.meta.source}; no --trace given; --trace synthetic for made-up routing)")
            break
        notes.extend(f"skipped cached trace {s}" for s in skipped)
        if full is None:
            assumed.append(f"trace: synthetic (no --trace given and no usable cached trace of {model.id})")
            for match in entries_for(model.id):
                whose = f"of {model.id}" if match.exact else f"({same_shape_words(match)})"
                state = "" if match.entry.verified else "; the index entry is unverified (never downloaded to check)"
                notes.append(f"run `{pull_command(match.entry, model.id)}` to use a published trace {whose} "
                             f"instead of synthetic routing{state}")
    drawn = full is None and (args.trace is None or args.trace == "synthetic")
    if drawn:
        # The replay budget, before a synthetic trace is drawn (engine/core/input_limits.py): its
        # second half is replayed, all of it beside an imatrix's popularity.
        whole = 2 if isinstance(given, PopularityProfile) else 1
        check_replay_slots(whole * args.tokens, model.n_moe_layers, model.top_k, what=f"--tokens {args.tokens}",
                           remedy=f"lower --tokens (at most "
                                  f"{most_replay_tokens(model.n_moe_layers, model.top_k) // whole:,} with this model)")
    if full is None and (args.trace is None or args.trace == "synthetic"):
        if isinstance(given, PopularityProfile):
            full = _fitted_synthetic(args, model, given, notes)
        else:
            settings = SyntheticSettings(
                tokens=2 * args.tokens, seed=args.seed, zipf_exponent=SYNTHETIC_ZIPF, sequences=2
            )
            full = synthetic_trace(model, settings)
            notes.append(
                "SYNTHETIC routing: figures show how the policies compare on made-up routing "
                f"({settings.describe()}), not how this model routes"
            )
    elif full is None:
        full = load_any_trace(user_path(args.trace, flag="--trace"), model=model)
    if not drawn:  # a given or cached trace: the part replayed (all of it beside a profile)
        check_replay_slots(full.n_tokens if given is not None else full.n_tokens // 2, full.n_layers, full.top_k,
                           what=f"--trace {args.trace}" if args.trace else f"the cached trace of {model.id}",
                           remedy="give a shorter trace (or raise COPE_MAX_REPLAY_SLOTS)")
    if given is not None:
        if isinstance(given, PopularityProfile):
            notes.append(f"popularity: real, from {given.label} ({given.n_tokens} tokens of prompt routing); "
                         "fixed residency, slot allocation and exported side files use its counts")
        return full, given, tuple(notes)
    if full.n_tokens < 2:
        raise CopeInputError("the trace needs at least 2 tokens to split", path=full.meta.source)
    profile, replayed = full.split(0.5)
    notes.append(
        f"popularity learnt from the first {profile.n_tokens} tokens, candidates scored on the "
        f"other {replayed.n_tokens} (give --profile-trace to learn it elsewhere)"
    )
    return replayed, profile, tuple(notes)


def load_profile(path: str, model) -> Profile:  # type: ignore[no-untyped-def]
    """`--profile-trace`: a routing trace in any format, or a llama.cpp imatrix (its
    per-expert counts: popularity without order), checked against the model."""
    if not looks_like_imatrix(path):
        return load_any_trace(path, model=model)
    counts = load_imatrix(path)  # read once per version of the file (engine/traces/imatrix_cache.py)
    check_imatrix_fits_model(counts, model)
    return imatrix_profile(counts, model)


def _fitted_synthetic(args: PlanChoices, model, profile: PopularityProfile, notes: list[str]) -> RoutingTrace:  # type: ignore[no-untyped-def]
    """Synthetic routing whose per-layer popularity is the imatrix's real counts; order,
    timing, predictions and router weights stay the generator's assumptions."""
    settings = SyntheticSettings(tokens=2 * args.tokens, seed=args.seed, popularity=profile.popularity(),
                                 sequences=2, popularity_source=profile.label)
    notes.append("SYNTHETIC routing order: each layer's expert popularity is REAL (the counts of "
                 f"{profile.label}); the order and timing of routing are ASSUMED ({settings.describe()})")
    return synthetic_trace(model, settings)
