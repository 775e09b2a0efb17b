"""Routed experts with a model's real shapes and byte sizes, in one buffer each.

An expert is gate, up (when gated) and down matrices at batch 1. llama.cpp's batch-1
kernels are memory-bound: what matters is the bytes streamed. So each matrix is stored
so that it holds the quantized expert's bytes:
- int8 (where the CPU has torch's weight-only int8 kernel, `torch._weight_int8pack_mm`):
  an int8 matrix [out, in'] with in' = in x bits-per-weight / 8 (Q8_0: 8.5 bpw, in' a
  little wider than in; Q4_K_M: ~4.9 bpw, narrower) and a bf16 scale per row;
- otherwise a byte-equivalent dense bf16 matrix (in' = in x bpw / 16).

One expert's matrices and scales live in ONE contiguous byte buffer (a row of its
pool's arena), with views into it, so moving an expert between host and device is one
copy, in the copy probe and in the layer step alike.

The kernels differ by device, over the same bytes: on the CPU the int8 kernel (the
right proxy for llama.cpp's CPU mat-vecs); on CUDA a dense bf16 mat-vec (`F.linear`)
over a bf16 view of the same buffer. torch's CUDA int8 weight-only kernel is a naive
one (at batch 1 most of its threads idle and its reads are uncoalesced), tens of
microseconds for bytes an HBM GPU streams in well under one, which no runtime would
use. The bytes are drawn so that both readings are finite numbers: each high byte of a
bf16 pair is 0x3C or 0xBC (a magnitude of 2^-7 to 2^-5), any value as int8.

Pools hold more distinct experts than the caches (by default at least 1 GiB on the
host), used in rotation, so repeated timing streams from memory as decode does.

torch is imported lazily, inside functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from probes.cuda_graphs import GraphLane
from probes.pool_size import default_pool_bytes
import numpy as np
ALIGN = 256  # every section of an expert's buffer starts on this boundary
_FILL_CHUNK = 64 * 1024**2


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


# --- caches and pool sizes --------------------------------------------------------------


def int8pack_works(torch: Any, device: str) -> bool:
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


def fit_line(torch: Any, x, width: int):
    """x [1, n] cut or zero-padded to [1, width]."""
    n = x.shape[1]
    if n == width:
        return x
    if n > width:
        return x[:, :width]
    return torch.nn.functional.pad(x, (0, width - n))


def _align(n: int) -> int:
    return ALIGN * math.ceil(n / ALIGN)


# --- one expert ---------------------------------------------------------------------------


class ExpertLayout:
    """Where an expert's matrices lie in its buffer: the input matrix (gate rows then up
    rows, so one mat-vec computes both), the down matrix, then their int8 row scales."""

    def __init__(self, shape: ExpertShape, widths: list[int], int8: bool):
        self.shape, self.widths, self.int8 = shape, list(widths), int8
        h, f = shape.hidden_size, shape.ffn_size
        self.in_rows = 2 * f if shape.gated else f
        elem = 1 if int8 else 2
        self.w_in = 0
        self.w_down = _align(self.in_rows * widths[0] * elem)
        end = self.w_down + _align(h * widths[-1] * elem)
        self.s_in = self.s_down = None
        if int8:
            self.s_in = end
            self.s_down = end + _align(2 * self.in_rows)
            end = self.s_down + _align(2 * h)
        self.nbytes = end

    def weight_sections(self) -> list[tuple[int, int]]:
        """(offset, bytes) of the weight matrices in the buffer."""
        elem = 1 if self.int8 else 2
        h = self.shape.hidden_size
        return [(self.w_in, self.in_rows * self.widths[0] * elem), (self.w_down, h * self.widths[-1] * elem)]


def _matrix(torch: Any, buffer, offset: int, rows: int, cols: int, dtype):
    size = torch.empty((), dtype=dtype).element_size()
    return buffer[offset:offset + rows * cols * size].view(dtype).view(rows, cols)


class Expert:
    """One expert: `buffer`, its bytes (uint8, contiguous), and views into it.

    Iterating gives (weight, scale or None) per matrix (gate, up, down; or up, down),
    as the kernels of older callers expect; `fused` gives the input and down matrices
    as stored; `dense` the bf16 views the CUDA kernel reads."""

    __slots__ = ("buffer", "layout", "is_cuda", "_mats", "_fused", "_dense")

    def __init__(self, buffer, layout: ExpertLayout):
        self.buffer = buffer
        self.layout = layout
        self.is_cuda = bool(buffer.is_cuda)
        self._mats = self._fused = self._dense = None

    @property
    def fused(self):
        if self._fused is None:
            import torch

            lay, h, b = self.layout, self.layout.shape.hidden_size, self.buffer
            dtype = torch.int8 if lay.int8 else torch.bfloat16
            w_in = _matrix(torch, b, lay.w_in, lay.in_rows, lay.widths[0], dtype)
            w_down = _matrix(torch, b, lay.w_down, h, lay.widths[-1], dtype)
            s_in = s_down = None
            if lay.int8:
                s_in = _matrix(torch, b, lay.s_in, 1, lay.in_rows, torch.bfloat16).view(-1)
                s_down = _matrix(torch, b, lay.s_down, 1, h, torch.bfloat16).view(-1)
            self._fused = ((w_in, s_in), (w_down, s_down))
        return self._fused

    @property
    def dense(self):
        """The bf16 matrices [rows, cols] over the same bytes (int8 columns read in pairs)."""
        if self._dense is None:
            import torch

            lay, h, b = self.layout, self.layout.shape.hidden_size, self.buffer
            cols = [w if not lay.int8 else w // 2 for w in (lay.widths[0], lay.widths[-1])]
            self._dense = (_matrix(torch, b, lay.w_in, lay.in_rows, cols[0], torch.bfloat16),
                           _matrix(torch, b, lay.w_down, h, cols[1], torch.bfloat16))
        return self._dense

    @property
    def mats(self) -> list:
        if self._mats is None:
            (w_in, s_in), down = self.fused
            if self.layout.shape.gated:
                f = self.layout.shape.ffn_size
                halves = [(w_in[:f], None if s_in is None else s_in[:f]),
                          (w_in[f:], None if s_in is None else s_in[f:])]
            else:
                halves = [(w_in, s_in)]
            self._mats = halves + [down]
        return self._mats

    def __iter__(self):
        return iter(self.mats)

    def __len__(self) -> int:
        return len(self.mats)

    def __getitem__(self, i: int):
        return self.mats[i]


def experts_of(arena, layout: ExpertLayout) -> list[Expert]:
    """The experts of an arena [n, layout.nbytes] (one per row), their views made for all
    rows at once (per expert they would cost more than a small expert's compute)."""
    import torch

    n, h, lay = arena.shape[0], layout.shape.hidden_size, layout
    experts = [Expert(arena[i], layout) for i in range(n)]
    if n == 0:
        return experts

    def block(offset: int, rows: int, cols: int, dtype):
        size = torch.empty((), dtype=dtype).element_size()
        return arena[:, offset:offset + rows * cols * size].view(dtype).view(n, rows, cols)

    def each(t) -> list:
        return list(t.unbind(0))

    dtype = torch.int8 if lay.int8 else torch.bfloat16
    w_in, w_down = block(lay.w_in, lay.in_rows, lay.widths[0], dtype), block(lay.w_down, h, lay.widths[-1], dtype)
    s_in = s_down = None
    if lay.int8:
        s_in = block(lay.s_in, 1, lay.in_rows, torch.bfloat16).view(n, lay.in_rows)
        s_down = block(lay.s_down, 1, h, torch.bfloat16).view(n, h)
    # The matrices one by one too (gate, up, down): the CPU kernel's inputs.
    f = layout.shape.ffn_size
    halves = [(w_in[:, :f], None if s_in is None else s_in[:, :f]), (w_in[:, f:], None if s_in is None else s_in[:, f:])] \
        if layout.shape.gated else [(w_in, s_in)]
    columns = [(each(w), [None] * n if sc is None else each(sc)) for w, sc in halves + [(w_down, s_down)]]
    fused = [(each(w_in), [None] * n if s_in is None else each(s_in)), (each(w_down), [None] * n if s_down is None else each(s_down))]
    dense = None
    if arena.device.type == "cuda":  # pragma: no cover - needs CUDA; what the CUDA kernel reads
        cols = [w if not lay.int8 else w // 2 for w in (lay.widths[0], lay.widths[-1])]
        dense = (each(block(lay.w_in, lay.in_rows, cols[0], torch.bfloat16)), each(block(lay.w_down, h, cols[1], torch.bfloat16)))
    for i, e in enumerate(experts):
        e._fused = tuple((w[i], sc[i]) for w, sc in fused)
        e._mats = [(w[i], sc[i]) for w, sc in columns]
        if dense is not None:  # pragma: no cover - needs CUDA
            e._dense = (dense[0][i], dense[1][i])
    return experts


def copy_expert(dst, src) -> None:
    """Copy one expert's weights: one copy of its buffer (asynchronous on the current
    stream when the source is page-locked and the destination a CUDA device).
    Experts given as lists of (weight, scale) pairs are copied matrix by matrix."""
    if isinstance(dst, Expert) and isinstance(src, Expert):
        dst.buffer.copy_(src.buffer, non_blocking=True)
        return
    for (dw, ds), (sw, ss) in zip(dst, src):
        dw.copy_(sw, non_blocking=True)
        if ds is not None:
            ds.copy_(ss, non_blocking=True)


def fill_expert_bytes(torch: Any, arena, layout: ExpertLayout, seed: int) -> None:
    """Random expert bytes into a CPU arena [n, layout.nbytes]: weights readable as int8
    and as finite bf16 (see the module doc), positive scales about 0.005."""
    rng = np.random.default_rng(seed)
    flat = arena.view(-1).numpy()
    for start in range(0, flat.size, _FILL_CHUNK):
        n = min(_FILL_CHUNK, flat.size - start)
        words = rng.integers(0, 2**64, size=(n + 7) // 8, dtype=np.uint64)
        chunk = flat[start:start + n]
        chunk[:] = words.view(np.uint8)[:n]
        high = chunk[(1 - start % 2)::2]  # odd offsets of the buffer: bf16 high bytes
        np.bitwise_and(high, 0x80, out=high)
        np.bitwise_or(high, 0x3C, out=high)
    if layout.int8:
        gen = torch.Generator().manual_seed(seed)
        n = arena.shape[0]
        for offset, rows in ((layout.s_in, layout.in_rows), (layout.s_down, layout.shape.hidden_size)):
            scales = (torch.rand(n, rows, generator=gen) * 0.01).to(torch.bfloat16)
            arena[:, offset:offset + 2 * rows].view(torch.bfloat16).copy_(scales)


def expert_widths(shape: ExpertShape, int8: bool) -> list[int]:
    """Columns of each matrix (gate, up, down; or up, down) holding the quantized bytes:
    multiples of 32, as torch's int8 weight-only kernel is wrong for other widths (within
    32 columns of the exact byte size; under 1% on real shapes)."""
    h, f = shape.hidden_size, shape.ffn_size
    dims = ([h, h] if shape.gated else [h]) + [f]
    per_byte = shape.bytes_per_weight if int8 else shape.bytes_per_weight / 2
    return [max(32, 32 * round(cols * per_byte / 32)) for cols in dims]


# --- a pool of experts ----------------------------------------------------------------------


class ExpertPool:
    """Distinct random experts of `shape` on `device`, computed in rotation at batch 1."""

    def __init__(self, shape: ExpertShape, device: str = "cpu", *, pool_bytes: int | None = None,
                 min_experts: int = 1, seed: int = 0, pin: bool = False, int8: bool | None = None):
        """`pin`: host weights in page-locked memory (for asynchronous copies to a CUDA
        device); `int8`: force the layout (default: int8 where the CPU has torch's int8
        weight-only kernel), so a host pool and a device pool hold interchangeable
        experts. The experts are rows of one arena, so a pool is one allocation."""
        import torch

        self.torch = torch
        self.shape = shape
        self.device = str(device)
        self.int8 = int8pack_works(torch, "cpu") if int8 is None else bool(int8)
        if pool_bytes is None:
            pool_bytes = default_pool_bytes(self.device)
        self.n_experts = max(min_experts, math.ceil(pool_bytes / shape.expert_bytes))
        self.widths = expert_widths(shape, self.int8)
        self.layout = ExpertLayout(shape, self.widths, self.int8)
        on_host = torch.device(self.device).type == "cpu"
        arena = torch.empty(self.n_experts, self.layout.nbytes, dtype=torch.uint8,
                            pin_memory=bool(pin and on_host))
        fill_expert_bytes(torch, arena, self.layout, seed)
        self.arena = arena if on_host else arena.to(self.device)
        del arena
        self.experts = experts_of(self.arena, self.layout)
        gen = torch.Generator().manual_seed(seed)
        self.x = torch.randn(1, shape.hidden_size, generator=gen).to(torch.bfloat16).to(self.device)
        self.down_in = torch.zeros(1, self.widths[-1], dtype=torch.bfloat16, device=self.device)
        self._next = 0
        self._lanes: dict[str, Any] = {}

    @property
    def bytes(self) -> int:
        return self.n_experts * self.shape.expert_bytes

    def kernel_stand_in(self, device: str | None = None) -> str:
        device = str(device or self.device)
        if device.startswith("cuda"):
            what = "a bf16 view of the expert's int8 bytes" if self.int8 else "a byte-equivalent bf16 matrix"
            return (f"dense bf16 mat-vec (F.linear) on {what}, gate and up in one, each expert a CUDA graph, "
                    f"on {device}")
        if self.int8:
            return (f"torch._weight_int8pack_mm on a byte-equivalent int8 matrix "
                    f"({self.shape.bytes_per_weight * 8:.2f} bits per weight as int8 columns) on {device}")
        return f"dense bf16 mat-vec on a byte-equivalent bf16 matrix on {device}"

    def graph_lane(self, device: str = "cuda"):
        """The CUDA-graph lane of this pool's experts on `device` (one per device)."""
        key = str(self.torch.device(device))
        if key not in self._lanes:
            self._lanes[key] = GraphLane(self, key)
        return self._lanes[key]

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
        return fit_line(self.torch, x, self.widths[0])

    def _activation(self, gate_up):
        f = self.torch.nn.functional
        if self.shape.gated:
            n = self.shape.ffn_size
            return f.silu(gate_up[:, :n]) * gate_up[:, n:]
        return f.gelu(gate_up)

    def forward(self, mats, x, down_in=None):
        """One expert with weights `mats` (an Expert of this layout, or its (weight,
        scale) pairs, on x's device) on the hidden state `x` ([1, hidden_size] or
        [1, widths[0]]): [1, hidden_size].

        `down_in`: a [1, widths[-1]] zero-initialised buffer on x's device that the
        activation is written into on the int8 kernel's path (no allocation); None
        allocates one. One buffer per thread of execution: it is written on every call."""
        torch = self.torch
        if isinstance(mats, Expert) and mats.is_cuda:
            w_in, w_down = mats.dense
            act = self._activation(torch.nn.functional.linear(fit_line(torch, x, w_in.shape[1]), w_in))
            return torch.nn.functional.linear(fit_line(torch, act, w_down.shape[1]), w_down)
        x = self.input_of(x)
        if isinstance(mats, Expert):
            mats = mats.mats  # gate and up apart: the CPU kernels' slices of one output cost more
        down = mats[-1]
        if self.shape.gated:
            act = torch.nn.functional.silu(self._mv(x, mats[0])) * self._mv(x, mats[1])
        else:
            act = torch.nn.functional.gelu(self._mv(x, mats[0]))
        if down_in is None:
            down_in = fit_line(torch, act, self.widths[-1])
        else:
            width = min(act.shape[1], down_in.shape[1])
            down_in[:, :width] = act[:, :width]
        return self._mv(down_in, down)

    def dequantized(self, mats, device_kernel: bool = False) -> list:
        """The float32 matrices [out, in'] that `mats` stand for, for a dense reference
        computed without these kernels: int8 times its scale (the CPU kernel's reading),
        or with `device_kernel` the bf16 reading of the same bytes that CUDA computes."""
        if device_kernel and isinstance(mats, Expert):
            w_in, w_down = (w.detach().to("cpu").float() for w in mats.dense)
            if self.shape.gated:
                f = self.shape.ffn_size
                return [w_in[:f], w_in[f:], w_down]
            return [w_in, w_down]
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
