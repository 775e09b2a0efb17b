"""The app's inputs for one group of plan options, generated from cope_tui/options.py.

A select for an option with a fixed or run-time set of values, a text field otherwise;
the same parse and checks as the command-line flags. With `apply_on_change`, a changed
select or a submitted field asks the app to recompute (an `Apply` message) at once.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label, Select

from cope_tui.app.panes import Apply
from cope_tui.options import AppOption, PlanChoices, app_options
from engine.core.errors import CopeInputError


class OptionsRow(Vertical):
    """One line an option (label, then its field), so any terminal width reads well."""

    DEFAULT_CSS = """
    OptionsRow { height: auto; margin-top: 1; }
    OptionsRow Horizontal { height: auto; }
    OptionsRow Label { width: 17; }
    OptionsRow Select { width: 1fr; max-width: 48; }
    OptionsRow Input { width: 16; }
    OptionsRow Input.wide { width: 1fr; max-width: 48; }
    """

    def __init__(self, group: str, *, apply_on_change: bool = True, id: str | None = None) -> None:
        super().__init__(id=id)
        self.options = app_options(group)
        self.apply_on_change = apply_on_change

    def compose(self) -> ComposeResult:
        for opt in self.options:
            with Horizontal():
                yield Label(opt.label)
                if opt.choices is not None:
                    yield Select(list(opt.choices), id=opt.widget_id, allow_blank=True, prompt=opt.hint or "default",
                                 compact=True)
                elif opt.suggestions:  # free text, completed (right arrow takes the suggestion)
                    yield Input(placeholder=opt.hint, id=opt.widget_id, compact=True, classes="wide",
                                suggester=SuggestFromList(opt.suggestions, case_sensitive=False))
                else:
                    yield Input(placeholder=opt.hint, id=opt.widget_id, compact=True)

    def _widget(self, opt: AppOption) -> Any:
        return self.query_one(f"#{opt.widget_id}")

    def value_of(self, opt: AppOption) -> Any:
        """The field's value (None: empty, the default); CopeInputError for a bad one."""
        widget = self._widget(opt)
        if isinstance(widget, Select):
            return None if widget.is_blank() else str(widget.value)
        return opt.parse(widget.value)

    def values(self) -> dict[str, Any]:
        """Every field's value by PlanChoices field; raises CopeInputError (one line)."""
        return {opt.name: self.value_of(opt) for opt in self.options}

    def show(self, choices: PlanChoices, *, in_use: dict[str, Any] | None = None) -> None:
        """Fill the fields from `choices`; `in_use` shows in a select what a default resolved
        to (a select cannot show "default" once a value is known; a text field keeps its
        placeholder, which says what an empty field means)."""
        for opt in self.options:
            value = getattr(choices, opt.name)
            widget = self._widget(opt)
            if isinstance(widget, Select):
                if value is None and in_use:
                    value = in_use.get(opt.name)
                known = {v for _, v in opt.choices or ()}
                with widget.prevent(Select.Changed):
                    if value in known:
                        widget.value = value
                    else:
                        widget.clear()
            elif not widget.has_focus:
                widget.value = opt.show(value)

    def disable(self, name: str, disabled: bool) -> None:
        for opt in self.options:
            if opt.name == name:
                self._widget(opt).disabled = disabled

    def _apply(self, opt: AppOption) -> None:
        try:
            value = self.value_of(opt)
        except CopeInputError as exc:
            self.app.say(str(exc), "error")  # type: ignore[attr-defined]
            return
        self.post_message(Apply(**{opt.name: value}))

    def _option_of(self, widget_id: str | None) -> AppOption | None:
        return next((o for o in self.options if o.widget_id == widget_id), None)

    def _field_done(self, event: Select.Changed | Input.Submitted, widget_id: str | None) -> None:
        opt = self._option_of(widget_id)
        if opt is None:
            return
        event.stop()
        if self.apply_on_change:
            self._apply(opt)

    def on_select_changed(self, event: Select.Changed) -> None:
        self._field_done(event, event.select.id)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._field_done(event, event.input.id)
