"""The row to run leads every front end; the fastest-on-paper candidate says which runtime it
would need (issue 30: rank 1 was a candidate no runtime runs, shown above the row to run)."""

from __future__ import annotations

import json

from cope_tui.cli import main
from cope_tui.exit_codes import EXIT_OK

FAST = ["--tokens", "200", "--cpu", "desktop-ddr5"]


def _table(out: str) -> list[str]:
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.lstrip().startswith("rank  llama.cpp flags, or candidate"))
    rows = []
    for line in lines[head + 1:]:
        if not line.strip() or not line.lstrip()[0].isdigit():
            break
        rows.append(line)
    return rows


def test_advise_text_lists_the_run_now_row_first(capsys):
    assert main(["advise", *FAST]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("Run this now: ")
    # the ranking's pick: first when llama.cpp's expert cache does not win, else the block after the cache's
    run_now = next(line for line in out.splitlines()
                   if line.startswith(("Run this now: ", "Without llama.cpp's expert cache")) and " with " in line
                   and "expert cache (b" not in line)
    rows = _table(out)
    first = rows[0].split()
    assert rows[0].endswith(("<- run now", "<- run now, baseline"))
    assert "stock" in first  # what runs now runs on a runtime
    assert "partition-first" in run_now and first[1] == "--n-cpu-moe"  # llama.cpp's flags, not the paper's id
    ranks = [int(r.split()[0]) for r in rows[1:]]
    assert ranks == sorted(ranks)  # the others keep their rank order
    # the default table holds only what some runtime runs; the rest is one line with no candidate named
    assert all(r.split("  ")[-1].split("<-")[0].strip() != "none" for r in rows)
    paper_only = [line for line in out.splitlines() if line.startswith("On paper only: ")]
    assert len(paper_only) == 1 and "--all lists them" in paper_only[0]
    # the fastest on paper is named by default only when some runtime runs it
    assert not any(line.startswith("Fastest on paper: ") and line.endswith("no runtime runs it yet")
                   for line in out.splitlines())
    assert main(["advise", *FAST, "--all"]) == EXIT_OK
    everything = capsys.readouterr().out
    assert any(line.startswith("Fastest on paper: ") for line in everything.splitlines())
    assert "On paper only (no runtime runs these yet" in everything


def test_advise_json_leads_with_run_now_and_labels_the_paper_optimum(capsys):
    assert main(["advise", "--json", *FAST]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    rec = doc["recommendation"]
    assert list(rec)[0] == "run_now"
    paper = rec["fastest_on_paper"]
    top = doc["candidates"][0]
    assert paper["candidate"] == top["id"] == rec["fastest_estimate"] and top["rank"] == 1
    exact = [r["name"] for r in top["runtimes"] if r["exact"] and r.get("fits_ram", True)]
    assert paper["runtimes"] == exact
    approx = [r["name"] for r in top["runtimes"] if not r["exact"] and r.get("fits_ram", True)]
    if exact:
        assert paper["runs_on"].startswith("runs on ")
    elif approx:
        assert paper["runs_on"].startswith("approximately on ")
    else:  # no runtime runs it, or none has the RAM
        assert paper["runs_on"] in ("no runtime runs it yet", "does not fit in RAM")
    assert paper["tpot_s"] <= rec["run_now"]["tpot_s"]


def test_estimate_says_what_runs_first_and_the_paper_optimum_apart(capsys):
    command = ["llama-server", "-m", "model.gguf", "-ngl", "99", "--n-cpu-moe", "24"]
    assert main(["estimate", "--model", "qwen3-30b-a3b", *FAST, "--json", "--", *command]) == EXIT_OK
    doc = json.loads(capsys.readouterr().out)
    runs, paper = doc["best_that_runs"], doc["best"]
    assert runs["runtime"] == "llama.cpp" and runs["tpot_s"] >= paper["tpot_s"]
    assert doc["export"]["exported"] == runs["id"]
    assert main(["estimate", "--model", "qwen3-30b-a3b", *FAST, "--", *command]) == EXIT_OK
    out = capsys.readouterr().out
    lead = out.index("COPE's best that stock llama.cpp runs:")
    assert runs["id"] in out[lead:].splitlines()[1]
    # On this plan the paper optimum is a candidate stock llama.cpp does not run: both are said,
    # the one to run first.
    assert runs["id"] != paper["id"]
    assert lead < out.index(f"Fastest on paper ({paper['runs_on']}):")
