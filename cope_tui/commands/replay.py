"""`cope replay`: hit rates per candidate policy over a routing trace, at given slots per
layer (--slots) or for the plan's VRAM budget, as a table or one JSON document."""

from __future__ import annotations

import argparse
import sys

from cope_tui.commands.output import write_json
from cope_tui.commands.plan_args import add_plan_flags
from cope_tui.exit_codes import EXIT_OK
from cope_tui.options import choices_from_args
from cope_tui.service.replays import replay_report
from engine.core.errors import CopeInputError


def register(sub: argparse._SubParsersAction) -> None:
    rep = sub.add_parser("replay", help="hit rates of every candidate policy over a routing trace")
    add_plan_flags(rep)
    rep.add_argument("--slots", type=_slots, default=None, metavar="N",
                     help="expert slots per layer (uniform: N in every layer; nonuniform: the same total); "
                          "default: the slots the VRAM budget leaves")
    rep.add_argument("--json", action="store_true", help="one JSON document on stdout")
    rep.set_defaults(run=run)


def _slots(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise CopeInputError(f"--slots: a whole number of slots per layer, got {text!r}") from None
    if value < 0:
        raise CopeInputError(f"--slots: at least 0, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    report = replay_report(choices_from_args(args), args.slots)
    if args.json:
        write_json(report.to_dict())
        return EXIT_OK
    sys.stdout.write(render(report))
    return EXIT_OK


def render(report) -> str:  # type: ignore[no-untyped-def]
    lines = [f"hit rates over {report.n_tokens} tokens of {report.trace.get('source', 'the trace')}, "
             f"{report.basis}", ""]
    lines.append(f"{'candidate':<42} {'slots':>6} {'per layer':>9} {'hit rate':>8} {'admitted':>9} "
                 f"{'prefetched':>10} {'used':>8}")
    for row in report.rows:
        per_layer = row.slots_per_layer
        spread = f"{per_layer.min()}-{per_layer.max()}" if per_layer.min() != per_layer.max() else f"{per_layer.min()}"
        lines.append(f"{row.candidate_id:<42} {int(per_layer.sum()):>6} {spread:>9} {row.hit_rate:>8.2%} "
                     f"{row.admissions:>9} {row.prefetch_copies:>10} {row.prefetch_used:>8}")
    lines += [""] + [f"note: {note}" for note in report.notes]
    return "\n".join(lines) + "\n"
