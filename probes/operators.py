"""Operators with a model's real shapes and byte sizes, and their timing.

The routed experts (their byte layout, pools and kernels) are in probes.experts; this
module times them (`time_repeats`, `cpu_experts`, `gpu_experts`, `H2DCopier`,
`gpu_sync`) and holds what every candidate pays besides its routed experts: one
block's shared work (`SharedLayerOp`) and the per-token head (`TokenHeadOp`).

On CUDA the GPU-side operators run as a runtime runs them: captured CUDA graphs, timed
with CUDA events behind a busy GPU (probes.cuda_graphs), one host wait per repeat; the
weights of the shared work are byte-equivalent bf16 matrices there (torch's CUDA int8
weight-only kernel is no runtime's kernel; see probes.experts).

torch is imported lazily, inside functions.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from probes.cuda_graphs import time_cuda
from probes.experts import ExpertPool, ExpertShape, copy_expert, experts_of, fit_line, int8pack_works
from probes.timing import Timing, time_repeats


class threads_set:
    """`with threads_set(t):` torch.set_num_threads(t), restored afterwards."""

    def __init__(self, threads: int):
        self.threads = threads

    def __enter__(self):
        import torch

        self.before = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        return self

    def __exit__(self, *exc):
        import torch

        torch.set_num_threads(self.before)


def cpu_experts(pool: ExpertPool, n: int, threads: int, budget_s: float, **kw) -> Timing:
    """n routed experts on the CPU with `threads` threads, batch 1."""
    with threads_set(threads):
        return time_repeats(lambda: pool.run(n), budget_s, **kw)


def gpu_experts(pool: ExpertPool, n: int, budget_s: float, **kw) -> Timing:
    """n routed experts on the GPU (pool on a CUDA device), batch 1, as a step's GPU lane
    computes them: the hidden state in, router weights staged, one graph replay each;
    CUDA events behind a busy GPU. (A pool on the CPU runs the same lane with eager
    stand-ins, wall clock: for tests.)"""
    lane = pool.graph_lane(pool.device)
    lane.prepare(pool.experts)
    cursor = [0]

    def step() -> None:
        ids = [(cursor[0] + i) % pool.n_experts for i in range(n)]
        cursor[0] = (cursor[0] + n) % pool.n_experts
        found = [(pool.experts[i], lane.graph(pool.experts[i])) for i in ids]
        lane.begin(pool.x)
        lane.set_weights([(g[1], 1.0 / n) for _, g in found if g is not None])
        for expert, g in found:
            if g is None:
                lane.eager(expert, 1.0 / n)
            else:
                g[0].replay()

    if not lane.cuda:
        return time_repeats(step, budget_s, **kw)
    return time_cuda(pool.torch, step, budget_s, **kw)  # pragma: no cover


class H2DCopier:
    """Copies of n experts host to device as a layer step copies its misses: one copy
    per expert (its one buffer), from the host pool (page-locked for CUDA) in rotation,
    into n staging slots; on CUDA on a copy stream, timed with CUDA events."""

    def __init__(self, host_pool: ExpertPool, max_n: int, device: str = "cuda"):
        torch = host_pool.torch
        self.torch, self.host = torch, host_pool
        self.arena = torch.empty(max_n, host_pool.layout.nbytes, dtype=torch.uint8, device=device)
        self.slots = experts_of(self.arena, host_pool.layout)
        self.cuda = torch.device(device).type == "cuda"
        self.stream = torch.cuda.Stream(torch.device(device)) if self.cuda else None
        self._next = 0

    def copy(self, n: int) -> None:
        for i in range(n):
            copy_expert(self.slots[i], self.host.experts[self._next])
            self._next = (self._next + 1) % self.host.n_experts

    def time(self, n: int, budget_s: float, **kw) -> Timing:
        if not self.cuda:
            return time_repeats(lambda: self.copy(n), budget_s, **kw)
        torch = self.torch  # pragma: no cover

        def on_copy_stream() -> None:  # pragma: no cover
            with torch.cuda.stream(self.stream):
                self.copy(n)

        return time_cuda(torch, on_copy_stream, budget_s, stream=self.stream, **kw)  # pragma: no cover


def gpu_sync(hidden_size: int, budget_s: float, device: str = "cuda", **kw) -> Timing:  # pragma: no cover
    """The hand-over a CPU lane costs a layer step, as the step does it: the hidden state
    to page-locked host memory on a side stream, the host's wait for it, the CPU's sum
    back and added on the device; wall clock, as the host waits."""
    import torch

    x = torch.randn(1, hidden_size, dtype=torch.bfloat16, device=device)
    x_host = torch.zeros(1, hidden_size, dtype=torch.bfloat16).pin_memory()
    sum_host = torch.zeros(1, hidden_size, dtype=torch.float32).pin_memory()
    sum_dev = torch.zeros(1, hidden_size, dtype=torch.float32, device=device)
    acc = torch.zeros(1, hidden_size, dtype=torch.float32, device=device)
    side = torch.cuda.Stream(torch.device(device))

    def step():
        ready = torch.cuda.Event()
        ready.record()
        side.wait_event(ready)
        with torch.cuda.stream(side):
            x_host.copy_(x, non_blocking=True)
        arrived = torch.cuda.Event()
        arrived.record(side)
        arrived.synchronize()
        sum_host[0, 0] = float(x_host[0, 0])
        sum_dev.copy_(sum_host, non_blocking=True)
        acc.add_(sum_dev)
        done = torch.cuda.Event()
        done.record()
        done.synchronize()

    return time_repeats(step, budget_s, **kw)


# --- what every candidate pays: one block's shared work, the per-token head ------------


def _byte_matrix(torch: Any, rows: int, cols: int, bytes_per_weight: float, int8: bool, device: str, gen):
    """A [rows, cols'] matrix holding a quantized [rows, cols] matrix's bytes (see the
    module doc); (weight, scale or None)."""
    per_byte = bytes_per_weight if int8 else bytes_per_weight / 2
    width = max(32, 32 * round(cols * per_byte / 32))
    rows = 32 * math.ceil(rows / 32)  # the int8 kernels want aligned shapes; under 32 rows more
    if int8:
        w = torch.randint(-127, 128, (rows, width), dtype=torch.int8, generator=gen)
        return w.to(device), (torch.rand(rows, generator=gen) * 0.01).to(torch.bfloat16).to(device)
    return (torch.randn(rows, width, generator=gen) * 0.02).to(torch.bfloat16).to(device), None


def _matvec(torch: Any, x, mat):
    w, s = mat
    x = fit_line(torch, x, w.shape[1])
    if s is not None:
        return torch._weight_int8pack_mm(x, w, s)
    return x @ w.T


class SharedLayerOp:
    """One block's work that every candidate pays, at batch 1 on `device`: RMS norms,
    the attention projections (byte-equivalent to the quantized weights), attention of
    one query over a KV cache of the model's shape holding `kv_tokens` tokens (F16, as
    llama.cpp caches it), and for an MoE block the router mat-vec with its top-k and the
    shared experts, for a dense block its FFN. Several copies of the block, used in
    rotation, so timing streams from memory."""

    def __init__(self, model: Any, quant: Any, block: int, kv_tokens: int, device: str = "cuda", *,
                 pool_bytes: int = 256 * 1024**2, max_copies: int = 32, seed: int = 0):
        import torch

        self.torch = torch
        self.model = model
        self.device = device
        self.moe = block in model.moe_blocks
        a = model.attention
        hidden = model.hidden_size
        int8 = int8pack_works(torch, device) and torch.device(device).type == "cpu"
        attn_params = a.params(hidden)
        bpw = quant.non_expert_bytes(attn_params) / attn_params
        if a.kind == "mla":
            o_in = a.n_heads * a.v_head_dim
            self.kv_heads, self.q_per_kv, self.head_dim = 1, a.n_heads, a.kv_lora_rank + a.qk_rope_head_dim
            self.v_dim = a.kv_lora_rank
        else:
            o_in = a.n_heads * a.head_dim
            self.kv_heads, self.q_per_kv, self.head_dim = a.n_kv_heads, a.n_heads // max(a.n_kv_heads, 1), a.head_dim
            self.v_dim = a.head_dim
        in_rows = max(1, math.ceil((attn_params - hidden * o_in) / hidden))
        per_token_bytes = model.kv_read_bytes_per_layer(block, kv_tokens)
        self.kv_tokens = max(1, per_token_bytes // max(1, a.kv_elements_per_token() * 2))
        ffn = model.shared_expert_ffn_size if self.moe else model.dense_ffn_size
        if ffn:
            ffn_shape = ExpertShape(hidden, ffn, True, quant.non_expert_bytes(3 * hidden * ffn), quant.name)
        block_bytes = model.shared_layer_bytes(quant, block) + per_token_bytes
        copies = max(1, min(max_copies, math.ceil(pool_bytes / max(block_bytes, 1))))
        gen = torch.Generator().manual_seed(seed)
        self.copies = []
        for c in range(copies):
            parts = {
                "in": _byte_matrix(torch, in_rows, hidden, bpw, int8, device, gen),
                "o": _byte_matrix(torch, hidden, o_in, bpw, int8, device, gen),
                "k": torch.randn(self.kv_heads, self.kv_tokens, self.head_dim, generator=gen).to(torch.float16).to(device),
            }
            if self.moe:
                parts["router"] = _byte_matrix(torch, model.n_routed_experts, hidden, bpw, int8, device, gen)
            if ffn:
                parts["ffn"] = ExpertPool(ffn_shape, device, pool_bytes=1, min_experts=1, seed=seed + c + 1, int8=int8)
            self.copies.append(parts)
        self.x = torch.randn(1, hidden, generator=gen).to(torch.bfloat16).to(device)
        self.norm = torch.ones(hidden, dtype=torch.bfloat16, device=device)
        self._next = 0
        self.kernel = ("int8 weight-only" if int8 else "dense bf16") + f" byte-equivalent projections, F16 KV cache of {self.kv_tokens} tokens"
        self.graphs = None
        if torch.device(device).type == "cuda":  # pragma: no cover - needs CUDA
            pool = torch.cuda.graph_pool_handle()
            self.graphs = [_capture(torch, device, functools.partial(self._forward, parts), pool)
                           for parts in self.copies]
            self.kernel += ", one CUDA graph per block"

    def _rms(self, x):
        torch = self.torch
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16) * self.norm

    def run(self):
        """One block's shared work on the next copy: a graph replay on CUDA (its output
        is the graph's static tensor), eager elsewhere."""
        i = self._next
        self._next = (self._next + 1) % len(self.copies)
        if self.graphs is not None:  # pragma: no cover - needs CUDA
            graph, out = self.graphs[i]
            graph.replay()
            return out
        return self._forward(self.copies[i])

    def _forward(self, parts):
        torch = self.torch
        x = self.x
        h = self._rms(x)
        proj = _matvec(torch, h, parts["in"])
        q_dim = self.kv_heads * self.q_per_kv * self.head_dim
        q = fit_line(torch, proj, q_dim).view(self.kv_heads, self.q_per_kv, self.head_dim).to(torch.float16)
        k = parts["k"]
        scores = torch.bmm(q, k.transpose(1, 2)) * (self.head_dim ** -0.5)
        att = torch.bmm(torch.softmax(scores.float(), dim=-1).to(torch.float16), k[:, :, : self.v_dim])
        x = x + fit_line(torch, _matvec(torch, att.reshape(1, -1).to(torch.bfloat16), parts["o"]), x.shape[1])
        h = self._rms(x)
        if "router" in parts:
            logits = _matvec(torch, h, parts["router"])
            torch.topk(logits.float(), min(self.model.top_k, logits.shape[1]), dim=-1)
        if "ffn" in parts:
            x = x + parts["ffn"].forward(parts["ffn"].experts[0], h)
        return x


class TokenHeadOp:
    """Once per token: the embedding row lookup, the final norm, the output head mat-vec
    (byte-equivalent to the quantized head) and greedy sampling read back to the host."""

    def __init__(self, model: Any, quant: Any, device: str = "cuda", *, seed: int = 0):
        import torch

        self.torch = torch
        gen = torch.Generator().manual_seed(seed)
        hidden, vocab = model.hidden_size, model.vocab_size
        params = model.head_params()
        int8 = int8pack_works(torch, device) and torch.device(device).type == "cpu"
        self.head = _byte_matrix(torch, vocab, hidden, quant.non_expert_bytes(params) / params, int8, device, gen)
        # The embedding table stays in host memory unless tied (llama.cpp); one row is read.
        self.embedding = torch.randn(min(vocab, 4096), hidden, generator=gen).to(torch.bfloat16)
        self.device = device
        self._token = 0
        self.graph = None
        if torch.device(device).type == "cuda":  # pragma: no cover - needs CUDA
            # The host's part stays outside the graph: the embedding row into page-locked
            # memory, its copy in, the token's copy out and the one wait of the token.
            self.row_host = torch.zeros(1, hidden, dtype=torch.bfloat16).pin_memory()
            self.row_dev = torch.zeros(1, hidden, dtype=torch.bfloat16, device=device)
            self.token_host = torch.zeros(1, dtype=torch.int64).pin_memory()
            self.graph, self.token_dev = _capture(torch, device, lambda: self._token_of(self.row_dev),
                                                  torch.cuda.graph_pool_handle())

    def _token_of(self, row):
        torch = self.torch
        x = row.float()
        x = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
        return torch.argmax(_matvec(torch, x, self.head), dim=-1)

    def run(self) -> int:
        torch = self.torch
        row = self.embedding[self._token % self.embedding.shape[0]].view(1, -1)
        if self.graph is None:
            self._token = int(self._token_of(row.to(self.device)).item())
            return self._token
        self.row_host.copy_(row)  # pragma: no cover - needs CUDA; the last run waited, so it is free
        self.row_dev.copy_(self.row_host, non_blocking=True)  # pragma: no cover
        self.graph.replay()  # pragma: no cover
        self.token_host.copy_(self.token_dev, non_blocking=True)  # pragma: no cover
        done = torch.cuda.Event()  # pragma: no cover
        done.record()  # pragma: no cover
        done.synchronize()  # pragma: no cover
        self._token = int(self.token_host[0])  # pragma: no cover
        return self._token  # pragma: no cover


def _capture(torch: Any, device: str, fn: Callable[[], Any], pool: Any):  # pragma: no cover - needs CUDA
    """(CUDA graph of `fn`, its output tensor): warmed up on a side stream, then captured
    there into `pool` (graphs of one operator replay one after another, so their
    temporaries can share it; their outputs stay alive)."""
    dev = torch.device(device)
    side = torch.cuda.Stream(dev)
    current = torch.cuda.current_stream(dev)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
        graph = torch.cuda.CUDAGraph()
        graph.capture_begin(pool=pool, capture_error_mode="thread_local")
        try:
            out = fn()
        finally:
            graph.capture_end()
    current.wait_stream(side)
    return graph, out


def shared_layer_time(model: Any, quant: Any, kv_tokens: int, budget_s: float, device: str = "cuda",
                      **kw) -> tuple[Timing, str]:
    """The mean over the model's blocks of one block's shared work: each kind of block
    (MoE or dense; sliding-window attention or full) timed once, weighted by its count;
    on CUDA each block a graph replay timed with CUDA events behind a busy GPU."""
    kinds: dict[tuple[bool, int], list[int]] = {}
    for block in range(model.n_blocks):
        kinds.setdefault((block in model.moe_blocks, model.kv_read_bytes_per_layer(block, kv_tokens)), []).append(block)
    share = budget_s / len(kinds)
    total = spread = 0.0
    repeats = 0
    kernel = ""
    for blocks in kinds.values():
        op = SharedLayerOp(model, quant, blocks[0], kv_tokens, device, **kw)
        if op.graphs is not None:  # pragma: no cover - needs CUDA
            t = time_cuda(op.torch, op.run, share)
        else:
            t = time_repeats(op.run, share)
        weight = len(blocks) / model.n_blocks
        total += weight * t.median_s
        spread += weight * t.spread_s
        repeats = max(repeats, t.repeats)
        kernel = op.kernel
        del op
    return Timing(total, spread, repeats), kernel
