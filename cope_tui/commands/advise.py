"""`cope advise`: rank every candidate policy for a model on a machine, and say first
what to run now (the best candidate an installed runtime runs)."""

from __future__ import annotations

import argparse
import sys

from cope_tui.commands.plan_args import add_plan_flags, advice_from_args
from cope_tui.exit_codes import EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    adv = sub.add_parser("advise", help="rank every candidate policy for a model on a machine")
    add_plan_flags(adv)
    adv.add_argument("--json", action="store_true", help="one JSON document on stdout")
    adv.add_argument("--all", action="store_true", help="list every candidate in the table")
    adv.add_argument("--export", action="store_true",
                     help="also print the llama.cpp command of the fastest estimate (JSON: an \"export\" object)")

    adv.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cope_tui.service.runtimes import run_advice, scan_runtimes
    from engine.export import export_for

    recommendation = advice_from_args(args).rec
    scan = scan_runtimes(args.llama_bin)
    runs = run_advice(recommendation, scan.names)
    export = export_for(recommendation, recommendation.best) if args.export else None
    for note in _synthetic_warnings(runs):
        print(f"cope: warning: {note}", file=sys.stderr)
    if args.json:
        from cope_tui.commands.output import write_json
        from engine.report import recommendation_to_dict

        doc = recommendation_to_dict(recommendation, runs)
        doc["runtimes"] = scan.to_dict()
        if export is not None:
            doc["export"] = export.to_dict()
        write_json(doc)
    else:
        from cope_tui.text_report import render_export, render_recommendation

        sys.stdout.write(render_recommendation(recommendation, runs=runs, limit=None if args.all else 15))
        if export is not None:
            sys.stdout.write("\nllama.cpp command for the fastest estimate:\n" + render_export(export))
    return EXIT_OK


def _synthetic_warnings(runs) -> list[str]:  # type: ignore[no-untyped-def]
    """An artefact (fork profile, kt-kernel counts) of the run-now or best-overall pick
    learnt from SYNTHETIC routing is said on stderr as well."""
    if not runs.plan.synthetic_profile:
        return []
    picks = {p.row.placement.layout.value for p in (runs.run_now, runs.best_overall) if p is not None}
    if "experts" not in picks:
        return []
    return ["the recommended per-expert placement is learnt from SYNTHETIC routing: record or pull a real "
            "trace (cope trace) before running it"]
