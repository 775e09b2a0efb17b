"""The app's trace actions: record a routing trace, pull a published one, download a
published imatrix, and price with what arrives. A mixin of CopeApp (cope_tui/app/app.py),
which holds the workers (cope_tui/app/workers.py) and the panes these report to."""

from __future__ import annotations

import threading

from textual import work
from textual.message import Message

from cope_tui.app.messages import PullPlanned, TraceRecorded
from cope_tui.app.panes.trace import TracePane
from cope_tui.app.workers import fetch_in_worker
from cope_tui.sources.hub_trace import entries_for, entry_label


class ImatrixPulled(Message):
    """An imatrix download ended: `path` (the local file) when it arrived and was read."""

    def __init__(self, path: str | None, text: str) -> None:
        super().__init__()
        self.path, self.text = path, text


class TraceActions:
    """Recording and pulling traces (the Trace pane's buttons and the `pull` binding)."""

    def on_trace_recorded(self, message: TraceRecorded) -> None:
        self.query_one(TracePane).show_status(message.text)
        if message.path:
            self.say(message.text)
            self.compute(self.choices.with_(trace=message.path, profile_trace=None))
        else:
            self.say(message.text, "warning")

    def start_record(self, model: str, domain: str, tokens: int) -> None:
        if not model:
            self.say("Record: type a Hub repo id or a local model folder", "warning")
            return
        if self._is_active(self._record_worker):
            self.say("A recording is already running (Escape cancels)", "warning")
            return
        self._record_cancel = threading.Event()
        self.query_one(TracePane).show_progress(0, max(tokens, 1), "loading the model")
        self._record_worker = self.record(model, domain, tokens, self._record_cancel)

    def action_pull_trace(self) -> None:
        """Pull the published trace the trace index offers for this model (or one of the same
        shape, labelled as another model's routing): the first press says which file and how
        large, the second downloads it (Escape cancels mid-download)."""
        if self.request is None:
            return
        model = self.request.model
        matches = entries_for(model.id)
        if not matches:
            self.say(f"The trace index names no published trace of {model.id} (or of its shape): "
                     "record one or import a file", "warning")
            return
        if self._is_active(self._record_worker):
            self.say("A trace is already being fetched or recorded", "warning")
            return
        pane = self.query_one(TracePane)
        planned, self._pull_plan = self._pull_plan, None
        if planned is not None and planned[0] == model.id:  # the second press: download what was shown
            plan = planned[1]
            self._record_cancel = threading.Event()
            pane.show_progress(0, plan.size_bytes or 1, f"downloading {plan.filename}")
            self._record_worker = self.pull(f"{plan.repo_id}/{plan.filename}", model.id, self._record_cancel)
            return
        label = entry_label(matches[0])
        pane.show_status(f"looking up {label}...")
        self._record_worker = self.look_up_pull(matches[0].entry.repo_id, label, model.id)

    def on_pull_planned(self, message: PullPlanned) -> None:
        self._pull_plan = (message.model_id, message.plan)
        text = (f"Pull will download {message.plan.describe()}: {message.label}. "
                "Press Pull again to start; Escape cancels the download.")
        self.query_one(TracePane).show_status(text)
        self.say(text)

    # --- imatrix files --------------------------------------------------------------------

    def start_imatrix_pull(self, entry) -> None:  # type: ignore[no-untyped-def]
        """Download the imatrix an index entry names (a repo without a file: its one imatrix
        file) through the Hub cache; Escape cancels; it then prices as --profile-trace does."""
        if self._is_active(self._record_worker):
            self.say("A trace or imatrix is already being fetched or recorded (Escape cancels)", "warning")
            return
        self._record_cancel = threading.Event()
        self.query_one(TracePane).show_progress(0, 1, f"downloading {entry.where}")
        self._record_worker = self.pull_imatrix_file(entry.repo_id, entry.file, entry.repo_type,
                                                     self._record_cancel)

    @work(thread=True, exclusive=True, group="record", exit_on_error=False, description="an imatrix pulled")
    def pull_imatrix_file(self, repo_id: str, filename: str | None, repo_type: str,
                          cancel: threading.Event) -> None:
        where = f"{repo_id}/{filename}" if filename else repo_id
        path = fetch_in_worker(self.post_message, cancel, ImatrixPulled, "Imatrix download",
                               lambda progress: self.services.pull_imatrix(repo_id, filename, repo_type=repo_type,
                                                                           progress=progress, cancel=cancel))
        if path is None:
            return
        self.post_message(ImatrixPulled(path, f"Downloaded {where} to {path}; its per-expert counts are now the "
                                              "popularity (as --profile-trace)."))

    def on_imatrix_pulled(self, message: ImatrixPulled) -> None:
        pane = self.query_one(TracePane)
        pane.show_status(message.text)
        if message.path is None:
            self.say(message.text, "warning")
            return
        self.say(message.text)
        if self.request is not None:
            pane.show_imatrix_entries(self.request.model.id)  # now verified
        self.compute(self.choices.with_(profile_trace=message.path))
