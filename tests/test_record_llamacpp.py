"""Recording through llama.cpp from a tiny qwen3moe GGUF written here, and issue 4's
"Done when": `cope advise --model <tiny gguf> --trace <trace recorded from it>` ranks
candidates with the file's exact expert sizes.

The GGUF (tests/tiny_gguf.py) is complete enough for llama.cpp to load and run: every
metadata key and tensor of arch qwen3moe, F32, tokenizer model "none", random weights
from a seed. The recorded expert ids are checked against a float64 numpy forward pass
of the same weights (tiny_gguf.reference_forward), which is itself checked against
transformers' Qwen3-MoE. Two models: one with all attention output projections zero
(then attention adds nothing, the router input of block 0 is exactly the RMS-normed
token embedding, and every block's input is computable without attention: the simple
trick that makes the check independent of rope and attention details) and one with
full random attention (checks the whole forward pass).

Tests that run llama.cpp are skipped when llama-cpp-python (the optional extra
cope-tui[llamacpp]) is not installed; the Done-when variant with a transformers-recorded
trace advised against the GGUF runs everywhere torch and transformers are installed.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from engine.traces import load_trace, save_trace  # noqa: E402
from tests import tiny_gguf as tg  # noqa: E402

try:
    import llama_cpp  # noqa: F401

    HAVE_LLAMA_CPP = True
except ImportError:
    HAVE_LLAMA_CPP = False

needs_llama_cpp = pytest.mark.skipif(
    not HAVE_LLAMA_CPP, reason="llama-cpp-python not installed (optional extra: pip install 'cope-tui[llamacpp]')"
)

PROMPTS = [[1, 2, 3, 4, 5], [6, 7, 8], [40, 41, 42, 43, 44, 45, 46]]
N_TOKENS = 4
# llama.cpp keeps its KV cache in F16 (its default, kept by the recorder as in real use), so
# with attention the hidden states differ from float64 by ~1e-3 relative: router-logit gaps
# below MARGIN count as ties either may break, and router weights agree to WEIGHT_ATOL.
MARGIN = 0.02
WEIGHT_ATOL = 3e-3


def table_expert_bytes(path) -> list[int]:
    """One expert's bytes per block, summed from the GGUF's tensor table (gguf.GGUFReader)."""
    reader = gguf.GGUFReader(str(path))
    per_block: dict[int, int] = {}
    n_experts = None
    for t in reader.tensors:
        parts = t.name.split(".")
        if parts[0] == "blk" and parts[2].endswith("_exps"):
            per_block[int(parts[1])] = per_block.get(int(parts[1]), 0) + int(t.n_bytes)
            n_experts = int(t.shape[-1])
    return [per_block[b] // n_experts for b in sorted(per_block)]


@pytest.fixture(scope="module")
def zero_attn(tmp_path_factory):
    weights = tg.random_weights(1, zero_attention=True)
    return weights, tg.write_gguf(tmp_path_factory.mktemp("gguf") / "tiny-zero-attn.gguf", weights)


@pytest.fixture(scope="module")
def full_attn(tmp_path_factory):
    weights = tg.random_weights(2)
    return weights, tg.write_gguf(tmp_path_factory.mktemp("gguf") / "tiny-qwen3moe.gguf", weights)


def expected_rows(weights, prompts, n_tokens, *, include_prompt=False):
    """(ids, weights, margins, seq_starts) the recorder should produce, from numpy alone."""
    ids, ws, ms, starts, start = [], [], [], [], 0
    for prompt in prompts:
        generated = tg.greedy_continuation(weights, prompt, n_tokens)
        ref = tg.reference_forward(weights, prompt + generated)
        rows = slice(0 if include_prompt else len(prompt), len(prompt) + n_tokens)
        ids.append(ref.ids[rows])
        ws.append(ref.weights[rows])
        ms.append(ref.margins[rows])
        starts.append(start)
        start += len(ids[-1])
    return np.concatenate(ids), np.concatenate(ws), np.concatenate(ms), starts


# --- the GGUF itself (no llama.cpp needed) --------------------------------------------------


def test_tiny_gguf_reads_as_a_qwen3moe_with_exact_sizes(full_attn):
    from cope_tui.sources.gguf_model import model_from_gguf

    weights, path = full_attn
    model = model_from_gguf(path)
    assert model.arch == "qwen3moe" and model.moe_blocks == (0, 1, 2)
    assert (model.n_routed_experts, model.top_k, model.hidden_size) == (tg.N_EXPERTS, tg.TOP_K, tg.HIDDEN)
    assert model.vocab_size == tg.VOCAB and model.expert_ffn_size == tg.EXPERT_FF
    sizes = table_expert_bytes(path)
    assert sizes == tg.expert_bytes_per_layer(weights) == [3 * tg.HIDDEN * tg.EXPERT_FF * 4] * 3
    assert list(model.exact_bytes.expert_bytes_per_layer) == sizes
    reader = gguf.GGUFReader(str(path))
    assert bytes(reader.fields["tokenizer.ggml.model"].parts[-1]).decode() == "none"
    assert int(reader.fields["qwen3moe.vocab_size"].parts[-1][0]) == tg.VOCAB


def test_zero_attention_makes_block_0s_router_input_the_normed_embedding(zero_attn):
    weights, _ = zero_attn
    tokens = [3, 9, 27, 50]
    ref = tg.reference_forward(weights, tokens)
    x = weights["token_embd.weight"][tokens].astype(np.float64)
    h = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + tg.RMS_EPS) * weights["blk.0.ffn_norm.weight"]
    logits = h @ weights["blk.0.ffn_gate_inp.weight"].T
    assert ref.ids[:, 0].tolist() == np.argsort(-logits, axis=1, kind="stable")[:, : tg.TOP_K].tolist()


def test_numpy_reference_matches_transformers():
    """The reference forward is the same model as transformers' Qwen3-MoE."""
    torch = pytest.importorskip("torch")
    model = tiny_transformers_qwen3moe()
    weights = tg.weights_from_transformers(model)
    tokens = [1, 5, 9, 33, 2, 7, 60, 12]
    ref = tg.reference_forward(weights, tokens)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([tokens]), output_router_logits=True)
    np.testing.assert_allclose(out.logits[0].numpy(), ref.logits, atol=1e-4)
    for li in range(tg.N_BLOCKS):
        probs = torch.softmax(out.router_logits[li].float(), dim=-1)
        assert torch.topk(probs, tg.TOP_K).indices.tolist() == ref.ids[:, li].tolist()


# --- recording through llama.cpp --------------------------------------------------------------


def _assert_matches_reference(trace, weights, prompts, n_tokens, *, include_prompt=False, margin=MARGIN,
                              weight_atol=WEIGHT_ATOL):
    ids, w, margins, starts = expected_rows(weights, prompts, n_tokens, include_prompt=include_prompt)
    assert trace.expert_ids.shape == ids.shape
    assert trace.seq_starts.tolist() == starts
    clear = margins > margin
    assert clear.mean() > 0.9  # the seeds give wide margins: nearly every row is checked
    got = trace.expert_ids.astype(int)
    assert np.array_equal(got[clear], ids[clear]), np.argwhere((got != ids).any(axis=2) & clear)[:5]
    # unclear rows still pick the same set when a near-tie swaps the order
    assert np.array_equal(np.sort(got, axis=2)[clear], np.sort(ids, axis=2)[clear])
    assert trace.weights is not None
    np.testing.assert_allclose(trace.weights[clear], w[clear], rtol=0, atol=weight_atol)


@needs_llama_cpp
def test_llamacpp_ids_equal_the_router_topk_zero_attention(zero_attn):
    from probes.record_llamacpp import record_with_llamacpp

    weights, path = zero_attn
    trace = record_with_llamacpp(str(path), PROMPTS, N_TOKENS, include_prompt=True, domain="test", n_threads=2)
    assert trace.meta.moe_blocks == (0, 1, 2) and trace.meta.n_experts == tg.N_EXPERTS and trace.top_k == tg.TOP_K
    assert not any("callback error" in n for n in trace.meta.notes), trace.meta.notes
    # no attention arithmetic (and so no F16 KV cache) in the way: float32 against float64
    _assert_matches_reference(trace, weights, PROMPTS, N_TOKENS, include_prompt=True, margin=1e-4,
                              weight_atol=1e-5)


@needs_llama_cpp
def test_llamacpp_ids_equal_a_full_numpy_forward(full_attn):
    from probes.record_llamacpp import record_with_llamacpp

    weights, path = full_attn
    seen = []
    trace = record_with_llamacpp(str(path), PROMPTS, N_TOKENS, progress=lambda d, t, lab: seen.append((d, t)),
                                 n_threads=2)
    assert trace.n_tokens == len(PROMPTS) * N_TOKENS and trace.n_sequences == len(PROMPTS)
    assert trace.meta.origin == "recorded" and "llama-cpp-python" in trace.meta.recorded_with
    assert not trace.meta.notes, trace.meta.notes
    assert seen[-1] == (len(PROMPTS) * N_TOKENS,) * 2
    np.testing.assert_allclose(trace.weights.sum(axis=2), 1.0, rtol=1e-5)
    assert np.all(np.diff(trace.weights, axis=2) <= 0)
    _assert_matches_reference(trace, weights, PROMPTS, N_TOKENS)


@needs_llama_cpp
def test_llamacpp_text_prompts_on_a_vocabulary_less_model_are_bytes(full_attn):
    from probes.llamacpp_glue import bytes_as_token_ids
    from probes.record_llamacpp import record_with_llamacpp

    weights, path = full_attn
    trace = record_with_llamacpp(str(path), ["hi there"], 2, n_threads=2)
    assert any("no tokenizer" in n for n in trace.meta.notes)
    prompt = bytes_as_token_ids("hi there", tg.VOCAB)
    ids, _, margins, _ = expected_rows(weights, [prompt], 2)
    clear = margins > MARGIN
    assert np.array_equal(trace.expert_ids.astype(int)[clear], ids[clear])


@needs_llama_cpp
def test_llamacpp_cancel_and_bad_token_ids(full_attn):
    import threading

    from engine.core.errors import CopeInputError
    from probes.record_llamacpp import record_with_llamacpp

    _, path = full_attn
    cancel = threading.Event()

    def progress(done, total, label):
        if done == 2:
            cancel.set()

    trace = record_with_llamacpp(str(path), PROMPTS, N_TOKENS, progress=progress, cancel=cancel, n_threads=2)
    assert trace.n_tokens == 2 and any("cancelled" in n for n in trace.meta.notes)
    with pytest.raises(CopeInputError, match="outside the vocabulary"):
        record_with_llamacpp(str(path), [[1, tg.VOCAB]], 2)
    with pytest.raises(CopeInputError, match="at least 1"):
        record_with_llamacpp(str(path), PROMPTS, 0)


@needs_llama_cpp
def test_llamacpp_and_transformers_record_the_same_routing(tmp_path):
    """The same weights through both recorders: the same expert ids for the same tokens."""
    pytest.importorskip("torch")
    from probes.record_hf import record_hf
    from probes.record_llamacpp import record_with_llamacpp

    model = tiny_transformers_qwen3moe()
    path = tg.write_gguf(tmp_path / "from-hf.gguf", tg.weights_from_transformers(model))
    hf = record_hf(model, PROMPTS, N_TOKENS, stop_at_eos=False).trace
    cpp = record_with_llamacpp(str(path), PROMPTS, N_TOKENS, n_threads=2)
    assert cpp.expert_ids.shape == hf.expert_ids.shape and cpp.seq_starts.tolist() == hf.seq_starts.tolist()
    _, _, margins, _ = expected_rows(tg.weights_from_transformers(model), PROMPTS, N_TOKENS)
    clear = margins > MARGIN
    assert np.array_equal(cpp.expert_ids[clear], hf.expert_ids[clear])
    np.testing.assert_allclose(cpp.weights[clear], hf.weights[clear], rtol=0, atol=WEIGHT_ATOL)


# --- issue 4's "Done when" -------------------------------------------------------------------------


def tiny_transformers_qwen3moe():
    """A transformers Qwen3-MoE of the tiny GGUF's shape, random weights, wide router margins."""
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    config = tf.Qwen3MoeConfig(
        vocab_size=tg.VOCAB, hidden_size=tg.HIDDEN, intermediate_size=tg.EXPERT_FF * tg.TOP_K,
        num_hidden_layers=tg.N_BLOCKS, num_attention_heads=tg.N_HEAD, num_key_value_heads=tg.N_HEAD_KV,
        head_dim=tg.HEAD_DIM, moe_intermediate_size=tg.EXPERT_FF, num_experts=tg.N_EXPERTS,
        num_experts_per_tok=tg.TOP_K, norm_topk_prob=True, max_position_embeddings=tg.CONTEXT,
        rms_norm_eps=tg.RMS_EPS, tie_word_embeddings=False, eos_token_id=None, bos_token_id=None, pad_token_id=None,
    )
    torch.manual_seed(0)
    model = tf.Qwen3MoeForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.mlp.gate.weight.normal_(0.0, 1.0)
    return model


def _advise_json(capsys, monkeypatch, tmp_path, gguf_path, trace_path, *extra: str) -> dict:
    from cope_tui.cli import main

    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    code = main(["advise", "--model", str(gguf_path), "--trace", str(trace_path), "--cpu", "desktop-ddr5",
                 "--gpu", "rtx-4090", "--fidelity", "analytic", "--context", "64", "--json", *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _check_advice(capsys, monkeypatch, tmp_path, gguf_path, trace, trace_path):
    """Advise twice: on the whole GPU (everything fits), then on a VRAM budget worked out
    from the first answer's memory arithmetic to leave room for about half the experts,
    so the ranking has to split experts between GPU and CPU by their exact size."""
    sizes = table_expert_bytes(gguf_path)
    expert = 3 * tg.HIDDEN * tg.EXPERT_FF * 4  # F32 gate, up and down of one expert
    assert sizes == [expert] * tg.N_BLOCKS
    whole = _advise_json(capsys, monkeypatch, tmp_path, gguf_path, trace_path)
    mem = whole["memory"]
    assert whole["inputs"]["model"]["expert_bytes"] == mem["expert_bytes"] == expert
    assert mem["all_gpu_fits"] and whole["recommendation"]["fastest_estimate"] == "all-gpu"

    fixed = mem["non_expert_bytes"] + mem["kv_cache_bytes"] + mem["runtime_reserve_bytes"]
    margin = mem["safety_margin_bytes"] / mem["vram_budget_bytes"]
    half = tg.N_EXPERTS * tg.N_BLOCKS // 2
    budget = (fixed + (half + 0.5) * expert) / (1 - margin)
    doc = _advise_json(capsys, monkeypatch, tmp_path, gguf_path, trace_path, "--vram-budget", f"{budget / 2**30:.12f}")
    model, mem = doc["inputs"]["model"], doc["memory"]
    assert model["arch"] == "qwen3moe" and model["moe_blocks"] == [0, 1, 2]
    assert model["expert_bytes"] == mem["expert_bytes"] == max(sizes)
    assert mem["slots"] == mem["expert_room_bytes"] // expert and abs(mem["slots"] - half) <= 1
    assert not mem["all_gpu_fits"]
    assert "exact" in doc["inputs"]["quantization"]["provenance"]
    assert any("exact from the GGUF" in n for n in doc["notes"])
    used = doc["inputs"]["trace"]
    assert used["origin"] == "recorded" and used["recorded_with"] == trace.meta.recorded_with
    assert used["tokens"] + doc["inputs"]["profile_trace"]["tokens"] == trace.n_tokens
    ranks = [c["rank"] for c in doc["candidates"]]
    assert len(ranks) >= 2 and ranks == list(range(1, len(ranks) + 1))
    best = doc["candidates"][0]
    assert doc["recommendation"]["fastest_estimate"] == best["id"] != "all-gpu" and 0 < best["hit_rate"] < 1


def test_done_when_transformers_trace_advised_with_the_tiny_gguf(tmp_path, capsys, monkeypatch):
    """Runs without llama.cpp: a trace recorded with transformers from a tiny Qwen3-MoE,
    advised with --model the GGUF holding the same weights."""
    pytest.importorskip("torch")
    from probes.record_hf import record_hf

    model = tiny_transformers_qwen3moe()
    gguf_path = tg.write_gguf(tmp_path / "tiny-qwen3moe.gguf", tg.weights_from_transformers(model))
    trace = record_hf(model, PROMPTS * 2, 6, model_name="tiny-qwen3moe", domain="test").trace
    trace_path = tmp_path / "tiny.cope.npz"
    save_trace(trace, trace_path)
    _check_advice(capsys, monkeypatch, tmp_path, gguf_path, trace, trace_path)


@needs_llama_cpp
def test_done_when_cli_records_from_the_gguf_and_advises_with_it(full_attn, tmp_path, capsys, monkeypatch):
    """`cope trace record --gguf` then `cope advise --model <that gguf> --trace <that trace>`."""
    from cope_tui.cli import EXIT_OK, main

    _, gguf_path = full_attn
    trace_path = tmp_path / "rec.cope.npz"
    code = main(["trace", "record", "--gguf", str(gguf_path), "--domain", "code", "--tokens", "3",
                 "--out", str(trace_path), "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    assert out.strip() == str(trace_path) and "through llama.cpp" in err
    trace = load_trace(trace_path)
    assert trace.meta.domain == "code" and trace.meta.model == "tiny-qwen3moe" and trace.top_k == tg.TOP_K
    assert trace.n_sequences >= 8 and trace.n_tokens == 3 * trace.n_sequences
    _check_advice(capsys, monkeypatch, tmp_path, gguf_path, trace, trace_path)


# --- the CLI's llama.cpp branch: bad requests ----------------------------------------------------


def test_cli_gguf_without_the_extra_says_how_to_install(full_attn, monkeypatch, capsys):
    import sys

    from cope_tui.cli import EXIT_INPUT, main

    _, gguf_path = full_attn
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp now raises ImportError
    assert main(["trace", "record", "--gguf", str(gguf_path), "--tokens", "2"]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert "pip install 'cope-tui[llamacpp]'" in err and len(err.strip().splitlines()) == 1


@needs_llama_cpp
def test_cli_gguf_bad_requests_are_one_line(full_attn, tmp_path, capsys):
    from cope_tui.cli import EXIT_INPUT, main
    from probes.llamacpp_glue import gpu_offload_supported

    _, gguf_path = full_attn
    cases = [
        (["--gguf", str(tmp_path / "missing.gguf")], "no such GGUF file"),
        (["--gguf", str(gguf_path), "--sample"], "--sample is not supported"),
    ]
    if not gpu_offload_supported():
        cases.append((["--gguf", str(gguf_path), "--device", "cuda"], "no GPU support"))
    for args, needle in cases:
        assert main(["trace", "record", *args, "--tokens", "2", "--out", str(tmp_path / "x.npz")]) == EXIT_INPUT
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, err
    not_gguf = tmp_path / "not.gguf"
    not_gguf.write_bytes(b"not a gguf at all")
    assert main(["trace", "record", "--gguf", str(not_gguf), "--tokens", "2"]) == EXIT_INPUT
    errors = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]  # after the narration
    assert len(errors) == 1 and "not.gguf: not a readable GGUF file" in errors[0], errors
