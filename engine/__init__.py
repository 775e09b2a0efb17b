"""COPE's pure computation: model shapes, routing traces, the Policy Matrix, replay,
cost models, llama.cpp's command line, the runtimes and the advice built from them.
Imports numpy, platformdirs (the cache folder) and the standard library only (no torch, no
textual; numba only inside engine.replays.compiled, and pyarrow / safetensors only inside the
readers that need them).

The sub-packages are layers: each imports only the ones listed before it (bottom first),
never one after it (tests/test_import_structure.py checks this, and that there is no
import cycle):

    core       errors, files and user paths, input limits, assets, cache folders, names, progress
    models     ModelSpec, attention, quantizations and llama.cpp's mixes, GGUF tensors, catalog, config.json
    hardware   Platform, GPU and CPU presets, memory specs, CPU choice and compute, VRAM and RAM fit
    traces     RoutingTrace, its file formats, synthetic traces, the dataset card, prompt sets
    replays    the Policy Matrix, residency rules, hit curves, the replay engines (numba kernels)
    profiles   measured Profiles, their files and keys, probe plans, probe consistency
    cost       the CostModel protocol, AdviseRequest, analytic / measured / calibrated models, prefill, TPOT
    llamacpp   llama.cpp's flags (read and written), builds, -ot regexes, placement, --fit, llama-bench JSON
    runtimes   the runtime registry (llama.cpp, ik_llama.cpp, the fork, SGLang + kt-kernel), export
    advice     advise, what to run, workloads, pasted commands, calibration runs and fit, the JSON report
"""

LAYERS = ("core", "models", "hardware", "traces", "replays", "profiles", "cost", "llamacpp", "runtimes", "advice")
