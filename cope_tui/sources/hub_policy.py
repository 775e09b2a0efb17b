"""One policy for every call to the Hugging Face Hub (issue 47).

Every Hub operation COPE makes (a config.json, a file's size, a repo's file list, a
download) runs through `hub_call`:

- a deadline for the whole operation (connect, first byte, transfer and the client's
  retries together): COPE_HUB_TIMEOUT_S seconds, 60 by default, set by the user; a
  download is held to it only while no byte arrives (a trace of a few GiB takes longer
  than any fixed deadline; one that stalls does not);
- huggingface_hub's retries are watched, not hidden: each wait is said in one line while it
  lasts, and a wait the server asks for (Retry-After, a rate limit) that ends past the
  deadline fails at once, naming it, instead of sleeping for it (a 429 with
  Retry-After: 3600 slept five hours);
- whatever the client raises that its callers do not map (a dropped connection, a redirect
  loop, a malformed answer, an error of huggingface_hub's own) becomes one line naming the
  URL and the fault;
- huggingface_hub's agent registry (fetched from the Hub to build its User-Agent, cached a
  day under HF_HOME, and a crash in every call when the Hub answers it with the wrong
  shape) is not used: COPE is no agent harness, and an empty registry costs nothing.

The operation runs in a daemon thread that the caller waits on, so the deadline holds
whatever the client does; a thread past its deadline is left to finish on its own
(its connection dropped), and its partial download is removed by the caller.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
from typing import Callable, TypeVar

from engine.core.errors import CopeInputError
from engine.core.progress import Cancelled

T = TypeVar("T")

DEADLINE_ENV = "COPE_HUB_TIMEOUT_S"
DEFAULT_DEADLINE_S = 60.0
_POLL_S = 0.1

_narrate: Callable[[str], None] = lambda line: print(f"cope: {line}", file=sys.stderr)  # noqa: E731


def set_narrator(say: Callable[[str], None]) -> Callable[[str], None]:
    """Where the lines said while waiting go (stderr by default; the app shows them itself);
    returns the one it replaces, to put back when the app is gone."""
    global _narrate
    previous, _narrate = _narrate, say
    return previous


def _say(line: str) -> None:
    """A line while waiting, through the narrator; one that fails (an app no longer running)
    goes to stderr instead of failing the download it reports on."""
    try:
        _narrate(line)
    except Exception:  # noqa: BLE001 - a narrator's failure must not become the Hub call's
        print(f"cope: {line}", file=sys.stderr)


def deadline_s() -> float:
    """The deadline of one Hub operation, seconds (COPE_HUB_TIMEOUT_S, else 60)."""
    text = os.environ.get(DEADLINE_ENV, "").strip()
    if not text:
        return DEFAULT_DEADLINE_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value <= 86400):  # also refuses nan
        raise CopeInputError(f"{DEADLINE_ENV}={text!r}: give the seconds a Hub operation may take, "
                             "more than 0 and at most 86400")
    return value


def short_error(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


class _Operation:
    """One Hub call being waited on: what its retries said, and why it must stop now."""

    def __init__(self, url: str, deadline: float) -> None:
        self.url = url
        self.deadline = deadline
        self.started = time.monotonic()
        self.last_progress = self.started
        self.fault: str | None = None  # the last failure the client retried after
        self.stop: str | None = None  # why the wait ends now (a Retry-After past the deadline)
        self.abandoned = False  # the caller stopped waiting: the worker stops at its next retry or byte
        self.done = threading.Event()

    def left_s(self) -> float:
        return self.deadline - (time.monotonic() - self.started)


_OPERATIONS: dict[int, _Operation] = {}  # worker thread id -> its operation
_LOCK = threading.Lock()

# huggingface_hub.utils._http's retry warnings (huggingface_hub 2.x):
_HTTP_ERROR = re.compile(r"HTTP Error (\d+) thrown while requesting (\S+) (\S+)")
_EXC_ERROR = re.compile(r"'(.*)' thrown while requesting (\S+) (\S+)", re.S)
_WAIT = re.compile(r"(?:Rate limited\. Waiting|Retrying in) ([\d.]+)s")


class Abandoned(Exception):
    """Raised in a worker whose caller stopped waiting (past the deadline, or cancelled): it
    ends the client's retries there instead of letting them run on (and close the shared
    HTTP client under a later call)."""


class _RetryWatcher(logging.Handler):
    """Reads the client's retry warnings in the thread that logs them (its operation's).
    An exception raised here reaches the client's retry loop: that is how an abandoned
    worker is stopped."""

    def emit(self, record: logging.LogRecord) -> None:
        op = _OPERATIONS.get(threading.get_ident())
        if op is None:
            return
        if op.abandoned:
            raise Abandoned(op.url)
        text = record.getMessage()
        if m := _HTTP_ERROR.search(text):
            op.fault = f"HTTP {m[1]}"
        elif m := _EXC_ERROR.search(text):
            op.fault = " ".join(m[1].split())[:120] or "connection error"
        elif m := _WAIT.search(text):
            wait = float(m[1])
            fault = op.fault or "a failure"
            asked = text.startswith("Rate limited")  # the server's Retry-After (or rate limit), not a backoff
            if wait >= op.left_s():
                op.stop = (f"{fault}, and the Hub asks to retry in {wait:g} s, past the {op.deadline:g} s deadline "
                           f"({DEADLINE_ENV})" if asked else
                           f"{fault}, and no time left to retry within the {op.deadline:g} s deadline ({DEADLINE_ENV})")
                op.done.set()
                raise Abandoned(op.url)
            _say(f"the Hub at {op.url}: {fault}; retrying in {wait:g} s "
                     f"(deadline {op.deadline:g} s, {DEADLINE_ENV})")


_SET_UP = False


def set_up() -> None:
    """Once a process: the client's retry warnings to COPE's watcher (never the terminal),
    and no agent registry (see the module doc)."""
    global _SET_UP
    if _SET_UP:
        return
    _SET_UP = True
    http_log = logging.getLogger("huggingface_hub.utils._http")
    http_log.setLevel(logging.WARNING)
    http_log.propagate = False  # huggingface_hub's own handler would print them
    http_log.addHandler(_RetryWatcher())
    no_agent_registry()


def no_agent_registry() -> None:
    try:
        from huggingface_hub.utils import _detect_agent  # noqa: PLC0415

        _detect_agent._registry = _detect_agent._EMPTY_REGISTRY
    except (ImportError, AttributeError):  # another huggingface_hub: it may not have one
        pass


def progressed() -> None:
    """A byte arrived (a download's progress callback, in the worker): its stall clock restarts."""
    op = _OPERATIONS.get(threading.get_ident())
    if op is not None:
        if op.abandoned:
            raise Abandoned(op.url)
        op.last_progress = time.monotonic()


def _passes(exc: BaseException) -> bool:
    """Raised as it is: COPE's own errors, a cancel, and the client's errors its callers map."""
    if isinstance(exc, (CopeInputError, Cancelled, KeyboardInterrupt)):
        return True
    try:
        from huggingface_hub import errors as hf  # noqa: PLC0415
    except ImportError:  # pragma: no cover
        return False
    mapped = (hf.HfHubHTTPError, hf.LocalEntryNotFoundError, hf.OfflineModeIsEnabled, hf.HFValidationError,
              hf.EntryNotFoundError)
    return isinstance(exc, mapped)


def hub_call(url: str, fn: Callable[[], T], *, where: str, stall_only: bool = False, raw: bool = False,
             cancel: threading.Event | None = None, on_timeout: Callable[[], None] | None = None,
             extra_s: float = 0.0) -> T:
    """fn() (a huggingface_hub or HTTP call about `url`) under the deadline, in a worker.

    `stall_only`: the deadline counts only time without progress (`progressed`). The
    client's mapped errors are raised as they are (the caller says them in its words);
    anything else is one line naming `url` and the fault, as is a deadline passed
    (`on_timeout` runs first: remove a partial download). `raw`: every error of fn is
    raised as it is (a caller that says each in its own words). `extra_s`: seconds added to
    the deadline for an upload of known size (no progress to watch)."""
    set_up()
    no_agent_registry()  # again: something may have loaded one since
    deadline = deadline_s() + max(extra_s, 0.0)
    op = _Operation(url, deadline)
    box: dict[str, object] = {}

    def work() -> None:
        _OPERATIONS[threading.get_ident()] = op
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            box["error"] = exc
        finally:
            _OPERATIONS.pop(threading.get_ident(), None)
            op.done.set()

    worker = threading.Thread(target=work, name="cope-hub", daemon=True)
    worker.start()
    while not op.done.wait(_POLL_S):
        if cancel is not None and cancel.is_set():
            break
        idle = time.monotonic() - (op.last_progress if stall_only else op.started)
        if idle >= deadline:
            break
    if op.stop is not None or not op.done.is_set():
        op.abandoned = True
        _drop_session()
        if on_timeout is not None:
            on_timeout()
        if cancel is not None and cancel.is_set() and op.stop is None:
            raise Cancelled
        why = op.stop or (f"no byte for {deadline:g} s" if stall_only else f"not done within {deadline:g} s") + (
            f" (last fault: {op.fault})" if op.fault else "") + f"; {DEADLINE_ENV} sets the deadline"
        raise CopeInputError(f"the Hub at {url}: {why}", path=where)
    if "error" in box:
        exc = box["error"]
        assert isinstance(exc, BaseException)
        if raw or _passes(exc):
            raise exc
        raise CopeInputError(f"the Hub at {url}: {type(exc).__name__}: {short_error(exc)}", path=where) from None
    return box["value"]  # type: ignore[return-value]


def _drop_session() -> None:
    """A worker past its deadline holds a hung connection: the next request opens a fresh client
    (closing this one would wait on it again)."""
    try:
        from huggingface_hub.utils import _http  # noqa: PLC0415

        _http._GLOBAL_CLIENT = None
    except (ImportError, AttributeError):
        pass
