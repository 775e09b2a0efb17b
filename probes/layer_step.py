"""One MoE layer step at batch 1, executed for real (DESIGN.md §4, §6).

The one implementation of a layer's routed-expert work under each execution strategy,
shared by the combined-schedule probes (probes/runner.py) and the executor of whole
policies: given the experts resident on the "GPU" device, the host-resident experts
(page-locked when the device is CUDA), the hidden state, the hit ids and the miss ids,
it computes the router-weighted sum of the selected experts' outputs and times the
step as a whole.

- sequential: the GPU computes the hits, then (the GPU done) the CPU computes the
  misses; the CPU's sum is copied back and added.
- parallel: the GPU computes the hits while a CPU thread computes the misses; merged.
- stage: the misses' weights are copied through a bounded device staging buffer
  (`staging_slots` experts; more misses go in rounds that reuse the slots), then the
  GPU computes hits and misses.
- ready-first: the GPU starts on the hits at once; the misses named in `copy_ids` (or,
  without them, as many as the greedy of engine.cost_model.compose_ready_first sends
  to the copy lane for the given measured `lanes`) are copied one by one and computed
  on the GPU as each arrives, the others on a CPU thread; merged.

Prefetch copies (weights of the next layer's predicted experts into device slots) are
issued on their own stream at the start of the step and run under it; by default the
step waits for them too, so its time is what the next layer sees.

`gpu_device` is a parameter: "cuda" (or "cuda:N") for real; "cpu" is a functional mode
in which both tiers run on the CPU and streams are not used, so every strategy can be
checked against `dense_reference` on any machine.

torch is imported lazily.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from engine.policy import Execution
from probes.operators import ExpertPool, _fit, threads_set

Mats = Sequence  # one expert: [(weight, scale or None)] per matrix, as ExpertPool.experts holds


@dataclass(frozen=True)
class StepResult:
    output: Any  # float32 [1, hidden_size] on the GPU device: Σ router weight x expert output
    elapsed_s: float  # the whole step, prefetch copies included when waited for
    gpu_ids: tuple[int, ...]  # computed on the device: the hits, then the copied misses
    cpu_ids: tuple[int, ...]  # computed on the CPU
    copied: tuple[int, ...]  # misses whose weights were copied host to device
    prefetched: int  # prefetch copies issued
    prefetch_event: Any = None  # CUDA event of the prefetch copies (None: none, or waited for)


class DeviceSlots:
    """`slots` experts' worth of device memory, shaped like `kernels`' experts, that
    host experts are copied into (the staging buffer; prefetch destinations)."""

    def __init__(self, kernels: ExpertPool, device: str, slots: int):
        torch = kernels.torch
        template = kernels.experts[0]
        self.slots = [
            [(torch.empty_like(w, device=device), None if s is None else torch.empty_like(s, device=device))
             for w, s in template]
            for _ in range(slots)
        ]

    def __len__(self) -> int:
        return len(self.slots)

    def __getitem__(self, i: int):
        return self.slots[i]


def copy_expert(dst: Mats, src: Mats) -> None:
    """Copy one expert's matrices (asynchronously on the current stream when the source
    is page-locked and the destination a CUDA device)."""
    for (dw, ds), (sw, ss) in zip(dst, src):
        dw.copy_(sw, non_blocking=True)
        if ds is not None:
            ds.copy_(ss, non_blocking=True)


class LayerStep:
    """Runs layer steps on one device pair, reusing its buffers and streams.

    `kernels`: an ExpertPool of the model's expert shape; its kernels (`forward`) compute
    every expert, whichever tier holds the weights, so the experts passed to `run` must
    have its matrix shapes and kernel kind.
    """

    def __init__(self, kernels: ExpertPool, *, gpu_device: str = "cuda", staging_slots: int = 8):
        import torch

        if staging_slots < 1:
            raise ValueError("the staging buffer needs at least one slot")
        self.torch = torch
        self.kernels = kernels
        self.device = torch.device(gpu_device)
        self.cuda = self.device.type == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise RuntimeError(f"gpu_device={gpu_device!r} but CUDA is not available; use 'cpu' for the functional mode")
        self.staging = DeviceSlots(kernels, gpu_device, staging_slots)
        widths = kernels.widths
        self.gpu_down_in = torch.zeros(1, widths[-1], dtype=torch.bfloat16, device=self.device)
        self.cpu_down_in = torch.zeros(1, widths[-1], dtype=torch.bfloat16)
        hidden = kernels.shape.hidden_size
        if self.cuda:  # pragma: no cover - needs CUDA
            self.copy_stream = torch.cuda.Stream(self.device)
            self.prefetch_stream = torch.cuda.Stream(self.device)
            self.sync_stream = torch.cuda.Stream(self.device)
            self.x_host = torch.empty(1, hidden, dtype=torch.bfloat16).pin_memory()
        else:
            self.copy_stream = self.prefetch_stream = self.sync_stream = None
            self.x_host = torch.empty(1, hidden, dtype=torch.bfloat16)

    # --- streams (no-ops in the functional mode) ---------------------------------------
    def _on(self, stream):
        return self.torch.cuda.stream(stream) if stream is not None else nullcontext()

    def _record(self, stream=None):
        if not self.cuda:
            return None
        event = self.torch.cuda.Event()  # pragma: no cover - needs CUDA
        event.record(stream if stream is not None else self.torch.cuda.current_stream(self.device))  # pragma: no cover
        return event  # pragma: no cover

    def _wait(self, event, stream=None) -> None:
        if event is not None:  # pragma: no cover - needs CUDA
            (stream if stream is not None else self.torch.cuda.current_stream(self.device)).wait_event(event)

    def _synchronize(self) -> None:
        if self.cuda:  # pragma: no cover - needs CUDA
            self.torch.cuda.synchronize(self.device)

    # --- lanes -------------------------------------------------------------------------
    def _gpu_resident(self, acc, ids, experts, x, weights) -> None:
        for e in ids:
            acc.add_(self.kernels.forward(experts[e], x, self.gpu_down_in).float(), alpha=weights(e))

    def _hidden_to_host(self, x):
        """x [1, hidden] to the host, on a side stream after what was queued before it:
        (host tensor, event to wait for on the host)."""
        if not self.cuda:
            return x.to(self.torch.bfloat16), None
        ready = self._record()  # pragma: no cover - needs CUDA
        self._wait(ready, self.sync_stream)  # pragma: no cover
        with self._on(self.sync_stream):  # pragma: no cover
            self.x_host.copy_(x, non_blocking=True)
        return self.x_host, self._record(self.sync_stream)  # pragma: no cover

    def _cpu_lane(self, ids, experts, x_host, x_event, weights, threads):
        torch = self.torch
        if x_event is not None:  # pragma: no cover - needs CUDA
            x_event.synchronize()
        acc = torch.zeros(1, self.kernels.shape.hidden_size, dtype=torch.float32)
        with threads_set(threads):
            for e in ids:
                acc.add_(self.kernels.forward(experts[e], x_host, self.cpu_down_in).float(), alpha=weights(e))
        return acc

    def _copied_lane(self, acc, ids, host, x, weights, *, wait_all_first: bool, before=()) -> None:
        """Copy the experts `ids` through the staging slots and compute them on the device
        (after `before`, resident experts computed once the copies they wait for are in).
        `wait_all_first`: a round's copies all land before its compute starts (stage);
        otherwise each expert is computed as soon as its own copy is in (ready-first)."""
        n_slots = len(self.staging)
        freed: list = [None] * n_slots
        for start in range(0, len(ids), n_slots):
            chunk = ids[start:start + n_slots]
            arrived = []
            for i, e in enumerate(chunk):
                self._wait(freed[i], self.copy_stream)
                with self._on(self.copy_stream):
                    copy_expert(self.staging[i], host[e])
                arrived.append(self._record(self.copy_stream))
            if wait_all_first:
                for event in arrived:
                    self._wait(event)
                if start == 0 and before:
                    self._gpu_resident(acc, *before)
            for i, e in enumerate(chunk):
                if not wait_all_first:
                    self._wait(arrived[i])
                acc.add_(self.kernels.forward(self.staging[i], x, self.gpu_down_in).float(), alpha=weights(e))
                freed[i] = self._record()

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
        threads: int = 1,
        prefetch: Sequence[tuple[Mats, Mats]] = (),
        copy_ids: Sequence[int] | None = None,
        lanes: Any = None,
        wait_prefetch: bool = True,
    ) -> StepResult:
        """One layer step. `x`: the hidden state [1, hidden_size] on the GPU device;
        `device_experts[e]` for every hit, `host_experts[e]` for every miss;
        `prefetch`: (host source, device destination) pairs copied during the step;
        `copy_ids` / `lanes`: ready-first's lane split, given or greedy (see module doc)."""
        torch = self.torch
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

        x = x.to(self.device)
        acc = torch.zeros(1, self.kernels.shape.hidden_size, dtype=torch.float32, device=self.device)
        self._synchronize()
        t0 = time.perf_counter()

        prefetch_event = None
        if prefetch:
            start = self._record()
            self._wait(start, self.prefetch_stream)
            with self._on(self.prefetch_stream):
                for src, dst in prefetch:
                    copy_expert(dst, src)
            prefetch_event = self._record(self.prefetch_stream)

        cpu_sum = None
        if execution is Execution.SEQUENTIAL:
            self._gpu_resident(acc, hits, device_experts, x, weights)
            if on_cpu:
                self._synchronize()
                x_host, x_event = self._hidden_to_host(x)
                cpu_sum = self._cpu_lane(on_cpu, host_experts, x_host, x_event, weights, threads)
        elif execution is Execution.STAGE:
            if to_copy:
                self._copied_lane(acc, to_copy, host_experts, x, weights, wait_all_first=True,
                                  before=(hits, device_experts, x, weights))
            else:
                self._gpu_resident(acc, hits, device_experts, x, weights)
        else:  # parallel, ready-first: a CPU thread beside the GPU
            box: dict[str, Any] = {}
            worker = None
            if on_cpu:
                x_host, x_event = self._hidden_to_host(x)

                def cpu_work():
                    try:
                        box["sum"] = self._cpu_lane(on_cpu, host_experts, x_host, x_event, weights, threads)
                    except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
                        box["error"] = exc

                worker = threading.Thread(target=cpu_work, name="cope-cpu-lane", daemon=True)
                worker.start()
            self._gpu_resident(acc, hits, device_experts, x, weights)
            if to_copy:
                self._copied_lane(acc, to_copy, host_experts, x, weights, wait_all_first=False)
            if worker is not None:
                worker.join()
                if "error" in box:
                    raise box["error"]
                cpu_sum = box["sum"]
        if cpu_sum is not None:
            acc.add_(cpu_sum.to(self.device))
        if prefetch_event is not None and wait_prefetch:
            prefetch_event.synchronize()  # pragma: no cover - needs CUDA
            prefetch_event = None
        self._synchronize()
        elapsed = time.perf_counter() - t0
        return StepResult(acc, elapsed, tuple(hits) + tuple(to_copy), tuple(on_cpu), tuple(to_copy),
                          len(prefetch), prefetch_event)

    @staticmethod
    def ready_first_split(n_hits: int, misses: Sequence[int], copy_ids: Sequence[int] | None, lanes: Any) -> list[int]:
        """The misses ready-first copies: `copy_ids` when given (a subset of the misses),
        else the first n of the misses, n from the greedy over `lanes` (engine.cost_model)."""
        if copy_ids is not None:
            chosen = [int(e) for e in copy_ids]
            stray = sorted(set(chosen) - set(misses))
            if stray:
                raise ValueError(f"copy_ids {stray} are not misses of this step")
            return [e for e in misses if e in set(chosen)]
        if lanes is None:
            raise ValueError("ready-first needs a lane split: copy_ids, or lanes with per-expert times")
        from engine.cost_model import compose_ready_first

        n_copy = compose_ready_first(n_hits, len(misses), lanes)[5]
        return list(misses[:n_copy])


def dense_reference(kernels: ExpertPool, experts: Mapping[int, Mats], x, ids: Sequence[int],
                    router_weights: Mapping[int, float] | None = None):
    """The MoE output for routing `ids` in float32 on the CPU, from the dequantized weights
    with plain matrix products (none of the kernels): float32 [1, hidden_size]."""
    import torch

    table = router_weights or {}
    x = x.detach().to("cpu").float()
    widths = kernels.widths
    out = torch.zeros(1, kernels.shape.hidden_size, dtype=torch.float32)
    xin = _fit(torch, x, widths[0])
    for e in ids:
        mats = kernels.dequantized(experts[int(e)])
        if kernels.shape.gated:
            act = torch.nn.functional.silu(xin @ mats[0].T) * (xin @ mats[1].T)
        else:
            act = torch.nn.functional.gelu(xin @ mats[0].T)
        out += float(table.get(int(e), 1.0)) * (_fit(torch, act, widths[-1]) @ mats[-1].T)
    return out

