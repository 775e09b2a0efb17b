"""`cope validate`: estimated against executed TPOT, per fidelity (DESIGN.md §6).

For each configuration (model, platform, CPU threads, VRAM budget): estimate every
candidate at each fidelity (analytic, atomic, combined; the measured ones probe first,
reusing the profile cache), execute every candidate for real (probes.executor), and
report measured beside estimated TPOT; then, per fidelity side by side, selection
accuracy, top-3 recovery, MAPE and mean Spearman (engine.accuracy), plus the probing
time spent.

Without CUDA only the candidates that need no GPU (all-on-CPU) execute; the others
are reported as refused, with the executor's reason. Their routed-expert work is
measured for real; the GPU-side work every candidate pays (the per-block shared work,
the head, the hand-over of the hidden state) cannot run here and is added to the
measured time from the GPU preset, the same figures the estimates use, so the "CPU
target" also reports the error of the expert work alone, which is what was measured.

Executing a candidate replays exactly what its estimate replayed: ready-first's lane
split comes from the most accurate fidelity asked for (combined, else atomic, else
analytic), and its estimates at the other fidelities keep their own split.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone

from cope_tui.exit_codes import EXIT_OK

EXECUTOR_FACTORY = None  # tests put a fake executor factory here: f(model, quant, context_tokens, mode)
FIDELITIES = ("analytic", "atomic", "combined")
CPU_TARGET = 0.10


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="execute every candidate for real and compare with the estimates")
    p.add_argument("--model", default="qwen3-30b-a3b", help="model id(s), comma-separated (default qwen3-30b-a3b)")
    p.add_argument("--quant", help="quantization (default: the model's usual one)")
    p.add_argument("--gpu", help="GPU preset for the analytic figures (and the GPU side without CUDA)")
    p.add_argument("--cpu", help="CPU preset (default: this machine's CPU)")
    p.add_argument("--trace", default="synthetic", metavar="FILE|synthetic", help="routing trace (default synthetic)")
    p.add_argument("--threads", default="1,4,8,16", help="CPU thread counts, comma-separated")
    p.add_argument("--vram-budgets", default="8,12,16,24", metavar="GIB,...", help="VRAM budgets in GiB")
    p.add_argument("--tokens", type=int, default=32, help="synthetic tokens replayed and executed (default 32)")
    p.add_argument("--seed", type=int, default=0, help="synthetic trace seed")
    p.add_argument("--context", type=int, default=4096, help="context tokens (KV cache, attention work)")
    p.add_argument("--fidelity", default="analytic,atomic,combined", help="fidelities to compare, comma-separated")
    p.add_argument("--probe-budget", type=float, default=30.0, metavar="SECONDS", help="probe time per thread count")
    p.add_argument("--reprobe", action="store_true", help="ignore cached profiles")
    p.add_argument("--mode", choices=("timed", "functional"), default="timed",
                   help="functional: run both tiers on the CPU (checks every candidate executes; times mean nothing)")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="stop executing candidates after this long (the rest reported as not run)")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(run=run)


def _list(text: str, cast, flag: str) -> list:
    from engine.errors import CopeInputError

    try:
        values = [cast(v.strip()) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise CopeInputError(f"{flag}: not a comma-separated list of numbers: {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise CopeInputError(f"{flag}: give positive values, got {text!r}")
    return values


def _say(text: str) -> None:
    print(f"cope validate: {text}", file=sys.stderr, flush=True)


def _make_executor(model, quant, context_tokens: int, mode: str):
    if EXECUTOR_FACTORY is not None:
        return EXECUTOR_FACTORY(model, quant, context_tokens, mode)
    from probes.executor import Executor

    return Executor(model, quant, mode=mode, context_tokens=context_tokens)


def _cuda() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False, "torch not installed"
    if torch.cuda.is_available():  # pragma: no cover - needs CUDA
        return True, torch.cuda.get_device_name(0)
    return False, "none (no CUDA device)"


def run(args: argparse.Namespace) -> int:
    from engine.errors import CopeInputError

    fidelities = [f.strip() for f in args.fidelity.split(",") if f.strip()]
    bad = [f for f in fidelities if f not in FIDELITIES]
    if bad or not fidelities:
        raise CopeInputError(f"--fidelity: choose among {', '.join(FIDELITIES)}; got {args.fidelity!r}")
    fidelities = [f for f in FIDELITIES if f in fidelities]
    threads_list = _list(args.threads, int, "--threads")
    budgets = _list(args.vram_budgets, float, "--vram-budgets")
    if args.tokens < 2:
        raise CopeInputError(f"--tokens must be at least 2, got {args.tokens}")
    doc = validate(args, [m.strip() for m in args.model.split(",") if m.strip()], threads_list, budgets, fidelities)
    if args.json:
        import orjson

        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
    else:
        sys.stdout.write(render(doc))
    return EXIT_OK


def validate(args, models: list[str], threads_list: list[int], budgets: list[float], fidelities: list[str]) -> dict:
    from cope_tui.options import PlanChoices
    from cope_tui.service.pricing import choose_cost_model
    from cope_tui.service.request import build_request
    from engine.accuracy import config_accuracy, summarize
    from engine.advise import sweep_budgets
    from engine.cost_model import AnalyticCostModel
    from engine.memory import GIB, plan_memory
    from engine.policy import Kind

    started = time.perf_counter()
    cuda, gpu_name = _cuda()
    notes: list[str] = []
    configs: list[dict] = []
    per_fidelity: dict[str, list] = {f: [] for f in fidelities}
    probing: list[dict] = []
    cpu_target: list[dict] = []
    executors: dict[str, object] = {}
    stopped = False
    for model_id in models:
        for threads in threads_list:
            request = build_request(PlanChoices(
                model=model_id, quant=args.quant, gpu=args.gpu, cpu=args.cpu, vram_budget_gib=budgets[0],
                context=args.context, threads=threads, trace=args.trace, tokens=args.tokens, seed=args.seed,
            ))
            model, quant = request.model, request.quant
            analytic = AnalyticCostModel(model, quant, request.platform, context_tokens=request.context_tokens)
            fits = [b for b in budgets
                    if plan_memory(model, quant, vram_budget_bytes=int(b * GIB),
                                   context_tokens=request.context_tokens).fits_at_all]
            for b in budgets:
                if b not in fits:
                    notes.append(f"{model.id}: a {b:g} GiB budget cannot hold the non-expert weights; skipped")
            if not fits:
                continue
            recs = {}
            # Combined first: it probes the schedules as well as the atomic operators, which
            # atomic then reuses from the cache (probed the other way round, combined would
            # find the atomic profile complete and probe no schedule).
            for f in sorted(fidelities, key=lambda x: {"combined": 0, "atomic": 1}.get(x, 2)):
                t0 = time.perf_counter()
                # --reprobe: once per configuration, by the first measured fidelity (the next reuses it).
                reprobe = args.reprobe and f != "analytic" and not any(p["model"] == model.id and p["threads"] == threads
                                                                       for p in probing)
                cm = choose_cost_model(request, fidelity=f, probe_budget_s=args.probe_budget, reprobe=reprobe).cost_model
                spent = time.perf_counter() - t0
                if f != "analytic":
                    probing.append({"model": model.id, "threads": threads, "fidelity": f, "seconds": spent})
                recs[f] = sweep_budgets(request, cm, [int(b * GIB) for b in fits])
            split_from = fidelities[-1]
            if model.id not in executors:
                executors[model.id] = _make_executor(model, quant, request.context_tokens, args.mode)
            executor = executors[model.id]
            for i, b in enumerate(fits):
                memory = recs[split_from][i].memory
                executor.budget = memory.vram_budget_bytes - memory.non_expert_bytes - memory.kv_cache_bytes \
                    - memory.runtime_reserve_bytes
                rows, measured = [], {}
                estimates = {f: {e.candidate.id: e for e in recs[f][i].estimates} for f in fidelities}
                for est in recs[split_from][i].estimates:
                    c = est.candidate
                    row = {"candidate": c.id, "estimated_tpot_s": {f: estimates[f][c.id].tpot_s for f in fidelities},
                           "measured_tpot_s": None, "refused": None, "executed": None}
                    rows.append(row)
                    if args.max_seconds is not None and time.perf_counter() - started > args.max_seconds:
                        row["refused"] = "not run: --max-seconds reached"
                        stopped = True
                        continue
                    try:  # what the estimate replayed: its setup and, for a partition, its layers
                        result = executor.run(c, request.trace, est.setup, threads=threads, cpu_layers=est.cpu_layers)
                    except Exception as exc:  # noqa: BLE001 - refusals and failures are reported per candidate
                        from probes.executor import ExecutionRefused

                        if not isinstance(exc, ExecutionRefused):
                            raise
                        row["refused"] = str(exc)
                        continue
                    # Medians over tokens: robust to bursts of load from elsewhere on the machine.
                    tpot = result.tpot_median_s
                    measured_experts = result.experts_median_s
                    if result.gpu_side == "not executed":
                        syncs = _handover_steps(result.counts, c.execution) / result.n_tokens
                        gpu_side = analytic.shared_per_token_s() + analytic.token_overhead_s() + syncs * analytic.a.sync_s
                        tpot = measured_experts + gpu_side
                        row["gpu_side_from_preset_s"] = gpu_side
                    stats = est.stats
                    row["counts_match_replay"] = bool(
                        result.counts.shape == stats.counts.shape and (result.counts == stats.counts).all())
                    row["measured_tpot_s"] = tpot
                    row["executed"] = result.summary()
                    measured[c.id] = tpot
                    if c.kind is Kind.ALL_CPU and args.mode == "timed":
                        for f in fidelities:
                            e = estimates[f][c.id]
                            est_experts = e.breakdown.experts_critical_s - e.breakdown.sync_s
                            cpu_target.append({
                                "model": model.id, "threads": threads, "vram_budget_gib": b, "fidelity": f,
                                "estimated_tpot_s": e.tpot_s, "measured_tpot_s": tpot,
                                "error": (e.tpot_s - tpot) / tpot,
                                "estimated_experts_s": est_experts, "measured_experts_s": measured_experts,
                                "experts_error": (est_experts - measured_experts) / measured_experts,
                                "gpu_side": result.gpu_side,
                            })
                accuracy = {}
                for f in fidelities:
                    acc = config_accuracy({cid: e.tpot_s for cid, e in estimates[f].items()}, measured)
                    per_fidelity[f].append(acc)
                    accuracy[f] = acc.to_dict()
                configs.append({
                    "model": model.id, "quantization": quant.name,
                    "platform": {"gpu": request.platform.gpu.name, "cpu": request.platform.cpu.name,
                                 "executed_on_gpu": gpu_name if cuda else None},
                    "threads": threads, "vram_budget_gib": b, "tokens": request.trace.n_tokens,
                    "ready_first_split_from": split_from, "candidates": rows, "accuracy": accuracy,
                })
    summary = {f: summarize(per_fidelity[f]) for f in fidelities}
    if not cuda and args.mode == "timed":
        notes.append("no CUDA device: only candidates needing no GPU executed (all-on-CPU); the others are refused, "
                     "and the GPU-side work of executed ones (shared layers, head, hand-over) comes from the preset")
    if args.mode == "functional":
        notes.append("functional mode: both tiers ran on the CPU; measured times do not describe a real machine")
    if stopped:
        notes.append(f"--max-seconds {args.max_seconds:g} reached: some candidates were not run")
    targets = {}
    for f in fidelities:
        rows = [r for r in cpu_target if r["fidelity"] == f]
        if rows:
            worst = max(abs(r["error"]) for r in rows)
            worst_experts = max(abs(r["experts_error"]) for r in rows)
            targets[f] = {"worst_abs_error": worst, "worst_abs_experts_error": worst_experts,
                          "met": worst < CPU_TARGET and worst_experts < CPU_TARGET}
    return {
        "command": "cope validate",
        "date_iso": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "mode": args.mode,
        "cuda_device": gpu_name if cuda else None,
        "fidelities": fidelities,
        "configurations": configs,
        "summary": summary,
        "cpu_target": {"rows": cpu_target, "by_fidelity": targets, "threshold": CPU_TARGET},
        "probing": {"runs": probing, "total_s": sum(p["seconds"] for p in probing)},
        "elapsed_s": time.perf_counter() - started,
        "notes": notes,
    }


def _handover_steps(counts, execution) -> int:
    """Layer steps that hand the hidden state to the CPU and back (a CPU lane ran)."""
    from engine.policy import Execution

    if execution is Execution.STAGE:
        return 0
    k = counts.shape[1] - 1
    return int(counts[:, :k, :].sum())


def _fmt(x, scale=1e3, spec="8.2f") -> str:
    return "-".rjust(int(spec.split(".")[0])) if x is None else format(x * scale, spec)


def render(doc: dict) -> str:
    f = doc["fidelities"]
    lines = [f"cope validate ({doc['mode']}, CUDA: {doc['cuda_device'] or 'none'}), {doc['date_iso']}"]
    for cfg in doc["configurations"]:
        lines.append("")
        lines.append(f"{cfg['model']} {cfg['quantization']}  threads {cfg['threads']}  budget {cfg['vram_budget_gib']:g} GiB"
                     f"  ({cfg['tokens']} tokens)")
        lines.append(f"  {'candidate':<40} {'measured ms':>11} " + " ".join(f"{x + ' ms':>11}" for x in f))
        for row in cfg["candidates"]:
            if row["measured_tpot_s"] is None and row["refused"] and "CUDA" in row["refused"]:
                measured = "refused".rjust(11)
            else:
                measured = _fmt(row["measured_tpot_s"], spec="11.2f")
            lines.append(f"  {row['candidate']:<40} {measured} "
                         + " ".join(_fmt(row["estimated_tpot_s"][x], spec="11.2f") for x in f))
    lines.append("")
    lines.append(f"{'overall':<22}" + "".join(f"{x:>12}" for x in f))

    def share(v):
        return "-" if v is None else f"{v:.1%}"

    for label, key, fmt in (("selection accuracy", "selection_accuracy", share), ("top-3 recovery", "top3_recovery", share),
                            ("MAPE", "mape", share),
                            ("mean Spearman", "mean_spearman", lambda v: "-" if v is None else f"{v:.3f}")):
        lines.append(f"{label:<22}" + "".join(f"{fmt(doc['summary'][x][key]):>12}" for x in f))
    lines.append(f"probing time: {doc['probing']['total_s']:.1f} s; total {doc['elapsed_s']:.1f} s")
    rows = doc["cpu_target"]["rows"]
    if rows:
        lines.append("")
        lines.append("CPU target (all-on-CPU, estimate within 10% of executed):")
        for r in rows:
            lines.append(f"  {r['model']} threads {r['threads']} budget {r['vram_budget_gib']:g} {r['fidelity']:<9}"
                         f" TPOT est {r['estimated_tpot_s'] * 1e3:8.2f} ms  meas {r['measured_tpot_s'] * 1e3:8.2f} ms"
                         f"  {r['error']:+6.1%};  experts est {r['estimated_experts_s'] * 1e3:8.2f} ms"
                         f"  meas {r['measured_experts_s'] * 1e3:8.2f} ms  {r['experts_error']:+6.1%}")
        for x, t in doc["cpu_target"]["by_fidelity"].items():
            lines.append(f"  {x}: worst |error| {t['worst_abs_error']:.1%}, experts {t['worst_abs_experts_error']:.1%}:"
                         f" {'met' if t['met'] else 'NOT met'}")
    for n in doc["notes"]:
        lines.append(f"note: {n}")
    return "\n".join(lines) + "\n"
