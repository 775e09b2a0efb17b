"""The inputs of the extra published decode measurements (bench/data/published-extra.csv),
transcribed by hand the same way bench/published_rows.py transcribes the shared CSV: the
catalog model, the quantization of its experts (and the file size where the row gives one),
the GPU and CPU presets, the memory, the threads and the llama.cpp command as it ran. Only
inputs: the published tokens/s are read from the CSV and never enter the estimate.

Each Row's index is its row in bench/data/published-extra.csv (0-based, header excluded).
The conventions are bench/published_rows.py's: a llama-sweep-bench row "N_KV=D (sweep
PP.../TGn)" is `llama-bench -p 0 -n n -d D`; llama-bench's `-gp P,n` ("tgn@ppP") is written
`-p 0 -n n -d P`; several -ot patterns of one llama-bench test are joined by ';'. Flags COPE
does not model (ik_llama.cpp's -fmoe, -mla, -amb, -rtr) are left out of the command, as in
published_rows.py; the CSV's placement column keeps them. `stated` is False where the row
leaves the CPU, its memory or the quantization to an assumption (`assumed` says which); an
all-GPU row whose CPU is not stated is priced on a Ryzen 9 7950X, which it does not use, and
counts as stated.
Rows COPE cannot price are in EXTRA_SKIPPED with the reason.
"""

from __future__ import annotations

from bench.published_rows import Row

# An all-GPU row whose CPU is not stated counts as stated: nothing of it runs on the CPU.
_NO_CPU = "the CPU is not stated; it does not matter here (everything on the GPU): a Ryzen 9 7950X"
_9B14 = ("an EPYC 9654 (the row: EPYC 9B14, the 96-core Zen 4 Genoa part sold to clouds) with the stated "
         "12 channels of DDR5-4800")
_9355 = "12 channels (stated) of DDR5-6000, the preset's speed (the row does not state the speed)"
# The DGX Spark page's other depths of one llama-bench sweep: in the CSV as printed, not priced.
_SPARK_DEPTH = ("tg32 @ d{depth}: an inner point of the DGX Spark sweep; its depths 0 and 16384 (x{d0}, x{d16}) are "
                "priced, as the other sources' sweeps (N_KV 0 and 16384), so that one source and machine does not "
                "weigh five times in the fit")
_9900T = ("the memory: two channels of DDR4-2666 (the Core i9-9900T's rated speed; the issue states no memory), and the "
          "UD-Q4_K_M file's split between its expert and other tensors (the catalog's Q4_K_M sized to '21 GB')")
_SRV1 = ("the memory's speed and channels (the record: 48 GB, STREAM triad 26.8 GB/s): two channels of DDR4-2666, the "
         "i5-9600K's rated speed, and the default threads (its 6 cores)")
_SRV2_1CH = ("the memory's speed (the record: 32 GB on one channel, STREAM triad 13.3 GB/s): DDR4-2933, the i9-10900F's "
             "rated speed, and 10 threads for every cell (the record gives them for the --n-cpu-moe 48 cell)")
_SRV2_2CH = ("the memory's speed (the record: 16 GB on two channels, STREAM triad 23.8 GB/s): DDR4-2933, the i9-10900F's "
             "rated speed, and 10 threads (not given for these cells)")
_IQ4_NL = "IQ4_NL experts priced as Q4_0 (both 4.5 bits per weight in 32-weight blocks; IQ4_NL is not in the catalog)"

# castlen3/rtx3060-qwen3.6-35b-guide (data/results.csv at 5e952d3b; the machine in notes/01_environment.md): RTX 3060 12GB
# + Xeon E5-2666 v3 (10 cores) with 64 GB of DDR3-1600 as 4 x 16 GB, priced on the CPU's four channels (Haswell-EP; the page
# lists the DIMMs as two per 'NODE' and names no channel count); llama-server b9444 on Windows, --no-mmap, q8_0 KV, a
# 16-token prompt and 200 tokens generated. Its first stage ran a release without the CUDA runtime: CPU only. The preset
# takes DDR4 (Intel's rating for the part; this board runs its controller with DDR3): as published_hybrid_rows.py does for
# DDR5 at 2000 MT/s (_12600K_SLOW), the same bus
# at the same transfer rate is written DDR4-1600 x4 (51.2 GB/s peak either way).
_3060_DDR3 = "ddr4-1600x4"
_E5_2666V3 = ("the CPU: the Xeon E5-2666 v3 (10 cores, 2.9 GHz), an off-roadmap part Intel ARK does not list, priced on the "
              "xeon-e5-2660-v3 preset (the same Haswell-EP die with 10 cores, 2.6 GHz base)")
_3060_KV = "-ctk q8_0 -ctv q8_0 -mmp 0 -p 0 -n 200"

EXTRA_ROWS: tuple[Row, ...] = (
    # Reddit r/LocalLLaMA, u/eloquentemu: EPYC 9B14 (96 cores, 44 threads), 12ch DDR5-4800, CPU-only llama-bench.
    Row(0, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", None, "epyc-9654",
        "llama-bench -m m.gguf -ngl 0 -t 44 -fa 1 -p 0 -n 128", memory="ddr5-4800x12", file_gib=59.02,
        stated=False, assumed=_9B14, sweep="9b14-gptoss120b"),
    Row(1, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", None, "epyc-9654",
        "llama-bench -m m.gguf -ngl 0 -t 44 -fa 1 -p 0 -n 128 -d 6000", memory="ddr5-4800x12", file_gib=59.02,
        stated=False, assumed=_9B14, sweep="9b14-gptoss120b"),
    Row(2, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", None, "epyc-9654",
        "llama-bench -m m.gguf -ngl 0 -t 44 -fa 1 -p 0 -n 128", memory="ddr5-4800x12", file_gib=17.28,
        stated=False, assumed=_9B14, sweep="9b14-qwen3"),
    Row(3, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", None, "epyc-9654",
        "llama-bench -m m.gguf -ngl 0 -t 44 -fa 1 -p 0 -n 128 -d 6000", memory="ddr5-4800x12", file_gib=17.28,
        stated=False, assumed=_9B14, sweep="9b14-qwen3"),
    Row(4, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", None, "epyc-9654",
        "llama-bench -m m.gguf -ngl 0 -t 44 -fa 0 -p 0 -n 128 -d 6000", memory="ddr5-4800x12", file_gib=17.28,
        stated=False, assumed=_9B14),
    # ggml-org/llama.cpp PR 16834 and PR 16649 (am17an): RTX 4090, all on the GPU, the 't/s master' column.
    Row(5, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", "rtx-4090", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -p 0 -n 128", assumed=_NO_CPU),
    Row(6, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_0", "rtx-4090", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -p 0 -n 128", assumed=_NO_CPU),
    Row(7, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", "rtx-4090", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -p 0 -n 128", assumed=_NO_CPU),
    # ikawrakow/ik_llama.cpp discussion 758: RTX 4080 + Ryzen 9 7950X, gpt-oss-20b fully offloaded.
    Row(8, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", "rtx-4080", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 100 -ub 2048 -t 1 -p 0 -n 512 -d 0", sweep="4080-gptoss20b-mainline"),
    Row(9, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", "rtx-4080", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 100 -ub 2048 -t 1 -p 0 -n 512 -d 16384", sweep="4080-gptoss20b-mainline"),
    Row(12, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", "rtx-4080", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 100 -ub 2048 -t 1 -fa 1 -p 0 -n 512 -d 0", runtime="ik_llama.cpp",
        sweep="4080-gptoss20b-ik"),
    Row(13, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", "rtx-4080", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 100 -ub 2048 -t 1 -fa 1 -p 0 -n 512 -d 16384", runtime="ik_llama.cpp",
        sweep="4080-gptoss20b-ik"),
    # Discussion 758, CPU-only on the Ryzen 9 7950X.
    Row(14, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", None, "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 0 -t 16 -ub 1024 -ctk q8_0 -p 0 -n 256 -d 0", sweep="7950x-gptoss20b-mainline"),
    Row(15, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", None, "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 0 -t 16 -ub 1024 -ctk q8_0 -p 0 -n 256 -d 16384", sweep="7950x-gptoss20b-mainline"),
    Row(16, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", None, "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 0 -t 16 -ub 1024 -ctk q8_0 -fa 1 -p 0 -n 256 -d 0", runtime="ik_llama.cpp",
        sweep="7950x-gptoss20b-ik"),
    Row(17, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", None, "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 0 -t 16 -ub 1024 -ctk q8_0 -fa 1 -p 0 -n 256 -d 16384", runtime="ik_llama.cpp",
        sweep="7950x-gptoss20b-ik"),
    # Discussion 758, reply by Djip007: Ryzen AI MAX+ 395 (128 GB), CPU-only, gpt-oss-120b.
    Row(18, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", None, "ryzen-ai-max-plus-395",
        "llama-bench -m m.gguf -ngl 0 -t 16 -ub 4096 -fa 1 -ctk bf16 -ctv bf16 -p 0 -n 32", runtime="ik_llama.cpp",
        file_gib=59.02, ram_gib=128),
    Row(19, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", None, "ryzen-ai-max-plus-395",
        "llama-bench -m m.gguf -ngl 0 -t 16 -ub 2048 -fa 1 -ctk q8_0 -p 0 -n 512 -d 0", runtime="ik_llama.cpp",
        file_gib=59.02, ram_gib=128, sweep="395-gptoss120b"),
    Row(20, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", None, "ryzen-ai-max-plus-395",
        "llama-bench -m m.gguf -ngl 0 -t 16 -ub 2048 -fa 1 -ctk q8_0 -p 0 -n 512 -d 16384", runtime="ik_llama.cpp",
        file_gib=59.02, ram_gib=128, sweep="395-gptoss120b"),
    # ikawrakow/ik_llama.cpp issue 437: ikawrakow's 7950X (+4080), and kirnat's Xeon 8480 ES (8ch DDR5-4800).
    Row(21, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", None, "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 0 -p 0 -n 128", runtime="ik_llama.cpp", file_gib=15.24),
    Row(22, "Qwen3-30B-A3B", "qwen3-30b-a3b", "IQ4_XS", "rtx-4080", "ryzen-9-7950x",
        r"llama-bench -m m.gguf -ngl 99 -ot blk\.3[0-9]\.ffn=CPU;blk\.4[0-7]\.ffn=CPU -p 0 -n 128",
        runtime="ik_llama.cpp", file_gib=15.24, stated=False,
        assumed="the 18 CPU layers taken as the ffn tensors of the last 18 of 48 layers, as in discussion 357 "
                "(the row: 'keep 18 layers on the CPU')"),
    Row(23, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", None, "xeon-platinum-8480plus",
        "llama-bench -m m.gguf -ngl 0 -t 32 -fa 1 -p 0 -n 128", runtime="ik_llama.cpp", memory="ddr5-4800x8",
        file_gib=16.49),
    # ikawrakow/ik_llama.cpp issue 629 (sousekd): EPYC 9355 NPS1 + RTX 5090 alone, Qwen3-235B-A22B, Windows.
    Row(24, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q3_K_M", "rtx-5090", "epyc-9355",
        r"llama-bench -m m.gguf -ngl 999 -ot blk\.([0-9]|1[0-5])\.ffn_.*=CUDA0;blk\.[0-9]+\.ffn.*=CPU "
        "-fa 1 -b 4096 -ub 2048 -mmp 0 -t 32 -p 0 -n 512 -d 0", runtime="ik_llama.cpp", memory="ddr5-6000x12",
        file_gib=106.83, stated=False, assumed=_9355, sweep="9355-5090-iq3k"),
    Row(25, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q3_K_M", "rtx-5090", "epyc-9355",
        r"llama-bench -m m.gguf -ngl 999 -ot blk\.([0-9]|1[0-5])\.ffn_.*=CUDA0;blk\.[0-9]+\.ffn.*=CPU "
        "-fa 1 -b 4096 -ub 2048 -mmp 0 -t 32 -p 0 -n 512 -d 16384", runtime="ik_llama.cpp", memory="ddr5-6000x12",
        file_gib=106.83, stated=False, assumed=_9355),
    Row(26, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q8_0", "rtx-5090", "epyc-9355",
        r"llama-bench -m m.gguf -ngl 999 -ot blk\.[0-5]\.ffn_.*=CUDA0;blk\.[0-9]+\.ffn.*=CPU "
        "-fa 1 -b 4096 -ub 2048 -mmp 0 -t 32 -p 0 -n 512 -d 0", runtime="ik_llama.cpp", memory="ddr5-6000x12",
        stated=False, assumed=_9355, sweep="9355-5090-q8"),
    Row(27, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q8_0", "rtx-5090", "epyc-9355",
        r"llama-bench -m m.gguf -ngl 999 -ot blk\.[0-5]\.ffn_.*=CUDA0;blk\.[0-9]+\.ffn.*=CPU "
        "-fa 1 -b 4096 -ub 2048 -mmp 0 -t 32 -p 0 -n 512 -d 16384", runtime="ik_llama.cpp", memory="ddr5-6000x12",
        stated=False, assumed=_9355),
    Row(28, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q3_K_M", "rtx-5090", "epyc-9355",
        r"llama-bench -m m.gguf -ngl 999 -ot blk\.(1[5-9]|[2-9][0-9])\.ffn_.*_exps=CPU "
        "-fa 1 -b 4096 -ub 2048 -mmp 0 -t 32 -p 0 -n 512 -d 0", runtime="ik_llama.cpp", memory="ddr5-6000x12",
        file_gib=106.83, stated=False, assumed=_9355, sweep="9355-5090-iq3k"),
    Row(29, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q8_0", "rtx-5090", "epyc-9355",
        r"llama-bench -m m.gguf -ngl 999 -ot blk\.([6-9]|[1-9][0-9])\.ffn_.*_exps=CPU "
        "-fa 1 -b 4096 -ub 2048 -mmp 0 -t 32 -p 0 -n 512 -d 0", runtime="ik_llama.cpp", memory="ddr5-6000x12",
        stated=False, assumed=_9355, sweep="9355-5090-q8"),
    # ikawrakow/ik_llama.cpp PR 598 (ubergarm): RTX 3090 Ti, DeepSeek-V2-Lite Q4_0 fully offloaded, CUDA backend.
    Row(30, "DeepSeek-V2-Lite", "deepseek-v2-lite-chat", "Q4_0", "rtx-3090-ti", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -fa 1 -t 1 -p 0 -n 128 -d 0", runtime="ik_llama.cpp",
        assumed=_NO_CPU, sweep="3090ti-v2lite"),
    Row(31, "DeepSeek-V2-Lite", "deepseek-v2-lite-chat", "Q4_0", "rtx-3090-ti", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -fa 1 -t 1 -p 0 -n 128 -d 16384", runtime="ik_llama.cpp",
        assumed=_NO_CPU, sweep="3090ti-v2lite"),
    Row(32, "DeepSeek-V2-Lite", "deepseek-v2-lite-chat", "Q4_0", "rtx-3090-ti", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -fa 1 -t 1 -p 0 -n 128 -d 0", runtime="ik_llama.cpp",
        assumed=_NO_CPU, sweep="3090ti-v2lite-fmoe"),
    Row(33, "DeepSeek-V2-Lite", "deepseek-v2-lite-chat", "Q4_0", "rtx-3090-ti", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -fa 1 -t 1 -p 0 -n 128 -d 16384", runtime="ik_llama.cpp",
        assumed=_NO_CPU, sweep="3090ti-v2lite-fmoe"),
    # ikawrakow/ik_llama.cpp PR 235: RTX 4080 + Ryzen 9 7950X, DeepSeek-Lite IQ4_NL, llama-bench -gp.
    Row(34, "DeepSeek-V2-Lite", "deepseek-v2-lite-chat", "Q4_0", "rtx-4080", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -ot exps=CPU -p 0 -n 64 -d 128", runtime="ik_llama.cpp",
        stated=False, assumed=_IQ4_NL, sweep="4080-v2lite-cpu-experts"),
    Row(35, "DeepSeek-V2-Lite", "deepseek-v2-lite-chat", "Q4_0", "rtx-4080", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -ot exps=CPU -p 0 -n 64 -d 8192", runtime="ik_llama.cpp",
        stated=False, assumed=_IQ4_NL, sweep="4080-v2lite-cpu-experts"),
    Row(36, "DeepSeek-V2-Lite", "deepseek-v2-lite-chat", "Q4_0", None, "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 0 -p 0 -n 64 -d 128", runtime="ik_llama.cpp",
        stated=False, assumed=_IQ4_NL, sweep="7950x-v2lite-cpu"),
    Row(37, "DeepSeek-V2-Lite", "deepseek-v2-lite-chat", "Q4_0", None, "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 0 -p 0 -n 64 -d 8192", runtime="ik_llama.cpp",
        stated=False, assumed=_IQ4_NL, sweep="7950x-v2lite-cpu"),
    # ggml-org/llama.cpp PR 16991 (ORippler): RTX PRO 6000 Blackwell Workstation Edition, all on the GPU.
    Row(38, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", "rtx-pro-6000", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -ub 2048 -fa 1 -p 0 -n 128", file_gib=11.27, stated=False,
        assumed=_NO_CPU + "; whether GGML_CUDA_GRAPH_OPT was set for this table is not visible in the excerpt"),
    # eunomia-bpf/gpu_ext workload log: RTX 5090, llama-bench defaults, gpt-oss-20b fully offloaded.
    Row(40, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", "rtx-5090", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -p 0 -n 128", file_gib=11.27, assumed=_NO_CPU),
    # AUGMXNT/llm-tracker.info-vault "RTX PRO 6000" page: RTX PRO 6000 Blackwell Workstation Edition,
    # llama.cpp build 233d773d0 (6413), llama-bench -fa 1 defaults, all on the GPU.
    Row(43, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", "rtx-pro-6000", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -fa 1 -p 0 -n 128", file_gib=17.28, assumed=_NO_CPU),
    Row(44, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-pro-6000", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -fa 1 -p 0 -n 128", file_gib=60.03, stated=False,
        assumed="the UD-Q8_K_XL file's split of its 60.03 GiB between the MXFP4 experts and the other "
                "tensors is not stated: priced as the catalog's MXFP4 with the experts sized to the file"),
    # ggml-org/llama.cpp benches/dgx-spark.md (at commit 4c7e9893): DGX Spark (NVIDIA GB10, 128 GB unified
    # LPDDR5X), build 2f68ce7cf (6918), llama-bench -ngl 99 -ub 2048 -fa 1 -mmp 0, tg32 at depths 0-32768.
    # Priced: depths 0 and 16384 of each model (the other depths: EXTRA_SKIPPED). Qwen3-Coder-30B-A3B-Instruct is
    # priced as the catalog's Qwen3-30B-A3B: llama-bench prints it as qwen3moe 30B.A3B, 30.53 B parameters, as it does that model.
    *(Row(index, name, model_id, quant, "gb10", "ryzen-9-7950x",
          f"llama-bench -m m.gguf -ngl 99 -ub 2048 -fa 1 -mmp 0 -p 0 -n 32 -d {depth}", file_gib=gib,
          assumed=_NO_CPU, sweep=f"gb10-{model_id}")
      for index, name, model_id, quant, gib, depth in (
          (45, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", 11.27, 0),
          (48, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", 11.27, 16384),
          (50, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", 59.02, 0),
          (53, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", 59.02, 16384),
          (55, "Qwen3-Coder-30B-A3B", "qwen3-30b-a3b", "Q8_0", 30.25, 0),
          (58, "Qwen3-Coder-30B-A3B", "qwen3-30b-a3b", "Q8_0", 30.25, 16384))),
    # ikawrakow/ik_llama.cpp issue 490 (ikawrakow's reply): his Ryzen-7950X + RTX-4080, every expert on the CPU,
    # Qwen3-30B-A3B with IQ4_K_R4/IQ5_K_R4 experts and Q8_0 the rest (17.57 GiB: experts sized to the file on Q8_0's
    # other tensors), build 24c010b3: llama-sweep-bench at N_KV 0 and 8192 (its table ends at 14336), and llama-bench tg128.
    *(Row(index, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q8_0", "rtx-4080", "ryzen-9-7950x",
          rf"llama-bench -m m.gguf -ngl 100 -ot exps=CPU -t 16 -p 0 -n 512 -d {depth}", runtime="ik_llama.cpp",
          file_gib=17.57, sweep="490-7950x-4080")
      for index, depth in ((60, 0), (61, 8192))),
    Row(62, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q8_0", "rtx-4080", "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 99 -ot exps=CPU -fa 1 -ub 1024 -p 0 -n 128", runtime="ik_llama.cpp", file_gib=17.57),
    # AlexsJones/llmfit PR 755: RTX 2080 (8 GB) + i9-10900X, quad-channel DDR4 that the PR measured at ~102 GB/s,
    # priced as 4 x DDR4-3200 (102.4 GB/s): the measured bandwidth, not a guessed DIMM speed. The server's own decode figure.
    Row(63, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", "rtx-2080", "core-i9-10900x",
        "llama-server -m m.gguf -ngl 99 --n-cpu-moe 36", memory="ddr4-3200x4"),
    # ikawrakow/ik_llama.cpp discussion 258 (sousekd): one EPYC 9355 with 768 GB of 12 x DDR5-6400, Windows, one GPU at a
    # time (RTX 5090 on 2025-07-09, RTX 4090 on 2025-06-27), DeepSeek-V3-0324 / R1-0528 (671B, priced as the catalog's
    # DeepSeek-V3) in five files whose sizes llama.cpp prints, llama-sweep-bench at N_KV 0 and 16384, --no-mmap, every
    # routed expert on the CPU or blocks 3 (and 4) on the GPU. Experts sized to each file on the quant of its other
    # tensors (Q8_0 in ubergarm's files, Q4_K_M in unsloth's and bartowski's). -mla/-fmoe/-amb left out (see above).
    # A sweep is one file on one GPU (the depth varied): the files differ in more than one setting.
    *(Row(index, "DeepSeek", "deepseek-v3", quant, "rtx-5090", "epyc-9355",
          f"llama-bench -m m.gguf -ngl 63 {ot} -fa 1 -b 4096 -ub {ub} -mmp 0 -t 32 -p 0 -n {n} -d {depth}",
          runtime="ik_llama.cpp", memory="ddr5-6400x12", ram_gib=768, file_gib=gib, sweep=f"9355-5090-deepseek-{gib:g}")
      for index, quant, gib, ot, ub, n, depth in (
          (64, "Q8_0", 226.003, "-ot exps=CPU", 4096, 1024, 0),
          (65, "Q8_0", 226.003, "-ot exps=CPU", 4096, 1024, 16384),
          (66, "Q8_0", 386.183, r"-ot blk\.(3)\.ffn_.*=CUDA0;exps=CPU", 2048, 512, 0),
          (67, "Q8_0", 386.183, r"-ot blk\.(3)\.ffn_.*=CUDA0;exps=CPU", 2048, 512, 16384),
          (68, "Q8_0", 367.774, r"-ot blk\.(3)\.ffn_.*=CUDA0;exps=CPU", 2048, 512, 0),
          (69, "Q8_0", 367.774, r"-ot blk\.(3)\.ffn_.*=CUDA0;exps=CPU", 2048, 512, 16384),
          (70, "Q4_K_M", 357.623, r"-ot blk\.(3|4)\.ffn_.*=CUDA0;exps=CPU", 4096, 1024, 0),
          (71, "Q4_K_M", 357.623, r"-ot blk\.(3|4)\.ffn_.*=CUDA0;exps=CPU", 4096, 1024, 16384),
          (72, "Q4_K_M", 379.030, r"-ot blk\.(3)\.ffn_.*=CUDA0;exps=CPU", 4096, 1024, 0),
          (73, "Q4_K_M", 379.030, r"-ot blk\.(3)\.ffn_.*=CUDA0;exps=CPU", 4096, 1024, 16384))),
    *(Row(index, "DeepSeek", "deepseek-v3", quant, "rtx-4090", "epyc-9355",
          f"llama-bench -m m.gguf -ngl {ngl} -ot exps=CPU -fa 1 -b 4096{ub} {ctk}-mmp 0 -t 30 -p 0 -n {n} -d {depth}",
          runtime="ik_llama.cpp", memory="ddr5-6400x12", ram_gib=768, file_gib=gib, sweep=f"9355-4090-deepseek-{gib:g}")
      for index, quant, gib, ngl, ub, ctk, n, depth in (
          (76, "Q8_0", 226.003, 63, " -ub 2048", "-ctk q8_0 ", 512, 0),
          (77, "Q8_0", 226.003, 63, " -ub 2048", "-ctk q8_0 ", 512, 16384),
          (78, "Q8_0", 367.774, 63, "", "-ctk q8_0 ", 128, 0),
          (79, "Q8_0", 367.774, 63, "", "-ctk q8_0 ", 128, 16384),
          (80, "Q8_0", 386.183, 63, "", "-ctk q8_0 ", 128, 0),
          (81, "Q8_0", 386.183, 63, "", "-ctk q8_0 ", 128, 16384),
          (82, "Q4_K_M", 357.623, 99, " -ub 4096", "", 1024, 0),
          (83, "Q4_K_M", 357.623, 99, " -ub 4096", "", 1024, 16384))),
    # carteakey/lllms docs/bench-results.md (at 827b9607): one desktop, an RTX 4070 12 GB with an i5-12600K and 64 GB of
    # DDR5-5867 (4 x 16 GB on the CPU's two channels, docs/bench-runbook.md), llama-bench pp512/tg128 with -t 10 -fa 1 -mmp 0
    # pinned to CPUs 0-11. Four models, each a sweep of placements; the UD quants priced as their base K-quant's mix
    # (engine/models/model_names.py), IQ4_XS as itself. ik_llama.cpp's -fmoe left out (see above; the CSV keeps it).
    *(Row(index, "Qwen3.5-122B-A10B", "qwen3.5-122b-a10b", "IQ4_XS", "rtx-4070", "core-i5-12600k",
          f"llama-bench -m m.gguf {placement} -t 10 -fa 1 -mmp 0 -p 0 -n 128", runtime=runtime, memory="ddr5-5867x2",
          ram_gib=64, sweep=f"4070-12600k-qwen3.5-122b-{runtime}" if index != 89 else "")
      for index, placement, runtime in (
          (84, "-ngl 99 -ncmoe 48", "llama.cpp"),
          (85, "-ngl 99 -ot .ffn_(up|down|gate)_(ch|)exps=CPU", "llama.cpp"),
          (86, r"-ngl 99 -ot blk\.(3|[4-9]|[0-9][0-9]|[0-9][0-9][0-9])\.ffn_(up|down|gate)_(ch|)exps=CPU", "llama.cpp"),
          (88, r"-ngl 99 -ot blk\.(3|[4-9]|[0-9][0-9]|[0-9][0-9][0-9])\.ffn_(up|down|gate)_(ch|)exps=CPU", "ik_llama.cpp"),
          (89, r"-ngl 99 -ot blk\.(3|[4-9]|[0-9][0-9]|[0-9][0-9][0-9])\.ffn_(up|down|gate)_(ch|)exps=CPU", "ik_llama.cpp"))),
    # gpt-oss-120b: -ngl 37 offloads all 36 blocks and the output; blocks 5-35's experts on the CPU.
    *(Row(index, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-4070", "core-i5-12600k",
          r"llama-bench -m m.gguf -ngl 37 -ot blk\.(5|[6-9]|[0-9][0-9]|[0-9][0-9][0-9])\.ffn_(up|down|gate)_(ch|)exps=CPU "
          "-t 10 -fa 1 -mmp 0 -p 0 -n 128", runtime=runtime, memory="ddr5-5867x2", ram_gib=64)
      for index, runtime in ((90, "llama.cpp"), (91, "ik_llama.cpp"))),
    # Qwen3.6-35B-A3B UD-Q5_K_XL (24.76 GiB), -b 1024 -ub 512 and a q8_0 KV cache; row 95's -ot written from the page's
    # words ("blk.13 down + blk.14-40 (up/down/gate_up/gate)", -ngl 41: all 40 blocks and the output).
    *(Row(index, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", "Q5_K_M", "rtx-4070", "core-i5-12600k",
          f"llama-bench -m m.gguf {placement} -t 10 -fa 1 -mmp 0 -b 1024 -ub 512 -ctk q8_0 -ctv q8_0 -p 0 -n 128",
          memory="ddr5-5867x2", ram_gib=64, file_gib=24.76, sweep="4070-12600k-qwen3.6-35b")
      for index, placement in (
          (92, "-ngl 99 -ot .ffn_(up|down|gate_up|gate)_(ch|)exps=CPU"),
          (93, r"-ngl 99 -ot blk\.(4|[5-9]|[0-9][0-9]|[0-9][0-9][0-9])\.ffn_(up|down|gate_up|gate)_(ch|)exps=CPU"),
          (94, "-ngl 99 -ot .ffn_(up|down)_(ch|)exps=CPU"),
          (95, r"-ngl 41 -ot blk\.13\.ffn_down_exps=CPU;blk\.(1[4-9]|[2-3][0-9])\.ffn_(up|down|gate_up|gate)_exps=CPU"))),
    # Qwen3-Coder-Next UD-Q4_K_XL (the catalog's Qwen3-Next-80B-A3B shape): -ncmoe 40, every expert on the CPU, and two
    # llama-fit-params placements (-ngl 49: all 48 blocks and the output; the page's "..." are the blocks in between).
    *(Row(index, "Qwen3-Coder-Next", "qwen3-next-80b-a3b", "Q4_K_M", "rtx-4070", "core-i5-12600k",
          f"llama-bench -m m.gguf {placement} -t 10 -fa 1 -mmp 0{kv} -p 0 -n 128", memory="ddr5-5867x2", ram_gib=64,
          sweep="4070-12600k-qwen3-coder-next")
      for index, placement, kv in (
          (96, "-ngl 99 -ncmoe 40", ""),
          (97, "-ngl 99 -ot .ffn_.*_exps.=CPU", ""),
          (98, r"-ngl 49 -ot blk\.5\.ffn_down.*=CPU;blk\.([6-9]|[1-4][0-9])\.ffn_(up|down|gate)_(ch|)exps=CPU", ""),
          (99, r"-ngl 49 -ot blk\.8\.ffn_(gate|down).*=CPU;blk\.(9|[1-4][0-9])\.ffn_(up|down|gate)_(ch|)exps=CPU",
           " -ctk q8_0 -ctv q8_0"))),
    # ikawrakow/ik_llama.cpp PR 232 (ikawrakow, 2025-02-24): DeepSeek-Lite Q4_K_M (9.78 GiB) on his Ryzen-7950X, CPU only and with
    # every routed expert on the CPU beside the GPU, llama-bench tg128 -t 16 (-rtr left out, see above). The PR states the memory
    # as "64 GB/s theoretical": two channels at 4000 MT/s (2 x 8 bytes x 4000 MT/s), not the preset's usual DDR5-5200.
    Row(100, "DeepSeek-Lite", "deepseek-v2-lite-chat", "Q4_K_M", None, "ryzen-9-7950x",
        "llama-bench -m m.gguf -ngl 0 -t 16 -p 0 -n 128", runtime="ik_llama.cpp", memory="ddr5-4000x2", file_gib=9.78,
        sweep="232-7950x-v2lite"),
    Row(101, "DeepSeek-Lite", "deepseek-v2-lite-chat", "Q4_K_M", "rtx-4080", "ryzen-9-7950x",
        r"llama-bench -m m.gguf -ngl 100 -ot \.ffn_.*_exps\.=CPU -t 16 -p 0 -n 128", runtime="ik_llama.cpp", memory="ddr5-4000x2",
        file_gib=9.78, sweep="232-7950x-v2lite", stated=False,
        assumed="the GPU: the PR does not name it; ikawrakow's RTX-4080 (named with this Ryzen-7950X in PR 235 three days later)"),
    # ikawrakow/ik_llama.cpp issue 2199 (2026-07-28): RTX A1000 8 GB + Core i9-9900T (Debian 12 LXC on Proxmox; the memory
    # is not stated: the CPU's two channels of DDR4-2666 assumed), Qwen3.6-35B-A3B UD-Q4_K_M ('21 GB', priced as Q4_K_M sized
    # to it), every expert on the CPU, llama-bench tg128 with -t 12 -b/-ub 2048 -fa 1 and a q4_0/q8_0 KV cache: ik_llama.cpp
    # build 4706 and mainline build 10155 (row 103, ik build 4749, is the regression the issue reports: EXTRA_SKIPPED).
    *(Row(index, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", "Q4_K_M", "rtx-a1000", "core-i9-9900t",
          "llama-bench -m m.gguf -ngl 99 --n-cpu-moe 99 -t 12 -b 2048 -ub 2048 -fa 1 -ctk q4_0 -ctv q8_0 -p 0 -n 128",
          runtime=runtime, file_gib=21e9 / 2**30, stated=False, assumed=_9900T)
      for index, runtime in ((102, "ik_llama.cpp"), (104, "llama.cpp"))),
    # msb-msb/insiderllm-bench-results tamanna-ram-speed-offload-2026-10-09 (InsiderLLM's records, rig 'tamanna'): RTX 3090 24 GB
    # (PCIe 4.0 x16) + Ryzen 7 5700X, 64 GB as 4 x 16 GB DDR4 on the CPU's two channels, set to 3000 and then 2133 MT/s in the
    # BIOS the same day (stream_read 42.44 and 31.52 GB/s); llama.cpp b10809 (5266f24), Qwen3.6-35B-A3B UD-Q4_K_M (22,134,528,992
    # bytes: Q4_K_M sized to it), llama-bench -ngl 99 -ncmoe 40/20/0 -fa 1 -t 8 -lm mmap, tg128 at depths 0 and 4096. A sweep is
    # one memory speed (the placement and depth varied); the two speeds are the record's A/B of the memory alone.
    *(Row(index, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", "Q4_K_M", "rtx-3090", "ryzen-7-5700x",
          f"llama-bench -m m.gguf -ngl 99 -ncmoe {n} -fa 1 -t 8 -lm mmap -p 0 -n 128 -d {depth}",
          memory=f"ddr4-{speed}x2", ram_gib=64, file_gib=22134528992 / 2**30, sweep=f"tamanna-3090-5700x-ddr4-{speed}")
      for index, speed, n, depth in (
          (105, 3000, 40, 0), (106, 3000, 40, 4096), (107, 3000, 20, 0), (108, 3000, 20, 4096), (109, 3000, 0, 0),
          (110, 3000, 0, 4096), (111, 2133, 40, 0), (112, 2133, 40, 4096), (113, 2133, 20, 0), (114, 2133, 20, 4096),
          (115, 2133, 0, 0), (116, 2133, 0, 4096))),
    # The same repository's rig 'rushuna': RTX 3060 12 GB (PCIe 3.0 x16) + Core i7-7700, 32 GB as 4 x 8 GB DDR4-2133 (the
    # 2026-09-28 record; two channels), llama.cpp b10809, Qwen3.6-35B-A3B UD-Q4_K_M, llama-bench -ngl 99 -ncmoe N -fa 1 with
    # 4 threads: the 2026-09-11 record (-lm mmap, tg128 at d0 and d4096) and the 2026-09-28 re-measure (load mode auto).
    *(Row(index, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", "Q4_K_M", "rtx-3060-12gb", "core-i7-7700",
          f"llama-bench -m m.gguf -ngl 99 -ncmoe {n} -fa 1 -t 4{lm} -p 0 -n 128 -d {depth}",
          memory="ddr4-2133x2", ram_gib=32, file_gib=22134528992 / 2**30, sweep="rushuna-3060-7700")
      for index, n, depth, lm in (
          (117, 40, 0, " -lm mmap"), (118, 40, 4096, " -lm mmap"), (119, 24, 0, " -lm mmap"), (120, 24, 4096, " -lm mmap"),
          (121, 32, 0, ""), (122, 24, 8192, ""))),
    Row(123, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", "Q4_K_M", None, "xeon-e5-2660-v3",
        f"llama-bench -m m.gguf -ngl 0 -t 6 {_3060_KV}", memory=_3060_DDR3, ram_gib=64, file_gib=19.70,
        stated=False, assumed=_E5_2666V3, sweep="3060-e5-2666v3"),
    Row(124, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", "Q4_K_M", "rtx-3060-12gb", "xeon-e5-2660-v3",
        f"llama-bench -m m.gguf -ngl 99 --n-cpu-moe 20 -t 8 {_3060_KV}", memory=_3060_DDR3, ram_gib=64,
        file_gib=19.70, stated=False, assumed=_E5_2666V3, sweep="3060-e5-2666v3"),
    # AdarGit008/mcgyvr records/evidence/2026-08-25-moe-expert-offload (two rigs, named in the repository's
    # data/capability-table.json: srv1 a GTX 1660 SUPER 6 GB on a Core i5-9600K, srv2 an RTX 3060 12 GB on a Core i9-10900F):
    # qwen3-coder:30b Q4_K_M (18,556,688,736 bytes; priced as the catalog's Qwen3-30B-A3B, the same shape), llama-server
    # b10481 -ngl 99 -c 4096 -fa on, 128 tokens after a 32-token warm-up. The memory's speed is not stated: srv2 ran 32 GB on
    # one channel (STREAM 13.3 GB/s), then 16 GB on two (23.8 GB/s, --no-mmap: the file is larger than the RAM); srv1 48 GB
    # (26.8 GB/s). Each priced at its CPU's rated DDR4 speed on the stated channels (srv1: two channels assumed).
    *(Row(index, "Qwen3-Coder-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", gpu, cpu,
          f"llama-bench -m m.gguf -ngl 99 --n-cpu-moe {n} -fa 1{t}{mm} -p 0 -n 128", memory=mem, ram_gib=ram,
          file_gib=18556688736 / 2**30, stated=False, assumed=why, sweep=sweep)
      for index, gpu, cpu, n, t, mm, mem, ram, why, sweep in (
          *((i, "gtx-1660-super", "core-i5-9600k", n, "", "", "ddr4-2666x2", 48, _SRV1, "mcgyvr-srv1")
            for i, n in ((131, 48), (132, 44), (133, 40))),
          *((i, "gtx-1660-super", "core-i5-9600k", n, " -t 5", "", "ddr4-2666x2", 48, _SRV1, "mcgyvr-srv1-t5")
            for i, n in ((134, 40), (135, 39), (136, 38), (137, 37))),
          *((i, "rtx-3060-12gb", "core-i9-10900f", n, " -t 10", "", "ddr4-2933x1", 32, _SRV2_1CH, "mcgyvr-srv2-1ch")
            for i, n in ((138, 48), (139, 40), (140, 32), (141, 24), (142, 20))),
          *((i, "rtx-3060-12gb", "core-i9-10900f", n, " -t 10", " -mmp 0", "ddr4-2933x2", 16, _SRV2_2CH, "mcgyvr-srv2-2ch")
            for i, n in ((143, 20), (144, 24), (145, 32), (146, 40))))),
    # jeano76/8G_Qwen3-Coder-30B-A3B README (revision 0311d14): RTX 2070 SUPER 8 GB + Core i5-12400F (priced on the
    # i5-12400 preset: the same cores and clocks without the integrated GPU), 32 GB DDR5-5600 on ONE channel (one DIMM, 29.1
    # GB/s measured). Qwen3-Coder-30B-A3B (the catalog's Qwen3-30B-A3B shape) llama-bench tg128 with -t 6 (the page's physical
    # cores): Q4_K_M and IQ4_XS -ncmoe sweeps, an IQ4_XS thread sweep at -ncmoe 34, and UD-Q3_K_XL (priced as Q3_K_M sized to
    # its 13.81 GB) at the least -ncmoe each context fits, q8_0 KV. The page gives no run dates: these predate its August
    # 2026 switch to Qwen3.6 (the date column names no build; priced as a current one). Then Qwen3.6-35B-A3B UD-Q3_K_XL
    # (16.85 GB) on llama-server, August 2026: the A/B table's short-context generation, -ub 2048, q8_0 KV, -lm none.
    *(Row(index, "Qwen3-Coder-30B-A3B", "qwen3-30b-a3b", quant, "rtx-2070-super", "core-i5-12400",
          f"llama-bench -m m.gguf -ngl 99 -ncmoe {n} -t {t}{kv} -p 0 -n 128", memory="ddr5-5600x1", ram_gib=32,
          file_gib=gb * 1e9 / 2**30, sweep=sweep)
      for index, quant, gb, n, t, kv, sweep in (
          *((i, "Q4_K_M", 18.56, n, 6, "", "2070s-12400f-coder-q4km") for i, n in ((147, 48), (148, 40), (149, 32))),
          *((i, "IQ4_XS", 16.38, n, 6, "", "2070s-12400f-coder-iq4xs") for i, n in ((150, 48), (151, 40), (152, 34))),
          *((i, "IQ4_XS", 16.38, 34, t, "", "2070s-12400f-coder-threads") for i, t in ((153, 2), (154, 3), (155, 4), (156, 5))),
          *((i, "Q3_K_M", 13.81, n, 6, " -fa 1 -ctk q8_0 -ctv q8_0", "2070s-12400f-coder-udq3")
            for i, n in ((158, 32), (159, 34), (160, 38), (161, 40))))),
    *(Row(index, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", "Q3_K_M", "rtx-2070-super", "core-i5-12400",
          f"llama-bench -m m.gguf -ngl 99 -ncmoe {n} -t 6 -fa 1 -mmp 0 -ub 2048 -ctk q8_0 -ctv q8_0 -p 0 -n 128",
          memory="ddr5-5600x1", ram_gib=32, file_gib=16.85e9 / 2**30, sweep="2070s-12400f-qwen3.6")
      for index, n in ((162, 32), (163, 30), (164, 33), (165, 34), (166, 40))),
    # The same page's llama-server generation after a fixed 21,970-token prompt (cache_prompt false, median of 3): the -ub
    # table of the Qwen3-Coder configuration and the A/B table's "@22K" column of Qwen3.6 (rows 162-166 are SUSPECT: their
    # short-context column is below these). Priced as a decode from depth 21,970; the tokens generated are not stated (128
    # assumed: the figure hardly moves with them at this depth).
    *(Row(index, model_in_csv, model, "Q3_K_M", "rtx-2070-super", "core-i5-12400",
          f"llama-bench -m m.gguf -ngl 99 -ncmoe {n} -t 6 -fa 1 -mmp 0 -ub {ub} -ctk q8_0 -ctv q8_0 -p 0 -n 128 -d 21970",
          memory="ddr5-5600x1", ram_gib=32, file_gib=gb * 1e9 / 2**30, sweep=sweep)
      for index, model_in_csv, model, gb, ub, n, sweep in (
          *((i, "Qwen3-Coder-30B-A3B", "qwen3-30b-a3b", 13.81, ub, n, "") for i, ub, n in
            ((188, 512, 38), (189, 1024, 38), (190, 2048, 40), (191, 2048, 39), (192, 4096, 42))),
          *((i, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", 16.85, 2048, n, "2070s-12400f-qwen3.6-22k") for i, n in
            ((193, 32), (194, 30), (195, 33), (196, 34), (197, 40))))),
    # GoodOlClint/homelab docs/llm-bench-results.md: Quadro RTX 5000 16 GB (PCIe 3.0 x16) passed through to a Proxmox VM on an
    # i9-14900K host (MPG Z690 Carbon: the repository's ADR 0056), the VM pinned to 6 P-cores with 80 GB; the host's 128 GB
    # are 4 x 32 GB DDR5 on two channels (two DIMMs each) at 4000 MT/s (the JEDEC fallback: docs/local-ai-plan.md), then at
    # 4800 MT/s (only the memory clock changed). llama-bench build 5266f24da (10809) -ngl 99 --n-cpu-moe N -fa 1 -t 6:
    # Qwen3-30B-A3B Q4_K_M (17.28 GiB) and Qwen3.6-35B-A3B UD-Q4_K_M (20.60 GiB, priced as Q4_K_M sized to it).
    *(Row(index, model_in_csv, model, "Q4_K_M", "quadro-rtx-5000", "core-i9-14900k",
          f"llama-bench -m m.gguf -ngl 99 --n-cpu-moe {n} -fa 1 -t 6 -p 0 -n 128", memory=f"ddr5-{speed}x2", ram_gib=80,
          file_gib=gib, sweep=f"rtx5000-14900k-{model}-ddr5-{speed}")
      for index, model_in_csv, model, gib, speed, n in (
          *((i, "Qwen3-30B-A3B", "qwen3-30b-a3b", 17.28, 4000, n) for i, n in ((167, 40), (168, 24), (169, 16))),
          *((i, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", 20.60, 4000, n) for i, n in ((170, 24), (171, 20), (172, 16))),
          *((i, "Qwen3-30B-A3B", "qwen3-30b-a3b", 17.28, 4800, n) for i, n in ((173, 40), (174, 24), (175, 16))))),
    # lucaspwo/ancalagon-llm benchmarks/TUNING.md section 2: RTX 4070 Ti SUPER 16 GB + Ryzen 5 7600X, Qwen3-Coder-30B-A3B-Instruct
    # Q4_K_M (lmstudio-community, the catalog's Qwen3-30B-A3B shape; size not stated), llama-bench tg128 -ngl 99 --n-cpu-moe
    # 48 down to 6. The memory is not stated (AM5 takes DDR5 on two channels: the preset's DDR5-5200 x2 assumed) nor the
    # bench's threads (the page sets -t 12 for llama.cpp: assumed).
    *(Row(index, "Qwen3-Coder-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", "rtx-4070-ti-super", "ryzen-5-7600x",
          f"llama-bench -m m.gguf -ngl 99 --n-cpu-moe {n} -t 12 -p 0 -n 128", stated=False,
          assumed="the memory (the page names none; AM5 takes DDR5 on two channels: the preset's DDR5-5200 x2) and the "
                  "bench's threads (the page: -t 12 for llama.cpp)", sweep="4070tis-7600x-coder")
      for index, n in ((176, 48), (177, 40), (178, 32), (179, 24), (180, 20), (181, 18), (182, 16), (183, 14), (184, 12),
                       (185, 10), (186, 8), (187, 6))),
)

EXTRA_SKIPPED: dict[int, str] = {
    10: "llama.cpp --swa-full (full KV cache for the sliding-window layers), a setting COPE does not model; "
        "row 8 is the default run of the same table",
    11: "llama.cpp --swa-full (full KV cache for the sliding-window layers), a setting COPE does not model; "
        "row 9 is the default run of the same table",
    39: "the opt-in CUDA stream concurrency (GGML_CUDA_GRAPH_OPT=1) of PR 16991, a mode COPE does not model",
    41: "the CPU and its memory are not stated (the experts run on the CPU)",
    42: "the CPU and its memory are not stated (the experts run on the CPU)",
    46: _SPARK_DEPTH.format(depth=4096, d0=45, d16=48),
    47: _SPARK_DEPTH.format(depth=8192, d0=45, d16=48),
    49: _SPARK_DEPTH.format(depth=32768, d0=45, d16=48),
    51: _SPARK_DEPTH.format(depth=4096, d0=50, d16=53),
    52: _SPARK_DEPTH.format(depth=8192, d0=50, d16=53),
    54: _SPARK_DEPTH.format(depth=32768, d0=50, d16=53),
    56: _SPARK_DEPTH.format(depth=4096, d0=55, d16=58),
    57: _SPARK_DEPTH.format(depth=8192, d0=55, d16=58),
    59: _SPARK_DEPTH.format(depth=32768, d0=55, d16=58),
    74: "attn_kv_b on the CPU as well as the experts (-ot exps=CPU,attn_kv_b=CPU): an attention tensor off the GPU, "
        "a placement COPE does not model",
    75: "attn_kv_b on the CPU as well as the experts (-ot exps=CPU,attn_kv_b=CPU): an attention tensor off the GPU, "
        "a placement COPE does not model",
    103: "ik_llama.cpp build 4749's regression that the issue reports (18.73 GiB of pinned host memory allocated at load; "
         "TG 16.80 against 26.23 for build 4706 with the same flags): a runtime defect, kept in the CSV as printed",
    87: "llama-fit-params' -ot for this run is not printed (the page: '-ngl 49 + per-layer -ot from blk 3'); row 86 is the "
        "written-out placement of the same split",
    **{index: "more experts on the GPU than its 12 GB hold (COPE: would not run); the Windows driver spills the rest to "
              "shared system memory over PCIe (the page: VRAM full, decode falls), a path COPE does not model"
       for index in (125, 126, 127, 128, 129)},
    157: "row 152's setting (IQ4_XS, -ncmoe 34, 6 threads) measured again in the thread sweep (38.66 against 39.12 t/s): "
         "kept in the CSV as printed so that one setting does not weigh twice",
    130: "row 124's settings with a 307-token prompt (27.73 against 27.35 t/s): kept in the CSV as printed so that one "
        "setting does not weigh twice",
}
