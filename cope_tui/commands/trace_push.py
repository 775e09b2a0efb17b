"""`cope trace push REPO_ID`: publish a recorded routing trace as a Hugging Face Hub dataset.

    cope trace push org/name (--trace FILE | --model ID) [--private] [--licence ID]
                    [--quantization Q] [--runtime R]

Uploads COPE's own trace file, a llama-moe-trace CSV of it and a dataset card (model,
quantization, runtime, prompts' domain, tokens, date, how it was recorded, licence)
with the user's Hugging Face token (HF_TOKEN or `hf auth login`). `cope trace pull
org/name` reads it back. The dataset's URL goes to stdout, narration to stderr.
"""

from __future__ import annotations

import argparse
import sys

from cope_tui.exit_codes import EXIT_OK
from cope_tui.sources.hub_push import DEFAULT_LICENCE, newest_recorded_trace, push_trace
from engine.core.errors import CopeInputError
from engine.core.user_paths import input_kind, user_path


def register(sub: argparse._SubParsersAction) -> None:
    push = sub.add_parser("push", help="publish a recorded routing trace as a Hugging Face Hub dataset")
    push.add_argument("repo_id", metavar="REPO_ID", help="dataset repo id org/name (created when missing)")
    which = push.add_mutually_exclusive_group(required=True)
    which.add_argument("--trace", metavar="FILE", help="the recorded trace (.cope.npz) to publish")
    which.add_argument("--model", metavar="ID", help="publish the newest recorded trace of this model in the cache")
    push.add_argument("--private", action="store_true", help="create the dataset private")
    push.add_argument("--licence", "--license", dest="licence", default=None, metavar="ID",
                      help="the card's licence (default cc-by-4.0)")
    push.add_argument("--quantization", metavar="Q", help="the weights' quantization, if the trace does not say it")
    push.add_argument("--runtime", metavar="R", help="the runtime that ran the model, if the trace does not say it")
    push.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.trace is not None:  # '' is a path too, and an empty one: refused, not mistaken for "none given"
        path = user_path(args.trace, flag="--trace")
        if input_kind(path, what="trace file", flag="--trace") != "file":
            raise CopeInputError("no such trace file", path=f"--trace {args.trace}")
    else:
        path = newest_recorded_trace(args.model)
    result = push_trace(args.repo_id, path, private=args.private, licence=args.licence or DEFAULT_LICENCE,
                        quantization=args.quantization, runtime=args.runtime,
                        log=lambda m: print(f"cope: {m}", file=sys.stderr, flush=True))
    print(f"cope: published {path} as {'private ' if result.private else ''}dataset {result.repo_id} "
          f"({', '.join(result.files)}); pull it with `cope trace pull {result.repo_id}`", file=sys.stderr)
    print(result.url)
    return EXIT_OK
