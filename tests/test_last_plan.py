"""Export, verify and estimate reuse the last plan (issue 46, part 3): `cope advise` (and the
app) record what they planned for in the cache folder; a command without plan flags runs for
that plan, one with some flags takes the rest from it, and the first line says which plan."""

from __future__ import annotations

import json
import shlex

import pytest

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main
from cope_tui.options import PlanChoices
from cope_tui.service.last_plan import last_plan, plan_path, record_plan, with_last_plan

FAST = ["--tokens", "40", "--cpu", "desktop-ddr5", "--threads", "8"]
ADVISED = ["--gpu", "rtx-4090", "--vram-budget", "12"]


def _export_json(capsys, *flags: str) -> tuple[dict, str]:  # type: ignore[no-untyped-def]
    assert main(["export", "--candidate", "partition-first", "--json", *flags]) == EXIT_OK
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_export_after_advise_exports_for_the_advised_plan(capsys):
    assert main(["advise", *ADVISED, *FAST]) == EXIT_OK
    capsys.readouterr()
    reused, err = _export_json(capsys)
    assert err.splitlines()[0].startswith("cope: plan: the last plan (cope advise, ")
    assert "--gpu rtx-4090" in err.splitlines()[0] and "--vram-budget 12" in err.splitlines()[0]
    plan_path().unlink()  # the same flags given outright: the same command
    flagged, _ = _export_json(capsys, *ADVISED, *FAST)
    assert reused["argv"] == flagged["argv"] and reused["candidate_tpot_s"] == flagged["candidate_tpot_s"]
    # and not the defaults' (an RTX 4060 Ti 16GB plan keeps another number of layers on the CPU)
    default, err = _export_json(capsys, *FAST)
    assert "cope: plan:" not in err  # only the flags given and the defaults: the JSON says so
    assert default["argv"] != reused["argv"] and default["plan"].startswith("no plan recorded (cope advise records one): ")
    assert main(["export", "--candidate", "partition-first", *FAST]) == EXIT_OK
    assert capsys.readouterr().out.splitlines()[0].startswith("# plan: no plan recorded (cope advise records one): ")


def test_flags_given_win_and_the_text_says_the_plan_first(capsys):
    assert main(["advise", *ADVISED, *FAST]) == EXIT_OK
    capsys.readouterr()
    assert main(["export", "--candidate", "partition-first", "--vram-budget", "8"]) == EXIT_OK
    out, err = capsys.readouterr()
    first = out.splitlines()[0]
    assert first.startswith("# plan: the last plan (cope advise, ") and first.endswith("; with --vram-budget 8 given here")
    twenty, _ = _export_json(capsys, "--gpu", "rtx-4090", "--vram-budget", "8", *FAST)
    assert shlex.split(out.splitlines()[-1]) == twenty["argv"]


def test_the_recorded_plan_round_trips_and_leaves_defaults_unsaid():
    choices = PlanChoices(model="qwen3-30b-a3b", gpu="2x rtx-3090", memory=None, vram_budget_gib=11.5,
                          evictions=("lru", "score"), fidelity="analytic", tokens=40)
    record_plan(choices, by="cope advise")
    last = last_plan()
    assert last is not None and last.settings == {"model": "qwen3-30b-a3b", "gpu": "2x rtx-3090",
                                                  "vram_budget_gib": "11.5", "tokens": "40",
                                                  "evictions": "lru,score", "fidelity": "analytic"}
    used = with_last_plan(PlanChoices())
    assert used.choices == choices and "--eviction lru,score" in used.line and used.reused
    machine = with_last_plan(PlanChoices(), only=("gpu", "vram_budget_gib"))
    assert machine.choices == PlanChoices(gpu="2x rtx-3090", vram_budget_gib=11.5)
    assert machine.line.startswith("the machine of ")


@pytest.mark.parametrize("text, problem", [
    ("{not json", "not JSON"),
    ('{"schema": 1, "settings": {"gpu": 3}}', "settings.gpu: not a plan setting"),
    ('{"schema": 1, "settings": {"vram_budget_gib": "-4"}}', "settings.vram_budget_gib must be a positive number"),
    ('{"schema": 7, "settings": {}}', "schema 1 with settings expected"),
])
def test_a_bad_plan_file_is_one_line_naming_it(capsys, text, problem):
    plan_path().parent.mkdir(parents=True, exist_ok=True)
    plan_path().write_text(text)
    assert main(["export", "--candidate", "partition-first", *FAST]) == EXIT_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(plan_path()) in err and problem in err, err


def test_estimate_takes_the_machine_of_the_last_plan(capsys):
    """cope estimate prices the person's command (its model, -t, -c) on the machine advise planned for."""
    assert main(["advise", *ADVISED, *FAST, "--model", "qwen3-235b-a22b"]) == EXIT_OK
    capsys.readouterr()
    command = ["--", "llama-server", "-m", "x.gguf", "-ngl", "99", "-t", "8", "-c", "4096", "--n-cpu-moe", "10"]
    assert main(["estimate", "--json", "--tokens", "40", "--model", "qwen3-30b-a3b", *command]) == EXIT_OK
    out, err = capsys.readouterr()
    first = err.splitlines()[0]
    assert first.startswith("cope: plan: the machine of the last plan") and "--gpu rtx-4090" in first
    assert "qwen3-235b" not in first  # the model is the command's, not the last plan's
    plan_path().unlink()
    assert main(["estimate", "--json", "--tokens", "40", "--model", "qwen3-30b-a3b", *ADVISED, "--cpu",
                 "desktop-ddr5", *command]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["yours"] == json.loads(out)["yours"]


def test_files_the_plan_names_are_recorded_by_absolute_path(tmp_path, monkeypatch):
    """A plan made with a relative --trace (or --model FILE.gguf) means the same file when export
    runs from another folder; ids that name no file stay as they are."""
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.jsonl").write_text("")
    monkeypatch.chdir(tmp_path)
    record_plan(PlanChoices(model="qwen3-30b-a3b", trace="traces/t.jsonl", gpu="rtx-4090"), by="cope advise")
    monkeypatch.chdir(tmp_path.parent)
    last = last_plan()
    assert last is not None and last.settings["trace"] == str(tmp_path / "traces" / "t.jsonl")
    assert last.settings["model"] == "qwen3-30b-a3b" and last.settings["gpu"] == "rtx-4090"


def test_a_vram_budget_is_not_carried_to_another_gpu(capsys):
    """--vram-budget belongs to the last plan's card: `cope estimate --gpu none` after an advise with
    one refused it ("--gpu none prices without a GPU"), and another --gpu would have inherited it."""
    assert main(["advise", "--gpu", "rtx-3060-12gb", "--vram-budget", "8", *FAST]) == EXIT_OK
    capsys.readouterr()
    bench = ["--", "llama-bench", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "0", "-t", "8", "-p", "512"]
    assert main(["estimate", "--tokens", "40", "--gpu", "none", *bench]) == EXIT_OK
    err = capsys.readouterr().err
    assert "--vram-budget 8 was the other card's: not used" in err.splitlines()[0]
    server = ["--", "llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99", "-t", "8"]
    assert main(["estimate", "--json", "--tokens", "40", "--gpu", "rtx-4090", *server]) == EXIT_OK
    assert "assumed VRAM budget: all of the GPU's 24 GiB" in json.loads(capsys.readouterr().out)["notes"]
    # without --gpu the last plan's card comes with its budget
    assert main(["estimate", "--json", "--tokens", "40", *server]) == EXIT_OK
    out, err = capsys.readouterr()
    assert "--vram-budget 8" in err.splitlines()[0] and "not used" not in err.splitlines()[0]
