"""The launch's first ranking planned in a forked child (cope_tui/app/head_start.py): the
same ranking the app's own worker plans, and the app's own plan whenever the child gives
none (it failed, it planned other choices, the wait was cancelled)."""

from __future__ import annotations

import gc
import os
import threading

import numpy as np
import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable  # noqa: E402

from cope_tui.app.head_start import HeadStart, can_fork, gpu_of, rank, second_core  # noqa: E402
from cope_tui.options import PlanChoices  # noqa: E402
from engine.hardware.cpu_presets import get_cpu_preset  # noqa: E402
from tests.test_app import FAST, make_app, make_services, settle  # noqa: E402

pytestmark = [pytest.mark.usefixtures("app_caches"),
              pytest.mark.skipif(not (can_fork() and second_core()),
                                 reason="the head start forks, on Linux with two CPUs or more")]


def _gone(pid: int) -> bool:
    """True when no process `pid` exists any more (reaped, not a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _ranking(advice):  # type: ignore[no-untyped-def]
    return [(e.candidate.id, e.tpot_s) for e in advice.rec.estimates]


def test_the_child_ranks_exactly_what_the_app_would():
    services = make_services()
    head = HeadStart.begin(FAST, services)
    assert head is not None and head.take(FAST) is head
    pid = head.pid
    steps: list[tuple[int, int, str]] = []
    planned = head.result(threading.Event(), lambda *step: steps.append(step))
    assert planned is not None and _gone(pid)
    assert gc.isenabled()  # paused in this process while the child planned, on again once it is read

    here = rank(FAST, detect_cpu=services.detect_cpu, detect_gpu=lambda: gpu_of(services.detect_gpu))
    assert _ranking(planned.advice) == _ranking(here) and len(_ranking(here)) > 5
    assert planned.advice.rec.notes == here.rec.notes
    assert np.array_equal(planned.advice.request.trace.expert_ids, here.request.trace.expert_ids)
    assert planned.cpu == services.detect_cpu() and planned.gpu == gpu_of(services.detect_gpu)
    # its progress came through the pipe, filtered as the app's own worker filters it
    assert steps and all(done % 8 == 0 for done, _, _ in steps) and steps[-1][0] <= steps[-1][1]


def test_a_head_start_for_other_choices_is_stopped_and_not_used():
    head = HeadStart.begin(FAST, make_services())
    pid = head.pid
    assert head.take(FAST.with_(tokens=151)) is None
    assert head.pid is None and _gone(pid) and gc.isenabled()
    assert head.take(FAST) is None  # once only


def test_a_cancelled_wait_stops_the_child():
    head = HeadStart.begin(FAST, make_services())
    pid = head.pid
    cancel = threading.Event()
    cancel.set()
    assert head.result(cancel, lambda *step: None) is None
    assert _gone(pid) and gc.isenabled()


def test_no_head_start_for_the_cpu_only_plan_or_on_one_cpu(monkeypatch):
    assert HeadStart.begin(PlanChoices(gpu="none"), make_services()) is None
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert HeadStart.begin(FAST, make_services()) is None


def _table(app) -> list[list[str]]:  # type: ignore[no-untyped-def]
    table = app.query_one("#results-table", DataTable)
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


async def _shown(app) -> tuple:  # type: ignore[no-untyped-def]
    """What the Results tab shows once every worker is done: the table, its summary, the
    chart's sweep (computed from the ranking, here from the child's), and the CPU planned for."""
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.advice is not None and app.sweep_points
        return _table(app), str(app.query_one("#results-summary").render()), app.sweep_points, app.cpu_spec


@pytest.mark.anyio
async def test_the_app_shows_the_same_with_and_without_a_head_start():
    services = make_services()
    without = await _shown(make_app(services))
    head = HeadStart.begin(FAST, services)
    pid = head.pid
    with_head = await _shown(make_app(services, head_start=head))
    assert with_head == without and len(without[0]) > 5
    assert _gone(pid)


@pytest.mark.anyio
async def test_a_child_that_fails_leaves_the_app_to_plan_for_itself():
    parent = os.getpid()
    good = make_services()

    def cpu_here_only():  # type: ignore[no-untyped-def]
        if os.getpid() != parent:
            raise RuntimeError("the child cannot see the CPU")
        return good.detect_cpu()

    from dataclasses import replace

    services = replace(good, detect_cpu=cpu_here_only)
    head = HeadStart.begin(FAST, services)
    assert head.result(threading.Event(), lambda *step: None) is None  # the child died: nothing to use

    head = HeadStart.begin(FAST, services)
    shown = await _shown(make_app(services, head_start=head))
    assert shown == await _shown(make_app(good))


@pytest.mark.anyio
async def test_a_head_start_is_not_used_once_the_machine_was_measured():
    """A measurement before the first worker asks (its CPU now the app's) makes the child's
    plan, made for the detected CPU, not the one to show."""
    services = make_services()
    head = HeadStart.begin(FAST, services)
    pid = head.pid
    app = make_app(services, head_start=head)
    measured = get_cpu_preset("workstation")  # not the CPU the services detect (the child's)
    assert measured.name != services.detect_cpu().name
    app.cpu_spec = measured  # as on_gpu_detected leaves it
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.advice is not None and app.advice.request.platform.cpu.name == measured.name
    assert _gone(pid) and head.take(FAST) is None and gc.isenabled()


def test_a_stop_from_another_thread_ends_a_waiting_reader():
    """The app gone (run_app's finally) while its worker still waits: the child is killed,
    the reader sees its pipe end and returns; nothing hangs and collection is on again."""
    head = HeadStart.begin(FAST, make_services())
    pid = head.pid
    got: list = []
    reader = threading.Thread(target=lambda: got.append(head.result(threading.Event(), lambda *step: None)))
    reader.start()
    head.stop()
    reader.join(timeout=30)
    assert not reader.is_alive() and len(got) == 1
    assert _gone(pid) and gc.isenabled()


def test_what_the_child_says_while_waiting_for_the_hub_is_passed_on():
    """A Hub wait during the first plan is said in the app (run_app's narrator), not lost
    on the child's closed stderr."""
    from dataclasses import replace

    from cope_tui.sources import hub_policy

    good = make_services()

    def cpu_after_a_wait():  # type: ignore[no-untyped-def]
        hub_policy._say("waiting 5 s for the Hub")  # as hub_call says it
        return good.detect_cpu()

    head = HeadStart.begin(FAST, replace(good, detect_cpu=cpu_after_a_wait))
    said: list[str] = []
    planned = head.result(threading.Event(), lambda *step: None, said.append)
    assert planned is not None and said == ["waiting 5 s for the Hub"]
