"""The quantization names people use (issue 45): `--quant UD-Q4_K_XL`, `Q4_K_XL`, `IQ4_NL`
are taken by advise (and every command that plans) as estimate takes them from a file
name: priced as the nearest row COPE sizes, and the note says which and why."""

from __future__ import annotations

import pytest

from cope_tui.cli import EXIT_INPUT, main
from cope_tui.options import PlanChoices
from cope_tui.service.request import build_request
from engine.core.errors import CopeInputError
from engine.models.model_names import quant_for_name, quant_from_file_name

PLAN = dict(model="qwen3-30b-a3b", gpu="rtx-3060-12gb", cpu="7950x", tokens=100)


@pytest.mark.parametrize("name, row", [("UD-Q4_K_XL", "Q4_K_M"), ("ud-q2_k_xl", "Q2_K"), ("Q4_K_XL", "Q4_K_M"),
                                       ("IQ4_NL", "Q4_0"), ("Q4_K_L", "Q4_K_M"), ("Q5_K_M", "Q5_K_M")])
def test_a_name_people_use_plans_as_its_nearest_row_and_says_so(name, row):
    request = build_request(PlanChoices(quant=name, **PLAN))
    assert request.quant.name == row
    said = [n for n in request.notes if f"--quant {name}" in n]
    if name.upper() == row:
        assert said == []  # a row itself: nothing assumed
    else:
        assert len(said) == 1 and f"priced as {row}" in said[0] and "give the GGUF file for exact sizes" in said[0]


def test_advise_takes_the_same_names_as_a_file_name_gives_estimate():
    for name in ("UD-Q4_K_XL", "IQ4_NL", "Q3_K_XL"):
        from_file, _, _ = quant_from_file_name(f"Qwen3-30B-A3B-{name}.gguf")
        assert quant_for_name(name)[0] == from_file == build_request(PlanChoices(quant=name, **PLAN)).quant.name


def test_a_name_with_no_defensible_row_is_still_refused_in_one_line(capsys):
    with pytest.raises(CopeInputError, match="unknown quantization 'IQ2_XXS'"):
        build_request(PlanChoices(quant="IQ2_XXS", **PLAN))
    assert main(["advise", "--quant", "IQ1_S", "--model", "qwen3-30b-a3b", "--gpu", "rtx-3060-12gb"]) == EXIT_INPUT
    assert capsys.readouterr().err.count("\n") == 1
