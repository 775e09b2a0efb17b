"""SGLang with KTransformers' kt-kernel (pip packages `sglang-kt` and `kt-kernel`).

Per-expert GPU/CPU placement: a boolean mask per MoE layer says which experts live on
the GPU; the CPU computes the others at the same time as the GPU computes its own
(kvcache-ai/sglang python/sglang/srt/layers/moe/kt_ep_wrapper.py: "Submit CPU expert
computation (non-blocking)", then the GPU experts, then sync and merge), so COPE prices
it with parallel execution.

Flags and the activation file, as read in kvcache-ai/sglang
(python/sglang/srt/server_args.py, python/sglang/srt/layers/moe/kt_ep_wrapper.py
`_init_kt_gpu_experts_masks`) and kvcache-ai/ktransformers
(kt-kernel/python/experts_base.py `generate_gpu_experts_masks`,
doc/en/kt-kernel/experts-sched-Tutorial.md, kt-kernel/README.md):
- `python -m sglang.launch_server --model-path <HF weights> --context-length N`;
- `--kt-method LLAMAFILE --kt-weight-path <folder of the GGUF>`: the CPU side reads the
  GGUF directly ("LLAMAFILE uses pre-quantized GGUF weights on the CPU side");
  `--kt-cpuinfer T` CPU threads; `--kt-threadpool-count` one pool per NUMA node;
- `--kt-num-gpu-experts N`: N per MoE layer, multiplied by the MoE layers for the
  total; `--kt-gpu-experts-ratio r`: total = int(MoE layers x experts x r), overriding N;
- `--kt-expert-placement-strategy frequency|front-loading|uniform|random` (default
  uniform): "frequency" takes the global top total of the activation counts over all
  layers (torch.topk over the flattened [layers, experts] table: COPE's fixed
  nonuniform); "front-loading" fills MoE layers from the first one (whole layers: a
  layer partition with the last layers on the CPU); "uniform" takes the first experts
  by id, not by popularity;
- `--init-expert-location FILE.pt`: `torch.load(FILE, map_location="cpu",
  weights_only=True)`, a dict with "logical_count", an integer tensor [buffer,
  num_hidden_layers, num_experts] summed over the first dimension (dense layers: zero
  rows; the layer count must equal the model config's num_hidden_layers);
- `--kt-max-deferred-experts-per-token` defaults to no deferral (every CPU expert of a
  layer is merged before the next layer): COPE's parallel step; left unset;
- `--kt-enable-dynamic-expert-update` re-places the GPU experts from the routing of a
  long prefill batch (over `--kt-gpu-prefill-token-threshold`), never during decode.
Not found in the kvcache-ai/sglang snapshot read (its strategies are only the four
above): a "frequency-uniform" strategy and the environment variable
SGLANG_KT_NUM_GPU_EXPERTS_BY_LAYER (comma-separated GPU experts per layer, one entry per
layer or per MoE layer, each layer's most counted experts taken with a stable sort) appear
in a newer kt_ep_wrapper.py that the code index holds without naming its repository.
COPE sets the variable (a version that does not read it ignores it) and relies only on
the strategies above.
"""

from __future__ import annotations

import os

import numpy as np

from engine.errors import CopeInputError
from engine.model import ModelSpec
from engine.policy import Allocation, Candidate, Execution, Kind, Residency
from engine.runtimes.base import (
    APPROXIMATE,
    EXACT,
    NOT_RUN,
    ExportPlan,
    HostUse,
    Launch,
    LaunchOptions,
    Runtime,
    Support,
)
from engine.runtimes.placement import Layout, Placement

BY_LAYER_ENV = "SGLANG_KT_NUM_GPU_EXPERTS_BY_LAYER"
LAUNCH = ("python", "-m", "sglang.launch_server")
KT_METHOD = "LLAMAFILE"


def activation_counts(popularity: np.ndarray, model: ModelSpec) -> np.ndarray:
    """The "logical_count" tensor: int64 [1, num_hidden_layers, num_experts], each MoE
    block's row the routing counts of the trace, dense blocks zero."""
    pop = np.asarray(popularity, dtype=np.int64)
    if pop.shape != (model.n_moe_layers, model.n_routed_experts):
        raise ValueError(f"popularity of shape {pop.shape}, expected {(model.n_moe_layers, model.n_routed_experts)}")
    counts = np.zeros((1, model.n_blocks, model.n_routed_experts), dtype=np.int64)
    counts[0, list(model.moe_blocks), :] = pop
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


def boundary_tie(popularity: np.ndarray, total: int) -> bool:
    """Whether the total-th and the next most counted experts (over all layers) have the
    same count: kt-kernel's torch.topk then picks among them its own way."""
    flat = np.sort(np.asarray(popularity).ravel())[::-1]
    return 0 < total < flat.size and flat[total - 1] == flat[total]


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
        if placement.layout is Layout.LAYERS:
            return self._layer_support(candidate, placement)
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
        if candidate.allocation is Allocation.NONUNIFORM:
            return Support(name, EXACT, "strategy frequency: the global top experts of the trace's routing counts")
        return Support(name, APPROXIMATE, f"the same experts in every layer only where SGLang reads {BY_LAYER_ENV} "
                       "(not in the kt_ep_wrapper.py checked); elsewhere strategy frequency takes the global top "
                       "of the same total, a nonuniform split")

    def _layer_support(self, candidate: Candidate, placement: Placement) -> Support:
        name = self.info.name
        cpu = placement.cpu_layers
        if placement.all_on_gpu:
            return Support(name, NOT_RUN, "every expert fits on the GPU: plain SGLang, no kt-kernel needed")
        if placement.all_on_cpu:
            return Support(name, EXACT, "--kt-num-gpu-experts 0: every routed expert on the CPU")
        n_gpu = int((~cpu).sum())  # type: ignore[operator]
        if not cpu[:n_gpu].any():  # type: ignore[index]
            return Support(name, EXACT, f"strategy front-loading: the first {n_gpu} MoE layers' experts on the GPU")
        return Support(name, NOT_RUN, "kt-kernel fills whole layers from the first MoE layer (front-loading); "
                       "keeping the first layers on the CPU is not among its strategies")

    def binary_problem(self, placement: Placement, binary: str) -> str | None:
        return None  # one launcher; --binary names llama.cpp's programs

    def host_use(self, candidate: Candidate, placement: Placement, model: ModelSpec, plan: ExportPlan,
                 *, mapped: bool) -> HostUse:
        # kt-kernel/python/utils/llamafile.py load_weights hands every layer's whole
        # ffn_{gate,up,down}_exps tensors (all experts) to the CPU backend; whether that
        # backend keeps the mapped file or a copy is not checked, so COPE counts a copy.
        return HostUse(model.n_experts_total * plan.memory.expert_bytes, False,
                       "every layer's experts (kt-kernel loads whole expert tensors on the CPU side)")

    def launch(self, candidate: Candidate, placement: Placement, model: ModelSpec, plan: ExportPlan,
               opts: LaunchOptions, *, mapped: bool) -> Launch:
        hf_model = opts.hf_model or model.hf_repo or model.id
        gguf_dir = os.path.dirname(opts.model_path) or "."
        argv = [*LAUNCH, "--model-path", hf_model, "--context-length", str(opts.context),
                "--kt-method", KT_METHOD, "--kt-weight-path", gguf_dir, "--kt-cpuinfer", str(opts.threads)]
        if plan.numa_nodes:
            argv += ["--kt-threadpool-count", str(plan.numa_nodes)]
        notes = [f"--model-path {hf_model}: SGLang loads the model's Hugging Face weights for the GPU side; "
                 f"kt-kernel reads the experts from the GGUF in the folder {gguf_dir} ({KT_METHOD})",
                 "SGLang sizes its KV pool by --mem-fraction-static, not by COPE's VRAM arithmetic (llama.cpp's): "
                 "check its startup log"]
        n_layers, n_experts = model.n_moe_layers, model.n_routed_experts
        env: list[tuple[str, str]] = []
        tensors: list[tuple[str, np.ndarray]] = []
        if placement.layout is Layout.LAYERS and placement.all_on_cpu:
            argv += ["--kt-num-gpu-experts", "0"]
        elif placement.layout is Layout.LAYERS:
            n_gpu = int((~placement.cpu_layers).sum())  # type: ignore[operator]
            argv += ["--kt-expert-placement-strategy", "front-loading",
                     *total_flags(n_gpu * n_experts, n_layers, n_experts)]
        else:
            argv += self._frequency_args(placement, model, plan, opts, env, tensors, notes)
        return Launch(tuple(argv), tuple(env), (), tuple(tensors), tuple(notes))

    def _frequency_args(self, placement: Placement, model: ModelSpec, plan: ExportPlan, opts: LaunchOptions,
                        env: list, tensors: list, notes: list) -> list[str]:
        if plan.popularity is None or placement.slots_per_layer is None:
            raise CopeInputError("exporting for sglang-kt needs the profile trace's routing counts")
        name = counts_file_name(model)
        path = name if opts.side_dir is None else os.path.join(opts.side_dir, name)
        tensors.append((name, activation_counts(plan.popularity, model)))
        env.append((BY_LAYER_ENV, ",".join(str(int(n)) for n in placement.slots_per_layer)))
        source = plan.profile_source or "the profile trace"
        notes.append(f"{name}: the routing counts of {source}, torch.save({{\"logical_count\": int64 "
                     f"[1, {model.n_blocks}, {model.n_routed_experts}]}}), dense blocks zero")
        if plan.synthetic_profile:
            notes.append(f"SYNTHETIC routing: {name} counts made-up routing, not how this model routes; record or "
                         "pull a real trace (cope trace) before running it")
        total = int(placement.slots_total)
        if boundary_tie(plan.popularity, total):
            notes.append(f"the experts ranked {total} and {total + 1} by routing count are tied: kt-kernel's "
                         "torch.topk may keep the other one on the GPU (SGLang versions that read "
                         f"{BY_LAYER_ENV} sort each layer stably, as COPE does)")
        return ["--kt-expert-placement-strategy", "frequency", "--init-expert-location", path,
                *total_flags(total, model.n_moe_layers, model.n_routed_experts)]


SGLANG_KT = SglangKt()
