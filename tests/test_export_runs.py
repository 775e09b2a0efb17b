"""Every printed command runs as pasted, for every runtime it names (issue 46).

Every candidate COPE ranks is exported for every runtime of the registry and every program
it declares, over the cases a person plans for: one NVIDIA card, two cards, an AMD card on
ROCm and on Vulkan, a budget that leaves the experts almost all on the CPU, the CPU alone
(`--gpu none`), staging (a budget with only the staging room) and a CPU with AMX. Each
printed argv is walked as that runtime's program parses it, by its flag manifest
(assets/runtime_flags/, tests/test_flag_manifests.py `argv_problems`), and each -ot value is
split as that program splits it:

- stock llama.cpp's llama-bench (tools/llama-bench/llama-bench.cpp at 0c1e570): ',' between
  test configurations, ';' between the overrides of one;
- ik_llama.cpp's llama-bench (examples/llama-bench/llama-bench.cpp at 8337e4c,
  parse_buft_overrides) and every llama-server/llama-cli: ',' between overrides, every -ot
  adding to the one configuration;

every override `pattern=buffer` naming a buffer the plan's backend has (CPU, or the backend's
name and a card index). What is printed runs: the registry says the runtime and program run
the candidate the command runs (backend, card count, program), and a refusal is one line
that says why and, where another runtime runs it, the nearest command that does.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from cope_tui.options import PlanChoices
from cope_tui.service.advice import plan
from cope_tui.service.cpu_only import plan_cpu_only
from engine.core.errors import CopeInputError
from engine.models.catalog import get_model
from engine.replays.policy import parse_candidate_id
from engine.runtimes import REGISTRY, runtime_named
from engine.runtimes.export import export_candidate, export_for, plan_from_recommendation, run_refusal
from tests.test_flag_manifests import MODEL_PATH, argv_problems, load, plan_for, program_of

ONE = PlanChoices(model="qwen3-30b-a3b", gpu="rtx-4090", cpu="desktop-ddr5", vram_budget_gib=12, tokens=40,
                  context=8192, threads=8)
CASES = {
    "one-card": ONE,
    "two-cards": PlanChoices(model="qwen3-235b-a22b", gpu="2x rtx-3090", cpu="epyc-9355", tokens=40, context=8192,
                             threads=32),
    "rocm": replace(ONE, gpu="rx-7900-xtx"),
    "vulkan": replace(ONE, gpu="rx-7900-xtx@vulkan"),
    "experts-on-cpu": replace(ONE, vram_budget_gib=2.7),  # 18 slots: every layer's experts but a few on the CPU
    # deepseek2's expert width (1408) is no multiple of 256: kt-kernel's AMX methods on an AMX Xeon
    "amx": replace(ONE, model="deepseek-v2-lite-chat", cpu="xeon-platinum-8480plus", vram_budget_gib=8),
}
RUNS = [(rt.info.name, b) for rt in REGISTRY for b in rt.info.binaries]


def overrides_as_parsed(runtime: str, binary: str, argv: tuple[str, ...]) -> list[list[str]]:
    """The test configurations of -ot overrides the program builds from `argv`, each a list
    of `pattern=buffer` (one configuration for llama-server and llama-cli)."""
    values = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word in ("-ot", "--override-tensor")]
    if binary == "llama-bench" and runtime != "ik_llama.cpp":
        return [config.split(";") for value in values for config in value.split(",")]
    return [[o for value in values for o in value.split(",")]] if values else []


def buffers_of(backend: str, cards: int) -> set[str]:
    return {"CPU", *(f"{backend}{i}" for i in range(cards))}


def printed_problems(runtime: str, binary: str, export, rec) -> list[str]:  # type: ignore[no-untyped-def]
    """What the program would refuse or misread in the printed command."""
    doc = load(runtime)
    name, words = program_of(runtime, binary, export.argv)
    problems = argv_problems(words, doc["programs"][name])
    problems += [f"environment variable {k} is not read by {runtime}" for k, _ in export.env if k not in doc["env"]]
    gpu = rec.request.platform.gpu
    allowed = buffers_of(gpu.backend, max(1, len(gpu.cards)))
    configs = overrides_as_parsed(runtime, binary, export.argv)
    if len(configs) > 1:
        problems.append(f"-ot read as {len(configs)} test configurations")
    for override in (o for config in configs for o in config):
        pattern, _, buffer = override.rpartition("=")
        if not pattern or buffer not in allowed:
            problems.append(f"-ot override {override!r}: no buffer of {sorted(allowed)}")
    if "-dev" in export.argv and export.argv[export.argv.index("-dev") + 1] != f"{gpu.backend}0":
        problems.append(f"-dev does not name {gpu.backend}0")
    return problems


@pytest.fixture(scope="module")
def advised():  # type: ignore[no-untyped-def]
    return {case: plan(choices).rec for case, choices in CASES.items()}


@pytest.mark.parametrize("case", CASES)
def test_every_printed_command_is_one_its_runtime_and_program_run(case, advised):
    rec = advised[case]
    model, export_plan = rec.request.model, plan_from_recommendation(rec)
    printed, refused, found = 0, [], []
    for runtime, binary in RUNS:
        rt = runtime_named(runtime)
        kw = {} if runtime == "sglang-kt" else {"binary": binary}
        for estimate in rec.estimates:
            where = f"{case} {runtime} {binary} {estimate.candidate.id}"
            try:
                x = export_for(rec, estimate, runtime=runtime, model_path=MODEL_PATH, side_dir="/tmp/cope out", **kw)
            except CopeInputError as exc:
                refused.append((where, str(exc)))
                continue
            printed += 1
            why = run_refusal(rt, parse_candidate_id(x.exported_id), model, export_plan, binary)
            if why is not None:
                found.append(f"{where} -> {x.exported_id}: printed though refused ({why}): {x.display()}")
            found += [f"{where} -> {x.exported_id}: {p}: {x.display()}" for p in printed_problems(runtime, binary, x, rec)]
    assert not found, f"{len(found)} printed commands would not run as printed:\n" + "\n".join(found[:8])
    assert printed > len(rec.estimates) * 2, "most exports were refused: " + "; ".join(r for _, r in refused[:3])
    for where, message in refused:  # one line: why, and the nearest command that does run
        assert "\n" not in message and message.startswith("nothing COPE ranked runs on "), (where, message)
        named = message.split("nearest that runs: cope export --candidate ")
        assert len(named) == 2, (where, message)
        candidate, flags = named[1].split()[0], named[1].split(" (")[0].split()
        runtime = flags[flags.index("--runtime") + 1]
        binary = flags[flags.index("--binary") + 1] if "--binary" in flags else None
        kw = {} if binary is None else {"binary": binary}
        assert export_for(rec, rec.estimate_of(candidate), runtime=runtime, model_path=MODEL_PATH, **kw).nearest_id \
            is None, (where, message)


@pytest.mark.parametrize("case", ["rocm", "vulkan", "two-cards"])
def test_ik_and_the_fork_print_nothing_where_they_are_refused(case, advised):
    """Stock only and CUDA only: ik_llama.cpp and the fork print no command at all (the
    fallback is asked too), and the refusal names the nearest command that runs."""
    rec = advised[case]
    for runtime in ("ik_llama.cpp", "fork"):
        for binary in runtime_named(runtime).info.binaries:
            with pytest.raises(CopeInputError) as caught:
                export_for(rec, rec.best, runtime=runtime, binary=binary, model_path=MODEL_PATH)
            message = str(caught.value)
            assert message.startswith(f"nothing COPE ranked runs on {runtime} {binary} here ({rec.best.candidate.id}: ")
            assert "nearest that runs: cope export --candidate " in message and "--runtime llama.cpp" in message, message
            # the named command is one stock llama.cpp prints
            named = message.split("nearest that runs: cope export --candidate ")[1].split()[0]
            stock = export_for(rec, rec.estimate_of(named), runtime="llama.cpp", binary=binary, model_path=MODEL_PATH)
            assert stock.exported_id == named and stock.nearest_id is None


def test_staged_and_every_synthetic_plan_print_only_what_runs():
    """The synthetic plans of tests/test_flag_manifests.py (some experts fit, all fit, only the
    staging room: stage candidates are STAGED) for a model of each kind the fork and kt take:
    what is printed is what the registry runs, with ik's llama-bench staging by -cuda."""
    staged_bench = []
    for model_id in ("qwen3-30b-a3b", "deepseek-v2-lite-chat"):
        model = get_model(model_id)
        for kind in ("partial", "fits", "zero"):
            export_plan, candidates = plan_for(model, kind)
            for runtime, binary in RUNS:
                rt = runtime_named(runtime)
                kw = {} if runtime == "sglang-kt" else {"binary": binary}
                for candidate in candidates:
                    try:
                        x = export_candidate(candidate, model, export_plan, runtime=runtime, model_path=MODEL_PATH,
                                             context=8192, threads=8, side_dir="/tmp/out", **kw)
                    except CopeInputError:
                        continue
                    assert run_refusal(rt, parse_candidate_id(x.exported_id), model, export_plan, binary) is None
                    name, words = program_of(runtime, binary, x.argv)
                    assert not argv_problems(words, load(runtime)["programs"][name]), x.display()
                    if runtime == "ik_llama.cpp" and binary == "llama-bench" and candidate.id == "fixed.stage.uniform" \
                            and kind == "zero":
                        staged_bench.append(x)
    # at zero slots the stage candidates stage every routed expert: ik's bench says so with -cuda
    assert staged_bench and all("offload-batch-size=0" in x.argv for x in staged_bench), \
        [x.display() for x in staged_bench]


def test_ik_llama_bench_joins_overrides_as_ik_splits_them():
    """Two cards' per-card overrides in one llama-bench -ot: stock joins them with ';' (its
    ',' separates test configurations), ik_llama.cpp with ',' (its parser splits on ',')."""
    from engine.runtimes.llamacpp import BENCH_OT_JOIN, IK, STOCK

    assert STOCK.bench_overrides_join == BENCH_OT_JOIN["llama.cpp"] == ";"
    assert IK.bench_overrides_join == BENCH_OT_JOIN["ik_llama.cpp"] == ","
    # ik's llama-bench splits like its server (one -ot of two overrides is two overrides)
    argv = ("llama-bench", "-ot", r"blk\.(1|2)\.ffn=CPU,blk\.(3)\.ffn=CUDA1")
    assert overrides_as_parsed("ik_llama.cpp", "llama-bench", argv) == [[r"blk\.(1|2)\.ffn=CPU", r"blk\.(3)\.ffn=CUDA1"]]
    assert len(overrides_as_parsed("llama.cpp", "llama-bench", argv)) == 2  # stock: two test configurations


def test_the_cpu_only_command_is_one_stock_llama_server_takes():
    cpu = plan_cpu_only(replace(ONE, gpu="none", vram_budget_gib=None))
    name, words = program_of("llama.cpp", "llama-server", cpu.argv)
    assert not argv_problems(words, load("llama.cpp")["programs"][name]), cpu.argv
    assert cpu.argv[cpu.argv.index("-ngl") + 1] == "0"


# --- the files a printed command names are there (issue 46, part 2) ---------------------------

FORK_ASK = ["export", "--runtime", "fork", "--candidate", "fixed.parallel.uniform", "--model", "deepseek-v2-lite-chat",
            "--gpu", "rtx-4090", "--vram-budget", "8", "--cpu", "desktop-ddr5", "--threads", "8", "--tokens", "40"]


def test_the_fork_command_printed_without_out_names_a_profile_that_is_there(capsys):
    """Without --out the fork's profile CSV is written to the cache folder's exports/, by the
    absolute path the printed command names: the fork starts with its cache on."""
    from collections import Counter
    from pathlib import Path
    import shlex

    from cope_tui.cli import EXIT_OK, main
    from engine.core.cache_dirs import exports_dir

    assert main(FORK_ASK) == EXIT_OK
    out, err = capsys.readouterr()
    argv = shlex.split(out.splitlines()[-1])
    profile = Path(argv[argv.index("--moe-cache-profile") + 1])
    slots = int(argv[argv.index("--moe-cache-slots") + 1])
    assert profile.is_absolute() and profile.parent == exports_dir().absolute() and profile.is_file()
    assert f"cope: wrote {profile}" in err and f"# artefact {profile.name}: written to {profile}" in out
    rows = [[int(x) for x in line.split(",")] for line in profile.read_text().splitlines()]
    model = get_model("deepseek-v2-lite-chat")
    assert rows and all(r[0] >= 0 and r[1] in model.moe_blocks and len(r) == 2 + model.top_k for r in rows)
    # every MoE block has `slots` experts the fork keeps (its most frequent decode ids)
    for block in model.moe_blocks:
        counts = Counter(e for r in rows if r[1] == block for e in r[2:])
        top = sorted(counts.values(), reverse=True)
        assert len(top) >= slots and (len(top) == slots or top[slots - 1] > top[slots]), block
    # no GGUF was named: -m is a placeholder, said in the text and the JSON
    assert f"# placeholder {model.id}.gguf: put the path of the model's GGUF file" in out
    assert main([*FORK_ASK, "--json"]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert [p["word"] for p in doc["placeholders"]] == [f"{model.id}.gguf"] and doc["written"] == [str(profile)]


def test_a_named_gguf_is_no_placeholder_and_a_converted_folder_is(capsys):
    from cope_tui.cli import EXIT_OK, main

    assert main([*FORK_ASK, "--model-path", "/models/ds.gguf", "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["placeholders"] == []
    kt = ["export", "--runtime", "sglang-kt", "--candidate", "fixed.parallel.nonuniform", "--model",
          "deepseek-v2-lite-chat", "--gpu", "rtx-4090", "--vram-budget", "8", "--cpu", "xeon-platinum-8480plus",
          "--threads", "8", "--tokens", "40", "--json"]
    assert main(kt) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    (folder,) = doc["placeholders"]
    argv = doc["argv"]
    assert folder["word"] == argv[argv.index("--kt-weight-path") + 1] and "convert_cpu_weights.py" in folder["put"]
    # one count of thread pools: the conversion's --threadpool-count is the launch's --kt-threadpool-count
    pools = argv[argv.index("--kt-threadpool-count") + 1]
    assert f"--threadpool-count {pools}" in folder["put"]
    assert os.path.isfile(argv[argv.index("--init-expert-location") + 1])


def test_an_unwritable_exports_folder_prints_no_command(capsys, monkeypatch, tmp_path):
    from cope_tui.cli import EXIT_OK, main

    blocked = tmp_path / "cache"
    blocked.write_text("a file where the cache folder should be")
    monkeypatch.setenv("COPE_CACHE_DIR", str(blocked))
    assert main(FORK_ASK) != EXIT_OK
    out, err = capsys.readouterr()
    assert "--moe-cache-profile" not in out and "cope: error:" in err and len(err.strip().splitlines()) <= 2


# --- the program a command names is the runtime's own (issue 46, part 5) ------------------------

def _found_here(runtime: str, folder: str, programs=("llama-server",)):  # type: ignore[no-untyped-def]
    """A build of `runtime` found in `folder` whose programs' --help listed what its manifest lists."""
    from engine.llamacpp.builds import LlamaBuild, shipped_build

    shipped = shipped_build(runtime)
    return LlamaBuild(runtime, tuple((p, shipped.program(p)) for p in programs),
                      f"{', '.join(programs)} --help in {folder}", detected=True, folder=folder)


def test_a_runtime_found_here_is_named_by_its_path_and_another_by_a_placeholder(advised):
    rec = advised["one-card"]
    builds = {"llama.cpp": _found_here("llama.cpp", "/opt/stock/bin")}
    stock = export_for(rec, rec.estimate_of("partition-first"), model_path=MODEL_PATH, builds=builds)
    assert stock.argv[0] == "/opt/stock/bin/llama-server" and stock.placeholders == ()
    # ik_llama.cpp was not found: its bare llama-server would run the stock one found here
    ik = export_for(rec, rec.estimate_of("partition-first"), runtime="ik_llama.cpp", model_path=MODEL_PATH,
                    builds=builds)
    (program,) = ik.placeholders
    assert ik.argv[0] == program.word == "llama-server"
    assert "ik_llama.cpp's llama-server" in program.put and "/opt/stock/bin/llama-server" in program.put
    assert "stock llama.cpp's" in program.put


def test_a_program_not_found_with_the_build_is_spelled_for_the_manifest_and_says_so(advised):
    """Only llama-server found: its llama-bench is spelled for the shipped manifest, the note says which
    and why, and the bare name stays (nothing says where that llama-bench is)."""
    rec = advised["one-card"]
    builds = {"llama.cpp": _found_here("llama.cpp", "/opt/stock/bin")}
    bench = export_for(rec, rec.estimate_of("partition-first"), binary="llama-bench", model_path=MODEL_PATH,
                       builds=builds)
    assert bench.argv[0] == "llama-bench" and bench.spelled_for.startswith("ggml-org/llama.cpp at ")
    assert any(n.startswith(f"spelled for {bench.spelled_for}: no llama-bench was found with the build of stock "
                            "llama.cpp read (llama-server --help in /opt/stock/bin)") for n in bench.notes), bench.notes
    name, words = program_of("llama.cpp", "llama-bench", bench.argv)
    assert not argv_problems(words, load("llama.cpp")["programs"][name])


def test_every_flag_of_a_stock_command_has_its_version_note(advised):
    """Spelled for the shipped manifest (no build read), a stock command says for every flag it
    prints what older builds take or since when builds have it (engine/llamacpp/llamacpp_flags.py
    `older`, `since`), unless every build since llama.cpp's 2023 releases has it (ALWAYS)."""
    from engine.llamacpp.llamacpp_flags import FLAG_TABLE, older_spellings, version_notes_cover

    seen = set()
    for case, rec in advised.items():
        for binary in runtime_named("llama.cpp").info.binaries:
            written: dict[str, str] = {}  # an option -> the first setting that writes it (-ncmoe: n_cpu_moe)
            for f in FLAG_TABLE:
                for sp in f.spelling.get(binary, ()):
                    written.setdefault(sp.option, f.setting)
            for estimate in rec.estimates:
                x = export_for(rec, estimate, binary=binary, model_path=MODEL_PATH)
                settings = [written[w] for w in x.argv[1:] if w in written]
                assert all(version_notes_cover(binary, k) for k in settings), (case, binary, settings)
                (spelled,) = [n for n in x.notes if n.startswith("spelled for ")]
                for note in older_spellings(binary, settings):
                    assert note in spelled, (note, spelled)
                seen.update((binary, k) for k in settings)
    # the placement flags' notes were exercised: -ot, --n-cpu-moe (server) and -ncmoe (bench), -fa, -lm
    assert {("llama-server", "override_tensor"), ("llama-server", "n_cpu_moe"), ("llama-bench", "n_cpu_moe"),
            ("llama-server", "flash_attn"), ("llama-server", "no_mmap"), ("llama-bench", "no_mmap")} <= seen


def test_every_stock_flag_cope_can_write_has_a_version_note():
    """Whatever command path writes it (exports, the expert cache's command, llama.cpp's own --fit
    comparison), every setting the flag table spells for a stock program has its version note or
    is one every build since 2023 has; the forks' own settings are pinned at their manifest's
    commit and have no history here."""
    from engine.llamacpp.llamacpp_flags import FLAG_TABLE, version_notes_cover

    forks_own = {"fork_n_cpu_moe", "cuda_offload_batch", "moe_cache_profile", "moe_cache_slots"}
    stock = load("llama.cpp")["programs"]
    missing = [(b, f.setting) for f in FLAG_TABLE if f.setting not in forks_own for b in f.spelling
               if b in stock and not version_notes_cover(b, f.setting)]
    assert not missing
