"""CPU presets from assets/cpus.json: CPU models with the memory they take, and typical machines.

A CPU model row gives, for one socket, cores, threads, memory channels and the fastest
memory the vendor rates, each with its source, plus the memory a usual machine with
that CPU has (`default_memory`, TYPE-SPEEDxCHANNELS, with a note that says which
configuration it is) and typical RAM. A machine row ("desktop-ddr5", the presets' old
ids) is a CPU model with a given memory and RAM. Both become a `CpuSpec` whose memory
figures (type, speed, channels, theoretical peak) keep their basis; `with_memory`
replaces them when a person says what memory their machine has.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from engine.core.assets_io import load_asset_json
from engine.core.errors import CopeInputError
from engine.core.names import squash
from engine.hardware.asset_rows import Rows
from engine.hardware.memory_spec import MemorySpec, memory_type, parse_memory_spec
from engine.hardware.platform import CPU_ASSET, CpuSpec, Fact
from engine.hardware.preset_names import cpu_model_text, find_preset, without_vendor

CPU_SCHEMA_VERSION = 2
CPU_FIGURES = ("physical_cores", "logical_threads", "memory_channels", "memory_speeds_mts")
GIB = 1024**3


@dataclass(frozen=True)
class CpuModel:
    """What a CPU preset knows about the part: one socket's cores and the memory it takes."""

    preset_id: str
    name: str
    cores: int
    threads: int
    memory_channels: int  # of one socket, in the memory type's channels
    memory_speeds_mts: tuple[tuple[str, int], ...]  # (type, fastest rated MT/s)
    default_memory: MemorySpec
    default_memory_note: str
    ram_bytes: int
    sources: tuple[tuple[str, str], ...]  # (figure, source)

    def source(self, figure: str) -> str:
        return dict(self.sources)[figure]

    def check_memory(self, memory: MemorySpec, flag: str) -> None:
        """CopeInputError (one line) when this CPU cannot take `memory`."""
        speeds = dict(self.memory_speeds_mts)
        if memory.type not in speeds:
            takes = " or ".join(speeds)
            raise CopeInputError(f"{flag} {memory.text}: the {self.name} takes {takes}, not {memory.type}")
        if memory.channels > self.memory_channels:
            raise CopeInputError(f"{flag} {memory.text}: the {self.name} has {self.memory_channels} memory channels "
                                 f"a socket, not {memory.channels}")


def _memory(r: Rows, i: int, field: str) -> MemorySpec:
    try:
        return parse_memory_spec(r.text(i, field))
    except CopeInputError as exc:
        r.fail(f"{r._where(i, field)}: {exc}")
        raise AssertionError("unreachable") from None


def _speeds(r: Rows, i: int) -> tuple[tuple[str, int], ...]:
    v = r.rows[i].get("memory_speeds_mts")
    ok = isinstance(v, dict) and v and all(
        memory_type(t) is not None and memory_type(t).name == t and isinstance(s, int) and not isinstance(s, bool)
        and s > 0 for t, s in v.items())
    if not ok:
        r.fail(f"{r._where(i, 'memory_speeds_mts')}: must map memory types (DDR4, DDR5, LPDDR5X, ...) to MT/s, "
               f"found {v!r}")
    return tuple(v.items())  # type: ignore[union-attr]


@cache
def cpu_models() -> dict[str, CpuModel]:
    """The CPU model rows of assets/cpus.json, by id (validated once, cached)."""
    r = Rows(CPU_ASSET, load_asset_json(CPU_ASSET), "cpus", version=CPU_SCHEMA_VERSION)
    out: dict[str, CpuModel] = {}
    for i, row_id in enumerate(r.unique_ids()):
        cores = r.positive_int(i, "physical_cores")
        threads = r.positive_int(i, "logical_threads")
        if threads < cores:
            r.fail(f"{r._where(i, 'logical_threads')}: {threads} is fewer than physical_cores {cores}")
        model = CpuModel(
            preset_id=row_id, name=r.text(i, "name"), cores=cores, threads=threads,
            memory_channels=r.positive_int(i, "memory_channels"), memory_speeds_mts=_speeds(r, i),
            default_memory=_memory(r, i, "default_memory"), default_memory_note=r.text(i, "default_memory_note"),
            ram_bytes=int(r.positive_number(i, "ram_gib") * GIB),
            sources=tuple(r.sources(i, CPU_FIGURES).items()),
        )
        try:
            model.check_memory(model.default_memory, "default_memory")
        except CopeInputError as exc:
            r.fail(f"{r._where(i, 'default_memory')}: {exc}")
        out[row_id] = model
    return out


@dataclass(frozen=True)
class Machine:
    """A typical machine: a CPU model with a given memory and RAM (the presets' old ids)."""

    preset_id: str
    cpu: CpuModel
    memory: MemorySpec
    ram_bytes: int
    note: str


@cache
def machines() -> dict[str, Machine]:
    data = load_asset_json(CPU_ASSET)
    r = Rows(CPU_ASSET, {"schema_version": data.get("schema_version"), "machines": data.get("machines")},
             "machines", version=CPU_SCHEMA_VERSION)
    models = cpu_models()
    out: dict[str, Machine] = {}
    for i, row_id in enumerate(r.unique_ids()):
        cpu_id = r.text(i, "cpu")
        if cpu_id not in models:
            r.fail(f"{r._where(i, 'cpu')}: no CPU preset {cpu_id!r}")
        if row_id in models:
            r.fail(f"{r._where(i, 'id')}: {row_id!r} is also a CPU preset's id")
        memory = _memory(r, i, "memory")
        try:
            models[cpu_id].check_memory(memory, "memory")
        except CopeInputError as exc:
            r.fail(f"{r._where(i, 'memory')}: {exc}")
        out[row_id] = Machine(row_id, models[cpu_id], memory, int(r.positive_number(i, "ram_gib") * GIB),
                              r.text(i, "note"))
    return out


# --- CpuSpecs -------------------------------------------------------------------------


def with_memory(cpu: CpuSpec, memory: MemorySpec, basis: str, how: str) -> CpuSpec:
    """`cpu` with `memory` (one socket's) as its memory: type, speed, channels, theoretical
    peak, and that peak as the bandwidth to plan with, each with `basis` and `how`."""
    def fact(value: Any, note: str) -> Fact:
        return Fact(value, basis, note)

    lp = memory.channel_bits != 64
    peak = memory.peak_bytes_per_s
    why = (f"theoretical peak of {memory.describe()}: {memory.speed_mts} MT/s x {memory.bus_bits // 8} bytes "
           f"of bus; {how}")
    return replace(
        cpu,
        memory_type=fact(memory.type, how),
        memory_speed_mts=fact(memory.speed_mts, how),
        memory_channels=fact(memory.channels, f"{memory.channel_bits}-bit channels; {how}" if lp else how),
        mem_peak_bytes_per_s=fact(peak, why),
        mem_bandwidth_bytes_per_s=fact(peak, f"{why}; sustained bandwidth is lower"),
    )


def model_spec(model: CpuModel, *, preset_id: str | None = None, memory: MemorySpec | None = None,
               memory_note: str | None = None, ram_bytes: int | None = None) -> CpuSpec:
    """The CpuSpec of one socket of `model` with its usual memory (or `memory`)."""
    ram = model.ram_bytes if ram_bytes is None else ram_bytes
    memory = model.default_memory if memory is None else memory
    note = memory_note or f"the usual memory of a machine with the {model.name}: {model.default_memory_note}"
    spec = CpuSpec(
        name=model.name,
        preset_id=preset_id or model.preset_id,
        physical_cores=Fact.preset(model.cores, model.source("physical_cores")),
        logical_threads=Fact.preset(model.threads, model.source("logical_threads")),
        ram_bytes=Fact.preset(ram, f"typical RAM for this preset's class of machine, not a spec-sheet figure "
                                   f"({ram / GIB:.0f} GiB)"),
        ram_available_bytes=Fact.assumed(
            ram, "preset: assumed all RAM is available; a real machine keeps some for the OS and other programs"),
        mem_bandwidth_bytes_per_s=Fact.unknown("replaced below"),
        numa_nodes=Fact.preset(1, "one socket, one NUMA node (NPS1 on EPYC, sub-NUMA clustering off on Xeon)"),
        sockets=Fact.preset(1, "a one-socket machine ('2x NAME' plans for two)"),
    )
    spec = with_memory(spec, memory, "preset", f"{note}; --memory gives yours")
    speeds = ", ".join(f"{t}-{s}" for t, s in model.memory_speeds_mts)
    return replace(spec, memory_channels=Fact.preset(
        memory.channels, f"{spec.memory_channels.note}; the CPU has {model.memory_channels} "
                         f"({model.source('memory_channels')}) and takes up to {speeds}"))


@cache
def cpu_presets() -> dict[str, CpuSpec]:
    """Every CPU preset by id: the typical machines (old ids) first, then the CPU models."""
    out: dict[str, CpuSpec] = {}
    for mid, m in machines().items():
        out[mid] = model_spec(m.cpu, preset_id=mid, memory=m.memory, memory_note=m.note, ram_bytes=m.ram_bytes)
    for pid, model in cpu_models().items():
        out[pid] = model_spec(model)
    return out


def _names() -> dict[str, str]:
    return {pid: m.name for pid, m in cpu_models().items()}


def find_cpu_preset_id(name: str) -> str:
    """The preset id `name` means (a machine's id, or a CPU model by id or name); one-line error if none."""
    return find_preset("CPU", CPU_ASSET, _names(), name, extra_ids=machines())


def get_cpu_preset(name: str) -> CpuSpec:
    """A CPU preset by id or name: "desktop-ddr5", "ryzen-9-7950x", "AMD Ryzen 9 7950X", "7950x",
    "AMD Ryzen 9 7950X 16-Core Processor"."""
    return cpu_presets()[find_cpu_preset_id(name)]


def cpu_model_of(preset_id: str) -> CpuModel:
    """The CPU model of a preset id (a machine's model for a machine id)."""
    m = machines().get(preset_id)
    return m.cpu if m is not None else cpu_models()[preset_id]


def preset_memory(preset_id: str) -> tuple[MemorySpec, str]:
    """The memory a preset plans with and which configuration that is."""
    m = machines().get(preset_id)
    if m is not None:
        return m.memory, m.note
    model = cpu_models()[preset_id]
    return model.default_memory, f"the usual memory of a machine with the {model.name}: {model.default_memory_note}"


def model_for_cpu_name(name: str) -> CpuModel | None:
    """The CPU model a detected name (/proc/cpuinfo's "model name") is, or None.

    Strict: the name without marks, core count and clock must be the model's full name
    (vendor optional), so "AMD EPYC" or an unknown "Ryzen 9 7950X3D" never borrows
    another part's figures."""
    wanted = without_vendor(squash(cpu_model_text(name)))
    if not wanted:
        return None
    for model in cpu_models().values():
        if without_vendor(squash(model.name)) == wanted:
            return model
    return None
