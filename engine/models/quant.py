"""Quantization formats and their bits per weight (table in assets/quantizations.json)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from engine.core.assets_io import load_asset_json
from engine.core.errors import CopeInputError
from engine.core.names import did_you_mean


# llama_ftype_get_default_type: file type -> base tensor type.
FILE_TYPES: dict[str, str] = {
    "F32": "F32", "F16": "F16", "BF16": "BF16", "Q8_0": "Q8_0", "Q4_0": "Q4_0", "Q4_1": "Q4_1",
    "Q5_0": "Q5_0", "Q5_1": "Q5_1", "Q6_K": "Q6_K", "Q5_K_M": "Q5_K", "Q5_K_S": "Q5_K",
    "Q4_K_M": "Q4_K", "Q4_K_S": "Q4_K", "Q3_K_L": "Q3_K", "Q3_K_M": "Q3_K", "Q3_K_S": "Q3_K",
    "Q2_K": "Q2_K", "IQ4_XS": "IQ4_XS", "IQ4_NL": "IQ4_NL", "IQ3_XXS": "IQ3_XXS", "MXFP4_MOE": "MXFP4",
}


@dataclass(frozen=True)
class Quantization:
    name: str
    expert_bits_per_weight: float
    # llama.cpp's mixes keep attention, embeddings and the output head at a higher
    # precision than the experts (Q4_K_M stores some at Q6_K, MXFP4 GGUFs keep them at
    # Q8_0), so non-expert weights get their own average.
    non_expert_bits_per_weight: float
    source: str
    # The llama.cpp file type (llama-quantize's name, e.g. "Q4_K_M", "MXFP4_MOE") whose
    # per-tensor rules engine.models.quant_mix applies; "" for a plain average with no rules.
    llama_ftype: str = ""

    def expert_bytes(self, params: int) -> int:
        return int(round(params * self.expert_bits_per_weight / 8))

    def non_expert_bytes(self, params: int) -> int:
        return int(round(params * self.non_expert_bits_per_weight / 8))


QUANTIZATIONS_FILE = "assets/quantizations.json"


@cache
def quantizations() -> dict[str, Quantization]:
    """The table by upper-case name; the file is validated here, once."""
    return _parse_quantizations(load_asset_json("quantizations.json"), origin=QUANTIZATIONS_FILE)


def _parse_quantizations(data: object, *, origin: str) -> dict[str, Quantization]:
    if not isinstance(data, dict) or data.get("schema_version") != 1:
        raise CopeInputError("expected a JSON object with 'schema_version': 1", path=origin)
    rows = data.get("quantizations")
    if not isinstance(rows, list) or not rows:
        raise CopeInputError("field 'quantizations' must be a non-empty list", path=origin)
    table: dict[str, Quantization] = {}
    for index, row in enumerate(rows):
        where = f"quantizations[{index}]"
        if not isinstance(row, dict):
            raise CopeInputError(f"{where} must be an object", path=origin)
        for field in ("name", "source"):
            if not isinstance(row.get(field), str) or not row[field].strip():
                raise CopeInputError(f"{where}: field {field!r} must be a non-empty string", path=origin)
        bits = {}
        for field in ("expert_bits_per_weight", "non_expert_bits_per_weight"):
            value = row.get(field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 32:
                raise CopeInputError(f"{where} ({row['name']}): field {field!r} must be a number "
                                     f"in (0, 32], got {value!r}", path=origin)
            bits[field] = float(value)
        ftype = row.get("llama_ftype", "")
        if not isinstance(ftype, str):
            raise CopeInputError(f"{where} ({row['name']}): field 'llama_ftype' must be a string", path=origin)
        if ftype:
            if ftype.upper() not in FILE_TYPES:
                raise CopeInputError(f"{where} ({row['name']}): field 'llama_ftype' {ftype!r} is not one of "
                                     f"{', '.join(FILE_TYPES)}", path=origin)
        q = Quantization(name=row["name"], source=row["source"], llama_ftype=ftype.upper(), **bits)
        if q.name.upper() in table:
            raise CopeInputError(f"{where}: duplicate name {q.name!r}", path=origin)
        table[q.name.upper()] = q
    return table


def get_quantization(name: str) -> Quantization:
    table = quantizations()
    try:
        return table[name.upper()]
    except KeyError:
        names = [q.name for q in table.values()]
        raise CopeInputError(f"unknown quantization {name!r}{did_you_mean(name, names)}; "
                             f"`cope models` lists them: {', '.join(names)}") from None
