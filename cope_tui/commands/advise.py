"""`cope advise`: rank every candidate policy for a model on a machine."""

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
                     help="also print the llama.cpp command of the best candidate (JSON: an \"export\" object)")

    adv.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from engine.export import export_for

    recommendation = advice_from_args(args).rec
    export = export_for(recommendation, recommendation.best) if args.export else None
    if args.json:
        from cope_tui.commands.output import write_json
        from engine.report import recommendation_to_dict

        doc = recommendation_to_dict(recommendation)
        if export is not None:
            doc["export"] = export.to_dict()
        write_json(doc)
    else:
        from cope_tui.text_report import render_export, render_recommendation

        sys.stdout.write(render_recommendation(recommendation, limit=None if args.all else 15))
        if export is not None:
            sys.stdout.write("\nllama.cpp command for the best candidate:\n" + render_export(export))
    return EXIT_OK
