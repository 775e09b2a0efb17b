"""The `cope` command line.

Exit codes:
  0    success
  1    internal error (a bug: please report it with the message)
  2    bad input: a flag, a file or a value we cannot use (one line on stderr)
  130  interrupted (Ctrl-C)

Data goes to stdout (the table, or exactly one JSON document with --json); narration
and errors go to stderr. The headless path never imports textual.
"""

from __future__ import annotations

import argparse
import sys

from engine.errors import CopeInputError

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_INPUT = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, our exit code
        raise CopeInputError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="cope", description="Find the fastest GPU/CPU split of an MoE model's experts.")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)
    adv = sub.add_parser("advise", help="rank every candidate policy for a model on a machine")
    adv.add_argument("--model", help="catalog id (see `cope models`) or a Hugging Face config.json")
    adv.add_argument("--quant", help="quantization, e.g. Q4_K_M (default: the model's usual one)")
    adv.add_argument("--gpu", help="GPU preset to plan for (see `cope presets`)")
    adv.add_argument("--cpu", help="CPU preset (default: this machine's CPU)")
    adv.add_argument("--vram-budget", type=float, metavar="GIB", help="VRAM to use, GiB (default: all)")
    adv.add_argument("--context", type=int, metavar="N", help="context tokens to reserve KV cache for")
    adv.add_argument("--threads", type=int, metavar="T", help="CPU threads for expert compute")
    adv.add_argument("--trace", metavar="FILE|synthetic", help="routing trace (.npz, llama-moe-trace .csv, .jsonl)")
    adv.add_argument("--profile-trace", metavar="FILE", help="trace to learn expert popularity from")
    adv.add_argument("--tokens", type=int, default=1000, help="synthetic tokens to replay (default 1000)")
    adv.add_argument("--seed", type=int, default=0, help="synthetic trace seed")
    adv.add_argument("--eviction", default="lru", help="mutable-cache eviction rules: lru, score or lru,score")
    adv.add_argument("--prefetch", choices=("timed", "optimistic"), default="timed",
                     help="timed: a prefetch is exposed when the previous layer is too short to hide it")
    adv.add_argument("--fidelity", choices=("analytic", "atomic", "combined"),
                     help="cost model (default: combined when a cached profile exists for this "
                          "hardware and model, else analytic)")
    adv.add_argument("--probe-budget", type=float, default=60.0, metavar="SECONDS",
                     help="time for probes when atomic/combined has no cached profile (default 60)")
    adv.add_argument("--reprobe", action="store_true", help="ignore the cached profile and probe again")
    adv.add_argument("--json", action="store_true", help="one JSON document on stdout")
    adv.add_argument("--all", action="store_true", help="list every candidate in the table")

    det = sub.add_parser("detect", help="detect this machine's GPU and CPU, and measure bandwidths")
    det.add_argument("--json", action="store_true", help="one JSON document on stdout")
    det.add_argument("--no-measure", action="store_true", help="skip the bandwidth measurements (a few seconds)")

    sub.add_parser("models", help="list the built-in model catalog")
    sub.add_parser("presets", help="list the GPU and CPU presets")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        args = build_parser().parse_args(argv or ["advise"])
        if args.command == "models":
            return _models()
        if args.command == "presets":
            return _presets()
        if args.command == "detect":
            return _detect(args)
        return _advise(args)
    except CopeInputError as exc:
        print(f"cope: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print("cope: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK


def _advise(args: argparse.Namespace) -> int:
    from cope_tui.inputs import AdviseArgs, build_request
    from engine.advise import advise

    request = build_request(
        AdviseArgs(
            model=args.model, quant=args.quant, gpu=args.gpu, cpu=args.cpu,
            vram_budget_gib=args.vram_budget, context=args.context, threads=args.threads,
            trace=args.trace, profile_trace=args.profile_trace, tokens=args.tokens, seed=args.seed,
            evictions=tuple(e.strip() for e in args.eviction.split(",") if e.strip()),
            prefetch_mode=args.prefetch,
        )
    )
    cost_model = _choose_cost_model(args, request)
    recommendation = advise(request, cost_model)
    if args.json:
        import orjson

        from engine.report import recommendation_to_dict

        doc = recommendation_to_dict(recommendation)
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
    else:
        from cope_tui.text_report import render_recommendation

        sys.stdout.write(render_recommendation(recommendation, limit=None if args.all else 15))
    return EXIT_OK


def _choose_cost_model(args: argparse.Namespace, request):  # type: ignore[no-untyped-def]
    """Analytic, or atomic/combined from the cached profile (probing when there is none)."""
    from engine.cost_model import AnalyticCostModel
    from probes.runner import cached_profile

    if args.probe_budget <= 0:
        raise CopeInputError(f"--probe-budget must be positive, got {args.probe_budget}")
    analytic = AnalyticCostModel(request.model, request.quant, request.platform, context_tokens=request.context_tokens)
    fidelity = args.fidelity
    if fidelity is None:
        fidelity = "combined" if not args.reprobe and cached_profile(request) is not None else "analytic"
    if fidelity == "analytic":
        return analytic

    from probes.runner import ensure_profile, measured_cost_model

    def candidates():
        from engine.advise import advise

        rec = advise(request, analytic)
        return [(e.candidate.execution, e.stats) for e in rec.estimates]

    def say(done: int, total: int, label: str) -> None:
        print(f"cope: probe {done}/{total}: {label}", file=sys.stderr, flush=True)

    outcome = ensure_profile(
        request, fidelity, budget_s=args.probe_budget, reprobe=args.reprobe,
        candidates=candidates, make_prober=_PROBER_FACTORY, progress=say,
    )
    if outcome.ran is not None:
        r = outcome.ran
        print(f"cope: probes: {r.measured} measured, {r.skipped} already cached, {r.left} left"
              + (f" ({r.stopped})" if r.stopped else "") + f" in {r.elapsed_s:.1f} s; profile {outcome.source}",
              file=sys.stderr)
    return _Described(measured_cost_model(request, fidelity, outcome.profile, outcome.source), outcome)


_PROBER_FACTORY = None  # tests put a fake prober factory here


class _Described:
    """A measured cost model whose describe() also says where the profile came from."""

    def __init__(self, inner, outcome):  # type: ignore[no-untyped-def]
        self._inner = inner
        self._outcome = outcome
        self.fidelity = inner.fidelity

    def state_costs(self, *a, **kw):  # type: ignore[no-untyped-def]
        return self._inner.state_costs(*a, **kw)

    def shared_per_token_s(self) -> float:
        return self._inner.shared_per_token_s()

    def token_overhead_s(self) -> float:
        return self._inner.token_overhead_s()

    def describe(self) -> dict:
        doc = dict(self._inner.describe())
        counts: dict[str, int] = {}
        for m in self._outcome.profile.measurements:
            counts[m.basis] = counts.get(m.basis, 0) + 1
        doc["profile_source"] = self._outcome.source
        doc["profile_from_cache"] = self._outcome.ran is None
        doc["measured_count"] = counts.get("measured", 0)
        doc["preset_count"] = counts.get("preset", 0)
        doc["measured_plus_preset_count"] = counts.get("measured+preset", 0)
        doc["estimated_count"] = counts.get("estimated-from-atomic", 0) + len(getattr(self._inner, "_estimated", ()))
        return doc


def _detect(args: argparse.Namespace) -> int:
    from probes.detect import detect_platform

    def say(msg: str) -> None:
        print(f"cope: {msg}", file=sys.stderr, flush=True)

    platform = detect_platform(measure=not args.no_measure, progress=say)
    if args.json:
        import orjson

        doc = {"schema_version": 1, "platform": platform.to_dict()}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(_render_platform(platform))
    return EXIT_OK


def _format_fact(name: str, value: object) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if name.endswith("_bytes_per_s"):
            return f"{value / 1e9:.1f} GB/s"
        if name.endswith("_bytes"):
            return f"{value / 1024**3:.1f} GiB"
        if isinstance(value, float):
            return f"{value:.3g}"
    return str(value)


def _render_platform(platform) -> str:  # type: ignore[no-untyped-def]
    from dataclasses import fields

    from engine.platform import Fact

    lines: list[str] = []
    for title, spec in (("GPU", platform.gpu), ("CPU", platform.cpu)):
        lines.append(f"{title}: {spec.name}" + (f" (preset {spec.preset_id})" if spec.preset_id else ""))
        facts = [(f.name, getattr(spec, f.name)) for f in fields(spec) if isinstance(getattr(spec, f.name), Fact)]
        notes = {fact.note for _, fact in facts}
        if facts and not any(fact.known for _, fact in facts) and len(notes) == 1:
            lines.append(f"  every figure unknown: {notes.pop()}")
            continue
        for name, fact in facts:
            lines.append(f"  {name:<26} {_format_fact(name, fact.value):>12}  {fact.basis:<8}  {fact.note}")
    return "\n".join(lines) + "\n"


def _models() -> int:
    from engine.catalog import catalog

    for model in catalog().values():
        print(
            f"{model.id:<34} {model.name:<34} {model.n_moe_layers:>3} MoE layers x "
            f"{model.n_routed_experts:>3} experts, top-{model.top_k}, arch {model.arch}"
        )
    return EXIT_OK


def _presets() -> int:
    from engine.memory import GIB
    from engine.platform import cpu_presets, gpu_presets

    print("GPUs:")
    for pid, gpu in gpu_presets().items():
        print(
            f"  {pid:<20} {gpu.name:<36} {gpu.vram_bytes.value / GIB:>5.0f} GiB "
            f"{gpu.mem_bandwidth_bytes_per_s.value / 1e9:>6.0f} GB/s  PCIe {gpu.pcie_gen.value} x{gpu.pcie_lanes.value}"
        )
    print("CPUs:")
    for pid, cpu in cpu_presets().items():
        print(
            f"  {pid:<20} {cpu.name:<36} {cpu.physical_cores.value:>3} cores "
            f"{cpu.mem_bandwidth_bytes_per_s.value / 1e9:>6.1f} GB/s"
        )
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
