"""A llama.cpp command a person already runs, priced beside COPE's ranking.

The command's placement (engine/llamacpp/llama_placement.py: `-ngl`, `-ot`, `--n-cpu-moe`,
`--cpu-moe`, GGML_OP_OFFLOAD_MIN_BATCH, CPU only) is priced per decode token with the
same cost model as the ranking, at the command's own settings (`command_settings`:
threads, context, and for llama-bench the depth it decodes from), and checked against the
GPU's VRAM and the machine's RAM: a command that would not fit is reported as such, with
the arithmetic, never with a speed. Two or more cards (`--gpu 2x ...`, -ts, -dev, =CUDA1,
CUDA_VISIBLE_DEVICES): each card's share by llama.cpp's layer split and overrides,
checked against its own memory and priced with its own bandwidth and the hand-overs
between cards (engine/llamacpp/card_price.py); `-sm row` is refused as not modelled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Mapping

from engine.advice.advise import Recommendation
from engine.advice.command_flags import carry_over
from engine.advice.command_prefill import bench_prompt_tokens, price_prefill
from engine.advice.error_band import BandAnswer, band_for, placement_regime
from engine.advice.run_advice import compose_export, who_runs
from engine.cost.cost_model import CostModel
from engine.cost.estimate import Estimate, compare, faster
from engine.cost.prefill_cost import DEFAULT_BATCH, DEFAULT_UBATCH, PrefillCost, extra_vram_bytes
from engine.cost.request import AdviseRequest
from engine.hardware.cpu_compute import hybrid_of
from engine.hardware.gpu_set import cards_of
from engine.llamacpp.builds import LlamaBuild, manifest
from engine.llamacpp.card_price import card_cost, place_on_cards
from engine.llamacpp.device_split import NotPriced
from engine.llamacpp.llama_args import LlamaCommand, command_notes
from engine.llamacpp.llama_fit import FitOutcome, fit_outcome
from engine.llamacpp.llamacpp_flags import former_options
from engine.llamacpp.llama_placement import (
    LlamaPlacement,
    PlacementCost,
    PlacementMemory,
    page_cache_stream_s,
    layer_set_kind,
    placement_cost,
    placement_memory,
    placement_of,
)
from engine.llamacpp.moe_cache_price import CacheSetting, cache_for_placement, describe_cache
from engine.llamacpp.tensor_overrides import buffer_problem
from engine.models.model import ModelSpec
from engine.models.model_names import model_from_file_name
from engine.runtimes import STOCK_NAME
from engine.runtimes.export import Export
from engine.runtimes.llamacpp import IK

IK_NAME = IK.info.name

LLAMA_BENCH_N_GEN = 128  # tools/llama-bench/llama-bench.cpp: the default -n


def command_settings(command: LlamaCommand, request: AdviseRequest) -> dict[str, Any]:
    """The request fields the command sets, where they differ from `request`'s: -t, the
    KV cache type, and the context; llama-bench decodes -n tokens from depth -d, so it
    attends to d + n/2 tokens on average and reserves d + n."""
    want: dict[str, Any] = {"threads": command.threads or llama_default_threads(request),
                            "kv_bytes_per_element": command.kv_bytes_per_element}
    if command.tool == "llama-bench":
        n_gen = command.n_gen or LLAMA_BENCH_N_GEN
        want["context_tokens"] = command.n_depth + n_gen
        want["attention_tokens"] = command.n_depth + n_gen // 2
    elif command.context:
        want["context_tokens"] = command.context
    buffer = _extra_buffer_bytes(request.model, command)
    if buffer > 0:  # the command's -ub compute buffer: VRAM COPE's candidates cannot use
        want["vram_budget_bytes"] = int(request.vram_budget_bytes - buffer)
    return {k: v for k, v in want.items() if getattr(request, k) != v}


def llama_default_threads(request: AdviseRequest) -> int:
    """The -t llama.cpp takes when a command gives none: on a hybrid Intel CPU its P-cores
    (common/common.cpp cpu_get_num_math on Linux: cpu_count_math_cpus skips the efficiency
    cores, "efficiency cores harm lockstep threading", and counts one thread a core), else the
    request's (the physical cores unless the person said otherwise)."""
    hybrid = hybrid_of(request.platform.cpu)
    return hybrid.performance.cores if hybrid is not None else request.threads


def _extra_buffer_bytes(model: ModelSpec, command: LlamaCommand) -> float:
    """VRAM the command's -ub/-b compute buffer takes beyond the reserve (0 at -ub 512 and below)."""
    ubatch = min(command.ubatch or DEFAULT_UBATCH, command.batch or DEFAULT_BATCH)
    return extra_vram_bytes(model, ubatch) if ubatch > DEFAULT_UBATCH else 0.0


@dataclass(frozen=True)
class CommandPrice:
    """Your command: what it costs per token, where its weights go, whether it runs."""

    detail: str  # where the placement puts the weights
    cost: PlacementCost | None  # None: not priced (it would not run, or is not modelled)
    memory: PlacementMemory | None
    fidelity: str
    refusal: str | None = None  # why it is not priced ("would not run: ...", "not modelled: ...")
    prefill: "PrefillCost | None" = None  # llama-bench's pp test (engine/advice/command_prefill.py); None: none
    fit: FitOutcome | None = None  # what llama.cpp's --fit made of a command without -ngl (None: it does not apply)
    regime: str | None = None  # where it puts the routed experts (engine/advice/error_band.py); None: not priced

    @property
    def band(self) -> BandAnswer:
        """Its figure's cross-validated error band (engine/advice/error_band.py)."""
        return band_for(self.regime, self.fidelity) if self.runs else BandAnswer(None, "not priced")

    @property
    def runs(self) -> bool:
        """Priced: it fits, and COPE has its figure (`verdict` says why not)."""
        return self.refusal is None

    @property
    def verdict(self) -> str:
        """"priced"; "would_not_run" (it does not fit: the arithmetic is in `refusal`); or
        "not_priced" (it may run, but COPE does not model what it does: more than one GPU,
        or a placement llama.cpp's --fit picks that COPE cannot follow)."""
        if self.refusal is None:
            return "priced"
        return "would_not_run" if self.refusal.startswith("would not run") else "not_priced"

    @property
    def tpot_s(self) -> float:
        return self.cost.tpot_s if self.cost is not None else float("inf")

    @property
    def tokens_per_s(self) -> float:
        return 1.0 / self.tpot_s if self.cost is not None else 0.0

    @property
    def vram_used_bytes(self) -> int:
        return self.memory.vram_bytes if self.memory is not None else 0


@dataclass(frozen=True)
class CommandEstimate:
    """A command priced beside COPE's best (what `cope estimate` shows)."""

    command: LlamaCommand
    request: AdviseRequest  # what it was priced with (the command's settings)
    maps_to: str  # the candidate kind the placement is (partition-first, ..., "layer set", "cpu only")
    yours: CommandPrice
    best: Estimate | None  # COPE's best at the same settings (None: no ranking, `no_ranking` says why)
    rank: int | None  # where the command would rank among the candidates, 1 = fastest (None: not priced)
    of: int  # candidates ranked
    export: Export | None  # the command of COPE's best, with the command's binary and model file
    nearest_runnable: Estimate | None  # when the best cannot run on stock llama.cpp: the nearest that can
    notes: tuple[str, ...]  # about the command and how it was priced
    ranking_notes: tuple[str, ...]  # every assumption and caveat of the ranking it was priced beside
    cpu_moe_blocks: tuple[int, ...]  # the blocks whose experts the command keeps (all) on the CPU
    no_ranking: str | None = None  # why there is no ranking at the command's settings
    tied_with: tuple[str, ...] = ()  # the candidates exactly as fast as the command (same rank)
    paper_runs_on: str = ""  # which runtime `best` (rank 1 on paper) needs, in words

    @property
    def runnable(self) -> Estimate | None:
        """COPE's best that the export's runtime runs: `best` itself, or the nearest that runs."""
        return self.nearest_runnable if self.nearest_runnable is not None else self.best

    @property
    def runnable_is(self) -> str | None:
        """`runnable` against the command, as `best_is`."""
        return self.nearest_is if self.nearest_runnable is not None else self.best_is

    @property
    def runnable_speedup(self) -> float | None:
        """How many times faster `runnable` is than the command (None: either unpriced)."""
        if self.runnable is None or not self.yours.runs:
            return None
        return self.yours.tpot_s / self.runnable.tpot_s

    @property
    def stages(self) -> bool:
        """The command copies its CPU experts to the GPU every step (GGML_OP_OFFLOAD_MIN_BATCH)."""
        return self.maps_to.endswith("(stage)")

    @property
    def speedup(self) -> float | None:
        """How many times faster COPE's best is than the command (None: either is unpriced)."""
        if self.best is None or not self.yours.runs:
            return None
        return self.yours.tpot_s / self.best.tpot_s

    @property
    def best_is(self) -> str | None:
        """COPE's best against the command: "faster", "as_fast", "slower" (None: either unpriced)."""
        if self.best is None or not self.yours.runs:
            return None
        return compare(self.best.tpot_s, self.yours.tpot_s)

    @property
    def nearest_is(self) -> str | None:
        """The nearest candidate llama.cpp runs against the command, as `best_is`."""
        if self.nearest_runnable is None or not self.yours.runs:
            return None
        return compare(self.nearest_runnable.tpot_s, self.yours.tpot_s)


def price_command(rec: Recommendation, cost_model: CostModel, command: LlamaCommand,
                  builds: Mapping[str, LlamaBuild] | None = None) -> CommandEstimate:
    """Price `command`'s placement with `rec`'s request (already at the command's
    settings) and `cost_model`; COPE's command is spelled for `builds` (found here)."""
    request = rec.request
    yours, placement, stage, notes, blocks = _yours(request, cost_model, command)
    # COPE's best at the command's settings, for the runtime the command is written for: its
    # command keeps the command's other flags.
    export = carry_over(compose_export(rec, rec.best, model_path=command.model_path, binary=command.tool,
                                       builds=builds, runtime=command_runtime(command)), command)
    nearest = rec.estimate_of(export.exported_id) if export.nearest_id is not None else None
    # A tie ranks as equal: 1 + the candidates strictly faster (beyond float noise).
    rank = 1 + sum(faster(e.tpot_s, yours.tpot_s) for e in rec.estimates) if yours.runs else None
    tied = tuple(e.candidate.id for e in rec.estimates if yours.runs and compare(e.tpot_s, yours.tpot_s) == "as_fast")
    return CommandEstimate(command, request, _maps_to(placement, stage), yours, rec.best, rank, len(rec.estimates),
                           export, nearest, notes, tuple(rec.notes), blocks, tied_with=tied,
                           paper_runs_on=who_runs(rec, rec.best))


def command_runtime(command: LlamaCommand) -> str:
    """The runtime a command is written for: ik_llama.cpp when it uses an option only
    ik_llama.cpp's program parses (-fmoe, -rtr, -mla, ...: its flag manifest has it, stock
    llama.cpp's at the commit read does not), else stock llama.cpp. An option older stock
    builds took before a rename (`-mmp 0`, `--no-mmap`: llamacpp_flags.former_options) says
    an older stock build, which is what most commands that carry it are run with."""
    stock = set(manifest(STOCK_NAME)["programs"].get(command.tool, {}).get("options", ()))
    stock |= former_options(command.tool)
    ik = manifest(IK_NAME)["programs"].get(command.tool, {}).get("options", ())
    words = [w.split("=", 1)[0] for _, group in command.args for w in group[:1] if w.startswith("-")]
    return IK_NAME if any(w in ik and w not in stock for w in words) else STOCK_NAME


def price_command_alone(request: AdviseRequest, cost_model: CostModel, command: LlamaCommand,
                        no_ranking: str) -> CommandEstimate:
    """`command` priced with no ranking beside it (`no_ranking`: why there is none, e.g. a
    budget that cannot hold the context's KV cache): usually "would not run", with its
    arithmetic."""
    yours, placement, stage, notes, blocks = _yours(request, cost_model, command)
    return CommandEstimate(command, request, _maps_to(placement, stage), yours, None, None, 0, None, None, notes, (),
                           blocks, no_ranking)


def _yours(request: AdviseRequest, cost_model: CostModel, command: LlamaCommand,  # type: ignore[no-untyped-def]
           prompt_tokens: int | None = None, output_first: bool | None = None):
    """(the command's price, its placement, whether it stages CPU experts, notes, the
    blocks whose experts it keeps on the CPU). `output_first`: whether -ngl offloads the
    output layer first (engine/llamacpp/llama_placement.py; None: as the command's runtime
    does, a current stock build yes, ik_llama.cpp no)."""
    model = request.model
    has_gpu = request.platform.gpu.vram_bytes.known and int(request.platform.gpu.vram_bytes.value) > 0
    if output_first is None:
        output_first = command_runtime(command) != IK_NAME
    placement = placement_of(command, model, has_gpu=has_gpu, output_first=output_first)
    notes = list(command_notes(command, model)) + list(placement.notes)
    one_card = len(cards_of(request.platform.gpu)) == 1
    fit = fit_outcome(request, command, placement) if has_gpu and one_card else None
    if fit is not None:  # no -ngl: llama.cpp's --fit decides (engine/llamacpp/llama_fit.py)
        placement = fit.placement
        notes.append(fit.note)
    if command.model_path and not _is_model_file(command.model_path, model):
        notes.append(f"-m {command.model_path}: priced as {model.name} {request.quant.name}, the model in use "
                     "(give that file as the model to price it instead)")
    stage = command.stages_cpu_experts and bool((placement.expert_cpu_share > 0).any())
    yours = _price(request, cost_model, placement, command, stage, fit, prompt_tokens)
    blocks = tuple(model.moe_blocks[i] for i, share in enumerate(placement.expert_cpu_share) if share == 1.0)
    return yours, placement, stage, tuple(notes), blocks


def price_placement_command(request: AdviseRequest, cost_model: CostModel, command: LlamaCommand, *,
                            prompt_tokens: int | None = None, output_first: bool | None = None) -> CommandPrice:
    """`command`'s own price, without the ranking beside it (the request already at the
    command's settings): what bench/published.py compares with published runs. With
    `prompt_tokens`, its prefill of a prompt that long at its -ub/-b (else llama-bench's pp test)."""
    return _yours(request, cost_model, command, prompt_tokens, output_first)[0]


def _price(request: AdviseRequest, cost_model: CostModel, placement: LlamaPlacement, command: LlamaCommand,
           stage: bool, fit: FitOutcome | None = None, prompt_tokens: int | None = None) -> CommandPrice:
    model = request.model
    detail = placement.describe(model) + (", routed CPU experts copied to the GPU every step" if stage else "")
    if fit is not None and fit.moved:
        detail += ", as llama.cpp's --fit places it" if fit.unpriced is None else " (before llama.cpp's --fit)"
    has_gpu = request.platform.gpu.vram_bytes.known and int(request.platform.gpu.vram_bytes.value) > 0
    cards = None
    names_devices = command.devices or command.split_mode or command.main_gpu is not None
    if has_gpu and (len(cards_of(request.platform.gpu)) > 1 or command.multi_gpu or names_devices):
        # two or more cards, or a command that names another or chooses its devices (-dev none,
        # -sm none -mg -1: no GPU at all) (engine/llamacpp/card_price.py)
        try:
            cards = place_on_cards(request, command, kv_offload=not command.no_kv_offload,
                                   extra_buffer_bytes=_extra_buffer_bytes(model, command))
        except NotPriced as why:
            return CommandPrice(detail, None, None, cost_model.fidelity, str(why), fit=fit)
    memory = with_compute_buffer(placement_memory(request, placement, mapped=not command.no_mmap,
                                                  kv_offload=not command.no_kv_offload), model, command)
    refused = buffer_problem(command.overrides)
    if refused is not None:
        return CommandPrice(detail, None, memory, cost_model.fidelity, refused, fit=fit)
    cached = None
    if command.moe_cache_mib and has_gpu:
        if cards is not None and len(cards.devices.names) > 1:
            return CommandPrice(detail, None, memory, cost_model.fidelity,
                                "not modelled: llama.cpp's expert cache over two or more cards (COPE models "
                                "one card's cache)", fit=fit)
        if command.moe_cache_cpu_share:
            return CommandPrice(detail, None, memory, cost_model.fidelity,
                                "not modelled: --moe-cache-cpu-share (which misses llama.cpp computes on the CPU "
                                "was not read in its source; COPE prices the cache with every miss uploaded: "
                                "leave it out or give 0)", fit=fit)
        setting = CacheSetting(command.moe_cache_mib, pinned=command.no_mmap)
        cached = cache_for_placement(request, cost_model, placement.gpu_blocks, placement.expert_cpu_share, setting)
        memory = replace(memory, vram_bytes=memory.vram_bytes + cached.replay.vram_bytes)
        detail += "; " + describe_cache(cached)
    if fit is not None and fit.unpriced is not None:
        return CommandPrice(detail, None, memory, cost_model.fidelity, fit.unpriced, fit=fit)
    if cards is None or len(cards.devices.names) == 1:  # one card: the placement's own check (and --fit's)
        problem = memory.problem()
    else:  # each card against its own memory
        problem = cards.memory.problem() or (None if memory.ram.runs else f"would not run: {memory.ram.describe()}")
    if problem is not None:
        return CommandPrice(detail, None, memory, cost_model.fidelity, problem, fit=fit)
    cost = placement_cost(request, cost_model, placement, stage=stage, kv_offload=not command.no_kv_offload,
                          cached=cached)
    if memory.ram.streams:  # the mapped file is larger than RAM: it runs, reading experts from disk
        cost = replace(cost, page_cache_s=page_cache_stream_s(request, placement, memory.ram))
        detail += f"; {memory.ram.describe()}"
    if cards is not None and len(cards.devices.names) > 1:  # each card's bytes at its own bandwidth, hand-overs
        cost, card_note = card_cost(request, command, cards, cost,
                                    float(request.platform.gpu.mem_bandwidth_bytes_per_s.value))  # type: ignore[arg-type]
        detail += f"; {card_note}"
    prompt = bench_prompt_tokens(command) if prompt_tokens is None else prompt_tokens
    prefill = price_prefill(request, placement, memory, command, prompt, has_gpu=has_gpu)
    regime = placement_regime(placement.expert_cpu_share, has_gpu=has_gpu, cpu_only=placement.cpu_only)
    return CommandPrice(detail, cost, memory, cost_model.fidelity, prefill=prefill, fit=fit, regime=regime)


def with_compute_buffer(memory: PlacementMemory, model: ModelSpec, command: LlamaCommand) -> PlacementMemory:
    """`memory` with the command's -ub/-b compute buffer in VRAM beyond the reserve (which
    holds llama.cpp's at its default -ub 512): llama.cpp allocates it when it creates the
    context, for decode too, so a -ub whose buffer does not fit stops the whole command."""
    buffer = _extra_buffer_bytes(model, command)
    if memory.vram_bytes == 0 or buffer == 0:
        return memory
    return replace(memory, vram_bytes=int(memory.vram_bytes + buffer))


def _maps_to(placement: LlamaPlacement, stage: bool) -> str:
    if placement.cpu_only:
        return "cpu only"
    layer_set = placement.whole_layer_set
    kind = layer_set_kind(layer_set) if layer_set is not None else "layer set"
    return kind + (" (stage)" if stage else "")


def _is_model_file(path: str, model) -> bool:  # type: ignore[no-untyped-def]
    """Whether `path` is the model being priced: its file, or a file named after it."""
    exact = model.exact_bytes
    if exact is None:
        named = model_from_file_name(path)
        return named is not None and named.model_id == model.id
    try:
        return os.path.samefile(path, exact.source)
    except OSError:
        return os.path.abspath(path) == os.path.abspath(exact.source)
