#!/usr/bin/env bash
# The one script to run the first time a CUDA machine is at hand: every GPU-side check
# in at most 9 minutes, one archive back.
#
#   bench/offline_wheels.sh                      here, once (the package index is needed)
#   bench/gpu_first_run.sh [--dry-run] OUT_DIR   there (bring bench/wheels along)
#
# There it needs only Python with torch and numpy (numba when there): COPE and what the
# machine lacks (orjson, nvidia-ml-py, pytest) are unpacked from bench/wheels into a
# private folder (bench/gpu_env.sh). Steps, each with its budget in seconds (FIRST_RUN_SECONDS,
# default 540, bounds the whole; a step that no longer fits is skipped and named):
#   install 20, machine 15, detect 45, GPU tests 60, step check 110, numba warm-up 40,
#   advise 100, validate 120; the summary and archive keep 15 in reserve.
# Each step writes into OUT_DIR/first-run/ as it goes (the step check one figure at a
# time), and OUT_DIR/cope-first-run.tar.gz (logs, JSON, probe profiles) is rewritten after
# every step, so a run cut short still leaves the archive of what it did;
# OUT_DIR/summary.txt is the short summary (its first line says where the routing came
# from: SYNTHETIC unless a recorded trace was replayed). advise and validate plan for
# the GPU this runs on (no --gpu preset).
# --dry-run (or FIRST_RUN_DRY_RUN=1): every step without CUDA, to check this script on a
# CPU-only machine (GPU figures then come from presets and CUDA-only sections say so).
# Exit: 0 every step ran and every GPU figure was measured here (a dry run: every step
# ran); 3 a GPU figure came from a preset; 4 a step failed or was skipped; 2 no usable
# CUDA device without --dry-run, or no wheels (one line, before any step).
set -u -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/gpu_env.sh
. "$root/bench/gpu_env.sh"
gpu_env_args "${FIRST_RUN_DRY_RUN:-0}" "$@"
gpu_env_python gpu_first_run
gpu_env_cuda gpu_first_run "$dry"

out=$(mkdir -p "$out_arg" && cd "$out_arg" && pwd) || { echo "gpu_first_run: cannot create $out_arg" >&2; exit 2; }
work="$out/first-run"
rm -rf "$work" && mkdir -p "$work" || { echo "gpu_first_run: cannot create $work" >&2; exit 2; }
private=$(mktemp -d "${TMPDIR:-/tmp}/cope-first-run.XXXXXX") || { echo "gpu_first_run: no temporary folder" >&2; exit 2; }
log="$work/run.log"
: >"$log"
: >"$work/steps.tsv"
budget=${FIRST_RUN_SECONDS:-540}
reserve=15  # for the summary and the archive
start=$(date +%s)
status=0
cd "$root" || exit 2

exec 3>&2  # the terminal's stderr, whatever a step's output is redirected to
say() { echo "gpu_first_run: $*" | tee -a "$log" >&3; }
left() { echo $(( budget - reserve - ($(date +%s) - start) )); }
pack() {  # the archive, rewritten whole (a few MB), so it is never half written
  tar -czf "$out/.cope-first-run.tar.gz.tmp" -C "$out" first-run 2>>"$log" \
    && mv -f "$out/.cope-first-run.tar.gz.tmp" "$out/cope-first-run.tar.gz"
}
# step SECONDS NAME COMMAND...: at most SECONDS (and what the budget leaves), then pack.
step() {
  local cap=$1 name=$2 rest t0 rc; shift 2
  rest=$(left)
  if [ "$rest" -lt 15 ] || { [ "$rest" -lt "$cap" ] && [ "$rest" -lt $(( cap / 2 )) ]; }; then
    say "$name: skipped for time (${rest}s of the ${budget}s budget left, it needs ${cap}s)"
    printf '%s\t%s\t%s\t%s\n' "$name" "$cap" 0 "skipped for time" >>"$work/steps.tsv"
    status=4
    return 124
  fi
  [ "$cap" -gt "$rest" ] && cap=$rest
  say "$name (at most ${cap}s)"
  t0=$(date +%s)
  timeout --kill-after=5 "$cap" "$@"
  rc=$?
  local result="ok"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && result="timed out after ${cap}s"
  [ $rc -ne 0 ] && [ "$result" = ok ] && result="exit $rc"
  printf '%s\t%s\t%s\t%s\n' "$name" "$cap" $(( $(date +%s) - t0 )) "$result" >>"$work/steps.tsv"
  if [ $rc -ne 0 ]; then say "$name: $result"; status=4; fi
  pack
  return $rc
}

# --- install: COPE and the missing wheels into a private folder ------------------------
# Unpacking a few MB (well inside its 20 s); not under timeout, as it sets PYTHONPATH here.
t0=$(date +%s)
gpu_env_install gpu_first_run "$private/site"  # one line and exit 2 when the wheels are missing
printf '%s\t%s\t%s\t%s\n' "install from bench/wheels" 20 $(( $(date +%s) - t0 )) ok >>"$work/steps.tsv"
say "installed $(grep -c '^installed' "$private/site.log") wheels into $private/site"
export PYTHONUNBUFFERED=1
export COPE_CACHE_DIR="$work/cache"  # the probe profiles travel in the archive
export NUMBA_CACHE_DIR="$private/numba"  # compiled once by the warm-up step, reused by advise and validate
mkdir -p "$COPE_CACHE_DIR" "$NUMBA_CACHE_DIR"
cat "$root/bench/wheels/SOURCE" >"$work/wheels.txt" 2>/dev/null || echo "wheels: no SOURCE file" >"$work/wheels.txt"
echo "GPU: $(gpu_env_name)$([ "$dry" = 1 ] && echo '; DRY RUN: GPU figures from presets, CUDA-only sections skipped')" \
  >"$work/gpu.txt"
cat "$work/gpu.txt" "$work/wheels.txt" >&3
# Run cope from the work folder, so the installed wheel (not the checkout) is what runs.
cope=(bash -c 'cd "$0" && exec "$@"' "$work" "$py" -m cope_tui.cli)
threads=$(( $(nproc) > 8 ? 8 : $(nproc) ))
model=(--model qwen3-30b-a3b --trace synthetic)

# --- the machine --------------------------------------------------------------------------
machine() {
  echo "== date"; date -u
  echo "== nvidia-smi"; (nvidia-smi 2>&1 || echo "nvidia-smi: not found or failed")
  echo "== python"; "$py" --version
  echo "== torch"; "$py" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda,
    "available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
  echo "== numba"; "$py" -c 'import numba; print(numba.__version__)' 2>&1 | tail -n 1
  echo "== installed from bench/wheels"; cat "$private/site.log"
  echo "== cpu"; nproc; grep -m1 'model name' /proc/cpuinfo; grep MemTotal /proc/meminfo
}
export -f machine
export py private
step 15 "machine (env.txt)" bash -c machine >"$work/env.txt" 2>&1

# --- detection, GPU tests, step check --------------------------------------------------------
step 45 "cope detect --json" "${cope[@]}" detect --json >"$work/detect.json" 2>"$work/detect.stderr"
# Only the files that hold GPU-marked tests, run from the checkout (they import tests/).
gpu_tests=$(grep -l "mark.gpu" tests/test_*.py | tr '\n' ' ')
# shellcheck disable=SC2086
step 60 "GPU-marked tests" "$py" -m pytest -q -p no:cacheprovider -p no:textual-snapshot -p no:syrupy -m gpu \
  $gpu_tests >"$work/gpu_tests.txt" 2>&1
dry_flag=(); [ "$dry" = 1 ] && dry_flag=(--dry-run)
step 110 "step check (kernels.json)" "$py" bench/gpu_step_check.py "${dry_flag[@]}" "$work/kernels.json" \
  >"$work/step_check.txt" 2>&1

# --- numba's first-call compile, out of the timed steps ------------------------------------
# The same model, trace and budget as advise: it compiles the replay loops advise and
# validate call, cached on disk (NUMBA_CACHE_DIR) for their processes.
step 40 "numba warm-up (advise --fidelity analytic)" "${cope[@]}" advise --json --fidelity analytic "${model[@]}" \
  --vram-budget 16 --threads "$threads" >"$work/advise-analytic.json" 2>"$work/advise-analytic.stderr"

# --- advise and validate on this GPU ----------------------------------------------------------
# A 16 GiB budget on this GPU: a consumer card's split, measured on this one.
step 100 "cope advise --fidelity combined" "${cope[@]}" advise --json --fidelity combined --probe-budget 45 "${model[@]}" \
  --vram-budget 16 --threads "$threads" >"$work/advise.json" 2>"$work/advise.stderr"
step 120 "cope validate" "${cope[@]}" validate "${model[@]}" --threads "$threads" --vram-budgets 16 --tokens 12 \
  --fidelity analytic,combined --probe-budget 20 --max-seconds 70 --out "$work/validate.json" \
  >"$work/validate.txt" 2>"$work/validate.stderr"

# --- what the figures rest on, the summary, the archive -----------------------------------
"$py" bench/gpu_basis_check.py "$work" "$COPE_CACHE_DIR" >"$work/basis.txt" 2>&1
basis=$?
[ $basis -eq 3 ] && [ "$dry" != 1 ] && [ $status -eq 0 ] && status=3
echo "elapsed $(( $(date +%s) - start )) s of the ${budget}s budget; exit $status" >>"$work/steps.tsv.note"
"$py" bench/first_run_summary.py "$work" >"$work/summary.txt" 2>>"$log"
cat "$work/steps.tsv.note" >>"$work/summary.txt" && rm -f "$work/steps.tsv.note"
cp "$work/summary.txt" "$out/summary.txt"
pack
rm -rf "$private"
cat "$out/summary.txt" >&3
say "done in $(( $(date +%s) - start ))s (exit $status): $out/cope-first-run.tar.gz and $out/summary.txt"
exit $status
