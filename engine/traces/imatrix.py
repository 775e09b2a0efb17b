"""Expert popularity from llama.cpp's importance matrix (imatrix) files: the values, the
check against a model, and the profile they give. The file is read by
cope_tui/sources/imatrix.py; this module is the format's meaning, numpy only.

What llama-imatrix writes (ggml-org/llama.cpp, tools/imatrix/imatrix.cpp and
common/imatrix-loader.h at commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f, the source
bench/llamacpp_build.py builds):

- `IMatrixCollector::collect_imatrix`: for every GGML_OP_MUL_MAT_ID node (the routed
  experts' matrices: `blk.N.ffn_gate_exps.weight`, `ffn_up_exps`, `ffn_down_exps`, ...)
  it reads the ids tensor [n_expert_used, n_tokens] and does `e.counts[ex]++` once per
  (token, selected expert): `counts` has one entry per expert, the tokens routed to it.
  Every exps tensor of a block sees the same ids, so their counts agree.
- `save_imatrix` (GGUF, the default output): per tensor `<name>.in_sum2` (F32, ne
  [nval / nmat, nmat]) and `<name>.counts` (F32, ne [1, nmat]), nmat the experts of an
  exps tensor (1 for a dense one); metadata `general.type` = "imatrix",
  `imatrix.datasets` (array of the text files' names), `imatrix.chunk_count` (u32) and
  `imatrix.chunk_size` (u32, tokens per chunk).
- `save_imatrix_legacy` (`--output-format dat`, the older `.dat` / `.imatrix` files):
  per tensor the sums divided by each expert's own count, times the chunk count, and no
  counts: no expert popularity survives. A GGUF converted from one (`--in-file x.dat -o
  y.gguf`) has one count per tensor (load_imatrix: `e.counts.resize(1, 0)`): none either.
- `compute_imatrix` runs every token of every chunk as one prompt batch with all rows
  as outputs, the KV cache cleared per chunk: the counts are prompt routing (teacher
  forcing) of chunk_count x chunk_size tokens of the named text, not decode.

What the counts cannot tell: the order and timing of routing (which experts one token
takes together, which tokens follow which); COPE assumes those (engine/traces/synthetic.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from engine.core.errors import CopeInputError, shown
from engine.core.spans import block_span
from engine.traces.popularity import MISSING_PART, PopularityProfile
from engine.traces.trace import TraceMeta

IMATRIX_TYPE = "imatrix"  # general.type
KEY_DATASETS = "imatrix.datasets"
KEY_CHUNK_COUNT = "imatrix.chunk_count"
KEY_CHUNK_SIZE = "imatrix.chunk_size"
COUNTS_SUFFIX = ".counts"
SUMS_SUFFIX = ".in_sum2"
# A routed-expert tensor: llama.cpp's LLM_FFN_EXPS_REGEX (common/common.h) spelt as a full name.
EXPS_NAME = re.compile(r"blk\.(\d{1,5})\.(ffn_(?:up|down|gate|gate_up)_(?:ch|)exps)\.weight")
# The tensor whose counts are taken, where a block has several (all agree in a genuine file).
PREFERRED = ("ffn_up_exps", "ffn_gate_up_exps", "ffn_gate_exps", "ffn_down_exps",
             "ffn_up_chexps", "ffn_gate_chexps", "ffn_down_chexps")
MAX_EXACT_COUNT = 2**24  # counts are float32: integers above this are not all representable


class NoExpertCounts(CopeInputError):
    """An imatrix file that keeps no per-expert counts: the legacy layout, or a GGUF
    converted from it. A genuine imatrix, but no popularity."""


@dataclass(frozen=True)
class ImatrixCounts:
    counts: np.ndarray  # int64 [L, E]: tokens routed to each expert, L the MoE blocks below
    moe_blocks: tuple[int, ...]  # block index of each row
    tensor: str  # the exps tensor the counts are from ("ffn_up_exps")
    chunk_count: int | None  # imatrix.chunk_count
    chunk_size: int | None  # imatrix.chunk_size, tokens per chunk
    datasets: tuple[str, ...]  # imatrix.datasets
    source: str  # the file
    notes: tuple[str, ...] = ()

    @property
    def n_experts(self) -> int:
        return int(self.counts.shape[1])

    def dataset_words(self) -> str:
        data = ", ".join(self.datasets) if self.datasets else "no dataset named"
        if self.chunk_count is not None and self.chunk_size is not None:
            return f"{data}; {self.chunk_count} chunks of {self.chunk_size} tokens"
        return data


def counts_from_tensors(tensors: Mapping[str, np.ndarray], fields: Mapping[str, object], where: str) -> ImatrixCounts:
    """The per-expert counts of an imatrix GGUF from its `<name>.counts` arrays (F32, any
    shape holding nmat values) and its metadata; CopeInputError naming `where` otherwise."""
    kind = fields.get("general.type")
    if kind != IMATRIX_TYPE:
        if isinstance(fields.get("general.architecture"), str):
            raise CopeInputError("a model GGUF, not an imatrix (its general.type is "
                                 f"{shown(kind)}, not 'imatrix'): give a model with --model", path=where)
        raise CopeInputError(f"not an imatrix GGUF: general.type is {shown(kind)}, expected 'imatrix'", path=where)
    per_block: dict[int, dict[str, np.ndarray]] = {}
    single = 0
    for name, values in tensors.items():
        if not name.endswith(COUNTS_SUFFIX):
            continue
        m = EXPS_NAME.fullmatch(name[: -len(COUNTS_SUFFIX)])
        if m is None:
            continue
        flat = np.asarray(values, dtype=np.float64).ravel()
        if flat.size == 1:
            single += 1
            continue
        if not np.all(np.isfinite(flat)) or np.any(flat < 0) or np.any(flat != np.round(flat)):
            raise CopeInputError(f"tensor {shown(name)} holds a count that is not a whole number >= 0", path=where)
        per_block.setdefault(int(m[1]), {})[m[2]] = flat
    if not per_block:
        if single:
            raise NoExpertCounts(f"its {single} expert tensors have one count each, not one per expert: converted "
                                 "from a legacy .dat imatrix, which keeps no per-expert counts (no popularity)",
                                 path=where)
        raise CopeInputError("no routed-expert tensor (blk.N.ffn_*_exps.weight.counts): the imatrix of a "
                             "dense model, or not llama-imatrix's", path=where)
    blocks = tuple(sorted(per_block))
    widths = {v.size for block in per_block.values() for v in block.values()}
    if len(widths) != 1:
        raise CopeInputError(f"its expert tensors count different numbers of experts ({sorted(widths)})", path=where)
    notes: list[str] = []
    rows, used = [], set()
    for b in blocks:
        present = per_block[b]
        name = next((n for n in PREFERRED if n in present), sorted(present)[0])
        used.add(name)
        others = [n for n in present if n != name and not np.array_equal(present[n], present[name])]
        if others:
            notes.append(f"block {b}: {', '.join(sorted(others))} count differently from {name}; {name} used")
        rows.append(present[name])
    counts = np.stack(rows).astype(np.int64)
    if counts.max() > MAX_EXACT_COUNT:
        notes.append(f"counts above {MAX_EXACT_COUNT:,} are stored as float32 and may be off by a few tokens")
    return ImatrixCounts(
        counts=counts,
        moe_blocks=blocks,
        tensor="/".join(sorted(used)),
        chunk_count=_whole(fields.get(KEY_CHUNK_COUNT)),
        chunk_size=_whole(fields.get(KEY_CHUNK_SIZE)),
        datasets=_texts(fields.get(KEY_DATASETS)),
        source=where,
        notes=tuple(notes),
    )


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _texts(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (tuple, list)):
        return tuple(v for v in value if isinstance(v, str))
    return ()


def check_imatrix_fits_model(imatrix: ImatrixCounts, model, *, flag: str = "--profile-trace") -> None:  # type: ignore[no-untyped-def]
    """One CopeInputError line naming the file unless its MoE blocks and experts are the
    model's and every layer's routed entries are whole tokens of the model's top-k."""
    problems = []
    if imatrix.n_experts != model.n_routed_experts:
        problems.append(f"{imatrix.n_experts} experts per layer, the model has {model.n_routed_experts}")
    if tuple(imatrix.moe_blocks) != tuple(model.moe_blocks):
        problems.append(f"counts MoE blocks {block_span(imatrix.moe_blocks)}, the model has "
                        f"{block_span(model.moe_blocks)}")
    if not problems:
        totals = imatrix.counts.sum(axis=1)
        odd = np.flatnonzero(totals % model.top_k)
        if odd.size:
            b = imatrix.moe_blocks[int(odd[0])]
            problems.append(f"block {b} counts {int(totals[odd[0]]):,} routings, not a multiple of the model's "
                            f"top-{model.top_k}")
    if problems:
        raise CopeInputError(f"{flag}: the imatrix does not fit model {model.id}: " + "; ".join(problems),
                             path=imatrix.source)


def imatrix_profile(imatrix: ImatrixCounts, model) -> PopularityProfile:  # type: ignore[no-untyped-def]
    """The popularity profile of an imatrix that fits `model` (check_imatrix_fits_model)."""
    totals = imatrix.counts.sum(axis=1)
    notes = list(imatrix.notes)
    if totals.min() != totals.max():
        notes.append(f"layers counted different numbers of tokens ({int(totals.min()) // model.top_k:,} to "
                     f"{int(totals.max()) // model.top_k:,}): files merged from runs over different blocks?")
    notes.append(f"real: per-layer expert popularity from llama-imatrix's counts ({imatrix.tensor}); "
                 f"not in it: {MISSING_PART}")
    recorded = ("llama-imatrix routed-token counts (prompt batches, teacher forcing) over "
                + imatrix.dataset_words())
    meta = TraceMeta(model=model.id, source=imatrix.source, origin="imported", n_experts=imatrix.n_experts,
                     moe_blocks=tuple(imatrix.moe_blocks), recorded_with=recorded, notes=tuple(notes))
    label = f"the imatrix {imatrix.source} ({imatrix.dataset_words()})"
    return PopularityProfile(counts=imatrix.counts, meta=meta, top_k=model.top_k, label=label)


__all__ = ["ImatrixCounts", "NoExpertCounts", "check_imatrix_fits_model", "counts_from_tensors", "imatrix_profile"]
