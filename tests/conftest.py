from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

SHARED_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


def pytest_configure(config):
    """An xdist worker's environment holds COLUMNS=80 and LINES=24 (pytest-xdist 3.8; a serial
    run's has neither): the app the tmux test starts sized itself to them, not to its
    120x40 pane. A worker drops them, so what a test or a program it starts sees of the
    terminal is what it sees in a serial run."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        for name in ("COLUMNS", "LINES"):
            os.environ.pop(name, None)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    """The pool-path variants of one replay case (tests/test_replay_equivalence.py's
    `pool_path`) share an xdist group, so `--dist loadgroup` runs them on one worker, where
    the plain reference each compares with is computed once (that file caches it per
    process). Without xdist the mark does nothing."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "pool_path" in params:
            rest = ",".join(f"{k}={v}" for k, v in sorted(params.items()) if k != "pool_path")
            item.add_marker(pytest.mark.xdist_group(f"{item.originalname}[{rest}]"))


@pytest.fixture
def shared_traces() -> Path:
    """The real routing data beside the checkout; tests that need it skip without it."""
    if not SHARED_TRACES.is_dir():
        pytest.skip(f"real routing data not found at {SHARED_TRACES}")
    return SHARED_TRACES


@pytest.fixture(scope="session", autouse=True)
def _empty_cope_cache(tmp_path_factory):
    """COPE_CACHE_DIR points at a fresh, empty folder for the whole session, so `cope advise`
    without --trace falls back to synthetic routing and no test sees the user's cache; so does
    COPE_CONFIG_DIR, so no app a test starts reads or writes the user's remembered plan."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COPE_CACHE_DIR", str(tmp_path_factory.mktemp("cope-cache")))
        mp.setenv("COPE_CONFIG_DIR", str(tmp_path_factory.mktemp("cope-config")))
        yield


@pytest.fixture(autouse=True)
def _no_last_plan():
    """Each test starts with no recorded plan: `cope advise` records the one that export,
    verify and estimate reuse (cope_tui/service/last_plan.py), and no test may depend on
    which ran before it."""
    from cope_tui.service.last_plan import plan_path

    plan_path().unlink(missing_ok=True)
    yield


@pytest.fixture
def hf_env(tmp_path, monkeypatch):
    """A private Hub cache, no token, online; returns a function pointing the client at an endpoint.

    Skips huggingface_hub's retry waits (1 + 2 + 4 + 8 + 8 s)."""
    import time
    import types

    hf_constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    from huggingface_hub.utils import _http

    monkeypatch.setattr(_http, "time", types.SimpleNamespace(**{**vars(time), "sleep": lambda s: None}))
    from cope_tui.sources import hub_net

    monkeypatch.setattr(hub_net, "_ASKED", {})  # each test's endpoint is asked afresh

    def point_at(endpoint: str) -> None:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)

    return point_at


@pytest.fixture(autouse=True)
def _no_installed_runtimes(request, monkeypatch):
    """`cope advise`, `export` and `detect` see no installed runtime, so what they say to
    run now does not depend on the machine the tests run on; tests marked `real_runtimes`
    look for real (or fake) ones."""
    if request.node.get_closest_marker("real_runtimes") is not None:
        return
    from probes.runtimes import RuntimeScan

    monkeypatch.setattr("cope_tui.service.runtimes.scan_runtimes",
                        lambda llama_bin=None: RuntimeScan((), ("tests: no runtime looked for",)))


@pytest.fixture(scope="module")
def anyio_backend():
    """The app's tests run on asyncio (Textual's loop); module-scoped so that one event loop
    holds a module's shared app (`first_ranking`) across its tests."""
    return "asyncio"


@contextlib.asynccontextmanager
async def settled_app(folder: Path, size: tuple[int, int]):  # type: ignore[no-untyped-def]
    """The app on the default stubs and choices (tests/test_app.py), with the caches
    `app_caches` gives it, run at `size` until its first ranking is shown; yields the Pilot."""
    pytest.importorskip("textual")
    from tests.test_app import make_app, make_services, settle  # defers textual, as the app tests do

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COPE_CACHE_DIR", str(folder / "cache"))
        mp.setenv("HF_HUB_OFFLINE", "1")
        app = make_app(make_services())
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            yield pilot


@pytest.fixture(scope="module")
async def first_ranking(tmp_path_factory):  # type: ignore[no-untyped-def]
    """One app per test module, at 120x40, on its first ranking: booting the app is most of
    an app test's time, and tests that only read what it shows need no app of their own. A
    test that presses a key or changes a choice boots its own (`make_app`)."""
    async with settled_app(tmp_path_factory.mktemp("first-ranking"), (120, 40)) as pilot:
        yield pilot


@pytest.fixture(scope="module")
async def first_ranking_80x24(tmp_path_factory):  # type: ignore[no-untyped-def]
    """`first_ranking` at 80x24 (the compact table)."""
    async with settled_app(tmp_path_factory.mktemp("first-ranking-80x24"), (80, 24)) as pilot:
        yield pilot


@pytest.fixture
def app_caches(tmp_path, monkeypatch):
    """An empty cache folder of the test's own and the Hub offline: what the app tests start from."""
    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tiny_model_folder(tmp_path_factory):
    """A tiny Qwen3-MoE saved with a word-level tokenizer built on the spot (no download)."""
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from tests.test_record import _tiny

    folder = tmp_path_factory.mktemp("tiny-qwen3-moe")
    words = ["[UNK]"] + [f"w{i}" for i in range(40)] + ["what", "is", "the", "of", "a", "and", "to", "x"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(folder)
    _tiny("qwen3_moe").save_pretrained(folder)
    return folder


@pytest.fixture
def without_recorded_clock(monkeypatch):
    """A function taking one CPU preset's recorded base clock out of the compute table for the
    test (every preset records one), so what a missing clock costs can still be seen."""
    import copy

    from engine.hardware import cpu_compute

    def drop(preset_id: str) -> None:
        table = copy.deepcopy(cpu_compute._table())
        for key in ("base_clock_hz", "boost_clock_hz", "clock_source"):
            del table["cpus"][preset_id][key]
        monkeypatch.setattr(cpu_compute, "_table", lambda: table)

    return drop


@pytest.fixture
def run_cope(tmp_path, monkeypatch, capsys):
    """`cope ARGS...` in this process, offline, with a cache folder of its own: returns
    (exit code, stdout, stderr)."""
    from cope_tui.cli import main

    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def run(*args: str):  # type: ignore[no-untyped-def]
        code = main(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


@pytest.fixture
def cope_json(run_cope):
    """`cope ARGS...` that must succeed, its stdout read as JSON (the caller passes --json)."""
    import json

    def run(*args: str) -> dict:
        code, out, err = run_cope(*args)
        assert code == 0, err
        return json.loads(out)

    return run
