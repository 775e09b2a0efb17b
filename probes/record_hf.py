"""Record a RoutingTrace from a Hugging Face transformers MoE model on torch.

`record_with_transformers(model_or_path, prompts, tokens_per_prompt, ...)` decodes
`tokens_per_prompt` tokens after each prompt (one sequence per prompt) and records,
for every generated token and every MoE layer:

- the top-k routed expert ids and their router weights, read by a forward hook on
  the layer's router module (`generate` does not return them, so we run our own
  decode loop with a KV cache and hook the routers);
- the next-layer prediction: the experts that MoE layer l+1's router picks from the
  hidden state *entering* block l (DESIGN.md section 3). Choice: that hidden state
  goes through block l+1's `post_attention_layernorm` (the norm whose output the
  router of block l+1 really sees) and then through block l+1's router module
  itself, so the prediction uses the same top-k rule (softmax, grouping, bias) as
  the real routing. A block without that norm feeds the hidden state unnormed. The
  last trace layer has no successor: its predicted ids are -1.

Prefill: the prompt is evaluated in one forward pass whose routing is not recorded;
row t of the trace is the routing of generated token t when it is fed back (the
forward that produces token t+1's logits), so each generated token gives one row.

The routers, how their output is read and the hooks on them are in
`probes.hf_router_hooks`; this module loads the model, encodes the prompts and runs
the decode loop.

torch and transformers are imported inside the functions: importing this module
costs nothing. Loading by Hub repo id goes through `from_pretrained`, which works
only where the weights can be fetched (or are in the local Hugging Face cache); that
path is not exercised by the tests, which pass a model object built from a config.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.core.errors import CopeInputError
from engine.traces.trace import RoutingTrace, TraceMeta
from probes.hf_router_hooks import RouterHooks, config_n_experts, config_top_k, find_routers, norm_topk
import inspect

Progress = Callable[[int, int, str], None]


class RecordingCancelled(Exception):
    """Cancelled before any token was recorded (so there is no trace to return)."""


@dataclass
class HFRecording:
    """What one recording produced: the trace and the token ids of each sequence."""

    trace: RoutingTrace
    prompt_ids: list[list[int]]
    generated_ids: list[list[int]]  # generated_ids[s][t]: the token whose routing is row t of sequence s
    cancelled: bool = False
    notes: list[str] = field(default_factory=list)


def _cache_kwarg(model) -> str:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _new_cache(model):
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # transformers 4.x
        return DynamicCache()


def _load(model_or_path, device: str, dtype):
    """A model object is used as is (moved to `device`); a string is loaded with from_pretrained.

    from_pretrained needs the weights: a local folder, the Hugging Face cache, or the
    network. Not exercised by the tests (nothing can be downloaded there).
    """
    if not isinstance(model_or_path, str):
        return model_or_path.to(device), None
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    major = int(transformers.__version__.split(".")[0])
    kwargs = {"dtype" if major >= 5 else "torch_dtype": dtype if dtype is not None else "auto"}
    try:
        model = AutoModelForCausalLM.from_pretrained(model_or_path, **kwargs).to(device)
        tokenizer = AutoTokenizer.from_pretrained(model_or_path)
    except OSError as exc:
        raise CopeInputError(f"cannot load the model: {str(exc).splitlines()[0]}", path=model_or_path) from None
    return model, tokenizer


def _encode(prompt, tokenizer) -> list[int]:
    if not isinstance(prompt, str):
        ids = [int(t) for t in prompt]
        if not ids:
            raise CopeInputError("a prompt holds no token ids")
        return ids
    if tokenizer is None:
        raise CopeInputError("text prompts need a tokenizer; pass token ids or a tokenizer")
    if getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
        )
        ids = out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
    else:
        ids = tokenizer(prompt)["input_ids"]
    ids = [int(t) for t in ids]
    if not ids:
        raise CopeInputError(f"prompt {prompt[:40]!r} gives no tokens")
    return ids


def record_hf(
    model_or_path,
    prompts: Sequence[str | Sequence[int]],
    tokens_per_prompt: int,
    *,
    device: str = "cpu",
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    tokenizer=None,
    dtype=None,
    sample: bool = False,
    temperature: float = 0.8,
    seed: int = 0,
    stop_at_eos: bool = True,
    model_name: str | None = None,
    domain: str = "",
    source: str | None = None,
) -> HFRecording:
    """Record and return the trace plus the token ids; see `record_with_transformers`."""
    import torch

    if tokens_per_prompt < 1:
        raise CopeInputError(f"tokens per prompt must be at least 1, got {tokens_per_prompt}")
    if not prompts:
        raise CopeInputError("no prompts to record")
    model, loaded_tokenizer = _load(model_or_path, device, dtype)
    tokenizer = tokenizer if tokenizer is not None else loaded_tokenizer
    model.eval()
    config = model.config
    routers = find_routers(model)
    n_experts, top_k = config_n_experts(config), config_top_k(config)
    hooks = RouterHooks(routers, n_experts=n_experts, top_k=top_k, normalise=norm_topk(config))
    encoded = [_encode(p, tokenizer) for p in prompts]
    eos = getattr(config, "eos_token_id", None)
    eos_ids = set(eos if isinstance(eos, (list, tuple)) else ([] if eos is None else [eos]))
    cache_kw = _cache_kwarg(model)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    total = len(encoded) * tokens_per_prompt
    done = 0

    def say(label: str) -> None:
        if progress is not None:
            progress(done, total, label)

    def pick(logits) -> int:
        row = logits[0, -1].float().cpu()
        if not sample:
            return int(torch.argmax(row))
        probs = torch.softmax(row / max(temperature, 1e-6), dim=-1)
        return int(torch.multinomial(probs, 1, generator=generator))

    seq_ids: list[np.ndarray] = []
    seq_w: list[np.ndarray] = []
    seq_pred: list[np.ndarray] = []
    generated: list[list[int]] = []
    used_prompts: list[list[int]] = []
    has_weights = True
    cancelled = False
    notes: list[str] = []
    hooks.install()
    try:
        with torch.no_grad():
            for pi, prompt_ids in enumerate(encoded):
                if cancel is not None and cancel.is_set():
                    cancelled = True
                    break
                label = f"prompt {pi + 1}/{len(encoded)}"
                say(label)
                cache = _new_cache(model)
                hooks.recording = False
                inp = torch.tensor([prompt_ids], device=device)
                out = model(input_ids=inp, use_cache=True, **{cache_kw: cache})
                token = pick(out.logits)
                rows_ids, rows_w, rows_pred, toks = [], [], [], []
                for _ in range(tokens_per_prompt):
                    if cancel is not None and cancel.is_set():
                        cancelled = True
                        break
                    if stop_at_eos and token in eos_ids:
                        notes.append(f"sequence {len(seq_ids)} stopped at end-of-sequence after {len(toks)} tokens")
                        break
                    hooks.clear()
                    hooks.recording = True
                    out = model(input_ids=torch.tensor([[token]], device=device), use_cache=True, **{cache_kw: cache})
                    hooks.recording = False
                    missing = [li for li in range(len(routers)) if li not in hooks.ids]
                    if missing:
                        raise RuntimeError(f"router of MoE layer {missing[0]} did not run for a decode token")
                    rows_ids.append(np.stack([hooks.ids[li][-1] for li in range(len(routers))]))
                    ws = [hooks.weights[li] for li in range(len(routers))]
                    if any(w is None for w in ws):
                        has_weights = False
                    else:
                        rows_w.append(np.stack([w[-1] for w in ws]))
                    rows_pred.append(hooks.predict())
                    toks.append(token)
                    token = pick(out.logits)
                    done += 1
                    say(label)
                if rows_ids:
                    seq_ids.append(np.stack(rows_ids))
                    seq_pred.append(np.stack(rows_pred))
                    if has_weights:
                        seq_w.append(np.stack(rows_w))
                    generated.append(toks)
                    used_prompts.append(prompt_ids)
                if cancelled:
                    break
    finally:
        hooks.remove()
        hooks.clear()
    if not seq_ids:
        if cancelled:
            raise RecordingCancelled("cancelled before the first token was recorded")
        raise CopeInputError("no token was recorded (every prompt ended at once)")
    lengths = [s.shape[0] for s in seq_ids]
    seq_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    import transformers

    dtype_name = str(next(model.parameters()).dtype).replace("torch.", "")
    how = f"temperature {temperature} sampling, seed {seed}" if sample else "greedy"
    recorded_with = (
        f"transformers {transformers.__version__} on torch {torch.__version__}, device {device}, "
        f"dtype {dtype_name}, {how} decoding, {tokens_per_prompt} tokens per prompt; prompt (prefill) "
        "routing not recorded; predictor: next MoE layer's post-attention norm and router applied to "
        "the hidden state entering this layer"
    )
    if cancelled:
        notes.append(f"cancelled: {sum(lengths)} of {total} tokens recorded")
    name = model_name or (model_or_path if isinstance(model_or_path, str) else getattr(config, "_name_or_path", "") or getattr(config, "model_type", "model"))
    meta = TraceMeta(
        model=str(name),
        source=source or (model_or_path if isinstance(model_or_path, str) else f"transformers {type(model).__name__}"),
        origin="recorded",
        n_experts=n_experts,
        moe_blocks=tuple(r.block for r in routers),
        domain=domain,
        recorded_with=recorded_with,
        notes=tuple(notes),
    )
    trace = RoutingTrace(
        expert_ids=np.concatenate(seq_ids).astype(np.int16),
        meta=meta,
        weights=np.concatenate(seq_w).astype(np.float32) if has_weights and seq_w else None,
        predicted_ids=np.concatenate(seq_pred).astype(np.int16),
        seq_starts=seq_starts,
    )
    return HFRecording(trace, used_prompts, generated, cancelled=cancelled, notes=notes)


def record_with_transformers(model_or_path, prompts: Sequence[str | Sequence[int]], tokens_per_prompt: int,
                             **options) -> RoutingTrace:
    """Decode `tokens_per_prompt` tokens after each prompt and return their routing.

    model_or_path: a transformers CausalLM object, a local folder or a Hub repo id.
    prompts: strings (need a tokenizer: loaded with a path, else `tokenizer=`) or
    lists of token ids. One sequence per prompt. progress(done, total, label) is
    called after each token; when `cancel` is set the recording stops after the
    current token and returns what was recorded so far (RecordingCancelled when
    nothing was). Options, keyword only, as `record_hf` takes them: device ("cpu"),
    progress, cancel, tokenizer, dtype, sample, temperature, seed, stop_at_eos,
    model_name, domain, source.
    """
    return record_hf(model_or_path, prompts, tokens_per_prompt, **options).trace


__all__ = ["HFRecording", "RecordingCancelled", "record_hf", "record_with_transformers"]
