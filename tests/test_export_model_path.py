"""A command names the GGUF as the person gave it (issue 29: `cope export --model
/dir/x.gguf` wrote `-m x.gguf`, which runs only from /dir): advise's run-now line, export,
the CPU-only plan and the app's Export all load the file that was read."""

from __future__ import annotations

import json
import os
import shlex

import pytest

pytest.importorskip("gguf")

from cope_tui.cli import main  # noqa: E402
from cope_tui.exit_codes import EXIT_OK  # noqa: E402
from tests.tiny_gguf import random_weights, write_gguf  # noqa: E402


def _m(argv: list[str]) -> str:
    return argv[argv.index("-m") + 1]


@pytest.fixture
def gguf_elsewhere(tmp_path, monkeypatch):
    """A tiny MoE GGUF in models/, the working folder its parent."""
    (tmp_path / "models").mkdir()
    write_gguf(tmp_path / "models" / "tiny-F32.gguf", random_weights(0))
    monkeypatch.chdir(tmp_path)
    return tmp_path / "models" / "tiny-F32.gguf"


@pytest.mark.parametrize("given", ["relative", "absolute"])
def test_every_cli_command_loads_the_file_as_given(gguf_elsewhere, capsys, given):
    path = "models/tiny-F32.gguf" if given == "relative" else str(gguf_elsewhere)
    flags = ["--model", path, "--tokens", "100"]
    assert main(["advise", "--json", *flags]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert _m(doc["recommendation"]["run_now"]["argv"]) == path
    assert main(["export", "--json", "--candidate", "all-gpu", *flags]) == EXIT_OK
    assert _m(json.loads(capsys.readouterr().out)["argv"]) == path
    assert main(["export", "--json", "--candidate", "all-gpu", *flags, "--model-path", "/srv/other.gguf"]) == EXIT_OK
    assert _m(json.loads(capsys.readouterr().out)["argv"]) == "/srv/other.gguf"  # named for the command: wins
    # last: the --gpu none plan becomes the one a later export without --gpu would reuse
    assert main(["advise", "--gpu", "none", *flags]) == EXIT_OK
    command = next(line for line in capsys.readouterr().out.splitlines() if "llama-server" in line)
    assert _m(shlex.split(command)) == path


def test_a_tilde_path_is_expanded_in_the_command(gguf_elsewhere, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(gguf_elsewhere.parent.parent))
    assert main(["advise", "--json", "--model", "~/models/tiny-F32.gguf", "--tokens", "100"]) == EXIT_OK
    argv = json.loads(capsys.readouterr().out)["recommendation"]["run_now"]["argv"]
    assert _m(argv) == str(gguf_elsewhere) and os.path.isfile(_m(argv))


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_the_apps_export_loads_the_same_file(gguf_elsewhere, capsys):
    pytest.importorskip("textual")
    from cope_tui.options import PlanChoices
    from tests.test_app import make_app, make_services, settle

    path = "models/tiny-F32.gguf"
    flags = ["--model", path, "--tokens", "100", "--threads", "2", "--gpu", "rtx-4090"]
    assert main(["export", "--json", "--candidate", "all-gpu", *flags]) == EXIT_OK
    cli = json.loads(capsys.readouterr().out)["argv"]
    app = make_app(make_services(), PlanChoices(model=path, tokens=100, threads=2, gpu="rtx-4090"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.select_candidate("all-gpu")
        export = app.current_export()
        assert _m(list(export.argv)) == path and list(export.argv) == cli
