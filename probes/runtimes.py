"""Which runtimes this machine has: llama.cpp's programs on PATH (or in --llama-bin DIR)
and SGLang with kt-kernel in this Python.

- llama.cpp, ik_llama.cpp and the MoE expert-cache fork all build `llama-server`,
  `llama-cli` and `llama-bench`, and all print the same `--version` lines
  ("version: N (commit)" / "built with C for T" on stderr: ggml-org/llama.cpp
  common/arg.cpp, ikawrakow/ik_llama.cpp common/common.cpp), so COPE tells them apart by
  a marker in the version text when there is one, else by the flags `--help` lists:
  ik_llama.cpp's own `--run-time-repack` / `--smart-expert-reduction`, the fork's
  `--moe-cache-profile`.
- SGLang and kt-kernel are found without importing them (importing SGLang imports torch):
  importlib.util.find_spec for `sglang` and `kt_kernel`, versions from the installed
  package metadata (`sglang-kt`, `kt-kernel`); the official `sglang` distribution lacks
  the kt flags COPE exports, so only `sglang-kt` counts.
Nothing here raises: what cannot be run or read becomes a note.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable

from engine.core.records import record_dict
from engine.llamacpp.builds import LlamaBuild, build_from_help
from engine.llamacpp.llamacpp_flags import spelling_summary
from probes.bounded_run import run_capped
from probes.llama_help import read_help

LLAMA_PROGRAMS = ("llama-server", "llama-cli", "llama-bench")
IK_MARKERS = ("--run-time-repack", "--smart-expert-reduction")
FORK_MARKERS = ("--moe-cache-profile",)
# "version: 6500 (abc1234)" (a build from git: its build number and commit), or a version
# string with what the build knows in brackets ("version: 0.5.0-dev (build 0, commit
# unknown)", a build from a source archive such as the pinned llama-cpp-python sdist's).
_VERSION = re.compile(r"version:\s*([0-9][\w.+-]*)\s*\(([^)]*)\)")
VERSION_LINE_CHARS = 80


@dataclass(frozen=True)
class InstalledRuntime:
    name: str  # the registry's name: llama.cpp | ik_llama.cpp | fork | sglang-kt
    version: str
    where: str  # a folder or a module's location
    programs: tuple[str, ...] = ()  # what was found there
    how: str = ""  # how it was told apart
    build: LlamaBuild | None = None  # the flags its programs' --help lists (llama.cpp family)

    def to_dict(self) -> dict:
        # by hand: the flags' origin and spelling stand in for `build`, written only when there is one
        doc = {"name": self.name, "version": self.version, "where": self.where, "programs": list(self.programs),
               "how": self.how}
        if self.build is not None:
            doc["flags_read_from"] = self.build.origin
            doc["spelling"] = spelling_summary(self.build)
        return doc


@dataclass(frozen=True)
class RuntimeScan:
    found: tuple[InstalledRuntime, ...]
    notes: tuple[str, ...]  # what was looked for and not found, or could not be read

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.found)

    @property
    def builds(self) -> dict[str, LlamaBuild]:
        """The builds found, by registry name: what each runtime's commands are spelled for."""
        return {r.name: r.build for r in self.found if r.build is not None}

    def to_dict(self) -> dict:
        return record_dict(self)


Runner = Callable[[list[str], float], str]
HELP_MAX_BYTES = 4 * 2**20  # a --help or --version: llama-server's --help is about 40 KB


def _run(argv: list[str], timeout_s: float) -> str:
    """stdout and stderr of a short command; raises OSError or TimeoutExpired."""
    done = run_capped(argv, timeout_s=timeout_s, max_bytes=HELP_MAX_BYTES)  # what a runtime prints is untrusted
    return done.stdout + done.stderr


def _find_programs(llama_bin: str | None, path: str | None) -> dict[str, str]:
    if llama_bin is not None:
        search = llama_bin
    else:
        search = path if path is not None else os.environ.get("PATH", "")
    found = {}
    for program in LLAMA_PROGRAMS:
        hit = shutil.which(program, path=search)
        if hit:
            found[program] = hit
    return found


def _helps(programs: dict[str, str], run: Runner, timeout_s: float) -> dict[str, str]:
    """Each program's --help; one that cannot run is left out."""
    helps = {}
    for program, path in programs.items():
        try:
            helps[program] = read_help(path, run, timeout_s)
        except (OSError, subprocess.SubprocessError):
            continue
    return helps


def version_of(text: str) -> str:
    """What a llama.cpp-family `--version` says of the build: "build N (commit)" for a build
    number, the version and its bracket otherwise, else its first line as printed (cut);
    "version not reported" only when it printed nothing."""
    match = _VERSION.search(text)
    if match:
        number, said = match.groups()
        return f"build {number} ({said})" if number.isdigit() else f"{number} ({said})"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not first:
        return "version not reported"
    return first if len(first) <= VERSION_LINE_CHARS else first[:VERSION_LINE_CHARS - 3] + "..."


def _family_of(version_text: str, help_text: str, main: str) -> tuple[str, str]:
    """The registry name of a llama.cpp-family build and how it was told apart."""
    if "ik_llama" in version_text.lower():
        return "ik_llama.cpp", "its --version names ik_llama"
    if any(m in help_text for m in FORK_MARKERS):
        return "fork", f"{os.path.basename(main)} --help lists --moe-cache-profile"
    if any(m in help_text for m in IK_MARKERS):
        return "ik_llama.cpp", f"{os.path.basename(main)} --help lists ik_llama.cpp's --run-time-repack"
    return "llama.cpp", "the same --version format as llama.cpp and none of ik_llama.cpp's or the fork's flags in --help"


def _llama_family(programs: dict[str, str], run: Runner, timeout_s: float) -> tuple[InstalledRuntime | None, str]:
    main = programs.get("llama-server") or programs.get("llama-cli") or programs.get("llama-bench")
    assert main is not None
    try:
        version_text = run([main, "--version"], timeout_s)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{main} --version could not run ({exc})"
    version = version_of(version_text)
    helps = _helps(programs, run, timeout_s)
    main_name = os.path.basename(main)
    name, how = _family_of(version_text, helps.get(main_name, ""), main)
    where = os.path.dirname(main)
    build = build_from_help(name, helps, f"{', '.join(sorted(helps))} --help in {where}", where)
    note = "" if build is not None else f"{main} --help listed no options: commands are spelled for COPE's manifest"
    return InstalledRuntime(name, version, where, tuple(sorted(programs)), how, build), note


def _distribution_version(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return f"{name} {importlib.metadata.version(name)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _sglang_kt() -> tuple[InstalledRuntime | None, str]:
    sglang = importlib.util.find_spec("sglang")
    kt = importlib.util.find_spec("kt_kernel")
    if sglang is None or kt is None:
        missing = " and ".join(m for m, s in (("sglang", sglang), ("kt_kernel", kt)) if s is None)
        return None, f"SGLang + kt-kernel: {missing} not importable (pip install sglang-kt kt-kernel)"
    # Both distributions install the module `sglang`; only sglang-kt's parser has the kt
    # flags COPE exports (--kt-gpu-experts-ratio, --kt-expert-placement-strategy), as
    # kt-kernel's README says, so the official one does not count.
    fork = _distribution_version(("sglang-kt",))
    if fork is None:
        official = _distribution_version(("sglang",))
        which = f"{official} is the official distribution" if official else "no package metadata says which"
        return None, (f"SGLang + kt-kernel: the sglang module is not sglang-kt ({which}); the kt flags COPE "
                      "exports are sglang-kt's: pip install sglang-kt")
    versions = [fork, _distribution_version(("kt-kernel", "kt_kernel")) or "kt_kernel (no package metadata)"]
    where = os.path.dirname(os.path.dirname(sglang.origin or "")) or "this Python"
    return InstalledRuntime("sglang-kt", ", ".join(versions), where, (), "sglang-kt and kt_kernel importable"), ""


def detect_runtimes(llama_bin: str | None = None, *, path: str | None = None, run: Runner = _run,
                    timeout_s: float = 10.0) -> RuntimeScan:
    """The runtimes found, each once; `llama_bin` (a folder) replaces PATH for llama.cpp's programs."""
    found: list[InstalledRuntime] = []
    notes: list[str] = []
    programs = _find_programs(llama_bin, path)
    where = f"in {llama_bin}" if llama_bin is not None else "on PATH"
    if llama_bin is not None and not os.path.isdir(llama_bin):
        notes.append(f"--llama-bin {llama_bin}: not a folder")
    elif not programs:
        notes.append(f"llama.cpp: no {', '.join(LLAMA_PROGRAMS)} {where}")
    else:
        runtime, note = _llama_family(programs, run, timeout_s)
        if runtime is not None:
            found.append(runtime)
        if note:
            notes.append(note)
    runtime, note = _sglang_kt()
    if runtime is not None:
        found.append(runtime)
    if note:
        notes.append(note)
    return RuntimeScan(tuple(found), tuple(notes))


def bench_build(bench: str, *, run: Runner = _run, timeout_s: float = 10.0) -> LlamaBuild | None:
    """The build of one llama-bench binary (cope verify and cope calibrate run it), or
    None when its --version or --help cannot be read."""
    runtime, _ = _llama_family({"llama-bench": bench}, run, timeout_s)
    return None if runtime is None else runtime.build
