"""The Profile: measured costs of operators and of combined layer steps (DESIGN.md §3, §5).

A Measurement is one probed figure: an operator, the key that says which variant
(how many experts, how many CPU threads, which schedule state), the median time over
its repeats and a spread (the interquartile range), and its basis.

Operators and their keys (exactly these fields, ints unless said otherwise):
- "gpu_experts": n            n routed experts computed on the GPU, batch 1
- "cpu_experts": n, threads   n routed experts computed on the CPU
- "h2d_copy": n               n experts' weights copied host to device (pinned)
- "sync": (none)              hidden state to the CPU and results back
- "shared_layer": (none) or block
                              attention, norms, router, shared experts of one block
                              (no key: the same for every block)
- "token_head": (none)        embedding, output head and sampling, once per token
- "schedule": execution (str), hits, misses, prefetches, threads
                              one whole layer step in that state (DESIGN.md §6)

A Profile is a set of measurements with provenance, for one hardware key and one
model shape key; `cache_key` names its file. On disk it is JSON, written atomically
and validated field by field when read: a foreign or damaged file is a CopeInputError
naming the file and the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Union

from engine.errors import CopeInputError
from engine.files import atomic_write_text
from engine.policy import Execution

PROFILE_SCHEMA = "cope-profile"
PROFILE_SCHEMA_VERSION = 1

KeyValue = Union[int, str]
Key = tuple[tuple[str, KeyValue], ...]  # sorted (field, value) pairs
Ident = tuple[str, Key]  # (operator, key): what a measurement is of

# "preset": from the analytic model of a hardware preset (no such device here);
# "measured+preset": a layer step whose CPU lane was measured, its GPU lanes preset.
BASES = ("measured", "estimated-from-atomic", "preset", "measured+preset")
# How a "schedule" measurement was made (optional; "" for the single operators):
# "timed-step": one real layer step (probes.layer_step) timed as a whole;
# "composed": its lanes timed or preset one by one and composed (engine.cost_model.compose_step).
METHODS = ("", "timed-step", "composed")

_STR_FIELDS = {"execution"}
# operator -> (required key fields, optional key fields)
OPERATOR_KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "gpu_experts": (frozenset({"n"}), frozenset()),
    "cpu_experts": (frozenset({"n", "threads"}), frozenset()),
    "h2d_copy": (frozenset({"n"}), frozenset()),
    "sync": (frozenset(), frozenset()),
    "shared_layer": (frozenset(), frozenset({"block"})),
    "token_head": (frozenset(), frozenset()),
    "schedule": (frozenset({"execution", "hits", "misses", "prefetches", "threads"}), frozenset()),
}
_KEY_MINIMUM = {"n": 1, "threads": 1, "hits": 0, "misses": 0, "prefetches": 0, "block": 0}


def normalize_key(operator: str, key: Mapping[str, KeyValue] | Iterable[tuple[str, KeyValue]]) -> Key:
    """The canonical key of `operator`: sorted (field, value) pairs, checked.

    Raises ValueError naming the problem (the loader adds the file and field).
    """
    if operator not in OPERATOR_KEYS:
        raise ValueError(f"unknown operator {operator!r}; known: {', '.join(OPERATOR_KEYS)}")
    pairs = dict(key.items() if isinstance(key, Mapping) else key)
    required, optional = OPERATOR_KEYS[operator]
    missing = required - pairs.keys()
    extra = pairs.keys() - required - optional
    if missing:
        raise ValueError(f"{operator} key lacks {', '.join(sorted(missing))}")
    if extra:
        raise ValueError(f"{operator} key has unexpected field(s) {', '.join(sorted(extra))}")
    for name, value in pairs.items():
        if name in _STR_FIELDS:
            if isinstance(value, Execution):
                pairs[name] = value = value.value
            if value not in {e.value for e in Execution}:
                raise ValueError(f"key field {name!r} is {value!r}, not an execution strategy")
        elif not isinstance(value, int) or isinstance(value, bool) or value < _KEY_MINIMUM[name]:
            raise ValueError(f"key field {name!r} is {value!r}, expected an integer >= {_KEY_MINIMUM[name]}")
    return tuple(sorted(pairs.items()))


def measurement_id(operator: str, key: Mapping[str, KeyValue] | Iterable[tuple[str, KeyValue]]) -> Ident:
    """(operator, canonical key): how a plan names a measurement it wants."""
    return operator, normalize_key(operator, key)


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
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} is {value!r}, expected a finite number of seconds >= 0")
            object.__setattr__(self, name, float(value))
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 1:
            raise ValueError(f"repeats is {self.repeats!r}, expected an integer >= 1")
        if self.basis not in BASES:
            raise ValueError(f"basis is {self.basis!r}, expected one of {', '.join(BASES)}")
        if self.method not in METHODS:
            raise ValueError(f"method is {self.method!r}, expected one of {', '.join(repr(m) for m in METHODS)}")

    @property
    def ident(self) -> Ident:
        return self.operator, self.key

    @property
    def key_dict(self) -> dict[str, KeyValue]:
        return dict(self.key)

    def to_dict(self) -> dict:
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
                raise ValueError(f"{name} is {getattr(self, name)!r}, expected text")
        try:
            datetime.fromisoformat(self.date_iso)
        except ValueError:
            raise ValueError(f"date_iso is {self.date_iso!r}, not an ISO 8601 date") from None
        for name in ("probe_budget_s", "probe_used_s"):
            object.__setattr__(self, name, _seconds(getattr(self, name), name))

    def to_dict(self) -> dict:
        return {
            "host": self.host,
            "gpu_name": self.gpu_name,
            "driver": self.driver,
            "torch_version": self.torch_version,
            "date_iso": self.date_iso,
            "probe_budget_s": self.probe_budget_s,
            "probe_used_s": self.probe_used_s,
            "kernel_stand_ins": dict(self.kernel_stand_ins),
        }


@dataclass(frozen=True)
class ModelShape:
    """What the probes' tensors looked like: the model shape half of the cache key."""

    model_id: str
    expert_bytes: int
    quantization: str

    def __post_init__(self):
        if not isinstance(self.model_id, str) or not self.model_id:
            raise ValueError(f"model_id is {self.model_id!r}, expected text")
        if not isinstance(self.quantization, str) or not self.quantization:
            raise ValueError(f"quantization is {self.quantization!r}, expected text")
        if isinstance(self.expert_bytes, bool) or not isinstance(self.expert_bytes, int) or self.expert_bytes < 1:
            raise ValueError(f"expert_bytes is {self.expert_bytes!r}, expected an integer >= 1")

    def to_dict(self) -> dict:
        return {"model_id": self.model_id, "expert_bytes": self.expert_bytes, "quantization": self.quantization}


@dataclass(frozen=True)
class Profile:
    provenance: Provenance
    model_shape: ModelShape
    hardware: tuple[tuple[str, Any], ...]  # a dict is accepted; str/int/float/bool values
    measurements: tuple[Measurement, ...] = ()
    schema_version: int = PROFILE_SCHEMA_VERSION

    def __post_init__(self):
        hardware = self.hardware.items() if isinstance(self.hardware, Mapping) else self.hardware
        object.__setattr__(self, "hardware", tuple(sorted(_check_hardware(dict(hardware)).items())))
        object.__setattr__(self, "measurements", tuple(self.measurements))
        if self.schema_version != PROFILE_SCHEMA_VERSION:
            raise ValueError(f"schema_version is {self.schema_version!r}, expected {PROFILE_SCHEMA_VERSION}")
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
        return Profile(provenance, self.model_shape, self.hardware, tuple(by_ident.values()), self.schema_version)

    def to_dict(self) -> dict:
        return {
            "schema": PROFILE_SCHEMA,
            "schema_version": self.schema_version,
            "key": self.key,
            "provenance": self.provenance.to_dict(),
            "model_shape": self.model_shape.to_dict(),
            "hardware": self.hardware_dict,
            "measurements": [m.to_dict() for m in self.measurements],
        }


def cache_key(hardware: Mapping[str, Any], model_shape: Mapping[str, Any]) -> str:
    """A stable name for the profile of this hardware and model shape: 24 hex digits of
    the SHA-256 of their canonical JSON (sorted keys, no spaces) and the schema version."""
    try:
        text = json.dumps(
            {"schema_version": PROFILE_SCHEMA_VERSION, "hardware": dict(hardware), "model_shape": dict(model_shape)},
            sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False,
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cache key parts must be plain JSON values: {exc}") from None
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:24]


# --- files ------------------------------------------------------------------------------


def save_profile(profile: Profile, path: str | os.PathLike) -> None:
    """Write `profile` as JSON: a temp file beside `path`, then os.replace."""
    text = json.dumps(profile.to_dict(), indent=1, allow_nan=False) + "\n"
    atomic_write_text(path, text)


def load_profile(path: str | os.PathLike) -> Profile:
    """Read a profile written by `save_profile`; any problem is a CopeInputError naming
    the file and the field."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CopeInputError("no such file", path=where) from None
    except IsADirectoryError:
        raise CopeInputError("is a folder, expected a profile .json file", path=where) from None
    except UnicodeDecodeError as exc:
        raise CopeInputError(f"not a COPE profile: not UTF-8 text (byte {exc.start})", path=where) from None
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=where) from None
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise CopeInputError(f"not a COPE profile: not valid JSON ({exc})", path=where) from None
    return _profile_from_doc(doc, where)


def _profile_from_doc(doc: Any, where: str) -> Profile:
    r = _Reader(where)
    r.obj(doc, "(top level)")
    schema = doc.get("schema")
    if schema != PROFILE_SCHEMA:
        raise CopeInputError(f"not a COPE profile: field 'schema' is {schema!r}, expected {PROFILE_SCHEMA!r}", path=where)
    version = doc.get("schema_version")
    if version != PROFILE_SCHEMA_VERSION or isinstance(version, bool):
        raise CopeInputError(
            f"field 'schema_version' is {version!r}; this COPE reads version {PROFILE_SCHEMA_VERSION}", path=where
        )
    r.exact_fields(doc, {"schema", "schema_version", "key", "provenance", "model_shape", "hardware", "measurements"}, "")

    prov = r.obj(doc["provenance"], "provenance")
    r.exact_fields(prov, {"host", "gpu_name", "driver", "torch_version", "date_iso", "probe_budget_s",
                          "probe_used_s", "kernel_stand_ins"}, "provenance.")
    stand_ins = r.obj(prov["kernel_stand_ins"], "provenance.kernel_stand_ins")
    for quant, what in stand_ins.items():
        r.text(what, f"provenance.kernel_stand_ins.{quant}")
    provenance = r.build(
        Provenance, "provenance",
        host=r.text(prov["host"], "provenance.host"),
        gpu_name=r.text(prov["gpu_name"], "provenance.gpu_name"),
        driver=r.text(prov["driver"], "provenance.driver"),
        torch_version=r.text(prov["torch_version"], "provenance.torch_version"),
        date_iso=r.text(prov["date_iso"], "provenance.date_iso"),
        probe_budget_s=r.seconds(prov["probe_budget_s"], "provenance.probe_budget_s"),
        probe_used_s=r.seconds(prov["probe_used_s"], "provenance.probe_used_s"),
        kernel_stand_ins=tuple(sorted(stand_ins.items())),
    )

    shape = r.obj(doc["model_shape"], "model_shape")
    r.exact_fields(shape, {"model_id", "expert_bytes", "quantization"}, "model_shape.")
    model_shape = r.build(
        ModelShape, "model_shape",
        model_id=r.text(shape["model_id"], "model_shape.model_id"),
        expert_bytes=r.integer(shape["expert_bytes"], "model_shape.expert_bytes"),
        quantization=r.text(shape["quantization"], "model_shape.quantization"),
    )

    hardware = r.obj(doc["hardware"], "hardware")
    try:
        _check_hardware(hardware)
    except ValueError as exc:
        raise CopeInputError(f"field 'hardware': {exc}", path=where) from None

    items = doc["measurements"]
    if not isinstance(items, list):
        raise CopeInputError(f"field 'measurements' is {type(items).__name__}, expected a list", path=where)
    measurements = []
    for i, item in enumerate(items):
        name = f"measurements[{i}]"
        r.obj(item, name)
        r.exact_fields(item, {"operator", "key", "median_s", "spread_s", "repeats", "basis"}, name + ".",
                       optional={"method"})
        r.obj(item["key"], name + ".key")
        measurements.append(r.build(
            Measurement, name,
            operator=r.text(item["operator"], name + ".operator"),
            key=item["key"],
            median_s=r.seconds(item["median_s"], name + ".median_s"),
            spread_s=r.seconds(item["spread_s"], name + ".spread_s"),
            repeats=r.integer(item["repeats"], name + ".repeats"),
            basis=r.text(item["basis"], name + ".basis"),
            method=r.text(item.get("method", ""), name + ".method"),
        ))
    profile = r.build(Profile, "measurements", provenance=provenance, model_shape=model_shape,
                      hardware=hardware, measurements=tuple(measurements))
    stored = doc["key"]
    if stored != profile.key:
        raise CopeInputError(
            f"field 'key' is {stored!r} but its hardware and model_shape give {profile.key!r} (edited by hand?)",
            path=where,
        )
    return profile


class _Reader:
    """Type checks that name the file and the field."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, field_name: str, problem: str):
        raise CopeInputError(f"field {field_name!r} {problem}", path=self.where)

    def obj(self, value: Any, name: str) -> dict:
        if not isinstance(value, dict):
            if name == "(top level)":
                raise CopeInputError("not a COPE profile: the top level is not a JSON object", path=self.where)
            self.fail(name, f"is {type(value).__name__}, expected an object")
        return value

    def exact_fields(self, value: dict, expected: set[str], prefix: str, optional: set[str] = frozenset()) -> None:
        missing = sorted(expected - value.keys())
        if missing:
            self.fail(prefix + missing[0], "is missing")
        extra = sorted(value.keys() - expected - optional)
        if extra:
            self.fail(prefix + extra[0], "is not a profile field")

    def text(self, value: Any, name: str) -> str:
        if not isinstance(value, str):
            self.fail(name, f"is {value!r}, expected text")
        return value

    def integer(self, value: Any, name: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(name, f"is {value!r}, expected an integer")
        return value

    def seconds(self, value: Any, name: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            self.fail(name, f"is {value!r}, expected seconds: a finite number >= 0")
        return float(value)

    def build(self, cls, name: str, **kwargs):
        try:
            return cls(**kwargs)
        except ValueError as exc:
            raise CopeInputError(f"field {name!r}: {exc}", path=self.where) from None


def _check_hardware(hardware: dict) -> dict:
    for name, value in hardware.items():
        if not isinstance(name, str):
            raise ValueError(f"hardware field name {name!r} is not text")
        if not isinstance(value, (str, int, float, bool)) or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError(f"hardware field {name!r} is {value!r}, expected text, a number or true/false")
    return hardware


def _str_pairs(value, name: str) -> tuple[tuple[str, str], ...]:
    pairs = dict(value.items() if isinstance(value, Mapping) else value)
    for k, v in pairs.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"{name} must map text to text, got {k!r}: {v!r}")
    return tuple(sorted(pairs.items()))


def _seconds(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} is {value!r}, expected a finite number of seconds >= 0")
    return float(value)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")
