"""One module per pane of the app; each has `update_from(app)`."""

from __future__ import annotations

from textual.message import Message


class Apply(Message):
    """A pane asks the app to recompute with changed choices (Choices fields)."""

    def __init__(self, **changes) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.changes = changes
