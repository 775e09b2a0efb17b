"""COPE's llama.cpp commands are values (engine/llamacpp/command_line.py), priced from the
value and printed from it. Reading the value must give what llama.cpp would do with the
printed words: every command COPE builds reads the same from its value as from its words,
and every setting written is read back as that setting."""

from __future__ import annotations

import shlex

import pytest

from engine.advice.calibration_runs import cpu_runs, gpu_runs
from engine.advice.command_flags import carry_over
from engine.core.errors import CopeInputError
from engine.llamacpp.command_line import Arg, CommandLine, spelled
from engine.llamacpp.llama_args import parse_llama_command, read_command_line
from engine.llamacpp.llamacpp_flags import BINARIES, FLAG_TABLE, OFFLOAD_ENV, read_key
from engine.models.catalog import get_model
from tests.test_export import CASES, do_export


def _words(line: CommandLine) -> list[str]:
    """What a person pastes: the printed command split as a shell splits it."""
    return shlex.split(line.display())


def _fork_and_ik_cases():
    # The forks' own flags (--moe-cache-*, -cuda) and ik_llama.cpp's older spellings.
    return [("fork-fixed-parallel", "partial", "fixed.parallel.uniform", "fork", b) for b in BINARIES] + [
        ("ik-stage", "zero", "fixed.stage.uniform", "ik_llama.cpp", "llama-server"),
        ("ik-partition", "partial", "partition-first", "ik_llama.cpp", "llama-server")]


@pytest.mark.parametrize("model_id", ["qwen3-30b-a3b", "deepseek-coder-v2-lite-instruct"])
@pytest.mark.parametrize("case", CASES + tuple(_fork_and_ik_cases()), ids=lambda c: f"{c[0]}-{c[3]}-{c[4]}")
def test_an_export_reads_the_same_from_its_value_as_from_its_printed_words(model_id, case):
    _, plan_kind, cid, runtime, binary = case
    line = do_export(model_id, plan_kind, cid, runtime, binary).command
    assert read_command_line(line) == parse_llama_command(_words(line))


def test_calibration_runs_and_the_cpu_only_plan_read_as_printed(tmp_path):
    from cope_tui.options import PlanChoices
    from cope_tui.service.cpu_only import plan_cpu_only
    from cope_tui.service.request import build_request

    choices = PlanChoices(model="qwen3-30b-a3b", gpu="rtx-3090", cpu="desktop-ddr5", trace="synthetic")
    request = build_request(choices)
    runs = cpu_runs("m.gguf", 8) + gpu_runs(request, "m.gguf", 8)
    assert {r.name for r in runs} >= {"cpu-only", "all-on-gpu", "half-experts-on-cpu", "experts-on-cpu"}
    for run in runs:
        assert run.command() == parse_llama_command(list(run.argv)), run.name
    cpu_only = plan_cpu_only(PlanChoices(model="qwen3-30b-a3b", gpu="none", cpu="desktop-ddr5", trace="synthetic"))
    assert read_command_line(cpu_only.line) == parse_llama_command(list(cpu_only.argv))
    assert cpu_only.argv[:5] == ("llama-server", "-m", "qwen3-30b-a3b.gguf", "-ngl", "0")


@pytest.mark.parametrize("binary", BINARIES)
def test_every_spelling_of_a_setting_is_read_back_as_that_setting(binary):
    """The one table's two sides agree: each spelling the writer can choose (the newest, and
    each older one a build may take) reads back as what it sets, for every binary."""
    value = {"model": "m.gguf", "gpu_layers": 7, "context": 4096, "threads": 6, "n_cpu_moe": 3,
             "fork_n_cpu_moe": 3, "override_tensor": r"blk\.(1|2)\.ffn_up_exps=CPU", "tensor_split": "1,1",
             "device": "CUDA0", "n_prompt": 0, "n_gen": 16, "batch": 1024, "ubatch": 256, "fit_target": 2048,
             "moe_cache_mib": 900, "cache_type_k": "q8_0", "cache_type_v": "q8_0"}
    for flag in FLAG_TABLE:
        for spelling in flag.spelling.get(binary, ()):
            words = [spelling.option] if spelling.switch else [spelling.option, spelling.value or str(value.get(
                flag.setting, "x"))]
            line = CommandLine(binary, (Arg(read_key(spelling.option), tuple(words)),))
            got = read_command_line(line)
            assert got == parse_llama_command([binary, *words]), (flag.setting, words)
            effect = {
                "model": got.model_path == "m.gguf", "gpu_layers": got.gpu_layers == "7",
                "context": got.context == 4096, "threads": got.threads == 6,
                "flash_attn": got.flash_attn in ("on", "1"), "fit": got.fit == "off",
                "no_mmap": got.no_mmap, "cpu_moe": len(got.overrides) == 1,
                "n_cpu_moe": got.n_cpu_moe == 3, "fork_n_cpu_moe": got.n_cpu_moe == 3,
                "override_tensor": [o[:2] for o in got.overrides] == [(r"blk\.(1|2)\.ffn_up_exps", "CPU")],
                "tensor_split": got.tensor_split == "1,1", "device": got.devices == "CUDA0",
                "n_prompt": binary != "llama-bench" or got.n_prompt == 0, "n_gen": got.n_gen == 16,
                "batch": got.batch == 1024, "ubatch": got.ubatch == 256, "fit_target": got.fit_target_mib == 2048,
                "moe_cache_mib": got.moe_cache_mib == 900, "cache_type_k": got.kv_bytes_per_element < 2.0,
                "cache_type_v": got.kv_bytes_per_element < 2.0,
            }.get(flag.setting)
            if effect is None:  # a flag COPE writes but does not read: listed back, never dropped
                assert got.unknown == (" ".join(words),) and got.args == ((spelling.option, tuple(words)),)
            else:
                assert effect, (flag.setting, words)


def test_a_value_with_a_problem_is_refused_as_its_words_are():
    bench = CommandLine("llama-bench", (Arg("cpu_moe", ("--cpu-moe",)),))
    with pytest.raises(CopeInputError, match="llama-bench has no --cpu-moe"):
        read_command_line(bench)
    with pytest.raises(CopeInputError, match="-c needs a value"):
        read_command_line(CommandLine("llama-server", (Arg("context", ("-c",)),)))


def test_a_staged_value_prices_its_environment():
    """The value's environment is part of the command: GGML_OP_OFFLOAD_MIN_BATCH=1 stages."""
    line = CommandLine("llama-server", spelled("llama-server", "cpu_moe"), ((OFFLOAD_ENV, "1"),))
    assert read_command_line(line).stages_cpu_experts
    assert read_command_line(line) == parse_llama_command(_words(line))


def test_the_users_flags_cope_sets_itself_give_way_whatever_their_name():
    """carry_over drops the user's flag where COPE's command sets the same one, also for
    flags COPE writes but does not read (ik_llama.cpp's -cuda)."""
    model = get_model("qwen3-30b-a3b")
    staged = do_export(model.id, "zero", "fixed.stage.uniform", "ik_llama.cpp", "llama-server")
    assert "-cuda" in staged.argv
    user = parse_llama_command(shlex.split("llama-server -m m.gguf -cuda fusion=1 --jinja"))
    out = carry_over(staged, user)
    assert out.argv == staged.argv + ("--jinja",)
