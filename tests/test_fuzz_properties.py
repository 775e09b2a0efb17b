"""Property tests (hypothesis) of the readers of files COPE is given: trace formats, GGUF,
profiles. For any input, the reader returns a value or raises CopeInputError with one
short line, within bounds: inputs are capped in size (at most 1 MiB, the trace entry
limit lowered to 200,000), and an example that runs for minutes fails as a hang.

The examples are derandomized, so CI sees the same cases each run; bench/fuzz.py runs
the longer, random campaign (each case in a subprocess under RLIMIT_AS and a timeout).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import warnings

import pytest

pytest.importorskip("hypothesis")
pytest.importorskip("gguf")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from engine.core.errors import CopeInputError  # noqa: E402
from engine.traces.limits import MAX_ENTRIES_ENV  # noqa: E402
from tests.fuzz_targets import INTERESTING_INTS, INTERESTING_TEXT, TARGETS  # noqa: E402

FUZZ = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HANG_S = 120  # far beyond any example's run (milliseconds): only a hang reaches it


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module", autouse=True)
def small_trace_limit():
    before = os.environ.get(MAX_ENTRIES_ENV)
    os.environ[MAX_ENTRIES_ENV] = "200000"
    yield
    if before is None:
        os.environ.pop(MAX_ENTRIES_ENV, None)
    else:
        os.environ[MAX_ENTRIES_ENV] = before


@contextlib.contextmanager
def hang_guard():
    if sys.platform == "win32":
        yield
        return

    def hung(_signum, _frame):
        raise AssertionError(f"the reader ran for {HANG_S} s: a hang")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(HANG_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def read_or_refuse(name: str, data: bytes, workdir) -> None:
    target = TARGETS[name]
    path = workdir / f"{name}{target.suffix}"
    path.write_bytes(data)
    with warnings.catch_warnings(), hang_guard():
        warnings.simplefilter("ignore")  # a TraceWarning for dropped tokens is a valid outcome
        try:
            target.read(str(path))
        except CopeInputError as exc:
            line = str(exc)
            assert "\n" not in line, line
            assert len(line) <= 300 + len(str(path)), line


@pytest.mark.parametrize("name", list(TARGETS))
@FUZZ
@given(rng=st.randoms(use_true_random=False))
def test_a_mutated_file_is_read_or_refused_in_one_line(name, rng, workdir):
    read_or_refuse(name, TARGETS[name].make(rng), workdir)


@pytest.mark.parametrize("name", list(TARGETS))
@FUZZ
@given(data=st.binary(max_size=4096))
def test_any_bytes_are_read_or_refused_in_one_line(name, data, workdir):
    read_or_refuse(name, data, workdir)


_CELL = st.one_of(st.integers(-3, 40).map(str), st.sampled_from([t.decode("utf-8", "replace") for t in INTERESTING_TEXT]),
                  st.sampled_from([str(i) for i in INTERESTING_INTS]))


@FUZZ
@given(rows=st.lists(st.lists(_CELL, min_size=1, max_size=6).map(",".join), max_size=40))
def test_any_csv_of_integer_like_cells(rows, workdir):
    read_or_refuse("llama-csv", "\n".join(rows).encode(), workdir)


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True), st.text(max_size=8),
              st.sampled_from([10**400, -(10**400)])),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=12,
)
_RECORD = st.fixed_dictionaries(
    {"token": st.one_of(st.integers(0, 6), _JSON), "layer": st.one_of(st.sampled_from([1, 2, 3]), _JSON),
     "experts": st.one_of(st.lists(st.integers(-1, 9), min_size=2, max_size=2), _JSON)},
    optional={"weights": st.one_of(st.lists(st.floats(), min_size=2, max_size=2), _JSON),
              "seq": st.one_of(st.integers(0, 2), st.text(max_size=3), _JSON)},
)


@FUZZ
@given(records=st.lists(_RECORD, max_size=30))
def test_any_jsonl_records(records, workdir):
    read_or_refuse("jsonl", "\n".join(json.dumps(r) for r in records).encode(), workdir)


@FUZZ
@given(value=_JSON, where=st.sampled_from(["median_s", "spread_s", "repeats", "key", "operator", "basis"]))
def test_any_value_in_a_profile_measurement(value, where, workdir):
    doc = json.loads(TARGETS["profile"].seed())
    doc["measurements"][0][where] = value
    read_or_refuse("profile", json.dumps(doc).encode(), workdir)
