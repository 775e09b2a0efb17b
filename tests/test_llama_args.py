"""Reading the llama.cpp command a person already runs, and `cope estimate`."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main
from engine.core.errors import CopeInputError
from engine.llamacpp.llama_args import command_notes, parse_llama_command
from engine.llamacpp.llama_placement import offloads_output_first, placement_of
from engine.models.catalog import get_model

QWEN = get_model("qwen3-30b-a3b")  # 48 MoE blocks 0..47
DS = get_model("deepseek-coder-v2-lite-instruct")  # block 0 dense, MoE 1..26


def blocks_on_cpu(line: str, model=QWEN) -> list[int]:
    """The MoE blocks with any of their expert tensors on the CPU."""
    share = placement_of(parse_llama_command(shlex.split(line)), model).expert_cpu_share
    return [model.moe_blocks[i] for i in np.flatnonzero(share > 0)]


@pytest.mark.parametrize(
    "line",
    [
        "llama-server -m model.gguf -ngl 99 --n-cpu-moe 24 -t 8",
        "llama-server -m model.gguf -ngl 99 -ncmoe 24 -t 8",
        "llama-server --model=model.gguf --n-gpu-layers=99 --n-cpu-moe=24 --threads=8",
        "llama-server --model model.gguf --gpu-layers 99 --n_cpu_moe 24 --threads 8",
        "./build/bin/llama-cli -m model.gguf -ngl 99 -ncmoe=24 -t=8",
        "llama-bench -m model.gguf -ngl 99 -ncmoe 24 -t 8 -p 0 -n 64",
    ],
)
def test_first_n_in_every_spelling(line):
    assert blocks_on_cpu(line) == list(range(24))
    cmd = parse_llama_command(shlex.split(line))
    assert cmd.threads == 8 and cmd.model_path == "model.gguf" and cmd.gpu_layers == "99"


def test_n_cpu_moe_counts_dense_blocks():
    # --n-cpu-moe 4 on DeepSeek-Lite: blocks 0..3, block 0 has no experts: 3 MoE layers.
    assert blocks_on_cpu("llama-server -m m.gguf --n-cpu-moe 4", DS) == [1, 2, 3]


def test_cpu_moe_both_spellings():
    assert blocks_on_cpu("llama-server -m m.gguf --cpu-moe") == list(range(48))
    assert blocks_on_cpu("llama-server -m m.gguf -cmoe") == list(range(48))


def test_several_override_tensor_forms():
    line = (r"llama-server -m m.gguf -ngl 99 -ot 'blk\.(40|41)\.ffn_.*_exps=CPU' "
            r"--override-tensor='blk\.45\.ffn_(up|down|gate)_exps=CPU,blk\.46\.ffn_.*=CPU' "
            r"-ot blk\.47\.=CUDA0 -ot 'exps=CPU'")
    # blk.47 goes to CUDA0 first (first match wins), every other expert then to the CPU.
    assert blocks_on_cpu(line) == list(range(47))
    assert blocks_on_cpu(r"llama-server -ot 'blk\.1\.ffn_.*=CPU'") == [1]  # not 10..19
    assert blocks_on_cpu(r"llama-server -ot '\.ffn_(up|down)_exps=CPU'") == list(range(48))  # partial
    cmd = parse_llama_command(shlex.split(r"llama-server -ot '\.ffn_(up|down)_exps=CPU'"))
    placement = placement_of(cmd, QWEN)
    assert np.allclose(placement.expert_cpu_share, 2 / 3)  # up and down of gate, up, down
    assert placement.whole_layer_set is None and "some expert projections on the CPU" in placement.describe(QWEN)


def test_llama_bench_override_groups():
    cmd = parse_llama_command(shlex.split(r"llama-bench -m m.gguf -ot 'blk\.3\.=CPU;blk\.4\.=CPU,blk\.5\.=CPU'"))
    assert [p for p, _, _ in cmd.overrides] == [r"blk\.3\.", r"blk\.4\."]
    assert "first is estimated" in cmd.notes[0]


def test_op_offload_switches_and_env():
    cmd = parse_llama_command(shlex.split("GGML_OP_OFFLOAD_MIN_BATCH=1 llama-server -m m.gguf --cpu-moe"))
    assert cmd.stages_cpu_experts
    cmd = parse_llama_command(shlex.split("env GGML_OP_OFFLOAD_MIN_BATCH=1 llama-server --cpu-moe --no-op-offload"))
    assert not cmd.stages_cpu_experts and cmd.no_op_offload
    cmd = parse_llama_command(["llama-server", "--cpu-moe"], env={"GGML_OP_OFFLOAD_MIN_BATCH": "32"})
    assert not cmd.stages_cpu_experts
    assert any("no effect" in n for n in command_notes(cmd, QWEN))
    assert parse_llama_command(shlex.split("llama-bench -nopo 1")).no_op_offload


def test_context_flash_attn_mmap_and_unknown_flags_are_listed():
    line = ("llama-server -m m.gguf -c 16384 -fa on --no-mmap --port 8080 --jinja -np 2 "
            "--host 0.0.0.0 --ctx-size 32768")
    cmd = parse_llama_command(shlex.split(line))
    assert cmd.context == 32768 and cmd.flash_attn == "on" and cmd.no_mmap
    assert cmd.unknown == ("--port 8080", "--jinja", "-np 2", "--host 0.0.0.0")
    old = parse_llama_command(shlex.split("llama-server -fa -t 4"))  # -fa as an old switch
    assert old.flash_attn == "on" and old.threads == 4
    assert any("-fa off" in n for n in command_notes(parse_llama_command(["llama-server", "-fa", "off"]), QWEN))
    # Without -ngl, llama-server's --fit decides (engine/llamacpp/llama_fit.py, tests/test_llama_fit.py); llama-bench has none.
    assert not any("no -ngl" in n for n in command_notes(parse_llama_command(["llama-server"]), QWEN))
    assert any("no -ngl: llama-bench offloads every layer" in n
               for n in command_notes(parse_llama_command(["llama-bench"]), QWEN))
    # -ngl 10 offloads the output layer and the last 9 of 48 blocks (llama-model.cpp since PR 18148:
    # i_gpu_start = n_layer + 1 - ngl); ik_llama.cpp and older builds the last 10 blocks and not the output.
    ten = placement_of(parse_llama_command(["llama-server", "-ngl", "10"]), QWEN)
    assert np.flatnonzero(ten.gpu_blocks).tolist() == list(range(39, 48)) and ten.output_on_gpu
    assert (ten.expert_cpu_share[:39] == 1).all() and (ten.expert_cpu_share[39:] == 0).all()
    old_rule = placement_of(parse_llama_command(["llama-server", "-ngl", "10"]), QWEN, output_first=False)
    assert np.flatnonzero(old_rule.gpu_blocks).tolist() == list(range(38, 48)) and not old_rule.output_on_gpu
    for first in (True, False):
        every = placement_of(parse_llama_command(["llama-server", "-ngl", "49"]), QWEN, output_first=first)
        assert every.output_on_gpu and every.gpu_blocks.all()
    assert offloads_output_first("llama.cpp") and offloads_output_first("llama.cpp", "2026-01")
    assert not offloads_output_first("llama.cpp", "2025-11-30") and not offloads_output_first("ik_llama.cpp")


@pytest.mark.parametrize(
    "words, needle",
    [
        ([], "empty"),
        (["llama-server", "-t"], "-t needs a value"),
        (["llama-server", "-t", "eight"], "whole number"),
        (["llama-server", "--n-cpu-moe", "-2"], ">= 0"),
        (["llama-server", "-ot", "blk.3"], "<pattern>=<buffer>"),
        (["llama-server", "-ot", "blk(=CPU"], "not a regular expression"),
        (["llama-server", "--cpu-moe=1"], "takes no value"),
    ],
)
def test_bad_commands_are_one_line_errors(words, needle):
    with pytest.raises(CopeInputError, match=needle.replace("(", r"\(")) as info:
        parse_llama_command(words)
    assert "\n" not in str(info.value)


FAST = ["--tokens", "100", "--cpu", "desktop-ddr5"]


def test_cope_estimate_shows_the_command_beside_the_best(capsys):
    code = main(["estimate", "--model", "qwen3-30b-a3b", *FAST, "--",
                 "llama-server", "-m", "model.gguf", "-ngl", "99", "--n-cpu-moe", "24", "-t", "8", "--port", "8080"])
    out = capsys.readouterr().out
    assert code == EXIT_OK
    assert "Your command:  24 of 48 MoE layers' experts on the CPU (blocks 0..23)" in out
    assert "COPE's best that stock llama.cpp runs:" in out and "x yours)" in out
    assert out.index("COPE's best that stock llama.cpp runs:") < out.index("Command for COPE's best that")
    assert "Flags not modelled (listed, not used): --port 8080" in out


def test_cope_estimate_json_matches_the_partition_it_describes(capsys):
    # The same layer set as advise's partition-first must get advise's figure.
    assert main(["advise", "--json", "--model", "deepseek-coder-v2-lite-instruct", "--vram-budget", "8",
                 "--threads", "8", *FAST]) == EXIT_OK
    adv = json.loads(capsys.readouterr().out)
    first = next(c for c in adv["candidates"] if c["id"] == "partition-first")
    n_blocks = int(first["detail"].split()[1])
    assert main(["estimate", "--json", "--model", "deepseek-coder-v2-lite-instruct", "--vram-budget", "8", *FAST,
                 "--", "llama-server", "-m", "m.gguf", "-t", "8", f"--n-cpu-moe={n_blocks}"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert doc["yours"]["tpot_s"] == pytest.approx(first["tpot_s"], rel=1e-12)
    assert doc["command"]["cpu_moe_blocks"][0] == 1
    assert doc["best"]["id"] == adv["recommendation"]["fastest_estimate"]


def test_cope_estimate_needs_a_model(capsys):
    assert main(["estimate", *FAST, "--", "llama-server", "-m", "/nowhere/x.gguf"]) == EXIT_INPUT
    assert "--model" in capsys.readouterr().err


def test_cope_estimate_takes_model_and_quant_from_a_missing_files_name(capsys):
    # The file is on another machine: its published name says the catalog model and quant.
    assert main(["estimate", "--json", *FAST, "--", "llama-server", "-m",
                 "/elsewhere/Qwen3-30B-A3B-Instruct-2507-Q3_K_M.gguf", "-t", "8", "--n-cpu-moe", "24"]) == EXIT_OK
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert "priced as the catalog's qwen3-30b-a3b, Q3_K_M (from the file name)" in captured.err
    assert doc["command"]["cpu_moe_blocks"] == list(range(24))
    # --quant still wins over the name.
    assert main(["estimate", "--json", "--quant", "Q8_0", *FAST, "--", "llama-server", "-m",
                 "/elsewhere/gpt-oss-20b-mxfp4.gguf", "-t", "8"]) == EXIT_OK
    captured = capsys.readouterr()
    assert "priced as the catalog's gpt-oss-20b (from the file name)" in captured.err
    assert not any("the file says" in n for n in json.loads(captured.out)["notes"])


@pytest.mark.parametrize(("name", "priced_as", "note"), [
    ("DeepSeek-V3-0324-Q2_K_L-00001-of-00005.gguf", "Q2_K",
     "-m DeepSeek-V3-0324-Q2_K_L-00001-of-00005.gguf: the file says Q2_K_L; priced as Q2_K, the nearest quantization "
     "COPE sizes (Q2_K with the token embedding and output at Q8_0: a little larger than priced; give the GGUF file "
     "for exact sizes)"),
    ("Qwen3-30B-A3B-IQ2_XXS.gguf", "Q4_K_M",
     "-m Qwen3-30B-A3B-IQ2_XXS.gguf: the file says IQ2_XXS, a quantization COPE does not recognise (it sizes F16, BF16, "
     "Q8_0, Q6_K, Q5_K_M, Q5_K_S, Q4_K_M, Q4_K_S, Q4_0, IQ4_XS, Q3_K_M, IQ3_XXS, Q2_K, MXFP4); priced as Q4_K_M, the "
     "model's usual GGUF (give the GGUF file for exact sizes, or --quant)"),
])
def test_cope_estimate_says_what_the_files_quantization_was_priced_as(capsys, name, priced_as, note):
    words = ["--", "llama-server", "-m", f"/elsewhere/{name}", "-ngl", "99", "--cpu-moe", "-t", "8"]
    assert main(["estimate", "--json", *FAST, *words]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert note in doc["notes"]
    assert main(["estimate", *FAST, *words]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith(f"COPE estimate: ") and f" {priced_as}, 8 threads" in out.splitlines()[0]
    assert f"  - {note}" in out
