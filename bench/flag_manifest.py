"""Extract the command-line flags a runtime accepts from its source at one commit, and
write them as a flag manifest (JSON): the facts COPE's exports are checked against for
runtimes (tests/test_flag_manifests.py), and what COPE spells commands for when no build is
found (engine/llamacpp/builds.py).

    python bench/flag_manifest.py --git-dir CLONE/.git --commit SHA --runtime fork \\
        --repository https://github.com/thecodacus/llama.cpp --branch fable5/moe-cache-readme \\
        --out assets/runtime_flags/fork.json

Files are read with `git show COMMIT:PATH` (a bare clone is enough; nothing is checked
out or built). What is parsed, by the kind of source found at the commit:

- llama.cpp (common/arg.cpp exists): every `add_opt(common_arg(...))` call. Its first
  brace list holds the option names, a second brace list the negated names (`--mmap`,
  `--no-mmap`: a switch); a value hint string before the help text means the option
  takes a value. `.set_examples({...})` / `.set_excludes({...})` (brace lists or a named
  `static std::initializer_list`) say which programs parse it, as common_params_parser_init
  filters them: an option is in a program when its examples hold the program's
  LLAMA_EXAMPLE_* or LLAMA_EXAMPLE_COMMON (the default) and its excludes do not. Each
  program's LLAMA_EXAMPLE_* is read from its main source (tools/server/server.cpp's
  `common_params_parse(argc, argv, params, LLAMA_EXAMPLE_SERVER)`). `.set_env("...")` names
  the variable that sets the option.
- ik_llama.cpp (no common/arg.cpp; common/common.cpp has gpt_params_find_arg): every
  `if (arg == "-x" || arg == "--y")` in that function; llama-server and llama-cli both
  parse with it, so they get the same options (plus the logging options it hands to
  common/log.h's log_param_*_parse). An option whose block reads the next
  argument (CHECK_ARG, `++i >= argc`, `argv[++i]`) takes a value.
- llama-bench (tools/llama-bench/llama-bench.cpp or examples/llama-bench/llama-bench.cpp):
  every `arg == "..."` condition in parse_cmd_params, valued as above.
- SGLang (python/sglang/srt/server_args.py exists): every `parser.add_argument(...)` in
  ServerArgs.add_cli_args, read with Python's ast (nothing is imported): the option
  strings, `choices` (a literal list or a module-level name; anything computed is kept as
  its source text, a string, not a list), whether it takes a value
  (not for store_true/store_false/store_const/count and actions with nargs=0) and its
  `default` (literal, or a ServerArgs field default), for `python -m sglang.launch_server`.

Options whose handler only says they were removed (`arg_removed(...)`,
`common_speculative_legacy_option_error`) go to "rejected", not "options"; those whose
help or handler says "deprecated" are also listed under "deprecated".

Environment variables: every `getenv("NAME")` / `get_env("NAME")` literal in the
C/C++/CUDA sources of the commit (with file:line), plus arg.cpp's `.set_env` names; for SGLang every
`os.environ.get("NAME")`/`os.getenv`/`get_*_env_var("NAME")` literal under python/sglang/srt
and the `NAME = Env...(...)` fields of python/sglang/srt/environ.py.

Limits (regexes over source text, not a compiler): preprocessor conditions (#ifdef) and
runtime conditions (`if (ex == ...)`, `llama_supports_rpc() && ...`) are ignored, so an
option compiled out of some builds is still listed; options built from computed names
(string concatenation, f-strings) are not found and are listed under "unparsed" where
seen; a value's accepted words (`-fa on|off|auto`) are not read except SGLang's
`choices`.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

PROGRAM_SOURCES = {  # where each program's main() lives, newest layout first
    "llama-server": ("tools/server/server.cpp", "examples/server/server.cpp"),
    "llama-cli": ("tools/cli/cli.cpp", "tools/main/main.cpp", "examples/main/main.cpp"),
}
BENCH_SOURCES = ("tools/llama-bench/llama-bench.cpp", "examples/llama-bench/llama-bench.cpp")
SGLANG_ARGS = "python/sglang/srt/server_args.py"
SGLANG_PROGRAM = "sglang.launch_server"  # run as `python -m sglang.launch_server`
LICENCE_FILES = ("LICENSE", "LICENSE.md", "LICENSE.txt", "COPYING")
REJECTED = re.compile(r"\barg_removed\s*\(|legacy_option_error|has been removed")
DEPRECATED = re.compile(r"deprecated", re.IGNORECASE)
# A block that reads the next argument: CHECK_ARG (ik: `if (++i >= argc) ...`), `++i >= argc`, argv[++i].
VALUED_BLOCK = re.compile(r"\bCHECK_ARG\b|\+\+i\s*[<>]=?\s*argc|argv\s*\[\s*\+\+i\s*\]")
FLAG_ACTIONS = {"store_true", "store_false", "store_const", "append_const", "count", "help", "version"}


# --- reading the repository ----------------------------------------------------------

def git(git_dir: str, *args: str) -> str:
    done = subprocess.run(["git", "--git-dir", git_dir, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def show(git_dir: str, commit: str, path: str) -> str | None:
    """The file at the commit, or None when the commit has no such file."""
    done = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{path}"],
                          capture_output=True, text=True, errors="replace")
    return done.stdout if done.returncode == 0 else None


def first_present(git_dir: str, commit: str, paths: tuple[str, ...]) -> tuple[str, str] | None:
    for path in paths:
        text = show(git_dir, commit, path)
        if text is not None:
            return path, text
    return None


def grep(git_dir: str, commit: str, pattern: str, globs: tuple[str, ...]) -> list[tuple[str, int, str]]:
    """(path, line, text) of every line matching the extended regex; files git cannot
    read (large blobs absent from a partial clone) are passed over."""
    done = subprocess.run(["git", "--git-dir", git_dir, "grep", "-n", "-I", "-E", pattern, commit, "--", *globs],
                          capture_output=True, text=True, errors="replace")
    out = []
    for line in done.stdout.splitlines():
        _, path, number, text = line.split(":", 3)  # COMMIT:path:line:text
        out.append((path, int(number), text))
    return out


def licence_id(text: str) -> str:
    """The SPDX id of a licence file's text (the licences these projects use)."""
    if "Permission is hereby granted, free of charge" in text:
        return "MIT"
    if "Apache License" in text and "Version 2.0" in text:
        return "Apache-2.0"
    if "GNU GENERAL PUBLIC LICENSE" in text and "Version 3" in text:
        return "GPL-3.0"
    raise SystemExit("licence file not recognised: add its SPDX id to licence_id")


# --- C++ text helpers ----------------------------------------------------------------

def strip_comments(src: str) -> str:
    """C++ source with comments blanked (newlines kept, so offsets and lines still match)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c in "\"'":
            j = skip_literal(src, i)
            out.append(src[i:j])
            i = j
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def skip_literal(src: str, i: int) -> int:
    """The index after the string or char literal starting at i (raw strings R"(...)" too)."""
    quote = src[i]
    if quote == '"' and i > 0 and src[i - 1] == "R":
        m = re.match(r'"([^(]*)\(', src[i:])
        if m:
            end = src.find(")" + m.group(1) + '"', i)
            return len(src) if end < 0 else end + len(m.group(1)) + 2
    j = i + 1
    while j < len(src) and src[j] != quote:
        j += 2 if src[j] == "\\" else 1
    return j + 1


def closing(src: str, i: int) -> int:
    """The index of the bracket closing the one at i, literals skipped."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = [pairs[src[i]]]
    j = i + 1
    while j < len(src) and stack:
        c = src[j]
        if c in "\"'":
            j = skip_literal(src, j)
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif c == stack[-1]:
            stack.pop()
        j += 1
    return j - 1


def top_level_parts(text: str) -> list[str]:
    """`text` split at commas outside brackets and literals."""
    parts, depth, start, j = [], 0, 0, 0
    while j < len(text):
        c = text[j]
        if c in "\"'":
            j = skip_literal(text, j)
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:j].strip())
            start = j + 1
        j += 1
    parts.append(text[start:].strip())
    return parts


def literals(text: str) -> list[str]:
    return re.findall(r'"((?:[^"\\]|\\.)*)"', text)


def line_of(src: str, offset: int) -> int:
    return src.count("\n", 0, offset) + 1


# --- what one option is ----------------------------------------------------------------

@dataclass
class Option:
    names: list[str]
    valued: bool
    line: int
    examples: set[str] = field(default_factory=lambda: {"LLAMA_EXAMPLE_COMMON"})
    excludes: set[str] = field(default_factory=set)
    env: str | None = None
    rejected: bool = False
    deprecated: bool = False
    choices: list | None = None
    default: object = None

    def in_example(self, ex: str | None) -> bool:
        """common_params_parser_init's filter (ex None: a parser with no examples)."""
        if ex is None:
            return True
        return (ex in self.examples or "LLAMA_EXAMPLE_COMMON" in self.examples) and ex not in self.excludes


# --- llama.cpp common/arg.cpp ------------------------------------------------------------

def named_example_lists(src: str) -> dict[str, set[str]]:
    """`static std::initializer_list<enum llama_example> NAME = {...};` definitions."""
    found = {}
    for m in re.finditer(r"initializer_list\s*<\s*enum\s+llama_example\s*>\s*(\w+)\s*=\s*\{([^}]*)\}", src):
        found[m.group(1)] = set(re.findall(r"LLAMA_EXAMPLE_\w+", m.group(2)))
    return found


def chain_examples(chain: str, method: str, named: dict[str, set[str]]) -> set[str] | None:
    m = re.search(rf"\.{method}\s*\(\s*(\{{[^}}]*\}}|\w+)\s*\)", chain)
    if not m:
        return None
    arg = m.group(1)
    return set(re.findall(r"LLAMA_EXAMPLE_\w+", arg)) if arg.startswith("{") else set(named.get(arg, ()))


def arg_cpp_options(src: str) -> tuple[list[Option], list[int]]:
    """Every add_opt(common_arg(...)) of common/arg.cpp; also the lines of add_opt calls
    whose names could not be read."""
    src = strip_comments(src)
    named = named_example_lists(src)
    options, unparsed = [], []
    for m in re.finditer(r"\badd_opt\s*\(\s*common_arg\s*\(", src):
        call_open = m.end() - 1
        call_close = closing(src, call_open)
        parts = top_level_parts(src[call_open + 1:call_close])
        chain = src[call_close + 1:closing(src, src.index("(", m.start()))]  # .set_examples(...) etc.
        if not parts or not parts[0].startswith("{"):
            unparsed.append(line_of(src, m.start()))
            continue
        names = literals(parts[0])
        negated = literals(parts[1]) if len(parts) > 1 and parts[1].startswith("{") else []
        handler = next((i for i, p in enumerate(parts) if p.startswith("[")), len(parts))
        # (names, help, handler): a switch; (names, hint, help, handler) or
        # (names, hint, hint2, help, handler): takes a value; (names, negated, ...): a switch.
        valued = not negated and handler >= 3
        body = " ".join(parts[1:])
        env = re.search(r'\.set_env\s*\(\s*"([^"]+)"', chain)
        opt = Option(names + negated, valued, line_of(src, m.start()),
                     env=env.group(1) if env else None,
                     rejected=bool(REJECTED.search(body)), deprecated=bool(DEPRECATED.search(body)))
        examples = chain_examples(chain, "set_examples", named)
        if examples is not None:
            opt.examples = examples
        excludes = chain_examples(chain, "set_excludes", named)
        if excludes is not None:
            opt.excludes = excludes
        options.append(opt)
    return options, unparsed


def program_example(src: str) -> str | None:
    """The LLAMA_EXAMPLE_* a program's main() passes to common_params_parse."""
    m = re.search(r"common_params_parse\s*\([^;]*?(LLAMA_EXAMPLE_\w+)", src)
    return m.group(1) if m else None


# --- `if (arg == "...")` parsers (ik_llama.cpp's common.cpp, llama-bench) ------------------

def function_body(src: str, name: str) -> tuple[str, int]:
    """The body of the function `name` (its definition, not a call) and its offset."""
    for m in re.finditer(rf"\b{re.escape(name)}\s*\(", src):
        paren = m.end() - 1
        after = closing(src, paren) + 1
        rest = src[after:after + 200]
        brace = re.match(r"\s*(?:const\s*)?\{", rest)
        if brace:
            start = after + brace.end() - 1
            return src[start:closing(src, start) + 1], start
    raise SystemExit(f"no definition of {name} found")


def if_arg_options(src: str, function: str) -> list[Option]:
    """Every `if (... arg == "-x" ...) { body }` in `function`."""
    src = strip_comments(src)
    body, offset = function_body(src, function)
    options = []
    for m in re.finditer(r"\bif\s*\(", body):
        cond_open = m.end() - 1
        cond_close = closing(body, cond_open)
        names = re.findall(r'\barg\s*==\s*"([^"]+)"', body[cond_open:cond_close])
        if not names:
            continue
        brace = re.match(r"\s*\{", body[cond_close + 1:])
        block = body[cond_close + 1:closing(body, cond_close + 1 + brace.end() - 1) + 1] if brace else ""
        options.append(Option(names, bool(VALUED_BLOCK.search(block)), line_of(src, offset + m.start()),
                              rejected=bool(REJECTED.search(block)), deprecated=bool(DEPRECATED.search(block))))
    return options


def log_h_options(src: str) -> list[Option]:
    """ik_llama.cpp's logging options, which gpt_params_find_arg hands to common/log.h:
    log_param_single_parse (switches) and log_param_pair_parse (a value follows)."""
    src = strip_comments(src)
    options = []
    for function, valued in (("log_param_single_parse", False), ("log_param_pair_parse", True)):
        body, offset = function_body(src, function)
        for m in re.finditer(r'\bparam\s*==\s*"([^"]+)"', body):
            options.append(Option([m.group(1)], valued, line_of(src, offset + m.start())))
    return options


# --- SGLang server_args.py ------------------------------------------------------------------

def class_defaults(tree: ast.Module, name: str) -> dict[str, object]:
    """Literal defaults of a dataclass's fields (`field: T = value`)."""
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                    try:
                        out[item.target.id] = ast.literal_eval(item.value)
                    except ValueError:
                        out[item.target.id] = ast.unparse(item.value)
    return out


def module_constants(tree: ast.Module) -> dict[str, object]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def _value(node: ast.expr, constants: dict, fields: dict) -> object:
    """A keyword's value: a literal, a module constant, ServerArgs.<field>'s default, or its source."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ServerArgs":
        return fields.get(node.attr, ast.unparse(node))
    return ast.unparse(node)


def sglang_options(src: str) -> tuple[list[Option], list[int]]:
    tree = ast.parse(src)
    constants, fields = module_constants(tree), class_defaults(tree, "ServerArgs")
    add_cli_args = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    nargs_zero_actions = {c.name for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and "nargs=0" in ast.unparse(c)}
    # argparse's own -h/--help: prepare_server_args builds a plain argparse.ArgumentParser().
    options, unparsed = [Option(["-h", "--help"], False, add_cli_args.lineno, examples=set())], []
    for call in ast.walk(add_cli_args):
        if not isinstance(call, ast.Call) or getattr(call.func, "attr", None) != "add_argument":
            continue
        names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if len(names) != len(call.args) or not names:
            unparsed.append(call.lineno)
            continue
        kw = {k.arg: k.value for k in call.keywords if k.arg}
        action = kw.get("action")
        action_name = ast.unparse(action) if action is not None else ""
        action_value = action.value if isinstance(action, ast.Constant) else None
        valued = action_value not in FLAG_ACTIONS and action_name not in nargs_zero_actions
        if "nargs" in kw and isinstance(kw["nargs"], ast.Constant) and kw["nargs"].value == 0:
            valued = False
        choices = _value(kw["choices"], constants, fields) if "choices" in kw else None
        default = _value(kw["default"], constants, fields) if "default" in kw else None
        help_text = ast.unparse(kw["help"]) if "help" in kw else ""
        options.append(Option(names, valued, call.lineno, examples=set(),
                              deprecated=bool(DEPRECATED.search(action_name + help_text)),
                              choices=list(choices) if isinstance(choices, (list, tuple)) else choices,
                              default=default))
    return options, unparsed


# --- environment variables ----------------------------------------------------------------

def cpp_env(git_dir: str, commit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    globs = ("*.c", "*.cpp", "*.cu", "*.cuh", "*.h", "*.m")
    for path, number, text in grep(git_dir, commit, r'get_?env\s*\(\s*"', globs):
        for name in set(re.findall(r'get_?env\s*\(\s*"([A-Za-z_][A-Za-z0-9_]*)"', text)):
            found.setdefault(name, []).append(f"{path}:{number}")
    return found


PY_ENV_CALL = (r'(?:environ\.get|getenv|get_(?:bool|int|float|str)_env_var|environ\[)'
               r'\s*\(?\s*["\']([A-Z][A-Z0-9_]+)["\']')


def python_env(git_dir: str, commit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path, number, text in grep(git_dir, commit, r"environ|getenv|_env_var", ("python/sglang/srt/*.py",)):
        for name in set(re.findall(PY_ENV_CALL, text)):
            found.setdefault(name, []).append(f"{path}:{number}")
    environ = show(git_dir, commit, "python/sglang/srt/environ.py") or ""
    for number, text in enumerate(environ.splitlines(), 1):
        m = re.match(r"\s+([A-Z][A-Z0-9_]+)\s*=\s*Env\w*\(", text)
        if m:
            found.setdefault(m.group(1), []).append(f"python/sglang/srt/environ.py:{number}")
    return found


# --- the manifest -------------------------------------------------------------------------

def jsonable(value: object) -> object:
    """A default or choice as JSON holds it (sets sorted into lists, other objects as text)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    return repr(value)


def program_entry(options: list[Option], ex: str | None = None, *, source: str) -> dict:
    """One program's options (accepted spellings), those that take a value, and the rest."""
    chosen = [o for o in options if o.in_example(ex)]
    accepted = [o for o in chosen if not o.rejected]
    entry: dict = {
        "source": source,
        "options": sorted({n for o in accepted for n in o.names}),
        "valued": sorted({n for o in accepted if o.valued for n in o.names}),
        "deprecated": sorted({n for o in accepted if o.deprecated for n in o.names}),
        "rejected": sorted({n for o in chosen if o.rejected for n in o.names}),
    }
    choices = {o.names[0]: o.choices for o in accepted if o.choices is not None}
    if choices:
        entry["choices"] = {n: jsonable(choices[n]) for n in sorted(choices)}
    if any(o.default is not None for o in accepted):
        entry["defaults"] = {o.names[0]: jsonable(o.default) for o in sorted(accepted, key=lambda o: o.names[0])
                             if o.default is not None}
    if ex:
        entry["example"] = ex
    return entry


def llama_programs(git_dir: str, commit: str, sources: list[str], env: dict) -> tuple[dict, list[int]]:
    """llama-server and llama-cli from common/arg.cpp (llama.cpp) or gpt_params_find_arg
    (ik_llama.cpp)."""
    programs: dict = {}
    unparsed: list[int] = []
    arg_cpp = show(git_dir, commit, "common/arg.cpp")
    if arg_cpp is not None:
        sources.append("common/arg.cpp")
        options, unparsed = arg_cpp_options(arg_cpp)
        for opt in options:
            if opt.env:
                env.setdefault(opt.env, []).append(f"common/arg.cpp:{opt.line} (set_env of {opt.names[-1]})")
        for program, paths in PROGRAM_SOURCES.items():
            found = first_present(git_dir, commit, paths)
            if found is None:
                continue
            sources.append(found[0])
            ex = program_example(found[1])
            if ex is None:
                raise SystemExit(f"{found[0]}: no common_params_parse(..., LLAMA_EXAMPLE_*) found")
            programs[program] = program_entry(options, ex, source="common/arg.cpp")
        return programs, unparsed
    common = show(git_dir, commit, "common/common.cpp")
    if common is None or "gpt_params_find_arg" not in common:
        raise SystemExit("neither common/arg.cpp nor common/common.cpp gpt_params_find_arg at this commit")
    sources.append("common/common.cpp")
    options = if_arg_options(common, "gpt_params_find_arg")
    log_h = show(git_dir, commit, "common/log.h")
    if log_h is not None and "log_param_single_parse" in common:
        sources.append("common/log.h")
        options += log_h_options(log_h)
    for program, paths in PROGRAM_SOURCES.items():
        found = first_present(git_dir, commit, paths)
        if found is not None and "gpt_params_parse" in found[1]:
            sources.append(found[0])
            programs[program] = program_entry(options, source="common/common.cpp gpt_params_find_arg")
    return programs, unparsed


def bench_program(git_dir: str, commit: str, sources: list[str]) -> dict | None:
    found = first_present(git_dir, commit, BENCH_SOURCES)
    if found is None:
        return None
    sources.append(found[0])
    return program_entry(if_arg_options(found[1], "parse_cmd_params"), source=f"{found[0]} parse_cmd_params")


def manifest(git_dir: str, commit: str, runtime: str, repository: str, branch: str | None) -> dict:
    commit = git(git_dir, "rev-parse", "--verify", f"{commit}^{{commit}}").strip()
    if branch:
        check = subprocess.run(["git", "--git-dir", git_dir, "merge-base", "--is-ancestor", commit,
                                f"refs/heads/{branch}"], capture_output=True)
        if check.returncode != 0:
            raise SystemExit(f"{commit} is not on branch {branch}")
    licence = first_present(git_dir, commit, LICENCE_FILES)
    if licence is None:
        raise SystemExit("no licence file at this commit")
    sources: list[str] = []
    unparsed: dict[str, list[int]] = {}
    server_args = show(git_dir, commit, SGLANG_ARGS)
    if server_args is not None:
        sources.append(SGLANG_ARGS)
        options, lines = sglang_options(server_args)
        programs = {SGLANG_PROGRAM: program_entry(options, source=f"{SGLANG_ARGS} ServerArgs.add_cli_args")}
        env = python_env(git_dir, commit)
        env_from = "os.environ.get/os.getenv/get_*_env_var literals under python/sglang/srt, environ.py's Env fields"
        if lines:
            unparsed[SGLANG_ARGS] = lines
    else:
        env = cpp_env(git_dir, commit)
        env_from = "getenv/get_env literals in the *.c, *.cpp, *.cu, *.cuh, *.h, *.m files, arg.cpp's set_env names"
        programs, lines = llama_programs(git_dir, commit, sources, env)
        if lines:
            unparsed["common/arg.cpp"] = lines
        bench = bench_program(git_dir, commit, sources)
        if bench is not None:
            programs["llama-bench"] = bench
    doc = {
        "runtime": runtime,
        "repository": repository,
        "branch": branch or "",
        "commit": commit,
        "date": git(git_dir, "show", "-s", "--format=%cI", commit).strip(),
        "licence": licence_id(licence[1]),
        "licence_file": licence[0],
        "sources": sources,
        "extracted_by": "bench/flag_manifest.py",
        "programs": programs,
        "env": sorted(env),
        "env_from": env_from,
        "env_read_at": {name: env[name] for name in sorted(env)},
    }
    if unparsed:
        doc["unparsed"] = unparsed
    return doc


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--git-dir", required=True,
                        help="the upstream repository's git directory (a bare clone is enough)")
    parser.add_argument("--commit", required=True, help="the commit (or a ref naming it)")
    parser.add_argument("--runtime", required=True,
                        help="COPE's name of the runtime: ik_llama.cpp, fork, sglang-kt, ...")
    parser.add_argument("--repository", required=True, help="the repository's address, written into the manifest")
    parser.add_argument("--branch", help="the branch the commit is on (checked)")
    parser.add_argument("--obtained", help="where the commit came from, when no branch can be checked "
                        "(e.g. the source distribution that vendors it)")
    parser.add_argument("--out", required=True, help="the JSON file to write")
    args = parser.parse_args(argv)
    doc = manifest(args.git_dir, args.commit, args.runtime, args.repository, args.branch)
    if args.obtained:
        doc["obtained"] = args.obtained
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    counts = ", ".join(f"{p}: {len(e['options'])}" for p, e in doc["programs"].items())
    print(f"{args.out}: {doc['repository']} {doc['commit'][:12]} ({doc['date']}), {counts}; {len(doc['env'])} env",
          file=sys.stderr)


if __name__ == "__main__":
    main()
