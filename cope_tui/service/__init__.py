"""The service layer: what the front ends do, once (the role llama.cpp's common/ plays
for its tools).

Each module holds typed functions that take values (PlanChoices, an AdviseRequest, a
parsed command) and return frozen dataclasses; the command line renders them as text or
JSON, the app's workers post them to the panes. Nothing here imports textual; torch
loads only where something is measured or executed.

- request: PlanChoices -> AdviseRequest (defaults recorded as assumptions)
- pricing: the cost-model policy, probing then pricing
- advice: plan (the main job), the VRAM sweep, a pasted llama.cpp command priced
"""
