"""TraceFormat: what the registry knows of one trace format (one module per format)."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine.core.errors import CopeInputError
from engine.core.files import file_kind
from engine.traces.trace import RoutingTrace

HEAD_BYTES = 4096  # what sniffers see of a file


@dataclass(frozen=True)
class TraceFormat:
    """One trace format.

    `read(path, *, model=None)` returns a RoutingTrace; formats that do not carry the
    model's shape (CSV, JSONL) need `model` (a ModelSpec) and refuse None. `sniff(path,
    head)` says whether the first HEAD_BYTES bytes (b"" for a folder) look like this
    format. `write(trace, path)`, when there is one, writes atomically.
    """

    name: str  # stable id, e.g. "cope-npz"; also the Hub index's format name
    label: str  # how a person knows it, as listed in the unknown-format error
    suffixes: tuple[str, ...]  # lower-case file name endings that select it
    sniff: Callable[[Path, bytes], bool]
    read: Callable[..., RoutingTrace]
    write: Callable[[RoutingTrace, str], None] | None = None
    folders: bool = False  # reads a folder rather than a file

    def claims(self, name: str) -> bool:
        return name.lower().endswith(self.suffixes)


def text_head(head: bytes) -> bytes:
    """The head of a text file without a UTF-8 BOM and leading blank space."""
    return head.lstrip(b"\xef\xbb\xbf \t\r\n")


def json_problem(exc: BaseException) -> str:
    """A JSON parser's complaint in a few words (json.loads raises ValueError for a number
    of more than 4300 digits and RecursionError for deep nesting, besides JSONDecodeError)."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 (byte {exc.start})"
    if "integer string conversion" in str(exc) or "Exceeds the limit" in str(exc):
        return "a number of more than 4300 digits"
    msg = getattr(exc, "msg", None)
    if msg is not None:
        return f"{msg} (column {exc.colno})"
    text = str(exc)
    return text if len(text) <= 120 else text[:117] + "..."


@dataclass(frozen=True)
class TraceShape:
    """What a reader must be told of the model when its format does not record it (CSV,
    JSONL, CommitMoE labels): the blocks with routed experts, how many experts a layer
    has, how many a token picks, and the model's id for the trace's notes."""

    moe_blocks: tuple[int, ...]
    n_experts: int
    top_k: int
    model_name: str = ""


def model_shape(path: str, model, label: str) -> TraceShape:
    """The shape a model gives a format that does not record its own (None is refused)."""
    if model is None:
        raise CopeInputError(f"a {label} trace does not name its model: say which model it is from", path=path)
    return TraceShape(tuple(model.moe_blocks), model.n_routed_experts, model.top_k, model.id)


# Published traces can hold tens of millions of tokens (FLAME-MoE: 52,428,800 per layer
# file); replay needs far fewer, and memory would run out first. Readers of such formats
# keep the first MAX_IMPORT_TOKENS tokens and say so in the trace's notes.
MAX_IMPORT_TOKENS = 1_000_000
MAX_IMPORT_BYTES = 8 * 1024**3  # a file larger than this is refused before it is opened


def missing_reader(path: str, package: str, extra: str) -> CopeInputError:
    """The one-line error for a format whose optional reader package is not installed."""
    return CopeInputError(f"reading this format needs the {package} package: install cope[{extra}] "
                          f"(pip install 'cope-tui[{extra}]')", path=path)


def check_file_size(path: str) -> int:
    """The file's size in bytes; CopeInputError when it is over MAX_IMPORT_BYTES, unreadable,
    or not a regular file (a FIFO in a trace folder would wait for a writer inside a reader
    that Ctrl-C cannot stop: it is refused here, before any reader opens it)."""
    try:
        info = Path(path).stat()
    except OSError as exc:
        raise CopeInputError(f"cannot read: {exc.strerror or exc}", path=path) from None
    if not stat.S_ISREG(info.st_mode):
        raise CopeInputError(f"is {file_kind(info.st_mode)}, expected a regular file: COPE reads only regular "
                             "files", path=path)
    size = info.st_size
    if size > MAX_IMPORT_BYTES:
        raise CopeInputError(f"file is {size / 1024**3:.1f} GiB, over the {MAX_IMPORT_BYTES // 1024**3} GiB COPE "
                             "reads as one trace: take one part of it", path=path)
    return size
