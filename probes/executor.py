"""Execute a whole candidate policy for real (DESIGN.md §6): the ground truth.

Real-sized expert weights (random values, the model's exact shapes and byte sizes, the
kernels of probes.operators through an ExpertPool), the candidate's resident experts in
device slots up to its capacity, the others in (pinned) host memory; the trace's routing
replayed token by token, layer by layer; every layer step executed by
probes.layer_step.LayerStep, the one implementation the combined-schedule probes use too.

Residency follows the rules of DESIGN.md §4 one step at a time, as engine.replays.residency
states them once for replay too (`ResidencyPlan`: what each step hits, admits and
prefetches, and into which device slot): hits are the routed experts resident in a
device slot; under stage and ready-first a mutable cache admits the copied misses (a
device-to-device copy from the staging buffer into the evicted expert's slot); while
layer l runs, the predicted experts of layer l+1 that are not resident are copied host
to device into the slots of the experts they evict (on LayerStep's prefetch stream on
CUDA); LRU or decayed-score eviction; per-layer caches or one cross-layer pool. The
executor counts hits from its own slot table as it runs and stops if they differ from
the plan's, so an executed run's histogram can be checked against replay's ReplayStats
(tests/test_executor.py).

Modes:
- "functional": both tiers on the CPU (LayerStep's functional mode), every candidate,
  distinct weights for every expert, outputs kept so they can be checked against
  probes.layer_step.dense_reference. Times mean nothing there.
- "timed" with CUDA: resident experts on the GPU, host experts page-locked, the
  per-block shared work (attention over half the context, router, shared experts or
  dense FFN: probes.operators.SharedLayerOp) and the per-token head
  (TokenHeadOp) executed on the GPU too, so the measured TPOT is comparable with the
  estimate.
- "timed" without CUDA: only candidates that need no device (all-on-CPU, or a
  partition with every layer on the CPU) run, their routed-expert work measured for
  real; the GPU-side work (shared, head, hand-over) is not executed and is reported as
  zero with `gpu_side="not executed"` for the caller to add from a preset. Any other
  candidate raises GpuRequired.

Threads: `threads` is every CPU lane's torch (OpenMP) thread count, set on the thread
that runs the lane: the calling thread for a lane with nothing beside it (all-on-CPU,
sequential), in the same OpenMP team the probes of the CPU kernels use; LayerStep's
worker, started only for candidates with a CPU lane beside GPU work (parallel,
ready-first), otherwise. The replay's compiled loops (numba) run before timing, none
inside it. `ExecutedRun.cpu_lane_threads` says what the lanes ran with.

VRAM budget: `weights_budget_bytes` bounds what the executor allocates on the device
for expert weights (resident slots plus the staging buffer, counted from the real
tensors); a candidate that needs more raises VramBudgetExceeded before anything is
allocated, so one large GPU can stand in for smaller ones.

torch is imported lazily.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.replays.policy import Candidate
from engine.replays.residency import ReplaySetup, ResidencyPlan
from probes import host as host_facts
from probes.experts import ExpertLayout, expert_widths, int8pack_works
from probes.host_pool import host_pool
from probes.layer_step import GPU_BESIDE, DeviceSlots, LayerStep, copy_expert
from probes.operators import ExpertShape, SharedLayerOp, TokenHeadOp

HOST_HASH = 2654435761  # spreads (layer, expert) keys over a host pool smaller than the model


class ExecutionRefused(RuntimeError):
    """The candidate cannot be executed here; the message says why."""


class GpuRequired(ExecutionRefused):
    pass


class VramBudgetExceeded(ExecutionRefused):
    pass


class OutOfDeviceMemory(ExecutionRefused):
    """The device ran out of memory while the candidate ran: refused, the run goes on."""


def is_out_of_memory(torch: Any, exc: BaseException) -> bool:
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or (
        isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


# --- the executor -----------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutedRun:
    candidate_id: str
    mode: str  # "functional", "timed-cuda", "timed-cpu"
    n_tokens: int
    token_s: np.ndarray  # float64 [T]: measured wall time of each token
    token_experts_s: np.ndarray  # float64 [T]: of which the MoE layer steps
    experts_s: float  # mean per token: the MoE layer steps (admission copies included)
    shared_s: float  # mean per token: the per-block shared work (0 when not executed)
    head_s: float  # mean per token: embedding, head, sampling (0 when not executed)
    gpu_side: str  # "executed", "not executed" (no GPU: add the preset's figures) or "functional"
    counts: np.ndarray  # int64 [L, k+1, P+1]: executed states (layer, hits, prefetch copies)
    admissions: int
    prefetch_used: int
    device_weight_bytes: int  # expert weights allocated on the device (slots + staging)
    n_slots: int
    threads: int
    outputs: dict | None = field(default=None, compare=False)  # (t, l) -> float32 [1, hidden]
    # torch threads the CPU lane ran with, by where it ran ("calling thread", "worker")
    cpu_lane_threads: dict = field(default_factory=dict, compare=False)

    @property
    def tpot_s(self) -> float:
        """Mean measured time per token (what the machine executed)."""
        return float(np.mean(self.token_s)) if len(self.token_s) else 0.0

    @property
    def tpot_median_s(self) -> float:
        """Median time per token: robust to bursts of load from elsewhere on the machine."""
        return float(np.median(self.token_s)) if len(self.token_s) else 0.0

    @property
    def experts_median_s(self) -> float:
        return float(np.median(self.token_experts_s)) if len(self.token_experts_s) else 0.0

    def hits_per_layer(self) -> np.ndarray:
        return self.counts.sum(axis=2) @ np.arange(self.counts.shape[1])

    def summary(self) -> dict:
        return {
            "candidate": self.candidate_id, "mode": self.mode, "tokens": self.n_tokens,
            "tpot_s": self.tpot_s, "tpot_median_s": self.tpot_median_s,
            "experts_s": self.experts_s, "experts_median_s": self.experts_median_s, "shared_s": self.shared_s, "head_s": self.head_s,
            "gpu_side": self.gpu_side, "hits_per_layer": [int(h) for h in self.hits_per_layer()],
            "admissions": self.admissions, "prefetch_used": self.prefetch_used,
            "device_weight_bytes": self.device_weight_bytes, "slots": self.n_slots, "threads": self.threads,
            "cpu_lane_threads": {where: sorted(seen) for where, seen in sorted(self.cpu_lane_threads.items())},
        }


def expert_tensor_bytes(mats) -> int:
    return int(sum(w.numel() * w.element_size() + (0 if s is None else s.numel() * s.element_size())
                   for w, s in mats))


# The share of available memory the functional mode's experts may take: the rest is for
# the run's own arrays, torch, and whatever else the machine runs meanwhile.
FUNCTIONAL_MEMORY_SHARE = 0.5


class NotEnoughMemory(ExecutionRefused):
    """The functional mode's every expert does not fit this machine's available memory."""


def _check_functional_fits(model: Any, quant: Any, shape: Any, n_experts: int, int8: bool) -> None:
    """The functional mode holds every expert of the model on the host, in one allocation
    (17.9 GB for Qwen3-30B-A3B Q4_K_M): refused in one line before it is asked for when it
    is more than this machine's available memory (a failed or overcommitted allocation
    would end the run with a traceback or the OOM killer)."""
    need = n_experts * ExpertLayout(shape, expert_widths(shape, int8), int8).nbytes
    have = host_facts.available_memory_bytes()
    if have is not None and need > FUNCTIONAL_MEMORY_SHARE * have:
        raise NotEnoughMemory(
            f"--mode functional holds all {n_experts:,} experts of {model.name} {quant.name} in memory, "
            f"{need / 1e9:.1f} GB, more than half of this machine's {have / 1e9:.1f} GB available: choose a smaller "
            "model (--model), or the timed mode")


class Executor:
    """Executes candidates of one model shape on this machine.

    `mode`: "timed" or "functional"; `gpu_device`: "cuda" (timed with CUDA) or "cpu";
    `host_pool_bytes`: distinct host experts (default: every expert in functional mode,
    else the probes' pool: at least 1 GiB and 4x the last-level caches, with (layer,
    expert) keys spread over it); `context_tokens`: for the shared attention work (decode attends to half).
    """

    def __init__(self, model: Any, quant: Any, *, mode: str = "timed", gpu_device: str | None = None,
                 weights_budget_bytes: int | None = None, host_pool_bytes: int | None = None,
                 context_tokens: int = 4096, seed: int = 0, n_hidden: int = 8, staging_slots: int | None = None,
                 keep_outputs: bool | None = None, warmup: bool = True):
        import torch

        if mode not in ("timed", "functional"):
            raise ValueError(f"mode must be timed or functional, got {mode!r}")
        self.torch = torch
        self.model, self.quant, self.mode = model, quant, mode
        self.cuda = mode == "timed" and torch.cuda.is_available() if gpu_device is None else gpu_device.startswith("cuda")
        if self.cuda and not torch.cuda.is_available():
            raise GpuRequired(f"gpu_device={gpu_device!r} but CUDA is not available")
        if mode == "functional":
            self.cuda = False
        self.device = "cuda" if self.cuda else "cpu"
        self.budget = weights_budget_bytes
        self.context_tokens = int(context_tokens)
        self.warmup = warmup
        self.keep_outputs = (mode == "functional") if keep_outputs is None else keep_outputs
        self.shape = ExpertShape.of(model, quant)
        L, E, k = model.n_moe_layers, model.n_routed_experts, model.top_k
        self.n_keys = L * E
        int8 = None
        if self.cuda:  # pragma: no cover - needs CUDA
            # The host tier's kernel decides the layout; the device reads the same bytes as bf16.
            int8 = int8pack_works(torch, "cpu")
        if host_pool_bytes is None and mode == "functional":
            host_pool_bytes, min_experts = 1, self.n_keys
            _check_functional_fits(model, quant, self.shape, self.n_keys, int8pack_works(torch, "cpu"))
        else:
            min_experts = k
        # The probes' pool when the layout matches (built once per process, probes/host_pool.py).
        self.host = host_pool(self.shape, pool_bytes=host_pool_bytes, min_experts=min_experts, seed=seed,
                              pin=self.cuda, int8=int8)
        self.per_expert_bytes = expert_tensor_bytes(self.host.experts[0])
        self.staging_slots = max(1, k if staging_slots is None else int(staging_slots))
        gen = torch.Generator().manual_seed(seed + 1)
        self.hidden = [torch.randn(1, self.shape.hidden_size, generator=gen).to(torch.bfloat16).to(self.device)
                       for _ in range(max(1, n_hidden))]
        self._shared_ops = None
        self._head = None

    def kernel_stand_in(self) -> str:
        return self.host.kernel_stand_in()

    def host_index(self, key: int) -> int:
        n = self.host.n_experts
        return key % n if n >= self.n_keys else (key * HOST_HASH) % n

    def host_mats(self, key: int):
        return self.host.experts[self.host_index(key)]

    def hidden_of(self, t: int, l: int):
        return self.hidden[(t * self.model.n_moe_layers + l) % len(self.hidden)]

    def needs_device(self, plan: ResidencyPlan, candidate: Candidate) -> bool:
        return plan.n_slots > 0 or candidate.copies_misses

    def weights_bytes(self, plan: ResidencyPlan) -> int:
        return (plan.n_slots + self.staging_slots) * self.per_expert_bytes

    def check(self, plan: ResidencyPlan, candidate: Candidate) -> None:
        """Raise ExecutionRefused when `candidate` cannot run here."""
        if self.mode == "timed" and not self.cuda and self.needs_device(plan, candidate):
            raise GpuRequired(
                f"{candidate.id}: needs a CUDA GPU to execute for real (it keeps {plan.n_slots} experts on the GPU"
                + (" and copies misses to it" if candidate.copies_misses else "")
                + "); this machine has none. Timed runs here execute only the all-on-CPU candidate; "
                "the functional mode checks every candidate's correctness on the CPU")
        need = self.weights_bytes(plan)
        if self.budget is not None and self.needs_device(plan, candidate) and need > self.budget:
            raise VramBudgetExceeded(
                f"{candidate.id}: {plan.n_slots} resident experts plus {self.staging_slots} staging slots need "
                f"{need / 2**30:.3f} GiB of expert weights on the device, over the budget of "
                f"{self.budget / 2**30:.3f} GiB")

    # --- shared work (timed CUDA only) --------------------------------------------------
    def _gpu_side(self):  # pragma: no cover - needs CUDA
        if self._shared_ops is None:
            model, kinds, ops = self.model, {}, []
            kv = self.context_tokens // 2
            for block in range(model.n_blocks):
                kind = (block in model.moe_blocks, model.kv_read_bytes_per_layer(block, kv))
                if kind not in kinds:
                    kinds[kind] = SharedLayerOp(model, self.quant, block, kv, self.device)
                ops.append(kinds[kind])
            self._shared_ops = ops
            self._head = TokenHeadOp(model, self.quant, self.device)
        return self._shared_ops, self._head

    # --- run ------------------------------------------------------------------------------
    def run(self, candidate: Candidate, trace: Any, setup: ReplaySetup, *, threads: int = 1,
            cpu_layers: np.ndarray | None = None, tokens: int | None = None) -> ExecutedRun:
        """Execute `candidate` over `trace` (a RoutingTrace, or anything with expert_ids,
        predicted_ids and weights) token by token; `tokens`: only the first N.

        Raises ExecutionRefused when it cannot run here, OutOfDeviceMemory (one) when the
        device ran out of memory; the device's cache is emptied then, for the next one."""
        try:
            return self._run(candidate, trace, setup, threads=threads, cpu_layers=cpu_layers, tokens=tokens)
        except ExecutionRefused:
            raise
        except Exception as exc:
            if not is_out_of_memory(self.torch, exc):
                raise
            if self.cuda:  # pragma: no cover - needs CUDA
                self.torch.cuda.empty_cache()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise OutOfDeviceMemory(f"{candidate.id}: refused: out of memory on the device ({first[:160]})") from None

    def _run(self, candidate: Candidate, trace: Any, setup: ReplaySetup, *, threads: int,
             cpu_layers: np.ndarray | None, tokens: int | None) -> ExecutedRun:
        ids = np.asarray(trace.expert_ids)
        predicted = getattr(trace, "predicted_ids", None)
        weights = getattr(trace, "weights", None)
        if tokens is not None:
            ids = ids[:tokens]
            predicted = None if predicted is None else np.asarray(predicted)[:tokens]
            weights = None if weights is None else np.asarray(weights)[:tokens]
        n_tokens, n_layers, k = ids.shape
        if n_layers != self.model.n_moe_layers or k != self.model.top_k:
            raise ValueError(f"the trace is {n_layers} layers top-{k}; the model {self.model.n_moe_layers} top-{self.model.top_k}")
        plan = ResidencyPlan(ids, predicted, candidate, setup, cpu_layers=cpu_layers)
        self.check(plan, candidate)
        uses_device = self.needs_device(plan, candidate)

        step = LayerStep(self.host, gpu_device=self.device, staging_slots=self.staging_slots)
        try:
            slots = DeviceSlots(self.host, self.device, plan.n_slots) if plan.n_slots else []
            allocated = sum(expert_tensor_bytes(s) for s in getattr(slots, "slots", [])) + \
                sum(expert_tensor_bytes(s) for s in step.staging.slots)
            if self.budget is not None and uses_device and allocated > self.budget:  # pragma: no cover - check() guards
                raise VramBudgetExceeded(f"{candidate.id}: allocated {allocated} bytes, over {self.budget}")
            key_at: dict[int, int] = {}
            for key, slot in plan.initial.items():
                copy_expert(slots[slot], self.host_mats(key))
                key_at[slot] = key
            step.dev.host_wait(step.dev.timing_event())  # the initial contents are in place before timing
            return self._replay(candidate, plan, step, slots, key_at, ids, weights, threads,
                                allocated if uses_device else 0)
        finally:
            step.close()  # the persistent CPU worker ends with the run

    def _replay(self, candidate, plan, step, slots, key_at, ids, weights, threads,  # type: ignore[no-untyped-def]
                device_weight_bytes: int) -> ExecutedRun:
        """The timed (or functional) replay, token by token. On CUDA the host waits once
        per token (the head's sampled token); the steps, shared blocks and head are timed
        with CUDA events, read after that wait."""
        n_tokens, n_layers, k = ids.shape
        E = self.model.n_routed_experts
        execution = candidate.execution
        dev = step.dev
        slot_of = dict(plan.initial)
        shared_ops = head = None
        if self.mode == "timed" and self.cuda:  # pragma: no cover - needs CUDA
            shared_ops, head = self._gpu_side()

        def router(t, l):  # type: ignore[no-untyped-def]
            if weights is None:
                return None
            return {int(e): float(w) for e, w in zip(ids[t, l], weights[t, l])}

        if self.warmup and self.mode == "timed":
            # The worker (and its OpenMP team) only for a CPU lane beside GPU work: a second
            # team idle beside the calling thread's slows both (probes.cpu_worker).
            step.warm(threads, beside=execution in GPU_BESIDE and self.needs_device(plan, candidate))
            step.prepare([slots[i] for i in range(len(slots))])  # every resident slot's graphs, before timing
            for l in range(n_layers):  # kernels and lanes warm; residency untouched
                hits = [e for e in ids[0, l] if l * E + int(e) in slot_of]
                misses = [int(e) for e in ids[0, l] if l * E + int(e) not in slot_of]
                step.run(execution, self.hidden_of(0, l), device_experts={int(e): slots[slot_of[l * E + int(e)]] for e in hits},
                         host_experts={e: self.host_mats(l * E + e) for e in misses}, hit_ids=[int(e) for e in hits],
                         miss_ids=misses, threads=threads,
                         copy_ids=plan.copy_ids(misses, len(hits)))
            if shared_ops is not None:  # pragma: no cover
                for op in set(shared_ops):
                    op.run()
                head.run()
            dev.host_wait(dev.timing_event())

        counts = np.zeros((n_layers, k + 1, plan.prefetch_columns), dtype=np.int64)
        token_s = np.zeros(n_tokens)
        token_experts_s = np.zeros(n_tokens)
        shared_total = head_total = 0.0
        outputs = {} if self.keep_outputs else None
        moe_index = {b: i for i, b in enumerate(self.model.moe_blocks)}
        blocks = range(self.model.n_blocks) if shared_ops is not None else self.model.moe_blocks
        admissions = 0
        for t in range(n_tokens):
            planned = plan.steps(t)
            results, shared_spans, head_span = [], [], None
            t0 = time.perf_counter()
            for block in blocks:
                if shared_ops is not None:  # pragma: no cover - needs CUDA
                    start = dev.timing_event()
                    shared_ops[block].run()
                    shared_spans.append((start, dev.timing_event()))
                l = moe_index.get(block)
                if l is None:
                    continue
                p = planned[l]
                row = [int(e) for e in ids[t, l]]
                hits = [e for e in row if l * E + e in slot_of]  # from the executor's own slot table
                misses = [e for e in row if l * E + e not in slot_of]
                if tuple(hits) != p.hits:  # pragma: no cover - a bug in the plan
                    raise AssertionError(f"token {t} layer {l}: resident {hits}, planned {p.hits}")
                pairs = [(self.host_mats(key), slots[slot]) for key, slot in p.prefetch]
                result = step.run(
                    execution, self.hidden_of(t, l),
                    device_experts={e: slots[slot_of[l * E + e]] for e in hits},
                    host_experts={e: self.host_mats(l * E + e) for e in misses},
                    hit_ids=hits, miss_ids=misses, router_weights=router(t, l), threads=threads,
                    prefetch=pairs, copy_ids=p.copy_ids, sync=not self.cuda,
                )
                results.append(result)
                for e, slot in p.admitted:  # already on the device: staging -> the evicted slot
                    i = list(result.copied).index(e)
                    # The copy stream follows the step, so the staged weights are there to copy.
                    copy_expert(slots[slot], step.staging[i] if i < len(step.staging) else self.host_mats(l * E + e))
                    slot_of.pop(key_at[slot], None)
                    slot_of[l * E + e] = slot
                    key_at[slot] = l * E + e
                    admissions += 1
                for key, slot in p.prefetch:
                    slot_of.pop(key_at[slot], None)
                    slot_of[key] = slot
                    key_at[slot] = key
                counts[l, len(hits), len(p.prefetch)] += 1
                if outputs is not None:
                    outputs[(t, l)] = result.output.detach().float().cpu()
            if head is not None:  # pragma: no cover - needs CUDA
                start = dev.timing_event()
                head.run()  # waits for the sampled token: the token's one host wait
                head_span = (start, dev.timing_event())
            dev.host_wait(dev.timing_event())
            token_s[t] = time.perf_counter() - t0
            token_experts_s[t] = sum(r.elapsed_s for r in results)
            shared_total += sum(dev.elapsed_s(a, b) for a, b in shared_spans)
            head_total += dev.elapsed_s(*head_span) if head_span is not None else 0.0
        mode = "functional" if self.mode == "functional" else ("timed-cuda" if self.cuda else "timed-cpu")
        gpu_side = "functional" if self.mode == "functional" else ("executed" if self.cuda else "not executed")
        experts_total = float(token_experts_s.sum())
        return ExecutedRun(
            candidate.id, mode, n_tokens, token_s, token_experts_s, experts_total / n_tokens, shared_total / n_tokens,
            head_total / n_tokens, gpu_side, counts, admissions, plan.prefetch_used, device_weight_bytes,
            plan.n_slots, threads, outputs, {where: set(seen) for where, seen in step.lane_threads.items()},
        )


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return bool(torch.cuda.is_available())
