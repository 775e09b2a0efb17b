"""The `cope` command line.

Exit codes (cope_tui/exit_codes.py):
  0    success
  1    internal error (a bug: please report it with the message)
  2    bad input: a flag, a file or a value we cannot use (one line on stderr)
  130  interrupted (Ctrl-C)
  143  terminated (SIGTERM), handled like Ctrl-C

Data goes to stdout (a table, or exactly one JSON document with --json); narration
and errors go to stderr. The headless path never imports textual. Each subcommand
lives in cope_tui/commands/ and registers its own flags.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import traceback

from cope_tui.exit_codes import EXIT_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_TERMINATED

# The imports take a second or more. A Ctrl-C among them is held until they are done (one
# interrupting orjson's module init crashed Python with SIGSEGV, one elsewhere printed a
# KeyboardInterrupt traceback), then says what a later one says (bench/fuzz_files.py).
_MASK = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if hasattr(signal, "pthread_sigmask") else None
try:
    from cope_tui.app import run_app
    from cope_tui.commands import advise, calibrate, catalog, detect, estimate, export, replay, trace, validate, verify
    from cope_tui.commands.output import clean_output, cope_version, error_line
    from engine.core.cache_dirs import sweep_temps
    from engine.core.errors import CopeInputError
    from engine.core.files import out_of_space

    if _MASK is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, _MASK)  # a Ctrl-C held meanwhile is raised here
        _MASK = None
except KeyboardInterrupt:
    print("cope: interrupted", file=sys.stderr)
    raise SystemExit(EXIT_INTERRUPTED) from None
finally:
    if _MASK is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, _MASK)

__all__ = ["main", "EXIT_OK", "EXIT_INTERNAL", "EXIT_INPUT", "EXIT_INTERRUPTED", "EXIT_TERMINATED"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so every cleanup Ctrl-C runs (a probe run
    flushing its measurements, temp files removed) runs for it too."""


def _on_sigterm(_signum, _frame) -> None:
    raise Terminated()

COMMANDS = (advise, detect, catalog, export, estimate, verify, calibrate, trace, validate, replay)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, our exit code
        raise CopeInputError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cope", description="Find the fastest GPU/CPU split of an MoE model's experts.",
                     epilog="`cope` with no command opens the app in a terminal, planning for `cope advise`'s plan "
                            "flags when given (cope --model gpt-oss-120b --gpu '2x rtx-3090'), else for the plan it "
                            "had when it last closed; without a terminal it is `cope advise`.")
    parser.add_argument("--version", action="version", version=f"cope {cope_version()}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if _opens_app(argv) and sys.stdin.isatty() and sys.stdout.isatty():
        return _launch_app(argv)
    on_main = threading.current_thread() is threading.main_thread()  # signals can be set only there
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if on_main else None
    sweep_temps()  # temps a killed run left in the cache (engine/core/cache_dirs.py)
    try:
        with clean_output():  # escaped text, one-line warnings (cope_tui/commands/output.py)
            return _run(argv)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _run(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(["advise", *argv] if _is_advise(argv) else argv)
        return args.run(args)
    except CopeInputError as exc:
        print(error_line(exc), file=sys.stderr)
        return EXIT_INPUT
    except Terminated:
        print("cope: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("cope: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:
        if not out_of_space(exc):
            return _internal_error()
        # a write no caller checked (stdout to a full disk, a library's cache): one line
        print(f"cope: error: out of disk space ({exc.strerror or exc}"
              + (f": {exc.filename}" if exc.filename else "") + ")", file=sys.stderr)
        return EXIT_INPUT
    except SystemExit as exc:  # argparse's --help and --version print, then exit 0
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except Exception:  # noqa: BLE001 - the last line of defence: report, never hide
        return _internal_error()


def _internal_error() -> int:
    traceback.print_exc()
    print("cope: internal error (a bug): please report the message above", file=sys.stderr)
    return EXIT_INTERNAL


ADVISE_OUTPUT_FLAGS = ("--json", "--all", "--export")  # what only `cope advise` prints


def _is_advise(argv: list[str]) -> bool:
    """`cope` alone or `cope FLAGS` with no command: advise's flags."""
    return not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version"))


def _opens_app(argv: list[str]) -> bool:
    """`cope` alone or `cope FLAGS` (advise's plan flags): the app in a terminal, `cope advise
    FLAGS` without one, or with an output flag of advise's (`cope --json` prints the JSON)."""
    return _is_advise(argv) and not any(flag.split("=")[0] in ADVISE_OUTPUT_FLAGS for flag in argv)


def _launch_app(flags: list[str]) -> int:
    """The Textual app (the only path that imports textual), started from `flags` (advise's
    plan flags), else from the plan remembered at its last launch."""
    try:
        return run_app(flags)
    except CopeInputError as exc:  # a wrong flag: one line, before the screen is taken
        print(error_line(exc), file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
