"""`cope advise`: rank every candidate policy for a model on a machine."""

from __future__ import annotations

import argparse
import sys

from cope_tui.exit_codes import EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    adv = sub.add_parser("advise", help="rank every candidate policy for a model on a machine")
    adv.add_argument("--model", help="catalog id (see `cope models`), a config.json or .gguf path, "
                                     "or a Hugging Face repo id org/name")
    adv.add_argument("--gguf-file", metavar="NAME.gguf",
                     help="with a repo id as --model: size the model from this GGUF file in the repo "
                          "(its header is read remotely)")
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
    adv.add_argument("--export", action="store_true",
                     help="also print the llama.cpp command of the best candidate (JSON: an \"export\" object)")

    adv.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from cope_tui.inputs import AdviseArgs, build_request
    from cope_tui.fidelity import choose_cost_model
    from engine.advise import advise

    request = build_request(
        AdviseArgs(
            model=args.model, gguf_file=args.gguf_file, quant=args.quant, gpu=args.gpu, cpu=args.cpu,
            vram_budget_gib=args.vram_budget, context=args.context, threads=args.threads,
            trace=args.trace, profile_trace=args.profile_trace, tokens=args.tokens, seed=args.seed,
            evictions=tuple(e.strip() for e in args.eviction.split(",") if e.strip()),
            prefetch_mode=args.prefetch,
        )
    )
    cost_model = choose_cost_model(
        request, fidelity=args.fidelity, probe_budget_s=args.probe_budget, reprobe=args.reprobe
    )
    recommendation = advise(request, cost_model)
    export = None
    if args.export:
        from cope_tui.commands.export import export_for

        export = export_for(recommendation, recommendation.best)
    if args.json:
        import orjson

        from engine.report import recommendation_to_dict

        doc = recommendation_to_dict(recommendation)
        if export is not None:
            doc["export"] = export.to_dict()
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
    else:
        from cope_tui.text_report import render_recommendation

        sys.stdout.write(render_recommendation(recommendation, limit=None if args.all else 15))
        if export is not None:
            from cope_tui.commands.export import render_export

            sys.stdout.write("\nllama.cpp command for the best candidate:\n" + render_export(export))
    return EXIT_OK
