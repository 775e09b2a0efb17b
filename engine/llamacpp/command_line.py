"""A command as a value: the program, each setting's words in order, the environment.

COPE's own llama.cpp commands (engine/runtimes/llamacpp.py, the calibration and verify
runs, the CPU-only plan) are built as a CommandLine, priced from it
(engine/llamacpp/llama_args.py: read_command_line) and inspected by their settings
(engine/advice/command_flags.py); only printing turns one into words (`argv`,
`display`). Each setting's words are spelled by the flag table
(engine/llamacpp/llamacpp_flags.py) for the build the command is for.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

from engine.llamacpp.llamacpp_flags import flag_args, read_key

if TYPE_CHECKING:
    from engine.llamacpp.builds import LlamaBuild


@dataclass(frozen=True)
class Arg:
    """One setting's words, as printed. `key` is what the reader groups them under
    (llamacpp_flags.read_key: the setting it reads them as, else the option); an argument
    kept from a person's command keeps its LlamaCommand.args key; "" for words of another
    runtime, which COPE never reads."""

    key: str
    words: tuple[str, ...]


@dataclass(frozen=True)
class CommandLine:
    binary: str
    args: tuple[Arg, ...] = ()
    env: tuple[tuple[str, str], ...] = ()  # VAR=value set for the command

    @classmethod
    def of_words(cls, argv: Sequence[str], env: Iterable[tuple[str, str]] = ()) -> "CommandLine":
        """Another runtime's command (SGLang's): its words after the program as one group."""
        rest = tuple(argv[1:])
        return cls(argv[0], (Arg("", rest),) if rest else (), tuple(env))

    @property
    def argv(self) -> tuple[str, ...]:
        return (self.binary, *(word for arg in self.args for word in arg.words))

    @property
    def keys(self) -> frozenset[str]:
        return frozenset(arg.key for arg in self.args)

    def plus(self, *args: Arg) -> "CommandLine":
        return CommandLine(self.binary, self.args + args, self.env)

    def display(self) -> str:
        """One line to paste into a POSIX shell; shlex.split of it gives env + argv back."""
        prefix = [f"{k}={shlex.quote(v)}" for k, v in self.env]
        return " ".join(prefix + [shlex.join(self.argv)])


def spelled(binary: str, setting: str, value: object | None = None,
            build: "LlamaBuild | None" = None) -> tuple[Arg, ...]:
    """`setting` for `binary` as `build` takes it (flag_args), as one Arg; none when the
    binary (or, for an optional flag, the build) lacks it."""
    words = flag_args(binary, setting, value, build)
    return (Arg(read_key(words[0]), tuple(words)),) if words else ()


def spell(binary: str, settings: Iterable[tuple[str, object | None]],
          build: "LlamaBuild | None" = None) -> tuple[Arg, ...]:
    """Each (setting, value) in order, as `spelled`."""
    return tuple(arg for setting, value in settings for arg in spelled(binary, setting, value, build))


def bench_decode_test(n_gen: int, repetitions: int) -> tuple[Arg, ...]:
    """llama-bench's decode test alone: `n_gen` tokens from an empty context (no prompt
    test), `repetitions` times, as JSON (tools/llama-bench/llama-bench.cpp -p -n -r -o)."""
    return spell("llama-bench", [("n_prompt", 0), ("n_gen", n_gen), ("repetitions", repetitions), ("output", "json")])
