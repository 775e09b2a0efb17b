"""A fake llama-bench for `cope calibrate`'s tests: a Python script written into a test's
folder that reads llama-bench's flags (-m -ngl -ncmoe -t -n -p -r -o) and prints `-o json`
results (the fields llama-bench.cpp's json_printer writes) computed from known constants.

Its own roofline, written from llama.cpp's placement rules, not from COPE's code: the
last `-ngl` blocks on the GPU (the output layer too when -ngl exceeds the blocks), the
experts of blocks below `-ncmoe` on the CPU; each block's shared bytes (weights and its
KV cache at the mean depth decoded) and each layer's k active experts streamed at the
GPU's rate or the CPU's min(threads x per-thread rate, saturated rate), fixed costs per
block, per expert batch and per token, half a hand-over each time the work changes device.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from engine.cost.analytic_cost import AnalyticAssumptions
from tests import tiny_gguf as tg


@dataclass(frozen=True)
class FakeMachine:
    cpu_thread_bytes_per_s: float = 2e8
    cpu_saturated_bytes_per_s: float = 1e12
    cpu_block_overhead_s: float = 300e-6
    cpu_dispatch_s: float = 10e-6
    gpu_stream_bytes_per_s: float = 604.8e9
    gpu_block_overhead_s: float = 150e-6
    gpu_expert_launch_s: float = 15e-6
    sync_s: float = 250e-6
    # The global fit's (engine.cost.analytic_cost): calibrate does not fit it.
    token_fixed_s: float = AnalyticAssumptions().token_fixed_s
    gpu: bool = False
    output: str = "json"  # "json" | "garbage" | "fail"
    busy_above: int = 0  # runs with more threads than this are 3x slower (other work on the cores); 0: none
    jitter_above: int | None = None  # runs with more threads than this vary by 40% over their repetitions
    # the model, from the weights' shapes
    shared_bytes: list[float] = field(default_factory=list)
    expert_bytes: list[float] = field(default_factory=list)  # k active experts of each block
    head_bytes: float = 0.0
    kv_bytes_per_token: float = 0.0  # one block's K and V, f16


def model_facts(weights: dict[str, np.ndarray], top_k: int = tg.TOP_K) -> dict:
    """Bytes a decode token reads, from the weights (F32) alone."""
    s = tg.shape_of(weights)
    shared, experts = [], []
    for b in range(s.n_blocks):
        names = [n for n in weights if n.startswith(f"blk.{b}.")]
        exps = sum(4 * weights[n].size for n in names if "_exps" in n)
        shared.append(float(sum(4 * weights[n].size for n in names if "_exps" not in n)))
        experts.append(float(exps / s.n_experts * top_k))
    return {"shared_bytes": shared, "expert_bytes": experts, "head_bytes": float(4 * weights["output.weight"].size),
            "kv_bytes_per_token": float(2 * s.n_head_kv * s.head_dim * 2)}


SCRIPT = r'''
import json, sys
spec = json.loads(SPEC)
args = sys.argv[1:]
def value(*names, default=None):
    for i, a in enumerate(args):
        if a in names:
            return args[i + 1]
    return default
if spec["output"] == "fail":
    print("error: failed to load model", file=sys.stderr)
    sys.exit(1)
if spec["output"] == "garbage":
    print("| model | size | params | backend | t/s |")
    sys.exit(0)
n_blocks = len(spec["shared_bytes"])
ngl = int(value("-ngl", "--n-gpu-layers", default="-1"))
ncmoe = int(value("-ncmoe", "--n-cpu-moe", default="0"))
threads = int(value("-t", "--threads", default="4"))
n_gen = int(value("-n", "--n-gen", default="128"))
n_prompt = int(value("-p", "--n-prompt", default="512"))
if ngl < 0:
    ngl = n_blocks + 1
if not spec["gpu"]:
    ngl = 0
start = max(n_blocks - ngl, 0)
cpu_bw = min(threads * spec["cpu_thread_bytes_per_s"], spec["cpu_saturated_bytes_per_s"])
gpu_bw = spec["gpu_stream_bytes_per_s"]
kv = spec["kv_bytes_per_token"] * (n_gen // 2)
t, devices = spec["token_fixed_s"], []
for b in range(n_blocks):
    shared = spec["shared_bytes"][b] + kv
    if b >= start:
        t += spec["gpu_block_overhead_s"] + shared / gpu_bw; devices.append("gpu")
    else:
        t += spec["cpu_block_overhead_s"] + shared / cpu_bw; devices.append("cpu")
    if b < ncmoe or b < start:
        t += spec["cpu_dispatch_s"] + spec["expert_bytes"][b] / cpu_bw; devices.append("cpu")
    else:
        t += spec["gpu_expert_launch_s"] + spec["expert_bytes"][b] / gpu_bw; devices.append("gpu")
if ngl > n_blocks:
    t += spec["head_bytes"] / gpu_bw; devices.append("gpu")
else:
    t += spec["head_bytes"] / cpu_bw; devices.append("cpu")
t += sum(a != b for a, b in zip(devices, devices[1:])) * spec["sync_s"] / 2
if spec["busy_above"] and threads > spec["busy_above"]:
    t *= 3.0
ts = 1.0 / t
stddev = 0.4 * ts if spec["jitter_above"] is not None and threads > spec["jitter_above"] else 0.0
test = {"build_commit": "fake123", "build_number": 4242, "cpu_info": "Fake CPU", "gpu_info": "Fake GPU" if spec["gpu"] else "",
        "backends": "CUDA" if spec["gpu"] else "CPU", "model_filename": value("-m"), "model_type": "qwen3moe ?B F32",
        "model_size": 1000, "model_n_params": 250, "n_batch": 2048, "n_ubatch": 512, "n_threads": threads,
        "cpu_mask": "0x0", "cpu_strict": False, "poll": 50, "type_k": "f16", "type_v": "f16", "n_gpu_layers": ngl,
        "n_cpu_moe": ncmoe, "split_mode": "layer", "main_gpu": 0, "no_kv_offload": False, "flash_attn": -1,
        "devices": "auto", "tensor_split": "0.00", "tensor_buft_overrides": "none", "load_mode": "mmap",
        "lazy_mode": "auto", "embeddings": False, "no_op_offload": 0, "no_host": False, "repack": True,
        "fit_target": 0, "fit_min_ctx": 0, "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": 0,
        "test_time": "2026-11-30T20:00:00Z", "avg_ns": int(n_gen * t * 1e9), "stddev_ns": 0, "avg_ts": ts,
        "stddev_ts": stddev, "samples_ns": [int(n_gen * t * 1e9)], "samples_ts": [ts]}
print(json.dumps([test], indent=2))
'''


def write_fake(folder: Path, machine: FakeMachine) -> Path:
    """The fake llama-bench, executable, in `folder`."""
    path = Path(folder) / "llama-bench"
    spec = json.dumps(asdict(machine))
    path.write_text(f"#!{sys.executable}\nSPEC = {spec!r}\n{SCRIPT}", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    assert os.access(path, os.X_OK)
    return path
