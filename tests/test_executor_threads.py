"""The executor applies its thread count to the kernels it runs (probes/executor.py).

The CPU lane's kernels are torch's (OpenMP); the count is observed inside every kernel
call of a run. A lane with nothing beside it (all-on-CPU) runs on the calling thread,
the one whose OpenMP team the probes of the CPU kernels use, and starts no worker (a
second OpenMP team in the process leaves 2 threads no faster than 1); a lane beside GPU
work runs on the worker with the same count.
"""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from engine.replays.policy import Candidate, Execution, Kind, Residency  # noqa: E402
from engine.models.quant import get_quantization  # noqa: E402
from engine.replays.replay import ReplaySetup  # noqa: E402
from engine.traces.synthetic import SyntheticSettings, synthetic_trace  # noqa: E402
from probes.executor import Executor  # noqa: E402
from tests.factories import tiny_model  # noqa: E402

MODEL = tiny_model(moe_blocks=(0, 1, 2), experts=8, k=2, hidden=64, expert_ffn=32)
QUANT = get_quantization("Q8_0")


@pytest.fixture(autouse=True)
def _torch_threads_kept():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def trace_and_setup(tokens: int = 6):
    trace = synthetic_trace(MODEL, SyntheticSettings(tokens=tokens, seed=3, zipf_exponent=0.8))
    return trace, ReplaySetup(trace.popularity(), 6, prefetch_budget=0)


def spy_kernels(executor: Executor, monkeypatch) -> list[tuple[int, int]]:
    """(thread id, torch threads) of every CPU kernel call of the executor's host experts."""
    seen: list[tuple[int, int]] = []
    pool = executor.host
    original = pool._mv

    def mv(x, mat):  # type: ignore[no-untyped-def]
        seen.append((threading.get_ident(), torch.get_num_threads()))
        return original(x, mat)

    monkeypatch.setattr(pool, "_mv", mv)
    return seen


def lane_workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "cope-cpu-lane" and t.is_alive()]


@pytest.mark.parametrize("threads", [2, 1, 3])
def test_an_all_cpu_run_computes_every_expert_with_its_thread_count_on_the_calling_thread(monkeypatch, threads):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    trace, setup = trace_and_setup()
    executor = Executor(MODEL, QUANT, mode="timed", host_pool_bytes=1 << 20)
    seen = spy_kernels(executor, monkeypatch)
    torch.set_num_threads(4 if threads != 4 else 5)  # whatever the caller had: the run sets its own
    before, workers_before = torch.get_num_threads(), len(lane_workers())
    run = executor.run(Candidate(Kind.ALL_CPU), trace, setup, threads=threads)
    # Every expert of every token (3 matrices each, warm-up layer steps included).
    assert len(seen) >= 3 * MODEL.top_k * MODEL.n_moe_layers * trace.n_tokens
    assert set(seen) == {(threading.get_ident(), threads)}
    assert run.cpu_lane_threads == {"calling thread": {threads}}
    assert run.summary()["cpu_lane_threads"] == {"calling thread": [threads]}
    assert run.threads == threads
    assert len(lane_workers()) == workers_before  # no second OpenMP team was started
    assert torch.get_num_threads() == before  # the caller's count is given back


def test_a_cpu_lane_beside_gpu_work_runs_on_the_worker_with_the_same_count(monkeypatch):
    trace, setup = trace_and_setup()
    executor = Executor(MODEL, QUANT, mode="functional")
    seen = spy_kernels(executor, monkeypatch)
    candidate = Candidate(Kind.MATRIX, Residency.FIXED, Execution.PARALLEL)
    run = executor.run(candidate, trace, setup, threads=2)
    assert run.hits_per_layer().sum() > 0 and run.cpu_lane_threads.get("worker") == {2}
    assert set(run.cpu_lane_threads) <= {"worker", "calling thread"}
    assert {n for who, n in seen if who != threading.get_ident()} == {2}  # the worker's kernel calls
    assert all(n == {2} for n in run.cpu_lane_threads.values())
