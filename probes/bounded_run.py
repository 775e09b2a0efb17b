"""Running a program whose output COPE does not trust (llama-bench, llama-cli --help).

`run_capped` reads the program's stdout and stderr as they come, keeps at most
`max_bytes` of each, and stops the program (SIGKILL) once either grows past that: a
runtime that prints without end costs at most 2 x `max_bytes` of memory and ends at the
cap, not at the time limit. The bytes are decoded as UTF-8 with replacement (U+FFFD), so
output that is not text never raises. A program still running at `timeout_s`, or when
`poll` raises (a cancel), is killed and waited for before the exception leaves.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from dataclasses import dataclass
from typing import Callable

from engine.core.input_limits import RUNTIME_OUTPUT_MAX_BYTES

CHUNK_BYTES = 65_536


@dataclass(frozen=True)
class Captured:
    returncode: int  # -9 when COPE stopped it for printing too much
    stdout: str
    stderr: str
    overflowed: bool  # stopped at max_bytes: stdout/stderr hold only the first max_bytes


def run_capped(argv: list[str], *, timeout_s: float, max_bytes: int = RUNTIME_OUTPUT_MAX_BYTES,
               env: dict[str, str] | None = None, poll: Callable[[], None] | None = None) -> Captured:
    """Run `argv` to its end (see the module doc); OSError when it cannot start,
    subprocess.TimeoutExpired past `timeout_s`, whatever `poll` raises."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env)
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    kept = {out_fd: bytearray(), err_fd: bytearray()}
    deadline = time.monotonic() + timeout_s
    overflowed = False
    try:
        with selectors.DefaultSelector() as sel:
            for pipe in (proc.stdout, proc.stderr):
                sel.register(pipe, selectors.EVENT_READ)
            while sel.get_map() and not overflowed:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(argv, timeout_s)
                for key, _ in sel.select(timeout=min(left, 0.2)):
                    chunk = os.read(key.fd, CHUNK_BYTES)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    buf = kept[key.fd]
                    room = max_bytes - len(buf)
                    buf += chunk[:room]
                    overflowed = overflowed or len(chunk) > room
                if poll is not None:
                    poll()
        if overflowed:
            proc.kill()
        code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:  # timed out, cancelled or interrupted: the program does not outlive us
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    text = {fd: bytes(buf).decode("utf-8", errors="replace") for fd, buf in kept.items()}
    return Captured(code, text[out_fd], text[err_fd], overflowed)
