#!/usr/bin/env bash
# The one preparation command, run here (where the package index is reachable), before
# the GPU scripts run on a CUDA machine that has only Python, torch, numpy (and maybe
# numba) and no network:
#
#   bench/offline_wheels.sh [DIR]      (default bench/wheels, ignored by git: carry it along)
#
# It puts into DIR: COPE as a wheel, built from this checkout's tracked files (a copy, so
# nothing is built or deleted in the checkout), and the wheels of what such a machine
# lacks: orjson (every `--json` output; compiled, so one wheel per CPython 3.11-3.13 on
# x86-64 Linux), nvidia-ml-py (NVML: PCIe link, driver) and pytest with its
# dependencies (the GPU-marked tests). Not textual or gguf: the headless path and the
# GPU tests import neither. SOURCE names the commit the COPE wheel was built from.
# bench/install_wheels.py unpacks them there (bench/gpu_env.sh: gpu_env_install).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/bench/wheels}
mkdir -p "$out"
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
rm -f "$out"/*.whl "$out/SOURCE"

pure=(nvidia-ml-py==13.615.71 pytest==8.4.2 pluggy==1.7.0 iniconfig==2.3.1 packaging==26.4 pygments==2.21.0)
"$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$out" "${pure[@]}"
for version in 3.11 3.12 3.13; do
  "$py" -m pip download --quiet --no-deps --only-binary=:all: -d "$out" \
      --python-version "$version" --implementation cp \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 orjson==3.13.0
done

# COPE from the tracked files as they are in the working tree.
copy=$(mktemp -d "${TMPDIR:-/tmp}/cope-wheel-src.XXXXXX")
trap 'rm -rf "$copy"' EXIT
(cd "$root" && git ls-files -z | tar --null -T - -cf -) | tar -xf - -C "$copy"
(cd "$copy" && "$py" -m pip wheel --quiet --no-deps --no-build-isolation -w "$out" . 2>/dev/null \
   || "$py" -m pip wheel --quiet --no-deps -w "$out" .)
commit=$(cd "$root" && git rev-parse HEAD)
dirty=$(cd "$root" && git status --porcelain --untracked-files=no | wc -l)
echo "cope_tui wheel built from $commit$([ "$dirty" -gt 0 ] && echo " with $dirty changed tracked file(s)")" >"$out/SOURCE"
du -sh "$out"
ls "$out"
