"""A yes/no question in a small modal screen (Save asks before it overwrites a file)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmScreen(ModalScreen[bool]):
    """Dismissed with True on y, with False on n or Escape: nothing happens unless asked for."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical { width: auto; max-width: 90%; height: auto; border: thick $warning;
        background: $surface; padding: 0 1; }
    ConfirmScreen #question { width: auto; }
    """

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, id="question", markup=False)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
