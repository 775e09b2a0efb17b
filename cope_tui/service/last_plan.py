"""The last plan: what `cope advise` or the app planned for, kept so that `cope export`,
`verify` and `estimate` run without the plan flags and still mean that plan.

`cope advise --gpu rtx-4090 --vram-budget 12` then `cope export --candidate X` exports X of
the RTX 4090 plan, not of the defaults. The plan is its settings as flags would spell them
(only those that differ from the defaults), written atomically to the cache folder's
plans/last.json (engine/core/cache_dirs.py) whenever advise or the app ranks; a command
given some plan flags takes the rest from the last plan; whatever it uses, its first line
says which plan (the last one, with its flags, or the defaults when none is recorded).

The file is read as data: a JSON object whose every value is parsed and checked by the
option it names (cope_tui/options.py), so a bad file is a one-line error naming it.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from cope_tui.options import PlanChoices, option_of
from engine.core.cache_dirs import plans_dir
from engine.core.errors import CopeInputError
from engine.core.files import atomic_write_text, read_text

PLAN_FILE = "last.json"
SCHEMA = 1
# Not part of a plan: asking to probe again is an action, not a setting.
NOT_RECORDED = frozenset({"reprobe"})
# `cope estimate` reads the model, quantization, context and threads from the command it prices:
# it takes only the machine from the last plan.
MACHINE = ("gpu", "cpu", "ram_gib", "memory", "ram_bandwidth_gbps", "vram_budget_gib", "llama_bin")
# Settings that hold only for the last plan's GPU: not reused when another --gpu is given.
GPU_BOUND = ("vram_budget_gib",)
# Settings that may name a local file or folder: recorded by absolute path.
PATH_SETTINGS = ("model", "trace", "profile_trace", "llama_bin")
_DEFAULTS = PlanChoices()


def plan_path() -> Path:
    return plans_dir() / PLAN_FILE


def _text(value: Any) -> str:
    """A setting's value as its flag takes it."""
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(getattr(value, "text", None), str):  # a MemorySpec: as it is written
        return value.text
    if isinstance(getattr(value, "value", None), str):  # an enum (Fidelity): its flag's word
        return value.value
    return f"{value:g}" if isinstance(value, float) else str(value)


def settings_of(choices: PlanChoices) -> dict[str, str]:
    """The settings of `choices` that differ from the defaults, as text their flags take."""
    out = {}
    for f in fields(PlanChoices):
        value = getattr(choices, f.name)
        if f.name in NOT_RECORDED or value is None or value == getattr(_DEFAULTS, f.name):
            continue
        out[f.name] = _text(value)
    return out


def _anywhere(settings: dict[str, str]) -> dict[str, str]:
    """`settings` with the files and folders they name made absolute, so the plan means the
    same from whatever folder export runs in (a catalog id or a repo id is left as it is)."""
    out = dict(settings)
    for name in PATH_SETTINGS:
        text = out.get(name)
        if text is not None and os.path.exists(os.path.expanduser(text)):
            out[name] = os.path.abspath(os.path.expanduser(text))
    return out


def flags_text(settings: dict[str, str]) -> str:
    """The settings as the flags that give them ("--gpu rtx-4090 --vram-budget 12")."""
    words = []
    for name, text in settings.items():
        opt = option_of(name)
        words.append(opt.flag if opt.is_switch else f"{opt.flag} {text}")
    return " ".join(words)


@dataclass(frozen=True)
class LastPlan:
    settings: dict[str, str]  # field name -> text, as recorded
    by: str  # "cope advise" or "the app"
    at: str  # when, UTC, for the line that names it

    def describe(self, only: tuple[str, ...] | None = None) -> str:
        """Which plan this is, with its flags (`only`: just those settings, the machine)."""
        shown = {k: v for k, v in self.settings.items() if only is None or k in only}
        flags = flags_text(shown) or "no plan flags (COPE's defaults)"
        return f"{'the last plan' if only is None else 'the machine of the last plan'} ({self.by}, {self.at}): {flags}"


def record_plan(choices: PlanChoices, *, by: str) -> Path:
    """Keep `choices` as the last plan (atomically: a reader never sees half a file)."""
    doc = {"schema": SCHEMA, "by": by, "at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "settings": _anywhere(settings_of(choices))}
    path = plan_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, json.dumps(doc, indent=1) + "\n")


def last_plan() -> LastPlan | None:
    """The recorded plan, None when there is none; a file that is not one is a one-line
    error naming it and the problem."""
    path = plan_path()
    if not path.exists():
        return None
    where = str(path)
    try:
        doc = json.loads(read_text(path, what="plan file"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CopeInputError(f"not a COPE plan file (not JSON: {exc}); delete it or run cope advise", path=where) \
            from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("settings"), dict):
        raise CopeInputError(f"not a COPE plan file (schema {SCHEMA} with settings expected); run cope advise",
                             path=where)
    names = {f.name for f in fields(PlanChoices)} - NOT_RECORDED
    for name, text in doc["settings"].items():
        if name not in names or not isinstance(text, str):
            raise CopeInputError(f"settings.{name}: not a plan setting (or not text)", path=where)
        opt = option_of(name)
        if opt.is_switch:
            continue
        try:
            value = opt.parse(text)
        except CopeInputError as exc:
            raise CopeInputError(f"settings.{name}: {exc}", path=where) from None
        problem = opt.check(value) if opt.check else None
        if problem:
            raise CopeInputError(f"settings.{name} {problem}", path=where)
    return LastPlan(dict(doc["settings"]), str(doc.get("by", "cope advise")), str(doc.get("at", "")))


@dataclass(frozen=True)
class PlanUsed:
    choices: PlanChoices
    line: str  # which plan, in words
    reused: bool  # settings were taken from the last plan


def with_last_plan(choices: PlanChoices, *, only: tuple[str, ...] | None = None) -> PlanUsed:
    """`choices` (from flags) with every setting they leave at its default taken from the last
    plan (`only`: just those settings), and the line that says which plan this is."""
    given = settings_of(choices)
    last = last_plan()
    if last is None:
        said = flags_text(given)
        return PlanUsed(choices, "no plan recorded (cope advise records one): " +
                        (f"{said}, the rest COPE's defaults" if said else "COPE's defaults"), False)
    # a VRAM budget belongs to the last plan's card: a --gpu given here (none included) drops it
    bound = GPU_BOUND if "gpu" in given else ()
    taken = {name: text for name, text in last.settings.items()
             if name not in given and name not in bound and (only is None or name in only)}
    if not taken:  # the flags given say all the last plan said
        return PlanUsed(choices, f"the plan flags given here: {flags_text(given) or 'none'}", False)
    values = {}
    for name, text in taken.items():
        opt = option_of(name)
        values[name] = True if opt.is_switch else opt.parse(text)
    merged = choices.with_(**values)
    line = last.describe(only)
    if given:
        line += f"; with {flags_text(given)} given here"
    dropped = [name for name in bound if name in last.settings and (only is None or name in only)]
    if dropped:
        line += f" ({flags_text({name: last.settings[name] for name in dropped})} was the other card's: not used)"
    return PlanUsed(merged, line, bool(taken))


__all__ = ["LastPlan", "MACHINE", "PlanUsed", "last_plan", "plan_path", "record_plan", "settings_of", "with_last_plan"]
