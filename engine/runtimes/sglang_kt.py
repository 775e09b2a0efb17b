"""SGLang with KTransformers' kt-kernel (pip packages `sglang-kt` and `kt-kernel`).

Per-expert GPU/CPU placement: a boolean mask per MoE layer says which experts live on
the GPU; the CPU computes the others at the same time as the GPU computes its own
(kvcache-ai/sglang python/sglang/srt/layers/moe/kt_ep_wrapper.py: "Submit CPU expert
computation (non-blocking)", then the GPU experts, then sync and merge), so COPE prices
it with parallel execution.

Flags and the activation file, as read in kvcache-ai/sglang at commit
04653fa88f5ce4ea83632c4ad436343db6bc8324 (python/sglang/srt/server_args.py,
python/sglang/srt/layers/moe/kt_ep_wrapper.py `_init_kt_gpu_experts_masks`) and
kvcache-ai/ktransformers at commit 95009ea6856c0799e517e93cb12be5e8494bc7ce
(kt-kernel/python/experts_base.py `generate_gpu_experts_masks`, kt-kernel/python/utils/,
kt-kernel/README.md):
- `python -m sglang.launch_server --model-path <HF weights> --context-length N`; SGLang
  builds the GPU side (attention, embeddings, the GPU experts) from that checkpoint, in its
  own dtype or quantization, and sizes its pools by `--mem-fraction-static`: COPE sizes
  it by SGLang's arithmetic (engine/runtimes/sglang_memory.py), emits the fraction with
  the chunked-prefill and CUDA-graph sizes it assumed, and asks kt-kernel for no more GPU
  experts than that leaves room for, whatever slot count llama.cpp's arithmetic gave the
  candidate;
- `--kt-method`: chosen per model and CPU (engine/runtimes/kt_method.py); LLAMAFILE reads
  the GGUF itself, and `--kt-weight-path` names the file (kt-kernel's GGUFLoader loads a
  single .gguf file, or every *.gguf of a folder in sorted order, later files overwriting
  earlier tensors; the folder only for a split model); AMXINT4/AMXINT8 read weights
  converted by kt-kernel/scripts/convert_cpu_weights.py; `--kt-cpuinfer T` CPU threads;
  `--kt-threadpool-count` one pool per NUMA node (SGLang's default is 2);
- `--kt-num-gpu-experts N`: N per MoE layer, multiplied by the MoE layers for the
  total; `--kt-gpu-experts-ratio r`: total = int(MoE layers x experts x r), overriding N;
  each layer's GPU experts are created for that layer's mask count only;
- `--kt-expert-placement-strategy frequency|front-loading|uniform|random` (default
  uniform): "frequency" takes the global top total of the activation counts over all
  layers (torch.topk over the flattened [layers, experts] table, after `.float()`: COPE's
  fixed nonuniform); "front-loading" fills MoE layers from the first one (whole layers: a
  layer partition with the last layers on the CPU); "uniform" takes the first experts
  by id, not by popularity;
- `--init-expert-location FILE.pt`: `torch.load(FILE, map_location="cpu",
  weights_only=True)`, a dict with "logical_count", an integer tensor [buffer,
  num_hidden_layers, num_experts] summed over the first dimension (dense layers: zero
  rows; the layer count must equal the model config's num_hidden_layers). torch.topk
  breaks ties its own way, so COPE writes a strict order: each count as
  count x N + (N - rank), N the MoE experts of the model and rank the expert's place in
  COPE's fill order (ties: lower layer, then lower id), which keeps the counts readable
  ((value - 1) // N) and gives kt-kernel exactly COPE's experts at any total; where that
  would pass float32's exact integers (2^24) it writes N - rank alone (only the order
  matters);
- `--kt-max-deferred-experts-per-token` defaults to no deferral (every CPU expert of a
  layer is merged before the next layer): COPE's parallel step; left unset;
- `--kt-enable-dynamic-expert-update` re-places the GPU experts from the routing of a
  long prefill batch (over `--kt-gpu-prefill-token-threshold`), never during decode.
Not in kvcache-ai/sglang at that commit, nor in the sglang-kt 0.7.2 wheel: a per-layer
count of GPU experts (a "frequency-uniform" strategy or an environment variable such as
SGLANG_KT_NUM_GPU_EXPERTS_BY_LAYER, seen in a kt_ep_wrapper.py whose repository could not
be named). COPE sets none of them, so a uniform split runs as frequency's global top: the
nonuniform candidate (assets/runtime_flags/sglang-kt.json lists what the source reads).
"""

from __future__ import annotations

import os
import re

import numpy as np

from engine.core.errors import CopeInputError
from engine.llamacpp.command_line import CommandLine
from engine.models.model import ModelSpec
from engine.replays.policy import Allocation, Candidate, Execution, Kind, Residency
from engine.replays.residency import allocate_slots
from engine.runtimes.base import APPROXIMATE, EXACT, NOT_RUN, Support  # the support levels
from engine.runtimes.base import ExportPlan, HostUse, Launch, LaunchOptions, Placeholder, Runtime
from engine.runtimes.kt_method import CONVERT_SCRIPT, DEFAULT_THREADPOOLS, KtMethod, kt_method
from engine.runtimes.placement import Layout, Placement
from engine.runtimes.sglang_memory import MIB, SglangMemory, checkpoint_of_model, sglang_memory

LAUNCH = ("python", "-m", "sglang.launch_server")
FLOAT32_EXACT = 2**24  # kt_ep_wrapper.py takes .float() of the counts before torch.topk
SPLIT_GGUF = re.compile(r"-\d{5}-of-\d{5}\.gguf$")


def cope_rank(popularity: np.ndarray) -> np.ndarray:
    """int64 [L, E]: each expert's place in COPE's fill order of a fixed nonuniform
    residency (engine/replays/residency.py allocate_slots on the popularity curves: the global top
    of the counts, ties to the lower layer, then the lower id), 0 the first filled."""
    pop = np.asarray(popularity, dtype=np.int64)
    order = np.argsort(-pop.ravel(), kind="stable")
    rank = np.empty(pop.size, dtype=np.int64)
    rank[order] = np.arange(pop.size, dtype=np.int64)
    return rank.reshape(pop.shape)


def counts_scaled(popularity: np.ndarray) -> bool:
    """Whether count x N + (N - rank) stays within float32's exact integers."""
    pop = np.asarray(popularity, dtype=np.int64)
    n = pop.size
    return int(pop.max(initial=0)) * n + n <= FLOAT32_EXACT


def strict_counts(popularity: np.ndarray) -> np.ndarray:
    """int64 [L, E], all distinct and positive, ordered as COPE fills: count x N + (N -
    rank), or N - rank where that would pass 2^24."""
    pop = np.asarray(popularity, dtype=np.int64)
    n = pop.size
    tie = n - cope_rank(pop)
    return pop * n + tie if counts_scaled(pop) else tie


def activation_counts(popularity: np.ndarray, model: ModelSpec) -> np.ndarray:
    """The "logical_count" tensor: int64 [1, num_hidden_layers, num_experts], each MoE
    block's row the strict counts of the trace's routing (strict_counts), dense blocks zero."""
    pop = np.asarray(popularity, dtype=np.int64)
    if pop.shape != (model.n_moe_layers, model.n_routed_experts):
        raise ValueError(f"popularity of shape {pop.shape}, expected {(model.n_moe_layers, model.n_routed_experts)}")
    counts = np.zeros((1, model.n_blocks, model.n_routed_experts), dtype=np.int64)
    counts[0, list(model.moe_blocks), :] = strict_counts(pop)
    return counts


def counts_file_name(model: ModelSpec) -> str:
    return f"cope-{model.id}-kt-activation.pt"


def total_flags(total: int, n_layers: int, n_experts: int) -> list[str]:
    """GPU experts in all MoE layers: per layer when it divides evenly, else as the ratio
    whose int(layers x experts x ratio) is exactly `total` (kt_ep_wrapper.py)."""
    if total % n_layers == 0:
        return ["--kt-num-gpu-experts", str(total // n_layers)]
    everything = n_layers * n_experts
    text = f"{(total + 0.5) / everything:.12g}"
    if int(everything * float(text)) != total:
        text = repr((total + 0.5) / everything)
    return ["--kt-gpu-experts-ratio", text]


def threadpools(plan: ExportPlan) -> int:
    """kt-kernel's thread pools (--kt-threadpool-count, and the AMX conversion's
    --threadpool-count): one a NUMA node, else SGLang's default."""
    return plan.numa_nodes or DEFAULT_THREADPOOLS


def kt_memory(model: ModelSpec, plan: ExportPlan) -> SglangMemory:
    """SGLang's arithmetic for the plan's budget, card and context."""
    checkpoint = plan.checkpoint or checkpoint_of_model(model)
    return sglang_memory(model, checkpoint, budget_bytes=plan.memory.vram_budget_bytes,
                         context_tokens=plan.memory.context_tokens, card_bytes=plan.gpu_vram_bytes)


def method_for(model: ModelSpec, plan: ExportPlan, memory: SglangMemory) -> KtMethod:
    return kt_method(model, memory.checkpoint, amx=plan.cpu_amx, amx_note=plan.cpu_amx_note or "this CPU",
                     threadpools=threadpools(plan), gguf_expert_bytes=plan.memory.expert_bytes)


def kt_gpu_experts(candidate: Candidate, placement: Placement, model: ModelSpec) -> int:
    """GPU experts the candidate's placement holds (by llama.cpp's arithmetic)."""
    if placement.layout is Layout.EXPERTS:
        return int(placement.slots_total)
    if placement.cpu_layers is None:
        return 0
    return int((~placement.cpu_layers).sum()) * model.n_routed_experts


def kt_placement(candidate: Candidate, placement: Placement, model: ModelSpec, plan: ExportPlan,
                 memory: SglangMemory) -> tuple[Placement, int]:
    """What the command asks kt-kernel for, and its GPU experts: the candidate's placement
    with no more GPU experts than SGLang's static pool holds. A matrix candidate's slots
    become the global top that fits (every expert's, when llama.cpp's arithmetic gave it
    a slot for each); a layer partition stays front-loading, its total cut to what fits."""
    want = kt_gpu_experts(candidate, placement, model)
    total = min(want, memory.gpu_experts)
    if candidate.kind is not Kind.MATRIX or placement.layout is Layout.STAGED or placement.all_on_cpu:
        return placement, total
    if placement.layout is Layout.EXPERTS and total == want:
        return placement, total
    n_layers = model.n_moe_layers
    if total == 0:
        return Placement(Layout.LAYERS, "no GPU expert fits SGLang's static pool", np.ones(n_layers, dtype=bool)), 0
    if candidate.allocation is Allocation.UNIFORM and total % n_layers == 0:
        per_layer = np.full(n_layers, total // n_layers, dtype=np.int64)
    elif plan.popularity is not None:
        per_layer = allocate_slots(np.asarray(plan.popularity), total, candidate.allocation)
    else:
        per_layer = None
    return Placement(Layout.EXPERTS, f"{total} GPU experts (SGLang's static pool)", None, total, per_layer), total


def _cut(want: int, memory: SglangMemory) -> str:
    """What the support note adds when SGLang's pool holds fewer GPU experts than the candidate has."""
    if want <= memory.gpu_experts:
        return ""
    return (f", cut to the {memory.gpu_experts} of its {want} GPU experts that SGLang's static pool holds "
            f"({memory.checkpoint.label})")


class SglangKt:
    info = Runtime(
        "sglang-kt", "SGLang + kt-kernel",
        "SGLang with KTransformers' kt-kernel: any set of experts per layer on the GPU, the others computed "
        "on the CPU at the same time as the GPU's",
        "github.com/kvcache-ai/ktransformers", "pip install sglang-kt kt-kernel",
        Execution.PARALLEL, ("python",), "kt")

    def support(self, candidate: Candidate, placement: Placement, model: ModelSpec, plan: ExportPlan) -> Support:
        name = self.info.name
        if placement.layout is Layout.STAGED:
            return Support(name, NOT_RUN, "kt-kernel computes CPU experts on the CPU; it never stages them")
        if plan.request is not None or plan.gpu_backend != "CUDA":
            return Support(name, NOT_RUN, "SGLang + kt-kernel is exported for one CUDA card (several cards need "
                           "its tensor parallelism, which COPE does not size)")
        memory = kt_memory(model, plan)
        if placement.all_on_gpu and memory.all_fit:
            return Support(name, NOT_RUN, "every expert fits on the GPU by SGLang's arithmetic "
                           f"({memory.n_experts_total} x {memory.expert_bytes / MIB:.2f} MiB in "
                           f"{memory.checkpoint.label}): plain SGLang, no kt-kernel needed")
        method = method_for(model, plan, memory)
        if not method.runs:
            return Support(name, NOT_RUN, method.why)
        if not memory.fits:
            return Support(name, NOT_RUN, memory.refusal())
        if placement.layout is Layout.LAYERS and (candidate.kind is not Kind.MATRIX or placement.all_on_cpu):
            return self._layer_support(candidate, placement, model, memory)
        if candidate.execution not in (Execution.SEQUENTIAL, Execution.PARALLEL):
            return Support(name, NOT_RUN, f"kt-kernel computes CPU experts on the CPU; it never copies them "
                           f"to the GPU ({candidate.execution.value})")
        lane = self.info.cpu_experts  # kt-kernel runs a layer's CPU experts beside its GPU experts
        nonuniform = Candidate(Kind.MATRIX, Residency.FIXED, lane, Allocation.NONUNIFORM)
        if candidate.residency is not Residency.FIXED:
            return Support(name, APPROXIMATE, "kt-kernel's GPU experts stay as filled during decode (its dynamic "
                           "expert update re-places them after long prefills only): it runs the initial fill, "
                           f"{nonuniform.id}", nonuniform)
        if candidate.execution is not lane:
            twin = Candidate(Kind.MATRIX, Residency.FIXED, lane, candidate.allocation)
            return Support(name, APPROXIMATE, "kt-kernel computes the CPU's experts at the same time as the "
                           f"GPU's: it runs {twin.id}", twin)
        cut = _cut(kt_gpu_experts(candidate, placement, model), memory)
        if candidate.allocation is not Allocation.NONUNIFORM:
            return Support(name, APPROXIMATE, "SGLang takes no per-layer count of GPU experts: strategy frequency "
                           f"takes the global top of the same total, {nonuniform.id}{cut}", nonuniform)
        if cut:  # fewer GPU experts than the candidate's estimate counts: not the candidate that was priced
            return Support(name, APPROXIMATE, f"strategy frequency: the global top experts of the trace's routing "
                           f"counts{cut}")
        return Support(name, EXACT, "strategy frequency: the global top experts of the trace's routing counts")

    def _layer_support(self, candidate: Candidate, placement: Placement, model: ModelSpec,
                       memory: SglangMemory) -> Support:
        name = self.info.name
        cpu = placement.cpu_layers
        if placement.all_on_gpu:
            return Support(name, NOT_RUN, f"every expert on the GPU takes {memory.n_experts_total} x "
                           f"{memory.expert_bytes / MIB:.2f} MiB in {memory.checkpoint.label} under SGLang, and its "
                           f"static pool holds {memory.gpu_experts}: kt-kernel keeps the rest on the CPU, which a "
                           "fixed candidate says")
        if placement.all_on_cpu:
            return Support(name, EXACT, "--kt-num-gpu-experts 0: every routed expert on the CPU")
        n_gpu = int((~cpu).sum())  # type: ignore[operator]
        if not cpu[:n_gpu].any():  # type: ignore[index]
            cut = _cut(n_gpu * model.n_routed_experts, memory)
            return Support(name, APPROXIMATE if cut else EXACT,
                           f"strategy front-loading: the first {n_gpu} MoE layers' experts on the GPU{cut}")
        return Support(name, NOT_RUN, "kt-kernel fills whole layers from the first MoE layer (front-loading); "
                       "keeping the first layers on the CPU is not among its strategies")

    def binary_problem(self, placement: Placement, binary: str) -> str | None:
        return None  # one launcher; --binary names llama.cpp's programs

    def host_use(self, candidate: Candidate, placement: Placement, model: ModelSpec, plan: ExportPlan,
                 *, mapped: bool) -> HostUse:
        # kt-kernel/python/utils/llamafile.py load_weights hands every layer's whole
        # ffn_{gate,up,down}_exps tensors (all experts) to the CPU backend; whether that
        # backend keeps the mapped file or a copy is not checked, so COPE counts a copy.
        # The AMX methods load the converted experts of every layer likewise.
        method = method_for(model, plan, kt_memory(model, plan))
        each = method.cpu_expert_bytes or plan.memory.expert_bytes
        what = "every layer's experts (kt-kernel loads whole expert tensors on the CPU side)"
        if method.runs and not method.reads_gguf:
            what = f"every layer's experts at {method.name} (kt-kernel loads them all on the CPU side)"
        return HostUse(model.n_experts_total * each, False, what)

    def launch(self, candidate: Candidate, placement: Placement, model: ModelSpec, plan: ExportPlan,
               opts: LaunchOptions, *, mapped: bool) -> Launch:
        memory = kt_memory(model, plan)
        method = method_for(model, plan, memory)
        if not method.runs:
            raise CopeInputError(f"sglang-kt: {method.why}")
        hf_model = opts.hf_model or model.hf_repo or model.id
        # One count of thread pools for the launch and for the conversion of AMX weights, whose
        # layout has a shard a pool (convert_cpu_weights.py --threadpool-count, default 2 as SGLang's).
        pools = threadpools(plan)
        weight_path, weight_notes, placeholders = self._weight_path(method, model, opts, hf_model, pools)
        if not (opts.hf_model or model.hf_repo):
            placeholders.append(Placeholder(hf_model, "the model's Hugging Face repo id or downloaded folder, which "
                                            "COPE does not know for this model (--hf-model REPO|DIR)"))
        want = kt_gpu_experts(candidate, placement, model)
        run, n_gpu = kt_placement(candidate, placement, model, plan, memory)
        argv = [*LAUNCH, "--model-path", hf_model, "--context-length", str(opts.context), *memory.flags(n_gpu),
                "--kt-method", method.name, "--kt-weight-path", weight_path, "--kt-cpuinfer", str(opts.threads),
                "--kt-threadpool-count", str(pools)]
        notes = [f"--model-path {hf_model}: SGLang builds the GPU side from the model's Hugging Face weights "
                 f"({memory.checkpoint.label}); {method.why}", *weight_notes]
        notes += memory.lines(n_gpu)
        if opts.hf_model and plan.checkpoint is None:
            notes.append(f"--hf-model {opts.hf_model} is no local folder, so its config.json was not read: the GPU "
                         f"side is sized as {memory.checkpoint.label}; name the downloaded folder to size it by its "
                         "own dtype and quantization")
        if n_gpu < want:
            notes.append(f"GPU experts: {n_gpu} asked of kt-kernel (what SGLang's static pool holds); the candidate "
                         f"assumed {want} (llama.cpp's arithmetic at the GGUF's {plan.memory.expert_bytes / MIB:.2f} "
                         f"MiB each): its estimated TPOT counts {want - n_gpu} more experts on the GPU than this "
                         "command places there")
        n_layers, n_experts = model.n_moe_layers, model.n_routed_experts
        env: list[tuple[str, str]] = []
        tensors: list[tuple[str, np.ndarray]] = []
        if run.layout is Layout.LAYERS and (run.all_on_cpu or n_gpu == 0):
            argv += ["--kt-num-gpu-experts", "0"]
        elif run.layout is Layout.LAYERS:
            argv += ["--kt-expert-placement-strategy", "front-loading", *total_flags(n_gpu, n_layers, n_experts)]
        else:
            argv += self._frequency_args(run, model, plan, opts, env, tensors, notes)
        return Launch(CommandLine.of_words(argv, env), (), tuple(tensors), tuple(notes), placeholders=tuple(placeholders))

    @staticmethod
    def _weight_path(method: KtMethod, model: ModelSpec, opts: LaunchOptions, hf_model: str,
                     pools: int) -> tuple[str, list[str], list[Placeholder]]:
        """--kt-weight-path, what to say about it, and the placeholder it is when COPE names
        a folder it does not make (the converted weights)."""
        gguf = opts.model_path
        if method.reads_gguf:
            if SPLIT_GGUF.search(gguf):
                folder = os.path.dirname(gguf) or "."
                return folder, [f"--kt-weight-path {folder}: a split GGUF, so its folder; kt-kernel's GGUFLoader "
                                "loads every *.gguf there in sorted order, later files overwriting earlier tensors: "
                                "keep only this model's parts in it"], []
            return gguf, [f"--kt-weight-path {gguf}: kt-kernel reads the experts from this GGUF file"], []
        local = os.path.isdir(os.path.expanduser(hf_model))
        base = hf_model.rstrip("/") if local else model.id
        folder = f"{base}-{method.name}"
        source = hf_model.rstrip("/") if local else f"<the folder of {hf_model}>"
        convert = (f"python {CONVERT_SCRIPT} --input-path {source} --input-type {method.convert_input} --output "
                   f"{folder} --quant-method {method.quant_method} --threadpool-count {pools}")
        return folder, [f"--kt-weight-path {folder}: convert the experts first, with as many thread pools as "
                        f"--kt-threadpool-count: {convert}"], \
            [Placeholder(folder, f"the folder of {method.name} weights that this conversion writes: {convert}")]

    def _frequency_args(self, placement: Placement, model: ModelSpec, plan: ExportPlan, opts: LaunchOptions,
                        env: list, tensors: list, notes: list) -> list[str]:
        if plan.popularity is None or placement.slots_per_layer is None:
            raise CopeInputError("exporting for sglang-kt needs the profile trace's routing counts")
        name = counts_file_name(model)
        path = name if opts.side_dir is None else os.path.join(opts.side_dir, name)
        tensors.append((name, activation_counts(plan.popularity, model)))
        source = plan.profile_source or "the profile trace"
        n = model.n_experts_total
        form = (f"count x {n} + ({n} - COPE's rank)" if counts_scaled(plan.popularity)
                else f"{n} - COPE's rank (the counts x {n} would pass float32's exact integers)")
        notes.append(f"{name}: the routing counts of {source} in COPE's strict order, {form}, so kt-kernel's "
                     f"torch.topk keeps exactly COPE's experts; torch.save({{\"logical_count\": int64 "
                     f"[1, {model.n_blocks}, {model.n_routed_experts}]}}), dense blocks zero")
        if plan.synthetic_profile:
            notes.append(f"SYNTHETIC routing: {name} counts made-up routing, not how this model routes; record or "
                         "pull a real trace (cope trace) before running it")
        return ["--kt-expert-placement-strategy", "frequency", "--init-expert-location", path,
                *total_flags(int(placement.slots_total), model.n_moe_layers, model.n_routed_experts)]


SGLANG_KT = SglangKt()
