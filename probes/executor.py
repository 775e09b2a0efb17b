"""Execute a whole candidate policy for real (DESIGN.md §6): the ground truth.

Real-sized expert weights (random values, the model's exact shapes and byte sizes, the
kernels of probes.operators through an ExpertPool), the candidate's resident experts in
device slots up to its capacity, the others in (pinned) host memory; the trace's routing
replayed token by token, layer by layer; every layer step executed by
probes.layer_step.LayerStep, the one implementation the combined-schedule probes use too.

Residency follows exactly the rules of engine/replay.py (DESIGN.md §4), one step at a
time (`ResidencyPlan`): hits are the routed experts resident in a device slot; under
stage and ready-first a mutable cache admits the copied misses (a device-to-device copy
from the staging buffer into the evicted expert's slot); while layer l runs, the
predicted experts of layer l+1 that are not resident are copied host to device into
the slots of the experts they evict (on LayerStep's prefetch stream on CUDA); LRU or
decayed-score eviction; per-layer caches or one cross-layer pool. The executor counts
hits from its own slot table as it runs, so an executed run's histogram can be checked
against replay's ReplayStats (tests/test_executor.py).

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

VRAM budget: `weights_budget_bytes` bounds what the executor allocates on the device
for expert weights (resident slots plus the staging buffer, counted from the real
tensors); a candidate that needs more raises VramBudgetExceeded before anything is
allocated, so one large GPU can stand in for smaller ones.

torch is imported lazily.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.policy import Candidate, Eviction, Execution, Kind, Residency
from engine.replay import SCORE_DECAY_PER_TOKEN, ReplaySetup, allocate_slots, popularity_order

HOST_HASH = 2654435761  # spreads (layer, expert) keys over a host pool smaller than the model


class ExecutionRefused(RuntimeError):
    """The candidate cannot be executed here; the message says why."""


class GpuRequired(ExecutionRefused):
    pass


class VramBudgetExceeded(ExecutionRefused):
    pass


# --- residency: the replay rules, one step at a time (torch-free) ----------------------


@dataclass(frozen=True)
class PlannedStep:
    hits: tuple[int, ...]  # expert ids of the layer, routing order
    misses: tuple[int, ...]
    copy_ids: tuple[int, ...] | None  # ready-first: the misses sent to the copy lane
    admitted: tuple[tuple[int, int], ...]  # (expert id, device slot) admitted after the step
    prefetch: tuple[tuple[int, int], ...]  # (key of layer l+1, device slot) copied during the step


class _Lru:
    """Front = least recently used."""

    def __init__(self, keys):
        self.keys = OrderedDict.fromkeys(keys)
        self.capacity = len(self.keys)

    def __contains__(self, key):
        return key in self.keys

    def routed(self, row, t):
        pass

    def touch(self, key):
        self.keys.move_to_end(key)

    def insert(self, key):
        self.keys[key] = None

    def evict(self, protect, t):
        for victim in self.keys:
            if victim not in protect:
                break
        del self.keys[victim]
        return victim


class _DecayedScore:
    def __init__(self, popularity, k):
        decay = SCORE_DECAY_PER_TOKEN
        profile_tokens = max(popularity.sum(axis=1).max() / k, 1.0)
        self.value = (popularity / profile_tokens / (1 - decay)).ravel().tolist()
        self.time = [0] * popularity.size

    def __call__(self, key, t):
        return self.value[key] * SCORE_DECAY_PER_TOKEN ** (t - self.time[key])

    def routed(self, row, t):
        for key in row:
            self.value[key] = self(key, t) + 1.0
            self.time[key] = t


class _ScoreCache:
    """Evicts the unprotected resident with the lowest decayed score, ties to the lowest key."""

    def __init__(self, keys, score: _DecayedScore):
        self.keys = set(keys)
        self.capacity = len(self.keys)
        self.score = score

    def __contains__(self, key):
        return key in self.keys

    def routed(self, row, t):
        self.score.routed(row, t)

    def touch(self, key):
        pass

    def insert(self, key):
        self.keys.add(key)

    def evict(self, protect, t):
        victim = min((key for key in self.keys if key not in protect), key=lambda key: (self.score(key, t), key))
        self.keys.discard(victim)
        return victim


class ResidencyPlan:
    """Which experts a candidate holds in device slots, and every step's decisions.

    `initial`: key (layer * E + expert) -> slot; `n_slots`: device slots the candidate
    needs; `steps(t)`: the planned steps of token t, layer by layer (call in token order:
    mutable caches advance)."""

    def __init__(self, ids: np.ndarray, predicted: np.ndarray | None, candidate: Candidate, setup: ReplaySetup,
                 *, cpu_layers: np.ndarray | None = None):
        self.ids = np.asarray(ids)
        n_tokens, n_layers, k = self.ids.shape
        popularity = np.asarray(setup.popularity)
        n_experts = popularity.shape[1]
        self.candidate, self.k, self.n_layers, self.n_experts = candidate, k, n_layers, n_experts
        self.split = None  # ready-first: misses copied per number of hits
        self.admit = [0] * (k + 1)
        self.width = 0
        self.caches: list = []
        self.pooled = False
        if candidate.kind is not Kind.MATRIX:
            if candidate.kind is Kind.ALL_GPU:
                cpu_layers = np.zeros(n_layers, dtype=bool)
            elif candidate.kind is Kind.ALL_CPU:
                cpu_layers = np.ones(n_layers, dtype=bool)
            elif cpu_layers is None:
                raise ValueError(f"{candidate.id} needs its layer set (cpu_layers)")
            self.slots = np.where(np.asarray(cpu_layers, dtype=bool), 0, n_experts).astype(np.int64)
            resident = [list(range(n_experts)) if s else [] for s in self.slots]
            self.static = True
        else:
            self.slots = allocate_slots(popularity, setup.total_slots, candidate.allocation)
            order = popularity_order(popularity)
            resident = [order[l, : self.slots[l]].tolist() for l in range(n_layers)]
            hits = np.arange(k + 1)
            if candidate.execution is Execution.READY_FIRST:
                if setup.admit_per_hits is None:
                    raise ValueError("ready-first needs the cost model's lane split (admit_per_hits)")
                self.split = np.minimum(np.asarray(setup.admit_per_hits, dtype=np.int64), k - hits).tolist()
            if candidate.is_mutable and candidate.copies_misses:
                self.admit = (k - hits).tolist() if candidate.execution is Execution.STAGE else list(self.split)
            prefetch = candidate.prefetch and predicted is not None and setup.prefetch_budget > 0
            width = min(int(setup.prefetch_budget), predicted.shape[2]) if prefetch else 0
            changes = candidate.is_mutable and (bool(width) or any(self.admit))
            self.static = not changes
            if changes:
                self.width = width
                self.pred = None if not width else np.asarray(predicted)[:, :, :width]
                self.pooled = candidate.residency is Residency.POOL
                lru = candidate.eviction is not Eviction.SCORE
                score = None if lru else _DecayedScore(popularity, k)
                if self.pooled:
                    keys = [l * n_experts + e for l in range(n_layers) for e in resident[l]]
                    keys.sort(key=lambda key: (popularity.flat[key], -key))  # least routed first
                    initial = [keys]
                else:
                    initial = [[l * n_experts + e for e in resident[l][::-1]] for l in range(n_layers)]
                self.caches = [_Lru(keys) if lru else _ScoreCache(keys, score) for keys in initial]
        keys = [l * n_experts + e for l in range(n_layers) for e in resident[l]]
        self.initial = {key: slot for slot, key in enumerate(keys)}
        self.n_slots = len(keys)
        self._resident = set(keys)  # static candidates
        self.prefetched: set[int] = set()
        self.admissions = self.prefetch_used = 0
        self._slot_of = dict(self.initial)  # what the plan believes; the executor keeps its own

    @property
    def prefetch_columns(self) -> int:
        return self.width + 1

    def steps(self, t: int) -> list[PlannedStep]:
        return [self._step(t, l) for l in range(self.n_layers)]

    def _copy_ids(self, misses: list[int], h: int):
        if self.split is None:
            return None
        return tuple(misses[: self.split[h]])

    def _step(self, t: int, l: int) -> PlannedStep:
        E = self.n_experts
        row_ids = [int(e) for e in self.ids[t, l]]
        if self.static:
            hits = [e for e in row_ids if l * E + e in self._resident]
            misses = [e for e in row_ids if l * E + e not in self._resident]
            return PlannedStep(tuple(hits), tuple(misses), self._copy_ids(misses, len(hits)), (), ())
        cache = self.caches[0] if self.pooled else self.caches[l]
        row = [l * E + e for e in row_ids]
        cache.routed(row, t)
        hits = [key for key in row if key in cache]
        misses = [key for key in row if key not in cache]
        h = len(hits)
        for key in hits:
            cache.touch(key)
            if key in self.prefetched:
                self.prefetch_used += 1
                self.prefetched.discard(key)
        n_admit = max(min(self.admit[h], cache.capacity - h), 0)
        admitted = []
        for key in misses[:n_admit]:
            victim = cache.evict(set(row), t)
            self.prefetched.discard(victim)
            cache.insert(key)
            cache.touch(key)
            slot = self._slot_of.pop(victim)
            self._slot_of[key] = slot
            admitted.append((key - l * E, slot))
        self.admissions += n_admit
        prefetch = []
        if self.width and l + 1 < self.n_layers:
            nxt = self.caches[0] if self.pooled else self.caches[l + 1]
            wanted = list(dict.fromkeys((l + 1) * E + int(e) for e in self.pred[t, l]))
            kept = [key for key in wanted if key in nxt]
            wanted = [key for key in wanted if key not in nxt]
            for key in kept:
                nxt.touch(key)
            in_use = {key for key in row if key in cache} if self.pooled else set()
            copies = max(min(len(wanted), nxt.capacity - len(kept) - len(in_use)), 0)
            protect = set(kept) | set(wanted) | in_use
            for key in wanted[:copies]:
                victim = nxt.evict(protect, t)
                self.prefetched.discard(victim)
                nxt.insert(key)
                nxt.touch(key)
                self.prefetched.add(key)
                slot = self._slot_of.pop(victim)
                self._slot_of[key] = slot
                prefetch.append((key, slot))
        hit_ids = [key - l * E for key in hits]
        miss_ids = [key - l * E for key in misses]
        return PlannedStep(tuple(hit_ids), tuple(miss_ids), self._copy_ids(miss_ids, h), tuple(admitted),
                           tuple(prefetch))


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
        }


def expert_tensor_bytes(mats) -> int:
    return int(sum(w.numel() * w.element_size() + (0 if s is None else s.numel() * s.element_size())
                   for w, s in mats))


class Executor:
    """Executes candidates of one model shape on this machine.

    `mode`: "timed" or "functional"; `gpu_device`: "cuda" (timed with CUDA) or "cpu";
    `host_pool_bytes`: distinct host experts (default: every expert in functional mode,
    else the probes' pool, >= 4x the last-level cache, with (layer, expert) keys spread
    over it); `context_tokens`: for the shared attention work (decode attends to half).
    """

    def __init__(self, model: Any, quant: Any, *, mode: str = "timed", gpu_device: str | None = None,
                 weights_budget_bytes: int | None = None, host_pool_bytes: int | None = None,
                 context_tokens: int = 4096, seed: int = 0, n_hidden: int = 8, staging_slots: int | None = None,
                 keep_outputs: bool | None = None, warmup: bool = True):
        import torch

        from probes.operators import ExpertPool, ExpertShape, _int8pack_works

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
            int8 = _int8pack_works(torch, "cpu") and _int8pack_works(torch, "cuda")
        if host_pool_bytes is None and mode == "functional":
            host_pool_bytes, min_experts = 1, self.n_keys
        else:
            min_experts = k
        self.host = ExpertPool(self.shape, "cpu", pool_bytes=host_pool_bytes, min_experts=min_experts,
                               seed=seed, pin=self.cuda, int8=int8)
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
        from probes.operators import SharedLayerOp, TokenHeadOp

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
        predicted_ids and weights) token by token; `tokens`: only the first N."""
        from probes.layer_step import DeviceSlots, LayerStep, copy_expert

        torch = self.torch
        ids = np.asarray(trace.expert_ids)
        predicted = getattr(trace, "predicted_ids", None)
        weights = getattr(trace, "weights", None)
        if tokens is not None:
            ids = ids[:tokens]
            predicted = None if predicted is None else np.asarray(predicted)[:tokens]
            weights = None if weights is None else np.asarray(weights)[:tokens]
        n_tokens, n_layers, k = ids.shape
        E = self.model.n_routed_experts
        if n_layers != self.model.n_moe_layers or k != self.model.top_k:
            raise ValueError(f"the trace is {n_layers} layers top-{k}; the model {self.model.n_moe_layers} top-{self.model.top_k}")
        plan = ResidencyPlan(ids, predicted, candidate, setup, cpu_layers=cpu_layers)
        self.check(plan, candidate)
        execution = candidate.execution
        uses_device = self.needs_device(plan, candidate)

        step = LayerStep(self.host, gpu_device=self.device, staging_slots=self.staging_slots)
        slots = DeviceSlots(self.host, self.device, plan.n_slots) if plan.n_slots else []
        allocated = sum(expert_tensor_bytes(s) for s in getattr(slots, "slots", [])) + \
            sum(expert_tensor_bytes(s) for s in step.staging.slots)
        if self.budget is not None and uses_device and allocated > self.budget:  # pragma: no cover - check() guards
            raise VramBudgetExceeded(f"{candidate.id}: allocated {allocated} bytes, over {self.budget}")
        key_at: dict[int, int] = {}
        for key, slot in plan.initial.items():
            copy_expert(slots[slot], self.host_mats(key))
            key_at[slot] = key
        slot_of = dict(plan.initial)
        if self.cuda:  # pragma: no cover
            torch.cuda.synchronize()

        shared_ops = head = None
        if self.mode == "timed" and self.cuda:  # pragma: no cover - needs CUDA
            shared_ops, head = self._gpu_side()

        def sync():
            if self.cuda:  # pragma: no cover
                torch.cuda.synchronize()

        def router(t, l):
            if weights is None:
                return None
            return {int(e): float(w) for e, w in zip(ids[t, l], weights[t, l])}

        if self.warmup and self.mode == "timed":
            for l in range(n_layers):  # kernels and lanes warm; residency untouched
                hits = [e for e in ids[0, l] if l * E + int(e) in slot_of]
                misses = [int(e) for e in ids[0, l] if l * E + int(e) not in slot_of]
                step.run(execution, self.hidden_of(0, l), device_experts={int(e): slots[slot_of[l * E + int(e)]] for e in hits},
                         host_experts={e: self.host_mats(l * E + e) for e in misses}, hit_ids=[int(e) for e in hits],
                         miss_ids=misses, threads=threads,
                         copy_ids=plan._copy_ids(misses, len(hits)) if plan.split is not None else None)
            if shared_ops is not None:  # pragma: no cover
                for op in set(shared_ops):
                    op.run()
                head.run()
            sync()

        counts = np.zeros((n_layers, k + 1, plan.prefetch_columns), dtype=np.int64)
        token_s = np.zeros(n_tokens)
        token_experts_s = np.zeros(n_tokens)
        experts_total = shared_total = head_total = 0.0
        outputs = {} if self.keep_outputs else None
        moe_index = {b: i for i, b in enumerate(self.model.moe_blocks)}
        blocks = range(self.model.n_blocks) if shared_ops is not None else self.model.moe_blocks
        admissions = 0
        for t in range(n_tokens):
            planned = plan.steps(t)
            t0 = time.perf_counter()
            for block in blocks:
                if shared_ops is not None:  # pragma: no cover - needs CUDA
                    s0 = time.perf_counter()
                    shared_ops[block].run()
                    sync()
                    shared_total += time.perf_counter() - s0
                l = moe_index.get(block)
                if l is None:
                    continue
                p = planned[l]
                e0 = time.perf_counter()
                row = [int(e) for e in ids[t, l]]
                hits = [e for e in row if l * E + e in slot_of]  # from the executor's own slot table
                misses = [e for e in row if l * E + e not in slot_of]
                if tuple(hits) != p.hits:  # pragma: no cover - a bug in the plan
                    raise AssertionError(f"token {t} layer {l}: resident {hits}, planned {p.hits}")
                pairs = []
                for key, slot in p.prefetch:
                    pairs.append((self.host_mats(key), slots[slot]))
                result = step.run(
                    execution, self.hidden_of(t, l),
                    device_experts={e: slots[slot_of[l * E + e]] for e in hits},
                    host_experts={e: self.host_mats(l * E + e) for e in misses},
                    hit_ids=hits, miss_ids=misses, router_weights=router(t, l), threads=threads,
                    prefetch=pairs, copy_ids=p.copy_ids,
                )
                for e, slot in p.admitted:  # already on the device: staging -> the evicted slot
                    copied = list(result.copied)
                    i = copied.index(e)
                    if i < len(step.staging):
                        copy_expert(slots[slot], step.staging[i])
                    else:  # pragma: no cover - staging smaller than k
                        copy_expert(slots[slot], self.host_mats(l * E + e))
                    slot_of.pop(key_at[slot], None)
                    slot_of[l * E + e] = slot
                    key_at[slot] = l * E + e
                    admissions += 1
                for key, slot in p.prefetch:
                    slot_of.pop(key_at[slot], None)
                    slot_of[key] = slot
                    key_at[slot] = key
                sync()
                token_experts_s[t] += time.perf_counter() - e0
                counts[l, len(hits), len(p.prefetch)] += 1
                if outputs is not None:
                    outputs[(t, l)] = result.output.detach().float().cpu()
            if head is not None:  # pragma: no cover - needs CUDA
                h0 = time.perf_counter()
                head.run()
                sync()
                head_total += time.perf_counter() - h0
            sync()
            token_s[t] = time.perf_counter() - t0
        mode = "functional" if self.mode == "functional" else ("timed-cuda" if self.cuda else "timed-cpu")
        gpu_side = "functional" if self.mode == "functional" else ("executed" if self.cuda else "not executed")
        experts_total = float(token_experts_s.sum())
        return ExecutedRun(
            candidate.id, mode, n_tokens, token_s, token_experts_s, experts_total / n_tokens, shared_total / n_tokens,
            head_total / n_tokens, gpu_side, counts, admissions, plan.prefetch_used, allocated if uses_device else 0,
            plan.n_slots, threads, outputs,
        )


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return bool(torch.cuda.is_available())
