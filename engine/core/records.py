"""A frozen dataclass as the JSON object it is written as: one helper for the records
whose JSON is their fields, so a field added to the record is written without a second
list to keep in step.

`record_dict(record, names=..., **values)`: every field in declaration order, as JSON
holds it (a nested record as its own `to_dict()`, a tuple as a list, its records as
theirs), under its own name or the one `names` gives it (a JSON name older than the
field's); then `values`: one named after a field replaces its entry in place (a tuple of
pairs written as an object, say), any other is added after the fields (a derived
property). Key order is the JSON's order (orjson keeps it), so a document written through
it is byte-identical to the hand-written dict it replaces.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Mapping


def record_dict(record: Any, *, names: Mapping[str, str] | None = None, **values: Any) -> dict[str, Any]:
    names = names or {}
    out: dict[str, Any] = {}
    for f in fields(record):
        value = values.pop(f.name) if f.name in values else getattr(record, f.name)
        out[names.get(f.name, f.name)] = _as_json(value)
    out.update(values)
    return out


def _as_json(value: Any) -> Any:
    """A record as its to_dict(), a tuple as a list of its items so written; else the value."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_as_json(item) for item in value]
    return value
