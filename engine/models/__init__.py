"""A model's shape and its bytes: `ModelSpec` (`model`, `attention`), quantizations and
llama.cpp's per-tensor mixes (`quant`, `quant_mix`, `exact_bytes`), the tensors a GGUF
holds (`gguf_tensors`, `block_tensors`), the catalog and config.json readers (`catalog`,
`hf_config*`) and GGUF file names (`model_names`).

May import: engine.core.
"""
