"""What llama.cpp's `--fit` does to a command that leaves `-ngl` unset, where COPE can tell.

llama-server and llama-cli fit by default (common/common.h: `bool fit_params = true`;
common/arg.cpp `-fit/--fit [on|off]`, `-fitt/--fit-target` default 1024 MiB a device,
`-fitc/--fit-ctx` default 4096). common/fit.cpp, `common_params_fit_impl`:

1. when the model at the given settings leaves the target margin of the GPU's free memory
   free, nothing changes;
2. an unset context (no `-c`) is lowered first, to no less than `--fit-ctx` tokens;
3. it changes nothing more when the user set `-ngl` ("n_gpu_layers already set by user")
   or any tensor override, `-ot`, `--cpu-moe`, `--n-cpu-moe` ("tensor_buft_overrides
   already set by user"): the command then runs as given;
4. for an MoE model whose dense weights fit with every routed expert in host memory, it
   moves whole layers' experts back to the GPU front to back (blocks 0, 1, ...) while they
   fit ("convert the dense-only layers in the back to full layers in the front"): the
   experts of the last layers stay on the CPU; then it tries to fit part of one more
   layer's experts (its up, or up and gate, projections);
5. when even the dense weights do not fit, it offloads fewer blocks.

COPE prices step 4 with whole layers (a layer set with the last layers' experts on the
CPU), at the context it prices the command with; the part of one more layer is not
modelled (llama.cpp may be a little faster), nor is step 2 (noted when `-c` is missing).
Step 5 is not priced: the answer says so instead of "would not run". llama-bench has no
`--fit` (it fits only with `-fitt`, tools/llama-bench/llama-bench.cpp) and offloads every
layer by default.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from engine.core.spans import block_span
from engine.cost.request import AdviseRequest
from engine.hardware.memory import GIB
from engine.llamacpp.llama_args import LlamaCommand
from engine.llamacpp.llama_placement import LlamaPlacement, placement_memory

FIT_TARGET_BYTES = 1024 * 2**20  # common/arg.cpp --fit-target: 1024 MiB a device by default
FIT_MIN_CONTEXT = 4096  # common/common.h fit_params_min_ctx
FIT_SOURCE = "common/fit.cpp, common_params_fit_impl"
_OFF = ("off", "0", "false", "disabled")


@dataclass(frozen=True)
class FitOutcome:
    """What `--fit` makes of a command with every block offloaded."""

    placement: LlamaPlacement  # what llama.cpp runs (the input one when nothing moves)
    note: str
    moved: bool  # --fit changed the placement (and COPE priced what it picks)
    unpriced: str | None = None  # why COPE did not price what --fit picks (step 5)

    def to_dict(self) -> dict:
        return {"moved": self.moved, "priced": self.unpriced is None, "note": self.note}


def fits_by_default(command: LlamaCommand) -> bool:
    """Whether llama.cpp would fit this command's layers itself: llama-server or llama-cli
    with `--fit` left on, no `-ngl` and no tensor override."""
    return (command.tool != "llama-bench" and command.gpu_layers is None and not command.overrides
            and (command.fit is None or command.fit.strip().lower() not in _OFF))


def fit_outcome(request: AdviseRequest, command: LlamaCommand, placement: LlamaPlacement) -> FitOutcome | None:
    """What `--fit` makes of `placement` (every block offloaded); None when it does not apply."""
    gpu_vram = request.platform.gpu.vram_bytes
    if not fits_by_default(command) or not gpu_vram.known or gpu_vram.value <= 0:
        return None
    mapped = not command.no_mmap
    margin_bytes = FIT_TARGET_BYTES if command.fit_target_mib is None else command.fit_target_mib * 2**20
    target = int(gpu_vram.value) - margin_bytes
    full = placement_memory(request, placement, mapped=mapped, kv_offload=not command.no_kv_offload).vram_bytes
    margin = f"{margin_bytes // 2**20} MiB"
    if full <= target:
        return FitOutcome(placement, f"no -ngl: llama.cpp's --fit (on by default) leaves every block offloaded: it "
                          f"fits the GPU with --fit's {margin} margin", moved=False)
    needs = (f"with every block offloaded it needs {full / GIB:.1f} GiB of VRAM, more than the "
             f"{target / GIB:.1f} GiB --fit aims at ({gpu_vram.value / GIB:.1f} GiB less its {margin} margin)")
    context = ("" if command.context is not None else f"; without -c, --fit first lowers the context (to no less than "
               f"{FIT_MIN_CONTEXT} tokens), priced here at {request.context_tokens}")
    n_gpu = _experts_on_gpu(request, placement, target, mapped, not command.no_kv_offload)
    if n_gpu is None:
        return FitOutcome(placement, f"no -ngl: {needs}, and even its dense weights alone do not fit: llama.cpp's "
                          f"--fit ({FIT_SOURCE}) would offload fewer blocks{context}", moved=True,
                          unpriced=f"not priced: {needs}, and its dense weights alone do not fit either; llama.cpp's "
                          "--fit would offload fewer blocks, which COPE does not model (give -ngl N or "
                          "--n-cpu-moe N to price a placement)")
    model = request.model
    cpu_blocks = list(model.moe_blocks[n_gpu:])
    fitted = _last_layers_on_cpu(placement, n_gpu)
    return FitOutcome(fitted, f"no -ngl: {needs}; COPE takes what llama.cpp's --fit ({FIT_SOURCE}) picks: the "
                      f"experts of the last {len(cpu_blocks)} of {model.n_moe_layers} MoE layers on the CPU (blocks "
                      f"{block_span(cpu_blocks)}); it may also put part of one more "
                      f"layer's experts on the GPU, which COPE does not model{context}", moved=True)


def _last_layers_on_cpu(placement: LlamaPlacement, n_gpu: int) -> LlamaPlacement:
    share = np.ones_like(placement.expert_cpu_share)
    share[:n_gpu] = 0.0
    return replace(placement, expert_cpu_share=share)


def _experts_on_gpu(request: AdviseRequest, placement: LlamaPlacement, target: int, mapped: bool,
                    kv_offload: bool) -> int | None:
    """The most MoE layers, from the first, whose experts stay on the GPU within `target`
    (None: not even with every expert on the CPU)."""
    for n_gpu in range(request.model.n_moe_layers, -1, -1):
        fitted = _last_layers_on_cpu(placement, n_gpu)
        vram = placement_memory(request, fitted, mapped=mapped, kv_offload=kv_offload).vram_bytes
        if vram <= target:
            return n_gpu
    return None
