"""The Policy Matrix and how its candidates play out on a trace, without time: the
candidates (`policy`), the step-wise residency rules and caches (`residency`,
`residency_caches`), hit curves (`hit_curves`), the token-major replay and its engines
(`replay`, `replay_common`, `replay_compiled`, `replay_kernels`, `compiled`: loading
numba's loops and running them on every core, `kernel_cache`: how they are compiled),
llama.cpp's expert cache replayed (`moe_cache_kernels`) and hit rates (`hit_rates`).

May import: engine.core, engine.models, engine.hardware, engine.traces (numba only
through `compiled`, inside its functions).
"""
