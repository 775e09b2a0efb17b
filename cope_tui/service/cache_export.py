"""`cope export --candidate llama-cache`: the stock llama.cpp command with its own expert
cache that `cope advise` leads with (engine/advice/cache_search.py), as an Export, so it is
saved, written and shown the way every other export is. The app's Export pane offers the
same export (`cache_offer` says whether, and why not) and composes it here too."""

from __future__ import annotations

from dataclasses import dataclass

from cope_tui.service.llama_search import cache_search_for
from engine.advice.cache_search import CacheAdvice, build_takes_cache
from engine.core.errors import CopeInputError
from engine.llamacpp.command_line import CommandLine
from engine.llamacpp.moe_cache import FIRST_RELEASE, SOURCE
from engine.runtimes import STOCK_NAME
from engine.runtimes.base import Placeholder
from engine.runtimes.export import GGUF_PLACEHOLDER, Export

LLAMA_CACHE_ID = "llama-cache"


def cache_export(advice, *, runtime: str, binary: str | None, model_path: str | None,  # type: ignore[no-untyped-def]
                 workload=None, found: CacheAdvice | None = None) -> Export:
    """The cache's command for `advice`'s plan (or the plain partition, said so, when that is
    faster). With a `workload` (engine/advice/workload.py) the search ranks by request time and
    tries -ub, as `cope advise` searches it; `found`: that search already made for this plan
    (the app's), its -m word replaced by the file named here."""
    if runtime not in (STOCK_NAME, "stock"):
        raise CopeInputError(f"--candidate {LLAMA_CACHE_ID}: llama.cpp's expert cache is stock llama.cpp's "
                             f"(--moe-cache-mib, {FIRST_RELEASE} or newer); COPE does not export it for {runtime}")
    if binary not in (None, "llama-server"):
        raise CopeInputError(f"--candidate {LLAMA_CACHE_ID}: exported for llama-server (llama-bench's cache option "
                             "was not read in its source)")
    request = advice.rec.request
    # The file named for the command, else the GGUF the model was read from (as every other
    # export), else a placeholder said as such.
    model_file = model_path or request.model.gguf_path or f"{request.model.id}.gguf"
    if found is None:
        found = cache_search_for(advice, workload, model_file=model_file)
    pick = found.with_cache if found.cache_wins else found.partition
    if pick is None:
        raise CopeInputError(f"--candidate {LLAMA_CACHE_ID}: {found.verdict()}")
    notes = [f"needs stock llama.cpp {FIRST_RELEASE} or newer (--moe-cache-mib, PR #29887); cache modelled as "
             f"{SOURCE} (LRU)"] if found.cache_wins else []
    if request.trace.meta.origin == "synthetic":
        notes.append("SYNTHETIC routing: the cache's hit rate rests on a synthetic trace; record or pull a real one "
                     "(cope trace)")
    unknown = () if model_path or request.model.gguf_path else (Placeholder(model_file, GGUF_PLACEHOLDER),)
    return Export(
        candidate_id=LLAMA_CACHE_ID,
        exported_id=LLAMA_CACHE_ID if found.cache_wins else "partition-first",
        label="runs-on-stock",
        reason=found.verdict() + f"; {pick.detail}",
        command=CommandLine.of_words(_named(pick.argv, model_file)),
        candidate_tpot_s=pick.tpot_s,
        runtime=STOCK_NAME,
        notes=tuple(notes),
        spelled_for=f"stock llama.cpp {FIRST_RELEASE} or newer",
        placeholders=unknown,
    )


def _named(argv: tuple[str, ...], model_file: str) -> tuple[str, ...]:
    """`argv` with `model_file` after -m: a search's command names the file it was searched
    with, and the file changes no price."""
    at = argv.index("-m") + 1
    return (*argv[:at], model_file, *argv[at + 1:])


@dataclass(frozen=True)
class CacheOffer:
    """Whether the app offers llama.cpp's expert-cache command for export, and the one line
    it says about it: what the cache gives here, or why it is not offered."""

    found: CacheAdvice | None  # the search whose cached command is offered; None: not offered
    line: str


NOT_OFFERED = "Expert cache not offered: "


def cache_offer(search, *, cpu_only: bool, failed: str | None, build) -> CacheOffer:  # type: ignore[no-untyped-def]
    """The offer for a plan whose stock llama.cpp search is `search` (LlamaSearch,
    cope_tui/service/llama_search.py; None while it runs, or `failed` with why), planned
    without a GPU when `cpu_only`, for the stock build found here (`build`, None: none read).
    Offered only where the cache's command is the search's best and the build takes it."""
    if cpu_only:
        return CacheOffer(None, NOT_OFFERED + "no GPU is planned, and the cache keeps experts in VRAM")
    if failed:
        return CacheOffer(None, NOT_OFFERED + f"stock llama.cpp's commands were not searched: {failed}")
    if search is None:
        return CacheOffer(None, "Expert cache: searching stock llama.cpp's commands...")
    found = search.cache
    if found is None:
        return CacheOffer(None, NOT_OFFERED + "COPE models the cache of one GPU, and this plan has several")
    if not found.cache_wins:
        return CacheOffer(None, NOT_OFFERED + found.verdict())
    if build_takes_cache(build) is False:
        return CacheOffer(None, NOT_OFFERED + f"your stock llama.cpp ({build.origin}) has no --moe-cache-mib "
                                              f"(it came in {FIRST_RELEASE}); {found.verdict()}")
    return CacheOffer(found, found.verdict())
