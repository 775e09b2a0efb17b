"""The inputs of the published decode measurements (../shared/calibration/published-decode.csv),
transcribed by hand into what `cope estimate` takes: the catalog model, the quantization
of its experts (and the file size where the row gives one), the GPU and CPU presets, the
memory, the threads and the llama.cpp command as it ran. Only inputs: the published
tokens/s are read from the CSV by bench/published.py and never enter the estimate.

A llama-sweep-bench row "N_KV=D (sweep PP.../TGn)" decodes n tokens from depth D, which is
what `llama-bench -n n -d D` does; a server row with a P-token prompt and G generated
tokens is written the same way (-d P -n G). `stated` is False where the row leaves the CPU
or its memory unstated and a typical one was assumed (`assumed` says which); those rows
are reported apart. Rows COPE cannot price are in SKIPPED with the reason.

Each Row names the row's index in the CSV (0-based, header excluded) and a piece of its
model column, which bench/published.py checks, so a reordered CSV cannot misalign them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    index: int
    model_in_csv: str  # must appear in the CSV row's model column
    model: str  # catalog id
    quant: str  # the experts' type (a custom mix: its dominant type)
    gpu: str | None  # preset id; None: no GPU in the run
    cpu: str  # preset id
    command: str  # as it ran (model path a placeholder)
    runtime: str = "llama.cpp"  # or "ik_llama.cpp"
    memory: str | None = None  # --memory when the row states it (else the preset's usual)
    ram_gib: float | None = None  # --ram-gib when the row states the RAM
    file_gib: float | None = None  # the published file size: the experts' bits scaled to it
    stated: bool = True
    assumed: str = ""
    sweep: str = ""  # rows of one sweep (same source and hardware, one setting varied)


SWEEP_0 = "-p 0 -n 128 -d 0"
SWEEP_8K = "-p 0 -n 128 -d 8192"

ROWS: tuple[Row, ...] = (
    # ikawrakow/ik_llama.cpp discussion 357: Ryzen 9 7950X, Qwen3-30B-A3B with IQ4_XS experts (15.4 GiB).
    Row(0, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", None, "ryzen-9-7950x",
        f"llama-bench -m m.gguf -ngl 0 -t 16 -ctk q8_0 {SWEEP_0}", file_gib=15.4, sweep="7950x-cpu-mainline"),
    Row(1, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", None, "ryzen-9-7950x",
        f"llama-bench -m m.gguf -ngl 0 -t 16 -ctk q8_0 {SWEEP_8K}", file_gib=15.4, sweep="7950x-cpu-mainline"),
    Row(2, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", None, "ryzen-9-7950x",
        f"llama-bench -m m.gguf -ngl 0 -t 16 -fa 1 -ctk q8_0 -ctv q8_0 {SWEEP_0}", file_gib=15.4),
    Row(3, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", None, "ryzen-9-7950x",
        f"llama-bench -m m.gguf -ngl 0 -t 16 -fa 1 -ctk q8_0 -ctv q8_0 {SWEEP_0}", runtime="ik_llama.cpp",
        file_gib=15.4, sweep="7950x-cpu-ik"),
    Row(4, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", None, "ryzen-9-7950x",
        f"llama-bench -m m.gguf -ngl 0 -t 16 -fa 1 -ctk q8_0 -ctv q8_0 {SWEEP_8K}", runtime="ik_llama.cpp",
        file_gib=15.4, sweep="7950x-cpu-ik"),
    Row(5, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", "rtx-4080", "ryzen-9-7950x",
        rf"llama-bench -m m.gguf -ngl 100 -ot blk\.3[4-9]\.ffn=CPU;blk\.4[0-9]\.ffn=CPU -fa 1 -t 16 {SWEEP_0}",
        file_gib=15.4, sweep="4080-mainline"),
    Row(6, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", "rtx-4080", "ryzen-9-7950x",
        rf"llama-bench -m m.gguf -ngl 100 -ot blk\.3[4-9]\.ffn=CPU;blk\.4[0-9]\.ffn=CPU -fa 1 -t 16 {SWEEP_8K}",
        file_gib=15.4, sweep="4080-mainline"),
    Row(7, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", "rtx-4080", "ryzen-9-7950x",
        rf"llama-bench -m m.gguf -ngl 100 -ot blk\.3[4-9]\.ffn=CPU;blk\.4[0-9]\.ffn=CPU -fa 1 -t 16 {SWEEP_0}",
        runtime="ik_llama.cpp", file_gib=15.4, sweep="4080-ik"),
    Row(8, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", "rtx-4080", "ryzen-9-7950x",
        rf"llama-bench -m m.gguf -ngl 100 -ot blk\.3[4-9]\.ffn=CPU;blk\.4[0-9]\.ffn=CPU -fa 1 -t 16 {SWEEP_8K}",
        runtime="ik_llama.cpp", file_gib=15.4, sweep="4080-ik"),
    Row(9, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q3_K_M", "rtx-3090-ti", "ryzen-9-7950x",
        r"llama-bench -m m.gguf -ngl 99 -ot blk\.1[2-9]\.ffn.*=CPU;blk\.[2-8][0-9]\.ffn.*=CPU;blk\.9[0-3]\.ffn.*=CPU "
        f"-fa 1 -ctk q8_0 -ctv q8_0 -t 16 {SWEEP_0}", runtime="ik_llama.cpp", memory="ddr5-6000x2", file_gib=106.83,
        stated=False, assumed="an AM5 Ryzen 9 7950X with 2 DIMMs of DDR5-6000 (the row: 'AM5 gaming rig', 96 GB)", ram_gib=96),
    Row(10, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q8_0", "rtx-a6000", "threadripper-pro-5965wx",
        r"llama-bench -m m.gguf -ngl 99 -ot blk\.1[4-9]\.ffn.*=CPU;blk\.[2-8][0-9]\.ffn.*=CPU;blk\.9[0-3]\.ffn.*=CPU "
        f"-fa 1 -t 24 {SWEEP_0}", runtime="ik_llama.cpp", stated=False,
        assumed="a Threadripper PRO 5965WX (the row: 'Threadripper Pro, 24 cores') with its 8 channels of DDR4-3200"),
    Row(11, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q8_0", "rtx-a6000", "threadripper-pro-5965wx",
        r"llama-bench -m m.gguf -ngl 99 -ot blk\.1[3-9]\.ffn.*=CPU;blk\.[2-8][0-9]\.ffn.*=CPU;blk\.9[0-3]\.ffn.*=CPU "
        f"-fa 1 -mmp 0 -t 24 {SWEEP_0}", stated=False,
        assumed="a Threadripper PRO 5965WX (the row: 'Threadripper Pro, 24 cores') with its 8 channels of DDR4-3200"),
    Row(12, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q6_K", None, "epyc-9355",
        f"llama-bench -m m.gguf -ngl 0 -t 48 -fa 1 -ctk q8_0 -ctv q8_0 {SWEEP_0}", memory="ddr5-6000x12",
        file_gib=193 / 1.073741824, sweep="9355", ram_gib=512),
    Row(13, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q6_K", "rtx-3090", "epyc-9355",
        r"llama-bench -m m.gguf -ngl 99 -ot blk\.(0|1|2|3|4)\.ffn.*=CUDA0;ffn.*=CPU -t 48 -fa 1 -ctk q8_0 -ctv q8_0 "
        + SWEEP_0, memory="ddr5-6000x12", file_gib=193 / 1.073741824, sweep="9355", ram_gib=512),
    Row(15, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q6_K", None, "epyc-9355",
        f"llama-bench -m m.gguf -ngl 0 -t 48 -fa 1 -ctk q8_0 -ctv q8_0 {SWEEP_0}", runtime="ik_llama.cpp",
        memory="ddr5-6000x12", file_gib=212 / 1.073741824, sweep="9355-ik", ram_gib=512),
    Row(16, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q6_K", "rtx-3090", "epyc-9355",
        r"llama-bench -m m.gguf -ngl 99 -ot blk\.(0|1|2|3|4)\.ffn.*=CUDA0;ffn.*=CPU -t 48 -fa 1 -ctk q8_0 -ctv q8_0 "
        + SWEEP_0, runtime="ik_llama.cpp", memory="ddr5-6000x12", file_gib=212 / 1.073741824, sweep="9355-ik", ram_gib=512),
    Row(18, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q8_0", None, "2x xeon-gold-6138",
        f"llama-bench -m m.gguf -ngl 0 -t 20 -fa 1 {SWEEP_0}", runtime="ik_llama.cpp", memory="ddr4-2666x6",
        sweep="2x6138", ram_gib=512),
    Row(19, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q8_0", None, "2x xeon-gold-6138",
        f"llama-bench -m m.gguf -ngl 0 -t 20 -fa 1 {SWEEP_0}", runtime="ik_llama.cpp", memory="ddr4-2666x6",
        sweep="2x6138", ram_gib=512),
    Row(23, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", "gtx-1650-super", "ryzen-5-3500",
        "llama-bench -m m.gguf -ngl 99 -ot exps=CPU -fa 0 -p 0 -n 128", runtime="ik_llama.cpp",
        memory="ddr4-2666x2", file_gib=15.32, ram_gib=16),
    Row(24, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", "gtx-1650-super", "ryzen-5-3500",
        "llama-bench -m m.gguf -ngl 99 -ot exps=CPU -fa 0 -t 6 -p 0 -n 128", memory="ddr4-2666x2", file_gib=15.32, ram_gib=16),
    Row(26, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", None, "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 0 -t 16 -p 0 -n 128", file_gib=17.28, sweep="7950x-bench"),
    Row(27, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", None, "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 0 -t 16 -p 0 -n 128", file_gib=11.27, sweep="7950x-bench"),
    Row(28, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-4080", "threadripper-pro-5975wx",
        "llama-bench -m m.gguf -ngl 100 -ot exps=CPU -p 0 -n 1024 -d 0", runtime="ik_llama.cpp", sweep="5975wx",
        stated=False, assumed="the experts' MXFP4 (the row does not state the file)"),
    Row(29, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-4080", "threadripper-pro-5975wx",
        "llama-bench -m m.gguf -ngl 100 -ot exps=CPU -p 0 -n 1024 -d 16384", runtime="ik_llama.cpp", sweep="5975wx",
        stated=False, assumed="the experts' MXFP4 (the row does not state the file)"),
    Row(30, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-4080", "threadripper-pro-5975wx",
        "llama-bench -m m.gguf -ngl 100 -ot exps=CPU -p 0 -n 1024 -d 28672", runtime="ik_llama.cpp", sweep="5975wx",
        stated=False, assumed="the experts' MXFP4 (the row does not state the file)"),
    Row(31, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", "rtx-4080", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -ot exps=CPU -p 0 -n 512 -d 0", runtime="ik_llama.cpp"),
    Row(32, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", "Q8_0", "rtx-3090", "ryzen-9-7950x",
        r"llama-bench -m m.gguf -ngl 99 -ot blk\.(1[8-9]|[2-3][0-9])\.ffn_.*_exps=CPU -p 0 -n 128 -d 0",
        runtime="ik_llama.cpp", stated=False, assumed="a Ryzen 9 7950X with DDR5 (the row states no CPU)"),
    Row(39, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q3_K_M", "rtx-5070", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -p 0 -n 128", file_gib=13.70, stated=False,
        assumed="a Ryzen 9 7950X (the row states no CPU); the question is only whether it fits"),
    Row(40, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-3090", "epyc-7343",
        "llama-server -m m.gguf -ngl 13 -c 4096", memory="ddr4-3200x4", stated=False,
        assumed="64 GB as 4 channels of DDR4-3200, and MXFP4 experts (the row states neither)", ram_gib=64),
    Row(45, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-3090", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 --n-cpu-moe 25 -p 0 -n 128", sweep="3090-ncmoe", stated=False,
        assumed="a Ryzen 9 7950X with DDR5 (the row states no CPU)"),
    Row(46, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-3090", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 --n-cpu-moe 26 -p 0 -n 128", sweep="3090-ncmoe", stated=False,
        assumed="a Ryzen 9 7950X with DDR5 (the row states no CPU)"),
    Row(47, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-3090", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 --n-cpu-moe 25 -p 0 -n 128", sweep="3090-ncmoe", stated=False,
        assumed="a Ryzen 9 7950X with DDR5 (the row states no CPU)"),
    Row(48, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-3090", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 --n-cpu-moe 26 -p 0 -n 128", sweep="3090-ncmoe", stated=False,
        assumed="a Ryzen 9 7950X with DDR5 (the row states no CPU)"),
    Row(49, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-3090", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 --n-cpu-moe 28 -p 0 -n 128", sweep="3090-ncmoe", stated=False,
        assumed="a Ryzen 9 7950X with DDR5 (the row states no CPU)"),
    Row(68, "GLM-4.7-Flash", "glm-4.7-flash", "Q5_K_M", None, "epyc-9175f",
        "llama-bench -m m.gguf -ngl 0 -t 13 -p 0 -n 128 -d 30000", runtime="ik_llama.cpp", memory="ddr5-6400x12",
        sweep="9175f-glm", ram_gib=768),
    Row(69, "GLM-4.7-Flash", "glm-4.7-flash", "Q5_K_M", "rtx-pro-6000-max-q", "epyc-9175f",
        "llama-bench -m m.gguf -ngl 99 -ot exps=CPU -t 13 -p 0 -n 128 -d 30000", runtime="ik_llama.cpp",
        memory="ddr5-6400x12", sweep="9175f-glm", ram_gib=768),
    Row(70, "GLM-4.7-Flash", "glm-4.7-flash", "Q5_K_M", "rtx-pro-6000-max-q", "epyc-9175f",
        "llama-bench -m m.gguf -ngl 99 -t 13 -p 0 -n 128 -d 30000", runtime="ik_llama.cpp", memory="ddr5-6400x12",
        sweep="9175f-glm", ram_gib=768),
    Row(75, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", "rtx-3090-ti", "ryzen-9-7950x",
        f"llama-bench -m m.gguf -ngl 99 -fa 1 -t 1 {SWEEP_0}", runtime="ik_llama.cpp", stated=False,
        assumed="IQ4_K/IQ5_K experts as Q4_K_M; the CPU does not matter (everything on the GPU)"),
    Row(76, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", "Q4_K_M", "rtx-3060-12gb", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -ncmoe 99 -fa 1 -p 0 -n 64", file_gib=21.1, stated=False,
        assumed="a Ryzen 9 7950X with DDR5 (the row states no CPU)"),
    Row(78, "GLM-4.7-Flash", "glm-4.7-flash", "Q4_K_M", "rtx-3060-12gb", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -ncmoe 99 -fa 1 -p 0 -n 64", file_gib=17.1, stated=False,
        assumed="a Ryzen 9 7950X with DDR5 (the row states no CPU)"),
)

SKIPPED: dict[int, str] = {
    14: "two GPUs (not modelled)",
    17: "two GPUs (not modelled)",
    20: "an approximate anecdote ('~40')",
    21: "an approximate anecdote ('~27'), two sockets with --numa distribute",
    22: "an approximate anecdote ('~10')",
    25: "two GPUs (not modelled)",
    33: "server runs at an unknown depth; no CPU stated",
    34: "server runs at an unknown depth; no CPU stated",
    35: "server runs at an unknown depth; no CPU stated",
    36: "server runs at an unknown depth; no CPU stated",
    37: "server runs at an unknown depth; no CPU stated",
    38: "two GPUs (not modelled)",
    41: "the author calls it anomalously low against other RTX 3090 reports, with no explanation",
    42: "the author calls it anomalously low against other RTX 3090 reports, with no explanation",
    43: "the author calls it anomalously low against other RTX 3090 reports, with no explanation",
    44: "the author calls it anomalously low against other RTX 3090 reports, with no explanation",
    50: "the GPU is not stated",
    51: "the GPU is not stated",
    52: "two GPUs, a range ('10-17')",
    53: "Ollama's automatic split: the placement is not stated",
    54: "Ollama's automatic split: the placement is not stated",
    55: "a custom fork: all weights in VRAM through a mechanism not in llama.cpp",
    56: "a custom fork: the GPU reads experts from host memory over PCIe (zero-copy), not modelled",
    57: "a custom fork: the GPU reads experts from host memory over PCIe (zero-copy), not modelled",
    58: "Ollama in a container with a CPU quota; the CPU model is not stated",
    59: "KTransformers' own runtime (not llama.cpp)",
    60: "KTransformers' own runtime (not llama.cpp)",
    61: "KTransformers' own runtime (not llama.cpp)",
    62: "KTransformers' own runtime (not llama.cpp)",
    63: "KTransformers' own runtime (not llama.cpp)",
    64: "KTransformers' own runtime (not llama.cpp)",
    65: "batched serving throughput, not single-stream decode; four GPUs",
    66: "batched serving throughput, not single-stream decode; four GPUs",
    67: "batched serving throughput, not single-stream decode; four GPUs",
    71: "GLM-5.1 is not in the catalog (its config is not published)",
    72: "GLM-5.1 on two GPUs",
    73: "eight sockets (not modelled)",
    74: "an approximate anecdote ('~15') through Ollama",
    77: "the fork's VRAM expert cache (priced as a ranking candidate, not from a command)",
    79: "the fork's VRAM expert cache (priced as a ranking candidate, not from a command)",
    80: "Laguna is not in the catalog",
    81: "Laguna is not in the catalog; the fork's VRAM expert cache",
    82: "Ollama's automatic split: the placement is not stated",
}


@dataclass(frozen=True)
class PromptRun:
    """How a row's prompt figure was taken: P prompt tokens in micro-batches of `ubatch`
    from KV depth `depth`, by a build that copies whole expert tensors or only the used
    experts (mainline llama.cpp learnt the latter in the second half of 2025; ik_llama.cpp
    copies whole tensors unless told), with ik_llama.cpp's `-rtr` (CPU experts repacked into
    types only the CPU runs) and the batch threads (`-tb`) where the row gives them."""

    prompt_tokens: int
    ubatch: int = 512
    depth: int = 0
    copies_used_experts: bool = True
    repacked: bool = False
    threads: int | None = None
    not_modelled: str = ""  # why COPE does not price the prompt figure ("" : it does)


_BLAS = ("a BLAS build (the row: compiled with OpenBLAS): ggml's BLAS backend dequantizes each weight to f32 "
         "for batches of 32 or more, a path COPE does not model")
# The rows of ROWS that publish a prompt-processing figure, read from their context and
# placement columns: "sweep PPn" is one micro-batch of n tokens (-ub n) at depth N_KV;
# "ppN" is llama-bench's -p N from an empty cache. Only inputs: the published pp tok/s
# are read from the CSV by bench/published_prefill.py.
_APR25 = dict(copies_used_experts=False)  # April-May 2025 builds: whole tensors copied
PROMPT_RUNS: dict[int, PromptRun] = {
    0: PromptRun(512, **_APR25), 1: PromptRun(512, depth=8192, **_APR25), 2: PromptRun(512, **_APR25),
    3: PromptRun(512, repacked=True), 4: PromptRun(512, depth=8192, repacked=True),
    5: PromptRun(512, **_APR25), 6: PromptRun(512, depth=8192, **_APR25),
    7: PromptRun(512, repacked=True), 8: PromptRun(512, depth=8192, repacked=True),
    9: PromptRun(512, repacked=True), 10: PromptRun(512, repacked=True), 11: PromptRun(512, **_APR25),
    12: PromptRun(512, not_modelled=_BLAS, **_APR25), 13: PromptRun(512, **_APR25), 15: PromptRun(512, repacked=True, not_modelled=_BLAS),
    16: PromptRun(512, repacked=True), 18: PromptRun(512), 19: PromptRun(512),
    26: PromptRun(512), 27: PromptRun(512),
    28: PromptRun(4096, ubatch=4096, copies_used_experts=False),
    29: PromptRun(4096, ubatch=4096, depth=16384, copies_used_experts=False),
    30: PromptRun(4096, ubatch=4096, depth=28672, copies_used_experts=False),
    31: PromptRun(2048, ubatch=2048, copies_used_experts=False),
    32: PromptRun(2048, ubatch=2048, copies_used_experts=False),
    45: PromptRun(4096, ubatch=256), 46: PromptRun(4096, ubatch=512), 47: PromptRun(4096, ubatch=2048),
    48: PromptRun(4096, ubatch=4096), 49: PromptRun(8192, ubatch=8192),
    68: PromptRun(512, threads=23), 69: PromptRun(512, threads=23), 70: PromptRun(512, threads=23),
    75: PromptRun(512), 76: PromptRun(512), 78: PromptRun(512),
}
# One -ub sweep (same source, hardware and model, -ub varied): the order to get right.
UBATCH_SWEEPS: dict[str, tuple[int, ...]] = {"3090 gpt-oss-120b -ub 256..8192": (45, 46, 47, 48, 49)}
