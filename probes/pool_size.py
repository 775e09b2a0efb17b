"""How big a pool of distinct experts must be for repeated timing to stream from memory,
as decode does, rather than from a cache: at least 1 GiB on the host and 4x all of the
CPU's last-level caches together (sysfs), 256 MiB on a GPU (over 4x the L2 of current
GPUs).
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_LLC_BYTES = 32 * 1024 * 1024
MIN_HOST_POOL_BYTES = 1024**3  # above the whole L3 of current server CPUs
DEVICE_POOL_BYTES = 256 * 1024**2  # over 4x the L2 of current GPUs


def _cache_size(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * mult if digits.isdigit() else 0


def last_level_cache_bytes(sys_root: str = "/sys") -> int:
    """The largest CPU cache sysfs reports for cpu0, or 32 MiB when unreadable."""
    best = 0
    for index in sorted(Path(sys_root, "devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            best = max(best, _cache_size((index / "size").read_text()))
        except OSError:
            continue
    return best or DEFAULT_LLC_BYTES


def total_last_level_cache_bytes(sys_root: str = "/sys") -> int:
    """The last-level cache of the whole machine: every distinct instance of the highest
    cache level summed (an EPYC reports 32 MiB per CCD for cpu0 but has 8 to 12 CCDs);
    0 when sysfs does not say."""
    instances: dict[tuple[int, str], int] = {}
    for index in Path(sys_root, "devices/system/cpu").glob("cpu[0-9]*/cache/index*"):
        try:
            level = int((index / "level").read_text().strip())
            kind = (index / "type").read_text().strip()
            size = _cache_size((index / "size").read_text())
            shared = (index / "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind != "Instruction":
            instances[(level, shared)] = size
    if not instances:
        return 0
    top = max(level for level, _ in instances)
    return sum(size for (level, _), size in instances.items() if level == top)


def default_pool_bytes(device: str, sys_root: str = "/sys") -> int:
    """Distinct expert bytes a pool holds by default: on the host at least 1 GiB and 4x
    the machine's last-level cache; on a GPU 256 MiB."""
    if not str(device).startswith("cpu"):
        return DEVICE_POOL_BYTES
    return max(MIN_HOST_POOL_BYTES, 4 * total_last_level_cache_bytes(sys_root))
