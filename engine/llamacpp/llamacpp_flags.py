"""llama.cpp's flags, one declarative table: each setting, the names COPE reads it by and
how each binary spells it when COPE writes it.

The reader (engine/llamacpp/llama_args.py) takes a command line by the names (`names`,
`takes_value`); the writer (engine/llamacpp/command_line.py, engine/runtimes/llamacpp.py)
spells a setting by its per-binary spellings (`spelling`). A setting only read (-hf, -ub,
-ctk, ...) has no spellings; one only written (-r, -o, the forks' flags) has no names, and
a written option that names another setting's flag (`-lm none` for a copy, the fork's
-ncmoe) is read as that one (`read_key`).

Where each flag comes from (ggml-org/llama.cpp):
- common/arg.cpp (llama-server, llama-cli): `-m/--model`, `-ngl/--gpu-layers/
  --n-gpu-layers`, `-c/--ctx-size`, `-t/--threads`, `-fa/--flash-attn [on|off|auto]`,
  `-fit/--fit [on|off]` (default on), `-lm/--load-mode`, `-ot/--override-tensor
  <pattern>=<buffer>,...` (split on ',' by parse_tensor_buffer_overrides),
  `-cmoe/--cpu-moe`, `-ncmoe/--n-cpu-moe N` (one override per block i < N).
- common/common.h: the expert-tensor regex LLM_FFN_EXPS_REGEX =
  `\\.ffn_(up|down|gate|gate_up)_(ch|)exps`, per block `blk\\.%d` + that regex.
- tools/llama-bench/llama-bench.cpp (its own parser): `-m`, `-ngl`, `-t`,
  `-fa <on|off|auto>` via is_truthy (which also takes "1", as older builds needed),
  `-ncmoe/--n-cpu-moe`, `-ot` (',' separates test configurations, ';' overrides),
  `-lm/--load-mode`, `-p`, `-n`, `-r`, `-o json`. It has no `-c`, no `--fit` (it fits
  only with `-fitt`) and no `--cpu-moe`, and splits `-m` on ','.
- Spellings change: `-lm/--load-mode <auto|none|mmap|mlock|mmap+mlock|dio>` came on
  2026-07-23 (#20834) and `--mmap/--no-mmap` and llama-bench's `-mmp` went on 2026-09-09
  (#28334); `--fit` came on 2025-12-15 (#16653). Each setting lists its spellings newest
  first and a build takes the first it lists (`spelling_for`, engine/llamacpp/builds.py):
  a command is spelled for the build found on this machine, or for the shipped manifest's.
- ggml/src/ggml-cuda/ggml-cuda.cu: getenv("GGML_OP_OFFLOAD_MIN_BATCH"), default 32.
- The MoE expert-cache fork's `--moe-cache-profile FILE.csv --moe-cache-slots S` with
  `-ngl 99 -ncmoe 99`: thecodacus/llama.cpp README.md ("MoE expert cache").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

if TYPE_CHECKING:
    from engine.llamacpp.builds import LlamaBuild

BINARIES = ("llama-server", "llama-cli", "llama-bench")
SERVER_LIKE = ("llama-server", "llama-cli")

# common/common.h LLM_FFN_EXPS_REGEX: every expert tensor of a block, merged gate_up too.
EXPS_REGEX_TAIL = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
OFFLOAD_ENV = "GGML_OP_OFFLOAD_MIN_BATCH"
MIN_GPU_LAYERS_FLAG = 99


@dataclass(frozen=True)
class Spelling:
    """One way a binary spells a setting: the option and, when the setting's value is
    fixed, that value (flash attention on is "on" for llama-server, "1" for llama-bench);
    `switch`: the option takes no value."""

    option: str
    value: str | None = None
    switch: bool = False


@dataclass(frozen=True)
class Flag:
    """One setting: the names llama.cpp accepts for it, which the reader takes (`takes_value`
    False: a switch), and how each binary spells it when written, newest spelling first; a
    build (engine/llamacpp/builds.py) takes the first spelling it lists. A binary without
    the setting has no entry. `optional`: left out for a build that lists none of the
    spellings (an old build without --fit does not fit on its own); otherwise the first
    spelling is used and the command says the build does not list it."""

    setting: str
    names: tuple[str, ...] = ()  # read: every name llama.cpp accepts (none: COPE never reads it)
    takes_value: bool = True
    spelling: Mapping[str, tuple[Spelling, ...]] = field(default_factory=dict)  # written (empty: never)
    source: str = ""
    optional: bool = False
    # What builds before the first spelling took, for the command's comment; {new} and
    # {old} stand for the first and the last spelling.
    older: str = ""
    # Per binary: since when builds have the setting at all, for the command's comment
    # (a build older than that refuses the option).
    since: Mapping[str, str] = field(default_factory=dict)


def _all(option: str) -> dict[str, tuple[Spelling, ...]]:
    return {b: (Spelling(option),) for b in BINARIES}


def _server(*spellings: Spelling) -> dict[str, tuple[Spelling, ...]]:
    return {b: spellings for b in SERVER_LIKE}


# Since when llama.cpp has the placement options COPE writes (ggml-org/llama.cpp pull
# requests, all merged): a build older than that refuses the option.
SINCE_OT = "-ot needs a build with #11397 (2025-04, tensor buffer overrides)"
SINCE_BENCH_OT = "llama-bench takes -ot from #12922 (2025-04)"
SINCE_CPU_MOE = "{option} needs b6089 (#15077, 2025-08-04) or later; older builds take the same layers as -ot"
SINCE_BENCH_NCMOE = "llama-bench takes -ncmoe from #15952 (2025-09); older ones take the same layers as -ot"

FLAG_TABLE: tuple[Flag, ...] = (
    Flag("model", ("-m", "--model"), spelling=_all("-m"), source="arg.cpp {-m,--model}; llama-bench.cpp -m"),
    # The model from the Hub or a URL instead of a file (common/arg.cpp: -hf <user>/<model>[:quant],
    # the quant tag Q4_K_M when left out; -hff a file of that repo; -mu a URL).
    Flag("hf_repo", ("-hf", "-hfr", "--hf-repo")),
    Flag("hf_file", ("-hff", "--hf-file")),
    Flag("model_url", ("-mu", "--model-url")),
    Flag("gpu_layers", ("-ngl", "--gpu-layers", "--n-gpu-layers"), spelling=_all("-ngl"),
         source="arg.cpp {-ngl,--gpu-layers,--n-gpu-layers}; llama-bench.cpp -ngl"),
    Flag("override_tensor", ("-ot", "--override-tensor"), spelling=_all("-ot"),
         source="arg.cpp {-ot,--override-tensor}; llama-bench.cpp -ot",
         since={**{b: SINCE_OT for b in SERVER_LIKE}, "llama-bench": SINCE_BENCH_OT}),
    Flag("cpu_moe", ("-cmoe", "--cpu-moe"), False, _server(Spelling("--cpu-moe", switch=True)),
         "arg.cpp {-cmoe,--cpu-moe}; llama-bench has none: -ncmoe <blocks> instead",
         since={b: SINCE_CPU_MOE.format(option="--cpu-moe") for b in SERVER_LIKE}),
    Flag("n_cpu_moe", ("-ncmoe", "--n-cpu-moe"),
         spelling={**_server(Spelling("--n-cpu-moe")), "llama-bench": (Spelling("-ncmoe"),)},
         source="arg.cpp {-ncmoe,--n-cpu-moe} N; llama-bench.cpp -ncmoe",
         since={**{b: SINCE_CPU_MOE.format(option="--n-cpu-moe") for b in SERVER_LIKE},
                "llama-bench": SINCE_BENCH_NCMOE}),
    Flag("fork_n_cpu_moe", spelling={**_server(Spelling("-ncmoe")), "llama-bench": (Spelling("-ncmoe"),)},
         source="thecodacus/llama.cpp README.md: the fork runs with -ncmoe 99"),
    Flag("threads", ("-t", "--threads"), spelling=_all("-t"), source="arg.cpp {-t,--threads}; llama-bench.cpp -t"),
    Flag("context", ("-c", "--ctx-size"), spelling=_server(Spelling("-c")),
         source="arg.cpp {-c,--ctx-size}; llama-bench has none (its context is -p + -n + -d)"),
    # Read as a value; older builds took a switch (the reader gives it "on").
    Flag("flash_attn", ("-fa", "--flash-attn"),
         spelling={**_server(Spelling("-fa", "on"), Spelling("-fa", switch=True)),
                   "llama-bench": (Spelling("-fa", "1"),)},
         source="arg.cpp {-fa,--flash-attn} [on|off|auto] (a switch in older builds); llama-bench.cpp -fa via "
         "is_truthy", older="builds before b6327 (2025-08-30) take {old} alone in place of {new}",
         since={"llama-bench": "llama-bench takes -fa from #5021 (flash attention, 2024-04-30)"}),
    Flag("no_op_offload", ("--no-op-offload",), False),
    Flag("op_offload", ("--op-offload",), False),
    Flag("bench_no_op_offload", ("-nopo",)),  # llama-bench: -nopo <0|1>
    Flag("fit", ("-fit", "--fit"), spelling=_server(Spelling("--fit", "off")),
         source="arg.cpp {-fit,--fit} [on|off], default on since 2025-12-15 (#16653); llama-bench fits only with "
         "-fitt", optional=True, older="builds before 2025-12-15 have no --fit (leave out {new})"),
    # The VRAM --fit leaves free on each device (arg.cpp {-fitt,--fit-target} MiB[,MiB...], default
    # 1024): how a VRAM budget below the card is said to llama.cpp's own placement.
    Flag("fit_target", ("-fitt", "--fit-target"), spelling=_server(Spelling("-fitt")),
         source="arg.cpp {-fitt,--fit-target} MiB a device (default 1024)",
         since={b: "-fitt came with --fit (#16653, 2025-12-15; a value a device from #18679, 2026-01)"
                for b in SERVER_LIKE}),
    # A copy of the weights instead of the mapped file: -lm none since 2026-07-23 (#20834);
    # --no-mmap and llama-bench's -mmp were removed on 2026-09-09 (#28334). Read: --no-mmap
    # here, -mmp as bench_mmap and -lm as load_mode.
    Flag("no_mmap", ("--no-mmap",), False,
         {**_server(Spelling("-lm", "none"), Spelling("--no-mmap", switch=True)),
          "llama-bench": (Spelling("-lm", "none"), Spelling("-mmp", "0"))},
         "arg.cpp {-lm,--load-mode} (was {--mmap,--no-mmap}); llama-bench.cpp {-lm,--load-mode} (was {-mmp,--mmap} <0|1>)",
         optional=True, older="builds before 2026-07-23 take {old} in place of {new}"),
    Flag("bench_mmap", ("-mmp",)),  # llama-bench: -mmp <0|1>
    # Builds since 2026-07-23 (#20834): -lm/--load-mode auto|none|mmap|mlock|mmap+mlock|dio
    # (common/arg.cpp, llama-bench.cpp); none and dio read the weights into memory, the rest map them.
    Flag("load_mode", ("-lm", "--load-mode")),
    # llama-bench's decode test: -n tokens from depth -d (tools/llama-bench/llama-bench.cpp).
    Flag("n_depth", ("-d", "--n-depth")),
    Flag("n_gen", ("-n", "--n-gen", "--n-predict"), spelling={"llama-bench": (Spelling("-n"),)},
         source="llama-bench.cpp -n"),
    # Prompt processing: llama-bench's -p (prompt tokens of its pp test; llama-cli's -p is the
    # prompt text, not read), the micro-batch and the logical batch (common/arg.cpp
    # --ubatch-size/--batch-size), the batch threads, and ik_llama.cpp's run-time repack.
    Flag("n_prompt", ("-p", "--n-prompt"), spelling={"llama-bench": (Spelling("-p"),)}, source="llama-bench.cpp -p"),
    Flag("ubatch", ("-ub", "--ubatch-size"), spelling=_all("-ub"),
         source="arg.cpp {-ub,--ubatch-size}; llama-bench.cpp -ub"),
    Flag("batch", ("-b", "--batch-size"), spelling=_all("-b"), source="arg.cpp {-b,--batch-size}; llama-bench.cpp -b"),
    Flag("threads_batch", ("-tb", "--threads-batch")),
    Flag("repack", ("-rtr", "--run-time-repack")),  # a switch in the server, -rtr <0|1> in llama-bench
    # The KV cache in host memory (arg.cpp {-kvo,--kv-offload} / {-nkvo,--no-kv-offload}; llama-bench -nkvo <0|1>).
    Flag("no_kv_offload", ("-nkvo", "--no-kv-offload")),  # a switch in the server, <0|1> in llama-bench
    Flag("kv_offload", ("-kvo", "--kv-offload"), False),
    Flag("cache_type_k", ("-ctk", "--cache-type-k"), spelling=_all("-ctk"),
         source="arg.cpp {-ctk,--cache-type-k}; llama-bench.cpp -ctk"),
    Flag("cache_type_v", ("-ctv", "--cache-type-v"), spelling=_all("-ctv"),
         source="arg.cpp {-ctv,--cache-type-v}; llama-bench.cpp -ctv"),
    # More than one GPU (common/arg.cpp at 0c1e570: -sm/--split-mode, -ts/--tensor-split,
    # -dev/--device, -mg/--main-gpu), placed by engine/llamacpp/device_split.py.
    Flag("split_mode", ("-sm", "--split-mode")),
    # Two or more cards (0c1e570): arg.cpp {-ts,--tensor-split} N0,N1 (',' or '/' between
    # devices); llama-bench.cpp {-ts,--tensor-split} ts0/ts1 (',' separates test configurations)
    Flag("tensor_split", ("-ts", "--tensor-split"), spelling=_all("-ts"),
         source="arg.cpp {-ts,--tensor-split}; llama-bench.cpp -ts <ts0/ts1/..>"),
    # arg.cpp {-dev,--device} <dev1,dev2,..>; llama-bench.cpp {-dev,--device} <dev0/dev1/...>
    Flag("device", ("-dev", "--device"), spelling=_all("-dev"), source="arg.cpp {-dev,--device}; llama-bench.cpp -dev"),
    Flag("main_gpu", ("-mg", "--main-gpu")),
    # ik_llama.cpp's CUDA parameters (common/common.cpp {-cuda,--cuda-params}, parsed by
    # ggml/src/ggml-cuda.cu ggml_cuda_parse_params): offload every MoE matmul, whatever the batch.
    # ik's llama-bench takes the same -cuda string (examples/llama-bench/llama-bench.cpp at 8337e4c:
    # cparams.cuda_params), so its bench stages as its server does.
    Flag("cuda_offload_batch", spelling={b: (Spelling("-cuda", "offload-batch-size=0"),) for b in BINARIES},
         source="ikawrakow/ik_llama.cpp common/common.cpp -cuda; llama-bench.cpp -cuda; ggml-cuda.cu "
         "offload-batch-size"),
    Flag("moe_cache_profile", spelling=_server(Spelling("--moe-cache-profile")), source="thecodacus/llama.cpp README.md"),
    Flag("moe_cache_slots", spelling=_server(Spelling("--moe-cache-slots")), source="thecodacus/llama.cpp README.md"),
    # llama.cpp's GPU cache of host experts (since b11480, PR #29887; engine/llamacpp/moe_cache.py):
    # common/arg.cpp {--moe-cache-mib} N, the cache's size in MiB.
    Flag("moe_cache_mib", ("--moe-cache-mib",), spelling=_server(Spelling("--moe-cache-mib")),
         source="arg.cpp {--moe-cache-mib} N (b11480, #29887)",
         since={b: "--moe-cache-mib needs b11480 (#29887, 2026-10) or later" for b in SERVER_LIKE}),
    # By b12191 (docs/moe-cache.md): the share F of the misses computed on the CPU once the
    # cache is full. Read, never written: how the runtime splits the misses is not modelled.
    Flag("moe_cache_cpu_share", ("--moe-cache-cpu-share",)),
    Flag("repetitions", spelling={"llama-bench": (Spelling("-r"),)}, source="llama-bench.cpp -r"),
    Flag("output", spelling={"llama-bench": (Spelling("-o"),)}, source="llama-bench.cpp -o json"),
)
_FLAGS = {f.setting: f for f in FLAG_TABLE}
# Settings every llama.cpp build has had since its 2023 releases (examples/main and server's
# gpt_params, examples/llama-bench): no version note. -dev/--device and -ts are as old for the
# builds with more than one device.
# -ctk/-ctv came with the quantized K cache (#4312, December 2023), in common and llama-bench alike.
ALWAYS = frozenset({"model", "gpu_layers", "threads", "context", "tensor_split", "device", "n_prompt", "n_gen",
                    "repetitions", "output", "ubatch", "batch", "cache_type_k", "cache_type_v"})
# The reader's index: each name llama.cpp accepts -> its setting.
READ_NAMES: Mapping[str, Flag] = {name: f for f in FLAG_TABLE for name in f.names}


def read_key(option: str) -> str:
    """The key the reader groups `option` under (engine/llamacpp/llama_args.py, LlamaCommand.args):
    its setting when COPE reads it, else the option itself, long options with '_' as '-'
    (llama.cpp folds them too)."""
    if option.startswith("--"):
        option = option.replace("_", "-")
    flag = READ_NAMES.get(option)
    return option if flag is None else flag.setting


def _accepts(build: "LlamaBuild", binary: str, spelling: Spelling) -> bool:
    program = build.program(binary)
    if program is None or not program.takes(spelling.option):
        return False
    valued = program.takes_value(spelling.option)
    return valued is None or valued != spelling.switch


def spelling_for(binary: str, setting: str, build: "LlamaBuild | None" = None) -> Spelling | None:
    """How `build` spells `setting` for `binary` (None: the newest spelling); None when
    the binary has no such setting, or the build lists none of an optional flag's."""
    flag = _FLAGS[setting]
    spellings = flag.spelling.get(binary, ())
    if not spellings:
        return None
    if build is None or build.program(binary) is None:
        return spellings[0]
    for spelling in spellings:
        if _accepts(build, binary, spelling):
            return spelling
    return None if flag.optional else spellings[0]


def _words(spelling: Spelling, value: object | None = None) -> list[str]:
    if spelling.switch:
        return [spelling.option]
    if spelling.value is not None:
        value = spelling.value
    return [spelling.option] if value is None else [spelling.option, str(value)]


def flag_args(binary: str, setting: str, value: object | None = None,
              build: "LlamaBuild | None" = None) -> list[str]:
    """The argument(s) that set `setting` for `binary` as `build` takes them; [] when
    the binary (or, for an optional flag, the build) lacks it."""
    spelling = spelling_for(binary, setting, build)
    return [] if spelling is None else _words(spelling, value)


def has_setting(binary: str, setting: str, build: "LlamaBuild | None" = None) -> bool:
    """Whether `build` lists a spelling of `setting` for `binary` (True when it does not
    say: the newest spelling is then assumed)."""
    spellings = _FLAGS[setting].spelling.get(binary, ())
    if not spellings:
        return False
    if build is None or build.program(binary) is None:
        return True
    return any(_accepts(build, binary, s) for s in spellings)


def older_spellings(binary: str, settings: Sequence[str], build: "LlamaBuild | None" = None) -> list[str]:
    """What builds older than the newest spelling take, for the settings of a command
    spelled the newest way, and since when builds have each setting at all (`since`).
    Settings not in the table (another runtime's words) are skipped."""
    out = []
    for setting in dict.fromkeys(settings):
        flag = _FLAGS.get(setting)
        if flag is None:
            continue
        spellings = flag.spelling.get(binary, ())
        if _older_applies(flag, spellings) and spelling_for(binary, setting, build) == spellings[0]:
            words = {k: " ".join(_words(sp)) for k, sp in (("new", spellings[0]), ("old", spellings[-1]))}
            out.append(flag.older.format(**words))
        if binary in flag.since and spellings:
            out.append(flag.since[binary])
    return out


def former_options(binary: str) -> frozenset[str]:
    """Options older stock builds of `binary` took that the newest spelling replaced
    (`--no-mmap`, llama-bench's `-mmp`): a command using them is an older stock build's,
    not another runtime's."""
    return frozenset(sp.option for flag in FLAG_TABLE for sp in flag.spelling.get(binary, ())[1:]
                     if sp.option != flag.spelling[binary][0].option)


def version_notes_cover(binary: str, setting: str) -> bool:
    """Whether a setting written for `binary` has a version note (older spellings or since
    when it exists), or is one every build since llama.cpp's 2023 releases has (ALWAYS)."""
    flag = _FLAGS[setting]
    return setting in ALWAYS or _older_applies(flag, flag.spelling.get(binary, ())) or binary in flag.since


def _older_applies(flag: Flag, spellings: Sequence[Spelling]) -> bool:
    """Whether `older` speaks of this binary: it names an older spelling the binary has, or
    none ("leave out {new}")."""
    return bool(flag.older and spellings) and (len(spellings) > 1 or "{old}" not in flag.older)


def layer_set_regex(blocks: Sequence[int]) -> str:
    """One -ot pattern for the expert tensors of `blocks`: no comma, dot after the number."""
    if not blocks:
        raise ValueError("an empty layer set has no override")
    alternation = "|".join(str(b) for b in sorted(set(int(b) for b in blocks)))
    return rf"blk\.({alternation}){EXPS_REGEX_TAIL}"


def spelling_summary(build: "LlamaBuild") -> str:
    """One line: how `build` takes the flags whose spelling changes between builds."""
    binary = "llama-server" if build.program("llama-server") is not None else "llama-bench"
    copy = " ".join(flag_args(binary, "no_mmap", None, build)) or "no way to ask for a copy"
    parts = [f"copies weights with {copy}"]
    if binary != "llama-bench":
        parts.append("takes --fit off" if flag_args(binary, "fit", None, build) else "no --fit")
    cache = all(build.takes(binary, f) for f in ("--moe-cache-profile", "--moe-cache-slots"))
    parts.append("has the fork's --moe-cache-profile/--moe-cache-slots" if cache else "no MoE cache flags")
    return f"{binary}: " + ", ".join(parts)
