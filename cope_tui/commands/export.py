"""`cope export`: the llama.cpp command (and side files) for one candidate.

Also holds what `cope export`, `cope estimate`, `cope verify` and `cope advise --export`
share: the flags that describe the machine and model, and the rendering of an Export.
"""

from __future__ import annotations

import argparse
import sys

from cope_tui.exit_codes import EXIT_OK


def add_plan_flags(p: argparse.ArgumentParser, *, with_context_threads: bool = True) -> None:
    """The advise flags that decide a recommendation (same meaning as in `cope advise`)."""
    p.add_argument("--model", help="catalog id (see `cope models`) or a Hugging Face config.json")
    p.add_argument("--quant", help="quantization, e.g. Q4_K_M (default: the model's usual one)")
    p.add_argument("--gpu", help="GPU preset to plan for (see `cope presets`)")
    p.add_argument("--cpu", help="CPU preset (default: this machine's CPU)")
    p.add_argument("--vram-budget", type=float, metavar="GIB", help="VRAM to use, GiB (default: all)")
    if with_context_threads:
        p.add_argument("--context", type=int, metavar="N", help="context tokens to reserve KV cache for")
        p.add_argument("--threads", type=int, metavar="T", help="CPU threads for expert compute")
    p.add_argument("--trace", metavar="FILE|synthetic", help="routing trace (.npz, llama-moe-trace .csv, .jsonl)")
    p.add_argument("--profile-trace", metavar="FILE", help="trace to learn expert popularity from")
    p.add_argument("--tokens", type=int, default=1000, help="synthetic tokens to replay (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="synthetic trace seed")
    p.add_argument("--eviction", default="lru", help="mutable-cache eviction rules: lru, score or lru,score")
    p.add_argument("--prefetch", choices=("timed", "optimistic"), default="timed")
    p.add_argument("--fidelity", choices=("analytic", "atomic", "combined"),
                   help="cost model (default: combined with a cached profile, else analytic)")
    p.add_argument("--probe-budget", type=float, default=60.0, metavar="SECONDS")
    p.add_argument("--reprobe", action="store_true", help="ignore the cached profile and probe again")


def build_from_args(args: argparse.Namespace, *, context: int | None = None, threads: int | None = None,
                    model: str | None = None):  # type: ignore[no-untyped-def]
    """(request, cost model) from the plan flags; explicit values win over the flags."""
    from cope_tui.fidelity import choose_cost_model
    from cope_tui.inputs import AdviseArgs, build_request

    request = build_request(
        AdviseArgs(
            model=model or args.model, quant=args.quant, gpu=args.gpu, cpu=args.cpu,
            vram_budget_gib=args.vram_budget,
            context=context if context is not None else getattr(args, "context", None),
            threads=threads if threads is not None else getattr(args, "threads", None),
            trace=args.trace, profile_trace=args.profile_trace, tokens=args.tokens, seed=args.seed,
            evictions=tuple(e.strip() for e in args.eviction.split(",") if e.strip()),
            prefetch_mode=args.prefetch,
        )
    )
    cost_model = choose_cost_model(
        request, fidelity=args.fidelity, probe_budget_s=args.probe_budget, reprobe=args.reprobe
    )
    return request, cost_model


def export_for(rec, target, *, runtime: str = "stock", binary: str = "llama-server",  # type: ignore[no-untyped-def]
               model_path: str | None = None, side_dir: str | None = None):
    from engine.export import export_candidate, plan_from_recommendation

    req = rec.request
    return export_candidate(
        target, req.model, plan_from_recommendation(rec), runtime=runtime, binary=binary,
        model_path=model_path, context=req.context_tokens, threads=req.threads, side_dir=side_dir,
    )


def find_estimate(rec, candidate_id: str):  # type: ignore[no-untyped-def]
    from engine.errors import CopeInputError
    from engine.policy import parse_candidate_id

    parse_candidate_id(candidate_id)  # a one-line error for a misspelt id
    for e in rec.estimates:
        if e.candidate.id == candidate_id:
            return e
    known = ", ".join(e.candidate.id for e in rec.estimates[:8])
    raise CopeInputError(f"--candidate {candidate_id}: not among this configuration's candidates ({known}, ...)")


def render_export(export, *, side_files_written: bool = False) -> str:  # type: ignore[no-untyped-def]
    """Comment lines (safe to paste into a shell) and the command."""
    lines = [f"# {export.candidate_id}: {export.label}", f"# {export.reason}"]
    if export.nearest_id is not None:
        lines.append(f"# the command below runs {export.exported_id} instead")
    for name, _ in export.side_files:
        lines.append(f"# side file {name}: " + ("written beside the command" if side_files_written
                                                  else "write it with --out FILE"))
    lines.append(export.display())
    return "\n".join(lines) + "\n"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="the llama.cpp command line for one candidate")
    p.add_argument("--candidate", required=True, metavar="ID", help="candidate id, as `cope advise` lists it")
    p.add_argument("--runtime", choices=("stock", "fork"), default="stock",
                   help="stock llama.cpp, or the fork with --moe-cache-profile (default stock)")
    p.add_argument("--binary", choices=("llama-server", "llama-cli", "llama-bench"), default="llama-server")
    p.add_argument("--model-path", metavar="FILE", help="the GGUF file (default: <model id>.gguf)")
    p.add_argument("--out", metavar="FILE", help="write the command here, side files beside it")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    add_plan_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import os

    from engine.advise import advise
    from engine.export import write_export

    request, cost_model = build_from_args(args)
    rec = advise(request, cost_model)
    estimate = find_estimate(rec, args.candidate)
    side_dir = os.path.dirname(args.out) or None if args.out else None
    export = export_for(rec, estimate, runtime=args.runtime, binary=args.binary,
                        model_path=args.model_path, side_dir=side_dir)
    if args.out:
        written = write_export(export, args.out)
        print("cope: wrote " + ", ".join(str(p) for p in written), file=sys.stderr)
    if args.json:
        import orjson

        sys.stdout.write(orjson.dumps(export.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render_export(export, side_files_written=bool(args.out)))
    return EXIT_OK
