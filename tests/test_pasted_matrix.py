"""The CLI and the app price a pasted command the same way (issue 29: `-c 0` was 15.56
ms/token in `cope estimate`, at the model's trained context, and 12.90 in the app's paste
pane, at 8,192 without a note). Every command goes through `cope estimate --json` and
through the app's paste field; the figures, the notes and COPE's command must agree."""

from __future__ import annotations

import json
import shlex

import pytest

pytest.importorskip("textual")

from textual.widgets import Input  # noqa: E402

from cope_tui.cli import main  # noqa: E402
from cope_tui.exit_codes import EXIT_OK  # noqa: E402
from cope_tui.options import PlanChoices  # noqa: E402
from tests.test_app import make_app, make_services, settle  # noqa: E402

PLAN = {"model": "qwen3-30b-a3b", "gpu": "rtx-4090", "cpu": "desktop-ddr5", "tokens": 150}
COMMANDS = [
    "llama-server -m model.gguf -ngl 99 --n-cpu-moe 24 -c 0 -t 8",  # -c 0: the trained context
    "llama-server -m model.gguf -ngl 99 --n-cpu-moe 12 -c 16384 -t 6",
    "llama-server -m model.gguf -ngl 30 -t 8",  # -ngl N: whole blocks on the CPU
    "llama-server -m model.gguf -ngl 99 -ot blk\\.(1[0-9])\\.ffn_.*_exps\\.=CPU -t 8",
    "llama-server -m Qwen3-30B-A3B-Q8_0.gguf -ngl 99 --n-cpu-moe 30 -t 8",  # the file's quantization wins
]


def _cli(capsys, command: str) -> dict:
    flags = [f"--{k}={v}" for k, v in PLAN.items()]
    assert main(["estimate", *flags, "--json", "--", *shlex.split(command)]) == EXIT_OK
    return json.loads(capsys.readouterr().out)


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_the_app_prices_a_pasted_command_as_cope_estimate(capsys):
    expected = [_cli(capsys, command) for command in COMMANDS]
    app = make_app(make_services(), PlanChoices(**PLAN))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for command, cli in zip(COMMANDS, expected):
            app.pasted_estimate = None
            app.query_one("#paste-command", Input).value = command
            app.estimate_pasted(command)
            await settle(pilot)
            est = app.pasted_estimate
            assert est is not None, command
            assert est.yours.tpot_s == pytest.approx(cli["yours"]["tpot_s"], rel=1e-9), command
            assert est.best.tpot_s == pytest.approx(cli["best"]["tpot_s"], rel=1e-9), command
            assert est.runnable.candidate.id == cli["best_that_runs"]["id"], command
            assert list(est.export.argv) == cli["export"]["argv"], command
            assert list(est.notes + est.ranking_notes) == cli["notes"], command
