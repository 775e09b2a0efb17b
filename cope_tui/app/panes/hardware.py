"""Hardware: the GPU planned for, the detected GPU and CPU, each figure with its basis."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, DataTable, Input, Label, Select, Static

from cope_tui.app.panes import Apply
from cope_tui.app.widgets.facts import CPU_FIELDS, GPU_FIELDS, basis_text, fact_rows


class HardwarePane(VerticalScroll):
    DEFAULT_CSS = """
    HardwarePane { padding: 0 1; }
    HardwarePane .row { height: auto; }
    HardwarePane .row Label { padding: 1 1 0 0; }
    HardwarePane #gpu-preset { width: 1fr; }
    HardwarePane #vram-budget { width: 14; }
    HardwarePane DataTable { height: auto; max-height: 12; }
    HardwarePane .section { text-style: bold; margin-top: 1; }
    """

    def compose(self) -> ComposeResult:
        from engine.platform import gpu_presets

        options = [(spec.name, pid) for pid, spec in gpu_presets().items()]
        with Horizontal(classes="row"):
            yield Label("Plan for GPU")
            yield Select(options, id="gpu-preset", allow_blank=False, compact=True)
            yield Label("VRAM budget GiB")
            yield Input(placeholder="all", id="vram-budget", compact=True)
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
        advice = app.advice
        detected = app.detected_gpu
        if detected is not None:
            vram = detected.vram_bytes
            from cope_tui.app.widgets.facts import fmt_value

            text = f"this machine: {detected.name}"
            if vram.known:
                text += f", {fmt_value('vram_bytes', vram.value)} ({vram.basis})"
            self.query_one("#detected-gpu", Static).update(text)
        else:
            self.query_one("#detected-gpu", Static).update("this machine's GPU: not detected yet")
        if advice is None:
            return
        platform = advice.request.platform
        select = self.query_one("#gpu-preset", Select)
        if platform.gpu.preset_id and select.value != platform.gpu.preset_id:
            with select.prevent(Select.Changed):
                select.value = platform.gpu.preset_id
        self.query_one("#gpu-title", Static).update(f"GPU planned for: {platform.gpu.name}")
        self.query_one("#cpu-title", Static).update(f"CPU: {platform.cpu.name}")
        self._fill("#gpu-facts", fact_rows(platform.gpu, GPU_FIELDS))
        self._fill("#cpu-facts", fact_rows(platform.cpu, CPU_FIELDS))

    def _fill(self, selector: str, rows) -> None:  # type: ignore[no-untyped-def]
        table = self.query_one(selector, DataTable)
        table.clear()
        for label, value, basis, note in rows:
            table.add_row(label, value, basis_text(basis), note[:90])

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "gpu-preset" and not event.select.is_blank():
            event.stop()
            advice = self.app.advice
            if advice is None or event.value == advice.request.platform.gpu.preset_id:
                return  # the pane showing what is in use, not a choice
            self.post_message(Apply(gpu=str(event.value)))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "vram-budget":
            event.stop()
            text = event.value.strip()
            try:
                value = float(text) if text else None
            except ValueError:
                self.app.say(f"VRAM budget: {text!r} is not a number of GiB", "error")
                return
            self.post_message(Apply(vram_budget_gib=value))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "measure":
            event.stop()
            self.app.action_measure()
