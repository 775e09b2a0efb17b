"""How long `-ot` patterns take to match a model's expert tensor names: COPE's bounded
matcher (engine/llamacpp/ecma_regex.py) against a backtracking engine (Python's re, which
std::regex resembles), on catastrophic and ordinary patterns. Prints figures; the
backtracking runs go in a child process with a time limit so nothing hangs here.

    python bench/ot_match.py
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.llamacpp.ecma_regex import compile_pattern  # noqa: E402

NAMES = [f"blk.{b}.ffn_{k}_exps.weight" for b in range(94) for k in ("gate", "up", "down")]  # Qwen3-235B's
BACKTRACK_LIMIT_S = 60
PATTERNS = {
    "ordinary": r"blk\.(4[0-7])\.ffn_.*_exps",
    "catastrophic (.+)+X": "(.+)+X",
    "catastrophic (.*.*)+X": "(.*.*)+X",
    "largest taken (3,600 states)": "(.?){257}" * 7 + "X",
}


def bounded_s(pattern: str) -> float:
    start = time.perf_counter()
    compiled = compile_pattern(pattern)
    for name in NAMES:
        compiled.search(name)
    return time.perf_counter() - start


def backtracking_s(pattern: str, names: list[str]) -> str:
    code = ("import re, sys, time\nt = time.perf_counter()\n"
            f"[re.search({pattern!r}, n) for n in {names!r}]\nprint(time.perf_counter() - t)")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=BACKTRACK_LIMIT_S)
    except subprocess.TimeoutExpired:
        return f"> {BACKTRACK_LIMIT_S} s (stopped)"
    return f"{float(done.stdout):.3f} s"


def main() -> None:
    print(f"{len(NAMES)} expert tensor names (94 MoE blocks x gate/up/down)")
    print(f"{'pattern':<32} {'bounded (COPE)':>16} {'backtracking (re), 1 name':>28}")
    for label, pattern in PATTERNS.items():
        one = [NAMES[-1]]  # one 27-character name is enough to show the blow-up
        print(f"{label:<32} {bounded_s(pattern):>14.3f} s {backtracking_s(pattern, one):>28}")


if __name__ == "__main__":
    main()
