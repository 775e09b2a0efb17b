"""Messages the workers post to the app (thread-safe through post_message)."""

from __future__ import annotations

from typing import Any

from textual.message import Message


class Progress(Message):
    """One step of long work: `task` is advice, sweep, probes, record or measure."""

    def __init__(self, task: str, done: int, total: int, label: str) -> None:
        super().__init__()
        self.task, self.done, self.total, self.label = task, done, total, label


class AdviceReady(Message):
    def __init__(self, advice: Any, choices: Any) -> None:
        super().__init__()
        self.advice, self.choices = advice, choices


class WorkFailed(Message):
    """Long work stopped with an error: shown in a notification, never a traceback."""

    def __init__(self, task: str, text: str) -> None:
        super().__init__()
        self.task, self.text = task, text


class SweepReady(Message):
    """The sweep so far for `advice`: `done` of `total` (budget, candidate) pairs priced."""

    def __init__(self, points: list, advice: Any = None, done: int = 0, total: int = 0) -> None:
        super().__init__()
        self.points = points
        self.advice = advice
        self.done, self.total = done, total

    @property
    def finished(self) -> bool:
        return self.done >= self.total


class ProbesFinished(Message):
    def __init__(self, outcome: Any) -> None:
        super().__init__()
        self.outcome = outcome


class GpuDetected(Message):
    def __init__(self, gpu: Any, cpu: Any = None) -> None:
        super().__init__()
        self.gpu, self.cpu = gpu, cpu


class TraceRecorded(Message):
    def __init__(self, path: str | None, text: str) -> None:
        super().__init__()
        self.path, self.text = path, text


class PullPlanned(Message):
    """What Pull would download (a hub_trace.PullPlan) for `model_id`, looked up before any byte is fetched."""

    def __init__(self, plan, label: str, model_id: str) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.plan, self.label, self.model_id = plan, label, model_id


class CommandEstimated(Message):
    """A pasted llama.cpp command, priced (work.CommandEstimate)."""

    def __init__(self, result: Any) -> None:
        super().__init__()
        self.result = result


class RuntimesFound(Message):
    """The runtimes this machine has (probes.runtimes.RuntimeScan)."""

    def __init__(self, scan: Any) -> None:
        super().__init__()
        self.scan = scan


class CpuOnlyReady(Message):
    """The plan for no GPU (`--gpu none`): one command on the CPU alone, priced
    (cope_tui/service/cpu_only.py); nothing to rank."""

    def __init__(self, plan: Any, choices: Any) -> None:
        super().__init__()
        self.plan, self.choices = plan, choices


class SearchReady(Message):
    """Stock llama.cpp's commands searched beside a ranking (cope_tui/service/llama_search.py)."""

    def __init__(self, search: Any, advice: Any, runs: Any) -> None:
        super().__init__()
        self.search, self.advice, self.runs = search, advice, runs
