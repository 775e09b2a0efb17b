"""Recording routing traces: transformers on tiny random MoE models, and the llama.cpp
callback's pure parts on fake strided tensors. Nothing here touches the network."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import threading

import numpy as np
import pytest

from engine.core.errors import CopeInputError
from engine.traces import load_trace, save_trace
from probes.llamacpp_callback import (
    GGML_TYPE_F32,
    GGML_TYPE_I32,
    MoeRoutingCollector,
    TensorView,
    make_eval_callback,
    matrix_from_view,
    parse_name,
)

N_EXPERTS, TOP_K, HIDDEN, LAYERS = 8, 2, 32, 3
PROMPTS = [[1, 2, 3, 4, 5], [6, 7, 8]]


# --- tiny transformers models ---------------------------------------------------------


def _tiny(family: str):
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    common = dict(
        vocab_size=64,
        hidden_size=HIDDEN,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
    )
    if family == "qwen3_moe":
        config = tf.Qwen3MoeConfig(
            **common, head_dim=8, moe_intermediate_size=16, num_experts=N_EXPERTS,
            num_experts_per_tok=TOP_K, norm_topk_prob=True,
        )
        cls = tf.Qwen3MoeForCausalLM
    elif family == "mixtral":
        config = tf.MixtralConfig(**common, num_local_experts=N_EXPERTS, num_experts_per_tok=TOP_K)
        cls = tf.MixtralForCausalLM
    elif family == "olmoe":
        config = tf.OlmoeConfig(**common, num_experts=N_EXPERTS, num_experts_per_tok=TOP_K, norm_topk_prob=False)
        cls = tf.OlmoeForCausalLM
    else:
        raise AssertionError(family)
    torch.manual_seed(0)
    model = cls(config).eval()
    with torch.no_grad():  # wide router margins: no near-ties between cached and full forward passes
        for layer in model.model.layers:
            layer.mlp.gate.weight.normal_(0.0, 1.0)
    return model


@pytest.fixture(scope="module")
def qwen_recording():
    from probes.record_hf import record_hf

    model = _tiny("qwen3_moe")
    return model, record_hf(model, PROMPTS, 4, model_name="tiny-qwen3-moe", domain="test")


def _full_pass(model, seq_tokens):
    import torch

    with torch.no_grad():
        return model(
            input_ids=torch.tensor([seq_tokens]), output_router_logits=True, output_hidden_states=True, use_cache=False
        )


def _check_against_recomputation(model, rec, *, normalised: bool):
    import torch

    trace = rec.trace
    blocks = trace.meta.moe_blocks
    for s, (prompt, generated) in enumerate(zip(rec.prompt_ids, rec.generated_ids)):
        out = _full_pass(model, prompt + generated)
        start = int(trace.seq_starts[s])
        for t in range(len(generated)):
            pos = len(prompt) + t  # generated token t sits here in the full sequence
            row = start + t
            for li, block in enumerate(blocks):
                probs = torch.softmax(out.router_logits[li][pos].float(), dim=-1)
                w, ids = torch.topk(probs, TOP_K)
                if normalised:
                    w = w / w.sum()
                assert trace.expert_ids[row, li].tolist() == ids.tolist(), (s, t, li)
                np.testing.assert_allclose(trace.weights[row, li], w.numpy(), rtol=1e-4, atol=1e-5)
                if li + 1 < len(blocks):  # predictor: next layer's norm + router on this layer's input
                    nxt = model.model.layers[blocks[li + 1]]
                    h = out.hidden_states[block][0, pos]
                    logits = nxt.post_attention_layernorm(h) @ nxt.mlp.gate.weight.T
                    expect = torch.topk(torch.softmax(logits, dim=-1), TOP_K).indices
                    assert trace.predicted_ids[row, li].tolist() == expect.tolist(), (s, t, li)


def test_qwen3_moe_recording_has_decode_rows_per_token_and_sequence(qwen_recording):
    _, rec = qwen_recording
    trace = rec.trace
    assert trace.expert_ids.shape == (2 * 4, LAYERS, TOP_K)
    assert trace.seq_starts.tolist() == [0, 4]
    assert [len(g) for g in rec.generated_ids] == [4, 4]
    assert trace.meta.origin == "recorded" and trace.meta.moe_blocks == (0, 1, 2)
    assert trace.meta.n_experts == N_EXPERTS and trace.meta.domain == "test"
    assert "transformers" in trace.meta.recorded_with and "greedy" in trace.meta.recorded_with
    assert "device cpu" in trace.meta.recorded_with and "float32" in trace.meta.recorded_with
    ids = trace.expert_ids
    assert ids.min() >= 0 and ids.max() < N_EXPERTS
    assert np.all(ids[:, :, 0] != ids[:, :, 1])
    np.testing.assert_allclose(trace.weights.sum(axis=2), 1.0, rtol=1e-5)
    assert np.all(np.diff(trace.weights, axis=2) <= 0)  # descending router weight
    assert np.all(trace.predicted_ids[:, -1] == -1)
    assert trace.predicted_ids[:, :-1].min() >= 0


def test_qwen3_moe_recorded_ids_equal_an_independent_full_forward(qwen_recording):
    model, rec = qwen_recording
    _check_against_recomputation(model, rec, normalised=True)


@pytest.mark.parametrize("family,normalised", [("mixtral", True), ("olmoe", False)])
def test_other_families_match_their_routers(family, normalised):
    from probes.record_hf import record_hf

    model = _tiny(family)
    rec = record_hf(model, PROMPTS, 3)
    assert rec.trace.expert_ids.shape == (6, LAYERS, TOP_K)
    _check_against_recomputation(model, rec, normalised=normalised)


def test_recorded_trace_round_trips_through_the_file_format(qwen_recording, tmp_path):
    _, rec = qwen_recording
    path = tmp_path / "rec.cope.npz"
    save_trace(rec.trace, path)
    back = load_trace(path)
    assert np.array_equal(back.expert_ids, rec.trace.expert_ids)
    assert np.array_equal(back.predicted_ids, rec.trace.predicted_ids)
    assert back.meta == rec.trace.meta


def test_cancel_stops_early_with_what_was_recorded():
    from probes.record_hf import RecordingCancelled, record_hf

    model = _tiny("qwen3_moe")
    cancel = threading.Event()
    seen = []

    def progress(done, total, label):
        seen.append((done, total, label))
        if done == 3:
            cancel.set()

    rec = record_hf(model, PROMPTS, 4, progress=progress, cancel=cancel)
    assert rec.cancelled and rec.trace.n_tokens == 3 and rec.trace.n_sequences == 1
    assert any("cancelled" in n for n in rec.trace.meta.notes)
    assert seen[0] == (0, 8, "prompt 1/2") and all(total == 8 for _, total, _ in seen)
    cancel2 = threading.Event()
    cancel2.set()
    with pytest.raises(RecordingCancelled):
        record_hf(model, PROMPTS, 4, cancel=cancel2)


def test_bad_requests_are_one_line_input_errors():
    from probes.record_hf import record_hf

    model = _tiny("qwen3_moe")
    with pytest.raises(CopeInputError, match="at least 1"):
        record_hf(model, PROMPTS, 0)
    with pytest.raises(CopeInputError, match="tokenizer"):
        record_hf(model, ["text needs a tokenizer"], 2)


def test_recording_modules_import_without_torch():
    code = (
        "import sys; import probes.record_hf, probes.record_llamacpp, cope_tui.commands.trace; "
        "print('torch' in sys.modules, 'transformers' in sys.modules, 'llama_cpp' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "False"]


# --- the CLI ------------------------------------------------------------------------------


def test_cli_records_a_domain_into_the_cache(tiny_model_folder, tmp_path, monkeypatch, capsys):
    from cope_tui.cli import EXIT_OK, main

    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    code = main(["trace", "record", "--model", str(tiny_model_folder), "--domain", "math", "--tokens", "2", "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == EXIT_OK, err
    written = list((tmp_path / "cache" / "traces").glob("*-math.cope.npz"))
    assert len(written) == 1 and out.strip() == str(written[0])
    trace = load_trace(written[0])
    assert trace.n_sequences >= 8 and trace.top_k == TOP_K and trace.meta.domain == "math"
    assert "recording" in err


def test_cli_prompt_file_and_out(tiny_model_folder, tmp_path, capsys):
    from cope_tui.cli import EXIT_OK, main

    prompts = tmp_path / "mine.txt"
    prompts.write_text("# two prompts in blocks\nwhat is\nthe x\n\na w1 w2\n", encoding="utf-8")
    out_file = tmp_path / "out.cope.npz"
    code = main(["trace", "record", "--model", str(tiny_model_folder), "--prompts", str(prompts), "--tokens", "3", "--out", str(out_file), "--device", "cpu"])
    assert code == EXIT_OK, capsys.readouterr().err
    trace = load_trace(out_file)
    assert trace.n_sequences == 2 and trace.n_tokens == 6


def test_parse_prompts_lines_blocks_and_comments():
    from engine.traces.prompts import domain_prompts, parse_prompts

    assert parse_prompts("# c\none\ntwo\n\n") == ["one", "two"]
    assert parse_prompts("a\nb\n\n# c\nc\n") == ["a\nb", "c"]
    for domain in ("chat", "code", "math"):
        assert 8 <= len(domain_prompts(domain)) <= 12


@pytest.mark.parametrize(
    "args,needle",
    [
        (["trace"], "subcommand"),
        (["trace", "record", "--model", "x", "--prompts", "/nonexistent/p.txt"], "/nonexistent/p.txt"),
        (["trace", "record", "--model", "x", "--tokens", "0"], "--tokens"),
        (["trace", "record", "--domain", "chat"], "--model"),
    ],
)
def test_cli_bad_input_is_one_line(args, needle, capsys):
    from cope_tui.cli import EXIT_INPUT, main

    assert main(args) == EXIT_INPUT
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_cli_gguf_without_llama_cpp_says_how_to_install(tmp_path, capsys):
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("llama-cpp-python is installed")
    from cope_tui.cli import EXIT_INPUT, main

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert main(["trace", "record", "--gguf", str(gguf), "--tokens", "2"]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert "pip install 'cope-tui[llamacpp]'" in err and len(err.strip().splitlines()) == 1


# --- llama.cpp callback: pure parts on fake strided tensors ---------------------------------------


def _topk_view(layer: int, ids: np.ndarray, n_expert: int = N_EXPERTS) -> TensorView:
    """ids [n_tokens, k] laid out as the first k columns of an argsort [n_tokens, n_expert]."""
    n_tok, k = ids.shape
    buf = (ctypes.c_int32 * (n_tok * n_expert))()
    for t in range(n_tok):
        row = list(ids[t]) + [e for e in range(n_expert) if e not in ids[t]]
        for j, e in enumerate(row):
            buf[t * n_expert + j] = int(e)
    row_bytes = 4 * n_expert
    return TensorView(f"ffn_moe_topk-{layer}", GGML_TYPE_I32, (k, n_tok, 1, 1), (4, row_bytes, row_bytes * n_tok, row_bytes * n_tok), memoryview(buf))


def _weights_view(layer: int, w: np.ndarray, kind: str = "ffn_moe_weights", pad: int = 0) -> TensorView:
    """w [n_tokens, k] as a [1, k, n_tokens] f32 tensor with `pad` spare floats after each token."""
    n_tok, k = w.shape
    stride = k + pad
    buf = (ctypes.c_float * (n_tok * stride))()
    for t in range(n_tok):
        for j in range(k):
            buf[t * stride + j] = float(w[t, j])
    return TensorView(f"{kind}-{layer}", GGML_TYPE_F32, (1, k, n_tok, 1), (4, 4, 4 * stride, 4 * stride * n_tok), memoryview(buf))


def test_matrix_from_strided_topk_and_weights():
    ids = np.array([[5, 1, 7], [0, 2, 3], [6, 4, 1], [3, 7, 0]])
    assert matrix_from_view(_topk_view(4, ids)).tolist() == ids.tolist()
    w = np.array([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1], [0.4, 0.35, 0.25], [0.7, 0.2, 0.1]], dtype=np.float32)
    np.testing.assert_array_equal(matrix_from_view(_weights_view(4, w, pad=5), k=3), w)
    assert parse_name("ffn_moe_topk-12") == ("ffn_moe_topk", 12)
    assert parse_name("ffn_moe_weights_norm-3") == ("ffn_moe_weights_norm", 3)
    assert parse_name("ffn_moe_weights_sum-3") is None and parse_name("ffn_moe_topk-x") is None


@pytest.mark.parametrize(
    "view",
    [
        TensorView("ffn_moe_topk-0", 1, (2, 1, 1, 1), (2, 4, 4, 4), b"\0" * 4),  # f16: not ids
        TensorView("ffn_moe_topk-0", GGML_TYPE_I32, (2, 3, 1, 1), (4, 32, 96, 96), b"\0" * 40),  # too short
        TensorView("ffn_moe_topk-0", GGML_TYPE_I32, (2, 3, 2, 1), (4, 8, 24, 48), b"\0" * 48),  # 3-D ids
        TensorView("ffn_moe_topk-0", GGML_TYPE_I32, (2, -3, 1, 1), (4, 8, 8, 8), b"\0" * 48),
        TensorView("ffn_moe_topk-0", GGML_TYPE_I32, (2, 3), (4, 8, 8), b"\0" * 48),
    ],
)
def test_malformed_tensors_raise_value_error_but_the_collector_never_raises(view):
    with pytest.raises(ValueError):
        matrix_from_view(view)
    collector = MoeRoutingCollector()
    collector.observe(view)
    assert collector.errors and collector.error_count == 1
    collector.observe(object())  # not even a view
    assert collector.error_count == 2


def _feed_step(callback, tensors: dict[int, TensorView]):
    for ptr in tensors:
        if callback(ptr, True, None):
            assert callback(ptr, False, None) is True


def test_collector_assembles_decode_rows_and_sequences_through_the_callback():
    collector = MoeRoutingCollector()
    registry: dict[int, TensorView] = {}
    callback = make_eval_callback(collector, lambda t: registry[t].name, lambda t: registry[t])
    rng = np.random.default_rng(0)
    expected_ids, expected_w = [], []

    def step(n_tok: int, keep: bool):
        registry.clear()
        ptr = 1000
        rows_ids, rows_w = [], []
        for layer in (1, 2):  # block 0 is dense: no tensors
            ids = np.stack([rng.choice(N_EXPERTS, 3, replace=False) for _ in range(n_tok)])
            w = rng.random((n_tok, 3)).astype(np.float32)
            registry[ptr] = _topk_view(layer, ids)
            registry[ptr + 1] = _weights_view(layer, w / 2, "ffn_moe_weights")
            registry[ptr + 2] = _weights_view(layer, w, "ffn_moe_weights_norm", pad=1)
            registry[ptr + 3] = TensorView(f"attn_norm-{layer}", GGML_TYPE_F32, (4, 1, 1, 1), (4, 16, 16, 16), b"")
            ptr += 10
            order = np.argsort(-w, axis=1, kind="stable")
            rows_ids.append(np.take_along_axis(ids, order, axis=1))
            rows_w.append(np.take_along_axis(w, order, axis=1))
        _feed_step(callback, registry)
        kept = collector.end_step(keep=keep)
        if keep:
            expected_ids.append(np.stack(rows_ids, axis=1))
            expected_w.append(np.stack(rows_w, axis=1))
        return kept

    assert step(5, keep=False) == 0  # the prompt
    assert step(1, keep=True) == 1
    assert step(1, keep=True) == 1
    collector.end_sequence()
    step(3, keep=False)
    assert step(1, keep=True) == 1
    trace = collector.build(model="tiny", source="t.gguf", n_experts=N_EXPERTS, domain="chat")
    assert collector.errors == []
    assert trace.expert_ids.shape == (3, 2, 3) and trace.meta.moe_blocks == (1, 2)
    assert trace.seq_starts.tolist() == [0, 2]
    assert np.array_equal(trace.expert_ids, np.concatenate(expected_ids))
    np.testing.assert_allclose(trace.weights, np.concatenate(expected_w))  # the _norm weights win


def test_step_where_the_last_layer_lost_rows_is_dropped_with_a_reason():
    collector = MoeRoutingCollector()
    collector.observe(_topk_view(0, np.array([[0, 1], [2, 3], [4, 5]])))
    collector.observe(_topk_view(1, np.array([[6, 7]])))  # not every token was an output
    assert collector.end_step(keep=True) == 0
    assert "were all tokens outputs" in collector.errors[0]
    collector.observe(_topk_view(0, np.array([[1, 0]])))
    collector.observe(_topk_view(1, np.array([[7, 6]])))
    assert collector.end_step(keep=True) == 1
    trace = collector.build(model="m", source="m.gguf", n_experts=8)
    assert trace.expert_ids.tolist() == [[[1, 0], [7, 6]]] and trace.weights is None
    assert any("callback error" in n for n in trace.meta.notes)


def test_callback_never_raises_even_when_reading_fails():
    collector = MoeRoutingCollector()

    def bad_name(t):
        raise RuntimeError("no name")

    def bad_read(t):
        raise MemoryError("boom")

    cb = make_eval_callback(collector, bad_name, bad_read)
    assert cb(1, True, None) is False and cb(1, False, None) is True
    cb2 = make_eval_callback(collector, lambda t: "ffn_moe_topk-0", bad_read)
    assert cb2(1, True, None) is True and cb2(1, False, None) is True
    # through a real C function pointer, as llama.cpp calls it
    proto = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_bool, ctypes.c_void_p)
    c_cb = proto(cb2)
    assert c_cb(None, False, None) is True
    assert collector.error_count == 4 and "MemoryError" in collector.errors[-1]
    with pytest.raises(CopeInputError, match="no routing was recorded"):
        collector.build(model="m", source="m.gguf", n_experts=8)


def test_deepseek_v2_leading_dense_block_is_not_a_trace_layer():
    tf = pytest.importorskip("transformers")
    import torch

    from probes.record_hf import record_hf

    config = tf.DeepseekV2Config(
        vocab_size=64, hidden_size=HIDDEN, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=LAYERS,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128, n_routed_experts=N_EXPERTS,
        num_experts_per_tok=TOP_K, n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=None,
        qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, topk_method="greedy", n_group=1, topk_group=1,
        eos_token_id=None, bos_token_id=None, pad_token_id=None,
    )
    torch.manual_seed(0)
    rec = record_hf(tf.DeepseekV2ForCausalLM(config).eval(), PROMPTS, 2)
    trace = rec.trace
    assert trace.meta.moe_blocks == (1, 2) and trace.expert_ids.shape == (4, 2, TOP_K)
    assert np.all(trace.predicted_ids[:, 1] == -1) and trace.predicted_ids[:, 0].min() >= 0
    assert np.all(np.diff(trace.weights, axis=2) <= 0)
