"""`cope advise`: rank every candidate policy for a model on a machine, and say first
what to run now (the best candidate an installed runtime runs)."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from cope_tui.commands.output import write_json
from cope_tui.commands.plan_args import add_plan_flags, advice_from_args
from cope_tui.exit_codes import EXIT_OK
from cope_tui.options import choices_from_args
from cope_tui.service.cpu_only import plan_cpu_only, render_cpu_only
from cope_tui.service.export import ExportAsk, export_command, write_side_files
from cope_tui.service.last_plan import record_plan
from cope_tui.service.llama_search import search_beside
from cope_tui.service.runtimes import run_advice, scan_runtimes
from cope_tui.service.workload import rank, workload_of
from cope_tui.text_report import render_export, render_recommendation
from cope_tui.workload_report import render_workload
from engine.advice.report import recommendation_to_dict
from engine.runtimes import STOCK_NAME
from engine.core.cache_dirs import exports_dir
from engine.core.errors import CopeInputError
from engine.hardware.platform import NO_GPU


def register(sub: argparse._SubParsersAction) -> None:
    adv = sub.add_parser("advise", help="rank every candidate policy for a model on a machine")
    add_plan_flags(adv)
    adv.add_argument("--json", action="store_true", help="one JSON document on stdout")
    adv.add_argument("--all", action="store_true", help="list every candidate in the table")
    adv.add_argument("--export", action="store_true",
                     help="also print the llama.cpp command of the fastest estimate, or with a workload of the "
                          "fastest request with its -b/-ub (JSON: an \"export\" object)")

    adv.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    choices = choices_from_args(args)
    if (choices.gpu or "").lower() == NO_GPU:
        return _run_cpu_only(args, choices)
    workload = workload_of(choices)  # None: decode only (checked before the ranking)
    advice = advice_from_args(args)
    keep_plan(choices)
    recommendation = advice.rec
    ranking = rank(advice, workload) if workload is not None else None
    scan = scan_runtimes(args.llama_bin)
    runs = run_advice(recommendation, scan, ranking)  # with a workload, the picks follow request time
    runs = write_pick_files(recommendation, runs)
    # the fastest estimate on stock llama.cpp, or with a workload the fastest request with its -b/-ub
    export = export_command(advice, ExportAsk(), ranking=ranking, builds=scan.builds) if args.export else None
    for note in _synthetic_warnings(runs):
        print(f"cope: warning: {note}", file=sys.stderr)
    search = search_beside(advice, runs, workload)
    if args.json:
        doc = recommendation_to_dict(recommendation, runs)
        doc.update(search.to_dict())
        doc["runtimes"] = scan.to_dict()
        if ranking is not None:
            doc["workload"] = ranking.to_dict()
        if export is not None:
            doc["export"] = export.to_dict()
        write_json(doc)
    else:
        text = render_recommendation(recommendation, runs=runs, limit=None if args.all else 15,
                                     heading=search.heading())
        # the search's command first when it beats the ranking's pick, else its one line after that pick;
        # the trade-off table below the search's lines
        text = search.placed(text, build=scan.builds.get(STOCK_NAME),
                             synthetic=recommendation.request.trace.meta.origin == "synthetic")
        sys.stdout.write(text)
        if ranking is not None:
            sys.stdout.write("\n" + render_workload(ranking, recommendation, limit=None if args.all else 10))
        if export is not None:
            what = "the fastest estimate" if ranking is None else "the fastest request"
            sys.stdout.write(f"\nllama.cpp command for {what}:\n" + render_export(export))
    return EXIT_OK


def keep_plan(choices) -> None:  # type: ignore[no-untyped-def]
    """This plan becomes the one export, verify and estimate reuse (cope_tui/service/last_plan.py);
    a cache folder that cannot take it is a warning, not a failed advise."""
    try:
        record_plan(choices, by="cope advise")
    except (OSError, CopeInputError) as exc:
        print(f"cope: warning: the plan was not recorded for cope export: {getattr(exc, 'strerror', None) or exc}",
              file=sys.stderr)


def write_pick_files(rec, runs):  # type: ignore[no-untyped-def]
    """The run-now and best-overall commands name their artefacts (the fork's profile,
    kt-kernel's counts) in the cache folder's exports/, written there before they are shown."""
    runs = replace(runs, side_dir=os.path.abspath(exports_dir()))
    for pick in runs.picks():
        written = write_side_files(runs.export(rec, pick), runs.side_dir)
        if written:
            print("cope: wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    return runs


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


def _run_cpu_only(args: argparse.Namespace, choices) -> int:  # type: ignore[no-untyped-def]
    """`--gpu none`: the CPU-only command and its price (cope_tui/service/cpu_only.py)."""
    plan = plan_cpu_only(choices)
    keep_plan(choices)
    if args.json:
        write_json(plan.to_dict())
    else:
        sys.stdout.write(render_cpu_only(plan))
    return EXIT_OK
