"""What each context and KV cache type costs: the small table `cope advise` prints beside its
answer (issue 45 item 1). For context 8k, 16k, 32k and 64k, each with an f16 and a q8_0 KV
cache: the best stock llama.cpp command's decode tok/s, its TTFT and its VRAM, or why no
command fits.

Each cell is priced by the path the answer's own search takes (engine/advice/cache_search.py:
`search_argv` spells the command, engine/advice/command_estimate.py prices it, within the same
budget less COPE's 5% margin), but not by the whole search, which costs about 100 commands a
cell: what the answer chose beside its placement is held fixed (its -b/-ub, its load mode),
llama.cpp's expert cache is left out, and only the host layers (`--n-cpu-moe N`) are searched.
With those held, a layer moved to the GPU never makes decode or prefill slower and never
makes VRAM smaller, so the best command is the smallest N that fits, found by bisection
(about 6 commands a cell).

Decode is priced where the answer's is: at the request's mean depth with a workload, else at
half the context (a conversation that fills it). TTFT is the workload's prompt, else a default
prompt the caller names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from engine.advice.cache_search import PricedCommand, search_argv
from engine.advice.command_estimate import CommandPrice, price_placement_command
from engine.core.records import record_dict
from engine.cost.analytic_cost import KV_TYPE_BYTES
from engine.cost.cost_model import CostModel
from engine.cost.request import AdviseRequest
from engine.hardware.memory import GIB, SAFETY_MARGIN_FRACTION
from engine.llamacpp.llama_args import parse_llama_command

CONTEXTS_TOKENS = (8192, 16384, 32768, 65536)
KV_TYPES = ("f16", "q8_0")


@dataclass(frozen=True)
class TradeoffCell:
    context_tokens: int
    kv_cache_type: str
    argv: tuple[str, ...] | None  # None: no command fits
    n_cpu_moe: int | None
    tpot_s: float | None
    ttft_s: float | None
    vram_used_bytes: int | None
    refusal: str | None = None  # why no command fits (None: it does)
    fidelity: str = ""  # the cost model that priced it ("": not priced)

    @property
    def fits(self) -> bool:
        return self.refusal is None

    @property
    def tokens_per_s(self) -> float | None:
        return None if self.tpot_s is None else 1.0 / self.tpot_s

    def to_dict(self) -> dict:
        return record_dict(self, fits=self.fits, tokens_per_s=self.tokens_per_s)


@dataclass(frozen=True)
class Tradeoff:
    cells: tuple[TradeoffCell, ...]
    prompt_tokens: int  # the prompt TTFT is priced for
    prompt_basis: str  # "workload" or what the default is
    held_fixed: str  # what the cells share with the answer, in words
    decode_at: str  # what a decode step attends to, in words
    commands_priced: int

    def cell(self, context_tokens: int, kv_cache_type: str) -> TradeoffCell:
        return next(c for c in self.cells if c.context_tokens == context_tokens and c.kv_cache_type == kv_cache_type)

    def to_dict(self) -> dict:
        return record_dict(self)

    def lines(self) -> list[str]:
        """The table as `cope advise` prints it, short."""
        out = [f"What context and KV cache type cost (stock llama.cpp; TTFT of a {self.prompt_tokens}-token prompt, "
               f"{self.prompt_basis}):",
               f"  each the fewest --n-cpu-moe layers that fit, {self.held_fixed}; decode {self.decode_at}",
               f"  {'context':>7} {'KV':<5} {'tok/s':>6} {'TTFT s':>7} {'VRAM GiB':>9}  placement"]
        for c in self.cells:
            head = f"  {c.context_tokens:>7} {c.kv_cache_type:<5}"
            if not c.fits:
                out.append(f"{head} does not fit: {c.refusal}")
                continue
            ttft = "-" if c.ttft_s is None else f"{c.ttft_s:.2f}"
            out.append(f"{head} {c.tokens_per_s:>6.1f} {ttft:>7} {c.vram_used_bytes / GIB:>9.2f}  "
                       f"{_placement(c.argv)}")  # type: ignore[arg-type]
        kinds = {c.fidelity for c in self.cells if c.fidelity}
        if len(kinds) > 1:  # a measured profile covers some contexts only (each cell's cost model: its own)
            out.append("  priced " + "; ".join(
                f"{kind}: " + ", ".join(f"{c.context_tokens} {c.kv_cache_type}" for c in self.cells if c.fidelity == kind)
                for kind in sorted(kinds)))
        return out


def _placement(argv: tuple[str, ...]) -> str:
    if "--cpu-moe" in argv:
        return "--cpu-moe"
    return f"--n-cpu-moe {argv[argv.index('--n-cpu-moe') + 1]}"


def price_tradeoff(request: AdviseRequest, cost_model: CostModel, answer: PricedCommand, *, prompt_tokens: int,
                   prompt_basis: str, cost_model_at: Callable[[AdviseRequest], CostModel],
                   output_tokens: int | None = None,
                   contexts: tuple[int, ...] = CONTEXTS_TOKENS, kv_types: tuple[str, ...] = KV_TYPES) -> Tradeoff:
    """Every (context, KV type) cell priced with `answer`'s -ub and load mode held (the search's
    best command); `output_tokens` given: the workload's request, whose tokens a context must hold.
    A cost model prices one context and KV type (the depth a decode step attends to, the
    cache's bytes): `cost_model` is `request`'s, `cost_model_at` gives another cell's."""
    model_file = answer.argv[answer.argv.index("-m") + 1]
    budget = request.vram_budget_bytes - int(request.vram_budget_bytes * SAFETY_MARGIN_FRACTION)
    workload = output_tokens is not None
    count = [0]

    models: dict[tuple[int, float], CostModel] = {_cell_key(request): cost_model}

    def price(at: AdviseRequest, n: int, prompt: int | None) -> tuple[tuple[str, ...], CommandPrice]:
        argv = search_argv(at, model_file, n, 0, answer.pinned, answer.ubatch)
        count[0] += 1
        key = _cell_key(at)
        if key not in models:
            models[key] = cost_model_at(at)
        return tuple(argv), price_placement_command(at, models[key], parse_llama_command(argv), prompt_tokens=prompt)

    def fits(at: AdviseRequest, n: int) -> bool:
        _, p = price(at, n, None)
        return p.memory is not None and p.memory.vram_bytes <= budget

    cells = []
    for context in contexts:
        for kv in kv_types:
            need = prompt_tokens + (output_tokens or 0)
            if workload and need > context:
                cells.append(TradeoffCell(context, kv, None, None, None, None, None,
                                          f"the request's {need} tokens do not fit in {context}"))
                continue
            at = replace(request, context_tokens=context, kv_bytes_per_element=KV_TYPE_BYTES[kv],
                         kv_cache_type=None if kv == "f16" else kv)
            cells.append(_cell(at, context, kv, price, fits, prompt_tokens, budget))
    held = ("the answer's " + (f"-ub {answer.ubatch}" if answer.ubatch is not None else "-ub (llama.cpp's default)")
            + (" and -lm none" if answer.pinned else "") + " held, no expert cache")
    decode_at = (f"at the request's mean depth, {request.attention_tokens} tokens" if workload
                 and request.attention_tokens is not None else "at half the context")
    return Tradeoff(tuple(cells), prompt_tokens, prompt_basis, held, decode_at, count[0])


def _cell_key(request: AdviseRequest) -> tuple[int, float]:
    return request.context_tokens, request.kv_bytes_per_element


def _cell(at: AdviseRequest, context: int, kv: str, price, fits, prompt_tokens: int,  # type: ignore[no-untyped-def]
          budget: int) -> TradeoffCell:
    """The smallest N of `--n-cpu-moe N` whose VRAM fits `budget`, priced (bisection: VRAM
    never grows as N grows)."""
    model = at.model
    lo, hi = model.moe_blocks[0], model.n_blocks  # n_blocks: every MoE layer's experts on the CPU (--cpu-moe)
    if not fits(at, hi):
        return TradeoffCell(context, kv, None, None, None, None, None,
                            f"even --cpu-moe needs more than the {budget / GIB:.2f} GiB budget (less COPE's margin)")
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(at, mid):
            hi = mid
        else:
            lo = mid + 1
    argv, p = price(at, lo, prompt_tokens)
    if not p.runs:  # it fits VRAM, yet does not run (RAM: more host layers need more of it)
        return TradeoffCell(context, kv, argv, lo, None, None, p.vram_used_bytes, p.refusal, p.fidelity)
    ttft = p.prefill.ttft_s if p.prefill is not None else None
    return TradeoffCell(context, kv, argv, lo, p.tpot_s, ttft, p.vram_used_bytes, fidelity=p.fidelity)
