"""The ground truth of a recommendation on this machine: llama-bench runs the exported
command (and the default layer partition beside it), measured tokens/s beside predicted.

llama-bench's JSON output (tools/llama-bench/llama-bench.cpp, json_printer) is an array
of test objects with, among others, "n_prompt", "n_gen", "avg_ts" and "stddev_ts"
(tokens per second, mean and sample standard deviation over the repetitions).
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cope_tui.service.export import ExportAsk, write_side_files
from cope_tui.service.pricing import choose_cost_model
from engine.advice.advise import Recommendation, advise
from engine.advice.command_estimate import command_settings, price_placement_command
from engine.advice.run_advice import compose_export
from engine.core.errors import CopeInputError, shown
from engine.core.input_limits import RUNTIME_OUTPUT_MAX_BYTES, parse_json, size_text
from engine.llamacpp.builds import LlamaBuild
from engine.llamacpp.command_line import CommandLine, bench_decode_test, spell
from engine.llamacpp.llama_args import read_command_line
from engine.runtimes import runtime_named
from engine.runtimes.export import Export
from probes.bounded_run import run_capped
from probes.runtimes import bench_build

if TYPE_CHECKING:
    from cope_tui.service.advice import Advice

BENCH_GEN_TOKENS = 64
BENCH_REPETITIONS = 3


@dataclass(frozen=True)
class BenchResult:
    avg_ts: float | None
    stddev_ts: float | None
    problem: str | None  # why there is no figure


@dataclass(frozen=True)
class VerifyRow:
    role: str  # "exported" | "baseline"
    candidate_id: str
    predicted_ts: float
    result: BenchResult
    command: str

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured."""
        if self.result.avg_ts is None or self.result.avg_ts <= 0:
            return None
        return (self.predicted_ts - self.result.avg_ts) / self.result.avg_ts


def parse_bench_json(stdout: str, bench: str = "llama-bench") -> BenchResult:
    """The decode test of llama-bench -o json output: parsed with the limits of any
    untrusted JSON (engine/core/input_limits.py), its avg_ts a finite positive number; a
    problem naming `bench` otherwise."""
    if not stdout.strip():
        return BenchResult(None, None, "malformed llama-bench output (not JSON: no output)")
    try:
        doc = parse_json(stdout, where=bench, what="llama-bench -o json output")
    except CopeInputError as exc:
        return BenchResult(None, None, f"malformed llama-bench output (not JSON: {exc.message})")
    if not isinstance(doc, list) or not doc:
        return BenchResult(None, None, "malformed llama-bench output (expected a non-empty JSON array)")
    tests = [t for t in doc if isinstance(t, dict) and t.get("n_gen", 0) and not t.get("n_prompt", 0)]
    if not tests:
        return BenchResult(None, None, "llama-bench output has no decode test (n_prompt 0, n_gen > 0)")
    test = tests[0]
    avg, sd = test.get("avg_ts"), test.get("stddev_ts")
    if not _finite(avg) or avg <= 0:
        return BenchResult(None, None, f"malformed llama-bench output (avg_ts is {shown(avg)}, not tokens per second)")
    return BenchResult(float(avg), float(sd) if _finite(sd) and sd >= 0 else None, None)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def run_bench(bench: str, argv: list[str], env: dict[str, str], timeout_s: float) -> BenchResult:
    if timeout_s <= 0:
        return BenchResult(None, None, "not run: the time limit was used up")
    try:
        # a runtime's output is untrusted: read within a cap, bytes that are not UTF-8 become U+FFFD
        done = run_capped([bench, *argv[1:]], timeout_s=timeout_s, env={**os.environ, **env})
    except subprocess.TimeoutExpired:
        return BenchResult(None, None, f"stopped: ran past the time limit ({timeout_s:.0f} s left)")
    except OSError as exc:
        return BenchResult(None, None, f"could not run {bench}: {exc.strerror or exc}")
    if done.overflowed:
        return BenchResult(None, None, f"{bench} printed more than {size_text(RUNTIME_OUTPUT_MAX_BYTES)}, far more "
                                       "than llama-bench's answer: stopped, not read")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()
        last = tail[-1] if tail else "no output"
        return BenchResult(None, None, f"llama-bench exited with {done.returncode}: {last}")
    return parse_bench_json(done.stdout, bench)


def bench_builds(bench: str, runtime: str) -> dict[str, LlamaBuild]:
    """The flags of the llama-bench that will run, for `runtime`'s commands (what
    export_for spells for); empty when its --help cannot be read."""
    build = bench_build(bench)
    return {} if build is None else {runtime_named(runtime).info.name: build}


@dataclass(frozen=True)
class VerifyReport:
    exported: Export  # the asked candidate's export (it may run its nearest runnable candidate)
    rows: tuple[VerifyRow, ...]  # the exported run, then the baseline's when it differs
    notes: tuple[str, ...]

    @property
    def failed(self) -> VerifyRow | None:
        return next((r for r in self.rows if r.result.problem), None)


def depth_note(fidelity: str) -> str:
    return (f"llama-bench decodes {BENCH_GEN_TOKENS} tokens from an empty context, and the estimate prices "
            f"that ({fidelity})")


def at_bench_depth(advice: "Advice") -> Recommendation:
    """The advice's ranking priced as llama-bench runs its exports: the same plan (the KV
    cache reserved for the planned context, so the same placements) with each decode step
    attending to what llama-bench's decode test attends to from an empty context, at the
    fidelity the advice was priced with."""
    request = advice.rec.request
    attended = BENCH_GEN_TOKENS // 2
    if request.attention_tokens == attended:
        return advice.rec
    request = replace(request, attention_tokens=attended)
    return advise(request, choose_cost_model(request, fidelity=advice.pricing.fidelity).cost_model)


def verify(advice: "Advice", candidate_id: str, *, bench: str, model_path: str, runtime: str = "stock",
           time_limit_s: float = 600.0) -> VerifyReport:
    """Run llama-bench on the export of `candidate_id` and on the baseline partition,
    within `time_limit_s` for both; each beside its estimate as llama-bench runs it."""
    rec = advice.rec
    chosen = rec.estimate_of(candidate_id)
    decode_test = bench_decode_test(BENCH_GEN_TOKENS, BENCH_REPETITIONS)
    builds = bench_builds(bench, runtime)
    # the fork's profile is written where its command names it before llama-bench reads it
    side_dir = ExportAsk().side_dir
    exported = compose_export(rec, chosen, runtime=runtime, binary="llama-bench", model_path=model_path, builds=builds,
                              side_dir=side_dir)
    write_side_files(exported, side_dir)
    jobs = [("exported", exported)]
    baseline = rec.baseline()
    if baseline.candidate.id != exported.exported_id:
        # the same llama-bench runs both: the baseline is spelled for its runtime too (ik's has no -ncmoe)
        jobs.append(("baseline", compose_export(rec, baseline, runtime=runtime, binary="llama-bench",
                                                model_path=model_path, builds=builds)))
    priced = at_bench_depth(advice)
    deadline = time.monotonic() + time_limit_s
    rows = []
    for role, export in jobs:
        line = export.command.plus(*decode_test)
        result = run_bench(bench, list(line.argv), dict(line.env), deadline - time.monotonic())
        predicted = priced.estimate_of(export.exported_id).tokens_per_s
        rows.append(VerifyRow(role, export.exported_id, predicted, result, replace(line, binary=bench).display()))
    return VerifyReport(exported, tuple(rows), (depth_note(priced.cost_model.fidelity),))


CPU_ONLY = "cpu-only"


def verify_cpu_only(plan, *, bench: str, model_path: str, time_limit_s: float = 600.0) -> VerifyReport:  # type: ignore[no-untyped-def]
    """Run the CPU-only plan (`--gpu none`: every weight on the CPU, `-ngl 0` at the plan's
    threads) on llama-bench, priced as that llama-bench command runs: `cope estimate`'s
    pricing of it, decoding from an empty context, with the cost model the plan chose."""
    r = plan.request
    line = CommandLine("llama-bench", spell("llama-bench", [("model", model_path), ("gpu_layers", 0),
                                                            ("threads", r.threads)])
                       + bench_decode_test(BENCH_GEN_TOKENS, BENCH_REPETITIONS))
    command = read_command_line(line)
    request = replace(r, **command_settings(command, r))
    cost_model = choose_cost_model(request, fidelity=plan.pricing.fidelity).cost_model
    price = price_placement_command(request, cost_model, command)
    export = Export(CPU_ONLY, CPU_ONLY, "runs-on-stock", "every weight on the CPU (--gpu none)", line,
                    binary="llama-bench")
    if not price.runs:  # COPE says it would not run: nothing to measure
        raise CopeInputError(f"the CPU-only plan {price.refusal}")
    result = run_bench(bench, list(line.argv), {}, time_limit_s)
    predicted = price.tokens_per_s
    shown = " ".join([bench, *line.argv[1:]])
    return VerifyReport(export, (VerifyRow("exported", CPU_ONLY, predicted, result, shown),),
                        (depth_note(cost_model.fidelity),))
