"""The side file of the llama.cpp MoE expert-cache fork (DESIGN.md §7): a synthetic
llama-moe-trace profile whose decode rows pin exactly the experts COPE chose.

The fork keeps the S most frequent experts per layer, counted from the profile's decode
rows (`pos,layer,id0,...` with pos >= 0), so a file in which COPE's choice is strictly
the most frequent per layer makes the fork hold that choice.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from engine.models.model import ModelSpec
from engine.replays.replay import popularity_order
from engine.runtimes.base import SideFile


def fork_profile_csv(popularity: np.ndarray, slots: int, moe_blocks: Sequence[int], top_k: int) -> str:
    """A llama-moe-trace CSV whose decode rows make each layer's `slots` most popular
    experts (COPE's choice) strictly the most frequent ids of that layer.

    Rows are `pos,layer,id0..id{k-1}` with `layer` the block index and pos >= 0. With
    slots >= k the chosen experts are laid out round-robin over `slots` rows, so each
    appears exactly k times and no other expert appears. With slots < k every row holds
    all chosen experts plus k - slots fillers cycling over the other experts, across
    E - slots rows: chosen ones appear E - slots times, each filler only k - slots < E - slots.
    """
    check_slots(slots, np.shape(popularity)[1])
    order = popularity_order(np.asarray(popularity))
    n_layers = order.shape[0]
    rows: list[tuple[int, list[int]]] = []  # (layer index, ids)
    for layer in range(n_layers):
        chosen = [int(e) for e in order[layer, :slots]]
        if slots >= top_k:
            for j in range(slots):
                rows.append((layer, [chosen[(j * top_k + i) % slots] for i in range(top_k)]))
        else:
            others = [int(e) for e in order[layer, slots:]]
            n_fill = top_k - slots
            for j in range(len(others)):
                fill = [others[(j * n_fill + i) % len(others)] for i in range(n_fill)]
                rows.append((layer, chosen + fill))
    # Token-major like a real trace: position p holds row p of every layer.
    per_layer: dict[int, list[list[int]]] = {}
    for layer, ids in rows:
        per_layer.setdefault(layer, []).append(ids)
    n_pos = max(len(v) for v in per_layer.values())
    lines = []
    for pos in range(n_pos):
        for layer in range(n_layers):
            layer_rows = per_layer[layer]
            if pos < len(layer_rows):
                lines.append(",".join(str(x) for x in (pos, moe_blocks[layer], *layer_rows[pos])))
    return "\n".join(lines) + "\n"


def check_slots(slots: int, n_experts: int) -> None:
    if not 0 < slots < n_experts:
        raise ValueError(f"slots must be in 1..{n_experts - 1}, got {slots}")


def profile_file_name(model: ModelSpec, slots: int) -> str:
    return f"cope-{model.id}-fixed-{slots}.csv"


def fork_profile_file(model: ModelSpec, popularity: np.ndarray, slots: int) -> SideFile:
    """The profile of `fork_profile_csv` as an artefact laid out only when it is read (a
    command shown or reported as JSON names it and never writes it). The slots are checked
    now, so a bad count fails when the command is made, as before; the popularity is
    copied, so the file holds the routing the command was made from."""
    check_slots(slots, np.shape(popularity)[1])
    counts = np.array(popularity, copy=True)
    return SideFile(profile_file_name(model, slots),
                    lambda: fork_profile_csv(counts, slots, model.moe_blocks, model.top_k))
