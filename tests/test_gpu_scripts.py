"""The GPU scripts under bench/ as the engineer on the CUDA machine meets them: every one
that runs `cope` installs the same wheels and plans for the GPU it runs on (no `--gpu`
preset); without CUDA each stops in one line with exit 2 before doing anything; the
wheel installer takes what this Python can load; the host pool is built once per
process; missing device properties are said to be missing, with the measured figure used.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

import install_wheels  # noqa: E402

GIB = 1024**3


def cope_scripts() -> list[Path]:
    """The bench/ shell scripts that run `cope` (python -m cope_tui.cli)."""
    return sorted(p for p in BENCH.glob("*.sh") if "cope_tui.cli" in p.read_text() and p.name != "gpu_env.sh")


def code_lines(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not line.lstrip().startswith("#")]


def test_every_script_that_runs_cope_installs_the_same_wheels():
    scripts = cope_scripts()
    assert {p.name for p in scripts} >= {"gpu_first_run.sh", "gpu_validate.sh", "gpu_probe_check.sh"}
    for script in scripts:
        code = "\n".join(code_lines(script))
        assert re.search(r'^\. "\$root/bench/gpu_env\.sh"$', code, re.M), f"{script.name} does not source gpu_env.sh"
        assert re.search(r"^\s*gpu_env_install \S+ ", code, re.M), f"{script.name} does not install the wheels"
        assert re.search(r"^\s*gpu_env_cuda \S+ ", code, re.M), f"{script.name} does not check CUDA"
        # The one installer, and no other way in: no pip install, no checkout venv of its own.
        assert "pip install" not in code and ".venv" not in code, script.name


def test_no_script_that_runs_cope_passes_a_gpu_preset():
    for script in cope_scripts() + [BENCH / "gpu_env.sh"]:
        for line in code_lines(script):
            if not re.search(r"--gpu(?![\w-])", line):
                continue
            # Only gpu_probe_check.sh's refusal of a --gpu the caller passes names the flag.
            assert script.name == "gpu_probe_check.sh" and ("--gpu|--gpu=*)" in line or "no --gpu preset" in line), \
                f"{script.name}: {line.strip()}"


@pytest.mark.parametrize("name", ["gpu_first_run.sh", "gpu_validate.sh", "gpu_probe_check.sh"])
def test_without_cuda_each_script_exits_2_in_one_line(tmp_path, name):
    out = tmp_path / "out"
    env = dict(os.environ, PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="", COPE_WHEELS=str(tmp_path / "none"))
    run = subprocess.run(["bash", str(BENCH / name), str(out)], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=120)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"{name[:-3]}: no usable CUDA device here") and "--dry-run" in lines[0]
    assert run.stdout == ""
    assert not out.exists()  # it stopped before making anything


def test_dry_run_without_wheels_exits_2_in_one_line(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="", COPE_WHEELS=str(tmp_path / "none"))
    run = subprocess.run(["bash", str(BENCH / "gpu_first_run.sh"), "--dry-run", str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert run.returncode == 2
    assert run.stderr.splitlines() == [run.stderr.strip()]
    assert "no cope_tui wheel" in run.stderr and "bench/offline_wheels.sh" in run.stderr


# --- the installer ----------------------------------------------------------------------


def fake_wheel(folder: Path, name: str, member: str) -> None:
    with zipfile.ZipFile(folder / name, "w") as z:
        z.writestr(member, "x")


def test_installer_unpacks_the_newest_wheel_this_python_loads(tmp_path):
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    this = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    other = "cp39" if this != "cp39" else "cp310"
    tag = f"manylinux_2_17_{platform.machine()}.manylinux2014_{platform.machine()}"
    fake_wheel(wheels, "cope_tui-0.1.0-py3-none-any.whl", "cope_tui/marker")
    fake_wheel(wheels, f"orjson-3.13.0-{this}-{this}-{tag}.whl", "orjson/this_python")
    fake_wheel(wheels, f"orjson-3.13.0-{other}-{other}-{tag}.whl", "orjson/other_python")
    fake_wheel(wheels, "pytest-8.4.2-py3-none-any.whl", "pytest/new")
    fake_wheel(wheels, "pytest-8.10.0-py3-none-any.whl", "pytest/newer")
    assert install_wheels.main([str(wheels), str(site)]) == 0
    assert (site / "orjson/this_python").exists() and not (site / "orjson/other_python").exists()
    assert (site / "pytest/newer").exists() and not (site / "pytest/new").exists()  # 8.10 after 8.4
    assert (site / "cope_tui/marker").exists()


def test_installer_without_a_wheel_for_this_python_says_so_in_one_line(tmp_path, capsys):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    fake_wheel(wheels, "cope_tui-0.1.0-py3-none-any.whl", "cope_tui/marker")
    fake_wheel(wheels, "orjson-3.13.0-cp39-cp39-manylinux_2_17_x86_64.whl", "orjson/x")
    assert install_wheels.main([str(wheels), str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no orjson wheel for CPython" in err and "cp39" in err
    assert not (tmp_path / "site").exists()


def test_abi3_and_platform_tags():
    ok = install_wheels.compatible
    assert ok("x-1.0-cp38-abi3-manylinux_2_17_x86_64.whl", python=(3, 12), machine="x86_64")
    assert not ok("x-1.0-cp313-abi3-manylinux_2_17_x86_64.whl", python=(3, 12), machine="x86_64")
    assert not ok("x-1.0-cp312-cp312-manylinux_2_17_aarch64.whl", python=(3, 12), machine="x86_64")
    assert not ok("x-1.0-cp312-cp312-win_amd64.whl", python=(3, 12), machine="x86_64")
    assert ok("x-1.0-py2.py3-none-any.whl", python=(3, 12), machine="x86_64")


# --- one host pool per process -------------------------------------------------------------


def test_prober_and_executor_share_one_host_pool():
    pytest.importorskip("torch")
    from engine.cost.analytic_cost import AnalyticCostModel
    from engine.hardware.presets import platform_from
    from engine.models.quant import get_quantization
    from probes import host_pool
    from probes.executor import Executor
    from probes.local_prober import LocalProber, PresetGpu
    from tests.factories import tiny_model

    model, quant = tiny_model(), get_quantization("Q8_0")
    analytic = AnalyticCostModel(model, quant, platform_from("rtx-4090", None, None), context_tokens=512)
    pool_bytes = 4 * 2**20
    before = len(host_pool.BUILT)
    first = LocalProber(model, quant, PresetGpu(analytic), pool_bytes=pool_bytes, cuda=False)
    second = LocalProber(model, quant, PresetGpu(analytic), pool_bytes=pool_bytes, cuda=False)
    executor = Executor(model, quant, mode="timed", gpu_device="cpu", host_pool_bytes=pool_bytes)
    assert first.cpu_pool is second.cpu_pool is executor.host
    assert len(host_pool.BUILT) == before + 1
    other = Executor(model, quant, mode="timed", gpu_device="cpu", host_pool_bytes=pool_bytes, seed=3)
    assert other.host is not first.cpu_pool  # other bytes: a pool of its own
    assert len(host_pool.BUILT) == before + 2


# --- missing device properties -------------------------------------------------------------


def h200_torch_without_clock():
    props = SimpleNamespace(name="NVIDIA H200", total_memory=143_771_000_832, multi_processor_count=132,
                            uuid="1234abcd-0000")  # no memory_clock_rate, no memory_bus_width
    cuda = SimpleNamespace(is_available=lambda: True, device_count=lambda: 1, get_device_properties=lambda i: props,
                           mem_get_info=lambda i: (140 * GIB, 141 * GIB))
    return SimpleNamespace(__version__="2.11.0+cu130", version=SimpleNamespace(cuda="13.0", hip=None), cuda=cuda)


def test_missing_memory_clock_is_said_missing_and_the_measured_bandwidth_used(monkeypatch):
    from engine.hardware.platform import Fact
    from probes import detect
    from probes.gpu import detect_gpu, torch_gpu_info

    info = torch_gpu_info(h200_torch_without_clock())
    note = info.mem_bandwidth_bytes_per_s.note
    assert not info.mem_bandwidth_bytes_per_s.known
    assert "no memory_clock_rate and no memory_bus_width" in note and "torch 2.11.0+cu130, CUDA 13.0" in note
    assert "measured" in note and "older" not in note

    monkeypatch.setattr(detect, "detect_gpu", lambda device: detect_gpu(
        device, torch=h200_torch_without_clock(), nvml=None, device_files=["/dev/nvidia0"]))
    monkeypatch.setattr(detect, "measure_cpu_memory_bandwidth",
                        lambda threads=None: Fact.measured(50e9, "fake CPU read"))
    monkeypatch.setattr(detect, "measure_h2d_bandwidth",
                        lambda expert_bytes, pinned, device=0: Fact.measured(50e9 if pinned else 20e9, "fake copy"))
    monkeypatch.setattr(detect, "measure_gpu_memory_bandwidth", lambda device=0: Fact.measured(4.1e12, "fake read"))
    gpu = detect.detect_platform(measure=True).gpu
    bw = gpu.mem_bandwidth_bytes_per_s
    assert bw.basis == "measured" and bw.value == 4.1e12
    assert "of the spec sheet's peak" in bw.note  # the peak compared with is the H200's sheet, and says so
