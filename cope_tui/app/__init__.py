"""The Textual app that `cope` with no arguments opens.

Thin App (app.py), one module per pane (panes/), small widgets (widgets/), message
classes for progress (messages.py) and the Textual-free work the workers run
(work.py). Only this package imports textual.
"""

from __future__ import annotations

from cope_tui.app_settings import choices_from_flags, load_settings, settings_path
from cope_tui.sources.hub_policy import set_narrator


def run_app(flags: list[str] | tuple[str, ...] = ()) -> int:
    """The app, planning first for `flags` (`cope advise`'s plan flags), else for the plan
    remembered at the last launch (cope_tui/app_settings.py), else for the defaults."""
    path = settings_path()
    warning = None
    if flags:
        choices = choices_from_flags(flags)  # CopeInputError: one line, before the screen is taken
    else:
        choices, warning = load_settings(path)
    from cope_tui.app.app import CopeApp

    app = CopeApp(choices=choices, settings_path=path, notes=(warning,) if warning else ())
    # a Hub wait said while the app runs: a notification, never a line over the screen
    previous = set_narrator(lambda line: app.call_from_thread(app.say, line, "warning"))
    try:
        app.run()
    finally:  # the Hub's waits are said on stderr again once the app is gone
        set_narrator(previous)
    return 0
