"""`cope models` and `cope presets`: what is built in, as a table or (--json) one JSON document."""

from __future__ import annotations

import argparse

from cope_tui.commands.output import write_json
from cope_tui.exit_codes import EXIT_OK
from engine.hardware.cpu_presets import cpu_presets
from engine.hardware.memory import GIB
from engine.hardware.presets import gpu_presets
from engine.models.catalog import catalog
from engine.models.quant import quantizations


def register(sub: argparse._SubParsersAction) -> None:
    models_parser = sub.add_parser("models", help="list the built-in model catalog and quantizations")
    models_parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    models_parser.set_defaults(run=models)
    presets_parser = sub.add_parser("presets", help="list the GPU and CPU presets")
    presets_parser.add_argument("--json", action="store_true", help="one JSON document on stdout (every figure "
                                                                    "with its basis and source)")
    presets_parser.set_defaults(run=presets)


def models(args: argparse.Namespace) -> int:
    if args.json:
        write_json({
            "models": [{"id": m.id, "name": m.name, "arch": m.arch, "blocks": m.n_blocks,
                        "moe_blocks": list(m.moe_blocks), "routed_experts": m.n_routed_experts, "top_k": m.top_k,
                        "shared_experts": m.n_shared_experts, "provenance": m.source} for m in catalog().values()],
            "quantizations": [{"name": q.name, "expert_bits_per_weight": q.expert_bits_per_weight,
                               "non_expert_bits_per_weight": q.non_expert_bits_per_weight, "provenance": q.source}
                              for q in quantizations().values()],
        })
        return EXIT_OK
    for model in catalog().values():
        print(
            f"{model.id:<34} {model.name:<34} {model.n_moe_layers:>3} MoE layers x "
            f"{model.n_routed_experts:>3} experts, top-{model.top_k}, arch {model.arch}"
        )
    print("Quantizations (--quant; bits per weight of the experts and of the rest):")
    for quant in quantizations().values():
        print(f"  {quant.name:<10} {quant.expert_bits_per_weight:5.2f}  {quant.non_expert_bits_per_weight:5.2f}")
    return EXIT_OK


def presets(args: argparse.Namespace) -> int:
    if args.json:
        write_json({"gpus": {pid: gpu.to_dict() for pid, gpu in gpu_presets().items()},
                    "cpus": {pid: cpu.to_dict() for pid, cpu in cpu_presets().items()}})
        return EXIT_OK
    print("GPUs:")
    for pid, gpu in gpu_presets().items():
        print(
            f"  {pid:<20} {gpu.name:<52} {gpu.vram_bytes.value / GIB:>5.0f} GiB "
            f"{gpu.mem_bandwidth_bytes_per_s.value / 1e9:>6.0f} GB/s  PCIe {gpu.pcie_gen.value} x{gpu.pcie_lanes.value}"
        )
    print("CPUs (one socket; '2x NAME' for two; --memory TYPE-SPEEDxCHANNELS replaces the usual memory):")
    for pid, cpu in cpu_presets().items():
        memory = f"{cpu.memory_channels.value} x {cpu.memory_type.value}-{cpu.memory_speed_mts.value}"
        if cpu.memory_type.value and str(cpu.memory_type.value).startswith("LP"):
            memory = f"{cpu.memory_type.value}-{cpu.memory_speed_mts.value} ({cpu.memory_channels.value} x 16-bit)"
        print(
            f"  {pid:<24} {cpu.name:<34} {cpu.physical_cores.value:>3} cores  {memory:<22} "
            f"{cpu.mem_bandwidth_bytes_per_s.value / 1e9:>6.1f} GB/s"
        )
    return EXIT_OK
