"""Tiny but complete GGUFs of three MoE architectures that real llama.cpp binaries
(llama-bench, llama-server) load and run: `qwen3moe`, `deepseek2` (DeepSeek-V2-Lite's
family) and `gpt-oss` (llama.cpp's LLM_ARCH_OPENAI_MOE).

Each file is a few hundred KB: hidden size 64, three or four blocks, 8 or 16 experts,
random weights drawn from a seed (matrices F16, norms, routers, biases and sinks F32, as
llama.cpp's converter writes them before quantisation; deepseek2's attn_k_b is F32, see
_deepseek2_tensors). Every metadata key and every tensor the architecture's loader
requires at the vendored llama.cpp commit (0c1e570) is written, and no tensor it would
not create (llama-model-loader.cpp refuses those: "wrong number of tensors").

Where each group of facts comes from (llama.cpp source):

* keys every architecture reads: src/llama-model.cpp, `llama_model_base::load_hparams`
  (context and embedding length, block count, expert count and used count, head counts,
  key/value length, rope dimension count, rope base and scaling);
* per-architecture keys and tensors: src/models/qwen3moe.cpp, src/models/deepseek2.cpp,
  src/models/openai-moe.cpp (`load_arch_hparams`, `load_arch_tensors`);
* key and tensor names: src/llama-arch.cpp (LLM_KV_NAMES, LLM_TENSOR_NAMES), spelt
  here through the `gguf` package's writer helpers;
* the vocabulary: src/llama-vocab.cpp, `llama_vocab::impl::load`.

The vocabulary is a real, minimal byte-level BPE ("gpt2", pre-tokenizer "gpt-2"): the 256
byte tokens, four merges and two control tokens. The tokenizer "none" that
tests/tiny_gguf.py uses is enough for llama-bench (token ids only) but not for
llama-server: it turns every generated token into text, and llama-vocab.cpp's
token_to_piece asserts `type != LLAMA_VOCAB_TYPE_NONE` (GGML_ASSERT: the server
aborts). Pass `tokenizer="none"` to get a bench-only file anyway.

`write_tiny(path, arch)` writes the file; `facts(arch)` says what is in it (blocks, which
are MoE, experts, top-k, tensor names) without reading it back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from bench.synthetic_gguf import GgufShape, tensor_shapes
from tests import tiny_gguf as tg

ARCHS = ("qwen3moe", "deepseek2", "gpt-oss")
CONTEXT = tg.CONTEXT  # 256: what the tests give llama-server with -c
HIDDEN = tg.HIDDEN  # 64

TensorSpec = tuple[str, tuple[int, ...], type]  # (name, numpy shape = ggml ne reversed, dtype)


# --- vocabulary ---------------------------------------------------------------------------


def _byte_chars() -> list[str]:
    """GPT-2's byte -> printable character table (byte-level BPE token texts), by byte value.

    llama-vocab.cpp maps these back to bytes (unicode_utf8_to_byte) when detokenising."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


MERGES = ("Ġ t", "h e", "i n", "Ġt he")  # "Ġ" is the byte-level space
BOS, EOS = "<|bos|>", "<|eos|>"


@dataclass(frozen=True)
class Vocab:
    tokens: tuple[str, ...]
    token_types: tuple[int, ...]  # gguf.TokenType values
    merges: tuple[str, ...]
    bos_id: int
    eos_id: int


def bpe_vocab() -> Vocab:
    """256 byte tokens, one token per merge result, then BOS and EOS (control tokens).

    Every string tokenises (any byte has a token), so llama-server can take text prompts
    too, and every token detokenises."""
    import gguf

    tokens = _byte_chars() + [m.replace(" ", "") for m in MERGES]
    types = [int(gguf.TokenType.NORMAL)] * len(tokens)
    tokens += [BOS, EOS]
    types += [int(gguf.TokenType.CONTROL)] * 2
    return Vocab(tuple(tokens), tuple(types), MERGES, bos_id=len(tokens) - 2, eos_id=len(tokens) - 1)


VOCAB = len(bpe_vocab().tokens)  # 262: token_embd and output rows


def _add_vocab(w, tokenizer: str) -> None:  # type: ignore[no-untyped-def]
    """The tokenizer keys (src/llama-vocab.cpp, llama_vocab::impl::load): "gpt2" needs the
    token list, types and merges; "none" only `<arch>.vocab_size` (written for all)."""
    if tokenizer == "none":
        w.add_tokenizer_model("none")
        return
    if tokenizer != "gpt2":
        raise ValueError(f"tokenizer {tokenizer!r}: 'gpt2' or 'none'")
    v = bpe_vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(list(v.tokens))
    w.add_token_types(list(v.token_types))
    w.add_token_merges(list(v.merges))
    w.add_bos_token_id(v.bos_id)
    w.add_eos_token_id(v.eos_id)
    w.add_add_bos_token(False)


# --- architectures ------------------------------------------------------------------------


@dataclass(frozen=True)
class Arch:
    """One architecture's tiny shape (the facts every arch has; MLA and gpt-oss head
    sizes are module constants below). _WRITERS maps it to its key and tensor writers."""

    name: str
    n_blocks: int
    n_experts: int
    top_k: int
    expert_ff: int
    n_head: int
    n_head_kv: int
    n_dense_lead: int = 0  # leading blocks with a dense FFN instead of experts
    n_shared_experts: int = 0

    @property
    def moe_blocks(self) -> tuple[int, ...]:
        return tuple(range(self.n_dense_lead, self.n_blocks))


QWEN3MOE = Arch("qwen3moe", n_blocks=tg.N_BLOCKS, n_experts=tg.N_EXPERTS, top_k=tg.TOP_K, expert_ff=tg.EXPERT_FF,
                n_head=tg.N_HEAD, n_head_kv=tg.N_HEAD_KV)

# DeepSeek-V2-Lite (config.json): hidden 2048, 27 layers, first_k_dense_replace 1, 16 heads,
# q_lora_rank null, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128,
# 64 routed experts (top 6), 2 shared, moe_intermediate_size 1408, intermediate_size 10944,
# routed_scaling_factor 1.0, norm_topk_prob false, softmax gating, YaRN rope (factor 40,
# mscale_all_dim 0.707). Scaled down, with the same structure:
DEEPSEEK2 = Arch("deepseek2", n_blocks=3, n_experts=16, top_k=4, expert_ff=32, n_head=4, n_head_kv=1,
                 n_dense_lead=1, n_shared_experts=2)
DS_KV_LORA = 32  # kv_lora_rank: the compressed KV latent (the MLA cache row is this + the rope part)
DS_QK_NOPE = 16  # qk_nope_head_dim
DS_QK_ROPE = 8  # qk_rope_head_dim
DS_V_HEAD = 16  # v_head_dim
DS_DENSE_FF = 96  # intermediate_size of the leading dense block

# gpt-oss-20b (config.json): hidden 2880, 24 layers, 64 heads, 8 KV heads, head_dim 64, 32 experts
# (top 4), intermediate_size 2880, sliding_window 128 on every other layer (starting with layer 0),
# attention sinks, biases on Q/K/V/O, the router and the experts, YaRN rope (factor 32), rms 1e-5.
GPT_OSS = Arch("gpt-oss", n_blocks=4, n_experts=16, top_k=4, expert_ff=32, n_head=4, n_head_kv=2)
GPT_OSS_HEAD_DIM = 16
GPT_OSS_WINDOW = 32
GPT_OSS_RMS_EPS = 1e-5

# YaRN in both: original context x factor = CONTEXT, so the scaling is self-consistent.
YARN_FACTOR = 4.0
YARN_ORIG_CTX = CONTEXT // 4

SPECS = {a.name: a for a in (QWEN3MOE, DEEPSEEK2, GPT_OSS)}

# common/common.h, LLM_FFN_EXPS_REGEX: what --cpu-moe and --n-cpu-moe override (std::regex_search).
EXPS_REGEX = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")


def _spec(arch: str) -> Arch:
    try:
        return SPECS[arch]
    except KeyError:
        raise ValueError(f"unknown arch {arch!r}; one of {', '.join(ARCHS)}") from None


def _add_common_keys(w, a: Arch, *, rms_eps: float) -> None:  # type: ignore[no-untyped-def]
    """Keys src/llama-model.cpp's load_hparams reads for every architecture (context and
    embedding length and block count are required; the rest default when absent). Key and
    value length are the callers': under MLA they mean the cache row, not a head."""
    import gguf

    w.add_name(f"COPE tiny {a.name}")
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(a.n_blocks)
    w.add_head_count(a.n_head)
    w.add_head_count_kv(a.n_head_kv)
    w.add_expert_count(a.n_experts)
    w.add_expert_used_count(a.top_k)
    w.add_expert_feed_forward_length(a.expert_ff)
    w.add_layer_norm_rms_eps(rms_eps)
    w.add_vocab_size(VOCAB)


def _qwen3moe_keys(w) -> None:  # type: ignore[no-untyped-def]
    """src/models/qwen3moe.cpp itself reads only the expert feed-forward length and the RMS
    epsilon; head size (key_length), rope dimensions and base are load_hparams' keys. The
    set is bench/synthetic_gguf.py's add_metadata, which is not called because it also
    writes the tokenizer "none" (a second tokenizer.ggml.model would overwrite it)."""
    a = QWEN3MOE
    _add_common_keys(w, a, rms_eps=tg.RMS_EPS)
    w.add_feed_forward_length(a.expert_ff * a.top_k)
    w.add_key_length(tg.HEAD_DIM)
    w.add_value_length(tg.HEAD_DIM)
    w.add_rope_dimension_count(tg.HEAD_DIM)
    w.add_rope_freq_base(tg.ROPE_BASE)


def _qwen3moe_tensors() -> Iterator[TensorSpec]:
    """bench/synthetic_gguf.py's qwen3moe tensor list, at tests/tiny_gguf.py's tiny shape."""
    a = QWEN3MOE
    yield from tensor_shapes(GgufShape(hidden=HIDDEN, n_blocks=a.n_blocks, n_experts=a.n_experts, top_k=a.top_k,
                                       expert_ff=a.expert_ff, n_head=a.n_head, n_head_kv=a.n_head_kv,
                                       head_dim=tg.HEAD_DIM, vocab=VOCAB))


def _deepseek2_keys(w) -> None:  # type: ignore[no-untyped-def]
    """src/models/deepseek2.cpp, load_arch_hparams, as conversion/deepseek.py writes them.

    Required there: the RMS epsilon, kv_lora_rank, the expert feed-forward length, the
    shared expert count, and q_lora_rank unless the block count is one of the "lite" ones
    (26, 27, or 48 with a 128256 vocabulary): V2-Lite's converted file has no q_lora_rank,
    a 3-block file must say 0 (then `attn_q` is loaded instead of `attn_q_a`/`attn_q_b`).
    With MLA the KV cache holds one "head" (head_count_kv 1) of key length
    kv_lora_rank + rope dim and value length kv_lora_rank; key_length_mla and
    value_length_mla are the per-head sizes after decompression (attn_k_b, attn_v_b)."""
    import gguf

    a = DEEPSEEK2
    _add_common_keys(w, a, rms_eps=1e-6)
    w.add_feed_forward_length(DS_DENSE_FF)
    w.add_leading_dense_block_count(a.n_dense_lead)
    w.add_q_lora_rank(0)
    w.add_kv_lora_rank(DS_KV_LORA)
    w.add_key_length(DS_KV_LORA + DS_QK_ROPE)
    w.add_value_length(DS_KV_LORA)
    w.add_key_length_mla(DS_QK_NOPE + DS_QK_ROPE)
    w.add_value_length_mla(DS_V_HEAD)
    w.add_rope_dimension_count(DS_QK_ROPE)
    w.add_rope_freq_base(10000.0)
    w.add_expert_shared_count(a.n_shared_experts)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(False)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SOFTMAX)  # the loader's default for V2 files
    _add_yarn(w)
    w.add_rope_scaling_yarn_log_mul(0.1 * 0.707)  # 0.1 * mscale_all_dim, as the converter writes it


def _add_yarn(w) -> None:  # type: ignore[no-untyped-def]
    """YaRN rope scaling (load_hparams: rope.scaling.type, .factor, .original_context_length)."""
    import gguf

    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(YARN_FACTOR)
    w.add_rope_scaling_orig_ctx_len(YARN_ORIG_CTX)


def _deepseek2_tensors() -> Iterator[TensorSpec]:
    """src/models/deepseek2.cpp, load_arch_tensors (MLA split form: attn_k_b and attn_v_b,
    not the legacy attn_kv_b). ggml ne {a, b, c} is numpy (c, b, a).

    attn_k_b is F32: with it F16, this commit's CPU build aborts in the graph scheduler
    (ggml-backend.cpp: GGML_ASSERT(*cur_backend_id != -1)) unless the CPU extra buffer
    types are off (llama-bench --repack 0), at every head size tried. llama-quantize never
    quantizes attn_k_b/attn_v_b (src/llama-quant.cpp), so they keep the converter's type."""
    a, h, f16, f32 = DEEPSEEK2, HIDDEN, np.float16, np.float32
    k_mla = DS_QK_NOPE + DS_QK_ROPE
    yield "token_embd.weight", (VOCAB, h), f16
    yield "output_norm.weight", (h,), f32
    yield "output.weight", (VOCAB, h), f16
    for b in range(a.n_blocks):
        p = f"blk.{b}."
        yield p + "attn_norm.weight", (h,), f32
        yield p + "attn_kv_a_norm.weight", (DS_KV_LORA,), f32
        yield p + "attn_q.weight", (a.n_head * k_mla, h), f16
        yield p + "attn_kv_a_mqa.weight", (DS_KV_LORA + DS_QK_ROPE, h), f16
        yield p + "attn_k_b.weight", (a.n_head, DS_KV_LORA, DS_QK_NOPE), f32  # F16 aborts: see docstring
        yield p + "attn_v_b.weight", (a.n_head, DS_V_HEAD, DS_KV_LORA), f16
        yield p + "attn_output.weight", (h, a.n_head * DS_V_HEAD), f16
        yield p + "ffn_norm.weight", (h,), f32
        if b < a.n_dense_lead:
            yield p + "ffn_gate.weight", (DS_DENSE_FF, h), f16
            yield p + "ffn_down.weight", (h, DS_DENSE_FF), f16
            yield p + "ffn_up.weight", (DS_DENSE_FF, h), f16
            continue
        e, f, shared = a.n_experts, a.expert_ff, a.expert_ff * a.n_shared_experts
        yield p + "ffn_gate_inp.weight", (e, h), f32
        yield p + "ffn_gate_exps.weight", (e, f, h), f16
        yield p + "ffn_up_exps.weight", (e, f, h), f16
        yield p + "ffn_down_exps.weight", (e, h, f), f16
        yield p + "ffn_gate_shexp.weight", (shared, h), f16
        yield p + "ffn_up_shexp.weight", (shared, h), f16
        yield p + "ffn_down_shexp.weight", (h, shared), f16


def _gpt_oss_keys(w) -> None:  # type: ignore[no-untyped-def]
    """src/models/openai-moe.cpp, load_arch_hparams (required: the RMS epsilon, the expert
    feed-forward length, the sliding window). The SWA pattern key is absent, as in the
    converted gpt-oss files: the loader's default 2 makes even blocks sliding-window and
    odd blocks full attention. The head size is key_length (the loader uses n_rot, which
    defaults to it, for the Q/K/V widths)."""
    a = GPT_OSS
    _add_common_keys(w, a, rms_eps=GPT_OSS_RMS_EPS)
    w.add_feed_forward_length(a.expert_ff)
    w.add_key_length(GPT_OSS_HEAD_DIM)
    w.add_value_length(GPT_OSS_HEAD_DIM)
    w.add_rope_freq_base(150000.0)
    w.add_sliding_window(GPT_OSS_WINDOW)
    _add_yarn(w)


def _gpt_oss_tensors() -> Iterator[TensorSpec]:
    """src/models/openai-moe.cpp, load_arch_tensors. The experts are F16 here: the loader
    takes any type ggml can multiply (the converter warns about non-MXFP4 experts, no more)."""
    a, h, f16, f32 = GPT_OSS, HIDDEN, np.float16, np.float32
    q, kv, e, f = a.n_head * GPT_OSS_HEAD_DIM, a.n_head_kv * GPT_OSS_HEAD_DIM, a.n_experts, a.expert_ff
    yield "token_embd.weight", (VOCAB, h), f16
    yield "output_norm.weight", (h,), f32
    yield "output.weight", (VOCAB, h), f16
    for b in range(a.n_blocks):
        p = f"blk.{b}."
        yield p + "attn_norm.weight", (h,), f32
        yield p + "post_attention_norm.weight", (h,), f32
        yield p + "attn_q.weight", (q, h), f16
        yield p + "attn_q.bias", (q,), f32
        yield p + "attn_k.weight", (kv, h), f16
        yield p + "attn_k.bias", (kv,), f32
        yield p + "attn_v.weight", (kv, h), f16
        yield p + "attn_v.bias", (kv,), f32
        yield p + "attn_output.weight", (h, q), f16
        yield p + "attn_output.bias", (h,), f32
        yield p + "attn_sinks.weight", (a.n_head,), f32
        yield p + "ffn_gate_inp.weight", (e, h), f32
        yield p + "ffn_gate_inp.bias", (e,), f32
        yield p + "ffn_gate_exps.weight", (e, f, h), f16
        yield p + "ffn_gate_exps.bias", (e, f), f32
        yield p + "ffn_up_exps.weight", (e, f, h), f16
        yield p + "ffn_up_exps.bias", (e, f), f32
        yield p + "ffn_down_exps.weight", (e, h, f), f16
        yield p + "ffn_down_exps.bias", (e, h), f32


_WRITERS = {
    "qwen3moe": (_qwen3moe_keys, _qwen3moe_tensors),
    "deepseek2": (_deepseek2_keys, _deepseek2_tensors),
    "gpt-oss": (_gpt_oss_keys, _gpt_oss_tensors),
}


# --- values and the file ------------------------------------------------------------------


def _values(name: str, shape: tuple[int, ...], dtype: type, rng: np.random.Generator) -> np.ndarray:
    """Random values that keep activations near unit scale, so F16 neither overflows nor
    flushes: norms near 1, matrices N(0, 1/fan_in), routers N(0, 0.3) (clear top-k gaps, as
    in tests/tiny_gguf.py), biases and sinks small."""
    if name.endswith("norm.weight"):
        data = 1.0 + 0.1 * rng.normal(size=shape)
    elif name.endswith(".bias") or name.endswith("attn_sinks.weight"):
        data = 0.02 * rng.normal(size=shape)
    elif name.endswith("ffn_gate_inp.weight"):
        data = rng.normal(0.0, 0.3, size=shape)
    else:
        data = rng.normal(0.0, 1.0 / np.sqrt(shape[-1]), size=shape)
    return np.ascontiguousarray(data, dtype=dtype)


def tensor_specs(arch: str) -> list[TensorSpec]:
    """(name, numpy shape, dtype) of every tensor of `arch`'s tiny file, in file order."""
    _spec(arch)
    return list(_WRITERS[arch][1]())


def write_tiny(path: str | Path, arch: str, *, seed: int = 0, tokenizer: str = "gpt2") -> Path:
    """Write `arch`'s tiny GGUF at `path` (same seed, same bytes) and return the path."""
    import gguf

    _spec(arch)
    add_keys, _ = _WRITERS[arch]
    path = Path(path)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch)
    add_keys(w)
    _add_vocab(w, tokenizer)
    for name, shape, dtype in tensor_specs(arch):
        w.add_tensor(name, _values(name, shape, dtype, rng))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def facts(arch: str) -> dict:
    """What `write_tiny(path, arch)` puts in the file, for tests that plan against it.

    Keys: arch, n_blocks, moe_blocks, dense_blocks, n_experts, top_k, n_shared_experts,
    hidden, vocab, context, tensor_names (file order), expert_tensor_names (the routed
    experts' tensors, what --cpu-moe moves: the names LLM_FFN_EXPS_REGEX finds, weights
    and, in gpt-oss, biases; shared experts are not among them)."""
    a = _spec(arch)
    names = [name for name, _, _ in tensor_specs(arch)]
    return {
        "arch": a.name,
        "n_blocks": a.n_blocks,
        "moe_blocks": list(a.moe_blocks),
        "dense_blocks": list(range(a.n_dense_lead)),
        "n_experts": a.n_experts,
        "top_k": a.top_k,
        "n_shared_experts": a.n_shared_experts,
        "hidden": HIDDEN,
        "vocab": VOCAB,
        "context": CONTEXT,
        "tensor_names": names,
        "expert_tensor_names": [n for n in names if EXPS_REGEX.search(n)],
    }
