"""A frozen dataclass as the JSON object it is written as: one helper for the records
whose JSON is their fields, so a field added to the record is written without a second
list to keep in step.

`record_dict(record, **values)`: every field in declaration order (a nested record as its
own `to_dict()`), then `values`: one named after a field replaces its entry in place (a
tuple of pairs written as an object, say), any other is added after the fields (a derived
property). Key order is the JSON's order (orjson keeps it), so a document written through
it is byte-identical to the hand-written dict it replaces.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any


def record_dict(record: Any, **values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(record):
        value = values.pop(f.name) if f.name in values else getattr(record, f.name)
        out[f.name] = value.to_dict() if hasattr(value, "to_dict") else value
    out.update(values)
    return out
