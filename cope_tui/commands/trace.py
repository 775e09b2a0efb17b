"""`cope trace`: a group of subcommands that make routing traces.

Each subcommand is a module with `register(subparsers)` (the `trace` group's
subparsers) that sets `run`; add a module to SUBCOMMANDS to add a subcommand.
"""

from __future__ import annotations

import argparse

from cope_tui.commands import trace_pull, trace_push, trace_record
from engine.core.errors import CopeInputError

SUBCOMMANDS = (trace_record, trace_pull, trace_push)


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("trace", help="record, fetch or publish routing traces (see `cope trace -h`)")
    tsub = group.add_subparsers(dest="trace_command", metavar="SUBCOMMAND")
    for command in SUBCOMMANDS:
        command.register(tsub)
    names = ", ".join(tsub.choices)
    group.set_defaults(run=lambda args: _missing(names))


def _missing(names: str) -> int:
    raise CopeInputError(f"`cope trace` needs a subcommand: {names}")
