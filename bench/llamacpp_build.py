"""Build llama.cpp's programs (CPU backend) from a pinned source that a package registry serves.

    python bench/llamacpp_build.py [--sdist FILE] [--targets llama-server,llama-bench,...]

prints the folder of the binaries on stdout (narration on stderr), so that

    COPE_LLAMA_BIN="$(python bench/llamacpp_build.py)" python -m pytest -q

runs the suite's real-binary tests (tests/test_real_llamacpp.py; llama-imatrix: tests/test_imatrix_real.py)
against them.

The source is the llama.cpp that the `llama-cpp-python` source distribution vendors
(fetched with `pip download --no-binary :all: --no-deps`, or given with --sdist): PyPI
serves it wherever pip works, and the distribution pins one commit (SOURCE_COMMIT, read
from the archive's git metadata and checked). The build goes under the user's cache
folder (`<cache>/llamacpp/<sdist>/`), so a second run finds the binaries and does not
rebuild; about 5 minutes on 2 cores for llama-server, llama-bench and llama-imatrix.
The Web UI is not built and nothing is downloaded during the build (no prebuilt UI, no
TLS, no curl).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.core.cache_dirs import cache_root  # noqa: E402

SDIST = "llama-cpp-python==0.3.36"
SDIST_FILE = "llama_cpp_python-0.3.36.tar.gz"
# ggml-org/llama.cpp, the commit vendor/llama.cpp of that distribution holds
# (its .git/modules/vendor/llama.cpp/HEAD).
SOURCE_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
TARGETS = ("llama-server", "llama-bench", "llama-imatrix", "llama-quantize")
CMAKE_FLAGS = ("-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DGGML_CUDA=OFF", "-DGGML_METAL=OFF",
               "-DGGML_VULKAN=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
               "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF",
               "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF")


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def work_dir() -> Path:
    return cache_root() / "llamacpp" / SDIST.replace("==", "-")


def sdist_path(given: str | None, work: Path) -> Path:
    if given:
        return Path(given)
    found = work / SDIST_FILE
    if not found.exists():
        say(f"pip download {SDIST} (source distribution, llama.cpp vendored)")
        work.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", SDIST,
                        "-d", str(work)], check=True, stdout=subprocess.DEVNULL)
    return found


def _vendored_commit(tar: tarfile.TarFile, top: str) -> str | None:
    """The commit the archive's git metadata says vendor/llama.cpp is at."""
    try:
        member = tar.extractfile(f"{top}/.git/modules/vendor/llama.cpp/HEAD")
    except KeyError:
        return None
    text = member.read().decode("ascii", "replace").strip() if member else ""
    return text if re.fullmatch(r"[0-9a-f]{40}", text) else None


def extract_llama_cpp(given: str | None, work: Path) -> Path:
    src = work / "src"
    if (src / "CMakeLists.txt").exists():
        return src
    sdist = sdist_path(given, work)
    say(f"extracting vendor/llama.cpp from {sdist.name}")
    tmp = work / "src.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        commit = _vendored_commit(tar, top)
        if commit is not None and commit != SOURCE_COMMIT:
            raise SystemExit(f"{sdist}: vendors llama.cpp {commit}, expected {SOURCE_COMMIT}")
        prefix = f"{top}/vendor/llama.cpp/"
        members = []
        for m in tar.getmembers():
            if m.name.startswith(prefix):
                m.name = m.name[len(prefix):]
                members.append(m)
        tar.extractall(tmp, members=members, filter="data")
    tmp.rename(src)
    return src


def build(src: Path, work: Path, targets: tuple[str, ...] = TARGETS) -> dict[str, Path]:
    """The binaries, built once (cached beside the source)."""
    out = work / "build"
    binaries = {t: out / "bin" / t for t in targets}
    if all(b.exists() for b in binaries.values()):
        say(f"llama.cpp binaries cached in {out / 'bin'}")
        return binaries
    jobs = str(os.cpu_count() or 2)
    started = time.monotonic()
    say(f"building {', '.join(targets)} (CPU backend) in {out}; log in {work / 'build.log'}")
    with open(work / "build.log", "w") as log:
        subprocess.run(["cmake", "-S", str(src), "-B", str(out), *CMAKE_FLAGS], check=True, stdout=log, stderr=log)
        subprocess.run(["cmake", "--build", str(out), "-j", jobs, "--target", *targets], check=True, stdout=log,
                       stderr=log)
    say(f"built in {time.monotonic() - started:.0f} s")
    return binaries


def binaries(given_sdist: str | None = None, targets: tuple[str, ...] = TARGETS) -> dict[str, Path]:
    """Every target, built or found in the cache."""
    work = work_dir()
    work.mkdir(parents=True, exist_ok=True)
    return build(extract_llama_cpp(given_sdist, work), work, targets)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sdist", help=f"the {SDIST_FILE} to build from (default: pip download it)")
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated programs to build")
    args = p.parse_args(argv)
    built = binaries(args.sdist, tuple(t for t in args.targets.split(",") if t))
    print(next(iter(built.values())).parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
