"""The CPU side of a plan, and the memory bandwidth `cope detect` measured, kept for planning.

`plan_cpu` turns --cpu, --memory, --ram-bandwidth and --threads into the CPU to plan for
(engine.hardware.cpu_choice holds the rules); without --cpu it reads this machine (/proc and /sys,
never torch) and the measurement `remember_cpu_bandwidth` stored for it. Imports neither
textual nor torch.
"""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Callable

from cope_tui.options import PlanChoices
from engine.hardware.bandwidth_store import StoredBandwidth, load_measurement, save_measurement
from engine.hardware.cpu_choice import CpuPlan, plan_cpu as _plan_cpu
from engine.hardware.platform import CpuSpec, Platform
from probes import host
from probes.host import this_machine_key


def plan_cpu(args: PlanChoices, detect_cpu: Callable[[], CpuSpec] | None = None,
             root: str | os.PathLike | None = None) -> CpuPlan:
    """The CPU to plan for; `detect_cpu` (default: probes.host's) runs only without --cpu."""
    detected = stored = None
    if args.cpu is None:
        if detect_cpu is None:
            detect_cpu = host.detect_cpu
        detected = detect_cpu()
        stored = stored_cpu_bandwidth(detected, root)
    return _plan_cpu(args.cpu, args.memory, args.ram_bandwidth_gbps, args.threads, detected, stored)


def stored_cpu_bandwidth(cpu: CpuSpec, root: str | os.PathLike | None = None) -> StoredBandwidth | None:
    """The measurement `cope detect` stored for this machine, or None."""
    return load_measurement(this_machine_key(cpu), root)


def remember_cpu_bandwidth(platform: Platform, root: str | os.PathLike | None = None,
                           now: _dt.datetime | None = None) -> Path | None:
    """Store this machine's measured CPU memory bandwidth for planning; None when it was not measured."""
    cpu = platform.cpu
    bw = cpu.mem_bandwidth_bytes_per_s
    if bw.basis != "measured" or not bw.known:
        return None
    when = (now or _dt.datetime.now(_dt.timezone.utc)).astimezone(_dt.timezone.utc)
    threads = int(cpu.physical_cores.value) if cpu.physical_cores.known else 0  # type: ignore[arg-type]
    one = cpu.thread_bandwidth_bytes_per_s
    single = (float(one.value), one.note) if one.basis == "measured" and one.known else (0.0, "")  # type: ignore[arg-type]
    m = StoredBandwidth(this_machine_key(cpu), cpu.name, float(bw.value), threads,  # type: ignore[arg-type]
                        when.replace(microsecond=0).isoformat(), bw.note, *single)
    return save_measurement(m, root)
