"""Hostile files, folders, caches and runtimes against the real command line (issue 32).

    python bench/fuzz_files.py            # every class, each case a `cope` child process
    python bench/fuzz_files.py -v         # and each case's last line

bench/fuzz.py mutates file contents; this campaign runs whole commands on what a person's
disk may hold: sparse giants, FIFOs in folders and caches, links to devices, header bombs,
huge declared counts, fake runtimes with hostile output, and (where `unshare -rm` can mount
a small tmpfs) writes onto a full disk. Each case runs `python -m cope_tui.cli ...` in a
child under RLIMIT_AS (4 GiB, a safety net) and a 10 s limit (then SIGTERM, then SIGKILL:
a child that needs SIGKILL did not stop on SIGTERM); its peak memory is the child's
ru_maxrss. Counted per class: tracebacks, errors that are not one line, hangs past 10 s,
runs over 1 GiB, partial artefacts after a failed write. Concurrent probe runs are checked
by tests/test_hostile_writes.py with two real processes (not repeated here).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 10.0
GIB = 2**30
FAST = ["--gpu", "rtx-4090", "--fidelity", "analytic", "--tokens", "50"]
CONFIG = {"model_type": "qwen3_moe", "num_experts": 128, "num_experts_per_tok": 8, "hidden_size": 2048,
          "num_hidden_layers": 48, "vocab_size": 151936, "moe_intermediate_size": 768, "intermediate_size": 6144,
          "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128}
_PEAK = [0]
VERBOSE = "-v" in sys.argv[1:]
COUNTS = ("tracebacks", "not one line", "hangs", "over 1 GiB", "partial artefacts")


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 * GIB, 4 * GIB))


def run_case(argv: list[str], env: dict[str, str], cwd: Path, wrap: list[str] | None = None) -> dict:
    cmd = [*(wrap or []), sys.executable, "-m", "cope_tui.cli", *argv] if not wrap else [*wrap]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env, cwd=cwd, preexec_fn=_limit, text=True, errors="replace")
    start, hang = time.monotonic(), False
    try:
        err = proc.communicate(timeout=LIMIT_S)[1]
    except subprocess.TimeoutExpired:
        hang = True
        proc.send_signal(signal.SIGTERM)
        try:
            err = proc.communicate(timeout=5)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            err = proc.communicate()[1] + "\n(needed SIGKILL)"
    # RUSAGE_CHILDREN is the largest child so far: a case's own peak shows when it raises it
    # (a case under an earlier, larger peak reads as that peak's bound, never as over it).
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    own, _PEAK[0] = (peak if peak > _PEAK[0] else 0), max(_PEAK[0], peak)
    lines = [line for line in err.strip().splitlines() if not line.startswith("cope: warning")]
    return {"rc": proc.returncode, "hang": hang, "s": time.monotonic() - start, "err": err,
            "traceback": "Traceback" in err, "one_line": proc.returncode == 0 or (
                len(lines) == 1 and lines[0].startswith("cope: error: ")), "maxrss": own}


def _sparse(path: Path, size: int, head: bytes = b"") -> Path:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def _gguf_bomb(path: Path, tensors: int, keys: int) -> Path:
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, tensors, keys))
    return path


FAKE_BENCH = """#!{python}
import sys
if sys.argv[1:] in (["--version"], ["--help"]):
    sys.stdout.write("usage: llama-bench\\n  -m, --model <filename>\\n  -o, --output <json>\\n"); sys.exit(0)
mode = {mode!r}
if mode == "flood":
    while True:
        sys.stdout.write("[" * 65536)
elif mode == "nan":
    sys.stdout.write('[{{"n_prompt": 0, "n_gen": 64, "avg_ts": NaN, "stddev_ts": 0}}]')
elif mode == "bytes":
    sys.stdout.flush(); sys.stdout.buffer.write(b"\\xff\\xfe\\x80 \\xc3\\x28")
elif mode == "nested":
    sys.stdout.write("[" * 200000 + "]" * 200000)
"""


def cases(tmp: Path) -> dict[str, list[tuple[str, list[str]]]]:
    """class -> [(name, argv)], the files made under `tmp`."""
    giant = 9 * GIB
    out: dict[str, list[tuple[str, list[str]]]] = {}
    model = ["--model", "qwen3-30b-a3b"]
    out["sparse giants"] = [
        (f"--trace {s}", ["advise", *model, *FAST, "--trace", str(_sparse(tmp / f"giant{s}", giant))])
        for s in (".csv", ".jsonl", ".cope.npz")
    ] + [("--model config.json", ["advise", "--model", str(_sparse(tmp / "giant.config.json", giant)), *FAST]),
         ("--model .gguf", ["advise", "--model", str(_sparse(tmp / "giant.gguf", giant, b"GGUF")), *FAST]),
         ("--prompts", ["trace", "record", "--model", "org/x", "--prompts", str(_sparse(tmp / "p.txt", giant))])]
    fifo_dir = tmp / "fifo-model"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "m.gguf")
    os.mkfifo(tmp / "fifo.csv")
    flame = tmp / "flame"
    flame.mkdir()
    os.mkfifo(flame / "layer_01.parquet")
    out["FIFOs in folders and caches"] = [
        ("--trace FIFO", ["advise", *model, *FAST, "--trace", str(tmp / "fifo.csv")]),
        ("FIFO .gguf in --model folder", ["advise", "--model", str(fifo_dir), *FAST]),
        ("FIFO layer in a FLAME folder", ["advise", *model, *FAST, "--trace", str(flame)]),
        ("export --out FIFO", ["export", "--candidate", "partition-first", *model, *FAST, "--out",
                               str(tmp / "fifo.csv")]),
        ("FIFO bandwidth cache", ["advise", *model, *FAST]),  # the cache's FIFOs are made in main()
    ]
    (tmp / "zero.config.json").symlink_to("/dev/zero")
    (tmp / "zero.csv").symlink_to("/dev/zero")
    out["device symlinks"] = [
        ("--model -> /dev/zero", ["advise", "--model", str(tmp / "zero.config.json"), *FAST]),
        ("--trace -> /dev/zero", ["advise", *model, *FAST, "--trace", str(tmp / "zero.csv")]),
    ]
    deep = tmp / "deep.config.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    out["header and compression bombs"] = [
        ("GGUF 2e6 tensors", ["advise", "--model", str(_gguf_bomb(tmp / "t.gguf", 2_000_000, 1)), *FAST]),
        ("GGUF 3e6 keys", ["advise", "--model", str(_gguf_bomb(tmp / "k.gguf", 1, 3_000_000)), *FAST]),
        ("nested config.json", ["advise", "--model", str(deep), *FAST]),
    ]
    counts = []
    for name, change in (("16,384 experts", {"num_experts": 16384}), ("1e8 experts", {"num_experts": 10**8}),
                         ("top-k 4,096", {"num_experts": 4096, "num_hidden_layers": 64, "num_experts_per_tok": 4096}),
                         ("1,000 x 4,096", {"num_experts": 4096, "num_hidden_layers": 1000})):
        path = tmp / f"{name.replace(' ', '_').replace(',', '')}.config.json"
        path.write_text(json.dumps({**CONFIG, **change}))
        counts.append((name, ["advise", "--model", str(path), *FAST]))
    counts += [("advise --tokens 1e7", ["advise", *model, "--gpu", "rtx-4090", "--fidelity", "analytic",
                                        "--tokens", "10000000"]),
               ("record --tokens 1e7", ["trace", "record", "--model", "org/x", "--tokens", "10000000"])]
    out["huge declared counts"] = counts
    gguf = tmp / "m.gguf"
    gguf.write_bytes(b"GGUF")
    runtimes = []
    for mode in ("flood", "nan", "bytes", "nested"):
        bench = tmp / f"bench-{mode}" / "llama-bench"
        bench.parent.mkdir()
        bench.write_text(FAKE_BENCH.format(python=sys.executable, mode=mode))
        bench.chmod(0o755)
        runtimes.append((f"llama-bench {mode}", ["verify", "--llama-bench", str(bench), "--model-path", str(gguf),
                                                 "--tokens", "100", "--cpu", "desktop-ddr5", "--candidate",
                                                 "partition-first"]))
    out["fake runtimes with hostile output"] = runtimes
    return out


def full_disk(tmp: Path, env: dict[str, str]) -> tuple[dict, bool] | None:
    """The kt export onto a 40 KiB tmpfs holding an old run.sh and .pt: (result, partial
    artefact left), or None when no tmpfs can be mounted here."""
    mnt = tmp / "small"
    mnt.mkdir()
    pt = "cope-qwen3-30b-a3b-kt-activation.pt"
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=8k tmpfs '{mnt}'"],
                           capture_output=True)
    if probe.returncode != 0:
        return None
    script = (f"mount -t tmpfs -o size=40k tmpfs '{mnt}' && cd '{mnt}' && printf old > run.sh && printf old > {pt} "
              f"&& {sys.executable} -m cope_tui.cli export --runtime sglang-kt --candidate fixed.parallel.uniform "
              f"--model qwen3-30b-a3b {' '.join(FAST)} --out run.sh; "
              "for f in .* *; do [ -f \"$f\" ] && echo \"file $f $(cat \"$f\")\" >&2; done")
    result = run_case([], env, tmp, wrap=["unshare", "-rm", "sh", "-c", script])
    listing = sorted(line for line in result["err"].splitlines() if line.startswith("file "))
    result["err"] = "\n".join(line for line in result["err"].splitlines() if not line.startswith("file "))
    lines = [line for line in result["err"].strip().splitlines() if not line.startswith("cope: warning")]
    result["one_line"] = len(lines) == 1 and lines[0].startswith("cope: error: ")
    return result, listing != [f"file {pt} old", "file run.sh old"]


def main() -> int:
    totals: dict[str, Counter] = {}
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cope-fuzz-files-") as name:
        tmp = Path(name)
        cache = tmp / "cache"
        machine = cache / "machine"
        machine.mkdir(parents=True)
        env = {**os.environ, "COPE_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT),
               "OMP_NUM_THREADS": "1"}
        all_cases = cases(tmp)
        for cls, runs in all_cases.items():
            c = totals.setdefault(cls, Counter())
            for case, argv in runs:
                if case == "FIFO bandwidth cache":
                    for f in ("bandwidth.json", "calibration.json"):
                        if not (machine / f).exists():
                            os.mkfifo(machine / f)
                r = run_case(argv, env, tmp)
                _count(c, r, cls, case, problems)
        disk = full_disk(tmp, env)
        c = totals.setdefault("full-disk writes", Counter())
        if disk is None:
            print("full-disk writes: skipped (cannot mount a tmpfs here)")
        else:
            r, partial = disk
            _count(c, r, "full-disk writes", "kt export onto 40 KiB", problems)
            c["partial artefacts"] += partial
    width = max(len(k) for k in totals)
    print(f"{'class':<{width}}  {'runs':>4}  " + "  ".join(f"{k:>17}" for k in COUNTS) + "  slowest  new peak")
    for cls, c in totals.items():
        print(f"{cls:<{width}}  {c['runs']:>4}  " + "  ".join(f"{c[k]:>17}" for k in COUNTS)
              + f"  {c['slowest_ds'] / 10:>5.1f} s  {c['peak_mib']:>6} MiB")
    for p in problems[:20]:
        print("  " + p)
    return 1 if any(c[k] for c in totals.values() for k in COUNTS) else 0


def _count(c: Counter, r: dict, cls: str, case: str, problems: list[str]) -> None:
    c["runs"] += 1
    c["tracebacks"] += r["traceback"]
    c["not one line"] += not r["one_line"] and not r["hang"]
    c["hangs"] += r["hang"]
    c["over 1 GiB"] += r["maxrss"] > GIB
    c["slowest_ds"] = max(c["slowest_ds"], round(r["s"] * 10))
    c["peak_mib"] = max(c["peak_mib"], r["maxrss"] // 2**20)
    if VERBOSE:
        print(f"{cls}: {case}: rc {r['rc']}, {r['s']:.1f} s: {(r['err'].strip().splitlines() or [''])[-1][:150]}")
    if r["traceback"] or r["hang"] or not r["one_line"] or r["maxrss"] > GIB:
        last = (r["err"].strip().splitlines() or ["no output"])[-1][:160]
        problems.append(f"{cls}: {case}: rc {r['rc']}, {r['s']:.1f} s, {r['maxrss'] >> 20} MiB: {last}")


if __name__ == "__main__":
    sys.exit(main())
