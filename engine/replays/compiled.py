"""Whether the compiled loops (numba) are used, and how they are run on every core.

The replays and the hit curves have two implementations of their inner loops: numpy
(always there) and compiled with numba (`engine.replays.replay_kernels`), used when numba can be
imported and COPE_NO_NUMBA is unset or 0. Both give the same numbers
(tests/test_replay_compiled.py). numba is imported only when a loop is first needed,
so importing engine/ stays cheap and works without it.

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

_NUMBA: list[bool] = []  # filled once numba's import has been tried
_POOL: list = []  # the ThreadPoolExecutor, made on first use
_POOL_LOCK = threading.Lock()


def available() -> bool:
    """numba importable, and COPE_NO_NUMBA unset (or 0)."""
    if os.environ.get("COPE_NO_NUMBA", "0").strip() not in ("", "0"):
        return False
    if not _NUMBA:
        try:
            import numba  # noqa: F401
        except Exception:  # not installed, or an install that cannot load: numpy does the work
            _NUMBA.append(False)
        else:
            _NUMBA.append(True)
    return _NUMBA[0]


def kernels():
    """The compiled loops (engine.replays.replay_kernels); only after `available()`."""
    from engine.replays import replay_kernels

    return replay_kernels


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
