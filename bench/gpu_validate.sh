#!/usr/bin/env bash
# A complete `cope validate` study on a CUDA machine, in under 9 minutes.
#
#   bench/gpu_validate.sh OUT_DIR
#
# Qwen3-30B-A3B and DeepSeek-Coder-V2-Lite shapes (real expert byte sizes, random
# weights), synthetic routing calibrated from ../shared/traces/ statistics when that
# folder is there (the Qwen3 per-layer heat profile; the DeepSeek-V2-Lite routing
# counts), else the built-in synthetic generator; threads 4,8 and budgets 12,16,24 GiB;
# every candidate estimated at the three fidelities and executed for real on the GPU.
#
# Writes into OUT_DIR: validate-<model>.json (the report), validate-<model>.txt (the
# table), traces/ (the calibrated traces), profile/ (probe profiles), *.stderr.
# Exits 2 with a message when there is no CUDA device.
set -u -o pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
out=$1
mkdir -p "$out/traces" || { echo "gpu_validate: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -x "$root/.venv/bin/python" ]; then py="$root/.venv/bin/python"; else py=$(command -v python3 || command -v python); fi
cd "$root" || exit 2

if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  echo "gpu_validate: no CUDA device here (torch.cuda.is_available() is false or torch is missing);" \
       "this study needs a CUDA machine. Nothing was run." >&2
  exit 2
fi

export COPE_CACHE_DIR="$out/profile"
mkdir -p "$COPE_CACHE_DIR"
TOKENS=${TOKENS:-16}
shared="$root/../shared/traces"

# Calibrated synthetic traces (popularity from the shared statistics), one per model.
"$py" - "$shared" "$out/traces" "$TOKENS" <<'PY' 2> "$out/traces.stderr"
import json, sys
from pathlib import Path
import numpy as np
from engine.catalog import load_model
from engine.synthetic import SyntheticSettings, synthetic_trace
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

start=$(date +%s)
status=0
for model in qwen3-30b-a3b deepseek-coder-v2-lite-instruct; do
  trace="$out/traces/$model.npz"
  [ -f "$trace" ] || trace=synthetic
  # About 4 minutes per model, the rest for start-up and probing.
  args=(validate --model "$model" --trace "$trace" --tokens "$TOKENS" --threads 4,8 --vram-budgets 12,16,24
        --gpu h100-pcie --probe-budget 20 --max-seconds 200)
  timeout 260 "$py" -m cope_tui.cli "${args[@]}" --json > "$out/validate-$model.json" 2> "$out/validate-$model.stderr"
  rc=$?
  [ $rc -ne 0 ] && { echo "gpu_validate: $model exited $rc (see $out/validate-$model.stderr)" >&2; status=$rc; }
  "$py" - "$out/validate-$model.json" > "$out/validate-$model.txt" <<'PY' 2>/dev/null
import json, sys
from cope_tui.commands.validate import render
print(render(json.load(open(sys.argv[1]))), end="")
PY
done
echo "gpu_validate: done in $(( $(date +%s) - start )) s; reports in $out" >&2
cat "$out"/validate-*.txt 2>/dev/null | grep -A6 '^overall' >&2
exit $status
