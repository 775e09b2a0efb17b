"""The best stock llama.cpp command, found by pricing the commands themselves: the knobs a
llama.cpp user turns, searched together, with llama.cpp's own expert cache among them
(engine/llamacpp/moe_cache.py).

Searched together, within the VRAM budget less COPE's 5% safety margin:
- the host layers: `--n-cpu-moe N` (the first N blocks' experts), every MoE layer being
  `--cpu-moe`;
- llama.cpp's expert cache (`--moe-cache-mib`): none, or whatever VRAM the budget leaves
  after the layers on the GPU, their KV cache and buffers, in whole MiB (under LRU a bigger
  cache never has fewer hits on the same routing), and the load mode that feeds it
  (`-lm none` pins the host experts for faster uploads, where RAM holds the copy);
- with a workload (P prompt tokens, N output tokens), the micro-batch `-ub` (with `-b` as
  large), whose compute buffer takes VRAM from the layers and the cache: fewer GPU layers
  with a bigger `-ub` is a candidate like any other;
- the KV cache type of the request (`-ctk/-ctv`), which sizes the cache for the context.
Ranked by decode time per token, or with a workload by request time (TTFT + N x TPOT).

Each command is priced by the very path `cope estimate` takes (engine/advice/command_estimate.py),
so estimating the printed command gives the printed figure. The prefill of a command with the
cache is priced as without it (large batches copy cached experts on the card instead of over
PCIe: a gain not counted). Beside the best: the best without the cache, so the answer says
what the cache is worth here.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.advice.command_estimate import CommandPrice, price_placement_command
from engine.advice.error_band import BandAnswer, command_band
from engine.core.records import record_dict
from engine.cost.cost_model import CostModel
from engine.cost.estimate import faster
from engine.cost.prefill_cost import request_time_s
from engine.cost.request import AdviseRequest
from engine.hardware.memory import GIB, SAFETY_MARGIN_FRACTION
from engine.llamacpp.llama_args import parse_llama_command
from engine.llamacpp.moe_cache import FIRST_RELEASE, MIB, SOURCE

# Below this the cache holds too little to be worth a line (and llama.cpp may leave every
# group uncached): 64 MiB is 24 Qwen3-30B Q4_K_M experts.
MIN_CACHE_MIB = 64
# The micro-batches a workload tries (llama.cpp's default 512 first); -b is as large.
UBATCHES = (512, 1024, 2048, 4096)


@dataclass(frozen=True)
class PricedCommand:
    argv: tuple[str, ...]
    n_cpu_moe: int
    host_layers: int  # MoE layers whose experts stay in host memory
    cache_mib: int  # 0: no cache
    pinned: bool
    tpot_s: float
    vram_bytes: int
    detail: str
    ubatch: int | None = None  # -ub (None: llama.cpp's default)
    ttft_s: float | None = None  # with a workload: its prompt's prefill
    request_s: float | None = None  # with a workload: TTFT + N x TPOT
    band: BandAnswer = BandAnswer(None, "not priced")  # its figure's cross-validated error band

    @property
    def tokens_per_s(self) -> float:
        return 1.0 / self.tpot_s

    @property
    def placement_words(self) -> tuple[str, ...]:
        """What the search chose: the words after `--fit off` (host layers, cache, load mode, -b/-ub)."""
        return self.argv[self.argv.index("--fit") + 2:]

    @property
    def objective_s(self) -> float:
        """What the search ranks by: the request time with a workload, else TPOT."""
        return self.request_s if self.request_s is not None else self.tpot_s

    def figures(self) -> str:
        """E.g. "52.7 tok/s (18.97 ms/token)", with a workload "request 15.0 s = TTFT 6.0 s + 300 x 30.1 ms"."""
        out = f"{self.tokens_per_s:.1f} tok/s ({self.tpot_s * 1e3:.2f} ms/token)"
        if self.request_s is not None and self.ttft_s is not None:
            out += f", request {self.request_s:.1f} s (TTFT {self.ttft_s:.1f} s at -ub {self.ubatch})"
        return out

    def to_dict(self) -> dict:
        return {**record_dict(self, names={"band": "error_band"}, band=self.band.to_dict(self.tokens_per_s)),
                "argv": list(self.argv), "tokens_per_s": self.tokens_per_s}


@dataclass(frozen=True)
class CacheAdvice:
    """The best command with the cache and the best without, at the same VRAM budget."""

    with_cache: PricedCommand | None  # None: no cached command fits the budget
    partition: PricedCommand | None  # None: no partition fits the budget
    tried: int
    output_tokens: int | None = None  # the workload's (None: ranked by decode)

    @property
    def speedup(self) -> float | None:
        if self.with_cache is None or self.partition is None:
            return None
        return self.partition.objective_s / self.with_cache.objective_s

    @property
    def cache_wins(self) -> bool:
        return (self.with_cache is not None and self.partition is not None
                and faster(self.with_cache.objective_s, self.partition.objective_s))

    @property
    def best(self) -> PricedCommand | None:
        return self.with_cache if self.cache_wins else self.partition

    def _figure(self, c: PricedCommand) -> str:
        return f"request {c.request_s:.1f} s" if c.request_s is not None else f"{c.tokens_per_s:.1f} tok/s"

    def verdict(self) -> str:
        """One line: which is faster and why."""
        if self.with_cache is None:
            return "llama.cpp's expert cache: no cached command fits this VRAM budget"
        if self.partition is None or self.cache_wins:
            return (f"llama.cpp's expert cache ({FIRST_RELEASE} or newer) is faster here: {self._figure(self.with_cache)}"
                    + (f", {self.speedup:.2f}x the best plain partition ({self._figure(self.partition)})"
                       if self.partition is not None else ""))
        if self.partition.host_layers == 0:
            return (f"every expert fits on the GPU ({self._figure(self.partition)}): llama.cpp's expert cache has "
                    "nothing to do here")
        return (f"a plain partition is faster than llama.cpp's expert cache here ({self._figure(self.partition)} "
                f"against {self._figure(self.with_cache)}): the uploads of its misses cost more than the CPU's work "
                "they save")

    def to_dict(self) -> dict:
        return {
            "with_cache": self.with_cache.to_dict() if self.with_cache is not None else None,
            "partition": self.partition.to_dict() if self.partition is not None else None,
            "speedup": self.speedup,
            "cache_wins": self.cache_wins,
            "verdict": self.verdict(),
            "ranked_by": "request_s" if self.output_tokens is not None else "tpot_s",
            "commands_priced": self.tried,
            "policy": f"LRU per group of same-layout layers ({SOURCE})",
        }


def search_argv(request: AdviseRequest, model_file: str, n_cpu_moe: int, cache_mib: int, pinned: bool,
          ubatch: int | None) -> list[str]:
    model = request.model
    argv = ["llama-server", "-m", model_file, "-ngl", "99", "-fa", "on", "-c", str(request.context_tokens),
            "-t", str(request.threads)]
    if request.kv_cache_type:
        argv += ["-ctk", request.kv_cache_type, "-ctv", request.kv_cache_type]
    argv += ["--fit", "off"]
    argv += ["--cpu-moe"] if n_cpu_moe >= model.n_blocks else ["--n-cpu-moe", str(n_cpu_moe)]
    if cache_mib:
        argv += ["--moe-cache-mib", str(cache_mib)]
    if pinned:
        argv += ["-lm", "none"]
    if ubatch is not None:
        argv += ["-b", str(max(ubatch, 2048)), "-ub", str(ubatch)]
    return argv


def search_cache(request: AdviseRequest, cost_model: CostModel, *, model_file: str | None = None,
                 prompt_tokens: int | None = None, output_tokens: int | None = None) -> CacheAdvice:
    """The fastest command with llama.cpp's cache, and without, within the request's VRAM
    budget; with a workload (`prompt_tokens`, `output_tokens`) by request time, -ub searched."""
    model = request.model
    model_file = model_file or f"{model.id}.gguf"
    # The headroom every plan of COPE's keeps (engine/hardware/memory.py): a cache that took
    # the whole budget would leave none for a long prompt's buffers.
    budget = request.vram_budget_bytes - int(request.vram_budget_bytes * SAFETY_MARGIN_FRACTION)
    workload = prompt_tokens is not None and output_tokens is not None
    ubatches: tuple[int | None, ...] = UBATCHES if workload else (None,)
    best_cache: PricedCommand | None = None
    best_plain: PricedCommand | None = None
    tried = 0

    def priced(n: int, mib: int, pinned: bool, ub: int | None) -> tuple[PricedCommand | None, CommandPrice]:
        argv = search_argv(request, model_file, n, mib, pinned, ub)
        price = price_placement_command(request, cost_model, parse_llama_command(argv), prompt_tokens=prompt_tokens)
        if not price.runs or price.memory is None or price.memory.vram_bytes > budget:
            return None, price
        ttft = price.prefill.ttft_s if workload and price.prefill is not None else None
        request_s = request_time_s(ttft, price.tpot_s, output_tokens) if ttft is not None else None  # type: ignore[arg-type]
        host = sum(b < n for b in model.moe_blocks)
        band = command_band(price.regime, price.fidelity, expert_cache=mib > 0)
        return PricedCommand(tuple(argv), n, host, mib, pinned, price.tpot_s, price.vram_used_bytes, price.detail,
                             ub, ttft, request_s, band), price

    for n in range(model.moe_blocks[0], model.n_blocks + 1):  # the first N blocks' experts (dense blocks counted)
        for ub in ubatches:
            # Without the cache the load mode changes where the weights live, not the price.
            plain, price = priced(n, 0, False, ub)
            tried += 1
            if plain is None:
                continue
            if best_plain is None or faster(plain.objective_s, best_plain.objective_s):
                best_plain = plain
            mib = int((budget - price.memory.vram_bytes) // MIB)  # type: ignore[union-attr]
            if plain.host_layers == 0 or mib < MIN_CACHE_MIB:
                continue
            for pinned in (False, True):  # uploads from the mapped file, or from pinned copies (-lm none)
                cached, _ = priced(n, mib, pinned, ub)
                tried += 1
                if cached is not None and (best_cache is None or faster(cached.objective_s, best_cache.objective_s)):
                    best_cache = cached
    return CacheAdvice(best_cache, best_plain, tried, output_tokens if workload else None)


def build_takes_cache(build) -> bool | None:  # type: ignore[no-untyped-def]
    """Whether a detected stock build lists --moe-cache-mib (None: no build was read)."""
    if build is None or not build.detected:
        return None
    return build.takes("llama-server", "--moe-cache-mib")


def render_cache_advice(advice: CacheAdvice, *, build=None, synthetic: bool = False,  # type: ignore[no-untyped-def]
                        lead: bool = True) -> list[str]:
    """The lines `cope advise` prints for the search: with `lead`, its best command first
    (what upgrading to a build with the cache would give, when the build found predates
    it); else one line on the cache."""
    best = advice.best
    if not lead or best is None:
        return [advice.verdict()]
    takes = build_takes_cache(build) if advice.cache_wins else True
    if takes is False:
        lines = [f"Your stock llama.cpp ({build.origin}) predates its expert cache; upgrading to {FIRST_RELEASE} "
                 f"or newer would give {advice._figure(best)}, {advice.speedup:.2f}x the best plain partition:"]
    elif advice.cache_wins:
        lines = ["Run this now: " + advice.verdict()]
    else:
        lines = [f"Run this now: stock llama.cpp, {' '.join(best.placement_words)}; "
                 + advice.verdict()]
    lines.append(f"  {best.figures()}, VRAM {best.vram_bytes / GIB:.2f} GiB; {best.detail}")
    lines.append("  " + " ".join(best.argv))
    if advice.cache_wins and takes and build.takes("llama-server", "--moe-cache-cpu-share"):
        # --moe-cache-cpu-share came after the frequency-class eviction (b12170, #31233)
        lines.append(f"  # your build ({build.origin}) has --moe-cache-cpu-share, so it evicts by frequency classes "
                     "(b12170 on); COPE's hit rate assumes the LRU of b11480-b12169 (the newer rule's source was not "
                     "read)")
    if advice.cache_wins and takes is None:
        lines.append(f"  # needs stock llama.cpp {FIRST_RELEASE} or newer (--moe-cache-mib, PR #29887); no build "
                     "was read here (PATH or --llama-bin DIR)")
    if advice.cache_wins:
        lines.append("  # cope estimate -- <this command> prices it; the cache's hit rate rests on the "
                     + ("SYNTHETIC routing trace: record or pull a real one (cope trace)" if synthetic
                        else "replayed routing trace"))
    return lines
