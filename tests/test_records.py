"""engine/core/records.py: a record's JSON object is its fields in order, with named values
replacing a field in place or added after the fields, nested records as their own."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from engine.core.records import record_dict
from engine.profiles.profile import Provenance


@dataclass(frozen=True)
class Inner:
    a: int

    def to_dict(self) -> dict:
        return {"a_value": self.a}


@dataclass(frozen=True)
class Outer:
    name: str
    pairs: tuple[tuple[str, int], ...]
    inner: Inner
    last: float = 0.5


def test_fields_in_order_values_in_place_or_after_nested_as_their_own():
    doc = record_dict(Outer("x", (("k", 1),), Inner(3)), pairs={"k": 1}, extra=True)
    assert list(doc) == ["name", "pairs", "inner", "last", "extra"]
    assert doc == {"name": "x", "pairs": {"k": 1}, "inner": {"a_value": 3}, "last": 0.5, "extra": True}


def test_a_profile_provenance_is_written_as_before():
    p = Provenance("host", "RTX 4090", "550.1", "2.13.0", "2026-12-03T11:00:00", 60.0, 12.5, (("Q4_K_M", "Q8_0"),))
    before = b'{"host":"host","gpu_name":"RTX 4090","driver":"550.1","torch_version":"2.13.0",' \
             b'"date_iso":"2026-12-03T11:00:00","probe_budget_s":60.0,"probe_used_s":12.5,' \
             b'"kernel_stand_ins":{"Q4_K_M":"Q8_0"}}'
    assert orjson.dumps(p.to_dict()) == before
