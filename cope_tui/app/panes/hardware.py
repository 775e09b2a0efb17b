"""Hardware: the GPU planned for, the detected GPU and CPU, each figure with its basis."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, DataTable, Static

from cope_tui.app.widgets.facts import CPU_FIELDS, GPU_FIELDS, basis_text, fact_rows, fmt_value
from cope_tui.app.widgets.options_row import OptionsRow


class HardwarePane(VerticalScroll):
    DEFAULT_CSS = """
    HardwarePane { padding: 0 1; }
    HardwarePane .row { height: auto; }
    HardwarePane .row Label { padding: 1 1 0 0; }
    HardwarePane DataTable { height: auto; max-height: 12; }
    HardwarePane .section { text-style: bold; margin-top: 1; }
    """

    def compose(self) -> ComposeResult:
        yield OptionsRow("hardware", id="hardware-options")
        with Horizontal(classes="row"):
            yield Button("Measure this machine", id="measure", compact=True)
            yield Static("", id="detected-gpu")
        yield Static("GPU planned for", classes="section", id="gpu-title")
        yield DataTable(id="gpu-facts", cursor_type="row", zebra_stripes=True)
        yield Static("CPU", classes="section", id="cpu-title")
        yield DataTable(id="cpu-facts", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        for table in self.query(DataTable):
            table.add_columns("figure", "value", "basis", "how / why")

    def update_from(self, app) -> None:  # type: ignore[no-untyped-def]
        detected = app.detected_gpu
        if detected is not None:
            vram = detected.vram_bytes
            text = Text(f"this machine: {detected.name}")
            if vram.known:
                text.append(f", {fmt_value('vram_bytes', vram.value)} ({vram.basis})")
            problem = detected.cuda_problem
            if problem is not None:  # the GPU is there, torch cannot use it: say so and how to fix it
                text.append("\nwarning: ", style="bold yellow")
                text.append(f"{problem.message}\n  fix: {problem.fix}")
            self.query_one("#detected-gpu", Static).update(text)
        else:
            self.query_one("#detected-gpu", Static).update("this machine's GPU: not detected yet")
        request = app.request  # the ranking's, or the CPU-only plan's
        if request is None:
            return
        platform = request.platform
        in_use = {"gpu": platform.gpu.preset_id, "cpu": platform.cpu.preset_id}
        self.query_one(OptionsRow).show(app.choices, in_use=in_use)
        self.query_one("#gpu-title", Static).update(f"GPU planned for: {platform.gpu.name}")
        self.query_one("#cpu-title", Static).update(f"CPU: {platform.cpu.name}")
        self._fill("#gpu-facts", fact_rows(platform.gpu, GPU_FIELDS))
        self._fill("#cpu-facts", fact_rows(platform.cpu, CPU_FIELDS))

    def _fill(self, selector: str, rows) -> None:  # type: ignore[no-untyped-def]
        table = self.query_one(selector, DataTable)
        table.clear()
        for label, value, basis, note in rows:
            table.add_row(label, value, basis_text(basis), note[:90])

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "measure":
            event.stop()
            self.app.action_measure()
