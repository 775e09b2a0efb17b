"""The cost-model registry: a fidelity names a factory, every factory returns a CostModel.

analytic prices from the Platform alone; atomic and combined from a measured Profile
(engine/cost/measured_cost.py); calibrated from the analytic model with this machine's lane
constants, fitted by `cope calibrate` on llama-bench runs (engine/cost/calibrated_cost.py). Front ends never construct cost models themselves: they ask
`build_cost_model(fidelity, request, profile)` (the analytic model, whose lanes prefill and
split placements also read, is `analytic_model(request)`), so adding a fidelity is one
factory and one registry line.

`describe()` of every cost model returns a `CostModelDescription`: what it is, what it
rests on, and, for the measured ones, which profile it came from (`ProfileUse`).
"""

from __future__ import annotations

from typing import Callable

from engine.cost.analytic_cost import AnalyticAssumptions, AnalyticCostModel
from engine.cost.calibrated_cost import CalibratedCostModel
from engine.cost.calibration import Calibration
from engine.cost.cost_model import CostModel, Fidelity, ProfileUse
from engine.cost.measured_cost import LLAMA_CPP_KERNEL_SPEEDUP, AtomicCostModel, CombinedCostModel, LlamaCppCpuLane
from engine.cost.request import AdviseRequest
from engine.profiles.profile import Profile


Factory = Callable[["AdviseRequest", "Profile | None", "ProfileUse | None"], CostModel]


def fastest_threads(model, quant, platform, *, context_tokens: int) -> int:  # type: ignore[no-untyped-def]
    """The fewest CPU threads that stream `model`'s experts fastest on `platform`'s CPU (on a
    hybrid CPU an even split waits for its E-cores), by the analytic model: what a plan uses
    when the person gave no -t."""
    return AnalyticCostModel(model, quant, platform, context_tokens=context_tokens).fastest_threads()


def analytic_model(request: "AdviseRequest", *, assumptions: AnalyticAssumptions | None = None,
                   as_probed: bool = False) -> AnalyticCostModel:
    """The analytic model of `request` (its context, attended depth and KV cache type):
    the registry's analytic factory, and what prefill pricing and the placement of a
    command read their lanes from. `assumptions`: constants other than the global fit with
    this machine's measurements (`cope calibrate`'s fit tries its own). `as_probed`: priced
    as COPE's probes and executor run a decode step, attending to half the context over an
    F16 cache (probes/local_prober.py, probes/executor.py), whatever the request's depth and
    cache type."""
    if as_probed:
        return AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens,
                                 assumptions=assumptions)
    return AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens,
                             attention_tokens=request.attention_tokens,
                             kv_bytes_per_element=request.kv_bytes_per_element, assumptions=assumptions)


def _analytic(request: "AdviseRequest", profile: "Profile | None", use: ProfileUse | None) -> CostModel:
    return analytic_model(request)


def _atomic(request: "AdviseRequest", profile: "Profile | None", use: ProfileUse | None,
            kernels: str = "llama.cpp") -> CostModel:
    return AtomicCostModel(_needed(profile, "atomic"), n_blocks=request.model.n_blocks, use=use,
                           llama_cpp=_llama_cpp_lane(request) if kernels == "llama.cpp" else None)


def _combined(request: "AdviseRequest", profile: "Profile | None", use: ProfileUse | None,
              kernels: str = "llama.cpp") -> CostModel:
    atomic = _atomic(request, profile, use, kernels)
    return CombinedCostModel(_needed(profile, "combined"), atomic, use=use)


def _llama_cpp_lane(request: "AdviseRequest"):  # type: ignore[no-untyped-def]
    """llama.cpp's CPU expert lane on the request's CPU: the probe's over the kernel
    speedup, bounded by the analytic model's saturated lane (engine/cost/measured_cost.py)."""
    analytic = analytic_model(request, as_probed=True)
    return LlamaCppCpuLane(LLAMA_CPP_KERNEL_SPEEDUP, analytic.cpu_bytes_per_s * analytic.a.cpu_bandwidth_efficiency,
                           float(request.model.expert_bytes(request.quant)))


def _calibrated(request: "AdviseRequest", calibration: "Calibration | None", use: ProfileUse | None) -> CostModel:
    if calibration is None:
        raise ValueError("the calibrated cost model needs a calibration (cope calibrate --gguf FILE)")
    return CalibratedCostModel(request, calibration, source=use.source if use is not None else "")


def _needed(profile: "Profile | None", fidelity: str) -> "Profile":
    if profile is None:
        raise ValueError(f"the {fidelity} cost model needs a measured profile")
    return profile


FACTORIES: dict[Fidelity, Factory] = {
    Fidelity.ANALYTIC: _analytic,
    Fidelity.ATOMIC: _atomic,
    Fidelity.COMBINED: _combined,
    Fidelity.CALIBRATED: _calibrated,
}


KERNELS = ("llama.cpp", "probe")


def build_cost_model(fidelity: Fidelity, request: "AdviseRequest", profile: "Profile | None" = None,
                     use: ProfileUse | None = None, *, calibration: "Calibration | None" = None,
                     kernels: str = "llama.cpp") -> CostModel:
    """The cost model of `fidelity` for `request`; atomic and combined need `profile`,
    calibrated needs `calibration` (and takes its file from `use.source`). `kernels`: whose
    CPU kernels the measured fidelities price: llama.cpp's (every estimate for a runtime)
    or the probe's own ("probe": validation against COPE's executor, which runs them)."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, not {kernels!r}")
    wanted = fidelity
    if wanted.needs_profile:
        return FACTORIES[wanted](request, profile, use, kernels)  # type: ignore[call-arg]
    basis = calibration if wanted is Fidelity.CALIBRATED else profile
    return FACTORIES[wanted](request, basis, use)  # type: ignore[arg-type]
