"""The last measured CPU memory bandwidth of a machine, kept in the cache between runs.

`cope detect` measures this machine's memory bandwidth; planning (`cope advise`, the app)
uses that figure for this machine until the person says otherwise (--cpu, --memory,
--ram-bandwidth). A machine is keyed by its CPU model, its logical CPU count, its RAM
(whole GiB) and its machine id (/etc/machine-id; the host name where there is none), so a
new CPU or more memory means a new measurement. Files: `<cache>/machine/cpu-bandwidth-<key>.json`,
written atomically; one that cannot be read is ignored (a cache), never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.cache_dirs import machine_dir
from engine.files import atomic_write_text
from engine.platform import Fact

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


def load_measurement(key: str, root: str | os.PathLike | None = None) -> StoredBandwidth | None:
    """The stored measurement of machine `key`, or None (none stored, or unreadable)."""
    try:
        doc = json.loads(store_path(key, root).read_text(encoding="utf-8"))
        if doc.get("schema") != SCHEMA or doc.get("schema_version") != SCHEMA_VERSION or doc.get("machine") != key:
            return None
        m = StoredBandwidth(str(doc["machine"]), str(doc["cpu_name"]), float(doc["bytes_per_s"]), int(doc["threads"]),
                            str(doc["measured_at"]), str(doc["how"]),
                            float(doc.get("single_thread_bytes_per_s", 0.0)), str(doc.get("single_thread_how", "")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return m if m.bytes_per_s > 0 and m.single_thread_bytes_per_s >= 0 else None
