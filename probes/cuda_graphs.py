"""The GPU side of the probes as a runtime runs it: CUDA graphs, CUDA-event timing, and a
GPU kept busy while the host queues work.

A decode runtime (llama.cpp with CUDA graphs, vLLM, SGLang) launches a layer's GPU work
as captured graphs and synchronises with the host once per token, so the GPU goes from
one layer to the next without waiting for Python. Timed eagerly, each kernel launch and
each host sync would be counted instead: tens of microseconds per expert where an HBM GPU
streams the expert's bytes in about one.

Everything here needs CUDA; torch is imported lazily. `GraphLane` is built per expert
pool and device (ExpertPool.graph_lane), `busy_gpu` and `time_cuda` by the probes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any
from probes.timing import time_repeats

GRAPH_CAPACITY = 8192  # graphs per lane (an expert each); more experts run eagerly
BUSY_S = 0.5e-3  # the prelude that keeps the GPU busy while the host queues a timed step
MAX_BUSY_S = 4e-3


class _Replay:
    """A captured step's stand-in off CUDA: replaying runs the step eagerly (so the lane's
    bookkeeping can be checked on any machine)."""

    def __init__(self, fn: Callable[[], Any]):
        self.replay = fn


class GraphLane:
    """The routed experts a GPU computes in a layer step, each expert one small CUDA graph.

    A graph computes one expert on the lane's static input `x` and adds its output times
    its router weight into the lane's static accumulator `acc`: one mat-vec for gate and
    up, the activation (two kernels), the down mat-vec and one multiply-add, replayed
    with one launch. The router weight is read from the graph's cell of `cells` in
    device memory, written for a whole step by one copy and one scatter
    (`set_weights`), so one graph serves every step. A graph is captured once per expert
    buffer address (it computes whatever expert lies there, so slots refilled by copies
    keep their graphs), all into one memory pool: graphs replay one after another on one
    stream, so their temporaries can share memory. Past `capacity` graphs, experts run
    eagerly (`eager`). Off CUDA the same bookkeeping runs with eager stand-ins for the
    graphs (`_Replay`), for tests of the functional mode."""

    def __init__(self, kernels: Any, device: str, capacity: int = GRAPH_CAPACITY):
        torch = kernels.torch
        self.torch, self.kernels = torch, kernels
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        hidden = kernels.shape.hidden_size
        self.x = torch.zeros(1, hidden, dtype=torch.bfloat16, device=self.device)
        self.acc = torch.zeros(1, hidden, dtype=torch.float32, device=self.device)
        self.cells = torch.zeros(capacity, dtype=torch.float32, device=self.device)
        self.capacity = capacity
        self.graphs: dict[int, tuple[Any, int]] = {}
        self.pool = torch.cuda.graph_pool_handle() if self.cuda else None
        self.stream = torch.cuda.Stream(self.device) if self.cuda else None
        self._warm = False

    def _body(self, expert: Any, cell: Any) -> None:
        self.acc.addcmul_(self.kernels.forward(expert, self.x), cell)

    def graph(self, expert: Any) -> tuple[Any, int] | None:
        """(graph, cell index) of `expert`, captured now if new; None past capacity."""
        key = int(expert.buffer.data_ptr())
        found = self.graphs.get(key)
        if found is not None or len(self.graphs) >= self.capacity:
            return found
        torch = self.torch
        j = len(self.graphs)
        cell = self.cells[j:j + 1]
        if not self.cuda:
            self.graphs[key] = (_Replay(lambda: self._body(expert, cell)), j)
            return self.graphs[key]
        current = torch.cuda.current_stream(self.device)  # pragma: no cover - needs CUDA
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            if not self._warm:  # cuBLAS handles and workspaces are set up outside any capture
                for _ in range(2):
                    self._body(expert, cell)
                self._warm = True
            g = torch.cuda.CUDAGraph()
            g.capture_begin(pool=self.pool, capture_error_mode="thread_local")
            try:
                self._body(expert, cell)
            finally:
                g.capture_end()
        current.wait_stream(self.stream)
        self.acc.zero_()  # the warm-up added into it
        self.graphs[key] = (g, j)
        return self.graphs[key]

    def prepare(self, experts: Iterable[Any]) -> None:
        """Capture the graphs of `experts` now, before anything is timed."""
        for expert in experts:
            if self.graph(expert) is None:
                break

    def begin(self, x: Any) -> None:
        """A new step on hidden state `x` [1, hidden] (on the device): input in, sum zeroed."""
        if x.data_ptr() != self.x.data_ptr():
            self.x.copy_(x)
        self.acc.zero_()

    def set_weights(self, cells_and_weights: list[tuple[int, float]]) -> None:
        """Router weights of this step's graphs: one copy from page-locked memory and a
        scatter (the copy's source block is not reused before the copy ran)."""
        n = len(cells_and_weights)
        if n == 0:
            return
        torch = self.torch
        values = [float(j) for j, _ in cells_and_weights] + [float(w) for _, w in cells_and_weights]
        host = torch.tensor(values, dtype=torch.float32)
        if self.cuda:  # pragma: no cover - needs CUDA
            host = host.pin_memory()
        dev = host.to(self.device, non_blocking=True)
        self.cells.index_copy_(0, dev[:n].long(), dev[n:])

    def eager(self, expert: Any, weight: float) -> None:
        self.acc.add_(self.kernels.forward(expert, self.x), alpha=float(weight))


def busy_gpu(torch: Any, seconds: float, stream: Any = None) -> None:  # pragma: no cover - needs CUDA
    """Keep `stream` (default: the current one) busy for about `seconds`, so that work
    queued behind finds the GPU running, as the next layer does in a decode."""
    cycles = int(seconds * _cycles_per_s(torch))
    if cycles <= 0:
        return
    if stream is None:
        torch.cuda._sleep(cycles)
    else:
        with torch.cuda.stream(stream):
            torch.cuda._sleep(cycles)


_CYCLES_PER_S: dict[int, float] = {}


def _cycles_per_s(torch: Any) -> float:  # pragma: no cover - needs CUDA
    device = torch.cuda.current_device()
    if device not in _CYCLES_PER_S:
        torch.cuda._sleep(1000)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(2_000_000)
        end.record()
        end.synchronize()
        _CYCLES_PER_S[device] = 2_000_000 / max(start.elapsed_time(end) / 1e3, 1e-9)
    return _CYCLES_PER_S[device]


class BusyPrelude:
    """The prelude of timed GPU work: `seconds` of busy GPU, grown to 1.5x the host time
    a repeat took to queue its work (at most MAX_BUSY_S), so the GPU never waits for the
    host inside a timed region."""

    def __init__(self, torch: Any, seconds: float = BUSY_S, stream: Any = None):
        self.torch, self.seconds, self.stream = torch, seconds, stream

    def __call__(self) -> None:  # pragma: no cover - needs CUDA
        busy_gpu(self.torch, self.seconds, self.stream)

    def host_took(self, seconds: float) -> None:
        self.seconds = min(MAX_BUSY_S, max(self.seconds, 1.5 * seconds))


def time_cuda(torch: Any, fn: Callable[[], Any], budget_s: float, *, stream: Any = None,
              **kw: Any):  # pragma: no cover - needs CUDA
    """Time `fn`'s GPU work with CUDA events on `stream` (default: current), behind a
    busy prelude, one host wait per repeat; probes.timing.time_repeats' Timing."""
    prelude = BusyPrelude(torch, stream=stream)

    def once() -> float:
        prelude()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        target = stream if stream is not None else torch.cuda.current_stream()
        start.record(target)
        t0 = time.perf_counter()
        fn()
        prelude.host_took(time.perf_counter() - t0)
        end.record(target)
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    return time_repeats(once, budget_s, timer=lambda seconds: seconds, **kw)
