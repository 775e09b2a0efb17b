"""The command `cope estimate` prints for COPE's best keeps the user's own settings: every
flag that does not set the placement, verbatim and in order, so the printed command runs
at the settings its figure was priced at."""

from __future__ import annotations

import json
import shlex

import pytest

from cope_tui.cli import EXIT_OK, main
from engine.advice.command_flags import carry_over
from engine.llamacpp.command_line import Arg, CommandLine
from engine.llamacpp.llama_args import parse_llama_command
from engine.runtimes.export import Export
from engine.runtimes.host import MAPPED_NOTE

PLATFORM = ["--tokens", "100", "--gpu", "rtx-3090", "--cpu", "ryzen-9-7950x"]
USERS = ("llama-server -m Qwen3-30B-A3B-Q4_K_M.gguf -ngl 99 -c 65536 -ctk q8_0 -ctv q8_0 -fa on --n-cpu-moe 8 "
         "--jinja --host 0.0.0.0 --port 8080 -np 2")


def _export(argv: str, env: tuple[tuple[str, str], ...] = (), notes: tuple[str, ...] = ()) -> Export:
    """COPE's command `argv` as the value an export holds: each flag an Arg keyed by its setting
    (the grouping COPE spells them with; the reader's grouping of the same words)."""
    args = tuple(Arg(key, words) for key, words in parse_llama_command(shlex.split(argv)).args)
    return Export("partition-first", "partition-first", "runs-on-stock", "",
                  CommandLine(shlex.split(argv)[0], args, env), notes=notes)


def test_placement_and_what_cope_sets_are_replaced_the_rest_kept_in_order():
    cope = _export("llama-server -m m.gguf -ngl 99 -fa on -c 65536 -t 16 --fit off --n-cpu-moe 4 --no-mmap")
    user = parse_llama_command(shlex.split(
        "CUDA_VISIBLE_DEVICES=1 GGML_OP_OFFLOAD_MIN_BATCH=64 llama-server --jinja -m m.gguf -ngl 99 -c 65536 "
        r"-ctk q8_0 -fa off -ot 'blk\.3\.=CPU' -ctv q8_0 --cpu-moe --n-cpu-moe 8 -t 16 --mmap -b 4096 "
        "--port 8080 --fit on"))
    out = carry_over(cope, user)
    assert out.display() == (
        "CUDA_VISIBLE_DEVICES=1 llama-server -m m.gguf -ngl 99 -fa off -c 65536 -t 16 --fit off --n-cpu-moe 4 "
        "--no-mmap --jinja -ctk q8_0 -ctv q8_0 -b 4096 --port 8080")


def test_loading_and_staging_stay_the_users_unless_cope_decides_them():
    all_gpu = _export("llama-server -m m.gguf -ngl 99 -fa on -c 8192 -t 8 --fit off")
    user = parse_llama_command(shlex.split("llama-server -m m.gguf --no-mmap --no-op-offload -lm none"))
    assert carry_over(all_gpu, user).display() == (
        "llama-server -m m.gguf -ngl 99 -fa on -c 8192 -t 8 --fit off --no-mmap --no-op-offload -lm none")
    staged = _export("llama-server -m m.gguf -ngl 99 -fa on -c 8192 -t 8 --fit off --cpu-moe",
                     env=(("GGML_OP_OFFLOAD_MIN_BATCH", "1"),),
                     notes=(f"{MAPPED_NOTE}: it would not fit",))
    assert carry_over(staged, user).display() == (
        "GGML_OP_OFFLOAD_MIN_BATCH=1 llama-server -m m.gguf -ngl 99 -fa on -c 8192 -t 8 --fit off --cpu-moe")


def test_llama_bench_keeps_its_tests_and_output_flags():
    cope = _export("llama-bench -m m.gguf -ngl 99 -fa 1 -t 8 -ncmoe 4 -mmp 0")
    user = parse_llama_command(shlex.split("llama-bench -m m.gguf -p 512 -n 128 -ctk q8_0 -ncmoe 10 -r 3 -o json"))
    assert carry_over(cope, user).display() == (
        "llama-bench -m m.gguf -ngl 99 -fa 1 -t 8 -ncmoe 4 -mmp 0 -p 512 -n 128 -ctk q8_0 -r 3 -o json")


def test_the_printed_command_runs_at_the_users_settings_and_costs_what_it_claims(capsys):
    # a 20 GiB budget: with the user's q8_0 KV cache the whole model would fit the 3090's 24 GiB
    budget = [*PLATFORM, "--vram-budget", "20"]
    assert main(["estimate", "--json", *budget, "--", *shlex.split(USERS)]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    export = doc["export"]
    assert export["exported"] == "partition-first"  # the best is not expressible: the nearest runs
    assert export["command"] == (
        "llama-server -m Qwen3-30B-A3B-Q4_K_M.gguf -ngl 99 -fa on -c 65536 -t 16 --fit off --n-cpu-moe 7 "
        "-lm none -ctk q8_0 -ctv q8_0 --jinja --host 0.0.0.0 --port 8080 -np 2")
    # Pricing the printed command gives the figure claimed for it.
    assert main(["estimate", "--json", *budget, "--", *export["argv"]]) == EXIT_OK
    again = json.loads(capsys.readouterr().out)
    assert again["yours"]["tpot_s"] == pytest.approx(export["nearest_tpot_s"], rel=1e-9)
    assert again["command"]["maps_to"] == "partition-first"
    assert again["yours"]["tpot_s"] < doc["yours"]["tpot_s"]  # and it is faster than the user's, as claimed
