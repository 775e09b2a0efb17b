"""The runtimes part of `cope detect`: llama.cpp's programs (or ik_llama.cpp's, or the
MoE expert-cache fork's) and SGLang with kt-kernel, as probes/runtimes.py finds them."""

from __future__ import annotations

import argparse
from cope_tui.service.runtimes import scan_runtimes
from engine.llamacpp.llamacpp_flags import spelling_summary
from engine.runtimes import REGISTRY


def add_runtime_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--llama-bin", metavar="DIR", default=None,
                        help="folder with llama-server/llama-cli/llama-bench (default: PATH)")


def scan_for(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    return scan_runtimes(getattr(args, "llama_bin", None))


def render_runtimes(scan) -> str:  # type: ignore[no-untyped-def]
    titles = {r.info.name: r.info.title for r in REGISTRY}
    lines = ["Runtimes:"]
    for found in scan.found:
        programs = f" ({', '.join(found.programs)})" if found.programs else ""
        lines.append(f"  {titles.get(found.name, found.name):<38} {found.version}  in {found.where}{programs}")
        lines.append(f"  {'':<38} told apart by: {found.how}")
        if found.build is not None:
            lines.append(f"  {'':<38} commands spelled for it: {spelling_summary(found.build)}")
    if not scan.found:
        lines.append("  none found")
    lines += [f"  - {note}" for note in scan.notes]
    return "\n".join(lines) + "\n"
