"""A calibration's file: JSON in the cache, written atomically, checked field by field when read.

Where: `<cache>/machine/calibration-<machine key>-<model>-<quant>.json` (engine/core/cache_dirs.py),
one file per machine, model and quantization, so calibrating another GGUF keeps the first.
`find_calibration` picks, for a machine, the one of the same model and quantization,
else of the same quantization, else the newest. A file that cannot be used (damaged,
foreign, another schema version) is never trusted and never deleted: it is renamed aside
to `<name>.corrupt-<UTC timestamp>` and the caller gets one line saying so.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.core.cache_dirs import machine_dir, safe_name
from engine.core.errors import CopeInputError
from engine.core.files import atomic_write_text, set_aside_saying
from engine.core.input_limits import CACHE_JSON_MAX_BYTES, read_json
from engine.cost.calibration import LANE_CONSTANTS, Calibration, LaneConstants, MeasuredRun

SCHEMA = "cope-calibration"
SCHEMA_VERSION = 1
PREFIX = "calibration-"


def calibration_path(cal: Calibration, root: str | os.PathLike | None = None) -> Path:
    return machine_dir(root) / f"{PREFIX}{cal.machine}-{safe_name(cal.model_id)}-{safe_name(cal.quant)}.json"


def to_dict(cal: Calibration) -> dict[str, Any]:
    doc = asdict(cal)
    doc["constants"] = dict(cal.constants.values)
    doc["runs"] = [{**asdict(r), "argv": list(r.argv)} for r in cal.runs]
    doc["skipped"] = [list(s) for s in cal.skipped]
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **doc}


def save_calibration(cal: Calibration, root: str | os.PathLike | None = None) -> Path:
    path = calibration_path(cal, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, json.dumps(to_dict(cal), indent=1, allow_nan=False) + "\n")


def load_calibration(path: str | os.PathLike) -> Calibration:
    """A calibration file; a CopeInputError naming the file and the field for anything wrong."""
    where = str(path)
    # Read within a cap, a FIFO or a device never opened as data, JSON depth and numbers
    # bounded (engine/core/input_limits.py): a damaged cache file is one line, never a hang.
    doc = read_json(path, what="COPE calibration", cap=CACHE_JSON_MAX_BYTES)
    return from_dict(doc, where)


def from_dict(doc: Any, where: str) -> Calibration:
    r = _Reader(where)
    r.obj(doc, "(top level)")
    if doc.get("schema") != SCHEMA:
        raise CopeInputError(f"not a COPE calibration: field 'schema' is {doc.get('schema')!r}", path=where)
    if doc.get("schema_version") != SCHEMA_VERSION or isinstance(doc.get("schema_version"), bool):
        raise CopeInputError(f"field 'schema_version' is {doc.get('schema_version')!r}; this COPE reads version "
                             f"{SCHEMA_VERSION}", path=where)
    constants = r.obj(doc.get("constants"), "constants")
    for name, value in constants.items():
        if name not in LANE_CONSTANTS:
            raise CopeInputError(f"field 'constants.{name}' is not a lane constant", path=where)
        r.number(value, f"constants.{name}", positive=True)
    runs = tuple(_run(r, item, f"runs[{i}]") for i, item in enumerate(r.list(doc.get("runs"), "runs")))
    if not runs:
        raise CopeInputError("field 'runs' is empty: a calibration rests on at least one run", path=where)
    skipped = tuple((r.text(s[0], f"skipped[{i}][0]"), r.text(s[1], f"skipped[{i}][1]"))
                    if isinstance(s, list) and len(s) == 2 else r.fail(f"skipped[{i}]", "a [run, reason] pair")
                    for i, s in enumerate(r.list(doc.get("skipped", []), "skipped")))
    return Calibration(
        machine=r.text(doc.get("machine"), "machine"), cpu_name=r.text(doc.get("cpu_name"), "cpu_name"),
        gpu_name=r.text(doc.get("gpu_name"), "gpu_name"), model_id=r.text(doc.get("model_id"), "model_id"),
        quant=r.text(doc.get("quant"), "quant"), gguf_name=r.text(doc.get("gguf_name"), "gguf_name"),
        gguf_bytes=r.integer(doc.get("gguf_bytes"), "gguf_bytes"), threads=r.integer(doc.get("threads"), "threads", 1),
        date_iso=r.text(doc.get("date_iso"), "date_iso"), build_commit=r.text(doc.get("build_commit"), "build_commit"),
        build_number=r.integer(doc.get("build_number"), "build_number"),
        cpu_info=r.text(doc.get("cpu_info"), "cpu_info"), gpu_info=r.text(doc.get("gpu_info"), "gpu_info"),
        backends=r.text(doc.get("backends"), "backends"),
        constants=LaneConstants({k: float(v) for k, v in constants.items()}), runs=runs,
        residual_rms=r.number(doc.get("residual_rms"), "residual_rms"), skipped=skipped,
    )


def _run(r: "_Reader", item: Any, at: str) -> MeasuredRun:
    r.obj(item, at)
    argv = r.list(item.get("argv"), f"{at}.argv")
    return MeasuredRun(
        name=r.text(item.get("name"), f"{at}.name"), what=r.text(item.get("what"), f"{at}.what"),
        argv=tuple(r.text(w, f"{at}.argv") for w in argv), threads=r.integer(item.get("threads"), f"{at}.threads", 1),
        uses_gpu=r.boolean(item.get("uses_gpu"), f"{at}.uses_gpu"),
        tokens_per_s=r.number(item.get("tokens_per_s"), f"{at}.tokens_per_s", positive=True),
        stddev_tokens_per_s=r.number(item.get("stddev_tokens_per_s"), f"{at}.stddev_tokens_per_s"),
        global_tokens_per_s=r.number(item.get("global_tokens_per_s"), f"{at}.global_tokens_per_s"),
        fitted_tokens_per_s=r.number(item.get("fitted_tokens_per_s"), f"{at}.fitted_tokens_per_s"),
    )


@dataclass(frozen=True)
class Found:
    """The calibration chosen for a request, or why none could be used."""

    calibration: Calibration | None
    path: Path | None
    match: str  # "model and quantization" | "quantization" | "machine" | ""
    problems: tuple[str, ...] = ()  # files set aside, one line each


def find_calibration(machine: str, model_id: str, quant: str, root: str | os.PathLike | None = None) -> Found:
    """This machine's calibration for `model_id` and `quant`, else its nearest (see the module doc)."""
    folder = machine_dir(root)
    try:
        files = sorted(folder.glob(f"{PREFIX}{machine}-*.json"), key=_mtime, reverse=True)
    except OSError:
        return Found(None, None, "")
    usable: list[tuple[Calibration, Path]] = []
    problems = []
    for path in files:
        try:
            cal = load_calibration(path)
            if cal.machine != machine:
                raise CopeInputError(f"holds the calibration of machine {cal.machine}, not {machine}", path=str(path))
        except CopeInputError as exc:
            problems.append(f"{exc}; not used, {set_aside_saying(path)}")
            continue
        usable.append((cal, path))
    for match, same in (("model and quantization", lambda c: c.model_id == model_id and c.quant == quant),
                        ("quantization", lambda c: c.quant == quant), ("machine", lambda c: True)):
        for cal, path in usable:
            if same(cal):
                return Found(cal, path, match, tuple(problems))
    return Found(None, None, "", tuple(problems))



def _mtime(path: Path) -> int:
    """When `path` was written; 0 for a link that leads nowhere (it is set aside when read)."""
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


class _Reader:
    """Typed field reads that fail with one line naming the file and the field."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, field: str, expected: str) -> Any:
        raise CopeInputError(f"field '{field}' is not {expected}", path=self.where)

    def obj(self, value: Any, field: str) -> dict:
        return value if isinstance(value, dict) else self.fail(field, "an object")

    def list(self, value: Any, field: str) -> list:
        return value if isinstance(value, list) else self.fail(field, "a list")

    def text(self, value: Any, field: str) -> str:
        return value if isinstance(value, str) else self.fail(field, "a string")

    def boolean(self, value: Any, field: str) -> bool:
        return value if isinstance(value, bool) else self.fail(field, "true or false")

    def integer(self, value: Any, field: str, minimum: int = 0) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
            return value
        return self.fail(field, f"an integer >= {minimum}")

    def number(self, value: Any, field: str, *, positive: bool = False) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
                and abs(value) != float("inf") and (value > 0 if positive else value >= 0):
            return float(value)
        return self.fail(field, "a positive number" if positive else "a number >= 0")
