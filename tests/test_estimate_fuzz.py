"""Property tests for `cope estimate`'s reading of a llama.cpp command: for any argv, a
price, a "would not run" (or "not modelled"), or one CopeInputError line; never another
exception, never a hang (each example runs under an alarm: a hang fails, it cannot stall CI)."""

from __future__ import annotations

import math
import re
import signal
from contextlib import contextmanager
from dataclasses import replace

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cope_tui.options import PlanChoices  # noqa: E402
from cope_tui.service.advice import parse_pasted  # noqa: E402
from cope_tui.service.request import build_request  # noqa: E402
from engine.cost.analytic_cost import AnalyticCostModel  # noqa: E402
from engine.advice.command_estimate import command_settings, price_placement_command  # noqa: E402
from engine.llamacpp.ecma_regex import RegexError, compile_pattern  # noqa: E402
from engine.core.errors import CopeInputError  # noqa: E402
from engine.llamacpp.llama_args import ARG_TABLE, LLAMA_PROGRAMS, parse_llama_command  # noqa: E402
from engine.hardware.platform import usable_threads  # noqa: E402

EXAMPLE_LIMIT_S = 30  # a hang, not a speed: one example takes milliseconds
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
NAMES = ["blk.0.ffn_gate_exps.weight", "blk.13.ffn_down_exps.weight", "blk.47.ffn_up_exps.weight",
         "token_embd.weight", "output.weight", "blk.3.attn_q.weight"]


@pytest.fixture(scope="module")
def priced():
    request = build_request(PlanChoices(tokens=20, cpu="desktop-ddr5", gpu="rtx-4090", threads=8))

    def price(command):  # type: ignore[no-untyped-def]
        threads = usable_threads(command.threads, request.platform.cpu)[0] if command.threads else None
        command = replace(command, threads=threads)
        at = replace(request, **command_settings(command, request))
        model = AnalyticCostModel(at.model, at.quant, at.platform, context_tokens=at.context_tokens,
                                  attention_tokens=at.attention_tokens, kv_bytes_per_element=at.kv_bytes_per_element)
        return price_placement_command(at, model, command)

    return price


@contextmanager
def bounded():
    def hung(signum, frame):  # type: ignore[no-untyped-def]
        raise AssertionError(f"one example ran past {EXAMPLE_LIMIT_S} s: a hang")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(EXAMPLE_LIMIT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


good_numbers = st.integers(0, 128).map(str)
numbers = st.one_of(
    good_numbers, good_numbers, good_numbers, st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["", "1_0", "\u0661\u0662", "0x10", "1e3", " 8", "+4", "-0", "9" * 400, "all", "auto", "-1",
                     "1,2,3", "nan"]),
    st.text(max_size=6),
)
regex_pieces = st.sampled_from([
    "blk", r"\.", "(", ")", "|", "*", "+", "?", "{2}", "{1,3}", "{4294967296}", "{", "}", "[", "]", "[^a-z]",
    r"\d", r"\w", ".", "^", "$", r"\b", "ffn_", "exps", "up", "down", "gate", r"\1", "(?=", "(?:", "\\", "(.+)+",
    "X", "0", "47", "=",
])
patterns = st.lists(regex_pieces, max_size=12).map("".join)
buffers = st.sampled_from(["CPU", "CUDA0", "CUDA1", "cpu", "", "Metal", "CPU=x", "ROCm0"])
override = st.builds(lambda p, b, n: ",".join([f"{p}={b}"] * n), patterns, buffers, st.integers(1, 3))


@st.composite
def flag_words(draw):  # type: ignore[no-untyped-def]
    spec = draw(st.sampled_from(ARG_TABLE))
    name = draw(st.sampled_from(spec.names))
    if not spec.takes_value:
        return [name] if draw(st.integers(0, 9)) else [name + "=" + draw(numbers)]
    if spec.setting == "override_tensor":
        value = draw(override)
    elif spec.setting in ("cache_type_k", "cache_type_v"):
        value = draw(st.sampled_from(["q8_0", "f16", "q4_0", "bogus"]))
    elif spec.setting in ("model", "flash_attn", "split_mode", "tensor_split", "device"):
        value = draw(st.sampled_from(["m.gguf", "on", "off", "row", "layer", "1,1", "CUDA0", "CUDA0,CUDA1"]))
    else:
        value = draw(numbers)
    return [f"{name}={value}"] if draw(st.booleans()) else [name, value]


argv = st.builds(
    lambda env, program, parts, junk: env + [program] + [w for part in parts for w in part] + junk,
    st.lists(st.sampled_from(["GGML_OP_OFFLOAD_MIN_BATCH=1", "GGML_OP_OFFLOAD_MIN_BATCH=99999999999", "A=b"]),
             max_size=1),
    st.one_of(st.sampled_from(sorted(LLAMA_PROGRAMS) * 4 + ["python", "./llama-server", "", "-m", "env"]),
              st.text(max_size=8)),
    st.lists(flag_words(), max_size=8),
    st.lists(st.sampled_from(["--port", "8080", "--jinja", "x"]), max_size=2),
)


def check_outcome(price, words_or_text, parse):  # type: ignore[no-untyped-def]
    with bounded():
        try:
            result = price(parse(words_or_text))
        except CopeInputError as exc:
            text = str(exc)
            assert "\n" not in text and text, text
            return
    if result.runs:
        assert math.isfinite(result.tpot_s) and result.tpot_s > 0
    else:
        # the three kinds of refusal (CommandPrice.verdict): it would not run, COPE does not model
        # what it does, or --fit would place it in a way COPE does not price
        assert result.refusal.startswith(("would not run", "not modelled", "not priced:")), result.refusal


@SETTINGS
@given(words=argv)
def test_any_argv_gives_a_price_a_refusal_or_one_line(priced, words):
    check_outcome(priced, words, parse_llama_command)


@SETTINGS
@given(text=st.one_of(argv.map(lambda w: " ".join(w)), st.text(max_size=40)))
def test_any_pasted_line_gives_a_price_a_refusal_or_one_line(priced, text):
    check_outcome(priced, text, parse_pasted)


# A pattern grammar without nested quantifiers: Python's backtracking re answers it quickly,
# so it can stand as the reference for ECMAScript's yes/no search on these names.
atoms = st.one_of(
    st.sampled_from(["b", "l", "k", r"\.", "0", "1", "3", "7", "_", "f", "n", "e", "x", "p", "s", "w", "t", "u", "d",
                     ".", r"\d", r"\w", r"\D", "[0-9]", "[a-f]", "[^.]", "[._]", r"\b", "^", "$"]),
    st.lists(st.sampled_from(["up", "down", "gate", "exps", "blk", "0", "47", "attn"]), min_size=1, max_size=3)
    .map(lambda alts: "(" + "|".join(alts) + ")"),
)
quantifiers = st.sampled_from(["", "", "", "*", "+", "?", "{2}", "{1,2}", "{0,}", "*?", "+?"])
safe_patterns = st.lists(st.tuples(atoms, quantifiers), min_size=1, max_size=6).map(
    lambda parts: "".join(a + (q if a not in ("^", "$", r"\b") else "") for a, q in parts))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(pattern=safe_patterns)
def test_the_bounded_matcher_agrees_with_a_backtracking_one(pattern):
    compiled = compile_pattern(pattern)
    for name in NAMES:
        assert compiled.search(name) == bool(re.search(pattern, name)), (pattern, name)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(pattern=st.one_of(patterns, st.text(max_size=30)))
def test_any_pattern_compiles_and_searches_or_is_refused(pattern):
    with bounded():
        try:
            compiled = compile_pattern(pattern)
        except RegexError as exc:
            assert "\n" not in str(exc)
            return
        for name in NAMES:
            assert compiled.search(name) in (True, False)
