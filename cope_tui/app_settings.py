"""The app's plan as `cope advise` flags: what `cope [FLAGS]` starts from, and the last plan
remembered between launches.

The remembered plan is written as the flags that would make it (`{"schema": 1, "flags":
["--model", "qwen3-30b-a3b", "--gpu", "2x rtx-3090"]}`), so a file is read back through the
same parser and checks as the command line: a value the flags would refuse is refused in
the file too. The file lives in the user's config folder (platformdirs, or COPE_CONFIG_DIR),
is written atomically, and a damaged one is one warning line and the defaults, never a
crash. Imports neither textual nor torch.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import fields
from pathlib import Path

import platformdirs

from cope_tui.options import PlanChoices, add_flags, check_choices, choices_from_args, option_of
from engine.core.cache_dirs import APP_NAME
from engine.core.errors import CopeInputError
from engine.core.files import atomic_write_text

CONFIG_ENV = "COPE_CONFIG_DIR"
SETTINGS_NAME = "app.json"
SCHEMA = 1
MAX_SETTINGS_BYTES = 64 * 1024  # a plan is a few hundred bytes; anything far larger is not ours
# The app never probes unasked (its Probes tab does, with its own budget): flags that would
# make it probe are not taken, and never remembered.
NOT_APP_FLAGS = ("fidelity", "reprobe")


def config_dir() -> Path:
    """COPE_CONFIG_DIR, else platformdirs' user config folder for COPE (~/.config/cope on Linux)."""
    env = os.environ.get(CONFIG_ENV)
    return Path(env) if env else Path(platformdirs.user_config_dir(APP_NAME, APP_NAME))


def settings_path() -> Path:
    return config_dir() / SETTINGS_NAME


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, as the command line's own
        raise CopeInputError(message)


def app_parser() -> argparse.ArgumentParser:
    """`cope [FLAGS]`: advise's plan flags, less those that would probe."""
    parser = _Parser(prog="cope", add_help=False)
    add_flags(parser, skip=NOT_APP_FLAGS)
    return parser


def choices_from_flags(flags: list[str] | tuple[str, ...]) -> PlanChoices:
    """The plan `flags` say, checked as `cope advise` checks them; CopeInputError (one line)."""
    choices = choices_from_args(app_parser().parse_args(list(flags)))
    check_choices(choices)
    return choices


def flags_of(choices: PlanChoices) -> list[str]:
    """The flags that make `choices` (those left at their default are left out)."""
    out: list[str] = []
    for f in fields(PlanChoices):
        value = getattr(choices, f.name)
        if f.name in NOT_APP_FLAGS or value == f.default:
            continue
        opt = option_of(f.name)
        if opt.is_switch:
            out.append(opt.flag)
            continue
        out += [opt.flag, _text(value)]
    return out


def _text(value) -> str:  # type: ignore[no-untyped-def]
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(getattr(value, "text", None), str):  # a MemorySpec, as it is written
        return value.text
    if isinstance(value, float):
        return repr(value)  # exact: read back as the same float
    return str(getattr(value, "value", value))


def load_settings(path: Path) -> tuple[PlanChoices | None, str | None]:
    """The remembered plan (None when there is none), and a one-line warning when the file
    could not be used (then the defaults are used and the file is left as it is)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_SETTINGS_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, _warning(path, exc.strerror or str(exc))
    try:
        if len(raw) > MAX_SETTINGS_BYTES:
            raise ValueError(f"larger than {MAX_SETTINGS_BYTES // 1024} KiB")
        doc = json.loads(raw.decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            raise ValueError(f"not a COPE settings file of schema {SCHEMA}")
        flags = doc.get("flags")
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise ValueError('"flags" must be a list of strings')
        return choices_from_flags(flags), None
    except (ValueError, CopeInputError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None, _warning(path, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def _warning(path: Path, problem: str) -> str:
    return f"{path}: {problem}; started from the defaults (the file is replaced by the next plan)"


def save_settings(path: Path, choices: PlanChoices) -> Path:
    """Remember `choices` in `path`, atomically; CopeInputError (one line) when it cannot."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CopeInputError(f"cannot create the folder: {exc.strerror or exc}", path=str(path.parent)) from None
    text = json.dumps({"schema": SCHEMA, "flags": flags_of(choices)}, indent=1) + "\n"
    return atomic_write_text(path, text)


PATH_FIELDS = ("model", "trace", "profile_trace", "llama_bin")  # may name a file or folder


def anchored(choices: PlanChoices, cwd: Path) -> PlanChoices:
    """`choices` with a relative path that names something under `cwd` made absolute, so the
    remembered plan means the same file when the app next starts from another folder."""
    changes = {}
    for name in PATH_FIELDS:
        value = getattr(choices, name)
        if not value or os.path.isabs(value) or value.startswith("~"):
            continue
        try:
            there = (cwd / value)
            if there.exists():
                changes[name] = str(there.resolve())
        except (OSError, ValueError):  # a name too long, a NUL byte: left as typed
            continue
    return choices.with_(**changes) if changes else choices
