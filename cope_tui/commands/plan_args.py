"""The flags that decide a recommendation, shared by advise, export, estimate and verify
(declared once in cope_tui/options.py), and the advice they lead to (cope_tui/service)."""

from __future__ import annotations

import argparse
import sys

from cope_tui.options import PlanChoices, add_flags, choices_from_args
from cope_tui.service.advice import Advice, plan
from cope_tui.service.last_plan import with_last_plan
from cope_tui.service.request import preset_gpu_on_this_cpu
from engine.cost.cost_model import Fidelity


def add_plan_flags(p: argparse.ArgumentParser, *, with_context_threads: bool = True) -> None:
    """The plan flags (same meaning in every command); `estimate` takes -t and -c from
    the llama.cpp command instead."""
    add_flags(p, skip=() if with_context_threads else ("context", "threads"))


def reused_choices(args: argparse.Namespace, *, only: tuple[str, ...] | None = None) -> tuple[PlanChoices, str]:
    """The plan flags given, the rest from the last plan `cope advise` or the app made
    (cope_tui/service/last_plan.py; `only`: just those settings), and the line that says
    which plan: printed first on stderr when settings came from the last plan (the flags
    given are then not all there is to it)."""
    used = with_last_plan(choices_from_args(args), only=only)
    if used.reused:
        print(f"cope: plan: {used.line}", file=sys.stderr, flush=True)
    return used.choices, used.line


def _say_probe(done: int, total: int, label: str) -> None:
    print(f"cope: probe {done}/{total}: {label}", file=sys.stderr, flush=True)


def advice_from_args(args: argparse.Namespace, **explicit) -> Advice:  # type: ignore[no-untyped-def]
    """The ranked advice for the plan flags; `explicit` values (not None) win over them.
    Probe progress and the probing summary go to stderr."""
    return advice_for(args, choices_from_args(args, **explicit))


def advice_for(args: argparse.Namespace, choices) -> Advice:  # type: ignore[no-untyped-def]
    """The ranked advice for `choices` (the flags' or a pasted command's), probe progress and
    the probing summary on stderr."""
    advice = plan(choices, probe_progress=_say_probe)
    warning = preset_gpu_on_this_cpu(choices, advice.request.platform)
    said = vars(args).setdefault("_said", set())  # estimate plans more than once: said once
    if warning and warning not in said:
        said.add(warning)
        print(f"cope: warning: {warning}", file=sys.stderr)
    pricing = advice.pricing
    if pricing.probed is not None:
        print(f"cope: probes: {pricing.probed.summary()}; profile {pricing.profile_source}", file=sys.stderr)
    if getattr(args, "fidelity", None) is None and (pricing.fidelity is Fidelity.CALIBRATED or "moved to" in pricing.reason):
        print(f"cope: priced {pricing.reason} (--fidelity to choose another cost model)", file=sys.stderr)
    return advice
