"""No network: Hub commands fail within seconds with one line (no retry spam), use the Hub
cache when they can, and HF_HUB_OFFLINE=1 is honoured. Only 127.0.0.1, never the internet."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")
from cope_tui.cli import EXIT_INPUT, main  # noqa: E402
from cope_tui.sources import hub_net  # noqa: E402
from cope_tui.sources.hub_model import model_from_hub_config  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from tests.hub_server import FakeHub  # noqa: E402
from tests.test_hub_model import CONFIG, REPO  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def silent_endpoint():
    """An http://127.0.0.1:PORT that takes connections and never answers (a dead proxy,
    a firewall that swallows replies)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(hub_net, "REACH_TIMEOUT_S", 0.3)


@pytest.mark.parametrize("argv", [
    ["advise", "--model", "org/none", "--tokens", "20"],
    ["advise", "--model", "org/none", "--gguf-file", "m.gguf", "--tokens", "20"],
    ["trace", "pull", "org/none"],
    ["trace", "pull", "org/none/decode.csv", "--model", "qwen3-30b-a3b"],
])
def test_a_hub_that_never_answers_gives_one_line_without_retries(argv, hf_env, quick, silent_endpoint, capsys):
    hf_env(silent_endpoint)
    assert main(argv) == EXIT_INPUT
    err = capsys.readouterr().err
    assert f"cannot reach the Hugging Face Hub at {silent_endpoint} (no answer within 0.3 s)" in err
    assert "Retrying" not in err and "thrown while requesting" not in err
    assert err.count("cope: error:") == 1 and "HF_HUB_OFFLINE=1" in err


def test_the_hub_cache_answers_when_the_hub_does_not(hf_env, quick, silent_endpoint):
    with FakeHub({("model", REPO, "config.json"): json.dumps(CONFIG).encode()}) as hub:
        hf_env(hub.endpoint)
        online = model_from_hub_config(REPO)
    hf_env(silent_endpoint)
    hub_net._ASKED.clear()
    cached = model_from_hub_config(REPO)  # no network: the cached copy, not an error
    assert cached.n_blocks == online.n_blocks == CONFIG["num_hidden_layers"]
    with pytest.raises(CopeInputError, match="config.json is not in the Hub cache"):
        model_from_hub_config("org/other")


def test_hf_hub_offline_is_honoured_from_the_environment(tmp_path, silent_endpoint):
    # A fresh process: huggingface_hub reads HF_HUB_OFFLINE when it is imported.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": silent_endpoint, "HF_HOME": str(tmp_path / "hf"),
           "COPE_CACHE_DIR": str(tmp_path / "cope"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "cope_tui.cli", "advise", "--model", "org/none", "--tokens", "20"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == EXIT_INPUT
    assert "offline mode (HF_HUB_OFFLINE)" in done.stderr and done.stderr.count("\n") == 1
