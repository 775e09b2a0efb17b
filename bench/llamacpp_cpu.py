"""Real llama.cpp as ground truth on this machine's CPU: COPE's estimates beside llama-bench.

    python bench/llamacpp_cpu.py [--blocks 6] [--threads 1,2] [--quants Q8_0,Q4_K_M]
                                 [--fidelities analytic,atomic,combined,calibrated] [--json OUT]

1. Builds `llama-bench` and `llama-quantize` (CPU backend) from the llama.cpp source that
   the pinned `llama-cpp-python` source distribution vendors (bench/llamacpp_build.py:
   fetched with `pip download --no-binary :all: --no-deps`, or given with --sdist), under the
   user's cache folder (`<cache>/llamacpp/<sdist>/`): a second run finds the binaries and
   does not rebuild.
2. Writes a GGUF with Qwen3-30B-A3B's real shapes (hidden 2048, 128 experts of 768, top-8,
   32 query and 4 KV heads of 128, vocabulary 151936) but random weights and `--blocks`
   blocks (bench/synthetic_gguf.py), F16, then quantizes it to each of `--quants`.
3. Runs `llama-bench -m FILE -ngl 0 -p 0 -n 64 -t 1,2 -r 1 -o json` on each file, in
   `--rounds` rounds (default 3) taken in turn over the files, so that the machine's drift
   (a shared VM's speed moves by 10-25% within minutes) falls on every configuration alike;
   a configuration's figure is the median of its rounds, and its spread is printed.
4. Runs `cope calibrate` on each file with the built llama-bench after the first round (the
   calibrated fidelity then has this machine's constants for that model and quantization),
   and `cope verify --gpu none --candidate cpu-only` after the second: the exported all-CPU
   command measured beside its estimate. Both measure the same configurations again: their
   figures join the spread.
5. Prices the same file and flags with `cope estimate` at every fidelity and prints
   predicted beside measured tokens/s, the ratio between every pair of configurations that
   differ in one setting (2 threads against 1, Q4_K_M against Q8_0) measured within each
   round beside the predicted ratio (a shared VM's drift mostly cancels in a ratio, so it can
   be judged to 5% where the absolute figures cannot), with the error, each fidelity's worst error against
   its target (calibrated 5%, combined 10%, analytic 25%) and the largest spread, which a
   target below it cannot be told from; then the total time. First of all it runs `cope
   detect`, which measures and stores this machine's read bandwidth (one thread, every
   core): the CPU lanes are planned from it.

Not run by the tests (it takes minutes). Timing depends on what else the machine runs:
say so when you quote its figures.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.llamacpp_build import SDIST  # noqa: E402
from bench.llamacpp_build import binaries as built_binaries  # noqa: E402
from engine.llamacpp.llama_bench_json import BenchTest, decode_tests, parse_bench_output  # noqa: E402

MODEL = "qwen3-30b-a3b"
N_GEN = 64
ROUNDS = 3  # measurement rounds, in turn over the files
REPETITIONS = 1  # llama-bench -r, a round
ERROR_TARGETS = {"calibrated": 0.05, "combined": 0.10, "analytic": 0.25}  # the largest |error| each may have


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# --- 1. the binaries: bench/llamacpp_build.py ------------------------------------------------


# --- 2. the files ------------------------------------------------------------------------------


def model_files(binaries: dict[str, Path], work: Path, blocks: int, quants: list[str], keep_f16: bool) -> dict[str, Path]:
    from bench.synthetic_gguf import catalog_shape, write_random_gguf

    files = {q: work / f"{MODEL}-{blocks}blocks-{q}.gguf" for q in quants}
    f16 = work / f"{MODEL}-{blocks}blocks-F16.gguf"
    missing = [q for q, p in files.items() if not p.exists()]
    if missing and not f16.exists():
        say(f"writing {f16.name} ({MODEL} shapes, {blocks} blocks, random weights)")
        write_random_gguf(f16.with_suffix(".partial"), catalog_shape(MODEL, blocks))
        f16.with_suffix(".partial").rename(f16)
    for q in missing:
        say(f"llama-quantize {f16.name} -> {q}")
        partial = files[q].with_suffix(".partial")
        subprocess.run([str(binaries["llama-quantize"]), str(f16), str(partial), q], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        partial.rename(files[q])
    if f16.exists() and not keep_f16:
        f16.unlink()
    return files


# --- 3-5. measure, calibrate, price ------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    quant: str
    threads: int
    rounds: tuple[BenchTest, ...]  # this configuration's llama-bench test, a round each
    others: dict[str, float]  # the same configuration measured by cope calibrate / cope verify
    predicted: dict[str, float | str]  # fidelity -> tokens/s, or why there is none

    @property
    def measured_ts(self) -> float:
        return statistics.median(t.avg_ts for t in self.rounds)

    @property
    def spread(self) -> float:
        """(largest - smallest) / median of every measurement of this configuration."""
        every = [t.avg_ts for t in self.rounds] + list(self.others.values())
        return (max(every) - min(every)) / self.measured_ts

    def error(self, fidelity: str) -> float | None:
        p = self.predicted[fidelity]
        return (p - self.measured_ts) / self.measured_ts if isinstance(p, float) else None


def read_figures(detect_json: str) -> dict[str, float]:
    """The measured read bandwidths in `cope detect --json`'s output: one thread, every core."""
    doc = json.loads(detect_json)
    cpu = doc.get("platform", doc).get("cpu", {})
    out = {}
    for label, name in (("one thread", "thread_bandwidth_bytes_per_s"), ("every core", "mem_bandwidth_bytes_per_s")):
        fact = cpu.get(name) or {}
        if fact.get("basis") == "measured" and fact.get("value"):
            out[label] = float(fact["value"])
    return out


def verify_cpu_only(bench: Path, path: Path, threads: int) -> tuple[str, float | None]:
    """`cope verify --gpu none --candidate cpu-only` on `path`: the exported all-CPU command run
    by llama-bench beside its estimate, end to end: (one line, the measured tokens/s)."""
    say(f"cope verify --gpu none --candidate cpu-only ({path.name}, {threads} threads)")
    rc, out, err = cope("verify", "--gpu", "none", "--candidate", "cpu-only", "--llama-bench", str(bench),
                        "--model-path", str(path), "--model", str(path), "--threads", str(threads), "--json")
    if rc != 0 or not out.strip():
        return f"cope verify failed: {(err.strip().splitlines() or ['no output'])[-1]}", None
    [run] = json.loads(out)["runs"]
    return (f"predicted {run['predicted_tokens_per_s']:.2f} tok/s, measured {run['measured_tokens_per_s']:.2f} "
            f"± {run['measured_stddev_tokens_per_s']:.2f} ({run['error']:+.1%}): {run['command']}",
            float(run["measured_tokens_per_s"]))


def bench_command(bench: Path, path: Path, threads: str) -> list[str]:
    return [str(bench), "-m", str(path), "-ngl", "0", "-p", "0", "-n", str(N_GEN), "-t", threads,
            "-r", str(REPETITIONS), "-o", "json"]


def measure(bench: Path, path: Path, threads: list[int], round_no: int) -> list[BenchTest]:
    argv = bench_command(bench, path, ",".join(str(t) for t in threads))
    say(f"round {round_no}: $ " + " ".join(argv))
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    path.with_suffix(f".llama-bench-{round_no}.json").write_text(done.stdout)  # the raw output, kept beside the file
    return decode_tests(parse_bench_output(done.stdout, where=str(bench)))


def cope(*words: str) -> tuple[int, str, str]:
    """`cope WORDS` in this process: (exit code, stdout, stderr)."""
    from cope_tui.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(words))
    return rc, out.getvalue(), err.getvalue()


def calibrate(bench: Path, path: Path, threads: int) -> tuple[str, dict[int, float]]:
    """`cope calibrate` on `path`: (a summary, its measured tokens/s by threads)."""
    say(f"cope calibrate --gguf {path.name} --threads {threads}")
    rc, out, err = cope("calibrate", "--gguf", str(path), "--llama-bench", str(bench), "--threads", str(threads),
                        "--json")
    if rc != 0:
        return f"cope calibrate failed: {(err.strip().splitlines() or ['no output'])[-1]}", {}
    doc = json.loads(out)
    fitted = ", ".join(f"{k} {v / 1e9:.2f} GB/s" for k, v in doc["constants"].items())
    runs = "; ".join(f"{r['name']} ({r['threads']} t) {r['tokens_per_s']:.2f} ± {r['stddev_tokens_per_s']:.2f}"
                     for r in doc["runs"])
    text = f"fitted {fitted}; measured {runs}; stored in {doc['path']}"
    return text, {int(r["threads"]): float(r["tokens_per_s"]) for r in doc["runs"] if not r["uses_gpu"]}


def price(path: Path, threads: int, fidelity: str, probe_budget_s: float) -> float | str:
    command = ["llama-bench", "-m", str(path), "-ngl", "0", "-p", "0", "-n", str(N_GEN), "-t", str(threads)]
    rc, out, err = cope("estimate", "--json", "--fidelity", fidelity, "--probe-budget", str(probe_budget_s),
                        "--", *command)
    if rc != 0:
        return (err.strip().splitlines() or ["failed"])[-1]
    yours = json.loads(out)["yours"]
    if not yours["runs"]:
        return yours["refusal"]
    if yours["fidelity"] != fidelity:  # never print one fidelity's figure under another's name
        return f"priced {yours['fidelity']}, not {fidelity}"
    return yours["tokens_per_s"]


def table(rows: list[Row], fidelities: list[str]) -> str:
    head = (f"{'quant':<7} {'threads':>7} {'llama-bench tok/s':>18} {'spread':>7}"
            + "".join(f" {f:>20}" for f in fidelities))
    lines = [head]
    for r in rows:
        cells = []
        for f in fidelities:
            p, e = r.predicted[f], r.error(f)
            cells.append(f"{p:8.2f} ({e:+6.1%})" if e is not None else "-")
        rounds = "/".join(f"{t.avg_ts:.1f}" for t in r.rounds)
        lines.append(f"{r.quant:<7} {r.threads:>7} {r.measured_ts:>8.2f} {f'({rounds})':>9} {r.spread:>7.1%}"
                     + "".join(f" {c:>20}" for c in cells))
    return "\n".join(lines)


def threads_text(n: int) -> str:
    return f"{n} thread{'s' if n != 1 else ''}"


def verdicts(rows: list[Row], fidelities: list[str]) -> list[str]:
    """Each fidelity's worst error against its target, and the largest spread: a target
    below the machine's own spread cannot be told from its noise."""
    noisiest = max(rows, key=lambda r: r.spread)
    lines = [f"largest spread: {noisiest.spread:.1%} ({noisiest.quant}, {threads_text(noisiest.threads)}: rounds "
             + ", ".join(f"{t.avg_ts:.2f}" for t in noisiest.rounds)
             + "".join(f", {k} {v:.2f}" for k, v in noisiest.others.items()) + ")"]
    for f in fidelities:
        errors = [(abs(e), r) for r in rows if (e := r.error(f)) is not None]
        if not errors:
            continue
        worst, r = max(errors, key=lambda x: x[0])
        target = ERROR_TARGETS.get(f)
        judged = "" if target is None else (f" (target {target:.0%}: {'met' if worst <= target else 'not met'}"
                                            + ("; below the largest spread" if target < noisiest.spread else "")
                                            + ")")
        lines.append(f"{f}: worst error {worst:.1%} ({r.quant}, {threads_text(r.threads)}){judged}")
    return lines


RATIO_TARGET = 0.05  # a predicted ratio within 5% of the measured one


@dataclass(frozen=True)
class Ratio:
    """How much faster configuration `a` decodes than `b`: measured within each round (the
    two ran minutes apart at most, so the machine's drift mostly cancels) and predicted."""

    a: Row
    b: Row
    measured: float  # median over the rounds of a's tokens/s / b's in the same round
    predicted: dict[str, float]  # fidelity -> a's estimate / b's

    def error(self, fidelity: str) -> float | None:
        p = self.predicted.get(fidelity)
        return None if p is None else p / self.measured - 1


def pair_ratios(rows: list[Row], fidelities: list[str]) -> list[Ratio]:
    """Every pair that differs in one setting: the threads at one quantization, the
    quantization at one thread count."""
    out = []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if (a.quant == b.quant) == (a.threads == b.threads):
                continue
            measured = statistics.median(x.avg_ts / y.avg_ts for x, y in zip(a.rounds, b.rounds))
            predicted = {f: a.predicted[f] / b.predicted[f] for f in fidelities
                         if isinstance(a.predicted[f], float) and isinstance(b.predicted[f], float)}
            out.append(Ratio(a, b, measured, predicted))
    return out


def ratio_lines(ratios: list[Ratio], fidelities: list[str]) -> list[str]:
    lines = [f"ratios between configurations (measured in the same round; target: within {RATIO_TARGET:.0%}):"]
    for r in ratios:
        cells = []
        for f in fidelities:
            e = r.error(f)
            cells.append(f"{f} {r.predicted[f]:.3f} ({e:+.1%})" if e is not None else f"{f} -")
        lines.append(f"  {r.a.quant} {threads_text(r.a.threads)} / {r.b.quant} {threads_text(r.b.threads)}: "
                     f"measured {r.measured:.3f}; " + ", ".join(cells))
    for f in fidelities:
        errors = [abs(e) for r in ratios if (e := r.error(f)) is not None]
        if errors:
            lines.append(f"  {f}: worst ratio error {max(errors):.1%} "
                         f"({'met' if max(errors) <= RATIO_TARGET else 'not met'})")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sdist", help=f"the {SDIST} source distribution (default: pip download into the cache)")
    ap.add_argument("--blocks", type=int, default=6, help="blocks of the synthetic model (default 6)")
    ap.add_argument("--threads", default="1,2", help="llama-bench -t (default 1,2)")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"measurement rounds (default {ROUNDS})")
    ap.add_argument("--quants", default="Q8_0,Q4_K_M")
    ap.add_argument("--fidelities", default="analytic,atomic,combined,calibrated")
    ap.add_argument("--probe-budget", type=float, default=120.0, help="seconds of probes for atomic/combined")
    ap.add_argument("--keep-f16", action="store_true", help="keep the F16 file after quantizing")
    ap.add_argument("--json", metavar="OUT", help="write the rows as JSON too")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        ap.error(f"--rounds: at least 1, not {args.rounds}")
    start = time.monotonic()
    threads = [int(t) for t in args.threads.split(",")]
    quants = [q.strip() for q in args.quants.split(",") if q.strip()]
    fidelities = [f.strip() for f in args.fidelities.split(",") if f.strip()]

    # This machine's read bandwidth (one thread and every core), stored for planning: the
    # analytic lane and llama.cpp's lane under the measured fidelities come from it.
    say("cope detect (measures this machine's memory read bandwidth)")
    rc, out, err = cope("detect", "--json")
    reads = read_figures(out) if rc == 0 else {}
    binaries = built_binaries(args.sdist)
    work = binaries["llama-bench"].parents[2]  # <cache>/llamacpp/<sdist>/build-shared/bin/llama-bench
    built_at = time.monotonic() - start
    files = model_files(binaries, work, args.blocks, quants, args.keep_f16)
    rounds: dict[str, list[list[BenchTest]]] = {q: [] for q in files}
    calibrations: dict[str, tuple[str, dict[int, float]]] = {}
    verified: dict[str, tuple[str, float | None]] = {}
    for round_no in range(1, args.rounds + 1):
        for q, path in files.items():
            rounds[q].append(measure(binaries["llama-bench"], path, threads, round_no))
        if round_no == 1 and "calibrated" in fidelities:  # calibrate and verify inside the measured window
            calibrations = {q: calibrate(binaries["llama-bench"], p, max(threads)) for q, p in files.items()}
        if round_no == min(2, args.rounds):
            verified = {q: verify_cpu_only(binaries["llama-bench"], p, max(threads)) for q, p in files.items()}
    rows: list[Row] = []
    for q, path in files.items():
        calibrated_ts = calibrations[q][1] if q in calibrations else {}
        verified_ts = verified[q][1] if q in verified else None
        for i, test in enumerate(rounds[q][0]):
            others = {}
            if test.n_threads in calibrated_ts:
                others["calibrate"] = calibrated_ts[test.n_threads]
            if test.n_threads == max(threads) and verified_ts is not None:
                others["verify"] = verified_ts
            predicted = {}
            for f in fidelities:
                say(f"cope estimate --fidelity {f} ({q}, {test.n_threads} threads)")
                predicted[f] = price(path, test.n_threads, f, args.probe_budget)
            rows.append(Row(q, test.n_threads, tuple(r[i] for r in rounds[q]), others, predicted))
    first = rows[0].rounds[0] if rows else None
    print(f"llama.cpp {first.build_commit if first else '?'} (build {first.build_number if first else '?'}), "
          f"{first.cpu_info if first else '?'}; {MODEL} shapes, {args.blocks} blocks, random weights; "
          f"llama-bench -ngl 0 -p 0 -n {N_GEN} -r {REPETITIONS}, {args.rounds} rounds (median; spread: "
          f"(largest - smallest) / median of the rounds, calibrate's and verify's runs of the same configuration)")
    print("read bandwidth (cope detect): " + (", ".join(f"{k} {v / 1e9:.1f} GB/s" for k, v in reads.items())
                                              or "not measured"))
    print(table(rows, fidelities))
    for r in rows:
        for f, p in r.predicted.items():
            if not isinstance(p, float):
                print(f"{r.quant} {r.threads} threads, {f}: {p}")
    for line in verdicts(rows, fidelities) if rows else []:
        print(line)
    ratios = pair_ratios(rows, fidelities)
    for line in ratio_lines(ratios, fidelities):
        print(line)
    for q, (line, _) in verified.items():
        print(f"cope verify, {q}: {line}")
    for q, (text, _) in calibrations.items():
        print(f"cope calibrate, {q}: {text}")
    elapsed = time.monotonic() - start
    print(f"time: {elapsed / 60:.1f} min in all ({built_at / 60:.1f} min to have the binaries)")
    if args.json:
        doc = {"read_bytes_per_s": reads,
               "rows": [{"quant": r.quant, "threads": r.threads, "measured_tokens_per_s": r.measured_ts,
                         "rounds_tokens_per_s": [t.avg_ts for t in r.rounds], "others_tokens_per_s": r.others,
                         "spread": r.spread, "predicted": r.predicted} for r in rows],
               "ratios": [{"a": [x.a.quant, x.a.threads], "b": [x.b.quant, x.b.threads], "measured": x.measured,
                           "predicted": x.predicted} for x in ratios]}
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
