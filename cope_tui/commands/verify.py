"""`cope verify --candidate ID`: measure the exported command and the default layer
partition with llama-bench (cope_tui/service/verify.py), and show measured tokens/s
beside predicted."""

from __future__ import annotations

import argparse
import os
import shutil
import sys

from cope_tui.commands.output import one_line, write_json
from cope_tui.commands.plan_args import add_plan_flags, advice_for, reused_choices
from cope_tui.exit_codes import EXIT_INPUT, EXIT_OK
from cope_tui.service.cpu_only import plan_cpu_only
from cope_tui.service.verify import CPU_ONLY, VerifyReport, verify, verify_cpu_only
from engine.core.errors import CopeInputError
from engine.hardware.platform import NO_GPU
from engine.runtimes import ALIASES, REGISTRY, STOCK_NAME

# The runtimes whose builds ship llama-bench, what verify runs, and their earlier spellings.
BENCH_RUNTIMES = tuple(r.info.name for r in REGISTRY if "llama-bench" in r.info.binaries)
VERIFY_CHOICES = (*BENCH_RUNTIMES, *(alias for alias, name in ALIASES.items() if name in BENCH_RUNTIMES))

NO_BENCH = "no llama-bench found on PATH: give one with --llama-bench PATH"
HOW_TO_GET = ("build it from github.com/ggml-org/llama.cpp (cmake -B build -DGGML_CUDA=ON && cmake --build build "
              "--config Release -j --target llama-bench), or use a release archive (it ships llama-bench)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="measure the exported command with llama-bench, beside the prediction")
    p.add_argument("--candidate", required=True, metavar="ID",
                   help="candidate id, as `cope advise` lists it (with --gpu none: cpu-only)")
    p.add_argument("--llama-bench", metavar="PATH", help="the llama-bench binary (default: from PATH)")
    p.add_argument("--model-path", metavar="FILE", help="the GGUF file to benchmark")
    p.add_argument("--runtime", choices=VERIFY_CHOICES, default=STOCK_NAME,
                   help="llama.cpp's llama-bench (stock means the same), ik_llama.cpp's or the MoE expert-cache fork's")
    p.add_argument("--time-limit", type=float, default=600.0, metavar="S",
                   help="seconds for all benchmark runs together (default 600)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_plan_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.time_limit <= 0:
        raise CopeInputError(f"--time-limit must be positive, got {args.time_limit}")
    bench = args.llama_bench or shutil.which("llama-bench")
    if bench is None:  # nothing can be verified: an input error, said in the form asked for
        if args.json:
            write_json({"error": NO_BENCH, "how_to_get": HOW_TO_GET, "exit_code": EXIT_INPUT})
        print(f"cope: error: {NO_BENCH}; {HOW_TO_GET}", file=sys.stderr)
        return EXIT_INPUT
    if args.llama_bench and not (os.path.isfile(bench) and os.access(bench, os.X_OK)):
        raise CopeInputError("not an executable file", path=bench)
    if not args.model_path:
        raise CopeInputError("--model-path: give the GGUF file to benchmark")
    if not os.path.isfile(args.model_path):
        raise CopeInputError("no such file (--model-path)", path=args.model_path)

    choices, _ = reused_choices(args)  # the last plan advise or the app made, said first
    if (choices.gpu or "").lower() == NO_GPU:  # nothing to split: the one CPU-only plan
        if args.candidate != CPU_ONLY:
            raise CopeInputError(f"--candidate {args.candidate}: with --gpu none the one plan is {CPU_ONLY}")
        cpu_plan = plan_cpu_only(choices)
        request = cpu_plan.request
        report = verify_cpu_only(cpu_plan, bench=bench, model_path=args.model_path, time_limit_s=args.time_limit)
    else:
        advice = advice_for(args, choices)
        request = advice.rec.request
        report = verify(advice, args.candidate, bench=bench, model_path=args.model_path, runtime=args.runtime,
                        time_limit_s=args.time_limit)
    if args.json:
        write_json({
            "candidate": args.candidate,
            "label": report.exported.label,
            "reason": report.exported.reason,
            "runs": [
                {"role": r.role, "candidate": r.candidate_id, "command": r.command,
                 "predicted_tokens_per_s": r.predicted_ts, "measured_tokens_per_s": r.result.avg_ts,
                 "measured_stddev_tokens_per_s": r.result.stddev_ts, "error": r.error,
                 "problem": r.result.problem}
                for r in report.rows
            ],
            "notes": list(report.notes),
        })
    else:
        sys.stdout.write(render_report(report, request))
    failed = report.failed
    if failed is not None:
        print(f"cope: error: {one_line(f'{failed.role} run: {failed.result.problem} (the binary: {bench})')}",
              file=sys.stderr)
        return EXIT_INPUT
    return EXIT_OK


def render_report(report: VerifyReport, request) -> str:  # type: ignore[no-untyped-def]
    exported = report.exported
    lines = [f"COPE verify: {request.model.name} {request.quant.name}: {exported.candidate_id} ({exported.label})"]
    if exported.nearest_id is not None:
        lines.append(f"  {exported.reason}")
    lines += ["", f"{'run':<9} {'candidate':<36} {'predicted tok/s':>15} {'measured tok/s':>18} {'error':>8}"]
    for r in report.rows:
        if r.result.avg_ts is None:
            measured, err = "-", "-"
        else:
            sd = f" ± {r.result.stddev_ts:.1f}" if r.result.stddev_ts is not None else ""
            measured, err = f"{r.result.avg_ts:.1f}{sd}", f"{r.error:+.1%}"
        lines.append(f"{r.role:<9} {r.candidate_id:<36} {r.predicted_ts:>15.1f} {measured:>18} {err:>8}")
    lines.append("")
    for r in report.rows:
        lines.append(f"{r.role}: {r.command}")
        if r.result.problem:
            lines.append(f"  problem: {r.result.problem}")
    lines += ["", *(f"Note: {n}" for n in report.notes)]
    return "\n".join(lines) + "\n"
