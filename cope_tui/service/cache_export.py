"""`cope export --candidate llama-cache`: the stock llama.cpp command with its own expert
cache that `cope advise` leads with (engine/advice/cache_search.py), as an Export, so it is
saved, written and shown the way every other export is."""

from __future__ import annotations

from engine.advice.cache_search import search_cache
from engine.core.errors import CopeInputError
from engine.llamacpp.command_line import CommandLine
from engine.llamacpp.moe_cache import FIRST_RELEASE, SOURCE
from engine.runtimes import STOCK_NAME
from engine.runtimes.export import Export

LLAMA_CACHE_ID = "llama-cache"


def cache_export(advice, *, runtime: str, binary: str | None, model_path: str | None) -> Export:  # type: ignore[no-untyped-def]
    """The cache's command for `advice`'s plan (or the plain partition, said so, when that is faster)."""
    if runtime not in (STOCK_NAME, "stock"):
        raise CopeInputError(f"--candidate {LLAMA_CACHE_ID}: llama.cpp's expert cache is stock llama.cpp's "
                             f"(--moe-cache-mib, {FIRST_RELEASE} or newer); COPE does not export it for {runtime}")
    if binary not in (None, "llama-server"):
        raise CopeInputError(f"--candidate {LLAMA_CACHE_ID}: exported for llama-server (llama-bench's cache option "
                             "was not read in its source)")
    request = advice.rec.request
    found = search_cache(request, advice.cost_model, model_file=model_path)
    pick = found.with_cache if found.cache_wins else found.partition
    if pick is None:
        raise CopeInputError(f"--candidate {LLAMA_CACHE_ID}: {found.verdict()}")
    notes = [f"needs stock llama.cpp {FIRST_RELEASE} or newer (--moe-cache-mib, PR #29887); cache modelled as "
             f"{SOURCE} (LRU)"] if found.cache_wins else []
    if request.trace.meta.origin == "synthetic":
        notes.append("SYNTHETIC routing: the cache's hit rate rests on a synthetic trace; record or pull a real one "
                     "(cope trace)")
    return Export(
        candidate_id=LLAMA_CACHE_ID,
        exported_id=LLAMA_CACHE_ID if found.cache_wins else "partition-first",
        label="runs-on-stock",
        reason=found.verdict() + f"; {pick.detail}",
        command=CommandLine.of_words(pick.argv),
        candidate_tpot_s=pick.tpot_s,
        runtime=STOCK_NAME,
        notes=tuple(notes),
        spelled_for=f"stock llama.cpp {FIRST_RELEASE} or newer",
    )
