"""Hostile `cope estimate` input: each gives a price, a "would not run" or one line, never a hang or a traceback."""

from __future__ import annotations

import re
import shlex

import pytest

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main
from engine.core.errors import CopeInputError
from engine.llamacpp.ecma_regex import MAX_STATES, RegexError, compile_pattern, search
from engine.llamacpp.llama_args import command_notes, parse_llama_command
from engine.llamacpp.tensor_overrides import LLAMA_MAX_LAYERS
from engine.llamacpp.llama_placement import placement_of
from engine.models.catalog import get_model

QWEN = get_model("qwen3-30b-a3b")
NAMES = ["blk.0.ffn_gate_exps.weight", "blk.12.ffn_down_exps.weight", "blk.7.ffn_up_exps.weight",
         "token_embd.weight", "output.weight", "blk.3.attn_q.weight"]


@pytest.mark.parametrize("pattern", [
    r"exps", r"blk\.(1)\.ffn_(up|down)_exps", r"\.ffn_(up|down|gate|gate_up)_(ch|)exps", r"^blk\.[0-9]+\.",
    r"blk\.1[0-9]\.", r"\bffn\b", r"weight$", r"^weight", r"(a|b)*c", r"\d{2}", r".*_exps\.weight$",
    r"BLK", r"blk\.[02468]\.", r"blk\.\d+\.ffn_(?:up|gate)", r"[^a-z]exps", r"x*", r"e{2,}", r"_\w+_", r"\S\s",
    r"ffn_.+?_exps", r"a{0}", r"(ffn|attn)_[qkv]?", r"[.]weight",
])
def test_matches_like_a_backtracking_engine(pattern):
    # On the ECMAScript subset COPE takes, the yes/no of a search is Python's re's.
    for name in NAMES:
        assert search(pattern, name) == bool(re.search(pattern, name)), (pattern, name)


@pytest.mark.parametrize("pattern, posix", [
    (r"blk\.[[:digit:]]\.ffn_.*_exps", r"blk\.[0-9]\.ffn_.*_exps"),
    (r"blk\.[[:digit:]]+\.", r"blk\.[0-9]+\."),
    (r"[[:upper:]]", r"[A-Z]"),
    (r"_[[:alpha:]]+_exps", r"_[A-Za-z]+_exps"),
    (r"[^[:alnum:]_.]", r"[^A-Za-z0-9_.]"),
    (r"blk\.[[:d:]]{2}\.", r"blk\.\d{2}\."),
])
def test_posix_class_names_match_as_std_regex_reads_them(pattern, posix):
    # std::regex (ECMAScript) takes [[:digit:]] and the other POSIX names inside a class;
    # each matches the same names as its plain spelling in Python's re.
    for name in NAMES + ["blk.Q.ffn_up_exps.weight", "blk.42.attn_k.weight"]:
        assert search(pattern, name) == bool(re.search(posix, name)), (pattern, name)


def test_an_unknown_posix_class_name_is_refused_with_its_name():
    with pytest.raises(RegexError, match=r"\[:digits:\] is not a character class name"):
        compile_pattern("blk\\.[[:digits:]]\\.")
    with pytest.raises(RegexError, match="missing ':]'"):
        compile_pattern("[[:digit]")


def test_catastrophic_pattern_is_linear():
    # (.+)+X backtracks 2^n ways in re (18 s on a 26-character name); here it is a plain no.
    compiled = compile_pattern("(.+)+X")
    assert compiled.size < 20
    assert not any(compiled.search(n) for n in NAMES)
    assert compile_pattern("(.+)+weight").search(NAMES[0])


@pytest.mark.parametrize("pattern, reason", [
    ("a{4294967296}", None),  # capped: no name is that long, so it matches nothing
    ("(" * 3000 + ")" * 3000, "longer than"),
    ("(" * 200 + "a" + ")" * 200, "nested more than"),
    ("((a{200}){200}){200}", "too complex"),
    (r"(a)\1", "backreference"),
    ("(?=blk)", "lookahead"),
    ("a**", "nothing to repeat"),
    ("a{2,1}", "out of order"),
    ("[z-a]", "out of order"),
    ("blk(", "missing ')'"),
])
def test_hostile_patterns_are_refused_or_bounded(pattern, reason):
    if reason is None:
        assert not search(pattern, NAMES[0])
        return
    with pytest.raises(RegexError, match=re.escape(reason)):
        compile_pattern(pattern)


def test_state_cap_holds():
    with pytest.raises(RegexError, match="too complex"):
        compile_pattern("(.?){257}" * (MAX_STATES // 500 + 2))


def test_n_cpu_moe_beyond_any_model_is_every_block():
    cmd = parse_llama_command(["llama-server", "-m", "m.gguf", "--n-cpu-moe", "1000000000"])
    assert len(cmd.overrides) == LLAMA_MAX_LAYERS and cmd.n_cpu_moe == 1_000_000_000
    assert (placement_of(cmd, QWEN).expert_cpu_share == 1).all()
    assert any("more than the model's 48 blocks" in n for n in command_notes(cmd, QWEN))


@pytest.mark.parametrize("words, needle", [
    (["-t", "99999999999999999999"], "out of range"),
    (["-c", "4294967296"], "out of range"),
    (["-t", "1_0"], "whole number"),
    (["-t", "\u0661\u0662"], "whole number"),  # Arabic-Indic digits: not what llama.cpp reads
    (["-ngl", "9" * 5000], "out of range"),
    (["-ot", "a{4294967296}=CPU", "-ot", "((((" * 40 + "=CPU"], "nested more than"),
])
def test_numbers_are_read_as_llama_cpp_reads_them(words, needle):
    with pytest.raises(CopeInputError, match=re.escape(needle)) as info:
        placement_of(parse_llama_command(["llama-server", "-m", "m.gguf", *words]), QWEN)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


@pytest.mark.parametrize("program", ["python", "bash", "/usr/bin/env", "ollama", "vllm"])
def test_a_program_that_is_not_llama_cpp_is_refused(program, capsys):
    assert main(["estimate", "--model", "qwen3-30b-a3b", "--", program, "-m", "m.gguf"]) == EXIT_INPUT
    err = capsys.readouterr().err
    assert "is not a llama.cpp program" in err and err.count("\n") == 1


@pytest.mark.parametrize("program", ["llama-sweep-bench", "./build/bin/llama-mtmd-cli", r"C:\llama\llama-server.exe"])
def test_forks_and_other_llama_programs_are_read(program):
    assert parse_llama_command([program, "-m", "m.gguf", "-t", "4"]).threads == 4


def test_a_command_quoted_as_one_word_is_split_like_a_shell(capsys):
    line = "GGML_OP_OFFLOAD_MIN_BATCH=1 llama-server -m 'my model.gguf' -ngl 99 --n-cpu-moe 20 -t 2"
    assert main(["estimate", "--model", "qwen3-30b-a3b", "--json", "--", line]) == EXIT_OK
    import json

    doc = json.loads(capsys.readouterr().out)
    assert doc["command"]["model_path"] == "my model.gguf" and doc["command"]["threads"] == 2
    assert doc["command"]["cpu_moe_blocks"] == list(range(20)) and doc["command"]["stages_cpu_experts"]
    assert doc["command"]["argv"] == shlex.split(line)


def test_threads_above_the_cpus_are_priced_at_the_cpus_and_never_exported(capsys):
    code = main(["estimate", "--model", "qwen3-30b-a3b", "--cpu", "ryzen-9-7950x", "--json", "--",
                 "llama-server", "-m", "m.gguf", "-t", "4096"])
    assert code == EXIT_OK
    import json

    doc = json.loads(capsys.readouterr().out)
    argv = doc["export"]["argv"]
    assert int(argv[argv.index("-t") + 1]) <= 32
    assert sum("4096 threads are more than the 32 logical CPUs" in n for n in doc["notes"]) == 1


def test_threads_flag_above_the_cpus_is_clamped_with_one_note(capsys):
    import json

    code = main(["advise", "--cpu", "ryzen-9-7950x", "--threads", "99999999999999999999", "--tokens", "40", "--json"])
    assert code == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    argv = doc["recommendation"]["run_now"]["argv"]
    assert argv[argv.index("-t") + 1] == "32"
    text = json.dumps(doc)
    assert text.count("threads are more than the 32 logical CPUs") == 1
