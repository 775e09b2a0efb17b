"""bench/llamacpp_cpu.py's pieces that run without llama.cpp: the synthetic GGUF writer
(names, shapes, types and metadata as llama.cpp's qwen3moe loader expects them, read back
with the `gguf` package's reader and with COPE's own GGUF reader) and reading a real
llama-bench `-o json` output."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.synthetic_gguf import GgufShape, catalog_shape, tensor_shapes, write_random_gguf  # noqa: E402
from engine.llamacpp.llama_bench_json import decode_tests, parse_bench_output  # noqa: E402

SMALL = GgufShape(hidden=64, n_blocks=2, n_experts=4, top_k=2, expert_ff=32, n_head=4, n_head_kv=2, head_dim=16,
                  vocab=48)
GOLDEN = ROOT / "tests" / "golden" / "llama_bench" / "cpu_tg64_t1_t2.json"


def test_catalog_shape_is_qwen3_30b_a3b_with_fewer_blocks():
    s = catalog_shape("qwen3-30b-a3b", 6)
    assert s == GgufShape(hidden=2048, n_blocks=6, n_experts=128, top_k=8, expert_ff=768, n_head=32, n_head_kv=4,
                          head_dim=128, vocab=151936)


def test_the_writer_gives_llama_cpps_names_shapes_and_metadata(tmp_path):
    gguf = pytest.importorskip("gguf")
    path = write_random_gguf(tmp_path / "small.gguf", SMALL)
    reader = gguf.GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    expected = list(tensor_shapes(SMALL))
    assert [t.name for t in reader.tensors] == [name for name, _, _ in expected]
    per_block = {n.split(".", 2)[2] for n in tensors if n.startswith("blk.1.")}
    assert per_block == {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                         "attn_output.weight", "attn_q_norm.weight", "attn_k_norm.weight", "ffn_norm.weight",
                         "ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}
    # ggml's ne is numpy's shape reversed: ffn_gate_exps is ne [hidden, expert_ff, experts]
    assert tuple(int(d) for d in tensors["blk.0.ffn_gate_exps.weight"].shape) == (64, 32, 4)
    assert tuple(int(d) for d in tensors["blk.0.ffn_down_exps.weight"].shape) == (32, 64, 4)
    assert tuple(int(d) for d in tensors["blk.0.attn_q.weight"].shape) == (64, 64)
    assert tuple(int(d) for d in tensors["blk.0.attn_k.weight"].shape) == (64, 32)
    assert tuple(int(d) for d in tensors["token_embd.weight"].shape) == (64, 48)
    types = {n: gguf.GGMLQuantizationType(t.tensor_type).name for n, t in tensors.items()}
    assert types["blk.0.ffn_up_exps.weight"] == "F16" and types["output.weight"] == "F16"
    assert types["blk.0.ffn_gate_inp.weight"] == "F32" and types["blk.0.attn_q_norm.weight"] == "F32"

    def field(key: str):  # type: ignore[no-untyped-def]
        return reader.fields[key].contents()

    assert field("general.architecture") == "qwen3moe"
    assert (field("qwen3moe.block_count"), field("qwen3moe.expert_count"), field("qwen3moe.expert_used_count"),
            field("qwen3moe.expert_feed_forward_length"), field("qwen3moe.attention.head_count"),
            field("qwen3moe.attention.head_count_kv"), field("qwen3moe.attention.key_length"),
            field("qwen3moe.vocab_size")) == (2, 4, 2, 32, 4, 2, 16, 48)
    assert field("tokenizer.ggml.model") == "none"
    norms = tensors["blk.0.attn_norm.weight"].data
    assert 0.5 < float(np.mean(norms)) < 1.5  # norms near one, not zero


def test_cope_reads_the_written_file_as_the_model_it_is(tmp_path):
    from cope_tui.sources.gguf_model import model_from_gguf

    path = write_random_gguf(tmp_path / "small.gguf", SMALL)
    m = model_from_gguf(path)
    assert (m.n_blocks, m.n_routed_experts, m.top_k, m.expert_ffn_size, m.hidden_size) == (2, 4, 2, 32, 64)
    assert m.exact_bytes is not None
    # one expert: gate and up [32 x 64] and down [64 x 32], F16
    assert m.exact_bytes.expert_bytes_per_layer[0] == 3 * 32 * 64 * 2


def test_a_real_llama_bench_json_is_read():
    if not GOLDEN.exists():
        pytest.skip(f"no recorded llama-bench output at {GOLDEN}")
    tests = decode_tests(parse_bench_output(GOLDEN.read_text()))
    assert [t.n_threads for t in tests] == [1, 2]
    for t in tests:
        assert t.n_gen == 64 and t.n_prompt == 0 and t.n_gpu_layers == 0 and t.avg_ts > 0
        assert t.backends == "CPU" and not t.has_gpu_backend and t.build_commit


def test_a_configuration_is_the_median_of_its_rounds_and_its_spread_counts_every_measurement():
    from dataclasses import replace

    from bench.llamacpp_cpu import Row, verdicts

    test = decode_tests(parse_bench_output(GOLDEN.read_text()))[0]
    rounds = tuple(replace(test, avg_ts=ts) for ts in (20.0, 25.0, 22.0))
    noisy = Row("Q4_K_M", 1, rounds, {"calibrate": 24.0}, {"calibrated": 26.0, "analytic": 23.1})
    steady = Row("Q8_0", 1, tuple(replace(test, avg_ts=ts) for ts in (17.0, 17.1, 17.2)), {},
                 {"calibrated": 17.1, "analytic": 16.0})
    assert noisy.measured_ts == 22.0
    assert noisy.spread == pytest.approx((25.0 - 20.0) / 22.0)
    assert noisy.error("calibrated") == pytest.approx(4.0 / 22.0)
    lines = verdicts([noisy, steady], ["calibrated", "analytic"])
    assert lines[0].startswith("largest spread: 22.7% (Q4_K_M, 1 thread")
    assert lines[1] == "calibrated: worst error 18.2% (Q4_K_M, 1 thread) (target 5%: not met; below the largest spread)"
    assert lines[2] == "analytic: worst error 6.4% (Q8_0, 1 thread) (target 25%: met)"


def test_ratios_are_measured_within_a_round_and_compared_with_the_predicted_ones():
    """A machine that drifts by 20% between rounds still gives a steady ratio between two
    configurations measured in the same round; only pairs differing in one setting count."""
    from dataclasses import replace

    from bench.llamacpp_cpu import Row, pair_ratios, ratio_lines

    test = decode_tests(parse_bench_output(GOLDEN.read_text()))[0]
    drift = (1.0, 0.8, 1.2)
    one = Row("Q8_0", 1, tuple(replace(test, avg_ts=10.0 * d) for d in drift), {}, {"analytic": 9.0})
    two = Row("Q8_0", 2, tuple(replace(test, avg_ts=17.5 * d) for d in drift), {}, {"analytic": 16.2})
    q4 = Row("Q4_K_M", 2, tuple(replace(test, avg_ts=28.0 * d) for d in drift), {}, {"analytic": "no figure"})
    ratios = pair_ratios([one, two, q4], ["analytic"])
    assert [(r.a.threads, r.b.threads, r.a.quant, r.b.quant) for r in ratios] == [(1, 2, "Q8_0", "Q8_0"),
                                                                                  (2, 2, "Q8_0", "Q4_K_M")]
    threads = ratios[0]
    assert threads.measured == pytest.approx(10.0 / 17.5)  # the drift cancels
    assert threads.error("analytic") == pytest.approx((9.0 / 16.2) / (10.0 / 17.5) - 1)
    assert ratios[1].error("analytic") is None  # one side has no estimate
    assert ratio_lines(ratios, ["analytic"])[-1] == "  analytic: worst ratio error 2.8% (met)"
