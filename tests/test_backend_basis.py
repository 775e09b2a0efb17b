"""Figures priced for a llama.cpp backend no published run is behind say so (issue 45 item 4:
Vulkan was priced 1.42x slower than ROCm on an RX 7900 XTX with no run of either behind it)."""

from __future__ import annotations

import pytest

from bench import published_extra_rows, published_rows
from engine.hardware.gpu_backends import PUBLISHED_BACKENDS, unpublished_backend_note
from engine.hardware.presets import get_gpu_preset


def _rows():  # type: ignore[no-untyped-def]
    for module in (published_rows, published_extra_rows):
        for value in vars(module).values():
            if isinstance(value, (list, tuple)):
                yield from (row for row in value if isinstance(getattr(row, "gpu", None), str))


def test_the_published_backends_are_those_of_the_published_rows():
    gpus = {row.gpu for row in _rows()}
    assert len(gpus) >= 10
    assert {get_gpu_preset(g).backend for g in gpus} == set(PUBLISHED_BACKENDS)
    assert unpublished_backend_note("CUDA") is None


@pytest.mark.parametrize("gpu,backend", [("rx-7900-xtx@vulkan", "Vulkan"), ("rx-7900-xtx", "ROCm"),
                                         ("rtx-4090@vulkan", "Vulkan")])
def test_advise_says_when_no_published_run_of_the_backend_is_behind_its_figures(run_cope, gpu, backend):  # type: ignore[no-untyped-def]
    code, out, err = run_cope("advise", "--gpu", gpu, "--cpu", "7950x", "--ram-gib", "64", "--tokens", "200")
    assert code == 0, err
    notes = [line for line in out.splitlines() if "backend: no published" in line]
    assert len(notes) == 1 and f"no published {backend} run is behind these figures" in notes[0]


def test_a_cuda_plan_and_an_estimate_on_vulkan(run_cope):  # type: ignore[no-untyped-def]
    code, out, _ = run_cope("advise", "--gpu", "rtx-4090", "--cpu", "7950x", "--ram-gib", "64", "--tokens", "200")
    assert code == 0 and "backend: no published" not in out
    # a command that names a Vulkan device is planned on Vulkan (cope_tui/service/pasted.py), and says so
    code, out, err = run_cope("estimate", "--gpu", "rx-7900-xtx", "--cpu", "7950x", "--ram-gib", "64", "--",
                              "llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99", "-dev", "Vulkan0")
    assert code == 0, err
    assert "no published Vulkan run is behind these figures" in out
