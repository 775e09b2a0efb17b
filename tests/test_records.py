"""engine/core/records.py: a record's JSON object is its fields in order, with named values
replacing a field in place or added after the fields, nested records as their own, tuples
as lists, and a field written under an older JSON name where one is given."""

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


@dataclass(frozen=True)
class Group:
    members: tuple[Inner, ...]
    tags: tuple[str, ...]
    n_items: int


def test_tuples_are_lists_of_their_items_as_written_and_a_field_may_keep_an_older_name():
    doc = record_dict(Group((Inner(1), Inner(2)), ("a", "b"), 2), names={"n_items": "items"})
    assert doc == {"members": [{"a_value": 1}, {"a_value": 2}], "tags": ["a", "b"], "items": 2}
    assert record_dict(Group((), (), 0)) == {"members": [], "tags": [], "n_items": 0}


def test_a_profile_provenance_is_written_as_before():
    p = Provenance("host", "RTX 4090", "550.1", "2.13.0", "2026-12-03T11:00:00", 60.0, 12.5, (("Q4_K_M", "Q8_0"),))
    before = b'{"host":"host","gpu_name":"RTX 4090","driver":"550.1","torch_version":"2.13.0",' \
             b'"date_iso":"2026-12-03T11:00:00","probe_budget_s":60.0,"probe_used_s":12.5,' \
             b'"kernel_stand_ins":{"Q4_K_M":"Q8_0"}}'
    assert orjson.dumps(p.to_dict()) == before
