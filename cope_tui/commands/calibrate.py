"""`cope calibrate --gguf FILE`: short llama-bench runs of your GGUF, this machine's lane
constants fitted to them and kept, so later estimates price with them
(cope_tui/service/calibrate.py)."""

from __future__ import annotations

import argparse
import sys

from cope_tui.commands.output import write_json
from cope_tui.exit_codes import EXIT_OK
from cope_tui.service.calibrate import calibrate, find_llama_bench
from engine.advice.calibration_runs import BENCH_REPETITIONS
from engine.core.errors import CopeInputError
from engine.core.user_paths import input_kind, user_path
from engine.cost.calibration import LANE_CONSTANTS, describe_constant
from engine.cost.calibration_io import to_dict


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate", help="measure this machine with a few short llama-bench runs of a GGUF and price with them",
        description="Runs llama-bench (-p 0 -n 32 -r 2) on a few placements of the GGUF: everything on the CPU "
                    "at two thread counts and, with a GPU, all experts on the GPU, half and all of them on the CPU; "
                    "fits the cost model's lane constants to the measured tokens/s and keeps them in the cache. "
                    "Later estimates use them (--fidelity calibrated).")
    p.add_argument("--gguf", required=True, metavar="FILE", help="the GGUF file to run")
    p.add_argument("--llama-bench", metavar="PATH", help="the llama-bench binary (default: found on PATH)")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads (default: the CPU's physical cores)")
    p.add_argument("--run-timeout", type=float, default=300.0, metavar="S",
                   help="seconds one llama-bench run may take (default 300)")
    p.add_argument("--repetitions", type=int, metavar="N",
                   help="llama-bench -r, a run (default 2; more steady the fit on a busy machine)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(run=run)


def _say(done: int, total: int, label: str) -> None:
    print(f"cope: calibrate {done}/{total}: {label}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if args.threads is not None and args.threads < 1:
        raise CopeInputError(f"--threads must be positive, got {args.threads}")
    gguf = user_path(args.gguf, flag="--gguf")
    # The user's own file first (a missing one is the likelier slip); a FIFO or a device is
    # refused unopened, and the GGUF reader opens it without blocking.
    if input_kind(gguf, what="GGUF file", flag="--gguf") != "file":
        raise CopeInputError("no such file", path=f"--gguf {args.gguf}")
    bench = find_llama_bench(args.llama_bench)
    report = calibrate(str(gguf), bench=bench, threads=args.threads, run_timeout_s=args.run_timeout,
                       repetitions=args.repetitions or BENCH_REPETITIONS, progress=_say)
    if args.json:
        write_json({**to_dict(report.calibration), "path": str(report.path), "llama_bench": bench})
    else:
        sys.stdout.write(render(report))
    return EXIT_OK


def render(report) -> str:  # type: ignore[no-untyped-def]
    cal = report.calibration
    lines = [f"COPE calibrate: {cal.gguf_name} ({cal.model_id} {cal.quant}) on {cal.cpu_name}"
             + (f" with {cal.gpu_name}" if cal.gpu_name else ""),
             f"llama-bench {cal.build_commit or '?'} (build {cal.build_number}), backends {cal.backends}", "",
             f"{'run':<22} {'threads':>7} {'measured tok/s':>16} {'global fit':>11} {'calibrated':>11}"]
    for r in cal.runs:
        sd = f" ± {r.stddev_tokens_per_s:.2f}" if r.stddev_tokens_per_s else ""
        lines.append(f"{r.name:<22} {r.threads:>7} {f'{r.tokens_per_s:.2f}{sd}':>16} {r.global_tokens_per_s:>11.2f} "
                     f"{r.fitted_tokens_per_s:>11.2f}")
    lines.append("")
    fitted = cal.constants.values
    lines.append("Fitted: " + (", ".join(describe_constant(k, v) for k, v in fitted.items()) or
                               "nothing (the runs constrain no constant)"))
    kept = [k for k in LANE_CONSTANTS if k not in fitted]
    if kept:
        lines.append("Kept at the global fit (not determined by these runs): " + ", ".join(kept))
    lines.append(f"Residual: {cal.residual_rms:.1%} (root mean square of log(calibrated / measured))")
    for name, reason in cal.skipped:
        lines.append(f"Skipped {name}: {reason}")
    lines += ["", f"Stored in {report.path}",
              "cope advise and cope estimate on this machine now price with it (--fidelity to choose another)."]
    for r in cal.runs:
        lines.append(f"  {r.name}: {' '.join(r.argv)}")
    return "\n".join(lines) + "\n"
