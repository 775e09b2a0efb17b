"""Finding installed runtimes: fake llama.cpp programs on PATH (or in --llama-bin), fake
importable sglang and kt_kernel packages, and what `cope detect` and `cope advise` say."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from cope_tui.cli import EXIT_INPUT, EXIT_OK, main
from probes.runtimes import detect_runtimes

pytestmark = pytest.mark.real_runtimes

STOCK_HELP = "-ngl, --gpu-layers N\n-ot, --override-tensor <tensor name pattern>=<buffer type>,...\n"
IK_HELP = STOCK_HELP + "-rtr,   --run-time-repack      repack tensors if interleaved variant is available\n"
FORK_HELP = STOCK_HELP + "--moe-cache-profile FNAME\n--moe-cache-slots N\n"


def fake_llama(folder: Path, help_text: str, build: int = 6500, commit: str = "abc1234",
               programs=("llama-server", "llama-cli", "llama-bench")) -> Path:
    """Programs that answer --version on stderr (as common/arg.cpp does) and --help."""
    folder.mkdir(parents=True, exist_ok=True)
    help_file = folder / "help.txt"
    help_file.write_text(help_text)
    for name in programs:
        script = folder / name
        script.write_text(
            "#!/bin/sh\n"
            'if [ "$1" = "--version" ]; then\n'
            f'  echo "version: {build} ({commit})" >&2\n'
            '  echo "built with cc for x86_64-linux-gnu" >&2\n'
            "  exit 0\n"
            "fi\n"
            f'cat "{help_file}"\n'
        )
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def fake_sglang_kt(root: Path, monkeypatch, *, with_metadata: bool = True) -> None:
    for package in ("sglang", "kt_kernel"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("raise ImportError('COPE must not import me')\n")
    if with_metadata:
        for dist, version in (("sglang_kt", "0.5.7"), ("kt_kernel", "0.4.2")):
            info = root / f"{dist}-{version}.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.replace('_', '-')}\n"
                                           f"Version: {version}\n")
    monkeypatch.syspath_prepend(str(root))


def test_stock_ik_and_fork_are_told_apart(tmp_path):
    for name, help_text in (("llama.cpp", STOCK_HELP), ("ik_llama.cpp", IK_HELP), ("fork", FORK_HELP)):
        folder = fake_llama(tmp_path / name, help_text, build=4321)
        scan = detect_runtimes(path=str(folder))
        llama = [r for r in scan.found if r.name != "sglang-kt"]
        assert [r.name for r in llama] == [name], scan
        assert llama[0].version == "build 4321 (abc1234)"
        assert llama[0].programs == ("llama-bench", "llama-cli", "llama-server") and llama[0].where == str(folder)


def test_llama_bin_replaces_path_and_a_missing_folder_is_said(tmp_path):
    on_path = fake_llama(tmp_path / "on-path", STOCK_HELP)
    elsewhere = fake_llama(tmp_path / "elsewhere", IK_HELP, programs=("llama-server",))
    scan = detect_runtimes(str(elsewhere), path=str(on_path))
    assert [r.name for r in scan.found if r.name != "sglang-kt"] == ["ik_llama.cpp"]
    assert scan.found[0].programs == ("llama-server",)
    scan = detect_runtimes(str(tmp_path / "nowhere"), path=str(on_path))
    assert "--llama-bin" in scan.notes[0] and "not a folder" in scan.notes[0]
    scan = detect_runtimes(path=str(tmp_path / "empty-path"))
    assert not [r for r in scan.found if r.name != "sglang-kt"] and "no llama-server" in scan.notes[0]


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_advise_refuses_a_llama_bin_that_is_no_folder(tmp_path, capsys, kind):
    # A mistyped --llama-bin would otherwise answer "not installed" and rank for the wrong runtime.
    target = tmp_path / "nowhere"
    if kind == "file":
        target.write_text("not a folder\n")
    assert main(["advise", "--tokens", "100", "--llama-bin", str(target)]) == EXIT_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cope: error: --llama-bin must be") and str(target) in err[0]


def test_a_program_that_cannot_run_becomes_a_note(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "llama-server").write_text("not a script")
    (folder / "llama-server").chmod(0o755)
    scan = detect_runtimes(path=str(folder))
    assert not [r for r in scan.found if r.name != "sglang-kt"]
    assert any("--version could not run" in n for n in scan.notes)


def test_sglang_and_kt_kernel_found_without_importing_them(tmp_path, monkeypatch):
    scan = detect_runtimes(path=str(tmp_path))
    if "sglang-kt" not in scan.names:
        assert any("sglang" in n and "not importable" in n for n in scan.notes)
    fake_sglang_kt(tmp_path / "site", monkeypatch)
    scan = detect_runtimes(path=str(tmp_path))
    (kt,) = [r for r in scan.found if r.name == "sglang-kt"]
    assert kt.version == "sglang-kt 0.5.7, kt-kernel 0.4.2"


def test_only_the_sglang_kt_distribution_counts(tmp_path, monkeypatch):
    """The official sglang (or one without metadata) lacks the kt flags COPE exports."""
    fake_sglang_kt(tmp_path / "site", monkeypatch, with_metadata=False)
    scan = detect_runtimes(path=str(tmp_path))
    if "sglang-kt" in scan.names:  # a real sglang-kt in this Python answers first
        pytest.skip("a real sglang-kt distribution is installed here")
    assert any("not sglang-kt (no package metadata says which)" in n and "pip install sglang-kt" in n
               for n in scan.notes)
    info = tmp_path / "site" / "sglang-0.5.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n")
    scan = detect_runtimes(path=str(tmp_path))
    assert "sglang-kt" not in scan.names
    assert any("sglang 0.5.9 is the official distribution" in n for n in scan.notes)


def test_cope_detect_lists_the_runtimes(tmp_path, monkeypatch, capsys):
    folder = fake_llama(tmp_path / "bin", FORK_HELP, build=7001)
    fake_sglang_kt(tmp_path / "site", monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path / "empty") + os.pathsep + os.environ.get("PATH", ""))
    assert main(["detect", "--no-measure", "--llama-bin", str(folder)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "Runtimes:" in out and "the llama.cpp MoE expert-cache fork" in out and "build 7001" in out
    assert "SGLang + kt-kernel" in out and "sglang-kt 0.5.7" in out
    assert main(["detect", "--no-measure", "--json", "--llama-bin", str(folder)]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in doc["runtimes"]["found"]} == {"fork", "sglang-kt"}


def test_advise_runs_now_on_what_is_installed(tmp_path, monkeypatch, capsys):
    """With the MoE-cache fork installed, the run-now answer is the per-expert candidate it
    runs; with only llama.cpp, the layer partition, and no "faster with" line pointing at
    itself. (DeepSeek-V2-Lite in 8 GiB: the fork is wired for deepseek2.)"""
    fast = ["--tokens", "100", "--cpu", "desktop-ddr5", "--model", "deepseek-v2-lite-chat", "--vram-budget", "8"]
    stock = fake_llama(tmp_path / "bin", STOCK_HELP)
    assert main(["advise", "--json", *fast, "--llama-bin", str(stock)]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    now, best = doc["recommendation"]["run_now"], doc["recommendation"]["best_overall"]
    assert now["runtime"] == "llama.cpp" and now["installed"] and now["candidate"] == "partition-first"
    assert best["runtime"] == "fork" and not best["installed"]
    assert doc["recommendation"]["installed_runtimes"] == ["llama.cpp"]
    fork = fake_llama(tmp_path / "fork-bin", FORK_HELP)
    assert main(["advise", "--json", *fast, "--llama-bin", str(fork)]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    now = doc["recommendation"]["run_now"]
    assert now == doc["recommendation"]["best_overall"]
    assert now["runtime"] == "fork" and now["installed"] and "--moe-cache-profile" in now["argv"]
    assert main(["advise", *fast, "--llama-bin", str(fork)]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith(f"Run this now: {now['candidate']} with the llama.cpp MoE expert-cache fork\n")
    assert "faster with" not in out.split("\n\n")[0]


# common/arg.cpp's usage lines for the flags whose spelling changed (before and after 2026-09-09).
OLD_LOADING = "--mmap, --no-mmap                    whether to memory-map model\n-fit,  --fit [on|off]\n"
NEW_LOADING = "-lm,   --load-mode MODE                 model loading mode (default: auto)\n-fit,  --fit [on|off]\n"
PARTIAL = ["export", "--candidate", "partition-first", "--tokens", "100", "--gpu", "rtx-4060-ti-16gb",
           "--cpu", "desktop-ddr5", "--json"]


@pytest.mark.parametrize("loading, expected", [(OLD_LOADING, ["--no-mmap"]), (NEW_LOADING, ["-lm", "none"])])
def test_commands_are_spelled_for_the_build_found(tmp_path, capsys, loading, expected):
    folder = fake_llama(tmp_path / "bin", STOCK_HELP + loading + "-ncmoe, --n-cpu-moe N\n-t, --threads N\n"
                        "-c, --ctx-size N\n-m, --model FNAME\n-fa, --flash-attn [on|off|auto]\n")
    assert main([*PARTIAL, "--llama-bin", str(folder)]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    argv = doc["argv"]
    assert argv[-len(expected):] == expected and "--fit" in argv
    assert doc["spelled_for"] == f"llama-bench, llama-cli, llama-server --help in {folder}"
    assert not any(n.startswith("spelled for") for n in doc["notes"])  # a build was read: no older spelling


def test_a_build_without_fit_or_the_new_flash_attn_gets_neither(tmp_path, capsys):
    # Before 2025-12-15 there was no --fit; -fa was a switch in older builds still.
    folder = fake_llama(tmp_path / "bin", STOCK_HELP + OLD_LOADING.splitlines()[0] + "\n-fa,   --flash-attn"
                        "                     enable Flash Attention\n-m, --model FNAME\n-ncmoe, --n-cpu-moe N\n"
                        "-c, --ctx-size N\n-t, --threads N\n")
    assert main([*PARTIAL, "--llama-bin", str(folder)]) == EXIT_OK
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert "--fit" not in argv and argv[argv.index("-fa") + 1] == "-c"  # -fa alone, then the context


def test_help_is_read_once_per_binary_and_again_when_it_changes(tmp_path):
    folder = fake_llama(tmp_path / "bin", STOCK_HELP + OLD_LOADING, programs=("llama-server",))
    counted = folder / "calls"
    server = folder / "llama-server"
    server.write_text(server.read_text().replace("#!/bin/sh\n", f"#!/bin/sh\necho x >> '{counted}'\n", 1))
    for _ in range(3):
        scan = detect_runtimes(path=str(folder))
    assert scan.builds["llama.cpp"].takes("llama-server", "--no-mmap")
    first = len(counted.read_text().splitlines())
    assert first == 3 + 1  # --version every time, --help once
    (folder / "help.txt").write_text(STOCK_HELP + NEW_LOADING)
    server.write_text(server.read_text() + "# rebuilt\n")  # a new binary: another size and mtime
    scan = detect_runtimes(path=str(folder))
    build = scan.builds["llama.cpp"]
    assert build.takes("llama-server", "--load-mode") and not build.takes("llama-server", "--no-mmap")
    # cope detect --json says what the commands are spelled for, and whether the cache flags are there.
    [found] = scan.to_dict()["found"][:1]
    assert found["spelling"] == ("llama-server: copies weights with -lm none, takes --fit off, "
                                 "no MoE cache flags")


@pytest.mark.parametrize("text, said", [
    ("version: 4321 (abc1234)\nbuilt with cc for x86_64-linux-gnu\n", "build 4321 (abc1234)"),
    # a build from a source archive (the pinned llama-cpp-python sdist's): no build number, no commit
    ("version: 0.5.0-dev (build 0, commit unknown)\nbuilt with GNU 13.3.0 for Linux x86_64\n",
     "0.5.0-dev (build 0, commit unknown)"),
    ("llama.cpp b7000 something new\n", "llama.cpp b7000 something new"),
    ("\n\n", "version not reported"),
])
def test_every_version_text_says_what_it_says(text, said):
    from probes.runtimes import version_of

    assert version_of(text) == said
