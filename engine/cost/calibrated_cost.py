"""The calibrated cost model: the analytic model with this machine's measured lane constants.

`cope calibrate` fits the constants a few llama-bench runs of the user's GGUF determine
(engine/advice/calibration_fit.py); the rest keep the global fit. The GPU's constants apply only
when the plan is for the GPU the runs used; a plan for another card keeps the CPU's.
"""

from __future__ import annotations

from dataclasses import asdict

from engine.cost.analytic_cost import AnalyticCostModel
from engine.cost.calibration import Calibration
from engine.cost.cost_model import CostModelDescription
from engine.cost.request import AdviseRequest


class CalibratedCostModel(AnalyticCostModel):
    fidelity = "calibrated"

    def __init__(self, request: "AdviseRequest", calibration: Calibration, *, source: str = ""):
        base = AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens)
        self.gpu_matches = bool(calibration.gpu_name) and calibration.gpu_name == request.platform.gpu.name
        assumptions = calibration.assumptions(base.cpu_bytes_per_s, base.gpu_bytes_per_s, gpu_matches=self.gpu_matches,
                                              base=base.a)
        super().__init__(request.model, request.quant, request.platform, context_tokens=request.context_tokens,
                         attention_tokens=request.attention_tokens,
                         kv_bytes_per_element=request.kv_bytes_per_element, assumptions=assumptions)
        self.calibration = calibration
        self.source = source

    def describe(self) -> CostModelDescription:
        cal = self.calibration
        kept = "" if self.gpu_matches or not cal.gpu_name else f"; its GPU constants ({cal.gpu_name}) not used for this GPU"
        details = dict(super().describe().details)
        details.update({"calibration_source": self.source, "calibration_date": cal.date,
                        "calibration_build_commit": cal.build_commit, "calibration_gguf": cal.gguf_name,
                        "calibrated_constants": dict(cal.constants.values), "assumptions": asdict(self.a)})
        return CostModelDescription(self.fidelity, cal.describe() + kept, details)
