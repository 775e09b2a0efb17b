"""What the command COPE prints for its best keeps of the user's own llama.cpp command.

`cope estimate` prices COPE's candidates at the user's settings (context, threads, the KV
cache types, ...), so the command it prints for one must run with those settings too:
every argument of the user's command is kept, verbatim and in the user's order, after
COPE's own, except

- the flags that set the placement (`-ngl`, `-ot`, `--cpu-moe`, `--n-cpu-moe`): COPE's
  command sets its own;
- the flags COPE's command sets itself (`-m`, `-c`, `-t`, `--fit`, ...): its values are
  the ones it was priced at; the user's `-fa` value replaces COPE's default in place;
- how the weights are loaded (`--no-mmap`, `--mmap`, `-lm`, `-mmp`) when COPE decided it
  from RAM (engine/runtimes/host.py), and the op-offload switches when COPE's command
  stages CPU experts with GGML_OP_OFFLOAD_MIN_BATCH.

VAR=value words before the program are kept too (GGML_OP_OFFLOAD_MIN_BATCH only when
COPE's command sets it).
"""

from __future__ import annotations

from dataclasses import replace

from engine.llamacpp.command_line import Arg, CommandLine
from engine.llamacpp.llama_args import LlamaCommand
from engine.llamacpp.llamacpp_flags import OFFLOAD_ENV
from engine.runtimes.export import Export
from engine.runtimes.host import MAPPED_NOTE

# Where the experts run: COPE's command sets it. llama.cpp's expert cache is part of it: the
# ranking's commands are priced without one, so a cache of the user's would change the figure.
PLACEMENT = frozenset({"gpu_layers", "override_tensor", "cpu_moe", "n_cpu_moe", "moe_cache_mib",
                       "moe_cache_cpu_share"})
# Loading: -lm/--load-mode, --no-mmap and llama-bench's -mmp (read by COPE), and the
# spellings it lists as not modelled: --mmap, llama-bench's -dio/--direct-io.
MMAP_FAMILY = frozenset({"no_mmap", "bench_mmap", "load_mode", "--mmap", "-dio", "--direct-io"})
STAGING = frozenset({"no_op_offload", "op_offload", "bench_no_op_offload"})
MODEL_SOURCES = frozenset({"hf_repo", "hf_file", "model_url"})
USER_VALUE = frozenset({"flash_attn"})  # COPE's command sets a default; the user's value wins
# Kept flags whose effect the candidates' figures do not include: said with the command.
KEPT_UNPRICED = {"no_kv_offload": "your -nkvo is kept: the candidates were priced with the KV cache in VRAM and "
                                  "attention on the GPU, so this command uses less VRAM and decodes slower than "
                                  "its figure"}


def carry_over(export: Export, command: LlamaCommand) -> Export:
    """`export` with the user's non-placement arguments and environment kept."""
    cope = export.command  # its arguments keyed as the reader keys the user's (Arg.key)
    drop = set(PLACEMENT) | cope.keys
    if cope.keys & MMAP_FAMILY or any(n.startswith(MAPPED_NOTE) for n in export.notes):
        drop |= MMAP_FAMILY
    if OFFLOAD_ENV in export.env_dict:
        drop |= STAGING
    theirs = {key: tuple(w for k, words in command.args if k == key for w in words) for key in USER_VALUE}
    user_keys = {key for key, _ in command.args}
    # The user's -hf/-hff/-mu name the model: COPE's -m (a placeholder file name) gives way.
    hub_model = "model" not in user_keys and bool(user_keys & MODEL_SOURCES)
    args = tuple(Arg(arg.key, theirs[arg.key]) if arg.key in USER_VALUE and theirs[arg.key] else arg
                 for arg in cope.args if not (arg.key == "model" and hub_model))
    kept = tuple(Arg(key, words) for key, words in command.args if key not in drop)
    env = cope.env + tuple((k, v) for k, v in command.env_words if k != OFFLOAD_ENV and k not in export.env_dict)
    notes = tuple(note for key, note in KEPT_UNPRICED.items() if key in {arg.key for arg in kept})
    return replace(export, command=CommandLine(cope.binary, args + kept, env), notes=export.notes + notes)
