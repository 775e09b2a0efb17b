"""How measurements and profiles are named: operator keys, measurement ids, cache keys.

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

`measurement_id` gives a measurement's canonical (operator, key) pair: how a plan names
a measurement it wants and how a Profile finds one. `cache_key` names the file of the
profile for one hardware key and one model shape key; it folds in the schema version,
which lives here beside the schema's name for that reason. The values themselves are
in `engine.profiles.profile`, the file format in `engine.profiles.profile_io`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, Union

from engine.core.errors import shown
from engine.replays.policy import Execution

PROFILE_SCHEMA = "cope-profile"
PROFILE_SCHEMA_VERSION = 1

KeyValue = Union[int, str]
Key = tuple[tuple[str, KeyValue], ...]  # sorted (field, value) pairs
Ident = tuple[str, Key]  # (operator, key): what a measurement is of

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
        raise ValueError(f"unknown operator {shown(operator)}; known: {', '.join(OPERATOR_KEYS)}")
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
            if not isinstance(value, str) or value not in {e.value for e in Execution}:
                raise ValueError(f"key field {name!r} is {shown(value)}, not an execution strategy")
        elif not isinstance(value, int) or isinstance(value, bool) or value < _KEY_MINIMUM[name]:
            raise ValueError(f"key field {name!r} is {shown(value)}, expected an integer >= {_KEY_MINIMUM[name]}")
    return tuple(sorted(pairs.items()))


def measurement_id(operator: str, key: Mapping[str, KeyValue] | Iterable[tuple[str, KeyValue]]) -> Ident:
    """(operator, canonical key): how a plan names a measurement it wants."""
    return operator, normalize_key(operator, key)


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
