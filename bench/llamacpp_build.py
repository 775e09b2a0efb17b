"""Build llama.cpp's programs (CPU backend) from a pinned source that a package registry serves.

    python bench/llamacpp_build.py [--sdist FILE] [--targets llama-server,llama-bench,...] [--python-binding]

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

llama.cpp is compiled once for both of its uses here. The libraries are built shared
(libllama, libggml*), beside the programs that link them, and `--python-binding` installs
the same `llama-cpp-python` distribution into the running Python without compiling it again
(its own CMake option LLAMA_BUILD=OFF, read from the distribution's CMakeLists.txt; LLAVA_BUILD=OFF:
COPE records nothing multimodal), then links those libraries into the package's `lib`
folder, where it loads them from (llama_cpp/llama_cpp.py and llama_cpp/_ggml.py of 0.3.36).
CI did compile llama.cpp twice, once for the binding (`pip install .[llamacpp]`: about 6
minutes on 2 cores) and once for the programs (about 5).
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
               "-DGGML_VULKAN=OFF", "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
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


# The shared libraries the binding loads (libllama links the ggml ones); built with the programs.
LIBRARIES = ("libllama.so", "libggml.so", "libggml-base.so", "libggml-cpu.so")
BUILD_DIR = "build-shared"  # not "build": that one (an earlier layout) linked the libraries in statically


def build(src: Path, work: Path, targets: tuple[str, ...] = TARGETS) -> dict[str, Path]:
    """The binaries, built once (cached beside the source), with the shared libraries they
    and the Python binding load."""
    out = work / BUILD_DIR
    binaries = {t: out / "bin" / t for t in targets}
    if all(b.exists() for b in binaries.values()) and all((out / "bin" / lib).exists() for lib in LIBRARIES):
        say(f"llama.cpp binaries cached in {out / 'bin'}")
        return binaries
    jobs = str(os.cpu_count() or 2)
    started = time.monotonic()
    say(f"building {', '.join(targets)} (CPU backend) in {out}; log in {work / 'build.log'}")
    with open(work / "build.log", "w") as log:
        subprocess.run(["cmake", "-S", str(src), "-B", str(out), *CMAKE_FLAGS], check=True, stdout=log, stderr=log)
        subprocess.run(["cmake", "--build", str(out), "-j", jobs, "--target", "llama", *targets], check=True,
                       stdout=log, stderr=log)
    say(f"built in {time.monotonic() - started:.0f} s")
    return binaries


def binaries(given_sdist: str | None = None, targets: tuple[str, ...] = TARGETS) -> dict[str, Path]:
    """Every target, built or found in the cache."""
    work = work_dir()
    work.mkdir(parents=True, exist_ok=True)
    return build(extract_llama_cpp(given_sdist, work), work, targets)


def install_binding(given_sdist: str | None, bin_dir: Path) -> Path:
    """`llama-cpp-python` from the same distribution into this Python, its llama.cpp not
    compiled again: the libraries built in `bin_dir` copied into its `lib` folder. Returns
    that folder."""
    work = work_dir()
    sdist = sdist_path(given_sdist, work)
    started = time.monotonic()
    say(f"installing {SDIST} without compiling llama.cpp (LLAMA_BUILD=OFF); its libraries from {bin_dir}")
    # --no-cache-dir: pip caches a wheel built from a distribution by its name, not by
    # CMAKE_ARGS, and a later plain install here must not get this one, which has no libraries.
    env = {**os.environ, "CMAKE_ARGS": "-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"}
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-cache-dir",
                    str(sdist)], check=True, env=env)
    package = Path(subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                                   "print(u.find_spec('llama_cpp').submodule_search_locations[0])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    lib = package / "lib"
    lib.mkdir(exist_ok=True)
    for name in LIBRARIES:
        # Links, not copies: libllama finds libggml*.so.0 in the build folder (its RUNPATH), and
        # the loader takes a file it has loaded through another path as the same library only
        # when it is the same file; a copy would load ggml twice.
        (lib / name).unlink(missing_ok=True)
        (lib / name).symlink_to(bin_dir / name)
    # The import resolves every symbol the binding declares: a library of another llama.cpp fails here.
    subprocess.run([sys.executable, "-c", "import llama_cpp; llama_cpp.llama_backend_init()"], check=True)
    say(f"binding installed in {time.monotonic() - started:.0f} s, libraries in {lib}")
    return lib


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sdist", help=f"the {SDIST_FILE} to build from (default: pip download it)")
    p.add_argument("--targets", default=",".join(TARGETS), help="comma-separated programs to build")
    p.add_argument("--python-binding", action="store_true",
                   help=f"also install {SDIST} into this Python with the libraries just built (no second compile)")
    args = p.parse_args(argv)
    built = binaries(args.sdist, tuple(t for t in args.targets.split(",") if t))
    bin_dir = next(iter(built.values())).parent
    if args.python_binding:
        install_binding(args.sdist, bin_dir)
    print(bin_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
