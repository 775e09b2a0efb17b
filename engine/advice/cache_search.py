"""The best stock llama.cpp command with its own expert cache (engine/llamacpp/moe_cache.py),
found by pricing the commands themselves.

Searched together: the host layers (`--n-cpu-moe N`, every MoE layer being `--cpu-moe`),
the cache's size (`--moe-cache-mib`: whatever VRAM the budget leaves after the layers on
the GPU, their KV cache, buffers and COPE's 5% safety margin, in whole MiB: under LRU a bigger cache never has
fewer hits on the same routing) and the load mode (`-lm none` pins the host experts for
faster uploads, where RAM holds the copy; otherwise the file stays mapped). Each command
is priced by the very path `cope estimate` takes (engine/advice/command_estimate.py), so
estimating the printed command gives the printed figure. Beside it: the plain partition
(the same search without the cache), so the answer says what the cache is worth here.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.advice.command_estimate import CommandPrice, price_placement_command
from engine.core.records import record_dict
from engine.cost.cost_model import CostModel
from engine.cost.estimate import faster
from engine.cost.request import AdviseRequest
from engine.hardware.memory import GIB, SAFETY_MARGIN_FRACTION
from engine.llamacpp.llama_args import parse_llama_command
from engine.llamacpp.moe_cache import FIRST_RELEASE, MIB, SOURCE

# Below this the cache holds too little to be worth a line (and llama.cpp may leave every
# group uncached): 64 MiB is 24 Qwen3-30B Q4_K_M experts.
MIN_CACHE_MIB = 64


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

    @property
    def tokens_per_s(self) -> float:
        return 1.0 / self.tpot_s

    def to_dict(self) -> dict:
        return {**record_dict(self), "argv": list(self.argv), "tokens_per_s": self.tokens_per_s}


@dataclass(frozen=True)
class CacheAdvice:
    """The best command with the cache and the best without, at the same VRAM budget."""

    with_cache: PricedCommand | None  # None: no cached command fits the budget
    partition: PricedCommand | None  # None: no partition fits the budget
    tried: int

    @property
    def speedup(self) -> float | None:
        if self.with_cache is None or self.partition is None:
            return None
        return self.partition.tpot_s / self.with_cache.tpot_s

    @property
    def cache_wins(self) -> bool:
        return (self.with_cache is not None and self.partition is not None
                and faster(self.with_cache.tpot_s, self.partition.tpot_s))

    def verdict(self) -> str:
        """One line: which is faster and why."""
        if self.with_cache is None:
            return "llama.cpp's expert cache: no cached command fits this VRAM budget"
        if self.partition is None or self.cache_wins:
            return (f"llama.cpp's expert cache ({FIRST_RELEASE} or newer) is faster here: "
                    f"{self.with_cache.tokens_per_s:.1f} tok/s"
                    + (f", {self.speedup:.2f}x the best plain partition ({self.partition.tokens_per_s:.1f} tok/s)"
                       if self.partition is not None else ""))
        if self.partition.host_layers == 0:
            return (f"every expert fits on the GPU ({self.partition.tokens_per_s:.1f} tok/s): llama.cpp's expert "
                    "cache has nothing to do here")
        return (f"a plain partition is faster than llama.cpp's expert cache here ({self.partition.tokens_per_s:.1f} "
                f"against {self.with_cache.tokens_per_s:.1f} tok/s): the uploads of its misses cost more than "
                "the CPU's work they save")

    def to_dict(self) -> dict:
        return {
            "with_cache": self.with_cache.to_dict() if self.with_cache is not None else None,
            "partition": self.partition.to_dict() if self.partition is not None else None,
            "speedup": self.speedup,
            "cache_wins": self.cache_wins,
            "verdict": self.verdict(),
            "commands_priced": self.tried,
            "policy": f"LRU per group of same-layout layers ({SOURCE})",
        }


def _argv(request: AdviseRequest, model_file: str, n_cpu_moe: int, cache_mib: int, pinned: bool) -> list[str]:
    model = request.model
    argv = ["llama-server", "-m", model_file, "-ngl", "99", "-fa", "on", "-c", str(request.context_tokens),
            "-t", str(request.threads), "--fit", "off"]
    argv += ["--cpu-moe"] if n_cpu_moe >= model.n_blocks else ["--n-cpu-moe", str(n_cpu_moe)]
    if cache_mib:
        argv += ["--moe-cache-mib", str(cache_mib)]
    if pinned:
        argv += ["-lm", "none"]
    return argv


def _price(request: AdviseRequest, cost_model: CostModel, argv: list[str]) -> CommandPrice:
    return price_placement_command(request, cost_model, parse_llama_command(argv))


def search_cache(request: AdviseRequest, cost_model: CostModel, *, model_file: str | None = None) -> CacheAdvice:
    """The fastest command with llama.cpp's cache, and without, within the request's VRAM budget."""
    model = request.model
    model_file = model_file or f"{model.id}.gguf"
    # The headroom every plan of COPE's keeps (engine/hardware/memory.py): a cache that took
    # the whole budget would leave none for a long prompt's buffers.
    budget = request.vram_budget_bytes - int(request.vram_budget_bytes * SAFETY_MARGIN_FRACTION)
    best_cache: PricedCommand | None = None
    best_plain: PricedCommand | None = None
    tried = 0
    first_moe = model.moe_blocks[0]
    for n in range(first_moe, model.n_blocks + 1):  # the first N blocks' experts (dense blocks counted)
        # Without the cache the load mode changes where the weights live, not the decode price.
        plain_argv = _argv(request, model_file, n, 0, False)
        plain = _price(request, cost_model, plain_argv)
        tried += 1
        if not plain.runs or plain.memory is None or plain.memory.vram_bytes > budget:
            continue
        host = sum(b < n for b in model.moe_blocks)
        entry = PricedCommand(tuple(plain_argv), n, host, 0, False, plain.tpot_s, plain.vram_used_bytes, plain.detail)
        if best_plain is None or faster(entry.tpot_s, best_plain.tpot_s):
            best_plain = entry
        mib = int((budget - plain.memory.vram_bytes) // MIB)
        if n == first_moe or mib < MIN_CACHE_MIB:
            continue
        for pinned in (False, True):  # uploads from the mapped file, or from pinned copies (-lm none)
            argv = _argv(request, model_file, n, mib, pinned)
            priced = _price(request, cost_model, argv)
            tried += 1
            if not priced.runs or priced.memory is None or priced.memory.vram_bytes > budget:
                continue
            entry = PricedCommand(tuple(argv), n, host, mib, pinned, priced.tpot_s, priced.vram_used_bytes,
                                  priced.detail)
            if best_cache is None or faster(entry.tpot_s, best_cache.tpot_s):
                best_cache = entry
    return CacheAdvice(best_cache, best_plain, tried)


def build_takes_cache(build) -> bool | None:  # type: ignore[no-untyped-def]
    """Whether a detected stock build lists --moe-cache-mib (None: no build was read)."""
    if build is None or not build.detected:
        return None
    return build.takes("llama-server", "--moe-cache-mib")


def render_cache_advice(advice: CacheAdvice, *, build=None, synthetic: bool = False) -> list[str]:  # type: ignore[no-untyped-def]
    """The lines `cope advise` prints first: the cache's command when it wins (or what
    upgrading to a build with it would give), else one line on why a partition is faster."""
    if not advice.cache_wins:
        return [advice.verdict()]
    takes = build_takes_cache(build)
    if takes is False:
        lines = [f"Your stock llama.cpp ({build.origin}) predates its expert cache; upgrading to {FIRST_RELEASE} "
                 f"or newer would give {advice.with_cache.tokens_per_s:.1f} tok/s, "  # type: ignore[union-attr]
                 f"{advice.speedup:.2f}x the best plain partition:"]
    else:
        lines = ["Run this now: " + advice.verdict()]
    pick = advice.with_cache
    if pick is not None:
        lines.append(f"  {pick.tokens_per_s:.1f} tok/s ({pick.tpot_s * 1e3:.2f} ms/token), "
                     f"VRAM {pick.vram_bytes / GIB:.2f} GiB; {pick.detail}")
        lines.append("  " + " ".join(pick.argv))
        if takes is None:
            lines.append(f"  # needs stock llama.cpp {FIRST_RELEASE} or newer (--moe-cache-mib, PR #29887); no build "
                         "was read here (PATH or --llama-bin DIR)")
        lines.append("  # cope estimate -- <this command> prices it; the cache's hit rate rests on the "
                     + ("SYNTHETIC routing trace: record or pull a real one (cope trace)" if synthetic
                        else "replayed routing trace"))
    return lines
