"""What the published runs say of COPE's figures on each llama.cpp GPU backend.

COPE prices every backend with one model whose constants are fitted on published runs,
nearly all of them NVIDIA cards on CUDA (the GPU side of a ROCm, Vulkan or SYCL plan is
CUDA's model, with or without graph replay: engine/hardware/gpu_backends.py). A plan for
another backend says so, and says how that backend's published runs came out, machine by
machine: `bench/published.py` prices them like any other row, and the ranges below are its
ratios (COPE's tokens/s over the published; above 1: COPE faster than measured) at the
constants in the code. tests/test_backend_basis.py recomputes them, so a refit that moves
them fails until they are copied again. A machine whose memory speed its source leaves out
is priced on an assumed one and is not in the fit (bench/published.py: reported apart).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.hardware.gpu_backends import backend

# The backend nearly every fitted run used: plans for it need no note.
FITTED_BACKEND = "CUDA"


@dataclass(frozen=True)
class BackendCheck:
    """One machine's published runs of one kind of placement on a backend, priced by COPE."""

    machine: str
    fitted: bool  # its hardware stated: in the fit and the cross-validation
    rows: tuple[str, ...]  # bench/published.py's row names
    placement: str  # which placements the rows ran
    ratio_low: float  # COPE's tokens/s over the published, the lowest and highest of the rows
    ratio_high: float

    def text(self) -> str:
        span = (f"{self.ratio_low:.2f}x" if self.ratio_low == self.ratio_high
                else f"{self.ratio_low:.2f}-{self.ratio_high:.2f}x")
        return f"{self.placement}: COPE's estimate {span} the published speed"


_RX6800 = "Radeon RX 6800 + Ryzen 9 9900X (mudkipdev/flake)"
_RX6700XT = "Radeon RX 6700 XT + Ryzen 7 5800X, memory speed not stated (markb-1/rx6700xt-local-ai)"
_B580 = "Arc B580 + Core Ultra 7 265K, memory speed not stated (chrisdesrochers/MoEArc)"

BACKEND_CHECKS: dict[str, tuple[BackendCheck, ...]] = {
    "ROCm": (
        BackendCheck(_RX6800, True, ("h73", "h74"), "experts partly on the CPU (2 runs)", 1.40, 1.55),
    ),
    "Vulkan": (
        BackendCheck(_RX6700XT, False, tuple(f"h{i}" for i in range(77, 83)),
                     "whole blocks on the CPU (-ngl 8-30)", 0.99, 1.01),
        BackendCheck(_RX6700XT, False, tuple(f"h{i}" for i in range(83, 89)),
                     "experts on the CPU (-ngl 99 --n-cpu-moe 18-48)", 1.30, 1.35),
    ),
    "SYCL": (
        BackendCheck(_B580, False, tuple(f"h{i}" for i in (*range(89, 98), 101, 102, 103)),
                     "experts on the CPU at an empty context (--n-cpu-moe)", 0.80, 1.06),
        BackendCheck(_B580, False, ("h98", "h99", "h100", "h104", "h105", "h106"),
                     "the same at a depth of 512-32768 tokens", 0.57, 0.94),
    ),
}


def backend_basis_note(backend_name: str) -> str | None:
    """What to say of figures priced for a backend other than the fitted one (None: CUDA):
    that its GPU side is CUDA's model, and how its published runs came out."""
    b = backend(backend_name)
    if b.name == FITTED_BACKEND:
        return None
    checks = BACKEND_CHECKS.get(b.name, ())
    fitted = sum(len(c.rows) for c in checks if c.fitted)
    basis = (f"{fitted} of the published runs the constants are fitted on are {b.name} runs, the rest {FITTED_BACKEND}"
             if fitted else f"no published {b.name} run is in the fit (its constants are fitted on {FITTED_BACKEND} runs)")
    said = f"llama.cpp's {b.name} backend: {basis}, so its GPU side is {FITTED_BACKEND}'s model ({b.graphs_why})"
    machines: dict[str, list[str]] = {}
    for check in checks:
        machines.setdefault(check.machine, []).append(check.text())
    for machine, texts in machines.items():
        said += f"; published on {machine}: " + ", ".join(texts)
    return said + f"; measure it (cope calibrate with a {b.name} build's llama-bench) before relying on it"
