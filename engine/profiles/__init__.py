"""Measured costs: the `Profile` of operators and layer steps (`profile`), its keys and
file (`profile_keys`, `profile_io`), which probes to run (`probe_plan`), whether a
series is consistent enough to price with (`probe_consistency`) and profiles measured at
other thread counts (`profile_threads`). The probes themselves are in probes/.

May import: engine.core, engine.models, engine.hardware, engine.traces, engine.replays.
"""
