#!/usr/bin/env bash
# Detection and a combined-fidelity probe run on a CUDA machine, in under 8 minutes.
#
#   bench/gpu_probe_check.sh [--dry-run] OUT_DIR [extra `cope advise` options, e.g. --model ID --threads 8]
#
# Plans for the GPU this runs on: a `--gpu` option is refused (the probes measure this
# card; a preset's plan would price another). Routing: COPE's synthetic trace unless a
# --trace is given (said on the first line). COPE and the wheels the machine lacks come
# from bench/wheels (bench/offline_wheels.sh; installed by bench/gpu_env.sh, as
# bench/gpu_first_run.sh does). Writes into OUT_DIR:
#   detect.json   `cope detect --json`
#   advise.json   `cope advise --fidelity combined --reprobe --probe-budget 120 --json`
#   profile/      the probe profile it measured (COPE_CACHE_DIR points there)
#   *.stderr      what each command said on stderr (probe progress)
# Exits 2 in one line when there is no CUDA device (--dry-run: run anyway, to check the
# script on a CPU-only machine) or no wheels; 124 when a step overran; 3 when the run
# finished but a GPU figure was not measured on this GPU (basis "preset": torch could
# not use the GPU, or a probe fell back), naming each such figure.
set -u -o pipefail

dry=0
if [ "${1:-}" = "--dry-run" ]; then dry=1; shift; fi
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: $0 [--dry-run] OUT_DIR [extra cope advise options]" >&2
  exit 2
fi
out=$1
shift
caller=$PWD
for arg in "$@"; do
  case $arg in
    --gpu|--gpu=*) echo "gpu_probe_check: $arg: no --gpu preset here; the probes measure this machine's GPU" >&2
                   exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/gpu_env.sh
. "$root/bench/gpu_env.sh"
gpu_env_python gpu_probe_check
gpu_env_cuda gpu_probe_check "$dry"
mkdir -p "$out" || { echo "gpu_probe_check: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
private=$(mktemp -d "${TMPDIR:-/tmp}/cope-probe-check.XXXXXX") || { echo "gpu_probe_check: no temporary folder" >&2; exit 2; }
trap 'rm -rf "$private"' EXIT
gpu_env_install gpu_probe_check "$private/site"
# From the caller's folder, so relative paths among the extra options (--trace) mean what they meant.
cope=(bash -c 'cd "$0" && exec "$@"' "$caller" "$py" -m cope_tui.cli)
cd "$root" || exit 2
case " $* " in
  *" --trace "*|*" --trace="*) ;;
  *) echo "gpu_probe_check: SYNTHETIC routing (COPE's synthetic trace; pass --trace FILE for a recorded one)" >&2 ;;
esac
echo "gpu_probe_check: GPU: $(gpu_env_name)" >&2
gpu_env_warm gpu_probe_check

export COPE_CACHE_DIR="$out/profile"
mkdir -p "$COPE_CACHE_DIR"
start=$(date +%s)

echo "gpu_probe_check: cope detect --json" >&2
timeout --kill-after=5 90 "${cope[@]}" detect --json >"$out/detect.json" 2>"$out/detect.stderr"
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
timeout --kill-after=5 "$left" "${cope[@]}" advise --fidelity combined --reprobe --probe-budget 120 --json "$@" \
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
