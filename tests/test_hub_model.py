"""`--model org/name` (and `--gguf-file`) against a local fake Hub on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("huggingface_hub")
from huggingface_hub import constants as hf_constants  # noqa: E402
from huggingface_hub import hf_hub_download  # noqa: E402

from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request  # noqa: E402
from cope_tui.sources import hub_model  # noqa: E402
from cope_tui.sources.gguf_model import model_from_gguf  # noqa: E402
from cope_tui.sources.hub_model import model_from_hub_config, model_from_hub_gguf  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from tests.hub_server import FakeHub, refused_endpoint  # noqa: E402
from tests.test_gguf_model import write_deepseek_like  # noqa: E402

CONFIG = {
    "model_type": "qwen3_moe",
    "architectures": ["Qwen3MoeForCausalLM"],
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 128,
    "intermediate_size": 512,
    "vocab_size": 1000,
    "tie_word_embeddings": False,
}
REPO = "org/tiny-moe"
GGUF_REPO = "org/tiny-moe-GGUF"


@pytest.fixture
def gguf_files(tmp_path):
    single = write_deepseek_like(tmp_path / "tiny-Q4_K_M.gguf").close()
    (tmp_path / "split").mkdir()
    write_deepseek_like(tmp_path / "split" / "tiny-Q4_K_M.gguf", split_max_tensors=20).close()
    shards = sorted((tmp_path / "split").glob("*.gguf"))
    return single, shards


@pytest.fixture
def hub(hf_env, gguf_files):
    single, shards = gguf_files
    files = {
        ("model", REPO, "config.json"): json.dumps(CONFIG).encode(),
        ("model", GGUF_REPO, "tiny-Q4_K_M.gguf"): single.read_bytes(),
        ("model", GGUF_REPO, "README.md"): b"# no config.json here\n",
        ("model", GGUF_REPO, "not-a-model.gguf"): b"<html>nope</html>" * 10,
        ("model", GGUF_REPO, "cut.gguf"): single.read_bytes()[:300],
    }
    for shard in shards:
        files[("model", GGUF_REPO, f"Q4_K_M/{shard.name}")] = shard.read_bytes()
    with FakeHub(files) as server:
        hf_env(server.endpoint)
        yield server


# --- config.json ----------------------------------------------------------------------


def test_repo_id_fetches_only_config_json(hub):
    model = model_from_hub_config(REPO)
    assert model.hf_repo == REPO and model.n_routed_experts == 8 and model.exact_bytes is None
    assert "config.json of org/tiny-moe on the Hugging Face Hub" in model.source
    assert {r.path for r in hub.requests} == {f"/{REPO}/resolve/main/config.json"}
    assert all(r.authorization is None for r in hub.requests)

    request = build_request(PlanChoices(model=REPO, cpu="desktop-ddr5", tokens=10))
    assert request.model.hf_repo == REPO
    assert any("quantization: Q4_K_M" in n for n in request.notes)


def test_token_is_sent(hub, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_fake_token")
    model_from_hub_config(REPO)
    assert any(r.authorization == "Bearer hf_fake_token" for r in hub.requests)


def test_catalog_repo_id_needs_no_network(hub):
    request = build_request(PlanChoices(model="Qwen/Qwen3-30B-A3B", cpu="desktop-ddr5", tokens=10))
    assert request.model.id == "qwen3-30b-a3b" and hub.requests == []


def test_missing_repo_and_missing_config(hub):
    with pytest.raises(CopeInputError, match=r"^org/nope/config\.json: repository org/nope not found on the Hub"):
        model_from_hub_config("org/nope")
    with pytest.raises(CopeInputError, match=rf"^{GGUF_REPO}/config\.json: repository {GGUF_REPO} has no file "
                                             r"config\.json \(a GGUF-only repo\? add --gguf-file"):
        build_request(PlanChoices(model=GGUF_REPO, cpu="desktop-ddr5"))


def test_server_error(hub):
    hub.fail("model", REPO, "config.json", status=500, times=None)
    with pytest.raises(CopeInputError, match=r"org/tiny-moe/config\.json: the Hub at http://127\.0\.0\.1:\d+ "
                                             r"answered HTTP 500"):
        model_from_hub_config(REPO)


def test_connection_refused(hf_env):
    endpoint = refused_endpoint()
    hf_env(endpoint)
    with pytest.raises(CopeInputError, match=rf"^{REPO}/config\.json: cannot reach the Hugging Face Hub at "
                                             rf"{endpoint} .* and config\.json is not in the Hub cache"):
        model_from_hub_config(REPO)


def test_offline_mode_uses_the_cache(hub, hf_env, monkeypatch):
    online = model_from_hub_config(REPO)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    hf_env(refused_endpoint())
    offline = model_from_hub_config(REPO)
    assert offline.n_blocks == online.n_blocks and offline.hf_repo == REPO
    with pytest.raises(CopeInputError, match=r"org/other/config\.json: offline mode \(HF_HUB_OFFLINE\) and "
                                             r"config\.json of org/other is not in the Hub cache"):
        model_from_hub_config("org/other")


# --- a remote GGUF -----------------------------------------------------------------------


def test_remote_gguf_reads_only_the_header(hub, gguf_files, monkeypatch):
    single, _ = gguf_files
    monkeypatch.setattr(hub_model, "FIRST_READ_BYTES", 256)  # force several growing reads
    model = model_from_hub_gguf(GGUF_REPO, "tiny-Q4_K_M.gguf")
    local = model_from_gguf(single)
    assert model.exact_bytes.expert_bytes_per_layer == local.exact_bytes.expert_bytes_per_layer
    assert model.exact_bytes.shared_layer_bytes == local.exact_bytes.shared_layer_bytes
    assert model.non_expert_bytes(None) == local.non_expert_bytes(None)
    assert model.hf_repo == GGUF_REPO and "header read remotely" in model.source
    gets = [r for r in hub.requests if r.method == "GET"]
    assert len(gets) >= 3 and all(r.range and r.status == 206 for r in gets)
    assert hub.bytes_sent("tiny-Q4_K_M.gguf") < single.stat().st_size / 4


def test_remote_gguf_through_build_request_refuses_quant(hub):
    request = build_request(PlanChoices(model=GGUF_REPO, gguf_file="tiny-Q4_K_M.gguf", cpu="desktop-ddr5", tokens=10))
    assert request.model.exact_bytes is not None and request.quant.name == "Q4_K_M"
    assert any("exact from the GGUF tensor table" in n for n in request.notes)
    with pytest.raises(CopeInputError, match="--quant Q8_0: the model comes from a GGUF file"):
        build_request(PlanChoices(model=GGUF_REPO, gguf_file="tiny-Q4_K_M.gguf", quant="Q8_0", cpu="desktop-ddr5"))


def test_remote_split_gguf(hub, gguf_files):
    single, shards = gguf_files
    model = model_from_hub_gguf(GGUF_REPO, f"Q4_K_M/{shards[0].name}")
    assert model.exact_bytes.expert_bytes_per_layer == model_from_gguf(single).exact_bytes.expert_bytes_per_layer
    assert {r.path.rsplit("/", 1)[1] for r in hub.requests} == {s.name for s in shards}


def test_remote_gguf_server_ignoring_ranges(hub, gguf_files, monkeypatch):
    monkeypatch.setattr(hub_model, "FIRST_READ_BYTES", 256)
    hub.fail("model", GGUF_REPO, "tiny-Q4_K_M.gguf", ignore_range=True, times=None)
    model = model_from_hub_gguf(GGUF_REPO, "tiny-Q4_K_M.gguf")
    local = model_from_gguf(gguf_files[0]).exact_bytes
    assert model.exact_bytes.expert_bytes_per_layer == local.expert_bytes_per_layer
    assert all(r.status == 200 for r in hub.requests)


def test_remote_gguf_errors(hub):
    with pytest.raises(CopeInputError, match=rf"^{GGUF_REPO}/nope\.gguf: repository {GGUF_REPO} has no file nope\.gguf$"):
        model_from_hub_gguf(GGUF_REPO, "nope.gguf")
    with pytest.raises(CopeInputError, match=r"^org/ghost/m\.gguf: repository org/ghost not found on the Hub"):
        model_from_hub_gguf("org/ghost", "m.gguf")
    with pytest.raises(CopeInputError, match=rf"^{GGUF_REPO}/not-a-model\.gguf: not a GGUF file"):
        model_from_hub_gguf(GGUF_REPO, "not-a-model.gguf")
    with pytest.raises(CopeInputError, match=rf"^{GGUF_REPO}/cut\.gguf: truncated GGUF header: the header needs "
                                             r"more than the file's 300 bytes"):
        model_from_hub_gguf(GGUF_REPO, "cut.gguf")
    with pytest.raises(CopeInputError, match=r"split GGUF|has no file"):
        model_from_hub_gguf(GGUF_REPO, "Q4_K_M/tiny-Q4_K_M-00001-of-00009.gguf")
    hub.fail("model", GGUF_REPO, "tiny-Q4_K_M.gguf", status=401)
    with pytest.raises(CopeInputError, match=r"refused access .* \(HTTP 401\); .*HF_TOKEN"):
        model_from_hub_gguf(GGUF_REPO, "tiny-Q4_K_M.gguf")


def test_remote_gguf_connection_refused_says_what_to_download(hf_env):
    endpoint = refused_endpoint()
    hf_env(endpoint)
    with pytest.raises(CopeInputError, match=rf"^{GGUF_REPO}/m\.gguf: cannot reach the Hugging Face Hub at {endpoint} "
                                             rf".*download it \(`hf download {GGUF_REPO} m\.gguf --local-dir \.`\)"):
        model_from_hub_gguf(GGUF_REPO, "m.gguf")


def test_remote_gguf_offline_reads_a_cached_file(hub, hf_env, gguf_files, monkeypatch):
    hf_hub_download(GGUF_REPO, "tiny-Q4_K_M.gguf", endpoint=hub.endpoint)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", True)
    hf_env(refused_endpoint())
    model = model_from_hub_gguf(GGUF_REPO, "tiny-Q4_K_M.gguf")
    assert model.exact_bytes.expert_bytes_per_layer == model_from_gguf(gguf_files[0]).exact_bytes.expert_bytes_per_layer
    with pytest.raises(CopeInputError, match=r"/other\.gguf: offline mode \(HF_HUB_OFFLINE\) and the file is not in the Hub cache"):
        model_from_hub_gguf(GGUF_REPO, "other.gguf")


# --- the fake hub itself (its other users rely on these) ------------------------------------


def test_fake_hub_serves_datasets_ranges_and_failures(hf_env, tmp_path):
    import httpx2

    data = bytes(range(256)) * 4
    with FakeHub({("dataset", "org/traces", "a/trace.csv"): data}) as hub:
        url = hub.url("dataset", "org/traces", "a/trace.csv")
        assert httpx2.get(url).content == data
        r = httpx2.get(url, headers={"Range": "bytes=10-19"})
        assert r.status_code == 206 and r.content == data[10:20]
        assert r.headers["Content-Range"] == f"bytes 10-19/{len(data)}"
        assert httpx2.get(url, headers={"Range": "bytes=5000-"}).status_code == 416
        assert httpx2.get(hub.url("model", "org/traces", "a/trace.csv")).headers["X-Error-Code"] == "RepoNotFound"
        assert httpx2.get(hub.url("dataset", "org/traces", "b.csv")).headers["X-Error-Code"] == "EntryNotFound"
        tree = httpx2.get(f"{hub.endpoint}/api/datasets/org/traces/tree/main").json()
        assert tree[0]["path"] == "a/trace.csv" and tree[0]["size"] == len(data)

        path = hf_hub_download("org/traces", "a/trace.csv", repo_type="dataset", endpoint=hub.endpoint,
                               cache_dir=tmp_path / "c")
        assert open(path, "rb").read() == data
        # A one-off truncated body: huggingface_hub retries and gets the whole file.
        hub.fail("dataset", "org/traces", "a/trace.csv", truncate_to=100, methods=("GET",))
        path = hf_hub_download("org/traces", "a/trace.csv", repo_type="dataset", endpoint=hub.endpoint,
                               cache_dir=tmp_path / "d")
        assert open(path, "rb").read() == data
        gets = [r for r in hub.requests if r.method == "GET" and r.path.endswith("trace.csv")]
        assert gets[-2].bytes_sent == 100 and gets[-1].bytes_sent == len(data)
