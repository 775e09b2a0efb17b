"""`cope export`: the llama.cpp command (and side files) for one candidate.

Also holds what `cope export`, `cope estimate`, `cope verify` and `cope advise --export`
share about exports (the flags they share live in plan_args).
"""

from __future__ import annotations

import argparse
import sys

from cope_tui.commands.plan_args import add_plan_flags, build_from_args
from cope_tui.exit_codes import EXIT_OK


def export_for(rec, target, *, runtime: str = "stock", binary: str = "llama-server",  # type: ignore[no-untyped-def]
               model_path: str | None = None, side_dir: str | None = None):
    from engine.export import export_candidate, plan_from_recommendation

    req = rec.request
    return export_candidate(
        target, req.model, plan_from_recommendation(rec), runtime=runtime, binary=binary,
        model_path=model_path, context=req.context_tokens, threads=req.threads, side_dir=side_dir,
    )


def find_estimate(rec, candidate_id: str):  # type: ignore[no-untyped-def]
    from engine.errors import CopeInputError
    from engine.policy import parse_candidate_id

    parse_candidate_id(candidate_id)  # a one-line error for a misspelt id
    for e in rec.estimates:
        if e.candidate.id == candidate_id:
            return e
    known = ", ".join(e.candidate.id for e in rec.estimates[:8])
    raise CopeInputError(f"--candidate {candidate_id}: not among this configuration's candidates ({known}, ...)")


def render_export(export, *, side_files_written: bool = False) -> str:  # type: ignore[no-untyped-def]
    """Comment lines (safe to paste into a shell) and the command."""
    lines = [f"# {export.candidate_id}: {export.label}", f"# {export.reason}"]
    if export.nearest_id is not None:
        lines.append(f"# the command below runs {export.exported_id} instead")
    for name, _ in export.side_files:
        lines.append(f"# side file {name}: " + ("written beside the command" if side_files_written
                                                  else "write it with --out FILE"))
    lines.append(export.display())
    return "\n".join(lines) + "\n"


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

    from engine.advise import advise
    from engine.export import write_export

    request, cost_model = build_from_args(args)
    rec = advise(request, cost_model)
    estimate = find_estimate(rec, args.candidate)
    side_dir = os.path.dirname(args.out) or None if args.out else None
    export = export_for(rec, estimate, runtime=args.runtime, binary=args.binary,
                        model_path=args.model_path, side_dir=side_dir)
    if args.out:
        written = write_export(export, args.out)
        print("cope: wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    if args.json:
        import orjson

        sys.stdout.write(orjson.dumps(export.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_export(export, side_files_written=bool(args.out)))
    return EXIT_OK
