"""The cost-model registry: a fidelity names a factory, every factory returns a CostModel.

analytic prices from the Platform alone; atomic and combined from a measured Profile
(engine/measured_cost.py); calibrated from the analytic model with this machine's lane
constants, fitted by `cope calibrate` on llama-bench runs (engine/calibrated_cost.py). Front ends never construct cost models themselves: they ask
`build_cost_model(fidelity, request, profile)`, so adding a fidelity is one factory and
one registry line.

`describe()` of every cost model returns a `CostModelDescription`: what it is, what it
rests on, and, for the measured ones, which profile it came from (`ProfileUse`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Mapping

from engine.analytic_cost import AnalyticCostModel
from engine.cost_model import CostModel

if TYPE_CHECKING:  # the request type; engine.advise imports this module's users
    from engine.advise import AdviseRequest
    from engine.calibration import Calibration
    from engine.profile import Profile


class Fidelity(str, Enum):
    ANALYTIC = "analytic"
    ATOMIC = "atomic"
    COMBINED = "combined"
    CALIBRATED = "calibrated"

    @property
    def needs_profile(self) -> bool:
        return self in (Fidelity.ATOMIC, Fidelity.COMBINED)


@dataclass(frozen=True)
class ProfileUse:
    """Where a measured cost model's profile came from and what it holds."""

    source: str  # the profile file
    from_cache: bool  # True: nothing was probed for this run
    counts_by_basis: Mapping[str, int] = field(default_factory=dict)  # measurements: measured, preset, ...
    estimated_states: int = 0  # states priced from atomic costs where no schedule was measured

    def to_dict(self) -> dict[str, Any]:
        c = self.counts_by_basis
        return {
            "profile_source": self.source,
            "profile_from_cache": self.from_cache,
            "measured_count": c.get("measured", 0),
            "preset_count": c.get("preset", 0),
            "measured_plus_preset_count": c.get("measured+preset", 0),
            "estimated_count": c.get("estimated-from-atomic", 0) + self.estimated_states,
        }


@dataclass(frozen=True)
class CostModelDescription:
    fidelity: str
    basis: str  # one line: what the figures rest on
    details: Mapping[str, Any] = field(default_factory=dict)  # the fidelity's own figures
    profile: ProfileUse | None = None

    def to_dict(self) -> dict[str, Any]:
        doc = {"fidelity": self.fidelity, "basis": self.basis, **self.details}
        if self.profile is not None:
            doc.update(self.profile.to_dict())
        return doc


Factory = Callable[["AdviseRequest", "Profile | None", "ProfileUse | None"], CostModel]


def _analytic(request: "AdviseRequest", profile: "Profile | None", use: ProfileUse | None) -> CostModel:
    return AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens,
                             attention_tokens=request.attention_tokens,
                             kv_bytes_per_element=request.kv_bytes_per_element)


def _atomic(request: "AdviseRequest", profile: "Profile | None", use: ProfileUse | None,
            kernels: str = "llama.cpp") -> CostModel:
    from engine.measured_cost import AtomicCostModel

    return AtomicCostModel(_needed(profile, "atomic"), n_blocks=request.model.n_blocks, use=use,
                           llama_cpp=_llama_cpp_lane(request) if kernels == "llama.cpp" else None)


def _combined(request: "AdviseRequest", profile: "Profile | None", use: ProfileUse | None,
              kernels: str = "llama.cpp") -> CostModel:
    from engine.measured_cost import CombinedCostModel

    atomic = _atomic(request, profile, use, kernels)
    return CombinedCostModel(_needed(profile, "combined"), atomic, use=use)


def _llama_cpp_lane(request: "AdviseRequest"):  # type: ignore[no-untyped-def]
    """llama.cpp's CPU expert lane on the request's CPU: the probe's over the kernel
    speedup, bounded by the analytic model's saturated lane (engine/measured_cost.py)."""
    from engine.measured_cost import LLAMA_CPP_KERNEL_SPEEDUP, LlamaCppCpuLane

    analytic = AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens)
    return LlamaCppCpuLane(LLAMA_CPP_KERNEL_SPEEDUP, analytic.cpu_bytes_per_s * analytic.a.cpu_bandwidth_efficiency,
                           float(request.model.expert_bytes(request.quant)))


def _calibrated(request: "AdviseRequest", calibration: "Calibration | None", use: ProfileUse | None) -> CostModel:
    from engine.calibrated_cost import CalibratedCostModel

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


def build_cost_model(fidelity: Fidelity | str, request: "AdviseRequest", profile: "Profile | None" = None,
                     use: ProfileUse | None = None, *, calibration: "Calibration | None" = None,
                     kernels: str = "llama.cpp") -> CostModel:
    """The cost model of `fidelity` for `request`; atomic and combined need `profile`,
    calibrated needs `calibration` (and takes its file from `use.source`). `kernels`: whose
    CPU kernels the measured fidelities price: llama.cpp's (every estimate for a runtime)
    or the probe's own ("probe": validation against COPE's executor, which runs them)."""
    if kernels not in KERNELS:
        raise ValueError(f"kernels must be one of {KERNELS}, not {kernels!r}")
    wanted = Fidelity(fidelity)
    if wanted.needs_profile:
        return FACTORIES[wanted](request, profile, use, kernels)  # type: ignore[call-arg]
    basis = calibration if wanted is Fidelity.CALIBRATED else profile
    return FACTORIES[wanted](request, basis, use)  # type: ignore[arg-type]
