"""How a runtime holds a candidate's host-side weights, and whether that fits RAM.

COPE prefers a copy (llama.cpp's `-lm none`, `--no-mmap` in older builds: no page faults
while decoding); when the
copy would not fit but the mapped file would, the command maps the file and says why.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.hardware.host_memory import RamFit, ram_fit
from engine.models.model import ModelSpec
from engine.replays.policy import Candidate
from engine.runtimes.base import ExportPlan, RuntimeImpl
from engine.runtimes.placement import Placement


# How a command that maps the model file instead of copying it says so (no -lm none, or
# --no-mmap in older builds).
MAPPED_NOTE = "mapped, not copied (no -lm none / --no-mmap)"


@dataclass(frozen=True)
class HostChoice:
    mapped: bool  # True: run from the mapped file (no --no-mmap)
    fit: RamFit
    note: str  # why --no-mmap was dropped, or why nothing fits; "" when the copy fits

    @property
    def fits(self) -> bool:
        return self.fit.fits


def host_choice(runtime: RuntimeImpl, candidate: Candidate, placement: Placement, model: ModelSpec,
                plan: ExportPlan) -> HostChoice:
    if runtime.info.can_map and placement.all_on_gpu:
        # No expert on the CPU: no --no-mmap; only the token embedding is read from the file.
        use = runtime.host_use(candidate, placement, model, plan, mapped=True)
        fit = ram_fit(use.bytes, plan.ram_bytes, mapped=True, what=use.what)
        return HostChoice(True, fit, "" if fit.fits else f"does not fit in RAM: {fit.describe()}")
    copy_use = runtime.host_use(candidate, placement, model, plan, mapped=False)
    copy = ram_fit(copy_use.bytes, plan.ram_bytes, mapped=False, what=copy_use.what)
    if copy.fits or not runtime.info.can_map:
        note = "" if copy.fits else f"does not fit in RAM: {copy.describe()}"
        return HostChoice(False, copy, note)
    mapped_use = runtime.host_use(candidate, placement, model, plan, mapped=True)
    mapped = ram_fit(mapped_use.bytes, plan.ram_bytes, mapped=True, what=mapped_use.what)
    if mapped.fits:
        return HostChoice(True, mapped, f"{MAPPED_NOTE}: {copy.describe()} (a copy goes into pinned "
                          "memory, which the kernel cannot reclaim); mapped, the file's pages fit "
                          f"({mapped.need_bytes / 2**30:.1f} of {mapped.budget_bytes / 2**30:.1f} GiB)")
    return HostChoice(True, mapped, f"does not fit in RAM: {mapped.describe()}")
