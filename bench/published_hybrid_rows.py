"""The inputs of the hybrid decode runs published on web pages (bench/data/published-hybrid.csv):
experts on the CPU beside one GPU, by layer (--n-cpu-moe, -ot) or all of them (--cpu-moe,
-ot exps=CPU), mostly on desktops with two memory channels. Transcribed by hand the same way
bench/published_rows.py transcribes the shared CSV: the catalog model, the quantization of its
experts (and the file size where the row gives one), the GPU and CPU presets, the memory, the
threads and the llama.cpp command as it ran. Only inputs: the published tokens/s are read from
the CSV and never enter the estimate.

Each Row's index is its row in bench/data/published-hybrid.csv (0-based, header excluded). The
conventions are bench/published_rows.py's and bench/published_extra_rows.py's: a server run
with a short prompt and G generated tokens is `llama-bench -p 0 -n G` (its prompt's own depth
is left out: a few dozen tokens); a file size printed in GB (10^9 bytes) is divided by 2^30 for
`file_gib`. `stated` is False where the row leaves the CPU's memory (channels or speed) or the
file to an assumption (`assumed` says which); those rows are reported apart.
Rows COPE cannot price are in HYBRID_SKIPPED with the reason.
"""

from __future__ import annotations

from bench.published_rows import Row

_GB = 1e9 / 2**30  # a file size printed in GB, in GiB

# Reddit r/LocalLLaMA post 1rei65v: RTX 5080 + Ryzen 9 9950X, 128 GB DDR5-4800 in two channels (stated), llama-server
# build 9051663 with 20 threads, flash attention, --no-mmap, a q8_0 KV cache; the 'short' workload's figure.
_5080 = "-t 20 -fa 1 -ctk q8_0 -ctv q8_0 -mmp 0 -p 0 -n 128"
# jeanfbrito.github.io: RTX 3060 12GB + Xeon E5-2650 v4, '31 GB DDR4' with neither DIMMs nor speed stated.
_E5_2650V4 = ("the Xeon E5-2650 v4's four channels of DDR4-2400 (its rated memory; the page: '31 GB DDR4', "
              "neither the DIMMs nor their speed)")

# Reddit post by u/TriWrite ('Hot Experts in your VRAM!'): RTX 4090 + Ryzen 9 7950X with 96 GB (type and speed not stated,
# AM5 takes two channels of DDR5), bartowski's Qwen3.5-122B-A10B Q4_K_L (Q4_K_M's tensors but Q8_0 embeddings and
# output; its size not stated), llama-server with a 131K q8_0 KV cache, ~300 tokens generated after a 2928-token prompt.
_7950X_96 = ("two channels of DDR5-5200 (the Ryzen 9 7950X's rated speed; the post: '96GB', no type or speed) and the "
             "catalog's Q4_K_M file for bartowski's Q4_K_L (its size is not stated)")
_4090_122B = "-ctk q8_0 -ctv q8_0 -b 3072 -ub 3072 -p 0 -n 300 -d 2928"
# carteakey.dev: i5-12600K + RTX 4070 12GB + 4 x 16 GB DDR5 on a two-channel board. Before XMP the page's dmidecode
# shows the DIMMs configured at 2000 MT/s, below the DDR5 range memory_spec.py accepts (3200 and up, as a typo
# guard): the same bus at the same transfer rate is written DDR4-2000 x2 (32 GB/s peak either way).
_12600K_SLOW = "ddr4-2000x2"

# tanhaien/qwen-moe-benchmark (ckey.vn's machine): RTX 3060 12GB + Ryzen 7 5800X, '32 GB DDR4' (31 GiB) with neither
# speed nor DIMMs stated, llama.cpp build 2d97363: Qwen3.5-35B-A3B Q3_K_M (15.2 GB), a 64-token prompt and 256 generated,
# batch 512 / ubatch 128, flash attention, q4_0 KV, 16 threads; -ngl is not printed (n-cpu-moe 0 ran out of memory, so
# the layers were on the GPU: -ngl 99).
_5800X = ("two channels of DDR4-3200 (the Ryzen 7 5800X's rated memory on its two channels; the page: '32 GB DDR4', "
          "neither speed nor DIMMs)")
_3060_5800X = "-fa 1 -ctk q4_0 -ctv q4_0 -b 512 -ub 128 -t 16 -p 0 -n 256"
# ryanilano/localai-16gb-bench-results: RTX 4070 Ti SUPER 16GB (250 W cap) + Ryzen 7 7800X3D (llama-bench's own cpu_info),
# memory not stated (AM5 takes DDR5 on two channels), llama-bench build 4fc4ec554 (9859), -ngl 99 --n-cpu-moe 99 -fa 1
# q8_0 KV, 6 threads, mmap on, pp512 / tg128 at depths 0-32768.
_7800X3D = ("two channels of DDR5-5200 (the Ryzen 7 7800X3D's rated speed; the record names no memory: AM5 takes DDR5 "
            "on two channels) and no RAM size")
_4070TIS = "llama-bench -m m.gguf -ngl 99 --n-cpu-moe 99 -fa 1 -ctk q8_0 -ctv q8_0 -t 6 -p 0 -n 128"
# Eastafrican-insuranceclaim876/Qwen3.6-35B-12GB-VRAM-Guide: RTX 4070 SUPER 12GB + i5-14600KF, '32 GB DDR4' dual-channel
# (speed not stated), ik_llama.cpp's llama-server (Windows build b5095), Qwen3.6-35B-A3B APEX I-Compact (17.0 GB; a
# mixed quantization the page calls 'q8-ish', priced on the catalog's Q4_K_M sized to the file), q8_0 KV, --no-mmap
# --mlock, 12 threads, 3 x 500 generated tokens after a short prompt.
_14600KF = ("two channels of DDR4-3200 (the page: '32 GB DDR4, dual-channel, ~50 GB/s effective', no speed) and the "
            "APEX I-Compact mix priced as Q4_K_M sized to its 17.0 GB; the i5-14600KF on the i5-14600K preset (the same "
            "cores and clocks, no integrated GPU)")
_4070S = "-ctk q8_0 -ctv q8_0 -mmp 0 -t 12 -p 0 -n 500"
# JigSawPT/moe-autopilot: RTX 5090 32GB + Ryzen 9 9950X3D + 64 GB DDR5-6004 CL30 (EXPO) in two channels (the README:
# 'DDR5-6000 dual channel'), Windows 11, the author's llama.cpp fork with its hot-expert VRAM copies switched off (no
# AIPC environment variables: the stock graph; the README's parity run matches upstream's tg128). llama-bench's OFF
# arms and the server's 'baseline' rows; --no-mmap everywhere.
_9950X3D = dict(memory="ddr5-6000x2", ram_gib=64)
_5090_GPTOSS = "-b 4096 -ub 4096 -mmp 0 -t 16 -fa 1 -p 0 -n 128"
# yassinebkr/beyondvram: RTX 3070 Ti 8GB (Windows 11) + Ryzen 5 5600X (llama-bench's cpu_info) with 32 GiB of DDR4-3600
# in two channels (docs/track4-gpt-oss.md: '57.6 GB/s dual-channel DDR4-3600 theoretical peak'), the unmodified b10355
# release llama-bench at its defaults (6 threads: the CPU's cores), pp128 / tg32, mmap, an f16 KV cache.
_5600X = dict(memory="ddr4-3600x2", ram_gib=32)
_3070TI = "-t 6 -p 0 -n 32"
_QWEN3_30B_OFFICIAL = 18_556_685_824 / 2**30  # the printed byte size of Qwen's own Q4_K_M file
# The gpt-oss-20b rows state their hardware and are fitted and judged like the others. Their -ngl 24 offloads the
# output layer and blocks 1-23 on a current build (llama.cpp PR 18148: the output layer goes first), not blocks 0-23.

# mudkipdev/flake (modules/models/README.md at 4c7765c, 2025-12-23): Ryzen 9 9900X + Radeon RX 6800 16GB (ROCm) + '64 GB
# DDR5-6000' (AM5: two channels), llama-server presets (modules/models/*.nix) with 12 threads, flash attention and a q8_0
# KV cache; the README's tokens/s at the preset's context, generated tokens not stated (priced as 128 from an empty cache).
_9900X = dict(memory="ddr5-6000x2", ram_gib=64)
_RX6800 = "-fa 1 -ctk q8_0 -ctv q8_0 -t 12 -p 0 -n 128"

# markb-1/rx6700xt-local-ai (results/llamacpp/2026-09-30-qwen3-30b-a3b-ngl-sweep.csv and docs/hardware.md at 5fd088d):
# Radeon RX 6700 XT 12GB on the Vulkan backend (Windows 11) + Ryzen 7 5800X with '32 GB DDR4' (neither speed nor DIMMs),
# llama-bench b11146 (7fe450e19) at its defaults (8 threads, mmap, f16 KV), pp512 / tg128: cpu-only, an -ngl sweep and an
# -ngl 99 -ncmoe sweep of Qwen3-30B-A3B Q4_K_M on one machine.
_5800X_6700XT = dict(memory="ddr4-3200x2", ram_gib=32, file_gib=18_550_716_416 / 2**30, stated=False,
                     assumed=("two channels of DDR4-3200 (the Ryzen 7 5800X's rated memory on its two channels; the "
                              "repository: '32 GB DDR4', neither speed nor DIMMs)"))

# chrisdesrochers/MoEArc (bench/results/tuning/*.txt at 48f1e49, read by bench/tuning-profiles.md): Intel Arc B580 12GB on
# the SYCL backend + Core Ultra 7 265K with '96 GB DDR5' (bench/baselines/gpt-oss-120b.md; no speed), llama-bench b10788
# (e107984bc) at its defaults (-ngl -1: every layer; fa auto; mmap; f16 KV) with -t 16, tg64; each process's first cell is a
# discarded warm-up (the repository's protocol), so the second reading of a duplicated first setting is the one copied.
_265K_B580 = dict(memory="ddr5-6400x2", ram_gib=96, stated=False,
                  assumed=("two channels of DDR5-6400 (the Core Ultra 7 265K's rated memory on its two channels; the "
                           "repository: '96 GB DDR5', no speed)"))
_Q30_SIZE = 18_550_716_416 / 2**30  # llama-bench's model_size of the Q4_K_M file
_OSS120_SIZE = 63_374_323_968 / 2**30

HYBRID_ROWS: tuple[Row, ...] = (
    Row(0, "Qwen3.5-35B-A3B", "qwen3.5-35b-a3b", "Q8_0", "rtx-5080", "ryzen-9-9950x",
        f"llama-bench -m m.gguf -ngl 99 -ot exps=CPU {_5080}", memory="ddr5-4800x2", ram_gib=128,
        file_gib=36.9 * _GB, sweep="5080-9950x-q8"),
    Row(1, "Qwen3.5-35B-A3B", "qwen3.5-35b-a3b", "Q4_K_M", "rtx-5080", "ryzen-9-9950x",
        f"llama-bench -m m.gguf -ngl 99 -ot exps=CPU {_5080}", memory="ddr5-4800x2", ram_gib=128,
        sweep="5080-9950x-q4"),
    Row(2, "Qwen3.5-35B-A3B", "qwen3.5-35b-a3b", "Q4_K_M", "rtx-5080", "ryzen-9-9950x",
        f"llama-bench -m m.gguf -ngl 99 --n-cpu-moe 24 {_5080}", memory="ddr5-4800x2", ram_gib=128,
        sweep="5080-9950x-q4"),
    *(Row(index, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", "IQ3_XXS", "rtx-3060-12gb", "xeon-e5-2650-v4",
          f"llama-bench -m m.gguf -ngl 99 -ncmoe {n} -fa 1 -ctk q8_0 -ctv q8_0 -p 0 -n 256", memory="ddr4-2400x4",
          file_gib=13.2 * _GB, stated=False, assumed=_E5_2650V4, sweep="3060-e5-2650v4")
      for index, n in ((5, 25), (6, 30), (7, 35))),
    Row(8, "Qwen3.5-122B-A10B", "qwen3.5-122b-a10b", "Q4_K_M", "rtx-4090", "ryzen-9-7950x",
        f"llama-bench -m m.gguf -ngl 99 -ot exps=CPU {_4090_122B}", memory="ddr5-5200x2", ram_gib=96,
        stated=False, assumed=_7950X_96, sweep="4090-7950x-122b"),
    Row(9, "Qwen3.5-122B-A10B", "qwen3.5-122b-a10b", "Q4_K_M", "rtx-4090", "ryzen-9-7950x",
        f"llama-bench -m m.gguf -ngl 99 --n-cpu-moe 40 {_4090_122B}", memory="ddr5-5200x2", ram_gib=96,
        stated=False, assumed=_7950X_96, sweep="4090-7950x-122b"),
    Row(11, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-4070", "core-i5-12600k",
        "llama-bench -m m.gguf -ngl 99 --n-cpu-moe 31 -t 6 -p 0 -n 128", memory=_12600K_SLOW, ram_gib=64,
        file_gib=59.02),
    Row(13, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-4070", "core-i5-12600k",
        r"llama-bench -m m.gguf -ngl 37 -ot blk\.(5|[6-9]|[0-9][0-9]|[0-9][0-9][0-9])\.ffn_(up|down|gate)_(ch|)exps=CPU "
        "-fa 1 -t 10 -mmp 0 -p 0 -n 128 -d 512", memory="ddr5-6000x2", ram_gib=64, file_gib=59.02),
    *(Row(index, "Qwen3.5-35B-A3B", "qwen3.5-35b-a3b", "Q3_K_M", "rtx-3060-12gb", "ryzen-7-5800x",
          f"llama-bench -m m.gguf -ngl 99 --n-cpu-moe {n} {_3060_5800X}", memory="ddr4-3200x2", ram_gib=32,
          file_gib=15.2 * _GB, stated=False, assumed=_5800X, sweep="3060-5800x")
      for index, n in ((14, 16), (15, 32), (16, 64))),
    *(Row(index, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", quant, "rtx-4070-ti-super", "ryzen-7-7800x3d",
          f"{_4070TIS} -d {depth}", memory="ddr5-5200x2", file_gib=size / 2**30, stated=False, assumed=_7800X3D,
          sweep=f"4070tis-7800x3d-{quant}")
      for index, quant, size, depth in ((18, "Q3_K_M", 16589720064, 0), (19, "Q3_K_M", 16589720064, 16384),
                                        (20, "Q3_K_M", 16589720064, 32768), (21, "Q4_K_M", 22349466112, 0),
                                        (22, "Q4_K_M", 22349466112, 16384), (23, "Q4_K_M", 22349466112, 32768))),
    *(Row(index, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", "Q4_K_M", "rtx-4070-super", "core-i5-14600k",
          f"llama-bench -m m.gguf -ngl 99 --n-cpu-moe {n} {_4070S}", runtime="ik_llama.cpp", memory="ddr4-3200x2",
          ram_gib=32, file_gib=17.0 * _GB, stated=False, assumed=_14600KF, sweep="4070s-14600kf")
      for index, n in ((24, 16), (25, 17), (26, 18), (27, 20), (28, 22), (29, 24), (30, 26), (31, 28))),
    *(Row(index, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "rtx-5090", "ryzen-9-9950x3d",
          f"llama-bench -m m.gguf -ngl 999 -ncmoe {n} {_5090_GPTOSS}", sweep="5090-9950x3d-gptoss120b", **_9950X3D)
      for index, n in ((32, 24), (33, 25), (35, 26), (36, 28), (37, 30))),
    # Qwen3-Coder-Next MXFP4 ('48 GB', the catalog's Qwen3-Next-80B-A3B shape): llama-bench ARM A of the prefill A/B.
    Row(38, "Qwen3-Coder-Next", "qwen3-next-80b-a3b", "MXFP4", "rtx-5090", "ryzen-9-9950x3d",
        "llama-bench -m m.gguf -ngl 999 --n-cpu-moe 24 -b 2048 -ub 2048 -mmp 0 -fa 1 -t 16 -p 0 -n 128",
        file_gib=48 * _GB, **_9950X3D),
    # Qwen3.6-35B-A3B Q4_K_M, llama-server's 'baseline' (<= 400 tokens after a short question).
    Row(40, "Qwen3.6-35B-A3B", "qwen3.6-35b-a3b", "Q4_K_M", "rtx-5090", "ryzen-9-9950x3d",
        "llama-bench -m m.gguf -ngl 999 --n-cpu-moe 16 -mmp 0 -t 16 -p 0 -n 400", **_9950X3D),
    # gpt-oss-20b MXFP4: -ngl 24 offloads the 24 blocks (the output stays on the CPU), the first K blocks' experts on the CPU.
    *(Row(index, "gpt-oss-20b", "gpt-oss-20b", "MXFP4", "rtx-3070-ti", "ryzen-5-5600x",
          f"llama-bench -m m.gguf {placement} {_3070TI}", sweep=sweep, **_5600X)
      for index, placement, sweep in (
          (41, "-ngl 24 --n-cpu-moe 24", "3070ti-5600x-gptoss20b"), (42, "-ngl 24 --n-cpu-moe 16", "3070ti-5600x-gptoss20b"),
          (43, "-ngl 24 --n-cpu-moe 12", "3070ti-5600x-gptoss20b"), (47, "-ngl 0", ""),
          (48, "-ngl 24 --n-cpu-moe 14", "3070ti-5600x-gptoss20b-refine"),
          (50, "-ngl 24 --n-cpu-moe 10", "3070ti-5600x-gptoss20b-refine"))),
    # Qwen3-30B-A3B Q4_K_M (Qwen's own file): the -ngl x --n-cpu-moe grid, the one-knob -ngl sweep and the refinement.
    *(Row(index, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", "rtx-3070-ti", "ryzen-5-5600x",
          f"llama-bench -m m.gguf {placement} {_3070TI}", file_gib=_QWEN3_30B_OFFICIAL, sweep=sweep, **_5600X)
      for index, placement, sweep in (
          (51, "-ngl 48 --n-cpu-moe 48", "3070ti-5600x-qwen3-grid"), (52, "-ngl 48 --n-cpu-moe 40", "3070ti-5600x-qwen3-grid"),
          (53, "-ngl 48 --n-cpu-moe 36", "3070ti-5600x-qwen3-grid"), (55, "-ngl 48 --n-cpu-moe 30", "3070ti-5600x-qwen3-grid"),
          (56, "-ngl 36 --n-cpu-moe 30", ""),
          (61, "-ngl 0", "3070ti-5600x-qwen3-ngl"), (62, "-ngl 6", "3070ti-5600x-qwen3-ngl"),
          (63, "-ngl 12", "3070ti-5600x-qwen3-ngl"), (64, "-ngl 18", "3070ti-5600x-qwen3-ngl"),
          (67, "-ngl 18 --n-cpu-moe 48", ""),
          (70, "-ngl 48 --n-cpu-moe 33", "3070ti-5600x-qwen3-refine"), (71, "-ngl 48 --n-cpu-moe 34", "3070ti-5600x-qwen3-refine"),
          (72, "-ngl 48 --n-cpu-moe 35", "3070ti-5600x-qwen3-refine"))),
    # GLM-4.5-Air Q3_K_M: -ngl 47 (46 blocks and the unloaded NextN block), blocks 0-43's experts on the CPU.
    Row(73, "GLM-4.5-Air", "glm-4.5-air", "Q3_K_M", "rx-6800", "ryzen-9-9900x",
        f"llama-bench -m m.gguf -ngl 47 --n-cpu-moe 44 -b 64 -ub 32 {_RX6800}", **_9900X),
    # Qwen3-VL-30B-A3B-Instruct Q4_K_M (the text model is Qwen3-30B-A3B's shape): -ngl 28 of 48 blocks.
    Row(74, "Qwen3-VL-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", "rx-6800", "ryzen-9-9900x",
        f"llama-bench -m m.gguf -ngl 28 --n-cpu-moe 8 -b 512 -ub 128 {_RX6800}", **_9900X),
    # Qwen3-30B-A3B Q4_K_M on the RX 6700 XT (Vulkan): cpu-only (-nopo 1), the -ngl sweep and the -ngl 99 -ncmoe sweep.
    *(Row(index, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", "rx-6700-xt@vulkan", "ryzen-7-5800x",
          f"llama-bench -m m.gguf {placement} -t 8 -p 0 -n 128", sweep=sweep, **_5800X_6700XT)
      for index, placement, sweep in (
          (75, "-ngl 0 -nopo 1", ""),
          (76, "-ngl 0", "6700xt-5800x-ngl"), (77, "-ngl 8", "6700xt-5800x-ngl"), (78, "-ngl 16", "6700xt-5800x-ngl"),
          (79, "-ngl 20", "6700xt-5800x-ngl"), (80, "-ngl 24", "6700xt-5800x-ngl"), (81, "-ngl 28", "6700xt-5800x-ngl"),
          (82, "-ngl 30", "6700xt-5800x-ngl"),
          (83, "-ngl 99 -ncmoe 48", "6700xt-5800x-ncmoe"), (84, "-ngl 99 -ncmoe 40", "6700xt-5800x-ncmoe"),
          (85, "-ngl 99 -ncmoe 32", "6700xt-5800x-ncmoe"), (86, "-ngl 99 -ncmoe 24", "6700xt-5800x-ncmoe"),
          (87, "-ngl 99 -ncmoe 20", "6700xt-5800x-ncmoe"), (88, "-ngl 99 -ncmoe 18", "6700xt-5800x-ncmoe"))),
    # Qwen3-30B-A3B Q4_K_M on the Arc B580 (SYCL): the -ncmoe sweep at depth 0 (down to the OOM floor, 18) and -ncmoe 21 by depth.
    *(Row(index, "Qwen3-30B-A3B", "qwen3-30b-a3b", "Q4_K_M", "arc-b580", "core-ultra-7-265k",
          f"llama-bench -m m.gguf -ngl 99 -ncmoe {n} -t 16 -p 0 -n 64 -d {depth}", file_gib=_Q30_SIZE, sweep=sweep,
          **_265K_B580)
      for index, n, depth, sweep in (
          (89, 30, 0, "b580-265k-qwen3-ncmoe"), (90, 28, 0, "b580-265k-qwen3-ncmoe"), (91, 26, 0, "b580-265k-qwen3-ncmoe"),
          (92, 24, 0, "b580-265k-qwen3-ncmoe"), (93, 22, 0, "b580-265k-qwen3-ncmoe"), (94, 20, 0, "b580-265k-qwen3-ncmoe"),
          (95, 19, 0, "b580-265k-qwen3-ncmoe"), (96, 18, 0, "b580-265k-qwen3-ncmoe"),
          (97, 21, 0, "b580-265k-qwen3-depth"), (98, 21, 512, "b580-265k-qwen3-depth"),
          (99, 21, 2048, "b580-265k-qwen3-depth"), (100, 21, 8192, "b580-265k-qwen3-depth"))),
    # gpt-oss-120b MXFP4 on the Arc B580: -ncmoe 36 (every expert on the CPU) by depth, and 34 and 31 (the floor) at depth 0.
    *(Row(index, "gpt-oss-120b", "gpt-oss-120b", "MXFP4", "arc-b580", "core-ultra-7-265k",
          f"llama-bench -m m.gguf -ngl 99 -ncmoe {n} -t 16 -p 0 -n 64 -d {depth}", file_gib=_OSS120_SIZE, sweep=sweep,
          **_265K_B580)
      for index, n, depth, sweep in (
          (101, 36, 0, "b580-265k-gptoss120b-depth"), (102, 34, 0, "b580-265k-gptoss120b-ncmoe"),
          (103, 31, 0, "b580-265k-gptoss120b-ncmoe"), (104, 36, 2048, "b580-265k-gptoss120b-depth"),
          (105, 36, 8192, "b580-265k-gptoss120b-depth"), (106, 36, 32768, "b580-265k-gptoss120b-depth"))),
)

_SPILL_3070TI = ("more on the 8 GB GPU than it holds (COPE: would not run, 9.5-11.6 GiB); the run went through, the "
                 "Windows driver spilling to shared system memory over PCIe or --fit moving tensors back (the page: 24 "
                 "and 30 layers regress), paths COPE does not model")
_PAST_OPTIMUM_3070TI = ("past the sweep's optimum decode falls as more experts move onto the 8 GB card (gpt-oss-20b -ncmoe "
                        "10 -> 8: 44.8 -> 37.6; Qwen3-30B-A3B -ncmoe 33 -> 32 -> 31): the card is near full under Windows "
                        "(the page: peak 7540 of 8192 MiB at -ngl 18, the desktop holding the rest), the spill regime of "
                        "rows 45-66 that COPE does not model")
_FIT = "--fit on: the runtime chose the placement and the row does not say which"
HYBRID_SKIPPED: dict[int, str] = {
    3: _FIT,
    4: _FIT,
    10: "the author's fork (a VRAM cache of hot experts, rebalanced every 60 tokens), not stock llama.cpp",
    12: "a repeat of row 11's configuration (llama-bench's default threads on this hybrid CPU are its 6 P-cores), "
        "kept in the CSV as printed so that one run does not weigh twice",
    17: "a repeat of row 16's placement (--n-cpu-moe 128 and 64 both put all 40 blocks' experts on the CPU), kept in "
        "the CSV as printed so that one placement does not weigh twice",
    34: "a repeat of row 35's placement (gpt-oss-120b -ncmoe 26, the same machine and flags, measured again the same day: "
        "35.63 against 35.10 t/s), kept in the CSV as printed so that one placement does not weigh twice",
    39: "llama-server's run of row 38's placement (71.9 against llama-bench's 74.23 t/s on the same machine), kept in the "
        "CSV as printed so that one placement does not weigh twice",
    46: "--n-cpu-moe 0 asks for every expert on the 8 GB card; the page: '--fit re-placed gracefully': the runtime chose "
        "the placement and the row does not say which",
    49: "a repeat of row 43's placement (gpt-oss-20b -ngl 24 --n-cpu-moe 12) in the refinement session (38.45 against "
        "42.62 t/s), kept in the CSV as printed so that one placement does not weigh twice",
    54: "a repeat of row 71's placement (Qwen3-30B-A3B -ngl 48 --n-cpu-moe 34) in the first-pass grid (28.02 against the "
        "idle refinement's 30.66 t/s), kept in the CSV as printed so that one placement does not weigh twice",
    44: _PAST_OPTIMUM_3070TI,
    68: _PAST_OPTIMUM_3070TI,
    69: _PAST_OPTIMUM_3070TI,
    45: _SPILL_3070TI,
    57: _SPILL_3070TI,
    58: _SPILL_3070TI,
    60: _SPILL_3070TI,
    65: _SPILL_3070TI,
    66: _SPILL_3070TI,
    59: "-ngl 24 --n-cpu-moe 24 is row 65's placement (-ngl 24 leaves blocks 0-23 on the CPU, so --n-cpu-moe 24 moves "
        "nothing; 21.54 against 18.61 t/s in another session), kept in the CSV as printed",
}
