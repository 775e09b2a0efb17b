"""A hostile Hub on 127.0.0.1 (issue 47, defects 3-7): every Hub call under one policy
(cope_tui/sources/hub_policy.py): a deadline the user sets, Retry-After honoured only up to
it, declared sizes checked before the body, every failure one line naming the URL and the
fault, a damaged cached config.json set aside and fetched again, and huggingface_hub's
agent registry (a crash in every call when the Hub answers it with the wrong shape) unused.

The server (tests/hub_server.py) drops connections, stalls, trickles, loops redirects and
file lists, and asks to retry in an hour. The deadline is set to 2 s here
(COPE_HUB_TIMEOUT_S) so a wait it cuts short ends soon; nothing asserts how long anything took.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")

from cope_tui.cli import main  # noqa: E402
from cope_tui.sources import hub_download  # noqa: E402
from cope_tui.sources.hub_model import HubCacheWarning, model_from_hub_config  # noqa: E402
from cope_tui.sources.hub_policy import DEADLINE_ENV, deadline_s  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from tests.hub_server import FakeHub  # noqa: E402
from tests.test_hub_model import CONFIG  # noqa: E402

REPO = "org/tiny-moe"
TRACES = "org/traces"
CSV = b"0,0,1,2\n"  # any bytes: these tests never get as far as reading a trace


@pytest.fixture
def hub(hf_env, monkeypatch, tmp_path):
    monkeypatch.setenv(DEADLINE_ENV, "2")
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cope-cache"))
    files = {("model", REPO, "config.json"): json.dumps(CONFIG).encode(),
             ("dataset", TRACES, "data/decode.csv"): CSV * 1000}
    with FakeHub(files) as server:
        hf_env(server.endpoint)
        yield server


def _one_line(exc: pytest.ExceptionInfo, url_part: str) -> str:
    text = str(exc.value)
    assert "\n" not in text and url_part in text, text
    return text


def _config_url(hub: FakeHub) -> str:
    return hub.url("model", REPO, "config.json")


# --- config.json (cope_tui/sources/hub_model.py) -----------------------------------------


@pytest.mark.parametrize("failure, says", [
    (dict(drop=True, times=None), "RemoteProtocolError: Server disconnected without sending a response"),
    (dict(drop=True, methods=("GET",), times=None), ""),  # "Server disconnected", or the deadline on a slow machine
    (dict(redirect_loop=True, times=None), "TooManyRedirects"),
    (dict(status=429, retry_after="3600", times=None), "HTTP 429, and the Hub asks to retry in 3601 s, past the 2 s "
                                                       "deadline (COPE_HUB_TIMEOUT_S)"),
    (dict(status=503, retry_after="3600", times=None), "HTTP 503, and the Hub asks to retry in 3601 s"),
    (dict(delay_s=30, methods=("HEAD",), times=None), "not done within 2 s; COPE_HUB_TIMEOUT_S sets the deadline"),
    (dict(stall_s=30, methods=("GET",), times=None), "not done within 2 s"),
    (dict(trickle_s=0.2, methods=("GET",), times=None), "not done within 2 s"),
], ids=["drop", "drop-get", "redirect-loop", "retry-after-429", "retry-after-503", "head-never", "stall", "trickle"])
def test_config_json_faults_are_one_line_naming_the_url(hub, tmp_path, failure, says):
    hub.fail("model", REPO, "config.json", **failure)
    with pytest.raises(CopeInputError) as exc:
        model_from_hub_config(REPO)
    text = _one_line(exc, _config_url(hub))
    assert text.startswith(f"{REPO}/config.json: the Hub at {_config_url(hub)}: ") and says in text, text
    # nothing half-fetched stays in the Hub cache
    assert not list((tmp_path / "hf-cache").rglob("*.incomplete"))
    assert not [p for p in (tmp_path / "hf-cache").rglob("config.json")]


def test_a_short_wait_is_said_and_then_the_answer_used(hub, capsys, monkeypatch):
    monkeypatch.setenv(DEADLINE_ENV, "30")
    # the client asks once without retries (a fast fall-back to its cache), then with them
    hub.fail("model", REPO, "config.json", status=503, retry_after="1", times=2)
    model = model_from_hub_config(REPO)
    assert model.n_blocks == CONFIG["num_hidden_layers"]
    said = capsys.readouterr().err
    assert f"cope: the Hub at {_config_url(hub)}: HTTP 503; retrying in 2 s (deadline 30 s, COPE_HUB_TIMEOUT_S)" in said


def test_a_config_declared_huge_is_refused_before_its_body(hub, tmp_path):
    hub.fail("model", REPO, "config.json", declared_length=3 * 2**30, times=None)
    with pytest.raises(CopeInputError) as exc:
        model_from_hub_config(REPO)
    assert str(exc.value) == (f"{REPO}/config.json: the Hub declares config.json at 3,221,225,472 bytes, more than "
                              "a config.json takes (8 MiB): not downloaded")
    assert hub.bytes_sent("config.json") == 0  # no GET at all
    assert not [p for p in (tmp_path / "hf-cache").rglob("*") if p.is_file()]


def _cached_config(tmp_path: Path) -> Path:
    [entry] = [p for p in (tmp_path / "hf-cache").rglob("config.json") if "snapshots" in p.parts]
    return entry


def test_a_damaged_cached_config_is_set_aside_and_fetched_again(hub, tmp_path, monkeypatch):
    model_from_hub_config(REPO)
    entry = _cached_config(tmp_path)
    blob = Path(os.path.realpath(entry))
    blob.write_text("{ damaged")
    with pytest.warns(HubCacheWarning, match=r"the Hub cache's copy \(.*config\.json\) cannot be used .*moved to "):
        model = model_from_hub_config(REPO)
    assert model.n_blocks == CONFIG["num_hidden_layers"]
    assert json.loads(Path(os.path.realpath(_cached_config(tmp_path))).read_text()) == CONFIG
    assert [p.name for p in blob.parent.iterdir() if ".corrupt-" in p.name]  # kept for a look
    # offline, the damaged copy cannot be replaced: one line saying it is the cached copy, and where
    Path(os.path.realpath(_cached_config(tmp_path))).write_text("[]")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.warns(HubCacheWarning), pytest.raises(CopeInputError) as exc:
        model_from_hub_config(REPO)
    text = str(exc.value)
    assert "\n" not in text and "the Hub cache's copy of config.json (" in text and "(offline)" in text


def test_a_wrong_shaped_agent_registry_breaks_no_hub_call(hub, tmp_path, monkeypatch):
    from huggingface_hub import constants
    from huggingface_hub.utils import _detect_agent

    hub.agent_registry = b'{"standardEnvVars": 7, "harnesses": ["not", "a", "map"]}'
    cached = tmp_path / "agent-harnesses.json"
    cached.write_text('{"standardEnvVars": 7, "harnesses": ["not", "a", "map"]}')
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(cached))
    monkeypatch.setattr(_detect_agent, "_registry", None)
    monkeypatch.setenv("AI_AGENT", "x")
    assert model_from_hub_config(REPO).n_blocks == CONFIG["num_hidden_layers"]
    assert all(r.path != "/api/agent-harnesses" for r in hub.requests)


def test_the_deadline_is_the_users_and_checked(monkeypatch):
    monkeypatch.delenv(DEADLINE_ENV, raising=False)
    assert deadline_s() == 60.0
    monkeypatch.setenv(DEADLINE_ENV, "7.5")
    assert deadline_s() == 7.5
    for bad in ("0", "-1", "nan", "soon", "1e9"):
        monkeypatch.setenv(DEADLINE_ENV, bad)
        with pytest.raises(CopeInputError, match=rf"^{DEADLINE_ENV}="):
            deadline_s()


# --- trace pull: its size check, file list and download (cope_tui/sources/hub_download.py) --


@pytest.mark.parametrize("failure, says", [
    (dict(drop=True, times=None), "Server disconnected"),
    (dict(redirect_loop=True, times=None), "TooManyRedirects"),
    (dict(status=429, retry_after="3600", times=None), "asks to retry in 3601 s"),
    (dict(delay_s=30, methods=("HEAD",), times=None), "not done within 2 s"),
], ids=["drop", "redirect-loop", "retry-after", "head-never"])
def test_the_size_check_faults_are_one_line(hub, failure, says):
    hub.fail("dataset", TRACES, "data/decode.csv", **failure)
    with pytest.raises(CopeInputError) as exc:
        hub_download.file_size(TRACES, "data/decode.csv", "dataset", None)
    assert says in _one_line(exc, hub.url("dataset", TRACES, "data/decode.csv"))


def test_a_file_list_that_never_ends_stops_at_the_deadline(hub):
    hub.tree_loop = True
    with pytest.raises(CopeInputError) as exc:
        hub_download.list_files(TRACES, "dataset", None)
    assert "not done within 2 s" in _one_line(exc, f"/api/datasets/{TRACES}/tree/main")


def test_a_stalled_download_stops_and_keeps_nothing(hub, tmp_path):
    hub.fail("dataset", TRACES, "data/decode.csv", stall_s=30, truncate_to=100, methods=("GET",), times=None)
    with pytest.raises(CopeInputError) as exc:
        hub_download.download(TRACES, "data/decode.csv", "dataset", None)
    assert "no byte for 2 s" in _one_line(exc, hub.url("dataset", TRACES, "data/decode.csv"))
    assert not list((tmp_path / "hf-cache").rglob("*.incomplete"))


def test_the_cli_says_a_hub_fault_in_one_line_and_exits_non_zero(hub, capsys):
    hub.fail("model", REPO, "config.json", status=429, retry_after="3600", times=None)
    code = main(["advise", "--model", REPO, "--gpu", "rtx-4090", "--tokens", "20", "--json"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith(f"cope: error: {REPO}/config.json: the Hub at ")


def test_a_push_that_gets_no_answer_stops_at_the_deadline(hub, tmp_path, monkeypatch, capsys):
    import dataclasses

    from engine.models.catalog import get_model
    from engine.traces import save_trace
    from engine.traces.synthetic import SyntheticSettings, synthetic_trace

    trace = synthetic_trace(get_model("olmoe-1b-7b"), SyntheticSettings(tokens=8, seed=1, predictor_accuracy=None))
    path = tmp_path / "r.cope.npz"
    save_trace(dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, origin="recorded")), path)
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    hub.post_delay_s = 30
    assert main(["trace", "push", "someone/routing", "--trace", str(path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("cope: error")]
    assert len(err) == 1 and err[0].startswith(f"cope: error: someone/routing: the Hub at {hub.endpoint}/api/repos/create"
                                               ": not done within 2 s"), err
