"""The flags that decide a recommendation, shared by advise, export, estimate and verify,
and the (request, cost model) they build."""

from __future__ import annotations

import argparse


def add_plan_flags(p: argparse.ArgumentParser, *, with_context_threads: bool = True) -> None:
    """The advise flags that decide a recommendation (same meaning as in `cope advise`)."""
    p.add_argument("--model", help="catalog id (see `cope models`), a config.json, a .gguf file or a Hugging Face repo id")
    p.add_argument("--gguf-file", metavar="NAME.gguf",
                   help="with a repo id as --model: size the model from this GGUF file in the repo "
                        "(its header is read remotely)")
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
    p.add_argument("--prefetch", choices=("timed", "optimistic"), default="timed",
                   help="timed: a prefetch is exposed when the previous layer is too short to hide it")
    p.add_argument("--fidelity", choices=("analytic", "atomic", "combined"),
                   help="cost model (default: combined with a cached profile, else analytic)")
    p.add_argument("--probe-budget", type=float, default=60.0, metavar="SECONDS",
                   help="time for probes when atomic/combined has no cached profile (default 60)")
    p.add_argument("--reprobe", action="store_true", help="ignore the cached profile and probe again")


def build_from_args(args: argparse.Namespace, *, context: int | None = None, threads: int | None = None,
                    model: str | None = None):  # type: ignore[no-untyped-def]
    """(request, cost model) from the plan flags; explicit values win over the flags."""
    from cope_tui.fidelity import choose_cost_model
    from cope_tui.inputs import AdviseArgs, build_request

    request = build_request(
        AdviseArgs(
            model=model or args.model, gguf_file=getattr(args, "gguf_file", None), quant=args.quant, gpu=args.gpu, cpu=args.cpu,
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
