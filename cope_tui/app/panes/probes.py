"""Probes: measure this machine for the chosen model, with progress; Escape cancels."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, ProgressBar, Select, Static

from engine.cost.cost_model import Fidelity


class ProbesPane(VerticalScroll):
    DEFAULT_CSS = """
    ProbesPane { padding: 0 1; }
    ProbesPane .row { height: auto; margin-top: 1; }
    ProbesPane #fidelity { width: 30; }
    ProbesPane #budget { width: 8; }
    ProbesPane #probe-bar { margin-top: 1; }
    ProbesPane #probe-current, ProbesPane #probe-summary, ProbesPane #cost-model { height: auto; }
    ProbesPane #cost-model { margin-top: 1; color: $text-muted; }
    """

    def compose(self) -> ComposeResult:
        with Horizontal(classes="row"):
            yield Select([("combined (layer steps)", "combined"), ("atomic (operators)", "atomic")],
                         value="combined", allow_blank=False, id="fidelity", compact=True)
            yield Label(" budget s ")
            yield Input(value="60", id="budget", type="number", compact=True)
            yield Label(" ")
            yield Button("Start probes", id="start", variant="primary", compact=True)
        yield ProgressBar(total=100, id="probe-bar", show_eta=False)
        yield Static("Not running. Probes measure the CPU for real and, with a GPU, the GPU; "
                     "results go to the profile cache `cope advise` also reads.", id="probe-current")
        yield Static("", id="probe-summary")
        yield Static("", id="cost-model")

    @property
    def fidelity(self) -> Fidelity:
        return Fidelity(str(self.query_one("#fidelity", Select).value))  # the select's text, as the enum

    @property
    def budget_s(self) -> float:
        text = self.query_one("#budget", Input).value.strip()
        try:
            return max(float(text), 1.0)
        except ValueError:
            return 60.0

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start":
            event.stop()
            self.app.action_start_probes()

    def show_progress(self, done: int, total: int, label: str, left_s: float | None) -> None:
        self.query_one("#probe-bar", ProgressBar).update(total=max(total, 1), progress=done)
        left = "" if left_s is None else f", about {left_s:.0f} s left"
        self.query_one("#probe-current", Static).update(
            f"probe {min(done + 1, total)}/{total}: {label}{left} (Escape cancels)")

    def show_summary(self, text: str) -> None:
        self.query_one("#probe-current", Static).update("Not running.")
        self.query_one("#probe-summary", Static).update(text)

    def update_from(self, app) -> None:  # type: ignore[no-untyped-def]
        if app.cpu_only is not None:
            pricing = app.cpu_only.pricing
            text = (f"Cost model in use: {pricing.fidelity.value} ({pricing.reason}). No GPU is planned: probes "
                    "measure a GPU/CPU split, so there is nothing to probe.")
            self.query_one("#cost-model", Static).update(text)
            return
        if app.advice is None:
            return
        cm = app.advice.rec.cost_model
        text = f"Cost model in use: {cm.fidelity} ({cm.basis})"
        if app.advice.pricing.profile_source:
            text += f"\nprofile: {app.advice.pricing.profile_source}"
        self.query_one("#cost-model", Static).update(text)
