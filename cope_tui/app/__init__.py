"""The Textual app that `cope` with no arguments opens.

Thin App (app.py), one module per pane (panes/), small widgets (widgets/), message
classes for progress (messages.py) and the Textual-free work the workers run
(work.py). Only this package imports textual.
"""

from __future__ import annotations

from cope_tui.app_settings import choices_from_flags, load_settings, settings_path


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

    CopeApp(choices=choices, settings_path=path, notes=(warning,) if warning else ()).run()
    return 0
