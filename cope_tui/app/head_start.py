"""The first ranking of a launch, planned on the second core while the app starts.

`cope` opens the app and plans its first ranking for the choices it starts from. In one
process the two take turns: Textual's import, layout and first paint hold the interpreter
while the plan waits, and the plan (a synthetic trace, the hit curves, the replays) holds it
while the screen waits. `HeadStart.begin` forks a child right after the services are
imported and before textual is: the child plans exactly what the app's compute worker would
plan (`rank`, the one function both call) and sends its progress and its Advice back over a
pipe; the app's first compute worker waits for that instead of planning again.

Nothing shown may differ: the child runs the same function on the same choices and the
same services in a copy of this process, and anything else (no fork on this system, the
child gone, a frame that cannot be read, a child silent for `STALL_S`, other choices by the
time the worker asks) falls back to planning in the app's own process, which gives the
same figures and says the same errors. The frames are pickles, read only from the pipe
this process made to its own child (never from a file).

Only the first plan of a launch is started this way, only on Linux (fork without exec is
unsafe on macOS once system frameworks are loaded, and Windows has no fork) and only with a
second CPU to run it on.
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from cope_tui.options import PlanChoices
from cope_tui.service import advice as service
from cope_tui.sources.hub_policy import set_narrator
from engine.core.progress import Progress
from engine.hardware.platform import NO_GPU, unknown_gpu

STALL_S = 60.0  # a child that sends nothing this long is taken as stuck: the app plans itself
_POLL_S = 0.05  # how often a waiting worker looks at its cancel event
_HEADER = struct.Struct("<Q")  # each frame: its length, then a pickle


def plans_cpu_only(choices: PlanChoices) -> bool:
    return (choices.gpu or "").strip().lower() == NO_GPU


def gpu_of(detect: Callable[[], Any] | None):  # type: ignore[no-untyped-def]
    """This machine's GPU as the app plans for it: detected, or unknown when detection is off."""
    return detect() if detect is not None else unknown_gpu("GPU detection is off")


def rank(choices: PlanChoices, *, detect_cpu, detect_gpu, progress: Progress | None = None,  # type: ignore[no-untyped-def]
         cancel: threading.Event | None = None) -> service.Advice:
    """The ranking the app shows for `choices`: as `cope advise` plans it, but never probing
    unasked (no fidelity, no reprobe)."""
    return service.plan(choices.with_(fidelity=None, reprobe=False), detect_cpu=detect_cpu, detect_gpu=detect_gpu,
                        progress=progress, cancel=cancel)


def every_eighth(post: Callable[[int, int, str], None]) -> Progress:
    """The ranking's progress as the app shows it: every eighth step (a message per candidate
    would keep the screen busier than the plan)."""
    def progress(done: int, total: int, label: str) -> None:
        if done % 8 == 0:
            post(done, total, label)

    return progress


@dataclass(frozen=True)
class Planned:
    """What the child planned, and the machine it detected on the way (the app keeps both,
    as its own worker would have)."""

    advice: service.Advice
    cpu: Any  # the services' detect_cpu()
    gpu: Any  # gpu_of(detect_gpu), or None when the plan never asked for it


def can_fork() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def second_core() -> bool:
    """Whether this process may run on two CPUs or more: on one, the child would only take
    turns with the app, as the app's own worker does."""
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) >= 2


class HeadStart:
    """The first ranking under way in a child process; `result` waits for it."""

    def __init__(self, choices: PlanChoices, pid: int, fd: int, *, collection_paused: bool = False) -> None:
        self.choices = choices
        self.pid: int | None = pid  # None once the child is reaped
        self._fd: int | None = fd
        self._lock = threading.Lock()
        self._taken = False
        self._reading = False  # a worker is in result(): it closes the pipe
        self._paused = collection_paused  # this process's garbage collection, until the child is done

    @classmethod
    def begin(cls, choices: PlanChoices, services) -> HeadStart | None:  # type: ignore[no-untyped-def]
        """Fork a child that plans `choices` with `services` (cope_tui.app.state.Services);
        None where that cannot be done here (the app then plans in its own process)."""
        if not can_fork() or not second_core() or plans_cpu_only(choices):
            return None
        try:
            read_fd, write_fd = os.pipe()
        except OSError:
            return None
        # What is allocated so far (the imports: modules, classes, functions) lives as long as
        # the process: frozen, no collection walks it again, in either process, so neither
        # writes to the pages they share (a full collection during the startup walked them all,
        # about a tenth of the app's CPU time to its first table).
        gc.freeze()
        try:
            with warnings.catch_warnings():
                # Python 3.12+ warns of fork in a process with threads: at launch the only other
                # threads are OpenBLAS's, which handle fork themselves, and the replay pool of
                # engine/replays/compiled.py is forgotten in the child
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            return None
        if pid == 0:  # the child: never returns
            os.close(read_fd)
            _child(write_fd, choices, services)
        os.close(write_fd)
        # Meanwhile the app builds its screen: thousands of young objects, none garbage yet,
        # walked by a young collection every few hundred (about a tenth of its CPU time to the
        # first paint). Collection resumes once the child is done, whatever its outcome.
        paused = gc.isenabled()
        gc.disable()
        return cls(choices, pid, read_fd, collection_paused=paused)

    def take(self, choices: PlanChoices) -> HeadStart | None:
        """This head start, once, for a worker planning `choices`; None (and the child
        stopped) when it planned other choices or was taken already."""
        with self._lock:
            taken, self._taken = self._taken, True
        if taken:
            return None
        if choices != self.choices:
            self.stop()
            return None
        return self

    def result(self, cancel: threading.Event, progress: Callable[[int, int, str], None],
               say: Callable[[str], None] = lambda line: None) -> Planned | None:
        """The child's ranking (its progress passed on meanwhile, and the lines it said while
        waiting for the Hub to `say`), or None when there is none to use: cancelled, the
        child gone or stuck, a frame unreadable."""
        with self._lock:
            fd = self._fd
            self._reading = fd is not None  # the pipe is this thread's to close now
        try:
            for frame in self._frames(fd, cancel):
                if frame[0] == "progress":
                    progress(*frame[1:])
                elif frame[0] == "say":
                    say(frame[1])
                elif frame[0] == "done":
                    self._reap()  # the child exits after its last frame: its CPU time is counted as ours
                    return Planned(*frame[1:])
            return None
        except Exception:  # noqa: BLE001 - whatever went wrong, the app plans for itself
            return None
        finally:
            self.stop()
            with self._lock:
                self._reading = False
                fd, self._fd = self._fd, None
            if fd is not None:
                os.close(fd)

    @staticmethod
    def _frames(fd: int | None, cancel: threading.Event):  # type: ignore[no-untyped-def]
        if fd is None:
            return
        poller = select.poll()  # not select(): a descriptor past 1023 is fine
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        buffer = bytearray()
        last = time.monotonic()
        while not cancel.is_set():
            if not poller.poll(_POLL_S * 1000):
                if time.monotonic() - last > STALL_S:
                    return
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:  # the child is gone without its result
                return
            last = time.monotonic()
            buffer += chunk
            while len(buffer) >= _HEADER.size:
                (size,) = _HEADER.unpack_from(buffer)
                if len(buffer) < _HEADER.size + size:
                    break
                # a pickle from the pipe this process made to its own child: trusted
                frame = pickle.loads(bytes(buffer[_HEADER.size: _HEADER.size + size]))
                del buffer[: _HEADER.size + size]
                yield frame

    def _resume_collection(self) -> None:
        with self._lock:
            paused, self._paused = self._paused, False
        if paused:
            gc.freeze()  # the screen just built lives as long as the app: no collection need walk it
            gc.enable()

    def _reap(self) -> None:
        with self._lock:
            pid, self.pid = self.pid, None
        if pid is not None:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

    def stop(self) -> None:
        """End the child if it still runs (it is killed: it holds nothing of the user's),
        close the pipe and let this process collect garbage again; safe to call more than
        once, from any thread."""
        self._resume_collection()
        with self._lock:
            pid, self.pid = self.pid, None
            fd = None
            if not self._reading:  # else the reader closes it, once the killed child's pipe ends
                fd, self._fd = self._fd, None
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        if fd is not None:
            os.close(fd)


def _send(out, frame: tuple) -> None:  # type: ignore[no-untyped-def]
    body = pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_HEADER.pack(len(body)))
    out.write(body)
    out.flush()


def _child(fd: int, choices: PlanChoices, services) -> None:  # type: ignore[no-untyped-def]
    """Plan in the forked child, send the frames, and leave without running anything of the
    parent's (no atexit, no buffers flushed twice): os._exit, whatever happens."""
    code = 1
    try:
        # One plan, then gone: its garbage is freed when it exits (the collections cost about a
        # tenth of the plan, on the path to the first table).
        gc.disable()
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # a Ctrl-C before the app takes the terminal ends it
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # a warning printed here would land on the app's screen
        os.dup2(devnull, 2)
        out = os.fdopen(fd, "wb")
        detected: list = []

        def this_gpu():  # type: ignore[no-untyped-def]
            if not detected:
                detected.append(gpu_of(services.detect_gpu))
            return detected[0]

        # a Hub wait is said in the app, as its own worker's would be (run_app's narrator)
        set_narrator(lambda line: _send(out, ("say", line)))
        cpu = services.detect_cpu()
        progress = every_eighth(lambda done, total, label: _send(out, ("progress", done, total, label)))
        advice = rank(choices, detect_cpu=lambda: cpu, detect_gpu=this_gpu, progress=progress)
        _send(out, ("done", advice, cpu, detected[0] if detected else None))
        code = 0
    except BaseException:  # noqa: BLE001 - the parent sees the pipe close and plans itself
        pass
    finally:
        os._exit(code)
