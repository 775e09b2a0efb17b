"""Quantization formats and their bits per weight (table in assets/quantizations.json)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from engine.assets_io import load_asset_json
from engine.errors import CopeInputError


@dataclass(frozen=True)
class Quantization:
    name: str
    expert_bits_per_weight: float
    # llama.cpp's mixes keep attention, embeddings and the output head at a higher
    # precision than the experts (Q4_K_M stores some at Q6_K, MXFP4 GGUFs keep them at
    # Q8_0), so non-expert weights get their own average.
    non_expert_bits_per_weight: float
    source: str

    def expert_bytes(self, params: int) -> int:
        return int(round(params * self.expert_bits_per_weight / 8))

    def non_expert_bytes(self, params: int) -> int:
        return int(round(params * self.non_expert_bits_per_weight / 8))


@cache
def quantizations() -> dict[str, Quantization]:
    data = load_asset_json("quantizations.json")
    table = {}
    for row in data["quantizations"]:
        q = Quantization(
            name=row["name"],
            expert_bits_per_weight=float(row["expert_bits_per_weight"]),
            non_expert_bits_per_weight=float(row["non_expert_bits_per_weight"]),
            source=row["source"],
        )
        table[q.name.upper()] = q
    return table


def get_quantization(name: str) -> Quantization:
    table = quantizations()
    try:
        return table[name.upper()]
    except KeyError:
        known = ", ".join(q.name for q in table.values())
        raise CopeInputError(f"unknown quantization {name!r}; known: {known}") from None
