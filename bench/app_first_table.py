"""How long `cope` takes, from the process's start, to its first paint and to its first ranked
table (issue 45's target: the table within 1.5 s on two quiet cores), and the CPU time it
spends to get there. Tests must not assert times; this prints them. Run on an idle machine:

    python bench/app_first_table.py [--runs 5] [--mode head-start|in-process|both]

Each run is a fresh process that launches the app as `cope` does (cope_tui.app.run_app: the
first ranking planned in a child forked before textual is imported, cope_tui/app/head_start.py;
`--mode in-process` plans it in the app's own process, as before) headless at 120x40 with its
default plan (Qwen3-30B-A3B on this machine, synthetic routing) and the real services, except
that GPU detection and the runtime scan are left out (a machine's NVML and PATH are not the
app's time); the profile and trace caches are empty (a temporary COPE_CACHE_DIR) and no
remembered plan is read (an empty COPE_CONFIG_DIR). "first paint" is the first frame after the
app is mounted, "table" the frame after the first ranking fills the Results table.

Bytecode: a wheel installed with pip has its modules compiled at install time; an editable
checkout where PYTHONDONTWRITEBYTECODE is set compiles every module of the project from source
at every launch (about 250; 0.15-0.2 CPU-s before the fork alone). `--bytecode` compiles them
first (python -m compileall into the checkout's __pycache__ folders, which git ignores), as pip
would; the bench says which it measured.

CPU seconds (user + system, from getrusage) are counted to the table: the app's process before
the fork (imports: on both processes' path), after it, and the child's (reaped once its
ranking is read). On a loaded machine the wall times say little; "CPU path" says what the
launch would take with each process alone on a core: the app's CPU before the fork, then the
longer of (the app's CPU from the fork to the ranking's arrival, the child's), then the app's
CPU from the ranking to its table (in-process: the app's CPU to the table).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 1.5
MODES = ("head-start", "in-process")

CHILD = r"""
import resource, sys, time
from cope_tui.app import run_app
from cope_tui.app import head_start
from cope_tui.app.state import Services

marks = {"fork_cpu": 0.0, "result_cpu": 0.0}


def cpu_s():
    # CPU seconds of this process, and of its children that have exited and been reaped
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


begin = head_start.HeadStart.begin.__func__


def timed_begin(cls, choices, services):
    marks["fork_cpu"] = cpu_s()[0]
    return begin(cls, choices, services)


head_start.HeadStart.begin = classmethod(timed_begin)
result = head_start.HeadStart.result


def timed_result(self, *args, **kw):
    planned = result(self, *args, **kw)
    marks["result_cpu"] = cpu_s()[0]
    return planned


head_start.HeadStart.result = timed_result


def timed(**kw):
    from cope_tui.app.app import CopeApp
    from textual.widgets import DataTable

    class Timed(CopeApp):
        # Textual calls the handler of every class in the MRO: CopeApp's own runs right after
        # these, which must not call it again (a super() call here started the first ranking
        # twice and handled it twice)
        def on_mount(self):
            self.call_after_refresh(lambda: marks.setdefault("paint", (time.time(), cpu_s()[0])))

        def on_advice_ready(self, message):
            def shown():
                assert self.query_one("#results-table", DataTable).row_count > 0
                marks["table"] = (time.time(), *cpu_s())
                self.exit()

            self.call_after_refresh(shown)

    return Timed(**kw)


run_app((), services=Services(detect_gpu=None, scan_runtimes=None), make_app=timed,
        head_start=sys.argv[1] == "head-start", headless=True, size=(120, 40))
print(*marks["paint"], *marks["table"], marks["fork_cpu"], marks["result_cpu"])
"""


def one_run(mode: str) -> dict[str, float]:
    """Wall seconds from the process's start to the first paint and table, and CPU seconds."""
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "COPE_CACHE_DIR": str(Path(folder) / "cache"),
               "COPE_CONFIG_DIR": str(Path(folder) / "config"), "HF_HUB_OFFLINE": "1"}
        start = time.time()
        # a ranking that fails leaves the app waiting: the timeout ends the run (its stderr says why)
        out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True,
                             cwd=ROOT, env=env, timeout=300)
    paint, paint_cpu, table, table_cpu, child_cpu, fork_cpu, result_cpu = (float(x) for x in out.stdout.split())
    # the longest CPU path to the table, were each process alone on its core
    path = fork_cpu + max(result_cpu - fork_cpu, child_cpu) + table_cpu - result_cpu if result_cpu else table_cpu
    return {"paint": paint - start, "table": table - start, "cpu": table_cpu + child_cpu, "path": path,
            "before_fork": fork_cpu, "to_paint": paint_cpu, "app": table_cpu, "child": child_cpu}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--mode", choices=(*MODES, "both"), default="head-start",
                   help="head-start: as `cope` launches; in-process: the first ranking planned in the app's own "
                        "process; both: the two alternating, run for run")
    p.add_argument("--bytecode", action="store_true",
                   help="compile the project's modules first, as pip install does for an installed wheel")
    args = p.parse_args(argv)
    if args.bytecode:
        subprocess.run([sys.executable, "-m", "compileall", "-q", "cope_tui", "engine", "probes"], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL)
    compiled = os.path.exists(importlib.util.cache_from_source(str(ROOT / "engine" / "__init__.py")))
    print("the project's modules: " + ("compiled bytecode" if compiled else
                                       "no bytecode, compiled from source at every launch (--bytecode: as installed)"))
    modes = MODES if args.mode == "both" else (args.mode,)
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for i in range(args.runs):
        for mode in modes:
            r = one_run(mode)
            runs[mode].append(r)
            fork = f"before the fork {r['before_fork']:4.2f}, " if mode == "head-start" else ""
            print(f"run {i + 1} {mode:<10}: first paint {r['paint']:6.3f} s, first ranked table {r['table']:6.3f} s; "
                  f"CPU to the table {r['cpu']:4.2f} s (app {r['app']:4.2f} s: {fork}to its first paint "
                  f"{r['to_paint']:4.2f}; child {r['child']:4.2f} s), CPU path {r['path']:4.2f} s", flush=True)
    for mode in modes:
        for label, key in (("first paint", "paint"), ("first ranked table", "table"), ("CPU to the table", "cpu"),
                           ("CPU path", "path")):
            samples = [r[key] for r in runs[mode]]
            print(f"{mode:<10} {label:<20} best {min(samples):6.3f} s  median {statistics.median(samples):6.3f} s  "
                  f"({args.runs} runs, {os.cpu_count()} logical CPUs)")
        best_table = min(r["table"] for r in runs[mode])
        print(f"{mode:<10} first ranked table: {best_table / TARGET_S:.2f} x the {TARGET_S:g} s target (best run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
