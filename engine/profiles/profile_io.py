"""A Profile's file: JSON, written atomically, validated field by field when read.

`save_profile` writes a temp file beside the target, then replaces it (engine.core.files).
`load_profile` refuses a foreign or damaged file, or one whose stored key its hardware
and model shape no longer give, with a CopeInputError naming the file and the field.
The values are in `engine.profiles.profile`, the names and keys in `engine.profiles.profile_keys`.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from engine.core.errors import CopeInputError, shown
from engine.core.files import atomic_write_text, open_regular
from engine.profiles.profile import Measurement, ProbedModel, Profile, Provenance, Refusal, check_hardware
from engine.profiles.profile_keys import PROFILE_SCHEMA, PROFILE_SCHEMA_VERSION

# A profile is a few hundred measurements; anything far larger is not one (and is not read whole).
MAX_PROFILE_BYTES = 16 * 2**20
# No single operator of one token's step takes this long: a larger time is a damaged file
# (1e308 s would overflow every sum it enters).
MAX_PLAUSIBLE_S = 1000.0
# Operators that do work: a measured time of 0 s is impossible (and would divide by zero);
# only a sync may be free.
_WORK_OPERATORS = ("gpu_experts", "cpu_experts", "h2d_copy", "shared_layer", "token_head", "schedule")


def save_profile(profile: Profile, path: str | os.PathLike) -> None:
    """Write `profile` as JSON: a temp file beside `path`, then os.replace."""
    text = json.dumps(profile.to_dict(), indent=1, allow_nan=False) + "\n"
    atomic_write_text(path, text)


def load_profile(path: str | os.PathLike) -> Profile:
    """Read a profile written by `save_profile`; any problem is a CopeInputError naming
    the file and the field."""
    where = str(path)
    try:
        with open_regular(path, what="file") as handle:
            raw = handle.read(MAX_PROFILE_BYTES + 1)
        if len(raw) > MAX_PROFILE_BYTES:
            raise CopeInputError(f"not a COPE profile: larger than {MAX_PROFILE_BYTES // 2**20} MiB", path=where)
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CopeInputError(f"not a COPE profile: not UTF-8 text (byte {exc.start})", path=where) from None
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=where) from None
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise CopeInputError(f"not a COPE profile: not valid JSON ({_short(exc)})", path=where) from None
    profile = _profile_from_doc(doc, where)
    check_plausible(profile, where)
    return profile


def check_plausible(profile: Profile, where: str) -> None:
    """CopeInputError unless every time could be a real measurement: work takes more than
    0 s and less than MAX_PLAUSIBLE_S (a profile that fails is unusable as a whole)."""
    for i, m in enumerate(profile.measurements):
        if m.median_s > MAX_PLAUSIBLE_S or m.spread_s > MAX_PLAUSIBLE_S:
            raise CopeInputError(f"field 'measurements[{i}]' ({m.operator}) takes {max(m.median_s, m.spread_s):g} s, "
                                 f"more than any step could ({MAX_PLAUSIBLE_S:g} s): a damaged profile", path=where)
        if m.median_s <= 0 and m.operator in _WORK_OPERATORS:
            raise CopeInputError(f"field 'measurements[{i}].median_s' is 0 for {m.operator}, which cannot take "
                                 "no time: a damaged profile", path=where)


def _short(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


def _profile_from_doc(doc: Any, where: str) -> Profile:
    r = _Reader(where)
    r.obj(doc, "(top level)")
    schema = doc.get("schema")
    if schema != PROFILE_SCHEMA:
        raise CopeInputError(f"not a COPE profile: field 'schema' is {shown(schema)}, expected {PROFILE_SCHEMA!r}", path=where)
    version = doc.get("schema_version")
    if version != PROFILE_SCHEMA_VERSION or isinstance(version, bool):
        raise CopeInputError(
            f"field 'schema_version' is {shown(version)}; this COPE reads version {PROFILE_SCHEMA_VERSION}", path=where
        )
    r.exact_fields(doc, {"schema", "schema_version", "key", "provenance", "model_shape", "hardware", "measurements"}, "",
                   optional={"refused"})

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
        ProbedModel, "model_shape",
        model_id=r.text(shape["model_id"], "model_shape.model_id"),
        expert_bytes=r.integer(shape["expert_bytes"], "model_shape.expert_bytes"),
        quantization=r.text(shape["quantization"], "model_shape.quantization"),
    )

    hardware = r.obj(doc["hardware"], "hardware")
    try:
        check_hardware(hardware)
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
                      hardware=hardware, measurements=tuple(measurements), refused=_refusals(r, doc.get("refused", [])))
    stored = doc["key"]
    if stored != profile.key:
        raise CopeInputError(
            f"field 'key' is {shown(stored)} but its hardware and model_shape give {profile.key!r} (edited by hand?)",
            path=where,
        )
    return profile


def _refusals(r: "_Reader", items: Any) -> tuple[Refusal, ...]:
    """The series a probe run refused (engine.profiles.probe_consistency), each checked."""
    if not isinstance(items, list):
        r.fail("refused", f"is {type(items).__name__}, expected a list")
    refusals = []
    for i, item in enumerate(items):
        name = f"refused[{i}]"
        r.obj(item, name)
        r.exact_fields(item, {"operator", "fixed", "note"}, name + ".")
        refusals.append(r.build(Refusal, name, operator=r.text(item["operator"], name + ".operator"),
                                fixed=r.obj(item["fixed"], name + ".fixed"), note=r.text(item["note"], name + ".note")))
    return tuple(refusals)


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
            self.fail(name, f"is {shown(value)}, expected text")
        return value

    def integer(self, value: Any, name: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(name, f"is {shown(value)}, expected an integer")
        return value

    def seconds(self, value: Any, name: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value) or value < 0:
            self.fail(name, f"is {shown(value)}, expected seconds: a finite number >= 0")
        return float(value)

    def build(self, cls, name: str, **kwargs):
        try:
            return cls(**kwargs)
        except (ValueError, TypeError) as exc:
            raise CopeInputError(f"field {name!r}: {exc}", path=self.where) from None


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond any float: not seconds
        return False


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")
