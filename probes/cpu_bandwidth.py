"""Main-memory read bandwidth of this machine, read by many threads at once.

Decode on the CPU streams expert weights from memory on every thread it has, so the
figure planning needs is the machine's multi-threaded read bandwidth, not one core's.
numpy reduces one slice of an array per thread (the maximum of unsigned 32-bit words:
the cheapest reduction per byte, so a core's arithmetic never limits it, which a float32
sum does at about 14 GB/s a core); its reductions release the GIL, so the threads read in
parallel without torch. The array is several times the last-level
cache (an EPYC 9684X has 1.1 GiB of L3), so the reductions read main memory. The result is a
sustained figure: below the theoretical peak of the memory (engine.hardware.memory_spec), often
60 to 85% of it.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from engine.hardware.platform import Fact
import numpy as np

MIB = 1024**2
GIB = 1024**3
MIN_RUNS = 3
MIN_BYTES = 512 * MIB
MAX_BYTES = 4 * GIB
CACHE_MULTIPLE = 4  # the array is at least this many times the last-level cache


def _size_bytes(text: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text.upper())
    if m is None:
        return None
    return int(m.group(1)) * {"": 1, "K": 1024, "M": MIB, "G": GIB}[m.group(2)]


def last_level_cache_bytes(sys_root: str | Path = "/sys") -> int | None:
    """All last-level caches of the machine together (each shared cache counted once), or None."""
    base = Path(sys_root) / "devices" / "system" / "cpu"
    caches: dict[tuple[int, str], int] = {}
    try:
        cpus = [p for p in base.iterdir() if re.fullmatch(r"cpu\d+", p.name)]
        for cpu in cpus:
            for index in (cpu / "cache").glob("index*"):
                try:
                    level = int((index / "level").read_text())
                    kind = (index / "type").read_text().strip()
                    size = _size_bytes((index / "size").read_text())
                    shared = (index / "shared_cpu_list").read_text().strip()
                except (OSError, ValueError):
                    continue
                if kind != "Instruction" and size:
                    caches[(level, shared)] = size
    except OSError:
        return None
    if not caches:
        return None
    top = max(level for level, _ in caches)
    return sum(size for (level, _), size in caches.items() if level == top)


def _available_bytes() -> int | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    m = re.search(r"MemAvailable:\s*(\d+)\s*kB", text)
    return int(m.group(1)) * 1024 if m else None


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _mib(n: int) -> str:
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / MIB:.0f} MiB"


def measure_cpu_memory_bandwidth(size_bytes: int | None = None, repeats: int = 5, budget_s: float = 2.0,
                                 threads: int | None = None, *, sys_root: str | Path = "/sys") -> Fact:
    """Multi-threaded read bandwidth of main memory (bytes/s), measured; or unknown with why.

    `threads`: readers at once (default: every logical CPU this process may use; callers
    pass the physical cores). `size_bytes`: the array (default: CACHE_MULTIPLE times the
    last-level cache, 512 MiB to 4 GiB, at most a quarter of the available memory).
    """
    threads = max(1, int(threads or _usable_cpus()))
    llc = last_level_cache_bytes(sys_root)
    if size_bytes is None:
        size_bytes = min(MAX_BYTES, max(MIN_BYTES, CACHE_MULTIPLE * (llc or 0)))
        available = _available_bytes()
        if available:
            size_bytes = max(64 * MIB, min(size_bytes, available // 4))
    n = max(4 * MIB, int(size_bytes)) // 4
    try:
        x = np.ones(n, dtype=np.uint32)  # pages touched before timing
        slices = np.array_split(x, threads)
        with ThreadPoolExecutor(max_workers=threads) as pool:
            def once() -> float:
                t0 = time.perf_counter()
                for _ in pool.map(np.max, slices):
                    pass
                return time.perf_counter() - t0

            once()  # warm-up: threads started, pages faulted in
            start = time.perf_counter()
            times: list[float] = []
            while len(times) < max(repeats, MIN_RUNS):
                times.append(once())
                if len(times) >= MIN_RUNS and time.perf_counter() - start > budget_s:
                    break
        slices = x = None  # the array goes before the figure is returned
    except MemoryError:
        return Fact.unknown(f"not measured: could not allocate {_mib(n * 4)} for the measurement")
    except Exception as exc:  # noqa: BLE001 - a failed measurement is an unknown figure, with why
        return Fact.unknown(f"not measured: the CPU measurement failed ({type(exc).__name__}: {exc})")
    median = statistics.median(times)
    if median <= 0:
        return Fact.unknown("not measured: the timer did not advance")
    moved = n * 4
    cache = f" ({moved / llc:.0f}x the {_mib(llc)} last-level cache)" if llc else ""
    what = f"multi-threaded read bandwidth: {threads} threads at once" if threads > 1 else "read bandwidth: one thread"
    return Fact.measured(
        moved / median,
        f"{what}, numpy max-reductions of a uint32 array of {_mib(moved)}{cache} split between them, median of {len(times)} runs after a warm-up (best {moved / min(times) / 1e9:.1f} GB/s); "
        "a sustained figure, below the memory's theoretical peak",
    )
