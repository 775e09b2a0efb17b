"""Expert popularity from llama.cpp imatrix files (issue 31): the reader, the fit check,
`--profile-trace X.imatrix.gguf` in advise and export, and synthetic routing fitted to it.

Files are written in llama-imatrix's layout (tests/imatrix_files.py); the real binary's
own output is read in tests/test_imatrix_real.py."""

from __future__ import annotations

import json
import shlex
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main  # noqa: E402
from cope_tui.sources.imatrix import read_imatrix  # noqa: E402
from engine.models.catalog import get_model  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from engine.traces.imatrix import check_imatrix_fits_model, imatrix_profile  # noqa: E402
from tests.factories import tiny_model  # noqa: E402
from tests.imatrix_files import moe_counts, write_imatrix_gguf, write_legacy_dat  # noqa: E402
from tests.tiny_archs import write_tiny  # noqa: E402

FAST = ["--tokens", "100", "--cpu", "desktop-ddr5"]
DS = "deepseek-v2-lite-chat"  # 26 MoE blocks (1..26), 64 experts, top-6; the fork runs deepseek2


def one_line(exc: pytest.ExceptionInfo, path) -> str:
    line = str(exc.value)
    assert line.startswith(f"{path}: ") and "\n" not in line and len(line) < 400, line
    return line


def distinct_counts(n_layers: int, n_experts: int, k: int, seed: int = 0) -> np.ndarray:
    """Each layer a different permutation of k x (1..E): no ties, totals whole tokens of top-k."""
    rng = np.random.default_rng(seed)
    return np.stack([k * rng.permutation(np.arange(1, n_experts + 1)) for _ in range(n_layers)]).astype(np.int64)


@pytest.fixture
def ds_imatrix(tmp_path):
    model = get_model(DS)
    counts = distinct_counts(model.n_moe_layers, model.n_routed_experts, model.top_k)
    path = write_imatrix_gguf(tmp_path / "ds.imatrix.gguf", moe_counts(counts, tuple(model.moe_blocks)),
                              datasets=("groups_merged.txt",), chunk_count=40, chunk_size=512)
    return model, counts, path


# --- the reader -------------------------------------------------------------------------


def test_reads_per_expert_counts_chunks_and_dataset(tmp_path):
    counts = np.array([[3, 1, 0, 2, 0, 0, 4, 2], [1, 1, 1, 1, 2, 2, 2, 2]])
    path = write_imatrix_gguf(tmp_path / "x.imatrix.gguf", moe_counts(counts, (1, 2)), datasets=("a.txt", "b.txt"),
                              chunk_count=7, chunk_size=128)
    im = read_imatrix(path)
    assert im.counts.tolist() == counts.tolist() and im.moe_blocks == (1, 2)
    assert im.chunk_count == 7 and im.chunk_size == 128 and im.datasets == ("a.txt", "b.txt")
    assert im.tensor == "ffn_up_exps" and im.notes == ()
    profile = imatrix_profile(im, tiny_model(moe_blocks=(1, 2), experts=8, k=2))
    assert profile.popularity().tolist() == counts.tolist()
    assert profile.n_tokens == 6 and profile.expert_ids is None
    described = profile.describe()
    assert described["has_order"] is False and "order and timing" in described["not_in_it"]
    assert "a.txt, b.txt; 7 chunks of 128 tokens" in described["label"]


def test_expert_tensors_that_disagree_are_named(tmp_path):
    tensors = moe_counts(np.array([[2, 2, 0, 0]]), (0,), dense=False)
    tensors["blk.0.ffn_down_exps.weight"] = np.array([4, 0, 0, 0])
    im = read_imatrix(write_imatrix_gguf(tmp_path / "x.gguf", tensors))
    assert im.counts.tolist() == [[2, 2, 0, 0]]
    assert any("ffn_down_exps count differently from ffn_up_exps" in n for n in im.notes)


def test_a_legacy_dat_file_is_one_line_saying_it_has_no_per_expert_counts(tmp_path):
    path = write_legacy_dat(tmp_path / "imatrix.dat", {"blk.0.ffn_up_exps.weight": 64, "blk.0.attn_q.weight": 8})
    with pytest.raises(CopeInputError) as exc:
        read_imatrix(path)
    line = one_line(exc, path)
    assert "legacy llama-imatrix file (2 tensors)" in line and "no per-expert counts" in line
    assert "llama-imatrix -m MODEL.gguf -f TEXT -o imatrix.gguf" in line


def test_a_gguf_converted_from_a_legacy_file_has_no_popularity(tmp_path):
    # llama-imatrix --in-file x.dat -o y.gguf: one count per tensor (load_imatrix resizes to 1)
    tensors = {f"blk.{b}.ffn_{t}_exps.weight": np.array([192]) for b in (0, 1) for t in ("gate", "up", "down")}
    path = write_imatrix_gguf(tmp_path / "converted.gguf", tensors)
    with pytest.raises(CopeInputError) as exc:
        read_imatrix(path)
    assert "converted from a legacy .dat imatrix" in one_line(exc, path)


@pytest.mark.parametrize("content, needle", [
    (b"not an imatrix at all, just text", "not an imatrix file: neither GGUF"),
    (b"", "not an imatrix file"),
])
def test_other_files_are_one_line(tmp_path, content, needle):
    path = tmp_path / "x.dat"
    path.write_bytes(content)
    with pytest.raises(CopeInputError) as exc:
        read_imatrix(path)
    assert needle in one_line(exc, path)


def test_a_model_gguf_is_not_an_imatrix(tmp_path):
    path = write_tiny(tmp_path / "model.gguf", "qwen3moe")
    with pytest.raises(CopeInputError) as exc:
        read_imatrix(path)
    assert "a model GGUF, not an imatrix" in one_line(exc, path)


def test_a_dense_imatrix_and_a_wrong_type_are_one_line(tmp_path):
    dense = write_imatrix_gguf(tmp_path / "dense.gguf", {"blk.0.ffn_up.weight": np.array([64])})
    with pytest.raises(CopeInputError) as exc:
        read_imatrix(dense)
    assert "no routed-expert tensor" in one_line(exc, dense)
    other = write_imatrix_gguf(tmp_path / "other.gguf", {"blk.0.ffn_up_exps.weight": np.array([1, 2])},
                               extra_fields={"general.type": "model"})
    with pytest.raises(CopeInputError) as exc:
        read_imatrix(other)
    assert "general.type is 'model'" in one_line(exc, other)


def test_a_truncated_imatrix_is_one_line(tmp_path):
    path = write_imatrix_gguf(tmp_path / "x.gguf", moe_counts(np.array([[2, 2, 1, 1]]), (0,)))
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 40])
    with pytest.raises(CopeInputError) as exc:
        read_imatrix(cut)
    assert "truncated" in one_line(exc, cut)


def test_counts_that_are_not_whole_numbers_are_refused(tmp_path):
    path = write_imatrix_gguf(tmp_path / "x.gguf", {"blk.0.ffn_up_exps.weight": np.array([1.5, 2.0])})
    with pytest.raises(CopeInputError) as exc:
        read_imatrix(path)
    assert "not a whole number" in one_line(exc, path)


# --- the fit check ------------------------------------------------------------------------


@pytest.mark.parametrize("model, needle", [
    (tiny_model(moe_blocks=(1, 2), experts=16, k=2), "8 experts per layer, the model has 16"),
    (tiny_model(moe_blocks=(0, 1, 2), experts=8, k=2), "counts MoE blocks 1..2, the model has 0..2"),
    (tiny_model(moe_blocks=(1, 2), experts=8, k=4), "block 1 counts 6 routings, not a multiple of the model's top-4"),
])
def test_a_mismatch_with_the_model_is_one_line(tmp_path, model, needle):
    counts = np.array([[3, 1, 0, 2, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0, 0]])
    path = write_imatrix_gguf(tmp_path / "x.gguf", moe_counts(counts, (1, 2)))
    with pytest.raises(CopeInputError) as exc:
        check_imatrix_fits_model(read_imatrix(path), model)
    line = one_line(exc, path)
    assert "--profile-trace: the imatrix does not fit model tiny" in line and needle in line


def test_cli_mismatch_exits_with_the_input_code(capsys, tmp_path):
    path = write_imatrix_gguf(tmp_path / "x.imatrix.gguf", moe_counts(np.array([[2, 2, 1, 1]]), (0,)))
    assert main(["advise", *FAST, "--model", DS, "--profile-trace", str(path)]) == EXIT_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "4 experts per layer, the model has 64" in err[0]


def test_an_imatrix_given_as_the_replayed_trace_says_where_it_belongs(capsys, ds_imatrix):
    _, _, path = ds_imatrix
    assert main(["advise", *FAST, "--model", DS, "--trace", str(path)]) == EXIT_INPUT
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "give it with --profile-trace" in err


# --- advise and export ------------------------------------------------------------------


def test_advise_ranks_with_the_imatrix_popularity_and_says_what_is_real(capsys, ds_imatrix):
    model, counts, path = ds_imatrix
    assert main(["advise", "--json", *FAST, "--model", DS, "--vram-budget", "6", "--profile-trace", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    profile = doc["inputs"]["profile_trace"]
    assert profile["source"] == str(path) and profile["has_order"] is False
    assert profile["tokens"] == int(counts[0].sum()) // model.top_k
    assert "groups_merged.txt; 40 chunks of 512 tokens" in profile["label"]
    # The replayed routing is synthetic, its popularity the imatrix's: said in the trace and the notes.
    trace = doc["inputs"]["trace"]
    assert trace["synthetic"] is True and "real counts of the imatrix" in trace["recorded_with"]
    assert any(n.startswith("real: each layer's expert popularity") for n in trace["notes"])
    assert any("REAL" in n and "ASSUMED" in n for n in doc["notes"])
    assert any("mutable caches allocate slots by its popularity" in n for n in doc["notes"])


def test_the_fork_csv_pins_the_imatrix_top_experts(capsys, tmp_path, ds_imatrix):
    model, counts, path = ds_imatrix
    out = tmp_path / "fork" / "run.sh"
    code = main(["export", "--candidate", "fixed.parallel.uniform", "--runtime", "fork", *FAST, "--model", DS,
                 "--vram-budget", "6", "--profile-trace", str(path), "--out", str(out)])
    assert code == EXIT_OK
    text = out.read_text()
    assert f"the imatrix {path}" in text and "SYNTHETIC routing: " not in text
    csv_file = next(a for a in shlex.split(text.splitlines()[-1]) if a.endswith(".csv"))
    slots = int(Path(csv_file).stem.rsplit("-", 1)[1])
    rows = [list(map(int, line.split(","))) for line in Path(csv_file).read_text().splitlines()]
    for layer, block in enumerate(model.moe_blocks):
        seen = Counter(e for r in rows if r[1] == block for e in r[2:])
        pinned = {e for e, _ in seen.most_common(slots)}
        assert pinned == set(np.argsort(-counts[layer])[:slots].tolist())


def test_the_kt_counts_follow_the_imatrix(capsys, tmp_path):
    torch = pytest.importorskip("torch")
    model = get_model("qwen3-30b-a3b")  # kt-kernel's LLAMAFILE method needs its expert width (768) on a Ryzen
    counts = distinct_counts(model.n_moe_layers, model.n_routed_experts, model.top_k, seed=5)
    path = write_imatrix_gguf(tmp_path / "q.imatrix.gguf", moe_counts(counts, tuple(model.moe_blocks)))
    out = tmp_path / "kt" / "run.sh"
    code = main(["export", "--candidate", "fixed.parallel.uniform", "--runtime", "sglang-kt", *FAST, "--model",
                 model.id, "--vram-budget", "10", "--profile-trace", str(path), "--out", str(out)])
    assert code == EXIT_OK
    assert f"the routing counts of the imatrix {path}" in out.read_text()
    pt = next(out.parent.glob("*.pt"))
    logical = torch.load(pt, weights_only=True)["logical_count"].numpy()[0]
    for layer, block in enumerate(model.moe_blocks):
        assert np.argsort(-logical[block]).tolist() == np.argsort(-counts[layer]).tolist()


def test_a_real_trace_still_replays_beside_an_imatrix_profile(capsys, tmp_path, ds_imatrix):
    from engine.traces.synthetic import SyntheticSettings, synthetic_trace
    from engine.traces import save_trace

    model, _, path = ds_imatrix
    trace = tmp_path / "t.cope.npz"
    save_trace(synthetic_trace(model, SyntheticSettings(tokens=40, seed=3)), trace)
    assert main(["advise", "--json", *FAST, "--model", DS, "--trace", str(trace), "--profile-trace", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["trace"]["tokens"] == 40  # all of it replayed: the popularity comes from elsewhere
    assert doc["inputs"]["profile_trace"]["origin"] == "imported"


# --- synthetic routing fitted to the counts -----------------------------------------------


def test_fitted_synthetic_routing_follows_each_layers_counts():
    from engine.traces.synthetic import SyntheticSettings, synthetic_trace

    model = tiny_model(moe_blocks=(0, 1, 2), experts=16, k=2)
    counts = np.zeros((3, 16))
    counts[0, [3, 7]] = 1000  # layer 0 routes almost only to 3 and 7
    counts[1] = np.arange(16)  # layer 1 rises with the id
    counts[2] = 1  # layer 2 uniform
    trace = synthetic_trace(model, SyntheticSettings(tokens=3000, seed=1, popularity=counts, locality=0.0,
                                                     popularity_source="the imatrix x"))
    pop = trace.popularity() / (trace.n_tokens * 2)
    assert set(np.argsort(-pop[0])[:2].tolist()) == {3, 7} and pop[0, [3, 7]].sum() > 0.99
    assert np.corrcoef(pop[1], counts[1])[0, 1] > 0.95
    assert pop[2].max() < 2.5 / 16
    assert "real counts of the imatrix x" in trace.meta.recorded_with
    assert trace.meta.notes and trace.meta.notes[0].startswith("real: each layer's expert popularity")


def test_forged_counts_tensors_are_refused_before_they_are_read(tmp_path):
    import gguf

    path = tmp_path / "f16.gguf"
    w = gguf.GGUFWriter(str(path), "unused")
    w.kv_data[0].pop("general.architecture")
    w.add_type("imatrix")
    w.add_tensor("blk.0.ffn_up_exps.weight.counts", np.ones((4, 1), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(CopeInputError) as exc:
        read_imatrix(path)
    assert "is F16, expected F32 counts" in one_line(exc, path)
    wide = write_imatrix_gguf(tmp_path / "wide.gguf", {"blk.0.ffn_up_exps.weight": np.ones(5000)}, hidden=1)
    with pytest.raises(CopeInputError) as exc:
        read_imatrix(wide)
    assert "holds 5,000 counts, more than the 4,096 experts COPE sizes" in one_line(exc, wide)
