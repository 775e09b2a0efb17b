"""Long work reports progress and honours cancellation in one way.

`Progress` is a callback (done, total, label); cancellation is a `threading.Event`
(for the app, the worker's own `cancelled_event`) passed down into the long loops and
checked at their step boundaries with `check_cancel`, which raises `Cancelled`. Progress
callbacks only report: they never stop the work.
"""

from __future__ import annotations

import threading
from typing import Callable

Progress = Callable[[int, int, str], None]


class Cancelled(Exception):
    """The work was cancelled through its event; what it wrote so far is kept."""


def check_cancel(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise Cancelled


def with_cancel(progress: Progress | None, cancel: threading.Event | None) -> Progress | None:
    """A progress callback that also checks `cancel` at each report (None when neither is given)."""
    if cancel is None:
        return progress

    def report(done: int, total: int, label: str) -> None:
        check_cancel(cancel)
        if progress is not None:
            progress(done, total, label)

    return report
