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
) -> Timing:
    """Run `fn` until the IQR is under `rel_spread` of the median (after `min_repeats`)
    or `budget_s` is spent (at least 3 repeats); median and IQR of perf_counter times."""
    for _ in range(warmup):
        fn()
    if sync:
        sync()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_repeats:
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
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
                 min_experts: int = 1, seed: int = 0):
        import torch

        self.torch = torch
        self.shape = shape
        self.device = device
        self.int8 = _int8pack_works(torch, device)
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
                    mats.append((w.to(device), s.to(device)))
                else:
                    w = (torch.randn(rows, width, generator=gen) * 0.02).to(torch.bfloat16)
                    mats.append((w.to(device), None))
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
        torch = self.torch
        mats = self.experts[index % self.n_experts]
        x = self.x if x is None else x
        if self.shape.gated:
            act = torch.nn.functional.silu(self._mv(x, mats[0])) * self._mv(x, mats[1])
        else:
            act = torch.nn.functional.gelu(self._mv(x, mats[0]))
        width = min(act.shape[1], self.down_in.shape[1])
        self.down_in[:, :width] = act[:, :width]
        return self._mv(self.down_in, mats[-1])

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
