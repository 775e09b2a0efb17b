"""llama-bench's `-o json` output, read and checked.

The printer (ggml-org/llama.cpp tools/llama-bench/llama-bench.cpp, `json_printer`) writes
one JSON array, one object a test, with the fields of `test::get_fields()`: strings
(`build_commit`, `cpu_info`, `gpu_info`, `backends`, `model_filename`, `model_type`,
`type_k`, ...), integers (`build_number`, `model_size`, `n_threads`, `n_gpu_layers`,
`n_cpu_moe`, `n_prompt`, `n_gen`, `n_depth`, `avg_ns`, ...), booleans and the floats
`avg_ts` / `stddev_ts` (tokens per second over the repetitions), then `samples_ns` and
`samples_ts`. `backends` is the non-CPU backends' names joined by ',' or "CPU" when there
are none; `gpu_info` the GPU devices' descriptions (empty without one).

Only the fields COPE uses are required; older builds lack some of the others (e.g.
`n_cpu_moe`, `n_depth`), which then read as their defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine.core.errors import CopeInputError
from engine.core.input_limits import RUNTIME_OUTPUT_MAX_BYTES, parse_json


@dataclass(frozen=True)
class BenchTest:
    """One test of a llama-bench run: the settings it reports and its speed."""

    n_prompt: int
    n_gen: int
    n_depth: int
    n_threads: int
    n_gpu_layers: int
    n_cpu_moe: int
    avg_ts: float  # tokens per second, mean over the repetitions
    stddev_ts: float
    build_commit: str
    build_number: int
    model_type: str
    model_size: int  # bytes of the file's tensors
    cpu_info: str
    gpu_info: str
    backends: str

    @property
    def is_decode(self) -> bool:
        """The `tg` test: tokens generated, none of a prompt."""
        return self.n_gen > 0 and self.n_prompt == 0

    @property
    def has_gpu_backend(self) -> bool:
        return self.backends.strip().upper() not in ("", "CPU") and bool(self.gpu_info.strip())


def parse_bench_output(text: str, *, where: str = "llama-bench") -> list[BenchTest]:
    """Every test of llama-bench's `-o json` stdout; a CopeInputError (one line naming
    `where`) for anything else."""
    if len(text) > RUNTIME_OUTPUT_MAX_BYTES:
        raise CopeInputError(f"output is not llama-bench's -o json ({len(text):,} characters, more than the "
                             f"{RUNTIME_OUTPUT_MAX_BYTES // 2**20} MiB a run prints)", path=where)
    try:  # a runtime's answer is untrusted: depth, numbers and NaN bounded as for any file
        doc = parse_json(text, where=where, what="llama-bench -o json output")
    except CopeInputError as exc:
        first = text.strip().splitlines()[0][:60] if text.strip() else "no output"
        raise CopeInputError(f"output is not llama-bench's -o json ({exc.message}; it starts {first!r})",
                             path=where) from None
    if not isinstance(doc, list) or not doc:
        raise CopeInputError("output is not llama-bench's -o json (expected a non-empty JSON array of tests)",
                             path=where)
    return [_test(item, i, where) for i, item in enumerate(doc)]


def decode_tests(tests: list[BenchTest], *, where: str = "llama-bench") -> list[BenchTest]:
    """The decode (`tg`) tests; one line when there is none."""
    found = [t for t in tests if t.is_decode]
    if not found:
        raise CopeInputError("llama-bench output has no decode test (n_prompt 0, n_gen > 0)", path=where)
    return found


def _test(item: Any, index: int, where: str) -> BenchTest:
    if not isinstance(item, dict):
        raise CopeInputError(f"llama-bench test {index} is not a JSON object", path=where)

    def number(name: str, kind: type, default: Any = None) -> Any:
        value = item.get(name, default)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind is int:
            ok = ok and float(value).is_integer()
        if not ok or not math.isfinite(value):
            raise CopeInputError(f"llama-bench test {index}: field {name!r} is {value!r}, expected a number",
                                 path=where)
        return kind(value)

    def text(name: str) -> str:
        value = item.get(name, "")
        if not isinstance(value, str):
            raise CopeInputError(f"llama-bench test {index}: field {name!r} is {value!r}, expected a string",
                                 path=where)
        return value

    test = BenchTest(
        n_prompt=number("n_prompt", int), n_gen=number("n_gen", int), n_depth=number("n_depth", int, 0),
        n_threads=number("n_threads", int), n_gpu_layers=number("n_gpu_layers", int, -1),
        n_cpu_moe=number("n_cpu_moe", int, 0), avg_ts=number("avg_ts", float),
        stddev_ts=number("stddev_ts", float, 0.0), build_commit=text("build_commit"),
        build_number=number("build_number", int, 0), model_type=text("model_type"),
        model_size=number("model_size", int, 0), cpu_info=text("cpu_info"), gpu_info=text("gpu_info"),
        backends=text("backends"),
    )
    if test.n_prompt < 0 or test.n_gen < 0 or test.n_threads < 1:
        raise CopeInputError(f"llama-bench test {index}: n_prompt {test.n_prompt}, n_gen {test.n_gen}, "
                             f"n_threads {test.n_threads} are not a benchmark's", path=where)
    if test.avg_ts <= 0:
        raise CopeInputError(f"llama-bench test {index}: avg_ts is {test.avg_ts}, expected tokens per second > 0",
                             path=where)
    return test

