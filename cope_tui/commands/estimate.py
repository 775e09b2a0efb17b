"""`cope estimate -- llama-server -m model.gguf ...`: price the command a person already runs.

The llama.cpp flags that place experts are read (engine/llama_args.py), priced with the
advise pipeline (engine/layer_set.py) and shown beside COPE's best candidate.
"""

from __future__ import annotations

import argparse
import sys

from cope_tui.commands.export import export_for
from cope_tui.commands.plan_args import add_plan_flags, build_from_args
from cope_tui.exit_codes import EXIT_OK


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
    import os

    from engine.advise import advise
    from engine.errors import CopeInputError
    from engine.llama_args import command_notes, cpu_layers, parse_llama_command
    from engine.memory import GIB
    from engine.layer_set import price_layer_set
    from engine.policy import Execution

    words = list(args.command)
    if words and words[0] == "--":
        words = words[1:]
    command = parse_llama_command(words)
    model_arg = args.model
    if model_arg is None:
        if command.model_path and os.path.exists(command.model_path):
            model_arg = command.model_path  # the model reader may know the file
        else:
            raise CopeInputError("--model: say which model the command runs (a catalog id, see `cope models`)")
    request, cost_model = build_from_args(args, context=command.context or None, threads=command.threads,
                                          model=model_arg)
    model = request.model
    cpu, placement_notes = cpu_layers(command, model)
    execution = Execution.STAGE if command.stages_cpu_experts and cpu.any() else Execution.SEQUENTIAL
    yours = price_layer_set(request, cost_model, cpu, execution=execution)
    rec = advise(request, cost_model)
    best = rec.best
    export = export_for(rec, best, model_path=command.model_path,
                        binary=command.tool if command.tool != "other" else "llama-server")
    notes = list(command_notes(command, model)) + list(placement_notes)
    if yours.vram_used_bytes > request.vram_budget_bytes:
        notes.append(f"your placement needs {yours.vram_used_bytes / GIB:.1f} GiB of VRAM, over the budget of "
                     f"{request.vram_budget_bytes / GIB:.1f} GiB: llama.cpp would run out of memory")
    speedup = yours.tpot_s / best.tpot_s
    all_notes = notes + list(rec.notes)  # the command's, then every assumption and caveat
    if args.json:
        import orjson

        doc = {
            "command": {
                "argv": words, "tool": command.tool, "model_path": command.model_path,
                "threads": command.threads, "context": command.context,
                "cpu_moe_blocks": [model.moe_blocks[i] for i in range(len(cpu)) if cpu[i]],
                "stages_cpu_experts": execution is Execution.STAGE,
                "unknown_flags": list(command.unknown),
            },
            "yours": {"detail": yours.detail, "tpot_s": yours.tpot_s, "tokens_per_s": yours.tokens_per_s,
                      "vram_used_bytes": yours.vram_used_bytes, "fidelity": yours.fidelity},
            "best": {"id": best.candidate.id, "tpot_s": best.tpot_s, "tokens_per_s": best.tokens_per_s,
                     "vram_used_bytes": best.vram_used_bytes},
            "speedup_of_best": speedup,
            "export": export.to_dict(),
            "notes": all_notes,
        }
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
        return EXIT_OK
    lines = [
        f"COPE estimate: {model.name} {request.quant.name}, {request.threads} threads, "
        f"context {request.context_tokens}, cost model {yours.fidelity}",
        f"Your command:  {yours.detail}",
        f"               {yours.tpot_s * 1e3:8.2f} ms/token  {yours.tokens_per_s:7.1f} tok/s  "
        f"VRAM {yours.vram_used_bytes / GIB:.2f} GiB",
        f"COPE's best:   {best.candidate.id}: {best.candidate.describe()}",
        f"               {best.tpot_s * 1e3:8.2f} ms/token  {best.tokens_per_s:7.1f} tok/s  "
        f"VRAM {best.vram_used_bytes / GIB:.2f} GiB  ({speedup:.2f}x yours)",
    ]
    if export.nearest_id is not None:
        runs = next(e for e in rec.estimates if e.candidate.id == export.exported_id)
        lines.append(f"Runs on llama.cpp: {runs.candidate.id}: {runs.tpot_s * 1e3:.2f} ms/token  "
                     f"{runs.tokens_per_s:.1f} tok/s  ({yours.tpot_s / runs.tpot_s:.2f}x yours)")
    lines += [
        "",
        "Command for COPE's best:",
        *("  " + line for line in _render(export).splitlines()),
    ]
    if command.unknown:
        lines += ["", "Flags not modelled (listed, not used): " + "  ".join(command.unknown)]
    if all_notes:
        lines += ["", "Notes:", *[f"  - {n}" for n in all_notes]]
    sys.stdout.write("\n".join(lines) + "\n")
    return EXIT_OK


def _render(export) -> str:  # type: ignore[no-untyped-def]
    from cope_tui.commands.export import render_export

    return render_export(export)
