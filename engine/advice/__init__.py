"""The answers: the advise pipeline and its `Recommendation` (`advise`), what to run
(`run_advice`), whole-request workloads (`workload`), a pasted command priced beside the
ranking (`command_estimate`, `command_prefill`, `command_flags`), `cope calibrate`'s runs
and fit (`calibration_runs`, `calibration_fit`), accuracy figures (`accuracy`,
`thread_speedup`) and the JSON document (`report`).

May import: every other engine package (it is the top layer).
"""
