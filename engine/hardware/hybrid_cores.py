"""Hybrid Intel CPUs (P-cores and E-cores, 12th gen Core on, Core Ultra): the speed of
llama.cpp's CPU mat-vecs by the cores its threads land on.

How ggml runs a mat-vec on N threads (ggml/src/ggml-cpu/ggml-cpu.c at ggml-org/llama.cpp
005913fdaccf4efd0ef8f3b4be43e9540e8b06c7, ggml_compute_forward_mul_mat and
ggml_compute_forward_mul_mat_id, the op of the routed experts):
- threads are not pinned: an affinity is applied only when a CPU mask is given
  (ggml_thread_cpumask_is_valid; llama.cpp's --cpu-mask/--cpu-range, off by default), so the
  OS places them. Taken here: one thread a core, P-cores first, then E-cores, then low-power
  E-cores, then the P-cores' second hardware threads (Thread Director and Linux's ITMT put
  busy threads on the fastest idle cores first);
- the result's rows (nr0: an expert's FFN width for gate and up, the hidden size for down)
  are cut into chunks of 64 rows at batch 1 (chunk_size 64 when nr1 == 1). When there are
  fewer than 4 x N chunks, the plan is scrapped and re-chunked by thread: N equal slices,
  one each (nchunk0 = nth; `if (nth >= nchunk0 * nchunk1) break;`): a static split, and the
  barrier after the op makes every thread wait for the slowest, so the op runs at N times
  the slowest thread's pace. With 4 x N chunks or more, each thread takes its first chunk
  and then the next free one (atomic_fetch_add on the op's current_chunk): work-stealing,
  so the op runs at the sum of the threads' paces.
A P-core's two hardware threads share its vector units: each runs at half the core.

A core's pace is its int8 peak (MACs a cycle x its base clock, as engine/hardware/cpu_compute.py
prices every core), so an E-core's speed comes from its own MACs a cycle and the vendor's
efficient-core base clock; where that clock is not recorded (the mobile parts), the P-core's
base times E_BASE_CLOCK_RATIO, a constant read once off the presets that record both (said so).
"""

from __future__ import annotations

from dataclasses import dataclass

# ggml-cpu.c: batch-1 mat-vecs cut their rows into chunks of this many, and re-chunk by
# thread when there are fewer than CHUNKS_PER_THREAD chunks a thread.
CHUNK_ROWS = 64
CHUNKS_PER_THREAD = 4
# An E-core's base clock over its P-core's where the vendor's figure is not recorded: the
# median over the 27 hybrid presets of assets/cpu_compute.json that record both (0.714 to
# 0.865; tests/test_hybrid_cores.py recomputes it).
E_BASE_CLOCK_RATIO = 0.743


@dataclass(frozen=True)
class CoreType:
    name: str  # "P-core", "E-core", "low-power E-core"
    cores: int
    threads_per_core: int
    macs_per_s: float  # one core's int8 peak


@dataclass(frozen=True)
class HybridCores:
    """A hybrid CPU's core types, fastest first (the P-cores)."""

    types: tuple[CoreType, ...]
    source: str  # where the counts and speeds come from
    assumed: str = ""  # what of them was assumed ("": nothing)

    @property
    def performance(self) -> CoreType:
        return self.types[0]

    def thread_speeds(self, threads: int) -> tuple[float, ...]:
        """Each of `threads` threads' pace as a share of one P-core's, as the OS places them:
        one a core, fastest cores first, then the P-cores' second hardware threads (two
        threads on a core share it)."""
        p = self.performance
        one_each = [t.macs_per_s / p.macs_per_s for t in self.types for _ in range(t.cores)]
        threads = max(int(threads), 1)
        if threads <= len(one_each):
            return tuple(one_each[:threads])
        shared = min(threads - len(one_each), p.cores * (p.threads_per_core - 1))
        # `shared` P-cores now run two threads at half the core each; the rest keep theirs
        speeds = [0.5] * (2 * shared) + one_each[shared:]
        return tuple(speeds)

    def p_core_equivalents(self, threads: int, rows: int) -> float:
        """How many P-cores' pace a batch-1 mat-vec of `rows` output rows gets on `threads`
        threads: the sum of the threads' paces where ggml hands out chunks (work-stealing),
        N x the slowest where it splits the rows evenly (the barrier waits for the slowest)."""
        speeds = self.thread_speeds(threads)
        n = len(speeds)
        chunks = -(-int(rows) // CHUNK_ROWS)
        if chunks >= CHUNKS_PER_THREAD * n:
            return float(sum(speeds))
        return n * min(speeds)

    def expert_pace(self, threads: int, ffn_rows: int, hidden_rows: int) -> float:
        """P-cores' worth of pace for a routed expert: gate and up (`ffn_rows` each) and down
        (`hidden_rows`), the same number of weights each."""
        return 1.0 / ((2 / 3) / self.p_core_equivalents(threads, ffn_rows)
                      + (1 / 3) / self.p_core_equivalents(threads, hidden_rows))

    def describe(self) -> str:
        parts = ", ".join(f"{t.cores} {t.name}s at {t.macs_per_s / self.performance.macs_per_s:.2f}x"
                          for t in self.types if t.cores)
        return f"{parts} a P-core's int8 pace"


def hybrid_cores(entry: dict, arch: dict, physical_cores: int, logical_threads: int,
                 p_macs_per_s: float, p_clock_hz: float) -> HybridCores | None:
    """The core types of a CPU's compute entry (assets/cpu_compute.json: `core_types`, the
    microarchitecture's `efficient_core`), None for a CPU with one kind of core."""
    types = entry.get("core_types")
    efficient = arch.get("efficient_core")
    if types is None or efficient is None or not (types["efficient"] or types["low_power_efficient"]):
        return None
    p = int(types["performance"])
    # the hardware threads beyond one a core are the P-cores' (E-cores have one each)
    p_threads = 1 + max(logical_threads - physical_cores, 0) // p
    e_clock = entry.get("efficient_base_clock_hz")
    assumed = ""
    if e_clock is None:
        e_clock = p_clock_hz * E_BASE_CLOCK_RATIO
        assumed = (f"no recorded efficient-core base clock: E-cores taken at {E_BASE_CLOCK_RATIO:g} x the P-core's "
                   "(the presets' median)")
    e_macs = float(efficient["int8_macs_per_cycle"]) * float(e_clock)
    # the low-power E-cores: the same core; their lower clock is not recorded, so the E-cores' (an upper bound)
    out = (CoreType("P-core", p, p_threads, p_macs_per_s),
           CoreType("E-core", int(types["efficient"]), 1, e_macs),
           CoreType("low-power E-core", int(types["low_power_efficient"]), 1, e_macs))
    source = (f"{types['source']}; E-cores: {efficient['name']}, {efficient['int8_macs_per_cycle']} int8 MACs a cycle "
              f"({efficient['how']})")
    if not types["low_power_efficient"]:
        out = out[:2]
    else:
        assumed += ("; " if assumed else "") + "low-power E-cores taken at the E-cores' clock (theirs is not recorded)"
    return HybridCores(out, source, assumed)
