"""`cope trace record`: record the routing of a real model while it generates text.

    cope trace record --model org/name|PATH  (--prompts FILE | --domain chat|code|math) --tokens N
    cope trace record --gguf model.gguf      ...   (llama.cpp; pip install 'cope-tui[llamacpp]')

Writes COPE's own trace format (`.cope.npz`) to --out, or by default to
`<cache>/traces/<model>-<domain>.cope.npz` (engine/core/cache_dirs.py: COPE_CACHE_DIR, else
the user cache folder for "cope"); the path goes to stdout, progress to stderr.
torch, transformers and llama-cpp-python are imported only when recording.
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
from pathlib import Path

from cope_tui.exit_codes import EXIT_OK
from engine.core.cache_dirs import default_trace_path
from engine.core.errors import CopeInputError
from engine.core.user_paths import input_kind, output_path, user_path
from engine.models.catalog import model_label
from engine.traces import save_trace
from engine.traces.prompts import DOMAINS, domain_prompts, load_prompts
from engine.traces.trace_card import trace_shape
from probes.llamacpp_glue import gpu_offload_supported, import_llama_cpp
from probes.record_hf import record_with_transformers
from probes.record_llamacpp import record_with_llamacpp
import importlib

# The most --tokens a prompt: a recording holds its context (prompt + tokens) in one llama.cpp
# context or one transformers generate call, and 32,768 is already past the context most
# local MoE models are run at; a million would run for hours and ten million ran out of memory.
MAX_RECORD_TOKENS = 32_768


def register(sub: argparse._SubParsersAction) -> None:
    rec = sub.add_parser("record", help="record a routing trace from a real model (transformers or llama.cpp)")
    src = rec.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="ORG/NAME|PATH", help="transformers model: Hub repo id or local folder")
    src.add_argument("--gguf", metavar="FILE", help="GGUF file, run through llama.cpp (optional extra cope-tui[llamacpp])")
    prompts = rec.add_mutually_exclusive_group()
    prompts.add_argument("--prompts", metavar="FILE", help="prompt file: one per line, or blocks separated by blank lines")
    prompts.add_argument("--domain", choices=DOMAINS, help="a shipped prompt set (default: chat)")
    rec.add_argument("--tokens", type=int, default=64, metavar="N",
                     help=f"tokens to generate per prompt (default 64, at most {MAX_RECORD_TOKENS:,})")
    rec.add_argument("--out", metavar="FILE", help="where to write the trace (default: the trace cache)")
    rec.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="where the model runs")
    rec.add_argument("--sample", action="store_true", help="sample (temperature 0.8, seed 0) instead of greedy decoding")
    rec.set_defaults(run=run)


# --- run --------------------------------------------------------------------------


def _stderr_progress():
    state = {"label": None, "shown": -1}

    def progress(done: int, total: int, label: str) -> None:
        step = max(1, total // 10)
        if label != state["label"] or done == total or done // step != state["shown"]:
            state["label"], state["shown"] = label, done // step
            print(f"cope: recording {done}/{total} tokens ({label})", file=sys.stderr, flush=True)

    return progress


def _prompts(args: argparse.Namespace) -> tuple[list[str], str, str]:
    """(prompts, domain recorded in the trace, domain part of the default file name)."""
    if args.prompts:
        path = user_path(args.prompts, flag="--prompts")
        return load_prompts(str(path)), "", path.name.split(".")[0]
    domain = args.domain or "chat"
    return domain_prompts(domain), domain, domain


def _record_gguf(args: argparse.Namespace, prompts: list[str], domain: str, progress, cancel):
    """(trace, model label) recorded through llama.cpp."""
    llama_cpp = import_llama_cpp()  # says how to install the extra when it is missing
    if input_kind(user_path(args.gguf, flag="--gguf"), what="GGUF file", flag="--gguf") != "file":
        raise CopeInputError("no such GGUF file", path=args.gguf)
    if args.sample:
        raise CopeInputError("--sample is not supported with --gguf (llama.cpp recording decodes greedily)")
    gpu = gpu_offload_supported(llama_cpp)
    if args.device == "cuda" and not gpu:
        raise CopeInputError("--device cuda: this llama-cpp-python build has no GPU support (reinstall it with "
                             "CMAKE_ARGS=\"-DGGML_CUDA=on\" pip install --force-reinstall --no-cache-dir "
                             "llama-cpp-python)")
    n_gpu_layers = 999 if gpu and args.device != "cpu" else 0
    label = re.sub(r"-\d{5}-of-\d{5}$", "", Path(args.gguf).name.split(".gguf")[0])
    print(f"cope: recording {args.gguf} through llama.cpp", file=sys.stderr, flush=True)
    trace = record_with_llamacpp(args.gguf, prompts, args.tokens, n_gpu_layers=n_gpu_layers, progress=progress,
                                 cancel=cancel, model_name=label, domain=domain)
    return trace, label


def _record_hf(args: argparse.Namespace, prompts: list[str], domain: str, progress, cancel):
    """(trace, model label) recorded with transformers."""
    _require("transformers", "record")  # before anything else imports it: one line saying the extra
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    label = model_label(args.model)
    print(f"cope: loading {args.model} with transformers on {device}", file=sys.stderr, flush=True)
    trace = record_with_transformers(args.model, prompts, args.tokens, device=device, progress=progress,
                                     cancel=cancel, sample=args.sample, model_name=label, domain=domain)
    return trace, label


def _require(package: str, extra: str) -> None:
    """CopeInputError naming the pip extra when an optional package is not installed."""
    try:
        importlib.import_module(package)
    except ImportError:
        raise CopeInputError(f"recording needs the {package} package, which is not installed: install the extra "
                             f"with pip install 'cope-tui[{extra}]'") from None


def run(args: argparse.Namespace) -> int:
    if args.tokens < 1:
        raise CopeInputError(f"--tokens must be at least 1, got {args.tokens}")
    if args.tokens > MAX_RECORD_TOKENS:
        raise CopeInputError(f"--tokens must be at most {MAX_RECORD_TOKENS:,} tokens a prompt, got {args.tokens:,}")
    out_arg = output_path(args.out, flag="--out") if args.out else None  # before recording for minutes
    prompts, domain, domain_label = _prompts(args)
    cancel = threading.Event()  # the CLI stops on Ctrl-C; the TUI sets this from its worker
    record = _record_gguf if args.gguf else _record_hf
    trace, label = record(args, prompts, domain, _stderr_progress(), cancel)
    out = out_arg or default_trace_path(label, domain_label)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CopeInputError(f"cannot create the folder: {exc.strerror or exc}", path=str(out.parent)) from None
    save_trace(trace, out)
    for note in trace.meta.notes:
        print(f"cope: note: {note}", file=sys.stderr)
    print(f"cope: wrote {trace_shape(trace)} to {out}", file=sys.stderr)
    print(out)
    return EXIT_OK
