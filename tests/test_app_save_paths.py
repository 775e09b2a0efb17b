"""The app's Save takes the CLI's --out check (issue 32: a Save path with ~nosuchuser or a
NUL byte made the app exit): a path no file can have, a FIFO or a folder is one line."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("textual")

from textual.widgets import Input  # noqa: E402

from tests.test_app import make_app, make_services, settle  # noqa: E402


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_a_save_path_no_file_can_have_is_one_line_and_the_app_stays(tmp_path):
    fifo = tmp_path / "pipe.sh"
    os.mkfifo(fifo)
    app = make_app(make_services(), cwd=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for bad, said in (("~nosuchuser-cope/run.sh", "names no user"), ("run\x00.sh", "NUL byte"),
                          (str(fifo), "pipe.sh"), (str(tmp_path), str(tmp_path))):
            app.notices.clear()
            app.query_one("#save-path", Input).value = bad
            app.action_save()
            await settle(pilot)
            [(severity, text)] = [n for n in app.notices if n[0] == "error"]
            assert text.startswith("Not saved: ") and said in text and "\n" not in text
        # nothing written but the app's own cache folder (app_caches puts it under tmp_path: its last plan)
        assert app.is_running and sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["pipe.sh"]
        app.notices.clear()
        app.query_one("#save-path", Input).value = "pipe.sh"  # relative: checked under the app's folder
        app.action_save()
        await settle(pilot)
        assert any(n[0] == "error" and "pipe.sh" in n[1] for n in app.notices)


@pytest.mark.anyio
@pytest.mark.usefixtures("app_caches")
async def test_save_onto_a_link_is_refused_and_what_it_points_to_untouched(tmp_path):
    real = tmp_path / "elsewhere.sh"
    real.write_text("precious")
    (tmp_path / "run.sh").symlink_to(real)
    app = make_app(make_services(), cwd=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app.query_one("#save-path", Input).value = "run.sh"
        app.action_save()
        await settle(pilot)
        [(_, text)] = [n for n in app.notices if n[0] == "error"]
        assert text.startswith("Not saved: Save ") and "is a symbolic link" in text and "refused" in text
        assert app.is_running and real.read_text() == "precious" and (tmp_path / "run.sh").is_symlink()
        assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["elsewhere.sh", "run.sh"]
