"""The tiny qwen3moe, deepseek2 and gpt-oss GGUFs (tests/tiny_archs.py), read back with the
`gguf` package and run by real llama.cpp binaries.

Without binaries the files are checked against what each llama.cpp loader requires: the
architecture, block and expert counts, every tensor it creates without
TENSOR_NOT_REQUIRED (and nothing it would not create), and the shapes it asks for, which
are worked out here from the metadata as src/models/<arch>.cpp does (MLA head sizes for
deepseek2, n_rot-wide heads and sinks for gpt-oss), not copied from the writer.

With COPE_LLAMA_BIN set to a folder holding llama-bench and llama-server:

* llama-bench runs pp8 and tg4 to completion on each file, plain, with a block-1 `-ot`
  override of the shape COPE exports, and with `-ncmoe 1`; its verbose log must name
  exactly the tensors the override should move (deepseek2's block 0 is dense, so
  `-ncmoe 1` moves nothing there: --n-cpu-moe counts blocks, not MoE blocks);
* llama-server starts on 127.0.0.1, reports healthy, answers /completion with token ids
  and with text, tokenises with the file's merges, moves every routed-expert tensor with
  --cpu-moe, and exits 0 on SIGTERM.

Tests needing a binary skip, saying why, when COPE_LLAMA_BIN is unset or lacks it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")

from tests import tiny_archs as ta  # noqa: E402
from tests.llama_server import ServerError, run_server, with_address  # noqa: E402

BIN_ENV = "COPE_LLAMA_BIN"
# The shape of the -ot override COPE exports for one block's routed experts.
OT_BLOCK1 = r"blk\.1\.ffn_(up|down|gate|gate_up)_(ch|)exps=CPU"
BENCH_ARGS = ["-r", "1", "-n", "4", "-p", "8", "-ngl", "99", "-t", "2"]
SERVER_ARGS = ["-c", str(ta.CONTEXT), "-t", "2"]
# llama-model-loader.cpp's debug line; llama-server prefixes a timestamp and a level letter.
OVERRIDE_LINE = re.compile(r"\btensor (\S+) \(.*\) buffer type overridden to (\S+)\s*$")


# --- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tiny-archs")
    return {arch: ta.write_tiny(folder / f"{arch}.gguf", arch) for arch in ta.ARCHS}


def llama_program(name: str) -> Path:
    """`name` in $COPE_LLAMA_BIN, or skip the test saying what is missing."""
    folder = os.environ.get(BIN_ENV)
    if not folder:
        pytest.skip(f"{BIN_ENV} is not set (a folder with llama.cpp's llama-bench and llama-server)")
    for candidate in (Path(folder) / name, Path(folder) / f"{name}.exe"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip(f"{BIN_ENV}={folder} has no executable {name}")


def read(path: Path):
    return gguf.GGUFReader(str(path))


def field(reader, key: str):
    return reader.fields[key].contents()


def ne(reader) -> dict[str, tuple[int, ...]]:
    """Tensor name -> ggml ne (the order llama.cpp's create_tensor states shapes in)."""
    return {t.name: tuple(int(d) for d in t.shape) for t in reader.tensors}


# --- what each loader requires (src/models/<arch>.cpp, load_arch_tensors) ------------------

GLOBAL = ["token_embd.weight", "output_norm.weight", "output.weight"]
ATTENTION = {
    "qwen3moe": ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm", "ffn_norm"],
    "deepseek2": ["attn_norm", "attn_kv_a_norm", "attn_q", "attn_kv_a_mqa", "attn_k_b", "attn_v_b", "attn_output",
                  "ffn_norm"],
    "gpt-oss": ["attn_norm", "post_attention_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_sinks"],
}
ROUTED = ["ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]
MOE_EXTRA = {"qwen3moe": [], "deepseek2": ["ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"], "gpt-oss": []}
DENSE = ["ffn_gate", "ffn_up", "ffn_down"]  # deepseek2's leading dense blocks
REQUIRED_BIASES = {"gpt-oss": ["attn_output", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]}
OPTIONAL_BIASES = {"gpt-oss": ["attn_q", "attn_k", "attn_v"]}  # create_tensor_qkv: TENSOR_NOT_REQUIRED


def required_names(arch: str, n_blocks: int, n_dense_lead: int) -> set[str]:
    names = set(GLOBAL)
    for b in range(n_blocks):
        ffn = DENSE if b < n_dense_lead else ROUTED + MOE_EXTRA[arch]
        names |= {f"blk.{b}.{t}.weight" for t in ATTENTION[arch] + ffn}
        names |= {f"blk.{b}.{t}.bias" for t in REQUIRED_BIASES.get(arch, [])}
    return names


def optional_names(arch: str, n_blocks: int) -> set[str]:
    return {f"blk.{b}.{t}.bias" for b in range(n_blocks) for t in OPTIONAL_BIASES.get(arch, [])}


# --- the files, without llama.cpp ---------------------------------------------------------


@pytest.mark.parametrize("arch", ta.ARCHS)
def test_file_holds_every_tensor_the_loader_requires_and_no_other(tiny_files, arch):
    r = read(tiny_files[arch])
    assert field(r, "general.architecture") == arch
    n_blocks = field(r, f"{arch}.block_count")
    dense = field(r, f"{arch}.leading_dense_block_count") if arch == "deepseek2" else 0
    names = [t.name for t in r.tensors]
    required = required_names(arch, n_blocks, dense)
    assert required <= set(names), sorted(required - set(names))
    # llama.cpp refuses a file with tensors its loader did not create ("wrong number of tensors")
    assert set(names) <= required | optional_names(arch, n_blocks), sorted(set(names) - required)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("arch", ta.ARCHS)
def test_facts_describe_the_written_file(tiny_files, arch):
    r, facts = read(tiny_files[arch]), ta.facts(arch)
    shapes = ne(r)
    assert [t.name for t in r.tensors] == facts["tensor_names"]
    assert field(r, f"{arch}.block_count") == facts["n_blocks"]
    assert field(r, f"{arch}.expert_count") == facts["n_experts"]
    assert field(r, f"{arch}.expert_used_count") == facts["top_k"]
    assert facts["moe_blocks"] == [b for b in range(facts["n_blocks"]) if f"blk.{b}.ffn_gate_inp.weight" in shapes]
    assert set(facts["dense_blocks"]) | set(facts["moe_blocks"]) == set(range(facts["n_blocks"]))
    assert 8 <= facts["n_experts"] <= 16 and 0 < facts["top_k"] < facts["n_experts"]
    for name in facts["expert_tensor_names"]:
        assert shapes[name][-1] == facts["n_experts"], name  # experts are ggml's last dimension
    # every routed-expert weight is among them; shared experts and the router are not
    for b in facts["moe_blocks"]:
        for role in ("gate", "up", "down"):
            assert f"blk.{b}.ffn_{role}_exps.weight" in facts["expert_tensor_names"]
    assert not [n for n in facts["expert_tensor_names"] if "shexp" in n or "gate_inp" in n]


def test_the_exported_block_override_selects_block_one_expert_tensors_only():
    """llama.cpp matches -ot patterns with std::regex_search; Python's re.search agrees on
    this pattern. gpt-oss's expert biases match too, and so move with the weights."""
    pattern = re.compile(OT_BLOCK1.split("=")[0])
    for arch in ta.ARCHS:
        facts = ta.facts(arch)
        picked = {n for n in facts["tensor_names"] if pattern.search(n)}
        assert picked == {n for n in facts["expert_tensor_names"] if n.startswith("blk.1.")}
        assert picked, arch
    assert any(n.endswith("_exps.bias") for n in ta.facts("gpt-oss")["expert_tensor_names"])


@pytest.mark.parametrize("arch", ta.ARCHS)
def test_expert_shapes_follow_the_expert_keys(tiny_files, arch):
    r = read(tiny_files[arch])
    s = ne(r)
    h, e, f = field(r, f"{arch}.embedding_length"), field(r, f"{arch}.expert_count"), \
        field(r, f"{arch}.expert_feed_forward_length")
    assert s["token_embd.weight"] == (h, len(field(r, "tokenizer.ggml.tokens")))
    for b in range(field(r, f"{arch}.block_count")):
        if f"blk.{b}.ffn_gate_inp.weight" not in s:
            continue
        p = f"blk.{b}."
        assert s[p + "ffn_gate_inp.weight"] == (h, e)
        assert s[p + "ffn_gate_exps.weight"] == s[p + "ffn_up_exps.weight"] == (h, f, e)
        assert s[p + "ffn_down_exps.weight"] == (f, h, e)


def test_deepseek2_is_mla_with_a_plain_q_a_dense_lead_and_shared_experts(tiny_files):
    """src/models/deepseek2.cpp: not a "lite" block count, so q_lora_rank must be present;
    0 selects attn_q. MLA sizes: the cache row is kv_lora_rank + the rope dimension (one
    KV head); key/value_length_mla are the decompressed per-head sizes."""
    r = read(tiny_files["deepseek2"])
    s = ne(r)
    k = lambda key: field(r, f"deepseek2.{key}")  # noqa: E731
    n_head, kv_lora, rope = k("attention.head_count"), k("attention.kv_lora_rank"), k("rope.dimension_count")
    k_mla, v_mla = k("attention.key_length_mla"), k("attention.value_length_mla")
    assert k("block_count") not in (26, 27, 48) and k("attention.q_lora_rank") == 0
    assert k("attention.head_count_kv") == 1
    assert k("attention.key_length") == kv_lora + rope and k("attention.value_length") == kv_lora
    assert k("leading_dense_block_count") == 1 and k("expert_shared_count") == 2
    assert k("expert_weights_scale") == 1.0 and k("expert_gating_func") == 1  # softmax, as V2-Lite
    for b in range(k("block_count")):
        p = f"blk.{b}."
        assert s[p + "attn_q.weight"] == (k("embedding_length"), n_head * k_mla)
        assert s[p + "attn_kv_a_mqa.weight"] == (k("embedding_length"), kv_lora + rope)
        assert s[p + "attn_k_b.weight"] == (k_mla - rope, kv_lora, n_head)
        assert s[p + "attn_v_b.weight"] == (kv_lora, v_mla, n_head)
        assert s[p + "attn_output.weight"] == (n_head * v_mla, k("embedding_length"))
    assert s["blk.0.ffn_gate.weight"] == (k("embedding_length"), k("feed_forward_length"))
    shared = k("expert_feed_forward_length") * k("expert_shared_count")
    assert s["blk.1.ffn_gate_shexp.weight"] == (k("embedding_length"), shared)


def test_gpt_oss_has_sinks_biases_and_a_sliding_window(tiny_files):
    """src/models/openai-moe.cpp: Q/K/V are n_rot (= key_length) wide per head, one sink per
    head, biases on the router and experts; even blocks slide (default pattern 2)."""
    r = read(tiny_files["gpt-oss"])
    s = ne(r)
    k = lambda key: field(r, f"gpt-oss.{key}")  # noqa: E731
    h, hd, e, f = k("embedding_length"), k("attention.key_length"), k("expert_count"), k("expert_feed_forward_length")
    assert 0 < k("attention.sliding_window") < ta.CONTEXT
    assert "gpt-oss.attention.sliding_window_pattern" not in r.fields
    for b in range(k("block_count")):
        p = f"blk.{b}."
        assert s[p + "attn_q.weight"] == (h, k("attention.head_count") * hd)
        assert s[p + "attn_k.weight"] == s[p + "attn_v.weight"] == (h, k("attention.head_count_kv") * hd)
        assert s[p + "attn_sinks.weight"] == (k("attention.head_count"),)
        assert s[p + "ffn_gate_inp.bias"] == (e,)
        assert s[p + "ffn_gate_exps.bias"] == s[p + "ffn_up_exps.bias"] == (f, e)
        assert s[p + "ffn_down_exps.bias"] == (h, e)


def test_vocabulary_is_a_complete_byte_level_bpe(tiny_files):
    r = read(tiny_files["qwen3moe"])
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    assert field(r, "tokenizer.ggml.model") == "gpt2"
    assert len(tokens) == len(set(tokens)) == len(types) == field(r, "qwen3moe.vocab_size") == ta.VOCAB
    assert set(ta._byte_chars()) <= set(tokens)  # every byte has a token: any text tokenises
    for merge in field(r, "tokenizer.ggml.merges"):
        assert merge.replace(" ", "") in tokens
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        assert types[field(r, key)] == int(gguf.TokenType.CONTROL)


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path):
    a = ta.write_tiny(tmp_path / "a.gguf", "gpt-oss", seed=3)
    b = ta.write_tiny(tmp_path / "b.gguf", "gpt-oss", seed=3)
    c = ta.write_tiny(tmp_path / "c.gguf", "gpt-oss", seed=4)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes() and a.stat().st_size == c.stat().st_size


def test_tokenizer_none_writes_no_vocabulary(tmp_path):
    r = read(ta.write_tiny(tmp_path / "none.gguf", "deepseek2", tokenizer="none"))
    assert field(r, "tokenizer.ggml.model") == "none"
    assert "tokenizer.ggml.tokens" not in r.fields
    assert field(r, "deepseek2.vocab_size") == ne(r)["token_embd.weight"][1]


def test_unknown_arch_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown arch"):
        ta.write_tiny(tmp_path / "x.gguf", "llama")


# --- the server helper (tests/llama_server.py), against stand-in servers --------------------

# A stand-in llama-server: /health, /completion echoing the request, on the --port it is given.
FAKE_SERVER = """
import json, signal, sys, http.server
if "--ignore-sigterm" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
port = int(sys.argv[sys.argv.index("--port") + 1])
class Handler(http.server.BaseHTTPRequestHandler):
    def reply(self, obj):
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.reply({"status": "ok"})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.reply({"content": "x", "tokens": [7] * body["n_predict"], "request": body})
    def log_message(self, *args):
        print("served", *args, flush=True)
print("fake server on", port, flush=True)
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def test_run_server_waits_for_health_completes_and_stops(tmp_path):
    import signal
    import sys

    with run_server([sys.executable, "-c", FAKE_SERVER]) as srv:
        assert srv.base_url.startswith("http://127.0.0.1:")
        answer = srv.complete()
        log = srv.log_path
    assert answer["tokens"] == [7] * 4
    assert answer["request"] == {"prompt": [1, 2, 3], "n_predict": 4, "ignore_eos": True, "return_tokens": True,
                                 "temperature": 0.0}
    assert srv.process.returncode == -signal.SIGTERM
    assert not log.exists()  # a clean run leaves no log behind


def test_run_server_reports_the_log_of_a_server_that_dies(tmp_path):
    import sys

    dies = "print('GGML_ASSERT(something) failed', flush=True); raise SystemExit(3)"
    with pytest.raises(ServerError, match=r"(?s)exited 3.*GGML_ASSERT\(something\)"):
        with run_server([sys.executable, "-c", dies], log_dir=tmp_path):
            pass


def test_run_server_kills_a_server_that_ignores_sigterm(tmp_path):
    import signal
    import sys

    with run_server([sys.executable, "-c", FAKE_SERVER, "--ignore-sigterm"], stop_timeout=0.5,
                    log_dir=tmp_path) as srv:
        srv.complete()
    assert srv.process.returncode == -signal.SIGKILL


def test_server_address_is_forced_to_localhost():
    argv = ["llama-server", "-m", "f.gguf", "--host", "0.0.0.0", "--port", "8080", "--port=9"]
    assert with_address(argv, "127.0.0.1", 5555) == ["llama-server", "-m", "f.gguf", "--host", "127.0.0.1",
                                                     "--port", "5555"]


# --- llama-bench ----------------------------------------------------------------------------


def _expected_override(arch: str, variant: str) -> set[str]:
    experts = ta.facts(arch)["expert_tensor_names"]
    block = {"plain": None, "ot_block1": 1, "ncmoe1": 0}[variant]
    return set() if block is None else {n for n in experts if n.startswith(f"blk.{block}.")}


VARIANTS = {"plain": [], "ot_block1": ["-ot", OT_BLOCK1], "ncmoe1": ["-ncmoe", "1"]}


def overridden(log: str) -> dict[str, str]:
    """Tensor -> buffer type, from llama-model-loader.cpp's debug lines (seen with -v)."""
    return {m[1]: m[2] for m in map(OVERRIDE_LINE.search, log.splitlines()) if m}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("arch", ta.ARCHS)
def test_llama_bench_runs_each_arch(tiny_files, arch, variant):
    bench = llama_program("llama-bench")
    argv = [str(bench), "-m", str(tiny_files[arch]), *BENCH_ARGS, *VARIANTS[variant], "-o", "json", "-v"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    why = f"{' '.join(argv)}\nexit {done.returncode}; stderr tail:\n{done.stderr[-3000:]}"
    assert done.returncode == 0, why
    rows = json.loads(done.stdout)
    assert sorted((row["n_prompt"], row["n_gen"]) for row in rows) == [(0, 4), (8, 0)], why
    assert all(row["avg_ts"] > 0 and row["model_type"].startswith(arch) for row in rows), why
    moved = overridden(done.stderr)
    assert set(moved) == _expected_override(arch, variant), why
    assert set(moved.values()) <= {"CPU"}
    if arch == "deepseek2" and variant == "ncmoe1":
        assert not moved  # block 0 is the dense lead: nothing to move


# --- llama-server ---------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ta.ARCHS)
def test_llama_server_answers_completions_and_stops_on_sigterm(tiny_files, arch, tmp_path):
    server = llama_program("llama-server")
    vocab = ta.bpe_vocab()
    with run_server([str(server), "-m", str(tiny_files[arch]), *SERVER_ARGS], log_dir=tmp_path) as srv:
        status, health = srv.get("/health")
        assert (status, health) == (200, {"status": "ok"}), srv.explain("health")
        by_ids = srv.complete({"prompt": [1, 2, 3], "n_predict": 4, "ignore_eos": True})
        assert by_ids["tokens_evaluated"] == 3 and by_ids["tokens_predicted"] == 4, srv.explain(str(by_ids))
        assert len(by_ids["tokens"]) == 4 and all(0 <= t < ta.VOCAB for t in by_ids["tokens"])
        assert isinstance(by_ids["content"], str)
        status, tokenized = srv.post("/tokenize", {"content": " the"})
        assert (status, tokenized) == (200, {"tokens": [vocab.tokens.index("Ġthe")]}), srv.explain(str(tokenized))
        text = "the cat in the hat"
        _, expected = srv.post("/tokenize", {"content": text})
        by_text = srv.complete({"prompt": text, "n_predict": 2, "ignore_eos": True})
        assert by_text["tokens_evaluated"] == len(expected["tokens"]) and len(by_text["tokens"]) == 2
    assert srv.process.returncode == 0, srv.explain("exit status after SIGTERM")


@pytest.mark.parametrize("arch", ta.ARCHS)
def test_llama_server_cpu_moe_moves_every_routed_expert_tensor(tiny_files, arch, tmp_path):
    server = llama_program("llama-server")
    argv = [str(server), "-m", str(tiny_files[arch]), *SERVER_ARGS, "--cpu-moe", "-v"]
    with run_server(argv, log_dir=tmp_path) as srv:
        answer = srv.complete({"prompt": [5, 6], "n_predict": 2, "ignore_eos": True})
        assert len(answer["tokens"]) == 2, srv.explain(str(answer))
        moved = overridden(srv.log_tail(10**8))
        assert set(moved) == set(ta.facts(arch)["expert_tensor_names"]), srv.explain("overrides")
        assert set(moved.values()) == {"CPU"}
