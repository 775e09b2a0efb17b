"""The runtime registry: which programs run which candidates, and how to launch them.

Each runtime (engine/runtimes/llamacpp.py: stock llama.cpp, ik_llama.cpp, the MoE
expert-cache fork; engine/runtimes/sglang_kt.py: SGLang with kt-kernel) declares
- which candidates it runs exactly, which approximately and why (`support`),
- how its CPU experts run beside the GPU's, for the cost model (`info.cpu_experts`),
- what it keeps in host memory (`host_use`, checked against RAM by engine/hardware/host_memory.py),
- how to launch it: an argument list, the environment and the artefacts (`launch`).

Also here: the command that runs a candidate on a runtime (`export`) and the fork's side
file (`fork_profile`).

May import: every engine package below it (core, models, hardware, traces, replays,
profiles, cost, llamacpp); engine.advice builds on it.
"""

from __future__ import annotations

from engine.core.errors import CopeInputError
from engine.runtimes.base import APPROXIMATE, EXACT, NOT_RUN, Support  # the support levels
from engine.runtimes.base import ExportPlan, HostUse, Launch, LaunchOptions, Runtime, RuntimeImpl
from engine.runtimes.llamacpp import FORK, IK, STOCK
from engine.runtimes.placement import Layout, Placement, placement_of
from engine.runtimes.sglang_kt import SGLANG_KT

REGISTRY: tuple[RuntimeImpl, ...] = (STOCK, IK, FORK, SGLANG_KT)
RUNTIME_NAMES = tuple(r.info.name for r in REGISTRY)
# Earlier spellings of `cope export --runtime` (DESIGN.md §7): still accepted.
ALIASES = {"stock": "llama.cpp"}
STOCK_NAME = STOCK.info.name
SGLANG_KT_NAME = SGLANG_KT.info.name


def runtime_named(name: str) -> RuntimeImpl:
    key = ALIASES.get(name, name)
    for runtime in REGISTRY:
        if runtime.info.name == key:
            return runtime
    raise CopeInputError(f"--runtime must be one of {', '.join(RUNTIME_NAMES)} (or stock for llama.cpp), got {name!r}")


def supports(candidate, placement: Placement, model, plan: ExportPlan) -> tuple[Support, ...]:  # type: ignore[no-untyped-def]
    """What every runtime says about the candidate, in registry order."""
    return tuple(r.support(candidate, placement, model, plan) for r in REGISTRY)


__all__ = [
    "ALIASES", "APPROXIMATE", "EXACT", "NOT_RUN", "REGISTRY", "RUNTIME_NAMES", "SGLANG_KT_NAME", "STOCK_NAME", "ExportPlan", "HostUse",
    "Launch", "LaunchOptions", "Layout", "Placement", "Runtime", "Support", "placement_of", "runtime_named",
    "supports",
]
