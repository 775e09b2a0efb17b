"""The short summary bench/gpu_first_run.sh leaves beside its archive: the routing's
origin first (SYNTHETIC when no recorded trace was replayed), the GPU, each step's
budget, time used and result (skipped ones named), and the headline figures of what
the steps wrote. Reads only what exists: a step cut short leaves its line, not a gap.

    python bench/first_run_summary.py WORK_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def read_json(path: Path):  # type: ignore[no-untyped-def]
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def routing_line(work: Path) -> str:
    doc = read_json(work / "advise.json") or read_json(work / "advise-analytic.json")
    trace = ((doc or {}).get("inputs") or {}).get("trace") or {}
    if not trace or trace.get("synthetic", True):
        return ("SYNTHETIC routing: advise and validate replay COPE's synthetic trace for qwen3-30b-a3b "
                "(the repository ships no recorded trace of that model); figures that depend on routing "
                "are for that trace, not for real prompts")
    return f"routing: recorded trace {trace.get('source')} ({trace.get('origin')})"


def steps_lines(work: Path) -> list[str]:
    lines = [f"{'step':<44} {'budget s':>8} {'used s':>7}  result"]
    try:
        rows = [r.split("\t") for r in (work / "steps.tsv").read_text().splitlines() if r.strip()]
    except OSError:
        return lines + ["(no steps.tsv)"]
    for row in rows:
        name, budget, used, result = (row + ["", "", "", ""])[:4]
        lines.append(f"{name:<44} {budget:>8} {used:>7}  {result}")
    skipped = [r[0] for r in rows if len(r) > 3 and r[3].startswith("skipped")]
    lines.append("skipped for time: " + (", ".join(skipped) if skipped else "none"))
    return lines


def figure_lines(work: Path) -> list[str]:
    out = []
    detect = read_json(work / "detect.json")
    if detect:
        gpu = detect.get("platform", {}).get("gpu", {})
        for key in ("mem_bandwidth_bytes_per_s", "h2d_bytes_per_s"):
            f = gpu.get(key) or {}
            value = f"{f['value'] / 1e9:.1f} GB/s" if isinstance(f.get("value"), (int, float)) else "unknown"
            out.append(f"detect {key}: {value} ({f.get('basis')})")
    try:
        tests = [t for t in (work / "gpu_tests.txt").read_text().splitlines() if t.strip()]
        out.append("GPU-marked tests: " + (tests[-1].strip("= ") if tests else "(no output)"))
    except OSError:
        pass
    kernels = read_json(work / "kernels.json")
    if kernels is not None:
        errors = [k for k in kernels if k.startswith("error")]
        out.append(f"step check: {len(kernels)} figures in kernels.json, {len(errors)} section error(s)"
                   + (f" ({', '.join(errors)})" if errors else ""))
    advise = read_json(work / "advise.json")
    if advise:
        best = next(iter(advise.get("candidates") or []), None)
        if best:
            out.append(f"advise ({advise.get('cost_model', {}).get('fidelity')}): best {best['id']} "
                       f"{best['tpot_s'] * 1e3:.2f} ms/token, {best['tokens_per_s']:.1f} tok/s")
    validate = read_json(work / "validate.json")
    if validate:
        out.append(f"validate on {validate.get('cuda_device') or 'no CUDA device'}: "
                   f"{len(validate.get('configurations', []))} configuration(s), complete {validate.get('complete')}")
        for fidelity, s in (validate.get("summary") or {}).items():
            mape = s.get("mape")
            out.append(f"  {fidelity}: MAPE {'n/a' if mape is None else f'{mape:.1%}'} over {s.get('mape_pairs')} "
                       f"executed candidate(s)")
    basis = work / "basis.txt"
    if basis.exists():
        out.append("basis: " + (basis.read_text().strip().splitlines() or ["(empty)"])[-1])
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    work = Path(argv[0])
    head = [routing_line(work)]
    for name in ("gpu.txt", "wheels.txt"):
        try:
            head.append((work / name).read_text().strip())
        except OSError:
            pass
    print("\n".join(head + steps_lines(work) + figure_lines(work)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
