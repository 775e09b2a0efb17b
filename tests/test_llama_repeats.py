"""llama-bench's lists and ranges price their first test and say so; a flag repeated in
llama-server says which value llama.cpp uses; llama-bench has no --cpu-moe; a switch given a
value is refused (tools/llama-bench/llama-bench.cpp, common/arg.cpp)."""

from __future__ import annotations

import shlex

import pytest

from engine.core.errors import CopeInputError
from engine.llamacpp.llama_args import parse_llama_command
from engine.llamacpp.llama_placement import placement_of
from engine.models.catalog import get_model

QWEN = get_model("qwen3-30b-a3b")


def parsed(line: str):  # type: ignore[no-untyped-def]
    return parse_llama_command(shlex.split(line))


@pytest.mark.parametrize(("line", "field", "value", "note"), [
    ("llama-bench -t 8,16", "threads", 8, "-t 8,16: llama-bench runs one test for each value; the first (8) is estimated"),
    ("llama-bench -ncmoe 0,10", "n_cpu_moe", 0,
     "-ncmoe 0,10: llama-bench runs one test for each value; the first (0) is estimated"),
    ("llama-bench -ngl 10-40+10", "gpu_layers", "10",
     "-ngl 10-40+10: llama-bench runs one test for each value; the first (10) is estimated"),
    ("llama-bench -ngl 0,99", "gpu_layers", "0",
     "-ngl 0,99: llama-bench runs one test for each value; the first (0) is estimated"),
    ("llama-bench -ncmoe 10 -ncmoe 20", "n_cpu_moe", 10,
     "-ncmoe 10 -ncmoe 20: llama-bench runs one test for each value; the first (10) is estimated"),
    ("llama-bench -t 4-16*2", "threads", 4,
     "-t 4-16*2: llama-bench runs one test for each value; the first (4) is estimated"),
    ("llama-bench -n 0,64", "n_gen", 64, "-n 0,64: llama-bench runs one test for each value; the first (64) is estimated"),
    ("llama-bench -ctk q8_0,f16", "kv_bytes_per_element", (1.0625 + 2) / 2,
     "-ctk q8_0,f16: llama-bench runs one test for each value; the first (q8_0) is estimated"),
    ("llama-server -t 8 -t 16", "threads", 16, "-t given 2 times (8, 16): llama.cpp uses the last (16)"),
    ("llama-server -ngl 10 -ngl 40", "gpu_layers", "40", "-ngl given 2 times (10, 40): llama.cpp uses the last (40)"),
    ("llama-server --n-cpu-moe 10 --n-cpu-moe 20", "n_cpu_moe", 20,
     "--n-cpu-moe given 2 times (10, 20): llama.cpp appends the overrides of each, so the most blocks named decide"),
])
def test_the_value_priced_and_the_note_that_says_which(line, field, value, note):
    cmd = parsed(line)
    assert getattr(cmd, field) == value
    assert note in cmd.notes


def test_lists_and_ranges_place_the_first_test():
    assert placement_of(parsed("llama-bench -ncmoe 10 -ncmoe 20"), QWEN).expert_cpu_share.sum() == 10
    assert placement_of(parsed("llama-bench -ncmoe 0,10"), QWEN).expert_cpu_share.sum() == 0
    ten = placement_of(parsed("llama-bench -ngl 10-40+10"), QWEN)
    assert ten.gpu_blocks.sum() == 9 and ten.output_on_gpu  # -ngl 10: the output layer and 9 blocks (PR 18148)
    assert placement_of(parsed("llama-bench -ngl 0,99"), QWEN).cpu_only
    assert placement_of(parsed("llama-server --n-cpu-moe 20 --n-cpu-moe 10"), QWEN).expert_cpu_share.sum() == 20


def test_llama_bench_puts_the_ncmoe_overrides_after_the_ot_ones():
    # llama-bench.cpp to_llama_mparams: the test's -ot overrides, then one per -ncmoe block.
    cmd = parsed(r"llama-bench -ncmoe 2 -ot 'blk\.1\.ffn_up_exps=CUDA0'")
    assert [flag for _, _, flag in cmd.overrides] == ["-ot", "-ncmoe", "-ncmoe"]
    share = placement_of(cmd, QWEN).expert_cpu_share
    assert share[0] == 1 and share[1] == pytest.approx(2 / 3)  # block 1's up stays on the GPU


@pytest.mark.parametrize(("line", "needle"), [
    ("llama-bench --cpu-moe", "llama-bench has no --cpu-moe"),
    ("llama-bench -cmoe", "llama-bench has no -cmoe"),
    ("llama-bench --cpu-moe 0", "llama-bench has no --cpu-moe"),
    ("llama-server --cpu-moe 0", "--cpu-moe takes no value (it is a switch), got --cpu-moe 0"),
    ("llama-server --no-mmap 1", "--no-mmap takes no value"),
    ("llama-bench -t 8,x", "-t needs a whole number, a list (a,b) or a range"),
    ("llama-bench -ncmoe -2", "-ncmoe needs a whole number"),
    ("llama-bench -t 0-16*2", "the range never grows"),
    ("llama-server -ngl 0,99", "-ngl needs a whole number"),
    ("llama-server -t 8,16", "-t needs a whole number"),
])
def test_what_llama_cpp_refuses_is_one_line_error(line, needle):
    with pytest.raises(CopeInputError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")) as info:
        parsed(line)
    assert "\n" not in str(info.value)
