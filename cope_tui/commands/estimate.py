"""`cope estimate -- llama-server -m model.gguf ...`: price the command a person already runs.

The llama.cpp flags that place experts are read (engine/llamacpp/llama_args.py) and priced beside
COPE's best (engine/advice/command_estimate.py) at the command's own -t and -c.
"""

from __future__ import annotations

import argparse
import os
import sys

from cope_tui.commands.output import write_json
from cope_tui.commands.plan_args import add_plan_flags, advice_for, reused_choices
from cope_tui.service.last_plan import MACHINE
from cope_tui.exit_codes import EXIT_OK
from cope_tui.service.advice import parse_pasted
from cope_tui.service.pasted import estimate_pasted, pasted_choices
from cope_tui.service.runtimes import scan_runtimes
from cope_tui.text_report import render_command_estimate
from engine.advice.error_band import estimate_band
from engine.hardware.platform import NO_GPU
from engine.llamacpp.llama_args import parse_llama_command
import shlex


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "estimate", help="estimate a llama.cpp command line and compare it with COPE's best",
        description="Give the command after --, e.g. cope estimate --model qwen3-30b-a3b -- "
                    "llama-server -m model.gguf -ngl 99 --n-cpu-moe 24 -t 8",
    )
    add_plan_flags(p, with_context_threads=False)
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the llama.cpp command, after --")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    words = list(args.command)
    if words and words[0] == "--":
        words = words[1:]
    if len(words) == 1 and any(ch.isspace() for ch in words[0]) and not os.path.exists(words[0]):
        command = parse_pasted(words[0])  # the whole command quoted as one word: split as a shell would
        words = _shell_words(words[0])
    else:
        command = parse_llama_command(words)
    # The app's paste field takes the same path (cope_tui/service/pasted.py).
    # the machine of the last plan advise or the app made (the command says the model, -t and -c)
    choices, _ = reused_choices(args, only=MACHINE)
    pasted = pasted_choices(command, choices, gguf_file=getattr(args, "gguf_file", None))
    if pasted.said:
        print(f"cope: {pasted.said}", file=sys.stderr)
    builds = None
    if (pasted.choices.gpu or "").lower() != NO_GPU:
        builds = scan_runtimes(args.llama_bin).builds
    est = estimate_pasted(command, pasted, lambda choices: advice_for(args, choices), fidelity=args.fidelity,
                          probe_budget_s=args.probe_budget_s, builds=builds)
    return _report(args, words, command, est)


def _report(args: argparse.Namespace, words: list[str], command, est) -> int:  # type: ignore[no-untyped-def]
    if args.json:
        write_json(estimate_document(words, command, est))
        return EXIT_OK
    sys.stdout.write(render_command_estimate(est))
    return EXIT_OK


def estimate_document(words: list[str], command, est) -> dict:  # type: ignore[no-untyped-def]
    """What `cope estimate --json` writes (before its version fields)."""
    best = est.best
    return {
        "command": {
            "argv": words, "tool": command.tool, "model_path": command.model_path,
            "model_source": command.model_source or None,
            "threads": command.threads, "context": command.context, "depth": command.n_depth,
            "cpu_moe_blocks": list(est.cpu_moe_blocks),
            "stages_cpu_experts": est.stages,
            "maps_to": est.maps_to,
            "unknown_flags": list(command.unknown),
        },
        "yours": _yours_dict(est),
        # what runs first: COPE's best that the exported command's runtime runs
        "best_that_runs": _priced(est.runnable, est.export.runtime if est.export is not None else None,
                                  speedup=est.runnable_speedup, versus=est.runnable_is),
        # rank 1 on paper (the "best" of schema 2), with the runtime it needs in words
        "best": None if best is None else {**_priced(best, None, speedup=est.speedup, versus=est.best_is),
                                           "runs_on": est.paper_runs_on},
        "no_ranking": est.no_ranking,
        "speedup_of_best": est.speedup,
        "best_is": est.best_is,
        "nearest_is": est.nearest_is,
        "export": None if est.export is None else est.export.to_dict(),
        "notes": list(est.notes + est.ranking_notes),
    }


def _priced(e, runtime: str | None, *, speedup: float | None, versus: str | None) -> dict | None:  # type: ignore[no-untyped-def]
    if e is None:
        return None
    out = {"id": e.candidate.id, "tpot_s": e.tpot_s, "tokens_per_s": e.tokens_per_s,
           "vram_used_bytes": e.vram_used_bytes, "speedup_vs_yours": speedup, "versus_yours": versus,
           "error_band": estimate_band(e).to_dict(e.tokens_per_s)}
    return out if runtime is None else {**out, "runtime": runtime}


def _shell_words(text: str) -> list[str]:
    return shlex.split(text.strip().removeprefix("$ "))


def _yours_dict(est) -> dict:  # type: ignore[no-untyped-def]
    yours = est.yours
    doc = {"runs": yours.runs, "verdict": yours.verdict, "refusal": yours.refusal,
           "fit": None if yours.fit is None else yours.fit.to_dict(), "detail": yours.detail, "fidelity": yours.fidelity,
           "tpot_s": yours.tpot_s if yours.runs else None, "tokens_per_s": yours.tokens_per_s if yours.runs else None,
           "rank": est.rank, "of": est.of, "tied_with": list(est.tied_with),
           "error_band": yours.band.to_dict(yours.tokens_per_s if yours.runs else None)}
    if yours.memory is not None:
        m = yours.memory
        doc.update(vram_used_bytes=m.vram_bytes, vram_total_bytes=m.vram_total_bytes, host_bytes=m.host_bytes,
                   ram=m.ram.to_dict())
    if yours.prefill is not None:
        doc["prompt_processing"] = yours.prefill.to_dict()
    if yours.cost is not None:
        c = yours.cost
        doc["breakdown_s"] = {"gpu_blocks": c.gpu_blocks_s, "cpu_blocks": c.cpu_blocks_s,
                              "gpu_experts": c.gpu_experts_s, "cpu_experts": c.cpu_experts_s, "sync": c.sync_s,
                              "head_and_token": c.head_s}
    return doc
