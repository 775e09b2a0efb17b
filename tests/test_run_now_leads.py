"""The row to run leads every front end; the fastest-on-paper candidate says which runtime it
would need (issue 30: rank 1 was a candidate no runtime runs, shown above the row to run)."""

from __future__ import annotations

import json

from cope_tui.cli import main
from cope_tui.exit_codes import EXIT_OK

FAST = ["--tokens", "200", "--cpu", "desktop-ddr5"]


def _table(out: str) -> list[str]:
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.lstrip().startswith("rank  candidate"))
    rows = []
    for line in lines[head + 1:]:
        if not line.strip() or not line.lstrip()[0].isdigit():
            break
        rows.append(line)
    return rows


def test_advise_text_lists_the_run_now_row_first(capsys):
    assert main(["advise", *FAST]) == EXIT_OK
    out = capsys.readouterr().out
    run_now = out.splitlines()[0]
    assert run_now.startswith("Run this now: ")
    now_id = run_now.split()[3]
    rows = _table(out)
    first = rows[0].split()
    assert first[1] == now_id and rows[0].endswith(("<- run now", "<- run now, baseline"))
    assert "stock" in first  # what runs now runs on a runtime
    ranks = [int(r.split()[0]) for r in rows[1:]]
    assert ranks == sorted(ranks)  # the others keep their rank order
    paper = next(line for line in out.splitlines() if line.startswith("Fastest on paper: "))
    paper_row = next(r for r in rows if r.split()[0] == "1")
    assert paper.split()[3].rstrip(":") == paper_row.split()[1]
    if paper_row.split()[-1] == "none":
        assert paper.endswith("no runtime runs it yet")


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
