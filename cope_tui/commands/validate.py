"""`cope validate`: estimated against executed TPOT, per fidelity (cope_tui/service/ground_truth.py).

The settings every configuration shares are the plan options (cope_tui/options.py); the
models, thread counts, VRAM budgets and fidelities to cover are lists. With --out the JSON
document is written (atomically) after every configuration, so a run cut short keeps
what it finished.
"""

from __future__ import annotations

import argparse
import sys

from cope_tui.commands.output import json_text, write_json
from cope_tui.exit_codes import EXIT_OK
from cope_tui.options import FIDELITIES, add_flags, check_choices, choices_from_args, option_names
from cope_tui.service.ground_truth import GroundTruthSettings, run_ground_truth
from engine.advice.repeat_noise import noise_verdict, repeat_groups
from engine.core.errors import CopeInputError
from engine.core.files import atomic_write_text
from engine.core.user_paths import output_path
from engine.cost.cost_model import Fidelity

SHARED = ("quant", "gpu", "cpu", "trace", "tokens", "seed", "context", "probe_budget_s", "reprobe")
DEFAULTS = {"trace": "synthetic", "tokens": 32, "context": 4096, "probe_budget_s": 30.0}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="execute every candidate for real and compare with the estimates")
    # Lists of what varies, under their own names (not the plan options' single values).
    p.add_argument("--model", dest="models", default="qwen3-30b-a3b", help="model id(s), comma-separated (default qwen3-30b-a3b)")
    p.add_argument("--threads", dest="thread_counts", default="1,4,8,16", help="CPU thread counts, comma-separated")
    p.add_argument("--vram-budgets", default="8,12,16,24", metavar="GIB,...", help="VRAM budgets in GiB")
    p.add_argument("--fidelity", dest="fidelities", default="analytic,atomic,combined", help="fidelities to compare, comma-separated")
    add_flags(p, skip=tuple(name for name in option_names() if name not in SHARED), defaults_=DEFAULTS)
    p.add_argument("--mode", choices=("timed", "functional"), default="timed",
                   help="functional: run both tiers on the CPU (checks every candidate executes; times mean nothing)")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="stop probing and executing after this long (the rest reported as not run)")
    p.add_argument("--out", metavar="FILE", help="write the JSON document here after every configuration")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(run=run)


def _list(text: str, cast, flag: str) -> list:  # type: ignore[no-untyped-def]
    try:
        values = [cast(v.strip()) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise CopeInputError(f"{flag}: not a comma-separated list of numbers: {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise CopeInputError(f"{flag}: give positive values, got {text!r}")
    return values


MAX_THREADS = 4096  # more CPU threads than any machine has; torch takes a C int


def _threads(text: str) -> list[int]:
    threads = _list(text, int, "--threads")
    big = [t for t in threads if t > MAX_THREADS]
    if big:
        shown = str(big[0]) if len(str(big[0])) <= 12 else str(big[0])[:9] + "..."
        raise CopeInputError(f"--threads {shown}: at most {MAX_THREADS} threads")
    return threads


def _say(text: str) -> None:
    print(f"cope validate: {text}", file=sys.stderr, flush=True)


def settings_from_args(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    asked = [f.strip() for f in args.fidelities.split(",") if f.strip()]
    if not asked or any(f not in FIDELITIES for f in asked):
        raise CopeInputError(f"--fidelity: choose among {', '.join(FIDELITIES)}; got {args.fidelities!r}")
    base = choices_from_args(args)
    check_choices(base)
    return GroundTruthSettings(
        base=base,
        models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
        threads=tuple(_threads(args.thread_counts)),
        budgets_gib=tuple(_list(args.vram_budgets, float, "--vram-budgets")),
        fidelities=tuple(f for f in Fidelity if f.value in asked),
        probe_budget_s=base.probe_budget_s, reprobe=base.reprobe, mode=args.mode, max_seconds=args.max_seconds,
    )


def _writer(path: str):  # type: ignore[no-untyped-def]
    """Writes the report so far to `path`, atomically, each time it is called."""
    def write(report) -> None:  # type: ignore[no-untyped-def]
        atomic_write_text(path, json_text(report.to_dict()))

    return write


def run(args: argparse.Namespace) -> int:
    if args.out:
        output_path(args.out, flag="--out")  # before any work: a FIFO or a folder there is refused at once
    settings = settings_from_args(args)
    on_config = _writer(args.out) if args.out else None
    report = run_ground_truth(settings, on_config=on_config, say=_say)
    if on_config is not None:
        on_config(report)
    if args.json:
        write_json(report.to_dict())
    else:
        sys.stdout.write(render(report.to_dict()))
    return EXIT_OK


def _fmt(x, scale=1e3, spec="8.2f") -> str:
    return "-".rjust(int(spec.split(".")[0])) if x is None else format(x * scale, spec)


def render(doc: dict) -> str:
    f = doc["fidelities"]
    lines = [f"cope validate ({doc['mode']}, CUDA: {doc['cuda_device'] or 'none'}), {doc['date_iso']}"]
    for cfg in doc["configurations"]:
        lines.append("")
        lines.append(f"{cfg['model']} {cfg['quantization']}  threads {cfg['threads']}  budget {cfg['vram_budget_gib']:g} GiB"
                     f"  ({cfg['tokens']} tokens)")
        lines.append(f"  {'candidate':<40} {'measured ms':>11} " + " ".join(f"{x + ' ms':>11}" for x in f))
        for row in cfg["candidates"]:
            if row["measured_tpot_s"] is None and row["refused"] and "CUDA" in row["refused"]:
                measured = "refused".rjust(11)
            else:
                measured = _fmt(row["measured_tpot_s"], spec="11.2f")
            lines.append(f"  {row['candidate']:<40} {measured} "
                         + " ".join(_fmt(row["estimated_tpot_s"][x], spec="11.2f") for x in f))
    lines.append("")
    lines.append(f"{'overall':<22}" + "".join(f"{x:>12}" for x in f))

    def share(v):
        return "-" if v is None else f"{v:.1%}"

    for label, key, fmt in (("selection accuracy", "selection_accuracy", share), ("top-3 recovery", "top3_recovery", share),
                            ("MAPE", "mape", share),
                            ("mean Spearman", "mean_spearman", lambda v: "-" if v is None else f"{v:.3f}")):
        lines.append(f"{label:<22}" + "".join(f"{fmt(doc['summary'][x][key]):>12}" for x in f))
    lines.append(f"probing time: {doc['probing']['total_s']:.1f} s; total {doc['elapsed_s']:.1f} s")
    rows = doc["cpu_target"]["rows"]
    if rows:
        lines.append("")
        lines.append("CPU target (all-on-CPU, estimate within 10% of executed):")
        for r in rows:
            lines.append(f"  {r['model']} threads {r['threads']} budget {r['vram_budget_gib']:g} {r['fidelity']:<9}"
                         f" TPOT est {r['estimated_tpot_s'] * 1e3:8.2f} ms  meas {r['measured_tpot_s'] * 1e3:8.2f} ms"
                         f"  {r['error']:+6.1%};  experts est {r['estimated_experts_s'] * 1e3:8.2f} ms"
                         f"  meas {r['measured_experts_s'] * 1e3:8.2f} ms  {r['experts_error']:+6.1%}")
        for x, t in doc["cpu_target"]["by_fidelity"].items():
            lines.append(f"  {x}: worst |error| {t['worst_abs_error']:.1%}, experts {t['worst_abs_experts_error']:.1%}:"
                         f" {'met' if t['met'] else 'NOT met'}")
        lines.extend(render_repeats(rows, doc["cpu_target"].get("threshold", 0.10)))
    lines.extend(render_thread_scaling(doc.get("thread_scaling") or {}))
    for n in doc["notes"]:
        lines.append(f"note: {n}")
    return "\n".join(lines) + "\n"


def render_repeats(rows: list[dict], target: float) -> list[str]:
    """The all-on-CPU executions at one thread count are repeats (one per budget): their
    median and spread, each fidelity's estimate against the median, and the verdict when
    the spread alone exceeds the target."""
    groups = repeat_groups(rows)
    lines = []
    for g in groups:
        lines.append(f"  repeats: {g.model} threads {g.threads} {g.fidelity:<9} {g.n_executions} identical executions,"
                     f" median {g.median_tpot_s * 1e3:.2f} ms ({g.min_tpot_s * 1e3:.2f} to {g.max_tpot_s * 1e3:.2f},"
                     f" spread {g.spread:.0%}); est {g.estimated_tpot_s * 1e3:.2f} ms {g.error_to_median:+.1%}")
    verdict = noise_verdict(groups, target)
    if verdict:
        lines.append(f"  {verdict}")
    return lines


def render_thread_scaling(scaling: dict) -> list[str]:
    """The all-on-CPU candidate's rows in full; of the others, the count that disagree;
    then every warning (the JSON's thread_scaling has every row)."""
    rows = scaling.get("rows") or []
    if not rows:
        return []
    tolerance = scaling.get("tolerance", 0.15)
    lines = ["", f"Thread scaling (speed-up from the fewest threads, executed against implied by the estimates;"
                 f" warned beyond {tolerance:.0%}):"]
    for r in rows:
        if r["candidate"] != "all-cpu":
            continue
        lines.append(f"  {r['model']} {r['candidate']} budget {r['vram_budget_gib']:g} {r['fidelity']:<9}"
                     f" {r['base_threads']}->{r['threads']} threads: est {r['estimated_base_tpot_s'] * 1e3:.2f} ->"
                     f" {r['estimated_tpot_s'] * 1e3:.2f} ms ({r['implied_speedup']:.2f}x); executed"
                     f" {r['executed_base_tpot_s'] * 1e3:.2f} -> {r['executed_tpot_s'] * 1e3:.2f} ms"
                     f" ({r['achieved_speedup']:.2f}x)  {r['disagreement']:+6.1%}{'  WARNING' if r['warn'] else ''}")
    others = [r for r in rows if r["candidate"] != "all-cpu"]
    if others:
        lines.append(f"  other candidates: {sum(r['warn'] for r in others)} of {len(others)} comparisons more than"
                     f" {tolerance:.0%} apart (all rows in the JSON's thread_scaling)")
    lines.extend(f"warning: thread scaling: {w}" for w in scaling.get("warnings") or [])
    return lines
