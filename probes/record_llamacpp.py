"""Record a RoutingTrace from a GGUF model through llama.cpp (`llama-cpp-python`).

How: llama.cpp calls an evaluation callback for each node of its compute graph; the
one installed here (`probes.llamacpp_callback`, which describes the tensors it reads
and why it never raises) keeps each MoE layer's routed expert ids and router weights
and assembles one trace row per token. `record_with_llamacpp` loads the model,
tokenizes the prompts, decodes greedily and builds the RoutingTrace from those rows.

Every prompt token is marked as an output (batch.logits[i] = 1): otherwise llama.cpp
drops the non-output rows before the last layer, whose top-k tensor would then hold
fewer rows than the other layers' and the prompt step could not be assembled.

Checked end to end (tests/test_record_llamacpp.py) on a tiny qwen3moe GGUF against a
numpy forward pass and against the transformers recorder: ids equal, router weights
equal to ~1e-3 (llama.cpp's default F16 KV cache, kept here as in real use; exact to
float32 when attention is zeroed). A GGUF whose tokenizer model is "none" would make
llama_tokenize abort the process, so text prompts are fed to such a model as UTF-8
bytes modulo its vocabulary (and the trace says so).

Layout: the tensor reading, the row assembly and the never-raising callback
(`probes.llamacpp_callback`) are pure Python and numpy, tested with fake tensors. The
ctypes and GGUF glue (`probes.llamacpp_glue`) and the decode loop here are the thin
wiring to llama-cpp-python, imported only when called; it is an optional extra
(`pip install 'cope-tui[llamacpp]'`, which builds llama.cpp from source).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence

import numpy as np

from engine.core.errors import CopeInputError
from engine.traces.trace import RoutingTrace
from probes.llamacpp_callback import MoeRoutingCollector, TensorView, make_eval_callback
from probes.llamacpp_glue import TensorHead, bytes_as_token_ids, ggml_lib, gguf_facts, import_llama_cpp, quiet

Progress = Callable[[int, int, str], None]


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
    facts = gguf_facts(gguf_path)
    get_name, nbytes, tensor_get = ggml_lib(llama_cpp)
    collector = MoeRoutingCollector()

    def name_of(t) -> str:
        raw = get_name(t)
        return raw.decode("utf-8", "replace") if raw else ""

    def read_view(t) -> TensorView:
        head = TensorHead.from_address(t)
        size = int(nbytes(t))
        buf = (ctypes.c_uint8 * size)()
        if size:
            tensor_get(t, buf, 0, size)  # works for host and device buffers alike
        return TensorView(name_of(t), int(head.type), tuple(head.ne), tuple(head.nb), bytes(buf))

    body = make_eval_callback(collector, name_of, read_view)
    # Keep this reference alive until the context is freed: llama.cpp holds only the C pointer.
    c_callback = llama_cpp.ggml_backend_sched_eval_callback(body)

    quiet(llama_cpp)
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


__all__ = ["record_with_llamacpp"]
