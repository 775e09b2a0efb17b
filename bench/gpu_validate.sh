#!/usr/bin/env bash
# A complete `cope validate` study on a CUDA machine, in under 9 minutes.
#
#   bench/gpu_validate.sh [--dry-run] OUT_DIR
#
# Qwen3-30B-A3B and DeepSeek-Coder-V2-Lite shapes (real expert byte sizes, random
# weights) with SYNTHETIC routing (the repository ships no recorded trace of either):
# calibrated from ../shared/traces/ statistics when that folder is there (the Qwen3
# per-layer heat profile; the DeepSeek-V2-Lite routing counts), else the built-in
# generator; the first line of the output and of each table says which. Threads 4,8 and
# budgets 12,16,24 GiB; every candidate estimated at the three fidelities for the GPU
# this runs on (no --gpu preset: estimated and executed on the same card) and executed
# for real on it. COPE and the wheels the machine lacks come from bench/wheels
# (bench/offline_wheels.sh; installed by bench/gpu_env.sh, as bench/gpu_first_run.sh does).
#
# Writes into OUT_DIR: validate-<model>.json (the report), validate-<model>.txt (the
# table), traces/ (the calibrated traces), profile/ (probe profiles), *.stderr.
# Exits 2 in one line when there is no CUDA device (--dry-run: run anyway, to check the
# script on a CPU-only machine) or no wheels.
set -u -o pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/gpu_env.sh
. "$root/bench/gpu_env.sh"
gpu_env_args "0" "$@"
gpu_env_python gpu_validate
gpu_env_cuda gpu_validate "$dry"
out=$out_arg
mkdir -p "$out/traces" || { echo "gpu_validate: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
private=$(mktemp -d "${TMPDIR:-/tmp}/cope-validate.XXXXXX") || { echo "gpu_validate: no temporary folder" >&2; exit 2; }
trap 'rm -rf "$private"' EXIT
gpu_env_install gpu_validate "$private/site"
cd "$root" || exit 2

export COPE_CACHE_DIR="$out/profile"
mkdir -p "$COPE_CACHE_DIR"
TOKENS=${TOKENS:-16}
shared="$root/../shared/traces"

# Calibrated synthetic traces (popularity from the shared statistics), one per model.
"$py" - "$shared" "$out/traces" "$TOKENS" <<'PY' 2> "$out/traces.stderr"
import json, sys
from pathlib import Path
import numpy as np
from engine.models.catalog import load_model
from engine.traces.synthetic import SyntheticSettings, synthetic_trace
from engine.traces import save_trace

shared, dest, tokens = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])

def find_matrix(node, shape):
    if isinstance(node, list):
        a = None
        try:
            a = np.asarray(node, dtype=float)
        except (ValueError, TypeError):
            pass
        if a is not None and a.shape == shape:
            return a
        items = node
    elif isinstance(node, dict):
        items = node.values()
    else:
        return None
    for v in items:
        hit = find_matrix(v, shape)
        if hit is not None:
            return hit
    return None

for model_id in ("qwen3-30b-a3b", "deepseek-coder-v2-lite-instruct"):
    model = load_model(model_id)
    shape = (model.n_moe_layers, model.n_routed_experts)
    popularity, source = None, "built-in zipf 0.7"
    try:
        if model_id.startswith("qwen3"):
            doc = json.loads((shared / "qwen3-30b-a3b__mbolt-profile/coactivation_qwen3-30b-a3b.json").read_text())
            layers = doc.get("layers") or []
            heat = np.asarray([layer["heat"] for layer in layers], dtype=float) if layers else None
            popularity = heat if heat is not None and heat.shape == shape else find_matrix(doc, shape)
            source = "mbolt heat profile"
        else:
            from engine.traces import read_moe_beyond_csv_dir
            real = read_moe_beyond_csv_dir(shared / "deepseek-v2-lite-chat__moe-beyond/training_data_eamc", max_files=40)
            if real.popularity().shape == shape:
                popularity, source = real.popularity(), "moe-beyond routing counts"
    except Exception as exc:  # noqa: BLE001 - fall back, and say so
        print(f"{model_id}: no calibration ({exc}); built-in synthetic", file=sys.stderr)
    settings = SyntheticSettings(tokens=2 * tokens, seed=0, zipf_exponent=0.7, sequences=2,
                                 popularity=popularity + 1e-9 if popularity is not None else None)
    save_trace(synthetic_trace(model, settings), dest / f"{model_id}.npz")
    print(f"{model_id}: synthetic trace calibrated from {source if popularity is not None else 'nothing'}",
          file=sys.stderr)
PY

echo "gpu_validate: SYNTHETIC routing: $(tr '\n' ';' < "$out/traces.stderr")" >&2
echo "gpu_validate: GPU: $(gpu_env_name)" >&2
gpu_env_warm gpu_validate
start=$(date +%s)
status=0
for model in qwen3-30b-a3b deepseek-coder-v2-lite-instruct; do
  trace="$out/traces/$model.npz"
  [ -f "$trace" ] || trace=synthetic
  # About 4 minutes per model, the rest for start-up and probing.
  args=(validate --model "$model" --trace "$trace" --tokens "$TOKENS" --threads 4,8 --vram-budgets 12,16,24
        --probe-budget 20 --max-seconds 200)
  # From OUT_DIR, so the installed wheel runs, not the checkout.
  (cd "$out" && timeout --kill-after=5 260 "$py" -m cope_tui.cli "${args[@]}" --json) \
    > "$out/validate-$model.json" 2> "$out/validate-$model.stderr"
  rc=$?
  [ $rc -ne 0 ] && { echo "gpu_validate: $model exited $rc (see $out/validate-$model.stderr)" >&2; status=$rc; }
  routing=$(grep "^$model:" "$out/traces.stderr" | tail -n 1)
  { echo "SYNTHETIC routing: ${routing:-$model: built-in synthetic generator}"
    "$py" - "$out/validate-$model.json" <<'PY' 2>/dev/null
import json, sys
from cope_tui.commands.validate import render
print(render(json.load(open(sys.argv[1]))), end="")
PY
  } > "$out/validate-$model.txt"
done
echo "gpu_validate: done in $(( $(date +%s) - start )) s; reports in $out" >&2
cat "$out"/validate-*.txt 2>/dev/null | grep -A6 '^overall' >&2
exit $status
