"""What one build of a llama.cpp-family runtime accepts on its command line.

llama.cpp's flags change between builds and its version number cannot be relied on (a
build from a source archive says "0.5.0-dev (build 0, commit unknown)"), so COPE spells
every command for the flags the build itself lists:

- a build found on this machine (PATH or --llama-bin): the options its programs' `--help`
  lists (probes/runtimes.py reads it once per binary, cached by path and mtime);
- none found: the runtime's flag manifest, shipped in assets/runtime_flags/, extracted
  from its upstream source at a named commit (bench/flag_manifest.py): for stock llama.cpp
  the current release, for ik_llama.cpp and the fork the commits checked.

A `LlamaBuild` holds, per program, the option spellings accepted and those that take a
value (llama.cpp's `-fa` took none before it took on|off|auto).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Mapping

from engine.core.assets_io import load_asset_json

# An option at the start of a help line: "-lm,   --load-mode MODE   ...", "  -mmp, --mmap <0|1>",
# "  -ot --override-tensor <pattern>=<buffer>" (llama-bench names some without a comma).
_HELP_LINE = re.compile(r"^\s{0,8}(-{1,2}[A-Za-z][\w.+-]*(?:(?:\s*,\s*|\s+)-{1,2}[A-Za-z][\w.+-]*)*)(.*)$")
_OPTION = re.compile(r"-{1,2}[A-Za-z][\w.+-]*")
# What follows the names: a value hint (MODE, N, <0|1>, [on|off|auto], MiB0,MiB1) before the text:
# names, one space (or '='), the hint; two or more spaces start the description instead.
_VALUE_HINT = re.compile(r"^(?:[ =]\S|\s*[<\[{])")


@dataclass(frozen=True)
class ProgramFlags:
    """The options one program (llama-server, llama-bench, ...) accepts."""

    options: frozenset[str]
    valued: frozenset[str]  # those that take a value; empty: not known

    def takes(self, option: str) -> bool:
        return option in self.options

    def takes_value(self, option: str) -> bool | None:
        """Whether `option` takes a value; None when the build does not say."""
        if option not in self.options or not self.valued:
            return None
        return option in self.valued


@dataclass(frozen=True)
class LlamaBuild:
    """The flags of one build, by program; `origin` says where they were read."""

    runtime: str  # the registry's name: llama.cpp | ik_llama.cpp | fork
    programs: tuple[tuple[str, ProgramFlags], ...]
    origin: str  # "llama-server --help in /usr/local/bin" or "ggml-org/llama.cpp at 0c1e570 (manifest)"
    detected: bool  # read from a build on this machine (False: the manifest COPE ships)
    folder: str = ""  # where its programs were found ("" for a manifest): a command names them there

    def path_of(self, binary: str) -> str | None:
        """Where this build's `binary` is, when it was found here (its --help read); None
        otherwise."""
        if not (self.detected and self.folder) or binary not in dict(self.programs):
            return None
        return os.path.join(self.folder, binary)

    def program(self, binary: str) -> ProgramFlags | None:
        """The flags of `binary`; a program whose help was not read shares llama-server's
        (llama-cli parses common/arg.cpp too)."""
        found = dict(self.programs)
        if binary in found:
            return found[binary]
        if binary != "llama-bench":
            return found.get("llama-server") or found.get("llama-cli")
        return None

    def takes(self, binary: str, option: str) -> bool:
        flags = self.program(binary)
        return flags is not None and flags.takes(option)

    def rejected(self, binary: str, argv: Iterable[str]) -> list[str]:
        """The options of `argv` this build's `binary` does not list."""
        flags = self.program(binary)
        if flags is None:
            return []
        return [w for w in argv if _OPTION.fullmatch(w) and not flags.takes(w.split("=", 1)[0])]


def flags_from_help(text: str) -> ProgramFlags:
    """The options a program's `--help` lists (common/arg.cpp's usage and llama-bench's
    print_usage both start an option's line with its names, then its value hint)."""
    options: set[str] = set()
    valued: set[str] = set()
    for line in text.splitlines():
        match = _HELP_LINE.match(line)
        if not match:
            continue
        names = _OPTION.findall(match.group(1))
        options.update(names)
        if _VALUE_HINT.match(match.group(2)):
            valued.update(names)
    return ProgramFlags(frozenset(options), frozenset(valued))


def build_from_help(runtime: str, helps: Mapping[str, str], origin: str, folder: str = "") -> LlamaBuild | None:
    """The build whose programs printed `helps` ({program: --help text}); None when no
    help listed any option (a program that would not run)."""
    programs = tuple((name, flags_from_help(text)) for name, text in sorted(helps.items()))
    programs = tuple((name, flags) for name, flags in programs if flags.options)
    if not programs:
        return None
    return LlamaBuild(runtime, programs, origin, detected=True, folder=folder)


def build_from_manifest(doc: Mapping) -> LlamaBuild:
    """A build from a flag manifest (bench/flag_manifest.py's JSON)."""
    programs = tuple(
        (name, ProgramFlags(frozenset(flags["options"]), frozenset(flags.get("valued", ()))))
        for name, flags in sorted(doc["programs"].items())
    )
    origin = f"{doc['repository'].removeprefix('https://github.com/')} at {doc['commit'][:9]}"
    if doc.get("branch"):
        origin += f" ({doc['branch']})"
    return LlamaBuild(doc["runtime"], programs, origin, detected=False)


MANIFESTS = {"llama.cpp": "llama.cpp.json", "ik_llama.cpp": "ik_llama.cpp.json", "fork": "fork.json",
             "sglang-kt": "sglang-kt.json"}


@lru_cache(maxsize=None)
def manifest(runtime: str) -> Mapping:
    """The flag manifest COPE ships for `runtime` (assets/runtime_flags/)."""
    return load_asset_json(f"runtime_flags/{MANIFESTS[runtime]}")


@lru_cache(maxsize=None)
def shipped_build(runtime: str) -> LlamaBuild:
    """The build COPE spells for when none is found: the manifest's commit."""
    return build_from_manifest(manifest(runtime))
