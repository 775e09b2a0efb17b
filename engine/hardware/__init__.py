"""The machine: `Platform` and its facts (`platform`), the GPU and CPU presets and
their names (`presets`, `cpu_presets`, `preset_names`, `asset_rows`, `gpu_match`), memory
specs and bandwidth (`memory_spec`, `bandwidth_store`), the CPU a plan uses
(`cpu_choice`), a CPU's compute peak (`cpu_compute`), and what fits its VRAM and RAM
(`memory`, `host_memory`).

May import: engine.core, engine.models.
"""
