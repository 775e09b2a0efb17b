"""What every layer of the engine leans on, and nothing above it: one-line errors
(`errors`), reading and writing the user's files (`files`, `user_paths`, `input_limits`),
the shipped assets (`assets_io`), the cache folders (`cache_dirs`), names and numbers in
messages (`names`, `spans`), progress with cancellation (`progress`) and records written as
JSON objects (`records`: a frozen dataclass's fields, in order).

May import: the standard library and numpy only; no other engine package.
"""
