"""The app's thread workers: each calls one service-layer function and posts what it gets.

Cancellation is the worker's own `cancelled_event` (a threading.Event), passed down into
the long work, which checks it at step boundaries and raises engine.core.progress.Cancelled;
progress callbacks only post messages. A failure becomes a one-line WorkFailed message,
never a traceback.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from textual import work
from textual.message import Message
from textual.worker import get_current_worker

from cope_tui.app.messages import (
    AdviceReady,
    CommandEstimated,
    CpuOnlyReady,
    GpuDetected,
    ProbesFinished,
    Progress,
    PullPlanned,
    RuntimesFound,
    SearchReady,
    SweepReady,
    TraceRecorded,
    WorkFailed,
)
from cope_tui.app.head_start import every_eighth, plans_cpu_only, rank
from cope_tui.options import PlanChoices
from cope_tui.service import advice as service
from cope_tui.service.cpu_only import plan_cpu_only
from cope_tui.service.llama_search import beside, search_beside
from cope_tui.service.pasted import estimate_pasted, pasted_choices, same_plan
from cope_tui.service.pricing import Pricing, ProbeOutcome, ProbeReport
from engine.core.errors import CopeInputError
from engine.core.progress import Cancelled
from engine.cost.cost_model import Fidelity
from engine.llamacpp.llama_args import LlamaCommand


def why(exc: BaseException) -> str:
    if isinstance(exc, CopeInputError):
        return str(exc)
    return f"internal error ({type(exc).__name__}: {exc})"


def fetch_in_worker(post: Callable[[Message], Any], cancel: threading.Event, done: Callable[[Any, str], Message],
                    what: str, fetch: Callable[[Callable[[int, int, str], None]], Any]) -> Any:
    """Run `fetch(progress)` on a worker thread: its progress goes to the Trace pane until
    Escape is pressed (then "Cancelling..." stays), a cancel or a failure is posted as
    `done(None, one line)`; returns what it fetched, or None after posting why not."""
    def progress(n_done: int, total: int, label: str) -> None:
        if not cancel.is_set():
            post(Progress("record", n_done, total, label))

    try:
        return fetch(progress)
    except Exception as exc:  # noqa: BLE001 - Cancelled included: one line either way
        if cancel.is_set() or isinstance(exc, Cancelled):
            post(done(None, f"{what} cancelled; nothing was kept."))
        else:
            post(done(None, f"{what} failed: {why(exc)}"))
        return None


class Workers:
    """Mixed into CopeApp: needs `services`, `cpu_spec`, `detected_gpu`, `_head_start` (a
    head_start.HeadStart or None) and `post_message`.

    Every worker names itself (`description`): without one Textual writes the repr of every
    argument, and an Advice's repr prints its traces' arrays (0.3 s each on this machine,
    paid on the UI thread when the sweep starts, just as the first ranked table is shown)."""

    def _deliver(self, task: str, job: Callable[[threading.Event], Any],
                 done: Callable[[Any], Message | None]) -> None:
        """Run `job(cancel)` in this worker and post `done(result)` (None: nothing more to
        post); a cancelled job posts nothing, a failed one a WorkFailed line."""
        cancel = get_current_worker().cancelled_event
        try:
            result = job(cancel)
        except Cancelled:
            return
        except Exception as exc:  # noqa: BLE001 - shown as one line, never a traceback
            if not cancel.is_set():
                self.post_message(WorkFailed(task, why(exc)))
            return
        message = done(result)
        if message is not None and not cancel.is_set():
            self.post_message(message)

    @work(thread=True, exclusive=True, group="advice", exit_on_error=False, description="the ranking")
    def compute(self, choices: PlanChoices, request=None, pricing: Pricing | None = None) -> None:  # type: ignore[no-untyped-def]
        """Rank for `choices`; with `request` and `pricing`, reprice that request instead."""

        progress = every_eighth(lambda done, total, label: self.post_message(Progress("advice", done, total, label)))

        reprice = request is not None and pricing is not None

        def job(cancel: threading.Event):  # type: ignore[no-untyped-def]
            head = self._head_start.take(choices) if self._head_start is not None and not reprice else None
            if head is not None and (self.cpu_spec is not None or self.detected_gpu is not None):
                head.stop()  # the machine was measured meanwhile: the child planned for what it detected
                head = None
            if head is not None:  # the launch's first ranking, planned in a child meanwhile (head_start.py)
                # what the child says while waiting for the Hub: shown as run_app's narrator shows it
                planned = head.result(cancel, progress, lambda line: self.call_from_thread(self.say, line, "warning"))
                if planned is not None:  # the machine as the child detected it, as this worker would have
                    if self.cpu_spec is None:
                        self.cpu_spec = planned.cpu
                    if self.detected_gpu is None and planned.gpu is not None:
                        self.detected_gpu = planned.gpu
                    return planned.advice
                if cancel.is_set():
                    raise Cancelled()
            if self.cpu_spec is None:
                self.cpu_spec = self.services.detect_cpu()
            if reprice:
                return service.advise_with(request, pricing, progress=progress, cancel=cancel)
            if plans_cpu_only(choices):  # no GPU: the one CPU-only command, as `cope advise --gpu none`
                if choices.prompt_tokens is not None or choices.workload is not None:
                    raise CopeInputError("no GPU (none) prices decode only: choose no Workload to plan for it")
                # The app never probes unasked: no fidelity, no reprobe.
                return plan_cpu_only(choices.with_(fidelity=None, reprobe=False), detect_cpu=lambda: self.cpu_spec)
            return rank(choices, detect_cpu=lambda: self.cpu_spec, detect_gpu=self.this_gpu, progress=progress,
                        cancel=cancel)

        def ready(result):  # type: ignore[no-untyped-def]
            if isinstance(result, service.Advice):
                return AdviceReady(result, choices)
            return CpuOnlyReady(result, choices)

        self._deliver("advice", job, ready)

    @work(thread=True, exclusive=True, group="estimate", exit_on_error=False, description="your command priced")
    def estimate(self, advice: service.Advice, command: LlamaCommand) -> None:
        """The pasted command priced as `cope estimate` prices it (cope_tui/service/pasted.py),
        the app's model standing for --model; the shown ranking is reused when the command
        moves none of its settings."""
        builds = dict(getattr(self, "builds", {}))  # the runtimes found here: COPE's command is spelled for them
        made_for = self.choices.with_(model=self.choices.model or advice.request.model.id)

        def job(cancel: threading.Event):  # type: ignore[no-untyped-def]
            pasted = pasted_choices(command, made_for)

            def make_advice(planned: PlanChoices) -> service.Advice:
                if same_plan(planned, advice, made_for):
                    return advice
                return service.plan(planned.with_(fidelity=None, reprobe=False), detect_cpu=lambda: self.cpu_spec,
                                    detect_gpu=self.this_gpu, cancel=cancel)

            return estimate_pasted(command, pasted, make_advice, builds=builds, cancel=cancel)

        self._deliver("estimate", job, CommandEstimated)

    @work(thread=True, exclusive=True, group="sweep", exit_on_error=False, description="the VRAM sweep")
    def sweep(self, advice: service.Advice, workload=None, candidate_ids=None) -> None:  # type: ignore[no-untyped-def]
        """The chart's sweep, posted stage by stage: the one-pass curves at once, each
        step-wise replay as it finishes (`candidate_ids`: the charted ones only)."""

        def job(cancel: threading.Event) -> None:
            for stage in self.services.sweep_stages(advice, self.services.sweep_points, candidate_ids=candidate_ids,
                                                    cancel=cancel, workload=workload):
                if cancel.is_set():
                    return
                self.post_message(SweepReady(stage.points, advice, stage.done, stage.total))

        self._deliver("sweep", job, lambda _: None)

    @work(thread=True, exclusive=True, group="search", exit_on_error=False,
          description="stock llama.cpp's commands searched")
    def search_llama(self, advice: service.Advice, runs, workload, found=None) -> None:  # type: ignore[no-untyped-def]
        """Stock llama.cpp's commands searched beside the ranking, as `cope advise` searches them;
        `found`: the search already made for this plan (new runtimes change the picks, not it)."""

        def job(cancel: threading.Event):  # type: ignore[no-untyped-def]
            if found is not None:
                return beside(advice, runs, workload, found.cache, found.tradeoff)
            return search_beside(advice, runs, workload)

        self._deliver("search", job, lambda found: SearchReady(found, advice, runs))

    @work(thread=True, exclusive=True, group="runtimes", exit_on_error=False, description="runtimes looked for")
    def find_runtimes(self) -> None:
        try:
            scan = self.services.scan_runtimes()
        except Exception as exc:  # noqa: BLE001
            self.post_message(WorkFailed("runtimes", why(exc)))
            return
        self.post_message(RuntimesFound(scan))

    @work(thread=True, exclusive=True, group="measure", exit_on_error=False, description="this machine measured")
    def measure(self, expert_bytes: int) -> None:
        try:
            platform = self.services.measure_platform(lambda line: None, expert_bytes)
        except Exception as exc:  # noqa: BLE001
            self.post_message(WorkFailed("measure", why(exc)))
            return
        self.post_message(GpuDetected(platform.gpu, platform.cpu))

    @work(thread=True, exclusive=True, group="probes", exit_on_error=False, description="probes")
    def probe(self, request, fidelity: Fidelity, budget_s: float, cancel: threading.Event) -> None:  # type: ignore[no-untyped-def]
        def progress(done: int, total: int, label: str) -> None:
            self.post_message(Progress("probes", done, total, label))

        try:
            outcome = self.services.run_probes(request, fidelity=fidelity, budget_s=budget_s,
                                               progress=progress, cancel=cancel)
        except Exception as exc:  # noqa: BLE001 - what was measured is already in the cache
            outcome = ProbeOutcome(fidelity, ProbeReport(stopped="failed"), None, error=why(exc))
        self.post_message(ProbesFinished(outcome))

    @work(thread=True, exclusive=True, group="record", exit_on_error=False, description="a trace recorded")
    def record(self, model: str, domain: str, tokens: int, cancel: threading.Event) -> None:
        last = [0, 0]  # tokens recorded, tokens asked for

        def progress(done: int, total: int, label: str) -> None:
            last[:] = [done, total]
            if not cancel.is_set():  # keep "Cancelling..." in the pane once Escape is pressed
                self.post_message(Progress("record", done, total, label))

        try:
            path = self.services.record(model=model, domain=domain, tokens=tokens, progress=progress, cancel=cancel)
        except ImportError as exc:
            self.post_message(TraceRecorded(None, f"Recording needs transformers and torch "
                                                  f"(pip install 'cope-tui[record]'): {exc}"))
            return
        except Exception as exc:  # noqa: BLE001
            if cancel.is_set():
                self.post_message(TraceRecorded(None, "Recording cancelled; nothing was saved."))
            else:
                self.post_message(TraceRecorded(None, f"Recording failed: {why(exc)}"))
            return
        if cancel.is_set():  # stopped early: the tokens recorded so far were saved
            kept = f"the {last[0]} of {last[1]} tokens recorded" if last[1] else "what was recorded"
            self.post_message(TraceRecorded(path, f"Recording cancelled: kept {kept} in {path}; "
                                                  "it is now the trace in use."))
            return
        self.post_message(TraceRecorded(path, f"Recorded {path}; it is now the trace in use."))

    @work(thread=True, exclusive=True, group="record", exit_on_error=False, description="a pull looked up")
    def look_up_pull(self, spec: str, label: str, model_id: str) -> None:
        """What a pull of `spec` would download, and how large, before anything is fetched."""
        try:
            plan = self.services.plan_pull(spec)
        except Exception as exc:  # noqa: BLE001
            self.post_message(TraceRecorded(None, f"Pull: {why(exc)}"))
            return
        self.post_message(PullPlanned(plan, label, model_id))

    @work(thread=True, exclusive=True, group="record", exit_on_error=False, description="a trace pulled")
    def pull(self, spec: str, model_id: str, cancel: threading.Event) -> None:
        def log(line: str) -> None:
            if not cancel.is_set():
                self.post_message(Progress("record", 0, 1, line))

        path = fetch_in_worker(self.post_message, cancel, TraceRecorded, "Pull",
                               lambda progress: self.services.pull(spec, model_id, log, progress, cancel))
        if path is not None:
            self.post_message(TraceRecorded(path, f"Pulled {spec} to {path}; it is now the trace in use."))
