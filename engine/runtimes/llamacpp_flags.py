"""llama.cpp's flags, one declarative table: each setting and how each binary spells it.

Where each flag comes from (ggml-org/llama.cpp):
- common/arg.cpp (llama-server, llama-cli): `-m/--model`, `-ngl/--gpu-layers/
  --n-gpu-layers`, `-c/--ctx-size`, `-t/--threads`, `-fa/--flash-attn [on|off|auto]`,
  `-fit/--fit [on|off]` (default on), `--mmap/--no-mmap`, `-ot/--override-tensor
  <pattern>=<buffer>,...` (split on ',' by parse_tensor_buffer_overrides),
  `-cmoe/--cpu-moe`, `-ncmoe/--n-cpu-moe N` (one override per block i < N).
- common/common.h: the expert-tensor regex LLM_FFN_EXPS_REGEX =
  `\\.ffn_(up|down|gate|gate_up)_(ch|)exps`, per block `blk\\.%d` + that regex.
- tools/llama-bench/llama-bench.cpp (its own parser): `-m`, `-ngl`, `-t`,
  `-fa <on|off|auto>` via is_truthy (which also takes "1", as older builds needed),
  `-ncmoe/--n-cpu-moe`, `-ot` (',' separates test configurations, ';' overrides),
  `-mmp/--mmap <0|1>`,
  `-p`, `-n`, `-r`, `-o json`. It has no `-c`, no `--fit` (it fits only with
  `-fitt`) and no `--cpu-moe`, and splits `-m` on ','.
- Newer builds (the llama.cpp that llama-cpp-python 0.3.36 vendors) dropped `--mmap/--no-mmap`
  and llama-bench's `-mmp` for `-lm/--load-mode <auto|none|mmap|mlock|mmap+mlock|dio>`
  (common/arg.cpp and llama-bench.cpp {-lm,--load-mode}); `spelled_for_build` rewrites a
  command for the build whose `--help` it is given, and exports say so in a note.
- ggml/src/ggml-cuda/ggml-cuda.cu: getenv("GGML_OP_OFFLOAD_MIN_BATCH"), default 32.
- The MoE expert-cache fork's `--moe-cache-profile FILE.csv --moe-cache-slots S` with
  `-ngl 99 -ncmoe 99`: thecodacus/llama.cpp README.md ("MoE expert cache").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

BINARIES = ("llama-server", "llama-cli", "llama-bench")
SERVER_LIKE = ("llama-server", "llama-cli")

# common/common.h LLM_FFN_EXPS_REGEX: every expert tensor of a block, merged gate_up too.
EXPS_REGEX_TAIL = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
OFFLOAD_ENV = "GGML_OP_OFFLOAD_MIN_BATCH"
MIN_GPU_LAYERS_FLAG = 99


@dataclass(frozen=True)
class Flag:
    """One setting and how each binary spells it; `None`: the binary has no such flag.

    `values` maps a binary to the literal value it takes when the setting's value is
    fixed (e.g. flash attention on is "on" for llama-server, "1" for llama-bench).
    """

    setting: str
    spelling: Mapping[str, str | None]
    source: str
    values: Mapping[str, str] = field(default_factory=dict)


def _all(spelling: str) -> dict[str, str]:
    return {b: spelling for b in BINARIES}


FLAG_TABLE: tuple[Flag, ...] = (
    Flag("model", _all("-m"), "arg.cpp {-m,--model}; llama-bench.cpp -m"),
    Flag("gpu_layers", _all("-ngl"), "arg.cpp {-ngl,--gpu-layers,--n-gpu-layers}; llama-bench.cpp -ngl"),
    Flag("flash_attn", _all("-fa"), "arg.cpp {-fa,--flash-attn} [on|off|auto]; llama-bench.cpp -fa via is_truthy",
         values={"llama-server": "on", "llama-cli": "on", "llama-bench": "1"}),
    Flag("context", {"llama-server": "-c", "llama-cli": "-c", "llama-bench": None},
         "arg.cpp {-c,--ctx-size}; llama-bench has none (its context is -p + -n + -d)"),
    Flag("threads", _all("-t"), "arg.cpp {-t,--threads}; llama-bench.cpp -t"),
    Flag("fit", {"llama-server": "--fit", "llama-cli": "--fit", "llama-bench": None},
         "arg.cpp {-fit,--fit} [on|off], default on; llama-bench fits only with -fitt",
         values={"llama-server": "off", "llama-cli": "off"}),
    Flag("n_cpu_moe", {"llama-server": "--n-cpu-moe", "llama-cli": "--n-cpu-moe", "llama-bench": "-ncmoe"},
         "arg.cpp {-ncmoe,--n-cpu-moe} N; llama-bench.cpp -ncmoe"),
    Flag("fork_n_cpu_moe", {"llama-server": "-ncmoe", "llama-cli": "-ncmoe", "llama-bench": None},
         "thecodacus/llama.cpp README.md: the fork runs with -ncmoe 99"),
    Flag("cpu_moe", {"llama-server": "--cpu-moe", "llama-cli": "--cpu-moe", "llama-bench": None},
         "arg.cpp {-cmoe,--cpu-moe}; llama-bench has none: -ncmoe <blocks> instead"),
    Flag("override_tensor", _all("-ot"), "arg.cpp {-ot,--override-tensor}; llama-bench.cpp -ot"),
    Flag("no_mmap", {"llama-server": "--no-mmap", "llama-cli": "--no-mmap", "llama-bench": "-mmp"},
         "arg.cpp {--mmap,--no-mmap}; llama-bench.cpp {-mmp,--mmap} <0|1>",
         values={"llama-bench": "0"}),
    Flag("moe_cache_profile", {"llama-server": "--moe-cache-profile", "llama-cli": "--moe-cache-profile",
                               "llama-bench": None}, "thecodacus/llama.cpp README.md"),
    Flag("moe_cache_slots", {"llama-server": "--moe-cache-slots", "llama-cli": "--moe-cache-slots",
                             "llama-bench": None}, "thecodacus/llama.cpp README.md"),
    Flag("n_prompt", {"llama-server": None, "llama-cli": None, "llama-bench": "-p"}, "llama-bench.cpp -p"),
    Flag("n_gen", {"llama-server": None, "llama-cli": None, "llama-bench": "-n"}, "llama-bench.cpp -n"),
    Flag("repetitions", {"llama-server": None, "llama-cli": None, "llama-bench": "-r"}, "llama-bench.cpp -r"),
    Flag("output", {"llama-server": None, "llama-cli": None, "llama-bench": "-o"}, "llama-bench.cpp -o json"),
)
_FLAGS = {f.setting: f for f in FLAG_TABLE}


def flag_args(binary: str, setting: str, value: object | None = None) -> list[str]:
    """The argument(s) that set `setting` for `binary`; [] when the binary lacks it."""
    flag = _FLAGS[setting]
    spelling = flag.spelling.get(binary)
    if spelling is None:
        return []
    if value is None:
        value = flag.values.get(binary)
    return [spelling] if value is None else [spelling, str(value)]


def layer_set_regex(blocks: Sequence[int]) -> str:
    """One -ot pattern for the expert tensors of `blocks`: no comma, dot after the number."""
    if not blocks:
        raise ValueError("an empty layer set has no override")
    alternation = "|".join(str(b) for b in sorted(set(int(b) for b in blocks)))
    return rf"blk\.({alternation}){EXPS_REGEX_TAIL}"


def load_mode_note(binary: str) -> str:
    """What a newer build takes in place of this binary's no-mmap flag."""
    old = " ".join(flag_args(binary, "no_mmap"))
    return f"newer llama.cpp builds take -lm none in place of {old}"


def spelled_for_build(argv: Sequence[str], help_text: str) -> list[str]:
    """`argv` as the build whose `--help` printed `help_text` takes it: a build that knows
    `--load-mode` but not `--no-mmap`/`-mmp` gets `-lm none` for them."""
    knows_load_mode = "--load-mode" in help_text
    knows_old = "--no-mmap" in help_text or "-mmp" in help_text
    if not knows_load_mode or knows_old:
        return list(argv)
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--no-mmap":
            out += ["-lm", "none"]
        elif argv[i] in ("-mmp", "--mmap") and i + 1 < len(argv):
            out += ["-lm", "none" if argv[i + 1] == "0" else "mmap"]
            i += 1
        else:
            out.append(argv[i])
        i += 1
    return out
