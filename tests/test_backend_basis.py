"""Figures priced for a llama.cpp backend other than CUDA say what is behind them (issue 45
item 4: Vulkan was priced 1.42x slower than ROCm on an RX 7900 XTX with no run of either
behind it; issue 44: the published ROCm, Vulkan and SYCL runs, machine by machine)."""

from __future__ import annotations

import csv

import pytest

import bench.published as published
from bench import published_extra_rows, published_hybrid_rows, published_rows
from engine.hardware.backend_evidence import BACKEND_CHECKS, FITTED_BACKEND, backend_basis_note
from engine.hardware.presets import get_gpu_preset


def _module_rows(module):  # type: ignore[no-untyped-def]
    for value in vars(module).values():
        if isinstance(value, (list, tuple)):
            yield from (row for row in value if isinstance(getattr(row, "gpu", None), str))


def _rows():  # type: ignore[no-untyped-def]
    for module in (published_rows, published_extra_rows, published_hybrid_rows):
        yield from _module_rows(module)


@pytest.fixture(scope="module")
def priced() -> dict:
    rows = published.price_all(list(csv.DictReader(open(published.CSV))))
    return {p.key: p for p in rows}


def test_every_fitted_run_off_cuda_is_named_by_a_check():
    """The fit's rows on another backend are exactly the checks marked fitted."""
    prefix = {published_rows: "", published_extra_rows: "x", published_hybrid_rows: "h"}
    off_cuda = {f"{prefix[module]}{row.index}" for module in prefix for row in _module_rows(module)
                if row.stated and get_gpu_preset(row.gpu).backend != FITTED_BACKEND}
    named = {key for checks in BACKEND_CHECKS.values() for c in checks if c.fitted for key in c.rows}
    assert off_cuda == named
    gpus = {row.gpu for row in _rows()}
    assert len(gpus) >= 10 and {get_gpu_preset(g).backend for g in gpus} >= {"CUDA", "ROCm", "Vulkan", "SYCL"}


@pytest.mark.parametrize("name", sorted(BACKEND_CHECKS))
def test_each_check_is_what_bench_published_prints(priced, name):  # type: ignore[no-untyped-def]
    for check in BACKEND_CHECKS[name]:
        rows = [priced[key] for key in check.rows]
        assert all(get_gpu_preset(p.row.gpu).backend == name for p in rows)
        assert all(p.row.stated == check.fitted for p in rows)
        ratios = [round(p.ratio, 2) for p in rows]
        assert (min(ratios), max(ratios)) == (check.ratio_low, check.ratio_high), (check.placement, ratios)


def test_the_note_carries_the_checks():
    assert backend_basis_note("CUDA") is None
    for name, checks in BACKEND_CHECKS.items():
        note = backend_basis_note(name.lower())
        assert note is not None and all(check.text() in note for check in checks)
        assert note.count("published on") == len({check.machine for check in checks})
    rocm, vulkan = backend_basis_note("ROCm"), backend_basis_note("Vulkan")
    assert "2 of the published runs the constants are fitted on are ROCm runs" in rocm
    assert "no published Vulkan run is in the fit" in vulkan
    assert "whole blocks on the CPU (-ngl 8-30): COPE's estimate 0.99-" in vulkan  # the -ngl split priced about right


@pytest.mark.parametrize("gpu,backend", [("rx-7900-xtx@vulkan", "Vulkan"), ("rx-7900-xtx", "ROCm"),
                                         ("rtx-4090@vulkan", "Vulkan")])
def test_advise_says_what_is_behind_a_backends_figures(run_cope, gpu, backend):  # type: ignore[no-untyped-def]
    code, out, err = run_cope("advise", "--gpu", gpu, "--cpu", "7950x", "--ram-gib", "64", "--tokens", "200")
    assert code == 0, err
    notes = [line for line in out.splitlines() if f"llama.cpp's {backend} backend:" in line]
    assert len(notes) == 1 and "published on" in notes[0] and "before relying on it" in notes[0]


def test_a_cuda_plan_and_an_estimate_on_vulkan(run_cope):  # type: ignore[no-untyped-def]
    code, out, _ = run_cope("advise", "--gpu", "rtx-4090", "--cpu", "7950x", "--ram-gib", "64", "--tokens", "200")
    assert code == 0 and "backend:" not in out
    # a command that names a Vulkan device is planned on Vulkan (cope_tui/service/pasted.py), and says so
    code, out, err = run_cope("estimate", "--gpu", "rx-7900-xtx", "--cpu", "7950x", "--ram-gib", "64", "--",
                              "llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99", "-dev", "Vulkan0")
    assert code == 0, err
    assert "no published Vulkan run is in the fit" in out and "--n-cpu-moe 18-48" in out
