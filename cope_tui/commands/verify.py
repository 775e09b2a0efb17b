"""`cope verify --candidate ID`: measure the exported command and the default layer
partition with llama-bench, and show measured tokens/s beside predicted.

llama-bench's JSON output (tools/llama-bench/llama-bench.cpp, json_printer) is an array
of test objects with, among others, "n_prompt", "n_gen", "avg_ts" and "stddev_ts"
(tokens per second, mean and sample standard deviation over the repetitions).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace

from cope_tui.commands.export import export_for, find_estimate
from cope_tui.commands.plan_args import add_plan_flags, build_from_args
from cope_tui.exit_codes import EXIT_INPUT, EXIT_OK

BENCH_GEN_TOKENS = 64
BENCH_REPETITIONS = 3
HOW_TO_GET = (
    "cope verify: no llama-bench found on PATH (give one with --llama-bench PATH).\n"
    "  Build it from https://github.com/ggml-org/llama.cpp:\n"
    "    cmake -B build -DGGML_CUDA=ON && cmake --build build --config Release -j --target llama-bench\n"
    "  or use a release archive (it ships llama-bench); then run cope verify again.\n"
)


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


def parse_bench_json(stdout: str) -> BenchResult:
    """The decode test of llama-bench -o json output."""
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError as exc:
        return BenchResult(None, None, f"malformed llama-bench output (not JSON: {exc.msg} at line {exc.lineno})")
    if not isinstance(doc, list) or not doc:
        return BenchResult(None, None, "malformed llama-bench output (expected a non-empty JSON array)")
    tests = [t for t in doc if isinstance(t, dict) and t.get("n_gen", 0) and not t.get("n_prompt", 0)]
    if not tests:
        return BenchResult(None, None, "llama-bench output has no decode test (n_prompt 0, n_gen > 0)")
    test = tests[0]
    avg, sd = test.get("avg_ts"), test.get("stddev_ts")
    if not isinstance(avg, (int, float)) or isinstance(avg, bool) or avg <= 0:
        return BenchResult(None, None, f"malformed llama-bench output (avg_ts is {avg!r})")
    if not isinstance(sd, (int, float)) or isinstance(sd, bool):
        sd = None
    return BenchResult(float(avg), None if sd is None else float(sd), None)


def run_bench(bench: str, argv: list[str], env: dict[str, str], timeout_s: float) -> BenchResult:
    if timeout_s <= 0:
        return BenchResult(None, None, "not run: the time limit was used up")
    try:
        done = subprocess.run(
            [bench, *argv[1:]], capture_output=True, text=True, timeout=timeout_s,
            env={**os.environ, **env},
        )
    except subprocess.TimeoutExpired:
        return BenchResult(None, None, f"stopped: ran past the time limit ({timeout_s:.0f} s left)")
    except OSError as exc:
        return BenchResult(None, None, f"could not run {bench}: {exc.strerror or exc}")
    if done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()
        last = tail[-1] if tail else "no output"
        return BenchResult(None, None, f"llama-bench exited with {done.returncode}: {last}")
    return parse_bench_json(done.stdout)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="measure the exported command with llama-bench, beside the prediction")
    p.add_argument("--candidate", required=True, metavar="ID", help="candidate id, as `cope advise` lists it")
    p.add_argument("--llama-bench", metavar="PATH", help="the llama-bench binary (default: from PATH)")
    p.add_argument("--model-path", metavar="FILE", help="the GGUF file to benchmark")
    p.add_argument("--runtime", choices=("stock", "fork"), default="stock")
    p.add_argument("--time-limit", type=float, default=600.0, metavar="S",
                   help="seconds for all benchmark runs together (default 600)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_plan_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from engine.advise import advise
    from engine.errors import CopeInputError
    from engine.export import flag_args

    if args.time_limit <= 0:
        raise CopeInputError(f"--time-limit must be positive, got {args.time_limit}")
    bench = args.llama_bench or shutil.which("llama-bench")
    if bench is None:
        sys.stdout.write(HOW_TO_GET)
        return EXIT_OK
    if args.llama_bench and not (os.path.isfile(bench) and os.access(bench, os.X_OK)):
        raise CopeInputError("not an executable file", path=bench)
    if not args.model_path:
        raise CopeInputError("--model-path: give the GGUF file to benchmark")
    if not os.path.isfile(args.model_path):
        raise CopeInputError("no such file (--model-path)", path=args.model_path)

    request, cost_model = build_from_args(args)
    rec = advise(request, cost_model)
    chosen = find_estimate(rec, args.candidate)
    by_id = {e.candidate.id: e for e in rec.estimates}
    extra = (flag_args("llama-bench", "n_prompt", 0) + flag_args("llama-bench", "n_gen", BENCH_GEN_TOKENS)
             + flag_args("llama-bench", "repetitions", BENCH_REPETITIONS) + flag_args("llama-bench", "output", "json"))
    jobs = []
    exported = export_for(rec, chosen, runtime=args.runtime, binary="llama-bench", model_path=args.model_path)
    jobs.append(("exported", exported))
    baseline = rec.baseline()
    if baseline.candidate.id != exported.exported_id:
        jobs.append(("baseline", export_for(rec, baseline, binary="llama-bench", model_path=args.model_path)))

    deadline = time.monotonic() + args.time_limit
    rows = []
    for role, export in jobs:
        argv = [*export.argv, *extra]
        result = run_bench(bench, argv, export.env_dict, deadline - time.monotonic())
        predicted = by_id[export.exported_id].tokens_per_s
        shown = replace(export, argv=(bench, *argv[1:])).display()
        rows.append(VerifyRow(role, export.exported_id, predicted, result, shown))

    if args.json:
        import orjson

        doc = {
            "candidate": args.candidate,
            "label": exported.label,
            "reason": exported.reason,
            "runs": [
                {"role": r.role, "candidate": r.candidate_id, "command": r.command,
                 "predicted_tokens_per_s": r.predicted_ts, "measured_tokens_per_s": r.result.avg_ts,
                 "measured_stddev_tokens_per_s": r.result.stddev_ts, "error": r.error,
                 "problem": r.result.problem}
                for r in rows
            ],
            "notes": [_depth_note(request)],
        }
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_rows(rows, exported, request))
    failed = [r for r in rows if r.result.problem]
    if failed:
        print(f"cope: error: {failed[0].role} run: {failed[0].result.problem}", file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK


def _depth_note(request) -> str:  # type: ignore[no-untyped-def]
    return (f"llama-bench decodes {BENCH_GEN_TOKENS} tokens from an empty context; the estimate prices "
            f"attention at the planned context of {request.context_tokens} tokens")


def render_rows(rows: list[VerifyRow], exported, request) -> str:  # type: ignore[no-untyped-def]
    lines = [f"COPE verify: {request.model.name} {request.quant.name}: {exported.candidate_id} ({exported.label})"]
    if exported.nearest_id is not None:
        lines.append(f"  {exported.reason}")
    lines += ["", f"{'run':<9} {'candidate':<36} {'predicted tok/s':>15} {'measured tok/s':>18} {'error':>8}"]
    for r in rows:
        if r.result.avg_ts is None:
            measured, err = "-", "-"
        else:
            sd = f" ± {r.result.stddev_ts:.1f}" if r.result.stddev_ts is not None else ""
            measured, err = f"{r.result.avg_ts:.1f}{sd}", f"{r.error:+.1%}"
        lines.append(f"{r.role:<9} {r.candidate_id:<36} {r.predicted_ts:>15.1f} {measured:>18} {err:>8}")
    lines.append("")
    for r in rows:
        lines.append(f"{r.role}: {r.command}")
        if r.result.problem:
            lines.append(f"  problem: {r.result.problem}")
    lines += ["", f"Note: {_depth_note(request)}"]
    return "\n".join(lines) + "\n"
