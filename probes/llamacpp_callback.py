"""The pure part of recording through llama.cpp: reading the routing tensors that
llama.cpp hands its evaluation callback, assembling them into one trace row per token,
and the callback itself.

How: llama.cpp calls an evaluation callback (`cb_eval` in `llama_context_params`,
of type `ggml_backend_sched_eval_callback`: `bool (*)(struct ggml_tensor * t, bool
ask, void * user_data)`) for each node of the compute graph. With ask=true it asks
whether we want to see the node; with ask=false it hands over the computed node
(returning false there would abort the computation). The MoE graph builder names
the routed expert ids `ffn_moe_topk-<layer>` (int32, [k, n_tokens], often a strided
view of an argsort: index it by its byte strides nb[0], nb[1]) and the router
weights `ffn_moe_weights-<layer>` (f32, [1, k, n_tokens]), then, depending on the
architecture, `ffn_moe_weights_softmax-`, `ffn_moe_weights_norm-` and
`ffn_moe_weights_scaled-<layer>`; the last one present is the one the experts are
weighted with, and the one recorded.

An exception raised inside a ctypes callback is printed and swallowed by ctypes,
and the callback then returns 0 (false), which stops llama.cpp's graph evaluation
and silently ends all later callbacks. So the callback never raises: everything is
caught, recorded in `MoeRoutingCollector.errors` and reported after the run.

Everything here is Python and numpy, tested with fake strided tensors; the wiring to
llama-cpp-python is `probes.llamacpp_glue` (ctypes, GGUF header) and
`probes.record_llamacpp` (the decode loop).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from engine.core.errors import CopeInputError
from engine.traces.trace import RoutingTrace, TraceMeta

GGML_TYPE_F32 = 0
GGML_TYPE_I32 = 26

TOPK_NAME = "ffn_moe_topk"
# Router weight tensors, most final first: the first present in a step is recorded.
WEIGHT_NAMES = ("ffn_moe_weights_scaled", "ffn_moe_weights_norm", "ffn_moe_weights_softmax", "ffn_moe_weights")
WANTED = (TOPK_NAME, *WEIGHT_NAMES)


# --- pure part: tensors -------------------------------------------------------


@dataclass(frozen=True)
class TensorView:
    """What the callback needs of one ggml tensor, copied to host memory.

    data holds the tensor's bytes from its first element on (ggml_nbytes(t) of them,
    which for a strided view spans the whole view); ne are element counts and nb byte
    strides per dimension, as in struct ggml_tensor.
    """

    name: str
    type: int
    ne: tuple[int, ...]
    nb: tuple[int, ...]
    data: bytes | bytearray | memoryview


def parse_name(name: str) -> tuple[str, int] | None:
    """("ffn_moe_topk", 3) for "ffn_moe_topk-3"; None for any other tensor."""
    base, sep, layer = name.rpartition("-")
    if not sep or base not in WANTED or not layer.isdigit():
        return None
    return base, int(layer)


def matrix_from_view(view: TensorView, *, k: int | None = None) -> np.ndarray:
    """The tensor as a [n_tokens, k] array (int32 ids or float32 weights), read by strides.

    Ids are [k, n_tokens]; weights [1, k, n_tokens] or [k, n_tokens]. `k`, when known,
    settles which layout a weight tensor has. Raises ValueError on anything malformed.
    """
    if view.type == GGML_TYPE_I32:
        dtype = np.dtype("<i4")
    elif view.type == GGML_TYPE_F32:
        dtype = np.dtype("<f4")
    else:
        raise ValueError(f"{view.name}: ggml type {view.type}, expected I32 or F32")
    ne = [int(x) for x in view.ne] + [1] * (4 - len(view.ne))
    nb = [int(x) for x in view.nb] + [0] * (4 - len(view.nb))
    if len(ne) > 4 or len(nb) > 4 or len(view.ne) != len(view.nb):
        raise ValueError(f"{view.name}: malformed shape ne={view.ne} nb={view.nb}")
    if any(x < 0 for x in ne) or any(x < 0 for x in nb):
        raise ValueError(f"{view.name}: negative extent or stride")
    if ne[0] == 1 and (ne[1] == k or (k is None and ne[2] > 1)) and ne[3] == 1:
        dk, dn = 1, 2  # [1, k, n_tokens]
    else:
        dk, dn = 0, 1
        if ne[2] != 1 or ne[3] != 1:
            raise ValueError(f"{view.name}: expected a [k, n_tokens] tensor, found ne={tuple(ne)}")
    n_k, n_tok, s_k, s_tok = ne[dk], ne[dn], nb[dk], nb[dn]
    if k is not None and n_k != k:
        raise ValueError(f"{view.name}: {n_k} experts per token, expected {k}")
    if n_k == 0 or n_tok == 0:
        return np.zeros((n_tok, n_k), dtype=dtype.newbyteorder("="))
    if s_k < dtype.itemsize and n_k > 1:
        raise ValueError(f"{view.name}: stride nb[{dk}]={s_k} smaller than an element")
    raw = np.frombuffer(view.data, dtype=np.uint8)
    span = (n_k - 1) * s_k + (n_tok - 1) * s_tok + dtype.itemsize
    if span > raw.size:
        raise ValueError(f"{view.name}: strides reach byte {span}, the data holds {raw.size}")
    offsets = np.arange(n_tok)[:, None] * s_tok + np.arange(n_k)[None, :] * s_k  # [n_tok, k]
    gathered = raw[offsets[..., None] + np.arange(dtype.itemsize)]  # [n_tok, k, itemsize]
    return np.ascontiguousarray(gathered).view(dtype)[..., 0].astype(dtype.newbyteorder("="))


# --- pure part: assembling rows -------------------------------------------------


class MoeRoutingCollector:
    """Collects the callback's tensors and assembles one trace row per token.

    A step is one llama_decode call (possibly several micro-batches: chunks are
    appended per layer in order). `end_step(keep)` turns the step's tensors into rows
    (all layers must give the same number of rows) or drops them; `end_sequence()`
    starts a new sequence. `observe` never raises; problems go to `errors`.
    """

    MAX_ERRORS = 50

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.error_count = 0
        self.blocks: tuple[int, ...] | None = None
        self.top_k: int | None = None
        self._step_ids: dict[int, list[np.ndarray]] = {}
        self._step_w: dict[int, dict[str, list[np.ndarray]]] = {}
        self._rows_ids: list[np.ndarray] = []  # each [n, L, k]
        self._rows_w: list[np.ndarray | None] = []
        self._seq_lengths: list[int] = []
        self._open_rows = 0

    # called from the callback ------------------------------------------------
    @staticmethod
    def wants(name: str) -> bool:
        return parse_name(name) is not None

    def note_error(self, message: str) -> None:
        try:
            self.error_count += 1
            if len(self.errors) < self.MAX_ERRORS:
                self.errors.append(str(message))
        except BaseException:  # noqa: BLE001 - called from the callback: must not raise
            pass

    def observe(self, view: TensorView) -> None:
        try:
            parsed = parse_name(view.name)
            if parsed is None:
                return
            kind, layer = parsed
            if kind == TOPK_NAME:
                ids = matrix_from_view(view, k=self.top_k)
                if view.type != GGML_TYPE_I32:
                    raise ValueError(f"{view.name}: expert ids must be I32")
                self._step_ids.setdefault(layer, []).append(ids)
                if self.top_k is None:
                    self.top_k = int(ids.shape[1])
            else:
                if view.type != GGML_TYPE_F32:
                    raise ValueError(f"{view.name}: router weights must be F32")
                w = matrix_from_view(view, k=self.top_k)
                self._step_w.setdefault(layer, {}).setdefault(kind, []).append(w)
        except BaseException as exc:  # noqa: BLE001 - must never raise (see module doc)
            self.note_error(f"{getattr(view, 'name', '?')}: {exc}")

    # called between llama_decode calls ---------------------------------------
    def end_step(self, keep: bool = True) -> int:
        """Assemble the step's rows; returns how many were kept (0 when dropped)."""
        step_ids, step_w = self._step_ids, self._step_w
        self._step_ids, self._step_w = {}, {}
        if not keep or not step_ids:
            return 0
        blocks = tuple(sorted(step_ids))
        if self.blocks is None:
            self.blocks = blocks
        elif blocks != self.blocks:
            self.note_error(f"a step routed MoE blocks {blocks}, earlier steps {self.blocks}: step dropped")
            return 0
        per_layer = [np.concatenate(step_ids[b]) for b in blocks]
        counts = {a.shape[0] for a in per_layer}
        widths = {a.shape[1] for a in per_layer}
        if len(counts) != 1 or len(widths) != 1:
            rows = ", ".join(f"block {b}: {a.shape[0]}x{a.shape[1]}" for b, a in zip(blocks, per_layer))
            self.note_error(f"layers disagree on the step's rows ({rows}); were all tokens outputs? step dropped")
            return 0
        n = counts.pop()
        if n == 0:
            return 0
        ids = np.stack(per_layer, axis=1)  # [n, L, k]
        weights = None
        w_layers = []
        for b in blocks:
            kinds = step_w.get(b, {})
            kind = next((kd for kd in WEIGHT_NAMES if kd in kinds), None)
            if kind is None:
                break
            w = np.concatenate(kinds[kind])
            if w.shape != per_layer[0].shape:
                self.note_error(f"{kind}-{b}: weights shape {w.shape} does not match the ids' {per_layer[0].shape}")
                break
            w_layers.append(w)
        if len(w_layers) == len(blocks):
            weights = np.stack(w_layers, axis=1).astype(np.float32)
            order = np.argsort(-weights, axis=2, kind="stable")
            ids = np.take_along_axis(ids, order, axis=2)
            weights = np.take_along_axis(weights, order, axis=2)
        self._rows_ids.append(ids)
        self._rows_w.append(weights)
        self._open_rows += n
        return n

    def end_sequence(self) -> None:
        self.end_step(keep=False)
        if self._open_rows:
            self._seq_lengths.append(self._open_rows)
            self._open_rows = 0

    @property
    def n_rows(self) -> int:
        return sum(len(s) for s in self._rows_ids)

    def build(
        self,
        *,
        model: str,
        source: str,
        n_experts: int,
        domain: str = "",
        recorded_with: str = "",
        notes: Sequence[str] = (),
    ) -> RoutingTrace:
        self.end_sequence()
        if not self._rows_ids or self.blocks is None:
            detail = f"; callback errors: {self.errors[0]}" if self.errors else ""
            raise CopeInputError(f"no routing was recorded (no {TOPK_NAME}-<layer> tensor seen){detail}", path=source)
        ids = np.concatenate(self._rows_ids)
        all_notes = list(notes)
        weights = None
        if all(w is not None for w in self._rows_w):
            weights = np.concatenate(self._rows_w)  # type: ignore[arg-type]
        elif any(w is not None for w in self._rows_w):
            all_notes.append("router weights missing for some tokens: none kept")
        if self.error_count:
            all_notes.append(f"{self.error_count} callback error(s); first: {self.errors[0]}")
        starts = np.concatenate([[0], np.cumsum(self._seq_lengths)[:-1]]).astype(np.int64)
        meta = TraceMeta(
            model=model,
            source=source,
            origin="recorded",
            n_experts=int(n_experts),
            moe_blocks=self.blocks,
            domain=domain,
            recorded_with=recorded_with,
            notes=tuple(all_notes),
        )
        return RoutingTrace(
            expert_ids=ids.astype(np.int16), meta=meta, weights=weights, seq_starts=starts
        )


def make_eval_callback(
    collector: MoeRoutingCollector,
    name_of: Callable[[int], str],
    read_view: Callable[[int], TensorView],
) -> Callable[[int, bool, int], bool]:
    """The Python body of the ggml eval callback. It never raises.

    ask=True: do we want tensor t (a topk or router-weight tensor)? ask=False: read
    it into the collector and return True (False would abort llama.cpp's compute).
    """

    def callback(t, ask, user_data) -> bool:
        try:
            name = name_of(t)
            wanted = collector.wants(name)
            if ask:
                return bool(wanted)
            if wanted:
                collector.observe(read_view(t))
        except BaseException as exc:  # noqa: BLE001 - must never raise
            collector.note_error(f"eval callback: {type(exc).__name__}: {exc}")
            return not ask
        return True

    return callback


__all__ = [
    "GGML_TYPE_F32",
    "GGML_TYPE_I32",
    "MoeRoutingCollector",
    "TensorView",
    "make_eval_callback",
    "matrix_from_view",
    "parse_name",
]
