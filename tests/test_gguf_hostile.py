"""Forged GGUF files: every count, offset and string is checked before it is used:
one line naming the file, never a hang, a MemoryError or a traceback."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("gguf")

from cope_tui.sources.gguf_model import model_from_gguf  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from tests.gguf_bytes import ARR, I32, STR, U32, U64, Tensor, base, encode  # noqa: E402


def write(tmp_path, g, name="m.gguf"):
    path = tmp_path / name
    path.write_bytes(encode(g))
    return path


def refused(tmp_path, g, match):
    path = write(tmp_path, g)
    with pytest.raises(CopeInputError, match=match) as info:
        model_from_gguf(path)
    line = str(info.value)
    assert line.startswith(str(path) + ": ") and "\n" not in line and len(line) < 300, line


def test_base_reads(tmp_path):
    model = model_from_gguf(write(tmp_path, base()))
    assert model.n_blocks == 1 and model.n_routed_experts == 4 and model.top_k == 2 and model.name == "Tiny"


def test_block_count_of_2_to_the_40(tmp_path):
    refused(tmp_path, base().with_field("qwen3moe.block_count", U64, 2**40),
            r"declares 1,099,511,627,776 blocks, more than the 1,024 COPE sizes")


def test_block_count_beyond_the_tensors(tmp_path):
    refused(tmp_path, base().with_field("qwen3moe.block_count", U32, 1000),
            r"qwen3moe.block_count = 1000, but the tensors are of 1 block")


@pytest.mark.parametrize("with_count", [True, False])
def test_a_tensor_of_block_100000000000(tmp_path, with_count):
    g = base()
    g = replace(g, tensors=g.tensors + (Tensor(b"blk.100000000000.attn_q.weight", (8, 8)),))
    if not with_count:
        g = g.without("qwen3moe.block_count")
    refused(tmp_path, g, r"tensor 'blk.100000000000.attn_q.weight': block 100000000000 is beyond")


def test_a_tensor_count_of_2_to_the_40(tmp_path):
    refused(tmp_path, replace(base(), n_tensors=2**40), r"corrupt GGUF header: it declares 1,099,511,627,776 tensors, more than the 100,000")


def test_a_key_count_of_2_to_the_40(tmp_path):
    refused(tmp_path, replace(base(), n_kv=2**40), r"corrupt GGUF header: it declares 1,099,511,627,776 metadata keys, more than the 10,000")


@pytest.mark.parametrize("vtype, value", [(U32, 0), (I32, -2)])
def test_head_count_zero_or_negative(tmp_path, vtype, value):
    refused(tmp_path, base().with_field("qwen3moe.attention.head_count", vtype, value),
            rf"metadata 'qwen3moe.attention.head_count' = {value} is out of range \(1\.\.")


def test_negative_kv_heads(tmp_path):
    refused(tmp_path, base().with_field("qwen3moe.attention.head_count_kv", I32, -1),
            r"metadata 'qwen3moe.attention.head_count_kv' = -1 is out of range")


def test_embedding_length_2_to_the_62(tmp_path):
    refused(tmp_path, base().with_field("qwen3moe.embedding_length", U64, 2**62),
            r"metadata 'qwen3moe.embedding_length' = 4611686018427387904 is out of range")


def test_a_name_that_is_not_utf8_is_read_with_replacement(tmp_path):
    model = model_from_gguf(write(tmp_path, base().with_field("general.name", STR, b"Tiny \xff\xfe")))
    assert model.name == "Tiny \ufffd\ufffd"


def test_a_tensor_name_that_is_not_utf8(tmp_path):
    g = base()
    g = replace(g, tensors=g.tensors[:-1] + (replace(g.tensors[-1], name=b"output.\xffweight"),))
    refused(tmp_path, g, r"m\.gguf: ")


def _with_offset(g, index, offset):
    tensors = list(g.tensors)
    tensors[index] = replace(tensors[index], offset=offset)
    return replace(g, tensors=tuple(tensors))


def test_an_offset_of_2_to_the_64_minus_1(tmp_path):
    refused(tmp_path, _with_offset(base(), 1, 2**64 - 1), r"tensor 'blk.0.attn_q.weight' .*offset 18446744073709551615")


def test_an_unaligned_offset(tmp_path):
    g = base()
    refused(tmp_path, _with_offset(g, 1, g.tensors[0].n_bytes + 4),
            r"tensor 'blk.0.attn_q.weight' has offset 516, not a multiple of the alignment 32")


def test_an_offset_past_the_file(tmp_path):
    refused(tmp_path, _with_offset(base(), 5, 2**40), r"tensor 'output.weight' .*offset 1099511627776")


def test_overlapping_tensors(tmp_path):
    refused(tmp_path, _with_offset(base(), 1, 0), r"tensor 'blk.0.attn_q.weight' has offset 0, expected 512")


def test_a_tensor_table_one_entry_short(tmp_path):
    g = base()
    refused(tmp_path, replace(g, n_tensors=len(g.tensors) - 1), r"after the last tensor's data")


def test_an_array_length_of_2_to_the_60_is_refused_not_iterated(tmp_path):
    # The campaign's one hang: gguf.GGUFReader reads such an array item by item past the end.
    g = base().with_field("qwen3moe.attention.head_count_kv", ARR, (U32, 2**60, b"\1\0\0\0"))
    refused(tmp_path, g, r"declares an array of 1,152,921,504,606,846,976 items, more than the 16,777,216")
