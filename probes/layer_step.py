"""One MoE layer step at batch 1, executed for real (DESIGN.md §4, §6).

The one implementation of a layer's routed-expert work under each execution strategy,
shared by the combined-schedule probes (probes/runner.py) and the executor of whole
policies: given the experts resident on the "GPU" device, the host-resident experts
(page-locked when the device is CUDA), the hidden state, the hit ids and the miss ids,
it computes the router-weighted sum of the selected experts' outputs and times the
step as a whole.

- sequential: the GPU computes the hits, then (the GPU done) the CPU computes the
  misses; the CPU's sum is copied back and added.
- parallel: the GPU computes the hits while the CPU lane computes the misses; merged.
- stage: the misses' weights are copied through a bounded device staging buffer
  (`staging_slots` experts; more misses go in rounds that reuse the slots), then the
  GPU computes hits and misses.
- ready-first: the GPU starts on the hits at once; the misses named in `copy_ids` (or,
  without them, as many as the greedy of engine.cost.cost_model.compose_ready_first sends
  to the copy lane for the given measured `lanes`) are copied one by one and computed
  on the GPU as each arrives, the others on the CPU lane; merged.

As a runtime runs it: on CUDA each expert of the GPU lane is one replayed CUDA graph
(probes.cuda_graphs.GraphLane), an expert moves host to device as one copy (its one
buffer), a CPU lane beside GPU work runs on one persistent worker thread
(probes.cpu_worker), a CPU lane with nothing beside it (sequential, or a step with no
GPU work) on the calling thread, in the one OpenMP team the probes of the CPU kernels
use too (see probes.cpu_worker for why a second team is slow), and the step is timed with CUDA events from its start to the end of its last GPU work. The host
waits only where the work needs it: the CPU lane for the hidden state, and (with
`sync`, the default) once at the end. A caller that runs many steps per token passes
`sync=False` and waits once per token; `StepResult.elapsed_s` then waits when read.

Prefetch copies (weights of the next layer's predicted experts into device slots) are
issued on their own stream at the start of the step and run under it; by default the
step's end waits for them too (on the GPU), so its time is what the next layer sees.

`gpu_device` is a parameter: "cuda" (or "cuda:N") for real; "cpu" is a functional mode
in which both tiers run on the CPU and streams are not used, so every strategy can be
checked against `dense_reference` on any machine. Both modes go through the same
control flow (probes.step_device), which counts the host's waits.

torch is imported lazily.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.cost.cost_model import compose_ready_first
from engine.replays.policy import Execution
from probes.cpu_worker import CpuWorker, default_lane_threads, set_here, warm_here
from probes.experts import Expert, ExpertPool, copy_expert, experts_of, fit_line
from probes.step_device import step_device

Mats = Sequence  # one expert: an Expert, or [(weight, scale or None)] per matrix
GPU_BESIDE = (Execution.PARALLEL, Execution.READY_FIRST)

__all__ = ["DeviceSlots", "LayerStep", "StepResult", "copy_expert", "dense_reference"]


@dataclass(frozen=True)
class StepResult:
    output: Any  # float32 [1, hidden_size] on the GPU device: Σ router weight x expert output
    gpu_ids: tuple[int, ...]  # computed on the device: the hits, then the copied misses
    cpu_ids: tuple[int, ...]  # computed on the CPU
    copied: tuple[int, ...]  # misses whose weights were copied host to device
    prefetched: int  # prefetch copies issued
    prefetch_event: Any = None  # CUDA event of the prefetch copies (None: none, or waited for)
    timing: Any = field(default=None, compare=False, repr=False)  # (device, start, end)
    queued_s: float = 0.0  # host time from the step's start until its GPU work was queued

    @property
    def elapsed_s(self) -> float:
        """The whole step, prefetch copies included when waited for (reading it waits
        for the step's end when the step was run without `sync`)."""
        dev, start, end = self.timing
        return dev.elapsed_s(start, end)


class DeviceSlots:
    """`slots` experts' worth of device memory in one arena, laid out like `kernels`'
    experts, that host experts are copied into (the staging buffer; prefetch and
    resident slots). On CUDA each slot's graph is captured at once, before timing."""

    def __init__(self, kernels: ExpertPool, device: str, slots: int):
        torch = kernels.torch
        self.arena = torch.empty(slots, kernels.layout.nbytes, dtype=torch.uint8, device=device)
        self.slots = experts_of(self.arena, kernels.layout)
        if slots and torch.device(device).type == "cuda":  # pragma: no cover - needs CUDA
            kernels.graph_lane(device).prepare(self.slots)

    def __len__(self) -> int:
        return len(self.slots)

    def __getitem__(self, i: int):
        return self.slots[i]


class LayerStep:
    """Runs layer steps on one device pair, reusing its buffers, streams, graphs and
    CPU worker.

    `kernels`: an ExpertPool of the model's expert shape; its kernels (`forward`) compute
    every expert, whichever tier holds the weights, so the experts passed to `run` must
    have its layout. `graphs`: the GPU lane as replayed CUDA graphs (default: on CUDA;
    True in the functional mode runs the lane's bookkeeping with eager stand-ins).
    """

    def __init__(self, kernels: ExpertPool, *, gpu_device: str = "cuda", staging_slots: int = 8,
                 graphs: bool | None = None):
        import torch

        if staging_slots < 1:
            raise ValueError("the staging buffer needs at least one slot")
        self.torch = torch
        self.kernels = kernels
        self.device = torch.device(gpu_device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise RuntimeError(f"gpu_device={gpu_device!r} but CUDA is not available; use 'cpu' for the functional mode")
        self.dev = step_device(torch, self.device)
        self.staging = DeviceSlots(kernels, str(self.device), staging_slots)
        use_graphs = self.cuda if graphs is None else bool(graphs)
        self.lane = kernels.graph_lane(str(self.device)) if use_graphs else None
        self.worker = CpuWorker()  # started only when a CPU lane runs beside GPU work
        self._threads_before: int | None = None  # the calling thread's torch threads before a step set them
        # torch threads each CPU lane ran with, by where it ran ("calling thread", "worker").
        self.lane_threads: dict[str, set[int]] = {}
        hidden = kernels.shape.hidden_size
        self.gpu_down_in = torch.zeros(1, kernels.widths[-1], dtype=torch.bfloat16, device=self.device)
        self.cpu_down_in = torch.zeros(1, kernels.widths[-1], dtype=torch.bfloat16)
        self.x_host = self.dev.host_buffer(1, hidden, dtype=torch.bfloat16)
        self.sum_host = self.dev.host_buffer(1, hidden, dtype=torch.float32)
        self.sum_dev = torch.zeros(1, hidden, dtype=torch.float32, device=self.device)

    def warm(self, threads: int, *, beside: bool = True) -> None:
        """Start the CPU lane's threads before timing: the calling thread's OpenMP team for
        `threads` and, with `beside` (a GPU lane will run beside a CPU lane), the worker
        and its team. A worker left out is never started: its team would slow the other."""
        self._set_here(threads)
        warm_here(threads)
        if beside:
            self.worker.warm(threads)

    def _set_here(self, threads: int) -> None:
        before = set_here(threads)
        if self._threads_before is None:
            self._threads_before = before

    def prepare(self, experts) -> None:
        """Capture the GPU lane's graphs of `experts` (device experts) before timing."""
        if self.lane is not None:
            self.lane.prepare(experts)

    def close(self) -> None:
        """End the worker; the calling thread's torch threads as they were before the steps."""
        self.worker.close()
        if self._threads_before is not None:
            set_here(self._threads_before)
            self._threads_before = None

    # --- lanes -------------------------------------------------------------------------
    def _gpu_experts(self, acc, items) -> None:
        """Add weight x expert(x) for each (expert, weight) of `items` on the device: graph
        replays on CUDA (set up by `_lane_plan`), else eager kernels into `acc`."""
        for expert, weight, graph in items:
            if graph is not None:
                graph.replay()
            elif self.lane is not None:  # past the lane's capacity, or a staging slot's later round
                self.lane.eager(expert, weight)
            else:
                acc.add_(self.kernels.forward(expert, self._x, self.gpu_down_in).float(), alpha=weight)

    def _hidden_to_host(self, x):
        """x [1, hidden] to the host after what was queued before it: an event to wait for
        on the host before x_host is read."""
        dev = self.dev
        ready = dev.record()
        dev.wait(ready, dev.sync_stream)
        with dev.on(dev.sync_stream):
            self.x_host.copy_(x, non_blocking=True)
        return dev.record(dev.sync_stream)

    def _cpu_lane(self, ids, experts, x_event, weights):
        torch = self.torch
        where = "worker" if threading.get_ident() == self.worker.ident else "calling thread"
        self.lane_threads.setdefault(where, set()).add(torch.get_num_threads())
        self.dev.host_wait(x_event)
        acc = torch.zeros(1, self.kernels.shape.hidden_size, dtype=torch.float32)
        for e in ids:
            acc.add_(self.kernels.forward(experts[e], self.x_host, self.cpu_down_in).float(), alpha=weights(e))
        self.sum_host.copy_(acc)
        return True

    def _copied_lane(self, acc, ids, host, staged, *, wait_all_first: bool, before=()) -> None:
        """Copy the experts `ids` through the staging slots and compute them on the device
        (after `before`, resident experts computed once the copies they wait for are in).
        `wait_all_first`: a round's copies all land before its compute starts (stage);
        otherwise each expert is computed as soon as its own copy is in (ready-first)."""
        dev = self.dev
        n_slots = len(self.staging)
        freed: list = [None] * n_slots
        for start in range(0, len(ids), n_slots):
            chunk = ids[start:start + n_slots]
            arrived = []
            for i, e in enumerate(chunk):
                dev.wait(freed[i], dev.copy_stream)
                with dev.on(dev.copy_stream):
                    copy_expert(self.staging[i], host[e])
                arrived.append(dev.record(dev.copy_stream))
            if wait_all_first:
                for event in arrived:
                    dev.wait(event)
                if start == 0 and before:
                    self._gpu_experts(acc, before)
            for i, _e in enumerate(chunk):
                if not wait_all_first:
                    dev.wait(arrived[i])
                self._gpu_experts(acc, [staged[start + i]])
                freed[i] = dev.record()

    def _lane_plan(self, experts_and_weights, eager_from: int | None = None):
        """[(expert, weight, (graph, cell) or None)], the graphs captured now (before
        timing). Items from `eager_from` on run eagerly: a staging slot reused in a later
        round would need its graph's router weight changed within the step."""
        out = []
        for i, (expert, weight) in enumerate(experts_and_weights):
            graph = None
            usable = eager_from is None or i < eager_from
            if self.lane is not None and usable and isinstance(expert, Expert):
                graph = self.lane.graph(expert)
            out.append((expert, weight, graph))
        return out

    # --- the step ----------------------------------------------------------------------
    def run(
        self,
        execution: Execution | str,
        x,
        *,
        device_experts: Mapping[int, Mats],
        host_experts: Mapping[int, Mats],
        hit_ids: Sequence[int],
        miss_ids: Sequence[int],
        router_weights: Mapping[int, float] | None = None,
        threads: int | None = None,
        prefetch: Sequence[tuple[Mats, Mats]] = (),
        copy_ids: Sequence[int] | None = None,
        lanes: Any = None,
        wait_prefetch: bool = True,
        sync: bool = True,
    ) -> StepResult:
        """One layer step. `x`: the hidden state [1, hidden_size] on the GPU device;
        `device_experts[e]` for every hit, `host_experts[e]` for every miss;
        `threads`: the CPU lane's (default: every core, less one when a GPU lane runs
        beside it); `prefetch`: (host source, device destination) pairs copied during
        the step; `copy_ids` / `lanes`: ready-first's lane split, given or greedy (see
        module doc); `sync`: wait for the step's end before returning."""
        torch = self.torch
        dev = self.dev
        execution = Execution(execution)
        hits, misses = [int(e) for e in hit_ids], [int(e) for e in miss_ids]
        if set(hits) & set(misses):
            raise ValueError(f"experts {sorted(set(hits) & set(misses))} are both hits and misses")
        missing = [e for e in hits if e not in device_experts] + [e for e in misses if e not in host_experts]
        if missing:
            raise ValueError(f"no weights for experts {missing} on the tier that computes them")
        table = router_weights or {}

        def weights(e: int) -> float:
            return float(table.get(e, 1.0))

        to_copy: list[int] = []
        if execution is Execution.STAGE:
            to_copy = misses
        elif execution is Execution.READY_FIRST:
            to_copy = self.ready_first_split(len(hits), misses, copy_ids, lanes)
        on_cpu = [e for e in misses if e not in set(to_copy)]
        if threads is None:
            threads = default_lane_threads(self.cuda and execution in GPU_BESIDE)

        # Set-up, not timed: graphs looked up (captured when new), router weights staged.
        resident = self._lane_plan([(device_experts[e], weights(e)) for e in hits])
        n_slots = len(self.staging)
        staged = self._lane_plan([(self.staging[i % n_slots], weights(e)) for i, e in enumerate(to_copy)],
                                 eager_from=n_slots)
        x = x.to(self.device)

        start = dev.timing_event()
        t0 = time.perf_counter()
        if self.lane is not None:
            self.lane.begin(x)
            self._x, acc = self.lane.x, self.lane.acc
            cells = [(g[1], w) for _e, w, g in resident + staged if g is not None]
            self.lane.set_weights(cells)
            resident = [(e, w, None if g is None else g[0]) for e, w, g in resident]
            staged = [(e, w, None if g is None else g[0]) for e, w, g in staged]
        else:
            self._x = x
            acc = torch.zeros(1, self.kernels.shape.hidden_size, dtype=torch.float32, device=self.device)
        # Copies into slots must follow whatever read or filled those slots before.
        dev.follow(dev.copy_stream)
        prefetch_event = None
        if prefetch:
            dev.follow(dev.prefetch_stream)
            with dev.on(dev.prefetch_stream):
                for src, dst in prefetch:
                    copy_expert(dst, src)
            prefetch_event = dev.record(dev.prefetch_stream)

        cpu_job = None
        # The worker only when GPU work runs beside the CPU lane; else the calling thread
        # runs the lane (once the GPU work is queued), in its own OpenMP team.
        beside = execution in GPU_BESIDE and bool(hits or to_copy)

        def cpu_lane():  # type: ignore[no-untyped-def]
            lane = lambda: self._cpu_lane(on_cpu, host_experts, x_event, weights)  # noqa: E731
            return self.worker.submit(lane, threads) if beside else _Here(self, lane, threads)

        if execution is Execution.SEQUENTIAL:
            self._gpu_experts(acc, resident)
            if on_cpu:
                x_event = self._hidden_to_host(self._x)
                cpu_job = cpu_lane()
        elif execution is Execution.STAGE:
            if to_copy:
                self._copied_lane(acc, to_copy, host_experts, staged, wait_all_first=True, before=resident)
            else:
                self._gpu_experts(acc, resident)
        else:  # parallel, ready-first: the CPU lane beside the GPU
            if on_cpu:
                x_event = self._hidden_to_host(self._x)
                cpu_job = cpu_lane()
            self._gpu_experts(acc, resident)
            if to_copy:
                self._copied_lane(acc, to_copy, host_experts, staged, wait_all_first=False)
        queued_s = time.perf_counter() - t0
        if cpu_job is not None:
            cpu_job.result()  # the worker's: re-raises the lane's error on this thread; else runs it here
            self.sum_dev.copy_(self.sum_host, non_blocking=True)
            output = acc + self.sum_dev
        else:
            output = acc.clone() if self.lane is not None else acc
        if prefetch_event is not None and wait_prefetch:
            dev.wait(prefetch_event)
            prefetch_event = None
        end = dev.timing_event()
        if sync:
            dev.host_wait(end)
        return StepResult(output, tuple(hits) + tuple(to_copy), tuple(on_cpu), tuple(to_copy), len(prefetch),
                          prefetch_event, (dev, start, end), queued_s)

    @staticmethod
    def ready_first_split(n_hits: int, misses: Sequence[int], copy_ids: Sequence[int] | None, lanes: Any) -> list[int]:
        """The misses ready-first copies: `copy_ids` when given (a subset of the misses),
        else the first n of the misses, n from the greedy over `lanes` (engine.cost.cost_model)."""
        if copy_ids is not None:
            chosen = [int(e) for e in copy_ids]
            stray = sorted(set(chosen) - set(misses))
            if stray:
                raise ValueError(f"copy_ids {stray} are not misses of this step")
            return [e for e in misses if e in set(chosen)]
        if lanes is None:
            raise ValueError("ready-first needs a lane split: copy_ids, or lanes with per-expert times")
        n_copy = compose_ready_first(n_hits, len(misses), lanes)[5]
        return list(misses[:n_copy])


class _Here:
    """A CPU lane with nothing beside it: run on the calling thread, with `threads` torch
    threads, when its result is asked for (after the step's GPU work is queued)."""

    def __init__(self, step: LayerStep, lane, threads: int):  # type: ignore[no-untyped-def]
        self.step, self.lane, self.threads = step, lane, int(threads)

    def result(self):  # type: ignore[no-untyped-def]
        self.step._set_here(self.threads)
        return self.lane()


def dense_reference(kernels: ExpertPool, experts: Mapping[int, Mats], x, ids: Sequence[int],
                    router_weights: Mapping[int, float] | None = None, device_ids: Sequence[int] = ()):
    """The MoE output for routing `ids` in float32 on the CPU, from the dequantized weights
    with plain matrix products (none of the kernels): float32 [1, hidden_size].
    `device_ids`: experts a CUDA device computed (they read their bytes as bf16)."""
    import torch

    table = router_weights or {}
    x = x.detach().to("cpu").float()
    on_device = {int(e) for e in device_ids}
    out = torch.zeros(1, kernels.shape.hidden_size, dtype=torch.float32)
    for e in ids:
        mats = kernels.dequantized(experts[int(e)], device_kernel=int(e) in on_device)
        xin = fit_line(torch, x, mats[0].shape[1])
        if kernels.shape.gated:
            act = torch.nn.functional.silu(xin @ mats[0].T) * (xin @ mats[1].T)
        else:
            act = torch.nn.functional.gelu(xin @ mats[0].T)
        out += float(table.get(int(e), 1.0)) * (fit_line(torch, act, mats[-1].shape[1]) @ mats[-1].T)
    return out
