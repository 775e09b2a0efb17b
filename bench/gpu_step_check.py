"""First run on a CUDA machine: what the GPU-side probes measure, old way against new.

For Qwen3-30B-A3B's real expert shape at Q4_K_M (random weights), in about two minutes:
- detection: the GPU, the preset it matches, any CUDA problem, measured bandwidths;
- one routed expert on the GPU: torch's CUDA int8 weight-only kernel eagerly (the old
  stand-in), the dense bf16 mat-vec over the same bytes eagerly, and as a replayed CUDA
  graph (n = 1, 4, 8 per step), against the expert's bytes at the measured bandwidth;
- host-to-device copies of n experts: one copy per expert (now) and six (the old step);
- layer steps of every strategy through the probes' LocalProber (graphs, CUDA events,
  a busy GPU before each step, the persistent CPU worker), and the same step with the
  GPU lane eager, for comparison;
- the shared block and the head as graphs.

Run: python bench/gpu_step_check.py [--dry-run] [OUT.json]. Prints one line per figure
and rewrites OUT.json (atomically) after each one, so a run stopped by its time limit
keeps every figure it measured; each section that fails prints its error and the run
goes on. The 1 GiB pinned host pool is built once (the prober's) and the copies reuse it.
Exits 2 in one line without CUDA; --dry-run runs every section without CUDA instead
(CPU-only sections measured, CUDA-only ones recorded as not run), to check the script.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODEL, QUANT = "qwen3-30b-a3b", "Q4_K_M"
figures: dict[str, object] = {}
OUT: list[Path] = []  # where figures are written, when asked
CUDA: list[bool] = []  # filled by main: whether CUDA sections run


def write_figures() -> None:
    if OUT:
        from engine.core.files import atomic_write_text

        atomic_write_text(OUT[0], json.dumps(figures, indent=1, default=str))


def say(key: str, value: object, text: str = "") -> None:
    figures[key] = value
    write_figures()
    shown = f"{value * 1e6:9.1f} us" if isinstance(value, float) and value < 1 else str(value)
    print(f"{key:<44} {shown}  {text}", flush=True)


def section(name: str, needs_cuda: bool = False):
    def wrap(fn):
        def run(*a, **k):
            print(f"\n== {name}", flush=True)
            if needs_cuda and not CUDA[0]:
                say(f"not run: {name}", "needs CUDA (dry run)")
                return None
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            except Exception:  # noqa: BLE001 - report and go on
                figures[f"error: {name}"] = traceback.format_exc(limit=6)
                write_figures()
                print(traceback.format_exc(limit=6), flush=True)
            finally:
                print(f"   ({time.perf_counter() - t0:.1f} s)", flush=True)
        return run
    return wrap


def event_time(torch, fn, repeats: int = 50, stream=None) -> float:
    """Median seconds of fn's GPU work behind a busy GPU, CUDA events."""
    from probes.cuda_graphs import busy_gpu

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        busy_gpu(torch, 1e-3, stream)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        target = stream if stream is not None else torch.cuda.current_stream()
        start.record(target)
        fn()
        end.record(target)
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


@section("detection")
def detection(shape):
    from probes.detect import detect_platform

    p = detect_platform(measure=True, expert_bytes=shape.expert_bytes)
    g = p.gpu
    say("gpu", g.name, f"matched preset {g.matched_preset_id}")
    say("cuda_problem", None if g.cuda_problem is None else g.cuda_problem.to_dict())
    for name in ("mem_bandwidth_bytes_per_s", "h2d_bytes_per_s", "h2d_pageable_bytes_per_s"):
        f = getattr(g, name)
        say(name, f.value, f"{f.basis}: {f.note[:160]}")
    return p


@section("one expert on the GPU", needs_cuda=True)
def expert_kernels(torch, shape, bandwidth):
    from probes import operators as ops
    from probes.experts import ExpertPool, expert_widths

    n = 64  # distinct experts, > 3x the L2 of an H100/H200
    gpu_pool = ExpertPool(shape, "cuda", pool_bytes=n * shape.expert_bytes, int8=True)
    floor = shape.expert_bytes / bandwidth if bandwidth else None
    if floor:
        say("expert bytes at measured bandwidth", floor, f"{shape.expert_bytes / 2**20:.2f} MiB")

    # The old stand-in: int8 weight-only kernel per matrix, eager.
    widths = expert_widths(shape, True)
    old = []
    for e in gpu_pool.experts[:n]:
        mats = [(w.contiguous(), s.contiguous()) for w, s in e]
        old.append(mats)
    x = gpu_pool.x
    cursor = [0]

    def old_expert():
        mats = old[cursor[0] % n]
        cursor[0] += 1
        xin = x[:, :widths[0]]
        act = torch.nn.functional.silu(torch._weight_int8pack_mm(xin, *mats[0])) * torch._weight_int8pack_mm(xin, *mats[1])
        down = torch.zeros(1, widths[-1], dtype=torch.bfloat16, device="cuda")
        down[:, :min(act.shape[1], widths[-1])] = act[:, :widths[-1]]
        return torch._weight_int8pack_mm(down, *mats[2])

    try:
        say("int8pack eager, per expert (old)", event_time(torch, old_expert))
    except Exception as exc:  # noqa: BLE001 - the old kernel may be absent
        say("int8pack eager, per expert (old)", f"not run: {exc}")

    def dense_expert():
        e = gpu_pool.experts[cursor[0] % n]
        cursor[0] += 1
        return gpu_pool.forward(e, x)

    say("dense bf16 view eager, per expert", event_time(torch, dense_expert))
    for k in (1, 4, 8):
        t = ops.gpu_experts(gpu_pool, k, 0.3)
        say(f"graph lane, {k} expert(s) per step", t.median_s, f"IQR {t.spread_s * 1e6:.1f} us, {t.repeats} repeats")


@section("host-to-device copies", needs_cuda=True)
def copies(torch, host_pool):
    from probes import operators as ops
    from probes.experts import copy_expert

    copier = ops.H2DCopier(host_pool, 8)
    for k in (1, 4, 8):
        t = copier.time(k, 0.3)
        say(f"copy {k} expert(s), one copy each", t.median_s,
            f"{k * host_pool.layout.nbytes / t.median_s / 1e9:.1f} GB/s")
    stream = copier.stream
    legacy = [list(copier.slots[i]) for i in range(8)]  # (weight, scale) views: six copies an expert
    cursor = [0]

    def six_each():
        with torch.cuda.stream(stream):
            for i in range(8):
                copy_expert(legacy[i], list(host_pool.experts[cursor[0] % host_pool.n_experts]))
                cursor[0] += 1

    t = event_time(torch, six_each, 30, stream)
    say("copy 8 experts, six copies each (old)", t, f"{8 * host_pool.layout.nbytes / t / 1e9:.1f} GB/s")


@section("layer steps through the probes")
def steps(torch, model, quant, prober):
    from engine.replays.policy import Execution

    cores = prober_threads()
    for threads in sorted({max(1, cores // 2), max(1, cores - 1)}):
        for n in range(1, model.top_k + 1):
            prober.measure("cpu_experts", {"n": n, "threads": threads}, 0.1)
    for n in range(1, model.top_k + 1):
        prober.measure("gpu_experts", {"n": n}, 0.1)
        prober.measure("h2d_copy", {"n": n}, 0.1)
    for op in ("sync", "shared_layer", "token_head"):
        say(op, prober.measure(op, {}, 0.3).median_s)
    k = model.top_k
    for threads in sorted({max(1, cores // 2), max(1, cores - 1)}):
        say(f"cpu_experts n={k} threads={threads}", prober._points[("cpu_experts", threads)][k])
        for execution in Execution:
            for h, p in ((k, 0), (k // 2, 0), (k // 2, 2), (0, 0)):
                key = {"execution": execution.value, "hits": h, "misses": k - h, "prefetches": p, "threads": threads}
                m = prober.measure("schedule", key, 0.25)
                say(f"{execution.value} h={h} m={k - h} p={p} t={threads}", m.median_s,
                    f"IQR {m.spread_s * 1e6:.1f} us, {m.repeats} repeats, {m.method}")


def prober_threads() -> int:
    from probes.cpu_worker import physical_cores

    return physical_cores()


@section("the GPU lane eager against graphs", needs_cuda=True)
def eager_vs_graph(torch, prober):
    from engine.replays.policy import Execution
    from probes.layer_step import LayerStep

    pool = prober.gpu_pool
    k = prober.model.top_k
    x = pool.x
    device = dict(enumerate(pool.experts))
    for graphs in (False, True):
        step = LayerStep(pool, gpu_device="cuda", staging_slots=k, graphs=graphs)
        cursor = [0]

        def run():
            hits = [(cursor[0] + i) % pool.n_experts for i in range(k)]
            cursor[0] += k
            return step.run(Execution.SEQUENTIAL, x, device_experts=device, host_experts={}, hit_ids=hits,
                            miss_ids=[], threads=1).elapsed_s

        run()
        say(f"{k} hits, GPU lane {'graphs' if graphs else 'eager'} (no busy prelude)",
            statistics.median(run() for _ in range(50)))


def main(argv: list[str]) -> int:
    import torch

    dry = "--dry-run" in argv
    args = [a for a in argv if a != "--dry-run"]
    if not torch.cuda.is_available() and not dry:
        print(f"gpu_step_check: no CUDA device (torch {torch.__version__}, CUDA {torch.version.cuda}): "
              "nothing measured (--dry-run runs every section without CUDA)", file=sys.stderr)
        return 2
    CUDA.append(torch.cuda.is_available())
    if args:
        OUT.append(Path(args[0]))
    from engine.models.catalog import load_model
    from engine.cost.analytic_cost import AnalyticCostModel
    from engine.hardware.presets import platform_from
    from engine.models.quant import get_quantization
    from probes.experts import ExpertShape
    from probes.local_prober import LocalProber, PresetGpu

    start = time.perf_counter()
    say("torch", f"{torch.__version__} CUDA {torch.version.cuda}",
        torch.cuda.get_device_name(0) if CUDA[0] else "no CUDA: dry run")
    model, quant = load_model(MODEL), get_quantization(QUANT)
    shape = ExpertShape.of(model, quant)
    say("expert_bytes", shape.expert_bytes, f"{MODEL} {QUANT}")
    detected = detection(shape)
    bandwidth = detected.gpu.mem_bandwidth_bytes_per_s.value if detected is not None else None
    expert_kernels(torch, shape, bandwidth)
    # What the prober does not measure (ready-first's lane split) is priced for the GPU
    # detected here; only a dry run (no GPU) borrows a preset's figures, and says so.
    platform = detected if CUDA[0] and detected is not None else platform_from("h200", None, None)
    say("prober's analytic GPU", platform.gpu.name, "detected" if CUDA[0] else "preset (dry run without CUDA)")
    analytic = AnalyticCostModel(model, quant, platform, context_tokens=4096)
    t0 = time.perf_counter()
    prober = LocalProber(model, quant, PresetGpu(analytic), context_tokens=4096, cuda=CUDA[0])
    say("prober set-up (1 GiB pinned host pool, device pool, graphs)", f"{time.perf_counter() - t0:.1f} s",
        prober.kernel_stand_ins.get(QUANT, ""))
    copies(torch, prober.cpu_pool)  # the prober's pinned pool: built once in this process
    steps(torch, model, quant, prober)
    eager_vs_graph(torch, prober)
    from probes.host_pool import BUILT

    say("host pools built in this process", len(BUILT), "1: the prober's, which the copies reused")
    say("total", f"{time.perf_counter() - start:.0f} s")
    return 1 if any(k.startswith("error") for k in figures) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
