"""The import structure of engine/, probes/ and cope_tui/, drawn with `ast` from the source.

Every import counts as an arrow: at module level, inside functions, and under
`if TYPE_CHECKING:`. The rules (docs/architecture.md, engine/__init__.py):
- no import cycle anywhere;
- no module imports a private (_underscore) name of another module;
- engine's sub-packages import only the ones below them (engine.LAYERS, bottom first);
  engine/ never imports probes/ or cope_tui/, probes/ never imports cope_tui/;
- an import inside a function only defers a heavy optional dependency: one of HEAVY, or
  a module of ours that imports one of them when it is imported (textual through the
  app, torch through the probes, numba through the compiled kernels).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

import engine

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "probes", "cope_tui")

# Heavy or optional third-party modules a function may import when it needs them, and
# modules that exist on one platform only.
HEAVY = {
    "textual": "the app's UI toolkit: only the app loads it",
    "torch": "the probes, the executor and the recorders",
    "numba": "the compiled replay loops, imported when a replay first runs",
    "gguf": "GGUF files, read only when one is given",
    "huggingface_hub": "the Hub, only when a command reaches it",
    "httpx2": "huggingface_hub's HTTP client",
    "transformers": "trace recording, the cope-tui[record] extra",
    "llama_cpp": "recording through llama-cpp-python, the cope-tui[llamacpp] extra",
    "pyarrow": "FLAME-MoE's Parquet traces, the cope[parquet] extra",
    "safetensors": "CommitMoE's safetensors traces",
    "pynvml": "NVML, only when a GPU is detected",
    "pwd": "Unix only",
    "fcntl": "Unix only",
}


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    names: tuple[str, ...]
    in_function: bool
    line: int

    def __str__(self) -> str:
        names = f" ({', '.join(self.names)})" if self.names else ""
        where = " in a function" if self.in_function else ""
        return f"{self.source}:{self.line} -> {self.target}{names}{where}"


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _arrows() -> list[Arrow]:
    out = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]

        def visit(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.Import):
                    out.extend(Arrow(module, a.name, (), in_function, child.lineno) for a in child.names)
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        up = package.split(".")[: len(package.split(".")) - child.level + 1]
                        base = ".".join(up + ([child.module] if child.module else []))
                    names = [a.name for a in child.names]
                    submodules = [n for n in names if f"{base}.{n}" in MODULES]
                    out.extend(Arrow(module, f"{base}.{n}", (), in_function, child.lineno) for n in submodules)
                    rest = tuple(n for n in names if n not in submodules)
                    if rest or not submodules:
                        out.append(Arrow(module, base, rest, in_function, child.lineno))
                inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                visit(child, inner)

        visit(tree, False)
    return out


ARROWS = _arrows()
INTERNAL = [a for a in ARROWS if a.target in MODULES and a.target != a.source]


def _cycle() -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or None."""
    graph = defaultdict(set)
    for a in INTERNAL:
        graph[a.source].add(a.target)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = walk(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(MODULES):
        if start not in state:
            found = walk(start)
            if found:
                return found
    return None


def _heavy_modules() -> set[str]:
    """Our modules that import a HEAVY one when they are imported (at module level)."""
    top = defaultdict(set)
    for a in ARROWS:
        if not a.in_function:
            top[a.source].add(a.target)
    heavy: set[str] = set()
    changed = True
    while changed:
        changed = False
        for module in MODULES:
            if module not in heavy and any(t.split(".")[0] in HEAVY or t in heavy for t in top[module]):
                heavy.add(module)
                changed = True
    return heavy


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "engine" or len(parts) < 3:
        return None
    return engine.LAYERS.index(parts[1])


def test_the_graph_sees_every_package():
    assert len(MODULES) > 150
    assert any(a.source.startswith("cope_tui.") and a.target.startswith("engine.") for a in INTERNAL)
    # every engine module lives in a sub-package named in engine.LAYERS
    flat = [m for m in MODULES if m.startswith("engine.") and m.count(".") == 1 and m.split(".")[1] not in engine.LAYERS]
    assert flat == [], f"engine modules outside the sub-packages: {flat}"
    assert set(engine.LAYERS) == {m.split(".")[1] for m in MODULES if m.count(".") >= 1 and m.startswith("engine.")}


def test_no_import_cycle():
    cycle = _cycle()
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_one():
    global INTERNAL
    saved = INTERNAL
    try:
        INTERNAL = saved + [Arrow("engine.core.errors", "engine.advice.advise", (), True, 1)]
        cycle = _cycle()
    finally:
        INTERNAL = saved
    assert cycle is not None and cycle[0] == cycle[-1] and "engine.core.errors" in cycle


def test_no_private_name_is_imported_from_another_module():
    private = [str(a) for a in INTERNAL if any(n.startswith("_") for n in a.names)]
    assert private == [], "private names imported across modules:\n" + "\n".join(private)


def test_engine_sub_packages_import_only_those_below():
    against = [str(a) for a in INTERNAL
               if _layer(a.source) is not None and _layer(a.target) is not None
               and _layer(a.target) > _layer(a.source)]
    assert against == [], f"arrows against engine.LAYERS {engine.LAYERS}:\n" + "\n".join(against)


@pytest.mark.parametrize(("lower", "higher"), [("engine", "probes"), ("engine", "cope_tui"), ("probes", "cope_tui")])
def test_packages_never_import_upward(lower, higher):
    up = [str(a) for a in INTERNAL if a.source.split(".")[0] == lower and a.target.split(".")[0] == higher]
    assert up == [], "\n".join(up)


def test_engine_imports_neither_torch_nor_textual():
    bad = [str(a) for a in ARROWS if a.source.startswith("engine") and a.target.split(".")[0] in ("torch", "textual")]
    assert bad == [], "\n".join(bad)


def test_imports_inside_functions_only_defer_heavy_dependencies():
    heavy = _heavy_modules()
    light = [str(a) for a in ARROWS
             if a.in_function and a.target.split(".")[0] not in HEAVY and a.target not in heavy]
    assert light == [], ("imports inside functions of modules that are not heavy (move them to the top; "
                         "HEAVY lists what may be deferred):\n" + "\n".join(light))


def test_the_heavy_modules_of_ours_are_the_expected_ones():
    heavy = _heavy_modules()
    assert "cope_tui.app.app" in heavy  # textual
    # numba: the compiled loops and how they are compiled, nothing else of engine/
    kernels = {"engine.replays.replay_kernels", "engine.replays.moe_cache_kernels", "engine.replays.kernel_cache"}
    assert kernels <= heavy
    assert not any(m.startswith("engine.") and m not in kernels for m in heavy), sorted(heavy)
    assert "cope_tui.cli" not in heavy and "cope_tui.service.advice" not in heavy
