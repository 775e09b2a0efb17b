"""Does what a runtime keeps in host memory fit the machine's RAM?

A runtime keeps in host memory the experts it computes on the CPU (all of them for the
fork and kt-kernel, which copy popular ones to the GPU and keep every expert on the
CPU side) plus the weights it never moves to the GPU (llama.cpp's token embedding).

Two ways to hold them, two budgets (assumed constants, not measured):
- the mapped model file (llama.cpp's default mmap): page cache, which the kernel can
  evict and read back; it must fit beside the OS and the runtime's own buffers, or every
  token reads experts from disk, a speed no estimate here describes;
- a copy (`--no-mmap`): llama.cpp puts CPU weights that are not mapped in the GPU's
  host buffer type, page-locked (pinned) memory (src/llama-model.cpp,
  make_cpu_buft_list, unless --no-host), which the kernel can neither evict nor swap;
  a margin of RAM stays free for the kernel and the page cache.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.hardware.memory import GIB

# The OS, the runtime's process (CPU compute buffers, the CUDA context's host side).
HOST_RESERVE_BYTES = 2 * GIB
# Kept free beside a pinned copy: the kernel cannot reclaim page-locked memory.
PINNED_HEADROOM_FRACTION = 0.10


@dataclass(frozen=True)
class RamFit:
    need_bytes: int
    budget_bytes: int | None  # None: RAM unknown, not checked
    mapped: bool
    what: str  # what is held, e.g. "11 layers' experts and the token embedding"

    @property
    def fits(self) -> bool:
        return self.budget_bytes is None or self.need_bytes <= self.budget_bytes

    def describe(self) -> str:
        how = "mapped from the model file" if self.mapped else "as a copy"
        if self.budget_bytes is None:
            return f"{self.need_bytes / GIB:.1f} GiB in RAM ({how}); RAM unknown, not checked"
        verdict = "fits" if self.fits else "does not fit"
        return (f"{self.what}: {self.need_bytes / GIB:.1f} GiB {how} {verdict} in "
                f"{self.budget_bytes / GIB:.1f} GiB of usable RAM")

    def to_dict(self) -> dict:
        # by hand: the fit's figures and verdict; `what` is for describe()'s sentence
        return {"need_bytes": self.need_bytes, "budget_bytes": self.budget_bytes, "mapped": self.mapped,
                "fits": self.fits}


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
    return RamFit(int(need_bytes), ram_budget_bytes(ram_bytes, mapped=mapped), mapped, what)
