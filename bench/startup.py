"""Startup figures that tests must not assert: how long the app takes to import and build
(with torch left unloaded), and how long a Qwen3-30B-A3B-sized synthetic trace takes to
generate. Prints each figure beside its target; run on an idle machine.

    python bench/startup.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.models.catalog import get_model  # noqa: E402
from engine.traces.synthetic import SyntheticSettings, synthetic_trace  # noqa: E402

APP_TARGET_S = 1.0
SYNTHETIC_TARGET_S = 1.0
RUNS = 5

APP_CODE = (
    "import sys, time\n"
    "t = time.perf_counter()\n"
    "from cope_tui.app.app import CopeApp\n"
    "CopeApp()\n"
    "assert 'torch' not in sys.modules\n"
    "print(time.perf_counter() - t)\n"
)


def app_startup_s() -> float:
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", APP_CODE], capture_output=True, text=True, check=True, cwd=root)
    return float(out.stdout)


def synthetic_s() -> float:
    model = get_model("qwen3-30b-a3b")
    start = time.perf_counter()
    synthetic_trace(model, SyntheticSettings(tokens=1000, seed=0))
    return time.perf_counter() - start


def report(label: str, samples: list[float], target_s: float) -> None:
    best, median = min(samples), statistics.median(samples)
    print(f"{label:<44} best {best:6.3f} s  median {median:6.3f} s  {best / target_s:5.2f} x target ({target_s:g} s)")


def main() -> None:
    report("app import + construct (no torch)", [app_startup_s() for _ in range(RUNS)], APP_TARGET_S)
    synthetic_trace(get_model("qwen3-30b-a3b"), SyntheticSettings(tokens=10, seed=0))  # warm up
    report("synthetic trace, 1000 tokens x 48 x top-8", [synthetic_s() for _ in range(RUNS)], SYNTHETIC_TARGET_S)


if __name__ == "__main__":
    main()
