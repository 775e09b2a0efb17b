"""Does what a runtime keeps in host memory fit the machine's RAM?

A runtime keeps in host memory the experts it computes on the CPU (all of them for the
fork and kt-kernel, which copy popular ones to the GPU and keep every expert on the
CPU side) plus the weights it never moves to the GPU (llama.cpp's token embedding).

Two ways to hold them, two budgets (assumed constants, not measured):
- the mapped model file (llama.cpp's default mmap): page cache, which the kernel can
  evict and read back. What does not fit beside the OS and the runtime's own buffers is
  read from disk again when a token needs it: the run still works, slower (`streams`,
  priced in engine/llamacpp/llama_placement.py, page_cache_stream_s), so it is never a
  reason to refuse a command people run;
- a copy (`--no-mmap`): llama.cpp puts CPU weights that are not mapped in the GPU's
  host buffer type, page-locked (pinned) memory (src/llama-model.cpp,
  make_cpu_buft_list, unless --no-host), which the kernel can neither evict nor swap;
  a margin of RAM stays free for the kernel and the page cache. When the pinned allocation
  fails, the CUDA backend falls back to ordinary pageable memory
  (ggml-org/llama.cpp ggml/src/ggml-cuda/ggml-cuda.cu,
  ggml_backend_cuda_host_buffer_type_alloc_buffer: "fallback to cpu buffer"), so a copy
  larger than the pinned budget still runs as long as it fits the RAM a mapped file may use
  (`pageable`); only a copy larger than that does not run (it would need swap, which COPE
  does not assume).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.hardware.memory import GIB

# The OS, the runtime's process (CPU compute buffers, the CUDA context's host side).
HOST_RESERVE_BYTES = 2 * GIB
# Kept free beside a pinned copy: the kernel cannot reclaim page-locked memory.
PINNED_HEADROOM_FRACTION = 0.10
# Assumed, not measured or fitted: what reading a mapped model file back from disk delivers
# when the page cache cannot hold it. A PCIe 4.0 NVMe SSD reads 5-7 GB/s sequentially; a
# page fault reads the faulting page plus the kernel's readahead window (128 KiB by default),
# synchronously in the thread that touched it, so demand paging of scattered experts reaches
# a fraction of that. A SATA SSD or a disk is slower still: then the figure is optimistic.
PAGE_CACHE_DISK_BYTES_PER_S = 2.0e9


@dataclass(frozen=True)
class RamFit:
    need_bytes: int
    budget_bytes: int | None  # None: RAM unknown, not checked
    mapped: bool
    what: str  # what is held, e.g. "11 layers' experts and the token embedding"
    # a copy's budget in ordinary pageable memory, where llama.cpp falls back when the pinned
    # allocation fails (the mapped budget); None: RAM unknown, or mapped
    pageable_budget_bytes: int | None = None

    @property
    def fits(self) -> bool:
        return self.budget_bytes is None or self.need_bytes <= self.budget_bytes

    @property
    def pageable(self) -> bool:
        """A copy too large for pinned memory that fits in pageable memory: it runs."""
        return (not self.mapped and not self.fits and self.pageable_budget_bytes is not None
                and self.need_bytes <= self.pageable_budget_bytes)

    @property
    def runs(self) -> bool:
        """It fits, it runs from pageable memory, or (mapped) it streams from disk."""
        return self.fits or self.pageable or self.streams

    @property
    def streams(self) -> bool:
        """Mapped and larger than the RAM it may use: it runs, the page cache holding part of
        it and the rest read from disk as tokens need it (a copy that does not fit does not run)."""
        return self.mapped and not self.fits

    @property
    def disk_share(self) -> float:
        """The share of it the page cache cannot hold (0 when it fits)."""
        if not self.streams or self.need_bytes <= 0:
            return 0.0
        return (self.need_bytes - int(self.budget_bytes or 0)) / self.need_bytes

    def describe(self) -> str:
        how = "mapped from the model file" if self.mapped else "as a copy"
        if self.budget_bytes is None:
            return f"{self.need_bytes / GIB:.1f} GiB in RAM ({how}); RAM unknown, not checked"
        verdict = "fits" if self.fits else "does not fit"
        said = (f"{self.what}: {self.need_bytes / GIB:.1f} GiB {how} {verdict} in "
                f"{self.budget_bytes / GIB:.1f} GiB of usable RAM")
        if self.streams:
            said += (f"; it runs from the page cache, {self.disk_share:.1%} of it read from disk again whenever "
                     f"a token needs it (priced at an assumed {PAGE_CACHE_DISK_BYTES_PER_S / 1e9:.0f} GB/s)")
        elif self.pageable:
            said += (f" pinned; llama.cpp falls back to pageable memory, where it fits "
                     f"({self.pageable_budget_bytes / GIB:.1f} GiB), and runs")
        return said

    def to_dict(self) -> dict:
        # by hand: the fit's figures and verdict; `what` is for describe()'s sentence
        return {"need_bytes": self.need_bytes, "budget_bytes": self.budget_bytes, "mapped": self.mapped,
                "fits": self.fits, "pageable_fallback": self.pageable, "streams_from_disk": self.streams,
                "disk_share": round(self.disk_share, 4),
                "disk_bytes_per_s": PAGE_CACHE_DISK_BYTES_PER_S if self.streams else None}


def cold_expert_disk_bytes(popularity: np.ndarray, cpu_expert_bytes: np.ndarray, top_k: int,
                           missing_bytes: float) -> float:
    """Bytes a decode token reads from disk when the page cache lacks `missing_bytes` of a
    mapped model's host-side weights and what it lacks is the routed experts a token uses
    least: the page cache keeps pages that are touched again (the kernel's LRU lists promote
    a page used twice) and drops the coldest, and a token's experts are drawn from a steady
    routing distribution, so over many tokens the resident set is the most often routed
    experts. `popularity` [L, E]: routing counts per MoE layer and expert (a trace or its
    profile); `cpu_expert_bytes` [L]: one expert's bytes each layer keeps on the CPU (0 where
    its experts are on the GPU). Experts leave the cache from the least routed up until
    `missing_bytes` are out (the last one in part); a token reads each absent expert with the
    chance it is routed (top_k x its share of its layer's routing, with one routing added to
    every expert's count so that an expert a short trace never saw still has a chance). What
    the experts cannot cover (a shortfall larger than all of them) is weights a token reads
    every time."""
    counts = np.asarray(popularity, dtype=float) + 1.0
    per_expert = np.broadcast_to(np.asarray(cpu_expert_bytes, dtype=float)[:, None], counts.shape)
    chance = top_k * counts / counts.sum(axis=1, keepdims=True)
    on_cpu = per_expert.ravel() > 0
    order = np.argsort(chance.ravel()[on_cpu], kind="stable")
    sizes, chances = per_expert.ravel()[on_cpu][order], chance.ravel()[on_cpu][order]
    out_before = np.concatenate(([0.0], np.cumsum(sizes)[:-1]))
    out_share = np.clip((missing_bytes - out_before) / np.where(sizes > 0, sizes, 1.0), 0.0, 1.0)
    beyond = max(missing_bytes - float(sizes.sum()), 0.0)
    return float((out_share * sizes * chances).sum()) + beyond


def ram_budget_bytes(ram_bytes: int | None, *, mapped: bool) -> int | None:
    """The host memory a runtime may fill: RAM less the reserve, and less the pinned
    headroom for a copy."""
    if ram_bytes is None:
        return None
    budget = ram_bytes - HOST_RESERVE_BYTES
    if not mapped:
        budget -= int(ram_bytes * PINNED_HEADROOM_FRACTION)
    return max(int(budget), 0)


def ram_fit(need_bytes: int, ram_bytes: int | None, *, mapped: bool, what: str) -> RamFit:
    pageable = None if mapped else ram_budget_bytes(ram_bytes, mapped=True)
    return RamFit(int(need_bytes), ram_budget_bytes(ram_bytes, mapped=mapped), mapped, what, pageable)
