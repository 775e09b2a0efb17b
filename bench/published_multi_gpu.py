"""The published decode runs on two GPUs (../shared/calibration/published-decode.csv),
transcribed as bench/published_rows.py transcribes the one-GPU rows, and priced by
bench/published.py as checks, apart from the rest: they never enter a fit
(bench/fit_published.py fits on bench/published_rows.py's ROWS and EXTRA_ROWS only).

Each -ot of the CSV's placement column is written as the regex the run used, the way
row 13 of published_rows.py writes "blk\\.(0|1|2|3|4)\\.ffn.*=CUDA0" for the column's
"blk\\.(0-4)" shorthand; llama-bench separates overrides with ';'. A server row with a
P-token prompt and G generated tokens is written as `llama-bench -d P -n G`, as there.
Rows 16 and 17 of the same sweep leave out -rtr -fmoe alike (row 16 of published_rows.py).
"""

from __future__ import annotations

from bench.published_rows import SWEEP_0, Row

_CUDA_0_6 = r"blk\.(0|1|2|3|4|5|6)\.ffn.*=CUDA0"
_CUDA_7_13 = r"blk\.(7|8|9|10|11|12|13)\.ffn.*=CUDA1"

MULTI_GPU_ROWS: tuple[Row, ...] = (
    # ikawrakow/ik_llama.cpp discussion 357: two RTX 3090s beside the EPYC 9355 of rows 12-16,
    # blocks 0-6's experts on CUDA0, 7-13's on CUDA1, the rest on the CPU; no -ts (split by free memory).
    Row(14, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q6_K", "2x rtx-3090", "epyc-9355",
        f"llama-bench -m m.gguf -ngl 99 -ot {_CUDA_0_6};{_CUDA_7_13};ffn.*=CPU -t 48 -fa 1 -ctk q8_0 -ctv q8_0 "
        + SWEEP_0, memory="ddr5-6000x12", file_gib=193 / 1.073741824, sweep="9355-2gpu", ram_gib=512),
    Row(17, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q6_K", "2x rtx-3090", "epyc-9355",
        f"llama-bench -m m.gguf -ngl 99 -ot {_CUDA_0_6};{_CUDA_7_13};ffn.*=CPU -t 48 -fa 1 -ctk q8_0 -ctv q8_0 "
        + SWEEP_0, runtime="ik_llama.cpp", memory="ddr5-6000x12", file_gib=212 / 1.073741824, sweep="9355-2gpu",
        ram_gib=512),
    # ikawrakow/ik_llama.cpp pull 405: llama-server on two RTX 3090s and an EPYC 9654P (12 x DDR5-4800),
    # a 7,221-token prompt and 55 tokens generated; -ub/-b 4096 as it ran.
    Row(25, "Qwen3-235B-A22B", "qwen3-235b-a22b", "Q4_K_M", "2x rtx-3090", "epyc-9654p",
        r"llama-bench -m m.gguf -ngl 99 -ot blk\.(0|1|2|3|4|5|6|14|15|16)\.ffn.*=CUDA0;"
        r"blk\.(7|8|9|10|11|12|13|17|18|19)\.ffn.*=CUDA1;ffn.*=CPU -t 96 -fa 1 -ctk q8_0 -ctv q8_0 "
        "-b 4096 -ub 4096 -p 0 -n 55 -d 7221", runtime="ik_llama.cpp", memory="ddr5-4800x12", stated=False,
        assumed="unsloth's UD-Q4_K_XL priced as Q4_K_M (the row gives no file size); -amb 512 -rtr -fmoe left out"),
)
MULTI_GPU_INDEXES = frozenset(r.index for r in MULTI_GPU_ROWS)
# The two-GPU rows still not priced, with why now that two cards are modelled
# (bench/published.py reports these reasons in place of published_rows.py's "two GPUs").
MULTI_GPU_SKIPPED: dict[int, str] = {
    38: "two GPUs, but a server run at an unknown depth ('--ctx-size 0', an anecdote) and no CPU stated",
    52: "--split-mode row (not modelled: COPE prices llama.cpp's layer split), and a range ('10-17')",
    72: "GLM-5.1 is not in the catalog; its two-GPU placement is given only in words",
}
