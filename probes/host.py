"""Detect this machine's CPU, RAM and memory modules from /proc and /sys, without torch.

The parsers take the files' text, so tests can feed them sample contents; `detect_cpu`
reads the real files and never raises on a missing or unreadable one: the figure is then
unknown (or assumed), with the reason in its note.
"""

from __future__ import annotations

import os
import platform as _platform
from dataclasses import replace
import re
from collections.abc import Iterable
from pathlib import Path

from engine.core.errors import CopeInputError
from engine.hardware.bandwidth_store import machine_key
from engine.hardware.cpu_presets import with_memory
from engine.hardware.memory_spec import memory_spec
from engine.hardware.platform import CpuSpec, Fact
from probes.memory_detect import MemoryFacts, detect_memory, read_dmidecode

BANDWIDTH_UNKNOWN_NOTE = "not measured; `cope detect` (in the app: Measure this machine) measures it"


# --- pure parsers ---------------------------------------------------------------------


def cpuinfo_blocks(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per logical CPU (blocks separated by blank lines)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


def cpuinfo_model_name(text: str) -> str | None:
    """The first "model name" (x86; some ARM kernels too), else None."""
    for block in cpuinfo_blocks(text):
        name = block.get("model name")
        if name:
            return re.sub(r"\s+", " ", name)
    return None


def cpuinfo_physical_cores(text: str, allowed: set[int] | None = None) -> int | None:
    """Unique (physical id, core id) pairs over the logical CPUs, or None.

    `allowed`: count only these logical CPUs ("processor" numbers), e.g. the affinity set.
    None when the file carries no "core id" (many ARM kernels, some VMs).
    """
    pairs: set[tuple[str, str]] = set()
    for block in cpuinfo_blocks(text):
        if "core id" not in block:
            continue
        if allowed is not None:
            try:
                if int(block.get("processor", "")) not in allowed:
                    continue
            except ValueError:
                pass  # no usable processor number: count it
        pairs.add((block.get("physical id", "0"), block["core id"]))
    return len(pairs) or None


def cpuinfo_vector_isa(text: str) -> str | None:
    """The widest int8 dot product ggml's x86 kernels use on this CPU, from the first
    "flags" line: "AVX-512 VNNI" (with AVX-512 VL), "AVX2 VNNI", "AVX-512", "AVX2"; None
    without AVX2 or without a flags line (ARM kernels)."""
    for block in cpuinfo_blocks(text):
        flags = set(block.get("flags", "").split())
        if not flags:
            continue
        if {"avx512_vnni", "avx512vl"} <= flags:
            return "AVX-512 VNNI"
        if "avx_vnni" in flags:
            return "AVX2 VNNI"
        if "avx512f" in flags:
            return "AVX-512"
        return "AVX2" if "avx2" in flags else None
    return None


AMX_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")


def cpuinfo_amx(text: str) -> bool | None:
    """Whether the first "flags" line has Intel AMX with int8 and bf16 tiles (the flags
    kt-kernel's cpu detection asks for its AMX build); None without a flags line."""
    for block in cpuinfo_blocks(text):
        flags = set(block.get("flags", "").split())
        if flags:
            return set(AMX_FLAGS) <= flags
    return None


def model_name_clock_hz(name: str) -> float | None:
    """The base clock an Intel model name states ("... CPU @ 2.00GHz"), or None."""
    m = re.search(r"@\s*(\d+(?:\.\d+)?)\s*GHz", name, flags=re.IGNORECASE)
    return float(m.group(1)) * 1e9 if m else None


def cpuinfo_sockets(text: str) -> int | None:
    """Distinct "physical id"s over the logical CPUs, or None when the file gives none."""
    ids = {b["physical id"] for b in cpuinfo_blocks(text) if "physical id" in b}
    return len(ids) or None


def meminfo_bytes(text: str) -> dict[str, int]:
    """/proc/meminfo fields in bytes ("MemTotal: 16384 kB" -> {"MemTotal": 16777216})."""
    units = {"": 1, "b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"^\s*([^:\s]+)\s*:\s*(\d+)\s*([A-Za-z]*)\s*$", line)
        if m and m.group(3).lower() in units:
            out[m.group(1)] = int(m.group(2)) * units[m.group(3).lower()]
    return out


def available_memory_bytes(meminfo_path: str | Path = "/proc/meminfo") -> int | None:
    """This machine's available memory now (MemAvailable), bytes; None where unknown."""
    text = _read(Path(meminfo_path))
    mem = meminfo_bytes(text) if text is not None else {}
    if "MemAvailable" in mem:
        return mem["MemAvailable"]
    if "MemFree" in mem:
        return mem["MemFree"] + mem.get("Buffers", 0) + mem.get("Cached", 0)
    return None


def count_numa_nodes(entries: Iterable[str]) -> int | None:
    """NUMA nodes from the names in /sys/devices/system/node ("node0", "node1", ...)."""
    n = sum(1 for e in entries if re.fullmatch(r"node\d+", e))
    return n or None


# --- detection --------------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _affinity() -> set[int] | None:
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:
        return None
    try:
        return set(getter(0))
    except OSError:
        return None


def machine_id(roots: Iterable[str | Path] = ("/etc", "/var/lib/dbus")) -> str:
    """This installation's machine id (systemd's, else D-Bus's), else the host name."""
    for root in roots:
        text = _read(Path(root) / "machine-id")
        if text and text.strip():
            return text.strip()
    return _platform.node() or "unknown-host"


def this_machine_key(cpu: CpuSpec) -> str:
    """The key engine.hardware.bandwidth_store files this machine's measurements under."""
    ram = int(cpu.ram_bytes.value) if cpu.ram_bytes.known and cpu.ram_bytes.basis == "detected" else None  # type: ignore[arg-type]
    return machine_key(cpu.name, os.cpu_count(), ram, machine_id())


def with_memory_facts(cpu: CpuSpec, mem: MemoryFacts) -> CpuSpec:
    """`cpu` with the memory detection read: all of it (type, speed, channels and their
    theoretical peak) when detection gave all three, else what it gave."""
    if mem.type.known and mem.speed_mts.known and mem.channels.known:
        try:
            spec = memory_spec(str(mem.type.value), int(mem.speed_mts.value), channels=int(mem.channels.value))  # type: ignore[arg-type]
        except CopeInputError as exc:  # a speed or channel count outside what COPE accepts
            return replace(cpu, memory_type=mem.type, memory_speed_mts=mem.speed_mts, memory_channels=mem.channels,
                           mem_peak_bytes_per_s=Fact.unknown(f"detected memory not usable: {exc}"))
        how = f"{mem.type.note}; speed: {mem.speed_mts.note}; channels: {mem.channels.note}"
        out = with_memory(cpu, spec, "detected", how)
        return replace(out, mem_bandwidth_bytes_per_s=cpu.mem_bandwidth_bytes_per_s)  # planning decides (cpu_choice)
    return replace(cpu, memory_type=mem.type, memory_speed_mts=mem.speed_mts, memory_channels=mem.channels,
                   mem_peak_bytes_per_s=Fact.unknown("the memory's type, speed and channels are not all detected"))


def detect_cpu(proc_root: str | Path = "/proc", sys_root: str | Path = "/sys",
               dmidecode=read_dmidecode) -> CpuSpec:  # type: ignore[no-untyped-def]
    """This machine's CPU, RAM and memory; every field may be unknown, with the reason.
    `dmidecode`: returns (`dmidecode -t 17` output or None, how) (tests pass a stub)."""
    proc, sys_ = Path(proc_root), Path(sys_root)
    cpuinfo_path, meminfo_path = proc / "cpuinfo", proc / "meminfo"
    cpuinfo = _read(cpuinfo_path)
    meminfo = _read(meminfo_path)

    # Model name.
    name = cpuinfo_model_name(cpuinfo) if cpuinfo is not None else None
    if not name:
        name = _platform.processor() or _platform.machine() or "unknown CPU"

    # Logical threads: the CPUs this process may run on.
    total = os.cpu_count()
    affinity = _affinity()
    if affinity:
        if total is not None and len(affinity) < total:
            how = f"os.sched_getaffinity: this process may use {len(affinity)} of the {total} logical CPUs"
        else:
            how = "os.sched_getaffinity: every logical CPU is usable by this process"
        threads = Fact.detected(len(affinity), how)
    elif total:
        threads = Fact.detected(total, "os.cpu_count() (no CPU affinity information on this system)")
    else:
        threads = Fact.unknown("os.cpu_count() could not tell the number of logical CPUs")

    # Physical cores among the usable logical CPUs.
    cores_value = cpuinfo_physical_cores(cpuinfo, affinity) if cpuinfo is not None else None
    if cores_value is not None:
        where = " among the logical CPUs this process may use" if affinity and total and len(affinity) < total else ""
        cores = Fact.detected(cores_value, f"unique (physical id, core id) pairs in {cpuinfo_path}{where}")
    elif threads.known:
        why = f"{cpuinfo_path} unreadable" if cpuinfo is None else f"{cpuinfo_path} has no core ids"
        cores = Fact.assumed(threads.value, f"{why}; assumed one core per logical CPU (no SMT), which may overcount")  # type: ignore[arg-type]
    else:
        cores = Fact.unknown(f"{cpuinfo_path} gives no core ids and the logical CPU count is unknown")

    # RAM.
    mem = meminfo_bytes(meminfo) if meminfo is not None else {}
    if "MemTotal" in mem:
        ram = Fact.detected(mem["MemTotal"], f"MemTotal in {meminfo_path}")
    else:
        ram = Fact.unknown(f"{meminfo_path} unreadable or without MemTotal")
    if "MemAvailable" in mem:
        avail = Fact.detected(mem["MemAvailable"], f"MemAvailable in {meminfo_path}")
    elif "MemFree" in mem:
        est = mem["MemFree"] + mem.get("Buffers", 0) + mem.get("Cached", 0)
        avail = Fact.detected(est, f"MemFree + Buffers + Cached in {meminfo_path} (no MemAvailable on this kernel)")
    else:
        avail = Fact.unknown(f"{meminfo_path} unreadable or without MemAvailable")

    # NUMA nodes.
    node_dir = sys_ / "devices" / "system" / "node"
    try:
        nodes = count_numa_nodes(os.listdir(node_dir))
    except OSError:
        nodes = None
    if nodes is not None:
        numa = Fact.detected(nodes, f"node* entries in {node_dir}")
    else:
        numa = Fact.unknown(f"{node_dir} missing or without node entries")

    # Sockets.
    n_sockets = cpuinfo_sockets(cpuinfo) if cpuinfo is not None else None
    if n_sockets is not None:
        sockets = Fact.detected(n_sockets, f"distinct physical ids in {cpuinfo_path}")
    else:
        sockets = Fact.assumed(1, f"{cpuinfo_path} gives no physical ids; assumed one socket")

    cpu = CpuSpec(
        name=name,
        preset_id=None,
        physical_cores=cores,
        logical_threads=threads,
        ram_bytes=ram,
        ram_available_bytes=avail,
        mem_bandwidth_bytes_per_s=Fact.unknown(BANDWIDTH_UNKNOWN_NOTE),
        numa_nodes=numa,
        sockets=sockets,
        vector_isa=_vector_isa(cpuinfo, cpuinfo_path),
        base_clock_hz=_base_clock(name, sys_),
        amx=_amx(cpuinfo, cpuinfo_path),
    )
    return with_memory_facts(cpu, detect_memory(int(sockets.value), sys_, dmidecode))  # type: ignore[arg-type]


def _vector_isa(cpuinfo: str | None, path: Path) -> Fact:
    isa = cpuinfo_vector_isa(cpuinfo) if cpuinfo is not None else None
    if isa is None:
        return Fact.unknown(f"{path} unreadable or without the AVX2 flags ggml's x86 kernels use")
    return Fact.detected(isa, f"the flags in {path}")


def _amx(cpuinfo: str | None, path: Path) -> Fact:
    amx = cpuinfo_amx(cpuinfo) if cpuinfo is not None else None
    if amx is None:
        return Fact.unknown(f"{path} unreadable or without a flags line")
    return Fact.detected(amx, f"{' '.join(AMX_FLAGS)} {'all' if amx else 'not all'} in the flags of {path}")


def _base_clock(name: str, sys_: Path) -> Fact:
    """The base clock: cpufreq's base_frequency (intel_pstate, amd-pstate), else the model
    name's "@ X GHz"; not the current frequency, which moves with load."""
    path = sys_ / "devices" / "system" / "cpu" / "cpu0" / "cpufreq" / "base_frequency"
    text = _read(path)
    if text is not None and text.strip().isdigit() and int(text) > 0:
        return Fact.detected(int(text) * 1e3, f"{path} (kHz)")
    clock = model_name_clock_hz(name)
    if clock:
        return Fact.detected(clock, f"the model name {name!r}")
    return Fact.unknown(f"no {path} and no clock in the model name")
