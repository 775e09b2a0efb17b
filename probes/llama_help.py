"""A llama.cpp-family program's `--help`, read once per binary.

The flags a build takes decide how COPE spells its commands (engine/llamacpp/builds.py),
and `--help` is the only reliable record of them (a build from a source archive reports
no version). Running it costs a fraction of a second, but COPE asks on every `advise`,
so the text is kept under the cache folder, keyed by the binary's real path, size and
modification time: a rebuilt or replaced binary is read again.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Callable

from engine.core.cache_dirs import machine_dir
from engine.core.errors import CopeInputError
from engine.core.files import atomic_write_text, open_regular

SCHEMA = "cope.llama-help"
SCHEMA_VERSION = 1
MAX_CACHE_BYTES = 1 << 20  # a help text is about 50 KB; anything larger is not ours
Runner = Callable[[list[str], float], str]


def _key(binary: str) -> tuple[str, str]:
    real = os.path.realpath(binary)
    st = os.stat(real)
    return real, f"{real}|{st.st_size}|{st.st_mtime_ns}"


def cache_path(real_path: str, root: str | os.PathLike | None = None) -> Path:
    digest = hashlib.sha256(real_path.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return machine_dir(root) / f"llama-help-{digest}.json"


def _cached(path: Path, key: str) -> str | None:
    try:
        with open_regular(path, what="help cache") as handle:
            raw = handle.read(MAX_CACHE_BYTES + 1)
        if len(raw) > MAX_CACHE_BYTES:
            return None
        doc = json.loads(raw.decode("utf-8"))
    except (CopeInputError, OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("schema_version") != SCHEMA_VERSION:
        return None
    text = doc.get("help")
    return text if doc.get("key") == key and isinstance(text, str) else None


def read_help(binary: str, run: Runner, timeout_s: float, root: str | os.PathLike | None = None) -> str:
    """`binary --help` (stdout and stderr), from the cache when the binary is unchanged.
    Raises OSError or subprocess errors when it cannot run; a cache that cannot be
    written is not an error."""
    real, key = _key(binary)
    path = cache_path(real, root)
    text = _cached(path, key)
    if text is not None:
        return text
    text = run([binary, "--help"], timeout_s)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps({"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "key": key,
                                            "help": text}) + "\n")
    except (OSError, CopeInputError):
        pass
    return text
