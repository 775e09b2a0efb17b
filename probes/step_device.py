"""What a layer step asks of its device, on CUDA and in the functional (CPU) mode.

LayerStep's control flow is the same in both modes; this object does the device part:
streams, events that order work between streams, page-locked host buffers, the timing
events, and the host's waits. The functional mode has one "stream" (the host does
everything in order), so its events are markers, but it counts the host's waits as
CUDA would, so a test on any machine sees how often a step makes the host wait.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any


class HostEvent:
    """The functional mode's stand-in for a CUDA event: the time it was recorded."""

    __slots__ = ("t",)

    def __init__(self) -> None:
        self.t = time.perf_counter()


class FunctionalDevice:
    """Both tiers on the CPU: no streams, work runs in the order it is issued."""

    cuda = False
    copy_stream = prefetch_stream = sync_stream = None

    def __init__(self, torch: Any):
        self.torch = torch
        self.host_waits = 0

    def on(self, stream: Any):
        return nullcontext()

    def record(self, stream: Any = None) -> HostEvent:
        return HostEvent()

    def wait(self, event: Any, stream: Any = None) -> None:
        pass

    def follow(self, stream: Any) -> None:
        pass

    def host_wait(self, event: Any) -> None:
        if event is not None:
            self.host_waits += 1

    def host_buffer(self, *shape: int, dtype: Any):
        return self.torch.zeros(*shape, dtype=dtype)

    def timing_event(self) -> HostEvent:
        return HostEvent()

    def elapsed_s(self, start: HostEvent, end: HostEvent) -> float:
        return end.t - start.t


class CudaDevice:  # pragma: no cover - needs CUDA
    """A CUDA device: the caller's current stream computes; copies, prefetches and the
    hand-over of the hidden state to the host have their own streams."""

    cuda = True

    def __init__(self, torch: Any, device: Any):
        self.torch = torch
        self.device = device
        self.copy_stream = torch.cuda.Stream(device)
        self.prefetch_stream = torch.cuda.Stream(device)
        self.sync_stream = torch.cuda.Stream(device)
        self.host_waits = 0

    def _current(self):
        return self.torch.cuda.current_stream(self.device)

    def on(self, stream: Any):
        return self.torch.cuda.stream(stream) if stream is not None else nullcontext()

    def record(self, stream: Any = None):
        event = self.torch.cuda.Event()
        event.record(stream if stream is not None else self._current())
        return event

    def wait(self, event: Any, stream: Any = None) -> None:
        if event is not None:
            (stream if stream is not None else self._current()).wait_event(event)

    def follow(self, stream: Any) -> None:
        """`stream` goes on only after what the current stream has queued so far."""
        stream.wait_stream(self._current())

    def host_wait(self, event: Any) -> None:
        if event is not None:
            self.host_waits += 1
            event.synchronize()

    def host_buffer(self, *shape: int, dtype: Any):
        return self.torch.zeros(*shape, dtype=dtype).pin_memory()

    def timing_event(self):
        event = self.torch.cuda.Event(enable_timing=True)
        event.record(self._current())
        return event

    def elapsed_s(self, start: Any, end: Any) -> float:
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def step_device(torch: Any, device: Any):
    """The step device for a torch.device: CUDA, or the functional mode on the CPU."""
    if torch.device(device).type == "cuda":  # pragma: no cover - needs CUDA
        return CudaDevice(torch, torch.device(device))
    return FunctionalDevice(torch)
