"""The host pool of experts, built once per process and shared.

A probe run's prober (probes/local_prober.py) and the executor of `cope validate`
(probes/executor.py) each need the same pool of distinct host experts: at least 1 GiB,
page-locked when CUDA is there. Pinning and filling it takes seconds, and `cope validate`
made one per thread count probed plus one for the executor (three or four of them in one
run, each 1-1.5 GiB of locked memory). Its bytes are never written after they are filled,
so every user with the same layout can read the same pool: the last one built is kept
(one, so a process that moves to another model does not keep the old model's pool alive
beyond its own users).
"""

from __future__ import annotations

import threading
from typing import Any
from probes.experts import ExpertPool, int8pack_works
from probes.pool_size import default_pool_bytes

_LOCK = threading.Lock()
_LAST: list[tuple[tuple, Any]] = []  # [(key, pool)]: the most recent pool
BUILT: list[tuple] = []  # every key built in this process, in order (what the tests and bench read)


def host_pool(shape: Any, *, pool_bytes: int | None = None, min_experts: int = 1, seed: int = 0,
              pin: bool = False, int8: bool | None = None) -> Any:
    """An ExpertPool on the host with these settings: the one already built when the last
    pool had the same settings (after resolving the defaults), else a new one."""
    import torch

    resolved_bytes = default_pool_bytes("cpu") if pool_bytes is None else int(pool_bytes)
    resolved_int8 = int8pack_works(torch, "cpu") if int8 is None else bool(int8)
    key = (shape, resolved_bytes, int(min_experts), int(seed), bool(pin), resolved_int8)
    with _LOCK:
        if _LAST and _LAST[0][0] == key:
            return _LAST[0][1]
        _LAST.clear()  # drop our reference first: the old pool goes once its users let go
        pool = ExpertPool(shape, "cpu", pool_bytes=resolved_bytes, min_experts=min_experts, seed=seed,
                          pin=pin, int8=resolved_int8)
        _LAST.append((key, pool))
        BUILT.append(key)
        return pool
