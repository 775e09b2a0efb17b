"""Export: the llama.cpp command of the selected candidate; copy it or save it."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, Select, Static

from cope_tui.app.panes.results import RUNS_STYLE


class ExportPane(VerticalScroll):
    DEFAULT_CSS = """
    ExportPane { padding: 0 1; }
    ExportPane .row { height: auto; margin-top: 1; }
    ExportPane #runtime { width: 20; }
    ExportPane #binary { width: 18; }
    ExportPane #model-path, ExportPane #save-path { width: 1fr; }
    ExportPane #command { border: round $accent; padding: 0 1; height: auto; }
    ExportPane #export-head { height: auto; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", id="export-head")
        yield Static("", id="command")
        with Horizontal(classes="row"):
            yield Select([("stock llama.cpp", "stock"), ("the fork", "fork")], value="stock",
                         allow_blank=False, id="runtime", compact=True)
            yield Select([(b, b) for b in ("llama-server", "llama-cli", "llama-bench")], value="llama-server",
                         allow_blank=False, id="binary", compact=True)
            yield Label(" -m ")
            yield Input(placeholder="<model id>.gguf", id="model-path", compact=True)
        with Horizontal(classes="row"):
            yield Button("Copy (c)", id="copy", compact=True)
            yield Label(" ")
            yield Button("Save (s)", id="save", compact=True)
            yield Label(" to ")
            yield Input(placeholder="cope-command.sh", id="save-path", compact=True)

    @property
    def runtime(self) -> str:
        return str(self.query_one("#runtime", Select).value)

    @property
    def binary(self) -> str:
        return str(self.query_one("#binary", Select).value)

    @property
    def model_path(self) -> str | None:
        return self.query_one("#model-path", Input).value.strip() or None

    @property
    def save_path(self) -> str:
        return self.query_one("#save-path", Input).value.strip() or "cope-command.sh"

    def update_from(self, app) -> None:  # type: ignore[no-untyped-def]
        export = app.current_export()
        if export is None:
            return
        head = Text()
        head.append(f"{export.candidate_id}  ", style="bold")
        head.append(f" {export.label} ", style=f"reverse {RUNS_STYLE.get(export.label, '')}")
        head.append(f"\n{export.reason}")
        if export.nearest_id is not None:
            near = "no estimate" if export.nearest_tpot_s is None else (
                f"{export.nearest_tpot_s * 1e3:.2f} ms/token, {1 / export.nearest_tpot_s:.1f} tok/s")
            own = "" if export.candidate_tpot_s is None else (
                f" against {export.candidate_tpot_s * 1e3:.2f} ms/token for {export.candidate_id}")
            head.append(f"\nThe command runs the nearest that runs here: {export.nearest_id} "
                        f"({near}{own})", style="bold yellow")
        for name, _ in export.side_files:
            head.append(f"\nside file {name}: written beside the saved command", style="dim")
        self.query_one("#export-head", Static).update(head)
        self.query_one("#command", Static).update(Text(export.display()))

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self.update_from(self.app)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "save-path":
            self.app.action_save()
        else:
            self.update_from(self.app)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "copy":
            self.app.action_copy()
        elif event.button.id == "save":
            self.app.action_save()
