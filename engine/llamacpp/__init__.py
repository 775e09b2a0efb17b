"""llama.cpp's command line and what it does with it: the flags read (`llama_args`,
`llama_repeats`) and written (`llamacpp_flags`), which spellings a build takes
(`builds`), `-ot` patterns as std::regex matches them (`ecma_regex`) and as a command's
overrides (`tensor_overrides`), where a command puts the weights and what a token then costs
(`llama_placement`), `--fit` (`llama_fit`), llama.cpp's own expert cache (`moe_cache`,
`moe_cache_price`) and llama-bench's JSON (`llama_bench_json`).

May import: every engine package below it: core, models, hardware, traces, replays,
profiles, cost.
"""
