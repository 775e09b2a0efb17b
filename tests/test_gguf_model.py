"""ModelSpec from GGUF files: exact bytes from the tensor table, split files, bad files.

The fixtures are tiny GGUF files written with gguf.GGUFWriter under real llama.cpp tensor
names; expected byte sizes are computed here from the formats' block sizes, independently
of the gguf package's table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as T  # noqa: E402

from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request  # noqa: E402
from cope_tui.sources.gguf_header import NeedMoreBytes, parse_header_prefix, read_local_header  # noqa: E402
from cope_tui.sources.gguf_model import file_quantization, model_from_gguf  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from engine.models.quant import get_quantization  # noqa: E402

# (elements per block, bytes per block), from ggml's block structs.
BLOCK = {T.F32: (1, 4), T.F16: (1, 2), T.Q8_0: (32, 34), T.Q4_K: (256, 144), T.Q6_K: (256, 210),
         T.MXFP4: (32, 17)}

H = 256  # hidden size (K-quants need multiples of 256 along ne0)
F = 256  # expert FFN width
E = 4  # routed experts
V = 32  # vocabulary
DENSE_F = 512


def nbytes(ne: tuple[int, ...], qtype) -> int:
    elements, size = BLOCK[qtype]
    n = int(np.prod(ne))
    assert ne[0] % elements == 0
    return n // elements * size


class Writer:
    """Adds tensors by GGUF shape (ne0 first) and type, and keeps the expected byte sums."""

    def __init__(self, path: Path, arch: str, **kw):
        self.w = gguf.GGUFWriter(str(path), arch, **kw)
        self.path = path
        self.sizes: dict[str, int] = {}

    def t(self, name: str, ne: tuple[int, ...], qtype=T.F32) -> None:
        shape = tuple(reversed(ne))
        if qtype in (T.F32, T.F16):
            data = np.zeros(shape, np.float32 if qtype == T.F32 else np.float16)
            self.w.add_tensor(name, data)
        else:
            elements, size = BLOCK[qtype]
            byte_shape = (*shape[:-1], shape[-1] // elements * size)
            self.w.add_tensor(name, np.zeros(byte_shape, np.uint8), raw_shape=byte_shape, raw_dtype=qtype)
        self.sizes[name] = nbytes(ne, qtype)

    def close(self) -> Path:
        self.w.write_header_to_file()
        self.w.write_kv_data_to_file()
        self.w.write_tensors_to_file()
        self.w.close()
        return self.path

    def sum(self, pred) -> int:
        return sum(v for k, v in self.sizes.items() if pred(k))


def write_deepseek_like(path: Path, **kw) -> Writer:
    """deepseek2: block 0 dense, blocks 1-2 MoE with a shared expert, MLA attention;
    experts Q4_K except block 1's down projection at Q6_K."""
    w = Writer(path, "deepseek2", **kw)
    g = w.w
    g.add_name("Tiny DeepSeek")
    g.add_block_count(3)
    g.add_embedding_length(H)
    g.add_feed_forward_length(DENSE_F)
    g.add_expert_feed_forward_length(F)
    g.add_expert_count(E)
    g.add_expert_used_count(2)
    g.add_expert_shared_count(1)
    g.add_leading_dense_block_count(1)
    g.add_head_count(4)
    g.add_head_count_kv(1)
    g.add_kv_lora_rank(64)
    g.add_key_length(64 + 32)
    g.add_value_length(64)
    g.add_key_length_mla(96)
    g.add_value_length_mla(64)
    g.add_rope_dimension_count(32)
    g.add_file_type(15)  # MOSTLY_Q4_K_M
    w.t("token_embd.weight", (H, V), T.Q8_0)
    w.t("output_norm.weight", (H,))
    w.t("output.weight", (H, V), T.Q6_K)
    for b in range(3):
        w.t(f"blk.{b}.attn_norm.weight", (H,))
        w.t(f"blk.{b}.attn_q.weight", (H, 4 * 96), T.Q8_0)
        w.t(f"blk.{b}.attn_kv_a_mqa.weight", (H, 64 + 32), T.Q8_0)
        w.t(f"blk.{b}.attn_output.weight", (4 * 64, H), T.Q4_K)
        w.t(f"blk.{b}.ffn_norm.weight", (H,))
        if b == 0:
            w.t("blk.0.ffn_gate.weight", (H, DENSE_F), T.Q4_K)
            w.t("blk.0.ffn_up.weight", (H, DENSE_F), T.Q4_K)
            w.t("blk.0.ffn_down.weight", (DENSE_F, H), T.Q6_K)
            continue
        w.t(f"blk.{b}.ffn_gate_inp.weight", (H, E))
        w.t(f"blk.{b}.exp_probs_b.bias", (E,))
        w.t(f"blk.{b}.ffn_gate_exps.weight", (H, F, E), T.Q4_K)
        w.t(f"blk.{b}.ffn_up_exps.weight", (H, F, E), T.Q4_K)
        w.t(f"blk.{b}.ffn_down_exps.weight", (F, H, E), T.Q6_K if b == 1 else T.Q4_K)
        w.t(f"blk.{b}.ffn_gate_shexp.weight", (H, F), T.Q8_0)
        w.t(f"blk.{b}.ffn_up_shexp.weight", (H, F), T.Q8_0)
        w.t(f"blk.{b}.ffn_down_shexp.weight", (F, H), T.Q8_0)
    return w


def write_gpt_oss_like(path: Path) -> Writer:
    """gpt-oss: merged gate_up experts with biases at MXFP4, tied embeddings, sliding window."""
    w = Writer(path, "gpt-oss")
    g = w.w
    g.add_block_count(2)
    g.add_embedding_length(H)
    g.add_expert_feed_forward_length(F)
    g.add_expert_count(E)
    g.add_expert_used_count(2)
    g.add_head_count(4)
    g.add_head_count_kv(2)
    g.add_key_length(64)
    g.add_value_length(64)
    g.add_sliding_window(128)
    g.add_file_type(38)  # MOSTLY_MXFP4_MOE
    w.t("token_embd.weight", (H, V), T.Q8_0)
    w.t("output_norm.weight", (H,))
    for b in range(2):
        w.t(f"blk.{b}.attn_norm.weight", (H,))
        w.t(f"blk.{b}.attn_q.weight", (H, 256), T.Q8_0)
        w.t(f"blk.{b}.attn_k.weight", (H, 128), T.Q8_0)
        w.t(f"blk.{b}.attn_v.weight", (H, 128), T.Q8_0)
        w.t(f"blk.{b}.attn_output.weight", (256, H), T.Q8_0)
        w.t(f"blk.{b}.attn_sinks.weight", (4,))
        w.t(f"blk.{b}.post_attention_norm.weight", (H,))
        w.t(f"blk.{b}.ffn_gate_inp.weight", (H, E))
        w.t(f"blk.{b}.ffn_gate_inp.bias", (E,))
        w.t(f"blk.{b}.ffn_gate_up_exps.weight", (H, 2 * F, E), T.MXFP4)
        w.t(f"blk.{b}.ffn_gate_up_exps.bias", (2 * F, E))
        w.t(f"blk.{b}.ffn_down_exps.weight", (F, H, E), T.MXFP4)
        w.t(f"blk.{b}.ffn_down_exps.bias", (H, E))
    return w


def write_dense(path: Path) -> Path:
    w = Writer(path, "qwen3")
    w.w.add_block_count(1)
    w.w.add_embedding_length(H)
    w.w.add_head_count(4)
    w.t("token_embd.weight", (H, V), T.Q8_0)
    w.t("blk.0.ffn_up.weight", (H, DENSE_F), T.Q4_K)
    return w.close()


def write_qwen3moe(path: Path, *, arch: str = "qwen3moe", top_k: bool = True, **kw) -> Writer:
    w = Writer(path, arch, **kw)
    g = w.w
    g.add_block_count(2)
    g.add_embedding_length(H)
    g.add_expert_count(E)
    if top_k:
        g.add_expert_used_count(2)
    g.add_head_count(4)
    g.add_head_count_kv(2)
    g.add_key_length(64)
    w.t("token_embd.weight", (H, V), T.Q8_0)
    w.t("output.weight", (H, V), T.Q6_K)
    for b in range(2):
        w.t(f"blk.{b}.attn_q.weight", (H, 256), T.Q8_0)
        w.t(f"blk.{b}.ffn_gate_inp.weight", (H, E))
        w.t(f"blk.{b}.ffn_gate_exps.weight", (H, F, E), T.Q4_K)
        w.t(f"blk.{b}.ffn_up_exps.weight", (H, F, E), T.Q4_K)
        w.t(f"blk.{b}.ffn_down_exps.weight", (F, H, E), T.Q6_K)
    return w


def is_expert(name: str) -> bool:
    return "_exps." in name


# --- exact sizes ---------------------------------------------------------------------


def test_deepseek_like_dense_block_shared_expert_and_exact_bytes(tmp_path):
    w = write_deepseek_like(tmp_path / "tiny-deepseek.gguf")
    path = w.close()
    model = model_from_gguf(path)
    exact = model.exact_bytes

    assert model.arch == "deepseek2" and model.name == "Tiny DeepSeek"
    assert model.n_blocks == 3 and model.moe_blocks == (1, 2) and model.dense_blocks == (0,)
    assert (model.n_routed_experts, model.top_k, model.n_shared_experts) == (E, 2, 1)
    assert (model.hidden_size, model.expert_ffn_size, model.shared_expert_ffn_size) == (H, F, F)
    assert model.dense_ffn_size == DENSE_F and model.vocab_size == V and not model.tied_embeddings
    assert model.attention.kind == "mla" and model.attention.kv_elements_per_token() == 64 + 32

    per_layer = [w.sum(lambda k, b=b: k.startswith(f"blk.{b}.") and is_expert(k)) // E for b in (1, 2)]
    assert exact.expert_bytes_per_layer == tuple(per_layer)
    assert per_layer[0] == (2 * H * F * 144 // 256 + F * H * 210 // 256)  # one expert, Q6_K down
    assert per_layer[0] > per_layer[1]
    shared = [w.sum(lambda k, b=b: k.startswith(f"blk.{b}.") and not is_expert(k)) for b in range(3)]
    assert exact.shared_layer_bytes == tuple(shared)
    assert exact.shared_expert_bytes == (0, *(3 * nbytes((H, F), T.Q8_0),) * 2)
    assert exact.embedding_bytes == nbytes((H, V), T.Q8_0)
    assert exact.head_bytes == nbytes((H, V), T.Q6_K)
    assert exact.other_bytes == H * 4

    # The byte methods use the file's sizes, whatever quantization is passed.
    for quant in (get_quantization("Q4_K_M"), get_quantization("F16")):
        assert model.expert_bytes(quant) == max(per_layer)
        assert model.shared_layer_bytes(quant, 0) == shared[0]
        assert model.head_bytes(quant) == exact.head_bytes
        non_expert = w.sum(lambda k: not is_expert(k))
        assert model.non_expert_bytes(quant) == non_expert
        assert model.gpu_non_expert_bytes(quant) == non_expert - exact.embedding_bytes
    assert sum(per_layer) * E + model.non_expert_bytes(None) == sum(w.sizes.values())

    assert exact.quant_name == "Q4_K_M"
    assert exact.quant_summary.startswith("experts: Q4_K (gate, up; down, 1 of 2 layers) / Q6_K (down, 1 of 2 layers)")
    quant = file_quantization(model)
    assert quant.name == "Q4_K_M" and "exact" in quant.source


def test_gpt_oss_like_merged_gate_up_with_biases_and_tied_head(tmp_path):
    w = write_gpt_oss_like(tmp_path / "gpt-oss-tiny.gguf")
    model = model_from_gguf(w.close())
    exact = model.exact_bytes
    assert model.moe_blocks == (0, 1) and model.gated_experts and model.expert_ffn_size == F
    assert model.n_shared_experts == 0 and model.tied_embeddings
    one = (nbytes((H, 2 * F, E), T.MXFP4) + 2 * F * E * 4 + nbytes((F, H, E), T.MXFP4) + H * E * 4) // E
    assert exact.expert_bytes_per_layer == (one, one)
    assert model.expert_bytes(None) == one
    assert exact.head_bytes == 0 and model.head_bytes(None) == exact.embedding_bytes
    assert model.gpu_non_expert_bytes(None) == model.non_expert_bytes(None) == w.sum(lambda k: not is_expert(k))
    assert model.attention.sliding_window_tokens == 128 and model.attention.sliding_window_every == 2
    assert exact.quant_name == "MXFP4"
    assert exact.quant_summary.startswith("experts: MXFP4 (gate_up, down)")


def test_split_gguf_reads_as_one_model(tmp_path):
    single = write_deepseek_like(tmp_path / "one.gguf")
    single.close()
    split = write_deepseek_like(tmp_path / "tiny.gguf", split_max_tensors=20)
    split.close()
    shards = sorted(tmp_path.glob("tiny-*-of-*.gguf"))
    assert len(shards) >= 2, shards
    whole = model_from_gguf(tmp_path / "one.gguf")
    for shard in shards:  # any shard's path finds its siblings
        model = model_from_gguf(shard)
        assert model.exact_bytes.expert_bytes_per_layer == whole.exact_bytes.expert_bytes_per_layer
        assert model.exact_bytes.shared_layer_bytes == whole.exact_bytes.shared_layer_bytes
        assert model.non_expert_bytes(None) == whole.non_expert_bytes(None)
        assert model.id == "tiny" and model.moe_blocks == (1, 2)
        assert model.gguf_path == str(shards[0])  # where llama.cpp starts a split
    assert whole.gguf_path == str(tmp_path / "one.gguf")
    shards[-1].unlink()
    with pytest.raises(CopeInputError, match=rf"{shards[0].name}: split GGUF is missing 1 of its .*{shards[-1].name}"):
        model_from_gguf(shards[0])


def test_own_header_parser_agrees_with_gguf_reader(tmp_path):
    path = write_deepseek_like(tmp_path / "m.gguf").close()
    data = path.read_bytes()
    ours = parse_header_prefix(data, str(path))
    theirs = read_local_header(path)
    assert ours.tensors == theirs.tensors
    assert ours.data_offset_bytes == theirs.data_offset_bytes
    assert {k: ours.fields[k] for k in theirs.fields} == dict(theirs.fields)
    with pytest.raises(NeedMoreBytes) as need:
        parse_header_prefix(data[:100], "m.gguf")
    assert 100 < need.value.needed <= ours.data_offset_bytes


def test_advise_uses_the_file_and_refuses_quant(tmp_path):
    path = write_deepseek_like(tmp_path / "m.gguf").close()
    request = build_request(PlanChoices(model=str(path), cpu="desktop-ddr5", tokens=10))
    assert request.model.exact_bytes is not None
    assert request.quant.name == "Q4_K_M" and "exact" in request.quant.source
    assert any("byte sizes exact from the GGUF tensor table" in n for n in request.notes)
    assert not any("quantization:" in n for n in request.notes)
    with pytest.raises(CopeInputError, match=r"m\.gguf: --quant Q8_0: the model comes from a GGUF file"):
        build_request(PlanChoices(model=str(path), quant="Q8_0", cpu="desktop-ddr5", tokens=10))
    # A folder holding one GGUF model is read as that model.
    assert build_request(PlanChoices(model=str(tmp_path), cpu="desktop-ddr5", tokens=10)).model.id == "m"


def test_cli_advise_json_on_a_gguf(tmp_path, capsys):
    import json

    from cope_tui.cli import main

    path = write_qwen3moe(tmp_path / "q.gguf").close()
    code = main(["advise", "--model", str(path), "--cpu", "desktop-ddr5", "--tokens", "20", "--json",
                 "--fidelity", "analytic"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["inputs"]["model"]["expert_bytes"] == model_from_gguf(path).exact_bytes.max_expert_bytes
    assert "exact" in doc["inputs"]["quantization"]["provenance"]
    assert any("exact from the GGUF" in n for n in doc["notes"])


# --- model resolution ----------------------------------------------------------------


def test_model_resolution_errors_list_what_was_tried():
    with pytest.raises(CopeInputError, match="not a catalog model .* not an existing config.json or .gguf path, "
                                             "and not a Hugging Face repo id"):
        build_request(PlanChoices(model="no such model", cpu="desktop-ddr5"))
    with pytest.raises(CopeInputError, match=r"missing\.gguf: file not found"):
        build_request(PlanChoices(model="missing.gguf", cpu="desktop-ddr5"))
    with pytest.raises(CopeInputError, match="--gguf-file x.gguf needs --model to be a Hugging Face repo id"):
        build_request(PlanChoices(model="./some/path/", gguf_file="x.gguf", cpu="desktop-ddr5"))


# --- bad files -----------------------------------------------------------------------


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "weights.gguf"
    path.write_text("hello, this is not a model\n")
    with pytest.raises(CopeInputError, match=r"weights\.gguf: not a GGUF file \(it starts with b'hell'"):
        model_from_gguf(path)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(CopeInputError, match=r"empty\.gguf: not a GGUF file"):
        model_from_gguf(empty)


@pytest.mark.parametrize("keep", [3, 20, 100, 600])
def test_truncated_header(tmp_path, keep):
    full = write_deepseek_like(tmp_path / "full.gguf").close().read_bytes()
    assert keep < parse_header_prefix(full, "full").data_offset_bytes
    path = tmp_path / "cut.gguf"
    path.write_bytes(full[:keep])
    with pytest.raises(CopeInputError, match=r"cut\.gguf: truncated GGUF"):
        model_from_gguf(path)


def test_truncated_tensor_data(tmp_path):
    full = write_deepseek_like(tmp_path / "full.gguf").close().read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(full[:-1000])
    with pytest.raises(CopeInputError, match=rf"cut\.gguf: truncated GGUF file: the tensor table needs {len(full)} bytes"):
        model_from_gguf(path)


def test_not_an_moe_model(tmp_path):
    path = write_dense(tmp_path / "dense.gguf")
    with pytest.raises(CopeInputError, match=r"dense\.gguf: not an MoE model: no routed-expert tensors"):
        model_from_gguf(path)


def test_unknown_architecture(tmp_path):
    path = write_qwen3moe(tmp_path / "odd.gguf", arch="frobnicator").close()
    with pytest.raises(CopeInputError, match=r"odd\.gguf: unknown architecture 'frobnicator'"):
        model_from_gguf(path)


def test_missing_experts_per_token(tmp_path):
    path = write_qwen3moe(tmp_path / "nok.gguf", top_k=False).close()
    with pytest.raises(CopeInputError, match=r"nok\.gguf: missing metadata 'qwen3moe.expert_used_count'"):
        model_from_gguf(path)


# --- hybrid (linear attention) and NextN blocks ----------------------------------------


def tiny_hybrid_spec():
    """A qwen35moe-shaped model: 4 blocks, block 3 attends (gated), blocks 0-2 are Gated
    DeltaNet; one shared expert; one NextN block in the file."""
    from engine.models.model import AttentionShape, LinearAttentionShape, ModelSpec

    return ModelSpec(
        id="tiny-hybrid", name="tiny-hybrid", arch="qwen35moe", n_blocks=4, moe_blocks=(0, 1, 2, 3),
        n_routed_experts=E, top_k=2, n_shared_experts=1, hidden_size=H, expert_ffn_size=F,
        shared_expert_ffn_size=F, dense_ffn_size=0, vocab_size=V, tied_embeddings=False,
        attention=AttentionShape("gqa", 2, 1, 128, output_gate=True), source="test",
        linear_blocks=(0, 1, 2), linear_attention=LinearAttentionShape(2, 4, 64, 64, 4), nextn_blocks=1)


def write_from_mix(path: Path, spec, quant: str) -> Path:
    """A GGUF holding exactly the tensors engine.models.gguf_tensors lists, typed by llama.cpp's rules."""
    from engine.models.quant_mix import tensor_types

    w = Writer(path, spec.arch)
    g = w.w
    g.add_block_count(spec.n_blocks + spec.nextn_blocks)
    g.add_embedding_length(H)
    g.add_expert_count(E)
    g.add_expert_used_count(2)
    g.add_head_count(2)
    g.add_head_count_kv(1)
    g.add_key_length(128)
    g.add_ssm_conv_kernel(4)
    g.add_ssm_state_size(64)
    g.add_ssm_group_count(2)
    g.add_ssm_time_step_rank(4)
    g.add_ssm_inner_size(256)
    g.add_full_attention_interval(4)
    g.add_nextn_predict_layers(spec.nextn_blocks)
    g.add_file_type(15)  # MOSTLY_Q4_K_M
    for t, type_name in tensor_types(spec, quant):
        ne = (t.cols, t.rows, t.experts) if t.experts > 1 else (t.cols, t.rows) if t.rows > 1 else (t.cols,)
        w.t(t.name, ne, T[type_name])
    return w.close()


def test_a_file_written_by_the_rules_reads_back_with_the_sizes_the_rules_predict(tmp_path):
    spec = tiny_hybrid_spec()
    quant = get_quantization("Q4_K_M")
    model = model_from_gguf(write_from_mix(tmp_path / "tiny-hybrid.gguf", spec, "Q4_K_M"))
    predicted = spec.tensor_sizes(quant)
    exact = model.exact_bytes
    # The NextN block is not a block of the model: its bytes are the file's only.
    assert model.n_blocks == 4 and model.nextn_blocks == 1 and model.moe_blocks == (0, 1, 2, 3)
    assert exact.skipped_bytes == predicted.skipped_bytes > 0
    assert exact.expert_bytes_per_layer == predicted.expert_bytes_per_layer
    assert exact.shared_layer_bytes == predicted.shared_layer_bytes
    assert exact.shared_expert_bytes == predicted.shared_expert_bytes
    assert (exact.embedding_bytes, exact.head_bytes, exact.other_bytes) == (
        predicted.embedding_bytes, predicted.head_bytes, predicted.other_bytes)
    tensor_data = sum(t.n_bytes for t in read_local_header(tmp_path / "tiny-hybrid.gguf").tensors)
    assert model.file_bytes(quant) == spec.file_bytes(quant) == tensor_data
    # Which blocks attend, and the linear blocks' shape, from the tensors and the ssm metadata.
    assert model.linear_blocks == (0, 1, 2) and model.linear_attention == spec.linear_attention
    assert model.attention.output_gate and model.block_kinds == spec.block_kinds
    assert model.kv_cache_bytes(1000) == spec.kv_cache_bytes(1000) == 1000 * 2 * 1 * 128 * 2
    assert model.recurrent_state_bytes() == 3 * spec.linear_attention.state_bytes()

