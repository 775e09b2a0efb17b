"""One persistent thread for the CPU lane of layer steps.

A layer step whose CPU lane runs beside the GPU lane hands the lane to another thread.
Starting a thread per step puts the thread's start, and a new OpenMP team for torch's
CPU kernels, inside every timed step (on a 2-core machine, 4 experts on 2 threads took
675 us with a thread per step against 484 us with one persistent worker). A decode
runtime keeps its threads; so does this: one worker per LayerStep, started and warmed
before anything is timed, its torch thread count set only when it changes.

The default thread count of a CPU lane leaves one core to the thread that drives the
GPU when a GPU lane runs beside it (`default_lane_threads`).

A lane with nothing beside it (sequential, or no GPU work in the step) runs on the
calling thread instead (`run_here`), as the probes of the CPU kernels do. torch's CPU
kernels run on OpenMP (libgomp), and every thread that starts a parallel region owns a
team of its own; when a process holds more OpenMP threads than it has CPUs, libgomp
stops spinning between regions (its throttled spin count) and each helper sleeps on a
futex between every two regions. A batch-1 expert is a few short regions, so a second
team (the worker's beside the calling thread's, which the probes and any earlier
multi-threaded torch call made) left 2 threads no faster than 1 on a 2-core machine:
the all-CPU candidate of Qwen3-30B-A3B executed in 207 ms/token at 1 thread and 209 ms
at 2, one core busy. One team per process keeps the threads spinning, as the probes
and llama.cpp's own thread pool run.
"""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from concurrent.futures import Future
from functools import cache
from typing import Any, Callable
from probes.host import detect_cpu

_STOP = object()
# Every worker's queue and thread: stopped and joined at exit, while the interpreter is
# whole. A worker thread left to end during interpreter shutdown races torch's and
# OpenMP's teardown, and the C++ runtime aborts the process.
_LIVE: "weakref.WeakKeyDictionary[threading.Thread, queue.SimpleQueue]" = weakref.WeakKeyDictionary()


@atexit.register
def _stop_all() -> None:
    for thread, jobs in list(_LIVE.items()):
        if thread.is_alive():
            jobs.put(_STOP)
    for thread in list(_LIVE):
        thread.join(timeout=10)


def _serve(jobs: queue.SimpleQueue, state: dict) -> None:
    import torch

    while True:
        job = jobs.get()
        if job is _STOP:
            return
        fn, threads, future = job
        if not future.set_running_or_notify_cancel():
            continue
        try:
            if threads != state.get("threads"):
                torch.set_num_threads(int(threads))
                state["threads"] = threads
            state["jobs"] = state.get("jobs", 0) + 1
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            future.set_exception(exc)


class CpuWorker:
    """Runs functions on one long-lived thread with a given torch thread count."""

    def __init__(self, name: str = "cope-cpu-lane"):
        self.name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._state: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        self.starts = 0  # threads started: 1 for the life of the worker
        stop = weakref.finalize(self, self._jobs.put, _STOP)
        stop.atexit = False  # _stop_all stops and joins it then

    @property
    def ident(self) -> int | None:
        return self._thread.ident if self._thread is not None else None

    @property
    def jobs_run(self) -> int:
        return int(self._state.get("jobs", 0))

    def _ensure(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=_serve, args=(self._jobs, self._state), name=self.name,
                                            daemon=True)
            _LIVE[self._thread] = self._jobs
            self._thread.start()
            self.starts += 1

    def submit(self, fn: Callable[[], Any], threads: int) -> Future:
        if threads < 1:
            raise ValueError(f"a CPU lane needs at least one thread, got {threads}")
        self._ensure()
        future: Future = Future()
        self._jobs.put((fn, int(threads), future))
        return future

    def run(self, fn: Callable[[], Any], threads: int) -> Any:
        return self.submit(fn, threads).result()

    def warm(self, threads: int) -> None:
        """Start the thread and its OpenMP team for `threads` before timing."""
        self.run(_warm_work, threads)

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._jobs.put(_STOP)
            self._thread.join(timeout=10)


def _warm_work() -> None:
    import torch

    a = torch.ones(256, 256)
    for _ in range(3):
        a = torch.tanh(a @ a * 1e-3)


def set_here(threads: int) -> int:
    """torch's intra-op threads of the calling thread set to `threads` (OpenMP's count
    is the calling thread's own); returns the count it had. Set only when it changes:
    a change resizes the thread's OpenMP team at its next parallel region."""
    import torch

    if threads < 1:
        raise ValueError(f"a CPU lane needs at least one thread, got {threads}")
    before = torch.get_num_threads()
    if before != threads:
        torch.set_num_threads(int(threads))
    return before


def run_here(fn: Callable[[], Any], threads: int) -> Any:
    """fn() on the calling thread with `threads` torch threads (left set: see set_here)."""
    set_here(threads)
    return fn()


def warm_here(threads: int) -> None:
    """The calling thread's OpenMP team for `threads` started before timing."""
    run_here(_warm_work, threads)


@cache
def physical_cores() -> int:
    cpu = detect_cpu()
    for fact in (cpu.physical_cores, cpu.logical_threads):
        if fact.known:
            return max(1, int(fact.value))  # type: ignore[arg-type]
    return 1


def default_lane_threads(gpu_lane_beside: bool, cores: int | None = None) -> int:
    """Threads for a CPU lane: every physical core, less one for the thread that drives
    the GPU when a GPU lane runs at the same time (never fewer than one)."""
    cores = physical_cores() if cores is None else int(cores)
    return max(1, cores - 1) if gpu_lane_beside else max(1, cores)
