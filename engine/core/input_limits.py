"""Budgets for what COPE reads from files and programs it did not write.

Every size is checked before the bytes are read, and every error names the file and the
cap. The caps sit far above what any real file of the kind holds, so only a damaged or
forged file meets them:

- a Hugging Face config.json: CONFIG_JSON_MAX_BYTES, 8 MiB. The largest real ones (a
  multimodal model's, Llama-4-Maverick's with its vision config) are under 20 KB;
- a cache file COPE wrote itself (bandwidth, calibration): CACHE_JSON_MAX_BYTES, 16 MiB.
  A calibration of a dozen runs is about 20 KB, a bandwidth record under 1 KB;
- the JSON a runtime prints (llama-bench -o json): RUNTIME_OUTPUT_MAX_BYTES, 16 MiB. A
  dozen runs print about 30 KB;
- a prompt file: PROMPTS_MAX_BYTES, 64 MiB (a recording decodes a few thousand prompts);
- JSON nesting: MAX_JSON_DEPTH, 64 levels. config.json nests 3 deep (text_config ->
  rope_scaling -> a list), COPE's caches 3, llama-bench's output 2;
- JSON numbers: integers of at most 2**63 and finite floats. No field COPE reads holds
  more; a larger one (10**400, 1e400) would overflow where it is turned into a float.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

from engine.core.errors import CopeInputError
from engine.core.files import open_regular

MIB = 2**20
CONFIG_JSON_MAX_BYTES = 8 * MIB
CACHE_JSON_MAX_BYTES = 16 * MIB
RUNTIME_OUTPUT_MAX_BYTES = 16 * MIB
PROMPTS_MAX_BYTES = 64 * MIB
MAX_JSON_DEPTH = 64
MAX_JSON_INT = 2**63


def size_text(n: int) -> str:
    """`n` bytes in the unit a cap is stated in."""
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    if n >= MIB:
        return f"{n / MIB:g} MiB" if n % MIB == 0 else f"{n / MIB:.1f} MiB"
    return f"{n:,} bytes"


def too_large(where: str, what: str, size: int, cap: int) -> CopeInputError:
    return CopeInputError(f"{size_text(size)}, larger than the {size_text(cap)} a {what} can be: "
                          "not one (or damaged)", path=where)


def read_capped(path: str | os.PathLike, *, what: str, cap: int) -> bytes:
    """The bytes of the regular file `path` (a FIFO or a device is refused unopened for
    reading), refused when larger than `cap`, before it is read, and again should it grow
    while it is read."""
    where = str(path)
    try:
        with open_regular(path, what=what) as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > cap:
                raise too_large(where, what, size, cap)
            raw = handle.read(cap + 1)
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=where) from None
    if len(raw) > cap:
        raise too_large(where, what, len(raw), cap)
    return raw


def parse_json(text: str | bytes, *, where: str, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """JSON from a file or a program, with the limits of the module doc: CopeInputError
    naming `where` for invalid JSON, NaN or Infinity, nesting deeper than `max_depth`, or
    a number out of range."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8-sig")
        doc = json.loads(text, parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise CopeInputError(f"not a {what}: not UTF-8 text (byte {exc.start})", path=where) from None
    except RecursionError:
        raise CopeInputError(f"not a {what}: JSON nested deeper than {max_depth} levels", path=where) from None
    except json.JSONDecodeError as exc:
        raise CopeInputError(f"not valid JSON: {exc.msg} (column {exc.colno})", path=where, line=exc.lineno) from None
    except ValueError as exc:
        raise CopeInputError(f"not a {what}: not valid JSON ({_json_problem(exc)})", path=where) from None
    problem = _shape_problem(doc, max_depth)
    if problem:
        raise CopeInputError(f"not a {what}: {problem}", path=where)
    return doc


def read_json(path: str | os.PathLike, *, what: str, cap: int, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`parse_json` of the regular file `path`, read within `cap` bytes."""
    return parse_json(read_capped(path, what=what, cap=cap), where=str(path), what=what, max_depth=max_depth)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number JSON allows")


def _json_problem(exc: ValueError) -> str:
    if "integer string conversion" in str(exc) or "Exceeds the limit" in str(exc):
        return "a number of more than 4300 digits"
    text = str(exc)
    return text if len(text) <= 120 else text[:117] + "..."


def _shape_problem(doc: Any, max_depth: int) -> str | None:
    """What is out of bounds in a parsed document, walked without recursion."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > max_depth:
                return f"JSON nested deeper than {max_depth} levels"
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int) and abs(value) > MAX_JSON_INT:
            return f"a number of {len(str(abs(value)))} digits, beyond any count or size"
        elif isinstance(value, float) and not math.isfinite(value):
            return "a number too large for a float (it reads as infinity)"
    return None


# A model's shape, as a config.json or a GGUF header declares it, sizes every array of the
# replay (a synthetic trace draws layers x experts numbers a token). The largest real MoE
# models: Qwen3-235B-A22B has 94 blocks, Qwen3-Next and Qwen3.5 512 experts a layer, and the
# most experts in all, Qwen3.5-397B-A17B's 60 x 512 = 30,720. The caps leave eight times that.
MAX_MODEL_BLOCKS = 1024
MAX_MODEL_EXPERTS = 4096
MAX_MODEL_EXPERT_SLOTS = 262_144  # MoE layers x routed experts
# Experts a token is routed to: the replay's state counts hold (hits, prefetches) pairs of
# up to k each per layer and plan, so k sizes them squared (4,096 asked for 17 GB). The
# catalog's most is 10 (Qwen3-Next-80B-A3B, Qwen3.5-397B-A17B); 64 leaves six times that.
MAX_MODEL_TOP_K = 64


def check_model_shape(n_blocks: int, n_moe_layers: int, n_experts: int, where: str | None,
                      top_k: int | None = None) -> None:
    """CopeInputError naming `where` when a declared shape exceeds what any real model has."""
    # (a top-k above the experts is the model's own check: 'top_k 129 not in 1..128')
    if top_k is not None and MAX_MODEL_TOP_K < top_k <= n_experts:
        raise CopeInputError(f"declares {top_k:,} experts a token (top-k), more than the {MAX_MODEL_TOP_K} COPE "
                             "sizes (real models route to at most 10)", path=where)
    if n_blocks > MAX_MODEL_BLOCKS:
        raise CopeInputError(f"declares {n_blocks:,} blocks, more than the {MAX_MODEL_BLOCKS:,} COPE sizes "
                             "(the largest real MoE model has 94)", path=where)
    if n_experts > MAX_MODEL_EXPERTS:
        raise CopeInputError(f"declares {n_experts:,} routed experts a layer, more than the {MAX_MODEL_EXPERTS:,} "
                             "COPE sizes (real models have at most 512)", path=where)
    if n_moe_layers * n_experts > MAX_MODEL_EXPERT_SLOTS:
        raise CopeInputError(f"declares {n_moe_layers:,} MoE layers x {n_experts:,} experts = "
                             f"{n_moe_layers * n_experts:,} experts in all, more than the {MAX_MODEL_EXPERT_SLOTS:,} "
                             "COPE sizes (the largest real model has 30,720)", path=where)


# --- the work a request implies ----------------------------------------------------------
# A replay walks tokens x MoE layers x top-k routed slots, and what it holds grows with
# them: the synthetic trace's two halves (ids, predictions, router weights), the compiled
# loops' copies of the replayed half, the hit curves' copy of the profile half. The shape
# caps above bound each factor; this bounds their product, before anything is allocated,
# so that no request a header or a flag can make needs more than about 1 GiB. The largest
# catalog model, Qwen3-235B-A22B (94 MoE layers x top-8), replays 752 slots a token:
# 16,000 tokens are 12.0 M slots, within the default. A longer real trace may raise it.
MAX_REPLAY_SLOTS_ENV = "COPE_MAX_REPLAY_SLOTS"
DEFAULT_MAX_REPLAY_SLOTS = 16_000_000


def max_replay_slots() -> int:
    """The most routed slots a replay may walk: COPE_MAX_REPLAY_SLOTS, else the default."""
    raw = os.environ.get(MAX_REPLAY_SLOTS_ENV, "").strip().replace("_", "")
    if not raw:
        return DEFAULT_MAX_REPLAY_SLOTS
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_JSON_INT:
        raise CopeInputError(f"{MAX_REPLAY_SLOTS_ENV}={raw[:40]!r}: expected a whole number >= 1 "
                             "(the most routed slots, tokens x MoE layers x top-k, a replay may walk)")
    return int(raw)


def most_replay_tokens(n_moe_layers: int, top_k: int) -> int:
    """The most tokens a replay of this shape may walk within the budget."""
    return max_replay_slots() // max(n_moe_layers * top_k, 1)


def check_replay_slots(tokens: int, n_moe_layers: int, top_k: int, *, what: str, remedy: str) -> None:
    """CopeInputError when replaying `tokens` tokens of `n_moe_layers` MoE layers x `top_k`
    would walk more routed slots than the budget: one line naming `what` (the flag or file
    the tokens come from), the figures, the limit and `remedy` (what to lower)."""
    slots, limit = int(tokens) * int(n_moe_layers) * int(top_k), max_replay_slots()
    if slots > limit:
        raise CopeInputError(
            f"with {n_moe_layers:,} MoE layers x top-k {top_k} that would replay {_count(slots)} routed slots "
            f"(tokens x layers x top-k), more than the {_count(limit)} a request may ({MAX_REPLAY_SLOTS_ENV}): "
            f"{remedy}", path=what)


def _count(n: int) -> str:
    """A large count as a reader compares it: 655M, 16M, 12.5M, 950,000."""
    if n < 1_000_000:
        return f"{n:,}"
    millions = n / 1e6
    return f"{millions:,.0f}M" if millions >= 100 or millions == int(millions) else f"{millions:,.1f}M"
