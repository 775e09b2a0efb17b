"""Trace: the routing trace in use and its origin; pull, record or import one; the imatrix
files published for the model (the imatrix index, verified by the user's downloads), one
downloaded, or a local imatrix or trace taken as the profile (as `--profile-trace`)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, ProgressBar, Select, Static

from cope_tui.app.panes import Apply
from cope_tui.sources import hub_imatrix, hub_trace
from engine.core.spans import count_of
from engine.traces.popularity import profile_words

DOMAINS = ("chat", "code", "math")


def trace_summary(req) -> Text:  # type: ignore[no-untyped-def]
    t, profile = req.trace, req.profile
    text = Text()
    if t.meta.synthetic:
        text.append(" SYNTHETIC ", style="bold reverse red")
        text.append(" made-up routing: the ranking shows how policies compare, not how this model routes\n")
    else:
        text.append(f" {t.meta.origin.upper()} ", style="bold reverse green")
        text.append("\n")
    text.append(f"source: {t.meta.source}\n")
    text.append(f"model: {t.meta.model}" + (f", domain {t.meta.domain}" if t.meta.domain else "") + "\n")
    text.append(f"{t.n_tokens} tokens x {t.n_layers} MoE layers replayed, {count_of(t.n_sequences, 'sequence')}; "
                f"{profile_words(profile)}\n")
    text.append("next-layer predictions: " + ("yes (prefetch on)" if t.predicted_ids is not None
                                              else "none (mutable caches run without prefetch)"))
    return text


class TracePane(VerticalScroll):
    DEFAULT_CSS = """
    TracePane { padding: 0 1; }
    TracePane .row { height: auto; margin-top: 1; }
    TracePane .row Label { width: 9; }
    TracePane .row Input { width: 1fr; }
    TracePane #record-domain { width: 12; }
    TracePane #record-tokens { width: 8; }
    TracePane #trace-info { height: auto; border: round $primary; padding: 0 1; }
    TracePane #record-progress { margin-top: 1; }
    TracePane #imatrix-entry { width: 1fr; }
    TracePane #imatrix-entry SelectCurrent Static#label { height: 1; text-wrap: nowrap; text-overflow: ellipsis; }
    TracePane #imatrix-info { height: auto; color: $text-muted; }
    """

    _model_id: str | None = None  # the model the Record field was last filled for
    _imatrix_states: tuple = ()  # hub_imatrix.EntryState of the model in use, in the Select's order

    def compose(self) -> ComposeResult:
        yield Static("", id="trace-info")
        with Horizontal(classes="row"):
            yield Button("Pull", id="pull", compact=True)
            yield Label(" ")
            yield Button("Use synthetic", id="synthetic", compact=True)
        with Horizontal(classes="row"):
            yield Label("Import")
            yield Input(placeholder=".cope.npz, llama-moe-trace .csv, .jsonl or folder (Enter)", id="import",
                        compact=True)
        with Horizontal(classes="row"):
            yield Label("Record")
            yield Input(placeholder="Hub repo id or local folder", id="record-model", compact=True)
            yield Select([(d, d) for d in DOMAINS], value="chat", allow_blank=False, id="record-domain",
                         compact=True)
            yield Input(value="64", id="record-tokens", type="integer", compact=True)
            yield Button("Record", id="record", compact=True)
        with Horizontal(classes="row"):
            yield Label("Imatrix")
            yield Select([], prompt="imatrix files the index names for this model", id="imatrix-entry",
                         compact=True)
            yield Button("Download", id="imatrix-pull", compact=True)
        yield Static("", id="imatrix-info")
        with Horizontal(classes="row"):
            yield Label("Profile")
            yield Input(placeholder="local imatrix (.gguf) or trace: popularity, as --profile-trace (Enter)",
                        id="profile-path", compact=True)
        yield ProgressBar(total=100, id="record-progress", show_eta=False)
        yield Static("", id="record-status")

    def update_from(self, app) -> None:  # type: ignore[no-untyped-def]
        request = app.request  # the ranking's, or the CPU-only plan's
        if request is None:
            return
        model = request.model
        self.query_one("#trace-info", Static).update(trace_summary(request))
        if model.id != self._model_id:  # the Record field follows the model in use
            self._model_id = model.id
            self.query_one("#record-model", Input).value = model.hf_repo or ""
        self._offer_pull(model.id)
        self.show_imatrix_entries(model.id)

    def show_imatrix_entries(self, model_id: str) -> None:
        """The imatrix index's entries of the model, each verified (downloaded here, with its
        sha256) or unverified; the selection kept where the entries are the same."""
        states = hub_imatrix.entry_states(model_id)
        select = self.query_one("#imatrix-entry", Select)
        kept = select.value if [s.entry for s in states] == [s.entry for s in self._imatrix_states] else None
        self._imatrix_states = states
        select.set_options([(f"{'verified' if st.verified else 'unverified'}  {st.entry.where}", i)
                            for i, st in enumerate(states)])
        if states:
            select.value = kept if isinstance(kept, int) and kept < len(states) else 0
        self.query_one("#imatrix-pull", Button).disabled = not states
        self._show_imatrix_info()

    def selected_imatrix(self):  # type: ignore[no-untyped-def]
        """The EntryState chosen in the Select, or None."""
        value = self.query_one("#imatrix-entry", Select).value
        return self._imatrix_states[value] if isinstance(value, int) and value < len(self._imatrix_states) else None

    def _show_imatrix_info(self) -> None:
        st = self.selected_imatrix()
        info = self.query_one("#imatrix-info", Static)
        if st is None:
            info.update("the imatrix index names no imatrix file of this model" if not self._imatrix_states else "")
            return
        verified, known = st.words().split("\t")
        info.update(f"{verified}; {known}; {st.entry.basis()}")

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "imatrix-entry":
            event.stop()
            self._show_imatrix_info()

    def _offer_pull(self, model_id: str) -> None:
        """Pull only when the trace index has a trace of this model (or one of its shape)."""
        exact, shaped = hub_trace.entries_for_model(model_id)
        pull = self.query_one("#pull", Button)
        pull.disabled = not (exact or shaped)
        pull.tooltip = (f"the trace index has no published trace of {model_id} (or of its shape): record one "
                        "or import a file") if pull.disabled else "download the published trace the index names"

    def show_progress(self, done: int, total: int, label: str) -> None:
        self.query_one("#record-progress", ProgressBar).update(total=max(total, 1), progress=done)
        doing = "" if label.startswith("downloading") else "recording: "
        self.query_one("#record-status", Static).update(f"{doing}{label} (Escape cancels)")

    def show_status(self, text: str) -> None:
        self.query_one("#record-status", Static).update(text)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "import" and event.value.strip():
            event.stop()
            self.post_message(Apply(trace=event.value.strip(), profile_trace=None))
        elif event.input.id == "profile-path" and event.value.strip():
            event.stop()  # the popularity alone changes, as --profile-trace does on the command line
            self.post_message(Apply(profile_trace=event.value.strip()))

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "synthetic":
            self.post_message(Apply(trace="synthetic", profile_trace=None))
        elif event.button.id == "pull":
            self.app.action_pull_trace()
        elif event.button.id == "imatrix-pull":
            st = self.selected_imatrix()
            if st is not None:
                self.app.start_imatrix_pull(st.entry)
        elif event.button.id == "record":
            model = self.query_one("#record-model", Input).value.strip()
            domain = str(self.query_one("#record-domain", Select).value)
            tokens_text = self.query_one("#record-tokens", Input).value.strip() or "64"
            try:
                tokens = int(tokens_text)
            except ValueError:  # the integer Input lets "-" or "+" through
                self.app.say(f"Record: {tokens_text!r} is not a number of tokens", "warning")
                return
            if tokens < 1:
                self.app.say(f"Record: tokens per prompt must be at least 1, got {tokens}", "warning")
                return
            self.app.start_record(model, domain, tokens)
