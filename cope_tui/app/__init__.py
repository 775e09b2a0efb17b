"""The Textual app that `cope` with no arguments opens.

Thin App (app.py), one module per pane (panes/), small widgets (widgets/), message
classes for progress (messages.py) and the Textual-free work the workers run
(work.py). Only this package imports textual.
"""

from __future__ import annotations

from cope_tui.sources.hub_policy import set_narrator


def run_app() -> int:
    from cope_tui.app.app import CopeApp

    app = CopeApp()
    # a Hub wait said while the app runs: a notification, never a line over the screen
    set_narrator(lambda line: app.call_from_thread(app.say, line, "warning"))
    app.run()
    return 0
