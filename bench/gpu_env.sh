# Sourced by every bench/ script that runs `cope` on the CUDA machine (gpu_first_run.sh,
# gpu_validate.sh, gpu_probe_check.sh), so they all find the same Python, install the
# same wheels and refuse the same way. Not to be run on its own.
#
#   gpu_env_args DRY ARGS...  reads [--dry-run] OUT_DIR: sets $dry (1 with --dry-run, else
#                             DRY) and $out_arg; else the usage line on stderr, exit 2
#   gpu_env_python            sets $py: $PYTHON, else the checkout's .venv, else python3
#   gpu_env_cuda NAME DRY     no usable CUDA and DRY != 1: one line on stderr, exit 2
#   gpu_env_install NAME DIR  COPE and bench/wheels (bench/offline_wheels.sh) unpacked into
#                             DIR by bench/install_wheels.py, DIR first on PYTHONPATH;
#                             one line and exit 2 when the wheels are missing
#   gpu_env_warm NAME         numba's first-call compile of the replay loops, done once
#                             here (cached in NUMBA_CACHE_DIR) so no timed step pays it
#   gpu_env_name              the GPU torch sees ("none (dry run without CUDA)" else)
#
# No `--gpu` preset in any of these scripts: they plan for the GPU they run on, so an
# estimate and an execution compare the same card (tests/test_gpu_scripts.py checks).

gpu_env_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

gpu_env_args() {
  dry=$1; shift
  if [ "${1:-}" = "--dry-run" ]; then dry=1; shift; fi
  if [ $# -ne 1 ] || [ "${1#-}" != "$1" ]; then
    echo "usage: $0 [--dry-run] OUT_DIR" >&2
    exit 2
  fi
  out_arg=$1
}

gpu_env_python() {
  if [ -n "${PYTHON:-}" ]; then py=$PYTHON
  elif [ -x "$gpu_env_root/.venv/bin/python" ]; then py="$gpu_env_root/.venv/bin/python"
  else py=$(command -v python3 || command -v python) || { echo "${1:-gpu}: no python3 on PATH" >&2; exit 2; }
  fi
}

gpu_env_cuda() {
  local name=$1 dry=${2:-0} why
  [ "$dry" = 1 ] && return 0
  why=$("$py" -c 'import torch, sys
if not torch.cuda.is_available():
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device"); sys.exit(1)' 2>/dev/null) \
    || { echo "$name: no usable CUDA device here (${why:-torch cannot be imported by $py}); nothing was run (--dry-run runs every step without CUDA)" >&2
         exit 2; }
}

gpu_env_install() {
  local name=$1 site=$2 wheels=${COPE_WHEELS:-$gpu_env_root/bench/wheels} line
  if ! line=$("$py" "$gpu_env_root/bench/install_wheels.py" "$wheels" "$site" 2>&1 >"$site.log"); then
    echo "$name: ${line##*$'\n'}" >&2
    exit 2
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  # Beside the site folder: numba's compiled replay loops, shared by this run's processes.
  export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$(dirname "$site")/numba}"
  if ! line=$(cd "$site" && "$py" -c 'import cope_tui.cli, orjson' 2>&1); then
    echo "$name: COPE does not import from $site: ${line##*$'\n'}" >&2
    exit 2
  fi
}

gpu_env_name() {
  "$py" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (dry run without CUDA)")' 2>/dev/null \
    || echo "unknown (torch failed)"
}

gpu_env_warm() {
  local name=$1 t0 rc
  t0=$(date +%s)
  (cd "$(dirname "$NUMBA_CACHE_DIR")" && timeout --kill-after=5 90 "$py" -m cope_tui.cli advise --json \
     --fidelity analytic --model qwen3-30b-a3b --trace synthetic >/dev/null 2>&1)
  rc=$?
  echo "$name: numba warm-up (replay loops compiled before the timed steps): $(( $(date +%s) - t0 )) s, exit $rc" >&2
}
