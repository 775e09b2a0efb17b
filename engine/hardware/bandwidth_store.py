"""The last measured CPU memory bandwidth of a machine, kept in the cache between runs.

`cope detect` measures this machine's memory bandwidth; planning (`cope advise`, the app)
uses that figure for this machine until the person says otherwise (--cpu, --memory,
--ram-bandwidth). A machine is keyed by its CPU model, its logical CPU count, its RAM
(whole GiB) and its machine id (/etc/machine-id; the host name where there is none), so a
new CPU or more memory means a new measurement. Files: `<cache>/machine/cpu-bandwidth-<key>.json`,
written atomically. A file that cannot be used (damaged, too large or nested too deep,
another schema, a FIFO or a link to a device, never opened as data) is never an error: it
is renamed aside to `<name>.corrupt-<UTC timestamp>` with one warning, as the profile
cache does, and the run goes on without it.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.core.cache_dirs import machine_dir
from engine.core.errors import CopeInputError
from engine.core.files import atomic_write_text, set_aside_saying
from engine.core.input_limits import CACHE_JSON_MAX_BYTES, read_json
from engine.hardware.platform import Fact

SCHEMA = "cope-cpu-bandwidth"
SCHEMA_VERSION = 1
GIB = 1024**3


@dataclass(frozen=True)
class StoredBandwidth:
    machine: str  # machine_key(...)
    cpu_name: str
    bytes_per_s: float
    threads: int  # threads the measurement read with
    measured_at: str  # ISO 8601, UTC, to the second
    how: str  # what was measured, as the measurement's note says
    # One thread's read bandwidth (0: not measured; files written before it have none).
    single_thread_bytes_per_s: float = 0.0
    single_thread_how: str = ""

    @property
    def date(self) -> str:
        return self.measured_at[:10]

    def fact(self) -> Fact:
        return Fact.measured(self.bytes_per_s, f"measured by `cope detect` on {self.date}: {self.how}")

    def single_thread_fact(self) -> Fact | None:
        if self.single_thread_bytes_per_s <= 0:
            return None
        return Fact.measured(self.single_thread_bytes_per_s,
                             f"measured by `cope detect` on {self.date}: {self.single_thread_how}")


def machine_key(cpu_name: str, logical_cpus: int | None, ram_bytes: int | None, machine_id: str) -> str:
    """16 hex digits naming this machine's CPU, CPU count, RAM and identity."""
    parts = {"cpu": cpu_name, "cpus": logical_cpus, "ram_gib": None if ram_bytes is None else round(ram_bytes / GIB),
             "id": machine_id}
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def store_path(key: str, root: str | os.PathLike | None = None) -> Path:
    return machine_dir(root) / f"cpu-bandwidth-{key}.json"


def save_measurement(m: StoredBandwidth, root: str | os.PathLike | None = None) -> Path:
    path = store_path(m.machine, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **asdict(m)}
    return atomic_write_text(path, json.dumps(doc, indent=2) + "\n")


class BandwidthCacheWarning(UserWarning):
    """A stored bandwidth measurement could not be used and was set aside."""


def load_measurement(key: str, root: str | os.PathLike | None = None) -> StoredBandwidth | None:
    """The stored measurement of machine `key`, or None (none stored, or unusable: then
    set aside with one BandwidthCacheWarning)."""
    path = store_path(key, root)
    if not os.path.lexists(path):
        return None
    try:
        return _from_doc(read_json(path, what="COPE bandwidth record", cap=CACHE_JSON_MAX_BYTES), key, str(path))
    except CopeInputError as exc:
        warnings.warn(BandwidthCacheWarning(f"{exc}; not used, {set_aside_saying(path)}"), stacklevel=2)
        return None


def _from_doc(doc, key: str, where: str) -> StoredBandwidth:  # type: ignore[no-untyped-def]
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise CopeInputError("not a COPE bandwidth record", path=where)
    if doc.get("schema_version") != SCHEMA_VERSION or doc.get("machine") != key:
        raise CopeInputError(f"schema version {doc.get('schema_version')!r} of machine {doc.get('machine')!r}; this "
                             f"COPE reads version {SCHEMA_VERSION} of machine {key}", path=where)
    try:
        m = StoredBandwidth(str(doc["machine"]), str(doc["cpu_name"]), float(doc["bytes_per_s"]), int(doc["threads"]),
                            str(doc["measured_at"]), str(doc["how"]),
                            float(doc.get("single_thread_bytes_per_s", 0.0)), str(doc.get("single_thread_how", "")))
    except KeyError as exc:
        raise CopeInputError(f"field {exc} is missing", path=where) from None
    except (ValueError, TypeError, OverflowError):
        raise CopeInputError("a field is not a number where one belongs", path=where) from None
    if not (0 < m.bytes_per_s < float("inf") and 0 <= m.single_thread_bytes_per_s < float("inf")):
        raise CopeInputError(f"bandwidth {m.bytes_per_s!r} B/s is not a positive number", path=where)
    return m
