"""The Textual app that `cope` with no arguments opens.

Thin App (app.py), one module per pane (panes/), small widgets (widgets/), message
classes for progress (messages.py), the workers (workers.py) and the first ranking planned
on the second core while the app starts (head_start.py). Only this package imports textual.
"""

from __future__ import annotations

from typing import Any, Callable

from cope_tui.app.head_start import HeadStart
from cope_tui.app.state import Services
from cope_tui.app_settings import choices_from_flags, load_settings, settings_path
from cope_tui.options import PlanChoices
from cope_tui.sources.hub_policy import set_narrator


def run_app(flags: list[str] | tuple[str, ...] = (), *, services: Services | None = None,
            make_app: Callable[..., Any] | None = None, head_start: bool = True, **run_options: Any) -> int:
    """The app, planning first for `flags` (`cope advise`'s plan flags), else for the plan
    remembered at the last launch (cope_tui/app_settings.py), else for the defaults.

    The first ranking starts in a child process before textual is imported (head_start.py;
    `head_start=False`: in the app's own process). `make_app` (CopeApp's keywords -> an app;
    CopeApp by default) and `run_options` (App.run's) let bench/app_first_table.py time this
    very launch."""
    path = settings_path()
    warning = None
    if flags:
        choices = choices_from_flags(flags)  # CopeInputError: one line, before the screen is taken
    else:
        choices, warning = load_settings(path)
    services = services or Services()
    head = HeadStart.begin(choices or PlanChoices(), services) if head_start else None
    try:
        from cope_tui.app.app import CopeApp

        app = (make_app or CopeApp)(services=services, choices=choices, settings_path=path,
                                    notes=(warning,) if warning else (), head_start=head)
        # a Hub wait said while the app runs: a notification, never a line over the screen
        previous = set_narrator(lambda line: app.call_from_thread(app.say, line, "warning"))
        try:
            app.run(**run_options)
        finally:  # the Hub's waits are said on stderr again once the app is gone
            set_narrator(previous)
    finally:  # a child still planning is stopped with the app
        if head is not None:
            head.stop()
    return 0
