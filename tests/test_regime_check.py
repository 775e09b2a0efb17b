"""bench/regime_check.py: a cost-model change is refused when any regime's held-out error got
worse beyond its fold noise, whatever the other regimes gained."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.regime_check import fold_noise, main  # noqa: E402

# Two regimes, each held out from three sources (machines) of two rows.
KEYS = {f"{regime[0]}{source}{i}": (regime, f"https://example.org/{regime}/{source}")
        for regime in ("all-GPU", "experts on the CPU") for source in range(3) for i in range(2)}


def summary(tmp_path: Path, name: str, ratio_of) -> Path:  # type: ignore[no-untyped-def]
    """A cross-validation summary as bench/published_cv.py --json writes it."""
    doc = {"rows": {k: ratio_of(k, regime) for k, (regime, _) in KEYS.items()},
           "row_regimes": {k: regime for k, (regime, _) in KEYS.items()},
           "row_runtimes": {k: "llama.cpp" for k in KEYS},
           "row_sources": {k: source for k, (_, source) in KEYS.items()}}
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def spread(key: str, regime: str) -> float:
    """Errors that differ by source (5%, 10%, 15%), so each regime has a fold noise."""
    return 1 + 0.05 * (int(key[1]) + 1)


def test_a_regime_worse_beyond_its_noise_refuses_the_change_even_when_another_improves(tmp_path, capsys):
    before = summary(tmp_path, "before.json", spread)
    # all-GPU halves its error; experts on the CPU loses 10 points (its noise is about 3)
    after = summary(tmp_path, "after.json",
                    lambda k, r: 1 + (spread(k, r) - 1) / 2 if r == "all-GPU" else spread(k, r) + 0.10)
    assert main([str(before), str(after)]) == 1
    out = capsys.readouterr().out
    assert "refused: experts on the CPU worse beyond fold noise" in out
    assert "all-GPU" not in out.split("refused:")[1]


def test_a_change_within_the_noise_passes(tmp_path, capsys):
    before = summary(tmp_path, "before.json", spread)
    after = summary(tmp_path, "after.json", lambda k, r: spread(k, r) + 0.01)  # +1 point, noise ~2.9
    assert main([str(before), str(after)]) == 0
    assert "passed: no regime worse beyond its fold noise" in capsys.readouterr().out


def test_new_rows_are_shown_apart_and_judge_nothing(tmp_path, capsys):
    before = summary(tmp_path, "before.json", spread)
    doc = json.loads(before.read_text())
    for field, value in (("rows", 3.0), ("row_regimes", "partial offload"), ("row_runtimes", "llama.cpp"),
                         ("row_sources", "https://example.org/new")):
        doc[field]["new0"] = value
    after = tmp_path / "after.json"
    after.write_text(json.dumps(doc))
    assert main([str(before), str(after)]) == 0  # a 200% error on a row the run before did not have
    assert "rows only after, partial offload: 1 rows, MAPE 200.0%" in capsys.readouterr().out


def test_fold_noise_is_the_standard_error_over_sources():
    # three sources whose mean absolute errors are 0.05, 0.10, 0.15: sd 0.05, over sqrt(3)
    noise = fold_noise({"a": [0.05, 0.05], "b": [0.10], "c": [0.15, 0.15, 0.15]})
    assert abs(noise - 0.05 / 3 ** 0.5) < 1e-12


def test_a_file_that_is_not_a_summary_is_named_with_the_problem(tmp_path, capsys):
    good = summary(tmp_path, "before.json", spread)
    bad = tmp_path / "after.json"
    bad.write_text('{"overall": {}}')
    assert main([str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "not a bench/published_cv.py --json summary" in err and err.count("\n") == 1
