"""The values every runtime works with: what a runtime is, whether it runs a candidate,
the plan it exports from, and the launch it builds (a command value, never a shell
string)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Protocol

import numpy as np

from engine.cost.request import AdviseRequest
from engine.hardware.memory import MemoryPlan
from engine.llamacpp.builds import LlamaBuild
from engine.llamacpp.command_line import CommandLine
from engine.models.model import ModelSpec
from engine.replays.policy import Candidate, Execution
from engine.runtimes.sglang_memory import Checkpoint

EXACT = "exact"
APPROXIMATE = "approximate"
NOT_RUN = "no"


@dataclass(frozen=True)
class Runtime:
    """A program that runs MoE decoding with experts split between GPU and CPU."""

    name: str  # what --runtime takes: "llama.cpp", "ik_llama.cpp", "fork", "sglang-kt"
    title: str  # how a person calls it
    about: str  # one line: what it is and what it can place
    home: str  # where it lives
    install: str  # how to get it, briefly
    # How the CPU's experts of a layer run beside the GPU's, for the cost model:
    # SEQUENTIAL (after the GPU's work of the layer) or PARALLEL (at the same time).
    cpu_experts: Execution
    binaries: tuple[str, ...]  # what --binary may name; the first is the default
    short: str  # a few letters for the tables
    # The command chooses between the mapped model file and a copy (llama.cpp's
    # --no-mmap); False: the runtime decides, and COPE counts a copy.
    can_map: bool = False

    @property
    def get(self) -> str:
        return f"{self.install} ({self.home})"


@dataclass(frozen=True)
class Support:
    """Whether a runtime runs a candidate: exactly, approximately (the note says how it
    differs), or not at all (the note says why)."""

    runtime: str
    level: str  # EXACT | APPROXIMATE | NOT_RUN
    note: str
    runs_as: Candidate | None = None  # approximate: the candidate the runtime really runs, if ranked

    @property
    def exact(self) -> bool:
        return self.level == EXACT

    @property
    def runs(self) -> bool:
        return self.level != NOT_RUN

    def to_dict(self) -> dict:
        # by hand: a runtime's line in the report: its name, exact or not, the note (not the level or runs_as)
        return {"name": self.runtime, "exact": self.exact, "note": self.note}


@dataclass(frozen=True)
class ExportPlan:
    """What an export needs beyond the model: the memory plan, the popularity that fills
    fixed residency, the estimated TPOT of every candidate (for "nearest"), and the
    machine's RAM (for the host-memory check)."""

    memory: MemoryPlan
    popularity: np.ndarray | None = None  # [L, E] routing counts of the profile trace
    tpot_s: tuple[tuple[str, float], ...] = ()  # (candidate id, estimated TPOT)
    ram_bytes: int | None = None  # None: unknown, RAM is not checked
    host_non_expert_bytes: int = 0  # weights llama.cpp keeps in host memory besides experts
    synthetic_profile: bool = False  # the popularity comes from SYNTHETIC routing
    profile_source: str = ""  # where the popularity's trace comes from, for comments
    numa_nodes: int | None = None
    # SGLang (engine/runtimes/sglang_memory.py): the card's whole memory, which picks its
    # chunked prefill and CUDA-graph sizes (None: the budget is the card); the checkpoint
    # --model-path names (None: the model's own fields); and whether the CPU has AMX for
    # kt-kernel's AMX methods (None: unknown), with how that is known.
    gpu_vram_bytes: int | None = None
    checkpoint: Checkpoint | None = None
    cpu_amx: bool | None = None
    cpu_amx_note: str = ""
    # The request the plan answers: two or more cards split the layers by it
    # (engine/llamacpp/device_split.py plan_split); None: one card, nothing to split.
    request: "AdviseRequest | None" = None
    gpu_backend: str = "CUDA"  # the llama.cpp backend the plan's GPU runs on (engine/hardware/gpu_backends.py)
    kv_cache_type: str | None = None  # -ctk/-ctv the plan was priced with (None: llama.cpp's default f16)


@dataclass(frozen=True)
class LaunchOptions:
    binary: str
    model_path: str  # the GGUF file
    context: int
    threads: int
    side_dir: str | None = None  # where artefacts are written (their paths in argv)
    hf_model: str | None = None  # SGLang: the Hugging Face weights (repo id or folder)
    build: LlamaBuild | None = None  # the build found on this machine; None: the runtime's shipped manifest


class SideFile:
    """An artefact a command reads (the fork's profile CSV), named when the command is made
    and written only when it is saved: most exports are shown, compared or reported as JSON
    (artefact names only), and a large model's profile takes a good part of a fork export's
    time to lay out. `text` is made by `make` on first use, then kept."""

    def __init__(self, name: str, make: Callable[[], str]):
        self.name = name
        self._make = make

    @cached_property
    def text(self) -> str:
        return self._make()

    def __eq__(self, other: object) -> bool:  # an Export compares its artefacts by content
        if not isinstance(other, SideFile):
            return NotImplemented
        return self.name == other.name and self.text == other.text

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"SideFile({self.name!r})"


@dataclass(frozen=True)
class Placeholder:
    """A word of a printed command that stands for something COPE does not know (the GGUF
    file when none was named, the folder a conversion writes): the word, and what to put
    there."""

    word: str
    put: str

    def to_dict(self) -> dict:
        return {"word": self.word, "put": self.put}


@dataclass(frozen=True)
class Launch:
    """A command and the files it needs. `tensors` are routing-count arrays a front end
    writes with torch (engine/ never imports it)."""

    command: CommandLine  # the program, its arguments by setting, the environment
    side_files: tuple[SideFile, ...] = ()
    tensors: tuple[tuple[str, np.ndarray], ...] = field(default=(), compare=False)  # (file name, counts)
    notes: tuple[str, ...] = ()
    spelled_for: str = ""  # the build whose flags the command uses (engine/llamacpp/builds.py LlamaBuild.origin)
    placeholders: tuple[Placeholder, ...] = ()  # words to replace before running


@dataclass(frozen=True)
class HostUse:
    """Weights a runtime keeps in host memory for a candidate, and whether they are the
    mapped model file (page cache) or a copy."""

    bytes: int
    mapped: bool
    what: str  # e.g. "11 layers' experts", for messages


class RuntimeImpl(Protocol):
    info: Runtime

    def support(self, candidate: Candidate, placement, model: ModelSpec, plan: ExportPlan) -> Support: ...  # noqa: ANN001

    def binary_problem(self, placement, binary: str) -> str | None: ...  # noqa: ANN001

    def host_use(self, candidate: Candidate, placement, model: ModelSpec, plan: ExportPlan,  # noqa: ANN001
                 *, mapped: bool) -> HostUse: ...

    def launch(self, candidate: Candidate, placement, model: ModelSpec, plan: ExportPlan,  # noqa: ANN001
               opts: LaunchOptions, *, mapped: bool) -> Launch: ...
