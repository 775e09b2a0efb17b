"""Stock llama.cpp's commands searched beside the ranking, and llama.cpp's own placement of
the command COPE leads with: what `cope advise` prints around its run-now pick, in one
place so the app shows the same answer (issue 45 item 2, issue 43).

- the search (engine/advice/cache_search.py): host layers x llama.cpp's expert cache x load
  mode (x -ub with a workload), one GPU only, since COPE models one card's cache;
- whether its best command beats the ranking's run-now pick (then it leads);
- the lead command against the same command with no placement flags, which llama.cpp's
  `--fit` places (engine/advice/llama_default.py), by the same measure;
- what each context and KV cache type costs beside the search's best command (the
  trade-off table, engine/advice/tradeoff.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from cope_tui.options import WORKLOAD_PRESETS
from cope_tui.service.advice import cost_model_at
from engine.advice.cache_search import CacheAdvice, render_cache_advice, search_cache
from engine.advice.llama_default import LlamaDefault, llama_default
from engine.advice.tradeoff import Tradeoff, price_tradeoff
from engine.cost.estimate import faster
from engine.hardware.gpu_set import cards_of
from engine.runtimes import STOCK_NAME


@dataclass(frozen=True)
class LlamaSearch:
    cache: CacheAdvice | None  # None: not searched (several GPUs)
    default: LlamaDefault | None  # None: nothing on stock llama.cpp to compare with
    leads: bool  # the search's command beats the ranking's run-now pick
    tradeoff: Tradeoff | None = None  # None: no search, or nothing it found fits

    def heading(self) -> str:
        """What the ranking's run-now block is headed with: it is the answer only when the
        search's command does not beat it."""
        if not self.leads:
            return "Run this now"
        assert self.cache is not None
        return "Without llama.cpp's expert cache (any build), run" if self.cache.cache_wins else "COPE's ranking picks"

    def block(self, *, build=None, synthetic: bool = False,  # type: ignore[no-untyped-def]
              tradeoff: bool = True) -> str | None:
        """The search's lines and llama.cpp's own placement's line, then (with `tradeoff`) a
        blank line and the trade-off table (None: nothing searched)."""
        if self.cache is None:
            return None
        text = "\n".join(render_cache_advice(self.cache, build=build, synthetic=synthetic, lead=self.leads))
        if self.default is not None:
            text += "\n  " + self.default.line()
        if tradeoff and self.tradeoff is not None:
            text += "\n\n" + "\n".join(self.tradeoff.lines())
        return text

    def placed(self, text: str, *, build=None, synthetic: bool = False,  # type: ignore[no-untyped-def]
               tradeoff: bool = True) -> str:
        """`text` (the run-now block, then a blank line and the rest) with the search's block
        placed: first when its command leads, else right after the run-now block."""
        block = self.block(build=build, synthetic=synthetic, tradeoff=tradeoff)
        if block is None:
            return text
        if self.leads:
            return f"{block}\n\n{text}"
        head, sep, rest = text.partition("\n\n")
        return f"{head}\n{block}{sep}{rest}"

    def to_dict(self) -> dict:
        """The keys `cope advise --json` carries for them."""
        return {"llama_cpp_cache": self.cache.to_dict() if self.cache is not None else None,
                "llama_cpp_default": self.default.to_dict() if self.default is not None else None,
                "tradeoff": self.tradeoff.to_dict() if self.tradeoff is not None else None}


def search_beside(advice, runs, workload) -> LlamaSearch:  # type: ignore[no-untyped-def]
    """The search for `advice`'s plan (by request time with a workload), whether it leads
    the ranking's pick in `runs`, llama.cpp's own placement of the lead command, and the
    trade-off table beside the search's best."""
    cache = _cache_advice(advice, workload)
    return beside(advice, runs, workload, cache, _tradeoff(advice, cache, workload))


def beside(advice, runs, workload, cache: CacheAdvice | None,  # type: ignore[no-untyped-def]
           tradeoff: Tradeoff | None = None) -> LlamaSearch:
    """`cache` and `tradeoff` (made for `advice`'s plan) beside the ranking's picks in `runs`:
    the runtimes found can change the run-now pick, not the search."""
    leads = _search_leads(cache, runs)
    return LlamaSearch(cache, _llama_default(advice, runs, cache, leads, workload), leads, tradeoff)


# TTFT in the trade-off table without a workload: the chat workload's prompt.
DEFAULT_PROMPT = "chat"


def _tradeoff(advice, cache, workload) -> Tradeoff | None:  # type: ignore[no-untyped-def]
    """What each context and KV cache type costs, beside the search's best command
    (engine/advice/tradeoff.py); None where there is no search (two or more cards)."""
    if cache is None or cache.best is None:
        return None
    if workload is None:
        prompt = WORKLOAD_PRESETS[DEFAULT_PROMPT][0]
        return price_tradeoff(advice.rec.request, advice.cost_model, cache.best, prompt_tokens=prompt,
                              prompt_basis=f"the {DEFAULT_PROMPT} workload's: no workload given",
                              cost_model_at=cost_model_at(advice))
    return price_tradeoff(advice.rec.request, advice.cost_model, cache.best, prompt_tokens=workload.prompt_tokens,
                          prompt_basis="the workload's", output_tokens=workload.output_tokens,
                          cost_model_at=cost_model_at(advice))


def _cache_advice(advice, workload) -> CacheAdvice | None:  # type: ignore[no-untyped-def]
    request = advice.rec.request
    if len(cards_of(request.platform.gpu)) != 1:
        return None
    return cache_search_for(advice, workload)


def cache_search_for(advice, workload, *, model_file: str | None = None) -> CacheAdvice:  # type: ignore[no-untyped-def]
    """llama.cpp's expert-cache search for `advice`'s plan as `cope advise` runs it: with a
    `workload` by request time, -ub tried (engine/advice/cache_search.py)."""
    if workload is None:
        return search_cache(advice.rec.request, advice.cost_model, model_file=model_file)
    return search_cache(advice.rec.request, advice.cost_model, model_file=model_file,
                        prompt_tokens=workload.prompt_tokens, output_tokens=workload.output_tokens)


def _search_leads(cache: CacheAdvice | None, runs) -> bool:  # type: ignore[no-untyped-def]
    """Whether the searched command beats the ranking's run-now pick (by what both rank by)."""
    if cache is None or cache.best is None:
        return False
    if runs.run_now is None:  # the ranking found nothing that fits RAM: its refusal leads
        return False
    return faster(cache.best.objective_s, runs.seconds(runs.run_now.row))


def _llama_default(advice, runs, cache, leads, workload) -> LlamaDefault | None:  # type: ignore[no-untyped-def]
    """The command advise leads with, against llama.cpp's own placement of it (--fit), by
    the same measure (TPOT, or with a workload the request time)."""
    if cache is None:
        return None
    request = advice.rec.request
    work = {} if workload is None else {"prompt_tokens": workload.prompt_tokens,
                                        "output_tokens": workload.output_tokens}
    if leads:
        pick = cache.best
        return llama_default(request, advice.cost_model, pick.argv, pick.objective_s, **work)
    if runs.run_now is None:
        return None
    export = runs.export(advice.rec, runs.run_now)
    if export.runtime != STOCK_NAME:
        return None
    return llama_default(request, advice.cost_model, export.argv, runs.seconds(runs.run_now.row), **work)
