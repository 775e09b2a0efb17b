#!/usr/bin/env bash
# The one script to run the first time a CUDA machine is at hand, in under 8 minutes.
#
#   bench/gpu_first_run.sh OUT_DIR
#
# It needs only Python and a CUDA build of torch there, no network: COPE and the
# dependencies such a machine lacks are installed from the wheels that
# `bench/offline_wheels.sh` prepared here beforehand (bench/wheels/, about 3 MB), into
# a private folder. Each step writes its result into OUT_DIR as soon as it ends, so a
# run cut short keeps what it did:
#   env.txt          nvidia-smi, torch and its CUDA, the Python packages used
#   gpu_tests.txt    the GPU-marked tests (pytest -m gpu)
#   kernels.json     bench/gpu_step_check.py: the expert kernel eager vs CUDA graph against
#                    the HBM bound, copies, and each execution strategy's layer step
#   detect.json      cope detect --json (bandwidths measured)
#   advise.json      a bounded cope advise --fidelity combined (probes this GPU)
#   validate.json    a short cope validate (estimated against executed), rewritten per configuration
#   summary.txt      what each GPU figure rests on (bench/gpu_basis_check.py)
#   run.log          every step's narration
# Exit: 0 when every GPU figure was measured on this GPU; 3 when one came from a preset;
# 2 when there is no usable CUDA device (it stops there, before any GPU step, and says
# why); 4 when a step failed. FIRST_RUN_SECONDS (default 450) bounds the whole run: a
# step that would start after it is skipped and said so. FIRST_RUN_WITHOUT_CUDA=1 runs
# every step without CUDA anyway (to check this script itself on a CPU-only machine).
set -u -o pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
out=$(mkdir -p "$1" && cd "$1" && pwd) || { echo "gpu_first_run: cannot create $1" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
log="$out/run.log"
: >"$log"
budget=${FIRST_RUN_SECONDS:-450}
start=$(date +%s)
status=0

exec 3>&2  # the terminal's stderr, whatever a step's output is redirected to
say() { echo "gpu_first_run: $*" | tee -a "$log" >&3; }
left() { echo $(( budget - ($(date +%s) - start) )); }
# step SECONDS NAME COMMAND...: run with at most SECONDS (and what is left of the budget).
step() {
  local cap=$1 name=$2; shift 2
  local rest; rest=$(left)
  if [ "$rest" -le 10 ]; then say "$name: skipped, the ${budget}s budget is spent"; status=4; return 124; fi
  [ "$cap" -gt "$rest" ] && cap=$rest
  say "$name (at most ${cap}s)"
  timeout "$cap" "$@"
  local rc=$?
  if [ $rc -ne 0 ]; then say "$name: exit $rc"; [ $status -eq 0 ] && status=4; fi
  return $rc
}

# --- 1. Python and COPE ---------------------------------------------------------------
py=$(command -v python3 || command -v python) || { say "no python3 on PATH"; exit 2; }
if ! "$py" -c 'import cope_tui, textual, orjson, gguf' 2>/dev/null; then
  wheels="$root/bench/wheels"
  if ! ls "$wheels"/cope_tui-*.whl >/dev/null 2>&1; then
    say "COPE is not installed and $wheels holds no wheels: run bench/offline_wheels.sh on a machine with" \
        "network access first, and bring bench/wheels along"
    exit 2
  fi
  site=$(mktemp -d /tmp/cope-site.XXXXXX)
  # A wheel is a zip of what goes into site-packages: unpacked, it needs no pip and no index.
  # torch, numpy, pytest and the rest come from this machine's Python.
  for wheel in "$wheels"/*.whl; do
    "$py" -m zipfile -e "$wheel" "$site" >>"$log" 2>&1 || { say "could not unpack $wheel (see $log)"; exit 4; }
  done
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  "$py" -c 'import cope_tui, textual, orjson, gguf' 2>>"$log" \
    || { say "COPE does not import even with the wheels (see $log)"; exit 4; }
  say "installed COPE and its missing dependencies into $site"
fi
export PYTHONUNBUFFERED=1
export COPE_CACHE_DIR=${COPE_CACHE_DIR:-$(mktemp -d /tmp/cope-first-run-cache.XXXXXX)}  # profiles stay out of OUT_DIR
mkdir -p "$COPE_CACHE_DIR"
cope=("$py" -m cope_tui.cli)

# --- 2. the machine -------------------------------------------------------------------
{
  echo "== date"; date -u
  echo "== nvidia-smi"; (nvidia-smi 2>&1 || echo "nvidia-smi: not found or failed")
  echo "== python"; "$py" --version
  echo "== torch"; "$py" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda,
    "available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1
  echo "== packages"; "$py" -m pip list 2>/dev/null | grep -iE '^(torch|numpy|textual|orjson|gguf|pytest|nvidia-ml-py) '
  echo "== cpu"; (nproc; grep -m1 'model name' /proc/cpuinfo; grep MemTotal /proc/meminfo) 2>&1
} >"$out/env.txt" 2>&1
say "machine described in env.txt"

# --- 3. the first GPU step: is CUDA usable? --------------------------------------------
if [ "${FIRST_RUN_WITHOUT_CUDA:-0}" != 1 ] &&
   ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>>"$log"; then
  say "no usable CUDA device here (torch.cuda.is_available() is false, or torch is missing)."
  "${cope[@]}" detect --json --no-measure >"$out/detect.json" 2>>"$log" \
    && "$py" -c 'import json,sys; [print("gpu_first_run:", w) for w in json.load(open(sys.argv[1]))["warnings"]]' \
       "$out/detect.json" | tee -a "$log" >&2
  say "stopped before the first GPU step; nothing was measured on a GPU. Run this on a CUDA machine."
  exit 2
fi

# --- 4. GPU tests, kernels, detection, probes, ground truth -----------------------------
# Only the files that hold GPU-marked tests, without the app's snapshot plugins.
gpu_tests=$(grep -l "mark.gpu" tests/test_*.py | tr '\n' ' ')
# shellcheck disable=SC2086
step 120 "GPU-marked tests" "$py" -m pytest -q -p no:cacheprovider -p no:textual-snapshot -p no:syrupy -m gpu \
  $gpu_tests >"$out/gpu_tests.txt" 2>&1
step 120 "kernel and step micro-benchmarks" "$py" bench/gpu_step_check.py "$out/kernels.json" >>"$log" 2>&1
step 60 "cope detect --json" "${cope[@]}" detect --json >"$out/detect.json" 2>>"$log"
# A 16 GiB budget on this GPU: a consumer card's split, measured on this one.
step 110 "cope advise --fidelity combined" "${cope[@]}" advise --json --fidelity combined --probe-budget 45 \
  --vram-budget 16 --threads 8 >"$out/advise.json" 2>>"$log"
step 130 "cope validate" "${cope[@]}" validate --model qwen3-30b-a3b --threads 8 --vram-budgets 16 --tokens 12 \
  --fidelity analytic,combined --probe-budget 30 --max-seconds 100 --out "$out/validate.json" >>"$log" 2>&1

# --- 5. what the figures rest on ----------------------------------------------------------
"$py" bench/gpu_basis_check.py "$out" "$COPE_CACHE_DIR" >"$out/summary.txt" 2>&1
basis=$?
{
  echo "== GPU tests"; tail -n 3 "$out/gpu_tests.txt" 2>/dev/null
  echo "== elapsed $(( $(date +%s) - start )) s"
} >>"$out/summary.txt"
cat "$out/summary.txt" >&2
[ $basis -eq 3 ] && status=3
say "done in $(( $(date +%s) - start ))s (exit $status); results in $out"
exit $status
