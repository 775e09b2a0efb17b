"""COPE's decode estimate of every published run it can price, beside what was published.

    python bench/published.py [--csv PATH] [--json OUT]

Each row of ../shared/calibration/published-decode.csv that bench/published_rows.py
transcribes, and of the project's own bench/data/published-extra.csv (bench/published_extra_rows.py;
its rows are named x<index>) and bench/data/published-hybrid.csv (bench/published_hybrid_rows.py; rows
h<index>: web pages' runs with experts on the CPU beside a GPU), is priced through the code path of `cope estimate` (the request built from
the model, quantization and hardware presets, the command's own settings, its placement
priced by engine/advice/command_estimate.py) with the analytic cost model, the fidelity COPE
uses for a machine it has not measured. The published tokens/s are only compared with:
they never enter the estimate. Rows it cannot price are listed with the reason.

Then the prompt-processing figures (bench/published_prefill.py) of the rows that publish
one. Summary: over the rows whose hardware is stated, the mean absolute percentage error, the
worst ratios (predicted / published) and how many fall within 0.75-1.33; the rows priced
on an assumed CPU apart; and whether each sweep (same source and hardware, one setting
varied) comes out in the published order. No timing assertions: a report to read.
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import math
import re
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.published_extra_rows import EXTRA_ROWS, EXTRA_SKIPPED  # noqa: E402
from bench.published_hybrid_rows import HYBRID_ROWS, HYBRID_SKIPPED  # noqa: E402
from bench.published_multi_gpu import MULTI_GPU_INDEXES, MULTI_GPU_ROWS, MULTI_GPU_SKIPPED  # noqa: E402
from bench.published_rows import ROWS, SKIPPED, Row  # noqa: E402
from cope_tui.options import PlanChoices  # noqa: E402
from cope_tui.service.request import build_request  # noqa: E402
from engine.cost.analytic_cost import (AnalyticAssumptions, AnalyticCostModel, gpu_compute_capability,  # noqa: E402
                                       uses_cuda_graphs)
from engine.advice.command_estimate import CommandPrice, command_settings, price_placement_command  # noqa: E402
from engine.advice.error_band import REGIMES, placement_regime  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from engine.llamacpp.llama_args import parse_llama_command  # noqa: E402
from engine.llamacpp.llama_placement import offloads_output_first, placement_of  # noqa: E402
from engine.hardware.memory_spec import parse_memory_spec  # noqa: E402

CSV = ROOT.parent / "shared" / "calibration" / "published-decode.csv"
EXTRA_CSV = ROOT / "bench" / "data" / "published-extra.csv"  # published runs the project collected (its .md)
HYBRID_CSV = ROOT / "bench" / "data" / "published-hybrid.csv"  # web pages' hybrid runs (its .md)
GOOD = (0.75, 1.33)
NO_GPU = "rtx-4060-ti-16gb"  # a CPU-only row's commands offload nothing: the GPU preset is not used


# Sources that publish one person's one machine: cross-validation leaves them out together, or
# a fold would be tested on a machine its fit saw. The blog post's gpt-oss-120b runs are the
# machine (RTX 4070, i5-12600K, two DDR5 DIMMs) of the same author's benchmark repository.
_RYANILANO = ("https://github.com/ryanilano/localai-16gb-bench-results/blob/5683c48c7d6597870e0937c18e4c6789ddb2a146/"
              "results/2026-07-01_202112-debian-llm/json/35B_UD-")
_JIGSAWPT = "https://github.com/JigSawPT/moe-autopilot/blob/"
_BEYONDVRAM = "https://github.com/yassinebkr/beyondvram/blob/"
_JIGSAWPT_GPT_OSS = _JIGSAWPT + "f014707bdd50368e1c7265c8a6d11d9983204d95/evidence/gpt-oss/"
_MOEARC = "https://github.com/chrisdesrochers/MoEArc/blob/48f1e4920cf8ce5c4d7da98067c2a066277cb02d/bench/results/tuning/"
ONE_MACHINE = {
    # InsiderLLM's rig 'rushuna' (RTX 3060 + i7-7700), in two records of its bench-results repository
    "https://github.com/msb-msb/insiderllm-bench-results/blob/1639d2ec897b8af159c15abd61c15050c20634e3/"
    "rushuna-july-rows-remeasure-2026-09-28/README.md":
        "https://github.com/msb-msb/insiderllm-bench-results/blob/bbd4fae677cf03ac08f581fb563a70150cb8bdb2/"
        "rushuna-3060-qwen36-ncmoe-2026-09-11/README.md",
    "https://carteakey.dev/blog/local-inference/optimizing-gpt-oss-120b-local-inference/":
        "https://github.com/carteakey/lllms/blob/827b96079041b7f4244bf35b40e0955f31c66f9f/docs/bench-results.md",
    # ryanilano/localai-16gb-bench-results: one llama-bench JSON per quantization and depth of one run on 'debian-llm'
    **{_RYANILANO + name: _RYANILANO + "Q3_K_M_d0.json"
       for name in ("Q3_K_M_d16384.json", "Q3_K_M_d32768.json", "Q4_K_XL_d0.json", "Q4_K_XL_d16384.json",
                    "Q4_K_XL_d32768.json")},
    # JigSawPT/moe-autopilot: one RTX 5090 + Ryzen 9 9950X3D in four write-ups
    **{url: _JIGSAWPT_GPT_OSS + "gptoss_sweep.md"
       for url in (_JIGSAWPT_GPT_OSS + "gptoss_maxabs.md", _JIGSAWPT_GPT_OSS + "prefill_ab.md",
                   _JIGSAWPT + "62fa85765f7ea3856e21902f03caaf3caba10784/README_REPRO.md")},
    # yassinebkr/beyondvram: one RTX 3070 Ti + Ryzen 5 5600X in four records
    **{url: _BEYONDVRAM + "895fb1f29372c80aaa5b9429f79d4f9da58980a0/results/moe-locality/placement-grid.json"
       for url in (_BEYONDVRAM + "16c1c05a3be05d68e9dd7939bdb3161f8ccdaadc/docs/moe-track-plan.md",
                   _BEYONDVRAM + "b334916c4ccb457ba351be1def6d65619d8dc3dd/results/gpt-oss/placement-grid.json",
                   _BEYONDVRAM + "b334916c4ccb457ba351be1def6d65619d8dc3dd/results/gpt-oss/placement-grid-refine.json")},
    # chrisdesrochers/MoEArc: one Arc B580 + Core Ultra 7 265K in five llama-bench logs of one tuning session
    **{_MOEARC + name: _MOEARC + "qwen30-ncmoe.txt"
       for name in ("qwen30-depth.txt", "oss120-warm-d0.txt", "oss120-depth.txt", "oss120-deep.txt")},
}


def machine_source(url: str) -> str:
    """The source a row counts under: its URL, or the first source of the same machine."""
    return ONE_MACHINE.get(url, url)


@dataclass(frozen=True)
class Priced:
    row: Row
    published_tps: float | None  # None: not a single number
    price: CommandPrice | None
    problem: str | None  # why it has no figure (input error, would not run)
    source: str = ""  # the CSV's source URL: what cross-validation leaves out together
    key: str = ""  # how the report names the row: its index in the shared CSV, "x<index>" / "h<index>" in the project's
    suspect: str | None = None  # the calibration notes' SUSPECT clause: left out of fits and checks
    regime: str = ""  # REGIMES: where the command puts the experts

    @property
    def ratio(self) -> float | None:
        if self.price is None or not self.price.runs or not self.published_tps:
            return None
        return self.price.tokens_per_s / self.published_tps


def published_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def rows_from_args(script: str, options=None) -> tuple[list[dict[str, str]], argparse.Namespace] | None:  # type: ignore[no-untyped-def]
    """The --csv rows and the parsed arguments (`.json`: the path to write the summary to)
    of a script that prices the calibration rows; None (said on stderr) when the CSV is not
    there. `options(parser)` adds the script's own options."""
    parser = argparse.ArgumentParser(description=sys.modules["__main__"].__doc__.splitlines()[0])
    parser.add_argument("--csv", default=str(CSV))
    parser.add_argument("--json", metavar="OUT", help="also write the summary as JSON")
    if options is not None:
        options(parser)
    args = parser.parse_args()
    path = Path(args.csv)
    if not path.exists():
        print(f"{script}: {path} not found (the calibration data lives beside the checkout)", file=sys.stderr)
        return None
    return published_rows(path), args


def tokens_per_s(text: str) -> float | None:
    """A published figure: a number, or the midpoint of a range "a-b"; None for "~x"."""
    text = text.strip()
    if not text or text.startswith("~"):
        return None
    if "-" in text:
        low, high = (float(x) for x in text.split("-", 1))
        return (low + high) / 2
    return float(text)


def sized(quant, model, file_bytes: float):  # type: ignore[no-untyped-def]
    """`quant` with its experts' bits per weight set so the model's bytes are the file's
    (a custom mix published by its size; the non-expert weights keep the quant's bits).
    Without its llama.cpp file type: a quant that names one is sized tensor by tensor from
    llama.cpp's mix for that type (engine/models/model.py, tensor_sizes), which would ignore
    the bits set here and price the catalog's file instead of the published one."""
    non_expert = model.non_expert_params() * quant.non_expert_bits_per_weight / 8
    experts = model.n_experts_total * model.expert_params()
    bits = (file_bytes - non_expert) * 8 / experts
    return replace(quant, name=f"{quant.name} at {file_bytes / 2**30:.2f} GiB", expert_bits_per_weight=bits,
                   llama_ftype="")


@functools.cache
def prepared(row: Row):  # type: ignore[no-untyped-def]
    """(request at the command's settings, command) of a row; cached, since only the cost
    model's constants change between the fit's evaluations."""
    memory = parse_memory_spec(row.memory) if row.memory else None
    choices = PlanChoices(model=row.model, quant=row.quant, gpu=row.gpu or NO_GPU, cpu=row.cpu, memory=memory,
                          ram_gib=row.ram_gib, trace="synthetic", tokens=20)
    request = build_request(choices)
    if row.file_gib:
        request = replace(request, quant=sized(request.quant, request.model, row.file_gib * 2**30))
    command = parse_llama_command(shlex.split(row.command))
    return replace(request, **command_settings(command, request)), command


def price_row(row: Row, published: dict[str, str], assumptions: AnalyticAssumptions | None = None,
              key: str | None = None) -> Priced:
    tps = tokens_per_s(published["tg_tok_s"])
    facts = dict(source=machine_source(published["source"]), suspect=suspect_note(published), key=key or str(row.index))
    first = output_first_of(row, published)
    try:
        request, command = prepared(row)
        model = AnalyticCostModel(request.model, request.quant, request.platform,
                                  context_tokens=request.context_tokens, attention_tokens=request.attention_tokens,
                                  kv_bytes_per_element=request.kv_bytes_per_element,
                                  assumptions=assumptions or AnalyticAssumptions(),
                                  cuda_graphs=cuda_graphs_of(row, published))
        price = price_placement_command(request, model, command, output_first=first)
    except CopeInputError as exc:
        return Priced(row, tps, None, f"cannot price: {exc}", **facts)
    return Priced(row, tps, price, price.refusal, regime=regime_of(row, first), **facts)


def output_first_of(row: Row, published: dict[str, str]) -> bool:
    """Whether the row's build offloads the output layer first under -ngl (llama_placement)."""
    return offloads_output_first(row.runtime, build_date(published))


# The build date of a row whose date column does not give one, from the commit it names
# (ikawrakow/ik_llama.cpp's history: 1cb7e1bf3 is of 2026-02-13).
BUILD_DATES = {"1cb7e1bf": "2026-02-13"}


def build_date(published: dict[str, str]) -> str | None:
    """The row's build date (ISO, perhaps only year and month): its date column, else the
    date of the commit its runtime column names; None when neither says."""
    found = re.match(r"\d{4}-\d{2}(-\d{2})?", published.get("date", "").strip())
    if found:
        return found.group(0)
    return next((d for commit, d in BUILD_DATES.items() if commit in published.get("runtime", "")), None)


def fused_moe(published: dict[str, str]) -> bool | None:
    """ik_llama.cpp's `-fmoe` as the row's placement gives it (None: not given)."""
    text = published.get("placement", "")
    if re.search(r"fmoe[ =]0\b|-no-fmoe", text):
        return False
    return True if "fmoe" in text else None


def cuda_graphs_of(row: Row, published: dict[str, str]) -> bool:
    """Whether the row's runtime, at its build and flags and on its GPU, replays decode as
    CUDA graphs (engine.cost.analytic_cost.uses_cuda_graphs)."""
    first = output_first_of(row, published)
    gpu_experts = regime_of(row, first) in ("all-GPU", "partial offload")
    cc = gpu_compute_capability(prepared(row)[0].platform.gpu) if row.gpu else None
    return uses_cuda_graphs(row.runtime, build_date=build_date(published), fused_moe=fused_moe(published),
                            gpu_experts=gpu_experts, compute_capability=cc, gpu_stretches=gpu_stretches(row, first))


@functools.cache
def gpu_stretches(row: Row, output_first: bool = True) -> int:
    """How many runs of GPU work, with CPU work between them, a decode token of the row's
    command has: each offloaded block's attention and shared weights, then its routed experts
    on the CPU and/or the GPU, in block order, then the output head."""
    request, command = prepared(row)
    model = request.model
    placement = placement_of(command, model, has_gpu=row.gpu is not None, output_first=output_first)
    share = dict(zip(model.moe_blocks, placement.expert_cpu_share))
    on_gpu: list[bool] = []
    for block in range(model.n_blocks):
        offloaded = bool(placement.gpu_blocks[block])
        on_gpu.append(offloaded)
        cpu_share = float(share.get(block, 0.0 if offloaded else 1.0))
        if cpu_share > 0:
            on_gpu.append(False)
        if cpu_share < 1:
            on_gpu.append(True)
    on_gpu.append(placement.output_on_gpu)
    return sum(1 for i, g in enumerate(on_gpu) if g and (i == 0 or not on_gpu[i - 1]))


# Where a row's command puts the routed experts, for the accuracy figures by regime
# (engine/advice/error_band.py: the bands COPE shows beside its figures are these regimes').


@functools.cache
def regime_of(row: Row, output_first: bool = True) -> str:
    request, command = prepared(row)
    has_gpu = row.gpu is not None
    placement = placement_of(command, request.model, has_gpu=has_gpu, output_first=output_first)
    return placement_regime(placement.expert_cpu_share, has_gpu=has_gpu, cpu_only=placement.cpu_only)


def suspect_note(published: dict[str, str]) -> str | None:
    """The calibration notes' SUSPECT clause (shared/calibration/README.md: a row that
    contradicts its own source), or None."""
    notes = published.get("notes", "")
    at = notes.find("SUSPECT")
    return notes[at:].strip() if at >= 0 else None


def fitted_rows(priced: list[Priced]) -> list[Priced]:
    """The rows the constants are fitted on and judged by: hardware stated, priced, not SUSPECT,
    and not read from disk (a mapped model larger than the RAM: its disk term is an assumption,
    engine/hardware/host_memory.py, reported apart by `streamed_rows`)."""
    return [p for p in priced if p.row.stated and p.ratio is not None and p.suspect is None and not streams(p)]


def streams(p: Priced) -> bool:
    """Whether the row's command is priced reading its mapped weights back from disk, or
    holding a copy too large for pinned memory in pageable memory (RamFit.pageable: a box
    whose RAM the weights nearly fill, a pressure COPE does not price)."""
    return (p.price is not None and p.price.memory is not None
            and (p.price.memory.ram.streams or p.price.memory.ram.pageable))


def streamed_rows(priced: list[Priced]) -> list[Priced]:
    """Stated, priced rows whose mapped weights do not fit the RAM (the page cache streams them)."""
    return [p for p in priced if p.row.stated and p.ratio is not None and p.suspect is None and streams(p)]


def signed_error(ratios: list[float]) -> float:
    """The mean of predicted / published - 1: positive when COPE is optimistic."""
    return sum(r - 1 for r in ratios) / len(ratios) if ratios else float("nan")


def price_all(rows_csv: list[dict[str, str]], assumptions: AnalyticAssumptions | None = None, *,
              extra: bool = True, fitted_only: bool = False) -> list[Priced]:
    """Every transcribed row of the shared CSV (`rows_csv`) priced, then (`extra`) those of
    bench/data/published-extra.csv and bench/data/published-hybrid.csv, the project's own
    collections of published runs.
    `fitted_only`: only the rows a fit can use (hardware stated, not SUSPECT), which is what
    a fit's hundreds of evaluations need; fitted_rows() of either is the same."""
    def wanted(row: Row, published: dict[str, str]) -> bool:
        return not fitted_only or (row.stated and suspect_note(published) is None)

    out = [price_row(row, pub, assumptions) for row in ROWS
           if wanted(row, pub := _checked(rows_csv, row, "bench/published_rows.py"))]
    if extra:
        extra_csv = _extra_rows()
        out += [price_row(row, pub, assumptions, key=f"x{row.index}") for row in EXTRA_ROWS
                if wanted(row, pub := _checked(extra_csv, row, "bench/published_extra_rows.py"))]
        hybrid_csv = _hybrid_rows()
        out += [price_row(row, pub, assumptions, key=f"h{row.index}") for row in HYBRID_ROWS
                if wanted(row, pub := _checked(hybrid_csv, row, "bench/published_hybrid_rows.py"))]
    return out


@functools.cache
def _extra_rows() -> list[dict[str, str]]:
    """The project's own published runs, read once (a fit prices every row hundreds of times)."""
    return published_rows(EXTRA_CSV)


@functools.cache
def _hybrid_rows() -> list[dict[str, str]]:
    """The web pages' hybrid runs, read once (as _extra_rows)."""
    return published_rows(HYBRID_CSV)


def _checked(rows_csv: list[dict[str, str]], row: Row, transcription: str) -> dict[str, str]:
    published = rows_csv[row.index]
    if row.model_in_csv not in published["model"]:
        raise SystemExit(f"published.py: row {row.index} is {published['model']!r}, the transcription says "
                         f"{row.model_in_csv!r}: the CSV changed; update {transcription}")
    return published


def mape(ratios: list[float]) -> float:
    return sum(abs(r - 1) for r in ratios) / len(ratios) if ratios else float("nan")


def sweep_orders(priced: list[Priced]) -> list[tuple[str, bool, str]]:
    """(sweep, right order?, the published and predicted orders) of every sweep."""
    sweeps: dict[str, list[Priced]] = {}
    for p in priced:
        if p.row.sweep and p.ratio is not None and p.suspect is None:
            sweeps.setdefault(p.row.sweep, []).append(p)
    out = []
    for name, members in sorted(sweeps.items()):
        if len(members) < 2:
            continue
        by_pub = [p.key for p in sorted(members, key=lambda p: -p.published_tps)]
        by_est = [p.key for p in sorted(members, key=lambda p: -p.price.tokens_per_s)]
        # Ties in the published figure (within 2%) may come in either order.
        ok = all(_not_inverted(a, b) for i, a in enumerate(members) for b in members[i + 1:])
        out.append((name, ok, f"published {by_pub}, estimated {by_est}"))
    return out


def _not_inverted(a: Priced, b: Priced) -> bool:
    pub = a.published_tps - b.published_tps
    if abs(pub) <= 0.02 * max(a.published_tps, b.published_tps):
        return True
    return (a.price.tokens_per_s - b.price.tokens_per_s) * pub > 0


def report(priced: list[Priced], skipped_rows: dict[str, str], total_rows: int) -> dict:
    lines = [f"{'row':>3}  {'runtime':<12} {'model':<16} {'quant':<8} {'gpu':<18} {'cpu':<24} "
             f"{'published':>9} {'COPE':>7} {'ratio':>6}"]
    for p in priced:
        r = p.row
        est = f"{p.price.tokens_per_s:7.2f}" if p.ratio is not None else "      -"
        ratio = f"{p.ratio:6.2f}" if p.ratio is not None else "     -"
        pub = f"{p.published_tps:9.2f}" if p.published_tps else "        -"
        mark = "" if r.stated else "  (assumed: " + r.assumed + ")"
        lines.append(f"{p.key:>3}  {r.runtime:<12} {r.model[:16]:<16} {r.quant:<8} {str(r.gpu or '-')[:18]:<18} "
                     f"{r.cpu[:24]:<24} {pub} {est} {ratio}{mark}")
        if p.problem:
            lines.append(f"       {p.problem}")
    stated = fitted_rows(priced)
    assumed = [p for p in priced if not p.row.stated and p.ratio is not None and p.suspect is None]
    suspects = [p for p in priced if p.suspect is not None]
    refused = [p for p in priced if p.ratio is None]
    sweeps = sweep_orders(priced)
    summary = {
        "rows_in_csv": total_rows,
        "priced_hardware_stated": len(stated),
        "priced_hardware_assumed": len(assumed),
        "not_priced_by_cope": len(refused),
        "skipped": len(skipped_rows),
        "mape_stated": mape([p.ratio for p in stated]),
        "signed_error_stated": signed_error([p.ratio for p in stated]),
        "left_out_suspect": {p.key: p.suspect for p in suspects},
        "mape_assumed": mape([p.ratio for p in assumed]),
        "read_from_disk": {p.key: round(p.ratio, 3) for p in streamed_rows(priced)},
        "within_0.75_1.33_stated": sum(GOOD[0] <= p.ratio <= GOOD[1] for p in stated),
        "worst_low": sorted((round(p.ratio, 3), p.key) for p in stated)[:3],
        "worst_high": sorted((round(p.ratio, 3), p.key) for p in stated)[-3:][::-1],
        "sweeps": [{"sweep": name, "right_order": ok, "orders": how} for name, ok, how in sweeps],
    }
    lines += [
        "",
        f"priced: {len(stated)} rows with the hardware stated, {len(assumed)} on an assumed CPU or file; "
        f"{len(refused)} not priced by COPE; {len(skipped_rows)} skipped (of {total_rows})",
        f"hardware stated (in-sample: these rows fitted the constants): MAPE {summary['mape_stated']:.1%}, "
        f"mean signed error {summary['signed_error_stated']:+.1%}, {summary['within_0.75_1.33_stated']} of "
        f"{len(stated)} within {GOOD[0]}-{GOOD[1]}; lowest ratios {summary['worst_low']}, highest "
        f"{summary['worst_high']}",
        "left out (SUSPECT in the calibration notes): "
        + ("; ".join(f"{p.key}: {p.suspect}" for p in suspects) or "none"),
        f"assumed hardware: MAPE {summary['mape_assumed']:.1%}",
        "read from disk or from pageable memory (mapped weights larger than the RAM, priced with the assumed disk "
        "term; a copy too large to pin): not fitted: "
        + ("; ".join(f"{p.key} {p.ratio:.2f} ({p.price.memory.ram.disk_share:.1%} from disk)"
                     for p in streamed_rows(priced)) or "none"),
        "sweeps: " + "; ".join(f"{name} {'right' if ok else 'WRONG'} ({how})" for name, ok, how in sweeps),
        "not priced by COPE: " + "; ".join(f"{p.key}: {p.problem}" for p in refused),
        "skipped: " + "; ".join(f"{i}: {why}" for i, why in skipped_rows.items()),
    ]
    print("\n".join(lines))
    return summary


def report_multi_gpu(priced: list[Priced]) -> dict:
    """Each two-GPU row and the MAPE of those priced (hardware stated apart from assumed)."""
    for p in priced:
        shown = f"COPE {p.price.tokens_per_s:.2f}, ratio {p.ratio:.2f}" if p.ratio is not None else p.problem
        mark = "" if p.row.stated else f" (assumed: {p.row.assumed})"
        print(f"{p.key:>3}  {p.row.runtime:<12} {p.row.gpu:<14} published {p.published_tps:.2f}: {shown}{mark}")
    stated = [p.ratio for p in priced if p.ratio is not None and p.row.stated]
    assumed = [p.ratio for p in priced if p.ratio is not None and not p.row.stated]
    out = {"rows": {p.key: (round(p.ratio, 3) if p.ratio is not None else p.problem) for p in priced},
           "mape_stated": mape(stated), "mape_assumed": mape(assumed)}
    print(f"two GPUs: MAPE {out['mape_stated']:.1%} over {len(stated)} rows with the hardware stated, "
          f"{out['mape_assumed']:.1%} over {len(assumed)} on an assumed file")
    return out


def main() -> int:
    given = rows_from_args("published.py")
    if given is None:
        return 2
    rows_csv, json_out = given[0], given[1].json
    skipped = {**{str(i): MULTI_GPU_SKIPPED.get(i, why) for i, why in sorted(SKIPPED.items())
                  if i not in MULTI_GPU_INDEXES},
               **{f"x{i}": why for i, why in sorted(EXTRA_SKIPPED.items())},
               **{f"h{i}": why for i, why in sorted(HYBRID_SKIPPED.items())}}
    total = len(rows_csv) + len(_extra_rows()) + len(_hybrid_rows())
    summary = report(price_all(rows_csv), skipped, total)
    # Two GPUs (bench/published_multi_gpu.py): checks of engine/llamacpp/card_price.py, reported
    # apart and never fitted on.
    print("\nTwo or more GPUs (checks, not fitted):")
    summary["multi_gpu"] = report_multi_gpu(
        [price_row(row, _checked(rows_csv, row, "bench/published_multi_gpu.py")) for row in MULTI_GPU_ROWS])
    # The prompt-processing figures of the rows that publish one (bench/published_prefill.py).
    from bench.published_prefill import price_all as price_prompts, report as report_prompts

    print("\nPrompt processing (prompt tok/s):")
    summary["prompt_processing"] = report_prompts(price_prompts(rows_csv))
    if json_out:
        Path(json_out).write_text(json.dumps(summary, indent=1, default=str))
    return 0 if not math.isnan(summary["mape_stated"]) else 1


if __name__ == "__main__":
    sys.exit(main())
