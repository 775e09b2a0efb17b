"""Issue 31's "Done when": the real llama-imatrix, built from the pinned source
(bench/llamacpp_build.py), run on a tiny qwen3moe GGUF (tests/tiny_archs.py, shapes from
bench/synthetic_gguf.py) and a short text; COPE reads the imatrix, and its per-expert
counts equal the routing of the same tokens recorded by llama.cpp itself
(probes/record_llamacpp.py, llama-cpp-python vendoring the same llama.cpp commit).

How the two runs see the same tokens (tools/imatrix/imatrix.cpp, compute_imatrix): the
text is tokenized with special tokens added (the tiny vocabulary adds no BOS), cut into
chunks of -c tokens (the tail dropped), and each chunk is one prompt batch, all rows
outputs, the KV cache cleared. The recorder is given the same chunks as prompts, routing
of prompt tokens kept (include_prompt); its generated token's row is dropped. The text
avoids the vocabulary's merges ("Ġt", "he", "in"), so each byte is one token and the
chunks are byte slices.

Skipped without COPE_LLAMA_BIN (a folder holding llama-imatrix) or without llama-cpp-python
(the optional extra cope-tui[llamacpp]).
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from cope_tui.cli import EXIT_OK, main
from cope_tui.sources.gguf_model import model_from_gguf
from cope_tui.sources.imatrix import read_imatrix
from engine.traces.imatrix import check_imatrix_fits_model
from tests.tiny_archs import write_tiny

BIN = os.environ.get("COPE_LLAMA_BIN", "")
IMATRIX = os.path.join(BIN, "llama-imatrix")
pytestmark = [
    pytest.mark.skipif(not (BIN and os.path.isfile(IMATRIX)),
                       reason="COPE_LLAMA_BIN does not name a folder with llama-imatrix "
                              "(python bench/llamacpp_build.py builds it)"),
]
CHUNK = 32  # -c: tokens a chunk
N_CHUNKS = 3
ALPHABET = "abcdfghjklmopqrsuvwxyz .,"  # no t, e or n: none of the tiny vocabulary's merges applies


def text_of(n_bytes: int, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    return "".join(rng.choice(list(ALPHABET), size=n_bytes))


@pytest.fixture(scope="module")
def imatrix_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("imatrix")
    gguf = write_tiny(work / "tiny-qwen3moe.gguf", "qwen3moe", seed=3)
    text = text_of(N_CHUNKS * CHUNK + 7)  # 7 bytes past the last whole chunk: dropped by llama-imatrix
    (work / "text.txt").write_text(text)
    out = work / "imatrix.gguf"
    argv = [IMATRIX, "-m", str(gguf), "-f", str(work / "text.txt"), "-o", str(out), "-c", str(CHUNK),
            "-b", str(CHUNK), "--no-ppl", "-t", "2"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return gguf, text, out


def test_cope_reads_the_real_imatrix(imatrix_run):
    gguf, _, out = imatrix_run
    im = read_imatrix(out)
    model = model_from_gguf(gguf)
    check_imatrix_fits_model(im, model)
    assert im.moe_blocks == tuple(model.moe_blocks) and im.n_experts == model.n_routed_experts
    assert im.chunk_count == N_CHUNKS and im.chunk_size == CHUNK
    assert im.datasets == (str(gguf.parent / "text.txt"),)
    assert im.notes == ()  # gate, up and down counted alike
    assert (im.counts.sum(axis=1) == N_CHUNKS * CHUNK * model.top_k).all()


def test_the_counts_equal_llama_cpps_own_routing_of_the_same_tokens(imatrix_run):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed (pip install 'cope-tui[llamacpp]')")
    from probes.record_llamacpp import record_with_llamacpp

    gguf, text, out = imatrix_run
    chunks = [list(text[i * CHUNK:(i + 1) * CHUNK].encode()) for i in range(N_CHUNKS)]  # byte b is token b
    trace = record_with_llamacpp(str(gguf), chunks, 1, include_prompt=True, n_threads=2)
    ends = list(trace.seq_starts[1:]) + [trace.n_tokens]
    assert trace.n_sequences == N_CHUNKS
    rows = np.concatenate([trace.expert_ids[s:s + CHUNK] for s in trace.seq_starts])  # the generated row dropped
    assert all(e - s >= CHUNK for s, e in zip(trace.seq_starts, ends))
    recorded = np.stack([np.bincount(rows[:, layer].ravel(), minlength=trace.meta.n_experts)
                         for layer in range(trace.n_layers)])
    im = read_imatrix(out)
    assert im.moe_blocks == trace.meta.moe_blocks
    np.testing.assert_array_equal(im.counts, recorded)


def test_advise_takes_the_real_imatrix_as_its_profile(capsys, imatrix_run):
    gguf, _, out = imatrix_run
    code = main(["advise", "--json", "--tokens", "50", "--cpu", "desktop-ddr5", "--model", str(gguf),
                 "--profile-trace", str(out)])
    assert code == EXIT_OK
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["profile_trace"]["tokens"] == N_CHUNKS * CHUNK
    assert doc["inputs"]["profile_trace"]["has_order"] is False
