"""`cope export`: the llama.cpp command (and side files) for one candidate.

The command is built by engine/export.py (`export_for`) and shown by
cope_tui/text_report.py (`render_export`), as `cope advise --export` and `cope estimate`
show theirs.
"""

from __future__ import annotations

import argparse
import sys

from cope_tui.commands.plan_args import add_plan_flags, advice_from_args
from cope_tui.exit_codes import EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="the llama.cpp command line for one candidate")
    p.add_argument("--candidate", required=True, metavar="ID", help="candidate id, as `cope advise` lists it")
    p.add_argument("--runtime", choices=("stock", "fork"), default="stock",
                   help="stock llama.cpp, or the fork with --moe-cache-profile (default stock)")
    p.add_argument("--binary", choices=("llama-server", "llama-cli", "llama-bench"), default="llama-server")
    p.add_argument("--model-path", metavar="FILE", help="the GGUF file (default: <model id>.gguf)")
    p.add_argument("--out", metavar="FILE", help="write the command here, side files beside it")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_plan_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import os

    from engine.export import export_for, write_export

    rec = advice_from_args(args).rec
    estimate = rec.estimate_of(args.candidate)
    side_dir = os.path.dirname(args.out) or None if args.out else None
    export = export_for(rec, estimate, runtime=args.runtime, binary=args.binary,
                        model_path=args.model_path, side_dir=side_dir)
    if args.out:
        written = write_export(export, args.out)
        print("cope: wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    if args.json:
        from cope_tui.commands.output import write_json

        write_json(export.to_dict())
    else:
        from cope_tui.text_report import render_export

        sys.stdout.write(render_export(export, side_files_written=bool(args.out)))
    return EXIT_OK
