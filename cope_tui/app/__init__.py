"""The Textual app that `cope` with no arguments opens.

Thin App (app.py), one module per pane (panes/), small widgets (widgets/), message
classes for progress (messages.py) and the Textual-free work the workers run
(work.py). Only this package imports textual.
"""

from __future__ import annotations


def run_app() -> int:
    from cope_tui.app.app import CopeApp

    CopeApp().run()
    return 0
