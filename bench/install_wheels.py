"""Install COPE and the wheels bench/offline_wheels.sh prepared into a private folder,
with nothing but the Python standard library: no pip, no index, no network.

    python bench/install_wheels.py WHEELS_DIR SITE_DIR

A wheel is a zip of what goes into site-packages, so unpacking it is installing it (no
entry-point scripts: the GPU scripts run `python -m cope_tui.cli`). Of each project the
newest wheel this interpreter can load is taken: pure wheels (`py3-none-any`) always,
compiled ones (orjson) only for this CPython and x86-64 Linux. Prints one line per wheel
installed. Exits 2 with one line when the folder holds no COPE wheel or a wheel this
Python needs has no build for it.
"""

from __future__ import annotations

import platform
import sys
import zipfile
from pathlib import Path

REQUIRED = ("cope_tui", "orjson")  # the headless `--json` path cannot run without these


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else 0 for p in version.replace("-", ".").split("."))


def compatible(filename: str, python: tuple[int, int] = sys.version_info[:2],
               machine: str = platform.machine()) -> bool:
    """Whether a wheel named `filename` loads on this interpreter (PEP 427 tags)."""
    parts = filename[:-4].split("-")
    if len(parts) < 5:
        return False
    py_tags, abi_tags, platform_tags = (set(p.split(".")) for p in parts[-3:])
    cp = f"cp{python[0]}{python[1]}"
    if "none" in abi_tags and "any" in platform_tags:
        return bool(py_tags & {"py3", f"py{python[0]}{python[1]}", cp})
    exact = cp in py_tags and cp in abi_tags
    # An abi3 wheel built for CPython 3.N loads on every later 3.x.
    stable = "abi3" in abi_tags and any(t[:3] == "cp3" and t[3:].isdigit() and int(t[3:]) <= python[1]
                                        for t in py_tags)
    if not (exact or stable):
        return False
    return sys.platform == "linux" and any(t.endswith("_" + machine) and t.startswith(("manylinux", "linux"))
                                           for t in platform_tags)


def choose(names: list[str], **tags) -> dict[str, str]:
    """Project (normalised) -> the newest compatible wheel file name."""
    best: dict[str, tuple[tuple, str]] = {}
    for name in names:
        if not name.endswith(".whl") or not compatible(name, **tags):
            continue
        project, version = name.split("-")[:2]
        project = project.lower().replace("-", "_")
        key = _version_key(version)
        if project not in best or key > best[project][0]:
            best[project] = (key, name)
    return {project: name for project, (_key, name) in sorted(best.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python bench/install_wheels.py WHEELS_DIR SITE_DIR", file=sys.stderr)
        return 2
    wheels, site = Path(argv[0]), Path(argv[1])
    names = sorted(p.name for p in wheels.glob("*.whl")) if wheels.is_dir() else []
    chosen = choose(names)
    python = f"CPython {sys.version_info[0]}.{sys.version_info[1]} on {platform.machine()}"
    for project in REQUIRED:
        if project not in chosen:
            have = [n for n in names if n.lower().startswith(project)]
            why = (f"only {', '.join(have)}, none for {python}" if have
                   else "none (run bench/offline_wheels.sh on a machine with the package index first)")
            print(f"install_wheels: {wheels}: no {project} wheel for {python}: {why}", file=sys.stderr)
            return 2
    site.mkdir(parents=True, exist_ok=True)
    for name in chosen.values():
        try:
            with zipfile.ZipFile(wheels / name) as z:
                z.extractall(site)
        except (OSError, zipfile.BadZipFile) as exc:
            print(f"install_wheels: {wheels / name}: cannot unpack ({exc})", file=sys.stderr)
            return 2
        print(f"installed {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
