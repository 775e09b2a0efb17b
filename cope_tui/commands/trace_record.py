"""`cope trace record`: record the routing of a real model while it generates text.

    cope trace record --model org/name|PATH  (--prompts FILE | --domain chat|code|math) --tokens N
    cope trace record --gguf model.gguf      ...   (llama.cpp; pip install 'cope-tui[llamacpp]')

Writes COPE's own trace format (`.cope.npz`) to --out, or by default to
`<cache>/traces/<model>-<domain>.cope.npz`, the cache being COPE_CACHE_DIR or
platformdirs' user cache dir for "cope"; the path goes to stdout, progress to stderr.
torch, transformers and llama-cpp-python are imported only when recording.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
from importlib import resources
from pathlib import Path

from cope_tui.exit_codes import EXIT_OK
from engine.errors import CopeInputError
from engine.files import read_text

DOMAINS = ("chat", "code", "math")
CACHE_ENV = "COPE_CACHE_DIR"


def register(sub: argparse._SubParsersAction) -> None:
    rec = sub.add_parser("record", help="record a routing trace from a real model (transformers or llama.cpp)")
    src = rec.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="ORG/NAME|PATH", help="transformers model: Hub repo id or local folder")
    src.add_argument("--gguf", metavar="FILE", help="GGUF file, run through llama.cpp (optional extra cope-tui[llamacpp])")
    prompts = rec.add_mutually_exclusive_group()
    prompts.add_argument("--prompts", metavar="FILE", help="prompt file: one per line, or blocks separated by blank lines")
    prompts.add_argument("--domain", choices=DOMAINS, help="a shipped prompt set (default: chat)")
    rec.add_argument("--tokens", type=int, default=64, metavar="N", help="tokens to generate per prompt (default 64)")
    rec.add_argument("--out", metavar="FILE", help="where to write the trace (default: the trace cache)")
    rec.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="where the model runs")
    rec.add_argument("--sample", action="store_true", help="sample (temperature 0.8, seed 0) instead of greedy decoding")
    rec.set_defaults(run=run)


# --- prompts --------------------------------------------------------------------


def parse_prompts(text: str) -> list[str]:
    """Prompts from text: blocks separated by blank lines when the text holds a blank
    line between prompts, else one per line; lines starting with '#' are comments."""
    lines = [ln.rstrip() for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if any(not ln.strip() for ln in lines):
        blocks, current = [], []
        for ln in lines + [""]:
            if ln.strip():
                current.append(ln.strip())
            elif current:
                blocks.append("\n".join(current))
                current = []
        return blocks
    return [ln.strip() for ln in lines if ln.strip()]


def load_prompts(path: str) -> list[str]:
    text = read_text(path, what="prompt file")
    prompts = parse_prompts(text)
    if not prompts:
        raise CopeInputError("holds no prompt (empty, or only comments)", path=path)
    return prompts


def domain_prompts(domain: str) -> list[str]:
    if domain not in DOMAINS:
        raise CopeInputError(f"unknown domain {domain!r}: one of {', '.join(DOMAINS)}")
    text = resources.files("assets").joinpath("prompts", f"{domain}.txt").read_text(encoding="utf-8")
    return parse_prompts(text)


# --- where traces go ------------------------------------------------------------


def cache_root() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("cope"))


def safe_name(name: str) -> str:
    name = name.strip().rstrip("/").replace("/", "--")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "model"


def default_trace_path(model: str, domain: str) -> Path:
    return cache_root() / "traces" / f"{safe_name(model)}-{safe_name(domain)}.cope.npz"


def _model_label(arg: str) -> str:
    """The catalog id when the catalog knows the model (so `cope advise` finds it), else the argument."""
    try:
        from engine.catalog import load_model

        return load_model(arg).id
    except Exception:  # noqa: BLE001 - a label only: any failure falls back to the name given
        path = Path(arg)
        return path.name if path.exists() else arg


# --- run --------------------------------------------------------------------------


def _stderr_progress():
    state = {"label": None, "shown": -1}

    def progress(done: int, total: int, label: str) -> None:
        step = max(1, total // 10)
        if label != state["label"] or done == total or done // step != state["shown"]:
            state["label"], state["shown"] = label, done // step
            print(f"cope: recording {done}/{total} tokens ({label})", file=sys.stderr, flush=True)

    return progress


def run(args: argparse.Namespace) -> int:
    if args.tokens < 1:
        raise CopeInputError(f"--tokens must be at least 1, got {args.tokens}")
    if args.prompts:
        prompts = load_prompts(args.prompts)
        domain_label, domain = Path(args.prompts).name.split(".")[0], ""
    else:
        domain = args.domain or "chat"
        prompts, domain_label = domain_prompts(domain), domain
    cancel = threading.Event()  # the CLI stops on Ctrl-C; the TUI sets this from its worker
    progress = _stderr_progress()
    if args.gguf:
        from probes.llamacpp_glue import gpu_offload_supported, import_llama_cpp
        from probes.record_llamacpp import record_with_llamacpp

        llama_cpp = import_llama_cpp()  # says how to install the extra when it is missing
        if not Path(args.gguf).is_file():
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
        trace = record_with_llamacpp(
            args.gguf,
            prompts,
            args.tokens,
            n_gpu_layers=n_gpu_layers,
            progress=progress,
            cancel=cancel,
            model_name=label,
            domain=domain,
        )
    else:
        from probes.record_hf import record_with_transformers

        device = args.device
        if device == "auto":
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        label = _model_label(args.model)
        print(f"cope: loading {args.model} with transformers on {device}", file=sys.stderr, flush=True)
        trace = record_with_transformers(
            args.model,
            prompts,
            args.tokens,
            device=device,
            progress=progress,
            cancel=cancel,
            sample=args.sample,
            model_name=label,
            domain=domain,
        )
    from engine.trace_io import save_trace

    out = Path(args.out) if args.out else default_trace_path(label, domain_label)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CopeInputError(f"cannot create the folder: {exc.strerror or exc}", path=str(out.parent)) from None
    save_trace(trace, out)
    for note in trace.meta.notes:
        print(f"cope: note: {note}", file=sys.stderr)
    print(
        f"cope: wrote {trace.n_tokens} tokens x {trace.n_layers} MoE layers (top-{trace.top_k}, "
        f"{trace.n_sequences} sequences) to {out}",
        file=sys.stderr,
    )
    print(out)
    return EXIT_OK
