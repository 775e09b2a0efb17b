"""`cope trace pull REPO[/FILE]`: fetch a published routing trace from the Hugging Face Hub.

    cope trace pull org/name[/FILE] [--model ID] [--sha256 HEX] [--out FILE] [--repo-type dataset|model]

Downloads the file with huggingface_hub (its cache, offline mode and token apply),
checks its sha256 (--sha256, else the curated index's, when either gives one) and
refuses a mismatch, converts it (COPE .cope.npz, llama-moe-trace CSV or generic JSONL)
to COPE's format and writes it to --out or the trace cache
(`<cache>/traces/<model>-<org>--<name>--<file>.cope.npz`), where `cope advise` finds it.
The path goes to stdout, narration to stderr.
"""

from __future__ import annotations

import argparse
import sys

from cope_tui.exit_codes import EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    pull = sub.add_parser("pull", help="download a published routing trace from the Hugging Face Hub")
    pull.add_argument("spec", metavar="REPO[/FILE]", help="dataset repo id org/name, optionally /path/to/file")
    pull.add_argument("--model", metavar="ID", help="the model the trace is from (catalog id, repo id or path); "
                      "default: the one the trace index names")
    pull.add_argument("--sha256", metavar="HEX", help="expected sha256 of the file (default: the index's, if any)")
    pull.add_argument("--out", metavar="FILE", help="where to write the trace (default: the trace cache)")
    pull.add_argument("--repo-type", choices=("dataset", "model"), default="dataset",
                      help="kind of Hub repo (default dataset)")
    pull.add_argument("--revision", metavar="REV", help="branch, tag or commit (default main)")
    pull.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cope_tui.sources.hub_trace import pull_trace  # noqa: PLC0415

    result = pull_trace(args.spec, model=args.model, sha256=args.sha256, out=args.out,
                        repo_type=args.repo_type, revision=args.revision,
                        log=lambda m: print(f"cope: {m}", file=sys.stderr, flush=True))
    trace = result.trace
    for note in trace.meta.notes:
        print(f"cope: note: {note}", file=sys.stderr)
    print(f"cope: wrote {trace.n_tokens} tokens x {trace.n_layers} MoE layers (top-{trace.top_k}, "
          f"{trace.n_sequences} sequences) of {trace.meta.model or 'an unnamed model'} to {result.path}",
          file=sys.stderr)
    print(result.path)
    return EXIT_OK
