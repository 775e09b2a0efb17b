#!/usr/bin/env bash
# Detection and a combined-fidelity probe run on a CUDA machine, in under 8 minutes.
#
#   bench/gpu_probe_check.sh OUT_DIR [extra `cope advise` options, e.g. --model ID --threads 8]
#
# Writes into OUT_DIR:
#   detect.json   `cope detect --json`
#   advise.json   `cope advise --fidelity combined --reprobe --probe-budget 120 --json`
#   profile/      the probe profile it measured (COPE_CACHE_DIR points there)
#   *.stderr      what each command said on stderr (probe progress)
# Exits 2 with a message when there is no CUDA device; 124 when a step overran; 3 when
# the run finished but a GPU figure was not measured on this GPU (basis "preset": torch
# could not use the GPU, or a probe fell back), naming each such figure.
set -u -o pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR [extra cope advise options]" >&2
  exit 2
fi
out=$1
shift
mkdir -p "$out" || { echo "gpu_probe_check: cannot create $out" >&2; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -x "$root/.venv/bin/python" ]; then
  py="$root/.venv/bin/python"
else
  py=$(command -v python3 || command -v python)
fi
cope=("$py" -m cope_tui.cli)
cd "$root" || exit 2

if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_probe_check: no CUDA device here (torch.cuda.is_available() is false or torch is missing);" \
       "this check needs a CUDA machine. Nothing was run." >&2
  exit 2
fi

export COPE_CACHE_DIR="$out/profile"
mkdir -p "$COPE_CACHE_DIR"
start=$(date +%s)

echo "gpu_probe_check: cope detect --json" >&2
timeout 90 "${cope[@]}" detect --json >"$out/detect.json" 2>"$out/detect.stderr"
rc=$?
if [ $rc -ne 0 ]; then
  echo "gpu_probe_check: cope detect failed (exit $rc); see $out/detect.stderr" >&2
  tail -n 20 "$out/detect.stderr" >&2
  exit $rc
fi

# 120 s of combined states on top of the atomic probes and the set-up; the whole
# check stays under 8 minutes (480 s), detection included.
left=$(( 470 - ($(date +%s) - start) ))
echo "gpu_probe_check: cope advise --fidelity combined --reprobe --probe-budget 120 --json $* (at most ${left}s)" >&2
timeout "$left" "${cope[@]}" advise --fidelity combined --reprobe --probe-budget 120 --json "$@" \
  >"$out/advise.json" 2>"$out/advise.stderr"
rc=$?
tail -n 5 "$out/advise.stderr" >&2
if [ $rc -ne 0 ]; then
  echo "gpu_probe_check: cope advise failed (exit $rc); see $out/advise.stderr" >&2
  exit $rc
fi

"$py" bench/gpu_basis_check.py "$out" "$out/profile" >&2
rc=$?
echo "gpu_probe_check: done in $(( $(date +%s) - start ))s; JSON in $out" >&2
exit $rc
