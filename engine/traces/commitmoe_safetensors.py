"""CommitMoE's columnar routing traces: safetensors with one row per (prompt, token, layer).

The dataset card (RASMUS/commitmoe-qwen35-fp8-layers-v2, Qwen3.5-35B-A3B-FP8) stores
`layers_v1/<chunk>/labels/part_*.safetensors` with the tensors `top_indices` [N, k]
(routed expert ids), `prompt_idx` [N], `tok` [N] (decode step within the prompt) and
`layer` [N] (the model's layer, = its block: every Qwen3.5-35B-A3B layer is MoE);
router logits live in `logits/layer=NN/part_*.safetensors` as `logits` [N, experts].
A file that carries `logits` next to `top_indices` (or `scores` [N, k]) gets router
weights: the softmax of the logits at the chosen experts (or the scores as given).

Each prompt is a sequence, its `tok` the position. At most MAX_IMPORT_TOKENS tokens are
kept (whole prompts, in prompt order). Read with the `safetensors` package's numpy API:
no pickle, the header is checked before any tensor is loaded.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from engine.core.errors import CopeInputError
from engine.core.input_limits import max_replay_slots
from engine.traces.format import MAX_IMPORT_TOKENS, TraceFormat, TraceShape, check_file_size, missing_reader, model_shape
from engine.traces.trace import RoutingTrace, TraceMeta
from engine.traces.validate import assemble, build_trace, check_cells

REQUIRED = ("top_indices", "prompt_idx", "tok", "layer")
_INT_DTYPES = ("I8", "I16", "I32", "I64", "U8", "U16", "U32")
_FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")


def _safe_open(where: str):
    try:
        from safetensors import safe_open  # noqa: PLC0415 - the package is only needed to read this format
    except ImportError:
        raise missing_reader(where, "safetensors", "safetensors") from None
    try:
        return safe_open(where, framework="numpy")
    except Exception as exc:  # noqa: BLE001 - SafetensorError and OSError: one line
        raise CopeInputError(f"not a readable safetensors file: {exc}", path=where) from None


def _shapes(where: str, handle) -> dict[str, tuple[tuple[int, ...], str]]:
    out = {}
    for name in handle.keys():
        piece = handle.get_slice(name)
        out[name] = (tuple(int(d) for d in piece.get_shape()), str(piece.get_dtype()))
    missing = [n for n in REQUIRED if n not in out]
    if missing:
        raise CopeInputError(f"lacks the tensor(s) {', '.join(missing)} (has {', '.join(sorted(out)) or 'none'}): "
                             "not a CommitMoE labels file", path=where)
    return out


def _check_shapes(where: str, shapes: dict) -> tuple[int, int]:
    (ids_shape, ids_dtype) = shapes["top_indices"]
    if len(ids_shape) != 2 or ids_shape[1] < 1 or ids_dtype not in _INT_DTYPES:
        raise CopeInputError(f"top_indices must be an integer [rows, k] tensor, found {ids_dtype} {list(ids_shape)}",
                             path=where)
    rows = ids_shape[0]
    for name in ("prompt_idx", "tok", "layer"):
        shape, dtype = shapes[name]
        if shape != (rows,) or dtype not in _INT_DTYPES:
            raise CopeInputError(f"{name} must be an integer [{rows}] tensor, found {dtype} {list(shape)}", path=where)
    if rows == 0:
        raise CopeInputError("the file holds no rows", path=where)
    return rows, ids_shape[1]


def _keep_rows(prompt: np.ndarray, n_layers: int, limit: int) -> tuple[np.ndarray | None, str | None]:
    """A mask keeping whole prompts, in prompt order, up to `limit` tokens (None: keep all)."""
    if prompt.size <= limit * n_layers:
        return None, None
    ids, counts = np.unique(prompt, return_counts=True)
    tokens = np.cumsum(counts // max(n_layers, 1))
    n = max(int(np.searchsorted(tokens, limit, side="right")), 1)
    mask = np.isin(prompt, ids[:n])
    return mask, f"kept the first {n:,} of {ids.size:,} prompts ({int(tokens[n - 1]):,} tokens)"


def _weights(where: str, handle, shapes: dict, ids: np.ndarray, n_experts: int) -> tuple[np.ndarray | None, str]:
    if "scores" in shapes:
        scores = np.asarray(handle.get_tensor("scores"), dtype=np.float64)
        if scores.shape != ids.shape:
            raise CopeInputError(f"scores must match top_indices' shape {list(ids.shape)}", path=where)
        return scores, "router scores as recorded"
    if "logits" not in shapes:
        return None, "no router logits in this file (the dataset keeps them in logits/layer=NN/)"
    shape, dtype = shapes["logits"]
    if shape != (ids.shape[0], n_experts) or dtype not in _FLOAT_DTYPES:
        raise CopeInputError(f"logits must be a float [{ids.shape[0]}, {n_experts}] tensor, found {dtype} "
                             f"{list(shape)}", path=where)
    logits = np.asarray(handle.get_tensor("logits"), dtype=np.float64)
    if not np.all(np.isfinite(logits)):
        raise CopeInputError("logits hold a value that is not a finite number", path=where)
    logits -= logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    return np.take_along_axis(probs, np.clip(ids, 0, n_experts - 1), axis=1), "softmax of the router logits"


def read_commitmoe_safetensors(path, shape: TraceShape, *, limit: int = MAX_IMPORT_TOKENS) -> RoutingTrace:
    where = str(path)
    model_moe_blocks, n_experts, top_k = shape.moe_blocks, shape.n_experts, shape.top_k
    check_file_size(where)
    with _safe_open(where) as handle:
        shapes = _shapes(where, handle)
        rows, k = _check_shapes(where, shapes)
        if k != top_k:
            raise CopeInputError(f"top_indices lists {k} experts per row, the model routes top-{top_k}", path=where)
        prompt = np.asarray(handle.get_tensor("prompt_idx"), dtype=np.int64)
        # no more tokens than two halves of the replay budget take (engine/core/input_limits.py)
        limit = max(min(limit, 2 * max_replay_slots() // max(len(model_moe_blocks) * top_k, 1)), 1)
        mask, cut = _keep_rows(prompt, len(model_moe_blocks), limit)
        ids = np.asarray(handle.get_tensor("top_indices"), dtype=np.int64)
        tok = np.asarray(handle.get_tensor("tok"), dtype=np.int64)
        block = np.asarray(handle.get_tensor("layer"), dtype=np.int64)
        weights, how = _weights(where, handle, shapes, ids, n_experts)
    if mask is not None:
        prompt, ids, tok, block = prompt[mask], ids[mask], tok[mask], block[mask]
        weights = None if weights is None else weights[mask]

    def row_label(r: int) -> int:
        return r + 1  # a binary file has no lines: messages say "row N" of the tensors instead

    try:
        layer = check_cells(where, block, ids, row_label, moe_blocks=model_moe_blocks, n_experts=n_experts)
        codes, first = np.unique(prompt, return_index=True)
        order = np.argsort(first, kind="stable")  # sequences in order of first appearance
        code_of = np.empty(codes.size, dtype=np.int64)
        code_of[order] = np.arange(codes.size)
        seq = code_of[np.searchsorted(codes, prompt)]
        expert_ids, w, seq_starts, notes = assemble(where, seq=seq, pos=tok, layer=layer, ids=ids, weights=weights,
                                                    line_of=row_label, moe_blocks=model_moe_blocks,
                                                    seq_labels=[int(c) for c in codes[order]])
    except CopeInputError as exc:
        row = f"row {exc.line}: " if exc.line else ""
        raise CopeInputError(row + exc.message.replace(" at line ", " at row "), path=where) from None
    notes = [n.replace(" at line ", " at row ") for n in notes]
    meta = TraceMeta.imported(shape.model_name, where, n_experts, model_moe_blocks,
                              f"CommitMoE routing labels (one sequence per prompt_idx); weights: {how}",
                              ([cut] if cut else []) + notes)
    return build_trace(where, expert_ids=expert_ids, meta=meta, weights=w, seq_starts=seq_starts)


def _sniff(path: Path, head: bytes) -> bool:
    """A safetensors header (8-byte length, then JSON) that names top_indices."""
    if len(head) < 10:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    text = head[8:8 + min(length, len(head) - 8)]
    if not text.startswith(b"{"):
        return False
    if length <= len(head) - 8:
        try:
            return "top_indices" in json.loads(text)
        except ValueError:
            return False
    return b'"top_indices"' in text


def _read(path: str, *, model=None) -> RoutingTrace:
    return read_commitmoe_safetensors(path, model_shape(path, model, "CommitMoE safetensors"))


FORMAT = TraceFormat(
    name="commitmoe-safetensors",
    label="CommitMoE labels .safetensors",
    suffixes=(".safetensors",),
    sniff=_sniff,
    read=_read,
)
