"""Every setting of a plan, declared once: name, type, default, help, validation.

`PlanChoices` is what a person chose, from flags or from the app's fields; each field
carries an `Option` that says how it is spelled on the command line, how text becomes a
value, what makes a value wrong, and how the app labels it. From this one table come:
- the argparse flags of `cope advise`, `export`, `estimate`, `verify` (`add_flags`),
  and the values they parsed (`choices_from_args`);
- the checks both front ends run before building a request (`check_choices`);
- the app's inputs (`app_options`: label, kind, choices), parsed by the same `parse`.

None means "not said": the service fills in a default and records it as an assumption.
Imports neither textual nor torch.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable

from engine.core.errors import CopeInputError
from engine.core.user_paths import input_kind, user_path
from engine.cost.analytic_cost import KV_TYPE_BYTES
from engine.cost.cost_model import Fidelity
from engine.hardware.cpu_presets import cpu_models, cpu_presets, machines
from engine.hardware.memory_spec import parse_bandwidth_gbps, parse_memory_spec
from engine.hardware.platform import NO_GPU
from engine.hardware.presets import gpu_presets
from engine.models.quant import quantizations

# What a setting left unsaid stands for (the request records each as an assumption).
DEFAULT_MODEL = "qwen3-30b-a3b"
DEFAULT_GPU = "rtx-4060-ti-16gb"
DEFAULT_CONTEXT = 8192
SYNTHETIC_TOKENS = 1000  # per half: the profile half and the replayed half
# The most --tokens of any model. What a request may replay is bounded by its work, tokens
# x MoE layers x top-k routed slots (engine/core/input_limits.py: 16 M, about 1 GiB at
# most), checked before the synthetic trace is drawn: 21,276 tokens of the largest catalog
# model (Qwen3-235B, 94 x top-8), 41,666 of Qwen3-30B-A3B. This cap only keeps a number no
# replay needs (a million took minutes and 50 GB before the budget) from being parsed.
MAX_SYNTHETIC_TOKENS = 100_000
SYNTHETIC_SEED = 0
EVICTIONS = ("lru", "score")
PREFETCH_MODES = ("timed", "optimistic")
FIDELITIES = tuple(f.value for f in Fidelity)  # how --fidelity spells them: analytic, atomic, combined, calibrated
# Named workloads (--workload): (prompt tokens, output tokens). Assumed shapes of common
# requests, stated so a user can compare: chat, a conversation turn with some history
# (1,000 in, 300 out); rag, a question over retrieved passages (8,000 in, 300 out);
# code-agent, an agent step with a repository's files and its history in context
# (30,000 in, 1,000 out). --prompt-tokens / --output-tokens override either number.
WORKLOAD_PRESETS = {"chat": (1000, 300), "rag": (8000, 300), "code-agent": (30000, 1000)}


@dataclass(frozen=True)
class Option:
    flag: str
    help: str
    metavar: str | None = None
    parse: Callable[[str], Any] = str  # text (a flag's or an app field's) -> value
    check: Callable[[Any], str | None] | None = None  # the problem with a value, or None
    choices: tuple[str, ...] | None = None
    label: str | None = None  # the app's label; None: not an app input
    group: str = "plan"  # which app pane shows it: "model", "hardware", "policy", "pricing"
    is_switch: bool = False  # a flag without a value
    app_choices: Callable[[], list[tuple[str, str]]] | None = None  # (label, value) known only at run time
    # free text completed from these (known only at run time): a value beyond the list is taken too
    app_suggestions: Callable[[], list[str]] | None = None
    hint: str = ""  # what an empty app field means


def _option(default: Any, **meta: Any) -> Any:
    return field(default=default, metadata={"option": Option(**meta)})


# --- parsers and checks -------------------------------------------------------------


def _int(text: str) -> int:
    """ASCII digits only: Python's int() also reads "1_0" and Arabic-Indic digits."""
    digits = str(text).strip()
    shown = digits if len(digits) <= 40 else digits[:37] + "..."
    if not re.fullmatch(r"[+-]?[0-9]+", digits):
        raise CopeInputError(f"{shown!r} is not a whole number")
    if len(digits.lstrip("+-").lstrip("0")) > 30:
        raise CopeInputError(f"{shown!r} is too large")
    return int(digits)


def _float(text: str) -> float:
    try:
        return float(str(text).strip())
    except ValueError:
        raise CopeInputError(f"{text!r} is not a number") from None


def _words(text: str | tuple) -> tuple[str, ...]:
    if isinstance(text, tuple):
        return text
    return tuple(w.strip() for w in str(text).split(",") if w.strip())


def _memory(text: str):  # type: ignore[no-untyped-def]
    return parse_memory_spec(text)


def _bandwidth(text: str) -> float:
    return parse_bandwidth_gbps(text)


def _positive(value: float) -> str | None:
    if not (math.isfinite(value) and value > 0):
        return f"must be a positive number, got {value}"
    return None


def _positive_int(value: int) -> str | None:
    return None if value > 0 else f"must be positive, got {value}"


def _at_least(low: int) -> Callable[[int], str | None]:
    return lambda value: None if value >= low else f"must be at least {low}, got {value}"


def _between(low: int, high: int) -> Callable[[int], str | None]:
    def check(value: int) -> str | None:
        if value < low:
            return f"must be at least {low}, got {value}"
        if value > high:
            return f"must be at most {high:,} (a longer replay takes minutes and gigabytes and ranks no better), got {value:,}"
        return None

    return check


def _folder(value: str) -> str | None:
    try:
        kind = input_kind(user_path(value), what="folder")
    except CopeInputError as exc:  # ~nosuchuser, a NUL byte, a name too long, a FIFO
        return f"must be a folder; {exc}"
    if kind is None:
        return f"must be a folder; {value} does not exist"
    if kind != "folder":
        return f"must be the folder that holds llama-server, llama-cli, llama-bench; {value} is a file"
    return None


def _evictions(value: tuple[str, ...]) -> str | None:
    if not value:
        return "needs at least one rule: lru, score or lru,score"
    if any(v not in EVICTIONS for v in value):
        return f"must be among {', '.join(EVICTIONS)}; got {','.join(value)}"
    return None


def _quantizations() -> list[tuple[str, str]]:
    return [(q, q) for q in quantizations()]


def _gpu_words() -> list[str]:
    """What the app's GPU field completes: every preset id, and none (the CPU alone)."""
    return [*gpu_presets(), NO_GPU]


def _cpu_presets() -> list[tuple[str, str]]:
    # One entry per CPU name (its usual memory; the Memory field gives another); a typical
    # machine shares its CPU's name, so it says the memory that sets it apart.
    def label(pid: str, name: str) -> str:
        return name if pid in cpu_models() else f"{name} + {machines()[pid].memory.text}"

    return [(label(pid, spec.name), pid) for pid, spec in cpu_presets().items()]


def _fidelity(text: str) -> Fidelity:
    """--fidelity's text as the Fidelity the service takes (the one place it is converted)."""
    try:
        return Fidelity(str(text).strip())
    except ValueError:
        raise CopeInputError(f"must be one of {', '.join(FIDELITIES)}, got {text}") from None


def _among(allowed: tuple[str, ...]) -> Callable[[str], str | None]:
    return lambda value: None if value in allowed else f"must be one of {', '.join(allowed)}, got {value}"


KV_CACHE_TYPES = tuple(KV_TYPE_BYTES)  # what -ctk/-ctv take (engine/cost/analytic_cost.py)


# --- the table ---------------------------------------------------------------------


@dataclass(frozen=True)
class PlanChoices:
    """A plan's settings; None: the default, which the request records as assumed."""

    model: str | None = _option(
        None, flag="--model",
        help="catalog id (see `cope models`), a config.json, a .gguf file or a Hugging Face repo id")
    gguf_file: str | None = _option(
        None, flag="--gguf-file", metavar="NAME.gguf",
        help="with a repo id as --model: size the model from this GGUF file in the repo (its header is read remotely)")
    quant: str | None = _option(
        None, flag="--quant", label="Quant", group="model", app_choices=lambda: _quantizations(), hint="model's usual",
        help="quantization, e.g. Q4_K_M (default: the model's usual one)")
    gpu: str | None = _option(
        None, flag="--gpu", label="Plan for GPU", group="hardware", app_suggestions=lambda: _gpu_words(),
        hint="this machine's; or 2x NAME, NAME@vulkan, none",
        help="GPU preset to plan for (see `cope presets`; default: this machine's GPU when it has one); "
             "several cards as 'A,B' or '2x A', a llama.cpp backend after '@' (rx-7900-xtx@vulkan); "
             "none: plan for the CPU alone (llama.cpp with -ngl 0)")
    cpu: str | None = _option(
        None, flag="--cpu", label="CPU", group="hardware", app_choices=lambda: _cpu_presets(), hint="this machine",
        help="CPU preset or name (see `cope presets`; '2x NAME' for two sockets; a name that is no preset needs "
             "--memory or --ram-bandwidth; default: this machine's CPU)")
    ram_gib: float | None = _option(
        None, flag="--ram-gib", metavar="GIB", parse=_float, check=_positive, label="RAM GiB", group="hardware",
        hint="detected",
        help="the machine's RAM, GiB, for the host-memory check (default: detected, or the CPU preset's)")
    memory: Any = _option(
        None, flag="--memory", metavar="TYPE-SPEEDxCHANNELS", parse=_memory, label="Memory", group="hardware",
        hint="CPU's usual",
        help="one socket's memory, e.g. ddr5-4800x2, ddr4-3200x8, lpddr5x-8000x256bit (default: detected, or the "
             "CPU preset's usual); its theoretical peak is the bandwidth planned with")
    ram_bandwidth_gbps: float | None = _option(
        None, flag="--ram-bandwidth", metavar="GBPS", parse=_bandwidth, check=_positive,
        help="CPU memory bandwidth to plan with, GB/s (default: what `cope detect` measured on this machine, else "
             "the memory's theoretical peak)")
    vram_budget_gib: float | None = _option(
        None, flag="--vram-budget", metavar="GIB", parse=_float, check=_positive, label="VRAM budget GiB",
        group="hardware", hint="all", help="VRAM to use, GiB (default: all)")
    context: int | None = _option(
        None, flag="--context", metavar="N", parse=_int, check=_positive_int, label="Context", group="model", hint=str(DEFAULT_CONTEXT),
        help="context tokens to reserve KV cache for")
    cache_type: str | None = _option(
        None, flag="--cache-type", choices=KV_CACHE_TYPES, check=_among(KV_CACHE_TYPES), label="KV cache type",
        group="model", hint="f16",
        help="the KV cache's type (llama.cpp's -ctk/-ctv): the placement, the VRAM and the command follow it "
             "(default f16)")
    threads: int | None = _option(
        None, flag="--threads", metavar="T", parse=_int, check=_positive_int, label="Threads", group="model", hint="cores",
        help="CPU threads for expert compute")
    trace: str | None = _option(
        None, flag="--trace", metavar="FILE|synthetic",
        help="routing trace (.npz, llama-moe-trace .csv, .jsonl)")
    profile_trace: str | None = _option(
        None, flag="--profile-trace", metavar="FILE",
        help="trace, or llama.cpp imatrix (.gguf), to learn expert popularity from")
    tokens: int = _option(
        SYNTHETIC_TOKENS, flag="--tokens", parse=_int, check=_between(2, MAX_SYNTHETIC_TOKENS),
        help=f"synthetic tokens to replay (default {SYNTHETIC_TOKENS}, at most {MAX_SYNTHETIC_TOKENS:,})")
    seed: int = _option(SYNTHETIC_SEED, flag="--seed", parse=_int, check=_at_least(0), help="synthetic trace seed")
    evictions: tuple[str, ...] = _option(
        ("lru",), flag="--eviction", parse=_words, check=_evictions, choices=EVICTIONS, label="Eviction",
        group="policy", hint="lru", help="mutable-cache eviction rules: lru, score or lru,score")
    prefetch_mode: str = _option(
        "timed", flag="--prefetch", choices=PREFETCH_MODES, check=_among(PREFETCH_MODES), label="Prefetch",
        group="policy", help="timed: a prefetch is exposed when the previous layer is too short to hide it")
    fidelity: Fidelity | None = _option(
        None, flag="--fidelity", metavar="{" + ",".join(FIDELITIES) + "}", parse=_fidelity, check=_among(FIDELITIES),
        help="cost model (default: calibrated when `cope calibrate` measured this machine, else combined with a "
             "complete cached profile, else analytic)")
    probe_budget_s: float = _option(
        60.0, flag="--probe-budget", metavar="SECONDS", parse=_float, check=_positive, label="Probe budget s",
        group="pricing", help="time for probes when atomic/combined has no cached profile (default 60)")
    reprobe: bool = _option(
        False, flag="--reprobe", is_switch=True, help="ignore the cached profile and probe again")
    workload: str | None = _option(
        None, flag="--workload", choices=tuple(WORKLOAD_PRESETS), check=_among(tuple(WORKLOAD_PRESETS)),
        label="Workload", group="policy", hint="decode only",
        help="rank by the whole request of a named workload: "
             + ", ".join(f"{k} ({p} prompt, {n} output tokens)" for k, (p, n) in WORKLOAD_PRESETS.items())
             + " (default: decode speed only)")
    prompt_tokens: int | None = _option(
        None, flag="--prompt-tokens", metavar="P", parse=_int, check=_positive_int,
        help="prompt tokens of the request: rank by time to first token + output tokens x time per token, "
             "and choose -ub/-b (default: decode speed only)")
    output_tokens: int | None = _option(
        None, flag="--output-tokens", metavar="N", parse=_int, check=_at_least(0),
        help="output tokens of the request (with --prompt-tokens or --workload)")
    llama_bin: str | None = _option(
        None, flag="--llama-bin", metavar="DIR", check=_folder,
        help="folder with llama-server/llama-cli/llama-bench (default: PATH); says which runtime runs now")

    def __post_init__(self) -> None:
        # A caller's text (the app's field, a test) becomes the enum here, at the edge; a
        # wrong one stays as given for check_choices to refuse in one line.
        if isinstance(self.fidelity, str) and not isinstance(self.fidelity, Fidelity) \
                and self.fidelity in FIDELITIES:
            object.__setattr__(self, "fidelity", Fidelity(self.fidelity))

    def with_(self, **changes: Any) -> "PlanChoices":
        return replace(self, **changes)


def option_of(name: str) -> Option:
    for f in fields(PlanChoices):
        if f.name == name:
            return f.metadata["option"]
    raise KeyError(name)


def option_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(PlanChoices))


# --- command line ---------------------------------------------------------------------


def _argparse_type(opt: Option) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        try:
            return opt.parse(text)
        except CopeInputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = opt.metavar or "value"
    return convert


def add_flags(parser: argparse.ArgumentParser, *, skip: tuple[str, ...] = (),
              defaults_: dict[str, Any] | None = None) -> None:
    """The flags of every option not in `skip` (`defaults_` overrides a command's defaults)."""
    overrides = defaults_ or {}
    for f in fields(PlanChoices):
        if f.name in skip:
            continue
        opt: Option = f.metadata["option"]
        default = overrides.get(f.name, f.default)
        help_ = _help_with_default(opt.help, default) if f.name in overrides else opt.help
        if opt.is_switch:
            parser.add_argument(opt.flag, dest=f.name, action="store_true", default=default, help=help_)
            continue
        kwargs: dict[str, Any] = dict(dest=f.name, default=default, help=help_, metavar=opt.metavar)
        if opt.parse is not str:
            kwargs["type"] = _argparse_type(opt)
        elif opt.choices is not None:
            kwargs["choices"] = opt.choices
        parser.add_argument(opt.flag, **kwargs)


def _help_with_default(help_: str, default: Any) -> str:
    """The help of an option whose default a command overrides: says that command's default."""
    shown = f"{default:g}" if isinstance(default, float) else str(default)
    said = re.sub(r"\(default[^,;)]*", f"(default {shown}", help_, count=1)
    return said if said != help_ else f"{help_} (default {shown})"


def choices_from_args(args: argparse.Namespace, **explicit: Any) -> PlanChoices:
    """The PlanChoices the parsed flags say; `explicit` values (not None) win."""
    values = {f.name: getattr(args, f.name) for f in fields(PlanChoices) if hasattr(args, f.name)}
    values.update({k: v for k, v in explicit.items() if v is not None})
    return PlanChoices(**values)


def check_choices(choices: PlanChoices) -> None:
    """Raise CopeInputError (one line, naming the flag) for the first wrong value."""
    for f in fields(PlanChoices):
        opt: Option = f.metadata["option"]
        value = getattr(choices, f.name)
        if value is None or opt.check is None:
            continue
        problem = opt.check(value)
        if problem:
            raise CopeInputError(f"{opt.flag} {problem}")


# --- the app ----------------------------------------------------------------------


@dataclass(frozen=True)
class AppOption:
    name: str  # the PlanChoices field
    label: str
    group: str
    help: str
    choices: tuple[tuple[str, str], ...] | None  # (label, value): a select; None: free text
    multiple: bool  # several values at once, comma-separated (free text)
    hint: str  # what an empty field means
    suggestions: tuple[str, ...] = ()  # free text: what it completes from

    @property
    def widget_id(self) -> str:
        return self.name.replace("_", "-")

    def parse(self, text: str) -> Any:
        """An app field's text -> the value (None for an empty field); one-line errors."""
        text = text.strip()
        if not text:
            return None
        opt = option_of(self.name)
        try:
            value = opt.parse(text)
        except CopeInputError as exc:
            raise CopeInputError(f"{self.label}: {exc}") from None
        problem = opt.check(value) if opt.check else None
        if problem:
            raise CopeInputError(f"{self.label} {problem}")
        return value

    def show(self, value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, tuple):
            return ",".join(value)
        if isinstance(getattr(value, "text", None), str):  # a MemorySpec: as it is written
            return value.text
        return f"{value:g}" if isinstance(value, float) else str(value)


def app_options(group: str) -> list[AppOption]:
    """The app's inputs of one pane group, in table order."""
    out = []
    for f in fields(PlanChoices):
        opt: Option = f.metadata["option"]
        if opt.label is None or opt.group != group:
            continue
        multiple = f.type.startswith("tuple")
        if opt.app_choices is not None:
            choices = tuple(opt.app_choices())
        elif opt.choices is not None and not multiple:
            choices = tuple((c, c) for c in opt.choices)
        else:
            choices = None
        suggestions = tuple(opt.app_suggestions()) if opt.app_suggestions is not None else ()
        out.append(AppOption(f.name, opt.label, opt.group, opt.help, choices, multiple, opt.hint, suggestions))
    return out
