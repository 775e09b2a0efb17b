"""`cope estimate` keeps the user's -t (issue 45 item 4): priced at it, and in COPE's printed
command; only a -t above the CPU's logical threads is said, in one line, and the most it has used."""

from __future__ import annotations

import pytest

COMMAND = ["llama-server", "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-ngl", "99", "--n-cpu-moe", "25", "-c", "8192"]


def _estimate(cope_json, cpu: str, threads: int) -> dict:  # type: ignore[no-untyped-def]
    return cope_json("estimate", "--json", "--gpu", "rtx-3060-12gb", "--cpu", cpu, "--ram-gib", "64", "--",
                     *COMMAND, "-t", str(threads))


@pytest.mark.parametrize("cpu", ["ryzen-9-7950x", "desktop-ddr5", "core-ultra-7-155h"])
def test_the_users_threads_are_priced_and_kept_in_copes_command(cope_json, cpu):  # type: ignore[no-untyped-def]
    doc = _estimate(cope_json, cpu, 8)
    argv = doc["export"]["argv"]
    assert argv[argv.index("-t") + 1] == "8"
    assert not any("logical CPUs" in note for note in doc["notes"])
    # priced at 8 threads: the same command at -t 4 is slower (the CPU's layers on fewer cores), except on the
    # 155H, whose 6 P-cores beat 6 P + 2 E (even slices wait for the E-cores: tests/test_hybrid_cores.py)
    fewer = _estimate(cope_json, cpu, 4)
    if cpu == "core-ultra-7-155h":
        assert fewer["yours"]["tpot_s"] < doc["yours"]["tpot_s"]
    else:
        assert fewer["yours"]["tpot_s"] > doc["yours"]["tpot_s"]


def test_more_threads_than_the_cpu_has_are_said_once_and_use_the_most_it_has(run_cope, cope_json):  # type: ignore[no-untyped-def]
    # a Ryzen 5 7600: 6 cores, 12 threads
    doc = _estimate(cope_json, "ryzen-5-7600", 32)
    argv = doc["export"]["argv"]
    assert argv[argv.index("-t") + 1] == "12"
    said = [note for note in doc["notes"] if "logical CPUs" in note]
    assert said == ["32 threads are more than the 12 logical CPUs of the AMD Ryzen 5 7600: priced at 12 threads"]
    assert doc["yours"]["tpot_s"] == pytest.approx(_estimate(cope_json, "ryzen-5-7600", 12)["yours"]["tpot_s"],
                                                   rel=1e-12)
    code, out, _ = run_cope("estimate", "--gpu", "rtx-3060-12gb", "--cpu", "ryzen-5-7600", "--ram-gib", "64", "--",
                            *COMMAND, "-t", "32")
    assert code == 0 and out.count("logical CPUs") == 1
