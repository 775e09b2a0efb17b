"""`cope detect`: this machine's GPU and CPU, each figure with its basis, and the runtimes it has."""

from __future__ import annotations

import argparse
import sys

from cope_tui.commands.detect_runtimes import add_runtime_flags, render_runtimes, scan_for
from cope_tui.exit_codes import EXIT_OK
from cope_tui.service.hardware import remember_cpu_bandwidth
from probes import detect
from probes.gpu_list import GpuList, detect_gpus
from dataclasses import fields
from cope_tui.commands.output import write_json
from engine.hardware.platform import Fact


def register(sub: argparse._SubParsersAction) -> None:
    det = sub.add_parser("detect", help="detect this machine's GPU and CPU, and measure bandwidths")
    det.add_argument("--json", action="store_true", help="one JSON document on stdout")
    det.add_argument("--no-measure", action="store_true", help="skip the bandwidth measurements (a few seconds)")
    add_runtime_flags(det)

    det.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    def say(msg: str) -> None:
        print(f"cope: {msg}", file=sys.stderr, flush=True)

    platform = detect.detect_platform(measure=not args.no_measure, progress=say)
    kept = remember_cpu_bandwidth(platform)
    if kept is not None:
        say(f"kept the measured CPU memory bandwidth for planning on this machine ({kept})")
    warnings = platform_warnings(platform)
    for line in warnings:
        say(f"warning: {line}")
    say("listing every GPU (NVML, /sys/class/drm, amd-smi/rocm-smi)")
    gpus = detect_gpus()
    scan = scan_for(args)
    if args.json:
        write_json({"platform": platform.to_dict(), "gpus": gpus.to_dict(), "warnings": warnings,
                    "runtimes": scan.to_dict()})
    else:
        sys.stdout.write("".join(f"warning: {line}\n" for line in warnings) + _render_platform(platform)
                         + render_gpu_list(gpus) + render_runtimes(scan))
    return EXIT_OK


def platform_warnings(platform) -> list[str]:  # type: ignore[no-untyped-def]
    """One line per thing that makes the measured figures less than they could be: an
    NVIDIA GPU torch cannot use (the GPU side then comes from a preset), with its fix."""
    problem = platform.gpu.cuda_problem
    if problem is None:
        return []
    return [f"{problem.message}; the GPU figures will come from a preset, not this GPU. Fix: {problem.fix}"]


def _format_fact(name: str, value: object) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if name.endswith("_bytes_per_s"):
            return f"{value / 1e9:.1f} GB/s"
        if name.endswith("_bytes"):
            return f"{value / 1024**3:.1f} GiB"
        if name.endswith("_hz"):
            return f"{value / 1e9:.2f} GHz"
        if isinstance(value, float):
            return f"{value:.3g}"
    return str(value)


def _render_platform(platform) -> str:  # type: ignore[no-untyped-def]
    lines: list[str] = []
    specs = (("GPU", platform.gpu), ("CPU", platform.cpu))
    width = max(len(f.name) for _, spec in specs for f in fields(spec)  # one column for both
                if isinstance(getattr(spec, f.name), Fact))
    for title, spec in specs:
        matched = getattr(spec, "matched_preset_id", None)
        lines.append(f"{title}: {spec.name}" + (f" (preset {spec.preset_id})" if spec.preset_id else "")
                     + (f" (spec sheet: preset {matched})" if matched else ""))
        facts = [(f.name, getattr(spec, f.name)) for f in fields(spec) if isinstance(getattr(spec, f.name), Fact)]
        notes = {fact.note for _, fact in facts}
        if facts and not any(fact.known for _, fact in facts) and len(notes) == 1:
            lines.append(f"  every figure unknown: {notes.pop()}")
            continue
        for name, fact in facts:
            lines.append(f"  {name:<{width}} {_format_fact(name, fact.value):>12}  {fact.basis:<8}  {fact.note}")
    return "\n".join(lines) + "\n"


def _gib(fact: Fact) -> str:
    return f"{float(fact.value) / 1024**3:.1f} GiB" if fact.known else "memory unknown"  # type: ignore[arg-type]


def _link_text(gen: Fact, lanes: Fact) -> str:
    if not gen.known and not lanes.known:
        return "link unknown"
    return f"gen{gen.value if gen.known else '?'} x{lanes.value if lanes.known else '?'}"


def render_gpu_list(found: GpuList) -> str:
    """Every GPU, one line each (memory, PCIe link at most and now, the buffer llama.cpp
    names it by), then what could not be read and the cards that share a PCIe switch."""
    lines = [f"GPUs on this machine: {len(found.gpus)}"]
    index: dict[str, int] = {}
    for i, g in enumerate(found.gpus):
        n = index.get(g.backend, 0)
        index[g.backend] = n + 1
        free = f", {_gib(g.vram_free_bytes)} free" if g.vram_free_bytes.known else ""
        matched = f", spec sheet: preset {g.matched_preset_id}" if g.matched_preset_id else ""
        lines.append(f"  GPU {i}: {g.name} ({g.vendor}; llama.cpp {g.backend}{n}) {_gib(g.vram_bytes)}{free}; PCIe "
                     f"{_link_text(g.pcie_gen, g.pcie_lanes)} at most, {_link_text(g.pcie_gen_current, g.pcie_lanes_current)}"
                     f" now{f'; {g.pci_address}' if g.pci_address else ''}{matched}")
        if not g.vram_bytes.known:
            lines.append(f"    memory not read: {g.vram_bytes.note}")
        if not g.pcie_gen.known:
            lines.append(f"    link not read: {g.pcie_gen.note}")
    lines += [f"  not read: {note}" for note in found.notes]
    lines += [f"  {line}" for line in found.shared_links]
    return "\n".join(lines) + "\n"
