"""The Profile: measured costs of operators and of combined layer steps (DESIGN.md §3, §5).

A Measurement is one probed figure: an operator, the key that says which variant
(how many experts, how many CPU threads, which schedule state), the median time over
its repeats and a spread (the interquartile range), and its basis.

A Profile is a set of measurements with provenance, for one hardware key and one
model shape key, and the probe series it refused (Refusal: measured twice and found
inconsistent both times, engine.profiles.probe_consistency; their figures are not kept, so the
profile lacks them and the next probe run measures them again). These are the values, each checked when built (a ValueError naming
the field). The operators and their keys, and the cache key that names a profile's
file, are in `engine.profiles.profile_keys`; the JSON file, written atomically and validated
field by field when read, in `engine.profiles.profile_io`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cached_property
from typing import Any

from engine.core.errors import shown
from engine.core.records import record_dict
from engine.profiles.profile_keys import (
    PROFILE_SCHEMA,
    PROFILE_SCHEMA_VERSION,
    Ident,
    Key,
    KeyValue,
    cache_key,
    measurement_id,
    normalize_key,
)

# "preset": from the analytic model of a hardware preset (no such device here);
# "measured+preset": a layer step whose CPU lane was measured, its GPU lanes preset.
BASES = ("measured", "estimated-from-atomic", "preset", "measured+preset")
# How a "schedule" measurement was made (optional; "" for the single operators):
# "timed-step": one real layer step (probes.layer_step) timed as a whole;
# "composed": its lanes timed or preset one by one and composed (engine.cost.cost_model.compose_step).
METHODS = ("", "timed-step", "composed")


@dataclass(frozen=True)
class Measurement:
    operator: str
    key: Key  # a dict is accepted and normalized to sorted pairs
    median_s: float
    spread_s: float  # interquartile range of the repeats
    repeats: int
    basis: str = "measured"  # or "estimated-from-atomic", "preset", "measured+preset"
    method: str = ""  # schedules: "timed-step" or "composed" (METHODS); written only when set

    def __post_init__(self):
        object.__setattr__(self, "key", normalize_key(self.operator, self.key))
        for name in ("median_s", "spread_s"):
            object.__setattr__(self, name, _seconds(getattr(self, name), name))
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise ValueError(f"repeats is {shown(self.repeats)}, expected an integer >= 1")
        if self.basis not in BASES:
            raise ValueError(f"basis is {shown(self.basis)}, expected one of {', '.join(BASES)}")
        if self.method not in METHODS:
            raise ValueError(f"method is {shown(self.method)}, expected one of {', '.join(repr(m) for m in METHODS)}")

    @property
    def ident(self) -> Ident:
        return self.operator, self.key

    @property
    def key_dict(self) -> dict[str, KeyValue]:
        return dict(self.key)

    def to_dict(self) -> dict:
        # by hand: `method` is written only when set, so profiles without it read as before
        doc = {
            "operator": self.operator,
            "key": self.key_dict,
            "median_s": self.median_s,
            "spread_s": self.spread_s,
            "repeats": self.repeats,
            "basis": self.basis,
        }
        if self.method:
            doc["method"] = self.method
        return doc


@dataclass(frozen=True)
class Provenance:
    host: str
    gpu_name: str
    driver: str
    torch_version: str
    date_iso: str  # when the probes ran (ISO 8601)
    probe_budget_s: float  # time the probes were allowed
    probe_used_s: float  # time they took, over every run that filled this profile
    kernel_stand_ins: tuple[tuple[str, str], ...] = ()  # quantization -> what stood in for its kernel

    def __post_init__(self):
        object.__setattr__(self, "kernel_stand_ins", _str_pairs(self.kernel_stand_ins, "kernel_stand_ins"))
        for name in ("host", "gpu_name", "driver", "torch_version", "date_iso"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} is {shown(getattr(self, name))}, expected text")
        try:
            datetime.fromisoformat(self.date_iso)
        except ValueError:
            raise ValueError(f"date_iso is {shown(self.date_iso)}, not an ISO 8601 date") from None
        for name in ("probe_budget_s", "probe_used_s"):
            object.__setattr__(self, name, _seconds(getattr(self, name), name))

    def to_dict(self) -> dict:
        return record_dict(self, kernel_stand_ins=dict(self.kernel_stand_ins))


@dataclass(frozen=True)
class ProbedModel:
    """What the probes' tensors looked like: the model shape half of the cache key."""

    model_id: str
    expert_bytes: int
    quantization: str

    def __post_init__(self):
        if not isinstance(self.model_id, str) or not self.model_id:
            raise ValueError(f"model_id is {shown(self.model_id)}, expected text")
        if not isinstance(self.quantization, str) or not self.quantization:
            raise ValueError(f"quantization is {shown(self.quantization)}, expected text")
        if isinstance(self.expert_bytes, bool) or not isinstance(self.expert_bytes, int) or self.expert_bytes < 1:
            raise ValueError(f"expert_bytes is {shown(self.expert_bytes)}, expected an integer >= 1")

    def to_dict(self) -> dict:
        return record_dict(self)


@dataclass(frozen=True)
class Refusal:
    """A probe series not used: `operator` at the key fields other than n (`fixed`:
    threads for cpu_experts, none for gpu_experts), and `note`, the user's line saying
    which figure was refused and why."""

    operator: str
    fixed: tuple[tuple[str, KeyValue], ...]  # a dict is accepted
    note: str

    def __post_init__(self):
        fixed = dict(self.fixed.items() if isinstance(self.fixed, Mapping) else self.fixed)
        if not isinstance(self.operator, str) or not self.operator:
            raise ValueError(f"operator is {shown(self.operator)}, expected text")
        for name, value in fixed.items():
            if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, (int, str)):
                raise ValueError(f"fixed field {shown(name)} is {shown(value)}, expected an integer or text")
        if not isinstance(self.note, str) or not self.note:
            raise ValueError(f"note is {shown(self.note)}, expected text")
        object.__setattr__(self, "fixed", tuple(sorted(fixed.items())))

    def covers(self, m: Measurement) -> bool:
        """Whether `m` is a point of the refused series."""
        return m.operator == self.operator and tuple((k, v) for k, v in m.key if k != "n") == self.fixed

    def to_dict(self) -> dict:
        return record_dict(self, fixed=dict(self.fixed))


@dataclass(frozen=True)
class Profile:
    provenance: Provenance
    model_shape: ProbedModel
    hardware: tuple[tuple[str, Any], ...]  # a dict is accepted; str/int/float/bool values
    measurements: tuple[Measurement, ...] = ()
    schema_version: int = PROFILE_SCHEMA_VERSION
    refused: tuple[Refusal, ...] = ()  # series measured twice, inconsistent both times

    def __post_init__(self):
        hardware = self.hardware.items() if isinstance(self.hardware, Mapping) else self.hardware
        object.__setattr__(self, "hardware", tuple(sorted(check_hardware(dict(hardware)).items())))
        object.__setattr__(self, "measurements", tuple(self.measurements))
        object.__setattr__(self, "refused", tuple(self.refused))
        if not all(isinstance(r, Refusal) for r in self.refused):
            raise ValueError("refused holds something other than a Refusal")
        if self.schema_version != PROFILE_SCHEMA_VERSION:
            raise ValueError(f"schema_version is {shown(self.schema_version)}, expected {PROFILE_SCHEMA_VERSION}")
        seen: set[Ident] = set()
        for m in self.measurements:
            if not isinstance(m, Measurement):
                raise ValueError(f"measurements hold a {type(m).__name__}, expected Measurement")
            if m.ident in seen:
                raise ValueError(f"two measurements of {m.operator} {m.key_dict}")
            seen.add(m.ident)

    @property
    def hardware_dict(self) -> dict[str, Any]:
        return dict(self.hardware)

    @property
    def key(self) -> str:
        return cache_key(self.hardware_dict, self.model_shape.to_dict())

    @cached_property
    def _by_ident(self) -> dict[Ident, Measurement]:
        return {m.ident: m for m in self.measurements}

    def find(self, operator: str, key: Mapping[str, KeyValue] | Iterable[tuple[str, KeyValue]] = ()) -> Measurement | None:
        return self._by_ident.get(measurement_id(operator, key))

    def of(self, operator: str) -> list[Measurement]:
        return [m for m in self.measurements if m.operator == operator]

    def has(self, ident: Ident) -> bool:
        return ident in self._by_ident

    def missing(self, planned: Iterable[Ident]) -> list[Ident]:
        """The planned (operator, key) pairs this profile has no measurement of, in order."""
        return [measurement_id(op, key) for op, key in planned if measurement_id(op, key) not in self._by_ident]

    def merged(self, measurements: Iterable[Measurement], *, probe_used_s: float = 0.0) -> Profile:
        """A copy with `measurements` added; a new one replaces an old one of the same thing."""
        by_ident = dict(self._by_ident)
        for m in measurements:
            by_ident[m.ident] = m
        provenance = self.provenance
        if probe_used_s:
            provenance = replace(provenance, probe_used_s=provenance.probe_used_s + probe_used_s)
        return Profile(provenance, self.model_shape, self.hardware, tuple(by_ident.values()), self.schema_version,
                       self.refused)

    def refusing(self, refusal: Refusal) -> Profile:
        """A copy without the series `refusal` names (so a later run measures it again),
        recording the refusal in place of an older one of the same series."""
        kept = tuple(m for m in self.measurements if not refusal.covers(m))
        others = tuple(r for r in self.refused if (r.operator, r.fixed) != (refusal.operator, refusal.fixed))
        return replace(self, measurements=kept, refused=(*others, refusal))

    def accepting(self, operator: str, fixed: Mapping[str, KeyValue]) -> Profile:
        """A copy with no refusal of that series (it was measured again and passed)."""
        wanted = tuple(sorted(fixed.items()))
        return replace(self, refused=tuple(r for r in self.refused if (r.operator, r.fixed) != (operator, wanted)))

    def to_dict(self) -> dict:
        # by hand: the schema's header first, hardware as an object, `refused` only when there is one
        return {
            "schema": PROFILE_SCHEMA,
            "schema_version": self.schema_version,
            "key": self.key,
            "provenance": self.provenance.to_dict(),
            "model_shape": self.model_shape.to_dict(),
            "hardware": self.hardware_dict,
            "measurements": [m.to_dict() for m in self.measurements],
            # Written only when there is one, so a profile without refusals reads as before.
            **({"refused": [r.to_dict() for r in self.refused]} if self.refused else {}),
        }


def check_hardware(hardware: dict) -> dict:
    for name, value in hardware.items():
        if not isinstance(name, str):
            raise ValueError(f"hardware field name {shown(name)} is not text")
        if not isinstance(value, (str, int, float, bool)) or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError(f"hardware field {shown(name)} is {shown(value)}, expected text, a number or true/false")
    return hardware


def _str_pairs(value, name: str) -> tuple[tuple[str, str], ...]:
    pairs = dict(value.items() if isinstance(value, Mapping) else value)
    for k, v in pairs.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"{name} must map text to text, got {shown(k)}: {shown(v)}")
    return tuple(sorted(pairs.items()))


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond any float
        return False


def _seconds(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) or value < 0:
        raise ValueError(f"{name} is {shown(value)}, expected a finite number of seconds >= 0")
    return float(value)
