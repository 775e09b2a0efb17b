"""A block's shared work split between the devices, priced for any cost model.

The ranking's candidates offload every block, so a cost model prices their shared work
whole (`CostModel.shared_per_token_s`). A llama.cpp command may put blocks, or pieces of
one (an `-ot` on attention weights, `-nkvo`'s KV cache), on the CPU: pricing that needs
each piece's bytes on its device, which only the analytic model's lanes give.
`split_work(request, cost_model)` is the one place that pairs a cost model with them:
the analytic model itself (or a calibrated one, which is analytic with this machine's
constants), else the request's analytic model with its GPU work scaled so that every
block on the GPU costs what `cost_model` says (engine/llamacpp/llama_placement.py
placement_cost prices commands through it, and never reads a model's internals).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from engine.cost.analytic_cost import AnalyticCostModel
from engine.cost.cost_model import CostModel
from engine.cost.cost_models import analytic_model
from engine.cost.request import AdviseRequest


@dataclass(frozen=True)
class SplitWork:
    """Shared work of blocks wherever their pieces are, in `cost_model`'s terms."""

    analytic: AnalyticCostModel
    gpu_scale: float  # the cost model's shared GPU work over the analytic model's (NaN without a GPU)

    def block_s(self, block: int, pieces: Sequence[tuple[float, float]], *, on_gpu: bool, kv_on_gpu: bool,
                threads: int) -> tuple[float, float, list[str]]:
        """(GPU seconds, CPU seconds, the devices in order) of `block`'s shared work:
        `pieces` are the (GPU bytes, CPU bytes) of its weights per piece of its work
        (engine.models.block_tensors.PIECES order), `on_gpu` where the block is offloaded,
        `kv_on_gpu` where its KV cache is (with the block, or in host memory under -nkvo).
        Each piece's weights are read where they are and the block's fixed cost (its small
        ops' launches or thread-pool barriers) is shared among the devices by the four
        pieces of its work they run (input projections, attention, output projection, FFN
        side; a piece split between the devices by its bytes)."""
        analytic = self.analytic
        a = analytic.a
        kv = analytic.kv_bytes(block)
        cache = kv + analytic.state_bytes(block)  # a linear-attention block's state, where its cache would be
        # (GPU bytes, CPU bytes, where it runs when it reads nothing) of each piece, in the
        # order the block runs them: the attention over the cache after the input projections.
        work = [(*pieces[0], on_gpu), (cache, 0.0, True) if kv_on_gpu else (0.0, cache, False),
                *((g, c, on_gpu) for g, c in pieces[1:])]
        gpu_share = sum(g / (g + c) if g + c else float(h) for g, c, h in work) / len(work)
        gpu_bytes, cpu_bytes = sum(w[0] for w in work), sum(w[1] for w in work)
        # the attention's reads of the cache count its device's factor (AnalyticAssumptions)
        if kv_on_gpu:
            gpu_bytes += (analytic.gpu_kv_read_factor - 1) * kv
        else:
            cpu_bytes += (a.cpu_kv_read_factor - 1) * kv
        gpu_s = (gpu_bytes / analytic.gpu_stream_bytes_per_s + gpu_share * analytic.gpu_block_fixed_s(block)
                 if gpu_share else 0.0)
        cpu_s = cpu_bytes / analytic.cpu_stream_bytes_per_s(threads) + (1 - gpu_share) * a.cpu_block_overhead_s
        devices = [d for g, c, h in work for d in ([d for d, n in (("gpu", g), ("cpu", c)) if n > 0]
                                                    or ["gpu" if h else "cpu"])]
        return (gpu_s * self.gpu_scale if gpu_s else 0.0), cpu_s, devices

    def cpu_head_s(self, threads: int) -> float:
        """The output head on the CPU, with the per-token fixed cost (sampling, embedding)."""
        return self.analytic.a.token_fixed_s + self.analytic.head_s(on_cpu=True, threads=threads)


def split_work(request: AdviseRequest, cost_model: CostModel) -> SplitWork:
    """`cost_model`'s pricing of shared work split between the devices, at `request`."""
    analytic = cost_model if isinstance(cost_model, AnalyticCostModel) else analytic_model(request)
    return SplitWork(analytic, cost_model.shared_per_token_s() / analytic.shared_per_token_s())
