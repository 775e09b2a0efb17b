"""Hostile files, folders, caches, runtimes, networks, disks and command lines against the
real command line (issues 32 and 47).

    python bench/fuzz_files.py            # every class, each case a `cope` child process
    python bench/fuzz_files.py -v         # and each case's last line
    python bench/fuzz_files.py --seed 3   # other random moments for the signals
    python bench/fuzz_files.py --only hub,disk   # the classes whose names hold these words
    python bench/fuzz_files.py --help     # this, and nothing run

Issue 47's classes (bench/fuzz_hostile.py): a hostile Hub on 127.0.0.1 (dropped, stalled,
trickling, redirect-looping, rate-limited answers, a 3 GiB config.json, a file list that
never ends, a wrong-shaped agent registry), a damaged Hub cache, disk full (a file-size
limit with numba's cache empty), every refusal of `cope estimate` rendered as text, and odd
file names (the exported script is run, and its -m must be the name's bytes). A case with a
follow-up runs it on the caches the first left: a follow-up that fails counts as "poisons
later runs". A run past its limit that then finishes on its own is "slow" (reported apart,
not a failure); only one that does not finish within SLOW_FACTOR times its limit is a hang.

bench/fuzz.py mutates file contents; this campaign runs whole commands on what a person's
disk may hold: sparse giants, FIFOs in folders and caches, links to devices, header and
compression bombs, huge declared counts and shapes, fake runtimes with hostile output,
concurrent probe runs on one cache, SIGINT and SIGTERM at a random moment, and (where
`unshare -rm` can mount a small tmpfs) writes onto a full disk. Each case runs
`python -m cope_tui.cli ...` in a child under RLIMIT_AS (4 GiB, a safety net) and a 10 s
limit (then SIGTERM, then SIGKILL: a child that needs SIGKILL did not stop on SIGTERM);
its peak memory is its own ru_maxrss (os.wait4), reported per class. Counted per class:
tracebacks, errors that are not one line, hangs past 10 s, runs over 1 GiB, partial
artefacts after a failed or interrupted write (a temp file left, a target neither old nor
whole), and partial profiles used as complete (a cached profile missing an atomic probe at
a thread count with no partial marker for it: the next run would price from it).
"""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 10.0
GIB = 2**30
FAST = ["--gpu", "rtx-4090", "--fidelity", "analytic", "--tokens", "50"]
CONFIG = {"model_type": "qwen3_moe", "num_experts": 128, "num_experts_per_tok": 8, "hidden_size": 2048,
          "num_hidden_layers": 48, "vocab_size": 151936, "moe_intermediate_size": 768, "intermediate_size": 6144,
          "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128}
VERBOSE = False
SEED = 0
SLOW_FACTOR = 6.0  # a run past its limit is slow until this many times the limit; then it is a hang
COUNTS = ("tracebacks", "not one line", "hangs", "over 1 GiB", "partial artefacts", "partial as complete",
          "poisons later runs")
# ("over 1 GiB": over 2 GiB for a probe run, whose timing pool is 1 GiB by design: PROBE_MEMORY_BYTES)
# What a run stopped by a signal may say: nothing (killed before COPE's handler was set), or its one line.
SIGNAL_EXITS = {0, 130, 143, -signal.SIGINT, -signal.SIGTERM}


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 * GIB, 4 * GIB))


def start_case(argv: list[str], env: dict[str, str], cwd: Path, wrap: list[str] | None = None,
               fsize: int | None = None, stdout: Path | None = None) -> subprocess.Popen:
    cmd = [*wrap] if wrap else [sys.executable, "-m", "cope_tui.cli", *argv]

    def limits() -> None:
        _limit()
        if fsize is not None:  # a write past it fails with EFBIG, as a full disk fails with ENOSPC
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    out = open(stdout, "wb") if stdout is not None else subprocess.DEVNULL  # noqa: SIM115 - the child's now
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env, cwd=cwd, preexec_fn=limits)
    if stdout is not None:
        out.close()
    proc.started = time.monotonic()  # type: ignore[attr-defined]
    proc.err = []  # type: ignore[attr-defined]
    reader = threading.Thread(target=lambda: proc.err.append(proc.stderr.read()), daemon=True)  # type: ignore[attr-defined]
    reader.start()
    proc.reader = reader  # type: ignore[attr-defined]
    return proc


def _reap(proc: subprocess.Popen, until: float) -> tuple[int, int] | None:
    """(exit status as Popen gives it, the child's own peak RSS in bytes) once it exits
    before `until` (time.monotonic), else None. os.wait4 gives each child its rusage:
    RUSAGE_CHILDREN is only the largest child so far."""
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss * 1024
        if time.monotonic() >= until:
            return None
        time.sleep(0.01)


def finish_case(proc: subprocess.Popen, *, signal_at_s: float | None = None, sig: int = signal.SIGTERM,
                limit_s: float = LIMIT_S) -> dict:
    """Wait for a started case, stop it past `limit_s` (SIGTERM, then SIGKILL), and give
    its result. With `signal_at_s`, `sig` is sent that many seconds after its start,
    and from then it has LIMIT_S to stop."""
    start, hang, sent, done = proc.started, False, None, None  # type: ignore[attr-defined]
    if signal_at_s is not None:
        done = _reap(proc, start + signal_at_s)
        if done is None:
            proc.send_signal(sig)
            sent = time.monotonic()
    slow = False
    if done is None:
        done = _reap(proc, sent + LIMIT_S if sent is not None else start + limit_s)
    if done is None and sent is None:  # past its limit: slow while it still finishes on its own
        slow = True
        done = _reap(proc, start + limit_s * SLOW_FACTOR)
    if done is None:
        hang = True
        proc.send_signal(signal.SIGTERM)
        done = _reap(proc, time.monotonic() + 5)
        if done is None:
            proc.kill()
            done = _reap(proc, time.monotonic() + 60) or (-9, 0)
            proc.err.append(b"\n(needed SIGKILL)")  # type: ignore[attr-defined]
    ended = time.monotonic()
    proc.reader.join(timeout=5)  # type: ignore[attr-defined]
    err = b"".join(proc.err).decode("utf-8", "replace")  # type: ignore[attr-defined]
    rc, peak = done
    lines = [line for line in err.strip().splitlines() if not line.startswith("cope: warning")]
    if sent is not None:  # stopped: killed before COPE's handler was set (no output), or its last line says so
        last = lines[-1] if lines else ""
        one_line = rc in SIGNAL_EXITS and (rc <= 0 or last in ("cope: interrupted", "cope: terminated"))
    else:
        # the error is the last line and the only one; lines said before it while waiting (a
        # download begun, a Hub retry) are COPE's own narration, each one line too
        errors = [line for line in lines if line.startswith("cope: error: ")]
        one_line = rc == 0 or (len(errors) == 1 and lines[-1] == errors[0]
                               and all(line.startswith("cope") for line in lines))
    return {"rc": rc, "hang": hang, "slow": slow and not hang, "s": ended - start, "err": err,
            "traceback": "Traceback" in err,
            "one_line": one_line, "maxrss": peak, "signalled": sent is not None,
            "stop_s": None if sent is None else ended - sent}


def run_case(argv: list[str], env: dict[str, str], cwd: Path, wrap: list[str] | None = None) -> dict:
    return finish_case(start_case(argv, env, cwd, wrap))


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


def cases(tmp: Path) -> dict[str, list[tuple]]:
    """class -> [(name, argv[, limit in s])], the files made under `tmp`."""
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
               ("advise --tokens 1e5", ["advise", *model, "--gpu", "rtx-4090", "--fidelity", "analytic",
                                        "--tokens", "100000"]),  # within the cap, past the replay budget
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
    out["parquet compression bombs"] = _parquet_bombs(tmp, model)
    out["crafted huge shapes"] = _huge_shapes(tmp)
    return out


# Made in a child: numpy and pyarrow in this process would stay in every child forked from it,
# and a child's ru_maxrss counts the image it was forked from (Linux keeps the old image's
# high-water mark across exec), so every case would read as this process's size.
BOMB = """
import sys
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
path, rows, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
values = pa.array(np.zeros(rows * width, dtype=np.int16))
offsets = pa.array(np.arange(0, rows * width + 1, width, dtype=np.int32))
scores = pa.array(np.zeros(rows * width, dtype=np.float16))
pq.write_table(pa.table({"indices": pa.ListArray.from_arrays(offsets, values),
                         "scores": pa.ListArray.from_arrays(offsets, scores)}), path, compression="zstd")
"""


def _parquet_bombs(tmp: Path, model: list[str]) -> list[tuple[str, list[str]]]:
    """A FLAME trace folder whose layer file is a few KB of zstd'd zeros: rows of two
    million ids (80 million values), and eight million rows of top-8 (64 million)."""
    made = []
    for name, rows, width in (("wide rows", 40, 2_000_000), ("long", 8_000_000, 8)):
        folder = tmp / f"flame-bomb-{name.replace(' ', '-')}"
        folder.mkdir()
        path = folder / "layer_02.parquet"
        if subprocess.run([sys.executable, "-c", BOMB, str(path), str(rows), str(width)],
                          capture_output=True).returncode != 0:
            return []  # no pyarrow here
        made.append((f"{name}: {path.stat().st_size // 1024} KiB, {rows * width:,} values",
                     ["advise", *model, *FAST, "--trace", str(folder)]))
    return made


# Every shape cap at once (engine/core/input_limits.py: 1,024 blocks, 4,096 experts, top-k 64):
# at --tokens 10,000 these reached 6.3 GB and 3.9 GB before the replay budget; refused now,
# as a config.json and as a GGUF header. Within the budget they run: the work is bounded, not
# short (1,024 x 256 x top-64 at the budget's 244 tokens took 55 s on two shared cores, as
# Qwen3-235B at 10,000 tokens does), so those runs get RUN_LIMIT_S before they count as hangs.
HUGE_SHAPES = (("1,024 x 256 x top-64", {"num_hidden_layers": 1024, "num_experts": 256, "num_experts_per_tok": 64}),
               ("64 x 4,096 x top-64", {"num_hidden_layers": 64, "num_experts": 4096, "num_experts_per_tok": 64}))
SMALL_DIMS = {"hidden_size": 256, "vocab_size": 32000, "moe_intermediate_size": 64, "intermediate_size": 512,
              "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64}  # so the memory plan fits a GPU
RUN_LIMIT_S = 300.0


def _huge_shapes(tmp: Path) -> list[tuple[str, list[str], float]]:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from engine.core.input_limits import most_replay_tokens

    made = []
    for i, (name, change) in enumerate(HUGE_SHAPES):
        path = tmp / f"huge-{i}.config.json"
        path.write_text(json.dumps({**CONFIG, **SMALL_DIMS, **change}))
        gguf = _shape_gguf(tmp / f"huge-{i}.gguf", change["num_hidden_layers"], change["num_experts"],
                           change["num_experts_per_tok"])
        most = most_replay_tokens(change["num_hidden_layers"], change["num_experts_per_tok"])
        runs = [("config.json", path, "10000", LIMIT_S), ("GGUF", gguf, "10000", LIMIT_S),
                ("config.json", path, "50", RUN_LIMIT_S)]
        if most * change["num_experts"] <= 2**17:  # the budget's most where the draw is not E-bound (1,024 x 256)
            runs.append(("config.json", path, str(most), RUN_LIMIT_S))
        for label, model, tokens, limit in runs:
            made.append((f"{label} {name} --tokens {tokens}", ["advise", "--model", str(model), "--gpu", "rtx-4090",
                                                               "--fidelity", "analytic", "--json", "--tokens", tokens],
                         limit))
    return made


def _shape_gguf(path: Path, blocks: int, experts: int, top_k: int) -> Path:
    """A GGUF header (tests/gguf_bytes.py) of `blocks` MoE blocks of `experts` tiny experts,
    top-`top_k`, its tensor data a sparse hole of the size the table declares."""
    from tests.gguf_bytes import ALIGN, FFN, HIDDEN, U32, Tensor, base, encode

    g = base()
    tensors = [t for t in g.tensors if not t.name.startswith(b"blk.")]
    for b in range(blocks):
        tensors += [Tensor(f"blk.{b}.attn_q.weight".encode(), (HIDDEN, HIDDEN)),
                    Tensor(f"blk.{b}.ffn_gate_exps.weight".encode(), (HIDDEN, FFN, experts)),
                    Tensor(f"blk.{b}.ffn_up_exps.weight".encode(), (HIDDEN, FFN, experts)),
                    Tensor(f"blk.{b}.ffn_down_exps.weight".encode(), (FFN, HIDDEN, experts))]
    g = replace(g, tensors=tuple(tensors)).with_field("qwen3moe.block_count", U32, blocks)
    g = g.with_field("qwen3moe.expert_count", U32, experts).with_field("qwen3moe.expert_used_count", U32, top_k)
    raw = encode(g)
    declared = sum(-(-t.n_bytes // ALIGN) * ALIGN for t in g.tensors)
    path.write_bytes(raw)
    os.truncate(path, len(raw) - min(declared, 1 << 20) + declared)
    return path


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


# A probe run of the real prober (CPU lanes measured on this machine, the GPU's from its
# preset), of a small model: the runs' figures are not the point, their cache writes are
# (a real one's expert buffers: Qwen3-30B-A3B's probe runs peaked at 1.4 GB, 100 s for three).
PROBE_MODEL = {**CONFIG, "hidden_size": 512, "moe_intermediate_size": 128, "num_experts": 16, "num_experts_per_tok": 2,
               "num_hidden_layers": 4, "vocab_size": 32000, "num_attention_heads": 8, "num_key_value_heads": 2,
               "head_dim": 64}
PROBE_TOP_K = 2
# A probe run times experts streamed from a host pool of at least 1 GiB (probes/pool_size.py:
# larger than any CPU cache, by design), so its memory is counted against 1 GiB more.
PROBE_MEMORY_BYTES = 2 * GIB


def probe_run(tmp: Path) -> list[str]:
    path = tmp / "probe-model.config.json"
    if not path.exists():
        path.write_text(json.dumps(PROBE_MODEL))
    return ["advise", "--model", str(path), "--gpu", "rtx-4090", "--cpu", "desktop-ddr5", "--threads", "2",
            "--tokens", "40", "--json", "--fidelity", "combined"]
# A probe run measures for its budget and its atomic probes whatever the budget (about 100
# of them): it is given this long before it counts as a hang; a signalled one, LIMIT_S.
PROBE_LIMIT_S = 240.0


CHECK_PROFILES = """
import json, sys
from pathlib import Path
from engine.profiles.probe_plan import atomic_probes
from probes.profile_cache import is_partial, load_cached
cache, top_k, bad = Path(sys.argv[1]), int(sys.argv[2]), []
for path in sorted((cache / "profiles").glob("*.json")) if (cache / "profiles").is_dir() else []:
    profile = load_cached(path.stem, root=cache)
    if profile is None:
        continue  # set aside as unusable: no run prices from it
    for threads in sorted({int(m.key_dict["threads"]) for m in profile.measurements if "threads" in m.key_dict}):
        missing = profile.missing([probe.ident for probe in atomic_probes(top_k, threads, 0.0)])
        if missing and not is_partial(path.stem, cache, threads):
            bad.append(f"{path.name}: {len(missing)} atomic probes missing at {threads} threads, no marker")
print(json.dumps(bad))
"""


def partial_as_complete(cache: Path, top_k: int) -> tuple[int, list[str]]:
    """Cached profiles a later run would take as complete though they are not: missing an
    atomic probe at a thread count they measured, with no partial marker for it (checked
    in a child, for the reason BOMB is made in one)."""
    done = subprocess.run([sys.executable, "-c", CHECK_PROFILES, str(cache), str(top_k)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        return 1, [f"the profile check failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}"]
    bad = json.loads(done.stdout)
    return len(bad), bad


def _temps(folder: Path) -> list[str]:
    """Temp files of an atomic write (engine/core/files.py: .NAME.*.tmp, .NAME.*.old) left in `folder`."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob(".*") if p.name.endswith((".tmp", ".old")))


def concurrent_runs(tmp: Path, env: dict[str, str]) -> list[tuple[str, dict, int, list[str]]]:
    """Three probe runs started together on one cache, then a fourth after them; each
    result with the partial profiles (as complete) and temp files found afterwards."""
    cache = tmp / "cache-concurrent"
    run_env = {**env, "COPE_CACHE_DIR": str(cache)}
    out = []
    procs = [start_case([*probe_run(tmp), "--probe-budget", "3"], run_env, tmp) for _ in range(3)]
    results = [finish_case(proc, limit_s=PROBE_LIMIT_S) | {"memory_limit": PROBE_MEMORY_BYTES} for proc in procs]
    bad, why = partial_as_complete(cache, PROBE_TOP_K)
    temps = _temps(cache)
    out += [(f"probe run {i + 1} of 3 at once", r, bad if i == 0 else 0, (why + temps) if i == 0 else [])
            for i, r in enumerate(results)]
    after = finish_case(start_case([*probe_run(tmp), "--probe-budget", "3"], run_env, tmp), limit_s=PROBE_LIMIT_S)
    after["memory_limit"] = PROBE_MEMORY_BYTES
    bad, why = partial_as_complete(cache, PROBE_TOP_K)
    out.append(("a probe run after them", after, bad, why + _temps(cache)))
    for r in results + [after]:
        r["partial"] = bool(_temps(cache))
    return out


def signalled_runs(tmp: Path, env: dict[str, str], rng: random.Random) -> list[tuple[str, dict, int, list[str]]]:
    """SIGINT and SIGTERM at a random moment to a probe run (its own cache), a kt export
    over an old run.sh and .pt, and a long replay: each must stop within LIMIT_S of the
    signal, leave no temp file, no profile taken as complete that is not, and the export's
    two files either both old or both new."""
    out = []
    pt = "cope-qwen3-30b-a3b-kt-activation.pt"
    for i, (what, sig) in enumerate((w, s) for w in ("probe run", "kt export", "long replay")
                                    for s in (signal.SIGINT, signal.SIGTERM)):
        at = round(rng.uniform(0.3, 6.0), 2)
        cache = tmp / f"cache-signal-{i}"
        run_env = {**env, "COPE_CACHE_DIR": str(cache)}
        folder = tmp / f"signal-{i}"
        folder.mkdir()
        if what == "probe run":
            argv = [*probe_run(tmp), "--probe-budget", "20"]
        elif what == "kt export":
            (folder / "run.sh").write_text("old")
            (folder / pt).write_text("old")
            argv = ["export", "--runtime", "sglang-kt", "--candidate", "fixed.parallel.uniform", "--model",
                    "qwen3-30b-a3b", *FAST, "--out", str(folder / "run.sh")]
        else:
            argv = ["advise", "--model", "qwen3-235b-a22b", "--gpu", "rtx-4090", "--fidelity", "analytic",
                    "--tokens", "10000"]
        r = finish_case(start_case(argv, run_env, folder), signal_at_s=at, sig=sig, limit_s=PROBE_LIMIT_S)
        if what == "probe run":
            r["memory_limit"] = PROBE_MEMORY_BYTES
        bad, why = partial_as_complete(cache, PROBE_TOP_K)
        left = _temps(folder) + _temps(cache)
        if what == "kt export":
            old = [(folder / n).read_text(errors="replace") == "old" for n in ("run.sh", pt)]
            whole = all(not o and (folder / n).stat().st_size > 0 for o, n in zip(old, ("run.sh", pt)))
            if not (all(old) and r["rc"] != 0) and not whole:
                left.append(f"run.sh old: {old[0]}, .pt old: {old[1]} after rc {r['rc']}")
        r["partial"] = bool(left)
        name = f"{what}, {signal.Signals(sig).name} at {at} s" + ("" if r["signalled"] else " (done before it)")
        out.append((name, r, bad, why + left))
    return out


def _wanted(cls: str) -> bool:
    return not ONLY or any(word in cls.lower() for word in ONLY)


ONLY: list[str] = []
TRACE_CSV = """
import sys
from engine.models.catalog import get_model
from engine.traces import write_llama_moe_trace_csv
from engine.traces.synthetic import SyntheticSettings, synthetic_trace
write_llama_moe_trace_csv(synthetic_trace(get_model("olmoe-1b-7b"), SyntheticSettings(tokens=24, seed=3)), sys.argv[1])
"""


def issue47_classes(tmp: Path, env: dict[str, str]) -> tuple[dict[str, list], list]:
    """bench/fuzz_hostile.py's classes (made here: their Hub servers run in this process)."""
    import fuzz_hostile as fh

    csv = tmp / "olmoe.csv"  # a real trace, made in a child (see BOMB)
    subprocess.run([sys.executable, "-c", TRACE_CSV, str(csv)], check=True, cwd=ROOT, env=env)
    trace_csv = csv.read_bytes()
    classes: dict[str, list] = {}
    hubs: list = []
    if _wanted("a hostile hub on 127.0.0.1"):
        classes["a hostile Hub on 127.0.0.1"], made = fh.hostile_hub(tmp, trace_csv)
        hubs += made
    if _wanted("a damaged hub cache"):
        classes["a damaged Hub cache"], made = fh.damaged_hub_cache(tmp, trace_csv, env)
        hubs += made
    if _wanted("disk full (file-size limit, numba cache empty)"):
        classes["disk full (file-size limit, numba cache empty)"] = fh.disk_full(tmp)
    if _wanted("command lines: estimate refusals as text"):
        classes["command lines: estimate refusals as text"] = fh.command_lines(tmp)
    if _wanted("odd names, exported scripts run"):
        classes["odd names, exported scripts run"] = fh.odd_names(tmp, trace_csv)
    return classes, hubs


def run_issue47(classes: dict[str, list], env: dict[str, str], tmp: Path, totals: dict, peaks: dict,
                problems: list[str]) -> None:
    for cls, runs in classes.items():
        c = totals.setdefault(cls, Counter())
        for case, argv, opts in runs:
            r = finish_case(start_case(argv, {**env, **opts.get("env", {})}, tmp, fsize=opts.get("fsize"),
                                       stdout=opts.get("stdout")), limit_s=opts.get("limit_s", LIMIT_S))
            _count(c, peaks.setdefault(cls, []), r, cls, case, problems)
            found = opts["check"](r) if "check" in opts else []
            c["partial artefacts"] += bool(found)
            problems += [f"{cls}: {case}: {why}" for why in found]
            if "after" in opts:
                then, then_argv, then_opts = opts["after"]
                r2 = finish_case(start_case(then_argv, {**env, **then_opts.get("env", {})}, tmp),
                                 limit_s=then_opts.get("limit_s", LIMIT_S))
                if r2["rc"] != 0 or r2["hang"]:
                    c["poisons later runs"] += 1
                    last = (r2["err"].strip().splitlines() or ["no output"])[-1][:160]
                    problems.append(f"{cls}: {then}: rc {r2['rc']}: {last}")


def main() -> int:
    global VERBOSE, SEED, ONLY
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("-v", action="store_true", help="each case's last line")
    parser.add_argument("--seed", type=int, default=0, help="the random moments of the signals")
    parser.add_argument("--only", default="", help="comma-separated words: only the classes whose names hold one")
    args = parser.parse_args()
    VERBOSE, SEED = args.v, args.seed
    ONLY = [w.strip().lower() for w in args.only.split(",") if w.strip()]
    totals: dict[str, Counter] = {}
    peaks: dict[str, list[int]] = {}
    problems: list[str] = []
    rng = random.Random(SEED)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cope-fuzz-files-") as name:
        tmp = Path(name)
        cache = tmp / "cache"
        machine = cache / "machine"
        machine.mkdir(parents=True)
        env = {**os.environ, "COPE_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT),
               "OMP_NUM_THREADS": "1"}
        new_classes, hubs = issue47_classes(tmp, env)
        all_cases = {cls: runs for cls, runs in cases(tmp).items() if _wanted(cls)} if not ONLY or any(
            _wanted(cls) for cls in OLD_CLASSES) else {}
        for cls, runs in all_cases.items():
            c = totals.setdefault(cls, Counter())
            for case, argv, *limit in runs:
                if case == "FIFO bandwidth cache":
                    for f in ("bandwidth.json", "calibration.json"):
                        if not (machine / f).exists():
                            os.mkfifo(machine / f)
                r = finish_case(start_case(argv, env, tmp), limit_s=limit[0] if limit else LIMIT_S)
                _count(c, peaks.setdefault(cls, []), r, cls, case, problems)
        try:
            run_issue47(new_classes, env, tmp, totals, peaks, problems)
        finally:
            for hub in hubs:
                hub.stop()
        later = [(cls, make) for cls, make in (("concurrent probe runs", lambda: concurrent_runs(tmp, env)),
                                               ("SIGINT and SIGTERM", lambda: signalled_runs(tmp, env, rng)))
                 if _wanted(cls)]
        for cls, runs in ((cls, make()) for cls, make in later):
            c = totals.setdefault(cls, Counter())
            for case, r, bad, why in runs:
                _count(c, peaks.setdefault(cls, []), r, cls, case, problems)
                c["partial artefacts"] += r.get("partial", False)
                c["partial as complete"] += bad
                problems += [f"{cls}: {case}: {w}" for w in why]
        disk = full_disk(tmp, env) if _wanted("full-disk writes") else False
        c = totals.setdefault("full-disk writes", Counter()) if disk is not False else Counter()
        if disk is False:
            pass
        elif disk is None:
            print("full-disk writes: skipped (cannot mount a tmpfs here)")
        else:
            r, partial = disk
            _count(c, peaks.setdefault("full-disk writes", []), r, "full-disk writes", "kt export onto 40 KiB",
                   problems)
            c["partial artefacts"] += partial
    totals = {cls: c for cls, c in totals.items() if c["runs"]}
    width = max(len(k) for k in totals)
    print(f"{'class':<{width}}  {'runs':>4}  " + "  ".join(f"{k:>19}" for k in COUNTS)
          + "  slow  slowest  largest child (MiB)")
    for cls, c in totals.items():
        each = sorted(peaks.get(cls, []), reverse=True)
        print(f"{cls:<{width}}  {c['runs']:>4}  " + "  ".join(f"{c[k]:>19}" for k in COUNTS)
              + f"  {c['slow']:>4}  {c['slowest_ds'] / 10:>5.1f} s  " + str(each[0] >> 20 if each else 0))
    print(f"{sum(c['runs'] for c in totals.values())} runs in {time.monotonic() - began:.0f} s (seed {SEED})")
    for p in problems[:30]:
        print("  " + p)
    return 1 if any(c[k] for c in totals.values() for k in COUNTS) else 0


def _count(c: Counter, peaks: list[int], r: dict, cls: str, case: str, problems: list[str]) -> None:
    c["runs"] += 1
    c["tracebacks"] += r["traceback"]
    c["not one line"] += not r["one_line"] and not r["hang"]
    c["hangs"] += r["hang"]
    c["slow"] += r.get("slow", False)
    c["over 1 GiB"] += r["maxrss"] > r.get("memory_limit", GIB)
    c["slowest_ds"] = max(c["slowest_ds"], round(r["s"] * 10))
    peaks.append(r["maxrss"])
    if VERBOSE:
        stop = f", stopped {r['stop_s']:.1f} s after the signal" if r.get("stop_s") is not None else ""
        print(f"{cls}: {case}: rc {r['rc']}, {r['s']:.1f} s{stop}, {r['maxrss'] >> 20} MiB: "
              f"{(r['err'].strip().splitlines() or [''])[-1][:150]}")
    if r["traceback"] or r["hang"] or not r["one_line"] or r["maxrss"] > r.get("memory_limit", GIB):
        last = (r["err"].strip().splitlines() or ["no output"])[-1][:160]
        problems.append(f"{cls}: {case}: rc {r['rc']}, {r['s']:.1f} s, {r['maxrss'] >> 20} MiB: {last}")


OLD_CLASSES = ("sparse giants", "FIFOs in folders and caches", "device symlinks", "header and compression bombs",
               "huge declared counts", "fake runtimes with hostile output", "parquet compression bombs",
               "crafted huge shapes", "concurrent probe runs", "SIGINT and SIGTERM", "full-disk writes")


if __name__ == "__main__":
    sys.exit(main())
