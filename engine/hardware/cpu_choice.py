"""The CPU a plan runs on, from what the person said and what this machine is.

`--cpu` names a preset ("ryzen-9-7950x", "AMD Ryzen 9 7950X", "desktop-ddr5"), or a CPU
that is no preset, whose memory must then be said (`--memory TYPE-SPEEDxCHANNELS` or
`--ram-bandwidth GBPS`) and whose cores come from `--threads` or from a preset the name
contains ("AMD EPYC 9355 (VM)"). "2x NAME" is a machine with two sockets of NAME.
`--memory` replaces a preset's usual memory; `--ram-bandwidth` is the bandwidth to plan
with whatever else is known. Without `--cpu`, this machine: its detected CPU, with, in
this order, the given memory, the measurement `cope detect` stored, the theoretical peak
of the memory detection read, the usual memory of the preset of the same CPU, or a
typical memory for its core count.

Sockets: COPE plans with ONE socket's memory bandwidth. llama.cpp reads the weights where
they were loaded, which is the memory of one NUMA node unless `--numa distribute` (or
`numactl --interleave=all`) spreads them, and even spread, every thread also reads the
other socket's half over the inter-socket link; published two-socket runs decode little
faster than one socket. Cores and RAM count every socket.

Every figure keeps its basis (preset, detected, measured, given, assumed); `CpuPlan`
carries the lines that say what was assumed and which measurement was used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from engine.core.errors import CopeInputError
from engine.hardware.bandwidth_store import StoredBandwidth
from engine.hardware.cpu_presets import (
    cpu_model_of,
    cpu_models,
    find_cpu_preset_id,
    get_cpu_preset,
    machines,
    model_for_cpu_name,
    preset_memory,
    with_memory,
)
from engine.hardware.memory_spec import MemorySpec
from engine.hardware.platform import DEFAULT_CPU_PRESET, CpuSpec, Fact, assumed_cpu_bandwidth_bytes_per_s
from engine.hardware.preset_names import match_preset, presets_named_in, suggestion

MAX_SOCKETS = 8
SOCKETS_WHY = ("llama.cpp's weights sit in one node's memory unless --numa distribute spreads them, and "
               "cross-socket reads cap the gain even then")
SOCKETS_NOTE = f"COPE plans with one socket's memory bandwidth: {SOCKETS_WHY}"


@dataclass(frozen=True)
class CpuPlan:
    cpu: CpuSpec
    assumed: tuple[str, ...]  # what was assumed, one line each (the request prefixes "assumed ")
    notes: tuple[str, ...]  # other facts worth saying (a stored measurement used)


def split_sockets(text: str) -> tuple[int, str]:
    """"2x Intel Xeon Gold 6454S" -> (2, "Intel Xeon Gold 6454S"); a plain name -> (1, name)."""
    m = re.match(r"^\s*(\d+)\s*[x×]\s+(\S.*)$", text, flags=re.IGNORECASE)
    if m is None:
        return 1, text.strip()
    n = int(m.group(1))
    if not 1 <= n <= MAX_SOCKETS:
        raise CopeInputError(f"--cpu {text!r}: 1 to {MAX_SOCKETS} sockets, not {n}")
    return n, m.group(2).strip()


def with_sockets(cpu: CpuSpec, n: int) -> CpuSpec:
    """`cpu` (one socket) as a machine of `n` sockets: cores, threads, RAM and NUMA nodes
    times n; the bandwidth stays one socket's (the module's docstring says why)."""
    if n == 1:
        return cpu

    def times(f: Fact, what: str) -> Fact:
        return f if not f.known else Fact(f.value * n, f.basis, f"{n} sockets x {f.value} {what}: {f.note}")  # type: ignore[operator]

    return replace(
        _one_socket_bandwidth(cpu),
        name=f"{n}x {cpu.name}",
        physical_cores=times(cpu.physical_cores, "cores"),
        logical_threads=times(cpu.logical_threads, "threads"),
        ram_bytes=times(cpu.ram_bytes, "bytes"),
        ram_available_bytes=times(cpu.ram_available_bytes, "bytes"),
        numa_nodes=Fact.given(n, f"'{n}x' in --cpu: one NUMA node a socket"),
        sockets=Fact.given(n, f"'{n}x' in --cpu"),
    )


def _given_bandwidth(cpu: CpuSpec, gbps: float) -> CpuSpec:
    return replace(cpu, mem_bandwidth_bytes_per_s=Fact.given(gbps * 1e9, f"given with --ram-bandwidth {gbps:g} (GB/s)"))


def _custom_cpu(name: str, sockets: int, memory: MemorySpec | None, gbps: float | None, threads: int | None) -> CpuSpec:
    """A CPU that is no preset: the person says its memory, and its cores (or a preset the name contains)."""
    names = {pid: m.name for pid, m in cpu_models().items()}
    named = presets_named_in(names, name)
    missing = []  # everything the person still has to say, in one message
    if memory is None and gbps is None:
        missing.append("its memory (--memory TYPE-SPEEDxCHANNELS such as ddr5-4800x2, or --ram-bandwidth GBPS)")
    if threads is None and len(named) != 1:
        missing.append("its cores (--threads N; -t N in a command to estimate)")
    if missing:
        guess = suggestion(names, name, extra_ids=machines())
        raise CopeInputError(f"--cpu {name!r} is not a CPU preset{guess}; `cope presets` lists them. Say "
                             + " and ".join(missing))
    if threads is not None:
        cores = Fact.given(threads, f"--threads {threads}: a CPU that is not a preset has the cores it is asked to use")
        logical = cores
    else:  # the one preset the name contains (`missing` asked for --threads otherwise)
        model = cpu_models()[named[0]]
        cores = Fact.assumed(model.cores * sockets, f"the cores of the {model.name} (preset {model.preset_id}), "
                                                    f"which {name!r} names; --threads to say otherwise")
        logical = Fact.assumed(model.threads * sockets, cores.note)
    unknown_ram = Fact.unknown("not known for a CPU that is not a preset; --ram-gib gives it")
    cpu = CpuSpec(
        name=f"{sockets}x {name}" if sockets > 1 else name, preset_id=None, physical_cores=cores, logical_threads=logical, ram_bytes=unknown_ram,
        ram_available_bytes=unknown_ram, mem_bandwidth_bytes_per_s=Fact.unknown("not given"),
        numa_nodes=Fact.assumed(sockets, "one NUMA node a socket"),
        sockets=Fact.given(sockets, f"'{sockets}x' in --cpu") if sockets > 1 else Fact.assumed(1, "one socket "
                                                                                              "('2x NAME' for two)"),
    )
    return cpu


def preset_cpu(name: str, memory: MemorySpec | None, gbps: float | None, threads: int | None) -> tuple[CpuSpec, list[str]]:
    """The CPU `--cpu NAME` means with `--memory` / `--ram-bandwidth`, and what was assumed."""
    sockets, bare = split_sockets(name)
    assumed: list[str] = []
    names = {pid: m.name for pid, m in cpu_models().items()}
    if not match_preset(names, bare, extra_ids=tuple(machines())):
        cpu = _custom_cpu(bare, sockets, memory, gbps, threads)
    else:
        preset_id = find_cpu_preset_id(bare)  # an ambiguous name is refused here, in one line
        cpu = get_cpu_preset(preset_id)
        if memory is not None:
            cpu_model_of(preset_id).check_memory(memory, "--memory")
        elif gbps is None:
            usual, why = preset_memory(preset_id)
            assumed.append(f"CPU memory: {usual.describe()}, {why} (--memory TYPE-SPEEDxCHANNELS or "
                           "--ram-bandwidth GBPS to give yours)")
    if memory is not None:
        cpu = with_memory(cpu, memory, "given", f"given with --memory {memory.text}")
    if gbps is not None:
        cpu = _given_bandwidth(cpu, gbps)
    if sockets > 1:
        cpu = with_sockets(cpu, sockets) if cpu.preset_id is not None else _one_socket_bandwidth(cpu)
        assumed.append(f"CPU memory bandwidth: one socket's of the {sockets}, since {SOCKETS_WHY}")
    return cpu, assumed


def _one_socket_bandwidth(cpu: CpuSpec) -> CpuSpec:
    bw = cpu.mem_bandwidth_bytes_per_s
    return replace(cpu, mem_bandwidth_bytes_per_s=Fact(bw.value, bw.basis, f"one socket's: {bw.note}; {SOCKETS_NOTE}"))


def this_machine_cpu(detected: CpuSpec, memory: MemorySpec | None, gbps: float | None,
                     stored: StoredBandwidth | None) -> tuple[CpuSpec, list[str], list[str]]:
    """This machine's CPU with the best memory bandwidth known: (cpu, assumed, notes)."""
    cpu = detected
    assumed: list[str] = []
    notes: list[str] = []
    if memory is not None:
        cpu = with_memory(cpu, memory, "given", f"given with --memory {memory.text}")
    if gbps is not None:
        cpu = _given_bandwidth(cpu, gbps)
    if memory is not None or gbps is not None:
        return cpu, assumed, notes
    model = model_for_cpu_name(cpu.name)
    if not cpu.mem_peak_bytes_per_s.known and model is not None:
        cpu = _fill_unknown(cpu, with_memory(
            cpu, model.default_memory, "assumed",
            f"not detected: assumed the usual memory of a machine with the {model.name} (preset {model.preset_id}): "
            f"{model.default_memory_note}"))
    if stored is not None:
        cpu = replace(cpu, mem_bandwidth_bytes_per_s=stored.fact())
        if stored.single_thread_fact() is not None:
            cpu = replace(cpu, thread_bandwidth_bytes_per_s=stored.single_thread_fact())
        one = f", one thread {stored.single_thread_bytes_per_s / 1e9:.1f} GB/s" if stored.single_thread_bytes_per_s else ""
        notes.append(f"CPU memory bandwidth: {stored.bytes_per_s / 1e9:.1f} GB/s{one}, measured on this machine by "
                     f"`cope detect` on {stored.date} ({stored.how}); --memory or --ram-bandwidth to plan with another")
        return cpu, assumed, notes
    bw = cpu.mem_bandwidth_bytes_per_s
    if bw.known and bw.basis not in ("assumed", "unknown"):
        pass  # already a figure with a basis (a measurement, a preset standing in for detection)
    elif cpu.mem_peak_bytes_per_s.known and cpu.mem_peak_bytes_per_s.basis == "detected":
        cpu = replace(cpu, mem_bandwidth_bytes_per_s=cpu.mem_peak_bytes_per_s)
        assumed.append(f"CPU memory bandwidth: {cpu.mem_peak_bytes_per_s.note} (not measured: `cope detect` "
                       "measures it)")
    elif cpu.mem_peak_bytes_per_s.known:
        cpu = replace(cpu, mem_bandwidth_bytes_per_s=Fact.assumed(cpu.mem_peak_bytes_per_s.value,  # type: ignore[arg-type]
                                                                   cpu.mem_peak_bytes_per_s.note))
        assumed.append(f"CPU memory bandwidth: {cpu.mem_peak_bytes_per_s.note}; `cope detect` measures yours, "
                       "--memory TYPE-SPEEDxCHANNELS gives it")
    elif not bw.known or bw.basis == "assumed":
        cpu = replace(cpu, mem_bandwidth_bytes_per_s=assumed_cpu_bandwidth_bytes_per_s(cpu))
        assumed.append("CPU memory bandwidth: " + cpu.mem_bandwidth_bytes_per_s.note)
    return cpu, assumed, notes


def _fill_unknown(cpu: CpuSpec, filled: CpuSpec) -> CpuSpec:
    """`filled`'s memory figures where `cpu`'s are unknown (detected ones are kept)."""
    names = ("memory_type", "memory_speed_mts", "memory_channels", "mem_peak_bytes_per_s")
    return replace(cpu, **{n: getattr(filled, n) for n in names if not getattr(cpu, n).known})


def plan_cpu(cpu_arg: str | None, memory: MemorySpec | None, ram_bandwidth_gbps: float | None, threads: int | None,
             detected: CpuSpec | None, stored: StoredBandwidth | None = None) -> CpuPlan:
    """The CPU to plan for. `detected` (this machine) is used only without `cpu_arg`;
    with neither, the default preset."""
    if cpu_arg is not None:
        cpu, assumed = preset_cpu(cpu_arg, memory, ram_bandwidth_gbps, threads)
        return CpuPlan(cpu, tuple(assumed), ())
    if detected is None:
        cpu, assumed = preset_cpu(DEFAULT_CPU_PRESET, memory, ram_bandwidth_gbps, threads)
        return CpuPlan(cpu, (f"CPU: the {DEFAULT_CPU_PRESET} preset (this machine's CPU unknown)", *assumed), ())
    cpu, assumed, notes = this_machine_cpu(detected, memory, ram_bandwidth_gbps, stored)
    return CpuPlan(cpu, tuple(assumed), tuple(notes))
