"""The `cope` command line.

Exit codes (cope_tui/exit_codes.py):
  0    success
  1    internal error (a bug: please report it with the message)
  2    bad input: a flag, a file or a value we cannot use (one line on stderr)
  130  interrupted (Ctrl-C)

Data goes to stdout (a table, or exactly one JSON document with --json); narration
and errors go to stderr. The headless path never imports textual. Each subcommand
lives in cope_tui/commands/ and registers its own flags.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from cope_tui.commands import advise, calibrate, catalog, detect, estimate, export, trace, validate, verify
from cope_tui.exit_codes import EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK
from engine.errors import CopeInputError

__all__ = ["main", "EXIT_OK", "EXIT_INTERNAL", "EXIT_INPUT", "EXIT_INTERRUPTED"]

COMMANDS = (advise, detect, catalog, export, estimate, verify, calibrate, trace, validate)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, our exit code
        raise CopeInputError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cope", description="Find the fastest GPU/CPU split of an MoE model's experts.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv and sys.stdin.isatty() and sys.stdout.isatty():
        return _launch_app()
    try:
        args = build_parser().parse_args(argv or ["advise"])
        return args.run(args)
    except CopeInputError as exc:
        print(f"cope: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("cope: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except Exception:  # noqa: BLE001 - the last line of defence: report, never hide
        traceback.print_exc()
        print("cope: internal error (a bug): please report the message above", file=sys.stderr)
        return EXIT_INTERNAL


def _launch_app() -> int:
    """`cope` with no arguments in a terminal: the Textual app (the only path that
    imports textual; without a terminal, no arguments still means `cope advise`)."""
    try:
        from cope_tui.app import run_app

        return run_app()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
