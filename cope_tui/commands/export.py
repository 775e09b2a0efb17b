"""`cope export`: the command (and artefacts) that runs one candidate on a runtime.

The export is composed by cope_tui/service/export.py (`export_command`, as the app's Export
pane and `cope advise --export` compose theirs) and shown by cope_tui/text_report.py
(`render_export`). kt-kernel's activation file is written with torch
(cope_tui/service/runtimes.py), the only step here that imports it.
"""

from __future__ import annotations

import argparse
import sys

from cope_tui.commands.output import write_json
from cope_tui.commands.plan_args import add_plan_flags, advice_for, reused_choices
from cope_tui.exit_codes import EXIT_OK
from cope_tui.service.cache_export import LLAMA_CACHE_ID, cache_export
from cope_tui.service.export import ExportAsk, export_command, save_export, write_side_files
from cope_tui.service.runtimes import scan_runtimes
from cope_tui.service.workload import rank, workload_of
from cope_tui.text_report import render_export
from engine.core.errors import CopeInputError
from engine.core.user_paths import output_path
from engine.llamacpp.llamacpp_flags import BINARIES
from engine.runtimes import ALIASES, RUNTIME_NAMES, SGLANG_KT_NAME, STOCK_NAME

RUNTIME_CHOICES = (*RUNTIME_NAMES, *ALIASES)  # the registry's names, and the earlier spellings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="the command line (and artefacts) that runs one candidate")
    p.add_argument("--candidate", required=True, metavar="ID",
                   help="candidate id, as `cope advise` lists it, or llama-cache: stock llama.cpp with its own expert "
                        "cache (--moe-cache-mib), as cope advise leads with it")
    p.add_argument("--runtime", choices=RUNTIME_CHOICES, default=STOCK_NAME,
                   help="llama.cpp (stock, the default; 'stock' says the same), ik_llama.cpp, fork (the llama.cpp "
                        "MoE expert-cache fork, --moe-cache-profile) or sglang-kt (SGLang + kt-kernel)")
    p.add_argument("--binary", choices=BINARIES, default=None,
                   help="the llama.cpp program (default llama-server; sglang-kt launches python -m sglang.launch_server)")
    p.add_argument("--model-path", metavar="FILE", help="the GGUF file (default: <model id>.gguf)")
    p.add_argument("--hf-model", metavar="REPO|DIR",
                   help="sglang-kt: the Hugging Face weights SGLang loads (default: the model's repo id)")
    p.add_argument("--out", metavar="FILE",
                   help="write the command here, artefacts beside it (default: the command on stdout, its artefacts "
                        "in the cache folder's exports/)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_plan_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.runtime == SGLANG_KT_NAME and args.binary is not None:
        raise CopeInputError(f"--binary names a llama.cpp program; {SGLANG_KT_NAME} runs python -m sglang.launch_server")
    if args.out:  # the target checked before any work or any side file (a FIFO there leaves the .pt alone)
        args.out = str(output_path(args.out, flag="--out"))
    choices, plan_line = reused_choices(args)  # the last plan advise or the app made, said first
    workload = workload_of(choices)
    advice = advice_for(args, choices)
    ask = ExportAsk(candidate_id=args.candidate, runtime=args.runtime, binary=args.binary,
                    model_path=args.model_path, hf_model=args.hf_model, out=args.out or None)
    if args.candidate == LLAMA_CACHE_ID:  # llama.cpp's own expert cache, as cope advise leads with it
        export = cache_export(advice, runtime=args.runtime, binary=args.binary, model_path=args.model_path,
                              workload=workload)  # searched as advise searched it: by request time, -ub tried
    else:
        export = export_command(advice, ask, ranking=None if workload is None else rank(advice, workload),
                                builds=scan_runtimes(args.llama_bin).builds)  # -b/-ub only for a named workload
    for note in export.notes:
        if note.startswith(("SYNTHETIC", "does not fit")):
            print(f"cope: warning: {note}", file=sys.stderr)
    # The files the command names are there before it is shown: beside --out, else in the
    # cache folder's exports/ (a write that fails is one line, and no command).
    written = save_export(export, args.out) if args.out else write_side_files(export, ask.side_dir)
    if written:
        print("cope: wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    if args.json:
        doc = export.to_dict()
        doc["written"] = [str(p) for p in written]
        doc["plan"] = plan_line
        write_json(doc)
    else:
        sys.stdout.write(f"# plan: {plan_line}\n" + render_export(export, side_files_written=True,
                                                                   side_dir=None if args.out else ask.side_dir))
    return EXIT_OK
