"""The classes bench/fuzz_files.py gained in issue 47: the network, a full disk, the command
line and odd names. Each class is a list of cases; a case is (name, argv, options), where
options may hold:

- "env": variables added for this case (a Hub endpoint, a fresh HF_HOME, an empty numba cache);
- "fsize": a file-size limit, bytes (RLIMIT_FSIZE: a write past it fails as on a full disk);
- "limit_s": how long before the run is slow (then it may still finish: slow, not hung);
- "after": a follow-up case run right after, on what the first left (its caches): if the
  follow-up fails, the first case poisoned later runs;
- "check": a function of the result dict that returns the problems found (a temp file
  left, a script whose argv is not the path's bytes, a report without the command's verdict);
- "stdout": a file the run's stdout goes to (for its check).

The Hub is tests/hub_server.py's FakeHub on 127.0.0.1 (never the internet), started here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.hub_server import FakeHub  # noqa: E402 - standard library only: nothing heavy in this process

REPO = "org/tiny-moe"
TRACES = "org/traces"
CONFIG = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 256,
          "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
          "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128, "intermediate_size": 512,
          "vocab_size": 1000, "tie_word_embeddings": False}
HUB_DEADLINE_S = "3"  # COPE_HUB_TIMEOUT_S in these runs: a cut-short wait ends well within the case's limit
FAST = ["--gpu", "rtx-4090", "--fidelity", "analytic", "--tokens", "50"]
Case = tuple[str, list[str], dict]


def hub_files(trace_csv: bytes) -> dict[tuple[str, str, str], bytes]:
    return {("model", REPO, "config.json"): json.dumps(CONFIG).encode(),
            ("dataset", TRACES, "data/decode.csv"): trace_csv}


# --- a hostile Hub ------------------------------------------------------------------------

CONFIG_FAULTS = {
    "dropped connection": dict(drop=True, times=None),
    "dropped GET": dict(drop=True, methods=("GET",), times=None),
    "stalled body": dict(stall_s=60, methods=("GET",), times=None),
    "HEAD never answers": dict(delay_s=60, methods=("HEAD",), times=None),
    "trickling body": dict(trickle_s=0.5, methods=("GET",), times=None),
    "redirect loop": dict(redirect_loop=True, times=None),
    "429 Retry-After 3600": dict(status=429, retry_after="3600", times=None),
    "503 Retry-After 3600": dict(status=503, retry_after="3600", times=None),
    "500 always": dict(status=500, times=None),
    "declared 3 GiB": dict(declared_length=3 * 2**30, times=None),
    "truncated body": dict(truncate_to=10, methods=("GET",), times=None),
    "corrupt body": dict(corrupt=True, methods=("GET",), times=None),
}
TRACE_FAULTS = {k: CONFIG_FAULTS[k] for k in ("dropped connection", "HEAD never answers", "redirect loop",
                                               "429 Retry-After 3600", "stalled body", "declared 3 GiB")}


def hostile_hub(tmp: Path, trace_csv: bytes) -> tuple[list[Case], list[FakeHub]]:
    """Each fault on config.json (`advise --model org/tiny-moe`) and on a trace (`trace pull`),
    a file list that never ends, a wrong-shaped agent registry; each followed by a clean run
    on the same Hub cache against a healthy Hub (the poison check)."""
    healthy = FakeHub(hub_files(trace_csv)).start()
    hubs = [healthy]
    cases: list[Case] = []

    def hub_env(hub: FakeHub, home: Path) -> dict[str, str]:
        return {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(home), "HF_HUB_OFFLINE": "0",
                "COPE_HUB_TIMEOUT_S": HUB_DEADLINE_S}

    def add(name: str, argv: list[str], fault_hub: FakeHub, clean: list[str]) -> None:
        home = tmp / f"hf-home-{len(cases)}"
        after = (f"{name}: then a clean run", clean, {"env": hub_env(healthy, home)})
        cases.append((name, argv, {"env": hub_env(fault_hub, home), "after": after}))

    config_run = ["advise", "--model", REPO, *FAST, "--json"]
    pull = ["trace", "pull", f"{TRACES}/data/decode.csv", "--model", "olmoe-1b-7b"]
    for fault, failure in CONFIG_FAULTS.items():
        hub = FakeHub(hub_files(trace_csv)).start()
        hubs.append(hub)
        hub.fail("model", REPO, "config.json", **failure)
        add(f"config.json: {fault}", config_run, hub, config_run)
    for fault, failure in TRACE_FAULTS.items():
        hub = FakeHub(hub_files(trace_csv)).start()
        hubs.append(hub)
        hub.fail("dataset", TRACES, "data/decode.csv", **failure)
        add(f"trace pull: {fault}", pull, hub, pull)
    looping = FakeHub(hub_files(trace_csv)).start()
    looping.tree_loop = True
    hubs.append(looping)
    add("trace pull: a file list that never ends", ["trace", "pull", TRACES, "--model", "olmoe-1b-7b"], looping,
        pull)
    for shape in (b"[]", b'{"standardEnvVars": 7, "harnesses": ["x"]}', b'{"harnesses": {"a": "b"}}', b"not json"):
        hub = FakeHub(hub_files(trace_csv)).start()
        hub.agent_registry = shape
        hubs.append(hub)
        home = tmp / f"hf-home-{len(cases)}"
        home.mkdir()
        (home / ".agent_harnesses.json").write_bytes(shape)  # and cached under HF_HOME, as the client would
        env = hub_env(hub, home)
        cases.append((f"agent registry {shape[:24]!r}", config_run,
                      {"env": {**env, "AI_AGENT": "x"},
                       "after": (f"agent registry {shape[:24]!r}: then offline", config_run,
                                 {"env": {**env, "HF_HUB_OFFLINE": "1", "AI_AGENT": "x"}})}))
    return cases, hubs


def damaged_hub_cache(tmp: Path, trace_csv: bytes, env: dict[str, str]) -> tuple[list[Case], list[FakeHub]]:
    """A config.json cached by a clean run, then damaged (cut short, garbage, empty, a wrong
    shape, a folder, a dangling link), read offline and online; each followed by a clean
    online run on the same cache (the poison check: the damaged copy must not stay)."""
    hub = FakeHub(hub_files(trace_csv)).start()
    run = ["advise", "--model", REPO, *FAST, "--json"]
    cases: list[Case] = []
    for damage in ("cut short", "garbage", "empty", "a list", "a folder", "a dangling link"):
        for offline in ("0", "1"):
            home = tmp / f"hf-cache-{damage.replace(' ', '-')}-{offline}"
            case_env = {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(home), "HF_HUB_OFFLINE": "0",
                        "COPE_HUB_TIMEOUT_S": HUB_DEADLINE_S}
            done = subprocess.run([sys.executable, "-m", "cope_tui.cli", *run], env={**env, **case_env},
                                  capture_output=True, cwd=tmp)
            entries = [p for p in home.rglob("config.json") if "snapshots" in p.parts]
            if done.returncode != 0 or not entries:
                continue  # the clean run failed: no cache to damage (said by the campaign as no case)
            _damage(entries[0], damage)
            after = (f"damaged cache ({damage}): then a clean run", run, {"env": case_env})
            cases.append((f"{damage}, {'offline' if offline == '1' else 'online'}", run,
                          {"env": {**case_env, "HF_HUB_OFFLINE": offline}, "after": after}))
    return cases, [hub]


def _damage(entry: Path, how: str) -> None:
    blob = Path(os.path.realpath(entry))
    if how == "cut short":
        blob.write_bytes(blob.read_bytes()[:20])
    elif how == "garbage":
        blob.write_bytes(b"\x00\xff" * 100)
    elif how == "empty":
        blob.write_bytes(b"")
    elif how == "a list":
        blob.write_text("[1, 2, 3]")
    elif how == "a folder":
        blob.unlink()
        blob.mkdir()
    elif how == "a dangling link":
        blob.unlink()


# --- a full disk ---------------------------------------------------------------------------

def disk_full(tmp: Path) -> list[Case]:
    """advise, replay and export under a file-size limit with numba's cache empty (the first
    run after an install: the compiled loops cannot be saved), and exports whose --out
    cannot be written; after each, no temp file of COPE's may be left."""
    cases: list[Case] = []
    model = ["--model", "qwen3-30b-a3b"]
    runs = {
        "advise": ["advise", *model, *FAST],
        "advise --json": ["advise", *model, *FAST, "--json"],
        "replay": ["replay", *model, "--tokens", "50"],
        "export --out": ["export", *model, *FAST, "--candidate", "all-gpu", "--out", "{dir}/run.sh"],
        "export kt --out": ["export", *model, *FAST, "--runtime", "sglang-kt", "--candidate", "fixed.parallel.uniform",
                            "--out", "{dir}/run.sh"],
        "estimate": ["estimate", *FAST, "--", "llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99"],
    }
    for fsize in (0, 4096, 200_000):
        for name, argv in runs.items():
            folder = tmp / f"disk-{fsize}-{name.replace(' ', '-')}"
            folder.mkdir()
            argv = [a.replace("{dir}", str(folder)) for a in argv]
            env = {"NUMBA_CACHE_DIR": str(folder / "numba"), "COPE_CACHE_DIR": str(folder / "cache")}
            cases.append((f"{name}, file-size limit {fsize} B, numba cache empty", argv,
                          {"env": env, "fsize": fsize, "limit_s": 60.0, "check": _no_temps(folder)}))
    return cases


def _no_temps(folder: Path) -> Callable[[dict], list[str]]:
    def check(result: dict) -> list[str]:
        left = [str(p.relative_to(folder)) for p in folder.rglob("*") if p.name.endswith((".tmp", ".old"))
                or ".tmp." in p.name]
        return [f"temp left: {name}" for name in left]

    return check


# --- the command line ----------------------------------------------------------------------

ESTIMATE = ["estimate", "--gpu", "rtx-4090", "--cpu", "desktop-ddr5", "--", "llama-server",
            "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99"]
REFUSED_FLAGS = [
    ["-ot", "exps=CUDA1"], ["-ot", "exps=cuda0"], ["-ot", "exps=CUDA0,exps=CUDA1"], ["-ts", "-1,2"], ["-ts", "a,b"],
    ["-ts", ",".join(["1"] * 20)], ["-dev", "none"], ["-dev", "CUDA3"], ["-mg", "-1"], ["-sm", "none", "-mg", "-1"],
    ["-sm", "none", "-mg", "1"], ["-sm", "row"], ["-sm", "diagonal"], ["-sm", "tensor"], ["-ts", "1,1"],
    ["-c", "100000000"], ["-ub", "1000000"], ["-ot", "x" * 100_000 + "=CPU"], ["-ts", "1/" * 50_000],
    ["--cpu-moe", "-ot", "exps=CUDA1"], ["-dev", ",".join(["CUDA0"] * 1000)], ["-mg", "99999999999"],
]


def command_lines(tmp: Path) -> list[Case]:
    """Every kind of refusal `cope estimate` gives, as text (where the renderer crashed), and
    the same with CUDA_VISIBLE_DEVICES naming no card, or a UUID, and a two-card plan; a
    report (exit 0) must give the command's verdict: its price or why it has none."""
    cases: list[Case] = []

    def add(name: str, argv: list[str]) -> None:
        out = tmp / f"estimate-{len(cases)}.txt"
        cases.append((name, argv, {"stdout": out, "check": _says_verdict(out)}))

    for flags in REFUSED_FLAGS:
        shown = " ".join(f if len(f) < 40 else f[:20] + f"...({len(f):,} chars)" for f in flags)
        add(f"estimate {shown}", [*ESTIMATE, *flags])
    two = [a if a != "rtx-4090" else "2x rtx-3090" for a in ESTIMATE]
    for flags in (["-ts", "1,1", "-ot", "exps=CUDA2"], ["-ts", "1,1", "-dev", "CUDA5"], ["-ts", "1,1", "-sm", "row"],
                  ["-ts", "3,1"], []):
        add(f"2 cards: estimate {' '.join(flags)}", [*two, *flags])
    add("CUDA_VISIBLE_DEVICES=7", [*ESTIMATE[:6], "CUDA_VISIBLE_DEVICES=7", *ESTIMATE[6:]])
    add("CUDA_VISIBLE_DEVICES=GPU-uuid", [*ESTIMATE[:6], "CUDA_VISIBLE_DEVICES=GPU-1a2b", *ESTIMATE[6:]])
    return cases


def _says_verdict(out: Path) -> Callable[[dict], list[str]]:
    def check(result: dict) -> list[str]:
        if result["rc"] != 0:
            return []  # refused in one line (counted by the campaign)
        text = out.read_text(errors="replace") if out.exists() else ""
        verdict = [line for line in text.splitlines() if line.startswith("Your command")]
        if len(verdict) != 1 or "None" in text:
            return [f"the report does not give the command's verdict once: {verdict[:2]!r}"]
        return []

    return check


# --- odd names -----------------------------------------------------------------------------

FAKE_SERVER = """#!{python}
import json, os, sys
with open(os.environ["ARGV_OUT"], "wb") as f:
    f.write(b"\\0".join(os.fsencode(a) for a in sys.argv[1:]))
"""


def odd_names(tmp: Path, trace_csv: bytes) -> list[Case]:
    """Names that are not UTF-8, hold a newline, quotes, a leading dash, 255 bytes: as the
    model file of an export whose script is then run (with a stand-in llama-server that
    records its argv: the -m argument must be the name's bytes), as --out, and as a trace."""
    cases: list[Case] = []
    bin_dir = tmp / "odd-bin"
    bin_dir.mkdir()
    server = bin_dir / "llama-server"
    server.write_text(FAKE_SERVER.format(python=sys.executable))
    server.chmod(0o755)
    names = {"non-UTF-8": b"m-\xff\xfe.gguf", "newline": b"m-\nx.gguf", "quotes": b"m-'\"`$(x).gguf",
             "leading dash": b"-m.gguf", "255 bytes": b"m" * 250 + b".gguf", "spaces": b"m  x .gguf",
             "Latin-1 e": b"caf\xe9.gguf", "control": b"m-\x01\x1b[31m.gguf"}
    for label, raw in names.items():
        folder = tmp / f"odd-{label.replace(' ', '-')}"
        folder.mkdir()
        model_path = os.fsdecode(os.fsencode(str(folder)) + b"/" + raw)
        out = os.fsdecode(os.fsencode(str(folder)) + b"/run-" + raw[:200] + b".sh")
        argv = ["export", "--model", "qwen3-30b-a3b", *FAST, "--candidate", "all-gpu",
                "--model-path", model_path, "--out", out]
        cases.append((f"export, model and --out {label}", argv,
                      {"check": _script_runs(out, os.fsencode(model_path), bin_dir, folder)}))
        trace = os.fsdecode(os.fsencode(str(folder)) + b"/t-" + raw[:200] + b".csv")
        with open(trace, "wb") as f:
            f.write(trace_csv)
        cases.append((f"--trace {label}", ["advise", "--model", "olmoe-1b-7b", *FAST, "--trace", trace], {}))
        cases.append((f"--json with model {label}", ["export", "--model", "qwen3-30b-a3b", *FAST, "--candidate",
                                                     "all-gpu", "--model-path", model_path, "--json"], {}))
    cases.append(("trace pull a/b/../../c", ["trace", "pull", "a/b/../../c"], {}))
    cases.append(("--trace /proc/self/mem", ["advise", "--model", "qwen3-30b-a3b", *FAST, "--trace",
                                             "/proc/self/mem"], {}))
    cases.append(("validate --threads 4294967296", ["validate", "--threads", "4294967296", *FAST[:2], "--cpu",
                                                    "desktop-ddr5", "--tokens", "8"], {}))
    return cases


def _script_runs(out: str, model_bytes: bytes, bin_dir: Path, folder: Path) -> Callable[[dict], list[str]]:
    """The exported script, run with the stand-in llama-server first on PATH: its -m is the path's bytes."""
    def check(result: dict) -> list[str]:
        if result["rc"] != 0:
            return []  # refused in one line: nothing to run
        record = folder / "argv.bin"
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "ARGV_OUT": str(record)}
        done = subprocess.run(["sh", out], env=env, capture_output=True, timeout=30, cwd=folder)
        if done.returncode != 0 or not record.exists():
            return [f"the script did not run: rc {done.returncode}: {done.stderr[-200:]!r}"]
        argv = record.read_bytes().split(b"\0")
        got = argv[argv.index(b"-m") + 1] if b"-m" in argv else None
        return [] if got == model_bytes else [f"the script's -m is {got!r}, not {model_bytes!r}"]

    return check
