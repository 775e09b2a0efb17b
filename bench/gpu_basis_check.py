"""Did every GPU figure of a run come from this GPU? Reads what a CUDA check wrote:
`detect.json` (`cope detect --json`), `advise.json` (`cope advise --json`) and the probe
profiles under the cache folder, prints what each GPU figure rests on, and exits 3 when
any of them came from a preset (torch could not use the GPU, or a probe fell back).

    python bench/gpu_basis_check.py OUT_DIR [CACHE_DIR]      (CACHE_DIR default OUT_DIR/profile)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GPU_OPERATORS = {"gpu_experts", "h2d_copy", "sync", "shared_layer", "token_head"}


def read_json(path: Path):  # type: ignore[no-untyped-def]
    """The document, or None when the step that writes it did not finish."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def problems(out: Path, cache: Path) -> list[str]:
    bad: list[str] = []
    detect = read_json(out / "detect.json")
    if detect is None:
        return ["no detect.json: `cope detect` did not finish"]
    gpu = detect["platform"]["gpu"]
    print("detect:", gpu.get("name"), {k: (v["value"], v["basis"]) for k, v in gpu.items()
                                       if isinstance(v, dict) and "basis" in v and k.endswith("_per_s")})
    bad += [f"detect: {w}" for w in detect.get("warnings", [])]
    bad += [f"detect: gpu.{k} has basis {v['basis']!r}" for k in ("mem_bandwidth_bytes_per_s", "h2d_bytes_per_s")
            if (v := gpu.get(k)) and v.get("basis") != "measured"]
    advise = read_json(out / "advise.json")
    if advise is not None:
        cm = advise.get("cost_model", {})
        print("cost model:", {k: cm.get(k) for k in (
            "fidelity", "states_measured", "states_estimated", "states_partly_preset",
            "schedule_measurements_by_method", "states_with_prefetch_measured", "measured_count", "preset_count")})
    else:
        bad.append("no advise.json: `cope advise --fidelity combined` did not finish")
    profiles = sorted(cache.rglob("*.json")) if cache.exists() else []
    if not profiles:
        bad.append("no probe profile was written")
    for p in profiles:
        doc = read_json(p)
        if not isinstance(doc, dict) or "measurements" not in doc:
            continue
        ms = doc["measurements"]
        shared = [m for m in ms if m["operator"] in ("shared_layer", "token_head")]
        print("profile", p.name, "measurements:", len(ms),
              "shared/head:", [(m["operator"], m["median_s"], m["basis"]) for m in shared])
        print("kernels:", doc["provenance"].get("kernel_stand_ins"))
        for m in ms:
            if (m["operator"] in GPU_OPERATORS or m["operator"] == "schedule") and m["basis"] != "measured":
                bad.append(f"profile {p.name}: {m['operator']} {m['key']} has basis {m['basis']!r}")
    return bad


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    cache = Path(sys.argv[2]) if len(sys.argv) > 2 else out / "profile"
    bad = problems(out, cache)
    for line in bad[:20]:
        print("NOT MEASURED ON THIS GPU:", line)
    if bad:
        print(f"{len(bad)} GPU figure(s) not measured on this GPU")
        return 3
    print("every GPU figure was measured on this GPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
