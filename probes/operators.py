"""Expert operators with a model's real shapes and byte sizes, and their timing.

An expert is gate, up (when gated) and down matrices at batch 1. llama.cpp's batch-1
kernels are memory-bound: what matters is the bytes streamed. So each matrix is stored
so that it holds the quantized expert's bytes:
- torch's weight-only int8 kernel (`torch._weight_int8pack_mm`) where the device has
  it: an int8 matrix [out, in'] with in' = in x bits-per-weight / 8 (Q8_0: 8.5 bpw,
  in' a little wider than in; Q4_K_M: ~4.9 bpw, narrower), so the mat-vec streams the
  quantized matrix's bytes;
- otherwise a byte-equivalent dense bf16 matrix (in' = in x bpw / 16).
`kernel_stand_in()` says which, for the profile's provenance.

Experts come from a pool of distinct weights larger than the caches (by default
4 x the last-level cache on the CPU), used in rotation, so repeated timing streams from
memory as decode does.

torch is imported lazily, inside functions.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_LLC_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ExpertShape:
    hidden_size: int
    ffn_size: int
    gated: bool
    expert_bytes: int  # one routed expert under the quantization
    quantization: str

    @classmethod
    def of(cls, model: Any, quant: Any) -> ExpertShape:
        return cls(
            hidden_size=model.hidden_size,
            ffn_size=model.expert_ffn_size,
            gated=getattr(model, "gated_experts", True),
            expert_bytes=model.expert_bytes(quant),
            quantization=quant.name,
        )

    @property
    def n_matrices(self) -> int:
        return 3 if self.gated else 2

    @property
    def bytes_per_weight(self) -> float:
        return self.expert_bytes / (self.n_matrices * self.hidden_size * self.ffn_size)


@dataclass(frozen=True)
class Timing:
    median_s: float
    spread_s: float  # interquartile range
    repeats: int


def last_level_cache_bytes(sys_root: str = "/sys") -> int:
    """The largest CPU cache sysfs reports for cpu0, or 32 MiB when unreadable."""
    best = 0
    for index in sorted(Path(sys_root, "devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best or DEFAULT_LLC_BYTES


def time_repeats(
    fn: Callable[[], Any],
    budget_s: float,
    *,
    min_repeats: int = 5,
    max_repeats: int = 1000,
    rel_spread: float = 0.05,
    sync: Callable[[], None] | None = None,
    warmup: int = 1,
    timer: Callable[[Any], float] | None = None,
) -> Timing:
    """Run `fn` until the IQR is under `rel_spread` of the median (after `min_repeats`)
    or `budget_s` is spent (at least 3 repeats); median and IQR of perf_counter times.
    `timer`: the time of a repeat is timer(fn's result) instead (a layer step times
    itself, leaving out its set-up)."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_repeats:
        t0 = time.perf_counter()
        result = fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0 if timer is None else float(timer(result)))
        n = len(times)
        spent = time.perf_counter() - start
        if n >= min_repeats and _iqr(times) <= rel_spread * statistics.median(times):
            break
        if spent >= budget_s and n >= 3:
            break
    return Timing(statistics.median(times), _iqr(times), len(times))


def _iqr(times: list[float]) -> float:
    if len(times) < 4:
        return max(times) - min(times)
    q = statistics.quantiles(times, n=4)
    return q[2] - q[0]


def _int8pack_works(torch: Any, device: str) -> bool:
    if not hasattr(torch, "_weight_int8pack_mm"):
        return False
    try:
        x = torch.zeros(1, 64, dtype=torch.bfloat16, device=device)
        w = torch.zeros(16, 64, dtype=torch.int8, device=device)
        s = torch.ones(16, dtype=torch.bfloat16, device=device)
        torch._weight_int8pack_mm(x, w, s)
        return True
    except Exception:  # noqa: BLE001 - not implemented on this device
        return False


class ExpertPool:
    """Distinct random experts of `shape` on `device`, computed in rotation at batch 1."""

    def __init__(self, shape: ExpertShape, device: str = "cpu", *, pool_bytes: int | None = None,
                 min_experts: int = 1, seed: int = 0, pin: bool = False, int8: bool | None = None):
        """`pin`: host weights in page-locked memory (for asynchronous copies to a CUDA
        device); `int8`: force the kernel choice (default: int8 where the device has it),
        so a host pool and a device pool can hold interchangeable experts."""
        import torch

        self.torch = torch
        self.shape = shape
        self.device = device
        self.int8 = _int8pack_works(torch, device) if int8 is None else bool(int8)
        if pool_bytes is None:
            pool_bytes = 4 * last_level_cache_bytes() if device == "cpu" else 256 * 1024**2
        self.n_experts = max(min_experts, math.ceil(pool_bytes / shape.expert_bytes))
        gen = torch.Generator().manual_seed(seed)
        h, f = shape.hidden_size, shape.ffn_size
        # (out, in) of each matrix; `in` widened or narrowed to the quantized bytes.
        dims = ([(f, h), (f, h)] if shape.gated else [(f, h)]) + [(h, f)]
        per_byte = shape.bytes_per_weight if self.int8 else shape.bytes_per_weight / 2
        # Multiples of 32: torch's int8 weight-only kernel is wrong for other widths
        # (within 32 columns of the exact byte size; under 1% on real shapes).
        self.widths = [max(32, 32 * round(cols * per_byte / 32)) for _, cols in dims]
        self.experts = []
        for _ in range(self.n_experts):
            mats = []
            for (rows, _), width in zip(dims, self.widths):
                if self.int8:
                    w = torch.randint(-127, 128, (rows, width), dtype=torch.int8, generator=gen)
                    s = (torch.rand(rows, generator=gen) * 0.01).to(torch.bfloat16)
                    mats.append((_placed(w, device, pin), _placed(s, device, pin)))
                else:
                    w = (torch.randn(rows, width, generator=gen) * 0.02).to(torch.bfloat16)
                    mats.append((_placed(w, device, pin), None))
            self.experts.append(mats)
        self.x = torch.randn(1, self.widths[0], generator=gen).to(torch.bfloat16).to(device)
        self.down_in = torch.zeros(1, self.widths[-1], dtype=torch.bfloat16, device=device)
        self._next = 0

    @property
    def bytes(self) -> int:
        return self.n_experts * self.shape.expert_bytes

    def kernel_stand_in(self) -> str:
        if self.int8:
            return (f"torch._weight_int8pack_mm on a byte-equivalent int8 matrix "
                    f"({self.shape.bytes_per_weight * 8:.2f} bits per weight as int8 columns) on {self.device}")
        return f"dense bf16 mat-vec on a byte-equivalent bf16 matrix on {self.device}"

    def _mv(self, x, mat):
        w, s = mat
        if s is not None:
            return self.torch._weight_int8pack_mm(x, w, s)
        return x @ w.T

    def expert(self, index: int, x=None):
        """One expert on input `x` (default: the pool's hidden state)."""
        mats = self.experts[index % self.n_experts]
        return self.forward(mats, self.x if x is None else x, self.down_in)

    def input_of(self, x):
        """The hidden state [1, hidden_size] as the kernels' input [1, widths[0]]: cut or
        zero-padded to the byte-equivalent width (unchanged when already that wide)."""
        return _fit(self.torch, x, self.widths[0])

    def forward(self, mats, x, down_in=None):
        """One expert with weights `mats` (any expert of this shape, on x's device) on
        the hidden state `x` ([1, hidden_size] or [1, widths[0]]): [1, hidden_size].

        `down_in`: a [1, widths[-1]] zero-initialised buffer on x's device that the
        activation is written into (no allocation); None allocates one. One buffer
        per thread of execution: it is written on every call."""
        torch = self.torch
        x = self.input_of(x)
        if self.shape.gated:
            act = torch.nn.functional.silu(self._mv(x, mats[0])) * self._mv(x, mats[1])
        else:
            act = torch.nn.functional.gelu(self._mv(x, mats[0]))
        if down_in is None:
            down_in = _fit(torch, act, self.widths[-1])
        else:
            width = min(act.shape[1], down_in.shape[1])
            down_in[:, :width] = act[:, :width]
        return self._mv(down_in, mats[-1])

    def dequantized(self, mats) -> list:
        """The float32 matrices [out, in'] that `mats` stand for (int8 times its scale),
        for a dense reference computed without these kernels."""
        out = []
        for w, s in mats:
            w = w.detach().to("cpu").float()
            out.append(w * s.detach().to("cpu").float()[:, None] if s is not None else w)
        return out

    def run(self, n: int, ids=None):
        """n experts (the next n of the rotation, or `ids` mapped onto the pool), summed."""
        if ids is None:
            ids = range(self._next, self._next + n)
            self._next = (self._next + n) % self.n_experts
        out = None
        for i in ids:
            y = self.expert(int(i))
            out = y if out is None else out + y
        return out


def _placed(t, device: str, pin: bool):
    t = t.to(device)
    return t.pin_memory() if pin and t.device.type == "cpu" else t


def _fit(torch: Any, x, width: int):
    """x [1, n] cut or zero-padded to [1, width]."""
    n = x.shape[1]
    if n == width:
        return x
    if n > width:
        return x[:, :width]
    return torch.nn.functional.pad(x, (0, width - n))


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


def _cuda_sync(torch: Any) -> Callable[[], None]:
    return torch.cuda.synchronize


def gpu_experts(pool: ExpertPool, n: int, budget_s: float, **kw) -> Timing:  # pragma: no cover - needs CUDA
    """n routed experts on the GPU (pool on a cuda device), batch 1."""
    return time_repeats(lambda: pool.run(n), budget_s, sync=_cuda_sync(pool.torch), **kw)


class H2DCopier:  # pragma: no cover - needs CUDA
    """Copies of n experts' bytes from pinned host memory through a device staging buffer."""

    def __init__(self, expert_bytes: int, max_n: int, device: str = "cuda"):
        import torch

        self.torch = torch
        self.expert_bytes = expert_bytes
        self.host = torch.empty(expert_bytes * max_n, dtype=torch.uint8).pin_memory()
        self.staging = torch.empty(expert_bytes * max_n, dtype=torch.uint8, device=device)

    def copy(self, n: int) -> None:
        size = n * self.expert_bytes
        self.staging[:size].copy_(self.host[:size], non_blocking=True)

    def time(self, n: int, budget_s: float, **kw) -> Timing:
        return time_repeats(lambda: self.copy(n), budget_s, sync=_cuda_sync(self.torch), **kw)


def gpu_sync(hidden_size: int, budget_s: float, device: str = "cuda", **kw) -> Timing:  # pragma: no cover
    """Hidden state to the CPU and a result back, with the stream syncs."""
    import torch

    x = torch.randn(1, hidden_size, dtype=torch.bfloat16, device=device)
    host = torch.empty(1, hidden_size, dtype=torch.bfloat16).pin_memory()

    def step():
        host.copy_(x)
        x.copy_(host, non_blocking=True)
        torch.cuda.synchronize()

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
    x = _fit(torch, x, w.shape[1])
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
        int8 = _int8pack_works(torch, device)
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

    def _rms(self, x):
        torch = self.torch
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16) * self.norm

    def run(self):
        torch = self.torch
        parts = self.copies[self._next]
        self._next = (self._next + 1) % len(self.copies)
        x = self.x
        h = self._rms(x)
        proj = _matvec(torch, h, parts["in"])
        q_dim = self.kv_heads * self.q_per_kv * self.head_dim
        q = _fit(torch, proj, q_dim).view(self.kv_heads, self.q_per_kv, self.head_dim).to(torch.float16)
        k = parts["k"]
        scores = torch.bmm(q, k.transpose(1, 2)) * (self.head_dim ** -0.5)
        att = torch.bmm(torch.softmax(scores.float(), dim=-1).to(torch.float16), k[:, :, : self.v_dim])
        x = x + _fit(torch, _matvec(torch, att.reshape(1, -1).to(torch.bfloat16), parts["o"]), x.shape[1])
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
        int8 = _int8pack_works(torch, device)
        self.head = _byte_matrix(torch, vocab, hidden, quant.non_expert_bytes(params) / params, int8, device, gen)
        # The embedding table stays in host memory unless tied (llama.cpp); one row is read.
        self.embedding = torch.randn(min(vocab, 4096), hidden, generator=gen).to(torch.bfloat16)
        self.device = device
        self._token = 0

    def run(self) -> int:
        torch = self.torch
        row = self.embedding[self._token % self.embedding.shape[0]].view(1, -1).to(self.device, non_blocking=True)
        x = row.float()
        x = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
        logits = _matvec(torch, x, self.head)
        self._token = int(torch.argmax(logits, dim=-1).item())
        return self._token


def shared_layer_time(model: Any, quant: Any, kv_tokens: int, budget_s: float, device: str = "cuda",
                      *, sync: Callable[[], None] | None = None, **kw) -> tuple[Timing, str]:
    """The mean over the model's blocks of one block's shared work: each kind of block
    (MoE or dense; sliding-window attention or full) timed once, weighted by its count."""
    kinds: dict[tuple[bool, int], list[int]] = {}
    for block in range(model.n_blocks):
        kinds.setdefault((block in model.moe_blocks, model.kv_read_bytes_per_layer(block, kv_tokens)), []).append(block)
    share = budget_s / len(kinds)
    total = spread = 0.0
    repeats = 0
    kernel = ""
    for blocks in kinds.values():
        op = SharedLayerOp(model, quant, blocks[0], kv_tokens, device, **kw)
        t = time_repeats(op.run, share, sync=sync)
        weight = len(blocks) / model.n_blocks
        total += weight * t.median_s
        spread += weight * t.spread_s
        repeats = max(repeats, t.repeats)
        kernel = op.kernel
        del op
    return Timing(total, spread, repeats), kernel
