"""A llama.cpp command over two or more cards: where its parts sit (device_split), whether
each card holds them, and its decode price with each card's own bandwidth and the
hand-overs between cards (engine/cost/multi_gpu.py) added to the one-GPU price of the same
placement (llama_placement.placement_cost, which prices every GPU byte at the set's one
bandwidth and the GPU-CPU hand-overs)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from engine.cost.multi_gpu import card_time_scale, handovers_along
from engine.cost.request import AdviseRequest
from engine.llamacpp.device_split import (
    CardBytes,
    Devices,
    NotPriced,
    card_bytes,
    command_devices,
    layer_devices,
)
from engine.llamacpp.ecma_regex import search
from engine.llamacpp.llama_args import LlamaCommand
from engine.llamacpp.tensor_overrides import expert_tensor_names
from engine.llamacpp.llama_placement import PlacementCost, gpu_layer_count


@dataclass(frozen=True)
class CardPlacement:
    devices: Devices
    block_device: np.ndarray  # int [n_blocks], -1 on the CPU
    output_device: int
    memory: CardBytes

    def describe(self) -> str:
        spans = []
        for i, name in enumerate(self.devices.names):
            blocks = np.flatnonzero(self.block_device == i)
            if blocks.size:
                spans.append(f"{name} blocks {blocks[0]}-{blocks[-1]}")
        return f"layers split over {len(self.devices.names)} cards by {self.devices.how}: " + ", ".join(spans)


def place_on_cards(request: AdviseRequest, command: LlamaCommand, *, kv_offload: bool = True,
                   extra_buffer_bytes: float = 0.0) -> CardPlacement:
    """The command's devices, layer split and per-card bytes; NotPriced when it would not
    run or is not modelled."""
    model = request.model
    devices = command_devices(command, request.platform.gpu)
    if (len(devices.names) > 1 and command.gpu_layers is None
            and (command.fit or "on").lower() not in ("off", "0", "false")):
        raise NotPriced("not modelled: without -ngl, llama.cpp's --fit places the model over the cards itself "
                        "(give -ngl, or --fit off)")
    n_gpu = gpu_layer_count(command, model)
    blocks, output = layer_devices(model.n_blocks, n_gpu, devices.proportions)
    memory = card_bytes(request, command, devices, blocks, output, kv_offload=kv_offload,
                        extra_buffer_bytes=extra_buffer_bytes)
    return CardPlacement(devices, blocks, output, memory)


def _work_devices(request: AdviseRequest, command: LlamaCommand, cards: CardPlacement) -> list[int]:
    """The device of each piece of a token's work in order: each block, then its experts."""
    model = request.model
    out: list[int] = []
    names, visible = cards.devices.names, cards.devices.visible
    for block in range(model.n_blocks):
        home = int(cards.block_device[block])
        out.append(home)
        if block not in model.moe_blocks:
            continue
        for name in expert_tensor_names(model, block):
            buf = next((b for pat, b, _ in command.overrides if search(pat, name)), None)
            if buf is None:
                out.append(home)
            elif buf in names:
                out.append(names.index(buf))
            elif buf not in visible:
                out.append(-1)  # a host buffer
    out.append(cards.output_device)
    return out


def card_cost(request: AdviseRequest, command: LlamaCommand, cards: CardPlacement, cost: PlacementCost,
              set_bandwidth: float) -> tuple[PlacementCost, str]:
    """`cost` (the placement priced as one GPU of the set's bandwidth) with each card's bytes
    at its own bandwidth and the card-to-card hand-overs; and a note that says so."""
    scale = card_time_scale(cards.memory.gpu_bytes_read, cards.devices.cards, set_bandwidth)
    n, seconds = handovers_along(_work_devices(request, command, cards), cards.devices.cards,
                                 request.model.hidden_size)
    priced = replace(cost, gpu_blocks_s=cost.gpu_blocks_s * scale, gpu_experts_s=cost.gpu_experts_s * scale,
                     sync_s=cost.sync_s + seconds, transitions=cost.transitions + n)
    note = (f"{cards.describe()}; {n} hand-over(s) between cards a token ({seconds * 1e6:.0f} us)"
            + (f"; each card's bytes at its own bandwidth: GPU time x{scale:.3f}" if abs(scale - 1) > 1e-9 else ""))
    return priced, note
