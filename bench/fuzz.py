"""A fuzzing campaign over COPE's file readers: mutations of valid files, for minutes.

    python bench/fuzz.py                       # 5 minutes over every target
    python bench/fuzz.py --seconds 60 --target gguf --target cope-npz
    python bench/fuzz.py --save-dir crashes/   # keep every crashing or hanging input

Targets (tests/fuzz_targets.py): .cope.npz, llama-moe-trace CSV, JSONL, moe-beyond CSV
traces, the GGUF model reader and the GGUF prefix parser, the profile loader. Each
case is a mutation of a valid seed file (bit flips, interesting integers and strings,
insertions, truncations, forged counts, offsets, shapes and JSON values), written to a
file and read in a worker subprocess that runs under RLIMIT_AS (--memory-mib) and a
per-case timeout (--timeout-s). A worker that runs past the timeout is killed (a hang)
and one that dies is replaced (a crash), so every case runs in a bounded subprocess.

Each outcome is one of: accepted (the reader returned), clean error (one line, a
CopeInputError, at most 300 characters), crash (any other exception, an error over
several lines or too long, a MemoryError, a dead worker), hang (past the timeout).
Prints the counts per target and overall, and the first few crashes and hangs.
"""

from __future__ import annotations

import argparse
import os
import random
import select
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUTCOMES = ("accepted", "clean error", "crash", "hang")
MAX_LINE = 300


# --- the worker: reads one case per line of stdin, answers one line on stdout ---------


def _worker(memory_mib: int) -> None:
    import resource
    import warnings

    limit = memory_mib * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    warnings.simplefilter("ignore")
    sys.path.insert(0, str(ROOT))
    from engine.core.errors import CopeInputError
    from tests.fuzz_targets import TARGETS

    for line in sys.stdin:
        name, path = line.rstrip("\n").split("\t", 1)
        try:
            TARGETS[name].read(path)
            answer = "accepted"
        except CopeInputError as exc:
            text = str(exc)
            if "\n" in text or len(text) > MAX_LINE:
                answer = f"crash\tan error of {len(text)} characters over {text.count(chr(10)) + 1} lines"
            else:
                answer = "clean error"
        except MemoryError:
            answer = "crash\tMemoryError"
        except RecursionError:
            answer = "crash\tRecursionError"
        except Exception as exc:  # noqa: BLE001 - that is what we count
            answer = f"crash\t{type(exc).__name__}: {str(exc)[:200]}"
        print(answer.replace("\n", " "), flush=True)


class Worker:
    def __init__(self, memory_mib: int):
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", "--memory-mib", str(memory_mib)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)

    def run(self, target: str, path: str, timeout_s: float) -> tuple[str, str]:
        try:
            self.proc.stdin.write(f"{target}\t{path}\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return "crash", "the worker died"
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        if not ready:
            self.close()
            return "hang", f"no answer within {timeout_s:g} s"
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            return "crash", f"the worker died (exit {code})"
        outcome, _, detail = line.rstrip("\n").partition("\t")
        return outcome, detail

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


# --- the campaign ---------------------------------------------------------------------


def campaign(targets: list[str], seconds: float, seed: int, timeout_s: float, memory_mib: int,
             save_dir: Path | None) -> tuple[dict[str, Counter], list[str]]:
    sys.path.insert(0, str(ROOT))
    from tests.fuzz_targets import TARGETS

    rng = random.Random(seed)
    counts = {t: Counter() for t in targets}
    problems: list[str] = []
    worker = Worker(memory_mib)
    end = time.monotonic() + seconds
    with tempfile.TemporaryDirectory(prefix="cope-fuzz-") as tmp:
        n = 0
        while time.monotonic() < end:
            name = targets[n % len(targets)]
            target = TARGETS[name]
            data = target.make(rng)
            path = Path(tmp) / f"case{target.suffix}"
            path.write_bytes(data)
            if not worker.alive:
                worker = Worker(memory_mib)
            outcome, detail = worker.run(name, str(path), timeout_s)
            counts[name][outcome] += 1
            if outcome in ("crash", "hang"):
                kept = ""
                if save_dir is not None:
                    save_dir.mkdir(parents=True, exist_ok=True)
                    keep = save_dir / f"{name}-{n}{target.suffix}"
                    keep.write_bytes(data)
                    kept = f" (saved as {keep})"
                problems.append(f"{name}: {outcome}: {detail}{kept}")
                if outcome == "hang" or not worker.alive:
                    worker.close()
                    worker = Worker(memory_mib)
            n += 1
    worker.close()
    return counts, problems


def report(counts: dict[str, Counter], problems: list[str], seconds: float) -> None:
    width = max(len(t) for t in counts)
    print(f"{'target':<{width}}  {'tried':>7}  " + "  ".join(f"{o:>11}" for o in OUTCOMES))
    total = Counter()
    for name, c in counts.items():
        total.update(c)
        print(f"{name:<{width}}  {sum(c.values()):>7}  " + "  ".join(f"{c[o]:>11}" for o in OUTCOMES))
    print(f"{'all':<{width}}  {sum(total.values()):>7}  " + "  ".join(f"{total[o]:>11}" for o in OUTCOMES))
    print(f"in {seconds:.0f} s")
    seen: set[str] = set()
    for p in problems:
        key = p.split(" (saved")[0]
        if key not in seen and len(seen) < 20:
            seen.add(key)
            print("  " + p)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="how long to run (default 300)")
    parser.add_argument("--target", action="append", help="a target (repeatable; default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout-s", type=float, default=20.0, help="a case running longer is a hang")
    parser.add_argument("--memory-mib", type=int, default=4096, help="RLIMIT_AS of the worker")
    parser.add_argument("--save-dir", type=Path, help="keep crashing and hanging inputs here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.memory_mib)
        return 0
    sys.path.insert(0, str(ROOT))
    from tests.fuzz_targets import TARGETS

    targets = args.target or list(TARGETS)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target {unknown[0]!r}: one of {', '.join(TARGETS)}")
    start = time.monotonic()
    counts, problems = campaign(targets, args.seconds, args.seed, args.timeout_s, args.memory_mib, args.save_dir)
    report(counts, problems, time.monotonic() - start)
    bad = sum(c["crash"] + c["hang"] for c in counts.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
