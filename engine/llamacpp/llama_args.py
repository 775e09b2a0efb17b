"""Read a llama.cpp command line (llama-server, llama-cli, llama-bench) into what COPE prices.

Only the flags that decide where experts live and how decode runs are understood; every
other flag is listed back, never silently dropped. Both `--flag value` and
`--flag=value` are accepted, and long flags with '_' for '-' (llama.cpp folds them too).
Flag names: common/arg.cpp and tools/llama-bench/llama-bench.cpp, in the one flag table
(engine/llamacpp/llamacpp_flags.py) COPE's own commands are spelled from too. A command COPE
built is read from its value (`read_command_line`), never from its printed words.

The expert placement follows llama.cpp: `-ot`, `--cpu-moe` and `--n-cpu-moe` append
tensor-buffer overrides in the order given, the first pattern that matches a tensor name
anywhere (std::regex_search) decides its buffer. The patterns are matched by
engine/llamacpp/ecma_regex.py (the ECMAScript subset, in linear time: a pattern such as `(.+)+X`
cannot hang COPE), and every number is read as llama.cpp reads it: a 32-bit int.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

from engine.core.errors import CopeInputError
from engine.cost.analytic_cost import KV_TYPE_BYTES
from engine.llamacpp.command_line import CommandLine
from engine.llamacpp.llama_repeats import resolve_values
from engine.llamacpp.llamacpp_flags import EXPS_REGEX_TAIL, FLAG_TABLE, OFFLOAD_ENV, READ_NAMES, Flag
from engine.llamacpp.tensor_overrides import (
    GPU_BUFFER,
    VISIBLE_DEVICES,
    WHERE,
    check_patterns,
    is_gpu_buffer,
    n_cpu_moe_overrides,
    parse_overrides,
)
from engine.models.model import ModelSpec

INT_MAX = 2**31 - 1  # llama.cpp reads numbers with std::stoi: a 32-bit int


# What we understand: the flag table's settings that have names (switches: takes_value False).
ARG_TABLE: tuple[Flag, ...] = tuple(f for f in FLAG_TABLE if f.names)
_READ_SETTINGS = {f.setting: f for f in ARG_TABLE}
# Programs of llama.cpp and its forks that take these flags -> the one whose flags they share
# (tools/; ik_llama.cpp adds llama-sweep-bench; `main` and `server` are the names before 2024).
LLAMA_PROGRAMS = {
    "llama-server": "llama-server", "llama-cli": "llama-cli", "llama-bench": "llama-bench",
    "llama-mtmd-cli": "llama-cli", "llama-run": "llama-cli", "llama-completion": "llama-cli",
    "llama-sweep-bench": "llama-server", "main": "llama-cli", "server": "llama-server",
}
COPYING_LOAD_MODES = ("none", "dio")  # -lm values that do not map the file
_OPTIONAL_VALUE = ("flash_attn", "repack", "no_kv_offload")  # a switch in some tools, a value in others
_FLAG_SHAPE = re.compile(r"^--?[A-Za-z]")
# Words after a switch that read as its value (`--cpu-moe 0`): llama.cpp refuses them.
_SWITCH_LOOKALIKES = frozenset({"0", "1", "on", "off", "true", "false", "yes", "no", "enabled", "disabled"})


@dataclass(frozen=True)
class LlamaCommand:
    binary: str  # as typed
    tool: str  # llama-server | llama-cli | llama-bench (LLAMA_PROGRAMS: whose flags it takes)
    model_path: str | None  # -m
    gpu_layers: str | None
    threads: int | None
    context: int | None
    flash_attn: str | None
    overrides: tuple[tuple[str, str, str], ...]  # (pattern, buffer, the flag it came from), in order
    op_offload_min_batch: int | None  # from GGML_OP_OFFLOAD_MIN_BATCH
    no_op_offload: bool
    no_mmap: bool
    fit: str | None
    n_depth: int  # llama-bench -d: the KV depth its decode test starts from (0 elsewhere)
    n_gen: int | None  # llama-bench -n (the decode test's tokens); llama-cli -n
    n_cpu_moe: int | None  # --n-cpu-moe as given (its overrides stop at LLAMA_MAX_LAYERS)
    kv_bytes_per_element: float  # the KV cache's, from -ctk/-ctv (their mean when they differ)
    multi_gpu: str | None  # why the command uses more than one GPU (None: one at most)
    unknown: tuple[str, ...]  # flags (with their value, if any) we do not model
    notes: tuple[str, ...]
    n_prompt: int | None = None  # llama-bench -p: its prompt-processing test's tokens (0: none)
    ubatch: int | None = None  # -ub
    batch: int | None = None  # -b
    threads_batch: int | None = None  # -tb
    repack: bool = False  # ik_llama.cpp -rtr: CPU experts repacked into CPU-only types
    no_kv_offload: bool = False  # -nkvo: the KV cache in host memory (attention on the CPU)
    # Every argument as typed, grouped by flag in order: (key, words), the key the setting
    # (FLAG_TABLE) of a flag COPE reads, else the flag's name, "" for a stray word; and the
    # VAR=value words before the program. What a command of COPE's keeps of the user's
    # (engine/advice/command_flags.py: carry_over).
    args: tuple[tuple[str, tuple[str, ...]], ...] = ()
    env_words: tuple[tuple[str, str], ...] = ()
    # Without -m: the model's name as -hf/-hff/-mu give it (a path-like name whose parts
    # say the model and quantization, engine/models/model_names.py), and those flags as typed.
    model_name: str | None = None
    model_source: str = ""
    # Two or more GPUs, as typed (engine/llamacpp/device_split.py reads them).
    tensor_split: str | None = None  # -ts
    split_mode: str | None = None  # -sm
    devices: str | None = None  # -dev
    main_gpu: int | None = None  # -mg
    visible_env: tuple[tuple[str, str], ...] = ()  # CUDA_VISIBLE_DEVICES and its kin, as set for the command
    moe_cache_mib: int | None = None  # --moe-cache-mib: llama.cpp's GPU cache of host experts (b11480 on)
    moe_cache_cpu_share: float | None = None  # --moe-cache-cpu-share F (by b12191)
    fit_target_mib: int | None = None  # -fitt: VRAM --fit leaves free on the (first) device

    @property
    def stages_cpu_experts(self) -> bool:
        """GGML_OP_OFFLOAD_MIN_BATCH=1 copies routed CPU experts to the GPU at decode."""
        return self.op_offload_min_batch is not None and self.op_offload_min_batch <= 1 and not self.no_op_offload


@dataclass(frozen=True)
class _Read:
    """One flag as read: its table entry (None: not one COPE reads, or a stray word), its
    name as typed (long flags folded), its value (None: a switch, or not read) and words."""

    flag: Flag | None
    name: str
    value: str | None
    words: tuple[str, ...]


def parse_llama_command(tokens: Sequence[str], env: Mapping[str, str] | None = None) -> LlamaCommand:
    """Parse a command as a list of words (what shlex.split gives)."""
    words = list(tokens)
    environ = dict(env or {})
    if words and os.path.basename(words[0]) == "env":
        words = words[1:]
    env_words: list[tuple[str, str]] = []
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        key, value = words.pop(0).split("=", 1)
        environ[key] = value
        env_words.append((key, value))
    if not words:
        raise CopeInputError(f"{WHERE} is empty: give it after --, e.g. cope estimate -- llama-server -m model.gguf")
    binary = words.pop(0)
    tool = llama_tool(binary)
    return _command(binary, tool, _read_words(words, tool), environ, env_words)


def read_command_line(line: CommandLine) -> LlamaCommand:
    """A command COPE built, read from its value: each Arg is one flag already, keyed by
    its setting (command_line.spelled), so nothing is split again; what follows is the
    same reading as a typed command's."""
    tool = llama_tool(line.binary)
    return _command(line.binary, tool, _read_args(line, tool), dict(line.env), list(line.env))


def _read_args(line: CommandLine, tool: str) -> Iterator[_Read]:
    """Each Arg of a command's value as a flag read: its setting's entry by its key, its
    value the word after the option (the switches and missing values as typed ones)."""
    for arg in line.args:
        flag = _READ_SETTINGS.get(arg.key)
        name, given = arg.words[0], arg.words[1:]
        if flag is None:
            yield _Read(None, arg.key, None, arg.words)
        elif not flag.takes_value:
            _check_switch(flag, name, tool)
            yield _Read(flag, name, None, arg.words)
        else:
            yield _Read(flag, name, given[0] if given else _absent_value(flag, name), arg.words)


def _read_words(words: Sequence[str], tool: str) -> Iterator[_Read]:
    """Each flag of a typed command in order, with its value; a generator, so a problem
    is raised where the reading reaches it, after those of the flags before it."""
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        start = i - 1
        if not _FLAG_SHAPE.match(word):
            yield _Read(None, "", None, (word,))
            continue
        name, inline = (word.split("=", 1) + [None])[:2] if "=" in word else (word, None)
        if name.startswith("--"):
            name = name.replace("_", "-")
        flag = READ_NAMES.get(name)
        if flag is None:
            # Unknown: keep its value with it when the next word cannot be a flag.
            if inline is None and i < len(words) and not _FLAG_SHAPE.match(words[i]):
                i += 1
            yield _Read(None, name, None, tuple(words[start:i]))
            continue
        if not flag.takes_value:
            if inline is not None:
                raise CopeInputError(f"{WHERE}: {name} takes no value, got {word!r}")
            _check_switch(flag, name, tool)
            if i < len(words) and words[i].strip().lower() in _SWITCH_LOOKALIKES:
                raise CopeInputError(f"{WHERE}: {name} takes no value (it is a switch), got {name} {words[i]}")
            yield _Read(flag, name, None, (word,))
            continue
        if inline is not None:
            value = inline
        elif i < len(words) and (flag.setting not in _OPTIONAL_VALUE or not _FLAG_SHAPE.match(words[i])):
            value = words[i]
            i += 1
        else:
            value = _absent_value(flag, name)
        yield _Read(flag, name, value, tuple(words[start:i]))


def _check_switch(flag: Flag, name: str, tool: str) -> None:
    if flag.setting == "cpu_moe" and tool == "llama-bench":
        raise CopeInputError(f"{WHERE}: llama-bench has no {name} (tools/llama-bench/llama-bench.cpp): give "
                             "-ncmoe N, N the model's blocks, to keep every expert on the CPU")


def _absent_value(flag: Flag, name: str) -> str:
    """The value of a flag given without one: "on" where it is a switch in some builds."""
    if flag.setting in _OPTIONAL_VALUE:
        return "on"  # older builds: -fa was a switch; -rtr is one in llama-server
    raise CopeInputError(f"{WHERE}: {name} needs a value")


def _command(binary: str, tool: str, reads: Iterable[_Read], environ: Mapping[str, str],
             env_words: Sequence[tuple[str, str]]) -> LlamaCommand:
    """What the flags `reads` give, in order, as llama.cpp takes them."""
    notes: list[str] = []
    seen: dict[str, list[tuple[str, str]]] = {}  # each setting's (flag as typed, value), in order
    overrides: list[tuple[str, str, str]] = []
    unknown: list[str] = []
    switches: set[str] = set()
    groups: list[tuple[str, tuple[str, ...]]] = []
    for read in reads:
        flag, name, value = read.flag, read.name, read.value
        if flag is None:
            unknown.append(" ".join(read.words))
            groups.append((name, read.words))
            continue
        groups.append((flag.setting, read.words))
        if value is None:
            switches.add(flag.setting)
            if flag.setting == "cpu_moe":
                overrides.append((EXPS_REGEX_TAIL, "CPU", name))
        elif flag.setting == "override_tensor":
            overrides.extend(parse_overrides(value, name, tool, notes))
        elif flag.setting == "n_cpu_moe" and tool != "llama-bench":
            # arg.cpp: one override per block i < N, appended in order (none past the last block).
            overrides.extend(n_cpu_moe_overrides(stoi(value, name), name))
            seen.setdefault(flag.setting, []).append((name, value))
        else:
            seen.setdefault(flag.setting, []).append((name, value))

    values = resolve_values(seen, tool, notes)  # repeated flags, llama-bench's lists and ranges
    if tool == "llama-bench" and "n_cpu_moe" in values:
        # llama-bench.cpp to_llama_mparams: the -ncmoe overrides come after the test's -ot ones.
        overrides.extend(n_cpu_moe_overrides(stoi(values["n_cpu_moe"], "-ncmoe"), "-ncmoe"))
    if "n_cpu_moe" in values and tool != "llama-bench":
        values["n_cpu_moe"] = str(max(stoi(v, f) for f, v in seen["n_cpu_moe"]))
    if values.get("gpu_layers", "all").strip().lower() not in ("all", "auto", "max"):
        stoi(values["gpu_layers"], "-ngl")  # one number (llama-server: or all/auto)
    check_patterns([o for o in overrides if o[2] in ("-ot", "--override-tensor")])
    threads = stoi(values["threads"], "-t") if "threads" in values else None
    context = stoi(values["context"], "-c") if "context" in values else None
    if threads is not None and threads <= 0:
        raise CopeInputError(f"{WHERE}: -t must be positive, got {threads}")
    if context is not None and context < 0:
        raise CopeInputError(f"{WHERE}: -c must be >= 0, got {context}")
    min_batch = None
    if OFFLOAD_ENV in environ:
        min_batch = stoi(environ[OFFLOAD_ENV], OFFLOAD_ENV)
    no_op_offload = "no_op_offload" in switches or values.get("bench_no_op_offload", "0") not in ("0", "false", "off")
    no_mmap = ("no_mmap" in switches or values.get("bench_mmap", "1") in ("0", "false", "off")
               or values.get("load_mode", "auto").split(",")[0] in COPYING_LOAD_MODES)
    n_depth = _first_int(values.get("n_depth"), "-d", tool, notes) or 0
    n_gen = _first_int(values.get("n_gen"), "-n", tool, notes)
    prompt = _prompt_settings(values, tool, notes)
    model_name, model_source = _model_name(values, notes)
    return LlamaCommand(
        binary=binary, tool=tool, model_path=values.get("model"), model_name=model_name, model_source=model_source,
        gpu_layers=values.get("gpu_layers"),
        threads=threads, context=context, flash_attn=values.get("flash_attn"), overrides=tuple(overrides),
        op_offload_min_batch=min_batch, no_op_offload=no_op_offload, no_mmap=no_mmap, fit=values.get("fit"),
        n_depth=n_depth, n_gen=n_gen, n_cpu_moe=stoi(values["n_cpu_moe"], "--n-cpu-moe") if "n_cpu_moe" in values
        else None, kv_bytes_per_element=_kv_bytes(values), multi_gpu=_multi_gpu(values, overrides, environ),
        unknown=tuple(unknown), notes=tuple(notes), **prompt, args=tuple(groups), env_words=tuple(env_words),
        no_kv_offload=_no_kv_offload(values, groups),
        tensor_split=values.get("tensor_split"), split_mode=values.get("split_mode"), devices=values.get("device"),
        main_gpu=_first_int(values.get("main_gpu"), "-mg", tool, notes) if tool == "llama-bench"
        else (stoi(values["main_gpu"], "-mg") if "main_gpu" in values else None),
        visible_env=tuple((k, environ[k]) for k in VISIBLE_DEVICES if k in environ),
        moe_cache_mib=_cache_mib(values), moe_cache_cpu_share=_cache_share(values),
        fit_target_mib=_fit_target(values),
    )


def _cache_mib(values: Mapping[str, str]) -> int | None:
    """--moe-cache-mib N: a size in MiB, >= 0 (0: no cache)."""
    if "moe_cache_mib" not in values:
        return None
    mib = stoi(values["moe_cache_mib"], "--moe-cache-mib")
    if mib < 0:
        raise CopeInputError(f"{WHERE}: --moe-cache-mib must be >= 0 MiB, got {mib}")
    return mib or None


def _fit_target(values: Mapping[str, str]) -> int | None:
    """-fitt MiB[,MiB...]: the first device's (COPE fits one card)."""
    if "fit_target" not in values:
        return None
    mib = stoi(values["fit_target"].split(",")[0], "-fitt")
    if mib < 0:
        raise CopeInputError(f"{WHERE}: -fitt must be >= 0 MiB, got {mib}")
    return mib


def _cache_share(values: Mapping[str, str]) -> float | None:
    """--moe-cache-cpu-share F: a share of the misses, 0..1."""
    if "moe_cache_cpu_share" not in values:
        return None
    text = values["moe_cache_cpu_share"]
    try:
        share = float(text)
    except ValueError:
        raise CopeInputError(f"{WHERE}: --moe-cache-cpu-share takes a number from 0 to 1, got {text!r}") from None
    if not 0.0 <= share <= 1.0:
        raise CopeInputError(f"{WHERE}: --moe-cache-cpu-share takes a number from 0 to 1, got {text!r}")
    return share


def _prompt_settings(values: Mapping[str, str], tool: str, notes: list[str]) -> dict:
    """-p (llama-bench only), -ub, -b, -tb and -rtr as LlamaCommand fields."""
    out: dict = {}
    if "n_prompt" in values and tool == "llama-bench":
        out["n_prompt"] = _first_int(values["n_prompt"], "-p", tool, notes)
    for setting, flag in (("ubatch", "-ub"), ("batch", "-b"), ("threads_batch", "-tb")):
        if setting in values:
            n = _first_int(values[setting], flag, tool, notes)
            if not n:
                raise CopeInputError(f"{WHERE}: {flag} must be positive, got {values[setting]!r}")
            out[setting] = n
    if "repack" in values:
        out["repack"] = values["repack"].split(",")[0].lower() not in ("0", "false", "off")
    return out


def _no_kv_offload(values: Mapping[str, str], groups: Sequence[tuple[str, tuple[str, ...]]]) -> bool:
    """-nkvo (llama-bench: -nkvo 1; its first value) unless a later -kvo turns it back on."""
    last = next((key for key, _ in reversed(groups) if key in ("no_kv_offload", "kv_offload")), None)
    if last != "no_kv_offload":
        return False
    return values["no_kv_offload"].split(",")[0].strip().lower() not in ("0", "false", "off")


def llama_tool(binary: str) -> str:
    """The llama.cpp program `binary` is, as the flags it takes: llama-server, llama-cli or
    llama-bench; anything else is refused (its flags would be guessed)."""
    base = os.path.basename(binary.replace("\\", "/")).lower().removesuffix(".exe")
    tool = LLAMA_PROGRAMS.get(base)
    if tool is None:
        shown = binary if len(binary) <= 60 else binary[:57] + "..."
        raise CopeInputError(f"{WHERE}: {shown!r} is not a llama.cpp program (one of "
                             f"{', '.join(LLAMA_PROGRAMS)}); give the command after --, starting with the program")
    return tool


def _first_int(text: str | None, flag: str, tool: str, notes: list[str]) -> int | None:
    """A whole number; llama-bench takes comma-separated lists (one test each): the first."""
    if text is None:
        return None
    values = text.split(",")
    if len(values) > 1:
        notes.append(f"{flag} {text}: llama-bench runs one test each; the first ({values[0]}) is estimated")
    n = stoi(values[0], flag)
    if n < 0:
        raise CopeInputError(f"{WHERE}: {flag} must be >= 0, got {n}")
    return n


def _kv_bytes(values: Mapping[str, str]) -> float:
    """Bytes per cached element: K and V are as large as each other, so their types' mean."""
    kinds = [values.get(k, "f16").split(",")[0].lower() for k in ("cache_type_k", "cache_type_v")]
    for kind in kinds:
        if kind not in KV_TYPE_BYTES:
            raise CopeInputError(f"{WHERE}: KV cache type {kind!r} is not one of {', '.join(KV_TYPE_BYTES)}")
    return sum(KV_TYPE_BYTES[kind] for kind in kinds) / 2


HF_DEFAULT_TAG = "Q4_K_M"  # common/arg.cpp -hf: "quant is optional, case-insensitive, default to Q4_K_M"


def _model_name(values: Mapping[str, str], notes: list[str]) -> tuple[str | None, str]:
    """(the model's name, the flags that gave it) where the command names no -m file but
    a Hub repo (-hf, with a file -hff) or a URL (-mu)."""
    if values.get("model"):
        return None, ""
    repo = values.get("hf_repo", "").split(",")[0]
    name, _, tag = repo.partition(":")
    if values.get("hf_file"):
        source = (f"-hf {repo} " if repo else "") + f"-hff {values['hf_file']}"
        return (f"{name}/{values['hf_file']}" if name else values["hf_file"]), source
    if repo:
        if not tag:
            tag = HF_DEFAULT_TAG
            notes.append(f"-hf {repo} gives no quantization: llama.cpp takes {HF_DEFAULT_TAG} (or the repo's first "
                         "file when it has none)")
        return f"{name}/{name.rsplit('/', 1)[-1]}-{tag}.gguf", f"-hf {repo}"
    if values.get("model_url"):
        return values["model_url"].split("?")[0].rstrip("/").rsplit("/", 1)[-1], f"-mu {values['model_url']}"
    return None, ""


def _multi_gpu(values: Mapping[str, str], overrides: Sequence[tuple[str, str, str]],
               environ: Mapping[str, str]) -> str | None:
    devices = sorted({buf for _, buf, _ in overrides if is_gpu_buffer(buf)})
    if len(devices) > 1:
        return f"tensors placed on {len(devices)} GPUs ({', '.join(devices)})"
    second = [d for d in devices if (m := GPU_BUFFER.fullmatch(d)) and m.group(2) and int(m.group(2)) > 0]
    if second:
        return f"tensors placed on {second[0]}, a second GPU; llama.cpp then splits the layers over every GPU"
    for key in VISIBLE_DEVICES:
        if len([x for x in environ.get(key, "").split(",") if x.strip()]) > 1:
            return f"{key}={environ[key]}"
    if values.get("tensor_split") and len([x for x in re.split(r"[,/]", values["tensor_split"]) if x.strip()]) > 1:
        return f"--tensor-split {values['tensor_split']}"
    if values.get("split_mode", "").lower() == "row":
        return "--split-mode row"
    if values.get("device") and "," in values["device"]:
        return f"--device {values['device']}"
    return None


def stoi(text: str, flag: str) -> int:
    """A number as llama.cpp's std::stoi takes it: ASCII digits with a sign, in a 32-bit int."""
    shown = text if len(text) <= 40 else text[:37] + "..."
    if not re.fullmatch(r"\s*[+-]?[0-9]+", text):
        raise CopeInputError(f"{WHERE}: {flag} needs a whole number, got {shown!r}")
    digits = text.strip().lstrip("+-").lstrip("0")
    if len(digits) > 10 or int(text) > INT_MAX or int(text) < -INT_MAX - 1:
        raise CopeInputError(f"{WHERE}: {flag} {shown} is out of range (llama.cpp reads a 32-bit int, at most "
                             f"{INT_MAX})")
    return int(text)


def command_notes(command: LlamaCommand, model: ModelSpec) -> tuple[str, ...]:
    """What the estimate assumes about the command's other settings."""
    notes = list(command.notes)
    if command.n_cpu_moe is not None and command.n_cpu_moe > model.n_blocks:
        notes.append(f"--n-cpu-moe {command.n_cpu_moe} is more than the model's {model.n_blocks} blocks: every "
                     "block's experts on the CPU, as llama.cpp does")
    if command.gpu_layers is None:
        notes.extend(_no_ngl_note(command))
    if command.op_offload_min_batch is not None:
        if command.stages_cpu_experts:
            notes.append(f"{OFFLOAD_ENV}={command.op_offload_min_batch}: routed CPU experts are copied to the GPU "
                         "each decode step (priced as staging)")
        elif command.no_op_offload:
            notes.append(f"{OFFLOAD_ENV} has no effect with --no-op-offload")
        else:
            notes.append(f"{OFFLOAD_ENV}={command.op_offload_min_batch} is above the decode batch of 1: no effect")
    if command.no_kv_offload:
        notes.append("-nkvo: the KV cache is in host memory, not VRAM, and llama.cpp runs attention there: its KV "
                     "reads are priced on the CPU with two hand-overs a block (attention's arithmetic is not)")
    if command.flash_attn is not None and command.flash_attn not in ("on", "1", "true", "enabled"):
        notes.append(f"-fa {command.flash_attn}: the estimate does not model flash attention")
    return tuple(notes)


def _no_ngl_note(command: LlamaCommand) -> list[str]:
    """What a command without -ngl offloads, where engine/llamacpp/llama_fit.py does not say it."""
    if command.tool == "llama-bench":
        return ["no -ngl: llama-bench offloads every layer by default (tools/llama-bench/llama-bench.cpp: -ngl 99, "
                "-1 in newer builds) and has no --fit"]
    if command.fit is not None and command.fit.strip().lower() in ("off", "0", "false", "disabled"):
        return ["no -ngl with --fit off: every block offloaded (llama.cpp's default)"]
    if command.overrides:
        return ["no -ngl: llama.cpp's --fit leaves a command with tensor overrides as given (common/fit.cpp: "
                "\"tensor_buft_overrides already set by user\"): every block offloaded"]
    return []  # --fit decides: engine/llamacpp/llama_fit.py says what it does
