"""Time: the `CostModel` protocol, its description and the fidelities (`cost_model`), the
request every model is built from (`request`: `AdviseRequest`), the analytic, measured
and calibrated models (`analytic_cost`, `measured_cost`, `calibrated_cost`,
`calibration`, `calibration_io`), the registry that builds one (`cost_models`), prefill
(`prefill_cost`) and TPOT from a replay's histogram (`estimate`).

May import: engine.core, engine.models, engine.hardware, engine.traces, engine.replays,
engine.profiles.
"""
