"""Every flag COPE emits for stock llama.cpp, ik_llama.cpp, the MoE expert-cache fork and
SGLang + kt-kernel is one those programs accept, by the flag manifests extracted from
their source at a named commit (assets/runtime_flags/, made by bench/flag_manifest.py;
README.md there says how). ik_llama.cpp, the fork and SGLang cannot be built here, so
their manifests stand in for their `--help`; stock llama.cpp is also run for real
(tests/test_real_llamacpp.py).

For a representative set of catalog models, every candidate COPE ranks and several
memory plans, each export's argv is walked as the program's parser walks it: every
option must be in the manifest of that binary, an option that takes a value must have
one (and one of its `choices` where the source lists them), a switch must not be
followed by a stray value, and every environment variable set must be one the source
reads. Commands are checked as COPE spells them with no build detected (for the shipped
manifest) and spelled for a build read from that manifest.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from engine.core.errors import CopeInputError
from engine.hardware.memory import MemoryPlan
from engine.models.catalog import get_model
from engine.replays.policy import Eviction, policy_matrix, standalone_candidates
from engine.runtimes import runtime_named
from engine.runtimes.export import ExportPlan, export_candidate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.flag_manifest import arg_cpp_options, if_arg_options, program_entry, sglang_options  # noqa: E402

MANIFESTS = Path(__file__).resolve().parent.parent / "assets" / "runtime_flags"
FILES = {"llama.cpp": "llama.cpp.json", "ik_llama.cpp": "ik_llama.cpp.json", "fork": "fork.json",
         "sglang-kt": "sglang-kt.json"}
# qwen3.5-35b-a3b (qwen35moe) and deepseek-v2-lite-chat (deepseek2) are architectures the
# fork's cache is wired for; qwen3moe and gpt-oss are not.
MODELS = ("qwen3-30b-a3b", "deepseek-v2-lite-chat", "gpt-oss-20b", "qwen3.5-35b-a3b")
PLANS = ("partial", "fits", "zero")  # some experts fit, all fit, only the staging room
SPELLINGS = ("shipped", "this-build")
SGLANG_LAUNCH = ("python", "-m", "sglang.launch_server")
SGLANG_PROGRAM = "sglang.launch_server"
MODEL_PATH = "/models/My Model-Q4_K_M.gguf"
EB = 1 << 20
CARD = 24 << 30
HEX40 = re.compile(r"[0-9a-f]{40}")


def load(runtime: str) -> dict:
    return json.loads((MANIFESTS / FILES[runtime]).read_text(encoding="utf-8"))


# --- the plans exported -------------------------------------------------------------------

def ranked_candidates(all_gpu_fits: bool) -> list:
    """What COPE ranks (engine/advice/advise.py): the policy matrix with and without next-layer
    predictions, every eviction, and the standalone candidates."""
    seen = {}
    for prefetch in (False, True):
        for c in policy_matrix(prefetch_available=prefetch, evictions=tuple(Eviction)):
            seen.setdefault(c.id, c)
    for c in standalone_candidates(all_gpu_fits=all_gpu_fits):
        seen.setdefault(c.id, c)
    return list(seen.values())


def plan_for(model, kind: str) -> tuple[ExportPlan, list]:
    """A plan with a chosen number of expert slots, a skewed routing popularity and an
    estimate for every candidate (so the nearest-runnable fallback has choices)."""
    total = model.n_experts_total
    slots = {"partial": int(total * 0.6), "fits": total + model.top_k, "zero": model.top_k}[kind]
    # A 24 GiB card whose runtime reserve leaves exactly `slots` 1 MiB slots to llama.cpp, so
    # that SGLang's own arithmetic (the checkpoint's BF16 experts) has a real card to size.
    memory = MemoryPlan(
        vram_budget_bytes=CARD, non_expert_bytes=0, kv_cache_bytes=0, runtime_reserve_bytes=CARD - slots * EB,
        safety_margin_bytes=0, staging_bytes=model.top_k * EB, expert_bytes=EB,
        n_experts_total=total, n_routed_experts_per_layer=model.n_routed_experts, context_tokens=8192)
    L, E = model.n_moe_layers, model.n_routed_experts
    popularity = ((np.arange(E)[None, :] * 37 + np.arange(L)[:, None] * 11) % E + 1).astype(np.int64)
    candidates = ranked_candidates(memory.all_gpu_fits)
    tpots = tuple((c.id, 0.010 + 0.0005 * i) for i, c in enumerate(candidates))
    return ExportPlan(memory, popularity, tpots, numa_nodes=2, cpu_amx=True, cpu_amx_note="a test CPU with AMX"), \
        candidates


# --- walking an argv as the program's parser does ---------------------------------------------

def program_of(runtime: str, binary: str, argv: tuple[str, ...]) -> tuple[str, list[str]]:
    """The manifest program that parses `argv` and the words it sees. SGLang runs as
    `python -m sglang.launch_server`: python's own `-m` is not SGLang's."""
    if runtime == "sglang-kt":
        assert tuple(argv[:3]) == SGLANG_LAUNCH, f"SGLang launch should start with {SGLANG_LAUNCH}: {argv[:3]}"
        return SGLANG_PROGRAM, list(argv[3:])
    assert argv[0] == binary, f"argv[0] {argv[0]!r} is not the binary {binary!r}"
    return binary, list(argv[1:])


def argv_problems(words: list[str], program: dict) -> list[str]:
    """What the program's parser would refuse in `words` (an argv without the program)."""
    options, valued = set(program["options"]), set(program["valued"])
    choices = program.get("choices", {})
    problems = []
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            problems.append(f"stray argument {word!r} (after a switch or no option)")
            i += 1
            continue
        name = word.split("=", 1)[0] if word.startswith("--") else word
        if name not in options:
            problems.append(f"{name} not accepted" + (" (listed as removed)" if name in program["rejected"] else ""))
            i += 1
            continue
        if name in valued and "=" not in word:
            if i + 1 >= len(words):
                problems.append(f"{name} takes a value, none given")
                break
            value = words[i + 1]
            allowed = choices.get(name)
            if isinstance(allowed, list) and value not in allowed:
                problems.append(f"{name} {value}: not one of {allowed}")
            i += 2
            continue
        i += 1
    return problems


def export_problems(runtime: str, binary: str, model, spelling: str) -> tuple[dict[str, list[str]], int, list[str]]:
    """Every problem (with the exports showing it), how many exports were checked, and the
    exports COPE refused to build (a CopeInputError), over all plans and candidates. An
    export that crashes counts as a problem."""
    doc = load(runtime)
    builds = None
    if spelling == "this-build":
        from engine.llamacpp.builds import build_from_manifest

        builds = {runtime: build_from_manifest(doc)}
    seen: dict[str, list[str]] = defaultdict(list)
    checked, refused = 0, []
    for kind in PLANS:
        plan, candidates = plan_for(model, kind)
        for candidate in candidates:
            case = f"{kind}/{candidate.id}"
            try:
                x = export_candidate(candidate, model, plan, runtime=runtime, binary=binary, model_path=MODEL_PATH,
                                     context=8192, threads=8, side_dir="cope out", builds=builds)
            except CopeInputError as exc:
                refused.append(f"{case}: {exc}")
                continue
            except Exception as exc:  # a crash is a finding too, listed with the flag problems
                seen[f"export raised {type(exc).__name__}: {exc}"].append(case)
                continue
            checked += 1
            name, words = program_of(runtime, binary, x.argv)
            problems = argv_problems(words, doc["programs"][name])
            problems += [f"environment variable {k} is not read by the source" for k, _ in x.env
                         if k not in doc["env"]]
            for p in problems:
                seen[p].append(f"{case} -> {x.exported_id}: {x.display()}")
    return seen, checked, refused


def describe(problems: dict[str, list[str]]) -> str:
    lines = []
    for problem, cases in sorted(problems.items()):
        lines.append(f"- {problem}: {len(cases)} exports, e.g. {cases[0]}")
    return "\n".join(lines)


CASES = [(rt, b) for rt in FILES for b in runtime_named(rt).info.binaries]


@pytest.fixture
def runnable_asked_once(monkeypatch):
    """For each candidate the runtime refuses, nearest_runnable asks of every other one
    whether it runs here, placing it on the plan: within one sweep the same questions of
    the same plan each time, nine in ten of the sweep's time. Their answers depend on
    nothing but the arguments (frozen plans, no state), so the sweep asks each one once and
    exports exactly what it did before."""
    from engine.runtimes import export

    real = export._runnable_here
    answers: dict = {}

    def asked_once(runtime, candidate, model, plan, binary):  # type: ignore[no-untyped-def]
        key = (id(runtime), candidate, id(model), id(plan), binary)
        if key not in answers:  # the objects are kept with the answer, so no id is reused
            answers[key] = (real(runtime, candidate, model, plan, binary), runtime, model, plan)
        return answers[key][0]

    monkeypatch.setattr(export, "_runnable_here", asked_once)


@pytest.mark.slow
@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("model_id", MODELS)
@pytest.mark.parametrize("runtime,binary", CASES, ids=[f"{rt}-{b}" for rt, b in CASES])
def test_every_flag_cope_emits_is_in_the_manifest(runtime, binary, model_id, spelling, runnable_asked_once):
    model = get_model(model_id)
    problems, checked, refused = export_problems(runtime, binary, model, spelling)
    n_candidates = sum(len(plan_for(model, k)[1]) for k in PLANS)
    # Refusals are COPE saying nothing runs (not a flag question), but never most of them:
    # the check must have looked at real commands.
    crashed = sum(len(v) for k, v in problems.items() if k.startswith("export raised"))
    assert checked + len(refused) + crashed == n_candidates
    if runtime == "sglang-kt" and model.arch == "gpt-oss":
        # kt-kernel has no method for gpt-oss (engine/runtimes/kt_method.py), and where every MXFP4
        # expert fits, plain SGLang needs none: nothing is exported, so there is no flag to check.
        assert checked == 0 and all("nothing COPE ranked runs on sglang-kt here" in r for r in refused), refused[:3]
        assert any("kt-kernel has no method for gpt-oss" in r for r in refused)
        return
    assert checked >= n_candidates // 2, "most exports were refused:\n" + "\n".join(refused[:5])
    assert not problems, (f"{runtime} {binary} ({model_id}, {spelling} spelling) emits what "
                          f"{load(runtime)['repository']} at {load(runtime)['commit'][:12]} does not take:\n"
                          + describe(problems))


# --- the manifests themselves ---------------------------------------------------------------

@pytest.mark.parametrize("runtime", FILES)
def test_manifests_name_their_source(runtime):
    doc = load(runtime)
    assert doc["runtime"] == runtime
    assert HEX40.fullmatch(doc["commit"]), doc["commit"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", doc["date"]), doc["date"]
    assert doc["repository"].startswith("https://github.com/") and (doc["branch"] or doc["obtained"])
    assert doc["licence"] in {"MIT", "Apache-2.0"} and doc["sources"]
    assert not any(s.startswith("/") for s in doc["sources"])  # paths inside the repository
    assert isinstance(doc["env"], list) and doc["env"] == sorted(doc["env"])
    for name, program in doc["programs"].items():
        assert set(program["valued"]) <= set(program["options"]), name
        assert not set(program["rejected"]) & set(program["options"]), name


@pytest.mark.parametrize("runtime", FILES)
def test_manifests_cover_every_binary_the_runtime_declares(runtime):
    programs = load(runtime)["programs"]
    for binary in runtime_named(runtime).info.binaries:
        assert (SGLANG_PROGRAM if runtime == "sglang-kt" else binary) in programs


def test_the_extraction_found_what_each_parser_is_known_to_take():
    """A few options read by hand at the commits, so an extraction that silently found
    nothing (or everything) fails here, whatever COPE emits."""
    ik, fork, kt = load("ik_llama.cpp"), load("fork"), load("sglang-kt")
    ik_server = ik["programs"]["llama-server"]
    assert {"-ot", "-cmoe", "--cpu-moe", "-ncmoe", "--no-mmap", "--fit", "-cuda"} <= set(ik_server["options"])
    assert "--fit" not in ik_server["valued"] and "-fa" in ik_server["valued"]  # ik: --fit is a switch
    assert "-lm" not in ik_server["options"] and "--moe-cache-slots" not in ik_server["options"]
    assert {"-mmp", "-ot", "--n-cpu-moe", "-fa"} <= set(ik["programs"]["llama-bench"]["options"])
    assert "-ncmoe" not in ik["programs"]["llama-bench"]["options"]
    fork_server = fork["programs"]["llama-server"]
    assert {"--moe-cache-profile", "--moe-cache-slots", "-lm", "--fit", "-fa", "-ncmoe"} <= set(fork_server["valued"])
    assert "--no-mmap" in fork_server["options"] and "--no-mmap" not in fork_server["valued"]
    assert "--no-mmap" in fork_server["deprecated"]  # the fork's base still takes it, with a warning
    assert "--moe-cache-slots" not in fork["programs"]["llama-bench"]["options"]
    assert {"GGML_MOE_CACHE_PROFILE", "GGML_MOE_CACHE_SLOTS", "GGML_OP_OFFLOAD_MIN_BATCH"} <= set(fork["env"])
    assert "GGML_OP_OFFLOAD_MIN_BATCH" not in ik["env"]
    launch = kt["programs"][SGLANG_PROGRAM]
    assert launch["choices"]["--kt-expert-placement-strategy"] == ["frequency", "front-loading", "uniform", "random"]
    kt_valued = {"--kt-method", "--kt-weight-path", "--kt-num-gpu-experts", "--init-expert-location"}
    assert kt_valued <= set(launch["valued"])
    assert "--kt-enable-dynamic-expert-update" in launch["options"] and "--help" in launch["options"]


# --- the extractor on small sources -----------------------------------------------------------

ARG_CPP = r'''
static std::initializer_list<enum llama_example> mmproj_examples = { LLAMA_EXAMPLE_MTMD, LLAMA_EXAMPLE_SERVER };
    add_opt(common_arg({"-x", "--ex"}, "N", "help, with a comma", [](common_params & p, int v) { p.x = v; }
    ).set_env("LLAMA_ARG_X"));
    add_opt(common_arg({"--mmap"}, {"--no-mmap"}, "DEPRECATED: mapping", [](common_params & p, bool v) {}));
    add_opt(common_arg({"-s"}, "switch", [](common_params & p) {}).set_examples({LLAMA_EXAMPLE_SERVER}));
    add_opt(common_arg({"-mm"}, "F", "mmproj", [](common_params & p, const std::string & v) {}
    ).set_examples(mmproj_examples));
    add_opt(common_arg({"--old"}, "N", "gone", [](common_params &, int) { arg_removed("use --new"); }));
    // add_opt(common_arg({"--commented"}, "N", "not an option", [](common_params &, int) {}));
'''


def test_arg_cpp_reads_names_values_programs_and_removals():
    options, unparsed = arg_cpp_options(ARG_CPP)
    assert not unparsed
    server = program_entry(options, "LLAMA_EXAMPLE_SERVER", source="arg.cpp")
    cli = program_entry(options, "LLAMA_EXAMPLE_CLI", source="arg.cpp")
    assert server["options"] == sorted(["-x", "--ex", "--mmap", "--no-mmap", "-s", "-mm"])
    assert cli["options"] == sorted(["-x", "--ex", "--mmap", "--no-mmap"])
    assert server["valued"] == sorted(["-x", "--ex", "-mm"]) and server["rejected"] == ["--old"]
    assert server["deprecated"] == ["--mmap", "--no-mmap"]
    assert [o.env for o in options if o.env] == ["LLAMA_ARG_X"]


PARSER_CPP = r'''
#define CHECK_ARG if (++i >= argc) { invalid_param = true; return true; }
bool gpt_params_find_arg(int argc, char ** argv, const std::string & arg, gpt_params & params, int & i,
                         bool & invalid_param) {
    if (arg == "-t" || arg == "--threads") {
        CHECK_ARG
        params.n_threads = std::stoi(argv[i]);
        return true;
    }
    if (arg == "--fit") {
        params.fit = true;
        return true;
    }
    if (arg == "--list") {
        for (size_t j = 0; j < 3; ++j) { }
        return true;
    }
    if (arg == "-mtp") {
        throw common_speculative_legacy_option_error(arg, "--spec-type mtp");
    }
    return false;
}
'''


def test_if_arg_parsers_read_names_values_and_removals():
    entry = program_entry(if_arg_options(PARSER_CPP, "gpt_params_find_arg"), source="common.cpp")
    assert entry["options"] == sorted(["-t", "--threads", "--fit", "--list"])
    assert entry["valued"] == sorted(["-t", "--threads"]) and entry["rejected"] == ["-mtp"]


SERVER_ARGS_PY = '''
import argparse
STRATEGIES = ["frequency", "uniform"]

class DeprecatedAction(argparse.Action):
    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

class ServerArgs:
    mem_fraction_static: float = None
    kt_threadpool_count: int = 2

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--mem-fraction-static", type=float, default=ServerArgs.mem_fraction_static)
        parser.add_argument("--kt-threadpool-count", type=int, default=ServerArgs.kt_threadpool_count)
        parser.add_argument("--strategy", choices=STRATEGIES)
        parser.add_argument("--flag", action="store_true")
        parser.add_argument("--old", action=DeprecatedAction)
        parser.add_argument(f"--computed-{1}")
'''


def test_sglang_add_cli_args_is_read_without_importing_it():
    options, unparsed = sglang_options(SERVER_ARGS_PY)
    entry = program_entry(options, source="server_args.py")
    assert entry["options"] == sorted(["-h", "--help", "--mem-fraction-static", "--kt-threadpool-count", "--strategy",
                                       "--flag", "--old"])
    assert entry["valued"] == sorted(["--mem-fraction-static", "--kt-threadpool-count", "--strategy"])
    assert entry["choices"] == {"--strategy": ["frequency", "uniform"]}
    assert entry["defaults"] == {"--kt-threadpool-count": 2} and entry["deprecated"] == ["--old"]
    assert len(unparsed) == 1  # the f-string name is reported, not guessed
