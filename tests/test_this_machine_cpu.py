"""`--gpu X` without `--cpu` plans the card with the CPU of the machine COPE runs on (issue
45): said as a warning that names that CPU and how to give another, not only in a note."""

from __future__ import annotations

from cope_tui.cli import EXIT_OK, main
from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request, preset_gpu_on_this_cpu
from engine.hardware.cpu_presets import get_cpu_preset


def this_machine():  # type: ignore[no-untyped-def]
    return get_cpu_preset("desktop-ddr5")  # stands in for detection


def test_a_gpu_preset_alone_is_planned_with_this_machine_s_cpu_and_says_so():
    choices = PlanChoices(model="olmoe-1b-7b", gpu="2x rtx-3090", tokens=50)
    request = build_request(choices, detect_cpu=this_machine)
    said = preset_gpu_on_this_cpu(choices, request.platform)
    cpu = request.platform.cpu
    assert said.startswith("--gpu 2x rtx-3090 is planned with THIS machine's CPU")
    assert cpu.name in said and f"{int(cpu.logical_threads.value)} threads" in said and "--cpu NAME" in said


def test_nothing_is_said_when_the_cpu_is_named_or_nothing_is_planned_for_a_gpu():
    named = PlanChoices(model="olmoe-1b-7b", gpu="rtx-3090", cpu="7950x", tokens=50)
    assert preset_gpu_on_this_cpu(named, build_request(named).platform) is None
    for gpu in (None, "none"):
        choices = PlanChoices(model="olmoe-1b-7b", gpu=gpu, tokens=50)
        assert preset_gpu_on_this_cpu(choices, build_request(choices, detect_cpu=this_machine).platform) is None


def test_advise_warns_on_stderr_once(capsys):
    assert main(["advise", "--model", "olmoe-1b-7b", "--gpu", "rtx-3090", "--tokens", "50"]) == EXIT_OK
    err = capsys.readouterr().err
    assert err.count("is planned with THIS machine's CPU") == 1
    assert main(["advise", "--model", "olmoe-1b-7b", "--gpu", "rtx-3090", "--cpu", "7950x", "--tokens", "50"]) == EXIT_OK
    assert "THIS machine's CPU" not in capsys.readouterr().err
