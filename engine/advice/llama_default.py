"""What llama.cpp does on its own: the command COPE recommends with its placement flags
taken out, so that llama.cpp's `--fit` (on by default since 2025-12-15) places the model
(engine/llamacpp/llama_fit.py), priced the way `cope estimate` prices any command.

This is the first comparison a llama.cpp user wants: how much COPE's command beats
running the model with no placement flags at all. A VRAM budget below the card is said to
`--fit` as `-fitt` (the MiB it leaves free: the card less the budget less COPE's own 5%
margin), so both commands have the same VRAM to use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from engine.advice.command_estimate import price_placement_command
from engine.advice.error_band import BandAnswer
from engine.core.records import record_dict
from engine.cost.cost_model import CostModel
from engine.cost.estimate import compare
from engine.cost.prefill_cost import request_time_s
from engine.cost.request import AdviseRequest
from engine.llamacpp.llama_args import parse_llama_command
from engine.hardware.memory import SAFETY_MARGIN_FRACTION
from engine.llamacpp.llama_fit import FIT_TARGET_BYTES

# What COPE's commands set that llama.cpp would otherwise choose: the placement, and the
# batch sizes COPE picks for a workload (llama.cpp's defaults then: -b 2048 -ub 512).
_PLACEMENT_VALUED = ("-ngl", "--n-cpu-moe", "-ncmoe", "-ot", "--override-tensor", "--moe-cache-mib", "--fit",
                     "-fitt", "-ub", "--ubatch-size", "-b", "--batch-size")
_PLACEMENT_SWITCHES = ("--cpu-moe", "-cmoe")
MIB = 2**20


@dataclass(frozen=True)
class LlamaDefault:
    argv: tuple[str, ...]
    tpot_s: float | None  # None: not priced (refusal says why)
    detail: str
    refusal: str | None
    ours_s: float  # what COPE's command is ranked by: TPOT, or with a workload the request time
    request_s: float | None = None  # with a workload: llama.cpp's own command's request time
    band: BandAnswer = BandAnswer(None, "not priced")  # its figure's cross-validated error band

    @property
    def objective_s(self) -> float | None:
        return self.request_s if self.request_s is not None else self.tpot_s

    @property
    def speedup(self) -> float | None:
        return None if self.objective_s is None else self.objective_s / self.ours_s

    def line(self) -> str:
        if self.objective_s is None:
            return f"llama.cpp's own placement (no placement flags, --fit): {self.refusal}"
        outcome = compare(self.ours_s, self.objective_s)
        figure = (f"request {self.request_s:.1f} s" if self.request_s is not None
                  else f"{1 / self.tpot_s:.1f} tok/s")  # type: ignore[operator]
        head = f"llama.cpp's own placement (the same command without placement flags: --fit places it) {figure}"
        if outcome == "faster":
            return f"{head}: COPE's command is {self.speedup:.2f}x that"
        return f"{head}: llama.cpp's defaults are already best here"

    def to_dict(self) -> dict:
        tokens_per_s = None if self.tpot_s is None else 1 / self.tpot_s
        return {**record_dict(self, names={"band": "error_band"}, band=self.band.to_dict(tokens_per_s)),
                "argv": list(self.argv), "speedup": self.speedup, "tokens_per_s": tokens_per_s}


def without_placement(argv: Sequence[str]) -> list[str]:
    """`argv` less every flag that places the model (and its value)."""
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        if word in _PLACEMENT_VALUED:
            skip = True
            continue
        if word in _PLACEMENT_SWITCHES:
            continue
        out.append(word)
    return out


def llama_default(request: AdviseRequest, cost_model: CostModel, ours_argv: Sequence[str], ours_s: float, *,
                  prompt_tokens: int | None = None, output_tokens: int | None = None) -> LlamaDefault:
    """Price `ours_argv` without its placement flags, as llama.cpp's --fit would place it;
    with a workload by its request time at llama.cpp's default batch sizes."""
    argv = without_placement(ours_argv)
    card = request.platform.gpu.vram_bytes
    usable = request.vram_budget_bytes - int(request.vram_budget_bytes * SAFETY_MARGIN_FRACTION)
    if card.known and usable < int(card.value) - FIT_TARGET_BYTES:
        argv += ["-fitt", str(-(-(int(card.value) - usable) // MIB))]
    price = price_placement_command(request, cost_model, parse_llama_command(argv), prompt_tokens=prompt_tokens)
    detail = price.detail + (f"; {price.fit.note}" if price.fit is not None else "")
    request_s = None
    if price.runs and output_tokens is not None and price.prefill is not None:
        request_s = request_time_s(price.prefill.ttft_s, price.tpot_s, output_tokens)
    return LlamaDefault(tuple(argv), price.tpot_s if price.runs else None, detail, price.refusal, ours_s, request_s,
                        price.band)
