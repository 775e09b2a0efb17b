"""The compiled loops (numba), loaded when first needed, and how they run on every core.

The LRU replays and the hit curves run their inner loops compiled with numba
(`engine.replays.replay_kernels`): numba is a dependency, with wheels for every platform
COPE supports, so there is no second implementation of those loops to keep in step
(tests/test_replay_equivalence.py checks them against a plain reference loop). numba is
imported only when a loop is first needed, so importing engine/ stays cheap.

The compiled loops release the GIL; `run_tasks` and `in_parallel` run them on disjoint
parts of their work (rows, pools, layers) from a few threads, one per CPU this process
may use.
"""

from __future__ import annotations

import os
import threading
from typing import Callable

import numpy as np
from concurrent.futures import ThreadPoolExecutor

_POOL: list = []  # the ThreadPoolExecutor, made on first use
_POOL_LOCK = threading.Lock()


def _forget_pool_in_child() -> None:
    """A forked child (the app forks one to plan its first ranking) has none of its parent's
    pool threads, and the lock may have been held by one of them: start afresh."""
    global _POOL_LOCK
    _POOL.clear()
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def kernels():
    """The compiled loops (engine.replays.replay_kernels)."""
    from engine.replays import replay_kernels  # numba: 0.35-0.42 CPU-s to import, paid when a loop first runs

    return replay_kernels


def moe_cache_kernels():
    """The compiled replay of llama.cpp's expert cache (engine.replays.moe_cache_kernels)."""
    from engine.replays import moe_cache_kernels  # numba, as kernels()

    return moe_cache_kernels


def threads() -> int:
    """CPUs this process may run on."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not on Linux
        return max(os.cpu_count() or 1, 1)


def run_tasks(tasks: list[Callable[[], None]]) -> None:
    """Run independent tasks (compiled loops on disjoint data) on the thread pool, each
    taken by the next free thread, and wait for them all."""
    if threads() <= 1 or len(tasks) <= 1:
        for task in tasks:
            task()
        return
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=threads(), thread_name_prefix="cope-replay"))
    for future in [_POOL[0].submit(task) for task in tasks]:
        future.result()


def parts(items: np.ndarray, n: int) -> list[np.ndarray]:
    """`items` (indices of independent work) in n interleaved parts, none empty: parts
    of similar work when neighbours cost alike."""
    n = max(min(n, len(items)), 1)
    return [np.ascontiguousarray(items[i::n]) for i in range(n)]


def in_parallel(run: Callable[[np.ndarray], None], items: np.ndarray) -> None:
    """run(part) for interleaved parts of `items`, one part per thread."""
    run_tasks([lambda part=part: run(part) for part in parts(items, threads())])
