"""A flag given more than once, or llama-bench's lists and ranges, resolved to the one value
COPE prices, with a note that says which.

llama-bench runs one test for each value of a parameter (tools/llama-bench/llama-bench.cpp,
print_usage: "Multiple values can be given for each parameter by separating them with ','
or by specifying the parameter multiple times. Ranges can be given as 'first-last' or
'first-last+step' or 'first-last*mult'"; parse_int_range reads -p, -n, -d, -b, -ub, -t,
-ngl (negative allowed), -ncmoe): COPE prices the first test and says so. It has no
`--cpu-moe` (its -ncmoe counts blocks). llama-server and llama-cli keep the last value of a
repeated flag (common/arg.cpp sets the parameter each time), except `--n-cpu-moe`, whose
every occurrence appends its overrides (the largest then decides).
"""

from __future__ import annotations

import re
from typing import Sequence

from engine.core.errors import CopeInputError

WHERE = "the llama.cpp command"
# llama-bench's parameters that take lists; those read by parse_int_range take ranges too.
BENCH_INT_LISTS = frozenset({"n_prompt", "n_gen", "n_depth", "batch", "ubatch", "threads", "gpu_layers", "n_cpu_moe"})
BENCH_LISTS = BENCH_INT_LISTS | frozenset({"model", "cache_type_k", "cache_type_v", "flash_attn", "bench_mmap",
                                           "bench_no_op_offload", "no_kv_offload", "split_mode", "repack"})
_RANGE = re.compile(r"\s*(?P<first>-?\d+)(?:-(?P<last>\d+)(?:[+*](?P<step>\d+))?)?\s*")


def resolve_values(seen: dict[str, list[tuple[str, str]]], tool: str, notes: list[str]) -> dict[str, str]:
    """One value for each setting from its occurrences (flag as typed, value), in order."""
    values: dict[str, str] = {}
    for setting, occurrences in seen.items():
        flag = occurrences[0][0]
        texts = [value for _, value in occurrences]
        if tool == "llama-bench" and setting in BENCH_LISTS:
            values[setting] = _bench_first(setting, flag, texts, notes)
        elif setting == "n_cpu_moe" and len(texts) > 1:
            values[setting] = texts[-1]  # the overrides of each were appended; the largest decides
            notes.append(f"{flag} given {len(texts)} times ({', '.join(texts)}): llama.cpp appends the overrides of "
                         "each, so the most blocks named decide")
        else:
            values[setting] = texts[-1]
            if len(set(texts)) > 1:
                notes.append(f"{flag} given {len(texts)} times ({', '.join(texts)}): llama.cpp uses the last "
                             f"({texts[-1]})")
    return values


def _bench_first(setting: str, flag: str, texts: Sequence[str], notes: list[str]) -> str:
    """The first test's value of a llama-bench list (every item checked as llama-bench does)."""
    items = [item for text in texts for item in text.split(",") if item.strip()]
    if not items:
        raise CopeInputError(f"{WHERE}: {flag} needs a value, got {texts[0]!r}")
    if setting in BENCH_INT_LISTS:
        ranges = [_range(item, flag, allow_negative=setting == "gpu_layers") for item in items]
        starts = [n for r in ranges for n in r]
        # llama-bench skips a -p or -n test of 0 tokens: the first test is the first other value.
        skip_zero = setting in ("n_prompt", "n_gen") and any(starts)
        first = str(next(n for n in starts if n or not skip_zero))
        several = len(ranges) > 1 or len(ranges[0]) > 1
    else:
        first = items[0].strip()
        several = len(items) > 1
    if several:
        shown = " ".join(f"{flag} {text}" for text in texts)
        notes.append(f"{shown}: llama-bench runs one test for each value; the first ({first}) is estimated")
    return first


def _range(item: str, flag: str, *, allow_negative: bool) -> tuple[int, ...]:
    """The first one or two values of `first[-last[(+|*)step]]` (llama-bench.cpp parse_int_range)."""
    m = _RANGE.fullmatch(item)
    if m is None or (m["first"].startswith("-") and not allow_negative):
        shown = item if len(item) <= 40 else item[:37] + "..."
        raise CopeInputError(f"{WHERE}: {flag} needs a whole number, a list (a,b) or a range (first-last, "
                             f"first-last+step, first-last*mult), got {shown!r}")
    first = int(m["first"])
    if len(m["first"].lstrip("-")) > 10 or abs(first) > 2**31 - 1:
        raise CopeInputError(f"{WHERE}: {flag} {m['first']} is out of range (llama.cpp reads a 32-bit int)")
    last = int(m["last"]) if m["last"] is not None else first
    step = int(m["step"]) if m["step"] is not None else 1
    following = first * step if "*" in item else first + step
    if last > first and following <= first:
        raise CopeInputError(f"{WHERE}: {flag} {item}: the range never grows (llama-bench refuses it)")
    return (first, following) if following <= last else (first,)
