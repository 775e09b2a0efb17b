"""Record a RoutingTrace from a GGUF model through llama.cpp (`llama-cpp-python`).

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

Every prompt token is marked as an output (batch.logits[i] = 1): otherwise llama.cpp
drops the non-output rows before the last layer, whose top-k tensor would then hold
fewer rows than the other layers' and the prompt step could not be assembled.

Checked end to end (tests/test_record_llamacpp.py) on a tiny qwen3moe GGUF against a
numpy forward pass and against the transformers recorder: ids equal, router weights
equal to ~1e-3 (llama.cpp's default F16 KV cache, kept here as in real use; exact to
float32 when attention is zeroed). A GGUF whose tokenizer model is "none" would make
llama_tokenize abort the process, so text prompts are fed to such a model as UTF-8
bytes modulo its vocabulary (and the trace says so).

Layout: the tensor reading (`matrix_from_view`), the row assembly
(`MoeRoutingCollector`) and the never-raising callback (`make_eval_callback`) are
pure Python and numpy, tested with fake tensors. `record_with_llamacpp` is the thin
wiring to llama-cpp-python, imported only when called; it is an optional extra
(`pip install 'cope-tui[llamacpp]'`, which builds llama.cpp from source).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from engine.errors import CopeInputError
from engine.trace import RoutingTrace, TraceMeta

GGML_TYPE_F32 = 0
GGML_TYPE_I32 = 26

TOPK_NAME = "ffn_moe_topk"
# Router weight tensors, most final first: the first present in a step is recorded.
WEIGHT_NAMES = ("ffn_moe_weights_scaled", "ffn_moe_weights_norm", "ffn_moe_weights_softmax", "ffn_moe_weights")
WANTED = (TOPK_NAME, *WEIGHT_NAMES)

INSTALL_HINT = (
    "recording from a GGUF file needs llama-cpp-python: pip install 'cope-tui[llamacpp]' "
    "(it builds llama.cpp, a few minutes; for CUDA prefix CMAKE_ARGS=\"-DGGML_CUDA=on\")"
)

Progress = Callable[[int, int, str], None]


class LlamaCppMissing(CopeInputError):
    """llama-cpp-python is not installed."""


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


# --- thin wiring to llama-cpp-python -------------------------------------------


class _TensorHead(ctypes.Structure):
    """The stable head of struct ggml_tensor (type, buffer, ne, nb)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
    ]


def import_llama_cpp():
    try:
        import llama_cpp  # type: ignore[import-not-found]
    except ImportError:
        raise LlamaCppMissing(INSTALL_HINT) from None
    return llama_cpp


def _ggml_lib(llama_cpp):
    """A ctypes handle that resolves ggml_get_name, ggml_nbytes, ggml_backend_tensor_get."""
    import pathlib

    candidates = []
    try:
        from llama_cpp import _ggml  # type: ignore[import-not-found]

        candidates.append(_ggml.libggml)
    except Exception:  # noqa: BLE001 - older llama-cpp-python has no _ggml
        pass
    libdir = pathlib.Path(llama_cpp.__file__).parent / "lib"
    for name in ("libggml-base.so", "libggml-base.dylib", "ggml-base.dll", "libggml.so", "libggml.dylib"):
        if (libdir / name).exists():
            try:
                candidates.append(ctypes.CDLL(str(libdir / name)))
            except OSError:
                pass
    candidates.append(llama_cpp.llama_cpp._lib)
    for lib in candidates:
        try:
            get_name, nbytes, tensor_get = lib.ggml_get_name, lib.ggml_nbytes, lib.ggml_backend_tensor_get
        except AttributeError:
            continue
        get_name.argtypes, get_name.restype = [ctypes.c_void_p], ctypes.c_char_p
        nbytes.argtypes, nbytes.restype = [ctypes.c_void_p], ctypes.c_size_t
        tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
        tensor_get.restype = None
        return get_name, nbytes, tensor_get
    raise CopeInputError("this llama-cpp-python build does not expose ggml's tensor functions")


def _gguf_facts(path: str) -> dict:
    """Architecture, expert count and top-k from the GGUF header (the `gguf` package)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except Exception as exc:  # noqa: BLE001 - any parse failure is a bad file
        raise CopeInputError(f"not a readable GGUF file: {exc}", path=path) from None

    def value(key: str):
        field = reader.fields.get(key)
        if field is None or not field.data:
            return None
        part = field.parts[field.data[0]]
        if field.types and field.types[0].name == "STRING":
            return bytes(part).decode("utf-8", "replace")
        return int(part[0])

    arch = value("general.architecture")
    if not arch:
        raise CopeInputError("GGUF header has no general.architecture", path=path)
    n_experts = value(f"{arch}.expert_count")
    if not n_experts:
        raise CopeInputError(f"not an MoE model ({arch} has no expert_count)", path=path)
    return {
        "arch": arch,
        "n_experts": n_experts,
        "top_k": value(f"{arch}.expert_used_count"),
        "name": value("general.name") or "",
    }


def bytes_as_token_ids(text: str, n_vocab: int) -> list[int]:
    """A vocabulary-less model's stand-in tokenizer: the text's UTF-8 bytes modulo n_vocab.

    Only for GGUF files whose tokenizer model is "none" (test models): llama_tokenize
    aborts the process on them, and they have no tokens to map text to anyway.
    """
    if n_vocab < 1:
        raise CopeInputError("the model has an empty vocabulary")
    return [b % n_vocab for b in text.encode("utf-8")]


def _quiet(llama_cpp) -> None:
    """Keep llama.cpp's load chatter off stderr (errors still show)."""
    try:
        from llama_cpp import _logger  # type: ignore[import-not-found]

        _logger.set_verbose(False)
    except Exception:  # noqa: BLE001 - cosmetic only
        pass


def gpu_offload_supported(llama_cpp=None) -> bool:
    llama_cpp = llama_cpp or import_llama_cpp()
    fn = getattr(llama_cpp, "llama_supports_gpu_offload", None)
    try:
        return bool(fn()) if fn is not None else False
    except Exception:  # noqa: BLE001
        return False


def record_with_llamacpp(
    gguf_path: str,
    prompts: Sequence[str | Sequence[int]],
    tokens_per_prompt: int,
    *,
    n_gpu_layers: int = 0,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    include_prompt: bool = False,
    model_name: str | None = None,
    domain: str = "",
    n_threads: int | None = None,
) -> RoutingTrace:
    """Greedy-decode `tokens_per_prompt` tokens after each prompt with llama.cpp and
    return the routing of the generated tokens (and of the prompt tokens too, as
    teacher forcing, when include_prompt). Prompts are text, or lists of token ids.

    Row t of a sequence is the routing of the forward pass that takes generated token t
    as input (at position len(prompt) + t), as with the transformers recorder; the prompt
    pass only yields the first token unless include_prompt. Stops early, keeping what
    was recorded, when `cancel` is set or an end-of-generation token comes. Needs the
    optional extra: pip install 'cope-tui[llamacpp]'.
    """
    llama_cpp = import_llama_cpp()
    if tokens_per_prompt < 1:
        raise CopeInputError(f"tokens per prompt must be at least 1, got {tokens_per_prompt}")
    if not prompts:
        raise CopeInputError("no prompt to record from")
    facts = _gguf_facts(gguf_path)
    get_name, nbytes, tensor_get = _ggml_lib(llama_cpp)
    collector = MoeRoutingCollector()

    def name_of(t) -> str:
        raw = get_name(t)
        return raw.decode("utf-8", "replace") if raw else ""

    def read_view(t) -> TensorView:
        head = _TensorHead.from_address(t)
        size = int(nbytes(t))
        buf = (ctypes.c_uint8 * size)()
        if size:
            tensor_get(t, buf, 0, size)  # works for host and device buffers alike
        return TensorView(name_of(t), int(head.type), tuple(head.ne), tuple(head.nb), bytes(buf))

    body = make_eval_callback(collector, name_of, read_view)
    # Keep this reference alive until the context is freed: llama.cpp holds only the C pointer.
    c_callback = llama_cpp.ggml_backend_sched_eval_callback(body)

    _quiet(llama_cpp)
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = n_gpu_layers
    load = getattr(llama_cpp, "llama_model_load_from_file", None) or llama_cpp.llama_load_model_from_file
    model = load(gguf_path.encode("utf-8"), mparams)
    if not model:
        raise CopeInputError("llama.cpp could not load the model (run with a llama.cpp build that knows "
                             f"architecture {facts['arch']!r})", path=gguf_path)
    free_model = getattr(llama_cpp, "llama_model_free", None) or llama_cpp.llama_free_model
    ctx = batch = None
    notes: list[str] = []
    try:
        vocab = llama_cpp.llama_model_get_vocab(model) if hasattr(llama_cpp, "llama_model_get_vocab") else model
        n_vocab = int(
            llama_cpp.llama_vocab_n_tokens(vocab) if hasattr(llama_cpp, "llama_vocab_n_tokens")
            else llama_cpp.llama_n_vocab(model)
        )
        no_vocab = (
            hasattr(llama_cpp, "llama_vocab_type")
            and int(llama_cpp.llama_vocab_type(vocab)) == int(getattr(llama_cpp, "LLAMA_VOCAB_TYPE_NONE", 0))
        )

        def tokenize(p) -> list[int]:
            if not isinstance(p, str):
                ids = [int(t) for t in p]
            elif no_vocab:
                ids = bytes_as_token_ids(p, n_vocab)
            else:
                text = p.encode("utf-8")
                size = len(text) + 16
                for _ in range(2):
                    buf = (llama_cpp.llama_token * size)()
                    n = llama_cpp.llama_tokenize(vocab, text, len(text), buf, size, True, True)
                    if n >= 0:
                        break
                    size = -n  # the buffer was too small: n is minus the count needed
                if n < 0:
                    raise CopeInputError(f"llama.cpp could not tokenize prompt {p[:40]!r}", path=gguf_path)
                ids = list(buf[:n])
            if not ids:
                raise CopeInputError(f"prompt {str(p)[:40]!r} has no tokens", path=gguf_path)
            bad = [t for t in ids if not 0 <= t < n_vocab]
            if bad:
                raise CopeInputError(f"token id {bad[0]} is outside the vocabulary (0..{n_vocab - 1})", path=gguf_path)
            return ids

        encoded = [tokenize(p) for p in prompts]
        if no_vocab and any(isinstance(p, str) for p in prompts):
            notes.append("the GGUF has no tokenizer (model \"none\"): text prompts were fed as UTF-8 bytes "
                         f"modulo its {n_vocab} tokens")
        longest = max(len(e) for e in encoded) + tokens_per_prompt + 8
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = longest
        cparams.n_batch = longest
        cparams.n_ubatch = longest  # one micro-batch per decode: every layer sees every row at once
        cparams.cb_eval = c_callback
        cparams.cb_eval_user_data = None
        if n_threads:
            cparams.n_threads = cparams.n_threads_batch = n_threads
        init = getattr(llama_cpp, "llama_init_from_model", None) or llama_cpp.llama_new_context_with_model
        ctx = init(model, cparams)
        if not ctx:
            raise CopeInputError("llama.cpp could not create a context", path=gguf_path)
        is_eog = (
            (lambda tok: bool(llama_cpp.llama_vocab_is_eog(vocab, tok)))
            if hasattr(llama_cpp, "llama_vocab_is_eog")
            else (lambda tok: bool(llama_cpp.llama_token_is_eog(model, tok)))
        )
        batch = llama_cpp.llama_batch_init(longest, 0, 1)
        total, done = len(encoded) * tokens_per_prompt, 0

        def decode(tokens: list[int], pos0: int) -> None:
            batch.n_tokens = len(tokens)
            for i, tok in enumerate(tokens):
                batch.token[i] = tok
                batch.pos[i] = pos0 + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 1  # every token an output: the last layer keeps all rows
            rc = llama_cpp.llama_decode(ctx, batch)
            if rc != 0:
                raise CopeInputError(f"llama_decode returned {rc}", path=gguf_path)

        def argmax(i: int) -> int:
            ptr = llama_cpp.llama_get_logits_ith(ctx, i)
            if not ptr:
                raise CopeInputError(f"llama.cpp returned no logits for row {i}", path=gguf_path)
            return int(np.argmax(np.ctypeslib.as_array(ptr, shape=(n_vocab,))))

        for pi, tokens in enumerate(encoded):
            if cancel is not None and cancel.is_set():
                break
            label = f"prompt {pi + 1}/{len(encoded)}"
            if progress is not None:
                progress(done, total, label)
            if hasattr(llama_cpp, "llama_get_memory"):
                llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
            else:
                llama_cpp.llama_kv_cache_clear(ctx)
            decode(tokens, 0)
            collector.end_step(keep=include_prompt)
            token, pos = argmax(len(tokens) - 1), len(tokens)
            for _ in range(tokens_per_prompt):
                if (cancel is not None and cancel.is_set()) or is_eog(token):
                    break
                decode([token], pos)
                collector.end_step(keep=True)
                token, pos = argmax(0), pos + 1
                done += 1
                if progress is not None:
                    progress(done, total, label)
            collector.end_sequence()
    finally:
        if batch is not None:
            llama_cpp.llama_batch_free(batch)
        if ctx:
            llama_cpp.llama_free(ctx)
        free_model(model)
        del c_callback
    if cancel is not None and cancel.is_set():
        notes.append("recording cancelled: the trace holds what was recorded before")
    version = getattr(llama_cpp, "__version__", "?")
    recorded_with = (
        f"llama-cpp-python {version}, {n_gpu_layers} layers on GPU, greedy decoding, {tokens_per_prompt} tokens "
        f"per prompt; {'prompt tokens included (teacher forcing)' if include_prompt else 'prompt routing not recorded'}"
    )
    return collector.build(
        model=model_name or facts["name"] or facts["arch"],
        source=gguf_path,
        n_experts=facts["n_experts"],
        domain=domain,
        recorded_with=recorded_with,
        notes=notes,
    )


__all__ = [
    "GGML_TYPE_F32",
    "GGML_TYPE_I32",
    "INSTALL_HINT",
    "LlamaCppMissing",
    "MoeRoutingCollector",
    "TensorView",
    "bytes_as_token_ids",
    "gpu_offload_supported",
    "import_llama_cpp",
    "make_eval_callback",
    "matrix_from_view",
    "parse_name",
    "record_with_llamacpp",
]
