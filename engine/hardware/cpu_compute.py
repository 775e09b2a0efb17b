"""A CPU's peak for llama.cpp's quantized matmuls (prompt processing), from assets/cpu_compute.json.

Prompt processing on a CPU is compute-bound: ggml's quantized matmuls (vec_dot, the
repacked and llamafile sgemm paths, ik_llama.cpp's iqk kernels) multiply int8 activations
by the weights' int8 quants with 256-bit vectors (ggml-cpu's x86 mul_sum_us8_pairs: one
vpdpbusd where the core has VNNI, through AVX-512 VL or AVX-VNNI; vpmaddubsw + vpmaddwd
without), so a core's rate is the int8 multiply-accumulates that dot retires a cycle
times its clock; a wider datapath the kernels do not use (Zen 5's 512 bits) counts for
nothing. Cores, not hardware threads: two threads on one core share its vector units.
The asset gives each CPU preset's microarchitecture (from the vendor's product family)
and, where recorded, the vendor's base clock; each microarchitecture's MACs a cycle are
derived from it and say how. What the kernels reach of this peak is one fitted
efficiency (engine/cost/prefill_cost.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from engine.core.assets_io import load_asset_json
from engine.hardware.cpu_presets import machines, model_for_cpu_name
from engine.hardware.hybrid_cores import HybridCores, hybrid_cores
from engine.hardware.platform import CpuSpec

CPU_COMPUTE_ASSET = "cpu_compute.json"
# No recorded base clock: assumed, and said so (every preset records one; their base clocks span 1.9-4.7 GHz).
FALLBACK_CLOCK_HZ = 3.0e9
# No preset at all: a 256-bit AVX2 core without VNNI (the slowest class llama.cpp targets by default).
FALLBACK_MACS_PER_CYCLE = 32


@dataclass(frozen=True)
class CoreCompute:
    """What one core of a CPU computes in ggml's quantized dot products."""

    isa: str  # "AVX2", "AVX2 VNNI", "AVX-512", "AVX-512 VNNI"
    int8_macs_per_cycle: int
    clock_hz: float
    source: str  # where the figures come from, or what was assumed
    assumed: str = ""  # what of them was assumed rather than known ("": nothing)

    @property
    def macs_per_s(self) -> float:
        """int8 multiply-accumulates a second of one core at its peak."""
        return self.int8_macs_per_cycle * self.clock_hz

    @property
    def flops_per_s(self) -> float:
        """FLOP/s of one core (a multiply-accumulate counted as two operations, as model FLOPs are)."""
        return 2.0 * self.macs_per_s

    def rate_flops_per_s(self, no_vnni_factor: float = 1.0) -> float:
        """FLOP/s one core reaches the peak of in quantized matmuls: a core without VNNI times
        `no_vnni_factor`, held to 1-2 (without VNNI the dot takes two multiply instructions,
        but the rest of a kernel's work, unpacking the quants, scales, loads, does not
        double, so such a core reaches more of its halved dot peak; at 2 it matches a VNNI
        core of the same clock, never more)."""
        return self.flops_per_s * (1.0 if self.vnni else min(max(no_vnni_factor, 1.0), 2.0))

    @property
    def vnni(self) -> bool:
        """A one-instruction int8 dot product (AVX-512 VNNI or AVX-VNNI)."""
        return "VNNI" in self.isa


@cache
def _table() -> dict:
    return load_asset_json(CPU_COMPUTE_ASSET)


def core_compute_of(preset_id: str | None) -> CoreCompute:
    """One core's compute for a CPU preset id; stated assumptions where the asset has nothing."""
    data = _table()
    entry = data["cpus"].get(preset_id or "")
    if entry is None:
        what = (f"no compute figures for CPU {preset_id or '(no preset)'}: a 256-bit AVX2 core without VNNI "
                f"({FALLBACK_MACS_PER_CYCLE} int8 MACs a cycle) at {FALLBACK_CLOCK_HZ / 1e9:g} GHz")
        return CoreCompute("AVX2", FALLBACK_MACS_PER_CYCLE, FALLBACK_CLOCK_HZ, f"assumed: {what}", what)
    arch = data["microarchitectures"][entry["microarchitecture"]]
    assumed = ""
    if "base_clock_hz" in entry:
        clock, clock_how = float(entry["base_clock_hz"]), entry["clock_source"]
    else:
        assumed = f"no recorded base clock for the {arch['name']} of {preset_id}: {FALLBACK_CLOCK_HZ / 1e9:g} GHz"
        clock, clock_how = FALLBACK_CLOCK_HZ, f"assumed: no recorded base clock, {FALLBACK_CLOCK_HZ / 1e9:g} GHz"
    return CoreCompute(arch["isa"], int(arch["int8_macs_per_cycle"]), clock,
                       f"{arch['name']}, {arch['int8_macs_per_cycle']} int8 MACs a cycle ({arch['how']}); {clock_how}",
                       assumed)


def cpu_model_id(cpu: CpuSpec) -> str | None:
    """The CPU model preset a CpuSpec is: its preset id, a typical machine's CPU, or a detected
    name that is a preset's full name ("2x NAME": one socket's)."""
    if cpu.preset_id is not None:
        machine = machines().get(cpu.preset_id)
        return machine.cpu.preset_id if machine is not None else cpu.preset_id
    name = cpu.name.split("x ", 1)[1] if cpu.name[:1].isdigit() and "x " in cpu.name else cpu.name
    model = model_for_cpu_name(name)
    return model.preset_id if model is not None else None


def macs_per_cycle_of_isa(isa: str) -> int | None:
    """int8 MACs a cycle of ggml's 256-bit dot on a core whose flags show `isa`: the most
    of the asset's microarchitectures with that ISA (64 with VNNI, 32 without; Haswell's
    16 makes it an upper bound there), None for an ISA the asset has no core of."""
    macs = [int(a["int8_macs_per_cycle"]) for a in _table()["microarchitectures"].values() if a["isa"] == isa]
    return max(macs) if macs else None


def core_compute(cpu: CpuSpec) -> CoreCompute:
    """The preset's figures; for a CPU no preset knows, what was detected of it (its flags'
    ISA, its base clock), the rest assumed and said so."""
    preset_id = cpu_model_id(cpu)
    isa = cpu.vector_isa
    macs = macs_per_cycle_of_isa(str(isa.value)) if isa.known else None
    if preset_id in _table()["cpus"] or macs is None:
        return core_compute_of(preset_id)
    what = f"{isa.value} ({macs} int8 MACs a cycle, {isa.note})"
    clock = cpu.base_clock_hz
    if clock.known:
        return CoreCompute(str(isa.value), macs, float(clock.value),  # type: ignore[arg-type]
                           f"detected: {what} at {float(clock.value) / 1e9:.2f} GHz ({clock.note})")  # type: ignore[arg-type]
    assumed = f"{FALLBACK_CLOCK_HZ / 1e9:g} GHz (no base clock detected) for the detected {what}"
    return CoreCompute(str(isa.value), macs, FALLBACK_CLOCK_HZ, f"assumed: {assumed}", assumed)


def cores_used(cpu: CpuSpec, threads: int) -> int:
    """The cores `threads` threads compute on: at most one thread's worth per physical core."""
    threads = max(int(threads), 1)
    cores = cpu.physical_cores
    return min(threads, int(cores.value)) if cores.known else threads


def cpu_peak_flops(cpu: CpuSpec, threads: int, no_vnni_factor: float = 1.0) -> float:
    """The CPU's peak FLOP/s in quantized matmuls with `threads` threads, before the
    kernels' efficiency (CoreCompute.rate_flops_per_s). On a hybrid CPU each thread counts
    at its core's pace: a prompt's matmuls have many chunks, which ggml hands out to the
    threads as they finish (engine/hardware/hybrid_cores.py)."""
    hybrid = hybrid_of(cpu)
    used = cores_used(cpu, threads) if hybrid is None else sum(hybrid.thread_speeds(threads))
    return used * core_compute(cpu).rate_flops_per_s(no_vnni_factor)


def hybrid_of(cpu: CpuSpec) -> HybridCores | None:
    """The P-, E- and low-power E-cores of a hybrid Intel CPU preset (assets/cpu_compute.json),
    None for any other CPU (its cores are alike) or one no preset knows."""
    preset_id = cpu_model_id(cpu)
    entry = _table()["cpus"].get(preset_id or "")
    if entry is None or not (cpu.physical_cores.known and cpu.logical_threads.known):
        return None
    arch = _table()["microarchitectures"][entry["microarchitecture"]]
    p = core_compute_of(preset_id)
    return hybrid_cores(entry, arch, int(cpu.physical_cores.value), int(cpu.logical_threads.value),  # type: ignore[arg-type]
                        p.macs_per_s, p.clock_hz)


def cpu_amx(cpu: CpuSpec) -> tuple[bool | None, str]:
    """Whether the CPU has Intel AMX (kt-kernel's AMXINT4/AMXINT8 methods), and how that is
    known: detected from its flags, else its preset's microarchitecture; None: unknown."""
    if cpu.amx.known:
        return bool(cpu.amx.value), f"{cpu.name}: {cpu.amx.note}"
    entry = _table()["cpus"].get(cpu_model_id(cpu) or "")
    if entry is None:
        return None, f"{cpu.name}: AMX not known ({cpu.amx.note})"
    arch = _table()["microarchitectures"][entry["microarchitecture"]]
    has = bool(arch.get("amx", False))
    return has, f"{cpu.name}: {arch['name']} {'has' if has else 'has no'} AMX"
