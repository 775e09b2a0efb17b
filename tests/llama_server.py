"""Run a real llama-server for a test: on 127.0.0.1, on a free port, with its log in a
file, and never left running.

    with run_server([server, "-m", gguf, "-c", "256", "-t", "2"]) as srv:
        body = srv.complete({"prompt": [1, 2, 3], "n_predict": 4})

`run_server` starts the program, waits for GET /health to answer 200 (llama-server answers
503 while the model loads), yields a `Server` (its `base_url`, the process, the log), and
on exit sends SIGTERM, then SIGKILL after `stop_timeout`. Any --host/--port already in
argv (an exported command) are replaced: the tests listen on localhost only. If the process
exits or stops answering, the error carries the tail of its log, which is where
llama.cpp says why (an assertion, an unknown argument, a missing tensor).

HTTP goes through urllib with proxies disabled: an http_proxy in the environment must not
route 127.0.0.1 elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

HOST = "127.0.0.1"
LOG_TAIL = 4000  # characters of the server log quoted in errors
BIND_TRIES = 3
DYING_WAIT = 5.0  # seconds a server whose connection dropped gets to exit before its log is read
KEY_LINE = re.compile(r"GGML_ASSERT|GGML_ABORT|error|exception|failed|terminate", re.IGNORECASE)

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerError(RuntimeError):
    """llama-server did not start, died, or answered an error; the message ends with its log."""


def free_port(host: str = HOST) -> int:
    """A port nothing listens on now (the OS picks it; the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def with_address(argv: Sequence[str], host: str, port: int) -> list[str]:
    """argv with --host and --port set to `host` and `port` (replaced if present)."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        if arg in ("--host", "--port") and i + 1 < len(argv):
            skip = True
            continue
        if arg.startswith(("--host=", "--port=")):
            continue
        out.append(str(arg))
    return out + ["--host", host, "--port", str(port)]


def request(method: str, url: str, payload: Any = None, *, timeout: float = 60.0) -> tuple[int, Any]:
    """(HTTP status, decoded JSON body or text) of one request; HTTP errors are returned, not raised."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    text = raw.decode("utf-8", errors="replace")
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def complete(base_url: str, payload: Mapping[str, Any] | None = None, *, timeout: float = 60.0) -> dict:
    """POST /completion and return the JSON body; raises ServerError unless HTTP 200.

    The default asks for exactly 4 tokens (EOS ignored) after the token ids [1, 2, 3] (any
    vocabulary has them). Any payload is sent greedy, with the token ids returned, unless
    it says otherwise."""
    body = dict(payload) if payload is not None else {"prompt": [1, 2, 3], "n_predict": 4, "ignore_eos": True}
    body.setdefault("return_tokens", True)
    body.setdefault("temperature", 0.0)
    status, answer = request("POST", base_url.rstrip("/") + "/completion", body, timeout=timeout)
    if status != 200 or not isinstance(answer, dict):
        raise ServerError(f"POST /completion -> HTTP {status}: {str(answer)[:1000]}")
    return answer


@dataclass
class Server:
    """A started llama-server: where it listens, its process, its log file and command."""

    base_url: str
    process: subprocess.Popen
    log_path: Path
    argv: list[str] = field(default_factory=list)

    def log_tail(self, n: int = LOG_TAIL) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError as e:
            return f"(log unreadable: {e})"

    def key_lines(self, limit: int = 10) -> list[str]:
        """The log's first error and assertion lines: a crash's backtrace can push them out
        of the tail."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return [line for line in lines if KEY_LINE.search(line)][:limit]

    def explain(self, what: str) -> str:
        """`what`, the command, its state, the log's error lines and its tail: an assertion message."""
        state = "running" if self.process.poll() is None else f"exited {self.process.returncode}"
        key = "\n".join(self.key_lines()) or "(none)"
        return (f"{what}\ncommand: {' '.join(self.argv)}\nserver {state}; log {self.log_path}\n"
                f"error lines:\n{key}\nlog tail:\n{self.log_tail()}")

    def complete(self, payload: Mapping[str, Any] | None = None, *, timeout: float = 60.0) -> dict:
        """`complete` against this server, with the log in any error. A dropped connection
        usually means the server is crashing: ggml's abort handler may still be printing a
        backtrace, so the process gets DYING_WAIT seconds to finish before the log is read."""
        try:
            return complete(self.base_url, payload, timeout=timeout)
        except ServerError as e:
            raise ServerError(self.explain(f"completion failed: {e}")) from e
        except OSError as e:  # URLError, connection reset, timeout
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(DYING_WAIT)
            raise ServerError(self.explain(f"completion failed: {e!r}")) from e

    def get(self, path: str, *, timeout: float = 10.0) -> tuple[int, Any]:
        return request("GET", self.base_url + path, timeout=timeout)

    def post(self, path: str, payload: Any, *, timeout: float = 60.0) -> tuple[int, Any]:
        return request("POST", self.base_url + path, payload, timeout=timeout)


def _wait_healthy(srv: Server, timeout: float) -> None:
    """Poll GET /health until 200; fail early if the process exits."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if srv.process.poll() is not None:
            raise ServerError(srv.explain("llama-server exited before it was healthy"))
        try:
            status, body = srv.get("/health", timeout=2.0)
            if status == 200:
                return
            last = f"HTTP {status}: {body}"
        except OSError as e:  # not listening yet
            last = repr(e)
        time.sleep(0.1)
    raise ServerError(srv.explain(f"llama-server not healthy after {timeout:.0f} s (last: {last})"))


def stop(process: subprocess.Popen, timeout: float = 10.0) -> int:
    """SIGTERM, wait up to `timeout`, then SIGKILL; returns the exit status (negative: signal)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)
    return process.returncode


def _start(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> Server:
    cmd = with_address(argv, HOST, free_port())
    with open(log_path, "wb") as log:
        process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=dict(env))
    return Server(base_url=f"http://{HOST}:{cmd[-1]}", process=process, log_path=log_path, argv=cmd)


@contextlib.contextmanager
def run_server(argv: Sequence[str], env: Mapping[str, str] | None = None, *, startup_timeout: float = 60.0,
               stop_timeout: float = 10.0, log_dir: str | Path | None = None) -> Iterator[Server]:
    """Start `argv` (llama-server and its arguments) on 127.0.0.1 and a free port, wait until
    healthy, yield the `Server`, stop it on exit. `env` is laid over os.environ.

    Another process may take the free port between the check and the server's bind
    (llama-server then exits with "couldn't bind HTTP server socket" before loading):
    that is retried on a new port, up to BIND_TRIES times. The log file is removed after
    a clean run and kept (its path is in the error) when the block raised; with `log_dir`
    it is written there and always kept."""
    fd, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log", dir=log_dir)
    os.close(fd)
    log_path = Path(name)
    full_env = {**os.environ, **(env or {})}
    ok = False
    srv = None
    try:
        for attempt in range(BIND_TRIES):
            srv = _start(argv, full_env, log_path)
            try:
                _wait_healthy(srv, startup_timeout)
                break
            except ServerError:
                stop(srv.process, stop_timeout)
                if "couldn't bind" not in srv.log_tail() or attempt == BIND_TRIES - 1:
                    raise
        yield srv
        ok = True
    finally:
        if srv is not None:
            stop(srv.process, stop_timeout)
        if ok and log_dir is None:
            log_path.unlink(missing_ok=True)
