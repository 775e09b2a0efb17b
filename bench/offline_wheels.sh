#!/usr/bin/env bash
# Prepare what bench/gpu_first_run.sh installs on a CUDA machine that has only Python
# and a CUDA build of torch, and no network: COPE as a wheel, and the wheels of its
# dependencies that such a machine usually lacks (the Textual stack, orjson, gguf, the
# snapshot plugin), for CPython 3.10-3.13 on x86-64 Linux. Everything else COPE needs
# (numpy, torch, pytest, httpx, nvidia-ml-py) is expected there.
#
# Usage: bench/offline_wheels.sh [DIR]     (default bench/wheels, ignored by git)
# Needs network access to the package index here, once; the result stays within 60 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bench/wheels}
py=${PYTHON_VERSION:-3.12}
mkdir -p "$out"
rm -f "$out"/*.whl

# Pure-Python ones (any Python 3) and the compiled one (orjson) for the target Python.
pure=(textual==8.2.8 rich==15.0.0 markdown-it-py==4.3.0 mdit-py-plugins==0.7.0 linkify-it-py==2.0.3
      uc-micro-py==1.0.3 platformdirs==4.3.8 pygments==2.19.2 typing-extensions==4.15.0
      gguf==0.19.0 pytest-textual-snapshot==1.1.0 syrupy==4.8.0)
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$out" "${pure[@]}"
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$out" \
    --python-version "$py" --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 orjson==3.11.3
python3 -m pip wheel --quiet --no-deps --no-build-isolation -w "$out" . 2>/dev/null \
    || python3 -m pip wheel --quiet --no-deps -w "$out" .
rm -rf build ./*.egg-info
du -sh "$out"
ls "$out"
