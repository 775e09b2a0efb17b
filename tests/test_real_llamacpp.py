"""Every command COPE exports for stock llama.cpp, run by the real llama-bench and
llama-server built from the pinned source (bench/llamacpp_build.py), on tiny GGUFs of three
architectures (tests/tiny_archs.py): qwen3moe, deepseek2 (a dense leading block, shared
experts) and gpt-oss.

For every candidate stock llama.cpp runs (layer partitions from the first and the last
blocks, every expert on the CPU, every expert on the GPU, staging every routed expert
with GGML_OP_OFFLOAD_MIN_BATCH=1) and one it does not (exported as its nearest), the
exported llama-bench command runs to completion with `-r 1 -n 4 -p 8`, and the exported
llama-server command starts, answers one completion on 127.0.0.1 and is stopped. A flag
the binary rejects fails the test. Commands are spelled twice: for the build's own
`--help` (what `cope detect` finds) and for COPE's shipped manifest (what a person with no
build found gets): both must run.

The binaries come from COPE_LLAMA_BIN (a folder; .ci/run builds them); without it these
tests are skipped. The CPU build runs `-ngl 99` and CUDA0-free overrides as llama.cpp
does on a machine without a GPU: every argument is parsed and the model runs.
"""

from __future__ import annotations

import os
from dataclasses import replace
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cope_tui.sources.gguf_model import model_from_gguf
from engine.hardware.memory import MemoryPlan
from engine.replays.policy import parse_candidate_id
from engine.runtimes.export import NOT_EXPRESSIBLE, ExportPlan, expert_regexes, export_candidate
from probes.runtimes import detect_runtimes
from tests.llama_server import complete, run_server
from tests.tiny_archs import ARCHS, write_tiny

BIN = os.environ.get("COPE_LLAMA_BIN", "")
pytestmark = [
    pytest.mark.real_runtimes,
    pytest.mark.skipif(not (BIN and os.path.isfile(os.path.join(BIN, "llama-bench"))
                            and os.path.isfile(os.path.join(BIN, "llama-server"))),
                       reason="COPE_LLAMA_BIN does not name a folder with llama-bench and llama-server "
                              "(python bench/llamacpp_build.py builds them)"),
]
CONTEXT = 256
THREADS = 2
BENCH_TEST = ("-r", "1", "-n", "4", "-p", "8")
MB = 1 << 20
COMPILED_OUT = {"--rpc", "-rpc"}  # llama-bench lists them only with RPC support (llama_supports_rpc())

# (candidate, plan): "partial" leaves slots for about half the experts, "fits" for all of
# them, "zero" for the staging buffer only.
CASES = (
    ("partition-first", "partial"),
    ("partition-last", "partial"),
    ("all-cpu", "partial"),
    ("all-gpu", "fits"),
    ("fixed.stage.uniform", "zero"),
    ("layer.stage.uniform.lru", "partial"),  # not expressible: its nearest runs
)


def _plan(model, kind: str) -> ExportPlan:  # type: ignore[no-untyped-def]
    total = model.n_experts_total
    slots = {"partial": total // 2, "fits": total + model.top_k, "zero": model.top_k}[kind]
    memory = MemoryPlan(vram_budget_bytes=slots * MB, non_expert_bytes=0, kv_cache_bytes=0, runtime_reserve_bytes=0,
                        safety_margin_bytes=0, staging_bytes=model.top_k * MB, expert_bytes=MB,
                        n_experts_total=total, n_routed_experts_per_layer=model.n_routed_experts,
                        context_tokens=CONTEXT)
    tpots = {"partition-first": 0.020, "partition-last": 0.021, "all-cpu": 0.040, "fixed.stage.uniform": 0.018,
             "layer.stage.uniform.lru": 0.017}
    if kind == "fits":
        tpots["all-gpu"] = 0.010
    popularity = np.ones((model.n_moe_layers, model.n_routed_experts), dtype=np.int64)
    return ExportPlan(memory, popularity, tuple(tpots.items()))


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tiny-ggufs")
    return {arch: write_tiny(folder / f"tiny-{arch}.gguf", arch) for arch in ARCHS}


@pytest.fixture(scope="module")
def found_build():  # type: ignore[no-untyped-def]
    """The build as `cope detect` reads it from the binaries' --help."""
    scan = detect_runtimes(BIN)
    assert scan.names[:1] == ("llama.cpp",), scan
    return scan.builds["llama.cpp"]


def _export(path: Path, cid: str, kind: str, binary: str, builds):  # type: ignore[no-untyped-def]
    model = model_from_gguf(path)
    return export_candidate(parse_candidate_id(cid), model, _plan(model, kind), binary=binary,
                            model_path=str(path), context=CONTEXT, threads=THREADS, builds=builds)


def _run_bench(argv: tuple[str, ...], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([os.path.join(BIN, "llama-bench"), *argv[1:], *BENCH_TEST], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **env}, stdin=subprocess.DEVNULL)


def _builds(spelled_for: str, found):  # type: ignore[no-untyped-def]
    return {"llama.cpp": found} if spelled_for == "found" else {}


@pytest.mark.parametrize("spelled_for", ["found", "shipped"])
@pytest.mark.parametrize("cid, kind", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("arch", ARCHS)
def test_the_exported_llama_bench_command_runs(ggufs, found_build, arch, cid, kind, spelled_for):
    export = _export(ggufs[arch], cid, kind, "llama-bench", _builds(spelled_for, found_build))
    assert found_build.rejected("llama-bench", export.argv) == []
    done = _run_bench(export.argv, export.env_dict)
    assert done.returncode == 0, f"{export.display()}\n{done.stderr[-3000:]}"
    assert "tg4" in done.stdout and "pp8" in done.stdout, done.stdout  # both tests ran and were reported


@pytest.mark.parametrize("spelled_for", ["found", "shipped"])
@pytest.mark.parametrize("cid, kind", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("arch", ARCHS)
def test_the_exported_llama_server_command_starts_and_answers(ggufs, found_build, arch, cid, kind, spelled_for):
    export = _export(ggufs[arch], cid, kind, "llama-server", _builds(spelled_for, found_build))
    assert found_build.rejected("llama-server", export.argv) == []
    argv = [os.path.join(BIN, "llama-server"), *export.argv[1:]]
    with run_server(argv, export.env_dict) as server:
        body = complete(server.base_url)
    assert body.get("tokens_predicted", 0) > 0 or body.get("content"), body


def test_the_placements_name_real_tensors_and_differ(ggufs, found_build):
    """The overrides COPE exports match the file's expert tensors (a pattern that matched
    nothing would run, but not as planned), and the partitions are the planned ones."""
    import re

    from gguf import GGUFReader

    for arch, path in ggufs.items():
        names = [t.name for t in GGUFReader(path).tensors]
        model = model_from_gguf(path)
        first = _export(path, "partition-first", "partial", "llama-server", {"llama.cpp": found_build})
        last = _export(path, "partition-last", "partial", "llama-server", {"llama.cpp": found_build})
        assert first.argv != last.argv, arch
        for pattern in expert_regexes(last):
            hits = [n for n in names if re.search(pattern, n)]
            assert hits and all("_exps" in n for n in hits), (arch, pattern)
            blocks = {int(n.split(".")[1]) for n in hits}
            assert max(blocks) == model.moe_blocks[-1], (arch, pattern)  # the last blocks go to the CPU
        not_run = _export(path, "layer.stage.uniform.lru", "partial", "llama-server", {"llama.cpp": found_build})
        assert not_run.label == NOT_EXPRESSIBLE and not_run.nearest_id is not None


def test_the_shipped_manifest_is_this_build(found_build):
    """With no build found, COPE spells for the manifest of the commit these binaries are
    built from (assets/runtime_flags/llama.cpp.json): every spelling of every setting COPE
    writes is taken by the manifest exactly when the binary's --help lists it, and the two
    lists agree but for the removed options --help lists to refuse them and those compiled
    out of a build without RPC."""
    from engine.llamacpp.builds import manifest, shipped_build
    from engine.llamacpp.llamacpp_flags import FLAG_TABLE

    shipped = shipped_build("llama.cpp")
    for binary in ("llama-server", "llama-bench"):
        for flag in FLAG_TABLE:
            for spelling in flag.spelling.get(binary, ()):
                assert shipped.takes(binary, spelling.option) == found_build.takes(binary, spelling.option), \
                    (binary, spelling)
        listed, helped = shipped.program(binary).options, found_build.program(binary).options
        removed = set(manifest("llama.cpp")["programs"][binary]["rejected"])  # listed by --help to refuse them
        assert helped - listed <= removed, (binary, sorted(helped - listed))
        assert listed - helped <= COMPILED_OUT, (binary, sorted(listed - helped))


def _two_card_export(path: Path, binary: str, builds):  # type: ignore[no-untyped-def]
    """The partition-first export of a plan over two RTX 3090s (issue 33): -ts and an -ot a card."""
    from engine.cost.request import AdviseRequest
    from engine.hardware.cpu_presets import get_cpu_preset
    from engine.hardware.platform import Platform
    from engine.hardware.presets import get_gpu_preset
    from engine.models.quant import get_quantization

    model = model_from_gguf(path)
    request = AdviseRequest(model, get_quantization(model.default_quant),
                            Platform(get_gpu_preset("2x rtx-3090"), get_cpu_preset("desktop-ddr5")),
                            0, CONTEXT, THREADS, None, None)  # type: ignore[arg-type]
    plan = replace(_plan(model, "partial"), request=request)
    return export_candidate(parse_candidate_id("partition-first"), model, plan, binary=binary, model_path=str(path),
                            context=CONTEXT, threads=THREADS, builds=builds)


def test_a_two_card_export_parses_its_split_and_names_cards_at_the_buffer_lookup(ggufs, found_build):
    """What a CPU build can check of a two-card command: its -ts value is taken (llama.cpp
    warns that a CPU build ignores it) and the rest runs once the per-card -ot buffers are
    left out; with them, the build stops at the buffer lookup (common/arg.cpp
    parse_tensor_buffer_overrides; llama-bench's own -ot parser says 'unrecognized buffer
    type' and lists the build's) since it has no CUDA0. That CUDA0 and CUDA1 are the names a CUDA build registers is read from the
    source (engine/hardware/gpu_backends.py), not run here."""
    path = ggufs["qwen3moe"]
    export = _two_card_export(path, "llama-server", {"llama.cpp": found_build})
    argv = list(export.argv)
    assert "-ts" in argv and any(a.endswith("=CUDA0") for a in argv), argv
    assert found_build.rejected("llama-server", export.argv) == []
    no_cards = [a for i, a in enumerate(argv) if not (a.endswith(("=CUDA0", "=CUDA1")) or
                                                       (a == "-ot" and argv[i + 1].endswith(("=CUDA0", "=CUDA1"))))]
    with run_server([os.path.join(BIN, "llama-server"), *no_cards[1:]], export.env_dict) as server:
        body = complete(server.base_url)
    assert body.get("tokens_predicted", 0) > 0 or body.get("content"), body
    bench = _two_card_export(path, "llama-bench", {"llama.cpp": found_build})
    assert "/" in bench.argv[list(bench.argv).index("-ts") + 1]  # llama-bench's ',' separates test configurations
    assert sum(a == "-ot" for a in bench.argv) == 1  # one test configuration: its overrides joined by ';'
    done = _run_bench(bench.argv, bench.env_dict)
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "unrecognized buffer type 'CUDA0'" in out and "Available buffer types:" in out


FORK_BIN = os.environ.get("COPE_FORK_BIN", "")


@pytest.mark.skipif(not (FORK_BIN and os.path.isfile(os.path.join(FORK_BIN, "llama-server"))),
                    reason="COPE_FORK_BIN does not name a folder with the MoE expert-cache fork's llama-server "
                           "(github.com/thecodacus/llama.cpp, branch fable5/moe-cache-readme)")
def test_the_fork_command_without_out_starts_with_its_profile(ggufs, tmp_path, monkeypatch):
    """The fork's command as `cope export` prints it without --out (issue 46): its profile is
    written to the cache folder's exports/ and named there by absolute path, so the fork
    opens it (a profile it cannot open leaves its cache off and every expert on the CPU);
    the server starts from another folder and answers."""
    from cope_tui.service.export import ExportAsk, write_side_files

    monkeypatch.setenv("COPE_CACHE_DIR", str(tmp_path / "cache"))
    path = ggufs["deepseek2"]  # an architecture the fork's cache is wired for
    model = model_from_gguf(path)
    side_dir = ExportAsk().side_dir
    export = export_candidate(parse_candidate_id("fixed.parallel.uniform"), model, _plan(model, "partial"),
                              runtime="fork", model_path=str(path), context=CONTEXT, threads=THREADS,
                              side_dir=side_dir)
    (profile,) = write_side_files(export, side_dir)
    argv = list(export.argv)
    assert argv[argv.index("--moe-cache-profile") + 1] == str(profile) and profile.is_file()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with run_server([os.path.join(FORK_BIN, "llama-server"), *argv[1:]], export.env_dict) as server:
        body = server.complete()
        log = server.log_path.read_text(errors="replace")
    assert body.get("tokens_predicted", 0) > 0 or body.get("content"), body
    assert "cannot open" not in log.lower() and "no CPU-resident MoE layers" not in log, log[-2000:]


def test_detect_reads_the_pinned_builds_version_text():
    """`cope detect` says what the pinned build's --version says (a source archive's build
    prints a version with no build number), not 'version not reported'."""
    done = subprocess.run([os.path.join(BIN, "llama-server"), "--version"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    printed = done.stdout + done.stderr
    (stock,) = [r for r in detect_runtimes(BIN).found if r.name == "llama.cpp"]
    assert stock.version != "version not reported", printed
    words = stock.version.replace("(", " ").replace(")", " ").replace("build ", " ").split()
    assert words and all(w.rstrip(",") in printed for w in words), (stock.version, printed)
